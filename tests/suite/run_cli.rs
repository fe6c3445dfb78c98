//! `cublasguard run`, `doctor` and `replay` as a user types them: the command without `--`,
//! one summary per run, and help texts that read as prose.

use crate::common;

use common::*;
use std::path::Path;
use std::process::{Command, Output};

fn cublasguard(args: &[&str], dir: &Path) -> Output {
    let s = standin();
    Command::new(env!("CARGO_BIN_EXE_cublasguard"))
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("CUBLASGUARD_LIB", guard_lib())
        .env("LD_LIBRARY_PATH", format!("{}:{}", s.join("lib").display(), s.join("driver").display()))
        .env("NO_COLOR", "1")
        .output()
        .expect("run cublasguard")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn run_takes_a_command_without_a_double_dash_and_leaves_the_options_after_it_to_the_command() {
    let dir = temp_dir("run-no-dashes");
    let out = cublasguard(&["run", "sh", "-c", "printf '%s\\n' \"$@\"", "sh", "--checks", "none", "--", "x"], &dir);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).lines().collect::<Vec<_>>(), ["--checks", "none", "--", "x"], "every word after the command is its own");
    // run's options before the command are still run's.
    let program = scenarios().display().to_string();
    let out = cublasguard(&["run", "--checks", "args,bounds", "--trace", "t-%p.json", &program, "nan_a"], &dir);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let trace = std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()).find(|e| e.file_name().to_string_lossy().starts_with("t-")).expect("the trace");
    assert!(cublasguard_format::trace::read(&trace.path()).unwrap().faults.is_empty(), "--checks reached the guard: no nan check");
    // `--` still works, and is how a command starting with `-` is given.
    let out = cublasguard(&["run", "--", "sh", "-c", "echo dashed"], &dir);
    assert_eq!(text(&out.stdout).trim(), "dashed");
    let none = cublasguard(&["run"], &dir);
    assert_eq!(none.status.code(), Some(2), "a command is required");
}

#[test]
fn run_tells_each_guarded_process_to_leave_the_exit_summary_to_it() {
    let out = cublasguard(&["run", "sh", "-c", "echo \"$CUBLASGUARD_EXIT_SUMMARY\""], &temp_dir("run-exit-summary"));
    assert_eq!(text(&out.stdout).trim(), "0", "{}", text(&out.stderr));
}

#[test]
fn a_faulting_run_prints_its_summary_once() {
    let program = scenarios().display().to_string();
    let out = cublasguard(&["run", &program, "nan_a"], &temp_dir("run-summary-once"));
    let stderr = text(&out.stderr);
    let summaries: Vec<&str> = stderr.lines().filter(|l| l.contains(" fault(s) in ") || l.ends_with("first ones:")).collect();
    assert_eq!(summaries.len(), 1, "one summary, run's: {stderr}");
    // In words: one fault, not "1 fault(s)".
    assert!(summaries[0].starts_with("cublasguard: 1 fault in ") && summaries[0].ends_with(" calls; first ones:"), "{stderr}");
}

/// `sub --help`, split into its prose (lines at column 0 outside the usage line) and its
/// argument rows (name, description).
fn help_of(sub: &str) -> (Vec<String>, Vec<(String, String)>) {
    let out = cublasguard(&[sub, "--help"], Path::new("."));
    assert_eq!(out.status.code(), Some(0), "{sub}");
    let help = text(&out.stdout);
    let mut prose = Vec::new();
    let mut rows = Vec::new();
    for line in help.lines() {
        if line.trim().is_empty() || line.starts_with("Usage:") || line.ends_with(':') && !line.starts_with(' ') {
            continue;
        }
        if line.starts_with(' ') {
            let row = line.trim_start();
            let (name, description) = row.split_once("  ").unwrap_or((row, ""));
            rows.push((name.to_string(), description.trim_start().to_string()));
        } else {
            prose.push(line.to_string());
        }
    }
    (prose, rows)
}

#[test]
fn the_help_of_run_doctor_and_replay_has_no_runs_of_spaces_mid_sentence() {
    for sub in ["run", "doctor", "replay"] {
        let (prose, rows) = help_of(sub);
        for line in &prose {
            assert!(!line.contains("  "), "{sub} --help: a run of spaces in: {line:?}");
        }
        for (name, description) in &rows {
            assert!(!description.contains("  "), "{sub} --help: a run of spaces in {name}'s description: {description:?}");
        }
    }
}

