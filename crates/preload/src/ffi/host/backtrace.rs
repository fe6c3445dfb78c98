//! The native call stack of the program at a stored fault, without the guard's own frames, each
//! frame named: the function (demangled, C++ and Rust alike, from the object's symbol table or
//! debug information, hidden symbols included), the library and the offset in it, and the raw
//! address. Symbolised with the `backtrace` crate, at fault time only (never on a clean call,
//! never in the signal handler): the first fault in a large library pays for reading its
//! symbols once.

use std::ffi::{c_void, CStr};

const MAX_FRAMES: usize = 48;

pub(crate) fn capture() -> Vec<String> {
    crate::ffi::intercept::loader_gate::through(capture_now)
}

fn capture_now() -> Vec<String> {
    let mut frames = [std::ptr::null_mut::<c_void>(); MAX_FRAMES];
    // SAFETY: frames is writable for MAX_FRAMES entries.
    let n = unsafe { libc::backtrace(frames.as_mut_ptr(), MAX_FRAMES as i32) }.max(0) as usize;
    let own = object_of(capture_now as *const c_void).map(|(base, _)| base);
    frames[..n]
        .iter()
        .filter_map(|&addr| {
            let (base, file) = object_of(addr)?;
            (Some(base) != own).then(|| describe(addr as usize, base, &file))
        })
        .collect()
}

/// The frames of a call site kept at its call, named as `capture` names frames: the library
/// may have been unloaded since (then the raw address is all there is).
pub(crate) fn describe_call_site(site: &crate::session::call_site::CallSite) -> Vec<String> {
    crate::ffi::intercept::loader_gate::through(|| {
        site.addresses()
            .map(|addr| match object_of(addr as *const c_void) {
                Some((base, file)) => describe(addr as usize, base, &file),
                None => frame_text(None, "?", 0, addr as usize),
            })
            .collect()
    })
}

fn object_of(addr: *const c_void) -> Option<(usize, String)> {
    // SAFETY: a zeroed Dl_info is a valid out-parameter; dladdr only reads loader tables.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::dladdr(addr, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated path owned by the loader.
    let file = unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy();
    // Absolute, so the report can tell the program's own frames (`process.exe` is absolute).
    Some((info.dli_fbase as usize, crate::ffi::host::process::absolute_object_path(&file)))
}

/// The frame at return address `addr` in the object mapped at `base` from `file`.
fn describe(addr: usize, base: usize, file: &str) -> String {
    // A return address points after the call: look up the byte before it, inside the call.
    let mut function = None;
    backtrace::resolve((addr.saturating_sub(1)) as *mut c_void, |symbol| {
        if function.is_none() {
            function = symbol.name().map(|name| {
                // With debug information, the source line too: "f at mlp.c:57".
                match (symbol.filename(), symbol.lineno()) {
                    (Some(source), Some(line)) => format!("{name} at {}:{line}", source.display()),
                    _ => name.to_string(),
                }
            });
        }
    });
    frame_text(function.as_deref(), file, addr.saturating_sub(base), addr)
}

/// "at::native::foo(int) (/lib/libtorch_cuda.so+0x1c2f3a0) [0x7f3a5c2f3a0]": the function, the
/// library and the offset in it (exact, for `addr2line -e LIBRARY OFFSET`), the raw address.
fn frame_text(function: Option<&str>, library: &str, library_offset: usize, address: usize) -> String {
    format!("{} ({library}+{library_offset:#x}) [{address:#x}]", function.unwrap_or("?"))
}

/// A kernel's name from its host stub: the runtime's own (cudaFuncGetName, CUDA 12.3 on), else
/// the stub's symbol (host stubs are often hidden symbols: the symbol table has them).
pub(crate) fn kernel_name(func: u64) -> Option<String> {
    use crate::ffi::cuda_client::device::{peek_last_error, quietly};
    let mut name: *const std::ffi::c_char = std::ptr::null();
    // The runtime's failure (a function it does not know) would replace the program's last
    // error: asked only while none is pending, and quietly.
    let asked = || {
        // SAFETY: `name` is a writable pointer; the runtime only looks the address up.
        unsafe { crate::ffi::cuda_client::cuda_api::cudaFuncGetName(&mut name, func as *const std::ffi::c_void) }
    };
    if peek_last_error() == Some(0) && quietly(asked) == Some(0) {
        if let Some(n) = crate::ffi::intercept::out_param::c_string(name) {
            return Some(crate::session::kernels::demangle(&n));
        }
    }
    // A driver function (CUfunction, a launch through the driver API: Triton's): the driver
    // names it (CUDA 12.3 and later).
    let mut name: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: as above: an out-parameter, and a handle the driver only looks up.
    if unsafe { crate::ffi::cuda_client::cuda_api::cuFuncGetName(&mut name, func as *const std::ffi::c_void) } == Some(0) {
        if let Some(n) = crate::ffi::intercept::out_param::c_string(name) {
            return Some(crate::session::kernels::demangle(&n));
        }
    }
    let mut found = None;
    // The resolver treats an address as a return address and looks one byte back: a function's
    // first byte would name the function before it.
    crate::ffi::intercept::loader_gate::through(|| {
        ::backtrace::resolve((func + 1) as *mut std::ffi::c_void, |symbol| {
            if found.is_none() {
                found = symbol.name().map(|n| n.to_string());
            }
        })
    });
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_name_function_library_offset_and_address() {
        assert_eq!(
            frame_text(Some("at::native::addmm_out"), "/lib/libtorch_cuda.so", 0x1c2f3a0, 0x7f3a5c2f3a0),
            "at::native::addmm_out (/lib/libtorch_cuda.so+0x1c2f3a0) [0x7f3a5c2f3a0]"
        );
        assert_eq!(frame_text(None, "/bin/mlp", 0x1634, 0x55e054fee634), "? (/bin/mlp+0x1634) [0x55e054fee634]");
    }

    #[test]
    fn a_function_the_dynamic_table_does_not_export_is_named() {
        // A function of this test binary, not exported: only the symbol table names it.
        #[inline(never)]
        fn hidden_marker() -> usize {
            hidden_marker as *const () as usize
        }
        let addr = hidden_marker() + 1;
        let (base, file) = object_of(addr as *const c_void).expect("mapped");
        let text = describe(addr + 1, base, &file);
        assert!(text.contains("hidden_marker"), "{text}");
        assert!(text.ends_with(&format!("[{:#x}]", addr + 1)), "{text}");
    }
}
