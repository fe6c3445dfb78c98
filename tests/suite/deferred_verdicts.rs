//! CUBLASGUARD_SYNC=deferred with the NaN/Inf scan on: a guarded call queues its scans on its
//! stream and returns; the verdict is judged once they landed (by the guard's own thread, at
//! the program's synchronisations, at exit, before a crash record) and a NaN/Inf found then is
//! recorded on the call that made it, as complete as one found at the call, with
//! `found_at_seq`. Run on the asynchronous stand-in with the GPU kept behind the host, so that
//! nothing is known at the call.

use crate::common;

use common::*;
use cublasguard_format::trace::{Fault, FaultKind, Trace};

const DEFERRED: (&str, &str) = ("CUBLASGUARD_SYNC", "deferred");
const GEMM_MODE: (&str, &str) = ("CUBLASGUARD_SYNC", "gemm");
/// The stand-in's queued work runs 20 ms after it was queued: a GEMM's scans land long after
/// its call returned.
const GPU_BEHIND: (&str, &str) = ("CUDASHIM_WORKER_DELAY_US", "20000");

fn gemm_seqs(trace: &Trace) -> Vec<u64> {
    trace.recent_calls.iter().filter(|c| c.api == "cublasSgemm_v2").map(|c| c.seq).collect()
}

/// What a fault says of its call, whenever it was found, with the addresses (another process's
/// each run) left out.
fn as_at_the_call(f: &Fault) -> String {
    let operands = serde_json::to_string(&f.operands).unwrap_or_default();
    let args = serde_json::to_string(&f.args).unwrap_or_default();
    let handle = serde_json::to_string(&f.handle).unwrap_or_default();
    let text = format!("{:?} {} #{} {} {} {} {} {:?}", f.kind, f.api, f.seq, f.message, args, operands, handle, f.stream);
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("0x") {
        out.push_str(&rest[..at + 2]);
        rest = rest[at + 2..].trim_start_matches(|c: char| c.is_ascii_hexdigit());
        out.push('_');
    }
    out + rest
}

fn both_scan_paths() -> [(&'static str, &'static str); 2] {
    [("CUBLASGUARD_DEVICE_SCAN", "on"), ("CUBLASGUARD_DEVICE_SCAN", "off")]
}

#[test]
fn an_overflow_at_a_gemm_is_recorded_on_it_though_found_later_and_says_where_it_was_found() {
    for path in both_scan_paths() {
        let run = scenario("overflow", &[DEFERRED, GPU_BEHIND, path]);
        let t = run.trace();
        let gemms = gemm_seqs(&t);
        let f = only_fault(&t);
        assert_eq!((f.kind, f.seq), (FaultKind::NonfiniteOutput, gemms[0]), "{path:?}: {}", f.message);
        let found = f.found_at_seq.unwrap_or_else(|| panic!("{path:?}: found after its call: {f:#?}"));
        assert!(found == 0 || found > f.seq, "{path:?}: found at #{found}, after #{}", f.seq);
        assert_eq!(f.operands.iter().find(|o| o.name == "C").and_then(|o| o.inf), Some(16), "{path:?}: {:#?}", f.operands);
        assert_eq!(t.summary.deferred_verdicts.get("deferred"), Some(&2), "{path:?}: {:?}", t.summary);
        assert!(!t.summary.deferred_verdicts.contains_key("waiting"), "every verdict judged: {:?}", t.summary);
        // In gemm mode the same fault, found at its call.
        let gemm_mode = scenario("overflow", &[GEMM_MODE, GPU_BEHIND, path]).trace();
        let g = only_fault(&gemm_mode);
        assert_eq!(g.found_at_seq, None);
        assert_eq!(as_at_the_call(f), as_at_the_call(g), "{path:?}: as complete as one found at the call");
    }
}

#[test]
fn a_nan_read_by_a_gemm_is_recorded_as_it_is_in_gemm_mode() {
    for path in both_scan_paths() {
        for scene in ["nan_a", "nan_c_beta1"] {
            let deferred = scenario(scene, &[DEFERRED, GPU_BEHIND, path]).trace();
            let gemm_mode = scenario(scene, &[GEMM_MODE, path]).trace();
            let (f, g) = (only_fault(&deferred), only_fault(&gemm_mode));
            assert_eq!(f.kind, FaultKind::NonfiniteInput, "{scene} {path:?}");
            assert!(f.found_at_seq.is_some(), "{scene} {path:?}: {f:#?}");
            assert_eq!(as_at_the_call(f), as_at_the_call(g), "{scene} {path:?}");
        }
        // beta = 0: C is not read, so its NaN is no fault, now or later.
        let t = scenario("nan_c_beta0", &[DEFERRED, GPU_BEHIND, path]).trace();
        assert!(t.faults.is_empty(), "{path:?}: {:#?}", t.faults);
    }
}

