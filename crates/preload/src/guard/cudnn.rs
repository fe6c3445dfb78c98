//! cuDNN: its handles (with the stream each works on), the backend API's descriptors and
//! execution, and the legacy entry points PyTorch calls. Every failing status is a fault that
//! names it, with its sub-code, cuDNN's own message (`cudnnGetLastErrorString`), the handle and
//! its stream, and a cause: CUDA's (no driver, memory, fork, a lost context) for cudnnCreate,
//! cuDNN's libraries (a sublibrary missing or of another version, a runtime or driver older
//! than cuDNN's), the CUDA error pending behind an execution failure.

use std::ffi::{c_int, c_void};

use super::Call;
use crate::check::cudnn as rules;
use crate::check::{init, Finding};
use crate::config::OnFault;
use crate::cuda;
use crate::hook_args::Args;
use crate::recorder::CallArgs;
use crate::state::{Freed, HandleLookup};
use crate::trace::{hex, Arg, Fault, FaultKind, InitCauseKind};

type Handle = *mut c_void;

/// cudnnCreate: the new handle into its table; a failure is reported with its cause. Before
/// the first one, a libcudnn_graph the dispatcher cannot find anywhere is reported before the
/// call: NVIDIA's dispatcher then aborts the process inside it.
pub(crate) fn create(call: &Call<'_, c_int>, out: *mut Handle) -> c_int {
    let early = graph_missing(call);
    let status = call.forward();
    if let Some(mut fault) = early {
        // The dispatcher returned (the stand-in's does): the fault says how.
        (fault.status, fault.status_name) = (status, cuda::cudnn_status_name(status).to_string());
        describe(&mut fault, status, 0, None, take_message(call));
        call.record(status, CallArgs::Cudnn { handle: 0, stream: 0, plan: 0, pack: 0 });
        call.amend(fault);
        return status;
    }
    let mut handle = 0u64;
    if status == cuda::CUDNN_SUCCESS {
        handle = super::parameters::written_u64(call, out as u64).unwrap_or(0);
        if handle != 0 {
            call.session.cudnn_handles.created(handle);
        }
    }
    call.record(status, CallArgs::Cudnn { handle, stream: 0, plan: 0, pack: 0 });
    if status != cuda::CUDNN_SUCCESS {
        create_failed(call, status);
    }
    status
}

/// The fault of a cudnnCreate whose dispatcher cannot find libcudnn_graph in any folder it
/// searches, reported now (`None` once libcudnn_graph is loaded, or where it is found).
fn graph_missing(call: &Call<'_, c_int>) -> Option<Fault> {
    // The dispatcher's sublibraries only: at every cudnnCreate, and libcudnn_graph (whose
    // file names the engines) is what is looked for here.
    let facts = call.device.cudnn_libraries(rules::Scope::Dispatched)?;
    let graph = facts.sublibraries.iter().find(|s| s.name == "libcudnn_graph")?;
    if graph.loaded.is_some() || graph.on_disk.is_some() {
        return None;
    }
    let mut cause = rules::explain_in(rules::Scope::Dispatched, cuda::CUDNN_SUBLIBRARY_LOADING_FAILED, &facts, None, None)?;
    cause.message.push_str(" (NVIDIA's cuDNN 9 aborts the process here: \"Invalid handle. Cannot load symbol cudnnCreate\")");
    let finding = Finding::new(FaultKind::InitFailed, format!("cannot succeed: {}", cause.message));
    let mut fault = call.fault(finding, -1, "not returned (the fault was recorded before the call ran)");
    fault.cause = Some(cause);
    call.report(fault.clone());
    Some(fault)
}

/// cudnnCreate failed: cuDNN's libraries first (a sublibrary it could not load is named as
/// such), else why CUDA could not start, as for cublasCreate.
fn create_failed(call: &Call<'_, c_int>, status: c_int) {
    super::attribution::attribute_pending(call);
    let s = call.session;
    let message = take_message(call);
    let facts = call.device.cudnn_libraries(rules::Scope::All);
    let probe = call.device.probe_driver(s.device_count());
    // Only the dispatcher's sublibraries: libcudnn_graph loads its engines later, at a backend
    // finalize, so one of them missing cannot fail a handle (it would hide out_of_memory).
    let explained = facts.as_ref().and_then(|f| rules::explain_in(rules::Scope::Dispatched, status, f, probe.runtime_version, probe.driver_version));
    let cause = match explained {
        Some(cause) => cause,
        None => {
            let mut cause = init::explain(&probe, &call.init_context(status == cuda::CUDNN_DEVICE_ALLOCATION_FAILED));
            if matches!(cause.kind, InitCauseKind::NoDriver | InitCauseKind::DriverTooOld | InitCauseKind::NoDevice | InitCauseKind::OutOfFileDescriptors) {
                s.set_driver_error(cause.message.clone());
            }
            cause.cudnn = facts;
            cause
        }
    };
    let name = cuda::cudnn_status_name(status);
    let finding = Finding::new(FaultKind::InitFailed, format!("returned {name} ({status}): {}", cause.message));
    let mut fault = call.fault(finding, status, name);
    describe(&mut fault, status, 0, None, message);
    fault.cause = Some(cause);
    call.report(fault);
}

