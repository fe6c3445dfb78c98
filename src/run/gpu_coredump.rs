//! `cublasguard run --gpu-coredump`: the driver's core dump variables, set for the command where
//! the user did not set them, a light dump beside the trace; `cublasguard report` reads them back
//! from a trace's environment.

use std::path::Path;
use std::process::Command;

use crate::escape::escape_controls;

/// What `--gpu-coredump` asks the driver for: a core dump at a GPU exception (an illegal
/// address, a trap), without the memory (global, shared, local) and the images of modules not
/// relocated at run time, which make a full dump gigabytes; what remains names the kernel, its
/// block, thread and PC for cuda-gdb.
pub const COREDUMP_ENABLE: &str = "CUDA_ENABLE_COREDUMP_ON_EXCEPTION";

pub const COREDUMP_FLAGS: &str = "CUDA_COREDUMP_GENERATION_FLAGS";

pub const COREDUMP_FILE: &str = "CUDA_COREDUMP_FILE";

pub const LIGHT_COREDUMP_FLAGS: &str = "skip_nonrelocated_elf_images,skip_global_memory,skip_shared_memory,skip_local_memory";

/// The core file beside the trace, one per process: the driver expands %h (host) and %p (pid).
pub fn coredump_file(pattern: &str) -> String {
    let dir = Path::new(pattern).parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    dir.join("cublasguard-gpucore-%h-%p.nvcudmp").display().to_string()
}

/// The driver's core dump variables for `cmd`, each kept where the user set it already; says
/// on stderr what the driver will do.
pub(super) fn set_coredump_variables(cmd: &mut Command, pattern: &str) {
    let file = coredump_file(pattern);
    let mut kept = Vec::new();
    for (var, value) in [(COREDUMP_ENABLE, "1"), (COREDUMP_FLAGS, LIGHT_COREDUMP_FLAGS), (COREDUMP_FILE, file.as_str())] {
        match std::env::var(var) {
            Ok(given) if !given.is_empty() && var != COREDUMP_ENABLE => kept.push(format!("{var}={}", escape_controls(&given))),
            _ => {
                cmd.env(var, value);
            }
        }
    }
    let file = std::env::var(COREDUMP_FILE).ok().filter(|f| !f.is_empty()).unwrap_or(file);
    eprintln!(
        "cublasguard: --gpu-coredump: at a GPU exception the driver writes a GPU core dump to {} (%h host, %p pid) and stops the program there (it aborts: SIGABRT); `cublasguard report` then names the file and the cuda-gdb command that opens it",
        escape_controls(&file)
    );
    if !kept.is_empty() {
        eprintln!("cublasguard: --gpu-coredump: kept as set: {}", kept.join(", "));
    }
}
