//! `cublasguard report`: traces in, a postmortem out, first fault first: a table of the faults
//! by kind, function and call site, then one entry per root cause, with the faults that follow
//! from it (NaN passed on, a context lost to its error, the same failure to start) counted
//! under it.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use cublasguard_format::gpu_health::{GpuHealth, GpuHealthState};
use cublasguard_format::trace::{self, Fault, FaultKind, InitCauseKind, Trace};
use serde::Serialize;

use diagnosis::{bytes, Diagnosis, Program};

pub mod coverage;
pub mod diagnosis;
pub mod hang_report;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Markdown,
    Json,
}

/// Root causes shown in full unless `--limit` or `--all` says otherwise.
pub const DEFAULT_LIMIT: usize = 20;

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
    fn key(&self) -> (usize, u64) {
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

/// A root cause and the faults that follow from it, in time order.
struct Cause<'e, 'a> {
    entry: &'e Entry<'a>,
    followers: Vec<&'e Entry<'a>>,
}

fn causes<'e, 'a>(entries: &'e [Entry<'a>]) -> Vec<Cause<'e, 'a>> {
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

/// Where the call came from: the user's own Python frame, else the program's own native frame,
/// else the function itself.
pub fn call_site(f: &Fault, exe: Option<&str>, python: Option<&trace::PythonPaths>) -> String {
    user_place(f, exe, python).map(|(place, _)| place).unwrap_or_else(|| f.api.clone())
}

fn call_text(f: &Fault) -> String {
    let args: Vec<String> = f.args.iter().map(|(k, v)| format!("{k}={v}")).collect();
    format!("{}({}) -> {} ({})", f.api, args.join(", "), f.status_name, f.status)
}

/// Whether a Python file is the user's, by where it lies, not by what its folders are called:
/// not one of the interpreter's own frozen or generated modules (`<frozen ...>`, `<string>`),
/// and not inside the folders the trace says the process's Python keeps its standard library
/// and installed packages in (`python`: `PythonPaths::holds`). A trace without them (an older
/// guard's) is read by the folders' names: not inside a `site-packages` or `dist-packages`
/// folder, nor a `pythonX.Y` folder directly inside a `lib` or `lib64`. Either way a folder of
/// the user's named `torch` or `python3` is the user's.
pub(crate) fn is_user_file(file: &str, python: Option<&trace::PythonPaths>) -> bool {
    if file.is_empty() || file.starts_with('<') {
        return false;
    }
    if let Some(paths) = python {
        return !paths.holds(file);
    }
    let parts: Vec<&str> = file.split('/').collect();
    let folders = &parts[..parts.len().saturating_sub(1)];
    let installed = folders.iter().any(|p| matches!(*p, "site-packages" | "dist-packages"));
    let stdlib = folders.windows(2).any(|w| {
        matches!(w[0], "lib" | "lib64")
            && w[1].strip_prefix("python").and_then(|v| v.split_once('.')).is_some_and(|(major, minor)| {
                !major.is_empty() && major.bytes().all(|b| b.is_ascii_digit()) && !minor.is_empty() && minor.bytes().all(|b| b.is_ascii_digit())
            })
    });
    !installed && !stdlib
}

/// "model.py:57 in forward: h = self.fc1(x)": the innermost Python frame in the user's own
/// code, with its source line when the file can be read. A program without Python frames: the
/// innermost native frame in the program's own executable (`exe`), with its source line when
/// it was built with debug information.
pub fn user_line(fault: &trace::Fault, exe: Option<&str>, python: Option<&trace::PythonPaths>) -> Option<String> {
    let (place, source) = user_place(fault, exe, python)?;
    Some(match source {
        Some(line) => format!("{place}: {line}"),
        None => place,
    })
}

/// The user's own frame ("model.py:57 in forward") and its source line, if it can be read.
fn user_place(fault: &trace::Fault, exe: Option<&str>, python: Option<&trace::PythonPaths>) -> Option<(String, Option<String>)> {
    let Some(frame) = fault.python_stack.iter().find(|f| is_user_file(&f.file, python)) else {
        let exe = exe?;
        let native = fault.backtrace.iter().find(|l| l.contains(&format!("({exe}+")))?;
        return Some(native_user_place(native));
    };
    let source = usize::try_from(frame.line).ok().and_then(|n| source_line(Path::new(&frame.file), n));
    Some((format!("{}:{} in {}", frame.file, frame.line, frame.function), source))
}

/// The user's frames that called the innermost one (`user_place`), innermost first: the run of
/// frames in the user's own files that follows it, up to the first one outside them, at most
/// `MAX_CALLERS`. A small helper's line alone hides the mistake at its caller.
fn user_callers(fault: &trace::Fault, exe: Option<&str>, python: Option<&trace::PythonPaths>) -> Vec<(String, Option<String>)> {
    const MAX_CALLERS: usize = 2;
    if let Some(first) = fault.python_stack.iter().position(|f| is_user_file(&f.file, python)) {
        return fault.python_stack[first + 1..]
            .iter()
            .take_while(|f| is_user_file(&f.file, python))
            .take(MAX_CALLERS)
            .map(|frame| {
                let source = usize::try_from(frame.line).ok().and_then(|n| source_line(Path::new(&frame.file), n));
                (format!("{}:{} in {}", frame.file, frame.line, frame.function), source)
            })
            .collect();
    }
    let Some(exe) = exe else { return Vec::new() };
    let mine = |l: &String| l.contains(&format!("({exe}+"));
    let Some(first) = fault.backtrace.iter().position(mine) else { return Vec::new() };
    fault.backtrace[first + 1..].iter().take_while(|l| mine(l)).take(MAX_CALLERS).map(|l| native_user_place(l)).collect()
}

/// ("/src/mlp.c:57 in linear_forward", its source line) from "linear_forward at /src/mlp.c:57
/// (/bin/mlp+0x1634) [0x...]".
fn native_user_place(frame: &str) -> (String, Option<String>) {
    let head = frame.split(" (").next().unwrap_or(frame);
    match head.split_once(" at ") {
        Some((function, place)) => {
            let source = place.rsplit_once(':').and_then(|(file, line)| {
                let n: usize = line.parse().ok()?;
                source_line(Path::new(file), n)
            });
            (format!("{place} in {function}"), source)
        }
        None => (format!("{head} in {}", frame.split(" (").nth(1).and_then(|r| r.split('+').next()).unwrap_or("the program")), None),
    }
}

/// The most of a source file that is read for one line of it (a trace names the file, and a
/// trace can be hostile).
pub const SOURCE_CAP: u64 = 16 << 20;

/// `path` opened for reading only if it is a regular file of at most `cap` bytes: checked
/// before the open, opened with `O_NONBLOCK` (a FIFO that appears in between cannot block the
/// open) and checked again on the open file, so a FIFO, a device or a folder is never read.
pub fn open_regular(path: &Path, cap: u64) -> Result<std::fs::File, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let check = |m: std::fs::Metadata| -> Result<(), String> {
        if !m.is_file() {
            return Err("not a regular file".into());
        }
        if m.len() > cap {
            return Err(format!("{} bytes, more than the {cap} read at most", m.len()));
        }
        Ok(())
    };
    check(std::fs::metadata(path).map_err(|e| e.to_string())?)?;
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path).map_err(|e| e.to_string())?;
    check(file.metadata().map_err(|e| e.to_string())?)?;
    Ok(file)
}

