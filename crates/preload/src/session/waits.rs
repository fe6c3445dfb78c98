//! The host threads waiting in a CUDA synchronisation right now, for the hang watchdog: a fixed
//! table of slots, each claimed by a thread as it enters cudaStreamSynchronize (and the other
//! waits) and freed as it returns. Atomics only: no allocation, no lock, nothing on any call
//! but the synchronisations, which block anyway. A thread that finds every slot taken waits
//! unrecorded.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::call_site::{CallSite, CALL_SITE_FRAMES};

/// The innermost Python frames kept with a wait.
pub const PYTHON_PLACES: usize = 4;

/// Where a waiting thread's innermost Python frames are, as plain numbers read at its entry
/// (each frame's code object and instruction offset): named only if the watchdog reports the
/// wait, from code objects the thread's frames keep alive while it waits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PythonPlaces {
    pub code: [u64; PYTHON_PLACES],
    pub offset: [i32; PYTHON_PLACES],
    pub count: usize,
}

impl PythonPlaces {
    pub fn places(&self) -> impl Iterator<Item = (u64, i32)> + '_ {
        self.code.iter().zip(self.offset.iter()).take(self.count.min(PYTHON_PLACES)).map(|(&c, &o)| (c, o))
    }
}

/// Threads followed at once: more than wait together in any program the guard has met.
pub const SLOTS: usize = 64;

#[derive(Default)]
struct Slot {
    /// The waiting thread's kernel id (0: a free slot). Written last on entry, cleared first
    /// on return, and read before and after the rest: a reader keeps what it read only when
    /// it did not change meanwhile.
    thread: AtomicU32,
    /// Bumped on every claim, so a reader tells a slot reused by the same thread apart.
    generation: AtomicU32,
    seq: AtomicU64,
    hook: AtomicU32,
    since_ns: AtomicU64,
    site: [AtomicU64; CALL_SITE_FRAMES],
    python_code: [AtomicU64; PYTHON_PLACES],
    python_offset: [AtomicU32; PYTHON_PLACES],
    python_count: AtomicU32,
}

/// One thread's wait, as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Waiting {
    pub thread: u32,
    pub seq: u64,
    pub hook: u16,
    pub since_ns: u64,
    pub site: CallSite,
    pub python: PythonPlaces,
}

pub struct Waits {
    slots: [Slot; SLOTS],
}

impl Default for Waits {
    fn default() -> Self {
        Self { slots: std::array::from_fn(|_| Slot::default()) }
    }
}

/// A claimed slot, freed when dropped (the call returned).
pub struct Entered<'a> {
    slot: Option<&'a Slot>,
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot {
            slot.thread.store(0, Ordering::Release);
        }
    }
}

impl Waits {
    /// Thread `w.thread` enters its wait.
    pub fn enter(&self, w: Waiting) -> Entered<'_> {
        // A slot is claimed with a marker no thread has, then filled, then named: a reader
        // never takes the marker for a thread.
        const CLAIMING: u32 = u32::MAX;
        let Some(slot) = self.slots.iter().find(|s| s.thread.compare_exchange(0, CLAIMING, Ordering::AcqRel, Ordering::Relaxed).is_ok()) else {
            return Entered { slot: None };
        };
        slot.generation.fetch_add(1, Ordering::Relaxed);
        slot.seq.store(w.seq, Ordering::Relaxed);
        slot.hook.store(w.hook as u32, Ordering::Relaxed);
        slot.since_ns.store(w.since_ns, Ordering::Relaxed);
        for (word, &ret) in slot.site.iter().zip(w.site.returns.iter()) {
            word.store(ret, Ordering::Relaxed);
        }
        for (i, (code, offset)) in w.python.places().enumerate() {
            slot.python_code[i].store(code, Ordering::Relaxed);
            slot.python_offset[i].store(offset as u32, Ordering::Relaxed);
        }
        slot.python_count.store(w.python.count.min(PYTHON_PLACES) as u32, Ordering::Relaxed);
        slot.thread.store(w.thread.max(1), Ordering::Release);
        Entered { slot: Some(slot) }
    }

    /// Every thread waiting now, in slot order.
    pub fn waiting(&self) -> Vec<Waiting> {
        let mut out = Vec::new();
        for slot in &self.slots {
            let thread = slot.thread.load(Ordering::Acquire);
            if thread == 0 || thread == u32::MAX {
                continue;
            }
            let generation = slot.generation.load(Ordering::Acquire);
            let mut site = CallSite::default();
            for (ret, word) in site.returns.iter_mut().zip(slot.site.iter()) {
                *ret = word.load(Ordering::Relaxed);
            }
            let mut python = PythonPlaces { count: (slot.python_count.load(Ordering::Relaxed) as usize).min(PYTHON_PLACES), ..Default::default() };
            for i in 0..python.count {
                python.code[i] = slot.python_code[i].load(Ordering::Relaxed);
                python.offset[i] = slot.python_offset[i].load(Ordering::Relaxed) as i32;
            }
            let w = Waiting {
                thread,
                seq: slot.seq.load(Ordering::Relaxed),
                hook: slot.hook.load(Ordering::Relaxed) as u16,
                since_ns: slot.since_ns.load(Ordering::Relaxed),
                site,
                python,
            };
            std::sync::atomic::fence(Ordering::Acquire);
            if slot.thread.load(Ordering::Relaxed) == thread && slot.generation.load(Ordering::Relaxed) == generation {
                out.push(w);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wait(thread: u32, seq: u64) -> Waiting {
        // Up to two frames, the second before its first instruction (-1), as a frame can be.
        let count = (seq % 3) as usize;
        let mut python = PythonPlaces { count, ..Default::default() };
        for (i, (code, offset)) in [(0x9000 + seq, 2 * seq as i32), (0x9100, -1)].into_iter().take(count).enumerate() {
            (python.code[i], python.offset[i]) = (code, offset);
        }
        Waiting { thread, seq, hook: 3, since_ns: 10 * seq, site: CallSite { returns: [0x400 + seq, 0, 0, 0] }, python }
    }

    #[test]
    fn a_thread_is_listed_while_it_waits_and_not_after() {
        let waits = Waits::default();
        let first = waits.enter(wait(7, 1));
        {
            let _second = waits.enter(wait(8, 2));
            assert_eq!(waits.waiting(), [wait(7, 1), wait(8, 2)]);
        }
        assert_eq!(waits.waiting(), [wait(7, 1)]);
        drop(first);
        assert!(waits.waiting().is_empty());
    }

    #[test]
    fn past_the_table_a_wait_goes_unrecorded_and_its_return_frees_nothing_of_the_others() {
        let waits = Waits::default();
        let held: Vec<_> = (1..=SLOTS as u32).map(|t| waits.enter(wait(t, t as u64))).collect();
        drop(waits.enter(wait(999, 999)));
        assert_eq!(waits.waiting().len(), SLOTS);
        drop(held);
        assert!(waits.waiting().is_empty());
    }
}
