//! Every CUDA function cublasguard calls itself, as opposed to the ones it hooks: the guard's
//! questions to the runtime and the driver (copies for its scans, capture state, attributes,
//! versions, the on-device scan's module), and the command's (the doctor's driver and library
//! versions, replay's rerun). One list, by library, each function with its C signature from
//! NVIDIA's headers and its contract, so the two cannot drift apart.
//!
//! `with_cuda_api!(callback)` hands the list to the caller's macro, which decides how each
//! function is reached: the guard through its own lookup in the copy the program loaded, never
//! loading a library (crates/preload/src/ffi/cuda_client/cuda_api.rs), the command through
//! libloading, loading on purpose (src/cuda_table.rs). This crate loads nothing and calls
//! nothing (NVML's client, crates/nvml, is the same idea with its readings).
//!
//! Types are plain C integers and raw pointers (a Rust enum would make a value outside its set
//! undefined behaviour); `Ptr` is an opaque handle or a pointer the call writes through.
//!
//! Why not cudarc's `sys` declarations: its functions are reached either by linking (the guard
//! must not link CUDA: it is preloaded into programs that may never load it) or through its
//! dynamic loader, which opens the library by its own search (`libcuda.so` first), can load a
//! library the program did not, and panics when one is missing.

#![no_std]
#![deny(unsafe_code)]

use core::ffi::c_void;

/// `struct cudaPointerAttributes` (CUDA 11 and later).
#[repr(C)]
pub struct PointerAttributes {
    pub kind: core::ffi::c_int,
    pub device: core::ffi::c_int,
    pub device_pointer: *mut c_void,
    pub host_pointer: *mut c_void,
}

