//! Origin mode from a first run's trace (CUBLASGUARD_ORIGIN_FROM, `cublasguard run
//! --origin-from`): the memory that held the NaN/Inf the first run's guarded calls consumed,
//! found again in the rerun by the allocation that held it (its ordinal among the process's
//! allocations, and its size) and the offset inside it, as the first run typed it. A
//! deterministic program makes the same allocations in the same order, so the rerun watches
//! that memory from its creation, before any guarded call has used it. PyTorch's caching
//! allocator hands out slices of large allocations: the slice is found by the segment's
//! ordinal and the slice's offset in it, which hold as long as the program allocates the same
//! tensors in the same order.

use crate::scan::DType;
use crate::trace::{FaultKind, Trace};

/// One piece of memory to watch in the rerun.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OriginTarget {
    /// The allocation that held it: which allocation of the process, and its size.
    pub ordinal: u64,
    pub allocation_size: u64,
    /// Where it starts in the allocation, and how far it goes.
    pub offset: u64,
    pub bytes: u64,
    pub dtype: DType,
    /// The first run's call that consumed NaN/Inf from it (its number and function).
    pub consumed_by: (u64, String),
}

/// The types a trace names an operand by (`DType::name`).
const TYPES: [DType; 11] =
    [DType::F64, DType::F32, DType::F16, DType::BF16, DType::F8E4M3, DType::F8E5M2, DType::I8, DType::I32, DType::C32, DType::C64, DType::CI8];

/// The memory of every consumed NaN/Inf in `trace` that can be found again: an operand of a
/// `nonfinite_input` fault that held NaN/Inf, of a floating type, inside a live allocation the
/// trace numbers (traces before 0.5 do not). Each piece once.
pub fn targets_of(trace: &Trace) -> Vec<OriginTarget> {
    let mut targets: Vec<OriginTarget> = Vec::new();
    for fault in trace.faults.iter().filter(|f| f.kind == FaultKind::NonfiniteInput) {
        for op in &fault.operands {
            if op.nan.unwrap_or(0) + op.inf.unwrap_or(0) == 0 || op.pointer_array {
                continue;
            }
            let Some(alloc) = &op.allocation else { continue };
            let (Some(ordinal), Some(base), Some(ptr), Some(bytes)) = (alloc.ordinal, parse_hex(&alloc.base), parse_hex(&op.ptr), op.bytes) else { continue };
            let Some(dtype) = TYPES.into_iter().find(|t| t.name() == op.dtype).filter(|t| t.is_float()) else { continue };
            let Some(offset) = ptr.checked_sub(base).filter(|o| o.saturating_add(bytes) <= alloc.size) else { continue };
            let target = OriginTarget { ordinal, allocation_size: alloc.size, offset, bytes, dtype, consumed_by: (fault.seq, fault.api.clone()) };
            if !targets.iter().any(|t| (t.ordinal, t.offset, t.bytes) == (target.ordinal, target.offset, target.bytes)) {
                targets.push(target);
            }
        }
    }
    targets
}

fn parse_hex(text: &str) -> Option<u64> {
    u64::from_str_radix(text.strip_prefix("0x")?, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::{AllocationRecord, Fault, Operand};

    fn operand(name: &str, ptr: u64, nan: u64, allocation: Option<AllocationRecord>) -> Operand {
        let mut o: Operand = serde_json::from_value(serde_json::json!({
            "name": name, "ptr": format!("{ptr:#x}"), "dtype": "f32", "rows": 4, "cols": 4, "ld": 4, "bytes": 64,
            "allocation": null, "scanned": true, "nan": nan, "inf": 0
        }))
        .unwrap();
        o.allocation = allocation;
        o
    }

    fn fault(kind: FaultKind, seq: u64, operands: Vec<Operand>) -> Fault {
        let mut f: Fault = serde_json::from_value(serde_json::json!({
            "seq": seq, "api": "cublasSgemm_v2", "kind": "api_error", "message": "m", "status": 0, "status_name": "x",
            "thread": 1, "time_ns": 0, "args": {}, "operands": [], "backtrace": []
        }))
        .unwrap();
        (f.kind, f.operands) = (kind, operands);
        f
    }

    fn numbered(base: u64, size: u64, ordinal: Option<u64>) -> Option<AllocationRecord> {
        Some(AllocationRecord { base: format!("{base:#x}"), size, api: Some("cudaMalloc".into()), ordinal })
    }

    #[test]
    fn each_consumed_nan_in_a_numbered_allocation_is_a_target_once_at_its_offset() {
        let mut trace = Trace::default();
        let a = operand("A", 0x1040, 3, numbered(0x1000, 4096, Some(7)));
        let b = operand("B", 0x9000, 0, numbered(0x9000, 64, Some(8)));
        let old = operand("C", 0x5000, 2, numbered(0x5000, 64, None));
        trace.faults = vec![
            fault(FaultKind::NonfiniteInput, 12, vec![a.clone(), b, old]),
            fault(FaultKind::NonfiniteInput, 14, vec![a]),
            fault(FaultKind::NonfiniteOutput, 15, vec![operand("D", 0x7000, 1, numbered(0x7000, 64, Some(9)))]),
        ];
        let targets = targets_of(&trace);
        assert_eq!(
            targets,
            [OriginTarget { ordinal: 7, allocation_size: 4096, offset: 0x40, bytes: 64, dtype: DType::F32, consumed_by: (12, "cublasSgemm_v2".into()) }],
            "B held none, C's allocation is not numbered, D was produced, and A is named once"
        );
    }
}
