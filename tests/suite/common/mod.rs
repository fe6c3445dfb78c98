//! Helpers for tests that build C programs against the stand-in stack and run them, guarded
//! or not, as real processes.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use cublasguard_format::trace::{self, Fault, FaultKind, Trace};

pub fn standin() -> PathBuf {
    PathBuf::from(env!("CUBLASGUARD_STANDIN_DIR"))
}

pub fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// target/<profile>, found from this test executable (target/<profile>/deps/<test>).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    exe.parent().and_then(Path::parent).expect("target/<profile>").to_path_buf()
}

/// The guard library as this `cargo test` built it. Cargo refreshes deps/libcublasguard.so
/// for tests but copies it up to target/<profile>/ only on `cargo build`, so the copy up
/// there may be stale.
/// The library under test: this build's, or another copy named by CUBLASGUARD_TEST_LIB (CI
/// runs the PyTorch tests once with the library the Python wheel installed).
pub fn guard_lib() -> PathBuf {
    if let Some(lib) = std::env::var_os("CUBLASGUARD_TEST_LIB") {
        return PathBuf::from(lib);
    }
    let lib = profile_dir().join("deps").join("libcublasguard.so");
    assert!(lib.exists(), "{} missing: the cdylib is built with the tests", lib.display());
    lib
}

pub fn cli() -> PathBuf {
    profile_dir().join("cublasguard")
}

fn scratch() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
}

/// A fresh, empty folder for one run.
pub fn temp_dir(label: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = scratch().join("runs").join(format!("{label}-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed)));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}

/// Compiles C sources from tests/c against the stand-in headers and libraries (by soname),
/// once per test process.
pub fn build_c(name: &str, sources: &[&str], shared: bool) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let mut built = BUILT.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = built.get(name) {
        return p.clone();
    }
    let dir = scratch().join("programs");
    std::fs::create_dir_all(&dir).expect("programs dir");
    let out = dir.join(format!("{name}-{}", std::process::id()));
    let s = standin();
    let mut cmd = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()));
    cmd.args(["-O1", "-g", "-Wall", "-Werror", "-o"]).arg(&out);
    if shared {
        cmd.args(["-shared", "-fPIC"]);
    }
    for src in sources {
        cmd.arg(manifest_dir().join("tests/c").join(src));
    }
    cmd.arg(format!("-I{}", s.join("include").display()))
        .arg(format!("-I{}", manifest_dir().join("shims").display()))
        .arg(format!("-L{}", s.join("lib").display()))
        .args(["-lcublasLt", "-lcublas", "-lcudart", "-ldl", "-lm", "-lpthread"]);
    let status = cmd.status().expect("run the C compiler");
    assert!(status.success(), "compiling {name} failed");
    built.insert(name.to_string(), out.clone());
    out
}

/// `program` on the stand-in under the guard, alone in an empty environment, writing its trace
/// to `trace` quietly, started in `dir`.
pub fn guarded_on_the_standin(program: &Path, dir: &Path, trace: &Path) -> Command {
    let s = standin();
    let mut cmd = Command::new(program);
    cmd.current_dir(dir)
        .env_clear()
        .env("LD_LIBRARY_PATH", format!("{}:{}", s.join("lib").display(), s.join("driver").display()))
        .env("LD_PRELOAD", guard_lib())
        .env("CUBLASGUARD_TRACE", trace)
        .env("CUBLASGUARD_QUIET", "1");
    cmd
}

pub fn scenarios() -> PathBuf {
    build_c("scenarios", &["scenarios.c"], false)
}

/// How to run a program.
pub struct Launch<'a> {
    pub program: &'a Path,
    pub args: &'a [&'a str],
    pub env: &'a [(&'a str, &'a str)],
    pub guarded: bool,
    /// Put the stand-in driver (libcuda.so.1) on the library path.
    pub driver: bool,
    /// Set CUBLASGUARD_TRACE to a file in the run's folder.
    pub trace: bool,
}

impl<'a> Launch<'a> {
    pub fn new(program: &'a Path, args: &'a [&'a str]) -> Self {
        Self { program, args, env: &[], guarded: true, driver: true, trace: true }
    }
}

pub struct Run {
    pub output: Output,
    pub dir: PathBuf,
    pub trace_path: PathBuf,
}

impl Run {
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }
    pub fn code(&self) -> Option<i32> {
        self.output.status.code()
    }
    pub fn trace(&self) -> Trace {
        trace::read(&self.trace_path)
            .unwrap_or_else(|e| panic!("trace {}: {e}\nstdout:\n{}\nstderr:\n{}", self.trace_path.display(), self.stdout(), self.stderr()))
    }
}

pub fn run(launch: Launch) -> Run {
    let (mut cmd, dir, trace_path) = command(&launch);
    let output = cmd.output().expect("run program");
    Run { output, dir, trace_path }
}

