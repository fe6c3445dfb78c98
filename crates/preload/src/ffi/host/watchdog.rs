//! The hang watchdog's thread (CUBLASGUARD_HANG_TIMEOUT): started with the first page of
//! breadcrumbs (nothing on any call), it reads the breadcrumb words about once a second and
//! keeps, per stream, when the landed word last moved while work was outstanding
//! (`guard::hang::Watch`). A stream stuck past the timeout gets its `gpu_hang` and the trace is
//! written; the program is left running. It calls no CUDA function.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// The process whose watchdog runs (a forked child starts its own with its first page).
static RUNNING_IN: AtomicU32 = AtomicU32::new(0);
/// Exit has begun: the exit's own wait records what is stuck from here on.
static STOP: AtomicBool = AtomicBool::new(false);

/// Starts the watchdog of this process, once, unless CUBLASGUARD_HANG_TIMEOUT=0.
pub(crate) fn start() {
    let Some(s) = super::lifecycle::existing_session() else { return };
    let timeout_s = s.config.hang_timeout_s;
    let pid = std::process::id();
    if timeout_s == 0 || RUNNING_IN.swap(pid, Ordering::AcqRel) == pid {
        return;
    }
    STOP.store(false, Ordering::SeqCst);
    // A small stack: it formats one fault now and then and writes the trace.
    let _ = super::thread::spawn_with_signals_blocked(|| {
        std::thread::Builder::new().name("cublasguard-hang".into()).stack_size(512 * 1024).spawn(move || run(timeout_s * 1000))
    });
}

/// Exit has begun (its bounded wait records a hang itself).
pub(crate) fn stop() {
    STOP.store(true, Ordering::SeqCst);
}

fn run(timeout_ms: u64) {
    // The trace's writing may ask the CUDA libraries their versions: untouched by the hooks.
    let _inside = crate::ffi::intercept::reentry::Reentry::enter();
    // Often enough that a hang is told within a quarter of the timeout past it.
    let poll = Duration::from_millis((timeout_ms / 4).clamp(50, 1000));
    let started = Instant::now();
    let mut watch = crate::guard::hang::Watch::default();
    while !STOP.load(Ordering::SeqCst) {
        std::thread::sleep(poll);
        if STOP.load(Ordering::SeqCst) {
            break;
        }
        let Some(s) = super::lifecycle::existing_session() else { continue };
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| look(s, &mut watch, started.elapsed().as_millis() as u64, timeout_ms)));
    }
}

fn look(s: &'static crate::session::Session, watch: &mut crate::guard::hang::Watch, now_ms: u64, timeout_ms: u64) {
    let progress = s.breadcrumbs.progress();
    let waiting: Vec<u64> = s.waits.waiting().iter().map(|w| w.seq).collect();
    let due = watch.stuck(&progress, &waiting, now_ms, timeout_ms);
    let mut amended = false;
    for stream in watch.take_resolved() {
        super::lifecycle::as_guard_sync(s, 0, |call| amended |= crate::guard::hang::resolved(call, stream, timeout_ms / 1000));
    }
    if due.is_empty() {
        if amended {
            super::lifecycle::write_trace(s);
        }
        return;
    }
    for stuck in &due {
        super::lifecycle::as_guard_sync(s, 0, |call| crate::guard::hang::record(call, stuck, &progress, "watchdog"));
    }
    // The fault's own stderr line says it, with the trace's path.
    super::lifecycle::write_trace(s);
}
