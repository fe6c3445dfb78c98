//! CUBLASGUARD_SYNC=deferred: a guarded call leaves a breadcrumb on its stream instead of
//! synchronising, and an asynchronous error that surfaces later is recorded on the first call
//! whose breadcrumb never landed. Run on the asynchronous stand-in (shims/engine.c), where a
//! GEMM's kernel runs after its call returned and a fault drops the work queued after it.

use crate::common;

use common::*;
use cublasguard_format::trace::{FaultKind, Trace};

const DEFERRED: (&str, &str) = ("CUBLASGUARD_SYNC", "deferred");

fn gemm_seqs(trace: &Trace) -> Vec<u64> {
    trace.recent_calls.iter().filter(|c| c.api == "cublasSgemm_v2").map(|c| c.seq).collect()
}

/// The async scenario (three GEMMs, the second one's kernel faults, then a copy) in `mode`,
/// with `checks`.
fn async_fault(mode: &str, checks: &str) -> Run {
    let program = scenarios();
    // The GPU kept behind the host: a GEMM's kernel never runs before the guard has enqueued the
    // breadcrumb after it (were the context already broken, the write would be refused and the
    // guard would synchronise instead, finding the fault at the call: right, but not this test).
    let env = [("CUDASHIM_ASYNC_FAULT", "2"), ("CUBLASGUARD_SYNC", mode), ("CUBLASGUARD_CHECKS", checks), GPU_BEHIND];
    run(Launch { env: &env, ..Launch::new(&program, &["async"]) })
}

#[test]
fn an_asynchronous_fault_at_the_second_gemm_is_recorded_on_it_in_every_mode_and_later_calls_are_not_blamed() {
    for mode in ["deferred", "gemm", "launches"] {
        for checks in ["all", "args,bounds,sync"] {
            let run = async_fault(mode, checks);
            let trace = run.trace();
            let gemms = gemm_seqs(&trace);
            let asynchronous = faults_of(&trace, FaultKind::AsyncError);
            assert_eq!(asynchronous.len(), 1, "{mode}/{checks}: {:#?}", trace.faults);
            let f = asynchronous[0];
            assert_eq!((f.seq, f.api.as_str()), (gemms[1], "cublasSgemm_v2"), "{mode}/{checks}: {}", f.message);
            assert_eq!(f.error.as_ref().map(|e| e.code), Some(700));
            // Whatever fails later says since when the context has been gone, and is not blamed.
            for later in trace.faults.iter().filter(|g| g.kind != FaultKind::AsyncError) {
                assert!(later.seq > gemms[1], "{mode}/{checks}: {later:#?}");
                assert!(later.message.contains(&format!("at call #{}", gemms[1])), "{mode}/{checks}: {}", later.message);
            }
            // Faults in call order.
            assert!(trace.faults.windows(2).all(|w| w[0].seq <= w[1].seq), "{mode}/{checks}: {:?}", trace.faults.iter().map(|f| f.seq).collect::<Vec<_>>());
            if mode == "deferred" {
                let found = f.found_at_seq.expect("a fault found after its call says where");
                assert!(found > gemms[1], "found at #{found}, after the GEMM #{}", gemms[1]);
                assert!(f.message.contains("breadcrumb") && f.message.contains("never landed"), "{}", f.message);
                let stream = f.breadcrumbs.iter().find(|p| p.first_unfinished == Some(gemms[1])).expect("its stream's progress");
                assert_eq!(stream.last_landed, Some(gemms[0]), "the first GEMM completed: {:#?}", f.breadcrumbs);
                assert_eq!(stream.first_unfinished_api.as_deref(), Some("cublasSgemm_v2"));
            } else {
                assert_eq!(f.found_at_seq, None);
                assert!(f.breadcrumbs.is_empty());
            }
        }
    }
}

/// The stand-in GPU sleeps before each piece of work (CUDASHIM_WORKER_DELAY_US), so it stays
/// behind the host: the three GEMMs are queued, none run, when the program's copy blocks.
const GPU_BEHIND: (&str, &str) = ("CUDASHIM_WORKER_DELAY_US", "20000");

#[test]
fn the_program_sees_its_errors_under_the_deferred_mode_where_it_would_without_the_guard() {
    let program = scenarios();
    let env = [("CUDASHIM_ASYNC_FAULT", "2"), GPU_BEHIND, DEFERRED, ("CUBLASGUARD_CHECKS", "args,bounds,sync")];
    let bare = run(Launch { env: &env, guarded: false, ..Launch::new(&program, &["async"]) });
    let lines = "sgemm status=0\nsgemm status=0\nsgemm status=0\nC copy=700";
    assert!(bare.stdout().contains(lines), "{}", bare.stdout());
    let guarded = run(Launch { env: &env, ..Launch::new(&program, &["async"]) });
    assert!(guarded.stdout().contains(lines), "the guard did not make it surface earlier: {}", guarded.stdout());
    assert_eq!(bare.code(), guarded.code());
    // In gemm mode the guard's synchronisation after the second GEMM makes the third fail.
    let env = [("CUDASHIM_ASYNC_FAULT", "2"), GPU_BEHIND, ("CUBLASGUARD_SYNC", "gemm"), ("CUBLASGUARD_CHECKS", "args,bounds,sync")];
    let synchronising = run(Launch { env: &env, ..Launch::new(&program, &["async"]) });
    assert!(synchronising.stdout().contains("sgemm status=0\nsgemm status=0\nsgemm status=13\nC copy=700"), "{}", synchronising.stdout());
}

