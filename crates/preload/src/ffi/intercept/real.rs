//! Finding the real CUDA functions behind our hooks.
//!
//! `dlsym(RTLD_NEXT)` finds libraries in the global scope only; Python and PyTorch load CUDA
//! with RTLD_LOCAL, where it finds nothing. So, in order: RTLD_NEXT; then every known soname
//! of the library, already loaded (`dlopen(RTLD_NOLOAD)`), with `dlvsym` on NVIDIA's symbol
//! version and plain `dlsym`; then any loaded object whose file name starts like the library
//! (`dl_iterate_phdr`); and last, any loaded object in the loader's order, whatever it is called
//! (a wheel may bundle a renamed copy, `libcublas-5e3a1f0c.so.12`, loaded with RTLD_LOCAL: once
//! the loader bound the program's references to the guard, the guard must find the function
//! the program would have called). An address inside this library is never accepted.
//!
//! A cached pointer dies with its library: the guard's `dlclose` notices when an object was
//! unmapped, and every real function is then looked up again at its next call.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

/// Bumped whenever `dlclose` unmapped an object: cached real functions may point into it.
static UNLOADS: AtomicU64 = AtomicU64::new(0);

/// `RealSymbol::found_at` before its first lookup: a count of unloads never reached.
const NEVER_FOUND: u64 = u64::MAX;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Library {
    Cublas,
    CublasLt,
    Cudart,
    Driver,
    /// cuDNN's dispatcher, `libcudnn.so.9` (its sublibraries define the same names under their
    /// own file names, and are not it).
    Cudnn,
}

impl Library {
    /// Every library, in the order of `index`.
    pub const ALL: [Library; 5] = [Self::Cublas, Self::CublasLt, Self::Cudart, Self::Driver, Self::Cudnn];

    /// The library's place in `ALL`.
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn sonames(self) -> &'static [&'static str] {
        match self {
            Self::Cublas => &["libcublas.so.13", "libcublas.so.12", "libcublas.so.11"],
            Self::CublasLt => &["libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11"],
            Self::Cudart => &["libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"],
            Self::Driver => &["libcuda.so.1"],
            Self::Cudnn => &["libcudnn.so.9", "libcudnn.so.8"],
        }
    }

    /// The file-name prefix shared by every build of the library.
    pub fn prefix(self) -> &'static str {
        match self {
            Self::Cublas => "libcublas.so",
            Self::CublasLt => "libcublasLt.so",
            Self::Cudart => "libcudart.so",
            Self::Driver => "libcuda.so",
            Self::Cudnn => "libcudnn.so",
        }
    }

    /// What every file name of the library starts with, vendored copies included
    /// (`libcublas-5e3a1f0c.so.12`).
    pub fn stem(self) -> &'static str {
        let prefix = self.prefix();
        prefix.strip_suffix(".so").unwrap_or(prefix)
    }

    /// What a hook returns when the real function cannot be found: the library's
    /// "not initialised" status.
    pub fn not_initialised(self) -> c_int {
        match self {
            Self::Cublas | Self::CublasLt => crate::cuda::CUBLAS_NOT_INITIALIZED,
            Self::Cudart => crate::cuda::CUDA_ERROR_INITIALIZATION,
            Self::Driver => 3, // CUDA_ERROR_NOT_INITIALIZED
            Self::Cudnn => crate::cuda::CUDNN_NOT_INITIALIZED,
        }
    }
}

/// One real function, resolved on first use and cached.
pub struct RealSymbol {
    name: &'static str, // NUL-terminated
    library: Library,
    ptr: AtomicPtr<c_void>,
    /// `UNLOADS` when `ptr` was found; `NEVER_FOUND` before. Stored after `ptr`, so a call that
    /// finds it current finds `ptr` set: one comparison, no test of the pointer as well.
    found_at: AtomicU64,
}

impl RealSymbol {
    pub const fn new(name: &'static str, library: Library) -> Self {
        Self { name, library, ptr: AtomicPtr::new(null_mut()), found_at: AtomicU64::new(NEVER_FOUND) }
    }

