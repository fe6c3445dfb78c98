//! What a program does to its descriptors does not cost a trace: a process that closes every
//! descriptor above stderr (a daemon detaching, Python's `subprocess` child before `exec`)
//! loses the socket that claims its trace path, and must not then overwrite the trace of
//! another process that took the path meanwhile.

use crate::common;

use common::*;
use cublasguard_format::trace::{self, FaultKind};
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

/// `descriptors MODE` under the guard with CUBLASGUARD_TRACE=`trace`, in `dir`.
fn guarded(program: &std::path::Path, mode: &str, dir: &std::path::Path, trace: &std::path::Path) -> Command {
    let mut cmd = guarded_on_the_standin(program, dir, trace);
    cmd.arg(mode);
    cmd
}

#[test]
fn a_process_that_closes_its_descriptors_never_overwrites_the_trace_another_process_took_the_path_for() {
    let program = build_c("descriptors", &["descriptors.c"], false);
    let dir = temp_dir("close-range");
    let path = dir.join("t.json");
    let mut first = guarded(&program, "first", &dir, &path).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    let first_pid = first.id();
    let mut lines = BufReader::new(first.stdout.take().expect("stdout")).lines().map_while(Result::ok);
    let closed = lines.find(|l| l.starts_with("closed"));
    assert_eq!(closed.as_deref(), Some("closed 0"), "the first process closed its descriptors");
    // The path's claim is gone with them: the second process takes the path and writes it.
    let second = guarded(&program, "second", &dir, &path).output().expect("run the second process");
    assert!(second.status.success(), "{}", String::from_utf8_lossy(&second.stderr));
    let taken = trace::read(&path).expect("the second process's trace");
    assert_eq!(taken.process.pid, second_pid(&taken, first_pid), "the path holds the second process's trace");
    // The first goes on, finds a second NaN and exits: its trace goes beside the path.
    writeln!(first.stdin.take().expect("stdin"), "go").expect("tell the first process to go on");
    let out = first.wait_with_output().expect("wait");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let at_path = trace::read(&path).expect("a trace at the path");
    assert_ne!(at_path.process.pid, first_pid, "the first process overwrote the trace the second wrote at the path: {stderr}");
    assert!(at_path.faults.iter().any(|f| f.kind == FaultKind::InvalidArgument), "{:#?}", at_path.faults);
    let own = trace::read(&dir.join(format!("t-{first_pid}.json"))).unwrap_or_else(|e| panic!("the first process's own trace: {e}; {stderr}"));
    assert_eq!(own.process.pid, first_pid);
    assert_eq!(faults_of(&own, FaultKind::NonfiniteInput).len(), 2, "both NaN GEMMs in the first process's own trace: {:#?}", own.faults);
}

/// The pid of the process that wrote `t`, checked to be another than `first`.
fn second_pid(t: &trace::Trace, first: u32) -> u32 {
    assert_ne!(t.process.pid, first, "the path still holds the first process's trace: the second one's was not written there");
    t.process.pid
}
