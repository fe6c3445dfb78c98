//! The quick verdict: a landed call judged from its bytes alone when every one reads finite,
//! without running its checks again.

use super::*;

/// A waiting call judged from its landed bytes alone, without running its checks again: what
/// the replay would note (`Verdict::quick`), when every copy reads finite as its operand's
/// element type, every scan kernel counted nothing, and every host read other than alpha and
/// beta (a result in host memory) reads finite. `None` (the replay judges it) as soon as one
/// value is not finite or a read cannot be typed: a pointer-array batch, a copy that no operand,
/// or operands of more than one type, hold.
pub(super) fn quick_verdict(v: &Verdict, memory: &dyn VerdictMemory, pending: &Pending, buf: &mut Vec<u8>) -> Option<FiniteNotes> {
    let notes = v.quick?;
    let ranges = OperandRanges::of(&v.call)?;
    let log = &pending.log;
    let finite = |dtype: DType, bytes: &[u8]| {
        let mut tally = Tally::default();
        scan::tally_elements(dtype, bytes, 0, &mut tally);
        tally.is_finite()
    };
    let counted_nothing = |&(_, offset, _, jobs): &(JobsKey, u64, bool, usize)| {
        // Three words a job (NaN, Inf, the first's position), cleared before the kernel ran.
        let mut counts = [0u8; 24 * MAX_BATCH_SCANS];
        let Some(counts) = counts.get_mut(..24 * jobs) else { return false };
        memory.read(pending.arena, offset, counts) && counts.chunks_exact(24).all(|job| job[..16].iter().all(|&b| b == 0))
    };
    let copy_finite = |&(addr, len, offset, _): &(u64, usize, u64, bool), buf: &mut Vec<u8>| {
        let Some(dtype) = ranges.element_type(addr, len) else { return false };
        if let Some(bytes) = memory.landed(pending.arena, offset, len) {
            return finite(dtype, bytes);
        }
        buf.clear();
        buf.resize(len, 0);
        memory.read(pending.arena, offset, buf) && finite(dtype, buf)
    };
    let host_finite = |(addr, bytes): &(u64, HostBytes)| {
        [v.call.alpha, v.call.beta].contains(&Some(*addr)) || ranges.element_type(*addr, bytes.len()).is_some_and(|dtype| finite(dtype, bytes))
    };
    let clean = log.scans.iter().all(counted_nothing) && log.copies.iter().all(|c| copy_finite(c, buf)) && log.host.iter().all(host_finite);
    clean.then_some(notes)
}

/// Where a call's operands lie, `[first, last)`, with their element types, to tell which one a
/// read was of.
struct OperandRanges([Option<(u64, u64, DType)>; MAX_OPERANDS]);

impl OperandRanges {
    /// `None` when an operand's extent is not known (a pointer-array batch: its members are
    /// anywhere).
    fn of(call: &OperandCall) -> Option<Self> {
        let mut ranges = [None; MAX_OPERANDS];
        for (range, o) in ranges.iter_mut().zip(&call.operands) {
            if let Some(o) = o {
                let (first, last) = operand_range(o)?;
                *range = Some((first, last, o.dtype));
            }
        }
        Some(Self(ranges))
    }

    /// The element type of the operand that holds the `len` bytes at `addr` (every scan reads
    /// inside its operand); `None` when none does, or operands of different types do.
    fn element_type(&self, addr: u64, len: usize) -> Option<DType> {
        let end = addr.checked_add(len as u64)?;
        let mut found = None;
        for &(first, last, dtype) in self.0.iter().flatten() {
            if addr >= first && end <= last {
                if found.is_some_and(|d| d != dtype) {
                    return None;
                }
                found = Some(dtype);
            }
        }
        found
    }
}

/// The bytes an operand's members span: `[first, last)`.
fn operand_range(o: &OperandSpec) -> Option<(u64, u64)> {
    let elem = o.dtype.size()?;
    let extent = validate::operand_extent(o.shape, elem)?;
    let span = match o.members {
        Members::One => 0,
        Members::Strided { count, stride } => i128::from(count.saturating_sub(1)) * i128::from(stride) * i128::from(elem),
        Members::Array { .. } => return None,
    };
    let base = i128::from(o.ptr);
    let first = u64::try_from(base + span.min(0)).ok()?;
    let last = u64::try_from(base + span.max(0) + i128::from(extent)).ok()?;
    Some((first, last))
}
