//! libcublasguard.so: an LD_PRELOAD guard for cuBLAS and the CUDA runtime.
//!
//! The recorder (this library, loaded into the program) records facts; the `cublasguard`
//! command interprets them, and both share only the format crate (`cublasguard-format`).
//! Layers: `ffi` is the C edge (hooks, real functions, the guard's own CUDA calls); `check`
//! decides what is a fault; `session` and `recorder` hold and write what was seen. Everything
//! but `ffi` is safe Rust.

// Unsafe code only under `ffi`, each operation in its own block with its reason: an `unsafe fn`
// states a contract, it does not license its body; the policy modules cannot contain any.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

// The format crate's modules under the names the guard's code has always used.
pub(crate) use cublasguard_format::{config, cuda, dump, ignore, scan, state, trace, validate};

pub(crate) mod check;
pub(crate) mod ffi;
pub(crate) mod guard;
pub(crate) mod recorder;
pub(crate) mod redact;
pub(crate) mod session;
