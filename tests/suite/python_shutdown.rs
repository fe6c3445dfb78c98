//! A Python program whose daemon threads fault in GEMMs while the interpreter shuts down
//! (issue 52, point 4): the guard reads no frames through the interpreter once it finalises,
//! and never makes a thread state as it frees them. Every CPython on the machine, 200 runs
//! each.

use crate::common;

use common::*;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

const RUNS: usize = 200;
/// Runs at once: the machine's cores are shared with the rest of the suite.
const AT_ONCE: usize = 4;

/// Every CPython 3.9 or newer on the machine (the guard reads frames from 3.9 on): `python3`
/// and each `python3.N` on the PATH that runs, and pyenv's interpreters; once per version.
fn pythons() -> Vec<(String, String)> {
    let mut candidates: Vec<String> = ["python3".to_string()].into_iter().chain((9..=20).map(|minor| format!("python3.{minor}"))).collect();
    let pyenv = std::env::var_os("PYENV_ROOT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".pyenv"))
        .join("versions");
    if let Ok(versions) = std::fs::read_dir(&pyenv) {
        candidates.extend(versions.filter_map(|v| v.ok()).map(|v| v.path().join("bin/python3").display().to_string()));
    }
    let mut found: Vec<(String, String)> = Vec::new();
    for python in candidates {
        let Ok(out) =
            Command::new(&python).args(["-c", "import sys; print('%d.%d' % sys.version_info[:2], sys.implementation.name)"]).stderr(Stdio::null()).output()
        else {
            continue;
        };
        let said = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let Some((version, "cpython")) = said.split_once(' ') else { continue };
        let minor: u32 = version.strip_prefix("3.").and_then(|m| m.parse().ok()).unwrap_or(0);
        if out.status.success() && minor >= 9 && !found.iter().any(|(_, v)| v == version) {
            found.push((python, version.to_string()));
        }
    }
    found
}

/// The note a fault made once the interpreter began to shut down carries instead of frames
/// (crates/preload/src/ffi/host/python.rs).
const SHUTDOWN_NOTE: &str = ": Python frames not read: the interpreter is shutting down (its thread states may be freed under this thread)";

/// What one guarded run of tests/python/shutdown.py left.
#[derive(Default)]
struct Outcome {
    /// What went wrong, if anything.
    failure: Option<String>,
    /// Its trace holds a fault with Python frames.
    frames: bool,
    /// Faults made as the interpreter shut down (each with the shutdown note).
    at_shutdown: usize,
}

/// One guarded run of tests/python/shutdown.py.
fn one_run(python: &str, n: usize) -> Outcome {
    let failed = |failure| Outcome { failure: Some(failure), ..Outcome::default() };
    let dir = temp_dir("py-shutdown");
    let trace_path = dir.join("trace.json");
    let s = standin();
    let script = manifest_dir().join("tests/python/shutdown.py");
    // Later runs leave the main thread longer, so that its exit meets faults at every stage.
    let wait = format!("{:.2}", 0.3 + (n % 9) as f64 * 0.1);
    let mut cmd = Command::new(python);
    cmd.arg(&script)
        .args(["4", &wait])
        .current_dir(&dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("LD_LIBRARY_PATH", format!("{}:{}", s.join("lib").display(), s.join("driver").display()))
        .env("LD_PRELOAD", guard_lib())
        .env("CUBLASGUARD_TRACE", &trace_path)
        .env("CUBLASGUARD_SYNC", "gemm")
        .env("CUBLASGUARD_QUIET", "1")
        // Every fault stored, so that every one reads frames, up to the end.
        .env("CUBLASGUARD_MAX_FAULTS", "100000");
    let Some(output) = output_within(&mut cmd, &dir, Duration::from_secs(60)) else {
        return failed(format!("{python} run {n}: still running after 60 s"));
    };
    let status = output.status;
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let tail: String = stderr.lines().filter(|l| !l.contains("cublasSgemm_v2 #")).collect::<Vec<_>>().join("\n");
    if !status.success() || stderr.contains("Fatal Python error") {
        return failed(format!("{python} run {n}: {status}; {tail}"));
    }
    let t = match cublasguard_format::trace::read(&trace_path) {
        Ok(t) => t,
        Err(e) => return failed(format!("{python} run {n}: trace {e}; {tail}")),
    };
    // Every GEMM is made by a thread running Python: a fault without its frames was made once
    // the interpreter began to shut down, and says so.
    let frameless: Vec<_> = t.faults.iter().filter(|f| f.python_stack.is_empty()).collect();
    let unsaid: Vec<_> = frameless.iter().filter(|f| !f.python_stack_note.as_deref().is_some_and(|note| note.ends_with(SHUTDOWN_NOTE))).collect();
    let failure = (!unsaid.is_empty()).then(|| {
        let notes: Vec<_> = unsaid.iter().map(|f| (f.seq, f.python_stack_note.clone())).collect();
        format!("{python} run {n}: {} fault(s) without frames or the shutdown note: {notes:?}", unsaid.len())
    });
    Outcome { failure, frames: t.faults.iter().any(|f| !f.python_stack.is_empty()), at_shutdown: frameless.len() }
}

#[test]
#[cfg_attr(not(cublasguard_stress), ignore = "a stress test: runs with CUBLASGUARD_STRESS=1 (CI sets it)")]
fn python_programs_whose_daemon_threads_fault_as_the_interpreter_exits_never_crash() {
    let pythons = pythons();
    assert!(!pythons.is_empty(), "no python3 on the PATH");
    for (python, version) in pythons {
        eprintln!("{RUNS} runs on CPython {version} ({python})");
        let next = AtomicUsize::new(0);
        let failures = Mutex::new(Vec::new());
        let with_frames = AtomicUsize::new(0);
        let at_shutdown = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..AT_ONCE {
                scope.spawn(|| loop {
                    let n = next.fetch_add(1, Ordering::SeqCst);
                    if n >= RUNS {
                        break;
                    }
                    let outcome = one_run(&python, n);
                    with_frames.fetch_add(outcome.frames as usize, Ordering::SeqCst);
                    at_shutdown.fetch_add(outcome.at_shutdown, Ordering::SeqCst);
                    if let Some(failure) = outcome.failure {
                        failures.lock().unwrap_or_else(|e| e.into_inner()).push(failure);
                    }
                });
            }
        });
        let failures = failures.into_inner().unwrap_or_else(|e| e.into_inner());
        eprintln!("CPython {version}: {} faults made at shutdown, each with the shutdown note", at_shutdown.load(Ordering::SeqCst));
        assert!(failures.is_empty(), "{} of {RUNS} runs on {python} failed:\n{}", failures.len(), failures.join("\n"));
        // The runs exercised the frame reading they are about: most faults get their frames.
        assert!(with_frames.load(Ordering::SeqCst) > RUNS / 4, "{python}: Python frames in only {} of {RUNS} traces", with_frames.load(Ordering::SeqCst));
    }
}
