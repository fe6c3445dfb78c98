//! The guard around one call that reads and writes operands (a GEMM, cublasLtMatmul, a BLAS
//! call): the checks before the call, the real call (or its refusal), the checks after it, and
//! the fault they add up to.

use super::Call;
use crate::check::operand_call::{Members, OperandCall, OperandCallCheck, OperandReport, OperandSpec, MAX_OPERANDS};
use crate::config::OnFault;
use crate::cuda::{self, ComputeType, MathMode, PointerMode};
use crate::recorder::CallArgs;
use crate::scan::DType;
use crate::state::{HandleLookup, HandleState};
use crate::trace::{hex, AllocationRecord, Arg, Args, FaultKind, HandleRecord, Operand, Position};

/// Extra arguments of the Ex, batched and cublasLt forms, recorded in a fault's `args`.
#[derive(Clone, Copy, Default)]
pub(crate) struct ExArgs {
    pub types: Option<(DType, DType, DType)>,
    pub compute: Option<ComputeType>,
    pub algo: Option<i32>,
    pub batch_count: Option<i64>,
    pub strides: Option<(i64, i64, i64)>,
    /// cublasLt: the epilogue, the bias pointer, the workspace (pointer, bytes).
    pub epilogue: Option<u32>,
    pub bias: Option<u64>,
    pub workspace: Option<(u64, u64)>,
}

/// When a fault is written: before the call (status not known yet), amended after it, or
/// found after it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    BeforeCall,
    Amend,
    AfterCall,
}

/// Runs the checks around the real call and returns what the program gets back. `describe`
/// gives the call's description for the checks: with every check of a matrix multiply off, a
/// call that succeeds is forwarded and recorded without one (nothing is described, no handle
/// or allocation looked up); one that fails is described after it, for its `api_error` fault.
pub(crate) fn guard(call: &Call<'_, i32>, describe: impl FnOnce() -> OperandCall, record: CallArgs, extra: ExArgs) -> i32 {
    let s = call.session;
    if let Some(ran) = call.ran {
        // Forwarded on the hook layer's lean path, and failed: described now for its fault.
        s.note_matmul(call.seq);
        return checked(call, &mut describe(), record, extra, Some(ran));
    }
    let checks = s.config.checks;
    if !(checks.args || checks.bounds || checks.nan || checks.sync || super::dump::wanted(call, &record)) {
        let known = s.known_error();
        let status = call.forward();
        s.note_matmul(call.seq);
        if status == cuda::CUBLAS_SUCCESS {
            call.record(status, record);
            return status;
        }
        return checked(call, &mut describe(), record, extra, Some((status, known)));
    }
    checked(call, &mut describe(), record, extra, None)
}

/// The checks around the real call; `ran`: the call was already made, with its status (and the
/// error known before it). A guarded call's stages, in order, each a step of `Stages`:
/// describe (`Stages::describe`: its handle, site, capture state, whether it is scanned and
/// whether its verdict may wait), check before (`check_before`), decide and forward
/// (`forward`), check after (`check_after`), record (`record`) and publish (`publish`: the
/// fault, the waiting verdict, the clean synchronisation). Deferred verdicts are
/// `guard::verdicts`' (a `Recording` begun before the call, kept after it).
fn checked(call: &Call<'_, i32>, matmul: &mut OperandCall, record: CallArgs, extra: ExArgs, ran: Option<(i32, Option<crate::session::KnownError>)>) -> i32 {
    let stages = Stages::describe(call, matmul, record, extra, ran);
    // Only scans use the buffer: without them the per-thread buffer is not touched at all.
    if stages.checks.nan {
        let (mut stages, mut returned) = (Some(&stages), None);
        call.device.with_scan_buffer(&mut |buf| returned = stages.take().map(|stages| stages.run(call, buf)));
        // The device runs the stages exactly once; were it not to, the call would still be made.
        returned.unwrap_or_else(|| call.forward())
    } else {
        stages.run(call, &mut Vec::new())
    }
}

/// What a guarded call's stages share, decided once it is described.
struct Stages<'m> {
    matmul: &'m OperandCall,
    handle: HandleLookup,
    record: CallArgs,
    extra: ExArgs,
    ran: Option<(i32, Option<crate::session::KnownError>)>,
    known_at_entry: Option<crate::session::KnownError>,
    deferred: bool,
    /// The session's checks, less the scans for a call that is captured or not sampled.
    checks: crate::config::Checks,
    capture_query: Option<Result<bool, i32>>,
    captured: bool,
    scan_started: u64,
    /// The call's scans may be queued for a verdict judged after it.
    may_wait: bool,
    outputs_first: bool,
}

/// What the checks before the call leave for the stages after it (the check itself and its
/// recording stay in `run`'s frame: they are large, and moved they cost more than the rest).
struct Before {
    /// The error known now (one an earlier call's breadcrumbs surfaced here included).
    known: Option<crate::session::KnownError>,
    /// A fault was found before the call: on disk before it runs.
    early: bool,
    /// What the call overwrites, kept for a dump while dumps are left.
    dump: Option<super::dump::Before>,
}

impl<'m> Stages<'m> {
    /// Describe: the handle (and the workspace cublasSetWorkspace gave it, memory this call may
    /// write), the error known at entry, the capture state, and whether the call is scanned and
    /// may wait for its verdict.
    fn describe(
        call: &Call<'_, i32>,
        matmul: &'m mut OperandCall,
        record: CallArgs,
        extra: ExArgs,
        ran: Option<(i32, Option<crate::session::KnownError>)>,
    ) -> Self {
        let s = call.session;
        let handle = s.matmul_handle_in(matmul.lt, matmul.handle, call.memo);
        if let (false, HandleLookup::Alive(HandleState { workspace: (ptr, bytes), .. })) = (matmul.lt, handle) {
            if let (true, Some(slot)) = (bytes > 0, matmul.operands.iter_mut().find(|o| o.is_none())) {
                *slot = Some(OperandSpec::workspace(ptr, bytes));
            }
        }
        let matmul = &*matmul;
        s.note_matmul(call.seq);
        let known_at_entry = ran.map_or_else(|| s.known_error(), |(_, known)| known);
        let deferred = !s.config.sync.synchronises_calls();
        let mut checks = s.config.checks;
        // A call site: the function and its first three dimensions.
        let (d0, d1, d2) = match record {
            CallArgs::Gemm { m, n, k, .. } => (m as u64, n as u64, k as u64),
            CallArgs::Declared { .. } => {
                let mut dims = [0u64; 3];
                let ints = record.visit_ints_but_enums();
                dims.iter_mut().zip(ints).for_each(|(d, v)| *d = v as u32 as u64);
                (dims[0], dims[1], dims[2])
            }
            _ => (0, 0, 0),
        };
        let site = (call.hook.index() as u64) ^ d0 << 8 ^ d1 << 24 ^ d2 << 40;
        // A call on a stream capturing a CUDA graph is recorded into the graph, not run: it is
        // not scanned (nor counted as scanned), nothing is queued on its stream, and no one-time
        // setup is made for it (CUDA refuses most of them during a capture, and the refusal
        // invalidates it). Asked here once, for the checks too.
        let capture_query = checks.nan.then(|| call.device.is_capturing(matmul.stream_with(handle.alive())));
        let captured = capture_query == Some(Ok(true));
        if captured {
            s.note_captured();
        }
        checks.nan = checks.nan && !captured;
        let scan_started = if checks.nan { call.outlet.now_ns() } else { 0 };
        checks.nan = checks.nan && s.should_scan(site, scan_started);
        let may_wait = checks.nan && super::verdicts::may_wait(call, &record);
        if may_wait && s.verdicts.crowded(s.config.staging_bytes) {
            // The calls holding the staging region are judged here, those whose scans landed,
            // before this one reserves more: a host that runs ahead of the guard's verdict
            // thread frees the room its next calls need.
            super::verdicts::harvest(call, call.seq);
        }
        let outputs_first = s.config.scan_order == crate::config::ScanOrder::OutputsFirst;
        Self { matmul, handle, record, extra, ran, known_at_entry, deferred, checks, capture_query, captured, scan_started, may_wait, outputs_first }
    }

