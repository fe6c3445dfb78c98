//! Which file a process writes its trace to. A trace path is claimed by the live process that
//! writes it, so that two processes never write the same file at once (a helper started by
//! fork + exec under a fixed CUBLASGUARD_TRACE, say: the last to exit would win); and a trace
//! an earlier process of the same `cublasguard run` left at the path is never replaced (`sh -c
//! './crash; ./clean'`: the crash record must survive the clean run after it). A process that
//! must not write the path writes `-PID` beside it (then `-PID-2`, ...), which `run` reads too.
//!
//! The claim is an abstract Unix socket named after the path and the user: it takes no file,
//! and it disappears with the process that holds it. Abstract names carry no permissions, so
//! any user can bind any name: the claiming socket listens, and a name found taken counts as
//! held only when its holder is of this user (SO_PEERCRED on a connection to it). A name
//! another user's socket sits on is passed over for the next of a few slots; a process that
//! binds one also checks the others, so that two processes of this user that took different
//! slots never both keep a claim.
//!
//! A program may close the claiming socket under the guard (`close_range(3, ~0U, 0)` in a
//! daemon detaching, or in Python's `subprocess` child before `exec`): the name is then free
//! for another process to take. The socket's identity (device and inode) is remembered, and
//! before each trace write the guard checks that its descriptor still refers to it. A claim
//! found lost is made again only when no live process holds the path and the file there is
//! still the one this process wrote last; otherwise the trace moves to `-PID`, as a process
//! that found the path taken writes.

use std::io::Read as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};

use crate::config;

/// Names tried per path before giving up on a claim that other users' sockets block.
const SLOTS: u32 = 4;

/// A trace whose `process` object is not within this many bytes is not recognised as an
/// earlier process's of this run (an argv of this size is not seen in practice).
const HEAD_BYTES: u64 = 256 << 10;

static ALL_SLOTS_TAKEN: AtomicBool = AtomicBool::new(false);

/// The socket that holds this process's claim (-1: none, or none could be made and the
/// process behaves as without claims), and the device and inode it had when it was made.
/// Atomics, not a lock: a forked child claims afresh while parent threads may be anywhere.
static HELD_FD: AtomicI32 = AtomicI32::new(-1);
static HELD_DEVICE: AtomicU64 = AtomicU64::new(0);
static HELD_INODE: AtomicU64 = AtomicU64::new(0);

/// The path this process writes its trace to: `path` when this process can claim it and no
/// earlier process of this run (`run_id`) left its trace there; else the first of `-PID`,
/// `-PID-2`, ... that holds no such trace. `parents`: `path` is the trace of the process this
/// one was forked from, never this one's.
pub(crate) fn own_trace_path(path: &str, pid: u32, run_id: Option<&str>, parents: bool) -> String {
    // A claim made before (the parent's, in a forked child) is not this path's.
    HELD_FD.store(-1, Ordering::SeqCst);
    if !parents && !holds_trace_of_run(path, run_id) && claim(path) {
        return path.to_string();
    }
    let mut n = 1;
    loop {
        let candidate = config::path_with_pid_n(path, pid, n);
        // No live process shares this pid: the claim, its answer not needed, only keeps later
        // processes of this user off the name while this one lives. Names run out at 64.
        if n >= 64 || !holds_trace_of_run(&candidate, run_id) {
            claim(&candidate);
            return candidate;
        }
        n += 1;
    }
}

/// Whether the claim this process made is still held: true when it made none it can check
/// (claims could not be made here), false when the program closed the socket or put another
/// file at its number.
pub(crate) fn still_held() -> bool {
    let fd = HELD_FD.load(Ordering::SeqCst);
    fd < 0 || socket_identity(fd) == Some((HELD_DEVICE.load(Ordering::SeqCst), HELD_INODE.load(Ordering::SeqCst)))
}

/// Claims `path` again after the claim was lost; false when another live process of this
/// user holds it now.
pub(crate) fn claim_again(path: &str) -> bool {
    HELD_FD.store(-1, Ordering::SeqCst);
    claim(path)
}

/// The device and inode of the socket at `fd`, if `fd` is an open socket.
pub(crate) fn socket_identity(fd: libc::c_int) -> Option<(u64, u64)> {
    // SAFETY: a zeroed stat is a valid out-parameter; fstat only writes it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above; fstat on any number is harmless (EBADF when closed).
    let open = unsafe { libc::fstat(fd, &mut st) } == 0;
    (open && st.st_mode & libc::S_IFMT == libc::S_IFSOCK).then_some((st.st_dev, st.st_ino))
}

