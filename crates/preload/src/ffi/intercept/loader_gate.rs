//! The guard's own calls into the dynamic loader (`dl_iterate_phdr`, `dladdr`, `dlopen`,
//! `dlsym`, and `backtrace`, whose unwinder walks the loaded objects) take the loader's internal
//! locks, which glibc does not reset in the child of a fork: a parent thread inside one at the
//! moment of `fork()` leaves the child stuck at its first loader call. So the guard's loader
//! calls pass through this gate, which `before_fork` closes and waits to drain. It is a plain
//! counter, not a lock: the child has nothing to release and nobody to wake.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::ffi::host::thread::PER_THREAD;

static USERS: AtomicU32 = AtomicU32::new(0);
static CLOSED: AtomicBool = AtomicBool::new(false);

/// Runs `f`, a call into the loader, while no fork is being prepared.
pub(crate) fn through<R>(f: impl FnOnce() -> R) -> R {
    // Nested calls on one thread are already counted (and must not wait for a fork that is
    // waiting for them).
    let depth = PER_THREAD.try_with(|t| t.loader_depth.replace(t.loader_depth.get() + 1)).unwrap_or(1);
    struct Leave(bool);
    impl Drop for Leave {
        fn drop(&mut self) {
            let _ = PER_THREAD.try_with(|t| t.loader_depth.set(t.loader_depth.get().saturating_sub(1)));
            if self.0 {
                USERS.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
    if depth > 0 {
        let _leave = Leave(false);
        return f();
    }
    loop {
        while CLOSED.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        USERS.fetch_add(1, Ordering::SeqCst);
        if !CLOSED.load(Ordering::SeqCst) {
            break;
        }
        USERS.fetch_sub(1, Ordering::SeqCst);
    }
    let _leave = Leave(true);
    f()
}

/// Before `fork()`: no new loader call starts, and those under way finish.
pub(crate) fn close_for_fork() {
    CLOSED.store(true, Ordering::SeqCst);
    while USERS.load(Ordering::SeqCst) != 0 {
        std::thread::yield_now();
    }
}

/// After `fork()`, in the parent.
pub(crate) fn reopen_in_parent() {
    CLOSED.store(false, Ordering::SeqCst);
}

/// After `fork()`, in the child: only the forking thread exists, and it held no loader call.
pub(crate) fn reopen_in_child() {
    USERS.store(0, Ordering::SeqCst);
    CLOSED.store(false, Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_gate_waits_for_calls_under_way_and_holds_back_new_ones() {
        let inside = std::sync::Arc::new(AtomicBool::new(false));
        let release = std::sync::Arc::new(AtomicBool::new(false));
        let (i, r) = (inside.clone(), release.clone());
        let caller = std::thread::spawn(move || {
            through(|| {
                i.store(true, Ordering::SeqCst);
                while !r.load(Ordering::SeqCst) {
                    std::thread::yield_now();
                }
                through(|| ()) // nested: never waits
            })
        });
        while !inside.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        let closer = std::thread::spawn(close_for_fork);
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!closer.is_finished(), "closing waits for the call under way");
        release.store(true, Ordering::SeqCst);
        closer.join().unwrap();
        caller.join().unwrap();
        assert_eq!(USERS.load(Ordering::SeqCst), 0);
        reopen_in_parent();
        assert_eq!(through(|| 5), 5);
    }
}
