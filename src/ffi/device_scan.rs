//! The NaN/Inf scan on the GPU itself: the PTX kernel in src/ptx/nonfinite.ptx, loaded once per
//! CUDA context through the driver API and launched on the call's stream; it reduces NaN
//! count, Inf count and the first bad index into 24 bytes that are copied back. Copying a
//! large operand over PCIe to scan it on the host costs more than the GEMM itself.
//!
//! Only the driver the program already loaded is used (the typed table never loads one): no driver, a
//! driver without these entry points (the stand-in), or any failure, and the scan falls back
//! to the host path, with the reason recorded once. Off unless CUBLASGUARD_DEVICE_SCAN=on until
//! scripts/gpu-check.sh has verified it on real GPUs (none has been available yet).

use std::ffi::{c_char, c_int, c_void, CString};

use super::cuda_api as api;
use crate::scan::{DType, MatrixScan};
use crate::session::DeviceScanState;
use crate::validate::StoredShape;

pub(crate) const KERNEL_PTX: &str = include_str!("../ptx/nonfinite.ptx");
const KERNEL_NAME: &[u8] = b"cublasguard_nonfinite\0";
const THREADS: u32 = 256;
const MAX_BLOCKS: u64 = 4096;

type Ptr = *mut c_void;

fn fail(state: &DeviceScanState, why: String) -> Option<MatrixScan> {
    if state.fail(why.clone()) {
        super::lifecycle::say(&format!("cublasguard: the on-device scan is off ({why}); scanning on the host"));
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

/// The kernel and result buffer of the current context, loading them on first use.
fn context(state: &DeviceScanState) -> Result<(Ptr, u64), String> {
    let mut ctx: Ptr = std::ptr::null_mut();
    driver("cuCtxGetCurrent", api::cuCtxGetCurrent(&mut ctx))?;
    if ctx.is_null() {
        return Err("no current CUDA context".into());
    }
    state.kernel_for(ctx as usize, || {
        let ptx = CString::new(KERNEL_PTX).map_err(|_| "the PTX text holds a NUL".to_string())?;
        let (mut module, mut function, mut out): (Ptr, Ptr, u64) = (std::ptr::null_mut(), std::ptr::null_mut(), 0);
        // Valid out-parameters; the PTX and the kernel name are NUL-terminated.
        driver("cuModuleLoadData", api::cuModuleLoadData(&mut module, ptx.as_ptr() as *const c_void))?;
        driver("cuModuleGetFunction", api::cuModuleGetFunction(&mut function, module, KERNEL_NAME.as_ptr() as *const c_char))?;
        driver("cuMemAlloc of the result buffer", api::cuMemAlloc_v2(&mut out, 24))?;
        Ok((function as usize, out))
    })
    .map(|(f, out)| (f as Ptr, out))
}

/// Scans one matrix on the GPU, on `stream`; `None`: use the host path.
pub(crate) fn scan(state: &DeviceScanState, addr: u64, shape: StoredShape, dtype: DType, stream: u64) -> Option<MatrixScan> {
    if state.failed() {
        return None;
    }
    let kind = kind(dtype)?;
    if shape.rows <= 0 || shape.cols <= 0 || shape.ld < shape.rows {
        return Some(MatrixScan::default());
    }
    let (function, out) = match context(state) {
        Ok(x) => x,
        Err(why) => return fail(state, why),
    };
    let (mut data, mut rows, mut cols, mut ld, mut kind, mut out_arg) =
        (addr, shape.rows as u64, shape.cols as u64, shape.ld as u64, kind, out);
    let mut params: [Ptr; 6] = [
        &mut data as *mut u64 as Ptr,
        &mut rows as *mut u64 as Ptr,
        &mut cols as *mut u64 as Ptr,
        &mut ld as *mut u64 as Ptr,
        &mut kind as *mut u32 as Ptr,
        &mut out_arg as *mut u64 as Ptr,
    ];
    let elements = rows.saturating_mul(cols);
    let blocks = elements.div_ceil(THREADS as u64).clamp(1, MAX_BLOCKS) as u32;
    let stream = stream as Ptr;
    let mut result = [0u64; 3];
    // `params` points at six live values matching the kernel's parameters; `result` is 24
    // writable bytes; the buffer `out` belongs to this context.
    let steps = [
        ("cuMemsetD8Async", api::cuMemsetD8Async(out, 0, 16, stream)),
        ("cuMemsetD8Async", api::cuMemsetD8Async(out + 16, 0xff, 8, stream)),
        ("cuLaunchKernel", api::cuLaunchKernel(function, blocks, 1, 1, THREADS, 1, 1, 0, stream, params.as_mut_ptr(), std::ptr::null_mut())),
        ("cuMemcpyDtoHAsync", api::cuMemcpyDtoHAsync_v2(result.as_mut_ptr() as Ptr, out, 24, stream)),
        ("cuStreamSynchronize", api::cuStreamSynchronize(stream)),
    ];
    for (name, code) in steps {
        if let Err(why) = driver(name, code) {
            return fail(state, format!("the scan kernel failed: {why}"));
        }
    }
    let [nan, inf, first] = result;
    Some(MatrixScan {
        nan,
        inf,
        first_nonfinite: (first != u64::MAX).then(|| (first % ld, first / ld)),
        scanned_elements: elements,
        sampled: false,
    })
}

/// For scripts/gpu-check.sh: scans `rows x cols` (leading dimension `ld`) elements of
/// `cuda_data_type` at device address `data` on the device, writing NaN count, Inf count and
/// the first bad stored index (or all ones) to `out`. Returns 0, or -1 when the device scan
/// is unavailable (the reason is printed once).
///
/// # Safety
/// `data` must be device memory holding the whole matrix; `out` must point at three u64.
#[cfg_attr(not(test), no_mangle)]
pub unsafe extern "C" fn cublasguard_scan_on_device(
    data: u64,
    rows: i64,
    cols: i64,
    ld: i64,
    cuda_data_type: c_int,
    stream: u64,
    out: *mut u64,
) -> c_int {
    if out.is_null() {
        return -1;
    }
    let shape = StoredShape { rows, cols, ld };
    let result = std::panic::catch_unwind(|| {
        let state = super::lifecycle::session().map(|s| &s.device_scan)?;
        scan(state, data, shape, DType::from_cuda(cuda_data_type), stream)
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
