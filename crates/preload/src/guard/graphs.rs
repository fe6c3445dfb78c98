//! CUDA graphs: a call captured into a graph runs at each launch of the graph, not at its
//! capture. Its operands are kept at the capture (`operand_call`), follow the capture to its
//! graph (`cudaStreamEndCapture`) and the graph to its executables (`cudaGraphInstantiate`;
//! `cudaGraphExecUpdate` gives an executable its new graph's),
//! and they are scanned after each launch (under CUBLASGUARD_SYNC=deferred, stream-ordered and
//! judged later, as a call's deferred verdict is): a NaN/Inf there is a fault on the launch,
//! naming the captured call, its operand and element, and the line where the call was
//! captured.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use super::verdicts::Recording;
use super::{Call, Hook};
use crate::check::operand_call::{scan_on_stream, scan_staging_need, scanned_by_kernel, Members, STAGING_BASE};
use crate::check::{Device, Finding};
use crate::config::{OnFault, SyncMode};
use crate::cuda;
use crate::recorder::CallArgs;
use crate::scan::MatrixScan;
use crate::session::graphs::KeptOperand;
use crate::trace::{hex, FaultKind};

/// cudaStreamEndCapture: what the capture kept goes to the graph it ended as (nothing, when it
/// failed).
pub(crate) fn end_capture(call: &Call<'_, c_int>, stream: *mut c_void, graph: *mut *mut c_void) -> c_int {
    let status = call.forward();
    call.record(status, CallArgs::Stream { stream: stream as u64 });
    let made = if status == cuda::CUDA_SUCCESS { super::parameters::written_u64(call, graph as u64).unwrap_or(0) } else { 0 };
    call.session.graphs.end_capture(stream as u64, made);
    status
}

/// cudaGraphInstantiate, cudaGraphInstantiateWithFlags (PyTorch's): the executable keeps what
/// its graph kept.
pub(crate) fn instantiate(call: &Call<'_, c_int>, exec: *mut *mut c_void, graph: *mut c_void, _flags: u64) -> c_int {
    let status = call.forward();
    call.record(status, CallArgs::None);
    let made = if status == cuda::CUDA_SUCCESS { super::parameters::written_u64(call, exec as u64).unwrap_or(0) } else { 0 };
    call.session.graphs.instantiate(graph as u64, made);
    status
}

/// cudaGraphExecUpdate: an executable updated to `graph` runs `graph`'s calls from now on, and
/// keeps what `graph` kept (nothing, if it kept nothing); a refused update changes nothing.
pub(crate) fn exec_update(call: &Call<'_, c_int>, exec: *mut c_void, graph: *mut c_void, _info: *mut c_void) -> c_int {
    let status = call.forward();
    call.record(status, CallArgs::None);
    if status == cuda::CUDA_SUCCESS {
        call.session.graphs.instantiate(graph as u64, exec as u64);
    }
    status
}

/// cudaGraphExecKernelNodeSetParams, cudaGraphExecNodeSetParams and the driver's: a node of
/// `exec` now runs with arguments the guard did not see (other operands, perhaps), so what its
/// captures kept is forgotten: its launches are no longer scanned, rather than blamed for
/// memory they may no longer read.
pub(crate) fn node_changed<P>(call: &Call<'_, c_int>, exec: *mut c_void, _node: *mut c_void, _params: P) -> c_int {
    let status = call.forward();
    call.record(status, CallArgs::None);
    if status == cuda::CUDA_SUCCESS {
        call.session.graphs.forget(exec as u64);
    }
    status
}

/// cudaGraphExecDestroy, cuGraphExecDestroy: the executable's address may be given again.
pub(crate) fn exec_destroyed(call: &Call<'_, c_int>, exec: *mut c_void) -> c_int {
    let status = call.forward();
    call.record(status, CallArgs::None);
    if status == cuda::CUDA_SUCCESS {
        call.session.graphs.forget(exec as u64);
    }
    status
}

