//! JAX 0.7.2 with its CUDA 12 plugin (as XLA loads CUDA: `dlopen(RTLD_LOCAL)` and `dlsym` on the
//! handle) under the guard, on a machine without a GPU: it imports, the plugin loads the CUDA 12
//! runtime and gives up, JAX falls back to the CPU, and a matrix product comes out identical with
//! and without the guard, with no hang at import or exit.
//!
//! Needs the virtual environment from scripts/fetch-jax.sh and the CUDA 12 libraries from
//! scripts/fetch-nvidia.sh; without them these tests say so and pass, unless
//! CUBLASGUARD_REQUIRE_JAX=1 (set by .ci/run, which creates them first).

use crate::common;

use common::*;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The JAX environment's python and the CUDA 12 library path.
fn setup() -> (PathBuf, String) {
    let root = cache_dir();
    let venv = root.join("jax-venv");
    let cuda = root.join("nvidia-cu12");
    if venv.join(".complete").exists() && cuda.join(".complete").exists() {
        let libs = [cuda.join("nvidia/cuda_runtime/lib"), cuda.join("nvidia/cublas/lib")];
        return (venv.join("bin/python"), libs.map(|p| p.display().to_string()).join(":"));
    }
    // This test runs only where scripts/fetch-jax.sh ran (build.rs).
    panic!("no JAX environment in {}: run scripts/fetch-nvidia.sh and scripts/fetch-jax.sh", root.display());
}

const SCRIPT: &str = "import jax, jax.numpy as jnp\n\
x = jnp.arange(16.0, dtype=jnp.float32).reshape(4, 4)\n\
print('devices', [d.platform for d in jax.devices()])\n\
print('mm', (x @ x).tolist())\n";

fn run_python(python: &PathBuf, libs: &str, trace: Option<&std::path::Path>) -> (String, String, Option<i32>) {
    let mut cmd = Command::new(python);
    cmd.args(["-c", SCRIPT]).env_clear().env("PATH", "/usr/bin:/bin").env("LD_LIBRARY_PATH", libs).env("HOME", std::env::temp_dir());
    if let Some(trace) = trace {
        cmd.env("LD_PRELOAD", guard_lib()).env("CUBLASGUARD_TRACE", trace);
    }
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn python");
    let started = Instant::now();
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > Duration::from_secs(300) {
            let _ = child.kill();
            panic!("JAX did not finish within 300 s (a hang at import or exit)");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("output");
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned(), out.status.code())
}

#[test]
#[cfg_attr(not(cublasguard_has_jax), ignore = "needs JAX: run scripts/fetch-nvidia.sh and scripts/fetch-jax.sh")]
fn jax_with_its_cuda_plugin_falls_back_to_the_cpu_the_same_under_the_guard() {
    let (python, libs) = setup();
    let (bare, bare_err, bare_code) = run_python(&python, &libs, None);
    assert_eq!(bare_code, Some(0), "{bare_err}");
    assert!(bare.contains("devices ['cpu']") && bare.contains("mm [[56.0, 62.0, 68.0, 74.0]"), "{bare}");
    let dir = temp_dir("jax");
    let trace_path = dir.join("trace.json");
    let (guarded, guarded_err, guarded_code) = run_python(&python, &libs, Some(&trace_path));
    assert_eq!(guarded_code, Some(0), "{guarded_err}");
    assert_eq!(bare, guarded, "{guarded_err}");
    // The plugin got as far as the CUDA runtime (dlopen'ed from the cache) before giving up.
    let t = cublasguard_format::trace::read(&trace_path).unwrap_or_else(|e| panic!("trace: {e}\n{guarded_err}"));
    assert!(t.faults.is_empty(), "{:#?}", t.faults);
    let cudart = t.environment.libraries.iter().find(|l| l.soname == "libcudart.so.12");
    assert!(cudart.is_some_and(|l| l.path.starts_with(&cache_dir().display().to_string())), "{:?}", t.environment.libraries);
}
