//! The guard's per-thread state. The hot items share one thread-local block (a cdylib reaches
//! thread-locals through `__tls_get_addr`, once per block). The block has no destructor on
//! purpose: glibc runs thread-local destructors before `atexit` handlers, and the exit handler
//! still needs the re-entry flag; the scan buffer, which owns memory, has a slot of its own.
//!
//! Each thread that makes a guarded call gets an alternate signal stack, once (see
//! `first_guarded_call`): the crash handler runs with `SA_ONSTACK`, and without a stack of its
//! own a thread that overflowed its stack has nowhere to run it, so the kernel kills the process
//! without a crash record.

use std::cell::{Cell, RefCell};

use crate::session::lt_descriptors::LtMemo;
use crate::state::ThreadMemo;

pub(crate) struct PerThread {
    /// Set while a hook runs on this thread (the re-entry guard).
    pub inside: Cell<bool>,
    /// The kernel's id for this thread, once asked (0: not yet).
    pub tid: Cell<u32>,
    /// Nesting depth of this thread's calls through the loader gate.
    pub loader_depth: Cell<u32>,
    /// This thread's stack, [low, high), once asked (high == 0: not yet; low == high: unknown).
    pub stack: Cell<(usize, usize)>,
    /// What this thread remembers of the shared tables (recent allocation and handle lookups),
    /// handed to each of its calls.
    pub memo: ThreadMemo,
    /// This thread's last few cublasLt matmul descriptors read whole (the lean path's).
    pub lt: LtMemo,
}