/// The command `launch` describes, in a fresh folder, with the trace's path there.
fn command(launch: &Launch) -> (Command, PathBuf, PathBuf) {
    let dir = temp_dir(launch.program.file_name().and_then(|f| f.to_str()).unwrap_or("run"));
    let trace_path = dir.join("trace.json");
    let s = standin();
    let mut libpath = s.join("lib").display().to_string();
    if launch.driver {
        libpath = format!("{libpath}:{}", s.join("driver").display());
    }
    let mut cmd = Command::new(launch.program);
    cmd.args(launch.args).current_dir(&dir).env_clear().env("PATH", std::env::var("PATH").unwrap_or_default()).env("LD_LIBRARY_PATH", libpath);
    if launch.guarded {
        cmd.env("LD_PRELOAD", guard_lib());
        if launch.trace {
            cmd.env("CUBLASGUARD_TRACE", &trace_path);
        }
    }
    // CI runs the scan-heavy tests a second time with the host scan forced
    // (CUBLASGUARD_TEST_DEVICE_SCAN=off): on the stand-in the device scan is the default.
    if let Ok(mode) = std::env::var("CUBLASGUARD_TEST_DEVICE_SCAN") {
        cmd.env("CUBLASGUARD_DEVICE_SCAN", mode);
    }
    // And the NaN/Inf tests with verdicts judged at the call (CUBLASGUARD_TEST_SYNC=gemm; the
    // default defers them): each must say what the deferred one says. A test that names its
    // own mode (in `launch.env`, applied after this) keeps it.
    if let Ok(mode) = std::env::var("CUBLASGUARD_TEST_SYNC") {
        cmd.env("CUBLASGUARD_SYNC", mode);
    }
    for (k, v) in launch.env {
        cmd.env(k, v);
    }
    (cmd, dir, trace_path)
}

/// Runs a stand-in scenario under the guard.
pub fn scenario(name: &str, env: &[(&str, &str)]) -> Run {
    let program = scenarios();
    let args = [name];
    run(Launch { env, ..Launch::new(&program, &args) })
}

pub fn faults_of(trace: &Trace, kind: FaultKind) -> Vec<&Fault> {
    trace.faults.iter().filter(|f| f.kind == kind).collect()
}

/// Where scripts/fetch-*.sh put NVIDIA's wheels, PyTorch and JAX (CUBLASGUARD_CACHE, else
/// ~/.cache/cublasguard).
pub fn cache_dir() -> PathBuf {
    std::env::var_os("CUBLASGUARD_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cache/cublasguard"))
}

/// Runs a test program built from `tests/c/<name>.c` with `args`, with or without the guard.
pub fn run_c(name: &str, args: &[&str], guarded: bool) -> Run {
    let program = build_c(name, &[&format!("{name}.c")], false);
    run(Launch { guarded, ..Launch::new(&program, args) })
}

/// The run's one fault, which `function` must have reported (`case`: for messages).
pub fn the_fault<'a>(t: &'a Trace, function: &str, case: &str) -> &'a Fault {
    assert_eq!(t.faults.len(), 1, "{function} {case}: {:#?}", t.faults);
    let f = &t.faults[0];
    assert_eq!(f.api, function, "{case}");
    f
}

pub fn only_fault(trace: &Trace) -> &Fault {
    assert_eq!(trace.faults.len(), 1, "expected exactly one fault, got {:#?}", trace.faults);
    &trace.faults[0]
}

/// The dynamic symbols of an ELF file, undefined (imports) or defined (exports), without their
/// versions. `nm` comes with the compiler's binutils, which the build needs anyway.
pub fn dynamic_symbols(file: &std::path::Path, undefined: bool) -> Vec<String> {
    let out = Command::new("nm").args(["-D", if undefined { "--undefined-only" } else { "--defined-only" }]).arg(file).output().expect("run nm (binutils)");
    assert!(out.status.success(), "nm {}: {}", file.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().filter_map(|l| l.split_whitespace().last()).map(|s| s.split('@').next().unwrap_or(s).to_string()).collect()
}

/// The stand-in's host-blocking counter for one run of scenarios.c's `scenario`: the
/// "host_blocking" and "gemms" lines of CUDASHIM_COUNT_BLOCKING's file.
pub fn host_blocking(scenario: &str, guarded: bool, env: &[(&str, &str)]) -> (u64, u64) {
    let dir = temp_dir("blocking");
    let file = dir.join("blocking.txt").display().to_string();
    let mut env = env.to_vec();
    env.push(("CUDASHIM_COUNT_BLOCKING", file.as_str()));
    let program = scenarios();
    let run = run(Launch { env: &env, guarded, ..Launch::new(&program, &[scenario]) });
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let text = std::fs::read_to_string(&file).expect("counts");
    let get = |name: &str| text.lines().find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok()).unwrap_or(0);
    (get("host_blocking "), get("gemms "))
}

