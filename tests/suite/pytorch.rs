//! PyTorch (2.15, CUDA 13.2 wheel) under the guard on a machine without a GPU: importing
//! torch, a CPU matrix product, torch.cuda.is_available() and a failing CUDA allocation behave
//! exactly as without the guard, with no crash or hang at import or exit, and the trace names
//! libcudart.so.13 and the missing driver.
//!
//! Needs the virtual environment from scripts/fetch-torch.sh: without it (no marker from the
//! script, build.rs) these tests are ignored, with the reason, unless CUBLASGUARD_REQUIRE_TORCH=1
//! (set by .ci/run, which creates it first).

use crate::common;

use common::*;
use cublasguard_format::trace::{self, FaultKind, InitCauseKind};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

pub(crate) fn python() -> PathBuf {
    let cache = cache_dir();
    let venv = cache.join("torch-venv");
    if venv.join(".complete").exists() {
        return venv.join("bin/python");
    }
    // These tests run only where scripts/fetch-torch.sh ran (build.rs).
    panic!("no PyTorch environment in {}: run scripts/fetch-torch.sh", venv.display());
}

/// Runs to completion, or fails the test after `limit` (a hang at import or exit).
fn run_with_limit(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn python");
    let started = Instant::now();
    loop {
        if child.try_wait().expect("wait").is_some() {
            return child.wait_with_output().expect("output");
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            panic!("python did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

pub(crate) fn python_run(python: &PathBuf, args: &[&str], guard: Option<&std::path::Path>) -> Output {
    let mut cmd = Command::new(python);
    cmd.args(args).env_remove("LD_PRELOAD").env_remove("CUBLASGUARD_TRACE").env("PYTHONWARNINGS", "ignore");
    if let Some(trace) = guard {
        cmd.env("LD_PRELOAD", guard_lib()).env("CUBLASGUARD_TRACE", trace);
    }
    run_with_limit(cmd, Duration::from_secs(300))
}

#[test]
#[cfg_attr(not(cublasguard_has_torch), ignore = "needs PyTorch: run scripts/fetch-torch.sh")]
fn torch_behaves_the_same_under_the_guard() {
    let python = python();
    let script = manifest_dir().join("tests/python/smoke.py");
    let script = script.to_str().unwrap();
    let bare = python_run(&python, &[script], None);
    let trace_path = temp_dir("torch").join("trace.json");
    let guarded = python_run(&python, &[script], Some(&trace_path));
    let out = String::from_utf8_lossy(&bare.stdout).into_owned();
    assert!(bare.status.success(), "{out}{}", String::from_utf8_lossy(&bare.stderr));
    assert!(out.contains("cpu matmul [[5.0, 14.0], [14.0, 50.0]]") && out.contains("cuda available False"), "{out}");
    assert!(out.contains("zeros on cuda failed: RuntimeError"), "{out}");
    assert_eq!(out, String::from_utf8_lossy(&guarded.stdout), "same stdout");
    assert_eq!(bare.status.code(), guarded.status.code(), "same exit status: {}", String::from_utf8_lossy(&guarded.stderr));

    let t = trace::read(&trace_path).expect("a trace at exit");
    let cudart = t.environment.libraries.iter().find(|l| l.soname == "libcudart.so.13").expect("libcudart.so.13 mapped");
    assert!(cudart.path.contains("torch-venv") && cudart.path.ends_with("libcudart.so.13"), "{}", cudart.path);
    assert_eq!(t.environment.runtime_version, Some(13020));
    assert!(!t.environment.driver.loaded);
    let framework = t.environment.framework.as_ref().expect("PyTorch's build named in the environment");
    assert_eq!((framework.name.as_str(), framework.version.as_deref(), framework.cuda.as_deref()), ("torch", Some("2.15.0+cu132"), Some("13.2")));
    assert!(t.crash.is_none());
    // torch.cuda.is_available() and the failed tensor only probe: the script handles both.
    assert!(t.faults.is_empty(), "a probe is not a fault: {:#?}", t.faults);
    let probe = t.environment.probe.as_ref().expect("CUDA's failed start, as a note");
    assert_eq!(probe.api, "cudaGetDeviceCount");
    assert_eq!(probe.cause.as_ref().map(|c| c.kind), Some(InitCauseKind::NoDriver));
    assert!(probe.cause.as_ref().is_some_and(|c| c.message.contains("no NVIDIA driver")), "{probe:?}");
    assert!(t.summary.calls.keys().all(|k| !k.starts_with("__cudaRegister")), "registrations are not counted: {:?}", t.summary.calls);
}

#[test]
#[cfg_attr(not(cublasguard_has_torch), ignore = "needs PyTorch: run scripts/fetch-torch.sh")]
fn the_training_example_runs_the_same_under_the_guard() {
    let python = python();
    let train = manifest_dir().join("examples/train.py");
    let train = train.to_str().unwrap();
    for (inject, ok) in [("none", true), ("nan", true), ("width", false)] {
        let args = [train, "--device", "cpu", "--steps", "2", "--inject", inject];
        let bare = python_run(&python, &args, None);
        let trace_path = temp_dir("train").join("trace.json");
        let guarded = python_run(&python, &args, Some(&trace_path));
        assert_eq!(bare.status.success(), ok, "{inject}: {}", String::from_utf8_lossy(&bare.stderr));
        assert_eq!(bare.stdout, guarded.stdout, "{inject}");
        assert_eq!(bare.status.code(), guarded.status.code(), "{inject}");
    }
}

#[test]
#[cfg_attr(not(cublasguard_has_torch), ignore = "needs PyTorch: run scripts/fetch-torch.sh")]
fn a_failed_cuda_start_names_the_users_python_line() {
    let python = python();
    let script = manifest_dir().join("tests/python/torch_line.py");
    let trace_path = temp_dir("torch-line").join("trace.json");
    let out = python_run(&python, &[script.to_str().unwrap()], Some(&trace_path));
    assert!(String::from_utf8_lossy(&out.stdout).contains("failed: RuntimeError"), "{}", String::from_utf8_lossy(&out.stderr));
    let t = trace::read(&trace_path).expect("trace");
    let line = std::fs::read_to_string(&script).unwrap().lines().position(|l| l.contains("# FRAME make_tensor")).unwrap() as u32 + 1;
    // The script catches the error: the probe is a note, with the line that asked.
    assert!(t.faults.is_empty(), "{:#?}", t.faults);
    let init = t.environment.probe.as_ref().expect("CUDA's failed start, as a note");
    let script_s = script.display().to_string();
    assert!(init.python_stack.iter().any(|f| f.file == script_s && f.line == line && f.function == "make_tensor"), "{:#?}", init.python_stack);
    assert!(t.environment.python_version.is_some());
    // PyTorch's C++ frames, demangled, with their library.
    assert!(init.backtrace.iter().any(|l| l.starts_with("at::cuda::") && l.contains("libtorch_cuda.so+0x")), "{:#?}", init.backtrace);
}

#[cfg_attr(not(cublasguard_has_torch), ignore = "needs PyTorch: run scripts/fetch-torch.sh")]
#[test]
fn a_script_that_dies_of_the_missing_driver_gets_its_postmortem_with_its_line() {
    let python = python();
    let script = manifest_dir().join("tests/python/torch_dies.py");
    let trace_path = temp_dir("torch-dies").join("trace.json");
    let out = python_run(&python, &[script.to_str().unwrap()], Some(&trace_path));
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let t = trace::read(&trace_path).expect("trace");
    let line = std::fs::read_to_string(&script).unwrap().lines().position(|l| l.contains("# FRAME make_tensor")).unwrap() as u32 + 1;
    let init = t.faults.iter().find(|f| f.kind == FaultKind::InitFailed).expect("the probe, now the fault");
    assert_eq!(init.api, "cudaGetDeviceCount");
    assert!(init.message.contains("exited with status 1"), "{}", init.message);
    assert!(init.python_stack.iter().any(|f| f.line == line && f.function == "make_tensor"), "{:#?}", init.python_stack);
}

/// Functions PyTorch imports that need no check: they touch no device memory and take no
/// operand. Each with its reason; anything else PyTorch imports from cuBLAS must be hooked.
const NEEDS_NO_CHECK: &[(&str, &str)] = &[
    ("cublasGetMathMode", "a getter: reads the handle's setting"),
    ("cublasGetPointerMode_v2", "a getter: reads the handle's setting"),
    ("cublasSetSmCountTarget", "a tuning hint: how many SMs to use, no operand"),
    ("cublasGetStatusString", "an error string"),
    ("cublasGetStatusName", "an error string"),
    ("cublasLtGetVersion", "a version number"),
    ("cublasLtMatmulAlgoCheck", "algorithm selection: describes, runs nothing"),
    ("cublasLtMatmulAlgoConfigGetAttribute", "algorithm selection: describes, runs nothing"),
    ("cublasLtMatmulAlgoConfigSetAttribute", "algorithm selection: describes, runs nothing"),
    ("cublasLtMatmulAlgoGetHeuristic", "algorithm selection: describes, runs nothing"),
    ("cublasLtMatmulAlgoInit", "algorithm selection: describes, runs nothing"),
    ("cublasLtMatmulDescSetAttribute", "a descriptor setter: the guard reads the attributes back at cublasLtMatmul"),
    ("cublasLtMatrixLayoutSetAttribute", "a descriptor setter: the guard reads the attributes back at cublasLtMatmul"),
    ("cublasLtMatmulPreferenceCreate", "heuristic preferences: no device memory"),
    ("cublasLtMatmulPreferenceDestroy", "heuristic preferences: no device memory"),
    ("cublasLtMatmulPreferenceSetAttribute", "heuristic preferences: no device memory"),
];

/// cuBLAS and cublasLt functions `library` imports that the guard neither hooks nor lists as
/// needing no check.
fn unguarded_imports(library: &std::path::Path) -> Vec<String> {
    let hooked = dynamic_symbols(&guard_lib(), false);
    let mut missing: Vec<String> = dynamic_symbols(library, true)
        .into_iter()
        .filter(|s| s.starts_with("cublas"))
        .filter(|s| !hooked.contains(s) && !NEEDS_NO_CHECK.iter().any(|(name, _)| name == s))
        .collect();
    missing.sort();
    missing.dedup();
    missing
}

#[test]
#[cfg_attr(not(cublasguard_has_torch), ignore = "needs PyTorch: run scripts/fetch-torch.sh")]
fn the_guard_hooks_every_cublas_compute_function_pytorch_imports() {
    let python = python();
    let out = python_run(&python, &["-c", "import torch, os; print(os.path.dirname(torch.__file__))"], None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let lib = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("lib");
    let cuda = lib.join("libtorch_cuda.so");
    let imports = dynamic_symbols(&cuda, true);
    assert!(imports.iter().any(|s| s == "cublasGemmEx"), "{} imports no cuBLAS at all: wrong file?", cuda.display());
    let missing = unguarded_imports(&cuda);
    assert!(
        missing.is_empty(),
        "libtorch_cuda.so imports cuBLAS functions the guard does not hook (hook them, or add them to NEEDS_NO_CHECK \
         with a reason): {missing:?}"
    );
    // The linear-algebra library calls far more of cuBLAS (level-1 and level-2 BLAS): reported,
    // not required.
    let linalg = lib.join("libtorch_cuda_linalg.so");
    if linalg.exists() {
        let missing = unguarded_imports(&linalg);
        eprintln!("libtorch_cuda_linalg.so: {} cuBLAS functions not hooked: {}", missing.len(), missing.join(" "));
    }
}
