//! The README's console example is what the program prints today: its commands are run as
//! written (from a folder outside the repository, after the README's `export CUBLASGUARD=...`),
//! and their output compared line by line, with pids, addresses, the host and the folders
//! mapped to the README's.

use crate::common;

use common::*;
use std::collections::BTreeMap;
use std::process::Command;

/// The README's folders: where the user is, and the clone.
const HOME: &str = "/home/me";
const CLONE: &str = "/home/me/cublasguard";
const PID: &str = "7721";
const HOST: &str = "vm";

fn console_block(readme: &str) -> Vec<String> {
    let start = readme.find("```console\n").expect("a console block") + "```console\n".len();
    let end = start + readme[start..].find("```").expect("its end");
    readme[start..end].lines().map(str::to_string).collect()
}

/// What the README's `cargo build --release` leaves in target/release (the command, the
/// library, the stand-in stack), assembled from where this `cargo test` put them: the README's
/// quick start runs `cargo run --release -- demo` then `cargo test --release`, neither of which
/// copies the library up to target/release/, and a copy found there may be stale.
fn built_release(dir: &std::path::Path) -> std::path::PathBuf {
    for (name, source) in [("libcublasguard.so", guard_lib()), ("cublasguard", cli()), ("stand-in", profile_dir().join("stand-in"))] {
        assert!(source.exists(), "{} missing: cargo builds it with the tests", source.display());
        // Copies, not links: a trace names the program by its real path.
        let status = Command::new("cp").arg("-a").arg(&source).arg(dir.join(name)).status().expect("cp");
        assert!(status.success(), "copying {}", source.display());
    }
    dir.to_path_buf()
}

