//! Kernel launches in the flight recorder, the suspects of an error found pending, and the
//! launch-blocking mode that pins it to the launch.

use crate::common;

use common::*;
use cublasguard_format::trace::FaultKind;

fn launches(args: &[&str], env: &[(&str, &str)]) -> Run {
    let program = build_c("launches", &["launches.c"], false);
    run(Launch { env, ..Launch::new(&program, args) })
}

#[test]
fn an_error_pending_before_a_gemm_names_the_kernels_launched_since_the_device_was_clean() {
    // gemm mode: its synchronisation before the GEMM finds the error pending (under deferred it
    // surfaces at the GEMM's check or at the next launch, as the stand-in GPU gets to it:
    // breadcrumbs.rs). The stand-in GPU is kept 20 ms behind: under load its worker once ran
    // gather's faulting kernel before `scale` was launched, whose launch then returned the
    // error itself (CI), and the GEMM's fault was the lost context's, not the pending error.
    let run = launches(&[], &[("CUBLASGUARD_SYNC", "gemm"), ("CUDASHIM_WORKER_DELAY_US", "20000")]);
    assert!(run.stdout().contains("gather=0") && run.stdout().contains("sgemm="), "{}", run.stdout());
    let t = run.trace();
    let f = t.faults.iter().find(|f| f.api == "cublasSgemm_v2").expect("the GEMM's fault");
    assert_eq!(f.kind, FaultKind::AsyncError);
    assert!(f.message.contains("already pending before this call"), "{}", f.message);
    let names: Vec<&str> = f.suspects.iter().map(|s| s.kernel.as_str()).collect();
    assert_eq!(names.len(), 3, "{:#?}", f.suspects);
    assert_eq!(names[0], "fill(float*, int)");
    assert_eq!(names[1], "gather(float const*, long const*, float*, int)");
    assert!(names[2].starts_with("scale"), "the unregistered kernel named from its symbol: {}", names[2]);
    assert_eq!((f.suspects[1].grid, f.suspects[1].block), ([8, 1, 1], [256, 1, 1]));
    assert!(f.suspects.windows(2).all(|w| w[0].seq < w[1].seq), "oldest first");
    // Each with the line that launched it.
    let source = manifest_dir().join("tests/c/launches.c");
    for (suspect, kernel) in f.suspects.iter().zip(["fill", "gather", "scale"]) {
        let line = format!("launches.c:{} ", line_of(&source, &format!("/* LAUNCH {kernel} */")));
        assert!(suspect.backtrace.first().is_some_and(|l| l.contains(&line)), "{line}: {:#?}", suspect.backtrace);
    }
    let recorded: Vec<_> = t.recent_calls.iter().filter(|c| c.api == "cudaLaunchKernel").collect();
    assert_eq!(recorded.len(), 3);
    assert_eq!(recorded[0].args["kernel"], "fill(float*, int)");
    let report = std::process::Command::new(cli()).arg("report").arg(&run.trace_path).output().expect("report");
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(text.contains("one of these 3 kernels faulted") && text.contains("CUBLASGUARD_SYNC=launches"), "{text}");
    let scale = format!("launches.c:{} in main", line_of(&source, "/* LAUNCH scale */"));
    assert!(text.contains(&format!("{})", scale)) && text.matches("launched at ").count() >= 3, "each suspect's launching line: {text}");
}

#[test]
fn launch_blocking_mode_pins_the_error_to_the_launch_that_caused_it() {
    let run = launches(&[], &[("CUBLASGUARD_SYNC", "launches")]);
    let t = run.trace();
    let f = t.faults.iter().find(|f| f.api == "cudaLaunchKernel").expect("the launch's fault");
    assert_eq!(f.kind, FaultKind::AsyncError);
    assert_eq!(f.args["kernel"], "gather(float const*, long const*, float*, int)");
    assert_eq!(f.args["gridDim"], serde_json::json!([8, 1, 1]));
    assert_eq!(f.error.as_ref().map(|e| e.code), Some(700));
    assert!(
        !t.faults.iter().any(|x| x.api == "cublasSgemm_v2" && x.kind == FaultKind::AsyncError && x.message.contains("already pending")),
        "the GEMM is not blamed: {:#?}",
        t.faults
    );
    let report = std::process::Command::new(cli()).arg("report").arg(&run.trace_path).output().expect("report");
    assert!(String::from_utf8_lossy(&report.stdout).contains("gather(float const*"), "the report names the kernel");
}

