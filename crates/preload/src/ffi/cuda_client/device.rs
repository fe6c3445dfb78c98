//! The guard's own calls into CUDA, behind `check::Device`. Each one leaves the program's view
//! as it was (`quietly`): a call that fails and sets the thread's last error is followed by
//! clearing it, when the program had no error pending before.

use std::ffi::{c_int, c_void};

use crate::check::init::DriverProbe;
use crate::check::lt::{Layout, MatmulDesc};
use crate::check::{Device, Libraries, Memory, Reads, Streams};
use crate::cuda::MemoryType;
use crate::ffi::cuda_client::cuda_api::{self as api, PointerAttributes};
use crate::ffi::intercept::reentry::defer_cancel;

const MEMCPY_DEVICE_TO_HOST: c_int = 2;

pub(crate) fn peek_last_error() -> Option<c_int> {
    // SAFETY: no arguments.
    unsafe { api::cudaPeekAtLastError() }
}

/// Runs a runtime call that may fail, then restores the program's "no last error".
pub(crate) fn quietly(call: impl FnOnce() -> Option<c_int>) -> Option<c_int> {
    let before = peek_last_error();
    let code = call()?;
    if code != 0 && before == Some(0) {
        // SAFETY: no arguments.
        unsafe { api::cudaGetLastError() };
    }
    Some(code)
}

/// Runs the guard's one-time setups (page-locking its staging region and breadcrumb pages, the
/// scan module's load, allocation and self-test) with the calling thread's stream-capture mode
/// Relaxed, put back after, as PyTorch's allocator does around cudaMalloc: in the default
/// (Global) mode CUDA refuses such calls while any thread captures a graph in Global mode (and
/// while this thread captures in any mode but Relaxed), and the refusal invalidates the
/// capture. The guard never makes them for a call on a capturing stream. The driver's form
/// leaves the runtime's last error alone; without it, `setup` runs as it is.
pub(crate) fn relaxed<T>(setup: impl FnOnce() -> T) -> T {
    const RELAXED: c_int = 2; // CU_STREAM_CAPTURE_MODE_RELAXED
    let mut mode = RELAXED;
    // SAFETY: `mode` is a writable int holding a valid CUstreamCaptureMode.
    let exchanged = unsafe { api::cuThreadExchangeStreamCaptureMode(&mut mode) } == Some(0);
    let out = setup();
    if exchanged {
        // SAFETY: as above; `mode` holds the thread's mode from before.
        unsafe { api::cuThreadExchangeStreamCaptureMode(&mut mode) };
    }
    out
}

/// The guard's view of CUDA (and, when enabled, of the driver for on-device scans), for one
/// hooked call. What can block (a copy, a synchronisation, a scan, a driver probe) holds a
/// cancellation request back until it is done (`defer_cancel`); the quick queries of a clean
/// call go straight through.
pub(crate) struct RealDevice<'a> {
    pub session: &'a crate::session::Session,
    /// The program's last error before the guard's first call of this hooked call. The guard's
    /// calls leave it as it was (a failure is cleared when nothing was pending), and cuBLAS
    /// never touches the public runtime's error state, so it is asked once per hooked call
    /// rather than before each of the guard's calls.
    pending_before: std::cell::Cell<Option<Option<c_int>>>,
    /// The calling thread's block (its stack's range).
    thread: &'a crate::ffi::host::thread::PerThread,
    verdicts: crate::ffi::cuda_client::verdict_memory::RealVerdictMemory<'a>,
}

impl<'a> RealDevice<'a> {
    pub(crate) fn new(session: &'a crate::session::Session, thread: &'a crate::ffi::host::thread::PerThread) -> Self {
        let verdicts = crate::ffi::cuda_client::verdict_memory::RealVerdictMemory { session };
        Self { session, pending_before: std::cell::Cell::new(None), thread, verdicts }
    }

    /// `quietly`, with the program's pending error asked once.
    fn quietly(&self, call: impl FnOnce() -> Option<c_int>) -> Option<c_int> {
        let before = match self.pending_before.get() {
            Some(known) => known,
            None => {
                let asked = peek_last_error();
                self.pending_before.set(Some(asked));
                asked
            }
        };
        let code = call()?;
        if code != 0 && before == Some(0) {
            // SAFETY: no arguments.
            unsafe { api::cudaGetLastError() };
        }
        Some(code)
    }

