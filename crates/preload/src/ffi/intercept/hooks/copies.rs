//! Guarded copies of the hooks for libraries reached through `dlsym` on a handle (two CUDA
//! versions in one process, a framework's vendored copy) and through the driver's entry-point
//! lookups: each copy forwards to the very function its library's lookup found.

use super::*;

/// Copies of one library the guard tells apart when they are reached through `dlsym` (two
/// CUDA versions in one process, a framework's vendored copy beside the system's), each library
/// apart: an XLA process holds the runtime, cuBLAS, cuBLASLt and the driver, and can still
/// load 7 more copies of each. A copy's slot is freed when `dlclose` unmaps it.
pub(super) const COPIES: usize = 8;

/// Each library's copies, by load address (0: free).
static COPY_BASES: [[AtomicUsize; COPIES]; Library::ALL.len()] = [const { [const { AtomicUsize::new(0) }; COPIES] }; Library::ALL.len()];

/// For each hooked function and copy of its library, the real function `dlsym` found there.
pub(super) static COPY_REALS: [[AtomicPtr<c_void>; COPIES]; HOOK_COUNT] = [const { [const { AtomicPtr::new(std::ptr::null_mut()) }; COPIES] }; HOOK_COUNT];

static COPIES_FULL_WARNED: AtomicBool = AtomicBool::new(false);

/// The copy number of `library` loaded at `base`, claiming a free one the first time.
fn copy_of(library: Library, base: usize) -> Option<usize> {
    let slots = COPY_BASES.get(library.index())?;
    // The copy already held first: a slot freed before it must not take it a second time.
    if let Some(held) = slots.iter().position(|slot| slot.load(Ordering::Acquire) == base) {
        return Some(held);
    }
    for (i, slot) in slots.iter().enumerate() {
        match slot.compare_exchange(0, base, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Some(i),
            Err(held) if held == base => return Some(i),
            Err(_) => {}
        }
    }
    None
}

/// After `dlclose` unmapped something: the slots of copies no longer loaded are freed (their
/// functions forgotten first, so a copy claimed again starts empty).
pub(crate) fn forget_unloaded_copies() {
    for library in Library::ALL {
        let Some(slots) = COPY_BASES.get(library.index()) else { continue };
        for (copy, slot) in slots.iter().enumerate() {
            let base = slot.load(Ordering::Acquire);
            if base == 0 || still_loaded(base, library) {
                continue;
            }
            for (reals, hook) in COPY_REALS.iter().zip(Hook::ALL) {
                if hook.library() == library {
                    if let Some(real) = reals.get(copy) {
                        real.store(std::ptr::null_mut(), Ordering::Release);
                    }
                }
            }
            let _ = slot.compare_exchange(base, 0, Ordering::AcqRel, Ordering::Acquire);
        }
    }
}

/// Whether a copy of `library` is still loaded at `base`.
fn still_loaded(base: usize, library: Library) -> bool {
    matches!(crate::ffi::intercept::real::object_of(base as *const c_void), Some((at, file)) if at == base && is_library_file(file, library))
}

/// Whether `file` is a copy of `library` (under any file name that starts like it), and not
/// the guard (whose name starts like cuBLAS's).
fn is_library_file(file: &str, library: Library) -> bool {
    let Some(rest) = file.strip_prefix(library.stem()) else { return false };
    // cuDNN's sublibraries (libcudnn_graph.so.9, ...) define the dispatcher's names too, and
    // are reached through it: only the dispatcher's own file (or a vendored copy) is cuDNN's.
    if library == Library::Cudnn && !(rest.starts_with('.') || rest.starts_with('-')) {
        return false;
    }
    !file.starts_with("libcublasguard")
}

/// The load address of the object holding `found`, when it is a copy of `library` and not this
/// library or another copy of the guard.
fn in_library(found: *mut c_void, library: Library) -> Option<usize> {
    let (base, file) = crate::ffi::intercept::real::object_of(found)?;
    (is_library_file(file, library) && !crate::ffi::intercept::real::is_own(found)).then_some(base)
}

/// What `dlsym` on a library handle returns for `name`, given what libc `found`: a guarded copy
/// of the hook when `name` is hooked and `found` lies in that function's CUDA library (under any
/// file name that starts like it, so a vendored copy counts); `found` itself otherwise.
pub(crate) fn guarded_copy(name: &std::ffi::CStr, found: *mut c_void) -> *mut c_void {
    let name = name.to_bytes();
    // One of the driver's entry points: the guard's wrapper of it stands for it.
    if let Some((wrapper, library)) = crate::ffi::intercept::entry_points::wrapper_for(name) {
        return if in_library(found, library).is_some() { wrapper } else { found };
    }
    let Some(index) = HOOK_NAMES.iter().position(|n| n.as_bytes() == name) else { return found };
    let hook = Hook::ALL[index];
    let library = hook.library();
    let Some(base) = in_library(found, library) else { return found };
    let Some(copy) = copy_of(library, base) else {
        if !COPIES_FULL_WARNED.load(Ordering::Relaxed) {
            defer_cancel(|| {
                lifecycle::warn_once(
                    &COPIES_FULL_WARNED,
                    &format!(
                        "cublasguard: more than {COPIES} copies of {} loaded at once, reached through dlsym; the functions of \
                         further copies are not guarded",
                        library.stem()
                    ),
                )
            });
        }
        return found;
    };
    let Some(real) = COPY_REALS.get(index).and_then(|reals| reals.get(copy)) else { return found };
    real.store(found, Ordering::Release);
    hook.copy_fn(copy)
}

/// What a driver entry-point lookup of `symbol` returns, given what it `found`: the guarded copy
/// of whichever hooked variant of `symbol` (`_v2`, `_ptsz`, ...) `found` is, checked against
/// the library's own symbol of that name, so an ABI variant the guard does not wrap (the 32-bit
/// `cuMemAlloc` of a version before 3.2) is never mistaken for one it does. The lookup itself
/// is among them: a static runtime asks `cuGetProcAddress` for "cuGetProcAddress" and may look
/// up everything else through what it got, which must be the guard's wrapper of the right
/// version, or every function found through it would pass the guard by.
pub(crate) fn guarded_entry(symbol: &std::ffi::CStr, found: *mut c_void) -> *mut c_void {
    let symbol = symbol.to_bytes();
    let names = HOOK_NAMES.iter().chain(crate::ffi::intercept::entry_points::DRIVER_LOOKUPS);
    let variants = names.filter(|n| {
        let n = n.as_bytes();
        n.starts_with(symbol) && {
            let rest = &n[symbol.len()..];
            rest.is_empty() || rest.starts_with(b"_v") || rest.starts_with(b"_ptsz")
        }
    });
    for name in variants {
        let Ok(cname) = std::ffi::CString::new(*name) else { continue };
        if crate::ffi::intercept::real::defines(found, &cname) {
            return guarded_copy(&cname, found);
        }
    }
    found
}
