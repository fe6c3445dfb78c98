//! Kernels launched through the driver API, as Triton launches them (tests/c/driver_launches.c:
//! `dlopen("libcuda.so.1")`, `cuModuleLoadData` + `cuModuleGetFunction`, `cuLaunchKernelEx` or
//! `cuLaunchKernel` found with `dlsym`, or through `cuGetProcAddress`): recorded like runtime
//! launches, named, suspects of a pending error, pinned by `CUBLASGUARD_SYNC=launches` and by
//! launch breadcrumbs.

use crate::common;

use common::*;
use cublasguard_format::trace::{FaultKind, RecentCall, Trace};

fn driver_launches(mode: &str, env: &[(&str, &str)]) -> Run {
    let program = build_c("driver_launches", &["driver_launches.c"], false);
    run(Launch { env, ..Launch::new(&program, &[mode]) })
}

fn launches<'a>(t: &'a Trace, api: &str) -> Vec<&'a RecentCall> {
    t.recent_calls.iter().filter(|c| c.api == api).collect()
}

#[test]
fn a_triton_style_launch_is_recorded_with_its_kernels_name_grid_block_and_stream() {
    let run = driver_launches("ex", &[]);
    assert!(run.stdout().contains("launch=0"), "{}", run.stdout());
    let t = run.trace();
    let recorded = launches(&t, "cuLaunchKernelEx");
    assert_eq!(recorded.len(), 1, "{:#?}", t.recent_calls);
    let l = recorded[0];
    assert_eq!(l.args["kernel"], "fill", "named from cuModuleGetFunction");
    assert_eq!(l.args["gridDim"], serde_json::json!([1, 1, 1]));
    assert_eq!(l.args["blockDim"], serde_json::json!([32, 1, 1]));
    assert_eq!(l.args["stream"], "0x0");
    // The NaN it wrote is consumed by the GEMM after it, as before.
    assert_eq!(only_fault(&t).kind, FaultKind::NonfiniteInput);
    // The other forms: cuLaunchKernel with its parameters in `extra`, the cooperative launch,
    // the per-thread default stream, and a pointer found through cuGetProcAddress.
    for (mode, api, stream) in [
        ("plain", "cuLaunchKernel", "0x0"),
        ("coop", "cuLaunchCooperativeKernel", "0x0"),
        ("ptsz", "cuLaunchKernel_ptsz", "0x2"),
        ("proc", "cuLaunchKernel", "0x0"),
    ] {
        let t = driver_launches(mode, &[]).trace();
        let recorded = launches(&t, api);
        assert_eq!(recorded.len(), 1, "{mode}: {:#?}", t.recent_calls);
        assert!(recorded[0].args["kernel"] == "fill" && recorded[0].args["stream"] == stream, "{mode}: {:?}", recorded[0].args);
    }
}

#[test]
fn the_output_of_a_program_launching_through_the_driver_is_unchanged_by_the_guard() {
    let program = build_c("driver_launches", &["driver_launches.c"], false);
    for mode in ["ex", "plain", "struct", "coop", "proc", "ptsz"] {
        let bare = run(Launch { guarded: false, ..Launch::new(&program, &[mode]) });
        let guarded = run(Launch::new(&program, &[mode]));
        assert_eq!((bare.stdout(), bare.code()), (guarded.stdout(), guarded.code()), "{mode}: {}", guarded.stderr());
    }
}

#[test]
fn a_driver_launch_that_faults_is_a_suspect_of_the_pending_error_and_is_pinned_in_launches_mode() {
    // The stand-in GPU kept behind the host: both launches are queued before the first runs, and
    // the fault surfaces at the GEMM's synchronisation.
    let behind = [("CUDASHIM_WORKER_DELAY_US", "20000")];
    let t = driver_launches("oob", &behind).trace();
    let f = only_fault(&t);
    assert_eq!((f.kind, f.api.as_str()), (FaultKind::AsyncError, "cublasSgemm_v2"), "{}", f.message);
    let fills = launches(&t, "cuLaunchKernel");
    assert_eq!(fills.len(), 2);
    let suspects: Vec<(u64, &str)> = f.suspects.iter().map(|s| (s.seq, s.kernel.as_str())).collect();
    assert_eq!(suspects, [(fills[0].seq, "fill"), (fills[1].seq, "fill")]);
    let text = String::from_utf8_lossy(
        &std::process::Command::new(cli()).arg("report").arg(&driver_launches("oob", &behind).trace_path).output().expect("report").stdout,
    )
    .into_owned();
    assert!(text.contains("one of these 2 kernels faulted") && text.contains("fill (call #"), "{text}");
    // Launch-blocking mode: the first fill is the fault; the second launch only finds the
    // context lost.
    let t = driver_launches("oob", &[("CUBLASGUARD_SYNC", "launches")]).trace();
    let f = t.faults.iter().find(|f| f.kind == FaultKind::AsyncError).unwrap_or_else(|| panic!("{:#?}", t.faults));
    assert!(f.api == "cuLaunchKernel" && f.args["kernel"] == "fill", "{f:#?}");
    assert_eq!(f.error.as_ref().map(|e| e.code), Some(700));
    let fills = launches(&t, "cuLaunchKernel");
    assert_eq!(f.seq, fills[0].seq);
    let later = t.faults.iter().find(|g| g.seq == fills[1].seq).expect("the second launch's failure");
    assert!(later.message.contains(&format!("unusable since cudaErrorIllegalAddress (700) at call #{}", fills[0].seq)), "{}", later.message);
}

