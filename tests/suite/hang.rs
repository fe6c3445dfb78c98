//! The hang watchdog (issue 50): a job whose GPU work stops completing gets a `gpu_hang` in its
//! trace while it still hangs, naming the stuck call, the kernel before it and the host's wait.

use crate::common;

use common::*;
use cublasguard_format::trace::{self, FaultKind, Trace};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

fn hang_program() -> std::path::PathBuf {
    build_c("hang", &["hang.c"], false)
}

/// `hang.c MODE` under the guard with a one-second watchdog, in `dir`, its trace at `trace_path`.
fn start(dir: &Path, trace_path: &Path, mode: &str, rank: Option<&str>, env: &[(&str, &str)]) -> Child {
    let mut cmd = guarded_on_the_standin(&hang_program(), dir, trace_path);
    cmd.arg(mode).env("CUBLASGUARD_HANG_TIMEOUT", "1").envs(env.iter().copied());
    if let Some(rank) = rank {
        cmd.env("RANK", rank);
    }
    cmd.stdin(Stdio::null())
        .stdout(std::fs::File::create(dir.join(format!("stdout-{}", rank.unwrap_or("0")))).expect("stdout file"))
        .stderr(std::fs::File::create(dir.join(format!("stderr-{}", rank.unwrap_or("0")))).expect("stderr file"));
    cmd.spawn().expect("spawn the job")
}

