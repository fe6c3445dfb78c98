//! cuBLAS handle handlers: keep each handle's stream, pointer mode and math mode, and report
//! failed initialisation with its cause.

use std::ffi::{c_int, c_void};

use super::Call;
use crate::check::Finding;
use crate::cuda;
use crate::recorder::CallArgs;
use crate::state::{HandleLookup, HandleState, Handles};
use crate::trace::{hex, Arg, FaultKind};

type Handle = *mut c_void;
type Stream = *mut c_void;

pub(crate) fn create(call: &Call<'_, c_int>, out: *mut Handle) -> c_int {
    create_handle(call, out, &call.session.handles)
}

/// cublasCreate and cublasLtCreate: the new handle into its table; a failure is reported
/// with its cause (NOT_INITIALIZED: CUDA could not start).
pub(crate) fn create_handle(call: &Call<'_, c_int>, out: *mut Handle, table: &Handles) -> c_int {
    let status = call.forward();
    let mut handle = 0u64;
    if status == cuda::CUBLAS_SUCCESS {
        // On success the library wrote the new handle through `out`.
        handle = super::parameters::written_u64(call, out as u64).unwrap_or(0);
        if handle != 0 {
            table.created(handle);
        }
    }
    call.record(status, CallArgs::Handle { handle, value: 0 });
    if status == cuda::CUBLAS_NOT_INITIALIZED {
        call.report_init_failure(status, cuda::cublas_status_name(status), None);
    } else if status != cuda::CUBLAS_SUCCESS {
        super::attribution::attribute_pending(call);
        let finding = Finding::new(FaultKind::ApiError, format!("returned {} ({status})", cuda::cublas_status_name(status)));
        let mut fault = call.fault(finding, status, cuda::cublas_status_name(status));
        if status == cuda::CUBLAS_ALLOC_FAILED {
            // cuBLAS itself ran out of device memory creating the handle: the same story.
            let probe = crate::check::init::DriverProbe { driver_loadable: true, ..Default::default() };
            fault.cause = Some(crate::check::init::explain(&probe, &call.init_context(true)));
        }
        call.report(fault);
    }
    status
}

pub(crate) fn destroy(call: &Call<'_, c_int>, handle: Handle) -> c_int {
    destroy_handle(call, handle, &call.session.handles, CUBLAS)
}

/// The create/destroy pair that owns a handle table, for naming misuse.
pub(crate) struct HandleApi {
    pub create: &'static str,
    pub destroy: &'static str,
}

pub(crate) const CUBLAS: HandleApi = HandleApi { create: "cublasCreate", destroy: "cublasDestroy" };

/// cublasDestroy and cublasLtDestroy: the handle leaves its table when the library agrees.
pub(crate) fn destroy_handle(call: &Call<'_, c_int>, handle: Handle, table: &Handles, names: HandleApi) -> c_int {
    let before = table.lookup(handle as u64);
    let status = call.forward();
    if status == cuda::CUBLAS_SUCCESS {
        table.destroyed(handle as u64, call.seq);
    }
    finish_handle_call(call, handle, None, before, status, names);
    status
}

/// Forwards a handle setter and applies the change when cuBLAS accepted it.
fn setter(call: &Call<'_, c_int>, handle: Handle, value: i64, apply: impl FnOnce(&mut HandleState)) -> c_int {
    let before = call.session.handles.lookup(handle as u64);
    let status = call.forward();
    if status == cuda::CUBLAS_SUCCESS {
        call.session.handles.update(handle as u64, apply);
    }
    finish_handle_call(call, handle, Some(value), before, status, CUBLAS);
    status
}

/// cublasSetWorkspace: the handle works in the program's buffer from now on (NULL or 0 bytes:
/// in the library's own again). The buffer is checked at each call that uses it.
pub(crate) fn set_workspace(call: &Call<'_, c_int>, handle: Handle, workspace: *mut std::ffi::c_void, bytes: usize) -> c_int {
    let before = call.session.handles.lookup(handle as u64);
    let status = call.forward();
    let (ptr, bytes) = (workspace as u64, bytes as u64);
    if status == cuda::CUBLAS_SUCCESS {
        let kept = if ptr == 0 || bytes == 0 { (0, 0) } else { (ptr, bytes) };
        call.session.handles.update(handle as u64, |h| h.workspace = kept);
    }
    let record = CallArgs::Workspace { handle: handle as u64, ptr, bytes };
    finish_handle_record(call, handle, record, None, before, status, CUBLAS);
    status
}

/// Records a call on a handle (`value`: what a setter set) and reports its failure, naming a
/// destroyed or unknown handle.
fn finish_handle_call(call: &Call<'_, c_int>, handle: Handle, value: Option<i64>, before: HandleLookup, status: c_int, names: HandleApi) {
    let record = CallArgs::Handle { handle: handle as u64, value: value.unwrap_or(0) };
    finish_handle_record(call, handle, record, value, before, status, names)
}

fn finish_handle_record(call: &Call<'_, c_int>, handle: Handle, record: CallArgs, value: Option<i64>, before: HandleLookup, status: c_int, names: HandleApi) {
    let handle = handle as u64;
    call.record(status, record);
    let s = call.session;
    if status == cuda::CUBLAS_SUCCESS {
        return;
    }
    let finding = match before {
        HandleLookup::Destroyed(at) if s.config.checks.args => {
            Finding::new(FaultKind::InvalidHandle, format!("handle {} was destroyed by {} at call #{at}", hex(handle), names.destroy))
        }
        HandleLookup::Unknown if s.config.checks.args => {
            Finding::new(FaultKind::InvalidHandle, format!("handle {} was not created by {} in this process", hex(handle), names.create))
        }
        _ => Finding::new(FaultKind::ApiError, format!("returned {} ({status})", cuda::cublas_status_name(status))),
    };
    let mut fault = call.fault(finding, status, cuda::cublas_status_name(status));
    if !matches!(record, CallArgs::Handle { .. }) {
        fault.args.extend(record.to_args());
    }
    fault.args.insert("handle", Arg::Address(handle));
    if let Some(value) = value {
        fault.args.insert("value", value);
    }
    call.report(fault);
}

pub(crate) fn set_stream(call: &Call<'_, c_int>, handle: Handle, stream: Stream) -> c_int {
    setter(call, handle, stream as i64, |h| h.stream = stream as u64)
}

pub(crate) fn set_pointer_mode(call: &Call<'_, c_int>, handle: Handle, mode: c_int) -> c_int {
    setter(call, handle, mode.into(), |h| h.pointer_mode = mode)
}

pub(crate) fn set_math_mode(call: &Call<'_, c_int>, handle: Handle, mode: c_int) -> c_int {
    setter(call, handle, mode.into(), |h| h.math_mode = mode)
}
