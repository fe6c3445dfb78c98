//! Why a cuDNN call failed, from what the FFI layer found of the cuDNN libraries in the process:
//! a sublibrary the dispatcher could not load or loaded in another version, or a cuDNN built
//! for a newer CUDA runtime or driver than the process has. `None` where cuDNN's own files are
//! in order: the caller then names CUDA's causes (`init::explain`).

use super::{Device, Finding};
use crate::cuda;
use crate::state::{AllocationView, Freed};
use crate::trace::{hex, CudnnLibraries, FaultKind, InitCause, InitCauseKind};
use crate::validate::{containment, Containment};

/// Tensors one variant pack is read for (cudnn-frontend's graphs have tens).
pub const MAX_TENSORS: usize = 64;

/// A backend variant pack as cuDNN gives it back: each tensor's unique id with its device
/// pointer (the first `count`), and the workspace. Fixed-size: read at every execute.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VariantPack {
    pub uids: [i64; MAX_TENSORS],
    pub pointers: [u64; MAX_TENSORS],
    pub count: usize,
    pub workspace: u64,
}

impl VariantPack {
    #[cfg(test)]
    pub fn new(tensors: &[(i64, u64)], workspace: u64) -> Self {
        let mut pack = Self { uids: [0; MAX_TENSORS], pointers: [0; MAX_TENSORS], count: tensors.len().min(MAX_TENSORS), workspace };
        for (i, &(uid, ptr)) in tensors.iter().take(MAX_TENSORS).enumerate() {
            (pack.uids[i], pack.pointers[i]) = (uid, ptr);
        }
        pack
    }
}

/// What a checked pointer is, for the message.
#[derive(Clone, Copy)]
enum Role {
    Tensor(i64),
    Workspace,
    Argument(usize),
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Tensor(uid) => write!(f, "the variant pack's tensor uid {uid}"),
            Self::Workspace => write!(f, "the variant pack's workspace"),
            Self::Argument(n) => write!(f, "argument {n}"),
        }
    }
}

/// The checks of `cudnnBackendExecute`'s memory: every tensor pointer and the workspace inside
/// memory the program allocated and has not freed (`workspace_size`: the plan's requirement,
/// which the workspace's allocation must hold from the pointer on). Pointers the guard never
/// saw allocated (another allocator's, the driver's) are left alone unless the device calls
/// them host memory. The finding, and the freed allocation for `use_after_free`.
pub fn check_variant_pack(
    pack: &VariantPack,
    workspace_size: Option<u64>,
    allocations: AllocationView<'_>,
    device: &dyn Device,
) -> Option<(Finding, Option<Freed>)> {
    let count = pack.count.min(MAX_TENSORS);
    let tensors = pack.uids[..count].iter().zip(&pack.pointers[..count]).map(|(&uid, &ptr)| (Role::Tensor(uid), ptr, 1u64));
    let needed = workspace_size.unwrap_or(0);
    let workspace = (pack.workspace != 0 || needed > 0).then_some((Role::Workspace, pack.workspace, needed.max(1)));
    for (what, ptr, extent) in tensors.chain(workspace) {
        if ptr == 0 {
            if needed > 0 && matches!(what, Role::Workspace) {
                return Some((Finding::new(FaultKind::InvalidArgument, format!("{what} is NULL, but the execution plan needs {needed} bytes of it")), None));
            }
            continue;
        }
        if let Some(span) = allocations.span_containing(ptr) {
            if let Containment::Overruns(over) = containment(ptr, extent, span) {
                return Some((
                    Finding::new(
                        FaultKind::OutOfBounds,
                        format!(
                            "{what} at {} must hold {extent} bytes (the execution plan's workspace size), but its allocation \
                             (base {}, {} bytes) is {over} bytes short",
                            hex(ptr),
                            hex(span.base),
                            span.size
                        ),
                    ),
                    None,
                ));
            }
            continue;
        }
        if let Some(found) = freed(what, ptr, allocations) {
            return Some(found);
        }
        if let Some(t) = device.memory_type(ptr).filter(|t| matches!(t, cuda::MemoryType::Unregistered | cuda::MemoryType::Host)) {
            return Some((
                Finding::new(
                    FaultKind::HostPointer,
                    format!("{what} ({}) is not device memory (cudaPointerGetAttributes says {t:?}): a host buffer passed to a GPU call", hex(ptr)),
                ),
                None,
            ));
        }
    }
    None
}

