//! `cublasguard report`: traces in, a postmortem out, first fault first.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use cublasguard::trace::{self, Fault, FaultKind, Trace};
use serde::Serialize;

use crate::diagnosis::{self, bytes, Diagnosis};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Markdown,
    Json,
}

/// A trace and where it came from.
pub struct Loaded {
    pub path: PathBuf,
    pub trace: Trace,
}

/// Expands folders to the `*.json` files directly inside them, sorted.
pub fn expand(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    for path in paths {
        if path.is_dir() {
            let entries = std::fs::read_dir(path).map_err(|e| format!("{}: {e}", path.display()))?;
            let mut files: Vec<PathBuf> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "json"))
                .collect();
            files.sort();
            if files.is_empty() {
                return Err(format!("{}: no .json trace files in this folder", path.display()));
            }
            out.extend(files);
        } else {
            out.push(path.clone());
        }
    }
    Ok(out)
}

pub fn load(paths: &[PathBuf]) -> Result<Vec<Loaded>, String> {
    expand(paths)?
        .into_iter()
        .map(|path| match trace::read(&path) {
            Ok(trace) => Ok(Loaded { path, trace }),
            Err(e) => Err(format!("{}: {e}", path.display())),
        })
        .collect()
}

/// One fault of the merged run, with its process and diagnosis.
#[derive(Serialize)]
pub struct Entry<'a> {
    pub trace: &'a Path,
    pub pid: u32,
    pub rank: Option<i64>,
    pub hostname: &'a str,
    pub fault: &'a Fault,
    /// The process's executable, to find the program's own frames.
    #[serde(skip)]
    pub exe: Option<&'a str>,
    /// For NaN/Inf that an earlier fault of the same process already saw: that fault's seq.
    pub propagated_from: Option<u64>,
    pub diagnosis: Diagnosis,
}

/// Every fault of every trace, in time order, each diagnosed with what came before it.
pub fn merge(loaded: &[Loaded]) -> Vec<Entry<'_>> {
    let mut all: Vec<(&Loaded, &Fault)> = loaded.iter().flat_map(|l| l.trace.faults.iter().map(move |f| (l, f))).collect();
    all.sort_by_key(|(l, f)| (f.time_ns, l.trace.process.pid, f.seq));
    let mut first_nonfinite: std::collections::HashMap<u32, u64> = Default::default();
    all.into_iter()
        .map(|(l, f)| {
            let pid = l.trace.process.pid;
            let earlier = first_nonfinite.get(&pid).copied();
            let nonfinite = matches!(f.kind, FaultKind::NonfiniteInput | FaultKind::NonfiniteOutput);
            if nonfinite {
                first_nonfinite.entry(pid).or_insert(f.seq);
            }
            let propagated_from = earlier.filter(|_| f.kind == FaultKind::NonfiniteInput);
            Entry {
                trace: &l.path,
                pid,
                rank: l.trace.process.rank,
                hostname: &l.trace.process.hostname,
                fault: f,
                exe: l.trace.process.exe.as_deref(),
                propagated_from,
                diagnosis: diagnosis::diagnose(f, propagated_from),
            }
        })
        .collect()
}

fn call_text(f: &Fault) -> String {
    let args: Vec<String> = f
        .args
        .iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => format!("{k}={s}"),
            other => format!("{k}={other}"),
        })
        .collect();
    format!("{}({}) -> {} ({})", f.api, args.join(", "), f.status_name, f.status)
}

/// Whether a Python file is the user's: not the standard library, not an installed package
/// (PyTorch included), not the interpreter's own frozen modules.
fn is_user_file(file: &str) -> bool {
    let foreign = ["/site-packages/", "/dist-packages/", "/lib/python3", "<frozen", "/torch/", "<string>"];
    !file.is_empty() && !foreign.iter().any(|f| file.contains(f))
}

/// "model.py:57 in forward: h = self.fc1(x)": the innermost Python frame in the user's own
/// code, with its source line when the file can be read. A program without Python frames: the
/// innermost native frame in the program's own executable (`exe`), with its source line when
/// it was built with debug information.
pub fn user_line(fault: &trace::Fault, exe: Option<&str>) -> Option<String> {
    let Some(frame) = fault.python_stack.iter().find(|f| is_user_file(&f.file)) else {
        let exe = exe?;
        let native = fault.backtrace.iter().find(|l| l.contains(&format!("({exe}+")))?;
        return Some(native_user_line(native));
    };
    let source = std::fs::read_to_string(&frame.file)
        .ok()
        .and_then(|text| text.lines().nth(frame.line.saturating_sub(1) as usize).map(|l| l.trim().to_string()))
        .filter(|l| !l.is_empty());
    let place = format!("{}:{} in {}", frame.file, frame.line, frame.function);
    Some(match source {
        Some(line) => format!("{place}: {line}"),
        None => place,
    })
}

