//! What the guard knows about the program's CUDA objects: cuBLAS handles and live device
//! allocations. Locks here are held for a lookup or an insert, never across a real call.

use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, HashMap};

use crate::validate::Span;

/// A cuBLAS handle's settings, as the program last set them through hooked calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandleState {
    pub stream: u64,
    pub pointer_mode: i32,
    pub math_mode: i32,
}

impl Default for HandleState {
    fn default() -> Self {
        Self { stream: 0, pointer_mode: 0, math_mode: 0 }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandleLookup {
    Alive(HandleState),
    /// Destroyed at the call with this sequence number.
    Destroyed(u64),
    Unknown,
}

#[derive(Clone, Copy, Debug)]
enum HandleEntry {
    Alive(HandleState),
    Destroyed(u64),
}

/// How many destroyed handles are remembered, to name use-after-destroy.
const REMEMBERED_DESTROYED: usize = 4096;

#[derive(Default)]
pub struct Handles {
    map: Mutex<HashMap<u64, HandleEntry>>,
}

impl Handles {
    pub fn created(&self, handle: u64) {
        self.map.lock().insert(handle, HandleEntry::Alive(HandleState::default()));
    }

    pub fn destroyed(&self, handle: u64, seq: u64) {
        let mut map = self.map.lock();
        if map.len() > REMEMBERED_DESTROYED {
            map.retain(|_, e| matches!(e, HandleEntry::Alive(_)));
        }
        map.insert(handle, HandleEntry::Destroyed(seq));
    }

    pub fn lookup(&self, handle: u64) -> HandleLookup {
        match self.map.lock().get(&handle) {
            Some(HandleEntry::Alive(s)) => HandleLookup::Alive(*s),
            Some(HandleEntry::Destroyed(seq)) => HandleLookup::Destroyed(*seq),
            None => HandleLookup::Unknown,
        }
    }

    /// Held across fork() so no other thread leaves the table locked in the child.
    pub fn hold(&self) -> impl Sized + '_ {
        self.map.lock()
    }

    /// Applies a setting change to a live handle.
    pub fn update(&self, handle: u64, change: impl FnOnce(&mut HandleState)) {
        if let Some(HandleEntry::Alive(s)) = self.map.lock().get_mut(&handle) {
            change(s);
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Allocation {
    pub base: u64,
    pub size: u64,
    pub time_ns: u64,
    pub stream: Option<u64>,
}

/// Live device allocations by base address: O(log n) lookup of the one holding a pointer.
#[derive(Default)]
pub struct Allocations {
    map: RwLock<BTreeMap<u64, Allocation>>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveTotals {
    pub bytes: u64,
    pub count: u64,
}

impl Allocations {
    pub fn insert(&self, allocation: Allocation) {
        self.map.write().insert(allocation.base, allocation);
    }

    /// Forgets the allocation at `base`; false when there was none.
    pub fn remove(&self, base: u64) -> bool {
        self.map.write().remove(&base).is_some()
    }

    /// The live allocation whose range holds `ptr`.
    pub fn containing(&self, ptr: u64) -> Option<Allocation> {
        let map = self.map.read();
        let (_, a) = map.range(..=ptr).next_back()?;
        (ptr - a.base < a.size.max(1)).then_some(*a)
    }

    pub fn span_containing(&self, ptr: u64) -> Option<Span> {
        self.containing(ptr).map(|a| Span { base: a.base, size: a.size })
    }

    /// Held across fork() so no other thread leaves the table locked in the child.
    pub fn hold(&self) -> impl Sized + '_ {
        self.map.write()
    }

    pub fn totals(&self) -> LiveTotals {
        let map = self.map.read();
        LiveTotals { bytes: map.values().map(|a| a.size).sum(), count: map.len() as u64 }
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
        assert_eq!(h.lookup(10), HandleLookup::Alive(HandleState { stream: 0, pointer_mode: 0, math_mode: 3 }));
        h.destroyed(10, 7);
        assert_eq!(h.lookup(10), HandleLookup::Destroyed(7));
        h.update(10, |s| s.math_mode = 1);
        assert_eq!(h.lookup(10), HandleLookup::Destroyed(7));
        assert_eq!(h.lookup(11), HandleLookup::Unknown);
        h.created(10);
        assert!(matches!(h.lookup(10), HandleLookup::Alive(_)));
    }

    #[test]
    fn allocation_lookup_finds_the_holder() {
        let a = Allocations::default();
        a.insert(Allocation { base: 100, size: 50, time_ns: 0, stream: None });
        a.insert(Allocation { base: 200, size: 10, time_ns: 0, stream: Some(5) });
        assert_eq!(a.containing(100).map(|x| x.base), Some(100));
        assert_eq!(a.containing(149).map(|x| x.base), Some(100));
        assert_eq!(a.containing(150), None);
        assert_eq!(a.containing(99), None);
        assert_eq!(a.containing(205).and_then(|x| x.stream), Some(5));
        assert_eq!(a.totals(), LiveTotals { bytes: 60, count: 2 });
        assert!(a.remove(100));
        assert!(!a.remove(100));
        assert_eq!(a.containing(120), None);
    }
}
