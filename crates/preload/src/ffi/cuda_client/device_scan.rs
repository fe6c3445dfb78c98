//! The NaN/Inf scan on the GPU itself: the kernel in crates/preload/src/kernels/nonfinite.cu, compiled to the
//! PTX in crates/preload/src/ptx/nonfinite.ptx by NVRTC (scripts/gen-ptx.sh), loaded once per CUDA context
//! through the driver API and launched on the call's stream; it reduces NaN count, Inf count
//! and the first bad index into 24 bytes that are copied back. Copying a large operand over
//! PCIe to scan it on the host costs more than the GEMM itself.
//!
//! Before its first verdict in a context the kernel passes a self-test (check/selftest.rs):
//! planted NaN/Inf in every dtype, compared with the host scan. Only the driver the program
//! already loaded is used (the typed table never loads one): no driver, a driver that refuses
//! the module, a failed launch or a wrong self-test answer, and the scan falls back to the host
//! path for the rest of the process, with the reason recorded once in the trace (and said on
//! stderr for a wrong answer, or when CUBLASGUARD_DEVICE_SCAN=on asked for the device).

use std::ffi::{c_char, c_int, c_void, CString};

use crate::check::scan_grid::{self, THREADS};
use crate::check::{selftest, BatchScan, MAX_BATCH_SCANS};
use crate::config::DeviceScan;
use crate::ffi::cuda_client::cuda_api as api;
use crate::scan::{DType, MatrixScan};
use crate::session::{DeviceScanState, LoadedKernels};
use crate::validate::StoredShape;

pub(crate) const KERNEL_PTX: &str = include_str!("../../ptx/nonfinite.ptx");
const KERNEL_NAME: &[u8] = b"cublasguard_nonfinite\0";
const MANY_KERNEL_NAME: &[u8] = b"cublasguard_nonfinite_many\0";
/// Result bytes: three u64 per operand of a batch.
const OUT_BYTES: usize = 24 * MAX_BATCH_SCANS;

type Ptr = *mut c_void;

/// Why the device scan is off: not available here (quiet unless asked for), or wrong (said).
enum Unusable {
    Unavailable(String),
    Wrong(String),
}

fn fail<T>(state: &DeviceScanState, mode: DeviceScan, why: Unusable) -> Option<T> {
    let (why, loud) = match why {
        Unusable::Unavailable(why) => (why, mode == DeviceScan::On),
        Unusable::Wrong(why) => (why, true),
    };
    if state.fail(why.clone()) && loud {
        crate::ffi::host::lifecycle::say(&format!("cublasguard: the on-device scan is off ({why}); scanning on the host"));
    }
    None
}

/// A driver call's status, or the reason the driver lacks it.
fn driver(name: &str, code: Option<c_int>) -> Result<(), String> {
    match code {
        None => Err(format!("the driver has no {name} (or is not loaded)")),
        Some(0) => Ok(()),
        Some(code) => Err(format!("{name} failed: {code}")),
    }
}

fn kind(dtype: DType) -> Option<u32> {
    Some(match dtype {
        DType::F32 => 0,
        DType::F64 => 1,
        DType::F16 => 2,
        DType::BF16 => 14,
        DType::F8E4M3 => 28,
        DType::F8E5M2 => 29,
        _ => return None,
    })
}

