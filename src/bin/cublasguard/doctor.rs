//! `cublasguard doctor`: the CUDA troubleshooting checklist, done for you. Each check prints
//! ok / warn / fail, one line of evidence and, when not ok, one line of fix.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{c_char, c_int, c_uint};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Serialize;

#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

#[derive(Clone, Debug, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub status: Status,
    pub evidence: String,
    pub fix: Option<String>,
}

pub fn check(name: &'static str, status: Status, evidence: impl Into<String>, fix: Option<&str>) -> Check {
    Check { name, status, evidence: evidence.into(), fix: fix.map(str::to_string) }
}

fn cuda_version(v: i32) -> String {
    format!("{}.{}", v / 1000, v % 1000 / 10)
}

/// What the driver said, through libloading (a missing library is an error, never a panic).
/// The doctor loads the driver on purpose, to ask it: the opposite of the guard, whose typed
/// table of CUDA functions (`ffi/cuda_api.rs`) only ever finds libraries the program loaded.
#[derive(Default)]
struct Driver {
    loaded: bool,
    load_error: Option<String>,
    version: Option<i32>,
    init: Option<i32>,
    devices: Vec<String>,
    /// Each device's compute capability (major, minor).
    capabilities: Vec<(i32, i32)>,
}

fn probe_driver() -> Driver {
    type IntOut = unsafe extern "C" fn(*mut c_int) -> c_int;
    type Init = unsafe extern "C" fn(c_uint) -> c_int;
    type DeviceGet = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
    type Name = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;
    type Attribute = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;
    let mut d = Driver::default();
    // SAFETY: loading the driver runs its constructors, as any CUDA program does; every
    // symbol is called with the driver API's documented signature.
    unsafe {
        let lib = match libloading::Library::new("libcuda.so.1") {
            Ok(lib) => lib,
            Err(e) => {
                d.load_error = Some(e.to_string());
                return d;
            }
        };
        d.loaded = true;
        if let Ok(f) = lib.get::<IntOut>(b"cuDriverGetVersion\0") {
            let mut v = 0;
            if f(&mut v) == 0 {
                d.version = Some(v);
            }
        }
        if let Ok(init) = lib.get::<Init>(b"cuInit\0") {
            d.init = Some(init(0));
        }
        if d.init == Some(0) {
            let mut count = 0;
            if let Ok(f) = lib.get::<IntOut>(b"cuDeviceGetCount\0") {
                if f(&mut count) != 0 {
                    count = 0;
                }
            }
            let get = lib.get::<DeviceGet>(b"cuDeviceGet\0").ok();
            let name = lib.get::<Name>(b"cuDeviceGetName\0").ok();
            let attr = lib.get::<Attribute>(b"cuDeviceGetAttribute\0").ok();
            for ordinal in 0..count {
                let mut text = format!("device {ordinal}");
                if let (Some(get), Some(name), Some(attr)) = (&get, &name, &attr) {
                    let mut dev = 0;
                    let mut buf = [0 as c_char; 256];
                    let (mut major, mut minor) = (0, 0);
                    if get(&mut dev, ordinal) == 0 && name(buf.as_mut_ptr(), 256, dev) == 0 {
                        let n = std::ffi::CStr::from_ptr(buf.as_ptr()).to_string_lossy();
                        attr(&mut major, 75, dev);
                        attr(&mut minor, 76, dev);
                        text = format!("device {ordinal}: {n} (compute capability {major}.{minor})");
                        d.capabilities.push((major, minor));
                    }
                }
                d.devices.push(text);
            }
        }
        std::mem::forget(lib); // never unload a driver
    }
    d
}

/// Folders where the dynamic loader and Python environments find CUDA libraries.
fn search_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(paths) = std::env::var_os("LD_LIBRARY_PATH") {
        dirs.extend(std::env::split_paths(&paths).filter(|p| !p.as_os_str().is_empty()));
    }
    if let Ok(out) = Command::new("ldconfig").arg("-p").output() {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if let Some((_, path)) = line.split_once("=> ") {
                if path.contains("libcu") {
                    if let Some(parent) = Path::new(path.trim()).parent() {
                        dirs.push(parent.to_path_buf());
                    }
                }
            }
        }
    }
    if let Ok(entries) = std::fs::read_dir("/usr/local") {
        for e in entries.filter_map(|e| e.ok()) {
            if e.file_name().to_string_lossy().starts_with("cuda") {
                dirs.push(e.path().join("lib64"));
                dirs.push(e.path().join("lib"));
            }
        }
    }
    if let Ok(out) = Command::new("python3").args(["-c", "import sys; print('\\n'.join(sys.path))"]).output() {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let nvidia = Path::new(line).join("nvidia");
            if let Ok(entries) = std::fs::read_dir(&nvidia) {
                for e in entries.filter_map(|e| e.ok()) {
                    dirs.push(e.path().join("lib"));
                }
            }
        }
    }
    let mut seen = BTreeSet::new();
    dirs.retain(|d| d.is_dir() && seen.insert(d.canonicalize().unwrap_or_else(|_| d.clone())));
    dirs
}

