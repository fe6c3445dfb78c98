//! CuPy 12.3 (cupy-cuda12x) as a real client, on the stand-in: CuPy links the CUDA runtime,
//! cuBLAS and the driver by soname (and cuFFT, cuRAND, cuSPARSE, NVRTC and cuSOLVER, which the
//! stand-in has as libraries that load and fail cleanly), so it runs unmodified with the
//! stand-in on its library path. Its cuBLAS paths (matmul in f16/f32/f64/c64/c128, `@`, dot,
//! tensordot, batched matmul) compute the same bare and guarded, with no fault; what the
//! stand-in does not compute fails with the same error bare and guarded; each planted mistake
//! is named with its call, operand, element and the script's line (tests/python/cupy_cases.py),
//! those made through CuPy's own cuBLAS bindings (a bad ldb, a too-large k) among them.
//!
//! Needs the virtual environment from scripts/fetch-cupy.sh: without it (no marker from the
//! script, build.rs) these tests are ignored, with the reason, unless
//! CUBLASGUARD_REQUIRE_CUPY=1 (set by .ci/run, which creates it first).

use crate::common;

use common::*;
use cublasguard_format::trace::{self, Fault, FaultKind, Trace};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

fn python() -> PathBuf {
    let venv = cache_dir().join("cupy-venv");
    if venv.join(".complete").exists() {
        return venv.join("bin/python");
    }
    // These tests run only where scripts/fetch-cupy.sh ran (build.rs).
    panic!("no CuPy environment in {}: run scripts/fetch-cupy.sh", venv.display());
}

fn script() -> PathBuf {
    manifest_dir().join("tests/python/cupy_cases.py")
}

/// The script in `mode`, on the stand-in, guarded when `trace` is given; killed past two
/// minutes (a hang at import or exit). CuPy's kernel cache goes to a fresh folder.
fn run_script(mode: &str, trace: Option<&Path>, env: &[(&str, &str)]) -> Output {
    let home = temp_dir(&format!("cupy-home-{mode}"));
    let mut cmd = Command::new(python());
    cmd.arg(script())
        .arg(mode)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", &home)
        .env("PYTHONWARNINGS", "ignore")
        .env("LD_LIBRARY_PATH", with_standin_nvml());
    if let Some(trace) = trace {
        cmd.env("LD_PRELOAD", guard_lib()).env("CUBLASGUARD_TRACE", trace);
    }
    cmd.envs(env.iter().copied());
    let dir = temp_dir(&format!("cupy-{mode}"));
    output_within(&mut cmd, &dir, Duration::from_secs(120)).unwrap_or_else(|| panic!("cupy_cases.py {mode} did not finish within 120 s"))
}

#[test]
#[cfg_attr(not(cublasguard_has_cupy), ignore = "needs CuPy: run scripts/fetch-cupy.sh")]
fn cupy_computes_every_cublas_path_the_same_bare_and_guarded_with_no_fault() {
    let bare = run_script("clean", None, &[]);
    assert!(bare.status.success(), "{}", output_text(&bare));
    let out = String::from_utf8_lossy(&bare.stdout).into_owned();
    // A (4 x 3, 1..12 by rows) times B (3 x 2, 1..6 by rows), by each path and type.
    let product = "[[22.0, 28.0], [49.0, 64.0], [76.0, 100.0], [103.0, 136.0]]";
    for dtype in ["float16", "float32", "float64"] {
        assert!(out.contains(&format!("matmul {dtype} {product}\n")), "{dtype}: {out}");
    }
    for dtype in ["complex64", "complex128"] {
        let complex = "[[(22+0j), (28+0j)], [(49+0j), (64+0j)], [(76+0j), (100+0j)], [(103+0j), (136+0j)]]";
        assert!(out.contains(&format!("matmul {dtype} {complex}\n")), "{dtype}: {out}");
    }
    for dtype in ["float32", "float64"] {
        for call in ["@", "dot", "tensordot"] {
            assert!(out.contains(&format!("{call} {dtype} {product}\n")), "{call} {dtype}: {out}");
        }
        let gram = "[[166.0, 188.0, 210.0], [188.0, 214.0, 240.0], [210.0, 240.0, 270.0]]";
        assert!(out.contains(&format!("transposed {dtype} {gram}\n")), "{dtype}: {out}");
        // The second member: (A + 1)(B + 1).
        let batched = format!("[{product}, [[40.0, 49.0], [76.0, 94.0], [112.0, 139.0], [148.0, 184.0]]]");
        assert!(out.contains(&format!("batched {dtype} {batched}\n")), "{dtype}: {out}");
    }
    // What the stand-in does not compute fails cleanly, with each library's own error.
    for line in ["elementwise NVRTCError\n", "fft CuFFTError\n", "random CURANDError\n", "solver CUSOLVERError\n", "sparse CuSparseError\n"] {
        assert!(out.contains(line), "{line}: {out}");
    }

    let trace_path = temp_dir("cupy-clean").join("trace.json");
    let guarded = run_script("clean", Some(&trace_path), &[]);
    assert_eq!(out, String::from_utf8_lossy(&guarded.stdout), "same stdout: {}", output_text(&guarded));
    assert_eq!(bare.status.code(), guarded.status.code(), "same exit status: {}", output_text(&guarded));
    let t = trace::read(&trace_path).expect("a trace at exit");
    assert!(t.faults.is_empty(), "{:#?}", t.faults);
    assert!(t.crash.is_none());
    // Every product went through cuBLAS, where the guard saw it: 5 matmuls, 4 GEMMs (@, dot,
    // tensordot, transposed) in each of 2 types, and the 2 batched matmuls.
    let calls = |name: &str| t.summary.calls.get(name).copied().unwrap_or(0);
    assert_eq!(calls("cublasGemmEx"), 13, "{:?}", t.summary.calls);
    assert_eq!(calls("cublasGemmStridedBatchedEx"), 2, "{:?}", t.summary.calls);
    assert!(calls("cudaMalloc") > 0, "CuPy's pool allocates through cudaMalloc: {:?}", t.summary.calls);
}

