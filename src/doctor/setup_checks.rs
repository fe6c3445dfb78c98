//! The doctor's checks of the machine's layout around the driver: WSL2's driver files, the
//! CUDA cache folder, whether libcublas and libcublasLt come from one place and one release, and
//! whether cuDNN's dispatcher finds every sublibrary it loads at run time, all of its version.

use std::ffi::{c_int, c_void, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::check::{check, Check, Status};

/// Where WSL2 puts the Windows driver's Linux libraries (libcuda.so.1, libnvidia-ml.so.1, nvidia-smi).
const WSL_LIB: &str = "/usr/lib/wsl/lib";
const WSL_ROOT: &str = "/usr/lib/wsl/";

const WSL_FIX: &str = "NVIDIA's CUDA on WSL guide: install only the Windows NVIDIA driver, never a Linux one inside WSL. \
    Remove the Linux driver's packages (sudo apt-get remove --purge 'nvidia-driver-*' 'libnvidia-compute-*' 'nvidia-utils-*'; \
    the cuda-toolkit packages carry no driver and may stay), take its folder off LD_LIBRARY_PATH, run sudo ldconfig, then \
    wsl --shutdown from Windows";

/// What says this Linux runs under WSL2.
struct Wsl {
    osrelease: String,
    dxg: bool,
    wsl_lib: bool,
}

fn wsl() -> Option<Wsl> {
    let osrelease = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string();
    let lower = osrelease.to_ascii_lowercase();
    let w = Wsl { dxg: Path::new("/dev/dxg").exists(), wsl_lib: Path::new(WSL_LIB).is_dir(), osrelease };
    (lower.contains("microsoft") || lower.contains("wsl") || w.dxg || w.wsl_lib).then_some(w)
}

fn is_wsl_file(path: &Path) -> bool {
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf()).starts_with(WSL_ROOT) || path.starts_with(WSL_ROOT)
}

/// Every libcuda.so.1 the loader could find: LD_LIBRARY_PATH, the ldconfig cache, and the
/// folders a Linux driver installs into.
fn libcuda_files() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(paths) = std::env::var_os("LD_LIBRARY_PATH") {
        dirs.extend(std::env::split_paths(&paths).filter(|p| !p.as_os_str().is_empty()));
    }
    dirs.extend(["/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib"].map(PathBuf::from));
    let mut files: Vec<PathBuf> = dirs.iter().map(|d| d.join("libcuda.so.1")).filter(|f| f.exists()).collect();
    if let Ok(out) = Command::new("ldconfig").arg("-p").output() {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if let Some((name, path)) = line.trim().split_once(" => ") {
                if name.starts_with("libcuda.so.1 ") {
                    files.push(PathBuf::from(path.trim()));
                }
            }
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    files.retain(|f| seen.insert(f.canonicalize().unwrap_or_else(|_| f.clone())));
    files
}

