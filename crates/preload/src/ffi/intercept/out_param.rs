//! Reading what a CUDA function wrote through an out-parameter.

/// The `out.len()` bytes at `ptr`, a hooked call's parameter in host memory (see
/// `Device::read_parameter`); `false` for NULL.
pub(crate) fn read_bytes(ptr: u64, out: &mut [u8]) -> bool {
    if ptr == 0 {
        return false;
    }
    // SAFETY: the callers (guard/, through `Device::read_parameter`) read an out-parameter only
    // after the real function returned success for it, or a structure the real function has
    // just read itself: `out.len()` bytes of the program's memory of the parameter's type.
    unsafe { std::ptr::copy_nonoverlapping(ptr as *const u8, out.as_mut_ptr(), out.len()) };
    true
}

/// A NUL-terminated string a CUDA function gave or took (a kernel's registered name); `None`
/// for NULL.
pub(crate) fn c_string(ptr: *const std::ffi::c_char) -> Option<String> {
    if ptr.is_null() {
        return None;
    }
    // SAFETY: the callers pass strings the runtime or the program handed to a CUDA function as
    // NUL-terminated C strings.
    Some(unsafe { std::ffi::CStr::from_ptr(ptr) }.to_string_lossy().into_owned())
}

/// Writes `bytes` to `ptr`, a buffer of at least that many bytes the program passed a hooked
/// call to be written into (see `Device::write_parameter`); `false` for NULL.
pub(crate) fn write_bytes(ptr: u64, bytes: &[u8]) -> bool {
    if ptr == 0 {
        return false;
    }
    // SAFETY: the callers (guard/, through `Device::write_parameter`) write into an output
    // buffer the program gave the hooked call, no more bytes than the size it passed with it,
    // after the real function wrote into the same buffer itself.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), ptr as *mut u8, bytes.len()) };
    true
}
