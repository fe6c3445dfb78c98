//! Facts about this process, gathered once: identity, rank, time, thread ids.

use crate::config;
use crate::ffi::host::thread::PER_THREAD;
use crate::trace::Process;

/// Set-uid/set-gid processes get no configuration and write nothing (`secure_getenv`). Asked
/// on every hooked call: the answer is fixed for the life of the image, so it is kept.
pub fn is_privileged() -> bool {
    use std::sync::atomic::{AtomicU8, Ordering};
    static SECURE: AtomicU8 = AtomicU8::new(0); // 0: not asked yet, 1: no, 2: yes
    match SECURE.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            // SAFETY: getauxval has no preconditions.
            let secure = unsafe { libc::getauxval(libc::AT_SECURE) != 0 };
            SECURE.store(if secure { 2 } else { 1 }, Ordering::Relaxed);
            secure
        }
    }
}

/// `getenv` with `secure_getenv` semantics.
pub fn var(name: &str) -> Option<String> {
    if is_privileged() {
        return None;
    }
    std::env::var(name).ok()
}

/// Set at load by the first guarded process of a process tree that has no run id, and inherited
/// by every process it starts: the processes one command line started (`sh -c './a; ./b'`, a
/// launcher and its workers) are one run, as under `cublasguard run`, so a later one never
/// replaces an earlier one's trace under a fixed path; a rerun from the user's shell is a new run.
pub const TREE_ID: &str = "CUBLASGUARD_TREE_ID";

/// Gives this process tree its run id unless it has one (`cublasguard run`'s, or an ancestor's).
/// Called from the library's load-time constructor only when it is preloaded, before the
/// program's `main`: no thread of the program can be reading the environment yet.
pub fn adopt_tree_id() {
    if is_privileged() || var("CUBLASGUARD_RUN_ID").is_some_and(|v| !v.is_empty()) || var(TREE_ID).is_some_and(|v| !v.is_empty()) {
        return;
    }
    let id = format!("{:x}-{:x}\0", std::process::id(), now_ns());
    // SAFETY: setenv with NUL-terminated name and value (it copies both), without overwriting;
    // single-threaded at this point (see above).
    unsafe { libc::setenv(c"CUBLASGUARD_TREE_ID".as_ptr(), id.as_ptr() as *const libc::c_char, 0) };
}

static START_DIR: std::sync::OnceLock<Option<std::path::PathBuf>> = std::sync::OnceLock::new();

/// Remembers the working folder as the process started (called when the library is loaded,
/// before the program's `main` can change it).
pub fn remember_start_dir() {
    let _ = start_dir();
}

/// The folder the process started in: where a relative trace path, the program's relative
/// name and a library found through a relative LD_LIBRARY_PATH entry are meant from.
pub fn start_dir() -> Option<std::path::PathBuf> {
    START_DIR.get_or_init(|| std::env::current_dir().ok()).clone()
}

/// `path` as an absolute path: the loader names the program as it was started and libraries
/// as found through LD_LIBRARY_PATH, both possibly relative to the start folder.
pub fn absolute_object_path(path: &str) -> String {
    if path.is_empty() || path.starts_with('/') {
        return path.to_string();
    }
    match start_dir() {
        Some(dir) => {
            let joined = dir.join(path);
            // "./a/../b" reads better as "/start/b"; the file exists (the loader mapped it).
            std::fs::canonicalize(&joined).unwrap_or(joined).to_string_lossy().into_owned()
        }
        None => path.to_string(),
    }
}

pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: buf is writable for its length.
    let ok = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len()) } == 0;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    match std::str::from_utf8(&buf[..end]) {
        Ok(name) if ok && !name.is_empty() => name.to_string(),
        _ => "unknown-host".into(),
    }
}

#[inline(always)]
pub fn now_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

/// `clock`'s time in nanoseconds (0: the clock cannot be read, or reads before its epoch).
#[inline(always)]
pub(crate) fn clock_ns(clock: libc::clockid_t) -> u64 {
    // clock_gettime itself, not SystemTime: read on every guarded call, and std's conversion
    // through Duration cost more than the clock (BENCHMARKS.md, issue 27).
    // Not zeroed first: two stores on every guarded call for nothing.
    let mut ts = std::mem::MaybeUninit::<libc::timespec>::uninit();
    // SAFETY: a local out-parameter; an unknown clock id is refused with an error.
    if unsafe { libc::clock_gettime(clock, ts.as_mut_ptr()) } != 0 {
        return 0;
    }
    // SAFETY: clock_gettime returned 0, so it filled `ts`.
    let ts = unsafe { ts.assume_init() };
    if ts.tv_sec < 0 {
        return 0;
    }
    (ts.tv_sec as u64).wrapping_mul(1_000_000_000).wrapping_add(ts.tv_nsec as u64)
}

/// The kernel's id for the calling thread, asked once per thread.
pub fn thread_id() -> u32 {
    // SAFETY: gettid has no preconditions.
    PER_THREAD.try_with(thread_id_of).unwrap_or_else(|_| unsafe { libc::gettid() } as u32)
}

/// `thread_id`, for the calling thread whose block is `t`.
pub(crate) fn thread_id_of(t: &crate::ffi::host::thread::PerThread) -> u32 {
    if t.tid.get() == 0 {
        // SAFETY: gettid has no preconditions.
        t.tid.set(unsafe { libc::gettid() } as u32);
        // Asked at every guarded call, first here: the once-per-thread setup rides on it.
        crate::ffi::host::thread::first_guarded_call();
    }
    t.tid.get()
}

/// Forgets the cached thread id (the child of a fork has a new one).
pub fn reset_thread_id() {
    let _ = PER_THREAD.try_with(|t| t.tid.set(0));
}

pub fn describe() -> Process {
    let argv: Vec<String> = std::fs::read("/proc/self/cmdline")
        .map(|raw| raw.split(|&b| b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect())
        .unwrap_or_default();
    let started = now_ns();
    let int = |name: &str| var(name).and_then(|v| v.trim().parse::<i64>().ok());
    Process {
        pid: std::process::id(),
        exe: std::fs::read_link("/proc/self/exe").ok().map(|p| p.to_string_lossy().into_owned()),
        argv: crate::redact::redact_argv(&argv),
        hostname: hostname(),
        rank: config::rank_from(var),
        local_rank: int("LOCAL_RANK"),
        world_size: int("WORLD_SIZE"),
        started_at: rfc3339(started),
        started_at_ns: started,
        run_id: [var("CUBLASGUARD_RUN_ID"), var(TREE_ID)].into_iter().flatten().find(|id| !id.is_empty() && id.len() <= 64),
    }
}

/// UTC time as RFC 3339 with milliseconds.
pub fn rfc3339(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let millis = (ns / 1_000_000) % 1000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's days-to-civil algorithm.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_utc_times() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_795_000_000_123_000_000), "2026-11-18T11:06:40.123Z");
        assert_eq!(rfc3339(951_782_400_000_000_000), "2000-02-29T00:00:00.000Z");
    }
}
