//! Programs that reach cuBLAS and the runtime without linking them by name, on the stand-in
//! stack: through `dlsym`/`dlvsym` on a handle from `dlopen(RTLD_LOCAL)` (as JAX/XLA and
//! TensorFlow do), two copies of cuBLAS in one process, and a second interposer that wraps a
//! function through `dlsym(RTLD_NEXT)`, preloaded before and after the guard.

mod common;

use common::*;
use cublasguard::trace::FaultKind;

fn reach(args: &[&str], guarded: bool) -> Run {
    run_c("dlsym_reach", args, guarded)
}

#[test]
fn functions_taken_with_dlsym_on_a_local_handle_are_guarded() {
    for case in ["clean", "dlvsym"] {
        let bare = reach(&[case], false);
        let guarded = reach(&[case], true);
        assert!(bare.stdout().contains("gemm=0\nsync=0\nC= 1 2 3 4"), "{case}: {}", bare.stdout());
        assert_eq!(bare.stdout(), guarded.stdout(), "{case}: {}", guarded.stderr());
        let t = guarded.trace();
        assert!(t.faults.is_empty(), "{case}: {:#?}", t.faults);
        for (api, n) in [("cublasSgemm_v2", 1), ("cublasCreate_v2", 1), ("cudaMalloc", 3), ("cudaFree", 3)] {
            assert_eq!(t.summary.calls.get(api), Some(&n), "{case}: {api} counted: {:?}", t.summary.calls);
        }
    }
}

#[test]
fn memory_and_gemms_reached_through_dlsym_are_checked_as_if_linked() {
    let t = reach(&["oob"], true).trace();
    let f = t.faults.iter().find(|f| f.api == "cublasSgemm_v2").unwrap_or_else(|| panic!("{:#?}", t.faults));
    assert_eq!(f.kind, FaultKind::OutOfBounds, "{}", f.message);
    assert!(f.message.starts_with("operand B ("), "{}", f.message);
    let t = reach(&["nan"], true).trace();
    let f = t.faults.iter().find(|f| f.api == "cublasSgemm_v2").unwrap_or_else(|| panic!("{:#?}", t.faults));
    assert_eq!(f.kind, FaultKind::NonfiniteInput, "{}", f.message);
    assert!(f.message.starts_with("operand A ("), "{}", f.message);
}

#[test]
fn two_copies_of_cublas_each_keep_their_own_functions() {
    let vendored = standin().join("vendored/libcublas-5e3a1f0c.so.12").display().to_string();
    let bare = reach(&["two", &vendored], false);
    let guarded = reach(&["two", &vendored], true);
    let expected = "other create=0\nother gemm, own handle=0\nother gemm, first copy's handle=1\nfirst gemm, own handle=0\n";
    assert!(bare.stdout().ends_with(expected), "{}", bare.stdout());
    assert_eq!(bare.stdout(), guarded.stdout(), "{}", guarded.stderr());
    let t = guarded.trace();
    assert_eq!(t.summary.calls.get("cublasSgemm_v2"), Some(&4), "every call through either copy: {:?}", t.summary.calls);
    assert_eq!(t.summary.calls.get("cublasCreate_v2"), Some(&2));
    // Only the cross-copy call fails: its copy did not make the handle. (The guard keeps one
    // table of handles for all copies, so it learns this from the library's status.)
    assert_eq!(t.faults.len(), 1, "{:#?}", t.faults);
    assert_eq!((t.faults[0].api.as_str(), t.faults[0].status), ("cublasSgemm_v2", 1), "{:#?}", t.faults);
}

#[test]
fn another_interposer_wrapping_through_rtld_next_works_before_and_after_the_guard() {
    let wrapper = build_c("next_wrapper", &["next_wrapper.c"], true);
    let program = build_c("gemm_family", &["gemm_family.c"], false);
    let args = ["cublasSgemm_v2", "clean"];
    let bare = run(Launch { guarded: false, ..Launch::new(&program, &args) });
    for (order, preload) in [
        ("guard first", format!("{}:{}", guard_lib().display(), wrapper.display())),
        ("wrapper first", format!("{}:{}", wrapper.display(), guard_lib().display())),
    ] {
        let env = [("LD_PRELOAD", preload.as_str())];
        let guarded = run(Launch { env: &env, ..Launch::new(&program, &args) });
        assert_eq!(guarded.code(), Some(0), "{order}: {}", guarded.stderr());
        assert_eq!(bare.stdout(), guarded.stdout(), "{order}");
        assert!(guarded.stderr().contains("wrapper calls=1"), "{order}: the wrapper ran once: {}", guarded.stderr());
        let t = guarded.trace();
        assert_eq!(t.summary.calls.get("cublasSgemm_v2"), Some(&1), "{order}: the guard ran once");
        assert!(t.faults.is_empty(), "{order}: {:#?}", t.faults);
    }
}
