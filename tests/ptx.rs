//! The on-device scan's PTX (src/ptx/nonfinite.ptx) assembles with NVIDIA's ptxas for the GPU
//! generations people train on (Volta, Ampere, Hopper), and on the stand-in stack (whose driver
//! has no module loader) the guard falls back to the host scan, says so once, and finds the
//! same NaNs.
//!
//! ptxas comes from PyPI's nvidia-cuda-nvcc-cu12 wheel (scripts/fetch-nvidia.sh); without it
//! the assembly test says so and passes, unless CUBLASGUARD_REQUIRE_NVIDIA=1 (.ci/run).

mod common;

use common::*;
use cublasguard::trace::FaultKind;
use std::path::PathBuf;
use std::process::Command;

fn ptxas() -> Option<PathBuf> {
    let cache = cache_dir();
    let ptxas = cache.join("nvidia-nvcc-cu12/nvidia/cuda_nvcc/bin/ptxas");
    if ptxas.exists() && cache.join("nvidia-nvcc-cu12/.complete").exists() {
        return Some(ptxas);
    }
    assert!(std::env::var("CUBLASGUARD_REQUIRE_NVIDIA").is_err(), "ptxas missing: run scripts/fetch-nvidia.sh");
    eprintln!("skipped: ptxas is not installed (run scripts/fetch-nvidia.sh)");
    None
}

#[test]
fn the_scan_kernel_assembles_for_volta_ampere_and_hopper() {
    let Some(ptxas) = ptxas() else { return };
    let ptx = manifest_dir().join("src/ptx/nonfinite.ptx");
    let dir = temp_dir("ptxas");
    for arch in ["sm_70", "sm_80", "sm_90"] {
        let out = Command::new(&ptxas)
            .arg(format!("-arch={arch}"))
            .arg("-o")
            .arg(dir.join(format!("nonfinite.{arch}.cubin")))
            .arg(&ptx)
            .output()
            .expect("run ptxas");
        assert!(out.status.success(), "{arch}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(dir.join(format!("nonfinite.{arch}.cubin")).metadata().unwrap().len() > 0);
    }
}

#[test]
fn without_a_real_driver_the_device_scan_falls_back_to_the_host_once() {
    let env = [("CUBLASGUARD_DEVICE_SCAN", "on")];
    let run = scenario("nan_a", &env);
    let t = run.trace();
    let f = only_fault(&t);
    assert_eq!(f.kind, FaultKind::NonfiniteInput, "the host scan found it");
    assert_eq!(f.operands.iter().find(|o| o.name == "A").and_then(|o| o.nan), Some(1));
    let why = t.environment.device_scan_fallback.as_deref().expect("the fallback is recorded");
    assert!(why.contains("cuCtxGetCurrent"), "{why}");
    assert_eq!(run.stderr().matches("the on-device scan is off").count(), 1, "{}", run.stderr());
}