#[test]
fn every_argument_and_option_of_run_doctor_and_replay_is_described() {
    for sub in ["run", "doctor", "replay"] {
        let (_, rows) = help_of(sub);
        assert!(rows.len() >= 3, "{sub}: {rows:?}");
        for (name, description) in &rows {
            assert!(!description.is_empty(), "{sub}: {name} has no description");
        }
    }
}

#[test]
fn run_help_keeps_both_of_its_notes() {
    let (prose, _) = help_of("run");
    let prose = prose.join("\n");
    assert!(prose.contains("Exit status: the command's own (128 + N if it died by signal N)."), "{prose}");
    assert!(prose.contains("Each option takes its default from its CUBLASGUARD_* variable"), "{prose}");
    assert!(prose.contains("torchrun --nproc_per_node 4 train.py` guards every rank"), "{prose}");
}

#[test]
fn run_gpu_coredump_asks_the_driver_for_a_light_core_dump_beside_the_trace() {
    let dir = temp_dir("run-gpu-coredump");
    let out = cublasguard(&["run", "--gpu-coredump", "--trace", "t-%p.json", "sh", "-c", "env"], &dir);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let var = |name: &str| stdout.lines().find_map(|l| l.strip_prefix(&format!("{name}="))).map(str::to_string);
    assert_eq!(var("CUDA_ENABLE_COREDUMP_ON_EXCEPTION").as_deref(), Some("1"), "{stdout}");
    assert_eq!(
        var("CUDA_COREDUMP_GENERATION_FLAGS").as_deref(),
        Some("skip_nonrelocated_elf_images,skip_global_memory,skip_shared_memory,skip_local_memory"),
        "no memory contents: a light dump"
    );
    let beside = dir.canonicalize().unwrap().join("cublasguard-gpucore-%h-%p.nvcudmp");
    assert_eq!(var("CUDA_COREDUMP_FILE"), Some(beside.display().to_string()), "beside the trace, one per process");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("--gpu-coredump") && stderr.contains("stops the program there"), "{stderr}");
    // Without the option the driver's variables are left alone.
    let plain = cublasguard(&["run", "sh", "-c", "env"], &dir);
    assert!(!text(&plain.stdout).contains("COREDUMP"), "{}", text(&plain.stdout));
}

#[test]
fn the_report_names_the_gpu_core_dump_with_the_cuda_gdb_command_that_opens_it() {
    let dir = temp_dir("report-gpu-coredump");
    let program = scenarios().display().to_string();
    let out = cublasguard(&["run", "--gpu-coredump", "--trace", "t-%p.json", &program, "nan_a"], &dir);
    assert!(out.status.code().is_some(), "{}", text(&out.stderr));
    let trace_path =
        std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()).map(|e| e.path()).find(|p| p.extension().is_some_and(|x| x == "json")).expect("the trace");
    let trace = cublasguard_format::trace::read(&trace_path).unwrap();
    let trace_arg = trace_path.display().to_string();
    // The stand-in has no GPU exceptions: the report says none was written, and how one opens.
    let report = text(&cublasguard(&["report", &trace_arg], &dir).stdout);
    assert!(report.contains(&format!("GPU core dumps were on for pid {}", trace.process.pid)) && report.contains("none at"), "{report}");
    // As the driver names the file it writes at an exception.
    let core = dir.canonicalize().unwrap().join(format!("cublasguard-gpucore-{}-{}.nvcudmp", trace.process.hostname, trace.process.pid));
    std::fs::write(&core, b"").unwrap();
    let report = text(&cublasguard(&["report", &trace_arg], &dir).stdout);
    let command = format!("cuda-gdb -ex \"target cudacore {}\"", core.display());
    assert!(report.contains(&format!("GPU core dump of pid {}: {}; open it with {command}", trace.process.pid, core.display())), "{report}");
    let json: serde_json::Value = serde_json::from_slice(&cublasguard(&["report", "--format", "json", &trace_arg], &dir).stdout).unwrap();
    assert_eq!(json["gpu_coredumps"][0]["command"].as_str(), Some(command.as_str()), "{json:#}");
}

