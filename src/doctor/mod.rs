//! `cublasguard doctor`: the CUDA troubleshooting checklist, done for you. Each check prints
//! ok / info / skip / warn / fail, one line of evidence and, when not ok, one line of fix. One cause is
//! one failure: a check that needs what an earlier one found missing (a driver) is skipped.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::c_char;
use std::path::{Path, PathBuf};
use std::process::Command;

pub mod check;
pub mod framework;
pub mod gpu_health;
pub mod setup_checks;

use check::{check, Check, Status};

fn cuda_version(v: i32) -> String {
    format!("{}.{}", v / 1000, v % 1000 / 10)
}

/// `--nvml-timeout`: whole seconds, at least one (0 would give up before NVML could answer).
pub fn parse_nvml_timeout(text: &str) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(0) => Err("must be at least 1 second (0 would leave NVML off before it could answer)".into()),
        Ok(secs) => Ok(secs),
        Err(_) => Err("not a whole number of seconds".into()),
    }
}

/// `--python-timeout`: whole seconds, at least one (0 would give up before Python starts).
pub fn parse_timeout(text: &str) -> Result<u64, String> {
    match text.trim().parse::<u64>() {
        Ok(0) => Err("must be at least 1 second (0 would give up on the frameworks before Python starts)".into()),
        Ok(secs) => Ok(secs),
        Err(_) => Err("not a whole number of seconds".into()),
    }
}

/// The private symbol by which cublasguard's CPU stand-in driver (shims/cuda.c) is known: no
/// NVIDIA driver has it. Its devices' names say so too ("cudashim stand-in device N").
const STANDIN_SYMBOL: &[u8] = b"cudashim_driver_is_device_range\0";

/// What the driver said, through libloading (a missing library is an error, never a panic).
/// The doctor loads the driver on purpose, to ask it: the opposite of the guard, whose typed
/// table of CUDA functions (`ffi/cuda_client/cuda_api.rs`) only ever finds libraries the program loaded.
#[derive(Default)]
struct Driver {
    loaded: bool,
    load_error: Option<String>,
    version: Option<i32>,
    init: Option<i32>,
    devices: Vec<String>,
    /// Each device's compute capability (major, minor).
    capabilities: Vec<(i32, i32)>,
    /// The libcuda.so.1 the loader picked, as mapped into this process.
    path: Option<PathBuf>,
    /// It is cublasguard's CPU stand-in, not NVIDIA's driver: its devices are no GPUs.
    standin: bool,
}

fn probe_driver() -> Driver {
    let mut d = Driver::default();
    let lib = match crate::cuda_table::Driver::load() {
        Ok(lib) => lib,
        Err(e) => {
            d.load_error = Some(e);
            return d;
        }
    };
    d.loaded = true;
    d.path = mapped_driver();
    d.standin = lib.has(STANDIN_SYMBOL);
    if let Some(f) = lib.cuDriverGetVersion {
        let mut v = 0;
        // SAFETY: an out-parameter for the version.
        if unsafe { f(&mut v) } == 0 {
            d.version = Some(v);
        }
    }
    // SAFETY: cuInit takes flags only (0 is the only defined value).
    d.init = lib.cuInit.map(|init| unsafe { init(0) });
    if d.init == Some(0) {
        let mut count = 0;
        // SAFETY: an out-parameter for the count.
        if lib.cuDeviceGetCount.is_none_or(|f| unsafe { f(&mut count) } != 0) {
            count = 0;
        }
        for ordinal in 0..count {
            let mut text = format!("device {ordinal}");
            if let (Some(get), Some(name), Some(attr)) = (lib.cuDeviceGet, lib.cuDeviceGetName, lib.cuDeviceGetAttribute) {
                let mut dev = 0;
                let mut buf = [0 as c_char; 256];
                let (mut major, mut minor) = (0, 0);
                // SAFETY: out-parameters for the device and its name (256 bytes, as passed),
                // for an ordinal below the device count.
                if unsafe { get(&mut dev, ordinal) } == 0 && unsafe { name(buf.as_mut_ptr(), 256, dev) } == 0 {
                    // SAFETY: the driver wrote a NUL-terminated name within the buffer.
                    let n = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_string_lossy();
                    d.standin |= n.starts_with("cudashim stand-in");
                    // SAFETY: out-parameters for two attributes (75, 76: compute capability) of a device just got.
                    unsafe {
                        attr(&mut major, 75, dev);
                        attr(&mut minor, 76, dev);
                    }
                    text = format!("device {ordinal}: {n} (compute capability {major}.{minor})");
                    d.capabilities.push((major, minor));
                }
            }
            d.devices.push(text);
        }
    }
    lib.keep_loaded();
    d
}

/// The file of the libcuda.so.1 mapped into this process (/proc/self/maps).
fn mapped_driver() -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|path| path.rsplit('/').next().is_some_and(|file| file.starts_with("libcuda.so")))
        .map(PathBuf::from)
}

