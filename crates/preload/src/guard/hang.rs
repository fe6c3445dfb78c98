//! A stream whose guarded work stopped completing (`gpu_hang`): found by the hang watchdog
//! (CUBLASGUARD_HANG_TIMEOUT: `Watch`, the state of its thread, from the breadcrumb words the
//! guard reads anyway) or by an exit that gave up waiting. The fault goes on the stream's first
//! unfinished call, named by its own call site, with the kernels launched on the stream since
//! its last completed call (the last of them is the one most probably stuck: a collective
//! waiting for a peer holds everything queued after it), every followed stream's progress, and
//! the host threads waiting in a CUDA synchronisation. One record per stuck stream: a hang that
//! moves on to a later call, or gains a waiting thread, replaces it.

use super::Call;
use crate::recorder::{CallArgs, RecordedCall};
use crate::session::breadcrumbs::{Issued, Progress};
use crate::trace::{hex, BlockedThread, FaultKind, Hang, Suspect};

/// One followed stream as the watchdog last saw it.
struct Seen {
    context: u64,
    stream: u64,
    landed: u64,
    /// When `landed` last changed, or work was first seen outstanding (ms, the watchdog's clock).
    since_ms: u64,
    /// What was recorded for it: the stuck call and the waiting threads' calls.
    recorded: Option<(u64, Vec<u64>)>,
}

/// The watchdog's own state: when each stream's landed word last moved while work was out.
#[derive(Default)]
pub(crate) struct Watch {
    seen: Vec<Seen>,
    /// Streams whose told hang ended since `take_resolved` was last asked (a slow kernel).
    resolved: Vec<u64>,
}

/// A stream stuck past the timeout, with what to record.
pub(crate) struct Stuck {
    pub progress: Progress,
    pub first: Issued,
    pub stalled_ms: u64,
}

impl Watch {
    /// The streams whose recorded hang ended (their work completed after all) since last asked.
    pub(crate) fn take_resolved(&mut self) -> Vec<u64> {
        std::mem::take(&mut self.resolved)
    }

    /// The streams stuck for at least `timeout_ms` at `now_ms` whose record is due (none yet, or
    /// the stuck call or the waiting threads changed since): each returned once per change.
    pub(crate) fn stuck(&mut self, progress: &[Progress], waiting: &[u64], now_ms: u64, timeout_ms: u64) -> Vec<Stuck> {
        let mut due = Vec::new();
        for p in progress {
            let at = match self.seen.iter().position(|s| s.context == p.context && s.stream == p.stream) {
                Some(at) => at,
                None => {
                    self.seen.push(Seen { context: p.context, stream: p.stream, landed: p.landed, since_ms: now_ms, recorded: None });
                    self.seen.len() - 1
                }
            };
            let seen = &mut self.seen[at];
            if p.unfinished == 0 || seen.landed != p.landed {
                // Idle, or it moved: the clock starts again, and a hang told is over.
                (seen.landed, seen.since_ms) = (p.landed, now_ms);
                if seen.recorded.take().is_some() {
                    self.resolved.push(p.stream);
                }
                continue;
            }
            let stalled_ms = now_ms.saturating_sub(seen.since_ms);
            let Some(first) = p.first_unfinished else { continue };
            if stalled_ms < timeout_ms {
                continue;
            }
            let key = (first.seq, waiting.to_vec());
            if seen.recorded.as_ref() != Some(&key) {
                seen.recorded = Some(key);
                due.push(Stuck { progress: *p, first, stalled_ms });
            }
        }
        due
    }
}

