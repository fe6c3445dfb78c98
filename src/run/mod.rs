//! `cublasguard run`: the program under the guard, its exit status passed through, and a
//! short verdict at the end.

use std::ffi::OsString;
use std::os::unix::process::{CommandExt as _, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::SystemTime;

use cublasguard_format::config::{Checks, OnFault, DEFAULT_TRACE_PATTERN};
use cublasguard_format::trace::Trace;

use crate::report;
use crate::CliError;

pub struct Options {
    pub trace: Option<String>,
    pub checks: Option<String>,
    pub on_fault: Option<String>,
    pub command: Vec<OsString>,
    /// Extra environment for the command (the demo sets the stand-in library path).
    pub env: Vec<(String, String)>,
    pub quiet_summary: bool,
    /// Send the command's stdout to stderr, keeping stdout for the report (the demo).
    pub stdout_to_stderr: bool,
    /// `--gpu-coredump`: ask the driver for a light GPU core dump at a GPU exception.
    pub gpu_coredump: bool,
    /// The trace path was the user's choice (`--trace`, `--trace-dir`, `CUBLASGUARD_TRACE`):
    /// every trace written is kept. Under the default pattern the trace of a process that only
    /// asked whether CUDA is usable is summarised and removed.
    pub trace_chosen: bool,
}

/// What `--gpu-coredump` asks the driver for: a core dump at a GPU exception (an illegal
/// address, a trap), without the memory (global, shared, local) and the images of modules not
/// relocated at run time, which make a full dump gigabytes; what remains names the kernel, its
/// block, thread and PC for cuda-gdb.
pub const COREDUMP_ENABLE: &str = "CUDA_ENABLE_COREDUMP_ON_EXCEPTION";
pub const COREDUMP_FLAGS: &str = "CUDA_COREDUMP_GENERATION_FLAGS";
pub const COREDUMP_FILE: &str = "CUDA_COREDUMP_FILE";
pub const LIGHT_COREDUMP_FLAGS: &str = "skip_nonrelocated_elf_images,skip_global_memory,skip_shared_memory,skip_local_memory";

/// The core file beside the trace, one per process: the driver expands %h (host) and %p (pid).
pub fn coredump_file(pattern: &str) -> String {
    let dir = Path::new(pattern).parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    dir.join("cublasguard-gpucore-%h-%p.nvcudmp").display().to_string()
}

/// The driver's core dump variables for `cmd`, each kept where the user set it already; says
/// on stderr what the driver will do.
fn set_coredump_variables(cmd: &mut Command, pattern: &str) {
    let file = coredump_file(pattern);
    let mut kept = Vec::new();
    for (var, value) in [(COREDUMP_ENABLE, "1"), (COREDUMP_FLAGS, LIGHT_COREDUMP_FLAGS), (COREDUMP_FILE, file.as_str())] {
        match std::env::var(var) {
            Ok(given) if !given.is_empty() && var != COREDUMP_ENABLE => kept.push(format!("{var}={}", report::escape_controls(&given))),
            _ => {
                cmd.env(var, value);
            }
        }
    }
    let file = std::env::var(COREDUMP_FILE).ok().filter(|f| !f.is_empty()).unwrap_or(file);
    eprintln!(
        "cublasguard: --gpu-coredump: at a GPU exception the driver writes a GPU core dump to {} (%h host, %p pid) and stops the program there (it aborts: SIGABRT); `cublasguard report` then names the file and the cuda-gdb command that opens it",
        report::escape_controls(&file)
    );
    if !kept.is_empty() {
        eprintln!("cublasguard: --gpu-coredump: kept as set: {}", kept.join(", "));
    }
}

/// `CUBLASGUARD_LIB`, else beside this executable (or in its `deps/`, where `cargo run` and
/// `cargo test` leave it without copying it up: the newer of the two), else where the Python
/// wheel installs it (../share/cublasguard/lib), else in ../lib.
pub fn find_guard_library() -> Result<PathBuf, CliError> {
    if let Some(path) = std::env::var_os("CUBLASGUARD_LIB") {
        let path = PathBuf::from(path);
        return if path.is_file() { Ok(path) } else { Err(CliError::usage(format!("CUBLASGUARD_LIB={} is not a file", path.display()))) };
    }
    let exe = std::env::current_exe().map_err(|e| CliError::usage(format!("cannot locate this executable: {e}")))?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    let beside = [dir.join("libcublasguard.so"), dir.join("deps/libcublasguard.so")];
    let newest =
        beside.iter().filter_map(|p| Some((std::fs::metadata(p).ok()?.modified().ok()?, p))).max_by_key(|(modified, _)| *modified).map(|(_, p)| p.clone());
    // Installed: by the Python wheel (<prefix>/share/cublasguard/lib, beside <prefix>/bin), or
    // by hand into <prefix>/lib.
    let installed = [dir.join("../share/cublasguard/lib/libcublasguard.so"), dir.join("../lib/libcublasguard.so")]
        .into_iter()
        .find(|p| p.is_file())
        .unwrap_or_else(|| dir.join("../share/cublasguard/lib/libcublasguard.so"));
    let installed_found = installed.is_file().then(|| installed.canonicalize().unwrap_or_else(|_| installed.clone()));
    newest.or(installed_found).ok_or_else(|| {
        CliError::usage(format!(
            "libcublasguard.so not found (looked at {}, {} and {}); build it with `cargo build --release` or set \
             CUBLASGUARD_LIB",
            beside[0].display(),
            beside[1].display(),
            installed.display()
        ))
    })
}

/// What tells the guard in each process not to print its exit line ("N fault(s) in M
/// intercepted call(s); trace: ...") at exit: the run's summary covers every process.
const NO_EXIT_SUMMARY: (&str, &str) = ("CUBLASGUARD_EXIT_SUMMARY", "0");

static CHILD: AtomicI32 = AtomicI32::new(0);

/// Every signal a job scheduler or a user may send to `cublasguard run` to mean the command
/// (Slurm sends SIGUSR1 before a time limit, timeout(1) SIGTERM, a terminal emulator SIGWINCH).
/// Not forwarded: SIGKILL and SIGSTOP (cannot be caught), the signals of a fault in this process
/// (SEGV, BUS, FPE, ILL, TRAP, SYS), SIGCHLD (about the command itself), SIGPIPE (about this
/// process's own output), and terminal stops (TSTP, TTIN, TTOU), which must stop this process too.
const FORWARDED: [libc::c_int; 16] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGTERM,
    libc::SIGUSR1,
    libc::SIGUSR2,
    libc::SIGALRM,
    libc::SIGWINCH,
    libc::SIGCONT,
    libc::SIGVTALRM,
    libc::SIGPROF,
    libc::SIGXCPU,
    libc::SIGXFSZ,
    libc::SIGPWR,
    libc::SIGURG,
    libc::SIGIO,
];

