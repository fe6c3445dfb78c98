//! Faults at fork (issue 46, finding 5): a fork right after NaN GEMMs, while their verdicts are
//! still being judged, never costs the parent's trace a fault, however the child is made and
//! ends.

use crate::common;

use common::*;

/// The stand-in GPU 20 ms behind: verdicts of the last GEMMs are still out at the fork.
const GPU_BEHIND: (&str, &str) = ("CUDASHIM_WORKER_DELAY_US", "20000");

#[test]
fn a_child_forked_without_the_guards_fork_handlers_never_writes_over_its_parents_trace() {
    // A clone system call runs no atfork handler (runtimes that manage their own processes
    // make one): the child runs on a copy of the parent's session, whose trace holds the faults
    // judged by the fork. It outlives the parent by 300 ms, then exits through exit().
    let program = build_c("fork_faults", &["fork_faults.c"], false);
    for how in ["raw_outlive", "raw_exit"] {
        let run = run(Launch { env: &[GPU_BEHIND], ..Launch::new(&program, &["50", how, "1", "8"]) });
        // The orphaned child keeps the pipes open: its output is in, so it has ended.
        assert_eq!(run.code(), Some(0), "{how}: {}", run.stderr());
        let t = run.trace();
        assert_eq!(t.faults.len(), 50, "{how}: the parent's trace lost faults to its child's copy:\n{}", run.stderr());
        let exit_lines: Vec<&str> =
            run.output.stderr.split(|b| *b == b'\n').filter_map(|l| std::str::from_utf8(l).ok()).filter(|l| l.contains(" fault(s) in ")).collect();
        assert_eq!(exit_lines.len(), 1, "{how}: one exit line, the parent's: {exit_lines:?}");
        assert!(exit_lines[0].starts_with("cublasguard: 50 fault(s) in "), "{how}: {exit_lines:?}");
        let files: Vec<String> =
            std::fs::read_dir(&run.dir).expect("run folder").filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
        assert_eq!(files, ["trace.json"], "{how}: the child writes no trace of its parent's anywhere");
    }
}
