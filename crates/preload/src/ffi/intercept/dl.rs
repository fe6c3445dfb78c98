//! `dlsym` and `dlvsym`, interposed: JAX/XLA and TensorFlow `dlopen` cuBLAS and the runtime
//! with RTLD_LOCAL and take every function with `dlsym(handle, name)`, which never returns a
//! preloaded definition. So a lookup of a hooked name on a CUDA library's handle gets a guarded
//! copy of the hook that forwards to exactly the function it found (`hooks::guarded_copy`): two
//! copies of a library in one process each keep their own real functions.
//!
//! Everything else returns what it returns without the guard:
//! - `RTLD_NEXT` and `RTLD_DEFAULT` lookups jump straight to libc's function (x86_64: the
//!   exported functions are naked trampolines), so libc still sees the caller's own return
//!   address, which decides what "next" means and which scope "default" searches. A hooked name
//!   looked up with `RTLD_DEFAULT` finds the guard's export anyway: preloaded libraries come
//!   first in the global scope.
//! - A lookup that fails, or finds a name the guard does not hook, or finds it outside a CUDA
//!   library, is returned untouched; nothing here allocates or takes a lock, and a failed
//!   lookup never falls back to another one.
//!
//! libc's own `dlsym`/`dlvsym` cannot be found with `dlsym` (that is this function, and a
//! versioned reference binds to an unversioned definition too): they are read from libc's
//! dynamic symbol table (`dl_iterate_phdr`), the default version of each. The guard's internal
//! lookups on handles call them directly (`real_dlsym`, `real_dlvsym`).
//!
//! `dlvsym(RTLD_NEXT, "dlsym", version)`, how another `dlsym` interposer preloaded before the
//! guard finds the next one, returns the guard's `dlsym` (`own_for_next`): a versioned lookup
//! would skip the guard's unversioned definition and bypass it.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicUsize, Ordering};

type Dlsym = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;
type Dlvsym = unsafe extern "C" fn(*mut c_void, *const c_char, *const c_char) -> *mut c_void;

/// libc's `dlsym` and `dlvsym` (0 until found). Read by the trampolines with a plain load.
static REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);
static REAL_DLVSYM: AtomicUsize = AtomicUsize::new(0);

/// Finds libc's `dlsym` and `dlvsym` once (again after a failure: nothing is cached then).
/// It touches no thread-local state and allocates nothing: a malloc interposer may call `dlsym`
/// from inside its first `malloc`, before this library's constructor ran.
extern "C" fn resolve_real() {
    if REAL_DLSYM.load(Ordering::Acquire) != 0 && REAL_DLVSYM.load(Ordering::Acquire) != 0 {
        return;
    }
    REAL_DLSYM.store(libc_symbol(c"dlsym"), Ordering::Release);
    REAL_DLVSYM.store(libc_symbol(c"dlvsym"), Ordering::Release);
}

/// Found when the library is loaded, before the program's own code runs.
#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static RESOLVE_AT_LOAD: extern "C" fn() = resolve_real;

/// libc's `dlsym`, for the guard's own lookups.
///
/// # Safety
/// `handle` as for `dlsym`; `name` NUL-terminated.
pub(crate) unsafe fn real_dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    resolve_real();
    match REAL_DLSYM.load(Ordering::Acquire) {
        0 => null_mut(),
        // SAFETY: the address of libc's dlsym, whose signature this is.
        f => unsafe { std::mem::transmute::<usize, Dlsym>(f)(handle, name) },
    }
}

/// libc's `dlvsym`, for the guard's own lookups.
///
/// # Safety
/// As `real_dlsym`; `version` NUL-terminated.
pub(crate) unsafe fn real_dlvsym(handle: *mut c_void, name: *const c_char, version: *const c_char) -> *mut c_void {
    resolve_real();
    match REAL_DLVSYM.load(Ordering::Acquire) {
        0 => null_mut(),
        // SAFETY: the address of libc's dlvsym, whose signature this is.
        f => unsafe { std::mem::transmute::<usize, Dlvsym>(f)(handle, name, version) },
    }
}

