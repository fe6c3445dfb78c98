//! The Python frames of the thread at a fault, when the process runs Python: the line of the
//! user's model that led to the failing cuBLAS call. Only CPython's public API is used, found
//! in the running process (`dlsym(RTLD_DEFAULT)`; the guard never links libpython), and only at
//! a stored fault, never on a clean call and never in the signal handler.
//!
//! The thread in a hook has normally released the GIL (PyTorch's bindings and ctypes release it
//! around every foreign call), and it must never wait for it: another thread may hold the GIL
//! while it waits for a lock the faulting thread holds (a ctypes or pybind11 extension's own
//! mutex), and the process would deadlock. So the frames are read by this thread only when it
//! already holds the GIL; otherwise a reader thread takes the GIL and reads this thread's frames
//! (stable while this thread is inside the hook), and this thread waits for it a bounded time,
//! then goes on with a note. A thread without a Python thread state (PyTorch's autograd workers,
//! a C++ thread) gets a note instead.
//!
//! At shutdown the interpreter frees every other thread's state under threads that run on
//! (daemon threads in a GEMM with the GIL released), and a thread state made then aborts CPython
//! ("init_threadstate: thread state already initialized") or reads freed memory. So the guard
//! registers an `atexit` callback of its own through the interpreter the first time it holds the
//! GIL: Python runs it before it starts to finalise, and from then on (as from the guard's own
//! exit handler on, or once `Py_IsFinalizing` says so) no frame is read through the interpreter,
//! no thread state is made, and a fault keeps what it has, with a note. The reader makes its
//! thread state itself (`PyThreadState_New`, no GIL needed) rather than by `PyGILState_Ensure`,
//! so that the callback can wait for a thread state being made (never for the GIL) before it
//! lets the interpreter go on.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::trace::PythonFrame;

const MAX_FRAMES: usize = 32;

/// How long a faulting thread waits for the reader thread to get the GIL: the interpreter
/// hands the GIL over every 5 ms to a thread that asks, so only a holder that never lets go
/// (one waiting for a lock this thread holds, say) makes it give up.
const GIL_WAIT: Duration = Duration::from_secs(2);

type Obj = *mut c_void;

/// What registering the guard's `atexit` callback takes; without it (a Python that lacks one)
/// frames are read as before, with only `Py_IsFinalizing` to say when to stop.
struct AtExitApi {
    import: unsafe extern "C" fn(*const c_char) -> Obj,
    new_function: unsafe extern "C" fn(*mut MethodDef, Obj, Obj) -> Obj,
    call: unsafe extern "C" fn(Obj, ...) -> Obj,
    inc_ref: unsafe extern "C" fn(Obj),
    /// The address of `None` (a plain number: the object is CPython's, for ever).
    none: usize,
}

/// CPython's `PyMethodDef`.
#[repr(C)]
struct MethodDef {
    name: *const c_char,
    function: Option<unsafe extern "C" fn(Obj, Obj) -> Obj>,
    flags: c_int,
    doc: *const c_char,
}

/// `METH_NOARGS`.
const METH_NOARGS: c_int = 0x0004;

