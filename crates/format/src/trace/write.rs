//! Writing a trace: atomically, beside the old one, never through what is not a regular file.

use super::*;

/// Writes `trace` to `path` atomically: a temporary file beside it, then a rename, so a
/// reader never sees half a trace. The file is created mode 0600. Anything at `path` that is
/// not a regular file (a device such as /dev/null, a FIFO, a symlink, a folder) is refused,
/// never replaced.
pub fn write_atomic(path: &Path, trace: &Trace) -> std::io::Result<()> {
    write_atomic_with(path, trace, || Some(()))
}

/// `write_atomic`, renaming only while `ticket` grants it (held across the rename); without a
/// ticket the trace is left as it is and the call succeeds.
pub fn write_atomic_with<T>(path: &Path, trace: &Trace, ticket: impl FnOnce() -> Option<T>) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    refuse_special_file(path)?;
    let bytes = serde_json::to_vec_pretty(trace).map_err(std::io::Error::other)?;
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    path.file_name().ok_or_else(|| std::io::Error::other("trace path has no file name"))?;
    // Short, whatever the trace's own name: a 255-byte trace name must still be writable.
    let tmp = dir.join(format!(".cgt-{}-{}.tmp", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)));
    // A fresh file of our own (O_EXCL, never through a symlink), then renamed over the final
    // path: rename replaces whatever is there, a symlink included, without following it.
    let open = || std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(&tmp);
    let result = (|| {
        let mut file = match open() {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                std::fs::remove_file(&tmp)?; // left by an earlier process with our pid
                open()?
            }
            // A folder named for the trace that does not exist yet is made, not a reason to
            // lose the faults.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::create_dir_all(dir)?;
                open()?
            }
            other => other?,
        };
        file.write_all(&bytes)?;
        file.write_all(b"\n")?;
        file.sync_data()?;
        match ticket() {
            Some(_held) => std::fs::rename(&tmp, path),
            None => std::fs::remove_file(&tmp),
        }
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Only a regular file (or nothing) at the trace path may be replaced.
fn refuse_special_file(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_file() => Err(std::io::Error::other(format!(
            "{} exists and is not a regular file (a {}); the trace is not written there",
            path.display(),
            if m.file_type().is_symlink() {
                "symbolic link"
            } else if m.is_dir() {
                "folder"
            } else {
                "device, FIFO or socket"
            }
        ))),
        _ => Ok(()),
    }
}
