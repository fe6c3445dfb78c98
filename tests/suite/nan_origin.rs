//! Origin mode (`CUBLASGUARD_NAN_ORIGIN=1`): the memory guarded calls use is watched, and the
//! first kernel launch after which it holds NaN/Inf it did not hold is recorded as the origin
//! (`nonfinite_origin`), on driver and runtime launches alike, from C and from Python; the
//! report leads with it, also across ranks.

use crate::common;

use common::*;
use cublasguard_format::trace::{self, FaultKind, Trace};

fn driver_launches(mode: &str, env: &[(&str, &str)]) -> Run {
    let program = build_c("driver_launches", &["driver_launches.c"], false);
    run(Launch { env, ..Launch::new(&program, &[mode]) })
}

const ORIGIN: (&str, &str) = ("CUBLASGUARD_NAN_ORIGIN", "1");

fn origins(t: &Trace) -> Vec<&cublasguard_format::trace::Fault> {
    faults_of(t, FaultKind::NonfiniteOrigin)
}

#[test]
fn origin_mode_names_the_launch_that_first_made_nan_in_memory_a_gemm_reads() {
    // fill(A, 2), a GEMM reads A, fill(A, NaN), fill(B, 3), a GEMM consumes A's NaN.
    let run = driver_launches("refill", &[ORIGIN]);
    let t = run.trace();
    let fills: Vec<u64> = t.recent_calls.iter().filter(|c| c.api == "cuLaunchKernel").map(|c| c.seq).collect();
    let found = origins(&t);
    assert_eq!(found.len(), 1, "{:#?}", t.faults);
    let o = found[0];
    assert_eq!((o.api.as_str(), o.seq), ("cuLaunchKernel", fills[1]));
    assert_eq!(o.args["kernel"], "fill");
    let written = &o.operands[0];
    assert_eq!((written.nan, written.first_nonfinite.map(|p| p.row)), (Some(4), Some(0)));
    // The GEMM that consumed it follows, as propagation; the report leads with the origin.
    let consumed = faults_of(&t, FaultKind::NonfiniteInput);
    assert_eq!(consumed.len(), 1);
    assert!(consumed[0].seq > o.seq);
    let out = std::process::Command::new(cli()).arg("report").arg(&run.trace_path).output().expect("report");
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.find("[1] ").map(|i| &text[i..]).unwrap_or("");
    assert!(first.starts_with(&format!("[1] cuLaunchKernel #{}: nonfinite_origin", fills[1])), "{text}");
    assert!(text.contains(&format!("first consumed by: cublasSgemm_v2 #{}", consumed[0].seq)), "{text}");
    assert!(text.contains("propagated from"), "{text}");
    // A runtime launch (a kernel registered as nvcc's code registers it) is an origin too.
    let t = driver_launches("runtime_origin", &[ORIGIN]).trace();
    let found = origins(&t);
    assert_eq!(found.len(), 1, "{:#?}", t.faults);
    assert_eq!((found[0].api.as_str(), &found[0].args["kernel"]), ("cudaLaunchKernel", &"fill_nan(float*, int)".into()));
}

#[test]
fn without_origin_mode_no_launch_is_scanned_or_blamed() {
    let t = driver_launches("refill", &[]).trace();
    assert!(origins(&t).is_empty(), "{:#?}", t.faults);
}

#[test]
fn a_kernel_that_only_lowers_the_nan_count_is_no_origin() {
    let t = driver_launches("lower", &[ORIGIN]).trace();
    let launches: Vec<u64> = t.recent_calls.iter().filter(|c| c.api == "cuLaunchKernel").map(|c| c.seq).collect();
    let found: Vec<u64> = origins(&t).iter().map(|f| f.seq).collect();
    assert_eq!(found, [launches[0]], "only the NaN fill, not the one that overwrote half of it: {:#?}", t.faults);
}

#[test]
fn memory_that_held_nan_when_first_seen_is_not_blamed() {
    // fill(A, NaN) before any guarded call read A: the GEMM finds A already bad.
    let t = driver_launches("ex", &[ORIGIN]).trace();
    assert!(origins(&t).is_empty(), "{:#?}", t.faults);
    assert_eq!(faults_of(&t, FaultKind::NonfiniteInput).len(), 1);
}

