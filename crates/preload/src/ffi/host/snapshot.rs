//! `cublasguard snapshot PID`: a running process writes its trace when asked, and goes on. The
//! request comes on an abstract Unix socket named after the user and the pid, which a thread of
//! the guard's waits on in `accept`: no work per call, no polling, and no signal the program
//! might use itself. Only a process of the same user (or root) is answered (SO_PEERCRED); the
//! answer is the path the trace went to.
//!
//! A program that closes its descriptors (`close_range` in a daemon) closes the socket's
//! number, not the socket the thread waits on; the thread checks the number still refers to
//! its socket before it waits again, and stops when it does not. A child forked without `exec`
//! has no such thread: its parent's pid names the parent's socket.

use std::sync::atomic::{AtomicU32, Ordering};

/// The process whose thread waits (a forked child has none).
static STARTED_IN: AtomicU32 = AtomicU32::new(0);

/// Listens for snapshot requests of this process (once per process).
pub(crate) fn start() {
    let pid = std::process::id();
    if STARTED_IN.swap(pid, Ordering::SeqCst) == pid {
        return;
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let Some(fd) = listen(&crate::config::snapshot_socket_name(uid, pid)) else { return };
    let Some(identity) = super::claim::socket_identity(fd) else { return };
    // A small stack: it only formats a path and writes the trace as any fault's publication does.
    let spawned = super::thread::spawn_with_signals_blocked(|| {
        std::thread::Builder::new().name("cublasguard-snapshot".into()).stack_size(512 * 1024).spawn(move || run(fd, identity))
    });
    if spawned.is_err() {
        // SAFETY: the socket `listen` opened, used nowhere else.
        unsafe { libc::close(fd) };
    }
}

/// A listening socket bound to the abstract `name`; `None` when it cannot be made (the name is
/// taken: a process of this pid in another namespace, or an earlier image of this one).
fn listen(name: &str) -> Option<libc::c_int> {
    let (addr, len) = super::claim::abstract_address(name);
    // SAFETY: a fresh socket bound to a valid address of `len` bytes, closed on failure;
    // close-on-exec, so a new image listens afresh.
    unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return None;
        }
        if libc::bind(fd, &addr as *const libc::sockaddr_un as *const libc::sockaddr, len) != 0 || libc::listen(fd, 4) != 0 {
            libc::close(fd);
            return None;
        }
        Some(fd)
    }
}

fn run(fd: libc::c_int, identity: (u64, u64)) {
    // The trace's writing may ask the CUDA libraries their versions: untouched by the hooks.
    let _inside = crate::ffi::intercept::reentry::Reentry::enter();
    while super::claim::socket_identity(fd) == Some(identity) {
        // SAFETY: accept on the listening socket; no address wanted.
        let conn = unsafe { libc::accept4(fd, std::ptr::null_mut(), std::ptr::null_mut(), libc::SOCK_CLOEXEC) };
        if conn < 0 {
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return;
        }
        let answer = std::panic::catch_unwind(|| answer(peer_uid(conn))).unwrap_or_else(|_| "failed: the guard could not write the trace\n".into());
        // SAFETY: writes from a live buffer to the accepted connection, then closes it (the
        // requester may be gone: MSG_NOSIGNAL keeps that from raising SIGPIPE here).
        unsafe {
            libc::send(conn, answer.as_ptr().cast(), answer.len(), libc::MSG_NOSIGNAL);
            libc::close(conn);
        }
    }
}

/// The user of the process at the other end of `conn`.
fn peer_uid(conn: libc::c_int) -> Option<libc::uid_t> {
    // SAFETY: ucred is plain data; getsockopt writes at most `size` bytes into it.
    unsafe {
        let mut cred: libc::ucred = std::mem::zeroed();
        let mut size = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        let asked = libc::getsockopt(conn, libc::SOL_SOCKET, libc::SO_PEERCRED, &mut cred as *mut libc::ucred as *mut libc::c_void, &mut size);
        (asked == 0).then_some(cred.uid)
    }
}

/// Writes the trace for a requester of user `uid`: "written PATH", or why not, one line.
fn answer(uid: Option<libc::uid_t>) -> String {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let own = unsafe { libc::geteuid() };
    if uid != Some(own) && uid != Some(0) {
        return "refused: the request came from another user\n".into();
    }
    let Some(s) = super::lifecycle::existing_session() else { return "failed: the guard has no session in this process\n".into() };
    super::lifecycle::write_trace(s);
    format!("written {}\n", s.trace_path())
}
