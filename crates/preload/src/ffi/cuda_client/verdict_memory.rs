//! Deferred NaN/Inf verdicts' side that touches CUDA (CUBLASGUARD_SYNC=deferred): one region
//! of host memory per context, registered with the driver and mapped into the device's address
//! space, into which a guarded call's scans land without the host waiting for them: the scan
//! kernel's counts, the host scan's staged copies of operands, and a mark written by the stream
//! after them. Which bytes of it belong to which call is kept in safe Rust
//! (`session::verdicts`); the region is only ever read here, through `VerdictMemory`.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::check::{BatchScan, VerdictArena, VerdictMemory};
use crate::ffi::cuda_client::cuda_api as api;

const HOST_REGISTER_PORTABLE: u32 = 0x1;
const HOST_REGISTER_DEVICEMAP: u32 = 0x2;
/// cuStreamWriteValue64's default flags: a system-scope fence before the write, so the mark
/// lands only once the work queued before it is complete and visible.
const WRITE_VALUE_DEFAULT: u32 = 0;

/// A context's region: its host address and its address on the device. Never unmapped, so
/// reading it stays valid after the context is gone (at exit, after cudaDeviceReset).
#[derive(Clone, Copy)]
struct Region {
    context: u64,
    host: usize,
    device: u64,
    bytes: u64,
}

/// The regions made so far; a context whose region could not be made is kept with `host` 0.
static REGIONS: Mutex<Vec<Region>> = Mutex::new(Vec::new());

fn region(context: u64) -> Option<Region> {
    REGIONS.lock().unwrap_or_else(|e| e.into_inner()).iter().find(|r| r.context == context).copied().filter(|r| r.host != 0)
}

