//! Secrets in the forms real launchers pass them never reach a trace: Hydra/OmegaConf
//! overrides, URL passwords in arguments and recorded variables, short password options;
//! neither in the trace written at the fault nor in the one the crash handler writes.

use crate::common;

use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};

use common::*;
use cublasguard_format::trace::{self, Trace};

const ARGS: &[&str] = &[
    "fault_then_wait",
    "wandb.api_key=WANDB-SECRET",
    "+db.password=DB-SECRET-1",
    "db.password=DB-SECRET-2",
    "postgres://user:PG-SECRET@db.example:5432/runs",
    "-p",
    "P-SECRET",
    "--pass",
    "PASS-SECRET",
    "--pw=PW-SECRET",
    "model.lr=0.1",
];
const REDACTED_ARGS: &[&str] = &[
    "fault_then_wait",
    "wandb.api_key=<redacted>",
    "+db.password=<redacted>",
    "db.password=<redacted>",
    "postgres://user:<redacted>@db.example:5432/runs",
    "-p",
    "<redacted>",
    "--pass",
    "<redacted>",
    "--pw=<redacted>",
    "model.lr=0.1",
];
const ENV: &[(&str, &str)] = &[("TORCH_DIST_URL", "tcp://admin:DIST-SECRET@10.0.0.1:29500"), ("NCCL_SOCKET_IFNAME", "eth0"), ("NVIDIA_API_KEY", "NV-SECRET")];
const SECRETS: &[&str] = &["WANDB-SECRET", "DB-SECRET-1", "DB-SECRET-2", "PG-SECRET", "P-SECRET", "PASS-SECRET", "PW-SECRET", "DIST-SECRET", "NV-SECRET"];

fn assert_redacted(text: &str, case: &str) -> Trace {
    for secret in SECRETS {
        assert!(!text.contains(secret), "{case}: {secret} leaked into the trace");
    }
    let t = trace::parse(text).unwrap_or_else(|e| panic!("{case}: {e}"));
    assert_eq!(t.process.argv[1..], *REDACTED_ARGS, "{case}");
    let var = |k: &str| t.environment.variables.get(k).map(String::as_str);
    assert_eq!(var("TORCH_DIST_URL"), Some("tcp://admin:<redacted>@10.0.0.1:29500"), "{case}");
    assert_eq!(var("NCCL_SOCKET_IFNAME"), Some("eth0"), "{case}");
    assert_eq!(var("NVIDIA_API_KEY"), Some("<redacted>"), "{case}");
    t
}

#[test]
fn overrides_url_passwords_and_short_options_are_redacted_in_the_trace_and_the_crash_trace() {
    let dir = temp_dir("secrets");
    let trace_path = dir.join("trace.json");
    let s = standin();
    let mut child = Command::new(scenarios())
        .args(ARGS)
        .current_dir(&dir)
        .env_clear()
        .envs(ENV.iter().copied())
        .env("LD_LIBRARY_PATH", format!("{}:{}", s.join("lib").display(), s.join("driver").display()))
        .env("LD_PRELOAD", guard_lib())
        .env("CUBLASGUARD_TRACE", &trace_path)
        .env("CUBLASGUARD_QUIET", "1")
        // gemm mode: the trace is on disk before the faulting call returns, so before "ready"
        // (a deferred verdict is written within moments, by the guard's thread).
        .env("CUBLASGUARD_SYNC", "gemm")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn");
    let stdout = child.stdout.take().expect("stdout");
    assert!(BufReader::new(stdout).lines().map_while(Result::ok).any(|l| l == "ready"), "the program reached its fault");
    // The trace written at the fault.
    let t = assert_redacted(&std::fs::read_to_string(&trace_path).unwrap(), "at the fault");
    assert!(t.crash.is_none());
    // The crash handler's trace, streamed from the prefix rendered from the same Trace.
    // SAFETY: kill with the child's pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGSEGV) };
    let status = child.wait().expect("wait");
    assert_eq!(status.signal(), Some(libc::SIGSEGV));
    let t = assert_redacted(&std::fs::read_to_string(&trace_path).unwrap(), "after the crash");
    assert!(t.crash.is_some(), "the crash handler rewrote the trace");
}
