//! Programs that reach cuBLAS and the runtime without linking them by name, on the stand-in
//! stack: through `dlsym`/`dlvsym` on a handle from `dlopen(RTLD_LOCAL)` (as JAX/XLA and
//! TensorFlow do), two copies of cuBLAS in one process, and a second interposer that wraps a
//! function through `dlsym(RTLD_NEXT)`, preloaded before and after the guard.

use crate::common;

use common::*;
use cublasguard_format::trace::FaultKind;

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
        // The stand-in runtime allocates through the driver's cuMemAlloc_v2, which it got from
        // cuGetProcAddress_v2 (as NVIDIA's does): one allocation each, recorded as cudaMalloc.
        assert_eq!(t.summary.calls.get("cuMemAlloc_v2"), None, "{case}: {:?}", t.summary.calls);
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

/// Runs gemm_family's clean cublasSgemm_v2 with `wrapper` preloaded before and after the guard:
/// the same output as bare, the guard's one call counted, and `wrapper_says` on stderr.
fn beside_another_preload(wrapper: &std::path::Path, wrapper_says: &str) {
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
        assert!(guarded.stderr().contains(wrapper_says), "{order}: {}", guarded.stderr());
        let t = guarded.trace();
        assert_eq!(t.summary.calls.get("cublasSgemm_v2"), Some(&1), "{order}: the guard ran once");
        assert!(t.faults.is_empty(), "{order}: {:#?}", t.faults);
    }
}

#[test]
fn another_interposer_wrapping_through_rtld_next_works_before_and_after_the_guard() {
    beside_another_preload(&build_c("next_wrapper", &["next_wrapper.c"], true), "wrapper calls=1");
}

#[test]
fn driver_memory_from_cu_get_proc_address_is_tracked_as_a_static_runtime_gets_it() {
    // Every driver function through cuGetProcAddress_v2 on a dlopen'ed libcuda, none by name.
    let bare = run_c("driver_entry", &["clean"], false);
    let guarded = run_c("driver_entry", &["clean"], true);
    assert!(bare.stdout().contains("gemm=0\nsync=0\nC= 1 2 3 4"), "{}", bare.stdout());
    assert_eq!(bare.stdout(), guarded.stdout(), "{}", guarded.stderr());
    let t = guarded.trace();
    assert!(t.faults.is_empty(), "{:#?}", t.faults);
    assert_eq!(t.summary.calls.get("cuMemAlloc_v2"), Some(&3), "{:?}", t.summary.calls);
    assert_eq!(t.summary.calls.get("cuMemFree_v2"), Some(&3), "{:?}", t.summary.calls);

    let t = run_c("driver_entry", &["oob"], true).trace();
    let f = only_fault(&t);
    assert_eq!(f.kind, FaultKind::OutOfBounds, "{}", f.message);
    assert!(f.message.starts_with("operand B (") && f.message.contains("overruns it by 8 bytes"), "{}", f.message);
    let b = f.operands.iter().find(|o| o.name == "B").and_then(|o| o.allocation.as_ref()).expect("B's allocation");
    assert_eq!(b.api.as_deref(), Some("cuMemAlloc_v2"), "the allocation names the function that made it");
    let t = run_c("driver_entry", &["nan"], true).trace();
    let f = only_fault(&t);
    assert_eq!(f.kind, FaultKind::NonfiniteInput, "{}", f.message);
    assert!(f.message.starts_with("operand A (") && f.message.contains("(first at row 1, col 0)"), "{}", f.message);
}

#[test]
fn driver_functions_found_through_a_looked_up_cu_get_proc_address_are_guarded_too() {
    // A static runtime asks cuGetProcAddress for "cuGetProcAddress" (NVIDIA's driver hands out its
    // _v2, as the stand-in's does) and may find the rest through that.
    let guarded = run_c("driver_entry", &["clean", "via-lookup"], true);
    assert!(guarded.stdout().contains("gemm=0\nsync=0\nC= 1 2 3 4"), "{}{}", guarded.stdout(), guarded.stderr());
    let t = guarded.trace();
    assert!(t.faults.is_empty(), "{:#?}", t.faults);
    assert_eq!(t.summary.calls.get("cuMemAlloc_v2"), Some(&3), "{:?}", t.summary.calls);
    let t = run_c("driver_entry", &["oob", "via-lookup"], true).trace();
    let f = only_fault(&t);
    assert_eq!(f.kind, FaultKind::OutOfBounds, "{}", f.message);
    let b = f.operands.iter().find(|o| o.name == "B").and_then(|o| o.allocation.as_ref()).expect("B's allocation");
    assert_eq!(b.api.as_deref(), Some("cuMemAlloc_v2"), "the allocation names the function that made it");
}