#[test]
fn launch_blocking_mode_pins_a_fault_that_broke_the_context_before_the_guard_asked_about_the_stream() {
    // The guard asks whether the stream is capturing before it synchronises; when the kernel's
    // fault has already broken the context, that question fails with the fault: still this
    // launch's, not left for the GEMM to find.
    let run = launches(&["fast"], &[("CUBLASGUARD_SYNC", "launches")]);
    let t = run.trace();
    let f = t.faults.iter().find(|f| f.api == "cudaLaunchKernel").unwrap_or_else(|| panic!("the launch's fault: {:#?}", t.faults));
    assert_eq!(f.kind, FaultKind::AsyncError);
    assert_eq!(f.args["kernel"], "gather(float const*, long const*, float*, int)");
    let e = f.error.as_ref().expect("the error");
    assert_eq!((e.code, e.call.as_str()), (700, "cudaStreamIsCapturing"));
    assert!(f.message.contains("asked whether its stream was capturing"), "{}", f.message);
}

#[test]
fn a_fault_that_surfaces_at_the_programs_own_synchronisation_is_recorded_there_with_the_kernels_in_flight() {
    let program = build_c("launches", &["launches.c"], false);
    for (kind, api, surfaced) in [
        ("device", "cudaDeviceSynchronize", "surfaced at the program's own cudaDeviceSynchronize"),
        ("stream", "cudaStreamSynchronize", "surfaced at the program's own cudaStreamSynchronize"),
        ("copy", "cudaMemcpy", "surfaced at the program's own cudaMemcpy"),
        ("malloc", "cudaMalloc", "surfaced at cudaMalloc"),
    ] {
        // The stand-in GPU kept behind the host (as a busy GPU is): the gather's fault runs after
        // the program's next call began, whatever the guard did in between.
        let behind = [("CUDASHIM_WORKER_DELAY_US", "20000")];
        let bare = run(Launch { env: &behind, guarded: false, ..Launch::new(&program, &["sync", kind]) });
        let guarded = launches(&["sync", kind], &behind);
        // The program sees its error exactly as without the guard.
        assert_eq!(guarded.stdout(), bare.stdout(), "{kind}");
        assert!(guarded.stdout().contains(&format!("{kind} sync=700")), "{kind}: {}", guarded.stdout());
        let t = guarded.trace();
        let f = only_fault(&t);
        assert_eq!((f.kind, f.api.as_str()), (FaultKind::AsyncError, api), "{kind}: {:#?}", t.faults);
        assert!(f.message.contains(surfaced), "{}", f.message);
        assert_eq!(f.error.as_ref().map(|e| (e.code, e.call.as_str())), Some((700, api)));
        let names: Vec<&str> = f.suspects.iter().map(|s| s.kernel.as_str()).take(2).collect();
        assert_eq!(names, ["fill(float*, int)", "gather(float const*, long const*, float*, int)"], "{kind}");
        assert!(t.recent_calls.iter().any(|c| c.api == api && c.status == 700), "the call is recorded");
    }
}

#[test]
fn a_clean_synchronisation_is_recorded_and_no_fault() {
    let run = launches(&["many", "3"], &[]);
    let t = run.trace();
    assert!(t.faults.is_empty(), "{:#?}", t.faults);
    let sync = t.recent_calls.iter().find(|c| c.api == "cudaDeviceSynchronize").expect("recorded");
    assert_eq!(sync.status, 0);
}

