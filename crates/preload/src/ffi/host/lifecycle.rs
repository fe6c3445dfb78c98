//! The guard's life in a process: the session created by the first hook, faults written to
//! the trace as they are found, the final trace at exit, and the one-line warnings.

use std::cell::RefCell;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::OnceLock;

use super::{backtrace, claim, crash, environment, process};
use crate::config::{self, Config};
use crate::ffi::intercept::loader_gate;
use crate::ffi::intercept::reentry::defer_cancel;
use crate::guard::{Caller, Outlet};
use crate::session::{ChildSeed, Recorded, Session};
use crate::trace;

static SESSION: OnceLock<Session> = OnceLock::new();
/// A forked child's own session (the parent's `SESSION` is left as the fork found it: the
/// child never touches a lock another parent thread may have held).
static CHILD_SESSION: AtomicPtr<Session> = AtomicPtr::new(std::ptr::null_mut());
static DISABLED: AtomicBool = AtomicBool::new(false);
/// The session in force once it is armed and while the guard is on: what a hooked call reads
/// first, one load for the checks `session` makes (off, privileged, started, armed, forked).
static ACTIVE: AtomicPtr<Session> = AtomicPtr::new(std::ptr::null_mut());
static ARMED: AtomicBool = AtomicBool::new(false);
static EXITED: AtomicBool = AtomicBool::new(false);

/// Where the guard's findings leave the process: stderr, the trace on disk, abort; and, as the
/// `Caller`, the thread a hooked call runs on. What can
/// block or take long (a write, a backtrace, Python's frames, NVML) holds a cancellation request
/// back until it is done (`defer_cancel`): a thread cancelled at a fault is cancelled after its
/// fault is out, not in the middle of the write.
pub(crate) struct RealOutlet;

impl Outlet for RealOutlet {
    fn publish(&self, session: &Session, recorded: &Recorded) {
        defer_cancel(|| {
            for line in &recorded.lines {
                say(line);
            }
            if let Some(index) = recorded.index {
                session.with_fault(index, |fault| crash::publish_fault(index, fault));
            }
            if recorded.rewrite {
                write_trace(session);
            }
        })
    }
    fn describe_call_site(&self, site: &crate::session::call_site::CallSite) -> Vec<String> {
        defer_cancel(|| backtrace::describe_call_site(site))
    }
    fn abort(&self) {
        say("cublasguard: aborting at the first fault (CUBLASGUARD_ON_FAULT=abort)");
        // SAFETY: abort has no preconditions.
        unsafe { libc::abort() };
    }
    fn now_ns(&self) -> u64 {
        process::now_ns()
    }
    fn kernel_name(&self, func: u64) -> Option<String> {
        defer_cancel(|| crate::ffi::host::backtrace::kernel_name(func))
    }
    fn create_file(
        &self,
        dir: &str,
        name: &str,
        extension: &str,
        fill: &mut dyn FnMut(&mut std::io::BufWriter<&std::fs::File>) -> std::io::Result<()>,
    ) -> std::io::Result<String> {
        defer_cancel(|| super::files::create(dir, name, extension, fill))
    }
    fn gpu_health(&self) -> Option<crate::gpu_health::GpuHealth> {
        defer_cancel(|| Some(super::nvml::snapshot(true)))
    }
    fn describe_python_places(&self, places: &crate::session::waits::PythonPlaces) -> Vec<crate::trace::PythonFrame> {
        defer_cancel(|| crate::ffi::host::python::describe_places(places))
    }
}

