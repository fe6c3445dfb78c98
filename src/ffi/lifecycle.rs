//! The guard's life in a process: the session created by the first hook, faults written to
//! the trace as they are found, the final trace at exit, and the one-line warnings.

use parking_lot::Mutex;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use super::{backtrace, crash, device, environment, process};
use crate::check::Finding;
use crate::config::{self, Config, OnFault};
use crate::session::Session;
use crate::trace::{self, CudaErrorRecord, Fault, MemoryState};

static SESSION: OnceLock<Session> = OnceLock::new();
static DISABLED: AtomicBool = AtomicBool::new(false);
static WRITING: Mutex<()> = Mutex::new(());
static ARMED: AtomicBool = AtomicBool::new(false);
static EXITED: AtomicBool = AtomicBool::new(false);

/// One line on stderr; a closed stderr is not the guard's business.
pub fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Says `line` the first time `flag` is seen unset.
pub fn warn_once(flag: &AtomicBool, line: &str) {
    if !flag.swap(true, Ordering::Relaxed) {
        say(line);
    }
}

/// The session, created on first use; `None` once the guard has disabled itself, or in a
/// set-uid/set-gid process.
pub fn session() -> Option<&'static Session> {
    if DISABLED.load(Ordering::Relaxed) {
        return None;
    }
    if process::is_privileged() {
        DISABLED.store(true, Ordering::Relaxed);
        return None;
    }
    let s = SESSION.get_or_init(start);
    if !ARMED.swap(true, Ordering::SeqCst) {
        arm(s);
    }
    Some(s)
}

/// The session if one started, without starting one (for signal and fork handlers).
pub fn existing_session() -> Option<&'static Session> {
    if DISABLED.load(Ordering::Relaxed) {
        return None;
    }
    SESSION.get()
}

/// What the session needs once it exists: the fatal-signal handlers and the fork handlers.
fn arm(s: &'static Session) {
    crash::install(s, &s.trace(environment::collect(s.driver_error(), true)));
    // SAFETY: the handlers are plain extern "C" functions that never unwind.
    unsafe {
        libc::pthread_atfork(Some(before_fork), Some(after_fork_in_parent), Some(after_fork_in_child));
        // Registered now, after main started, this exit handler runs before the loader's
        // _dl_fini tears the CUDA libraries down (the one registered when the library was
        // loaded runs after it, and only covers processes whose session never started).
        libc::atexit(on_exit);
    }
}

thread_local! {
    /// The forking thread's hold on every lock of the guard, from before fork() to after it.
    static FORK_HOLD: std::cell::RefCell<Option<Box<dyn std::any::Any>>> = const { std::cell::RefCell::new(None) };
}

extern "C" fn before_fork() {
    let _ = std::panic::catch_unwind(|| {
        if let Some(s) = existing_session() {
            let hold: Box<dyn std::any::Any> = Box::new((WRITING.lock(), s.hold_for_fork()));
            let _ = FORK_HOLD.try_with(|h| *h.borrow_mut() = Some(hold));
        }
    });
}

extern "C" fn after_fork_in_parent() {
    let _ = FORK_HOLD.try_with(|h| h.borrow_mut().take());
}

extern "C" fn after_fork_in_child() {
    let _ = std::panic::catch_unwind(|| {
        let _ = FORK_HOLD.try_with(|h| h.borrow_mut().take());
        process::reset_thread_id();
        let Some(s) = existing_session() else { return };
        let mut identity = s.identity();
        let parent_path = identity.trace_path.clone();
        identity.process.pid = std::process::id();
        identity.process.started_at_ns = process::now_ns();
        identity.process.started_at = process::rfc3339(identity.process.started_at_ns);
        let mut path = config::expand_trace_path(&s.config.trace_pattern, identity.process.pid, &identity.process.hostname, identity.process.rank);
        if path == parent_path {
            // A pattern without %p: the child must still never write the parent's file.
            path = match path.strip_suffix(".json") {
                Some(stem) => format!("{stem}-{}.json", identity.process.pid),
                None => format!("{path}-{}", identity.process.pid),
            };
        }
        identity.trace_path = path.clone();
        s.start_child(identity);
        crash::update_path(&path);
    });
}

/// After an internal error: every later call passes straight through.
pub fn disable(reason: &str) {
    if !DISABLED.swap(true, Ordering::Relaxed) {
        say(&format!("cublasguard: {reason}; the guard is off for the rest of this process, calls pass through"));
    }
}

fn start() -> Session {
    let (config, problems) = Config::from_lookup(process::var);
    for problem in problems {
        say(&format!("cublasguard: {problem}"));
    }
    let process = process::describe();
    let path = config::expand_trace_path(&config.trace_pattern, process.pid, &process.hostname, process.rank);
    if !config.quiet {
        say(&format!(
            "cublasguard: guarding pid {} (checks: {}; on fault: {}; trace: {})",
            process.pid,
            config.checks.label(),
            config.on_fault.label(),
            path
        ));
    }
    Session::new(config, super::hooks::HOOK_NAMES, process, path)
}

