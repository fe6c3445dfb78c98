//! The merged faults grouped: each root cause with the faults that follow from it, the summary's
//! rows by kind, function and call site, and the process that made a NaN/Inf several saw.

use std::collections::HashMap;

use cublasguard_format::trace::FaultKind;
use serde::Serialize;

use super::call_sites::call_site;
use super::merge::Entry;

/// A root cause and the faults that follow from it, in time order.
pub(super) struct Cause<'e, 'a> {
    pub(super) entry: &'e Entry<'a>,
    pub(super) followers: Vec<&'e Entry<'a>>,
}

pub(super) fn causes<'e, 'a>(entries: &'e [Entry<'a>]) -> Vec<Cause<'e, 'a>> {
    let mut out: Vec<Cause> = Vec::new();
    let mut index: HashMap<(usize, u64), usize> = HashMap::new();
    for e in entries {
        match e.root.and_then(|r| index.get(&(e.source, r))) {
            Some(&i) => out[i].followers.push(e),
            None => {
                index.insert(e.key(), out.len());
                out.push(Cause { entry: e, followers: Vec::new() });
            }
        }
    }
    out
}

/// One row of the summary: faults of one kind, in one function, from one call site.
#[derive(Serialize)]
pub struct Row {
    pub kind: String,
    pub api: String,
    pub site: String,
    pub faults: u64,
}

/// The faults by kind, function and call site, in the order each was first seen.
pub fn summary_rows(entries: &[Entry]) -> Vec<Row> {
    let mut rows: Vec<Row> = Vec::new();
    let mut index: HashMap<(String, String, String), usize> = HashMap::new();
    for e in entries {
        let key = (e.kind.to_string(), e.fault.api.clone(), call_site(e.fault, e.exe, e.python));
        match index.get(&key) {
            Some(&i) => rows[i].faults += 1,
            None => {
                index.insert(key.clone(), rows.len());
                rows.push(Row { kind: key.0, api: key.1, site: key.2, faults: 1 });
            }
        }
    }
    rows
}

/// Non-finite values seen by several processes (ranks): the fault where they were first made,
/// the earliest origin (`nonfinite_origin`), else the earliest produced NaN/Inf
/// (`nonfinite_output`). `None` with a single process, or nothing made anywhere.
pub(super) fn nonfinite_maker<'e, 'a>(entries: &'e [Entry<'a>]) -> Option<&'e Entry<'a>> {
    let nonfinite = |e: &&Entry| matches!(e.fault.kind, FaultKind::NonfiniteOrigin | FaultKind::NonfiniteOutput | FaultKind::NonfiniteInput);
    let processes: std::collections::BTreeSet<usize> = entries.iter().filter(nonfinite).map(|e| e.source).collect();
    if processes.len() < 2 {
        return None;
    }
    let earliest = |kind: FaultKind| entries.iter().filter(|e| e.fault.kind == kind).min_by_key(|e| e.fault.time_ns);
    earliest(FaultKind::NonfiniteOrigin).or_else(|| earliest(FaultKind::NonfiniteOutput))
}

/// "24 nonfinite_input in cublasSgemm_v2, 1 api_error in cudaFree" for a list of faults.
pub(super) fn tally(entries: &[&Entry]) -> String {
    let mut counts: Vec<((&str, &str), usize)> = Vec::new();
    for e in entries {
        let key = (e.kind, e.fault.api.as_str());
        match counts.iter_mut().find(|(k, _)| *k == key) {
            Some((_, n)) => *n += 1,
            None => counts.push((key, 1)),
        }
    }
    counts.iter().map(|((kind, api), n)| format!("{n} {kind} in {api}")).collect::<Vec<_>>().join(", ")
}
