//! The checks on one matrix multiply, in the order that matters: handle, arguments, operand
//! pointers and extents, NaN/Inf in inputs; then, after the real call, the synchronous error
//! check, NaN/Inf in the output, and the status. One routine serves the whole cuBLAS GEMM
//! family (typed, Ex, strided and pointer-array batches, 32- and 64-bit) and cublasLtMatmul:
//! each describes its operands as `OperandSpec`s.

use super::{Device, Finding};
use crate::config::{Checks, OnFault};
use crate::cuda::{self, PointerMode};
use crate::scan::{self, DType, MatrixScan};
use crate::state::{Allocations, HandleLookup, HandleState, Handles};
use crate::trace::{hex, FaultKind};
use crate::validate::{self, Containment, Span, StoredShape};

/// How many matrices an operand holds, and where each one is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Members {
    One,
    /// `count` matrices, `stride` elements apart (may be 0 or negative).
    Strided { count: u64, stride: i64 },
    /// `count` matrices whose addresses are in an array in device memory at the operand's ptr.
    Array { count: u64 },
}

impl Members {
    pub fn count(self) -> u64 {
        match self {
            Self::One => 1,
            Self::Strided { count, .. } | Self::Array { count } => count,
        }
    }
}

/// What the call does with an operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Read (A, B, a bias vector).
    Input,
    /// Read when beta != 0 and written (C of a cuBLAS GEMM).
    Accumulator,
    /// Read when beta != 0, not written (C of cublasLtMatmul).
    Addend,
    /// Written only (D of cublasLtMatmul).
    Output,
    /// Scratch memory: only its extent is checked.
    Workspace,
}

impl Role {
    fn written(self) -> bool {
        matches!(self, Self::Accumulator | Self::Output)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OperandSpec {
    pub name: &'static str,
    pub ptr: u64,
    /// As stored, column-major (a row-major layout is given transposed).
    pub shape: StoredShape,
    pub dtype: DType,
    pub members: Members,
    pub role: Role,
}

impl OperandSpec {
    pub fn matrix(name: &'static str, ptr: u64, shape: StoredShape, dtype: DType, role: Role) -> Self {
        Self { name, ptr, shape, dtype, members: Members::One, role }
    }

    /// A workspace of `bytes` bytes.
    pub fn workspace(ptr: u64, bytes: u64) -> Self {
        let shape = StoredShape { rows: bytes.min(i64::MAX as u64) as i64, cols: 1, ld: bytes.min(i64::MAX as u64) as i64 };
        Self { name: "workspace", ptr, shape, dtype: DType::I8, members: Members::One, role: Role::Workspace }
    }
}

/// At most this many operands per call (A, B, C, D, bias or workspace).
pub const MAX_OPERANDS: usize = 6;
/// Pointer arrays longer than this are checked on their first members only.
const MAX_ARRAY_MEMBERS: u64 = 1 << 20;

/// One matrix multiply, described for the checks.
#[derive(Clone, Debug)]
pub struct MatmulCall {
    pub handle: u64,
    /// A cublasLt handle (checked against its own table).
    pub lt: bool,
    /// The first argument rule the call breaks, if any (from `validate` or the Lt layouts).
    pub argument_problem: Option<String>,
    pub scalar: DType,
    pub alpha: u64,
    pub beta: u64,
    /// From the matmul descriptor (Lt); `None`: the cuBLAS handle's pointer mode.
    pub pointer_mode: Option<i32>,
    /// The call's stream (Lt); `None`: the cuBLAS handle's stream.
    pub stream: Option<u64>,
    /// Compute type is TF32 or another reduced-precision float32 mode.
    pub reduced_precision_compute: bool,
    pub operands: [Option<OperandSpec>; MAX_OPERANDS],
}

/// What the guard learnt about one operand.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OperandReport<'a> {
    pub spec: &'a OperandSpec,
    /// Bytes one member spans.
    pub extent: Option<u64>,
    /// The allocation holding the first member (or the member that broke a rule).
    pub allocation: Option<Span>,
    /// Every member verified inside a live allocation: safe to copy from.
    pub readable: bool,
    pub scan: Option<MatrixScan>,
    /// The first batch member that broke a rule or held NaN/Inf.
    pub bad_member: Option<u64>,
}

/// State carried from the checks before the call to those after it. It borrows the call:
/// this runs on every intercepted GEMM, and copying kilobytes of operand state per call was
/// most of the guard's cost (BENCHMARKS.md).
#[derive(Debug)]
pub struct MatmulCheck<'a> {
    pub call: &'a MatmulCall,
    pub handle: Option<HandleState>,
    pub operands: [Option<OperandReport<'a>>; MAX_OPERANDS],
    /// Member addresses of pointer-array operands, read from device memory.
    arrays: [Vec<u64>; MAX_OPERANDS],
    pub finding: Option<Finding>,
    /// The finding was made before the call, so `on_fault = error` may refuse it.
    pub found_before: bool,
    capturing: bool,
    /// The error a synchronisation before the call already reported.
    pending_before: i32,
    inputs_scanned_finite: bool,
    beta_is_zero: Option<bool>,
}

/// A sticky CUDA error the guard has already attributed, so later calls that merely see it
/// again are not blamed for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KnownError {
    pub code: i32,
    pub seq: u64,
}