/// cudnnDestroy: the handle leaves its table when cuDNN agrees.
pub(crate) fn destroy(call: &Call<'_, c_int>, handle: Handle) -> c_int {
    let handle = handle as u64;
    let before = call.session.cudnn_handles.lookup(handle);
    let status = call.forward();
    if status == cuda::CUDNN_SUCCESS {
        call.session.cudnn_handles.destroyed(handle, call.seq);
    }
    call.record(status, CallArgs::Cudnn { handle, stream: stream_of(before), plan: 0, pack: 0 });
    if status != cuda::CUDNN_SUCCESS {
        failed(call, status, handle, before, None);
    }
    status
}

/// cudnnSetStream: the handle's stream, recorded for its later calls' faults.
pub(crate) fn set_stream(call: &Call<'_, c_int>, handle: Handle, stream: *mut c_void) -> c_int {
    let handle = handle as u64;
    let before = call.session.cudnn_handles.lookup(handle);
    let status = call.forward();
    if status == cuda::CUDNN_SUCCESS {
        call.session.cudnn_handles.update(handle, |h| h.stream = stream as u64);
    }
    call.record(status, CallArgs::Cudnn { handle, stream: stream as u64, plan: 0, pack: 0 });
    if status != cuda::CUDNN_SUCCESS {
        failed(call, status, handle, before, None);
    }
    status
}

/// cudnnBackendCreateDescriptor: a failure (a sublibrary that could not be loaded shows here
/// first in cudnn-frontend's programs) is a fault with its cause.
pub(crate) fn backend_create_descriptor(call: &Call<'_, c_int>, kind: c_int, out: *mut Handle) -> c_int {
    let status = call.forward();
    let created = if status == cuda::CUDNN_SUCCESS { super::parameters::written_u64(call, out as u64).unwrap_or(0) } else { 0 };
    call.record(status, CallArgs::Handle { handle: created, value: kind.into() });
    if status != cuda::CUDNN_SUCCESS {
        failed(call, status, 0, HandleLookup::Unknown, None);
    }
    status
}

/// cudnnBackendFinalize: where a missing sublibrary surfaced as NOT_INITIALIZED
/// (pytorch/builder#1859). An engine that does not support the graph is no fault:
/// cudnn-frontend (PyTorch's convolutions) finalizes the heuristics' candidates in turn and
/// takes the first that finalizes, so their NOT_SUPPORTED answers are routine; those that say
/// the environment is wrong (an incompatible driver or runtime, a missing prerequisite or
/// sublibrary) are faults.
pub(crate) fn backend_finalize(call: &Call<'_, c_int>, descriptor: Handle) -> c_int {
    let status = call.forward();
    call.record(status, CallArgs::Handle { handle: descriptor as u64, value: 0 });
    if status != cuda::CUDNN_SUCCESS && !engine_refusal(status) {
        failed(call, status, 0, HandleLookup::Unknown, None);
    }
    status
}

/// A NOT_SUPPORTED status (3000-3014) other than those that name the environment: the driver
/// (3005), the runtime (3006), a runtime prerequisite (3008), a sublibrary (3009).
fn engine_refusal(status: c_int) -> bool {
    (3000..4000).contains(&status)
        && !matches!(status, cuda::CUDNN_INCOMPATIBLE_CUDA_DRIVER | cuda::CUDNN_INCOMPATIBLE_CUDART | 3008 | cuda::CUDNN_SUBLIBRARY_UNAVAILABLE)
}

/// cudnnBackendExecute: the handle live, the variant pack's tensors and workspace inside live
/// allocations (the plan's workspace size held), before the call; its failure after it.
pub(crate) fn backend_execute(call: &Call<'_, c_int>, handle: Handle, plan: Handle, pack: Handle) -> c_int {
    let s = call.session;
    let (handle, plan, pack) = (handle as u64, plan as u64, pack as u64);
    let before = s.cudnn_handles.lookup_in(handle, call.memo);
    let record = CallArgs::Cudnn { handle, stream: stream_of(before), plan, pack };
    let early = handle_finding(call, before).or_else(|| {
        if !s.config.checks.bounds {
            return None;
        }
        let variant = call.device.cudnn_variant_pack(pack)?;
        rules::check_variant_pack(&variant, call.device.cudnn_plan_workspace(plan), call.allocations(), call.device)
    });
    guarded(call, handle, before, record, early)
}

