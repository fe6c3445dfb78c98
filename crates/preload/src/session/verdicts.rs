//! Deferred NaN/Inf verdicts (CUBLASGUARD_SYNC=deferred): a guarded call's scans are queued on
//! its stream, landing in a context's region of device-mapped host memory, and judged later,
//! once the mark queued after them has landed. Here: which bytes of a region each call holds
//! (a ring, so a full region skips a scan rather than waits), what each call's scans read
//! (the log its verdict is judged from), and the calls waiting for a verdict.

use std::any::Any;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::check::{BatchScan, VerdictArena};
use smallvec::SmallVec;

/// Reservations are aligned to this, so that a mark is a whole, aligned word.
const ALIGN: u64 = crate::check::operand_call::STAGING_ALIGN;

/// The staging region cannot take a call's scans now (see `Verdicts::reserve_block`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NoRoom;

/// One region's bytes, handed out in order and given back in any order: a reservation is free
/// again once every one before it is.
#[derive(Debug, Default)]
struct Ring {
    /// (start, length, released), oldest first.
    live: VecDeque<(u64, u64, bool)>,
    /// The bytes `live` spans (what is not free again yet).
    held: u64,
}

impl Ring {
    fn reserve(&mut self, bytes: u64, capacity: u64) -> Option<u64> {
        let bytes = bytes.max(1).checked_next_multiple_of(ALIGN)?;
        if bytes > capacity {
            return None;
        }
        let start = match (self.live.front(), self.live.back()) {
            (None, _) | (_, None) => 0,
            (Some(&(first, ..)), Some(&(last, len, _))) => {
                let head = last + len;
                if last >= first {
                    // Not wrapped: free are [head, capacity) and [0, first).
                    if capacity - head >= bytes {
                        head
                    } else if first >= bytes {
                        0
                    } else {
                        return None;
                    }
                } else if first - head >= bytes {
                    // Wrapped: free is [head, first).
                    head
                } else {
                    return None;
                }
            }
        };
        self.live.push_back((start, bytes, false));
        self.held += bytes;
        Some(start)
    }

    fn release(&mut self, start: u64) {
        if let Some(entry) = self.live.iter_mut().find(|(s, _, released)| *s == start && !*released) {
            entry.2 = true;
        }
        while let Some(&(_, bytes, true)) = self.live.front() {
            self.live.pop_front();
            self.held -= bytes;
        }
    }
}

/// What a call's scans asked for, in order: what its verdict is judged from. Held inline up
/// to a GEMM's usual count (its operands' copies, alpha and beta, one scan kernel before the
/// call and one after): kept for every deferred call, so a clean one allocates nothing for it.
#[derive(Debug, Default)]
pub struct ScanLog {
    /// Device memory copied to the region: (address, length, offset, after the call).
    pub copies: SmallVec<[(u64, usize, u64, bool); 4]>,
    /// Host memory read at the call: (address, its bytes).
    pub host: SmallVec<[(u64, HostBytes); 3]>,
    /// Scan kernels queued: their jobs (`JobsKey`), the offset of their counts, after the call,
    /// how many jobs.
    pub scans: SmallVec<[(JobsKey, u64, bool, usize); 2]>,
    /// The call's block of the region, to release once its mark landed.
    pub block: Option<u64>,
}

/// Host bytes a scan read at the call: scalars (at most a complex double) inline.
pub type HostBytes = SmallVec<[u8; 16]>;

/// Which jobs a scan kernel was queued with: the replay asks for the same ones (the same
/// checks, run again), and this tells it found them without keeping each job (64 bytes) for
/// every call in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobsKey(u64);

impl JobsKey {
    /// The jobs' hash (a slice's hash takes its length in too).
    pub fn of(jobs: &[BatchScan]) -> Self {
        use std::hash::BuildHasher;
        Self(foldhash::fast::FixedState::with_seed(0x6375_626c_6173).hash_one(jobs))
    }
}