fn describe(spec: &OperandSpec, member: Option<u64>) -> String {
    let s = spec.shape;
    let batch = match (spec.members, member) {
        (Members::One, _) => String::new(),
        (m, Some(b)) => format!("batch member {b} of {}, ", m.count()),
        (m, None) => format!("{} batch members, ", m.count()),
    };
    format!("operand {} ({batch}{} x {} as stored, ld {})", spec.name, s.rows, s.cols, s.ld)
}

fn counts(scan: &MatrixScan) -> String {
    let mut parts = Vec::new();
    if scan.nan > 0 {
        parts.push(format!("{} NaN", scan.nan));
    }
    if scan.inf > 0 {
        parts.push(format!("{} Inf", scan.inf));
    }
    let mut s = parts.join(" and ");
    if let Some((row, col)) = scan.first_nonfinite {
        s.push_str(&format!(" (first at row {row}, col {col})"));
    }
    if scan.sampled {
        s.push_str(&format!(" in a sample of {} elements", scan.scanned_elements));
    }
    s
}

/// Where member `b` of an operand starts; `None` when it cannot be addressed.
fn member_addr(spec: &OperandSpec, array: &[u64], b: u64) -> Option<u64> {
    match spec.members {
        Members::One => (b == 0).then_some(spec.ptr),
        Members::Strided { stride, .. } => {
            let offset = (b as i128) * (stride as i128) * (spec.dtype.size()? as i128);
            u64::try_from(spec.ptr as i128 + offset).ok()
        }
        Members::Array { .. } => array.get(b as usize).copied(),
    }
}

/// Why one member's memory is not acceptable.
enum MemberProblem {
    Host(Option<cuda::MemoryType>),
    /// Device memory the guard did not see allocated: nothing to hold against the call.
    Untracked,
    Overruns { span: Span, over: u64 },
}

fn check_member(addr: u64, extent: u64, allocations: &Allocations, device: &dyn Device) -> Result<Span, MemberProblem> {
    let Some(span) = allocations.span_containing(addr) else {
        return match device.memory_type(addr) {
            Some(t) if t.device_accessible() => Err(MemberProblem::Untracked),
            None => Err(MemberProblem::Untracked), // the runtime cannot answer: no claim
            t => Err(MemberProblem::Host(t)),
        };
    };
    match validate::containment(addr, extent, span) {
        Containment::Inside => Ok(span),
        Containment::Overruns(over) => Err(MemberProblem::Overruns { span, over }),
    }
}

