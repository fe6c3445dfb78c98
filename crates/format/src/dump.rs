//! Operand dumps (`CUBLASGUARD_DUMP`): the operands of a faulting matrix multiply in one
//! safetensors file, with the call in its metadata, for `cublasguard replay` and for bug
//! reports. This module is the format, both ways; the guard gathers the bytes (guard/dump.rs).
//!
//! Each operand is stored as the matrix it is in memory: rows x cols as stored (column-major,
//! before `op()`), padding dropped, written row-major as safetensors expects, so element
//! `[r, c]` of the file is element (r, c) of the stored matrix; batches add a leading
//! dimension. A complex float matrix is safetensors' C64; a complex double one is F64 with a
//! trailing dimension of 2 (safetensors has no complex128).

use std::collections::{BTreeMap, HashMap};

use safetensors::Dtype;

use crate::cuda::DType;

/// The version of the metadata below; `replay` refuses a newer one.
pub const FORMAT: u64 = 1;
/// The metadata key holding the call record (JSON).
pub const METADATA_KEY: &str = "cublasguard";

/// One operand as dumped.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    /// `A`, `B`, `C` (before the call), `bias`, `C_out`/`D_out` (after it).
    pub name: String,
    pub dtype: DType,
    /// Batch members, when the operand is batched.
    pub batch: Option<u64>,
    pub rows: u64,
    pub cols: u64,
    /// Row-major, member after member.
    pub data: Vec<u8>,
}

/// Appends one stored member, given as packed columns (`rows * elem` bytes each), row-major.
pub fn append_row_major(columns: &[u8], rows: usize, cols: usize, elem: usize, out: &mut Vec<u8>) {
    out.reserve(rows * cols * elem);
    for r in 0..rows {
        for c in 0..cols {
            let at = (c * rows + r) * elem;
            out.extend_from_slice(columns.get(at..at + elem).unwrap_or(&[]));
        }
    }
}

/// The safetensors type of a dtype, and the trailing dimension it needs (complex double).
fn file_dtype(dtype: DType) -> Option<(Dtype, Option<usize>)> {
    Some(match dtype {
        DType::F64 => (Dtype::F64, None),
        DType::F32 => (Dtype::F32, None),
        DType::F16 => (Dtype::F16, None),
        DType::BF16 => (Dtype::BF16, None),
        DType::F8E4M3 => (Dtype::F8_E4M3, None),
        DType::F8E5M2 => (Dtype::F8_E5M2, None),
        DType::I8 => (Dtype::I8, None),
        DType::I32 => (Dtype::I32, None),
        DType::C32 => (Dtype::C64, None),
        DType::C64 => (Dtype::F64, Some(2)),
        DType::CI8 => (Dtype::I8, Some(2)),
        DType::Unknown(_) => return None,
    })
}

/// Whether a dtype can be dumped at all.
pub fn dumpable(dtype: DType) -> bool {
    file_dtype(dtype).is_some()
}

/// The safetensors file for `tensors`, with `metadata` under [`METADATA_KEY`].
pub fn encode(tensors: &[Tensor], metadata: &serde_json::Value) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    write_to(&tensors.iter().collect::<Vec<_>>(), metadata, &mut out).map_err(|e| e.to_string())?;
    Ok(out)
}

/// A tensor as safetensors' header sees it: its type, shape and length, but no bytes, so the
/// header is made without copying the operands into one buffer of the whole file (the guard
/// writes dumps inside programs that may be short of memory). `data` notes the order in
/// which the serializer asks for the tensors, which is the order of their bytes in the file.
struct HeaderOnly<'a> {
    index: usize,
    dtype: Dtype,
    shape: Vec<usize>,
    len: usize,
    order: &'a std::cell::RefCell<Vec<usize>>,
}

impl safetensors::View for HeaderOnly<'_> {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> std::borrow::Cow<'_, [u8]> {
        self.order.borrow_mut().push(self.index);
        std::borrow::Cow::Borrowed(&[])
    }
    fn data_len(&self) -> usize {
        self.len
    }
}

