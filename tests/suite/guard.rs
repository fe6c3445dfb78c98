//! The guard in real processes: C programs built against the stand-in stack, run under
//! LD_PRELOAD, with assertions on the parsed trace.

use crate::common;

use common::*;
use cublasguard_format::trace::{FaultKind, InitCauseKind};

fn operand<'a>(fault: &'a cublasguard_format::trace::Fault, name: &str) -> &'a cublasguard_format::trace::Operand {
    fault.operands.iter().find(|o| o.name == name).unwrap_or_else(|| panic!("no operand {name}: {fault:#?}"))
}

#[test]
fn clean_run_is_identical_to_unguarded_and_records_no_fault() {
    let program = scenarios();
    let bare = run(Launch { guarded: false, ..Launch::new(&program, &["clean"]) });
    let guarded = run(Launch::new(&program, &["clean"]));
    assert_eq!(bare.stdout(), guarded.stdout());
    assert_eq!(bare.code(), Some(0));
    assert_eq!(guarded.code(), Some(0));
    let trace = guarded.trace();
    assert!(trace.faults.is_empty(), "{:#?}", trace.faults);
    assert_eq!(trace.summary.faults, 0);
    assert_eq!(trace.summary.calls.get("cublasSgemm_v2"), Some(&2));
    assert_eq!(trace.summary.calls.get("cudaMalloc"), Some(&3));
    assert_eq!(trace.summary.calls.get("cublasCreate_v2"), Some(&1));
    assert_eq!(trace.format, "cublasguard-trace");
    assert_eq!(trace.process.pid as usize, trace.process.pid as usize);
    assert!(trace.process.argv.iter().any(|a| a == "clean"));
    assert_eq!(trace.environment.runtime_version, Some(12090));
    assert_eq!(trace.environment.cublas_version, Some(120903));
    assert_eq!(trace.environment.driver_version, Some(12090));
    assert!(trace.environment.driver.loaded);
    let sonames: Vec<&str> = trace.environment.libraries.iter().map(|l| l.soname.as_str()).collect();
    for want in ["libcudart.so.12", "libcublas.so.12", "libcuda.so.1"] {
        assert!(sonames.contains(&want), "{sonames:?}");
    }
    assert!(trace.environment.libraries.iter().all(|l| l.path.starts_with('/')));
    let last = trace.recent_calls.last().expect("recent calls");
    assert_eq!(last.api, "cublasDestroy_v2");
    assert!(trace.recent_calls.windows(2).all(|w| w[0].seq < w[1].seq));
}

#[test]
fn nonfinite_input_names_operand_counts_and_first_position() {
    for mode in ["deferred", "gemm"] {
        nonfinite_input_in(mode);
    }
}

fn nonfinite_input_in(mode: &str) {
    // The GPU 20 ms behind the host: a deferred verdict cannot land before the program's next
    // call (the guard's thread would otherwise, now and then, judge it first and number it
    // with the GEMM's own call).
    let run = scenario("nan_a", &[("CUBLASGUARD_SYNC", mode), ("CUDASHIM_WORKER_DELAY_US", "20000")]);
    let trace = run.trace();
    let f = only_fault(&trace);
    assert_eq!(f.kind, FaultKind::NonfiniteInput, "{mode}");
    assert_eq!(f.api, "cublasSgemm_v2");
    assert!(f.message.contains("operand A"), "{}", f.message);
    let a = operand(f, "A");
    assert_eq!((a.nan, a.inf), (Some(1), Some(1)));
    let first = a.first_nonfinite.expect("position");
    assert_eq!((first.row, first.col), (2, 1));
    assert_eq!(operand(f, "B").nan, Some(0));
    assert_eq!(f.args["m"], 4);
    assert_eq!(f.args["transa"], "N");
    assert_eq!(f.args["alpha"], 1.0);
    assert_eq!(f.status, 0);
    assert_eq!(f.status_name, "CUBLAS_STATUS_SUCCESS");
    let handle = f.handle.as_ref().expect("handle state");
    assert_eq!(handle.pointer_mode, "HOST");
    assert_eq!(handle.math_mode, "CUBLAS_DEFAULT_MATH");
    let memory = f.memory.expect("memory");
    assert_eq!(memory.tracked_live_count, 3);
    assert_eq!(memory.tracked_live_bytes, 3 * 64);
    // The device's free/total memory is the moment's: a verdict judged at the call has it; a
    // deferred one, judged later on the guard's thread, has not (it would be another moment's),
    // and says where it was found instead. The native call site is the call's in both: kept at
    // the call under `deferred` (the program's own line first).
    let at_the_call = mode == "gemm";
    assert_eq!((memory.free.is_some(), memory.total.is_some()), (at_the_call, at_the_call), "{mode}");
    assert!(f.backtrace.first().is_some_and(|frame| frame.contains("scenarios.c:")), "{mode}: {:#?}", f.backtrace);
    assert_eq!(f.found_at_seq.is_some(), !at_the_call, "{mode}");
    assert!(run.stderr().contains("cublasguard: cublasSgemm_v2 #"), "{}", run.stderr());
}

#[test]
fn nan_in_c_is_a_fault_only_when_beta_makes_cublas_read_it() {
    let quiet = scenario("nan_c_beta0", &[]);
    assert!(quiet.trace().faults.is_empty(), "{:#?}", quiet.trace().faults);
    let loud = scenario("nan_c_beta1", &[]);
    let trace = loud.trace();
    let f = only_fault(&trace);
    assert_eq!(f.kind, FaultKind::NonfiniteInput);
    assert!(f.message.contains("operand C"), "{}", f.message);
    assert_eq!(operand(f, "C").nan, Some(1));
}

