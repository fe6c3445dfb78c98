//! CUDA runtime hooks: the table of live allocations, and the faults of memory and
//! initialisation.

use std::ffi::{c_int, c_void};

use super::Stream;
use crate::check::Finding;
use crate::cuda;
use crate::ffi::{lifecycle, process};
use crate::recorder::CallArgs;
use crate::session::Session;
use crate::state::Allocation;
use crate::trace::{hex, FaultKind};


fn allocate(s: &Session, hook: usize, forward: &dyn Fn() -> c_int, out: *mut *mut c_void, size: usize, stream: Option<Stream>) -> c_int {
    let seq = s.begin(hook);
    let status = forward();
    let stream = stream.map(|st| st as u64);
    if status == cuda::CUDA_SUCCESS && !out.is_null() {
        // SAFETY: on success the runtime wrote the new pointer through `out`.
        let base = unsafe { out.read() } as u64;
        if base != 0 {
            s.allocations.insert(Allocation { base, size: size as u64, time_ns: process::now_ns(), stream });
        }
    }
    s.record_call(hook, seq, status, process::thread_id(), process::now_ns(), CallArgs::Size { size: size as u64, stream });
    if status == cuda::CUDA_SUCCESS {
        return status;
    }
    if cuda::cuda_error_is_init_failure(status) {
        super::report_init_failure(s, hook, seq, status, cuda::cuda_error_name(status), None);
        return status;
    }
    let finding = if status == 2 {
        Finding::new(
            FaultKind::AllocFailed,
            format!("{} of {size} bytes failed: out of device memory (see memory for what was free)", super::hook_name(hook)),
        )
    } else {
        Finding::new(FaultKind::ApiError, format!("returned {} ({status})", cuda::cuda_error_name(status)))
    };
    let mut fault = lifecycle::new_fault(s, seq, super::hook_name(hook), finding, status, cuda::cuda_error_name(status));
    fault.args.insert("size".into(), serde_json::json!(size));
    fault.stream = stream.map(hex);
    lifecycle::report(s, fault);
    status
}

fn release(s: &Session, hook: usize, forward: &dyn Fn() -> c_int, ptr: *mut c_void, stream: Option<Stream>) -> c_int {
    let seq = s.begin(hook);
    let base = ptr as u64;
    // Forget it before the real free: once freed, another thread's cudaMalloc may get the
    // same address, and removing afterwards would drop that new allocation.
    let was_tracked = s.allocations.containing(base).filter(|a| a.base == base);
    if was_tracked.is_some() {
        s.allocations.remove(base);
    }
    let status = forward();
    let stream = stream.map(|st| st as u64);
    if status != cuda::CUDA_SUCCESS {
        if let Some(a) = was_tracked {
            s.allocations.insert(a);
        }
    }
    s.record_call(hook, seq, status, process::thread_id(), process::now_ns(), CallArgs::Pointer { ptr: base, stream });
    if status == cuda::CUDA_SUCCESS {
        return status;
    }
    if cuda::cuda_error_is_init_failure(status) {
        super::report_init_failure(s, hook, seq, status, cuda::cuda_error_name(status), None);
        return status;
    }
    let mut message = format!("returned {} ({status})", cuda::cuda_error_name(status));
    if was_tracked.is_none() && base != 0 {
        message.push_str(&format!(
            ": {} is not the start of a live allocation the guard saw (freed twice, or not from cudaMalloc)",
            hex(base)
        ));
    }
    let mut fault = lifecycle::new_fault(s, seq, super::hook_name(hook), Finding::new(FaultKind::ApiError, message), status, cuda::cuda_error_name(status));
    fault.args.insert("devPtr".into(), serde_json::json!(hex(base)));
    fault.stream = stream.map(hex);
    lifecycle::report(s, fault);
    status
}

pub fn malloc(s: &Session, hook: usize, forward: &dyn Fn() -> c_int, out: *mut *mut c_void, size: usize) -> c_int {
    allocate(s, hook, forward, out, size, None)
}

pub fn malloc_async(
    s: &Session,
    hook: usize,
    forward: &dyn Fn() -> c_int,
    out: *mut *mut c_void,
    size: usize,
    stream: Stream,
) -> c_int {
    allocate(s, hook, forward, out, size, Some(stream))
}

pub fn free(s: &Session, hook: usize, forward: &dyn Fn() -> c_int, ptr: *mut c_void) -> c_int {
    release(s, hook, forward, ptr, None)
}

pub fn free_async(s: &Session, hook: usize, forward: &dyn Fn() -> c_int, ptr: *mut c_void, stream: Stream) -> c_int {
    release(s, hook, forward, ptr, Some(stream))
}

pub fn get_device_count(s: &Session, hook: usize, forward: &dyn Fn() -> c_int, count: *mut c_int) -> c_int {
    let seq = s.begin(hook);
    let status = forward();
    let written = if status == cuda::CUDA_SUCCESS && !count.is_null() {
        // SAFETY: on success the runtime wrote the count.
        Some(unsafe { count.read() })
    } else {
        None
    };
    s.record_call(hook, seq, status, process::thread_id(), process::now_ns(), CallArgs::Size { size: written.unwrap_or(0).max(0) as u64, stream: None });
    s.note_device_count(status, written);
    if status != cuda::CUDA_SUCCESS {
        super::report_init_failure(s, hook, seq, status, cuda::cuda_error_name(status), Some((status, None)));
    }
    status
}