/// Under WSL2: the GPU device, the Windows driver's folder, and no Linux driver inside. Nothing
/// where this is not WSL.
pub fn wsl_checks(driver_path: Option<&Path>) -> Vec<Check> {
    let Some(w) = wsl() else { return Vec::new() };
    let mut out = Vec::new();
    let kernel = if w.osrelease.is_empty() { String::new() } else { format!(" (kernel {})", w.osrelease) };
    if !w.dxg {
        out.push(check(
            "wsl2",
            Status::Fail,
            format!("WSL{kernel} without /dev/dxg: WSL gives this Linux no GPU"),
            Some("update WSL (wsl --update in Windows) and install NVIDIA's Windows driver; a WSL1 distribution has no GPU (wsl --set-version DISTRO 2)"),
        ));
    }
    if !w.wsl_lib {
        out.push(check(
            "wsl2",
            Status::Fail,
            format!("WSL{kernel} without {WSL_LIB}: the Windows NVIDIA driver's libraries (libcuda.so.1) are not there"),
            Some("install or update NVIDIA's driver in Windows, then wsl --shutdown and start the distribution again"),
        ));
    }
    if let Some(p) = driver_path.filter(|p| !is_wsl_file(p)) {
        out.push(check(
            "wsl2",
            Status::Fail,
            format!("libcuda.so.1 resolves to {}, not {WSL_LIB}: a Linux NVIDIA driver's library shadows the Windows driver's (\"GPU access blocked by the operating system\")", p.display()),
            Some(WSL_FIX),
        ));
    }
    let mapped = driver_path.and_then(|p| p.canonicalize().ok());
    let others: Vec<String> =
        libcuda_files().into_iter().filter(|f| !is_wsl_file(f) && f.canonicalize().ok() != mapped).map(|f| f.display().to_string()).collect();
    if !others.is_empty() {
        out.push(check("wsl2", Status::Fail, format!("a Linux NVIDIA driver's libcuda.so.1 is installed inside WSL: {}", others.join(", ")), Some(WSL_FIX)));
    }
    let modules: Vec<&str> = ["/proc/driver/nvidia", "/sys/module/nvidia"].into_iter().filter(|p| Path::new(p).exists()).collect();
    if !modules.is_empty() {
        out.push(check(
            "wsl2",
            Status::Fail,
            format!("an nvidia kernel module is loaded inside WSL ({}): WSL's GPU is the Windows driver's, through /dev/dxg", modules.join(", ")),
            Some(WSL_FIX),
        ));
    }
    if out.is_empty() {
        let at = driver_path.map(|p| format!(", libcuda.so.1 resolves to {}", p.display())).unwrap_or_default();
        out.push(check("wsl2", Status::Ok, format!("WSL2{kernel}: /dev/dxg present, the Windows driver's libraries in {WSL_LIB}{at}"), None));
    }
    out
}

fn accessible(path: &Path, mode: c_int) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else { return false };
    // SAFETY: a NUL-terminated path; access only asks.
    unsafe { libc::access(c.as_ptr(), mode) == 0 }
}

const CACHE_FIX: &str = "torch/cutorch#677: a ~/.nv made by a run as root (sudo) leaves the JIT cache unwritable for you, and \
    CUDA libraries then fail to start (CUBLAS_STATUS_NOT_INITIALIZED): sudo chown -R $USER ~/.nv, or set CUDA_CACHE_PATH to a \
    folder you can write";

/// The CUDA cache folder (CUDA_CACHE_PATH, else ~/.nv/ComputeCache): the driver writes the
/// kernels it compiles from PTX there, and must be able to.
pub fn cache_check() -> Check {
    if std::env::var("CUDA_CACHE_DISABLE").is_ok_and(|v| v.trim() == "1") {
        return check("cuda cache", Status::Ok, "CUDA_CACHE_DISABLE=1: the driver keeps no compiled-kernel cache", None);
    }
    let (folder, from) = match std::env::var_os("CUDA_CACHE_PATH").filter(|v| !v.is_empty()) {
        Some(p) => (PathBuf::from(p), "CUDA_CACHE_PATH"),
        None => match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
            Some(home) => (PathBuf::from(home).join(".nv/ComputeCache"), "the default"),
            None => return check("cuda cache", Status::Info, "no HOME and no CUDA_CACHE_PATH: where the driver caches compiled kernels is unknown", None),
        },
    };
    let folder = if folder.is_relative() { std::env::current_dir().map(|d| d.join(&folder)).unwrap_or(folder) } else { folder };
    let shown = folder.display();
    if folder.exists() {
        if !folder.is_dir() {
            return check("cuda cache", Status::Fail, format!("the CUDA cache folder {shown} ({from}) is not a folder"), Some(CACHE_FIX));
        }
        if !accessible(&folder, libc::W_OK | libc::X_OK) {
            return check(
                "cuda cache",
                Status::Fail,
                format!("the CUDA cache folder {shown} ({from}) is not writable by this user{}", owner_note(&folder)),
                Some(CACHE_FIX),
            );
        }
        return check("cuda cache", Status::Ok, format!("the CUDA cache folder {shown} ({from}) is writable"), None);
    }
    // Missing: fine if the driver can create it, i.e. its nearest existing folder is writable.
    let Some(existing) = folder.ancestors().skip(1).find(|a| a.exists()) else {
        return check("cuda cache", Status::Fail, format!("the CUDA cache folder {shown} ({from}) cannot be created: no part of it exists"), Some(CACHE_FIX));
    };
    if !existing.is_dir() {
        return check(
            "cuda cache",
            Status::Fail,
            format!("the CUDA cache folder {shown} ({from}) cannot be created: {} is a file, not a folder", existing.display()),
            Some(CACHE_FIX),
        );
    }
    if !accessible(existing, libc::W_OK | libc::X_OK) {
        return check(
            "cuda cache",
            Status::Fail,
            format!("the CUDA cache folder {shown} ({from}) cannot be created: {} is not writable by this user{}", existing.display(), owner_note(existing)),
            Some(CACHE_FIX),
        );
    }
    check("cuda cache", Status::Ok, format!("the CUDA cache folder {shown} ({from}) does not exist yet; the driver can create it"), None)
}