/// The kernel and result buffer of the current context, loading them (and running the
/// self-test, on `stream`) on first use.
fn context(state: &DeviceScanState, stream: u64) -> Result<LoadedKernels, Unusable> {
    let mut ctx: Ptr = std::ptr::null_mut();
    // SAFETY: `ctx` is a writable pointer.
    driver("cuCtxGetCurrent", unsafe { api::cuCtxGetCurrent(&mut ctx) }).map_err(Unusable::Unavailable)?;
    if ctx.is_null() {
        return Err(Unusable::Unavailable("no current CUDA context".into()));
    }
    let mut wrong = None;
    // Loaded, allocated and self-tested with the thread's capture mode Relaxed: legal while
    // another thread captures a graph (never for a call on a capturing stream: no scan is made).
    let loaded = state.kernel_for(ctx as usize, || {
        crate::ffi::cuda_client::device::relaxed(|| {
            let ptx = CString::new(KERNEL_PTX).map_err(|_| "the PTX text holds a NUL".to_string())?;
            let (mut module, mut function, mut many, mut out): (Ptr, Ptr, Ptr, u64) = (std::ptr::null_mut(), std::ptr::null_mut(), std::ptr::null_mut(), 0);
            // Valid out-parameters; the PTX and the kernel names are NUL-terminated.
            // SAFETY: `module` is writable; the PTX is a NUL-terminated CString.
            driver("cuModuleLoadData", unsafe { api::cuModuleLoadData(&mut module, ptx.as_ptr() as *const c_void) })?;
            // SAFETY: the out-parameter is writable, the module was just loaded, the name is a NUL-terminated literal.
            driver("cuModuleGetFunction", unsafe { api::cuModuleGetFunction(&mut function, module, KERNEL_NAME.as_ptr() as *const c_char) })?;
            // SAFETY: the out-parameter is writable, the module was just loaded, the name is a NUL-terminated literal.
            driver("cuModuleGetFunction", unsafe { api::cuModuleGetFunction(&mut many, module, MANY_KERNEL_NAME.as_ptr() as *const c_char) })?;
            // SAFETY: the out-parameter is a writable u64.
            driver("cuMemAlloc of the result buffer", unsafe { api::cuMemAlloc_v2(&mut out, OUT_BYTES) })?;
            let kernels = LoadedKernels { single: function as usize, many: many as usize, out, resident_blocks: resident_blocks(many) };
            match self_test(kernels, stream) {
                Ok(()) => Ok(kernels),
                Err(Unusable::Wrong(why)) => {
                    wrong = Some(why.clone());
                    Err(why)
                }
                Err(Unusable::Unavailable(why)) => Err(why),
            }
        })
    });
    match (loaded, wrong) {
        (Ok(kernels), _) => Ok(kernels),
        (Err(_), Some(why)) => Err(Unusable::Wrong(format!("its self-test failed: {why}"))),
        (Err(why), None) => Err(Unusable::Unavailable(why)),
    }
}

/// Blocks of the scan the current device holds at once (`scan_grid::resident_blocks`); what
/// the driver does not answer falls back to a large GPU's figure.
fn resident_blocks(function: Ptr) -> u32 {
    let mut device: c_int = 0;
    // SAFETY: `device` is a writable int.
    let device = (unsafe { api::cuCtxGetDevice(&mut device) } == Some(0)).then_some(device);
    let attribute = |attribute: c_int| {
        let mut value: c_int = 0;
        let device = device?;
        // SAFETY: `value` is a writable int; `device` is the current context's device.
        (unsafe { api::cuDeviceGetAttribute(&mut value, attribute, device) } == Some(0)).then_some(value)
    };
    const MULTIPROCESSOR_COUNT: c_int = 16;
    const MAX_THREADS_PER_MULTIPROCESSOR: c_int = 39;
    let mut blocks: c_int = 0;
    // SAFETY: `blocks` is a writable int; `function` was just found in a module of this context.
    let occupancy = unsafe { api::cuOccupancyMaxActiveBlocksPerMultiprocessor(&mut blocks, function, THREADS as c_int, 0) } == Some(0);
    scan_grid::resident_blocks(attribute(MULTIPROCESSOR_COUNT), occupancy.then_some(blocks), attribute(MAX_THREADS_PER_MULTIPROCESSOR))
}

/// Runs the kernel once over `rows x cols` (leading dimension `ld`) elements at `addr`.
fn launch(kernels: LoadedKernels, addr: u64, shape: StoredShape, dtype: DType, kind: u32, stream: u64) -> Result<MatrixScan, String> {
    let (function, out) = (kernels.single as Ptr, kernels.out);
    let (mut data, mut rows, mut cols, mut ld, mut kind, mut out_arg) = (addr, shape.rows as u64, shape.cols as u64, shape.ld as u64, kind, out);
    let mut params: [Ptr; 6] = [
        &mut data as *mut u64 as Ptr,
        &mut rows as *mut u64 as Ptr,
        &mut cols as *mut u64 as Ptr,
        &mut ld as *mut u64 as Ptr,
        &mut kind as *mut u32 as Ptr,
        &mut out_arg as *mut u64 as Ptr,
    ];
    let elements = rows.saturating_mul(cols);
    let blocks = scan_grid::blocks_for(scan_grid::segments(shape, dtype.size().unwrap_or(1), 1), kernels.resident_blocks);
    let stream = stream as Ptr;
    let mut result = [0u64; 3];
    // `params` points at six live values matching the kernel's parameters; `result` is 24
    // writable bytes; the buffer `out` belongs to this context.
    // Each step only once the one before it succeeded: a kernel launched over a buffer that was
    // never cleared, or a copy of a result never computed, is a verdict from garbage.
    // SAFETY: `out` is this context's result buffer, at least as long as the bytes set.
    driver("cuMemsetD8Async", unsafe { api::cuMemsetD8Async(out, 0, 16, stream) })?;
    // SAFETY: `out` is this context's result buffer, at least as long as the bytes set.
    driver("cuMemsetD8Async", unsafe { api::cuMemsetD8Async(out + 16, 0xff, 8, stream) })?;
    // SAFETY: `params` points at live values matching the kernel's parameters; the function belongs to this context.
    driver("cuLaunchKernel", unsafe { api::cuLaunchKernel(function, blocks, 1, 1, THREADS, 1, 1, 0, stream, params.as_mut_ptr(), std::ptr::null_mut()) })?;
    // Into pageable host memory, the copy returns only once it is done (CUDA's documented
    // behaviour for device-to-pageable copies): it is the synchronisation.
    // SAFETY: `result` is writable for the bytes copied and, pageable, the copy completes before the call returns.
    driver("cuMemcpyDtoHAsync", unsafe { api::cuMemcpyDtoHAsync_v2(result.as_mut_ptr() as Ptr, out, 24, stream) })?;
    let [nan, inf, first] = result;
    Ok(MatrixScan {
        nan,
        inf,
        first_nonfinite: (first != u64::MAX).then(|| (first % ld, first / ld)),
        scanned_elements: elements,
        sampled: false,
        on_device: true,
    })
}

