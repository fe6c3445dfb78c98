//! The cuBLAS functions beyond GEMM that PyTorch imports: matrix-vector products, dot
//! products, triangular solves and the batched LU, QR and least-squares kernels. Each handler
//! decodes its C arguments into the operands the call reads and writes (`OperandCall`, the one
//! operand model) and hands it to the same guard as the GEMMs.

use std::ffi::{c_int, c_void};

use super::operand_call::{self, ExArgs};
use super::Call;
use crate::check::operand_call::{Members, OperandCall, OperandSpec, Role, Triangle, MAX_OPERANDS};
use crate::cuda::{Diag, Fill, Operation, Side};
use crate::recorder::{BlasForm, CallArgs};
use crate::scan::DType;
use crate::validate::blas::{self, Factorisation, GemvArgs, TrsmArgs};
use crate::validate::{ArgProblem, StoredShape};

type Ptr = *const c_void;
type Handle = *mut c_void;

/// Operands, in the order NVIDIA's headers list them.
#[derive(Default)]
struct Operands {
    list: [Option<OperandSpec>; MAX_OPERANDS],
    used: usize,
}

impl Operands {
    /// Adds an operand; the new one, to refine (`None` past `MAX_OPERANDS`, which no form reaches).
    fn push(&mut self, name: &'static str, ptr: Ptr, shape: StoredShape, dtype: DType, members: Members, role: Role) -> Option<&mut OperandSpec> {
        let slot = self.list.get_mut(self.used)?;
        self.used += 1;
        Some(slot.insert(OperandSpec { name, ptr: ptr as u64, shape, dtype, members, role, increment: None, triangle: None }))
    }

    fn vector(&mut self, name: &'static str, ptr: Ptr, n: i64, inc: c_int, dtype: DType, role: Role) {
        if let Some(spec) = self.push(name, ptr, blas::vector_shape(n, inc.into()), dtype, Members::One, role) {
            spec.increment = Some(inc);
        }
    }
}

fn blas_call(handle: Handle, problem: Option<ArgProblem>, scalar: DType, alpha: Option<Ptr>, beta: Option<Ptr>, operands: Operands) -> OperandCall {
    OperandCall {
        handle: handle as u64,
        lt: false,
        argument_problem: problem.map(|p| p.message()),
        scalar,
        alpha: alpha.map(|p| p as u64),
        beta: beta.map(|p| p as u64),
        pointer_mode: None,
        stream: None,
        reduced_precision_compute: false,
        operands: operands.list,
    }
}

fn record(form: BlasForm, enums: &[c_int], ints: &[c_int]) -> CallArgs {
    let mut e = [0; 4];
    let mut i = [0; 8];
    e.iter_mut().zip(enums).for_each(|(d, s)| *d = *s);
    i.iter_mut().zip(ints).for_each(|(d, s)| *d = *s);
    CallArgs::Blas { form, enums: e, ints: i }
}

/// `cublas<t>gemv`: y = alpha op(A) x + beta y.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemv(
    call: &Call<'_, c_int>,
    dtype: DType,
    handle: Handle,
    trans: c_int,
    m: c_int,
    n: c_int,
    alpha: Ptr,
    a: Ptr,
    lda: c_int,
    x: Ptr,
    incx: c_int,
    beta: Ptr,
    y: Ptr,
    incy: c_int,
) -> c_int {
    let args = GemvArgs {
        trans: Operation::decode(trans),
        m: m.into(),
        n: n.into(),
        lda: lda.into(),
        incx: incx.into(),
        incy: incy.into(),
        alpha_is_null: alpha.is_null(),
        beta_is_null: beta.is_null(),
    };
    let mut ops = Operands::default();
    ops.push("A", a, args.a(), dtype, Members::One, Role::Input);
    ops.vector("x", x, args.x().cols, incx, dtype, Role::Input);
    ops.vector("y", y, args.y().cols, incy, dtype, Role::Accumulator);
    let matmul = blas_call(handle, args.check(), dtype, Some(alpha), Some(beta), ops);
    operand_call::guard(call, || matmul, record(BlasForm::Gemv, &[trans], &[m, n, lda, incx, incy]), ExArgs::default())
}

