//! The postmortem survives what broken runs do: fatal signals, threads, fork, many ranks,
//! bad input, hostile paths; and loading the guard never changes what the program does.

use crate::common;

use common::*;
use cublasguard_format::trace::{self, FaultKind};
use std::io::{BufRead, BufReader};
use std::os::fd::FromRawFd;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

/// Starts `scenarios fault_then_wait` under the guard, waits for its fault, sends `signal`.
fn kill_after_fault(signal: i32) -> (std::process::ExitStatus, std::path::PathBuf) {
    kill_after_fault_with(signal, &[], |_, _| ())
}

/// As `kill_after_fault`, with `env` added, calling `plant(dir, pid)` first; a process still
/// alive 10 s after the signal is killed and the test fails.
fn kill_after_fault_with(signal: i32, env: &[(&str, &str)], plant: impl FnOnce(&std::path::Path, u32)) -> (std::process::ExitStatus, std::path::PathBuf) {
    let dir = temp_dir("signal");
    let trace_path = dir.join("trace.json");
    let mut child = guarded_on_the_standin(&scenarios(), &dir, &trace_path)
        .arg("fault_then_wait")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let stdout = child.stdout.take().expect("stdout");
    let ready = BufReader::new(stdout).lines().map_while(Result::ok).any(|l| l == "ready");
    assert!(ready, "the program reached its fault");
    plant(&dir, child.id());
    // SAFETY: kill with the child's pid.
    unsafe { libc::kill(child.id() as i32, signal) };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return (status, trace_path);
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the process hung in its signal handler");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

#[test]
fn fatal_signals_after_a_fault_leave_a_valid_trace_and_the_same_death() {
    for (signal, name) in [(libc::SIGSEGV, "SIGSEGV"), (libc::SIGABRT, "SIGABRT"), (libc::SIGBUS, "SIGBUS")] {
        let (status, path) = kill_after_fault(signal);
        assert_eq!(status.signal(), Some(signal), "{name}: the program still dies by its own signal");
        let t = trace::read(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(only_fault(&t).kind, FaultKind::NonfiniteInput, "{name}");
        let crash = t.crash.as_ref().unwrap_or_else(|| panic!("{name}: crash record"));
        assert_eq!((crash.signal, crash.name.as_str()), (signal, name));
        assert!(crash.recent_calls_saved);
        assert!(t.recent_calls.iter().any(|c| c.api == "cublasSgemm_v2" && c.args["transa"] == "N"), "{name}: {:?}", t.recent_calls);
        assert_eq!(t.summary.calls.get("cublasSgemm_v2"), Some(&1));
    }
}

#[test]
fn sigkill_after_a_fault_leaves_the_trace_written_when_the_fault_was_found() {
    // gemm mode judges the GEMM before it returns: the trace is on disk before the program
    // says "ready".
    let (status, path) = kill_after_fault_with(libc::SIGKILL, &[("CUBLASGUARD_SYNC", "gemm")], |_, _| ());
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    let t = trace::read(&path).expect("valid trace");
    assert_eq!(only_fault(&t).kind, FaultKind::NonfiniteInput);
    assert!(t.crash.is_none());
    // Deferred (the default): the guard's thread judges the verdict once its scan landed and
    // writes the trace then, while the program sleeps; nothing runs at a SIGKILL, so the kill
    // waits for that write (a SIGKILL before it would lose the fault: README, "What changes").
    let (status, path) = kill_after_fault_with(libc::SIGKILL, &[], |dir, _| {
        let written = dir.join("trace.json");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !written.exists() {
            assert!(std::time::Instant::now() < deadline, "the deferred verdict was never written");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    });
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    let t = trace::read(&path).expect("valid trace");
    assert_eq!(only_fault(&t).kind, FaultKind::NonfiniteInput);
    assert_eq!(t.summary.deferred_verdicts.get("deferred"), Some(&1), "judged after its call: {:?}", t.summary);
    assert!(t.crash.is_none());
}

#[test]
fn a_real_segfault_is_recorded_and_still_kills() {
    let run = scenario("fault_then_crash", &[]);
    assert_eq!(run.output.status.signal(), Some(libc::SIGSEGV));
    let t = run.trace();
    assert_eq!(t.crash.as_ref().map(|c| c.signal), Some(libc::SIGSEGV));
    assert_eq!(t.faults.len(), 1);
    let files: Vec<_> = std::fs::read_dir(&run.dir).unwrap().filter_map(|e| e.ok()).map(|e| e.file_name()).collect();
    assert_eq!(files.len(), 1, "no temporary files left: {files:?}");
}

#[test]
fn threads_count_every_call_and_fault_exactly_once() {
    let stress = build_c("stress", &["stress.c"], false);
    let env = [("CUBLASGUARD_QUIET", "1")];
    let run = run(Launch { env: &env, ..Launch::new(&stress, &["8", "2000", "100"]) });
    assert!(run.output.status.success(), "{}", run.stderr());
    assert_eq!(run.stdout(), "calls=16000 bad=160\n");
    let t = run.trace();
    assert_eq!(t.summary.calls.get("cublasSgemm_v2"), Some(&16000));
    assert_eq!(t.summary.calls.get("cublasCreate_v2"), Some(&8));
    assert_eq!(t.summary.calls.get("cudaMalloc"), Some(&24));
    assert_eq!(t.summary.faults, 160);
    assert_eq!(t.faults.len(), 100, "the default cap");
    assert_eq!(t.summary.dropped_faults, 60);
    assert!(t.faults.iter().all(|f| f.kind == FaultKind::InvalidArgument && f.message.starts_with("lda = 1")));
    let mut seqs: Vec<u64> = t.faults.iter().map(|f| f.seq).collect();
    seqs.dedup();
    assert_eq!(seqs.len(), 100, "each fault recorded once");
    let threads: std::collections::BTreeSet<u32> = t.faults.iter().map(|f| f.thread).collect();
    assert!(threads.len() > 1, "faults from several threads");
    let stderr_faults = run.stderr().lines().filter(|l| l.contains("[invalid_argument]")).count();
    assert_eq!(stderr_faults, 10, "stderr is capped");
    assert_eq!(run.stderr().lines().filter(|l| l.contains("further faults are recorded")).count(), 1);
}

#[test]
fn fork_gives_parent_and_child_their_own_traces() {
    let program = scenarios();
    for (args, label) in [(&["fork"][..], "fork"), (&["fork", "exec"][..], "fork+exec")] {
        let dir = temp_dir("fork");
        let pattern = dir.join("t-%p.json").display().to_string();
        let env = [("CUBLASGUARD_TRACE", pattern.as_str())];
        let run = run(Launch { env: &env, trace: false, ..Launch::new(&program, args) });
        assert!(run.output.status.success(), "{label}: {}", run.stderr());
        assert!(run.stdout().contains("child exit=0"), "{label}: {}", run.stdout());
        let mut traces: Vec<trace::Trace> =
            std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()).map(|e| trace::read(&e.path()).expect("valid trace")).collect();
        // After exec the child's new image is a later program of the same run: it keeps the
        // forked image's trace (with its fault) and writes `-PID` beside it.
        let images = if args.len() > 1 { 2 } else { 1 };
        assert_eq!(traces.len(), 1 + images, "{label}: one trace each");
        traces.sort_by_key(|t| t.faults.iter().any(|f| f.kind == FaultKind::InvalidArgument));
        let parent = &traces[0];
        assert!(parent.faults.iter().all(|f| f.kind == FaultKind::NonfiniteInput), "{label}: {:#?}", parent.faults);
        assert_eq!(parent.faults.len(), 2);
        for child in &traces[1..] {
            assert_ne!(parent.process.pid, child.process.pid);
            assert!(child.faults.iter().all(|f| f.kind == FaultKind::InvalidArgument), "{label}: {:#?}", child.faults);
            assert_eq!(child.faults.len(), 1, "{label}");
        }
    }
}

#[test]
fn fork_with_a_fixed_trace_path_never_shares_the_file() {
    let program = scenarios();
    let dir = temp_dir("fork-fixed");
    let path = dir.join("t.json").display().to_string();
    let env = [("CUBLASGUARD_TRACE", path.as_str())];
    let run = run(Launch { env: &env, trace: false, ..Launch::new(&program, &["fork"]) });
    assert!(run.output.status.success());
    let names: Vec<String> = std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.contains(&"t.json".to_string()));
}

#[test]
fn four_ranks_write_four_traces() {
    let program = scenarios();
    let dir = temp_dir("ranks");
    let pattern = dir.join("trace-%h-%r.json").display().to_string();
    let children: Vec<_> = (0..4)
        .map(|rank| {
            let s = standin();
            Command::new(&program)
                .arg("nan_a")
                .env_clear()
                .env("LD_LIBRARY_PATH", format!("{}:{}", s.join("lib").display(), s.join("driver").display()))
                .env("LD_PRELOAD", guard_lib())
                .env("CUBLASGUARD_TRACE", &pattern)
                .env("RANK", rank.to_string())
                .env("LOCAL_RANK", rank.to_string())
                .env("WORLD_SIZE", "4")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn")
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let mut ranks: Vec<i64> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| {
            let t = trace::read(&e.path()).expect("valid trace");
            assert_eq!(t.process.world_size, Some(4));
            assert_eq!(t.process.local_rank, t.process.rank);
            assert!(e.file_name().to_string_lossy().ends_with(&format!("-{}.json", t.process.rank.unwrap())));
            t.process.rank.expect("rank")
        })
        .collect();
    ranks.sort();
    assert_eq!(ranks, [0, 1, 2, 3]);
}

#[test]
fn a_nan_storm_keeps_the_trace_small() {
    let mlp = standin().join("bin/mlp");
    let env = [("CUBLASGUARD_QUIET", "1")];
    let run = run(Launch { env: &env, ..Launch::new(&mlp, &["--inject", "nan", "--epochs", "400"]) });
    assert!(run.output.status.success());
    let t = run.trace();
    assert_eq!(t.faults.len(), 100);
    assert!(t.summary.faults >= 1900, "{}", t.summary.faults);
    let size = std::fs::metadata(&run.trace_path).unwrap().len();
    assert!(size < 2 << 20, "trace is {size} bytes");
    assert!(run.stderr().lines().count() < 15, "{}", run.stderr());
}

#[test]
fn large_operands_are_scanned_by_sampling_within_the_budget() {
    // A 64 x 64 float matrix (16 KiB) with NaN at (5, 8) and (6, 9). Fully scanned, both count.
    let t = scenario("big_nan", &[]).trace();
    let a = t.faults[0].operands.iter().find(|o| o.name == "A").unwrap();
    assert_eq!((a.nan, a.sampled), (Some(2), false));
    // The budget is for copies to the host: the device scan reads everything, at memory speed.
    let t = scenario("big_nan", &[("CUBLASGUARD_SCAN_BYTES", "4096")]).trace();
    let a = t.faults[0].operands.iter().find(|o| o.name == "A").unwrap();
    assert_eq!((a.nan, a.sampled, a.scan_path.as_deref()), (Some(2), false, Some("device")));
    // On the host, with a 4 KiB budget, 16 evenly spaced columns (0, 4, 8, ...) are read:
    // (5, 8) is seen, (6, 9) is not, and the fault says it sampled.
    let t = scenario("big_nan", &[("CUBLASGUARD_SCAN_BYTES", "4096"), ("CUBLASGUARD_DEVICE_SCAN", "off")]).trace();
    let f = &t.faults[0];
    let a = f.operands.iter().find(|o| o.name == "A").unwrap();
    assert_eq!((a.nan, a.sampled), (Some(1), true));
    assert_eq!(a.first_nonfinite.map(|p| (p.row, p.col)), Some((5, 8)));
    assert!(f.message.contains("in a sample of 1024 elements"), "{}", f.message);
}

#[test]
fn bad_input_to_the_guard_changes_nothing_the_program_sees() {
    let program = scenarios();
    for scenario in ["garbage", "huge"] {
        let bare = run(Launch { guarded: false, ..Launch::new(&program, &[scenario]) });
        let guarded = run(Launch::new(&program, &[scenario]));
        assert_eq!(bare.stdout(), guarded.stdout(), "{scenario}");
        assert_eq!(bare.output.status.code(), guarded.output.status.code(), "{scenario}");
        assert_eq!(bare.output.status.signal(), guarded.output.status.signal(), "{scenario}");
        let t = guarded.trace();
        assert!(t.faults.iter().any(|f| f.message.contains("transa = 77")), "{scenario}");
        let last = t.faults.last().unwrap();
        let expected = if scenario == "garbage" { FaultKind::HostPointer } else { FaultKind::OutOfBounds };
        assert_eq!(last.kind, expected, "{scenario}: {:#?}", t.faults);
    }
}

#[test]
fn a_fault_found_before_the_call_is_on_disk_when_the_library_crashes() {
    // `garbage` ends with a GEMM whose alpha and A are the wild pointer 0x10: the library
    // reads alpha on the host and dies. The guard's finding was written before the call ran.
    let run = scenario("garbage", &[]);
    assert_eq!(run.output.status.signal(), Some(libc::SIGSEGV));
    let t = run.trace();
    let last = t.faults.last().unwrap();
    assert_eq!(last.kind, FaultKind::HostPointer);
    assert!(last.message.contains("at 0x10 is not device memory"), "{}", last.message);
    assert_eq!(last.status, -1, "the call never returned");
    assert_eq!(t.crash.as_ref().map(|c| c.signal), Some(libc::SIGSEGV));
}

#[test]
fn an_unwritable_trace_path_warns_once_and_changes_nothing() {
    let program = scenarios();
    let bare = run(Launch { guarded: false, ..Launch::new(&program, &["nan_a"]) });
    // Under a regular file: no folder can be made there, even as root.
    let blocker = temp_dir("unwritable").join("a-file");
    std::fs::write(&blocker, b"").unwrap();
    let path = blocker.join("folder/trace.json").display().to_string();
    let env = [("CUBLASGUARD_TRACE", path.as_str())];
    let guarded = run(Launch { env: &env, trace: false, ..Launch::new(&program, &["nan_a"]) });
    assert_eq!(bare.stdout(), guarded.stdout());
    assert_eq!(guarded.code(), Some(0));
    let warnings = guarded.stderr().lines().filter(|l| l.contains("cannot write the trace")).count();
    assert_eq!(warnings, 1, "{}", guarded.stderr());
}

#[test]
fn the_trace_never_follows_or_replaces_a_symlink_or_a_special_file() {
    let program = scenarios();
    let dir = temp_dir("symlink");
    let victim = dir.join("victim.txt");
    std::fs::write(&victim, "precious").unwrap();
    let link = dir.join("trace.json");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let fifo = dir.join("fifo.json");
    let c = std::ffi::CString::new(fifo.display().to_string()).unwrap();
    // SAFETY: mkfifo with a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for (path, is_kind) in [
        (&link, std::fs::FileType::is_symlink as fn(&std::fs::FileType) -> bool),
        (&fifo, |t: &std::fs::FileType| {
            use std::os::unix::fs::FileTypeExt;
            t.is_fifo()
        }),
    ] {
        let path_s = path.display().to_string();
        let env = [("CUBLASGUARD_TRACE", path_s.as_str())];
        let run = run(Launch { env: &env, trace: false, ..Launch::new(&program, &["nan_a"]) });
        assert!(run.output.status.success(), "{}", run.stderr());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious", "the link's target is untouched");
        assert!(is_kind(&std::fs::symlink_metadata(path).unwrap().file_type()), "{path_s} was replaced");
        let warnings = run.stderr().lines().filter(|l| l.contains("is not a regular file")).count();
        assert_eq!(warnings, 1, "one warning: {}", run.stderr());
    }
}

#[test]
fn the_trace_keeps_no_secrets_from_the_environment_or_the_command_line() {
    let program = scenarios();
    let env = [("API_TOKEN", "s3cr3t"), ("NVIDIA_API_KEY", "nvapi-123"), ("TORCH_HUB_TOKEN", "hub-456"), ("CUDA_CACHE_DISABLE", "1")];
    let run = run(Launch { env: &env, ..Launch::new(&program, &["nan_a", "--api-token=tok-789", "--password", "hunter2"]) });
    assert!(run.output.status.success());
    let text = std::fs::read_to_string(&run.trace_path).unwrap();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&run.trace_path).unwrap().permissions().mode() & 0o777, 0o600);
    for secret in ["s3cr3t", "nvapi-123", "hub-456", "tok-789", "hunter2"] {
        assert!(!text.contains(secret), "{secret} leaked into the trace");
    }
    let t = trace::parse(&text).unwrap();
    assert_eq!(t.environment.variables.get("CUDA_CACHE_DISABLE").map(String::as_str), Some("1"));
    assert_eq!(t.environment.variables.get("NVIDIA_API_KEY").map(String::as_str), Some("<redacted>"));
    assert!(!t.environment.variables.contains_key("API_TOKEN"), "not on the allow-list at all");
    assert_eq!(t.process.argv[1..], ["nan_a", "--api-token=<redacted>", "--password", "<redacted>"]);
}

