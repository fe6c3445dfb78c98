//! `cublasguard replay DUMP`: reruns a dumped matrix multiply on the CPU with an exact
//! reference (f64 accumulation from the dumped inputs) and says whether the NaN/Inf is in the
//! data (inherent), in the library's reduced precision, or not explained; `--cuda` reruns it
//! through the real cuBLAS; `--emit-c` writes a standalone reproducer.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use cublasguard_format::cuda::DType;
use cublasguard_format::dump::{self, Dump, Matrix, Shape};

use crate::report::escape_field;
use crate::CliError;

mod cuda;
mod emit_c;

/// Exit statuses: the fault reproduced as recorded, did not, or the dump could not be read.
pub const REPRODUCED: i32 = 0;
pub const NOT_REPRODUCED: i32 = 1;
pub const UNREADABLE: i32 = 2;

pub struct Options {
    pub dump: PathBuf,
    pub cuda: bool,
    pub emit_c: Option<PathBuf>,
    /// The bundled stand-in, for `--cuda` where no CUDA is on the library path.
    pub bundled: Option<PathBuf>,
}

fn unreadable(message: impl Into<String>) -> CliError {
    CliError { message: message.into(), code: UNREADABLE }
}

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
/// The largest dump file replay reads.
pub const MAX_FILE: u64 = 16 << 30;

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

fn mul(a: [f64; 2], b: [f64; 2]) -> [f64; 2] {
    [a[0] * b[0] - a[1] * b[1], a[0] * b[1] + a[1] * b[0]]
}

/// |a|, scaled so that squaring cannot overflow. (Not `f64::hypot`: glibc 2.35 versioned it,
/// and the wheel must run on glibc 2.34.)
fn magnitude(a: [f64; 2]) -> f64 {
    let m = a[0].abs().max(a[1].abs());
    if m == 0.0 || !m.is_finite() {
        return m;
    }
    let (x, y) = (a[0] / m, a[1] / m);
    m * (x * x + y * y).sqrt()
}

fn finite(a: [f64; 2]) -> bool {
    a[0].is_finite() && a[1].is_finite()
}

/// Element (i, p) of op(M) for member `b` (a single member serves every batch member).
fn op_at(m: &Matrix, op: char, b: usize, i: usize, p: usize) -> [f64; 2] {
    let b = b.min(m.batch.saturating_sub(1));
    match op {
        'N' => m.at(b, i, p),
        'T' => m.at(b, p, i),
        _ => {
            let v = m.at(b, p, i);
            [v[0], -v[1]]
        }
    }
}

/// One element where the library and the exact result disagree.
#[derive(Clone, Debug)]
pub struct Difference {
    pub member: usize,
    pub row: usize,
    pub col: usize,
    pub got: [f64; 2],
    pub exact: [f64; 2],
    /// Error over tolerance (infinite where one side is NaN/Inf and the other is not).
    pub ratio: f64,
}

#[derive(Clone, Debug)]
pub struct Analysis {
    pub call: Replayed,
    /// "A: 1 NaN, 0 Inf (first at member 0, (1, 2))" for each input holding NaN/Inf.
    pub nonfinite_inputs: Vec<String>,
    /// Elements whose exact value does not fit the output type.
    pub overflowing: usize,
    pub largest_exact: f64,
    pub output_nonfinite: usize,
    pub differences: Vec<Difference>,
    pub output_dtype: DType,
}

fn nonfinite_summary(name: &str, m: &Matrix) -> Option<String> {
    let (mut nan, mut inf, mut first) = (0, 0, None);
    for (i, v) in m.values.iter().enumerate() {
        if !finite(*v) {
            if v[0].is_nan() || v[1].is_nan() {
                nan += 1;
            } else {
                inf += 1;
            }
            first.get_or_insert(i);
        }
    }
    let i = first?;
    let (member, row, col) = (i / (m.rows * m.cols).max(1), i / m.cols.max(1) % m.rows.max(1), i % m.cols.max(1));
    Some(format!("{name}: {nan} NaN, {inf} Inf (first at member {member}, ({row}, {col}))"))
}

/// Opens a dump: only a regular file of at most [`MAX_FILE`] bytes (never a FIFO or a device,
/// whose reads would block or never end).
fn open_dump(path: &Path) -> Result<std::fs::File, String> {
    crate::report::open_regular(path, MAX_FILE).map_err(|e| format!("it cannot be read ({e})"))
}

/// Whether `replay` can rerun the dump at `path`, or why not (the report asks before it offers
/// the command): the checks `analyse` makes before it computes, from the file's header alone,
/// so a large dump is not read.
pub fn can_replay(path: &Path) -> Result<(), String> {
    use std::io::Read;
    let mut file = open_dump(path)?;
    let mut len = [0u8; 8];
    file.read_exact(&mut len).map_err(|_| "not a safetensors file (too short)".to_string())?;
    let len = u64::from_le_bytes(len);
    if len > 100 << 20 {
        return Err("not a safetensors file (its header would be larger than 100 MiB)".into());
    }
    let mut header = vec![0u8; len as usize];
    file.read_exact(&mut header).map_err(|_| "not a safetensors file (its header is cut short)".to_string())?;
    let header = dump::header(&header)?;
    replayed(&header.meta, &header.shapes)?;
    Ok(())
}