impl<'a> MatmulCheck<'a> {
    /// The checks before the call. `buf` is the caller's reusable scan buffer.
    #[allow(clippy::too_many_arguments)]
    pub fn before(
        call: &'a MatmulCall,
        checks: Checks,
        scan_bytes: u64,
        handles: &Handles,
        allocations: &Allocations,
        known: Option<KnownError>,
        device: &dyn Device,
        buf: &mut Vec<u8>,
    ) -> Self {
        let mut operands = [None; MAX_OPERANDS];
        for (report, spec) in operands.iter_mut().zip(call.operands.iter()) {
            if let Some(spec) = spec {
                *report = Some(OperandReport {
                    spec,
                    extent: validate::operand_extent(spec.shape, spec.dtype.size().unwrap_or(1)),
                    allocation: None,
                    readable: false,
                    scan: None,
                    bad_member: None,
                });
            }
        }
        let mut check = Self {
            operands,
            call,
            handle: None,
            arrays: Default::default(),
            finding: None,
            found_before: true,
            capturing: false,
            pending_before: 0,
            inputs_scanned_finite: false,
            beta_is_zero: None,
        };
        let lookup = handles.lookup(check.call.handle);
        if let HandleLookup::Alive(state) = lookup {
            check.handle = Some(state);
        }
        if checks.args {
            let (create, destroy) = if check.call.lt { ("cublasLtCreate", "cublasLtDestroy") } else { ("cublasCreate", "cublasDestroy") };
            let h = || hex(check.call.handle);
            let why = match lookup {
                HandleLookup::Alive(_) => None,
                HandleLookup::Destroyed(seq) => Some(format!("handle {} was destroyed by {destroy} at call #{seq}", h())),
                HandleLookup::Unknown if check.call.handle == 0 => Some(format!("handle is NULL; create one with {create}")),
                HandleLookup::Unknown => Some(format!("handle {} was not created by {create} in this process", h())),
            };
            if let Some(why) = why {
                check.finding = Some(Finding::new(FaultKind::InvalidHandle, why));
                return check;
            }
        }
        if let Some(problem) = &check.call.argument_problem {
            if checks.args {
                check.finding = Some(Finding::new(FaultKind::InvalidArgument, problem.clone()));
            }
            return check; // the library refuses the call: nothing is read or written
        }
        if checks.bounds {
            if let Some(f) = check.check_pointers(allocations, device) {
                check.finding = Some(f);
                return check;
            }
        } else {
            check.note_readable(allocations);
        }
        if !(checks.nan || checks.sync) || check.is_empty() {
            return check;
        }
        let stream = check.stream();
        check.capturing = device.is_capturing(stream).unwrap_or(true);
        if check.capturing {
            return check; // synchronising or copying would break the capture
        }
        let pending = device.synchronize(stream);
        if pending != 0 {
            check.pending_before = pending;
            if known.map(|k| k.code) != Some(pending) {
                let mut f = Finding::new(
                    FaultKind::AsyncError,
                    format!(
                        "{} ({pending}) was already pending before this call: earlier work on the device \
                         that the guard did not check faulted",
                        cuda::cuda_error_name(pending)
                    ),
                );
                f.error = Some((pending, "cudaStreamSynchronize"));
                check.finding = Some(f);
            }
            return check;
        }
        if checks.nan {
            check.scan_inputs(allocations, device, buf, scan_bytes);
        }
        check
    }

    /// Nothing is read or written (a zero dimension or batch).
    fn is_empty(&self) -> bool {
        !self.operands.iter().flatten().any(|o| o.spec.role.written() && o.extent.unwrap_or(0) > 0 && o.spec.members.count() > 0)
    }

    fn used(o: &OperandReport<'_>) -> bool {
        o.extent.unwrap_or(1) > 0 && o.spec.members.count() > 0
    }

    fn stream(&self) -> u64 {
        self.call.stream.unwrap_or_else(|| self.handle.map(|h| h.stream).unwrap_or(0))
    }

    fn pointer_mode(&self) -> PointerMode {
        let raw = self.call.pointer_mode.unwrap_or_else(|| self.handle.map(|h| h.pointer_mode).unwrap_or(0));
        // cublasLt's vector modes (2..4) are device pointers too.
        PointerMode::decode(if raw >= 2 { 1 } else { raw })
    }

    /// Without the bounds check, operands are still read only when verified inside memory.
    fn note_readable(&mut self, allocations: &Allocations) {
        for o in self.operands.iter_mut().flatten() {
            if let (Members::One, Some(extent)) = (o.spec.members, o.extent) {
                o.allocation = allocations.span_containing(o.spec.ptr);
                o.readable = Self::used(o)
                    && o.allocation.is_some_and(|s| validate::containment(o.spec.ptr, extent, s) == Containment::Inside);
            }
        }
    }