/// A legacy call's pointer arguments (`pointers`: each argument's position, from 1, and value):
/// one in memory the program freed, where no live allocation holds it, is `use_after_free`.
/// Only that: a legacy call's pointers mix device data with host scalars and descriptors,
/// which nothing here tells apart.
pub fn check_freed(pointers: &[(usize, u64)], allocations: AllocationView<'_>) -> Option<(Finding, Option<Freed>)> {
    pointers.iter().filter(|&&(_, ptr)| ptr != 0 && allocations.span_containing(ptr).is_none()).find_map(|&(n, ptr)| freed(Role::Argument(n), ptr, allocations))
}

fn freed(what: Role, ptr: u64, allocations: AllocationView<'_>) -> Option<(Finding, Option<Freed>)> {
    let freed = allocations.freed_containing(ptr)?;
    Some((
        Finding::new(
            FaultKind::UseAfterFree,
            format!(
                "{what} ({}) lies in memory the program freed: the {} bytes at {} released by {} at call #{} (no live \
                 allocation holds it since)",
                hex(ptr),
                freed.size,
                hex(freed.base),
                freed.api,
                freed.seq
            ),
        ),
        Some(freed),
    ))
}

/// The sublibraries every cuDNN 9 dispatcher (`libcudnn.so.9`) loads itself, in its order, for
/// a dispatcher whose file does not name them (`cudnn_dispatched_names` reads the names a
/// loaded one holds: 9.26's adds `libcudnn_ext`, 9.10.2's has none); the engines and
/// heuristics are loaded by `libcudnn_graph` through its own RUNPATH.
pub const DISPATCHED: &[&str] = &["libcudnn_graph", "libcudnn_ops", "libcudnn_cnn", "libcudnn_adv"];

/// Which sublibraries are looked for, or can explain a failure: all of them, or only the
/// dispatcher's own (a cudnnCreate: libcudnn_graph loads its engines and heuristics at a backend
/// finalize, so one of them missing cannot make a handle fail).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    All,
    Dispatched,
}

/// The file names the dispatcher tries for `name`, in its order: the full version, major.minor,
/// major, then the bare name (`%s.%d.%d.%d`, `%s.%d.%d`, ...).
pub fn candidates(name: &str, version: Option<&str>) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(v) = version {
        let parts: Vec<&str> = v.split('.').collect();
        for n in (1..=parts.len().min(3)).rev() {
            out.push(format!("{name}.so.{}", parts[..n].join(".")));
        }
    }
    out.push(format!("{name}.so"));
    out
}

/// Whether cuDNN's sublibraries explain `status`: one loaded in another version than the
/// dispatcher's, one found nowhere the dispatcher looks; or a runtime or driver older than the
/// one cuDNN was built for (`runtime`, `driver`: the process's, as CUDA numbers them: 13020).
pub fn explain(status: i32, facts: &CudnnLibraries, runtime: Option<i32>, driver: Option<i32>) -> Option<InitCause> {
    explain_in(Scope::All, status, facts, runtime, driver)
}

/// `explain`, with only the sublibraries of `scope` as suspects.
pub fn explain_in(scope: Scope, status: i32, facts: &CudnnLibraries, runtime: Option<i32>, driver: Option<i32>) -> Option<InitCause> {
    let mut cause = sublibrary_cause(scope, status, facts).or_else(|| incompatible_cause(status, facts, runtime, driver))?;
    cause.runtime_version = runtime;
    cause.driver_version = driver;
    cause.driver_loadable = driver.is_some();
    cause.cudnn = Some(facts.clone());
    Some(cause)
}

