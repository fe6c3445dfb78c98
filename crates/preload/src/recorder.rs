//! The flight recorder: a fixed ring of the most recent intercepted calls that takes no lock.
//! Each slot is a sequence lock over plain atomic words: a writer marks the slot odd, stores the
//! call, marks it even; a reader keeps what it read only when the mark did not move meanwhile.
//! So recording costs a few stores, and a signal handler reads the ring without waiting for a
//! thread that may have crashed in the middle of writing it.
//!
//! A call's arguments are rendered in one place, `CallArgs::visit`, for both the trace (serde)
//! and the signal-safe crash writer (which cannot allocate).

#![forbid(unsafe_code)]

use std::sync::atomic::{fence, AtomicU64, Ordering};

use crate::trace::{Arg, Args};

/// The arguments worth keeping for a call, in a fixed-size form.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallArgs {
    None,
    Gemm {
        transa: i32,
        transb: i32,
        m: i64,
        n: i64,
        k: i64,
        lda: i64,
        ldb: i64,
        ldc: i64,
    },
    Size {
        size: u64,
        stream: Option<u64>,
    },
    Pointer {
        ptr: u64,
        stream: Option<u64>,
    },
    Handle {
        handle: u64,
        value: i64,
    },
    /// A kernel launch: the host stub the program passed, its configuration and stream, and
    /// which launch of that function it was since the session started (1 for the first; 0:
    /// not counted).
    Launch {
        func: u64,
        grid: [u32; 3],
        block: [u32; 3],
        shared: u64,
        stream: u64,
        ordinal: u64,
    },
    /// A call whose hook table line is `declared` (hook_args.rs): its `int` arguments, named by
    /// the table (`HOOK_ARGS`), at most 12. `positions`: which of the line's arguments they
    /// are, one bit each, in order.
    Declared {
        hook: u16,
        positions: u32,
        values: [i32; 12],
    },
    /// `cublasSetWorkspace`: the handle's workspace.
    Workspace {
        handle: u64,
        ptr: u64,
        bytes: u64,
    },
    /// A range of addresses (`cuMemMap`, `cuMemUnmap`).
    Range {
        ptr: u64,
        size: u64,
    },
    /// What a synchronisation waits for: a stream, or an event.
    Stream {
        stream: u64,
    },
    Event {
        event: u64,
    },
    /// A graph launch (cudaGraphLaunch, cuGraphLaunch): the executable graph and the stream.
    Graph {
        exec: u64,
        stream: u64,
    },
    /// A cuDNN call on a handle: the handle, the stream it works on (cudnnSetStream's), and
    /// for cudnnBackendExecute the execution plan and the variant pack (0: none).
    Cudnn {
        handle: u64,
        stream: u64,
        plan: u64,
        pack: u64,
    },
}

/// One argument's value, as both renderers need it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgValue {
    Int(i64),
    /// A pointer, handle or stream: rendered as a hex string.
    Address(u64),
    /// A `cublasOperation_t`: rendered as N, T, C or unknown(v).
    Operation(i32),
    /// Another cuBLAS enum: rendered as `labels[raw]`, or unknown(v).
    Label {
        raw: i32,
        labels: &'static [&'static str],
    },
    /// A `dim3`: rendered as `[x, y, z]`.
    Dim3([u32; 3]),
}

impl ArgValue {
    /// The operation's label without allocating (`None`: an unknown value).
    pub fn operation_label(raw: i32) -> Option<&'static str> {
        match raw {
            0 => Some("N"),
            1 => Some("T"),
            2 => Some("C"),
            _ => None,
        }
    }

    /// The argument as the trace holds it (the crash writer renders the same JSON).
    pub fn to_arg(self) -> Arg {
        match self {
            Self::Int(v) => Arg::Int(v),
            Self::Address(v) => Arg::Address(v),
            Self::Operation(v) => Arg::Label(crate::cuda::Operation::decode(v).label()),
            Self::Label { raw, labels } => match Self::label(raw, labels) {
                Some(label) => Arg::Label(label.into()),
                None => Arg::Label(format!("unknown({raw})")),
            },
            Self::Dim3(v) => Arg::Dim3(v),
        }
    }

    /// An enum value's label without allocating (`None`: an unknown value).
    pub fn label(raw: i32, labels: &'static [&'static str]) -> Option<&'static str> {
        usize::try_from(raw).ok().and_then(|i| labels.get(i)).copied()
    }
}