/// The CPython functions used, each with the signature of Python's C API.
struct Api {
    is_initialized: unsafe extern "C" fn() -> c_int,
    is_finalizing: Option<unsafe extern "C" fn() -> c_int>,
    this_thread_state: unsafe extern "C" fn() -> Obj,
    holds_gil: Option<unsafe extern "C" fn() -> c_int>,
    main_interpreter: unsafe extern "C" fn() -> Obj,
    new_thread_state: unsafe extern "C" fn(Obj) -> Obj,
    // C-unwind: while the interpreter finalizes, CPython before 3.14 ends a thread that asks for
    // the GIL with pthread_exit, a forced unwind through the reader thread's frames.
    restore_thread: unsafe extern "C-unwind" fn(Obj),
    clear_thread_state: unsafe extern "C" fn(Obj),
    delete_current: unsafe extern "C" fn(),
    at_exit: Option<AtExitApi>,
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

pub(super) fn lookup(name: &CStr) -> *mut c_void {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only reads the loader's tables.
    crate::ffi::intercept::loader_gate::through(|| unsafe { crate::ffi::intercept::dl::real_dlsym(libc::RTLD_DEFAULT, name.as_ptr()) })
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
            holds_gil: {
                let p = lookup(c"PyGILState_Check");
                // SAFETY: `int PyGILState_Check(void)`, in the C API since 3.4.
                (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> c_int>(p) })
            },
            main_interpreter: find!(c"PyInterpreterState_Main"),
            new_thread_state: find!(c"PyThreadState_New"),
            restore_thread: find!(c"PyEval_RestoreThread"),
            clear_thread_state: find!(c"PyThreadState_Clear"),
            delete_current: find!(c"PyThreadState_DeleteCurrent"),
            at_exit: at_exit_api(),
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

fn at_exit_api() -> Option<AtExitApi> {
    let [import, new_function, call, inc_ref, none] =
        [c"PyImport_ImportModule", c"PyCFunction_NewEx", c"PyObject_CallFunctionObjArgs", c"Py_IncRef", c"_Py_NoneStruct"].map(lookup);
    if [import, new_function, call, inc_ref, none].iter().any(|p| p.is_null()) {
        return None;
    }
    // SAFETY: CPython's symbols, each with the signature its C API documents (the field's
    // type); `_Py_NoneStruct` is the `None` object itself.
    unsafe {
        Some(AtExitApi {
            import: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*const c_char) -> Obj>(import),
            new_function: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut MethodDef, Obj, Obj) -> Obj>(new_function),
            call: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(Obj, ...) -> Obj>(call),
            inc_ref: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(Obj)>(inc_ref),
            none: none as usize,
        })
    }
}

/// Set once the interpreter has begun (or is about to begin) to finalise: by the guard's
/// `atexit` callback, by the guard's own exit handler, or when `Py_IsFinalizing` said so.
static EXITING: AtomicBool = AtomicBool::new(false);
/// Reader threads between deciding to make a thread state and having made it.
static MAKING_STATE: AtomicU32 = AtomicU32::new(0);
static AT_EXIT_REGISTERED: AtomicBool = AtomicBool::new(false);
/// How long the `atexit` callback waits for thread states being made (a few microseconds each).
const MAKING_WAIT: Duration = Duration::from_secs(1);

/// In a forked child: the reader threads of the parent do not exist here, and none makes a
/// thread state (a count copied mid-way would hold the child's exit up for a second).
pub(crate) fn after_fork_in_child() {
    MAKING_STATE.store(0, Ordering::SeqCst);
}

/// The guard's exit handler has begun: no frames from here on.
pub(crate) fn process_exiting() {
    EXITING.store(true, Ordering::SeqCst);
}

/// Whether the interpreter may be finalising: frames are then not read.
///
/// # Safety
/// `api` is the running Python's (Py_IsInitialized and Py_IsFinalizing need no GIL).
unsafe fn shutting_down(api: &Api) -> bool {
    // SAFETY: the caller's contract.
    EXITING.load(Ordering::SeqCst) || unsafe { (api.is_initialized)() == 0 || api.is_finalizing.is_some_and(|f| f() != 0) }
}

const SHUTDOWN_NOTE: &str = "Python frames not read: the interpreter is shutting down (its thread states may be freed under this thread)";

/// The `atexit` callback: Python calls it on its main thread, with the GIL, before it starts to
/// finalise. From here on no reader makes a thread state; one being made is waited for.
unsafe extern "C" fn at_python_exit(_module: Obj, _args: Obj) -> Obj {
    EXITING.store(true, Ordering::SeqCst);
    let deadline = Instant::now() + MAKING_WAIT;
    while MAKING_STATE.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    match api().and_then(|api| api.at_exit.as_ref()) {
        // SAFETY: a new reference to None, as a METH_NOARGS function returns (with the GIL).
        Some(at_exit) => unsafe {
            (at_exit.inc_ref)(at_exit.none as Obj);
            at_exit.none as Obj
        },
        None => std::ptr::null_mut(),
    }
}