/// The calling thread, read where it runs: its stack, its call site, its id and its Python
/// frames (the backtrace and Python's frames held back from a cancellation as the outlet's
/// writes are).
impl Caller for RealOutlet {
    fn backtrace(&self) -> Vec<String> {
        defer_cancel(backtrace::capture)
    }
    fn call_site(&self, frame: crate::session::call_site::HookFrame) -> crate::session::call_site::CallSite {
        crate::ffi::host::call_site::read(frame)
    }
    fn thread_id(&self) -> u32 {
        process::thread_id()
    }
    fn python_stack(&self) -> Option<(Vec<crate::trace::PythonFrame>, Option<String>, String)> {
        defer_cancel(|| {
            let thread = crate::ffi::host::python::thread_name();
            crate::ffi::host::python::stack(&thread).map(|(frames, note)| (frames, note, thread))
        })
    }
    fn python_frames_at_call(&self) -> Option<crate::guard::KeptFrames> {
        crate::ffi::host::python::frames_at_call()
    }
    fn python_places(&self) -> crate::session::waits::PythonPlaces {
        crate::ffi::host::python::innermost_places()
    }
}

/// Runs `body` with a call of the guard's own (a device synchronisation that returned
/// `status`, not counted, never the program's) on this thread's state: how the exit and the
/// verdict thread reach the guard's checks. Nothing runs once the thread's state is gone.
pub(crate) fn as_guard_sync(s: &'static Session, status: i32, body: impl FnOnce(&crate::guard::Call<i32>)) {
    let _ = crate::ffi::host::thread::PER_THREAD.try_with(|t| {
        let device = crate::ffi::cuda_client::device::RealDevice::new(s, t);
        let forward = || status;
        body(&crate::guard::Call::uncounted(s, crate::Hook::cudaDeviceSynchronize, &device, (&RealOutlet, &RealOutlet), &forward, &t.memo));
    });
}

/// The session in force: a forked child's own, else the one this process started.
fn current() -> Option<&'static Session> {
    let child = CHILD_SESSION.load(Ordering::Acquire);
    if !child.is_null() {
        // SAFETY: a child session is leaked when installed and never freed.
        return Some(unsafe { &*child });
    }
    SESSION.get()
}

/// One line on the stderr the program started with (see `stderr`).
pub(crate) fn say(line: &str) {
    crate::ffi::host::stderr::line(line);
}

/// Says `line` the first time `flag` is seen unset.
pub(crate) fn warn_once(flag: &AtomicBool, line: &str) {
    if !flag.swap(true, Ordering::Relaxed) {
        say(line);
    }
}

/// The session, created on first use; `None` once the guard has disabled itself, or in a
/// set-uid/set-gid process.
pub(crate) fn session() -> Option<&'static Session> {
    armed_session().or_else(session_slow)
}

/// The session once armed, else `None` (nothing started, nothing asked: one atomic load).
#[inline(always)]
pub(crate) fn armed_session() -> Option<&'static Session> {
    let active = ACTIVE.load(Ordering::Acquire);
    // SAFETY: ACTIVE holds only sessions that live to the end of the process (the static one,
    // or a leaked child session).
    (!active.is_null()).then(|| unsafe { &*active })
}

/// `session` until the session is armed (and after the guard turned itself off).
#[cold]
fn session_slow() -> Option<&'static Session> {
    if DISABLED.load(Ordering::Relaxed) {
        return None;
    }
    if process::is_privileged() {
        DISABLED.store(true, Ordering::Relaxed);
        return None;
    }
    let s = match current() {
        Some(s) => s,
        // Its start writes and reads files: a cancellation request waits until it is done.
        None => crate::ffi::intercept::reentry::defer_cancel(|| SESSION.get_or_init(start)),
    };
    if !ARMED.load(Ordering::Acquire) && !ARMED.swap(true, Ordering::SeqCst) {
        crate::ffi::intercept::reentry::defer_cancel(|| arm(s));
        // From now on a call finds the session with one load; `disable` takes it back (and a
        // disable that raced with this store is seen here).
        ACTIVE.store(s as *const Session as *mut Session, Ordering::Release);
        if DISABLED.load(Ordering::SeqCst) {
            ACTIVE.store(std::ptr::null_mut(), Ordering::SeqCst);
        }
    }
    Some(s)
}

