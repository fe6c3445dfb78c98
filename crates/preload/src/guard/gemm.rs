//! The cuBLAS GEMM handlers: decode each variant's C arguments into a `OperandCall` and guard
//! it (`operand_call::guard`). Generic over the
//! integer width, so each `_64` variant shares its handler with the `int` one.

use std::ffi::{c_int, c_void};

use super::operand_call::{self, ExArgs};
use super::Call;
use crate::check::operand_call::{operand_inside, Members, OperandCall, OperandSpec, Role, MAX_OPERANDS};
use crate::cuda::{ComputeType, Operation, PointerMode};
use crate::recorder::CallArgs;
use crate::scan::DType;
use crate::session::Session;
use crate::state::{AllocationView, HandleLookup, ThreadMemo};
use crate::validate::{self, GemmArgs};

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
        let args = self.args(batch.count());
        let mut problem = validate::check_gemm_args(&args).map(|p| p.message());
        if problem.is_none() {
            if let Some(compute) = compute {
                problem = validate::check_type_combination(compute, types.0, types.1, types.2);
            }
        }
        let [a, b, c] = self.operands(&args, types, batch);
        let mut operands = [None; MAX_OPERANDS];
        (operands[0], operands[1], operands[2]) = (Some(a), Some(b), Some(c));
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

    /// A, B and C as the checks see them.
    #[inline(always)]
    fn operands(&self, args: &GemmArgs, types: (DType, DType, DType), batch: Batch) -> [OperandSpec; 3] {
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
        [
            spec("A", self.a, validate::shape_of_a(args), types.0, sa, Role::Input),
            spec("B", self.b, validate::shape_of_b(args), types.1, sb, Role::Input),
            spec("C", self.c, validate::shape_of_c(args), types.2, sc, Role::Accumulator),
        ]
    }
}

impl Batch {
    fn count(self) -> i64 {
        match self {
            Batch::Single => 1,
            Batch::Strided { count, .. } | Batch::Arrays { count } => count,
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

    /// The call's arguments, widened, for `DescribedGemm::clean_before`.
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
    ) -> DescribedGemm {
        DescribedGemm::typed(gemm(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), self.0, Batch::Single)
    }
}

/// `operand_inside` for one matrix (`Members::One`): an operand of no extent is not looked at;
/// one whose extent overflows, or that is not inside one allocation, is left to the checks.
#[inline(always)]
fn inside(allocations: AllocationView<'_>, ptr: Ptr, shape: validate::StoredShape, dtype: DType) -> bool {
    match validate::operand_extent(shape, dtype.size().unwrap_or(1)) {
        Some(0) => true,
        Some(extent) => {
            allocations.span_containing(ptr as u64).is_some_and(|span| validate::containment(ptr as u64, extent, span) == validate::Containment::Inside)
        }
        None => false,
    }
}

/// A GEMM as its handler describes it for the checks: element types, scale type, compute type
/// (the Ex forms) and batch form. The handler and the hook layer's lean path describe it
/// through this one value, so the lean path vouches for exactly what the handler would check.
#[derive(Clone, Copy)]
pub(crate) struct DescribedGemm {
    g: Gemm,
    types: (DType, DType, DType),
    scalar: DType,
    compute: Option<ComputeType>,
    batch: Batch,
}

impl DescribedGemm {
    #[inline(always)]
    fn typed(g: Gemm, dtype: DType, batch: Batch) -> Self {
        Self { g, types: (dtype, dtype, dtype), scalar: dtype, compute: None, batch }
    }

    #[inline(always)]
    fn ex(g: Gemm, types: (i32, i32, i32), compute: i32, batch: Batch) -> Self {
        let types = (DType::from_cuda(types.0), DType::from_cuda(types.1), DType::from_cuda(types.2));
        let compute = ComputeType::decode(compute);
        Self { g, types, scalar: validate::scale_type(compute, types.2), compute: Some(compute), batch }
    }

    fn describe(&self) -> OperandCall {
        self.g.describe(self.types, self.scalar, self.compute, self.batch)
    }