/// Registers `at_python_exit` with Python's `atexit`, once per process.
///
/// # Safety
/// The caller holds the GIL.
unsafe fn register_at_exit(api: &Api) {
    let Some(at_exit) = api.at_exit.as_ref() else { return };
    if AT_EXIT_REGISTERED.swap(true, Ordering::SeqCst) {
        return;
    }
    // The definition lives as long as the function object made from it: for ever.
    let def: &'static mut MethodDef =
        Box::leak(Box::new(MethodDef { name: c"cublasguard_at_exit".as_ptr(), function: Some(at_python_exit), flags: METH_NOARGS, doc: std::ptr::null() }));
    // SAFETY: CPython's API used as documented, with the GIL (the caller's contract); every new
    // reference is released; an error raised on the way is cleared.
    unsafe {
        let module = (at_exit.import)(c"atexit".as_ptr());
        let register = if module.is_null() { std::ptr::null_mut() } else { (api.get_attr)(module, c"register".as_ptr()) };
        let function = (at_exit.new_function)(def, std::ptr::null_mut(), std::ptr::null_mut());
        if !register.is_null() && !function.is_null() {
            let result = (at_exit.call)(register, function, std::ptr::null_mut::<c_void>());
            if !result.is_null() {
                (api.dec_ref)(result);
            }
        }
        for object in [function, register, module] {
            if !object.is_null() {
                (api.dec_ref)(object);
            }
        }
        if !(api.err_occurred)().is_null() {
            (api.err_clear)();
        }
    }
}

/// Where the running Python keeps its own files (`PythonPaths`), learnt once, at the first
/// frame read or trace write while the interpreter runs (no GIL needed: the interpreter
/// computed them at start), remembered for the writes after it finalised.
pub(crate) fn paths() -> Option<crate::trace::PythonPaths> {
    learn_paths();
    PATHS.get().cloned()
}

static PATHS: OnceLock<crate::trace::PythonPaths> = OnceLock::new();

/// Learns the paths if not yet known: after the first time, one load.
fn learn_paths() {
    if PATHS.get().is_none() {
        if let Some(learnt) = ask_paths() {
            let _ = PATHS.set(learnt);
        }
    }
}

fn ask_paths() -> Option<crate::trace::PythonPaths> {
    type Getter = unsafe extern "C" fn() -> *const libc::wchar_t;
    let api = api()?;
    let getters: Vec<Option<Getter>> = [c"Py_GetPrefix", c"Py_GetExecPrefix", c"Py_GetPath"]
        .into_iter()
        .map(|name| {
            let p = lookup(name);
            // SAFETY: `wchar_t *Py_GetPrefix(void)` and its siblings, in the C API since 3.0.
            (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, Getter>(p) })
        })
        .collect();
    let [Some(prefix), Some(exec_prefix), Some(path)] = getters[..] else { return None };
    // SAFETY: asked only while the interpreter runs and is not shutting down; the strings are
    // the interpreter's path configuration, set at start and NUL-terminated.
    unsafe {
        if (api.is_initialized)() == 0 || shutting_down(api) {
            return None;
        }
        let prefixes: Vec<String> = [prefix(), exec_prefix()].iter().map(|w| wide(*w)).filter(|p| !p.is_empty()).collect();
        let stdlib: Vec<String> = wide(path()).split(':').filter(|p| !p.is_empty()).map(String::from).collect();
        let mut prefixes_once = Vec::new();
        for p in prefixes {
            if !prefixes_once.contains(&p) {
                prefixes_once.push(p);
            }
        }
        let process = crate::ffi::host::process::var;
        let user_base = process("PYTHONUSERBASE")
            .filter(|b| !b.is_empty())
            .or_else(|| process("HOME").filter(|h| !h.is_empty()).map(|h| format!("{}/.local", h.trim_end_matches('/'))));
        Some(crate::trace::PythonPaths { prefixes: prefixes_once, stdlib, user_base })
    }
}

