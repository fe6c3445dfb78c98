//! The `cublasguard` command, run as a user runs it.

use crate::common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn cublasguard(args: &[&str], dir: &Path, env: &[(&str, String)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_cublasguard"));
    cmd.args(args).current_dir(dir).env_clear().env("PATH", std::env::var("PATH").unwrap_or_default()).env("CUBLASGUARD_LIB", guard_lib()).env("NO_COLOR", "1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run cublasguard")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn standin_path(driver: bool) -> String {
    let s = standin();
    if driver {
        format!("{}:{}", s.join("lib").display(), s.join("driver").display())
    } else {
        s.join("lib").display().to_string()
    }
}

/// Runs a scenario through `cublasguard run`, returning the output and the traces it wrote.
fn run_scenario(name: &str, extra_env: &[(&str, String)], driver: bool) -> (Output, Vec<PathBuf>) {
    let dir = temp_dir(&format!("cli-run-{name}"));
    let program = scenarios().display().to_string();
    let mut env = vec![("LD_LIBRARY_PATH", standin_path(driver))];
    env.extend(extra_env.iter().cloned());
    let out = cublasguard(&["run", "--", &program, name], &dir, &env);
    let traces: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()).map(|e| e.path()).collect();
    (out, traces)
}

#[test]
fn run_guards_and_keeps_the_exit_status() {
    let (out, traces) = run_scenario("clean", &[], true);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("sgemm status=0"));
    assert!(text(&out.stderr).contains("cublasguard: no faults in"), "{}", text(&out.stderr));
    assert_eq!(traces.len(), 1, "one trace per process: {traces:?}");
    assert!(cublasguard_format::trace::read(&traces[0]).unwrap().faults.is_empty());

    let (out, _) = run_scenario("init", &[], false);
    assert_eq!(out.status.code(), Some(3), "the program's own status");
    let err = text(&out.stderr);
    assert!(err.contains("init_failed") && err.contains("no NVIDIA driver"), "{err}");

    let (out, traces) = run_scenario("nan_a", &[("CUBLASGUARD_ON_FAULT", "abort".into())], true);
    assert_eq!(out.status.code(), Some(128 + libc::SIGABRT), "died by SIGABRT");
    assert_eq!(traces.len(), 1);
}

#[test]
fn a_wrapper_shell_that_uses_no_cuda_stays_silent() {
    let dir = temp_dir("cli-shell");
    let program = scenarios().display().to_string();
    let env = [("LD_LIBRARY_PATH", standin_path(true))];
    let script = format!("{program} clean; true");
    let out = cublasguard(&["run", "--", "sh", "-c", &script], &dir, &env);
    assert_eq!(out.status.code(), Some(0));
    let err = text(&out.stderr);
    assert_eq!(err.matches("cublasguard: guarding pid").count(), 1, "only the CUDA program is guarded aloud: {err}");
    let traces: Vec<_> = std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()).collect();
    assert_eq!(traces.len(), 1, "one trace, the program's, not the shell's");
}

#[test]
fn run_passes_options_and_keeps_an_existing_preload() {
    let dir = temp_dir("cli-options");
    let program = scenarios().display().to_string();
    let env = [("LD_LIBRARY_PATH", standin_path(true))];
    let out = cublasguard(&["run", "--checks", "args,bounds", "--trace", "mine-%p.json", "--", &program, "nan_a"], &dir, &env);
    assert_eq!(out.status.code(), Some(0));
    let traces: Vec<_> = std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()).collect();
    assert_eq!(traces.len(), 1);
    assert!(traces[0].file_name().to_string_lossy().starts_with("mine-"));
    let trace = cublasguard_format::trace::read(&traces[0].path()).unwrap();
    assert!(trace.faults.is_empty(), "the nan check was off");
    let preload = trace.environment.variables.get("LD_PRELOAD").cloned().unwrap_or_default();
    assert!(preload.ends_with("libcublasguard.so"), "{preload}");

    let bad = cublasguard(&["run", "--on-fault", "explode", "--", &program], &dir, &env);
    assert_eq!(bad.status.code(), Some(2));
    assert!(text(&bad.stderr).contains("--on-fault explode"), "{}", text(&bad.stderr));
    let missing = cublasguard(&["run", "--", "/nonexistent/program"], &dir, &env);
    assert_eq!(missing.status.code(), Some(127));
}

