//! Driver entry points: since CUDA 11.3 the runtime (a static one included: nvcc's default,
//! CuPy's) obtains every driver function through `cuGetProcAddress`, and PyTorch's
//! expandable segments get the virtual-memory functions through
//! `cudaGetDriverEntryPoint[ByVersion]`. None of that goes through the names the loader binds,
//! so the guard wraps the lookups: the function pointer a lookup returns is swapped for the
//! guarded copy of that very function (`hooks::guarded_entry`), when the guard hooks it; every
//! other pointer, `cuGetExportTable` included, passes through untouched.
//!
//! The wrappers and the real functions they call are "C-unwind": a forced unwind (thread
//! cancellation) inside a lookup passes through, as it would without the guard.
//!
//! These wrappers are lookups, not calls: they are not recorded, and they do no initialisation
//! work (no session, no trace): a CUDA 12.8 driver deadlocked an interposer that initialised
//! itself inside such a lookup. They reach the real functions as the hooks do (`RealSymbol`),
//! and `dlsym` on libcuda or libcudart for their names returns them (`guarded_lookup`).

#![allow(non_snake_case)] // the exported functions carry the CUDA names

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, c_void, CStr};

use crate::ffi::intercept::real::{Library, RealSymbol};

static CU_GET_PROC_ADDRESS: RealSymbol = RealSymbol::new("cuGetProcAddress\0", Library::Driver);
static CU_GET_PROC_ADDRESS_V2: RealSymbol = RealSymbol::new("cuGetProcAddress_v2\0", Library::Driver);
static CUDA_GET_DRIVER_ENTRY_POINT: RealSymbol = RealSymbol::new("cudaGetDriverEntryPoint\0", Library::Cudart);
static CUDA_GET_DRIVER_ENTRY_POINT_BY_VERSION: RealSymbol = RealSymbol::new("cudaGetDriverEntryPointByVersion\0", Library::Cudart);

/// `CUDA_ERROR_NOT_FOUND` / `cudaErrorSymbolNotFound`: what a lookup says when the real
/// function is missing.
const NOT_FOUND: c_int = 500;

/// After a successful lookup of `symbol`: the guarded copy in place of what `*pfn` holds.
fn swap(status: c_int, symbol: *const c_char, pfn: *mut *mut c_void) {
    if status != 0 || symbol.is_null() || pfn.is_null() {
        return;
    }
    // SAFETY: the lookup succeeded, so `pfn` is the caller's valid out-parameter it wrote.
    let found = unsafe { *pfn };
    if found.is_null() {
        return;
    }
    // SAFETY: the caller's NUL-terminated symbol name.
    let symbol = unsafe { CStr::from_ptr(symbol) };
    let guarded = std::panic::catch_unwind(|| crate::ffi::intercept::hooks::guarded_entry(symbol, found)).unwrap_or(found);
    if guarded != found {
        // SAFETY: as above.
        unsafe { *pfn = guarded };
    }
}

/// # Safety
/// Called by C code with `cuGetProcAddress`'s arguments.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C-unwind" fn cuGetProcAddress(symbol: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: c_ulonglong) -> c_int {
    type Real = unsafe extern "C-unwind" fn(*const c_char, *mut *mut c_void, c_int, c_ulonglong) -> c_int;
    // SAFETY: the true signature of cuGetProcAddress.
    let Some(real) = (unsafe { CU_GET_PROC_ADDRESS.get::<Real>() }) else { return NOT_FOUND };
    // SAFETY: the caller's arguments, passed on unchanged.
    let status = unsafe { real(symbol, pfn, version, flags) };
    swap(status, symbol, pfn);
    status
}

/// # Safety
/// Called by C code with `cuGetProcAddress_v2`'s arguments.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C-unwind" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_int,
    flags: c_ulonglong,
    status_out: *mut c_int,
) -> c_int {
    type Real = unsafe extern "C-unwind" fn(*const c_char, *mut *mut c_void, c_int, c_ulonglong, *mut c_int) -> c_int;
    // SAFETY: the true signature of cuGetProcAddress_v2.
    let Some(real) = (unsafe { CU_GET_PROC_ADDRESS_V2.get::<Real>() }) else { return NOT_FOUND };
    // SAFETY: the caller's arguments, passed on unchanged.
    let status = unsafe { real(symbol, pfn, version, flags, status_out) };
    swap(status, symbol, pfn);
    status
}

/// # Safety
/// Called by C code with `cudaGetDriverEntryPoint`'s arguments (CUDA 12's, with
/// `driverStatus`).
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C-unwind" fn cudaGetDriverEntryPoint(symbol: *const c_char, pfn: *mut *mut c_void, flags: c_ulonglong, status_out: *mut c_int) -> c_int {
    type Real = unsafe extern "C-unwind" fn(*const c_char, *mut *mut c_void, c_ulonglong, *mut c_int) -> c_int;
    // SAFETY: the true signature of cudaGetDriverEntryPoint.
    let Some(real) = (unsafe { CUDA_GET_DRIVER_ENTRY_POINT.get::<Real>() }) else { return NOT_FOUND };
    // SAFETY: the caller's arguments, passed on unchanged.
    let status = unsafe { real(symbol, pfn, flags, status_out) };
    swap(status, symbol, pfn);
    status
}

/// # Safety
/// Called by C code with `cudaGetDriverEntryPointByVersion`'s arguments.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C-unwind" fn cudaGetDriverEntryPointByVersion(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    version: c_uint,
    flags: c_ulonglong,
    status_out: *mut c_int,
) -> c_int {
    type Real = unsafe extern "C-unwind" fn(*const c_char, *mut *mut c_void, c_uint, c_ulonglong, *mut c_int) -> c_int;
    // SAFETY: the true signature of cudaGetDriverEntryPointByVersion.
    let Some(real) = (unsafe { CUDA_GET_DRIVER_ENTRY_POINT_BY_VERSION.get::<Real>() }) else { return NOT_FOUND };
    // SAFETY: the caller's arguments, passed on unchanged.
    let status = unsafe { real(symbol, pfn, version, flags, status_out) };
    swap(status, symbol, pfn);
    status
}

/// The driver's lookup functions, which the driver's own lookup hands out too (NVIDIA's for
/// "cuGetProcAddress": its `_v2` from CUDA 12.0, the first version before).
pub(crate) const DRIVER_LOOKUPS: &[&str] = &["cuGetProcAddress", "cuGetProcAddress_v2"];

/// The guard's wrapper of the lookup function `name`, and the library that defines it: what
/// `dlsym` on that library returns for the name. `None`: not a lookup function.
pub(crate) fn wrapper_for(name: &[u8]) -> Option<(*mut c_void, Library)> {
    Some(match name {
        b"cuGetProcAddress" => (cuGetProcAddress as *mut c_void, Library::Driver),
        b"cuGetProcAddress_v2" => (cuGetProcAddress_v2 as *mut c_void, Library::Driver),
        b"cudaGetDriverEntryPoint" => (cudaGetDriverEntryPoint as *mut c_void, Library::Cudart),
        b"cudaGetDriverEntryPointByVersion" => (cudaGetDriverEntryPointByVersion as *mut c_void, Library::Cudart),
        _ => return None,
    })
}
