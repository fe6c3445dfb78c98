//! NVIDIA's nvmath-python 1.0 (its cuBLAS and cuBLASLt bindings and the high-level
//! `nvmath.linalg.advanced.matmul`) as a second real client, on the stand-in: it finds cuBLAS
//! by soname and the driver through cuda-bindings (`cuGetProcAddress_v2`), so it runs with
//! the stand-in on its library path. Clean calls compute the same bare and guarded, with no
//! fault (the high-level matmul without C passes C = NULL with beta = 0); each planted mistake
//! is named with its call, operand, element and the script's line (tests/python/nvmath_cases.py).
//!
//! Needs the virtual environment from scripts/fetch-nvmath.sh: without it (no marker from the
//! script, build.rs) these tests are ignored, with the reason, unless
//! CUBLASGUARD_REQUIRE_NVMATH=1 (set by .ci/run, which creates it first).

use crate::common;

use common::*;
use cublasguard_format::trace::{self, Fault, FaultKind, Trace};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

fn python() -> PathBuf {
    let venv = cache_dir().join("nvmath-venv");
    if venv.join(".complete").exists() {
        return venv.join("bin/python");
    }
    // These tests run only where scripts/fetch-nvmath.sh ran (build.rs).
    panic!("no nvmath-python environment in {}: run scripts/fetch-nvmath.sh", venv.display());
}

fn script() -> PathBuf {
    manifest_dir().join("tests/python/nvmath_cases.py")
}

/// The script in `mode`, on the stand-in (its libraries, driver and NVML: cuda-core starts
/// NVML), guarded when `trace` is given; killed past two minutes (a hang at import or exit).
fn run_script(mode: &str, trace: Option<&Path>, env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(python());
    cmd.arg(script())
        .arg(mode)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", std::env::temp_dir())
        .env("PYTHONWARNINGS", "ignore")
        .env("LD_LIBRARY_PATH", with_standin_nvml());
    if let Some(trace) = trace {
        cmd.env("LD_PRELOAD", guard_lib()).env("CUBLASGUARD_TRACE", trace);
    }
    cmd.envs(env.iter().copied());
    let dir = temp_dir(&format!("nvmath-{mode}"));
    output_within(&mut cmd, &dir, Duration::from_secs(120)).unwrap_or_else(|| panic!("nvmath_cases.py {mode} did not finish within 120 s"))
}

#[test]
#[cfg_attr(not(cublasguard_has_nvmath), ignore = "needs nvmath-python: run scripts/fetch-nvmath.sh")]
fn nvmath_computes_the_same_bare_and_guarded_with_no_fault_even_without_c() {
    let bare = run_script("clean", None, &[]);
    assert!(bare.status.success(), "{}", output_text(&bare));
    let out = String::from_utf8_lossy(&bare.stdout).into_owned();
    // A (4 x 3, 1..12 by rows) times B (3 x 2, 1..6 by rows), by each path.
    let product = "[[22.0, 28.0], [49.0, 64.0], [76.0, 100.0], [103.0, 136.0]]";
    for call in ["sgemm", "gemm_ex", "cublasLt matmul", "advanced matmul"] {
        assert!(out.contains(&format!("{call} {product}\n")), "{call}: {out}");
    }
    assert!(out.contains("advanced matmul with c [[24.0, 30.0], [51.0, 66.0], [78.0, 102.0], [105.0, 138.0]]"), "{out}");

    let trace_path = temp_dir("nvmath-clean").join("trace.json");
    let guarded = run_script("clean", Some(&trace_path), &[]);
    assert_eq!(out, String::from_utf8_lossy(&guarded.stdout), "same stdout: {}", output_text(&guarded));
    assert_eq!(bare.status.code(), guarded.status.code(), "same exit status: {}", output_text(&guarded));
    let t = trace::read(&trace_path).expect("a trace at exit");
    // nvmath's own path, C = NULL with beta = 0 included, is no fault.
    assert!(t.faults.is_empty(), "{:#?}", t.faults);
    assert!(t.crash.is_none());
    for call in ["cublasSgemm_v2", "cublasGemmEx", "cublasLtMatmul"] {
        assert!(t.summary.calls.get(call).is_some_and(|&n| n > 0), "{call} not seen: {:?}", t.summary.calls);
    }
    // Three cublasLtMatmul calls: the layouts one and the two high-level matmuls.
    assert_eq!(t.summary.calls.get("cublasLtMatmul"), Some(&3), "{:?}", t.summary.calls);
}