/// The session if one started, without starting one (for signal and fork handlers).
pub(crate) fn existing_session() -> Option<&'static Session> {
    if DISABLED.load(Ordering::Relaxed) {
        return None;
    }
    current()
}

/// What the session needs once it exists: the fatal-signal handlers and the fork handlers.
fn arm(s: &'static Session) {
    // Before the session is published: the lean path's first calls find the measurement of
    // the counter's rate under way.
    super::stopwatch::begin_measuring();
    // The crash writer's head says NVML is starting; the NVML thread makes it again as that
    // changes, so it starts once the head is there.
    super::nvml::prepare(s.config.nvml, &s.config.kernel_log);
    crash::install(s, &s.trace(environment::collect(s, true)));
    super::nvml::start();
    super::snapshot::start();
    // SAFETY: the handlers are plain extern "C" functions that never unwind.
    unsafe {
        libc::pthread_atfork(Some(before_fork), Some(after_fork_in_parent), Some(after_fork_in_child));
        // Registered now, after main started, this exit handler runs before the loader's
        // _dl_fini tears the CUDA libraries down (the one registered when the library was
        // loaded runs after it, and only covers processes whose session never started).
        register_exit_handler();
    }
}

thread_local! {
    /// What the child of the fork under way starts from, prepared by the forking thread.
    static CHILD_SEED: RefCell<Option<ChildSeed>> = const { RefCell::new(None) };
}

/// Before fork(): the child's session is prepared here, in the parent, where locks are
/// ordinary. Nothing is held across fork().
extern "C" fn before_fork() {
    let _ = std::panic::catch_unwind(|| {
        if let Some(s) = existing_session() {
            let seed = s.prepare_child(environment::collect(s, false));
            let _ = CHILD_SEED.try_with(|slot| *slot.borrow_mut() = Some(seed));
        }
    });
    loader_gate::close_for_fork();
}

extern "C" fn after_fork_in_parent() {
    loader_gate::reopen_in_parent();
    let _ = CHILD_SEED.try_with(|slot| slot.borrow_mut().take());
}

/// In the child: a session of its own from the seed. The parent's session stays untouched
/// (its locks may be held by parent threads that do not exist here).
extern "C" fn after_fork_in_child() {
    // Until the child's own session is in force, a call takes the slow way to it.
    let was_active = !ACTIVE.swap(std::ptr::null_mut(), Ordering::SeqCst).is_null();
    loader_gate::reopen_in_child();
    crate::ffi::host::python::after_fork_in_child();
    let _ = std::panic::catch_unwind(|| {
        process::reset_thread_id();
        let Some(seed) = CHILD_SEED.try_with(|slot| slot.borrow_mut().take()).ok().flatten() else { return };
        let parent = seed.identity();
        let mut identity = parent.clone();
        identity.process.pid = std::process::id();
        identity.process.started_at_ns = process::now_ns();
        identity.process.started_at = process::rfc3339(identity.process.started_at_ns);
        let path = config::expand_trace_path(&seed.config().trace_pattern, identity.process.pid, &identity.process.hostname, identity.process.rank);
        // A pattern without %p: the child must still never write the parent's file.
        let parents = path == parent.trace_path;
        let path = claim::own_trace_path(&path, identity.process.pid, identity.process.run_id.as_deref(), parents);
        identity.trace_path = path.clone();
        let environment = seed.environment.clone();
        let child: &'static Session = Box::leak(Box::new(seed.into_session(identity)));
        CHILD_SESSION.store(child as *const Session as *mut Session, Ordering::Release);
        if was_active && !DISABLED.load(Ordering::SeqCst) {
            ACTIVE.store(child as *const Session as *mut Session, Ordering::Release);
        }
        crash::update_path(&path);
        // The crash writer's head now names the child, not the parent and its faults.
        crash::forget_faults();
        crash::update_prefix(&child.trace(environment));
    });
}

