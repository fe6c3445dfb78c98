//! What the program's calls go through on their way to CUDA.

pub(crate) mod dl;
pub(crate) mod entry_points;
pub(crate) mod hooks;
pub(crate) mod loader_gate;
pub(crate) mod out_param;
pub(crate) mod real;
pub(crate) mod reentry;