#[test]
fn guarded_runs_match_unguarded_ones() {
    // In `continue` mode the guard is invisible: same stdout (which prints the results the
    // program read back), same exit status. (Not `async`: there the guard's synchronisation
    // makes the sticky error visible one call earlier, as CUDA_LAUNCH_BLOCKING=1 would.)
    let program = scenarios();
    for scenario in [
        "clean",
        "nan_a",
        "nan_c_beta0",
        "nan_c_beta1",
        "overflow",
        "bad_lda",
        "bad_handle",
        "host_pointer",
        "out_of_bounds",
        "api_error",
        "alloc",
        "free_twice",
        "streams",
        "capture",
        "device_scalars",
        "last_error",
    ] {
        let env: &[(&str, &str)] = if scenario == "api_error" { &[("CUDASHIM_FAIL", "cublasSgemm_v2:1:14")] } else { &[] };
        let bare = run(Launch { env, guarded: false, ..Launch::new(&program, &[scenario]) });
        let guarded = run(Launch { env, ..Launch::new(&program, &[scenario]) });
        let strip = |s: String| s.lines().filter(|l| !l.starts_with("stream=")).collect::<Vec<_>>().join("\n");
        assert_eq!(strip(bare.stdout()), strip(guarded.stdout()), "{scenario}");
        assert_eq!(bare.code(), guarded.code(), "{scenario}");
    }
    let mlp = standin().join("bin/mlp");
    for inject in ["none", "nan", "overflow", "width", "host", "lda"] {
        let bare = run(Launch { guarded: false, ..Launch::new(&mlp, &["--inject", inject]) });
        let guarded = run(Launch::new(&mlp, &["--inject", inject]));
        assert_eq!(bare.stdout(), guarded.stdout(), "mlp --inject {inject}");
        assert_eq!(bare.code(), guarded.code(), "mlp --inject {inject}");
    }
}

