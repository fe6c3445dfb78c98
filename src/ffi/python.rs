//! The Python frames of the thread at a fault, when the process runs Python: the line of the
//! user's model that led to the failing cuBLAS call. Only CPython's public API is used, found
//! in the running process (`dlsym(RTLD_DEFAULT)`; the guard never links libpython), and only at
//! a stored fault, never on a clean call and never in the signal handler.
//!
//! The thread in a hook has normally released the GIL (PyTorch's bindings and ctypes release it
//! around every foreign call). It is taken again with `PyGILState_Ensure` only when this thread
//! already has a Python thread state (so it has Python frames to show) and with no lock of the
//! guard's held, the deadlock PyTorch's combined tracebacks document. A thread without one
//! (PyTorch's autograd workers, a C++ thread) gets a note instead.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

use crate::trace::PythonFrame;

const MAX_FRAMES: usize = 32;

type Obj = *mut c_void;

/// The CPython functions used, each with the signature of Python's C API.
struct Api {
    is_initialized: unsafe extern "C" fn() -> c_int,
    is_finalizing: Option<unsafe extern "C" fn() -> c_int>,
    this_thread_state: unsafe extern "C" fn() -> Obj,
    /// "C-unwind": at shutdown CPython ends a daemon thread inside it (`pthread_exit`), and
    /// that forced unwind must pass through the guard.
    ensure: unsafe extern "C-unwind" fn() -> c_int,
    release: unsafe extern "C" fn(c_int),
    thread_frame: unsafe extern "C" fn(Obj) -> Obj,
    frame_back: unsafe extern "C" fn(Obj) -> Obj,
    frame_code: unsafe extern "C" fn(Obj) -> Obj,
    frame_line: unsafe extern "C" fn(Obj) -> c_int,
    get_attr: unsafe extern "C" fn(Obj, *const c_char) -> Obj,
    as_utf8: unsafe extern "C" fn(Obj) -> *const c_char,
    dec_ref: unsafe extern "C" fn(Obj),
    err_occurred: unsafe extern "C" fn() -> Obj,
    err_clear: unsafe extern "C" fn(),
    version: unsafe extern "C" fn() -> *const c_char,
}

fn lookup(name: &CStr) -> *mut c_void {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only reads the loader's tables.
    super::loader_gate::through(|| unsafe { super::dl::real_dlsym(libc::RTLD_DEFAULT, name.as_ptr()) })
}

fn api() -> Option<&'static Api> {
    static API: OnceLock<Option<Api>> = OnceLock::new();
    API.get_or_init(|| {
        macro_rules! find {
            ($name:literal) => {{
                let p = lookup($name);
                if p.is_null() {
                    return None;
                }
                // SAFETY: the symbol is CPython's, with the signature its C API documents (the
                // field's type); the functions exist from Python 3.9 on.
                #[allow(clippy::missing_transmute_annotations)]
                unsafe {
                    std::mem::transmute(p)
                }
            }};
        }
        let is_finalizing = {
            let p = [lookup(c"Py_IsFinalizing"), lookup(c"_Py_IsFinalizing")].into_iter().find(|p| !p.is_null());
            // SAFETY: `int Py_IsFinalizing(void)` (3.13; `_Py_IsFinalizing` before).
            p.map(|p| unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> c_int>(p) })
        };
        Some(Api {
            is_initialized: find!(c"Py_IsInitialized"),
            is_finalizing,
            this_thread_state: find!(c"PyGILState_GetThisThreadState"),
            ensure: find!(c"PyGILState_Ensure"),
            release: find!(c"PyGILState_Release"),
            thread_frame: find!(c"PyThreadState_GetFrame"),
            frame_back: find!(c"PyFrame_GetBack"),
            frame_code: find!(c"PyFrame_GetCode"),
            frame_line: find!(c"PyFrame_GetLineNumber"),
            get_attr: find!(c"PyObject_GetAttrString"),
            as_utf8: find!(c"PyUnicode_AsUTF8"),
            dec_ref: find!(c"Py_DecRef"),
            err_occurred: find!(c"PyErr_Occurred"),
            err_clear: find!(c"PyErr_Clear"),
            version: find!(c"Py_GetVersion"),
        })
    })
    .as_ref()
}

