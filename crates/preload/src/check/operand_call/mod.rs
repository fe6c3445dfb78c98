//! The checks on one call that reads and writes operands, in the order that matters: handle,
//! arguments, operand pointers and extents, NaN/Inf in inputs; then, after the real call, the
//! synchronous error check, NaN/Inf in the output, and the status. One routine serves the whole
//! cuBLAS GEMM family (typed, Ex, strided and pointer-array batches, 32- and 64-bit),
//! cublasLtMatmul and the BLAS calls (gemv, dot, trsm, getrf, ...): each describes its operands
//! as `OperandSpec`s.
//!
//! - `operands`: the operand model (what a call reads and writes, and how it is batched);
//! - `bounds`: pointers and extents against the live allocations;
//! - `nonfinite`: NaN/Inf in what the call reads and writes;
//! - `vouch`: whether the checks before a call would find nothing, from the tables alone (the
//!   hook layer's lean path);
//! - this file: the flow before and after the real call.

mod bounds;
mod nonfinite;
mod operands;
mod vouch;

pub use nonfinite::scan_on_stream;
pub use operands::{
    scan_staging_need, scanned_by_kernel, Members, OperandCall, OperandReport, OperandSpec, Role, Triangle, MAX_OPERANDS, STAGING_ALIGN, STAGING_BASE,
};
pub use vouch::operand_inside;

use nonfinite::counts;
use operands::describe;

use super::{Device, Finding, Reads};
use crate::config::{Checks, OnFault};
use crate::cuda::{self, PointerMode};
use crate::state::{AllocationView, HandleLookup, HandleState};
use crate::trace::{hex, FaultKind};
use crate::validate;