#[test]
#[cfg_attr(not(cublasguard_stress), ignore = "a stress test: runs with CUBLASGUARD_STRESS=1 (CI sets it)")]
fn forked_children_never_hang_while_other_threads_are_inside_the_guard() {
    // What subprocess.run does from a training process: fork + exec while 16 threads run GEMMs
    // through the guard. A child must never wait on a lock a parent thread held at the fork.
    let storm = build_c("fork_storm", &["fork_storm.c"], false);
    let run = run(Launch { env: &[("CUBLASGUARD_QUIET", "1")], ..Launch::new(&storm, &["16", "300", "exec"]) });
    assert!(run.stdout().contains("hung=0 children=300"), "{}\n{}", run.stdout(), run.stderr());
    assert_eq!(run.code(), Some(0));
}

#[test]
fn a_forked_child_writes_its_own_trace_while_parent_threads_store_faults() {
    // Parent threads store a fault at every call (rewriting the trace, collecting the
    // environment, capturing backtraces) while children fork and try CUDA, which fails in a
    // forked child as NVIDIA's runtime fails it: each child's guard reports that, and writes a
    // trace of its own, taking the same paths the parent threads were in at the fork.
    let storm = build_c("fork_storm", &["fork_storm.c"], false);
    let dir = temp_dir("fork-storm");
    let pattern = dir.join("t-%p.json").display().to_string();
    let env = [("CUBLASGUARD_TRACE", pattern.as_str()), ("CUBLASGUARD_QUIET", "1"), ("CUBLASGUARD_MAX_FAULTS", "400"), ("CUBLASGUARD_STDERR_LINES", "0")];
    let run = run(Launch { env: &env, trace: false, ..Launch::new(&storm, &["8", "40", "cuda", "nan"]) });
    assert!(run.stdout().contains("hung=0 children=40"), "{}\n{}", run.stdout(), run.stderr());
    let traces: Vec<trace::Trace> = std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()).map(|e| trace::read(&e.path()).expect("valid trace")).collect();
    assert_eq!(traces.len(), 41, "the parent's trace and one per child");
    let parent_pid =
        traces.iter().map(|t| t.summary.faults).max().and_then(|most| traces.iter().find(|t| t.summary.faults == most)).map(|t| t.process.pid).unwrap();
    for child in traces.iter().filter(|t| t.process.pid != parent_pid) {
        assert_eq!(child.summary.faults, 1, "a child counts only its own fault: {:#?}", child.summary);
        assert_eq!(child.faults[0].kind, FaultKind::InitFailed);
        assert_eq!(child.summary.calls.get("cublasCreate_v2"), Some(&1), "and only its own calls");
        assert_eq!(child.summary.calls.get("cublasSgemm_v2"), None);
    }
}

