//! The framework part of `cublasguard doctor`: what the Python the user runs has installed
//! (PyTorch, JAX, TensorFlow), asked in a child interpreter with a time limit (a broken install
//! must not hang or crash the doctor, and no framework is imported into the doctor's process),
//! and checked against the machine: a CPU-only build on a machine with a GPU, a build for a
//! newer CUDA than the driver, no kernels for the device's architecture, several CUDA majors
//! loaded at once, nvcc's version mistaken for the one that matters.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::check::{check, Check, Status};

/// Run in the user's interpreter: imports each framework that is installed and prints one JSON
/// object on its last line. Every question is guarded, so a partial install still answers.
const PROBE: &str = include_str!("framework_probe.py");

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Torch {
    pub version: Option<String>,
    /// `torch.version.cuda`: None for a CPU-only build.
    pub cuda: Option<String>,
    #[serde(default)]
    pub arch_list: Vec<String>,
    pub cudnn: Option<i64>,
    #[serde(default)]
    pub libraries: Vec<String>,
    pub error: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Jax {
    pub version: Option<String>,
    pub jaxlib: Option<String>,
    #[serde(default)]
    pub cuda_plugins: Vec<String>,
    #[serde(default)]
    pub gpus: u32,
    pub error: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct TensorFlow {
    pub version: Option<String>,
    pub built_with_cuda: Option<bool>,
    pub cuda: Option<String>,
    pub gpus: Option<u32>,
    pub error: Option<String>,
}

/// What the interpreter answered.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Frameworks {
    pub python: Option<String>,
    pub executable: Option<String>,
    /// The `nvidia/*/lib` folders of NVIDIA's pip wheels on this Python's `sys.path`.
    #[serde(default)]
    pub nvidia_lib_dirs: Vec<String>,
    pub torch: Option<Torch>,
    pub jax: Option<Jax>,
    pub tensorflow: Option<TensorFlow>,
}

impl Frameworks {
    /// Where this Python's CUDA libraries are: its NVIDIA wheels' folders, and the folders of
    /// the libraries its PyTorch loaded (a wheel laid out otherwise, or torch's own lib/).
    pub fn library_dirs(&self) -> Vec<PathBuf> {
        let loaded = self.torch.iter().flat_map(|t| t.libraries.iter()).filter_map(|l| Path::new(l).parent().map(Path::to_path_buf));
        let mut dirs: Vec<PathBuf> = self.nvidia_lib_dirs.iter().map(PathBuf::from).chain(loaded).collect();
        let mut seen = std::collections::BTreeSet::new();
        dirs.retain(|d| seen.insert(d.clone()));
        dirs
    }
}

/// Why the frameworks could not be asked.
#[derive(Clone, Debug, PartialEq)]
pub enum ProbeError {
    NoPython(String),
    TimedOut(u64),
    Failed(String),
}

/// Runs the probe in `python`, stopping it after `limit`.
pub fn probe(python: &Path, limit: Duration) -> Result<Frameworks, ProbeError> {
    // Its own process group, so that a time-out stops the helpers an import started too.
    let mut child = Command::new(python)
        .args(["-c", PROBE])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| ProbeError::NoPython(format!("{}: {e}", python.display())))?;
    // Read as it comes: a child that writes more than a pipe holds would otherwise block on its
    // write and look like a hang.
    let stdout = child.stdout.take().map(|p| Drained::start(p, STDOUT_KEPT));
    let stderr = child.stderr.take().map(|p| Drained::start(p, STDERR_KEPT));
    let deadline = Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                // SAFETY: killpg on the group the child leads (its pid); nothing else is in it
                // unless the child put it there.
                unsafe { libc::killpg(child.id() as libc::pid_t, libc::SIGKILL) };
                let _ = child.kill();
                let _ = child.wait();
                return Err(ProbeError::TimedOut(limit.as_secs()));
            }
            Err(e) => return Err(ProbeError::Failed(e.to_string())),
        }
    };
    // A helper the child started may hold the pipes open long after the child is gone: what
    // has arrived by a short grace after its exit is the answer.
    let grace = Instant::now() + PIPE_GRACE;
    let stdout = stdout.map(|d| d.text_by(grace)).unwrap_or_default();
    let stderr = stderr.map(|d| d.text_by(grace)).unwrap_or_default();
    let last = stdout.lines().rev().find(|l| l.trim_start().starts_with('{'));
    match last.map(serde_json::from_str::<Frameworks>) {
        Some(Ok(f)) => Ok(f),
        _ => Err(ProbeError::Failed(format!("{status}: {}", stderr.lines().last().unwrap_or("no answer")))),
    }
}

