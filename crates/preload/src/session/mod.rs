//! One guarded process's record, grouped by lifetime:
//! - `CallCounts`: how many calls of each hooked function, and their sequence numbers;
//! - `FaultLog`: the faults found so far (and the one-writer lock for the trace file);
//! - `ScanPolicy`: which calls get their operands scanned (sampling, time budget, counters);
//! - `ProcessFacts`: who this process is and what it learnt about CUDA;
//! - the CUDA object tables (handles, allocations) and the flight recorder.
//!
//! A forked child gets a new session (`ChildSeed`), prepared by the parent before `fork()`:
//! the part it inherits (`Inherited`: the objects and recent calls) is copied, everything it
//! counts starts afresh.
//! Nothing is held across `fork()`, so the child never waits on or releases a lock that
//! another parent thread held at that moment. Safe Rust; the FFI layer owns the instances.

#![forbid(unsafe_code)]

pub mod breadcrumbs;
pub mod call_site;
mod device_scan;
mod facts;
mod faults;
pub mod graphs;
pub(crate) mod kernels;
pub mod launch_memory;
pub mod launches;
pub mod lt_descriptors;
pub mod origin_targets;
mod scans;
mod seq_ring;
pub mod verdicts;
pub mod waits;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

pub use crate::check::operand_call::KnownError;

/// `Session::lean_kept`: not known yet (or not kept: dumps are on), then each answer.
const LEAN_UNKNOWN: u8 = 0;
const LEAN_NO: u8 = 1;
const LEAN_UNCHECKED: u8 = 2;
const LEAN_PRECHECKED: u8 = 3;

/// How the hook layer may take a plain GEMM (`Session::lean_gemm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeanGemm {
    /// Through its handler and the checks.
    No,
    /// Every check of a matrix multiply off and no dump to write: only forwarded and recorded.
    Unchecked,
    /// Only `args` and `bounds` of them on (no scan, no synchronisation, no dump, no origin
    /// watch): forwarded and recorded when `gemm::DescribedGemm::clean_before` vouches that the checks
    /// would find nothing; otherwise through its handler.
    Prechecked,
}
use crate::config::Config;
use crate::recorder::{RecordedCall, Recorder};
use crate::state::{Allocations, HandleLookup, Handles, ThreadMemo};
use crate::trace::{self, Environment, Fault, Process, RecentCall, Summary, Trace};
pub use device_scan::{DeviceScanState, LoadedKernels};
pub use facts::{ForkOrigin, Identity, Versions};
pub use faults::Recorded;
pub use kernels::KernelNames;

use facts::ProcessFacts;
use faults::FaultLog;
use scans::ScanPolicy;

/// Calls per hooked function and the running sequence number.
struct CallCounts {
    hook_names: &'static [&'static str],
    /// One per hooked function, in the session itself: a hook's count is one atomic add at a
    /// fixed place (no slice to follow, no bounds to test).
    calls: [AtomicU64; crate::HOOK_COUNT],
    /// The sequence number of the process's first matrix multiply (0: none yet).
    first_matmul: AtomicU64,
    /// Faults kept out by each CUBLASGUARD_IGNORE rule.
    ignored: Box<[AtomicU64]>,
    /// One `init_failed` per hooked function: without a driver every call fails the same way.
    init_reported: Box<[AtomicBool]>,
    seq: AtomicU64,
    /// Operand dumps claimed (CUBLASGUARD_DUMP_MAX caps them).
    dumps: AtomicU64,
}

impl CallCounts {
    fn new(hook_names: &'static [&'static str], rules: usize) -> Self {
        Self {
            hook_names,
            ignored: (0..rules).map(|_| AtomicU64::new(0)).collect(),
            calls: [const { AtomicU64::new(0) }; crate::HOOK_COUNT],
            first_matmul: AtomicU64::new(0),
            init_reported: hook_names.iter().map(|_| AtomicBool::new(false)).collect(),
            seq: AtomicU64::new(0),
            dumps: AtomicU64::new(0),
        }
    }
}

/// What a forked child inherits: the objects the program created and its recent calls, copied
/// in the parent before `fork()` (`copy`). Everything else a session holds starts afresh in the
/// child (`Session::assemble`), so a field added here is inherited and one added to `Session`
/// is not, without a list of fields to keep in step elsewhere.
pub struct Inherited {
    pub config: Config,
    hook_names: &'static [&'static str],
    pub handles: Handles,
    /// cublasLt handles, a table of their own.
    pub lt_handles: Handles,
    /// cuDNN handles (cudnnCreate), with the stream cudnnSetStream gave each.
    pub cudnn_handles: Handles,
    pub allocations: Allocations,
    /// Pinned host memory (cudaMallocHost, cudaHostAlloc, cuMemAllocHost): not device memory,
    /// but named as what it is when a GEMM is given it.
    pub pinned: Allocations,
    /// cublasLt matmul descriptors and matrix layouts this process created and has not
    /// destroyed (the only ones the guard reads back), with their attributes.
    pub lt_descriptors: lt_descriptors::LtDescriptors,
    pub recorder: Recorder,
    /// Kernel names by host-stub address.
    pub kernels: KernelNames,
    /// Kernels' parameter layouts, by function.
    pub param_layouts: launch_memory::ParamLayouts,
}

