//! The flight recorder: a fixed ring of the most recent intercepted calls. Entries are plain
//! `Copy` data, so recording a call allocates nothing.

use parking_lot::Mutex;

/// The arguments worth keeping for a call, in a fixed-size form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallArgs {
    None,
    Gemm { transa: i32, transb: i32, m: i64, n: i64, k: i64, lda: i64, ldb: i64, ldc: i64 },
    Size { size: u64, stream: Option<u64> },
    Pointer { ptr: u64, stream: Option<u64> },
    Handle { handle: u64, value: i64 },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordedCall {
    pub seq: u64,
    pub api: &'static str,
    pub status: i32,
    pub time_ns: u64,
    pub thread: u32,
    pub args: CallArgs,
    /// The call's operands were scanned for NaN/Inf.
    pub scanned: bool,
}

pub struct Recorder {
    ring: Mutex<Ring>,
}

struct Ring {
    slots: Vec<RecordedCall>,
    capacity: usize,
    next: usize,
}

impl Recorder {
    pub fn new(capacity: usize) -> Self {
        Self { ring: Mutex::new(Ring { slots: Vec::with_capacity(capacity), capacity, next: 0 }) }
    }

    pub fn record(&self, call: RecordedCall) {
        let mut ring = self.ring.lock();
        if ring.capacity == 0 {
            return;
        }
        if ring.slots.len() < ring.capacity {
            ring.slots.push(call);
        } else {
            let at = ring.next;
            ring.slots[at] = call;
        }
        ring.next = (ring.next + 1) % ring.capacity;
    }

    /// Held across fork() so no other thread leaves the ring locked in the child.
    pub fn hold(&self) -> impl Sized + '_ {
        self.ring.lock()
    }

    /// Runs `f` on the recorded calls (unordered) if the ring is free right now: for a signal
    /// handler, which must not wait for a lock the crashed thread may hold.
    pub fn try_visit(&self, f: impl FnOnce(&[RecordedCall])) -> bool {
        match self.ring.try_lock() {
            Some(ring) => {
                f(&ring.slots);
                true
            }
            None => false,
        }
    }

    /// The recorded calls, oldest first.
    pub fn snapshot(&self) -> Vec<RecordedCall> {
        let ring = self.ring.lock();
        let mut calls = ring.slots.clone();
        calls.sort_by_key(|c| c.seq);
        calls
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(seq: u64) -> RecordedCall {
        RecordedCall { seq, api: "cudaMalloc", status: 0, time_ns: seq, thread: 1, args: CallArgs::None, scanned: false }
    }

    #[test]
    fn keeps_the_last_n_in_order() {
        let r = Recorder::new(3);
        for seq in 1..=5 {
            r.record(call(seq));
        }
        let seqs: Vec<u64> = r.snapshot().iter().map(|c| c.seq).collect();
        assert_eq!(seqs, [3, 4, 5]);
    }

    #[test]
    fn zero_capacity_records_nothing() {
        let r = Recorder::new(0);
        r.record(call(1));
        assert!(r.snapshot().is_empty());
    }
}