/// Streams the safetensors file for `tensors` into `out`: the header, then each tensor's
/// bytes as they are, never a copy of the whole file in memory.
pub fn write_to(tensors: &[&Tensor], metadata: &serde_json::Value, out: &mut impl std::io::Write) -> std::io::Result<()> {
    let order = std::cell::RefCell::new(Vec::with_capacity(tensors.len()));
    let mut views = Vec::with_capacity(tensors.len());
    for (index, t) in tensors.iter().enumerate() {
        let (dtype, trailing) = file_dtype(t.dtype).ok_or_else(|| std::io::Error::other(format!("{}: {} cannot be stored", t.name, t.dtype.name())))?;
        let mut shape: Vec<usize> = t.batch.map(|b| b as usize).into_iter().collect();
        shape.extend([t.rows as usize, t.cols as usize]);
        shape.extend(trailing);
        // The same check TensorView::new makes: the bytes are exactly the shape's.
        let elements = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
        let bits = elements.and_then(|n| n.checked_mul(dtype.bitsize()));
        if bits != t.data.len().checked_mul(8) {
            return Err(std::io::Error::other(format!("{}: {} bytes do not make a {shape:?} {dtype:?} tensor", t.name, t.data.len())));
        }
        views.push((t.name.clone(), HeaderOnly { index, dtype, shape, len: t.data.len(), order: &order }));
    }
    let info = HashMap::from([(METADATA_KEY.to_string(), metadata.to_string())]);
    // Every view's data is empty: what comes back is the length word and the header.
    let header = safetensors::serialize(views, Some(info)).map_err(std::io::Error::other)?;
    out.write_all(&header)?;
    for &i in order.borrow().iter() {
        if let Some(t) = tensors.get(i) {
            out.write_all(&t.data)?;
        }
    }
    Ok(())
}

/// A dumped operand, decoded: every element as (real, imaginary), imaginary 0 for real types.
#[derive(Clone, Debug, PartialEq)]
pub struct Matrix {
    pub dtype: DType,
    pub batch: usize,
    pub rows: usize,
    pub cols: usize,
    pub values: Vec<[f64; 2]>,
    /// The bytes as stored in the file (row-major), for rerunning the call.
    pub raw: Vec<u8>,
}

impl Matrix {
    pub fn at(&self, member: usize, row: usize, col: usize) -> [f64; 2] {
        self.values.get((member * self.rows + row) * self.cols + col).copied().unwrap_or([f64::NAN, 0.0])
    }
}

/// A dump read back.
#[derive(Clone, Debug)]
pub struct Dump {
    /// The call record the guard wrote.
    pub meta: serde_json::Value,
    pub tensors: BTreeMap<String, Matrix>,
}

pub fn dtype_named(name: &str) -> Option<DType> {
    [DType::F64, DType::F32, DType::F16, DType::BF16, DType::F8E4M3, DType::F8E5M2, DType::I8, DType::I32, DType::C32, DType::C64]
        .into_iter()
        .find(|d| d.name() == name)
}

/// A dumped operand's type and shape as the file's header gives them, checked against the call
/// record: what replay validates the call against before it reads any element.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shape {
    pub dtype: DType,
    /// 1 when the operand is not batched.
    pub batch: usize,
    pub rows: usize,
    pub cols: usize,
}

impl Shape {
    /// Elements in all members; `None` when that does not fit a usize.
    pub fn elements(&self) -> Option<usize> {
        self.batch.checked_mul(self.rows)?.checked_mul(self.cols)
    }
}

/// The call record and the operands' shapes, from a dump's header alone.
#[derive(Clone, Debug)]
pub struct Header {
    pub meta: serde_json::Value,
    pub shapes: BTreeMap<String, Shape>,
}

/// A dimension from the call record: a non-negative integer that fits a usize.
fn dimension(described: &serde_json::Value, name: &str, what: &str) -> Result<Option<usize>, String> {
    match &described[what] {
        serde_json::Value::Null => Ok(None),
        v => v.as_u64().and_then(|v| usize::try_from(v).ok()).map(Some).ok_or_else(|| format!("{name}: {what} in the call record is {v}, not a size")),
    }
}

