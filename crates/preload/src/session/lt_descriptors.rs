//! cublasLt matmul descriptors and matrix layouts this process created and has not destroyed
//! (the only ones the guard reads), with their attributes as the program set them: made by
//! `cublasLt*Create` with NVIDIA's defaults for the rest, changed by `cublasLt*SetAttribute`.
//! A cublasLtMatmul then reads them here instead of asking cuBLASLt for each attribute (about
//! 37 queries a call). An attribute set in a way the table does not follow (a size it does not
//! expect) leaves the descriptor known but its attributes unknown: they are queried then.
//!
//! A thread keeps its last few whole reads (`LtMemo`), so a program that makes its
//! descriptors once and multiplies with them many times (cuBLASLt's own samples, XLA's cached
//! plans) reads them without the lock; any change to the table (a descriptor made, set or
//! destroyed, as PyTorch does around every matmul) makes them stale.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::check::lt::{self, Dims, Layout, MatmulDesc};
use crate::state::{next_generation, PointerMap};

/// What is known of one descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Described {
    Layout(Layout),
    Matmul(MatmulDesc),
    /// Created by this process, its attributes not followed.
    Unfollowed,
}

pub struct LtDescriptors {
    map: Mutex<PointerMap<Described>>,
    /// Changed, under the lock, with every change to `map`: what makes a memo stale. Unique
    /// across tables (a forked child's copy starts with its own).
    generation: AtomicU64,
}

impl Default for LtDescriptors {
    fn default() -> Self {
        Self { map: Mutex::default(), generation: AtomicU64::new(next_generation()) }
    }
}

/// A matmul's descriptor and layouts, as one read of the table found them, with what
/// `lt::check_descriptors` says of them (`None`: a rule broken).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulDescribed {
    pub desc: MatmulDesc,
    pub layouts: [Layout; 4],
    pub dims: Option<Dims>,
}

/// How many whole reads a thread remembers.
const MEMO: usize = 4;

/// Which read a memo slot holds (generation 0: none).
#[derive(Clone, Copy, PartialEq, Eq)]
struct MemoKey {
    table: usize,
    generation: u64,
    desc: u64,
    layouts: [u64; 4],
}

impl MemoKey {
    const EMPTY: Self = Self { table: 0, generation: 0, desc: 0, layouts: [0; 4] };
}

/// A thread's last few `matmul_with_layouts` answers (in its one thread-local block). Keys
/// and answers apart, so that a lookup compares keys without copying answers.
pub struct LtMemo {
    /// Each slot's matmul descriptor, compared first (one line of memory).
    descs: Cell<[u64; MEMO]>,
    keys: Cell<[MemoKey; MEMO]>,
    found: RefCell<[Option<MatmulDescribed>; MEMO]>,
    next: Cell<usize>,
}

impl LtMemo {
    pub const fn new() -> Self {
        Self { descs: Cell::new([0; MEMO]), keys: Cell::new([MemoKey::EMPTY; MEMO]), found: RefCell::new([None; MEMO]), next: Cell::new(0) }
    }

    /// The slot that holds `key`'s answer.
    #[inline(always)]
    fn slot_of(&self, key: &MemoKey) -> Option<usize> {
        let (descs, keys): (_, &Cell<[MemoKey]>) = (self.descs.get(), &self.keys);
        // Key by key, so that a lookup copies one key, not all.
        (0..MEMO).find(|&i| descs[i] == key.desc && keys.as_slice_of_cells()[i].get() == *key)
    }
}

impl Default for LtMemo {
    fn default() -> Self {
        Self::new()
    }
}

/// `cublasLtMatrixLayoutAttribute_t` values the guard reads.
mod layout_attr {
    pub const TYPE: i32 = 0;
    pub const ORDER: i32 = 1;
    pub const ROWS: i32 = 2;
    pub const COLS: i32 = 3;
    pub const LD: i32 = 4;
    pub const BATCH_COUNT: i32 = 5;
    pub const STRIDED_BATCH_OFFSET: i32 = 6;
}

/// `cublasLtMatmulDescAttributes_t` values the guard reads.
mod desc_attr {
    pub const COMPUTE_TYPE: i32 = 0;
    pub const SCALE_TYPE: i32 = 1;
    pub const POINTER_MODE: i32 = 2;
    pub const TRANSA: i32 = 3;
    pub const TRANSB: i32 = 4;
    pub const EPILOGUE: i32 = 7;
    pub const BIAS_POINTER: i32 = 8;
    pub const BIAS_BATCH_STRIDE: i32 = 10;
    pub const BIAS_DATA_TYPE: i32 = 26;
}

fn i32_of(bytes: &[u8]) -> Option<i32> {
    Some(i32::from_le_bytes(bytes.try_into().ok()?))
}

fn u64_of(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.try_into().ok()?))
}

