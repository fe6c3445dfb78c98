//! Deferred NaN/Inf verdicts (CUBLASGUARD_SYNC=deferred, the scans on): a guarded call's scans
//! run the same checks as ever, through a device that queues their reads on the call's stream
//! instead of waiting for them (`Recording`): the scan kernel's counts and the host scan's
//! copies land in device-mapped host memory, and a mark queued after the call says when they
//! have. The call returns at once. Later (at a hooked call, a synchronisation of the program's,
//! exit) the same checks run again through a device that answers each read with what landed
//! (`Replay`), and a NaN/Inf they find is recorded on the call that made it, with what was kept
//! from it: its description, arguments, allocations and Python frames.

use std::cell::{Cell, RefCell};

use smallvec::SmallVec;

use super::operand_call::{ExArgs, FiniteNotes};
use super::{Call, Hook, Outlet, Recorded};
use crate::check::operand_call::{CheckFacts, Members, OperandCall, OperandCallCheck, OperandSpec, MAX_OPERANDS, STAGING_ALIGN};
use crate::check::{scan_grid, BatchScan, Device, Libraries, Memory, Reads, Streams, VerdictArena, VerdictMemory, MAX_BATCH_SCANS};
use crate::config::{OnFault, SyncMode};
use crate::cuda::{MemoryType, PointerMode};
use crate::recorder::CallArgs;
use crate::scan::{self, DType, MatrixScan, Tally};
use crate::session::call_site::{CallSite, HookFrame};
use crate::session::verdicts::{HostBytes, JobsKey, Pending, ScanLog};
use crate::session::Session;
use crate::trace::PythonFrame;
use crate::validate::{self, StoredShape};

/// Whether the verdict of a call that scans may wait: under `deferred`, unless the program
/// needs it before the call returns (`ON_FAULT=error` refuses, `abort` stops) or something
/// else reads the operands at the call (origin mode watching them, a dump).
pub(crate) fn may_wait(call: &Call<'_, i32>, record: &CallArgs) -> bool {
    let c = &call.session.config;
    c.sync == SyncMode::Deferred && c.on_fault == OnFault::Continue && !c.origin_reads_operands() && !super::dump::wanted(call, record)
}

/// A thread's Python frames, why it has none, and its name (as `Outlet::python_stack` gives).
type PythonFrames = (Vec<PythonFrame>, Option<String>, String);

/// What a call's verdict is judged from, besides its scans.
struct Verdict {
    hook: Hook,
    thread: u32,
    time_ns: u64,
    call: OperandCall,
    facts: CheckFacts,
    record: CallArgs,
    extra: ExArgs,
    returned: i32,
    /// False when a fault was already recorded at the call: its scans only had to land.
    judge: bool,
    python: Option<super::KeptFrames>,
    /// Where the program made the call, for the fault's backtrace.
    site: CallSite,
    /// What the replay would note were every byte its scans left finite, taken at the call
    /// from their placeholders (`quick_verdict`); `None`: the replay judges it whatever landed.
    quick: Option<FiniteNotes>,
}

/// Why a call judged later has no Python frames: its thread had released the GIL.
const GIL_RELEASED_NOTE: &str = "Python frames not kept: the thread had released the GIL at the call (PyTorch's operators do), \
     a deferred verdict does not wait for it, and this Python's frames cannot be read without it (CPython 3.10 to 3.13's \
     standard builds can); CUBLASGUARD_SYNC=gemm judges the call before it returns, with its frames";

/// Phases of a call's scans: its inputs before it, its outputs after it.
const BEFORE: bool = false;
const AFTER: bool = true;

/// The device the scans of a call read through while their verdict waits: every read is a
/// copy queued into the region, every on-device scan a kernel whose counts land there; what
/// they return now is a placeholder the scans do not tally (`answers_placeholders`; no counts:
/// finite), so the checks find nothing at the call.
pub(crate) struct Recording<'a> {
    device: &'a dyn Device,
    memory: &'a dyn VerdictMemory,
    session: &'a Session,
    arena: VerdictArena,
    stream: u64,
    /// The call's block: its first word is the mark's.
    block: u64,
    /// The block's next free byte and its end: the call's reads are handed out from it in
    /// order, without a lock.
    next: Cell<u64>,
    end: u64,
    phase: Cell<bool>,
    log: RefCell<ScanLog>,
    /// A scan found no room in the region: the call is judged at the call instead (`abandon`),
    /// and nothing more is queued for it.
    overflowed: Cell<bool>,
}

