//! The one hook table. Each line declares a hooked symbol with its C signature and its
//! handler; the exported function, the cached real-function pointer and the list of hooked
//! names are all generated from it, so they cannot drift apart.

use std::cell::Cell;
use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};

use crate::ffi::cuda_client::device::RealDevice;
use crate::ffi::host::call_site::hook_frame;
use crate::ffi::host::lifecycle::{self, RealOutlet};
use crate::ffi::host::process;
use crate::ffi::host::stopwatch::Started;
use crate::ffi::host::thread::{PerThread, PER_THREAD};
use crate::ffi::intercept::real::{Library, RealSymbol};
use crate::ffi::intercept::reentry::{catch_panic, defer_cancel, ReentryOn};
use crate::guard::launch::{self, Dim3, DriverLaunchConfig, LaunchConfig};
use crate::guard::memory::{ExternalBufferDesc, IpcHandle};
use crate::guard::{blas, cudnn, gemm, graphs, handles, lt, memory, sync, Call, OnThread};
use crate::hook_list::{Hook, HOOK_COUNT, HOOK_NAMES};
use crate::recorder::{CallArgs, RecordedCall};
use crate::session::call_site::HookFrame;
use crate::session::{LeanGemm, Session};

/// Opaque CUDA handles and streams, as the C API passes them.
type Handle = *mut c_void;
type Stream = *mut c_void;
/// A data pointer (operand, scalar or array of operand pointers).
type P = *const c_void;