impl LtDescriptors {
    /// A layout made by `cublasLtMatrixLayoutCreate(type, rows, cols, ld)`: column order, one
    /// matrix, as NVIDIA documents the defaults.
    pub fn layout_created(&self, ptr: u64, dtype: i32, rows: u64, cols: u64, ld: i64) {
        let layout = Layout { dtype, order: crate::check::lt::ORDER_COL, rows, cols, ld, batch: 1, stride: 0 };
        self.change(|map| map.insert(ptr, Described::Layout(layout)));
    }

    /// A descriptor made by `cublasLtMatmulDescCreate(compute, scale)`: host pointer mode, no
    /// transposes, the default epilogue, no bias (its type that of D: -1).
    pub fn matmul_created(&self, ptr: u64, compute: i32, scale: i32) {
        let desc = MatmulDesc { compute, scale, pointer_mode: 0, transa: 0, transb: 0, epilogue: 1, bias: 0, bias_stride: 0, bias_type: -1 };
        self.change(|map| map.insert(ptr, Described::Matmul(desc)));
    }

    /// A descriptor created whose attributes are not known (for the tests of the tables that
    /// only need it known).
    #[cfg(test)]
    pub fn created(&self, ptr: u64) {
        self.change(|map| map.insert(ptr, Described::Unfollowed));
    }

    pub fn destroyed(&self, ptr: u64) {
        self.change(|map| map.remove(&ptr));
    }

    /// `change` applied to the table under its lock, and the generation moved on.
    fn change<R>(&self, change: impl FnOnce(&mut PointerMap<Described>) -> R) -> R {
        let mut map = self.map.lock();
        let r = change(&mut map);
        self.generation.store(next_generation(), Ordering::Release);
        r
    }

    pub fn contains(&self, ptr: u64) -> bool {
        ptr != 0 && self.map.lock().contains_key(&ptr)
    }

    /// `cublasLtMatrixLayoutSetAttribute(ptr, attr, bytes)` succeeded.
    pub fn layout_set(&self, ptr: u64, attr: i32, bytes: &[u8]) {
        self.change(|map| Self::set_layout(map, ptr, attr, bytes));
    }

    fn set_layout(map: &mut PointerMap<Described>, ptr: u64, attr: i32, bytes: &[u8]) {
        let Some(entry) = map.get_mut(&ptr) else { return };
        let Described::Layout(mut l) = *entry else { return };
        let followed = match attr {
            layout_attr::TYPE => i32_of(bytes).map(|v| l.dtype = v),
            layout_attr::ORDER => i32_of(bytes).map(|v| l.order = v),
            layout_attr::ROWS => u64_of(bytes).map(|v| l.rows = v),
            layout_attr::COLS => u64_of(bytes).map(|v| l.cols = v),
            layout_attr::LD => u64_of(bytes).map(|v| l.ld = v as i64),
            layout_attr::BATCH_COUNT => i32_of(bytes).map(|v| l.batch = v),
            layout_attr::STRIDED_BATCH_OFFSET => u64_of(bytes).map(|v| l.stride = v as i64),
            // Not one the guard reads (a plane offset, ...).
            _ => Some(()),
        };
        *entry = if followed.is_some() { Described::Layout(l) } else { Described::Unfollowed };
    }

    /// `cublasLtMatmulDescSetAttribute(ptr, attr, bytes)` succeeded.
    pub fn matmul_set(&self, ptr: u64, attr: i32, bytes: &[u8]) {
        self.change(|map| Self::set_matmul(map, ptr, attr, bytes));
    }

    fn set_matmul(map: &mut PointerMap<Described>, ptr: u64, attr: i32, bytes: &[u8]) {
        let Some(entry) = map.get_mut(&ptr) else { return };
        let Described::Matmul(mut d) = *entry else { return };
        let followed = match attr {
            desc_attr::COMPUTE_TYPE => i32_of(bytes).map(|v| d.compute = v),
            desc_attr::SCALE_TYPE => i32_of(bytes).map(|v| d.scale = v),
            desc_attr::POINTER_MODE => i32_of(bytes).map(|v| d.pointer_mode = v),
            desc_attr::TRANSA => i32_of(bytes).map(|v| d.transa = v),
            desc_attr::TRANSB => i32_of(bytes).map(|v| d.transb = v),
            desc_attr::EPILOGUE => i32_of(bytes).map(|v| d.epilogue = v as u32),
            desc_attr::BIAS_POINTER => u64_of(bytes).map(|v| d.bias = v),
            desc_attr::BIAS_BATCH_STRIDE => u64_of(bytes).map(|v| d.bias_stride = v as i64),
            desc_attr::BIAS_DATA_TYPE => i32_of(bytes).map(|v| d.bias_type = v),
            // Not one the guard reads (TRANSC, the FP8 scales, ...).
            _ => Some(()),
        };
        *entry = if followed.is_some() { Described::Matmul(d) } else { Described::Unfollowed };
    }