#[test]
fn a_clean_run_leaves_the_program_s_output_as_it_is_bare() {
    for path in both_scan_paths() {
        let program = scenarios();
        let env = [DEFERRED, GPU_BEHIND, path];
        let bare = run(Launch { env: &env, guarded: false, ..Launch::new(&program, &["clean"]) });
        let guarded = run(Launch { env: &env, ..Launch::new(&program, &["clean"]) });
        assert_eq!(bare.stdout(), guarded.stdout(), "{path:?}");
        let t = guarded.trace();
        assert!(t.faults.is_empty(), "{:#?}", t.faults);
        assert_eq!(t.summary.deferred_verdicts.get("deferred"), Some(&2), "{:?}", t.summary);
    }
}

#[test]
fn a_crash_keeps_the_verdicts_that_had_landed() {
    // No synchronisation between the GEMM that reads the NaN and the segfault: the guard's
    // thread judges the verdict as it lands, and the crash writer waits a moment for it.
    let run = scenario("fault_then_crash", &[DEFERRED]);
    let t = run.trace();
    assert!(t.crash.is_some(), "a crash trace: {}", run.stderr());
    let f = only_fault(&t);
    assert_eq!((f.kind, f.seq), (FaultKind::NonfiniteInput, gemm_seqs(&t)[0]), "{f:#?}");
    assert_eq!(t.summary.deferred_verdicts.get("deferred"), Some(&1), "{:?}", t.summary);
    assert!(!t.summary.deferred_verdicts.contains_key("waiting"), "{:?}", t.summary);
}

#[test]
fn on_fault_error_still_refuses_the_call_that_makes_a_nan_so_it_waits_for_the_verdict() {
    let program = scenarios();
    for mode in [DEFERRED, GEMM_MODE] {
        let env = [mode, ("CUBLASGUARD_ON_FAULT", "error")];
        let run = run(Launch { env: &env, ..Launch::new(&program, &["overflow"]) });
        assert!(run.stdout().contains("sgemm status=13"), "{mode:?}: EXECUTION_FAILED for the overflow: {}", run.stdout());
        assert_eq!(only_fault(&run.trace()).found_at_seq, None);
    }
    assert!(blocking_per_further_gemm(&[DEFERRED, ("CUBLASGUARD_ON_FAULT", "error")]) > 0, "it synchronises as gemm mode does");
}

#[test]
fn when_the_region_has_no_room_for_a_calls_scans_it_is_judged_at_the_call_as_in_gemm_mode() {
    // A region of one page: the 16 KiB operands of big_nan's GEMM cannot be staged in it.
    let env = [DEFERRED, GPU_BEHIND, ("CUBLASGUARD_DEVICE_SCAN", "off"), ("CUBLASGUARD_STAGING_BYTES", "4096")];
    let t = scenario("big_nan", &env).trace();
    let g = scenario("big_nan", &[GEMM_MODE, ("CUBLASGUARD_DEVICE_SCAN", "off")]).trace();
    let f = only_fault(&t);
    assert_eq!(as_at_the_call(f), as_at_the_call(only_fault(&g)), "the fault gemm mode records");
    assert_eq!(f.found_at_seq, None, "found at its call: {f:#?}");
    assert_eq!(t.summary.deferred_verdicts.get("judged_at_call"), Some(&1), "{:?}", t.summary);
    assert!(!t.summary.deferred_verdicts.contains_key("no_room"), "nothing left unscanned: {:?}", t.summary);
    assert_eq!(blocking_per_further_gemm(&env), 0, "calls whose scans fit still never wait");
}

fn large_operands() -> std::path::PathBuf {
    build_c("large_operands", &["large_operands.c"], false)
}

/// The stand-in's queued work a little behind the host (a run of thousands of GEMMs, each
/// 20 ms behind the one before, would take minutes).
const GPU_A_LITTLE_BEHIND: (&str, &str) = ("CUDASHIM_WORKER_DELAY_US", "200");