impl CallArgs {
    /// Each argument by its name in NVIDIA's headers, in a fixed order.
    pub fn visit(&self, mut f: impl FnMut(&'static str, ArgValue)) {
        match *self {
            Self::None => {}
            Self::Gemm { transa, transb, m, n, k, lda, ldb, ldc } => {
                f("transa", ArgValue::Operation(transa));
                f("transb", ArgValue::Operation(transb));
                for (name, v) in [("m", m), ("n", n), ("k", k), ("lda", lda), ("ldb", ldb), ("ldc", ldc)] {
                    f(name, ArgValue::Int(v));
                }
            }
            Self::Size { size, stream } => {
                f("size", ArgValue::Int(size.min(i64::MAX as u64) as i64));
                if let Some(s) = stream {
                    f("stream", ArgValue::Address(s));
                }
            }
            Self::Pointer { ptr, stream } => {
                f("ptr", ArgValue::Address(ptr));
                if let Some(s) = stream {
                    f("stream", ArgValue::Address(s));
                }
            }
            Self::Handle { handle, value } => {
                f("handle", ArgValue::Address(handle));
                f("value", ArgValue::Int(value));
            }
            Self::Launch { func, grid, block, shared, stream, ordinal } => {
                f("func", ArgValue::Address(func));
                f("gridDim", ArgValue::Dim3(grid));
                f("blockDim", ArgValue::Dim3(block));
                f("sharedMem", ArgValue::Int(shared.min(i64::MAX as u64) as i64));
                f("stream", ArgValue::Address(stream));
                if ordinal > 0 {
                    f("launch", ArgValue::Int(ordinal.min(i64::MAX as u64) as i64));
                }
            }
            Self::Declared { hook, positions, values } => {
                let names = crate::hook_list::HOOK_ARGS.get(usize::from(hook)).copied().unwrap_or(&[]);
                let recorded = names.iter().enumerate().filter(|(at, _)| *at < 32 && positions >> at & 1 != 0);
                for ((_, &name), &raw) in recorded.zip(values.iter()) {
                    match crate::hook_args::enum_labels(name) {
                        Some(labels) => f(name, ArgValue::Label { raw, labels }),
                        None => f(name, ArgValue::Int(raw.into())),
                    }
                }
            }
            Self::Range { ptr, size } => {
                f("ptr", ArgValue::Address(ptr));
                f("size", ArgValue::Int(size.min(i64::MAX as u64) as i64));
            }
            Self::Stream { stream } => f("stream", ArgValue::Address(stream)),
            Self::Event { event } => f("event", ArgValue::Address(event)),
            Self::Graph { exec, stream } => {
                f("graphExec", ArgValue::Address(exec));
                f("stream", ArgValue::Address(stream));
            }
            Self::Cudnn { handle, stream, plan, pack } => {
                f("handle", ArgValue::Address(handle));
                f("stream", ArgValue::Address(stream));
                if plan != 0 {
                    f("executionPlan", ArgValue::Address(plan));
                }
                if pack != 0 {
                    f("variantPack", ArgValue::Address(pack));
                }
            }
            Self::Workspace { handle, ptr, bytes } => {
                f("handle", ArgValue::Address(handle));
                f("workspace", ArgValue::Address(ptr));
                f("workspaceSizeInBytes", ArgValue::Int(bytes.min(i64::MAX as u64) as i64));
            }
        }
    }

    /// A declared call's `int` arguments that are not enums, in order (its dimensions first,
    /// for the call sites that sampling counts by); nothing for another form.
    pub fn visit_ints_but_enums(&self) -> impl Iterator<Item = i32> {
        let mut ints = [0; 12];
        let mut n = 0;
        if let Self::Declared { .. } = self {
            self.visit(|_, value| {
                if let (ArgValue::Int(v), Some(slot)) = (value, ints.get_mut(n)) {
                    *slot = v as i32;
                    n += 1;
                }
            });
        }
        ints.into_iter().take(n)
    }

    /// The arguments as the trace holds them, for a recent call and a fault alike.
    pub fn to_args(self) -> Args {
        let mut args = Args::default();
        self.visit(|name, value| args.insert(name, value.to_arg()));
        args
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordedCall {
    pub seq: u64,
    /// The hooked function, by its index in the hook table.
    pub hook: u16,
    pub status: i32,
    /// When the call returned.
    pub time_ns: u64,
    /// How long it ran, from the hook's entry to its return (the guard's checks included).
    pub duration_ns: u64,
    pub thread: u32,
    pub args: CallArgs,
    /// The call's operands were scanned for NaN/Inf.
    pub scanned: bool,
    /// The call's stream was capturing a CUDA graph: the call was recorded into the graph.
    pub captured: bool,
}

/// Words per recorded call (the slot's mark aside).
const WORDS: usize = 12;

impl RecordedCall {
    /// Inlined into `record`, so a known form's words are computed in place of being built
    /// in an array first.
    #[inline(always)]
    fn encode(&self) -> [u64; WORDS] {
        let mut w = [0u64; WORDS];
        w[0] = self.seq;
        w[1] = self.time_ns;
        w[2] = (self.status as u32 as u64) | (self.thread as u64) << 32;
        let (tag, payload): (u64, [u64; 7]) = match self.args {
            CallArgs::None => (0, [0; 7]),
            CallArgs::Gemm { transa, transb, m, n, k, lda, ldb, ldc } => {
                (1, [transa as u32 as u64 | (transb as u32 as u64) << 32, m as u64, n as u64, k as u64, lda as u64, ldb as u64, ldc as u64])
            }
            CallArgs::Size { size, stream } => (2 | (stream.is_some() as u64) << 4, [size, stream.unwrap_or(0), 0, 0, 0, 0, 0]),
            CallArgs::Pointer { ptr, stream } => (3 | (stream.is_some() as u64) << 4, [ptr, stream.unwrap_or(0), 0, 0, 0, 0, 0]),
            CallArgs::Handle { handle, value } => (4, [handle, value as u64, 0, 0, 0, 0, 0]),
            CallArgs::Launch { func, grid, block, shared, stream, ordinal } => (
                5,
                [
                    func,
                    grid[0] as u64 | (grid[1] as u64) << 32,
                    grid[2] as u64 | (block[0] as u64) << 32,
                    block[1] as u64 | (block[2] as u64) << 32,
                    shared,
                    stream,
                    ordinal,
                ],
            ),
            CallArgs::Declared { hook, positions, values } => (13, paired(&values, u64::from(hook) | u64::from(positions) << 16)),
            CallArgs::Workspace { handle, ptr, bytes } => (7, [handle, ptr, bytes, 0, 0, 0, 0]),
            CallArgs::Range { ptr, size } => (8, [ptr, size, 0, 0, 0, 0, 0]),
            CallArgs::Stream { stream } => (9, [stream, 0, 0, 0, 0, 0, 0]),
            CallArgs::Event { event } => (10, [event, 0, 0, 0, 0, 0, 0]),
            CallArgs::Graph { exec, stream } => (11, [exec, stream, 0, 0, 0, 0, 0]),
            CallArgs::Cudnn { handle, stream, plan, pack } => (12, [handle, stream, plan, pack, 0, 0, 0]),
        };
        w[3] = self.hook as u64 | tag << 16 | (self.scanned as u64) << 32 | (self.captured as u64) << 33;
        w[4..11].copy_from_slice(&payload);
        w[11] = self.duration_ns;
        w
    }

    fn decode(w: &[u64; WORDS]) -> Option<Self> {
        if w[0] == 0 {
            return None; // an empty slot (sequence numbers start at 1)
        }
        let tag = (w[3] >> 16) & 0xffff;
        let has_stream = tag & 0x10 != 0;
        let stream = |v: u64| has_stream.then_some(v);
        let args = match tag & 0xf {
            0 => CallArgs::None,
            1 => CallArgs::Gemm {
                transa: w[4] as u32 as i32,
                transb: (w[4] >> 32) as u32 as i32,
                m: w[5] as i64,
                n: w[6] as i64,
                k: w[7] as i64,
                lda: w[8] as i64,
                ldb: w[9] as i64,
                ldc: w[10] as i64,
            },
            2 => CallArgs::Size { size: w[4], stream: stream(w[5]) },
            3 => CallArgs::Pointer { ptr: w[4], stream: stream(w[5]) },
            4 => CallArgs::Handle { handle: w[4], value: w[5] as i64 },
            5 => CallArgs::Launch {
                func: w[4],
                grid: [w[5] as u32, (w[5] >> 32) as u32, w[6] as u32],
                block: [(w[6] >> 32) as u32, w[7] as u32, (w[7] >> 32) as u32],
                shared: w[8],
                stream: w[9],
                ordinal: w[10],
            },
            7 => CallArgs::Workspace { handle: w[4], ptr: w[5], bytes: w[6] },
            8 => CallArgs::Range { ptr: w[4], size: w[5] },
            9 => CallArgs::Stream { stream: w[4] },
            10 => CallArgs::Event { event: w[4] },
            11 => CallArgs::Graph { exec: w[4], stream: w[5] },
            12 => CallArgs::Cudnn { handle: w[4], stream: w[5], plan: w[6], pack: w[7] },
            13 => CallArgs::Declared { hook: w[10] as u16, positions: (w[10] >> 16) as u32, values: unpaired(&w[4..10]) },
            _ => return None,
        };
        Some(Self {
            seq: w[0],
            hook: (w[3] & 0xffff) as u16,
            status: w[2] as u32 as i32,
            time_ns: w[1],
            duration_ns: w[11],
            thread: (w[2] >> 32) as u32,
            args,
            scanned: (w[3] >> 32) & 1 != 0,
            captured: (w[3] >> 33) & 1 != 0,
        })
    }
}

/// Twelve `int`s two to a word, and `last` in the seventh word.
fn paired(v: &[i32; 12], last: u64) -> [u64; 7] {
    let mut w = [0; 7];
    for (word, pair) in w.iter_mut().zip(v.chunks_exact(2)) {
        *word = pair[0] as u32 as u64 | (pair[1] as u32 as u64) << 32;
    }
    w[6] = last;
    w
}

/// `paired`'s twelve `int`s back from its first six words.
fn unpaired(words: &[u64]) -> [i32; 12] {
    let mut v = [0; 12];
    for (pair, word) in v.chunks_exact_mut(2).zip(words) {
        pair[0] = *word as u32 as i32;
        pair[1] = (*word >> 32) as u32 as i32;
    }
    v
}

struct Slot {
    /// Even: stable; odd: a writer is storing. Bumped by 2 per write (odd, then even).
    mark: AtomicU64,
    words: [AtomicU64; WORDS],
}

impl Slot {
    fn new() -> Self {
        Self { mark: AtomicU64::new(0), words: std::array::from_fn(|_| AtomicU64::new(0)) }
    }

    /// The slot's call, if a consistent copy could be read within `tries` attempts.
    fn read(&self, tries: u32) -> Result<Option<RecordedCall>, ()> {
        for _ in 0..tries {
            let before = self.mark.load(Ordering::Acquire);
            if before & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let words: [u64; WORDS] = std::array::from_fn(|i| self.words[i].load(Ordering::Relaxed));
            fence(Ordering::Acquire);
            if self.mark.load(Ordering::Relaxed) == before {
                return Ok(RecordedCall::decode(&words));
            }
        }
        Err(())
    }
}

pub struct Recorder {
    slots: Box<[Slot]>,
    next: AtomicU64,
    /// The slot count less one when it is a power of two (the default 256): a slot is then
    /// taken by a mask, not a division. Every bit otherwise (`slot_by_division`).
    mask: u64,
}

/// A reader gives up on a slot that keeps changing after this many attempts (the crash handler
/// must not wait on a writer that will never finish).
const READ_TRIES: u32 = 64;

impl Recorder {
    pub fn new(capacity: usize) -> Self {
        let mask = if capacity.is_power_of_two() { capacity as u64 - 1 } else { u64::MAX };
        Self { slots: (0..capacity).map(|_| Slot::new()).collect(), next: AtomicU64::new(0), mask }
    }

    /// Inlined: a caller that knows its call's form has it encoded as stores of its words,
    /// without the other forms' branches (the hook layer's lean path).
    #[inline(always)]
    pub fn record(&self, call: &RecordedCall) {
        let next = self.next.fetch_add(1, Ordering::Relaxed);
        let Some(slot) = usize::try_from(next & self.mask).ok().and_then(|i| self.slots.get(i)).or_else(|| self.slot_by_division(next)) else { return };
        // Two writers meet in one slot only when the ring wraps around during a write: the
        // second waits for the first's few stores. The slot is taken by setting the mark's low
        // bit (one instruction on x86, `lock bts`, where a load and a compare-exchange were two
        // and a loop); a mark already odd is left as it is, and once the bit is this writer's
        // the mark is its own to read.
        while slot.mark.fetch_or(1, Ordering::Acquire) & 1 == 1 {
            std::hint::spin_loop();
        }
        let mark = slot.mark.load(Ordering::Relaxed);
        fence(Ordering::Release);
        for (word, value) in slot.words.iter().zip(call.encode()) {
            word.store(value, Ordering::Relaxed);
        }
        slot.mark.store(mark + 1, Ordering::Release);
    }

    /// `record`'s slot for call `next` when the ring is not a power of two (its mask keeps every
    /// bit, so only the first lap finds its slot by the mask); `None`: no slot at all (a zero
    /// capacity), nothing is kept.
    #[cold]
    #[inline(never)]
    fn slot_by_division(&self, next: u64) -> Option<&Slot> {
        let i = next.checked_rem(self.slots.len() as u64)?;
        self.slots.get(i as usize)
    }

    /// Visits the recorded calls, unordered, without locks or allocation (for a signal
    /// handler). Returns false when a slot could not be read consistently (it was skipped).
    pub fn visit(&self, mut f: impl FnMut(&RecordedCall)) -> bool {
        let mut complete = true;
        for slot in self.slots.iter() {
            match slot.read(READ_TRIES) {
                Ok(Some(call)) => f(&call),
                Ok(None) => {}
                Err(()) => complete = false,
            }
        }
        complete
    }

    /// The recorded calls, oldest first.
    pub fn snapshot(&self) -> Vec<RecordedCall> {
        let mut calls = Vec::with_capacity(self.slots.len());
        self.visit(|c| calls.push(*c));
        calls.sort_by_key(|c| c.seq);
        calls
    }

    /// A recorder of the same size holding the same calls (a forked child's copy).
    pub fn copy(&self) -> Self {
        let copy = Self::new(self.slots.len());
        for call in self.snapshot() {
            copy.record(&call);
        }
        copy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(seq: u64, args: CallArgs) -> RecordedCall {
        RecordedCall {
            seq,
            hook: 3,
            status: -7,
            time_ns: seq * 10,
            duration_ns: seq,
            thread: 42,
            args,
            scanned: seq.is_multiple_of(2),
            captured: seq.is_multiple_of(3),
        }
    }

    #[test]
    fn keeps_the_last_n_in_order() {
        let r = Recorder::new(3);
        for seq in 1..=5 {
            r.record(&call(seq, CallArgs::None));
        }
        let seqs: Vec<u64> = r.snapshot().iter().map(|c| c.seq).collect();
        assert_eq!(seqs, [3, 4, 5]);
        // A power-of-two ring takes its slots by a mask: the same outcome.
        let r = Recorder::new(4);
        for seq in 1..=9 {
            r.record(&call(seq, CallArgs::None));
        }
        let seqs: Vec<u64> = r.snapshot().iter().map(|c| c.seq).collect();
        assert_eq!(seqs, [6, 7, 8, 9]);
    }

    #[test]
    fn zero_capacity_records_nothing() {
        let r = Recorder::new(0);
        r.record(&call(1, CallArgs::None));
        assert!(r.snapshot().is_empty());
    }

    #[test]
    fn every_argument_form_survives_the_ring_unchanged() {
        let forms = [
            CallArgs::None,
            CallArgs::Gemm { transa: 1, transb: 7, m: -1, n: 1 << 40, k: 3, lda: 4, ldb: i64::MAX, ldc: 6 },
            CallArgs::Size { size: u64::MAX, stream: Some(0xdead) },
            CallArgs::Size { size: 4, stream: None },
            CallArgs::Pointer { ptr: 0x7f00_0000_1000, stream: Some(0) },
            CallArgs::Pointer { ptr: 0, stream: None },
            CallArgs::Handle { handle: 0x55, value: -3 },
            CallArgs::Stream { stream: 0x7f00_0000_2000 },
            CallArgs::Event { event: 0x99 },
            CallArgs::Graph { exec: 0x7f00_0000_3000, stream: 0x2 },
            CallArgs::Launch { func: 0x4011a0, grid: [1024, 2, 1], block: [256, 1, 1], shared: 4096, stream: 0x9, ordinal: 412 },
            CallArgs::Workspace { handle: 0x77, ptr: 0x7f00_0000_2000, bytes: u64::MAX },
            CallArgs::Range { ptr: 0x7f00_0020_0000, size: 2 << 20 },
            CallArgs::Cudnn { handle: 0x5a, stream: 0x7, plan: 0x7f00_0000_4000, pack: 0x7f00_0000_5000 },
            CallArgs::Declared { hook: 0xfffe, positions: 0x8000_0003, values: [i32::MIN, -1, 2, 3, 4, 5, 6, 7, 8, 9, 10, i32::MAX] },
        ];
        let r = Recorder::new(forms.len());
        for (i, args) in forms.iter().enumerate() {
            r.record(&call(i as u64 + 1, *args));
        }
        let got: Vec<CallArgs> = r.snapshot().iter().map(|c| c.args).collect();
        assert_eq!(got, forms);
        let first = r.snapshot()[1];
        assert_eq!((first.status, first.thread, first.hook, first.scanned, first.captured), (-7, 42, 3, true, false));
        let third = r.snapshot()[2];
        assert_eq!((third.scanned, third.captured), (false, true), "each flag in its own bit");
    }

    #[test]
    fn a_declared_calls_ints_are_named_by_its_line_in_the_hook_table() {
        // cublasSgemv_v2(handle, trans, m, n, alpha, A, lda, x, incx, beta, y, incy)
        let positions = [1, 2, 3, 6, 8, 11].iter().fold(0, |mask, at| mask | 1 << at);
        let values = [1, 4, 3, 4, 2, -1, 0, 0, 0, 0, 0, 0];
        let map = CallArgs::Declared { hook: crate::Hook::cublasSgemv_v2.index() as u16, positions, values }.to_args();
        assert_eq!(map["trans"], "T");
        let ints: Vec<_> = ["m", "n", "lda", "incx", "incy"].iter().map(|n| map[*n].as_i64()).collect();
        assert_eq!(ints, [4, 3, 4, 2, -1].map(Some));
        assert_eq!(map.len(), 6, "only the recorded arguments: {map:?}");
        let unknown = CallArgs::Declared { hook: u16::MAX, positions, values }.to_args();
        assert!(unknown.is_empty(), "a hook past the table names nothing");
        let gemv = CallArgs::Declared { hook: crate::Hook::cublasSgemv_v2.index() as u16, positions, values };
        assert_eq!(gemv.visit_ints_but_enums().collect::<Vec<_>>(), [4, 3, 4, 2, -1], "its dimensions, trans left out");
    }

    #[test]
    fn a_declared_calls_enums_are_labelled_and_an_unknown_value_said_so() {
        // cublasStrsm_v2(handle, side, uplo, trans, diag, m, n, alpha, A, lda, B, ldb)
        let positions = [1, 2, 3, 4, 5, 6, 9, 11].iter().fold(0, |mask, at| mask | 1 << at);
        let values = [1, 0, 1, 7, 4, 2, 4, 4, 0, 0, 0, 0];
        let map = CallArgs::Declared { hook: crate::Hook::cublasStrsm_v2.index() as u16, positions, values }.to_args();
        assert_eq!((&map["side"], &map["uplo"], &map["trans"], &map["diag"]), (&"right".into(), &"lower".into(), &"T".into(), &"unknown(7)".into()));
        assert_eq!((map["m"].as_i64(), map["ldb"].as_i64()), (Some(4), Some(4)));
        assert_eq!(map.len(), 8, "only the recorded arguments: {map:?}");
    }

    #[test]
    fn concurrent_writers_never_leave_a_torn_record() {
        let r = std::sync::Arc::new(Recorder::new(8));
        let writers: Vec<_> = (0..4u64)
            .map(|t| {
                let r = r.clone();
                std::thread::spawn(move || {
                    for i in 1..=20_000u64 {
                        let v = (t << 32 | i) as i64;
                        r.record(&call(t << 32 | i, CallArgs::Gemm { transa: 0, transb: 1, m: v, n: v, k: v, lda: v, ldb: v, ldc: 1 }));
                    }
                })
            })
            .collect();
        for _ in 0..2000 {
            r.visit(|c| {
                if let CallArgs::Gemm { m, n, k, lda, ldb, .. } = c.args {
                    assert!(m == c.seq as i64 && [n, k, lda, ldb].iter().all(|&x| x == m), "torn: {c:?}");
                }
            });
        }
        for w in writers {
            w.join().unwrap();
        }
        assert_eq!(r.snapshot().len(), 8);
    }

    #[test]
    fn arguments_render_with_the_headers_names() {
        let map = CallArgs::Gemm { transa: 1, transb: 9, m: 2, n: 3, k: 4, lda: 4, ldb: 4, ldc: 2 }.to_args();
        assert_eq!(map["transa"], "T");
        assert_eq!(map["transb"], "unknown(9)");
        assert_eq!(map["ldc"], 2);
        let map = CallArgs::Pointer { ptr: 0x10, stream: Some(0x20) }.to_args();
        assert_eq!((map.address("ptr"), map.address("stream")), (Some(0x10), Some(0x20)));
    }

    #[test]
    fn a_launch_names_its_configuration_as_cuda_launch_kernel_does_and_which_launch_of_it_it_was() {
        let launch = CallArgs::Launch { func: 0x4011a0, grid: [64, 2, 1], block: [256, 1, 1], shared: 4096, stream: 0x9, ordinal: 412 };
        let args = launch.to_args();
        let names: Vec<&str> = args.iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["func", "gridDim", "blockDim", "sharedMem", "stream", "launch"]);
        assert_eq!(
            serde_json::to_value(&args).unwrap(),
            serde_json::json!({"func": "0x4011a0", "gridDim": [64, 2, 1], "blockDim": [256, 1, 1], "sharedMem": 4096, "stream": "0x9", "launch": 412})
        );
        // Not counted (launch checks off, or too many kernels): no ordinal is claimed.
        let uncounted = CallArgs::Launch { func: 0x4011a0, grid: [64, 2, 1], block: [256, 1, 1], shared: 4096, stream: 0x9, ordinal: 0 }.to_args();
        assert!(uncounted.iter().all(|(n, _)| n != "launch"));
    }
}
