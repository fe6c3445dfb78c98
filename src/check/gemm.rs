//! The checks on one GEMM call, in the order that matters: handle, arguments, operand
//! pointers and extents, NaN/Inf in inputs; then, after the real call, the synchronous error
//! check, NaN/Inf in the output, and the status.

use super::{Device, Finding};
use crate::config::{Checks, OnFault};
use crate::cuda::{self, Operation, PointerMode};
use crate::scan::{self, DType, MatrixScan};
use crate::state::{Allocations, HandleLookup, HandleState, Handles};
use crate::trace::{hex, FaultKind};
use crate::validate::{self, Containment, GemmArgs, Span, StoredShape};

/// One GEMM call's arguments, pointers as integers.
#[derive(Clone, Copy, Debug)]
pub struct GemmCall {
    pub handle: u64,
    pub args: GemmArgs,
    pub raw_transa: i32,
    pub raw_transb: i32,
    pub dtype: DType,
    pub scalar: DType,
    pub alpha: u64,
    pub beta: u64,
    pub a: u64,
    pub b: u64,
    pub c: u64,
}

impl GemmCall {
    pub fn gemm_args(
        transa: i32,
        transb: i32,
        m: i64,
        n: i64,
        k: i64,
        lda: i64,
        ldb: i64,
        ldc: i64,
        alpha: u64,
        beta: u64,
    ) -> GemmArgs {
        GemmArgs {
            transa: Operation::decode(transa),
            transb: Operation::decode(transb),
            m,
            n,
            k,
            lda,
            ldb,
            ldc,
            alpha_is_null: alpha == 0,
            beta_is_null: beta == 0,
        }
    }
}

/// What the guard learnt about one operand.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OperandReport {
    pub name: &'static str,
    pub ptr: u64,
    pub shape: StoredShape,
    pub dtype: DType,
    pub extent: Option<u64>,
    pub allocation: Option<Span>,
    /// Extent verified inside a live allocation: safe to copy from.
    pub readable: bool,
    pub scan: Option<MatrixScan>,
}

/// State carried from the checks before the call to those after it.
#[derive(Debug)]
pub struct GemmCheck {
    pub call: GemmCall,
    pub handle: Option<HandleState>,
    pub operands: [OperandReport; 3],
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

fn describe(name: &str, shape: StoredShape) -> String {
    format!("operand {name} ({} x {} as stored, ld {})", shape.rows, shape.cols, shape.ld)
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

impl GemmCheck {
    /// The checks before the call. `buf` is the caller's reusable scan buffer.
    #[allow(clippy::too_many_arguments)]
    pub fn before(
        call: GemmCall,
        checks: Checks,
        scan_bytes: u64,
        handles: &Handles,
        allocations: &Allocations,
        known: Option<KnownError>,
        device: &dyn Device,
        buf: &mut Vec<u8>,
    ) -> Self {
        let args = call.args;
        let elem = call.dtype.size().unwrap_or(1);
        let operand = |name, ptr, shape: StoredShape| OperandReport {
            name,
            ptr,
            shape,
            dtype: call.dtype,
            extent: validate::operand_extent(shape, elem),
            allocation: None,
            readable: false,
            scan: None,
        };
        let mut check = Self {
            call,
            handle: None,
            operands: [
                operand("A", call.a, validate::shape_of_a(&args)),
                operand("B", call.b, validate::shape_of_b(&args)),
                operand("C", call.c, validate::shape_of_c(&args)),
            ],
            finding: None,
            found_before: true,
            capturing: false,
            pending_before: 0,
            inputs_scanned_finite: false,
            beta_is_zero: None,
        };
        let lookup = handles.lookup(call.handle);
        if let HandleLookup::Alive(state) = lookup {
            check.handle = Some(state);
        }
        if checks.args {
            let why = match lookup {
                HandleLookup::Alive(_) => None,
                HandleLookup::Destroyed(seq) => {
                    Some(format!("handle {} was destroyed by cublasDestroy at call #{seq}", hex(call.handle)))
                }
                HandleLookup::Unknown if call.handle == 0 => Some("handle is NULL; create one with cublasCreate".into()),
                HandleLookup::Unknown => {
                    Some(format!("handle {} was not created by cublasCreate in this process", hex(call.handle)))
                }
            };
            if let Some(why) = why {
                check.finding = Some(Finding::new(FaultKind::InvalidHandle, why));
                return check;
            }
        }
        if let Some(problem) = validate::check_gemm_args(&args) {
            if checks.args {
                check.finding = Some(Finding::new(FaultKind::InvalidArgument, problem.message()));
            }
            return check; // cuBLAS refuses the call: nothing is read or written
        }
        let empty = args.m == 0 || args.n == 0;
        let reads_ab = !empty && args.k > 0;
        let used = [reads_ab, reads_ab, !empty];
        for (op, used) in check.operands.iter_mut().zip(used) {
            if used {
                op.allocation = allocations.span_containing(op.ptr);
            }
        }
        if checks.bounds {
            if let Some(f) = check.check_pointers(used, allocations, device) {
                check.finding = Some(f);
                return check;
            }
        }
        for (op, used) in check.operands.iter_mut().zip(used) {
            op.readable = used
                && matches!((op.allocation, op.extent), (Some(span), Some(ext))
                    if validate::containment(op.ptr, ext, span) == Containment::Inside);
        }
        if !(checks.nan || checks.sync) || empty {
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

    fn stream(&self) -> u64 {
        self.handle.map(|h| h.stream).unwrap_or(0)
    }

    fn pointer_mode(&self) -> PointerMode {
        PointerMode::decode(self.handle.map(|h| h.pointer_mode).unwrap_or(0))
    }

    fn check_pointers(&mut self, used: [bool; 3], allocations: &Allocations, device: &dyn Device) -> Option<Finding> {
        for (op, used) in self.operands.iter().zip(used) {
            if !used {
                continue;
            }
            let what = describe(op.name, op.shape);
            let Some(span) = op.allocation else {
                match device.memory_type(op.ptr) {
                    // Device memory the guard did not see allocated (a static cudart, the driver
                    // API), or a runtime that cannot answer: nothing to hold against the call.
                    Some(t) if t.device_accessible() => continue,
                    None => continue,
                    Some(t) => {
                        let seen = format!("cudaPointerGetAttributes says {t:?}");
                        return Some(Finding::new(
                            FaultKind::HostPointer,
                            format!(
                                "{what} at {} is not device memory ({seen}, and no live cudaMalloc holds it): \
                                 a host (CPU) buffer was passed to a GPU call",
                                hex(op.ptr)
                            ),
                        ));
                    }
                }
            };
            let Some(extent) = op.extent else {
                return Some(Finding::new(
                    FaultKind::OutOfBounds,
                    format!("{what}: its extent overflows a 64-bit byte count"),
                ));
            };
            if let Containment::Overruns(over) = validate::containment(op.ptr, extent, span) {
                return Some(Finding::new(
                    FaultKind::OutOfBounds,
                    format!(
                        "{what} spans {extent} bytes from {} but its allocation (base {}, {} bytes) ends {} bytes \
                         after that pointer: the operand overruns it by {over} bytes",
                        hex(op.ptr),
                        hex(span.base),
                        span.size,
                        span.size - (op.ptr - span.base).min(span.size),
                    ),
                ));
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
                            "{name} ({}) points to device memory but the handle's pointer mode is HOST: \
                             cuBLAS will read it on the host",
                            hex(ptr)
                        ),
                    ))
                }
                PointerMode::Device if !tracked && !device.memory_type(ptr).is_some_and(|t| t.device_accessible()) => {
                    return Some(Finding::new(
                        FaultKind::HostPointer,
                        format!(
                            "{name} ({}) is host memory but the handle's pointer mode is DEVICE: \
                             the kernel will read it from the device",
                            hex(ptr)
                        ),
                    ))
                }
                _ => {}
            }
        }
        None
    }