/// "mlp.c:57 in linear_forward: gemm(...)" from "linear_forward at /src/mlp.c:57 (/bin/mlp+0x1634) [0x...]".
fn native_user_line(frame: &str) -> String {
    let head = frame.split(" (").next().unwrap_or(frame);
    match head.split_once(" at ") {
        Some((function, place)) => {
            let source = place.rsplit_once(':').and_then(|(file, line)| {
                let n: usize = line.parse().ok()?;
                std::fs::read_to_string(file).ok()?.lines().nth(n.checked_sub(1)?).map(|l| l.trim().to_string())
            });
            match source.filter(|s| !s.is_empty()) {
                Some(s) => format!("{place} in {function}: {s}"),
                None => format!("{place} in {function}"),
            }
        }
        None => format!("{head} in {}", frame.split(" (").nth(1).and_then(|r| r.split('+').next()).unwrap_or("the program")),
    }
}

fn operand_text(o: &trace::Operand) -> String {
    let mut s = format!("{} {} {} x {} (ld {}) at {}", o.name, o.dtype, o.rows, o.cols, o.ld, o.ptr);
    if o.pointer_array {
        // The pointer is the array of matrix pointers; its members live elsewhere.
        match &o.allocation {
            Some(a) => s.push_str(&format!(", an array of pointers in allocation {} of {}", a.base, bytes(a.size))),
            None => s.push_str(", an array of pointers in no allocation the guard saw"),
        }
        match (&o.member_allocation, o.bad_member) {
            (Some(a), Some(b)) => s.push_str(&format!("; member {b} in allocation {} of {}", a.base, bytes(a.size))),
            (Some(a), None) => s.push_str(&format!("; its first member in allocation {} of {}", a.base, bytes(a.size))),
            (None, Some(b)) => s.push_str(&format!("; member {b} in no allocation the guard saw")),
            (None, None) => {}
        }
    } else if let Some(a) = &o.allocation {
        s.push_str(&format!(", in allocation {} of {}", a.base, bytes(a.size)));
    } else {
        s.push_str(", in no allocation the guard saw");
    }
    if o.scanned {
        match (o.nan.unwrap_or(0), o.inf.unwrap_or(0), o.first_nonfinite) {
            (0, 0, _) => s.push_str(": finite"),
            (nan, inf, first) => {
                s.push_str(&format!(": {nan} NaN, {inf} Inf"));
                if o.sampled {
                    s.push_str(" (in a sample)");
                }
                if let Some(p) = first {
                    s.push_str(&format!(", first at row {}, col {}", p.row, p.col));
                }
            }
        }
    } else {
        s.push_str(": not scanned");
    }
    s
}

fn who(e: &Entry) -> String {
    match e.rank {
        Some(r) => format!("pid {} rank {r} on {}", e.pid, e.hostname),
        None => format!("pid {} on {}", e.pid, e.hostname),
    }
}

/// Adds counts from traces without wrapping: a hostile trace may claim 2^63 faults.
pub fn total(values: impl Iterator<Item = u64>) -> u64 {
    values.fold(0, u64::saturating_add)
}

/// Calls across all traces.
pub fn total_calls(loaded: &[Loaded]) -> u64 {
    total(loaded.iter().map(|l| total(l.trace.summary.calls.values().copied())))
}