extern "C" fn forward_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    let child = CHILD.load(Ordering::Relaxed);
    if child <= 0 {
        return;
    }
    // Every signal a process sent is passed on, however it was sent (kill: SI_USER; sigqueue:
    // SI_QUEUE; tgkill: SI_TKILL; all at most 0). One the kernel generated (a positive code:
    // SI_KERNEL) is the terminal's (Ctrl-C, Ctrl-\, a resize, a hangup), sent to the whole
    // foreground process group: a child still in this process's group has it already, and a
    // second copy would interrupt its own handling of the first.
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let generated_by_kernel = unsafe { (*info).si_code } > 0;
    // SAFETY: getpgid and getpgrp are plain system calls, safe in a signal handler.
    if generated_by_kernel && unsafe { libc::getpgid(child) == libc::getpgrp() } {
        return;
    }
    // SAFETY: kill is async-signal-safe.
    unsafe { libc::kill(child, sig) };
}

fn forwarded_set() -> libc::sigset_t {
    // SAFETY: sigemptyset/sigaddset initialise a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for sig in FORWARDED {
            libc::sigaddset(&mut set, sig);
        }
        set
    }
}

fn install_forwarding() {
    for sig in FORWARDED {
        // SAFETY: a zeroed sigaction with a valid handler and SA_SIGINFO.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = forward_signal as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut());
        }
    }
}

