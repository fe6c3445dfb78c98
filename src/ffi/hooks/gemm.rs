//! The GEMM hooks: decode the C arguments into a `GemmCall`, run the checks around the real
//! call, and turn what they found into a fault.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::ffi::c_int;

use super::Handle;
use crate::check::gemm::{GemmCall, GemmCheck};
use crate::check::Device;
use crate::config::OnFault;
use crate::cuda::{self, MathMode, PointerMode};
use crate::ffi::device::RealDevice;
use crate::ffi::{lifecycle, process};
use crate::recorder::CallArgs;
use crate::scan::DType;
use crate::session::{self, Session};
use crate::trace::{hex, AllocationRecord, FaultKind, HandleRecord, Operand, Position};

thread_local! {
    /// Reused for every scan on this thread: a scan allocates once per thread, not per call.
    static SCAN_BUFFER: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

fn with_scan_buffer<R>(f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    // During thread teardown the slot is gone: the scan then uses a one-off buffer.
    let mut buf = SCAN_BUFFER.try_with(Cell::take).unwrap_or_default();
    let result = f(&mut buf);
    let _ = SCAN_BUFFER.try_with(|slot| slot.set(buf));
    result
}

#[allow(clippy::too_many_arguments)]
pub fn sgemm(
    s: &Session,
    hook: usize,
    forward: &dyn Fn() -> c_int,
    handle: Handle,
    transa: c_int,
    transb: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: *const f32,
    a: *const f32,
    lda: c_int,
    b: *const f32,
    ldb: c_int,
    beta: *const f32,
    c: *mut f32,
    ldc: c_int,
) -> c_int {
    let call = GemmCall {
        handle: handle as u64,
        args: GemmCall::gemm_args(
            transa,
            transb,
            m.into(),
            n.into(),
            k.into(),
            lda.into(),
            ldb.into(),
            ldc.into(),
            alpha as u64,
            beta as u64,
        ),
        raw_transa: transa,
        raw_transb: transb,
        dtype: DType::F32,
        scalar: DType::F32,
        alpha: alpha as u64,
        beta: beta as u64,
        a: a as u64,
        b: b as u64,
        c: c as u64,
    };
    run(s, hook, forward, call)
}

/// The checks around one GEMM of any type.
pub fn run(s: &Session, hook: usize, forward: &dyn Fn() -> c_int, call: GemmCall) -> c_int {
    let seq = s.begin(hook);
    let known = s.known_error();
    let checks = s.config.checks;
    let device = RealDevice;
    with_scan_buffer(|buf| {
        let mut check = GemmCheck::before(call, checks, s.config.scan_bytes, &s.handles, &s.allocations, known, &device, buf);
        if check.finding.is_some() && s.config.on_fault == OnFault::Abort {
            finish(s, hook, seq, &mut check, -1, &device); // reports, then aborts
        }
        let refused = check.refusal(s.config.on_fault);
        let (status, forwarded) = match refused {
            Some(status) => (status, false),
            None => (forward(), true),
        };
        if let Some(code) = check.after(status, forwarded, checks, s.config.scan_bytes, known, &device, buf) {
            s.note_error(code, seq);
        }
        let produced_here = matches!(
            check.finding.as_ref().map(|f| f.kind),
            Some(FaultKind::AsyncError | FaultKind::NonfiniteOutput)
        );
        let returned = if forwarded && s.config.on_fault == OnFault::Error && !check.found_before && produced_here {
            cuda::CUBLAS_EXECUTION_FAILED
        } else {
            status
        };
        finish(s, hook, seq, &mut check, returned, &device);
        returned
    })
}

fn finish(s: &Session, hook: usize, seq: u64, check: &mut GemmCheck, returned: i32, device: &dyn Device) {
    let a = check.call.args;
    let args = CallArgs::Gemm {
        transa: check.call.raw_transa,
        transb: check.call.raw_transb,
        m: a.m,
        n: a.n,
        k: a.k,
        lda: a.lda,
        ldb: a.ldb,
        ldc: a.ldc,
    };
    s.record_call(hook, seq, returned, process::thread_id(), process::now_ns(), args);
    let Some(finding) = check.finding.take() else { return };
    let api = super::HOOK_NAMES.get(hook).copied().unwrap_or("gemm");
    let status_name = if returned < 0 { "not returned" } else { cuda::cublas_status_name(returned) };
    let mut fault = lifecycle::new_fault(s, seq, api, finding, returned, status_name);
    let state = check.handle.unwrap_or_default();
    let math = MathMode(state.math_mode);
    fault.stream = Some(hex(state.stream));
    fault.handle = Some(HandleRecord {
        ptr: hex(check.call.handle),
        math_mode: math.label(),
        pointer_mode: PointerMode::decode(state.pointer_mode).label(),
        stream: hex(state.stream),
        reduced_precision: math.uses_tf32(),
    });
    if math.uses_tf32() && matches!(fault.kind, FaultKind::NonfiniteOutput) {
        fault.message.push_str(" [the handle uses TF32 tensor-op math: float32 inputs are rounded to 10 mantissa bits]");
    }
    fault.args = gemm_args_map(s, &args, check, device);
    fault.operands = check.operands.iter().map(operand_record).collect();
    lifecycle::report(s, fault);
}

fn gemm_args_map(s: &Session, args: &CallArgs, check: &GemmCheck, device: &dyn Device) -> BTreeMap<String, serde_json::Value> {
    let mut map = session::args_map(args);
    let host_mode = check.handle.map(|h| h.pointer_mode) == Some(0);
    for (name, ptr) in [("alpha", check.call.alpha), ("beta", check.call.beta)] {
        let value = match check.call.scalar.size() {
            Some(4) if host_mode && ptr != 0 && s.allocations.containing(ptr).is_none() => {
                let mut bytes = [0u8; 4];
                device.read_host(ptr, &mut bytes).then(|| serde_json::json!(f32::from_le_bytes(bytes)))
            }
            _ => None,
        };
        map.insert(name.to_string(), value.unwrap_or_else(|| serde_json::json!(hex(ptr))));
    }
    map.insert("handle".into(), serde_json::json!(hex(check.call.handle)));
    map
}

fn operand_record(op: &crate::check::gemm::OperandReport) -> Operand {
    Operand {
        name: op.name.to_string(),
        ptr: hex(op.ptr),
        dtype: op.dtype.name(),
        rows: op.shape.rows,
        cols: op.shape.cols,
        ld: op.shape.ld,
        bytes: op.extent,
        allocation: op.allocation.map(|a| AllocationRecord { base: hex(a.base), size: a.size }),
        scanned: op.scan.is_some(),
        sampled: op.scan.is_some_and(|s| s.sampled),
        nan: op.scan.map(|s| s.nan),
        inf: op.scan.map(|s| s.inf),
        first_nonfinite: op.scan.and_then(|s| s.first_nonfinite).map(|(row, col)| Position { row, col }),
    }
}
