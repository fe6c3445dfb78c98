//! The one hook table expanded. Each line declares a hooked symbol with its C signature and its
//! handler; the exported function, the cached real-function pointer and the list of hooked
//! names are all generated from it, so they cannot drift apart. Here: the exports and the way
//! every call goes (`intercept_on`); the lean path of the calls that have one (`lean`); the
//! guarded copies for libraries reached through `dlsym` and the driver's entry points
//! (`copies`); one guard a process (`instance`).

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
use crate::hook_args::{Acc, Declare, In, InOut, Out, ResultOut, Scalar, Workspace};
use crate::hook_list::{Hook, HOOK_COUNT, HOOK_NAMES};
use crate::recorder::{CallArgs, RecordedCall};
use crate::session::call_site::HookFrame;
use crate::session::{LeanGemm, Session};

/// Opaque CUDA handles and streams, as the C API passes them.
type Handle = *mut c_void;
type Stream = *mut c_void;
/// A data pointer (operand, scalar or array of operand pointers).
type P = *const c_void;

#[macro_use]
mod lean;
mod copies;
mod instance;

pub(crate) use copies::{forget_unloaded_copies, guarded_copy, guarded_entry};
use copies::{COPIES, COPY_REALS};
use lean::LeanCall;

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
            handler(&Call::uncounted(s, hook, &device, (&RealOutlet, &RealOutlet), tracked, &t.memo))
        }
        Some(s) => {
            let device = RealDevice::new(s, t);
            let frame = HookFrame::new(frame, crate::ffi::host::thread::stack_of(t));
            let thread = OnThread { id: process::thread_id_of(t), memo: &t.memo, frame };
            let call = Call::begin(s, hook, &device, &RealOutlet, &RealOutlet, tracked, thread);
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

/// The body of a hook's export and of its guarded copies, around `$real`: the thread's block
/// reached once, the lean path of a hook that has one, `intercept_on` otherwise. `$frame`: the
/// export's frame, evaluated where it is needed (`hook_frame!()` in the export itself, whose
/// frame register holds it all through its body: a clean lean call never reads it).
macro_rules! guarded_call {
    ( $name:ident ; $real:ident ; $frame:expr ; $handler:path ; $( $kind:ident $( $lean:path )? )? ; $( $arg:ident ),* ) => {
        PER_THREAD
            .try_with(|t| {
                lean_path!( $( $kind $( $lean )? )? ; t ; $name ; $real ; $frame ; $handler ; $( $arg ),* );
                let args = &( $( $arg, )* );
                intercept_on(
                    t,
                    Hook::$name,
                    $frame,
                    // SAFETY: the caller's arguments, passed on unchanged to the real function.
                    &move || { let ( $( $arg, )* ) = *args; unsafe { $real( $( $arg ),* ) } },
                    move |call| { let ( $( $arg, )* ) = *args; handler_call!( $( $kind )? ; $name ; $handler ; call ; $( $arg ),* ) },
                )
            })
            // The block has no destructor, so it is never gone; were it, the call passes.
            // SAFETY: as above.
            .unwrap_or_else(|_| unsafe { $real( $( $arg ),* ) })
    };
}

/// A hook's handler called with the arguments: each as it is, or, on a `declared` line, all of
/// them as `hook_args::Args`, each with its name and the kind its type in the table declares.
macro_rules! handler_call {
    ( declared ; $name:ident ; $handler:path ; $call:ident ; $( $arg:ident ),* ) => {
        $handler($call, crate::hook_args::Args::new(Hook::$name, &[ $( Declare::declared($arg, stringify!($arg)) ),* ]))
    };
    ( $( $kind:ident )? ; $name:ident ; $handler:path ; $call:ident ; $( $arg:ident ),* ) => {
        $handler($call, $( $arg ),* )
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
    ( $( $lib:ident fn $name:ident ( $( $arg:ident : $ty:ty ),* $(,)? ) -> $ret:ty => $handler:path $( , $kind:ident $( $lean:path )? )? ; )* ) => {
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
                    guarded_call!( $name ; real ; frame ; $handler ; $( $kind $( $lean )? )? ; $( $arg ),* )
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
                guarded_call!( $name ; real ; hook_frame!() ; $handler ; $( $kind $( $lean )? )? ; $( $arg ),* )
            }
        )*
    };
}

crate::hook_list::with_hook_table!(hook_table);

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