/// The trace pattern made absolute, so children that change folder write beside the others.
fn absolute_pattern(pattern: &str) -> String {
    let path = Path::new(pattern);
    if path.is_absolute() {
        return pattern.to_string();
    }
    match std::env::current_dir() {
        Ok(cwd) => cwd.join(path).display().to_string(),
        Err(_) => pattern.to_string(),
    }
}

/// Whether `name` is a trace file name of `pattern`: the pattern itself, or the pattern with the
/// `-PID` or `-PID-N` a process adds when the path holds another process's trace (a fixed path
/// in a forked child, a helper started by fork + exec, a later program of the same run).
pub fn matches_trace_name(pattern: &str, name: &str) -> bool {
    if matches_pattern(pattern, name) {
        return true;
    }
    let (stem_pattern, extension) = match pattern.strip_suffix(".json") {
        Some(stem) => (stem, ".json"),
        None => (pattern, ""),
    };
    let Some(stem) = name.strip_suffix(extension) else { return false };
    let pid_suffix = |tail: &str| {
        let parts: Vec<&str> = tail.split('-').collect();
        parts.len() <= 2 && parts.iter().all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    };
    stem.match_indices('-').any(|(at, _)| pid_suffix(&stem[at + 1..]) && matches_pattern(stem_pattern, &stem[..at]))
}

/// Whether `name` matches a trace file-name pattern whose `%p`, `%h`, `%r` may be anything.
pub fn matches_pattern(pattern: &str, name: &str) -> bool {
    let mut glob = String::new();
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c == '%' {
            match chars.next() {
                Some('p' | 'h' | 'r') => glob.push('*'),
                Some('%') => glob.push('%'),
                Some(o) => {
                    glob.push('%');
                    glob.push(o);
                }
                None => glob.push('%'),
            }
        } else {
            glob.push(c);
        }
    }
    wildcard(glob.as_bytes(), name.as_bytes())
}

fn wildcard(p: &[u8], s: &[u8]) -> bool {
    match p.split_first() {
        None => s.is_empty(),
        Some((b'*', rest)) => (0..=s.len()).any(|i| wildcard(rest, &s[i..])),
        Some((c, rest)) => s.first() == Some(c) && wildcard(rest, &s[1..]),
    }
}

/// An id for one `cublasguard run`, unique enough to tell its traces from other runs' in one
/// folder: this process's pid and the time.
fn new_run_id() -> String {
    let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{:x}-{:x}", std::process::id(), nanos)
}

/// Trace files this run wrote: those matching the pattern, modified since `since`, and written
/// by a process this run started (its `process.run_id`).
pub fn written_traces(pattern: &str, since: SystemTime, run_id: &str) -> Vec<PathBuf> {
    candidate_traces(pattern, since)
        .into_iter()
        .filter(|p| cublasguard_format::trace::read(p).is_ok_and(|t| t.process.run_id.as_deref() == Some(run_id)))
        .collect()
}

/// Files matching the pattern (with a `-PID` added or not), modified since `since`.
pub fn candidate_traces(pattern: &str, since: SystemTime) -> Vec<PathBuf> {
    let path = Path::new(pattern);
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let Some(file_pattern) = path.file_name().and_then(|f| f.to_str()) else { return Vec::new() };
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_str().is_some_and(|n| matches_trace_name(file_pattern, n)))
        .filter(|e| e.metadata().and_then(|m| m.modified()).is_ok_and(|t| t >= since))
        .map(|e| e.path())
        .collect();
    found.sort();
    found
}

/// Whether an LD_PRELOAD value already names a cublasguard library (any copy of it: a second
/// one would intercept every call twice, and write a second trace).
fn preloads_guard(preload: &str) -> bool {
    preload.split([':', ' ', '\t']).filter_map(|entry| Path::new(entry).file_name()?.to_str()).any(|name| name.starts_with("libcublasguard"))
}