fn report(paths: &[&Path], extra: &[&str]) -> Output {
    let mut args = vec!["report"];
    args.extend_from_slice(extra);
    let strings: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    args.extend(strings.iter().map(String::as_str));
    cublasguard(&args, Path::new("."), &[])
}

/// A scenario, its environment, whether it faults, and what its report must say.
type ReportCase<'a> = (&'a str, &'a [(&'a str, &'a str)], bool, &'a [&'a str]);

#[test]
fn report_names_call_operand_and_next_step_for_each_kind() {
    let cases: &[ReportCase] = &[
        ("nan_a", &[], true, &["nonfinite_input", "operand A", "holds 1 NaN and 1 Inf", "next:"]),
        ("overflow", &[], true, &["nonfinite_output", "overflow", "learning rate"]),
        ("bad_lda", &[], true, &["invalid_argument", "lda = 3", "row counts (column-major)"]),
        ("bad_handle", &[], true, &["invalid_handle", "cublasCreate"]),
        ("host_pointer", &[], true, &["host_pointer", "operand A", "cudaMemcpyHostToDevice", "cudaErrorIllegalAddress"]),
        ("out_of_bounds", &[], true, &["out_of_bounds", "operand B", "feature width"]),
        ("async", &[("CUDASHIM_ASYNC_FAULT", "2")], true, &["async_error", "culprit", "CUDA_LAUNCH_BLOCKING"]),
        ("api_error", &[("CUDASHIM_FAIL", "cublasSgemm_v2:1:14")], true, &["api_error", "CUBLAS_STATUS_INTERNAL_ERROR"]),
        ("alloc", &[], true, &["alloc_failed", "batch size"]),
        ("init", &[], false, &["init_failed", "no NVIDIA driver", "Install the NVIDIA driver"]),
    ];
    for (name, env, driver, wanted) in cases {
        let program = scenarios();
        let args = [*name];
        let run = common::run(Launch { env, driver: *driver, ..Launch::new(&program, &args) });
        let out = report(&[&run.trace_path], &[]);
        let body = text(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{name}: faults exit 1\n{body}");
        assert!(body.contains("cublasSgemm_v2") || body.contains("cudaMalloc") || body.contains("cudaGetDeviceCount"), "{name}: {body}");
        for w in *wanted {
            assert!(body.contains(w), "{name}: report lacks '{w}':\n{body}");
        }
        let md = text(&report(&[&run.trace_path], &["--format", "markdown"]).stdout);
        assert!(md.starts_with("# cublasguard report") && md.contains("\n## 1. `"), "{name}: {md}");
        let json: serde_json::Value = serde_json::from_slice(&report(&[&run.trace_path], &["--format", "json"]).stdout).unwrap();
        assert!(json["faults"].as_u64().unwrap() >= 1 && json["first"]["diagnosis"]["cause"].is_string(), "{name}: {json}");
    }
}

#[test]
fn report_of_a_clean_trace_exits_zero_and_links_a_linear_layer() {
    let program = scenarios();
    let clean = run(Launch::new(&program, &["clean"]));
    let out = report(&[&clean.trace_path], &[]);
    assert_eq!(out.status.code(), Some(0));
    assert!(text(&out.stdout).contains("No faults"));

    let mlp = standin().join("bin/mlp");
    let nan = run(Launch::new(&mlp, &["--inject", "nan"]));
    let body = text(&report(&[&nan.trace_path], &[]).stdout);
    assert!(body.contains("looks like nn.Linear(in_features=8, out_features=16) on a batch of 32"), "{body}");
    assert!(body.contains("B as row-major: [32, 8] f32, first non-finite at [3, 2]"), "{body}");
    assert!(body.contains("propagated from #"), "later NaNs are marked as propagation: {body}");
}

#[test]
fn report_merges_traces_in_time_order_and_names_the_first_rank() {
    let program = scenarios();
    let dir = temp_dir("cli-merge");
    let mut paths = Vec::new();
    for (rank, scenario) in [("1", "bad_lda"), ("0", "nan_a")] {
        let trace = dir.join(format!("rank{rank}.json"));
        let trace_s = trace.display().to_string();
        let env = [("RANK", rank), ("CUBLASGUARD_TRACE", trace_s.as_str())];
        let r = run(Launch { env: &env, trace: false, ..Launch::new(&program, &[scenario]) });
        assert!(r.output.status.success());
        paths.push(trace);
    }
    // The ranks run one after the other here, each its own process tree: two runs, which
    // --all-runs reports together (a job's ranks, running at once, are one run without it).
    let out = cublasguard(&["report", "--all-runs", &dir.display().to_string()], Path::new("."), &[]);
    let body = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1));
    assert!(body.contains("2 process(es)"), "{body}");
    let first_line = body.lines().find(|l| l.starts_with("First fault:")).unwrap_or_default();
    assert!(first_line.contains("rank 1"), "rank 1 ran first: {body}");
    let lda = body.find("invalid_argument").unwrap();
    let nan = body.find("nonfinite_input").unwrap();
    assert!(lda < nan, "time order: {body}");
}

