//! The verdict at the end of `cublasguard run`: the faults of its traces in a few lines, the
//! first one's place, cause and next steps, and the traces of CPU-only processes that only asked
//! whether CUDA is usable, summarised and removed.

use std::path::PathBuf;

use cublasguard_format::trace::Trace;

use crate::escape::escape_controls;
use crate::report;

/// Whether a trace holds nothing but a failed capability probe: a CPU-only program that asked
/// `torch.cuda.is_available()` (cudaGetDeviceCount) and did no CUDA work. A guarded process
/// cannot tell that its trace file was run's default and not the user's wish; run can.
pub fn probe_only(t: &Trace) -> bool {
    let s = &t.summary;
    t.environment.probe.is_some()
        && t.faults.is_empty()
        && t.crash.is_none()
        && s.faults == 0
        && s.dropped_faults == 0
        && s.scanned_calls == 0
        && s.skipped_scans == 0
        && s.captured_calls == 0
        && s.ignored_faults.values().all(|&n| n == 0)
}

/// Removes the probe-only traces from `traces` and from disk (run's default pattern puts them in
/// the working folder, one per CPU-only process, unasked for); returns what each probe found,
/// for the summary.
pub(super) fn take_probe_only(traces: &mut Vec<PathBuf>) -> Vec<String> {
    let mut notes = Vec::new();
    traces.retain(|path| {
        let Ok(t) = cublasguard_format::trace::read(path) else { return true };
        let Some(probe) = t.environment.probe.as_ref().filter(|_| probe_only(&t)) else { return true };
        if std::fs::remove_file(path).is_err() {
            return true;
        }
        let cause = probe.cause.as_ref().map(|c| c.message.as_str()).filter(|m| !m.is_empty()).unwrap_or(probe.status_name.as_str());
        notes.push(format!(
            "pid {} asked {} (#{}) whether CUDA is usable and it is not: {}; it did no CUDA work, so its trace is not \
             kept (--trace PATH keeps it)",
            t.process.pid,
            probe.api,
            probe.seq,
            escape_controls(cause)
        ));
        false
    });
    notes
}

/// "1 call", "16 calls".
pub fn counted(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

pub(super) fn summarise(traces: &[PathBuf], probes: &[String], pattern: &str) {
    for note in probes {
        eprintln!("cublasguard: {note}");
    }
    if traces.is_empty() {
        if probes.is_empty() {
            eprintln!("cublasguard: no trace was written ({pattern}): the command made no CUDA call the guard saw");
        }
        return;
    }
    let loaded = match report::load(traces) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("cublasguard: cannot read a trace: {e}");
            return;
        }
    };
    let entries = report::merge(&loaded);
    let calls = report::total_calls(&loaded);
    let names: Vec<String> = traces.iter().map(|p| p.display().to_string()).collect();
    let unscanned = crate::report::coverage::unscanned_lines(loaded.iter().map(|l| &l.trace.summary));
    if entries.is_empty() {
        eprintln!("cublasguard: no faults in {} (trace: {})", counted(calls, "call"), names.join(", "));
        unscanned.iter().for_each(|line| eprintln!("  {line}"));
        return;
    }
    let total = report::total(loaded.iter().map(|l| l.trace.summary.faults));
    eprintln!("cublasguard: {} in {}; first ones:", counted(total, "fault"), counted(calls, "call"));
    for e in entries.iter().take(3) {
        eprintln!("  {} #{} [{}] {}", escape_controls(&e.fault.api), e.fault.seq, e.fault.kind.name(), escape_controls(&e.fault.message));
    }
    let first = &entries[0];
    if let Some(line) = report::call_sites::user_line(first.fault, first.exe, first.python) {
        eprintln!("  at {}", escape_controls(&line));
    }
    eprintln!("  probable cause: {}", escape_controls(&first.diagnosis.cause));
    for step in first.diagnosis.next_steps.iter().take(2) {
        eprintln!("  next: {}", escape_controls(step));
    }
    unscanned.iter().for_each(|line| eprintln!("  {line}"));
    eprintln!("  full report: cublasguard report {}", names.join(" "));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_said_in_the_singular_for_one() {
        assert_eq!(format!("{} in {}", counted(1, "fault"), counted(1, "call")), "1 fault in 1 call");
        assert_eq!(format!("{} in {}", counted(2, "fault"), counted(0, "call")), "2 faults in 0 calls");
    }

    #[test]
    fn only_a_trace_with_a_probe_and_nothing_else_is_probe_only() {
        use cublasguard_format::trace::{Crash, ProbeNote};
        let mut t = Trace::default();
        assert!(!probe_only(&t), "no probe: a process that used CUDA");
        t.environment.probe = Some(ProbeNote { api: "cudaGetDeviceCount".into(), status: 35, ..ProbeNote::default() });
        assert!(probe_only(&t));
        let scanned = Trace { summary: cublasguard_format::trace::Summary { scanned_calls: 1, ..t.summary.clone() }, ..t.clone() };
        assert!(!probe_only(&scanned), "a GEMM ran");
        let faulted = Trace { summary: cublasguard_format::trace::Summary { faults: 1, ..t.summary.clone() }, ..t.clone() };
        assert!(!probe_only(&faulted));
        assert!(!probe_only(&Trace { crash: Some(Crash::default()), ..t.clone() }), "a crash is worth its trace");
        let mut ignored = t.clone();
        ignored.summary.ignored_faults.insert("kind=nonfinite_input".into(), 2);
        assert!(!probe_only(&ignored));
    }
}
