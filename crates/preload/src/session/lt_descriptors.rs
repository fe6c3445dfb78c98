//! cublasLt matmul descriptors and matrix layouts this process created and has not destroyed
//! (the only ones the guard reads), with their attributes as the program set them: made by
//! `cublasLt*Create` with NVIDIA's defaults for the rest, changed by `cublasLt*SetAttribute`.
//! A cublasLtMatmul then reads them here instead of asking cuBLASLt for each attribute (about
//! 37 queries a call). An attribute set in a way the table does not follow (a size it does not
//! expect) leaves the descriptor known but its attributes unknown: they are queried then.

use parking_lot::Mutex;

use crate::check::lt::{Layout, MatmulDesc};
use crate::state::PointerMap;

/// What is known of one descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Described {
    Layout(Layout),
    Matmul(MatmulDesc),
    /// Created by this process, its attributes not followed.
    Unfollowed,
}

#[derive(Default)]
pub struct LtDescriptors {
    map: Mutex<PointerMap<Described>>,
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
        self.map.lock().insert(ptr, Described::Layout(layout));
    }

    /// A descriptor made by `cublasLtMatmulDescCreate(compute, scale)`: host pointer mode, no
    /// transposes, the default epilogue, no bias (its type that of D: -1).
    pub fn matmul_created(&self, ptr: u64, compute: i32, scale: i32) {
        let desc = MatmulDesc { compute, scale, pointer_mode: 0, transa: 0, transb: 0, epilogue: 1, bias: 0, bias_stride: 0, bias_type: -1 };
        self.map.lock().insert(ptr, Described::Matmul(desc));
    }

    /// A descriptor created whose attributes are not known (for the tests of the tables that
    /// only need it known).
    #[cfg(test)]
    pub fn created(&self, ptr: u64) {
        self.map.lock().insert(ptr, Described::Unfollowed);
    }

    pub fn destroyed(&self, ptr: u64) {
        self.map.lock().remove(&ptr);
    }

    pub fn contains(&self, ptr: u64) -> bool {
        ptr != 0 && self.map.lock().contains_key(&ptr)
    }

    /// `cublasLtMatrixLayoutSetAttribute(ptr, attr, bytes)` succeeded.
    pub fn layout_set(&self, ptr: u64, attr: i32, bytes: &[u8]) {
        let mut map = self.map.lock();
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
        let mut map = self.map.lock();
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

    /// A table with the same descriptors (a forked child's copy).
    pub fn copy(&self) -> Self {
        Self { map: Mutex::new(self.map.lock().clone()) }
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
