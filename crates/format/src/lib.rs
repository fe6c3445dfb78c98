//! What the preload library and the `cublasguard` command share, and nothing that runs inside
//! a guarded program's calls: the trace schema (its writer and its reader), the dump format,
//! CUDA's values and their decoding, the configuration, and the pure argument and extent rules.
//! The tables the guard keeps while the program runs (handles, allocations) are the guard's
//! own (crates/preload/src/state.rs). Safe Rust only.
#![cfg_attr(not(test), forbid(unsafe_code))]

pub mod config;
pub mod cuda;
pub mod dump;
pub mod gpu_health;
pub mod ignore;
pub mod scan;
pub mod trace;
pub mod validate;

/// "0.4.0 (git 1a2b3c4d5e6f)" from a clone, "0.4.0" from a source archive (build.rs).
pub const VERSION_LABEL: &str = env!("CUBLASGUARD_VERSION_LABEL");