    /// Reads a pointer array's members from device memory (checking the array itself first).
    fn load_array(&mut self, i: usize, allocations: &Allocations, device: &dyn Device) -> Result<(), Finding> {
        let Some(o) = self.operands[i] else { return Ok(()) };
        let Members::Array { count } = o.spec.members else { return Ok(()) };
        let count = count.min(MAX_ARRAY_MEMBERS);
        let bytes = count * 8;
        let what = format!("{}array", o.spec.name);
        match check_member(o.spec.ptr, bytes, allocations, device) {
            Ok(_) => {}
            Err(MemberProblem::Untracked) => return Ok(()), // cannot read it safely: members unchecked
            Err(MemberProblem::Host(_)) => {
                return Err(Finding::new(
                    FaultKind::HostPointer,
                    format!(
                        "{what} ({}) is host memory, but the batched GEMM reads its array of {count} matrix pointers \
                         from device memory: copy the array to the GPU",
                        hex(o.spec.ptr)
                    ),
                ))
            }
            Err(MemberProblem::Overruns { span, over }) => {
                return Err(Finding::new(
                    FaultKind::OutOfBounds,
                    format!(
                        "{what} holds {count} pointers ({bytes} bytes) from {} but its allocation (base {}, {} bytes) \
                         is {over} bytes short",
                        hex(o.spec.ptr),
                        hex(span.base),
                        span.size
                    ),
                ))
            }
        }
        let mut raw = vec![0u8; bytes as usize];
        if device.read(o.spec.ptr, &mut raw, self.stream()).is_ok() {
            self.arrays[i] = raw.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect();
        }
        Ok(())
    }

    fn check_pointers(&mut self, allocations: &Allocations, device: &dyn Device) -> Option<Finding> {
        for i in 0..MAX_OPERANDS {
            if let Err(f) = self.load_array(i, allocations, device) {
                return Some(f);
            }
        }
        for i in 0..MAX_OPERANDS {
            let Some(o) = self.operands[i] else { continue };
            if !Self::used(&o) {
                continue;
            }
            let spec: &OperandSpec = o.spec;
            let Some(extent) = o.extent else {
                return Some(Finding::new(
                    FaultKind::OutOfBounds,
                    format!("{}: its extent overflows a 64-bit byte count", describe(spec, None)),
                ));
            };
            if matches!(spec.members, Members::Array { .. }) && self.arrays[i].is_empty() {
                continue; // the array could not be read: its members are not checked
            }
            let count = match spec.members {
                Members::Array { count } => count.min(self.arrays[i].len() as u64),
                m => m.count(),
            };
            // A strided batch is visited first, last, then the rest: when the first and last
            // members sit in one allocation, every member between does too.
            let strided_ends_first = matches!(spec.members, Members::Strided { .. }) && count > 2;
            let mut first_span = None;
            let mut all_inside = true;
            for visit in 0..count {
                let b = match (strided_ends_first, visit) {
                    (true, 0) => 0,
                    (true, 1) => count - 1,
                    (true, v) => v - 1,
                    (false, v) => v,
                };
                let Some(addr) = member_addr(spec, &self.arrays[i], b) else {
                    return Some(Finding::new(
                        FaultKind::OutOfBounds,
                        format!("{}: its address overflows", describe(spec, Some(b))),
                    ));
                };
                match check_member(addr, extent, allocations, device) {
                    Ok(span) => {
                        if b == 0 {
                            first_span = Some(span);
                        }
                        if strided_ends_first && b == count - 1 && first_span == Some(span) {
                            break; // both ends in one allocation: every member between is too
                        }
                    }
                    Err(MemberProblem::Untracked) => all_inside = false,
                    Err(MemberProblem::Host(t)) => {
                        let seen = t.map(|t| format!("{t:?}")).unwrap_or_else(|| "unknown".into());
                        let f = Finding::new(
                            FaultKind::HostPointer,
                            format!(
                                "{} at {} is not device memory (cudaPointerGetAttributes says {seen}, and no live \
                                 cudaMalloc holds it): a host (CPU) buffer was passed to a GPU call",
                                describe(spec, (count > 1).then_some(b)),
                                hex(addr)
                            ),
                        );
                        if let Some(o) = self.operands[i].as_mut() {
                            o.bad_member = (count > 1).then_some(b);
                        }
                        return Some(f);
                    }
                    Err(MemberProblem::Overruns { span, over }) => {
                        if let Some(o) = self.operands[i].as_mut() {
                            o.allocation = Some(span);
                            o.bad_member = (count > 1).then_some(b);
                        }
                        let name = if spec.role == Role::Workspace { "the workspace".to_string() } else { describe(spec, (count > 1).then_some(b)) };
                        let what = format!("{name} spans {extent} bytes from {}", hex(addr));
                        return Some(Finding::new(
                            FaultKind::OutOfBounds,
                            format!(
                                "{what} but its allocation (base {}, {} bytes) ends {} bytes after that pointer: \
                                 the {} overruns it by {over} bytes",
                                hex(span.base),
                                span.size,
                                span.size - (addr - span.base).min(span.size),
                                if spec.role == Role::Workspace { "workspace" } else { "operand" },
                            ),
                        ));
                    }
                }
            }
            if let Some(o) = self.operands[i].as_mut() {
                o.allocation = first_span;
                o.readable = all_inside && first_span.is_some();
            }
        }
        let mode = self.pointer_mode();
        for (name, ptr) in [("alpha", self.call.alpha), ("beta", self.call.beta)] {
            let tracked = allocations.containing(ptr).is_some();
            match mode {
                PointerMode::Host if tracked => {
                    return Some(Finding::new(
                        FaultKind::InvalidArgument,
                        format!(
                            "{name} ({}) points to device memory but the pointer mode is HOST: the library will read it \
                             on the host",
                            hex(ptr)
                        ),
                    ))
                }
                PointerMode::Device if !tracked && !device.memory_type(ptr).is_some_and(|t| t.device_accessible()) => {
                    return Some(Finding::new(
                        FaultKind::HostPointer,
                        format!(
                            "{name} ({}) is host memory but the pointer mode is DEVICE: the kernel will read it from the \
                             device",
                            hex(ptr)
                        ),
                    ))
                }
                _ => {}
            }
        }
        None
    }

