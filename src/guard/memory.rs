//! CUDA runtime handlers: the table of live allocations, and the faults of memory and
//! initialisation.

use std::ffi::{c_int, c_void};

use super::Call;
use crate::check::Finding;
use crate::cuda;
use crate::ffi::out_param;
use crate::recorder::CallArgs;
use crate::state::Allocation;
use crate::trace::{hex, FaultKind};

type Stream = *mut c_void;

fn allocate(call: &Call<'_, c_int>, out: *mut *mut c_void, size: usize, stream: Option<Stream>) -> c_int {
    let s = call.session;
    let status = call.forward();
    let stream = stream.map(|st| st as u64);
    if status == cuda::CUDA_SUCCESS {
        // On success the runtime wrote the new pointer through `out`.
        let base = out_param::written(out).map_or(0, |p| p as u64);
        if base != 0 {
            s.allocations.insert(Allocation { base, size: size as u64, time_ns: call.outlet.now_ns(), stream });
        }
    }
    call.record(status, CallArgs::Size { size: size as u64, stream });
    if status == cuda::CUDA_SUCCESS {
        return status;
    }
    if cuda::cuda_error_is_init_failure(status) {
        call.report_init_failure(status, cuda::cuda_error_name(status), None);
        return status;
    }
    let finding = if status == 2 {
        Finding::new(
            FaultKind::AllocFailed,
            format!("{} of {size} bytes failed: out of device memory (see memory for what was free)", call.api()),
        )
    } else {
        Finding::new(FaultKind::ApiError, format!("returned {} ({status})", cuda::cuda_error_name(status)))
    };
    let mut fault = call.fault(finding, status, cuda::cuda_error_name(status));
    fault.args.insert("size".into(), serde_json::json!(size));
    fault.stream = stream.map(hex);
    call.report(fault);
    status
}

fn release(call: &Call<'_, c_int>, ptr: *mut c_void, stream: Option<Stream>) -> c_int {
    let s = call.session;
    let base = ptr as u64;
    // Forget it before the real free: once freed, another thread's cudaMalloc may get the
    // same address, and removing afterwards would drop that new allocation.
    let was_tracked = s.allocations.containing(base).filter(|a| a.base == base);
    if was_tracked.is_some() {
        s.allocations.remove(base);
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
    if cuda::cuda_error_is_init_failure(status) {
        call.report_init_failure(status, cuda::cuda_error_name(status), None);
        return status;
    }
    let mut message = format!("returned {} ({status})", cuda::cuda_error_name(status));
    if was_tracked.is_none() && base != 0 {
        message.push_str(&format!(
            ": {} is not the start of a live allocation the guard saw (freed twice, or not from cudaMalloc)",
            hex(base)
        ));
    }
    let mut fault = call.fault(Finding::new(FaultKind::ApiError, message), status, cuda::cuda_error_name(status));
    fault.args.insert("devPtr".into(), serde_json::json!(hex(base)));
    fault.stream = stream.map(hex);
    call.report(fault);
    status
}

pub(crate) fn malloc(call: &Call<'_, c_int>, out: *mut *mut c_void, size: usize) -> c_int {
    allocate(call, out, size, None)
}

pub(crate) fn malloc_async(
    call: &Call<'_, c_int>,
    out: *mut *mut c_void,
    size: usize,
    stream: Stream,
) -> c_int {
    allocate(call, out, size, Some(stream))
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
    let written = if status == cuda::CUDA_SUCCESS { out_param::written(count) } else { None };
    call.record(status, CallArgs::Size { size: written.unwrap_or(0).max(0) as u64, stream: None });
    call.session.note_device_count(status, written);
    if status != cuda::CUDA_SUCCESS {
        call.report_init_failure(status, cuda::cuda_error_name(status), Some((status, None)));
    }
    status
}
