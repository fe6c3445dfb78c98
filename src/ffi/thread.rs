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
    /// This thread's stack, [low, high), once asked (high == 0: not yet; low == high: unknown).
    pub stack: Cell<(usize, usize)>,
}

thread_local! {
    pub(crate) static PER_THREAD: PerThread = const { PerThread { inside: Cell::new(false), tid: Cell::new(0), loader_depth: Cell::new(0), stack: Cell::new((0, 0)) } };
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

/// Whether `addr` is in the calling thread's stack (asked of the thread library once per thread).
pub(crate) fn is_on_own_stack(addr: u64) -> bool {
    PER_THREAD
        .try_with(|t| {
            let (mut low, mut high) = t.stack.get();
            if high == 0 {
                (low, high) = own_stack().unwrap_or((1, 1));
                t.stack.set((low, high));
            }
            (low as u64..high as u64).contains(&addr)
        })
        .unwrap_or(false)
}

fn own_stack() -> Option<(usize, usize)> {
    // SAFETY: attr is initialised by pthread_getattr_np before it is read and destroyed after;
    // the out-parameters are local.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut base: *mut libc::c_void = std::ptr::null_mut();
        let mut size: libc::size_t = 0;
        let ok = libc::pthread_attr_getstack(&attr, &mut base, &mut size) == 0;
        libc::pthread_attr_destroy(&mut attr);
        (ok && size > 0).then(|| (base as usize, base as usize + size))
    }
}