/// The fault `name` planted on the line marked `# FAULT name`: made by `api`, and the script's
/// frame nearest the call (the first outside CuPy) is that line, in `function`.
fn planted_in<'a>(t: &'a Trace, name: &str, api: &str, kind: FaultKind, function: &str) -> &'a Fault {
    let script = script();
    let line = line_of(&script, &format!("# FAULT {name}"));
    let found: Vec<&Fault> = t.faults.iter().filter(|f| f.python_stack.iter().any(|p| p.line == line && Path::new(&p.file) == script)).collect();
    assert_eq!(found.len(), 1, "{name}: one fault at line {line}: {:#?}", t.faults);
    let f = found[0];
    assert_eq!((f.api.as_str(), f.kind), (api, kind), "{name}: {f:#?}");
    let own = f.python_stack.iter().find(|p| !p.file.contains("site-packages")).map(|p| (p.line, p.function.as_str()));
    assert_eq!(own, Some((line, function)), "{name}: {f:#?}");
    f
}

fn planted<'a>(t: &'a Trace, name: &str, api: &str, kind: FaultKind) -> &'a Fault {
    planted_in(t, name, api, kind, "faults")
}

fn operand<'a>(f: &'a Fault, name: &str) -> &'a trace::Operand {
    f.operands.iter().find(|o| o.name == name).unwrap_or_else(|| panic!("no operand {name}: {f:#?}"))
}