/// Inside another `cublasguard run` (its guard preloaded, its run id set), this one runs the
/// command as it is: the outer run's guard and trace settings apply, and the outer summary,
/// which reads the traces of that run id, covers the command. Options given to this run that
/// would change them are named as ignored.
fn note_nested_run(opts: &Options, program: &std::ffi::OsStr, outer_run_id: &str) {
    eprintln!(
        "cublasguard: already inside `cublasguard run` (run {outer_run_id}): running {} under its guard and trace settings; \
         its summary covers this command",
        report::escape_controls(&program.to_string_lossy())
    );
    let outer = |var: &str| std::env::var(var).ok();
    let trace = opts.trace.as_deref().map(absolute_pattern);
    for (option, given, var) in [
        ("--trace", trace, "CUBLASGUARD_TRACE"),
        ("--checks", opts.checks.clone(), "CUBLASGUARD_CHECKS"),
        ("--on-fault", opts.on_fault.clone(), "CUBLASGUARD_ON_FAULT"),
    ] {
        if let Some(given) = given.filter(|g| outer(var).as_deref() != Some(g.as_str())) {
            eprintln!("cublasguard: {option} {} ignored: the outer run's setting stays", report::escape_controls(&given));
        }
    }
}

/// Runs the command under the guard; returns its exit status (128 + signal if it died by one).
pub fn execute(opts: Options) -> Result<i32, CliError> {
    if let Some(c) = &opts.checks {
        Checks::parse(c).map_err(|e| CliError::usage(format!("--checks {c}: {e}")))?;
    }
    if let Some(m) = &opts.on_fault {
        OnFault::parse(m).map_err(|e| CliError::usage(format!("--on-fault {m}: {e}")))?;
    }
    if opts.trace.as_deref().is_some_and(|t| t.trim().is_empty()) {
        return Err(CliError::usage("--trace: an empty path names no trace file (give a path such as trace-%p.json, or leave the option out)"));
    }
    let (program, args) = opts.command.split_first().ok_or_else(|| CliError::usage("no command given: cublasguard run [OPTIONS] CMD [ARGS...]"))?;
    let existing_preload = std::env::var("LD_PRELOAD").unwrap_or_default();
    let outer_run_id = std::env::var("CUBLASGUARD_RUN_ID").ok().filter(|id| !id.is_empty());
    let mut cmd = Command::new(program);
    cmd.args(args);
    // The traces to summarise: this run's pattern and id; none when an outer run summarises.
    let mut summary = None;
    match outer_run_id {
        Some(outer) if preloads_guard(&existing_preload) => note_nested_run(&opts, program, &outer),
        _ => {
            let pattern = absolute_pattern(opts.trace.as_deref().unwrap_or(DEFAULT_TRACE_PATTERN));
            // A guard preloaded already (LD_PRELOAD=libcublasguard.so cublasguard run ...) is
            // the one the command gets; this run adds its settings and its summary.
            if !preloads_guard(&existing_preload) {
                let lib = find_guard_library()?;
                let preload = if existing_preload.trim().is_empty() { lib.display().to_string() } else { format!("{}:{existing_preload}", lib.display()) };
                cmd.env("LD_PRELOAD", preload);
            }
            let run_id = new_run_id();
            cmd.env("CUBLASGUARD_TRACE", &pattern).env("CUBLASGUARD_RUN_ID", &run_id);
            // This run reports on every process it started (the summary below, or the demo's
            // report): each process's own exit line would say the same again, once per process.
            cmd.env(NO_EXIT_SUMMARY.0, NO_EXIT_SUMMARY.1);
            if let Some(c) = &opts.checks {
                cmd.env("CUBLASGUARD_CHECKS", c);
            }
            if let Some(m) = &opts.on_fault {
                cmd.env("CUBLASGUARD_ON_FAULT", m);
            }
            summary = Some((pattern, run_id));
        }
    }
    if opts.gpu_coredump {
        let pattern = summary.as_ref().map(|(p, _)| p.clone()).unwrap_or_else(|| {
            let outer = std::env::var("CUBLASGUARD_TRACE").ok().filter(|t| !t.trim().is_empty());
            absolute_pattern(outer.as_deref().unwrap_or(DEFAULT_TRACE_PATTERN))
        });
        set_coredump_variables(&mut cmd, &pattern);
    }
    for (k, v) in &opts.env {
        cmd.env(k, v);
    }
    if opts.stdout_to_stderr {
        cmd.stdout(std::io::stderr());
    }
    // The signals to forward are blocked from before the spawn until the child's pid is
    // known, so one that arrives in between waits and is then forwarded, not lost. The child
    // starts with default handling and nothing blocked.
    let forwarded = forwarded_set();
    // SAFETY: getpid has no preconditions.
    let this_process = unsafe { libc::getpid() };
    // SAFETY: the pre-exec closure only calls async-signal-safe functions.
    unsafe {
        cmd.pre_exec(move || {
            // A SIGKILL of this process (a scheduler's, the OOM killer's) takes the command
            // with it, as it would have without `run`, instead of leaving it running unseen.
            // Set in the child: if this process died before it was set, the parent is no
            // longer this process, and the command goes now.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong, 0, 0, 0);
            if libc::getppid() != this_process {
                libc::raise(libc::SIGKILL);
            }
            for sig in FORWARDED {
                libc::signal(sig, libc::SIG_DFL);
            }
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &forwarded, std::ptr::null_mut());
            Ok(())
        });
    }
    let started = SystemTime::now() - std::time::Duration::from_secs(1);
    install_forwarding();
    // SAFETY: a valid signal set.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &forwarded, std::ptr::null_mut()) };
    let spawned = cmd.spawn();
    if let Ok(child) = &spawned {
        CHILD.store(child.id() as i32, Ordering::Relaxed);
    }
    // SAFETY: as above.
    unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &forwarded, std::ptr::null_mut()) };
    let mut child = spawned.map_err(|e| {
        let code = if e.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 };
        CliError { message: format!("cannot run {}: {e}", program.to_string_lossy()), code }
    })?;
    let status = child.wait().map_err(|e| CliError::usage(format!("waiting for the command: {e}")))?;
    CHILD.store(0, Ordering::Relaxed);
    let code = status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    if let Some((pattern, run_id)) = summary.filter(|_| !opts.quiet_summary) {
        let mut traces = written_traces(&pattern, started, &run_id);
        let probes = if opts.trace_chosen { Vec::new() } else { take_probe_only(&mut traces) };
        summarise(&traces, &probes, &pattern);
    }
    Ok(code)
}

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
fn take_probe_only(traces: &mut Vec<PathBuf>) -> Vec<String> {
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
            report::escape_controls(cause)
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

fn summarise(traces: &[PathBuf], probes: &[String], pattern: &str) {
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
        eprintln!("  {} #{} [{}] {}", report::escape_controls(&e.fault.api), e.fault.seq, e.fault.kind.name(), report::escape_controls(&e.fault.message));
    }
    let first = &entries[0];
    if let Some(line) = report::user_line(first.fault, first.exe, first.python) {
        eprintln!("  at {}", report::escape_controls(&line));
    }
    eprintln!("  probable cause: {}", report::escape_controls(&first.diagnosis.cause));
    for step in first.diagnosis.next_steps.iter().take(2) {
        eprintln!("  next: {}", report::escape_controls(step));
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
    fn trace_patterns_match_their_files() {
        assert!(matches_pattern("cublasguard-%h-%p.json", "cublasguard-node1-1234.json"));
        assert!(matches_pattern("t-%r.json", "t-3.json"));
        assert!(!matches_pattern("cublasguard-%h-%p.json", "other.json"));
        assert!(!matches_pattern("t.json", "t.json.tmp"));
        assert!(matches_pattern("t.json", "t.json"));
    }

    #[test]
    fn trace_names_with_a_pid_added_are_the_patterns_too() {
        for name in ["t.json", "t-123.json", "t-123-2.json"] {
            assert!(matches_trace_name("t.json", name), "{name}");
        }
        for name in ["t-.json", "t-x.json", "t-1-2-3.json", "t.json.tmp", "u-1.json", ".cgc-0123.tmp"] {
            assert!(!matches_trace_name("t.json", name), "{name}");
        }
        assert!(matches_trace_name("c-%h-%p.json", "c-node-7-7.json"));
        assert!(matches_trace_name("trace", "trace-7"));
        assert!(!matches_trace_name("trace", "trace-7.json"));
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

    #[test]
    fn any_copy_of_the_guard_in_ld_preload_is_seen() {
        assert!(preloads_guard("/opt/x/libcublasguard.so"));
        assert!(preloads_guard("libfoo.so /a/b/libcublasguard.so:libbar.so"));
        assert!(!preloads_guard("/usr/lib/libcublas.so.12:"));
        assert!(!preloads_guard(""));
    }
}
