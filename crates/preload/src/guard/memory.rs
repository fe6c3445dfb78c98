//! Memory handlers, runtime and driver alike: every way a program gets device memory
//! (`cudaMalloc` and its managed, pitched and pool forms; the driver's `cuMemAlloc_v2` family,
//! reached by name or through an entry point; virtual-memory mappings) enters the one table of
//! live allocations, with the function the program called; and the faults of memory and
//! initialisation. A runtime call that allocates through the driver inside is recorded once:
//! the inner call runs inside the outer hook and is forwarded untouched.

use std::ffi::{c_int, c_void};

use super::parameters::{written_i32, written_u64};
use super::Call;
use crate::check::Finding;
use crate::cuda;
use crate::recorder::CallArgs;
use crate::state::Allocation;
use crate::trace::{hex, FaultKind};

type Stream = *mut c_void;

fn allocate(call: &Call<'_, c_int>, out: *mut *mut c_void, size: usize, stream: Option<Stream>) -> c_int {
    allocate_sized(call, out, || size, stream)
}

/// `size` is asked after the call: a pitched allocation's size is known only then.
fn allocate_sized(call: &Call<'_, c_int>, out: *mut *mut c_void, size: impl Fn() -> usize, stream: Option<Stream>) -> c_int {
    let s = call.session;
    let status = call.forward();
    let stream = stream.map(|st| st as u64);
    let size = size();
    if status == cuda::CUDA_SUCCESS {
        // On success the library wrote the new pointer through `out`.
        let base = written_u64(call, out as u64).unwrap_or(0);
        if base != 0 {
            let made = Allocation { base, size: size as u64, time_ns: call.outlet.now_ns(), stream, api: call.api(), ordinal: 0 };
            let ordinal = s.allocations.insert(made);
            if s.origin_from_trace() {
                super::origin::watch_if_consumed_before(call, Allocation { ordinal, ..made });
            }
        }
    }
    call.record(status, CallArgs::Size { size: size as u64, stream });
    if status != cuda::CUDA_SUCCESS {
        report_failure(call, status, size, stream);
    }
    status
}

/// A failed allocation: `alloc_failed` with the memory state when the device is out of
/// memory, the CUDA error otherwise.
fn report_failure(call: &Call<'_, c_int>, status: c_int, size: usize, stream: Option<u64>) {
    let args = CallArgs::Size { size: size as u64, stream };
    if super::attribution::surfaced(call, status, call.api(), args, stream) {
        return;
    }
    if cuda::cuda_error_is_init_failure(status) {
        call.report_init_failure(status, cuda::cuda_error_name(status), None);
        return;
    }
    let finding = if status == 2 {
        Finding::new(FaultKind::AllocFailed, format!("{} of {size} bytes failed: out of device memory (see memory for what was free)", call.api()))
    } else {
        let mut message = format!("returned {} ({status})", cuda::cuda_error_name(status));
        message.extend(super::attribution::lost_since(call.session, status));
        Finding::new(FaultKind::ApiError, message)
    };
    let mut fault = call.fault(finding, status, cuda::cuda_error_name(status));
    fault.args = CallArgs::Size { size: size as u64, stream }.to_args();
    fault.stream = stream.map(hex);
    call.report(fault);
}

fn release(call: &Call<'_, c_int>, ptr: *mut c_void, stream: Option<Stream>) -> c_int {
    let s = call.session;
    let base = ptr as u64;
    // Forget it before the real free: once freed, another thread's cudaMalloc may get the
    // same address, and removing afterwards would drop that new allocation.
    let was_tracked = s.allocations.containing(base).filter(|a| a.base == base);
    if let Some(a) = was_tracked {
        s.allocations.remove(base);
        s.finite_seen.forget(a.base, a.size);
        s.watched.forget(a.base, a.size);
    }
    let status = call.forward();
    let stream = stream.map(|st| st as u64);
    if let Some(a) = was_tracked {
        if status == cuda::CUDA_SUCCESS {
            s.allocations.note_freed(a, call.seq, call.api());
        } else {
            s.allocations.insert(a);
        }
    }
    call.record(status, CallArgs::Pointer { ptr: base, stream });
    if status == cuda::CUDA_SUCCESS {
        return status;
    }
    if super::attribution::surfaced(call, status, call.api(), CallArgs::Pointer { ptr: base, stream }, stream) {
        return status;
    }
    if cuda::cuda_error_is_init_failure(status) {
        call.report_init_failure(status, cuda::cuda_error_name(status), None);
        return status;
    }
    let mut message = format!("returned {} ({status})", cuda::cuda_error_name(status));
    message.extend(super::attribution::lost_since(s, status));
    if was_tracked.is_none() && base != 0 {
        message.push_str(&format!(": {} is not the start of a live allocation the guard saw (freed twice, or not from cudaMalloc)", hex(base)));
    }
    let mut fault = call.fault(Finding::new(FaultKind::ApiError, message), status, cuda::cuda_error_name(status));
    fault.args = CallArgs::Pointer { ptr: base, stream }.to_args();
    fault.stream = stream.map(hex);
    call.report(fault);
    status
}

