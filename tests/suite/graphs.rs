//! CUDA graphs (issue 52): the guard never disturbs a capture, whatever the capture mode and
//! whichever thread makes the first guarded call, in both modes; and a captured GEMM is never
//! counted as scanned at capture. The stand-in enforces NVIDIA's capture rules (shims/engine.c):
//! a page-locking, an allocation or a module load during a capture the thread's mode forbids
//! is refused and invalidates the capture, and captured work runs only at each replay.

use crate::common::*;
use cublasguard_format::trace::FaultKind;

const MODES: [&str; 2] = ["deferred", "gemm"];

fn graphs() -> std::path::PathBuf {
    build_c("graphs", &["graphs.c"], false)
}

/// Runs `case` of tests/c/graphs.c, guarded in `mode` (None: without the guard).
fn run_case(case: &str, mode: Option<&str>) -> Run {
    let program = graphs();
    let args = [case];
    let env = [("CUBLASGUARD_SYNC", mode.unwrap_or("deferred"))];
    let run = run_within(Launch { env: &env, guarded: mode.is_some(), ..Launch::new(&program, &args) }, std::time::Duration::from_secs(60))
        .unwrap_or_else(|| panic!("{case} {mode:?}: still running after a minute"));
    assert_eq!(run.code(), Some(0), "{case} {mode:?}:\n{}\n{}", run.stdout(), run.stderr());
    run
}

/// What the program printed for a capture that went well and a replay that computed C.
fn assert_captured_and_replayed(run: &Run, case: &str, mode: Option<&str>, c: &str) {
    let out = run.stdout();
    for line in ["begin=0\n", "end=0\n", "captured C=0\n", "instantiate=0\n", "sync=0\n", &format!("\nC={c}\n")] {
        assert!(out.contains(line), "{case} {mode:?}: no {line:?} in\n{out}\n{}", run.stderr());
    }
    assert!(!out.contains("launch "), "{case} {mode:?}: a replay failed:\n{out}");
}

#[test]
fn the_stand_in_refuses_what_each_capture_mode_forbids_and_the_refusal_invalidates_the_capture() {
    // NVIDIA's rules (cudaThreadExchangeStreamCaptureMode): in Global mode a thread may not make
    // a potentially unsafe call (here cudaMalloc) while it captures (unless its capture is
    // Relaxed) or while another thread runs a Global capture; in ThreadLocal mode only its own
    // capture counts; in Relaxed mode nothing does. The same with the guard in both modes.
    let expected = "own_global malloc=900 end=901\n\
                    own_thread_local malloc=900 end=901\n\
                    own_relaxed_capture malloc=0 end=0\n\
                    own_relaxed_thread malloc=0 end=0\n\
                    other_global malloc=900 end=901\n\
                    other_thread_local_capture malloc=0 end=0\n\
                    other_thread_local_thread malloc=0 end=0\n\
                    other_relaxed_thread malloc=0 end=0\n";
    for mode in [None, Some("deferred"), Some("gemm")] {
        assert_eq!(run_case("rules", mode).stdout(), expected, "{mode:?}");
    }
}

#[test]
fn a_first_gemm_inside_a_global_capture_is_captured_and_replayed_correctly_in_both_modes() {
    assert_captured_and_replayed(&run_case("global", None), "global", None, "8");
    for mode in MODES {
        let run = run_case("global", Some(mode));
        assert_captured_and_replayed(&run, "global", Some(mode), "8");
        assert!(run.stdout().contains("gemm=0\n"), "{mode}: {}", run.stdout());
        assert!(run.trace().faults.is_empty(), "{mode}: {:#?}", run.trace().faults);
    }
}

#[test]
fn a_first_gemm_inside_a_thread_local_capture_is_captured_and_replayed_correctly_in_both_modes() {
    assert_captured_and_replayed(&run_case("thread_local", None), "thread_local", None, "8");
    for mode in MODES {
        let run = run_case("thread_local", Some(mode));
        assert_captured_and_replayed(&run, "thread_local", Some(mode), "8");
        assert!(run.trace().faults.is_empty(), "{mode}: {:#?}", run.trace().faults);
    }
}

#[test]
fn another_threads_first_gemm_during_a_global_capture_leaves_the_capture_intact_in_both_modes() {
    assert_captured_and_replayed(&run_case("other_thread", None), "other_thread", None, "2");
    for mode in MODES {
        let run = run_case("other_thread", Some(mode));
        assert_captured_and_replayed(&run, "other_thread", Some(mode), "2");
        assert!(run.stdout().contains("other gemm=0 C=8\n"), "{mode}: {}", run.stdout());
        let trace = run.trace();
        assert!(trace.faults.is_empty(), "{mode}: {:#?}", trace.faults);
        // The other thread's GEMM ran outside any capture: it is checked as any call is.
        let gemm = trace.recent_calls.iter().find(|c| c.api == "cublasSgemm_v2").expect("the other thread's GEMM");
        assert!(gemm.scanned, "{mode}: {gemm:?}");
    }
}

