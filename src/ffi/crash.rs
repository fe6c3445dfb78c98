//! The trace at a fatal signal. The handler may run in a thread that crashed anywhere, even
//! inside malloc or holding one of the guard's locks, so it allocates nothing and waits for
//! nothing: the trace up to `recent_calls` is rendered in advance (after each stored fault),
//! and the handler appends the flight recorder (if its lock is free), the call counts and the
//! signal into a buffer set aside at start-up, then writes it with open/write/rename. It then
//! puts the previous handler back and re-raises, so the process dies by its own signal.

use std::ffi::CString;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

use crate::recorder::{ArgValue, RecordedCall};
use crate::session::Session;
use crate::trace::Trace;

const SIGNALS: [(libc::c_int, &str); 5] = [
    (libc::SIGSEGV, "SIGSEGV"),
    (libc::SIGBUS, "SIGBUS"),
    (libc::SIGABRT, "SIGABRT"),
    (libc::SIGFPE, "SIGFPE"),
    (libc::SIGILL, "SIGILL"),
];

/// Bytes kept for everything after the recent calls (summary, crash record).
const TAIL_RESERVE: usize = 16 << 10;
const BYTES_PER_CALL: usize = 320;

/// A byte buffer published to the handler: replaced by the normal code, read by the handler.
struct Published {
    ptr: AtomicPtr<u8>,
    len: AtomicUsize,
}

impl Published {
    const fn new() -> Self {
        Self { ptr: AtomicPtr::new(std::ptr::null_mut()), len: AtomicUsize::new(0) }
    }
}

/// Handlers currently reading a published buffer; a replaced buffer is freed only when none is.
static READERS: AtomicUsize = AtomicUsize::new(0);
static HEAD: Published = Published::new();
static TMP_PATH: Published = Published::new();
static FINAL_PATH: Published = Published::new();
static SCRATCH: Published = Published::new();
static OLD_ACTIONS: [AtomicPtr<libc::sigaction>; 5] = [const { AtomicPtr::new(std::ptr::null_mut()) }; 5];
static HANDLING: AtomicBool = AtomicBool::new(false);
static INSTALLED: AtomicBool = AtomicBool::new(false);

fn publish(slot: &Published, bytes: Vec<u8>) {
    let boxed: Box<[u8]> = bytes.into_boxed_slice();
    let len = boxed.len();
    let new = Box::into_raw(boxed) as *mut u8;
    // The length first, then the pointer: a reader that sees the new pointer sees its length.
    // (A reader that sees the old pointer with the new length reads min(len) below.)
    let old_len = slot.len.swap(len, Ordering::SeqCst);
    let old = slot.ptr.swap(new, Ordering::SeqCst);
    if !old.is_null() && READERS.load(Ordering::SeqCst) == 0 {
        // SAFETY: `old` came from Box::into_raw of a slice of `old_len` bytes, and no handler
        // is reading it (one that starts now loads the new pointer).
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(old, old_len)) });
    }
}

/// The trace rendered without `recent_calls` and what follows, for the handler to complete.
pub(crate) fn render_head(trace: &Trace) -> Option<Vec<u8>> {
    let mut t = trace.clone();
    t.recent_calls.clear();
    t.summary = Default::default();
    t.crash = None;
    let mut bytes = serde_json::to_vec(&t).ok()?;
    let cut = bytes.windows(18).rposition(|w| w == b",\"recent_calls\":[]")?;
    bytes.truncate(cut);
    Some(bytes)
}

pub(crate) fn update_head(trace: &Trace) {
    if INSTALLED.load(Ordering::Relaxed) {
        if let Some(head) = render_head(trace) {
            publish(&HEAD, head);
        }
    }
}

pub(crate) fn update_path(path: &str) {
    let tmp = {
        let p = std::path::Path::new(path);
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let dir = p.parent().map(|d| d.display().to_string()).unwrap_or_default();
        let sep = if dir.is_empty() { "" } else { "/" };
        format!("{dir}{sep}.{name}.crash{}", std::process::id())
    };
    for (slot, text) in [(&FINAL_PATH, path.to_string()), (&TMP_PATH, tmp)] {
        if let Ok(c) = CString::new(text) {
            publish(slot, c.into_bytes_with_nul());
        }
    }
}

/// Installs the handlers once: they then serve the whole process, its forked children too.
pub(crate) fn install(s: &Session, trace: &Trace) {
    if INSTALLED.swap(true, Ordering::SeqCst) {
        return;
    }
    publish(&SCRATCH, vec![0u8; s.config.ring * BYTES_PER_CALL + TAIL_RESERVE]);
    update_path(&s.trace_path());
    update_head(trace);
    for (i, (sig, _)) in SIGNALS.iter().enumerate() {
        // SAFETY: a zeroed sigaction with our handler; the old one is kept for restoring.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_fatal as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            let old = Box::into_raw(Box::new(std::mem::zeroed::<libc::sigaction>()));
            if libc::sigaction(*sig, &action, old) == 0 {
                OLD_ACTIONS[i].store(old, Ordering::SeqCst);
            } else {
                drop(Box::from_raw(old));
            }
        }
    }
}