macro_rules! gemv {
    ($name:ident, $dtype:expr) => {
        #[allow(clippy::too_many_arguments)]
        pub(crate) fn $name(
            call: &Call<'_, c_int>,
            handle: Handle,
            trans: c_int,
            m: c_int,
            n: c_int,
            alpha: Ptr,
            a: Ptr,
            lda: c_int,
            x: Ptr,
            incx: c_int,
            beta: Ptr,
            y: Ptr,
            incy: c_int,
        ) -> c_int {
            gemv(call, $dtype, handle, trans, m, n, alpha, a, lda, x, incx, beta, y, incy)
        }
    };
}
gemv!(sgemv, DType::F32);
gemv!(dgemv, DType::F64);
gemv!(cgemv, DType::C32);
gemv!(zgemv, DType::C64);

/// `cublas<t>dot` and `cublasDotEx`: result = x . y, written where the pointer mode says.
#[allow(clippy::too_many_arguments)]
fn dot(
    call: &Call<'_, c_int>,
    handle: Handle,
    n: c_int,
    x: Ptr,
    x_type: DType,
    incx: c_int,
    y: Ptr,
    y_type: DType,
    incy: c_int,
    result: Ptr,
    result_type: DType,
) -> c_int {
    let mut ops = Operands::default();
    let count = i64::from(n).max(0);
    ops.vector("x", x, count, incx, x_type, Role::Input);
    ops.vector("y", y, count, incy, y_type, Role::Input);
    ops.push("result", result, StoredShape { rows: 1, cols: 1, ld: 1 }, result_type, Members::One, Role::Result);
    let matmul = blas_call(handle, blas::check_dot(result.is_null()), result_type, None, None, ops);
    operand_call::guard(call, || matmul, record(BlasForm::Dot, &[], &[n, incx, incy]), ExArgs::default())
}

macro_rules! typed_dot {
    ($name:ident, $dtype:expr) => {
        #[allow(clippy::too_many_arguments)]
        pub(crate) fn $name(call: &Call<'_, c_int>, handle: Handle, n: c_int, x: Ptr, incx: c_int, y: Ptr, incy: c_int, result: Ptr) -> c_int {
            dot(call, handle, n, x, $dtype, incx, y, $dtype, incy, result, $dtype)
        }
    };
}
typed_dot!(sdot, DType::F32);
typed_dot!(ddot, DType::F64);
typed_dot!(cdot, DType::C32);
typed_dot!(zdot, DType::C64);

#[allow(clippy::too_many_arguments)]
pub(crate) fn dot_ex(
    call: &Call<'_, c_int>,
    handle: Handle,
    n: c_int,
    x: Ptr,
    x_type: c_int,
    incx: c_int,
    y: Ptr,
    y_type: c_int,
    incy: c_int,
    result: Ptr,
    result_type: c_int,
    _execution_type: c_int,
) -> c_int {
    let t = DType::from_cuda;
    dot(call, handle, n, x, t(x_type), incx, y, t(y_type), incy, result, t(result_type))
}

/// `cublas<t>trsm` and `cublas<t>trsmBatched`: solves op(A) X = alpha B (or X op(A) = alpha B)
/// in place of B. `batch`: the batch count of the pointer-array form.
#[allow(clippy::too_many_arguments)]
fn trsm(
    call: &Call<'_, c_int>,
    dtype: DType,
    handle: Handle,
    enums: [c_int; 4],
    m: c_int,
    n: c_int,
    alpha: Ptr,
    a: Ptr,
    lda: c_int,
    b: Ptr,
    ldb: c_int,
    batch: Option<c_int>,
) -> c_int {
    let [side, uplo, trans, diag] = enums;
    let args = TrsmArgs {
        side: Side::decode(side),
        uplo: Fill::decode(uplo),
        trans: Operation::decode(trans),
        diag: Diag::decode(diag),
        m: m.into(),
        n: n.into(),
        lda: lda.into(),
        ldb: ldb.into(),
        alpha_is_null: alpha.is_null(),
        batch_count: batch.map_or(1, i64::from),
    };
    let members = match batch {
        Some(count) => Members::Array { count: i64::from(count).max(0) as u64 },
        None => Members::One,
    };
    let mut ops = Operands::default();
    if let Some(spec) = ops.push("A", a, args.a(), dtype, members, Role::Input) {
        spec.triangle = match args.uplo {
            Fill::Lower => Some(Triangle::Lower),
            Fill::Upper => Some(Triangle::Upper),
            Fill::Unknown(_) => None,
        };
    }
    ops.push("B", b, args.b(), dtype, members, Role::InOut);
    let matmul = blas_call(handle, args.check(), dtype, Some(alpha), None, ops);
    let record = match batch {
        Some(count) => record(BlasForm::TrsmBatched, &enums, &[m, n, lda, ldb, count]),
        None => record(BlasForm::Trsm, &enums, &[m, n, lda, ldb]),
    };
    operand_call::guard(call, || matmul, record, ExArgs::default())
}