/// ", owned by uid N" when another user owns `path`; ", on a read-only file system" when that is why.
fn owner_note(path: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: getuid has no preconditions.
    let me = unsafe { libc::getuid() };
    let Ok(meta) = std::fs::metadata(path) else { return String::new() };
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else { return String::new() };
    // SAFETY: a zeroed statvfs is a valid out-parameter; the path is NUL-terminated.
    let mut fs: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statvfs(c.as_ptr(), &mut fs) } == 0 && fs.f_flag & libc::ST_RDONLY != 0 {
        return ", on a read-only file system".into();
    }
    if meta.uid() != me {
        let owner = if meta.uid() == 0 { "root".to_string() } else { format!("uid {}", meta.uid()) };
        return format!(", owned by {owner}");
    }
    String::new()
}

/// `libcublasLt.so.12.1.0.26` → (12, 1, 0): a library file's release from its name.
pub fn release_of_file(path: &Path) -> Option<(u32, u32, u32)> {
    let name = path.file_name()?.to_str()?;
    let (_, rest) = name.split_once(".so.")?;
    let mut parts = rest.split('.').map(|p| p.parse::<u32>().ok());
    let major = parts.next()??;
    let minor = parts.next()??;
    let patch = parts.next().flatten()?;
    Some((major, minor, patch))
}

struct Loaded {
    path: Option<PathBuf>,
    release: Option<(u32, u32, u32)>,
}

fn cublas_release(major: u32) -> Result<Loaded, String> {
    let lib = crate::cuda_table::Cublas::open(&format!("libcublas.so.{major}"))?;
    // The file from the function's address, else from the loader's list of loaded objects.
    let path = lib
        .cublasGetProperty
        .and_then(|f| crate::cuda_table::object_file(f as *const c_void))
        .or_else(|| crate::cuda_table::loaded_file(&format!("libcublas.so.{major}")));
    let mut release = lib.cublasGetProperty.and_then(|f| {
        let mut v = [0 as c_int; 3];
        for (kind, slot) in v.iter_mut().enumerate() {
            // SAFETY: libraryPropertyType 0, 1, 2 (major, minor, patch) and an out-parameter.
            if unsafe { f(kind as c_int, slot) } != 0 {
                return None;
            }
        }
        Some((v[0] as u32, v[1] as u32, v[2] as u32))
    });
    if release.is_none() {
        release = path.as_ref().and_then(|p| release_of_file(&p.canonicalize().unwrap_or_else(|_| p.clone())));
    }
    lib.keep_loaded();
    Ok(Loaded { path, release })
}

fn cublaslt_release(major: u32) -> Result<Loaded, String> {
    let lib = crate::cuda_table::CublasLt::open(&format!("libcublasLt.so.{major}"))?;
    let path = lib
        .cublasLtGetVersion
        .and_then(|f| crate::cuda_table::object_file(f as *const c_void))
        .or_else(|| crate::cuda_table::loaded_file(&format!("libcublasLt.so.{major}")));
    // SAFETY: cublasLtGetVersion takes nothing and returns major * 10000 + minor * 100 + patch.
    let mut release = lib.cublasLtGetVersion.map(|f| unsafe { f() }).map(|v| ((v / 10000) as u32, (v / 100 % 100) as u32, (v % 100) as u32));
    if release.is_none() {
        release = path.as_ref().and_then(|p| release_of_file(&p.canonicalize().unwrap_or_else(|_| p.clone())));
    }
    lib.keep_loaded();
    Ok(Loaded { path, release })
}