/// Every later call passes straight through, silently: a second copy of the guard in the
/// process defers to the first.
pub(crate) fn pass_through_in_this_process() {
    DISABLED.store(true, Ordering::SeqCst);
    ACTIVE.store(std::ptr::null_mut(), Ordering::SeqCst);
}

/// After an internal error: every later call passes straight through.
pub(crate) fn disable(reason: &str) {
    let was = DISABLED.swap(true, Ordering::SeqCst);
    ACTIVE.store(std::ptr::null_mut(), Ordering::SeqCst);
    if !was {
        say(&format!("cublasguard: {reason}; the guard is off for the rest of this process, calls pass through"));
    }
}

fn start() -> Session {
    let (mut config, problems) = Config::from_lookup(process::var);
    for problem in problems {
        say(&format!("cublasguard: {problem}"));
    }
    // Relative paths are meant from where the process started, not from wherever it has
    // changed to by its first CUDA call (Hydra changes folder; daemons chdir("/")).
    if let Some(cwd) = process::start_dir() {
        config.trace_pattern = config::absolute_pattern(&config.trace_pattern, &cwd);
        config.dump_dir = config.dump_dir.map(|d| config::absolute_pattern(&d, &cwd));
    }
    let process = process::describe();
    let path = config::expand_trace_path(&config.trace_pattern, process.pid, &process.hostname, process.rank);
    if config.trace_requested {
        // The folder a user named is made now, so that even a crash record has a place.
        if let Some(dir) = Path::new(&path).parent().filter(|d| !d.as_os_str().is_empty()) {
            // A failure is said once, when the trace cannot be written.
            let _ = std::fs::create_dir_all(dir);
        }
    }
    // Another live process writes this path (a fixed path, and this process was started by it
    // through fork + exec, say), or an earlier one of this run left its trace there: this one
    // writes its own, as a forked child does.
    let path = claim::own_trace_path(&path, process.pid, process.run_id.as_deref(), false);
    if !config.quiet {
        // Unasked for, a trace is written only when there is something to read in it
        // (`Session::should_write_at_exit`, the crash writer): the banner must not promise one.
        let when = if config.trace_requested { "" } else { ", written at a fault" };
        say(&format!(
            "cublasguard: guarding pid {} (checks: {}; on fault: {}; trace: {path}{when})",
            process.pid,
            config.checks.label(),
            config.on_fault.label()
        ));
    }
    let session = Session::new(config, crate::hook_list::HOOK_NAMES, process, path);
    if let Some(from) = session.config.origin_from.clone() {
        let targets = origin_targets_from(&from, session.config.quiet);
        let _ = session.origin_targets.set(targets);
    }
    session
}

/// The first run's memory to watch (CUBLASGUARD_ORIGIN_FROM), or none, said once, when its
/// trace cannot be read or names none: origin mode then watches every operand, as without it.
fn origin_targets_from(path: &str, quiet: bool) -> Vec<crate::session::origin_targets::OriginTarget> {
    let fallback = "origin mode watches the operands guarded calls use instead";
    match trace::read(Path::new(path)) {
        Ok(first) => {
            let targets = crate::session::origin_targets::targets_of(&first);
            if !quiet {
                match targets.len() {
                    0 => say(&format!(
                        "cublasguard: CUBLASGUARD_ORIGIN_FROM={path}: no consumed NaN/Inf there in memory a rerun can find again \
                         (a nonfinite_input fault's operand in a numbered allocation; traces before 0.5 number none): {fallback}"
                    )),
                    n => say(&format!(
                        "cublasguard: origin mode from {path}: watching the {n} piece(s) of memory its NaN/Inf was consumed from, from their allocation on"
                    )),
                }
            }
            targets
        }
        Err(e) => {
            warn_once(&ORIGIN_FROM_UNREADABLE, &format!("cublasguard: CUBLASGUARD_ORIGIN_FROM={path} cannot be read ({e}): {fallback}"));
            Vec::new()
        }
    }
}