/// State carried from the checks before the call to those after it. It borrows the call:
/// this runs on every intercepted GEMM, and copying kilobytes of operand state per call was
/// most of the guard's cost (BENCHMARKS.md).
#[derive(Debug)]
pub struct OperandCallCheck<'a> {
    pub call: &'a OperandCall,
    pub handle: Option<HandleState>,
    pub operands: [Option<OperandReport<'a>>; MAX_OPERANDS],
    /// Member addresses of pointer-array operands, read from device memory.
    pub(super) arrays: [Vec<u64>; MAX_OPERANDS],
    /// Operands (bit i: operand i) whose report holds a batched device scan's result, taken by
    /// the operand's next scan. A bit mask, not a copy of the results: the check is moved by
    /// value on every call.
    pub(super) prescanned: u8,
    pub finding: Option<Finding>,
    /// use_after_free: the freed allocation the operand is in.
    pub freed: Option<crate::state::Freed>,
    /// The finding was made before the call, so `on_fault = error` may refuse it.
    pub found_before: bool,
    pub(super) capturing: bool,
    /// The answer to "is the call's stream capturing a graph?", when the caller already asked
    /// (so the checks do not ask twice).
    pub capture_query: Option<Result<bool, i32>>,
    /// The error a synchronisation before the call already reported.
    pending_before: i32,
    /// A synchronisation by the guard found the device clean before the call, and after it.
    pub clean_before: bool,
    pub clean_after: bool,
    /// CUBLASGUARD_SYNC=deferred: no synchronisation before the call; after it, one only
    /// where no breadcrumb could be left (`breadcrumb_left`).
    pub deferred: bool,
    pub breadcrumb_left: bool,
    /// A sticky error no call has been blamed for, seen before this call under `deferred`:
    /// the guard attributes it (from the breadcrumbs) before the call runs.
    pub surfaced: Option<i32>,
    pub(super) inputs_scanned_finite: bool,
    pub(super) beta_is_zero: Option<bool>,
    /// The scans' reads are queued, to be answered after the call (deferred verdicts): what
    /// they return now is a placeholder, so nothing is decided from it (beta's value on the
    /// device included).
    pub recording: bool,
    /// Operands from this index on were not checked against the allocations, and why: the
    /// report says "not checked", never "in no allocation", for what it did not look at.
    pub unchecked: Option<(usize, &'static str)>,
    /// CUBLASGUARD_SCAN_ORDER=outputs-first: a cuBLAS call's read-only inputs are left until an
    /// output holds NaN/Inf (`inputs_left`, bit i: operand i; `bad_output`: that output).
    pub outputs_first: bool,
    pub(super) inputs_left: u8,
    pub(super) bad_output: Option<(usize, crate::scan::MatrixScan)>,
}

/// What the checks before a call learnt of its operands (`OperandCallCheck::facts`).
#[derive(Clone, Debug, Default)]
pub struct CheckFacts {
    reports: [Option<ReportFacts>; MAX_OPERANDS],
    arrays: [Vec<u64>; MAX_OPERANDS],
    handle: Option<HandleState>,
    beta_is_zero: Option<bool>,
    unchecked: Option<(usize, &'static str)>,
}

#[derive(Clone, Copy, Debug)]
struct ReportFacts {
    extent: Option<u64>,
    allocation: Option<crate::validate::Span>,
    array_allocation: Option<crate::validate::Span>,
    readable: bool,
}

/// Pointer arrays' members, copied: only a pointer-array batch has any, so the usual call's six
/// empty lists are made, not cloned one by one (this runs at every deferred call).
fn clone_arrays(arrays: &[Vec<u64>; MAX_OPERANDS]) -> [Vec<u64>; MAX_OPERANDS] {
    if arrays.iter().all(Vec::is_empty) {
        Default::default()
    } else {
        arrays.clone()
    }
}

/// A sticky CUDA error the guard has already attributed, so later calls that merely see it
/// again are not blamed for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KnownError {
    pub code: i32,
    pub seq: u64,
}

impl<'a> OperandCallCheck<'a> {
    /// The checks before the call. `buf` is the caller's reusable scan buffer.
    #[cfg(test)]
    #[allow(clippy::too_many_arguments)]
    pub fn before(
        call: &'a OperandCall,
        checks: Checks,
        scan_bytes: u64,
        lookup: HandleLookup,
        allocations: AllocationView<'_>,
        known: Option<KnownError>,
        device: &dyn Device,
        buf: &mut Vec<u8>,
    ) -> Self {
        let mut check = Self::new(call, lookup);
        check.check_before(checks, scan_bytes, lookup, allocations, known, device, device, buf);
        check
    }

    /// The check of `call` before any is run: `check_before` runs them. Two steps, so that the
    /// check is made in the caller's place: it is over a kilobyte, and returned from a function
    /// that runs the checks it was copied on every call (the largest single copy of a clean
    /// call, issue 27).
    pub fn new(call: &'a OperandCall, lookup: HandleLookup) -> Self {
        Self {
            operands: std::array::from_fn(|i| {
                call.operands[i].as_ref().map(|spec| OperandReport {
                    spec,
                    extent: validate::operand_extent(spec.shape, spec.dtype.size().unwrap_or(1)),
                    allocation: None,
                    array_allocation: None,
                    readable: false,
                    scan: None,
                    bad_member: None,
                })
            }),
            call,
            handle: lookup.alive(),
            arrays: Default::default(),
            prescanned: 0,
            finding: None,
            freed: None,
            found_before: true,
            capturing: false,
            capture_query: None,
            pending_before: 0,
            clean_before: false,
            clean_after: false,
            deferred: false,
            breadcrumb_left: false,
            surfaced: None,
            inputs_scanned_finite: false,
            beta_is_zero: None,
            recording: false,
            unchecked: None,
            outputs_first: false,
            inputs_left: 0,
            bad_output: None,
        }
    }

    /// What the checks before the call learnt (allocations, readability, the pointer arrays'
    /// members, beta), owned, to judge the call's scans after it returned.
    pub fn facts(&self) -> CheckFacts {
        CheckFacts {
            reports: std::array::from_fn(|i| {
                self.operands[i].map(|o| ReportFacts { extent: o.extent, allocation: o.allocation, array_allocation: o.array_allocation, readable: o.readable })
            }),
            arrays: clone_arrays(&self.arrays),
            handle: self.handle,
            beta_is_zero: self.beta_is_zero,
            unchecked: self.unchecked,
        }
    }

    /// The check of `call` as the checks before it left it (`facts`), ready for its scans.
    pub fn from_facts(call: &'a OperandCall, facts: &CheckFacts) -> Self {
        let lookup = match facts.handle {
            Some(state) => HandleLookup::Alive(state),
            None => HandleLookup::Unknown,
        };
        let mut check = Self::new(call, lookup);
        for (report, kept) in check.operands.iter_mut().zip(&facts.reports) {
            if let (Some(r), Some(k)) = (report.as_mut(), kept) {
                (r.extent, r.allocation, r.array_allocation, r.readable) = (k.extent, k.allocation, k.array_allocation, k.readable);
            }
        }
        check.arrays = clone_arrays(&facts.arrays);
        check.beta_is_zero = facts.beta_is_zero;
        check.unchecked = facts.unchecked;
        check.deferred = true;
        check
    }

    /// The checks before the call. `scans`: the device the NaN/Inf scans read through (`device`
    /// itself, or one that queues their reads for a verdict after the call); `buf` is the
    /// caller's reusable scan buffer.
    #[allow(clippy::too_many_arguments)]
    pub fn check_before(
        &mut self,
        checks: Checks,
        scan_bytes: u64,
        lookup: HandleLookup,
        allocations: AllocationView<'_>,
        known: Option<KnownError>,
        device: &dyn Device,
        scans: &dyn Reads,
        buf: &mut Vec<u8>,
    ) {
        let check = self;
        if checks.args {
            let (create, destroy) = if check.call.lt { ("cublasLtCreate (or cublasCreate)", "cublasLtDestroy") } else { ("cublasCreate", "cublasDestroy") };
            let h = || hex(check.call.handle);
            let why = match lookup {
                HandleLookup::Alive(_) => None,
                HandleLookup::Destroyed(seq) => Some(format!("handle {} was destroyed by {destroy} at call #{seq}", h())),
                HandleLookup::Unknown if check.call.handle == 0 => Some(format!("handle is NULL; create one with {create}")),
                HandleLookup::Unknown => Some(format!("handle {} was not created by {create} in this process", h())),
            };
            if let Some(why) = why {
                check.finding = Some(Finding::new(FaultKind::InvalidHandle, why));
                check.note_unchecked(0, "the handle was refused first", allocations);
                return;
            }
        }
        if let Some(problem) = &check.call.argument_problem {
            if checks.args {
                check.finding = Some(Finding::new(FaultKind::InvalidArgument, problem.clone()));
            }
            // The library refuses the call: nothing is read or written. Where the operands
            // lie is still worth knowing (and cheap), for the report and the dump.
            check.note_unchecked(0, "the arguments were refused first", allocations);
            return;
        }
        if checks.bounds {
            if let Some(f) = check.check_pointers(allocations, device) {
                check.finding = Some(f);
                return;
            }
        } else {
            check.note_unchecked(0, "bounds checks are off", allocations);
        }
        if !(checks.nan || checks.sync) || check.is_empty() {
            return;
        }
        let stream = check.stream();
        let pending = match check.capture_query.take().unwrap_or_else(|| device.is_capturing(stream)) {
            // A sticky error already there answers the capture query itself (below).
            Ok(false) if check.deferred => 0,
            Ok(false) => device.synchronize(stream),
            // The query itself failed with a sticky error: the context is already lost, and
            // that error is the one pending (nothing to synchronise, nothing to copy).
            Err(code) if cuda::cuda_error_is_sticky(code) => {
                check.capturing = true;
                code
            }
            // Capturing, or unknown: synchronising or copying could break a capture.
            Ok(true) | Err(_) => {
                check.capturing = true;
                return;
            }
        };
        check.clean_before = pending == 0 && !check.deferred;
        if pending != 0 {
            check.pending_before = pending;
            if known.map(|k| k.code) != Some(pending) && check.deferred {
                check.surfaced = Some(pending);
            } else if known.map(|k| k.code) != Some(pending) {
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
            return;
        }
        if checks.nan {
            check.scan_inputs(allocations, scans, buf, scan_bytes);
        }
    }

    /// Whether the call, having run (`forwarded`), is one whose completion the guard checks:
    /// by a synchronisation right after it, or under `deferred` by a breadcrumb.
    pub fn awaits_completion(&self, forwarded: bool, checks: Checks) -> bool {
        forwarded && checks.sync && !self.capturing && !self.is_empty() && self.pending_before == 0 && self.call.argument_problem.is_none()
    }

    /// The call was found, before it ran, to hand the library memory its kernel cannot read
    /// (host memory, past an allocation, freed): the kernel is expected to fault. Such a call is
    /// synchronised right after it in every mode, so that the error it causes is attached to its
    /// own fault the same way whatever the timing of the device (a breadcrumb would leave that
    /// to whichever later call happens to see the error first).
    pub fn expects_device_fault(&self) -> bool {
        self.found_before && self.finding.as_ref().is_some_and(|f| matches!(f.kind, FaultKind::HostPointer | FaultKind::OutOfBounds | FaultKind::UseAfterFree))
    }

    /// Nothing is read or written (a zero dimension or batch).
    pub(super) fn is_empty(&self) -> bool {
        !self.operands.iter().flatten().any(|o| o.spec.role.written() && o.extent.unwrap_or(0) > 0 && o.spec.members.count() > 0)
    }

    pub(super) fn used(o: &OperandReport<'_>) -> bool {
        o.extent.unwrap_or(1) > 0 && o.spec.members.count() > 0
    }

    /// The address of member `b` of operand `i` (pointer arrays: as read from the device).
    pub fn member_address(&self, i: usize, b: u64) -> Option<u64> {
        let spec = self.operands.get(i)?.as_ref()?.spec;
        bounds::member_addr(spec, &self.arrays[i], b)
    }

    pub fn stream(&self) -> u64 {
        self.call.stream_with(self.handle)
    }

    pub fn pointer_mode(&self) -> PointerMode {
        let raw = self.call.pointer_mode.unwrap_or_else(|| self.handle.map(|h| h.pointer_mode).unwrap_or(0));
        // cublasLt's vector modes (2..4) are device pointers too.
        PointerMode::decode(if raw >= 2 { 1 } else { raw })
    }

    /// The status to return instead of calling the library, when the user asked for that.
    pub fn refusal(&self, on_fault: OnFault) -> Option<i32> {
        if on_fault != OnFault::Error {
            return None;
        }
        self.finding.as_ref().map(|f| match f.kind {
            FaultKind::InvalidHandle => cuda::CUBLAS_NOT_INITIALIZED,
            FaultKind::InvalidArgument | FaultKind::HostPointer | FaultKind::OutOfBounds | FaultKind::UseAfterFree => cuda::CUBLAS_INVALID_VALUE,
            _ => cuda::CUBLAS_EXECUTION_FAILED,
        })
    }

    /// The checks after the call returned `status` (or was refused with it); `scans` as for
    /// `check_before`. Returns the sticky error this call revealed, if any, for the session to
    /// remember.
    #[allow(clippy::too_many_arguments)]
    pub fn after(
        &mut self,
        status: i32,
        forwarded: bool,
        checks: Checks,
        scan_bytes: u64,
        known: Option<KnownError>,
        device: &dyn Device,
        scans: &dyn Reads,
        buf: &mut Vec<u8>,
    ) -> Option<i32> {
        let empty = self.is_empty();
        let mut revealed = None;
        if self.awaits_completion(forwarded, checks) && !self.breadcrumb_left {
            let code = device.synchronize(self.stream());
            self.clean_after = code == 0;
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
            self.scan_outputs(scans, buf, scan_bytes);
        }
        if status != cuda::CUBLAS_SUCCESS && self.finding.is_none() {
            let mut message = format!("returned {} ({status})", cuda::cublas_status_name(status));
            if let Some(k) = known {
                message.push_str(&format!(": the CUDA context has been unusable since {} ({}) at call #{}", cuda::cuda_error_name(k.code), k.code, k.seq));
            }
            self.finding = Some(Finding::new(FaultKind::ApiError, message));
            self.found_before = false;
        }
        revealed
    }
}

impl OperandCallCheck<'_> {
    /// Scans what the call wrote: NaN/Inf there from inputs scanned finite is the call's own.
    pub fn scan_outputs(&mut self, device: &dyn Reads, buf: &mut Vec<u8>, scan_bytes: u64) {
        self.prescan_on_device(device, |o| o.spec.role.written());
        for i in 0..MAX_OPERANDS {
            let Some(o) = self.operands[i] else { continue };
            if !o.spec.role.written() || !o.readable {
                continue;
            }
            let Some(s) = self.scan_operand(i, device, buf, scan_bytes) else { continue };
            if (s.nan > 0 || s.inf > 0) && self.inputs_left != 0 {
                // Consumed or produced: told once the inputs left are read (`scan_left_inputs`).
                self.bad_output = Some((i, s));
                break;
            }
            if (s.nan > 0 || s.inf > 0) && self.inputs_scanned_finite {
                self.produced(i, s, "");
                break;
            }
        }
    }

    /// The fault of output `i` holding NaN/Inf (`s`) from inputs scanned finite; `note` says
    /// how they were read when that was after the call.
    fn produced(&mut self, i: usize, s: crate::scan::MatrixScan, note: &str) {
        let Some(o) = self.operands[i] else { return };
        let mut message =
            format!("this call produced {} in its output {} from finite inputs (overflow, or Inf - Inf)", counts(o.spec, &s), describe(o.spec, o.bad_member));
        if self.call.reduced_precision_compute {
            message.push_str(" [the compute type rounds float32 inputs to a reduced precision]");
        }
        message.push_str(note);
        self.finding = Some(Finding::new(FaultKind::NonfiniteOutput, message));
        self.found_before = false;
    }

    /// Whether an output held NaN/Inf while inputs were left unread (outputs first): the
    /// caller reads them now (`scan_left_inputs`), or says the verdict cannot tell
    /// (`inputs_unread`).
    pub fn wants_left_inputs(&self) -> bool {
        self.bad_output.is_some() && self.inputs_left != 0
    }

    /// Outputs first, an output held NaN/Inf: the inputs left are scanned through `device`,
    /// and the fault says whether the call consumed the NaN/Inf (an input holds it) or produced
    /// it; `note` (appended to its message) says how the inputs were read.
    pub fn scan_left_inputs(&mut self, device: &dyn Reads, buf: &mut Vec<u8>, scan_bytes: u64, note: &str) {
        let (Some((out, s)), left) = (self.bad_output.take(), std::mem::take(&mut self.inputs_left)) else { return };
        // Every input left is read, as `scan_inputs` reads every input: the fault names the first bad.
        let mut all_finite = self.inputs_scanned_finite;
        let mut first_bad = None;
        for i in (0..MAX_OPERANDS).filter(|i| left & (1 << i) != 0) {
            self.read_input(i, device, buf, scan_bytes, &mut all_finite, &mut first_bad);
        }
        match first_bad {
            Some(i) => {
                self.consumed(i, note);
                self.found_before = false;
            }
            None if all_finite => self.produced(out, s, note),
            None => {}
        }
    }

    /// Outputs first, an output held NaN/Inf, and the inputs left could not be read after the
    /// call: the fault says so, consumed or produced untold.
    pub fn inputs_unread(&mut self, why: &str) {
        let (Some((out, s)), left) = (self.bad_output.take(), std::mem::take(&mut self.inputs_left)) else { return };
        let Some(o) = self.operands[out] else { return };
        let names: Vec<&str> = (0..MAX_OPERANDS).filter(|i| left & (1 << i) != 0).filter_map(|i| self.operands[i].map(|r| r.spec.name)).collect();
        let message = format!(
            "this call's output {} holds {}; whether it consumed it or produced it is not known: its inputs {} {} reads them \
             after an output is bad, {why}); CUBLASGUARD_SYNC=gemm tells",
            describe(o.spec, o.bad_member),
            counts(o.spec, &s),
            names.join(", "),
            crate::trace::INPUTS_LEFT_UNREAD,
        );
        self.finding = Some(Finding::new(FaultKind::NonfiniteOutput, message));
        self.found_before = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::check::model::ModelDevice as Model;
    use crate::scan::DType;
    use crate::state::{Allocations, Handles};
    use crate::validate::StoredShape;

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    fn call(a: OperandSpec, b: OperandSpec, c: OperandSpec) -> OperandCall {
        OperandCall {
            handle: 7,
            lt: false,
            argument_problem: None,
            scalar: DType::F32,
            alpha: Some(0x10),
            beta: Some(0x20),
            pointer_mode: None,
            stream: None,
            reduced_precision_compute: false,
            operands: [Some(a), Some(b), Some(c), None, None, None],
        }
    }

    fn shape(rows: i64, cols: i64) -> StoredShape {
        StoredShape { rows, cols, ld: rows }
    }

    /// What the test reads of one operand report: its bad member, first NaN position (member,
    /// index) and allocation.
    type OperandSeen = (Option<u64>, Option<(u64, u64)>, Option<u64>);

    /// The finding and the operand reports.
    struct Outcome {
        finding: Option<Finding>,
        operands: Vec<OperandSeen>,
    }

    fn strided(name: &'static str, ptr: u64, role: Role) -> OperandSpec {
        OperandSpec {
            name,
            ptr,
            shape: shape(2, 2),
            dtype: DType::F32,
            members: Members::Strided { count: 3, stride: 4 },
            role,
            increment: None,
            triangle: None,
        }
    }

    fn run(call: OperandCall, allocations: &Allocations, model: &Model) -> Outcome {
        let handles = Handles::default();
        handles.created(7);
        let check = OperandCallCheck::before(&call, Checks::ALL, u64::MAX, handles.lookup(call.handle), allocations.into(), None, model, &mut Vec::new());
        Outcome {
            finding: check.finding.clone(),
            operands: check.operands.iter().flatten().map(|o| (o.bad_member, o.scan.and_then(|s| s.first_nonfinite), o.scan.map(|s| s.nan))).collect(),
        }
    }

    /// A strided batch of three 2 x 2 members, A holding `a` (B ones, C zeros), checked.
    fn strided_gemm(a: Vec<u8>) -> Outcome {
        let (allocs, model) = (Allocations::default(), Model::default());
        model.put(&allocs, 0x1000, a);
        model.put(&allocs, 0x2000, f32s(&[1.0; 12]));
        model.put(&allocs, 0x3000, f32s(&[0.0; 12]));
        run(call(strided("A", 0x1000, Role::Input), strided("B", 0x2000, Role::Input), strided("C", 0x3000, Role::Accumulator)), &allocs, &model)
    }

    #[test]
    fn names_the_batch_member_that_holds_a_nan() {
        let mut batch = vec![1.0f32; 4 * 3];
        batch[4 * 2 + 1] = f32::NAN; // member 2, row 1, col 0
        let c = strided_gemm(f32s(&batch));
        let f = c.finding.expect("fault");
        assert_eq!(f.kind, FaultKind::NonfiniteInput);
        assert!(f.message.contains("batch member 2 of 3"), "{}", f.message);
        assert_eq!(c.operands[0].0, Some(2));
        assert_eq!(c.operands[0].1, Some((1, 0)));
    }

    #[test]
    fn a_strided_batch_past_its_allocation_names_the_first_member_outside() {
        let c = strided_gemm(f32s(&[1.0; 10])); // 2.5 members of 4 floats
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
            increment: None,
            triangle: None,
        };
        let c = run(call(array("A", 0x5000, Role::Input), array("B", 0x6000, Role::Input), array("C", 0x7000, Role::Accumulator)), &allocs, &model);
        let f = c.finding.expect("fault");
        assert_eq!(f.kind, FaultKind::OutOfBounds);
        assert!(f.message.contains("operand A (batch member 1 of 2"), "{}", f.message);
        // A host array of pointers is named as such.
        let c = run(call(array("A", 0x9000, Role::Input), array("B", 0x6000, Role::Input), array("C", 0x7000, Role::Accumulator)), &allocs, &model);
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

    /// A 2 x 2 GEMM checked outputs first, A and C (its output, as the model leaves it after
    /// the call) holding what is given: the finding, and whether A was read.
    fn outputs_first(a: f32, c_after: f32) -> (Option<Finding>, bool) {
        let (allocs, model) = (Allocations::default(), Model::default());
        model.put(&allocs, 0x1000, f32s(&[a, 1.0, 1.0, 1.0]));
        model.put(&allocs, 0x2000, f32s(&[1.0; 4]));
        model.put(&allocs, 0x3000, f32s(&[c_after, 0.0, 0.0, 0.0]));
        let call = call(
            OperandSpec::matrix("A", 0x1000, shape(2, 2), DType::F32, Role::Input),
            OperandSpec::matrix("B", 0x2000, shape(2, 2), DType::F32, Role::Input),
            OperandSpec::matrix("C", 0x3000, shape(2, 2), DType::F32, Role::Accumulator),
        );
        let handles = Handles::default();
        handles.created(7);
        let lookup = handles.lookup(7);
        let mut buf = Vec::new();
        let mut check = OperandCallCheck::new(&call, lookup);
        check.outputs_first = true;
        check.check_before(Checks::ALL, u64::MAX, lookup, (&allocs).into(), None, &model, &model, &mut buf);
        assert!(check.finding.is_none() && check.operands[0].and_then(|o| o.scan).is_none(), "A is not read before the call");
        check.after(0, true, Checks::ALL, u64::MAX, None, &model, &model, &mut buf);
        if check.wants_left_inputs() {
            check.scan_left_inputs(&model, &mut buf, u64::MAX, " [late]");
        }
        (check.finding, check.operands[0].and_then(|o| o.scan).is_some())
    }

    #[test]
    fn outputs_first_reads_the_inputs_only_once_an_output_is_bad_and_then_tells_consumed_from_produced() {
        assert_eq!(outputs_first(1.0, 4.0), (None, false), "a clean output: the inputs are never read");
        let (consumed, read) = outputs_first(f32::NAN, f32::NAN);
        let consumed = consumed.expect("a fault");
        assert!(
            read && consumed.kind == FaultKind::NonfiniteInput && consumed.message.starts_with("operand A") && consumed.message.ends_with(" [late]"),
            "{consumed:?}"
        );
        let (produced, read) = outputs_first(1.0, f32::INFINITY);
        let produced = produced.expect("a fault");
        assert!(read && produced.kind == FaultKind::NonfiniteOutput && produced.message.contains("from finite inputs"), "{produced:?}");
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
