//! cublasLtMatmul's rules. cublasLt does not validate layouts when they are created, only
//! when a matmul uses them, so a wrong layout surfaces far from where it was made; the guard
//! checks them at the call and says which layout and which rule.

use crate::cuda::{ComputeType, Operation};
use crate::scan::DType;
use crate::validate::{self, StoredShape};

pub const ORDER_COL: i32 = 0;
pub const ORDER_ROW: i32 = 1;
pub const EPILOGUE_BIAS_BIT: u32 = 4;

/// A matrix layout's attributes, as `cublasLtMatrixLayoutGetAttribute` reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub dtype: i32,
    pub order: i32,
    pub rows: u64,
    pub cols: u64,
    pub ld: i64,
    pub batch: i32,
    pub stride: i64,
}

impl Layout {
    /// As stored column-major (a row-major layout is its transpose); `None` for the tiled
    /// orders (COL32, ...), which the guard does not model.
    pub fn stored(&self) -> Option<StoredShape> {
        let (rows, cols) = match self.order {
            ORDER_COL => (self.rows, self.cols),
            ORDER_ROW => (self.cols, self.rows),
            _ => return None,
        };
        Some(StoredShape { rows: i64::try_from(rows).ok()?, cols: i64::try_from(cols).ok()?, ld: self.ld })
    }

    /// rows x cols after `op`.
    fn op_dims(&self, op: Operation) -> (u64, u64) {
        if op.transposes() {
            (self.cols, self.rows)
        } else {
            (self.rows, self.cols)
        }
    }
}

/// A matmul descriptor's attributes, as `cublasLtMatmulDescGetAttribute` reports them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulDesc {
    pub compute: i32,
    pub scale: i32,
    pub pointer_mode: i32,
    pub transa: i32,
    pub transb: i32,
    pub epilogue: u32,
    pub bias: u64,
    pub bias_stride: i64,
    pub bias_type: i32,
}

impl MatmulDesc {
    pub fn has_bias(&self) -> bool {
        self.epilogue & EPILOGUE_BIAS_BIT != 0
    }

    /// The bias vector's type: its own attribute, or D's type when that is -1 (the default).
    pub fn bias_dtype(&self, d: &Layout) -> DType {
        DType::from_cuda(if self.bias_type >= 0 { self.bias_type } else { d.dtype })
    }
}

pub fn epilogue_name(epilogue: u32) -> String {
    match epilogue {
        1 => "CUBLASLT_EPILOGUE_DEFAULT".into(),
        2 => "CUBLASLT_EPILOGUE_RELU".into(),
        4 => "CUBLASLT_EPILOGUE_BIAS".into(),
        6 => "CUBLASLT_EPILOGUE_RELU_BIAS".into(),
        32 => "CUBLASLT_EPILOGUE_GELU".into(),
        36 => "CUBLASLT_EPILOGUE_GELU_BIAS".into(),
        other => format!("epilogue({other})"),
    }
}

/// m, n, k of a matmul whose layouts agree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dims {
    pub m: u64,
    pub n: u64,
    pub k: u64,
}

/// The first rule the call breaks, or its dimensions.
pub fn check(desc: &MatmulDesc, layouts: [&Layout; 4], alpha_null: bool, beta_null: bool) -> Result<Dims, String> {
    let dims = check_descriptors(desc, layouts)?;
    if alpha_null || beta_null {
        return Err(format!("{} is NULL", if alpha_null { "alpha" } else { "beta" }));
    }
    Ok(dims)
}