static ORIGIN_FROM_UNREADABLE: AtomicBool = AtomicBool::new(false);

static WRITE_FAILED: AtomicBool = AtomicBool::new(false);

pub(crate) fn write_trace(s: &Session) {
    write_trace_with(s, true);
}

/// `live`: the CUDA libraries may be called for their versions (false at exit).
fn write_trace_with(s: &Session, live: bool) {
    if !of_this_process(s) {
        return;
    }
    let _one_writer = s.writer_lock();
    // Name the recorded launches' kernels (once per address) for the trace.
    s.recorder.visit(|c| {
        if let crate::recorder::CallArgs::Launch { func, .. } = c.args {
            s.kernels.name(func, crate::ffi::host::backtrace::kernel_name);
        }
    });
    keep_claim(s);
    let trace = s.trace(environment::collect(s, live));
    let path = s.trace_path();
    match trace::write_atomic_with(Path::new(&path), &trace, crash::RenameTicket::take) {
        Ok(_) => remember_written(&path),
        Err(e) => warn_once(&WRITE_FAILED, &format!("cublasguard: cannot write the trace to {path}: {e}")),
    }
    crash::update_prefix(&trace);
}

/// Whether `s` is this process's session: a child forked without the guard's fork handlers (a
/// clone system call, `_Fork`) runs on a copy of its parent's, whose trace (the parent's path,
/// the faults judged by the fork) it must never write over the parent's own.
fn of_this_process(s: &Session) -> bool {
    s.identity().process.pid == std::process::id()
}

static CLAIM_LOST: AtomicBool = AtomicBool::new(false);
/// The file this process last wrote its trace to, as `file_identity` tells it (all 0: none).
static WRITTEN: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];

/// The device, inode, size and modification time (ns) of the file at `path`, never through a
/// link: an inode number alone may be given again to another process's file once this one's
/// was replaced.
fn file_identity(path: &str) -> Option<[u64; 4]> {
    std::fs::symlink_metadata(path).ok().map(|m| {
        use std::os::unix::fs::MetadataExt as _;
        [m.dev(), m.ino(), m.size(), (m.mtime() as u64).wrapping_mul(1_000_000_000).wrapping_add(m.mtime_nsec() as u64)]
    })
}

fn remember_written(path: &str) {
    if let Some(identity) = file_identity(path) {
        for (slot, value) in WRITTEN.iter().zip(identity) {
            slot.store(value, Ordering::SeqCst);
        }
    }
}

/// Before a trace is written: when the program closed the socket that claims the trace path
/// (`close_range` in a daemon detaching or a `subprocess` child), another process may have
/// taken the path since. The claim is made again when no live process holds the path and the
/// file there is still the one this process wrote last (or none is there and it wrote none):
/// nobody else wrote it meanwhile. Otherwise this one's trace moves to a name of its own
/// (`-PID`), which the crash writer takes too; a `-PID` name is claimed again.
fn keep_claim(s: &Session) {
    if claim::still_held() {
        return;
    }
    let identity = s.identity();
    let process = &identity.process;
    let current = identity.trace_path;
    let requested = config::expand_trace_path(&s.config.trace_pattern, process.pid, &process.hostname, process.rank);
    if current != requested {
        claim::claim_again(&current);
        return;
    }
    let written = WRITTEN.each_ref().map(|slot| slot.load(Ordering::SeqCst));
    let untouched = match file_identity(&current) {
        Some(found) => found == written,
        None => written == [0; 4],
    };
    if untouched && claim::claim_again(&current) {
        return;
    }
    let moved = claim::own_trace_path(&requested, process.pid, process.run_id.as_deref(), true);
    warn_once(
        &CLAIM_LOST,
        &format!("cublasguard: the program closed the guard's claim on {current} (its descriptors were closed); another process may write there, so this one's trace goes to {moved}"),
    );
    s.move_trace(moved.clone());
    crash::update_path(&moved);
}