/// After a launch of `exec` on `stream` that succeeded: the kept operands of its captured
/// calls are scanned once the launch's work ran, and the first non-finite one is a fault on
/// this launch. Under CUBLASGUARD_SYNC=deferred the scans are queued on the stream after the
/// launch and judged when they land, as a call's deferred verdict is; otherwise (or when the
/// staging region cannot take them, or the program needs the verdict now) the stream is
/// synchronised and they are read at once.
pub(crate) fn scan_after_launch(call: &Call<'_, c_int>, exec: u64, stream: u64) {
    let s = call.session;
    if !s.config.checks.nan {
        return;
    }
    let Some(kept) = s.graphs.for_launch(exec) else { return };
    // A launch captured into another graph runs later.
    if call.device.is_capturing(stream) != Ok(false) {
        return;
    }
    if may_wait(&s.config) && scan_later(call, exec, stream, &kept) {
        return;
    }
    // A synchronisation that reports an error leaves it to the checks that report errors.
    if call.device.synchronize(stream) != 0 {
        return;
    }
    let mut found = None;
    call.device.with_scan_buffer(&mut |buf| found = first_nonfinite(call.device, &kept, stream, buf, s.config.scan_bytes));
    if let Some(found) = found {
        report(call, exec, stream, &found, None);
    }
}

/// Whether a replay's verdict may wait, as a call's may (`verdicts::may_wait`): under
/// `deferred`, unless the program needs it at once (`ON_FAULT=error` or `abort`, origin mode).
fn may_wait(c: &crate::config::Config) -> bool {
    c.sync == SyncMode::Deferred && c.on_fault == OnFault::Continue && !c.origin_reads_operands()
}

/// What a replay's deferred verdict is judged from, besides its scans.
pub(super) struct ReplayVerdict {
    hook: Hook,
    exec: u64,
    stream: u64,
    kept: Arc<[KeptOperand]>,
    thread: u32,
    time_ns: u64,
    python: Option<super::KeptFrames>,
}

/// Queues the kept operands' scans on `stream` after the launch and keeps the launch for its
/// verdict; false when they could not all be queued (nothing is kept then).
fn scan_later(call: &Call<'_, c_int>, exec: u64, stream: u64, kept: &Arc<[KeptOperand]>) -> bool {
    let s = call.session;
    let on_device = s.scans_on_device();
    let need = kept.iter().fold(STAGING_BASE, |need, op| {
        let by_kernel = on_device && scanned_by_kernel(op.dtype);
        // A kernel's result lands once for each member scanned; a host scan's copies are
        // what `scan_staging_need` counts for the whole batch.
        let (members, each) = if by_kernel { (members(op, s.config.scan_bytes).count() as u64, 1) } else { (1, op.members.count()) };
        need.saturating_add(scan_staging_need(op.dtype, op.shape, each, by_kernel, s.config.scan_bytes).saturating_mul(members))
    });
    let Some(recording) = Recording::begin(call, stream, need) else { return false };
    recording.after_call();
    call.device.with_scan_buffer(&mut |buf| {
        for op in kept.iter() {
            for (_, addr, bytes) in members(op, s.config.scan_bytes) {
                scan_on_stream(&recording, addr, op.shape, op.dtype, stream, buf, bytes);
            }
        }
    });
    if recording.overflowed() {
        recording.abandon();
        return false;
    }
    recording.queue(call, || {
        Box::new(ReplayVerdict {
            hook: call.hook,
            exec,
            stream,
            kept: kept.clone(),
            thread: call.caller.thread_id(),
            time_ns: call.outlet.now_ns(),
            python: call.caller.python_frames_at_call(),
        })
    });
    true
}

/// Judges the launch `seq` once its scans landed (`replay` answers them), found at call
/// `found_at`.
pub(super) fn judge_replay<R: Copy>(call: &Call<'_, R>, replay: &dyn Device, seq: u64, v: &ReplayVerdict, found_at: u64, buf: &mut Vec<u8>) {
    let s = call.session;
    let Some(found) = first_nonfinite(replay, &v.kept, v.stream, buf, s.config.scan_bytes) else { return };
    let caller = super::verdicts::LateCaller::new(call.outlet, v.thread, v.python.clone(), found.op.site);
    let forward = || cuda::CUDA_SUCCESS;
    let launch = Call::judged_later(s, v.hook, seq, replay, call.outlet, &caller, &forward, call.memo);
    report(&launch, v.exec, v.stream, &found, Some((found_at, v.time_ns)));
}

