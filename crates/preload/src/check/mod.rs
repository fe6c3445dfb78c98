//! The checks, as safe Rust over plain numbers and a `Device` that answers questions about
//! memory and streams. The FFI layer implements `Device` with the real CUDA runtime; tests
//! implement it with a model.

#![forbid(unsafe_code)]

pub mod cudnn;
pub mod hardware;
pub mod init;
pub mod lt;
#[cfg(test)]
pub(crate) mod model;
pub mod operand_call;
pub mod scan_grid;
pub mod selftest;

use crate::cuda::MemoryType;
use crate::trace::FaultKind;

/// One operand for the batched device scan: `members` stored matrices at `addr` plus
/// `member * stride` elements, or (`array`) at the pointers in the device array at `addr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BatchScan {
    pub addr: u64,
    pub shape: crate::validate::StoredShape,
    pub dtype: crate::scan::DType,
    pub members: u64,
    pub stride: i64,
    pub array: bool,
}

/// The most operands one batched scan takes (a call has at most this many).
pub const MAX_BATCH_SCANS: usize = 6;

/// The reads a check's scans make of an operand: copies and scans the device makes now, or that a
/// deferred verdict's recording queues (and its replay answers from what landed). The one role a
/// recording plays; everything else it asks of the device it was begun on.
pub trait Reads {
    /// Copies device memory to the host, ordered after the work queued on `stream`.
    fn read(&self, addr: u64, out: &mut [u8], stream: u64) -> Result<(), i32>;
    /// Copies several device ranges, one after the other, into `out` (as long as their sum),
    /// ordered after the work queued on `stream`, with one synchronisation for all of them.
    fn read_many(&self, pieces: &[(u64, usize)], out: &mut [u8], stream: u64) -> Result<(), i32> {
        let mut at = 0;
        for &(addr, len) in pieces {
            self.read(addr, out.get_mut(at..at + len).ok_or(-1)?, stream)?;
            at += len;
        }
        Ok(())
    }
    /// Whether `read` answers placeholders: the copies are queued for a verdict judged once
    /// they land (`guard::verdicts::Recording`), so a scan at the call tallies nothing.
    fn answers_placeholders(&self) -> bool {
        false
    }
    /// What `read` would copy, where it already lies in host memory (a deferred verdict's
    /// landed copy), to scan in place; `None`: `read` it.
    fn landed(&self, _addr: u64, _len: usize, _stream: u64) -> Option<&[u8]> {
        None
    }
    /// Reads a scalar the program passed by host pointer (cuBLAS reads it on the host too).
    fn read_host(&self, addr: u64, out: &mut [u8]) -> bool;
    /// Scans a matrix on the device itself, on `stream`; `None`: scan it on the host.
    fn scan_on_device(&self, _addr: u64, _shape: crate::validate::StoredShape, _dtype: crate::scan::DType, _stream: u64) -> Option<crate::scan::MatrixScan> {
        None
    }
    /// Scans several operands, every member of each, in one launch on the device (results
    /// after one synchronisation): each job's counts, and the member holding its first NaN/Inf.
    /// `None`: not available, scan operand by operand.
    fn scan_batch_on_device(&self, _jobs: &[BatchScan], _stream: u64) -> Option<Vec<(crate::scan::MatrixScan, Option<u64>)>> {
        None
    }
}

/// What the checks may ask about memory: what kind a pointer is, where an allocation lies, how
/// much is free, and the program's own parameters (out-parameters a call wrote, structures it
/// passed).
pub trait Memory {
    /// `cudaPointerGetAttributes`'s memory type; `None` when the call failed.
    fn memory_type(&self, ptr: u64) -> Option<MemoryType>;
    /// Whether `ptr` lies in the calling thread's stack (host memory, then, for certain).
    fn is_on_this_threads_stack(&self, _ptr: u64) -> bool {
        false
    }
    /// `cudaMemGetInfo` (free, total), asked only when the runtime can answer undisturbed.
    fn memory_info(&self) -> Option<(u64, u64)> {
        None
    }
    /// The bytes at `ptr` in host memory that a hooked call's parameter points to: what a CUDA
    /// function wrote through an out-parameter (asked only after it reported success), or a
    /// structure the program passed in. `false` for NULL, or where nothing can be read.
    fn read_parameter(&self, _ptr: u64, _out: &mut [u8]) -> bool {
        false
    }
    /// A NUL-terminated string a hooked call was given or returned; `None` for NULL.
    fn parameter_string(&self, _ptr: u64) -> Option<String> {
        None
    }
    /// The start and size of the device allocation holding `ptr`, as the driver knows it.
    fn address_range(&self, _ptr: u64) -> Option<(u64, u64)> {
        None
    }
    /// Writes `bytes` into the output buffer at `ptr` that the program passed the hooked call
    /// (no more than the size it gave); `false` for NULL.
    fn write_parameter(&self, ptr: u64, bytes: &[u8]) -> bool;
    /// Runs `body` with this thread's scan buffer, reused from scan to scan.
    fn with_scan_buffer(&self, body: &mut dyn FnMut(&mut Vec<u8>)) {
        body(&mut Vec::new())
    }
}

/// Streams: waiting for one, whether one captures a graph, a breadcrumb queued on one.
pub trait Streams {
    /// Waits for `stream`; returns the CUDA error it reports.
    fn synchronize(&self, stream: u64) -> i32;
    /// Whether `stream` is capturing a CUDA graph; `None` when unknown.
    /// `Err(code)`: the query failed with that CUDA error (a sticky one means the context is
    /// already lost); `Err(-1)`: it could not be asked.
    fn is_capturing(&self, stream: u64) -> Result<bool, i32>;
    /// Enqueues on `stream` the breadcrumb of a call (CUBLASGUARD_SYNC=deferred): its number
    /// lands in host memory once the work before it on the stream completed. False when none
    /// could be enqueued.
    fn breadcrumb(&self, _stream: u64, _issued: crate::session::breadcrumbs::Issued) -> bool {
        false
    }
}