/// Hands the list to `$callback!`, grouped by library (the names of the guard's `Library`):
/// `Library { #[doc] fn name(arg: Type, ...) -> Ret; ... }`. Each function's doc says its
/// contract beyond the types: what the caller of the `unsafe fn` it becomes must make true.
#[macro_export]
macro_rules! with_cuda_api {
    ( $callback:ident ) => {
        $callback! {
            Cudart {
                /// `dst` and `src` hold `count` bytes of the memory `kind` says, and a host
                /// buffer outlives the copy (asynchronous on `stream`, a live stream or null).
                fn cudaMemcpyAsync(dst: *mut ::core::ffi::c_void, src: *const ::core::ffi::c_void, count: usize, kind: ::core::ffi::c_int, stream: *mut ::core::ffi::c_void) -> ::core::ffi::c_int;
                /// `stream` is a live stream of the current context, or null.
                fn cudaStreamSynchronize(stream: *mut ::core::ffi::c_void) -> ::core::ffi::c_int;
                /// `stream` is live or null; `status` points to a writable int.
                fn cudaStreamIsCapturing(stream: *mut ::core::ffi::c_void, status: *mut ::core::ffi::c_int) -> ::core::ffi::c_int;
                /// `attributes` points to a writable `PointerAttributes`; `ptr` may be any value.
                fn cudaPointerGetAttributes(attributes: *mut $crate::PointerAttributes, ptr: *const ::core::ffi::c_void) -> ::core::ffi::c_int;
                /// `free` and `total` point to writable values.
                fn cudaMemGetInfo(free: *mut usize, total: *mut usize) -> ::core::ffi::c_int;
                /// None.
                fn cudaPeekAtLastError() -> ::core::ffi::c_int;
                /// None (it clears the thread's last error: the guard calls it only to restore one).
                fn cudaGetLastError() -> ::core::ffi::c_int;
                /// `version` points to a writable int.
                fn cudaRuntimeGetVersion(version: *mut ::core::ffi::c_int) -> ::core::ffi::c_int;
                /// `version` points to a writable int.
                fn cudaDriverGetVersion(version: *mut ::core::ffi::c_int) -> ::core::ffi::c_int;
                /// `count` points to a writable int.
                fn cudaGetDeviceCount(count: *mut ::core::ffi::c_int) -> ::core::ffi::c_int;
                /// `device` points to a writable int.
                fn cudaGetDevice(device: *mut ::core::ffi::c_int) -> ::core::ffi::c_int;
                /// `name` points to a writable pointer; `func` is a host stub the runtime registered.
                fn cudaFuncGetName(name: *mut *const ::core::ffi::c_char, func: *const ::core::ffi::c_void) -> ::core::ffi::c_int;
                /// `func` is a registered host stub; `offset` and `size` point to writable values.
                fn cudaFuncGetParamInfo(func: *const ::core::ffi::c_void, index: usize, offset: *mut usize, size: *mut usize) -> ::core::ffi::c_int;
                /// `value` points to a writable int.
                fn cudaDeviceGetAttribute(value: *mut ::core::ffi::c_int, attr: ::core::ffi::c_int, device: ::core::ffi::c_int) -> ::core::ffi::c_int;
                /// `ptr` points to a writable pointer.
                fn cudaMalloc(ptr: *mut *mut ::core::ffi::c_void, bytes: usize) -> ::core::ffi::c_int;
                /// `dst` and `src` hold `count` bytes of the memory `kind` says.
                fn cudaMemcpy(dst: *mut ::core::ffi::c_void, src: *const ::core::ffi::c_void, count: usize, kind: ::core::ffi::c_int) -> ::core::ffi::c_int;
                /// None.
                fn cudaDeviceSynchronize() -> ::core::ffi::c_int;
            }
            Cublas {
                /// `value` points to a writable int.
                fn cublasGetProperty(kind: ::core::ffi::c_int, value: *mut ::core::ffi::c_int) -> ::core::ffi::c_int;
                /// `handle` points to a writable handle.
                fn cublasCreate_v2(handle: *mut *mut ::core::ffi::c_void) -> ::core::ffi::c_int;
                /// `handle` is live; every operand holds what its shape, stride and batch count
                /// span, in device memory (or as the pointer mode says, for the scalars).
                fn cublasGemmStridedBatchedEx(handle: *mut ::core::ffi::c_void, transa: ::core::ffi::c_int, transb: ::core::ffi::c_int, m: ::core::ffi::c_int, n: ::core::ffi::c_int, k: ::core::ffi::c_int, alpha: *const ::core::ffi::c_void, a: *const ::core::ffi::c_void, a_type: ::core::ffi::c_int, lda: ::core::ffi::c_int, stride_a: i64, b: *const ::core::ffi::c_void, b_type: ::core::ffi::c_int, ldb: ::core::ffi::c_int, stride_b: i64, beta: *const ::core::ffi::c_void, c: *mut ::core::ffi::c_void, c_type: ::core::ffi::c_int, ldc: ::core::ffi::c_int, stride_c: i64, count: ::core::ffi::c_int, compute: ::core::ffi::c_int, algo: ::core::ffi::c_int) -> ::core::ffi::c_int;
            }
            CublasLt {
                /// None.
                fn cublasLtGetVersion() -> usize;
                /// `layout` is a live layout; `buf` holds `size` writable bytes; `written` points to a writable value.
                fn cublasLtMatrixLayoutGetAttribute(layout: *mut ::core::ffi::c_void, attr: ::core::ffi::c_int, buf: *mut ::core::ffi::c_void, size: usize, written: *mut usize) -> ::core::ffi::c_int;
                /// `desc` is a live matmul descriptor; `buf` holds `size` writable bytes; `written` points to a writable value.
                fn cublasLtMatmulDescGetAttribute(desc: *mut ::core::ffi::c_void, attr: ::core::ffi::c_int, buf: *mut ::core::ffi::c_void, size: usize, written: *mut usize) -> ::core::ffi::c_int;
            }
            Cudnn {
                /// `message` holds `max_size` writable bytes.
                fn cudnnGetLastErrorString(message: *mut ::core::ffi::c_char, max_size: usize) -> ();
                /// None.
                fn cudnnGetVersion() -> usize;
                /// None.
                fn cudnnGetCudartVersion() -> usize;
                /// `desc` is a live backend descriptor; `elements` holds `requested` elements of
                /// the attribute's type; `count` points to a writable value.
                fn cudnnBackendGetAttribute(desc: *mut ::core::ffi::c_void, name: ::core::ffi::c_int, kind: ::core::ffi::c_int, requested: i64, count: *mut i64, elements: *mut ::core::ffi::c_void) -> ::core::ffi::c_int;
            }
            Driver {
                /// `version` points to a writable int.
                fn cuDriverGetVersion(version: *mut ::core::ffi::c_int) -> ::core::ffi::c_int;
                /// None.
                fn cuInit(flags: ::core::ffi::c_uint) -> ::core::ffi::c_int;
                /// `count` points to a writable int.
                fn cuDeviceGetCount(count: *mut ::core::ffi::c_int) -> ::core::ffi::c_int;
                /// `device` points to a writable int.
                fn cuDeviceGet(device: *mut ::core::ffi::c_int, ordinal: ::core::ffi::c_int) -> ::core::ffi::c_int;
                /// `name` holds `len` writable bytes.
                fn cuDeviceGetName(name: *mut ::core::ffi::c_char, len: ::core::ffi::c_int, device: ::core::ffi::c_int) -> ::core::ffi::c_int;
                /// `ctx` points to a writable handle.
                fn cuCtxGetCurrent(ctx: *mut *mut ::core::ffi::c_void) -> ::core::ffi::c_int;
                /// `device` points to a writable int.
                fn cuCtxGetDevice(device: *mut ::core::ffi::c_int) -> ::core::ffi::c_int;
                /// `value` points to a writable int.
                fn cuDeviceGetAttribute(value: *mut ::core::ffi::c_int, attribute: ::core::ffi::c_int, device: ::core::ffi::c_int) -> ::core::ffi::c_int;
                /// `blocks` points to a writable int; `function` is a live function.
                fn cuOccupancyMaxActiveBlocksPerMultiprocessor(blocks: *mut ::core::ffi::c_int, function: *mut ::core::ffi::c_void, block_size: ::core::ffi::c_int, dynamic_shared: usize) -> ::core::ffi::c_int;
                /// `module` points to a writable handle; `image` is a NUL-terminated PTX or a cubin.
                fn cuModuleLoadData(module: *mut *mut ::core::ffi::c_void, image: *const ::core::ffi::c_void) -> ::core::ffi::c_int;
                /// `function` points to a writable handle; `module` is live; `name` is NUL-terminated.
                fn cuModuleGetFunction(function: *mut *mut ::core::ffi::c_void, module: *mut ::core::ffi::c_void, name: *const ::core::ffi::c_char) -> ::core::ffi::c_int;
                /// `name` points to a writable pointer; `function` is a live function.
                fn cuFuncGetName(name: *mut *const ::core::ffi::c_char, function: *const ::core::ffi::c_void) -> ::core::ffi::c_int;
                /// `function` is live; `offset` and `size` point to writable values.
                fn cuFuncGetParamInfo(function: *const ::core::ffi::c_void, index: usize, offset: *mut usize, size: *mut usize) -> ::core::ffi::c_int;
                /// `dptr` points to a writable value.
                fn cuMemAlloc_v2(dptr: *mut u64, bytes: usize) -> ::core::ffi::c_int;
                /// `dptr` spans `count` bytes of device memory; `stream` is live or null.
                fn cuMemsetD8Async(dptr: u64, value: u8, count: usize, stream: *mut ::core::ffi::c_void) -> ::core::ffi::c_int;
                /// `f` is live; `params` holds one pointer per kernel parameter, each to its
                /// value, alive until the launch returns; `stream` is live or null.
                fn cuLaunchKernel(f: *mut ::core::ffi::c_void, gx: ::core::ffi::c_uint, gy: ::core::ffi::c_uint, gz: ::core::ffi::c_uint, bx: ::core::ffi::c_uint, by: ::core::ffi::c_uint, bz: ::core::ffi::c_uint, shared: ::core::ffi::c_uint, stream: *mut ::core::ffi::c_void, params: *mut *mut ::core::ffi::c_void, extra: *mut *mut ::core::ffi::c_void) -> ::core::ffi::c_int;
                /// `dst` holds `bytes` writable bytes that outlive the copy; `src` spans them on the device.
                fn cuMemcpyDtoHAsync_v2(dst: *mut ::core::ffi::c_void, src: u64, bytes: usize, stream: *mut ::core::ffi::c_void) -> ::core::ffi::c_int;
                /// `dst` spans `bytes` of device memory; `src` holds them.
                fn cuMemcpyHtoD_v2(dst: u64, src: *const ::core::ffi::c_void, bytes: usize) -> ::core::ffi::c_int;
                /// `dptr` was allocated by cuMemAlloc and not freed since.
                fn cuMemFree_v2(dptr: u64) -> ::core::ffi::c_int;
                /// `base` and `size` point to writable values; `dptr` may be any value.
                fn cuMemGetAddressRange_v2(base: *mut u64, size: *mut usize, dptr: u64) -> ::core::ffi::c_int;
                /// `ctx` is live or null; `id` points to a writable value.
                fn cuCtxGetId(ctx: *mut ::core::ffi::c_void, id: *mut u64) -> ::core::ffi::c_int;
                /// `host` holds `bytes` bytes that stay allocated while registered.
                fn cuMemHostRegister_v2(host: *mut ::core::ffi::c_void, bytes: usize, flags: ::core::ffi::c_uint) -> ::core::ffi::c_int;
                /// `mode` points to a writable int holding the mode to set.
                fn cuThreadExchangeStreamCaptureMode(mode: *mut ::core::ffi::c_int) -> ::core::ffi::c_int;
                /// `dptr` points to a writable value; `host` is registered or pinned memory.
                fn cuMemHostGetDevicePointer_v2(dptr: *mut u64, host: *mut ::core::ffi::c_void, flags: ::core::ffi::c_uint) -> ::core::ffi::c_int;
                /// `stream` is live or null; `addr` is 8 bytes of memory the device can write.
                fn cuStreamWriteValue64_v2(stream: *mut ::core::ffi::c_void, addr: u64, value: u64, flags: ::core::ffi::c_uint) -> ::core::ffi::c_int;
                /// `stream` is live or null.
                fn cuStreamQuery(stream: *mut ::core::ffi::c_void) -> ::core::ffi::c_int;
            }
        }
    };
}