pub(crate) fn malloc(call: &Call<'_, c_int>, out: *mut *mut c_void, size: usize) -> c_int {
    allocate(call, out, size, None)
}

pub(crate) fn malloc_async(call: &Call<'_, c_int>, out: *mut *mut c_void, size: usize, stream: Stream) -> c_int {
    allocate(call, out, size, Some(stream))
}

/// cudaMallocHost, cudaHostAlloc, cuMemAllocHost_v2: pinned host memory, kept in its own
/// table so a GEMM given it is told what it is.
pub(crate) fn malloc_host(call: &Call<'_, c_int>, out: *mut *mut c_void, size: usize) -> c_int {
    let status = call.forward();
    if status == cuda::CUDA_SUCCESS {
        if let Some(base) = written_u64(call, out as u64).filter(|b| *b != 0) {
            call.session.pinned.insert(Allocation { base, size: size as u64, time_ns: call.outlet.now_ns(), stream: None, api: call.api(), ordinal: 0 });
        }
    }
    call.record(status, CallArgs::Size { size: size as u64, stream: None });
    status
}

pub(crate) fn host_alloc(call: &Call<'_, c_int>, out: *mut *mut c_void, size: usize, _flags: u32) -> c_int {
    malloc_host(call, out, size)
}

/// cudaFreeHost, cuMemFreeHost.
pub(crate) fn free_host(call: &Call<'_, c_int>, ptr: *mut c_void) -> c_int {
    call.session.pinned.remove(ptr as u64);
    let status = call.forward();
    call.record(status, CallArgs::Pointer { ptr: ptr as u64, stream: None });
    status
}

/// cudaMallocManaged (and cuMemAllocManaged): unified memory, device-accessible.
pub(crate) fn malloc_managed(call: &Call<'_, c_int>, out: *mut *mut c_void, size: usize, _flags: u32) -> c_int {
    allocate(call, out, size, None)
}

/// cudaMallocFromPoolAsync (and cuMemAllocFromPoolAsync).
pub(crate) fn malloc_from_pool(call: &Call<'_, c_int>, out: *mut *mut c_void, size: usize, _pool: *mut c_void, stream: Stream) -> c_int {
    allocate(call, out, size, Some(stream))
}

/// cudaMallocPitch: `height` rows of `*pitch` bytes (the pitch is the rows' stride).
pub(crate) fn malloc_pitch(call: &Call<'_, c_int>, out: *mut *mut c_void, pitch: *mut usize, width: usize, height: usize) -> c_int {
    let size = || written_u64(call, pitch as u64).map_or(width, |p| p as usize).saturating_mul(height);
    allocate_sized(call, out, size, None)
}

/// cuMemAllocPitch_v2: as cudaMallocPitch (the element size only guides the pitch).
pub(crate) fn mem_alloc_pitch(call: &Call<'_, c_int>, out: *mut *mut c_void, pitch: *mut usize, width: usize, height: usize, _elem: u32) -> c_int {
    malloc_pitch(call, out, pitch, width, height)
}

/// `cudaIpcMemHandle_t` and `CUipcMemHandle`: 64 opaque bytes, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct IpcHandle {
    reserved: [u8; 64],
}

/// `cudaExternalMemoryBufferDesc` and `CUDA_EXTERNAL_MEMORY_BUFFER_DESC` (one layout).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct ExternalBufferDesc {
    offset: u64,
    size: u64,
    flags: u32,
    reserved: [u32; 16],
}

/// cudaIpcOpenMemHandle, cuIpcOpenMemHandle_v2: another process's allocation, live here until
/// closed. Its size is not an argument, so the driver is asked for the opened range.
pub(crate) fn ipc_open(call: &Call<'_, c_int>, out: *mut *mut c_void, _handle: IpcHandle, _flags: u32) -> c_int {
    let status = call.forward();
    let mut size = 0;
    if status == cuda::CUDA_SUCCESS {
        let ptr = written_u64(call, out as u64).unwrap_or(0);
        if let Some((base, bytes)) = call.device.address_range(ptr).filter(|_| ptr != 0) {
            size = (base + bytes).saturating_sub(ptr);
            let opened = Allocation { base: ptr, size, time_ns: call.outlet.now_ns(), stream: None, api: call.api(), ordinal: 0 };
            call.session.allocations.insert(opened);
        }
    }
    call.record(status, CallArgs::Size { size, stream: None });
    if status != cuda::CUDA_SUCCESS {
        report_failure(call, status, 0, None);
    }
    status
}

/// cudaIpcCloseMemHandle, cuIpcCloseMemHandle: the opened range is gone, as after a free.
pub(crate) fn ipc_close(call: &Call<'_, c_int>, ptr: *mut c_void) -> c_int {
    release(call, ptr, None)
}

