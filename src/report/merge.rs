//! Every fault of every trace in one time order, each diagnosed with what came before it in its
//! own process, and tied to the root cause it follows from (NaN passed on, a context lost to an
//! earlier error, the same failure to start).

use std::collections::HashMap;
use std::path::Path;

use cublasguard_format::trace::{self, Fault, FaultKind, InitCauseKind};
use serde::Serialize;

use super::diagnosis::{self, Diagnosis, Program};
use super::load::Loaded;

/// How a fault follows from an earlier one of its process, under which the report counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Relation {
    /// NaN/Inf that an earlier call already held or produced, passed on.
    Propagated,
    /// The CUDA context was lost to the earlier fault's sticky error (`cause.pending_since_seq`).
    ContextLost,
    /// The same failure to start CUDA, reported again by another function.
    SameCause,
}

/// One fault of the merged run, with its process and diagnosis.
#[derive(Serialize)]
pub struct Entry<'a> {
    pub trace: &'a Path,
    pub pid: u32,
    pub rank: Option<i64>,
    pub hostname: &'a str,
    /// The fault's kind as its trace names it (a kind of a newer guard included).
    pub kind: &'a str,
    pub fault: &'a Fault,
    /// The process's executable, to find the program's own frames.
    #[serde(skip)]
    pub exe: Option<&'a str>,
    /// Where the process's Python keeps its own files, to find the user's frames.
    #[serde(skip)]
    pub python: Option<&'a trace::PythonPaths>,
    /// Which trace of the run it is in.
    #[serde(skip)]
    pub source: usize,
    /// Whose terms the advice is in.
    pub program: Program,
    /// For NaN/Inf that an earlier fault of the same process already saw: that fault's seq.
    pub propagated_from: Option<u64>,
    /// The root cause this fault follows from (a fault of the same process), and how: the
    /// report counts it under that one's entry.
    pub root: Option<u64>,
    pub relation: Option<Relation>,
    pub diagnosis: Diagnosis,
}

impl Entry<'_> {
    pub(super) fn key(&self) -> (usize, u64) {
        (self.source, self.fault.seq)
    }
}

/// Every fault of every trace, in time order, each diagnosed with what came before it in its
/// own process.
pub fn merge(loaded: &[Loaded]) -> Vec<Entry<'_>> {
    let programs: Vec<Program> = loaded.iter().map(|l| diagnosis::program_of(&l.trace)).collect();
    let mut all: Vec<(usize, usize)> = loaded.iter().enumerate().flat_map(|(li, l)| (0..l.trace.faults.len()).map(move |fi| (li, fi))).collect();
    let fault = |(li, fi): (usize, usize)| &loaded[li].trace.faults[fi];
    all.sort_by_key(|&(li, fi)| (fault((li, fi)).time_ns, loaded[li].trace.process.pid, fault((li, fi)).seq));
    let mut first_nonfinite: HashMap<usize, u64> = HashMap::new();
    // (trace, seq) of each fault seen so far -> its root cause's seq.
    let mut roots: HashMap<(usize, u64), u64> = HashMap::new();
    let mut first_start_failure: HashMap<(usize, String), u64> = HashMap::new();
    // (trace, sticky CUDA error) -> the first fault of that process that carried it.
    let mut first_sticky: HashMap<(usize, i32), u64> = HashMap::new();
    all.into_iter()
        .map(|(li, fi)| {
            let l = &loaded[li];
            let f = &l.trace.faults[fi];
            let earlier = first_nonfinite.get(&li).copied();
            if matches!(f.kind, FaultKind::NonfiniteInput | FaultKind::NonfiniteOutput | FaultKind::NonfiniteOrigin) {
                first_nonfinite.entry(li).or_insert(f.seq);
            }
            let propagated_from = earlier.filter(|_| f.kind == FaultKind::NonfiniteInput);
            let (origin, relation) = match (&f.cause, propagated_from) {
                (_, Some(o)) => (Some(o), Some(Relation::Propagated)),
                (Some(c), None) => {
                    let lost_at = c.pending_since_seq.filter(|s| c.kind == InitCauseKind::ContextLost && roots.contains_key(&(li, *s)));
                    let key = (li, format!("{:?} {}", c.kind, c.message));
                    match (lost_at, first_start_failure.get(&key)) {
                        (Some(s), _) => (Some(s), Some(Relation::ContextLost)),
                        (None, Some(&s)) => (Some(s), Some(Relation::SameCause)),
                        (None, None) => {
                            first_start_failure.insert(key, f.seq);
                            (None, None)
                        }
                    }
                }
                (None, None) => (None, None),
            };
            // A sticky error returned again by a later call (a cudaFree or cudaMemcpy after the
            // faulting kernel) follows from the first fault that carried it: not a cause of its own.
            let (origin, relation) = match sticky_code(f) {
                Some(code) => match first_sticky.get(&(li, code)) {
                    Some(&first) if origin.is_none() && f.kind == FaultKind::ApiError => (Some(first), Some(Relation::ContextLost)),
                    Some(_) => (origin, relation),
                    None => {
                        first_sticky.insert((li, code), f.seq);
                        (origin, relation)
                    }
                },
                None => (origin, relation),
            };
            let root = origin.map(|o| roots.get(&(li, o)).copied().unwrap_or(o));
            roots.insert((li, f.seq), root.unwrap_or(f.seq));
            Entry {
                trace: &l.path,
                pid: l.trace.process.pid,
                rank: l.trace.process.rank,
                hostname: &l.trace.process.hostname,
                kind: l.unknown_kinds.get(&fi).map(String::as_str).unwrap_or(f.kind.name()),
                fault: f,
                exe: l.trace.process.exe.as_deref(),
                python: l.trace.environment.python_paths.as_ref(),
                source: li,
                program: programs[li],
                propagated_from,
                root,
                relation: root.and(relation),
                diagnosis: reuse_diagnosis(diagnosis::diagnose(f, propagated_from, programs[li]), f, &l.trace.recent_calls),
            }
        })
        .collect()
}