impl Inherited {
    fn new(config: Config, hook_names: &'static [&'static str]) -> Self {
        Self {
            recorder: Recorder::new(config.ring),
            config,
            hook_names,
            handles: Handles::default(),
            lt_handles: Handles::default(),
            cudnn_handles: Handles::default(),
            allocations: Allocations::default(),
            pinned: Allocations::default(),
            lt_descriptors: lt_descriptors::LtDescriptors::default(),
            kernels: KernelNames::default(),
            param_layouts: launch_memory::ParamLayouts::default(),
        }
    }

    /// A copy for a forked child, taken in the parent.
    fn copy(&self) -> Self {
        Self {
            config: self.config.clone(),
            hook_names: self.hook_names,
            handles: self.handles.copy(),
            lt_handles: self.lt_handles.copy(),
            cudnn_handles: self.cudnn_handles.copy(),
            allocations: self.allocations.copy(),
            pinned: self.pinned.copy(),
            lt_descriptors: self.lt_descriptors.copy(),
            recorder: self.recorder.copy(),
            kernels: self.kernels.copy(),
            param_layouts: self.param_layouts.copy(),
        }
    }
}

/// A session: what it inherits from a parent (reached as `session.handles`, through `Deref`),
/// and what each process counts and learns for itself.
pub struct Session {
    inherited: Inherited,
    pub device_scan: DeviceScanState,
    /// CUBLASGUARD_SYNC=deferred: the breadcrumbs issued, and the pages they land in (a
    /// forked child starts without: its parent's pages are not mapped for it).
    pub breadcrumbs: breadcrumbs::Breadcrumbs,
    /// The host threads inside a CUDA synchronisation now (for the hang watchdog).
    pub waits: waits::Waits,
    /// CUBLASGUARD_SYNC=deferred: the calls whose NaN/Inf verdict waits for its scans to land
    /// (a forked child starts without: the regions they land in are its parent's).
    pub verdicts: verdicts::Verdicts,
    /// What calls captured into CUDA graphs read and write, kept for the graphs' launches.
    pub graphs: graphs::Graphs,
    /// The allocations each recent launch's parameters point into.
    pub launch_touches: launch_memory::LaunchTouches,
    /// Each kernel's launches counted from the start, and where recent launches were made.
    pub launch_counts: launches::LaunchCounts,
    pub launch_sites: launches::LaunchSites,
    /// When each allocation was last scanned and found finite.
    pub finite_seen: launch_memory::FiniteSeen,
    /// CUBLASGUARD_NAN_ORIGIN: the memory guarded calls use, watched after every launch.
    pub watched: launch_memory::Watched,
    /// CUBLASGUARD_ORIGIN_FROM: the memory the first run's consumed NaN/Inf was in, set once
    /// when the session starts (`origin_from_trace`).
    pub origin_targets: std::sync::OnceLock<Vec<origin_targets::OriginTarget>>,
    /// The last call at which a synchronisation by the guard found the device clean: launches
    /// before it did not fault.
    last_clean_sync: AtomicU64,
    /// `lean_gemm`'s answer, kept by the first call that asks (`lean_gemm_kept`).
    lean_kept: AtomicU8,
    /// The cuDNN error messages the guard read (`cudnnGetLastErrorString` clears what it
    /// returns), by thread, handed to the program's own next `cudnnGetLastErrorString`.
    pub cudnn_messages: parking_lot::Mutex<Vec<(u32, String)>>,
    counts: CallCounts,
    faults: FaultLog,
    scans: ScanPolicy,
    /// Partly inherited: who the parent was and the versions it learnt (`copy_with_first_call`).
    facts: ProcessFacts,
}

impl std::ops::Deref for Session {
    type Target = Inherited;
    fn deref(&self) -> &Inherited {
        &self.inherited
    }
}

impl std::ops::DerefMut for Session {
    fn deref_mut(&mut self) -> &mut Inherited {
        &mut self.inherited
    }
}

/// What a forked child's session starts from, prepared in the parent before `fork()`.
pub struct ChildSeed {
    inherited: Inherited,
    facts: ProcessFacts,
    /// The first run's memory the parent watches (its allocations' numbering goes on in the child).
    origin_targets: Option<Vec<origin_targets::OriginTarget>>,
    /// The parent's environment, for the crash writer's head until the child learns its own.
    pub environment: Environment,
}

impl ChildSeed {
    /// The parent's identity, as it was when the fork began.
    pub fn identity(&self) -> Identity {
        self.facts.identity()
    }

    pub fn config(&self) -> &Config {
        &self.inherited.config
    }

    /// The child's session, once it knows its pid, start time and trace path.
    pub fn into_session(self, identity: Identity) -> Session {
        let session = Session::assemble(self.inherited, self.facts.for_child(identity));
        if let Some(targets) = self.origin_targets {
            let _ = session.origin_targets.set(targets);
        }
        session
    }
}