    /// The layout's attributes, where they are followed.
    pub fn layout(&self, ptr: u64) -> Option<Layout> {
        match self.map.lock().get(&ptr) {
            Some(Described::Layout(l)) => Some(*l),
            _ => None,
        }
    }

    /// The matmul descriptor's attributes, where they are followed.
    pub fn matmul(&self, ptr: u64) -> Option<MatmulDesc> {
        match self.map.lock().get(&ptr) {
            Some(Described::Matmul(d)) => Some(*d),
            _ => None,
        }
    }

    /// A matmul descriptor's and its four layouts' attributes under one lock, where all five
    /// are followed (the lean path's read: `None` sends the call to its handler, which asks
    /// cuBLASLt for the rest or names the one not created).
    #[cfg(test)]
    pub fn matmul_with_layouts(&self, desc: u64, layouts: [u64; 4]) -> Option<MatmulDescribed> {
        Self::read_matmul(&self.map.lock(), desc, layouts)
    }

    fn read_matmul(map: &PointerMap<Described>, desc: u64, layouts: [u64; 4]) -> Option<MatmulDescribed> {
        let Some(Described::Matmul(md)) = map.get(&desc) else { return None };
        let layout = |ptr: u64| match map.get(&ptr) {
            Some(Described::Layout(l)) => Some(*l),
            _ => None,
        };
        let layouts = [layout(layouts[0])?, layout(layouts[1])?, layout(layouts[2])?, layout(layouts[3])?];
        let [a, b, c, d] = &layouts;
        Some(MatmulDescribed { desc: *md, layouts, dims: lt::check_descriptors(md, [a, b, c, d]).ok() })
    }

    /// `f` of `matmul_with_layouts`'s answer, read from the thread's `memo` when the table has
    /// not changed since the thread last read these five (no lock), else read and kept there;
    /// `None` where the five are not all followed. `f` gets the answer where it is kept: a
    /// clean call copies none of it.
    #[inline]
    pub fn with_matmul_in<R>(&self, desc: u64, layouts: [u64; 4], memo: &LtMemo, f: impl FnOnce(&MatmulDescribed) -> R) -> Option<R> {
        let table = self as *const Self as usize;
        let key = MemoKey { table, generation: self.generation.load(Ordering::Acquire), desc, layouts };
        let Ok(mut kept) = memo.found.try_borrow_mut() else {
            // Only were `f` to ask again: the table, unremembered.
            return Self::read_matmul(&self.map.lock(), desc, layouts).as_ref().map(f);
        };
        if let Some(slot) = memo.slot_of(&key) {
            return kept[slot].as_ref().map(f);
        }
        let (found, generation) = {
            let map = self.map.lock();
            // Read under the lock: the generation of what was found.
            (Self::read_matmul(&map, desc, layouts), self.generation.load(Ordering::Acquire))
        };
        let slot = memo.next.get() % MEMO;
        let mut descs = memo.descs.get();
        descs[slot] = desc;
        memo.descs.set(descs);
        let keys: &Cell<[MemoKey]> = &memo.keys;
        keys.as_slice_of_cells()[slot].set(MemoKey { generation, ..key });
        memo.next.set(slot + 1);
        kept[slot] = found;
        kept[slot].as_ref().map(f)
    }

