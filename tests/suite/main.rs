//! The integration tests, one binary: each module runs real programs (C against the stand-in
//! CUDA stack, PyTorch, JAX, the command) under the guard and asserts on their traces. One
//! binary links once; `cargo test --release --test suite MODULE::` runs one module's tests.
//! The stress tests run where CUBLASGUARD_STRESS is set (CI sets it; build.rs), and are
//! listed as ignored elsewhere.

mod common;

mod async_standin;
mod blas_family;
mod breadcrumbs;
mod cli;
mod cudnn;
mod cupy;
mod deferred_verdicts;
mod descriptors;
mod device_scan;
mod doctor;
mod doctor_health;
mod driver_launches;
mod dumps;
mod examples;
mod first_hour;
mod fork_faults;
mod fuzz_validator;
mod gemm_family;
mod gpu_health;
mod graphs;
mod guard;
mod hang;
mod hardening_dumps;
mod hardening_loader;
mod hardening_python;
mod hardening_replay;
mod hardening_round_three;
mod hardening_run;
mod hardening_secrets;
mod hardening_signals;
mod init_causes;
mod jax;
mod launcher;
mod launches;
mod layers;
mod nan_origin;
mod nvidia;
mod nvmath;
mod nvml_standin;
mod parity;
mod python_shutdown;
mod pytorch;
mod reach;
mod readme;
mod report;
mod robustness;
mod run_cli;
mod scan_order;
mod schema;
mod snapshot;
mod standin;