    /// Whether beta is zero, read the way the library reads it; `None` when it cannot be read.
    fn read_beta_is_zero(&self, allocations: &Allocations, device: &dyn Device) -> Option<bool> {
        let size = self.call.scalar.size()? as usize;
        let mut bytes = [0u8; 8];
        let out = &mut bytes[..size];
        let ok = match self.pointer_mode() {
            PointerMode::Host => allocations.containing(self.call.beta).is_none() && device.read_host(self.call.beta, out),
            PointerMode::Device => {
                let inside = allocations
                    .span_containing(self.call.beta)
                    .is_some_and(|s| validate::containment(self.call.beta, size as u64, s) == Containment::Inside);
                inside && device.read(self.call.beta, out, self.stream()).is_ok()
            }
            PointerMode::Unknown(_) => false,
        };
        // +0.0 and -0.0 both mean "do not read C": every bit but the sign is zero (and for
        // integer scales, zero is all bits zero).
        ok.then(|| {
            let bits = u64::from_le_bytes(bytes);
            let sign = if self.call.scalar.is_float() { 1u64 << (size * 8 - 1) } else { 0 };
            bits & !sign == 0
        })
    }

    /// Scans every member (or an even sample of them, within `scan_bytes` for the operand).
    fn scan_operand(&mut self, i: usize, device: &dyn Device, buf: &mut Vec<u8>, scan_bytes: u64) -> Option<MatrixScan> {
        let o = self.operands[i]?;
        let elem = o.spec.dtype.size()?;
        let count = match o.spec.members {
            Members::Array { count } => count.min(self.arrays[i].len() as u64),
            m => m.count(),
        };
        let member_bytes = (o.spec.shape.rows.max(0) as u64).saturating_mul(o.spec.shape.cols.max(0) as u64).saturating_mul(elem);
        let total = member_bytes.saturating_mul(count);
        let (step, per_member) = if total <= scan_bytes || count == 0 {
            (1, scan_bytes)
        } else {
            let members = (scan_bytes / member_bytes.max(1)).clamp(1, count);
            (count.div_ceil(members), (scan_bytes / members).max(elem))
        };
        let reader = StreamReader { device, stream: self.stream() };
        let mut total_scan = MatrixScan::default();
        let mut bad = None;
        let mut b = 0;
        while b < count {
            let addr = member_addr(o.spec, &self.arrays[i], b)?;
            let s = match device.scan_on_device(addr, o.spec.shape, o.spec.dtype, self.stream()) {
                Some(s) => s,
                None => scan::scan_matrix(&reader, addr, o.spec.shape, o.spec.dtype, buf, per_member).ok()?,
            };
            if (s.nan > 0 || s.inf > 0) && bad.is_none() {
                bad = Some(b);
                total_scan.first_nonfinite = s.first_nonfinite;
            }
            total_scan.nan += s.nan;
            total_scan.inf += s.inf;
            total_scan.scanned_elements += s.scanned_elements;
            total_scan.sampled |= s.sampled || step > 1;
            b += step;
        }
        if let Some(r) = self.operands[i].as_mut() {
            r.scan = Some(total_scan);
            if count > 1 {
                r.bad_member = bad;
            }
        }
        Some(total_scan)
    }