/// A call waiting for its verdict.
pub struct Pending {
    pub seq: u64,
    pub arena: VerdictArena,
    /// The call's stream: its marks land in call order, so only each stream's oldest waiting
    /// call is looked at.
    pub stream: u64,
    /// The offset of the mark queued after the call's scans (its value is `seq` once landed);
    /// `None`: nothing is in flight (the call's stream was synchronised instead).
    pub mark: Option<u64>,
    pub log: ScanLog,
    /// What the guard needs to judge the call (its description, as at the call).
    pub call: Box<dyn Any + Send>,
}

impl Pending {
    fn landed(&self, mark: &dyn Fn(VerdictArena, u64) -> u64) -> bool {
        self.mark.is_none_or(|offset| mark(self.arena, offset) == self.seq)
    }
}

/// The calls waiting on one stream of one context, in call order.
struct StreamQueue {
    context: u64,
    stream: u64,
    calls: VecDeque<Pending>,
}

/// The calls one harvest takes: the one or two a host that keeps pace with its device finds,
/// inline.
pub type Landed = SmallVec<[Pending; 2]>;

/// An emptied stream's queue is kept with room for this many calls (a steady program then
/// queues and harvests without allocating); one a burst grew gives the rest back.
const IDLE_QUEUE_CALLS: usize = 16;

/// Streams whose queues are kept while empty; past them (a program that makes and destroys
/// streams), empty ones are forgotten.
const IDLE_QUEUES: usize = 8;

fn forget_idle_queues(queues: &mut Vec<StreamQueue>) {
    for q in queues.iter_mut().filter(|q| q.calls.is_empty()) {
        q.calls.shrink_to(IDLE_QUEUE_CALLS);
    }
    if queues.len() > IDLE_QUEUES {
        queues.retain(|q| !q.calls.is_empty());
    }
}

/// The heap a waiting call's verdict takes, at most, besides what its scan log holds past its
/// inline room (its description, facts and Python frames, and its queue slot with the log's
/// inline entries; `guard::verdicts` checks its size against this).
pub const VERDICT_HEAP_BYTES: u64 = 5120;

/// Calls waiting at once (about 5 MiB of heap) past which the heap is handed back once they
/// have all been judged: a host that ran far ahead of the device leaves the allocator holding
/// free pages it would otherwise keep for the rest of the run.
pub const BACKLOG_VERDICTS: usize = 1024;

/// How many calls may wait for their verdicts at once in a staging region of `capacity`
/// bytes: their heap is then at most twice the region (a host far ahead of the device fills
/// the count before the region: a device-scanned GEMM reserves about 200 bytes of it). A call
/// past it is judged at the call, as one the region has no room for.
pub fn max_waiting(capacity: u64) -> usize {
    (capacity.saturating_mul(2) / VERDICT_HEAP_BYTES).clamp(64, usize::MAX as u64) as usize
}

/// The regions' rings and the calls waiting for a verdict.
#[derive(Default)]
pub struct Verdicts {
    rings: Mutex<Vec<(u64, Ring)>>,
    /// The bytes held in every region, for `crowded` to read without the lock.
    held: AtomicU64,
    /// The calls waiting, one queue per (context, stream), oldest first.
    pending: Mutex<Vec<StreamQueue>>,
    waiting: AtomicUsize,
    /// Taken by a harvest and not yet judged.
    judging: AtomicUsize,
    /// Calls judged so far: the crash writer waits while this moves.
    judged: AtomicU64,
    deferred: AtomicU64,
    /// Calls whose scans found no room in the region, judged at the call instead.
    judged_at_call: AtomicU64,
    /// Operands left unscanned for want of room (what the need of a call did not foresee).
    skipped: AtomicU64,
    /// Streams whose work had not finished when exit stopped waiting for it.
    unfinished_at_exit: AtomicU64,
    /// The most calls that waited at once.
    most_waiting: AtomicUsize,
    /// More than `BACKLOG_VERDICTS` waited at once since the heap was last handed back.
    backlog: AtomicBool,
    /// Held from taking landed calls to publishing their verdicts: with two harvesters (the
    /// program's thread and the guard's) each taking a batch, the later batch's faults were
    /// now and then published first, and a NaN passed on was said before the one it came from.
    turn: Mutex<()>,
}