fn sublibrary_cause(scope: Scope, status: i32, facts: &CudnnLibraries) -> Option<InitCause> {
    let dispatcher = facts.dispatcher.as_deref().unwrap_or("libcudnn.so");
    let version = facts.version.as_deref();
    let in_scope = |path: &str| scope == Scope::All || !facts.sublibraries.iter().any(|s| s.loaded_by.is_some() && s.loaded.as_deref() == Some(path));
    // Another version loaded beside the dispatcher: whatever the status, that is the story.
    if let Some(v) = version {
        let other: Vec<String> = facts
            .loaded
            .iter()
            .filter(|l| in_scope(&l.path))
            .filter_map(|l| l.version.as_deref().filter(|lv| *lv != v).map(|lv| format!("{} is {lv}", l.path)))
            .collect();
        if !other.is_empty() {
            return Some(InitCause::new(
                InitCauseKind::CudnnSublibrary,
                format!(
                    "cuDNN's libraries are of different versions: the dispatcher {dispatcher} is {v}, but {}. A second \
                     cuDNN (a system install, another wheel, LD_LIBRARY_PATH) shadows part of this one: remove it from \
                     the library path, or install one cuDNN whole",
                    other.join(", ")
                ),
            ));
        }
    }
    if !matches!(
        status,
        cuda::CUDNN_NOT_INITIALIZED | cuda::CUDNN_SUBLIBRARY_VERSION_MISMATCH | cuda::CUDNN_SUBLIBRARY_LOADING_FAILED | cuda::CUDNN_SUBLIBRARY_UNAVAILABLE
    ) {
        return None;
    }
    let missing: Vec<_> =
        facts.sublibraries.iter().filter(|s| s.loaded.is_none() && s.on_disk.is_none() && (scope == Scope::All || s.loaded_by.is_none())).collect();
    if missing.is_empty() {
        return None;
    }
    // Each loader's missing files: the dispatcher's, then libcudnn_graph's (their folders differ).
    let mut parts = Vec::new();
    for by in [None, Some("libcudnn_graph")] {
        let of: Vec<_> = missing.iter().filter(|s| s.loaded_by.as_deref() == by).collect();
        let Some(one) = of.first() else { continue };
        let names: Vec<&str> = of.iter().map(|s| s.name.as_str()).collect();
        let who = match by {
            None => format!("the dispatcher {dispatcher}"),
            Some(lib) => format!("{lib} (which loads cuDNN's engines and heuristics itself, at a backend finalize)"),
        };
        parts.push(format!(
            "{who} could not load {}: it looked for {} in {}, and none exists",
            names.join(", "),
            one.looked_for.join(", "),
            if one.folders.is_empty() { "the loader's default folders".to_string() } else { one.folders.join(", ") }
        ));
    }
    Some(InitCause::new(
        InitCauseKind::CudnnSublibrary,
        format!(
            "{}. cuDNN 9 loads its sublibraries at run time (ldd shows none of them): reinstall cuDNN whole (pip install \
             --force-reinstall nvidia-cudnn-cu13), or put the folder that holds them on LD_LIBRARY_PATH",
            parts.join("; ")
        ),
    ))
}

