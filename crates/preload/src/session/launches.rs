//! What a hang names of each kernel launch beyond its recorded arguments: which launch of its
//! kernel it was, counted from the session's start ("their 412th launch of it", which ranks
//! compare, and which the flight recorder's last 256 calls cannot count), and where the program
//! made it (the launching line). Both are written by the launch on its own thread without a
//! lock or an allocation, and read only when a hang is recorded.

use std::sync::atomic::{AtomicU64, Ordering};

use super::call_site::{CallSite, CALL_SITE_FRAMES};

/// Kernels counted at most (functions: host stubs and driver handles); a launch of one more
/// gets no ordinal (0), and the hang says what the recent calls show instead. PyTorch launches
/// a few thousand distinct kernels in a long run.
const KERNELS: usize = 8192;
/// Slots looked at for a kernel before the table counts as full for it.
const PROBES: usize = 64;

/// Launches counted by kernel: open addressing over the function's address, claimed once by
/// compare-and-swap, counted by fetch-add.
pub struct LaunchCounts {
    slots: Box<[CountSlot]>,
}

struct CountSlot {
    func: AtomicU64,
    count: AtomicU64,
}

impl Default for LaunchCounts {
    fn default() -> Self {
        Self { slots: (0..KERNELS).map(|_| CountSlot { func: AtomicU64::new(0), count: AtomicU64::new(0) }).collect() }
    }
}

impl LaunchCounts {
    /// Counts a launch of `func`: its ordinal among the session's launches of it (1 for the
    /// first), or 0 when `func` is 0 or the table has no room for it.
    pub fn next(&self, func: u64) -> u64 {
        if func == 0 {
            return 0;
        }
        // Fibonacci hashing: code addresses differ in their middle bits.
        let start = (func.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize;
        for probe in 0..PROBES {
            let Some(slot) = self.slots.get((start + probe) % KERNELS) else { return 0 };
            let owner = match slot.func.load(Ordering::Acquire) {
                0 => match slot.func.compare_exchange(0, func, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => func,
                    Err(other) => other,
                },
                other => other,
            };
            if owner == func {
                return slot.count.fetch_add(1, Ordering::Relaxed) + 1;
            }
        }
        0
    }

    /// Launches of `func` counted so far (0: none, or not counted).
    #[cfg(test)]
    pub fn launched(&self, func: u64) -> u64 {
        let start = (func.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize;
        (0..PROBES)
            .filter_map(|probe| self.slots.get((start + probe) % KERNELS))
            .find(|slot| slot.func.load(Ordering::Acquire) == func)
            .map_or(0, |slot| slot.count.load(Ordering::Relaxed))
    }
}

/// Launches whose call site is remembered: as many as a hang's suspects can be (the flight
/// recorder's calls), with room to spare.
const SITES: usize = 1024;

/// Where each recent launch was made, by its sequence number.
#[derive(Default)]
pub struct LaunchSites {
    ring: super::seq_ring::SeqRing<SITES>,
}

const _: () = assert!(CALL_SITE_FRAMES == super::seq_ring::WORDS, "a call site fills a slot");

impl LaunchSites {
    pub fn record(&self, seq: u64, site: &CallSite) {
        self.ring.record(seq, &site.returns);
    }

    /// Where launch `seq` was made, while it is remembered (and not rewritten meanwhile).
    pub fn site(&self, seq: u64) -> Option<CallSite> {
        self.ring.get(seq).map(|returns| CallSite { returns })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kernels_launches_are_counted_from_one_apart_from_the_others() {
        let counts = LaunchCounts::default();
        assert_eq!([counts.next(0x4000), counts.next(0x4000), counts.next(0x5000), counts.next(0x4000)], [1, 2, 1, 3]);
        assert_eq!((counts.next(0), counts.launched(0x5000), counts.launched(0x6000)), (0, 1, 0));
    }

    #[test]
    fn a_full_table_gives_a_new_kernel_no_ordinal_and_keeps_counting_the_known_ones() {
        let counts = LaunchCounts::default();
        let first: Vec<u64> = (1..=2 * KERNELS as u64).map(|func| counts.next(func * 16)).collect();
        let counted = first.iter().filter(|&&n| n == 1).count();
        assert!(counted <= KERNELS && counted > KERNELS / 2, "{counted} counted");
        assert!(first.iter().all(|&n| n <= 1) && first.contains(&0), "past its room a kernel gets no ordinal");
        assert_eq!(counts.next(16), 2, "a kernel counted before goes on being counted");
    }

    #[test]
    fn threads_counting_the_same_kernel_together_lose_no_launch() {
        let counts = std::sync::Arc::new(LaunchCounts::default());
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let counts = counts.clone();
                std::thread::spawn(move || (0..1000).map(|_| counts.next(0x7000)).max().unwrap_or(0))
            })
            .collect();
        let highest = threads.into_iter().map(|t| t.join().unwrap()).max();
        assert_eq!((highest, counts.launched(0x7000)), (Some(4000), 4000));
    }

    #[test]
    fn a_launchs_site_is_kept_until_its_slot_is_taken_by_a_later_launch() {
        let sites = LaunchSites::default();
        let site = CallSite { returns: [0x1234, 0x5678, 0, 0] };
        sites.record(7, &site);
        assert_eq!(sites.site(7), Some(site));
        assert_eq!((sites.site(8), sites.site(0)), (None, None));
        sites.record(7 + SITES as u64, &CallSite::default());
        assert_eq!(sites.site(7), None, "rewritten by a later launch");
    }
}
