//! The trace at a fatal signal (a fault, an abort, or SIGTERM and SIGINT sent to end the job).
//! The handler may run in a thread that crashed anywhere, even inside malloc or holding one of
//! the guard's locks, so it allocates nothing and waits for nothing but a bounded moment. What it writes is prepared in advance: the trace's prefix
//! (format, process, environment), and each stored fault rendered once, when it was stored,
//! into a slot of its own. The handler streams the prefix and every fault slot to a fresh file
//! of its own (O_EXCL, an unpredictable name), then the flight recorder (which takes no lock),
//! the call counts and the signal from a buffer set aside for them, and renames the file over
//! the trace. So the crash trace holds every stored fault, however many, whatever the file on
//! disk held (rewrites of it back off when faults come in runs).
//!
//! A program's own handler comes first: when one was installed before the guard's, it is
//! called directly, with the original `siginfo` and context (a JVM or a wasm runtime recovers
//! from faults on its own guard pages that way). Only a signal nobody handles is fatal: then
//! the crash record is written, the default action restored, and the process dies by its own
//! signal. The guard's handler stays installed for the next signal.

use std::ffi::CString;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicUsize, Ordering};

use crate::recorder::{ArgValue, RecordedCall};
use crate::session::Session;
use crate::trace::{visit_summary, SummarySource, SummaryValue, Trace};

/// The fatal signals whose record is written: a fault, an abort, and (SIGTERM, SIGINT) a
/// process ended from outside: a scheduler's time limit, torchrun stopping its workers, Ctrl-C.
const SIGNALS: [(libc::c_int, &str); 7] = [
    (libc::SIGSEGV, "SIGSEGV"),
    (libc::SIGBUS, "SIGBUS"),
    (libc::SIGABRT, "SIGABRT"),
    (libc::SIGFPE, "SIGFPE"),
    (libc::SIGILL, "SIGILL"),
    (libc::SIGTERM, "SIGTERM"),
    (libc::SIGINT, "SIGINT"),
];

/// Signals sent to end a process: left alone where the process ignores them, since a handler
/// is not inherited across exec as an ignored disposition is (a job started in the background
/// by a shell ignores SIGINT, and so must the programs it runs).
fn sent_to_stop(sig: libc::c_int) -> bool {
    matches!(sig, libc::SIGTERM | libc::SIGINT)
}

/// Whether `sig` is ignored now.
fn ignored(sig: libc::c_int) -> bool {
    // SAFETY: a query only; the out-parameter is local.
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut current) == 0 && current.sa_sigaction == libc::SIG_IGN
    }
}

/// Bytes kept for everything after the recent calls (summary, crash record).
const TAIL_RESERVE: usize = 16 << 10;
const BYTES_PER_CALL: usize = 320;

/// A byte buffer published to the handler: replaced by the normal code, read by the handler.
struct Published {
    /// A buffer that starts with its length (a `usize`, native order) and holds the bytes
    /// after it: one atomic load gives a reader both, so a republish in between can never pair
    /// one buffer's pointer with another's length.
    ptr: AtomicPtr<u8>,
}

const LEN_BYTES: usize = std::mem::size_of::<usize>();

impl Published {
    const fn new() -> Self {
        Self { ptr: AtomicPtr::new(std::ptr::null_mut()) }
    }
}

/// Handlers currently reading a published buffer; a replaced buffer is freed only when none is.
static READERS: AtomicUsize = AtomicUsize::new(0);
/// The trace up to its faults (format, version, process, environment).
static PREFIX: Published = Published::new();
/// One slot per storable fault (the fault cap), each the fault's JSON; allocated at install.
static FAULT_SLOTS: AtomicPtr<Published> = AtomicPtr::new(std::ptr::null_mut());
static FAULT_SLOT_COUNT: AtomicUsize = AtomicUsize::new(0);
/// Slots in use: one past the highest filled (a forked child starts with none).
static FAULTS_PUBLISHED: AtomicUsize = AtomicUsize::new(0);
/// Slots filled; behind the session's stored count while a fault is being rendered.
static SLOTS_FILLED: AtomicUsize = AtomicUsize::new(0);
static TMP_PATH: Published = Published::new();
static FINAL_PATH: Published = Published::new();
static SCRATCH: Published = Published::new();
static OLD_ACTIONS: [AtomicPtr<libc::sigaction>; SIGNALS.len()] = [const { AtomicPtr::new(std::ptr::null_mut()) }; SIGNALS.len()];
/// Set by the first thread that writes a crash record; others wait for `CRASH_WRITTEN`.
static HANDLING: AtomicBool = AtomicBool::new(false);
static CRASH_WRITTEN: AtomicBool = AtomicBool::new(false);
static INSTALLED: AtomicBool = AtomicBool::new(false);
/// Normal trace writers between their last check and their rename: the crash writer lets them
/// finish, and none starts a rename once it began (the crash record wins).
static NORMAL_RENAMES: AtomicUsize = AtomicUsize::new(0);

