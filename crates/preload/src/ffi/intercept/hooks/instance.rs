//! One guard a process: a second copy of the library (another build at another path, both in
//! `LD_PRELOAD`) finds the first at load and passes every call through.

use super::*;

/// Marks the guard in a process: a second copy of it (another build at another path, both in
/// `LD_PRELOAD`) finds the first by this symbol.
#[cfg_attr(not(test), no_mangle)]
#[allow(non_upper_case_globals)]
pub static cublasguard_instance: u8 = 1;

/// At load: when another copy of the guard was loaded first, this one passes every call
/// through (every call would be intercepted twice and two traces written). Only a file named
/// libcublasguard* looks: the library's unit tests link this code too.
extern "C" fn notice_an_earlier_guard() {
    // Not the marker's address: a reference to an exported name binds to the first copy's.
    let Some((_, own)) = crate::ffi::intercept::real::object_path(notice_an_earlier_guard as *const c_void) else { return };
    if !crate::ffi::intercept::real::file_name(own).starts_with("libcublasguard") {
        return;
    }
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only reads the loader's tables.
    let first = unsafe { crate::ffi::intercept::dl::real_dlsym(libc::RTLD_DEFAULT, c"cublasguard_instance".as_ptr()) };
    if first.is_null() || crate::ffi::intercept::real::is_own(first) {
        return;
    }
    lifecycle::pass_through_in_this_process();
    let first = crate::ffi::intercept::real::object_path(first).map_or("another path", |(_, path)| path);
    lifecycle::say(&format!("cublasguard: another copy of the guard is already loaded ({first}); this one ({own}) passes every call through"));
}

#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static NOTICE_AT_LOAD: extern "C" fn() = notice_an_earlier_guard;
