//! One root cause in full: the user's line and its callers, the call and its operands, the
//! kernels behind it, the handle, the memory, the operand dump, the probable cause and the next
//! steps, then the faults that follow from it, counted or listed.

use std::fmt::Write as _;

use cublasguard_format::trace::{self, Fault, FaultKind};

use super::call_sites::{first_line, user_callers, user_place};
use super::causes::{tally, Cause};
use super::diagnosis::bytes;
use super::doc::Doc;
use super::markdown::{md_code, md_text};
use super::merge::{who, Entry, Relation};
use super::replay_offer::replay_check;
use crate::escape::shell_word;

fn call_text(f: &Fault) -> String {
    let args: Vec<String> = f.args.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{}({}) -> {} ({})", f.api, args.join(", "), f.status_name, f.status)
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
    } else if o.not_checked.is_none() {
        s.push_str(", in no allocation the guard saw");
    }
    // What the guard did not look at is said as such, never as a finding.
    if let Some(why) = &o.not_checked {
        s.push_str(&format!(" (extent not checked: {why})"));
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

/// The fault's message less what the entry's other lines say: the status it returned (the
/// call line names it) and the cause of a failed start (the probable-cause line says it).
/// None when nothing else is left.
fn message_shown(f: &Fault) -> Option<String> {
    let mut m = f.message.as_str();
    if let Some(rest) = m.strip_prefix(&format!("returned {} ({})", f.status_name, f.status)) {
        m = rest;
    }
    let mut m = m.to_string();
    if let Some(c) = f.cause.as_ref().filter(|c| !c.message.is_empty()) {
        // Whole, as older guards wrote it, or as `cause_shown` says it, as the guard now does.
        m = m.replace(&c.message, "").replace(&cause_shown(f, &c.message), "");
    }
    let m = m.trim_matches(|c: char| c.is_whitespace() || ":;,".contains(c));
    (!m.is_empty()).then(|| m.to_string())
}

/// The probable cause less a clause that restates what this very call returned ("; cudaGetDeviceCount
/// returns cudaErrorInsufficientDriver (35)" beside a call that returned cudaErrorInsufficientDriver
/// (35): cudaGetDeviceCount's own fault, or cudaMalloc's after it). The guard's message drops it
/// the same way (check::init::after_status).
fn cause_shown(f: &Fault, cause: &str) -> String {
    cause.replace(&format!("; cudaGetDeviceCount returns {} ({})", f.status_name, f.status), "")
}

pub(super) fn cause_entry(doc: &mut Doc, n: usize, cause: &Cause, all: bool) {
    let e = cause.entry;
    let f = e.fault;
    let d = &e.diagnosis;
    if doc.md {
        let _ = writeln!(doc.out, "\n## {n}. {} #{}: {}\n", md_code(&f.api), f.seq, md_text(e.kind));
        doc.item(&format!("in {}, thread {}", md_text(&who(e)), f.thread));
    } else {
        let _ = writeln!(doc.out, "\n[{n}] {} #{}: {} ({}, thread {})", f.api, f.seq, e.kind, who(e), f.thread);
    }
    // The user's own line first: where in their code this call came from.
    if let Some((place, source)) = user_place(f, e.exe, e.python) {
        let line = match source {
            Some(s) => format!("at {}: {}", doc.c(&place), doc.c(&s)),
            None => format!("at {}", doc.c(&place)),
        };
        doc.item(&line);
        for (place, source) in user_callers(f, e.exe, e.python) {
            let line = match source {
                Some(s) => format!("called from {}: {}", doc.c(&place), doc.c(&s)),
                None => format!("called from {}", doc.c(&place)),
            };
            doc.sub_item(&line);
        }
    } else if let Some(note) = &f.python_stack_note {
        doc.item(&format!("no Python frames: {}", doc.t(note)));
    }
    if let Some(m) = message_shown(f) {
        doc.item(&doc.t(&m));
    }
    doc.item(&format!("call: {}", doc.c(&call_text(f))));
    if let Some(layer) = &d.layer {
        doc.item(&doc.t(layer));
    }
    for o in &f.operands {
        doc.item(&format!("operand {}", doc.t(&operand_text(o))));
    }
    // The kernels behind a pending error, and those that wrote a consumed NaN/Inf.
    for (label, launches) in [("suspect", &f.suspects), ("writer", &f.writers)] {
        for k in launches {
            let launched_at = first_line(&k.backtrace).map(|l| format!(", launched at {}", doc.t(&l))).unwrap_or_default();
            let line = format!(
                "{label} #{} {} (grid {}x{}x{}, block {}x{}x{}, stream {}{launched_at})",
                k.seq,
                doc.c(&k.kernel),
                k.grid[0],
                k.grid[1],
                k.grid[2],
                k.block[0],
                k.block[1],
                k.block[2],
                doc.t(&k.stream)
            );
            doc.item(&line);
        }
    }
    for r in &d.row_major {
        doc.item(&doc.t(r));
    }
    if let Some(h) = &f.handle {
        let tf32 = if h.reduced_precision { " (TF32: reduced precision)" } else { "" };
        doc.item(&doc.t(&format!("handle {}: math {}{tf32}, pointer mode {}, stream {}", h.ptr, h.math_mode, h.pointer_mode, h.stream)));
    }
    if let Some(err) = &f.error {
        doc.item(&doc.t(&format!("CUDA error: {} ({}) from {}", err.name, err.code, err.call)));
    }
    if let Some(m) = f.memory {
        let device = match (m.free, m.total) {
            (Some(free), Some(total)) => Some(format!("{} free of {}", bytes(free), bytes(total))),
            _ => None,
        };
        // Nothing known at all (CUDA never started) says nothing.
        if device.is_some() || m.tracked_live_count > 0 {
            let device = device.unwrap_or_else(|| "device memory unknown".into());
            doc.item(&doc.t(&format!("memory: {device}; {} live in {} allocations the guard saw", bytes(m.tracked_live_bytes), m.tracked_live_count)));
        }
    }
    match (&f.dump, &f.dump_note) {
        (Some(dump), note) => {
            let (path, check) = replay_check(dump, e.trace);
            let shown = path.display().to_string();
            let line = match check {
                Ok(()) => {
                    let left_out = note.as_deref().map(|n| format!(" ({})", doc.t(n))).unwrap_or_default();
                    let command = format!("cublasguard replay {}", shell_word(&shown));
                    format!("operands dumped to {}{left_out}; {} checks them against an exact result", doc.c(&shown), doc.c(&command))
                }
                Err(why) => {
                    // The dump's own record of what it left out is usually the reason.
                    let left_out = note.as_deref().filter(|n| !why.contains(*n)).map(|n| format!(" ({})", doc.t(n))).unwrap_or_default();
                    format!("operands dumped to {}{left_out}, but it cannot be replayed: {}", doc.c(&shown), doc.t(&why))
                }
            };
            doc.item(&line);
        }
        (None, Some(note)) => doc.item(&format!("no operand dump: {}", doc.t(note))),
        (None, None) => {}
    }
    doc.item(&format!("probable cause: {}", doc.t(&cause_shown(f, &d.cause))));
    if f.kind == FaultKind::NonfiniteOrigin {
        // Where it went next: the first guarded call that consumed it, in the layer's terms.
        if let Some(next) = cause.followers.iter().find(|x| x.relation == Some(Relation::Propagated)) {
            let layer = next.diagnosis.layer.as_deref().map(|l| format!(" ({l})")).unwrap_or_default();
            doc.item(&format!("first consumed by: {} #{}{}", doc.c(&next.fault.api), next.fault.seq, doc.t(&layer)));
        }
    }
    for line in &d.gpu_context {
        doc.item(&format!("gpu: {}", doc.t(line)));
    }
    for step in &d.next_steps {
        doc.item(&format!("next: {}", doc.t(step)));
    }
    if let Some(frame) = f.backtrace.first() {
        doc.item(&format!("called from: {}", doc.c(frame)));
    }
    // The faults that follow from this one: counted, or with --all one line each.
    for relation in [Relation::Propagated, Relation::ContextLost, Relation::SameCause] {
        let followers: Vec<&Entry> = cause.followers.iter().copied().filter(|x| x.relation == Some(relation)).collect();
        let (Some(first), Some(last)) = (followers.first(), followers.last()) else { continue };
        let what = match relation {
            Relation::Propagated => format!("{} later fault(s) propagated from #{}", followers.len(), f.seq),
            Relation::ContextLost => format!("{} later fault(s) that failed because #{} left the CUDA context unusable", followers.len(), f.seq),
            Relation::SameCause => format!("{} more fault(s) with the same cause as #{}", followers.len(), f.seq),
        };
        let calls = if followers.len() == 1 { format!("#{}", first.fault.seq) } else { format!("#{} to #{}", first.fault.seq, last.fault.seq) };
        let hint = if all { String::new() } else { format!("; {} lists each", doc.c("--all")) };
        let prefix = if doc.md { "" } else { "+ " };
        doc.item(&format!("{prefix}{what}: {} ({calls}){hint}", doc.t(&tally(&followers))));
        if all {
            for x in &followers {
                let line = format!("{} #{}: {}: {}", doc.c(&x.fault.api), x.fault.seq, doc.t(x.kind), doc.t(&x.fault.message));
                doc.sub_item(&line);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cublasguard_format::trace::InitCauseKind;

    #[test]
    fn the_message_loses_what_the_call_line_and_the_cause_already_say() {
        let mut f = Fault::new(1, "cublasSgemm_v2", FaultKind::ApiError, "m", 13, "CUBLAS_STATUS_EXECUTION_FAILED");
        f.status_name = "cudaErrorInsufficientDriver".into();
        f.status = 35;
        f.api = "cudaGetDeviceCount".into();
        let cause = "no NVIDIA driver: libcuda.so.1 cannot be loaded (x); cudaGetDeviceCount returns cudaErrorInsufficientDriver (35)";
        f.message = format!("returned cudaErrorInsufficientDriver (35): {cause}");
        f.cause = Some(trace::InitCause::new(InitCauseKind::NoDriver, cause));
        assert_eq!(message_shown(&f), None);
        assert_eq!(cause_shown(&f, cause), "no NVIDIA driver: libcuda.so.1 cannot be loaded (x)");
        // As the guard writes it now: the clause left out of the message.
        f.api = "cudaMalloc".into();
        f.message = "returned cudaErrorInsufficientDriver (35): no NVIDIA driver: libcuda.so.1 cannot be loaded (x)".into();
        assert_eq!(message_shown(&f), None);
        assert_eq!(cause_shown(&f, cause), "no NVIDIA driver: libcuda.so.1 cannot be loaded (x)");
        f.message = "returned cudaErrorInsufficientDriver (35): 0x10 is not the start of a live allocation".into();
        assert_eq!(message_shown(&f).as_deref(), Some("0x10 is not the start of a live allocation"));
    }
}
