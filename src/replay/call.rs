//! The call a dump records, as replay needs it: read from the dump's record and checked against
//! the operands it holds before anything is computed, within replay's caps; and its types,
//! compute type and scalars as cuBLAS takes them, for the reruns through CUDA and the C program.

use std::collections::BTreeMap;

use cublasguard_format::cuda::DType;
use cublasguard_format::dump::{self, Dump, Matrix, Shape};

/// The call a dump records, as replay needs it.
#[derive(Clone, Debug)]
pub struct Replayed {
    pub api: String,
    pub seq: u64,
    pub kind: String,
    pub transa: char,
    pub transb: char,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub alpha: [f64; 2],
    pub beta: [f64; 2],
    /// The arithmetic the library was asked for: its unit roundoff and its name.
    pub compute_roundoff: f64,
    pub compute_label: String,
    pub reduced: bool,
    pub relu: bool,
    pub output_name: String,
}

fn op_of(value: &serde_json::Value, name: &str) -> Result<char, String> {
    match value.as_str() {
        Some("N") => Ok('N'),
        Some("T") => Ok('T'),
        Some("C") => Ok('C'),
        other => Err(format!("{name} is {other:?}, not N, T or C")),
    }
}

/// The most multiply-adds replay computes exactly: a dump whose recomputation would take more
/// (batch x m x n x k) is refused, as no dump of a real fault needs it and a forged one could
/// make replay run for days.
pub const MAX_WORK: u128 = 10_000_000_000;

/// The most elements replay decodes from a dump, all operands together (each takes 16 bytes
/// decoded, beside its bytes as stored).
pub const MAX_ELEMENTS: usize = 1 << 28;

/// What arithmetic the call used, from its compute type, or for the typed functions from their
/// type and the handle's math mode.
fn compute_of(meta: &serde_json::Value, inputs: DType) -> (f64, String, bool) {
    let args = &meta["args"];
    let tf32_math = meta["handle"]["math_mode"].as_str().is_some_and(|m| m.contains("TF32"));
    let compute = args["computeType"].as_str().unwrap_or("");
    let (dtype, label) = match compute {
        c if c.starts_with("CUBLAS_COMPUTE_16F") => (DType::F16, "fp16 accumulation (CUBLAS_COMPUTE_16F)"),
        c if c.contains("FAST_TF32") => (DType::F16, "TF32 (CUBLAS_COMPUTE_32F_FAST_TF32)"),
        c if c.contains("FAST_16F") => (DType::F16, "fp16 inputs (CUBLAS_COMPUTE_32F_FAST_16F)"),
        c if c.contains("FAST_16BF") => (DType::BF16, "bf16 inputs (CUBLAS_COMPUTE_32F_FAST_16BF)"),
        c if c.starts_with("CUBLAS_COMPUTE_64F") => (DType::F64, "f64 (CUBLAS_COMPUTE_64F)"),
        c if c.starts_with("CUBLAS_COMPUTE_32F") => (DType::F32, "f32 accumulation (CUBLAS_COMPUTE_32F)"),
        _ if tf32_math && inputs == DType::F32 => (DType::F16, "TF32 tensor-op math (the handle's math mode)"),
        _ if meta["api"].as_str().is_some_and(|a| a.starts_with("cublasHgemm")) => (DType::F16, "fp16 accumulation (cublasHgemm)"),
        _ => (inputs, ""),
    };
    // TF32 keeps 10 mantissa bits, like fp16: the same roundoff.
    let label = if label.is_empty() { format!("{} arithmetic", inputs.name()) } else { label.to_string() };
    let reduced = dump::unit_roundoff(dtype) > dump::unit_roundoff(DType::F32) || meta["reduced_precision"].as_bool() == Some(true);
    (dump::unit_roundoff(dtype).max(dump::unit_roundoff(inputs).min(dump::unit_roundoff(DType::F32))), label, reduced)
}

