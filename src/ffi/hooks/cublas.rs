//! cuBLAS handle hooks: keep each handle's stream, pointer mode and math mode, and report
//! failed initialisation with its cause.

use std::ffi::c_int;

use super::{Handle, Stream};
use crate::check::Finding;
use crate::cuda;
use crate::ffi::{lifecycle, process};
use crate::recorder::CallArgs;
use crate::session::Session;
use crate::state::{HandleLookup, HandleState, Handles};
use crate::trace::{hex, FaultKind};

fn api(hook: usize) -> &'static str {
    super::HOOK_NAMES.get(hook).copied().unwrap_or("cublas")
}

pub fn create(s: &Session, hook: usize, forward: &dyn Fn() -> c_int, out: *mut Handle) -> c_int {
    create_handle(s, hook, forward, out, &s.handles)
}

/// cublasCreate and cublasLtCreate: the new handle into its table; a failure is reported
/// with its cause (NOT_INITIALIZED: CUDA could not start).
pub fn create_handle(s: &Session, hook: usize, forward: &dyn Fn() -> c_int, out: *mut Handle, table: &Handles) -> c_int {
    let seq = s.begin(hook);
    let status = forward();
    let mut handle = 0u64;
    if status == cuda::CUBLAS_SUCCESS && !out.is_null() {
        // SAFETY: on success the library wrote the new handle through `out`.
        handle = unsafe { out.read() } as u64;
        table.created(handle);
    }
    s.record_call(hook, seq, status, process::thread_id(), process::now_ns(), CallArgs::Handle { handle, value: 0 });
    if status == cuda::CUBLAS_NOT_INITIALIZED {
        super::report_init_failure(s, hook, seq, status, cuda::cublas_status_name(status), None);
    } else if status != cuda::CUBLAS_SUCCESS {
        let finding = Finding::new(FaultKind::ApiError, format!("returned {} ({status})", cuda::cublas_status_name(status)));
        let fault = lifecycle::new_fault(s, seq, api(hook), finding, status, cuda::cublas_status_name(status));
        lifecycle::report(s, fault);
    }
    status
}

pub fn destroy(s: &Session, hook: usize, forward: &dyn Fn() -> c_int, handle: Handle) -> c_int {
    let seq = s.begin(hook);
    let before = s.handles.lookup(handle as u64);
    let status = forward();
    if status == cuda::CUBLAS_SUCCESS {
        s.handles.destroyed(handle as u64, seq);
    }
    finish_setter(s, hook, seq, handle, 0, before, status);
    status
}

/// Forwards a handle setter and applies the change when cuBLAS accepted it.
fn setter(
    s: &Session,
    hook: usize,
    forward: &dyn Fn() -> c_int,
    handle: Handle,
    value: i64,
    apply: impl FnOnce(&mut HandleState),
) -> c_int {
    let seq = s.begin(hook);
    let before = s.handles.lookup(handle as u64);
    let status = forward();
    if status == cuda::CUBLAS_SUCCESS {
        s.handles.update(handle as u64, apply);
    }
    finish_setter(s, hook, seq, handle, value, before, status);
    status
}

fn finish_setter(s: &Session, hook: usize, seq: u64, handle: Handle, value: i64, before: HandleLookup, status: c_int) {
    let handle = handle as u64;
    s.record_call(hook, seq, status, process::thread_id(), process::now_ns(), CallArgs::Handle { handle, value });
    if status == cuda::CUBLAS_SUCCESS {
        return;
    }
    let finding = match before {
        HandleLookup::Destroyed(at) if s.config.checks.args => Finding::new(
            FaultKind::InvalidHandle,
            format!("handle {} was destroyed by cublasDestroy at call #{at}", hex(handle)),
        ),
        HandleLookup::Unknown if s.config.checks.args => Finding::new(
            FaultKind::InvalidHandle,
            format!("handle {} was not created by cublasCreate in this process", hex(handle)),
        ),
        _ => Finding::new(FaultKind::ApiError, format!("returned {} ({status})", cuda::cublas_status_name(status))),
    };
    let mut fault = lifecycle::new_fault(s, seq, api(hook), finding, status, cuda::cublas_status_name(status));
    fault.args.insert("handle".into(), serde_json::json!(hex(handle)));
    if api(hook) != "cublasDestroy_v2" {
        fault.args.insert("value".into(), serde_json::json!(value));
    }
    lifecycle::report(s, fault);
}

pub fn set_stream(s: &Session, hook: usize, forward: &dyn Fn() -> c_int, handle: Handle, stream: Stream) -> c_int {
    setter(s, hook, forward, handle, stream as i64, |h| h.stream = stream as u64)
}

pub fn set_pointer_mode(s: &Session, hook: usize, forward: &dyn Fn() -> c_int, handle: Handle, mode: c_int) -> c_int {
    setter(s, hook, forward, handle, mode.into(), |h| h.pointer_mode = mode)
}

pub fn set_math_mode(s: &Session, hook: usize, forward: &dyn Fn() -> c_int, handle: Handle, mode: c_int) -> c_int {
    setter(s, hook, forward, handle, mode.into(), |h| h.math_mode = mode)
}