#[test]
fn with_the_gpu_behind_the_fault_surfaces_at_the_programs_own_copy_and_is_still_pinned_to_its_gemm() {
    let program = scenarios();
    let env = [("CUDASHIM_ASYNC_FAULT", "2"), GPU_BEHIND, DEFERRED, ("CUBLASGUARD_CHECKS", "args,bounds,sync")];
    let run = run(Launch { env: &env, ..Launch::new(&program, &["async"]) });
    assert!(run.stdout().contains("sgemm status=0\nsgemm status=0\nsgemm status=0\nC copy=700"), "{}", run.stdout());
    let trace = run.trace();
    let gemms = gemm_seqs(&trace);
    let f = only_fault(&trace);
    assert_eq!((f.kind, f.seq), (FaultKind::AsyncError, gemms[1]), "{}", f.message);
    let copy = trace.recent_calls.iter().find(|c| c.api == "cudaMemcpy" && c.status == 700).expect("the copy that saw it");
    assert_eq!(f.found_at_seq, Some(copy.seq));
    assert!(f.message.contains("cudaMemcpy"), "{}", f.message);
    let stream = &f.breadcrumbs[0];
    assert_eq!((stream.last_landed, stream.first_unfinished, stream.unfinished), (Some(gemms[0]), Some(gemms[1]), 2), "{:#?}", f.breadcrumbs);
}

#[test]
fn a_guarded_gemm_never_blocks_the_host_under_deferred_on_either_scan_path_and_blocks_as_before_in_gemm_mode() {
    assert_eq!(blocking_added_per_gemm(&[DEFERRED, ("CUBLASGUARD_CHECKS", "args,bounds,sync")]).0, 0);
    assert_eq!(blocking_added_per_gemm(&[("CUBLASGUARD_SYNC", "gemm"), ("CUBLASGUARD_CHECKS", "args,bounds,sync")]).0, 2);
    // With the scan on, on either path, its verdict waits instead of the host: its copies go to
    // pinned memory, the kernel's counts to mapped memory. Per further GEMM (the device scan's
    // self-test, once per process, left out): none; in gemm mode the two synchronisations and
    // the scans' copies (host path) or read-backs of the kernel's counts (device path).
    let per_gemm = |sync: &str, scan: &str| blocking_per_further_gemm(&[("CUBLASGUARD_SYNC", sync), ("CUBLASGUARD_DEVICE_SCAN", scan)]);
    assert_eq!((per_gemm("deferred", "off"), per_gemm("deferred", "on")), (0, 0));
    assert_eq!((per_gemm("gemm", "off"), per_gemm("gemm", "on")), (8, 4));
}

#[test]
fn a_fault_nothing_waited_for_is_found_at_exit_and_recorded_on_its_gemm() {
    let program = scenarios();
    let env = [("CUDASHIM_ASYNC_FAULT", "2"), GPU_BEHIND, DEFERRED];
    let bare = run(Launch { env: &env, guarded: false, ..Launch::new(&program, &["async_exit"]) });
    let guarded = run(Launch { env: &env, ..Launch::new(&program, &["async_exit"]) });
    assert_eq!((bare.code(), guarded.code()), (Some(0), Some(0)), "{}", guarded.stderr());
    let trace = guarded.trace();
    let gemms = gemm_seqs(&trace);
    let f = only_fault(&trace);
    assert_eq!((f.kind, f.seq), (FaultKind::AsyncError, gemms[1]), "{}", f.message);
    assert!(f.message.contains("at exit"), "{}", f.message);
    assert_eq!(f.found_at_seq, Some(0), "found at no call: at exit");
    // In gemm mode it is found at the GEMM itself.
    let env = [("CUDASHIM_ASYNC_FAULT", "2"), GPU_BEHIND, ("CUBLASGUARD_SYNC", "gemm")];
    let gemm_mode = run(Launch { env: &env, ..Launch::new(&program, &["async_exit"]) }).trace();
    assert_eq!((only_fault(&gemm_mode).seq, only_fault(&gemm_mode).found_at_seq), (gemm_seqs(&gemm_mode)[1], None));
}

