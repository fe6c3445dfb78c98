//! The default mode (CUBLASGUARD_SYNC=deferred) tells the stories gemm mode tells (issue 43):
//! the same faults on the same calls, however the program ends.

use crate::common::*;
use cublasguard_format::trace::{FaultKind, Trace};

/// abort_after_error.c run `how`, in `mode`, on the asynchronous stand-in or, with `standin`
/// "sync", the synchronous one (CUDASHIM_SYNC=1: the kernel runs inside its launch, and the
/// program's next query of the stream reports its fault).
fn abort_after_error(how: &str, mode: &str, stand_in: &str) -> Trace {
    abort_after_error_run(how, mode, stand_in).trace()
}

/// As `abort_after_error`, the run itself.
fn abort_after_error_run(how: &str, mode: &str, stand_in: &str) -> Run {
    let program = build_c("abort_after_error", &["abort_after_error.c"], false);
    // The stand-in's cuDNN on the library path, for "cudnn".
    let s = standin();
    let libpath = format!("{}:{}:{}", s.join("lib").display(), s.join("driver").display(), s.join("cudnn").display());
    let sync = if stand_in == "sync" { "1" } else { "0" };
    let env = [("CUBLASGUARD_SYNC", mode), ("CUDASHIM_ASYNC_FAULT", "3"), ("CUDASHIM_SYNC", sync), ("LD_LIBRARY_PATH", libpath.as_str())];
    let args = [how];
    let run = run_within(Launch { env: &env, ..Launch::new(&program, &args) }, std::time::Duration::from_secs(60))
        .unwrap_or_else(|| panic!("{how} {mode} on the {stand_in} stand-in: still running after a minute"));
    let expected = match how {
        "exit" => Some(1),
        "create" | "cudnn" | "malloc" | "cumalloc" | "instantiate" => Some(2),
        _ => None, // killed by its signal (hostb and freedb abort)
    };
    assert_eq!(run.code(), expected, "{how} {mode} on the {stand_in} stand-in: {}{}", run.stdout(), run.stderr());
    run
}

/// The line of abort_after_error.c that holds `text`: "abort_after_error.c:LINE".
fn line_of(text: &str) -> String {
    let source = std::fs::read_to_string(manifest_dir().join("tests/c/abort_after_error.c")).expect("the program's source");
    let line = source.lines().position(|l| l.contains(text)).unwrap_or_else(|| panic!("no line with {text}")) + 1;
    format!("abort_after_error.c:{line}")
}

