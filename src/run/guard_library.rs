//! Where the guard (libcublasguard.so) is: named by CUBLASGUARD_LIB, beside the command, or where
//! the Python wheel or a hand install put it. `run` preloads it; `doctor` says where it is.

use std::path::{Path, PathBuf};

use crate::output::CliError;

/// `CUBLASGUARD_LIB`, else beside this executable (or in its `deps/`, where `cargo run` and
/// `cargo test` leave it without copying it up: the newer of the two), else where the Python
/// wheel installs it (../share/cublasguard/lib), else in ../lib.
pub fn find_guard_library() -> Result<PathBuf, CliError> {
    if let Some(path) = std::env::var_os("CUBLASGUARD_LIB") {
        let path = PathBuf::from(path);
        return if path.is_file() { Ok(path) } else { Err(CliError::usage(format!("CUBLASGUARD_LIB={} is not a file", path.display()))) };
    }
    let exe = std::env::current_exe().map_err(|e| CliError::usage(format!("cannot locate this executable: {e}")))?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    let beside = [dir.join("libcublasguard.so"), dir.join("deps/libcublasguard.so")];
    let newest =
        beside.iter().filter_map(|p| Some((std::fs::metadata(p).ok()?.modified().ok()?, p))).max_by_key(|(modified, _)| *modified).map(|(_, p)| p.clone());
    // Installed: by the Python wheel (<prefix>/share/cublasguard/lib, beside <prefix>/bin), or
    // by hand into <prefix>/lib.
    let installed = [dir.join("../share/cublasguard/lib/libcublasguard.so"), dir.join("../lib/libcublasguard.so")]
        .into_iter()
        .find(|p| p.is_file())
        .unwrap_or_else(|| dir.join("../share/cublasguard/lib/libcublasguard.so"));
    let installed_found = installed.is_file().then(|| installed.canonicalize().unwrap_or_else(|_| installed.clone()));
    newest.or(installed_found).ok_or_else(|| {
        CliError::usage(format!(
            "libcublasguard.so not found (looked at {}, {} and {}); build it with `cargo build --release` or set \
             CUBLASGUARD_LIB",
            beside[0].display(),
            beside[1].display(),
            installed.display()
        ))
    })
}