/// A lookup on a handle (not RTLD_NEXT or RTLD_DEFAULT): done by libc, then a hooked CUDA
/// function found in a CUDA library is swapped for a guarded copy that forwards to it.
extern "C" fn lookup_on_handle(handle: *mut c_void, name: *const c_char, version: *const c_char) -> *mut c_void {
    // SAFETY: the caller's arguments, passed on unchanged.
    let found = unsafe {
        if version.is_null() {
            real_dlsym(handle, name)
        } else {
            real_dlvsym(handle, name, version)
        }
    };
    if found.is_null() || name.is_null() {
        return found;
    }
    // SAFETY: `name` is the NUL-terminated string libc just looked up.
    let name = unsafe { CStr::from_ptr(name) };
    std::panic::catch_unwind(|| crate::ffi::intercept::hooks::guarded_copy(name, found)).unwrap_or(found)
}

/// The exported `dlsym`: RTLD_NEXT (-1) and RTLD_DEFAULT (0) jump to libc's with the caller's
/// return address untouched; other handles go through `lookup_on_handle`.
///
/// # Safety
/// Called by C code with `dlsym`'s arguments.
#[cfg(all(target_arch = "x86_64", not(test)))]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    core::arch::naked_asm!(
        ".globl cublasguard_own_dlsym",
        ".hidden cublasguard_own_dlsym",
        "cublasguard_own_dlsym:",
        "cmp rdi, -1",
        "je 2f",
        "test rdi, rdi",
        "je 2f",
        "xor edx, edx", // no version
        "jmp {lookup}",
        "2:",
        "mov rax, qword ptr [rip + {real}]",
        "test rax, rax",
        "jz 3f",
        "jmp rax",
        // Not found yet (a constructor that runs before ours): find it, keeping the arguments
        // and the caller's return address, then jump.
        "3:",
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {resolve}",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "mov rax, qword ptr [rip + {real}]",
        "test rax, rax",
        "jz 4f",
        "jmp rax",
        "4:",
        "xor eax, eax",
        "ret",
        lookup = sym lookup_on_handle,
        real = sym REAL_DLSYM,
        resolve = sym resolve_real,
    )
}

/// What `dlvsym(RTLD_NEXT, name, version)` returns for `dlsym` and `dlvsym` themselves: the
/// guard's own. Another interposer preloaded before the guard takes "the next dlsym" so, and a
/// versioned lookup never finds the guard's unversioned definitions (libc's, at the version
/// asked, is the first match after them): through libc's, its dlsym would hand the program
/// unguarded CUDA functions. The guard's dlsym forwards every lookup, so it is the next one
/// that interposer means. Null for any other name.
extern "C" fn own_for_next(name: *const c_char) -> *mut c_void {
    if name.is_null() {
        return null_mut();
    }
    // SAFETY: the caller's NUL-terminated symbol name.
    match unsafe { CStr::from_ptr(name) }.to_bytes() {
        b"dlsym" => own_dlsym(),
        b"dlvsym" => own_dlvsym(),
        _ => null_mut(),
    }
}

// The trampolines' own addresses, by hidden aliases: a reference to the exported names from
// inside the library would bind to the first definition in the process (that very interposer's).
#[cfg(all(target_arch = "x86_64", not(test)))]
extern "C" {
    static cublasguard_own_dlsym: u8;
    static cublasguard_own_dlvsym: u8;
}

#[cfg(all(target_arch = "x86_64", not(test)))]
fn own_dlsym() -> *mut c_void {
    // Only the address is taken (no read): no unsafe needed.
    &raw const cublasguard_own_dlsym as *mut c_void
}

#[cfg(all(target_arch = "x86_64", not(test)))]
fn own_dlvsym() -> *mut c_void {
    &raw const cublasguard_own_dlvsym as *mut c_void
}

#[cfg(not(all(target_arch = "x86_64", not(test))))]
fn own_dlsym() -> *mut c_void {
    null_mut()
}

#[cfg(not(all(target_arch = "x86_64", not(test))))]
fn own_dlvsym() -> *mut c_void {
    null_mut()
}