    /// `cudaStreamSynchronize`, its error as `quietly` leaves it; the caller holds a
    /// cancellation back (`synchronize`, or a read that waits for its copy).
    fn wait_for(&self, stream: u64) -> i32 {
        // SAFETY: a stream handle the program passed to the hooked call.
        self.quietly(|| unsafe { api::cudaStreamSynchronize(stream as *mut c_void) }).unwrap_or(0)
    }
}

impl Reads for RealDevice<'_> {
    fn scan_on_device(&self, addr: u64, shape: crate::validate::StoredShape, dtype: crate::scan::DType, stream: u64) -> Option<crate::scan::MatrixScan> {
        let mode = self.session.config.device_scan;
        if mode == crate::config::DeviceScan::Off {
            return None;
        }
        defer_cancel(|| crate::ffi::cuda_client::device_scan::scan(&self.session.device_scan, mode, addr, shape, dtype, stream))
    }

    fn scan_batch_on_device(&self, jobs: &[crate::check::BatchScan], stream: u64) -> Option<Vec<(crate::scan::MatrixScan, Option<u64>)>> {
        let mode = self.session.config.device_scan;
        if mode == crate::config::DeviceScan::Off {
            return None;
        }
        defer_cancel(|| crate::ffi::cuda_client::device_scan::scan_batch(&self.session.device_scan, mode, jobs, stream))
    }

    fn read(&self, addr: u64, out: &mut [u8], stream: u64) -> Result<(), i32> {
        defer_cancel(|| {
            // `out` is valid for out.len() bytes; callers pass only device ranges already verified
            // inside a live allocation.
            let dst = out.as_mut_ptr() as *mut c_void;
            // SAFETY: `dst` is `len` writable bytes of a slice borrowed until the stream is synchronised below; the device range was verified inside a live allocation by the caller.
            let code = self
                .quietly(|| unsafe { api::cudaMemcpyAsync(dst, addr as *const c_void, out.len(), MEMCPY_DEVICE_TO_HOST, stream as *mut c_void) })
                .ok_or(-1)?;
            if code != 0 {
                return Err(code);
            }
            match self.wait_for(stream) {
                0 => Ok(()),
                code => Err(code),
            }
        })
    }

    fn read_many(&self, pieces: &[(u64, usize)], out: &mut [u8], stream: u64) -> Result<(), i32> {
        defer_cancel(|| {
            let mut at = 0;
            for &(addr, len) in pieces {
                let dst = out.get_mut(at..at + len).ok_or(-1)?;
                // `dst` is valid for `len` bytes; callers pass only device ranges already verified
                // inside a live allocation. Queued: one synchronisation below covers them all.
                let dst = dst.as_mut_ptr() as *mut c_void;
                // SAFETY: `dst` is `len` writable bytes of a slice borrowed until the stream is synchronised below; the device range was verified inside a live allocation by the caller.
                let code = self
                    .quietly(|| unsafe { api::cudaMemcpyAsync(dst, addr as *const c_void, len, MEMCPY_DEVICE_TO_HOST, stream as *mut c_void) })
                    .ok_or(-1)?;
                if code != 0 {
                    return Err(code);
                }
                at += len;
            }
            match self.wait_for(stream) {
                0 => Ok(()),
                code => Err(code),
            }
        })
    }

    fn read_host(&self, addr: u64, out: &mut [u8]) -> bool {
        if crate::ffi::host::thread::is_live_stack_of(self.thread, addr, out.len()) {
            // SAFETY: the bytes are in the calling thread's stack, between this frame and its
            // top: mapped, and not written while this thread reads them.
            unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, out.as_mut_ptr(), out.len()) };
            return true;
        }
        read_host(addr, out)
    }
}

