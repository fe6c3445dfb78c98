//! Every CUDA function the guard calls itself, declared once with its C signature, looked up
//! once (in the library the program already loaded, never loading one). Each is an `unsafe fn`
//! whose contract is NVIDIA's for that function, and returns `None` when its library is not
//! loaded or lacks it. The safe layer above it is `device.rs` (the `Device` trait: slices,
//! plain values, `Result`) and `device_scan.rs`; nothing outside `ffi` calls this table.
//!
//! Why not cudarc's `sys` declarations: its functions are reached either by linking (the guard
//! must not link CUDA: it is preloaded into programs that may never load it) or through its
//! dynamic loader, which opens the library by its own search (`libcuda.so` first), can load a
//! library the program did not, and panics when one is missing; and its enums are Rust enums,
//! which a C value outside the declared set makes undefined behaviour. The guard must find the
//! exact copy the program loaded (RTLD_LOCAL included, see `real.rs`) and take plain integers.

use std::ffi::{c_char, c_int, c_uint, c_void};

use crate::ffi::intercept::real::{Library, RealSymbol};

/// `struct cudaPointerAttributes` (CUDA 11 and later).
#[repr(C)]
pub(crate) struct PointerAttributes {
    pub kind: c_int,
    pub device: c_int,
    pub device_pointer: *mut c_void,
    pub host_pointer: *mut c_void,
}

macro_rules! cuda_functions {
    ( $( $lib:ident fn $name:ident ( $( $arg:ident : $ty:ty ),* $(,)? ) -> $ret:ty ; )* ) => {
        #[allow(non_upper_case_globals)]
        mod symbols {
            use super::*;
            $( pub static $name: RealSymbol = RealSymbol::new(concat!(stringify!($name), "\0"), Library::$lib); )*
        }
        $(
            /// # Safety
            /// The arguments meet NVIDIA's documented contract for this function: out-parameters
            /// point to writable values of their type, strings are NUL-terminated, host buffers
            /// hold the bytes the call reads or writes and outlive any asynchronous copy into
            /// them, and handles (streams, modules, functions, contexts) are live ones.
            #[allow(non_snake_case, clippy::too_many_arguments)]
            pub(crate) unsafe fn $name( $( $arg : $ty ),* ) -> Option<$ret> {
                type F = unsafe extern "C" fn( $( $ty ),* ) -> $ret;
                // SAFETY: `F` is the function's C signature as NVIDIA's headers declare it (this
                // table is the one place it is written down).
                let f = unsafe { symbols::$name.get::<F>() }?;
                // SAFETY: the caller's arguments, under this function's contract.
                Some(unsafe { f( $( $arg ),* ) })
            }
        )*
    };
}

type Ptr = *mut c_void;