fn incompatible_cause(status: i32, facts: &CudnnLibraries, runtime: Option<i32>, driver: Option<i32>) -> Option<InitCause> {
    if !matches!(status, cuda::CUDNN_INCOMPATIBLE_CUDART | cuda::CUDNN_INCOMPATIBLE_CUDA_DRIVER) {
        return None;
    }
    let built = facts.cudart_version;
    let v = |x: Option<i32>| x.map_or_else(|| "unknown".to_string(), |x| format!("CUDA {}.{}", x / 1000, x % 1000 / 10));
    let (whose, theirs) = if status == cuda::CUDNN_INCOMPATIBLE_CUDART { ("runtime", runtime) } else { ("driver", driver) };
    Some(InitCause::new(
        InitCauseKind::CudnnIncompatible,
        format!(
            "cuDNN{} was built for {} (cudnnGetCudartVersion), but the process's CUDA {whose} is {} (runtime {}, \
             driver {}): install the cuDNN built for this CUDA (nvidia-cudnn-cu12 or -cu13), or a newer {whose}",
            facts.version.as_deref().map(|v| format!(" {v}")).unwrap_or_default(),
            v(built),
            v(theirs),
            v(runtime),
            v(driver)
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{CudnnLibrary, CudnnSublibrary};

    fn sub(name: &str, loaded: Option<&str>, version: Option<&str>, on_disk: Option<&str>) -> CudnnSublibrary {
        CudnnSublibrary {
            name: name.into(),
            looked_for: candidates(name, Some("9.26.0")),
            folders: vec!["/w/cudnn/lib".into()],
            loaded: loaded.map(Into::into),
            version: version.map(Into::into),
            on_disk: on_disk.map(Into::into),
            loaded_by: None,
        }
    }

    fn healthy() -> CudnnLibraries {
        CudnnLibraries {
            dispatcher: Some("/w/cudnn/lib/libcudnn.so.9".into()),
            version: Some("9.26.0".into()),
            cudart_version: Some(13040),
            loaded: vec![
                CudnnLibrary { path: "/w/cudnn/lib/libcudnn.so.9".into(), version: Some("9.26.0".into()) },
                CudnnLibrary { path: "/w/cudnn/lib/libcudnn_graph.so.9".into(), version: Some("9.26.0".into()) },
            ],
            sublibraries: vec![
                sub("libcudnn_graph", Some("/w/cudnn/lib/libcudnn_graph.so.9"), Some("9.26.0"), None),
                sub("libcudnn_cnn", None, None, Some("/w/cudnn/lib/libcudnn_cnn.so.9")),
            ],
        }
    }

    #[test]
    fn a_variant_pack_in_live_memory_passes_and_each_fault_of_it_is_named() {
        use crate::check::model::ModelDevice;
        use crate::state::{Allocations, ThreadMemo};
        let (device, allocations, memo) = (ModelDevice::default(), Allocations::default(), ThreadMemo::default());
        device.put(&allocations, 0x1000, vec![0; 64]);
        device.put(&allocations, 0x2000, vec![0; 256]);
        device.put(&allocations, 0x3000, vec![0; 64]);
        let view = || AllocationView::new(&allocations, &memo);
        let pack = VariantPack::new(&[(1, 0x1000), (2, 0x3000)], 0x2000);
        assert_eq!(check_variant_pack(&pack, Some(256), view(), &device), None);
        // Host memory where device memory belongs.
        assert_eq!(
            check_variant_pack(&VariantPack::new(&[(1, 0x7000_0000)], 0x2000), Some(256), view(), &device).map(|f| f.0.kind),
            Some(FaultKind::HostPointer)
        );
        // The workspace short of the plan's size.
        let (f, _) = check_variant_pack(&pack, Some(512), view(), &device).expect("short workspace");
        assert_eq!(f.kind, FaultKind::OutOfBounds);
        assert!(f.message.contains("must hold 512 bytes") && f.message.contains("256 bytes short"), "{}", f.message);
        // No workspace where the plan needs one.
        let (f, _) = check_variant_pack(&VariantPack::new(&[(1, 0x1000)], 0), Some(256), view(), &device).expect("no workspace");
        assert_eq!(f.kind, FaultKind::InvalidArgument);
        assert!(check_variant_pack(&VariantPack::new(&[(1, 0x1000)], 0), Some(0), view(), &device).is_none(), "a plan that needs none");
        // A tensor freed since.
        let freed = allocations.containing(0x3000).expect("live");
        allocations.remove(0x3000);
        allocations.note_freed(freed, 9, "cudaFree");
        let (f, by) = check_variant_pack(&pack, Some(256), view(), &device).expect("freed");
        assert_eq!((f.kind, by.map(|b| (b.seq, b.api))), (FaultKind::UseAfterFree, Some((9, "cudaFree"))));
        assert!(f.message.starts_with("the variant pack's tensor uid 2 (0x3000) lies in memory the program freed"), "{}", f.message);
        // The legacy calls: only memory freed since is named.
        let (f, _) = check_freed(&[(2, 0x7000_0000), (13, 0x3010)], view()).expect("freed argument");
        assert!(f.message.starts_with("argument 13 (0x3010)"), "{}", f.message);
        assert!(check_freed(&[(2, 0x7000_0000), (4, 0x1000)], view()).is_none());
    }

    #[test]
    fn the_dispatcher_tries_full_version_then_major_minor_then_major_then_the_bare_name() {
        assert_eq!(candidates("libcudnn_cnn", Some("9.26.0")), ["libcudnn_cnn.so.9.26.0", "libcudnn_cnn.so.9.26", "libcudnn_cnn.so.9", "libcudnn_cnn.so"]);
        assert_eq!(candidates("libcudnn_cnn", None), ["libcudnn_cnn.so"]);
    }

    #[test]
    fn healthy_libraries_explain_nothing_so_cudas_causes_are_named() {
        for status in [1001, 1008, 3005, 5000] {
            let facts = CudnnLibraries { cudart_version: None, ..healthy() };
            assert_eq!(explain(status, &facts, Some(13020), Some(13020)).filter(|c| c.kind != InitCauseKind::CudnnIncompatible), None, "{status}");
        }
        assert_eq!(explain(1001, &healthy(), None, None), None);
    }

    #[test]
    fn a_sublibrary_found_nowhere_is_named_with_the_files_and_folders_looked_in() {
        let mut facts = healthy();
        facts.sublibraries[1].on_disk = None;
        let c = explain(1008, &facts, None, None).expect("cause");
        assert_eq!(c.kind, InitCauseKind::CudnnSublibrary);
        assert!(
            c.message.contains(
                "could not load libcudnn_cnn: it looked for libcudnn_cnn.so.9.26.0, libcudnn_cnn.so.9.26, libcudnn_cnn.so.9, libcudnn_cnn.so in /w/cudnn/lib"
            ),
            "{}",
            c.message
        );
        assert_eq!(c.cudnn.as_ref(), Some(&facts));
        // Not a loading status: not the sublibrary's doing.
        assert_eq!(explain(2000, &facts, None, None), None);
    }

    #[test]
    fn a_sublibrary_of_another_version_is_named_with_both_versions_whatever_the_status() {
        let mut facts = healthy();
        facts.loaded.push(CudnnLibrary { path: "/usr/lib/libcudnn_cnn.so.9".into(), version: Some("9.1.0".into()) });
        for status in [1002, 1001, 5000] {
            let c = explain(status, &facts, None, None).expect("cause");
            assert_eq!(c.kind, InitCauseKind::CudnnSublibrary);
            assert!(c.message.contains("the dispatcher /w/cudnn/lib/libcudnn.so.9 is 9.26.0, but /usr/lib/libcudnn_cnn.so.9 is 9.1.0"), "{}", c.message);
        }
    }

    #[test]
    fn an_engine_library_libcudnn_graph_cannot_find_is_named_at_a_finalize_but_cannot_explain_a_failed_cudnn_create() {
        let mut facts = healthy();
        let engines = CudnnSublibrary {
            folders: vec!["/env/lib".into(), "/w/cudnn/lib".into()],
            loaded_by: Some("libcudnn_graph".into()),
            ..sub("libcudnn_engines_precompiled", None, None, None)
        };
        facts.sublibraries.push(engines);
        let c = explain(1008, &facts, None, None).expect("cause");
        assert!(
            c.message.starts_with(
                "libcudnn_graph (which loads cuDNN's engines and heuristics itself, at a backend finalize) could not load \
                 libcudnn_engines_precompiled: it looked for libcudnn_engines_precompiled.so.9.26.0, libcudnn_engines_precompiled.so.9.26, \
                 libcudnn_engines_precompiled.so.9, libcudnn_engines_precompiled.so in /env/lib, /w/cudnn/lib"
            ),
            "{}",
            c.message
        );
        // A cudnnCreate that failed (for lack of memory, say) is not its doing.
        assert_eq!(explain_in(Scope::Dispatched, 1001, &facts, None, None), None);
        // Of another release, loaded: both releases named at a finalize, not at cudnnCreate.
        let mut facts = healthy();
        let path = "/w/cudnn/lib/libcudnn_engines_precompiled.so.9";
        facts.loaded.push(CudnnLibrary { path: path.into(), version: Some("9.1.0".into()) });
        facts
            .sublibraries
            .push(CudnnSublibrary { loaded_by: Some("libcudnn_graph".into()), ..sub("libcudnn_engines_precompiled", Some(path), Some("9.1.0"), None) });
        let c = explain(1002, &facts, None, None).expect("cause");
        assert!(
            c.message.contains("the dispatcher /w/cudnn/lib/libcudnn.so.9 is 9.26.0, but /w/cudnn/lib/libcudnn_engines_precompiled.so.9 is 9.1.0"),
            "{}",
            c.message
        );
        assert_eq!(explain_in(Scope::Dispatched, 1001, &facts, None, None), None);
    }

    #[test]
    fn an_incompatible_runtime_compares_what_cudnn_was_built_for_with_the_runtime_and_driver() {
        let c = explain(3006, &healthy(), Some(12080), Some(12080)).expect("cause");
        assert_eq!((c.kind, c.runtime_version, c.driver_version), (InitCauseKind::CudnnIncompatible, Some(12080), Some(12080)));
        assert!(c.message.contains("built for CUDA 13.4") && c.message.contains("CUDA runtime is CUDA 12.8"), "{}", c.message);
        let c = explain(3005, &healthy(), Some(13020), Some(12020)).expect("cause");
        assert!(c.message.contains("CUDA driver is CUDA 12.2"), "{}", c.message);
    }
}