impl<'a> Recording<'a> {
    /// `None`: no region here, or not the `need` bytes the call's scans may take (see
    /// `OperandCall::staging_need`): the checks scan at the call, as under `gemm`.
    pub fn begin(call: &Call<'a, i32>, stream: u64, need: u64) -> Option<Self> {
        let memory = call.device.verdict_memory()?;
        let arena = memory.arena()?;
        let session = call.session;
        let Ok(block) = session.verdicts.reserve_block(arena, need, session.config.staging_bytes) else {
            session.verdicts.note_judged_at_call();
            return None;
        };
        let log = ScanLog { block: Some(block), ..ScanLog::default() };
        Some(Self {
            device: call.device,
            memory,
            session,
            arena,
            stream,
            block,
            next: Cell::new(block + STAGING_ALIGN),
            end: block.saturating_add(need),
            phase: Cell::new(BEFORE),
            log: RefCell::new(log),
            overflowed: Cell::new(false),
        })
    }

    /// Whether a scan of the call found no room in the region (an operand larger than it, or
    /// the region held by calls not yet judged): its reads are not all queued, so its verdict
    /// cannot be judged later; `abandon` it and scan at the call.
    pub fn overflowed(&self) -> bool {
        self.overflowed.get()
    }

    /// Gives up deferring the call's verdict: once the copies already queued on its stream
    /// have landed (the stream synchronised; its error, if any, is left for the breadcrumbs
    /// and the program to find), the bytes they held are free again.
    pub fn abandon(self) {
        self.device.synchronize(self.stream);
        self.session.verdicts.release(self.arena, &self.log.into_inner());
        self.session.verdicts.note_judged_at_call();
    }

    /// The call has run: what is read from now on is its output.
    pub fn after_call(&self) {
        self.phase.set(AFTER);
    }

    /// `bytes` of the call's block, aligned as a mark is; `None` (and overflowed) past its end.
    fn reserve(&self, bytes: u64) -> Option<u64> {
        let offset = self.next.get();
        let next = bytes.max(1).checked_next_multiple_of(STAGING_ALIGN).and_then(|b| offset.checked_add(b)).filter(|&n| n <= self.end);
        match next.filter(|_| !self.overflowed.get()) {
            Some(next) => {
                self.next.set(next);
                Some(offset)
            }
            None => {
                self.overflowed.set(true);
                None
            }
        }
    }

    /// Keeps the call for its verdict (`judge`: false when a fault was already recorded at
    /// it: its scans' bytes are only given back once they landed), with a mark queued after
    /// its scans; nothing waits, unless the driver refuses the mark (then the stream is
    /// synchronised, as under `gemm`).
    pub fn keep(self, call: &Call<'_, i32>, check: &OperandCallCheck<'_>, record: CallArgs, extra: ExArgs, returned: i32) {
        let s = call.session;
        let judge = check.finding.is_none();
        if judge && check.pointer_mode() == PointerMode::Host {
            // alpha and beta as the fault's arguments give them: host scalars, read now (and
            // kept in the log, where the replay finds them).
            for ptr in [check.call.alpha, check.call.beta] {
                check.read_scalar(ptr, call.allocations(), &self);
            }
        }
        if self.overflowed.get() {
            // Room ran out after the call (its inputs' reads were all queued): what it wrote is
            // not judged, and counted.
            s.verdicts.note_skipped(check.operands.iter().flatten().filter(|o| o.spec.role.written()).count() as u64);
        }
        // The replay makes the decisions the call made (which operands, which sample) from the
        // same facts; only a value read can change them, so a verdict whose bytes all read
        // finite is known now. Not for a call that failed (its outputs were not read), nor for
        // one that ran out of room (what the replay cannot answer, it does not note).
        let quick = (judge && returned == crate::cuda::CUBLAS_SUCCESS && !self.overflowed.get()).then(|| FiniteNotes::of(check));
        self.queue(call, || {
            let python = if judge { call.outlet.python_frames_at_call() } else { None };
            Box::new(Verdict {
                hook: call.hook,
                thread: call.outlet.thread_id(),
                time_ns: call.outlet.now_ns(),
                call: check.call.clone(),
                facts: check.facts(),
                record,
                extra,
                returned,
                judge,
                python,
                site: if judge { call.call_site() } else { CallSite::default() },
                quick,
            })
        });
    }

