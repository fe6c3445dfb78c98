//! One guarded process's record: call counts, the flight recorder, the faults found so far,
//! and the trace assembled from them. Safe Rust; the FFI layer owns the one global instance.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use crate::check::matmul::KnownError;
use crate::config::Config;
use crate::cuda;
use crate::recorder::{CallArgs, RecordedCall, Recorder};
use crate::state::{Allocations, Handles};
use crate::trace::{self, Environment, Fault, Process, RecentCall, Summary, Trace};

/// Who this process is and where its trace goes: both change in the child of a fork.
#[derive(Clone, Debug)]
pub struct Identity {
    pub process: Process,
    /// The expanded trace path.
    pub trace_path: String,
}

/// What became of a fault handed to the session.
#[derive(Debug, PartialEq, Eq)]
pub struct Recorded {
    /// Stored in full (false once `max_faults` are stored: then only counted).
    pub stored: bool,
    /// Lines for stderr (capped).
    pub lines: Vec<String>,
}

pub struct Session {
    pub config: Config,
    pub handles: Handles,
    /// cublasLt handles, a table of their own.
    pub lt_handles: Handles,
    pub allocations: Allocations,
    pub recorder: Recorder,
    identity: Mutex<Identity>,
    /// `identity.process.started_at_ns`, readable without the lock (the scan budget asks on
    /// every call).
    started_ns: AtomicU64,
    /// This process is the child of a fork() made after the guard started.
    forked_child: AtomicBool,
    hook_names: &'static [&'static str],
    calls: Box<[AtomicU64]>,
    /// One `init_failed` per hooked function: without a driver every call fails the same way.
    init_reported: Box<[AtomicBool]>,
    seq: AtomicU64,
    faults: Mutex<Vec<Fault>>,
    fault_total: AtomicU64,
    faults_stored: AtomicU64,
    stderr_lines: AtomicU32,
    known_error: Mutex<Option<KnownError>>,
    driver_error: Mutex<Option<String>>,
    /// What the program's own first cudaGetDeviceCount returned: (status, count).
    device_count: Mutex<Option<(i32, Option<i32>)>>,
    /// Calls per call site (hashed), for CUBLASGUARD_SCAN_EVERY.
    site_calls: Box<[AtomicU32]>,
    /// Time spent scanning, for CUBLASGUARD_BUDGET.
    scan_ns: AtomicU64,
    scanned_calls: AtomicU64,
    skipped_scans: AtomicU64,
}

/// Call sites tracked for CUBLASGUARD_SCAN_EVERY (hash buckets; a collision only shares a count).
const SITES: usize = 1024;