/// Appends to a fixed buffer; silently stops at its end.
struct Writer {
    buf: *mut u8,
    cap: usize,
    len: usize,
}

impl Writer {
    fn room(&self) -> usize {
        self.cap - self.len
    }
    fn bytes(&mut self, b: &[u8]) {
        let n = b.len().min(self.room());
        // SAFETY: buf has cap bytes, len + n <= cap.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), self.buf.add(self.len), n) };
        self.len += n;
    }
    fn uint(&mut self, mut v: u64) {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        self.bytes(&digits[i..]);
    }
    fn int(&mut self, v: i64) {
        if v < 0 {
            self.bytes(b"-");
        }
        self.uint(v.unsigned_abs());
    }
    fn hex(&mut self, mut v: u64) {
        let mut digits = [0u8; 16];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b"0123456789abcdef"[(v & 15) as usize];
            v >>= 4;
            if v == 0 {
                break;
            }
        }
        self.bytes(b"\"0x");
        self.bytes(&digits[i..]);
        self.bytes(b"\"");
    }
    fn field(&mut self, name: &str, v: i64) {
        self.bytes(b"\"");
        self.bytes(name.as_bytes());
        self.bytes(b"\":");
        self.int(v);
    }
}

/// One argument's value, rendered as `ArgValue::to_json` renders it for the trace.
fn arg_value(w: &mut Writer, value: ArgValue) {
    match value {
        ArgValue::Int(v) => w.int(v),
        ArgValue::Address(v) => w.hex(v),
        ArgValue::Operation(raw) => match ArgValue::operation_label(raw) {
            Some(label) => {
                w.bytes(b"\"");
                w.bytes(label.as_bytes());
                w.bytes(b"\"");
            }
            None => {
                w.bytes(b"\"unknown(");
                w.int(raw as i64);
                w.bytes(b")\"");
            }
        },
    }
}

fn call_json(w: &mut Writer, c: &RecordedCall, api: &str) {
    w.bytes(b"{");
    w.field("seq", c.seq as i64);
    w.bytes(b",\"api\":\"");
    w.bytes(api.as_bytes());
    w.bytes(b"\",");
    w.field("status", c.status as i64);
    w.bytes(b",");
    w.field("time_ns", c.time_ns as i64);
    w.bytes(b",");
    w.field("thread", c.thread as i64);
    w.bytes(b",\"args\":{");
    let mut first = true;
    c.args.visit(|name, value| {
        if !first {
            w.bytes(b",");
        }
        first = false;
        w.bytes(b"\"");
        w.bytes(name.as_bytes());
        w.bytes(b"\":");
        arg_value(w, value);
    });
    w.bytes(if c.scanned { b"},\"scanned\":true}" } else { b"},\"scanned\":false}" });
}

fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime is async-signal-safe; ts is a valid out-parameter.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Loads a published buffer (while READERS is held).
fn load(slot: &Published) -> Option<&'static [u8]> {
    let ptr = slot.ptr.load(Ordering::SeqCst);
    let len = slot.len.load(Ordering::SeqCst);
    // SAFETY: published buffers are freed only while READERS == 0; our reader count is held.
    (!ptr.is_null()).then(|| unsafe { std::slice::from_raw_parts(ptr, len) })
}

