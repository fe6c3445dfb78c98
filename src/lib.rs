//! cublasguard: an LD_PRELOAD guard for cuBLAS and the CUDA runtime.
//!
//! The recorder (this library, loaded into the program) records facts; the `cublasguard`
//! command interprets them. Layers: `ffi` is the C edge (hooks, real functions, the guard's
//! own CUDA calls); `check` decides what is a fault; `session`, `recorder`, `state` and
//! `trace` hold and write what was seen. Everything but `ffi` is safe Rust.

pub mod check;
pub mod config;
pub mod cuda;
pub mod ffi;
pub(crate) mod guard;
pub mod recorder;
pub mod redact;
pub mod scan;
pub mod session;
pub mod state;
pub mod trace;
pub mod validate;
