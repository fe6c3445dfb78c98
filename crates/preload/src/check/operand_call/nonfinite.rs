//! NaN/Inf in what a call reads (before it) and writes (after it), every member of a batch or
//! an even sample of them, read the way the library reads them (beta decides whether C is read).

use super::bounds::member_addr;
use super::operands::{describe, Members, OperandReport, OperandSpec, Role, Triangle, MAX_OPERANDS};
use super::OperandCallCheck;
use crate::check::{BatchScan, Finding, Reads, MAX_BATCH_SCANS};
use crate::cuda::PointerMode;
use crate::scan::{self, DType, MatrixScan};
use crate::state::AllocationView;
use crate::trace::FaultKind;
use crate::validate::{self, Containment, StoredShape};

/// A free slot of `prescan_on_device`'s jobs.
const UNUSED_JOB: BatchScan = BatchScan { addr: 0, shape: StoredShape { rows: 0, cols: 0, ld: 0 }, dtype: DType::F32, members: 0, stride: 0, array: false };

/// "2 NaN (first at row 1, col 0)"; a vector's position is its element index.
pub(super) fn counts(spec: &OperandSpec, scan: &MatrixScan) -> String {
    let mut parts = Vec::new();
    if scan.nan > 0 {
        parts.push(format!("{} NaN", scan.nan));
    }
    if scan.inf > 0 {
        parts.push(format!("{} Inf", scan.inf));
    }
    let mut s = parts.join(" and ");
    match (scan.first_nonfinite, spec.increment) {
        (Some((_, col)), Some(_)) => s.push_str(&format!(" (first at element {col})")),
        (Some((row, col)), None) => s.push_str(&format!(" (first at row {row}, col {col})")),
        (None, _) => {}
    }
    if scan.sampled {
        s.push_str(&format!(" in a sample of {} elements", scan.scanned_elements));
    }
    s
}

