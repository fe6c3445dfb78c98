//! The lean path: a hook with `lean` in the table (the plain, Ex and strided-batch GEMMs,
//! cublasLtMatmul, cublasLt's descriptor calls) numbered, forwarded and recorded by its export
//! itself when its checks are off or vouch for it, without a `Call` or its handler. The
//! macros expand inside each export (`guarded_call!`, in hooks/mod.rs).

use super::*;

/// A GEMM with `lean` in the table (the plain, Ex and strided-batch forms) with every check of a
/// matrix multiply off and no dump to write (`LeanGemm::Unchecked`), or with only `args` and
/// `bounds` on and vouched for by `DescribedGemm::clean_before` (`LeanGemm::Prechecked`):
/// numbered, counted, timed, forwarded and
/// recorded with its arguments by the export itself, without a `Call` or its handler (as
/// `Call::begin`, `operand_call::guard`'s path for a clean call and `Call::record`, in order).
/// Only a call that fails goes on to its handler, already forwarded, inside the panic catcher,
/// which describes it for its `api_error` fault. Outside the check, nothing on a clean call's
/// way can panic, so no panic catcher is paid for: atomics, the clock, the real function and
/// the recorder's stores (no index, allocation or checked arithmetic).
///
/// Taken once the session is armed and the thread has its id: the first call, which arms the
/// one or asks the other, goes the whole way (`intercept_on`), with the same outcome.
pub(super) struct LeanCall<'t> {
    t: &'t PerThread,
    _inside: ReentryOn<'t>,
    s: &'static Session,
    hook: Hook,
    tid: u32,
    seq: u64,
    /// From the CPU's counter where it can be (`stopwatch`): one wall-clock read per call.
    started: Started,
    /// The sticky error known before the call, by its code (`Session::known_error_of`).
    known: i32,
}

impl<'t> LeanCall<'t> {
    /// Whether a plain GEMM may take the lean path on this thread now, and how: the session
    /// armed, the thread's id known, not inside a hook already, and the checks as `LeanGemm`
    /// says (`None`: `intercept_on` takes the call).
    #[inline(always)]
    pub(super) fn allowed(t: &PerThread) -> Option<(&'static Session, LeanGemm)> {
        let s = lifecycle::armed_session()?;
        let lean = s.lean_gemm_kept();
        (lean != LeanGemm::No && t.tid.get() != 0 && !t.inside.get()).then_some((s, lean))
    }

    /// With `args` or `bounds` on (`LeanGemm::Prechecked`): whether `clean_before` vouches for
    /// the call, that the checks before it would find nothing. It reads the guard's tables:
    /// inside the panic catcher, as every check is (a panic turns the guard off).
    #[inline(always)]
    pub(super) fn vouched(s: &Session, t: &PerThread, clean_before: impl FnOnce(&Session, &PerThread) -> bool) -> bool {
        Self::answer(s, t, |s, t| Some(clean_before(s, t))).unwrap_or(false)
    }

    /// A call without checks may take the lean path whatever the checks are (`lean_always`):
    /// the session armed, the thread's id known, not inside a hook already, and no operand dump
    /// to write (dumps keep every call on its handler's path).
    #[inline(always)]
    pub(super) fn armed(t: &PerThread) -> Option<&'static Session> {
        let s = lifecycle::armed_session()?;
        (t.tid.get() != 0 && !t.inside.get() && !s.dumps_left()).then_some(s)
    }

    /// What `answer` (run inside the panic catcher: a panic turns the guard off) gives for a
    /// hook whose lean path reads or keeps the guard's tables (`vouched`, `lean_described`,
    /// `lean_always`), or `None` for its handler.
    #[inline(always)]
    pub(super) fn answer<T>(s: &Session, t: &PerThread, answer: impl FnOnce(&Session, &PerThread) -> Option<T>) -> Option<T> {
        match catch_panic(|| answer(s, t)) {
            Some(answer) => answer,
            None => {
                defer_cancel(|| lifecycle::disable("internal error inside a hook"));
                None
            }
        }
    }

    /// Numbers, counts and times the call about to be forwarded (`allowed` said it may be).
    #[inline(always)]
    pub(super) fn enter(t: &'t PerThread, s: &'static Session, hook: Hook) -> Option<Self> {
        let inside = ReentryOn::enter(t)?;
        let seq = s.begin(hook.index());
        let started = Started::now();
        Some(Self { t, _inside: inside, s, hook, tid: t.tid.get(), seq, started, known: s.known_error_code() })
    }

    /// After the real function returned `r`: recorded with the arguments `lean` gives; when it
    /// failed, given back for `failed` (so the handler's closure is made on that branch only).
    #[inline(always)]
    pub(super) fn finish<R: HookReturn>(self, r: R, lean: impl FnOnce() -> CallArgs) -> Result<R, Self> {
        // No `note_matmul`: the session's first matrix multiply went the whole way
        // (`Session::lean_gemm_kept`), and a failed one is noted by its handler.
        let status = r.status();
        if status != crate::cuda::CUBLAS_SUCCESS {
            return Err(self);
        }
        let time_ns = process::now_ns();
        let duration_ns = self.started.elapsed_ns(time_ns);
        let call = RecordedCall {
            seq: self.seq,
            hook: self.hook.index() as u16,
            status,
            time_ns,
            duration_ns,
            thread: self.tid,
            args: lean(),
            scanned: false,
            captured: false,
        };
        self.s.recorder.record(&call);
        Ok(r)
    }

    /// A failed call, handed to its handler (inside the panic catcher) for its fault; `frame`:
    /// the export's (`hook_frame!`), for its call site.
    #[cold]
    #[inline(never)]
    pub(super) fn failed<R: HookReturn>(self, r: R, frame: u64, handler: impl FnOnce(&Call<'_, R>) -> R) -> R {
        let Self { t, s, hook, tid, seq, started, known, .. } = self;
        let now = process::now_ns();
        let started_ns = now.saturating_sub(started.elapsed_ns(now));
        let outcome = catch_panic(move || {
            let device = RealDevice::new(s, t);
            let ran = move || r;
            let frame = HookFrame::new(frame, crate::ffi::host::thread::stack_of(t));
            let thread = OnThread { id: tid, memo: &t.memo, frame };
            let call = Call::resumed(s, hook, seq, started_ns, &device, (&RealOutlet, &RealOutlet), &ran, thread, (r.status(), s.known_error_of(known)));
            let r = handler(&call);
            if !call.was_recorded() {
                call.record(r.status(), CallArgs::None);
            }
            r
        });
        outcome.unwrap_or_else(|| {
            defer_cancel(|| lifecycle::disable("internal error inside a hook"));
            r
        })
    }
}

