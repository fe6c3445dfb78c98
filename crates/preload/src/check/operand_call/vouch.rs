//! For the hook layer's lean path (issue 44, point 3): whether an operand would pass
//! `check_operand_pointers`, decided from the guard's allocation table alone, with no device
//! query. What it cannot place (a pointer array, which lives in device memory; memory the
//! table does not hold) answers false, and the call goes to its handler, which checks it.

use super::bounds::member_addr;
use super::operands::{Members, OperandSpec, Role};
use crate::state::AllocationView;
use crate::validate::{self, Containment};

/// Every member of `spec` inside one live allocation the guard saw (an operand of no extent or
/// no members is not looked at, as `check_operand_pointers` does not; a strided batch by its
/// first and last members, as there).
#[inline(always)]
pub fn operand_inside(allocations: AllocationView<'_>, spec: &OperandSpec) -> bool {
    let Some(extent) = validate::operand_extent(spec.shape, spec.dtype.size().unwrap_or(1)) else { return false };
    let count = spec.members.count();
    if extent == 0 || count == 0 {
        return true;
    }
    if spec.ptr == 0 || spec.role == Role::Result {
        return false;
    }
    let span_of = |addr: u64| allocations.span_containing(addr).filter(|span| validate::containment(addr, extent, *span) == Containment::Inside);
    match spec.members {
        Members::One => span_of(spec.ptr).is_some(),
        // The first and last members in one allocation: every member between is in it too.
        Members::Strided { .. } => {
            let (Some(first), Some(last)) = (member_addr(spec, &[], 0), member_addr(spec, &[], count - 1)) else { return false };
            matches!((span_of(first), span_of(last)), (Some(a), Some(b)) if a == b)
        }
        Members::Array { .. } => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scan::DType;
    use crate::state::{Allocation, Allocations, ThreadMemo};
    use crate::validate::StoredShape;

    const A: u64 = 0x10_0000;

    /// `count` 4 x 4 f32 matrices `stride` elements apart from `ptr`, against one allocation of
    /// three such matrices at A.
    fn inside(ptr: u64, count: u64, stride: i64) -> bool {
        let table = Allocations::default();
        table.insert(Allocation { base: A, size: 4 * 16 * 3, time_ns: 0, stream: None, api: "cudaMalloc", ordinal: 0 });
        let spec = OperandSpec {
            name: "A",
            ptr,
            shape: StoredShape { rows: 4, cols: 4, ld: 4 },
            dtype: DType::F32,
            members: Members::Strided { count, stride },
            role: Role::Input,
            increment: None,
            triangle: None,
        };
        let memo = ThreadMemo::new();
        operand_inside(AllocationView::new(&table, &memo), &spec)
    }

    #[test]
    fn a_strided_batch_is_inside_when_its_first_and_last_members_are_in_one_allocation() {
        assert!(inside(A, 3, 16));
        assert!(inside(A + 128, 3, -16), "a negative stride");
        assert!(!inside(A, 3, 17), "the last member runs past the allocation");
        assert!(!inside(A + 4, 3, 16), "every member shifted past its end");
        assert!(!inside(0x90_0000, 1, 16), "memory the guard never saw");
        assert!(!inside(0, 1, 16), "NULL");
    }

    #[test]
    fn an_operand_of_no_members_is_not_looked_at() {
        assert!(inside(0x90_0000, 0, 16));
    }
}
