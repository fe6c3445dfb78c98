//! The faults a process found: stored in full up to the cap, counted past it, with the
//! stderr lines capped separately. A fault is counted when it is stored or refused, under the
//! same lock, so the counts always add up: total = stored + dropped, and dropped only once the
//! cap is reached.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use crate::config::Config;
use crate::trace::{Fault, FaultKind};

/// What became of a fault handed to the session.
#[derive(Debug, PartialEq, Eq)]
pub struct Recorded {
    /// Stored in full (false once `max_faults` are stored: then only counted).
    pub stored: bool,
    /// Its place among the stored faults.
    pub index: Option<usize>,
    /// Lines for stderr (capped).
    pub lines: Vec<String>,
    /// The trace on disk is due for a rewrite. Rewriting after every fault costs O(n) each, so
    /// O(n^2) for a run of faults: the first few are written at once, then at each power of two,
    /// or when the last write is older than `REWRITE_AFTER_NS`; the exit writes the rest, and
    /// the crash writer has every stored fault whatever the file on disk holds.
    pub rewrite: bool,
}

/// Faults written to disk as soon as they are stored.
const REWRITE_FIRST: u64 = 8;
const REWRITE_AFTER_NS: u64 = 250_000_000;

#[derive(Default)]
pub(super) struct FaultLog {
    faults: Mutex<Vec<Fault>>,
    total: AtomicU64,
    stored: AtomicU64,
    /// Faults that found the cap reached: counted, not stored.
    dropped: AtomicU64,
    stderr_lines: AtomicU32,
    /// The call of the first NaN/Inf fault (0: none yet). NaN/Inf that later calls merely
    /// consume is usually that one passed on: one line says so, not one line per call.
    first_nonfinite: AtomicU64,
    propagation_said: AtomicBool,
    last_rewrite_ns: AtomicU64,
    /// Held while the trace file is written (one writer at a time).
    pub writer: Mutex<()>,
}

impl FaultLog {
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::SeqCst)
    }

    /// Lock-free, for the crash handler. Read before `stored_count`, a nonzero value implies
    /// that `stored_count` reads the cap (the last stored fault was counted first).
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::SeqCst)
    }

    /// Lock-free, for the crash handler.
    pub fn stored_count(&self) -> u64 {
        self.stored.load(Ordering::SeqCst)
    }

    /// The stored faults in call order, and the total count, as of one moment. They are kept
    /// in the order they were stored (a fault's index is its crash-writer slot, which never
    /// changes, so a crash handler streaming the slots while other threads store faults lists
    /// each once); faults of one call keep the order they were stored in.
    pub fn stored(&self) -> (Vec<Fault>, u64) {
        let faults = self.faults.lock();
        let total = self.total();
        let mut in_call_order = faults.clone();
        drop(faults);
        in_call_order.sort_by_key(|f| f.seq);
        (in_call_order, total)
    }

    /// Whether a new fault would only be counted (the cap is reached): then it is not worth
    /// gathering a backtrace or asking the device for its memory.
    pub fn is_full(&self, config: &Config) -> bool {
        self.stored.load(Ordering::Relaxed) >= config.max_faults as u64
    }

    /// The place of the stored fault of call `seq` to `api`.
    pub fn stored_index(&self, seq: u64, api: &str) -> Option<usize> {
        self.faults.lock().iter().rposition(|f| f.seq == seq && f.api == api)
    }

    /// Runs `f` on stored fault number `index`.
    pub fn with_fault<R>(&self, index: usize, f: impl FnOnce(&Fault) -> R) -> Option<R> {
        self.faults.lock().get(index).map(f)
    }

    fn rewrite_due(&self, stored: u64, now_ns: u64) -> bool {
        let last = self.last_rewrite_ns.load(Ordering::Relaxed);
        let due = stored <= REWRITE_FIRST || stored.is_power_of_two() || now_ns.saturating_sub(last) >= REWRITE_AFTER_NS;
        if due {
            self.last_rewrite_ns.store(now_ns, Ordering::Relaxed);
        }
        due
    }

    pub fn add(&self, config: &Config, fault: Fault, path: &str, now_ns: u64) -> Recorded {
        // The first NaN/Inf fault's call, if this one is a later NaN/Inf fault.
        // The earliest call wins, whatever order verdicts are judged in (two harvesters, two
        // streams): a note only ever points to an earlier call.
        let earlier_nonfinite = matches!(fault.kind, FaultKind::NonfiniteInput | FaultKind::NonfiniteOutput | FaultKind::NonfiniteOrigin)
            .then(|| {
                let seq = fault.seq.max(1);
                let prior = self.first_nonfinite.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |first| (first == 0 || seq < first).then_some(seq));
                prior.err().filter(|&first| first < seq)
            })
            .flatten();
        let lines = match earlier_nonfinite {
            // Consumed after an earlier NaN/Inf: said once, as propagation, then silent.
            Some(first) if fault.kind == FaultKind::NonfiniteInput => {
                if self.propagation_said.swap(true, Ordering::Relaxed) {
                    Vec::new()
                } else {
                    vec![format!(
                        "cublasguard: {} #{} and later calls consume NaN/Inf too, probably passed on from #{first}; recorded in {path} only",
                        fault.api, fault.seq
                    )]
                }
            }
            _ => self.line(config, &fault, path),
        };
        let mut faults = self.faults.lock();
        let stored = faults.len() < config.max_faults;
        // Appended, never inserted: its index is its crash-writer slot for good. Inserting in
        // call order moved later faults up a slot each, and a crash handler streaming the slots
        // while other threads re-rendered them listed some twice and others not at all.
        let index = stored.then_some(faults.len());
        // Counted under the lock, with the insertion or the refusal: a snapshot taken under it,
        // or a crash handler reading dropped before stored, never sees a fault half counted.
        if stored {
            faults.push(fault);
            self.stored.fetch_add(1, Ordering::SeqCst);
        } else {
            self.dropped.fetch_add(1, Ordering::SeqCst);
        }
        self.total.fetch_add(1, Ordering::SeqCst);
        drop(faults);
        let rewrite = stored && self.rewrite_due(self.stored.load(Ordering::Relaxed), now_ns);
        Recorded { stored, index, lines, rewrite }
    }

    /// The fault's stderr line, within the cap.
    fn line(&self, config: &Config, fault: &Fault, path: &str) -> Vec<String> {
        let n = self.stderr_lines.fetch_add(1, Ordering::Relaxed);
        let cap = config.stderr_lines;
        if n < cap {
            vec![format!("cublasguard: {} #{}: {} [{}]; trace: {path}", fault.api, fault.seq, fault.message, fault.kind.name())]
        } else if n == cap {
            vec![format!("cublasguard: further faults are recorded in {path} only")]
        } else {
            Vec::new()
        }
    }

    /// Replaces the stored fault of the same call; its index, or `None` when it was not stored.
    /// The stored backtrace, memory state and Python frames are kept when the new one has none:
    /// they describe the moment of the fault, before the call ran.
    pub fn stored_hang(&self, stream: &str) -> Option<Fault> {
        self.faults.lock().iter().rev().find(|f| f.kind == crate::trace::FaultKind::GpuHang && f.stream.as_deref() == Some(stream)).cloned()
    }

    pub fn replace_hang(&self, fault: Fault) -> Option<usize> {
        let mut faults = self.faults.lock();
        let index = faults.iter().rposition(|f| f.kind == crate::trace::FaultKind::GpuHang && f.stream == fault.stream)?;
        faults[index] = fault;
        Some(index)
    }

    pub fn replace(&self, mut fault: Fault) -> Option<usize> {
        let mut faults = self.faults.lock();
        let index = faults.iter().rposition(|f| f.seq == fault.seq && f.api == fault.api)?;
        let old = &mut faults[index];
        if fault.backtrace.is_empty() {
            fault.backtrace = std::mem::take(&mut old.backtrace);
        }
        if fault.memory.as_ref().is_none_or(|m| m.free.is_none()) && old.memory.as_ref().is_some_and(|m| m.free.is_some()) {
            fault.memory = old.memory.take();
        }
        if fault.gpu_health.is_none() {
            fault.gpu_health = old.gpu_health.take();
        }
        // The hardware named at the fault stays the cause of the call's final fault.
        if fault.cause.is_none() && old.cause.as_ref().is_some_and(|c| c.kind == crate::trace::InitCauseKind::GpuHardware) {
            fault.cause = old.cause.take();
        }
        if fault.python_stack.is_empty() && fault.python_stack_note.is_none() {
            fault.python_stack = std::mem::take(&mut old.python_stack);
            fault.python_stack_note = old.python_stack_note.take();
            fault.thread_name = old.thread_name.take();
        }
        *old = fault;
        Some(index)
    }
}

