//! `cublasguard replay DUMP`: reruns a dumped matrix multiply on the CPU with an exact
//! reference (f64 accumulation from the dumped inputs) and says whether the NaN/Inf is in the
//! data (inherent), in the library's reduced precision, or not explained; `--cuda` reruns it
//! through the real cuBLAS; `--emit-c` writes a standalone reproducer.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use cublasguard_format::cuda::DType;
use cublasguard_format::dump::{self, Dump, Matrix};

use crate::escape::escape_field;
use crate::output::CliError;

mod call;
mod cuda;
mod emit_c;

use call::{replayed, shapes, Replayed};

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

/// The largest dump file replay reads.
pub const MAX_FILE: u64 = 16 << 30;

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
    crate::regular_file::open_regular(path, MAX_FILE).map_err(|e| format!("it cannot be read ({e})"))
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
    crate::output::print(&text)?;
    Ok(if reproduced { REPRODUCED } else { NOT_REPRODUCED })
}
