//! The cuBLAS GEMM handlers: decode each variant's C arguments into a `OperandCall` and guard
//! it (`operand_call::guard`). Generic over the
//! integer width, so each `_64` variant shares its handler with the `int` one.

use std::ffi::{c_int, c_void};

use super::operand_call::{self, ExArgs};
use super::Call;
use crate::check::operand_call::{Members, OperandCall, OperandSpec, Role, MAX_OPERANDS};
use crate::cuda::{ComputeType, Operation, PointerMode};
use crate::recorder::CallArgs;
use crate::scan::DType;
use crate::session::Session;
use crate::state::{AllocationView, HandleLookup, ThreadMemo};
use crate::validate::{self, Containment, GemmArgs};

type Ptr = *const c_void;
type Handle = *mut c_void;

/// How the operands of a cuBLAS GEMM are batched.
#[derive(Clone, Copy)]
enum Batch {
    Single,
    Strided { count: i64, a: i64, b: i64, c: i64 },
    Arrays { count: i64 },
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
        CallArgs::Gemm { transa: self.transa, transb: self.transb, m: self.m, n: self.n, k: self.k, lda: self.lda, ldb: self.ldb, ldc: self.ldc }
    }

    /// The call for the checks: types (A/B/C and scale), an optional compute type, a batch form.
    fn describe(&self, types: (DType, DType, DType), scalar: DType, compute: Option<ComputeType>, batch: Batch) -> OperandCall {
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
            increment: None,
            triangle: None,
        };
        let mut operands = [None; MAX_OPERANDS];
        operands[0] = Some(spec("A", self.a, validate::shape_of_a(&args), types.0, sa, Role::Input));
        operands[1] = Some(spec("B", self.b, validate::shape_of_b(&args), types.1, sb, Role::Input));
        operands[2] = Some(spec("C", self.c, validate::shape_of_c(&args), types.2, sc, Role::Accumulator));
        OperandCall {
            handle: self.handle as u64,
            lt: false,
            argument_problem: problem,
            scalar,
            alpha: Some(self.alpha as u64),
            beta: Some(self.beta as u64),
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
    Gemm { handle, transa, transb, m: m.into(), n: n.into(), k: k.into(), alpha, a, lda: lda.into(), b, ldb: ldb.into(), beta, c, ldc: ldc.into() }
}

/// A plain GEMM of one element type (`cublas[SDHCZ]gemm[_v2][_64]`), as the hook layer's lean
/// path takes it (`lean` in the hook table): what the flight recorder keeps of it, and the
/// check that lets a clean one skip its handler while `args` and `bounds` are on.
#[derive(Clone, Copy)]
pub(crate) struct PlainGemm(DType);

pub(crate) const SGEMM: PlainGemm = PlainGemm(DType::F32);
pub(crate) const DGEMM: PlainGemm = PlainGemm(DType::F64);
pub(crate) const HGEMM: PlainGemm = PlainGemm(DType::F16);
pub(crate) const CGEMM: PlainGemm = PlainGemm(DType::C32);
pub(crate) const ZGEMM: PlainGemm = PlainGemm(DType::C64);

impl PlainGemm {
    /// What the flight recorder keeps of the call: the same arguments its handler records.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(crate) fn record<I: Into<i64>>(
        self,
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
    ) -> CallArgs {
        gemm(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc).record()
    }

    /// The call's arguments, widened, for `PlainCall::clean_before`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(crate) fn call<I: Into<i64>>(
        self,
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
    ) -> PlainCall {
        PlainCall(gemm(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), self.0)
    }
}

/// As `check_operand_pointers` for a single matrix: an operand of no extent is not looked at;
/// one whose extent overflows, or that is not inside one allocation, is left to the checks.
#[inline(always)]
fn inside(allocations: AllocationView<'_>, ptr: u64, shape: validate::StoredShape, dtype: DType) -> bool {
    match validate::operand_extent(shape, dtype.size().unwrap_or(1)) {
        Some(0) => true,
        Some(extent) => allocations.span_containing(ptr).is_some_and(|span| validate::containment(ptr, extent, span) == Containment::Inside),
        None => false,
    }
}

/// One plain GEMM's arguments and element type (`PlainGemm::call`).
#[derive(Clone, Copy)]
pub(crate) struct PlainCall(Gemm, DType);