/// The summary of a live session, read from its counters without locks or allocation (the
/// crash handler walks it): the one source of the summary's numbers for the normal writer and
/// the crash writer alike. `faults` and `dropped` are given: each writer counts the faults it
/// lists (see `Session::live_summary`).
pub struct LiveSummary<'a> {
    session: &'a super::Session,
    faults: u64,
    dropped: u64,
}

impl super::Session {
    /// The summary as of now, counting `faults` found and `dropped` of them past the cap.
    pub fn live_summary(&self, faults: u64, dropped: u64) -> LiveSummary<'_> {
        LiveSummary { session: self, faults, dropped }
    }
}

impl crate::trace::SummarySource for LiveSummary<'_> {
    fn calls(&self, f: &mut dyn FnMut(&str, u64)) {
        self.session.visit_call_counts(f);
    }
    fn faults(&self) -> u64 {
        self.faults
    }
    fn dropped_faults(&self) -> u64 {
        self.dropped
    }
    fn scanned_calls(&self) -> u64 {
        self.session.scans.counts().0
    }
    fn skipped_scans(&self) -> u64 {
        self.session.scans.counts().1
    }
    fn sampled_operands(&self) -> u64 {
        self.session.scans.sampled_operands()
    }
    fn captured_calls(&self) -> u64 {
        self.session.scans.captured_calls()
    }
    fn unfollowed_captured_calls(&self) -> u64 {
        self.session.scans.captured_unfollowed()
    }
    fn deferred_verdicts(&self, f: &mut dyn FnMut(&str, u64)) {
        let (deferred, judged_at_call, no_room, waiting) = self.session.verdicts.counts();
        let unfinished = self.session.verdicts.unfinished_at_exit();
        let most_waiting = self.session.verdicts.most_waiting();
        for (name, n) in [
            ("deferred", deferred),
            ("judged_at_call", judged_at_call),
            ("no_room", no_room),
            ("waiting", waiting),
            ("most_waiting", most_waiting),
            ("unfinished_at_exit", unfinished),
        ] {
            if n > 0 {
                f(name, n);
            }
        }
    }
    fn ignored_faults(&self, f: &mut dyn FnMut(&str, u64)) {
        for (rule, n) in self.session.config.ignore.iter().zip(self.session.counts.ignored.iter()) {
            f(&rule.text, n.load(Ordering::Relaxed));
        }
    }
}