/// The crash writer's head made again from the trace as it is now (the NVML thread, when the
/// GPU's health changed: NVML started, an Xid arrived).
pub(crate) fn republish_crash_prefix() {
    let Some(s) = existing_session() else { return };
    let _one_writer = s.writer_lock();
    crash::update_prefix(&s.trace(environment::collect(s, false)));
}

extern "C" {
    /// glibc's `on_exit`: an exit handler that is told the exit status (`atexit`'s is not).
    fn on_exit(function: extern "C" fn(libc::c_int, *mut libc::c_void), arg: *mut libc::c_void) -> libc::c_int;
}

/// Registers `exit_handler` to run at `exit()` (and at a return from `main`), with the status.
fn register_exit_handler() {
    // SAFETY: exit_handler is a plain extern "C" fn that never unwinds; the argument is unused.
    unsafe { on_exit(exit_handler, std::ptr::null_mut()) };
}

#[cfg_attr(test, allow(dead_code))]
fn at_exit(status: i32) {
    // From here on no Python frames are read: the interpreter has finalised by now.
    crate::ffi::host::python::process_exiting();
    let Some(_inside) = crate::ffi::intercept::reentry::Reentry::enter() else { return };
    if DISABLED.load(Ordering::Relaxed) || process::is_privileged() || EXITED.swap(true, Ordering::SeqCst) {
        return;
    }
    let cuda_loaded = !environment::cuda_libraries().is_empty();
    // A process that never reached a hook still gets its trace when one was asked for, if it
    // used CUDA at all: a shell wrapping the program must stay silent.
    if current().is_none() && (process::var("CUBLASGUARD_TRACE").is_none() || !cuda_loaded) {
        return;
    }
    // Not `session()`: arming it would call into CUDA libraries that may be torn down by now.
    let s = match current() {
        Some(s) => s,
        None => SESSION.get_or_init(start),
    };
    if !of_this_process(s) {
        return; // the parent's session, copied: its record and its exit line are the parent's
    }
    // A failed capability probe explains a failing exit: it is written as the fault.
    if let Some(recorded) = s.probe_at_exit(status, process::now_ns()) {
        for line in &recorded.lines {
            say(line);
        }
    }
    if !s.should_write_at_exit(cuda_loaded) {
        // NVML let go before the libraries' exit handlers run: its thread must not be inside
        // NVML while the library tears itself down.
        super::nvml::stop();
        return;
    }
    // The GPU's health as the process ends, in the trace's environment; NVML let go.
    super::nvml::finish();
    write_trace_with(s, false);
    if !WRITE_FAILED.load(Ordering::Relaxed) && s.config.exit_summary && (s.fault_count() > 0 || !s.config.quiet) {
        say(&format!("cublasguard: {} fault(s) in {} intercepted call(s); trace: {}", s.fault_count(), s.total_calls(), s.trace_path()));
    }
}

/// How long exit waits for the work the guard follows to finish: a kernel that never ends (a
/// hung collective, Ctrl-C on a stuck job) must not hold the program's exit forever.
const EXIT_WAIT_MS: u32 = 5000;