/// Text for a terminal: control characters from a trace (escape sequences, carriage returns)
/// are shown as `\u{..}`, never sent raw; the report's own newlines and tabs stay.
pub fn escape_controls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if (c.is_control() && c != '\n' && c != '\t') || matches!(c, '\u{2028}' | '\u{2029}') {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// Shown in full; the rest are summarised by kind.
const SHOWN: usize = 20;

pub fn render(loaded: &[Loaded], format: Format) -> String {
    let entries = merge(loaded);
    match format {
        Format::Json => {
            #[derive(Serialize)]
            struct Report<'a> {
                traces: Vec<&'a Path>,
                calls: u64,
                faults: usize,
                first: Option<&'a Entry<'a>>,
                entries: &'a [Entry<'a>],
            }
            let calls = total_calls(loaded);
            let report = Report {
                traces: loaded.iter().map(|l| l.path.as_path()).collect(),
                calls,
                faults: entries.len(),
                first: entries.first(),
                entries: &entries,
            };
            serde_json::to_string_pretty(&report).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}")) + "\n"
        }
        Format::Text | Format::Markdown => escape_controls(&text(loaded, &entries, format == Format::Markdown)),
    }
}

fn text(loaded: &[Loaded], entries: &[Entry], md: bool) -> String {
    let mut out = String::new();
    let calls = total_calls(loaded);
    let dropped = total(loaded.iter().map(|l| l.trace.summary.faults.saturating_sub(l.trace.faults.len() as u64)));
    let h1 = if md { "# " } else { "" };
    let _ = writeln!(
        out,
        "{h1}cublasguard report: {} fault(s) in {} intercepted call(s), {} process(es)",
        entries.len() as u64 + dropped,
        calls,
        loaded.len()
    );
    // The rules that kept faults out of the traces, with their counts.
    let mut ignored: std::collections::BTreeMap<&str, u64> = Default::default();
    for l in loaded {
        for (rule, n) in &l.trace.summary.ignored_faults {
            let slot = ignored.entry(rule.as_str()).or_insert(0);
            *slot = slot.saturating_add(*n);
        }
    }
    for (rule, n) in &ignored {
        let _ = writeln!(out, "ignored by CUBLASGUARD_IGNORE '{rule}': {n} fault(s)");
    }
    if entries.is_empty() {
        let _ = writeln!(out, "\nNo faults: every intercepted call passed the guard's checks.");
        environment(&mut out, loaded, md);
        return out;
    }
    let first = &entries[0];
    let _ = writeln!(out, "\nFirst fault: {} #{} in {} ({})", first.fault.api, first.fault.seq, who(first), first.trace.display());
    let mut compact = false;
    for (i, e) in entries.iter().take(SHOWN).enumerate() {
        let f = e.fault;
        let d = &e.diagnosis;
        if let Some(origin) = e.propagated_from {
            // Propagation adds nothing new: one line, so the fault that matters stands out.
            let gap = if compact { "" } else { "\n" };
            let _ = writeln!(out, "{gap}[{}] {} #{}: {}, propagated from #{origin}: {}", i + 1, f.api, f.seq, f.kind.name(), f.message);
            compact = true;
            continue;
        }
        compact = false;
        if md {
            let _ = writeln!(out, "\n## {}. `{}` #{}: {}\n", i + 1, f.api, f.seq, f.kind.name());
        } else {
            let _ = writeln!(out, "\n[{}] {} #{}: {} ({}, thread {})", i + 1, f.api, f.seq, f.kind.name(), who(e), f.thread);
        }
        let bullet = if md { "- " } else { "    " };
        // The user's own line first: where in their code this call came from.
        if let Some(line) = user_line(f, e.exe) {
            let _ = writeln!(out, "{bullet}at {line}");
        } else if let Some(note) = &f.python_stack_note {
            let _ = writeln!(out, "{bullet}no Python frames: {note}");
        }
        let _ = writeln!(out, "{bullet}{}", f.message);
        let _ = writeln!(out, "{bullet}call: {}", call_text(f));
        if let Some(layer) = &d.layer {
            let _ = writeln!(out, "{bullet}{layer}");
        }
        for o in &f.operands {
            let _ = writeln!(out, "{bullet}operand {}", operand_text(o));
        }
        for k in &f.suspects {
            let _ = writeln!(
                out,
                "{bullet}suspect #{} {} (grid {}x{}x{}, block {}x{}x{}, stream {})",
                k.seq, k.kernel, k.grid[0], k.grid[1], k.grid[2], k.block[0], k.block[1], k.block[2], k.stream
            );
        }
        for r in &d.row_major {
            let _ = writeln!(out, "{bullet}{r}");
        }
        if let Some(h) = &f.handle {
            let tf32 = if h.reduced_precision { " (TF32: reduced precision)" } else { "" };
            let _ = writeln!(out, "{bullet}handle {}: math {}{tf32}, pointer mode {}, stream {}", h.ptr, h.math_mode, h.pointer_mode, h.stream);
        }
        if let Some(e) = &f.error {
            let _ = writeln!(out, "{bullet}CUDA error: {} ({}) from {}", e.name, e.code, e.call);
        }
        if let Some(m) = f.memory {
            let device = match (m.free, m.total) {
                (Some(free), Some(total)) => format!("{} free of {}", bytes(free), bytes(total)),
                _ => "device memory unknown".into(),
            };
            let _ = writeln!(out, "{bullet}memory: {device}; {} live in {} allocations the guard saw", bytes(m.tracked_live_bytes), m.tracked_live_count);
        }
        match (&f.dump, &f.dump_note) {
            (Some(path), note) => {
                let left_out = note.as_deref().map(|n| format!(" ({n})")).unwrap_or_default();
                let _ = writeln!(out, "{bullet}operands dumped to {path}{left_out}; `cublasguard replay {path}` checks them against an exact result");
            }
            (None, Some(note)) => {
                let _ = writeln!(out, "{bullet}no operand dump: {note}");
            }
            (None, None) => {}
        }
        let _ = writeln!(out, "{bullet}probable cause: {}", d.cause);
        for step in &d.next_steps {
            let _ = writeln!(out, "{bullet}next: {step}");
        }
        if let Some(frame) = f.backtrace.first() {
            let _ = writeln!(out, "{bullet}called from: {frame}");
        }
    }
    if entries.len() > SHOWN || dropped > 0 {
        let mut kinds: std::collections::BTreeMap<&str, usize> = Default::default();
        for e in entries.iter().skip(SHOWN) {
            *kinds.entry(e.fault.kind.name()).or_default() += 1;
        }
        let summary: Vec<String> = kinds.iter().map(|(k, n)| format!("{n} {k}")).collect();
        let _ = writeln!(
            out,
            "\n... and {} more fault(s) not shown ({}); {} counted but not stored by the guard",
            entries.len().saturating_sub(SHOWN),
            if summary.is_empty() { "none".into() } else { summary.join(", ") },
            dropped
        );
    }
    environment(&mut out, loaded, md);
    out
}

