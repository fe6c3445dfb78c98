//! The guard's own code on a thread, and what may cross it.
//!
//! - A thread-local flag set while a hook runs: calls made meanwhile (by the guard, or by the
//!   real library internally) are forwarded untouched and not recorded.
//! - A Rust panic inside the guard is caught (`catch_panic`) and never reaches C. Every other
//!   unwind passes through untouched: glibc's forced unwind (`pthread_cancel`, `pthread_exit`,
//!   which CPython calls for a daemon thread at shutdown) and a foreign exception (C++ thrown by
//!   a callback) must run through the hook's frames to the thread's start as they would without
//!   the guard. `std::panic::catch_unwind` cannot do that: it catches every unwind, and a
//!   forced one it swallows makes glibc abort ("FATAL: exception not rethrown").
//! - A cancellation request that arrives while the guard does its own work (a write at a fault,
//!   a copy of an operand, the session's start) waits until that work is done (`defer_cancel`),
//!   then acts at the next cancellation point: in the real function, or in the program.

use std::cell::Cell;
use std::ffi::c_int;
#[cfg(target_arch = "x86_64")]
use std::mem::ManuallyDrop;

use crate::ffi::host::thread::{PerThread, PER_THREAD};

/// Set for the lifetime of the value; `None` when this thread is already inside a hook.
pub(crate) struct Reentry(());

impl Reentry {
    pub(crate) fn enter() -> Option<Self> {
        // During thread teardown the flag may be gone: treat that as "inside" and forward.
        let entered = PER_THREAD.try_with(|t| !t.inside.replace(true)).unwrap_or(false);
        entered.then_some(Self(()))
    }
}

impl Drop for Reentry {
    fn drop(&mut self) {
        // Runs on a forced unwind too: a thread whose call was unwound by a C++ exception that
        // its caller catches is guarded again at its next call.
        let _ = PER_THREAD.try_with(|t| t.inside.set(false));
    }
}

/// `Reentry` for a caller that already holds the thread's block (a hooked call reaches it
/// once, for everything it needs of it).
pub(crate) struct ReentryOn<'a>(&'a Cell<bool>);

impl<'a> ReentryOn<'a> {
    pub(crate) fn enter(t: &'a PerThread) -> Option<Self> {
        (!t.inside.replace(true)).then_some(Self(&t.inside))
    }
}

impl Drop for ReentryOn<'_> {
    fn drop(&mut self) {
        // As `Reentry`'s: on a forced unwind too.
        self.0.set(false);
    }
}

/// Runs `f`; `None` when a Rust panic ended it (the panic is then over: caught, its payload
/// dropped). Any other unwind passes through.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn catch_panic<R, F: FnOnce() -> R>(f: F) -> Option<R> {
    // As the standard library's catch_unwind: the job and its result share one place, and the
    // job is read out of it where it runs (a clean call pays for no copy of it).
    let mut job = Job::<F, R> { f: ManuallyDrop::new(f) };
    // SAFETY: `run_job::<F, R>` is given the `Job<F, R>` it expects, alive for the call, whose
    // job it runs once; on a panic the job was consumed and nothing is left to drop.
    let exception = unsafe { panic_catcher::call(run_job::<F, R>, &mut job as *mut Job<F, R> as *mut u8) };
    if exception.is_null() {
        // SAFETY: the call returned normally, so run_job wrote the result.
        return Some(ManuallyDrop::into_inner(unsafe { job.r }));
    }
    panic_catcher::finish(exception);
    None
}

#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn catch_panic<R, F: FnOnce() -> R>(f: F) -> Option<R> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).ok()
}

/// A job before it runs, its result after.
#[cfg(target_arch = "x86_64")]
union Job<F, R> {
    f: ManuallyDrop<F>,
    r: ManuallyDrop<R>,
}

/// Runs the job and leaves its result in its place; returns 0, which `panic_catcher::call`
/// passes on as "no panic".
///
/// # Safety
/// `job` points to a live `Job<F, R>` holding a job not yet run.
#[cfg(target_arch = "x86_64")]
unsafe extern "C-unwind" fn run_job<F: FnOnce() -> R, R>(job: *mut u8) -> usize {
    // SAFETY: as the caller promises; the job is taken out once, then its place holds `r`.
    unsafe {
        let job = &mut *(job as *mut Job<F, R>);
        let f = ManuallyDrop::take(&mut job.f);
        job.r = ManuallyDrop::new(f());
    }
    0
}