impl Replayed {
    /// Whether the call can be made again as `cublasGemmStridedBatchedEx` (for `--cuda` and
    /// `--emit-c`): a cublasLt epilogue (bias, ReLU) has no equivalent there, and the rerun
    /// would differ for that reason alone.
    pub fn rerunnable(&self, d: &Dump) -> Result<(), String> {
        if d.tensors.contains_key("bias") || self.relu {
            return Err("this call has a cublasLt epilogue, which cublasGemmStridedBatchedEx cannot apply".into());
        }
        // Its sizes are C ints: each dimension, and each operand's rows (its leading dimension).
        let out = d.tensors.get(&self.output_name).map_or(1, |o| o.batch);
        let rows = d.tensors.values().map(|t| t.rows.max(t.cols));
        for (what, v) in [("m", self.m), ("n", self.n), ("k", self.k), ("the batch", out)].into_iter().chain(rows.map(|r| ("an operand's rows or columns", r)))
        {
            if i32::try_from(v).is_err() {
                return Err(format!("{what} ({v}) does not fit the int that cublasGemmStridedBatchedEx takes"));
            }
        }
        Ok(())
    }
}

/// What the guard recorded as left out of the dump.
fn not_dumped(meta: &serde_json::Value) -> String {
    let notes: Vec<&str> = meta["not_dumped"].as_array().map(|a| a.iter().filter_map(|n| n.as_str()).collect()).unwrap_or_default();
    if notes.is_empty() {
        "the record does not say why".into()
    } else {
        notes.join("; ")
    }
}

/// The operands' shapes of a decoded dump.
pub fn shapes(d: &Dump) -> BTreeMap<String, Shape> {
    d.tensors.iter().map(|(name, m)| (name.clone(), Shape { dtype: m.dtype, batch: m.batch, rows: m.rows, cols: m.cols })).collect()
}

/// The call a dump records, checked against the operands it holds before anything is computed:
/// op(A) is m x k, op(B) k x n, C and the output m x n, the bias m x 1; every batched operand
/// has the output's members (or one, for all); the leading dimensions recorded hold the rows;
/// and the exact recomputation and the decoded operands stay within [`MAX_WORK`] and
/// [`MAX_ELEMENTS`]. Each inconsistency is named.
pub fn replayed(meta: &serde_json::Value, shapes: &BTreeMap<String, Shape>) -> Result<Replayed, String> {
    let args = &meta["args"];
    let int = |name: &str| match &args[name] {
        serde_json::Value::Null => Err(format!("the call record has no {name}")),
        v => v.as_u64().and_then(|v| usize::try_from(v).ok()).ok_or_else(|| format!("{name} is {v} in the call record, not a size")),
    };
    let scalar = |name: &str| -> Result<[f64; 2], String> {
        let v = &meta[name];
        match (v[0].as_f64(), v[1].as_f64()) {
            (Some(re), Some(im)) => Ok([re, im]),
            _ => Err(format!("{name} could not be read when the dump was written")),
        }
    };
    // A call the library refused computed nothing: there is no result to compare.
    if let Some(kind @ ("invalid_argument" | "invalid_handle")) = meta["kind"].as_str() {
        return Err(format!("the library refused this call ({kind}): it computed nothing to compare; fix the call, then dump it again"));
    }
    if let Some(epilogue) = args["epilogue"].as_str() {
        let recomputed = ["CUBLASLT_EPILOGUE_DEFAULT", "CUBLASLT_EPILOGUE_BIAS", "CUBLASLT_EPILOGUE_RELU", "CUBLASLT_EPILOGUE_RELU_BIAS"];
        if !recomputed.contains(&epilogue) {
            return Err(format!("the epilogue {epilogue} is not recomputed by replay (bias and ReLU are)"));
        }
    }
    let a = shapes.get("A").ok_or_else(|| format!("the dump has no A: {}", not_dumped(meta)))?;
    if !shapes.contains_key("B") {
        return Err(format!("the dump has no B: {}", not_dumped(meta)));
    }
    let (compute_roundoff, compute_label, reduced) = compute_of(meta, a.dtype);
    let output_name =
        ["C_out", "D_out"].into_iter().find(|n| shapes.contains_key(*n)).ok_or("the dump has no output (C_out or D_out): the call did not run")?;
    let call = Replayed {
        api: meta["api"].as_str().unwrap_or("?").to_string(),
        seq: meta["seq"].as_u64().unwrap_or(0),
        kind: meta["kind"].as_str().unwrap_or("?").to_string(),
        transa: op_of(&args["transa"], "transa")?,
        transb: op_of(&args["transb"], "transb")?,
        m: int("m")?,
        n: int("n")?,
        k: int("k")?,
        alpha: scalar("alpha")?,
        beta: scalar("beta")?,
        compute_roundoff,
        compute_label,
        reduced,
        relu: args["epilogue"].as_str().is_some_and(|e| e.contains("RELU")),
        output_name: output_name.to_string(),
    };
    consistent(&call, args, shapes)?;
    Ok(call)
}