/// Scans the planted matrices on the device, one launch each and all in one batched launch, and
/// compares with the host's answers.
fn self_test(kernels: LoadedKernels, stream: u64) -> Result<(), Unusable> {
    let cases = selftest::planted();
    let bytes = cases.iter().map(|c| c.bytes.len()).max().unwrap_or(0);
    let mut buffer = 0u64;
    // SAFETY: the out-parameter is a writable u64.
    driver("cuMemAlloc of the self-test buffer", unsafe { api::cuMemAlloc_v2(&mut buffer, bytes) }).map_err(Unusable::Unavailable)?;
    let result = (|| {
        for case in &cases {
            let kind = kind(case.dtype).ok_or_else(|| Unusable::Wrong(format!("no kernel type for {}", case.dtype.name())))?;
            // `buffer` holds `bytes` >= case.bytes.len() bytes of device memory.
            // SAFETY: a synchronous copy from a live slice into a device buffer this function allocated with at least that many bytes.
            driver("cuMemcpyHtoD", unsafe { api::cuMemcpyHtoD_v2(buffer, case.bytes.as_ptr() as *const c_void, case.bytes.len()) })
                .map_err(Unusable::Unavailable)?;
            let answer =
                launch(kernels, buffer, case.shape, case.dtype, kind, stream).map_err(|why| Unusable::Wrong(format!("{}: {why}", case.dtype.name())))?;
            if let Some(why) = selftest::judge(case, &answer) {
                return Err(Unusable::Wrong(why));
            }
        }
        // The batch: every case at once, each in its own slice of one buffer.
        let mut offsets = Vec::with_capacity(cases.len());
        let mut all = Vec::new();
        for case in &cases {
            offsets.push(all.len() as u64);
            all.extend_from_slice(&case.bytes);
            all.resize(all.len().next_multiple_of(16), 0);
        }
        let mut batch_buffer = 0u64;
        // SAFETY: the out-parameter is a writable u64.
        driver("cuMemAlloc of the self-test batch", unsafe { api::cuMemAlloc_v2(&mut batch_buffer, all.len()) }).map_err(Unusable::Unavailable)?;
        let jobs: Vec<BatchScan> = cases
            .iter()
            .zip(&offsets)
            .map(|(c, off)| BatchScan { addr: batch_buffer + off, shape: c.shape, dtype: c.dtype, members: 1, stride: 0, array: false })
            .collect();
        // `batch_buffer` holds all.len() bytes of device memory.
        // SAFETY: a synchronous copy from a live slice into a device buffer this function allocated with at least that many bytes.
        let copied =
            driver("cuMemcpyHtoD", unsafe { api::cuMemcpyHtoD_v2(batch_buffer, all.as_ptr() as *const c_void, all.len()) }).map_err(Unusable::Unavailable);
        let answers = copied.and_then(|()| launch_many(kernels, &jobs, stream).map_err(|why| Unusable::Wrong(format!("the batched kernel: {why}"))));
        // SAFETY: a buffer this function allocated, freed once.
        let _ = unsafe { api::cuMemFree_v2(batch_buffer) };
        for (case, (answer, _)) in cases.iter().zip(answers?) {
            if let Some(why) = selftest::judge(case, &answer) {
                return Err(Unusable::Wrong(format!("the batched kernel, {why}")));
            }
        }
        Ok(())
    })();
    // The guard's own buffer, freed once the answers are in.
    // SAFETY: a buffer this function allocated, freed once.
    let _ = unsafe { api::cuMemFree_v2(buffer) };
    result
}