/// How much of the child's output is kept: the answer is the last line of stdout, the reason
/// for a failure the last line of stderr.
const STDOUT_KEPT: usize = 1 << 20;
const STDERR_KEPT: usize = 64 << 10;
/// How long the pipes may stay open after the child exited.
const PIPE_GRACE: Duration = Duration::from_secs(1);

/// A pipe read to its end on a thread of its own, keeping the last `kept` bytes.
struct Drained {
    tail: Arc<Mutex<(Vec<u8>, bool)>>,
}

impl Drained {
    fn start(mut pipe: impl Read + Send + 'static, kept: usize) -> Self {
        let tail = Arc::new(Mutex::new((Vec::new(), false)));
        let shared = Arc::clone(&tail);
        let spawned = std::thread::Builder::new().name("doctor-pipe".into()).spawn(move || {
            let mut buf = [0u8; 8192];
            loop {
                let n = match pipe.read(&mut buf) {
                    Ok(0) | Err(_) => 0,
                    Ok(n) => n,
                };
                let mut guard = shared.lock().unwrap_or_else(|e| e.into_inner());
                if n == 0 {
                    guard.1 = true;
                    return;
                }
                guard.0.extend_from_slice(&buf[..n]);
                if guard.0.len() > kept {
                    let cut = guard.0.len() - kept;
                    guard.0.drain(..cut);
                }
            }
        });
        if spawned.is_err() {
            tail.lock().unwrap_or_else(|e| e.into_inner()).1 = true;
        }
        Drained { tail }
    }