/// The fault `name` planted on the line marked `# FAULT name`: made by `api`, with a frame of
/// the script at that line.
fn planted<'a>(t: &'a Trace, name: &str, api: &str, kind: FaultKind) -> &'a Fault {
    let script = script();
    let line = line_of(&script, &format!("# FAULT {name}"));
    let found: Vec<&Fault> = t.faults.iter().filter(|f| f.python_stack.iter().any(|p| p.line == line && Path::new(&p.file) == script)).collect();
    assert_eq!(found.len(), 1, "{name}: one fault at line {line}: {:#?}", t.faults);
    let f = found[0];
    assert_eq!((f.api.as_str(), f.kind), (api, kind), "{name}: {f:#?}");
    assert_eq!(f.python_stack.iter().find(|p| p.line == line).map(|p| p.function.as_str()), Some("faults"), "{name}");
    f
}

fn operand<'a>(f: &'a Fault, name: &str) -> &'a trace::Operand {
    f.operands.iter().find(|o| o.name == name).unwrap_or_else(|| panic!("no operand {name}: {f:#?}"))
}

#[test]
#[cfg_attr(not(cublasguard_has_nvmath), ignore = "needs nvmath-python: run scripts/fetch-nvmath.sh")]
fn each_mistake_planted_through_nvmath_is_named_with_its_call_operand_element_and_python_line() {
    // Refused (CUBLASGUARD_ON_FAULT=error), so no planted mistake breaks the stand-in's context
    // for the ones after it, as an out-of-bounds read would on a GPU.
    let trace_path = temp_dir("nvmath-faults").join("trace.json");
    let out = run_script("faults", Some(&trace_path), &[("CUBLASGUARD_ON_FAULT", "error")]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    // Every refused call reached nvmath as an error status, which it raised.
    for (name, error) in [
        ("nan_gemm_ex", "cuBLASError"),
        ("nan_lt", "cuBLASLtError"),
        ("bad_ldb", "cuBLASError"),
        ("freed", "cuBLASError"),
        ("host", "cuBLASError"),
        ("lt_ld", "cuBLASLtError"),
    ] {
        assert!(stdout.contains(&format!("{name} {error}\n")), "{name}: {}", output_text(&out));
    }
    let t = trace::read(&trace_path).expect("a trace at exit");
    assert_eq!(t.faults.len(), 6, "{:#?}", t.faults);

    let f = planted(&t, "nan_gemm_ex", "cublasGemmEx", FaultKind::NonfiniteInput);
    let a = operand(f, "A");
    assert_eq!((a.nan, a.first_nonfinite.as_ref().map(|p| (p.row, p.col))), (Some(1), Some((2, 1))), "{f:#?}");

    let f = planted(&t, "nan_lt", "cublasLtMatmul", FaultKind::NonfiniteInput);
    let b = operand(f, "B");
    assert_eq!((b.inf, b.first_nonfinite.as_ref().map(|p| (p.row, p.col))), (Some(1), Some((1, 0))), "{f:#?}");

    let f = planted(&t, "bad_ldb", "cublasSgemm_v2", FaultKind::OutOfBounds);
    assert_eq!(operand(f, "B").ld, 8);
    assert!(f.message.starts_with("operand B ") && f.message.contains("overruns it by 20 bytes"), "{}", f.message);

    let f = planted(&t, "freed", "cublasSgemm_v2", FaultKind::UseAfterFree);
    assert!(f.message.starts_with("operand B ") && f.message.contains("released by cuMemFree_v2"), "{}", f.message);

    let f = planted(&t, "host", "cublasSgemm_v2", FaultKind::HostPointer);
    assert!(f.message.starts_with("operand A ") && f.message.contains("host (CPU) buffer"), "{}", f.message);

    let f = planted(&t, "lt_ld", "cublasLtMatmul", FaultKind::InvalidArgument);
    assert!(f.message.starts_with("Adesc: ld = 2") && f.message.contains("ld >= max(1, rows) = 4"), "{}", f.message);
}