impl Memory for RealDevice<'_> {
    fn memory_type(&self, ptr: u64) -> Option<MemoryType> {
        let mut attrs = PointerAttributes { kind: 0, device: 0, device_pointer: std::ptr::null_mut(), host_pointer: std::ptr::null_mut() };
        // SAFETY: `attrs` is a writable cudaPointerAttributes; the pointer is only classified, never read.
        let code = self.quietly(|| unsafe { api::cudaPointerGetAttributes(&mut attrs, ptr as *const c_void) })?;
        (code == 0).then(|| MemoryType::decode(attrs.kind))
    }

    fn is_on_this_threads_stack(&self, ptr: u64) -> bool {
        crate::ffi::host::thread::is_on_stack_of(self.thread, ptr)
    }

    fn memory_info(&self) -> Option<(u64, u64)> {
        defer_cancel(memory_info)
    }

    fn read_parameter(&self, ptr: u64, out: &mut [u8]) -> bool {
        crate::ffi::intercept::out_param::read_bytes(ptr, out)
    }

    fn parameter_string(&self, ptr: u64) -> Option<String> {
        crate::ffi::intercept::out_param::c_string(ptr as *const std::ffi::c_char)
    }

    fn address_range(&self, ptr: u64) -> Option<(u64, u64)> {
        address_range(ptr)
    }

    fn write_parameter(&self, ptr: u64, bytes: &[u8]) -> bool {
        crate::ffi::intercept::out_param::write_bytes(ptr, bytes)
    }

    fn with_scan_buffer(&self, body: &mut dyn FnMut(&mut Vec<u8>)) {
        crate::ffi::host::thread::with_scan_buffer(body)
    }
}

impl Streams for RealDevice<'_> {
    fn synchronize(&self, stream: u64) -> i32 {
        defer_cancel(|| self.wait_for(stream))
    }

    fn is_capturing(&self, stream: u64) -> Result<bool, i32> {
        let mut status: c_int = 0;
        // SAFETY: `status` is a writable c_int; a stream handle the program passed.
        match self.quietly(|| unsafe { api::cudaStreamIsCapturing(stream as *mut c_void, &mut status) }) {
            Some(0) => Ok(status != 0),
            Some(code) => Err(code),
            None => Err(-1),
        }
    }

    fn breadcrumb(&self, stream: u64, issued: crate::session::breadcrumbs::Issued) -> bool {
        crate::ffi::cuda_client::breadcrumbs::drop_breadcrumb(&self.session.breadcrumbs, stream, issued)
    }
}