    /// With `args` and `bounds` the only checks of a matrix multiply on (`LeanGemm::Prechecked`):
    /// true when the checks before the call (`OperandCallCheck::check_before`, as the handler
    /// describes the call) would find nothing, so that a clean call can be forwarded and
    /// recorded as its handler would record it. What it cannot vouch for cheaply answers false
    /// and the call goes to its handler, which checks and reports it: a handle not alive, an
    /// argument rule or type combination broken, a pointer array (it lives in device memory),
    /// an operand or the handle's workspace not inside an allocation the guard saw, a scalar
    /// neither where the pointer mode wants it nor plainly elsewhere. The operands are the
    /// handler's own (`Gemm::operands`); the full description is not built. `stack`: the
    /// calling thread's stack.
    #[inline(always)]
    pub(crate) fn clean_before(&self, session: &Session, memo: &ThreadMemo, stack: std::ops::Range<u64>) -> bool {
        let (g, types) = (&self.g, self.types);
        if matches!(self.batch, Batch::Arrays { .. }) {
            return false;
        }
        let args = g.args(self.batch.count());
        if validate::check_gemm_args(&args).is_some() {
            return false;
        }
        if self.compute.is_some_and(|compute| !validate::type_combination_supported(compute, types.0, types.1, types.2)) {
            return false;
        }
        let HandleLookup::Alive(state) = session.matmul_handle_in(false, g.handle as u64, memo) else { return false };
        if !session.config.checks.bounds {
            return true;
        }
        let allocations = AllocationView::new(&session.allocations, memo);
        let (workspace, workspace_bytes) = state.workspace;
        if workspace_bytes > 0 && !operand_inside(allocations, &OperandSpec::workspace(workspace, workspace_bytes)) {
            return false;
        }
        let operands_inside = match self.batch {
            // The common case, without building the operands (a tenth of the lean call).
            Batch::Single => {
                inside(allocations, g.a, validate::shape_of_a(&args), types.0)
                    && inside(allocations, g.b, validate::shape_of_b(&args), types.1)
                    && inside(allocations, g.c, validate::shape_of_c(&args), types.2)
            }
            _ => g.operands(&args, types, self.batch).iter().all(|o| operand_inside(allocations, o)),
        };
        if !operands_inside {
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

    /// What a fault adds to the recorded arguments: the batch, and the Ex forms' types.
    fn extra(&self, algo: Option<i32>) -> ExArgs {
        let mut extra = match self.compute {
            Some(compute) => ExArgs { types: Some(self.types), compute: Some(compute), algo, ..Default::default() },
            None => ExArgs::default(),
        };
        match self.batch {
            Batch::Single => {}
            Batch::Strided { count, a, b, c } => {
                extra.batch_count = Some(count);
                extra.strides = Some((a, b, c));
            }
            Batch::Arrays { count } => extra.batch_count = Some(count),
        }
        extra
    }
}

fn typed(call: &Call<'_, c_int>, g: Gemm, dtype: DType, batch: Batch) -> c_int {
    let d = DescribedGemm::typed(g, dtype, batch);
    operand_call::guard(call, || d.describe(), g.record(), d.extra(None))
}

fn ex(call: &Call<'_, c_int>, g: Gemm, types: (i32, i32, i32), compute: i32, algo: i32, batch: Batch) -> c_int {
    let d = DescribedGemm::ex(g, types, compute, batch);
    operand_call::guard(call, || d.describe(), g.record(), d.extra(Some(algo)))
}

/// `cublasGemmEx[_64]` on the hook layer's lean path (`lean` in the hook table).
pub(crate) struct GemmEx;
pub(crate) const GEMM_EX: GemmEx = GemmEx;

impl GemmEx {
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
        _algo: c_int,
    ) -> DescribedGemm {
        DescribedGemm::ex(gemm(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), (a_type, b_type, c_type), compute, Batch::Single)
    }

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
        _a_type: c_int,
        lda: I,
        b: Ptr,
        _b_type: c_int,
        ldb: I,
        beta: Ptr,
        c: Ptr,
        _c_type: c_int,
        ldc: I,
        _compute: c_int,
        _algo: c_int,
    ) -> CallArgs {
        gemm(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc).record()
    }
}

/// `cublasGemmStridedBatchedEx[_64]` on the hook layer's lean path.
pub(crate) struct StridedGemmEx;
pub(crate) const STRIDED_GEMM_EX: StridedGemmEx = StridedGemmEx;

impl StridedGemmEx {
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
        _algo: c_int,
    ) -> DescribedGemm {
        let batch = Batch::Strided { count: batch_count.into(), a: stride_a, b: stride_b, c: stride_c };
        DescribedGemm::ex(gemm(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), (a_type, b_type, c_type), compute, batch)
    }

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
        _a_type: c_int,
        lda: I,
        _stride_a: i64,
        b: Ptr,
        _b_type: c_int,
        ldb: I,
        _stride_b: i64,
        beta: Ptr,
        c: Ptr,
        _c_type: c_int,
        ldc: I,
        _stride_c: i64,
        _batch_count: I,
        _compute: c_int,
        _algo: c_int,
    ) -> CallArgs {
        gemm(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc).record()
    }
}

