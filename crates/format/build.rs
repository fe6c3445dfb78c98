//! The version label the trace and `--version` carry: the git commit of a build from a clone,
//! nothing from a source archive.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    let version = env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    // The workspace root: crates/format/../..
    let root = manifest.ancestors().nth(2).map(PathBuf::from).unwrap_or(manifest);
    let git = root.join(".git");
    let commit = git
        .exists()
        .then(|| Command::new("git").args(["rev-parse", "--short=12", "HEAD"]).current_dir(&root).output().ok())
        .flatten()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|c| !c.is_empty());
    match &commit {
        Some(commit) => {
            println!("cargo:rustc-env=CUBLASGUARD_GIT_COMMIT={commit}");
            println!("cargo:rustc-env=CUBLASGUARD_VERSION_LABEL={version} (git {commit})");
        }
        None => println!("cargo:rustc-env=CUBLASGUARD_VERSION_LABEL={version}"),
    }
    for watched in ["HEAD", "refs/heads", "packed-refs"] {
        if git.join(watched).exists() {
            println!("cargo:rerun-if-changed={}", git.join(watched).display());
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
}
