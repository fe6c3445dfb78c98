//! The asynchronous stand-in GPU (shims/engine.c): work runs on a worker thread after its
//! launch returned, in stream order; a fault breaks the context when it runs; stream memory
//! operations land in mapped pinned memory; CUDASHIM_SYNC=1 restores the synchronous model; the
//! host-blocking counter pins how often the guard blocks the host per GEMM. The programs run
//! with the worker held (CUDASHIM_WORKER_HOLD=1) until they open its gate: ordering by a gate,
//! never by a sleep.

use crate::common;

use common::*;
use std::collections::BTreeMap;

/// Runs tests/c/async_standin.c in `mode`, unguarded, and returns its "name value" lines.
fn observe(mode: &str, env: &[(&str, &str)]) -> BTreeMap<String, String> {
    let program = build_c("async_standin", &["async_standin.c"], false);
    let args = [mode];
    let run = run(Launch { env, guarded: false, ..Launch::new(&program, &args) });
    assert_eq!(run.code(), Some(0), "{}{}", run.stdout(), run.stderr());
    run.stdout().lines().filter_map(|l| l.split_once(' ').map(|(k, v)| (k.to_string(), v.to_string()))).collect()
}

fn held(mode: &str, extra: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut env = vec![("CUDASHIM_WORKER_HOLD", "1")];
    env.extend_from_slice(extra);
    observe(mode, &env)
}

fn says(seen: &BTreeMap<String, String>, name: &str, value: &str) {
    assert_eq!(seen.get(name).map(String::as_str), Some(value), "{name}: {seen:#?}");
}

#[test]
fn a_gemm_has_not_run_when_its_launch_returns_but_has_after_a_stream_synchronisation() {
    let seen = held("late", &[]);
    says(&seen, "gemm", "0");
    says(&seen, "at_return", "0");
    says(&seen, "query_outstanding", "600");
    says(&seen, "sync", "0");
    says(&seen, "after_sync", "4");
    says(&seen, "query_done", "0");
}

#[test]
fn cudashim_sync_runs_the_gemm_at_its_launch_as_the_stand_in_did_before() {
    let seen = held("late", &[("CUDASHIM_SYNC", "1")]);
    says(&seen, "at_return", "4");
    says(&seen, "query_outstanding", "0");
    says(&seen, "after_sync", "4");
}

#[test]
fn a_fault_reaches_unrelated_calls_only_once_it_has_run_and_then_sticks() {
    let seen = held("fault", &[("CUDASHIM_ASYNC_FAULT", "1")]);
    says(&seen, "gemm", "0");
    says(&seen, "unrelated_before", "0");
    says(&seen, "malloc_before", "0");
    says(&seen, "sync", "700");
    says(&seen, "malloc_after", "700");
    says(&seen, "unrelated_after", "700");
}

#[test]
fn under_cudashim_sync_a_fault_waits_for_the_next_synchronisation_as_before() {
    let seen = held("fault", &[("CUDASHIM_ASYNC_FAULT", "1"), ("CUDASHIM_SYNC", "1")]);
    says(&seen, "unrelated_before", "0");
    says(&seen, "sync", "700");
    says(&seen, "malloc_after", "700");
}

#[test]
fn under_cudashim_sync_a_query_of_the_stream_reports_the_fault_as_a_synchronisation_does() {
    // A GPU answers a query of a stream whose kernel faulted with the fault (the guard's last
    // look at a dying program asks that way, and so do training loops).
    let seen = held("faultquery", &[("CUDASHIM_ASYNC_FAULT", "1"), ("CUDASHIM_SYNC", "1")]);
    says(&seen, "unrelated_before", "0");
    says(&seen, "query", "700");
    says(&seen, "malloc_after", "700");
}

#[test]
fn a_stream_write_lands_in_mapped_pinned_memory_after_the_work_before_it() {
    let seen = held("writevalue", &[]);
    says(&seen, "host_alloc", "0");
    says(&seen, "device_pointer", "0");
    says(&seen, "same_address", "1");
    says(&seen, "write", "0");
    says(&seen, "refused_no_barrier", "1");
    says(&seen, "word_at_return", "0");
    says(&seen, "word_seen", "7");
    says(&seen, "c_when_word_landed", "4");
    says(&seen, "sync", "0");
}

#[test]
fn a_stream_write_after_a_fault_on_its_stream_never_lands() {
    let seen = held("writevalue", &[("CUDASHIM_ASYNC_FAULT", "1")]);
    says(&seen, "write", "0");
    says(&seen, "word_seen", "0");
    says(&seen, "c_when_word_landed", "0");
    says(&seen, "sync", "700");
    says(&seen, "word_after_sync", "0");
}

#[test]
fn events_complete_in_stream_order_and_time_what_ran_between_them() {
    let seen = held("events", &[]);
    says(&seen, "query_unrecorded", "0");
    says(&seen, "query_outstanding", "600");
    says(&seen, "elapsed_outstanding", "600");
    says(&seen, "event_sync", "0");
    says(&seen, "c_after_event_sync", "4");
    says(&seen, "query_done", "0");
    says(&seen, "elapsed", "0");
    says(&seen, "elapsed_nonnegative", "1");
    says(&seen, "elapsed_untimed", "400");
    says(&seen, "destroy", "0");
    says(&seen, "destroy_again", "400");
}

#[test]
fn the_host_blocking_counter_pins_what_todays_gemm_mode_costs_per_gemm() {
    // gemm mode named: the default, deferred, blocks 0 times (breadcrumbs.rs pins that).
    const GEMM_MODE: (&str, &str) = ("CUBLASGUARD_SYNC", "gemm");
    let host = blocking_added_per_gemm(&[GEMM_MODE, ("CUBLASGUARD_DEVICE_SCAN", "off")]);
    let device = blocking_added_per_gemm(&[GEMM_MODE, ("CUBLASGUARD_DEVICE_SCAN", "on")]);
    let unchecked = blocking_added_per_gemm(&[GEMM_MODE, ("CUBLASGUARD_CHECKS", "none"), ("CUBLASGUARD_DEVICE_SCAN", "off")]);
    assert_eq!((host.0, device.0, unchecked.0), (HOST_SCAN, DEVICE_SCAN, NO_CHECKS), "per GEMM: host scan, device scan, CUBLASGUARD_CHECKS=none");
}

// Measured on the clean scenario (2 GEMMs), guarded minus bare. Host scan: 11
// cudaStreamSynchronize and 7 cudaMemcpyAsync into pageable memory over the 2 GEMMs. Device
// scan: 4 cudaStreamSynchronize, 11 cuMemcpyDtoHAsync_v2 into pageable memory, and the kernel's
// one-time self-test (7 cuMemcpyHtoD_v2, 2 cuMemFree_v2), shared by the 2 GEMMs.
const HOST_SCAN: u64 = 9;
const DEVICE_SCAN: u64 = 12;
const NO_CHECKS: u64 = 0;
