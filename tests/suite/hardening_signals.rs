//! Issue 28, round two of hardening: fatal signals in the shapes that lost the crash record or
//! hung the process. A hardware fault with its signal ignored (finding 3), a stack overflow
//! (finding 19), and a crash amid concurrent faults, whose record must count what it lists
//! (finding 23). And a job ended from outside (issue 50): SIGTERM and SIGINT leave the trace.

use crate::common;

use common::*;
use cublasguard_format::trace::{self, Trace};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// A run that may hang: killed after `LIMIT`, and then the test fails.
struct Bounded {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    trace_path: PathBuf,
}

impl Bounded {
    fn trace(&self) -> Trace {
        trace::read(&self.trace_path).unwrap_or_else(|e| panic!("trace {}: {e}\nstdout:\n{}\nstderr:\n{}", self.trace_path.display(), self.stdout, self.stderr))
    }
}

const LIMIT: Duration = Duration::from_secs(30);

fn signal_cases() -> PathBuf {
    build_c("signal_cases", &["signal_cases.c"], false)
}

/// Runs `program args` as `common::run` does (stand-in libraries, the guard preloaded unless
/// `guarded` is false, a trace in a fresh folder), with stdout and stderr to files, and kills
/// it if it is still running after `LIMIT`.
fn run_bounded(program: &Path, args: &[&str], env: &[(&str, &str)], guarded: bool) -> Bounded {
    run_bounded_sending(program, args, env, guarded, &[])
}

