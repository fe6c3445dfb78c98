//! The report as text or CommonMark: the title and what the readers left out, a hang's opening,
//! the summary table, the first fault, each root cause in full up to the limit, what the guard
//! did not scan, then the environment.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use cublasguard_format::trace::{FaultKind, Trace};

use super::cause_entry::cause_entry;
use super::causes::{causes, nonfinite_maker, summary_rows, tally};
use super::doc::Doc;
use super::environment::environment;
use super::load::{total, total_calls, Loaded};
use super::markdown::{md_block_safe, md_code};
use super::merge::{who, Entry};
use super::{coverage, hang_report};

/// "NaN/Inf first made in pid 12 rank 1 on host at 12:00:01.250 UTC: ...; rank 0, rank 2 only
/// consumed it".
fn nonfinite_maker_line(entries: &[Entry], maker: &Entry) -> String {
    let f = maker.fault;
    let what = match f.args.get("kernel").and_then(|k| k.as_str()) {
        Some(kernel) => format!("kernel {kernel}, launched at {} #{}", f.api, f.seq),
        None => format!("{} #{} ({})", f.api, f.seq, maker.kind),
    };
    let mut consumers: Vec<String> = Vec::new();
    for e in entries.iter().filter(|e| e.source != maker.source && e.fault.kind == FaultKind::NonfiniteInput) {
        let name = match e.rank {
            Some(r) => format!("rank {r}"),
            None => format!("pid {}", e.pid),
        };
        let makes = entries.iter().any(|x| x.source == e.source && matches!(x.fault.kind, FaultKind::NonfiniteOrigin | FaultKind::NonfiniteOutput));
        if !makes && !consumers.contains(&name) {
            consumers.push(name);
        }
    }
    let secs = f.time_ns / 1_000_000_000;
    let time = format!("{:02}:{:02}:{:02}.{:03} UTC", secs / 3600 % 24, secs / 60 % 60, secs % 60, f.time_ns / 1_000_000 % 1000);
    let tail = if consumers.is_empty() { String::new() } else { format!("; {} only consumed it", consumers.join(", ")) };
    format!("NaN/Inf first made in {} at {time}: {what}{tail}", who(maker))
}

/// A process ended by SIGTERM or SIGINT (its crash record says so): who may have sent it, and
/// its last recorded call, where it was when it was stopped.
fn ended_from_outside(t: &Trace) -> Option<String> {
    let crash = t.crash.as_ref().filter(|c| c.name == "SIGTERM" || c.name == "SIGINT")?;
    let sender = if crash.name == "SIGINT" { "Ctrl-C, or a launcher passing it on" } else { "a scheduler's time limit, torchrun stopping its workers, kill" };
    let last = match t.recent_calls.last() {
        Some(c) => format!("its last recorded call was {} #{}", c.api, c.seq),
        None => "no call of it was recorded".to_string(),
    };
    Some(format!("pid {} was ended by {} from outside ({sender}); its trace was written as it ended, and {last}.", t.process.pid, crash.name))
}

