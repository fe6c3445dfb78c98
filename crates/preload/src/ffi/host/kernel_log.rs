//! The kernel log's Xid lines that name this process (`NVRM: Xid (PCI:...): 13, pid=...`),
//! read at a fault without blocking: `/dev/kmsg` gives one record per read and EAGAIN at its
//! end; a file of dmesg lines (CUBLASGUARD_KERNEL_LOG) reads to its end. Where
//! `kernel.dmesg_restrict=1` the log needs CAP_SYSLOG: then a note says why it was not read.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;

use crate::gpu_health::{kernel_log_xid, kmsg_time_us, KernelXid};

/// Enough for the kernel's whole ring buffer at its largest common size.
const MAX_BYTES: usize = 32 << 20;
/// Lines kept (the first ones: the first Xid is the one that matters).
const MAX_LINES: usize = 16;

/// The Xid lines naming `pid` in the log at `path` (records from before `since_us` on the
/// monotonic clock, when they carry a time, are another run's), or why none could be read.
pub(crate) fn xids(path: &str, pid: u32, since_us: u64) -> (Vec<KernelXid>, Option<String>) {
    // Where dmesg_restrict is set, /dev/kmsg opens but refuses the read.
    let unreadable = |e: &std::io::Error| {
        (e.kind() == std::io::ErrorKind::PermissionDenied)
            .then(|| format!("{path} is not readable ({e}): with kernel.dmesg_restrict=1 the kernel log needs CAP_SYSLOG"))
    };
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC).open(path);
    let mut file = match file {
        Ok(f) => f,
        Err(e) => return (Vec::new(), Some(unreadable(&e).unwrap_or_else(|| format!("{path} not read: {e}")))),
    };
    let mut found = Vec::new();
    let mut pending = String::new();
    let mut buf = vec![0u8; 8192];
    let mut total = 0usize;
    let mut note = None;
    let take = |line: &str, found: &mut Vec<KernelXid>| {
        if found.len() >= MAX_LINES || kmsg_time_us(line).is_some_and(|t| t < since_us) {
            return;
        }
        if let Some(x) = kernel_log_xid(line, pid) {
            found.push(x);
        }
    };
    while total < MAX_BYTES {
        match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                total += n;
                pending.push_str(&String::from_utf8_lossy(&buf[..n]));
                while let Some(end) = pending.find('\n') {
                    let line: String = pending.drain(..=end).collect();
                    take(line.trim_end(), &mut found);
                }
            }
            // /dev/kmsg's end.
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            // /dev/kmsg: records were overwritten while reading; the next read goes on.
            Err(e) if e.raw_os_error() == Some(libc::EPIPE) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                note = Some(unreadable(&e).unwrap_or_else(|| format!("{path} not read to its end: {e}")));
                break;
            }
        }
    }
    if !pending.is_empty() {
        take(pending.trim_end(), &mut found);
    }
    (found, note)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xid_lines_of_this_pid_are_found_in_a_file_of_dmesg_lines() {
        let dir = std::env::temp_dir().join(format!("cublasguard-kernel-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("dmesg.txt");
        std::fs::write(
            &path,
            "[  1.0] usb 1-1: new device\n[ 812.1] NVRM: Xid (PCI:0000:01:00): 13, pid=4242, name=python3, Graphics Exception\n\
             [ 812.2] NVRM: Xid (PCI:0000:01:00): 31, pid=99, name=other\n6,77,100,-;NVRM: Xid (PCI:0000:01:00): 79, pid=4242, GPU has fallen off the bus.",
        )
        .unwrap();
        let (found, note) = xids(path.to_str().unwrap(), 4242, 0);
        assert_eq!(note, None);
        assert_eq!(found.iter().map(|x| x.xid).collect::<Vec<_>>(), [13, 79]);
        // A kmsg record from before the run began is another run's.
        let (found, _) = xids(path.to_str().unwrap(), 4242, 200);
        assert_eq!(found.iter().map(|x| x.xid).collect::<Vec<_>>(), [13]);
        let (none, note) = xids(dir.join("absent").to_str().unwrap(), 4242, 0);
        assert!(none.is_empty() && note.is_some_and(|n| n.contains("not read")));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
