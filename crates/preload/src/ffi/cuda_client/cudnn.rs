//! What the guard reads of cuDNN: the last error message, the versions, the libraries loaded
//! and looked for, and a variant pack's pointers. Only from libraries the program already
//! loaded (never one loaded here); the sublibraries' files are only looked for on disk.
//!
//! Every function of cuDNN 9's dispatcher (cudnnGetVersion and cudnnGetLastErrorString too)
//! loads libcudnn_graph on first use, and aborts the process when it cannot ("Invalid handle.
//! Cannot load symbol cudnnCreate", 9.26): the guard calls none of them until libcudnn_graph
//! is loaded.

use std::ffi::{c_char, c_int, c_void, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, TryLockError};

use crate::check::cudnn::{candidates, Scope, VariantPack, DISPATCHED, MAX_TENSORS};
use crate::cuda::{CudnnFileStrings, CUDNN_GRAPH_LOADS};
use crate::ffi::cuda_client::cuda_api as api;
use crate::ffi::intercept::real;
use crate::trace::{CudnnLibraries, CudnnLibrary, CudnnSublibrary};

/// Set once libcudnn_graph is seen loaded (the dispatcher keeps it).
static GRAPH_LOADED: AtomicBool = AtomicBool::new(false);

/// Whether libcudnn_graph is loaded, so that the dispatcher's functions neither load it nor
/// abort.
fn graph_loaded() -> bool {
    if GRAPH_LOADED.load(Ordering::Acquire) {
        return true;
    }
    let loaded = real::loaded_objects().iter().any(|(path, _)| real::file_name(path).starts_with("libcudnn_graph"));
    if loaded {
        GRAPH_LOADED.store(true, Ordering::Release);
    }
    loaded
}

/// `cudnnGetLastErrorString` (which clears it); `None` when cuDNN is not loaded or has none.
pub(crate) fn last_error() -> Option<String> {
    if !graph_loaded() {
        return None;
    }
    let mut buf = [0u8; 512];
    // SAFETY: `buf` is writable for the size passed.
    unsafe { api::cudnnGetLastErrorString(buf.as_mut_ptr() as *mut c_char, buf.len()) }?;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let text = String::from_utf8_lossy(&buf[..end]).trim().to_string();
    (!text.is_empty()).then_some(text)
}

/// A loaded cuDNN library's version: its own `cudnn_<name>_version` data (major << 16 |
/// minor << 8 | patch), else the full version its file name carries.
fn library_version(path: &str) -> Option<String> {
    let file = real::file_name(path);
    let stem = file.split(".so").next().unwrap_or(file);
    let short = stem.strip_prefix("libcudnn_").unwrap_or(stem);
    for symbol in [format!("cudnn_{short}_version"), format!("cudnn_{short}_infer_version")] {
        let Ok(name) = CString::new(symbol) else { continue };
        let at = real::loaded_symbol(path, &name);
        if at.is_null() {
            continue;
        }
        let mut bytes = [0u8; 4];
        // SAFETY: the loaded library's own exported version datum, a 32-bit integer (cuDNN 9's
        // `cudnn_graph_version` and its siblings; the stand-in's likewise).
        unsafe { std::ptr::copy_nonoverlapping(at as *const u8, bytes.as_mut_ptr(), 4) };
        let v = u32::from_le_bytes(bytes);
        return Some(format!("{}.{}.{}", v >> 16 & 0xff, v >> 8 & 0xff, v & 0xff));
    }
    if let Some(full) = file.split(".so.").nth(1).filter(|full| full.split('.').count() == 3) {
        return Some(full.to_string());
    }
    // NVIDIA's engine and heuristic libraries export no version: the release their own check
    // compiles in, read from the file.
    file_strings(path)?.built_as.map(|(major, minor, patch)| format!("{major}.{minor}.{patch}"))
}