#[test]
fn overflow_is_nonfinite_output_on_the_producing_call_and_nothing_else() {
    let trace = scenario("overflow", &[]).trace();
    let f = only_fault(&trace);
    assert_eq!(f.kind, FaultKind::NonfiniteOutput);
    let gemms: Vec<u64> = trace.recent_calls.iter().filter(|c| c.api == "cublasSgemm_v2").map(|c| c.seq).collect();
    assert_eq!(f.seq, gemms[0], "blamed the first GEMM, the one that overflowed");
    assert_eq!(operand(f, "C").inf, Some(16));
    assert_eq!(operand(f, "A").inf, Some(0));
}

#[test]
fn invalid_argument_names_the_rule() {
    let run = scenario("bad_lda", &[]);
    let trace = run.trace();
    let f = only_fault(&trace);
    assert_eq!(f.kind, FaultKind::InvalidArgument);
    assert_eq!(f.message, "lda = 3 but transa = N needs lda >= max(1, m) = 8");
    assert_eq!(f.status, 7);
    assert!(run.stdout().contains("sgemm status=7"));
}

#[test]
fn invalid_handle_after_destroy_and_for_a_stranger() {
    let trace = scenario("bad_handle", &[]).trace();
    let faults = faults_of(&trace, FaultKind::InvalidHandle);
    assert_eq!(faults.len(), 2, "{:#?}", trace.faults);
    assert!(faults[0].message.contains("destroyed by cublasDestroy at call #"), "{}", faults[0].message);
    assert!(faults[1].message.contains("not created by cublasCreate"), "{}", faults[1].message);
    assert!(faults.iter().all(|f| f.status == 1));
}

#[test]
fn host_pointer_is_named_and_the_device_fault_it_causes_is_attached() {
    let trace = scenario("host_pointer", &[]).trace();
    let f = only_fault(&trace);
    assert_eq!(f.kind, FaultKind::HostPointer);
    assert!(f.message.contains("operand A") && f.message.contains("not device memory"), "{}", f.message);
    let error = f.error.as_ref().expect("the illegal address surfaced by the guard's sync");
    assert_eq!((error.code, error.name.as_str()), (700, "cudaErrorIllegalAddress"));
    assert_eq!(operand(f, "A").allocation, None);
}

#[test]
fn out_of_bounds_names_the_allocation_and_the_overrun() {
    let trace = scenario("out_of_bounds", &[]).trace();
    let f = only_fault(&trace);
    assert_eq!(f.kind, FaultKind::OutOfBounds);
    assert!(f.message.contains("operand B") && f.message.contains("overruns it by 32 bytes"), "{}", f.message);
    let b = operand(f, "B");
    assert_eq!(b.bytes, Some(64));
    assert_eq!(b.allocation.as_ref().map(|a| a.size), Some(32));
}

#[test]
fn asynchronous_fault_is_pinned_to_the_call_that_caused_it() {
    let program = scenarios();
    // gemm mode named: its synchronisation is what makes the error visible one call earlier
    // (breadcrumbs.rs: under deferred the program sees it where it would bare).
    let env = [("CUDASHIM_ASYNC_FAULT", "2"), ("CUBLASGUARD_SYNC", "gemm")];
    let bare = run(Launch { env: &env, guarded: false, ..Launch::new(&program, &["async"]) });
    // Unguarded, the fault surfaces late: the faulting GEMM itself returns success, and the
    // error shows at a later call, the third GEMM or the copy after it, as the (asynchronous)
    // stand-in GPU gets to it.
    let out = bare.stdout();
    assert!(
        out.contains("sgemm status=0\nsgemm status=0\nsgemm status=0\nC copy=700")
            || out.contains("sgemm status=0\nsgemm status=0\nsgemm status=13\nC copy=700"),
        "{out}"
    );
    let guarded = run(Launch { env: &env, ..Launch::new(&program, &["async"]) });
    // Guarded, it surfaces where CUDA_LAUNCH_BLOCKING=1 would put it: the guard synchronised
    // right after the faulting GEMM, so the (sticky) error is visible to the very next call.
    assert!(guarded.stdout().contains("sgemm status=0\nsgemm status=0\nsgemm status=13\nC copy=700"), "{}", guarded.stdout());
    let trace = guarded.trace();
    let gemms: Vec<u64> = trace.recent_calls.iter().filter(|c| c.api == "cublasSgemm_v2").map(|c| c.seq).collect();
    let first = &trace.faults[0];
    assert_eq!(first.kind, FaultKind::AsyncError);
    assert_eq!(first.seq, gemms[1], "the second GEMM's kernel faulted");
    assert_eq!(first.error.as_ref().map(|e| e.code), Some(700));
    // The third GEMM fails because the context is gone; it is not blamed for the fault.
    let later = faults_of(&trace, FaultKind::ApiError);
    assert_eq!(later.len(), 1);
    assert_eq!(later[0].seq, gemms[2]);
    assert!(later[0].message.contains(&format!("since cudaErrorIllegalAddress (700) at call #{}", gemms[1])));
    assert!(faults_of(&trace, FaultKind::AsyncError).len() == 1);
}