/// CUBLASGUARD_SYNC=deferred, at exit, before the runtime's teardown: work the program never
/// waited for may still be running, or have faulted with nobody asking. When a breadcrumb is
/// still out and no error has been attributed, the streams it is out on are waited for (at most
/// `EXIT_WAIT_MS`) and a sticky error they report is attributed from the breadcrumbs, as at
/// any call.
pub(crate) fn check_breadcrumbs_at_exit() {
    let Some(_inside) = crate::ffi::intercept::reentry::Reentry::enter() else { return };
    let Some(s) = current().filter(|s| of_this_process(s)) else { return };
    // From here on what is stuck is the exit's to record, and what the watchdog recorded but
    // had no round left to see complete is amended here.
    super::watchdog::stop();
    let amend_resolved_hangs = || {
        as_guard_sync(s, 0, |call| {
            crate::guard::hang::resolved_at_exit(call);
        })
    };
    amend_resolved_hangs();
    let crumbs_out = s.known_error().is_none() && s.breadcrumbs.progress().iter().any(|p| p.unfinished > 0);
    // A verdict being judged by the guard's thread right now counts too: the trace written
    // after this must hold its fault.
    if DISABLED.load(Ordering::Relaxed) || !(crumbs_out || s.verdicts.unsettled()) {
        return;
    }
    let progress = s.breadcrumbs.progress();
    let mut streams: Vec<u64> = progress.iter().filter(|p| p.unfinished > 0).map(|p| p.stream).chain(s.verdicts.waiting_streams()).collect();
    streams.sort_unstable();
    streams.dedup();
    use crate::ffi::cuda_client::breadcrumbs::{wait_at_exit, AtExit};
    match wait_at_exit(&streams, EXIT_WAIT_MS) {
        AtExit::Failed(code) if crumbs_out => as_guard_sync(s, code, |call| {
            crate::guard::attribution::surfaced(call, code, "exit (the guard's one synchronisation there)", crate::recorder::CallArgs::None, None);
        }),
        AtExit::Unfinished => {
            // Judged as far as it can be; what never finished is said, and counted.
            let stuck: Vec<String> = s
                .breadcrumbs
                .progress()
                .iter()
                .filter_map(|p| p.first_unfinished.map(|i| format!("{} #{} on stream {}", s.hook_name(i.hook as usize), i.seq, crate::trace::hex(p.stream))))
                .collect();
            s.verdicts.note_unfinished_at_exit(stuck.len().max(1) as u64);
            as_guard_sync(s, 0, |call| crate::guard::hang::record_at_exit(call, u64::from(EXIT_WAIT_MS)));
            if !s.config.quiet {
                say(&format!(
                    "cublasguard: at exit the GPU had not finished {} after {} s (a kernel that never ends?): not waited for further, \
                     and what it had still to do is not judged",
                    if stuck.is_empty() { "the guard's scans".to_string() } else { stuck.join(", ") },
                    EXIT_WAIT_MS / 1000
                ));
            }
        }
        AtExit::Finished => amend_resolved_hangs(),
        AtExit::Failed(_) => {}
    }
    // The verdicts still waiting have landed now, unless the context broke: judged here, with
    // the guard's thread for them stopped first.
    crate::ffi::host::harvester::stop();
    crate::ffi::host::harvester::harvest(s, 0);
}

#[cfg_attr(test, allow(dead_code))]
extern "C" fn exit_handler(status: libc::c_int, _arg: *mut libc::c_void) {
    if std::panic::catch_unwind(|| at_exit(status)).is_err() {
        DISABLED.store(true, Ordering::Relaxed);
    }
}

/// Runs when the dynamic loader maps the library (LD_PRELOAD): registers the exit handler.
/// The same object code also sits in the `cublasguard` CLI (through the rlib); only the
/// preloaded shared library registers.
#[cfg_attr(test, allow(dead_code))]
extern "C" fn on_load() {
    let own = {
        // SAFETY: Dl_info is plain old data: all zeroes is a valid value.
        let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
        // SAFETY: dladdr only reads loader tables.
        let found = unsafe { libc::dladdr(on_load as *const libc::c_void, &mut info) } != 0;
        found && !info.dli_fname.is_null() && {
            // SAFETY: dladdr filled dli_fname with the loader's NUL-terminated path.
            let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) }.to_string_lossy();
            crate::ffi::intercept::real::file_name(&name).starts_with("libcublasguard")
        }
    };
    if own {
        crate::ffi::host::stderr::keep_original();
        process::remember_start_dir();
        if process::var("LD_PRELOAD").is_some_and(|p| p.contains("libcublasguard")) {
            process::adopt_tree_id();
        }
        register_exit_handler();
    }
}

#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static ON_LOAD: extern "C" fn() = on_load;