/// `check`'s rules of the descriptors alone (all but alpha's and beta's): the same answer
/// for as long as the descriptors are unchanged.
pub fn check_descriptors(desc: &MatmulDesc, [a, b, c, d]: [&Layout; 4]) -> Result<Dims, String> {
    let (ta, tb) = (Operation::decode(desc.transa), Operation::decode(desc.transb));
    for (name, op) in [("TRANSA", ta), ("TRANSB", tb)] {
        if let Operation::Unknown(raw) = op {
            return Err(format!("CUBLASLT_MATMUL_DESC_{name} = {raw} is not a cublasOperation_t"));
        }
    }
    for (name, l) in [("Adesc", a), ("Bdesc", b), ("Cdesc", c), ("Ddesc", d)] {
        let (what, needed) = match l.order {
            ORDER_COL => ("rows", l.rows),
            ORDER_ROW => ("cols", l.cols),
            _ => continue, // tiled orders: not modelled
        };
        let needed = needed.max(1);
        if l.ld < 1 || (l.ld as u64) < needed {
            let order = if l.order == ORDER_COL { "CUBLASLT_ORDER_COL" } else { "CUBLASLT_ORDER_ROW" };
            return Err(format!("{name}: ld = {} but {order} needs ld >= max(1, {what}) = {needed}", l.ld));
        }
    }
    let (m, n) = (d.rows, d.cols);
    let (a_rows, a_cols) = a.op_dims(ta);
    let (b_rows, b_cols) = b.op_dims(tb);
    let shape = |r: u64, c: u64| format!("{r} x {c}");
    if a_rows != m {
        return Err(format!("op(A) is {} but D is {}: op(A) must have D's {m} rows", shape(a_rows, a_cols), shape(m, n)));
    }
    if b_cols != n {
        return Err(format!("op(B) is {} but D is {}: op(B) must have D's {n} columns", shape(b_rows, b_cols), shape(m, n)));
    }
    if a_cols != b_rows {
        return Err(format!("op(A) is {} and op(B) is {}: k differs ({a_cols} vs {b_rows})", shape(a_rows, a_cols), shape(b_rows, b_cols)));
    }
    if (c.rows, c.cols) != (m, n) {
        return Err(format!("C is {} but D is {}: they must match", shape(c.rows, c.cols), shape(m, n)));
    }
    if [a.batch, b.batch, c.batch].iter().any(|&bc| bc != d.batch) {
        return Err(format!("batch counts differ: A {}, B {}, C {}, D {}", a.batch, b.batch, c.batch, d.batch));
    }
    if d.batch < 0 {
        return Err(format!("batch count = {} but it must be >= 0", d.batch));
    }
    if c.dtype != d.dtype {
        return Err(format!("C is {} but D is {}: they must have one type", DType::from_cuda(c.dtype).name(), DType::from_cuda(d.dtype).name()));
    }
    let (at, bt, dt) = (DType::from_cuda(a.dtype), DType::from_cuda(b.dtype), DType::from_cuda(d.dtype));
    let fp8 = matches!(at, DType::F8E4M3 | DType::F8E5M2);
    if !fp8 {
        if let Some(why) = validate::check_type_combination(ComputeType::decode(desc.compute), at, bt, dt) {
            return Err(why);
        }
    }
    if desc.has_bias() && desc.bias == 0 {
        return Err(format!("the epilogue is {} but CUBLASLT_MATMUL_DESC_BIAS_POINTER is NULL", epilogue_name(desc.epilogue)));
    }
    Ok(Dims { m, n, k: a_cols })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(dtype: i32, rows: u64, cols: u64, ld: i64) -> Layout {
        Layout { dtype, order: ORDER_COL, rows, cols, ld, batch: 1, stride: 0 }
    }

    /// PyTorch's gemm_and_bias for nn.Linear(8, 16) on a batch of 32: transa = T on the
    /// weight (stored 8 x 16), transb = N on the input (8 x 32), D 16 x 32, bias epilogue.
    fn linear() -> (MatmulDesc, [Layout; 4]) {
        let desc = MatmulDesc { compute: 68, scale: 0, pointer_mode: 0, transa: 1, transb: 0, epilogue: 4, bias: 0x1000, bias_stride: 0, bias_type: -1 };
        (desc, [layout(0, 8, 16, 8), layout(0, 8, 32, 8), layout(0, 16, 32, 16), layout(0, 16, 32, 16)])
    }

    #[test]
    fn accepts_a_linear_layer_and_finds_m_n_k() {
        let (desc, [a, b, c, d]) = linear();
        assert_eq!(check(&desc, [&a, &b, &c, &d], false, false), Ok(Dims { m: 16, n: 32, k: 8 }));
        assert_eq!(desc.bias_dtype(&d), DType::F32);
    }

    #[test]
    fn names_the_layout_and_rule_that_break() {
        let (desc, [a, mut b, c, d]) = linear();
        b.rows = 12; // the input has a wrong feature width
        b.ld = 12;
        let why = check(&desc, [&a, &b, &c, &d], false, false).unwrap_err();
        assert_eq!(why, "op(A) is 16 x 8 and op(B) is 12 x 32: k differs (8 vs 12)");
        let (desc, [a, b, c, mut d]) = linear();
        d.ld = 4;
        let why = check(&desc, [&a, &b, &c, &d], false, false).unwrap_err();
        assert!(why.starts_with("Ddesc: ld = 4 but CUBLASLT_ORDER_COL needs ld >= max(1, rows) = 16"), "{why}");
        let (mut desc, [a, b, c, d]) = linear();
        desc.bias = 0;
        assert!(check(&desc, [&a, &b, &c, &d], false, false).unwrap_err().contains("BIAS_POINTER is NULL"));
    }

    #[test]
    fn row_major_layouts_are_stored_transposed() {
        let l = Layout { dtype: 0, order: ORDER_ROW, rows: 3, cols: 5, ld: 5, batch: 1, stride: 0 };
        assert_eq!(l.stored(), Some(StoredShape { rows: 5, cols: 3, ld: 5 }));
        let tiled = Layout { order: 2, ..l };
        assert_eq!(tiled.stored(), None);
    }
}