impl Session {
    pub fn new(config: Config, hook_names: &'static [&'static str], process: Process, trace_path: String) -> Self {
        let ring = config.ring;
        Self {
            config,
            handles: Handles::default(),
            lt_handles: Handles::default(),
            allocations: Allocations::default(),
            recorder: Recorder::new(ring),
            started_ns: AtomicU64::new(process.started_at_ns),
            identity: Mutex::new(Identity { process, trace_path }),
            forked_child: AtomicBool::new(false),
            hook_names,
            calls: hook_names.iter().map(|_| AtomicU64::new(0)).collect(),
            init_reported: hook_names.iter().map(|_| AtomicBool::new(false)).collect(),
            seq: AtomicU64::new(0),
            faults: Mutex::new(Vec::new()),
            fault_total: AtomicU64::new(0),
            faults_stored: AtomicU64::new(0),
            stderr_lines: AtomicU32::new(0),
            known_error: Mutex::new(None),
            driver_error: Mutex::new(None),
            device_count: Mutex::new(None),
            site_calls: (0..SITES).map(|_| AtomicU32::new(0)).collect(),
            scan_ns: AtomicU64::new(0),
            scanned_calls: AtomicU64::new(0),
            skipped_scans: AtomicU64::new(0),
        }
    }

    pub fn trace_path(&self) -> String {
        self.identity.lock().trace_path.clone()
    }

    pub fn identity(&self) -> Identity {
        self.identity.lock().clone()
    }

    /// In the child of a fork: a new identity and trace, and a record that starts empty (the
    /// parent's faults are the parent's). Handles, allocations and the recent calls are kept:
    /// the child inherited them.
    pub fn start_child(&self, identity: Identity) {
        self.started_ns.store(identity.process.started_at_ns, Ordering::Relaxed);
        *self.identity.lock() = identity;
        self.forked_child.store(true, Ordering::Relaxed);
        self.faults.lock().clear();
        self.fault_total.store(0, Ordering::Relaxed);
        self.faults_stored.store(0, Ordering::Relaxed);
        self.stderr_lines.store(0, Ordering::Relaxed);
        *self.known_error.lock() = None;
        for c in self.calls.iter() {
            c.store(0, Ordering::Relaxed);
        }
        for b in self.init_reported.iter() {
            b.store(false, Ordering::Relaxed);
        }
    }

    /// Every lock of the session, held by the forking thread across fork() and released in
    /// both processes after it, so the child never inherits a lock another thread held.
    pub fn hold_for_fork(&self) -> impl Sized + '_ {
        (
            self.faults.lock(),
            self.known_error.lock(),
            self.driver_error.lock(),
            self.device_count.lock(),
            self.identity.lock(),
            self.handles.hold(),
            self.lt_handles.hold(),
            self.allocations.hold(),
            self.recorder.hold(),
        )
    }

    /// Whether this call's operands are scanned: one call in `scan_every` per call site (a
    /// site is the hooked function and the call's shape, which tells the layers of a model
    /// apart), and none while the scans are over the time budget. `now_ns` is wall time.
    pub fn should_scan(&self, site: u64, now_ns: u64) -> bool {
        let every = self.config.scan_every.max(1);
        let turn = every == 1 || {
            let bucket = (site.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54) as usize % SITES;
            self.site_calls[bucket].fetch_add(1, Ordering::Relaxed) % every == 0
        };
        let within_budget = match self.config.budget {
            None => true,
            Some(fraction) => {
                let elapsed = now_ns.saturating_sub(self.started_ns.load(Ordering::Relaxed)).max(1);
                (self.scan_ns.load(Ordering::Relaxed) as f64) < fraction * elapsed as f64
            }
        };
        let scan = turn && within_budget;
        let counter = if scan { &self.scanned_calls } else { &self.skipped_scans };
        counter.fetch_add(1, Ordering::Relaxed);
        scan
    }

    pub fn add_scan_time(&self, ns: u64) {
        self.scan_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Counts a call of hook number `hook` and gives it its sequence number.
    pub fn begin(&self, hook: usize) -> u64 {
        if let Some(c) = self.calls.get(hook) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        self.seq.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub fn total_calls(&self) -> u64 {
        self.calls.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    pub fn fault_count(&self) -> u64 {
        self.fault_total.load(Ordering::Relaxed)
    }

    /// Faults counted but not stored; lock-free, for the crash handler.
    pub fn dropped_fault_count(&self) -> u64 {
        self.fault_count().saturating_sub(self.faults_stored.load(Ordering::Relaxed))
    }

    /// Calls per hooked function, without locks or allocation (the crash handler uses it).
    pub fn visit_call_counts(&self, mut f: impl FnMut(&'static str, u64)) {
        for (name, n) in self.hook_names.iter().zip(self.calls.iter()) {
            let n = n.load(Ordering::Relaxed);
            if n > 0 {
                f(name, n);
            }
        }
    }

    pub fn record_call(&self, hook: usize, seq: u64, status: i32, thread: u32, time_ns: u64, args: CallArgs) {
        self.record_scanned_call(hook, seq, status, thread, time_ns, args, false);
    }

    #[allow(clippy::too_many_arguments)]
    pub fn record_scanned_call(&self, hook: usize, seq: u64, status: i32, thread: u32, time_ns: u64, args: CallArgs, scanned: bool) {
        let api = self.hook_names.get(hook).copied().unwrap_or("?");
        self.recorder.record(RecordedCall { seq, api, status, time_ns, thread, args, scanned });
    }

    pub fn known_error(&self) -> Option<KnownError> {
        *self.known_error.lock()
    }

    /// Remembers a sticky error first revealed at call `seq`.
    pub fn note_error(&self, code: i32, seq: u64) {
        if cuda::cuda_error_is_sticky(code) {
            self.known_error.lock().get_or_insert(KnownError { code, seq });
        }
    }

    /// True the first time hook number `hook` reports an initialisation failure.
    pub fn first_init_failure(&self, hook: usize) -> bool {
        self.init_reported.get(hook).is_some_and(|b| !b.swap(true, Ordering::Relaxed))
    }

    pub fn set_driver_error(&self, text: String) {
        self.driver_error.lock().get_or_insert(text);
    }

    pub fn driver_error(&self) -> Option<String> {
        self.driver_error.lock().clone()
    }

    pub fn note_device_count(&self, status: i32, count: Option<i32>) {
        self.device_count.lock().get_or_insert((status, count));
    }

    pub fn device_count(&self) -> Option<(i32, Option<i32>)> {
        *self.device_count.lock()
    }

    /// Stores a fault (or only counts it, past `max_faults`); returns what became of it.
    pub fn add_fault(&self, fault: Fault) -> Recorded {
        self.fault_total.fetch_add(1, Ordering::Relaxed);
        let n = self.stderr_lines.fetch_add(1, Ordering::Relaxed);
        let cap = self.config.stderr_lines;
        let path = self.trace_path();
        let lines = if n < cap {
            vec![format!("cublasguard: {} #{}: {} [{}]; trace: {path}", fault.api, fault.seq, fault.message, fault.kind.name())]
        } else if n == cap {
            vec![format!("cublasguard: further faults are recorded in {path} only")]
        } else {
            Vec::new()
        };
        let mut faults = self.faults.lock();
        let stored = faults.len() < self.config.max_faults;
        if stored {
            faults.push(fault);
            self.faults_stored.fetch_add(1, Ordering::Relaxed);
        }
        Recorded { stored, lines }
    }

    /// Replaces the stored fault of call `seq` with `fault` (its status is known now); false
    /// when it was not stored (past the cap).
    pub fn replace_fault(&self, fault: Fault) -> bool {
        let mut faults = self.faults.lock();
        match faults.iter_mut().rev().find(|f| f.seq == fault.seq && f.api == fault.api) {
            Some(slot) => {
                *slot = fault;
                true
            }
            None => false,
        }
    }

    /// Whether the trace belongs on disk at exit. A named path is written for every process
    /// that used CUDA, so a shell wrapper that merely exits after its child does not replace
    /// the child's trace with an empty one.
    /// A forked child (a DataLoader worker, say) that made no CUDA call of its own writes
    /// nothing, so workers do not each leave an empty trace.
    pub fn should_write_at_exit(&self, cuda_loaded: bool) -> bool {
        let used_cuda = self.total_calls() > 0 || (cuda_loaded && !self.forked_child.load(Ordering::Relaxed));
        self.fault_count() > 0 || (self.config.trace_requested && used_cuda)
    }

    pub fn trace(&self, environment: Environment) -> Trace {
        let faults = self.faults.lock().clone();
        let calls = self
            .hook_names
            .iter()
            .zip(self.calls.iter())
            .map(|(name, n)| (name.to_string(), n.load(Ordering::Relaxed)))
            .filter(|(_, n)| *n > 0)
            .collect();
        let total = self.fault_count();
        Trace {
            format: trace::FORMAT.into(),
            version: trace::VERSION,
            process: self.identity.lock().process.clone(),
            environment,
            recent_calls: self.recorder.snapshot().iter().map(recent_call).collect(),
            summary: Summary {
                calls,
                faults: total,
                dropped_faults: total.saturating_sub(faults.len() as u64),
                scanned_calls: self.scanned_calls.load(Ordering::Relaxed),
                skipped_scans: self.skipped_scans.load(Ordering::Relaxed),
            },
            faults,
            crash: None,
        }
    }
}

fn recent_call(call: &RecordedCall) -> RecentCall {
    RecentCall {
        seq: call.seq,
        api: call.api.to_string(),
        status: call.status,
        time_ns: call.time_ns,
        thread: call.thread,
        args: args_map(&call.args),
        scanned: call.scanned,
    }
}

/// The recorder's compact arguments as named JSON values (names as in NVIDIA's headers).
pub fn args_map(args: &CallArgs) -> BTreeMap<String, serde_json::Value> {
    use serde_json::json;
    let mut map = BTreeMap::new();
    let mut put = |k: &str, v: serde_json::Value| {
        map.insert(k.to_string(), v);
    };
    match *args {
        CallArgs::None => {}
        CallArgs::Gemm { transa, transb, m, n, k, lda, ldb, ldc } => {
            put("transa", json!(cuda::Operation::decode(transa).label()));
            put("transb", json!(cuda::Operation::decode(transb).label()));
            for (name, v) in [("m", m), ("n", n), ("k", k), ("lda", lda), ("ldb", ldb), ("ldc", ldc)] {
                put(name, json!(v));
            }
        }
        CallArgs::Size { size, stream } => {
            put("size", json!(size));
            if let Some(s) = stream {
                put("stream", json!(trace::hex(s)));
            }
        }
        CallArgs::Pointer { ptr, stream } => {
            put("ptr", json!(trace::hex(ptr)));
            if let Some(s) = stream {
                put("stream", json!(trace::hex(s)));
            }
        }
        CallArgs::Handle { handle, value } => {
            put("handle", json!(trace::hex(handle)));
            put("value", json!(value));
        }
    }
    map
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::FaultKind;

    static NAMES: &[&str] = &["cudaMalloc", "cublasSgemm_v2"];

    fn session(stderr_lines: u32) -> Session {
        let config = Config { stderr_lines, ..Config::default() };
        Session::new(config, NAMES, Process::default(), "t.json".into())
    }

    fn fault(seq: u64) -> Fault {
        Fault {
            seq,
            api: "cublasSgemm_v2".into(),
            kind: FaultKind::ApiError,
            message: "m".into(),
            status: 13,
            status_name: "CUBLAS_STATUS_EXECUTION_FAILED".into(),
            error: None,
            cause: None,
            thread: 1,
            stream: None,
            time_ns: 0,
            handle: None,
            args: BTreeMap::new(),
            operands: vec![],
            memory: None,
            backtrace: vec![],
        }
    }

    #[test]
    fn counts_calls_per_hook_and_numbers_them() {
        let s = session(10);
        assert_eq!(s.begin(1), 1);
        assert_eq!(s.begin(1), 2);
        assert_eq!(s.begin(0), 3);
        let t = s.trace(Environment::default());
        assert_eq!(t.summary.calls.get("cublasSgemm_v2"), Some(&2));
        assert_eq!(t.summary.calls.get("cudaMalloc"), Some(&1));
        assert_eq!(t.format, trace::FORMAT);
    }

    #[test]
    fn caps_stderr_lines_with_one_summary_line() {
        let s = session(2);
        let lines: Vec<Vec<String>> = (1..=5).map(|i| s.add_fault(fault(i)).lines).collect();
        assert_eq!(lines[0].len(), 1);
        assert!(lines[0][0].starts_with("cublasguard: cublasSgemm_v2 #1: m [api_error]; trace: t.json"));
        assert_eq!(lines[1].len(), 1);
        assert!(lines[2][0].contains("further faults"));
        assert!(lines[3].is_empty() && lines[4].is_empty());
        assert_eq!(s.trace(Environment::default()).faults.len(), 5);
    }

    #[test]
    fn a_fault_reported_before_its_call_returns_is_amended_in_place() {
        let s = session(5);
        s.add_fault(fault(4));
        let mut done = fault(4);
        done.status = 7;
        assert!(s.replace_fault(done));
        let t = s.trace(Environment::default());
        assert_eq!((t.faults.len(), t.faults[0].status, t.summary.faults), (1, 7, 1));
        assert!(!s.replace_fault(fault(5)));
    }

    #[test]
    fn scans_one_call_in_n_per_site_and_stay_within_the_budget() {
        let mut s = session(1);
        s.config.scan_every = 3;
        let site_a: Vec<bool> = (0..6).map(|_| s.should_scan(1, 10)).collect();
        assert_eq!(site_a, [true, false, false, true, false, false]);
        assert!(s.should_scan(2, 10), "another site keeps its own count");
        s.config.scan_every = 1;
        s.config.budget = Some(0.5);
        let start = s.identity().process.started_at_ns;
        assert!(s.should_scan(1, start + 1000));
        s.add_scan_time(600); // 60% of the first 1000 ns
        assert!(!s.should_scan(1, start + 1000), "over budget: skip");
        assert!(s.should_scan(1, start + 2000), "back under budget later");
        let t = s.trace(Environment::default());
        assert_eq!((t.summary.scanned_calls, t.summary.skipped_scans), (5, 5));
    }

    #[test]
    fn stores_up_to_max_faults_then_counts() {
        let mut s = session(0);
        s.config.max_faults = 3;
        let stored: Vec<bool> = (1..=5).map(|i| s.add_fault(fault(i)).stored).collect();
        assert_eq!(stored, [true, true, true, false, false]);
        let t = s.trace(Environment::default());
        assert_eq!((t.faults.len(), t.summary.faults, t.summary.dropped_faults), (3, 5, 2));
    }

    #[test]
    fn a_forked_child_starts_its_own_record() {
        let s = session(5);
        s.begin(0);
        s.add_fault(fault(1));
        s.note_error(700, 1);
        let mut child = s.identity();
        child.process.pid = 99;
        child.trace_path = "child.json".into();
        s.start_child(child);
        let t = s.trace(Environment::default());
        assert!(t.faults.is_empty() && t.summary.calls.is_empty());
        assert_eq!((t.process.pid, s.trace_path().as_str()), (99, "child.json"));
        assert_eq!(s.known_error(), None);
        let mut requested = session(1);
        requested.config.trace_requested = true;
        requested.start_child(requested.identity());
        assert!(!requested.should_write_at_exit(true), "a worker that used no CUDA writes nothing");
        requested.begin(1);
        assert!(requested.should_write_at_exit(true));
    }

    #[test]
    fn remembers_only_the_first_sticky_error() {
        let s = session(1);
        s.note_error(1, 3); // not sticky
        assert_eq!(s.known_error(), None);
        s.note_error(700, 4);
        s.note_error(719, 9);
        assert_eq!(s.known_error(), Some(KnownError { code: 700, seq: 4 }));
    }

    #[test]
    fn writes_at_exit_only_when_it_should() {
        let s = session(1);
        assert!(!s.should_write_at_exit(true));
        let mut requested = session(1);
        requested.config.trace_requested = true;
        assert!(!requested.should_write_at_exit(false));
        assert!(requested.should_write_at_exit(true));
        s.add_fault(fault(1));
        assert!(s.should_write_at_exit(false));
    }
}