/// large_operands.c run with `args` under the guard, the host scan forced, in `mode`, the GPU
/// behind the host.
fn large_run(args: &[&str], mode: (&str, &str)) -> Trace {
    let program = large_operands();
    let behind = if matches!(args.first(), Some(&"burst" | &"ahead")) { GPU_A_LITTLE_BEHIND } else { GPU_BEHIND };
    let env = [mode, behind, ("CUBLASGUARD_DEVICE_SCAN", "off")];
    let run = run(Launch { env: &env, ..Launch::new(&program, args) });
    assert_eq!(run.code(), Some(0), "{args:?} {mode:?}: {}", run.stderr());
    run.trace()
}

/// One sgemm whose A is `mib` MiB, NaN at its start, middle and end: the default mode records
/// the fault gemm mode records, with its element, whether A fits the 32 MiB staging region or
/// not; within the scan budget (256 MiB an operand) the NaN is always found.
fn a_nan_in_a_large_operand_is_found_as_in_gemm_mode(mib: &str) {
    for at in ["start", "middle", "end"] {
        let args = ["big", mib, at];
        let (deferred, gemm_mode) = (large_run(&args, DEFERRED), large_run(&args, GEMM_MODE));
        assert_eq!(deferred.faults.len(), gemm_mode.faults.len(), "{args:?}: {:#?} against {:#?}", deferred.faults, gemm_mode.faults);
        for (f, g) in deferred.faults.iter().zip(&gemm_mode.faults) {
            assert_eq!(as_at_the_call(f), as_at_the_call(g), "{args:?}");
        }
        if mib.parse::<u64>().is_ok_and(|m| m <= 256) {
            let f = only_fault(&deferred);
            assert_eq!(f.kind, FaultKind::NonfiniteInput, "{args:?}");
            let a = f.operands.iter().find(|o| o.name == "A").expect("A");
            assert!(a.first_nonfinite.is_some() && !a.sampled, "{args:?}: {a:#?}");
        }
        let sampled = u64::from(mib.parse::<u64>().is_ok_and(|m| m > 256));
        assert_eq!((deferred.summary.sampled_operands, gemm_mode.summary.sampled_operands), (sampled, sampled), "{args:?}: A sampled past the budget");
        let calls = deferred.recent_calls.iter().filter(|c| c.api == "cublasSgemm_v2").collect::<Vec<_>>();
        assert!(calls.iter().all(|c| c.scanned), "{args:?}");
        assert!(!deferred.summary.deferred_verdicts.contains_key("no_room"), "{args:?}: {:?}", deferred.summary);
    }
}

#[test]
fn a_nan_in_a_31_mib_operand_is_found_as_in_gemm_mode() {
    a_nan_in_a_large_operand_is_found_as_in_gemm_mode("31");
}

#[test]
fn a_nan_in_a_33_mib_operand_larger_than_the_staging_region_is_found_as_in_gemm_mode() {
    a_nan_in_a_large_operand_is_found_as_in_gemm_mode("33");
}

#[test]
fn a_nan_in_a_64_mib_operand_larger_than_the_staging_region_is_found_as_in_gemm_mode() {
    a_nan_in_a_large_operand_is_found_as_in_gemm_mode("64");
}

#[test]
fn a_300_mib_operand_beyond_the_scan_budget_is_sampled_alike_in_both_modes() {
    a_nan_in_a_large_operand_is_found_as_in_gemm_mode("300");
}

#[test]
fn a_batch_whose_members_together_pass_the_staging_region_is_found_as_in_gemm_mode() {
    let args = ["batch", "40", "4"];
    let (deferred, gemm_mode) = (large_run(&args, DEFERRED), large_run(&args, GEMM_MODE));
    let (f, g) = (only_fault(&deferred), only_fault(&gemm_mode));
    assert_eq!(as_at_the_call(f), as_at_the_call(g));
    assert_eq!(f.operands.iter().find(|o| o.name == "A").and_then(|o| o.bad_member), Some(3), "{f:#?}");
}

