//! Who gets the blame for a sticky CUDA error nobody has been blamed for yet, when it
//! surfaces at a call that did not cause it (a synchronisation of the program's, a cudaMalloc,
//! the next guarded call). Under CUBLASGUARD_SYNC=deferred the breadcrumbs decide: when one
//! stream has guarded calls whose breadcrumbs never landed, the first of them is the call that
//! faulted (or the first after the kernel that did), and the fault is recorded on it. Where
//! several streams had calls in flight, or none did, the fault stays on the call where it
//! surfaced, with each stream's progress as evidence: the guard never guesses.

use super::Call;
use crate::check::Finding;
use crate::cuda;
use crate::recorder::{CallArgs, RecordedCall};
use crate::session::breadcrumbs::{Issued, Progress};
use crate::trace::{hex, FaultKind, StreamProgress};

/// Records the unattributed sticky error `status` that this call saw (`where_`: how it
/// surfaced, for the message; `args` and `stream`: this call's). True when it was recorded on
/// this call (then the caller reports nothing more about it); false when the error is not a
/// sticky one, was attributed before, or was now pinned on the earlier call that caused it: a
/// call of the program's that failed because of it then reports its own failure, as it would
/// in gemm mode, where the error was known since that earlier call (`lost_since` says so).
pub(crate) fn surfaced<R: Copy>(call: &Call<'_, R>, status: i32, where_: &str, args: CallArgs, stream: Option<u64>) -> bool {
    attribute(call, status, where_, args, stream, false)
}

/// Under the default mode a call that failed (a handle that could not be created, say) may
/// have failed because of an error the guard has not attributed yet: the streams whose
/// breadcrumbs are out are asked now (without waiting), and an error there is attributed first,
/// so that the failing call's own story starts from it, as in gemm mode ("the CUDA context was
/// already lost").
pub(crate) fn attribute_pending<R: Copy>(call: &Call<'_, R>) {
    let s = call.session;
    if s.config.sync.synchronises_calls() || s.known_error().is_some() {
        return;
    }
    for p in s.breadcrumbs.progress().iter().filter(|p| p.unfinished > 0) {
        // The capture query answers a sticky error without waiting for the stream.
        if let Err(code) = call.device.is_capturing(p.stream) {
            if surfaced(call, code, &format!("{}, which then failed", call.api()), CallArgs::None, None) {
                return;
            }
        }
    }
}

/// As `surfaced`, for a call whose own work on `stream` is in flight and has no breadcrumb
/// (the context broke before one could be left): when every breadcrumb issued before it
/// landed, this call's work is the first unfinished, and the fault is this call's.
pub(crate) fn surfaced_in_flight<R: Copy>(call: &Call<'_, R>, status: i32, where_: &str, args: CallArgs, stream: u64) -> bool {
    attribute(call, status, where_, args, Some(stream), true)
}

