//! The guard's per-thread state. The hot items share one thread-local block (a cdylib reaches
//! thread-locals through `__tls_get_addr`, once per block). The block has no destructor on
//! purpose: glibc runs thread-local destructors before `atexit` handlers, and the exit handler
//! still needs the re-entry flag; the scan buffer, which owns memory, has a slot of its own.

use std::cell::{Cell, RefCell};

pub(crate) struct PerThread {
    /// Set while a hook runs on this thread (the re-entry guard).
    pub inside: Cell<bool>,
    /// The kernel's id for this thread, once asked (0: not yet).
    pub tid: Cell<u32>,
    /// Nesting depth of this thread's calls through the loader gate.
    pub loader_depth: Cell<u32>,
}

thread_local! {
    pub(crate) static PER_THREAD: PerThread = const { PerThread { inside: Cell::new(false), tid: Cell::new(0), loader_depth: Cell::new(0) } };
    /// Reused for every scan on this thread: a scan allocates once per thread, not per call.
    static SCAN_BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with this thread's scan buffer (a one-off buffer during thread teardown).
pub(crate) fn with_scan_buffer<R>(f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    let mut buf = SCAN_BUFFER.try_with(|b| b.try_borrow_mut().map(|mut b| std::mem::take(&mut *b)).unwrap_or_default()).unwrap_or_default();
    let result = f(&mut buf);
    let _ = SCAN_BUFFER.try_with(|slot| {
        if let Ok(mut slot) = slot.try_borrow_mut() {
            *slot = buf;
        }
    });
    result
}