#[test]
fn after_a_burst_of_nan_gemms_the_staging_region_comes_back_and_a_later_nan_is_found() {
    // 21 GEMMs that read a NaN, 3,000 clean ones (16 KiB operands: together far more than the
    // region), then one more NaN: every fault gemm mode records.
    let args = ["burst", "21", "3000", "64"];
    let (deferred, gemm_mode) = (large_run(&args, DEFERRED), large_run(&args, GEMM_MODE));
    assert_eq!(gemm_mode.faults.len(), 22);
    assert_eq!(deferred.faults.iter().map(|f| f.seq).collect::<Vec<_>>(), gemm_mode.faults.iter().map(|f| f.seq).collect::<Vec<_>>());
    assert!(!deferred.summary.deferred_verdicts.contains_key("no_room"), "{:?}", deferred.summary);
    let deferred_count = deferred.summary.deferred_verdicts.get("deferred").copied().unwrap_or(0);
    assert!(deferred_count > 2000, "most verdicts still deferred: {:?}", deferred.summary);
}

#[test]
fn a_host_running_far_ahead_of_the_device_still_gets_every_verdict() {
    // 200 GEMMs whose A and C are 1 MiB, queued on a GPU behind the host: 600 MiB of reads
    // through a 32 MiB region; the last one reads a NaN.
    let t = large_run(&["ahead", "200"], DEFERRED);
    let f = only_fault(&t);
    assert_eq!((f.kind, f.api.as_str()), (FaultKind::NonfiniteInput, "cublasSgemm_v2"));
    assert_eq!(Some(f.seq), t.recent_calls.iter().filter(|c| c.api == "cublasSgemm_v2").map(|c| c.seq).max());
    assert!(!t.summary.deferred_verdicts.contains_key("no_room"), "{:?}", t.summary);
}

#[test]
fn a_host_running_far_ahead_keeps_no_more_verdicts_waiting_than_the_heap_ceiling_allows_and_loses_none() {
    // 3,000 small GEMMs (the device scan reserves about 200 bytes of the region for each) on a
    // GPU a little behind, then one reading a NaN, with a 256 KiB region: the region alone would
    // let about 1,300 wait, each holding about 2 KiB of heap; the ceiling (session::verdicts::
    // max_waiting: twice the region in heap, 5 KiB a verdict) lets 102 wait, and the calls past
    // it are judged at the call. The NaN is still found on its call.
    let program = large_operands();
    let args = ["burst", "0", "3000", "4"];
    let env = [DEFERRED, ("CUDASHIM_WORKER_DELAY_US", "50"), ("CUBLASGUARD_DEVICE_SCAN", "on"), ("CUBLASGUARD_STAGING_BYTES", "262144")];
    let run = run(Launch { env: &env, ..Launch::new(&program, &args) });
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let t = run.trace();
    let most = t.summary.deferred_verdicts.get("most_waiting").copied().unwrap_or(0);
    assert!((64..=128).contains(&most), "the host ran ahead up to the ceiling and no further: {most} waited at once; {:?}", t.summary);
    assert!(t.summary.deferred_verdicts.get("judged_at_call").is_some_and(|&n| n > 0), "{:?}", t.summary);
    let f = only_fault(&t);
    assert_eq!((f.kind, f.seq), (FaultKind::NonfiniteInput, *gemm_seqs(&t).last().expect("the last GEMM")), "{}", f.message);
}

#[test]
fn a_backlog_of_verdicts_gives_its_heap_back_once_they_are_judged() {
    // 5,000 small GEMMs on a GPU a little behind: thousands of verdicts wait at once (the
    // resident memory grows by megabytes), then the program synchronises and idles. Once they
    // are judged the guard's thread hands the free heap back: without it the allocator kept
    // nearly all of it for the rest of the run.
    let program = large_operands();
    let env = [DEFERRED, ("CUDASHIM_WORKER_DELAY_US", "50")];
    let run = run(Launch { env: &env, ..Launch::new(&program, &["drain", "5000"]) });
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let out = run.stdout();
    let kb = |field: &str| -> i64 {
        let value = out.split_whitespace().find_map(|w| w.strip_prefix(&format!("{field}=")));
        value.and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("{field} in {out}"))
    };
    let (grown, kept) = (kb("rss_peak") - kb("rss_before"), kb("rss_after") - kb("rss_before"));
    assert!(grown > 8 * 1024, "the verdicts waited and took heap: {out}");
    assert!(kept < grown / 3, "the heap came back once they were judged: {kept} kB of {grown} kB kept ({out})");
}

