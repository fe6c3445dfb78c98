//! The program's own synchronisations: `cudaStreamSynchronize`, `cudaDeviceSynchronize`,
//! `cudaEventSynchronize`, a synchronous `cudaMemcpy`, and the driver's `cuStreamSynchronize`,
//! `cuCtxSynchronize`, `cuEventSynchronize`, `cuMemcpyDtoH_v2`/`HtoD_v2`. They are where an
//! asynchronous error surfaces when nothing synchronised before (a kernel of the program's
//! own, or a call the guard did not synchronise around): PyTorch's `.item()` is a copy and a
//! stream synchronisation, and "an illegal memory access was encountered" is raised there.
//! Each is recorded; one that reveals a sticky error nobody has attributed yet records it as
//! an `async_error` (`attribution`: on the call whose breadcrumb never landed, else here).

use std::ffi::{c_int, c_void};

use super::Call;
use crate::cuda;
use crate::recorder::CallArgs;
use crate::trace::hex;

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
    // While it waits, the hang watchdog can name it (a few stores; a synchronisation blocks).
    let waiting = s.waits.enter(crate::session::waits::Waiting {
        thread: call.thread(),
        seq: call.seq,
        hook: call.hook.index() as u16,
        since_ns: call.outlet.now_ns(),
        site: call.call_site(),
        python: call.caller.python_places(),
    });
    let status = call.forward();
    drop(waiting);
    let args = match waits {
        Waits::Stream(stream) => CallArgs::Stream { stream },
        Waits::Event(event) => CallArgs::Event { event },
        Waits::Device => CallArgs::None,
        Waits::Copy(bytes) => CallArgs::Size { size: bytes, stream: None },
    };
    call.record(status, args);
    // What the program waited for has landed: the verdicts of the calls before it are judged
    // now, before it goes on (one atomic load when none waits).
    super::verdicts::harvest_at_synchronisation(call, call.seq);
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
    super::attribution::surfaced(call, status, &what, args, stream);
    status
}