fn hostname() -> String {
    let out = Command::new("hostname").output().expect("hostname");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

#[test]
fn the_readmes_console_example_prints_what_the_program_prints() {
    let readme = std::fs::read_to_string(manifest_dir().join("README.md")).unwrap();
    let lines = console_block(&readme);
    let home = temp_dir("readme-home");
    let root = manifest_dir().display().to_string();
    let host = hostname();
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    env.insert("CUBLASGUARD".into(), built_release(&temp_dir("readme-release")).display().to_string());
    env.insert("PATH".into(), std::env::var("PATH").unwrap_or_default());
    let mut pid: Option<String> = None;
    // Commands with the README's output under each.
    let mut steps: Vec<(String, Vec<String>)> = Vec::new();
    for line in lines {
        match line.strip_prefix("$ ") {
            Some(command) => steps.push((command.to_string(), Vec::new())),
            None => steps.last_mut().expect("output after a command").1.push(line),
        }
    }
    assert!(steps.len() >= 3, "{steps:?}");
    for (command, expected) in steps {
        // What the README names is this run's: its folder, and once known, its pid and host.
        let mut command = command.replace(HOME, &home.display().to_string());
        if let Some(pid) = &pid {
            command = command.replace(&format!("-{HOST}-{PID}"), &format!("-{host}-{pid}"));
        }
        let run = |script: &str| Command::new("bash").arg("-c").arg(script).current_dir(&home).env_clear().envs(&env).output().expect("bash");
        if let Some(assignment) = command.strip_prefix("export ") {
            let (name, value) = assignment.split_once('=').expect("NAME=VALUE");
            let out = run(&format!("printf %s {value}"));
            env.insert(name.to_string(), String::from_utf8_lossy(&out.stdout).into_owned());
            assert!(expected.is_empty(), "an export prints nothing");
            continue;
        }
        let out = run(&format!("{command} 2>&1"));
        let printed = String::from_utf8_lossy(&out.stdout).into_owned();
        if pid.is_none() {
            pid = printed.split("guarding pid ").nth(1).and_then(|r| r.split_whitespace().next()).map(str::to_string);
        }
        let normal = |text: &str| {
            let mut t = text.replace(&home.display().to_string(), HOME).replace(&root, CLONE);
            if let Some(pid) = &pid {
                t = t.replace(&format!("pid {pid}"), &format!("pid {PID}")).replace(&format!("-{host}-{pid}"), &format!("-{HOST}-{PID}"));
            }
            t = t.replace(&format!(" on {host} "), &format!(" on {HOST} "));
            without_addresses(&t)
        };
        // stdout and stderr interleave differently on a pipe than on a terminal: compare the
        // lines, not their order.
        let mut got: Vec<String> = printed.lines().map(normal).collect();
        let mut want: Vec<String> = expected.iter().map(|l| without_addresses(l)).collect();
        got.sort();
        want.sort();
        // The message shows what was printed as printed: a loader's error names the real folders.
        assert_eq!(got, want, "`{command}` prints what the README shows; it printed, unmapped:\n{printed}");
    }
    // The example leaves its trace where the user was, not in the clone.
    assert!(std::fs::read_dir(&home).unwrap().flatten().any(|e| e.file_name().to_string_lossy().starts_with("cublasguard-")));
}

/// The `CUBLASGUARD_*` names in the first column of a Markdown table's rows.
fn table_variables(page: &str) -> std::collections::BTreeSet<String> {
    page.lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .filter(|v| v.starts_with("CUBLASGUARD_"))
        .map(str::to_string)
        .collect()
}

/// The `CUBLASGUARD_*` names in `source` that follow `before` (`lookup("`, `var("`).
fn variables_after(source: &str, before: &str) -> std::collections::BTreeSet<String> {
    source.split(before).skip(1).filter_map(|rest| rest.split('"').next()).filter(|v| v.starts_with("CUBLASGUARD_")).map(str::to_string).collect()
}

/// The variables the `cublasguard` command reads at run time: `std::env::var`/`var_os` and
/// clap's `env = "..."` in src/ and its folders (not `env!`, which is the build's).
fn variables_the_command_reads() -> std::collections::BTreeSet<String> {
    let mut read = std::collections::BTreeSet::new();
    let mut files = Vec::new();
    rust_files(&manifest_dir().join("src"), &mut files);
    for file in files {
        let Ok(source) = std::fs::read_to_string(file) else { continue };
        for before in ["var(\"", "var_os(\"", "env = \""] {
            read.extend(variables_after(&source, before));
        }
    }
    read
}

#[test]
fn the_configuration_page_lists_exactly_the_variables_the_library_and_the_command_read() {
    let config = std::fs::read_to_string(manifest_dir().join("crates/format/src/config.rs")).unwrap();
    let library = variables_after(&config, "lookup(\"");
    assert!(library.len() > 20, "{library:?}");
    let command = variables_the_command_reads();
    for read_by_run in ["CUBLASGUARD_LIB", "CUBLASGUARD_GPU_COREDUMP", "CUBLASGUARD_TRACE", "CUBLASGUARD_STAGING_BYTES"] {
        assert!(command.contains(read_by_run), "{read_by_run} is found among what the command reads: {command:?}");
    }
    let read: std::collections::BTreeSet<String> = library.union(&command).cloned().collect();
    let page = std::fs::read_to_string(manifest_dir().join("docs/configuration.md")).unwrap();
    assert_eq!(table_variables(&page), read, "docs/configuration.md's table and what crates/format/src/config.rs and src/ read");
}

#[test]
fn run_help_and_the_cli_page_list_the_same_options_and_variables() {
    let out = Command::new(cli()).args(["run", "--help"]).output().expect("cublasguard run --help");
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    let page = std::fs::read_to_string(manifest_dir().join("docs/cli.md")).unwrap();
    let table = &page[page.find("## `run`'s options").expect("the options table")..];
    let options: Vec<(String, String)> = table
        .lines()
        .filter_map(|l| l.strip_prefix("| `--"))
        .map(|l| {
            let option = format!("--{}", l.split([' ', '`']).next().unwrap());
            let variable = l.split("| `").nth(1).and_then(|v| v.split(['`', '=']).next()).unwrap_or_default().to_string();
            (option, variable)
        })
        .collect();
    let in_help: std::collections::BTreeSet<String> = help
        .lines()
        .map(str::trim_start)
        .filter(|l| l.starts_with("--") || l.starts_with('-'))
        .filter_map(|l| l.split([' ', ',', '=']).find(|w| w.starts_with("--")).map(str::to_string))
        .collect();
    let listed: std::collections::BTreeSet<String> = options.iter().map(|(o, _)| o.clone()).collect();
    let mut expected = in_help.clone();
    expected.remove("--help");
    assert_eq!(listed, expected, "docs/cli.md's run options and `run --help`");
    for (option, variable) in &options {
        assert!(variable.starts_with("CUBLASGUARD_"), "{option}: {variable}");
        assert!(help.contains(variable.as_str()), "`run --help` names {variable} ({option})");
    }
    let readme = std::fs::read_to_string(manifest_dir().join("README.md")).unwrap();
    assert!(readme.lines().count() <= 250, "the README stays short: {} lines", readme.lines().count());
}

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &std::path::Path, into: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

/// Whether `page` has `name` as a whole word: not the tail of a longer name (`scans.rs` must not
/// pass for `scan.rs`, nor `verdict_memory.rs` for `memory.rs` beside an absent one).
fn names(page: &str, name: &str) -> bool {
    page.match_indices(name).any(|(at, _)| {
        let before = page[..at].chars().next_back();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

#[test]
fn the_layout_page_names_every_module() {
    let root = manifest_dir();
    let page = std::fs::read_to_string(root.join("docs/layout.md")).unwrap();
    let mut files = Vec::new();
    for dir in ["src", "crates/cuda/src", "crates/format/src", "crates/nvml/src", "crates/preload/src"] {
        rust_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 90, "{files:?}");
    let missing: Vec<String> = files
        .iter()
        .map(|path| {
            let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
            // A folder's mod.rs is the folder: `hooks/`, `operand_call/`.
            if stem == "mod" {
                format!("{}/", path.parent().unwrap().file_name().unwrap().to_string_lossy())
            } else {
                format!("{stem}.rs")
            }
        })
        .filter(|name| !names(&page, name))
        .collect();
    assert!(missing.is_empty(), "docs/layout.md does not name {missing:?}");
}

#[test]
fn benchmarks_md_is_todays_table_and_how_to_reproduce_with_the_history_apart() {
    let page = std::fs::read_to_string(manifest_dir().join("BENCHMARKS.md")).unwrap();
    let headings: Vec<&str> = page.lines().filter(|l| l.starts_with("## ")).collect();
    assert_eq!(headings, ["## Reproduce"], "dated sections go to docs/benchmarks-history.md");
    assert!(page.lines().count() <= 60, "BENCHMARKS.md stays short: {} lines", page.lines().count());
    assert!(page.contains("docs/benchmarks-history.md"));
}