fn environment(out: &mut String, loaded: &[Loaded], md: bool) {
    let Some(first) = loaded.first() else { return };
    let env = &first.trace.environment;
    let v = |x: Option<i32>| x.map(|v| format!("{}.{}", v / 1000, v % 1000 / 10)).unwrap_or_else(|| "unknown".into());
    let heading = if md { "\n## Environment\n" } else { "\nEnvironment:" };
    let _ = writeln!(out, "{heading}");
    let bullet = if md { "- " } else { "    " };
    let _ = writeln!(
        out,
        "{bullet}CUDA runtime {}, driver {}{}, cuBLAS {}",
        v(env.runtime_version),
        v(env.driver_version),
        if env.driver.loaded { "" } else { " (libcuda.so.1 not loaded)" },
        env.cublas_version.map(|c| format!("{}.{}.{}", c / 10000, c / 100 % 100, c % 100)).unwrap_or_else(|| "unknown".into())
    );
    for lib in &env.libraries {
        let _ = writeln!(out, "{bullet}{} => {}", lib.soname, lib.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_from_a_trace_never_reach_the_terminal_raw() {
        let shown = escape_controls("bad\u{1b}[2J\rname\u{7}\u{9b}1m\nnext\tcol");
        assert_eq!(shown, "bad\\u{1b}[2J\\u{d}name\\u{7}\\u{9b}1m\nnext\tcol");
        assert!(!shown.chars().any(|c| c.is_control() && c != '\n' && c != '\t'));
    }

    #[test]
    fn fault_counts_never_wrap() {
        assert_eq!(total([1u64 << 63, 1u64 << 63].into_iter()), u64::MAX);
        assert_eq!(total([2, 3].into_iter()), 5);
    }

    #[test]
    fn folder_without_traces_is_an_error() {
        let dir = std::env::temp_dir().join(format!("cg-report-empty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(expand(std::slice::from_ref(&dir)).unwrap_err().contains("no .json trace files"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn empty_report_says_no_faults() {
        let loaded = vec![Loaded { path: "t.json".into(), trace: Trace::default() }];
        let text = render(&loaded, Format::Text);
        assert!(text.contains("0 fault(s)") && text.contains("No faults"), "{text}");
    }
}
