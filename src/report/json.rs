//! The report as JSON, for a program: every fault with its diagnosis, the root causes with their
//! followers and replay commands, the summary's rows, the GPU core dumps.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::causes::{causes, summary_rows, Row};
use super::core_dumps::{core_dumps, CoreDump};
use super::load::{total, total_calls, Loaded};
use super::merge::{Entry, Relation};
use super::replay_offer::replay_check;
use crate::escape::shell_word;

pub(super) fn json(loaded: &[Loaded], entries: &[Entry]) -> String {
    #[derive(Serialize)]
    struct Note<'a> {
        trace: &'a Path,
        note: &'a str,
    }
    #[derive(Serialize)]
    struct Follower {
        seq: u64,
        relation: Option<Relation>,
    }
    #[derive(Serialize)]
    struct Replay {
        dump: PathBuf,
        /// The command that reruns it, when it can.
        command: Option<String>,
        why_not: Option<String>,
    }
    #[derive(Serialize)]
    struct CauseOut<'a> {
        trace: &'a Path,
        pid: u32,
        seq: u64,
        api: &'a str,
        kind: &'a str,
        followers: Vec<Follower>,
        #[serde(skip_serializing_if = "Option::is_none")]
        replay: Option<Replay>,
    }
    #[derive(Serialize)]
    struct Report<'a> {
        traces: Vec<&'a Path>,
        calls: u64,
        /// Faults stored in the traces and read (each in `entries`).
        faults: usize,
        /// Faults the guard counted but did not store, and stored ones this build could not read.
        not_stored: u64,
        unreadable: u64,
        notes: Vec<Note<'a>>,
        summary: Vec<Row>,
        causes: Vec<CauseOut<'a>>,
        /// Processes whose driver was asked for GPU core dumps, and the files written.
        gpu_coredumps: Vec<CoreDump<'a>>,
        first: Option<&'a Entry<'a>>,
        entries: &'a [Entry<'a>],
    }
    let causes = causes(entries)
        .into_iter()
        .map(|c| CauseOut {
            trace: c.entry.trace,
            pid: c.entry.pid,
            seq: c.entry.fault.seq,
            api: &c.entry.fault.api,
            kind: c.entry.kind,
            followers: c.followers.iter().map(|e| Follower { seq: e.fault.seq, relation: e.relation }).collect(),
            replay: c.entry.fault.dump.as_deref().map(|d| {
                let (dump, check) = replay_check(d, c.entry.trace);
                let command = check.is_ok().then(|| format!("cublasguard replay {}", shell_word(&dump.display().to_string())));
                Replay { dump, command, why_not: check.err() }
            }),
        })
        .collect();
    let report = Report {
        traces: loaded.iter().map(|l| l.path.as_path()).collect(),
        calls: total_calls(loaded),
        faults: entries.len(),
        not_stored: total(loaded.iter().map(Loaded::not_stored)),
        unreadable: total(loaded.iter().map(|l| l.unreadable_faults)),
        notes: loaded.iter().flat_map(|l| l.notes.iter().map(|n| Note { trace: &l.path, note: n })).collect(),
        summary: summary_rows(entries),
        causes,
        gpu_coredumps: core_dumps(loaded),
        first: entries.first(),
        entries,
    };
    serde_json::to_string_pretty(&report).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}")) + "\n"
}
