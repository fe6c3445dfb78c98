//! The `cublasguard` command: runs programs under the guard and interprets its traces.

// The command's unsafe code (the CUDA, NVML and C library calls of doctor, replay and run)
// under the same rules as the guard's: every block says why it is sound.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod cuda_table;
mod doctor;
mod escape;
mod output;
mod regular_file;
mod replay;
mod report;
mod run;
mod snapshot;
mod timeline;

use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches as _, Parser, Subcommand};

use output::{print, CliError};

#[derive(Parser)]
#[command(
    name = "cublasguard",
    version = cublasguard_format::VERSION_LABEL,
    about = "Find which cuBLAS/CUDA call broke a run, and why",
    long_about = "Runs programs with libcublasguard.so preloaded, which checks every cuBLAS GEMM and CUDA \
                  memory call (arguments, pointers, extents, NaN/Inf, asynchronous errors) and writes a JSON \
                  trace; then turns traces into a readable postmortem.\n\nStart with: cublasguard demo"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

// Parsed once per process: the size of `Run`'s options does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Cmd {
    /// Run a command under the guard, then summarise what it found
    #[command(after_help = "The command starts at the first word that is not one of these options; every word after it \
        is the command's own, options included (`cublasguard run python3 train.py --lr 0.1`). Put `--` before a \
        command whose name starts with `-`.\n\n\
        Each option takes its default from its CUBLASGUARD_* variable when that is set; the option on the command \
        line wins. The options become CUBLASGUARD_* variables, inherited by child processes, so \
        `cublasguard run torchrun --nproc_per_node 4 train.py` guards every rank; other CUBLASGUARD_* variables \
        reach the command unchanged.\n\n\
        Exit status: the command's own (128 + N if it died by signal N).")]
    Run {
        /// Trace path pattern (%p pid, %h host, %r rank)
        #[arg(long, value_name = "PATH", env = "CUBLASGUARD_TRACE", default_value = cublasguard_format::config::DEFAULT_TRACE_PATTERN)]
        trace: String,
        /// Checks to run: comma list of args, bounds, nan, sync, launches; or all, none
        #[arg(long, value_name = "LIST", env = "CUBLASGUARD_CHECKS")]
        checks: Option<String>,
        /// What to do at a fault: continue, error (the call returns an error), abort
        #[arg(long, value_name = "MODE", env = "CUBLASGUARD_ON_FAULT")]
        on_fault: Option<String>,
        /// Ask the driver for a light GPU core dump (no memory contents) at a GPU exception, beside
        /// the trace, for cuda-gdb; the driver stops the program there
        #[arg(long, env = "CUBLASGUARD_GPU_COREDUMP", value_parser = clap::builder::FalseyValueParser::new())]
        gpu_coredump: bool,
        /// Folder for the traces (made if missing): the default file names
        /// (cublasguard-%h-%p.json) in DIR; sets CUBLASGUARD_TRACE
        #[arg(long, value_name = "DIR", conflicts_with = "trace")]
        trace_dir: Option<PathBuf>,
        /// When the stream is synchronised: deferred (the default: never; a breadcrumb after each
        /// call), gemm (around each guarded call: a NaN/Inf verdict at its call site), launches
        /// (after every kernel launch too)
        #[arg(long, value_name = "MODE", env = "CUBLASGUARD_SYNC")]
        sync: Option<String>,
        /// Write each faulting call's inputs (safetensors) to DIR, for `cublasguard replay`
        #[arg(long, value_name = "DIR", env = "CUBLASGUARD_DUMP")]
        dump: Option<String>,
        /// Dumps written at most (default 8)
        #[arg(long, value_name = "N", env = "CUBLASGUARD_DUMP_MAX")]
        dump_max: Option<String>,
        /// Keep faults that match RULE (kind=...,api=...,operand=...) out of the trace, counted;
        /// repeatable
        #[arg(long, value_name = "RULE", env = "CUBLASGUARD_IGNORE", value_delimiter = ';')]
        ignore: Vec<String>,
        /// Origin mode: find the launch that first made a NaN/Inf (slower: scans kernels' outputs)
        #[arg(long, env = "CUBLASGUARD_NAN_ORIGIN", value_parser = clap::builder::FalseyValueParser::new())]
        nan_origin: bool,
        /// Origin mode for a rerun of the run that wrote TRACE: watch, from their allocation on,
        /// only the memory its guarded calls consumed NaN/Inf from (found again by allocation
        /// order and size; the program must allocate as it did)
        #[arg(long, value_name = "TRACE", env = "CUBLASGUARD_ORIGIN_FROM")]
        origin_from: Option<PathBuf>,
        /// Faults stored in each trace at most (default 100; more are counted)
        #[arg(long, value_name = "N", env = "CUBLASGUARD_MAX_FAULTS")]
        max_faults: Option<String>,
        /// Fault lines on stderr per process at most (default 10)
        #[arg(long, value_name = "N", env = "CUBLASGUARD_STDERR_LINES")]
        stderr_lines: Option<String>,
        /// Pinned host memory per CUDA context that the default mode's scans land in (default
        /// 33554432, 32 MiB); a report's "no room" says to raise it
        #[arg(long, value_name = "BYTES", env = "CUBLASGUARD_STAGING_BYTES")]
        staging_bytes: Option<String>,
        /// Bytes of an operand scanned whole (default 268435456, 256 MiB); a larger operand is
        /// scanned by an even sample
        #[arg(long, value_name = "BYTES", env = "CUBLASGUARD_SCAN_BYTES")]
        scan_bytes: Option<String>,
        /// No banner line from the guard at each process's start
        #[arg(long, env = "CUBLASGUARD_QUIET", value_parser = clap::builder::FalseyValueParser::new())]
        quiet: bool,
        /// The guard's lines go to FILE instead of stderr, appended (%p: the pid)
        #[arg(long, value_name = "FILE", env = "CUBLASGUARD_LOG_FILE")]
        log_file: Option<String>,
        /// The command to run and its arguments (options after its name are its own)
        #[arg(trailing_var_arg = true, required = true, num_args = 1.., value_name = "CMD")]
        command: Vec<OsString>,
    },
    /// Explain trace files (or folders of them): first fault first, with causes and next steps
    #[command(after_help = "Traces of several processes are merged in time order; traces of earlier runs among them are left out \
        unless --all-runs is given, and JSON files that are not traces (a timeline, a report) and folders without \
        traces are skipped with a note. A fault that follows from an earlier \
        one of its process (NaN passed on, a context lost to its error, the same failure to start) is counted under \
        that root cause, not printed in full.\n\n\
        Exit status: 0 no faults, 1 faults found, 2 unreadable input.")]
    Report {
        /// Trace files, or folders of them (the *.json traces directly inside; other JSON files there
        /// are skipped with a note)
        #[arg(required = true, value_name = "PATH")]
        paths: Vec<PathBuf>,
        /// Output format: text for a terminal, markdown (CommonMark) for an issue or a chat, json
        /// for a program (json always holds every fault)
        #[arg(long, value_enum, default_value = "text")]
        format: report::Format,
        /// Show the first N root causes in full, each with the count of the faults that follow
        /// from it
        #[arg(long, value_name = "N", default_value_t = report::DEFAULT_LIMIT, conflicts_with = "all")]
        limit: usize,
        /// Show every root cause, and every fault that follows from one, one line each
        #[arg(long)]
        all: bool,
        /// Report the traces of every run named. By default only the newest run's are (one
        /// `cublasguard run`, or one guarded process tree, and the runs that overlap it in time):
        /// traces of earlier runs left in the same folder are left out, with a note
        #[arg(long)]
        all_runs: bool,
    },
    /// Check this machine's CUDA setup: driver, devices, libraries, versions, variables, and
    /// the frameworks (PyTorch, JAX, TensorFlow) of the Python you run
    #[command(after_help = "Exit status: 0 when no check fails, 1 otherwise.")]
    Doctor {
        /// Print the checks as JSON
        #[arg(long)]
        json: bool,
        /// The Python whose PyTorch, JAX and TensorFlow to check (asked in a child process)
        #[arg(long, value_name = "PATH", default_value = "python3")]
        python: PathBuf,
        /// Seconds to wait for the frameworks to import before giving up on them
        #[arg(long, value_name = "SECS", default_value_t = 60, value_parser = doctor::parse_timeout)]
        python_timeout: u64,
        /// Seconds to wait for NVML (the driver's libnvidia-ml.so.1) to start before leaving the
        /// GPU health checks off
        #[arg(long, value_name = "SECS", default_value_t = 10, value_parser = doctor::parse_nvml_timeout)]
        nvml_timeout: u64,
    },
    /// Write a trace's calls and faults as Chrome Trace Event JSON (Perfetto, chrome://tracing)
    #[command(after_help = "Each recent call the guard recorded is a slice on its thread's track (and on its stream's, \
        for calls that name a stream); each fault is an instant on the same tracks. Times are microseconds from the \
        earliest event (otherData.base_time_ns holds it, in ns since the Unix epoch).")]
    Timeline {
        /// Trace files, or folders of them (several processes are merged, one process per trace)
        #[arg(required = true, value_name = "TRACE")]
        traces: Vec<PathBuf>,
        /// Where to write the timeline; `-` for standard output. Default: beside the first trace,
        /// TRACE.timeline.json (in the folder, for a folder: cublasguard.timeline.json)
        #[arg(short, long, value_name = "OUT.json")]
        output: Option<PathBuf>,
    },
    /// Ask running guarded processes to write their traces now, without stopping them
    #[command(after_help = "For a job that looks stuck before any timeout ends it, or a healthy one: each process \
        named (or, with --all, every guarded process of this user on this host) writes its trace as it is now and \
        goes on; the command prints where each went. Processes of this user only.\n\n\
        Exit status: 0 every process wrote its trace, 1 one could not be asked or did not write it.")]
    Snapshot {
        /// The processes' ids
        #[arg(value_name = "PID")]
        pids: Vec<u32>,
        /// Every guarded process of this user on this host
        #[arg(long)]
        all: bool,
    },
    /// Run the bundled example on the CPU stand-in CUDA stack with a NaN injected, and report
    Demo,
    /// Rerun a dumped faulting call (CUBLASGUARD_DUMP) against an exact reference
    #[command(after_help = "Reads a dump the guard wrote with CUBLASGUARD_DUMP=DIR, recomputes the call on the CPU with \
        f64 accumulation from the dumped inputs, and says whether the NaN/Inf is inherent (the inputs or their scale \
        make it), comes from the library's reduced precision (TF32, fp16 accumulation, FP8), or is not explained.\n\n\
        Exit status: 0 the fault reproduced as recorded, 1 it did not, 2 the dump could not be read (or --cuda could \
        not run the call).")]
    Replay {
        /// The .safetensors file named by the fault's `dump`
        #[arg(value_name = "DUMP")]
        dump: PathBuf,
        /// Also rerun the call through the cuBLAS the loader finds (a GPU; without CUDA on the
        /// library path, the bundled CPU stand-in) and say whether the fault reproduces there
        #[arg(long)]
        cuda: bool,
        /// Write a standalone C program that loads the dump and makes the call, for a bug report
        #[arg(long, value_name = "FILE")]
        emit_c: Option<PathBuf>,
    },
    /// The subcommands' names, one a line: what `python -m cublasguard` passes to this command
    #[command(hide = true)]
    Subcommands,
}

