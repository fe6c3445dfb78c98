//! `cublasguard doctor` checks the framework the user runs: stub PyTorch and JAX packages on
//! PYTHONPATH, the stand-in driver reporting a chosen version and compute capability, a driver
//! that is not the stand-in (a few driver API functions naming an NVIDIA device: the machine
//! with a GPU), and the real PyTorch wheel when it is installed.

use crate::common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Which libcuda.so.1 the doctor finds.
#[derive(Clone, Copy, PartialEq)]
enum Driver {
    Missing,
    /// The CPU stand-in (shims/cuda.c): no GPU, and said so.
    StandIn,
    /// A driver that is not the stand-in, with one NVIDIA device of compute capability 9.0.
    Gpu,
}

/// The C source of the `Driver::Gpu` libcuda.so.1: what the doctor asks a driver, answered as
/// NVIDIA's driver on an H100 would (CUDA 13.2).
const GPU_DRIVER: &str = r#"
#include <stdio.h>
int cuDriverGetVersion(int *v) { *v = 13020; return 0; }
int cuInit(unsigned int flags) { return flags ? 1 : 0; }
int cuDeviceGetCount(int *n) { *n = 1; return 0; }
int cuDeviceGet(int *d, int ordinal) { *d = ordinal; return ordinal == 0 ? 0 : 101; }
int cuDeviceGetName(char *name, int len, int dev) { (void)dev; snprintf(name, (size_t)len, "NVIDIA H100 80GB HBM3"); return 0; }
int cuDeviceGetAttribute(int *v, int attribute, int dev) { (void)dev; *v = attribute == 75 ? 9 : 0; return 0; }
"#;

/// The folder holding the `Driver::Gpu` libcuda.so.1, built once per test process.
fn gpu_driver_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = temp_dir("gpu-driver");
        std::fs::write(dir.join("driver.c"), GPU_DRIVER).unwrap();
        let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
            .args(["-shared", "-fPIC", "-Wall", "-Werror", "-Wl,-soname,libcuda.so.1", "-o"])
            .arg(dir.join("libcuda.so.1"))
            .arg(dir.join("driver.c"))
            .status()
            .expect("run the C compiler");
        assert!(status.success(), "compiling the GPU driver failed");
        dir
    })
}

/// A folder holding a package `name` whose `__init__.py` is `init`.
fn stub(label: &str, packages: &[(&str, &str)]) -> PathBuf {
    let dir = temp_dir(label);
    for (name, init) in packages {
        std::fs::create_dir_all(dir.join(name)).unwrap();
        std::fs::write(dir.join(name).join("__init__.py"), init).unwrap();
    }
    dir
}

/// The doctor's checks as JSON: (name, status, evidence).
fn doctor(python_path: Option<&Path>, driver: Driver, env: &[(&str, &str)], extra: &[&str]) -> Vec<(String, String, String)> {
    let s = standin();
    let mut cmd = Command::new(cli());
    cmd.args(["doctor", "--json"]).args(extra).env_clear().env("PATH", std::env::var("PATH").unwrap_or_default());
    match driver {
        Driver::Missing => {}
        Driver::StandIn => {
            cmd.env("LD_LIBRARY_PATH", s.join("driver"));
        }
        Driver::Gpu => {
            cmd.env("LD_LIBRARY_PATH", gpu_driver_dir());
        }
    }
    if let Some(p) = python_path {
        cmd.env("PYTHONPATH", p);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("doctor");
    checks_of(&out.stdout)
}

/// `doctor --json`'s output as (name, status, evidence).
fn checks_of(stdout: &[u8]) -> Vec<(String, String, String)> {
    let checks: serde_json::Value = serde_json::from_slice(stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(stdout)));
    checks
        .as_array()
        .expect("array")
        .iter()
        .map(|c| (c["name"].as_str().unwrap().to_string(), c["status"].as_str().unwrap().to_string(), c["evidence"].as_str().unwrap().to_string()))
        .collect()
}

fn find<'a>(checks: &'a [(String, String, String)], name: &str) -> &'a (String, String, String) {
    checks.iter().find(|c| c.0 == name).unwrap_or_else(|| panic!("no {name} check: {checks:#?}"))
}

const CPU_ONLY: &str = "__version__ = '2.5.1+cpu'\nclass version:\n    cuda = None\n";

fn torch_stub(cuda: &str, archs: &str) -> String {
    format!(
        "__version__ = '2.5.1+cu{}'\nclass version:\n    cuda = '{cuda}'\nclass cuda:\n    @staticmethod\n    def get_arch_list():\n        return {archs}\nclass backends:\n    class cudnn:\n        @staticmethod\n        def version():\n            return 90100\n",
        cuda.replace('.', "")
    )
}