/// The legacy entry points (`declared` lines): the handle live and no argument that points to
/// data (an operand, workspace or scalar, as the line's types say) in freed memory before the
/// call; its failure after it. Any argument count, and the handle wherever the line puts it (by
/// its name, `handle`).
pub(crate) fn legacy(call: &Call<'_, c_int>, args: Args<'_>) -> c_int {
    let s = call.session;
    let handle = args.handle();
    let before = s.cudnn_handles.lookup_in(handle, call.memo);
    let record = CallArgs::Cudnn { handle, stream: stream_of(before), plan: 0, pack: 0 };
    let early = handle_finding(call, before).or_else(|| {
        if !s.config.checks.bounds {
            return None;
        }
        let mut pointers = [(0usize, 0u64); 32];
        let mut n = 0;
        for (i, arg) in args.list.iter().enumerate() {
            if arg.points_to_data() && n < pointers.len() {
                pointers[n] = (i + 1, arg.bits);
                n += 1;
            }
        }
        rules::check_freed(&pointers[..n], call.allocations())
    });
    guarded(call, handle, before, record, early)
}

/// The call around its checks: a finding before it is reported before it runs (the call may
/// crash inside cuDNN), and refused under CUBLASGUARD_ON_FAULT=error; a failing status after.
fn guarded(call: &Call<'_, c_int>, handle: u64, before: HandleLookup, record: CallArgs, early: Option<(Finding, Option<Freed>)>) -> c_int {
    let s = call.session;
    if let Some((finding, freed)) = early {
        let mut fault = call.fault(finding, -1, "not returned (the fault was recorded before the call ran)");
        describe(&mut fault, 0, handle, Some(stream_of(before)), None);
        fault.args.extend(record.to_args());
        fault.freed_by = freed.map(|f| crate::trace::FreedBy { seq: f.seq, api: f.api.to_string(), base: hex(f.base), size: f.size });
        let refused = s.config.on_fault == OnFault::Error;
        let status = if refused { cuda::CUDNN_BAD_PARAM } else { call.forward() };
        fault.status = status;
        fault.status_name = cuda::cudnn_status_name(status).to_string();
        call.record(status, record);
        call.report(fault);
        return status;
    }
    let status = call.forward();
    call.record(status, record);
    if status != cuda::CUDNN_SUCCESS {
        failed(call, status, handle, before, Some(record));
    } else if !s.config.sync.synchronises_calls() {
        // CUBLASGUARD_SYNC=deferred: the call's breadcrumb, as after a guarded cuBLAS call, so a
        // kernel of this execute that faults is pinned to it wherever its error surfaces.
        super::launch::leave_breadcrumb(call, stream_of(before), record);
    }
    status
}

/// A destroyed handle, before the call (`checks.args`).
fn handle_finding(call: &Call<'_, c_int>, before: HandleLookup) -> Option<(Finding, Option<Freed>)> {
    match before {
        HandleLookup::Destroyed(at) if call.session.config.checks.args => {
            Some((Finding::new(FaultKind::InvalidHandle, format!("the cuDNN handle was destroyed by cudnnDestroy at call #{at}")), None))
        }
        _ => None,
    }
}

fn stream_of(lookup: HandleLookup) -> u64 {
    match lookup {
        HandleLookup::Alive(state) => state.stream,
        _ => 0,
    }
}