/// Remembers `fd` as the socket holding this process's claim.
fn remember(fd: libc::c_int) {
    if let Some((device, inode)) = socket_identity(fd) {
        HELD_DEVICE.store(device, Ordering::SeqCst);
        HELD_INODE.store(inode, Ordering::SeqCst);
        HELD_FD.store(fd, Ordering::SeqCst);
    }
}

/// Whether `path` holds a trace (or a crash record) of a process of the run `run_id`. Read as
/// the commands read a trace: never through a link, a FIFO never waited on.
fn holds_trace_of_run(path: &str, run_id: Option<&str>) -> bool {
    let Some(run_id) = run_id else { return false };
    let Ok(file) = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK).open(path) else {
        return false;
    };
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return false;
    }
    let mut head = Vec::new();
    if file.take(HEAD_BYTES).read_to_end(&mut head).is_err() {
        return false;
    }
    config::run_id_in_trace_head(&head).as_deref() == Some(run_id)
}

/// Claims `path` for this process; false when another live process of this user holds it.
fn claim(path: &str) -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let names: Vec<String> = (0..SLOTS).map(|slot| config::claim_name(path, uid, slot)).collect();
    for (slot, name) in names.iter().enumerate() {
        match bind_listening(name) {
            Bind::Held(fd) => {
                // A process of this user that took another slot (while this one was another
                // user's, or at the same moment) keeps the path, and this one lets go.
                let ours_elsewhere = names.iter().enumerate().any(|(other, n)| other != slot && held_by(n, uid));
                if ours_elsewhere {
                    // SAFETY: fd is the socket bind_listening just opened, used nowhere else.
                    unsafe { libc::close(fd) };
                    return false;
                }
                remember(fd);
                return true;
            }
            Bind::InUse if held_by(name, uid) => return false,
            Bind::InUse => continue,     // another user's socket: not a claim
            Bind::Failed => return true, // cannot tell: behave as without claims
        }
    }
    crate::ffi::host::lifecycle::warn_once(
        &ALL_SLOTS_TAKEN,
        &format!("cublasguard: other users' sockets sit on every claim name of {path}; this process writes a file of its own beside it"),
    );
    false
}

enum Bind {
    /// Bound and listening; the socket stays open (the claim) for the life of the process.
    Held(libc::c_int),
    InUse,
    Failed,
}

/// `sockaddr_un` for an abstract name (a leading NUL), and its length.
pub(crate) fn abstract_address(name: &str) -> (libc::sockaddr_un, libc::socklen_t) {
    // SAFETY: sockaddr_un is plain data; all zeroes is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let room = addr.sun_path.len() - 1;
    for (slot, byte) in addr.sun_path.iter_mut().skip(1).zip(name.bytes().take(room)) {
        *slot = byte as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + name.len().min(room);
    (addr, len as libc::socklen_t)
}

fn bind_listening(name: &str) -> Bind {
    let (addr, len) = abstract_address(name);
    // SAFETY: a fresh socket, bound to a valid address of `len` bytes; close-on-exec, so a new
    // image claims afresh. A bound socket is kept open on purpose: it is the claim.
    unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Bind::Failed;
        }
        if libc::bind(fd, &addr as *const libc::sockaddr_un as *const libc::sockaddr, len) != 0 {
            let in_use = std::io::Error::last_os_error().raw_os_error() == Some(libc::EADDRINUSE);
            libc::close(fd);
            return if in_use { Bind::InUse } else { Bind::Failed };
        }
        // Listening is what lets another process ask who holds the name. Nothing accepts: a
        // connection that asked waits in the queue, which only a full queue makes refuse.
        if libc::listen(fd, libc::SOMAXCONN) != 0 {
            libc::close(fd);
            return Bind::Failed;
        }
        Bind::Held(fd)
    }
}

/// Whether a listening socket of user `uid` holds the abstract `name`. A holder whose queue of
/// unanswered connections is full counts as this user's: at worst this process writes a file
/// of its own, never one another process writes.
fn held_by(name: &str, uid: libc::uid_t) -> bool {
    let (addr, len) = abstract_address(name);
    // SAFETY: a fresh non-blocking socket connected to a valid address; ucred is plain data
    // and getsockopt writes at most `size` bytes into it; the socket is closed before return.
    unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK, 0);
        if fd < 0 {
            return false;
        }
        let held = if libc::connect(fd, &addr as *const libc::sockaddr_un as *const libc::sockaddr, len) == 0 {
            let mut cred: libc::ucred = std::mem::zeroed();
            let mut size = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
            let asked = libc::getsockopt(fd, libc::SOL_SOCKET, libc::SO_PEERCRED, &mut cred as *mut libc::ucred as *mut libc::c_void, &mut size);
            asked == 0 && cred.uid == uid
        } else {
            std::io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN)
        };
        libc::close(fd);
        held
    }
}
