//! Argument and extent rules for GEMMs, as NVIDIA documents them. Pure functions over plain
//! numbers: no pointers are dereferenced here, and all arithmetic is checked, because the
//! numbers come straight from a caller that may be broken.

pub mod blas;

use crate::cuda::{ComputeType, DType, Operation};

/// The integer arguments of a GEMM call (`int` or `int64_t` in the C API, widened).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemmArgs {
    pub transa: Operation,
    pub transb: Operation,
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub lda: i64,
    pub ldb: i64,
    pub ldc: i64,
    pub alpha_is_null: bool,
    pub beta_is_null: bool,
    /// 1 for a single GEMM.
    pub batch_count: i64,
}

/// The first rule a GEMM call breaks, in the order cuBLAS checks them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArgProblem {
    Negative {
        name: &'static str,
        value: i64,
    },
    BadOperation {
        name: &'static str,
        raw: i32,
    },
    LeadingDimension {
        name: &'static str,
        value: i64,
        needed: i64,
        rule: String,
    },
    NullScalar {
        name: &'static str,
    },
    /// A vector increment of 0 where the function needs a real stride.
    ZeroIncrement {
        name: &'static str,
    },
    /// Not one of the values of a cuBLAS enum (`cublasSideMode_t`, ...): `values` lists them.
    BadEnum {
        name: &'static str,
        raw: i32,
        type_name: &'static str,
        values: &'static str,
    },
    /// A pointer the function writes through is NULL.
    NullPointer {
        name: &'static str,
    },
    /// Valid, but a case the function does not implement (CUBLAS_STATUS_NOT_SUPPORTED).
    Unsupported {
        rule: String,
    },
}

impl ArgProblem {
    /// The argument the problem is about, as NVIDIA's headers name it.
    pub fn argument(&self) -> &'static str {
        match self {
            Self::Negative { name, .. }
            | Self::BadOperation { name, .. }
            | Self::LeadingDimension { name, .. }
            | Self::NullScalar { name }
            | Self::ZeroIncrement { name }
            | Self::BadEnum { name, .. }
            | Self::NullPointer { name } => name,
            Self::Unsupported { .. } => "",
        }
    }

    pub fn message(&self) -> String {
        match self {
            Self::Negative { name, value } => format!("{name} = {value} but {name} must be >= 0"),
            Self::BadOperation { name, raw } => {
                format!("{name} = {raw} is not a cublasOperation_t (CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2)")
            }
            Self::LeadingDimension { name, value, needed, rule } => {
                format!("{name} = {value} but {rule} = {needed}")
            }
            Self::NullScalar { name } => format!("{name} is NULL; cuBLAS needs a pointer to the scalar"),
            Self::ZeroIncrement { name } => format!("{name} = 0 but {name} must not be 0"),
            Self::BadEnum { name, raw, type_name, values } => format!("{name} = {raw} is not a {type_name} ({values})"),
            Self::NullPointer { name } => format!("{name} is NULL; the function writes its answer through it"),
            Self::Unsupported { rule } => rule.clone(),
        }
    }
}

/// Rows and columns of an operand as it is stored (column-major), before `op()` is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StoredShape {
    pub rows: i64,
    pub cols: i64,
    pub ld: i64,
}

/// A as stored: m x k when not transposed, k x m otherwise.
#[inline]
pub fn shape_of_a(args: &GemmArgs) -> StoredShape {
    let (rows, cols) = if args.transa.transposes() { (args.k, args.m) } else { (args.m, args.k) };
    StoredShape { rows, cols, ld: args.lda }
}

/// B as stored: k x n when not transposed, n x k otherwise.
#[inline]
pub fn shape_of_b(args: &GemmArgs) -> StoredShape {
    let (rows, cols) = if args.transb.transposes() { (args.n, args.k) } else { (args.k, args.n) };
    StoredShape { rows, cols, ld: args.ldb }
}

/// C is always m x n.
#[inline]
pub fn shape_of_c(args: &GemmArgs) -> StoredShape {
    StoredShape { rows: args.m, cols: args.n, ld: args.ldc }
}