    /// Queues the mark after what was recorded and keeps what `verdict` makes (what the call
    /// is judged from) until it lands; with nothing queued, only gives the block back.
    pub fn queue(self, call: &Call<'_, i32>, verdict: impl FnOnce() -> Box<dyn std::any::Any + Send>) {
        let s = call.session;
        let log = self.log.into_inner();
        let queued = !(log.copies.is_empty() && log.scans.is_empty());
        if !queued {
            // Nothing in flight: the block is free again now.
            s.verdicts.release(self.arena, &log);
            return;
        }
        let mark = self.block;
        let cleared = self.memory.clear(self.arena, mark, 8);
        let marked = cleared && self.memory.queue_mark(self.arena, mark, call.seq, self.stream);
        let mark = if marked {
            Some(mark)
        } else {
            // Refused: the stream is synchronised instead, as under `gemm`. When that fails, the
            // context broke with this call's work in flight (its kernel may have faulted while
            // its scans were being queued) and the copies after the fault are dropped, as a mark
            // queued in time would have been: the call waits with a mark that never lands, so
            // that the breadcrumbs pin the fault on it with what is kept here
            // (`tell_pinned_fault`), as for any call whose mark a fault dropped.
            let broken = call.device.synchronize(self.stream) != 0;
            (broken && cleared).then_some(mark)
        };
        s.verdicts.add(Pending { seq: call.seq, arena: self.arena, stream: self.stream, mark, log, call: verdict() });
        self.memory.judge_soon();
    }
}

impl Reads for Recording<'_> {
    fn read(&self, addr: u64, out: &mut [u8], _stream: u64) -> Result<(), i32> {
        let offset = self.reserve(out.len() as u64).ok_or(-1)?;
        if !self.memory.queue_copy(self.arena, offset, addr, out.len(), self.stream) {
            self.next.set(offset);
            return Err(-1);
        }
        // `out` is left as it was: only the scans read through a recording (a scalar by device
        // pointer is not read at the call: `read_beta_is_zero`), and they do not look at what
        // it answers (`answers_placeholders`).
        self.log.borrow_mut().copies.push((addr, out.len(), offset, self.phase.get()));
        Ok(())
    }
    fn answers_placeholders(&self) -> bool {
        true
    }
    fn read_host(&self, addr: u64, out: &mut [u8]) -> bool {
        let mut log = self.log.borrow_mut();
        // beta, read for the checks, is read again for the fault's arguments: answered from
        // what the call's first read of it kept, as the replay answers it.
        if let Some((_, bytes)) = log.host.iter().find(|(a, bytes)| *a == addr && bytes.len() == out.len()) {
            out.copy_from_slice(bytes);
            return true;
        }
        let ok = self.device.read_host(addr, out);
        if ok {
            log.host.push((addr, HostBytes::from_slice(out)));
        }
        ok
    }
    fn scan_on_device(&self, addr: u64, shape: StoredShape, dtype: DType, stream: u64) -> Option<MatrixScan> {
        // Asked before a job is made or bytes reserved (queue_scans refuses the same): the host
        // scan's copies get the bytes.
        if !self.session.scans_on_device() {
            return None;
        }
        scan_one(self, addr, shape, dtype, stream)
    }
    fn scan_batch_on_device(&self, jobs: &[BatchScan], _stream: u64) -> Option<Vec<(MatrixScan, Option<u64>)>> {
        if !self.session.scans_on_device() {
            return None;
        }
        let bytes = 24 * jobs.len();
        let offset = self.reserve(bytes as u64)?;
        if !(self.memory.clear(self.arena, offset, bytes) && self.memory.queue_scans(self.arena, offset, jobs, self.stream)) {
            // Nothing was queued there: the host scan's copies take the bytes instead.
            self.next.set(offset);
            return None;
        }
        self.log.borrow_mut().scans.push((JobsKey::of(jobs), offset, self.phase.get(), jobs.len()));
        Some(jobs.iter().map(|_| (MatrixScan { on_device: true, ..MatrixScan::default() }, None)).collect())
    }
}