/// What the loaded libraries say of themselves and their objects: the device's compute
/// capability, the driver, cublasLt's descriptors, a kernel's parameters, cuDNN's objects and
/// errors.
pub trait Libraries {
    /// The current device's compute capability (major, minor).
    fn compute_capability(&self) -> Option<(i32, i32)> {
        None
    }
    /// Asks the driver directly why CUDA could not start (after an initialisation failure).
    fn probe_driver(&self, device_count: Option<(i32, Option<i32>)>) -> init::DriverProbe {
        let mut probe = init::DriverProbe::default();
        if let Some((status, n)) = device_count {
            probe.device_count_status = Some(status);
            probe.device_count = n;
        }
        probe
    }
    /// A cublasLt matrix layout's attributes; `None` when cublasLt refuses the object.
    fn lt_layout(&self, _layout: u64) -> Option<lt::Layout> {
        None
    }
    /// A cublasLt matmul descriptor's attributes; `None` when cublasLt refuses the object.
    fn lt_matmul_desc(&self, _desc: u64) -> Option<lt::MatmulDesc> {
        None
    }
    /// A kernel's parameters, (offset, size) each in order, as the driver (`driver`: a
    /// CUfunction) or the runtime (a host stub) gives them (CUDA 12.4 and later); empty when
    /// there is none to give, `None` when it cannot say now (asked again at a later launch).
    fn param_layout(&self, func: u64, driver: bool) -> Option<Vec<(u32, u32)>>;
    /// `cudnnGetLastErrorString`: cuDNN's last error message on this thread, which reading
    /// clears (the guard hands it to the program's own next call for it); `None` when cuDNN is
    /// not loaded or has none.
    fn cudnn_last_error(&self) -> Option<String>;
    /// The cuDNN libraries loaded and looked for, with their versions; `None` without cuDNN.
    /// `scope`: whether the engines and heuristics libcudnn_graph loads are looked for too
    /// (reading libcudnn_graph's file for their names: not at every cudnnCreate).
    fn cudnn_libraries(&self, scope: cudnn::Scope) -> Option<crate::trace::CudnnLibraries>;
    /// A backend variant pack's tensors and workspace; `None` when cuDNN refuses the object.
    fn cudnn_variant_pack(&self, pack: u64) -> Option<cudnn::VariantPack>;
    /// A backend execution plan's workspace size.
    fn cudnn_plan_workspace(&self, plan: u64) -> Option<u64>;
}

/// What the checks may ask of the CUDA runtime, by role (`Reads`, `Memory`, `Streams`,
/// `Libraries`) and the verdict memory. Every method must leave the program's view (its last
/// error, its streams, its capture) as it was. A device that answers one role its own way
/// implements that role alone (a recording, `Reads`), not the whole of it passing the rest on.
pub trait Device: Reads + Memory + Streams + Libraries {
    /// Host memory the device writes into without the host waiting (deferred NaN/Inf verdicts);
    /// `None` where there is none.
    fn verdict_memory(&self) -> Option<&dyn VerdictMemory>;
}

/// The current context's region of device-mapped host memory for deferred verdicts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerdictArena {
    pub context: u64,
}

/// Work queued on a stream that writes into a context's verdict region (offsets into it, as
/// `session::verdicts` hands them out), and reading what landed. Nothing here waits.
pub trait VerdictMemory {
    /// The current context's region, made on first use; `None` where the driver refuses one.
    fn arena(&self) -> Option<VerdictArena>;
    /// Queues a copy of `len` bytes of device memory at `src` into the region at `offset`.
    fn queue_copy(&self, arena: VerdictArena, offset: u64, src: u64, len: usize, stream: u64) -> bool;
    /// Queues the scan kernel over `jobs`, its counts (24 bytes a job) written at `offset`.
    fn queue_scans(&self, arena: VerdictArena, offset: u64, jobs: &[BatchScan], stream: u64) -> bool;
    /// Queues a stream write of `value` into the word at `offset`, after the work before it.
    fn queue_mark(&self, arena: VerdictArena, offset: u64, value: u64, stream: u64) -> bool;
    /// The word at `offset` as it is now.
    fn mark(&self, arena: VerdictArena, offset: u64) -> u64;
    /// Copies the region's bytes at `offset` into `out`.
    fn read(&self, arena: VerdictArena, offset: u64, out: &mut [u8]) -> bool;
    /// The region's `len` bytes at `offset`, in place, for bytes whose mark landed and that
    /// stay reserved while they are read; `None`: `read` them.
    fn landed(&self, _arena: VerdictArena, _offset: u64, _len: usize) -> Option<&[u8]> {
        None
    }
    /// Zeroes the region's bytes at `offset`.
    fn clear(&self, arena: VerdictArena, offset: u64, len: usize) -> bool;
    /// A call now waits for its verdict: whoever judges them looks soon.
    fn judge_soon(&self);
}

/// A fault found by a check, before the call's outcome is known.
#[derive(Clone, Debug, PartialEq)]
pub struct Finding {
    pub kind: FaultKind,
    pub message: String,
    pub error: Option<(i32, &'static str)>,
}

impl Finding {
    pub fn new(kind: FaultKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into(), error: None }
    }
}
