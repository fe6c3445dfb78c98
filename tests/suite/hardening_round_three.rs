//! Issue 46, round three of hardening: the guard's threads and signals the program blocked
//! (finding 3), NaN faults that waited for NVML (finding 7), verdicts out of call order
//! (finding 6) and faults lost at fork() (finding 5).

use crate::common;

use common::*;
use std::time::Duration;

fn round_three() -> std::path::PathBuf {
    build_c("round_three", &["round_three.c"], false)
}

/// `run_within` 60 s: a hang fails the test.
fn bounded(args: &[&str], env: &[(&str, &str)]) -> Run {
    let program = round_three();
    run_within(Launch { env, ..Launch::new(&program, args) }, Duration::from_secs(60)).unwrap_or_else(|| panic!("round_three {args:?} hung"))
}

#[test]
fn a_server_that_blocks_sigterm_and_sigwaits_for_it_shuts_down_gracefully_with_the_guards_threads_running() {
    let nvml = with_standin_nvml();
    for _ in 0..3 {
        let run = bounded(&["sigwait"], &[("LD_LIBRARY_PATH", &nvml)]);
        let out = run.stdout();
        // Both of the guard's threads were there to take the signal.
        assert!(out.contains("thread cublasguard-ver") && out.contains("thread cublasguard-nvm"), "{out}\n{}", run.stderr());
        assert_eq!(run.code(), Some(0), "killed by SIGTERM instead of taking it with sigwait: {:?}\n{out}\n{}", run.output.status, run.stderr());
        assert!(out.contains("got 15"), "{out}");
    }
}

#[test]
fn three_hundred_nan_faults_never_wait_for_nvml() {
    let nvml = with_standin_nvml();
    let env = [("LD_LIBRARY_PATH", nvml.as_str()), ("CUBLASGUARD_MAX_FAULTS", "300")];
    let started = std::time::Instant::now();
    let run = bounded(&["nans", "300"], &env);
    let took = started.elapsed();
    let t = run.trace();
    let nans = t.faults.iter().filter(|f| f.kind == cublasguard_format::trace::FaultKind::NonfiniteInput).count();
    assert_eq!(nans, 300, "{}", run.stderr());
    // A NaN is data: no fault asked NVML for fresh readings (each one that did waited for the
    // NVML thread, ~50 ms apiece: 15 s for these).
    assert!(t.faults.iter().all(|f| f.gpu_health.is_none()), "a NaN fault carries the GPU's health: {:#?}", t.faults[0].gpu_health);
    assert_eq!(t.environment.gpu_health.as_ref().map(|h| h.state), Some(cublasguard_format::gpu_health::GpuHealthState::Ready), "NVML was there");
    assert!(took < Duration::from_millis(7500), "300 NaN faults took {took:?}");
}

#[test]
fn faults_of_gemms_on_two_threads_reading_one_nan_are_in_call_order_and_stderr_never_credits_a_later_call() {
    for _ in 0..20 {
        let run = bounded(&["order", "6"], &[("CUBLASGUARD_STDERR_LINES", "100")]);
        let t = run.trace();
        let seqs: Vec<u64> = t.faults.iter().map(|f| f.seq).collect();
        assert_eq!(seqs.len(), 12, "{}", run.stderr());
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "the trace's faults out of call order: {seqs:?}");
        // stderr: a "passed on from" note names an earlier call only.
        let stderr = run.stderr();
        for line in stderr.lines().filter(|l| l.contains("passed on from #")) {
            let this: u64 =
                line.split('#').nth(1).and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next()).and_then(|s| s.parse().ok()).expect("its number");
            let from: u64 = line
                .split("passed on from #")
                .nth(1)
                .and_then(|s| s.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|s| s.parse().ok())
                .expect("the earlier number");
            assert!(from < this, "#{this} passed on from a later call #{from}: {line}");
        }
    }
}

#[test]
fn a_fork_right_after_fifty_nan_gemms_keeps_all_fifty_faults_in_the_parents_trace() {
    // The child exits at once (exit, _exit), makes a GEMM of its own, or outlives the parent.
    for how in ["exit", "_exit", "gemm", "outlive", "exit"] {
        let run = bounded(&["fork", "50", how], &[]);
        let t = run.trace();
        assert_eq!(t.faults.len(), 50, "child {how}: the parent's trace lost faults at fork:\n{}", run.stderr());
        assert_eq!(t.summary.faults, 50, "child {how}: {}", run.stderr());
        assert!(run.stderr().contains("cublasguard: 50 fault(s)"), "child {how}: the exit line's count is the trace's: {}", run.stderr());
    }
}