/// Runs `handler` around the real call, unless this thread is already inside a hook (the
/// guard's own calls, or the library calling itself), or the guard is off. The handler gets
/// one `Call`: numbered, counted, able to forward, record and report. A call its handler did
/// not record is recorded here, so none is missing from the flight recorder. A panic inside
/// the guard never crosses into C: it disables the guard and the real result is returned (the
/// real function is called if the handler had not yet called it). A forced unwind (thread
/// cancellation, `pthread_exit`) or a foreign exception from the real function passes through
/// to the caller's frames, as it would without the guard (`reentry::catch_panic`).
///
/// `t` is the thread's one block of thread-local state, reached once per call by the export (a
/// cdylib pays `__tls_get_addr` for each access): the re-entry flag, the thread's id and its
/// memo of the shared tables all come from it. A plain GEMM whose checks are off, or find
/// nothing, does not come here when it can be helped (`LeanCall`).
fn intercept_on<R: HookReturn>(t: &PerThread, hook: Hook, frame: u64, forward: &impl Fn() -> R, handler: impl FnOnce(&Call<'_, R>) -> R) -> R {
    let Some(_inside) = ReentryOn::enter(t) else { return forward() };
    let result = Cell::new(None);
    let tracked = || {
        let r = forward();
        result.set(Some(r));
        r
    };
    let tracked = &tracked;
    // `move`, and the hooks pass their arguments by one reference: the job handed through the
    // panic catcher is a few words, whatever the function's arity.
    let outcome = catch_panic(move || match lifecycle::session() {
        // A kernel registration is bookkeeping at load (PyTorch's libraries make tens of
        // thousands): it is neither counted nor recorded, so it fills no slot of the flight
        // recorder and uses no sequence number.
        Some(s) if hook.is_registration() => {
            let device = RealDevice::new(s, t);
            handler(&Call::uncounted(s, hook, &device, &RealOutlet, tracked, &t.memo))
        }
        Some(s) => {
            let device = RealDevice::new(s, t);
            let frame = HookFrame::new(frame, crate::ffi::host::thread::stack_of(t));
            let thread = OnThread { id: process::thread_id_of(t), memo: &t.memo, frame };
            let call = Call::begin(s, hook, &device, &RealOutlet, tracked, thread);
            let r = handler(&call);
            if !call.was_recorded() {
                call.record(r.status(), CallArgs::None);
            }
            r
        }
        None => tracked(),
    });
    match outcome {
        Some(r) => r,
        None => {
            defer_cancel(|| lifecycle::disable("internal error inside a hook"));
            result.get().unwrap_or_else(forward)
        }
    }
}

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
struct LeanCall<'t> {
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
    fn allowed(t: &PerThread) -> Option<(&'static Session, LeanGemm)> {
        let s = lifecycle::armed_session()?;
        let lean = s.lean_gemm_kept();
        (lean != LeanGemm::No && t.tid.get() != 0 && !t.inside.get()).then_some((s, lean))
    }

    /// With `args` or `bounds` on (`LeanGemm::Prechecked`): whether `clean_before` vouches for
    /// the call, that the checks before it would find nothing. It reads the guard's tables:
    /// inside the panic catcher, as every check is (a panic turns the guard off).
    #[inline(always)]
    fn vouched(s: &Session, t: &PerThread, clean_before: impl FnOnce(&Session, &PerThread) -> bool) -> bool {
        match catch_panic(|| clean_before(s, t)) {
            Some(vouched) => vouched,
            None => {
                defer_cancel(|| lifecycle::disable("internal error inside a hook"));
                false
            }
        }
    }

    /// A call without checks may take the lean path whatever the checks are (`lean_always`):
    /// the session armed, the thread's id known, not inside a hook already, and no operand dump
    /// to write (dumps keep every call on its handler's path).
    #[inline(always)]
    fn armed(t: &PerThread) -> Option<&'static Session> {
        let s = lifecycle::armed_session()?;
        (t.tid.get() != 0 && !t.inside.get() && !s.dumps_left()).then_some(s)
    }

    /// `vouched` for a hook whose lean path reads or keeps the guard's tables (`lean_described`,
    /// `lean_always`): its answer, or `None` for its handler.
    #[inline(always)]
    fn answer<T>(s: &Session, t: &PerThread, answer: impl FnOnce(&Session, &PerThread) -> Option<T>) -> Option<T> {
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
    fn enter(t: &'t PerThread, s: &'static Session, hook: Hook) -> Option<Self> {
        let inside = ReentryOn::enter(t)?;
        let seq = s.begin(hook.index());
        let started = Started::now();
        Some(Self { t, _inside: inside, s, hook, tid: t.tid.get(), seq, started, known: s.known_error_code() })
    }

    /// After the real function returned `r`: recorded with the arguments `lean` gives; when it
    /// failed, given back for `failed` (so the handler's closure is made on that branch only).
    #[inline(always)]
    fn finish<R: HookReturn>(self, r: R, lean: impl FnOnce() -> CallArgs) -> Result<R, Self> {
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
    fn failed<R: HookReturn>(self, r: R, frame: u64, handler: impl FnOnce(&Call<'_, R>) -> R) -> R {
        let Self { t, s, hook, tid, seq, started, known, .. } = self;
        let now = process::now_ns();
        let started_ns = now.saturating_sub(started.elapsed_ns(now));
        let outcome = catch_panic(move || {
            let device = RealDevice::new(s, t);
            let ran = move || r;
            let frame = HookFrame::new(frame, crate::ffi::host::thread::stack_of(t));
            let thread = OnThread { id: tid, memo: &t.memo, frame };
            let call = Call::resumed(s, hook, seq, started_ns, &device, &RealOutlet, &ran, thread, (r.status(), s.known_error_of(known)));
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

/// The body of a hook's export and of its guarded copies, around `$real`: the thread's block
/// reached once, the lean path of a hook that has one, `intercept_on` otherwise. `$frame`: the
/// export's frame, evaluated where it is needed (`hook_frame!()` in the export itself, whose
/// frame register holds it all through its body: a clean lean call never reads it).
macro_rules! guarded_call {
    ( $name:ident ; $real:ident ; $frame:expr ; $handler:path ; $( $lean_kind:ident $lean:path )? ; $( $arg:ident ),* ) => {
        PER_THREAD
            .try_with(|t| {
                lean_path!( $( $lean_kind $lean )? ; t ; $name ; $real ; $frame ; $handler ; $( $arg ),* );
                let args = &( $( $arg, )* );
                intercept_on(
                    t,
                    Hook::$name,
                    $frame,
                    // SAFETY: the caller's arguments, passed on unchanged to the real function.
                    &move || { let ( $( $arg, )* ) = *args; unsafe { $real( $( $arg ),* ) } },
                    move |call| { let ( $( $arg, )* ) = *args; $handler(call, $( $arg ),* ) },
                )
            })
            // The block has no destructor, so it is never gone; were it, the call passes.
            // SAFETY: as above.
            .unwrap_or_else(|_| unsafe { $real( $( $arg ),* ) })
    };
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

impl Hook {
    /// Registrations of kernels with the runtime, made by nvcc's code at load.
    fn is_registration(self) -> bool {
        matches!(self, Hook::__cudaRegisterFunction)
    }
}

/// What hooked functions return: a status, or nothing (`__cudaRegisterFunction`).
trait HookReturn: Copy {
    /// The status to record.
    fn status(self) -> i32;
    /// What to return when the real function cannot be found.
    fn missing(library: Library) -> Self;
}

impl HookReturn for c_int {
    fn status(self) -> i32 {
        self
    }
    fn missing(library: Library) -> Self {
        library.not_initialised()
    }
}

impl HookReturn for () {
    fn status(self) -> i32 {
        0
    }
    fn missing(_: Library) -> Self {}
}

static MISSING_WARNED: AtomicBool = AtomicBool::new(false);

fn missing_real<R: HookReturn>(name: &str, library: Library) -> R {
    if !MISSING_WARNED.load(Ordering::Relaxed) {
        defer_cancel(|| {
            lifecycle::warn_once(
                &MISSING_WARNED,
                &format!(
                    "cublasguard: cannot find the real {name} (none of {:?} is loaded); returning the library's \
                     not-initialised status",
                    library.sonames()
                ),
            )
        });
    }
    R::missing(library)
}

macro_rules! hook_table {
    ( $( $lib:ident fn $name:ident ( $( $arg:ident : $ty:ty ),* $(,)? ) -> $ret:ty => $handler:path $( , $lean_kind:ident $lean:path )? ; )* ) => {
        #[allow(non_upper_case_globals)]
        mod reals {
            use super::*;
            $( pub static $name: RealSymbol = RealSymbol::new(concat!(stringify!($name), "\0"), Library::$lib); )*
        }

        impl Hook {
            /// The library that defines the function.
            pub(crate) fn library(self) -> Library {
                match self { $( Hook::$name => Library::$lib, )* }
            }

            /// Copy `copy` of the guarded function, for one copy of its library reached
            /// through `dlsym` (null past the last).
            fn copy_fn(self, copy: usize) -> *mut c_void {
                match self {
                    $( Hook::$name => $name::COPY_FNS.get(copy).map_or(std::ptr::null_mut(), |f| *f as *mut c_void), )*
                }
            }
        }

        $(
            /// The guarded copies of the function for libraries reached through `dlsym`.
            #[allow(non_snake_case)]
            mod $name {
                use super::*;

                /// The C function; "C-unwind": a forced unwind from inside it passes through.
                pub(super) type Real = unsafe extern "C-unwind" fn( $( $ty ),* ) -> $ret;

                /// One copy per copy of the library; each forwards to what `dlsym` found in its
                /// own copy (`COPY_REALS`).
                pub(super) const COPY_FNS: [Real; COPIES] =
                    [copy::<0>, copy::<1>, copy::<2>, copy::<3>, copy::<4>, copy::<5>, copy::<6>, copy::<7>];

                /// # Safety
                /// Called by C code with the function's arguments, through a pointer `dlsym`
                /// returned for a library that `COPY_REALS` holds the function of.
                #[allow(clippy::too_many_arguments)]
                unsafe extern "C-unwind" fn copy<const K: usize>( $( $arg : $ty ),* ) -> $ret {
                    let p = COPY_REALS[Hook::$name as usize][K].load(Ordering::Acquire);
                    if p.is_null() {
                        return missing_real::<$ret>(stringify!($name), Library::$lib);
                    }
                    // SAFETY: `p` is what dlsym found for this name: the function of this signature.
                    let real = unsafe { std::mem::transmute::<*mut c_void, Real>(p) };
                    let frame = hook_frame!();
                    // SAFETY: this function's own contract: C's arguments, for the function found.
                    unsafe { through(real, frame, $( $arg ),* ) }
                }

                /// The guarded call, one body for every copy (they differ only in `real`).
                ///
                /// # Safety
                /// As `copy`, with `real` the function found.
                #[inline(never)]
                #[allow(clippy::too_many_arguments)]
                unsafe fn through(real: Real, frame: u64, $( $arg : $ty ),* ) -> $ret {
                    guarded_call!( $name ; real ; frame ; $handler ; $( $lean_kind $lean )? ; $( $arg ),* )
                }
            }
        )*

        $(
            #[cfg_attr(not(test), no_mangle)]
            #[allow(non_snake_case, clippy::too_many_arguments)]
            /// # Safety
            /// Called by C code with the arguments of the CUDA function of the same name.
            pub unsafe extern "C-unwind" fn $name( $( $arg : $ty ),* ) -> $ret {
                // SAFETY: `Real` is this function's C signature, the type the slot was looked up for.
                let Some(real) = (unsafe { reals::$name.get::<$name::Real>() }) else {
                    return missing_real::<$ret>(stringify!($name), Library::$lib);
                };
                // The frame read in this function's own body, where it is used: its second word
                // is the return address into the caller.
                guarded_call!( $name ; real ; hook_frame!() ; $handler ; $( $lean_kind $lean )? ; $( $arg ),* )
            }
        )*
    };
}

crate::hook_list::with_hook_table!(hook_table);

/// Copies of one library the guard tells apart when they are reached through `dlsym` (two
/// CUDA versions in one process, a framework's vendored copy beside the system's), each library
/// apart: an XLA process holds the runtime, cuBLAS, cuBLASLt and the driver, and can still
/// load 7 more copies of each. A copy's slot is freed when `dlclose` unmaps it.
const COPIES: usize = 8;

/// Each library's copies, by load address (0: free).
static COPY_BASES: [[AtomicUsize; COPIES]; Library::ALL.len()] = [const { [const { AtomicUsize::new(0) }; COPIES] }; Library::ALL.len()];

/// For each hooked function and copy of its library, the real function `dlsym` found there.
static COPY_REALS: [[AtomicPtr<c_void>; COPIES]; HOOK_COUNT] = [const { [const { AtomicPtr::new(std::ptr::null_mut()) }; COPIES] }; HOOK_COUNT];

static COPIES_FULL_WARNED: AtomicBool = AtomicBool::new(false);

/// The copy number of `library` loaded at `base`, claiming a free one the first time.
fn copy_of(library: Library, base: usize) -> Option<usize> {
    let slots = COPY_BASES.get(library.index())?;
    // The copy already held first: a slot freed before it must not take it a second time.
    if let Some(held) = slots.iter().position(|slot| slot.load(Ordering::Acquire) == base) {
        return Some(held);
    }
    for (i, slot) in slots.iter().enumerate() {
        match slot.compare_exchange(0, base, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Some(i),
            Err(held) if held == base => return Some(i),
            Err(_) => {}
        }
    }
    None
}

/// After `dlclose` unmapped something: the slots of copies no longer loaded are freed (their
/// functions forgotten first, so a copy claimed again starts empty).
pub(crate) fn forget_unloaded_copies() {
    for library in Library::ALL {
        let Some(slots) = COPY_BASES.get(library.index()) else { continue };
        for (copy, slot) in slots.iter().enumerate() {
            let base = slot.load(Ordering::Acquire);
            if base == 0 || still_loaded(base, library) {
                continue;
            }
            for (reals, hook) in COPY_REALS.iter().zip(Hook::ALL) {
                if hook.library() == library {
                    if let Some(real) = reals.get(copy) {
                        real.store(std::ptr::null_mut(), Ordering::Release);
                    }
                }
            }
            let _ = slot.compare_exchange(base, 0, Ordering::AcqRel, Ordering::Acquire);
        }
    }
}

/// Whether a copy of `library` is still loaded at `base`.
fn still_loaded(base: usize, library: Library) -> bool {
    matches!(crate::ffi::intercept::real::object_of(base as *const c_void), Some((at, file)) if at == base && is_library_file(file, library))
}

/// Whether `file` is a copy of `library` (under any file name that starts like it), and not
/// the guard (whose name starts like cuBLAS's).
fn is_library_file(file: &str, library: Library) -> bool {
    let Some(rest) = file.strip_prefix(library.stem()) else { return false };
    // cuDNN's sublibraries (libcudnn_graph.so.9, ...) define the dispatcher's names too, and
    // are reached through it: only the dispatcher's own file (or a vendored copy) is cuDNN's.
    if library == Library::Cudnn && !(rest.starts_with('.') || rest.starts_with('-')) {
        return false;
    }
    !file.starts_with("libcublasguard")
}

/// The load address of the object holding `found`, when it is a copy of `library` and not this
/// library or another copy of the guard.
fn in_library(found: *mut c_void, library: Library) -> Option<usize> {
    let (base, file) = crate::ffi::intercept::real::object_of(found)?;
    (is_library_file(file, library) && !crate::ffi::intercept::real::is_own(found)).then_some(base)
}

/// What `dlsym` on a library handle returns for `name`, given what libc `found`: a guarded copy
/// of the hook when `name` is hooked and `found` lies in that function's CUDA library (under any
/// file name that starts like it, so a vendored copy counts); `found` itself otherwise.
pub(crate) fn guarded_copy(name: &std::ffi::CStr, found: *mut c_void) -> *mut c_void {
    let name = name.to_bytes();
    // One of the driver's entry points: the guard's wrapper of it stands for it.
    if let Some((wrapper, library)) = crate::ffi::intercept::entry_points::wrapper_for(name) {
        return if in_library(found, library).is_some() { wrapper } else { found };
    }
    let Some(index) = HOOK_NAMES.iter().position(|n| n.as_bytes() == name) else { return found };
    let hook = Hook::ALL[index];
    let library = hook.library();
    let Some(base) = in_library(found, library) else { return found };
    let Some(copy) = copy_of(library, base) else {
        if !COPIES_FULL_WARNED.load(Ordering::Relaxed) {
            defer_cancel(|| {
                lifecycle::warn_once(
                    &COPIES_FULL_WARNED,
                    &format!(
                        "cublasguard: more than {COPIES} copies of {} loaded at once, reached through dlsym; the functions of \
                         further copies are not guarded",
                        library.stem()
                    ),
                )
            });
        }
        return found;
    };
    let Some(real) = COPY_REALS.get(index).and_then(|reals| reals.get(copy)) else { return found };
    real.store(found, Ordering::Release);
    hook.copy_fn(copy)
}

/// Marks the guard in a process: a second copy of it (another build at another path, both in
/// `LD_PRELOAD`) finds the first by this symbol.
#[cfg_attr(not(test), no_mangle)]
#[allow(non_upper_case_globals)]
pub static cublasguard_instance: u8 = 1;

/// At load: when another copy of the guard was loaded first, this one passes every call
/// through (every call would be intercepted twice and two traces written). Only a file named
/// libcublasguard* looks: the library's unit tests link this code too.
extern "C" fn notice_an_earlier_guard() {
    // Not the marker's address: a reference to an exported name binds to the first copy's.
    let Some((_, own)) = crate::ffi::intercept::real::object_path(notice_an_earlier_guard as *const c_void) else { return };
    if !crate::ffi::intercept::real::file_name(own).starts_with("libcublasguard") {
        return;
    }
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name only reads the loader's tables.
    let first = unsafe { crate::ffi::intercept::dl::real_dlsym(libc::RTLD_DEFAULT, c"cublasguard_instance".as_ptr()) };
    if first.is_null() || crate::ffi::intercept::real::is_own(first) {
        return;
    }
    lifecycle::pass_through_in_this_process();
    let first = crate::ffi::intercept::real::object_path(first).map_or("another path", |(_, path)| path);
    lifecycle::say(&format!("cublasguard: another copy of the guard is already loaded ({first}); this one ({own}) passes every call through"));
}

#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static NOTICE_AT_LOAD: extern "C" fn() = notice_an_earlier_guard;

/// What a driver entry-point lookup of `symbol` returns, given what it `found`: the guarded copy
/// of whichever hooked variant of `symbol` (`_v2`, `_ptsz`, ...) `found` is, checked against
/// the library's own symbol of that name, so an ABI variant the guard does not wrap (the 32-bit
/// `cuMemAlloc` of a version before 3.2) is never mistaken for one it does. The lookup itself
/// is among them: a static runtime asks `cuGetProcAddress` for "cuGetProcAddress" and may look
/// up everything else through what it got, which must be the guard's wrapper of the right
/// version, or every function found through it would pass the guard by.
pub(crate) fn guarded_entry(symbol: &std::ffi::CStr, found: *mut c_void) -> *mut c_void {
    let symbol = symbol.to_bytes();
    let names = HOOK_NAMES.iter().chain(crate::ffi::intercept::entry_points::DRIVER_LOOKUPS);
    let variants = names.filter(|n| {
        let n = n.as_bytes();
        n.starts_with(symbol) && {
            let rest = &n[symbol.len()..];
            rest.is_empty() || rest.starts_with(b"_v") || rest.starts_with(b"_ptsz")
        }
    });
    for name in variants {
        let Ok(cname) = std::ffi::CString::new(*name) else { continue };
        if crate::ffi::intercept::real::defines(found, &cname) {
            return guarded_copy(&cname, found);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_hook_has_its_name_and_its_real_symbol() {
        assert_eq!(Hook::ALL.len(), HOOK_NAMES.len());
        for (i, hook) in Hook::ALL.iter().enumerate() {
            assert_eq!(hook.index(), i);
            assert!(!hook.name().is_empty());
        }
        assert_eq!(Hook::cublasSgemm_v2.name(), "cublasSgemm_v2");
        assert_eq!(reals::cudaMalloc.name(), "cudaMalloc");
        let mut names = HOOK_NAMES.to_vec();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), HOOK_NAMES.len(), "a function is hooked twice");
    }
}