/// Line `n` (from 1) of a source file, trimmed, read up to that line only; `None` when the file
/// is not a regular file of at most [`SOURCE_CAP`] bytes, has no such line, or it is blank.
fn source_line(path: &Path, n: usize) -> Option<String> {
    use std::io::{BufRead, Read};
    let file = open_regular(path, SOURCE_CAP).ok()?;
    let mut reader = std::io::BufReader::new(file.take(SOURCE_CAP));
    let mut line = Vec::new();
    for _ in 0..n.checked_sub(1)? {
        line.clear();
        if reader.read_until(b'\n', &mut line).ok()? == 0 {
            return None;
        }
    }
    line.clear();
    if reader.read_until(b'\n', &mut line).ok()? == 0 {
        return None;
    }
    let text = String::from_utf8_lossy(&line).trim().to_string();
    (!text.is_empty()).then_some(text)
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

/// Non-finite values seen by several processes (ranks): the fault where they were first made,
/// the earliest origin (`nonfinite_origin`), else the earliest produced NaN/Inf
/// (`nonfinite_output`). `None` with a single process, or nothing made anywhere.
fn nonfinite_maker<'e, 'a>(entries: &'e [Entry<'a>]) -> Option<&'e Entry<'a>> {
    let nonfinite = |e: &&Entry| matches!(e.fault.kind, FaultKind::NonfiniteOrigin | FaultKind::NonfiniteOutput | FaultKind::NonfiniteInput);
    let processes: std::collections::BTreeSet<usize> = entries.iter().filter(nonfinite).map(|e| e.source).collect();
    if processes.len() < 2 {
        return None;
    }
    let earliest = |kind: FaultKind| entries.iter().filter(|e| e.fault.kind == kind).min_by_key(|e| e.fault.time_ns);
    earliest(FaultKind::NonfiniteOrigin).or_else(|| earliest(FaultKind::NonfiniteOutput))
}

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
    escape(text, false)
}