/// A NUL-terminated wide string of the interpreter's (UTF-32 on Linux), as text.
///
/// # Safety
/// `w` is null or points to a NUL-terminated `wchar_t` string.
unsafe fn wide(w: *const libc::wchar_t) -> String {
    if w.is_null() {
        return String::new();
    }
    let mut text = String::new();
    for i in 0..4096 {
        // SAFETY: within the string: it ends at its NUL, which stops the loop.
        let c = unsafe { *w.add(i) };
        if c == 0 {
            break;
        }
        text.push(char::from_u32(c as u32).unwrap_or(char::REPLACEMENT_CHARACTER));
    }
    text
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
    // SAFETY: Py_IsInitialized, Py_IsFinalizing, PyGILState_GetThisThreadState and
    // PyGILState_Check need no GIL. `read_frames` is called with the GIL held (by this thread).
    unsafe {
        if (api.is_initialized)() == 0 && !EXITING.load(Ordering::SeqCst) {
            return None;
        }
        if shutting_down(api) {
            return Some((Vec::new(), Some(format!("{thread_name}: {SHUTDOWN_NOTE}"))));
        }
        learn_paths();
        let tstate = (api.this_thread_state)();
        if tstate.is_null() {
            return Some((Vec::new(), Some(no_frames_note(thread_name))));
        }
        let frames = if api.holds_gil.is_some_and(|holds| holds() == 1) {
            register_at_exit(api);
            read_frames(api, tstate)
        } else {
            match frames_from_reader(api, tstate) {
                Ok(frames) => frames,
                Err(why) => return Some((Vec::new(), Some(format!("{thread_name}: Python frames not read: {why}")))),
            }
        };
        let note = frames.is_empty().then(|| no_frames_note(thread_name));
        Some((frames, note))
    }
}

/// The innermost frames a deferred verdict keeps from its call.
const FRAMES_KEPT_AT_CALL: usize = 12;

/// The calling thread's innermost Python frames, for a call whose NaN/Inf verdict is judged
/// later: read now, and never by waiting for the GIL. They are read from CPython's own
/// structures (`python_internals`), with the GIL held or released (PyTorch's operators and
/// ctypes.CDLL release it); where this Python's layout is not known, through its public API by a
/// thread that holds the GIL, and not at all by one that released it. `None` when the process
/// does not run Python.
pub(crate) fn frames_at_call() -> Option<crate::guard::KeptFrames> {
    let api = api()?;
    // SAFETY: as in `stack`: these four need no GIL; `innermost_frames` reads this thread's own
    // state while it is in the hook; `read_frames_upto` runs with the GIL this thread holds.
    unsafe {
        if (api.is_initialized)() == 0 && !EXITING.load(Ordering::SeqCst) {
            return None;
        }
        if shutting_down(api) {
            let thread = this_thread_name();
            return Some(crate::guard::KeptFrames::Read(Vec::new(), Some(format!("{thread}: {SHUTDOWN_NOTE}")), thread));
        }
        learn_paths();
        let tstate = (api.this_thread_state)();
        let frames = if tstate.is_null() {
            Vec::new()
        } else if let Some(frames) = super::python_internals::innermost_frames(tstate, FRAMES_KEPT_AT_CALL) {
            frames
        } else if api.holds_gil.is_some_and(|holds| holds() == 1) {
            read_frames_upto(api, tstate, FRAMES_KEPT_AT_CALL).into_iter().map(std::sync::Arc::new).collect()
        } else {
            return Some(crate::guard::KeptFrames::GilReleased);
        };
        let thread = this_thread_name();
        let note = frames.is_empty().then(|| no_frames_note(&thread));
        Some(crate::guard::KeptFrames::Read(frames, note, thread))
    }
}

/// Where the calling thread's innermost Python frames are, for a wait the hang watchdog may
/// name (`python_internals::innermost_places`): a few loads, no allocation, no GIL. Nothing
/// when the process runs no Python, it is shutting down, or this Python's layout is not known.
pub(crate) fn innermost_places() -> crate::session::waits::PythonPlaces {
    let mut places = crate::session::waits::PythonPlaces::default();
    let Some(api) = api() else { return places };
    // SAFETY: Py_IsInitialized, Py_IsFinalizing and PyGILState_GetThisThreadState need no GIL;
    // `innermost_places` reads this thread's own state while it is in the hook.
    unsafe {
        if shutting_down(api) {
            return places;
        }
        let tstate = (api.this_thread_state)();
        if !tstate.is_null() {
            super::python_internals::innermost_places(tstate, &mut places);
        }
    }
    places
}

