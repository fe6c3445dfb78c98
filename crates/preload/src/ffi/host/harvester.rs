//! The guard's own thread that judges deferred NaN/Inf verdicts as their scans land
//! (CUBLASGUARD_SYNC=deferred): within about a millisecond of a mark landing, the call's fault
//! (if any) is recorded and published, so it is on disk and in the crash writer's slots as
//! soon as it is known, without a hooked call of the program's doing the work. It calls no
//! CUDA function: it only reads the guard's mapped memory. The crash writer gives it a bounded
//! moment to finish (`settle`); at exit it is stopped before the last verdicts are judged.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// The process whose harvester runs (a forked child starts its own).
static RUNNING_IN: AtomicU32 = AtomicU32::new(0);
static STOP: AtomicBool = AtomicBool::new(false);
static STOPPED: AtomicBool = AtomicBool::new(false);
/// The thread sleeps the long, idle sleep: a new verdict wakes it (otherwise it looks again
/// within POLL by itself, and the caller makes no system call).
static IDLE_SLEEP: AtomicBool = AtomicBool::new(false);
static WAKE: Mutex<()> = Mutex::new(());
static WOKEN: Condvar = Condvar::new();

/// The crash writer's request for a last look at the device (`LOOK_ASKED`), and its answer
/// (`LOOK_DONE`): atomics only, so a signal handler can ask and wait.
const LOOK_NONE: u32 = 0;
const LOOK_ASKED: u32 = 1;
const LOOK_DONE: u32 = 2;
static LAST_LOOK: AtomicU32 = AtomicU32::new(LOOK_NONE);

/// How often the thread looks while verdicts wait.
const POLL: Duration = Duration::from_millis(1);
/// How long it sleeps when none waits (a new one wakes it, or, added just as it went to
/// sleep, waits at most this long).
const IDLE: Duration = Duration::from_millis(10);

/// A verdict waits: the thread (started once per process) looks soon.
pub(crate) fn judge_soon() {
    let pid = std::process::id();
    if RUNNING_IN.load(Ordering::Acquire) != pid && RUNNING_IN.swap(pid, Ordering::AcqRel) != pid {
        STOP.store(false, Ordering::SeqCst);
        STOPPED.store(false, Ordering::SeqCst);
        // A small stack: it rebuilds a call's check and scans what landed (its scan buffer is
        // on the heap).
        let spawned =
            super::thread::spawn_with_signals_blocked(|| std::thread::Builder::new().name("cublasguard-verdicts".into()).stack_size(512 * 1024).spawn(run));
        if spawned.is_err() {
            // Without it, verdicts are judged at the program's synchronisations and at exit.
            STOPPED.store(true, Ordering::SeqCst);
        }
    }
    if IDLE_SLEEP.load(Ordering::Acquire) {
        WOKEN.notify_one();
    }
}

fn run() {
    // The thread's own calls (none into CUDA) pass through the guard's hooks untouched.
    let _inside = crate::ffi::intercept::reentry::Reentry::enter();
    while !STOP.load(Ordering::SeqCst) {
        if LAST_LOOK.load(Ordering::Acquire) == LOOK_ASKED {
            let _ = std::panic::catch_unwind(|| {
                if let Some(s) = crate::ffi::host::lifecycle::session() {
                    look_for_a_sticky_error(s);
                }
            });
            LAST_LOOK.store(LOOK_DONE, Ordering::Release);
        }
        let waiting = crate::ffi::host::lifecycle::session().is_some_and(|s| s.verdicts.any_waiting());
        if waiting {
            let _ = std::panic::catch_unwind(|| {
                if let Some(s) = crate::ffi::host::lifecycle::session() {
                    harvest(s, s.total_calls());
                }
            });
        }
        if crate::ffi::host::lifecycle::session().is_some_and(|s| s.verdicts.drained_after_backlog()) {
            give_back_free_heap();
        }
        let guard = WAKE.lock().unwrap_or_else(|e| e.into_inner());
        IDLE_SLEEP.store(!waiting, Ordering::Release);
        let _ = WOKEN.wait_timeout(guard, if waiting { POLL } else { IDLE });
        IDLE_SLEEP.store(false, Ordering::Release);
    }
    STOPPED.store(true, Ordering::SeqCst);
}

