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
fn start(dir: &Path, trace_path: &Path, mode: &str, rank: Option<&str>) -> Child {
    let mut cmd = guarded_on_the_standin(&hang_program(), dir, trace_path);
    cmd.arg(mode).env("CUBLASGUARD_HANG_TIMEOUT", "1");
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
    let mut job = start(&dir, &trace_path, "hang", None);
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