impl OperandCallCheck<'_> {
    /// A scalar argument's bytes (`size` of them valid), read the way the library reads it:
    /// from host memory or device memory as the pointer mode says; `None` when it cannot be.
    pub fn read_scalar(&self, ptr: Option<u64>, allocations: AllocationView<'_>, device: &dyn Reads) -> Option<([u8; 16], usize)> {
        let size = self.call.scalar.size()? as usize;
        let ptr = ptr?;
        let mut bytes = [0u8; 16];
        let out = &mut bytes[..size];
        let ok = match self.pointer_mode() {
            PointerMode::Host => allocations.containing(ptr).is_none() && device.read_host(ptr, out),
            PointerMode::Device => {
                let inside = allocations.span_containing(ptr).is_some_and(|s| validate::containment(ptr, size as u64, s) == Containment::Inside);
                inside && device.read(ptr, out, self.stream()).is_ok()
            }
            PointerMode::Unknown(_) => false,
        };
        ok.then_some((bytes, size))
    }

    /// Whether beta is zero, read the way the library reads it; `None` when it cannot be read.
    pub(super) fn read_beta_is_zero(&self, allocations: AllocationView<'_>, device: &dyn Reads) -> Option<bool> {
        if self.recording && self.pointer_mode() != PointerMode::Host {
            // Not known until the queued read lands: C is scanned, and judged then.
            return None;
        }
        let (bytes, size) = self.read_scalar(self.call.beta, allocations, device)?;
        // +0.0 and -0.0 both mean "do not read C": every bit but the sign is zero (and for
        // integer scales, zero is all bits zero).
        // A complex scale is zero when both its parts are.
        let part = self.call.scalar.complex_part().and_then(|p| p.size()).unwrap_or(size as u64) as usize;
        Some(bytes[..size].chunks(part).all(|p| {
            let mut word = [0u8; 8];
            word[..p.len()].copy_from_slice(p);
            let bits = u64::from_le_bytes(word);
            let sign = if self.call.scalar.is_float() { 1u64 << (part * 8 - 1) } else { 0 };
            bits & !sign == 0
        }))
    }

    /// Scans the operands `wanted` picks in one launch on the device, when the device can:
    /// their next `scan_operand` takes the result instead of scanning again.
    pub(super) fn prescan_on_device(&mut self, device: &dyn Reads, wanted: impl Fn(&OperandReport<'_>) -> bool) {
        // On the stack: this runs for every scanned call, twice for a deferred one (kept and
        // judged), where the device scan is off as well as on.
        let mut jobs = [UNUSED_JOB; MAX_BATCH_SCANS];
        let mut which = [0usize; MAX_BATCH_SCANS];
        let mut queued = 0;
        for (i, o) in self.operands.iter().enumerate() {
            let Some(o) = o else { continue };
            if !wanted(o)
                || !o.readable
                || !Self::used(o)
                || o.spec.triangle.is_some()
                || self.in_host_memory(o.spec)
                || !o.spec.dtype.is_float()
                || o.spec.dtype.complex_part().is_some()
            {
                continue;
            }
            let members = self.member_count(i);
            let (stride, array) = match o.spec.members {
                Members::One => (0, false),
                Members::Strided { stride, .. } => (stride, false),
                Members::Array { .. } => (0, true),
            };
            if members == 0 {
                continue;
            }
            let (Some(job), Some(slot)) = (jobs.get_mut(queued), which.get_mut(queued)) else { return };
            *job = BatchScan { addr: o.spec.ptr, shape: o.spec.shape, dtype: o.spec.dtype, members, stride, array };
            *slot = i;
            queued += 1;
        }
        if queued == 0 {
            return;
        }
        let Some(results) = device.scan_batch_on_device(&jobs[..queued], self.stream()) else { return };
        for (&i, (scan, bad)) in which[..queued].iter().zip(results) {
            self.keep_scan(i, scan, bad);
            self.prescanned |= 1 << i;
        }
    }

    /// How many members of operand `i` there are to scan (a pointer array: those read).
    fn member_count(&self, i: usize) -> u64 {
        match self.operands[i].map(|o| o.spec.members) {
            Some(Members::Array { count }) => count.min(self.arrays[i].len() as u64),
            Some(m) => m.count(),
            None => 0,
        }
    }

    /// A dot product's result in HOST pointer mode: host memory, read on the host.
    fn in_host_memory(&self, spec: &OperandSpec) -> bool {
        spec.role == Role::Result && self.pointer_mode() == PointerMode::Host
    }

    /// Records an operand's scan, and for a batch the first member that held NaN/Inf.
    fn keep_scan(&mut self, i: usize, scan: MatrixScan, bad: Option<u64>) {
        if let Some(r) = self.operands[i].as_mut() {
            r.scan = Some(scan);
            if r.spec.members.count() > 1 {
                r.bad_member = bad;
            }
        }
    }

    /// Scans every member (or an even sample of them, within `scan_bytes` for the operand).
    pub(super) fn scan_operand(&mut self, i: usize, device: &dyn Reads, buf: &mut Vec<u8>, scan_bytes: u64) -> Option<MatrixScan> {
        let o = self.operands[i]?;
        if self.prescanned & (1 << i) != 0 {
            self.prescanned &= !(1 << i);
            return o.scan;
        }
        let elem = o.spec.dtype.size()?;
        let count = self.member_count(i);
        let member_bytes = (o.spec.shape.rows.max(0) as u64).saturating_mul(o.spec.shape.cols.max(0) as u64).saturating_mul(elem);
        let total = member_bytes.saturating_mul(count);
        let (step, per_member) = if total <= scan_bytes || count == 0 {
            (1, scan_bytes)
        } else {
            let members = (scan_bytes / member_bytes.max(1)).clamp(1, count);
            (count.div_ceil(members), (scan_bytes / members).max(elem))
        };
        let host = self.in_host_memory(o.spec);
        if count > 1 && step == 1 && !host && o.spec.triangle.is_none() {
            if let Some(scan) = self.scan_members_at_once(i, count, device, buf, scan_bytes) {
                return Some(scan);
            }
        }
        let reader: &dyn scan::DeviceReader = if host { &HostReader { device } } else { &StreamReader { device, stream: self.stream() } };
        let mut total = BatchTally::default();
        let mut b = 0;
        while b < count {
            let addr = member_addr(o.spec, &self.arrays[i], b)?;
            let s = match o.spec.triangle {
                Some(triangle) => scan_triangle(reader, addr, o.spec.shape, o.spec.dtype, triangle, buf, per_member)?,
                None if host => scan::scan_matrix(reader, addr, o.spec.shape, o.spec.dtype, buf, per_member).ok()?,
                None => scan_on_stream(device, addr, o.spec.shape, o.spec.dtype, self.stream(), buf, per_member)?,
            };
            total.add(b, &s);
            total.scan.sampled |= s.sampled || step > 1;
            // One member scanned on the host (the device path fell back) makes it a host scan.
            total.scan.on_device = s.on_device && (b == 0 || total.scan.on_device);
            b += step;
        }
        self.keep_scan(i, total.scan, total.bad);
        Some(total.scan)
    }

    /// The host path for a batch small enough to hold: every member copied with one
    /// synchronisation for all of them, then scanned from the host buffer. `None`: too big, or
    /// a copy failed (the member-by-member path takes over).
    fn scan_members_at_once(&mut self, i: usize, count: u64, device: &dyn Reads, buf: &mut Vec<u8>, scan_bytes: u64) -> Option<MatrixScan> {
        let o = self.operands[i]?;
        let elem = o.spec.dtype.size()?;
        let shape = o.spec.shape;
        // One member's stored extent, padding between columns included.
        let extent = validate::operand_extent(shape, elem)?;
        let total = extent.checked_mul(count)?;
        if total > scan_bytes.min(HELD_BATCH_BYTES) || shape.rows <= 0 || shape.cols <= 0 {
            return None;
        }
        let mut pieces = Vec::with_capacity(count as usize);
        for b in 0..count {
            pieces.push((member_addr(o.spec, &self.arrays[i], b)?, extent as usize));
        }
        buf.clear();
        buf.resize(total as usize, 0);
        device.read_many(&pieces, buf, self.stream()).ok()?;
        let mut total = BatchTally::default();
        let mut chunk = Vec::new();
        let held = Held { bytes: buf, placeholders: device.answers_placeholders() };
        for b in 0..count {
            let member = scan::scan_matrix(&held, b * extent, shape, o.spec.dtype, &mut chunk, u64::MAX).ok()?;
            total.add(b, &member);
        }
        self.keep_scan(i, total.scan, total.bad);
        Some(total.scan)
    }

    pub fn scan_inputs(&mut self, allocations: AllocationView<'_>, device: &dyn Reads, buf: &mut Vec<u8>, scan_bytes: u64) {
        if self.beta_is_zero.is_none() {
            // A verdict judged after its call keeps what was read of beta on the host at it.
            self.beta_is_zero = self.read_beta_is_zero(allocations, device);
        }
        let reads_scaled = self.beta_is_zero != Some(true);
        let leaves_inputs = self.call.leaves_inputs(self.outputs_first);
        let read_now = |role: Role| match role {
            Role::Input => !leaves_inputs,
            Role::InOut => true,
            Role::Accumulator | Role::Addend => reads_scaled,
            Role::Output | Role::Workspace | Role::Result => false,
        };
        self.prescan_on_device(device, |o| read_now(o.spec.role));
        let mut all_finite = true;
        let mut first_bad: Option<usize> = None;
        for i in 0..MAX_OPERANDS {
            let Some(o) = self.operands[i] else { continue };
            if !Self::used(&o) {
                continue;
            }
            if o.spec.role == Role::Input && leaves_inputs {
                self.inputs_left |= 1 << i;
                continue;
            }
            if read_now(o.spec.role) {
                self.read_input(i, device, buf, scan_bytes, &mut all_finite, &mut first_bad);
            }
        }
        // What a recording reads is a placeholder (what it reads of host memory, a result
        // there, is not): nothing is known finite until the verdict is judged.
        self.inputs_scanned_finite = all_finite && !self.recording;
        if let Some(i) = first_bad {
            self.consumed(i, "");
        }
    }

    /// Scans input `i`: one held NaN/Inf (the first such is `first_bad`), or one that could not
    /// be read (unknown, not finite), leaves `all_finite` false.
    pub(super) fn read_input(
        &mut self,
        i: usize,
        device: &dyn Reads,
        buf: &mut Vec<u8>,
        scan_bytes: u64,
        all_finite: &mut bool,
        first_bad: &mut Option<usize>,
    ) {
        let readable = self.operands[i].is_some_and(|o| o.readable);
        match readable.then(|| self.scan_operand(i, device, buf, scan_bytes)).flatten() {
            Some(s) if s.nan == 0 && s.inf == 0 => {}
            Some(_) => {
                *all_finite = false;
                first_bad.get_or_insert(i);
            }
            None => *all_finite = false,
        }
    }

    /// The fault of input `i` holding NaN/Inf, which the call consumed; `note` says how it was
    /// read when that was after the call.
    pub(super) fn consumed(&mut self, i: usize, note: &str) {
        let Some(o) = self.operands[i] else { return };
        let scan = o.scan.unwrap_or_default();
        let mut message = format!("{} holds {}", describe(o.spec, o.bad_member), counts(o.spec, &scan));
        if matches!(o.spec.role, Role::Accumulator | Role::Addend) {
            message.push_str(&format!("; beta != 0, so the library reads {}", o.spec.name));
        }
        message.push_str(note);
        self.finding = Some(Finding::new(FaultKind::NonfiniteInput, message));
    }
}