/// Held by a normal trace writer around its rename; `None` once a crash record is being
/// written, and then the normal writer leaves the file alone.
pub(crate) struct RenameTicket(());

impl RenameTicket {
    pub(crate) fn take() -> Option<Self> {
        NORMAL_RENAMES.fetch_add(1, Ordering::SeqCst);
        if HANDLING.load(Ordering::SeqCst) {
            NORMAL_RENAMES.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(Self(()))
    }
}

impl Drop for RenameTicket {
    fn drop(&mut self) {
        NORMAL_RENAMES.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Bytes the handler needs after the faults: the recent calls, the summary, the crash record.
fn scratch_size(ring: usize) -> usize {
    ring.saturating_mul(BYTES_PER_CALL) + TAIL_RESERVE
}

fn fault_slots() -> &'static [Published] {
    let ptr = FAULT_SLOTS.load(Ordering::SeqCst);
    if ptr.is_null() {
        return &[];
    }
    // SAFETY: allocated once at install (leaked, never freed) with FAULT_SLOT_COUNT entries.
    unsafe { std::slice::from_raw_parts(ptr, FAULT_SLOT_COUNT.load(Ordering::SeqCst)) }
}

/// Renders stored fault number `index` into its slot, for the handler.
pub(crate) fn publish_fault(index: usize, fault: &crate::trace::Fault) {
    let Some(slot) = fault_slots().get(index) else { return };
    if let Ok(bytes) = serde_json::to_vec(fault) {
        // The bound first: a crash writer that counts this slot filled also reads it.
        FAULTS_PUBLISHED.fetch_max(index + 1, Ordering::SeqCst);
        if publish(slot, bytes) {
            SLOTS_FILLED.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// In a forked child: the parent's faults are the parent's. Their buffers are left alone
/// (pages shared with the parent until written, so they cost nothing), the slots emptied.
pub(crate) fn forget_faults() {
    FAULTS_PUBLISHED.store(0, Ordering::SeqCst);
    for slot in fault_slots() {
        slot.ptr.store(std::ptr::null_mut(), Ordering::SeqCst);
    }
    SLOTS_FILLED.store(0, Ordering::SeqCst);
}

/// Replaces what `slot` holds; whether it held nothing before.
fn publish(slot: &Published, bytes: Vec<u8>) -> bool {
    let mut framed = Vec::with_capacity(LEN_BYTES + bytes.len());
    framed.extend_from_slice(&bytes.len().to_ne_bytes());
    framed.extend_from_slice(&bytes);
    let new = Box::into_raw(framed.into_boxed_slice()) as *mut u8;
    let old = slot.ptr.swap(new, Ordering::SeqCst);
    if !old.is_null() && READERS.load(Ordering::SeqCst) == 0 {
        // SAFETY: `old` came from Box::into_raw of a framed slice whose length prefix it holds,
        // and no handler is reading it (one that starts now loads the new pointer).
        unsafe {
            let len = std::ptr::read_unaligned(old as *const usize);
            drop(Box::from_raw(std::ptr::slice_from_raw_parts_mut(old, LEN_BYTES + len)));
        }
    }
    old.is_null()
}

/// The trace up to its faults: `{"format":...,"environment":{...}` without the comma that
/// follows, for the handler to complete.
pub(crate) fn render_prefix(trace: &Trace) -> Option<Vec<u8>> {
    crate::trace::head_json(trace).ok()
}

/// Publishes the prefix for the handler (after each rewrite of the trace, and in a child).
pub(crate) fn update_prefix(trace: &Trace) {
    if INSTALLED.load(Ordering::Relaxed) {
        if let Some(prefix) = render_prefix(trace) {
            publish(&PREFIX, prefix);
        }
    }
}

/// 16 random hex digits (getrandom; the time and pid if it fails).
fn random_tag() -> String {
    let mut bytes = [0u8; 8];
    // SAFETY: getrandom writes at most 8 bytes into `bytes`.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr() as *mut libc::c_void, 8, libc::GRND_NONBLOCK) };
    let value = if n == 8 { u64::from_le_bytes(bytes) } else { crate::ffi::host::process::now_ns() ^ (std::process::id() as u64) << 40 };
    format!("{value:016x}")
}

/// The process whose trace path the handler holds: a child forked without the guard's fork
/// handlers (a clone system call) has its parent's copied, and must not write it.
static WRITER_PID: AtomicU32 = AtomicU32::new(0);

pub(crate) fn update_path(path: &str) {
    WRITER_PID.store(std::process::id(), Ordering::SeqCst);
    let tmp = {
        let p = std::path::Path::new(path);
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let dir = p.parent().map(|d| d.display().to_string()).unwrap_or_default();
        let sep = if dir.is_empty() { "" } else { "/" };
        let _ = name;
        // Short (a long trace name must still fit NAME_MAX beside it) and unpredictable: the
        // handler creates it with O_EXCL, so nothing planted there in advance is ever written.
        format!("{dir}{sep}.cgc-{}.tmp", random_tag())
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
    publish(&SCRATCH, vec![0u8; scratch_size(s.config.ring)]);
    let slots: Box<[Published]> = (0..s.config.max_faults).map(|_| Published::new()).collect();
    FAULT_SLOT_COUNT.store(slots.len(), Ordering::SeqCst);
    FAULT_SLOTS.store(Box::leak(slots).as_mut_ptr(), Ordering::SeqCst);
    update_path(&s.trace_path());
    update_prefix(trace);
    for (i, (sig, _)) in SIGNALS.iter().enumerate() {
        if sent_to_stop(*sig) && ignored(*sig) {
            continue;
        }
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
    /// Something did not fit: the text is cut, and must not replace a valid trace.
    cut: bool,
}

impl Writer {
    fn room(&self) -> usize {
        self.cap - self.len
    }
    fn bytes(&mut self, b: &[u8]) {
        let n = b.len().min(self.room());
        self.cut |= n < b.len();
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
        self.string(name);
        self.bytes(b":");
        self.int(v);
    }
    /// `s` as a JSON string, escaped as serde_json escapes it.
    fn string(&mut self, s: &str) {
        self.bytes(b"\"");
        let mut plain = 0;
        for (i, &b) in s.as_bytes().iter().enumerate() {
            let escape: &[u8] = match b {
                b'"' => b"\\\"",
                b'\\' => b"\\\\",
                b'\n' => b"\\n",
                b'\r' => b"\\r",
                b'\t' => b"\\t",
                0x08 => b"\\b",
                0x0c => b"\\f",
                0..=0x1f => b"",
                _ => continue,
            };
            self.bytes(&s.as_bytes()[plain..i]);
            plain = i + 1;
            if escape.is_empty() {
                self.bytes(b"\\u00");
                self.bytes(&[b"0123456789abcdef"[(b >> 4) as usize], b"0123456789abcdef"[(b & 15) as usize]]);
            } else {
                self.bytes(escape);
            }
        }
        self.bytes(&s.as_bytes()[plain..]);
        self.bytes(b"\"");
    }
}

/// One argument's value, rendered as the trace renders `ArgValue::to_arg`.
fn arg_value(w: &mut Writer, value: ArgValue) {
    match value {
        ArgValue::Int(v) => w.int(v),
        ArgValue::Address(v) => w.hex(v),
        ArgValue::Label { raw, labels } => enum_label(w, raw, ArgValue::label(raw, labels)),
        ArgValue::Operation(raw) => enum_label(w, raw, ArgValue::operation_label(raw)),
        ArgValue::Dim3([x, y, z]) => {
            w.bytes(b"[");
            w.uint(x as u64);
            w.bytes(b",");
            w.uint(y as u64);
            w.bytes(b",");
            w.uint(z as u64);
            w.bytes(b"]");
        }
    }
}

/// An enum argument as a JSON string: its label, or "unknown(v)".
fn enum_label(w: &mut Writer, raw: i32, label: Option<&str>) {
    match label {
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
    w.field("duration_ns", c.duration_ns as i64);
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
    w.bytes(if c.scanned { b"},\"scanned\":true" } else { b"},\"scanned\":false" });
    w.bytes(if c.captured { b",\"captured\":true}" } else { b"}" });
}

/// The summary, walked field by field as the normal writer's serde form walks it.
fn summary_json(w: &mut Writer, source: &dyn SummarySource) {
    w.bytes(b"{");
    let mut first = true;
    visit_summary(source, &mut |name, value| {
        if let SummaryValue::Counts { visit, omit_empty: true } = value {
            let mut any = false;
            visit(&mut |_, _| any = true);
            if !any {
                return;
            }
        }
        if !first {
            w.bytes(b",");
        }
        first = false;
        w.string(name);
        w.bytes(b":");
        match value {
            SummaryValue::Count(n) => w.uint(n),
            SummaryValue::Counts { visit, .. } => {
                w.bytes(b"{");
                let mut first = true;
                visit(&mut |key, n| {
                    if !first {
                        w.bytes(b",");
                    }
                    first = false;
                    w.string(key);
                    w.bytes(b":");
                    w.uint(n);
                });
                w.bytes(b"}");
            }
        }
    });
    w.bytes(b"}");
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
    // SAFETY: a published buffer is framed by `publish` (its length, then its bytes) and freed
    // only while READERS == 0; our reader count is held.
    (!ptr.is_null()).then(|| unsafe {
        let len = std::ptr::read_unaligned(ptr as *const usize);
        std::slice::from_raw_parts(ptr.add(LEN_BYTES), len)
    })
}

/// Writes all of `bytes` to `fd`; false when a write failed.
fn write_fully(fd: libc::c_int, bytes: &[u8]) -> bool {
    let mut off = 0;
    while off < bytes.len() {
        // SAFETY: write is async-signal-safe; the range is inside `bytes`.
        let n = unsafe { libc::write(fd, bytes[off..].as_ptr() as *const libc::c_void, bytes.len() - off) };
        if n <= 0 {
            return false;
        }
        off += n as usize;
    }
    true
}

/// The recent calls, the summary (with the faults the record lists and the faults dropped past
/// the cap) and the crash record, rendered into `w`.
fn render_tail(w: &mut Writer, s: &crate::session::Session, listed: u64, dropped: u64, sig: libc::c_int, name: &str) {
    w.bytes(b"],\"recent_calls\":[");
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
        call_json(w, &next, s.hook_name(next.hook as usize));
        last = next.seq;
    }
    w.bytes(b"],\"summary\":");
    summary_json(w, &s.live_summary(listed.saturating_add(dropped), dropped));
    w.bytes(b",\"crash\":{");
    w.field("signal", sig as i64);
    w.bytes(b",\"name\":\"");
    w.bytes(name.as_bytes());
    w.bytes(b"\",");
    // SAFETY: gettid is async-signal-safe.
    w.field("thread", unsafe { libc::gettid() } as i64);
    w.bytes(b",");
    w.field("time_ns", now_ns() as i64);
    w.bytes(if saved { b",\"recent_calls_saved\":true}}\n" } else { b",\"recent_calls_saved\":false}}\n" });
}

fn write_crash_trace(sig: libc::c_int, name: &str) {
    // SAFETY: getpid is async-signal-safe and cannot fail.
    if WRITER_PID.load(Ordering::SeqCst) != unsafe { libc::getpid() } as u32 {
        return; // the path and the faults are the parent's (a fork that ran no fork handlers)
    }
    let Some(s) = crate::ffi::host::lifecycle::existing_session() else { return };
    if s.fault_count() == 0 && !s.config.trace_requested {
        return;
    }
    let (Some(prefix), Some(scratch), Some(tmp), Some(path)) = (load(&PREFIX), load(&SCRATCH), load(&TMP_PATH), load(&FINAL_PATH)) else {
        return;
    };
    let (bound, listed, dropped) = fault_counts(s);
    let mut w = Writer { buf: scratch.as_ptr() as *mut u8, cap: scratch.len(), len: 0, cut: false };
    render_tail(&mut w, s, listed as u64, dropped, sig, name);
    if w.cut {
        return; // never replace a valid trace with a cut one
    }
    // SAFETY: lstat/open/fsync/close/rename/unlink are async-signal-safe; paths are
    // NUL-terminated; the tail's bytes are inside the scratch buffer.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::lstat(path.as_ptr() as *const libc::c_char, &mut st) == 0 && st.st_mode & libc::S_IFMT != libc::S_IFREG {
            return; // a device, a FIFO or a symlink at the trace path is never replaced
        }
        let fd = libc::open(tmp.as_ptr() as *const libc::c_char, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC, 0o600);
        if fd < 0 {
            return;
        }
        let mut ok = write_fully(fd, prefix) && write_fully(fd, b",\"faults\":[");
        // Exactly the `listed` the summary counts: a slot once filled stays filled, so the
        // first `listed` filled slots below `bound` are there, whatever was filled since.
        for (i, fault) in fault_slots().iter().take(bound).filter_map(listable).take(listed).enumerate() {
            ok = ok && (i == 0 || write_fully(fd, b",")) && write_fully(fd, fault);
        }
        ok = ok && write_fully(fd, std::slice::from_raw_parts(scratch.as_ptr(), w.len));
        libc::fsync(fd);
        libc::close(fd);
        if ok {
            libc::rename(tmp.as_ptr() as *const libc::c_char, path.as_ptr() as *const libc::c_char);
        } else {
            libc::unlink(tmp.as_ptr() as *const libc::c_char);
        }
    }
}

/// A slot's fault, when it holds one (while READERS is held).
fn listable(slot: &Published) -> Option<&'static [u8]> {
    load(slot).filter(|fault| !fault.is_empty())
}

/// What the crash record lists and counts: the slots to read (`bound`), how many faults they
/// hold (`listed`), and the faults dropped past the cap. Other threads may be storing faults
/// meanwhile; the summary counts exactly what is listed, plus what was dropped, so that
/// listed + dropped = faults and nothing is dropped below the cap. A fault stored but still
/// being rendered into its slot (microseconds, in a thread that keeps running) is waited for,
/// briefly: when faults were dropped, every one stored before them is listed. A fault counted
/// after this moment is not in the record at all.
fn fault_counts(s: &crate::session::Session) -> (usize, usize, u64) {
    // Dropped first: a fault dropped means the cap was stored, all of it (see FaultLog).
    let dropped = s.dropped_fault_count();
    let stored = s.stored_fault_count() as usize;
    wait_briefly(1_000, || SLOTS_FILLED.load(Ordering::SeqCst) >= stored);
    let bound = FAULTS_PUBLISHED.load(Ordering::SeqCst).min(fault_slots().len());
    let listed = fault_slots().iter().take(bound).filter_map(listable).count();
    (bound, listed, dropped)
}

/// What was installed for a signal before the guard's handler.
enum Previous {
    Default,
    Ignore,
    Info(extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void)),
    Plain(extern "C" fn(libc::c_int)),
}

fn previous(index: usize) -> Previous {
    let old = OLD_ACTIONS[index].load(Ordering::SeqCst);
    if old.is_null() {
        return Previous::Default;
    }
    // SAFETY: `old` was filled by sigaction at install and is never freed.
    let old = unsafe { &*old };
    match old.sa_sigaction {
        libc::SIG_DFL => Previous::Default,
        libc::SIG_IGN => Previous::Ignore,
        f if old.sa_flags & libc::SA_SIGINFO != 0 => {
            // SAFETY: the kernel-reported handler address, with the signature its flags say.
            Previous::Info(unsafe { std::mem::transmute::<usize, extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void)>(f) })
        }
        // SAFETY: as above, a handler without SA_SIGINFO.
        f => Previous::Plain(unsafe { std::mem::transmute::<usize, extern "C" fn(libc::c_int)>(f) }),
    }
}

/// Waits for `done` (another thread writing the crash record, normal writers finishing their
/// rename, a fault being published), with async-signal-safe sleeps; bounded (`limit_ms`), so
/// that a writer stuck on a dead file system cannot keep a dying process alive.
fn wait_briefly(limit_ms: u32, done: impl Fn() -> bool) {
    let pause = libc::timespec { tv_sec: 0, tv_nsec: 1_000_000 };
    for _ in 0..limit_ms {
        if done() {
            return;
        }
        // SAFETY: nanosleep is async-signal-safe.
        unsafe { libc::nanosleep(&pause, std::ptr::null_mut()) };
    }
}

/// After the program's own handler returned: whether it judged the signal fatal (it raised it
/// again, or put another disposition in place of the guard's, as faulthandler does before
/// re-raising). A handler that recovered leaves neither.
fn judged_fatal_by_program(sig: libc::c_int) -> bool {
    // SAFETY: sigpending and sigaction (query only) are async-signal-safe; out-parameters are
    // local.
    unsafe {
        let mut pending: libc::sigset_t = std::mem::zeroed();
        libc::sigpending(&mut pending);
        let mut current: libc::sigaction = std::mem::zeroed();
        libc::sigaction(sig, std::ptr::null(), &mut current);
        libc::sigismember(&pending, sig) == 1 || current.sa_sigaction != on_fatal as *const () as usize
    }
}

/// Writes the crash record once per process; a second thread waits for the first to finish
/// rather than let the process die under it.
fn record_crash_once(sig: libc::c_int, name: &str) {
    // Deferred verdicts whose scans had landed are judged and published first, by the guard's
    // thread for them (a bounded moment: it may be stuck behind a lock this thread holds).
    if let Some(s) = crate::ffi::host::lifecycle::existing_session() {
        // First, whether the device had failed (an abort right after the program saw an error
        // the guard had not: its breadcrumbs say which call caused it).
        crate::ffi::host::harvester::last_look(300);
        crate::ffi::host::harvester::settle(|| s.verdicts.unsettled(), || s.verdicts.judged_count(), 300, 10_000);
    }
    if !HANDLING.swap(true, Ordering::SeqCst) {
        // Normal writers in the middle of a rename finish first; none starts another.
        // 10 s: long enough for an fsync on a busy machine.
        wait_briefly(10_000, || NORMAL_RENAMES.load(Ordering::SeqCst) == 0);
        READERS.fetch_add(1, Ordering::SeqCst);
        write_crash_trace(sig, name);
        READERS.fetch_sub(1, Ordering::SeqCst);
        CRASH_WRITTEN.store(true, Ordering::SeqCst);
    } else {
        wait_briefly(10_000, || CRASH_WRITTEN.load(Ordering::SeqCst));
    }
}

/// Whether the kernel raised `sig` for the faulting instruction itself (si_code > 0: SEGV_*,
/// BUS_*, FPE_*, ILL_*, SI_KERNEL), rather than a process sending it (SI_USER, SI_TKILL, ...).
/// SIGABRT never is (abort() raises it), nor SIGTERM or SIGINT (a terminal's Ctrl-C comes as SI_KERNEL).
fn is_hardware_fault(sig: libc::c_int, info: *const libc::siginfo_t) -> bool {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler; checked for null all
    // the same.
    matches!(sig, libc::SIGSEGV | libc::SIGBUS | libc::SIGFPE | libc::SIGILL) && !info.is_null() && unsafe { (*info).si_code } > 0
}

/// Hands a signal another process sent with kill() to the main thread, when it was delivered to
/// another one: the kernel picks any thread that does not block it, and the one it picked may
/// be one the crash writer waits for (the guard's verdict thread, whose landed verdicts it
/// gives a moment to be judged; the driver's). A fault of a thread's own instruction, and a
/// signal sent to one thread (abort(), tgkill), stay where they are.
fn handed_to_main_thread(sig: libc::c_int, info: *const libc::siginfo_t) -> bool {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler (checked for null);
    // getpid, gettid and tgkill are async-signal-safe system calls.
    unsafe {
        if info.is_null() || (*info).si_code != libc::SI_USER {
            return false;
        }
        let pid = libc::getpid();
        libc::syscall(libc::SYS_gettid) as libc::pid_t != pid && libc::syscall(libc::SYS_tgkill, pid, pid, sig) == 0
    }
}

extern "C" fn on_fatal(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let Some(index) = SIGNALS.iter().position(|(s, _)| *s == sig) else { return };
    if handed_to_main_thread(sig, info) {
        return;
    }
    let name = SIGNALS[index].1;
    // The program's own handler decides first, with the original siginfo and context: it may
    // well recover, and then nothing was fatal.
    let chained = match previous(index) {
        Previous::Info(f) => {
            f(sig, info, ctx);
            true
        }
        Previous::Plain(f) => {
            f(sig);
            true
        }
        // Ignored, a signal sent by kill() or raise() stays ignored. A hardware fault cannot
        // be: the instruction would fault again on return, forever. The kernel forces the
        // default action then, and so does the guard, after the crash record.
        Previous::Ignore if !is_hardware_fault(sig, info) => return,
        Previous::Ignore | Previous::Default => false,
    };
    if chained {
        if judged_fatal_by_program(sig) {
            record_crash_once(sig, name); // the pending signal ends the process on return
        }
        return;
    }
    record_crash_once(sig, name);
    // SAFETY: sigaction and raise are async-signal-safe. The default action is restored for
    // this one delivery and the signal raised again: blocked until this handler returns, it
    // then kills the process (a hardware fault would recur on return anyway; raising covers
    // signals sent by kill() and abort() alike).
    unsafe {
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(sig, &default, std::ptr::null_mut());
        libc::raise(sig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recorder::CallArgs;
    use crate::trace;

    #[test]
    fn prefix_faults_and_tail_make_the_whole_trace() {
        let mut t = Trace { format: trace::FORMAT.into(), version: trace::VERSION, ..Default::default() };
        t.process.argv = vec!["has ,\"faults\":[],\"recent_calls\":[] inside".into()];
        let prefix = render_prefix(&t).expect("prefix");
        let fault = crate::trace::sample_fault(2);
        let mut buf = vec![0u8; 8192];
        let mut w = Writer { buf: buf.as_mut_ptr(), cap: buf.len(), len: 0, cut: false };
        w.bytes(&prefix);
        w.bytes(b",\"faults\":[");
        w.bytes(&serde_json::to_vec(&fault).unwrap());
        w.bytes(b",");
        w.bytes(&serde_json::to_vec(&fault).unwrap());
        w.bytes(b"],\"recent_calls\":[");
        let call = RecordedCall {
            seq: 3,
            hook: 0,
            status: -7,
            time_ns: 5,
            duration_ns: 2,
            thread: 9,
            args: CallArgs::Gemm { transa: 1, transb: 9, m: 2, n: 3, k: 4, lda: 4, ldb: 4, ldc: 2 },
            scanned: true,
            captured: false,
        };
        call_json(&mut w, &call, "cublasSgemm_v2");
        w.bytes(b",");
        let launch = RecordedCall {
            seq: 4,
            hook: 1,
            args: CallArgs::Launch { func: 0x40, grid: [64, 2, 1], block: [256, 1, 1], shared: 0, stream: 9, ordinal: 3 },
            ..call
        };
        call_json(&mut w, &launch, "cudaLaunchKernel");
        // A summary with every field set, an ignore rule that needs escaping among them.
        let summary = trace::Summary {
            calls: [("cublasSgemm_v2".to_string(), 1), ("cudaLaunchKernel".to_string(), 1)].into(),
            faults: 3,
            dropped_faults: 1,
            scanned_calls: 1,
            skipped_scans: 2,
            sampled_operands: 0,
            captured_calls: 1,
            unfollowed_captured_calls: 1,
            ignored_faults: [("py=\"odd\\name\u{1}.py\"\n".to_string(), 4), ("kind=nonfinite_input".to_string(), 0)].into(),
            deferred_verdicts: [("deferred".to_string(), 5), ("waiting".to_string(), 1)].into(),
        };
        w.bytes(b"],\"summary\":");
        summary_json(&mut w, &summary);
        w.bytes(b",\"crash\":{\"signal\":11,\"name\":\"SIGSEGV\",\"thread\":1,\"time_ns\":2,\"recent_calls_saved\":true}}");
        let len = w.len;
        assert!(!w.cut);
        let text = std::str::from_utf8(&buf[..len]).unwrap();
        let parsed = trace::parse(text).expect("valid trace");
        assert_eq!(parsed.process.argv, t.process.argv);
        assert_eq!((parsed.format.as_str(), parsed.version, &parsed.guard, &parsed.environment), (t.format.as_str(), t.version, &t.guard, &t.environment));
        assert_eq!(parsed.faults, vec![fault.clone(), fault]);
        assert_eq!(parsed.recent_calls[0].status, -7);
        assert_eq!(parsed.recent_calls[0].args, call.args.to_args(), "the crash writer renders arguments as the trace does");
        assert_eq!(parsed.recent_calls[0].args["transb"], "unknown(9)");
        assert_eq!(parsed.recent_calls[1].args, launch.args.to_args());
        assert_eq!(parsed.summary, summary, "the crash writer renders every field of the summary");
        // Byte for byte as serde_json writes it, escapes included.
        let summary_text = &text[text.find("\"summary\":").unwrap() + 10..text.find(",\"crash\"").unwrap()];
        assert_eq!(summary_text, serde_json::to_string(&summary).unwrap());
        assert_eq!(parsed.crash.unwrap().name, "SIGSEGV");
        assert!(parsed.recent_calls[0].scanned);
    }

    #[test]
    fn the_prefix_is_the_head_of_the_trace_whatever_its_fields_hold() {
        let mut t = Trace { format: trace::FORMAT.into(), version: trace::VERSION, ..Default::default() };
        t.process.argv = vec!["],\"faults\":[],\"recent_calls\":[]".into()];
        t.process.run_id = Some("r".into());
        t.environment.variables.insert("X".into(), ",\"faults\":[]".into());
        let mut whole = serde_json::to_vec(&t).unwrap();
        let prefix = render_prefix(&t).unwrap();
        let rest = b",\"faults\":[],\"recent_calls\":[],\"summary\":{\"calls\":{},\"faults\":0,\"dropped_faults\":0,\"scanned_calls\":0,\"skipped_scans\":0,\"sampled_operands\":0,\"captured_calls\":0,\"unfollowed_captured_calls\":0}}";
        assert_eq!([prefix.as_slice(), rest].concat(), std::mem::take(&mut whole), "the prefix and the rest are the trace as serde writes it");
    }

    #[test]
    fn a_json_string_is_escaped_as_serde_json_escapes_it() {
        let mut buf = [0u8; 128];
        let text = "a\"b\\c\nd\te\u{1}f\u{7f}g\u{e9}";
        let mut w = Writer { buf: buf.as_mut_ptr(), cap: buf.len(), len: 0, cut: false };
        w.string(text);
        let len = w.len;
        assert_eq!(std::str::from_utf8(&buf[..len]).unwrap(), serde_json::to_string(text).unwrap());
    }

    #[test]
    fn a_reader_never_pairs_one_published_buffer_with_anothers_length() {
        // A crash handler reads while another thread republishes: every read must be one
        // whole buffer. Buffers of length n are filled with the byte n.
        static SLOT: Published = Published::new();
        READERS.fetch_add(1, Ordering::SeqCst); // as a handler: nothing is freed meanwhile
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let publisher = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut i = 0usize;
                while !stop.load(Ordering::Relaxed) && i < 200_000 {
                    let n = if i.is_multiple_of(2) { 1 } else { 48 };
                    publish(&SLOT, vec![n as u8; n]);
                    i += 1;
                }
            })
        };
        let mut torn = 0;
        for _ in 0..2_000_000 {
            if let Some(bytes) = load(&SLOT) {
                if bytes.iter().any(|&b| b as usize != bytes.len()) {
                    torn += 1;
                }
            }
            if publisher.is_finished() {
                break;
            }
        }
        stop.store(true, Ordering::Relaxed);
        publisher.join().unwrap();
        READERS.fetch_sub(1, Ordering::SeqCst);
        assert_eq!(torn, 0, "reads that mixed two buffers");
    }

    #[test]
    fn writer_stops_at_its_end() {
        let mut buf = [0u8; 4];
        let mut w = Writer { buf: buf.as_mut_ptr(), cap: 4, len: 0, cut: false };
        w.uint(123456);
        assert_eq!(w.len, 4);
        let mut w = Writer { buf: buf.as_mut_ptr(), cap: 4, len: 0, cut: false };
        w.int(-42);
        assert_eq!(&buf[..w.len], b"-42");
    }
}