/// Scans one matrix on the GPU, on `stream`; `None`: use the host path.
pub(crate) fn scan(state: &DeviceScanState, mode: DeviceScan, addr: u64, shape: StoredShape, dtype: DType, stream: u64) -> Option<MatrixScan> {
    if state.failed() {
        return None;
    }
    let kind = kind(dtype)?;
    if shape.rows <= 0 || shape.cols <= 0 || shape.ld < shape.rows {
        return Some(MatrixScan::default());
    }
    let kernels = match context(state, stream) {
        Ok(k) => k,
        Err(why) => return fail(state, mode, why),
    };
    match launch(kernels, addr, shape, dtype, kind, stream) {
        Ok(scan) => Some(scan),
        Err(why) => fail(state, mode, Unusable::Wrong(format!("the scan kernel failed: {why}"))),
    }
}

/// `struct scan_job` of crates/preload/src/kernels/nonfinite.cu.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ScanJob {
    data: u64,
    rows: u64,
    cols: u64,
    ld: u64,
    members: u64,
    stride: i64,
    kind: u32,
    array: u32,
}

/// `struct scan_jobs`: passed by value, so the launch needs no copy of its own.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ScanJobs {
    job: [ScanJob; MAX_BATCH_SCANS],
    count: u32,
    unused: u32,
}

/// The jobs in the kernel's form, and the blocks to launch per job.
fn pack(kernels: LoadedKernels, jobs: &[BatchScan]) -> Result<(ScanJobs, u32), String> {
    let mut packed = ScanJobs::default();
    let mut most_segments = 0u64;
    for (slot, job) in packed.job.iter_mut().zip(jobs) {
        let kind = kind(job.dtype).ok_or_else(|| format!("no kernel type for {}", job.dtype.name()))?;
        let (rows, cols) = (job.shape.rows.max(0) as u64, job.shape.cols.max(0) as u64);
        *slot = ScanJob { data: job.addr, rows, cols, ld: job.shape.ld.max(0) as u64, members: job.members, stride: job.stride, kind, array: job.array as u32 };
        most_segments = most_segments.max(scan_grid::segments(job.shape, job.dtype.size().unwrap_or(1), job.members));
    }
    packed.count = jobs.len().min(MAX_BATCH_SCANS) as u32;
    // Blocks per job: the jobs share the device, so together they take about what it holds.
    let blocks = scan_grid::blocks_for(most_segments, kernels.resident_blocks.div_ceil(packed.count.max(1)));
    Ok((packed, blocks))
}

/// Launches the scan of every job on `stream`, its results (24 bytes a job, zeroed by the
/// caller) written to the device address `out`.
fn enqueue_many(kernels: LoadedKernels, jobs: &[BatchScan], stream: u64, out: u64) -> Result<(), String> {
    let (mut packed, blocks) = pack(kernels, jobs)?;
    let mut out = out;
    let mut params: [Ptr; 2] = [&mut packed as *mut ScanJobs as Ptr, &mut out as *mut u64 as Ptr];
    driver(
        "cuLaunchKernel",
        // SAFETY: `params` points at live values matching the kernel's parameters (the driver
        // copies them at the launch); the function belongs to this context.
        unsafe {
            api::cuLaunchKernel(kernels.many as Ptr, blocks, packed.count, 1, THREADS, 1, 1, 0, stream as Ptr, params.as_mut_ptr(), std::ptr::null_mut())
        },
    )
}