#[test]
fn launch_breadcrumbs_pin_a_faulting_driver_launch_without_synchronising() {
    // The stand-in GPU kept behind the host, so the fill's fault comes after its breadcrumb was
    // queued (CUDASHIM_WORKER_DELAY_US), as on a GPU busy with earlier work.
    let env = [
        ("CUBLASGUARD_SYNC", "deferred"),
        ("CUBLASGUARD_LAUNCH_BREADCRUMBS", "1"),
        ("CUBLASGUARD_CHECKS", "args,bounds,sync,launches"),
        ("CUDASHIM_WORKER_DELAY_US", "20000"),
    ];
    let t = driver_launches("oob", &env).trace();
    let f = t.faults.iter().find(|f| f.kind == FaultKind::AsyncError).unwrap_or_else(|| panic!("{:#?}", t.faults));
    let fills = launches(&t, "cuLaunchKernel");
    assert_eq!((f.api.as_str(), f.seq), ("cuLaunchKernel", fills[0].seq), "{}", f.message);
    assert_eq!(f.args["kernel"], "fill");
    assert!(f.found_at_seq.is_some_and(|at| at > fills[0].seq), "found later: {:?}", f.found_at_seq);
}

#[test]
fn a_consumed_nan_names_the_kernel_that_wrote_it_through_any_launch_form() {
    // Its parameters point into the operand: a plain pointer (driver and runtime launches,
    // `params` and `extra`), or one inside a struct parameter.
    for (mode, api, kernel) in [
        ("ex", "cuLaunchKernelEx", "fill"),
        ("plain", "cuLaunchKernel", "fill"),
        ("struct", "cuLaunchKernel", "fill_struct"),
        ("ptsz", "cuLaunchKernel_ptsz", "fill"),
        ("runtime", "cudaLaunchKernel", "fill_nan(float*, int)"),
        ("runtime_ex", "cudaLaunchKernelExC", "fill_nan(float*, int)"),
    ] {
        let t = driver_launches(mode, &[]).trace();
        let f = only_fault(&t);
        assert_eq!(f.kind, FaultKind::NonfiniteInput, "{mode}");
        let launch = launches(&t, api);
        let writers: Vec<(u64, &str)> = f.writers.iter().map(|w| (w.seq, w.kernel.as_str())).collect();
        assert_eq!(writers, [(launch[0].seq, kernel)], "{mode}: {:#?}", f.writers);
    }
}

#[test]
fn writers_are_the_launches_into_that_memory_since_it_was_last_seen_finite() {
    // fill(A, 2), a GEMM finds A finite, fill(A, NaN), fill(B, 3), a GEMM consumes A's NaN.
    let run = driver_launches("refill", &[]);
    let t = run.trace();
    let f = only_fault(&t);
    let fills = launches(&t, "cuLaunchKernel");
    assert_eq!(fills.len(), 3);
    let writers: Vec<u64> = f.writers.iter().map(|w| w.seq).collect();
    assert_eq!(writers, [fills[1].seq], "not the fill before A was seen finite, nor the one into B: {:#?}", f.writers);
    let out = std::process::Command::new(cli()).arg("report").arg(&run.trace_path).output().expect("report");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&format!("probable origin: kernel fill (launched at call #{}", fills[1].seq)), "{text}");
    assert!(text.contains(&format!("writer #{} fill", fills[1].seq)), "{text}");
    // With launches left out of the recorder, nothing is named (and nothing breaks).
    let t = driver_launches("refill", &[("CUBLASGUARD_CHECKS", "args,bounds,nan,sync")]).trace();
    assert!(only_fault(&t).writers.is_empty());
}

#[test]
fn kernels_from_cuda_12_libraries_are_named_as_kernels_and_as_their_functions() {
    // cuLibraryLoadData + cuLibraryGetKernel: the CUkernel launched as it is, and a CUfunction
    // from cuKernelGetFunction.
    let run = driver_launches("library", &[]);
    assert!(run.stdout().contains("function=0"), "{}", run.stdout());
    let t = run.trace();
    let names: Vec<String> = launches(&t, "cuLaunchKernel").iter().map(|c| c.args["kernel"].as_str().unwrap_or("?").to_string()).collect();
    assert_eq!(names, ["fill", "fill_struct"], "{:#?}", t.recent_calls);
    assert_eq!(only_fault(&t).writers.first().map(|w| w.kernel.as_str()), Some("fill"));
}