/// A frame that catches Rust panics only, by a personality routine of its own: the one place a
/// Rust panic stops, and one that a forced or foreign unwind does not see.
#[cfg(target_arch = "x86_64")]
mod panic_catcher {
    use std::ffi::{c_int, c_void};

    extern "C-unwind" {
        fn _Unwind_RaiseException(exception: *mut c_void) -> c_int;
    }
    extern "C" {
        fn _Unwind_GetIP(context: *mut c_void) -> usize;
        fn _Unwind_SetIP(context: *mut c_void, ip: usize);
        fn _Unwind_SetGR(context: *mut c_void, register: c_int, value: usize);
    }

    /// Rust's exception class (the standard library's panic runtime), as the unwinder passes it.
    const RUST_CLASS: u64 = u64::from_ne_bytes(*b"MOZ\0RUST");

    const UA_SEARCH_PHASE: c_int = 1;
    const UA_HANDLER_FRAME: c_int = 4;
    const UA_FORCE_UNWIND: c_int = 8;
    const URC_HANDLER_FOUND: c_int = 6;
    const URC_INSTALL_CONTEXT: c_int = 7;
    const URC_CONTINUE_UNWIND: c_int = 8;
    /// DWARF's number for rax, which `call` returns.
    const RAX: c_int = 0;

    /// The personality of `call`'s frame: it claims a Rust panic, nothing else, and resumes
    /// `call` right after its one call with the exception in rax.
    unsafe extern "C" fn personality(version: c_int, actions: c_int, class: u64, exception: *mut c_void, context: *mut c_void) -> c_int {
        if version != 1 || class != RUST_CLASS || actions & UA_FORCE_UNWIND != 0 {
            return URC_CONTINUE_UNWIND;
        }
        if actions & UA_SEARCH_PHASE != 0 {
            return URC_HANDLER_FOUND;
        }
        if actions & UA_HANDLER_FRAME == 0 {
            return URC_CONTINUE_UNWIND;
        }
        // SAFETY: the unwinder's context for this frame, during its cleanup phase.
        unsafe {
            _Unwind_SetGR(context, RAX, exception as usize);
            _Unwind_SetIP(context, _Unwind_GetIP(context));
        }
        URC_INSTALL_CONTEXT
    }

    /// Calls `f(data)`, which returns 0; returns that, or the Rust panic that ended it.
    ///
    /// # Safety
    /// `f` may be called with `data`.
    #[unsafe(naked)]
    pub(super) unsafe extern "C-unwind" fn call(f: unsafe extern "C-unwind" fn(*mut u8) -> usize, data: *mut u8) -> *mut c_void {
        core::arch::naked_asm!(
            ".cfi_startproc",
            ".cfi_personality 0x1b, {personality}", // pc-relative, 4 bytes, direct
            "push rbp",
            ".cfi_def_cfa_offset 16",
            ".cfi_offset rbp, -16",
            "mov rbp, rsp",
            ".cfi_def_cfa_register rbp",
            "mov rax, rdi",
            "mov rdi, rsi",
            "call rax",
            // The personality resumes here too (`_Unwind_GetIP` is this return address), with
            // the exception in rax in place of f's 0.
            "pop rbp",
            ".cfi_def_cfa rsp, 8",
            "ret",
            ".cfi_endproc",
            personality = sym personality,
        )
    }

    /// Ends a panic that `call` stopped as the standard library ends a caught one (the payload
    /// dropped, the thread no longer panicking): raised again right inside a `catch_unwind`.
    pub(super) fn finish(exception: *mut c_void) {
        // SAFETY: a Rust panic's exception, stopped in flight; raising it again is how it is
        // rethrown, and the nearest handler is this catch_unwind, which takes it back.
        let _ = std::panic::catch_unwind(|| unsafe { _Unwind_RaiseException(exception) });
    }
}