/// After a backlog of verdicts drained (`Verdicts::drained_after_backlog`): the free pages of
/// the heap they took go back to the system, on the guard's thread, once a backlog.
fn give_back_free_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim takes no pointer and only releases free memory of glibc's heaps.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The device asked, on the streams whose breadcrumbs are still out, whether its context broke;
/// a sticky error it reports is attributed from the breadcrumbs (to the call whose work did not
/// complete) and published, where the crash writer finds it. A program that checks an unhooked
/// call's status (a copy that returned 700) and aborts at once dies before any hooked call of
/// its own could have asked.
fn look_for_a_sticky_error(s: &'static crate::session::Session) {
    if s.known_error().is_some() {
        return;
    }
    let streams: Vec<u64> = s.breadcrumbs.progress().iter().filter(|p| p.unfinished > 0).map(|p| p.stream).collect();
    if let Some(code) = crate::ffi::cuda_client::breadcrumbs::sticky_error_on(&streams) {
        crate::ffi::host::lifecycle::as_guard_sync(s, code, |call| {
            crate::guard::attribution::surfaced(call, code, "the guard's last look at the device as the program died", crate::recorder::CallArgs::None, None);
        });
    }
}

/// For the crash writer (async-signal-safe: atomics and `nanosleep`): asks the thread for one
/// last look at the device (`look_for_a_sticky_error`), waiting at most `limit_ms` for it: it may
/// be stuck behind a lock the crashed thread holds.
pub(crate) fn last_look(limit_ms: u32) {
    if RUNNING_IN.load(Ordering::Acquire) != std::process::id() || STOPPED.load(Ordering::SeqCst) {
        return;
    }
    if LAST_LOOK.compare_exchange(LOOK_NONE, LOOK_ASKED, Ordering::AcqRel, Ordering::Acquire).is_err() {
        return;
    }
    let pause = libc::timespec { tv_sec: 0, tv_nsec: 1_000_000 };
    for _ in 0..limit_ms {
        if LAST_LOOK.load(Ordering::Acquire) == LOOK_DONE {
            return;
        }
        // SAFETY: nanosleep is async-signal-safe.
        unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
    }
}

/// Judges what landed, as found at call `found_at` (0: at exit).
pub(crate) fn harvest(s: &'static crate::session::Session, found_at: u64) {
    crate::ffi::host::lifecycle::as_guard_sync(s, 0, |call| crate::guard::verdicts::harvest(call, found_at));
}

/// Stops the thread (at exit, before the last verdicts are judged there), waiting for it at
/// most a quarter of a second.
pub(crate) fn stop() {
    if RUNNING_IN.load(Ordering::Acquire) != std::process::id() {
        return;
    }
    STOP.store(true, Ordering::SeqCst);
    WOKEN.notify_one();
    for _ in 0..250 {
        if STOPPED.load(Ordering::SeqCst) {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// For the crash writer (async-signal-safe: atomics and `nanosleep`): while verdicts wait or
/// are being judged (`unsettled`), gives the thread time to judge them as they land, so what
/// the GPU had finished is published before the crash record is written. Bounded: it stops
/// waiting once `stall_ms` pass without a verdict judged (the GPU may never finish, or the thread
/// be stuck behind a lock the crashed thread holds), and after `limit_ms` in all (a storm of
/// faults takes the thread a while to publish).
pub(crate) fn settle(unsettled: impl Fn() -> bool, judged: impl Fn() -> u64, stall_ms: u32, limit_ms: u32) {
    if RUNNING_IN.load(Ordering::Acquire) != std::process::id() || STOPPED.load(Ordering::SeqCst) {
        return;
    }
    let pause = libc::timespec { tv_sec: 0, tv_nsec: 1_000_000 };
    let (mut last, mut since) = (judged(), 0);
    for _ in 0..limit_ms {
        if !unsettled() || since >= stall_ms {
            return;
        }
        // SAFETY: nanosleep is async-signal-safe.
        unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
        let now = judged();
        (last, since) = if now != last { (now, 0) } else { (last, since + 1) };
    }
}