impl PlainCall {
    /// With `args` and `bounds` the only checks of a matrix multiply on (`LeanGemm::Prechecked`):
    /// true when the checks before the call (`OperandCallCheck::check_before`, as the handler
    /// describes the call) would find nothing, so that a clean call can be forwarded and
    /// recorded as its handler would record it. What it cannot vouch for cheaply answers false
    /// and the call goes to its handler, which checks and reports it: a handle not alive, an
    /// argument rule broken, an operand or the handle's workspace not inside an allocation the
    /// guard saw, a scalar neither where the pointer mode wants it nor plainly elsewhere.
    /// `stack`: the calling thread's stack.
    pub(crate) fn clean_before(&self, session: &Session, memo: &ThreadMemo, stack: std::ops::Range<u64>) -> bool {
        let PlainCall(g, dtype) = self;
        let dtype = *dtype;
        let args = g.args(1);
        if validate::check_gemm_args(&args).is_some() {
            return false;
        }
        let HandleLookup::Alive(state) = session.matmul_handle_in(false, g.handle as u64, memo) else { return false };
        if !session.config.checks.bounds {
            return true;
        }
        let allocations = AllocationView::new(&session.allocations, memo);
        let (workspace, workspace_bytes) = state.workspace;
        let workspace = OperandSpec::workspace(workspace, workspace_bytes);
        if !(inside(allocations, g.a as u64, validate::shape_of_a(&args), dtype)
            && inside(allocations, g.b as u64, validate::shape_of_b(&args), dtype)
            && inside(allocations, g.c as u64, validate::shape_of_c(&args), dtype)
            && (workspace_bytes == 0 || inside(allocations, workspace.ptr, workspace.shape, workspace.dtype)))
        {
            return false;
        }
        // As `check_scalars`.
        let mode = PointerMode::decode(if state.pointer_mode >= 2 { 1 } else { state.pointer_mode });
        let tracked = |ptr: Ptr| !stack.contains(&(ptr as u64)) && allocations.span_containing(ptr as u64).is_some();
        match mode {
            PointerMode::Host => !tracked(g.alpha) && !tracked(g.beta),
            PointerMode::Device => tracked(g.alpha) && tracked(g.beta),
            PointerMode::Unknown(_) => true,
        }
    }
}

fn typed(call: &Call<'_, c_int>, g: Gemm, dtype: DType, batch: Batch) -> c_int {
    let ex = match batch {
        Batch::Single => ExArgs::default(),
        Batch::Strided { count, a, b, c } => ExArgs { batch_count: Some(count), strides: Some((a, b, c)), ..Default::default() },
        Batch::Arrays { count } => ExArgs { batch_count: Some(count), ..Default::default() },
    };
    operand_call::guard(call, || g.describe((dtype, dtype, dtype), dtype, None, batch), g.record(), ex)
}

#[allow(clippy::too_many_arguments)]
fn ex(call: &Call<'_, c_int>, g: Gemm, types: (i32, i32, i32), compute: i32, algo: i32, batch: Batch) -> c_int {
    let types = (DType::from_cuda(types.0), DType::from_cuda(types.1), DType::from_cuda(types.2));
    let compute = ComputeType::decode(compute);
    let mut extra = ExArgs { types: Some(types), compute: Some(compute), algo: Some(algo), ..Default::default() };
    match batch {
        Batch::Single => {}
        Batch::Strided { count, a, b, c } => {
            extra.batch_count = Some(count);
            extra.strides = Some((a, b, c));
        }
        Batch::Arrays { count } => extra.batch_count = Some(count),
    }
    operand_call::guard(call, || g.describe(types, validate::scale_type(compute, types.2), Some(compute), batch), g.record(), extra)
}

macro_rules! typed_gemm {
    ($name:ident, $dtype:expr) => {
        #[allow(clippy::too_many_arguments)]
        pub(crate) fn $name<I: Into<i64>>(
            call: &Call<'_, c_int>,
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
        ) -> c_int {
            typed(call, gemm(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), $dtype, Batch::Single)
        }
    };
}
typed_gemm!(sgemm, DType::F32);
typed_gemm!(dgemm, DType::F64);
typed_gemm!(hgemm, DType::F16);
typed_gemm!(cgemm, DType::C32);
typed_gemm!(zgemm, DType::C64);

macro_rules! typed_strided {
    ($name:ident, $dtype:expr) => {
        #[allow(clippy::too_many_arguments)]
        pub(crate) fn $name<I: Into<i64>>(
            call: &Call<'_, c_int>,
            handle: Handle,
            transa: c_int,
            transb: c_int,
            m: I,
            n: I,
            k: I,
            alpha: Ptr,
            a: Ptr,
            lda: I,
            stride_a: i64,
            b: Ptr,
            ldb: I,
            stride_b: i64,
            beta: Ptr,
            c: Ptr,
            ldc: I,
            stride_c: i64,
            batch_count: I,
        ) -> c_int {
            let batch = Batch::Strided { count: batch_count.into(), a: stride_a, b: stride_b, c: stride_c };
            typed(call, gemm(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), $dtype, batch)
        }
    };
}
typed_strided!(sgemm_strided, DType::F32);
typed_strided!(dgemm_strided, DType::F64);
typed_strided!(hgemm_strided, DType::F16);
typed_strided!(cgemm_strided, DType::C32);
typed_strided!(zgemm_strided, DType::C64);