/// Each abort_after_error.c case `how`, run in both modes on both stand-ins: gemm mode's
/// faults must be `expected` (kind, hooked function, the line of the program's that made the
/// call), and the default's must tell the same story, field by field.
fn both_modes_tell(how: &str, expected: &[(FaultKind, &str, &str)]) {
    let mut differ = Vec::new();
    for standin in ["async", "sync"] {
        let (deferred, gemm_mode) = (abort_after_error(how, "deferred", standin), abort_after_error(how, "gemm", standin));
        let shape = |t: &Trace| t.faults.iter().map(|f| (f.kind, f.api.clone(), own_line(f))).collect::<Vec<_>>();
        let wanted: Vec<_> = expected.iter().map(|(kind, api, line)| (*kind, api.to_string(), Some(line_of(line)))).collect();
        assert_eq!(shape(&gemm_mode), wanted, "{how} on the {standin} stand-in, gemm mode: {:#?}", gemm_mode.faults);
        // The GEMM's kernel faulted: the default cannot know which reads queued before it ran,
        // so it judges none of its operands (gemm mode scanned them at the call).
        let told = |t: &Trace| t.faults.iter().map(|f| story_of(f, false)).collect::<Vec<_>>();
        let pending = |t: &Trace| t.faults.iter().map(|f| f.cause.as_ref().and_then(|c| c.pending_since_seq)).collect::<Vec<_>>();
        if told(&deferred) != told(&gemm_mode) || pending(&deferred) != pending(&gemm_mode) {
            differ.push(format!(
                "{how} on the {standin} stand-in:\n  gemm     {:?} {:?}\n  deferred {:?} {:?}",
                told(&gemm_mode),
                pending(&gemm_mode),
                told(&deferred),
                pending(&deferred)
            ));
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

/// The line of the GEMM whose kernel faults.
const GEMM: &str = "cublasSgemm(handle";

#[test]
fn a_program_that_dies_right_after_an_unhooked_call_saw_a_kernel_fault_has_it_pinned_on_the_gemm_in_both_modes() {
    // The third GEMM's kernel faults; the program's own cudaMemcpyAsync or cudaStreamQuery
    // (no synchronisation, not hooked) returns 700 and the program aborts, exits 1 or crashes
    // at once. Both modes pin the fault on the third GEMM, with the GEMM's own line, not the
    // line where the error surfaced.
    for how in ["abort", "exit", "segv"] {
        both_modes_tell(how, &[(FaultKind::AsyncError, "cublasSgemm_v2", GEMM)]);
        let gemm_mode = abort_after_error(how, "gemm", "async");
        let third_gemm = gemm_mode.recent_calls.iter().filter(|c| c.api == "cublasSgemm_v2").map(|c| c.seq).nth(2);
        let named = gemm_mode.faults.iter().map(|f| (f.seq, f.error.as_ref().map(|e| e.code))).collect::<Vec<_>>();
        assert_eq!(named, [(third_gemm.unwrap_or(0), Some(700))], "{how}");
    }
}

/// The first frame of `fault`'s backtrace in the C program's own source: "file.c:LINE".
fn own_line(fault: &cublasguard_format::trace::Fault) -> Option<String> {
    fault.backtrace.iter().find_map(|frame| {
        let (_, after) = frame.split_once(" at ")?;
        let location = after.split_whitespace().next()?;
        location.contains("/tests/c/").then(|| location.rsplit('/').next().unwrap_or(location).to_string())
    })
}

#[test]
fn a_cublas_or_cudnn_create_that_fails_after_a_kernel_fault_is_blamed_on_the_lost_context_in_both_modes() {
    // The third GEMM's kernel faults; nothing synchronises; the program creates a second
    // cuBLAS handle, or a cuDNN one, which fails (NOT_INITIALIZED). Both modes: the GEMM's
    // async_error, then the create's init_failed with the context lost since that GEMM.
    for (how, create, line) in [("create", "cublasCreate_v2", "cublasCreate(&second)"), ("cudnn", "cudnnCreate", "create(&dnn)")] {
        both_modes_tell(how, &[(FaultKind::AsyncError, "cublasSgemm_v2", GEMM), (FaultKind::InitFailed, create, line)]);
        let gemm_mode = abort_after_error(how, "gemm", "async");
        let g = &gemm_mode.faults;
        assert_eq!(g[1].cause.as_ref().and_then(|c| c.pending_since_seq), Some(g[0].seq), "{how}: pending since the GEMM: {g:#?}");
    }
}

/// What a fault says, field by field, that both modes must agree on: everything but when and
/// where it was found (`found_at_seq`, the "surfaced later" wording, the time).
/// With the operands' scans unless `scans` is false.
fn story_of(f: &cublasguard_format::trace::Fault, scans: bool) -> String {
    let operands: Vec<String> = f
        .operands
        .iter()
        .map(|o| match scans {
            true => format!(
                "{} {} {}x{} ld {} scanned {} nan {:?} inf {:?} first {:?}",
                o.name, o.dtype, o.rows, o.cols, o.ld, o.scanned, o.nan, o.inf, o.first_nonfinite
            ),
            false => format!("{} {} {}x{} ld {}", o.name, o.dtype, o.rows, o.cols, o.ld),
        })
        .collect();
    format!(
        "{:?} {} #{} status {} error {:?} cause {:?} handle {:?} stream {:?} operands {operands:?} at {:?}",
        f.kind,
        f.api,
        f.seq,
        f.status,
        f.error.as_ref().map(|e| e.code),
        f.cause.as_ref().map(|c| c.kind),
        f.handle.as_ref().map(|h| (&h.math_mode, &h.pointer_mode, &h.stream, h.reduced_precision)),
        f.stream,
        own_line(f)
    )
}

#[test]
fn each_attribution_case_tells_the_same_story_in_both_modes_on_either_stand_in_with_the_programs_own_line() {
    // NaN/Inf in A, -Inf in B, NaN in C, an overflow, a bad leading dimension, a destroyed
    // handle, a host pointer, an operand out of bounds, a freed buffer, a device-mode scalar in
    // host memory (the stand-in's kernel then faults), a kernel fault (CUDASHIM_ASYNC_FAULT=2
    // makes the second GEMM's kernel fault).
    let cases =
        ["nan_a", "inf_b", "nan_c_beta1", "overflow", "bad_lda", "bad_handle", "host_pointer", "out_of_bounds", "use_after_free", "device_scalars", "async"];
    let program = scenarios();
    let mut differ = Vec::new();
    // The synchronous stand-in (CUDASHIM_SYNC=1) runs each kernel inside its launch: a kernel
    // fault is there before the call returns, before any breadcrumb could follow it.
    for standin in ["async", "sync"] {
        for case in cases {
            let told = |mode: &str| {
                let mut env = vec![("CUBLASGUARD_SYNC", mode)];
                if case == "async" {
                    env.push(("CUDASHIM_ASYNC_FAULT", "2"));
                }
                if standin == "sync" {
                    env.push(("CUDASHIM_SYNC", "1"));
                }
                let args = [case];
                let trace = run(Launch { env: &env, ..Launch::new(&program, &args) }).trace();
                // A kernel fault: gemm mode scanned the inputs at the call; the default cannot
                // know which reads queued before the faulting kernel ran, so it judges none.
                trace.faults.iter().map(|f| story_of(f, case != "async")).collect::<Vec<_>>()
            };
            let (mut gemm_mode, mut deferred) = (told("gemm"), told("deferred"));
            assert!(!gemm_mode.is_empty(), "{case} on the {standin} stand-in: no fault in gemm mode");
            assert!(gemm_mode.iter().all(|s| !s.ends_with("at None")), "{case} on the {standin} stand-in: no line of the program's own: {gemm_mode:#?}");
            if case == "async" {
                // What still differs (docs/robustness.md, "What changes under the guard"): gemm
                // mode's synchronisation after the faulting GEMM makes the program's next GEMM
                // fail (EXECUTION_FAILED, a fault of its own) where without it that call returns
                // before the kernel has run.
                gemm_mode.truncate(1);
                deferred.truncate(1);
            }
            if deferred != gemm_mode {
                differ.push(format!("{case} on the {standin} stand-in:\n  gemm     {gemm_mode:?}\n  deferred {deferred:?}"));
            }
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

#[test]
fn a_fault_reads_the_same_whatever_the_timing_of_the_device() {
    // Issue 43, point 5: a host-memory scalar, an operand past its allocation and a freed one
    // make the stand-in's kernel fault. Whether the device ran that kernel before the call
    // returned (the synchronous stand-in), soon after, or 20 ms later, the default mode writes
    // the same fault: the same words, the same CUDA error from the same call, found at the call.
    let program = scenarios();
    let timings: [&[(&str, &str)]; 3] = [&[], &[("CUDASHIM_WORKER_DELAY_US", "20000")], &[("CUDASHIM_SYNC", "1")]];
    for case in ["device_scalars", "host_pointer", "out_of_bounds", "use_after_free"] {
        let told: Vec<Vec<String>> = timings
            .iter()
            .map(|env| {
                let args = [case];
                let trace = run(Launch { env, ..Launch::new(&program, &args) }).trace();
                trace
                    .faults
                    .iter()
                    .map(|f| {
                        let error = f.error.as_ref().map(|e| (e.code, e.call.clone()));
                        format!("{:?} #{} {error:?} found at {:?}: {}", f.kind, f.seq, f.found_at_seq, without_addresses(&f.message))
                    })
                    .collect()
            })
            .collect();
        assert!(told[0].iter().any(|f| f.contains("Some((700, ")), "{case}: the kernel's fault attached: {:#?}", told[0]);
        assert_eq!(told[1], told[0], "{case}: the device 20 ms behind");
        assert_eq!(told[2], told[0], "{case}: the synchronous stand-in");
    }
}

#[test]
fn a_cuda_malloc_or_a_driver_allocation_that_fails_after_a_kernel_fault_tells_the_same_story_in_both_modes() {
    // As with cublasCreate: the third GEMM's kernel faults, nothing synchronises, and the
    // program's next cudaMalloc (or the driver's cuMemAlloc_v2) fails with the sticky error:
    // the GEMM's async_error, then the allocation's own failure, each at its own line.
    both_modes_tell("malloc", &[(FaultKind::AsyncError, "cublasSgemm_v2", GEMM), (FaultKind::ApiError, "cudaMalloc", "cudaMalloc(&more")]);
    both_modes_tell("cumalloc", &[(FaultKind::AsyncError, "cublasSgemm_v2", GEMM), (FaultKind::ApiError, "cuMemAlloc_v2", "alloc(&more")]);
}

#[test]
fn any_hooked_call_that_fails_after_a_kernel_fault_has_the_fault_pinned_on_its_gemm_before_anything_else() {
    // The program's cudaGraphInstantiate fails with the sticky error; the guard makes no fault
    // of that call's own, and the program leaves with _exit (no exit handler runs): the
    // GEMM's fault is in the trace only if the failing call was where the guard looked.
    both_modes_tell("instantiate", &[(FaultKind::AsyncError, "cublasSgemm_v2", GEMM)]);
}

#[test]
fn the_report_of_a_kernel_fault_pinned_later_names_the_gemms_line_as_the_culprits() {
    // The default pins the fault on the GEMM at exit; the report shows the GEMM's own line (not
    // the line of the copy where the error surfaced) beside "this call is the culprit".
    let run = abort_after_error_run("exit", "deferred", "async");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cublasguard"))
        .arg("report")
        .arg(&run.trace_path)
        .env("NO_COLOR", "1")
        .output()
        .expect("run cublasguard report");
    let body = String::from_utf8_lossy(&out.stdout);
    let at: Vec<&str> = body.lines().map(str::trim_start).filter(|l| l.starts_with("at ")).collect();
    let gemm = line_of(GEMM);
    assert!(at.first().is_some_and(|l| l.contains(&gemm)), "the culprit's line {gemm} first: {at:?}\n{body}");
    assert!(!at.iter().any(|l| l.contains(&line_of("CUDA_CHECK(cudaMemcpyAsync"))), "not the surfacing call's line: {body}");
    assert!(body.contains("so this call is the culprit"), "{body}");
}

#[test]
fn nvidias_samples_gone_wrong_keep_the_error_their_kernel_caused_when_the_program_aborts_at_it() {
    // CUDALibrarySamples' GemmEx with a host vector as B, GemmBatchedEx with a freed B[1]; the
    // stand-in's kernel then faults (700) and the program's CUDA_CHECK aborts at the next copy.
    // Both modes: the call's own fault with "this is what caused the 700" attached.
    for (how, kind, api) in [("hostb", FaultKind::HostPointer, "cublasGemmEx"), ("freedb", FaultKind::UseAfterFree, "cublasGemmBatchedEx")] {
        let line = format!("{api}(handle");
        both_modes_tell(how, &[(kind, api, line.as_str())]);
        for stand_in in ["async", "sync"] {
            let gemm_mode = abort_after_error(how, "gemm", stand_in);
            let errors: Vec<_> = gemm_mode.faults.iter().map(|f| f.error.as_ref().map(|e| e.code)).collect();
            assert_eq!(errors, [Some(700)], "{how} on the {stand_in} stand-in: {:#?}", gemm_mode.faults);
        }
    }
}
