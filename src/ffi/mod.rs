//! The FFI edge: exported hooks, finding the real functions, and the calls the guard itself
//! makes into CUDA. All `unsafe` in the crate lives under this module.

pub mod backtrace;
pub mod crash;
pub mod device;
pub mod device_scan;
pub mod environment;
pub mod hooks;
pub mod lifecycle;
pub mod process;
pub mod real;
pub mod reentry;