#[test]
fn a_cpu_only_pytorch_fails_where_there_is_a_gpu_and_warns_where_there_is_none() {
    let dir = stub("torch-cpu", &[("torch", CPU_ONLY)]);
    let with_gpu = doctor(Some(&dir), Driver::Gpu, &[], &[]);
    let c = find(&with_gpu, "pytorch");
    assert_eq!(c.1, "fail", "{c:?}");
    assert!(c.2.contains("CPU-only build") && c.2.contains("2.5.1+cpu"), "{}", c.2);
    assert_eq!(find(&doctor(Some(&dir), Driver::Missing, &[], &[]), "pytorch").1, "warn");
    assert_eq!(find(&doctor(Some(&dir), Driver::StandIn, &[], &[]), "pytorch").1, "warn", "the stand-in is no GPU");
}

#[test]
fn a_build_without_the_devices_architecture_fails_naming_both() {
    let dir = stub("torch-sm90", &[("torch", &torch_stub("12.4", "['sm_50', 'sm_60', 'sm_70', 'sm_80', 'sm_90']"))]);
    let checks = doctor(Some(&dir), Driver::StandIn, &[("CUDASHIM_COMPUTE_CAPABILITY", "12.0"), ("CUDASHIM_DRIVER_VERSION", "12090")], &[]);
    let c = find(&checks, "pytorch architectures");
    assert_eq!(c.1, "fail", "{c:?}");
    assert!(c.2.contains("sm_120") && c.2.contains("sm_50 sm_60 sm_70 sm_80 sm_90"), "{}", c.2);
    let fine = doctor(Some(&dir), Driver::StandIn, &[("CUDASHIM_COMPUTE_CAPABILITY", "8.6")], &[]);
    assert_eq!(find(&fine, "pytorch architectures").1, "ok", "sm_80 binaries run on 8.6");
}

#[test]
fn a_build_for_a_newer_cuda_than_the_driver_fails() {
    let dir = stub("torch-cu130", &[("torch", &torch_stub("13.0", "['sm_90']"))]);
    let checks = doctor(Some(&dir), Driver::StandIn, &[("CUDASHIM_DRIVER_VERSION", "12040")], &[]);
    let c = find(&checks, "pytorch vs driver");
    assert_eq!(c.1, "fail", "{c:?}");
    assert!(c.2.contains("CUDA 13.0") && c.2.contains("CUDA 12.4"), "{}", c.2);
}

#[test]
fn jax_without_a_cuda_plugin_is_named_cpu_only() {
    let dir = stub("jax-cpu", &[("jax", "__version__ = '0.7.0'\n")]);
    let checks = doctor(Some(&dir), Driver::Gpu, &[], &[]);
    let c = find(&checks, "jax");
    assert_eq!(c.1, "fail", "{c:?}");
    assert!(c.2.contains("no CUDA plugin"), "{}", c.2);
    assert_eq!(find(&doctor(Some(&dir), Driver::StandIn, &[], &[]), "jax").1, "warn", "the stand-in is no GPU");
}

#[test]
fn a_cpu_only_tensorflow_and_a_framework_that_fails_to_import_are_named() {
    let dir = stub(
        "tf-cpu",
        &[
            ("tensorflow", "__version__ = '2.20.0'\nclass test:\n    @staticmethod\n    def is_built_with_cuda():\n        return False\n"),
            ("torch", "raise ImportError('libcudnn.so.9: cannot open shared object file')\n"),
        ],
    );
    let checks = doctor(Some(&dir), Driver::Gpu, &[], &[]);
    let tf = find(&checks, "tensorflow");
    assert_eq!(tf.1, "fail", "{tf:?}");
    assert!(tf.2.contains("2.20.0") && tf.2.contains("CPU-only"), "{}", tf.2);
    let torch = find(&checks, "pytorch");
    assert_eq!(torch.1, "warn");
    assert!(torch.2.contains("cannot be imported") && torch.2.contains("libcudnn.so.9"), "{}", torch.2);
}

#[test]
fn nvcc_on_path_is_explained_as_not_the_version_the_program_uses() {
    let dir = stub("torch-nvcc", &[("torch", &torch_stub("13.0", "['sm_90']"))]);
    let bin = temp_dir("fake-nvcc");
    let nvcc = bin.join("nvcc");
    std::fs::write(&nvcc, "#!/bin/sh\necho 'Cuda compilation tools, release 12.4, V12.4.131'\n").unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&nvcc, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let checks = doctor(Some(&dir), Driver::StandIn, &[("PATH", path.as_str())], &[]);
    let c = find(&checks, "nvcc");
    assert_eq!(c.1, "ok");
    assert!(c.2.contains("nvcc is CUDA 12.4") && c.2.contains("CUDA 13.0") && c.2.contains("does not matter"), "{}", c.2);
}

