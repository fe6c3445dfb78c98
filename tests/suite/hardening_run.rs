//! `cublasguard run` and where the traces of a run's processes go (issue 28: findings 6, 7 and
//! 20, and the smaller items about `run`): every trace a process of the run wrote is in the
//! summary, no process of the run replaces an earlier one's trace, another user cannot move a
//! trace by squatting its claim, and `run` passes on every signal, dies with nothing left
//! behind, refuses an empty trace path and never preloads the guard twice.

use crate::common;

use common::*;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use cublasguard_format::trace::{self, FaultKind, Trace};

fn run_cases() -> PathBuf {
    build_c("run_cases", &["run_cases.c"], false)
}

/// `run_cases CASE ARGS...` run directly, unguarded (it links the stand-in libraries).
fn run_cases_command(args: &[&str]) -> Command {
    let mut cmd = Command::new(run_cases());
    cmd.args(args).env("LD_LIBRARY_PATH", standin_path()).env_remove("LD_PRELOAD");
    cmd
}

fn standin_path() -> String {
    let s = standin();
    format!("{}:{}", s.join("lib").display(), s.join("driver").display())
}

fn cublasguard_command(args: &[&str], dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cublasguard"));
    cmd.args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("CUBLASGUARD_LIB", guard_lib())
        .env("LD_LIBRARY_PATH", standin_path())
        .env("NO_COLOR", "1");
    cmd
}

fn cublasguard(args: &[&str], dir: &Path) -> Output {
    cublasguard_command(args, dir).output().expect("run cublasguard")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Every trace in `dir`, by file name.
fn traces_in(dir: &Path) -> Vec<(String, Trace)> {
    let mut found: Vec<(String, Trace)> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".json"))
        .map(|e| (e.file_name().to_string_lossy().into_owned(), trace::read(&e.path()).expect("a valid trace")))
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}

fn names(traces: &[(String, Trace)]) -> Vec<&str> {
    traces.iter().map(|(n, _)| n.as_str()).collect()
}