#[test]
fn api_error_when_nothing_explains_a_failure() {
    let trace = scenario("api_error", &[("CUDASHIM_FAIL", "cublasSgemm_v2:1:14")]).trace();
    let f = only_fault(&trace);
    assert_eq!(f.kind, FaultKind::ApiError);
    assert_eq!((f.status, f.status_name.as_str()), (14, "CUBLAS_STATUS_INTERNAL_ERROR"));
}

#[test]
fn alloc_failed_records_size_and_memory_state() {
    let trace = scenario("alloc", &[("CUDASHIM_MEM_TOTAL", "1000000")]).trace();
    let f = only_fault(&trace);
    assert_eq!(f.kind, FaultKind::AllocFailed);
    assert_eq!(f.args["size"], 1u64 << 40);
    let memory = f.memory.expect("memory");
    assert_eq!(memory.total, Some(1_000_000));
    // The program's three buffers, and the handle's workspace (cuBLAS takes device memory for
    // it when the handle is created; the stand-in takes 64 KiB).
    assert_eq!(memory.free, Some(1_000_000 - 3 * 64 - (64 << 10)));
    assert_eq!(memory.tracked_live_bytes, 3 * 64);
}

#[test]
fn double_free_is_reported() {
    let trace = scenario("free_twice", &[]).trace();
    let f = only_fault(&trace);
    assert_eq!(f.api, "cudaFree");
    assert!(f.message.contains("not the start of a live allocation"), "{}", f.message);
}

#[test]
fn fault_records_the_handle_stream() {
    let run = scenario("streams", &[]);
    let stream = run.stdout().lines().find_map(|l| l.strip_prefix("stream=").map(str::to_string)).expect("stream");
    let trace = run.trace();
    let f = only_fault(&trace);
    assert_eq!(f.stream.as_deref(), Some(stream.as_str()));
    assert_eq!(f.handle.as_ref().map(|h| h.stream.as_str()), Some(stream.as_str()));
}

#[test]
fn capturing_stream_is_never_synchronised() {
    let run = scenario("capture", &[]);
    // A synchronisation during capture would have invalidated it: end=901.
    assert!(run.stdout().contains("end=0\n"), "{}", run.stdout());
    assert!(run.trace().faults.is_empty());
}

#[test]
fn pointer_mode_device_checks_scalars() {
    let run = scenario("device_scalars", &[]);
    assert!(run.stdout().contains("C copy=0 76 84"), "{}", run.stdout());
    let trace = run.trace();
    let f = only_fault(&trace);
    assert_eq!(f.kind, FaultKind::HostPointer);
    assert!(f.message.starts_with("alpha ("), "{}", f.message);
    assert_eq!(f.handle.as_ref().map(|h| h.pointer_mode.as_str()), Some("DEVICE"));
}

#[test]
fn the_guards_own_calls_leave_the_programs_last_error_alone() {
    let program = scenarios();
    let bare = run(Launch { guarded: false, ..Launch::new(&program, &["last_error"]) });
    let guarded = run(Launch::new(&program, &["last_error"]));
    assert!(bare.stdout().contains("last=2\n"));
    assert_eq!(bare.stdout(), guarded.stdout());
}

#[test]
fn library_loaded_with_rtld_local_is_guarded_and_forwarded() {
    let lib = build_c("scenario_lib", &["scenario_lib.c"], true);
    let main = build_c("dlopen_main", &["dlopen_main.c"], false);
    let lib_arg = lib.display().to_string();
    let args = [lib_arg.as_str()];
    let bare = run(Launch { guarded: false, ..Launch::new(&main, &args) });
    let guarded = run(Launch::new(&main, &args));
    assert_eq!(bare.stdout(), guarded.stdout());
    assert!(guarded.stdout().contains("lib sgemm=0 c=1 nan 3 nan"), "{}", guarded.stdout());
    assert!(!guarded.stderr().contains("cannot find the real"), "{}", guarded.stderr());
    let trace = guarded.trace();
    let f = only_fault(&trace);
    assert_eq!(f.kind, FaultKind::NonfiniteInput);
    assert_eq!(trace.summary.calls.get("cudaMalloc"), Some(&3));
}

#[test]
fn no_driver_is_an_init_failure_with_its_cause() {
    let program = scenarios();
    let run = run(Launch { driver: false, ..Launch::new(&program, &["init"]) });
    assert_eq!(run.code(), Some(3));
    assert!(run.stdout().contains("cudaGetDeviceCount=35 count=-1"), "{}", run.stdout());
    let trace = run.trace();
    // The program's own cudaGetDeviceCount is a probe (a note); cublasCreate is the fault.
    let faults = faults_of(&trace, FaultKind::InitFailed);
    assert_eq!(faults.len(), 1, "{:#?}", trace.faults);
    assert_eq!(faults[0].api, "cublasCreate_v2");
    let probe = trace.environment.probe.as_ref().expect("the probe's note");
    assert_eq!(probe.api, "cudaGetDeviceCount");
    for cause in [faults[0].cause.as_ref(), probe.cause.as_ref()] {
        let cause = cause.expect("cause");
        assert_eq!(cause.kind, InitCauseKind::NoDriver);
        assert!(cause.message.contains("no NVIDIA driver"), "{}", cause.message);
    }
    assert!(faults[0].message.contains("no NVIDIA driver"), "{}", faults[0].message);
    assert_eq!(probe.cause.as_ref().and_then(|c| c.device_count_status), Some(35));
    assert!(!trace.environment.driver.loaded);
    assert_eq!(trace.environment.driver_version, None);
    assert!(trace.environment.driver.error.as_deref().unwrap_or("").contains("no NVIDIA driver"));
}

