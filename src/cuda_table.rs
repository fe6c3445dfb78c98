//! Every CUDA function the command calls itself (the doctor's driver and library versions,
//! replay's rerun), from the one list the guard shares (`cublasguard_cuda::with_cuda_api!`,
//! crates/cuda), looked up through libloading: one table a library, each function a field of
//! its own name, `None` where the library lacks it; a missing library is an error, never a
//! panic. Unlike the guard, the command loads these libraries on purpose, to ask them. The
//! functions stay `unsafe`: their contracts are NVIDIA's (each field's doc).

use std::ffi::{c_int, c_void};

/// The sonames each library is looked for by, newest first.
macro_rules! sonames {
    (Cudart) => {
        ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]
    };
    (Cublas) => {
        ["libcublas.so.13", "libcublas.so.12", "libcublas.so"]
    };
    (CublasLt) => {
        ["libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"]
    };
    (Cudnn) => {
        ["libcudnn.so.9"]
    };
    (Driver) => {
        ["libcuda.so.1"]
    };
}

macro_rules! cuda_tables {
    ( $( $table:ident { $( $(#[$doc:meta])* fn $name:ident ( $( $arg:ident : $ty:ty ),* $(,)? ) -> $ret:ty ; )* } )* ) => {
        $(
            /// Functions of one library, each `None` where the library lacks it (the list is
            /// shared with the guard: the command asks only some).
            #[allow(non_snake_case, dead_code)]
            pub struct $table {
                $(
                    /// Its contract, beyond the types:
                    $(#[$doc])*
                    pub $name: Option<unsafe extern "C" fn( $( $ty ),* ) -> $ret>,
                )*
                /// Kept loaded while the functions are in use (dropped with the table).
                #[allow(dead_code)]
                library: libloading::Library,
            }

            impl $table {
                #[allow(dead_code)] // not every table's user asks
                /// The first of the library's sonames the loader can open.
                pub fn load() -> Result<Self, String> {
                    let names = sonames!($table);
                    let mut errors = Vec::new();
                    for name in names {
                        // SAFETY: loading a CUDA library runs its initialisers, as any CUDA program does.
                        match unsafe { libloading::Library::new(name) } {
                            Ok(library) => return Ok(Self::from_library(library)),
                            Err(e) => errors.push(e.to_string()),
                        }
                    }
                    Err(if names.len() == 1 { errors.join("; ") } else { format!("none of {} could be loaded (is CUDA on the library path?)", names.join(", ")) })
                }

                #[allow(dead_code)] // not every table's user asks
                /// The library by one soname or path (`libcublas.so.12`), as the loader finds it,
                /// with every symbol bound at once (RTLD_NOW): a library whose dependency lacks
                /// one (a libcublasLt of another release) is an error here, not a lookup error
                /// that ends the process at its first call.
                pub fn open(name: &str) -> Result<Self, String> {
                    use libloading::os::unix::{Library, RTLD_LOCAL, RTLD_NOW};
                    // SAFETY: loading a CUDA library runs its initialisers, as any CUDA program does.
                    unsafe { Library::open(Some(name), RTLD_NOW | RTLD_LOCAL) }.map(|l| Self::from_library(l.into())).map_err(|e| e.to_string())
                }

                fn from_library(library: libloading::Library) -> Self {
                    Self {
                        // SAFETY: each symbol is typed with its C signature from NVIDIA's headers
                        // (the shared list is the one place it is written down).
                        $( $name: unsafe { library.get::<unsafe extern "C" fn( $( $ty ),* ) -> $ret>(concat!(stringify!($name), "\0").as_bytes()) }.ok().map(|f| *f), )*
                        library,
                    }
                }

                #[allow(dead_code)] // not every table's user asks
                /// Whether the library exports `symbol` (a NUL-terminated name), whatever its type.
                pub fn has(&self, symbol: &[u8]) -> bool {
                    // SAFETY: only the symbol's presence is looked at; it is never called.
                    unsafe { self.library.get::<*const c_void>(symbol) }.is_ok()
                }

                #[allow(dead_code)] // not every table's user asks
                /// Never unloaded: unloading a CUDA library is never worth the risk.
                pub fn keep_loaded(self) {
                    std::mem::forget(self.library);
                }
            }
        )*
    };
}

cublasguard_cuda::with_cuda_api!(cuda_tables);

/// The file of the loaded object that holds `address` (a function of a loaded library).
pub fn object_file(address: *const c_void) -> Option<std::path::PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    // SAFETY: a zeroed Dl_info is a valid out-parameter.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: dladdr only reads the loader's tables; the address is a symbol of a loaded library.
    if unsafe { libc::dladdr(address, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr set dli_fname to the object's NUL-terminated file name.
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    Some(std::path::PathBuf::from(std::ffi::OsStr::from_bytes(name.to_bytes())))
}

/// The file of the loaded object whose name starts with `prefix` (`libcublas.so.12`), as the
/// loader records it (dl_iterate_phdr): for a library that exports nothing to ask.
pub fn loaded_file(prefix: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    struct Search<'a> {
        prefix: &'a [u8],
        found: Option<std::path::PathBuf>,
    }
    unsafe extern "C" fn visit(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
        // SAFETY: the loader hands a valid info for the duration of the call, and `data` is the
        // `Search` passed below, alive for the whole dl_iterate_phdr.
        let (info, search) = unsafe { (&*info, &mut *(data as *mut Search)) };
        if info.dlpi_name.is_null() {
            return 0;
        }
        // SAFETY: dlpi_name is the object's NUL-terminated file name.
        let name = unsafe { std::ffi::CStr::from_ptr(info.dlpi_name) }.to_bytes();
        let base = name.rsplit(|&b| b == b'/').next().unwrap_or(name);
        if base.starts_with(search.prefix) {
            search.found = Some(std::path::PathBuf::from(std::ffi::OsStr::from_bytes(name)));
            return 1;
        }
        0
    }
    let mut search = Search { prefix: prefix.as_bytes(), found: None };
    // SAFETY: the callback only reads what the loader hands it and writes `search`.
    unsafe { libc::dl_iterate_phdr(Some(visit), &mut search as *mut Search as *mut c_void) };
    search.found
}
