//! What the guard knows about the program's CUDA objects: cuBLAS handles and live device
//! allocations. Locks here are held for a lookup or an insert, never across a real call.

use parking_lot::{Mutex, RwLock};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::validate::Span;

/// A cuBLAS handle's settings, as the program last set them through hooked calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HandleState {
    pub stream: u64,
    pub pointer_mode: i32,
    pub math_mode: i32,
    /// cublasSetWorkspace's (pointer, bytes); (0, 0): the library's own workspace.
    pub workspace: (u64, u64),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandleLookup {
    Alive(HandleState),
    /// Destroyed at the call with this sequence number.
    Destroyed(u64),
    Unknown,
}

impl HandleLookup {
    /// The handle's state, when it is alive.
    pub fn alive(self) -> Option<HandleState> {
        match self {
            Self::Alive(state) => Some(state),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum HandleEntry {
    Alive(HandleState),
    Destroyed(u64),
}

/// Handles are pointers: already well spread, so one multiply mixes them enough, where the
/// default SipHash would cost more than the rest of a lookup.
#[derive(Default)]
pub struct PointerHasher(u64);

impl std::hash::Hasher for PointerHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0 ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A map keyed by a pointer or handle, hashed with one multiply.
pub type PointerMap<V> = HashMap<u64, V, std::hash::BuildHasherDefault<PointerHasher>>;

/// How many destroyed handles are remembered, to name use-after-destroy.
const REMEMBERED_DESTROYED: usize = 4096;

/// Handles and their settings. Every change takes a new generation, from one counter for every
/// table, so (table, generation) names one state of one table for the life of the process: a
/// thread's memo of its last lookups (`ThreadMemo`) answers a clean call without the lock.
pub struct Handles {
    map: Mutex<PointerMap<HandleEntry>>,
    generation: AtomicU64,
}

impl Default for Handles {
    fn default() -> Self {
        Self { map: Mutex::default(), generation: AtomicU64::new(next_generation()) }
    }
}

/// A generation no table has had yet (never 0, which a memo reads as "empty"); shared by every
/// table a thread's memo keeps answers of.
pub fn next_generation() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl Handles {
    pub fn created(&self, handle: u64) {
        let mut map = self.map.lock();
        map.insert(handle, HandleEntry::Alive(HandleState::default()));
        self.changed();
    }

    pub fn destroyed(&self, handle: u64, seq: u64) {
        let mut map = self.map.lock();
        if map.len() > REMEMBERED_DESTROYED {
            map.retain(|_, e| matches!(e, HandleEntry::Alive(_)));
        }
        map.insert(handle, HandleEntry::Destroyed(seq));
        self.changed();
    }

    /// Called with the table locked, after the change.
    fn changed(&self) {
        self.generation.store(next_generation(), Ordering::Release);
    }

    pub fn lookup(&self, handle: u64) -> HandleLookup {
        Self::entry(&self.map.lock(), handle)
    }

    fn entry(map: &PointerMap<HandleEntry>, handle: u64) -> HandleLookup {
        match map.get(&handle) {
            Some(HandleEntry::Alive(s)) => HandleLookup::Alive(*s),
            Some(HandleEntry::Destroyed(seq)) => HandleLookup::Destroyed(*seq),
            None => HandleLookup::Unknown,
        }
    }

    /// `lookup`, answered from `memo` when the table has not changed since this thread last
    /// asked it about `handle` (no lock: the usual GEMM names the handle of its last call).
    #[inline]
    pub fn lookup_in(&self, handle: u64, memo: &ThreadMemo) -> HandleLookup {
        let table = self as *const Self as usize;
        let generation = self.generation.load(Ordering::Acquire);
        // Entry by entry, so that a clean call reads the keys and one answer, not both entries.
        let entries: &Cell<[HandleMemo]> = &memo.handles;
        if let Some(m) = entries.as_slice_of_cells().iter().map(Cell::get).find(|m| m.table == table && m.generation == generation && m.handle == handle) {
            return m.found;
        }
        let mut kept = memo.handles.get();
        let (found, generation) = {
            let map = self.map.lock();
            // Read under the lock: the generation of what was found.
            (Self::entry(&map, handle), self.generation.load(Ordering::Acquire))
        };
        // The slot of this table if it has one (a handle named again after a change), else the
        // older one: a cuBLAS table and a cublasLt table each keep theirs.
        let slot = kept.iter().position(|m| m.table == table).unwrap_or(1);
        kept[slot] = HandleMemo { table, generation, handle, found };
        if slot == 1 {
            kept.swap(0, 1);
        }
        memo.handles.set(kept);
        found
    }

    /// A table with the same entries (a forked child's copy).
    pub fn copy(&self) -> Self {
        Self { map: Mutex::new(self.map.lock().clone()), generation: AtomicU64::new(next_generation()) }
    }

    /// Applies a setting change to a live handle.
    pub fn update(&self, handle: u64, change: impl FnOnce(&mut HandleState)) {
        let mut map = self.map.lock();
        if let Some(HandleEntry::Alive(s)) = map.get_mut(&handle) {
            change(s);
            self.changed();
        }
    }
}

/// One handle lookup a thread remembers (table 0: none).
#[derive(Clone, Copy, Debug)]
struct HandleMemo {
    table: usize,
    generation: u64,
    handle: u64,
    found: HandleLookup,
}

impl HandleMemo {
    const EMPTY: Self = Self { table: 0, generation: 0, handle: 0, found: HandleLookup::Unknown };
}

/// What one thread remembers of the shared tables between its calls: its recent allocation
/// lookups and its last handle lookup per table. It lives in the thread's one block of
/// thread-local state, which a hooked call reaches once and hands down (`Call::memo`), so a
/// clean call looks nothing up through `__tls_get_addr` again.
pub struct ThreadMemo {
    recent: RefCell<Recent>,
    /// The most recent first.
    handles: Cell<[HandleMemo; 2]>,
}

impl ThreadMemo {
    pub const fn new() -> Self {
        Self { recent: RefCell::new(Recent::EMPTY), handles: Cell::new([HandleMemo::EMPTY; 2]) }
    }
}

impl ThreadMemo {
    /// Nothing was looked up through it (for the unit tests).
    #[cfg(test)]
    pub fn is_untouched(&self) -> bool {
        self.recent.borrow().table == 0 && self.handles.get().iter().all(|m| m.table == 0)
    }
}

impl Default for ThreadMemo {
    fn default() -> Self {
        Self::new()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allocation {
    pub base: u64,
    pub size: u64,
    pub time_ns: u64,
    pub stream: Option<u64>,
    /// The function the program called for it (cudaMalloc, cuMemAlloc_v2, cuMemMap, ...).
    pub api: &'static str,
    /// Which allocation of the table it was, counted from the start (1 for the first; set by
    /// `Allocations::insert`): what finds the same allocation again in a rerun of a
    /// deterministic program, where its address differs (origin mode from a trace).
    pub ordinal: u64,
}

/// An allocation the program freed, remembered so that a later use of its memory is named as
/// such (`use_after_free`) rather than as a pointer the guard never saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Freed {
    pub base: u64,
    pub size: u64,
    /// The call that freed it.
    pub seq: u64,
    pub api: &'static str,
}

/// How many freed allocations are remembered.
const REMEMBERED_FREED: usize = 4096;

/// Live device allocations by base address: O(log n) lookup of the one holding a pointer,
/// in front of which each thread keeps its last few hits. GEMM operands repeat from call to
/// call (the same weights every step), so most lookups are answered there without touching
/// the shared tree; a generation number, bumped on every insert and remove, invalidates them.
#[derive(Default)]
pub struct Allocations {
    map: RwLock<BTreeMap<u64, Allocation>>,
    generation: AtomicU64,
    /// Kept with every insert and remove: every fault reports them.
    live_bytes: AtomicU64,
    live_count: AtomicU64,
    /// The most recently freed allocations whose memory no live allocation took again.
    freed: Mutex<std::collections::VecDeque<Freed>>,
    /// Allocations inserted so far (`Allocation::ordinal`).
    made: AtomicU64,
}

const RECENT: usize = 8;
const RECENT_MISSES: usize = 4;

struct Recent {
    /// Which table and generation the entries belong to (0: none).
    table: usize,
    generation: u64,
    next: usize,
    hits: [Option<Allocation>; RECENT],
    /// Pointers recently found in no allocation (alpha and beta in host memory, every call).
    next_miss: usize,
    misses: [u64; RECENT_MISSES],
}

impl Recent {
    const EMPTY: Self = Self { table: 0, generation: 0, next: 0, hits: [None; RECENT], next_miss: 0, misses: [0; RECENT_MISSES] };
}

thread_local! {
    static RECENT_HITS: RefCell<Recent> = const { RefCell::new(Recent::EMPTY) };
}

/// The allocation table as the checks of one call look it up: through the calling thread's
/// memo when the call has it at hand.
#[derive(Clone, Copy)]
pub struct AllocationView<'a> {
    table: &'a Allocations,
    memo: Option<&'a ThreadMemo>,
}

impl<'a> AllocationView<'a> {
    pub fn new(table: &'a Allocations, memo: &'a ThreadMemo) -> Self {
        Self { table, memo: Some(memo) }
    }

    #[inline]
    pub fn containing(self, ptr: u64) -> Option<Allocation> {
        match self.memo {
            Some(memo) => self.table.containing_with(ptr, memo),
            None => self.table.containing(ptr),
        }
    }

    /// Inlined, and only the range read out of the memo's entry (an operand's lookup on every
    /// checked call).
    #[inline(always)]
    pub fn span_containing(self, ptr: u64) -> Option<Span> {
        let span = |a: &Allocation| Span { base: a.base, size: a.size };
        match self.memo {
            Some(memo) => self.table.containing_in(ptr, &memo.recent, span),
            None => self.table.containing(ptr).as_ref().map(span),
        }
    }

    pub fn freed_containing(self, ptr: u64) -> Option<Freed> {
        self.table.freed_containing(ptr)
    }
}

impl<'a> From<&'a Allocations> for AllocationView<'a> {
    fn from(table: &'a Allocations) -> Self {
        Self { table, memo: None }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveTotals {
    pub bytes: u64,
    pub count: u64,
}

impl Allocations {
    /// Keeps `allocation` as live, numbered (`Allocation::ordinal`); its number.
    pub fn insert(&self, mut allocation: Allocation) -> u64 {
        self.forget_freed(&allocation);
        allocation.ordinal = self.made.fetch_add(1, Ordering::Relaxed) + 1;
        let mut map = self.map.write();
        self.put(&mut map, allocation);
        self.generation.fetch_add(1, Ordering::Release);
        allocation.ordinal
    }

    /// A range mapped with the virtual-memory API: live device memory, one extent with the
    /// mapped ranges it touches (PyTorch's expandable segments grow by mapping the next chunk
    /// of one reservation, and a tensor may span two chunks). One write lock for the whole
    /// merge, so a lookup never sees the pieces half joined.
    pub fn insert_mapped(&self, mapped: Allocation) {
        self.forget_freed(&mapped);
        let end = mapped.base.saturating_add(mapped.size);
        let mut map = self.map.write();
        let mut merged = mapped;
        let before = map.range(..mapped.base).next_back().map(|(_, a)| *a).filter(|a| a.api == mapped.api && a.base + a.size == mapped.base);
        if let Some(b) = before {
            self.take(&mut map, b.base);
            merged.base = b.base;
            merged.size += b.size;
        }
        if let Some(a) = map.get(&end).copied().filter(|a| a.api == mapped.api) {
            self.take(&mut map, a.base);
            merged.size += a.size;
        }
        self.put(&mut map, merged);
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Unmaps `[base, base + size)` from the mapped extent holding it, keeping what is left
    /// on either side; returns the unmapped part, or `None` when no mapped extent holds it.
    pub fn remove_mapped(&self, base: u64, size: u64) -> Option<Allocation> {
        let end = base.checked_add(size)?;
        let mut map = self.map.write();
        let extent = map.range(..=base).next_back().map(|(_, a)| *a).filter(|a| base - a.base < a.size.max(1) && end <= a.base + a.size)?;
        self.take(&mut map, extent.base);
        if base > extent.base {
            self.put(&mut map, Allocation { size: base - extent.base, ..extent });
        }
        if end < extent.base + extent.size {
            self.put(&mut map, Allocation { base: end, size: extent.base + extent.size - end, ..extent });
        }
        self.generation.fetch_add(1, Ordering::Release);
        Some(Allocation { base, size, ..extent })
    }

    /// Forgets the allocation at `base`; false when there was none.
    pub fn remove(&self, base: u64) -> bool {
        let mut map = self.map.write();
        let removed = self.take(&mut map, base).is_some();
        self.generation.fetch_add(1, Ordering::Release);
        removed
    }

    /// Memory handed out again is live, not freed.
    fn forget_freed(&self, allocation: &Allocation) {
        let end = allocation.base.saturating_add(allocation.size.max(1));
        self.freed.lock().retain(|f| f.base.saturating_add(f.size.max(1)) <= allocation.base || f.base >= end);
    }

    /// Enters `allocation` in the locked table, keeping the live counts.
    fn put(&self, map: &mut BTreeMap<u64, Allocation>, allocation: Allocation) {
        if let Some(old) = map.insert(allocation.base, allocation) {
            self.live_bytes.fetch_sub(old.size, Ordering::Relaxed);
            self.live_count.fetch_sub(1, Ordering::Relaxed);
        }
        self.live_bytes.fetch_add(allocation.size, Ordering::Relaxed);
        self.live_count.fetch_add(1, Ordering::Relaxed);
    }

    /// Takes the allocation at `base` out of the locked table, keeping the live counts.
    fn take(&self, map: &mut BTreeMap<u64, Allocation>, base: u64) -> Option<Allocation> {
        let old = map.remove(&base)?;
        self.live_bytes.fetch_sub(old.size, Ordering::Relaxed);
        self.live_count.fetch_sub(1, Ordering::Relaxed);
        Some(old)
    }

    /// The live allocation whose range holds `ptr`. Never inlined: a caller that has a memo
    /// at hand would otherwise pay for this thread-local's address on its own path too (the
    /// compiler hoists the access above the branch).
    #[inline(never)]
    pub fn containing(&self, ptr: u64) -> Option<Allocation> {
        let whole = |a: &Allocation| *a;
        RECENT_HITS.try_with(|recent| self.containing_in(ptr, recent, whole)).unwrap_or_else(|_| self.containing_in(ptr, &RefCell::new(Recent::EMPTY), whole))
    }

    /// `containing`, with the recent lookups of the calling thread's `memo`.
    #[inline]
    pub fn containing_with(&self, ptr: u64, memo: &ThreadMemo) -> Option<Allocation> {
        self.containing_in(ptr, &memo.recent, |a| *a)
    }

    /// `containing` through `recent`: its answer when it knows one (inlined: this is every
    /// operand's lookup on a clean call, and a caller that reads only the range then copies
    /// nothing else), the table's otherwise.
    #[inline(always)]
    fn containing_in<T>(&self, ptr: u64, recent: &RefCell<Recent>, read: impl Fn(&Allocation) -> T) -> Option<T> {
        let generation = self.generation.load(Ordering::Acquire);
        if let Ok(r) = recent.try_borrow() {
            if r.table == self as *const Self as usize && r.generation == generation {
                if let Some(hit) = r.hits.iter().flatten().find(|a| Self::holds(a, ptr)) {
                    return Some(read(hit));
                }
                if ptr != 0 && r.misses.contains(&ptr) {
                    return None;
                }
            }
        }
        self.containing_in_table(ptr, recent).as_ref().map(read)
    }

    #[inline(always)]
    fn holds(a: &Allocation, ptr: u64) -> bool {
        ptr.wrapping_sub(a.base) < a.size.max(1)
    }

    /// `containing_in` when `recent` does not know: the table's answer, kept in `recent`.
    #[inline(never)]
    fn containing_in_table(&self, ptr: u64, recent: &RefCell<Recent>) -> Option<Allocation> {
        let holds = |a: &Allocation| Self::holds(a, ptr);
        let table = self as *const Self as usize;
        let (found, generation) = {
            let map = self.map.read();
            // Read under the lock: the generation that matches what was found.
            let generation = self.generation.load(Ordering::Acquire);
            (map.range(..=ptr).next_back().map(|(_, a)| *a).filter(holds), generation)
        };
        if let Ok(mut r) = recent.try_borrow_mut() {
            if r.table != table || r.generation != generation {
                *r = Recent { table, generation, ..Recent::EMPTY };
            }
            match found {
                Some(a) => {
                    let slot = r.next;
                    r.hits[slot] = Some(a);
                    r.next = (slot + 1) % RECENT;
                }
                None => {
                    let slot = r.next_miss;
                    r.misses[slot] = ptr;
                    r.next_miss = (slot + 1) % RECENT_MISSES;
                }
            }
        }
        found
    }

    #[cfg(test)]
    pub fn span_containing(&self, ptr: u64) -> Option<Span> {
        self.containing(ptr).map(|a| Span { base: a.base, size: a.size })
    }

    /// A table with the same allocations (a forked child's copy).
    pub fn copy(&self) -> Self {
        let map = self.map.read();
        Self {
            map: RwLock::new(map.clone()),
            generation: AtomicU64::new(0),
            live_bytes: AtomicU64::new(map.values().map(|a| a.size).sum()),
            live_count: AtomicU64::new(map.len() as u64),
            freed: Mutex::new(self.freed.lock().clone()),
            made: AtomicU64::new(self.made.load(Ordering::Relaxed)),
        }
    }

    /// Remembers that the program freed `allocation` at call `seq` (through `api`).
    pub fn note_freed(&self, allocation: Allocation, seq: u64, api: &'static str) {
        let mut freed = self.freed.lock();
        if freed.len() == REMEMBERED_FREED {
            freed.pop_front();
        }
        freed.push_back(Freed { base: allocation.base, size: allocation.size, seq, api });
    }

    /// The most recent freed allocation that held `ptr` (asked only for pointers no live
    /// allocation holds).
    pub fn freed_containing(&self, ptr: u64) -> Option<Freed> {
        self.freed.lock().iter().rev().find(|f| ptr.wrapping_sub(f.base) < f.size.max(1)).copied()
    }

    /// The largest live allocation's size (at fault time only: it walks the table).
    pub fn largest(&self) -> u64 {
        self.map.read().values().map(|a| a.size).max().unwrap_or(0)
    }

    pub fn totals(&self) -> LiveTotals {
        LiveTotals { bytes: self.live_bytes.load(Ordering::Relaxed), count: self.live_count.load(Ordering::Relaxed) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_remember_destruction() {
        let h = Handles::default();
        h.created(10);
        h.update(10, |s| s.math_mode = 3);
        assert_eq!(h.lookup(10), HandleLookup::Alive(HandleState { stream: 0, pointer_mode: 0, math_mode: 3, workspace: (0, 0) }));
        h.destroyed(10, 7);
        assert_eq!(h.lookup(10), HandleLookup::Destroyed(7));
        h.update(10, |s| s.math_mode = 1);
        assert_eq!(h.lookup(10), HandleLookup::Destroyed(7));
        assert_eq!(h.lookup(11), HandleLookup::Unknown);
        h.created(10);
        assert!(matches!(h.lookup(10), HandleLookup::Alive(_)));
    }

    #[test]
    fn a_handle_lookup_through_a_threads_memo_sees_every_change_of_the_table() {
        let (h, memo) = (Handles::default(), ThreadMemo::new());
        h.created(10);
        let alive = |math_mode| HandleLookup::Alive(HandleState { math_mode, ..HandleState::default() });
        assert_eq!(h.lookup_in(10, &memo), alive(0));
        assert_eq!(h.lookup_in(10, &memo), alive(0), "answered by the memo");
        h.update(10, |s| s.math_mode = 3);
        assert_eq!(h.lookup_in(10, &memo), alive(3));
        h.destroyed(10, 7);
        assert_eq!(h.lookup_in(10, &memo), HandleLookup::Destroyed(7));
        assert_eq!(h.lookup_in(11, &memo), HandleLookup::Unknown);
        // A second table on the same thread keeps its own entry, and a copy is a table apart.
        let (other, copy) = (Handles::default(), h.copy());
        other.created(10);
        assert!(matches!(other.lookup_in(10, &memo), HandleLookup::Alive(_)));
        assert_eq!(h.lookup_in(10, &memo), HandleLookup::Destroyed(7));
        copy.created(10);
        assert!(matches!(copy.lookup_in(10, &memo), HandleLookup::Alive(_)));
        assert_eq!(h.lookup_in(10, &memo), HandleLookup::Destroyed(7));
    }

    #[test]
    fn allocation_lookup_finds_the_holder() {
        let a = Allocations::default();
        a.insert(Allocation { base: 100, size: 50, time_ns: 0, stream: None, api: "cudaMalloc", ordinal: 0 });
        a.insert(Allocation { base: 200, size: 10, time_ns: 0, stream: Some(5), api: "cudaMalloc", ordinal: 0 });
        assert_eq!(a.containing(100).map(|x| x.base), Some(100));
        assert_eq!(a.containing(149).map(|x| x.base), Some(100));
        assert_eq!(a.containing(150), None);
        assert_eq!(a.containing(99), None);
        assert_eq!(a.containing(205).and_then(|x| x.stream), Some(5));
        assert_eq!(a.totals(), LiveTotals { bytes: 60, count: 2 });
        assert!(a.remove(100));
        assert!(!a.remove(100));
        assert_eq!(a.totals(), LiveTotals { bytes: 10, count: 1 });
        a.insert(Allocation { base: 200, size: 30, time_ns: 0, stream: None, api: "cudaMalloc", ordinal: 0 }); // the same base again
        assert_eq!(a.totals(), LiveTotals { bytes: 30, count: 1 });
        assert_eq!(a.containing(120), None);
    }

    #[test]
    fn freed_memory_is_remembered_until_it_is_handed_out_again() {
        let a = Allocations::default();
        let block = Allocation { base: 1000, size: 100, time_ns: 0, stream: None, api: "cudaMalloc", ordinal: 0 };
        a.insert(block);
        a.remove(1000);
        a.note_freed(block, 7, "cudaFree");
        assert_eq!(a.freed_containing(1050).map(|f| (f.seq, f.api)), Some((7, "cudaFree")));
        assert_eq!(a.freed_containing(1100), None);
        a.insert(Allocation { base: 1040, size: 8, time_ns: 0, stream: None, api: "cudaMalloc", ordinal: 0 });
        assert_eq!(a.freed_containing(1050), None, "its memory is live again");
    }

    #[test]
    fn recent_hits_never_outlive_a_change_of_the_table() {
        let a = Allocations::default();
        a.insert(Allocation { base: 100, size: 50, time_ns: 0, stream: None, api: "cudaMalloc", ordinal: 0 });
        assert!(a.containing(120).is_some()); // now a recent hit
        assert!(a.containing(120).is_some());
        a.remove(100);
        assert_eq!(a.containing(120), None, "a freed allocation is not found again");
        a.insert(Allocation { base: 110, size: 5, time_ns: 0, stream: None, api: "cudaMalloc", ordinal: 0 });
        assert_eq!(a.containing(120), None);
        assert_eq!(a.containing(112).map(|x| x.base), Some(110));
        // A remembered miss is forgotten when the table changes too.
        assert_eq!(a.containing(300), None);
        assert_eq!(a.containing(300), None);
        a.insert(Allocation { base: 300, size: 8, time_ns: 0, stream: None, api: "cudaMalloc", ordinal: 0 });
        assert_eq!(a.containing(300).map(|x| x.base), Some(300));
        // Two tables on one thread do not see each other's hits.
        let b = Allocations::default();
        assert_eq!(b.containing(112), None);
    }

    #[test]
    fn mapped_ranges_that_touch_are_one_extent_and_unmapping_splits_it() {
        let a = Allocations::default();
        let chunk = |base| Allocation { base, size: 100, time_ns: 0, stream: None, api: "cuMemMap", ordinal: 0 };
        a.insert_mapped(chunk(1000));
        a.insert_mapped(chunk(1200)); // a gap: separate
        a.insert_mapped(chunk(1100)); // fills it: all three are one extent
        assert_eq!(a.span_containing(1150), Some(Span { base: 1000, size: 300 }));
        // A cudaMalloc block beside a mapping is not merged with it.
        a.insert(Allocation { base: 1300, size: 50, time_ns: 0, stream: None, api: "cudaMalloc", ordinal: 0 });
        assert_eq!(a.span_containing(1299), Some(Span { base: 1000, size: 300 }));
        let gone = a.remove_mapped(1100, 100).expect("unmapped");
        assert_eq!((gone.base, gone.size, gone.api), (1100, 100, "cuMemMap"));
        assert_eq!(a.span_containing(1050), Some(Span { base: 1000, size: 100 }));
        assert_eq!(a.span_containing(1150), None);
        assert_eq!(a.span_containing(1250), Some(Span { base: 1200, size: 100 }));
        assert_eq!(a.remove_mapped(1250, 100), None, "past the extent's end");
    }
}