macro_rules! trsm {
    ($name:ident, $batched:ident, $dtype:expr) => {
        #[allow(clippy::too_many_arguments)]
        pub(crate) fn $name(
            call: &Call<'_, c_int>,
            handle: Handle,
            side: c_int,
            uplo: c_int,
            trans: c_int,
            diag: c_int,
            m: c_int,
            n: c_int,
            alpha: Ptr,
            a: Ptr,
            lda: c_int,
            b: Ptr,
            ldb: c_int,
        ) -> c_int {
            trsm(call, $dtype, handle, [side, uplo, trans, diag], m, n, alpha, a, lda, b, ldb, None)
        }

        #[allow(clippy::too_many_arguments)]
        pub(crate) fn $batched(
            call: &Call<'_, c_int>,
            handle: Handle,
            side: c_int,
            uplo: c_int,
            trans: c_int,
            diag: c_int,
            m: c_int,
            n: c_int,
            alpha: Ptr,
            a: Ptr,
            lda: c_int,
            b: Ptr,
            ldb: c_int,
            batch_count: c_int,
        ) -> c_int {
            trsm(call, $dtype, handle, [side, uplo, trans, diag], m, n, alpha, a, lda, b, ldb, Some(batch_count))
        }
    };
}
trsm!(strsm, strsm_batched, DType::F32);
trsm!(dtrsm, dtrsm_batched, DType::F64);
trsm!(ctrsm, ctrsm_batched, DType::C32);
trsm!(ztrsm, ztrsm_batched, DType::C64);

/// The pointers of a batched factorisation besides its matrices.
struct Extras {
    /// The right-hand sides' pointer array (getrs's Barray, gels's Carray).
    rhs: Ptr,
    pivots: Ptr,
    /// Device array of one int per member (getrf's infoArray, gels's devInfoArray).
    info_array: Ptr,
    /// The host `int *info` of getrs, geqrf and gels.
    host_info: Option<Ptr>,
    /// geqrf's TauArray.
    tau: Ptr,
}

const NONE: Ptr = std::ptr::null();

/// The batched LAPACK-style kernels. Every matrix is a pointer array of `batch` members.
fn factorisation(call: &Call<'_, c_int>, dtype: DType, handle: Handle, f: Factorisation, a: Ptr, extras: Extras, record: CallArgs) -> c_int {
    let count = f.batch().max(0) as u64;
    let arrays = Members::Array { count };
    let mut ops = Operands::default();
    let a_role = if matches!(f, Factorisation::Getrs { .. }) { Role::Input } else { Role::InOut };
    ops.push("Aarray", a, f.a(), dtype, arrays, a_role);
    if let Some(pivots) = f.pivots().filter(|_| !extras.pivots.is_null()) {
        // One int array for the whole batch: n pivots per member, one member after another.
        let role = if matches!(f, Factorisation::Getrf { .. }) { Role::Output } else { Role::Input };
        let name = if role == Role::Output { "PivotArray" } else { "devIpiv" };
        ops.push(name, extras.pivots, pivots, DType::I32, Members::Strided { count, stride: pivots.rows }, role);
    }
    if let Some(shape) = f.rhs() {
        let name = if matches!(f, Factorisation::Gels { .. }) { "Carray" } else { "Barray" };
        ops.push(name, extras.rhs, shape, dtype, arrays, Role::InOut);
    }
    if let Some(tau) = f.tau() {
        ops.push("TauArray", extras.tau, tau, dtype, arrays, Role::Output);
    }
    if !extras.info_array.is_null() {
        let name = if matches!(f, Factorisation::Getrf { .. }) { "infoArray" } else { "devInfoArray" };
        ops.push(name, extras.info_array, blas::info_array(f.batch()), DType::I32, Members::One, Role::Output);
    }
    let mut problem = f.check();
    if problem.is_none() {
        problem = match (f, extras.host_info) {
            (Factorisation::Getrf { .. }, _) if extras.info_array.is_null() => Some(ArgProblem::NullPointer { name: "infoArray" }),
            (_, Some(info)) if info.is_null() => Some(ArgProblem::NullPointer { name: "info" }),
            _ => None,
        };
    }
    let matmul = blas_call(handle, problem, dtype, None, None, ops);
    operand_call::guard(call, || matmul, record, ExArgs::default())
}