#[test]
#[cfg_attr(not(cublasguard_has_cupy), ignore = "needs CuPy: run scripts/fetch-cupy.sh")]
fn each_mistake_planted_through_cupy_is_named_with_its_call_operand_element_and_python_line() {
    // Refused (CUBLASGUARD_ON_FAULT=error), so CuPy raises at each and the script goes on.
    let trace_path = temp_dir("cupy-faults").join("trace.json");
    let out = run_script("faults", Some(&trace_path), &[("CUBLASGUARD_ON_FAULT", "error")]);
    assert!(out.status.success(), "{}", output_text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    for name in ["nan_a", "inf_b", "nan_batched", "short", "freed", "host", "bad_ldb", "large_k", "f16_overflow"] {
        assert!(stdout.contains(&format!("{name} CUBLASError\n")), "{name}: {}", output_text(&out));
    }
    assert!(stdout.contains("after float32 [[22.0, 28.0], [49.0, 64.0], [76.0, 100.0], [103.0, 136.0]]\n"), "{}", output_text(&out));
    let t = trace::read(&trace_path).expect("a trace at exit");
    assert_eq!(t.faults.len(), 9, "{:#?}", t.faults);

    // CuPy keeps arrays by rows and asks cuBLAS for C^T = B^T A^T: the array `a` of `a @ b` is
    // cuBLAS's B, stored k x m, so its element [i, j] is B's (row j, col i).
    let f = planted(&t, "nan_a", "cublasGemmEx", FaultKind::NonfiniteInput);
    let b = operand(f, "B");
    assert_eq!((b.nan, b.first_nonfinite.as_ref().map(|p| (p.row, p.col))), (Some(1), Some((1, 2))), "{f:#?}");

    let f = planted(&t, "inf_b", "cublasGemmEx", FaultKind::NonfiniteInput);
    let a = operand(f, "A");
    assert_eq!((a.inf, a.first_nonfinite.as_ref().map(|p| (p.row, p.col))), (Some(1), Some((0, 1))), "{f:#?}");

    let f = planted(&t, "nan_batched", "cublasGemmStridedBatchedEx", FaultKind::NonfiniteInput);
    let b = operand(f, "B");
    assert_eq!((b.nan, b.first_nonfinite.as_ref().map(|p| (p.row, p.col))), (Some(1), Some((0, 3))), "{f:#?}");
    assert!(f.message.starts_with("operand B (batch member 1 of 2,"), "{}", f.message);

    let f = planted(&t, "short", "cublasGemmEx", FaultKind::OutOfBounds);
    assert!(f.message.starts_with("operand B ") && f.message.contains("overruns it by 24 bytes"), "{}", f.message);

    let f = planted(&t, "freed", "cublasGemmEx", FaultKind::UseAfterFree);
    assert!(f.message.starts_with("operand A ") && f.message.contains("released by cudaFree"), "{}", f.message);

    let f = planted(&t, "host", "cublasGemmEx", FaultKind::HostPointer);
    assert!(f.message.starts_with("operand B ") && f.message.contains("host (CPU) buffer"), "{}", f.message);

    // cuBLAS called directly through CuPy's bindings (cupy_backends.cuda.libs.cublas).
    let f = planted(&t, "bad_ldb", "cublasSgemm_v2", FaultKind::InvalidArgument);
    assert_eq!(f.message, "ldb = 2 but transb = N needs ldb >= max(1, k) = 3", "{f:#?}");
    assert_eq!(f.args["ldb"].as_i64(), Some(2), "{f:#?}");

    let f = planted(&t, "large_k", "cublasGemmEx", FaultKind::OutOfBounds);
    assert_eq!(f.args["k"].as_i64(), Some(6), "{f:#?}");
    assert!(f.message.starts_with("operand A (4 x 6 as stored, ld 4)") && f.message.contains("overruns it by 48 bytes"), "{}", f.message);

    // C = A B in float16 holds 3 x 300 x 300 = 270000 in every element: past 65504, Inf.
    let f = planted(&t, "f16_overflow", "cublasGemmEx", FaultKind::NonfiniteOutput);
    assert_eq!(operand(f, "C").inf, Some(8), "{f:#?}");
    assert!(f.message.starts_with("this call produced 8 Inf") && f.message.contains("from finite inputs (overflow"), "{}", f.message);
}

#[test]
#[cfg_attr(not(cublasguard_has_cupy), ignore = "needs CuPy: run scripts/fetch-cupy.sh")]
fn cupy_on_a_gpu_older_than_maxwell_reaches_cublas_dgemm_and_computes_the_same_guarded() {
    // Below compute capability 5.0 CuPy's tensordot calls cublasDgemm_v2, not cublasGemmEx.
    let env = [("CUDASHIM_COMPUTE_CAPABILITY", "3.5")];
    let bare = run_script("old_gpu", None, &env);
    assert!(bare.status.success(), "{}", output_text(&bare));
    let out = String::from_utf8_lossy(&bare.stdout).into_owned();
    assert_eq!(out, "tensordot float64 [[22.0, 28.0], [49.0, 64.0], [76.0, 100.0], [103.0, 136.0]]\n");
    let trace_path = temp_dir("cupy-old-gpu").join("trace.json");
    let guarded = run_script("old_gpu", Some(&trace_path), &env);
    assert_eq!(out, String::from_utf8_lossy(&guarded.stdout), "same stdout: {}", output_text(&guarded));
    let t = trace::read(&trace_path).expect("a trace at exit");
    assert!(t.faults.is_empty(), "{:#?}", t.faults);
    assert_eq!(t.summary.calls.get("cublasDgemm_v2"), Some(&1), "{:?}", t.summary.calls);
    assert_eq!(t.summary.calls.get("cublasGemmEx"), None, "{:?}", t.summary.calls);
}

#[test]
#[cfg_attr(not(cublasguard_has_cupy), ignore = "needs CuPy: run scripts/fetch-cupy.sh")]
fn a_nan_reaching_a_cupy_product_under_the_defaults_is_named_and_changes_nothing_cupy_computes() {
    let bare = run_script("nan", None, &[]);
    assert!(bare.status.success(), "{}", output_text(&bare));
    let out = String::from_utf8_lossy(&bare.stdout).into_owned();
    // Row 0 of A holds the NaN: row 0 of the product is NaN, the rest as without it.
    assert_eq!(out, "nan float32 [[nan, nan], [49.0, 64.0], [76.0, 100.0], [103.0, 136.0]]\n");
    let trace_path = temp_dir("cupy-nan").join("trace.json");
    let guarded = run_script("nan", Some(&trace_path), &[]);
    assert_eq!(out, String::from_utf8_lossy(&guarded.stdout), "same stdout: {}", output_text(&guarded));
    assert_eq!(bare.status.code(), guarded.status.code(), "same exit status: {}", output_text(&guarded));
    let t = trace::read(&trace_path).expect("a trace at exit");
    assert_eq!(t.faults.len(), 1, "{:#?}", t.faults);
    let f = planted_in(&t, "default_nan", "cublasGemmEx", FaultKind::NonfiniteInput, "nan");
    let b = operand(f, "B");
    assert_eq!((b.nan, b.first_nonfinite.as_ref().map(|p| (p.row, p.col))), (Some(1), Some((2, 0))), "{f:#?}");
}