    /// The stages after the description, in order; what the program gets back.
    fn run(&self, call: &Call<'_, i32>, buf: &mut Vec<u8>) -> i32 {
        let mut check = self.new_check();
        let mut recording = self.recording(call, &check);
        let before = self.check_before(call, &mut check, &mut recording, buf);
        let (status, forwarded) = self.forward(call, &check, recording.as_ref());
        let returned = self.check_after(call, &mut check, recording.as_ref(), &before, status, forwarded, buf);
        self.record(call, &check, recording.as_ref(), returned);
        self.publish(call, &check, recording, before, returned, forwarded);
        returned
    }

    fn new_check(&self) -> OperandCallCheck<'m> {
        let mut check = OperandCallCheck::new(self.matmul, self.handle);
        check.deferred = self.deferred;
        check.capture_query = self.capture_query;
        check.outputs_first = self.outputs_first;
        check
    }

    /// Under `deferred`, the scans' reads are queued and their verdict judged later, when the
    /// region has room for all of them: the recording that queues them.
    fn recording<'c>(&self, call: &Call<'c, i32>, check: &OperandCallCheck<'_>) -> Option<super::verdicts::Recording<'c>> {
        if !self.may_wait {
            return None;
        }
        let s = call.session;
        super::verdicts::Recording::begin(
            call,
            check.stream(),
            self.matmul.staging_need(s.config.scan_bytes, s.scans_on_device(), self.matmul.leaves_inputs(self.outputs_first)),
        )
    }

    /// Check before: the arguments, the pointers and the inputs' scans (through `recording`
    /// where there is one); an error an earlier call left, surfaced here, blamed on it; a fault
    /// found now written before the call runs (a call with bad pointers may well crash the
    /// process inside the library).
    fn check_before(
        &self,
        call: &Call<'_, i32>,
        check: &mut OperandCallCheck<'m>,
        recording: &mut Option<super::verdicts::Recording<'_>>,
        buf: &mut Vec<u8>,
    ) -> Before {
        let s = call.session;
        let mut known = self.known_at_entry;
        check.recording = recording.is_some();
        let scans = scans_through(call.device, recording.as_ref());
        check.check_before(self.checks, s.config.scan_bytes, self.handle, call.allocations(), known, call.device, scans, buf);
        if let Some(r) = recording.take_if(|r| r.overflowed()) {
            // More than foreseen: the reads not queued would be lost, so the call is checked
            // again, its scans read at the call, as when there is no region.
            r.abandon();
            *check = self.new_check();
            check.check_before(self.checks, s.config.scan_bytes, self.handle, call.allocations(), known, call.device, call.device, buf);
        }
        if let Some(code) = check.surfaced {
            // An earlier call's fault, found here without a synchronisation: blamed on the call
            // whose breadcrumb never landed (this one only fails because the context is gone).
            super::attribution::surfaced(call, code, &format!("the guard's check before {}", call.api()), self.record, Some(check.stream()));
            known = s.known_error();
        }
        // An error already pending that this call is blamed for: remembered, so the program's
        // own synchronisation after it does not report it a second time.
        if let Some(f) = check.finding.as_ref().filter(|f| f.kind == FaultKind::AsyncError) {
            if let Some((code, _)) = f.error.filter(|(code, _)| known.map(|k| k.code) != Some(*code)) {
                s.note_error(code, call.seq);
                known = s.known_error();
            }
        }
        let early = check.finding.is_some();
        let dump = super::dump::wanted(call, &self.record).then(|| super::dump::before_call(call, check));
        if early {
            finish(call, check, -1, self.record, self.extra, Stage::BeforeCall, dump.as_ref().map(|b| (b, false)), None);
            // aborts in abort mode
        }
        Before { known, early, dump }
    }

    /// Decide and forward: the call made (unless the hook layer already made it), or refused
    /// with the status the fault policy gives; its status, and whether it ran.
    fn forward(&self, call: &Call<'_, i32>, check: &OperandCallCheck<'_>, recording: Option<&super::verdicts::Recording<'_>>) -> (i32, bool) {
        let (status, forwarded) = match (self.ran, check.refusal(call.session.config.on_fault)) {
            (Some((status, _)), _) => (status, true),
            (None, Some(status)) => (status, false),
            (None, None) => (call.forward(), true),
        };
        if let Some(r) = recording {
            r.after_call();
        }
        (status, forwarded)
    }

    /// Check after: the breadcrumb (deferred), the outputs' scans, the inputs outputs first
    /// left, the capture's operands kept for its replays; what the program gets back.
    #[allow(clippy::too_many_arguments)]
    fn check_after(
        &self,
        call: &Call<'_, i32>,
        check: &mut OperandCallCheck<'_>,
        recording: Option<&super::verdicts::Recording<'_>>,
        before: &Before,
        status: i32,
        forwarded: bool,
        buf: &mut Vec<u8>,
    ) -> i32 {
        let s = call.session;
        let scans = scans_through(call.device, recording);
        if self.deferred && check.awaits_completion(forwarded, self.checks) && !check.expects_device_fault() {
            check.breadcrumb_left = call.device.breadcrumb(check.stream(), call.issued());
        }
        if let Some(code) = check.after(status, forwarded, self.checks, s.config.scan_bytes, before.known, call.device, scans, buf) {
            s.note_error(code, call.seq);
        }
        if check.wants_left_inputs() {
            // Outputs first, judged at the call (a recording's outputs are placeholders, never
            // bad): the stream has finished the call, and the inputs it only read are as it read them.
            check.scan_left_inputs(call.device, buf, s.config.scan_bytes, LEFT_INPUTS_READ_AT_THE_CALL);
        }
        if self.captured && forwarded && status == cuda::CUBLAS_SUCCESS && check.finding.is_none() {
            keep_captured(call, self.matmul, check.stream());
        }
        // Found after the call ran: what it made, or (outputs first) a NaN it consumed that was
        // read only once its output was bad; too late to refuse, so it fails.
        let produced_here =
            matches!(check.finding.as_ref().map(|f| f.kind), Some(FaultKind::AsyncError | FaultKind::NonfiniteOutput | FaultKind::NonfiniteInput));
        if forwarded && s.config.on_fault == OnFault::Error && !check.found_before && produced_here {
            cuda::CUBLAS_EXECUTION_FAILED
        } else {
            status
        }
    }

    /// Record: the scans' time against the budget, the call in the flight recorder, its
    /// operands for origin mode, what its scans found finite.
    fn record(&self, call: &Call<'_, i32>, check: &OperandCallCheck<'_>, recording: Option<&super::verdicts::Recording<'_>>, returned: i32) {
        let s = call.session;
        if self.checks.nan {
            // The whole guarded call counts against the budget: scans dominate it.
            s.add_scan_time(call.outlet.now_ns().saturating_sub(self.scan_started));
        }
        call.record_call(returned, self.record, self.checks.nan && !recording.is_some_and(|r| r.overflowed()), self.captured);
        // From a first run's trace, only its memory is watched (from its allocation on).
        if s.config.nan_origin && !s.origin_from_trace() {
            super::origin::watch_operands(call, check);
        }
        if self.checks.nan && recording.is_none() {
            note_finite(call, check);
        }
    }

    /// Publish: the fault (amending one written before the call), the verdict left to wait,
    /// and what a clean synchronisation of the guard's cleared.
    fn publish(
        &self,
        call: &Call<'_, i32>,
        check: &OperandCallCheck<'_>,
        recording: Option<super::verdicts::Recording<'_>>,
        before: Before,
        returned: i32,
        forwarded: bool,
    ) {
        let Before { early, dump, .. } = before;
        let stage = if early { Stage::Amend } else { Stage::AfterCall };
        finish(call, check, returned, self.record, self.extra, stage, dump.as_ref().map(|b| (b, forwarded)), None);
        if let Some(r) = recording {
            r.keep(call, check, self.record, self.extra, returned);
        }
        // After the fault is written (its suspects are the launches since the last clean
        // synchronisation): a clean one after the call clears everything up to it, one before
        // the call everything before it.
        if check.clean_after {
            call.session.note_clean_sync(call.seq);
        } else if check.clean_before {
            call.session.note_clean_sync(call.seq - 1);
        }
    }
}