#[test]
fn an_expandable_segment_mapped_chunk_by_chunk_is_one_extent_until_unmapped() {
    // PyTorch's way: the virtual-memory functions through cudaGetDriverEntryPointByVersion, 2 MiB
    // chunks mapped side by side in one reservation, and a tensor across two chunks.
    let bare = run_c("expandable", &["clean"], false);
    let guarded = run_c("expandable", &["clean"], true);
    assert!(bare.stdout().contains("gemm=0\nsync=0\nC= 1 2 3 4"), "{}", bare.stdout());
    assert_eq!(bare.stdout(), guarded.stdout(), "{}", guarded.stderr());
    let t = guarded.trace();
    assert!(t.faults.is_empty(), "A straddles two mapped chunks: one extent, no fault: {:#?}", t.faults);
    for (api, n) in [("cuMemAddressReserve", 1), ("cuMemCreate", 2), ("cuMemMap", 2)] {
        assert_eq!(t.summary.calls.get(api), Some(&n), "{api}: {:?}", t.summary.calls);
    }

    let t = run_c("expandable", &["oob"], true).trace();
    let f = only_fault(&t);
    assert_eq!(f.kind, FaultKind::OutOfBounds, "{}", f.message);
    assert!(f.message.starts_with("operand B (") && f.message.contains("4194304 bytes"), "the two chunks, one extent: {}", f.message);
    let b = f.operands.iter().find(|o| o.name == "B").and_then(|o| o.allocation.as_ref()).expect("B's allocation");
    assert_eq!((b.size, b.api.as_deref()), (4 << 20, Some("cuMemMap")));
    let t = run_c("expandable", &["nan"], true).trace();
    assert_eq!(only_fault(&t).kind, FaultKind::NonfiniteInput);
    let t = run_c("expandable", &["unmapped"], true).trace();
    assert_eq!(t.summary.calls.get("cuMemUnmap"), Some(&1));
    let f = only_fault(&t);
    assert_eq!(f.kind, FaultKind::OutOfBounds, "{}", f.message);
    assert!(f.message.starts_with("operand A (") && f.message.contains("2097152 bytes"), "only chunk 0 is left: {}", f.message);
}

#[test]
fn managed_pitched_and_pool_allocations_hold_operands_like_cuda_malloc() {
    for (how, api) in [("managed", "cudaMallocManaged"), ("pitch", "cudaMallocPitch"), ("pool", "cudaMallocFromPoolAsync")] {
        let bare = run_c("allocators", &[how], false);
        let guarded = run_c("allocators", &[how], true);
        assert!(bare.stdout().contains("gemm=0\nsync=0\nC= 1 2 3 4"), "{how}: {}", bare.stdout());
        assert_eq!(bare.stdout(), guarded.stdout(), "{how}: {}", guarded.stderr());
        let t = guarded.trace();
        // The pitched B is 1 row of 8 bytes with a 512-byte pitch: 512 bytes, not 8.
        assert!(t.faults.is_empty(), "{how}: {:#?}", t.faults);
        assert_eq!(t.summary.calls.get(api), Some(&1), "{how}: {:?}", t.summary.calls);
    }
    for how in ["managed", "pool"] {
        let t = run_c("allocators", &[how, "oob"], true).trace();
        let f = only_fault(&t);
        assert_eq!(f.kind, FaultKind::OutOfBounds, "{how}: {}", f.message);
        assert!(f.message.starts_with("operand B (") && f.message.contains("overruns it by 4 bytes"), "{how}: {}", f.message);
    }
}

#[test]
fn a_gemm_given_pinned_host_memory_is_told_what_it_is() {
    let t = run_c("allocators", &["pinned"], true).trace();
    assert_eq!(t.summary.calls.get("cudaMallocHost"), Some(&1), "{:?}", t.summary.calls);
    let f = only_fault(&t);
    assert_eq!(f.kind, FaultKind::HostPointer, "{}", f.message);
    assert!(f.message.contains("[B is pinned host memory: 16 bytes at 0x") && f.message.contains("from cudaMallocHost"), "{}", f.message);
}

