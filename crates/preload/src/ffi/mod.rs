//! The FFI edge: exported hooks, finding the real functions, and the calls the guard itself
//! makes into CUDA. All `unsafe` in the crate lives under this module.

// In the crate's own unit-test build the hooks are not exported (`cfg_attr(not(test),
// no_mangle)`, so the test binary does not interpose on itself), which leaves most of this layer
// unreachable there; the library build checks it for dead code as usual.
#![cfg_attr(test, allow(dead_code))]

pub(crate) mod backtrace;
pub(crate) mod claim;
pub(crate) mod crash;
pub(crate) mod cuda_api;
pub(crate) mod device;
pub(crate) mod device_scan;
pub(crate) mod dl;
pub(crate) mod entry_points;
pub(crate) mod environment;
pub(crate) mod hooks;
pub(crate) mod lifecycle;
pub(crate) mod loader_gate;
pub(crate) mod out_param;
pub mod process;
pub(crate) mod python;
pub(crate) mod real;
pub(crate) mod reentry;
pub(crate) mod stderr;
pub(crate) mod thread;

/// A C++ symbol demangled ("_Z5kfillPfi" -> "kfill(float*, int)"); anything else as it is.
pub(crate) fn demangle(symbol: &str) -> String {
    cpp_demangle::Symbol::new(symbol).ok().and_then(|s| s.demangle().ok()).unwrap_or_else(|| symbol.to_string())
}

/// A kernel's name from its host stub: the runtime's own (cudaFuncGetName, CUDA 12.3 on), else
/// the stub's symbol (host stubs are often hidden symbols: the symbol table has them).
pub(crate) fn kernel_name(func: u64) -> Option<String> {
    let mut name: *const std::ffi::c_char = std::ptr::null();
    if cuda_api::cudaFuncGetName(&mut name, func as *const std::ffi::c_void) == Some(0) {
        if let Some(n) = out_param::c_string(name) {
            return Some(demangle(&n));
        }
    }
    let mut found = None;
    // The resolver treats an address as a return address and looks one byte back: a function's
    // first byte would name the function before it.
    loader_gate::through(|| {
        ::backtrace::resolve((func + 1) as *mut std::ffi::c_void, |symbol| {
            if found.is_none() {
                found = symbol.name().map(|n| n.to_string());
            }
        })
    });
    found
}