/// One launch over every job: results in `kernels.out`, read back with one copy (which waits
/// for the launch). Each job's counts, and the member of its first NaN/Inf.
fn launch_many(kernels: LoadedKernels, jobs: &[BatchScan], stream: u64) -> Result<Vec<(MatrixScan, Option<u64>)>, String> {
    let out = kernels.out;
    let count = jobs.len().min(MAX_BATCH_SCANS);
    let bytes = 24 * count;
    let stream_ptr = stream as Ptr;
    let mut result = [0u64; 3 * MAX_BATCH_SCANS];
    // As in `scan`: each step only once the one before it succeeded.
    // SAFETY: `out` is this context's result buffer of OUT_BYTES >= bytes.
    driver("cuMemsetD8Async", unsafe { api::cuMemsetD8Async(out, 0, bytes, stream_ptr) })?;
    enqueue_many(kernels, jobs, stream, out)?;
    // Into pageable host memory: the copy returns once it is done, and is the synchronisation.
    // SAFETY: `result` is writable for the bytes copied and, pageable, the copy completes before the call returns.
    driver("cuMemcpyDtoHAsync", unsafe { api::cuMemcpyDtoHAsync_v2(result.as_mut_ptr() as Ptr, out, bytes, stream_ptr) })?;
    Ok(scan_grid::batch_results(jobs, &result))
}

/// Queues the scan of every job on `stream` with its results written to `out` (device-mapped
/// host memory the caller zeroed, 24 bytes a job): nothing is waited for. False: the device
/// scan is unavailable (or failed), and the caller scans on the host.
pub(crate) fn queue_batch(state: &DeviceScanState, mode: DeviceScan, jobs: &[BatchScan], stream: u64, out: u64) -> bool {
    if state.failed() || jobs.is_empty() || jobs.len() > MAX_BATCH_SCANS || jobs.iter().any(|j| kind(j.dtype).is_none()) {
        return false;
    }
    if jobs.iter().any(|j| j.shape.rows <= 0 || j.shape.cols <= 0 || j.shape.ld < j.shape.rows) {
        return false;
    }
    let kernels = match context(state, stream) {
        Ok(k) => k,
        Err(why) => return fail::<()>(state, mode, why).is_some(),
    };
    match enqueue_many(kernels, jobs, stream, out) {
        Ok(()) => true,
        Err(why) => fail::<()>(state, mode, Unusable::Wrong(format!("the batched scan kernel failed: {why}"))).is_some(),
    }
}

/// Scans every job in one launch on the GPU, on `stream`; `None`: use the host path.
pub(crate) fn scan_batch(state: &DeviceScanState, mode: DeviceScan, jobs: &[BatchScan], stream: u64) -> Option<Vec<(MatrixScan, Option<u64>)>> {
    if state.failed() || jobs.is_empty() || jobs.len() > MAX_BATCH_SCANS || jobs.iter().any(|j| kind(j.dtype).is_none()) {
        return None;
    }
    if jobs.iter().any(|j| j.shape.rows <= 0 || j.shape.cols <= 0 || j.shape.ld < j.shape.rows) {
        return None; // nothing sensible to launch: the per-operand path says why
    }
    let kernels = match context(state, stream) {
        Ok(k) => k,
        Err(why) => return fail(state, mode, why),
    };
    match launch_many(kernels, jobs, stream) {
        Ok(results) => Some(results),
        Err(why) => fail(state, mode, Unusable::Wrong(format!("the batched scan kernel failed: {why}"))),
    }
}

/// For scripts/gpu-check.sh: scans `rows x cols` (leading dimension `ld`) elements of
/// `cuda_data_type` at device address `data` on the device, writing NaN count, Inf count and
/// the first bad stored index (or all ones) to `out`. Returns 0, or -1 when the device scan
/// is unavailable (the reason is printed once).
///
/// # Safety
/// `data` must be device memory holding the whole matrix; `out` must point at three u64.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cublasguard_scan_on_device(data: u64, rows: i64, cols: i64, ld: i64, cuda_data_type: c_int, stream: u64, out: *mut u64) -> c_int {
    if out.is_null() {
        return -1;
    }
    let shape = StoredShape { rows, cols, ld };
    let result = std::panic::catch_unwind(|| {
        let state = crate::ffi::host::lifecycle::session().map(|s| &s.device_scan)?;
        scan(state, DeviceScan::On, data, shape, DType::from_cuda(cuda_data_type), stream)
    });
    match result {
        Ok(Some(s)) => {
            let first = s.first_nonfinite.map(|(row, col)| col * ld as u64 + row).unwrap_or(u64::MAX);
            // SAFETY: the caller passes three writable u64.
            unsafe { std::ptr::copy_nonoverlapping([s.nan, s.inf, first].as_ptr(), out, 3) };
            0
        }
        _ => -1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_is_shipped_with_its_entry_point() {
        assert!(KERNEL_PTX.contains(".visible .entry cublasguard_nonfinite("));
        assert!(KERNEL_PTX.contains(".target sm_70"));
        assert_eq!(kind(DType::BF16), Some(14));
        assert_eq!(kind(DType::I8), None);
    }
}