fn folder_of(p: &Path) -> PathBuf {
    let real = p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    real.parent().map(Path::to_path_buf).unwrap_or(real)
}

fn release_text(r: Option<(u32, u32, u32)>) -> String {
    r.map(|(a, b, c)| format!("{a}.{b}.{c}")).unwrap_or_else(|| "release unknown".into())
}

const PAIR_FIX: &str = "pytorch#174320: a system libcublasLt shadowing the wheel's libcublas breaks cuBLAS (CUBLAS_STATUS_NOT_INITIALIZED, \
    EXECUTION_FAILED, or missing symbols): take the other folder off LD_LIBRARY_PATH (or out of /etc/ld.so.conf.d, then sudo ldconfig), \
    or install matching releases";

/// For each CUDA major of cuBLAS found: the libcublasLt and libcublas the loader picks (by
/// soname, as for a program without its own RPATH that links both: LD_LIBRARY_PATH, then the
/// ldconfig cache) come from one folder and one release.
pub fn cublas_pair_checks(majors: &[u32]) -> Vec<Check> {
    let mut out = Vec::new();
    for &major in majors {
        // libcublasLt first, as a program linking both (PyTorch's libtorch_cuda) finds it by
        // soname: libcublas's own need for it is then met by the one already loaded, whatever
        // libcublas's RPATH says, which is how a system copy shadows a wheel's.
        let shown = |l: &Loaded| l.path.as_ref().map(|p| p.display().to_string()).unwrap_or_else(|| "an unknown file".into());
        let lt_first = cublaslt_release(major);
        let cublas = match cublas_release(major) {
            Ok(c) => c,
            // Not where the loader looks by soname (a wheel's, reached by its RPATH only): nothing to compare.
            Err(e) if e.contains("cannot open shared object file") => continue,
            Err(e) => {
                let with = match &lt_first {
                    Ok(lt) => format!(" with the libcublasLt.so.{major} {} at {}", release_text(lt.release), shown(lt)),
                    Err(_) => String::new(),
                };
                out.push(check("cublas pair", Status::Fail, format!("libcublas.so.{major} is found but cannot be loaded{with}: {e}"), Some(PAIR_FIX)));
                continue;
            }
        };
        // Not on the search path by itself: the one libcublas brought (its RPATH), if any.
        let lt = match lt_first.or_else(|_| cublaslt_release(major)) {
            Ok(lt) => lt,
            Err(e) => {
                out.push(check(
                    "cublas pair",
                    Status::Fail,
                    format!("libcublas.so.{major} ({}) loads but libcublasLt.so.{major}, which it needs, does not: {e}", shown(&cublas)),
                    Some("install libcublasLt of the same release beside libcublas (one nvidia-cublas wheel, or one CUDA toolkit)"),
                ));
                continue;
            }
        };
        let (a, b) = (shown(&cublas), shown(&lt));
        // None: not known (a release the library does not say and its file's name does not
        // carry, a file the loader does not name): never taken for a match.
        let same_folder = match (&cublas.path, &lt.path) {
            (Some(x), Some(y)) => Some(folder_of(x) == folder_of(y)),
            _ => None,
        };
        let same_release = match (cublas.release, lt.release) {
            (Some(x), Some(y)) => Some(x == y),
            _ => None,
        };
        let evidence = format!("libcublas.so.{major} {} at {a}, libcublasLt.so.{major} {} at {b}", release_text(cublas.release), release_text(lt.release));
        out.push(match (same_release, same_folder) {
            (Some(false), _) => check("cublas pair", Status::Fail, format!("mixed cuBLAS releases: {evidence}"), Some(PAIR_FIX)),
            (None, _) | (_, None) => {
                let what = match (same_release, same_folder) {
                    (None, None) => "release and folder unknown",
                    (None, _) => "release unknown",
                    _ => "folder unknown",
                };
                check(
                    "cublas pair",
                    Status::Warn,
                    format!("{what}: {evidence}"),
                    Some("the doctor could not tell whether libcublas and libcublasLt are one release from one folder (pytorch#174320): compare their files' names"),
                )
            }
            (Some(true), Some(false)) => check(
                "cublas pair",
                Status::Warn,
                format!("one release from two folders: {evidence}"),
                Some("keep libcublas and libcublasLt in one folder: an update of one copy would mix releases (pytorch#174320)"),
            ),
            (Some(true), Some(true)) => check("cublas pair", Status::Ok, format!("one folder, one release: {evidence}"), None),
        });
    }
    out
}