    #[cfg(test)]
    pub fn name(&self) -> &'static str {
        self.name.trim_end_matches('\0')
    }

    /// The function as type `F` (an `unsafe extern "C" fn` type), if it can be found.
    ///
    /// # Safety
    /// `F` must be the function's true C signature.
    #[inline(always)]
    pub unsafe fn get<F: Copy>(&self) -> Option<F> {
        const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<*mut c_void>()) };
        let unloads = UNLOADS.load(Ordering::Acquire);
        if self.found_at.load(Ordering::Acquire) == unloads {
            let p = self.ptr.load(Ordering::Acquire);
            // SAFETY: as below; `p` is not null: `find` stores a found function's address
            // before the `found_at` read here, and nothing stores a null one.
            return Some(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) });
        }
        let p = self.find(unloads);
        if p.is_null() {
            return None; // not cached: the library may be loaded later
        }
        // SAFETY: `F` is pointer-sized (checked above) and, by the caller's contract, the
        // function's signature; `p` is the function's address.
        Some(unsafe { std::mem::transmute_copy::<*mut c_void, F>(&p) })
    }

    /// `get`'s first lookup, and its lookup again after a library was unloaded: cached when
    /// found (as of `unloads`).
    #[cold]
    #[inline(never)]
    fn find(&self, unloads: u64) -> *mut c_void {
        let p = resolve(self.name, self.library);
        if !p.is_null() {
            self.ptr.store(p, Ordering::Release);
            self.found_at.store(unloads, Ordering::Release);
        }
        p
    }
}

/// The base address of this library (or executable), to refuse resolving to ourselves.
fn own_base() -> *mut c_void {
    static MARKER: u8 = 0;
    object_base(&MARKER as *const u8 as *const c_void)
}

fn object_base(addr: *const c_void) -> *mut c_void {
    // SAFETY: Dl_info is plain C data (pointers), for which all zeroes is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads loader tables; info is a valid out-parameter.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 {
        return null_mut();
    }
    info.dli_fbase
}

/// The load address and file name (without its folder) of the object that holds `addr`.
pub fn object_of(addr: *const c_void) -> Option<(usize, &'static str)> {
    object_path(addr).map(|(base, path)| (base, file_name(path)))
}

/// The load address and path of the object that holds `addr`.
pub(crate) fn object_path(addr: *const c_void) -> Option<(usize, &'static str)> {
    // SAFETY: Dl_info is plain C data (pointers), for which all zeroes is a valid value.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads loader tables; info is a valid out-parameter.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: the loader's NUL-terminated file name, which lives as long as the object.
    let path = unsafe { CStr::from_ptr(info.dli_fname) }.to_str().ok()?;
    Some((info.dli_fbase as usize, path))
}

/// Whether `addr` is exactly the object's own definition of `name` (the object that holds
/// `addr`, looked up without loading anything).
pub fn defines(addr: *mut c_void, name: &CStr) -> bool {
    let Some((_, path)) = object_path(addr) else { return false };
    crate::ffi::intercept::loader_gate::through(|| from_loaded(path, name, None) == addr)
}

/// Whether `addr` is inside this library.
pub fn is_own(addr: *const c_void) -> bool {
    object_base(addr) == own_base()
}

/// A real function: found, and neither in this library nor in another copy of the guard (which
/// `RTLD_NEXT` finds first when two are preloaded).
fn acceptable(p: *mut c_void) -> bool {
    !p.is_null() && object_base(p) != own_base() && !is_guard(p)
}

/// Whether `addr` lies in a copy of the guard: an object that defines the guard's marker.
fn is_guard(addr: *mut c_void) -> bool {
    let Some((base, path)) = object_path(addr) else { return false };
    let marker = from_loaded(path, c"cublasguard_instance", None);
    !marker.is_null() && object_base(marker) as usize == base
}

fn resolve(name: &'static str, library: Library) -> *mut c_void {
    crate::ffi::intercept::loader_gate::through(|| resolve_now(name, library))
}