/// A fault with the facts every kind shares; the caller adds what is specific to its call.
pub fn new_fault(s: &Session, seq: u64, api: &str, finding: Finding, status: i32, status_name: &str) -> Fault {
    let known = s.known_error();
    let memory_info = if known.is_none() && s.driver_error().is_none() { device::memory_info() } else { None };
    let totals = s.allocations.totals();
    Fault {
        seq,
        api: api.to_string(),
        kind: finding.kind,
        message: finding.message,
        status,
        status_name: status_name.to_string(),
        error: finding.error.map(|(code, call)| CudaErrorRecord {
            code,
            name: crate::cuda::cuda_error_name(code).to_string(),
            call: call.to_string(),
        }),
        cause: None,
        thread: process::thread_id(),
        stream: None,
        time_ns: process::now_ns(),
        handle: None,
        args: Default::default(),
        operands: Vec::new(),
        memory: Some(MemoryState {
            free: memory_info.map(|m| m.0),
            total: memory_info.map(|m| m.1),
            tracked_live_bytes: totals.bytes,
            tracked_live_count: totals.count,
        }),
        backtrace: backtrace::capture(),
    }
}

/// Records a fault: stderr (capped), the trace on disk, and `abort` when asked for. Past
/// the fault cap the trace is not rewritten (its counts are brought up to date at exit).
pub fn report(s: &Session, fault: Fault) {
    let recorded = s.add_fault(fault);
    for line in &recorded.lines {
        say(line);
    }
    if recorded.stored || s.config.on_fault == OnFault::Abort {
        write_trace(s);
    }
    if s.config.on_fault == OnFault::Abort {
        say("cublasguard: aborting at the first fault (CUBLASGUARD_ON_FAULT=abort)");
        // SAFETY: abort has no preconditions.
        unsafe { libc::abort() };
    }
}

/// Brings a fault already reported (before its call ran) up to date with how the call ended.
pub fn amend(s: &Session, fault: Fault) {
    if s.replace_fault(fault) {
        write_trace(s);
    }
}

static WRITE_FAILED: AtomicBool = AtomicBool::new(false);

pub fn write_trace(s: &Session) {
    write_trace_with(s, true);
}

/// `live`: the CUDA libraries may be called for their versions (false at exit).
fn write_trace_with(s: &Session, live: bool) {
    let _one_writer = WRITING.lock();
    let trace = s.trace(environment::collect(s.driver_error(), live));
    let path = s.trace_path();
    if let Err(e) = trace::write_atomic(Path::new(&path), &trace) {
        warn_once(&WRITE_FAILED, &format!("cublasguard: cannot write the trace to {path}: {e}"));
    }
    crash::update_head(&trace);
}

#[cfg_attr(test, allow(dead_code))]
fn at_exit() {
    let Some(_inside) = super::reentry::Reentry::enter() else { return };
    if DISABLED.load(Ordering::Relaxed) || process::is_privileged() || EXITED.swap(true, Ordering::SeqCst) {
        return;
    }
    let cuda_loaded = !environment::cuda_libraries().is_empty();
    // A process that never reached a hook still gets its trace when one was asked for, if it
    // used CUDA at all: a shell wrapping the program must stay silent.
    if SESSION.get().is_none() && (process::var("CUBLASGUARD_TRACE").is_none() || !cuda_loaded) {
        return;
    }
    // Not `session()`: arming it would call into CUDA libraries that may be torn down by now.
    let s = SESSION.get_or_init(start);
    if !s.should_write_at_exit(cuda_loaded) {
        return;
    }
    write_trace_with(s, false);
    if !WRITE_FAILED.load(Ordering::Relaxed) && (s.fault_count() > 0 || !s.config.quiet) {
        say(&format!(
            "cublasguard: {} fault(s) in {} intercepted call(s); trace: {}",
            s.fault_count(),
            s.total_calls(),
            s.trace_path()
        ));
    }
}

#[cfg_attr(test, allow(dead_code))]
extern "C" fn on_exit() {
    if std::panic::catch_unwind(at_exit).is_err() {
        DISABLED.store(true, Ordering::Relaxed);
    }
}

/// Runs when the dynamic loader maps the library (LD_PRELOAD): registers the exit handler.
/// The same object code also sits in the `cublasguard` CLI (through the rlib); only the
/// preloaded shared library registers.
#[cfg_attr(test, allow(dead_code))]
extern "C" fn on_load() {
    let own = {
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: dladdr only reads loader tables.
        let found = unsafe { libc::dladdr(on_load as *const libc::c_void, &mut info) } != 0;
        found && !info.dli_fname.is_null() && {
            let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) }.to_string_lossy();
            super::real::file_name(&name).starts_with("libcublasguard")
        }
    };
    if own {
        // SAFETY: on_exit is a plain extern "C" fn that never unwinds.
        unsafe { libc::atexit(on_exit) };
    }
}

#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;
