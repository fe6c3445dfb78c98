//! The guard's one-line messages go to the stderr the program started with: a private,
//! close-on-exec duplicate of fd 2 taken when the library is loaded. A daemon that later closes
//! fd 2 and opens a data file there never gets the guard's lines in its data; a closed pipe
//! never kills the program with SIGPIPE; and writing takes no lock (Rust's stderr lock, held by
//! a parent thread at a fork, would stop a child that writes).

use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

/// Not yet taken.
const UNSET: i32 = -1;
/// fd 2 was closed when the library was loaded: the guard stays silent.
const CLOSED: i32 = -2;

static FD: AtomicI32 = AtomicI32::new(UNSET);
/// The device and inode of the file the duplicate refers to: a program that closes every
/// descriptor and opens its own files may be given the duplicate's number for one of them.
static DEVICE: AtomicU64 = AtomicU64::new(0);
static INODE: AtomicU64 = AtomicU64::new(0);

/// The device and inode behind `fd`, if it is open.
fn identity(fd: i32) -> Option<(u64, u64)> {
    // SAFETY: a zeroed stat is a valid out-parameter; fstat only writes it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

/// Takes the duplicate (once, when the library is loaded), or opens CUBLASGUARD_LOG_FILE
/// instead: the lines then go there, appended (several processes of a run may share it).
pub(crate) fn keep_original() {
    let log = crate::ffi::host::process::var(crate::config::LOG_FILE_VARIABLE).filter(|p| !p.trim().is_empty());
    let mut refused = None;
    if let Some(pattern) = log {
        let path = crate::config::log_file_path(&pattern, std::process::id());
        match open_log(&path) {
            Ok(fd) => {
                take(fd);
                return;
            }
            Err(e) => refused = Some(format!("cublasguard: CUBLASGUARD_LOG_FILE='{path}' ignored: {e}; the guard's lines go to stderr")),
        }
    }
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) on fd 2 has no memory effects; a failure means fd 2 is
    // not open.
    take(unsafe { libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 3) });
    if let Some(why) = refused {
        line(&why);
    }
}

/// Makes `fd` (negative: none) the guard's lines' descriptor, remembering what it refers to.
fn take(fd: i32) {
    if let Some((device, inode)) = (fd >= 0).then(|| identity(fd)).flatten() {
        DEVICE.store(device, Ordering::SeqCst);
        INODE.store(inode, Ordering::SeqCst);
    }
    let _ = FD.compare_exchange(UNSET, if fd < 0 { CLOSED } else { fd }, Ordering::SeqCst, Ordering::SeqCst);
}

/// Opens the log file for appending: a regular file only, never through a link at its name (a
/// FIFO without a reader would block the program at load: asked without waiting, and refused).
fn open_log(path: &str) -> std::io::Result<i32> {
    let c = std::ffi::CString::new(path).map_err(|_| std::io::Error::other("a NUL byte in the path"))?;
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND | libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK;
    // SAFETY: `c` is a NUL-terminated path; open has no other memory effects.
    let fd = unsafe { libc::open(c.as_ptr(), flags, 0o600) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // Not 0, 1 or 2 (a program started with them closed): it would reopen them for its own.
    let fd = if fd < 3 {
        // SAFETY: duplicating and closing the descriptor this function opened.
        unsafe {
            let high = libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3);
            libc::close(fd);
            if high < 0 {
                return Err(std::io::Error::last_os_error());
            }
            high
        }
    } else {
        fd
    };
    // SAFETY: a zeroed stat is a valid out-parameter; fstat only writes it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above, on the descriptor just opened.
    let regular = unsafe { libc::fstat(fd, &mut st) } == 0 && st.st_mode & libc::S_IFMT == libc::S_IFREG;
    if !regular {
        // SAFETY: closing the descriptor this function opened.
        unsafe { libc::close(fd) };
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(fd)
}

/// Writes one line; never raises SIGPIPE, never blocks on a lock.
pub(crate) fn line(text: &str) {
    let fd = match FD.load(Ordering::SeqCst) {
        CLOSED => return,
        UNSET => 2, // not preloaded (the unit tests): the current stderr
        fd => fd,
    };
    // The program closed the duplicate and the number now names one of its own files: the
    // guard goes silent rather than write into it.
    if fd != 2 && identity(fd) != Some((DEVICE.load(Ordering::SeqCst), INODE.load(Ordering::SeqCst))) {
        FD.store(CLOSED, Ordering::SeqCst);
        return;
    }
    let mut bytes = Vec::with_capacity(text.len() + 1);
    bytes.extend_from_slice(text.as_bytes());
    bytes.push(b'\n');
    write_without_sigpipe(fd, &bytes);
}

fn write_without_sigpipe(fd: i32, bytes: &[u8]) {
    // SAFETY: signal-set and mask calls on local, initialised sets; write on a buffer we own.
    // SIGPIPE is blocked on this thread for the write; if the write raised one that was not
    // already pending, it is taken off again with a zero-timeout sigtimedwait, so the program
    // never sees it.
    unsafe {
        let mut pipe: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut pipe);
        libc::sigaddset(&mut pipe, libc::SIGPIPE);
        let mut old: libc::sigset_t = std::mem::zeroed();
        if libc::pthread_sigmask(libc::SIG_BLOCK, &pipe, &mut old) != 0 {
            return;
        }
        let mut pending: libc::sigset_t = std::mem::zeroed();
        libc::sigpending(&mut pending);
        let was_pending = libc::sigismember(&pending, libc::SIGPIPE) == 1;
        let mut off = 0;
        let mut broken = false;
        while off < bytes.len() {
            let n = libc::write(fd, bytes[off..].as_ptr() as *const libc::c_void, bytes.len() - off);
            if n > 0 {
                off += n as usize;
                continue;
            }
            let err = std::io::Error::last_os_error().raw_os_error();
            if n < 0 && err == Some(libc::EINTR) {
                continue;
            }
            broken = err == Some(libc::EPIPE);
            break;
        }
        if broken && !was_pending {
            let zero = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            while libc::sigtimedwait(&pipe, std::ptr::null_mut(), &zero) == libc::SIGPIPE {}
        }
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    }
}