/// One matrix's scan as a batch of one (the queued kernel is always the batched one); a shape
/// with nothing to scan is answered without launching, as `device_scan::scan` answers it.
fn scan_one(device: &dyn Reads, addr: u64, shape: StoredShape, dtype: DType, stream: u64) -> Option<MatrixScan> {
    if shape.rows <= 0 || shape.cols <= 0 || shape.ld < shape.rows {
        return Some(MatrixScan::default());
    }
    let job = BatchScan { addr, shape, dtype, members: 1, stride: 0, array: false };
    device.scan_batch_on_device(&[job], stream).and_then(|r| r.into_iter().next()).map(|(scan, _)| scan)
}

/// The device a waiting call's checks read through once its mark landed: each read answered
/// with the bytes its queued copy left, in the order and phase they were asked at the call.
struct Replay<'a> {
    device: &'a dyn Device,
    memory: &'a dyn VerdictMemory,
    arena: VerdictArena,
    log: &'a ScanLog,
    phase: Cell<bool>,
    copies_used: RefCell<SmallVec<[bool; 8]>>,
    scans_used: RefCell<SmallVec<[bool; 4]>>,
}

impl<'a> Replay<'a> {
    fn new(device: &'a dyn Device, memory: &'a dyn VerdictMemory, arena: VerdictArena, log: &'a ScanLog) -> Self {
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

/// The outlet of a call judged after it returned: the thread, time, Python frames and call
/// site are the call's, kept at it (the thread has long moved on: its stack of now is not the
/// call's).
pub(super) struct LateOutlet<'a> {
    outlet: &'a dyn Outlet,
    thread: u32,
    python: RefCell<Option<super::KeptFrames>>,
    site: CallSite,
}

impl<'a> LateOutlet<'a> {
    pub(super) fn new(outlet: &'a dyn Outlet, thread: u32, python: Option<super::KeptFrames>, site: CallSite) -> Self {
        Self { outlet, thread, python: RefCell::new(python), site }
    }
}

impl Outlet for LateOutlet<'_> {
    fn publish(&self, session: &Session, recorded: &Recorded) {
        self.outlet.publish(session, recorded)
    }
    fn backtrace(&self) -> Vec<String> {
        self.outlet.describe_call_site(&self.site)
    }
    fn call_site(&self, _frame: HookFrame) -> CallSite {
        self.site
    }
    fn describe_call_site(&self, site: &CallSite) -> Vec<String> {
        self.outlet.describe_call_site(site)
    }
    fn abort(&self) {
        self.outlet.abort()
    }
    fn now_ns(&self) -> u64 {
        self.outlet.now_ns()
    }
    fn thread_id(&self) -> u32 {
        self.thread
    }
    fn python_stack(&self) -> Option<PythonFrames> {
        match self.python.borrow_mut().take()? {
            super::KeptFrames::Read(frames, note, thread) => Some((frames.iter().map(|f| (**f).clone()).collect(), note, thread)),
            super::KeptFrames::GilReleased => Some((Vec::new(), Some(GIL_RELEASED_NOTE.to_string()), String::new())),
        }
    }
    fn python_frames_at_call(&self) -> Option<super::KeptFrames> {
        None
    }
    fn python_places(&self) -> crate::session::waits::PythonPlaces {
        crate::session::waits::PythonPlaces::default()
    }
    fn describe_python_places(&self, places: &crate::session::waits::PythonPlaces) -> Vec<crate::trace::PythonFrame> {
        self.outlet.describe_python_places(places)
    }
    fn kernel_name(&self, func: u64) -> Option<String> {
        self.outlet.kernel_name(func)
    }
    fn gpu_health(&self) -> Option<crate::gpu_health::GpuHealth> {
        self.outlet.gpu_health()
    }
    fn create_file(
        &self,
        dir: &str,
        name: &str,
        extension: &str,
        fill: &mut dyn FnMut(&mut std::io::BufWriter<&std::fs::File>) -> std::io::Result<()>,
    ) -> std::io::Result<String> {
        self.outlet.create_file(dir, name, extension, fill)
    }
}

/// Judges the waiting calls whose scans have landed, recording what they found on them, found
/// at call `found_at` (`found_at_seq`; 0: at exit). Cheap when none waits: one atomic load.
pub(crate) fn harvest<R: Copy>(call: &Call<'_, R>, found_at: u64) {
    if call.session.verdicts.any_waiting() {
        judge_landed(call, found_at);
    }
}