/// `libcublas.so.12.9.3` → ("libcublas", 12).
pub fn family_and_major(file: &str) -> Option<(&str, u32)> {
    let (family, rest) = file.split_once(".so.")?;
    if !matches!(family, "libcudart" | "libcublas" | "libcublasLt") {
        return None;
    }
    Some((family, rest.split('.').next()?.parse().ok()?))
}

fn libraries() -> BTreeMap<String, BTreeMap<u32, Vec<PathBuf>>> {
    let mut found: BTreeMap<String, BTreeMap<u32, Vec<PathBuf>>> = BTreeMap::new();
    for dir in search_dirs() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for e in entries.filter_map(|e| e.ok()) {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some((family, major)) = family_and_major(&name) {
                let paths = found.entry(family.to_string()).or_default().entry(major).or_default();
                let path = e.path();
                let real = path.canonicalize().unwrap_or_else(|_| path.clone());
                if !paths.iter().any(|p| p.canonicalize().unwrap_or_else(|_| p.clone()) == real) {
                    paths.push(path);
                }
            }
        }
    }
    found
}

/// Which Python to ask about the frameworks, and for how long.
pub struct PythonOptions {
    pub python: PathBuf,
    pub timeout: std::time::Duration,
}

pub fn run_checks(python: &PythonOptions) -> Vec<Check> {
    let mut checks = Vec::new();
    let driver = probe_driver();
    match (&driver.load_error, driver.version) {
        (Some(e), _) => checks.push(check(
            "driver",
            Status::Fail,
            format!("no NVIDIA driver: libcuda.so.1 cannot be loaded ({e})"),
            Some("install the NVIDIA driver (nvidia-smi must work); in a container, run it with GPU access (--gpus all)"),
        )),
        (None, Some(v)) => checks.push(check("driver", Status::Ok, format!("libcuda.so.1 loaded; the driver supports CUDA {}", cuda_version(v)), None)),
        (None, None) => checks.push(check("driver", Status::Fail, "libcuda.so.1 loaded but cuDriverGetVersion failed", Some("reinstall the NVIDIA driver"))),
    }
    if driver.loaded {
        match driver.init {
            Some(0) if !driver.devices.is_empty() => {
                checks.push(check("devices", Status::Ok, format!("{} device(s): {}", driver.devices.len(), driver.devices.join("; ")), None))
            }
            Some(code) => checks.push(check(
                "devices",
                Status::Fail,
                format!("cuInit failed with {code}{}", if code == 100 { " (no CUDA-capable device)" } else { "" }),
                Some("check CUDA_VISIBLE_DEVICES and that the GPU is visible (nvidia-smi); in containers, pass the device through"),
            )),
            None => checks.push(check("devices", Status::Fail, "the driver has no cuInit", Some("reinstall the NVIDIA driver"))),
        }
    } else {
        checks.push(check("devices", Status::Fail, "no GPU can be used on this machine: there is no NVIDIA driver", Some("run on a machine with an NVIDIA GPU and driver")));
    }
    let libs = libraries();
    if libs.is_empty() {
        checks.push(check(
            "libraries",
            Status::Warn,
            "no libcudart/libcublas/libcublasLt found on LD_LIBRARY_PATH, in the ldconfig cache, /usr/local/cuda* or Python's nvidia packages",
            Some("install the CUDA toolkit or the framework's CUDA wheels (pip install torch pulls nvidia-* packages)"),
        ));
    }
    for (family, majors) in &libs {
        let listing: Vec<String> = majors
            .iter()
            .map(|(major, paths)| format!("{major}: {}", paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")))
            .collect();
        let (status, fix) = if majors.len() > 1 {
            (Status::Warn, Some("several CUDA major versions are reachable: make sure the program loads the one its framework was built for (check LD_LIBRARY_PATH order)"))
        } else {
            (Status::Ok, None)
        };
        checks.push(check("libraries", status, format!("{family}: {}", listing.join("; ")), fix));
        if let Some(driver_version) = driver.version {
            for major in majors.keys() {
                if (*major as i32) * 1000 > driver_version {
                    checks.push(check(
                        "runtime vs driver",
                        Status::Fail,
                        format!("{family}.so.{major} needs a driver for CUDA {major}.0, but the driver supports CUDA {}", cuda_version(driver_version)),
                        Some("upgrade the NVIDIA driver, or use a build of the framework for the driver's CUDA version"),
                    ));
                }
            }
        }
    }
    match std::env::var("CUDA_VISIBLE_DEVICES") {
        Ok(v) if v.trim().is_empty() || v.trim() == "-1" => checks.push(check(
            "CUDA_VISIBLE_DEVICES",
            Status::Fail,
            format!("CUDA_VISIBLE_DEVICES='{v}' hides every GPU"),
            Some("unset it, or list the devices to use (e.g. CUDA_VISIBLE_DEVICES=0)"),
        )),
        Ok(v) => checks.push(check("CUDA_VISIBLE_DEVICES", Status::Ok, format!("CUDA_VISIBLE_DEVICES='{v}'"), None)),
        Err(_) => {}
    }
    if std::env::var("CUDA_LAUNCH_BLOCKING").is_ok_and(|v| v.trim() == "1") {
        checks.push(check(
            "CUDA_LAUNCH_BLOCKING",
            Status::Warn,
            "CUDA_LAUNCH_BLOCKING=1 serialises every kernel launch: correct but slow",
            Some("unset it for real runs; cublasguard pins asynchronous faults to their call without it"),
        ));
    }
    for (var, meaning) in [
        ("NVIDIA_TF32_OVERRIDE", "0 disables TF32 in every CUDA library"),
        ("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "1 forces TF32 for float32 matmuls in PyTorch"),
    ] {
        if let Ok(v) = std::env::var(var) {
            checks.push(check("TF32", Status::Ok, format!("{var}={v} ({meaning})"), None));
        }
    }
    let machine = crate::framework::Machine {
        driver_loaded: driver.loaded,
        driver_cuda: driver.version,
        devices: driver.capabilities.clone(),
        nvcc: crate::framework::nvcc_release(),
    };
    let answer = crate::framework::probe(&python.python, python.timeout);
    checks.extend(crate::framework::checks(&answer, &python.python, &machine));
    match crate::run::find_guard_library() {
        Ok(p) => checks.push(check("guard", Status::Ok, format!("libcublasguard.so at {}", p.display()), None)),
        Err(e) => checks.push(check("guard", Status::Warn, e.message, Some("cargo build --release, or set CUBLASGUARD_LIB"))),
    }
    checks
}

pub fn render(checks: &[Check], colour: bool) -> String {
    let paint = |s: Status| {
        let (word, code) = match s {
            Status::Ok => ("ok  ", "32"),
            Status::Warn => ("warn", "33"),
            Status::Fail => ("FAIL", "31"),
        };
        if colour {
            format!("\x1b[{code}m{word}\x1b[0m")
        } else {
            word.to_string()
        }
    };
    let mut out = String::new();
    for c in checks {
        out.push_str(&format!("{} {:<21} {}\n", paint(c.status), c.name, c.evidence));
        if let Some(fix) = &c.fix {
            out.push_str(&format!("     {:<21} fix: {fix}\n", ""));
        }
    }
    let worst = checks.iter().map(|c| c.status).max().unwrap_or(Status::Ok);
    out.push_str(match worst {
        Status::Ok => "\nAll checks passed.\n",
        Status::Warn => "\nNo failures; see the warnings above.\n",
        Status::Fail => "\nSome checks failed: CUDA programs will not run correctly here until they are fixed.\n",
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_families_and_majors() {
        assert_eq!(family_and_major("libcublas.so.12.9.3.13"), Some(("libcublas", 12)));
        assert_eq!(family_and_major("libcudart.so.11.0"), Some(("libcudart", 11)));
        assert_eq!(family_and_major("libcublasLt.so.13"), Some(("libcublasLt", 13)));
        assert_eq!(family_and_major("libcublas.so"), None);
        assert_eq!(family_and_major("libcufft.so.11"), None);
    }

    #[test]
    fn renders_fixes_under_failures() {
        let text = render(&[check("driver", Status::Fail, "none", Some("install it"))], false);
        assert!(text.contains("FAIL driver") && text.contains("fix: install it") && text.contains("Some checks failed"), "{text}");
    }
}
