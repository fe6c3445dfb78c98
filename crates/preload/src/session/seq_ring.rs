//! Four words kept per recent call, by its sequence number, in a ring that takes no lock: the
//! pointers a launch was given (`launch_memory`), where a launch was made (`launches`). A slot
//! is marked invalid (0) while it is written, then given its call's number; a reader takes the
//! words only if the number is the same before and after it read them.

use std::sync::atomic::{AtomicU64, Ordering};

/// Words kept per call.
pub const WORDS: usize = 4;

pub struct SeqRing<const SLOTS: usize> {
    slots: Box<[Slot]>,
}

struct Slot {
    seq: AtomicU64,
    words: [AtomicU64; WORDS],
}

impl<const SLOTS: usize> Default for SeqRing<SLOTS> {
    fn default() -> Self {
        Self { slots: (0..SLOTS).map(|_| Slot { seq: AtomicU64::new(0), words: Default::default() }).collect() }
    }
}

impl<const SLOTS: usize> SeqRing<SLOTS> {
    /// Keeps `words` (0 past the last given) for call `seq`, in the place of the call `SLOTS`
    /// before it.
    pub fn record(&self, seq: u64, words: &[u64]) {
        let Some(slot) = self.slots.get((seq % SLOTS as u64) as usize) else { return };
        slot.seq.store(0, Ordering::Release);
        for (i, word) in slot.words.iter().enumerate() {
            word.store(words.get(i).copied().unwrap_or(0), Ordering::Relaxed);
        }
        slot.seq.store(seq, Ordering::Release);
    }

    /// The words kept for call `seq`, while they are (and not rewritten meanwhile).
    pub fn get(&self, seq: u64) -> Option<[u64; WORDS]> {
        let slot = self.slots.get((seq % SLOTS as u64) as usize)?;
        if seq == 0 || slot.seq.load(Ordering::Acquire) != seq {
            return None;
        }
        let words = std::array::from_fn(|i| slot.words[i].load(Ordering::Relaxed));
        (slot.seq.load(Ordering::Acquire) == seq).then_some(words)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_calls_words_are_kept_until_its_slot_is_taken_by_a_later_call() {
        let ring = SeqRing::<8>::default();
        ring.record(3, &[7, 8]);
        assert_eq!(ring.get(3), Some([7, 8, 0, 0]));
        assert_eq!((ring.get(4), ring.get(0), ring.get(11)), (None, None, None));
        ring.record(11, &[1]);
        assert_eq!((ring.get(3), ring.get(11)), (None, Some([1, 0, 0, 0])), "rewritten by a later call");
    }
}
