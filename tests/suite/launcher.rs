//! `python -m cublasguard` (python/cublasguard), run as a user runs it: from this checkout's
//! python/ folder, with CUBLASGUARD_COMMAND naming the command this build made.

use crate::common;

use common::*;
use std::path::Path;
use std::process::{Command, Output};

fn launcher(args: &[&str], dir: &Path) -> Output {
    Command::new("python3")
        .args(["-m", "cublasguard"])
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("PYTHONPATH", manifest_dir().join("python"))
        .env("CUBLASGUARD_COMMAND", env!("CARGO_BIN_EXE_cublasguard"))
        .env("CUBLASGUARD_LIB", guard_lib())
        .env("CUBLASGUARD_QUIET", "1")
        .output()
        .expect("run python3 -m cublasguard")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The subcommands the command's own --help lists ("Commands:" up to the next blank line).
fn subcommands_in_help() -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_cublasguard")).arg("--help").output().expect("cublasguard --help");
    let help = text(&out.stdout);
    let listing = help.split("\nCommands:\n").nth(1).unwrap_or_else(|| panic!("no Commands: in {help}"));
    listing.lines().take_while(|l| !l.trim().is_empty()).filter_map(|l| l.split_whitespace().next()).map(str::to_string).collect()
}

/// A Python file that says whether it runs under the guard, with which interpreter and arguments.
const PROBE: &str =
    "import os, sys\nprint('preloaded' if 'libcublasguard' in os.environ.get('LD_PRELOAD', '') else 'not preloaded', sys.executable, sys.argv[1:])\n";

fn python3_executable() -> String {
    let out = Command::new("python3").args(["-c", "import sys; print(sys.executable)"]).output().expect("python3");
    text(&out.stdout).trim().to_string()
}

#[test]
fn every_subcommand_of_the_command_goes_through_the_launcher_replay_included() {
    let dir = temp_dir("launcher-subcommands");
    let names = subcommands_in_help();
    assert!(names.iter().any(|n| n == "replay") && names.iter().any(|n| n == "run"), "{names:?}");
    assert!(!names.iter().any(|n| n == "subcommands"), "the machine-readable listing stays hidden: {names:?}");
    for name in names.iter().filter(|n| *n != "help") {
        let out = launcher(&[name, "--help"], &dir);
        let stdout = text(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{name}: {stdout}{}", text(&out.stderr));
        assert!(stdout.contains(&format!("Usage: cublasguard {name}")), "{name} reached the command: {stdout}");
    }
}

#[test]
fn dash_m_runs_a_module_under_the_guard_with_this_python() {
    let dir = temp_dir("launcher-module");
    std::fs::write(dir.join("probe_module.py"), PROBE).unwrap();
    let out = launcher(&["-m", "probe_module", "a", "--lr", "0.1"], &dir);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    let line = stdout.lines().find(|l| l.contains("preloaded")).unwrap_or_else(|| panic!("{stdout}"));
    assert_eq!(line, format!("preloaded {} ['a', '--lr', '0.1']", python3_executable()), "{stdout}");
    // As python's own -m: the name may be glued to the option.
    let glued = launcher(&["-mprobe_module", "b"], &dir);
    assert!(text(&glued.stdout).contains("preloaded") && text(&glued.stdout).contains("['b']"), "{}", text(&glued.stderr));
    let missing = launcher(&["-m"], &dir);
    assert_eq!(missing.status.code(), Some(2));
    assert!(text(&missing.stderr).contains("-m needs a module name"), "{}", text(&missing.stderr));
}

#[test]
fn a_script_runs_under_the_guard_with_this_python() {
    let dir = temp_dir("launcher-script");
    std::fs::write(dir.join("probe.py"), PROBE).unwrap();
    let out = launcher(&["probe.py", "x", "--y"], &dir);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains(&format!("preloaded {} ['x', '--y']", python3_executable())), "{stdout}");
}

#[test]
fn the_launchers_help_shows_the_script_and_module_forms_and_the_commands_own_help() {
    let out = launcher(&["--help"], &temp_dir("launcher-help"));
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(stdout.contains("python -m cublasguard SCRIPT [ARGS...]"), "{stdout}");
    assert!(stdout.contains("python -m cublasguard -m MODULE [ARGS...]"), "{stdout}");
    assert!(stdout.contains("run, report, doctor, timeline, snapshot, demo, replay"), "the subcommands, from the command: {stdout}");
    assert!(stdout.contains("Usage: cublasguard <COMMAND>") && stdout.contains("\nCommands:\n"), "the command's own help follows: {stdout}");
}

#[test]
fn a_word_that_is_neither_a_subcommand_nor_a_file_is_refused_by_name() {
    let out = launcher(&["reprot", "trace.json"], &temp_dir("launcher-typo"));
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("'reprot' is neither a subcommand") && stderr.contains("report"), "{stderr}");
    let option = launcher(&["--frobnicate"], &temp_dir("launcher-option"));
    assert_eq!(option.status.code(), Some(2));
    assert!(text(&option.stderr).contains("unknown option --frobnicate"), "{}", text(&option.stderr));
}

#[test]
fn the_launcher_passes_the_version_through() {
    let out = launcher(&["--version"], &temp_dir("launcher-version"));
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).starts_with(&format!("cublasguard {}", env!("CARGO_PKG_VERSION"))), "{}", text(&out.stdout));
}
