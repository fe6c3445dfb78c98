//! Traces in: the files and folders named read leniently (a JSON file that is not a trace
//! skipped and said), each as a `Loaded` with what its reader left out; the newest run's
//! traces picked from a folder of several runs; the counts they tell, added without wrapping.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cublasguard_format::trace::{self, Trace};

use crate::escape::escape_controls;

/// A trace and where it came from.
#[derive(Debug)]
pub struct Loaded {
    pub path: PathBuf,
    pub trace: Trace,
    /// What the reader left out of a trace from a newer cublasguard, for a person.
    pub notes: Vec<String>,
    /// Faults (by index) of a kind this build does not know, by the name the trace gives.
    pub unknown_kinds: BTreeMap<usize, String>,
    /// Faults stored in the trace that this build could not read.
    pub unreadable_faults: u64,
}

impl Loaded {
    pub fn new(path: PathBuf, parsed: trace::Parsed) -> Self {
        Self { path, trace: parsed.trace, notes: parsed.notes, unknown_kinds: parsed.unknown_kinds, unreadable_faults: parsed.unreadable_faults }
    }

    /// Faults the trace stores, read or not.
    fn stored(&self) -> u64 {
        (self.trace.faults.len() as u64).saturating_add(self.unreadable_faults)
    }

    /// Faults the guard counted but did not store (past CUBLASGUARD_MAX_FAULTS).
    pub fn not_stored(&self) -> u64 {
        self.trace.summary.dropped_faults.max(self.trace.summary.faults.saturating_sub(self.stored()))
    }

    /// Every fault the trace tells of.
    pub fn fault_count(&self) -> u64 {
        self.stored().saturating_add(self.not_stored())
    }
}

/// The `*.json` files directly inside a folder, sorted (none: an empty list).
fn json_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut files: Vec<PathBuf> =
        entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "json")).collect();
    files.sort();
    Ok(files)
}

/// Reads the traces named, and those in the folders named. A JSON file that is not a trace (a
/// timeline, a report's JSON, a config file: what a glob such as `cublasguard-*.json` or a
/// folder also holds) is skipped, and so is a folder without a trace; each is said in the list
/// returned. It is an error when nothing named holds a trace, or a trace cannot be read.
pub fn load_noting(paths: &[PathBuf]) -> Result<(Vec<Loaded>, Vec<String>), String> {
    let mut loaded = Vec::new();
    let read_lenient = |path: &Path| {
        fits_in_memory(path)?;
        trace::read_lenient(path)
    };
    let mut skipped = Vec::new();
    // Why each path gave no trace, said as the error when none did.
    let mut problems = Vec::new();
    for path in paths {
        if !path.is_dir() {
            match read_lenient(path) {
                Ok(parsed) => loaded.push(Loaded::new(path.clone(), parsed)),
                Err(e) if e.is_foreign() => {
                    skipped.push(format!("skipped {}: {e}", path.display()));
                    problems.push(format!("{}: {e}", path.display()));
                }
                Err(e) => return Err(format!("{}: {e}", path.display())),
            }
            continue;
        }
        let files = json_files(path)?;
        if files.is_empty() {
            skipped.push(format!("skipped {}: no .json trace files in this folder", path.display()));
            problems.push(format!("{}: no .json trace files in this folder", path.display()));
            continue;
        }
        let mut others = Vec::new();
        let before = loaded.len();
        for file in files {
            match read_lenient(&file) {
                Ok(parsed) => loaded.push(Loaded::new(file, parsed)),
                Err(e) if e.is_foreign() => {
                    skipped.push(format!("skipped {}: {e}", file.display()));
                    others.push(file.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default());
                }
                Err(e) => return Err(format!("{}: {e}", file.display())),
            }
        }
        if loaded.len() == before {
            problems.push(format!("{}: no cublasguard trace in this folder ({} other JSON file(s): {})", path.display(), others.len(), others.join(", ")));
        }
    }
    if loaded.is_empty() {
        return Err(problems.join("; "));
    }
    Ok((loaded, skipped))
}