/// What a cuDNN library's file says of itself (`cudnn_file_strings`), read once per path:
/// NVIDIA's libcudnn_graph and engines are hundreds of MB, and a program can fail many calls.
/// Only the file is read; nothing is loaded.
fn file_strings(path: &str) -> Option<CudnnFileStrings> {
    static READ: Mutex<Vec<(String, Option<CudnnFileStrings>)>> = Mutex::new(Vec::new());
    // Never waited for: another thread reading a file (or one that held the lock when a fork
    // copied it, locked, into this process) makes this one read the file itself, uncached.
    // A thread that panicked holding it left whole entries or none: the list stays usable.
    let mut read = match READ.try_lock() {
        Ok(read) => Some(read),
        Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    };
    if let Some((_, known)) = read.as_ref().and_then(|r| r.iter().find(|(p, _)| p == path)) {
        return known.clone();
    }
    let strings = crate::cuda::cudnn_file_strings(std::path::Path::new(path)).ok();
    // A process holds a dozen cuDNN files; the bound only guards against a pathological one.
    if let Some(read) = read.as_mut().filter(|r| r.len() < 64) {
        read.push((path.to_string(), strings.clone()));
    }
    strings
}

/// What `libraries` finds of one sublibrary `name`, looked for as `candidates` names it, among
/// the loaded `cudnn` files, else in `folders`.
fn sublibrary(name: &str, version: Option<&str>, cudnn: &[&String], folders: &[String], loaded_by: Option<&str>) -> CudnnSublibrary {
    let looked_for = candidates(name, version);
    let loaded_path = cudnn.iter().find(|p| looked_for.iter().any(|c| real::file_name(p) == c)).map(|p| p.to_string());
    let on_disk = if loaded_path.is_some() {
        None
    } else {
        looked_for.iter().flat_map(|c| folders.iter().map(move |f| format!("{f}/{c}"))).find(|p| std::path::Path::new(p).exists())
    };
    CudnnSublibrary {
        name: name.to_string(),
        version: loaded_path.as_deref().and_then(library_version),
        looked_for,
        folders: folders.to_vec(),
        loaded: loaded_path,
        on_disk,
        loaded_by: loaded_by.map(str::to_string),
    }
}

/// Folders listed once each, in their first place.
fn dedup(folders: &mut Vec<String>) {
    let mut seen = Vec::new();
    folders.retain(|f| {
        !seen.contains(f) && {
            seen.push(f.clone());
            true
        }
    });
}

/// What the process holds of cuDNN; `None` when no libcudnn* is loaded. With `Scope::All`, the
/// engines and heuristics libcudnn_graph loads too.
pub(crate) fn libraries(scope: Scope) -> Option<CudnnLibraries> {
    let objects = real::loaded_objects();
    let cudnn: Vec<&String> = objects.iter().map(|(path, _)| path).filter(|p| real::file_name(p).starts_with("libcudnn")).collect();
    if cudnn.is_empty() {
        return None;
    }
    let dispatcher = cudnn.iter().find(|p| real::file_name(p).starts_with("libcudnn.so")).map(|p| p.to_string());
    let graph = graph_loaded();
    // SAFETY: no arguments; cuDNN's version queries, asked only with libcudnn_graph loaded.
    let version = graph.then(|| unsafe { api::cudnnGetVersion() }).flatten().filter(|&v| v > 0).map(|v| crate::cuda::cudnn_version(v as u64));
    // SAFETY: as above.
    let cudart_version = graph.then(|| unsafe { api::cudnnGetCudartVersion() }).flatten().and_then(|v| i32::try_from(v).ok()).filter(|&v| v > 0);
    // Without the version, the names the dispatcher tries from its soname's major on.
    let major = dispatcher.as_deref().and_then(|d| real::file_name(d).strip_prefix("libcudnn.so.")).map(str::to_string);
    let loaded: Vec<CudnnLibrary> = cudnn
        .iter()
        .map(|path| {
            let own = real::file_name(path).starts_with("libcudnn.so");
            CudnnLibrary { path: path.to_string(), version: if own { version.clone() } else { library_version(path) } }
        })
        .collect();
    // Where the dispatcher's dlopen of a bare name looks: its own folder (RPATH $ORIGIN), then
    // LD_LIBRARY_PATH, then the system's folders.
    let library_path: Vec<String> =
        std::env::var("LD_LIBRARY_PATH").map(|p| p.split(':').filter(|p| !p.is_empty()).map(str::to_string).collect()).unwrap_or_default();
    const SYSTEM: [&str; 3] = ["/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"];
    let mut folders: Vec<String> = dispatcher.as_deref().and_then(|d| d.rsplit_once('/')).map(|(dir, _)| dir.to_string()).into_iter().collect();
    folders.extend(library_path.iter().cloned());
    folders.extend(SYSTEM.map(str::to_string));
    dedup(&mut folders);
    // The names the loaded dispatcher's own file holds (read only here, when a cuDNN failure
    // is explained), else the four every cuDNN 9 loads.
    let at = version.as_deref().or(major.as_deref());
    let named = dispatcher.as_deref().and_then(file_strings).map(|s| s.names).unwrap_or_default();
    let names: Vec<String> = if named.is_empty() { DISPATCHED.iter().map(|n| n.to_string()).collect() } else { named };
    let mut sublibraries: Vec<CudnnSublibrary> = names.iter().map(|name| sublibrary(name, at, &cudnn, &folders, None)).collect();
    // The engines and heuristics libcudnn_graph loads itself (a dlopen from its code: the
    // library path, then its RUNPATH's $ORIGIN, then the system's), as its own file names them,
    // else the three every cuDNN 9's loads; none where libcudnn_graph is nowhere.
    let graph_file = sublibraries.iter().find(|s| s.name == "libcudnn_graph").and_then(|g| g.loaded.clone().or_else(|| g.on_disk.clone()));
    if let Some(graph_file) = graph_file.filter(|_| scope == Scope::All) {
        let mut from_graph = library_path;
        from_graph.extend(graph_file.rsplit_once('/').map(|(dir, _)| dir.to_string()));
        from_graph.extend(SYSTEM.map(str::to_string));
        dedup(&mut from_graph);
        let named = file_strings(&graph_file).map(|s| s.names).unwrap_or_default();
        let names: Vec<String> = if named.is_empty() { CUDNN_GRAPH_LOADS.iter().map(|n| n.to_string()).collect() } else { named };
        sublibraries.extend(names.iter().map(|name| sublibrary(name, at, &cudnn, &from_graph, Some("libcudnn_graph"))));
    }
    Some(CudnnLibraries { dispatcher, version, cudart_version, loaded, sublibraries })
}