/// Waits for `child` to exit, at most `limit`; a child still running then is killed (with
/// the processes it started) and the test fails: it hung.
fn wait_bounded(child: &mut Child, limit: Duration, what: &str) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if start.elapsed() > limit {
            let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", child.id())).unwrap_or_default();
            for pid in children.split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
                // SAFETY: kill with a pid this test's child started.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (bounded) until `path` exists.
fn wait_for_file(path: &Path) {
    let start = Instant::now();
    while !path.exists() {
        assert!(start.elapsed() < Duration::from_secs(20), "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether process `pid` still runs (a zombie has ended).
fn alive(pid: i32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()).unwrap_or("X");
    !matches!(state, "Z" | "X")
}

// Finding 6: the summary covers every trace the run's processes wrote.

#[test]
fn run_summarises_the_fault_of_a_child_forked_after_cuda_under_a_fixed_path() {
    let dir = temp_dir("hr-fork-child");
    let program = run_cases().display().to_string();
    let trace = dir.join("out.json").display().to_string();
    let out = cublasguard(&["run", "--trace", &trace, &program, "fork_child_fault"], &dir);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let traces = traces_in(&dir);
    let child = traces.iter().find(|(n, _)| n != "out.json").map(|(_, t)| t).unwrap_or_else(|| panic!("the child's own trace: {:?}", names(&traces)));
    assert!(child.faults.iter().any(|f| f.kind == FaultKind::InitFailed), "{:#?}", child.faults);
    assert!(stderr.contains("cublasguard: 1 fault in "), "the child's fault is in the summary: {stderr}");
    assert!(stderr.contains("cublasCreate"), "{stderr}");
}

/// The claim names this test knows of for trace `path`: the one guards before issue 28 used
/// (the standard library's hasher of the path), and the uid-named slots guards use now
/// (FNV-1a of the path), written out here as the rule they follow.
fn claim_names(path: &str, slots: u32) -> Vec<String> {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    path.hash(&mut hasher);
    let mut names = vec![format!("cublasguard-trace-{:016x}", hasher.finish())];
    let mut fnv: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in path.bytes() {
        fnv ^= u64::from(byte);
        fnv = fnv.wrapping_mul(0x0100_0000_01b3);
    }
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    for slot in 0..slots {
        names.push(if slot == 0 { format!("cublasguard-trace-{uid}-{fnv:016x}") } else { format!("cublasguard-trace-{uid}-{fnv:016x}-{slot}") });
    }
    names
}

/// Another user (nobody) binds `names` and holds them while `body` runs.
fn with_squatter<T>(names: &[String], body: impl FnOnce() -> T) -> T {
    let args: Vec<&str> = std::iter::once("squat").chain(names.iter().map(String::as_str)).collect();
    let mut squatter = run_cases_command(&args).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("spawn the squatter");
    let mut line = String::new();
    BufReader::new(squatter.stdout.take().unwrap()).read_line(&mut line).expect("the squatter's line");
    assert_eq!(line.trim(), "ready", "the squatter bound every name as another user");
    let result = body();
    drop(squatter.stdin.take());
    wait_bounded(&mut squatter, Duration::from_secs(20), "the squatter");
    result
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("skipped: needs root, to squat as another user (CI runs as root)");
    }
    root
}

#[test]
fn another_users_socket_on_the_claim_name_neither_moves_the_trace_nor_hides_it_from_the_summary() {
    if !is_root() {
        return;
    }
    let program = scenarios().display().to_string();
    // Listening (it answers, as another user) and merely bound (it answers nothing).
    for listening in [true, false] {
        let dir = temp_dir("hr-squat");
        let trace = dir.join("out.json").display().to_string();
        let squatted: Vec<String> = claim_names(&trace, 1).into_iter().map(|n| if listening { n } else { format!("!{n}") }).collect();
        let out = with_squatter(&squatted, || cublasguard(&["run", "--trace", &trace, &program, "nan_a"], &dir));
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        let traces = traces_in(&dir);
        assert_eq!(names(&traces), ["out.json"], "listening={listening}: the trace stays at the path asked for: {stderr}");
        assert_eq!(traces[0].1.faults.len(), 1);
        assert!(stderr.contains("cublasguard: 1 fault in "), "{stderr}");
    }
}

#[test]
fn a_trace_whose_every_claim_name_another_user_holds_still_reaches_the_summary() {
    if !is_root() {
        return;
    }
    let dir = temp_dir("hr-squat-all");
    let program = scenarios().display().to_string();
    let trace = dir.join("out.json").display().to_string();
    let out = with_squatter(&claim_names(&trace, 4), || cublasguard(&["run", "--trace", &trace, &program, "nan_a"], &dir));
    let stderr = text(&out.stderr);
    let traces = traces_in(&dir);
    assert_eq!(traces.len(), 1, "{:?}", names(&traces));
    assert!(traces[0].0.starts_with("out-"), "a file of its own beside the path: {:?}", names(&traces));
    assert!(stderr.contains("other users' sockets sit on every claim name of"), "said once: {stderr}");
    assert!(stderr.contains("cublasguard: 1 fault in "), "and in the summary: {stderr}");
}

// Finding 7: no process of the run replaces the trace of an earlier one.

#[test]
fn a_later_program_of_the_run_never_replaces_an_earlier_ones_crash_record() {
    let dir = temp_dir("hr-crash-clean");
    let program = run_cases().display().to_string();
    let trace = dir.join("out.json").display().to_string();
    let script = format!("'{program}' fault_then_crash; '{program}' clean");
    let out = cublasguard(&["run", "--trace", &trace, "sh", "-c", &script], &dir);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "the shell's status: its last command's: {stderr}");
    let traces = traces_in(&dir);
    assert_eq!(traces.len(), 2, "{:?}", names(&traces));
    let crashed = traces.iter().find(|(_, t)| t.crash.is_some()).unwrap_or_else(|| panic!("the crash record survives: {:?}", names(&traces)));
    assert_eq!(crashed.1.faults.len(), 1, "with its fault");
    assert_eq!(crashed.0, "out.json", "the first process keeps the path");
    assert!(traces.iter().any(|(_, t)| t.crash.is_none() && t.faults.is_empty() && t.summary.calls.values().sum::<u64>() > 0), "the clean one writes its own");
    assert!(stderr.contains("cublasguard: 1 fault in "), "{stderr}");
}

#[test]
fn a_child_forked_before_cuda_never_replaces_its_parents_fault() {
    let dir = temp_dir("hr-fork-first");
    let program = run_cases().display().to_string();
    let trace = dir.join("out.json").display().to_string();
    let out = cublasguard(&["run", "--trace", &trace, &program, "fork_first"], &dir);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let traces = traces_in(&dir);
    let faulted: Vec<&str> = traces.iter().filter(|(_, t)| !t.faults.is_empty()).map(|(n, _)| n.as_str()).collect();
    assert_eq!(faulted, ["out.json"], "the parent's fault survives its child's later trace: {:?}", names(&traces));
    assert!(
        traces.iter().any(|(n, t)| n != "out.json" && t.summary.calls.values().sum::<u64>() > 0 && t.faults.is_empty()),
        "the child's own: {:?}",
        names(&traces)
    );
    assert!(stderr.contains("cublasguard: 1 fault in "), "{stderr}");
}

#[test]
fn a_new_run_with_the_same_fixed_path_replaces_the_last_runs_trace() {
    // A rerun is not a later process of the same run: it writes the path the user named.
    let dir = temp_dir("hr-rerun");
    let program = run_cases().display().to_string();
    let trace = dir.join("out.json").display().to_string();
    cublasguard(&["run", "--trace", &trace, &program, "fault_then_crash"], &dir);
    assert!(trace::read(Path::new(&trace)).unwrap().crash.is_some());
    let out = cublasguard(&["run", "--trace", &trace, &program, "clean"], &dir);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let traces = traces_in(&dir);
    assert_eq!(names(&traces), ["out.json"]);
    assert!(traces[0].1.crash.is_none() && traces[0].1.faults.is_empty(), "the new run's trace");
}

// Finding 20: every signal sent to `run` reaches the command, however it was sent.

#[test]
fn run_forwards_a_sigterm_sent_by_sigqueue_or_tgkill() {
    for how in ["sigqueue", "tgkill"] {
        let dir = temp_dir("hr-queued-signal");
        let script = "trap 'exit 42' TERM; echo ready > ready; while :; do sleep 0.05; done";
        let mut run =
            cublasguard_command(&["run", "--", "sh", "-c", script], &dir).env("CUBLASGUARD_QUIET", "1").stderr(Stdio::null()).spawn().expect("spawn run");
        wait_for_file(&dir.join("ready"));
        let sent = run_cases_command(&[how, &run.id().to_string(), &libc::SIGTERM.to_string()]).status().expect("send");
        if !sent.success() {
            let _ = run.kill(); // its command goes with it (a parent-death signal)
            panic!("{how} could not be sent: {sent}");
        }
        let status = wait_bounded(&mut run, Duration::from_secs(20), how);
        assert_eq!(status.code(), Some(42), "{how}: the command's trap ran and run passed its status on");
    }
}

// Smaller items.

#[test]
fn a_sigkill_of_run_takes_the_command_with_it() {
    let dir = temp_dir("hr-pdeathsig");
    let mut run = cublasguard_command(&["run", "--", "sh", "-c", "echo $$ > pid.tmp && mv pid.tmp pid && exec sleep 60"], &dir)
        .env("CUBLASGUARD_QUIET", "1")
        .spawn()
        .expect("spawn run");
    wait_for_file(&dir.join("pid"));
    let pid: i32 = std::fs::read_to_string(dir.join("pid")).unwrap().trim().parse().unwrap();
    run.kill().expect("SIGKILL run");
    run.wait().unwrap();
    let start = Instant::now();
    while alive(pid) && start.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = alive(pid);
    if left {
        // SAFETY: kill with the pid of the command this test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    assert!(!left, "the command outlived the run that was killed");
}

#[test]
fn run_refuses_an_empty_trace_path_as_a_usage_error() {
    let dir = temp_dir("hr-empty-trace");
    for empty in ["", " "] {
        let out = cublasguard(&["run", "--trace", empty, "sh", "-c", "echo ran"], &dir);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{empty:?}: {stderr}");
        assert!(stderr.contains("--trace") && stderr.contains("empty"), "{stderr}");
        assert!(text(&out.stdout).is_empty(), "the command never ran");
    }
    // An exported empty variable is not an option typed by hand: ignored, as the guard does.
    let out = cublasguard_command(&["run", "sh", "-c", "echo ran"], &dir).env("CUBLASGUARD_TRACE", "").output().unwrap();
    assert_eq!((out.status.code(), text(&out.stdout).trim()), (Some(0), "ran"), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("CUBLASGUARD_TRACE='' ignored"), "{}", text(&out.stderr));
}

#[test]
fn run_inside_run_preloads_the_guard_once_and_writes_one_trace() {
    let dir = temp_dir("hr-nested");
    // The inner run finds another copy of the library, as a wheel's and a clone's would.
    let copy = dir.join("copy");
    std::fs::create_dir_all(&copy).unwrap();
    std::fs::copy(guard_lib(), copy.join("libcublasguard.so")).unwrap();
    let program = scenarios().display().to_string();
    let inner = format!(
        "CUBLASGUARD_LIB='{}' '{}' run --checks args -- sh -c 'echo \"preload=$LD_PRELOAD\"; exec \"$0\" nan_a' '{program}'",
        copy.join("libcublasguard.so").display(),
        env!("CARGO_BIN_EXE_cublasguard")
    );
    let mut outer = cublasguard_command(&["run", "--trace", "t-%p.json", "sh", "-c", &inner], &dir);
    let out = outer.stdin(Stdio::null()).output().expect("run");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let preload = stdout.lines().find_map(|l| l.strip_prefix("preload=")).expect("the command's LD_PRELOAD");
    assert_eq!(preload.matches("libcublasguard").count(), 1, "one guard: {preload}");
    let traces = traces_in(&dir);
    assert_eq!(traces.len(), 1, "one trace for one process: {:?}", names(&traces));
    assert_eq!(traces[0].1.faults.len(), 1, "the outer run's checks (all): the NaN is found once");
    assert!(stderr.contains("already inside `cublasguard run`"), "{stderr}");
    assert!(stderr.contains("--checks args ignored"), "{stderr}");
    let summaries: Vec<&str> = stderr.lines().filter(|l| l.contains(" fault(s) in ") || l.ends_with("first ones:")).collect();
    assert_eq!(summaries.len(), 1, "the outer run's summary alone: {stderr}");
    assert!(summaries[0].starts_with("cublasguard: 1 fault in "), "{stderr}");
}

#[test]
fn without_run_a_later_program_of_one_command_line_never_replaces_an_earlier_ones_crash_record() {
    // LD_PRELOAD and a fixed CUBLASGUARD_TRACE exported by hand: the shell is the tree's first
    // guarded process, and both programs it starts are one run.
    let dir = temp_dir("hr-tree");
    let program = run_cases().display().to_string();
    let trace = dir.join("out.json");
    let script = format!("'{program}' fault_then_crash; '{program}' clean");
    let mut sh = Command::new("sh");
    sh.args(["-c", &script])
        .current_dir(&dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("LD_LIBRARY_PATH", standin_path())
        .env("LD_PRELOAD", guard_lib())
        .env("CUBLASGUARD_TRACE", &trace)
        .env("CUBLASGUARD_QUIET", "1");
    let out = sh.output().expect("sh");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let traces = traces_in(&dir);
    let crashed = traces.iter().find(|(_, t)| t.crash.is_some()).unwrap_or_else(|| panic!("the crash record survives: {:?}", names(&traces)));
    assert_eq!(crashed.0, "out.json", "the first process keeps the path: {:?}", names(&traces));
    assert_eq!(crashed.1.faults.len(), 1);
    assert!(traces.iter().any(|(n, t)| n != "out.json" && t.crash.is_none() && t.summary.calls.values().sum::<u64>() > 0), "{:?}", names(&traces));
    // A second command line is a new run: it replaces the path's trace.
    let again = Command::new(run_cases())
        .arg("clean")
        .current_dir(&dir)
        .env_clear()
        .env("LD_LIBRARY_PATH", standin_path())
        .env("LD_PRELOAD", guard_lib())
        .env("CUBLASGUARD_TRACE", &trace)
        .env("CUBLASGUARD_QUIET", "1")
        .output()
        .expect("rerun");
    assert_eq!(again.status.code(), Some(0));
    let t = trace::read(&trace).expect("trace");
    assert!(t.crash.is_none() && t.faults.is_empty(), "the rerun's own trace");
}