fn write_crash_trace(sig: libc::c_int, name: &str) {
    let Some(s) = super::lifecycle::existing_session() else { return };
    if s.fault_count() == 0 && !s.config.trace_requested {
        return;
    }
    let (Some(head), Some(scratch), Some(tmp), Some(path)) = (load(&HEAD), load(&SCRATCH), load(&TMP_PATH), load(&FINAL_PATH)) else {
        return;
    };
    let mut w = Writer { buf: scratch.as_ptr() as *mut u8, cap: scratch.len(), len: 0 };
    w.bytes(head);
    w.bytes(b",\"recent_calls\":[");
    // Oldest first, without allocating: each pass over the ring (which takes no lock) picks
    // the next sequence number; the ring is small, so the passes cost nothing that matters.
    let mut saved = true;
    let mut last = 0u64;
    let mut first = true;
    loop {
        let mut next: Option<RecordedCall> = None;
        saved &= s.recorder.visit(|c| {
            if c.seq > last && next.is_none_or(|n| c.seq < n.seq) {
                next = Some(*c);
            }
        });
        let Some(next) = next else { break };
        if w.room() < TAIL_RESERVE {
            break;
        }
        if !first {
            w.bytes(b",");
        }
        first = false;
        call_json(&mut w, &next, s.hook_name(next.hook as usize));
        last = next.seq;
    }
    w.bytes(b"],\"summary\":{\"calls\":{");
    let mut first = true;
    s.visit_call_counts(|api, n| {
        if !first {
            w.bytes(b",");
        }
        first = false;
        w.bytes(b"\"");
        w.bytes(api.as_bytes());
        w.bytes(b"\":");
        w.uint(n);
    });
    w.bytes(b"},");
    w.field("faults", s.fault_count() as i64);
    w.bytes(b",");
    w.field("dropped_faults", s.dropped_fault_count() as i64);
    w.bytes(b"},\"crash\":{");
    w.field("signal", sig as i64);
    w.bytes(b",\"name\":\"");
    w.bytes(name.as_bytes());
    w.bytes(b"\",");
    // SAFETY: gettid is async-signal-safe.
    w.field("thread", unsafe { libc::gettid() } as i64);
    w.bytes(b",");
    w.field("time_ns", now_ns() as i64);
    w.bytes(if saved { b",\"recent_calls_saved\":true}}\n" } else { b",\"recent_calls_saved\":false}}\n" });
    // SAFETY: open/write/fsync/close/rename are async-signal-safe; paths are NUL-terminated.
    unsafe {
        let fd = libc::open(
            tmp.as_ptr() as *const libc::c_char,
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            0o600,
        );
        if fd < 0 {
            return;
        }
        let mut off = 0;
        while off < w.len {
            let n = libc::write(fd, scratch.as_ptr().add(off) as *const libc::c_void, w.len - off);
            if n <= 0 {
                break;
            }
            off += n as usize;
        }
        libc::fsync(fd);
        libc::close(fd);
        if off == w.len {
            libc::rename(tmp.as_ptr() as *const libc::c_char, path.as_ptr() as *const libc::c_char);
        } else {
            libc::unlink(tmp.as_ptr() as *const libc::c_char);
        }
    }
}

extern "C" fn on_fatal(sig: libc::c_int, _info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    let Some(index) = SIGNALS.iter().position(|(s, _)| *s == sig) else { return };
    if !HANDLING.swap(true, Ordering::SeqCst) {
        READERS.fetch_add(1, Ordering::SeqCst);
        write_crash_trace(sig, SIGNALS[index].1);
        READERS.fetch_sub(1, Ordering::SeqCst);
    }
    // SAFETY: sigaction and raise are async-signal-safe; the old action was saved at install.
    unsafe {
        let old = OLD_ACTIONS[index].load(Ordering::SeqCst);
        if old.is_null() {
            let mut default: libc::sigaction = std::mem::zeroed();
            default.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(sig, &default, std::ptr::null_mut());
        } else {
            libc::sigaction(sig, old, std::ptr::null_mut());
        }
        // Blocked until this handler returns; then the restored disposition takes it.
        libc::raise(sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recorder::CallArgs;
    use crate::trace;

    #[test]
    fn head_plus_tail_is_the_whole_trace() {
        let mut t = Trace { format: trace::FORMAT.into(), version: trace::VERSION, ..Default::default() };
        t.process.argv = vec!["has \"recent_calls\":[] inside".into()];
        let head = render_head(&t).expect("head");
        let mut buf = vec![0u8; 4096];
        let mut w = Writer { buf: buf.as_mut_ptr(), cap: buf.len(), len: 0 };
        w.bytes(&head);
        w.bytes(b",\"recent_calls\":[");
        let call = RecordedCall {
            seq: 3,
            hook: 0,
            status: -7,
            time_ns: 5,
            thread: 9,
            args: CallArgs::Gemm { transa: 1, transb: 9, m: 2, n: 3, k: 4, lda: 4, ldb: 4, ldc: 2 },
            scanned: true,
        };
        call_json(&mut w, &call, "cublasSgemm_v2");
        w.bytes(b"],\"summary\":{\"calls\":{\"cublasSgemm_v2\":1},\"faults\":0,\"dropped_faults\":0},\"crash\":{\"signal\":11,\"name\":\"SIGSEGV\",\"thread\":1,\"time_ns\":2,\"recent_calls_saved\":true}}");
        let len = w.len;
        let parsed = trace::parse(std::str::from_utf8(&buf[..len]).unwrap()).expect("valid trace");
        assert_eq!(parsed.process.argv, t.process.argv);
        assert_eq!(parsed.recent_calls[0].status, -7);
        assert_eq!(parsed.recent_calls[0].args, call.args.to_map(), "the crash writer renders arguments as the trace does");
        assert_eq!(parsed.recent_calls[0].args["transb"], "unknown(9)");
        assert_eq!(parsed.crash.unwrap().name, "SIGSEGV");
        assert!(parsed.recent_calls[0].scanned);
    }

    #[test]
    fn writer_stops_at_its_end() {
        let mut buf = [0u8; 4];
        let mut w = Writer { buf: buf.as_mut_ptr(), cap: 4, len: 0 };
        w.uint(123456);
        assert_eq!(w.len, 4);
        let mut w = Writer { buf: buf.as_mut_ptr(), cap: 4, len: 0 };
        w.int(-42);
        assert_eq!(&buf[..w.len], b"-42");
    }
}