/// At a synchronisation of the program's: every verdict of the calls before it is published
/// before it goes on, as gemm mode's were at their calls. Those the guard's thread has taken
/// and is publishing count too: the program waits for its turn (microseconds a verdict) where
/// `harvest` would go on, and a program that closes its descriptors or exits right after its
/// synchronisation must find the fault on disk already.
pub(crate) fn harvest_at_synchronisation<R: Copy>(call: &Call<'_, R>, found_at: u64) {
    if call.session.verdicts.unsettled() {
        judge_landed(call, found_at);
    }
}

fn judge_landed<R: Copy>(call: &Call<'_, R>, found_at: u64) {
    let s = call.session;
    let Some(memory) = call.device.verdict_memory() else { return };
    let _turn = s.verdicts.judging_turn();
    let landed = s.verdicts.take_landed(&|arena, offset| memory.mark(arena, offset), false);
    if landed.is_empty() {
        return;
    }
    // One scan buffer for all of them (at exit the thread's own may be gone already, and a
    // fresh one per verdict would be cleared a megabyte at a time).
    call.device.with_scan_buffer(&mut |buf| {
        for pending in &landed {
            judge(call, memory, pending, found_at, buf);
            s.verdicts.release(pending.arena, &pending.log);
            s.verdicts.judged();
        }
    });
}

/// The Python frames kept with call `seq`'s waiting verdict (its own thread's, at the call), as
/// `Outlet::python_stack` gives them; `None` when no verdict of it waits or it kept none.
pub(crate) fn kept_python_stack(s: &Session, seq: u64) -> Option<PythonFrames> {
    let kept = s.verdicts.with_waiting(seq, |p| p.call.downcast_ref::<Verdict>().and_then(|v| v.python.clone())).flatten()?;
    Some(match kept {
        super::KeptFrames::Read(frames, note, thread) => (frames.iter().map(|f| (**f).clone()).collect(), note, thread),
        super::KeptFrames::GilReleased => (Vec::new(), Some(GIL_RELEASED_NOTE.to_string()), String::new()),
    })
}

/// Tells the kernel fault `finding` pinned on call `seq` (by breadcrumbs, found at call
/// `found_at`) with the description kept for the call's verdict, as `gemm` mode tells it at the
/// call: its arguments, handle, operands, Python frames and call site. Its operands are not
/// judged: which of the reads queued before the faulting kernel ran is not known. False when
/// the call keeps no verdict (its scans were off, or it was judged at the call).
pub(crate) fn tell_pinned_fault<R: Copy>(call: &Call<'_, R>, seq: u64, finding: &crate::check::Finding, found_at: u64) -> bool {
    let s = call.session;
    let Some(pending) = s.verdicts.take_call(seq) else { return false };
    let told = match pending.call.downcast_ref::<Verdict>() {
        Some(v) => {
            let outlet = LateOutlet { outlet: call.outlet, thread: v.thread, python: RefCell::new(v.python.clone()), site: v.site };
            let forward = || v.returned;
            let past = Call::judged_later(s, v.hook, seq, call.device, &outlet, &forward, call.memo);
            let mut check = OperandCallCheck::from_facts(&v.call, &v.facts);
            check.finding = Some(finding.clone());
            super::operand_call::finish_late(&past, &check, v.returned, v.record, v.extra, found_at, v.time_ns);
            true
        }
        None => false,
    };
    s.verdicts.release(pending.arena, &pending.log);
    s.verdicts.judged();
    told
}

fn judge<R: Copy>(call: &Call<'_, R>, memory: &dyn VerdictMemory, pending: &Pending, found_at: u64, buf: &mut Vec<u8>) {
    if let Some(replayed) = pending.call.downcast_ref::<super::graphs::ReplayVerdict>() {
        let replay = Replay::new(call.device, memory, pending.arena, &pending.log);
        replay.phase.set(AFTER);
        super::graphs::judge_replay(call, &replay, pending.seq, replayed, found_at, buf);
        return;
    }
    let Some(v) = pending.call.downcast_ref::<Verdict>() else { return };
    if !v.judge {
        return;
    }
    let s = call.session;
    let started = call.outlet.now_ns();
    if let Some(notes) = quick_verdict(v, memory, pending, buf) {
        s.add_scan_time(call.outlet.now_ns().saturating_sub(started));
        notes.note(s, pending.seq);
        return;
    }
    let replay = Replay::new(call.device, memory, pending.arena, &pending.log);
    let outlet = LateOutlet { outlet: call.outlet, thread: v.thread, python: RefCell::new(v.python.clone()), site: v.site };
    let forward = || v.returned;
    let past = Call::judged_later(s, v.hook, pending.seq, &replay, &outlet, &forward, call.memo);
    let check = replayed(&past, v, &replay, buf);
    s.add_scan_time(call.outlet.now_ns().saturating_sub(started));
    super::operand_call::note_finite(&past, &check);
    if check.finding.is_some() {
        super::operand_call::finish_late(&past, &check, v.returned, v.record, v.extra, found_at, v.time_ns);
    }
}