impl Libraries for RealDevice<'_> {
    fn compute_capability(&self) -> Option<(i32, i32)> {
        const MAJOR: c_int = 75; // cudaDevAttrComputeCapabilityMajor
        const MINOR: c_int = 76;
        let mut device: c_int = 0;
        // SAFETY: `device` is a writable c_int.
        if self.quietly(|| unsafe { api::cudaGetDevice(&mut device) })? != 0 {
            return None;
        }
        let (mut major, mut minor) = (0, 0);
        // SAFETY: the out-parameter is a writable c_int.
        let ok = self.quietly(|| unsafe { api::cudaDeviceGetAttribute(&mut major, MAJOR, device) })? == 0
            // SAFETY: the out-parameter is a writable c_int.
            && self.quietly(|| unsafe { api::cudaDeviceGetAttribute(&mut minor, MINOR, device) })? == 0;
        ok.then_some((major, minor))
    }

    fn probe_driver(&self, device_count: Option<(i32, Option<i32>)>) -> DriverProbe {
        defer_cancel(|| crate::ffi::host::environment::probe_driver(device_count))
    }

    fn param_layout(&self, func: u64, driver: bool) -> Option<Vec<(u32, u32)>> {
        // The runtime's form fails past the last parameter, and a failure replaces the
        // program's last error; a pending error cannot be put back once replaced (the runtime
        // has no call that sets it). So it is asked only while nothing is pending, and while
        // something is, not at all: `None`, asked again at a later launch. The driver's form
        // leaves the runtime's last error alone.
        if !driver && peek_last_error() != Some(0) {
            return None;
        }
        let mut layout = Vec::new();
        // No count before CUDA 13.2: asked until the index is past the last parameter. A
        // kernel has at most 32 KiB of parameters; 256 of them is plenty.
        for index in 0..256usize {
            let (mut offset, mut size) = (0usize, 0usize);
            // SAFETY: two writable out-parameters; a function the program launched. The
            // runtime's form sets its last error on failure: asked quietly (nothing was
            // pending: above).
            let status = quietly(|| unsafe {
                if driver {
                    api::cuFuncGetParamInfo(func as *const c_void, index, &mut offset, &mut size)
                } else {
                    api::cudaFuncGetParamInfo(func as *const c_void, index, &mut offset, &mut size)
                }
            });
            // A library without the call (before CUDA 12.4) has no layout to give, for good.
            let Some(status) = status else { return Some(Vec::new()) };
            if status != 0 {
                break;
            }
            let (Ok(offset), Ok(size)) = (u32::try_from(offset), u32::try_from(size)) else { return Some(Vec::new()) };
            layout.push((offset, size));
        }
        Some(layout)
    }

    fn cudnn_last_error(&self) -> Option<String> {
        crate::ffi::cuda_client::cudnn::last_error()
    }

    fn cudnn_libraries(&self, scope: crate::check::cudnn::Scope) -> Option<crate::trace::CudnnLibraries> {
        defer_cancel(|| crate::ffi::cuda_client::cudnn::libraries(scope))
    }

    fn cudnn_variant_pack(&self, pack: u64) -> Option<crate::check::cudnn::VariantPack> {
        crate::ffi::cuda_client::cudnn::variant_pack(pack)
    }

    fn cudnn_plan_workspace(&self, plan: u64) -> Option<u64> {
        crate::ffi::cuda_client::cudnn::plan_workspace(plan)
    }

    fn lt_layout(&self, layout: u64) -> Option<Layout> {
        let get = |attr: c_int, size: usize| attribute(api::cublasLtMatrixLayoutGetAttribute, layout, attr, size);
        Some(Layout {
            dtype: i32_of(get(0, 4)?),
            order: i32_of(get(1, 4)?),
            rows: u64::from_le_bytes(get(2, 8)?),
            cols: u64::from_le_bytes(get(3, 8)?),
            ld: i64::from_le_bytes(get(4, 8)?),
            batch: i32_of(get(5, 4)?),
            stride: i64::from_le_bytes(get(6, 8)?),
        })
    }

    fn lt_matmul_desc(&self, desc: u64) -> Option<MatmulDesc> {
        let get = |attr: c_int, size: usize| attribute(api::cublasLtMatmulDescGetAttribute, desc, attr, size);
        let ptr_size = std::mem::size_of::<*const c_void>();
        Some(MatmulDesc {
            compute: i32_of(get(0, 4)?),
            scale: i32_of(get(1, 4)?),
            pointer_mode: get(2, 4).map(i32_of).unwrap_or(0),
            transa: get(3, 4).map(i32_of).unwrap_or(0),
            transb: get(4, 4).map(i32_of).unwrap_or(0),
            epilogue: get(7, 4).map(|b| i32_of(b) as u32).unwrap_or(1),
            bias: get(8, ptr_size).map(u64::from_le_bytes).unwrap_or(0),
            bias_stride: get(10, 8).map(i64::from_le_bytes).unwrap_or(0),
            bias_type: get(26, 4).map(i32_of).unwrap_or(-1),
        })
    }
}

impl Device for RealDevice<'_> {
    fn verdict_memory(&self) -> Option<&dyn crate::check::VerdictMemory> {
        Some(&self.verdicts)
    }
}

type GetAttribute = unsafe fn(*mut c_void, c_int, *mut c_void, usize, *mut usize) -> Option<c_int>;

/// Reads one attribute of `size` (<= 8) bytes; `None` when the library refuses.
fn attribute(get: GetAttribute, object: u64, attr: c_int, size: usize) -> Option<[u8; 8]> {
    let mut buf = [0u8; 8];
    let mut written = 0usize;
    // SAFETY: `get` is one of cublasLt's attribute getters, given a descriptor the program passed
    // to the hooked call, `buf` writable for size.min(8) bytes and `written` writable.
    let status = unsafe { get(object as *mut c_void, attr, buf.as_mut_ptr() as *mut c_void, size.min(8), &mut written) }?;
    (status == 0 && written == size).then_some(buf)
}

