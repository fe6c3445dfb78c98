//! Files the guard writes beside the program's own (operand dumps): whole or absent, never
//! replacing anything, never through a symlink.

use std::io::Write;

/// How many names past the first are tried (`-2`, `-3`, ...) before giving up.
const NAME_TRIES: u32 = 1000;

/// Writes a new file in `dir` and returns its path: `NAME.EXT`, or `NAME-2.EXT`
/// and on when that is taken (another run with the same pid, as every container's first
/// process is pid 1, wrote into the same folder). The bytes go to a temporary file of our own
/// beside it (mode 0600, `O_EXCL`, never through a symlink), are synced, and only then take
/// the final name, without replacing anything there: a file with such a name is always
/// whole, whatever stops the writing (a full disk, SIGKILL). On failure the temporary
/// file is removed.
pub(crate) fn create(
    dir: &str,
    name: &str,
    extension: &str,
    fill: &mut dyn FnMut(&mut std::io::BufWriter<&std::fs::File>) -> std::io::Result<()>,
) -> std::io::Result<String> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let (tmp, file) = {
        let mut tries = 0;
        loop {
            let tmp = format!("{dir}/.{name}.{:016x}.tmp", random_tag());
            let opened = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC).open(&tmp);
            match opened {
                Ok(file) => break (tmp, file),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && tries < 8 => tries += 1,
                Err(e) => return Err(e),
            }
        }
    };
    let result = (|| {
        let mut out = std::io::BufWriter::with_capacity(1 << 20, &file);
        fill(&mut out)?;
        out.flush()?;
        drop(out);
        file.sync_all()?;
        for n in 1..=NAME_TRIES {
            let path = if n == 1 { format!("{dir}/{name}.{extension}") } else { format!("{dir}/{name}-{n}.{extension}") };
            match place(&tmp, &path) {
                Ok(()) => return Ok(path),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::other(format!("{NAME_TRIES} dumps of that name are already there")))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Gives `tmp` the name `path` unless something has it already (`AlreadyExists` then):
/// renameat2(RENAME_NOREPLACE), or, on a filesystem without it, a hard link and an unlink.
fn place(tmp: &str, path: &str) -> std::io::Result<()> {
    let (Ok(from), Ok(to)) = (std::ffi::CString::new(tmp), std::ffi::CString::new(path)) else {
        return Err(std::io::Error::other("a path holds a NUL byte"));
    };
    // SAFETY: renameat2 with two NUL-terminated paths that outlive the call, relative to the
    // working folder (both are absolute or both relative to it, as `dir` was given). Called
    // through syscall(), so the library needs no newer glibc than it does already.
    let renamed = unsafe { libc::syscall(libc::SYS_renameat2, libc::AT_FDCWD, from.as_ptr(), libc::AT_FDCWD, to.as_ptr(), libc::RENAME_NOREPLACE) };
    if renamed == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    if !matches!(e.raw_os_error(), Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP)) {
        return Err(e);
    }
    std::fs::hard_link(tmp, path)?;
    std::fs::remove_file(tmp)
}

/// 64 unpredictable bits for a temporary name (getrandom; the clock and a counter if that fails).
fn random_tag() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut tag = 0u64;
    // SAFETY: getrandom writes at most 8 bytes into `tag`, which lives across the call;
    // GRND_NONBLOCK: never wait for entropy.
    let got = unsafe { libc::syscall(libc::SYS_getrandom, (&raw mut tag).cast::<libc::c_void>(), 8usize, libc::GRND_NONBLOCK) };
    if got != 8 {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0);
        tag = now ^ (u64::from(std::process::id()) << 32) ^ NEXT.fetch_add(1, Ordering::Relaxed).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    tag
}