/// Records (or brings up to date) the `gpu_hang` of `stuck`, found by `found_by` ("watchdog",
/// "exit"); `progress`: every followed stream's.
pub(crate) fn record<R: Copy>(call: &Call<'_, R>, stuck: &Stuck, progress: &[Progress], found_by: &str) {
    let s = call.session;
    let (p, first) = (&stuck.progress, stuck.first);
    let api = s.hook_name(first.hook as usize);
    let calls = s.recorder.snapshot();
    let on_stream = |c: &RecordedCall| matches!(c.args, CallArgs::Launch { stream, .. } if stream == p.stream);
    let mut between = super::launch::launches_between(call, p.landed, first.seq, usize::MAX, on_stream);
    // Which launch of its kernel the last one was, counted from the start (0: not counted, as
    // past the table's room: then as far as the recent calls show).
    let func_of = |c: &RecordedCall| match c.args {
        CallArgs::Launch { func, .. } => func,
        _ => 0,
    };
    let ordinal = between.last().map(|(last, ordinal)| match *ordinal {
        0 => {
            let func = calls.iter().find(|c| c.seq == last.seq).map_or(0, func_of);
            calls.iter().filter(|c| on_stream(c) && c.seq <= last.seq && func_of(c) == func).count() as u64
        }
        n => n,
    });
    let kernel = between.last().map(|(last, _)| last.clone());
    let between: Vec<Suspect> = between.drain(..).map(|(suspect, _)| suspect).collect();
    let blocked: Vec<BlockedThread> = s
        .waits
        .waiting()
        .into_iter()
        .map(|w| BlockedThread {
            thread: w.thread,
            seq: w.seq,
            api: s.hook_name(w.hook as usize).to_string(),
            since_ns: w.since_ns,
            backtrace: call.outlet.describe_call_site(&w.site),
            python_stack: call.outlet.describe_python_places(&w.python),
        })
        .collect();
    let stalled_s = stuck.stalled_ms / 1000;
    let mut message = format!(
        "the GPU stopped completing work on stream {}: {} guarded call(s) outstanding and no breadcrumb landed for {stalled_s} s ({}); \
         this call's work never completed",
        hex(p.stream),
        p.unfinished,
        match p.landed {
            0 => "none had landed on it yet".to_string(),
            seq => format!("the last completed call was #{seq}"),
        },
    );
    match &kernel {
        Some(k) => message.push_str(&format!(
            ", queued behind kernel {} (#{}, grid [{}, {}, {}]), launched on the stream before it and most probably the one stuck \
             (a collective waiting for a peer, a kernel spinning on a flag, or a GPU fault)",
            k.kernel, k.seq, k.grid[0], k.grid[1], k.grid[2]
        )),
        None => message.push_str(": no launch before it on the stream is recorded, so this call's own kernel, or work the guard does not see (a memory wait, an unrecorded launch), is stuck"),
    }
    if let Some(w) = blocked.first() {
        message.push_str(&format!("; the host waits in {} #{} (thread {})", w.api, w.seq, w.thread));
        if blocked.len() > 1 {
            message.push_str(&format!(" and {} more thread(s) in CUDA synchronisations", blocked.len() - 1));
        }
    }
    let finding = crate::check::Finding::new(FaultKind::GpuHang, message);
    let recorded = calls.iter().find(|c| c.seq == first.seq).copied();
    let returned = recorded.map_or(0, |c| c.status);
    let status_name = if api.starts_with("cublas") { crate::cuda::cublas_status_name(returned) } else { crate::cuda::cuda_error_name(returned) };
    let mut fault = call.fault(finding, returned, status_name);
    fault.seq = first.seq;
    fault.api = api.to_string();
    fault.backtrace = call.outlet.describe_call_site(&first.site);
    if let Some(c) = recorded {
        fault.thread = c.thread;
        fault.args = c.args.to_args();
    }
    fault.stream = Some(hex(p.stream));
    fault.suspects = between;
    fault.breadcrumbs = super::attribution::evidence(s, progress);
    fault.hang = Some(Hang {
        found_by: found_by.to_string(),
        stalled_s,
        last_landed: (p.landed != 0).then_some(p.landed),
        kernel,
        kernel_ordinal: ordinal,
        blocked_threads: blocked,
        completed_later: false,
    });
    // The stuck call's own Python frames, kept with its verdict if one waits; else the note
    // says why there are none (the watchdog's thread is not the caller).
    let python = super::verdicts::kept_python_stack(s, first.seq)
        .or_else(|| call.caller.python_stack().map(|_| (Vec::new(), Some(STUCK_CALL_FRAMES_NOTE.to_string()), String::new())));
    if let Some((frames, note, thread)) = python {
        fault.python_stack = frames;
        fault.python_stack_note = note;
        fault.thread_name = (!thread.is_empty()).then_some(thread);
    }
    match s.replace_hang(fault.clone()) {
        Some(index) => call.published(index),
        None => call.report_keeping_python(fault),
    }
}

/// Why a stuck call in a Python program has no Python frames.
const STUCK_CALL_FRAMES_NOTE: &str = "the stuck call's Python frames were not kept: a call keeps them only while its NaN/Inf \
     verdict waits (CUBLASGUARD_SYNC=deferred, the scans on); the host's wait below has its own";

