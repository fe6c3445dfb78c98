//! Issue 28, the interception layer: guarded copies for every library a program loads (and
//! reloads), thread cancellation and `pthread_exit` passing through the hooks, a second copy
//! of the guard in `LD_PRELOAD`, and a `dlsym` interposer that finds "the next dlsym" by
//! version.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use cublasguard_format::trace::FaultKind;

/// Runs `program` as `common::run` does (guarded, a trace in the run's folder), killed and
/// failed if it has not ended within a minute: a swallowed cancellation would hang it.
fn run_bounded(program: &Path, args: &[&str], preload: &str, env: &[(&str, &str)]) -> Run {
    let dir = temp_dir(program.file_name().and_then(|f| f.to_str()).unwrap_or("run"));
    let trace_path = dir.join("trace.json");
    let s = standin();
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(&dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("LD_LIBRARY_PATH", format!("{}:{}", s.join("lib").display(), s.join("driver").display()))
        .env("LD_PRELOAD", preload)
        .env("CUBLASGUARD_TRACE", &trace_path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("start the program");
    let started = Instant::now();
    while child.try_wait().expect("wait for the program").is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let output = child.wait_with_output().expect("collect the killed program");
            panic!("{} {args:?} hung; stdout:\n{}", program.display(), String::from_utf8_lossy(&output.stdout));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().expect("collect the program's output");
    Run { output, dir, trace_path }
}

fn loader_cases() -> PathBuf {
    build_c("loader_cases", &["loader_cases.c"], false)
}

fn guarded(args: &[&str]) -> Run {
    run_bounded(&loader_cases(), args, &guard_lib().display().to_string(), &[])
}

fn vendored() -> String {
    standin().join("vendored/libcublas-5e3a1f0c.so.12").display().to_string()
}

/// The run ended well: status 0, what the program printed, a trace that parses.
fn ended_well(run: &Run, case: &str, expected: &str) -> cublasguard_format::trace::Trace {
    assert_eq!(run.code(), Some(0), "{case}: stdout:\n{}\nstderr:\n{}", run.stdout(), run.stderr());
    assert!(run.stdout().contains(expected), "{case}: {}", run.stdout());
    run.trace()
}

#[test]
fn a_thread_cancelled_inside_a_guarded_call_unwinds_to_its_start_and_the_process_goes_on() {
    for case in ["cancel-launch", "cancel-dlsym"] {
        let run = guarded(&[case]);
        let t = ended_well(&run, case, "joined: cancelled\nclean gemm=0\n");
        assert!(!run.stderr().contains("exception not rethrown"), "{case}: {}", run.stderr());
        assert_eq!(t.summary.calls.get("cudaLaunchKernel"), Some(&1), "{case}: the cancelled call was counted: {:?}", t.summary.calls);
        assert_eq!(t.summary.calls.get("cublasSgemm_v2"), Some(&1), "{case}: the GEMM after it is guarded: {:?}", t.summary.calls);
        assert!(t.faults.is_empty(), "{case}: {:#?}", t.faults);
    }
}

#[test]
fn a_thread_that_ends_itself_inside_a_guarded_call_ends_as_it_would_bare() {
    let run = guarded(&["exit-launch"]);
    let t = ended_well(&run, "exit-launch", "joined: exited 7\nclean gemm=0\n");
    assert_eq!(t.summary.calls.get("cublasSgemm_v2"), Some(&1), "{:?}", t.summary.calls);
}

#[test]
fn a_cancellation_request_waits_until_the_guards_own_writes_at_a_fault_are_done() {
    let run = guarded(&["cancel-at-fault"]);
    let t = ended_well(&run, "cancel-at-fault", "joined: cancelled\n");
    // The fault's line and record went out whole before the request took effect.
    assert!(run.stderr().contains("cublasguard: cublasSgemm_v2 #"), "{}", run.stderr());
    let f = only_fault(&t);
    assert_eq!((f.api.as_str(), f.kind), ("cublasSgemm_v2", FaultKind::OutOfBounds), "{}", f.message);
    assert_eq!(t.summary.calls.get("cublasSgemm_v2"), Some(&1), "{:?}", t.summary.calls);
}

#[test]
fn a_cancellation_request_waits_until_the_guard_has_started() {
    let run = guarded(&["cancel-first-call"]);
    let t = ended_well(&run, "cancel-first-call", "joined: cancelled\nclean gemm=0\n");
    assert!(run.stderr().contains("cublasguard: guarding pid"), "{}", run.stderr());
    assert!(!run.stderr().contains("internal error"), "{}", run.stderr());
    assert_eq!(t.summary.calls.get("cudaMalloc"), Some(&4), "the first call and the clean GEMM's three: {:?}", t.summary.calls);
    assert_eq!(t.summary.calls.get("cublasSgemm_v2"), Some(&1), "{:?}", t.summary.calls);
}

#[test]
fn a_thread_that_python_ends_while_the_guard_asks_for_its_frames_ends_cleanly() {
    // The frames are asked for on a reader thread (the faulting thread holds no GIL): Python
    // ends that one as it takes the GIL, and the faulting thread goes on as it would bare.
    let python = build_c("fake_python", &["fake_python.c"], true);
    let python = python.display().to_string();
    let run = guarded(&["python-exit", &python]);
    let t = ended_well(&run, "python-exit", "oob gemm=0\njoined: exited 1\n");
    assert!(!run.stderr().contains("internal error"), "{}", run.stderr());
    assert_eq!(t.summary.calls.get("cublasSgemm_v2"), Some(&2), "{:?}", t.summary.calls);
    let f = t.faults.iter().find(|f| f.kind == FaultKind::OutOfBounds).expect("the thread's fault");
    let note = f.python_stack_note.as_deref().unwrap_or_default();
    assert!(note.contains("Python frames not read: the GIL was not taken within 2 s"), "{note}");
}

#[test]
fn a_second_cublas_beside_the_runtime_cublaslt_and_driver_taken_with_dlsym_is_guarded() {
    let vendored = vendored();
    let run = guarded(&["xla", &vendored]);
    let t = ended_well(&run, "xla", "first gemm=0\nsecond create=0\nsecond gemm=0\n");
    assert_eq!(t.summary.calls.get("cublasSgemm_v2"), Some(&2), "both cuBLAS copies' GEMMs: {:?}", t.summary.calls);
    let f = only_fault(&t);
    assert_eq!((f.api.as_str(), f.kind), ("cublasSgemm_v2", FaultKind::OutOfBounds), "{}", f.message);
    assert!(f.message.starts_with("operand B ("), "{}", f.message);
    assert!(!run.stderr().contains("copies of"), "no copy went unguarded: {}", run.stderr());
}

#[test]
fn a_library_loaded_again_and_again_at_new_addresses_is_guarded_every_time() {
    let vendored = vendored();
    let loads = 12;
    let run = guarded(&["reload", &loads.to_string(), &vendored]);
    let t = ended_well(&run, "reload", &format!("distinct bases={loads}\n"));
    for api in ["cublasCreate_v2", "cublasSgemm_v2", "cublasDestroy_v2"] {
        assert_eq!(t.summary.calls.get(api), Some(&loads), "every load's {api}: {:?}", t.summary.calls);
    }
    let f = only_fault(&t);
    assert_eq!((f.api.as_str(), f.kind), ("cublasSgemm_v2", FaultKind::OutOfBounds), "the last load's GEMM: {}", f.message);
    assert!(!run.stderr().contains("copies of"), "{}", run.stderr());
}

#[test]
fn a_second_copy_of_the_guard_in_ld_preload_passes_through_with_one_warning() {
    let copy_dir = temp_dir("second-guard");
    let copy = copy_dir.join("libcublasguard.so");
    std::fs::copy(guard_lib(), &copy).expect("copy the guard library");
    let program = build_c("gemm_family", &["gemm_family.c"], false);
    for (order, preload) in [
        ("this build first", format!("{}:{}", guard_lib().display(), copy.display())),
        ("the copy first", format!("{}:{}", copy.display(), guard_lib().display())),
    ] {
        let run = run_bounded(&program, &["cublasSgemm_v2", "oob"], &preload, &[]);
        assert_eq!(run.code(), Some(0), "{order}: {}", run.stderr());
        let warnings = run.stderr().matches("another copy of the guard is already loaded").count();
        assert_eq!(warnings, 1, "{order}: {}", run.stderr());
        assert_eq!(run.stderr().matches("cublasguard: guarding pid").count(), 1, "{order}: {}", run.stderr());
        let traces: Vec<_> = std::fs::read_dir(&run.dir).expect("the run's folder").filter_map(Result::ok).map(|e| e.file_name()).collect();
        assert_eq!(traces.len(), 1, "{order}: one trace: {traces:?}");
        let t = run.trace();
        assert_eq!(t.summary.calls.get("cublasSgemm_v2"), Some(&1), "{order}: intercepted once: {:?}", t.summary.calls);
        assert_eq!(only_fault(&t).kind, FaultKind::OutOfBounds, "{order}");
    }
}

#[test]
fn a_dlsym_interposer_that_finds_the_next_dlsym_by_version_still_reaches_the_guards_copies() {
    let wrapper = build_c("vnext_wrapper", &["vnext_wrapper.c"], true);
    let program = build_c("dlsym_reach", &["dlsym_reach.c"], false);
    let preload = format!("{}:{}", wrapper.display(), guard_lib().display());
    let run = run_bounded(&program, &["oob"], &preload, &[]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    assert!(run.stderr().contains("vnext wrapper dlsym calls>0: 1"), "the wrapper was in the way: {}", run.stderr());
    let t = run.trace();
    let f = t.faults.iter().find(|f| f.api == "cublasSgemm_v2").unwrap_or_else(|| panic!("the GEMM went unguarded: {:#?}", t.faults));
    assert_eq!(f.kind, FaultKind::OutOfBounds, "{}", f.message);
    assert_eq!(t.summary.calls.get("cublasSgemm_v2"), Some(&1), "{:?}", t.summary.calls);
}