/// Reading a trace takes up to five times its size in memory: under an address-space limit
/// (`ulimit -v`) too small for that, the trace is refused with an error, never read until the
/// allocator aborts.
fn fits_in_memory(path: &Path) -> Result<(), trace::ReadError> {
    const FACTOR: u64 = 5;
    let Ok(meta) = std::fs::metadata(path) else { return Ok(()) };
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes the limit into the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) } != 0 || limit.rlim_cur == libc::RLIM_INFINITY {
        return Ok(());
    }
    let needed = meta.len().saturating_mul(FACTOR);
    if needed > limit.rlim_cur {
        return Err(trace::ReadError::Io(std::io::Error::other(format!(
            "{} MB: reading it needs about {} MB, more than the address-space limit (ulimit -v) of {} MB allows; raise the limit",
            meta.len() >> 20,
            needed >> 20,
            limit.rlim_cur >> 20
        ))));
    }
    Ok(())
}

/// The earliest and latest moments a trace tells of (ns since the Unix epoch): its process's
/// start, its faults and its recent calls.
fn span(t: &Trace) -> (u64, u64) {
    let times = t.faults.iter().map(|f| f.time_ns).chain(t.recent_calls.iter().map(|c| c.time_ns)).filter(|&n| n > 0);
    let start = t.process.started_at_ns;
    times.fold((start, start), |(lo, hi), n| (if lo == 0 { n } else { lo.min(n) }, hi.max(n)))
}

/// The traces of the newest run, and a note naming those of earlier runs it left out. A run is
/// the processes of one `cublasguard run` or one guarded process tree (`process.run_id`); a run
/// is earlier when everything its traces tell of happened before the newest run started. Runs
/// that overlap the newest in time (the ranks of one job on several nodes) are kept.
pub fn newest_run(loaded: Vec<Loaded>) -> (Vec<Loaded>, Option<String>) {
    let mut runs: BTreeMap<Option<String>, (u64, u64)> = BTreeMap::new();
    for l in &loaded {
        let (lo, hi) = span(&l.trace);
        let e = runs.entry(l.trace.process.run_id.clone()).or_insert((lo, hi));
        *e = (e.0.min(lo), e.1.max(hi));
    }
    let Some(newest_start) = runs.values().map(|&(lo, _)| lo).max() else { return (loaded, None) };
    let earlier: Vec<&Option<String>> = runs.iter().filter(|(_, &(_, hi))| hi > 0 && hi < newest_start).map(|(id, _)| id).collect();
    if earlier.is_empty() {
        return (loaded, None);
    }
    let runs_left = earlier.len();
    let earlier: std::collections::BTreeSet<Option<String>> = earlier.into_iter().cloned().collect();
    let (old, kept): (Vec<Loaded>, Vec<Loaded>) = loaded.into_iter().partition(|l| earlier.contains(&l.trace.process.run_id));
    const LISTED: usize = 4;
    let mut names: Vec<String> = old.iter().take(LISTED).map(|l| l.path.display().to_string()).collect();
    if old.len() > LISTED {
        names.push(format!("and {} more", old.len() - LISTED));
    }
    let note = format!(
        "left out {} trace(s) of {runs_left} earlier run(s), which ended before the newest started ({}); --all-runs reports them too",
        old.len(),
        names.join(", ")
    );
    (kept, Some(note))
}

/// `load_noting`, each skipped file said on stderr in one line.
pub fn load(paths: &[PathBuf]) -> Result<Vec<Loaded>, String> {
    let (loaded, skipped) = load_noting(paths)?;
    for line in &skipped {
        eprintln!("cublasguard: {}", escape_controls(line));
    }
    Ok(loaded)
}

/// Adds counts from traces without wrapping: a hostile trace may claim 2^63 faults.
pub fn total(values: impl Iterator<Item = u64>) -> u64 {
    values.fold(0, u64::saturating_add)
}

/// Calls across all traces.
pub fn total_calls(loaded: &[Loaded]) -> u64 {
    total(loaded.iter().map(|l| total(l.trace.summary.calls.values().copied())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_counts_never_wrap() {
        assert_eq!(total([1u64 << 63, 1u64 << 63].into_iter()), u64::MAX);
        assert_eq!(total([2, 3].into_iter()), 5);
    }

    #[test]
    fn folder_without_json_files_is_an_error() {
        let dir = std::env::temp_dir().join(format!("cg-report-empty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(load_noting(std::slice::from_ref(&dir)).unwrap_err().contains("no .json trace files"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