/// What a call's scans read through: its recording, where its verdict waits, else the device.
fn scans_through<'a>(device: &'a dyn crate::check::Device, recording: Option<&'a super::verdicts::Recording<'_>>) -> &'a dyn crate::check::Reads {
    match recording {
        Some(r) => r,
        None => device,
    }
}

/// A call captured into a graph: its operands (each one matrix or a strided batch of them; not
/// the workspace), kept with the capture to be scanned after the graph's launches. A
/// pointer-array batch (its pointers are in device memory, which the replays may rewrite) and
/// a triangle (the other one may hold anything) are not followed: the call is counted as
/// having operands no replay scans, rather than as scanned.
fn keep_captured(call: &Call<'_, i32>, matmul: &OperandCall, stream: u64) {
    use crate::check::operand_call::{Members, Role};
    let site = call.call_site();
    let operands = || matmul.operands.iter().flatten().filter(|o| o.role != Role::Workspace);
    let followed = |o: &&OperandSpec| !matches!(o.members, Members::Array { .. }) && o.triangle.is_none();
    if operands().any(|o| !followed(&o)) {
        call.session.note_captured_unfollowed();
    }
    let kept = operands().filter(followed).map(|o| crate::session::graphs::KeptOperand {
        seq: call.seq,
        hook: call.hook.index() as u16,
        name: o.name,
        addr: o.ptr,
        shape: o.shape,
        dtype: o.dtype,
        role: o.role,
        members: o.members,
        site,
    });
    call.session.graphs.keep(stream, kept);
}

/// What the scans found finite: a NaN found there later was written since; and how many
/// operands were scanned by a sample.
pub(crate) fn note_finite(call: &Call<'_, i32>, check: &OperandCallCheck<'_>) {
    FiniteNotes::of(check).note(call.session, call.seq);
}

/// What a call's scans leave in the session when they find nothing: how many operands were
/// sampled, and the operands (one matrix each) scanned whole and finite. Taken from a deferred
/// call's scans at the call too, where their placeholders read finite: what the replay would
/// note once every landed byte reads finite (`guard::verdicts`' quick verdict).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FiniteNotes {
    sampled: u8,
    finite: [u64; MAX_OPERANDS],
    count: u8,
}

impl FiniteNotes {
    pub(crate) fn of(check: &OperandCallCheck<'_>) -> Self {
        let mut notes = Self::default();
        for o in check.operands.iter().flatten() {
            let Some(scan) = o.scan else { continue };
            notes.sampled += scan.sampled as u8;
            if scan.nan == 0 && scan.inf == 0 && !scan.sampled && o.spec.members.count() == 1 {
                notes.finite[notes.count as usize] = o.spec.ptr;
                notes.count += 1;
            }
        }
        notes
    }

    #[cfg(test)]
    pub(crate) fn finite_count(&self) -> u8 {
        self.count
    }

    pub(crate) fn note(&self, session: &crate::session::Session, seq: u64) {
        if self.sampled > 0 {
            session.note_sampled(self.sampled as u64);
        }
        if self.count > 0 {
            session.finite_seen.note(&self.finite[..self.count as usize], seq);
        }
    }
}

/// How a fault says its inputs were read, outputs first, at the call.
const LEFT_INPUTS_READ_AT_THE_CALL: &str = " [inputs read after the call, once its output held NaN/Inf: CUBLASGUARD_SCAN_ORDER=outputs-first]";

/// Writes the fault a deferred verdict found for `call` (numbered as it was, made at
/// `time_ns`), found at call `found_at` (0: at exit).
pub(crate) fn finish_late(call: &Call<'_, i32>, check: &OperandCallCheck<'_>, returned: i32, record: CallArgs, extra: ExArgs, found_at: u64, time_ns: u64) {
    finish(call, check, returned, record, extra, Stage::AfterCall, None, Some((found_at, time_ns)));
}

