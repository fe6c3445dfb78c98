//! Argument rules and operand shapes of the cuBLAS functions beyond GEMM, as NVIDIA documents
//! them: matrix-vector products, dot products, triangular solves, and the batched LU, QR and
//! least-squares kernels. Pure functions over plain numbers, in the order cuBLAS checks them.

use super::{ArgProblem, StoredShape};
use crate::cuda::{Diag, Fill, Operation, Side};

/// A strided vector of `n` elements, stored as a 1 x n matrix whose leading dimension is the
/// increment's magnitude: it spans `1 + (n - 1) * |inc|` elements. A negative increment walks
/// the same memory backwards from its far end, as in the reference BLAS, so the extent is the
/// same. An increment of 0 reads one element n times: a one-element vector.
pub fn vector_shape(n: i64, inc: i64) -> StoredShape {
    let n = n.max(0);
    match inc {
        0 => StoredShape { rows: n.min(1), cols: n.min(1), ld: 1 },
        _ => StoredShape { rows: n.min(1), cols: n, ld: inc.saturating_abs() },
    }
}

fn negative(dims: &[(&'static str, i64)]) -> Option<ArgProblem> {
    dims.iter().find(|(_, v)| *v < 0).map(|&(name, value)| ArgProblem::Negative { name, value })
}

fn operation(name: &'static str, op: Operation) -> Option<ArgProblem> {
    match op {
        Operation::Unknown(raw) => Some(ArgProblem::BadOperation { name, raw }),
        _ => None,
    }
}

fn leading(name: &'static str, value: i64, dim_name: &str, dim: i64, why: &str) -> Option<ArgProblem> {
    let needed = dim.max(1);
    (value < needed).then(|| ArgProblem::LeadingDimension { name, value, needed, rule: format!("{why}{name} must be >= max(1, {dim_name})") })
}

/// The integer arguments of `cublas<t>gemv`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GemvArgs {
    pub trans: Operation,
    pub m: i64,
    pub n: i64,
    pub lda: i64,
    pub incx: i64,
    pub incy: i64,
    pub alpha_is_null: bool,
    pub beta_is_null: bool,
}

impl GemvArgs {
    pub fn check(&self) -> Option<ArgProblem> {
        negative(&[("m", self.m), ("n", self.n)])
            .or_else(|| operation("trans", self.trans))
            .or_else(|| leading("lda", self.lda, "m", self.m, ""))
            .or_else(|| (self.incx == 0).then_some(ArgProblem::ZeroIncrement { name: "incx" }))
            .or_else(|| (self.incy == 0).then_some(ArgProblem::ZeroIncrement { name: "incy" }))
            .or_else(|| self.alpha_is_null.then_some(ArgProblem::NullScalar { name: "alpha" }))
            .or_else(|| self.beta_is_null.then_some(ArgProblem::NullScalar { name: "beta" }))
    }

    /// A is m x n as stored, whatever `trans`.
    pub fn a(&self) -> StoredShape {
        StoredShape { rows: self.m, cols: self.n, ld: self.lda }
    }

    /// x has n elements (m when A is transposed); y the other count.
    pub fn x(&self) -> StoredShape {
        vector_shape(if self.trans.transposes() { self.m } else { self.n }, self.incx)
    }

    pub fn y(&self) -> StoredShape {
        vector_shape(if self.trans.transposes() { self.n } else { self.m }, self.incy)
    }
}

/// The integer arguments of `cublas<t>gbmv`: A is an m x n band matrix with `kl` diagonals
/// below the main one and `ku` above, stored by its diagonals as a (kl + ku + 1) x n matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GbmvArgs {
    pub trans: Operation,
    pub m: i64,
    pub n: i64,
    pub kl: i64,
    pub ku: i64,
    pub lda: i64,
    pub incx: i64,
    pub incy: i64,
    pub alpha_is_null: bool,
    pub beta_is_null: bool,
}

impl GbmvArgs {
    fn diagonals(&self) -> i64 {
        self.kl.saturating_add(self.ku).saturating_add(1)
    }

