//! A deferred call's recording: the device its scans read through while the verdict waits,
//! each read queued into the staging region and answered with a placeholder.

use super::*;

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
            let python = if judge { call.caller.python_frames_at_call() } else { None };
            Box::new(Verdict {
                hook: call.hook,
                thread: call.caller.thread_id(),
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
pub(super) fn scan_one(device: &dyn Reads, addr: u64, shape: StoredShape, dtype: DType, stream: u64) -> Option<MatrixScan> {
    if shape.rows <= 0 || shape.cols <= 0 || shape.ld < shape.rows {
        return Some(MatrixScan::default());
    }
    let job = BatchScan { addr, shape, dtype, members: 1, stride: 0, array: false };
    device.scan_batch_on_device(&[job], stream).and_then(|r| r.into_iter().next()).map(|(scan, _)| scan)
}
