//! The stand-in NVML (shims/nvml.c) answers as its knobs say: Xid and double-bit ECC events in
//! order, to the devices a set registered, after a delay; ECC counts that grow after N reads;
//! an init error. A program (tests/c/nvml_probe.c) asks it by dlopen, as the guard will.

use crate::common;

use common::*;
use std::process::Command;

fn probe(args: &[&str], env: &[(&str, &str)]) -> Vec<String> {
    let program = build_c("nvml_probe", &["nvml_probe.c"], false);
    let s = standin();
    let mut cmd = Command::new(program);
    cmd.args(args).env_clear().env("LD_LIBRARY_PATH", s.join("nvml"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("nvml_probe");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    stdout.lines().map(str::to_string).collect()
}

#[test]
fn injected_xid_and_double_bit_events_arrive_in_order_on_their_devices() {
    let env = [("CUDASHIM_DEVICE_COUNT", "2"), ("CUDASHIM_NVML_XID", "79,dbe,1:13")];
    assert_eq!(
        probe(&["events"], &env),
        ["event type 8 data 79 device 0", "event type 2 data 0 device 0", "event type 8 data 13 device 1", "timeout", "timeout"]
    );
    // A device the set did not register for gets no events delivered to it.
    assert_eq!(probe(&["events", "1"], &env), ["event type 8 data 79 device 0", "event type 2 data 0 device 0", "timeout", "timeout"]);
    // None injected: every wait times out.
    assert_eq!(probe(&["events"], &[]), ["timeout", "timeout"]);
}

#[test]
fn a_delayed_event_comes_after_the_first_waits_time_out() {
    // 300 ms: the first 100 ms wait times out, and six in a row are more than the delay.
    let lines = probe(&["events", "1", "6"], &[("CUDASHIM_NVML_XID", "48"), ("CUDASHIM_NVML_XID_DELAY_MS", "300")]);
    assert_eq!(lines.first().map(String::as_str), Some("timeout"), "{lines:?}");
    assert!(lines.contains(&"event type 8 data 48 device 0".to_string()), "{lines:?}");
}

#[test]
fn ecc_counts_grow_after_the_given_number_of_reads() {
    let lines =
        probe(&["ecc", "4"], &[("CUDASHIM_NVML_ECC_UNCORRECTED", "1"), ("CUDASHIM_NVML_ECC_GROW_AFTER", "2"), ("CUDASHIM_NVML_ECC_GROW_UNCORRECTED", "3")]);
    assert_eq!(lines, ["uncorrected 1", "uncorrected 1", "uncorrected 4", "uncorrected 4"]);
}

#[test]
fn an_injected_init_error_is_what_nvml_init_returns() {
    assert_eq!(probe(&["init"], &[("CUDASHIM_NVML_INIT_ERROR", "18")]), ["init 18"]);
    assert_eq!(probe(&["init"], &[]), ["init 0"]);
}