/// The running Python's version ("3.11.7"), when the process runs Python; remembered once
/// learnt (at exit the interpreter is finalized and no longer answers).
pub(crate) fn version() -> Option<String> {
    static KNOWN: OnceLock<String> = OnceLock::new();
    if let Some(v) = KNOWN.get() {
        return Some(v.clone());
    }
    let v = ask_version()?;
    Some(KNOWN.get_or_init(|| v).clone())
}

fn ask_version() -> Option<String> {
    let api = api()?;
    // SAFETY: Py_IsInitialized and Py_GetVersion need no GIL; the string is static.
    unsafe {
        if (api.is_initialized)() == 0 {
            return None;
        }
        let v = (api.version)();
        (!v.is_null()).then(|| CStr::from_ptr(v).to_string_lossy().split_whitespace().next().unwrap_or("").to_string())
    }
}

/// What the faulting thread's Python stack says: its frames, innermost first, or why it has
/// none. `None` when the process does not run Python.
pub(crate) fn stack(thread_name: &str) -> Option<(Vec<PythonFrame>, Option<String>)> {
    let api = api()?;
    // SAFETY: every call is CPython's public API, used as documented: the GIL is taken with
    // PyGILState_Ensure before any object is touched and released after; every new reference
    // (frames, code objects, attributes) is released with Py_DecRef; borrowed strings are
    // copied before their object is released.
    unsafe {
        if (api.is_initialized)() == 0 || api.is_finalizing.is_some_and(|f| f() != 0) {
            return None;
        }
        if (api.this_thread_state)().is_null() {
            return Some((Vec::new(), Some(no_frames_note(thread_name))));
        }
        let gil = (api.ensure)();
        let tstate = (api.this_thread_state)();
        let mut frames = Vec::new();
        let mut frame = if tstate.is_null() { std::ptr::null_mut() } else { (api.thread_frame)(tstate) };
        while !frame.is_null() && frames.len() < MAX_FRAMES {
            let code = (api.frame_code)(frame);
            let line = (api.frame_line)(frame);
            if !code.is_null() {
                let text = |attr: &CStr| {
                    let value = (api.get_attr)(code, attr.as_ptr());
                    if value.is_null() {
                        if !(api.err_occurred)().is_null() {
                            (api.err_clear)();
                        }
                        return String::new();
                    }
                    let utf8 = (api.as_utf8)(value);
                    let s = if utf8.is_null() { String::new() } else { CStr::from_ptr(utf8).to_string_lossy().into_owned() };
                    if utf8.is_null() && !(api.err_occurred)().is_null() {
                        (api.err_clear)();
                    }
                    (api.dec_ref)(value);
                    s
                };
                frames.push(PythonFrame { file: text(c"co_filename"), line: line.max(0) as u32, function: text(c"co_name") });
                (api.dec_ref)(code);
            }
            let back = (api.frame_back)(frame);
            (api.dec_ref)(frame);
            frame = back;
        }
        if !frame.is_null() {
            (api.dec_ref)(frame);
        }
        (api.release)(gil);
        let note = frames.is_empty().then(|| no_frames_note(thread_name));
        Some((frames, note))
    }
}

fn no_frames_note(thread_name: &str) -> String {
    if thread_name.starts_with("pt_autograd") {
        format!(
            "{thread_name}: PyTorch's backward pass; the forward call that created this op is not on this thread's stack \
             (torch.autograd.set_detect_anomaly(True) records it)"
        )
    } else {
        format!("{thread_name}: this thread runs no Python code (a native worker thread)")
    }
}

/// The calling thread's name, as the program set it (`pthread_setname_np`, Python's threading).
pub(crate) fn thread_name() -> String {
    let mut buf = [0 as c_char; 64];
    // SAFETY: pthread_getname_np writes a NUL-terminated name of at most buf.len() bytes.
    let ok = unsafe { libc::pthread_getname_np(libc::pthread_self(), buf.as_mut_ptr(), buf.len()) } == 0;
    if !ok {
        return String::new();
    }
    // SAFETY: NUL-terminated by pthread_getname_np.
    unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned()
}