fn colour() -> bool {
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none()
}

fn report_cmd(paths: &[PathBuf], format: report::Format, limit: Option<usize>, all_runs: bool) -> Result<i32, CliError> {
    let mut loaded = report::load(paths).map_err(CliError::usage)?;
    if !all_runs {
        let (newest, note) = report::newest_run(loaded);
        loaded = newest;
        if let Some(note) = note {
            eprintln!("cublasguard: {}", escape::escape_controls(&note));
        }
    }
    print(&report::render_limited(&loaded, format, limit))?;
    let faults = report::total(loaded.iter().map(report::Loaded::fault_count));
    Ok(if faults > 0 { 1 } else { 0 })
}

fn timeline_cmd(traces: &[PathBuf], output: Option<PathBuf>) -> Result<i32, CliError> {
    let loaded = report::load(traces).map_err(CliError::usage)?;
    for l in &loaded {
        for note in &l.notes {
            eprintln!("cublasguard: note: {}: {}", l.path.display(), escape::escape_controls(note));
        }
    }
    let mut json = serde_json::to_vec_pretty(&timeline::events(&loaded)).map_err(|e| CliError::usage(e.to_string()))?;
    json.push(b'\n');
    let output = output.unwrap_or_else(|| timeline::default_output(&traces[0]));
    if output.as_os_str() == "-" {
        let mut out = std::io::stdout().lock();
        return match out.write_all(&json).and_then(|_| out.flush()) {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(CliError::usage(format!("writing the timeline: {e}"))),
            _ => Ok(0),
        };
    }
    // Never over a trace it was asked to read.
    let same = |a: &std::path::Path, b: &std::path::Path| a.canonicalize().ok().is_some_and(|a| b.canonicalize().ok() == Some(a));
    if let Some(l) = loaded.iter().find(|l| same(&l.path, &output)) {
        return Err(CliError::usage(format!("{}: that is one of the traces read; choose another file with -o", l.path.display())));
    }
    // Beside a trace in a shared folder, a link may stand where the timeline goes: it is
    // replaced, never written through; the timeline is as private as the trace it shows.
    let mode = loaded.first().map(|l| timeline::mode_for(&l.path)).unwrap_or(0o600);
    timeline::write_new_file(&output, &json, mode).map_err(|e| CliError::usage(format!("{}: {e}", output.display())))?;
    eprintln!("cublasguard: wrote {} (open it in https://ui.perfetto.dev or chrome://tracing)", output.display());
    Ok(0)
}

