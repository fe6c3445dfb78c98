//! The one hook table. Each line declares a hooked symbol with its C signature and its
//! handler; the exported function, the cached real-function pointer and the list of hooked
//! names are all generated from it, so they cannot drift apart.

mod cublas;
mod cudart;
mod gemm;
mod lt;

use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::AtomicBool;

use super::lifecycle;
use super::real::{Library, RealSymbol};
use super::reentry::Reentry;
use crate::session::Session;

/// The hooked function's name, for faults.
fn hook_name(hook: usize) -> &'static str {
    HOOK_NAMES.get(hook).copied().unwrap_or("?")
}

/// Opaque CUDA handles and streams, as the C API passes them.
pub type Handle = *mut c_void;
pub type Stream = *mut c_void;
/// A data pointer (operand, scalar or array of operand pointers).
pub type P = *const c_void;

#[derive(Clone, Copy, Debug)]
pub struct HookedSymbol {
    pub name: &'static str,
    pub library: Library,
}

/// Runs `handler` around the real call, unless this thread is already inside a hook (the
/// guard's own calls, or the library calling itself), or the guard is off. A panic inside
/// the guard never crosses into C: it disables the guard and the real result is returned
/// (the real function is called if the handler had not yet called it).
fn intercept<R: Copy>(forward: impl Fn() -> R, handler: impl FnOnce(&'static Session, &dyn Fn() -> R) -> R) -> R {
    let Some(_inside) = Reentry::enter() else { return forward() };
    let result = Cell::new(None);
    let tracked = || {
        let r = forward();
        result.set(Some(r));
        r
    };
    let outcome = catch_unwind(AssertUnwindSafe(|| match lifecycle::session() {
        Some(s) => handler(s, &tracked),
        None => tracked(),
    }));
    match outcome {
        Ok(r) => r,
        Err(_) => {
            lifecycle::disable("internal error inside a hook");
            result.get().unwrap_or_else(&forward)
        }
    }
}

/// Reports that CUDA could not start, once per hooked function (without a driver every call
/// fails the same way), with the cause found by asking the driver.
fn report_init_failure(
    s: &Session,
    hook: usize,
    seq: u64,
    status: c_int,
    status_name: &str,
    device_count: Option<(i32, Option<i32>)>,
) {
    if !s.first_init_failure(hook) {
        return;
    }
    // The program's own cudaGetDeviceCount answer, if it asked, beats asking again (a pending
    // error would stop the guard from asking without disturbing it).
    let cause = crate::check::init::classify(&super::environment::probe_driver(device_count.or_else(|| s.device_count())));
    s.set_driver_error(cause.message.clone());
    let finding = crate::check::Finding::new(
        crate::trace::FaultKind::InitFailed,
        format!("returned {status_name} ({status}): {}", cause.message),
    );
    let mut fault = lifecycle::new_fault(s, seq, hook_name(hook), finding, status, status_name);
    fault.cause = Some(cause);
    lifecycle::report(s, fault);
}

static MISSING_WARNED: AtomicBool = AtomicBool::new(false);

fn missing_real(name: &str, library: Library) -> c_int {
    lifecycle::warn_once(
        &MISSING_WARNED,
        &format!(
            "cublasguard: cannot find the real {name} (none of {:?} is loaded); returning the library's \
             not-initialised status",
            library.sonames()
        ),
    );
    library.not_initialised()
}

macro_rules! hook_table {
    ( $( $lib:ident fn $name:ident ( $( $arg:ident : $ty:ty ),* $(,)? ) -> $ret:ty => $handler:path ; )* ) => {
        #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        enum Hook { $( $name, )* }

        /// Every hooked symbol, in table order.
        pub static HOOKED: &[HookedSymbol] = &[ $( HookedSymbol { name: stringify!($name), library: Library::$lib }, )* ];

        /// Names of the hooked symbols, indexed like `HOOKED`.
        pub static HOOK_NAMES: &[&str] = &[ $( stringify!($name), )* ];

        #[allow(non_upper_case_globals)]
        mod reals {
            use super::*;
            $( pub static $name: RealSymbol = RealSymbol::new(concat!(stringify!($name), "\0"), Library::$lib); )*
        }

        $(
            #[cfg_attr(not(test), no_mangle)]
            #[allow(non_snake_case, clippy::too_many_arguments)]
            /// # Safety
            /// Called by C code with the arguments of the CUDA function of the same name.
            pub unsafe extern "C" fn $name( $( $arg : $ty ),* ) -> $ret {
                type Real = unsafe extern "C" fn( $( $ty ),* ) -> $ret;
                let Some(real) = reals::$name.get::<Real>() else {
                    return missing_real(stringify!($name), Library::$lib);
                };
                intercept(
                    || real( $( $arg ),* ),
                    |session, forward| $handler(session, Hook::$name as usize, forward, $( $arg ),* ),
                )
            }
        )*
    };
}

hook_table! {
    Cublas fn cublasCreate_v2(handle: *mut Handle) -> c_int => cublas::create;
    Cublas fn cublasDestroy_v2(handle: Handle) -> c_int => cublas::destroy;
    Cublas fn cublasSetStream_v2(handle: Handle, stream: Stream) -> c_int => cublas::set_stream;
    Cublas fn cublasSetPointerMode_v2(handle: Handle, mode: c_int) -> c_int => cublas::set_pointer_mode;
    Cublas fn cublasSetMathMode(handle: Handle, mode: c_int) -> c_int => cublas::set_math_mode;
    Cublas fn cublasSgemm_v2(h: Handle, ta: c_int, tb: c_int, m: c_int, n: c_int, k: c_int, alpha: P, a: P, lda: c_int, b: P, ldb: c_int, beta: P, c: P, ldc: c_int) -> c_int => gemm::sgemm;
    Cublas fn cublasSgemm_v2_64(h: Handle, ta: c_int, tb: c_int, m: i64, n: i64, k: i64, alpha: P, a: P, lda: i64, b: P, ldb: i64, beta: P, c: P, ldc: i64) -> c_int => gemm::sgemm;
    Cublas fn cublasDgemm_v2(h: Handle, ta: c_int, tb: c_int, m: c_int, n: c_int, k: c_int, alpha: P, a: P, lda: c_int, b: P, ldb: c_int, beta: P, c: P, ldc: c_int) -> c_int => gemm::dgemm;
    Cublas fn cublasDgemm_v2_64(h: Handle, ta: c_int, tb: c_int, m: i64, n: i64, k: i64, alpha: P, a: P, lda: i64, b: P, ldb: i64, beta: P, c: P, ldc: i64) -> c_int => gemm::dgemm;
    Cublas fn cublasHgemm(h: Handle, ta: c_int, tb: c_int, m: c_int, n: c_int, k: c_int, alpha: P, a: P, lda: c_int, b: P, ldb: c_int, beta: P, c: P, ldc: c_int) -> c_int => gemm::hgemm;
    Cublas fn cublasHgemm_64(h: Handle, ta: c_int, tb: c_int, m: i64, n: i64, k: i64, alpha: P, a: P, lda: i64, b: P, ldb: i64, beta: P, c: P, ldc: i64) -> c_int => gemm::hgemm;
    Cublas fn cublasSgemmStridedBatched(h: Handle, ta: c_int, tb: c_int, m: c_int, n: c_int, k: c_int, alpha: P, a: P, lda: c_int, sa: i64, b: P, ldb: c_int, sb: i64, beta: P, c: P, ldc: c_int, sc: i64, count: c_int) -> c_int => gemm::sgemm_strided;
    Cublas fn cublasSgemmStridedBatched_64(h: Handle, ta: c_int, tb: c_int, m: i64, n: i64, k: i64, alpha: P, a: P, lda: i64, sa: i64, b: P, ldb: i64, sb: i64, beta: P, c: P, ldc: i64, sc: i64, count: i64) -> c_int => gemm::sgemm_strided;
    Cublas fn cublasDgemmStridedBatched(h: Handle, ta: c_int, tb: c_int, m: c_int, n: c_int, k: c_int, alpha: P, a: P, lda: c_int, sa: i64, b: P, ldb: c_int, sb: i64, beta: P, c: P, ldc: c_int, sc: i64, count: c_int) -> c_int => gemm::dgemm_strided;
    Cublas fn cublasDgemmStridedBatched_64(h: Handle, ta: c_int, tb: c_int, m: i64, n: i64, k: i64, alpha: P, a: P, lda: i64, sa: i64, b: P, ldb: i64, sb: i64, beta: P, c: P, ldc: i64, sc: i64, count: i64) -> c_int => gemm::dgemm_strided;
    Cublas fn cublasHgemmStridedBatched(h: Handle, ta: c_int, tb: c_int, m: c_int, n: c_int, k: c_int, alpha: P, a: P, lda: c_int, sa: i64, b: P, ldb: c_int, sb: i64, beta: P, c: P, ldc: c_int, sc: i64, count: c_int) -> c_int => gemm::hgemm_strided;
    Cublas fn cublasHgemmStridedBatched_64(h: Handle, ta: c_int, tb: c_int, m: i64, n: i64, k: i64, alpha: P, a: P, lda: i64, sa: i64, b: P, ldb: i64, sb: i64, beta: P, c: P, ldc: i64, sc: i64, count: i64) -> c_int => gemm::hgemm_strided;
    Cublas fn cublasSgemmBatched(h: Handle, ta: c_int, tb: c_int, m: c_int, n: c_int, k: c_int, alpha: P, a: P, lda: c_int, b: P, ldb: c_int, beta: P, c: P, ldc: c_int, count: c_int) -> c_int => gemm::sgemm_batched;
    Cublas fn cublasSgemmBatched_64(h: Handle, ta: c_int, tb: c_int, m: i64, n: i64, k: i64, alpha: P, a: P, lda: i64, b: P, ldb: i64, beta: P, c: P, ldc: i64, count: i64) -> c_int => gemm::sgemm_batched;
    Cublas fn cublasGemmEx(h: Handle, ta: c_int, tb: c_int, m: c_int, n: c_int, k: c_int, alpha: P, a: P, at: c_int, lda: c_int, b: P, bt: c_int, ldb: c_int, beta: P, c: P, ct: c_int, ldc: c_int, compute: c_int, algo: c_int) -> c_int => gemm::gemm_ex;
    Cublas fn cublasGemmEx_64(h: Handle, ta: c_int, tb: c_int, m: i64, n: i64, k: i64, alpha: P, a: P, at: c_int, lda: i64, b: P, bt: c_int, ldb: i64, beta: P, c: P, ct: c_int, ldc: i64, compute: c_int, algo: c_int) -> c_int => gemm::gemm_ex;
    Cublas fn cublasGemmStridedBatchedEx(h: Handle, ta: c_int, tb: c_int, m: c_int, n: c_int, k: c_int, alpha: P, a: P, at: c_int, lda: c_int, sa: i64, b: P, bt: c_int, ldb: c_int, sb: i64, beta: P, c: P, ct: c_int, ldc: c_int, sc: i64, count: c_int, compute: c_int, algo: c_int) -> c_int => gemm::gemm_strided_ex;
    Cublas fn cublasGemmStridedBatchedEx_64(h: Handle, ta: c_int, tb: c_int, m: i64, n: i64, k: i64, alpha: P, a: P, at: c_int, lda: i64, sa: i64, b: P, bt: c_int, ldb: i64, sb: i64, beta: P, c: P, ct: c_int, ldc: i64, sc: i64, count: i64, compute: c_int, algo: c_int) -> c_int => gemm::gemm_strided_ex;
    Cublas fn cublasGemmBatchedEx(h: Handle, ta: c_int, tb: c_int, m: c_int, n: c_int, k: c_int, alpha: P, a: P, at: c_int, lda: c_int, b: P, bt: c_int, ldb: c_int, beta: P, c: P, ct: c_int, ldc: c_int, count: c_int, compute: c_int, algo: c_int) -> c_int => gemm::gemm_batched_ex;
    Cublas fn cublasGemmBatchedEx_64(h: Handle, ta: c_int, tb: c_int, m: i64, n: i64, k: i64, alpha: P, a: P, at: c_int, lda: i64, b: P, bt: c_int, ldb: i64, beta: P, c: P, ct: c_int, ldc: i64, count: i64, compute: c_int, algo: c_int) -> c_int => gemm::gemm_batched_ex;
    CublasLt fn cublasLtCreate(handle: *mut *mut c_void) -> c_int => lt::create;
    CublasLt fn cublasLtDestroy(handle: *mut c_void) -> c_int => lt::destroy;
    CublasLt fn cublasLtMatmul(h: *mut c_void, desc: *mut c_void, alpha: P, a: P, ad: *mut c_void, b: P, bd: *mut c_void, beta: P, c: P, cd: *mut c_void, d: *mut c_void, dd: *mut c_void, algo: P, ws: *mut c_void, ws_bytes: usize, stream: Stream) -> c_int => lt::matmul;
    Cudart fn cudaMalloc(dev_ptr: *mut *mut c_void, size: usize) -> c_int => cudart::malloc;
    Cudart fn cudaFree(dev_ptr: *mut c_void) -> c_int => cudart::free;
    Cudart fn cudaMallocAsync(dev_ptr: *mut *mut c_void, size: usize, stream: Stream) -> c_int => cudart::malloc_async;
    Cudart fn cudaFreeAsync(dev_ptr: *mut c_void, stream: Stream) -> c_int => cudart::free_async;
    Cudart fn cudaGetDeviceCount(count: *mut c_int) -> c_int => cudart::get_device_count;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_table_agree() {
        assert_eq!(HOOKED.len(), HOOK_NAMES.len());
        for (i, h) in HOOKED.iter().enumerate() {
            assert_eq!(HOOK_NAMES[i], h.name);
        }
        assert_eq!(Hook::cublasSgemm_v2 as usize, HOOK_NAMES.iter().position(|n| *n == "cublasSgemm_v2").unwrap());
        assert_eq!(reals::cudaMalloc.name(), "cudaMalloc");
    }
}