/// As `run_bounded`, and once the program printed "ready", sends it `signals` (kill(), as a
/// scheduler or torchrun sends them), a tenth of a second apart.
fn run_bounded_sending(program: &Path, args: &[&str], env: &[(&str, &str)], guarded: bool, signals: &[i32]) -> Bounded {
    let dir = temp_dir("signals");
    let trace_path = dir.join("trace.json");
    let s = standin();
    let (out, err) = (dir.join("stdout"), dir.join("stderr"));
    let mut cmd = Command::new(program);
    cmd.args(args)
        .current_dir(&dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("LD_LIBRARY_PATH", format!("{}:{}", s.join("lib").display(), s.join("driver").display()))
        .env("CUBLASGUARD_QUIET", "1")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).expect("stdout file"))
        .stderr(std::fs::File::create(&err).expect("stderr file"));
    if guarded {
        cmd.env("LD_PRELOAD", guard_lib()).env("CUBLASGUARD_TRACE", &trace_path);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn");
    let deadline = Instant::now() + LIMIT;
    let mut to_send = signals.iter();
    let mut ready = signals.is_empty();
    let status = loop {
        if !ready && std::fs::read_to_string(&out).is_ok_and(|o| o.contains("ready")) {
            ready = true;
        }
        if ready {
            if let Some(&sig) = to_send.next() {
                // SAFETY: kill with the child's pid (not yet waited for) and a valid signal.
                unsafe { libc::kill(child.id() as libc::pid_t, sig) };
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{} {args:?} was still running after {LIMIT:?}: it hangs", program.display());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    Bounded { status, stdout: read(&out), stderr: read(&err), trace_path }
}

/// The run died by `signal`, and its trace has the crash record for it and the program's
/// guarded fault(s).
fn assert_recorded_death(run: &Bounded, signal: i32, name: &str, faults: usize, case: &str) {
    assert_eq!(run.status.signal(), Some(signal), "{case}: dies by its signal\nstdout:\n{}\nstderr:\n{}", run.stdout, run.stderr);
    let t = run.trace();
    let crash = t.crash.as_ref().unwrap_or_else(|| panic!("{case}: no crash record\nstdout:\n{}", run.stdout));
    assert_eq!((crash.signal, crash.name.as_str()), (signal, name), "{case}");
    assert_eq!(t.faults.len(), faults, "{case}: the guarded faults are in the crash trace");
}

#[test]
fn a_hardware_fault_in_a_program_that_ignores_its_signal_is_recorded_and_kills_as_without_the_guard() {
    let program = signal_cases();
    for (case, signal, name) in [("segv", libc::SIGSEGV, "SIGSEGV"), ("fpe", libc::SIGFPE, "SIGFPE"), ("bus", libc::SIGBUS, "SIGBUS")] {
        let bare = run_bounded(&program, &[case, "ignore"], &[], false);
        assert_eq!(bare.status.signal(), Some(signal), "{case}: bare, the kernel forces the default action");
        let guarded = run_bounded(&program, &[case, "ignore"], &[], true);
        assert_recorded_death(&guarded, signal, name, 1, case);
    }
}

#[test]
fn a_segfault_in_a_program_that_inherited_sigsegv_ignored_is_recorded_and_kills() {
    let program = signal_cases();
    let script = "trap '' SEGV; exec \"$0\" segv";
    let run = run_bounded(Path::new("sh"), &["-c", script, program.to_str().expect("utf-8 path")], &[], true);
    assert_recorded_death(&run, libc::SIGSEGV, "SIGSEGV", 1, "trap '' SEGV");
}

#[test]
fn kill_and_raise_of_an_ignored_sigsegv_stay_ignored() {
    let program = signal_cases();
    let own = run_bounded(&program, &["kill_segv", "ignore"], &[], true);
    let script = "trap '' SEGV; exec \"$0\" kill_segv";
    let inherited = run_bounded(Path::new("sh"), &["-c", script, program.to_str().expect("utf-8 path")], &[], true);
    for (run, case) in [(&own, "SIG_IGN set by the program"), (&inherited, "SIG_IGN inherited")] {
        assert_eq!(run.status.code(), Some(0), "{case}: {}", run.stderr);
        assert!(run.stdout.contains("kill=0\nraise=0\nsurvived\n"), "{case}: {}", run.stdout);
        let t = run.trace();
        assert!(t.crash.is_none(), "{case}: an ignored signal is no crash");
        assert_eq!(t.faults.len(), 1, "{case}");
    }
}

#[test]
fn a_stack_overflow_in_the_main_thread_leaves_a_crash_record() {
    let run = run_bounded(&signal_cases(), &["overflow_main"], &[], true);
    assert_recorded_death(&run, libc::SIGSEGV, "SIGSEGV", 1, "overflow in main");
}

#[test]
fn a_stack_overflow_in_a_thread_after_its_guarded_call_leaves_a_crash_record() {
    let run = run_bounded(&signal_cases(), &["overflow_thread"], &[], true);
    assert!(run.stdout.contains("thread sgemm status=7"), "{}", run.stdout);
    assert_recorded_death(&run, libc::SIGSEGV, "SIGSEGV", 2, "overflow in a thread");
    let t = run.trace();
    let threads: std::collections::BTreeSet<u32> = t.faults.iter().map(|f| f.thread).collect();
    assert_eq!(threads.len(), 2, "one fault from main, one from the thread");
    assert!(threads.contains(&t.crash.as_ref().expect("crash").thread), "the crash is the thread's");
}

#[test]
fn a_programs_alternate_stack_too_small_for_the_crash_writer_is_replaced_and_a_large_one_kept() {
    let program = signal_cases();
    // 2 KiB: the kernel's signal frame alone hardly fits; without a larger stack no handler
    // runs and the overflow kills the process without a record.
    let small = run_bounded(&program, &["overflow_main", "2048"], &[], true);
    assert!(small.stdout.contains("own altstack=0\n"), "{}", small.stdout);
    assert!(small.stdout.contains("own altstack kept=0\n"), "{}", small.stdout);
    assert_recorded_death(&small, libc::SIGSEGV, "SIGSEGV", 1, "2 KiB alternate stack");
    // 64 KiB is plenty: the program's own stays in place, and serves the crash writer.
    let large = run_bounded(&program, &["overflow_main", "65536"], &[], true);
    assert!(large.stdout.contains("own altstack kept=1\n"), "{}", large.stdout);
    assert_recorded_death(&large, libc::SIGSEGV, "SIGSEGV", 1, "64 KiB alternate stack");
}

#[test]
#[cfg_attr(not(cublasguard_stress), ignore = "a stress test: runs with CUBLASGUARD_STRESS=1 (CI sets it)")]
fn a_crash_amid_concurrent_faults_lists_as_many_faults_as_it_counts() {
    // 16 threads store faults without pause while the main thread crashes: faults stored but
    // not yet published, or counted but not yet stored, once made the counts disagree with the
    // list in most rounds. Below the cap nothing is dropped; at it, the cap is listed.
    let program = signal_cases();
    for round in 0..18 {
        let cap = ["100000", "1500", "20"][round % 3];
        let env = [("CUBLASGUARD_MAX_FAULTS", cap), ("CUBLASGUARD_STDERR_LINES", "0")];
        let run = run_bounded(&program, &["storm", "16", "300"], &env, true);
        assert_eq!(run.status.signal(), Some(libc::SIGSEGV), "round {round}: {}", run.stderr);
        let t = run.trace();
        assert_eq!(t.crash.as_ref().map(|c| c.name.as_str()), Some("SIGSEGV"), "round {round}");
        let (listed, counted, dropped) = (t.faults.len() as u64, t.summary.faults, t.summary.dropped_faults);
        let cap: u64 = cap.parse().expect("cap");
        assert!(listed > 0, "round {round}");
        assert_eq!(listed + dropped, counted, "round {round} (cap {cap}): listed {listed} + dropped {dropped} != counted {counted}");
        assert!(dropped == 0 || listed == cap, "round {round}: {dropped} dropped with {listed} listed, below the cap of {cap}");
        let mut seqs: Vec<(u64, u32)> = t.faults.iter().map(|f| (f.seq, f.thread)).collect();
        seqs.sort_unstable();
        seqs.dedup();
        assert_eq!(seqs.len() as u64, listed, "round {round}: each fault listed once");
    }
}

fn stopped() -> PathBuf {
    build_c("stopped", &["stopped.c"], false)
}

#[test]
fn a_job_ended_by_sigterm_or_sigint_leaves_its_trace_and_still_dies_of_the_signal() {
    // A scheduler's time limit, torchrun stopping its workers, Ctrl-C: the trace (with the NaN
    // fault found before) is written as at a crash, and the process dies as it would bare.
    for (signal, name) in [(libc::SIGTERM, "SIGTERM"), (libc::SIGINT, "SIGINT")] {
        let bare = run_bounded_sending(&stopped(), &["wait"], &[], false, &[signal]);
        assert_eq!(bare.status.signal(), Some(signal), "{name} bare");
        let run = run_bounded_sending(&stopped(), &["wait"], &[], true, &[signal]);
        assert_recorded_death(&run, signal, name, 1, name);
        // The report says how the job ended and where it was.
        let report = Command::new(cli()).arg("report").arg(&run.trace_path).output().expect("cublasguard report");
        let text = String::from_utf8_lossy(&report.stdout);
        let said = format!("pid {} was ended by {name} from outside", run.trace().process.pid);
        assert!(text.contains(&said) && text.contains("its last recorded call was cudaDeviceSynchronize"), "{name}:\n{text}");
    }
}

#[test]
fn a_program_that_ignores_sigterm_and_handles_sigint_itself_goes_on_as_it_would_bare() {
    // SIGTERM stays ignored (the guard leaves an ignored disposition alone, which its children
    // inherit); the program's SIGINT handler runs and the program ends normally, with the
    // trace an ordinary exit writes, no crash record.
    for guarded in [false, true] {
        let run = run_bounded_sending(&stopped(), &["ignore"], &[], guarded, &[libc::SIGTERM, libc::SIGINT]);
        assert_eq!(run.status.code(), Some(0), "guarded {guarded}: {:?}\n{}\n{}", run.status, run.stdout, run.stderr);
        assert!(run.stdout.contains("interrupted"), "guarded {guarded}: {}", run.stdout);
        if guarded {
            let t = run.trace();
            assert!(t.crash.is_none(), "{:?}", t.crash);
            assert_eq!(t.faults.len(), 1, "{:#?}", t.faults);
        }
    }
}
