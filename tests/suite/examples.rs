//! examples/gpt.py, the GPT-2-small-shaped training step (issue 30), on the CPU with tiny shapes
//! under the guard, as scripts/gpu-check.sh's dry run runs it: it trains, prints its lines and
//! "done", and the trace parses; with `--inject nan` the NaN reaches the loss, PyTorch raises
//! nothing and the run still ends in "done". On the CPU no cuBLAS function is called, so the
//! traces hold no cuBLAS call and no fault: what the guard finds on a GPU is gpu-check.sh's.
//!
//! Needs the virtual environment from scripts/fetch-torch.sh (as tests/suite/pytorch.rs):
//! without it these tests are ignored, with the reason, unless CUBLASGUARD_REQUIRE_TORCH=1.

use crate::common;
use crate::pytorch::{python, python_run};

use common::*;
use cublasguard_format::trace::{self, Trace};
use std::process::Output;

/// gpu-check.sh's dry-run shapes: 2 layers, d_model 64, 4 heads, 32 tokens, 2 sequences, a
/// vocabulary of 256.
const TINY: &[&str] = &["--device", "cpu", "--steps", "2", "--layers", "2", "--d-model", "64", "--heads", "4", "--seq", "32", "--batch", "2", "--vocab", "256"];

/// Runs gpt.py with the tiny shapes and `extra`, bare and under the guard; the guarded run's
/// output and trace, after checking that both printed the same and exited alike.
fn gpt(label: &str, extra: &[&str]) -> (Output, Trace) {
    let python = python();
    let script = manifest_dir().join("examples/gpt.py");
    let mut args = vec![script.to_str().unwrap()];
    args.extend_from_slice(TINY);
    args.extend_from_slice(extra);
    let bare = python_run(&python, &args, None);
    let trace_path = temp_dir(label).join("trace.json");
    let guarded = python_run(&python, &args, Some(&trace_path));
    let stderr = String::from_utf8_lossy(&guarded.stderr).into_owned();
    assert_eq!(bare.stdout, guarded.stdout, "{label}: the same lines with and without the guard\n{stderr}");
    assert_eq!(bare.status.code(), guarded.status.code(), "{label}: {stderr}");
    let t = trace::read(&trace_path).unwrap_or_else(|e| panic!("{label}: trace {}: {e}\n{stderr}", trace_path.display()));
    (guarded, t)
}

/// The loss of each "step N loss X" line, in order, checking that the steps count from 1.
fn losses(stdout: &str) -> Vec<f64> {
    let mut out = Vec::new();
    for line in stdout.lines().filter(|l| l.starts_with("step ")) {
        let words: Vec<&str> = line.split(' ').collect();
        assert!(words.len() == 4 && words[2] == "loss", "a step line: {line:?}");
        assert_eq!(words[1], (out.len() + 1).to_string(), "steps in order: {stdout}");
        out.push(words[3].parse::<f64>().unwrap_or_else(|e| panic!("{line:?}: {e}")));
    }
    out
}

/// On the CPU PyTorch calls no cuBLAS function: the guard sees CUDA probed, nothing scanned.
fn no_cublas(t: &Trace) {
    assert!(t.faults.is_empty(), "{:#?}", t.faults);
    assert!(t.summary.calls.keys().all(|k| !k.starts_with("cublas")), "{:?}", t.summary.calls);
    assert_eq!(t.summary.scanned_calls, 0);
    assert!(t.crash.is_none());
}

#[test]
#[cfg_attr(not(cublasguard_has_torch), ignore = "needs PyTorch: run scripts/fetch-torch.sh")]
fn the_gpt_example_trains_two_tiny_steps_on_the_cpu_under_the_guard_and_prints_done() {
    let (out, t) = gpt("gpt-clean", &[]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout.lines().last(), Some("done"), "{stdout}");
    let loss = losses(&stdout);
    assert_eq!(loss.len(), 2, "{stdout}");
    // Untrained, the model guesses near uniformly over 256 tokens; one AdamW step lowers the loss.
    assert!((loss[0] - 256f64.ln()).abs() < 0.5, "{stdout}");
    assert!(loss[1].is_finite() && loss[1] < loss[0], "{stdout}");
    no_cublas(&t);
}

#[test]
#[cfg_attr(not(cublasguard_has_torch), ignore = "needs PyTorch: run scripts/fetch-torch.sh")]
fn a_nan_injected_into_the_gpt_examples_embeddings_on_the_cpu_raises_nothing_and_the_run_still_prints_done() {
    let (out, t) = gpt("gpt-nan", &["--inject", "nan"]);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stdout.lines().last(), Some("done"), "{stdout}");
    let loss = losses(&stdout);
    assert!(loss.len() == 2 && loss.iter().all(|l| l.is_nan()), "the NaN reaches the loss at every step: {stdout}");
    no_cublas(&t);
}