#[test]
fn a_captured_gemm_is_not_counted_as_scanned_at_its_capture() {
    for mode in MODES {
        let run = run_case("nan", Some(mode));
        assert!(run.stdout().contains("end=0\n"), "{mode}: {}", run.stdout());
        let trace = run.trace();
        let gemm = trace.recent_calls.iter().find(|c| c.api == "cublasSgemm_v2").expect("the captured GEMM");
        assert!(!gemm.scanned && gemm.captured, "{mode}: {gemm:?}");
        assert_eq!(trace.summary.scanned_calls, 0, "{mode}: {:?}", trace.summary);
        assert_eq!(trace.summary.captured_calls, 1, "{mode}: {:?}", trace.summary);
    }
}

/// The first frame of `fault`'s backtrace in the C program's own source: "file.c:139".
fn own_line(fault: &cublasguard_format::trace::Fault) -> Option<String> {
    fault.backtrace.iter().find_map(|frame| {
        let (_, after) = frame.split_once(" at ")?;
        let location = after.split_whitespace().next()?;
        location.contains("/tests/c/").then(|| location.rsplit('/').next().unwrap_or(location).to_string())
    })
}

#[test]
fn in_both_modes_a_nan_read_by_a_captured_gemm_is_found_at_the_graphs_first_replay_with_the_captured_line() {
    // A[1,2] is NaN; the GEMM is captured, the graph replayed four times. Nothing is scanned at
    // the capture; the first replay is scanned after it ran (in the default mode by a scan
    // queued after it and judged later), and blamed, naming the captured call, its operand and
    // element, and the line where it was captured (graphs.c, built -g). The graph instantiated
    // as the runtime's examples do, and as PyTorch does (with flags).
    for case in ["nan", "nan_flags", "driver"] {
        let told = MODES.map(|mode| replay_finds_the_nan(case, mode));
        assert_eq!(told[0], told[1], "{case}: the default mode tells the replay's NaN as gemm mode does");
    }
}

/// The run's faults as both modes must tell them alike: kind, function, call, message, the
/// program's own line, and how many replays were blamed.
fn replay_finds_the_nan(case: &str, mode: &str) -> Vec<(FaultKind, String, u64, String, Option<String>)> {
    let run = run_case(case, Some(mode));
    assert!(run.stdout().contains("end=0\n") && run.stdout().contains("sync=0\n"), "{}", run.stdout());
    let trace = run.trace();
    let gemm = trace.recent_calls.iter().find(|c| c.api == "cublasSgemm_v2").expect("the captured GEMM").seq;
    let launch = if case == "driver" { "cuGraphLaunch" } else { "cudaGraphLaunch" };
    let first_launch = trace.recent_calls.iter().find(|c| c.api == launch).expect("a replay").seq;
    let f = trace.faults.first().unwrap_or_else(|| panic!("{case} {mode}: no fault: {}", run.stderr()));
    assert_eq!((f.kind, f.api.as_str(), f.seq), (FaultKind::NonfiniteInput, launch, first_launch), "{case} {mode}: {}", f.message);
    assert!(f.message.starts_with(&format!("A of cublasSgemm_v2 #{gemm} (captured into this graph")), "{}", f.message);
    assert!(f.message.contains("1 NaN and 0 Inf") && f.message.ends_with("first at row 1, col 2"), "{}", f.message);
    let source = std::fs::read_to_string(manifest_dir().join("tests/c/graphs.c")).expect("graphs.c");
    let line = source.lines().position(|l| l.contains("/* the captured line */")).expect("the captured line") + 1;
    assert_eq!(own_line(f), Some(format!("graphs.c:{line}")), "{:#?}", f.backtrace);
    if mode == "deferred" {
        // Judged later, by the scans queued after each launch (the guard's thread may judge one
        // before the program's next call: then it was found at its own launch).
        assert!(f.found_at_seq.is_none_or(|at| at > first_launch), "judged after the launch: {f:?}");
        assert_eq!(trace.summary.deferred_verdicts.get("deferred"), Some(&4), "one verdict a replay: {:?}", trace.summary.deferred_verdicts);
    }
    trace.faults.iter().map(|f| (f.kind, f.api.clone(), f.seq, f.message.clone(), own_line(f))).collect()
}