/// Folders where the dynamic loader finds CUDA libraries, then `python_dirs`: those of the
/// Python whose frameworks are checked (its `site-packages/nvidia/*/lib`, and the folders of
/// the libraries its PyTorch loaded).
fn search_dirs(python_dirs: &[PathBuf]) -> Vec<PathBuf> {
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
    dirs.extend(python_dirs.iter().cloned());
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

fn libraries(python_dirs: &[PathBuf]) -> BTreeMap<String, BTreeMap<u32, Vec<PathBuf>>> {
    let mut found: BTreeMap<String, BTreeMap<u32, Vec<PathBuf>>> = BTreeMap::new();
    for dir in search_dirs(python_dirs) {
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

/// The driver and its devices. A missing driver is one failure; the devices are then skipped.
/// The stand-in is named as what it is, and its devices are never counted as GPUs.
fn driver_checks(driver: &Driver) -> Vec<Check> {
    let mut checks = Vec::new();
    let at = driver.path.as_ref().map(|p| format!(" at {}", p.display())).unwrap_or_default();
    match (&driver.load_error, driver.version) {
        (Some(e), _) => checks.push(check(
            "driver",
            Status::Fail,
            format!("no NVIDIA driver: libcuda.so.1 cannot be loaded ({e})"),
            Some("install the NVIDIA driver (nvidia-smi must work); in a container, run it with GPU access (--gpus all)"),
        )),
        (None, Some(v)) if driver.standin => checks.push(check(
            "driver",
            Status::Ok,
            format!("libcuda.so.1{at} is cublasguard's CPU stand-in (cudashim), not an NVIDIA driver; it poses as a driver for CUDA {}", cuda_version(v)),
            None,
        )),
        (None, Some(v)) => checks.push(check("driver", Status::Ok, format!("libcuda.so.1{at} loaded; the driver supports CUDA {}", cuda_version(v)), None)),
        (None, None) => {
            checks.push(check("driver", Status::Fail, format!("libcuda.so.1{at} loaded but cuDriverGetVersion failed"), Some("reinstall the NVIDIA driver")))
        }
    }
    if !driver.loaded {
        checks.push(check("devices", Status::Skip, "needs a driver (see the driver check): no GPU can be used without one", None));
        return checks;
    }
    match driver.init {
        Some(0) if driver.standin => {
            let folder =
                driver.path.as_ref().and_then(|p| p.parent()).map(|d| d.display().to_string()).unwrap_or_else(|| "the stand-in's driver folder".into());
            checks.push(check(
                "devices",
                Status::Warn,
                format!("no GPU: the stand-in emulates {} device(s) on the CPU ({})", driver.devices.len(), driver.devices.join("; ")),
                Some(&format!("to check this machine's GPUs, take {folder} off LD_LIBRARY_PATH")),
            ))
        }
        Some(0) if !driver.devices.is_empty() => {
            checks.push(check("devices", Status::Ok, format!("{} GPU(s): {}", driver.devices.len(), driver.devices.join("; ")), None))
        }
        Some(0) => checks.push(check(
            "devices",
            Status::Fail,
            "cuInit succeeded but the driver shows no device",
            Some("check CUDA_VISIBLE_DEVICES and that the GPU is visible (nvidia-smi); in containers, pass the device through"),
        )),
        Some(code) => checks.push(check(
            "devices",
            Status::Fail,
            format!("cuInit failed with {code}{}", if code == 100 { " (no CUDA-capable device)" } else { "" }),
            Some("check CUDA_VISIBLE_DEVICES and that the GPU is visible (nvidia-smi); in containers, pass the device through"),
        )),
        None => checks.push(check("devices", Status::Fail, "the driver has no cuInit", Some("reinstall the NVIDIA driver"))),
    }
    checks
}

/// Which Python to ask about the frameworks, and for how long; how long NVML may take to start.
pub struct PythonOptions {
    pub python: PathBuf,
    pub timeout: std::time::Duration,
    pub nvml_timeout: std::time::Duration,
}

pub fn run_checks(python: &PythonOptions) -> Vec<Check> {
    let mut checks = Vec::new();
    let driver = probe_driver();
    checks.extend(driver_checks(&driver));
    checks.extend(crate::doctor::setup_checks::wsl_checks(driver.path.as_deref()));
    // The frameworks are asked first: the library search includes that Python's nvidia wheels.
    let answer = crate::doctor::framework::probe(&python.python, python.timeout);
    let python_dirs = match &answer {
        Ok(f) => f.library_dirs(),
        Err(_) => Vec::new(),
    };
    let libs = libraries(&python_dirs);
    if libs.is_empty() {
        let python_name = python.python.display();
        let evidence = match &answer {
            Ok(_) => format!(
                "no libcudart/libcublas/libcublasLt on LD_LIBRARY_PATH, in the ldconfig cache, /usr/local/cuda* or {python_name}'s NVIDIA wheels (site-packages/nvidia/*/lib)"
            ),
            Err(_) => format!(
                "no libcudart/libcublas/libcublasLt on LD_LIBRARY_PATH, in the ldconfig cache or /usr/local/cuda*; {python_name}'s NVIDIA wheels were not searched, as it did not answer (see the frameworks check)"
            ),
        };
        checks.push(check(
            "libraries",
            Status::Warn,
            evidence,
            Some("install the CUDA toolkit or the framework's CUDA wheels (pip install torch pulls nvidia-* packages); check another Python with --python"),
        ));
    }
    for (family, majors) in &libs {
        let listing: Vec<String> =
            majors.iter().map(|(major, paths)| format!("{major}: {}", paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))).collect();
        let (status, fix) = if majors.len() > 1 {
            (
                Status::Warn,
                Some(
                    "several CUDA major versions are reachable: make sure the program loads the one its framework was built for (check LD_LIBRARY_PATH order)",
                ),
            )
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
    let cublas_majors: Vec<u32> = libs.get("libcublas").map(|m| m.keys().copied().collect()).unwrap_or_default();
    checks.extend(crate::doctor::setup_checks::cublas_pair_checks(&cublas_majors));
    let torch_cudnn = answer.as_ref().ok().and_then(|f| f.torch.as_ref()).and_then(|t| t.cudnn);
    checks.extend(crate::doctor::setup_checks::cudnn_checks(&search_dirs(&python_dirs), torch_cudnn));
    checks.push(crate::doctor::setup_checks::cache_check());
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
    let machine = crate::doctor::framework::Machine {
        driver_loaded: driver.loaded,
        driver_cuda: driver.version,
        devices: driver.capabilities.clone(),
        standin: driver.standin,
        nvcc: crate::doctor::framework::nvcc_release(),
    };
    checks.extend(crate::doctor::framework::checks(&answer, &python.python, &machine));
    // Last of the libraries loaded: a thread left inside a hanging NVML must hold up no other.
    checks.extend(crate::doctor::gpu_health::checks(&crate::doctor::gpu_health::read(python.nvml_timeout)));
    match crate::run::guard_library::find_guard_library() {
        Ok(p) => checks.push(check("guard", Status::Ok, format!("libcublasguard.so at {}", p.display()), None)),
        Err(e) => checks.push(check("guard", Status::Warn, e.message, Some("cargo build --release, or set CUBLASGUARD_LIB"))),
    }
    checks
}

pub fn render(checks: &[Check], colour: bool) -> String {
    let paint = |s: Status| {
        let (word, code) = match s {
            Status::Ok => ("ok  ", "32"),
            Status::Info => ("info", "36"),
            Status::Skip => ("skip", "2"),
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
        Status::Ok | Status::Info => "\nAll checks passed.\n",
        Status::Skip => "\nNo failures; some checks were skipped (see above).\n",
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
    fn a_timeout_of_zero_seconds_is_refused() {
        assert!(parse_timeout("0").unwrap_err().contains("at least 1 second"));
        assert!(parse_timeout("-1").is_err() && parse_timeout("soon").is_err());
        assert_eq!(parse_timeout("2"), Ok(2));
    }

    #[test]
    fn a_missing_driver_is_one_failure_and_its_devices_are_skipped() {
        let missing = Driver { load_error: Some("libcuda.so.1: cannot open shared object file".into()), ..Default::default() };
        let checks = driver_checks(&missing);
        assert_eq!(checks.iter().filter(|c| c.status == Status::Fail).count(), 1, "{checks:#?}");
        let devices = checks.iter().find(|c| c.name == "devices").unwrap();
        assert_eq!(devices.status, Status::Skip);
        assert!(devices.evidence.contains("needs a driver"), "{}", devices.evidence);
        let text = render(&checks, false);
        assert!(text.contains("skip devices"), "{text}");
    }

    #[test]
    fn the_stand_in_driver_is_named_and_its_devices_are_no_gpus() {
        let standin = Driver {
            loaded: true,
            version: Some(12090),
            init: Some(0),
            devices: vec!["device 0: cudashim stand-in device 0 (compute capability 9.0)".into()],
            capabilities: vec![(9, 0)],
            path: Some(PathBuf::from("/x/stand-in/driver/libcuda.so.1")),
            standin: true,
            ..Default::default()
        };
        let checks = driver_checks(&standin);
        assert!(checks[0].evidence.contains("stand-in") && checks[0].evidence.contains("not an NVIDIA driver"), "{}", checks[0].evidence);
        let devices = &checks[1];
        assert_eq!(devices.status, Status::Warn);
        assert!(devices.evidence.starts_with("no GPU:") && !devices.evidence.contains("GPU(s)"), "{}", devices.evidence);
        assert!(devices.fix.as_deref().is_some_and(|f| f.contains("/x/stand-in/driver")), "{devices:?}");
        assert!(!render(&checks, false).contains("All checks passed"));
    }

    #[test]
    fn renders_fixes_under_failures() {
        let text = render(&[check("driver", Status::Fail, "none", Some("install it"))], false);
        assert!(text.contains("FAIL driver") && text.contains("fix: install it") && text.contains("Some checks failed"), "{text}");
    }
}
