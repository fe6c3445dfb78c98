//! Dumps under hostile conditions: a program short of memory, a dump folder shared by runs
//! with the same pid (containers), a full disk or a file-size limit mid-write.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::*;
use cublasguard_format::dump;
use cublasguard_format::trace::{self, FaultKind};

fn big_dump() -> PathBuf {
    build_c("big_dump", &["big_dump.c"], false)
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).map(|d| d.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect()).unwrap_or_default();
    names.sort();
    names
}

fn peak_kb(run: &Run) -> u64 {
    run.stdout().lines().find_map(|l| l.strip_prefix("peak_kb=")?.parse().ok()).unwrap_or_else(|| panic!("no peak: {}{}", run.stdout(), run.stderr()))
}

#[test]
fn a_dump_that_cannot_be_allocated_is_left_out_and_the_program_runs_on() {
    // A of 16 Mi floats (64 MiB); the program holds A and C on the (stand-in) device.
    const ELEMENTS: u64 = 16 << 20;
    const BYTES: u64 = ELEMENTS * 4;
    let program = big_dump();
    let elements = ELEMENTS.to_string();
    // How much address space the guarded program needs without dumps; half an operand more
    // leaves no room for a copy of A.
    // One malloc arena: a thread's own arena reserves 64 MiB of address space when the thread
    // first allocates, and the stand-in GPU's worker thread does so at a moment that varies
    // from run to run, which would move the limit by a whole operand.
    let one_arena = ("MALLOC_ARENA_MAX", "1");
    let measured = run(Launch { env: &[one_arena], ..Launch::new(&program, &[&elements]) });
    assert_eq!(measured.code(), Some(0), "{}", measured.stderr());
    let limit = format!("as={}", peak_kb(&measured) + BYTES / 2 / 1024);

    let bare = run(Launch { env: &[one_arena], guarded: false, ..Launch::new(&program, &[&elements, &limit]) });
    let dir = temp_dir("oom-dumps");
    let dumps = dir.join("dumps").display().to_string();
    let guarded = run(Launch { env: &[("CUBLASGUARD_DUMP", &dumps), one_arena], ..Launch::new(&program, &[&elements, &limit]) });
    assert_eq!(bare.code(), Some(0), "{}", bare.stderr());
    assert_eq!(
        guarded.output.status.code(),
        bare.output.status.code(),
        "the dump must not kill the program: {:?}\n{}",
        guarded.output.status,
        guarded.stderr()
    );
    let t = guarded.trace();
    let f = only_fault(&t);
    assert_eq!(f.kind, FaultKind::NonfiniteInput, "{}", f.message);
    let note = f.dump_note.as_deref().unwrap_or_default();
    assert!(note.contains(&format!("A not dumped: {BYTES} bytes could not be allocated")), "{note}");
    // What fits is still dumped: B, the one NaN.
    let d = dump::decode(&std::fs::read(f.dump.as_ref().expect("a dump of what fits")).unwrap()).unwrap();
    assert!(d.tensors.contains_key("B") && !d.tensors.contains_key("A"), "{:?}", d.tensors.keys());
}

/// Starts `big_dump ELEMENTS wait` under the guard with dumps in `dumps` and its trace at
/// `trace`; once it is ready, `plant(pid)` runs, then the call is made.
fn waiting_run(elements: &str, dumps: &Path, trace_path: &Path, plant: impl FnOnce(u32)) -> std::process::Output {
    let s = standin();
    let mut child = Command::new(big_dump())
        .args([elements, "wait"])
        .env_clear()
        .env("LD_LIBRARY_PATH", format!("{}:{}", s.join("lib").display(), s.join("driver").display()))
        .env("LD_PRELOAD", guard_lib())
        .env("CUBLASGUARD_TRACE", trace_path)
        .env("CUBLASGUARD_DUMP", dumps)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut line = String::new();
    stdout.read_line(&mut line).expect("read");
    assert_eq!(line.trim(), "ready");
    plant(child.id());
    child.stdin.take().expect("stdin").write_all(b"go\n").expect("write");
    child.wait_with_output().expect("wait")
}

