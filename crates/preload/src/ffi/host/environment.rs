//! What the trace says about the machine: CUDA versions, the driver, the CUDA libraries
//! mapped in the process, and an allow-list of environment variables.

use std::collections::BTreeMap;
use std::ffi::{c_int, CStr};

use crate::check::init::DriverProbe;
use crate::ffi::cuda_client::cuda_api as api;
use crate::ffi::cuda_client::device;
use crate::ffi::intercept::real;
use crate::session::Session;
use crate::trace::{DriverState, Environment, FrameworkBuild, LoadedLibrary};

const LIBRARY_PREFIXES: &[&str] = &["libcudart.so", "libcublas.so", "libcublasLt.so", "libcuda.so"];

/// Variables worth recording; anything else never reaches the trace, and a recorded one whose
/// name looks like a credential (`NVIDIA_API_KEY`, `TORCH_HUB_TOKEN`) has its value redacted,
/// and a URL's password in any recorded value (`TORCH_DIST_URL=tcp://admin:PW@...`) too.
const VARIABLE_PREFIXES: &[&str] = &["CUDA_", "NVIDIA_", "CUBLAS", "TORCH_", "PYTORCH_", "NCCL_"];
const VARIABLE_NAMES: &[&str] =
    &["LD_LIBRARY_PATH", "LD_PRELOAD", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"];

pub(crate) fn is_recorded_variable(name: &str) -> bool {
    VARIABLE_NAMES.contains(&name) || VARIABLE_PREFIXES.iter().any(|p| name.starts_with(p))
}

/// The CUDA libraries mapped in this process, by soname and path.
pub(crate) fn cuda_libraries() -> Vec<LoadedLibrary> {
    let mut out: Vec<LoadedLibrary> = real::loaded_objects()
        .into_iter()
        .filter(|(path, _)| {
            let file = real::file_name(path);
            LIBRARY_PREFIXES.iter().any(|p| file.starts_with(p))
        })
        .map(|(path, soname)| LoadedLibrary {
            soname: soname.unwrap_or_else(|| real::file_name(&path).to_string()),
            path: crate::ffi::host::process::absolute_object_path(&path),
        })
        .collect();
    out.dedup();
    out
}

/// The environment for the trace. `live`: the CUDA libraries may be called (inside a hook);
/// otherwise (at exit, when their destructors may already have run) only the versions learnt
/// earlier are used and nothing calls into them.
pub(crate) fn collect(s: &Session, live: bool) -> Environment {
    let libraries = cuda_libraries();
    let driver_loaded = libraries.iter().any(|l| l.soname.starts_with("libcuda.so"));
    let driver_error = s.driver_error();
    let versions = if live {
        s.learn_versions(crate::session::Versions {
            runtime: device::runtime_version(),
            driver: device::driver_version_via_runtime().or_else(driver_version_if_loaded),
            cublas: device::cublas_version(),
            cublas_lt: device::cublas_lt_version(),
        })
    } else {
        s.versions()
    };
    let variables: BTreeMap<String, String> = if crate::ffi::host::process::is_privileged() {
        BTreeMap::new()
    } else {
        std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .filter(|(k, _)| is_recorded_variable(k))
            .map(|(k, v)| {
                let v = crate::redact::redact_variable(&k, &v);
                (k, v)
            })
            .collect()
    };
    Environment {
        runtime_version: versions.runtime,
        driver_version: versions.driver,
        cublas_version: versions.cublas,
        cublaslt_version: versions.cublas_lt,
        driver: DriverState { loaded: driver_loaded, version: versions.driver, error: driver_error },
        libraries,
        variables,
        device_scan_fallback: s.device_scan.failure(),
        framework: framework_build(),
        python_version: crate::ffi::host::python::version(),
        python_paths: crate::ffi::host::python::paths(),
        probe: s.probe_note(),
        gpu_health: Some(crate::ffi::host::nvml::snapshot(false)),
    }
}

/// PyTorch's build, when its CUDA library is loaded: the `version.py` beside it says which
/// version and which CUDA it was built for.
fn framework_build() -> Option<FrameworkBuild> {
    let lib = real::loaded_objects().into_iter().map(|(path, _)| path).find(|p| real::file_name(p).starts_with("libtorch_cuda.so"))?;
    let torch = std::path::Path::new(&lib).parent()?.parent()?;
    let text = std::fs::read_to_string(torch.join("version.py")).ok()?;
    Some(parse_torch_version(&text))
}

/// `__version__ = '2.15.0+cu132'` and `cuda: Optional[str] = '13.2'` (or `= None`) from
/// PyTorch's version.py.
fn parse_torch_version(text: &str) -> FrameworkBuild {
    let value = |name: &str| {
        text.lines().find_map(|line| {
            let rest = line.strip_prefix(name)?;
            let rest = rest.trim_start();
            // `name = ...` or `name: Optional[str] = ...`
            let rest = if rest.starts_with(':') { rest.split_once('=')?.1 } else { rest.strip_prefix('=')? };
            let v = rest.trim().trim_matches(|c| c == '\'' || c == '"');
            (v != "None" && !v.is_empty()).then(|| v.to_string())
        })
    };
    FrameworkBuild { name: "torch".into(), version: value("__version__"), cuda: value("cuda") }
}

/// `cuDriverGetVersion`, when libcuda.so.1 is already mapped (never loads it).
fn driver_version_if_loaded() -> Option<i32> {
    let mut v: c_int = 0;
    // SAFETY: `v` is a writable c_int.
    (unsafe { api::cuDriverGetVersion(&mut v) }? == 0 && v > 0).then_some(v)
}

/// Asks the driver directly why CUDA could not start. Only called after an initialisation
/// failure, where loading libcuda.so.1 (as the runtime itself tried to) changes nothing.
pub(crate) fn probe_driver(device_count: Option<(i32, Option<i32>)>) -> DriverProbe {
    let mut probe = DriverProbe { runtime_version: device::runtime_version().or_else(runtime_version_from_soname), ..Default::default() };
    if let Some((status, n)) = device_count.or_else(device::device_count) {
        probe.device_count_status = Some(status);
        probe.device_count = n;
    }
    // SAFETY: dlopen with a valid NUL-terminated name; dlerror's text is copied at once. The
    // handle stays open: unloading a driver library is never worth the risk, and the typed
    // table below finds the now-loaded driver by its soname.
    let loaded = crate::ffi::intercept::loader_gate::through(|| unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) });
    if loaded.is_null() {
        // SAFETY: dlerror returns NULL or a NUL-terminated string owned by the loader.
        let err = unsafe { libc::dlerror() };
        probe.load_error = Some(if err.is_null() {
            "not found".into()
        } else {
            // SAFETY: not NULL: dlerror's NUL-terminated message (above).
            unsafe { CStr::from_ptr(err) }.to_string_lossy().into_owned()
        });
        probe.out_of_descriptors = out_of_descriptors();
        return probe;
    }
    probe.driver_loadable = true;
    let mut v: c_int = 0;
    // SAFETY: `v` is a writable c_int.
    probe.driver_version = (unsafe { api::cuDriverGetVersion(&mut v) } == Some(0)).then_some(v);
    // SAFETY: no pointers.
    probe.cu_init = unsafe { api::cuInit(0) };
    probe
}