#[test]
fn a_kernel_rule_keeps_a_mask_writer_out_and_counts_it() {
    // The second fill writes -inf, as an attention mask does.
    let t = driver_launches("mask", &[ORIGIN]).trace();
    assert_eq!(origins(&t).len(), 1, "without a rule it is an origin: {:#?}", t.faults);
    let t = driver_launches("mask", &[ORIGIN, ("CUBLASGUARD_IGNORE", "kernel=fill")]).trace();
    assert!(origins(&t).is_empty(), "{:#?}", t.faults);
    assert_eq!(t.summary.ignored_faults.get("kernel=fill"), Some(&1), "{:?}", t.summary.ignored_faults);
}

#[test]
fn a_python_origin_names_the_line_that_launched_it_for_a_runtime_and_a_triton_style_launch() {
    let script = manifest_dir().join("tests/python/origin_line.py");
    let script_s = script.display().to_string();
    let python = std::path::PathBuf::from("python3");
    let path = std::env::var("PATH").unwrap_or_default();
    let env = [("PATH", path.as_str()), ORIGIN];
    let run = run(Launch { env: &env, ..Launch::new(&python, &[&script_s]) });
    assert!(run.stdout().contains("launch 0\nsgemm 0\nload 0\nget 0\nsgemm 0\nlaunch 0"), "{}\n{}", run.stdout(), run.stderr());
    let t = run.trace();
    let found = origins(&t);
    assert_eq!(found.len(), 2, "{:#?}", t.faults);
    let text = std::fs::read_to_string(&script).unwrap();
    let line_of = |mark: &str| text.lines().position(|l| l.contains(mark)).unwrap() as u32 + 1;
    for (origin, api, kernel, mark, function) in [
        (found[0], "cudaLaunchKernel", "fill_nan(float*, int)", "# FRAME origin", "normalise"),
        (found[1], "cuLaunchKernelEx", "fill", "# FRAME triton", "triton_kernel"),
    ] {
        assert!(origin.api == api && origin.args["kernel"] == kernel, "{origin:#?}");
        let top = origin.python_stack.first().expect("Python frames");
        assert_eq!((top.file.as_str(), top.line, top.function.as_str()), (script_s.as_str(), line_of(mark), function));
    }
}

#[test]
fn the_merged_report_of_ranks_names_the_rank_that_made_the_nan_before_those_that_consumed_it() {
    let dir = temp_dir("origin-ranks");
    let program = build_c("driver_launches", &["driver_launches.c"], false);
    let scenarios = scenarios();
    let pattern = dir.join("trace-%r.json").display().to_string();
    // Rank 1 makes the NaN (and consumes it); ranks 0, 2 and 3 only consume NaN, later (as
    // after an all-reduce). One job: one run id, as its launcher under the guard gives them
    // (run one after another here, they would otherwise be four runs, and `report` the newest).
    for (rank, program, args) in [("1", &program, "refill"), ("0", &scenarios, "nan_a"), ("2", &scenarios, "nan_a"), ("3", &scenarios, "nan_a")] {
        let env = [ORIGIN, ("RANK", rank), ("WORLD_SIZE", "4"), ("CUBLASGUARD_TRACE", pattern.as_str()), ("CUBLASGUARD_RUN_ID", "job-1")];
        let r = run(Launch { env: &env, trace: false, ..Launch::new(program, &[args]) });
        assert!(r.output.status.success(), "rank {rank}: {}", r.stderr());
    }
    let out = std::process::Command::new(cli()).arg("report").arg(&dir).output().expect("report");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("NaN/Inf first made in pid") && text.contains("rank 1 on"), "{text}");
    assert!(text.contains("kernel fill, launched at cuLaunchKernel #"), "{text}");
    assert!(text.contains("rank 0, rank 2, rank 3 only consumed it"), "{text}");
    let first = text.find("[1] ").map(|i| &text[i..]).unwrap_or("");
    assert!(first.starts_with("[1] cuLaunchKernel #") && first.lines().next().is_some_and(|l| l.contains("rank 1")), "{text}");
}

