//! The guard reads a Python program's frames at a fault without ever waiting for the GIL
//! (issue 28, finding 2).

use crate::common;

use common::*;
use cublasguard_format::trace::FaultKind;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn a_fault_under_the_programs_own_lock_while_another_thread_holds_the_gil_does_not_deadlock() {
    let lib = build_c("gil_lock", &["gil_lock.c"], true);
    let dir = temp_dir("gil-lock");
    let trace_path = dir.join("trace.json");
    let script = dir.join("gil_lock.py");
    // The worker calls through CDLL (the GIL released), the main thread through PyDLL (the GIL
    // kept) and waits there for the lock the worker holds across its faulting GEMM.
    std::fs::write(
        &script,
        format!(
            "import ctypes, threading, time\n\
             free = ctypes.CDLL({lib:?})\n\
             held = ctypes.PyDLL({lib:?})\n\
             out = []\n\
             worker = threading.Thread(target=lambda: out.append(free.fault_under_lock()), name='worker-1')\n\
             worker.start()\n\
             while not free.is_locked():\n    time.sleep(0.001)\n\
             held.wait_for_lock()\n\
             worker.join()\n\
             print('status', out[0])\n",
            lib = lib.display().to_string()
        ),
    )
    .unwrap();
    let s = standin();
    let mut child = Command::new("python3")
        .arg(&script)
        .current_dir(&dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("LD_LIBRARY_PATH", format!("{}:{}", s.join("lib").display(), s.join("driver").display()))
        .env("LD_PRELOAD", guard_lib())
        .env("CUBLASGUARD_TRACE", &trace_path)
        // gemm mode: the worker's fault is judged on the worker, which then waits for the GIL
        // (a deferred verdict of a call made with the GIL released never asks for it).
        .env("CUBLASGUARD_SYNC", "gemm")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the program deadlocked at its fault");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().expect("output");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("status 0"), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let t = cublasguard_format::trace::read(&trace_path).expect("trace");
    let f = t.faults.iter().find(|f| f.kind == FaultKind::NonfiniteInput).expect("the worker's fault");
    assert!(f.python_stack.is_empty(), "{:#?}", f.python_stack);
    let note = f.python_stack_note.as_deref().expect("a note saying why there are no frames");
    assert!(note.contains(": Python frames not read: the GIL was not taken within 2 s (another thread holds it"), "{note}");
}
