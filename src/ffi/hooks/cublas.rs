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
        let fault = lifecycle::new_fault(s, seq, super::hook_name(hook), finding, status, cuda::cublas_status_name(status));
        lifecycle::report(s, fault);
    }
    status
}

pub fn destroy(s: &Session, hook: usize, forward: &dyn Fn() -> c_int, handle: Handle) -> c_int {
    destroy_handle(s, hook, forward, handle, &s.handles, CUBLAS)
}

/// The create/destroy pair that owns a handle table, for naming misuse.
pub struct HandleApi {
    pub create: &'static str,
    pub destroy: &'static str,
}

pub const CUBLAS: HandleApi = HandleApi { create: "cublasCreate", destroy: "cublasDestroy" };

/// cublasDestroy and cublasLtDestroy: the handle leaves its table when the library agrees.
pub fn destroy_handle(s: &Session, hook: usize, forward: &dyn Fn() -> c_int, handle: Handle, table: &Handles, names: HandleApi) -> c_int {
    let seq = s.begin(hook);
    let before = table.lookup(handle as u64);
    let status = forward();
    if status == cuda::CUBLAS_SUCCESS {
        table.destroyed(handle as u64, seq);
    }
    finish_handle_call(s, hook, seq, handle, None, before, status, names);
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
    finish_handle_call(s, hook, seq, handle, Some(value), before, status, CUBLAS);
    status
}

/// Records a call on a handle (`value`: what a setter set) and reports its failure, naming a
/// destroyed or unknown handle.
#[allow(clippy::too_many_arguments)]
fn finish_handle_call(
    s: &Session,
    hook: usize,
    seq: u64,
    handle: Handle,
    value: Option<i64>,
    before: HandleLookup,
    status: c_int,
    names: HandleApi,
) {
    let handle = handle as u64;
    let record = CallArgs::Handle { handle, value: value.unwrap_or(0) };
    s.record_call(hook, seq, status, process::thread_id(), process::now_ns(), record);
    if status == cuda::CUBLAS_SUCCESS {
        return;
    }
    let finding = match before {
        HandleLookup::Destroyed(at) if s.config.checks.args => Finding::new(
            FaultKind::InvalidHandle,
            format!("handle {} was destroyed by {} at call #{at}", hex(handle), names.destroy),
        ),
        HandleLookup::Unknown if s.config.checks.args => Finding::new(
            FaultKind::InvalidHandle,
            format!("handle {} was not created by {} in this process", hex(handle), names.create),
        ),
        _ => Finding::new(FaultKind::ApiError, format!("returned {} ({status})", cuda::cublas_status_name(status))),
    };
    let mut fault = lifecycle::new_fault(s, seq, super::hook_name(hook), finding, status, cuda::cublas_status_name(status));
    fault.args.insert("handle".into(), serde_json::json!(hex(handle)));
    if let Some(value) = value {
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
