//! Which memory each recent kernel launch could touch, and when memory was last seen finite:
//! what names the kernel that wrote a NaN a later call consumed. A launch's parameters carry
//! its pointers; their layout (offset and size of each) comes from the driver once per
//! function, and every aligned 8-byte word of a parameter that falls inside a live allocation
//! is taken for a pointer into it (types are not given: PyTorch passes structs of pointers,
//! sizes and strides), as a conservative collector does. The pointers themselves are kept, not
//! only their allocations: PyTorch's caching allocator puts many tensors in one allocation, and
//! a kernel that wrote one of them did not write the others.

use parking_lot::Mutex;
use std::sync::Arc;

/// Pointers kept per launch.
pub const TOUCHED_PER_LAUNCH: usize = super::seq_ring::WORDS;
/// Parameter words read per launch (PyTorch's elementwise kernels pass hundreds of bytes of
/// sizes and strides after their data pointers).
pub const WORDS_PER_LAUNCH: usize = 64;
/// Launches remembered.
const RING: usize = 4096;

/// A kernel's parameters: (offset, size) in bytes of each, in order.
pub type ParamLayout = Arc<[(u32, u32)]>;

/// Parameter layouts by function (host stub or CUfunction), asked of the driver once each;
/// `None` kept for one it cannot say (a driver before CUDA 12.4).
#[derive(Default)]
pub struct ParamLayouts {
    /// Hashed with one multiply (SipHash, the default, cost a hundred instructions a launch).
    layouts: Mutex<crate::state::PointerMap<Option<ParamLayout>>>,
}

impl ParamLayouts {
    /// The layout of `func`, asking `resolve` until it answers: `None` from it is "not now"
    /// (the program has an error pending, which asking would replace), an empty layout "none".
    pub fn get(&self, func: u64, resolve: impl FnOnce() -> Option<Vec<(u32, u32)>>) -> Option<ParamLayout> {
        if let Some(known) = self.layouts.lock().get(&func) {
            return known.clone();
        }
        let layout: Option<ParamLayout> = Some(resolve()?).filter(|l| !l.is_empty()).map(Into::into);
        self.layouts.lock().insert(func, layout.clone());
        layout
    }

    /// A table with the same layouts (a forked child's copy: the same code is loaded).
    pub fn copy(&self) -> Self {
        Self { layouts: Mutex::new(self.layouts.lock().clone()) }
    }
}

/// The byte offsets, from the start of the parameter buffer, of the words worth reading: every
/// 8-byte-aligned word inside a parameter of 8 bytes or more, at most `WORDS_PER_LAUNCH`, each
/// with its parameter's index and its offset within the parameter.
pub fn pointer_words(layout: &[(u32, u32)]) -> impl Iterator<Item = (usize, u64)> + '_ {
    layout
        .iter()
        .enumerate()
        .filter(|(_, &(offset, size))| size >= 8 && offset % 8 == 0)
        .flat_map(|(i, &(_, size))| (0..u64::from(size / 8)).map(move |k| (i, k * 8)))
        .take(WORDS_PER_LAUNCH)
}

/// A launch's pointers into live allocations, by its sequence number (`record`, `get`).
pub type LaunchTouches = super::seq_ring::SeqRing<RING>;

/// When each operand was last seen holding no NaN/Inf (a scan found it finite), by its
/// address: the launches before that did not make a NaN found there later.
#[derive(Default)]
pub struct FiniteSeen {
    last: Mutex<std::collections::BTreeMap<u64, u64>>,
}

impl FiniteSeen {
    /// The operands at `ptrs` were seen finite at call `seq` (one lock for a call's operands).
    pub fn note(&self, ptrs: &[u64], seq: u64) {
        let mut last = self.last.lock();
        for &ptr in ptrs {
            let entry = last.entry(ptr).or_insert(0);
            *entry = (*entry).max(seq);
        }
        bound(&mut last);
    }

    /// The call at which the operand at `ptr` was last seen finite (0: never).
    pub fn last(&self, ptr: u64) -> u64 {
        self.last.lock().get(&ptr).copied().unwrap_or(0)
    }