/// One operand's shape: the call record's dtype, batch, rows and columns, which must be what
/// the file stores (its dtype and shape), so no size below comes from the record alone.
fn shape_of(name: &str, meta: &serde_json::Value, stored: Dtype, stored_shape: &[usize]) -> Result<Shape, String> {
    let described = &meta["tensors"][name];
    let dtype = described["dtype"].as_str().and_then(dtype_named).ok_or_else(|| format!("{name}: no dtype in the call record"))?;
    let rows = dimension(described, name, "rows")?.ok_or_else(|| format!("{name}: no rows in the call record"))?;
    let cols = dimension(described, name, "cols")?.ok_or_else(|| format!("{name}: no cols in the call record"))?;
    let batch = dimension(described, name, "batch")?;
    if batch == Some(0) {
        return Err(format!("{name}: a batch of 0 members in the call record"));
    }
    let (file, trailing) = file_dtype(dtype).ok_or_else(|| format!("{name}: {} cannot be stored", dtype.name()))?;
    let mut expected: Vec<usize> = batch.into_iter().collect();
    expected.extend([rows, cols]);
    expected.extend(trailing);
    if file != stored || expected != stored_shape {
        return Err(format!(
            "{name}: the call record says {} x {rows} x {cols} {}, but the file stores {stored:?} of shape {stored_shape:?}",
            batch.unwrap_or(1),
            dtype.name()
        ));
    }
    let shape = Shape { dtype, batch: batch.unwrap_or(1), rows, cols };
    shape
        .elements()
        .and_then(|e| e.checked_mul(dtype.size()? as usize))
        .ok_or_else(|| format!("{name}: {} x {rows} x {cols} elements overflow", shape.batch))?;
    Ok(shape)
}

/// The call record and operand shapes from a safetensors header (the JSON after the 8-byte
/// length), checked against each other; no data is read.
pub fn header(json: &[u8]) -> Result<Header, String> {
    let header: serde_json::Value = serde_json::from_slice(json).map_err(|e| format!("not a safetensors file: {e}"))?;
    let entries = header.as_object().ok_or("not a safetensors file: its header is not a JSON object")?;
    let text = header["__metadata__"][METADATA_KEY].as_str().ok_or("a safetensors file, but not a cublasguard dump (no call record in its metadata)")?;
    let meta: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("the call record is not JSON: {e}"))?;
    let format = meta["format"].as_u64().unwrap_or(0);
    if format == 0 || format > FORMAT {
        return Err(format!("dump format {format} (this cublasguard reads format {FORMAT})"));
    }
    let mut shapes = BTreeMap::new();
    for (name, entry) in entries.iter().filter(|(k, _)| *k != "__metadata__") {
        let stored: Dtype = serde_json::from_value(entry["dtype"].clone()).map_err(|e| format!("not a safetensors file: {name}: dtype: {e}"))?;
        let stored_shape: Vec<usize> = serde_json::from_value(entry["shape"].clone()).map_err(|e| format!("not a safetensors file: {name}: shape: {e}"))?;
        shapes.insert(name.clone(), shape_of(name, &meta, stored, &stored_shape)?);
    }
    Ok(Header { meta, shapes })
}

/// The header of a whole dump file, after safetensors has checked that its offsets and sizes
/// add up to the file.
pub fn header_of(bytes: &[u8]) -> Result<Header, String> {
    let (n, _) = safetensors::SafeTensors::read_metadata(bytes).map_err(|e| format!("not a safetensors file: {e}"))?;
    header(bytes.get(8..8 + n).ok_or("not a safetensors file (its header is cut short)")?)
}

/// Reads a dump: the safetensors file and the guard's metadata in it.
pub fn decode(bytes: &[u8]) -> Result<Dump, String> {
    let Header { meta, shapes } = header_of(bytes)?;
    let file = safetensors::SafeTensors::deserialize(bytes).map_err(|e| format!("not a safetensors file: {e}"))?;
    let mut tensors = BTreeMap::new();
    for (name, view) in file.tensors() {
        let shape = shapes.get(&name).ok_or_else(|| format!("{name}: not in the file's header"))?;
        let Shape { dtype, batch, rows, cols } = *shape;
        let size = dtype.size().unwrap_or(1) as usize;
        let raw = view.data().to_vec();
        let needs = shape.elements().and_then(|e| e.checked_mul(size));
        if needs != Some(raw.len()) {
            return Err(format!("{name}: {} bytes, but {batch} x {rows} x {cols} {} needs {needs:?}", raw.len(), dtype.name()));
        }
        let values = raw.chunks_exact(size).map(|e| element(dtype, e)).collect();
        tensors.insert(name, Matrix { dtype, batch, rows, cols, values, raw });
    }
    Ok(Dump { meta, tensors })
}