/// The sticky CUDA error a fault carries: the error the guard recorded with it, or what a CUDA
/// call itself returned.
fn sticky_code(f: &Fault) -> Option<i32> {
    let code = f
        .error
        .as_ref()
        .map(|e| e.code)
        .or_else(|| (f.api.starts_with("cu") && !f.api.starts_with("cublas") && !f.api.starts_with("cudnn") && f.status != 0).then_some(f.status))?;
    cublasguard_format::cuda::cuda_error_is_sticky(code).then_some(code)
}

fn parse_hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.strip_prefix("0x")?, 16).ok()
}

/// An out-of-bounds operand whose allocation starts where the program freed a larger block
/// earlier (a `cudaFree` of that address in the trace's recent calls): the pointer was kept
/// after the free and the address handed out again to a smaller allocation.
fn freed_and_reused(f: &Fault, recent: &[trace::RecentCall]) -> Option<String> {
    if f.kind != FaultKind::OutOfBounds {
        return None;
    }
    f.operands.iter().find_map(|o| {
        let alloc = o.allocation.as_ref()?;
        let base = parse_hex(&alloc.base)?;
        let free = recent.iter().rev().find(|c| c.seq < f.seq && c.api.contains("Free") && c.args.address("ptr") == Some(base))?;
        let freed_size = free.args.int("size").and_then(|s| u64::try_from(s).ok());
        if freed_size.is_some_and(|s| s <= alloc.size) {
            return None; // the freed block was no larger: an overrun of the new one
        }
        let was = freed_size.map(|s| format!(" of {s} bytes")).unwrap_or_default();
        Some(format!(
            "freed and reused: operand {} points at {}, where {} (call #{}) freed a block{was}; the address was then handed out again to a smaller allocation ({} bytes), so the operand overruns it. The pointer was kept after the free",
            o.name, alloc.base, free.api, free.seq, alloc.size
        ))
    })
}

fn reuse_diagnosis(mut d: Diagnosis, f: &Fault, recent: &[trace::RecentCall]) -> Diagnosis {
    if let Some(cause) = freed_and_reused(f, recent) {
        d.cause = cause;
        d.next_steps.insert(0, "Find where this buffer was freed and stop using the pointer after that (set it to NULL at the free).".into());
    }
    d
}

pub(super) fn who(e: &Entry) -> String {
    match e.rank {
        Some(r) => format!("pid {} rank {r} on {}", e.pid, e.hostname),
        None => format!("pid {} on {}", e.pid, e.hostname),
    }
}
