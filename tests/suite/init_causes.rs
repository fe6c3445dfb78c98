//! Every cause of CUBLAS_STATUS_NOT_INITIALIZED at cublasCreate that the guard can name from
//! what it saw: memory at handle creation, CUDA in a forked child, a context already lost.

use crate::common;

use common::*;
use cublasguard_format::trace::{FaultKind, InitCauseKind};

fn causes(case: &str, env: &[(&str, &str)]) -> (Run, Run) {
    let program = build_c("create_causes", &["create_causes.c"], false);
    let args = [case];
    let bare = run(Launch { env, guarded: false, ..Launch::new(&program, &args) });
    let guarded = run(Launch { env, ..Launch::new(&program, &args) });
    assert_eq!(bare.stdout(), guarded.stdout(), "{case}: the program sees the same\n{}", guarded.stderr());
    assert_eq!(bare.code(), guarded.code(), "{case}");
    (bare, guarded)
}

#[test]
fn a_handle_created_with_no_memory_left_is_out_of_memory_with_the_figures() {
    let (bare, run) = causes("oom", &[("CUDASHIM_MEM_TOTAL", "16777216")]);
    assert!(bare.stdout().contains("take all=0") && bare.stdout().contains("cublasCreate=1"), "{}", bare.stdout());
    let t = run.trace();
    let f = t.faults.iter().find(|f| f.api == "cublasCreate_v2").expect("the handle's fault");
    assert_eq!(f.kind, FaultKind::InitFailed);
    let cause = f.cause.as_ref().expect("cause");
    assert_eq!(cause.kind, InitCauseKind::OutOfMemory, "{}", cause.message);
    let memory = cause.memory.as_ref().expect("memory figures");
    assert_eq!((memory.free, memory.total), (Some(4096), Some(16 << 20)));
    assert_eq!((memory.live_count, memory.live_bytes, memory.largest), (1, (16 << 20) - 4096, (16 << 20) - 4096));
    let report = std::process::Command::new(cli()).arg("report").arg(&run.trace_path).output().expect("report");
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(text.contains("cudaFree buffers you no longer need") && text.contains("not the driver"), "{text}");
}

#[test]
fn a_handle_created_in_a_forked_child_names_the_parent_and_its_first_cuda_call() {
    let program = build_c("create_causes", &["create_causes.c"], false);
    let dir = temp_dir("fork-causes");
    let pattern = dir.join("t-%p.json").display().to_string();
    let env = [("CUBLASGUARD_TRACE", pattern.as_str())];
    let bare = run(Launch { env: &env, guarded: false, trace: false, ..Launch::new(&program, &["fork"]) });
    let guarded = run(Launch { env: &env, trace: false, ..Launch::new(&program, &["fork"]) });
    assert_eq!(bare.stdout(), guarded.stdout());
    assert!(guarded.stdout().contains("child cublasCreate=1") && guarded.stdout().contains("parent cublasCreate=0"), "{}", guarded.stdout());
    let traces: Vec<cublasguard_format::trace::Trace> =
        std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()).map(|e| cublasguard_format::trace::read(&e.path()).unwrap()).collect();
    assert_eq!(traces.len(), 2, "the parent's and the child's");
    let child = traces.iter().find(|t| !t.faults.is_empty()).expect("the child's fault");
    let parent = traces.iter().find(|t| t.faults.is_empty()).expect("the parent's trace, unaffected");
    let cause = child.faults[0].cause.as_ref().expect("cause");
    assert_eq!(cause.kind, InitCauseKind::ForkedChild, "{}", cause.message);
    assert_eq!(cause.parent_pid, Some(parent.process.pid));
    assert_eq!(cause.parent_first_call.as_deref(), Some("cudaMalloc"));
    assert!(cause.message.contains("spawn"), "{}", cause.message);
}

#[test]
fn a_forked_child_that_makes_no_cuda_call_still_writes_nothing() {
    let program = build_c("create_causes", &["create_causes.c"], false);
    let dir = temp_dir("fork-quiet");
    let pattern = dir.join("t-%p.json").display().to_string();
    let env = [("CUBLASGUARD_TRACE", pattern.as_str())];
    let guarded = run(Launch { env: &env, trace: false, ..Launch::new(&program, &["fork_quiet"]) });
    assert!(guarded.stdout().contains("child exit=0"), "{}", guarded.stdout());
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "only the parent's trace");
}

#[test]
fn a_handle_created_after_a_kernel_fault_is_context_lost_naming_that_fault() {
    let (_, run) = causes("lost", &[("CUDASHIM_ASYNC_FAULT", "1")]);
    assert!(run.stdout().contains("cublasCreate again=1"), "{}", run.stdout());
    let t = run.trace();
    let gemm = t.faults.iter().find(|f| f.api == "cublasSgemm_v2").expect("the kernel's fault");
    assert_eq!(gemm.kind, FaultKind::AsyncError);
    let create = t.faults.iter().rev().find(|f| f.api == "cublasCreate_v2").expect("the second handle's fault");
    let cause = create.cause.as_ref().expect("cause");
    assert_eq!(cause.kind, InitCauseKind::ContextLost, "{}", cause.message);
    assert_eq!(cause.pending_error.as_ref().map(|e| e.code), Some(700));
    assert_eq!(cause.pending_since_seq, Some(gemm.seq), "the fault that recorded it");
}