/// This machine's CPython interpreters of the `minors` given ("3.11"), one each: on the PATH
/// or installed by pyenv, by their real executable (pyenv's shims need the environment the
/// tests clear).
pub(crate) fn pythons(minors: &[&str]) -> Vec<std::path::PathBuf> {
    let mut candidates: Vec<String> = vec!["python3".into()];
    candidates.extend(minors.iter().map(|m| format!("python{m}")));
    let pyenv_root = std::env::var("PYENV_ROOT").unwrap_or_else(|_| format!("{}/.pyenv", std::env::var("HOME").unwrap_or_default()));
    for entry in std::fs::read_dir(format!("{pyenv_root}/versions")).into_iter().flatten().flatten() {
        candidates.push(entry.path().join("bin/python3").display().to_string());
    }
    let mut found: Vec<(String, std::path::PathBuf)> = Vec::new();
    for candidate in candidates {
        let asked = std::process::Command::new(&candidate).args(["-c", "import sys; print(sys.version.split()[0], sys.executable)"]).output();
        let Ok(out) = asked else { continue };
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        let Some((version, exe)) = said.trim().split_once(' ') else { continue };
        let minor = version.rsplit_once('.').map_or(version, |(minor, _)| minor).to_string();
        let wanted = minors.contains(&minor.as_str()) && !found.iter().any(|(m, _)| *m == minor);
        if out.status.success() && wanted && std::path::Path::new(exe).is_file() {
            found.push((minor, exe.into()));
        }
    }
    found.into_iter().map(|(_, exe)| exe).collect()
}

/// late_frames.py's two NaN faults under `python`, both found at its synchronisation.
fn late_frames_faults(python: &std::path::Path) -> Vec<Fault> {
    let script = manifest_dir().join("tests/python/late_frames.py");
    let path = std::env::var("PATH").unwrap_or_default();
    let env = [("PATH", path.as_str()), DEFERRED, GPU_BEHIND];
    let run = run(Launch { env: &env, ..Launch::new(python, &[script.to_str().unwrap_or_default()]) });
    assert!(run.stdout().contains("done"), "{}: {}\n{}", python.display(), run.stdout(), run.stderr());
    let t = run.trace();
    let nan: Vec<Fault> = faults_of(&t, FaultKind::NonfiniteInput).into_iter().cloned().collect();
    assert_eq!(nan.len(), 2, "{}: {:#?}", python.display(), t.faults);
    let sync = t.recent_calls.iter().find(|c| c.api == "cudaDeviceSynchronize").map(|c| c.seq);
    for f in &nan {
        assert_eq!(f.found_at_seq, sync, "found at the program's synchronisation: {f:#?}");
    }
    nan
}

#[test]
fn a_verdict_judged_later_carries_the_python_frames_kept_at_its_call_with_the_gil_held_or_released() {
    let script = manifest_dir().join("tests/python/late_frames.py");
    let script_s = script.display().to_string();
    let pythons = pythons(&["3.10", "3.11", "3.12", "3.13"]);
    assert!(!pythons.is_empty(), "no CPython 3.10 to 3.13");
    for python in pythons {
        for (f, (layer, function)) in late_frames_faults(&python).iter().zip([("held", "layer_holding_the_gil"), ("released", "layer_releasing_the_gil")]) {
            let kept: Vec<_> = f.python_stack.iter().take(3).map(|s| (s.file.as_str(), s.function.as_str(), s.line)).collect();
            assert_eq!(
                kept,
                [
                    (script_s.as_str(), "gemm", line_of(&script, "# FRAME gemm")),
                    (script_s.as_str(), function, line_of(&script, &format!("# FRAME {layer}"))),
                    (script_s.as_str(), "<module>", line_of(&script, &format!("# FRAME call {layer}"))),
                ],
                "{} ({layer}): {f:#?}",
                python.display()
            );
            assert_eq!(f.python_stack_note, None, "{f:#?}");
        }
    }
}