fn resolve_now(name: &'static str, library: Library) -> *mut c_void {
    let Ok(cname) = CStr::from_bytes_with_nul(name.as_bytes()) else { return null_mut() };
    // SAFETY: dlsym with a valid NUL-terminated name.
    let next = unsafe { crate::ffi::intercept::dl::real_dlsym(libc::RTLD_NEXT, cname.as_ptr()) };
    if acceptable(next) {
        return next;
    }
    for soname in library.sonames() {
        let p = from_loaded(soname, cname, Some(soname));
        if acceptable(p) {
            return p;
        }
    }
    for path in loaded_objects_with_prefix(library.prefix()) {
        let p = from_loaded(&path, cname, None);
        if acceptable(p) {
            return p;
        }
    }
    // Any other object, in the loader's order: a vendored copy under another name.
    for (path, _) in loaded_objects() {
        let p = from_loaded(&path, cname, None);
        if acceptable(p) {
            return p;
        }
    }
    null_mut()
}

/// How many objects the loader has unmapped so far (`dlpi_subs`).
fn loader_unloads() -> u64 {
    unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, size: usize, data: *mut c_void) -> c_int {
        if size >= std::mem::offset_of!(libc::dl_phdr_info, dlpi_subs) + std::mem::size_of::<u64>() {
            // SAFETY: the loader passes a valid info of `size` bytes, which holds dlpi_subs;
            // `data` is the u64 below.
            unsafe { *(data as *mut u64) = (*info).dlpi_subs };
        }
        1 // the counters are the same in every entry: one is enough
    }
    let mut subs = 0u64;
    // SAFETY: `visit` matches the callback type and only writes `subs`.
    crate::ffi::intercept::loader_gate::through(|| unsafe { libc::dl_iterate_phdr(Some(visit), &mut subs as *mut u64 as *mut c_void) });
    subs
}

/// "C-unwind": a library's destructor may end the thread (`pthread_exit`), which must pass.
type Dlclose = unsafe extern "C-unwind" fn(*mut c_void) -> c_int;
static REAL_DLCLOSE: AtomicPtr<c_void> = AtomicPtr::new(null_mut());

/// `dlclose`, passed through; when it unmapped an object, every cached real function is looked
/// up again at its next call (it may have pointed into the object that is gone), and the
/// guarded copies of a library no longer loaded are freed for the next one.
///
/// # Safety
/// Called by C code with a handle from `dlopen`.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C-unwind" fn dlclose(handle: *mut c_void) -> c_int {
    let mut real = REAL_DLCLOSE.load(Ordering::Acquire);
    if real.is_null() {
        // SAFETY: dlsym with a valid name; RTLD_NEXT from this library finds libc's dlclose.
        real = unsafe { crate::ffi::intercept::dl::real_dlsym(libc::RTLD_NEXT, c"dlclose".as_ptr()) };
        if real.is_null() {
            return -1;
        }
        REAL_DLCLOSE.store(real, Ordering::Release);
    }
    // SAFETY: the true signature of dlclose.
    let real: Dlclose = unsafe { std::mem::transmute::<*mut c_void, Dlclose>(real) };
    let before = loader_unloads();
    // SAFETY: the caller's handle, passed on unchanged.
    let status = unsafe { real(handle) };
    if loader_unloads() != before {
        UNLOADS.fetch_add(1, Ordering::AcqRel);
        crate::ffi::intercept::hooks::forget_unloaded_copies();
    }
    status
}

/// The address of `name` in the loaded object at `path` (a function or a datum); null when it
/// is not loaded or does not define it. Never loads anything.
pub(crate) fn loaded_symbol(path: &str, name: &CStr) -> *mut c_void {
    crate::ffi::intercept::loader_gate::through(|| from_loaded(path, name, None))
}