    fn scan_inputs(&mut self, allocations: &Allocations, device: &dyn Device, buf: &mut Vec<u8>, scan_bytes: u64) {
        self.beta_is_zero = self.read_beta_is_zero(allocations, device);
        let reads_scaled = self.beta_is_zero != Some(true);
        let mut all_finite = true;
        let mut first_bad: Option<usize> = None;
        for i in 0..MAX_OPERANDS {
            let Some(o) = self.operands[i] else { continue };
            let read = match o.spec.role {
                Role::Input => true,
                Role::Accumulator | Role::Addend => reads_scaled,
                Role::Output | Role::Workspace => false,
            };
            if !read || !Self::used(&o) {
                continue;
            }
            if !o.readable {
                all_finite = false; // an input we could not read: unknown, not finite
                continue;
            }
            match self.scan_operand(i, device, buf, scan_bytes) {
                Some(s) if s.nan > 0 || s.inf > 0 => {
                    all_finite = false;
                    first_bad.get_or_insert(i);
                }
                Some(_) => {}
                None => all_finite = false,
            }
        }
        self.inputs_scanned_finite = all_finite;
        if let Some(i) = first_bad {
            let Some(o) = self.operands[i] else { return };
            let scan = o.scan.unwrap_or_default();
            let mut message = format!("{} holds {}", describe(o.spec, o.bad_member), counts(&scan));
            if matches!(o.spec.role, Role::Accumulator | Role::Addend) {
                message.push_str("; beta != 0, so the library reads C");
            }
            self.finding = Some(Finding::new(FaultKind::NonfiniteInput, message));
        }
    }

    /// The status to return instead of calling the library, when the user asked for that.
    pub fn refusal(&self, on_fault: OnFault) -> Option<i32> {
        if on_fault != OnFault::Error {
            return None;
        }
        self.finding.as_ref().map(|f| match f.kind {
            FaultKind::InvalidHandle => cuda::CUBLAS_NOT_INITIALIZED,
            FaultKind::InvalidArgument | FaultKind::HostPointer | FaultKind::OutOfBounds => cuda::CUBLAS_INVALID_VALUE,
            _ => cuda::CUBLAS_EXECUTION_FAILED,
        })
    }

    /// The checks after the call returned `status` (or was refused with it). Returns the sticky
    /// error this call revealed, if any, for the session to remember.
    #[allow(clippy::too_many_arguments)]
    pub fn after(
        &mut self,
        status: i32,
        forwarded: bool,
        checks: Checks,
        scan_bytes: u64,
        known: Option<KnownError>,
        device: &dyn Device,
        buf: &mut Vec<u8>,
    ) -> Option<i32> {
        let empty = self.is_empty();
        let mut revealed = None;
        let argument_refused = self.call.argument_problem.is_some();
        if forwarded && checks.sync && !self.capturing && !empty && self.pending_before == 0 && !argument_refused {
            let code = device.synchronize(self.stream());
            if code != 0 && known.map(|k| k.code) != Some(code) {
                revealed = Some(code);
                match &mut self.finding {
                    Some(f) => f.error = Some((code, "cudaStreamSynchronize")),
                    None => {
                        let mut f = Finding::new(
                            FaultKind::AsyncError,
                            format!(
                                "{} ({code}) surfaced when the guard synchronised the stream right after this call: \
                                 the kernel this call launched faulted (CUDA errors are asynchronous, so without \
                                 the guard a later call would have reported it)",
                                cuda::cuda_error_name(code)
                            ),
                        );
                        f.error = Some((code, "cudaStreamSynchronize"));
                        self.finding = Some(f);
                        self.found_before = false;
                    }
                }
            }
        }
        if forwarded && checks.nan && self.finding.is_none() && status == cuda::CUBLAS_SUCCESS && !self.capturing && !empty {
            for i in 0..MAX_OPERANDS {
                let Some(o) = self.operands[i] else { continue };
                if !o.spec.role.written() || !o.readable {
                    continue;
                }
                let Some(s) = self.scan_operand(i, device, buf, scan_bytes) else { continue };
                if (s.nan > 0 || s.inf > 0) && self.inputs_scanned_finite {
                    let Some(o) = self.operands[i] else { continue };
                    let mut message = format!(
                        "this call produced {} in its output {} from finite inputs (overflow, or Inf - Inf)",
                        counts(&s),
                        describe(o.spec, o.bad_member)
                    );
                    if self.call.reduced_precision_compute {
                        message.push_str(" [the compute type rounds float32 inputs to a reduced precision]");
                    }
                    self.finding = Some(Finding::new(FaultKind::NonfiniteOutput, message));
                    self.found_before = false;
                    break;
                }
            }
        }
        if status != cuda::CUBLAS_SUCCESS && self.finding.is_none() {
            let mut message = format!("returned {} ({status})", cuda::cublas_status_name(status));
            if let Some(k) = known {
                message.push_str(&format!(
                    ": the CUDA context has been unusable since {} ({}) at call #{}",
                    cuda::cuda_error_name(k.code),
                    k.code,
                    k.seq
                ));
            }
            self.finding = Some(Finding::new(FaultKind::ApiError, message));
            self.found_before = false;
        }
        revealed
    }
}