/// A batch's members' scans added up: counts summed, the first member with NaN/Inf and its
/// position kept.
#[derive(Default)]
struct BatchTally {
    scan: MatrixScan,
    bad: Option<u64>,
}

impl BatchTally {
    fn add(&mut self, member: u64, s: &MatrixScan) {
        if (s.nan > 0 || s.inf > 0) && self.bad.is_none() {
            self.bad = Some(member);
            self.scan.first_nonfinite = s.first_nonfinite;
        }
        self.scan.nan += s.nan;
        self.scan.inf += s.inf;
        self.scan.scanned_elements += s.scanned_elements;
    }
}

/// The most bytes of a batch the host path holds at once to copy it with one synchronisation.
const HELD_BATCH_BYTES: u64 = 64 << 20;

struct StreamReader<'a> {
    device: &'a dyn Reads,
    stream: u64,
}

/// Scans only the triangle a triangular solve reads, column by column (the other triangle may
/// hold anything, NaN included, and the library never looks at it).
fn scan_triangle(
    reader: &dyn scan::DeviceReader,
    addr: u64,
    shape: StoredShape,
    dtype: DType,
    triangle: Triangle,
    buf: &mut Vec<u8>,
    max_bytes: u64,
) -> Option<MatrixScan> {
    let elem = dtype.size()?;
    let (rows, cols, ld) = (shape.rows.max(0) as u64, shape.cols.max(0) as u64, shape.ld.max(0) as u64);
    let per_column = (max_bytes / cols.max(1)).max(elem);
    let mut total = MatrixScan::default();
    for col in 0..cols {
        let (first, count) = match triangle {
            Triangle::Lower => (col.min(rows), rows.saturating_sub(col)),
            Triangle::Upper => (0, (col + 1).min(rows)),
        };
        if count == 0 {
            continue;
        }
        let start = addr.checked_add(col.checked_mul(ld)?.checked_add(first)?.checked_mul(elem)?)?;
        let column = StoredShape { rows: count as i64, cols: 1, ld: count as i64 };
        let s = scan::scan_matrix(reader, start, column, dtype, buf, per_column).ok()?;
        if total.first_nonfinite.is_none() {
            total.first_nonfinite = s.first_nonfinite.map(|(row, _)| (row + first, col));
        }
        total.nan += s.nan;
        total.inf += s.inf;
        total.scanned_elements += s.scanned_elements;
        total.sampled |= s.sampled;
    }
    Some(total)
}

