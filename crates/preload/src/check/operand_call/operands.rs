//! The operand model: what a matrix multiply reads and writes, how it is batched, and what
//! the checks learnt about each operand.

use crate::scan::{DType, MatrixScan};
use crate::validate::{Span, StoredShape};

/// How many matrices an operand holds, and where each one is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Members {
    One,
    /// `count` matrices, `stride` elements apart (may be 0 or negative).
    Strided {
        count: u64,
        stride: i64,
    },
    /// `count` matrices whose addresses are in an array in device memory at the operand's ptr.
    Array {
        count: u64,
    },
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
    /// Read, then overwritten (B of a triangular solve, the matrices a factorisation
    /// replaces with its factors).
    InOut,
    /// A dot product's result: written, in host or device memory as the pointer mode says.
    Result,
    /// Written only (D of cublasLtMatmul).
    Output,
    /// Scratch memory: only its extent is checked.
    Workspace,
}

impl Role {
    pub(crate) fn written(self) -> bool {
        matches!(self, Self::Accumulator | Self::Output | Self::InOut | Self::Result)
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
    /// A vector (`shape` 1 x n with ld |inc|): its increment, for messages.
    pub increment: Option<i32>,
    /// A triangular matrix (trsm's A): only this triangle, diagonal included, is read, so
    /// only it is scanned.
    pub triangle: Option<Triangle>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Triangle {
    /// Rows at or below the diagonal, as stored.
    Lower,
    Upper,
}

impl OperandSpec {
    #[cfg(test)]
    pub fn matrix(name: &'static str, ptr: u64, shape: StoredShape, dtype: DType, role: Role) -> Self {
        Self { name, ptr, shape, dtype, members: Members::One, role, increment: None, triangle: None }
    }

    /// A workspace of `bytes` bytes.
    pub fn workspace(ptr: u64, bytes: u64) -> Self {
        let shape = StoredShape { rows: bytes.min(i64::MAX as u64) as i64, cols: 1, ld: bytes.min(i64::MAX as u64) as i64 };
        Self { name: "workspace", ptr, shape, dtype: DType::I8, members: Members::One, role: Role::Workspace, increment: None, triangle: None }
    }
}

/// At most this many operands per call (A, B, C, D, bias or workspace).
pub const MAX_OPERANDS: usize = 6;

/// One matrix multiply, described for the checks.
#[derive(Clone, Debug)]
pub struct OperandCall {
    pub handle: u64,
    /// A cublasLt handle (checked against its own table).
    pub lt: bool,
    /// The first argument rule the call breaks, if any (from `validate` or the Lt layouts).
    pub argument_problem: Option<String>,
    pub scalar: DType,
    /// The scalar arguments the function has (a dot product has none, a solve only alpha).
    pub alpha: Option<u64>,
    pub beta: Option<u64>,
    /// From the matmul descriptor (Lt); `None`: the cuBLAS handle's pointer mode.
    pub pointer_mode: Option<i32>,
    /// The call's stream (Lt); `None`: the cuBLAS handle's stream.
    pub stream: Option<u64>,
    /// Compute type is TF32 or another reduced-precision float32 mode.
    pub reduced_precision_compute: bool,
    pub operands: [Option<OperandSpec>; MAX_OPERANDS],
}

impl OperandCall {
    /// The stream the call runs on: its own (cublasLt), else its handle's (`handle`: the
    /// handle's state, when it is alive), else the legacy default stream.
    pub fn stream_with(&self, handle: Option<crate::state::HandleState>) -> u64 {
        self.stream.unwrap_or_else(|| handle.map(|h| h.stream).unwrap_or(0))
    }

    /// Whether the call's read-only inputs wait for an output to hold NaN/Inf (outputs first):
    /// a cuBLAS call's do; a cublasLt call's are read before it (an epilogue such as ReLU can
    /// hide a consumed -Inf).
    pub fn leaves_inputs(&self, outputs_first: bool) -> bool {
        outputs_first && !self.lt
    }

    /// The most bytes of a deferred verdict's staging region this call's scans can take: per
    /// operand and phase (read before the call, written after it), the scan kernel's counts
    /// where it scans that operand (`on_device`), else the host scan's copies, at most
    /// `scan_bytes` of them, with each read's alignment; `inputs_left`: the read-only inputs are
    /// not read at the call (outputs first). A call that cannot have this much is judged at the
    /// call rather than lose part of its scans.
    pub fn staging_need(&self, scan_bytes: u64, on_device: bool, inputs_left: bool) -> u64 {
        let mut need = STAGING_BASE;
        for o in self.operands.iter().flatten() {
            let read_before = match o.role {
                Role::Input => !inputs_left,
                Role::InOut | Role::Accumulator | Role::Addend => true,
                Role::Output | Role::Result | Role::Workspace => false,
            };
            let phases = u64::from(read_before) + u64::from(o.role.written());
            if phases == 0 {
                continue;
            }
            let by_kernel = on_device && o.triangle.is_none() && scanned_by_kernel(o.dtype) && o.role != Role::Result;
            let per_phase = scan_staging_need(o.dtype, o.shape, o.members.count(), by_kernel, scan_bytes);
            need = need.saturating_add(per_phase.saturating_mul(phases));
        }
        need
    }
}

/// A reservation's alignment and the mark's word: a call's block and each read in it start on
/// this (`session::verdicts`, `guard::verdicts`).
pub const STAGING_ALIGN: u64 = 16;

/// What any deferred verdict's staging takes besides its scans: the mark, and alignment.
pub const STAGING_BASE: u64 = 2 * STAGING_ALIGN;

/// Whether the scan kernel scans a whole operand of `dtype` (else the host scan reads it).
pub fn scanned_by_kernel(dtype: DType) -> bool {
    dtype.is_float() && dtype.complex_part().is_none()
}

/// The staging bytes one scan of an operand may take: the scan kernel's counts (`by_kernel`),
/// else the host scan's copies of at most `scan_bytes`, with each read's alignment.
pub fn scan_staging_need(dtype: DType, shape: StoredShape, members: u64, by_kernel: bool, scan_bytes: u64) -> u64 {
    if by_kernel {
        return 24 + STAGING_ALIGN;
    }
    let elem = dtype.size().unwrap_or(1).max(1);
    let extent = crate::validate::operand_extent(shape, elem).unwrap_or(0);
    let bytes = extent.saturating_mul(members).min(scan_bytes.saturating_add(members.saturating_mul(elem)));
    // One read per chunk, member, or (sampled) column read.
    let reads = bytes / crate::scan::CHUNK_BYTES as u64 + members + 1;
    let reads = if extent.saturating_mul(members) > scan_bytes { reads + (shape.cols.max(0) as u64).saturating_mul(members) } else { reads };
    bytes.saturating_add(reads.saturating_mul(STAGING_ALIGN))
}

/// What the guard learnt about one operand.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OperandReport<'a> {
    pub spec: &'a OperandSpec,
    /// Bytes one member spans.
    pub extent: Option<u64>,
    /// The allocation holding the first member (or the member that broke a rule).
    pub allocation: Option<Span>,
    /// Pointer-array operands: the allocation holding the array of pointers itself.
    pub array_allocation: Option<Span>,
    /// Every member verified inside a live allocation: safe to copy from.
    pub readable: bool,
    pub scan: Option<MatrixScan>,
    /// The first batch member that broke a rule or held NaN/Inf.
    pub bad_member: Option<u64>,
}

/// "operand A (batch member 2 of 3, 4 x 4 as stored, ld 4)", for messages.
pub(super) fn describe(spec: &OperandSpec, member: Option<u64>) -> String {
    let s = spec.shape;
    let batch = match (spec.members, member) {
        (Members::One, _) => String::new(),
        (m, Some(b)) => format!("batch member {b} of {}, ", m.count()),
        (m, None) => format!("{} batch members, ", m.count()),
    };
    match spec.increment {
        Some(inc) => format!("operand {} ({batch}{} elements, increment {inc})", spec.name, s.cols),
        None => format!("operand {} ({batch}{} x {} as stored, ld {})", spec.name, s.rows, s.cols, s.ld),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gemm(m: i64, n: i64, k: i64, dtype: DType, count: u64) -> OperandCall {
        let members = if count == 1 { Members::One } else { Members::Strided { count, stride: m * k } };
        let op = |name, rows, cols, role| {
            Some(OperandSpec { name, ptr: 0x1000, shape: StoredShape { rows, cols, ld: rows }, dtype, members, role, increment: None, triangle: None })
        };
        let mut operands = [None; MAX_OPERANDS];
        operands[0] = op("A", m, k, Role::Input);
        operands[1] = op("B", k, n, Role::Input);
        operands[2] = op("C", m, n, Role::Accumulator);
        OperandCall {
            handle: 1,
            lt: false,
            argument_problem: None,
            scalar: dtype,
            alpha: None,
            beta: None,
            pointer_mode: None,
            stream: None,
            reduced_precision_compute: false,
            operands,
        }
    }

    #[test]
    fn a_calls_staging_need_covers_every_byte_its_host_scans_copy_and_only_counts_on_device() {
        let mib = 1u64 << 20;
        // 4096 x 4096 f32 A (64 MiB), 4096 x 1 B, C read and written: more than 64 MiB + 2 x 16 KiB.
        let big = gemm(4096, 1, 4096, DType::F32, 1).staging_need(256 * mib, false, false);
        assert!(big >= 64 * mib + 3 * 16 * 1024, "{big}");
        assert!(big < 65 * mib, "a small allowance for alignment: {big}");
        // The per-operand budget caps what is copied (a sample beyond it).
        let huge = gemm(65536, 1, 8192, DType::F32, 1).staging_need(256 * mib, false, false);
        assert!((256 * mib..258 * mib).contains(&huge), "{huge}");
        // A batch: every member.
        let batch = gemm(64, 64, 64, DType::F32, 10).staging_need(256 * mib, false, false);
        assert!(batch >= 4 * 10 * 64 * 64 * 4, "{batch}");
        // With the scan kernel: its counts, per operand and phase.
        assert!(gemm(4096, 1, 4096, DType::F32, 1).staging_need(256 * mib, true, false) < 1024);
        // Complex operands are scanned on the host even then.
        assert!(gemm(64, 64, 64, DType::C32, 1).staging_need(256 * mib, true, false) >= 4 * 64 * 64 * 8);
        // Outputs first: A and B are not read at the call; C before and after it.
        let left = gemm(4096, 1, 4096, DType::F32, 1).staging_need(256 * mib, false, true);
        assert!((2 * 16 * 1024..3 * 16 * 1024).contains(&left), "{left}");
    }
}