/// The sublibraries cuDNN 9's dispatcher loads itself, for a dispatcher whose file does not
/// name them (`dispatched_names`): 9.26's, less `libcudnn_ext` (9.10.2 has none).
const CUDNN_SUBLIBRARIES: &[&str] = &["libcudnn_graph", "libcudnn_ops", "libcudnn_cnn", "libcudnn_adv"];

/// The file names cuDNN's dispatcher tries for `name`, in its order: the full version,
/// major.minor, major, the bare name.
pub fn cudnn_candidates(name: &str, (major, minor, patch): (u32, u32, u32)) -> [String; 4] {
    [format!("{name}.so.{major}.{minor}.{patch}"), format!("{name}.so.{major}.{minor}"), format!("{name}.so.{major}"), format!("{name}.so")]
}

/// Where a `dlopen` of `candidates` from the dispatcher in `origin` resolves, in the loader's
/// order for each name (the dispatcher's RPATH $ORIGIN, LD_LIBRARY_PATH, the system's
/// folders), the names in cuDNN's order.
fn resolve(candidates: &[String], origin: &Path) -> Option<PathBuf> {
    let mut folders = vec![origin.to_path_buf()];
    if let Some(paths) = std::env::var_os("LD_LIBRARY_PATH") {
        folders.extend(std::env::split_paths(&paths).filter(|p| !p.as_os_str().is_empty()));
    }
    folders.extend(["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib/x86_64-linux-gnu"].map(PathBuf::from));
    candidates.iter().find_map(|name| folders.iter().map(|f| f.join(name)).find(|p| p.exists()))
}

/// Where a `dlopen` of `candidates` from libcudnn_graph in `folder` resolves: LD_LIBRARY_PATH,
/// then its RUNPATH's $ORIGIN (`folder`), then the system's folders.
fn resolve_from(candidates: &[String], folder: &Path) -> Option<PathBuf> {
    let mut folders = Vec::new();
    if let Some(paths) = std::env::var_os("LD_LIBRARY_PATH") {
        folders.extend(std::env::split_paths(&paths).filter(|p| !p.as_os_str().is_empty()));
    }
    folders.push(folder.to_path_buf());
    folders.extend(["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib/x86_64-linux-gnu"].map(PathBuf::from));
    candidates.iter().find_map(|name| folders.iter().map(|f| f.join(name)).find(|p| p.exists()))
}

/// A cuDNN library's version: its exported `cudnn_<name>_version` (or `_infer_version`) datum,
/// major << 16 | minor << 8 | patch, else the full version its file name carries. The library is
/// loaded to be asked, as the doctor loads cuBLAS.
fn cudnn_library_version(path: &Path) -> Option<(u32, u32, u32)> {
    let file = path.file_name()?.to_str()?;
    let short = file.split(".so").next()?.strip_prefix("libcudnn_")?;
    use libloading::os::unix::{Library, RTLD_LAZY, RTLD_LOCAL};
    // SAFETY: loading a cuDNN library runs its initialisers, as any program using cuDNN does.
    if let Ok(lib) = unsafe { Library::open(Some(path), RTLD_LAZY | RTLD_LOCAL) } {
        for symbol in [format!("cudnn_{short}_version\0"), format!("cudnn_{short}_infer_version\0")] {
            // SAFETY: the library's own version datum, a 32-bit integer (NVIDIA's cudnn_graph_version).
            if let Ok(v) = unsafe { lib.get::<*const u32>(symbol.as_bytes()) } {
                // SAFETY: as above: the symbol's address holds the 32-bit version.
                let v = unsafe { std::ptr::read_unaligned(*v) };
                std::mem::forget(lib);
                return Some((v >> 16 & 0xff, v >> 8 & 0xff, v & 0xff));
            }
        }
        std::mem::forget(lib);
    }
    release_of_file(&path.canonicalize().unwrap_or_else(|_| path.to_path_buf()))
}

