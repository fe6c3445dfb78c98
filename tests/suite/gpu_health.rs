//! The GPU's health in the guard: NVML (the stand-in's, shims/nvml.c, with injected Xid events,
//! ECC counts and a hanging start) read on the guard's own thread, recorded at faults and in
//! the trace's environment, and a hardware-class Xid named as the cause of an asynchronous
//! error; the kernel log's Xid lines for the process (the stand-in driver writes one when a
//! kernel faults, CUDASHIM_KERNEL_LOG).

use crate::common;

use common::*;
use cublasguard_format::gpu_health::{GpuEventKind, GpuHealthState};
use cublasguard_format::trace::{Fault, FaultKind, InitCauseKind, Trace};

fn report_text(run: &Run) -> String {
    let out = std::process::Command::new(cli()).arg("report").arg(&run.trace_path).output().expect("report");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// scenarios.c's async case: the second GEMM's kernel faults (cudaErrorIllegalAddress). In
/// gemm mode, where the guard's synchronisation finds it at the GEMM however fast the stand-in
/// GPU is, so two runs' faults compare (under deferred where it surfaces depends on that speed).
fn async_fault(extra: &[(&str, &str)]) -> Run {
    let program = scenarios();
    let mut env = vec![("CUDASHIM_ASYNC_FAULT", "2"), ("CUBLASGUARD_SYNC", "gemm")];
    env.extend_from_slice(extra);
    run(Launch { env: &env, ..Launch::new(&program, &["async"]) })
}

fn the_async_fault(t: &Trace) -> &Fault {
    let faults = faults_of(t, FaultKind::AsyncError);
    assert_eq!(faults.len(), 1, "{:#?}", t.faults);
    faults[0]
}

#[test]
fn xid_79_during_a_gemm_makes_the_gpu_the_cause_with_nvidias_reboot_advice() {
    let nvml = with_standin_nvml();
    let run = async_fault(&[("LD_LIBRARY_PATH", &nvml), ("CUDASHIM_NVML_XID", "79")]);
    let t = run.trace();
    let f = the_async_fault(&t);
    assert_eq!(f.api, "cublasSgemm_v2");
    let cause = f.cause.as_ref().expect("a cause");
    assert_eq!((cause.kind, cause.xid), (InitCauseKind::GpuHardware, Some(79)), "{}", cause.message);
    assert!(cause.message.contains("reboot"), "{}", cause.message);
    let health = f.gpu_health.as_ref().expect("the GPU's health at the fault");
    assert_eq!(health.state, GpuHealthState::Ready);
    assert!(health.standin, "the stand-in NVML is named as such");
    assert!(health.events.iter().any(|e| e.kind == GpuEventKind::Xid && e.xid == Some(79)), "{:#?}", health.events);
    // The later failures of the lost context are the hardware's too.
    assert!(t.faults.iter().all(|f| f.cause.as_ref().is_some_and(|c| c.kind == InitCauseKind::GpuHardware)), "{:#?}", t.faults);
    let env = t.environment.gpu_health.as_ref().expect("the environment's GPU health");
    assert!(env.events.iter().any(|e| e.xid == Some(79)));
    assert!(run.stderr().contains("Xid 79"), "the stderr line says it: {}", run.stderr());
    let text = report_text(&run);
    assert!(text.contains("the GPU failed, not the program") && text.contains("Xid 79") && text.contains("reboot the node"), "{text}");
    assert!(text.contains("GPU health of pid"), "{text}");
    // Deferred (the default), with the GPU kept behind: found at the program's copy, pinned to
    // the GEMM by its breadcrumb, and the GPU is still the cause.
    let deferred =
        async_fault(&[("LD_LIBRARY_PATH", &nvml), ("CUDASHIM_NVML_XID", "79"), ("CUBLASGUARD_SYNC", "deferred"), ("CUDASHIM_WORKER_DELAY_US", "20000")]);
    let t = deferred.trace();
    let f = the_async_fault(&t);
    assert!(f.api == "cublasSgemm_v2" && f.found_at_seq.is_some(), "{f:#?}");
    assert_eq!(f.cause.as_ref().map(|c| (c.kind, c.xid)), Some((InitCauseKind::GpuHardware, Some(79))), "{f:#?}");
}

#[test]
fn xid_13_at_an_out_of_bounds_kernel_leaves_the_programs_call_as_the_cause_with_the_xid_recorded() {
    let program = build_c("launches", &["launches.c"], false);
    let nvml = with_standin_nvml();
    let env = [("LD_LIBRARY_PATH", nvml.as_str()), ("CUDASHIM_NVML_XID", "13"), ("CUBLASGUARD_SYNC", "launches")];
    let run = run(Launch { env: &env, ..Launch::new(&program, &[]) });
    let t = run.trace();
    let f = t.faults.iter().find(|f| f.api == "cudaLaunchKernel").expect("the launch's fault");
    assert_eq!(f.kind, FaultKind::AsyncError);
    assert_eq!(f.args["kernel"], "gather(float const*, long const*, float*, int)");
    assert_eq!(f.cause, None, "the program's own fault: {:#?}", f.cause);
    let health = f.gpu_health.as_ref().expect("health");
    assert!(health.events.iter().any(|e| e.xid == Some(13)), "the Xid is recorded: {:#?}", health.events);
    assert!(f.message.contains("Xid 13") && f.message.contains("the GPU is fine"), "{}", f.message);
    let text = report_text(&run);
    assert!(text.contains("gather(float const*") && text.contains("Xid 13") && text.contains("the GPU is fine"), "{text}");
    assert!(!text.contains("the GPU failed"), "{text}");
}

#[test]
fn the_kernel_logs_xid_line_for_this_process_is_recorded_and_a_hardware_one_is_the_cause_even_without_nvml() {
    let dir = temp_dir("kernel-log");
    let log = dir.join("kern.log");
    // Another process's Xid is in the log already: never this process's.
    std::fs::write(&log, "[  1.000000] NVRM: Xid (PCI:0000:00:00): 79, pid=1, name=other, GPU has fallen off the bus.\n").unwrap();
    let log_s = log.display().to_string();
    let run1 = async_fault(&[("CUDASHIM_KERNEL_LOG", &log_s), ("CUBLASGUARD_KERNEL_LOG", &log_s)]);
    let t = run1.trace();
    let f = the_async_fault(&t);
    let health = f.gpu_health.as_ref().expect("the kernel log's lines are worth recording without NVML");
    assert_eq!(health.state, GpuHealthState::Missing, "no NVML on the path");
    assert_eq!(health.kernel_log.len(), 1, "{:#?}", health.kernel_log);
    assert_eq!(health.kernel_log[0].xid, 13);
    assert!(health.kernel_log[0].line.contains(&format!("pid={}", t.process.pid)), "{:#?}", health.kernel_log);
    assert_eq!(f.cause, None, "Xid 13 is the program's own");
    // The stand-in driver logs Xid 79 for its fault this time.
    std::fs::write(&log, "").unwrap();
    let run2 = async_fault(&[("CUDASHIM_KERNEL_LOG", &log_s), ("CUBLASGUARD_KERNEL_LOG", &log_s), ("CUDASHIM_KERNEL_XID", "79")]);
    let t = run2.trace();
    let f = the_async_fault(&t);
    assert_eq!(f.cause.as_ref().map(|c| (c.kind, c.xid)), Some((InitCauseKind::GpuHardware, Some(79))), "{:#?}", f.gpu_health);
    // An unreadable log is said, not an error.
    let run3 = async_fault(&[("CUBLASGUARD_KERNEL_LOG", "/nonexistent/kmsg")]);
    let t = run3.trace();
    assert!(the_async_fault(&t).gpu_health.is_none(), "nothing to say: no NVML, no log");
}

#[test]
fn without_nvml_the_guard_records_the_same_faults_and_the_environment_says_it_is_missing() {
    let without = async_fault(&[]);
    let nvml = with_standin_nvml();
    let quiet = async_fault(&[("LD_LIBRARY_PATH", &nvml)]);
    let (a, b) = (without.trace(), quiet.trace());
    let summary = |t: &Trace| t.faults.iter().map(|f| (f.seq, f.api.clone(), f.kind, f.message.clone(), f.cause.clone())).collect::<Vec<_>>();
    assert_eq!(summary(&a), summary(&b), "a healthy GPU's NVML changes no fault");
    assert!(a.faults.iter().all(|f| f.gpu_health.is_none()), "{:#?}", a.faults);
    assert_eq!(a.environment.gpu_health.as_ref().map(|h| h.state), Some(GpuHealthState::Missing));
    assert_eq!(b.environment.gpu_health.as_ref().map(|h| h.state), Some(GpuHealthState::Ready));
    assert_eq!((without.stdout(), without.code()), (quiet.stdout(), quiet.code()));
    // CUBLASGUARD_NVML=0: never asked.
    let off = async_fault(&[("LD_LIBRARY_PATH", &nvml), ("CUBLASGUARD_NVML", "0"), ("CUDASHIM_NVML_XID", "79")]);
    let t = off.trace();
    assert_eq!(t.environment.gpu_health.as_ref().map(|h| h.state), Some(GpuHealthState::Off));
    assert_eq!(the_async_fault(&t).cause, None);
}

#[test]
fn a_hanging_nvml_start_never_holds_the_program_up() {
    let program = scenarios();
    let nvml = with_standin_nvml();
    // nvmlInit_v2 sleeps for an hour.
    // gemm mode named: its synchronisation after the faulting GEMM shows the third GEMM the
    // error, with or without NVML, whenever the stand-in GPU runs it (under deferred, what the
    // third GEMM sees depends on how far the GPU is behind).
    let env = [("LD_LIBRARY_PATH", nvml.as_str()), ("CUDASHIM_ASYNC_FAULT", "2"), ("CUBLASGUARD_SYNC", "gemm"), ("CUDASHIM_NVML_HANG", "1")];
    // The program as the guard without NVML leaves it.
    let reference = run(Launch { env: &[env[0], env[1], env[2], ("CUBLASGUARD_NVML", "0")], ..Launch::new(&program, &["async"]) });
    let guarded = run_within(Launch { env: &env, ..Launch::new(&program, &["async"]) }, std::time::Duration::from_secs(60))
        .expect("the program ended long before the hour nvmlInit sleeps");
    assert_eq!((guarded.stdout(), guarded.code()), (reference.stdout(), reference.code()), "{}", guarded.stderr());
    let lines =
        |r: &Run| r.stderr().lines().filter(|l| !l.contains("guarding pid")).map(|l| l.replace(r.trace_path.to_str().unwrap_or("-"), "T")).collect::<Vec<_>>();
    assert_eq!(lines(&guarded), lines(&reference), "the same faults said");
    let t = guarded.trace();
    let health = t.environment.gpu_health.as_ref().expect("health");
    assert!(matches!(health.state, GpuHealthState::Starting | GpuHealthState::Hung), "{health:#?}");
    assert!(health.note.as_deref().is_some_and(|n| n.contains("nvmlInit_v2")), "{health:#?}");
    let f = the_async_fault(&t);
    assert_eq!(f.cause, None);
    assert!(f.gpu_health.as_ref().is_some_and(|h| h.devices.is_empty()), "{:#?}", f.gpu_health);
}

#[test]
fn ecc_errors_that_grow_during_the_run_are_reported_and_name_the_memory_at_a_fault() {
    let nvml = with_standin_nvml();
    // The guard's start reads the four counts of the one device: every later read is higher.
    let grow = [("LD_LIBRARY_PATH", nvml.as_str()), ("CUDASHIM_NVML_ECC_GROW_AFTER", "4"), ("CUDASHIM_NVML_ECC_GROW_UNCORRECTED", "2")];
    let clean = scenario("clean", &grow);
    let t = clean.trace();
    let device = &t.environment.gpu_health.as_ref().expect("health").devices[0];
    assert_eq!(device.uncorrected_since_start(), Some(2), "{device:#?}");
    let run = async_fault(&grow);
    let t = run.trace();
    let f = the_async_fault(&t);
    assert_eq!(f.cause.as_ref().map(|c| (c.kind, c.xid)), Some((InitCauseKind::GpuHardware, Some(48))), "{:#?}", f.gpu_health);
    let text = report_text(&run);
    assert!(text.contains("2 uncorrected (double-bit) ECC error(s) since the guard started"), "{text}");
}

#[test]
fn heat_and_slowdowns_are_context_in_the_report_not_a_cause() {
    let nvml = with_standin_nvml();
    let run = async_fault(&[("LD_LIBRARY_PATH", &nvml), ("CUDASHIM_NVML_TEMP", "92"), ("CUDASHIM_NVML_CLOCK_REASONS", "0x40")]);
    let t = run.trace();
    let f = the_async_fault(&t);
    assert_eq!(f.cause, None);
    let text = report_text(&run);
    assert!(text.contains("gpu: stand-in device 0: 92 C, at its slowdown threshold"), "{text}");
    assert!(text.contains("hardware thermal slowdown"), "{text}");
}

#[test]
fn a_crash_trace_keeps_the_xid_events_that_had_arrived() {
    let nvml = with_standin_nvml();
    let run = scenario("fault_then_crash", &[("LD_LIBRARY_PATH", &nvml), ("CUDASHIM_NVML_XID", "94")]);
    let t = run.trace();
    assert!(t.crash.is_some(), "a crash trace: {}", run.stderr());
    let env = t.environment.gpu_health.as_ref().expect("the crash writer's environment has the health");
    assert!(env.events.iter().any(|e| e.xid == Some(94)), "{env:#?}");
    // The NaN fault itself carries no health: data, which the GPU's health does not explain,
    // so it never waits for NVML (issue 46, finding 7).
    let f = faults_of(&t, FaultKind::NonfiniteInput)[0];
    assert!(f.gpu_health.is_none(), "{:#?}", f.gpu_health);
}

#[test]
fn an_xid_that_arrives_between_faults_reaches_the_crash_writer() {
    // No fault: nothing rewrote the crash writer's head but the NVML thread, when the event came.
    let nvml = with_standin_nvml();
    let run = scenario("clean_then_crash", &[("LD_LIBRARY_PATH", &nvml), ("CUDASHIM_NVML_XID", "79")]);
    let t = run.trace();
    assert!(t.crash.is_some() && t.faults.is_empty(), "a crash trace without faults: {}", run.stderr());
    let env = t.environment.gpu_health.as_ref().expect("health");
    assert_eq!(env.state, GpuHealthState::Ready, "{env:#?}");
    assert!(env.events.iter().any(|e| e.xid == Some(79)), "{env:#?}");
}

#[test]
fn a_forked_child_leaves_nvml_to_its_parent() {
    let program = scenarios();
    let nvml = with_standin_nvml();
    let dir = temp_dir("fork-nvml");
    let pattern = dir.join("t-%p.json").display().to_string();
    let env = [("LD_LIBRARY_PATH", nvml.as_str()), ("CUBLASGUARD_TRACE", pattern.as_str())];
    let run = run(Launch { env: &env, trace: false, ..Launch::new(&program, &["fork"]) });
    assert!(run.output.status.success() && run.stdout().contains("child exit=0"), "{}{}", run.stdout(), run.stderr());
    let traces: Vec<Trace> =
        std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()).map(|e| cublasguard_format::trace::read(&e.path()).expect("trace")).collect();
    assert_eq!(traces.len(), 2);
    let states: Vec<_> =
        traces.iter().map(|t| (t.faults.iter().any(|f| f.kind == FaultKind::InvalidArgument), t.environment.gpu_health.as_ref().map(|h| h.state))).collect();
    assert!(states.contains(&(false, Some(GpuHealthState::Ready))), "the parent: {states:?}");
    assert!(states.contains(&(true, Some(GpuHealthState::Off))), "the child: {states:?}");
}