#[test]
fn a_closed_stderr_pipe_never_kills_the_program() {
    // The banner and the fault lines go to a pipe whose reader is gone: without the guard the
    // program would exit 0, so it must under the guard too (not die of SIGPIPE).
    let program = scenarios();
    let mut fds = [0i32; 2];
    // SAFETY: pipe writes two fds into the array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: fds[0] is ours; closing the read end makes every write to fds[1] EPIPE.
    unsafe { libc::close(fds[0]) };
    // SAFETY: fds[1] is an open fd we own and hand over.
    let write_end = unsafe { std::os::fd::OwnedFd::from_raw_fd(fds[1]) };
    let dir = temp_dir("epipe");
    let s = standin();
    let status = std::process::Command::new(&program)
        .arg("nan_a")
        .current_dir(&dir)
        .env("LD_LIBRARY_PATH", format!("{}:{}", s.join("lib").display(), s.join("driver").display()))
        .env("LD_PRELOAD", guard_lib())
        .env("CUBLASGUARD_TRACE", dir.join("t.json"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::from(write_end))
        .status()
        .expect("run");
    assert_eq!(status.code(), Some(0), "{status:?}");
    assert_eq!(trace::read(&dir.join("t.json")).expect("trace").faults.len(), 1);
}

#[test]
fn a_daemons_data_file_on_fd_2_never_gets_the_guards_lines() {
    let run = scenario("daemon", &[]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    assert!(run.stdout().contains("data fd=2"), "{}", run.stdout());
    let data = std::fs::read_to_string(run.dir.join("data.txt")).expect("data file");
    assert_eq!(data, "payload\n", "the guard wrote into the program's data");
    assert!(run.stderr().contains("cublasguard: cublasSgemm_v2 #"), "the fault line went to the original stderr: {}", run.stderr());
}

#[test]
fn a_daemon_that_closes_every_descriptor_and_reuses_the_guards_copy_of_stderr_never_gets_its_lines() {
    let run = scenario("daemon_all", &[]);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    assert!(run.stdout().contains("daemon_all done"), "{}", run.stdout());
    for i in 0..4 {
        let data = std::fs::read_to_string(run.dir.join(format!("data{i}.txt"))).expect("data file");
        assert_eq!(data, "payload\n", "the guard wrote into data{i}.txt");
    }
    assert_eq!(run.trace().faults.len(), 1, "the fault is still in the trace");
}

#[test]
fn a_programs_own_sigsegv_handler_recovers_as_without_the_guard() {
    let program = build_c("own_handler", &["own_handler.c"], false);
    let bare = run(Launch { guarded: false, ..Launch::new(&program, &[]) });
    let guarded = run(Launch::new(&program, &[]));
    assert_eq!(bare.code(), Some(0));
    assert_eq!(guarded.code(), Some(0), "{}", guarded.stderr());
    assert_eq!(bare.stdout(), guarded.stdout(), "the handler saw the same fault (SEGV_ACCERR at its page)");
    assert!(guarded.stdout().contains("recovered=1 si_code=2 value=42"), "{}", guarded.stdout());
    let t = guarded.trace();
    assert!(t.crash.is_none(), "a recovered fault is not a crash");
    assert_eq!(t.faults.len(), 1);
    // A fault the program's handler does not recover from is fatal: it dies by its signal,
    // and the trace has the crash record.
    let crashed = run(Launch::new(&program, &["crash"]));
    assert_eq!(crashed.output.status.signal(), Some(libc::SIGSEGV));
    let t = crashed.trace();
    assert_eq!(t.crash.expect("crash record").name, "SIGSEGV");
    assert_eq!(t.faults.len(), 1);
}

#[test]
fn a_crash_after_more_faults_than_the_cap_leaves_a_complete_trace() {
    let run = scenario("storm_then_crash", &[("CUBLASGUARD_STDERR_LINES", "0")]);
    assert_eq!(run.output.status.signal(), Some(libc::SIGSEGV));
    let t = run.trace();
    assert_eq!(t.crash.as_ref().expect("crash record").name, "SIGSEGV");
    assert_eq!((t.faults.len(), t.summary.faults, t.summary.dropped_faults), (100, 150, 50));
    assert!(!t.recent_calls.is_empty());
}

#[test]
fn a_crash_after_thousands_of_stored_faults_keeps_every_one() {
    // Rewrites of the file back off during a run of faults; the crash writer still has them all.
    let program = scenarios();
    let env = [("CUBLASGUARD_STDERR_LINES", "0"), ("CUBLASGUARD_MAX_FAULTS", "100000"), ("CUBLASGUARD_QUIET", "1")];
    let run = run(Launch { env: &env, ..Launch::new(&program, &["storm_then_crash", "2000"]) });
    assert_eq!(run.output.status.signal(), Some(libc::SIGSEGV));
    let t = run.trace();
    assert_eq!(t.crash.as_ref().expect("crash record").name, "SIGSEGV");
    assert_eq!((t.faults.len(), t.summary.faults), (2000, 2000));
    assert!(t.faults.windows(2).all(|w| w[0].seq < w[1].seq), "in order");
}

#[test]
fn the_crash_writer_never_opens_a_file_planted_at_a_predictable_name() {
    // The old temporary name was .<trace>.crash<pid>: a FIFO planted there hung the dying
    // process, a 0666 file made the trace world-readable.
    let (status, path) = kill_after_fault_with(libc::SIGSEGV, &[], |dir, pid| {
        let fifo = std::ffi::CString::new(dir.join(format!(".trace.json.crash{pid}")).display().to_string()).unwrap();
        // SAFETY: mkfifo with a valid path.
        unsafe { libc::mkfifo(fifo.as_ptr(), 0o666) };
    });
    assert_eq!(status.signal(), Some(libc::SIGSEGV));
    let t = trace::read(&path).expect("trace");
    assert!(t.crash.is_some());
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
}

#[test]
fn a_forked_child_that_crashes_without_cuda_writes_its_own_pid_and_no_parent_faults() {
    let program = scenarios();
    let dir = temp_dir("fork-crash");
    let pattern = dir.join("t-%p.json").display().to_string();
    let env = [("CUBLASGUARD_TRACE", pattern.as_str())];
    let run = run(Launch { env: &env, trace: false, ..Launch::new(&program, &["fork_crash"]) });
    assert!(run.output.status.success(), "{}", run.stderr());
    assert!(run.stdout().contains("child signal=11"), "{}", run.stdout());
    let traces: Vec<trace::Trace> = std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()).map(|e| trace::read(&e.path()).expect("valid trace")).collect();
    assert_eq!(traces.len(), 2, "one trace each");
    let child = traces.iter().find(|t| t.crash.is_some()).expect("the child's crash trace");
    let parent = traces.iter().find(|t| t.crash.is_none()).expect("the parent's trace");
    assert_ne!(child.process.pid, parent.process.pid);
    assert!(child.faults.is_empty() && child.summary.faults == 0, "the parent's faults are the parent's: {:#?}", child.faults);
    assert_eq!(parent.faults.len(), 1);
}

#[test]
fn concurrent_faults_in_abort_mode_always_leave_the_crash_record() {
    let stress = build_c("stress", &["stress.c"], false);
    for round in 0..20 {
        let env = [("CUBLASGUARD_ON_FAULT", "abort"), ("CUBLASGUARD_QUIET", "1"), ("CUBLASGUARD_STDERR_LINES", "0")];
        let run = run(Launch { env: &env, ..Launch::new(&stress, &["8", "50", "1"]) });
        assert_eq!(run.output.status.signal(), Some(libc::SIGABRT), "round {round}");
        let t = run.trace();
        assert_eq!(t.crash.as_ref().map(|c| c.name.as_str()), Some("SIGABRT"), "round {round}: the crash record was lost");
        assert!(!t.faults.is_empty());
    }
}

#[test]
fn a_trace_name_of_255_bytes_is_written_and_survives_a_crash() {
    let dir = temp_dir("long-name");
    let name = format!("{}.json", "t".repeat(250));
    let path = dir.join(&name).display().to_string();
    let run = scenario("fault_then_crash", &[("CUBLASGUARD_TRACE", path.as_str())]);
    assert_eq!(run.output.status.signal(), Some(libc::SIGSEGV));
    let t = trace::read(std::path::Path::new(&path)).expect("the long-named trace");
    assert!(t.crash.is_some() && t.faults.len() == 1);
}

#[test]
fn an_empty_check_list_warns_and_keeps_the_default_checks() {
    for value in ["", " , ,"] {
        let run = scenario("nan_a", &[("CUBLASGUARD_CHECKS", value)]);
        assert!(run.stderr().contains("CUBLASGUARD_CHECKS"), "one warning for {value:?}: {}", run.stderr());
        assert_eq!(run.trace().faults.len(), 1, "the default checks still find the NaN");
    }
}

#[test]
fn a_chdir_after_the_first_fault_keeps_one_trace_where_the_process_started() {
    // The default, relative path: after chdir() later faults must still reach the same file.
    let program = scenarios();
    let run = run(Launch { trace: false, ..Launch::new(&program, &["chdir"]) });
    assert!(run.stdout().contains("chdir=0"), "{}", run.stdout());
    let traces: Vec<_> = std::fs::read_dir(&run.dir).unwrap().filter_map(|e| e.ok()).filter(|e| e.file_name().to_string_lossy().ends_with(".json")).collect();
    assert_eq!(traces.len(), 1, "one trace in the starting folder");
    let t = trace::read(&traces[0].path()).unwrap();
    assert_eq!(t.faults.len(), 2, "both faults in it");
    let elsewhere: Vec<_> = std::fs::read_dir(run.dir.join("elsewhere")).unwrap().collect();
    assert!(elsewhere.is_empty(), "nothing written after the chdir: {elsewhere:?}");
}

#[test]
fn a_helper_started_by_fork_and_exec_under_a_fixed_path_keeps_its_own_trace() {
    let program = scenarios();
    let dir = temp_dir("fork-exec-fixed");
    let path = dir.join("t.json").display().to_string();
    let env = [("CUBLASGUARD_TRACE", path.as_str())];
    let run = run(Launch { env: &env, trace: false, ..Launch::new(&program, &["fork", "exec"]) });
    assert!(run.output.status.success(), "{}", run.stderr());
    let traces: Vec<trace::Trace> = std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()).map(|e| trace::read(&e.path()).expect("valid trace")).collect();
    let parent = trace::read(std::path::Path::new(&path)).unwrap();
    assert!(!parent.process.argv.iter().any(|a| a == "bad_lda"), "the parent's file is the parent's");
    assert_eq!(parent.faults.len(), 2);
    let helper = traces.iter().find(|t| t.process.argv.iter().any(|a| a == "bad_lda")).expect("the helper's own trace survives");
    assert!(helper.faults.iter().any(|f| f.kind == FaultKind::InvalidArgument), "{:#?}", helper.faults);
}