/// Every option of `run` that sets a guard variable, with a value, and the variable it sets.
const RUN_OPTIONS: &[(&[&str], &str, &str)] = &[
    (&["--sync", "gemm"], "CUBLASGUARD_SYNC", "gemm"),
    (&["--dump", "dumps"], "CUBLASGUARD_DUMP", "dumps"),
    (&["--dump-max", "3"], "CUBLASGUARD_DUMP_MAX", "3"),
    (&["--ignore", "kind=nonfinite_input", "--ignore", "api=cublasSgemm_v2"], "CUBLASGUARD_IGNORE", "kind=nonfinite_input;api=cublasSgemm_v2"),
    (&["--nan-origin"], "CUBLASGUARD_NAN_ORIGIN", "1"),
    (&["--max-faults", "500"], "CUBLASGUARD_MAX_FAULTS", "500"),
    (&["--stderr-lines", "2"], "CUBLASGUARD_STDERR_LINES", "2"),
    (&["--staging-bytes", "67108864"], "CUBLASGUARD_STAGING_BYTES", "67108864"),
    (&["--scan-bytes", "1073741824"], "CUBLASGUARD_SCAN_BYTES", "1073741824"),
    (&["--quiet"], "CUBLASGUARD_QUIET", "1"),
    (&["--checks", "args"], "CUBLASGUARD_CHECKS", "args"),
    (&["--on-fault", "error"], "CUBLASGUARD_ON_FAULT", "error"),
    (&["--trace-dir", "traces"], "CUBLASGUARD_TRACE", "traces/cublasguard-%h-%p.json"),
];

#[test]
fn each_run_option_reaches_the_command_as_the_variable_it_sets() {
    let dir = temp_dir("run-options-env");
    for (options, var, value) in RUN_OPTIONS {
        let mut args = vec!["run"];
        args.extend_from_slice(options);
        args.extend_from_slice(&["sh", "-c", "env"]);
        let out = cublasguard(&args, &dir);
        assert_eq!(out.status.code(), Some(0), "{options:?}: {}", text(&out.stderr));
        let env = text(&out.stdout);
        // A folder is given to the command made absolute.
        let line = format!("{var}={value}");
        let found = env.lines().any(|l| l == line || (l.starts_with(&format!("{var}=/")) && l.ends_with(&format!("/{value}"))));
        assert!(found, "{options:?} sets {line}: {env}");
    }
}

#[test]
fn run_help_shows_each_option_beside_the_variable_it_sets() {
    let out = cublasguard(&["run", "--help"], Path::new("."));
    let help = text(&out.stdout);
    for (options, var, _) in RUN_OPTIONS {
        let flag = options[0];
        let at = help.find(&format!("  {flag} ")).or_else(|| help.find(&format!(", {flag} "))).unwrap_or_else(|| panic!("{flag} in: {help}"));
        let entry: String = help[at..].split("\n\n").next().unwrap().to_string();
        let entry = entry.split("\n  -").next().unwrap();
        assert!(entry.contains(var), "{flag} names {var}: {entry}");
    }
}

#[test]
fn the_trace_dir_option_puts_the_runs_traces_in_that_folder_and_the_sync_option_reaches_the_trace() {
    let dir = temp_dir("run-trace-dir");
    let program = scenarios().display().to_string();
    let out = cublasguard(&["run", "--trace-dir", "traces", "--sync", "gemm", &program, "nan_a"], &dir);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let traces: Vec<_> = std::fs::read_dir(dir.join("traces")).expect("the folder").flatten().collect();
    assert_eq!(traces.len(), 1, "{traces:?}");
    let trace = cublasguard_format::trace::read(&traces[0].path()).unwrap();
    assert!(!trace.faults.is_empty());
    let recorded = serde_json::to_string(&trace.environment.variables).unwrap();
    assert!(recorded.contains("\"CUBLASGUARD_SYNC\":\"gemm\""), "{recorded}");
}

