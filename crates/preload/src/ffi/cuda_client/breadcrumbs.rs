//! The breadcrumbs' side that touches CUDA (CUBLASGUARD_SYNC=deferred): one page of host
//! memory per context, registered with the driver and mapped into the device's address space, and a stream memory operation that writes a call's
//! number into its stream's word once the work before it on the stream has completed. What was
//! issued and what landed is kept in safe Rust (`session::breadcrumbs`).

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::ffi::cuda_client::cuda_api as api;
use crate::session::breadcrumbs::{Breadcrumbs, Issued, SLOTS_PER_PAGE};

/// cuMemHostRegister's flags: usable by every context (PORTABLE) and mapped into the
/// device's address space (DEVICEMAP).
const HOST_REGISTER_PORTABLE: u32 = 0x1;
const HOST_REGISTER_DEVICEMAP: u32 = 0x2;
/// cuStreamWriteValue64's default flags: a system-scope fence before the write, so the
/// number lands only after the work before it is complete and visible.
const WRITE_VALUE_DEFAULT: u32 = 0;

/// The calling thread's current context, by its unique id (CUDA 12's cuCtxGetId: a context's
/// address can be reused by the next one after cudaDeviceReset, its id cannot). 0: no context,
/// or a driver without ids (then no breadcrumbs: a page registered with a destroyed context
/// must never be written again).
pub(crate) fn current_context() -> u64 {
    let mut ctx: *mut c_void = std::ptr::null_mut();
    // SAFETY: `ctx` is a writable pointer.
    if unsafe { api::cuCtxGetCurrent(&mut ctx) } != Some(0) || ctx.is_null() {
        return 0;
    }
    let mut id = 0u64;
    // SAFETY: `ctx` is the current context; `id` is writable.
    match unsafe { api::cuCtxGetId(ctx, &mut id) } {
        Some(0) => id,
        _ => 0,
    }
}

/// A page for the current context: its words as the host reads them and its device address.
/// The memory is the guard's own (mapped here, never unmapped) and only registered with the
/// driver, so reading it stays valid whatever becomes of the context: after cudaDeviceReset,
/// in the crash writer, at exit after the runtime's teardown.
fn allocate_page() -> Option<(&'static [AtomicU64], u64)> {
    let bytes = SLOTS_PER_PAGE * std::mem::size_of::<AtomicU64>();
    // SAFETY: an anonymous private mapping; no existing memory is touched.
    let host = unsafe { libc::mmap(std::ptr::null_mut(), bytes, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
    if host == libc::MAP_FAILED {
        return None;
    }
    // SAFETY: `host` is the mapping just made, `bytes` long; the flags are documented ones.
    let registered = unsafe { api::cuMemHostRegister_v2(host, bytes, HOST_REGISTER_PORTABLE | HOST_REGISTER_DEVICEMAP) } == Some(0);
    let mut device = 0u64;
    // SAFETY: `device` is writable; `host` is registered memory (flags must be 0).
    if !registered || unsafe { api::cuMemHostGetDevicePointer_v2(&mut device, host, 0) } != Some(0) || device == 0 {
        // Left mapped (and registered, if it was): small, and never handed out.
        return None;
    }
    // SAFETY: `host` points to `bytes` bytes of zeroed (fresh anonymous) memory, page-aligned,
    // that stay mapped for the rest of the process. The device writes the words only through
    // the stream writes this module enqueues, each a whole aligned 8-byte word, which an
    // AtomicU64 load reads whole.
    let words = unsafe { std::slice::from_raw_parts(host as *const AtomicU64, SLOTS_PER_PAGE) };
    Some((words, device))
}

/// Enqueues on `stream` the breadcrumb of call `issued.seq`. False when
/// none could be (no context, no page, no free word, the driver refused the write): the caller
/// then synchronises instead.
pub(crate) fn drop_breadcrumb(crumbs: &Breadcrumbs, stream: u64, issued: Issued) -> bool {
    let seq = issued.seq;
    let context = current_context();
    if context == 0 {
        return false;
    }
    // One lock in the common case: the page is looked for only when the issue failed.
    let addr = match crumbs.issue(context, stream, issued) {
        Some(addr) => addr,
        None if !crumbs.knows(context) => {
            // Asked once per context: a refusal is kept as an empty page.
            let page = crate::ffi::cuda_client::device::relaxed(allocate_page);
            if page.is_some() {
                register_final_check();
                crate::ffi::host::watchdog::start();
            }
            let (words, device) = page.unwrap_or((&[], 0));
            if !crumbs.add_page(context, words, device) {
                return false;
            }
            let Some(addr) = crumbs.issue(context, stream, issued) else { return false };
            addr
        }
        None => return false,
    };
    // SAFETY: `addr` is a word of this context's mapped page (issued above), `stream` the
    // stream the guarded call ran on, as the program passed it to CUDA.
    if unsafe { api::cuStreamWriteValue64_v2(stream as *mut c_void, addr, seq, WRITE_VALUE_DEFAULT) } != Some(0) {
        crumbs.withdraw(context, stream, seq);
        return false;
    }
    true
}

/// Registers, once, the check at exit of breadcrumbs that never landed. Registered now, after
/// the runtime registered its own teardown, it runs before it (exit handlers run in reverse
/// order), while the device can still be synchronised; the guard's trace is written after.
pub(crate) fn register_final_check() {
    static REGISTERED: AtomicBool = AtomicBool::new(false);
    if !REGISTERED.swap(true, Ordering::SeqCst) {
        // SAFETY: `final_check` is a plain extern "C" fn that never unwinds.
        unsafe { libc::atexit(final_check) };
    }
}

extern "C" fn final_check() {
    let _ = std::panic::catch_unwind(crate::ffi::host::lifecycle::check_breadcrumbs_at_exit);
}

/// The sticky error the first of `streams` to report one reports, asked without waiting.
pub(crate) fn sticky_error_on(streams: &[u64]) -> Option<i32> {
    streams.iter().find_map(|&stream| {
        // SAFETY: a stream the program passed to a guarded call (or the legacy default).
        let code = unsafe { api::cuStreamQuery(stream as *mut c_void) }?;
        crate::cuda::cuda_error_is_sticky(code).then_some(code)
    })
}

/// What became of the streams' work at exit.
pub(crate) enum AtExit {
    /// Every stream asked about finished its work.
    Finished,
    /// The context broke: this sticky error.
    Failed(i32),
    /// Still running when the time ran out (a kernel that never ends).
    Unfinished,
}

/// The wait at exit, bounded: each of `streams` asked (without blocking, every millisecond, for
/// at most `limit_ms`) whether its work finished. A device-wide synchronisation would wait
/// forever behind a kernel that never ends (a hung collective), where the program without the
/// guard exits.
pub(crate) fn wait_at_exit(streams: &[u64], limit_ms: u32) -> AtExit {
    const NOT_READY: i32 = 600;
    let pause = std::time::Duration::from_millis(1);
    for _ in 0..=limit_ms {
        let mut all_done = true;
        for &stream in streams {
            // SAFETY: a stream the program passed to a guarded call (or the legacy default).
            match unsafe { api::cuStreamQuery(stream as *mut c_void) } {
                Some(NOT_READY) => all_done = false,
                Some(code) if crate::cuda::cuda_error_is_sticky(code) => return AtExit::Failed(code),
                // Finished, or not to be asked (a stream the program destroyed since, a driver
                // torn down): nothing of the guard's is left to wait for there.
                _ => {}
            }
        }
        if all_done {
            return AtExit::Finished;
        }
        std::thread::sleep(pause);
    }
    AtExit::Unfinished
}