/// The exported `dlvsym`, as `dlsym`; `RTLD_NEXT` lookups of `dlsym` and `dlvsym` return the
/// guard's own (`own_for_next`).
///
/// # Safety
/// Called by C code with `dlvsym`'s arguments.
#[cfg(all(target_arch = "x86_64", not(test)))]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlvsym(handle: *mut c_void, name: *const c_char, version: *const c_char) -> *mut c_void {
    core::arch::naked_asm!(
        ".globl cublasguard_own_dlvsym",
        ".hidden cublasguard_own_dlvsym",
        "cublasguard_own_dlvsym:",
        "cmp rdi, -1",
        "je 5f",
        "test rdi, rdi",
        "je 2f",
        "jmp {lookup}",
        // RTLD_NEXT: the guard's own dlsym or dlvsym, or on to libc's (the stack stays as the
        // caller left it: three pushes realign it for the call).
        "5:",
        "push rdi",
        "push rsi",
        "push rdx",
        "mov rdi, rsi",
        "call {own}",
        "pop rdx",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jz 2f",
        "ret",
        "2:",
        "mov rax, qword ptr [rip + {real}]",
        "test rax, rax",
        "jz 3f",
        "jmp rax",
        "3:",
        "push rdi",
        "push rsi",
        "push rdx",
        "call {resolve}",
        "pop rdx",
        "pop rsi",
        "pop rdi",
        "mov rax, qword ptr [rip + {real}]",
        "test rax, rax",
        "jz 4f",
        "jmp rax",
        "4:",
        "xor eax, eax",
        "ret",
        lookup = sym lookup_on_handle,
        real = sym REAL_DLVSYM,
        resolve = sym resolve_real,
        own = sym own_for_next,
    )
}

/// libc's definition of `name` at its default version, read from libc's (or, before glibc
/// 2.34, libdl's) dynamic symbol table; 0 when not found.
fn libc_symbol(name: &CStr) -> usize {
    struct Search<'a> {
        name: &'a [u8],
        found: usize,
    }
    unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
        // SAFETY: the loader passes a valid info; `data` is the Search below.
        let (info, search) = unsafe { (&*info, &mut *(data as *mut Search)) };
        let path = if info.dlpi_name.is_null() {
            &[][..]
        } else {
            // SAFETY: the loader's NUL-terminated file name.
            unsafe { CStr::from_ptr(info.dlpi_name) }.to_bytes()
        };
        let file = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
        if !(file.starts_with(b"libc.so") || file.starts_with(b"libdl.so")) {
            return 0;
        }
        // SAFETY: the headers and dynamic section of a loaded object, as the loader keeps them.
        if let Some(addr) = unsafe { elf::find_default(info, search.name) } {
            search.found = addr;
            return 1;
        }
        0
    }
    let mut search = Search { name: name.to_bytes(), found: 0 };
    // SAFETY: `visit` matches the callback type and only writes `search`.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut search as *mut Search as *mut c_void) };
    search.found
}

/// Just enough ELF to find a defined dynamic symbol's default version in a loaded object.
mod elf {
    use std::ffi::CStr;

    const DT_NULL: i64 = 0;
    const DT_HASH: i64 = 4;
    const DT_STRTAB: i64 = 5;
    const DT_SYMTAB: i64 = 6;
    const DT_GNU_HASH: i64 = 0x6fff_fef5;
    const DT_VERSYM: i64 = 0x6fff_fff0;
    const STT_FUNC: u8 = 2;
    const STT_GNU_IFUNC: u8 = 10;
    const VERSYM_HIDDEN: u16 = 0x8000;

    /// An entry of the dynamic section (`Elf64_Dyn`, which the libc crate does not define).
    #[repr(C)]
    struct Dyn {
        tag: i64,
        val: u64,
    }