/// The checks of [`replayed`] on the dimensions, with checked arithmetic throughout.
fn consistent(call: &Replayed, args: &serde_json::Value, shapes: &BTreeMap<String, Shape>) -> Result<(), String> {
    let (m, n, k) = (call.m, call.n, call.k);
    let out = &shapes[&call.output_name];
    let stored = |op: char, rows: usize, cols: usize| if op == 'N' { (rows, cols) } else { (cols, rows) };
    let mut expected = vec![
        ("A", stored(call.transa, m, k), format!("transa = {}: op(A) is m x k = {m} x {k}", call.transa)),
        ("B", stored(call.transb, k, n), format!("transb = {}: op(B) is k x n = {k} x {n}", call.transb)),
        (call.output_name.as_str(), (m, n), format!("the output is m x n = {m} x {n}")),
        ("C", (m, n), format!("C is m x n = {m} x {n}")),
        ("bias", (m, 1), format!("the bias is m x 1 = {m} x 1")),
    ];
    if call.beta != [0.0, 0.0] && !shapes.contains_key("C") {
        return Err("beta != 0 but the dump has no C (see not_dumped in its record)".into());
    }
    for (name, (rows, cols), why) in expected.drain(..) {
        let Some(s) = shapes.get(name) else { continue };
        if (s.rows, s.cols) != (rows, cols) {
            return Err(format!("the dump is inconsistent: {name} is stored {} x {}, but {why}, stored {rows} x {cols}", s.rows, s.cols));
        }
        if s.batch != 1 && s.batch != out.batch {
            return Err(format!("the dump is inconsistent: {name} has {} members, but the output has {}", s.batch, out.batch));
        }
    }
    // The leading dimensions, where recorded, are the device's: each must hold its rows.
    for (ld, name) in [("lda", "A"), ("ldb", "B"), ("ldc", call.output_name.as_str())] {
        let (Some(s), v) = (shapes.get(name), &args[ld]) else { continue };
        if v.is_null() {
            continue;
        }
        let fits = v.as_u64().and_then(|v| usize::try_from(v).ok()).is_some_and(|v| v >= s.rows.max(1));
        if !fits {
            return Err(format!("the dump is inconsistent: {ld} is {v}, but {name} has {} rows", s.rows));
        }
    }
    if let Some(count) = args["batchCount"].as_i64() {
        if usize::try_from(count).ok() != Some(out.batch) && out.batch != 1 {
            return Err(format!("the dump is inconsistent: batchCount is {count}, but the output has {} members", out.batch));
        }
    }
    let work = [out.batch, m, n, k.max(1)].iter().try_fold(1u128, |w, d| w.checked_mul(*d as u128));
    if work.is_none_or(|w| w > MAX_WORK) {
        let said = work.map_or_else(|| "more than 2^128".to_string(), |w| w.to_string());
        return Err(format!("the exact recomputation would take {said} multiply-adds ({} x {m} x {n} x {k}), more than replay's cap of {MAX_WORK}", out.batch));
    }
    let elements = shapes.values().try_fold(0usize, |sum, s| sum.checked_add(s.elements()?));
    if elements.is_none_or(|e| e > MAX_ELEMENTS) {
        return Err(format!("the dump holds more than {MAX_ELEMENTS} elements, replay's cap"));
    }
    Ok(())
}

