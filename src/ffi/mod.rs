//! The FFI edge: exported hooks, finding the real functions, and the calls the guard itself
//! makes into CUDA. All `unsafe` in the crate lives under this module.

// In the crate's own unit-test build the hooks are not exported (`cfg_attr(not(test),
// no_mangle)`, so the test binary does not interpose on itself), which leaves most of this layer
// unreachable there; the library build checks it for dead code as usual.
#![cfg_attr(test, allow(dead_code))]

pub(crate) mod backtrace;
pub(crate) mod claim;
pub(crate) mod crash;
pub(crate) mod cuda_api;
pub(crate) mod device;
pub(crate) mod device_scan;
pub(crate) mod environment;
pub(crate) mod hooks;
pub(crate) mod lifecycle;
pub(crate) mod loader_gate;
pub(crate) mod out_param;
pub mod process;
pub(crate) mod python;
pub(crate) mod real;
pub(crate) mod reentry;
pub(crate) mod stderr;
pub(crate) mod thread;