/// A failing status after the call: named, with cuDNN's message, the handle, its stream and a
/// cause; `executes` (the call's recorded arguments): the call ran work on the device, so an
/// execution failure is looked behind (the CUDA error pending on its stream, the kernels
/// launched since the device was last found clean; under CUBLASGUARD_SYNC=deferred the error is
/// also recorded on the first call whose breadcrumb never landed).
fn failed(call: &Call<'_, c_int>, status: c_int, handle: u64, before: HandleLookup, executes: Option<CallArgs>) {
    let s = call.session;
    let name = cuda::cudnn_status_name(status);
    let message = take_message(call);
    let stream = stream_of(before);
    let mut finding = match before {
        HandleLookup::Destroyed(at) if handle != 0 && s.config.checks.args => {
            Finding::new(FaultKind::InvalidHandle, format!("handle {} was destroyed by cudnnDestroy at call #{at}", hex(handle)))
        }
        HandleLookup::Unknown if handle != 0 && s.config.checks.args => {
            Finding::new(FaultKind::InvalidHandle, format!("handle {} was not created by cudnnCreate in this process", hex(handle)))
        }
        _ => Finding::new(FaultKind::ApiError, format!("returned {name} ({status})")),
    };
    if let Some(m) = &message {
        finding.message.push_str(&format!(": {m}"));
    }
    let mut pending = None;
    let execution_failed = (cuda::CUDNN_EXECUTION_FAILED..cuda::CUDNN_EXECUTION_FAILED + 1000).contains(&status);
    if let Some(record) = executes.filter(|_| execution_failed) {
        // As for cuBLAS: what is pending on the stream is what failed underneath.
        let code = match call.device.is_capturing(stream) {
            Ok(false) => call.device.synchronize(stream),
            Err(code) if cuda::cuda_error_is_sticky(code) => code,
            _ => 0,
        };
        if code != 0 && !s.config.sync.synchronises_calls() && s.known_error().is_none() {
            super::attribution::surfaced(call, code, &format!("{}'s failure ({name})", call.api()), record, Some(stream));
        }
        if code != 0 {
            finding.message.push_str(&format!(
                "; behind it, {} ({code}) was pending on stream {}: a kernel queued before this call, or this call's own, \
                 faulted (the suspects; CUBLASGUARD_SYNC=launches pins it to its launch)",
                cuda::cuda_error_name(code),
                hex(stream)
            ));
            finding.error = Some((code, "cudaStreamSynchronize"));
            pending = Some(code);
        }
    }
    let mut fault = call.fault(finding, status, name);
    describe(&mut fault, status, handle, Some(stream), message);
    if let Some(code) = pending {
        fault.suspects = super::launch::suspects(call, call.seq);
        if cuda::cuda_error_is_sticky(code) && s.known_error().is_none() {
            s.note_error(code, call.seq);
        }
    }
    if let Some(facts) = call.device.cudnn_libraries(rules::Scope::All) {
        let probe =
            matches!(status, cuda::CUDNN_INCOMPATIBLE_CUDART | cuda::CUDNN_INCOMPATIBLE_CUDA_DRIVER).then(|| call.device.probe_driver(s.device_count()));
        let (runtime, driver) = probe.map_or((None, None), |p| (p.runtime_version, p.driver_version));
        if let Some(cause) = rules::explain(status, &facts, runtime, driver) {
            fault.message.push_str(&format!(" [{}]", cause.message));
            fault.cause = Some(cause);
        }
    }
    call.report(fault);
}

/// What every cuDNN fault carries: the handle, its stream, the status's sub-code and cuDNN's
/// own message.
fn describe(fault: &mut Fault, status: c_int, handle: u64, stream: Option<u64>, message: Option<String>) {
    if handle != 0 {
        fault.args.insert("handle", Arg::Address(handle));
    }
    if let Some(stream) = stream {
        fault.stream = Some(hex(stream));
    }
    if status > 0 {
        let (category, sub) = cuda::cudnn_status_parts(status);
        fault.args.insert("category", i64::from(category));
        fault.args.insert("sub_code", i64::from(sub));
    }
    if let Some(message) = message {
        fault.args.insert("cudnn_message", message);
    }
}

/// cuDNN's last error message, read for a fault. Reading it clears it: it is kept, by thread,
/// for the program's own next `cudnnGetLastErrorString` (`get_last_error_string`).
fn take_message(call: &Call<'_, c_int>) -> Option<String> {
    let message = call.device.cudnn_last_error()?;
    let thread = call.caller.thread_id();
    let mut kept = call.session.cudnn_messages.lock();
    kept.retain(|(t, _)| *t != thread);
    // One per thread, for the few threads that fail at once.
    if kept.len() >= 64 {
        kept.remove(0);
    }
    kept.push((thread, message.clone()));
    Some(message)
}

/// cudnnGetLastErrorString: what cuDNN says; when it has nothing because the guard read the
/// message first (at the fault it reported), the message the guard read.
pub(crate) fn get_last_error_string(call: &Call<'_, ()>, message: *mut std::ffi::c_char, max_size: usize) {
    call.forward();
    let thread = call.caller.thread_id();
    let kept = {
        let mut kept = call.session.cudnn_messages.lock();
        let at = kept.iter().position(|(t, _)| *t == thread);
        at.map(|i| kept.remove(i).1)
    };
    let Some(kept) = kept else { return };
    if message.is_null() || max_size == 0 {
        return;
    }
    // cuDNN's own answer wins when it has one (an error newer than the guard's read).
    let mut first = [0u8; 1];
    if !call.device.read_parameter(message as u64, &mut first) || first[0] != 0 {
        return;
    }
    let bytes = kept.as_bytes();
    let n = bytes.len().min(max_size - 1);
    let mut out = Vec::with_capacity(n + 1);
    out.extend_from_slice(&bytes[..n]);
    out.push(0);
    call.device.write_parameter(message as u64, &out);
}