/// Checks a GEMM's arguments against NVIDIA's documented rules; `None` when all hold.
#[inline]
pub fn check_gemm_args(args: &GemmArgs) -> Option<ArgProblem> {
    // Checked on every GEMM: the common answer first, without naming anything.
    if gemm_rules_hold(args) {
        return None;
    }
    gemm_rule_broken(args)
}

/// Every rule of `gemm_rule_broken` holds (it would answer `None`).
#[inline]
fn gemm_rules_hold(args: &GemmArgs) -> bool {
    let known = |op: Operation| !matches!(op, Operation::Unknown(_));
    let a_rows = if args.transa.transposes() { args.k } else { args.m };
    let b_rows = if args.transb.transposes() { args.n } else { args.k };
    (args.m | args.n | args.k | args.batch_count) >= 0
        && known(args.transa)
        && known(args.transb)
        && args.lda >= a_rows.max(1)
        && args.ldb >= b_rows.max(1)
        && args.ldc >= args.m.max(1)
        && !args.alpha_is_null
        && !args.beta_is_null
}

/// The first rule the arguments break, named.
#[inline(never)]
fn gemm_rule_broken(args: &GemmArgs) -> Option<ArgProblem> {
    for (name, value) in [("m", args.m), ("n", args.n), ("k", args.k), ("batchCount", args.batch_count)] {
        if value < 0 {
            return Some(ArgProblem::Negative { name, value });
        }
    }
    for (name, op) in [("transa", args.transa), ("transb", args.transb)] {
        if let Operation::Unknown(raw) = op {
            return Some(ArgProblem::BadOperation { name, raw });
        }
    }
    let a_rows = if args.transa.transposes() { ("k", args.k) } else { ("m", args.m) };
    let b_rows = if args.transb.transposes() { ("n", args.n) } else { ("k", args.k) };
    let rules = [
        ("lda", args.lda, a_rows, Some(("transa", args.transa))),
        ("ldb", args.ldb, b_rows, Some(("transb", args.transb))),
        ("ldc", args.ldc, ("m", args.m), None),
    ];
    for (name, value, (dim_name, dim), op) in rules {
        let needed = dim.max(1);
        if value < needed {
            let rule = match op {
                Some((op_name, op)) => format!("{op_name} = {} needs {name} >= max(1, {dim_name})", op.label()),
                None => format!("{name} must be >= max(1, {dim_name})"),
            };
            return Some(ArgProblem::LeadingDimension { name, value, needed, rule });
        }
    }
    if args.alpha_is_null {
        return Some(ArgProblem::NullScalar { name: "alpha" });
    }
    if args.beta_is_null {
        return Some(ArgProblem::NullScalar { name: "beta" });
    }
    None
}

/// cublasGemmEx's supported combinations (the cuBLAS documentation's table, shared by
/// cublasGemmBatchedEx and cublasGemmStridedBatchedEx): compute type, the type of A and B
/// (which must match), the type of C. `None` when supported, else why not.
///
/// | compute type | scale type | A/B | C |
/// |---|---|---|---|
/// | 16F, 16F_PEDANTIC | R_16F | R_16F | R_16F |
/// | 32I, 32I_PEDANTIC | R_32I | R_8I | R_32I |
/// | 32F, 32F_PEDANTIC | R_32F | R_16BF, R_16F | the same, or R_32F |
/// | | R_32F | R_8I, R_32F | R_32F |
/// | | C_32F | C_8I, C_32F | C_32F |
/// | 32F_FAST_16F, _16BF, _TF32, 32F_EMULATED_16BFX9 | R_32F / C_32F | R_32F / C_32F | R_32F / C_32F |
/// | 64F, 64F_PEDANTIC, 64F_EMULATED_FIXEDPOINT | R_64F / C_64F | R_64F / C_64F | R_64F / C_64F |
pub fn check_type_combination(compute: ComputeType, a: DType, b: DType, c: DType) -> Option<String> {
    if type_combination_supported(compute, a, b, c) {
        return None;
    }
    unsupported_type_combination(compute, a, b, c)
}

