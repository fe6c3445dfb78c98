//! A trace path is claimed by the live process that writes it, so that two processes of one
//! run never write the same file (a helper started by fork + exec under a fixed
//! CUBLASGUARD_TRACE, say: the last to exit would win). The claim is an abstract Unix socket
//! named after the path: it takes no file, and it disappears with the process that holds it.

use std::hash::{Hash, Hasher};

/// Claims `path` for this process; false when another live process holds it.
pub(crate) fn claim(path: &str) -> bool {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    path.hash(&mut hasher);
    let name = format!("cublasguard-trace-{:016x}", hasher.finish());
    // SAFETY: a zeroed sockaddr_un with an abstract name (leading NUL) that fits sun_path; the
    // socket is close-on-exec, so a new image claims afresh, and it stays open (the claim) for
    // the life of the process.
    unsafe {
        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return true; // cannot tell: behave as before
        }
        let mut addr: libc::sockaddr_un = std::mem::zeroed();
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (slot, byte) in addr.sun_path.iter_mut().skip(1).zip(name.bytes()) {
            *slot = byte as libc::c_char;
        }
        let len = (std::mem::size_of::<libc::sa_family_t>() + 1 + name.len()) as libc::socklen_t;
        if libc::bind(fd, &addr as *const libc::sockaddr_un as *const libc::sockaddr, len) == 0 {
            return true;
        }
        let in_use = std::io::Error::last_os_error().raw_os_error() == Some(libc::EADDRINUSE);
        libc::close(fd);
        !in_use
    }
}