/// The frames at `places`, kept by a thread that still waits (the watchdog's report of it).
pub(crate) fn describe_places(places: &crate::session::waits::PythonPlaces) -> Vec<PythonFrame> {
    if places.count == 0 {
        return Vec::new();
    }
    // SAFETY: the waiting thread's frames hold their code objects while it waits; the
    // watchdog names only threads it has just read as waiting.
    unsafe { super::python_internals::resolve_places(places) }
}

/// The calling thread's name, asked once per thread (a system call): programs name their
/// threads when they start them (PyTorch's autograd workers, Python's `threading` from 3.14).
fn this_thread_name() -> String {
    thread_local! {
        static NAME: std::cell::OnceCell<String> = const { std::cell::OnceCell::new() };
    }
    NAME.try_with(|name| name.get_or_init(thread_name).clone()).unwrap_or_else(|_| thread_name())
}

/// The frames of the thread whose state is `tstate`, innermost first.
///
/// # Safety
/// The caller holds the GIL, and `tstate`'s thread runs no Python code meanwhile.
unsafe fn read_frames(api: &Api, tstate: Obj) -> Vec<PythonFrame> {
    // SAFETY: the caller's contract, passed on.
    unsafe { read_frames_upto(api, tstate, MAX_FRAMES) }
}

/// As `read_frames`, the innermost `limit` frames.
///
/// # Safety
/// As `read_frames`.
unsafe fn read_frames_upto(api: &Api, tstate: Obj, limit: usize) -> Vec<PythonFrame> {
    // SAFETY: every call is CPython's public API, used as documented under the GIL (the
    // caller's contract): every new reference (frames, code objects, attributes) is released
    // with Py_DecRef; borrowed strings are copied before their object is released.
    unsafe {
        let mut frames = Vec::new();
        let mut frame = (api.thread_frame)(tstate);
        while !frame.is_null() && frames.len() < limit {
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
        frames
    }
}

/// Where the faulting thread and the reader thread stand.
enum Phase {
    /// The reader waits for the GIL.
    Waiting,
    /// The reader holds the GIL and reads: it finishes without waiting for anything.
    Reading,
    Done(Vec<PythonFrame>),
    /// The faulting thread went on; the reader, once it has the GIL, must not touch its state.
    Abandoned,
}

struct Request {
    api: &'static Api,
    tstate: usize,
    phase: Mutex<Phase>,
    changed: Condvar,
}

/// Reads the frames of `tstate` (this thread's state) on a reader thread that takes the GIL,
/// waiting at most GIL_WAIT for it to get the GIL.
fn frames_from_reader(api: &'static Api, tstate: Obj) -> Result<Vec<PythonFrame>, String> {
    let request = Arc::new(Request { api, tstate: tstate as usize, phase: Mutex::new(Phase::Waiting), changed: Condvar::new() });
    let arg = Arc::into_raw(Arc::clone(&request)) as *mut c_void;
    // SAFETY: a detached thread with default attributes; `reader` takes over the reference
    // `arg` holds. Its C-unwind start routine has the ABI pthread_create calls (the type
    // differs only in what an unwind may do).
    let started = unsafe {
        let start: extern "C" fn(*mut c_void) -> *mut c_void = std::mem::transmute(reader as extern "C-unwind" fn(*mut c_void) -> *mut c_void);
        let mut thread: libc::pthread_t = std::mem::zeroed();
        let rc = super::thread::spawn_with_signals_blocked(|| libc::pthread_create(&mut thread, std::ptr::null(), start, arg));
        if rc == 0 {
            libc::pthread_detach(thread);
        }
        rc == 0
    };
    if !started {
        // SAFETY: the reference handed to the thread that was never started.
        drop(unsafe { Arc::from_raw(arg as *const Request) });
        return Err("no thread could be started to take the GIL".into());
    }
    let deadline = Instant::now() + GIL_WAIT;
    let mut phase = request.phase.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        match &*phase {
            Phase::Done(_) => break,
            Phase::Waiting => {
                // The interpreter began to shut down: the reader will not get the GIL (or is
                // ended taking it), and the fault is kept without frames, now.
                // SAFETY: `api` is the running Python's.
                if unsafe { shutting_down(api) } {
                    *phase = Phase::Abandoned;
                    return Err(SHUTDOWN_NOTE.trim_start_matches("Python frames not read: ").to_string());
                }
                let left = deadline.saturating_duration_since(Instant::now()).min(Duration::from_millis(10));
                if deadline.saturating_duration_since(Instant::now()).is_zero() {
                    *phase = Phase::Abandoned;
                    return Err(format!(
                        "the GIL was not taken within {} s (another thread holds it, perhaps waiting for a lock this one holds, \
                         or the interpreter is shutting down); the guard does not wait for it",
                        GIL_WAIT.as_secs()
                    ));
                }
                phase = request.changed.wait_timeout(phase, left).unwrap_or_else(|e| e.into_inner()).0;
            }
            Phase::Reading | Phase::Abandoned => phase = request.changed.wait(phase).unwrap_or_else(|e| e.into_inner()),
        }
    }
    match std::mem::replace(&mut *phase, Phase::Abandoned) {
        Phase::Done(frames) => Ok(frames),
        _ => Ok(Vec::new()),
    }
}