#[test]
fn a_python_whose_frames_cannot_be_read_without_the_gil_keeps_those_read_with_it_and_says_why_it_has_none() {
    // CPython 3.9's layout is not one the guard knows: a thread holding the GIL is read through
    // the public API, one that released it keeps none, and the fault says so.
    let Some(python) = pythons(&["3.9"]).pop() else {
        eprintln!("no CPython 3.9 on this machine: nothing to run");
        return;
    };
    let script = manifest_dir().join("tests/python/late_frames.py");
    let nan = late_frames_faults(&python);
    let held = &nan[0].python_stack;
    assert!(held.len() >= 2, "{:#?}", nan[0]);
    assert_eq!((held[1].function.as_str(), held[1].line), ("layer_holding_the_gil", line_of(&script, "# FRAME held")));
    assert!(nan[1].python_stack.is_empty(), "{:#?}", nan[1]);
    let note = nan[1].python_stack_note.as_deref().unwrap_or_default();
    assert!(note.contains("released the GIL") && note.contains("3.10 to 3.13") && note.contains("CUBLASGUARD_SYNC=gemm"), "{note}");
}

#[test]
fn a_crash_amid_a_storm_of_verdicts_waits_while_they_are_still_being_judged() {
    // 500 GEMMs read a NaN, then the segfault: the guard's thread is still publishing faults
    // when the crash writer starts; it waits for as long as they keep coming.
    let env = [DEFERRED, ("CUBLASGUARD_STDERR_LINES", "0"), ("CUBLASGUARD_MAX_FAULTS", "100000"), ("CUBLASGUARD_QUIET", "1")];
    let run = run(Launch { env: &env, ..Launch::new(&scenarios(), &["storm_then_crash", "500"]) });
    let t = run.trace();
    assert!(t.crash.is_some(), "{}", run.stderr());
    assert_eq!((t.faults.len(), t.summary.faults), (500, 500), "{:?}", t.summary);
    assert!(t.faults.windows(2).all(|w| w[0].seq < w[1].seq), "in call order");
}

#[test]
fn a_program_that_exits_while_a_kernel_never_ends_exits_as_it_would_bare_says_what_never_finished_and_records_a_gpu_hang() {
    // A stream memory wait nobody satisfies, a GEMM queued behind it, exit(3): bare, the
    // program exits 3; the guard's wait for that GEMM's breadcrumb and verdict is bounded.
    let program = build_c("stuck_exit", &["stuck_exit.c"], false);
    let bare = run(Launch { guarded: false, ..Launch::new(&program, &[]) });
    assert_eq!(bare.code(), Some(3), "{}", bare.stderr());
    let limit = std::time::Duration::from_secs(60);
    let guarded = run_within(Launch { env: &[DEFERRED], ..Launch::new(&program, &[]) }, limit)
        .unwrap_or_else(|| panic!("the guarded program still had not exited after {limit:?}"));
    assert_eq!(guarded.code(), Some(3), "{}", guarded.stderr());
    assert_eq!(guarded.stdout(), bare.stdout());
    let t = guarded.trace();
    assert_eq!(t.summary.deferred_verdicts.get("unfinished_at_exit"), Some(&1), "{:?}", t.summary);
    assert_eq!(t.summary.deferred_verdicts.get("waiting"), Some(&1), "the stuck GEMM's verdict, not judged: {:?}", t.summary);
    let last_gemm = gemm_seqs(&t).into_iter().max().unwrap_or(0);
    assert!(guarded.stderr().contains(&format!("had not finished cublasSgemm_v2 #{last_gemm} on stream")), "{}", guarded.stderr());
    // Recorded as a hang, with the same facts as the watchdog's (issue 50).
    assert_eq!(t.faults.len(), 1, "{:#?}", t.faults);
    let f = &t.faults[0];
    assert_eq!((f.kind, f.api.as_str(), f.seq), (FaultKind::GpuHang, "cublasSgemm_v2", last_gemm), "{f:#?}");
    let h = f.hang.as_ref().expect("the hang's facts");
    assert_eq!(h.found_by, "exit");
    assert_eq!(h.last_landed, gemm_seqs(&t).into_iter().min(), "the first GEMM completed");
    assert!(h.stalled_s >= 5 && h.kernel.is_none() && h.blocked_threads.is_empty(), "{h:#?}");
    let source = manifest_dir().join("tests/c/stuck_exit.c");
    let line = format!("stuck_exit.c:{}", line_of(&source, "printf(\"sgemm=%d"));
    assert!(f.backtrace.first().is_some_and(|l| l.contains(&line)), "{line}: {:#?}", f.backtrace);
    assert!(f.breadcrumbs.iter().any(|b| b.first_unfinished == Some(last_gemm)), "{:#?}", f.breadcrumbs);
}