cuda_functions! {
    Cudart fn cudaMemcpyAsync(dst: Ptr, src: *const c_void, count: usize, kind: c_int, stream: Ptr) -> c_int;
    Cudart fn cudaStreamSynchronize(stream: Ptr) -> c_int;
    Cudart fn cudaStreamIsCapturing(stream: Ptr, status: *mut c_int) -> c_int;
    Cudart fn cudaPointerGetAttributes(attributes: *mut PointerAttributes, ptr: *const c_void) -> c_int;
    Cudart fn cudaMemGetInfo(free: *mut usize, total: *mut usize) -> c_int;
    Cudart fn cudaPeekAtLastError() -> c_int;
    Cudart fn cudaGetLastError() -> c_int;
    Cudart fn cudaRuntimeGetVersion(version: *mut c_int) -> c_int;
    Cudart fn cudaDriverGetVersion(version: *mut c_int) -> c_int;
    Cudart fn cudaGetDeviceCount(count: *mut c_int) -> c_int;
    Cudart fn cudaGetDevice(device: *mut c_int) -> c_int;
    Cudart fn cudaFuncGetName(name: *mut *const c_char, func: *const c_void) -> c_int;
    Cudart fn cudaFuncGetParamInfo(func: *const c_void, index: usize, offset: *mut usize, size: *mut usize) -> c_int;
    Cudart fn cudaDeviceGetAttribute(value: *mut c_int, attr: c_int, device: c_int) -> c_int;
    Cublas fn cublasGetProperty(kind: c_int, value: *mut c_int) -> c_int;
    CublasLt fn cublasLtGetVersion() -> usize;
    CublasLt fn cublasLtMatrixLayoutGetAttribute(layout: Ptr, attr: c_int, buf: Ptr, size: usize, written: *mut usize) -> c_int;
    CublasLt fn cublasLtMatmulDescGetAttribute(desc: Ptr, attr: c_int, buf: Ptr, size: usize, written: *mut usize) -> c_int;
    Cudnn fn cudnnGetLastErrorString(message: *mut c_char, max_size: usize) -> ();
    Cudnn fn cudnnGetVersion() -> usize;
    Cudnn fn cudnnGetCudartVersion() -> usize;
    Cudnn fn cudnnBackendGetAttribute(desc: Ptr, name: c_int, kind: c_int, requested: i64, count: *mut i64, elements: Ptr) -> c_int;
    Driver fn cuDriverGetVersion(version: *mut c_int) -> c_int;
    Driver fn cuInit(flags: c_uint) -> c_int;
    Driver fn cuCtxGetCurrent(ctx: *mut Ptr) -> c_int;
    Driver fn cuCtxGetDevice(device: *mut c_int) -> c_int;
    Driver fn cuDeviceGetAttribute(value: *mut c_int, attribute: c_int, device: c_int) -> c_int;
    Driver fn cuOccupancyMaxActiveBlocksPerMultiprocessor(blocks: *mut c_int, function: Ptr, block_size: c_int, dynamic_shared: usize) -> c_int;
    Driver fn cuModuleLoadData(module: *mut Ptr, image: *const c_void) -> c_int;
    Driver fn cuModuleGetFunction(function: *mut Ptr, module: Ptr, name: *const c_char) -> c_int;
    Driver fn cuFuncGetName(name: *mut *const c_char, function: *const c_void) -> c_int;
    Driver fn cuFuncGetParamInfo(function: *const c_void, index: usize, offset: *mut usize, size: *mut usize) -> c_int;
    Driver fn cuMemAlloc_v2(dptr: *mut u64, bytes: usize) -> c_int;
    Driver fn cuMemsetD8Async(dptr: u64, value: u8, count: usize, stream: Ptr) -> c_int;
    Driver fn cuLaunchKernel(f: Ptr, gx: c_uint, gy: c_uint, gz: c_uint, bx: c_uint, by: c_uint, bz: c_uint, shared: c_uint, stream: Ptr, params: *mut Ptr, extra: *mut Ptr) -> c_int;
    Driver fn cuMemcpyDtoHAsync_v2(dst: Ptr, src: u64, bytes: usize, stream: Ptr) -> c_int;
    Driver fn cuMemcpyHtoD_v2(dst: u64, src: *const c_void, bytes: usize) -> c_int;
    Driver fn cuMemFree_v2(dptr: u64) -> c_int;
    Driver fn cuMemGetAddressRange_v2(base: *mut u64, size: *mut usize, dptr: u64) -> c_int;
    Driver fn cuCtxGetId(ctx: Ptr, id: *mut u64) -> c_int;
    Driver fn cuMemHostRegister_v2(host: Ptr, bytes: usize, flags: c_uint) -> c_int;
    Driver fn cuThreadExchangeStreamCaptureMode(mode: *mut c_int) -> c_int;
    Driver fn cuMemHostGetDevicePointer_v2(dptr: *mut u64, host: Ptr, flags: c_uint) -> c_int;
    Driver fn cuStreamWriteValue64_v2(stream: Ptr, addr: u64, value: u64, flags: c_uint) -> c_int;
    Driver fn cuStreamQuery(stream: Ptr) -> c_int;
}