#[test]
fn old_driver_is_named_with_both_versions() {
    let trace = scenario("init", &[("CUDASHIM_DRIVER_VERSION", "11080")]).trace();
    let f = &faults_of(&trace, FaultKind::InitFailed)[0];
    let cause = f.cause.as_ref().expect("cause");
    assert_eq!(cause.kind, InitCauseKind::DriverTooOld);
    assert_eq!((cause.driver_version, cause.runtime_version), (Some(11080), Some(12090)));
}

#[test]
fn on_fault_error_makes_the_faulting_call_fail() {
    let program = scenarios();
    let env = [("CUBLASGUARD_ON_FAULT", "error")];
    let run = run(Launch { env: &env, ..Launch::new(&program, &["nan_a"]) });
    assert!(run.stdout().contains("sgemm status=13"), "{}", run.stdout());
    let trace = run.trace();
    assert_eq!(only_fault(&trace).status, 13);
    let run2 = common::run(Launch { env: &env, ..Launch::new(&program, &["overflow"]) });
    assert!(run2.stdout().contains("sgemm status=13\nsgemm status=0"), "{}", run2.stdout());
}

#[test]
fn on_fault_abort_writes_the_trace_then_aborts() {
    let program = scenarios();
    let env = [("CUBLASGUARD_ON_FAULT", "abort")];
    let run = run(Launch { env: &env, ..Launch::new(&program, &["nan_a"]) });
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(run.output.status.signal(), Some(libc::SIGABRT));
    let trace = run.trace();
    assert_eq!(only_fault(&trace).kind, FaultKind::NonfiniteInput);
}

#[test]
fn bad_configuration_is_named_and_changes_nothing() {
    let program = scenarios();
    let env = [("CUBLASGUARD_CHECKS", "args,speed"), ("CUBLASGUARD_RING", "many")];
    let bare = run(Launch { guarded: false, ..Launch::new(&program, &["nan_a"]) });
    let run = run(Launch { env: &env, ..Launch::new(&program, &["nan_a"]) });
    assert_eq!(bare.stdout(), run.stdout());
    assert_eq!(run.code(), Some(0));
    let err = run.stderr();
    assert!(err.contains("CUBLASGUARD_CHECKS='args,speed' ignored"), "{err}");
    assert!(err.contains("CUBLASGUARD_RING='many' ignored"), "{err}");
    assert_eq!(only_fault(&run.trace()).kind, FaultKind::NonfiniteInput, "defaults (all checks) apply");
}

#[test]
fn checks_can_be_narrowed() {
    let trace = scenario("nan_a", &[("CUBLASGUARD_CHECKS", "args,bounds")]).trace();
    assert!(trace.faults.is_empty());
    // With the argument check off, the call's failure is still reported, as a bare api_error.
    let trace = scenario("bad_lda", &[("CUBLASGUARD_CHECKS", "none")]).trace();
    assert_eq!(only_fault(&trace).kind, FaultKind::ApiError);
}

#[test]
fn with_args_and_bounds_only_a_gemm_faults_as_with_every_check() {
    // With `args,bounds` a clean plain GEMM skips its handler (the hook layer's lean path);
    // one the checks would find something in must not: each fault found before the call is
    // the same as with every check on, and a clean run's GEMMs are recorded all the same.
    let cases = ["bad_lda", "bad_handle", "host_pointer", "out_of_bounds", "use_after_free", "device_scalars"].map(|c| (c, None));
    // A clean call the library fails: forwarded once, then described for its api_error fault.
    // gemm mode: the kernel fault a bad operand then causes is found at the call as the fault's
    // `error`; under deferred, with `sync` on, it surfaces later and is added to the message.
    const GEMM_MODE: (&str, &str) = ("CUBLASGUARD_SYNC", "gemm");
    for (case, fail) in cases.into_iter().chain([("api_error", Some(("CUDASHIM_FAIL", "cublasSgemm_v2:1:14")))]) {
        let narrowed = scenario(case, &[GEMM_MODE, ("CUBLASGUARD_CHECKS", "args,bounds")].into_iter().chain(fail).collect::<Vec<_>>()).trace();
        let all = scenario(case, &[GEMM_MODE].into_iter().chain(fail).collect::<Vec<_>>()).trace();
        // Addresses differ from run to run: compared without their digits.
        let unaddressed = |m: &str| {
            m.split("0x")
                .enumerate()
                .map(|(i, p)| if i == 0 { p.to_string() } else { p.trim_start_matches(|c: char| c.is_ascii_hexdigit()).to_string() })
                .collect::<Vec<_>>()
                .join("0x")
        };
        let seen = |t: &cublasguard_format::trace::Trace| t.faults.iter().map(|f| (f.kind, f.api.clone(), f.seq, unaddressed(&f.message))).collect::<Vec<_>>();
        assert!(!narrowed.faults.is_empty(), "{case}");
        assert_eq!(seen(&narrowed)[0], seen(&all)[0], "{case}");
    }
    let run = scenario("clean", &[("CUBLASGUARD_CHECKS", "args,bounds")]);
    assert_eq!(run.code(), Some(0));
    let trace = run.trace();
    assert!(trace.faults.is_empty(), "{:#?}", trace.faults);
    let gemms: Vec<_> = trace.recent_calls.iter().filter(|c| c.api == "cublasSgemm_v2").collect();
    assert_eq!(gemms.len(), 2);
    assert!(gemms.iter().all(|c| c.status == 0 && c.args["m"].as_i64().is_some() && c.args["transa"] == "N"), "{gemms:#?}");
}

