//! A landed call's replay: the device its checks read through once its mark landed (each
//! read answered with what its queued copy left), and the outlet of a call judged after it
//! returned.

use super::*;

/// The device a waiting call's checks read through once its mark landed: each read answered
/// with the bytes its queued copy left, in the order and phase they were asked at the call.
pub(super) struct Replay<'a> {
    device: &'a dyn Device,
    memory: &'a dyn VerdictMemory,
    arena: VerdictArena,
    log: &'a ScanLog,
    pub(super) phase: Cell<bool>,
    copies_used: RefCell<SmallVec<[bool; 8]>>,
    scans_used: RefCell<SmallVec<[bool; 4]>>,
}

impl<'a> Replay<'a> {
    pub(super) fn new(device: &'a dyn Device, memory: &'a dyn VerdictMemory, arena: VerdictArena, log: &'a ScanLog) -> Self {
        Self {
            device,
            memory,
            arena,
            log,
            phase: Cell::new(BEFORE),
            copies_used: RefCell::new(smallvec::smallvec![false; log.copies.len()]),
            scans_used: RefCell::new(smallvec::smallvec![false; log.scans.len()]),
        }
    }
}

impl Replay<'_> {
    /// The first copy of `len` bytes from `addr` queued in this phase and not answered yet:
    /// its index in the log and where in the region it landed.
    fn unanswered_copy(&self, addr: u64, len: usize) -> Option<(usize, u64)> {
        let used = self.copies_used.borrow();
        let phase = self.phase.get();
        let i = self.log.copies.iter().enumerate().position(|(i, c)| !used[i] && c.0 == addr && c.1 == len && c.3 == phase)?;
        Some((i, self.log.copies[i].2))
    }
}

impl Reads for Replay<'_> {
    fn read(&self, addr: u64, out: &mut [u8], _stream: u64) -> Result<(), i32> {
        let (i, offset) = self.unanswered_copy(addr, out.len()).ok_or(-1)?;
        self.copies_used.borrow_mut()[i] = true;
        self.memory.read(self.arena, offset, out).then_some(()).ok_or(-1)
    }
    fn landed(&self, addr: u64, len: usize, _stream: u64) -> Option<&[u8]> {
        // Answered only when readable in place; otherwise `read` answers it.
        let (i, offset) = self.unanswered_copy(addr, len)?;
        let landed = self.memory.landed(self.arena, offset, len)?;
        self.copies_used.borrow_mut()[i] = true;
        Some(landed)
    }
    fn read_host(&self, addr: u64, out: &mut [u8]) -> bool {
        match self.log.host.iter().find(|(a, bytes)| *a == addr && bytes.len() >= out.len()) {
            Some((_, bytes)) => {
                out.copy_from_slice(&bytes[..out.len()]);
                true
            }
            None => false,
        }
    }
    fn scan_on_device(&self, addr: u64, shape: StoredShape, dtype: DType, stream: u64) -> Option<MatrixScan> {
        scan_one(self, addr, shape, dtype, stream)
    }
    fn scan_batch_on_device(&self, jobs: &[BatchScan], _stream: u64) -> Option<Vec<(MatrixScan, Option<u64>)>> {
        let mut used = self.scans_used.borrow_mut();
        let phase = self.phase.get();
        if self.log.scans.is_empty() {
            return None;
        }
        let key = JobsKey::of(jobs);
        let (i, (_, offset, _, _)) = self.log.scans.iter().enumerate().find(|(i, s)| !used[*i] && s.0 == key && s.2 == phase)?;
        used[i] = true;
        let mut bytes = vec![0u8; 24 * jobs.len()];
        if !self.memory.read(self.arena, *offset, &mut bytes) {
            return None;
        }
        let words: Vec<u64> = bytes.chunks_exact(8).map(|w| u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]])).collect();
        Some(scan_grid::batch_results(jobs, &words))
    }
}

impl Memory for Replay<'_> {
    fn memory_type(&self, ptr: u64) -> Option<MemoryType> {
        self.device.memory_type(ptr)
    }
    // Judged on whichever thread harvests (the guard's own, often): nothing more is asked of
    // CUDA there, so these answer nothing.
    fn is_on_this_threads_stack(&self, _ptr: u64) -> bool {
        false
    }
    fn write_parameter(&self, _ptr: u64, _bytes: &[u8]) -> bool {
        false
    }
    fn with_scan_buffer(&self, body: &mut dyn FnMut(&mut Vec<u8>)) {
        self.device.with_scan_buffer(body)
    }
}

impl Streams for Replay<'_> {
    fn synchronize(&self, _stream: u64) -> i32 {
        0
    }
    fn is_capturing(&self, _stream: u64) -> Result<bool, i32> {
        Ok(false)
    }
}

impl Libraries for Replay<'_> {
    fn param_layout(&self, _func: u64, _driver: bool) -> Option<Vec<(u32, u32)>> {
        None
    }
    // cuDNN is never asked about when a matrix call is judged.
    fn cudnn_last_error(&self) -> Option<String> {
        None
    }
    fn cudnn_libraries(&self, _scope: crate::check::cudnn::Scope) -> Option<crate::trace::CudnnLibraries> {
        None
    }
    fn cudnn_variant_pack(&self, _pack: u64) -> Option<crate::check::cudnn::VariantPack> {
        None
    }
    fn cudnn_plan_workspace(&self, _plan: u64) -> Option<u64> {
        None
    }
}

impl Device for Replay<'_> {
    fn verdict_memory(&self) -> Option<&dyn VerdictMemory> {
        None
    }
}

/// The thread of a call judged after it returned, as its faults tell it: what was kept at the
/// call (its id, its call site, the Python frames read while it ran), for the `Call` a late
/// verdict is judged through, beside the same outlet.
pub(crate) struct LateCaller<'a> {
    thread: u32,
    python: RefCell<Option<crate::guard::KeptFrames>>,
    site: CallSite,
    /// Names the call site when a fault asks for its backtrace (most late verdicts are clean).
    names: &'a dyn Outlet,
}

impl<'a> LateCaller<'a> {
    pub(crate) fn new(names: &'a dyn Outlet, thread: u32, python: Option<crate::guard::KeptFrames>, site: CallSite) -> Self {
        Self { thread, python: RefCell::new(python), site, names }
    }
}

impl Caller for LateCaller<'_> {
    /// The stack of the call, not of the thread now: its kept call site, named.
    fn backtrace(&self) -> Vec<String> {
        self.names.describe_call_site(&self.site)
    }
    fn call_site(&self, _frame: HookFrame) -> CallSite {
        self.site
    }
    fn thread_id(&self) -> u32 {
        self.thread
    }
    fn python_stack(&self) -> Option<PythonFrames> {
        match self.python.borrow_mut().take()? {
            crate::guard::KeptFrames::Read(frames, note, thread) => Some((frames.iter().map(|f| (**f).clone()).collect(), note, thread)),
            crate::guard::KeptFrames::GilReleased => Some((Vec::new(), Some(GIL_RELEASED_NOTE.to_string()), String::new())),
        }
    }
    fn python_frames_at_call(&self) -> Option<crate::guard::KeptFrames> {
        None
    }
    fn python_places(&self) -> crate::session::waits::PythonPlaces {
        crate::session::waits::PythonPlaces::default()
    }
}