/// One little-endian element as (real, imaginary).
pub fn element(dtype: DType, bytes: &[u8]) -> [f64; 2] {
    let word = |n: usize| {
        let mut w = [0u8; 8];
        let n = n.min(bytes.len());
        w[..n].copy_from_slice(&bytes[..n]);
        u64::from_le_bytes(w)
    };
    let real = |v: f64| [v, 0.0];
    match dtype {
        DType::F64 => real(f64::from_bits(word(8))),
        DType::F32 => real(f32::from_bits(word(4) as u32) as f64),
        DType::F16 => real(half::f16::from_bits(word(2) as u16).to_f64()),
        DType::BF16 => real(half::bf16::from_bits(word(2) as u16).to_f64()),
        DType::F8E4M3 => real(minifloat(word(1), 4, 3, false)),
        DType::F8E5M2 => real(minifloat(word(1), 5, 2, true)),
        DType::I8 => real(word(1) as u8 as i8 as f64),
        DType::I32 => real(word(4) as u32 as i32 as f64),
        DType::C32 if bytes.len() >= 8 => [element(DType::F32, &bytes[..4])[0], element(DType::F32, &bytes[4..8])[0]],
        DType::C64 if bytes.len() >= 16 => [element(DType::F64, &bytes[..8])[0], element(DType::F64, &bytes[8..16])[0]],
        _ => [f64::NAN, 0.0],
    }
}

/// An FP8 float (no crate decodes both OCP formats): `exp` exponent bits, `man` mantissa bits. Without infinities
/// (E4M3 "fn"), only the all-ones pattern is NaN and the rest of the top exponent is finite.
fn minifloat(bits: u64, exp: u32, man: u32, has_inf: bool) -> f64 {
    let sign = if bits >> (exp + man) & 1 == 1 { -1.0 } else { 1.0 };
    let e = (bits >> man) & ((1 << exp) - 1);
    let m = bits & ((1 << man) - 1);
    let top = (1u64 << exp) - 1;
    let bias = (1i32 << (exp - 1)) - 1;
    if has_inf && e == top {
        return if m == 0 { sign * f64::INFINITY } else { f64::NAN };
    }
    if !has_inf && e == top && m == (1 << man) - 1 {
        return f64::NAN;
    }
    let fraction = m as f64 / (1u64 << man) as f64;
    if e == 0 {
        sign * fraction * 2f64.powi(1 - bias)
    } else {
        sign * (1.0 + fraction) * 2f64.powi(e as i32 - bias)
    }
}

/// The largest finite value of a type (of each part, for complex types).
pub fn finite_max(dtype: DType) -> f64 {
    match dtype {
        DType::F64 | DType::C64 => f64::MAX,
        DType::F32 | DType::C32 => f32::MAX as f64,
        DType::F16 => 65504.0,
        DType::BF16 => 3.389_531_389_251_535_5e38,
        DType::F8E4M3 => 448.0,
        DType::F8E5M2 => 57344.0,
        DType::I8 | DType::CI8 => 127.0,
        DType::I32 => i32::MAX as f64,
        DType::Unknown(_) => f64::MAX,
    }
}