const ATTR_PLAN_WORKSPACE_SIZE: c_int = 402;
const ATTR_VARIANT_PACK_UNIQUE_IDS: c_int = 1000;
const ATTR_VARIANT_PACK_DATA_POINTERS: c_int = 1001;
const ATTR_VARIANT_PACK_WORKSPACE: c_int = 1003;
const TYPE_INT64: c_int = 3;
const TYPE_VOID_PTR: c_int = 6;

/// Reads up to `out.len()` elements of an attribute of 8-byte elements; the count cuDNN has.
fn attribute(desc: u64, name: c_int, kind: c_int, out: &mut [u64]) -> Option<usize> {
    let mut count = 0i64;
    // SAFETY: a backend descriptor the program passed to the hooked call; `out` holds
    // `out.len()` 8-byte elements (int64 and void* alike) and `count` is writable.
    let status = unsafe { api::cudnnBackendGetAttribute(desc as *mut c_void, name, kind, out.len() as i64, &mut count, out.as_mut_ptr() as *mut c_void) }?;
    (status == 0).then(|| usize::try_from(count).unwrap_or(0).min(out.len()))
}

/// A variant pack's tensors (unique id, device pointer) and workspace.
pub(crate) fn variant_pack(pack: u64) -> Option<VariantPack> {
    if !graph_loaded() {
        return None;
    }
    let mut uids = [0u64; MAX_TENSORS];
    let mut pointers = [0u64; MAX_TENSORS];
    let n = attribute(pack, ATTR_VARIANT_PACK_UNIQUE_IDS, TYPE_INT64, &mut uids)?;
    let m = attribute(pack, ATTR_VARIANT_PACK_DATA_POINTERS, TYPE_VOID_PTR, &mut pointers)?;
    let mut workspace = [0u64; 1];
    let workspace = attribute(pack, ATTR_VARIANT_PACK_WORKSPACE, TYPE_VOID_PTR, &mut workspace).filter(|&n| n == 1).map_or(0, |_| workspace[0]);
    Some(VariantPack { uids: uids.map(|u| u as i64), pointers, count: n.min(m), workspace })
}

/// An execution plan's workspace size (`CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE`).
pub(crate) fn plan_workspace(plan: u64) -> Option<u64> {
    if !graph_loaded() {
        return None;
    }
    let mut size = [0u64; 1];
    attribute(plan, ATTR_PLAN_WORKSPACE_SIZE, TYPE_INT64, &mut size).filter(|&n| n == 1).map(|_| size[0])
}