fn attribute<R: Copy>(call: &Call<'_, R>, status: i32, where_: &str, args: CallArgs, stream: Option<u64>, in_flight: bool) -> bool {
    let s = call.session;
    if !cuda::cuda_error_is_sticky(status) || s.known_error().is_some() {
        return false;
    }
    let progress = s.breadcrumbs.progress();
    let behind: Vec<&Progress> = progress.iter().filter(|p| p.unfinished > 0).collect();
    if let [only] = behind[..] {
        if let Some(first) = only.first_unfinished {
            blame_unfinished(call, status, where_, only, first, &progress);
            return false;
        }
    }
    s.note_error(status, call.seq);
    if in_flight && behind.is_empty() {
        let mut finding = Finding::new(
            FaultKind::AsyncError,
            format!(
                "{} ({status}) surfaced at {where_}: every breadcrumb issued before this call landed, so the work \
                 this call queued on stream {} is the first that did not complete: it faulted",
                cuda::cuda_error_name(status),
                stream.map_or_else(|| "?".to_string(), hex)
            ),
        );
        finding.error = Some((status, call.api()));
        let mut fault = call.fault(finding, 0, cuda::cuda_error_name(0));
        fault.args = args.to_args();
        fault.stream = stream.map(hex);
        fault.breadcrumbs = evidence(s, &progress);
        add_kernel(call, &mut fault, args);
        call.report(fault);
        return true;
    }
    let mut message = format!(
        "{} ({status}) surfaced at {where_}: work queued before it on the device faulted, and nothing had \
         synchronised since it was launched",
        cuda::cuda_error_name(status)
    );
    match behind.len() {
        _ if progress.is_empty() => message.push_str(" (CUBLASGUARD_SYNC=launches pins it to its launch)"),
        0 => message.push_str(
            "; every guarded call's breadcrumb had landed, so the fault is in work queued after the last of them \
             (the suspects; CUBLASGUARD_SYNC=launches pins it to its launch)",
        ),
        1 => message.push_str(&format!(
            "; stream {} was more guarded calls behind than the guard remembers, so its first unfinished call is not known",
            hex(behind[0].stream)
        )),
        _ => {
            let firsts: Vec<String> = behind
                .iter()
                .map(|p| match p.first_unfinished {
                    Some(i) => format!("stream {} from #{} ({})", hex(p.stream), i.seq, s.hook_name(i.hook as usize)),
                    None => format!("stream {} (further behind than the guard remembers)", hex(p.stream)),
                })
                .collect();
            message.push_str(&format!(
                "; several streams had guarded calls in flight ({}): the first unfinished call on any of them, or a \
                 kernel before it on its stream, faulted",
                firsts.join(", ")
            ));
        }
    }
    let mut finding = Finding::new(FaultKind::AsyncError, message);
    finding.error = Some((status, call.api()));
    let mut fault = call.fault(finding, status, cuda::cuda_error_name(status));
    fault.args = args.to_args();
    fault.stream = stream.map(hex);
    fault.suspects = super::launch::suspects(call, call.seq);
    fault.breadcrumbs = evidence(s, &progress);
    if call.seq == 0 {
        // Found at exit, after the last call: recorded as the exit's, numbered after it.
        (fault.seq, fault.api) = (s.total_calls() + 1, "exit".to_string());
    }
    call.report(fault);
    true
}

/// For the message of a call that failed with `status`: since when the context has been
/// lost, when `status` is the error already attributed to an earlier call.
pub(crate) fn lost_since(s: &crate::session::Session, status: i32) -> Option<String> {
    let k = s.known_error().filter(|k| k.code == status)?;
    Some(format!(": the CUDA context has been unusable since {} ({}) at call #{}", cuda::cuda_error_name(k.code), k.code, k.seq))
}