    /// What was read when the pipe ended, or at `deadline` if it has not.
    fn text_by(self, deadline: Instant) -> String {
        loop {
            let guard = self.tail.lock().unwrap_or_else(|e| e.into_inner());
            if guard.1 || Instant::now() >= deadline {
                return String::from_utf8_lossy(&guard.0).into_owned();
            }
            drop(guard);
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// What the doctor knows about the machine, for the framework checks.
#[derive(Clone, Debug, Default)]
pub struct Machine {
    pub driver_loaded: bool,
    /// The driver's CUDA version (cuDriverGetVersion, e.g. 12040).
    pub driver_cuda: Option<i32>,
    /// Each device's compute capability.
    pub devices: Vec<(i32, i32)>,
    /// The driver is cublasguard's CPU stand-in: its devices are emulated, no GPUs.
    pub standin: bool,
    /// `nvcc --version`'s release, e.g. "12.4".
    pub nvcc: Option<String>,
}

impl Machine {
    /// How the evidence names the driver: the stand-in is never passed off as NVIDIA's.
    fn driver_name(&self) -> &'static str {
        if self.standin {
            "the stand-in driver"
        } else {
            "the driver"
        }
    }

    fn device_name(&self) -> &'static str {
        if self.standin {
            "the stand-in's emulated device"
        } else {
            "the device"
        }
    }
}

/// "13.2" → 13020, as the driver reports versions.
fn version_number(text: &str) -> Option<i32> {
    let mut parts = text.trim().split('.');
    let major: i32 = parts.next()?.parse().ok()?;
    let minor: i32 = parts.next().unwrap_or("0").parse().ok()?;
    Some(major * 1000 + minor * 10)
}

fn cuda_text(v: i32) -> String {
    format!("{}.{}", v / 1000, v % 1000 / 10)
}

/// Whether a build with these architectures runs on a device of compute capability (major,
/// minor): its own binary (sm_XY with the same major and a minor at most the device's), or
/// PTX (compute_XY) at most the device's, which the driver compiles.
pub fn runs_on(arch_list: &[String], major: i32, minor: i32) -> bool {
    let device = major * 10 + minor;
    arch_list.iter().any(|a| {
        let (ptx, number) = match (a.strip_prefix("sm_"), a.strip_prefix("compute_")) {
            (Some(n), _) => (false, n),
            (_, Some(n)) => (true, n),
            _ => return false,
        };
        let digits: String = number.chars().take_while(|c| c.is_ascii_digit()).collect();
        let Ok(arch) = digits.parse::<i32>() else { return false };
        if ptx {
            arch <= device
        } else {
            arch / 10 == major && arch <= device
        }
    })
}

/// PyTorch's libcublas and libcublasLt (as its process mapped them) from different folders:
/// pytorch#174320, a system libcublasLt first on LD_LIBRARY_PATH shadowing the wheel's. Of two
/// releases (where the files' names say) a failure, else a warning.
fn cublas_pair_in_process(paths: &[String]) -> Option<Check> {
    let family = |p: &&String| Path::new(p.as_str()).file_name().and_then(|f| f.to_str()).and_then(|f| f.split_once(".so.")).map(|(name, _)| name.to_string());
    let find = |name: &str| paths.iter().find(|p| family(p).as_deref() == Some(name)).map(|p| Path::new(p.as_str()));
    let (cublas, lt) = (find("libcublas")?, find("libcublasLt")?);
    let real = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let (a, b) = (real(cublas), real(lt));
    if a.parent() == b.parent() {
        return None;
    }
    let releases = (crate::doctor::setup_checks::release_of_file(&a), crate::doctor::setup_checks::release_of_file(&b));
    let mixed = matches!(releases, (Some(x), Some(y)) if x != y);
    let (status, what) = if mixed { (Status::Fail, "of different releases, from different folders") } else { (Status::Warn, "from different folders") };
    Some(check(
        "pytorch cublas pair",
        status,
        format!("PyTorch loaded libcublas ({}) and libcublasLt ({}) {what}", cublas.display(), lt.display()),
        Some("pytorch#174320: a system libcublasLt shadowing the wheel's libcublas breaks cuBLAS: take its folder off LD_LIBRARY_PATH, so the wheel's own libcublasLt is loaded"),
    ))
}

/// The CUDA majors of the runtime and cuBLAS libraries among `paths`.
fn cuda_majors(paths: &[String]) -> Vec<u32> {
    let mut majors: Vec<u32> = paths
        .iter()
        .filter_map(|p| {
            let file = p.rsplit('/').next()?;
            let rest = file.strip_prefix("libcudart.so.").or_else(|| file.strip_prefix("libcublas.so."))?;
            rest.split('.').next()?.parse().ok()
        })
        .collect();
    majors.sort_unstable();
    majors.dedup();
    majors
}

pub fn checks(answer: &Result<Frameworks, ProbeError>, python: &Path, machine: &Machine) -> Vec<Check> {
    let mut out = Vec::new();
    let frameworks = match answer {
        Ok(f) => f,
        Err(ProbeError::NoPython(why)) => {
            out.push(check(
                "frameworks",
                Status::Warn,
                format!("no Python to ask ({why})"),
                Some("pass the interpreter your program uses: cublasguard doctor --python PATH"),
            ));
            return out;
        }
        Err(ProbeError::TimedOut(secs)) => {
            out.push(check(
                "frameworks",
                Status::Warn,
                format!(
                    "{} did not finish importing the frameworks within {secs} s (an import hangs: a broken install, or a driver call that never returns)",
                    python.display()
                ),
                Some("run `python -X importtime -c 'import torch'` to see which import hangs; raise the limit with --python-timeout"),
            ));
            return out;
        }
        Err(ProbeError::Failed(why)) => {
            out.push(check("frameworks", Status::Warn, format!("{} could not be asked: {why}", python.display()), None));
            return out;
        }
    };
    let any = frameworks.torch.is_some() || frameworks.jax.is_some() || frameworks.tensorflow.is_some();
    if !any {
        out.push(check(
            "frameworks",
            Status::Ok,
            format!("{} (Python {}) has no PyTorch, JAX or TensorFlow", python.display(), frameworks.python.as_deref().unwrap_or("?")),
            None,
        ));
    }
    // The stand-in's devices are emulated on the CPU: no GPU, whatever it reports.
    let has_gpu = !machine.standin && (machine.driver_loaded || !machine.devices.is_empty());
    if let Some(t) = &frameworks.torch {
        torch_checks(t, machine, has_gpu, &mut out);
    }
    if let Some(j) = &frameworks.jax {
        match &j.error {
            Some(e) => out.push(check(
                "jax",
                Status::Warn,
                format!("jax is installed but cannot be imported: {e}"),
                Some("reinstall jax and jaxlib at matching versions"),
            )),
            None if j.cuda_plugins.is_empty() => out.push(check(
                "jax",
                if has_gpu { Status::Fail } else { Status::Warn },
                format!(
                    "jax {} (jaxlib {}) has no CUDA plugin: it runs on the CPU only",
                    j.version.as_deref().unwrap_or("?"),
                    j.jaxlib.as_deref().unwrap_or("?")
                ),
                Some("pip install \"jax[cuda12]\" (or cuda13) for the GPU build"),
            )),
            None => out.push(check(
                "jax",
                if has_gpu && j.gpus == 0 { Status::Warn } else { Status::Ok },
                format!("jax {} with {}; it sees {} GPU(s)", j.version.as_deref().unwrap_or("?"), j.cuda_plugins.join(", "), j.gpus),
                (has_gpu && j.gpus == 0).then_some("the plugin did not find the GPU: check the driver version against the plugin's CUDA major"),
            )),
        }
    }
    if let Some(f) = &frameworks.tensorflow {
        match (&f.error, f.built_with_cuda) {
            (Some(e), _) => out.push(check("tensorflow", Status::Warn, format!("tensorflow is installed but cannot be imported: {e}"), None)),
            (None, Some(false)) => out.push(check(
                "tensorflow",
                if has_gpu { Status::Fail } else { Status::Warn },
                format!("tensorflow {} is a CPU-only build", f.version.as_deref().unwrap_or("?")),
                Some("pip install \"tensorflow[and-cuda]\" for the GPU build"),
            )),
            (None, _) => out.push(check(
                "tensorflow",
                if has_gpu && f.gpus == Some(0) { Status::Warn } else { Status::Ok },
                format!(
                    "tensorflow {} built for CUDA {}; it sees {} GPU(s)",
                    f.version.as_deref().unwrap_or("?"),
                    f.cuda.as_deref().unwrap_or("?"),
                    f.gpus.map(|g| g.to_string()).unwrap_or("?".into())
                ),
                None,
            )),
        }
    }
    out
}

fn torch_checks(t: &Torch, machine: &Machine, has_gpu: bool, out: &mut Vec<Check>) {
    if let Some(e) = &t.error {
        out.push(check(
            "pytorch",
            Status::Warn,
            format!("torch is installed but cannot be imported: {e}"),
            Some("reinstall torch; a mix of CUDA 12 and 13 nvidia-* wheels is a common cause"),
        ));
        return;
    }
    let version = t.version.as_deref().unwrap_or("?");
    let Some(cuda) = t.cuda.as_deref() else {
        out.push(check(
            "pytorch",
            if has_gpu { Status::Fail } else { Status::Warn },
            format!("torch {version} is a CPU-only build (torch.version.cuda is None): .cuda() fails or the run quietly stays on the CPU"),
            Some("install a CUDA build of PyTorch (pip's default on Linux x86_64 is one; an index for the 'cpu' variant gives this one)"),
        ));
        return;
    };
    out.push(check("pytorch", Status::Ok, format!("torch {version}, a CUDA {cuda} build"), None));
    let built = version_number(cuda);
    match (machine.driver_cuda, built) {
        // The driver check has failed already: one missing driver is one failure.
        (None, _) => out.push(check(
            "pytorch vs driver",
            Status::Skip,
            format!("needs a driver (see the driver check): there is no NVIDIA driver, and PyTorch's CUDA {cuda} build needs one that supports CUDA {cuda} or newer"),
            None,
        )),
        (Some(driver), Some(built)) if driver / 1000 < built / 1000 => out.push(check(
            "pytorch vs driver",
            Status::Fail,
            format!("PyTorch is built for CUDA {cuda} but {} supports CUDA {}: CUDA will not start", machine.driver_name(), cuda_text(driver)),
            Some("upgrade the NVIDIA driver, or install the PyTorch build for the driver's CUDA major"),
        )),
        (Some(driver), Some(built)) if driver < built => out.push(check(
            "pytorch vs driver",
            Status::Warn,
            format!("PyTorch is built for CUDA {cuda}, {} supports CUDA {}: the same major runs through minor-version compatibility, but kernels that need PTX compiled by the driver may fail", machine.driver_name(), cuda_text(driver)),
            Some("upgrade the NVIDIA driver to CUDA {cuda} or newer"),
        )),
        (Some(driver), _) => out.push(check("pytorch vs driver", Status::Ok, format!("built for CUDA {cuda}; {} supports CUDA {}", machine.driver_name(), cuda_text(driver)), None)),
    }
    let archs = if t.arch_list.is_empty() { "unknown".to_string() } else { t.arch_list.join(" ") };
    if machine.devices.is_empty() {
        out.push(check("pytorch architectures", Status::Ok, format!("compiled for {archs}"), None));
    }
    for &(major, minor) in &machine.devices {
        if t.arch_list.is_empty() || runs_on(&t.arch_list, major, minor) {
            out.push(check("pytorch architectures", Status::Ok, format!("compiled for {archs}; {} is sm_{major}{minor}", machine.device_name()), None));
        } else {
            out.push(check(
                "pytorch architectures",
                Status::Fail,
                format!("{} is sm_{major}{minor} (compute capability {major}.{minor}) but this PyTorch build has kernels for {archs} only: \"no kernel image is available for execution on the device\" (209), or CUBLAS_STATUS_EXECUTION_FAILED / ARCH_MISMATCH at the first GEMM", machine.device_name()),
                Some("install a PyTorch build that lists this architecture (a newer release, or one built for a newer CUDA)"),
            ));
        }
    }
    out.push(check(
        "cuDNN",
        if t.cudnn.is_some() { Status::Ok } else { Status::Warn },
        match t.cudnn {
            Some(v) => format!("cuDNN {}", cudnn_release(v)),
            None => "PyTorch found no cuDNN (convolutions and RNNs fall back or fail)".into(),
        },
        t.cudnn.is_none().then_some("install the nvidia-cudnn wheel PyTorch depends on (pip install --force-reinstall torch)"),
    ));
    let majors = cuda_majors(&t.libraries);
    let origin = if t.libraries.iter().any(|p| p.contains("/site-packages/nvidia/")) { "NVIDIA's pip wheels" } else { "system paths" };
    if majors.len() > 1 {
        out.push(check(
            "pytorch libraries",
            Status::Warn,
            format!("PyTorch loaded CUDA runtimes of several majors ({:?}) from {origin}: {}", majors, t.libraries.join(", ")),
            Some("remove the nvidia-* wheels of the other CUDA major, or fix LD_LIBRARY_PATH so it does not put another CUDA first"),
        ));
    } else if !t.libraries.is_empty() {
        out.push(check("pytorch libraries", Status::Ok, format!("loaded from {origin}: {}", t.libraries.join(", ")), None));
    }
    if let Some(c) = cublas_pair_in_process(&t.libraries) {
        out.push(c);
    }
    if let Some(nvcc) = &machine.nvcc {
        if version_number(nvcc) != built {
            out.push(check(
                "nvcc",
                Status::Ok,
                format!("nvcc is CUDA {nvcc}, PyTorch's runtime is CUDA {cuda}: the program uses the runtime PyTorch brought; nvcc's version does not matter for it (only for compiling your own CUDA extensions)"),
                None,
            ));
        }
    }
}

/// `nvcc --version`'s release ("12.4"), when nvcc is on PATH.
pub fn nvcc_release() -> Option<String> {
    let out = Command::new("nvcc").arg("--version").stdin(Stdio::null()).output().ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let after = text.split("release ").nth(1)?;
    Some(after.split(',').next()?.trim().to_string())
}

/// cuDNN's version number as its release: "9.26.0" for 92600 (cuDNN 9 on: major * 10000 +
/// minor * 100 + patch), "8.9.2" for 8902 (cuDNN 8 and before: major * 1000 + minor * 100 + patch).
pub fn cudnn_release(v: i64) -> String {
    if v >= 10_000 {
        format!("{}.{}.{}", v / 10_000, v / 100 % 100, v % 100)
    } else if v > 0 {
        format!("{}.{}.{}", v / 1000, v / 100 % 10, v % 100)
    } else {
        v.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cudnns_version_number_is_printed_as_its_release() {
        assert_eq!(cudnn_release(92600), "9.26.0");
        assert_eq!(cudnn_release(90100), "9.1.0");
        assert_eq!(cudnn_release(8902), "8.9.2");
    }

    #[test]
    fn the_framework_probe_compiles_as_python_with_warnings_as_errors() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/doctor/framework_probe.py");
        let out = Command::new("python3")
            .args(["-W", "error", "-c", "import sys; compile(open(sys.argv[1]).read(), sys.argv[1], 'exec')", path])
            .output()
            .expect("python3");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(PROBE, std::fs::read_to_string(path).unwrap());
    }

    fn torch(cuda: Option<&str>, archs: &[&str]) -> Result<Frameworks, ProbeError> {
        Ok(Frameworks {
            torch: Some(Torch {
                version: Some("2.5.0".into()),
                cuda: cuda.map(String::from),
                arch_list: archs.iter().map(|a| a.to_string()).collect(),
                cudnn: Some(90100),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    fn status_of(checks: &[Check], name: &str) -> Status {
        checks.iter().find(|c| c.name == name).unwrap_or_else(|| panic!("no {name}: {checks:#?}")).status
    }

    #[test]
    fn architectures_run_on_their_major_or_through_older_ptx() {
        let archs: Vec<String> = ["sm_50", "sm_60", "sm_70", "sm_80", "sm_86", "sm_90"].iter().map(|s| s.to_string()).collect();
        assert!(runs_on(&archs, 8, 9), "sm_86 binaries run on 8.9");
        assert!(runs_on(&archs, 9, 0));
        assert!(!runs_on(&archs, 12, 0), "no sm_120 and no PTX");
        let with_ptx: Vec<String> = ["sm_90", "compute_90"].iter().map(|s| s.to_string()).collect();
        assert!(runs_on(&with_ptx, 12, 0), "PTX 9.0 is compiled by the driver for 12.0");
    }

    #[test]
    fn a_cpu_only_build_fails_on_a_machine_with_a_gpu_and_warns_without() {
        let gpu = Machine { driver_loaded: true, driver_cuda: Some(12090), devices: vec![(9, 0)], standin: false, nvcc: None };
        assert_eq!(status_of(&checks(&torch(None, &[]), Path::new("python3"), &gpu), "pytorch"), Status::Fail);
        assert_eq!(status_of(&checks(&torch(None, &[]), Path::new("python3"), &Machine::default()), "pytorch"), Status::Warn);
    }

    #[test]
    fn a_build_for_a_newer_cuda_than_the_driver_fails() {
        let old_driver = Machine { driver_loaded: true, driver_cuda: Some(12040), devices: vec![(9, 0)], standin: false, nvcc: Some("12.4".into()) };
        let c = checks(&torch(Some("13.0"), &["sm_90"]), Path::new("python3"), &old_driver);
        assert_eq!(status_of(&c, "pytorch vs driver"), Status::Fail);
        assert_eq!(status_of(&c, "nvcc"), Status::Ok, "nvcc is explained, not blamed");
    }

    #[test]
    fn without_a_driver_the_comparison_with_it_is_skipped_not_failed_again() {
        let no_driver = checks(&torch(Some("13.2"), &["sm_90"]), Path::new("python3"), &Machine::default());
        let c = no_driver.iter().find(|c| c.name == "pytorch vs driver").expect("pytorch vs driver");
        assert_eq!(c.status, Status::Skip, "{c:?}");
        assert!(c.evidence.contains("needs a driver") && c.evidence.contains("13.2"), "{}", c.evidence);
        assert!(no_driver.iter().all(|c| c.status != Status::Fail), "{no_driver:#?}");
    }

    #[test]
    fn the_stand_in_counts_as_no_gpu_and_is_named_in_the_comparisons() {
        let standin = Machine { driver_loaded: true, driver_cuda: Some(12040), devices: vec![(9, 0)], standin: true, nvcc: None };
        assert_eq!(
            status_of(&checks(&torch(None, &[]), Path::new("python3"), &standin), "pytorch"),
            Status::Warn,
            "a CPU-only build is no failure without a GPU"
        );
        let jax = Ok(Frameworks { jax: Some(Jax { version: Some("0.7.0".into()), ..Default::default() }), ..Default::default() });
        assert_eq!(status_of(&checks(&jax, Path::new("python3"), &standin), "jax"), Status::Warn);
        let c = checks(&torch(Some("13.0"), &["sm_80"]), Path::new("python3"), &standin);
        let driver = c.iter().find(|c| c.name == "pytorch vs driver").unwrap();
        assert!(driver.evidence.contains("the stand-in driver supports CUDA 12.4"), "{}", driver.evidence);
        let archs = c.iter().find(|c| c.name == "pytorch architectures").unwrap();
        assert!(archs.evidence.contains("the stand-in's emulated device is sm_90"), "{}", archs.evidence);
    }

    #[test]
    fn the_library_search_takes_the_wheels_and_the_folders_of_what_pytorch_loaded() {
        let f = Frameworks {
            nvidia_lib_dirs: vec!["/v/site-packages/nvidia/cu13/lib".into(), "/v/site-packages/nvidia/cudnn/lib".into()],
            torch: Some(Torch {
                libraries: vec!["/v/site-packages/nvidia/cu13/lib/libcublas.so.13".into(), "/opt/torch/lib/libcudart.so.13".into()],
                ..Default::default()
            }),
            ..Default::default()
        };
        let dirs: Vec<String> = f.library_dirs().iter().map(|d| d.display().to_string()).collect();
        assert_eq!(dirs, ["/v/site-packages/nvidia/cu13/lib", "/v/site-packages/nvidia/cudnn/lib", "/opt/torch/lib"]);
    }

    #[test]
    fn a_libcublaslt_from_another_folder_than_libcublas_in_pytorchs_process_is_named() {
        let wheel = "/v/site-packages/nvidia/cublas/lib/libcublas.so.12".to_string();
        let system = "/usr/local/cuda-12.1/lib64/libcublasLt.so.12".to_string();
        let c = cublas_pair_in_process(&[wheel.clone(), system]).expect("a check");
        assert_eq!(c.status, Status::Warn, "releases unknown from these names: {c:?}");
        assert!(c.evidence.contains("/usr/local/cuda-12.1/lib64/libcublasLt.so.12") && c.fix.as_deref().is_some_and(|f| f.contains("pytorch#174320")), "{c:?}");
        let release = |n: &str| format!("/x/{n}");
        let mixed = cublas_pair_in_process(&[release("a/libcublas.so.12.9.1"), release("b/libcublasLt.so.12.1.0")]).expect("a check");
        assert_eq!(mixed.status, Status::Fail);
        assert!(cublas_pair_in_process(&[wheel, "/v/site-packages/nvidia/cublas/lib/libcublasLt.so.12".into()]).is_none(), "one folder");
    }

    #[test]
    fn libraries_of_two_cuda_majors_in_one_process_are_a_warning() {
        let mut answer = torch(Some("13.2"), &["sm_90"]);
        if let Ok(f) = &mut answer {
            if let Some(t) = &mut f.torch {
                t.libraries = vec!["/v/site-packages/nvidia/cu13/lib/libcublas.so.13".into(), "/usr/local/cuda-12.4/lib64/libcudart.so.12".into()];
            }
        }
        let c = checks(
            &answer,
            Path::new("python3"),
            &Machine { driver_loaded: true, driver_cuda: Some(13020), devices: vec![(9, 0)], standin: false, nvcc: None },
        );
        assert_eq!(status_of(&c, "pytorch libraries"), Status::Warn);
    }

    #[test]
    fn versions_compare_as_the_driver_reports_them() {
        assert_eq!(version_number("13.2"), Some(13020));
        assert_eq!(version_number("12"), Some(12000));
        assert_eq!(cuda_majors(&["/x/nvidia/cu13/lib/libcublas.so.13".into(), "/usr/lib/libcudart.so.12.4.1".into()]), [12, 13]);
    }
}
