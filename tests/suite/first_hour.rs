//! What a new user meets first on a machine without a GPU: a program that only asks whether
//! CUDA is there is not a fault, PyTorch's kernel registrations do not crowd out the calls that
//! matter, and a program that dies of the missing driver still gets its postmortem.

use crate::common;

use common::*;
use cublasguard_format::trace::{FaultKind, InitCauseKind};

fn probe(mode: &str, env: &[(&str, &str)], trace: bool) -> Run {
    let program = build_c("probe", &["probe.c"], false);
    let args = [mode];
    run(Launch { env, driver: false, trace, ..Launch::new(&program, &args) })
}

fn report_status(path: &std::path::Path) -> (Option<i32>, String) {
    let out = std::process::Command::new(cli()).arg("report").arg(path).output().expect("report");
    (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn a_program_that_only_asks_for_a_device_and_falls_back_to_the_cpu_leaves_no_trace_and_no_warning() {
    // LD_PRELOAD alone, as the README shows: the trace would go to the working folder.
    let run = probe("cpu", &[], false);
    assert_eq!(run.code(), Some(0));
    assert!(run.stdout().contains("cpu fallback"), "{}", run.stdout());
    let files: Vec<_> = std::fs::read_dir(&run.dir).unwrap().flatten().map(|e| e.file_name()).collect();
    assert!(files.is_empty(), "no trace of its own: {files:?}");
    assert!(!run.stderr().contains("init_failed") && !run.stderr().contains("fault(s)"), "nothing said about a fault:\n{}", run.stderr());
}

#[test]
fn a_failed_probe_is_an_environment_note_with_its_cause_when_a_trace_is_written() {
    // With a trace asked for (CUBLASGUARD_TRACE, as `cublasguard run --trace` sets it), the
    // probe is a note of the environment, and the report does not fail.
    let run = probe("cpu", &[], true);
    let t = run.trace();
    assert!(t.faults.is_empty(), "{:#?}", t.faults);
    assert_eq!(t.summary.faults, 0);
    let note = t.environment.probe.as_ref().expect("the probe's note");
    assert_eq!((note.api.as_str(), note.status), ("cudaGetDeviceCount", 35));
    assert_eq!(note.cause.as_ref().map(|c| c.kind), Some(InitCauseKind::NoDriver));
    let (code, text) = report_status(&run.trace_path);
    assert_eq!(code, Some(0), "a probe is no fault");
    assert!(text.contains("asked cudaGetDeviceCount (#1) whether CUDA is usable") && text.contains("A probe, not a fault"), "{text}");
}

#[test]
fn a_program_that_exits_with_a_failure_after_a_failed_probe_gets_the_probe_as_its_fault() {
    let run = probe("die", &[], false);
    assert_eq!(run.code(), Some(1));
    let traces: Vec<_> = std::fs::read_dir(&run.dir).unwrap().flatten().map(|e| e.path()).collect();
    assert_eq!(traces.len(), 1, "the postmortem is written: {traces:?}\n{}", run.stderr());
    let t = cublasguard_format::trace::read(&traces[0]).expect("trace");
    let f = only_fault(&t);
    assert_eq!((f.api.as_str(), f.kind), ("cudaGetDeviceCount", FaultKind::InitFailed));
    assert_eq!(f.cause.as_ref().map(|c| c.kind), Some(InitCauseKind::NoDriver));
    assert!(f.message.contains("exited with status 1"), "{}", f.message);
    assert_eq!(f.message.matches("cudaErrorInsufficientDriver (35)").count(), 1, "{}", f.message);
    let (code, _) = report_status(&traces[0]);
    assert_eq!(code, Some(1));
}

#[test]
fn a_cuda_call_that_fails_after_a_failed_probe_is_the_fault_with_the_probes_cause() {
    let run = probe("malloc", &[], true);
    assert!(run.stdout().contains("cudaMalloc=35"), "{}", run.stdout());
    let t = run.trace();
    let f = only_fault(&t);
    assert_eq!((f.api.as_str(), f.kind), ("cudaMalloc", FaultKind::InitFailed));
    assert_eq!(f.cause.as_ref().map(|c| c.kind), Some(InitCauseKind::NoDriver));
    assert!(t.environment.probe.is_some(), "the probe stays a note");
    // One line, each thing said once: the status, then the cause.
    let stderr = run.stderr();
    let line = stderr.lines().find(|l| l.starts_with("cublasguard: cudaMalloc #")).unwrap_or_else(|| panic!("the fault's line in {stderr}"));
    assert_eq!(line.matches("cudaErrorInsufficientDriver (35)").count(), 1, "{line}");
    assert_eq!(stderr.matches("no NVIDIA driver").count(), 1, "{stderr}");
    // Beside the counted fault the probe is its first sign, not "not a fault".
    let (code, text) = report_status(&run.trace_path);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("whether CUDA is usable and it is not; its later calls failed to start CUDA too"), "{text}");
    assert!(!text.to_lowercase().contains("probe, not a fault"), "{text}");
    assert_eq!(text.matches("cudaErrorInsufficientDriver (35)").count(), 1, "the call line says the status, the cause does not again: {text}");
}

#[test]
fn a_python_scripts_probe_keeps_the_line_that_asked() {
    let dir = temp_dir("probe-py");
    let script = dir.join("probe.py");
    let runtime = standin().join("lib/libcudart.so.12");
    std::fs::write(
        &script,
        format!(
            "import ctypes, sys\nrt = ctypes.CDLL({:?})\ndef is_available():\n    n = ctypes.c_int(-1)\n    return rt.cudaGetDeviceCount(ctypes.byref(n)) == 0  # PROBE\nif not is_available():\n    sys.exit('Found no NVIDIA driver on your system.')\n",
            runtime.display().to_string()
        ),
    )
    .unwrap();
    let script_s = script.display().to_string();
    let path = std::env::var("PATH").unwrap_or_default();
    let env = [("PATH", path.as_str())];
    let run = run(Launch { env: &env, driver: false, ..Launch::new(std::path::Path::new("python3"), &[&script_s]) });
    assert_eq!(run.code(), Some(1), "{}", run.stderr());
    let t = run.trace();
    let f = only_fault(&t);
    assert_eq!(f.api, "cudaGetDeviceCount");
    let frame = f.python_stack.first().expect("the probing line");
    assert_eq!((frame.function.as_str(), frame.line), ("is_available", 5), "{:#?}", f.python_stack);
    let note = t.environment.probe.as_ref().expect("note");
    assert_eq!(note.python_stack.first().map(|fr| fr.line), Some(5));
}

#[test]
fn kernel_registrations_are_neither_counted_nor_recorded() {
    let program = build_c("probe", &["probe.c"], false);
    let run = run(Launch::new(&program, &["kernels", "3000"]));
    assert!(run.stdout().contains("sgemm=0"), "{}\n{}", run.stdout(), run.stderr());
    let t = run.trace();
    assert_eq!(t.summary.calls.get("__cudaRegisterFunction"), None, "{:?}", t.summary.calls);
    assert!(t.recent_calls.iter().all(|c| !c.api.starts_with("__cudaRegister")), "registrations fill no recorder slot");
    let apis: Vec<&str> = t.recent_calls.iter().map(|c| c.api.as_str()).collect();
    assert_eq!(apis, ["cudaMalloc", "cublasCreate_v2", "cublasSgemm_v2"], "the calls that matter are all there");
    assert_eq!(t.recent_calls[0].seq, 1, "registrations use no sequence number");
}

#[test]
fn each_recent_call_has_a_duration() {
    let t = scenario("nan_a", &[]).trace();
    let gemm = t.recent_calls.iter().find(|c| c.api == "cublasSgemm_v2").expect("the GEMM");
    assert!(gemm.duration_ns > 0, "a guarded GEMM takes some time: {gemm:?}");
}

fn mlp(inject: &str, env: &[(&str, &str)]) -> Run {
    let program = standin().join("bin/mlp");
    let args = ["--inject", inject, "--epochs", "1"];
    run(Launch { env, ..Launch::new(&program, &args) })
}

#[test]
fn operands_of_a_call_refused_for_its_arguments_are_not_checked_yet_located_and_dumped() {
    let dumps = temp_dir("lda-dumps");
    let dumps_s = dumps.display().to_string();
    let run = mlp("lda", &[("CUBLASGUARD_DUMP", dumps_s.as_str())]);
    let t = run.trace();
    let f = t.faults.iter().find(|f| f.kind == FaultKind::InvalidArgument).expect("the lda fault");
    assert_eq!(f.operands.len(), 3);
    for o in &f.operands {
        assert!(o.allocation.is_some(), "{} is in a live cudaMalloc buffer: {o:?}", o.name);
        assert_eq!(o.not_checked.as_deref(), Some("the arguments were refused first"), "{}", o.name);
    }
    assert_eq!(f.dump_note, None, "every operand is in the dump");
    let dump = f.dump.clone().expect("a dump");
    assert!(std::path::Path::new(&dump).is_file(), "{dump}");
    let (_, text) = report_status(&run.trace_path);
    assert!(text.contains("(extent not checked: the arguments were refused first)"), "{text}");
    assert!(!text.contains("in no allocation the guard saw"), "{text}");
    // The library computed nothing: replay has nothing to compare, says so, and is not offered.
    assert!(!text.contains(&format!("replay {dump}")), "{text}");
    let out = std::process::Command::new(cli()).args(["replay", &dump]).output().expect("replay");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("the library refused this call (invalid_argument)"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn operands_after_the_one_that_overruns_are_checked_too() {
    let t = mlp("width", &[]).trace();
    let f = t.faults.iter().find(|f| f.kind == FaultKind::OutOfBounds).expect("the width fault");
    let by_name = |n: &str| f.operands.iter().find(|o| o.name == n).expect(n);
    let a = by_name("A");
    assert!(a.allocation.is_some() && a.not_checked.is_none(), "A was checked: {a:?}");
    for name in ["B", "C"] {
        let o = by_name(name);
        assert!(o.allocation.is_some(), "{name}: {o:?}");
        assert_eq!(o.not_checked, None, "{name} is checked after A's fault");
    }
}

#[test]
fn the_users_native_line_is_found_when_the_program_was_started_by_a_relative_path() {
    // As the README runs it: from the repository root, by a relative path, with a relative
    // LD_LIBRARY_PATH.
    let root = manifest_dir();
    let program = profile_dir().join("stand-in/bin/mlp");
    let relative = program.strip_prefix(&root).expect("the build is inside the repository");
    let lib = profile_dir().join("stand-in");
    let libpath = format!("{}:{}", lib.join("lib").strip_prefix(&root).unwrap().display(), lib.join("driver").strip_prefix(&root).unwrap().display());
    let dir = temp_dir("relative");
    let trace = dir.join("t.json");
    let out = std::process::Command::new(relative)
        .args(["--inject", "width", "--epochs", "1"])
        .current_dir(&root)
        .env("LD_LIBRARY_PATH", libpath)
        .env("LD_PRELOAD", guard_lib())
        .env("CUBLASGUARD_TRACE", &trace)
        .output()
        .expect("run mlp");
    let t = cublasguard_format::trace::read(&trace).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let exe = t.process.exe.clone().expect("exe");
    let f = &t.faults[0];
    assert!(f.backtrace.iter().any(|l| l.contains(&format!("({exe}+"))), "frames name the program by its absolute path: {:#?}", f.backtrace);
    assert!(t.environment.libraries.iter().all(|l| l.path.starts_with('/')), "{:#?}", t.environment.libraries);
    let report = std::process::Command::new(cli()).arg("report").arg(&trace).output().expect("report");
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(text.contains("mlp.c:") && text.contains(" in gemm_rm: "), "the user's line with its source: {text}");
}

#[test]
fn a_nan_passed_on_from_call_to_call_takes_two_lines_of_stderr_not_one_per_call() {
    let run = mlp("nan", &[("CUBLASGUARD_EXIT_SUMMARY", "0")]);
    let guard_lines: Vec<&str> = run
        .output
        .stderr
        .split(|&b| b == b'\n')
        .filter_map(|l| std::str::from_utf8(l).ok())
        .filter(|l| l.starts_with("cublasguard: ") && !l.contains("guarding pid"))
        .collect();
    let t = run.trace();
    assert!(t.faults.len() >= 5, "the trace keeps every one: {}", t.faults.len());
    assert_eq!(guard_lines.len(), 2, "{guard_lines:#?}");
    assert!(guard_lines[0].contains("[nonfinite_input]"), "{}", guard_lines[0]);
    let first = t.faults[0].seq;
    assert!(guard_lines[1].contains(&format!("probably passed on from #{first}")), "{}", guard_lines[1]);
}

#[test]
fn a_process_without_a_rank_does_not_take_rank_zeros_trace_name() {
    let dir = temp_dir("ranks");
    let pattern = dir.join("t-%r.json").display().to_string();
    let program = scenarios();
    for rank in [None, Some("0")] {
        let mut env = vec![("CUBLASGUARD_TRACE", pattern.as_str())];
        if let Some(r) = rank {
            env.push(("RANK", r));
        }
        run(Launch { env: &env, trace: false, ..Launch::new(&program, &["nan_a"]) });
    }
    let mut names: Vec<String> = std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    assert_eq!(names, ["t-0.json", "t-norank.json"]);
    let launcher = cublasguard_format::trace::read(&dir.join("t-norank.json")).unwrap();
    assert_eq!(launcher.process.rank, None);
}

#[test]
fn a_trace_folder_that_does_not_exist_yet_is_made_and_nothing_is_lost() {
    let dir = temp_dir("new-folder").join("not/there/yet");
    let path = dir.join("t-%p.json").display().to_string();
    let run = scenario("nan_a", &[("CUBLASGUARD_TRACE", path.as_str())]);
    assert!(!run.stderr().contains("cannot write"), "{}", run.stderr());
    let traces: Vec<_> = std::fs::read_dir(&dir).expect("the folder was made").flatten().map(|e| e.path()).collect();
    assert_eq!(traces.len(), 1, "{traces:?}");
    assert_eq!(cublasguard_format::trace::read(&traces[0]).unwrap().faults.len(), 1);
    // And under `cublasguard run`, whose summary reads it.
    let dir2 = temp_dir("new-folder-run").join("deeper");
    let path2 = dir2.join("t-%p.json").display().to_string();
    let program = scenarios();
    let out = std::process::Command::new(cli())
        .args(["run", "--trace", &path2, "--"])
        .arg(&program)
        .arg("nan_a")
        .env("LD_LIBRARY_PATH", format!("{}:{}", standin().join("lib").display(), standin().join("driver").display()))
        .env("CUBLASGUARD_LIB", guard_lib())
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("made no CUDA call") && err.contains("nonfinite_input"), "{err}");
}

#[test]
fn each_licence_the_package_declares_has_its_text_in_the_repository() {
    let root = manifest_dir();
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    assert!(manifest.contains("license = \"MIT OR Apache-2.0\""));
    let mit = std::fs::read_to_string(root.join("LICENSE-MIT")).expect("LICENSE-MIT");
    assert!(mit.starts_with("MIT License") && mit.contains("Permission is hereby granted"));
    let apache = std::fs::read_to_string(root.join("LICENSE-APACHE")).expect("LICENSE-APACHE");
    assert!(apache.contains("Apache License") && apache.contains("Version 2.0, January 2004"));
}

#[test]
fn a_relative_trace_path_is_meant_from_where_the_process_started_even_after_it_changes_folder() {
    let elsewhere = temp_dir("elsewhere");
    let elsewhere_s = elsewhere.display().to_string();
    let program = build_c("probe", &["probe.c"], false);
    let run = run(Launch { env: &[("CUBLASGUARD_TRACE", "relative-%p.json")], trace: false, ..Launch::new(&program, &["chdir", &elsewhere_s]) });
    assert!(run.stdout().contains("cudaMalloc=0"), "{}{}", run.stdout(), run.stderr());
    let here: Vec<_> = std::fs::read_dir(&run.dir).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(here.len(), 1, "the trace is in the start folder: {here:?}");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0, "nothing where the program went");
}

#[test]
fn a_process_out_of_file_descriptors_is_told_so_not_that_it_has_no_driver() {
    let run = run_c("emfile", &[], true);
    assert!(run.stdout().contains("cudaMalloc="), "{}\n{}", run.stdout(), run.stderr());
    let t = run.trace();
    let f = t.faults.iter().find(|f| f.kind == FaultKind::InitFailed).unwrap_or_else(|| panic!("{:#?}", t.faults));
    let cause = f.cause.as_ref().expect("a cause");
    assert_eq!(cause.kind, InitCauseKind::OutOfFileDescriptors, "{}", cause.message);
    assert!(cause.message.contains("ulimit -n, is 64") && !cause.message.contains("no NVIDIA driver"), "{}", cause.message);
    let report = std::process::Command::new(cli()).arg("report").arg(&run.trace_path).output().expect("report");
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(text.contains("ulimit -n 65536") && !text.contains("Install the NVIDIA driver"), "{text}");
}

#[test]
fn a_c_program_builds_against_the_stand_in_the_wheel_installs_with_its_headers_and_the_usual_link_flags() {
    // What `pip install .` puts in <prefix>/share/cublasguard/stand-in, as the build stages it:
    // headers, and development names (`-lcublas`) that a wheel can carry (linker scripts).
    let standin = profile_dir().parent().expect("target").join("wheel-data/data/share/cublasguard/stand-in");
    let (include, lib, driver) = (standin.join("include"), standin.join("lib"), standin.join("driver"));
    assert!(include.join("cublas_v2.h").is_file(), "no headers in {}", include.display());
    let out = temp_dir("wheel-standin-build").join("scenarios");
    let status = std::process::Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .arg("-o")
        .arg(&out)
        .arg(manifest_dir().join("tests/c/scenarios.c"))
        .arg(format!("-I{}", include.display()))
        .arg(format!("-L{}", lib.display()))
        .args(["-lcublas", "-lcudart", "-ldl", "-lm"])
        .status()
        .expect("run the C compiler");
    assert!(status.success(), "building against {} failed", standin.display());
    let run = std::process::Command::new(&out)
        .arg("clean")
        .env("LD_LIBRARY_PATH", format!("{}:{}", lib.display(), driver.display()))
        .env_remove("LD_PRELOAD")
        .output()
        .expect("run it");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert_eq!(run.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&run.stderr));
    assert!(stdout.contains("cublasCreate=0"), "{stdout}");
}

#[test]
fn the_banner_promises_a_trace_only_where_one_is_written() {
    let program = scenarios();
    // (scenario, CUBLASGUARD_TRACE set, a trace written at exit)
    for (scenario, asked, written) in [("clean", false, false), ("nan_a", false, true), ("clean", true, true)] {
        let args = [scenario];
        let run = run(Launch { trace: asked, ..Launch::new(&program, &args) });
        let stderr = run.stderr();
        let banner = stderr.lines().find(|l| l.starts_with("cublasguard: guarding pid ")).unwrap_or_else(|| panic!("{scenario}: a banner in {stderr}"));
        let named = banner.split("; trace: ").nth(1).and_then(|t| t.strip_suffix(')')).expect("the trace named last");
        let (path, at_a_fault) = match named.strip_suffix(", written at a fault") {
            Some(path) => (path, true),
            None => (named, false),
        };
        assert_eq!(at_a_fault, !asked, "{scenario}, asked {asked}: {banner}");
        assert_eq!(std::path::Path::new(path).exists(), written, "{scenario}, asked {asked}: {banner}\n{stderr}");
        if asked {
            assert_eq!(std::path::Path::new(path), run.trace_path, "{banner}");
        }
    }
}