/// Records the error on `first`, the first call on `stream` whose breadcrumb never landed.
fn blame_unfinished<R: Copy>(call: &Call<'_, R>, status: i32, where_: &str, stream: &Progress, first: Issued, progress: &[Progress]) {
    let s = call.session;
    s.note_error(status, first.seq);
    let api = s.hook_name(first.hook as usize);
    let recorded: Option<RecordedCall> = s.recorder.snapshot().into_iter().find(|c| c.seq == first.seq);
    let landed = match stream.landed {
        0 => "no breadcrumb on it had landed yet".to_string(),
        seq => format!("the one of call #{seq} before it did"),
    };
    if let Some(mut earlier) = s.stored_fault(first.seq, api).filter(|f| f.error.is_none()) {
        // The call already has its fault (an operand out of bounds, host memory, freed): the
        // kernel's error is its consequence, attached to it as `gemm` mode's synchronisation
        // after the call attaches it, not a second fault.
        earlier.error = Some(crate::trace::CudaErrorRecord { code: status, name: cuda::cuda_error_name(status).to_string(), call: call.api().to_string() });
        earlier.message.push_str(&format!(
            " [the kernel it launched then faulted: {} ({status}) surfaced later, at {where_} (call #{}), and this call's \
             breadcrumb on stream {} never landed while {landed}]",
            cuda::cuda_error_name(status),
            call.seq,
            hex(stream.stream)
        ));
        call.amend(earlier);
        return;
    }
    let mut finding = Finding::new(
        FaultKind::AsyncError,
        format!(
            "{} ({status}) surfaced later, at {where_} (call #{}): this call's breadcrumb on stream {} never landed \
             while {landed}, so the kernel this call launched faulted, or one launched on that stream between the \
             two (the suspects, if any)",
            cuda::cuda_error_name(status),
            call.seq,
            hex(stream.stream)
        ),
    );
    finding.error = Some((status, call.api()));
    if super::verdicts::tell_pinned_fault(call, first.seq, &finding, call.seq) {
        // Told with the call's own description; the evidence of the streams added to it.
        if let Some(mut told) = s.stored_fault(first.seq, api) {
            told.breadcrumbs = evidence(s, progress);
            call.amend(told);
        }
        return;
    }
    let returned = recorded.map_or(0, |c| c.status);
    let status_name = if api.starts_with("cublas") { cuda::cublas_status_name(returned) } else { cuda::cuda_error_name(returned) };
    let mut fault = call.fault(finding, returned, status_name);
    fault.seq = first.seq;
    fault.api = api.to_string();
    // The culprit's own line, kept at it: the stack of now is the call where it surfaced.
    fault.backtrace = call.outlet.describe_call_site(&first.site);
    if let Some(c) = recorded {
        fault.thread = c.thread;
        fault.args = c.args.to_args();
        add_kernel(call, &mut fault, c.args);
    }
    fault.stream = Some(hex(stream.stream));
    fault.found_at_seq = Some(call.seq);
    fault.suspects = super::launch::suspects(call, first.seq).into_iter().filter(|k| k.seq > stream.landed).collect();
    fault.breadcrumbs = evidence(s, progress);
    call.report(fault);
}

/// A launch's kernel, by name, beside its launch configuration.
fn add_kernel<R: Copy>(call: &Call<'_, R>, fault: &mut crate::trace::Fault, args: CallArgs) {
    if let CallArgs::Launch { func, .. } = args {
        let name = call.session.kernels.name(func, |f| call.outlet.kernel_name(f));
        fault.message.push_str(&format!(" [kernel {name}]"));
        fault.args.insert("kernel", name);
    }
}