/// Writes the fault, if any. `dump`: what was read before the call for an operand dump, and
/// whether the call ran; `late`: for a verdict judged after the call, where it was found and
/// when the call was made.
#[allow(clippy::too_many_arguments)]
fn finish(
    call: &Call<'_, i32>,
    check: &OperandCallCheck<'_>,
    returned: i32,
    record: CallArgs,
    extra: ExArgs,
    stage: Stage,
    dump: Option<(&super::dump::Before, bool)>,
    late: Option<(u64, u64)>,
) {
    let Some(finding) = check.finding.clone() else { return };
    let status_name = if returned < 0 { "not returned (the fault was recorded before the call ran)" } else { cuda::cublas_status_name(returned) };
    let mut fault = call.fault(finding, returned, status_name);
    if let Some((found_at, time_ns)) = late {
        // Found at the end of its own call: as at the call.
        fault.found_at_seq = (found_at != call.seq).then_some(found_at);
        fault.time_ns = time_ns;
    }
    let state = check.handle.unwrap_or_default();
    let stream = check.call.stream.unwrap_or(state.stream);
    fault.stream = Some(hex(stream));
    let math = MathMode(state.math_mode);
    let reduced = math.uses_tf32() || check.call.reduced_precision_compute;
    if !check.call.lt {
        fault.handle = Some(HandleRecord {
            ptr: hex(check.call.handle),
            math_mode: math.label(),
            pointer_mode: PointerMode::decode(state.pointer_mode).label(),
            stream: hex(state.stream),
            reduced_precision: reduced,
        });
    }
    if math.uses_tf32() && !check.call.lt && matches!(fault.kind, FaultKind::NonfiniteOutput) {
        fault.message.push_str(" [the handle uses TF32 tensor-op math: float32 inputs are rounded to 10 mantissa bits]");
    }
    fault.args = args_map(call, &record, extra, check);
    // Each allocation named with the function that made it and its ordinal, while it is live.
    let live_of = |base: u64| call.session.allocations.containing(base).filter(|a| a.base == base);
    let unchecked = |i: usize| check.unchecked.filter(|(from, _)| i >= *from).map(|(_, why)| why.to_string());
    fault.operands = check.operands.iter().enumerate().filter_map(|(i, op)| op.as_ref().map(|op| operand_record(op, &live_of, unchecked(i)))).collect();
    if fault.kind == FaultKind::HostPointer {
        // Pinned host memory the program allocated: say so, with the call that made it.
        let pinned = check.operands.iter().flatten().find_map(|o| call.session.pinned.containing(o.spec.ptr).map(|p| (o.spec.name, p)));
        if let Some((name, p)) = pinned {
            fault.message.push_str(&format!(
                " [{name} is pinned host memory: {} bytes at {} from {}; copy it to device memory first]",
                p.size,
                hex(p.base),
                p.api
            ));
        }
    }
    if fault.kind == FaultKind::AsyncError {
        // The kernels that may have caused it: launched since the device was last found clean.
        fault.suspects = super::launch::suspects(call, call.seq);
    }
    if fault.kind == FaultKind::NonfiniteInput {
        // The kernels that may have written it: launched since that memory was last seen
        // finite, with a parameter pointing into it.
        let bad = check.operands.iter().enumerate().find_map(|(i, o)| o.filter(|o| o.scan.is_some_and(|s| s.nan > 0 || s.inf > 0)).map(|o| (i, o)));
        if let Some((i, o)) = bad {
            // The member that held it, for a batch.
            let ptr = o.bad_member.and_then(|b| check.member_address(i, b)).unwrap_or(o.spec.ptr);
            fault.writers = super::launch_pointers::writers(call, ptr, o.extent.unwrap_or(1));
        }
    }
    fault.freed_by = check.freed.map(|f| crate::trace::FreedBy { seq: f.seq, api: f.api.to_string(), base: hex(f.base), size: f.size });
    let s = call.session;
    let abort = s.config.on_fault == OnFault::Abort;
    let dump = dump.filter(|_| stage != Stage::BeforeCall || abort);
    match dump {
        // Abort mode ends the process inside `report`: the dump is written first, for a fault
        // that will be stored (not past the cap, no rule ignores it).
        Some((before, forwarded)) if abort => {
            if !s.faults_full() && !s.config.ignore.iter().any(|r| r.matches(&fault)) {
                (fault.dump, fault.dump_note) = super::dump::write(call, check, before, forwarded, &fault);
            }
            publish(call, fault, stage);
        }
        // Otherwise the fault goes out first; once it is known to be stored, its dump is
        // written and the fault amended with the path.
        Some((before, forwarded)) => {
            publish(call, fault.clone(), stage);
            if s.is_stored(fault.seq, &fault.api) {
                (fault.dump, fault.dump_note) = super::dump::write(call, check, before, forwarded, &fault);
                if fault.dump.is_some() || fault.dump_note.is_some() {
                    call.amend(fault);
                }
            }
        }
        None => publish(call, fault, stage),
    }
}

fn publish(call: &Call<'_, i32>, fault: crate::trace::Fault, stage: Stage) {
    match stage {
        Stage::Amend => call.amend(fault),
        Stage::BeforeCall | Stage::AfterCall => call.report(fault),
    }
}

fn args_map(call: &Call<'_, i32>, record: &CallArgs, extra: ExArgs, check: &OperandCallCheck<'_>) -> Args {
    let mut map = record.to_args();
    let host_mode = check.call.pointer_mode.or(check.handle.map(|h| h.pointer_mode)) == Some(0);
    for (name, ptr) in [("alpha", check.call.alpha), ("beta", check.call.beta)] {
        let Some(ptr) = ptr else { continue };
        let value = match check.call.scalar.size() {
            Some(size) if host_mode && ptr != 0 && call.session.allocations.containing(ptr).is_none() => {
                let mut bytes = [0u8; 16];
                call.device.read_host(ptr, &mut bytes[..size as usize]).then(|| scalar_arg(check.call.scalar, bytes)).flatten()
            }
            _ => None,
        };
        map.insert(name, value.unwrap_or(Arg::Address(ptr)));
    }
    map.insert("handle", Arg::Address(check.call.handle));
    if let Some((a, b, c)) = extra.types {
        map.insert("Atype", a.name());
        map.insert("Btype", b.name());
        map.insert("Ctype", c.name());
    }
    if let Some(compute) = extra.compute {
        map.insert("computeType", compute.name());
    }
    if let Some(algo) = extra.algo {
        map.insert("algo", algo as i64);
    }
    if let Some(count) = extra.batch_count {
        map.insert("batchCount", count);
    }
    if let Some(epilogue) = extra.epilogue {
        map.insert("epilogue", crate::check::lt::epilogue_name(epilogue));
    }
    if let Some(bias) = extra.bias {
        map.insert("bias", Arg::Address(bias));
    }
    if let Some((ptr, bytes)) = extra.workspace {
        map.insert("workspace", Arg::Address(ptr));
        map.insert("workspaceSizeInBytes", Arg::Int(bytes.min(i64::MAX as u64) as i64));
    }
    if let Some((a, b, c)) = extra.strides {
        map.insert("strideA", a);
        map.insert("strideB", b);
        map.insert("strideC", c);
    }
    map
}