impl Verdicts {
    /// The turn to take landed calls and judge them, in the order they are taken. Judging a
    /// batch takes microseconds a verdict; no lock of the guard's is taken while it is held
    /// that is not also taken without it.
    pub fn judging_turn(&self) -> std::sync::MutexGuard<'_, ()> {
        self.turn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A call's block of `arena`'s region of `capacity` bytes (CUBLASGUARD_STAGING_BYTES): the
    /// `need` bytes its mark and scans may take (the scan kernel's counts take 24 bytes an
    /// operand, the host scan's copies the operand's bytes), in one reservation the call hands
    /// out itself; one lock for it, none per read. `Err(NoRoom)`: the region cannot hold them
    /// now, or more verdicts wait than the heap's ceiling allows; the call is to be judged at
    /// the call.
    pub fn reserve_block(&self, arena: VerdictArena, need: u64, capacity: u64) -> Result<u64, NoRoom> {
        if self.waiting.load(Ordering::Acquire) >= max_waiting(capacity) {
            return Err(NoRoom);
        }
        let mut rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
        let index = match rings.iter().position(|(c, _)| *c == arena.context) {
            Some(i) => i,
            None => {
                rings.push((arena.context, Ring::default()));
                rings.len() - 1
            }
        };
        let offset = rings[index].1.reserve(need, capacity);
        self.held.store(rings.iter().map(|(_, r)| r.held).sum(), Ordering::Relaxed);
        offset.ok_or(NoRoom)
    }

