//! One schema, one rendering (issue 27): the trace a crash writes says what the trace of the
//! same calls written at exit says, and a call's arguments have one name each, in its fault and
//! in its recent call alike.

use crate::common;

use std::os::unix::process::ExitStatusExt;

use common::{build_c, run, Launch, Run};
use cublasguard_format::trace::Arg;
use serde_json::Value;

/// Every other clean GEMM scanned, one rule that keeps a fault out, launches synchronised.
const ENV: &[(&str, &str)] = &[("CUBLASGUARD_SCAN_EVERY", "2"), ("CUBLASGUARD_IGNORE", "kind=invalid_argument,m=4"), ("CUBLASGUARD_SYNC", "launches")];

fn schema_run(ending: &str, more: &[(&str, &str)]) -> Run {
    let program = build_c("schema_run", &["schema_run.c"], false);
    let env: Vec<(&str, &str)> = ENV.iter().chain(more).copied().collect();
    let args = [ending];
    let run = run(Launch { env: &env, ..Launch::new(&program, &args) });
    assert!(run.stdout().contains("calls made"), "{ending}:\n{}\n{}", run.stdout(), run.stderr());
    run
}

fn summary_json(run: &Run) -> Value {
    let text = std::fs::read_to_string(&run.trace_path).expect("the trace");
    serde_json::from_str::<Value>(&text).expect("JSON")["summary"].clone()
}

#[test]
fn a_crash_trace_has_the_summary_of_the_same_calls_ending_normally_every_field_of_it() {
    // Two faults stored, the third dropped: every field of the summary counts something.
    let cap = [("CUBLASGUARD_MAX_FAULTS", "2")];
    let normal = schema_run("exit", &cap);
    assert_eq!(normal.code(), Some(0), "{}", normal.stderr());
    let crashed = schema_run("segv", &cap);
    assert_eq!(crashed.output.status.signal(), Some(libc::SIGSEGV), "{}", crashed.stderr());
    let (n, c) = (normal.trace(), crashed.trace());
    assert!(n.crash.is_none() && c.crash.as_ref().is_some_and(|c| c.name == "SIGSEGV"), "{:?}", c.crash);
    let s = &n.summary;
    assert!(
        !s.calls.is_empty() && s.faults == 3 && s.dropped_faults == 1 && s.scanned_calls > 0 && s.skipped_scans > 0,
        "the run counts something in every field: {s:#?}"
    );
    assert_eq!(s.ignored_faults.get("kind=invalid_argument,m=4"), Some(&1), "{s:#?}");
    assert_eq!(c.summary, n.summary, "the crash trace's summary");
    // As written, too: the same fields (none left to a reader's default), the same values.
    assert_eq!(summary_json(&crashed), summary_json(&normal));
    // The recent calls' arguments by the same names (a crash record names no kernel).
    assert_eq!(c.recent_calls.len(), n.recent_calls.len());
    for (cc, nc) in c.recent_calls.iter().zip(&n.recent_calls) {
        let names = |args: &cublasguard_format::trace::Args| args.iter().map(|(k, _)| k.to_string()).filter(|k| k != "kernel").collect::<Vec<_>>();
        assert_eq!((cc.seq, cc.api.as_str(), names(&cc.args)), (nc.seq, nc.api.as_str(), names(&nc.args)));
    }
}

#[test]
fn a_launch_and_a_free_name_their_arguments_in_their_faults_as_in_their_recent_calls() {
    let t = schema_run("exit", &[]).trace();
    for api in ["cudaLaunchKernel", "cudaFree"] {
        let f = t.faults.iter().find(|f| f.api == api).unwrap_or_else(|| panic!("{api}'s fault: {:#?}", t.faults));
        let call = t.recent_calls.iter().find(|c| c.seq == f.seq).unwrap_or_else(|| panic!("{api}'s recent call"));
        assert!(!call.args.is_empty());
        for (name, value) in call.args.iter() {
            assert_eq!(f.args.get(name), Some(value), "{api}: '{name}' in the fault as in the recent call\nfault: {:?}\ncall: {:?}", f.args, call.args);
        }
    }
    let launch = t.faults.iter().find(|f| f.api == "cudaLaunchKernel").unwrap();
    assert_eq!(
        (&launch.args["gridDim"], &launch.args["blockDim"], &launch.args["sharedMem"]),
        (&Arg::Dim3([8, 2, 1]), &Arg::Dim3([256, 1, 1]), &Arg::Int(128))
    );
    assert_eq!(launch.args.label("kernel"), Some("gather(float const*, long const*, float*, int)"));
    let free = t.faults.iter().find(|f| f.api == "cudaFree").unwrap();
    assert_eq!(free.args.address("ptr"), Some(0x1230), "{:?}", free.args);
}
