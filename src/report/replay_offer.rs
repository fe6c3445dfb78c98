//! A fault's operand dump as the report offers it: where the dump is, and whether `cublasguard
//! replay` can rerun it (asked before the command is offered).

use std::path::{Path, PathBuf};

/// Where a fault's dump is (as recorded, else beside its trace when the recorded path is
/// relative), and whether `cublasguard replay` can rerun it.
pub(super) fn replay_check(dump: &str, trace: &Path) -> (PathBuf, Result<(), String>) {
    let recorded = PathBuf::from(dump);
    let path = match trace.parent() {
        Some(dir) if recorded.is_relative() && !recorded.exists() && dir.join(&recorded).exists() => dir.join(&recorded),
        _ => recorded,
    };
    let check = crate::replay::can_replay(&path);
    (path, check)
}