/// The matrix at `addr` in device memory, scanned in order after the work queued on `stream`:
/// on the device where the scan kernel runs, else copied to the host (at most `max_bytes` of it
/// there). `None` when it cannot be read.
pub fn scan_on_stream(device: &dyn Reads, addr: u64, shape: StoredShape, dtype: DType, stream: u64, buf: &mut Vec<u8>, max_bytes: u64) -> Option<MatrixScan> {
    match device.scan_on_device(addr, shape, dtype, stream) {
        Some(s) => Some(s),
        None => scan::scan_matrix(&StreamReader { device, stream }, addr, shape, dtype, buf, max_bytes).ok(),
    }
}

/// A host-mode result, read where the library wrote it.
struct HostReader<'a> {
    device: &'a dyn Reads,
}

impl scan::DeviceReader for HostReader<'_> {
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), i32> {
        if self.device.read_host(addr, out) {
            Ok(())
        } else {
            Err(1)
        }
    }
}

impl scan::DeviceReader for StreamReader<'_> {
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), i32> {
        self.device.read(addr, out, self.stream)
    }
    fn answers_placeholders(&self) -> bool {
        self.device.answers_placeholders()
    }
    fn landed(&self, addr: u64, len: usize) -> Option<&[u8]> {
        self.device.landed(addr, len, self.stream)
    }
}

/// A batch's members read at once, scanned from the host buffer (placeholders when the device
/// answered with them: nothing to copy or tally).
struct Held<'a> {
    bytes: &'a [u8],
    placeholders: bool,
}

impl scan::DeviceReader for Held<'_> {
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), i32> {
        if self.placeholders {
            return Ok(());
        }
        scan::DeviceReader::read(&scan::Slice(self.bytes), addr, out)
    }
    fn answers_placeholders(&self) -> bool {
        self.placeholders
    }
}
