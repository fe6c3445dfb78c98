//! CUDA graphs: a call captured into a graph runs at each launch of the graph, not at its
//! capture. Its operands are kept at the capture (`operand_call`), follow the capture to its
//! graph (`cudaStreamEndCapture`) and the graph to its executables (`cudaGraphInstantiate`;
//! `cudaGraphExecUpdate` gives an executable its new graph's),
//! and with CUBLASGUARD_SYNC=gemm they are scanned after each launch: a NaN/Inf there is a
//! fault on the launch, naming the captured call, its operand and element, and the line where
//! the call was captured.

use std::ffi::{c_int, c_void};

use super::Call;
use crate::check::operand_call::scan_on_stream;
use crate::check::Finding;
use crate::cuda;
use crate::recorder::CallArgs;
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

/// After a launch of `exec` on `stream` that succeeded (CUBLASGUARD_SYNC=gemm): the kept
/// operands of its captured calls, scanned once the launch's work ran; the first non-finite
/// one is a fault on this launch.
pub(crate) fn scan_after_launch(call: &Call<'_, c_int>, exec: u64, stream: u64) {
    let s = call.session;
    if !s.config.checks.nan || !s.config.sync.synchronises_calls() {
        return;
    }
    let Some(kept) = s.graphs.for_launch(exec) else { return };
    // A launch captured into another graph runs later; and a synchronisation that reports an
    // error leaves it to the checks that report errors.
    if call.device.is_capturing(stream) != Ok(false) || call.device.synchronize(stream) != 0 {
        return;
    }
    let mut found: Option<(KeptOperand, crate::scan::MatrixScan)> = None;
    call.device.with_scan_buffer(&mut |buf| {
        found = kept.iter().find_map(|op| {
            let scan = scan_on_stream(call.device, op.addr, op.shape, op.dtype, stream, buf, s.config.scan_bytes)?;
            (scan.nan > 0 || scan.inf > 0).then_some((*op, scan))
        });
    });
    let Some((op, scan)) = found else { return };
    let kind = if op.role.written() { FaultKind::NonfiniteOutput } else { FaultKind::NonfiniteInput };
    let at = scan.first_nonfinite.map(|(row, col)| format!(", first at row {row}, col {col}")).unwrap_or_default();
    let message = format!(
        "{} of {} #{} (captured into this graph, run by this launch) holds {} NaN and {} Inf after the launch{at}",
        op.name,
        s.hook_name(op.hook as usize),
        op.seq,
        scan.nan,
        scan.inf
    );
    let mut fault = call.fault(Finding::new(kind, message), cuda::CUDA_SUCCESS, "cudaSuccess");
    fault.args = CallArgs::Graph { exec, stream }.to_args();
    fault.stream = Some(hex(stream));
    // The captured call's own line: the launch's stack says only where the graph was launched.
    fault.backtrace = call.outlet.describe_call_site(&op.site);
    call.report(fault);
}