#[test]
fn a_second_run_with_the_same_pid_keeps_both_runs_dumps() {
    let dir = temp_dir("same-pid");
    let dumps = dir.join("dumps");
    let first = waiting_run("8", &dumps, &dir.join("first.json"), |_| ());
    assert!(first.status.success());
    let t = trace::read(&dir.join("first.json")).unwrap();
    let f = only_fault(&t);
    let first_path = PathBuf::from(f.dump.clone().unwrap_or_else(|| panic!("{:?}", f.dump_note)));
    let first_bytes = std::fs::read(&first_path).unwrap();
    // The second run gets the first one's pid, as every container's first process is pid 1:
    // the name its dump would take is already there, holding the first run's dump.
    let (seq, api) = (f.seq, f.api.clone());
    let mut planted = PathBuf::new();
    let second = waiting_run("8", &dumps, &dir.join("second.json"), |pid| {
        planted = dumps.join(format!("cublasguard-{pid}-{seq}-{api}.safetensors"));
        std::fs::copy(&first_path, &planted).unwrap();
    });
    assert!(second.status.success(), "{}", String::from_utf8_lossy(&second.stderr));
    let t = trace::read(&dir.join("second.json")).unwrap();
    let g = only_fault(&t);
    let second_path = PathBuf::from(g.dump.clone().unwrap_or_else(|| panic!("the second dump failed: {:?}", g.dump_note)));
    assert_ne!(second_path, planted);
    let prefix = planted.file_stem().unwrap().to_string_lossy().into_owned();
    assert!(second_path.file_name().unwrap().to_string_lossy().starts_with(&prefix), "the readable prefix stays: {}", second_path.display());
    assert_eq!(std::fs::read(&planted).unwrap(), first_bytes, "the earlier dump is untouched");
    assert!(dump::decode(&std::fs::read(&second_path).unwrap()).is_ok());
    assert_eq!(files_in(&dumps).len(), 3, "{:?}", files_in(&dumps));
}

/// A dump that could not be written in full leaves nothing in the folder: no file with a
/// dump's name, no temporary file.
fn assert_no_partial_dump(listing: &[String], note: Option<&str>, dump: Option<&str>, case: &str) {
    assert!(listing.is_empty(), "{case}: {listing:?}");
    assert_eq!(dump, None, "{case}");
    assert!(note.unwrap_or_default().contains("could not be written"), "{case}: {note:?}");
}

#[test]
fn a_dump_that_does_not_fit_on_the_disk_never_appears_half_written() {
    // 128 Ki floats: A and C_out are 512 KiB each.
    let program = big_dump();
    let s = standin();
    let libpath = format!("{}:{}", s.join("lib").display(), s.join("driver").display());

    // A file-size limit (no privileges needed): the write fails with EFBIG part way.
    let dir = temp_dir("fsize");
    let dumps = dir.join("dumps").display().to_string();
    let run1 = run(Launch { env: &[("CUBLASGUARD_DUMP", &dumps)], ..Launch::new(&program, &["131072", "fsize=256"]) });
    assert_eq!(run1.code(), Some(0), "{}", run1.stderr());
    let t = run1.trace();
    let f = only_fault(&t);
    assert_no_partial_dump(&files_in(&dir.join("dumps")), f.dump_note.as_deref(), f.dump.as_deref(), "RLIMIT_FSIZE");

    // A full disk: a 256 KiB tmpfs as the dump folder, in a mount namespace of its own.
    let dir = temp_dir("enospc");
    let dumps = dir.join("dumps");
    std::fs::create_dir_all(&dumps).unwrap();
    let trace_path = dir.join("trace.json");
    let listing = dir.join("listing");
    let script = format!(
        "mount -t tmpfs -o size=256k,mode=0700 tmpfs '{d}' || exit 99; env LD_LIBRARY_PATH='{libpath}' LD_PRELOAD='{lib}' CUBLASGUARD_TRACE='{t}' CUBLASGUARD_DUMP='{d}' '{p}' 131072; rc=$?; ls -A '{d}' > '{l}'; exit $rc",
        d = dumps.display(),
        lib = guard_lib().display(),
        t = trace_path.display(),
        p = program.display(),
        l = listing.display()
    );
    let out = Command::new("unshare").args(["-m", "sh", "-c", &script]).env_clear().env("PATH", std::env::var("PATH").unwrap_or_default()).output();
    match out {
        // The listing is written only once the tmpfs is mounted.
        Ok(out) if listing.exists() => {
            assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
            let t = trace::read(&trace_path).unwrap();
            let f = only_fault(&t);
            let names: Vec<String> = std::fs::read_to_string(&listing).unwrap().lines().map(String::from).collect();
            assert_no_partial_dump(&names, f.dump_note.as_deref(), f.dump.as_deref(), "ENOSPC");
            assert!(f.dump_note.as_deref().unwrap_or_default().contains("No space left on device"), "{:?}", f.dump_note);
        }
        // No mount namespace here (not root): the file-size limit above stands for it.
        other => eprintln!("no tmpfs could be mounted ({other:?}); ENOSPC is covered by RLIMIT_FSIZE only"),
    }
}