#[test]
fn a_hanging_framework_import_stops_at_the_time_limit() {
    let dir = stub("torch-hangs", &[("torch", "import time\ntime.sleep(600)\n")]);
    let started = std::time::Instant::now();
    let checks = doctor(Some(&dir), Driver::Missing, &[], &["--python-timeout", "2"]);
    assert!(started.elapsed() < std::time::Duration::from_secs(60), "the doctor waited for the hanging import");
    let c = find(&checks, "frameworks");
    assert_eq!(c.1, "warn");
    assert!(c.2.contains("within 2 s"), "{}", c.2);
}

/// `doctor --json` with a stub on PYTHONPATH, killed (and the test failed) if it has not
/// answered within `limit`.
fn doctor_answering_within(python_path: &Path, limit: std::time::Duration, extra: &[&str]) -> Vec<(String, String, String)> {
    let mut child = Command::new(cli())
        .args(["doctor", "--json"])
        .args(extra)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("PYTHONPATH", python_path)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("doctor");
    let deadline = std::time::Instant::now() + limit;
    while child.try_wait().expect("wait").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the doctor did not answer within {limit:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("output");
    checks_of(&out.stdout)
}

#[test]
fn a_helper_process_that_keeps_the_pythons_pipes_open_does_not_hold_the_doctor() {
    // The import starts a daemon-like helper that inherits stdout and stderr and outlives the
    // interpreter (as a compile server or a telemetry uploader may).
    let dir = temp_dir("torch-helper");
    let pid_file = dir.join("helper.pid");
    let init =
        format!("import subprocess\np = subprocess.Popen(['sleep', '600'])\nopen({:?}, 'w').write(str(p.pid))\n{}", pid_file.display().to_string(), CPU_ONLY);
    std::fs::create_dir_all(dir.join("torch")).unwrap();
    std::fs::write(dir.join("torch/__init__.py"), init).unwrap();
    let checks = doctor_answering_within(&dir, std::time::Duration::from_secs(40), &["--python-timeout", "30"]);
    if let Some(pid) = std::fs::read_to_string(&pid_file).ok().and_then(|p| p.trim().parse::<i32>().ok()) {
        // SAFETY: kill with the helper's pid, which this test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let c = find(&checks, "pytorch");
    assert!(c.2.contains("CPU-only build"), "the answer was read: {c:?}");
}

#[test]
fn an_import_that_writes_much_to_stderr_is_not_taken_for_a_hang() {
    // 200 KB of warnings is more than a pipe holds: unread, the import blocks on its write.
    let init = format!("import sys\nfor i in range(4000):\n    sys.stderr.write('UserWarning: %04d ' % i + 'x' * 40 + '\\n')\n{CPU_ONLY}");
    let dir = stub("torch-chatty", &[("torch", &init)]);
    let checks = doctor_answering_within(&dir, std::time::Duration::from_secs(60), &["--python-timeout", "20"]);
    let c = find(&checks, "pytorch");
    assert!(c.2.contains("CPU-only build"), "{checks:#?}");
}

#[test]
#[cfg_attr(not(cublasguard_has_torch), ignore = "needs PyTorch: run scripts/fetch-torch.sh")]
fn the_real_pytorch_wheel_is_named_with_its_cuda_build_architectures_and_the_missing_driver() {
    let venv = cache_dir().join("torch-venv");
    let python = venv.join("bin/python");
    assert!(venv.join(".complete").exists(), "no PyTorch environment at {}: run scripts/fetch-torch.sh", venv.display());
    let python = python.display().to_string();
    // The first import of the real wheel reads over a GiB from disk: on a loaded machine with
    // a cold page cache it outlasted the default 60 s once (CI), and the probe gave up.
    let checks = doctor(None, Driver::Missing, &[], &["--python", &python, "--python-timeout", "600"]);
    let torch = find(&checks, "pytorch");
    assert_eq!(torch.1, "ok");
    assert!(torch.2.contains("2.15.0") && torch.2.contains("CUDA 13.2 build"), "{}", torch.2);
    let archs = find(&checks, "pytorch architectures");
    assert!(archs.2.contains("sm_90") && archs.2.contains("sm_120"), "{}", archs.2);
    let driver = find(&checks, "pytorch vs driver");
    assert_eq!(driver.1, "skip", "the missing driver failed once already: {driver:?}");
    assert!(driver.2.contains("no NVIDIA driver") && driver.2.contains("13.2"), "{}", driver.2);
    assert_eq!(find(&checks, "cuDNN").1, "ok");
    let libraries = find(&checks, "pytorch libraries");
    assert!(libraries.2.contains("NVIDIA's pip wheels") && libraries.2.contains("libcublas.so.13"), "{}", libraries.2);
    // The library search agrees: it looked in the same Python's wheels.
    let searched: Vec<_> = checks.iter().filter(|c| c.0 == "libraries").collect();
    let in_wheels = |c: &&&(String, String, String)| c.1 == "ok" && c.2.starts_with("libcublas: 13: ") && c.2.contains("/site-packages/nvidia/");
    assert!(searched.iter().any(|c| in_wheels(&c)), "{searched:#?}");
    assert!(searched.iter().all(|c| !c.2.starts_with("no libcudart")), "{searched:#?}");
    let failures: Vec<_> = checks.iter().filter(|c| c.1 == "fail").collect();
    assert_eq!(failures.len(), 1, "one missing driver, one failure: {failures:#?}");
}

#[test]
fn the_library_search_looks_in_the_wheels_of_the_python_it_is_given() {
    // A Python whose sys.path holds an NVIDIA wheel, reached only through --python: the python3
    // on PATH does not have it.
    let site = temp_dir("wheel-site");
    let lib = site.join("nvidia/cublas/lib");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::write(lib.join("libcublas.so.12"), b"").unwrap();
    let wrapper = site.join("python-with-wheels");
    std::fs::write(&wrapper, format!("#!/bin/sh\nPYTHONPATH='{}' exec python3 \"$@\"\n", site.display())).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755)).unwrap();
    let python = wrapper.display().to_string();
    let checks = doctor(None, Driver::Missing, &[], &["--python", &python]);
    let found = find(&checks, "libraries");
    assert_eq!(found.1, "ok", "{checks:#?}");
    assert!(found.2.starts_with("libcublas: 12: ") && found.2.contains("nvidia/cublas/lib/libcublas.so.12"), "{}", found.2);
}

