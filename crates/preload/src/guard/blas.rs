//! The cuBLAS functions beyond GEMM that PyTorch imports: matrix-vector products, dot
//! products, triangular solves and the batched LU, QR and least-squares kernels. Each handler
//! decodes its C arguments into the operands the call reads and writes (`OperandCall`, the one
//! operand model) and hands it to the same guard as the GEMMs.

use std::ffi::{c_int, c_void};

use super::operand_call::{self, ExArgs};
use super::Call;
use crate::check::operand_call::{Members, OperandCall, OperandSpec, Role, Triangle, MAX_OPERANDS};
use crate::cuda::{Diag, Fill, Operation, Side};
use crate::hook_args::{Access, ArgKind, Args};
use crate::recorder::{BlasForm, CallArgs};
use crate::scan::DType;
use crate::validate::blas::{self, Factorisation, GbmvArgs, GemvArgs, TrsmArgs};
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

/// What a declared call's rule gives: the first argument rule it breaks, and each operand's
/// extent, by its name in the table (an operand the rule does not name is left unchecked).
struct Rule {
    problem: Option<ArgProblem>,
    extents: [(&'static str, Extent); MAX_OPERANDS],
}

#[derive(Clone, Copy)]
enum Extent {
    None,
    /// A matrix as stored.
    Matrix(StoredShape),
    /// A strided vector of `n` elements.
    Vector {
        n: i64,
        inc: c_int,
    },
    /// One element (a dot product's result).
    One,
}

impl Rule {
    fn new(problem: Option<ArgProblem>, extents: &[(&'static str, Extent)]) -> Self {
        let mut rule = Self { problem, extents: [("", Extent::None); MAX_OPERANDS] };
        rule.extents.iter_mut().zip(extents).for_each(|(slot, e)| *slot = *e);
        rule
    }

    fn extent_of(&self, name: &str) -> Extent {
        self.extents.iter().find(|(n, _)| *n == name).map_or(Extent::None, |(_, e)| *e)
    }
}

/// A declared cuBLAS call's element type, from the precision letter of its name (cublasSgemv:
/// float), as NVIDIA names them.
fn element_type(hook: crate::Hook) -> DType {
    match hook.name().as_bytes().get("cublas".len()) {
        Some(b'D') => DType::F64,
        Some(b'C') => DType::C32,
        Some(b'Z') => DType::C64,
        Some(b'H') => DType::F16,
        _ => DType::F32,
    }
}

fn role(access: Access) -> Role {
    match access {
        Access::Input => Role::Input,
        Access::Accumulator => Role::Accumulator,
        Access::Overwritten => Role::InOut,
        Access::Output => Role::Output,
        Access::DotResult => Role::Result,
        Access::Workspace => Role::Workspace,
    }
}

/// The operands of a declared call: each data pointer of its line, in order, with the role its
/// type declares and the extent its rule gives it.
fn declared_operands(args: &Args<'_>, rule: &Rule, dtype: DType) -> Operands {
    let mut ops = Operands::default();
    for (name, access, ptr) in args.operands() {
        let ptr = ptr as Ptr;
        match rule.extent_of(name) {
            Extent::Matrix(shape) => {
                ops.push(name, ptr, shape, dtype, Members::One, role(access));
            }
            Extent::Vector { n, inc } => ops.vector(name, ptr, n, inc, dtype, role(access)),
            Extent::One => {
                ops.push(name, ptr, StoredShape { rows: 1, cols: 1, ld: 1 }, dtype, Members::One, role(access));
            }
            Extent::None => {}
        }
    }
    ops
}

/// The recorded form of a declared call: its `int` arguments (at most 12), named by the table.
fn declared_record(args: &Args<'_>) -> CallArgs {
    let mut positions = 0u32;
    let mut values = [0; 12];
    let ints = args.list.iter().enumerate().filter(|(at, a)| a.kind == ArgKind::Int && *at < 32);
    for ((at, a), value) in ints.zip(values.iter_mut()) {
        positions |= 1 << at;
        *value = a.bits as i64 as i32;
    }
    CallArgs::Declared { hook: args.hook.index() as u16, positions, values }
}

/// A declared call guarded as every operand call is: the operands and the recorded form from
/// the table's line, the shapes and argument checks from its rule.
/// A rule that asks for an argument its line lacks (the two out of step) checks nothing: the
/// call is described without operands or a broken rule, and the blas_family tests, which
/// poison every declared function's operands, fail.
fn declared(call: &Call<'_, c_int>, args: Args<'_>, rule: fn(&Args<'_>) -> Rule) -> c_int {
    let record = declared_record(&args);
    let describe = || {
        let dtype = element_type(args.hook);
        let rule = rule(&args);
        let scalar = |name| args.has_scalar(name).then(|| args.pointer(name) as Ptr);
        let (alpha, beta) = (scalar("alpha"), scalar("beta"));
        let (ops, problem) = match args.missed() {
            false => (declared_operands(&args, &rule, dtype), rule.problem),
            true => (Operands::default(), None),
        };
        blas_call(args.handle() as Handle, problem, dtype, alpha, beta, ops)
    };
    operand_call::guard(call, describe, record, ExArgs::default())
}

fn vector(n: i64, inc: c_int) -> Extent {
    Extent::Vector { n, inc }
}

/// `cublas<t>gemv`: y = alpha op(A) x + beta y.
pub(crate) fn gemv(call: &Call<'_, c_int>, args: Args<'_>) -> c_int {
    declared(call, args, gemv_rule)
}

fn gemv_rule(a: &Args<'_>) -> Rule {
    let g = GemvArgs {
        trans: Operation::decode(a.int("trans")),
        m: a.int("m").into(),
        n: a.int("n").into(),
        lda: a.int("lda").into(),
        incx: a.int("incx").into(),
        incy: a.int("incy").into(),
        alpha_is_null: a.pointer("alpha") == 0,
        beta_is_null: a.pointer("beta") == 0,
    };
    Rule::new(g.check(), &[("A", Extent::Matrix(g.a())), ("x", vector(g.x().cols, a.int("incx"))), ("y", vector(g.y().cols, a.int("incy")))])
}

/// `cublas<t>gbmv`: y = alpha op(A) x + beta y, A an m x n band matrix with kl sub- and ku
/// super-diagonals, stored as its (kl + ku + 1) x n diagonals. The stored corners no element
/// of the band maps to are scanned too: a NaN there is named though the library never reads it.
pub(crate) fn gbmv(call: &Call<'_, c_int>, args: Args<'_>) -> c_int {
    declared(call, args, gbmv_rule)
}

fn gbmv_rule(a: &Args<'_>) -> Rule {
    let g = GbmvArgs {
        trans: Operation::decode(a.int("trans")),
        m: a.int("m").into(),
        n: a.int("n").into(),
        kl: a.int("kl").into(),
        ku: a.int("ku").into(),
        lda: a.int("lda").into(),
        incx: a.int("incx").into(),
        incy: a.int("incy").into(),
        alpha_is_null: a.pointer("alpha") == 0,
        beta_is_null: a.pointer("beta") == 0,
    };
    Rule::new(g.check(), &[("A", Extent::Matrix(g.a())), ("x", vector(g.x_len(), a.int("incx"))), ("y", vector(g.y_len(), a.int("incy")))])
}

/// `cublas<t>dot`: result = x . y, written where the pointer mode says.
pub(crate) fn dot(call: &Call<'_, c_int>, args: Args<'_>) -> c_int {
    declared(call, args, dot_rule)
}

fn dot_rule(a: &Args<'_>) -> Rule {
    let n = i64::from(a.int("n")).max(0);
    Rule::new(blas::check_dot(a.pointer("result") == 0), &[("x", vector(n, a.int("incx"))), ("y", vector(n, a.int("incy"))), ("result", Extent::One)])
}

/// `cublasDotEx`: result = x . y, each operand of its own element type.
#[allow(clippy::too_many_arguments)]
fn dot_typed(
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
    dot_typed(call, handle, n, x, t(x_type), incx, y, t(y_type), incy, result, t(result_type))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hook_args::{Acc, Declare, In, Scalar};

    fn sgbmv(lda: c_int, x: usize) -> [crate::hook_args::DeclaredArg; 14] {
        let p = |v: usize| v as In;
        [
            (0x10usize as Handle).declared("handle"),
            0.declared("trans"),
            5.declared("m"),
            3.declared("n"),
            2.declared("kl"),
            1.declared("ku"),
            (0x20usize as Scalar).declared("alpha"),
            p(0x1000).declared("A"),
            lda.declared("lda"),
            p(x).declared("x"),
            (-2).declared("incx"),
            (0x30usize as Scalar).declared("beta"),
            (0x3000usize as Acc).declared("y"),
            1.declared("incy"),
        ]
    }

    #[test]
    fn a_declared_call_takes_its_operands_from_its_line_and_their_extents_from_its_rule() {
        let list = sgbmv(4, 0x2000);
        let args = Args::new(crate::Hook::cublasSgbmv_v2, &list);
        let rule = gbmv_rule(&args);
        assert!(rule.problem.is_none() && !args.missed());
        let ops = declared_operands(&args, &rule, element_type(args.hook));
        let got: Vec<_> = ops.list.iter().flatten().map(|o| (o.name, o.ptr, o.role, o.shape, o.increment, o.dtype)).collect();
        assert_eq!(
            got,
            [
                ("A", 0x1000, Role::Input, StoredShape { rows: 4, cols: 3, ld: 4 }, None, DType::F32),
                ("x", 0x2000, Role::Input, blas::vector_shape(3, -2), Some(-2), DType::F32),
                ("y", 0x3000, Role::Accumulator, blas::vector_shape(5, 1), Some(1), DType::F32),
            ]
        );
        assert_eq!(gbmv_rule(&Args::new(crate::Hook::cublasSgbmv_v2, &sgbmv(3, 0x2000))).problem.map(|p| p.argument()), Some("lda"));
    }

    #[test]
    fn a_declared_calls_record_holds_its_ints_by_their_place_in_the_line() {
        let list = sgbmv(4, 0x2000);
        let CallArgs::Declared { hook, positions, values } = declared_record(&Args::new(crate::Hook::cublasSgbmv_v2, &list)) else {
            panic!("not a declared record");
        };
        assert_eq!(hook as usize, crate::Hook::cublasSgbmv_v2.index());
        assert_eq!(positions, [1, 2, 3, 4, 5, 8, 10, 13].iter().fold(0, |mask, at| mask | 1 << at));
        assert_eq!(values[..8], [0, 5, 3, 2, 1, 4, -2, 1]);
    }

    #[test]
    fn element_types_follow_the_precision_letter_of_the_name() {
        use crate::Hook::*;
        let types = [cublasSgemv_v2, cublasDgbmv_v2, cublasCdotc_v2, cublasZdotu_v2].map(element_type);
        assert_eq!(types, [DType::F32, DType::F64, DType::C32, DType::C64]);
    }
}
