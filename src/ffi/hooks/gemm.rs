//! The cuBLAS GEMM hooks: decode each variant's C arguments into a `MatmulCall`, run the
//! checks around the real call, and turn what they found into a fault. Generic over the
//! integer width, so each `_64` variant shares its handler with the `int` one.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};

use super::Handle;
use crate::check::matmul::{MatmulCall, MatmulCheck, Members, OperandReport, OperandSpec, Role, MAX_OPERANDS};
use crate::check::Device;
use crate::config::OnFault;
use crate::cuda::{self, ComputeType, MathMode, Operation, PointerMode};
use crate::ffi::device::RealDevice;
use crate::ffi::{lifecycle, process};
use crate::recorder::CallArgs;
use crate::scan::DType;
use crate::session::{self, Session};
use crate::trace::{hex, AllocationRecord, FaultKind, HandleRecord, Operand, Position};
use crate::validate::{self, GemmArgs};

type Ptr = *const c_void;

thread_local! {
    /// Reused for every scan on this thread: a scan allocates once per thread, not per call.
    static SCAN_BUFFER: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

pub fn with_scan_buffer<R>(f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    // During thread teardown the slot is gone: the scan then uses a one-off buffer.
    let mut buf = SCAN_BUFFER.try_with(Cell::take).unwrap_or_default();
    let result = f(&mut buf);
    let _ = SCAN_BUFFER.try_with(|slot| slot.set(buf));
    result
}

/// How the operands of a cuBLAS GEMM are batched.
#[derive(Clone, Copy)]
enum Batch {
    Single,
    Strided { count: i64, a: i64, b: i64, c: i64 },
    Arrays { count: i64 },
}

/// Extra arguments of the Ex and batched forms, recorded in a fault's `args`.
#[derive(Clone, Copy, Default)]
pub struct ExArgs {
    pub types: Option<(DType, DType, DType)>,
    pub compute: Option<ComputeType>,
    pub algo: Option<i32>,
    pub batch_count: Option<i64>,
    pub strides: Option<(i64, i64, i64)>,
    /// cublasLt: the epilogue, the bias pointer, the workspace (pointer, bytes).
    pub epilogue: Option<u32>,
    pub bias: Option<u64>,
    pub workspace: Option<(u64, u64)>,
}

/// A cuBLAS GEMM's arguments, all widened to 64 bits.
#[derive(Clone, Copy)]
struct Gemm {
    handle: Handle,
    transa: c_int,
    transb: c_int,
    m: i64,
    n: i64,
    k: i64,
    alpha: Ptr,
    a: Ptr,
    lda: i64,
    b: Ptr,
    ldb: i64,
    beta: Ptr,
    c: Ptr,
    ldc: i64,
}

impl Gemm {
    fn args(&self, batch_count: i64) -> GemmArgs {
        GemmArgs {
            transa: Operation::decode(self.transa),
            transb: Operation::decode(self.transb),
            m: self.m,
            n: self.n,
            k: self.k,
            lda: self.lda,
            ldb: self.ldb,
            ldc: self.ldc,
            alpha_is_null: self.alpha.is_null(),
            beta_is_null: self.beta.is_null(),
            batch_count,
        }
    }

    fn record(&self) -> CallArgs {
        CallArgs::Gemm {
            transa: self.transa,
            transb: self.transb,
            m: self.m,
            n: self.n,
            k: self.k,
            lda: self.lda,
            ldb: self.ldb,
            ldc: self.ldc,
        }
    }

    /// The call for the checks: types (A/B/C and scale), an optional compute type, a batch form.
    fn describe(&self, types: (DType, DType, DType), scalar: DType, compute: Option<ComputeType>, batch: Batch) -> MatmulCall {
        let count = match batch {
            Batch::Single => 1,
            Batch::Strided { count, .. } | Batch::Arrays { count } => count,
        };
        let args = self.args(count);
        let mut problem = validate::check_gemm_args(&args).map(|p| p.message());
        if problem.is_none() {
            if let Some(compute) = compute {
                problem = validate::check_type_combination(compute, types.0, types.1, types.2);
            }
        }
        let members = |stride: i64| match batch {
            Batch::Single => Members::One,
            Batch::Strided { count, .. } => Members::Strided { count: count.max(0) as u64, stride },
            Batch::Arrays { count } => Members::Array { count: count.max(0) as u64 },
        };
        let (sa, sb, sc) = match batch {
            Batch::Strided { a, b, c, .. } => (a, b, c),
            _ => (0, 0, 0),
        };
        let spec = |name, ptr: Ptr, shape, dtype, stride, role| OperandSpec {
            name,
            ptr: ptr as u64,
            shape,
            dtype,
            members: members(stride),
            role,
        };
        let mut operands = [None; MAX_OPERANDS];
        operands[0] = Some(spec("A", self.a, validate::shape_of_a(&args), types.0, sa, Role::Input));
        operands[1] = Some(spec("B", self.b, validate::shape_of_b(&args), types.1, sb, Role::Input));
        operands[2] = Some(spec("C", self.c, validate::shape_of_c(&args), types.2, sc, Role::Accumulator));
        MatmulCall {
            handle: self.handle as u64,
            lt: false,
            argument_problem: problem,
            scalar,
            alpha: self.alpha as u64,
            beta: self.beta as u64,
            pointer_mode: None,
            stream: None,
            reduced_precision_compute: compute.is_some_and(|c| c.reduced_precision()),
            operands,
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn gemm<I: Into<i64>>(
    handle: Handle,
    transa: c_int,
    transb: c_int,
    m: I,
    n: I,
    k: I,
    alpha: Ptr,
    a: Ptr,
    lda: I,
    b: Ptr,
    ldb: I,
    beta: Ptr,
    c: Ptr,
    ldc: I,
) -> Gemm {
    Gemm {
        handle,
        transa,
        transb,
        m: m.into(),
        n: n.into(),
        k: k.into(),
        alpha,
        a,
        lda: lda.into(),
        b,
        ldb: ldb.into(),
        beta,
        c,
        ldc: ldc.into(),
    }
}

fn typed(s: &Session, hook: usize, forward: &dyn Fn() -> c_int, g: Gemm, dtype: DType, batch: Batch) -> c_int {
    let call = g.describe((dtype, dtype, dtype), dtype, None, batch);
    let ex = match batch {
        Batch::Single => ExArgs::default(),
        Batch::Strided { count, a, b, c } => ExArgs { batch_count: Some(count), strides: Some((a, b, c)), ..Default::default() },
        Batch::Arrays { count } => ExArgs { batch_count: Some(count), ..Default::default() },
    };
    run(s, hook, forward, &call, g.record(), ex)
}

#[allow(clippy::too_many_arguments)]
fn ex(s: &Session, hook: usize, forward: &dyn Fn() -> c_int, g: Gemm, types: (i32, i32, i32), compute: i32, algo: i32, batch: Batch) -> c_int {
    let types = (DType::from_cuda(types.0), DType::from_cuda(types.1), DType::from_cuda(types.2));
    let compute = ComputeType::decode(compute);
    let call = g.describe(types, validate::scale_type(compute), Some(compute), batch);
    let mut extra = ExArgs { types: Some(types), compute: Some(compute), algo: Some(algo), ..Default::default() };
    match batch {
        Batch::Single => {}
        Batch::Strided { count, a, b, c } => {
            extra.batch_count = Some(count);
            extra.strides = Some((a, b, c));
        }
        Batch::Arrays { count } => extra.batch_count = Some(count),
    }
    run(s, hook, forward, &call, g.record(), extra)
}

macro_rules! typed_gemm {
    ($name:ident, $dtype:expr) => {
        #[allow(clippy::too_many_arguments)]
        pub fn $name<I: Into<i64>>(
            s: &Session, hook: usize, forward: &dyn Fn() -> c_int, handle: Handle, transa: c_int, transb: c_int,
            m: I, n: I, k: I, alpha: Ptr, a: Ptr, lda: I, b: Ptr, ldb: I, beta: Ptr, c: Ptr, ldc: I,
        ) -> c_int {
            typed(s, hook, forward, gemm(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), $dtype, Batch::Single)
        }
    };
}
typed_gemm!(sgemm, DType::F32);
typed_gemm!(dgemm, DType::F64);
typed_gemm!(hgemm, DType::F16);

macro_rules! typed_strided {
    ($name:ident, $dtype:expr) => {
        #[allow(clippy::too_many_arguments)]
        pub fn $name<I: Into<i64>>(
            s: &Session, hook: usize, forward: &dyn Fn() -> c_int, handle: Handle, transa: c_int, transb: c_int,
            m: I, n: I, k: I, alpha: Ptr, a: Ptr, lda: I, stride_a: i64, b: Ptr, ldb: I, stride_b: i64, beta: Ptr,
            c: Ptr, ldc: I, stride_c: i64, batch_count: I,
        ) -> c_int {
            let batch = Batch::Strided { count: batch_count.into(), a: stride_a, b: stride_b, c: stride_c };
            typed(s, hook, forward, gemm(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), $dtype, batch)
        }
    };
}
typed_strided!(sgemm_strided, DType::F32);
typed_strided!(dgemm_strided, DType::F64);
typed_strided!(hgemm_strided, DType::F16);

#[allow(clippy::too_many_arguments)]
pub fn sgemm_batched<I: Into<i64>>(
    s: &Session, hook: usize, forward: &dyn Fn() -> c_int, handle: Handle, transa: c_int, transb: c_int, m: I, n: I,
    k: I, alpha: Ptr, a: Ptr, lda: I, b: Ptr, ldb: I, beta: Ptr, c: Ptr, ldc: I, batch_count: I,
) -> c_int {
    let batch = Batch::Arrays { count: batch_count.into() };
    typed(s, hook, forward, gemm(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), DType::F32, batch)
}

#[allow(clippy::too_many_arguments)]
pub fn gemm_ex<I: Into<i64>>(
    s: &Session, hook: usize, forward: &dyn Fn() -> c_int, handle: Handle, transa: c_int, transb: c_int, m: I, n: I,
    k: I, alpha: Ptr, a: Ptr, a_type: c_int, lda: I, b: Ptr, b_type: c_int, ldb: I, beta: Ptr, c: Ptr, c_type: c_int,
    ldc: I, compute: c_int, algo: c_int,
) -> c_int {
    let g = gemm(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    ex(s, hook, forward, g, (a_type, b_type, c_type), compute, algo, Batch::Single)
}

#[allow(clippy::too_many_arguments)]
pub fn gemm_strided_ex<I: Into<i64>>(
    s: &Session, hook: usize, forward: &dyn Fn() -> c_int, handle: Handle, transa: c_int, transb: c_int, m: I, n: I,
    k: I, alpha: Ptr, a: Ptr, a_type: c_int, lda: I, stride_a: i64, b: Ptr, b_type: c_int, ldb: I, stride_b: i64,
    beta: Ptr, c: Ptr, c_type: c_int, ldc: I, stride_c: i64, batch_count: I, compute: c_int, algo: c_int,
) -> c_int {
    let g = gemm(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    let batch = Batch::Strided { count: batch_count.into(), a: stride_a, b: stride_b, c: stride_c };
    ex(s, hook, forward, g, (a_type, b_type, c_type), compute, algo, batch)
}

#[allow(clippy::too_many_arguments)]
pub fn gemm_batched_ex<I: Into<i64>>(
    s: &Session, hook: usize, forward: &dyn Fn() -> c_int, handle: Handle, transa: c_int, transb: c_int, m: I, n: I,
    k: I, alpha: Ptr, a: Ptr, a_type: c_int, lda: I, b: Ptr, b_type: c_int, ldb: I, beta: Ptr, c: Ptr, c_type: c_int,
    ldc: I, batch_count: I, compute: c_int, algo: c_int,
) -> c_int {
    let g = gemm(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    let batch = Batch::Arrays { count: batch_count.into() };
    ex(s, hook, forward, g, (a_type, b_type, c_type), compute, algo, batch)
}

/// The checks around one matrix multiply, for cuBLAS and cublasLt alike.
pub fn run(s: &Session, hook: usize, forward: &dyn Fn() -> c_int, call: &MatmulCall, record: CallArgs, extra: ExArgs) -> c_int {
    let seq = s.begin(hook);
    let known = s.known_error();
    let mut checks = s.config.checks;
    let site = match record {
        CallArgs::Gemm { m, n, k, .. } => (hook as u64) ^ (m as u64) << 8 ^ (n as u64) << 24 ^ (k as u64) << 40,
        _ => hook as u64,
    };
    let scan_started = if checks.nan { process::now_ns() } else { 0 };
    checks.nan = checks.nan && s.should_scan(site, scan_started);
    let device = RealDevice { scan_on_device: s.config.device_scan };
    let handles = if call.lt { &s.lt_handles } else { &s.handles };
    let body = |buf: &mut Vec<u8>| {
        let mut check = MatmulCheck::before(call, checks, s.config.scan_bytes, handles, &s.allocations, known, &device, buf);
        // A fault found before the call is on disk before the call runs: a call with bad
        // pointers may well crash the process inside the library.
        let early = check.finding.is_some();
        if early {
            finish(s, hook, seq, &check, -1, record, extra, &device, Stage::BeforeCall); // aborts in abort mode
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
        let now = process::now_ns();
        if checks.nan {
            // The whole guarded call counts against the budget: scans dominate it.
            s.add_scan_time(now.saturating_sub(scan_started));
        }
        s.record_scanned_call(hook, seq, returned, process::thread_id(), now, record, checks.nan);
        let stage = if early { Stage::Amend } else { Stage::AfterCall };
        finish(s, hook, seq, &check, returned, record, extra, &device, stage);
        returned
    };
    // Only scans use the buffer: without them the thread-local is not touched at all.
    if checks.nan {
        with_scan_buffer(body)
    } else {
        body(&mut Vec::new())
    }
}

/// When a fault is written: before the call (status not known yet), amended after it, or
/// found after it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    BeforeCall,
    Amend,
    AfterCall,
}

#[allow(clippy::too_many_arguments)]
fn finish(
    s: &Session,
    hook: usize,
    seq: u64,
    check: &MatmulCheck<'_>,
    returned: i32,
    record: CallArgs,
    extra: ExArgs,
    device: &dyn Device,
    stage: Stage,
) {
    let Some(finding) = check.finding.clone() else { return };
    let api = super::hook_name(hook);
    let status_name = if returned < 0 { "not returned (the fault was recorded before the call ran)" } else { cuda::cublas_status_name(returned) };
    let mut fault = lifecycle::new_fault(s, seq, api, finding, returned, status_name);
    let state = check.handle.unwrap_or_default();
    let stream = check.call.stream.unwrap_or(state.stream);
    fault.stream = Some(hex(stream));
    let math = MathMode(state.math_mode);
    let reduced = math.uses_tf32() || check.call.reduced_precision_compute;
    if !check.call.lt {
        fault.handle = Some(HandleRecord {
            ptr: hex(check.call.handle),
            math_mode: math.label(),
            pointer_mode: PointerMode::decode(state.pointer_mode).label(),
            stream: hex(state.stream),
            reduced_precision: reduced,
        });
    }
    if math.uses_tf32() && !check.call.lt && matches!(fault.kind, FaultKind::NonfiniteOutput) {
        fault.message.push_str(" [the handle uses TF32 tensor-op math: float32 inputs are rounded to 10 mantissa bits]");
    }
    fault.args = args_map(s, &record, extra, check, device);
    fault.operands = check.operands.iter().flatten().map(operand_record).collect();
    match stage {
        Stage::Amend => lifecycle::amend(s, fault),
        Stage::BeforeCall | Stage::AfterCall => lifecycle::report(s, fault),
    }
}

fn args_map(s: &Session, record: &CallArgs, extra: ExArgs, check: &MatmulCheck<'_>, device: &dyn Device) -> BTreeMap<String, serde_json::Value> {
    use serde_json::json;
    let mut map = session::args_map(record);
    let host_mode = check.call.pointer_mode.or(check.handle.map(|h| h.pointer_mode)) == Some(0);
    for (name, ptr) in [("alpha", check.call.alpha), ("beta", check.call.beta)] {
        let value = match check.call.scalar.size() {
            Some(size) if host_mode && ptr != 0 && s.allocations.containing(ptr).is_none() => {
                let mut bytes = [0u8; 8];
                device.read_host(ptr, &mut bytes[..size as usize]).then(|| scalar_json(check.call.scalar, bytes))
            }
            _ => None,
        };
        map.insert(name.to_string(), value.unwrap_or_else(|| json!(hex(ptr))));
    }
    map.insert("handle".into(), json!(hex(check.call.handle)));
    if let Some((a, b, c)) = extra.types {
        map.insert("Atype".into(), json!(a.name()));
        map.insert("Btype".into(), json!(b.name()));
        map.insert("Ctype".into(), json!(c.name()));
    }
    if let Some(compute) = extra.compute {
        map.insert("computeType".into(), json!(compute.name()));
    }
    if let Some(algo) = extra.algo {
        map.insert("algo".into(), json!(algo));
    }
    if let Some(count) = extra.batch_count {
        map.insert("batchCount".into(), json!(count));
    }
    if let Some(epilogue) = extra.epilogue {
        map.insert("epilogue".into(), json!(crate::check::lt::epilogue_name(epilogue)));
    }
    if let Some(bias) = extra.bias {
        map.insert("bias".into(), json!(hex(bias)));
    }
    if let Some((ptr, bytes)) = extra.workspace {
        map.insert("workspace".into(), json!(hex(ptr)));
        map.insert("workspaceSizeInBytes".into(), json!(bytes));
    }
    if let Some((a, b, c)) = extra.strides {
        map.insert("strideA".into(), json!(a));
        map.insert("strideB".into(), json!(b));
        map.insert("strideC".into(), json!(c));
    }
    map
}

fn scalar_json(dtype: DType, bytes: [u8; 8]) -> serde_json::Value {
    use serde_json::json;
    match dtype {
        DType::F64 => json!(f64::from_le_bytes(bytes)),
        DType::F32 => json!(f32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])),
        DType::I32 => json!(i32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])),
        DType::F16 => json!(format!("f16 bits {:#06x}", u16::from_le_bytes([bytes[0], bytes[1]]))),
        _ => json!(null),
    }
}

fn operand_record(op: &OperandReport<'_>) -> Operand {
    let spec = op.spec;
    let (batch_count, stride) = match spec.members {
        crate::check::matmul::Members::One => (None, None),
        crate::check::matmul::Members::Strided { count, stride } => (Some(count), Some(stride)),
        crate::check::matmul::Members::Array { count } => (Some(count), None),
    };
    Operand {
        name: spec.name.to_string(),
        ptr: hex(spec.ptr),
        dtype: spec.dtype.name(),
        rows: spec.shape.rows,
        cols: spec.shape.cols,
        ld: spec.shape.ld,
        bytes: op.extent,
        allocation: op.allocation.map(|a| AllocationRecord { base: hex(a.base), size: a.size }),
        scanned: op.scan.is_some(),
        sampled: op.scan.is_some_and(|s| s.sampled),
        nan: op.scan.map(|s| s.nan),
        inf: op.scan.map(|s| s.inf),
        first_nonfinite: op.scan.and_then(|s| s.first_nonfinite).map(|(row, col)| Position { row, col }),
        batch_count,
        stride,
        pointer_array: matches!(spec.members, crate::check::matmul::Members::Array { .. }),
        bad_member: op.bad_member,
    }
}
