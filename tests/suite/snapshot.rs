//! `cublasguard snapshot` (issue 50): a running guarded process writes its trace when asked,
//! and goes on unchanged.

use crate::common;

use common::*;
use cublasguard_format::trace::{self, FaultKind};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn a_snapshot_writes_a_running_jobs_trace_and_the_job_runs_on() {
    // stopped.c: a GEMM reading a NaN, "ready", then it waits for signals.
    let program = build_c("stopped", &["stopped.c"], false);
    let dir = temp_dir("snapshot");
    let trace_path = dir.join("trace.json");
    let out = dir.join("stdout");
    let mut job = guarded_on_the_standin(&program, &dir, &trace_path)
        .arg("wait")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).expect("stdout file"))
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the job");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(&out).is_ok_and(|o| o.contains("ready")) {
        assert!(Instant::now() < deadline && job.try_wait().expect("wait").is_none(), "the job never got ready");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The trace the fault wrote is moved away: what is at the path next is the snapshot's.
    let _ = std::fs::remove_file(&trace_path);
    let pid = job.id();
    let snapshot = |args: &[&str]| Command::new(cli()).arg("snapshot").args(args).output().expect("cublasguard snapshot");
    let asked = snapshot(&[&pid.to_string()]);
    let said = String::from_utf8_lossy(&asked.stdout).to_string();
    assert_eq!(asked.status.code(), Some(0), "{said}{}", String::from_utf8_lossy(&asked.stderr));
    assert_eq!(said.trim(), format!("pid {pid}: trace written to {}", trace_path.display()));
    let t = trace::read(&trace_path).expect("the snapshot's trace");
    assert_eq!((t.process.pid, t.faults.len(), t.faults[0].kind), (pid, 1, FaultKind::NonfiniteInput), "{:#?}", t.faults);
    assert!(t.crash.is_none());
    assert!(job.try_wait().expect("wait").is_none(), "the job runs on after its snapshot");
    // --all finds it among this user's guarded processes.
    let all = snapshot(&["--all"]);
    assert!(String::from_utf8_lossy(&all.stdout).contains(&format!("pid {pid}: trace written to ")), "{}", String::from_utf8_lossy(&all.stdout));
    // A process that is not guarded is named as such.
    let bare = snapshot(&[&std::process::id().to_string()]);
    assert_eq!(bare.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bare.stdout).contains("no guarded process of this user with this pid"), "{}", String::from_utf8_lossy(&bare.stdout));
    // SAFETY: kill with the job's pid, not yet waited for.
    unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
    let status = job.wait().expect("wait for the job");
    assert_eq!(status.signal(), Some(libc::SIGTERM), "the job still ends as a SIGTERM ends it");
}