/// `check_type_combination` finds nothing (the lean path's question, without the message).
#[inline]
pub fn type_combination_supported(compute: ComputeType, a: DType, b: DType, c: DType) -> bool {
    use DType::*;
    a == b
        && match compute {
            ComputeType::F16 | ComputeType::F16Pedantic => a == F16 && c == F16,
            ComputeType::F32 | ComputeType::F32Pedantic => {
                matches!((a, c), (BF16, BF16) | (BF16, F32) | (F16, F16) | (F16, F32) | (I8, F32) | (F32, F32) | (CI8, C32) | (C32, C32))
            }
            ComputeType::F32Fast16F | ComputeType::F32Fast16BF | ComputeType::F32FastTF32 | ComputeType::F32Emulated16BFx9 => {
                matches!((a, c), (F32, F32) | (C32, C32))
            }
            ComputeType::F64 | ComputeType::F64Pedantic | ComputeType::F64EmulatedFixedPoint => matches!((a, c), (F64, F64) | (C64, C64)),
            ComputeType::I32 | ComputeType::I32Pedantic => a == I8 && c == I32,
            ComputeType::Unknown(_) => false,
        }
}

#[cold]
fn unsupported_type_combination(compute: ComputeType, a: DType, b: DType, c: DType) -> Option<String> {
    if let ComputeType::Unknown(raw) = compute {
        return Some(format!("computeType = {raw} is not a cublasComputeType_t"));
    }
    let needs = match compute {
        ComputeType::F16 | ComputeType::F16Pedantic => "A/B f16 with C f16",
        ComputeType::F32 | ComputeType::F32Pedantic => {
            "A/B bf16 or f16 with C of the same type or f32, A/B i8 with C f32, all f32, A/B ci8 with C c32, or all c32"
        }
        ComputeType::F64 | ComputeType::F64Pedantic | ComputeType::F64EmulatedFixedPoint => "all f64 or all c64",
        ComputeType::I32 | ComputeType::I32Pedantic => "A/B i8 with C i32",
        _ => "all f32 or all c32",
    };
    Some(format!("unsupported type combination: A {}, B {}, C {} with {} (it takes {needs})", a.name(), b.name(), c.name(), compute.name()))
}

/// The scale (alpha, beta) type a compute type implies; complex when C is complex (the
/// table's scale type column: C_32F with CUBLAS_COMPUTE_32F*, C_64F with CUBLAS_COMPUTE_64F*).
pub fn scale_type(compute: ComputeType, c: DType) -> DType {
    match compute {
        ComputeType::F16 | ComputeType::F16Pedantic => DType::F16,
        ComputeType::F64 | ComputeType::F64Pedantic | ComputeType::F64EmulatedFixedPoint if c == DType::C64 => DType::C64,
        ComputeType::F64 | ComputeType::F64Pedantic | ComputeType::F64EmulatedFixedPoint => DType::F64,
        ComputeType::I32 | ComputeType::I32Pedantic => DType::I32,
        _ if c == DType::C32 => DType::C32,
        _ => DType::F32,
    }
}

/// Bytes a column-major matrix spans: `(ld * (cols - 1) + rows) * elem_size`, or 0 when it
/// has no elements; `None` when a dimension is negative or the product overflows.
#[inline(always)]
pub fn operand_extent(shape: StoredShape, elem_size: u64) -> Option<u64> {
    if shape.rows < 0 || shape.cols < 0 || shape.ld < 0 {
        return None;
    }
    if shape.rows == 0 || shape.cols == 0 {
        return Some(0);
    }
    let (rows, cols, ld) = (shape.rows as u64, shape.cols as u64, shape.ld as u64);
    ld.checked_mul(cols - 1)?.checked_add(rows)?.checked_mul(elem_size)
}

/// A live allocation, as the guard tracked it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub base: u64,
    pub size: u64,
}

/// How an operand's extent sits against the allocation that holds its first byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Containment {
    Inside,
    /// Runs past the allocation's end by this many bytes.
    Overruns(u64),
}

