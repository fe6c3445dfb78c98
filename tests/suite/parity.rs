//! The default mode (CUBLASGUARD_SYNC=deferred) tells the stories gemm mode tells (issue 43):
//! the same faults on the same calls, however the program ends.

use crate::common::*;
use cublasguard_format::trace::{FaultKind, Trace};

fn abort_after_error(how: &str, mode: &str) -> Trace {
    let program = build_c("abort_after_error", &["abort_after_error.c"], false);
    let env = [("CUBLASGUARD_SYNC", mode), ("CUDASHIM_ASYNC_FAULT", "3")];
    let args = [how];
    let run = run_within(Launch { env: &env, ..Launch::new(&program, &args) }, std::time::Duration::from_secs(60))
        .unwrap_or_else(|| panic!("{how} {mode}: still running after a minute"));
    let expected = match how {
        "exit" => Some(1),
        "create" => Some(2),
        _ => None, // killed by its signal
    };
    assert_eq!(run.code(), expected, "{how} {mode}: {}", run.stderr());
    run.trace()
}

#[test]
fn a_program_that_dies_right_after_an_unhooked_call_saw_a_kernel_fault_has_it_pinned_on_the_gemm_in_both_modes() {
    // The third GEMM's kernel faults; the program's own cudaMemcpyAsync (no synchronisation,
    // not hooked) returns 700 and the program aborts, exits 1 or crashes at once.
    for how in ["abort", "exit", "segv"] {
        let (deferred, gemm_mode) = (abort_after_error(how, "deferred"), abort_after_error(how, "gemm"));
        let named = |t: &Trace| t.faults.iter().map(|f| (f.kind, f.api.clone(), f.seq, f.error.as_ref().map(|e| e.code))).collect::<Vec<_>>();
        let third_gemm = gemm_mode.recent_calls.iter().filter(|c| c.api == "cublasSgemm_v2").map(|c| c.seq).nth(2);
        assert_eq!(named(&gemm_mode), [(FaultKind::AsyncError, "cublasSgemm_v2".to_string(), third_gemm.unwrap_or(0), Some(700))], "{how}");
        assert_eq!(named(&deferred), named(&gemm_mode), "{how}: {:#?}", deferred.faults);
    }
}

#[test]
fn a_cublas_create_that_fails_after_a_kernel_fault_is_blamed_on_the_lost_context_in_both_modes() {
    // The third GEMM's kernel faults; nothing synchronises; the program creates a second
    // handle, which fails (NOT_INITIALIZED). Both modes: the GEMM's async_error, then the
    // create's init_failed with the context lost since that GEMM.
    let (deferred, gemm_mode) = (abort_after_error("create", "deferred"), abort_after_error("create", "gemm"));
    let named =
        |t: &Trace| t.faults.iter().map(|f| (f.kind, f.api.clone(), f.seq, f.cause.as_ref().map(|c| (c.kind, c.pending_since_seq)))).collect::<Vec<_>>();
    let g = named(&gemm_mode);
    assert_eq!(g.iter().map(|f| f.0).collect::<Vec<_>>(), [FaultKind::AsyncError, FaultKind::InitFailed], "{g:?}");
    assert_eq!(g[1].3.map(|c| c.1), Some(Some(g[0].2)), "pending since the GEMM: {g:?}");
    assert_eq!(named(&deferred), g, "{:#?}", deferred.faults);
}