#[test]
fn with_launch_breadcrumbs_a_faulting_kernel_is_pinned_to_its_launch_without_synchronising() {
    let program = build_c("launches", &["launches.c"], false);
    let env = [DEFERRED, ("CUBLASGUARD_LAUNCH_BREADCRUMBS", "1"), ("CUBLASGUARD_CHECKS", "args,bounds,sync,launches")];
    let t = run(Launch { env: &env, ..Launch::new(&program, &[]) }).trace();
    let f = t.faults.iter().find(|f| f.kind == FaultKind::AsyncError).unwrap_or_else(|| panic!("{:#?}", t.faults));
    assert_eq!(f.api, "cudaLaunchKernel", "{}", f.message);
    assert_eq!(f.args["kernel"], "gather(float const*, long const*, float*, int)");
    // The stand-in queues gather's fault behind its launch: it breaks the context either before
    // the guard asks about the stream after the launch (then no breadcrumb could be left, and
    // every earlier one landed) or after it (then gather's breadcrumb never lands). Gather
    // either way, with fill's breadcrumb landed.
    let launches: Vec<u64> = t.recent_calls.iter().filter(|c| c.api == "cudaLaunchKernel").map(|c| c.seq).collect();
    assert_eq!(f.seq, launches[1], "{}", f.message);
    assert!(f.message.contains("every breadcrumb issued before this call landed") || f.message.contains("never landed"), "{}", f.message);
    assert_eq!(f.breadcrumbs.first().and_then(|p| p.last_landed), Some(launches[0]), "fill's breadcrumb landed: {:#?}", f.breadcrumbs);
    // Without them the launch is only a suspect, of the call where it surfaced: the next
    // launch's capture query (scale's) or the GEMM's check, as the stand-in's worker runs
    // gather before or after the host gets there.
    let env = [DEFERRED, ("CUBLASGUARD_CHECKS", "args,bounds,sync,launches")];
    let t = run(Launch { env: &env, ..Launch::new(&program, &[]) }).trace();
    let f = t.faults.iter().find(|f| f.kind == FaultKind::AsyncError).unwrap_or_else(|| panic!("{:#?}", t.faults));
    let launches: Vec<u64> = t.recent_calls.iter().filter(|c| c.api == "cudaLaunchKernel").map(|c| c.seq).collect();
    assert!(f.api == "cublasSgemm_v2" || f.seq == launches[2], "surfaced after gather: {} #{} {launches:?}", f.api, f.seq);
    assert!(f.suspects.iter().any(|k| k.kernel.starts_with("gather")), "{:#?}", f.suspects);
}

#[test]
fn a_fault_inside_a_graph_is_pinned_to_its_graph_launch_and_nothing_is_enqueued_while_capturing() {
    let program = scenarios();
    let env = [("CUDASHIM_GRAPH_FAULT", "2"), GPU_BEHIND, DEFERRED];
    let run = run(Launch { env: &env, ..Launch::new(&program, &["graph"]) });
    assert!(run.stdout().contains("launch=0\nlaunch=0\nlaunch=0\nC copy=700"), "{}", run.stdout());
    let trace = run.trace();
    let launches: Vec<u64> = trace.recent_calls.iter().filter(|c| c.api == "cudaGraphLaunch").map(|c| c.seq).collect();
    assert_eq!(launches.len(), 3, "each graph launch is recorded");
    let f = only_fault(&trace);
    assert_eq!((f.kind, f.api.as_str(), f.seq), (FaultKind::AsyncError, "cudaGraphLaunch", launches[1]), "{}", f.message);
    assert!(f.args.contains_key("graphExec"), "{:?}", f.args);
    let stream = f.breadcrumbs.iter().find(|p| p.first_unfinished == Some(launches[1])).expect("the graph's stream");
    assert_eq!(stream.last_landed, Some(launches[0]));
    // The captured GEMM left no breadcrumb (its stream was capturing): the graph's stream has
    // the launches' breadcrumbs only.
    let gemm = trace.recent_calls.iter().find(|c| c.api == "cublasSgemm_v2").expect("the captured GEMM").seq;
    assert!(f.breadcrumbs.iter().all(|p| p.last_landed != Some(gemm) && p.first_unfinished != Some(gemm)), "{:#?}", f.breadcrumbs);
}

#[test]
fn the_kernel_fault_of_a_call_already_blamed_for_its_operands_is_attached_to_that_fault() {
    // B overruns its allocation: found before the call; the kernel then faults. One fault, as
    // gemm mode gives, told in the same words: a call expected to fault is synchronised after
    // it in every mode, so its error is attached there, not wherever it happens to surface.
    let mut told = Vec::new();
    for mode in [DEFERRED, ("CUBLASGUARD_SYNC", "gemm")] {
        let t = scenario("out_of_bounds", &[mode, GPU_BEHIND]).trace();
        let f = only_fault(&t);
        assert_eq!((f.kind, f.seq), (FaultKind::OutOfBounds, gemm_seqs(&t)[0]), "{mode:?}");
        assert_eq!(f.error.as_ref().map(|e| (e.code, e.call.as_str())), Some((700, "cudaStreamSynchronize")), "{mode:?}: {f:#?}");
        assert_eq!(f.found_at_seq, None, "{mode:?}: found at the call");
        told.push(f.message.clone());
    }
    assert_eq!(without_addresses(&told[0]), without_addresses(&told[1]), "the same words in both modes");
}