macro_rules! factorisations {
    ($dtype:expr, $getrf:ident, $getrs:ident, $geqrf:ident, $gels:ident) => {
        #[allow(clippy::too_many_arguments)]
        pub(crate) fn $getrf(call: &Call<'_, c_int>, handle: Handle, n: c_int, a: Ptr, lda: c_int, pivots: Ptr, info: Ptr, batch: c_int) -> c_int {
            let f = Factorisation::Getrf { n: n.into(), lda: lda.into(), batch: batch.into() };
            let extras = Extras { rhs: NONE, pivots, info_array: info, host_info: None, tau: NONE };
            factorisation(call, $dtype, handle, f, a, extras, record(BlasForm::Getrf, &[], &[n, lda, batch]))
        }

        #[allow(clippy::too_many_arguments)]
        pub(crate) fn $getrs(
            call: &Call<'_, c_int>,
            handle: Handle,
            trans: c_int,
            n: c_int,
            nrhs: c_int,
            a: Ptr,
            lda: c_int,
            pivots: Ptr,
            b: Ptr,
            ldb: c_int,
            info: Ptr,
            batch: c_int,
        ) -> c_int {
            let f =
                Factorisation::Getrs { trans: Operation::decode(trans), n: n.into(), nrhs: nrhs.into(), lda: lda.into(), ldb: ldb.into(), batch: batch.into() };
            let extras = Extras { rhs: b, pivots, info_array: NONE, host_info: Some(info), tau: NONE };
            factorisation(call, $dtype, handle, f, a, extras, record(BlasForm::Getrs, &[trans], &[n, nrhs, lda, ldb, batch]))
        }

        #[allow(clippy::too_many_arguments)]
        pub(crate) fn $geqrf(call: &Call<'_, c_int>, handle: Handle, m: c_int, n: c_int, a: Ptr, lda: c_int, tau: Ptr, info: Ptr, batch: c_int) -> c_int {
            let f = Factorisation::Geqrf { m: m.into(), n: n.into(), lda: lda.into(), batch: batch.into() };
            let extras = Extras { rhs: NONE, pivots: NONE, info_array: NONE, host_info: Some(info), tau };
            factorisation(call, $dtype, handle, f, a, extras, record(BlasForm::Geqrf, &[], &[m, n, lda, batch]))
        }

        #[allow(clippy::too_many_arguments)]
        pub(crate) fn $gels(
            call: &Call<'_, c_int>,
            handle: Handle,
            trans: c_int,
            m: c_int,
            n: c_int,
            nrhs: c_int,
            a: Ptr,
            lda: c_int,
            c: Ptr,
            ldc: c_int,
            info: Ptr,
            dev_info: Ptr,
            batch: c_int,
        ) -> c_int {
            let f = Factorisation::Gels {
                trans: Operation::decode(trans),
                m: m.into(),
                n: n.into(),
                nrhs: nrhs.into(),
                lda: lda.into(),
                ldc: ldc.into(),
                batch: batch.into(),
            };
            let extras = Extras { rhs: c, pivots: NONE, info_array: dev_info, host_info: Some(info), tau: NONE };
            factorisation(call, $dtype, handle, f, a, extras, record(BlasForm::Gels, &[trans], &[m, n, nrhs, lda, ldc, batch]))
        }
    };
}
factorisations!(DType::F32, sgetrf_batched, sgetrs_batched, sgeqrf_batched, sgels_batched);
factorisations!(DType::F64, dgetrf_batched, dgetrs_batched, dgeqrf_batched, dgels_batched);
factorisations!(DType::C32, cgetrf_batched, cgetrs_batched, cgeqrf_batched, cgels_batched);
factorisations!(DType::C64, zgetrf_batched, zgetrs_batched, zgeqrf_batched, zgels_batched);
