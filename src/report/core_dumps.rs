//! The GPU core dumps a traced process's driver was asked for (`cublasguard run
//! --gpu-coredump`): where the driver writes them, the files found there, and the cuda-gdb
//! command that opens one.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::load::Loaded;
use crate::escape::shell_word;
use crate::run::gpu_coredump::{COREDUMP_ENABLE, COREDUMP_FILE};
use crate::run::trace_names::matches_pattern;

/// A GPU core dump the driver was asked for in a traced process: its environment, as the trace
/// recorded it, held CUDA_ENABLE_COREDUMP_ON_EXCEPTION=1 (`cublasguard run --gpu-coredump`
/// sets it, with CUDA_COREDUMP_FILE beside the trace).
#[derive(Debug, Serialize)]
pub struct CoreDump<'a> {
    pub trace: &'a Path,
    pub pid: u32,
    /// CUDA_COREDUMP_FILE with the pid and host filled in (`*` for the driver's %t); None when
    /// it was not set (the driver's default name, in the program's working folder).
    pub pattern: Option<String>,
    /// The core files written, found on disk.
    pub files: Vec<PathBuf>,
    /// The command that opens the first of them.
    pub command: Option<String>,
}

/// `cuda-gdb -ex "target cudacore FILE"`: quoted for a shell.
pub fn cuda_gdb_command(file: &Path) -> String {
    let shown = file.display().to_string();
    if shown.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+:,=@%".contains(c)) {
        format!("cuda-gdb -ex \"target cudacore {shown}\"")
    } else {
        format!("cuda-gdb -ex {}", shell_word(&format!("target cudacore {shown}")))
    }
}

/// The driver's name for a core file, as it expands CUDA_COREDUMP_FILE: %p the pid, %h the host,
/// %t the time (unknown here: `*`), %% a percent sign.
fn expand_core_pattern(pattern: &str, pid: u32, host: &str) -> String {
    cublasguard_format::config::expand_percent(pattern, |letter| match letter {
        'p' => Some(pid.to_string()),
        'h' => Some(host.to_string()),
        't' => Some("*".to_string()),
        _ => None,
    })
}

fn glob_files(pattern: &Path) -> Vec<PathBuf> {
    let text = pattern.display().to_string();
    if !text.contains('*') {
        return if pattern.is_file() { vec![pattern.to_path_buf()] } else { Vec::new() };
    }
    let (Some(dir), Some(name)) = (pattern.parent(), pattern.file_name().and_then(|n| n.to_str())) else { return Vec::new() };
    // The trace-name matcher reads %p as "anything": the only wildcard the expansion left is %t's.
    let glob = name.replace('%', "%%").replace('*', "%p");
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut found: Vec<PathBuf> =
        entries.filter_map(|e| e.ok()).filter(|e| e.file_name().to_str().is_some_and(|n| matches_pattern(&glob, n))).map(|e| e.path()).collect();
    found.sort();
    found
}

pub fn core_dumps(loaded: &[Loaded]) -> Vec<CoreDump<'_>> {
    let mut out = Vec::new();
    for l in loaded {
        let vars = &l.trace.environment.variables;
        if vars.get(COREDUMP_ENABLE).map(|v| v.trim()) != Some("1") {
            continue;
        }
        let process = &l.trace.process;
        let pattern = vars.get(COREDUMP_FILE).filter(|f| !f.is_empty()).map(|f| {
            let expanded = expand_core_pattern(f, process.pid, &process.hostname);
            // A relative name is the program's working folder's: the trace's is the best guess.
            match l.path.parent() {
                Some(dir) if Path::new(&expanded).is_relative() => dir.join(&expanded).display().to_string(),
                _ => expanded,
            }
        });
        let files = pattern.as_deref().map(|p| glob_files(Path::new(p))).unwrap_or_default();
        let command = files.first().map(|f| cuda_gdb_command(f));
        out.push(CoreDump { trace: &l.path, pid: process.pid, pattern, files, command });
    }
    out
}