/// The reader thread: takes the GIL, reads the faulting thread's frames unless it has gone on.
extern "C-unwind" fn reader(arg: *mut c_void) -> *mut c_void {
    // Only a raw pointer is live across PyEval_RestoreThread: a thread CPython ends there with
    // pthread_exit unwinds through no Rust destructor (and leaks one small request).
    let api: &'static Api = {
        // SAFETY: `arg` is the reference frames_from_reader handed over; it stays alive until
        // rebuilt below.
        unsafe { (*(arg as *const Request)).api }
    };
    // A thread state is made only while the interpreter is not shutting down, and the `atexit`
    // callback waits for one being made: never one made as the interpreter frees them.
    MAKING_STATE.fetch_add(1, Ordering::SeqCst);
    // SAFETY: `api` is the running Python's; PyInterpreterState_Main and PyThreadState_New
    // need no GIL.
    let tstate = unsafe {
        if shutting_down(api) {
            std::ptr::null_mut()
        } else {
            let interpreter = (api.main_interpreter)();
            if interpreter.is_null() {
                std::ptr::null_mut()
            } else {
                (api.new_thread_state)(interpreter)
            }
        }
    };
    MAKING_STATE.fetch_sub(1, Ordering::SeqCst);
    if tstate.is_null() {
        // The faulting thread sees the shutdown itself (or times out) and goes on.
        // SAFETY: the reference handed over by frames_from_reader, rebuilt once and dropped.
        drop(unsafe { Arc::from_raw(arg as *const Request) });
        return std::ptr::null_mut();
    }
    // SAFETY: takes the GIL with the thread state just made for this thread (CPython ends the
    // thread here if the interpreter is finalising: only a raw pointer is live across it).
    unsafe { (api.restore_thread)(tstate) };
    // SAFETY: the reference handed over by frames_from_reader, rebuilt once.
    let request = unsafe { Arc::from_raw(arg as *const Request) };
    // SAFETY: this thread holds the GIL.
    unsafe { register_at_exit(api) };
    let go_on = {
        let mut phase = request.phase.lock().unwrap_or_else(|e| e.into_inner());
        let waiting = matches!(*phase, Phase::Waiting);
        if waiting {
            *phase = Phase::Reading;
        }
        waiting
    };
    if go_on {
        // SAFETY: this thread holds the GIL; the faulting thread waits for this one (it cannot
        // give up while Reading) and runs no Python code, so its state and frames are stable.
        let frames = unsafe { read_frames(api, request.tstate as Obj) };
        *request.phase.lock().unwrap_or_else(|e| e.into_inner()) = Phase::Done(frames);
        request.changed.notify_all();
    }
    drop(request);
    // SAFETY: the thread state this thread made and holds the GIL with: cleared, then deleted,
    // which releases the GIL.
    unsafe {
        (api.clear_thread_state)(tstate);
        (api.delete_current)();
    }
    std::ptr::null_mut()
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
