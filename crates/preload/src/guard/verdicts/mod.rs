//! Deferred NaN/Inf verdicts (CUBLASGUARD_SYNC=deferred, the scans on): a guarded call's scans
//! run the same checks as ever, through a device that queues their reads on the call's stream
//! instead of waiting for them (`Recording`): the scan kernel's counts and the host scan's
//! copies land in device-mapped host memory, and a mark queued after the call says when they
//! have. The call returns at once. Later (at a hooked call, a synchronisation of the program's,
//! exit) the same checks run again through a device that answers each read with what landed
//! (`Replay`), and a NaN/Inf they find is recorded on the call that made it, with what was kept
//! from it: its description, arguments, allocations and Python frames.

mod quick;
mod recording;
mod replay;

use quick::quick_verdict;
use recording::scan_one;
pub(crate) use recording::Recording;
pub(crate) use replay::LateCaller;
use replay::Replay;

use std::cell::{Cell, RefCell};

use smallvec::SmallVec;

use super::operand_call::{ExArgs, FiniteNotes};
use super::{Call, Caller, Hook, Outlet};
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
            let caller = LateCaller::new(call.outlet, v.thread, v.python.clone(), v.site);
            let forward = || v.returned;
            let past = Call::judged_later(s, v.hook, seq, call.device, call.outlet, &caller, &forward, call.memo);
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
    let caller = LateCaller::new(call.outlet, v.thread, v.python.clone(), v.site);
    let forward = || v.returned;
    let past = Call::judged_later(s, v.hook, pending.seq, &replay, call.outlet, &caller, &forward, call.memo);
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
    let caller = LateCaller::new(call.outlet, v.thread, None, v.site);
    let forward = || v.returned;
    let past = Call::judged_later(call.session, v.hook, pending.seq, &replay, call.outlet, &caller, &forward, call.memo);
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