#[test]
fn a_malloc_interposer_that_calls_dlsym_from_malloc_runs_before_and_after_the_guard() {
    beside_another_preload(&build_c("malloc_wrapper", &["malloc_wrapper.c"], true), "malloc wrapper calls>0: 1");
}

#[test]
fn ipc_opened_and_imported_memory_hold_operands_as_foreign_allocations_of_their_size() {
    for (how, api) in [("ipc", "cudaIpcOpenMemHandle"), ("cu-ipc", "cuIpcOpenMemHandle_v2"), ("external", "cudaExternalMemoryGetMappedBuffer")] {
        let bare = run_c("foreign", &[how], false);
        let guarded = run_c("foreign", &[how], true);
        assert!(bare.stdout().contains("open=0\ngemm=0\nsync=0\nC= 1 2 3 4\nclose=0"), "{how}: {}", bare.stdout());
        assert_eq!(bare.stdout(), guarded.stdout(), "{how}: {}", guarded.stderr());
        let t = guarded.trace();
        assert!(t.faults.is_empty(), "{how}: {:#?}", t.faults);
        assert_eq!(t.summary.calls.get(api), Some(&1), "{how}: {:?}", t.summary.calls);

        let t = run_c("foreign", &[how, "oob"], true).trace();
        let f = only_fault(&t);
        assert_eq!(f.kind, FaultKind::OutOfBounds, "{how}: {}", f.message);
        assert!(f.message.starts_with("operand B (") && f.message.contains("overruns it by 4 bytes"), "{how}: {}", f.message);
        let b = f.operands.iter().find(|o| o.name == "B").and_then(|o| o.allocation.as_ref()).expect("B's allocation");
        assert_eq!((b.size, b.api.as_deref()), (12, Some(api)), "{how}");

        let t = run_c("foreign", &[how, "nan"], true).trace();
        let f = only_fault(&t);
        assert_eq!(f.kind, FaultKind::NonfiniteInput, "{how}: {}", f.message);
        assert!(f.message.contains("B"), "{how}: {}", f.message);
    }
    // Closing is a free: no double free, no error, and the table is left without the range.
    let t = run_c("foreign", &["ipc"], true).trace();
    assert_eq!(t.summary.calls.get("cudaIpcCloseMemHandle"), Some(&1), "{:?}", t.summary.calls);
    assert!(!t.summary.calls.contains_key("cuIpcOpenMemHandle_v2"), "the runtime's inner driver call is not a second allocation: {:?}", t.summary.calls);
}

#[test]
fn every_hooked_function_looked_up_on_its_librarys_handle_is_the_guards() {
    let hooked: Vec<String> = dynamic_symbols(&guard_lib(), false)
        .into_iter()
        .filter(|s| (s.starts_with("cu") || s.starts_with("__cuda")) && !s.starts_with("cublasguard_"))
        .collect();
    assert!(hooked.len() > 80, "the guard exports its hooks: {hooked:?}");
    let names: Vec<&str> = hooked.iter().map(String::as_str).collect();
    // cuDNN's dispatcher is the stand-in's cudnn/ folder.
    let s = standin();
    let libpath = ["lib", "driver", "cudnn"].map(|d| s.join(d).display().to_string()).join(":");
    let program = build_c("dlsym_reach", &["dlsym_reach.c"], false);
    let looked_up = |guarded: bool| -> Vec<(String, String)> {
        let args = [&["every"], names.as_slice()].concat();
        let env = [("LD_LIBRARY_PATH", libpath.as_str())];
        let out = run(Launch { env: &env, guarded, ..Launch::new(&program, &args) });
        assert!(out.output.status.success(), "{}", out.stderr());
        out.stdout().lines().filter_map(|l| l.split_once(' ')).map(|(n, w)| (n.to_string(), w.to_string())).collect()
    };
    let bare = looked_up(false);
    let guarded = looked_up(true);
    assert_eq!(guarded.len(), names.len());
    for ((name, without), (_, with)) in bare.iter().zip(&guarded) {
        assert_eq!((without.as_str(), with.as_str()), ("real", "guarded"), "{name}: the stand-in defines every hooked function");
    }
}