    /// Whether beta is zero, read the way cuBLAS reads it; `None` when it cannot be read safely.
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
        // +0.0 and -0.0 both mean "do not read C": every bit but the sign is zero.
        ok.then(|| {
            let bits = u64::from_le_bytes(bytes);
            let sign = 1u64 << (size * 8 - 1);
            bits & !sign == 0
        })
    }

    fn scan_inputs(&mut self, allocations: &Allocations, device: &dyn Device, buf: &mut Vec<u8>, scan_bytes: u64) {
        self.beta_is_zero = self.read_beta_is_zero(allocations, device);
        let reads_c = self.beta_is_zero != Some(true);
        let stream = self.stream();
        let mut all_finite = true;
        let mut first_bad: Option<usize> = None;
        for (i, op) in self.operands.iter_mut().enumerate() {
            if !op.readable || (i == 2 && !reads_c) {
                if i < 2 && op.shape.rows > 0 && op.shape.cols > 0 {
                    all_finite = false; // an input we could not read: unknown, not finite
                }
                continue;
            }
            let reader = StreamReader { device, stream };
            match scan::scan_matrix(&reader, op.ptr, op.shape, op.dtype, buf, scan_bytes) {
                Ok(s) => {
                    op.scan = Some(s);
                    if !(s.nan == 0 && s.inf == 0) {
                        all_finite = false;
                        first_bad.get_or_insert(i);
                    }
                }
                Err(_) => all_finite = false,
            }
        }
        self.inputs_scanned_finite = all_finite;
        if let Some(i) = first_bad {
            let op = &self.operands[i];
            let scan = op.scan.unwrap_or_default();
            let mut message = format!("{} holds {}", describe(op.name, op.shape), counts(&scan));
            if i == 2 {
                message.push_str("; beta != 0, so cuBLAS reads C");
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
        let empty = self.call.args.m == 0 || self.call.args.n == 0;
        let mut revealed = None;
        if forwarded && checks.sync && !self.capturing && !empty && self.pending_before == 0 {
            let stream = self.stream();
            let code = device.synchronize(stream);
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
        if forwarded
            && checks.nan
            && self.finding.is_none()
            && status == cuda::CUBLAS_SUCCESS
            && !self.capturing
            && !empty
            && self.operands[2].readable
        {
            let reader = StreamReader { device, stream: self.stream() };
            let c = self.operands[2];
            if let Ok(s) = scan::scan_matrix(&reader, c.ptr, c.shape, c.dtype, buf, scan_bytes) {
                self.operands[2].scan = Some(s);
                if (s.nan > 0 || s.inf > 0) && self.inputs_scanned_finite {
                    self.finding = Some(Finding::new(
                        FaultKind::NonfiniteOutput,
                        format!(
                            "this call produced {} in its output {} from finite inputs (overflow, or Inf - Inf)",
                            counts(&s),
                            describe("C", c.shape)
                        ),
                    ));
                    self.found_before = false;
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
