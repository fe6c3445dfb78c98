//! The faults a process found: stored in full up to the cap, counted past it, with the
//! stderr lines capped separately.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::config::Config;
use crate::trace::Fault;

/// What became of a fault handed to the session.
#[derive(Debug, PartialEq, Eq)]
pub struct Recorded {
    /// Stored in full (false once `max_faults` are stored: then only counted).
    pub stored: bool,
    /// Lines for stderr (capped).
    pub lines: Vec<String>,
}

#[derive(Default)]
pub(super) struct FaultLog {
    faults: Mutex<Vec<Fault>>,
    total: AtomicU64,
    stored: AtomicU64,
    stderr_lines: AtomicU32,
    /// Held while the trace file is written (one writer at a time).
    pub writer: Mutex<()>,
}

impl FaultLog {
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }

    pub fn dropped(&self) -> u64 {
        self.total().saturating_sub(self.stored.load(Ordering::Relaxed))
    }

    pub fn stored(&self) -> Vec<Fault> {
        self.faults.lock().clone()
    }

    pub fn add(&self, config: &Config, fault: Fault, path: &str) -> Recorded {
        self.total.fetch_add(1, Ordering::Relaxed);
        let n = self.stderr_lines.fetch_add(1, Ordering::Relaxed);
        let cap = config.stderr_lines;
        let lines = if n < cap {
            vec![format!("cublasguard: {} #{}: {} [{}]; trace: {path}", fault.api, fault.seq, fault.message, fault.kind.name())]
        } else if n == cap {
            vec![format!("cublasguard: further faults are recorded in {path} only")]
        } else {
            Vec::new()
        };
        let mut faults = self.faults.lock();
        let stored = faults.len() < config.max_faults;
        if stored {
            faults.push(fault);
            self.stored.fetch_add(1, Ordering::Relaxed);
        }
        Recorded { stored, lines }
    }

    pub fn replace(&self, fault: Fault) -> bool {
        let mut faults = self.faults.lock();
        match faults.iter_mut().rev().find(|f| f.seq == fault.seq && f.api == fault.api) {
            Some(slot) => {
                *slot = fault;
                true
            }
            None => false,
        }
    }
}