    /// What was seen in a freed allocation goes with it (the memory may be handed out again).
    pub fn forget(&self, base: u64, size: u64) {
        remove_range(&mut self.last.lock(), base, size);
    }
}

/// Operands remembered at most, by each table keyed by address: past it the lowest addresses go
/// first (a long run with ever new addresses, and a caching allocator that never frees, must
/// not grow them without end).
const MAX_ADDRESSES: usize = 4096;

fn bound<V>(map: &mut std::collections::BTreeMap<u64, V>) {
    while map.len() > MAX_ADDRESSES {
        map.pop_first();
    }
}

/// Removes the entries keyed inside `[base, base + size)` (a freed allocation's).
fn remove_range<V>(map: &mut std::collections::BTreeMap<u64, V>, base: u64, size: u64) {
    if map.is_empty() {
        return;
    }
    let gone: Vec<u64> = map.range(base..base.saturating_add(size.max(1))).map(|(k, _)| *k).collect();
    for k in gone {
        map.remove(&k);
    }
}

/// Regions origin mode watches (CUBLASGUARD_NAN_ORIGIN): the operands guarded calls read or
/// wrote, with their type and the non-finite count last seen there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    pub ptr: u64,
    pub bytes: u64,
    pub dtype: crate::scan::DType,
    /// NaN + Inf when last scanned; `None` before the first scan.
    pub nonfinite: Option<u64>,
    /// Held NaN/Inf before any launch the guard saw could have made it: never blamed.
    pub tainted: bool,
}

#[derive(Default)]
pub struct Watched {
    regions: Mutex<std::collections::BTreeMap<u64, Region>>,
}

impl Watched {
    /// A guarded call's operand: watched from now on. `nonfinite`: what its scan found, if it
    /// was scanned. NaN/Inf found by a guarded call where none was seen before was not made by
    /// a launch the guard watched (a copy from the host, a library's own kernel): it is not
    /// blamed on a later one.
    pub fn watch(&self, ptr: u64, bytes: u64, dtype: crate::scan::DType, nonfinite: Option<u64>) {
        let mut regions = self.regions.lock();
        let region = regions.entry(ptr).or_insert(Region { ptr, bytes, dtype, nonfinite: None, tainted: false });
        (region.bytes, region.dtype) = (bytes, dtype);
        if let Some(n) = nonfinite {
            if n > 0 && region.nonfinite.unwrap_or(0) == 0 {
                region.tainted = true;
            }
            region.nonfinite = Some(n);
        }
        bound(&mut regions);
    }

    /// Memory a rerun watches from its allocation on (origin mode from a trace): `nonfinite`,
    /// what it held then (NaN/Inf there before any launch is no launch's doing, but a launch
    /// that makes more after a later one cleared it is an origin: nothing taints it).
    pub fn watch_fresh(&self, ptr: u64, bytes: u64, dtype: crate::scan::DType, nonfinite: Option<u64>) {
        let mut regions = self.regions.lock();
        regions.insert(ptr, Region { ptr, bytes, dtype, nonfinite, tainted: false });
        bound(&mut regions);
    }

    /// Whether any watched region starts inside `[base, base + size)`.
    pub fn any_inside(&self, base: u64, size: u64) -> bool {
        self.regions.lock().range(base..base.saturating_add(size.max(1))).next().is_some()
    }

    /// The watched regions that start inside `[base, base + size)` (a launch's allocation).
    pub fn inside(&self, base: u64, size: u64) -> Vec<Region> {
        self.regions.lock().range(base..base.saturating_add(size.max(1))).map(|(_, r)| *r).take(16).collect()
    }

    /// Records a new scan of the region at `ptr`; the count it held before (`None`: never
    /// scanned), and whether it is tainted.
    pub fn rescanned(&self, ptr: u64, nonfinite: u64) -> Option<(Option<u64>, bool)> {
        let mut regions = self.regions.lock();
        let region = regions.get_mut(&ptr)?;
        let before = (region.nonfinite, region.tainted);
        region.nonfinite = Some(nonfinite);
        if before.0.is_none() && nonfinite > 0 {
            region.tainted = true;
        }
        Some(before)
    }