/// The first kept operand that holds a NaN or an Inf, read through `device` in their order (a
/// batch's members in theirs), with the member that held it (a batch's) and what it held.
fn first_nonfinite(device: &dyn Device, kept: &[KeptOperand], stream: u64, buf: &mut Vec<u8>, scan_bytes: u64) -> Option<Found> {
    kept.iter().find_map(|op| {
        members(op, scan_bytes).find_map(|(member, addr, bytes)| {
            let scan = scan_on_stream(device, addr, op.shape, op.dtype, stream, buf, bytes)?;
            let batch = (op.members != Members::One).then_some((member, op.members.count()));
            (scan.nan > 0 || scan.inf > 0).then_some(Found { op: *op, batch, scan })
        })
    })
}

/// A kept operand found holding NaN/Inf after a launch.
struct Found {
    op: KeptOperand,
    /// A batch's member that held it, of how many.
    batch: Option<(u64, u64)>,
    scan: MatrixScan,
}

/// The members of `op` a replay's scan reads, as a call's own scan picks them (every one, or
/// an even sample of them within `scan_bytes`): each one's number, address and the bytes its
/// scan may copy. Both the queued scans and their verdict walk them, so they agree.
fn members(op: &KeptOperand, scan_bytes: u64) -> impl Iterator<Item = (u64, u64, u64)> {
    let (count, stride) = match op.members {
        Members::Strided { count, stride } => (count, stride),
        Members::One | Members::Array { .. } => (1, 0),
    };
    let elem = op.dtype.size().unwrap_or(1).max(1);
    let member_bytes = (op.shape.rows.max(0) as u64).saturating_mul(op.shape.cols.max(0) as u64).saturating_mul(elem);
    let (step, each) = if member_bytes.saturating_mul(count) <= scan_bytes || count == 0 {
        (1, scan_bytes)
    } else {
        let scanned = (scan_bytes / member_bytes.max(1)).clamp(1, count);
        (count.div_ceil(scanned), (scan_bytes / scanned).max(elem))
    };
    let addr = op.addr;
    (0..count).step_by(step.max(1) as usize).filter_map(move |b| {
        let offset = (b as i128) * (stride as i128) * (elem as i128);
        Some((b, u64::try_from(addr as i128 + offset).ok()?, each))
    })
}

/// The fault on the launch of `exec`: an operand of a captured call holds what was `found`.
/// `late`: judged after the launch, at call `found_at`, the launch made at `time_ns`.
fn report(call: &Call<'_, c_int>, exec: u64, stream: u64, found: &Found, late: Option<(u64, u64)>) {
    let s = call.session;
    let (op, scan) = (&found.op, &found.scan);
    let kind = if op.role.written() { FaultKind::NonfiniteOutput } else { FaultKind::NonfiniteInput };
    let member = found.batch.map(|(b, count)| format!(" (batch member {b} of {count})")).unwrap_or_default();
    let at = scan.first_nonfinite.map(|(row, col)| format!(", first at row {row}, col {col}")).unwrap_or_default();
    let message = format!(
        "{}{member} of {} #{} (captured into this graph, run by this launch) holds {} NaN and {} Inf after the launch{at}",
        op.name,
        s.hook_name(op.hook as usize),
        op.seq,
        scan.nan,
        scan.inf
    );
    let mut fault = call.fault(Finding::new(kind, message), cuda::CUDA_SUCCESS, "cudaSuccess");
    if let Some((found_at, time_ns)) = late {
        fault.found_at_seq = (found_at != call.seq).then_some(found_at);
        fault.time_ns = time_ns;
    }
    fault.args = CallArgs::Graph { exec, stream }.to_args();
    fault.stream = Some(hex(stream));
    // The captured call's own line: the launch's stack says only where the graph was launched.
    fault.backtrace = call.outlet.describe_call_site(&op.site);
    call.report(fault);
}
