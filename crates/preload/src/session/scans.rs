//! Which calls get their operands scanned: one in N per call site, within a time budget.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::config::Config;

/// Call sites tracked for CUBLASGUARD_SCAN_EVERY (hash buckets; a collision only shares a count).
const SITES: usize = 1024;

pub(super) struct ScanPolicy {
    /// When this process started (a forked child: when it was forked), for the budget.
    started_ns: u64,
    site_calls: Box<[AtomicU32]>,
    /// Time spent scanning, for CUBLASGUARD_BUDGET.
    scan_ns: AtomicU64,
    scanned_calls: AtomicU64,
    skipped_scans: AtomicU64,
    sampled_operands: AtomicU64,
    captured_calls: AtomicU64,
    captured_unfollowed: AtomicU64,
}

impl ScanPolicy {
    pub fn new(started_ns: u64) -> Self {
        Self {
            started_ns,
            site_calls: (0..SITES).map(|_| AtomicU32::new(0)).collect(),
            scan_ns: AtomicU64::new(0),
            scanned_calls: AtomicU64::new(0),
            skipped_scans: AtomicU64::new(0),
            sampled_operands: AtomicU64::new(0),
            captured_calls: AtomicU64::new(0),
            captured_unfollowed: AtomicU64::new(0),
        }
    }

    pub fn should_scan(&self, config: &Config, site: u64, now_ns: u64) -> bool {
        let every = config.scan_every.max(1);
        let turn = every == 1 || {
            let bucket = (site.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 54) as usize % SITES;
            self.site_calls[bucket].fetch_add(1, Ordering::Relaxed).is_multiple_of(every)
        };
        let within_budget = match config.budget {
            None => true,
            Some(fraction) => {
                let elapsed = now_ns.saturating_sub(self.started_ns).max(1);
                (self.scan_ns.load(Ordering::Relaxed) as f64) < fraction * elapsed as f64
            }
        };
        let scan = turn && within_budget;
        let counter = if scan { &self.scanned_calls } else { &self.skipped_scans };
        counter.fetch_add(1, Ordering::Relaxed);
        scan
    }

    pub fn add_time(&self, ns: u64) {
        self.scan_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// (scanned calls, skipped scans).
    pub fn counts(&self) -> (u64, u64) {
        (self.scanned_calls.load(Ordering::Relaxed), self.skipped_scans.load(Ordering::Relaxed))
    }

    /// An operand past CUBLASGUARD_SCAN_BYTES was scanned by an even sample.
    pub fn note_sampled(&self, operands: u64) {
        self.sampled_operands.fetch_add(operands, Ordering::Relaxed);
    }

    /// A call on a stream capturing a CUDA graph: not scanned, and not counted as scanned.
    pub fn note_captured(&self) {
        self.captured_calls.fetch_add(1, Ordering::Relaxed);
    }

    pub fn captured_calls(&self) -> u64 {
        self.captured_calls.load(Ordering::Relaxed)
    }

    /// A captured call with an operand its graph's replays do not scan (a pointer-array batch,
    /// a triangle).
    pub fn note_captured_unfollowed(&self) {
        self.captured_unfollowed.fetch_add(1, Ordering::Relaxed);
    }

    pub fn captured_unfollowed(&self) -> u64 {
        self.captured_unfollowed.load(Ordering::Relaxed)
    }

    pub fn sampled_operands(&self) -> u64 {
        self.sampled_operands.load(Ordering::Relaxed)
    }
}
