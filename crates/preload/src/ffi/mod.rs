//! The FFI edge, grouped by role. All `unsafe` in the crate lives under this module.
//! - `intercept`: what the program's calls go through: the exported hooks, `dlsym` and the
//!   driver's entry-point lookups, finding the real functions, the re-entry guard.
//! - `cuda_client`: the calls the guard itself makes into CUDA (typed tables, device queries,
//!   the on-device scan).
//! - `host`: the process around the program: load and fork, the crash writer, stderr, claims on
//!   trace files, the process's description and environment, Python frames, backtraces, threads.
//!
//! Nothing under `guard`, `check` or `session` imports from here; they reach the edge only
//! through what `Call` carries (the `Device`, `Outlet` and `Caller` traits, the scan buffer) and get values
//! decoded here, never pointers to read (tests/suite/layers.rs checks).

// In the crate's own unit-test build the hooks are not exported (`cfg_attr(not(test),
// no_mangle)`, so the test binary does not interpose on itself), which leaves most of this layer
// unreachable there; the library build checks it for dead code as usual.
#![cfg_attr(test, allow(dead_code))]

pub(crate) mod cuda_client;
pub(crate) mod host;
pub(crate) mod intercept;