/// `escape_controls` for one field from a trace or a dump (a name, a message) shown inside a
/// line: its newlines and tabs are escaped too, so it cannot start a line of its own.
pub fn escape_field(text: &str) -> String {
    escape(text, true)
}

/// Whether a character changes how the text around it is shown rather than showing itself:
/// control characters, the line and paragraph separators, and Unicode's bidirectional marks,
/// embeddings, overrides and isolates (which can make a line read other than it is).
fn hidden(c: char) -> bool {
    c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{061c}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

fn escape(text: &str, all: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if hidden(c) && (all || (c != '\n' && c != '\t')) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// `render_limited` with the default limit.
pub fn render(loaded: &[Loaded], format: Format) -> String {
    render_limited(loaded, format, Some(DEFAULT_LIMIT))
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

/// The report. `limit`: how many root causes text and markdown show in full (None: all, and
/// every fault that follows from them, one line each); JSON always holds every fault.
pub fn render_limited(loaded: &[Loaded], format: Format, limit: Option<usize>) -> String {
    let entries = merge(loaded);
    match format {
        Format::Json => json(loaded, &entries),
        Format::Text | Format::Markdown => escape_controls(&text(loaded, &entries, format == Format::Markdown, limit)),
    }
}

/// A GPU core dump the driver was asked for in a traced process: its environment, as the trace
/// recorded it, held CUDA_ENABLE_COREDUMP_ON_EXCEPTION=1 (`cublasguard run --gpu-coredump`
/// sets it, with CUDA_COREDUMP_FILE beside the trace).
#[derive(Debug, Serialize)]
pub struct CoreDump<'a> {
    pub trace: &'a Path,
    pub pid: u32,
    /// CUDA_COREDUMP_FILE with the pid and host filled in (`*` for the driver's %t); None when
    /// it was not set (the driver's default name, in the program's working folder).
    pub pattern: Option<String>,
    /// The core files written, found on disk.
    pub files: Vec<PathBuf>,
    /// The command that opens the first of them.
    pub command: Option<String>,
}

/// `cuda-gdb -ex "target cudacore FILE"`: quoted for a shell.
pub fn cuda_gdb_command(file: &Path) -> String {
    let shown = file.display().to_string();
    if shown.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+:,=@%".contains(c)) {
        format!("cuda-gdb -ex \"target cudacore {shown}\"")
    } else {
        format!("cuda-gdb -ex {}", shell_word(&format!("target cudacore {shown}")))
    }
}

/// The driver's name for a core file, as it expands CUDA_COREDUMP_FILE: %p the pid, %h the host,
/// %t the time (unknown here: `*`), %% a percent sign.
fn expand_core_pattern(pattern: &str, pid: u32, host: &str) -> String {
    cublasguard_format::config::expand_percent(pattern, |letter| match letter {
        'p' => Some(pid.to_string()),
        'h' => Some(host.to_string()),
        't' => Some("*".to_string()),
        _ => None,
    })
}

fn glob_files(pattern: &Path) -> Vec<PathBuf> {
    let text = pattern.display().to_string();
    if !text.contains('*') {
        return if pattern.is_file() { vec![pattern.to_path_buf()] } else { Vec::new() };
    }
    let (Some(dir), Some(name)) = (pattern.parent(), pattern.file_name().and_then(|n| n.to_str())) else { return Vec::new() };
    // The trace-name matcher reads %p as "anything": the only wildcard the expansion left is %t's.
    let glob = name.replace('%', "%%").replace('*', "%p");
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut found: Vec<PathBuf> =
        entries.filter_map(|e| e.ok()).filter(|e| e.file_name().to_str().is_some_and(|n| crate::run::matches_pattern(&glob, n))).map(|e| e.path()).collect();
    found.sort();
    found
}

pub fn core_dumps(loaded: &[Loaded]) -> Vec<CoreDump<'_>> {
    let mut out = Vec::new();
    for l in loaded {
        let vars = &l.trace.environment.variables;
        if vars.get(crate::run::COREDUMP_ENABLE).map(|v| v.trim()) != Some("1") {
            continue;
        }
        let process = &l.trace.process;
        let pattern = vars.get(crate::run::COREDUMP_FILE).filter(|f| !f.is_empty()).map(|f| {
            let expanded = expand_core_pattern(f, process.pid, &process.hostname);
            // A relative name is the program's working folder's: the trace's is the best guess.
            match l.path.parent() {
                Some(dir) if Path::new(&expanded).is_relative() => dir.join(&expanded).display().to_string(),
                _ => expanded,
            }
        });
        let files = pattern.as_deref().map(|p| glob_files(Path::new(p))).unwrap_or_default();
        let command = files.first().map(|f| cuda_gdb_command(f));
        out.push(CoreDump { trace: &l.path, pid: process.pid, pattern, files, command });
    }
    out
}