/// The exact reference and its comparison with the library's output.
pub fn analyse(d: &Dump) -> Result<Analysis, String> {
    let call = replayed(&d.meta, &shapes(d))?;
    let a = &d.tensors["A"];
    let b = d.tensors.get("B").ok_or("the dump has no B (see not_dumped in its record)")?;
    let out = &d.tensors[&call.output_name];
    let beta_zero = call.beta == [0.0, 0.0];
    let c = if beta_zero { None } else { Some(d.tensors.get("C").ok_or("beta != 0 but the dump has no C (see not_dumped in its record)")?) };
    let bias = d.tensors.get("bias");
    let mut nonfinite_inputs: Vec<String> =
        [("A", Some(a)), ("B", Some(b)), ("C", c), ("bias", bias)].into_iter().filter_map(|(name, m)| nonfinite_summary(name, m?)).collect();
    for (name, v) in [("alpha", call.alpha), ("beta", call.beta)] {
        if !finite(v) {
            nonfinite_inputs.push(format!("{name} is {}", v[0]));
        }
    }
    let max = dump::finite_max(out.dtype);
    let tolerance_unit = call.k as f64 * call.compute_roundoff + dump::unit_roundoff(out.dtype);
    let (mut overflowing, mut largest_exact, mut output_nonfinite) = (0, 0f64, 0);
    let mut differences = Vec::new();
    for member in 0..out.batch {
        for i in 0..call.m {
            for j in 0..call.n {
                let (mut sum, mut bound) = ([0.0, 0.0], 0.0);
                for p in 0..call.k {
                    let prod = mul(op_at(a, call.transa, member, i, p), op_at(b, call.transb, member, p, j));
                    sum = [sum[0] + prod[0], sum[1] + prod[1]];
                    bound += magnitude(prod);
                }
                let mut exact = mul(call.alpha, sum);
                bound *= magnitude(call.alpha);
                if let Some(c) = c {
                    let scaled = mul(call.beta, c.at(member.min(c.batch - 1), i, j));
                    exact = [exact[0] + scaled[0], exact[1] + scaled[1]];
                    bound += magnitude(scaled);
                }
                if let Some(bias) = bias {
                    let v = bias.at(member.min(bias.batch - 1), i, 0);
                    exact = [exact[0] + v[0], exact[1] + v[1]];
                    bound += magnitude(v);
                }
                if call.relu {
                    exact[0] = exact[0].max(0.0);
                }
                // The exact value as the output type can hold it.
                if finite(exact) {
                    largest_exact = largest_exact.max(exact[0].abs()).max(exact[1].abs());
                }
                if exact[0].abs() > max || exact[1].abs() > max {
                    overflowing += 1;
                    let inf = |x: f64| if x.abs() > max { x.signum() * f64::INFINITY } else { x };
                    exact = [inf(exact[0]), inf(exact[1])];
                }
                let got = out.at(member, i, j);
                if !finite(got) {
                    output_nonfinite += 1;
                }
                let ratio = match (finite(got), finite(exact)) {
                    (true, true) => {
                        let tolerance = 2.0 * tolerance_unit * bound + f64::MIN_POSITIVE;
                        magnitude([got[0] - exact[0], got[1] - exact[1]]) / tolerance
                    }
                    (false, false) => 0.0,
                    _ => f64::INFINITY,
                };
                if ratio > 1.0 {
                    differences.push(Difference { member, row: i, col: j, got, exact, ratio });
                }
            }
        }
    }
    differences.sort_by(|x, y| y.ratio.total_cmp(&x.ratio));
    Ok(Analysis { call, nonfinite_inputs, overflowing, largest_exact, output_nonfinite, differences, output_dtype: out.dtype })
}

/// The one-line verdict, and whether the recorded fault shows in the dumped data.
pub fn verdict(a: &Analysis) -> (String, bool) {
    let out = a.output_dtype.name();
    let line = if !a.nonfinite_inputs.is_empty() {
        format!("inherent: the inputs hold NaN/Inf ({}); the library passed them on, the data must be fixed upstream", a.nonfinite_inputs.join("; "))
    } else if a.overflowing > 0 {
        format!(
            "inherent: the exact result does not fit in {out} at {} element(s) (max {:.6e}): the inputs' scale makes it; rescale the inputs or use a wider output type",
            a.overflowing,
            dump::finite_max(a.output_dtype)
        )
    } else if !a.differences.is_empty() && a.call.reduced {
        format!(
            "reduced precision: the exact result is finite (largest |value| {:.6e}) but the library's {} gave {} at {} element(s); use f32 accumulation (CUBLAS_COMPUTE_32F) or rescale",
            a.largest_exact,
            a.call.compute_label,
            if a.output_nonfinite > 0 { "NaN/Inf" } else { "results beyond its tolerance" },
            a.differences.len()
        )
    } else if !a.differences.is_empty() {
        format!(
            "not explained: the library's output differs from the exact result beyond {} tolerance at {} element(s); rerun with --cuda, and if it reproduces, report it (--emit-c writes a reproducer)",
            a.call.compute_label,
            a.differences.len()
        )
    } else {
        format!("clean: the library's output matches the exact result within the tolerance of {}", a.call.compute_label)
    };
    let shows = match a.call.kind.as_str() {
        "nonfinite_input" => !a.nonfinite_inputs.is_empty(),
        "nonfinite_output" => a.output_nonfinite > 0,
        _ => !a.differences.is_empty() || a.output_nonfinite > 0,
    };
    (line, shows)
}