/// The stand-in stack and the demo program: installed beside the command by the Python wheel
/// (`<prefix>/share/cublasguard/stand-in`), else where the build put them.
fn standin_dir() -> Result<PathBuf, CliError> {
    let installed = std::env::current_exe().ok().and_then(|exe| Some(exe.parent()?.join("../share/cublasguard/stand-in")));
    let built = PathBuf::from(env!("CUBLASGUARD_STANDIN_DIR"));
    let candidates: Vec<PathBuf> = installed.into_iter().chain([built]).collect();
    let found = candidates.iter().find(|dir| dir.join("bin/mlp").is_file());
    found.map(|dir| dir.canonicalize().unwrap_or_else(|_| dir.clone())).ok_or_else(|| {
        let looked: Vec<String> = candidates.iter().map(|d| d.join("bin/mlp").display().to_string()).collect();
        CliError::usage(format!("the demo program is missing (looked at {}): rebuild with cargo build --release, or reinstall the wheel", looked.join(" and ")))
    })
}

/// The demo's folder: `cublasguard-demo-UID/run-PID` in the temporary folder. It is kept after
/// the demo, so the `replay` command it prints works, and the next demo removes the folders of
/// earlier demos that have ended (one left behind at most, not one per run; a demo running
/// beside it keeps its own).
fn demo_dir() -> Result<PathBuf, CliError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let base = std::env::temp_dir().join(format!("cublasguard-demo-{uid}"));
    let fail = |e: std::io::Error| CliError::usage(format!("the demo's folder {}: {e}", base.display()));
    match std::fs::DirBuilder::new().mode(0o700).create(&base) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(fail(e)),
    }
    // Only a real folder of this user's: never through a link, never another user's.
    let meta = std::fs::symlink_metadata(&base).map_err(fail)?;
    if !meta.is_dir() || meta.uid() != uid {
        return Err(CliError::usage(format!("{} exists and is not this user's folder: remove it", base.display())));
    }
    for entry in std::fs::read_dir(&base).map_err(fail)?.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("run-")).and_then(|p| p.parse::<i32>().ok()) else { continue };
        // SAFETY: kill with signal 0 only asks whether the process exists.
        let ended = unsafe { libc::kill(pid, 0) } != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if ended {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
    let dir = base.join(format!("run-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir); // a reused pid's
    std::fs::DirBuilder::new().mode(0o700).create(&dir).map_err(|e| CliError::usage(format!("{}: {e}", dir.display())))?;
    Ok(dir)
}

fn demo() -> Result<i32, CliError> {
    let standin = standin_dir()?;
    let mlp = standin.join("bin/mlp");
    let dir = demo_dir()?;
    let trace = dir.join("trace-%p.json");
    eprintln!("cublasguard demo: training a small MLP with cublasSgemm on the CPU stand-in CUDA stack,");
    eprintln!("with one NaN injected into the input features (examples/mlp.c --inject nan):\n");
    let libpath = format!("{}:{}", standin.join("lib").display(), standin.join("driver").display());
    let code = run::execute(run::Options {
        trace: Some(trace.display().to_string()),
        checks: None,
        on_fault: None,
        command: vec![mlp.into(), "--inject".into(), "nan".into(), "--epochs".into(), "2".into()],
        env: vec![
            ("LD_LIBRARY_PATH".into(), libpath),
            ("CUBLASGUARD_STDERR_LINES".into(), "3".into()),
            // One dump, of the first fault: `cublasguard replay` on it says what the NaN is.
            ("CUBLASGUARD_DUMP".into(), dir.join("dumps").display().to_string()),
            ("CUBLASGUARD_DUMP_MAX".into(), "1".into()),
        ],
        quiet_summary: true,
        stdout_to_stderr: true,
        gpu_coredump: false,
        trace_chosen: true,
    })?;
    // The demo's folder is its own: every trace in it is the demo's.
    let traces = run::trace_names::candidate_traces(&trace.display().to_string(), std::time::UNIX_EPOCH);
    if traces.is_empty() {
        return Err(CliError { message: format!("the demo wrote no trace (the example exited with {code})"), code: 1 });
    }
    eprintln!("\nThe guard's report (`cublasguard report {}`):\n", dir.display());
    let loaded = report::load(&traces).map_err(CliError::usage)?;
    print(&report::render(&loaded, report::Format::Text))?;
    // By the path of this very command: after `cargo run` it is not on the PATH.
    if let Some(dump) = loaded.iter().flat_map(|l| &l.trace.faults).find_map(|f| f.dump.clone()) {
        let exe = std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_else(|_| "cublasguard".into());
        eprintln!("\nNext, to see what the NaN is: {exe} replay {dump}");
    }
    Ok(if code == 0 { 0 } else { code })
}

/// Every name a subcommand answers to (aliases and clap's `help` included), hidden ones left out.
fn subcommand_names() -> Vec<String> {
    let mut cli = Cli::command();
    cli.build();
    cli.get_subcommands().filter(|c| !c.is_hide_set()).flat_map(|c| std::iter::once(c.get_name()).chain(c.get_all_aliases())).map(str::to_string).collect()
}

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    // An empty --trace is refused (run::execute); an empty CUBLASGUARD_TRACE is ignored, as the
    // guard itself ignores it: an exported empty variable often means "unset".
    let trace_source = matches.subcommand_matches("run").and_then(|m| m.value_source("trace"));
    let trace_from_env = trace_source == Some(ValueSource::EnvVariable);
    let result = match cli.command {
        Cmd::Run {
            mut trace,
            checks,
            on_fault,
            gpu_coredump,
            trace_dir,
            sync,
            dump,
            dump_max,
            ignore,
            nan_origin,
            origin_from,
            max_faults,
            stderr_lines,
            staging_bytes,
            scan_bytes,
            quiet,
            log_file,
            command,
        } => {
            // The first run's trace, checked now (a typo is told before the rerun starts), and
            // passed on by its full path (the command may change its folder).
            let origin_from = match origin_from.as_deref().map(first_run_trace).transpose() {
                Ok(path) => path,
                Err(e) => {
                    eprintln!("cublasguard: --origin-from {e}");
                    return ExitCode::from(2);
                }
            };
            // The user's own path keeps every trace; an empty CUBLASGUARD_TRACE, ignored, chose none.
            let trace_chosen = trace_dir.is_some() || trace_source == Some(ValueSource::CommandLine) || (trace_from_env && !trace.trim().is_empty());
            if trace_from_env && trace.trim().is_empty() {
                eprintln!(
                    "cublasguard: CUBLASGUARD_TRACE='{trace}' ignored: empty path; using the default ({})",
                    cublasguard_format::config::DEFAULT_TRACE_PATTERN
                );
                trace = cublasguard_format::config::DEFAULT_TRACE_PATTERN.into();
            }
            if let Some(dir) = trace_dir {
                if let Err(e) = std::fs::create_dir_all(&dir) {
                    eprintln!("cublasguard: --trace-dir {}: {e}", dir.display());
                    return ExitCode::from(2);
                }
                trace = dir.join(cublasguard_format::config::DEFAULT_TRACE_PATTERN).display().to_string();
            }
            // Each option is its variable, for the command and every process it starts.
            let mut env: Vec<(String, String)> = Vec::new();
            let mut set = |name: &str, value: Option<String>| {
                if let Some(v) = value {
                    env.push((name.into(), v));
                }
            };
            set("CUBLASGUARD_SYNC", sync);
            set("CUBLASGUARD_DUMP", dump);
            set("CUBLASGUARD_DUMP_MAX", dump_max);
            set("CUBLASGUARD_IGNORE", (!ignore.is_empty()).then(|| ignore.join(";")));
            set("CUBLASGUARD_NAN_ORIGIN", nan_origin.then(|| "1".into()));
            set("CUBLASGUARD_ORIGIN_FROM", origin_from);
            set("CUBLASGUARD_MAX_FAULTS", max_faults);
            set("CUBLASGUARD_STDERR_LINES", stderr_lines);
            set("CUBLASGUARD_STAGING_BYTES", staging_bytes);
            set("CUBLASGUARD_SCAN_BYTES", scan_bytes);
            set("CUBLASGUARD_QUIET", quiet.then(|| "1".into()));
            set("CUBLASGUARD_LOG_FILE", log_file);
            run::execute(run::Options {
                trace: Some(trace),
                checks,
                on_fault,
                command,
                env,
                quiet_summary: false,
                stdout_to_stderr: false,
                gpu_coredump,
                trace_chosen,
            })
        }
        Cmd::Report { paths, format, limit, all, all_runs } => report_cmd(&paths, format, (!all).then_some(limit), all_runs),
        Cmd::Doctor { json, python, python_timeout, nvml_timeout } => {
            let options = doctor::PythonOptions {
                python,
                timeout: std::time::Duration::from_secs(python_timeout),
                nvml_timeout: std::time::Duration::from_secs(nvml_timeout),
            };
            let checks = doctor::run_checks(&options);
            let text = if json { serde_json::to_string_pretty(&checks).unwrap_or_default() + "\n" } else { doctor::render(&checks, colour()) };
            let result = print(&text).map(|_| i32::from(checks.iter().any(|c| c.status == doctor::check::Status::Fail)));
            if doctor::gpu_health::left_hanging() {
                // NVML's thread is still inside the library: exit without running the
                // libraries' exit handlers, which could wait for it.
                let code = match &result {
                    Ok(code) => *code,
                    Err(e) => {
                        eprintln!("cublasguard: {}", e.message);
                        e.code
                    }
                };
                // SAFETY: _exit ends the process at once; stdout was flushed by print.
                unsafe { libc::_exit(code) };
            }
            result
        }
        Cmd::Timeline { traces, output } => timeline_cmd(&traces, output),
        Cmd::Snapshot { pids, all } => snapshot::run(&pids, all),
        Cmd::Demo => demo(),
        Cmd::Replay { dump, cuda, emit_c } => {
            let bundled = if cuda { standin_dir().ok() } else { None };
            replay::run(&replay::Options { dump, cuda, emit_c, bundled })
        }
        Cmd::Subcommands => print(&subcommand_names().iter().map(|n| format!("{n}\n")).collect::<String>()).map(|_| 0),
    };
    match result {
        Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
        Err(e) => {
            eprintln!("cublasguard: {}", e.message);
            ExitCode::from(e.code.clamp(1, 255) as u8)
        }
    }
}

/// `--origin-from TRACE`: the trace's full path, once it reads as a trace with a consumed
/// NaN/Inf the rerun can find (a fault of kind nonfinite_input in a numbered allocation).
fn first_run_trace(path: &std::path::Path) -> Result<String, String> {
    let trace = cublasguard_format::trace::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let consumed = trace.faults.iter().filter(|f| f.kind == cublasguard_format::trace::FaultKind::NonfiniteInput);
    if !consumed.flat_map(|f| &f.operands).any(|o| o.nan.unwrap_or(0) + o.inf.unwrap_or(0) > 0 && o.allocation.as_ref().is_some_and(|a| a.ordinal.is_some())) {
        return Err(format!(
            "{}: no guarded call there consumed NaN/Inf from memory a rerun can find again (a nonfinite_input fault in a numbered \
             allocation; traces of guards before 0.5 number none); run with --nan-origin instead",
            path.display()
        ));
    }
    let full = std::fs::canonicalize(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(full.display().to_string())
}