/// glibc's values for `pthread_setcancelstate`.
const PTHREAD_CANCEL_DISABLE: c_int = 1;

extern "C" {
    fn pthread_setcancelstate(state: c_int, old: *mut c_int) -> c_int;
}

/// While it lives, a cancellation request for this thread waits (the thread's own setting is
/// restored after).
pub(crate) struct CancelDeferred(c_int);

impl CancelDeferred {
    pub(crate) fn new() -> Self {
        let mut old = 0;
        // SAFETY: a valid state and out-parameter; the call only changes this thread's state.
        unsafe { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &mut old) };
        Self(old)
    }
}

impl Drop for CancelDeferred {
    fn drop(&mut self) {
        let mut ignored = 0;
        // SAFETY: the state read when the value was made; a valid out-parameter.
        unsafe { pthread_setcancelstate(self.0, &mut ignored) };
    }
}

/// Runs `f`, the guard's own work, with a cancellation request held back until it is done.
pub(crate) fn defer_cancel<R>(f: impl FnOnce() -> R) -> R {
    let _deferred = CancelDeferred::new();
    f()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn nested_entry_is_refused_until_the_outer_one_ends() {
        let outer = Reentry::enter();
        assert!(outer.is_some());
        assert!(Reentry::enter().is_none());
        drop(outer);
        assert!(Reentry::enter().is_some());
    }

    #[test]
    fn a_panic_is_caught_and_over_and_a_clean_run_returns_its_value() {
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        for _ in 0..3 {
            let dropped = AtomicU32::new(0);
            struct Counted<'a>(&'a AtomicU32);
            impl Drop for Counted<'_> {
                fn drop(&mut self) {
                    self.0.fetch_add(1, Ordering::SeqCst);
                }
            }
            let r: Option<u32> = catch_panic(|| {
                let _c = Counted(&dropped);
                panic!("inside the guard")
            });
            assert_eq!(r, None);
            assert_eq!(dropped.load(Ordering::SeqCst), 1, "the panicking frame's locals were dropped");
            assert!(!std::thread::panicking(), "the panic is over");
        }
        std::panic::set_hook(hook);
        let m = std::sync::Mutex::new(0);
        drop(m.lock());
        assert!(!m.is_poisoned());
        assert_eq!(catch_panic(|| 42), Some(42));
    }

    extern "C-unwind" {
        #[link_name = "pthread_exit"]
        fn pthread_exit_unwinding(value: *mut std::ffi::c_void) -> !;
    }

    #[test]
    fn a_forced_unwind_passes_through_to_the_threads_start() {
        static DROPPED: AtomicU32 = AtomicU32::new(0);
        struct Counted;
        impl Drop for Counted {
            fn drop(&mut self) {
                DROPPED.fetch_add(1, Ordering::SeqCst);
            }
        }
        // The thread's start is the C frame the unwind ends at; its Rust body must let it pass.
        extern "C-unwind" fn start(_: *mut std::ffi::c_void) -> *mut std::ffi::c_void {
            let _outer = Counted;
            let _ = catch_panic(|| {
                let _inner = Counted;
                // SAFETY: ends this thread, which owns nothing the test reads but DROPPED.
                unsafe { pthread_exit_unwinding(7 as *mut std::ffi::c_void) }
            });
            std::ptr::null_mut()
        }
        // SAFETY: a thread with default attributes, joined before the test ends.
        unsafe {
            let mut t: libc::pthread_t = 0;
            type Start = extern "C" fn(*mut std::ffi::c_void) -> *mut std::ffi::c_void;
            let start = std::mem::transmute::<extern "C-unwind" fn(*mut std::ffi::c_void) -> *mut std::ffi::c_void, Start>(start);
            assert_eq!(libc::pthread_create(&mut t, std::ptr::null(), start, std::ptr::null_mut()), 0);
            let mut value = std::ptr::null_mut();
            assert_eq!(libc::pthread_join(t, &mut value), 0);
            assert_eq!(value as usize, 7, "the thread ended by pthread_exit");
        }
        assert_eq!(DROPPED.load(Ordering::SeqCst), 2, "both frames' locals were dropped on the way");
    }
}