    /// A table with the same descriptors (a forked child's copy).
    pub fn copy(&self) -> Self {
        Self { map: Mutex::new(self.map.lock().clone()), generation: AtomicU64::new(next_generation()) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layout_and_a_descriptor_read_back_what_create_and_set_attribute_gave_them() {
        let t = LtDescriptors::default();
        t.layout_created(0x10, 0, 4, 8, 4);
        t.layout_set(0x10, layout_attr::BATCH_COUNT, &3i32.to_le_bytes());
        t.layout_set(0x10, layout_attr::STRIDED_BATCH_OFFSET, &32i64.to_le_bytes());
        t.layout_set(0x10, 9, &[1, 2, 3]); // an attribute the guard does not read
        assert_eq!(t.layout(0x10), Some(Layout { dtype: 0, order: 0, rows: 4, cols: 8, ld: 4, batch: 3, stride: 32 }));
        t.matmul_created(0x20, 68, 0);
        t.matmul_set(0x20, desc_attr::TRANSA, &1i32.to_le_bytes());
        t.matmul_set(0x20, desc_attr::EPILOGUE, &4u32.to_le_bytes());
        t.matmul_set(0x20, desc_attr::BIAS_POINTER, &0x9000u64.to_le_bytes());
        let d = t.matmul(0x20).expect("followed");
        assert_eq!((d.compute, d.transa, d.transb, d.epilogue, d.bias, d.bias_type), (68, 1, 0, 4, 0x9000, -1));
        assert_eq!((t.layout(0x20), t.matmul(0x10)), (None, None), "each is what it was made as");
    }

    #[test]
    fn a_matmul_is_read_whole_under_one_lock_only_when_its_descriptor_and_every_layout_are_followed() {
        let t = LtDescriptors::default();
        t.matmul_created(0x20, 68, 0);
        for (i, l) in [0x10, 0x11, 0x12, 0x13].into_iter().enumerate() {
            t.layout_created(l, 0, 4 + i as u64, 8, 16);
        }
        let read = t.matmul_with_layouts(0x20, [0x10, 0x11, 0x12, 0x13]).expect("all followed");
        assert_eq!((read.desc.compute, read.layouts.map(|l| l.rows)), (68, [4, 5, 6, 7]));
        assert_eq!(read.dims, None, "the layouts disagree (D is 7 x 8, C 6 x 8)");
        assert!(t.matmul_with_layouts(0x10, [0x10, 0x11, 0x12, 0x13]).is_none(), "a layout as the descriptor");
        assert!(t.matmul_with_layouts(0x20, [0x10, 0x11, 0x20, 0x13]).is_none(), "the descriptor as a layout");
        t.layout_set(0x13, layout_attr::ROWS, &[1]);
        assert!(t.matmul_with_layouts(0x20, [0x10, 0x11, 0x12, 0x13]).is_none(), "D's layout unfollowed");
        assert!(t.matmul_with_layouts(0x20, [0x10, 0x11, 0x12, 0x99]).is_none(), "a layout never made");
    }

    #[test]
    fn a_threads_memo_answers_as_the_table_does_and_goes_stale_with_any_change_to_it() {
        let t = LtDescriptors::default();
        t.matmul_created(0x20, 68, 0);
        let layouts = [0x10, 0x11, 0x12, 0x13];
        for (l, rows) in layouts.into_iter().zip([4, 8, 4, 4]) {
            t.layout_created(l, 0, rows, 8, 16);
        }
        let memo = LtMemo::new();
        let first = t.with_matmul_in(0x20, layouts, &memo, |r| *r);
        assert_eq!(first, t.matmul_with_layouts(0x20, layouts));
        assert_eq!(t.with_matmul_in(0x20, layouts, &memo, |r| *r), first, "answered from the memo");
        t.layout_set(0x11, layout_attr::ROWS, &9u64.to_le_bytes());
        assert_eq!(first.and_then(|r| r.dims), Some(Dims { m: 4, n: 8, k: 8 }), "A 4 x 8, B 8 x 8, C and D 4 x 8");
        let changed = t.with_matmul_in(0x20, layouts, &memo, |r| *r).expect("followed");
        assert_eq!((changed.layouts[1].rows, changed.dims), (9, None), "a set attribute is seen at once, and its broken rule");
        t.matmul_set(0x20, desc_attr::TRANSA, &1i32.to_le_bytes());
        assert_eq!(t.with_matmul_in(0x20, layouts, &memo, |r| *r).map(|r| r.desc.transa), Some(1));
        t.destroyed(0x13);
        assert_eq!(t.with_matmul_in(0x20, layouts, &memo, |r| *r), None, "a destroyed layout is seen at once");
        let other = LtDescriptors::default();
        assert_eq!(other.with_matmul_in(0x20, layouts, &memo, |r| *r), None, "another table's answer is not taken");
        for (i, d) in (0x30..0x30 + 2 * MEMO as u64).enumerate() {
            t.matmul_created(d, 68 + i as i32 % 2, 0);
        }
        t.layout_created(0x13, 0, 4, 8, 16);
        for d in 0x30..0x30 + 2 * MEMO as u64 {
            assert_eq!(t.with_matmul_in(d, layouts, &memo, |r| *r), t.matmul_with_layouts(d, layouts), "{d:#x}, more than the memo holds");
        }
    }

    #[test]
    fn an_attribute_of_an_unexpected_size_leaves_the_descriptor_known_and_its_attributes_to_be_queried() {
        let t = LtDescriptors::default();
        t.layout_created(0x10, 0, 4, 8, 4);
        t.layout_set(0x10, layout_attr::ROWS, &[1, 2, 3, 4]);
        assert!(t.contains(0x10) && t.layout(0x10).is_none());
        t.layout_set(0x10, layout_attr::ROWS, &9u64.to_le_bytes());
        assert!(t.layout(0x10).is_none(), "once unfollowed, always queried");
        t.destroyed(0x10);
        assert!(!t.contains(0x10));
        t.layout_set(0x30, layout_attr::ROWS, &9u64.to_le_bytes());
        assert!(!t.contains(0x30), "a descriptor it never saw made stays unknown");
    }
}
