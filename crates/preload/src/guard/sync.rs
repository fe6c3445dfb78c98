//! The program's own synchronisations: `cudaStreamSynchronize`, `cudaDeviceSynchronize`,
//! `cudaEventSynchronize`, a synchronous `cudaMemcpy`, and the driver's `cuStreamSynchronize`,
//! `cuCtxSynchronize`, `cuEventSynchronize`, `cuMemcpyDtoH_v2`/`HtoD_v2`. They are where an
//! asynchronous error surfaces when nothing synchronised before (a kernel of the program's
//! own, or a call the guard did not synchronise around): PyTorch's `.item()` is a copy and a
//! stream synchronisation, and "an illegal memory access was encountered" is raised there.
//! Each is recorded; one that reveals a sticky error nobody has attributed yet is an
//! `async_error` fault on this call, with the kernels launched since the device was last
//! found clean as its suspects (issue 29, point 3: the breadcrumbs will narrow these to the
//! call that did not complete).

use std::ffi::{c_int, c_void};

use super::Call;
use crate::check::Finding;
use crate::cuda;
use crate::recorder::CallArgs;
use crate::trace::{hex, FaultKind};

/// What a synchronisation waits for.
#[derive(Clone, Copy)]
enum Waits {
    Stream(u64),
    Event(u64),
    Device,
    /// A synchronous copy of `bytes` (it waits for the legacy default stream).
    Copy(u64),
}

pub(crate) fn stream_synchronize(call: &Call<'_, c_int>, stream: *mut c_void) -> c_int {
    synchronised(call, Waits::Stream(stream as u64))
}

pub(crate) fn event_synchronize(call: &Call<'_, c_int>, event: *mut c_void) -> c_int {
    synchronised(call, Waits::Event(event as u64))
}

pub(crate) fn device_synchronize(call: &Call<'_, c_int>) -> c_int {
    synchronised(call, Waits::Device)
}

/// cudaMemcpy: synchronous for every kind the guard cares about (device to host, host to
/// device, device to device are all ordered after the legacy default stream's work).
pub(crate) fn memcpy(call: &Call<'_, c_int>, _dst: *mut c_void, _src: *const c_void, count: usize, _kind: c_int) -> c_int {
    synchronised(call, Waits::Copy(count as u64))
}

/// cuMemcpyDtoH_v2 and cuMemcpyHtoD_v2 (their pointers differ in type only).
pub(crate) fn driver_copy(call: &Call<'_, c_int>, _dst: u64, _src: u64, count: usize) -> c_int {
    synchronised(call, Waits::Copy(count as u64))
}

fn synchronised(call: &Call<'_, c_int>, waits: Waits) -> c_int {
    let s = call.session;
    let status = call.forward();
    let args = match waits {
        Waits::Stream(stream) => CallArgs::Stream { stream },
        Waits::Event(event) => CallArgs::Event { event },
        Waits::Device => CallArgs::None,
        Waits::Copy(bytes) => CallArgs::Size { size: bytes, stream: None },
    };
    call.record(status, args);
    if status == cuda::CUDA_SUCCESS {
        // Only a device-wide wait says every launch before it completed cleanly.
        if matches!(waits, Waits::Device) {
            s.note_clean_sync(call.seq);
        }
        return status;
    }
    let what = match waits {
        Waits::Stream(stream) => format!("the program's own {}, its synchronisation of stream {}", call.api(), hex(stream)),
        Waits::Event(event) => format!("the program's own {}, its wait for event {}", call.api(), hex(event)),
        Waits::Device => format!("the program's own {}, its device-wide synchronisation", call.api()),
        Waits::Copy(bytes) => format!("the program's own {}, its synchronous copy of {bytes} bytes", call.api()),
    };
    let stream = match waits {
        Waits::Stream(stream) => Some(stream),
        _ => None,
    };
    reveals_unattributed(call, status, &what, args, stream);
    status
}

/// The first hooked call to see a sticky error that no call has been blamed for yet (at a
/// synchronisation, or any call that returns it: cudaMalloc, cudaFree, ...) records it as an
/// `async_error`, with the kernels launched since the device was last found clean as suspects;
/// later calls that see it again say "since ... at call #N". `where_` says where it surfaced.
/// True when this call recorded it (the caller then reports nothing more).
pub(crate) fn reveals_unattributed(call: &Call<'_, c_int>, status: c_int, where_: &str, args: CallArgs, stream: Option<u64>) -> bool {
    let s = call.session;
    if !cuda::cuda_error_is_sticky(status) || s.known_error().is_some() {
        // Not the device's fault (a bad handle, an invalid copy), or already attributed.
        return false;
    }
    s.note_error(status, call.seq);
    let mut finding = Finding::new(
        FaultKind::AsyncError,
        format!(
            "{} ({status}) surfaced at {where_}: work queued before it on the device faulted, and nothing had \
             synchronised since it was launched (CUBLASGUARD_SYNC=launches pins it to its launch)",
            cuda::cuda_error_name(status)
        ),
    );
    finding.error = Some((status, call.api()));
    let mut fault = call.fault(finding, status, cuda::cuda_error_name(status));
    fault.args = args.to_args();
    fault.stream = stream.map(hex);
    fault.suspects = super::launch::suspects(call, call.seq);
    call.report(fault);
    true
}
