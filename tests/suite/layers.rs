//! The preload library's layers, checked in its sources: the policy modules (guard, check,
//! session, the recorder, redaction) never reach back into the FFI edge, forbid unsafe code, and
//! the command never uses the preload library's code.

use std::path::{Path, PathBuf};

use crate::common::manifest_dir;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

const POLICY: &[&str] = &["guard", "check", "session", "recorder.rs", "redact.rs"];

fn policy_files() -> Vec<PathBuf> {
    let src = manifest_dir().join("crates/preload/src");
    let mut files = Vec::new();
    for part in POLICY {
        let path = src.join(part);
        if path.is_dir() {
            rust_files(&path, &mut files);
        } else {
            files.push(path);
        }
    }
    assert!(files.len() > 10, "the policy modules were not found: {files:?}");
    files
}

/// A line that names the edge as a path: `crate::ffi`, `super::ffi`, `super::super::ffi`, or a
/// `use crate::{ffi, ...}` group. `std::ffi` (C types) is not the edge.
fn names_the_edge(line: &str) -> bool {
    let code = line.split("//").next().unwrap_or("");
    code.contains("crate::ffi") || code.contains("super::ffi") || (code.contains("use crate::{") && code.contains("ffi"))
}

#[test]
fn no_policy_module_imports_from_the_ffi_edge() {
    let mut back_edges = Vec::new();
    for file in policy_files() {
        let text = std::fs::read_to_string(&file).expect("read source");
        for (n, line) in text.lines().enumerate() {
            if names_the_edge(line) {
                back_edges.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(back_edges.is_empty(), "imports from the FFI edge outside it:\n{}", back_edges.join("\n"));
}

#[test]
fn the_back_edge_check_sees_each_form_of_an_import() {
    for line in ["use crate::ffi::host::thread;", "    crate::ffi::intercept::out_param::written(p)", "use super::super::ffi::x;", "use crate::{ffi, trace};"] {
        assert!(names_the_edge(line), "{line}");
    }
    for line in ["use std::ffi::{c_int, c_void};", "// crate::ffi is the edge", "let s = std::ffi::CString::new(x);"] {
        assert!(!names_the_edge(line), "{line}");
    }
}

#[test]
fn every_policy_module_forbids_unsafe_code_and_every_unsafe_block_of_the_guard_and_the_command_is_linted() {
    let src = manifest_dir().join("crates/preload/src");
    for root in ["guard/mod.rs", "check/mod.rs", "session/mod.rs", "recorder.rs", "redact.rs"] {
        let text = std::fs::read_to_string(src.join(root)).expect("read module root");
        assert!(text.lines().any(|l| l.trim() == "#![forbid(unsafe_code)]"), "{root} does not forbid unsafe code");
    }
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("read lib.rs");
    let command = std::fs::read_to_string(manifest_dir().join("src/main.rs")).expect("read main.rs");
    for lint in ["#![deny(unsafe_op_in_unsafe_fn)]", "#![deny(clippy::undocumented_unsafe_blocks)]"] {
        assert!(lib.contains(lint), "lib.rs lacks {lint}");
        assert!(command.lines().any(|l| l.trim() == lint), "the command's main.rs lacks {lint}: its unsafe blocks go unchecked");
    }
}

#[test]
fn the_command_uses_nothing_of_the_preload_library() {
    let mut files = Vec::new();
    rust_files(&manifest_dir().join("src"), &mut files);
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read source");
        assert!(!text.contains("preload_library") && !text.contains("cublasguard_preload"), "{} uses the preload library", file.display());
    }
}