#[test]
fn the_guards_lines_go_to_the_log_file_named_with_its_pid_and_a_path_that_cannot_be_one_falls_back_to_stderr() {
    let dir = temp_dir("log-file");
    let program = scenarios();
    let program = program.to_str().expect("utf-8 path");
    let out = cublasguard(&["run", "--log-file", "guard-%p.log", program, "nan_a"], &dir);
    let stderr = text(&out.stderr);
    assert!(!stderr.contains("cublasguard: cublasSgemm_v2 #"), "the fault's line is not on stderr: {stderr}");
    let logs: Vec<_> =
        std::fs::read_dir(&dir).expect("dir").flatten().map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.ends_with(".log")).collect();
    assert_eq!(logs.len(), 1, "{logs:?}");
    let pid = logs[0].strip_prefix("guard-").and_then(|n| n.strip_suffix(".log")).expect("guard-PID.log");
    assert!(pid.parse::<u32>().is_ok(), "{pid}");
    let log = std::fs::read_to_string(dir.join(&logs[0])).expect("log");
    assert!(log.contains("cublasguard: guarding pid ") && log.contains("operand A") && log.contains("[nonfinite_input]"), "{log}");
    // A folder where the file would be: said once on stderr, the lines stay there.
    std::fs::create_dir_all(dir.join("taken.log")).expect("folder");
    let out = cublasguard(&["run", "--log-file", "taken.log", program, "nan_a"], &dir);
    let stderr = text(&out.stderr);
    assert!(stderr.contains("CUBLASGUARD_LOG_FILE='taken.log' ignored: "), "{stderr}");
    assert!(stderr.contains("[nonfinite_input]"), "{stderr}");
}

/// `cublasguard run` on a machine without a driver: the stand-in's libraries, no libcuda.so.1.
fn cublasguard_without_driver(args: &[&str], dir: &Path, env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cublasguard"))
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("CUBLASGUARD_LIB", guard_lib())
        .env("LD_LIBRARY_PATH", standin().join("lib"))
        .envs(env.iter().copied())
        .output()
        .expect("run cublasguard")
}

fn json_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.ends_with(".json")).collect()
}

#[test]
fn a_run_of_a_program_that_only_asks_whether_cuda_is_usable_leaves_no_trace_and_says_what_it_found() {
    let program = build_c("probe", &["probe.c"], false);
    let program = program.to_str().unwrap();
    let dir = temp_dir("run-probe-only");
    let out = cublasguard_without_driver(&["run", program, "cpu"], &dir, &[]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(text(&out.stdout).contains("cpu fallback"), "{}", text(&out.stdout));
    assert_eq!(json_files(&dir), Vec::<String>::new(), "nothing left in the working folder: {stderr}");
    assert!(
        stderr.contains("asked cudaGetDeviceCount (#1) whether CUDA is usable and it is not: no NVIDIA driver")
            && stderr.contains("its trace is not kept (--trace PATH keeps it)"),
        "the summary says what the probe found: {stderr}"
    );
    assert!(!stderr.contains("no trace was written"), "{stderr}");

    // A trace path of the user's own keeps it, on the command line or in the environment.
    let out = cublasguard_without_driver(&["run", "--trace", "asked-%p.json", program, "cpu"], &dir, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let exported = temp_dir("run-probe-exported");
    cublasguard_without_driver(&["run", program, "cpu"], &exported, &[("CUBLASGUARD_TRACE", "exported-%p.json")]);
    for (folder, prefix) in [(&dir, "asked-"), (&exported, "exported-")] {
        let files = json_files(folder);
        assert!(files.len() == 1 && files[0].starts_with(prefix), "{files:?}");
        let t = cublasguard_format::trace::read(&folder.join(&files[0])).unwrap();
        assert!(t.environment.probe.is_some() && t.faults.is_empty(), "{:#?}", t.faults);
    }

    // A probe that explains a failing exit is a fault: its trace stays.
    let failing = temp_dir("run-probe-fails");
    let out = cublasguard_without_driver(&["run", program, "die"], &failing, &[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(json_files(&failing).len(), 1, "{}", text(&out.stderr));
}

#[test]
fn a_faulting_runs_summary_gives_the_probable_cause_and_next_steps() {
    let program = scenarios().display().to_string();
    let out = cublasguard(&["run", &program, "nan_a"], &temp_dir("run-summary-cause"));
    let stderr = text(&out.stderr);
    let summary: Vec<&str> = stderr.lines().skip_while(|l| !l.ends_with("first ones:")).collect();
    let cause = summary.iter().find_map(|l| l.strip_prefix("  probable cause: ")).unwrap_or_else(|| panic!("a probable cause in: {stderr}"));
    assert!(cause.contains("NaN") || cause.contains("Inf"), "the cause is the NaN's: {cause}");
    let next: Vec<&str> = summary.iter().filter_map(|l| l.strip_prefix("  next: ")).collect();
    assert!(!next.is_empty() && next.iter().all(|step| step.len() > 10), "next steps in: {stderr}");
    assert!(summary.iter().any(|l| l.starts_with("  full report: cublasguard report ")), "{stderr}");
}