/// A fresh region of `bytes`, mapped and registered; `host` 0 where the driver refuses it.
fn make_region(context: u64, bytes: u64) -> Region {
    let refused = Region { context, host: 0, device: 0, bytes: 0 };
    // SAFETY: an anonymous private mapping; no existing memory is touched.
    let host = unsafe { libc::mmap(std::ptr::null_mut(), bytes as usize, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
    if host == libc::MAP_FAILED {
        return refused;
    }
    // SAFETY: `host` is the mapping just made, `bytes` long; the flags are documented ones.
    let registered = unsafe { api::cuMemHostRegister_v2(host, bytes as usize, HOST_REGISTER_PORTABLE | HOST_REGISTER_DEVICEMAP) } == Some(0);
    let mut device = 0u64;
    // SAFETY: `device` is writable; `host` is registered memory (flags must be 0).
    if !registered || unsafe { api::cuMemHostGetDevicePointer_v2(&mut device, host, 0) } != Some(0) || device == 0 {
        // Left mapped (and registered, if it was): never handed out.
        return refused;
    }
    crate::ffi::cuda_client::breadcrumbs::register_final_check();
    Region { context, host: host as usize, device, bytes }
}

/// The region's bytes `offset..offset + len`, when they lie inside it.
fn span(region: Region, offset: u64, len: usize) -> Option<usize> {
    let end = offset.checked_add(len as u64)?;
    (end <= region.bytes).then_some(region.host + offset as usize)
}

/// The regions, for the guarded calls of one session.
pub(crate) struct RealVerdictMemory<'a> {
    pub session: &'a crate::session::Session,
}

impl VerdictMemory for RealVerdictMemory<'_> {
    fn arena(&self) -> Option<VerdictArena> {
        let context = crate::ffi::cuda_client::breadcrumbs::current_context();
        if context == 0 {
            return None;
        }
        let found = {
            let mut regions = REGIONS.lock().unwrap_or_else(|e| e.into_inner());
            match regions.iter().find(|r| r.context == context) {
                Some(r) => *r,
                None => {
                    // Made under the lock: two threads of one context make one region; legal
                    // while another thread captures a graph (`relaxed`).
                    let r = crate::ffi::cuda_client::device::relaxed(|| make_region(context, self.session.config.staging_bytes));
                    regions.push(r);
                    r
                }
            }
        };
        (found.host != 0).then_some(VerdictArena { context })
    }

    fn queue_copy(&self, arena: VerdictArena, offset: u64, src: u64, len: usize, stream: u64) -> bool {
        let Some(dst) = region(arena.context).and_then(|r| span(r, offset, len)) else { return false };
        // SAFETY: `dst..dst + len` lies inside a registered (page-locked) region that stays
        // mapped for the rest of the process, so the copy is asynchronous and may land any
        // time; `src` is device memory the checks found inside a live allocation.
        let status = unsafe { api::cuMemcpyDtoHAsync_v2(dst as *mut c_void, src, len, stream as *mut c_void) };
        status == Some(0)
    }

    fn queue_scans(&self, arena: VerdictArena, offset: u64, jobs: &[BatchScan], stream: u64) -> bool {
        let s = self.session;
        let mode = s.config.device_scan;
        if mode == crate::config::DeviceScan::Off {
            return false;
        }
        let Some(r) = region(arena.context).filter(|r| span(*r, offset, 24 * jobs.len()).is_some()) else { return false };
        crate::ffi::cuda_client::device_scan::queue_batch(&s.device_scan, mode, jobs, stream, r.device + offset)
    }

    fn queue_mark(&self, arena: VerdictArena, offset: u64, value: u64, stream: u64) -> bool {
        let Some(r) = region(arena.context).filter(|r| offset.is_multiple_of(8) && span(*r, offset, 8).is_some()) else { return false };
        // SAFETY: an aligned word of this context's mapped region, `stream` the guarded call's
        // stream as the program passed it to CUDA.
        let status = unsafe { api::cuStreamWriteValue64_v2(stream as *mut c_void, r.device + offset, value, WRITE_VALUE_DEFAULT) };
        status == Some(0)
    }

    fn mark(&self, arena: VerdictArena, offset: u64) -> u64 {
        let Some(at) = region(arena.context).filter(|_| offset.is_multiple_of(8)).and_then(|r| span(r, offset, 8)) else { return 0 };
        // SAFETY: an aligned word inside the region, which stays mapped; the device writes it
        // whole (an 8-byte stream write), which an atomic load reads whole.
        unsafe { &*(at as *const AtomicU64) }.load(Ordering::Acquire)
    }

    fn read(&self, arena: VerdictArena, offset: u64, out: &mut [u8]) -> bool {
        let Some(at) = region(arena.context).and_then(|r| span(r, offset, out.len())) else { return false };
        // SAFETY: `at..at + out.len()` lies inside the region, which stays mapped; the caller
        // reads bytes whose mark landed, so the device no longer writes them.
        unsafe { std::ptr::copy_nonoverlapping(at as *const u8, out.as_mut_ptr(), out.len()) };
        true
    }

    fn landed(&self, arena: VerdictArena, offset: u64, len: usize) -> Option<&[u8]> {
        let at = region(arena.context).and_then(|r| span(r, offset, len))?;
        // SAFETY: `at..at + len` lies inside the region, which is never unmapped; the caller
        // reads bytes whose mark landed (the device no longer writes them) and that stay
        // reserved, so nothing else writes them, while the slice is read.
        Some(unsafe { std::slice::from_raw_parts(at as *const u8, len) })
    }

    fn judge_soon(&self) {
        crate::ffi::host::harvester::judge_soon();
    }

    fn clear(&self, arena: VerdictArena, offset: u64, len: usize) -> bool {
        let Some(at) = region(arena.context).and_then(|r| span(r, offset, len)) else { return false };
        // SAFETY: bytes inside the region that no queued work writes (the caller has just
        // reserved them, and their last user's mark landed before they were released).
        unsafe { std::ptr::write_bytes(at as *mut u8, 0, len) };
        true
    }
}