#[test]
fn default_trace_is_written_only_when_a_fault_occurred() {
    let program = scenarios();
    let clean = run(Launch { trace: false, ..Launch::new(&program, &["clean"]) });
    let files: Vec<_> = std::fs::read_dir(&clean.dir).unwrap().filter_map(|e| e.ok()).collect();
    assert!(files.is_empty(), "{files:?}");
    let faulty = run(Launch { trace: false, ..Launch::new(&program, &["nan_a"]) });
    let names: Vec<String> = std::fs::read_dir(&faulty.dir).unwrap().filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(names.len(), 1, "{names:?}");
    let trace = cublasguard_format::trace::read(&faulty.dir.join(&names[0])).expect("valid trace");
    let host = &trace.process.hostname;
    assert!(!host.is_empty() && names[0].starts_with(&format!("cublasguard-{host}-")) && names[0].ends_with(".json"), "{names:?}");
    assert_eq!(trace.faults.len(), 1);
    assert!(faulty.stderr().contains(&names[0]), "stderr names the trace: {}", faulty.stderr());
}

#[test]
fn example_workload_under_the_guard() {
    let mlp = standin().join("bin/mlp");
    let bare = run(Launch { guarded: false, ..Launch::new(&mlp, &[]) });
    let guarded = run(Launch::new(&mlp, &[]));
    assert_eq!(bare.stdout(), guarded.stdout());
    assert_eq!(guarded.code(), Some(0));
    assert!(guarded.trace().faults.is_empty());
    let nan = run(Launch::new(&mlp, &["--inject", "nan"]));
    let trace = nan.trace();
    let first = &trace.faults[0];
    assert_eq!(first.kind, FaultKind::NonfiniteInput);
    assert_eq!(first.args["transa"], "T", "issued like PyTorch's nn.Linear");
    let b = operand(first, "B");
    assert_eq!((b.rows, b.cols), (8, 32), "the input batch: 8 features x 32 samples");
    let pos = b.first_nonfinite.expect("position");
    assert_eq!((pos.row, pos.col), (2, 3), "feature 2 of sample 3");
}

#[test]
fn scan_every_and_budget_sample_scans_but_never_the_argument_checks() {
    let mlp = standin().join("bin/mlp");
    // Every call site (shape) is scanned on its first call only.
    let env = [("CUBLASGUARD_SCAN_EVERY", "1000000")];
    let run = run(Launch { env: &env, ..Launch::new(&mlp, &["--inject", "nan", "--epochs", "3"]) });
    let t = run.trace();
    assert!(t.summary.scanned_calls > 0 && t.summary.skipped_scans > 0, "{:?}", t.summary);
    assert_eq!(t.summary.scanned_calls + t.summary.skipped_scans, 15, "every GEMM decided once");
    let first = &t.faults[0];
    assert_eq!(first.kind, FaultKind::NonfiniteInput, "the first call of the first layer was scanned");
    let gemms: Vec<bool> = t.recent_calls.iter().filter(|c| c.api == "cublasSgemm_v2").map(|c| c.scanned).collect();
    assert!(gemms.contains(&true) && gemms.contains(&false), "{gemms:?}");
    // Argument checks still run on unscanned calls.
    let env = [("CUBLASGUARD_SCAN_EVERY", "1000000")];
    let lda = common::run(Launch { env: &env, ..Launch::new(&mlp, &["--inject", "lda"]) });
    assert_eq!(only_fault(&lda.trace()).kind, FaultKind::InvalidArgument);
    // A tiny budget skips most scans once the first ones have used it up.
    let env = [("CUBLASGUARD_BUDGET", "0.000001")];
    let t = common::run(Launch { env: &env, ..Launch::new(&mlp, &["--epochs", "20"]) }).trace();
    assert!(t.summary.skipped_scans > t.summary.scanned_calls, "{:?}", t.summary);
}

/// The stand-in's per-function call counts of one run (CUDASHIM_COUNT_CALLS).
fn runtime_calls(guarded: bool, checks: &str) -> std::collections::BTreeMap<String, u64> {
    runtime_calls_scanning(guarded, checks, "off")
}

/// As `runtime_calls`, with the scan on the device (`on`) or the host (`off`).
fn runtime_calls_scanning(guarded: bool, checks: &str, device_scan: &str) -> std::collections::BTreeMap<String, u64> {
    calls_scanning(guarded, checks, device_scan, "CUDASHIM_COUNT_CALLS")
}

/// The stand-in driver's counts of the functions the guard calls (CUDASHIM_COUNT_DRIVER_CALLS).
fn driver_calls_scanning(guarded: bool, checks: &str, device_scan: &str) -> std::collections::BTreeMap<String, u64> {
    calls_scanning(guarded, checks, device_scan, "CUDASHIM_COUNT_DRIVER_CALLS")
}

/// In gemm mode: these counts pin what its synchronisations and call-time scans cost (deferred
/// mode's host-blocking calls are breadcrumbs.rs's).
fn calls_scanning(guarded: bool, checks: &str, device_scan: &str, counter: &str) -> std::collections::BTreeMap<String, u64> {
    let env = [("CUBLASGUARD_SYNC", "gemm"), ("CUBLASGUARD_CHECKS", checks), ("CUBLASGUARD_DEVICE_SCAN", device_scan)];
    counted_calls(&scenarios(), &["clean"], guarded, &env, counter)
}