#[test]
fn a_rerun_from_the_first_runs_trace_names_the_launch_that_made_a_nan_in_memory_no_guarded_call_had_used() {
    // Each mode writes NaN into A by a kernel, before any guarded call used A; then a GEMM
    // consumes it: by cuLaunchKernelEx, by cuLaunchKernel with its parameters in `extra`, with
    // the pointer inside a struct parameter (Triton's path), by a runtime kernel registered as
    // nvcc's code registers it, and by that kernel through an interior pointer into A.
    let modes = [
        ("ex", "cuLaunchKernelEx"),
        ("plain", "cuLaunchKernel"),
        ("struct", "cuLaunchKernel"),
        ("runtime", "cudaLaunchKernel"),
        ("interior", "cudaLaunchKernel"),
    ];
    for (mode, api) in modes {
        let first = driver_launches(mode, &[]);
        let consumed = faults_of(&first.trace(), FaultKind::NonfiniteInput).first().map(|f| f.seq).expect("the first run's consumed NaN");
        // Origin mode alone watches what guarded calls used: A only from the GEMM on, too late.
        assert!(origins(&driver_launches(mode, &[ORIGIN]).trace()).is_empty(), "{mode}: origin mode alone finds none");
        let path = first.trace_path.display().to_string();
        let rerun = driver_launches(mode, &[("CUBLASGUARD_ORIGIN_FROM", path.as_str())]);
        let t = rerun.trace();
        let found = origins(&t);
        assert_eq!(found.len(), 1, "{mode}: {:#?}\n{}", t.faults, rerun.stderr());
        let o = found[0];
        let launch = t.recent_calls.iter().filter(|c| c.api == api).map(|c| c.seq).next_back();
        assert_eq!((o.api.as_str(), Some(o.seq)), (api, launch), "{mode}");
        assert!(
            o.message.contains(&format!("cublasSgemm_v2 #{consumed} consumed NaN/Inf from in the first run")) && o.message.contains(&path),
            "{mode}: {}",
            o.message
        );
        assert!(rerun.stderr().contains("watching the 1 piece(s) of memory"), "{mode}: {}", rerun.stderr());
    }
}

#[test]
fn cublasguard_run_origin_from_reruns_from_the_first_runs_trace_and_refuses_one_it_cannot_use() {
    let program = build_c("driver_launches", &["driver_launches.c"], false);
    let first = driver_launches("interior", &[]);
    let dir = temp_dir("origin-from-cli");
    let s = standin();
    let cli_run = |args: &[&str]| {
        std::process::Command::new(cli())
            .args(args)
            .current_dir(&dir)
            .env("CUBLASGUARD_LIB", guard_lib())
            .env("LD_LIBRARY_PATH", format!("{}:{}", s.join("lib").display(), s.join("driver").display()))
            .env_remove("CUBLASGUARD_TRACE")
            .output()
            .expect("cublasguard run")
    };
    let second = dir.join("second.json");
    let (second_s, first_s, program_s) = (second.display().to_string(), first.trace_path.display().to_string(), program.display().to_string());
    let out = cli_run(&["run", "--trace", &second_s, "--origin-from", &first_s, "--", &program_s, "interior"]);
    let t = trace::read(&second).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let found = origins(&t);
    assert_eq!(found.len(), 1, "{:#?}", t.faults);
    assert!(found[0].message.contains(&format!("CUBLASGUARD_ORIGIN_FROM={first_s}")), "{}", found[0].message);
    // The report leads with the origin, naming the first run's trace.
    let report = std::process::Command::new(cli()).arg("report").arg(&second).output().expect("report");
    let text = String::from_utf8_lossy(&report.stdout);
    let lead = text.split("First fault: ").nth(1).unwrap_or_default();
    assert!(lead.starts_with("cudaLaunchKernel #") && lead.contains(&first_s), "{text}");
    // A path that is no trace, and a trace without a consumed NaN/Inf a rerun can find: refused
    // before the command starts, with why.
    let missing = dir.join("missing.json").display().to_string();
    let out = cli_run(&["run", "--origin-from", &missing, "--", &program_s, "interior"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains(&format!("--origin-from {missing}: ")), "{}", String::from_utf8_lossy(&out.stderr));
    let clean = driver_launches("coop", &[]);
    let clean_s = clean.trace_path.display().to_string();
    let out = cli_run(&["run", "--origin-from", &clean_s, "--", &program_s, "interior"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no guarded call there consumed NaN/Inf"), "{}", String::from_utf8_lossy(&out.stderr));
}