/// The recorded `gpu_hang` of `stream` says its work completed after all, `stalled_s` after the
/// stream had stopped: a slow kernel rather than a hang. True when there was one to amend.
pub(crate) fn resolved<R: Copy>(call: &Call<'_, R>, stream: u64, stalled_s: u64) -> bool {
    let s = call.session;
    let Some(mut fault) = s.stored_hang(&hex(stream)) else { return false };
    let Some(hang) = fault.hang.as_mut().filter(|h| !h.completed_later) else { return false };
    hang.completed_later = true;
    fault.message.push_str(&format!(
        " [its work completed later, at least {stalled_s} s after the stream stopped: a slow kernel or a late peer, not a hang \
         that lasted; a job whose kernels or collectives legitimately wait that long raises CUBLASGUARD_HANG_TIMEOUT]"
    ));
    match s.replace_hang(fault) {
        Some(index) => {
            call.published(index);
            true
        }
        None => false,
    }
}

/// At exit, the watchdog stopped: each recorded hang whose stream has since completed the stuck
/// call (a slow kernel the watchdog had no round left to see finish, before the program
/// exited) is amended as `resolved` does. True when one was.
pub(crate) fn resolved_at_exit<R: Copy>(call: &Call<'_, R>) -> bool {
    let s = call.session;
    let mut amended = false;
    for p in s.breadcrumbs.progress() {
        let Some(fault) = s.stored_hang(&hex(p.stream)) else { continue };
        let Some(h) = fault.hang.as_ref().filter(|h| h.found_by == "watchdog") else { continue };
        if p.unfinished == 0 || p.landed >= fault.seq {
            amended |= resolved(call, p.stream, h.stalled_s);
        }
    }
    amended
}

/// The `gpu_hang` of every stream the exit gave up waiting for (`found_by` "exit").
pub(crate) fn record_at_exit<R: Copy>(call: &Call<'_, R>, stalled_ms: u64) {
    let progress = call.session.breadcrumbs.progress();
    for p in progress.iter().filter(|p| p.unfinished > 0) {
        if let Some(first) = p.first_unfinished {
            record(call, &Stuck { progress: *p, first, stalled_ms }, &progress, "exit");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn progress(stream: u64, landed: u64, first: Option<u64>, unfinished: u64) -> Progress {
        Progress { context: 1, stream, landed, first_unfinished: first.map(|seq| Issued::new(seq, 0)), unfinished }
    }

    #[test]
    fn a_stream_is_stuck_once_its_outstanding_work_has_not_moved_for_the_timeout_and_is_told_once() {
        let mut watch = Watch::default();
        let stuck = [progress(0, 3, Some(5), 2)];
        assert!(watch.stuck(&stuck, &[], 0, 1000).is_empty(), "just seen");
        assert!(watch.stuck(&stuck, &[], 999, 1000).is_empty(), "not yet");
        let due = watch.stuck(&stuck, &[], 1000, 1000);
        assert_eq!(due.iter().map(|d| (d.first.seq, d.stalled_ms)).collect::<Vec<_>>(), [(5, 1000)]);
        assert!(watch.stuck(&stuck, &[], 5000, 1000).is_empty(), "told already");
        assert_eq!(watch.stuck(&stuck, &[9], 6000, 1000).len(), 1, "a thread came to wait for it: the record is brought up to date");
        assert!(watch.take_resolved().is_empty());
        // It completes after all (a slow kernel): the hang told is over, once.
        assert!(watch.stuck(&[progress(0, 6, None, 0)], &[], 7000, 1000).is_empty());
        assert_eq!(watch.take_resolved(), [0]);
        assert!(watch.stuck(&[progress(0, 6, None, 0)], &[], 8000, 1000).is_empty());
        assert!(watch.take_resolved().is_empty());
    }

    #[test]
    fn a_stream_that_moves_or_has_nothing_outstanding_is_not_stuck() {
        let mut watch = Watch::default();
        for t in 0..10 {
            // Busy but moving: each look finds a later call landed.
            assert!(watch.stuck(&[progress(0, t, Some(t + 1), 1)], &[], t * 1000, 1000).is_empty());
            // Idle (a program sleeping on the host): nothing is outstanding.
            assert!(watch.stuck(&[progress(7, 4, None, 0)], &[], t * 1000, 1000).is_empty());
        }
        // The idle stream gets work that never lands: stuck a timeout after it was first seen.
        assert!(watch.stuck(&[progress(7, 4, Some(20), 1)], &[], 9_500, 1000).is_empty());
        assert_eq!(watch.stuck(&[progress(7, 4, Some(20), 1)], &[], 10_000, 1000).len(), 1);
    }
}