    pub fn check(&self) -> Option<ArgProblem> {
        negative(&[("m", self.m), ("n", self.n), ("kl", self.kl), ("ku", self.ku)])
            .or_else(|| operation("trans", self.trans))
            .or_else(|| leading("lda", self.lda, "kl + ku + 1", self.diagonals(), ""))
            .or_else(|| (self.incx == 0).then_some(ArgProblem::ZeroIncrement { name: "incx" }))
            .or_else(|| (self.incy == 0).then_some(ArgProblem::ZeroIncrement { name: "incy" }))
            .or_else(|| self.alpha_is_null.then_some(ArgProblem::NullScalar { name: "alpha" }))
            .or_else(|| self.beta_is_null.then_some(ArgProblem::NullScalar { name: "beta" }))
    }

    /// The band as stored: its kl + ku + 1 diagonals, n columns, whatever `trans`.
    pub fn a(&self) -> StoredShape {
        StoredShape { rows: if self.m > 0 { self.diagonals() } else { 0 }, cols: self.n, ld: self.lda }
    }

    /// x has n elements (m when A is transposed); y the other count.
    pub fn x_len(&self) -> i64 {
        if self.trans.transposes() {
            self.m
        } else {
            self.n
        }
    }

    pub fn y_len(&self) -> i64 {
        if self.trans.transposes() {
            self.n
        } else {
            self.m
        }
    }
}

/// `cublas<t>dot`: n <= 0 is allowed (the result is 0), and so is an increment of 0 (one
/// element read n times); only a NULL result is refused.
pub fn check_dot(result_is_null: bool) -> Option<ArgProblem> {
    result_is_null.then_some(ArgProblem::NullPointer { name: "result" })
}

/// The integer arguments of `cublas<t>trsm` and `cublas<t>trsmBatched`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrsmArgs {
    pub side: Side,
    pub uplo: Fill,
    pub trans: Operation,
    pub diag: Diag,
    pub m: i64,
    pub n: i64,
    pub lda: i64,
    pub ldb: i64,
    pub alpha_is_null: bool,
    /// 1 for the unbatched form.
    pub batch_count: i64,
}

impl TrsmArgs {
    pub fn check(&self) -> Option<ArgProblem> {
        let bad = |name, raw, type_name, values| Some(ArgProblem::BadEnum { name, raw, type_name, values });
        negative(&[("m", self.m), ("n", self.n), ("batchCount", self.batch_count)])
            .or_else(|| match self.side {
                Side::Unknown(raw) => bad("side", raw, "cublasSideMode_t", "CUBLAS_SIDE_LEFT = 0, CUBLAS_SIDE_RIGHT = 1"),
                _ => None,
            })
            .or_else(|| match self.uplo {
                Fill::Unknown(raw) => bad("uplo", raw, "triangle", "CUBLAS_FILL_MODE_LOWER = 0, CUBLAS_FILL_MODE_UPPER = 1"),
                _ => None,
            })
            .or_else(|| operation("trans", self.trans))
            .or_else(|| match self.diag {
                Diag::Unknown(raw) => bad("diag", raw, "cublasDiagType_t", "CUBLAS_DIAG_NON_UNIT = 0, CUBLAS_DIAG_UNIT = 1"),
                _ => None,
            })
            .or_else(|| match self.side {
                Side::Right => leading("lda", self.lda, "n", self.n, "side = right: "),
                _ => leading("lda", self.lda, "m", self.m, "side = left: "),
            })
            .or_else(|| leading("ldb", self.ldb, "m", self.m, ""))
            .or_else(|| self.alpha_is_null.then_some(ArgProblem::NullScalar { name: "alpha" }))
    }

    /// A is the triangle: m x m on the left, n x n on the right.
    pub fn a(&self) -> StoredShape {
        let k = if self.side == Side::Right { self.n } else { self.m };
        StoredShape { rows: k, cols: k, ld: self.lda }
    }

    /// B (overwritten by the solution X) is m x n.
    pub fn b(&self) -> StoredShape {
        StoredShape { rows: self.m, cols: self.n, ld: self.ldb }
    }
}