#[test]
fn where_no_library_is_found_the_doctor_says_which_pythons_wheels_it_searched() {
    let empty = temp_dir("no-wheels");
    let checks = doctor(Some(&empty), Driver::Missing, &[], &[]);
    let Some(none) = checks.iter().find(|c| c.0 == "libraries" && c.2.starts_with("no ")) else {
        eprintln!("skipped: this machine has CUDA libraries in the ldconfig cache or /usr/local/cuda*");
        return;
    };
    assert_eq!(none.1, "warn");
    assert!(none.2.contains("python3's NVIDIA wheels (site-packages/nvidia/*/lib)"), "{}", none.2);
}

#[test]
fn one_missing_driver_is_one_failure_and_what_needs_it_is_skipped() {
    let dir = stub("torch-cu124", &[("torch", &torch_stub("12.4", "['sm_90']"))]);
    let checks = doctor(Some(&dir), Driver::Missing, &[], &[]);
    let failures: Vec<_> = checks.iter().filter(|c| c.1 == "fail").collect();
    assert_eq!(failures.len(), 1, "{failures:#?}");
    assert_eq!(failures[0].0, "driver");
    for name in ["devices", "pytorch vs driver"] {
        let c = find(&checks, name);
        assert_eq!(c.1, "skip", "{c:?}");
        assert!(c.2.contains("needs a driver"), "{}", c.2);
    }
}

#[test]
fn the_stand_in_driver_is_named_and_never_counted_as_a_gpu() {
    let empty = temp_dir("standin-doctor");
    let checks = doctor(Some(&empty), Driver::StandIn, &[], &[]);
    let driver = find(&checks, "driver");
    assert!(driver.2.contains("stand-in") && driver.2.contains("not an NVIDIA driver"), "{}", driver.2);
    let devices = find(&checks, "devices");
    assert_eq!(devices.1, "warn", "{devices:?}");
    assert!(devices.2.starts_with("no GPU: ") && devices.2.contains("cudashim stand-in device 0"), "{}", devices.2);
    // The text form does not pass the machine off as ready.
    let s = standin();
    let out = Command::new(cli())
        .arg("doctor")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("PYTHONPATH", &empty)
        .env("LD_LIBRARY_PATH", format!("{}:{}", s.join("lib").display(), s.join("driver").display()))
        .output()
        .expect("doctor");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("All checks passed"), "{text}");
    let gpu = doctor(Some(&empty), Driver::Gpu, &[], &[]);
    let real = find(&gpu, "devices");
    assert_eq!(real.1, "ok");
    assert!(real.2.starts_with("1 GPU(s): device 0: NVIDIA H100"), "{}", real.2);
}

#[test]
fn a_python_timeout_of_zero_is_refused_before_anything_runs() {
    let out = Command::new(cli()).args(["doctor", "--python-timeout", "0"]).output().expect("doctor");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--python-timeout") && err.contains("at least 1 second"), "{err}");
    assert!(out.stdout.is_empty(), "no check ran: {}", String::from_utf8_lossy(&out.stdout));
}