/// The vendored-extension programs: `vendored_main` (no cuBLAS of its own) and the extension it
/// loads with RTLD_LOCAL, linked against the stand-in cuBLAS renamed as auditwheel renames it.
fn vendored_programs() -> (std::path::PathBuf, std::path::PathBuf) {
    extension_programs(true)
}

/// `vendored_main` and an extension linked against the vendored cuBLAS, or the usual one.
fn extension_programs(vendored_cublas: bool) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = temp_dir("vendored-build");
    let s = standin();
    let vendored = if vendored_cublas { s.join("vendored") } else { s.join("lib") };
    let cublas = if vendored_cublas { "-l:libcublas-5e3a1f0c.so.12" } else { "-lcublas" };
    let ext = dir.join("ext.so");
    let cc = |args: &mut Command| assert!(args.status().expect("cc").success(), "compiling failed");
    cc(Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o"])
        .arg(&ext)
        .arg(manifest_dir().join("tests/c/vendored_ext.c"))
        .arg(format!("-I{}", s.join("include").display()))
        .arg(format!("-L{}", vendored.display()))
        .arg(format!("-L{}", s.join("lib").display()))
        .arg(format!("-Wl,-rpath,{}", vendored.display()))
        .args([cublas, "-lcudart"]));
    let main = dir.join("vendored_main");
    cc(Command::new("cc").args(["-O1", "-Wall", "-Werror", "-o"]).arg(&main).arg(manifest_dir().join("tests/c/vendored_main.c")).arg("-ldl"));
    (main, ext)
}