/// Host-blocking calls the guard adds per GEMM on scenarios.c's clean scenario (guarded minus
/// bare, over the GEMMs), and the GEMMs.
pub fn blocking_added_per_gemm(env: &[(&str, &str)]) -> (u64, u64) {
    let (bare, gemms) = host_blocking("clean", false, env);
    let (guarded, guarded_gemms) = host_blocking("clean", true, env);
    assert_eq!(gemms, guarded_gemms, "the guard runs the program's GEMMs, no more, no fewer");
    assert!(gemms > 0 && guarded >= bare);
    let added = guarded - bare;
    assert_eq!(added % gemms, 0, "{added} host-blocking calls over {gemms} GEMMs");
    (added / gemms, gemms)
}

/// Host-blocking calls each further GEMM makes under the guard: the difference of a longer and
/// a shorter run of benches/c/gemm_loop.c, over the further GEMMs (what happens once per
/// process, such as the device scan's self-test, cancels out).
pub fn blocking_per_further_gemm(env: &[(&str, &str)]) -> u64 {
    let program = build_c("gemm_loop", &["../../benches/c/gemm_loop.c"], false);
    let count = |calls: &str| {
        let dir = temp_dir("blocking");
        let file = dir.join("blocking.txt").display().to_string();
        let mut env = env.to_vec();
        env.push(("CUDASHIM_COUNT_BLOCKING", file.as_str()));
        let run = run(Launch { env: &env, ..Launch::new(&program, &["2", "2", "2", calls]) });
        assert_eq!(run.code(), Some(0), "{}", run.stderr());
        let text = std::fs::read_to_string(&file).expect("counts");
        let get = |name: &str| text.lines().find_map(|l| l.strip_prefix(name)?.trim().parse::<u64>().ok()).unwrap_or(0);
        (get("host_blocking "), get("gemms "))
    };
    let ((few, few_gemms), (more, more_gemms)) = (count("4"), count("12"));
    let further = more_gemms - few_gemms;
    assert!(further > 0 && more >= few && (more - few) % further == 0, "{few} host-blocking calls with {few_gemms} GEMMs, {more} with {more_gemms}");
    (more - few) / further
}

/// The stand-in's library path with its NVML (shims/nvml.c) on it: the stand-in libraries,
/// its driver and libnvidia-ml.so.1.
pub fn with_standin_nvml() -> String {
    let s = standin();
    ["lib", "driver", "nvml"].iter().map(|d| s.join(d).display().to_string()).collect::<Vec<_>>().join(":")
}

/// `run`, killed if it has not ended within `limit` (then `None`): for a test that must show
/// the guard never holds a program up.
pub fn run_within(launch: Launch, limit: std::time::Duration) -> Option<Run> {
    let (mut cmd, dir, trace_path) = command(&launch);
    let output = output_within(&mut cmd, &dir, limit)?;
    Some(Run { output, dir, trace_path })
}

/// `cmd` run to its end, its stdout and stderr kept in files in `dir` (a pipe nobody reads
/// while waiting could fill and stall it); killed if it has not ended within `limit` (then
/// `None`).
pub fn output_within(cmd: &mut Command, dir: &Path, limit: std::time::Duration) -> Option<Output> {
    let (out, err) = (dir.join("stdout"), dir.join("stderr"));
    cmd.stdout(std::fs::File::create(&out).expect("stdout file")).stderr(std::fs::File::create(&err).expect("stderr file"));
    let mut child = cmd.spawn().expect("run program");
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    Some(Output { status, stdout: std::fs::read(&out).unwrap_or_default(), stderr: std::fs::read(&err).unwrap_or_default() })
}

/// A finished program's stdout and stderr, for a failed assertion's message.
pub fn output_text(out: &Output) -> String {
    format!("stdout:\n{}\nstderr:\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

/// The line number of the line of `file` that holds `marker`.
pub fn line_of(file: &std::path::Path, marker: &str) -> u32 {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    text.lines().position(|l| l.contains(marker)).unwrap_or_else(|| panic!("no {marker} in {}", file.display())) as u32 + 1
}

/// Addresses differ from run to run: each 0x... of 6 or more hex digits becomes 0xADDR.
pub fn without_addresses(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(i) = rest.find("0x") {
        out.push_str(&rest[..i]);
        let digits = rest[i + 2..].chars().take_while(|c| c.is_ascii_hexdigit()).count();
        if digits >= 6 {
            out.push_str("0xADDR");
        } else {
            out.push_str(&rest[i..i + 2 + digits]);
        }
        rest = &rest[i + 2 + digits..];
    }
    out.push_str(rest);
    out
}