    /// A freed allocation's regions go with it.
    pub fn forget(&self, base: u64, size: u64) {
        remove_range(&mut self.regions.lock(), base, size);
    }
}

/// Whether a region's new count makes the launch before it an origin: it held no NaN/Inf when
/// last scanned (not never, not tainted) and holds some now. A count that only goes down (a
/// kernel overwriting NaN with finite values) is no origin.
pub fn is_origin(before: Option<u64>, tainted: bool, now: u64) -> bool {
    !tainted && before == Some(0) && now > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointer_words_are_the_aligned_words_of_parameters_of_eight_bytes_or_more() {
        // fill(float *data, float value, int n); fill_struct({float *data; long long n;}, float)
        assert_eq!(pointer_words(&[(0, 8), (8, 4), (12, 4)]).collect::<Vec<_>>(), [(0, 0)]);
        assert_eq!(pointer_words(&[(0, 16), (16, 4)]).collect::<Vec<_>>(), [(0, 0), (0, 8)]);
        // An int first puts the pointer after it at offset 8; a misaligned one is no pointer.
        assert_eq!(pointer_words(&[(0, 4), (8, 8), (20, 8)]).collect::<Vec<_>>(), [(1, 0)]);
        // A huge struct is read up to the cap.
        assert_eq!(pointer_words(&[(0, 4096)]).count(), WORDS_PER_LAUNCH);
    }

    #[test]
    fn an_origin_is_a_region_that_was_finite_and_holds_nan_now_never_one_tainted_or_unscanned() {
        use crate::scan::DType;
        assert!(is_origin(Some(0), false, 3));
        assert!(!is_origin(Some(4), false, 2), "fewer NaN: no origin");
        assert!(!is_origin(Some(4), false, 6), "already non-finite");
        assert!(!is_origin(None, false, 3), "never scanned before");
        assert!(!is_origin(Some(0), true, 3), "tainted");
        let w = Watched::default();
        w.watch(0x1000, 64, DType::F32, Some(0));
        w.watch(0x2000, 64, DType::F32, Some(2));
        assert_eq!(w.rescanned(0x1000, 5), Some((Some(0), false)));
        assert_eq!(w.rescanned(0x2000, 0), Some((Some(2), true)), "seen bad by a guarded call first");
        assert_eq!(w.inside(0x1000, 0x1000).len(), 1);
        w.forget(0x1000, 0x2000);
        assert!(w.inside(0, u64::MAX).is_empty());
    }

    #[test]
    fn layouts_are_asked_once_per_function_and_finite_sightings_only_move_forward() {
        let layouts = ParamLayouts::default();
        let mut asked = 0;
        for _ in 0..3 {
            assert_eq!(
                layouts
                    .get(0x10, || {
                        asked += 1;
                        Some(vec![(0, 8)])
                    })
                    .as_deref(),
                Some(&[(0u32, 8u32)][..])
            );
        }
        assert_eq!(asked, 1);
        assert_eq!(layouts.get(0x20, || None), None);
        let seen = FiniteSeen::default();
        seen.note(&[0x1000], 9);
        seen.note(&[0x1000], 4);
        assert_eq!(seen.last(0x1000), 9);
        seen.note(&[0x1800, 0x3000], 3);
        seen.forget(0x1000, 0x1000);
        assert_eq!((seen.last(0x1000), seen.last(0x1800), seen.last(0x3000)), (0, 0, 3));
        // Bounded: past the cap the lowest addresses go.
        for i in 0..MAX_ADDRESSES as u64 + 10 {
            seen.note(&[0x10_0000 + 64 * i], 5);
        }
        assert_eq!(seen.last.lock().len(), MAX_ADDRESSES);
        assert_eq!((seen.last(0x3000), seen.last(0x10_0000 + 64 * (MAX_ADDRESSES as u64 + 9))), (0, 5));
    }
}