#[test]
fn a_vendored_renamed_cublas_loaded_locally_is_still_found() {
    let (main, ext) = vendored_programs();
    let ext_s = ext.display().to_string();
    let bare = run(Launch { guarded: false, ..Launch::new(&main, &[&ext_s]) });
    let guarded = run(Launch::new(&main, &[&ext_s]));
    assert!(bare.stdout().contains("gemm=0 C= 7 10 15 22"), "{}", bare.stdout());
    assert_eq!(bare.stdout(), guarded.stdout(), "{}", guarded.stderr());
    assert!(!guarded.stderr().contains("cannot find the real"), "{}", guarded.stderr());
    let t = guarded.trace();
    assert_eq!(t.summary.calls.get("cublasSgemm_v2"), Some(&1));
    assert!(t.faults.is_empty(), "{:#?}", t.faults);
}

#[test]
fn an_extension_closed_and_loaded_again_is_called_at_its_new_address() {
    let (main, ext) = extension_programs(false);
    let ext_s = ext.display().to_string();
    let args = [ext_s.as_str(), "reload", "libcublas.so.12"];
    let bare = run(Launch { guarded: false, ..Launch::new(&main, &args) });
    assert!(
        bare.stdout().contains("cublas unloaded=1") && bare.stdout().contains("old pages taken=1"),
        "the test needs cuBLAS really unmapped and its pages taken: {}",
        bare.stdout()
    );
    let guarded = run(Launch::new(&main, &args));
    assert_eq!(guarded.code(), Some(0), "{}", guarded.stderr());
    assert_eq!(bare.stdout(), guarded.stdout());
    assert_eq!(guarded.trace().summary.calls.get("cublasSgemm_v2"), Some(&2));
}