/// Looks `name` up in an already loaded object, never loading anything.
fn from_loaded(file: &str, name: &CStr, version: Option<&str>) -> *mut c_void {
    let Ok(cfile) = CString::new(file) else { return null_mut() };
    // SAFETY: RTLD_NOLOAD only returns a handle to an object that is already mapped; the
    // extra reference it takes is dropped by dlclose below, and the object stays mapped
    // because the program still holds its own reference.
    unsafe {
        let handle = libc::dlopen(cfile.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        if handle.is_null() {
            return null_mut();
        }
        let mut p = null_mut();
        if let Some(v) = version.and_then(|v| CString::new(v).ok()) {
            p = crate::ffi::intercept::dl::real_dlvsym(handle, name.as_ptr(), v.as_ptr());
        }
        if p.is_null() {
            p = crate::ffi::intercept::dl::real_dlsym(handle, name.as_ptr());
        }
        libc::dlclose(handle);
        p
    }
}

/// Paths of loaded objects whose file name starts with `prefix` (e.g. "libcublas.so").
pub fn loaded_objects_with_prefix(prefix: &str) -> Vec<String> {
    loaded_objects().into_iter().filter(|(path, _)| file_name(path).starts_with(prefix)).map(|(path, _)| path).collect()
}

pub fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Every loaded object's path and `DT_SONAME` (when it has one).
pub fn loaded_objects() -> Vec<(String, Option<String>)> {
    crate::ffi::intercept::loader_gate::through(loaded_objects_now)
}

fn loaded_objects_now() -> Vec<(String, Option<String>)> {
    let mut out: Vec<(String, Option<String>)> = Vec::new();
    unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
        // SAFETY: the loader passes a valid info for the duration of the callback, and
        // `data` is the Vec handed to dl_iterate_phdr below.
        let (out, info) = unsafe { (&mut *(data as *mut Vec<(String, Option<String>)>), &*info) };
        if info.dlpi_name.is_null() {
            return 0;
        }
        // SAFETY: a loaded object's name is a NUL-terminated string the loader keeps.
        let path = unsafe { CStr::from_ptr(info.dlpi_name) }.to_string_lossy().into_owned();
        if !path.is_empty() {
            // SAFETY: `info` describes a loaded object, mapped while the callback runs.
            out.push((path, unsafe { soname_of(info) }));
        }
        0
    }
    // SAFETY: `visit` matches the callback type and only touches `out`.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut out as *mut _ as *mut c_void) };
    out
}

/// An ELF64 dynamic-section entry (`Elf64_Dyn`).
#[repr(C)]
struct DynamicEntry {
    tag: i64,
    value: u64,
}

const DT_NULL: i64 = 0;
const DT_STRTAB: i64 = 5;
const DT_SONAME: i64 = 14;

/// Reads DT_SONAME from an object's mapped dynamic section.
///
/// # Safety
/// `info` describes an object that stays mapped during the call (inside dl_iterate_phdr's
/// callback): its program headers, dynamic section and string table are readable.
unsafe fn soname_of(info: &libc::dl_phdr_info) -> Option<String> {
    let base = info.dlpi_addr as usize;
    // SAFETY: the object's program headers, `dlpi_phnum` of them (the contract).
    let headers = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
    let dynamic = headers.iter().find(|h| h.p_type == libc::PT_DYNAMIC)?;
    let mut entry = (base + dynamic.p_vaddr as usize) as *const DynamicEntry;
    let (mut strtab, mut soname) = (None, None);
    // SAFETY: the mapped dynamic section, read up to its DT_NULL terminator (the contract).
    while let Some(DynamicEntry { tag, value }) = Some(unsafe { entry.read() }).filter(|e| e.tag != DT_NULL) {
        match tag {
            DT_STRTAB => strtab = Some(value as usize),
            DT_SONAME => soname = Some(value as usize),
            _ => {}
        }
        // SAFETY: not past the terminator, which has not been read yet.
        entry = unsafe { entry.add(1) };
    }
    let mut table = strtab?;
    // glibc relocates these entries in place for most objects; for the rest, add the base.
    if table < base {
        table += base;
    }
    // SAFETY: DT_SONAME is an offset into the mapped string table, to a NUL-terminated name.
    let name = unsafe { CStr::from_ptr((table + soname?) as *const c_char) };
    Some(name.to_string_lossy().into_owned())
}