/// The call's checks run again through `replay`, which answers each of their reads with what
/// landed for it.
fn replayed<'v>(past: &Call<'_, i32>, v: &'v Verdict, replay: &Replay<'_>, buf: &mut Vec<u8>) -> OperandCallCheck<'v> {
    let s = past.session;
    let mut check = OperandCallCheck::from_facts(&v.call, &v.facts);
    check.outputs_first = s.config.scan_order == crate::config::ScanOrder::OutputsFirst;
    let scan_bytes = s.config.scan_bytes;
    check.scan_inputs(past.allocations(), replay, buf, scan_bytes);
    if check.finding.is_none() && v.returned == crate::cuda::CUBLAS_SUCCESS {
        replay.phase.set(AFTER);
        check.scan_outputs(replay, buf, scan_bytes);
    }
    if check.wants_left_inputs() {
        // The call's stream has long moved on: what its inputs hold now need not be what it read.
        check.inputs_unread("and in the default mode the verdict is judged after the call, when they may have been written since");
    }
    check
}

/// A waiting call judged from its landed bytes alone, without running its checks again: what
/// the replay would note (`Verdict::quick`), when every copy reads finite as its operand's
/// element type, every scan kernel counted nothing, and every host read other than alpha and
/// beta (a result in host memory) reads finite. `None` (the replay judges it) as soon as one
/// value is not finite or a read cannot be typed: a pointer-array batch, a copy that no operand,
/// or operands of more than one type, hold.
fn quick_verdict(v: &Verdict, memory: &dyn VerdictMemory, pending: &Pending, buf: &mut Vec<u8>) -> Option<FiniteNotes> {
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

/// What the replay and the quick verdict each make of a landed call's scans (for the tests that
/// hold one to the other): the quick verdict's notes, if it took the call, and the replay's
/// notes and whether it found a fault.
#[cfg(test)]
pub(super) fn quick_and_replayed(call: &Call<'_, i32>, pending: &Pending) -> (Option<FiniteNotes>, FiniteNotes, bool) {
    let memory = call.device.verdict_memory().expect("verdict memory");
    let v = pending.call.downcast_ref::<Verdict>().expect("a call's verdict");
    let mut buf = Vec::new();
    let quick = quick_verdict(v, memory, pending, &mut buf);
    let replay = Replay::new(call.device, memory, pending.arena, &pending.log);
    let outlet = LateOutlet { outlet: call.outlet, thread: v.thread, python: RefCell::new(None), site: v.site };
    let forward = || v.returned;
    let past = Call::judged_later(call.session, v.hook, pending.seq, &replay, &outlet, &forward, call.memo);
    let check = replayed(&past, v, &replay, &mut buf);
    (quick, FiniteNotes::of(&check), check.finding.is_some())
}

#[cfg(test)]
mod tests {
    use crate::session::verdicts::{Pending, VERDICT_HEAP_BYTES};

    #[test]
    fn a_waiting_verdict_takes_no_more_heap_than_the_ceiling_counts_for_it() {
        // The box and the queue's slot; the scan log's entries besides (each holds staging bytes,
        // which bound their number) and the Python frames (shared, kept once per frame).
        let verdict = std::mem::size_of::<super::Verdict>().max(std::mem::size_of::<super::super::graphs::ReplayVerdict>());
        let taken = verdict + std::mem::size_of::<Pending>();
        eprintln!("a waiting verdict: {verdict} bytes boxed, {taken} with its slot");
        assert!(
            2 * taken as u64 <= VERDICT_HEAP_BYTES,
            "{taken} bytes a verdict: the ceiling's count (session::verdicts::max_waiting) no longer bounds their heap"
        );
    }
}
