//! cublasguard: an LD_PRELOAD guard for cuBLAS and the CUDA runtime.
//!
//! The recorder (this library, loaded into the program) records facts; the `cublasguard`
//! command interprets them. Layers: `ffi` is the C edge (hooks, real functions, the guard's
//! own CUDA calls); `check` decides what is a fault; `session`, `recorder`, `state` and
//! `trace` hold and write what was seen. Everything but `ffi` is safe Rust.

//!
//! Public (the library's API, for the `cublasguard` command, the tests, the benches and the
//! fuzz target): the trace schema, the configuration, CUDA's types, the argument rules, the
//! scan and the allocation table. Everything else is the guard's own.

pub(crate) mod check;
pub mod config;
pub mod cuda;
pub mod dump;
pub(crate) mod ffi;
pub(crate) mod guard;
pub(crate) mod ignore;
pub(crate) mod recorder;
pub(crate) mod redact;
pub mod scan;
pub(crate) mod session;
pub mod state;
pub mod trace;
pub mod validate;

pub use ffi::lifecycle::pass_through_in_this_process;

/// This machine's name, as traces record it.
pub use ffi::process::hostname;