fn i32_of(b: [u8; 8]) -> i32 {
    i32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// Reads a scalar the program passed by host pointer, never crashing on a bad one.
fn read_host(addr: u64, out: &mut [u8]) -> bool {
    if addr == 0 {
        return false;
    }
    // process_vm_readv on ourselves reports a bad address as EFAULT instead of crashing,
    // so a garbage scalar pointer never takes the program down inside the guard.
    let local = libc::iovec { iov_base: out.as_mut_ptr() as *mut c_void, iov_len: out.len() };
    let remote = libc::iovec { iov_base: addr as *mut c_void, iov_len: out.len() };
    // SAFETY: both iovecs describe `out.len()` bytes; the kernel validates `remote`.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    if n == out.len() as isize {
        return true;
    }
    let errno = std::io::Error::last_os_error().raw_os_error();
    if n < 0 && matches!(errno, Some(libc::ENOSYS) | Some(libc::EPERM)) {
        // The system call is filtered (some container profiles): read it as cuBLAS is about
        // to, in host pointer mode, during this same call.
        // SAFETY: cuBLAS dereferences this host scalar pointer itself during the call.
        unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, out.as_mut_ptr(), out.len()) };
        return true;
    }
    false
}

/// The start and size of the device allocation holding `ptr`, as the driver knows it (driver
/// calls leave the runtime's last error alone).
pub(crate) fn address_range(ptr: u64) -> Option<(u64, u64)> {
    let (mut base, mut size) = (0u64, 0usize);
    // SAFETY: `base` and `size` are writable; the address is only looked up.
    let code = unsafe { api::cuMemGetAddressRange_v2(&mut base, &mut size, ptr) }?;
    (code == 0 && size > 0).then_some((base, size as u64))
}

/// `cudaMemGetInfo`, when the runtime can answer without disturbing the program.
pub(crate) fn memory_info() -> Option<(u64, u64)> {
    // After a failed cudaMalloc the last error is 2, and memory is exactly what the user needs
    // to see; a context that is broken or never started cannot answer, so don't ask.
    let pending = peek_last_error()?;
    if crate::cuda::cuda_error_is_sticky(pending) || crate::cuda::cuda_error_is_init_failure(pending) {
        return None;
    }
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: `free` and `total` are writable.
    let code = quietly(|| unsafe { api::cudaMemGetInfo(&mut free, &mut total) })?;
    (code == 0).then_some((free as u64, total as u64))
}

fn int_query(query: impl FnOnce(*mut c_int) -> Option<c_int>) -> Option<(c_int, c_int)> {
    let mut value: c_int = 0;
    let code = quietly(|| query(&mut value))?;
    Some((code, value))
}

pub(crate) fn runtime_version() -> Option<i32> {
    int_query(|v|
        // SAFETY: `v` is int_query's own writable c_int.
        unsafe { api::cudaRuntimeGetVersion(v) })
    .and_then(|(code, v)| (code == 0 && v > 0).then_some(v))
}

/// The driver's version as the runtime reports it; `None` when there is no driver.
pub(crate) fn driver_version_via_runtime() -> Option<i32> {
    int_query(|v|
        // SAFETY: `v` is int_query's own writable c_int.
        unsafe { api::cudaDriverGetVersion(v) })
    .and_then(|(code, v)| (code == 0 && v > 0).then_some(v))
}

/// `cudaGetDeviceCount`'s status and count, asked only when the program has no error pending.
pub(crate) fn device_count() -> Option<(i32, Option<i32>)> {
    if peek_last_error() != Some(0) {
        return None;
    }
    const UNWRITTEN: c_int = -1;
    let mut count = UNWRITTEN;
    // SAFETY: `count` is a writable c_int.
    let code = quietly(|| unsafe { api::cudaGetDeviceCount(&mut count) })?;
    Some((code, (code == 0 && count != UNWRITTEN).then_some(count)))
}

/// `cublasLtGetVersion` of the libcublasLt the process loaded (never loading one).
pub(crate) fn cublas_lt_version() -> Option<i32> {
    // SAFETY: no arguments.
    let v = unsafe { api::cublasLtGetVersion() }?;
    i32::try_from(v).ok().filter(|v| *v > 0)
}

pub(crate) fn cublas_version() -> Option<i32> {
    let mut parts = [0 as c_int; 3];
    for (kind, part) in parts.iter_mut().enumerate() {
        // SAFETY: `part` is a writable c_int.
        if unsafe { api::cublasGetProperty(kind as c_int, part) }? != 0 {
            return None;
        }
    }
    Some(parts[0] * 10000 + parts[1] * 100 + parts[2])
}
