//! The cuBLAS functions beyond GEMM that PyTorch imports: matrix-vector products, dot
//! products, triangular solves and the batched LU, QR and least-squares kernels, and gbmv.
//! Every one has a `declared` line in the hook table (hook_args.rs): the line says what each
//! argument is, so the operands the call reads and writes (`OperandCall`, the one operand
//! model) and its recorded arguments are made from it (`declared`), and each function here is
//! only its rule: the argument checks, in NVIDIA's order, and each operand's extent.

use std::ffi::c_int;

use super::operand_call::{self, ExArgs};
use super::Call;
use crate::check::operand_call::{Members, OperandCall, OperandSpec, Role, Triangle, MAX_OPERANDS};
use crate::cuda::{Diag, Fill, Operation, Side};
use crate::hook_args::{Access, ArgKind, Args};
use crate::recorder::CallArgs;
use crate::scan::DType;
use crate::validate::blas::{self, Factorisation, GbmvArgs, GemvArgs, TrsmArgs};
use crate::validate::{ArgProblem, StoredShape};

/// What a declared call's rule gives: the first argument rule it breaks, each operand's
/// extent by its name in the table (an operand the rule does not name is not checked: a host
/// `int *info`, a NULL pivot array), and the scalars' type where it is not the name's.
struct Rule {
    problem: Option<ArgProblem>,
    extents: [Option<(&'static str, Extent)>; MAX_OPERANDS],
    scalar: Option<DType>,
}

/// One operand's extent, as the rule works it out.
#[derive(Clone, Copy)]
struct Extent {
    /// As stored, column-major.
    shape: StoredShape,
    members: Members,
    /// `None`: the call's element type (its name's precision letter).
    dtype: Option<DType>,
    /// A strided vector's increment, for messages.
    increment: Option<c_int>,
    /// Only this triangle is read (a solve's A).
    triangle: Option<Triangle>,
}

impl Extent {
    fn matrix(shape: StoredShape) -> Self {
        Self { shape, members: Members::One, dtype: None, increment: None, triangle: None }
    }

    /// A strided vector of `n` elements.
    fn vector(n: i64, inc: c_int) -> Self {
        Self { increment: Some(inc), ..Self::matrix(blas::vector_shape(n, inc.into())) }
    }

    /// One element (a dot product's result).
    fn one() -> Self {
        Self::matrix(StoredShape { rows: 1, cols: 1, ld: 1 })
    }

    fn of(self, dtype: DType) -> Self {
        Self { dtype: Some(dtype), ..self }
    }

    fn members(self, members: Members) -> Self {
        Self { members, ..self }
    }
}

impl Rule {
    fn new(problem: Option<ArgProblem>, extents: &[(&'static str, Extent)]) -> Self {
        let rule = Self { problem, extents: [None; MAX_OPERANDS], scalar: None };
        extents.iter().fold(rule, |rule, &(name, e)| rule.with(name, e))
    }

    /// The rule with `name`'s extent too (past `MAX_OPERANDS`, which no line reaches, dropped).
    fn with(mut self, name: &'static str, extent: Extent) -> Self {
        if let Some(slot) = self.extents.iter_mut().find(|slot| slot.is_none()) {
            *slot = Some((name, extent));
        }
        self
    }

    fn extent_of(&self, name: &str) -> Option<Extent> {
        self.extents.iter().flatten().find(|(n, _)| *n == name).map(|(_, e)| *e)
    }
}

/// A declared cuBLAS call's element type, from the precision letter of its name (cublasSgemv:
/// float), as NVIDIA names them; a rule gives the types of a call that has none (cublasDotEx).
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

/// The operands of a declared call: each data pointer of its line that its rule gives an
/// extent, in order, with the role its type declares.
fn declared_operands(args: &Args<'_>, rule: &Rule, dtype: DType) -> [Option<OperandSpec>; MAX_OPERANDS] {
    let mut ops = [None; MAX_OPERANDS];
    let specs = args.operands().filter_map(|(name, access, ptr)| {
        let e = rule.extent_of(name)?;
        let dtype = e.dtype.unwrap_or(dtype);
        Some(OperandSpec { name, ptr, shape: e.shape, dtype, members: e.members, role: role(access), increment: e.increment, triangle: e.triangle })
    });
    ops.iter_mut().zip(specs).for_each(|(slot, spec)| *slot = Some(spec));
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
/// the table's line, the shapes and argument checks from its rule. A rule that asks for an
/// argument its line lacks (the two out of step) checks nothing: the call is described without
/// operands or a broken rule, and the blas_family tests, which poison every declared function's
/// operands, fail.
fn declared(call: &Call<'_, c_int>, args: Args<'_>, rule: fn(&Args<'_>) -> Rule) -> c_int {
    let record = declared_record(&args);
    let describe = || {
        let rule = rule(&args);
        let dtype = element_type(args.hook);
        let scalar = |name| args.has_scalar(name).then(|| args.pointer(name));
        let (alpha, beta) = (scalar("alpha"), scalar("beta"));
        let (ops, problem) = match args.missed() {
            false => (declared_operands(&args, &rule, dtype), rule.problem),
            true => ([None; MAX_OPERANDS], None),
        };
        OperandCall {
            handle: args.handle(),
            lt: false,
            argument_problem: problem.map(|p| p.message()),
            scalar: rule.scalar.unwrap_or(dtype),
            alpha,
            beta,
            pointer_mode: None,
            stream: None,
            reduced_precision_compute: false,
            operands: ops,
        }
    };
    operand_call::guard(call, describe, record, ExArgs::default())
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
    let (x, y) = (Extent::vector(g.x().cols, a.int("incx")), Extent::vector(g.y().cols, a.int("incy")));
    Rule::new(g.check(), &[("A", Extent::matrix(g.a())), ("x", x), ("y", y)])
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
    let (x, y) = (Extent::vector(g.x_len(), a.int("incx")), Extent::vector(g.y_len(), a.int("incy")));
    Rule::new(g.check(), &[("A", Extent::matrix(g.a())), ("x", x), ("y", y)])
}

/// `cublas<t>dot`: result = x . y, written where the pointer mode says. n <= 0 is allowed.
pub(crate) fn dot(call: &Call<'_, c_int>, args: Args<'_>) -> c_int {
    declared(call, args, dot_rule)
}

fn dot_rule(a: &Args<'_>) -> Rule {
    let n = i64::from(a.int("n")).max(0);
    let extents = [("x", Extent::vector(n, a.int("incx"))), ("y", Extent::vector(n, a.int("incy"))), ("result", Extent::one())];
    Rule::new(blas::check_dot(a.pointer("result") == 0), &extents)
}

/// `cublasDotEx`: a dot product whose operands each have the type their `*Type` argument
/// names; the result's is the scalar type.
pub(crate) fn dot_ex(call: &Call<'_, c_int>, args: Args<'_>) -> c_int {
    declared(call, args, dot_ex_rule)
}

fn dot_ex_rule(a: &Args<'_>) -> Rule {
    let t = |name| DType::from_cuda(a.int(name));
    let n = i64::from(a.int("n")).max(0);
    let extents = [
        ("x", Extent::vector(n, a.int("incx")).of(t("xType"))),
        ("y", Extent::vector(n, a.int("incy")).of(t("yType"))),
        ("result", Extent::one().of(t("resultType"))),
    ];
    Rule { scalar: Some(t("resultType")), ..Rule::new(blas::check_dot(a.pointer("result") == 0), &extents) }
}

/// `cublas<t>trsm`: solves op(A) X = alpha B (or X op(A) = alpha B) in place of B, reading only
/// A's `uplo` triangle.
pub(crate) fn trsm(call: &Call<'_, c_int>, args: Args<'_>) -> c_int {
    declared(call, args, |a| trsm_rule(a, None))
}

/// `cublas<t>trsmBatched`: the same over arrays of `batchCount` pointers.
pub(crate) fn trsm_batched(call: &Call<'_, c_int>, args: Args<'_>) -> c_int {
    declared(call, args, |a| trsm_rule(a, Some(a.int("batchCount"))))
}

fn trsm_rule(a: &Args<'_>, batch: Option<c_int>) -> Rule {
    let t = TrsmArgs {
        side: Side::decode(a.int("side")),
        uplo: Fill::decode(a.int("uplo")),
        trans: Operation::decode(a.int("trans")),
        diag: Diag::decode(a.int("diag")),
        m: a.int("m").into(),
        n: a.int("n").into(),
        lda: a.int("lda").into(),
        ldb: a.int("ldb").into(),
        alpha_is_null: a.pointer("alpha") == 0,
        batch_count: batch.map_or(1, i64::from),
    };
    let members = match batch {
        Some(count) => Members::Array { count: i64::from(count).max(0) as u64 },
        None => Members::One,
    };
    let triangle = match t.uplo {
        Fill::Lower => Some(Triangle::Lower),
        Fill::Upper => Some(Triangle::Upper),
        Fill::Unknown(_) => None,
    };
    let matrix_a = Extent { triangle, ..Extent::matrix(t.a()).members(members) };
    Rule::new(t.check(), &[("A", matrix_a), ("B", Extent::matrix(t.b()).members(members))])
}

/// The batched LAPACK-style kernels: every matrix a pointer array of `batchSize` members; the
/// pivots one int array for the whole batch (n a member, one member after another), the device
/// info array one int a member; a host `int *info` is not device memory and only must not be
/// NULL.
fn factorisation_rule(a: &Args<'_>, f: Factorisation) -> Rule {
    let count = f.batch().max(0) as u64;
    let arrays = Members::Array { count };
    let mut rule = Rule::new(None, &[]);
    let rhs = if matches!(f, Factorisation::Gels { .. }) { "Carray" } else { "Barray" };
    for (name, shape) in [("Aarray", Some(f.a())), (rhs, f.rhs()), ("TauArray", f.tau())] {
        if let Some(shape) = shape {
            rule = rule.with(name, Extent::matrix(shape).members(arrays));
        }
    }
    let pivots = if matches!(f, Factorisation::Getrf { .. }) { "PivotArray" } else { "devIpiv" };
    if let Some(shape) = f.pivots().filter(|_| a.pointer(pivots) != 0) {
        rule = rule.with(pivots, Extent::matrix(shape).of(DType::I32).members(Members::Strided { count, stride: shape.rows }));
    }
    let info_array = if matches!(f, Factorisation::Getrf { .. }) { "infoArray" } else { "devInfoArray" };
    let has_info_array = matches!(f, Factorisation::Getrf { .. } | Factorisation::Gels { .. });
    if has_info_array && a.pointer(info_array) != 0 {
        rule = rule.with(info_array, Extent::matrix(blas::info_array(f.batch())).of(DType::I32));
    }
    let problem = f.check().or_else(|| match f {
        Factorisation::Getrf { .. } if a.pointer("infoArray") == 0 => Some(ArgProblem::NullPointer { name: "infoArray" }),
        Factorisation::Getrs { .. } | Factorisation::Geqrf { .. } | Factorisation::Gels { .. } if a.pointer("info") == 0 => {
            Some(ArgProblem::NullPointer { name: "info" })
        }
        _ => None,
    });
    Rule { problem, ..rule }
}

/// `cublas<t>getrfBatched`: LU factorisations in place, with pivoting unless PivotArray is NULL.
pub(crate) fn getrf_batched(call: &Call<'_, c_int>, args: Args<'_>) -> c_int {
    declared(call, args, |a| factorisation_rule(a, Factorisation::Getrf { n: a.int("n").into(), lda: a.int("lda").into(), batch: a.int("batchSize").into() }))
}

/// `cublas<t>getrsBatched`: solves with getrf's factors, in place of Barray.
pub(crate) fn getrs_batched(call: &Call<'_, c_int>, args: Args<'_>) -> c_int {
    declared(call, args, |a| {
        let f = Factorisation::Getrs {
            trans: Operation::decode(a.int("trans")),
            n: a.int("n").into(),
            nrhs: a.int("nrhs").into(),
            lda: a.int("lda").into(),
            ldb: a.int("ldb").into(),
            batch: a.int("batchSize").into(),
        };
        factorisation_rule(a, f)
    })
}

/// `cublas<t>geqrfBatched`: QR factorisations in place, the reflectors' scales in TauArray.
pub(crate) fn geqrf_batched(call: &Call<'_, c_int>, args: Args<'_>) -> c_int {
    declared(call, args, |a| {
        let f = Factorisation::Geqrf { m: a.int("m").into(), n: a.int("n").into(), lda: a.int("lda").into(), batch: a.int("batchSize").into() };
        factorisation_rule(a, f)
    })
}

/// `cublas<t>gelsBatched`: least-squares solutions, in place of Carray.
pub(crate) fn gels_batched(call: &Call<'_, c_int>, args: Args<'_>) -> c_int {
    declared(call, args, |a| {
        let f = Factorisation::Gels {
            trans: Operation::decode(a.int("trans")),
            m: a.int("m").into(),
            n: a.int("n").into(),
            nrhs: a.int("nrhs").into(),
            lda: a.int("lda").into(),
            ldc: a.int("ldc").into(),
            batch: a.int("batchSize").into(),
        };
        factorisation_rule(a, f)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hook_args::{Acc, Declare, In, Scalar};
    use std::ffi::c_void;

    fn sgbmv(lda: c_int, x: usize) -> [crate::hook_args::DeclaredArg; 14] {
        let p = |v: usize| v as In;
        [
            (0x10usize as *mut c_void).declared("handle"),
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
        let got: Vec<_> = ops.iter().flatten().map(|o| (o.name, o.ptr, o.role, o.shape, o.increment, o.dtype)).collect();
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
