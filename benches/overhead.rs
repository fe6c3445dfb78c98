//! The guard's cost per intercepted call, measured on whole processes: the same GEMM loop
//! (benches/c/gemm_loop.c, on the stand-in stack) runs bare and guarded, interleaved
//! (A B A B ...), and the medians of its own per-call timings are compared.
//!   cargo bench --bench overhead

use std::path::{Path, PathBuf};
use std::process::Command;

const ROUNDS: usize = 9;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Builds one of the C workloads against the stand-in's headers and libraries.
fn build(standin: &Path, source: &str, name: &str) -> PathBuf {
    let program = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let built = Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&program)
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(source))
        .arg(format!("-I{}", standin.join("include").display()))
        .arg(format!("-L{}", standin.join("lib").display()))
        .args(["-lcublasLt", "-lcublas", "-lcudart"])
        .status()
        .expect("cc");
    assert!(built.success(), "cc {source}");
    program
}

fn main() {
    let standin = PathBuf::from(env!("CUBLASGUARD_STANDIN_DIR"));
    let exe = std::env::current_exe().expect("bench exe");
    let guard = exe.parent().expect("deps").join("libcublasguard.so");
    assert!(guard.exists(), "{} missing", guard.display());
    let libpath = format!("{}:{}", standin.join("lib").display(), standin.join("driver").display());
    // One run of a workload that prints its own nanoseconds per call; `checks` is None for the
    // bare run, Some(None) for the guard's default checks, Some(Some(list)) for a list.
    let time = |program: &Path, args: &[&str], checks: Option<Option<&str>>| -> f64 {
        let mut cmd = Command::new(program);
        cmd.args(args).env("LD_LIBRARY_PATH", &libpath).env_remove("LD_PRELOAD").env_remove("CUBLASGUARD_TRACE");
        if let Some(checks) = checks {
            // The host scan, unless the caller's environment asks otherwise: on the stand-in
            // the device scan runs the kernel's host build thread by thread, an emulation whose
            // cost says nothing about a GPU's.
            let device_scan = std::env::var("CUBLASGUARD_DEVICE_SCAN").unwrap_or_else(|_| "off".into());
            cmd.env("LD_PRELOAD", &guard).env("CUBLASGUARD_QUIET", "1").env("CUBLASGUARD_DEVICE_SCAN", device_scan);
            if let Some(checks) = checks {
                cmd.env("CUBLASGUARD_CHECKS", checks);
            }
        }
        let out = cmd.output().expect("run workload");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().parse().expect("ns per call")
    };
    // Bare and guarded runs interleaved (A B A B ...), medians compared.
    let compare = |label: &str, program: &Path, args: &[&str], checks: Option<&str>| {
        let (mut bare, mut guarded) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            bare.push(time(program, args, None));
            guarded.push(time(program, args, Some(checks)));
        }
        let (b, g) = (median(bare), median(guarded));
        println!("{label:<42} {b:>12.1} {g:>12.1} {:>12.1} {:>8.3}", g - b, g / b);
    };
    println!("{:<42} {:>12} {:>12} {:>12} {:>8}", "workload", "bare ns", "guarded ns", "added ns", "ratio");
    let gemm_loop = build(&standin, "benches/c/gemm_loop.c", "gemm_loop");
    for (label, dims, checks) in [
        ("2x2x2 sgemm, checks args,bounds", ["2", "2", "2", "200000"], "args,bounds"),
        ("2x2x2 sgemm, all checks", ["2", "2", "2", "50000"], "all"),
        ("64x64x64 sgemm, args,bounds", ["64", "64", "64", "2000"], "args,bounds"),
        ("64x64x64 sgemm, all checks", ["64", "64", "64", "2000"], "all"),
    ] {
        compare(label, &gemm_loop, &dims, Some(checks));
    }
    // Kernel launches (tests/c/launches.c): each one is recorded (address, configuration,
    // stream), nothing more.
    let launches = build(&standin, "tests/c/launches.c", "launches");
    compare("cudaLaunchKernel, default checks", &launches, &["many", "200000"], None);
}
