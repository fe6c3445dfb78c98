//! The guard's own calls into the CUDA runtime, behind `check::Device`. Each one leaves the
//! program's view as it was: a call that fails and sets the thread's last error is followed
//! by clearing it, when the program had no error pending before.

use std::ffi::{c_int, c_void};

use super::real::{Library, RealSymbol};
use crate::check::Device;
use crate::cuda::MemoryType;

#[allow(non_upper_case_globals)]
mod symbols {
    use super::*;
    pub static cudaMemcpyAsync: RealSymbol = RealSymbol::new("cudaMemcpyAsync\0", Library::Cudart);
    pub static cudaStreamSynchronize: RealSymbol = RealSymbol::new("cudaStreamSynchronize\0", Library::Cudart);
    pub static cudaStreamIsCapturing: RealSymbol = RealSymbol::new("cudaStreamIsCapturing\0", Library::Cudart);
    pub static cudaPointerGetAttributes: RealSymbol = RealSymbol::new("cudaPointerGetAttributes\0", Library::Cudart);
    pub static cudaMemGetInfo: RealSymbol = RealSymbol::new("cudaMemGetInfo\0", Library::Cudart);
    pub static cudaPeekAtLastError: RealSymbol = RealSymbol::new("cudaPeekAtLastError\0", Library::Cudart);
    pub static cudaGetLastError: RealSymbol = RealSymbol::new("cudaGetLastError\0", Library::Cudart);
    pub static cudaRuntimeGetVersion: RealSymbol = RealSymbol::new("cudaRuntimeGetVersion\0", Library::Cudart);
    pub static cudaDriverGetVersion: RealSymbol = RealSymbol::new("cudaDriverGetVersion\0", Library::Cudart);
    pub static cudaGetDeviceCount: RealSymbol = RealSymbol::new("cudaGetDeviceCount\0", Library::Cudart);
    pub static cublasGetProperty: RealSymbol = RealSymbol::new("cublasGetProperty\0", Library::Cublas);
}

type NoArgs = unsafe extern "C" fn() -> c_int;
type IntOut = unsafe extern "C" fn(*mut c_int) -> c_int;

/// `struct cudaPointerAttributes` (CUDA 11 and later).
#[repr(C)]
struct PointerAttributes {
    kind: c_int,
    device: c_int,
    device_pointer: *mut c_void,
    host_pointer: *mut c_void,
}

const MEMCPY_DEVICE_TO_HOST: c_int = 2;

fn peek_last_error() -> Option<c_int> {
    // SAFETY: true signature of cudaPeekAtLastError.
    let peek = unsafe { symbols::cudaPeekAtLastError.get::<NoArgs>() }?;
    Some(unsafe { peek() })
}

/// Runs a runtime call that may fail, then restores the program's "no last error".
fn quietly(call: impl FnOnce() -> c_int) -> c_int {
    let before = peek_last_error();
    let code = call();
    if code != 0 && before == Some(0) {
        // SAFETY: true signature of cudaGetLastError.
        if let Some(clear) = unsafe { symbols::cudaGetLastError.get::<NoArgs>() } {
            unsafe { clear() };
        }
    }
    code
}

/// The guard's view of the CUDA runtime (and, when enabled, of the driver for on-device scans).
pub struct RealDevice {
    pub scan_on_device: bool,
}

impl Device for RealDevice {
    fn scan_on_device(&self, addr: u64, shape: crate::validate::StoredShape, dtype: crate::scan::DType, stream: u64) -> Option<crate::scan::MatrixScan> {
        if !self.scan_on_device {
            return None;
        }
        super::device_scan::scan(addr, shape, dtype, stream)
    }

    fn memory_type(&self, ptr: u64) -> Option<MemoryType> {
        type F = unsafe extern "C" fn(*mut PointerAttributes, *const c_void) -> c_int;
        // SAFETY: true signature; attrs is a valid out-parameter of the right layout.
        let f = unsafe { symbols::cudaPointerGetAttributes.get::<F>() }?;
        let mut attrs = PointerAttributes { kind: 0, device: 0, device_pointer: std::ptr::null_mut(), host_pointer: std::ptr::null_mut() };
        let code = quietly(|| unsafe { f(&mut attrs, ptr as *const c_void) });
        (code == 0).then(|| MemoryType::decode(attrs.kind))
    }

