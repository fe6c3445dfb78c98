//! A `gpu_hang` fault's probable cause and next steps: the kernel its stream is stuck in, what
//! waits behind it and where the host waits; a rank that diverged, a deadlock between streams,
//! or the GPU itself, in the order the stuck kernel makes likely.

use cublasguard_format::trace::Fault;

use super::call_sites::{first_line, wait_line};

/// A `gpu_hang`: the kernel the stream is stuck in, what waits behind it, where the host waits.
pub(super) fn hang_cause(fault: &Fault) -> String {
    let Some(h) = &fault.hang else { return "the GPU stopped completing this call's work".into() };
    let stream = fault.stream.as_deref().unwrap_or("?");
    if h.completed_later {
        let behind = match &h.kernel {
            Some(k) => format!(" behind kernel {} (call #{}, launch {} of it)", k.kernel, k.seq, h.kernel_ordinal.unwrap_or(1)),
            None => String::new(),
        };
        return format!(
            "a slow kernel or a late peer, not a hang: this call's work on stream {stream} waited at least {} s{behind}, then completed",
            h.stalled_s
        );
    }
    let mut cause = match &h.kernel {
        Some(k) => format!(
            "the GPU is stuck in kernel {} (call #{}, grid [{}, {}, {}], launch {} of it, on stream {stream}{}): this call, queued behind it, has not completed for {} s",
            k.kernel,
            k.seq,
            k.grid[0],
            k.grid[1],
            k.grid[2],
            h.kernel_ordinal.unwrap_or(1),
            first_line(&k.backtrace).map(|l| format!(", made at {l}")).unwrap_or_default(),
            h.stalled_s
        ),
        None => format!("the work of this call on stream {stream} has not completed for {} s, and no kernel launched before it on the stream is recorded", h.stalled_s),
    };
    if let Some(line) = first_line(&fault.backtrace) {
        cause.push_str(&format!(" (this call was made at {line})"));
    }
    match h.blocked_threads.first() {
        Some(w) => {
            cause.push_str(&format!("; the host waits in {} (call #{}, thread {})", w.api, w.seq, w.thread));
            if let Some(line) = wait_line(w, None) {
                cause.push_str(&format!(" at {line}"));
            }
        }
        None => cause.push_str("; no host thread was inside a CUDA synchronisation"),
    }
    if h.found_by == "exit" {
        cause.push_str("; the process exited without waiting for it");
    }
    cause
}

pub(super) fn hang_steps(fault: &Fault) -> Vec<String> {
    if fault.hang.as_ref().is_some_and(|h| h.completed_later) {
        return vec![
            "Not a hang that lasted: the work completed after the watchdog recorded it. If kernels or collectives in this job legitimately wait that long (a rank writing a checkpoint while the others wait in a collective, a long first compilation), raise CUBLASGUARD_HANG_TIMEOUT; otherwise look at what made this rank or kernel slow (the ranks' traces side by side: `cublasguard report DIR`).".into(),
        ];
    }
    let collective = fault.hang.as_ref().and_then(|h| h.kernel.as_ref()).is_some_and(|k| k.kernel.to_ascii_lowercase().contains("nccl"));
    let mut steps = Vec::new();
    let rank = "A rank that diverged: a collective waits until every rank launches it; a rank that took another branch (a different number of steps, a data-dependent `if`, an exception caught on one rank) or died leaves the others waiting. Put every rank's trace in one folder and run `cublasguard report DIR`: it names the ranks stuck in the kernel and the one that never launched it, with its last call.";
    let deadlock = "A deadlock between streams: a stream that waits for an event (cudaStreamWaitEvent) or a memory value (cuStreamWaitValue32) that work queued behind it was to provide never proceeds; check the waits queued on this stream between its last completed call and this one.";
    let gpu = "A GPU fault: a GPU that stopped responding (Xid 79: fallen off the bus, Xid 109 or 119: a context-switch or GSP timeout) leaves streams stuck; check the GPU's health below, `nvidia-smi -q` and the kernel log (`dmesg | grep -i xid`).";
    if collective {
        steps.extend([rank, deadlock, gpu]);
    } else {
        steps.extend([deadlock, rank, gpu]);
    }
    steps.push("`cublasguard snapshot PID` writes a still running process's trace again: a stuck call that moved means a slow kernel, not a hang (raise CUBLASGUARD_HANG_TIMEOUT).");
    steps.into_iter().map(String::from).collect()
}