/// The end of every lean path: `$lean` (a `LeanCall` entered) forwards the call, records it
/// with what `$record` gives once it succeeded, and hands a failed one to its handler.
macro_rules! lean_forward {
    ( $lean:expr ; $record:expr ; $real:ident ; $frame:expr ; $handler:path ; $( $arg:ident ),* ) => {
        // SAFETY: the caller's arguments, passed on unchanged to the real function.
        let r = unsafe { $real( $( $arg ),* ) };
        return match $lean.finish(r, $record) {
            Ok(r) => r,
            Err(lean) => lean.failed(r, $frame, |call| $handler(call, $( $arg ),* )),
        };
    };
}

/// `LeanCall` for a hook with `lean` in the table: the arguments passed to the real function
/// straight from the export's own, and to the recorder through `$lean`.
macro_rules! lean_path {
    ( ; $t:ident ; $name:ident ; $real:ident ; $frame:expr ; $handler:path ; $( $arg:ident ),* ) => {};
    ( declared ; $t:ident ; $name:ident ; $real:ident ; $frame:expr ; $handler:path ; $( $arg:ident ),* ) => {};
    ( lean $lean:path ; $t:ident ; $name:ident ; $real:ident ; $frame:expr ; $handler:path ; $( $arg:ident ),* ) => {
        if let Some((s, how)) = LeanCall::allowed($t) {
            // The arguments widened only where they are checked, and the check handed one
            // reference to them.
            let vouched = how == LeanGemm::Unchecked || {
                let plain = $lean.call( $( $arg ),* );
                LeanCall::vouched(s, $t, |s, t| plain.clean_before(s, &t.memo, crate::ffi::host::thread::stack_of(t)))
            };
            if let Some(lean) = vouched.then(|| LeanCall::enter($t, s, Hook::$name)).flatten() {
                lean_forward!( lean ; || $lean.record( $( $arg ),* ) ; $real ; $frame ; $handler ; $( $arg ),* );
            }
        }
    };
    // A hook whose lean path reads the guard's tables even with its checks off
    // (`lean_described`: cublasLtMatmul's descriptors): `$lean.described` answers, inside the
    // panic catcher, what the recorder keeps of the call, or `None` for its handler.
    ( lean_described $lean:path ; $t:ident ; $name:ident ; $real:ident ; $frame:expr ; $handler:path ; $( $arg:ident ),* ) => {
        if let Some((s, how)) = LeanCall::allowed($t) {
            let described = LeanCall::answer(s, $t, |s, t| {
                $lean.described(how, s, &t.memo, &t.lt, crate::ffi::host::thread::stack_of(t), $( $arg ),* )
            });
            if let Some(record) = described {
                if let Some(lean) = LeanCall::enter($t, s, Hook::$name) {
                    lean_forward!( lean ; || record ; $real ; $frame ; $handler ; $( $arg ),* );
                }
            }
        }
    };
    // A call without checks (`lean_always`: cublasLt's descriptor calls), lean whatever the
    // checks are, but for operand dumps (which keep every call on its handler's path, the tests'
    // reference): `$lean.before` before the real call and `$lean.after` once it succeeded, each
    // inside the panic catcher; a failed call goes to its handler.
    ( lean_always $lean:path ; $t:ident ; $name:ident ; $real:ident ; $frame:expr ; $handler:path ; $( $arg:ident ),* ) => {
        if let Some(s) = LeanCall::armed($t) {
            if LeanCall::answer(s, $t, |s, _| $lean.before(s, $( $arg ),* )).is_some() {
                if let Some(lean) = LeanCall::enter($t, s, Hook::$name) {
                    let read = |ptr: u64, out: &mut [u8]| crate::ffi::intercept::out_param::read_bytes(ptr, out);
                    let after = || LeanCall::answer(s, $t, |s, _| Some($lean.after(s, &read, $( $arg ),* ))).unwrap_or(CallArgs::None);
                    lean_forward!( lean ; after ; $real ; $frame ; $handler ; $( $arg ),* );
                }
            }
        }
    };
}