pub(crate) fn evidence(s: &crate::session::Session, progress: &[Progress]) -> Vec<StreamProgress> {
    progress
        .iter()
        .map(|p| StreamProgress {
            stream: hex(p.stream),
            context: hex(p.context),
            last_landed: (p.landed != 0).then_some(p.landed),
            first_unfinished: p.first_unfinished.map(|i| i.seq),
            first_unfinished_api: p.first_unfinished.map(|i| s.hook_name(i.hook as usize).to_string()),
            unfinished: p.unfinished,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::model::{session, ModelDevice, ModelOutlet};
    use super::super::{Call, Hook, OnThread};
    use super::*;
    use crate::config::Config;
    use crate::recorder::RecordedCall;
    use std::sync::atomic::{AtomicU64, Ordering};

    const ILLEGAL_ADDRESS: i32 = 700;

    /// A session whose calls 1..=4 are GEMMs, with breadcrumbs issued as `issued` says
    /// (stream, seq) and `landed` written into the words of streams 0 and 1.
    fn with_breadcrumbs(issued: &[(u64, u64)], landed: [u64; 2]) -> crate::session::Session {
        let s = session(Config { quiet: true, ..Config::default() });
        let words: &'static [AtomicU64] = Box::leak((0..2).map(|_| AtomicU64::new(0)).collect::<Vec<_>>().into_boxed_slice());
        assert!(s.breadcrumbs.add_page(1, words, 0x1000));
        let gemm = Hook::cublasSgemm_v2.index() as u16;
        for seq in 1..=4 {
            s.begin(Hook::cublasSgemm_v2.index());
            s.recorder.record(&RecordedCall {
                seq,
                hook: gemm,
                status: 0,
                time_ns: 0,
                duration_ns: 0,
                thread: 3,
                args: CallArgs::None,
                scanned: false,
                captured: false,
            });
        }
        for &(stream, seq) in issued {
            // Each call's site stands for the line it was made at.
            let site = crate::session::call_site::CallSite { returns: [0x5000 + seq, 0, 0, 0] };
            assert!(s.breadcrumbs.issue(1, stream, crate::session::breadcrumbs::Issued { seq, hook: gemm, site }).is_some());
        }
        words[0].store(landed[0], Ordering::Release);
        words[1].store(landed[1], Ordering::Release);
        s
    }

    /// Call 5 (a cudaMemcpy) sees the error; the faults recorded.
    fn surface(s: &crate::session::Session) -> Vec<crate::trace::Fault> {
        let (device, outlet, memo) = (ModelDevice::default(), ModelOutlet::default(), crate::state::ThreadMemo::new());
        let forward = || ILLEGAL_ADDRESS;
        let call = Call::begin(s, Hook::cudaMemcpy, &device, &outlet, &outlet, &forward, OnThread { id: 7, memo: &memo, frame: Default::default() });
        let on_the_copy = surfaced(&call, ILLEGAL_ADDRESS, "the copy", CallArgs::None, None);
        assert!(!surfaced(&call, ILLEGAL_ADDRESS, "the copy", CallArgs::None, None), "attributed once");
        let faults = s.trace(Default::default()).faults;
        assert_eq!(on_the_copy, faults.iter().any(|f| f.seq == 5), "true exactly when recorded on the copy: {faults:#?}");
        faults
    }

    #[test]
    fn the_first_call_whose_breadcrumb_never_landed_on_the_one_stream_behind_gets_the_fault() {
        let s = with_breadcrumbs(&[(0, 1), (0, 2), (0, 3)], [1, 0]);
        let f = surface(&s);
        assert_eq!((f.len(), f[0].seq, f[0].api.as_str(), f[0].found_at_seq), (1, 2, "cublasSgemm_v2", Some(5)));
        assert_eq!(f[0].thread, 3, "the blamed call's thread, from the recorder");
        assert_eq!(f[0].backtrace, ["model call site 0x5002"], "the blamed call's own line, kept at it, not the copy's stack");
        assert_eq!(f[0].breadcrumbs[0].last_landed, Some(1));
        assert_eq!(s.known_error().map(|k| (k.code, k.seq)), Some((ILLEGAL_ADDRESS, 2)), "later calls say since call #2");
        // The copy, pinned elsewhere, reports its own failure as in gemm mode, saying since when.
        assert_eq!(lost_since(&s, ILLEGAL_ADDRESS).as_deref(), Some(": the CUDA context has been unusable since cudaErrorIllegalAddress (700) at call #2"));
        assert_eq!(lost_since(&s, 2), None, "another error");
    }

    #[test]
    fn with_two_streams_behind_the_fault_stays_where_it_surfaced_and_lists_both() {
        let s = with_breadcrumbs(&[(0, 1), (0, 2), (9, 3), (9, 4)], [1, 3]);
        let f = surface(&s);
        assert_eq!((f[0].seq, f[0].api.as_str(), f[0].found_at_seq), (5, "cudaMemcpy", None));
        assert!(f[0].message.contains("stream 0x0 from #2") && f[0].message.contains("stream 0x9 from #4"), "{}", f[0].message);
        assert_eq!(s.known_error().map(|k| k.seq), Some(5));
    }

    #[test]
    fn with_every_breadcrumb_landed_the_fault_stays_where_it_surfaced() {
        let s = with_breadcrumbs(&[(0, 1), (0, 2)], [2, 0]);
        let f = surface(&s);
        assert_eq!((f[0].seq, f[0].found_at_seq), (5, None));
        assert!(f[0].message.contains("every guarded call's breadcrumb had landed"), "{}", f[0].message);
    }
}