thread_local! {
    pub(crate) static PER_THREAD: PerThread = const {
        PerThread { inside: Cell::new(false), tid: Cell::new(0), loader_depth: Cell::new(0), stack: Cell::new((0, 0)), memo: ThreadMemo::new(), lt: LtMemo::new() }
    };
    /// Reused for every scan on this thread: a scan allocates once per thread, not per call.
    static SCAN_BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// The alternate signal stack the guard gave this thread, unmapped at thread exit.
    static ALT_STACK: Cell<Option<AltStack>> = const { Cell::new(None) };
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

/// Whether `addr` is in the stack of the calling thread, whose block is `t` (asked of the
/// thread library once per thread).
pub(crate) fn is_on_stack_of(t: &PerThread, addr: u64) -> bool {
    stack_of(t).contains(&addr)
}

/// Whether the `len` bytes at `addr` lie in the live part of the calling thread's stack (its
/// block is `t`): between this frame and the stack's top, mapped while the thread runs. A
/// scalar the program passes by host pointer is most often a local of its caller: read there
/// without a system call (`cuda_client::device`'s `read_host`).
pub(crate) fn is_live_stack_of(t: &PerThread, addr: u64, len: usize) -> bool {
    let here = 0u8;
    let here = std::ptr::addr_of!(here) as u64;
    let stack = stack_of(t);
    // Only while this frame is on that stack (not a signal's alternate stack, below which
    // anything may lie).
    stack.contains(&here) && addr >= here && addr.checked_add(len as u64).is_some_and(|end| end <= stack.end)
}

/// The stack of the calling thread, whose block is `t` (empty when unknown).
#[inline(always)]
pub(crate) fn stack_of(t: &PerThread) -> std::ops::Range<u64> {
    let (mut low, mut high) = t.stack.get();
    if high == 0 {
        (low, high) = own_stack().unwrap_or((1, 1));
        t.stack.set((low, high));
    }
    low as u64..high as u64
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

/// Bytes the crash handler needs on an alternate stack beyond the kernel's signal frame: it
/// measured under 1.5 KiB (it streams from buffers prepared in advance); the rest is margin.
const HANDLER_STACK: usize = 4 << 10;
/// Bytes of the stacks the guard maps: room for a program's own handler too, which the guard's
/// handler calls first, on the same stack.
const OWN_STACK: usize = 64 << 10;

/// The kernel's largest signal frame on this machine (AT_MINSIGSTKSZ: 3 KiB with AVX2, over
/// 10 KiB with AMX), or a generous guess on a kernel too old to say.
fn signal_frame_size() -> usize {
    // SAFETY: getauxval has no preconditions; 0 means the entry is absent.
    match unsafe { libc::getauxval(libc::AT_MINSIGSTKSZ) } as usize {
        0 => 16 << 10,
        n => n,
    }
}

/// An alternate signal stack mapped by the guard: `len` bytes at `base`, the lowest page a
/// guard page.
struct AltStack {
    base: usize,
    len: usize,
    page: usize,
}

impl Drop for AltStack {
    /// At thread exit: unmapped, but only once the thread no longer uses it as its signal stack
    /// (a signal delivered later would otherwise be pushed onto unmapped memory).
    fn drop(&mut self) {
        // SAFETY: sigaltstack with local structures; the mapping is ours and, once disabled (or
        // replaced by the program), no longer the thread's signal stack.
        unsafe {
            let mut current: libc::stack_t = std::mem::zeroed();
            if libc::sigaltstack(std::ptr::null(), &mut current) != 0 || current.ss_flags & libc::SS_ONSTACK != 0 {
                return; // in use right now: leaked rather than pulled from under a handler
            }
            if current.ss_sp as usize == self.base + self.page && current.ss_flags & libc::SS_DISABLE == 0 {
                let off = libc::stack_t { ss_sp: std::ptr::null_mut(), ss_flags: libc::SS_DISABLE, ss_size: 0 };
                if libc::sigaltstack(&off, std::ptr::null_mut()) != 0 {
                    return;
                }
            }
            libc::munmap(self.base as *mut libc::c_void, self.len);
        }
    }
}

/// Called once per thread, at its first guarded call (when its thread id is first asked), never
/// on the calls after: gives the thread an alternate signal stack unless it has a usable one.
///
/// A program's own alternate stack is kept when the crash handler fits on it (Python's
/// faulthandler has 16 KiB or more, Rust's runtime 8 KiB on most machines). One too small (a
/// 2 KiB one, say) is replaced for this thread: the guard's handler runs first on every fatal
/// signal, so on such a stack it overflows before the program's handler is even called, and
/// the kernel kills the process with neither handler run. On the guard's larger stack both
/// run. A stack the program installs later, after its thread's first guarded call, is its own.
pub(crate) fn first_guarded_call() {
    // SAFETY: sigaltstack/mmap/mprotect/munmap with local structures; the new stack is our own
    // fresh mapping, above its guard page.
    unsafe {
        let mut current: libc::stack_t = std::mem::zeroed();
        if libc::sigaltstack(std::ptr::null(), &mut current) != 0 || current.ss_flags & libc::SS_ONSTACK != 0 {
            return; // inside a signal handler on that stack: not ours to swap
        }
        let frame = signal_frame_size();
        if current.ss_flags & libc::SS_DISABLE == 0 && current.ss_size >= frame + HANDLER_STACK {
            return; // the program's own (or one this thread already got: a forked child asks again)
        }
        let page = match libc::sysconf(libc::_SC_PAGESIZE) {
            n if n > 0 => n as usize,
            _ => 4096,
        };
        let size = (OWN_STACK + frame).div_ceil(page) * page;
        let len = size + page;
        let base = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
            -1,
            0,
        );
        if base == libc::MAP_FAILED {
            return;
        }
        // The guard page: a handler that overran the stack faults instead of writing below it.
        let stack = AltStack { base: base as usize, len, page };
        if libc::mprotect(base, page, libc::PROT_NONE) != 0 {
            return; // dropped: unmapped (never installed)
        }
        let new = libc::stack_t { ss_sp: (stack.base + page) as *mut libc::c_void, ss_flags: 0, ss_size: size };
        if libc::sigaltstack(&new, std::ptr::null_mut()) != 0 {
            return;
        }
        // The main thread keeps its stack to the end: its thread-local destructors run at
        // exit(), before the exit handlers that may still crash.
        if libc::gettid() == libc::getpid() {
            std::mem::forget(stack);
            return;
        }
        // During thread teardown the slot is gone: the closure, and the stack with it, is
        // dropped at once (disabled, then unmapped).
        let _ = ALT_STACK.try_with(move |slot| slot.set(Some(stack)));
    }
}

/// The signals a thread's own instruction raises (a fault, a trap, a bad system call): the only
/// ones the guard's threads take.
const SYNCHRONOUS: [libc::c_int; 6] = [libc::SIGSEGV, libc::SIGBUS, libc::SIGFPE, libc::SIGILL, libc::SIGTRAP, libc::SIGSYS];

/// Runs `spawn` (which starts one of the guard's threads) with every asynchronous signal blocked
/// on the calling thread, and puts the caller's mask back after: the new thread inherits the
/// mask from its first instruction, so the kernel never picks it for a signal sent to the
/// process (SIGTERM, SIGINT, SIGCHLD, ...), which goes to a thread of the program's instead,
/// one that `sigwait`s or reads a `signalfd` for it where the program blocked it everywhere
/// else. A signal that arrives meanwhile waits for the caller's old mask.
pub(crate) fn spawn_with_signals_blocked<R>(spawn: impl FnOnce() -> R) -> R {
    // SAFETY: sigset_t is plain data, filled by sigfillset/sigdelset; pthread_sigmask reads the
    // new set and writes the old one into a local.
    let old = unsafe {
        let mut blocked: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut blocked);
        for sig in SYNCHRONOUS {
            libc::sigdelset(&mut blocked, sig);
        }
        let mut old: libc::sigset_t = std::mem::zeroed();
        (libc::pthread_sigmask(libc::SIG_BLOCK, &blocked, &mut old) == 0).then_some(old)
    };
    let spawned = spawn();
    if let Some(old) = old {
        // SAFETY: the mask this thread had, read above.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    }
    spawned
}