/// Whether this process can open no more files (EMFILE, or ENFILE for the whole system), with its
/// soft descriptor limit: the loader says "cannot open shared object file" for a driver that is
/// there just as for one that is not.
fn out_of_descriptors() -> Option<Option<u64>> {
    // SAFETY: open of a constant path, closed at once when it succeeded; getrlimit fills the
    // struct it is given.
    unsafe {
        let fd = libc::open(c"/".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC | libc::O_DIRECTORY);
        if fd >= 0 {
            libc::close(fd);
            return None;
        }
        let errno = std::io::Error::last_os_error().raw_os_error();
        if errno != Some(libc::EMFILE) && errno != Some(libc::ENFILE) {
            return None;
        }
        let mut limit: libc::rlimit = std::mem::zeroed();
        let known = libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 && limit.rlim_cur != libc::RLIM_INFINITY;
        Some(known.then_some(limit.rlim_cur))
    }
}

/// CUDA 12.x libraries need at least a 12.0 driver: the version a loaded soname implies.
fn runtime_version_from_soname() -> Option<i32> {
    cuda_libraries().iter().find_map(|l| {
        let rest = l.soname.strip_prefix("libcudart.so.").or_else(|| l.soname.strip_prefix("libcublas.so."))?;
        let major: i32 = rest.split('.').next()?.parse().ok()?;
        Some(major * 1000)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pytorch_version_files_give_version_and_cuda() {
        let text = "from typing import Optional\n__version__ = '2.15.0+cu132'\ndebug = False\ncuda: Optional[str] = '13.2'\ngit_version = 'abc'\n";
        let b = parse_torch_version(text);
        assert_eq!((b.version.as_deref(), b.cuda.as_deref()), (Some("2.15.0+cu132"), Some("13.2")));
        let cpu = parse_torch_version("__version__ = '2.5.1+cpu'\ncuda: Optional[str] = None\n");
        assert_eq!((cpu.version.as_deref(), cpu.cuda), (Some("2.5.1+cpu"), None));
    }

    #[test]
    fn records_only_allow_listed_variables() {
        for name in ["CUDA_VISIBLE_DEVICES", "CUBLAS_WORKSPACE_CONFIG", "CUBLASGUARD_TRACE", "LD_PRELOAD", "RANK", "TORCH_BLAS_PREFER_CUBLASLT"] {
            assert!(is_recorded_variable(name), "{name}");
        }
        for name in ["AWS_SECRET_ACCESS_KEY", "HF_TOKEN", "PASSWORD", "HOME", "PATH"] {
            assert!(!is_recorded_variable(name), "{name}");
        }
    }
}
