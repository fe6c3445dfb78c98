//! Every CUDA function the guard calls itself, from the one list the command shares
//! (`cublasguard_cuda::with_cuda_api!`, crates/cuda), looked up once (in the library the program
//! already loaded, never loading one). Each is an `unsafe fn` whose contract is NVIDIA's for
//! that function (its doc, from the list), and returns `None` when its library is not loaded or
//! lacks it. The safe layer above it is `device.rs` (the `Device` trait: slices, plain values,
//! `Result`) and `device_scan.rs`; nothing outside `ffi` calls this table.
//!
//! The guard must find the exact copy the program loaded (RTLD_LOCAL included, see `real.rs`),
//! so the lookup is its own `RealSymbol`, not the command's libloading.

use crate::ffi::intercept::real::{Library, RealSymbol};

pub(crate) use cublasguard_cuda::PointerAttributes;

macro_rules! cuda_functions {
    ( $( $lib:ident { $( $(#[$doc:meta])* fn $name:ident ( $( $arg:ident : $ty:ty ),* $(,)? ) -> $ret:ty ; )* } )* ) => {
        #[allow(non_upper_case_globals, dead_code)]
        mod symbols {
            use super::*;
            $( $( pub static $name: RealSymbol = RealSymbol::new(concat!(stringify!($name), "\0"), Library::$lib); )* )*
        }
        $( $(
            /// # Safety
            /// The arguments have the types NVIDIA's headers give, and:
            $(#[$doc])*
            #[allow(non_snake_case, clippy::too_many_arguments, dead_code)]
            pub(crate) unsafe fn $name( $( $arg : $ty ),* ) -> Option<$ret> {
                type F = unsafe extern "C" fn( $( $ty ),* ) -> $ret;
                // SAFETY: `F` is the function's C signature as NVIDIA's headers declare it (the
                // shared list is the one place it is written down).
                let f = unsafe { symbols::$name.get::<F>() }?;
                // SAFETY: the caller's arguments, under this function's contract.
                Some(unsafe { f( $( $arg ),* ) })
            }
        )* )*
    };
}

cublasguard_cuda::with_cuda_api!(cuda_functions);