/// `cublas[SDHCZ]gemmStridedBatched[_64]` on the hook layer's lean path.
#[derive(Clone, Copy)]
pub(crate) struct StridedGemm(DType);

pub(crate) const SGEMM_STRIDED: StridedGemm = StridedGemm(DType::F32);
pub(crate) const DGEMM_STRIDED: StridedGemm = StridedGemm(DType::F64);
pub(crate) const HGEMM_STRIDED: StridedGemm = StridedGemm(DType::F16);
pub(crate) const CGEMM_STRIDED: StridedGemm = StridedGemm(DType::C32);
pub(crate) const ZGEMM_STRIDED: StridedGemm = StridedGemm(DType::C64);

impl StridedGemm {
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
        stride_a: i64,
        b: Ptr,
        ldb: I,
        stride_b: i64,
        beta: Ptr,
        c: Ptr,
        ldc: I,
        stride_c: i64,
        batch_count: I,
    ) -> DescribedGemm {
        let batch = Batch::Strided { count: batch_count.into(), a: stride_a, b: stride_b, c: stride_c };
        DescribedGemm::typed(gemm(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc), self.0, batch)
    }

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
        _stride_a: i64,
        b: Ptr,
        ldb: I,
        _stride_b: i64,
        beta: Ptr,
        c: Ptr,
        ldc: I,
        _stride_c: i64,
        _batch_count: I,
    ) -> CallArgs {
        gemm(handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc).record()
    }
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

    /// How a case's GEMM is called: a plain `cublasSgemm`, or one of the forms that share
    /// `DescribedGemm` (f32 throughout, one member in a batch unless `members` says more).
    #[derive(Clone, Copy, Debug)]
    enum Form {
        Plain,
        Ex { c_type: i32 },
        StridedEx { members: i32 },
        Strided { members: i32 },
    }

    const CUDA_R_32F: i32 = 0;
    const CUBLAS_COMPUTE_32F: i32 = 68;

    /// The lean path's verdict, and the faults the handler's checks report, for one case.
    fn judged(checks: &str, case: Case, handle: impl Fn(&mut crate::state::HandleState)) -> (bool, Vec<crate::trace::FaultKind>) {
        judged_as(Form::Plain, checks, case, handle)
    }

    fn judged_as(form: Form, checks: &str, case: Case, handle: impl Fn(&mut crate::state::HandleState)) -> (bool, Vec<crate::trace::FaultKind>) {
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
        let outlet = ModelOutlet::default();
        let forward = || 0;
        let hook = match form {
            Form::Plain => Hook::cublasSgemm_v2,
            Form::Ex { .. } => Hook::cublasGemmEx,
            Form::StridedEx { .. } => Hook::cublasGemmStridedBatchedEx,
            Form::Strided { .. } => Hook::cublasSgemmStridedBatched,
        };
        let call = Call::begin(&s, hook, &device, &outlet, &outlet, &forward, OnThread { id: 7, memo: &memo, frame: Default::default() });
        let f32_ = CUDA_R_32F;
        // The model device says nothing is on the thread's stack: an empty one here.
        let lean = match form {
            Form::Plain => {
                let lean = SGEMM.call(h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc).clean_before(&s, &memo, 0..0);
                sgemm(&call, h, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
                lean
            }
            Form::Ex { c_type } => {
                let described = GEMM_EX.call(h, ta, tb, m, n, k, alpha, a, f32_, lda, b, f32_, ldb, beta, c, c_type, ldc, CUBLAS_COMPUTE_32F, -1);
                gemm_ex(&call, h, ta, tb, m, n, k, alpha, a, f32_, lda, b, f32_, ldb, beta, c, c_type, ldc, CUBLAS_COMPUTE_32F, -1);
                described.clean_before(&s, &memo, 0..0)
            }
            Form::StridedEx { members } => {
                let (sa, sb, sc) = (4, 4, 4);
                let described = STRIDED_GEMM_EX.call(
                    h,
                    ta,
                    tb,
                    m,
                    n,
                    k,
                    alpha,
                    a,
                    f32_,
                    lda,
                    sa,
                    b,
                    f32_,
                    ldb,
                    sb,
                    beta,
                    c,
                    f32_,
                    ldc,
                    sc,
                    members,
                    CUBLAS_COMPUTE_32F,
                    -1,
                );
                gemm_strided_ex(&call, h, ta, tb, m, n, k, alpha, a, f32_, lda, sa, b, f32_, ldb, sb, beta, c, f32_, ldc, sc, members, CUBLAS_COMPUTE_32F, -1);
                described.clean_before(&s, &memo, 0..0)
            }
            Form::Strided { members } => {
                let described = SGEMM_STRIDED.call(h, ta, tb, m, n, k, alpha, a, lda, 4, b, ldb, 4, beta, c, ldc, 4, members);
                sgemm_strided(&call, h, ta, tb, m, n, k, alpha, a, lda, 4, b, ldb, 4, beta, c, ldc, 4, members);
                described.clean_before(&s, &memo, 0..0)
            }
        };
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
        let forms = [Form::Plain, Form::Ex { c_type: CUDA_R_32F }, Form::StridedEx { members: 1 }, Form::Strided { members: 1 }];
        for (name, case, handle, lean, faults) in cases {
            for form in forms {
                assert_eq!(judged_as(form, "args,bounds", case, handle), (lean, faults.to_vec()), "{name} as {form:?}");
            }
        }
        // Device scalars in device mode: both clean.
        let scalars = Case { alpha: DEVICE_SCALARS, ..CLEAN };
        let (lean, faults) = judged("args,bounds", scalars, device_mode);
        assert!(faults.contains(&HostPointer) && !lean, "beta is still on the host");
        // Bounds off: operands are not held against the allocations.
        assert_eq!(judged("args", Case { a: 0x9000, ..CLEAN }, keep), (true, vec![]));
        assert_eq!(judged("args", Case { lda: 1, ..CLEAN }, keep), (false, vec![InvalidArgument]));
        // The forms' own rules: a type combination cuBLAS refuses (f32 inputs, an f64 C);
        // a second member past the 16-byte allocations (memory the model calls host memory);
        // zero members read nothing.
        assert_eq!(judged_as(Form::Ex { c_type: 1 }, "args,bounds", CLEAN, keep), (false, vec![InvalidArgument]));
        for form in [Form::StridedEx { members: 2 }, Form::Strided { members: 2 }] {
            assert_eq!(judged_as(form, "args,bounds", CLEAN, keep), (false, vec![HostPointer]), "{form:?}");
        }
        for form in [Form::StridedEx { members: 0 }, Form::Strided { members: 0 }] {
            assert_eq!(judged_as(form, "args,bounds", Case { a: 0x9000, ..CLEAN }, keep), (true, vec![]), "{form:?}");
        }
    }
}