fn value(v: [f64; 2]) -> String {
    if v[1] == 0.0 {
        format!("{:.6e}", v[0])
    } else {
        format!("{:.6e}{:+.6e}i", v[0], v[1])
    }
}

pub fn render(path: &Path, a: &Analysis) -> String {
    let c = &a.call;
    let mut s = String::new();
    let _ = writeln!(s, "replay of {} (fault at call #{}: {})", escape_field(&path.display().to_string()), c.seq, escape_field(&c.kind));
    let _ = writeln!(
        s,
        "  call: {} transa={} transb={} m={} n={} k={} alpha={} beta={}; {}",
        escape_field(&c.api),
        c.transa,
        c.transb,
        c.m,
        c.n,
        c.k,
        value(c.alpha),
        value(c.beta),
        c.compute_label
    );
    let _ = writeln!(s, "  inputs with NaN/Inf: {}", if a.nonfinite_inputs.is_empty() { "none".into() } else { a.nonfinite_inputs.join("; ") });
    let _ = writeln!(s, "  exact reference (f64 accumulation): {} element(s) do not fit in {}", a.overflowing, a.output_dtype.name());
    let _ = writeln!(s, "  library's output ({}): {} NaN/Inf; {} element(s) beyond tolerance", c.output_name, a.output_nonfinite, a.differences.len());
    for d in a.differences.iter().take(5) {
        let _ = writeln!(s, "    member {} ({}, {}): library {}, exact {}", d.member, d.row, d.col, value(d.got), value(d.exact));
    }
    s
}

/// Reads the dump at `path`: a regular file of at most [`MAX_FILE`] bytes, whose call is
/// checked against its operands' shapes before any element is decoded.
fn read(path: &Path) -> Result<(Vec<u8>, Dump), String> {
    use std::io::Read;
    let file = open_dump(path)?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE).read_to_end(&mut bytes).map_err(|e| format!("it cannot be read ({e})"))?;
    let header = dump::header_of(&bytes)?;
    replayed(&header.meta, &header.shapes)?;
    let d = dump::decode(&bytes)?;
    Ok((bytes, d))
}

pub fn run(o: &Options) -> Result<i32, CliError> {
    // Every text from the dump (and its path) is shown escaped: no escape sequence, newline or
    // bidirectional override from a hostile dump reaches the terminal.
    let shown = escape_field(&o.dump.display().to_string());
    let failed = |e: String| unreadable(format!("{shown}: {}", escape_field(&e)));
    let (bytes, d) = read(&o.dump).map_err(failed)?;
    let analysis = analyse(&d).map_err(failed)?;
    let mut text = render(&o.dump, &analysis);
    let (line, shows) = verdict(&analysis);
    let mut reproduced = shows;
    if let Some(file) = &o.emit_c {
        let source = emit_c::program(&bytes, &d, &analysis.call, &o.dump).map_err(failed)?;
        std::fs::write(file, source).map_err(|e| CliError::usage(format!("{}: {e}", escape_field(&file.display().to_string()))))?;
        let file = escape_field(&file.display().to_string());
        let _ = writeln!(text, "  wrote {file} (build: cc {file} -lcublas -lcudart; run it beside the dump)");
    }
    if o.cuda {
        let (rerun, standin) = cuda::rerun(&d, &analysis.call, o.bundled.as_deref())
            .map_err(|e| CliError { message: format!("--cuda: {}", escape_field(&e)), code: UNREADABLE })?;
        if let Some(dir) = standin {
            let _ = writeln!(
                text,
                "  --cuda: no CUDA on the library path: rerun on the bundled CPU stand-in at {} (a GPU's cuBLAS may round differently)",
                escape_field(&dir.display().to_string())
            );
        }
        let same = rerun.len() == d.tensors[&analysis.call.output_name].values.len()
            && rerun.iter().zip(&d.tensors[&analysis.call.output_name].values).all(|(x, y)| finite(*x) == finite(*y));
        let nonfinite = rerun.iter().filter(|v| !finite(**v)).count();
        let _ = writeln!(
            text,
            "  --cuda: rerun through cuBLAS: {nonfinite} NaN/Inf in the output; {}",
            if same { "the same elements as recorded: the fault reproduces" } else { "not the elements recorded: the fault does not reproduce" }
        );
        reproduced = same && (nonfinite > 0 || !shows || analysis.call.kind == "nonfinite_input");
    }
    let _ = writeln!(text, "verdict: {line}");
    crate::print(&text)?;
    Ok(if reproduced { REPRODUCED } else { NOT_REPRODUCED })
}