/// cudaExternalMemoryGetMappedBuffer, cuExternalMemoryGetMappedBuffer: a buffer of imported
/// memory (Vulkan, another process), of the size its descriptor gives, freed with cudaFree.
pub(crate) fn external_buffer(call: &Call<'_, c_int>, out: *mut *mut c_void, _memory: *const c_void, desc: *const ExternalBufferDesc) -> c_int {
    // The descriptor is read only once the library has read it without complaint.
    let size_field = if desc.is_null() { 0 } else { desc as u64 + std::mem::offset_of!(ExternalBufferDesc, size) as u64 };
    let size = || written_u64(call, size_field).map_or(0, |s| s as usize);
    let status = call.forward();
    let size = if status == cuda::CUDA_SUCCESS { size() } else { 0 };
    if status == cuda::CUDA_SUCCESS {
        if let Some(base) = written_u64(call, out as u64).filter(|b| *b != 0) {
            call.session.allocations.insert(Allocation { base, size: size as u64, time_ns: call.outlet.now_ns(), stream: None, api: call.api(), ordinal: 0 });
        }
    }
    call.record(status, CallArgs::Size { size: size as u64, stream: None });
    if status != cuda::CUDA_SUCCESS {
        report_failure(call, status, size, None);
    }
    status
}

/// cuMemMap: the mapped range is live device memory, one extent with the mapped ranges it
/// touches, until cuMemUnmap.
pub(crate) fn mem_map(call: &Call<'_, c_int>, ptr: u64, size: usize, _offset: usize, _handle: u64, _flags: u64) -> c_int {
    let status = call.forward();
    if status == cuda::CUDA_SUCCESS && ptr != 0 {
        let mapped = Allocation { base: ptr, size: size as u64, time_ns: call.outlet.now_ns(), stream: None, api: call.api(), ordinal: 0 };
        call.session.allocations.insert_mapped(mapped);
    }
    call.record(status, CallArgs::Range { ptr, size: size as u64 });
    status
}

/// cuMemAddressReserve: addresses, not memory (nothing is live until mapped); recorded.
pub(crate) fn mem_address_reserve(call: &Call<'_, c_int>, out: *mut u64, size: usize, _align: usize, _addr: u64, _flags: u64) -> c_int {
    let status = call.forward();
    let ptr = if status == cuda::CUDA_SUCCESS { written_u64(call, out as u64).unwrap_or(0) } else { 0 };
    call.record(status, CallArgs::Range { ptr, size: size as u64 });
    status
}

/// cuMemAddressFree: recorded.
pub(crate) fn mem_address_free(call: &Call<'_, c_int>, ptr: u64, size: usize) -> c_int {
    let status = call.forward();
    call.record(status, CallArgs::Range { ptr, size: size as u64 });
    status
}

/// cuMemCreate: physical memory, reachable only once mapped; recorded with its size.
pub(crate) fn mem_create(call: &Call<'_, c_int>, _handle: *mut u64, size: usize, _prop: *const c_void, _flags: u64) -> c_int {
    let status = call.forward();
    call.record(status, CallArgs::Size { size: size as u64, stream: None });
    status
}

/// cuMemRelease: recorded with the handle.
pub(crate) fn mem_release(call: &Call<'_, c_int>, handle: u64) -> c_int {
    let status = call.forward();
    call.record(status, CallArgs::Pointer { ptr: handle, stream: None });
    status
}

/// cuMemUnmap: the range stops being device memory; a later use of it is a use after free,
/// naming this call.
pub(crate) fn mem_unmap(call: &Call<'_, c_int>, ptr: u64, size: usize) -> c_int {
    let s = call.session;
    // Out of the table before the real call, as for a free (see `release`).
    let unmapped = s.allocations.remove_mapped(ptr, size as u64);
    let status = call.forward();
    if let Some(gone) = unmapped {
        if status == cuda::CUDA_SUCCESS {
            s.allocations.note_freed(gone, call.seq, call.api());
        } else {
            s.allocations.insert_mapped(gone);
        }
    }
    call.record(status, CallArgs::Range { ptr, size: size as u64 });
    status
}

pub(crate) fn free(call: &Call<'_, c_int>, ptr: *mut c_void) -> c_int {
    release(call, ptr, None)
}

pub(crate) fn free_async(call: &Call<'_, c_int>, ptr: *mut c_void, stream: Stream) -> c_int {
    release(call, ptr, Some(stream))
}

pub(crate) fn get_device_count(call: &Call<'_, c_int>, count: *mut c_int) -> c_int {
    let status = call.forward();
    // On success the runtime wrote the count.
    let written = if status == cuda::CUDA_SUCCESS { written_i32(call, count as u64) } else { None };
    call.record(status, CallArgs::Size { size: written.unwrap_or(0).max(0) as u64, stream: None });
    call.session.note_device_count(status, written);
    if status != cuda::CUDA_SUCCESS {
        call.note_failed_probe(status, cuda::cuda_error_name(status));
    }
    status
}