    /// Gives back what a judged (or abandoned) call held.
    pub fn release(&self, arena: VerdictArena, log: &ScanLog) {
        let mut rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, ring)) = rings.iter_mut().find(|(c, _)| *c == arena.context) {
            log.block.into_iter().for_each(|start| ring.release(start));
        }
        self.held.store(rings.iter().map(|(_, r)| r.held).sum(), Ordering::Relaxed);
    }

    /// A call whose verdict waits for its mark.
    pub fn add(&self, pending: Pending) {
        self.deferred.fetch_add(1, Ordering::Relaxed);
        let mut queues = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let (context, stream) = (pending.arena.context, pending.stream);
        match queues.iter_mut().find(|q| q.context == context && q.stream == stream) {
            Some(q) => q.calls.push_back(pending),
            None => {
                let mut calls = VecDeque::with_capacity(IDLE_QUEUE_CALLS);
                calls.push_back(pending);
                queues.push(StreamQueue { context, stream, calls });
            }
        }
        let now = self.waiting.fetch_add(1, Ordering::Release) + 1;
        self.most_waiting.fetch_max(now, Ordering::Relaxed);
        if now == BACKLOG_VERDICTS {
            self.backlog.store(true, Ordering::Relaxed);
        }
    }

    /// Whether the queue has drained since more than `BACKLOG_VERDICTS` waited at once: the heap
    /// their verdicts took is free now, for the guard's thread to hand back (`malloc_trim`), once.
    pub fn drained_after_backlog(&self) -> bool {
        !self.any_waiting() && self.judging.load(Ordering::Acquire) == 0 && self.backlog.swap(false, Ordering::AcqRel)
    }

    /// Whether any call waits: one atomic load, asked at every hooked call.
    pub fn any_waiting(&self) -> bool {
        self.waiting.load(Ordering::Acquire) > 0
    }

    /// Takes the calls whose mark has landed (all of them: `everything`), oldest first. Only
    /// each stream's oldest calls are looked at: a mark lands after every one queued before it
    /// on its stream.
    pub fn take_landed(&self, mark: &dyn Fn(VerdictArena, u64) -> u64, everything: bool) -> Landed {
        let mut queues = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let mut landed = Landed::new();
        for q in queues.iter_mut() {
            while q.calls.front().is_some_and(|p| everything || p.landed(mark)) {
                landed.extend(q.calls.pop_front());
            }
        }
        forget_idle_queues(&mut queues);
        // Counted as being judged before they stop counting as waiting: `unsettled` never sees
        // a moment with neither.
        self.judging.fetch_add(landed.len(), Ordering::AcqRel);
        self.waiting.fetch_sub(landed.len(), Ordering::AcqRel);
        landed.sort_by_key(|p| p.seq);
        landed
    }

    /// Takes call `seq`'s waiting verdict, landed or not: a kernel fault pinned on the call
    /// (breadcrumbs) is told with the description kept for its verdict. Counted as being
    /// judged; the caller releases its block and calls `judged`.
    pub fn take_call(&self, seq: u64) -> Option<Pending> {
        let mut queues = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let (q, at) = queues.iter().enumerate().find_map(|(q, queue)| queue.calls.iter().position(|p| p.seq == seq).map(|at| (q, at)))?;
        let taken = queues[q].calls.remove(at)?;
        forget_idle_queues(&mut queues);
        self.judging.fetch_add(1, Ordering::AcqRel);
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        Some(taken)
    }

    /// What `look` makes of call `seq`'s waiting verdict, left waiting; `None` when none waits.
    pub fn with_waiting<T>(&self, seq: u64, look: impl FnOnce(&Pending) -> T) -> Option<T> {
        let queues = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        queues.iter().flat_map(|q| q.calls.iter()).find(|p| p.seq == seq).map(look)
    }

    /// A call taken by `take_landed` has been judged (its fault, if any, published).
    pub fn judged(&self) {
        self.judged.fetch_add(1, Ordering::AcqRel);
        self.judging.fetch_sub(1, Ordering::AcqRel);
    }

    /// How many calls have been judged (lock-free, for the crash writer).
    pub fn judged_count(&self) -> u64 {
        self.judged.load(Ordering::Acquire)
    }

    /// Whether any call waits or is being judged: what the crash writer gives a moment to.
    pub fn unsettled(&self) -> bool {
        self.waiting.load(Ordering::Acquire) > 0 || self.judging.load(Ordering::Acquire) > 0
    }

    /// (calls whose verdict was deferred, calls judged at the call for want of room in the
    /// region, operands not scanned for want of room, calls still waiting).
    pub fn counts(&self) -> (u64, u64, u64, u64) {
        (
            self.deferred.load(Ordering::Relaxed),
            self.judged_at_call.load(Ordering::Relaxed),
            self.skipped.load(Ordering::Relaxed),
            self.waiting.load(Ordering::Relaxed) as u64,
        )
    }

    /// The most calls that waited for their verdicts at once.
    pub fn most_waiting(&self) -> u64 {
        self.most_waiting.load(Ordering::Relaxed) as u64
    }

    /// Streams whose work had not finished when exit stopped waiting for it.
    pub fn note_unfinished_at_exit(&self, streams: u64) {
        self.unfinished_at_exit.fetch_add(streams, Ordering::Relaxed);
    }

    pub fn unfinished_at_exit(&self) -> u64 {
        self.unfinished_at_exit.load(Ordering::Relaxed)
    }

    /// The streams of the calls waiting for their verdict.
    pub fn waiting_streams(&self) -> Vec<u64> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner()).iter().filter(|q| !q.calls.is_empty()).map(|q| q.stream).collect()
    }

    /// Operands of a call whose scans found no room after the call ran (not scanned, counted).
    pub fn note_skipped(&self, operands: u64) {
        self.skipped.fetch_add(operands, Ordering::Relaxed);
    }

    /// A call whose scans found no room: judged at the call, as under `gemm`.
    pub fn note_judged_at_call(&self) {
        self.judged_at_call.fetch_add(1, Ordering::Relaxed);
    }

    /// Whether more than half of a region of `capacity` bytes is held, or half as many calls
    /// wait as may: the calls holding it are judged (those whose scans landed) before another
    /// call reserves more.
    pub fn crowded(&self, capacity: u64) -> bool {
        self.held.load(Ordering::Relaxed) > capacity / 2 || self.waiting.load(Ordering::Relaxed) >= max_waiting(capacity) / 2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_hands_out_aligned_bytes_in_order_and_takes_them_back_in_any_order() {
        let mut ring = Ring::default();
        assert_eq!(ring.reserve(10, 64), Some(0));
        assert_eq!(ring.reserve(16, 64), Some(16));
        assert_eq!(ring.reserve(32, 64), Some(32));
        assert_eq!(ring.reserve(1, 64), None, "full");
        ring.release(16);
        assert_eq!(ring.reserve(16, 64), None, "the oldest is still held, so nothing is free before it");
        ring.release(0);
        assert_eq!(ring.reserve(32, 64), Some(0), "the first two are free again: wraps to the start");
        assert_eq!(ring.reserve(1, 64), None);
        ring.release(32);
        assert_eq!(ring.reserve(16, 64), Some(32), "after the newest");
        assert_eq!(ring.reserve(16, 64), Some(48));
        assert_eq!(ring.reserve(1, 64), None, "full to the byte");
        assert_eq!(ring.reserve(65, 64), None, "larger than the region");
    }

    #[test]
    fn a_block_that_does_not_fit_after_the_newest_starts_again_at_the_front() {
        let mut ring = Ring::default();
        assert_eq!((ring.reserve(16, 64), ring.reserve(16, 64)), (Some(0), Some(16)));
        ring.release(0);
        assert_eq!(ring.held, 16, "16 free at the front, 32 after the newest");
        assert_eq!(ring.reserve(48, 64), None, "neither holds 48");
        assert_eq!(ring.reserve(32, 64), Some(32));
        assert_eq!(ring.reserve(16, 64), Some(0), "only the front is left");
        assert_eq!(ring.reserve(16, 64), None);
        ring.release(16);
        ring.release(32);
        ring.release(0);
        assert_eq!((ring.reserve(64, 64), ring.held), (Some(0), 64), "all free again");
    }

    #[test]
    fn a_calls_block_is_reserved_whole_or_not_at_all() {
        let v = Verdicts::default();
        let arena = VerdictArena { context: 1 };
        assert_eq!(v.reserve_block(arena, 40, 64), Ok(0), "40 bytes, aligned to 48");
        assert_eq!(v.reserve_block(arena, 24, 64), Err(NoRoom), "32 do not fit in the 16 left");
        assert_eq!(v.reserve_block(arena, 16, 64), Ok(48));
        let log = ScanLog { block: Some(0), ..ScanLog::default() };
        v.release(arena, &log);
        assert_eq!(v.reserve_block(arena, 48, 64), Ok(0), "the first block is free again");
    }

    #[test]
    fn calls_are_taken_when_their_mark_landed_oldest_first() {
        let v = Verdicts::default();
        let arena = VerdictArena { context: 1 };
        // Stream 5: calls 1 and 4; stream 6: calls 2 (synchronised: nothing in flight) and 3.
        for (seq, stream, mark) in [(1, 5, Some(8)), (2, 6, None), (3, 6, Some(0)), (4, 5, Some(16))] {
            v.add(Pending { seq, arena, stream, mark, log: ScanLog::default(), call: Box::new(()) });
        }
        assert!(v.any_waiting());
        // The marks at 8 and 16 have their calls' numbers; the one at 0 has not landed.
        let landed = |_: VerdictArena, offset: u64| match offset {
            8 => 1,
            16 => 4,
            _ => 0,
        };
        let taken = v.take_landed(&landed, false);
        assert_eq!(taken.iter().map(|p| p.seq).collect::<Vec<_>>(), [1, 2, 4], "oldest first, across streams");
        assert_eq!(v.counts(), (4, 0, 0, 1));
        assert!(v.unsettled(), "three being judged");
        taken.iter().for_each(|_| v.judged());
        let rest = v.take_landed(&|_, _| 0, true);
        assert_eq!(rest.iter().map(|p| p.seq).collect::<Vec<_>>(), [3]);
        assert!(!v.any_waiting());
    }

    #[test]
    fn a_call_is_taken_by_its_number_whether_or_not_its_mark_landed() {
        let v = Verdicts::default();
        let arena = VerdictArena { context: 1 };
        for seq in [1, 2, 3] {
            v.add(Pending { seq, arena, stream: 5, mark: Some(8 * seq), log: ScanLog::default(), call: Box::new(()) });
        }
        assert_eq!(v.take_call(2).map(|p| p.seq), Some(2));
        assert!(v.take_call(2).is_none(), "taken once");
        assert_eq!(v.counts().3, 2, "the others still wait");
        assert!(v.unsettled());
        v.judged();
        assert_eq!(v.take_landed(&|_, _| 0, true).iter().map(|p| p.seq).collect::<Vec<_>>(), [1, 3]);
    }

    #[test]
    fn the_heap_is_handed_back_once_after_a_backlog_drains_and_not_after_a_few_calls() {
        let v = Verdicts::default();
        for seq in 1..=10 {
            waiting_on(&v, seq, 5);
        }
        let _ = v.take_landed(&|_, _| 0, true);
        (1..=10).for_each(|_| v.judged());
        assert!(!v.drained_after_backlog(), "ten calls are no backlog");
        for seq in 1..=BACKLOG_VERDICTS as u64 {
            waiting_on(&v, seq, 5);
        }
        assert!(!v.drained_after_backlog(), "not while they wait");
        let landed = v.take_landed(&|_, _| 0, true);
        assert!(!v.drained_after_backlog(), "not while they are judged");
        landed.iter().for_each(|_| v.judged());
        assert!(v.drained_after_backlog());
        assert!(!v.drained_after_backlog(), "once");
    }

    fn waiting_on(v: &Verdicts, seq: u64, stream: u64) {
        v.add(Pending { seq, arena: VerdictArena { context: 1 }, stream, mark: None, log: ScanLog::default(), call: Box::new(()) });
    }

    fn queue_room(v: &Verdicts, stream: u64) -> Option<usize> {
        v.pending.lock().unwrap_or_else(|e| e.into_inner()).iter().find(|q| q.stream == stream).map(|q| q.calls.capacity())
    }

    #[test]
    fn an_emptied_streams_queue_keeps_room_for_the_next_calls_and_gives_back_what_a_burst_grew() {
        let v = Verdicts::default();
        waiting_on(&v, 1, 5);
        v.take_landed(&|_, _| 0, true);
        let room = queue_room(&v, 5).expect("an emptied queue is kept");
        assert!(room >= IDLE_QUEUE_CALLS, "{room}");
        assert!(v.waiting_streams().is_empty(), "a kept queue holds no call");
        // A host far ahead of its device: a thousand calls wait, then all land.
        (2..1002).for_each(|seq| waiting_on(&v, seq, 5));
        assert!(queue_room(&v, 5).is_some_and(|room| room >= 1000));
        assert_eq!(v.waiting_streams(), [5]);
        assert_eq!(v.take_landed(&|_, _| 0, true).len(), 1000);
        assert!(queue_room(&v, 5).is_some_and(|room| (IDLE_QUEUE_CALLS..1000).contains(&room)), "{:?}", queue_room(&v, 5));
    }

    #[test]
    fn past_eight_streams_the_empty_queues_are_forgotten() {
        let v = Verdicts::default();
        (0..IDLE_QUEUES as u64).for_each(|stream| waiting_on(&v, stream + 1, stream));
        v.take_landed(&|_, _| 0, true);
        assert_eq!(v.pending.lock().unwrap_or_else(|e| e.into_inner()).len(), IDLE_QUEUES, "kept while they are few");
        // A program that makes a stream per request: its old streams' queues are not kept.
        waiting_on(&v, 100, 100);
        waiting_on(&v, 101, 0);
        v.take_call(100);
        let streams: Vec<u64> = v.pending.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|q| q.stream).collect();
        assert_eq!(streams, [0], "only the stream with a call waiting");
    }

    #[test]
    fn a_scan_kernels_jobs_are_told_apart_by_their_key() {
        let job = BatchScan {
            addr: 0x1000,
            shape: crate::validate::StoredShape { rows: 2, cols: 2, ld: 2 },
            dtype: crate::scan::DType::F32,
            members: 1,
            stride: 0,
            array: false,
        };
        let other = BatchScan { addr: 0x2000, ..job };
        assert_eq!(JobsKey::of(&[job, other]), JobsKey::of(&[job, other]), "the same checks, run again");
        assert_ne!(JobsKey::of(&[job, other]), JobsKey::of(&[other, job]), "in order");
        assert_ne!(JobsKey::of(&[job]), JobsKey::of(&[job, other]));
        assert_ne!(JobsKey::of(&[job]), JobsKey::of(&[BatchScan { members: 2, ..job }]));
    }
}