#[test]
fn a_hundred_thousand_clean_launches_are_all_counted_without_a_fault() {
    let run = launches(&["many", "100000"], &[]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let t = run.trace();
    assert_eq!(t.summary.calls.get("cudaLaunchKernel"), Some(&100_000));
    assert!(t.faults.is_empty(), "{:#?}", t.faults);
    let last_launch = t.recent_calls.iter().rev().find(|c| c.api == "cudaLaunchKernel");
    assert_eq!(last_launch.map(|c| c.args["kernel"].to_json()), Some(serde_json::json!("fill(float*, int)")));
}

#[test]
fn launches_can_be_left_out_of_the_recorder() {
    let run = launches(&[], &[("CUBLASGUARD_CHECKS", "args,bounds,nan,sync")]);
    let t = run.trace();
    let f = t.faults.iter().find(|f| f.api == "cublasSgemm_v2").expect("the GEMM's fault");
    assert!(f.suspects.is_empty());
    assert!(t.recent_calls.iter().filter(|c| c.api == "cudaLaunchKernel").all(|c| !c.args.contains_key("kernel")));
}

#[test]
fn a_python_launch_pinned_by_launch_blocking_mode_names_the_python_line() {
    let script = manifest_dir().join("tests/python/launch_line.py");
    let script_s = script.display().to_string();
    let python = std::path::PathBuf::from("python3");
    let path = std::env::var("PATH").unwrap_or_default();
    let env = [("PATH", path.as_str()), ("CUBLASGUARD_SYNC", "launches")];
    let run = run(Launch { env: &env, ..Launch::new(&python, &[&script_s]) });
    assert!(run.stdout().contains("launch status 0"), "{}\n{}", run.stdout(), run.stderr());
    let t = run.trace();
    let f = t.faults.iter().find(|f| f.api == "cudaLaunchKernel").expect("the launch's fault");
    assert_eq!((f.kind, f.error.as_ref().map(|e| e.code)), (FaultKind::AsyncError, Some(700)));
    assert_eq!(f.args["gridDim"], serde_json::json!([64, 1, 1]));
    let line = std::fs::read_to_string(&script).unwrap().lines().position(|l| l.contains("# FRAME launch")).unwrap() as u32 + 1;
    let top = f.python_stack.first().expect("Python frames");
    assert_eq!((top.file.as_str(), top.line, top.function.as_str()), (script_s.as_str(), line, "embedding_lookup"));
}

#[test]
fn a_kernels_first_launch_leaves_the_programs_unread_error_as_it_was_in_every_mode() {
    for mode in
        [&[("CUBLASGUARD_SYNC", "deferred")][..], &[("CUBLASGUARD_SYNC", "gemm")], &[("CUBLASGUARD_SYNC", "launches")], &[("CUBLASGUARD_NAN_ORIGIN", "1")]]
    {
        for (kind, before, code) in [("config", "empty=9", 9), ("oom", "malloc=2", 2)] {
            let run = launches(&["pending", kind], mode);
            let out = run.stdout();
            assert!(out.contains(before) && out.contains("fill=0"), "{mode:?} {kind}: {out}");
            // cudaFuncGetParamInfo fails past the last parameter; that failure must not become
            // the program's last error.
            assert!(out.contains(&format!("peek={code} get={code} again=0")), "{mode:?} {kind}: {out}\n{}", run.stderr());
        }
    }
}

#[test]
fn a_launch_with_an_invalid_configuration_is_named_cuda_error_invalid_configuration() {
    let run = launches(&["pending", "config"], &[]);
    let t = run.trace();
    let f = t.faults.iter().find(|f| f.api == "cudaLaunchKernel").expect("the failed launch's fault");
    assert_eq!(f.status, 9);
    assert_eq!(f.status_name, "cudaErrorInvalidConfiguration");
    assert!(f.message.contains("cudaErrorInvalidConfiguration (9)"), "{}", f.message);
    assert!(!run.stderr().contains("cudaErrorUnrecognized"), "{}", run.stderr());
    assert!(run.stderr().contains("cudaErrorInvalidConfiguration"), "{}", run.stderr());
}