struct StreamReader<'a> {
    device: &'a dyn Device,
    stream: u64,
}

impl scan::DeviceReader for StreamReader<'_> {
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), i32> {
        self.device.read(addr, out, self.stream)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::check::model::ModelDevice as Model;

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn call(a: OperandSpec, b: OperandSpec, c: OperandSpec) -> MatmulCall {
        MatmulCall {
            handle: 7,
            lt: false,
            argument_problem: None,
            scalar: DType::F32,
            alpha: 0x10,
            beta: 0x20,
            pointer_mode: None,
            stream: None,
            reduced_precision_compute: false,
            operands: [Some(a), Some(b), Some(c), None, None, None],
        }
    }

    fn shape(rows: i64, cols: i64) -> StoredShape {
        StoredShape { rows, cols, ld: rows }
    }

    /// The finding and the operand reports' (bad member, first NaN position, allocation).
    struct Outcome {
        finding: Option<Finding>,
        operands: Vec<(Option<u64>, Option<(u64, u64)>, Option<u64>)>,
    }

    fn strided(name: &'static str, ptr: u64, role: Role) -> OperandSpec {
        OperandSpec { name, ptr, shape: shape(2, 2), dtype: DType::F32, members: Members::Strided { count: 3, stride: 4 }, role }
    }

    fn run(call: MatmulCall, allocations: &Allocations, model: &Model) -> Outcome {
        let handles = Handles::default();
        handles.created(7);
        let check = MatmulCheck::before(&call, Checks::ALL, u64::MAX, &handles, allocations, None, model, &mut Vec::new());
        Outcome {
            finding: check.finding.clone(),
            operands: check
                .operands
                .iter()
                .flatten()
                .map(|o| (o.bad_member, o.scan.and_then(|s| s.first_nonfinite), o.scan.map(|s| s.nan)))
                .collect(),
        }
    }

    #[test]
    fn names_the_batch_member_that_holds_a_nan() {
        let (allocs, model) = (Allocations::default(), Model::default());
        let mut batch = vec![1.0f32; 4 * 3];
        batch[4 * 2 + 1] = f32::NAN; // member 2, row 1, col 0
        model.put(&allocs, 0x1000, f32s(&batch));
        model.put(&allocs, 0x2000, f32s(&[1.0; 12]));
        model.put(&allocs, 0x3000, f32s(&[0.0; 12]));
        let c = run(
            call(strided("A", 0x1000, Role::Input), strided("B", 0x2000, Role::Input), strided("C", 0x3000, Role::Accumulator)),
            &allocs,
            &model,
        );
        let f = c.finding.expect("fault");
        assert_eq!(f.kind, FaultKind::NonfiniteInput);
        assert!(f.message.contains("batch member 2 of 3"), "{}", f.message);
        assert_eq!(c.operands[0].0, Some(2));
        assert_eq!(c.operands[0].1, Some((1, 0)));
    }

    #[test]
    fn a_strided_batch_past_its_allocation_names_the_first_member_outside() {
        let (allocs, model) = (Allocations::default(), Model::default());
        model.put(&allocs, 0x1000, f32s(&[1.0; 10])); // 2.5 members of 4 floats
        model.put(&allocs, 0x2000, f32s(&[1.0; 12]));
        model.put(&allocs, 0x3000, f32s(&[0.0; 12]));
        let c = run(
            call(strided("A", 0x1000, Role::Input), strided("B", 0x2000, Role::Input), strided("C", 0x3000, Role::Accumulator)),
            &allocs,
            &model,
        );
        let f = c.finding.expect("fault");
        assert_eq!(f.kind, FaultKind::OutOfBounds);
        assert!(f.message.contains("batch member 2 of 3") && f.message.contains("overruns it by 8 bytes"), "{}", f.message);
    }

    #[test]
    fn pointer_arrays_must_live_on_the_device_and_each_member_is_checked() {
        let (allocs, model) = (Allocations::default(), Model::default());
        model.put(&allocs, 0x1000, f32s(&[1.0; 4]));
        model.put(&allocs, 0x1100, f32s(&[1.0; 2])); // too small for a 2 x 2 member
        let pointers: Vec<u8> = [0x1000u64, 0x1100].iter().flat_map(|p| p.to_le_bytes()).collect();
        model.put(&allocs, 0x5000, pointers.clone());
        model.put(&allocs, 0x6000, pointers.clone());
        model.put(&allocs, 0x7000, pointers);
        let array = |name, ptr, role| OperandSpec {
            name,
            ptr,
            shape: shape(2, 2),
            dtype: DType::F32,
            members: Members::Array { count: 2 },
            role,
        };
        let c = run(
            call(array("A", 0x5000, Role::Input), array("B", 0x6000, Role::Input), array("C", 0x7000, Role::Accumulator)),
            &allocs,
            &model,
        );
        let f = c.finding.expect("fault");
        assert_eq!(f.kind, FaultKind::OutOfBounds);
        assert!(f.message.contains("operand A (batch member 1 of 2"), "{}", f.message);
        // A host array of pointers is named as such.
        let c = run(
            call(array("A", 0x9000, Role::Input), array("B", 0x6000, Role::Input), array("C", 0x7000, Role::Accumulator)),
            &allocs,
            &model,
        );
        let f = c.finding.expect("fault");
        assert_eq!(f.kind, FaultKind::HostPointer);
        assert!(f.message.starts_with("Aarray (0x9000) is host memory"), "{}", f.message);
    }

    #[test]
    fn an_empty_call_touches_nothing() {
        let (allocs, model) = (Allocations::default(), Model::default());
        model.sync_errors.borrow_mut().push(700);
        let c = run(
            call(
                OperandSpec::matrix("A", 0x1, shape(0, 3), DType::F32, Role::Input),
                OperandSpec::matrix("B", 0x2, shape(3, 0), DType::F32, Role::Input),
                OperandSpec::matrix("C", 0x3, shape(0, 0), DType::F32, Role::Accumulator),
            ),
            &allocs,
            &model,
        );
        assert!(c.finding.is_none(), "{:?}", c.finding);
    }

    #[test]
    fn a_workspace_must_fit_its_allocation() {
        let (allocs, model) = (Allocations::default(), Model::default());
        model.put(&allocs, 0x1000, f32s(&[1.0; 4]));
        model.put(&allocs, 0x2000, f32s(&[1.0; 4]));
        model.put(&allocs, 0x3000, f32s(&[1.0; 4]));
        model.put(&allocs, 0x4000, vec![0; 1024]);
        let mut c = call(
            OperandSpec::matrix("A", 0x1000, shape(2, 2), DType::F32, Role::Input),
            OperandSpec::matrix("B", 0x2000, shape(2, 2), DType::F32, Role::Input),
            OperandSpec::matrix("C", 0x3000, shape(2, 2), DType::F32, Role::Accumulator),
        );
        c.operands[3] = Some(OperandSpec::workspace(0x4000, 4096));
        let f = run(c, &allocs, &model).finding.expect("fault");
        assert_eq!(f.kind, FaultKind::OutOfBounds);
        assert!(f.message.starts_with("the workspace spans 4096 bytes"), "{}", f.message);
    }
}
