//! The cuBLAS GEMM handlers: decode each variant's C arguments into a `OperandCall` and guard
//! it (`operand_call::guard`). Generic over the
//! integer width, so each `_64` variant shares its handler with the `int` one.

use std::ffi::{c_int, c_void};

use super::operand_call::{self, ExArgs};
use super::Call;
use crate::check::operand_call::{Members, OperandCall, OperandSpec, Role, MAX_OPERANDS};
use crate::cuda::{ComputeType, Operation};
use crate::recorder::CallArgs;
use crate::scan::DType;
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

/// What the flight recorder keeps of a plain GEMM, for the hook layer's lean path (every
/// check off): the same arguments its handler records.
#[allow(clippy::too_many_arguments)]
pub(crate) fn record<I: Into<i64>>(
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
    operand_call::guard(call, || g.describe(types, validate::scale_type(compute), Some(compute), batch), g.record(), extra)
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