/// cublasSgemmEx: float scalars and float computation, over the storage types it accepts (the
/// combinations of cublasGemmEx with CUBLAS_COMPUTE_32F).
#[allow(clippy::too_many_arguments)]
pub(crate) fn sgemm_ex(
    call: &Call<'_, c_int>,
    handle: Handle,
    transa: c_int,
    transb: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: Ptr,
    a: Ptr,
    a_type: c_int,
    lda: c_int,
    b: Ptr,
    b_type: c_int,
    ldb: c_int,
    beta: Ptr,
    c: Ptr,
    c_type: c_int,
    ldc: c_int,
) -> c_int {
    let g = gemm(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    let types = (DType::from_cuda(a_type), DType::from_cuda(b_type), DType::from_cuda(c_type));
    operand_call::guard(
        call,
        || g.describe(types, DType::F32, Some(ComputeType::F32), Batch::Single),
        g.record(),
        ExArgs { types: Some(types), ..Default::default() },
    )
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn sgemm_batched<I: Into<i64>>(
    call: &Call<'_, c_int>,
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
    batch_count: I,
) -> c_int {
    let batch = Batch::Arrays { count: batch_count.into() };
    typed(call, gemm(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), DType::F32, batch)
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_ex<I: Into<i64>>(
    call: &Call<'_, c_int>,
    handle: Handle,
    transa: c_int,
    transb: c_int,
    m: I,
    n: I,
    k: I,
    alpha: Ptr,
    a: Ptr,
    a_type: c_int,
    lda: I,
    b: Ptr,
    b_type: c_int,
    ldb: I,
    beta: Ptr,
    c: Ptr,
    c_type: c_int,
    ldc: I,
    compute: c_int,
    algo: c_int,
) -> c_int {
    let g = gemm(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    ex(call, g, (a_type, b_type, c_type), compute, algo, Batch::Single)
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_strided_ex<I: Into<i64>>(
    call: &Call<'_, c_int>,
    handle: Handle,
    transa: c_int,
    transb: c_int,
    m: I,
    n: I,
    k: I,
    alpha: Ptr,
    a: Ptr,
    a_type: c_int,
    lda: I,
    stride_a: i64,
    b: Ptr,
    b_type: c_int,
    ldb: I,
    stride_b: i64,
    beta: Ptr,
    c: Ptr,
    c_type: c_int,
    ldc: I,
    stride_c: i64,
    batch_count: I,
    compute: c_int,
    algo: c_int,
) -> c_int {
    let g = gemm(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    let batch = Batch::Strided { count: batch_count.into(), a: stride_a, b: stride_b, c: stride_c };
    ex(call, g, (a_type, b_type, c_type), compute, algo, batch)
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_batched_ex<I: Into<i64>>(
    call: &Call<'_, c_int>,
    handle: Handle,
    transa: c_int,
    transb: c_int,
    m: I,
    n: I,
    k: I,
    alpha: Ptr,
    a: Ptr,
    a_type: c_int,
    lda: I,
    b: Ptr,
    b_type: c_int,
    ldb: I,
    beta: Ptr,
    c: Ptr,
    c_type: c_int,
    ldc: I,
    batch_count: I,
    compute: c_int,
    algo: c_int,
) -> c_int {
    let g = gemm(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    let batch = Batch::Arrays { count: batch_count.into() };
    ex(call, g, (a_type, b_type, c_type), compute, algo, batch)
}

#[cfg(test)]
mod tests {
    use super::super::model::{session, ModelDevice, ModelOutlet};
    use super::super::{Call, Hook, OnThread};
    use super::*;
    use crate::config::{Checks, Config};
    use crate::state::ThreadMemo;

    const HANDLE: u64 = 0x4000;
    const A: u64 = 0x1000;
    const B: u64 = 0x2000;
    const C: u64 = 0x3000;
    const ALPHA: u64 = 0x10;
    const BETA: u64 = 0x20;
    const DEVICE_SCALARS: u64 = 0x5000;

    /// One 2 x 2 x 2 (or `m` x 2 x 2) sgemm's arguments that a case changes.
    #[derive(Clone, Copy)]
    struct Case {
        handle: u64,
        m: i32,
        a: u64,
        lda: i32,
        alpha: u64,
    }

    const CLEAN: Case = Case { handle: HANDLE, m: 2, a: A, lda: 2, alpha: ALPHA };

    /// The lean path's verdict, and the faults the handler's checks report, for one case.
    fn judged(checks: &str, case: Case, handle: impl Fn(&mut crate::state::HandleState)) -> (bool, Vec<crate::trace::FaultKind>) {
        let mut s = session(Config { quiet: true, ..Config::default() });
        s.config.checks = Checks::parse(checks).unwrap();
        s.handles.created(HANDLE);
        s.handles.update(HANDLE, handle);
        let device = ModelDevice::default();
        for base in [A, B, C] {
            device.put(&s.allocations, base, vec![0; 16]);
        }
        device.put(&s.allocations, DEVICE_SCALARS, vec![0; 8]);
        device.put(&s.allocations, 0x6000, vec![0; 64]);
        s.handles.created(0x4100);
        s.handles.destroyed(0x4100, 1);
        assert_eq!(s.lean_gemm(), crate::session::LeanGemm::Prechecked);
        let memo = ThreadMemo::new();
        let args = |case: Case| (case.handle as Handle, 0, 0, case.m, 2, 2, case.alpha as Ptr, case.a as Ptr, case.lda, B as Ptr, 2, BETA as Ptr, C as Ptr, 2);
        let (h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc) = args(case);
        // The model device says nothing is on the thread's stack: an empty one here.
        let lean = SGEMM.call(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc).clean_before(&s, &memo, 0..0);
        let outlet = ModelOutlet::default();
        let forward = || 0;
        let call = Call::begin(&s, Hook::cublasSgemm_v2, &device, &outlet, &forward, OnThread { id: 7, memo: &memo, frame: Default::default() });
        sgemm(&call, h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        (lean, s.trace(Default::default()).faults.iter().map(|f| f.kind).collect())
    }

    #[test]
    fn the_lean_path_vouches_only_for_a_call_the_checks_find_nothing_in() {
        use crate::trace::FaultKind::*;
        let keep = |_: &mut crate::state::HandleState| {};
        let device_mode = |h: &mut crate::state::HandleState| h.pointer_mode = 1;
        // A case, how it sets the handle up, the lean path's verdict and the checks' faults.
        type Judged<'a> = (&'a str, Case, &'a dyn Fn(&mut crate::state::HandleState), bool, &'a [crate::trace::FaultKind]);
        let cases: Vec<Judged> = vec![
            ("clean", CLEAN, &keep, true, &[]),
            ("lda below m", Case { lda: 1, ..CLEAN }, &keep, false, &[InvalidArgument]),
            ("null alpha", Case { alpha: 0, ..CLEAN }, &keep, false, &[InvalidArgument]),
            ("unknown handle", Case { handle: 0x4200, ..CLEAN }, &keep, false, &[InvalidHandle]),
            ("destroyed handle", Case { handle: 0x4100, ..CLEAN }, &keep, false, &[InvalidHandle]),
            ("A overruns", Case { lda: 4, ..CLEAN }, &keep, false, &[OutOfBounds]),
            ("A in host memory", Case { a: 0x9000, ..CLEAN }, &keep, false, &[HostPointer]),
            ("nothing to read in A", Case { m: 0, a: 0x9000, ..CLEAN }, &keep, true, &[]),
            ("alpha on the device, host mode", Case { alpha: DEVICE_SCALARS, ..CLEAN }, &keep, false, &[InvalidArgument]),
            ("alpha on the host, device mode", CLEAN, &device_mode, false, &[HostPointer]),
            ("workspace inside", CLEAN, &|h| h.workspace = (0x6000, 64), true, &[]),
            ("workspace overruns", CLEAN, &|h| h.workspace = (0x6000, 65), false, &[OutOfBounds]),
        ];
        for (name, case, handle, lean, faults) in cases {
            assert_eq!(judged("args,bounds", case, handle), (lean, faults.to_vec()), "{name}");
        }
        // Device scalars in device mode: both clean.
        let scalars = Case { alpha: DEVICE_SCALARS, ..CLEAN };
        let (lean, faults) = judged("args,bounds", scalars, device_mode);
        assert!(faults.contains(&HostPointer) && !lean, "beta is still on the host");
        // Bounds off: operands are not held against the allocations.
        assert_eq!(judged("args", Case { a: 0x9000, ..CLEAN }, keep), (true, vec![]));
        assert_eq!(judged("args", Case { lda: 1, ..CLEAN }, keep), (false, vec![InvalidArgument]));
    }
}