#[test]
fn report_rejects_unreadable_input_with_exit_2() {
    let program = scenarios();
    let run = run(Launch::new(&program, &["nan_a"]));
    let full = std::fs::read(&run.trace_path).unwrap();
    let dir = temp_dir("cli-bad");
    let truncated = dir.join("truncated.json");
    std::fs::write(&truncated, &full[..full.len() / 2]).unwrap();
    let out = report(&[&truncated], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("not a complete JSON trace"), "{}", text(&out.stderr));
    let foreign = dir.join("foreign.json");
    std::fs::write(&foreign, br#"{"traceEvents": []}"#).unwrap();
    let out = report(&[&foreign], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("not a cublasguard trace"), "{}", text(&out.stderr));
    let out = report(&[Path::new("/nonexistent/trace.json")], &[]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn doctor_names_the_missing_driver_and_finds_the_libraries() {
    let dir = temp_dir("cli-doctor");
    let out = cublasguard(&["doctor"], &dir, &[("LD_LIBRARY_PATH", standin_path(false))]);
    let body = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{body}");
    assert!(body.contains("FAIL driver") && body.contains("no NVIDIA driver"), "{body}");
    assert!(body.contains("libcudart: 12:") && body.contains("libcublas: 12:"), "{body}");
    assert!(body.contains("fix: "), "{body}");

    let out = cublasguard(
        &["doctor", "--json"],
        &dir,
        &[("LD_LIBRARY_PATH", standin_path(true)), ("CUDA_VISIBLE_DEVICES", "".into()), ("CUDASHIM_DRIVER_VERSION", "11080".into())],
    );
    let checks: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let find = |name: &str| checks.as_array().unwrap().iter().filter(|c| c["name"] == name).cloned().collect::<Vec<_>>();
    assert_eq!(find("driver")[0]["status"], "ok", "{checks}");
    assert_eq!(find("runtime vs driver")[0]["status"], "fail", "{checks}");
    assert_eq!(find("CUDA_VISIBLE_DEVICES")[0]["status"], "fail", "{checks}");
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn timeline_is_chrome_trace_event_json() {
    let program = scenarios();
    let run = run(Launch::new(&program, &["nan_a"]));
    let out_path = temp_dir("cli-timeline").join("timeline.json");
    let out = cublasguard(&["timeline", &run.trace_path.display().to_string(), "-o", &out_path.display().to_string()], Path::new("."), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let value: serde_json::Value = serde_json::from_slice(&std::fs::read(&out_path).unwrap()).unwrap();
    let events = value["traceEvents"].as_array().expect("traceEvents");
    assert!(events.iter().all(|e| e["ph"].is_string() && e["pid"].is_u64() && e["name"].is_string()));
    let calls = events.iter().filter(|e| e["cat"] == "call").count();
    assert!(calls >= 5, "{calls}");
    assert!(events.iter().all(|e| e["ph"] == "M" || e["ts"].is_f64()));
    let faults: Vec<_> = events.iter().filter(|e| e["cat"] == "fault").collect();
    assert_eq!(faults.len(), 2, "one on the thread, one on the stream track");
    assert!(events.iter().any(|e| e["ph"] == "M" && e["args"]["name"].as_str().is_some_and(|n| n.starts_with("stream "))));
}

#[test]
fn timeline_replaces_a_link_planted_where_it_writes_and_is_as_private_as_the_trace() {
    use std::os::unix::fs::PermissionsExt;
    let program = scenarios();
    let run = run(Launch::new(&program, &["nan_a"]));
    let dir = temp_dir("cli-timeline-link");
    let trace = dir.join("trace.json");
    std::fs::copy(&run.trace_path, &trace).unwrap();
    std::fs::set_permissions(&trace, std::fs::Permissions::from_mode(0o600)).unwrap();
    // Another user's file, and a link to it where the timeline goes by default.
    let victim = temp_dir("cli-timeline-victim").join("precious");
    std::fs::write(&victim, "keep me").unwrap();
    std::os::unix::fs::symlink(&victim, dir.join("trace.timeline.json")).unwrap();
    let out = cublasguard(&["timeline", &trace.display().to_string()], Path::new("."), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me", "the link's target is untouched");
    let written = std::fs::symlink_metadata(dir.join("trace.timeline.json")).unwrap();
    assert!(written.file_type().is_file(), "the link was replaced by the timeline itself");
    assert_eq!(written.permissions().mode() & 0o777, 0o600, "as private as the trace");
    let value: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.join("trace.timeline.json")).unwrap()).unwrap();
    assert!(value["traceEvents"].is_array());
    let left: Vec<String> = std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(left.len(), 2, "no temporary file left beside them: {left:?}");
}

#[test]
fn demo_runs_and_reports_the_injected_nan() {
    let dir = temp_dir("cli-demo");
    let out = cublasguard(&["demo"], &dir, &[]);
    let body = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{body}{}", text(&out.stderr));
    assert!(body.starts_with("cublasguard report:"), "only the report on stdout: {body}");
    assert!(body.contains("First fault: cublasSgemm_v2"), "{body}");
    assert!(body.contains("looks like nn.Linear(in_features=8, out_features=16)"), "{body}");
    // The user's own line first: the example's source line that made the call.
    let at = body.lines().find(|l| l.trim_start().starts_with("at ")).unwrap_or_else(|| panic!("{body}"));
    assert!(at.contains("examples/mlp.c:") && at.contains(" in gemm_rm: ") && at.contains("cublasSgemm("), "{at}");
    // The first fault's operands are dumped, and replay says what the NaN is.
    let dumped = body.lines().find_map(|l| l.trim_start().strip_prefix("operands dumped to ")).unwrap_or_else(|| panic!("{body}"));
    let dump = dumped.split(".safetensors").next().map(|p| format!("{p}.safetensors")).unwrap();
    let out = cublasguard(&["replay", &dump], &dir, &[]);
    let replayed = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "reproduced as recorded: {replayed}{}", text(&out.stderr));
    let verdict = replayed.lines().find_map(|l| l.strip_prefix("verdict: ")).unwrap_or_else(|| panic!("{replayed}"));
    assert!(verdict.starts_with("inherent: the inputs hold NaN/Inf (B: 1 NaN"), "the injected NaN is in the input features: {replayed}");
}

#[test]
fn the_guard_library_is_found_without_being_told_where() {
    // As after `cargo run --release -- demo` on a fresh clone: the library sits in deps/.
    let out = Command::new(env!("CARGO_BIN_EXE_cublasguard"))
        .arg("demo")
        .current_dir(temp_dir("cli-demo-find"))
        .env_remove("CUBLASGUARD_LIB")
        .output()
        .expect("run demo");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("cublasguard report:"));
}

#[test]
fn every_subcommand_has_help() {
    for sub in ["run", "report", "doctor", "timeline", "demo", "replay"] {
        let out = cublasguard(&[sub, "--help"], Path::new("."), &[]);
        assert_eq!(out.status.code(), Some(0), "{sub}");
        assert!(text(&out.stdout).contains("Usage: cublasguard"), "{sub}");
    }
}

#[test]
fn run_forwards_termination_signals_to_the_command() {
    let dir = temp_dir("cli-signal");
    let mut child = Command::new(env!("CARGO_BIN_EXE_cublasguard"))
        .args(["run", "--", "sleep", "30"])
        .current_dir(&dir)
        .env("CUBLASGUARD_LIB", guard_lib())
        .env("CUBLASGUARD_QUIET", "1")
        .spawn()
        .expect("spawn");
    // Wait until the command runs, then signal the CLI alone, as a scheduler would.
    let children = format!("/proc/{0}/task/{0}/children", child.id());
    for _ in 0..200 {
        if std::fs::read_to_string(&children).is_ok_and(|c| !c.trim().is_empty()) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().expect("wait");
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "the command died by the forwarded SIGTERM");
}

#[test]
fn run_forwards_every_catchable_signal_a_scheduler_sends() {
    // Slurm sends SIGUSR1 before a time limit; others send USR2, QUIT, ALRM, WINCH, CONT. The
    // command traps each and exits with a code that names it; the CLI must survive and pass it on.
    for (sig, name) in
        [(libc::SIGUSR1, "USR1"), (libc::SIGUSR2, "USR2"), (libc::SIGQUIT, "QUIT"), (libc::SIGALRM, "ALRM"), (libc::SIGWINCH, "WINCH"), (libc::SIGCONT, "CONT")]
    {
        let dir = temp_dir("cli-signals");
        let script = format!("trap 'exit 42' {name}; echo ready > ready; while :; do sleep 0.05; done");
        let mut child = Command::new(env!("CARGO_BIN_EXE_cublasguard"))
            .args(["run", "--", "sh", "-c", &script])
            .current_dir(&dir)
            .env("CUBLASGUARD_LIB", guard_lib())
            .env("CUBLASGUARD_QUIET", "1")
            .spawn()
            .expect("spawn");
        for _ in 0..200 {
            if dir.join("ready").exists() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        // SAFETY: kill with the CLI's pid.
        unsafe { libc::kill(child.id() as i32, sig) };
        let status = child.wait().expect("wait");
        assert_eq!(status.code(), Some(42), "SIG{name}: the command's trap ran and the CLI passed its status on");
    }
}

#[test]
fn run_summarises_only_the_traces_of_its_own_processes() {
    // Another run's trace with a fault, fresh, in the same folder and matching the pattern.
    let dir = temp_dir("cli-run-own");
    let program = scenarios().display().to_string();
    let env = [("LD_LIBRARY_PATH", standin_path(true))];
    let other = cublasguard(&["run", "--", &program, "nan_a"], &dir, &env);
    assert_eq!(other.status.code(), Some(0));
    assert!(text(&other.stderr).contains("1 fault in"), "{}", text(&other.stderr));
    let out = cublasguard(&["run", "--", &program, "clean"], &dir, &env);
    let stderr = text(&out.stderr);
    assert!(stderr.contains("cublasguard: no faults in"), "the other run's fault is not this run's: {stderr}");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2, "both traces are there");
}

#[test]
fn report_refuses_hostile_input_and_never_passes_escapes_to_the_terminal() {
    let dir = temp_dir("cli-hostile");
    // A FIFO with no writer, and /dev/zero: refused at once (exit 2), not a hang or a memory run.
    let fifo = dir.join("fifo.json");
    let c = std::ffi::CString::new(fifo.display().to_string()).unwrap();
    // SAFETY: mkfifo with a valid path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    for path in [fifo.as_path(), Path::new("/dev/zero")] {
        let out = report(&[path], &[]);
        assert_eq!(out.status.code(), Some(2), "{}: {}", path.display(), text(&out.stderr));
        assert!(text(&out.stderr).contains("not a regular file"), "{}", text(&out.stderr));
    }
    // A real trace whose message carries a terminal escape sequence, and whose fault count is
    // near u64::MAX twice over: the escape is shown escaped, and the sum does not wrap to 0.
    let program = scenarios();
    let run = run(Launch::new(&program, &["nan_a"]));
    let mut t: serde_json::Value = serde_json::from_slice(&std::fs::read(&run.trace_path).unwrap()).unwrap();
    t["faults"][0]["message"] = serde_json::json!("evil \u{1b}]0;owned\u{7} \u{1b}[2J");
    t["faults"] = serde_json::json!([]);
    t["summary"]["faults"] = serde_json::json!(1u64 << 63);
    let a = dir.join("a.json");
    std::fs::write(&a, serde_json::to_vec(&t).unwrap()).unwrap();
    let b = dir.join("b.json");
    std::fs::write(&b, serde_json::to_vec(&t).unwrap()).unwrap();
    let out = report(&[&a, &b], &[]);
    assert_eq!(out.status.code(), Some(1), "2^63 + 2^63 faults are still faults: {}", text(&out.stderr));
    let mut t: serde_json::Value = serde_json::from_slice(&std::fs::read(&run.trace_path).unwrap()).unwrap();
    t["faults"][0]["message"] = serde_json::json!("evil \u{1b}]0;owned\u{7} \u{1b}[2J");
    std::fs::write(&a, serde_json::to_vec(&t).unwrap()).unwrap();
    let out = report(&[&a], &[]);
    let stdout = text(&out.stdout);
    assert!(!stdout.contains('\u{1b}') && !stdout.contains('\u{7}'), "raw control characters reached the terminal");
    assert!(stdout.contains("\\u{1b}]0;owned"), "{stdout}");
}

#[test]
fn run_summary_leads_with_the_programs_own_line_in_either_mode() {
    // The line comes from the return addresses a call keeps at the call: a verdict judged on
    // the guard's thread after the call returned (the default) names it as one judged at the
    // call (gemm mode) does.
    for mode in ["deferred", "gemm"] {
        let (out, _) = run_scenario("nan_a", &[("CUBLASGUARD_SYNC", mode.into())], true);
        let stderr = text(&out.stderr);
        let at = stderr.lines().find(|l| l.starts_with("  at ")).unwrap_or_else(|| panic!("{mode}: {stderr}"));
        assert!(at.contains("scenarios.c:") && at.contains(" in gemm: "), "{mode}: {at}");
    }
}

#[test]
fn run_honours_an_exported_cublasguard_trace_and_the_option_wins_over_it() {
    let dir = temp_dir("cli-run-env");
    let program = scenarios().display().to_string();
    let exported = dir.join("exported-%p.json").display().to_string();
    let env = [("LD_LIBRARY_PATH", standin_path(true)), ("CUBLASGUARD_TRACE", exported.clone())];
    let out = cublasguard(&["run", "--", &program, "nan_a"], &dir, &env);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let names: Vec<String> = std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    assert!(names.len() == 1 && names[0].starts_with("exported-"), "the trace went where the user asked: {names:?}");
    let chosen = dir.join("chosen.json").display().to_string();
    let out = cublasguard(&["run", "--trace", &chosen, "--", &program, "nan_a"], &dir, &env);
    assert_eq!(out.status.code(), Some(0));
    assert!(dir.join("chosen.json").exists(), "the option wins");
    let help = cublasguard(&["run", "--help"], &dir, &[]);
    assert!(text(&help.stdout).contains("CUBLASGUARD_TRACE"), "{}", text(&help.stdout));
}

#[test]
fn the_version_names_the_package_and_the_commit_and_every_trace_records_it() {
    let dir = temp_dir("version");
    let out = cublasguard(&["--version"], &dir, &[]);
    let printed = text(&out.stdout);
    let version = env!("CARGO_PKG_VERSION");
    assert!(printed.starts_with(&format!("cublasguard {version}")), "{printed}");
    if manifest_dir().join(".git").exists() {
        assert!(printed.contains(" (git ") && printed.trim_end().ends_with(')'), "a build from a clone names its commit: {printed}");
    }
    let t = scenario("nan_a", &[]).trace();
    assert_eq!(t.faults.len(), 1, "{:#?}", t.faults);
    assert_eq!(t.guard.version, version);
    assert_eq!(t.guard.commit.is_some(), printed.contains("(git "), "the trace and --version agree");
}

#[test]
fn demos_leave_one_folder_behind_and_print_a_replay_command_that_runs() {
    let tmp = temp_dir("cli-demo-tmp");
    let tmp_s = tmp.display().to_string();
    for _ in 0..3 {
        let out = cublasguard(&["demo"], &tmp, &[("TMPDIR", tmp_s.clone())]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    let base: Vec<_> = std::fs::read_dir(&tmp).unwrap().flatten().map(|e| e.path()).collect();
    assert_eq!(base.len(), 1, "{base:?}");
    let runs: Vec<_> = std::fs::read_dir(&base[0]).unwrap().flatten().collect();
    assert_eq!(runs.len(), 1, "only the last demo's folder: {runs:?}");
    // The command it prints names this very program, so it works after `cargo run` too.
    let out = cublasguard(&["demo"], &tmp, &[("TMPDIR", tmp_s.clone())]);
    let err = text(&out.stderr);
    let line = err.lines().find_map(|l| l.strip_prefix("Next, to see what the NaN is: ")).unwrap_or_else(|| panic!("{err}"));
    let mut words = line.split_whitespace();
    let (program, sub, dump) = (words.next().unwrap(), words.next().unwrap(), words.next().unwrap());
    assert!(Path::new(program).is_absolute() && sub == "replay", "{line}");
    let replayed = Command::new(program).args(["replay", dump]).output().expect("run the printed command");
    assert_eq!(replayed.status.code(), Some(0), "{}", text(&replayed.stderr));
}

/// The command reads traces and runs programs; it is not itself an interposer. Were it to link
/// the preload library again, it would export the guard's `dlsym` and its own lookups (libloading's,
/// replay's cuBLAS) would go through the guard's trampoline.
#[test]
fn the_command_exports_no_interposer_symbols_and_its_lookups_go_to_the_c_library() {
    let readelf = |args: &[&str]| {
        let out = Command::new("readelf").args(args).arg(cli()).output().expect("readelf (binutils) is installed with the C compiler");
        assert!(out.status.success(), "readelf {args:?}: {}", text(&out.stderr));
        text(&out.stdout)
    };
    let exported: Vec<String> = readelf(&["--dyn-syms", "-W"])
        .lines()
        .filter(|l| l.contains(" GLOBAL ") && !l.contains(" UND "))
        .filter_map(|l| l.split_whitespace().last().map(str::to_string))
        .collect();
    for name in ["dlsym", "dlvsym", "dlclose", "cublasSgemm_v2", "cudaMalloc", "cuGetProcAddress", "cublasguard_instance"] {
        assert!(!exported.iter().any(|e| e == name || e.starts_with(&format!("{name}@"))), "the command exports {name}: {exported:?}");
    }
    let relocations = readelf(&["-r", "-W"]);
    let dlsym: Vec<&str> = relocations.lines().filter(|l| l.split_whitespace().nth(4).is_some_and(|s| s.starts_with("dlsym"))).collect();
    assert!(!dlsym.is_empty() && dlsym.iter().all(|l| l.contains("dlsym@GLIBC")), "dlsym relocations: {dlsym:?}");
}