/// The stand-in's per-function counts (`counter` names the file variable) of one run of
/// `program args`.
fn counted_calls(program: &std::path::Path, args: &[&str], guarded: bool, env: &[(&str, &str)], counter: &str) -> std::collections::BTreeMap<String, u64> {
    let dir = temp_dir("counts");
    let file = dir.join("counts.txt").display().to_string();
    let mut env = env.to_vec();
    env.push((counter, file.as_str()));
    let run = run(Launch { env: &env, guarded, ..Launch::new(program, args) });
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    std::fs::read_to_string(&file).expect("counts").lines().filter_map(|l| l.split_once(' ').map(|(name, n)| (name.to_string(), n.parse().unwrap()))).collect()
}

#[test]
fn the_guard_makes_only_the_runtime_calls_its_checks_need() {
    let bare = runtime_calls(false, "all");
    let extra = |counts: &std::collections::BTreeMap<String, u64>| -> std::collections::BTreeMap<String, u64> {
        counts.iter().map(|(name, n)| (name.clone(), n - bare.get(name).copied().unwrap_or(0))).filter(|(_, n)| *n > 0).collect()
    };
    // Two GEMMs: the first with beta = 0 (C is not read before), the second with beta = 1.
    // Per GEMM: one look at the program's pending error, one capture query, a synchronisation
    // before and after, and one copy plus its synchronisation per operand read (A, B, C before
    // when beta != 0; C after). The versions are asked once, when the guard starts (each of
    // those looks at the pending error too).
    let all = extra(&runtime_calls(true, "all"));
    let expect: std::collections::BTreeMap<String, u64> = [
        ("cudaPeekAtLastError", 2 + 2),
        ("cudaStreamIsCapturing", 2),
        ("cudaStreamSynchronize", 5 + 6),
        ("cudaMemcpyAsync", 3 + 4),
        ("cudaRuntimeGetVersion", 1),
        ("cudaDriverGetVersion", 1),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(all, expect);
    // With the scan on the device, the copies go: the runtime sees only the pending-error look,
    // the capture query and the synchronisations around each GEMM (the scans are driver calls).
    let device = extra(&runtime_calls_scanning(true, "all", "on"));
    let expect_device: std::collections::BTreeMap<String, u64> =
        [("cudaPeekAtLastError", 2 + 2), ("cudaStreamIsCapturing", 2), ("cudaStreamSynchronize", 4), ("cudaRuntimeGetVersion", 1), ("cudaDriverGetVersion", 1)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
    assert_eq!(device, expect_device);
    // And the driver calls of the device scans: one batched launch per phase (the first GEMM,
    // beta = 0: A and B before, C after; the second, beta = 1: A, B and C before, C after), each
    // a context query, one memset, the launch and one read-back (into pageable memory, so it
    // waits for the launch: no synchronisation of its own); once, the
    // module, its two kernels and the self-test (six single launches with two memsets each, and
    // one batched launch).
    let driver = driver_calls_scanning(true, "all", "on");
    let phases = 4;
    let expect_driver: std::collections::BTreeMap<String, u64> = [
        ("cuCtxGetCurrent", phases),
        ("cuModuleLoadData", 1),
        ("cuModuleGetFunction", 2),
        // Once: the context's device, whose multiprocessors size the scan's grid.
        ("cuCtxGetDevice", 1),
        ("cuMemsetD8Async", phases + 2 * 6 + 1),
        ("cuLaunchKernel", phases + 6 + 1),
        ("cuMemcpyDtoHAsync_v2", phases + 6 + 1),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(driver, expect_driver);
    assert!(driver_calls_scanning(true, "all", "off").is_empty(), "the host path makes no driver call of its own");
    // Argument and bounds checks alone make no runtime call per GEMM.
    let cheap = extra(&runtime_calls(true, "args,bounds"));
    assert_eq!(cheap.keys().map(String::as_str).collect::<Vec<_>>(), ["cudaDriverGetVersion", "cudaPeekAtLastError", "cudaRuntimeGetVersion"], "{cheap:?}");
    assert_eq!(cheap["cudaPeekAtLastError"], 2, "only the start-up version queries");
}

#[test]
fn execution_failed_at_the_first_gemm_records_the_devices_architecture() {
    let env = [("CUDASHIM_FAIL", "cublasSgemm_v2:1:13"), ("CUDASHIM_COMPUTE_CAPABILITY", "12.0")];
    let run = scenario("clean", &env);
    let t = run.trace();
    let f = t.faults.iter().find(|f| f.api == "cublasSgemm_v2").expect("the first GEMM's fault");
    assert_eq!((f.kind, f.status), (FaultKind::ApiError, 13));
    assert_eq!(f.device.as_ref().map(|d| d.compute_capability.as_str()), Some("12.0"));
    let report = std::process::Command::new(cli()).arg("report").arg(&run.trace_path).output().expect("report");
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(text.contains("sm_120") && text.contains("without kernels for this device's architecture"), "{text}");
    // ARCH_MISMATCH at any GEMM is recorded the same way; EXECUTION_FAILED at a later GEMM is not.
    let t = scenario("clean", &[("CUDASHIM_FAIL", "cublasSgemm_v2:2:8")]).trace();
    assert_eq!(t.faults.iter().find(|f| f.status == 8).and_then(|f| f.device.as_ref()).map(|d| d.compute_capability.as_str()), Some("9.0"));
    let t = scenario("clean", &[("CUDASHIM_FAIL", "cublasSgemm_v2:2:13")]).trace();
    assert!(t.faults.iter().all(|f| f.device.is_none()), "{:#?}", t.faults);
    // Nor where the first GEMM was clean on the hook layer's lean path, which notes no call.
    for checks in ["none", "args,bounds"] {
        let t = scenario("clean", &[("CUDASHIM_FAIL", "cublasSgemm_v2:2:13"), ("CUBLASGUARD_CHECKS", checks)]).trace();
        let f = t.faults.iter().find(|f| f.api == "cublasSgemm_v2").expect("the second GEMM's fault");
        assert_eq!((f.status, f.device.as_ref().map(|d| d.compute_capability.as_str())), (13, None), "{checks}: {f:#?}");
    }
}

#[test]
fn a_freed_buffer_passed_to_a_gemm_is_use_after_free_naming_the_free() {
    let run = scenario("use_after_free", &[]);
    let t = run.trace();
    let f = only_fault(&t);
    assert_eq!(f.kind, FaultKind::UseAfterFree, "{}", f.message);
    let freed = f.freed_by.as_ref().expect("freed_by");
    let free_call = t.recent_calls.iter().find(|c| c.api == "cudaFree").expect("the free in the recorder");
    assert_eq!((freed.api.as_str(), freed.seq, freed.size), ("cudaFree", free_call.seq, 64));
    assert_eq!(freed.base, operand(f, "A").ptr);
    assert!(f.message.contains(&format!("released by cudaFree at call #{}", free_call.seq)), "{}", f.message);
    let report = std::process::Command::new(cli()).arg("report").arg(&run.trace_path).output().expect("report");
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(text.contains("use after free") && !text.contains("move the tensor to the GPU"), "{text}");
}

#[test]
fn a_python_programs_faults_carry_its_frames_on_the_main_thread_and_on_a_thread() {
    let script = manifest_dir().join("tests/python/frames.py");
    let python = std::path::PathBuf::from("python3");
    let script_s = script.display().to_string();
    // ctypes releases the GIL around the call: at a verdict judged at the call (gemm mode) the
    // guard takes it back for a moment; for one judged later (the default) the frames were
    // read from CPython's structures at the call.
    let path = std::env::var("PATH").unwrap_or_default();
    for mode in ["deferred", "gemm"] {
        let run = run(Launch { env: &[("PATH", &path), ("CUBLASGUARD_SYNC", mode)], ..Launch::new(&python, &[&script_s]) });
        assert!(run.stdout().contains("done"), "{mode}: the program finished (no deadlock with a busy thread)\n{}\n{}", run.stdout(), run.stderr());
        let t = run.trace();
        assert!(t.environment.python_version.as_deref().is_some_and(|v| v.starts_with('3')), "{:?}", t.environment.python_version);
        let nan: Vec<_> = t.faults.iter().filter(|f| f.kind == FaultKind::NonfiniteInput).collect();
        assert_eq!(nan.len(), 2, "{mode}: {:#?}", t.faults);
        for caller in ["forward_main", "forward_worker"] {
            let fault = nan.iter().find(|f| f.python_stack.get(1).is_some_and(|s| s.function == caller));
            let fault = fault.unwrap_or_else(|| panic!("{mode}: no fault from {caller}: {nan:#?}"));
            let frames = &fault.python_stack;
            assert_eq!(
                (frames[0].file.as_str(), frames[0].function.as_str(), frames[0].line),
                (script_s.as_str(), "gemm", line_of(&script, "# FRAME gemm")),
                "{mode} {caller}"
            );
            assert_eq!(frames[1].line, line_of(&script, &format!("# FRAME {caller}")), "{mode} {caller}");
            assert!(fault.python_stack_note.is_none());
        }
        // The report leads with the user's line.
        let report = std::process::Command::new(cli()).arg("report").arg(&run.trace_path).output().expect("report");
        let text = String::from_utf8_lossy(&report.stdout);
        assert!(text.contains(&format!("frames.py:{} in gemm", line_of(&script, "# FRAME gemm"))), "{mode}: {text}");
    }
}

#[test]
fn a_c_programs_faults_have_no_python_frames() {
    let t = scenario("nan_a", &[]).trace();
    let f = only_fault(&t);
    assert!(f.python_stack.is_empty() && f.python_stack_note.is_none());
    assert!(t.environment.python_version.is_none());
}

#[test]
fn a_fault_on_a_thread_without_python_frames_says_why() {
    let lib = build_c("native_worker", &["native_worker.c"], true);
    let dir = temp_dir("native-worker");
    let script = dir.join("calls_native.py");
    std::fs::write(&script, format!("import ctypes\nlib = ctypes.CDLL({:?})\nprint('status', lib.nan_gemm_on_a_native_thread())\n", lib.display().to_string()))
        .unwrap();
    let python = std::path::PathBuf::from("python3");
    let script_s = script.display().to_string();
    let run = run(Launch { env: &[("PATH", &std::env::var("PATH").unwrap_or_default())], ..Launch::new(&python, &[&script_s]) });
    assert!(run.stdout().contains("status 0"), "{}\n{}", run.stdout(), run.stderr());
    let t = run.trace();
    let f = t.faults.iter().find(|f| f.kind == FaultKind::NonfiniteInput).expect("the native thread's fault");
    assert!(f.python_stack.is_empty());
    assert_eq!(f.thread_name.as_deref(), Some("native-worker"));
    let note = f.python_stack_note.as_deref().expect("a note");
    assert!(note.starts_with("native-worker: this thread runs no Python code"), "{note}");
}

#[test]
fn native_frames_are_named_even_for_functions_the_library_does_not_export() {
    // scenarios.c calls cuBLAS from `static int gemm(...)`: only the symbol table names it.
    // gemm mode named: a NaN verdict judged at the call has the native backtrace (a deferred
    // one, judged on the guard's thread, has none).
    let t = scenario("nan_a", &[("CUBLASGUARD_SYNC", "gemm")]).trace();
    let f = only_fault(&t);
    let frame = f.backtrace.iter().find(|l| l.starts_with("gemm ")).unwrap_or_else(|| panic!("{:#?}", f.backtrace));
    // Built with -g: the source line too.
    assert!(frame.starts_with("gemm at ") && frame.contains("tests/c/scenarios.c:"), "{frame}");
    assert!(frame.contains("/scenarios-") && frame.contains("+0x") && frame.ends_with(']'), "{frame}");
    assert!(f.backtrace.iter().any(|l| l.starts_with("main ")), "{:#?}", f.backtrace);
}

#[test]
fn an_ignore_rule_counts_the_faults_it_matches_and_leaves_the_others() {
    // Matches: counted under its rule, not stored, not printed.
    let run = scenario("nan_a", &[("CUBLASGUARD_IGNORE", "kind=nonfinite_input,api=cublasSgemm_v2,operand=A,m=4")]);
    let t = run.trace();
    assert!(t.faults.is_empty(), "{:#?}", t.faults);
    assert_eq!(t.summary.faults, 0);
    assert_eq!(t.summary.ignored_faults.get("kind=nonfinite_input,api=cublasSgemm_v2,operand=A,m=4"), Some(&1));
    assert!(!run.stderr().contains("[nonfinite_input]"), "not printed: {}", run.stderr());
    let report = std::process::Command::new(cli()).arg("report").arg(&run.trace_path).output().expect("report");
    assert!(
        String::from_utf8_lossy(&report.stdout).contains("ignored by CUBLASGUARD_IGNORE 'kind=nonfinite_input,api=cublasSgemm_v2,operand=A,m=4': 1 fault(s)")
    );
    // Rules that must not match leave the fault alone; a bad rule is named at start.
    let run = scenario("nan_a", &[("CUBLASGUARD_IGNORE", "operand=B; m=5; kind=out_of_bounds; colour=blue")]);
    let t = run.trace();
    assert_eq!(t.faults.len(), 1);
    assert_eq!(t.summary.ignored_faults.values().sum::<u64>(), 0);
    assert!(run.stderr().contains("CUBLASGUARD_IGNORE rule 'colour=blue' is ignored: unknown key"), "{}", run.stderr());
}

#[test]
fn an_ignore_rule_by_python_line_keeps_the_fault_from_another_line() {
    let script = manifest_dir().join("tests/python/frames.py");
    let script_s = script.display().to_string();
    let rule = format!("py=frames.py:{}", line_of(&script, "# FRAME forward_main"));
    let path = std::env::var("PATH").unwrap_or_default();
    // In both modes: the rule matches the Python frames, kept at the call for a verdict judged
    // later.
    for mode in ["deferred", "gemm"] {
        let env = [("PATH", path.as_str()), ("CUBLASGUARD_IGNORE", rule.as_str()), ("CUBLASGUARD_SYNC", mode)];
        let run = run(Launch { env: &env, ..Launch::new(std::path::Path::new("python3"), &[&script_s]) });
        let t = run.trace();
        assert_eq!(t.summary.ignored_faults.get(&rule), Some(&1), "{mode}: the main thread's fault");
        assert_eq!(t.faults.len(), 1, "{mode}: the worker's fault is kept");
        assert_eq!(t.faults[0].python_stack[1].function, "forward_worker", "{mode}");
    }
}

#[test]
fn a_batch_is_scanned_with_one_synchronisation_per_operand_on_either_path() {
    // cublasSgemmStridedBatched, 3 members of 4 x 4, beta = 0: A and B before, C after.
    let program = build_c("gemm_family", &["gemm_family.c"], false);
    // gemm mode named: the synchronisations counted are its own (under deferred the scans'
    // reads are queued, never waited for).
    let counts = |guarded: bool, device_scan: &str| {
        let env = [("CUBLASGUARD_SYNC", "gemm"), ("CUBLASGUARD_DEVICE_SCAN", device_scan)];
        counted_calls(&program, &["cublasSgemmStridedBatched", "clean"], guarded, &env, "CUDASHIM_COUNT_CALLS")
    };
    let bare = counts(false, "off");
    let extra = |name: &str, c: &std::collections::BTreeMap<String, u64>| c.get(name).copied().unwrap_or(0) - bare.get(name).copied().unwrap_or(0);
    // Host: every member copied, one synchronisation per operand (not per member), plus the
    // guard's own before and after.
    let host = counts(true, "off");
    assert_eq!((extra("cudaMemcpyAsync", &host), extra("cudaStreamSynchronize", &host)), (3 * 3, 2 + 3));
    // Device: nothing copied through the runtime; the two scan launches are driver calls.
    let device = counts(true, "on");
    assert_eq!((extra("cudaMemcpyAsync", &device), extra("cudaStreamSynchronize", &device)), (0, 2));
}