/// A host scalar's value (`None`: a type whose value is not recorded).
fn scalar_arg(dtype: DType, bytes: [u8; 16]) -> Option<Arg> {
    let f64_at = |i: usize| f64::from_le_bytes(bytes[i..i + 8].try_into().unwrap_or([0; 8]));
    let f32_at = |i: usize| f32::from_le_bytes(bytes[i..i + 4].try_into().unwrap_or([0; 4]));
    Some(match dtype {
        DType::C64 => Arg::Complex([f64_at(0), f64_at(8)]),
        DType::C32 => Arg::Complex([f32_at(0) as f64, f32_at(4) as f64]),
        DType::F64 => Arg::Float(f64_at(0)),
        DType::F32 => Arg::Float(f32_at(0) as f64),
        DType::I32 => Arg::Int(i32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as i64),
        DType::F16 => Arg::Label(format!("f16 bits {:#06x}", u16::from_le_bytes([bytes[0], bytes[1]]))),
        _ => return None,
    })
}

fn operand_record(op: &OperandReport<'_>, live_of: &dyn Fn(u64) -> Option<crate::state::Allocation>, not_checked: Option<String>) -> Operand {
    let spec = op.spec;
    let record = |a: crate::validate::Span| {
        let live = live_of(a.base);
        AllocationRecord { base: hex(a.base), size: a.size, api: live.map(|l| l.api.to_string()), ordinal: live.map(|l| l.ordinal).filter(|&n| n > 0) }
    };
    let pointer_array = matches!(spec.members, Members::Array { .. });
    let (batch_count, stride) = match spec.members {
        Members::One => (None, None),
        Members::Strided { count, stride } => (Some(count), Some(stride)),
        Members::Array { count } => (Some(count), None),
    };
    Operand {
        name: spec.name.to_string(),
        ptr: hex(spec.ptr),
        dtype: spec.dtype.name(),
        rows: spec.shape.rows,
        cols: spec.shape.cols,
        ld: spec.shape.ld,
        bytes: op.extent,
        // A pointer array's own allocation is the operand's; its members' is recorded apart.
        allocation: if pointer_array { op.array_allocation } else { op.allocation }.map(record),
        member_allocation: if pointer_array { op.allocation } else { None }.map(record),
        scanned: op.scan.is_some(),
        sampled: op.scan.is_some_and(|s| s.sampled),
        nan: op.scan.map(|s| s.nan),
        inf: op.scan.map(|s| s.inf),
        first_nonfinite: op.scan.and_then(|s| s.first_nonfinite).map(|(row, col)| Position { row, col }),
        batch_count,
        stride,
        pointer_array,
        bad_member: op.bad_member,
        scan_path: op.scan.map(|s| if s.on_device { "device" } else { "host" }.to_string()),
        not_checked,
    }
}

#[cfg(test)]
mod tests {
    use super::super::model::{session, ModelDevice, ModelOutlet};
    use super::super::{gemm, Call, Hook};
    use crate::config::{Config, OnFault};
    use crate::cuda;
    use crate::session::Session;
    use crate::trace::FaultKind;
    use std::cell::Cell;

    const HANDLE: u64 = 0x4000;
    const A: u64 = 0x1000;
    const B: u64 = 0x2000;
    const C: u64 = 0x3000;
    const ALPHA: u64 = 0x10;
    const BETA: u64 = 0x20;

