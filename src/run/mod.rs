//! `cublasguard run`: the program under the guard, its exit status passed through, and a
//! short verdict at the end.

use std::ffi::OsString;
use std::os::unix::process::{CommandExt as _, ExitStatusExt};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::SystemTime;

use cublasguard_format::config::{Checks, OnFault, DEFAULT_TRACE_PATTERN};

use crate::escape::escape_controls;
use crate::output::CliError;

pub mod gpu_coredump;
pub mod guard_library;
mod summary;
pub mod trace_names;

use gpu_coredump::set_coredump_variables;
use guard_library::find_guard_library;
use summary::{summarise, take_probe_only};
use trace_names::written_traces;

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

/// An id for one `cublasguard run`, unique enough to tell its traces from other runs' in one
/// folder: this process's pid and the time.
fn new_run_id() -> String {
    let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{:x}-{:x}", std::process::id(), nanos)
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
        escape_controls(&program.to_string_lossy())
    );
    let outer = |var: &str| std::env::var(var).ok();
    let trace = opts.trace.as_deref().map(absolute_pattern);
    for (option, given, var) in [
        ("--trace", trace, "CUBLASGUARD_TRACE"),
        ("--checks", opts.checks.clone(), "CUBLASGUARD_CHECKS"),
        ("--on-fault", opts.on_fault.clone(), "CUBLASGUARD_ON_FAULT"),
    ] {
        if let Some(given) = given.filter(|g| outer(var).as_deref() != Some(g.as_str())) {
            eprintln!("cublasguard: {option} {} ignored: the outer run's setting stays", escape_controls(&given));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_copy_of_the_guard_in_ld_preload_is_seen() {
        assert!(preloads_guard("/opt/x/libcublasguard.so"));
        assert!(preloads_guard("libfoo.so /a/b/libcublasguard.so:libbar.so"));
        assert!(!preloads_guard("/usr/lib/libcublas.so.12:"));
        assert!(!preloads_guard(""));
    }
}