pub(super) fn text(loaded: &[Loaded], entries: &[Entry], md: bool, limit: Option<usize>) -> String {
    let mut doc = Doc { md, out: String::new() };
    let calls = total_calls(loaded);
    let not_stored = total(loaded.iter().map(Loaded::not_stored));
    let unreadable = total(loaded.iter().map(|l| l.unreadable_faults));
    let faults = total([entries.len() as u64, not_stored, unreadable].into_iter());
    let title = format!("cublasguard report: {faults} fault(s) in {calls} intercepted call(s), {} process(es)", loaded.len());
    let _ = writeln!(doc.out, "{}{title}", if md { "# " } else { "" });
    // What the reader left out, and the rules that kept faults out of the traces.
    let mut preamble: Vec<String> = Vec::new();
    for l in loaded {
        for n in &l.notes {
            preamble.push(format!("note: {}: {}", doc.c(&l.path.display().to_string()), doc.t(n)));
        }
    }
    let mut ignored: BTreeMap<&str, u64> = Default::default();
    for l in loaded {
        for (rule, n) in &l.trace.summary.ignored_faults {
            let slot = ignored.entry(rule.as_str()).or_insert(0);
            *slot = slot.saturating_add(*n);
        }
    }
    for (rule, n) in &ignored {
        let rule = if md { doc.c(rule) } else { format!("'{rule}'") };
        preamble.push(format!("ignored by CUBLASGUARD_IGNORE {rule}: {n} fault(s)"));
    }
    preamble.extend(loaded.iter().filter_map(|l| ended_from_outside(&l.trace)));
    if md && !preamble.is_empty() {
        doc.out.push('\n');
    }
    for line in &preamble {
        if md {
            let _ = writeln!(doc.out, "- {}", md_block_safe(line));
        } else {
            let _ = writeln!(doc.out, "{line}");
        }
    }
    let not_stored_line = (not_stored > 0).then(|| {
        let hold = if loaded.len() == 1 { "the trace holds" } else { "the traces hold" };
        format!("The guard counted {not_stored} more fault(s) that it did not store (past CUBLASGUARD_MAX_FAULTS): {hold} only their number.")
    });
    let unreadable_line = (unreadable > 0).then(|| format!("{unreadable} stored fault(s) could not be read by this cublasguard: see the note above."));
    let unscanned = coverage::unscanned_lines(loaded.iter().map(|l| &l.trace.summary));
    // A hang leads: the kernel each process is stuck in and where its host waits.
    for line in hang_report::lines(loaded) {
        doc.para(&doc.t(&line));
    }
    if entries.is_empty() {
        if faults == 0 && unscanned.is_empty() {
            doc.para("No faults: every intercepted call passed the guard's checks.");
        } else if faults == 0 {
            doc.para("No faults in what the guard checked:");
        }
        for line in not_stored_line.iter().chain(&unreadable_line).chain(&unscanned) {
            doc.para(line);
        }
        environment(&mut doc, loaded);
        return doc.out;
    }
    summary_table(&mut doc, entries);
    let first = &entries[0];
    let line =
        format!("First fault: {} #{} in {} ({})", doc.c(&first.fault.api), first.fault.seq, doc.t(&who(first)), doc.c(&first.trace.display().to_string()));
    doc.para(&line);
    let mut causes = causes(entries);
    if let Some(maker) = nonfinite_maker(entries) {
        // Several processes saw NaN/Inf: the one that made it leads, whatever the clocks say.
        if let Some(at) = causes.iter().position(|c| std::ptr::eq(c.entry, maker)) {
            let first = causes.remove(at);
            causes.insert(0, first);
        }
        doc.para(&doc.t(&nonfinite_maker_line(entries, maker)));
    }
    let shown = limit.unwrap_or(usize::MAX).min(causes.len());
    for (i, cause) in causes.iter().take(shown).enumerate() {
        cause_entry(&mut doc, i + 1, cause, limit.is_none());
    }
    let cut: Vec<&Entry> = causes[shown..].iter().flat_map(|c| std::iter::once(c.entry).chain(c.followers.iter().copied())).collect();
    if !cut.is_empty() {
        let line = format!(
            "... and {} more fault(s) not shown, under {} more root cause(s) ({}): {} shows them all, {} the first N root causes.",
            cut.len(),
            causes.len() - shown,
            doc.t(&tally(&cut)),
            doc.c("--all"),
            doc.c("--limit N")
        );
        doc.para(&line);
    }
    for line in not_stored_line.iter().chain(&unreadable_line).chain(&unscanned) {
        doc.para(line);
    }
    environment(&mut doc, loaded);
    doc.out
}

fn summary_table(doc: &mut Doc, entries: &[Entry]) {
    let rows = summary_rows(entries);
    let header = ["faults", "kind", "function", "call site"];
    if doc.md {
        doc.heading("Faults by kind, function and call site", "");
        let cell = |s: &str| md_code(s).replace('|', "\\|");
        let _ = writeln!(doc.out, "| {} |\n| ---: | --- | --- | --- |", header.join(" | "));
        for r in &rows {
            let _ = writeln!(doc.out, "| {} | {} | {} | {} |", r.faults, cell(&r.kind), cell(&r.api), cell(&r.site));
        }
        return;
    }
    let _ = writeln!(doc.out, "\nFaults by kind, function and call site:");
    let cells: Vec<[String; 4]> = rows.iter().map(|r| [r.faults.to_string(), r.kind.clone(), r.api.clone(), r.site.clone()]).collect();
    let width = |col: usize| cells.iter().map(|c| c[col].chars().count()).chain([header[col].len()]).max().unwrap_or(0);
    let widths = [width(0), width(1), width(2)];
    let line = |c: [&str; 4]| format!("    {:>w0$}  {:<w1$}  {:<w2$}  {}", c[0], c[1], c[2], c[3], w0 = widths[0], w1 = widths[1], w2 = widths[2]);
    let _ = writeln!(doc.out, "{}", line(header).trim_end());
    for c in &cells {
        let _ = writeln!(doc.out, "{}", line([&c[0], &c[1], &c[2], &c[3]]).trim_end());
    }
}