const CUDNN_FIX: &str = "cuDNN 9 loads its sublibraries at run time (ldd shows none of them) from its own folder first: keep one cuDNN \
    whole in one folder (pip install --force-reinstall nvidia-cudnn-cu13, or -cu12), and take any other cuDNN off LD_LIBRARY_PATH \
    (or out of /etc/ld.so.conf.d, then sudo ldconfig)";

/// cuDNN as a program loading `libcudnn.so.N` from `dirs` (in the doctor's search order) finds
/// it: the dispatcher, every sublibrary it loads resolvable in cuDNN's order of names, all of
/// the dispatcher's version, and that version PyTorch's (`torch.backends.cudnn.version()`).
/// cuDNN 8 needs the unversioned libcuda.so, which WSL2 lacks.
pub fn cudnn_checks(dirs: &[PathBuf], torch_cudnn: Option<i64>) -> Vec<Check> {
    let mut out = Vec::new();
    if let Some(dir) = dirs.iter().find(|d| d.join("libcudnn.so.9").exists()) {
        out.push(cudnn9_check(&dir.join("libcudnn.so.9"), torch_cudnn));
    }
    if let Some(dir) = dirs.iter().find(|d| d.join("libcudnn.so.8").exists()) {
        let dispatcher = dir.join("libcudnn.so.8");
        let unversioned = resolve(&["libcuda.so".to_string()], dir).or_else(|| {
            let cache = Command::new("ldconfig").arg("-p").output().ok()?;
            String::from_utf8_lossy(&cache.stdout)
                .lines()
                .find(|l| l.trim_start().starts_with("libcuda.so "))
                .map(|l| PathBuf::from(l.rsplit("=> ").next().unwrap_or("").trim()))
        });
        out.push(match unversioned {
            Some(p) => check("cudnn 8", Status::Ok, format!("{}: the unversioned libcuda.so it loads is {}", dispatcher.display(), p.display()), None),
            None => check(
                "cudnn 8",
                Status::Fail,
                format!(
                    "{}: its sublibraries load the unversioned libcuda.so, which no folder holds (WSL2 ships only libcuda.so.1): \
                     \"Could not load library libcudnn_cnn_infer.so.8\"",
                    dispatcher.display()
                ),
                Some("make a link libcuda.so -> libcuda.so.1 in a folder on LD_LIBRARY_PATH (on WSL2: ln -s /usr/lib/wsl/lib/libcuda.so.1 ~/cuda-link/libcuda.so), or move to cuDNN 9"),
            ),
        });
    }
    out
}

