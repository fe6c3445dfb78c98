//! A file the command reads because a trace or a dump names it (a source file, a dump) opened only
//! if it is a regular file under a size cap: never a FIFO, a device or a folder, whose reads
//! would block or never end.

use std::path::Path;

/// `path` opened for reading only if it is a regular file of at most `cap` bytes: checked
/// before the open, opened with `O_NONBLOCK` (a FIFO that appears in between cannot block the
/// open) and checked again on the open file, so a FIFO, a device or a folder is never read.
pub fn open_regular(path: &Path, cap: u64) -> Result<std::fs::File, String> {
    use std::os::unix::fs::OpenOptionsExt;
    let check = |m: std::fs::Metadata| -> Result<(), String> {
        if !m.is_file() {
            return Err("not a regular file".into());
        }
        if m.len() > cap {
            return Err(format!("{} bytes, more than the {cap} read at most", m.len()));
        }
        Ok(())
    };
    check(std::fs::metadata(path).map_err(|e| e.to_string())?)?;
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path).map_err(|e| e.to_string())?;
    check(file.metadata().map_err(|e| e.to_string())?)?;
    Ok(file)
}