/// The batched LAPACK-style kernels' integer arguments; `trans`, `m` and `nrhs` where the
/// function has them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Factorisation {
    /// `cublas<t>getrfBatched`: LU of n x n matrices, pivots and info per matrix.
    Getrf { n: i64, lda: i64, batch: i64 },
    /// `cublas<t>getrsBatched`: solves with the LU factors, for nrhs right-hand sides.
    Getrs { trans: Operation, n: i64, nrhs: i64, lda: i64, ldb: i64, batch: i64 },
    /// `cublas<t>geqrfBatched`: QR of m x n matrices, min(m, n) Householder scalars each.
    Geqrf { m: i64, n: i64, lda: i64, batch: i64 },
    /// `cublas<t>gelsBatched`: least squares for m >= n, not transposed.
    Gels { trans: Operation, m: i64, n: i64, nrhs: i64, lda: i64, ldc: i64, batch: i64 },
}

impl Factorisation {
    pub fn check(&self) -> Option<ArgProblem> {
        match *self {
            Self::Getrf { n, lda, batch } => negative(&[("n", n), ("batchSize", batch)]).or_else(|| leading("lda", lda, "n", n, "")),
            Self::Getrs { trans, n, nrhs, lda, ldb, batch } => negative(&[("n", n), ("nrhs", nrhs), ("batchSize", batch)])
                .or_else(|| operation("trans", trans))
                .or_else(|| leading("lda", lda, "n", n, ""))
                .or_else(|| leading("ldb", ldb, "n", n, "")),
            Self::Geqrf { m, n, lda, batch } => negative(&[("m", m), ("n", n), ("batchSize", batch)]).or_else(|| leading("lda", lda, "m", m, "")),
            Self::Gels { trans, m, n, nrhs, lda, ldc, batch } => negative(&[("m", m), ("n", n), ("nrhs", nrhs), ("batchSize", batch)])
                .or_else(|| operation("trans", trans))
                .or_else(|| leading("lda", lda, "m", m, ""))
                .or_else(|| leading("ldc", ldc, "m", m, ""))
                .or_else(|| {
                    (trans != Operation::N).then(|| ArgProblem::Unsupported {
                        rule: format!("trans = {} but gelsBatched solves only the non-transposed problem (CUBLAS_OP_N)", trans.label()),
                    })
                })
                .or_else(|| {
                    (m < n)
                        .then(|| ArgProblem::Unsupported { rule: format!("m = {m} < n = {n} but gelsBatched solves only m >= n (square or overdetermined)") })
                }),
        }
    }

    pub fn batch(&self) -> i64 {
        match *self {
            Self::Getrf { batch, .. } | Self::Getrs { batch, .. } | Self::Geqrf { batch, .. } | Self::Gels { batch, .. } => batch,
        }
    }

    /// Each batch member's matrix A as stored.
    pub fn a(&self) -> StoredShape {
        match *self {
            Self::Getrf { n, lda, .. } | Self::Getrs { n, lda, .. } => StoredShape { rows: n, cols: n, ld: lda },
            Self::Geqrf { m, n, lda, .. } | Self::Gels { m, n, lda, .. } => StoredShape { rows: m, cols: n, ld: lda },
        }
    }

    /// Each member's right-hand sides (B of getrs, C of gels).
    pub fn rhs(&self) -> Option<StoredShape> {
        match *self {
            Self::Getrs { n, nrhs, ldb, .. } => Some(StoredShape { rows: n, cols: nrhs, ld: ldb }),
            Self::Gels { m, nrhs, ldc, .. } => Some(StoredShape { rows: m, cols: nrhs, ld: ldc }),
            _ => None,
        }
    }

    /// The pivots of one member (n ints; the batch's pivots are one array of n * batch).
    pub fn pivots(&self) -> Option<StoredShape> {
        match *self {
            Self::Getrf { n, .. } | Self::Getrs { n, .. } => Some(StoredShape { rows: n.max(0), cols: 1, ld: n.max(0) }),
            _ => None,
        }
    }

    /// geqrf's Householder scalars of one member: min(m, n) elements.
    pub fn tau(&self) -> Option<StoredShape> {
        match *self {
            Self::Geqrf { m, n, .. } => {
                let k = m.min(n).max(0);
                Some(StoredShape { rows: k, cols: 1, ld: k })
            }
            _ => None,
        }
    }
}