    /// The address of `name`'s default (not hidden) definition in the object, if it has one.
    ///
    /// # Safety
    /// `info` describes an object the loader has mapped and relocated.
    pub(super) unsafe fn find_default(info: &libc::dl_phdr_info, name: &[u8]) -> Option<usize> {
        let base = info.dlpi_addr as usize;
        // SAFETY: the loader's program headers for this object.
        let headers = unsafe { std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize) };
        let dynamic = headers.iter().find(|h| h.p_type == libc::PT_DYNAMIC)?;
        // The loader relocates these entries in place on x86_64; an unrelocated one is an
        // offset from the base.
        let at = |v: u64| if (v as usize) < base { base + v as usize } else { v as usize };
        let (mut symtab, mut strtab, mut hash, mut gnu_hash, mut versym) = (0, 0, 0, 0, 0);
        let mut entry = (base + dynamic.p_vaddr as usize) as *const Dyn;
        loop {
            // SAFETY: the dynamic section ends with DT_NULL.
            let d = unsafe { &*entry };
            match d.tag {
                DT_NULL => break,
                DT_SYMTAB => symtab = at(d.val),
                DT_STRTAB => strtab = at(d.val),
                DT_HASH => hash = at(d.val),
                DT_GNU_HASH => gnu_hash = at(d.val),
                DT_VERSYM => versym = at(d.val),
                _ => {}
            }
            // SAFETY: still inside the dynamic section (DT_NULL not reached).
            entry = unsafe { entry.add(1) };
        }
        if symtab == 0 || strtab == 0 {
            return None;
        }
        // SAFETY: the hash tables of a loaded object.
        let count = unsafe {
            if hash != 0 {
                *(hash as *const u32).add(1) as usize // nchain: one per symbol
            } else if gnu_hash != 0 {
                gnu_symbol_count(gnu_hash as *const u32)
            } else {
                return None;
            }
        };
        for i in 0..count {
            // SAFETY: i < the number of symbols in the table.
            let sym = unsafe { &*(symtab as *const libc::Elf64_Sym).add(i) };
            let kind = sym.st_info & 0xf;
            if sym.st_shndx == 0 || (kind != STT_FUNC && kind != STT_GNU_IFUNC) {
                continue;
            }
            // SAFETY: a symbol's name is a NUL-terminated string in the string table.
            let sym_name = unsafe { CStr::from_ptr((strtab + sym.st_name as usize) as *const std::ffi::c_char) };
            if sym_name.to_bytes() != name {
                continue;
            }
            // SAFETY: one versym entry per symbol.
            let hidden = versym != 0 && unsafe { *(versym as *const u16).add(i) } & VERSYM_HIDDEN != 0;
            if !hidden && kind == STT_FUNC {
                return Some(base + sym.st_value as usize);
            }
        }
        None
    }

    /// The number of dynamic symbols, from a GNU hash table: one past the last chain's end.
    ///
    /// # Safety
    /// `table` is a loaded object's DT_GNU_HASH.
    unsafe fn gnu_symbol_count(table: *const u32) -> usize {
        // SAFETY: the table's header, bloom filter, buckets and chains, as the format lays them out.
        unsafe {
            let (buckets_len, sym_offset, bloom_len) = (*table as usize, *table.add(1) as usize, *table.add(2) as usize);
            let buckets = table.add(4 + bloom_len * 2);
            let chains = buckets.add(buckets_len);
            let last = (0..buckets_len).map(|i| *buckets.add(i) as usize).max().unwrap_or(0);
            if last < sym_offset {
                return sym_offset;
            }
            let mut i = last;
            while *chains.add(i - sym_offset) & 1 == 0 {
                i += 1;
            }
            i + 1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libcs_own_dlsym_and_dlvsym_are_found_in_its_symbol_table() {
        let dlsym_addr = libc_symbol(c"dlsym");
        let dlvsym_addr = libc_symbol(c"dlvsym");
        assert!(dlsym_addr != 0 && dlvsym_addr != 0);
        // The test binary does not interpose dlsym: the symbol it binds to is libc's default.
        assert_eq!(dlsym_addr, libc::dlsym as *const () as usize);
        // SAFETY: libc's dlsym, called as dlsym.
        let found = unsafe { real_dlsym(libc::RTLD_DEFAULT, c"getpid".as_ptr()) };
        assert_eq!(found as usize, libc::getpid as *const () as usize);
        assert_eq!(libc_symbol(c"no_such_function_anywhere"), 0);
    }
}
