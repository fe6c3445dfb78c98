//! Services of the process the guard lives in: its load, forks and exit, the crash writer,
//! stderr, trace-file claims, its description and environment, Python frames, backtraces, threads,
//! the GPU's health (NVML, the kernel log), the thread that judges deferred verdicts, and the
//! one that writes the trace when `cublasguard snapshot` asks, and the hang watchdog.

pub(crate) mod backtrace;
pub(crate) mod call_site;
pub(crate) mod claim;
pub(crate) mod crash;
pub(crate) mod environment;
pub(crate) mod files;
pub(crate) mod harvester;
pub(crate) mod kernel_log;
pub(crate) mod lifecycle;
pub(crate) mod nvml;
pub mod process;
pub(crate) mod python;
pub(crate) mod python_internals;
pub(crate) mod snapshot;
pub(crate) mod stderr;
pub(crate) mod stopwatch;
pub(crate) mod thread;
pub(crate) mod watchdog;