/// Waits (at most a minute) for the trace at `path` to hold a `gpu_hang`, while `job` runs on.
fn hang_trace(job: &mut Child, path: &Path) -> Trace {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(t) = trace::read(path) {
            if t.faults.iter().any(|f| f.kind == FaultKind::GpuHang) {
                return t;
            }
        }
        let ended = job.try_wait().expect("wait");
        assert!(ended.is_none(), "the job ended ({ended:?}) without a gpu_hang in its trace");
        assert!(Instant::now() < deadline, "no gpu_hang in the trace within a minute");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn kill(mut job: Child) {
    let _ = job.kill();
    let _ = job.wait();
}

/// The trace of a job stuck in the all-reduce, written by the watchdog while it hangs.
fn stuck_job() -> (Trace, std::path::PathBuf) {
    let dir = temp_dir("hang");
    let trace_path = dir.join("trace.json");
    let mut job = start(&dir, &trace_path, "hang", None, &[]);
    let t = hang_trace(&mut job, &trace_path);
    assert!(job.try_wait().expect("wait").is_none(), "the watchdog leaves the job running");
    kill(job);
    (t, trace_path)
}

#[test]
fn a_job_stuck_in_a_kernel_gets_a_gpu_hang_naming_the_queued_gemm_the_kernel_and_the_host_wait_while_it_hangs() {
    let (t, _) = stuck_job();
    let source = manifest_dir().join("tests/c/hang.c");
    let hangs = faults_of(&t, FaultKind::GpuHang);
    assert_eq!(hangs.len(), 1, "one record per stuck stream: {:#?}", t.faults);
    let f = hangs[0];
    // The stuck call: the GEMM queued behind the collective, named by its own line.
    let gemms: Vec<u64> = t.recent_calls.iter().filter(|c| c.api == "cublasSgemm_v2").map(|c| c.seq).collect();
    assert_eq!((f.api.as_str(), Some(f.seq)), ("cublasSgemm_v2", gemms.last().copied()), "{f:#?}");
    let queued = format!("hang.c:{}", line_of(&source, "QUEUED GEMM"));
    assert!(f.backtrace.first().is_some_and(|l| l.contains(&queued)), "{queued}: {:#?}", f.backtrace);
    let h = f.hang.as_ref().expect("the hang's facts");
    assert_eq!(h.found_by, "watchdog");
    assert_eq!(h.last_landed, gemms.first().copied(), "the first GEMM completed");
    let kernel = h.kernel.as_ref().expect("the kernel before it");
    assert_eq!((kernel.kernel.as_str(), kernel.grid, h.kernel_ordinal), ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", [2, 1, 1], Some(1)));
    assert_eq!(f.suspects.iter().map(|k| k.kernel.as_str()).collect::<Vec<_>>(), ["ncclDevKernel_AllReduce_Sum_f32_RING_LL"]);
    // The kernel's launching line.
    let collective = format!("hang.c:{}", line_of(&source, "/* COLLECTIVE */"));
    assert!(kernel.backtrace.first().is_some_and(|l| l.contains(&collective)), "{collective}: {:#?}", kernel.backtrace);
    assert_eq!(f.suspects[0].backtrace, kernel.backtrace);
    assert!(f.message.contains("ncclDevKernel_AllReduce_Sum_f32_RING_LL"), "{}", f.message);
    // The host's wait, with its line.
    let waits: Vec<(&str, u64)> = h.blocked_threads.iter().map(|w| (w.api.as_str(), w.seq)).collect();
    let sync = t.recent_calls.iter().rev().find(|c| c.api == "cudaStreamSynchronize").map(|c| c.seq);
    assert_eq!(waits.len(), 1, "{:#?}", h.blocked_threads);
    assert_eq!(waits[0].0, "cudaStreamSynchronize");
    assert!(sync.is_none() || sync == Some(waits[0].1), "a wait that never returned is not yet a recent call");
    let host = format!("hang.c:{}", line_of(&source, "HOST WAITS"));
    assert!(h.blocked_threads[0].backtrace.first().is_some_and(|l| l.contains(&host)), "{host}: {:#?}", h.blocked_threads[0].backtrace);
    // Every followed stream's progress.
    assert!(f.breadcrumbs.iter().any(|b| b.first_unfinished == Some(f.seq) && b.last_landed == h.last_landed), "{:#?}", f.breadcrumbs);
}

#[test]
fn a_job_that_sleeps_on_the_host_with_nothing_outstanding_gets_no_gpu_hang() {
    let program = hang_program();
    let env = [("CUBLASGUARD_HANG_TIMEOUT", "1")];
    let run = run_within(Launch { env: &env, ..Launch::new(&program, &["sleep"]) }, Duration::from_secs(60)).expect("the sleeper ends");
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let t = run.trace();
    assert!(faults_of(&t, FaultKind::GpuHang).is_empty(), "{:#?}", t.faults);
    assert!(t.recent_calls.iter().any(|c| c.api == "cublasSgemm_v2"), "the guard followed its stream");
}

#[test]
fn the_report_of_a_hang_leads_with_the_stuck_kernel_the_call_behind_it_and_the_hosts_wait_with_next_steps() {
    let (_, trace_path) = stuck_job();
    let out = std::process::Command::new(cli()).arg("report").arg(&trace_path).output().expect("cublasguard report");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let source = manifest_dir().join("tests/c/hang.c");
    // The first paragraph after the title is the hang.
    let lead = text.split("\n\n").nth(1).unwrap_or_default();
    assert!(lead.starts_with("Hung: pid ") && lead.contains("stuck in kernel ncclDevKernel_AllReduce_Sum_f32_RING_LL"), "{text}");
    let launched = format!("/tests/c/hang.c:{} in main)", line_of(&source, "/* COLLECTIVE */"));
    assert!(lead.contains("its 1st launch of it, on stream 0x0, made at /") && lead.contains(&launched), "{lead}");
    assert!(lead.contains("before cublasSgemm_v2 #") && lead.contains(&format!("hang.c:{} in main", line_of(&source, "QUEUED GEMM"))), "{lead}");
    assert!(
        lead.contains("the host waits in cudaStreamSynchronize #") && lead.contains(&format!("hang.c:{} in main", line_of(&source, "HOST WAITS"))),
        "{lead}"
    );
    // The entry's cause and next steps: a diverged rank first for a collective, then a
    // deadlock between streams, then the GPU's health.
    let steps: Vec<&str> = text.lines().filter_map(|l| l.trim().strip_prefix("next: ")).collect();
    assert!(steps.first().is_some_and(|s| s.starts_with("A rank that diverged") && s.contains("cublasguard report DIR")), "{steps:#?}");
    assert!(steps.iter().any(|s| s.starts_with("A deadlock between streams")) && steps.iter().any(|s| s.contains("Xid")), "{steps:#?}");
    assert!(text.contains("probable cause: the GPU is stuck in kernel ncclDevKernel_AllReduce_Sum_f32_RING_LL"), "{text}");
    assert!(!text.contains("the kernel that faulted"), "a hang is no fault of the kernel's: {text}");
}

#[test]
fn the_merged_report_of_three_ranks_names_the_two_waiting_in_the_collective_and_the_one_that_never_launched_it() {
    let dir = temp_dir("hang-ranks");
    let pattern = dir.join("trace-%r.json");
    // 300 collectives completed first: the one that hangs is the 301st, past the flight
    // recorder's 256 calls, so only a count from the start numbers it.
    let env = [("HANG_COLLECTIVES", "300")];
    let mut jobs: Vec<Child> = ["0", "1", "2"].iter().map(|rank| start(&dir, &pattern, "ranks", Some(rank), &env)).collect();
    let path = |rank: &str| dir.join(format!("trace-{rank}.json"));
    let t0 = hang_trace(&mut jobs[0], &path("0"));
    let t1 = hang_trace(&mut jobs[1], &path("1"));
    // Rank 2 took another branch: it copied its result back and exited.
    let deadline = Instant::now() + Duration::from_secs(60);
    let rank2 = loop {
        if let Some(status) = jobs[2].try_wait().expect("wait") {
            break status;
        }
        assert!(Instant::now() < deadline, "rank 2 did not exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(rank2.code(), Some(0));
    for job in jobs {
        kill(job);
    }
    assert_eq!((t0.process.rank, t1.process.rank), (Some(0), Some(1)));
    for t in [&t0, &t1] {
        let h = faults_of(t, FaultKind::GpuHang)[0].hang.as_ref().expect("the hang's facts");
        assert_eq!(h.kernel_ordinal, Some(301), "counted from the start");
    }
    let t2 = trace::read(&path("2")).expect("rank 2's trace");
    let last = t2.recent_calls.iter().max_by_key(|c| c.seq).expect("rank 2's calls");
    assert_eq!(last.api, "cudaMemcpy");
    let out = std::process::Command::new(cli()).arg("report").arg(&dir).output().expect("cublasguard report DIR");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let line = text
        .split("\n\n")
        .find(|p| p.starts_with("rank 0 and rank 1 wait in ncclDevKernel_AllReduce_Sum_f32_RING_LL"))
        .unwrap_or_else(|| panic!("no line for the ranks: {text}"));
    let source = manifest_dir().join("tests/c/hang.c");
    let launched = format!("/tests/c/hang.c:{} in main)", line_of(&source, "/* COLLECTIVE */"));
    assert!(line.contains("(their 301st launch of it, made at /") && line.contains(&launched), "{line}");
    assert!(line.contains(&format!("rank 2 never launched its 301st: its last call was cudaMemcpy #{}", last.seq)), "{line}");
}

#[test]
fn a_python_job_that_hangs_names_the_users_python_line_where_the_host_waits() {
    // hang_wait.py waits in cudaStreamSynchronize through ctypes with the GIL released, as
    // torch.cuda.synchronize does: its frames are read as it enters the wait, named at the hang.
    let script = manifest_dir().join("tests/python/hang_wait.py");
    let script_s = script.display().to_string();
    let pythons = crate::deferred_verdicts::pythons(&["3.10", "3.11", "3.12", "3.13"]);
    assert!(!pythons.is_empty(), "no CPython 3.10 to 3.13");
    for python in pythons {
        let dir = temp_dir("hang-python");
        let trace_path = dir.join("trace.json");
        let mut cmd = guarded_on_the_standin(&python, &dir, &trace_path);
        cmd.arg(&script).env("CUBLASGUARD_HANG_TIMEOUT", "1").env("PATH", std::env::var("PATH").unwrap_or_default());
        cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(std::fs::File::create(dir.join("stderr")).expect("stderr file"));
        let mut job = cmd.spawn().expect("spawn the job");
        let t = hang_trace(&mut job, &trace_path);
        kill(job);
        let hangs = faults_of(&t, FaultKind::GpuHang);
        let h = hangs.first().and_then(|f| f.hang.as_ref()).expect("the hang's facts");
        let w = h.blocked_threads.first().unwrap_or_else(|| panic!("{}: no blocked thread: {h:#?}", python.display()));
        let frames: Vec<_> = w.python_stack.iter().take(2).map(|f| (f.file.as_str(), f.function.as_str(), f.line)).collect();
        assert_eq!(
            frames,
            [(script_s.as_str(), "wait_for_the_stream", line_of(&script, "# HOST WAITS")), (script_s.as_str(), "<module>", line_of(&script, "# CALL WAIT")),],
            "{}: {w:#?}",
            python.display()
        );
        // The stuck call carries its own Python frames, kept with its waiting verdict.
        let stuck: Vec<_> = hangs[0].python_stack.iter().take(2).map(|f| (f.function.as_str(), f.line)).collect();
        assert_eq!(stuck, [("gemm", line_of(&script, "# GEMM")), ("<module>", line_of(&script, "# QUEUED GEMM"))], "{}: {:#?}", python.display(), hangs[0]);
        assert_eq!(hangs[0].python_stack_note, None, "not the watchdog thread's note");
        let out = std::process::Command::new(cli()).arg("report").arg(&trace_path).output().expect("cublasguard report");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        // No kernel before it is recorded (the wait is a stream memory wait): the call leads.
        assert!(text.contains(&format!("cublasSgemm_v2 #{} at {script_s}:{} in gemm on stream 0x0", hangs[0].seq, line_of(&script, "# GEMM"))), "{text}");
        let waits = format!(
            "the host waits in cudaStreamSynchronize #{} (thread {}) at {script_s}:{} in wait_for_the_stream",
            w.seq,
            w.thread,
            line_of(&script, "# HOST WAITS")
        );
        assert!(text.contains(&waits), "{}: {waits}\n{text}", python.display());
    }
}

#[test]
fn a_collective_that_completes_after_the_timeout_keeps_its_gpu_hang_amended_as_slow_not_hung() {
    let program = hang_program();
    let env = [("CUBLASGUARD_HANG_TIMEOUT", "1")];
    let run = run_within(Launch { env: &env, ..Launch::new(&program, &["slow"]) }, Duration::from_secs(60)).expect("the slow job ends");
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    let t = run.trace();
    let hangs = faults_of(&t, FaultKind::GpuHang);
    assert_eq!(hangs.len(), 1, "recorded while it waited: {:#?}", t.faults);
    let f = hangs[0];
    assert_eq!(f.hang.as_ref().map(|h| h.found_by.as_str()), Some("watchdog"));
    assert!(f.message.contains("its work completed later") && f.message.contains("not a hang that lasted"), "{}", f.message);
    assert!(f.hang.as_ref().is_some_and(|h| h.completed_later), "{:#?}", f.hang);
    // The report says so first, and does not call it a hang.
    let out = std::process::Command::new(cli()).arg("report").arg(&run.trace_path).output().expect("cublasguard report");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let lead = text.split("\n\n").nth(1).unwrap_or_default();
    assert!(lead.starts_with("Slow, not hung: pid ") && lead.contains("in kernel ncclDevKernel_AllReduce_Sum_f32_RING_LL"), "{text}");
    assert!(!text.contains("Hung: ") && text.contains("probable cause: a slow kernel or a late peer, not a hang"), "{text}");
    let steps: Vec<&str> = text.lines().filter_map(|l| l.trim().strip_prefix("next: ")).collect();
    assert!(steps.len() == 1 && steps[0].contains("raise CUBLASGUARD_HANG_TIMEOUT"), "{steps:#?}");
}