impl Session {
    pub fn new(config: Config, hook_names: &'static [&'static str], process: Process, trace_path: String) -> Self {
        Self::assemble(Inherited::new(config, hook_names), ProcessFacts::new(Identity { process, trace_path }))
    }

    /// A session around what it inherited (from nobody, or from a parent): everything else
    /// starts afresh.
    fn assemble(inherited: Inherited, facts: ProcessFacts) -> Self {
        let started = facts.identity().process.started_at_ns;
        Self {
            device_scan: DeviceScanState::default(),
            breadcrumbs: breadcrumbs::Breadcrumbs::default(),
            waits: waits::Waits::default(),
            verdicts: verdicts::Verdicts::default(),
            graphs: graphs::Graphs::default(),
            launch_touches: launch_memory::LaunchTouches::default(),
            launch_counts: launches::LaunchCounts::default(),
            launch_sites: launches::LaunchSites::default(),
            finite_seen: launch_memory::FiniteSeen::default(),
            watched: launch_memory::Watched::default(),
            origin_targets: std::sync::OnceLock::new(),
            last_clean_sync: AtomicU64::new(0),
            lean_kept: AtomicU8::new(LEAN_UNKNOWN),
            cudnn_messages: parking_lot::Mutex::new(Vec::new()),
            counts: CallCounts::new(inherited.hook_names, inherited.config.ignore.len()),
            faults: FaultLog::default(),
            scans: ScanPolicy::new(started),
            facts,
            inherited,
        }
    }

    /// Everything a forked child keeps, copied now (in the parent, before `fork()`).
    pub fn prepare_child(&self, environment: Environment) -> ChildSeed {
        ChildSeed {
            inherited: self.inherited.copy(),
            facts: self.facts.copy_with_first_call(self.first_cuda_call()),
            origin_targets: self.origin_targets.get().cloned(),
            environment,
        }
    }

    pub fn trace_path(&self) -> String {
        self.facts.identity().trace_path
    }

    pub fn identity(&self) -> Identity {
        self.facts.identity()
    }

    /// The trace goes to `path` from now on (the claim on the old one was lost).
    pub fn move_trace(&self, path: String) {
        self.facts.move_trace(path);
    }

    /// Set when this process is the child of a fork made after the guard started.
    pub fn forked_from(&self) -> Option<ForkOrigin> {
        self.facts.forked_from.clone()
    }

    /// The one-writer lock for the trace file: the crash writer and the normal writer never
    /// write at once.
    pub fn writer_lock(&self) -> parking_lot::MutexGuard<'_, ()> {
        self.faults.writer.lock()
    }

    /// Whether the scan kernel may scan operands: not turned off, and not failed in this
    /// process (else the host scan reads them).
    pub fn scans_on_device(&self) -> bool {
        self.config.device_scan != crate::config::DeviceScan::Off && !self.device_scan.failed()
    }

    /// Whether this call's operands are scanned: one call in `scan_every` per call site (a
    /// site is the hooked function and the call's shape, which tells the layers of a model
    /// apart), and none while the scans are over the time budget. `now_ns` is wall time.
    pub fn should_scan(&self, site: u64, now_ns: u64) -> bool {
        self.scans.should_scan(&self.config, site, now_ns)
    }

    pub fn add_scan_time(&self, ns: u64) {
        self.scans.add_time(ns);
    }

    /// A call on a stream capturing a CUDA graph, for the summary (never counted as scanned).
    pub fn note_captured(&self) {
        self.scans.note_captured();
    }

    /// A captured call with an operand no replay of its graph scans, for the summary.
    pub fn note_captured_unfollowed(&self) {
        self.scans.note_captured_unfollowed();
    }

    /// Operands scanned by an even sample (past CUBLASGUARD_SCAN_BYTES), for the summary.
    pub fn note_sampled(&self, operands: u64) {
        self.scans.note_sampled(operands);
    }

    /// Counts a call of hook number `hook` and gives it its sequence number.
    pub fn begin(&self, hook: usize) -> u64 {
        if let Some(c) = self.counts.calls.get(hook) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        self.counts.seq.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// The handle a matrix multiply names, as the library would judge it. cublasLt takes a
    /// live cuBLAS handle as its own: PyTorch's `getCurrentCUDABlasLtHandle` passes its cuBLAS
    /// handle, cast, to every `cublasLtMatmul` (seen on an H200 with PyTorch 2.11), so a
    /// cublasLt handle that `cublasLtCreate` did not make is looked up among the cuBLAS ones.
    #[cfg(test)]
    pub fn matmul_handle(&self, lt: bool, handle: u64) -> HandleLookup {
        self.judge_handle(lt, |table| table.lookup(handle))
    }

    /// `matmul_handle`, through the calling thread's memo of its last lookups (no lock when
    /// the table did not change since).
    #[inline]
    pub fn matmul_handle_in(&self, lt: bool, handle: u64, memo: &ThreadMemo) -> HandleLookup {
        if !lt {
            // A cuBLAS GEMM's, on every lean call: the lookup itself, with no closure around it.
            return self.handles.lookup_in(handle, memo);
        }
        self.judge_handle(lt, |table| table.lookup_in(handle, memo))
    }

    fn judge_handle(&self, lt: bool, lookup: impl Fn(&Handles) -> HandleLookup) -> HandleLookup {
        if !lt {
            return lookup(&self.handles);
        }
        match lookup(&self.lt_handles) {
            HandleLookup::Alive(state) => HandleLookup::Alive(state),
            own => match lookup(&self.handles) {
                HandleLookup::Alive(state) => HandleLookup::Alive(state),
                _ => own,
            },
        }
    }

    /// The first CUBLASGUARD_IGNORE rule that `fault` matches, counted; `None`: keep the fault.
    pub fn ignores(&self, fault: &Fault) -> Option<usize> {
        let rule = self.config.ignore.iter().position(|r| r.matches(fault))?;
        if let Some(n) = self.counts.ignored.get(rule) {
            n.fetch_add(1, Ordering::Relaxed);
        }
        Some(rule)
    }

    /// A synchronisation the guard made at call `seq` found the device clean.
    pub fn note_clean_sync(&self, seq: u64) {
        self.last_clean_sync.fetch_max(seq, Ordering::Relaxed);
    }

    pub fn last_clean_sync(&self) -> u64 {
        self.last_clean_sync.load(Ordering::Relaxed)
    }

    /// How the hook layer may take a plain GEMM (its lean path), from the configuration as it
    /// is now (a test changes it on a session of its own); the hook layer asks
    /// `lean_gemm_kept`.
    #[inline]
    pub fn lean_gemm(&self) -> LeanGemm {
        let c = &self.config.checks;
        // `|`, not `||`: the flags side by side are read together.
        if c.nan | c.sync || self.dumps_left() {
            LeanGemm::No
        } else if !(c.args | c.bounds) {
            LeanGemm::Unchecked
        } else if self.config.nan_origin {
            LeanGemm::No
        } else {
            LeanGemm::Prechecked
        }
    }

    /// `lean_gemm`, as the hook layer asks it at every plain GEMM: one byte read. The answer is
    /// kept by the first call that asks once a matrix multiply was noted, as the configuration
    /// of a session in use cannot change any more (it is shared); not where dumps are on, as
    /// their quota runs out as calls go. Until then `No`: the session's first matrix multiply
    /// goes the whole way and notes itself (`note_matmul`), so the lean path never has to.
    #[inline(always)]
    pub fn lean_gemm_kept(&self) -> LeanGemm {
        let kept = self.lean_kept.load(Ordering::Relaxed);
        // The cheapest answer first: with every check off it is the only test.
        if kept == LEAN_UNCHECKED {
            return LeanGemm::Unchecked;
        }
        match kept {
            LEAN_PRECHECKED => LeanGemm::Prechecked,
            LEAN_NO => LeanGemm::No,
            _ => self.keep_lean_gemm(),
        }
    }

    #[cold]
    #[inline(never)]
    fn keep_lean_gemm(&self) -> LeanGemm {
        if self.first_matmul().is_none() {
            return LeanGemm::No;
        }
        let lean = self.lean_gemm();
        if self.config.dump_dir.is_none() {
            let kept = match lean {
                LeanGemm::No => LEAN_NO,
                LeanGemm::Unchecked => LEAN_UNCHECKED,
                LeanGemm::Prechecked => LEAN_PRECHECKED,
            };
            self.lean_kept.store(kept, Ordering::Relaxed);
        }
        lean
    }

    /// Whether a fault could still get an operand dump (dumps are on and not all used).
    pub fn dumps_left(&self) -> bool {
        self.config.dump_dir.is_some() && self.counts.dumps.load(Ordering::Relaxed) < self.config.dump_max as u64
    }

    /// Takes one dump from the quota; false when it is used up.
    pub fn claim_dump(&self) -> bool {
        let max = self.config.dump_max as u64;
        self.counts.dumps.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < max).then_some(n + 1)).is_ok()
    }

    /// Whether the fault of call `seq` to `api` is among the stored ones.
    pub fn is_stored(&self, seq: u64, api: &str) -> bool {
        self.faults.stored_index(seq, api).is_some()
    }

    /// The stored fault of call `seq` to `api`, as it is now.
    pub fn stored_fault(&self, seq: u64, api: &str) -> Option<Fault> {
        self.faults.stored_index(seq, api).and_then(|i| self.faults.with_fault(i, Fault::clone))
    }

    /// Remembers the first matrix multiply of the process.
    pub fn note_matmul(&self, seq: u64) {
        if self.counts.first_matmul.load(Ordering::Relaxed) == 0 {
            let _ = self.counts.first_matmul.compare_exchange(0, seq, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// Origin mode watches only the first run's memory (`origin_targets`), not every operand.
    pub fn origin_from_trace(&self) -> bool {
        self.origin_targets.get().is_some_and(|t| !t.is_empty())
    }

    pub fn first_matmul(&self) -> Option<u64> {
        Some(self.counts.first_matmul.load(Ordering::Relaxed)).filter(|&s| s != 0)
    }

    pub fn total_calls(&self) -> u64 {
        self.counts.calls.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }

    /// The first hooked call this process made (the recorder's oldest entry, or a count).
    fn first_cuda_call(&self) -> Option<String> {
        let oldest = self.recorder.snapshot().into_iter().next();
        match oldest {
            Some(c) if c.seq == 1 => Some(self.hook_name(c.hook as usize).to_string()),
            _ => self.counts.hook_names.iter().zip(self.counts.calls.iter()).find(|(_, n)| n.load(Ordering::Relaxed) > 0).map(|(name, _)| name.to_string()),
        }
    }

    pub fn hook_name(&self, hook: usize) -> &'static str {
        self.counts.hook_names.get(hook).copied().unwrap_or("?")
    }

    pub fn fault_count(&self) -> u64 {
        self.faults.total()
    }

    /// Faults counted but not stored (the cap was reached); lock-free, for the crash handler.
    pub fn dropped_fault_count(&self) -> u64 {
        self.faults.dropped()
    }

    /// Faults stored so far; lock-free, for the crash handler.
    pub fn stored_fault_count(&self) -> u64 {
        self.faults.stored_count()
    }

    /// Calls per hooked function, without locks or allocation (the crash handler uses it).
    pub fn visit_call_counts(&self, mut f: impl FnMut(&'static str, u64)) {
        for (name, n) in self.counts.hook_names.iter().zip(self.counts.calls.iter()) {
            let n = n.load(Ordering::Relaxed);
            if n > 0 {
                f(name, n);
            }
        }
    }

    pub fn known_error(&self) -> Option<KnownError> {
        self.facts.known_error()
    }

    /// `known_error` in two steps: its code now, the error later (`Facts::known_error_of`).
    #[inline]
    pub fn known_error_code(&self) -> i32 {
        self.facts.known_error_code()
    }

    pub fn known_error_of(&self, code: i32) -> Option<KnownError> {
        self.facts.known_error_of(code)
    }

    /// Remembers a sticky error first revealed at call `seq`.
    pub fn note_error(&self, code: i32, seq: u64) {
        self.facts.note_error(code, seq);
    }

    /// True the first time hook number `hook` reports an initialisation failure.
    pub fn first_init_failure(&self, hook: usize) -> bool {
        self.counts.init_reported.get(hook).is_some_and(|b| !b.swap(true, Ordering::Relaxed))
    }

    pub fn set_driver_error(&self, text: String) {
        self.facts.set_driver_error(text);
    }

    pub fn driver_error(&self) -> Option<String> {
        self.facts.driver_error()
    }

    pub fn note_device_count(&self, status: i32, count: Option<i32>) {
        self.facts.note_device_count(status, count);
    }

    pub fn device_count(&self) -> Option<(i32, Option<i32>)> {
        self.facts.device_count()
    }

    /// A failed capability probe: kept as a note for the trace's environment, and as the
    /// fault it becomes if the program exits with a failure status.
    pub fn keep_probe(&self, fault: Fault) {
        self.facts.keep_probe(fault);
    }

    /// The note for the trace's environment.
    pub fn probe_note(&self) -> Option<trace::ProbeNote> {
        self.facts.probe().map(|f| trace::ProbeNote {
            seq: f.seq,
            api: f.api,
            status: f.status,
            status_name: f.status_name,
            cause: f.cause,
            python_stack: f.python_stack,
            thread_name: f.thread_name,
            backtrace: f.backtrace,
        })
    }

    /// At exit with `status`: a failed probe becomes the fault that explains a failing exit,
    /// unless another fault already does (a later CUDA call that failed, say). Returns what
    /// was recorded, for the outlet.
    pub fn probe_at_exit(&self, status: i32, now_ns: u64) -> Option<Recorded> {
        if status == 0 || self.fault_count() > 0 {
            return None;
        }
        let mut fault = self.facts.probe()?;
        fault.message = format!("{}; the program then exited with status {status}", fault.message);
        Some(self.add_fault(fault, now_ns))
    }

    /// CUDA versions learnt while the libraries were alive: (runtime, driver, cuBLAS).
    pub fn versions(&self) -> Versions {
        self.facts.versions()
    }

    pub fn learn_versions(&self, fresh: Versions) -> Versions {
        self.facts.learn_versions(fresh)
    }

    /// Stores a fault (or only counts it, past `max_faults`); returns what became of it.
    pub fn add_fault(&self, fault: Fault, now_ns: u64) -> Recorded {
        self.faults.add(&self.config, fault, &self.trace_path(), now_ns)
    }

    /// Replaces the stored fault of call `seq` with `fault` (its status is known now); its
    /// index, or `None` when it was not stored (past the cap).
    pub fn replace_fault(&self, fault: Fault) -> Option<usize> {
        self.faults.replace(fault)
    }

    /// The `gpu_hang` recorded on `stream`, if any.
    pub fn stored_hang(&self, stream: &str) -> Option<Fault> {
        self.faults.stored_hang(stream)
    }

    /// Replaces the `gpu_hang` recorded on the same stream (one record per stuck stream).
    pub fn replace_hang(&self, fault: Fault) -> Option<usize> {
        self.faults.replace_hang(fault)
    }

    /// Whether a new fault would only be counted.
    pub fn faults_full(&self) -> bool {
        self.faults.is_full(&self.config)
    }

    /// Runs `f` on stored fault number `index`.
    pub fn with_fault<R>(&self, index: usize, f: impl FnOnce(&Fault) -> R) -> Option<R> {
        self.faults.with_fault(index, f)
    }

    /// Whether the trace belongs on disk at exit. A named path is written for every process
    /// that used CUDA, so a shell wrapper that merely exits after its child does not replace
    /// the child's trace with an empty one.
    /// A forked child (a DataLoader worker, say) that made no CUDA call of its own writes
    /// nothing, so workers do not each leave an empty trace.
    pub fn should_write_at_exit(&self, cuda_loaded: bool) -> bool {
        let used_cuda = self.total_calls() > 0 || (cuda_loaded && self.facts.forked_from.is_none());
        self.fault_count() > 0 || (self.config.trace_requested && used_cuda)
    }

    pub fn trace(&self, environment: Environment) -> Trace {
        let (faults, total) = self.faults.stored();
        Trace {
            format: trace::FORMAT.into(),
            version: trace::VERSION,
            guard: trace::GuardBuild::current(),
            process: self.facts.identity().process,
            environment,
            recent_calls: self.recorder.snapshot().iter().map(|c| self.recent_call(c)).collect(),
            summary: Summary::from_source(&self.live_summary(total, total.saturating_sub(faults.len() as u64))),
            faults,
            crash: None,
        }
    }

    fn recent_call(&self, call: &RecordedCall) -> RecentCall {
        let mut args = call.args.to_args();
        if let crate::recorder::CallArgs::Launch { func, .. } = call.args {
            if let Some(name) = self.kernels.known(func) {
                args.insert("kernel", name);
            }
        }
        RecentCall {
            seq: call.seq,
            api: self.hook_name(call.hook as usize).to_string(),
            status: call.status,
            time_ns: call.time_ns,
            duration_ns: call.duration_ns,
            thread: call.thread,
            args,
            scanned: call.scanned,
            captured: call.captured,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recorder::CallArgs;

    static NAMES: &[&str] = &["cudaMalloc", "cublasSgemm_v2"];

    fn session(stderr_lines: u32) -> Session {
        let config = Config { stderr_lines, ..Config::default() };
        Session::new(config, NAMES, Process::default(), "t.json".into())
    }

    #[test]
    fn cublaslt_takes_a_live_cublas_handle_as_its_own_as_pytorch_passes_it() {
        let s = session(0);
        s.handles.created(0x100); // cublasCreate
        s.lt_handles.created(0x200); // cublasLtCreate
        assert!(matches!(s.matmul_handle(true, 0x100), HandleLookup::Alive(_)));
        assert!(matches!(s.matmul_handle(true, 0x200), HandleLookup::Alive(_)));
        assert!(matches!(s.matmul_handle(false, 0x200), HandleLookup::Unknown), "a cublasLt handle is no cuBLAS handle");
        assert!(matches!(s.matmul_handle(true, 0x300), HandleLookup::Unknown));
        s.handles.destroyed(0x100, 9);
        assert!(matches!(s.matmul_handle(true, 0x100), HandleLookup::Unknown), "a destroyed cuBLAS handle is not taken");
        s.lt_handles.destroyed(0x200, 10);
        assert!(matches!(s.matmul_handle(true, 0x200), HandleLookup::Destroyed(10)));
    }

    fn fault(seq: u64) -> Fault {
        crate::trace::sample_fault(seq)
    }

    fn child_of(s: &Session, pid: u32, path: &str) -> Session {
        let mut identity = s.identity();
        identity.process.pid = pid;
        identity.process.started_at_ns = 5_000;
        identity.trace_path = path.into();
        s.prepare_child(Environment::default()).into_session(identity)
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
    fn the_kept_lean_answer_is_the_configurations_and_follows_the_dump_quota() {
        for (checks, nan_origin) in [("none", false), ("args,bounds", false), ("args,bounds", true), ("args,nan", false), ("sync", false)] {
            let mut s = session(10);
            s.config.checks = crate::config::Checks::parse(checks).unwrap();
            s.config.nan_origin = nan_origin;
            let answer = s.lean_gemm();
            s.note_matmul(s.begin(1));
            assert_eq!(s.lean_gemm_kept(), answer, "{checks}");
            assert_eq!(s.lean_gemm_kept(), answer, "{checks}, kept");
        }
        // With dumps on, nothing is kept: the answer changes once the quota is used up.
        let mut s = session(10);
        s.config.checks = crate::config::Checks::NONE;
        s.config.dump_dir = Some("dumps".into());
        s.config.dump_max = 1;
        s.note_matmul(s.begin(1));
        assert_eq!(s.lean_gemm_kept(), LeanGemm::No);
        assert!(s.claim_dump());
        assert_eq!(s.lean_gemm_kept(), LeanGemm::Unchecked);
    }

    #[test]
    fn until_a_matrix_multiply_is_noted_no_gemm_takes_the_lean_path_so_the_first_notes_itself() {
        let mut s = session(10);
        s.config.checks = crate::config::Checks::NONE;
        assert_eq!(s.lean_gemm(), LeanGemm::Unchecked);
        assert_eq!((s.lean_gemm_kept(), s.lean_gemm_kept()), (LeanGemm::No, LeanGemm::No), "not kept before the first");
        s.begin(0);
        let first = s.begin(1);
        s.note_matmul(first);
        assert_eq!(s.lean_gemm_kept(), LeanGemm::Unchecked);
        s.note_matmul(s.begin(1));
        assert_eq!(s.first_matmul(), Some(first));
    }

    #[test]
    fn caps_stderr_lines_with_one_summary_line() {
        let s = session(2);
        let lines: Vec<Vec<String>> = (1..=5).map(|i| s.add_fault(fault(i), 0).lines).collect();
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
        s.add_fault(fault(4), 0);
        let mut done = fault(4);
        done.status = 7;
        assert_eq!(s.replace_fault(done), Some(0));
        let t = s.trace(Environment::default());
        assert_eq!((t.faults.len(), t.faults[0].status, t.summary.faults), (1, 7, 1));
        assert_eq!(s.replace_fault(fault(5)), None);
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
        let stored: Vec<bool> = (1..=5).map(|i| s.add_fault(fault(i), 0).stored).collect();
        assert_eq!(stored, [true, true, true, false, false]);
        let t = s.trace(Environment::default());
        assert_eq!((t.faults.len(), t.summary.faults, t.summary.dropped_faults), (3, 5, 2));
    }

    #[test]
    fn a_trace_taken_while_threads_store_faults_counts_what_it_lists() {
        let mut s = session(0);
        s.config.max_faults = 100_000;
        let (s, stop) = (&s, &std::sync::atomic::AtomicBool::new(false));
        std::thread::scope(|scope| {
            for t in 0..4u64 {
                scope.spawn(move || {
                    for i in 0..3_000 {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        s.add_fault(fault(t * 3_000 + i), 0);
                    }
                });
            }
            while s.fault_count() < 100 {
                std::thread::yield_now();
            }
            for _ in 0..10 {
                let t = s.trace(Environment::default());
                let (listed, total, dropped) = (t.faults.len() as u64, t.summary.faults, t.summary.dropped_faults);
                assert_eq!(listed + dropped, total);
                assert_eq!(dropped, 0, "{dropped} dropped below the cap ({listed} listed)");
            }
            stop.store(true, Ordering::Relaxed);
        });
    }

    #[test]
    fn a_forked_child_starts_its_own_record() {
        let s = session(5);
        s.begin(0);
        s.add_fault(fault(1), 0);
        s.note_error(700, 1);
        s.handles.created(0x77);
        s.recorder.record(&RecordedCall {
            seq: 1,
            hook: 0,
            status: 0,
            time_ns: 1,
            duration_ns: 0,
            thread: 1,
            args: CallArgs::None,
            scanned: false,
            captured: false,
        });
        let child = child_of(&s, 99, "child.json");
        let t = child.trace(Environment::default());
        assert!(t.faults.is_empty() && t.summary.calls.is_empty());
        assert_eq!((t.process.pid, child.trace_path().as_str()), (99, "child.json"));
        assert_eq!(child.known_error(), None);
        assert!(matches!(child.handles.lookup(0x77), crate::state::HandleLookup::Alive(_)), "inherited handles are kept");
        assert_eq!(t.recent_calls.len(), 1, "inherited recent calls are kept");
        let origin = child.forked_from().expect("fork origin");
        assert_eq!((origin.parent_pid, origin.parent_first_call.as_deref()), (0, Some("cudaMalloc")));
        assert_eq!(s.fault_count(), 1, "the parent keeps its own");
        let mut requested = session(1);
        requested.config.trace_requested = true;
        let worker = child_of(&requested, 5, "w.json");
        assert!(!worker.should_write_at_exit(true), "a worker that used no CUDA writes nothing");
        worker.begin(1);
        assert!(worker.should_write_at_exit(true));
    }

    #[test]
    fn a_forked_child_inherits_every_table_and_recounts_everything_else() {
        let mut parent = session(5);
        parent.config.dump_dir = Some("dumps".into());
        parent.config.dump_max = 1;
        parent.lt_handles.created(0x11);
        parent.allocations.insert(crate::state::Allocation { base: 0x1000, size: 64, time_ns: 0, stream: None, api: "cudaMalloc", ordinal: 0 });
        parent.pinned.insert(crate::state::Allocation { base: 0x9000, size: 8, time_ns: 0, stream: None, api: "cudaMallocHost", ordinal: 0 });
        parent.lt_descriptors.created(0x22);
        parent.kernels.register(0x33, "kernel".into());
        parent.note_matmul(parent.begin(1));
        parent.note_clean_sync(1);
        assert!(parent.claim_dump() && parent.first_init_failure(0) && parent.device_scan.fail("no kernel".into()));
        parent.add_fault(fault(1), 0);
        assert!(parent.should_scan(1, 10));
        let child = child_of(&parent, 42, "c.json");
        // Inherited: the tables of what the program created, and the configuration.
        assert_eq!(child.config.dump_dir.as_deref(), Some("dumps"));
        assert!(matches!(child.matmul_handle(true, 0x11), HandleLookup::Alive(_)));
        assert_eq!(child.allocations.containing(0x1010).map(|a| a.base), Some(0x1000));
        assert_eq!(child.allocations.totals().bytes, 64);
        assert!(child.pinned.containing(0x9000).is_some());
        assert!(child.lt_descriptors.contains(0x22));
        assert_eq!(child.kernels.known(0x33).as_deref(), Some("kernel"));
        // Afresh: what the child counts and learns of its own CUDA.
        assert_eq!((child.total_calls(), child.first_matmul(), child.last_clean_sync(), child.fault_count()), (0, None, 0, 0));
        assert!(child.dumps_left() && child.first_init_failure(0) && !child.device_scan.failed());
        let t = child.trace(Environment::default());
        assert_eq!((t.summary.scanned_calls, t.summary.skipped_scans), (0, 0));
        // And the parent's tables are its own: a change in the child leaves them as they were.
        child.allocations.remove(0x1000);
        assert!(parent.allocations.containing(0x1010).is_some());
    }

    #[test]
    fn a_forked_child_under_a_budget_measures_only_its_own_scans() {
        let mut s = session(1);
        s.config.budget = Some(0.5);
        let start = s.identity().process.started_at_ns;
        assert!(s.should_scan(1, start + 1_000_000));
        s.add_scan_time(10_000_000); // the parent is far over budget
        assert!(!s.should_scan(1, start + 1_000_000));
        let child = child_of(&s, 7, "c.json");
        assert!(child.should_scan(1, 5_000 + 1_000), "the child scans as a fresh process");
        let t = child.trace(Environment::default());
        assert_eq!((t.summary.scanned_calls, t.summary.skipped_scans), (1, 0), "only the child's own scans");
    }

    #[test]
    fn a_forked_child_watches_the_first_runs_memory_its_parent_watches_numbering_on_from_the_parents_allocations() {
        let s = session(1);
        let target = origin_targets::OriginTarget {
            ordinal: 3,
            allocation_size: 64,
            offset: 0,
            bytes: 64,
            dtype: crate::scan::DType::F32,
            consumed_by: (9, "cublasSgemm_v2".into()),
        };
        let _ = s.origin_targets.set(vec![target.clone()]);
        let made = crate::state::Allocation { base: 0x1000, size: 64, time_ns: 0, stream: None, api: "cudaMalloc", ordinal: 0 };
        assert_eq!((s.allocations.insert(made), s.allocations.insert(crate::state::Allocation { base: 0x2000, ..made })), (1, 2));
        let child = child_of(&s, 7, "c.json");
        assert!(child.origin_from_trace());
        assert_eq!(child.origin_targets.get().map(Vec::as_slice), Some(&[target][..]));
        assert_eq!(child.allocations.insert(crate::state::Allocation { base: 0x3000, ..made }), 3, "the child's next allocation is the process's third");
        assert!(!child_of(&session(1), 8, "d.json").origin_from_trace(), "no trace, no targets");
    }

    #[test]
    fn a_run_of_faults_rewrites_the_trace_a_logarithmic_number_of_times() {
        let mut s = session(0);
        s.config.max_faults = 100_000;
        let rewrites = (1..=3000).filter(|&i| s.add_fault(fault(i), 1_000).rewrite).count();
        // The first 8, then 16, 32, ..., 2048: at a fixed clock nothing else is due.
        assert_eq!(rewrites, 8 + 8);
        assert!(s.add_fault(fault(3001), 1_000 + 300_000_000).rewrite, "a quarter of a second later, one is due");
        s.config.max_faults = 3001;
        let past_cap = s.add_fault(fault(3002), 2_000_000_000);
        assert!(!past_cap.stored && !past_cap.rewrite && past_cap.index.is_none());
        assert!(s.faults_full());
    }

    #[test]
    fn a_fault_stored_after_a_later_calls_keeps_its_own_slot_and_the_trace_is_in_call_order() {
        let s = session(0);
        let indices: Vec<_> = [5, 9, 7, 9, 1].iter().map(|&seq| s.add_fault(fault(seq), 1_000).index).collect();
        // Each fault's index is the slot the crash writer lists it from: never moved by the
        // faults stored after it.
        assert_eq!(indices, [Some(0), Some(1), Some(2), Some(3), Some(4)]);
        assert_eq!(s.with_fault(2, |f| f.seq), Some(7));
        let t = s.trace(Environment::default());
        assert_eq!(t.faults.iter().map(|f| f.seq).collect::<Vec<_>>(), [1, 5, 7, 9, 9]);
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
        s.add_fault(fault(1), 0);
        assert!(s.should_write_at_exit(false));
    }
}