#[test]
fn an_executable_whose_kernel_node_arguments_changed_is_not_blamed_for_what_it_kept_before() {
    // The NaN GEMM captured and instantiated, then a kernel node's arguments changed: the guard
    // cannot tell what the node reads now, so it scans nothing after the replays rather than
    // blame them for the NaN still sitting in the A it captured.
    for mode in MODES {
        let run = run_case("node_params", Some(mode));
        assert!(run.stdout().contains("set_params=0\n") && run.stdout().contains("sync=0\n"), "{mode}: {}", run.stdout());
        let trace = run.trace();
        assert!(trace.faults.is_empty(), "{mode}: {:#?}", trace.faults);
        assert_eq!(trace.summary.captured_calls, 1, "{mode}: {:?}", trace.summary);
    }
}

#[test]
fn an_executable_updated_to_another_graph_is_scanned_for_that_graphs_operands() {
    // The executable was instantiated from a capture that read a NaN, then updated to a capture
    // of the same GEMM on a clean A: its replays compute C = 8, and nothing is blamed on the
    // operands it no longer reads (the NaN still sits in the first A).
    for mode in MODES {
        let run = run_case("update", Some(mode));
        assert!(run.stdout().contains("update=0\n"), "{mode}: {}", run.stdout());
        assert_captured_and_replayed(&run, "update", Some(mode), "8");
        let trace = run.trace();
        assert!(trace.faults.is_empty(), "{mode}: {:#?}", trace.faults);
        assert_eq!(trace.summary.captured_calls, 2, "{mode}: {:?}", trace.summary);
    }
}

#[test]
fn in_both_modes_a_nan_in_a_member_of_a_captured_strided_batch_is_found_at_the_first_replay_with_the_captured_line() {
    // cublasSgemmStridedBatched (PyTorch's bmm) over 3 members, A's member 1 holding a NaN at
    // its [1,2], captured and replayed four times: every member of each operand is kept with
    // the capture and scanned after each replay, and the first replay is blamed for member 1.
    let told = MODES.map(|mode| {
        let run = run_case("batched", Some(mode));
        assert_captured_and_replayed(&run, "batched", Some(mode), "8");
        let trace = run.trace();
        let gemm = trace.recent_calls.iter().find(|c| c.api == "cublasSgemmStridedBatched").expect("the captured GEMM");
        assert!(gemm.captured && !gemm.scanned, "{mode}: {gemm:?}");
        let first_launch = trace.recent_calls.iter().find(|c| c.api == "cudaGraphLaunch").expect("a replay").seq;
        let f = trace.faults.first().unwrap_or_else(|| panic!("{mode}: no fault: {}", run.stderr()));
        assert_eq!((f.kind, f.api.as_str(), f.seq), (FaultKind::NonfiniteInput, "cudaGraphLaunch", first_launch), "{mode}: {}", f.message);
        let named = format!("A (batch member 1 of 3) of cublasSgemmStridedBatched #{} (captured into this graph", gemm.seq);
        assert!(f.message.starts_with(&named), "{mode}: {}", f.message);
        assert!(f.message.contains("1 NaN and 0 Inf") && f.message.ends_with("first at row 1, col 2"), "{mode}: {}", f.message);
        let line = line_of(&manifest_dir().join("tests/c/graphs.c"), "/* the captured batched line */");
        assert_eq!(own_line(f), Some(format!("graphs.c:{line}")), "{mode}: {:#?}", f.backtrace);
        assert_eq!(trace.summary.unfollowed_captured_calls, 0, "{mode}: {:?}", trace.summary);
        if mode == "deferred" {
            assert_eq!(trace.summary.deferred_verdicts.get("deferred"), Some(&4), "one verdict a replay: {:?}", trace.summary.deferred_verdicts);
        }
        trace.faults.iter().map(|f| (f.kind, f.api.clone(), f.seq, f.message.clone(), own_line(f))).collect::<Vec<_>>()
    });
    assert_eq!(told[0], told[1], "the default mode tells the replay's NaN as gemm mode does");
}

#[test]
fn a_captured_pointer_array_batch_is_said_not_to_be_scanned_after_the_replays() {
    // cublasSgemmBatched: its members' addresses are in device memory, which the guard does not
    // follow to the replays. The NaN in A's member 1 goes unseen, and the trace and the report
    // say so rather than count the call as scanned after each replay.
    for mode in MODES {
        let run = run_case("batched_array", Some(mode));
        assert_captured_and_replayed(&run, "batched_array", Some(mode), "8");
        let trace = run.trace();
        assert!(trace.faults.is_empty(), "{mode}: {:#?}", trace.faults);
        assert_eq!((trace.summary.captured_calls, trace.summary.unfollowed_captured_calls), (1, 1), "{mode}: {:?}", trace.summary);
        let report = std::process::Command::new(cli()).arg("report").arg(&run.trace_path).output().expect("report");
        let text = String::from_utf8_lossy(&report.stdout);
        assert!(text.contains("but for 1 call's pointer-array batches") && text.contains("no replay scans those"), "{mode}: {text}");
    }
}