    fn read(&self, addr: u64, out: &mut [u8], stream: u64) -> Result<(), i32> {
        type Copy = unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int, *mut c_void) -> c_int;
        // SAFETY: true signature; `out` is valid for out.len() bytes, and callers pass only
        // device ranges already verified inside a live allocation.
        let f = unsafe { symbols::cudaMemcpyAsync.get::<Copy>() }.ok_or(-1)?;
        let code = quietly(|| unsafe {
            f(out.as_mut_ptr() as *mut c_void, addr as *const c_void, out.len(), MEMCPY_DEVICE_TO_HOST, stream as *mut c_void)
        });
        if code != 0 {
            return Err(code);
        }
        match self.synchronize(stream) {
            0 => Ok(()),
            code => Err(code),
        }
    }

    fn read_host(&self, addr: u64, out: &mut [u8]) -> bool {
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
            // The system call is filtered (some container profiles): read it as cuBLAS is
            // about to, in host pointer mode, during this same call.
            // SAFETY: cuBLAS dereferences this host scalar pointer itself during the call.
            unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, out.as_mut_ptr(), out.len()) };
            return true;
        }
        false
    }

    fn synchronize(&self, stream: u64) -> i32 {
        type F = unsafe extern "C" fn(*mut c_void) -> c_int;
        // SAFETY: true signature.
        match unsafe { symbols::cudaStreamSynchronize.get::<F>() } {
            Some(f) => quietly(|| unsafe { f(stream as *mut c_void) }),
            None => 0,
        }
    }

    fn is_capturing(&self, stream: u64) -> Option<bool> {
        type F = unsafe extern "C" fn(*mut c_void, *mut c_int) -> c_int;
        // SAFETY: true signature; status is a valid out-parameter.
        let f = unsafe { symbols::cudaStreamIsCapturing.get::<F>() }?;
        let mut status: c_int = 0;
        let code = quietly(|| unsafe { f(stream as *mut c_void, &mut status) });
        (code == 0).then_some(status != 0)
    }
}

/// `cudaMemGetInfo`, when the runtime can answer without disturbing the program.
pub fn memory_info() -> Option<(u64, u64)> {
    type F = unsafe extern "C" fn(*mut usize, *mut usize) -> c_int;
    // SAFETY: true signature; valid out-parameters.
    let f = unsafe { symbols::cudaMemGetInfo.get::<F>() }?;
    // After a failed cudaMalloc the last error is 2, and memory is exactly what the user
    // needs to see; a context that is broken or never started cannot answer, so don't ask.
    let pending = peek_last_error()?;
    if crate::cuda::cuda_error_is_sticky(pending) || crate::cuda::cuda_error_is_init_failure(pending) {
        return None;
    }
    let (mut free, mut total) = (0usize, 0usize);
    let code = quietly(|| unsafe { f(&mut free, &mut total) });
    (code == 0).then_some((free as u64, total as u64))
}


fn int_query(symbol: &RealSymbol) -> Option<(c_int, c_int)> {
    // SAFETY: every symbol passed here has the signature `cudaError_t f(int *)`.
    let f = unsafe { symbol.get::<IntOut>() }?;
    let mut value: c_int = 0;
    let code = quietly(|| unsafe { f(&mut value) });
    Some((code, value))
}

pub fn runtime_version() -> Option<i32> {
    int_query(&symbols::cudaRuntimeGetVersion).and_then(|(code, v)| (code == 0 && v > 0).then_some(v))
}

/// The driver's version as the runtime reports it; `None` when there is no driver.
pub fn driver_version_via_runtime() -> Option<i32> {
    int_query(&symbols::cudaDriverGetVersion).and_then(|(code, v)| (code == 0 && v > 0).then_some(v))
}

/// `cudaGetDeviceCount`'s status and count, asked only when the program has no error pending.
pub fn device_count() -> Option<(i32, Option<i32>)> {
    if peek_last_error() != Some(0) {
        return None;
    }
    const UNWRITTEN: c_int = -1;
    // SAFETY: true signature.
    let f = unsafe { symbols::cudaGetDeviceCount.get::<IntOut>() }?;
    let mut count = UNWRITTEN;
    let code = quietly(|| unsafe { f(&mut count) });
    Some((code, (code == 0 && count != UNWRITTEN).then_some(count)))
}

pub fn cublas_version() -> Option<i32> {
    type F = unsafe extern "C" fn(c_int, *mut c_int) -> c_int;
    // SAFETY: true signature of cublasGetProperty(libraryPropertyType, int *).
    let f = unsafe { symbols::cublasGetProperty.get::<F>() }?;
    let mut parts = [0 as c_int; 3];
    for (kind, part) in parts.iter_mut().enumerate() {
        if unsafe { f(kind as c_int, part) } != 0 {
            return None;
        }
    }
    Some(parts[0] * 10000 + parts[1] * 100 + parts[2])
}