/// `cudaDataType_t` of a dtype.
pub fn cuda_type(dtype: DType) -> i32 {
    match dtype {
        DType::F32 => 0,
        DType::F64 => 1,
        DType::F16 => 2,
        DType::I8 => 3,
        DType::C32 => 4,
        DType::C64 => 5,
        DType::CI8 => 7,
        DType::I32 => 10,
        DType::BF16 => 14,
        DType::F8E4M3 => 28,
        DType::F8E5M2 => 29,
        DType::Unknown(v) => v,
    }
}

/// `cublasComputeType_t` for rerunning the call as cublasGemmStridedBatchedEx: the recorded
/// compute type, or the typed function's own.
pub fn compute_code(d: &Dump, inputs: DType) -> i32 {
    let named = [
        ("CUBLAS_COMPUTE_16F_PEDANTIC", 65),
        ("CUBLAS_COMPUTE_16F", 64),
        ("CUBLAS_COMPUTE_32F_PEDANTIC", 69),
        ("CUBLAS_COMPUTE_32F_FAST_16F", 74),
        ("CUBLAS_COMPUTE_32F_FAST_16BF", 75),
        ("CUBLAS_COMPUTE_32F_FAST_TF32", 77),
        ("CUBLAS_COMPUTE_32F", 68),
        ("CUBLAS_COMPUTE_64F_PEDANTIC", 71),
        ("CUBLAS_COMPUTE_64F", 70),
        ("CUBLAS_COMPUTE_32I_PEDANTIC", 73),
        ("CUBLAS_COMPUTE_32I", 72),
    ];
    if let Some((_, code)) = d.meta["args"]["computeType"].as_str().and_then(|c| named.iter().find(|(n, _)| *n == c)) {
        return *code;
    }
    let tf32 = d.meta["handle"]["math_mode"].as_str().is_some_and(|m| m.contains("TF32"));
    match inputs {
        DType::F64 | DType::C64 => 70,
        DType::F16 if d.meta["api"].as_str().is_some_and(|a| a.starts_with("cublasHgemm")) => 64,
        DType::F32 | DType::C32 if tf32 => 77,
        _ => 68,
    }
}

/// A scalar (alpha, beta) as the bytes of the call's scalar type, padded with zeros to 16
/// bytes: the library reads the scalar type its compute type implies, which a forged record
/// could make wider than the one recorded, and it must not read past the buffer.
pub fn scalar_bytes(d: &Dump, v: [f64; 2]) -> Vec<u8> {
    let mut bytes = match d.meta["scalar_type"].as_str().and_then(dump::dtype_named).unwrap_or(DType::F32) {
        DType::F64 => v[0].to_le_bytes().to_vec(),
        DType::C32 => [(v[0] as f32).to_le_bytes(), (v[1] as f32).to_le_bytes()].concat(),
        DType::C64 => [v[0].to_le_bytes(), v[1].to_le_bytes()].concat(),
        DType::F16 => half::f16::from_f64(v[0]).to_bits().to_le_bytes().to_vec(),
        DType::I32 => (v[0] as i32).to_le_bytes().to_vec(),
        _ => (v[0] as f32).to_le_bytes().to_vec(),
    };
    bytes.resize(16, 0);
    bytes
}

/// A stored matrix's bytes back in column-major order (leading dimension = rows), member after
/// member, as the device takes them.
pub fn column_major(m: &Matrix) -> Vec<u8> {
    let elem = m.raw.len() / (m.batch * m.rows * m.cols).max(1);
    let mut out = Vec::with_capacity(m.raw.len());
    for b in 0..m.batch {
        for c in 0..m.cols {
            for r in 0..m.rows {
                let at = ((b * m.rows + r) * m.cols + c) * elem;
                out.extend_from_slice(&m.raw[at..at + elem]);
            }
        }
    }
    out
}