fn cudnn9_check(dispatcher: &Path, torch_cudnn: Option<i64>) -> Check {
    let origin = dispatcher.parent().unwrap_or(Path::new("/"));
    let version = crate::cuda_table::Cudnn::open(&dispatcher.display().to_string()).ok().and_then(|lib| {
        // SAFETY: cudnnGetVersion takes nothing and returns major * 10000 + minor * 100 + patch.
        let v = lib.cudnnGetVersion.map(|f| unsafe { f() });
        lib.keep_loaded();
        v
    });
    let Some(v) = version.filter(|&v| v >= 90000) else {
        return check("cudnn libraries", Status::Fail, format!("{} cannot be loaded or has no cudnnGetVersion", dispatcher.display()), Some(CUDNN_FIX));
    };
    let own = ((v / 10000) as u32, (v / 100 % 100) as u32, (v % 100) as u32);
    let mut missing = Vec::new();
    let mut found = Vec::new();
    let mut other = Vec::new();
    // The names the dispatcher itself holds (NVIDIA's name ext from 9.26 on, not 9.10.2), else
    // the four every cuDNN 9 loads.
    let named = std::fs::read(dispatcher).map(|bytes| cublasguard_format::cuda::cudnn_dispatched_names(&bytes)).unwrap_or_default();
    let names: Vec<String> = if named.is_empty() { CUDNN_SUBLIBRARIES.iter().map(|n| n.to_string()).collect() } else { named };
    let mut graph = None;
    for name in &names {
        let candidates = cudnn_candidates(name, own);
        match resolve(&candidates, origin) {
            None => missing.push(format!("{name} (none of {} in {} or on the library path)", candidates.join(", "), origin.display())),
            Some(path) => {
                let release = cudnn_library_version(&path);
                if release.is_some_and(|r| r != own) {
                    other.push(format!("{} is {}", path.display(), release_text(release)));
                }
                found.push(format!("{} {}", path.display(), release_text(release)));
                if name == "libcudnn_graph" {
                    graph = Some(path);
                }
            }
        }
    }
    // The engines and heuristics libcudnn_graph loads itself at a backend finalize (a missing
    // one is SUBLIBRARY_LOADING_FAILED there, not at cudnnCreate): the names its own file holds,
    // else the three every cuDNN 9's loads; their releases read from their files (they export
    // no version datum, and are not loaded here: NVIDIA's are hundreds of MB).
    let mut graph_missing = Vec::new();
    if let Some(graph) = &graph {
        let folder = graph.parent().unwrap_or(Path::new("/"));
        let named = cublasguard_format::cuda::cudnn_file_strings(graph).map(|s| s.names).unwrap_or_default();
        let engines: Vec<String> = if named.is_empty() { cublasguard_format::cuda::CUDNN_GRAPH_LOADS.iter().map(|n| n.to_string()).collect() } else { named };
        for name in &engines {
            let candidates = cudnn_candidates(name, own);
            match resolve_from(&candidates, folder) {
                None => graph_missing.push(format!("{name} (none of {} on the library path or in {})", candidates.join(", "), folder.display())),
                Some(path) => {
                    let release = release_of_file(&path.canonicalize().unwrap_or_else(|_| path.clone()))
                        .or_else(|| cublasguard_format::cuda::cudnn_file_strings(&path).ok().and_then(|s| s.built_as));
                    if release.is_some_and(|r| r != own) {
                        other.push(format!("{} is {}", path.display(), release_text(release)));
                    }
                    found.push(format!("{} {}", path.display(), release_text(release)));
                }
            }
        }
    }
    let head = format!("{} {}", dispatcher.display(), release_text(Some(own)));
    if !missing.is_empty() || !graph_missing.is_empty() {
        let mut parts = Vec::new();
        if !missing.is_empty() {
            parts.push(format!("its dispatcher cannot load {}", missing.join("; ")));
        }
        if let Some(graph) = graph.as_ref().filter(|_| !graph_missing.is_empty()) {
            parts.push(format!("{} cannot load {} (cudnnBackendFinalize: SUBLIBRARY_LOADING_FAILED)", graph.display(), graph_missing.join("; ")));
        }
        return check("cudnn libraries", Status::Fail, format!("{head}: {}", parts.join("; ")), Some(CUDNN_FIX));
    }
    if !other.is_empty() {
        return check("cudnn libraries", Status::Fail, format!("mixed cuDNN versions: the dispatcher {head}, but {}", other.join(", ")), Some(CUDNN_FIX));
    }
    let torch = torch_cudnn.map(|t| ((t / 10000) as u32, (t / 100 % 100) as u32, (t % 100) as u32));
    if let Some(t) = torch.filter(|t| *t != own) {
        return check(
            "cudnn libraries",
            Status::Warn,
            format!("{head}, whole, is what the library path finds first; PyTorch reports cuDNN {} (torch.backends.cudnn.version())", release_text(Some(t))),
            Some("a program linking libcudnn.so.9 by name outside PyTorch loads the other copy: keep one cuDNN on the library path"),
        );
    }
    check("cudnn libraries", Status::Ok, format!("{head} with its sublibraries, one version: {}", found.join(", ")), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cudnns_dispatcher_tries_the_full_version_first_and_the_bare_name_last() {
        assert_eq!(
            cudnn_candidates("libcudnn_graph", (9, 26, 0)),
            ["libcudnn_graph.so.9.26.0", "libcudnn_graph.so.9.26", "libcudnn_graph.so.9", "libcudnn_graph.so"]
        );
    }

    #[test]
    fn a_library_files_release_comes_from_its_name() {
        assert_eq!(release_of_file(Path::new("/x/libcublasLt.so.12.1.0.26")), Some((12, 1, 0)));
        assert_eq!(release_of_file(Path::new("libcublas.so.13.0.2")), Some((13, 0, 2)));
        assert_eq!(release_of_file(Path::new("libcublas.so.12")), None);
    }
}
