//! The NaN/Inf scan on the GPU itself: the PTX kernel in src/ptx/nonfinite.ptx, loaded once per
//! CUDA context through the driver API and launched on the call's stream; it reduces NaN
//! count, Inf count and the first bad index into 24 bytes that are copied back. Copying a
//! large operand over PCIe to scan it on the host costs more than the GEMM itself.
//!
//! Only the driver the program already loaded is used (`dlopen(RTLD_NOLOAD)`): no driver, a
//! driver without these entry points (the stand-in), or any failure, and the scan falls back
//! to the host path, with the reason recorded once. Off unless CUBLASGUARD_DEVICE_SCAN=on until
//! scripts/gpu-check.sh has verified it on real GPUs (none has been available yet).

use parking_lot::Mutex;
use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use crate::scan::{DType, MatrixScan};
use crate::validate::StoredShape;

pub const KERNEL_PTX: &str = include_str!("../ptx/nonfinite.ptx");
const KERNEL_NAME: &[u8] = b"cublasguard_nonfinite\0";
const THREADS: u32 = 256;
const MAX_BLOCKS: u64 = 4096;

type Ptr = *mut c_void;

/// The driver entry points the scan needs, as the driver exports them.
struct Driver {
    ctx_get_current: unsafe extern "C" fn(*mut Ptr) -> c_int,
    module_load_data: unsafe extern "C" fn(*mut Ptr, *const c_void) -> c_int,
    module_get_function: unsafe extern "C" fn(*mut Ptr, Ptr, *const c_char) -> c_int,
    mem_alloc: unsafe extern "C" fn(*mut u64, usize) -> c_int,
    memset_d8_async: unsafe extern "C" fn(u64, u8, usize, Ptr) -> c_int,
    #[allow(clippy::type_complexity)]
    launch: unsafe extern "C" fn(Ptr, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, Ptr, *mut Ptr, *mut Ptr) -> c_int,
    memcpy_dtoh_async: unsafe extern "C" fn(Ptr, u64, usize, Ptr) -> c_int,
    stream_synchronize: unsafe extern "C" fn(Ptr) -> c_int,
}

fn load_driver() -> Result<Driver, String> {
    // SAFETY: RTLD_NOLOAD never maps anything new; every symbol is taken with the driver API's
    // documented signature (the _v2 entry points that cuda.h maps the plain names to).
    unsafe {
        let handle = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        if handle.is_null() {
            return Err("the NVIDIA driver (libcuda.so.1) is not loaded".into());
        }
        macro_rules! sym {
            ($name:literal) => {{
                let p = libc::dlsym(handle, concat!($name, "\0").as_ptr() as *const c_char);
                if p.is_null() {
                    return Err(format!("the driver has no {}", $name));
                }
                // The target type is the Driver field's signature.
                #[allow(clippy::missing_transmute_annotations)]
                let f = std::mem::transmute::<*mut c_void, _>(p);
                f
            }};
        }
        Ok(Driver {
            ctx_get_current: sym!("cuCtxGetCurrent"),
            module_load_data: sym!("cuModuleLoadData"),
            module_get_function: sym!("cuModuleGetFunction"),
            mem_alloc: sym!("cuMemAlloc_v2"),
            memset_d8_async: sym!("cuMemsetD8Async"),
            launch: sym!("cuLaunchKernel"),
            memcpy_dtoh_async: sym!("cuMemcpyDtoHAsync_v2"),
            stream_synchronize: sym!("cuStreamSynchronize"),
        })
    }
}

static DRIVER: OnceLock<Result<Driver, String>> = OnceLock::new();
/// Per context: (context, kernel, 24-byte result buffer). Loaded once, never unloaded.
static CONTEXTS: Mutex<Vec<(usize, usize, u64)>> = Mutex::new(Vec::new());
static FAILED: AtomicBool = AtomicBool::new(false);
/// Why the device scan is not used, once it failed (for the trace).
static FAILURE: Mutex<Option<String>> = Mutex::new(None);

fn fail(why: String) -> Option<MatrixScan> {
    if !FAILED.swap(true, Ordering::SeqCst) {
        super::lifecycle::say(&format!("cublasguard: the on-device scan is off ({why}); scanning on the host"));
        *FAILURE.lock() = Some(why);
    }
    None
}

/// Why the device scan fell back to the host, if it did.
pub fn failure() -> Option<String> {
    FAILURE.lock().clone()
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
fn context(d: &Driver) -> Result<(Ptr, u64), String> {
    let mut ctx: Ptr = std::ptr::null_mut();
    // SAFETY: valid out-parameter.
    let code = unsafe { (d.ctx_get_current)(&mut ctx) };
    if code != 0 || ctx.is_null() {
        return Err(format!("no current CUDA context (cuCtxGetCurrent: {code})"));
    }
    let mut contexts = CONTEXTS.lock();
    if let Some(&(_, f, out)) = contexts.iter().find(|(c, _, _)| *c == ctx as usize) {
        return Ok((f as Ptr, out));
    }
    let ptx = CString::new(KERNEL_PTX).map_err(|_| "the PTX text holds a NUL".to_string())?;
    let (mut module, mut function, mut out): (Ptr, Ptr, u64) = (std::ptr::null_mut(), std::ptr::null_mut(), 0);
    // SAFETY: valid out-parameters; the PTX is NUL-terminated; the kernel name too.
    unsafe {
        let code = (d.module_load_data)(&mut module, ptx.as_ptr() as *const c_void);
        if code != 0 {
            return Err(format!("cuModuleLoadData failed: {code}"));
        }
        let code = (d.module_get_function)(&mut function, module, KERNEL_NAME.as_ptr() as *const c_char);
        if code != 0 {
            return Err(format!("cuModuleGetFunction failed: {code}"));
        }
        let code = (d.mem_alloc)(&mut out, 24);
        if code != 0 {
            return Err(format!("cuMemAlloc of the result buffer failed: {code}"));
        }
    }
    contexts.push((ctx as usize, function as usize, out));
    Ok((function, out))
}

/// Scans one matrix on the GPU, on `stream`; `None`: use the host path.
pub fn scan(addr: u64, shape: StoredShape, dtype: DType, stream: u64) -> Option<MatrixScan> {
    if FAILED.load(Ordering::Relaxed) {
        return None;
    }
    let kind = kind(dtype)?;
    if shape.rows <= 0 || shape.cols <= 0 || shape.ld < shape.rows {
        return Some(MatrixScan::default());
    }
    let d = match DRIVER.get_or_init(load_driver) {
        Ok(d) => d,
        Err(why) => return fail(why.clone()),
    };
    let (function, out) = match context(d) {
        Ok(x) => x,
        Err(why) => return fail(why),
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
    // SAFETY: `params` points at six live values matching the kernel's parameters; `result`
    // is 24 writable bytes; the buffer `out` belongs to this context.
    let codes = unsafe {
        [
            (d.memset_d8_async)(out, 0, 16, stream),
            (d.memset_d8_async)(out + 16, 0xff, 8, stream),
            (d.launch)(function, blocks, 1, 1, THREADS, 1, 1, 0, stream, params.as_mut_ptr(), std::ptr::null_mut()),
            (d.memcpy_dtoh_async)(result.as_mut_ptr() as Ptr, out, 24, stream),
            (d.stream_synchronize)(stream),
        ]
    };
    if let Some(code) = codes.iter().find(|&&c| c != 0) {
        return fail(format!("the scan kernel failed with CUDA driver error {code}"));
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
    let result = std::panic::catch_unwind(|| scan(data, shape, DType::from_cuda(cuda_data_type), stream));
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