/// One int per batch member (getrf's infoArray, gels's devInfoArray).
pub fn info_array(batch: i64) -> StoredShape {
    StoredShape { rows: batch.max(0), cols: 1, ld: batch.max(0) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validate::operand_extent;

    fn gemv(m: i64, n: i64, lda: i64, incx: i64, incy: i64) -> GemvArgs {
        GemvArgs { trans: Operation::N, m, n, lda, incx, incy, alpha_is_null: false, beta_is_null: false }
    }

    #[test]
    fn a_strided_vector_spans_one_plus_n_minus_one_increments() {
        assert_eq!(operand_extent(vector_shape(4, 3), 4), Some((1 + 3 * 3) * 4));
        assert_eq!(operand_extent(vector_shape(4, -3), 4), Some((1 + 3 * 3) * 4), "a negative increment spans the same memory");
        assert_eq!(operand_extent(vector_shape(1, 100), 8), Some(8));
        assert_eq!(operand_extent(vector_shape(0, 1), 4), Some(0));
        assert_eq!(operand_extent(vector_shape(5, 0), 4), Some(4), "increment 0 reads one element");
    }

    #[test]
    fn gemv_follows_nvidias_rules_in_order() {
        assert_eq!(gemv(3, 2, 3, 1, 1).check(), None);
        assert_eq!(gemv(-1, 2, 3, 1, 1).check(), Some(ArgProblem::Negative { name: "m", value: -1 }));
        assert_eq!(gemv(3, 2, 2, 1, 1).check().map(|p| p.argument()), Some("lda"));
        assert_eq!(gemv(3, 2, 3, 0, 1).check(), Some(ArgProblem::ZeroIncrement { name: "incx" }));
        assert_eq!(gemv(3, 2, 3, 1, 0).check(), Some(ArgProblem::ZeroIncrement { name: "incy" }));
        let mut bad = gemv(3, 2, 3, 1, 1);
        bad.trans = Operation::Unknown(7);
        assert_eq!(bad.check().map(|p| p.argument()), Some("trans"));
        bad = gemv(3, 2, 3, 1, 1);
        bad.beta_is_null = true;
        assert_eq!(bad.check(), Some(ArgProblem::NullScalar { name: "beta" }));
    }

    fn gbmv(m: i64, n: i64, kl: i64, ku: i64, lda: i64) -> GbmvArgs {
        GbmvArgs { trans: Operation::N, m, n, kl, ku, lda, incx: 1, incy: 1, alpha_is_null: false, beta_is_null: false }
    }

    #[test]
    fn gbmv_follows_nvidias_rules_in_order() {
        assert_eq!(gbmv(4, 3, 1, 1, 3).check(), None);
        assert_eq!(gbmv(4, 3, -1, 1, 3).check(), Some(ArgProblem::Negative { name: "kl", value: -1 }));
        assert_eq!(gbmv(4, 3, 1, -2, 3).check(), Some(ArgProblem::Negative { name: "ku", value: -2 }));
        let lda = gbmv(4, 3, 1, 1, 2).check().expect("lda below kl + ku + 1");
        assert_eq!(lda.message(), "lda = 2 but lda must be >= max(1, kl + ku + 1) = 3");
        let mut bad = gbmv(4, 3, 1, 1, 3);
        bad.incy = 0;
        assert_eq!(bad.check(), Some(ArgProblem::ZeroIncrement { name: "incy" }));
        bad = gbmv(4, 3, 1, 1, 3);
        bad.trans = Operation::Unknown(5);
        assert_eq!(bad.check().map(|p| p.argument()), Some("trans"));
    }

    #[test]
    fn a_band_matrix_is_stored_as_its_diagonals_and_its_vectors_follow_the_transpose() {
        let mut g = gbmv(5, 3, 2, 1, 6);
        assert_eq!(g.a(), StoredShape { rows: 4, cols: 3, ld: 6 });
        assert_eq!((g.x_len(), g.y_len()), (3, 5));
        g.trans = Operation::T;
        assert_eq!((g.x_len(), g.y_len()), (5, 3));
        assert_eq!(gbmv(0, 3, 2, 1, 6).a().rows, 0, "an empty product reads no band");
    }

    #[test]
    fn gemv_vectors_follow_the_transpose() {
        let mut g = gemv(3, 2, 3, 2, -1);
        assert_eq!((g.x().cols, g.x().ld, g.y().cols, g.y().ld), (2, 2, 3, 1));
        g.trans = Operation::T;
        assert_eq!((g.x().cols, g.y().cols), (3, 2));
    }

    fn trsm(side: i32, m: i64, n: i64, lda: i64, ldb: i64) -> TrsmArgs {
        TrsmArgs { side: Side::decode(side), uplo: Fill::Lower, trans: Operation::N, diag: Diag::NonUnit, m, n, lda, ldb, alpha_is_null: false, batch_count: 1 }
    }

    #[test]
    fn trsm_measures_lda_against_the_side_of_a() {
        assert_eq!(trsm(0, 4, 2, 4, 4).check(), None);
        let p = trsm(0, 4, 2, 2, 4).check().expect("left side needs lda >= m");
        assert!(p.message().contains("side = left: lda must be >= max(1, m)"), "{}", p.message());
        assert_eq!(trsm(1, 4, 2, 2, 4).check(), None, "right side: lda >= n");
        assert_eq!((trsm(1, 4, 2, 2, 4).a().rows, trsm(0, 4, 2, 4, 4).a().rows), (2, 4));
        assert_eq!(trsm(0, 4, 2, 4, 3).check().map(|p| p.argument()), Some("ldb"));
        let p = trsm(5, 4, 2, 4, 4).check().expect("bad side");
        assert_eq!(p.argument(), "side");
        assert!(p.message().contains("CUBLAS_SIDE_LEFT = 0"), "{}", p.message());
        let mut t = trsm(0, 4, 2, 4, 4);
        t.uplo = Fill::decode(2);
        assert_eq!(t.check().map(|p| p.argument()), Some("uplo"), "a full matrix is not a triangle");
        t = trsm(0, 4, 2, 4, 4);
        t.diag = Diag::decode(-1);
        assert_eq!(t.check().map(|p| p.argument()), Some("diag"));
        t = trsm(0, 4, 2, 4, 4);
        t.batch_count = -2;
        assert_eq!(t.check(), Some(ArgProblem::Negative { name: "batchCount", value: -2 }));
    }

    #[test]
    fn the_batched_factorisations_check_their_own_dimensions() {
        assert_eq!(Factorisation::Getrf { n: 3, lda: 3, batch: 2 }.check(), None);
        assert_eq!(Factorisation::Getrf { n: 3, lda: 2, batch: 2 }.check().map(|p| p.argument()), Some("lda"));
        assert_eq!(Factorisation::Getrf { n: 3, lda: 3, batch: -1 }.check().map(|p| p.argument()), Some("batchSize"));
        let getrs = |ldb| Factorisation::Getrs { trans: Operation::N, n: 3, nrhs: 2, lda: 3, ldb, batch: 1 };
        assert_eq!(getrs(3).check(), None);
        assert_eq!(getrs(2).check().map(|p| p.argument()), Some("ldb"));
        assert_eq!(getrs(3).rhs(), Some(StoredShape { rows: 3, cols: 2, ld: 3 }));
        assert_eq!(Factorisation::Geqrf { m: 4, n: 2, lda: 3, batch: 1 }.check().map(|p| p.argument()), Some("lda"));
        assert_eq!(Factorisation::Geqrf { m: 4, n: 2, lda: 4, batch: 1 }.tau(), Some(StoredShape { rows: 2, cols: 1, ld: 2 }));
        let gels = |trans, m, n| Factorisation::Gels { trans, m, n, nrhs: 1, lda: 4, ldc: 4, batch: 1 };
        assert_eq!(gels(Operation::N, 4, 2).check(), None);
        let p = gels(Operation::N, 2, 4).check().expect("m < n");
        assert!(matches!(p, ArgProblem::Unsupported { .. }) && p.message().contains("m >= n"), "{}", p.message());
        assert!(matches!(gels(Operation::T, 4, 2).check(), Some(ArgProblem::Unsupported { .. })));
        assert_eq!(gels(Operation::Unknown(9), 4, 2).check().map(|p| p.argument()), Some("trans"));
    }

    #[test]
    fn dot_refuses_only_a_null_result() {
        assert_eq!(check_dot(false), None);
        assert_eq!(check_dot(true).map(|p| p.message()), Some("result is NULL; the function writes its answer through it".into()));
    }
}