#[inline]
pub fn containment(ptr: u64, extent: u64, allocation: Span) -> Containment {
    let offset = ptr.saturating_sub(allocation.base);
    let available = allocation.size.saturating_sub(offset);
    if extent <= available {
        Containment::Inside
    } else {
        Containment::Overruns(extent - available)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(clippy::too_many_arguments)]
    fn args(transa: i32, transb: i32, m: i64, n: i64, k: i64, lda: i64, ldb: i64, ldc: i64) -> GemmArgs {
        GemmArgs {
            transa: Operation::decode(transa),
            transb: Operation::decode(transb),
            m,
            n,
            k,
            lda,
            ldb,
            ldc,
            alpha_is_null: false,
            beta_is_null: false,
            batch_count: 1,
        }
    }

    #[test]
    fn the_quick_answer_is_the_named_rules_answer() {
        let values = [-1i64, 0, 1, 2, 3];
        for (transa, transb) in [(0, 0), (1, 2), (2, 0), (0, 7), (-1, 1)] {
            for &m in &values {
                for &n in &values {
                    for &k in &values {
                        for &ld in &values {
                            for (lda, ldb, ldc) in [(ld, 2, 2), (2, ld, 2), (2, 2, ld), (ld, ld, ld)] {
                                for (alpha_is_null, beta_is_null, batch_count) in [(false, false, 1), (true, false, 1), (false, true, 0), (false, false, -1)] {
                                    let a = GemmArgs { alpha_is_null, beta_is_null, batch_count, ..args(transa, transb, m, n, k, lda, ldb, ldc) };
                                    assert_eq!(gemm_rules_hold(&a), gemm_rule_broken(&a).is_none(), "{a:?}");
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn accepts_valid_calls() {
        assert_eq!(check_gemm_args(&args(0, 0, 8, 4, 3, 8, 3, 8)), None);
        assert_eq!(check_gemm_args(&args(1, 1, 8, 4, 3, 3, 4, 8)), None);
        assert_eq!(check_gemm_args(&args(0, 0, 0, 0, 0, 1, 1, 1)), None);
    }

    #[test]
    fn names_the_rule_for_a_small_lda() {
        let p = check_gemm_args(&args(0, 0, 8, 4, 3, 3, 3, 8)).unwrap();
        assert_eq!(p.argument(), "lda");
        assert_eq!(p.message(), "lda = 3 but transa = N needs lda >= max(1, m) = 8");
        let p = check_gemm_args(&args(1, 0, 8, 4, 3, 2, 3, 8)).unwrap();
        assert_eq!(p.message(), "lda = 2 but transa = T needs lda >= max(1, k) = 3");
    }

    #[test]
    fn checks_in_cublas_order() {
        assert_eq!(check_gemm_args(&args(9, 0, -1, 4, 3, 0, 0, 0)).unwrap().argument(), "m");
        assert_eq!(check_gemm_args(&args(9, 0, 1, 4, 3, 0, 0, 0)).unwrap().argument(), "transa");
        assert_eq!(check_gemm_args(&args(0, 0, 2, 4, 3, 2, 1, 2)).unwrap().argument(), "ldb");
        assert_eq!(check_gemm_args(&args(0, 1, 2, 4, 3, 2, 3, 2)).unwrap().argument(), "ldb");
        assert_eq!(check_gemm_args(&args(0, 0, 2, 4, 3, 2, 3, 1)).unwrap().argument(), "ldc");
        let mut a = args(0, 0, 2, 4, 3, 2, 3, 2);
        a.beta_is_null = true;
        assert_eq!(check_gemm_args(&a), Some(ArgProblem::NullScalar { name: "beta" }));
    }

    #[test]
    fn negative_batch_count_is_refused() {
        let mut a = args(0, 0, 2, 4, 3, 2, 3, 2);
        a.batch_count = -1;
        assert_eq!(check_gemm_args(&a).unwrap().message(), "batchCount = -1 but batchCount must be >= 0");
    }

    #[test]
    fn type_combinations_follow_the_gemm_ex_table() {
        use DType::*;
        let c = |compute: i32, a, b, cc| check_type_combination(ComputeType::decode(compute), a, b, cc);
        assert_eq!(c(68, F16, F16, F32), None);
        assert_eq!(c(68, BF16, BF16, BF16), None);
        assert_eq!(c(77, F32, F32, F32), None);
        assert_eq!(c(72, I8, I8, I32), None);
        let why = c(77, F16, F16, F32).unwrap();
        assert!(why.contains("A f16, B f16, C f32 with CUBLAS_COMPUTE_32F_FAST_TF32"), "{why}");
        assert!(c(68, F16, BF16, F32).is_some());
        assert!(c(0, F32, F32, F32).unwrap().contains("not a cublasComputeType_t"));
        assert_eq!(scale_type(ComputeType::F16, F16), F16);
    }

    #[test]
    fn every_row_of_nvidias_gemm_ex_table_is_accepted_complex_included() {
        use DType::*;
        // The cuBLAS documentation's cublasGemmEx table: (compute types, A/B, C).
        let rows: &[(&[i32], DType, DType)] = &[
            (&[64, 65], F16, F16),
            (&[72, 73], I8, I32),
            (&[68, 69], BF16, BF16),
            (&[68, 69], F16, F16),
            (&[68, 69], I8, F32),
            (&[68, 69], BF16, F32),
            (&[68, 69], F16, F32),
            (&[68, 69], F32, F32),
            (&[68, 69], CI8, C32),
            (&[68, 69], C32, C32),
            (&[74, 75, 77, 78], F32, F32),
            (&[74, 75, 77, 78], C32, C32),
            (&[70, 71, 79], F64, F64),
            (&[70, 71, 79], C64, C64),
        ];
        for (computes, ab, c) in rows {
            for &compute in *computes {
                let why = check_type_combination(ComputeType::decode(compute), *ab, *ab, *c);
                assert_eq!(why, None, "compute {compute}, A/B {}, C {}", ab.name(), c.name());
            }
        }
        assert_eq!(DType::from_cuda(7), CI8);
        assert_eq!(scale_type(ComputeType::F32, C32), C32);
        assert_eq!(scale_type(ComputeType::F64, C64), C64);
        assert_eq!(scale_type(ComputeType::F32, F32), F32);
        assert_eq!((scale_type(ComputeType::F64EmulatedFixedPoint, F64), scale_type(ComputeType::F64EmulatedFixedPoint, C64)), (F64, C64));
        assert_eq!(ComputeType::decode(79).name(), "CUBLAS_COMPUTE_64F_EMULATED_FIXEDPOINT");
    }

    #[test]
    fn wrong_complex_combinations_are_still_refused() {
        use DType::*;
        let c = |compute: i32, a, b, cc| check_type_combination(ComputeType::decode(compute), a, b, cc);
        assert!(c(68, C64, C64, C64).unwrap().contains("or all c32"));
        assert!(c(70, C32, C32, C32).unwrap().contains("all f64 or all c64"));
        assert!(c(68, C32, C32, F32).is_some());
        assert!(c(68, CI8, CI8, C64).is_some());
        assert!(c(77, CI8, CI8, C32).is_some());
        assert!(c(64, C32, C32, C32).is_some());
        assert!(c(72, CI8, CI8, I32).is_some());
        assert!(c(68, C32, F32, C32).is_some());
    }

    #[test]
    fn leading_dimension_is_at_least_one_for_empty_matrices() {
        assert_eq!(check_gemm_args(&args(0, 0, 0, 0, 0, 0, 1, 1)).unwrap().argument(), "lda");
    }

    #[test]
    fn extents_are_checked_arithmetic() {
        let s = |rows, cols, ld| StoredShape { rows, cols, ld };
        assert_eq!(operand_extent(s(3, 2, 5), 4), Some((5 + 3) * 4));
        assert_eq!(operand_extent(s(0, 7, 5), 4), Some(0));
        assert_eq!(operand_extent(s(-1, 7, 5), 4), None);
        assert_eq!(operand_extent(s(i64::MAX, i64::MAX, i64::MAX), 4), None);
    }

    #[test]
    fn containment_measures_the_overrun() {
        let span = Span { base: 1000, size: 100 };
        assert_eq!(containment(1000, 100, span), Containment::Inside);
        assert_eq!(containment(1050, 60, span), Containment::Overruns(10));
        assert_eq!(containment(1200, 4, span), Containment::Overruns(4));
    }
}