/// The unit roundoff of a type: half the gap between 1 and the next value.
pub fn unit_roundoff(dtype: DType) -> f64 {
    match dtype {
        DType::F64 | DType::C64 => 2f64.powi(-53),
        DType::F32 | DType::C32 => 2f64.powi(-24),
        DType::F16 => 2f64.powi(-11),
        DType::BF16 => 2f64.powi(-8),
        DType::F8E4M3 => 2f64.powi(-4),
        DType::F8E5M2 => 2f64.powi(-3),
        DType::I8 | DType::I32 | DType::CI8 | DType::Unknown(_) => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use safetensors::tensor::TensorView;

    fn tensor(name: &str, dtype: DType, rows: u64, cols: u64, data: Vec<u8>) -> Tensor {
        Tensor { name: name.into(), dtype, batch: None, rows, cols, data }
    }

    fn meta_for(tensors: &[Tensor]) -> serde_json::Value {
        let described: serde_json::Map<String, serde_json::Value> =
            tensors.iter().map(|t| (t.name.clone(), serde_json::json!({"dtype": t.dtype.name(), "rows": t.rows, "cols": t.cols, "batch": t.batch}))).collect();
        serde_json::json!({"format": FORMAT, "tensors": described})
    }

    #[test]
    fn a_stored_column_major_matrix_is_written_row_major_without_its_padding() {
        // 2 x 3 as stored, columns (1,2), (3,4), (5,6): rows are 1 3 5 and 2 4 6.
        let columns: Vec<u8> = [1u8, 2, 3, 4, 5, 6].to_vec();
        let mut out = Vec::new();
        append_row_major(&columns, 2, 3, 1, &mut out);
        assert_eq!(out, [1, 3, 5, 2, 4, 6]);
    }

    #[test]
    fn every_dtype_survives_a_round_trip_through_the_file() {
        let cases = [
            (DType::F64, 1.5f64.to_le_bytes().to_vec(), [1.5, 0.0]),
            (DType::F32, 1.5f32.to_le_bytes().to_vec(), [1.5, 0.0]),
            (DType::F16, 0x3e00u16.to_le_bytes().to_vec(), [1.5, 0.0]),
            (DType::BF16, 0x3fc0u16.to_le_bytes().to_vec(), [1.5, 0.0]),
            (DType::F8E4M3, vec![0x3c], [1.5, 0.0]),
            (DType::F8E5M2, vec![0x3e], [1.5, 0.0]),
            (DType::I8, vec![0xfe], [-2.0, 0.0]),
            (DType::I32, (-7i32).to_le_bytes().to_vec(), [-7.0, 0.0]),
            (DType::C32, [1.5f32.to_le_bytes(), (-2.0f32).to_le_bytes()].concat(), [1.5, -2.0]),
            (DType::C64, [1.5f64.to_le_bytes(), (-2.0f64).to_le_bytes()].concat(), [1.5, -2.0]),
        ];
        for (dtype, bytes, value) in cases {
            let t = vec![tensor("A", dtype, 1, 1, bytes.clone())];
            let file = encode(&t, &meta_for(&t)).unwrap();
            let back = decode(&file).unwrap();
            let a = &back.tensors["A"];
            assert_eq!((a.raw.clone(), a.at(0, 0, 0)), (bytes, value), "{dtype:?}");
        }
    }

    #[test]
    fn special_values_of_the_small_floats_decode_as_nan_and_inf() {
        assert!(element(DType::F16, &0x7c00u16.to_le_bytes())[0].is_infinite());
        assert!(element(DType::F16, &0x7e00u16.to_le_bytes())[0].is_nan());
        assert!(element(DType::F8E4M3, &[0x7f])[0].is_nan());
        assert_eq!(element(DType::F8E4M3, &[0x7e])[0], 448.0, "E4M3 has no Inf: its top exponent is finite");
        assert!(element(DType::F8E5M2, &[0x7c])[0].is_infinite());
        assert_eq!(element(DType::F8E5M2, &[0x01])[0], 2f64.powi(-16), "subnormal");
    }

    #[test]
    fn a_file_without_the_call_record_is_named_as_not_a_dump() {
        let t = [tensor("A", DType::F32, 1, 1, vec![0; 4])];
        let plain = safetensors::serialize(vec![("A", TensorView::new(Dtype::F32, vec![1, 1], &t[0].data).unwrap())], None).unwrap();
        assert!(decode(&plain).unwrap_err().contains("not a cublasguard dump"));
        assert!(decode(b"garbage").unwrap_err().contains("not a safetensors file"));
    }
}