fn json(loaded: &[Loaded], entries: &[Entry]) -> String {
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

/// Where a fault's dump is (as recorded, else beside its trace when the recorded path is
/// relative), and whether `cublasguard replay` can rerun it.
fn replay_check(dump: &str, trace: &Path) -> (PathBuf, Result<(), String>) {
    let recorded = PathBuf::from(dump);
    let path = match trace.parent() {
        Some(dir) if recorded.is_relative() && !recorded.exists() && dir.join(&recorded).exists() => dir.join(&recorded),
        _ => recorded,
    };
    let check = crate::replay::can_replay(&path);
    (path, check)
}

/// A path as one shell word: quoted when it holds anything a shell would split or expand.
fn shell_word(s: &str) -> String {
    if !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+:,=@%".contains(c)) {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
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

/// `text` as CommonMark inline text: characters that would start markup are escaped, pairs of
/// backticks stay code spans, line breaks become spaces.
fn md_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('`') {
        out.push_str(&md_escape(&rest[..i]));
        let after = &rest[i + 1..];
        match after.find('`') {
            Some(j) if j > 0 => {
                out.push_str(&md_code(&after[..j]));
                rest = &after[j + 1..];
            }
            _ => {
                out.push_str("\\`");
                rest = after;
            }
        }
    }
    out.push_str(&md_escape(rest));
    out
}

fn md_escape(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    for (i, &c) in chars.iter().enumerate() {
        // An underscore inside a word never starts emphasis; one at a word's edge may.
        let edge = |j: Option<usize>| j.and_then(|j| chars.get(j)).is_none_or(|n| !n.is_alphanumeric());
        match c {
            '\n' | '\r' => out.push(' '),
            '\\' | '`' | '*' | '[' | ']' | '<' | '>' | '&' | '~' | '|' => {
                out.push('\\');
                out.push(c);
            }
            '_' if edge(i.checked_sub(1)) || edge(Some(i + 1)) => out.push_str("\\_"),
            _ => out.push(c),
        }
    }
    out
}

/// A CommonMark code span holding `text` exactly.
fn md_code(text: &str) -> String {
    let text = text.replace(['\n', '\r'], " ");
    if text.is_empty() {
        return String::new();
    }
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat(longest + 1);
    let pad = text.starts_with('`') || text.ends_with('`') || (text.starts_with(' ') && text.ends_with(' ') && !text.trim().is_empty());
    let pad = if pad { " " } else { "" };
    format!("{fence}{pad}{text}{pad}{fence}")
}

/// A line of inline markdown that cannot open a block of its own (a heading, a quote, a list,
/// a thematic break) whatever text it starts with.
fn md_block_safe(line: &str) -> String {
    let line = line.trim_start();
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    match line.chars().next() {
        Some('#' | '>' | '-' | '+' | '=' | '|') => format!("\\{line}"),
        Some(_) if digits > 0 && matches!(line[digits..].chars().next(), Some('.' | ')')) => format!("{}\\{}", &line[..digits], &line[digits..]),
        _ => line.to_string(),
    }
}

/// The report's text, as plain text or as CommonMark.
struct Doc {
    md: bool,
    out: String,
}

impl Doc {
    /// Text from a trace or from advice.
    fn t(&self, s: &str) -> String {
        if self.md {
            md_text(s)
        } else {
            s.to_string()
        }
    }
    /// Code: a call, a path, a command.
    fn c(&self, s: &str) -> String {
        if self.md {
            md_code(s)
        } else {
            s.to_string()
        }
    }
    /// A paragraph (markdown) or a line after a blank one (text).
    fn para(&mut self, line: &str) {
        let line = if self.md { md_block_safe(line) } else { line.to_string() };
        let _ = writeln!(self.out, "\n{line}");
    }
    /// A heading: `## ...` in markdown.
    fn heading(&mut self, markdown: &str, text: &str) {
        if self.md {
            let _ = writeln!(self.out, "\n## {markdown}\n");
        } else {
            let _ = writeln!(self.out, "\n{text}");
        }
    }
    /// A line of a fault's entry: a list item in markdown.
    fn item(&mut self, line: &str) {
        if self.md {
            let _ = writeln!(self.out, "- {}", md_block_safe(line));
        } else {
            let _ = writeln!(self.out, "    {line}");
        }
    }
    /// A line under an item.
    fn sub_item(&mut self, line: &str) {
        if self.md {
            let _ = writeln!(self.out, "  - {}", md_block_safe(line));
        } else {
            let _ = writeln!(self.out, "        {line}");
        }
    }
}

/// "24 nonfinite_input in cublasSgemm_v2, 1 api_error in cudaFree" for a list of faults.
fn tally(entries: &[&Entry]) -> String {
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

fn text(loaded: &[Loaded], entries: &[Entry], md: bool, limit: Option<usize>) -> String {
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

fn cause_entry(doc: &mut Doc, n: usize, cause: &Cause, all: bool) {
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
            let launched_at = diagnosis::first_line(&k.backtrace).map(|l| format!(", launched at {}", doc.t(&l))).unwrap_or_default();
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

/// A libcublas and a libcublasLt the process mapped from different folders (or, where the
/// files are still there and named by release, of different releases): pytorch#174320.
fn cublas_pair_note(env: &trace::Environment) -> Option<String> {
    let libraries = &env.libraries;
    let find = |prefix: &str| libraries.iter().find(|l| l.soname.starts_with(prefix)).map(|l| Path::new(&l.path));
    let (cublas, lt) = (find("libcublas.so")?, find("libcublasLt.so")?);
    let real = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    let (a, b) = (real(cublas), real(lt));
    let releases = (crate::doctor::setup_checks::release_of_file(&a), crate::doctor::setup_checks::release_of_file(&b));
    let mixed_files = matches!(releases, (Some(x), Some(y)) if x != y);
    // The versions the libraries themselves reported in the process: major.minor must agree.
    let mixed_versions = matches!((env.cublas_version, env.cublaslt_version), (Some(x), Some(y)) if x / 100 != y / 100);
    if a.parent() == b.parent() && !mixed_files && !mixed_versions {
        return None;
    }
    let what = match (env.cublas_version, env.cublaslt_version) {
        (Some(x), Some(y)) if mixed_versions => {
            format!("of different releases (cuBLAS {}.{}.{}, cuBLASLt {}.{}.{})", x / 10000, x / 100 % 100, x % 100, y / 10000, y / 100 % 100, y % 100)
        }
        _ if mixed_files => "of different releases".to_string(),
        _ => "from different folders".to_string(),
    };
    Some(format!(
        "note: libcublas ({}) and libcublasLt ({}) are {what}: a libcublasLt that is not libcublas's own breaks cuBLAS (pytorch#174320); `cublasguard doctor` compares their releases",
        cublas.display(),
        lt.display()
    ))
}

/// One line on a process's GPU health through the run: the devices NVML read and what happened
/// to them, or why NVML could not say (nothing where there is no NVML at all: the doctor says).
fn gpu_health_line(pid: u32, h: &GpuHealth) -> Option<String> {
    match h.state {
        GpuHealthState::Ready => {
            let devices: Vec<String> = h
                .devices
                .iter()
                .map(|d| {
                    let who = if h.standin { format!("stand-in device {}", d.index) } else { format!("GPU {} ({})", d.index, d.name) };
                    match d.temperature_c {
                        Some(t) => format!("{who}, {t} C"),
                        None => who,
                    }
                })
                .collect();
            let events = if h.events.is_empty() {
                "no Xid or ECC event during the run".to_string()
            } else {
                format!("{} Xid/ECC event(s) during the run", h.events.len())
            };
            Some(format!("GPU health of pid {pid} (NVML): {}; {events}", if devices.is_empty() { "no device".into() } else { devices.join(", ") }))
        }
        GpuHealthState::Hung | GpuHealthState::Failed | GpuHealthState::Starting => {
            Some(format!("GPU health of pid {pid} not read: {}", h.note.as_deref().unwrap_or(h.state.name())))
        }
        GpuHealthState::Missing | GpuHealthState::Off => None,
    }
}

fn environment(doc: &mut Doc, loaded: &[Loaded]) {
    let Some(first) = loaded.first() else { return };
    let env = &first.trace.environment;
    let v = |x: Option<i32>| x.map(|v| format!("{}.{}", v / 1000, v % 1000 / 10)).unwrap_or_else(|| "unknown".into());
    doc.heading("Environment", "Environment:");
    let line = format!(
        "CUDA runtime {}, driver {}{}, cuBLAS {}",
        v(env.runtime_version),
        v(env.driver_version),
        if env.driver.loaded { "" } else { " (libcuda.so.1 not loaded)" },
        env.cublas_version.map(|c| format!("{}.{}.{}", c / 10000, c / 100 % 100, c % 100)).unwrap_or_else(|| "unknown".into())
    );
    doc.item(&doc.t(&line));
    for lib in &env.libraries {
        let line = format!("{} => {}", doc.c(&lib.soname), doc.c(&lib.path));
        doc.item(&line);
    }
    // A failed capability probe is a fact about the machine, said once per process, not a fault.
    for l in loaded {
        let Some(probe) = &l.trace.environment.probe else { continue };
        let cause = probe.cause.as_ref().map(|c| c.message.as_str()).unwrap_or(probe.status_name.as_str());
        let place = probe
            .python_stack
            .iter()
            .find(|f| is_user_file(&f.file, l.trace.environment.python_paths.as_ref()))
            .map(|f| format!(", at {}:{} in {}", f.file, f.line, f.function))
            .unwrap_or_default();
        // Beside the same process's failed starts, counted as faults, the probe is their
        // first sign, not something apart from them.
        let failed_start = l.trace.faults.iter().any(|f| f.kind == FaultKind::InitFailed);
        let line = if failed_start {
            format!(
                "note: pid {} asked {} (#{}) whether CUDA is usable and it is not{place}; its later calls failed to start CUDA too (the faults above)",
                l.trace.process.pid, probe.api, probe.seq
            )
        } else {
            format!(
                "note: pid {} asked {} (#{}) whether CUDA is usable and it is not{place}: {cause}. A probe, not a fault: a program may fall back to the CPU",
                l.trace.process.pid, probe.api, probe.seq
            )
        };
        doc.item(&doc.t(&line));
    }
    for l in loaded {
        if let Some(line) = l.trace.environment.gpu_health.as_ref().and_then(|h| gpu_health_line(l.trace.process.pid, h)) {
            doc.item(&doc.t(&line));
        }
    }
    let mut pairs: Vec<String> = loaded.iter().filter_map(|l| cublas_pair_note(&l.trace.environment)).collect();
    pairs.dedup();
    for note in pairs {
        doc.item(&doc.t(&note));
    }
    for dump in core_dumps(loaded) {
        let line = match (&dump.command, &dump.pattern) {
            (Some(command), _) => {
                let files: Vec<String> = dump.files.iter().map(|f| doc.c(&f.display().to_string())).collect();
                format!("GPU core dump of pid {}: {}; open it with {}", dump.pid, files.join(", "), doc.c(command))
            }
            (None, Some(pattern)) => format!(
                "GPU core dumps were on for pid {} ({}): none at {}, so no GPU exception stopped it (or the driver could not write there); one is opened with {}",
                dump.pid,
                doc.c("CUDA_ENABLE_COREDUMP_ON_EXCEPTION=1"),
                doc.c(pattern),
                doc.c(&cuda_gdb_command(Path::new("FILE")))
            ),
            (None, None) => format!(
                "GPU core dumps were on for pid {} ({}), with no {}: the driver writes them to its default name in the program's working folder; one is opened with {}",
                dump.pid,
                doc.c("CUDA_ENABLE_COREDUMP_ON_EXCEPTION=1"),
                doc.c("CUDA_COREDUMP_FILE"),
                doc.c(&cuda_gdb_command(Path::new("FILE")))
            ),
        };
        doc.item(&line);
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
    fn a_python_file_is_the_users_by_where_it_lies_not_by_its_folders_names() {
        for users in ["/home/me/torch/train.py", "/home/me/lib/python3/train.py", "/srv/python3.12/model.py", "train.py", "/home/me/site-packages-notes/x.py"] {
            assert!(is_user_file(users, None), "{users} is the user's");
        }
        for not_users in [
            "/usr/lib/python3.12/site-packages/torch/nn/functional.py",
            "/venv/lib/python3.12/site-packages/transformers/models/bert.py",
            "/usr/lib/python3/dist-packages/numpy/core/numeric.py",
            "/usr/lib/python3.12/threading.py",
            "/opt/conda/lib64/python3.11/runpy.py",
            "<frozen runpy>",
            "<string>",
            "",
        ] {
            assert!(!is_user_file(not_users, None), "{not_users} is not the user's");
        }
    }

    #[test]
    fn folder_without_json_files_is_an_error() {
        let dir = std::env::temp_dir().join(format!("cg-report-empty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(load_noting(std::slice::from_ref(&dir)).unwrap_err().contains("no .json trace files"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn a_fault() -> Fault {
        serde_json::from_value(serde_json::json!({
            "seq": 1, "api": "cublasSgemm_v2", "kind": "api_error", "message": "m", "status": 13,
            "status_name": "CUBLAS_STATUS_EXECUTION_FAILED", "error": null, "cause": null, "thread": 1,
            "stream": null, "time_ns": 0, "handle": null, "args": {}, "operands": [], "memory": null, "backtrace": []
        }))
        .unwrap()
    }

    fn loaded(trace: Trace) -> Loaded {
        Loaded::new("t.json".into(), trace::Parsed { trace, ..Default::default() })
    }

    fn fault_of(json: serde_json::Value) -> Fault {
        let mut base = serde_json::to_value(a_fault()).unwrap();
        for (k, v) in json.as_object().unwrap() {
            base[k] = v.clone();
        }
        serde_json::from_value(base).unwrap()
    }

    fn recent(seq: u64, api: &str, args: serde_json::Value) -> trace::RecentCall {
        serde_json::from_value(serde_json::json!({"seq": seq, "api": api, "status": 0, "time_ns": seq, "thread": 1, "args": args})).unwrap()
    }

    /// A C program's GEMM that overran (the device then said 700 at the program's own
    /// cudaMemcpy), and its later cudaFree/cudaMemcpy calls that return the same 700.
    fn overrun_then_sticky() -> Trace {
        let gemm = fault_of(serde_json::json!({
            "seq": 5, "api": "cublasSgemm_v2", "kind": "out_of_bounds", "status": 0, "status_name": "CUBLAS_STATUS_SUCCESS", "time_ns": 5,
            "message": "operand B overruns its allocation; cudaErrorIllegalAddress (700) surfaced at the program's own cudaMemcpy, its synchronous copy of 64 bytes",
            "error": {"code": 700, "name": "cudaErrorIllegalAddress", "call": "cudaMemcpy"},
            "operands": [{"name": "B", "ptr": "0x7000", "dtype": "f32", "rows": 4, "cols": 4, "ld": 4, "bytes": 64,
                          "allocation": {"base": "0x7000", "size": 32}, "scanned": false}]
        }));
        let later = |seq: u64, api: &str| {
            fault_of(serde_json::json!({"seq": seq, "api": api, "kind": "api_error", "status": 700, "status_name": "cudaErrorIllegalAddress", "time_ns": seq}))
        };
        Trace { faults: vec![gemm, later(7, "cudaMemcpy"), later(8, "cudaFree"), later(9, "cudaFree")], ..Default::default() }
    }

    #[test]
    fn the_programs_own_call_is_not_called_the_guards() {
        let out = render(&[loaded(overrun_then_sticky())], Format::Text);
        assert!(out.contains("at the program's own cudaMemcpy"), "{out}");
        assert!(!out.contains("at the guard's cudaMemcpy"), "{out}");
    }

    #[test]
    fn later_calls_returning_the_same_sticky_error_fold_into_the_first_cause() {
        let out = render(&[loaded(overrun_then_sticky())], Format::Text);
        assert!(!out.contains("no guard check explains it"), "{out}");
        assert!(!out.contains("[2]"), "one root cause: {out}");
        assert!(out.contains("3 later fault(s) that failed because #5 left the CUDA context unusable"), "{out}");
    }

    #[test]
    fn an_address_freed_and_handed_out_again_smaller_is_freed_and_reused_not_an_overrun() {
        let mut t = overrun_then_sticky();
        t.faults.truncate(1);
        t.recent_calls = vec![recent(2, "cudaMalloc", serde_json::json!({"size": 256})), recent(3, "cudaFree", serde_json::json!({"ptr": "0x7000"}))];
        let l = [loaded(t.clone())];
        let entries = merge(&l);
        assert!(
            entries[0].diagnosis.cause.starts_with("freed and reused: operand B points at 0x7000, where cudaFree (call #3) freed"),
            "{}",
            entries[0].diagnosis.cause
        );
        // A free of a block no larger than the new one: a plain overrun.
        t.recent_calls = vec![recent(3, "cudaFree", serde_json::json!({"ptr": "0x7000", "size": 16}))];
        let l = [loaded(t.clone())];
        let entries = merge(&l);
        assert!(!entries[0].diagnosis.cause.contains("freed and reused"), "{}", entries[0].diagnosis.cause);
        // No free at that address: an overrun.
        t.recent_calls.clear();
        let l = [loaded(t)];
        assert!(merge(&l)[0].diagnosis.cause.starts_with("an operand extends past the end"));
    }

    #[test]
    fn a_c_program_gets_no_pytorch_words_and_a_pytorch_program_does() {
        // The advice only (a T/N GEMM's "looks like nn.Linear" shape line is kept for every program).
        let gemm = overrun_then_sticky().faults.remove(0);
        let c = Trace { faults: vec![gemm.clone()], ..Default::default() };
        let out = render(&[loaded(c.clone())], Format::Text);
        for w in ["in_features", "nn.Linear", "torch."] {
            assert!(!out.contains(w), "'{w}' in a C program's report: {out}");
        }
        let mut cupy = c.clone();
        cupy.environment.python_version = Some("3.12.3".into());
        let out = render(&[loaded(cupy)], Format::Text);
        assert!(!out.contains("in_features") && !out.contains("torch."), "a CuPy-like Python program: {out}");
        let mut torch = c;
        torch.environment.python_version = Some("3.12.3".into());
        torch.environment.framework = Some(trace::FrameworkBuild { name: "torch".into(), version: None, cuda: None });
        let out = render(&[loaded(torch)], Format::Text);
        assert!(out.contains("in_features"), "{out}");
    }

    #[test]
    fn the_users_line_is_a_short_stack_of_their_frames_innermost_first() {
        let frame = |file: &str, line: u32, function: &str| trace::PythonFrame { file: file.into(), line, function: function.into() };
        let mut f = a_fault();
        f.python_stack = vec![
            frame("/venv/lib/python3.12/site-packages/nvmath/bindings/cublas.py", 120, "sgemm"),
            frame("/work/faults.py", 37, "sgemm"),
            frame("/work/faults.py", 68, "main"),
            frame("/work/run.py", 5, "<module>"),
            frame("<frozen runpy>", 88, "_run_code"),
            frame("/work/outer.py", 1, "<module>"),
        ];
        let t = Trace { faults: vec![f.clone()], ..Default::default() };
        let out = render(&[loaded(t)], Format::Text);
        let at = out.find("at /work/faults.py:37 in sgemm").expect(&out);
        let caller = out.find("called from /work/faults.py:68 in main").expect(&out);
        let outer = out.find("called from /work/run.py:5 in <module>").expect(&out);
        assert!(at < caller && caller < outer, "innermost first: {out}");
        assert!(!out.contains("outer.py"), "the stack stops at the first frame outside the user's files: {out}");
        // A helper called straight from a library: one line, as before.
        f.python_stack.truncate(2);
        let out = render(&[loaded(Trace { faults: vec![f], ..Default::default() })], Format::Text);
        assert!(out.contains("at /work/faults.py:37 in sgemm") && !out.contains("called from /work"), "{out}");
    }

    #[test]
    fn empty_report_says_no_faults() {
        let text = render(&[loaded(Trace::default())], Format::Text);
        assert!(text.contains("0 fault(s)") && text.contains("No faults"), "{text}");
        assert!(!text.contains("not store"), "nothing dropped, nothing said: {text}");
    }

    #[test]
    fn faults_counted_but_not_stored_are_said_in_plain_words_only_when_there_are_some() {
        let mut t = Trace::default();
        t.summary.faults = 5;
        t.summary.dropped_faults = 5;
        let text = render(&[loaded(t)], Format::Text);
        assert!(text.contains("5 fault(s)") && text.contains("The guard counted 5 more fault(s) that it did not store"), "{text}");
        assert!(!text.contains("No faults") && !text.contains("counted but not stored"), "{text}");
    }

    #[test]
    fn markdown_escapes_what_would_be_markup_and_keeps_code_spans() {
        assert_eq!(
            md_text("see `cublasguard doctor` for __init__ <redacted> *x* [1]"),
            "see `cublasguard doctor` for \\_\\_init\\_\\_ \\<redacted\\> \\*x\\* \\[1\\]"
        );
        assert_eq!(md_text("clip_grad_norm_ and nonfinite_input"), "clip_grad_norm\\_ and nonfinite_input");
        assert_eq!(md_text("an odd ` backtick"), "an odd \\` backtick");
        assert_eq!(md_code("a`b"), "``a`b``");
        assert_eq!(md_code("`x"), "`` `x ``");
        assert_eq!(md_block_safe("# not a heading"), "\\# not a heading");
        assert_eq!(md_block_safe("12. not a list"), "12\\. not a list");
        assert_eq!(md_block_safe("12 faults"), "12 faults");
    }

    #[test]
    fn the_message_loses_what_the_call_line_and_the_cause_already_say() {
        let mut f = a_fault();
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

    #[test]
    fn paths_in_offered_commands_are_one_shell_word() {
        assert_eq!(shell_word("/tmp/d/x.safetensors"), "/tmp/d/x.safetensors");
        assert_eq!(shell_word("/tmp/my dumps/it's.safetensors"), "'/tmp/my dumps/it'\\''s.safetensors'");
    }
}
