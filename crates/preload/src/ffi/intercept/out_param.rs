//! Reading what a CUDA function wrote through an out-parameter.

/// The value a CUDA function wrote through `out`. Call it only after the function reported
/// success, which is when it promises to have written it; `None` for a NULL pointer.
pub(crate) fn written<T: Copy>(out: *mut T) -> Option<T> {
    if out.is_null() {
        return None;
    }
    // SAFETY: the callers (guard/) read an out-parameter only after the real function returned
    // success for it: the library wrote a `T` there, and the program's pointer is valid for it.
    Some(unsafe { out.read() })
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