    fn f32s(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// A 2 x 2 x 2 sgemm on the model, A holding `a00`; the real call returns `status` and is
    /// counted in `calls`.
    struct Setup {
        session: Session,
        device: ModelDevice,
        outlet: ModelOutlet,
    }

    /// `session` with `HANDLE` alive and every buffer of `device` a live allocation.
    fn with_the_devices_memory(session: Session, device: &ModelDevice) -> Session {
        session.handles.created(HANDLE);
        for (base, bytes) in device.memory.borrow().iter() {
            let made = crate::state::Allocation { base: *base, size: bytes.len() as u64, time_ns: 0, stream: None, api: "cudaMalloc", ordinal: 0 };
            session.allocations.insert(made);
        }
        session
    }

    fn setup(on_fault: OnFault, a00: f32) -> Setup {
        let session = session(Config { on_fault, quiet: true, ..Config::default() });
        session.handles.created(HANDLE);
        let device = ModelDevice::default();
        device.put(&session.allocations, A, f32s(&[a00, 1.0, 1.0, 1.0]));
        device.put(&session.allocations, B, f32s(&[1.0; 4]));
        device.put(&session.allocations, C, f32s(&[0.0; 4]));
        device.host.borrow_mut().insert(ALPHA, f32s(&[1.0]));
        device.host.borrow_mut().insert(BETA, f32s(&[0.0]));
        Setup { session, device, outlet: ModelOutlet::default() }
    }

    fn sgemm(s: &Setup, a: u64, lda: i32, status: i32, calls: &Cell<u32>) -> i32 {
        let forward = || {
            calls.set(calls.get() + 1);
            status
        };
        let memo = crate::state::ThreadMemo::new();
        let call = Call::begin(
            &s.session,
            Hook::cublasSgemm_v2,
            &s.device,
            &s.outlet,
            &s.outlet,
            &forward,
            super::super::OnThread { id: 7, memo: &memo, frame: Default::default() },
        );
        gemm::sgemm(&call, HANDLE as _, 0, 0, 2, 2, 2, ALPHA as _, a as _, lda, B as _, 2, BETA as _, C as _, 2)
    }

    #[test]
    fn with_every_check_off_a_clean_call_looks_nothing_up_and_a_failed_one_is_still_reported() {
        let mut s = setup(OnFault::Continue, f32::NAN);
        s.session.config.checks = crate::config::Checks::NONE;
        let memo = crate::state::ThreadMemo::new();
        let calls = Cell::new(0);
        let run = |status: i32| {
            let forward = || {
                calls.set(calls.get() + 1);
                status
            };
            let call = Call::begin(
                &s.session,
                Hook::cublasSgemm_v2,
                &s.device,
                &s.outlet,
                &s.outlet,
                &forward,
                super::super::OnThread { id: 7, memo: &memo, frame: Default::default() },
            );
            gemm::sgemm(&call, HANDLE as _, 0, 0, 2, 2, 2, ALPHA as _, A as _, 2, B as _, 2, BETA as _, C as _, 2)
        };
        assert_eq!(run(0), 0);
        assert!(memo.is_untouched(), "no handle or allocation was looked up");
        assert!(faults(&s).is_empty(), "the NaN in A is not looked for");
        assert_eq!(run(cuda::CUBLAS_EXECUTION_FAILED), cuda::CUBLAS_EXECUTION_FAILED);
        assert_eq!(calls.get(), 2, "each call ran once");
        let f = faults(&s);
        assert_eq!((f.len(), f[0].kind, f[0].seq), (1, FaultKind::ApiError, 2));
        assert_eq!(f[0].operands.iter().map(|o| (o.name.as_str(), o.allocation.is_some())).collect::<Vec<_>>(), [("A", true), ("B", true), ("C", true)]);
        assert_eq!(f[0].operands[0].not_checked.as_deref(), Some("bounds checks are off"));
        let t = s.session.trace(Default::default());
        assert_eq!(t.recent_calls.iter().map(|c| (c.seq, c.status, c.args["m"].as_i64())).collect::<Vec<_>>(), [(1, 0, Some(2)), (2, 13, Some(2))]);
    }

    /// The program's cudaDeviceSynchronize on thread 9, after the calls made on `s`.
    fn synchronisation<'a>(s: &'a Setup, memo: &'a crate::state::ThreadMemo) -> Call<'a, i32> {
        Call::begin(
            &s.session,
            Hook::cudaDeviceSynchronize,
            &s.device,
            &s.outlet,
            &s.outlet,
            &|| 0,
            super::super::OnThread { id: 9, memo, frame: Default::default() },
        )
    }

    fn faults(s: &Setup) -> Vec<crate::trace::Fault> {
        s.session.trace(Default::default()).faults
    }

    #[test]
    fn on_fault_continue_records_the_fault_and_returns_the_librarys_status() {
        let s = setup(OnFault::Continue, f32::NAN);
        let calls = Cell::new(0);
        assert_eq!(sgemm(&s, A, 2, 0, &calls), 0);
        assert_eq!(calls.get(), 1, "the real call ran");
        let f = faults(&s);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].kind, FaultKind::NonfiniteInput);
        assert_eq!(f[0].status, 0);
        assert!(!s.outlet.aborted.get());
        assert_eq!(s.outlet.lines.borrow().len(), 1);
    }

    #[test]
    fn on_fault_error_refuses_a_call_with_a_fault_found_before_it() {
        let s = setup(OnFault::Error, 1.0);
        let calls = Cell::new(0);
        // lda 1 < m 2: the library would refuse it too; the guard refuses without calling.
        assert_eq!(sgemm(&s, A, 1, 0, &calls), cuda::CUBLAS_INVALID_VALUE);
        assert_eq!(calls.get(), 0, "the real call was not made");
        let f = faults(&s);
        assert_eq!((f.len(), f[0].kind, f[0].status), (1, FaultKind::InvalidArgument, cuda::CUBLAS_INVALID_VALUE));
        let s = setup(OnFault::Error, f32::INFINITY);
        assert_eq!(sgemm(&s, A, 2, 0, &calls), cuda::CUBLAS_EXECUTION_FAILED, "NaN/Inf input refused as execution failure");
        assert_eq!(calls.get(), 0);
    }

    #[test]
    fn on_fault_error_turns_an_asynchronous_fault_of_the_call_into_a_failure_status() {
        let mut s = setup(OnFault::Error, 1.0);
        // The mode the configuration gives ON_FAULT=error when CUBLASGUARD_SYNC is not set: the
        // call's kernel fault is only known at the call by synchronising after it.
        s.session.config.sync = crate::config::SyncMode::Gemm;
        s.device.sync_errors.borrow_mut().extend([0, 700]); // clean before, faulted after
        let calls = Cell::new(0);
        assert_eq!(sgemm(&s, A, 2, 0, &calls), cuda::CUBLAS_EXECUTION_FAILED);
        assert_eq!(calls.get(), 1);
        let f = faults(&s);
        assert_eq!((f[0].kind, f[0].error.as_ref().map(|e| e.code)), (FaultKind::AsyncError, Some(700)));
        assert_eq!(s.session.known_error().map(|k| k.code), Some(700));
    }

    #[test]
    fn on_fault_abort_publishes_the_fault_then_aborts() {
        let s = setup(OnFault::Abort, f32::NAN);
        let calls = Cell::new(0);
        sgemm(&s, A, 2, 0, &calls);
        assert!(s.outlet.aborted.get());
        assert!(s.outlet.rewrites.get() >= 1, "the trace is written before the abort");
        assert_eq!(faults(&s)[0].kind, FaultKind::NonfiniteInput);
    }

    #[test]
    fn a_fault_found_before_the_call_is_amended_with_the_status_it_returned() {
        let s = setup(OnFault::Continue, 1.0);
        let calls = Cell::new(0);
        // A points at host memory: found before the call, published before it runs.
        let status = sgemm(&s, 0x9999_0000, 2, cuda::CUBLAS_EXECUTION_FAILED, &calls);
        assert_eq!(status, cuda::CUBLAS_EXECUTION_FAILED);
        let f = faults(&s);
        assert_eq!(f.len(), 1, "amended in place, not added twice: {f:#?}");
        assert_eq!(f[0].kind, FaultKind::HostPointer);
        assert_eq!((f[0].status, f[0].status_name.as_str()), (13, "CUBLAS_STATUS_EXECUTION_FAILED"));
        assert_eq!(s.outlet.publications.get(), 2, "published before the call and again after it");
        assert_eq!(s.session.fault_count(), 1);
    }

    #[test]
    fn an_error_pending_before_the_call_is_not_blamed_on_it() {
        let mut s = setup(OnFault::Continue, 1.0);
        // gemm mode's synchronisation before the call is what finds it pending (under deferred
        // the breadcrumbs attribute it: session::breadcrumbs' and attribution's tests).
        s.session.config.sync = crate::config::SyncMode::Gemm;
        s.device.sync_errors.borrow_mut().push(719);
        let calls = Cell::new(0);
        sgemm(&s, A, 2, 0, &calls);
        let f = faults(&s);
        assert_eq!(f[0].kind, FaultKind::AsyncError);
        assert!(f[0].message.contains("already pending before this call"), "{}", f[0].message);
        assert_eq!(f[0].operands.iter().filter(|o| o.scanned).count(), 0, "nothing is scanned on a broken context");
    }

    #[test]
    fn faults_past_the_cap_are_counted_without_a_backtrace() {
        let mut s = setup(OnFault::Continue, f32::NAN);
        s.session = {
            let session = session(Config { max_faults: 2, quiet: true, ..Config::default() });
            with_the_devices_memory(session, &s.device)
        };
        let calls = Cell::new(0);
        for _ in 0..5 {
            sgemm(&s, A, 2, 0, &calls);
        }
        assert_eq!(s.session.fault_count(), 5);
        assert_eq!(faults(&s).len(), 2);
        assert_eq!(s.outlet.backtraces.get(), 2, "only stored faults get a backtrace");
    }

    #[test]
    fn an_ignored_fault_is_counted_without_a_backtrace_or_a_memory_query() {
        let mut s = setup(OnFault::Continue, f32::NAN);
        s.session = {
            let (ignore, problems) = crate::ignore::parse_rules("kind=nonfinite_input,operand=A,m=2");
            assert!(problems.is_empty(), "{problems:?}");
            let session = session(Config { ignore, quiet: true, ..Config::default() });
            with_the_devices_memory(session, &s.device)
        };
        let calls = Cell::new(0);
        let queries_before = s.device.memory_queries.get();
        for _ in 0..3 {
            sgemm(&s, A, 2, 0, &calls);
        }
        assert!(faults(&s).is_empty());
        assert_eq!(s.session.trace(Default::default()).summary.ignored_faults.get("kind=nonfinite_input,operand=A,m=2"), Some(&3));
        assert_eq!(s.outlet.backtraces.get(), 0, "an ignored fault is not worth a backtrace");
        assert_eq!(s.device.memory_queries.get(), queries_before, "nor a memory query");
        // A fault no rule covers (lda < m) still gets both.
        sgemm(&s, A, 1, 0, &calls);
        let f = faults(&s);
        assert_eq!(f.len(), 1);
        assert_eq!(s.outlet.backtraces.get(), 1);
        assert!(f[0].memory.as_ref().is_some_and(|m| m.free.is_some()), "{:?}", f[0].memory);
    }

    #[test]
    fn a_dumped_fault_holds_the_operands_the_model_device_gave_and_the_quota_is_kept() {
        let dir = std::env::temp_dir().join(format!("cublasguard-unit-dumps-{}", std::process::id()));
        let mut s = setup(OnFault::Continue, f32::NAN);
        s.session = {
            let config = Config { dump_dir: Some(dir.display().to_string()), dump_max: 1, quiet: true, ..Config::default() };
            let session = session(config);
            with_the_devices_memory(session, &s.device)
        };
        let calls = Cell::new(0);
        sgemm(&s, A, 2, 0, &calls);
        sgemm(&s, A, 2, 0, &calls);
        let f = faults(&s);
        assert_eq!(f.len(), 2);
        let path = f[0].dump.clone().expect("the first fault is dumped");
        assert!(f[1].dump.is_none(), "CUBLASGUARD_DUMP_MAX=1");
        let d = crate::dump::decode(&std::fs::read(&path).unwrap()).unwrap();
        assert!(d.tensors["A"].at(0, 0, 0)[0].is_nan());
        assert_eq!(d.tensors["B"].values, vec![[1.0, 0.0]; 4]);
        assert!(!d.tensors.contains_key("C"), "beta is 0: C is not an input");
        assert!(d.tensors.contains_key("C_out"));
        assert_eq!((d.meta["alpha"][0].as_f64(), d.meta["beta"][0].as_f64()), (Some(1.0), Some(0.0)));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn under_deferred_a_call_leaves_a_breadcrumb_instead_of_synchronising_and_synchronises_when_it_cannot() {
        for works in [true, false] {
            let mut s = setup(OnFault::Continue, 1.0);
            s.session.config.sync = crate::config::SyncMode::Deferred;
            s.session.config.checks = crate::config::Checks::parse("args,bounds,sync").unwrap();
            s.device.breadcrumbs_work.set(works);
            let calls = Cell::new(0);
            assert_eq!(sgemm(&s, A, 2, 0, &calls), 0);
            let crumbs = s.device.breadcrumbs.borrow().len();
            assert_eq!((crumbs, s.device.synchronisations.get()), if works { (1, 0) } else { (0, 1) }, "breadcrumbs work: {works}");
            assert!(faults(&s).is_empty());
        }
        // gemm mode: before and after, no breadcrumb.
        let mut s = setup(OnFault::Continue, 1.0);
        s.session.config.sync = crate::config::SyncMode::Gemm;
        s.session.config.checks = crate::config::Checks::parse("args,bounds,sync").unwrap();
        s.device.breadcrumbs_work.set(true);
        sgemm(&s, A, 2, 0, &Cell::new(0));
        assert_eq!((s.device.breadcrumbs.borrow().len(), s.device.synchronisations.get()), (0, 2));
    }

    #[test]
    fn under_deferred_a_call_found_to_hand_the_kernel_bad_memory_is_synchronised_as_in_gemm_mode() {
        // A starts 8 bytes into its 16-byte allocation: the kernel will read past it and fault;
        // waiting for that here, as gemm mode does, attaches its error to this call's fault
        // whatever the device's timing, where a breadcrumb would leave it to a later call.
        let mut s = setup(OnFault::Continue, 1.0);
        s.session.config.sync = crate::config::SyncMode::Deferred;
        s.session.config.checks = crate::config::Checks::parse("args,bounds,sync").unwrap();
        s.device.breadcrumbs_work.set(true);
        sgemm(&s, A + 8, 2, 0, &Cell::new(0));
        assert_eq!(faults(&s).iter().map(|f| f.kind).collect::<Vec<_>>(), [FaultKind::OutOfBounds]);
        assert_eq!((s.device.breadcrumbs.borrow().len(), s.device.synchronisations.get()), (0, 1));
    }

    #[test]
    fn under_deferred_a_nan_read_by_a_call_is_judged_once_its_copies_land_and_recorded_on_that_call() {
        let mut s = setup(OnFault::Continue, f32::NAN);
        s.session.config.sync = crate::config::SyncMode::Deferred;
        s.device.verdicts_work.set(true);
        s.device.breadcrumbs_work.set(true);
        let calls = Cell::new(0);
        assert_eq!(sgemm(&s, A, 2, 0, &calls), 0);
        assert!(faults(&s).is_empty(), "nothing is known at the call");
        assert_eq!(s.device.synchronisations.get(), 0, "nor waited for");
        let memo = crate::state::ThreadMemo::new();
        let later = synchronisation(&s, &memo);
        super::super::verdicts::harvest(&later, later.seq);
        assert!(faults(&s).is_empty(), "the copies have not landed yet");
        s.device.land();
        super::super::verdicts::harvest(&later, later.seq);
        let f = faults(&s);
        assert_eq!((f.len(), f[0].kind, f[0].seq, f[0].found_at_seq), (1, FaultKind::NonfiniteInput, 1, Some(2)), "{f:#?}");
        assert_eq!((f[0].operands[0].name.as_str(), f[0].operands[0].nan), ("A", Some(1)));
        assert_eq!(f[0].args["m"].as_i64(), Some(2), "the call's own arguments");
        assert_eq!(f[0].thread, 7, "and thread");
        assert!(!s.session.verdicts.any_waiting());
        // Clean, the same call leaves nothing behind.
        let s = setup(OnFault::Continue, 1.0);
        s.device.verdicts_work.set(true);
        let mut session = s;
        session.session.config.sync = crate::config::SyncMode::Deferred;
        sgemm(&session, A, 2, 0, &calls);
        session.device.land();
        let later = synchronisation(&session, &memo);
        super::super::verdicts::harvest(&later, later.seq);
        assert!(faults(&session).is_empty());
        assert_eq!(session.session.verdicts.counts(), (1, 0, 0, 0));
    }

    #[test]
    fn under_deferred_a_call_whose_mark_a_broken_context_refuses_waits_for_the_breadcrumbs_to_pin_the_fault_on_it() {
        for (sync_error, waits) in [(700, true), (0, false)] {
            let mut s = setup(OnFault::Continue, 1.0);
            s.session.config.sync = crate::config::SyncMode::Deferred;
            s.device.verdicts_work.set(true);
            s.device.breadcrumbs_work.set(true);
            s.device.marks_refused.set(true);
            s.device.sync_errors.borrow_mut().push(sync_error);
            sgemm(&s, A, 2, 0, &Cell::new(0));
            assert_eq!(s.device.synchronisations.get(), 1, "the stream synchronised instead of the mark");
            s.device.land();
            let verdicts = &s.session.verdicts;
            let landed = verdicts.take_landed(&|arena, offset| crate::check::VerdictMemory::mark(&s.device, arena, offset), false);
            if waits {
                // The kernel faulted while the call's scans were queued: gemm mode tells that
                // fault with the call's handle and operands, so the default must still have them.
                assert!(landed.is_empty(), "its mark never lands");
                assert_eq!(verdicts.take_call(1).map(|p| p.seq), Some(1), "kept for the fault the breadcrumbs pin on it");
            } else {
                assert_eq!(landed.iter().map(|p| p.seq).collect::<Vec<_>>(), [1], "its work ran: judged at once");
            }
            verdicts.judged();
        }
    }

    #[test]
    fn under_deferred_a_clean_gemms_scan_log_is_held_inline() {
        // What a deferred call keeps for its verdict besides the verdict itself: held in place,
        // so a clean call allocates nothing for it (BENCHMARKS.md, issue 46's cost condition).
        let mut s = setup(OnFault::Continue, 1.0);
        s.session.config.sync = crate::config::SyncMode::Deferred;
        s.device.verdicts_work.set(true);
        // The host scan's copies (the model runs no scan kernel: each refused one would keep its
        // reservation here); beta != 0: C is read before the call too, and alpha and beta are
        // read on the host.
        s.session.config.device_scan = crate::config::DeviceScan::Off;
        s.device.host.borrow_mut().insert(BETA, f32s(&[1.0]));
        sgemm(&s, A, 2, 0, &Cell::new(0));
        let taken = s.session.verdicts.take_landed(&|_, _| 0, true);
        let [pending] = taken.as_slice() else { panic!("one call waits: {}", taken.len()) };
        let log = &pending.log;
        assert_eq!((log.copies.len(), log.host.len()), (4, 2), "A, B and C before, C after; alpha and beta once each: {log:?}");
        assert!(!(log.copies.spilled() || log.host.spilled() || log.scans.spilled()), "{log:?}");
        assert!(!taken.spilled(), "one harvest's calls are inline too");
    }

    #[test]
    fn under_deferred_a_verdict_whose_landed_bytes_read_finite_is_judged_without_its_replay_and_notes_what_the_replay_notes() {
        // (A's first element, C before the call, beta, the scan's bytes an operand): every
        // clean one taken by the quick verdict with the replay's notes (sampled included), every
        // one with a NaN or Inf in what was read left to the replay, which finds it.
        let cases = [
            (1.0, 0.0, 0.0, 1 << 20, true),
            (1.0, 0.0, 1.0, 1 << 20, true),
            (1.0, 0.0, 1.0, 8, true),
            (f32::NAN, 0.0, 0.0, 1 << 20, false),
            (f32::INFINITY, 0.0, 1.0, 8, false),
            (1.0, f32::NAN, 1.0, 1 << 20, false),
            // beta = 0: C is not read before the call, and after it holds what the model left,
            // the NaN (this call "produced" it).
            (1.0, f32::NAN, 0.0, 1 << 20, false),
        ];
        for (a00, c00, beta, scan_bytes, clean) in cases {
            let mut s = setup(OnFault::Continue, a00);
            s.session.config.sync = crate::config::SyncMode::Deferred;
            s.session.config.device_scan = crate::config::DeviceScan::Off;
            s.session.config.scan_bytes = scan_bytes;
            s.device.verdicts_work.set(true);
            s.device.put(&s.session.allocations, C, f32s(&[c00, 0.0, 0.0, 0.0]));
            s.device.host.borrow_mut().insert(BETA, f32s(&[beta]));
            sgemm(&s, A, 2, 0, &Cell::new(0));
            s.device.land();
            let taken = s.session.verdicts.take_landed(&|arena, offset| crate::check::VerdictMemory::mark(&s.device, arena, offset), false);
            let [pending] = taken.as_slice() else { panic!("one call waits: {}", taken.len()) };
            let memo = crate::state::ThreadMemo::new();
            let later = synchronisation(&s, &memo);
            let (quick, replayed, found) = super::super::verdicts::quick_and_replayed(&later, pending);
            let case = (a00, c00, beta, scan_bytes);
            assert_eq!(found, !clean, "{case:?}: the replay's verdict");
            if clean {
                assert_eq!(quick, Some(replayed), "{case:?}: taken by the quick verdict, noting what the replay notes");
                assert_eq!(replayed.finite_count(), if scan_bytes < 16 { 0 } else { 3 }, "{case:?}: A, B and C scanned whole, or sampled");
            } else {
                assert_eq!(quick, None, "{case:?}: left to the replay");
            }
        }
    }

    #[test]
    fn a_synchronisation_returns_only_after_the_verdict_the_guards_thread_is_publishing_is_published() {
        let mut s = setup(OnFault::Continue, f32::NAN);
        s.session.config.sync = crate::config::SyncMode::Deferred;
        s.device.verdicts_work.set(true);
        s.device.breadcrumbs_work.set(true);
        sgemm(&s, A, 2, 0, &Cell::new(0));
        s.device.land();
        let published = std::sync::atomic::AtomicBool::new(false);
        let taken = std::sync::Barrier::new(2);
        let verdicts = &s.session.verdicts;
        std::thread::scope(|scope| {
            // The guard's thread, stood in for: it has taken the landed call and is judging it.
            scope.spawn(|| {
                let _turn = verdicts.judging_turn();
                let landed = verdicts.take_landed(&|_, _| 0, true);
                taken.wait();
                std::thread::sleep(std::time::Duration::from_millis(200));
                published.store(true, std::sync::atomic::Ordering::SeqCst);
                for pending in &landed {
                    verdicts.release(pending.arena, &pending.log);
                    verdicts.judged();
                }
            });
            taken.wait();
            let memo = crate::state::ThreadMemo::new();
            let sync = synchronisation(&s, &memo);
            assert_eq!(super::super::sync::device_synchronize(&sync), 0);
            assert!(
                published.load(std::sync::atomic::Ordering::SeqCst),
                "the program went on while the verdict of a call before its synchronisation was still being published"
            );
        });
    }

    #[test]
    fn a_clean_call_is_recorded_once_with_its_shape() {
        let s = setup(OnFault::Continue, 1.0);
        let calls = Cell::new(0);
        assert_eq!(sgemm(&s, A, 2, 0, &calls), 0);
        assert!(faults(&s).is_empty());
        let t = s.session.trace(Default::default());
        assert_eq!(t.recent_calls.len(), 1);
        assert_eq!((t.recent_calls[0].api.as_str(), t.recent_calls[0].args["m"].as_i64()), ("cublasSgemm_v2", Some(2)));
        assert!(t.recent_calls[0].scanned);
    }
}
