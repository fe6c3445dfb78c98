//! CUBLASGUARD_SCAN_ORDER=outputs-first against the full scan, case by case, on the example
//! workload: in gemm mode it tells every fault the full scan tells (the same calls, kinds and
//! operand counts: the inputs are read right after the call, once an output is bad); in the
//! default mode it finds the same calls and says plainly that it cannot tell a NaN the call
//! consumed from one it made, and the report says so and how to tell.

use crate::common;

use common::*;
use cublasguard_format::trace::{Fault, FaultKind, Trace};

fn mlp(inject: &str, sync: &str, order: &str) -> Trace {
    let mlp = standin().join("bin/mlp");
    let env = [("CUBLASGUARD_SYNC", sync), ("CUBLASGUARD_SCAN_ORDER", order), ("CUBLASGUARD_DEVICE_SCAN", "off")];
    let run = run(Launch { env: &env, ..Launch::new(&mlp, &["--inject", inject, "--epochs", "3"]) });
    assert_eq!(run.code(), Some(0), "{inject} {sync} {order}: {}", run.stderr());
    run.trace()
}

/// An operand's name, NaN and Inf counts and first non-finite element, as a fault gives them.
type OperandCounts = (String, Option<u64>, Option<u64>, Option<(u64, u64)>);

/// What a fault says of its call and its operands' contents.
fn told(f: &Fault) -> (u64, String, FaultKind, Vec<OperandCounts>) {
    let operands = f.operands.iter().map(|o| (o.name.clone(), o.nan, o.inf, o.first_nonfinite.map(|p| (p.row, p.col)))).collect();
    (f.seq, f.api.clone(), f.kind, operands)
}

const NOTE: &str = "[inputs read after the call, once its output held NaN/Inf: CUBLASGUARD_SCAN_ORDER=outputs-first]";

#[test]
fn outputs_first_in_gemm_mode_tells_every_fault_the_full_scan_tells() {
    for inject in ["nan", "overflow"] {
        let (all, first) = (mlp(inject, "gemm", "all"), mlp(inject, "gemm", "outputs-first"));
        assert!(!all.faults.is_empty(), "{inject}");
        assert_eq!(all.faults.len(), first.faults.len(), "{inject}");
        for (a, f) in all.faults.iter().zip(&first.faults) {
            let (mut full, mut outputs_first) = (told(a), told(f));
            if f.kind == FaultKind::NonfiniteInput {
                // The full scan stops at the bad input; outputs first read the output first,
                // and says what it held besides.
                let c = outputs_first.3.iter().find(|o| o.0 == "C").expect("C");
                assert!(c.1.unwrap_or(0) + c.2.unwrap_or(0) > 0, "{inject}: {f:#?}");
                full.3.retain(|o| o.0 != "C");
                outputs_first.3.retain(|o| o.0 != "C");
            }
            assert_eq!(full, outputs_first, "{inject}");
            assert_eq!(f.message, format!("{} {NOTE}", a.message), "{inject}");
        }
        let kinds: Vec<FaultKind> = first.faults.iter().map(|f| f.kind).collect();
        let expected = if inject == "nan" { FaultKind::NonfiniteInput } else { FaultKind::NonfiniteOutput };
        assert_eq!(kinds[0], expected, "{inject}: consumed told from produced");
    }
}

#[test]
fn outputs_first_in_the_default_mode_finds_the_same_calls_and_says_it_cannot_tell_consumed_from_produced() {
    for inject in ["nan", "overflow"] {
        let (all, first) = (mlp(inject, "deferred", "all"), mlp(inject, "deferred", "outputs-first"));
        let seqs = |t: &Trace| t.faults.iter().map(|f| f.seq).collect::<Vec<_>>();
        assert_eq!(seqs(&all), seqs(&first), "{inject}: every call the full scan blames");
        for f in &first.faults {
            assert_eq!(f.kind, FaultKind::NonfiniteOutput, "{inject}: {}", f.message);
            assert!(f.message.contains("whether it consumed it or produced it is not known: its inputs A, B were not read"), "{inject}: {}", f.message);
            let unread: Vec<&str> = f.operands.iter().filter(|o| !o.scanned).map(|o| o.name.as_str()).collect();
            assert_eq!(unread, ["A", "B"], "{inject}");
        }
        // The report's cause says so, and how to tell.
        let dir = temp_dir(&format!("scan-order-{inject}"));
        let path = dir.join("t.json");
        std::fs::write(&path, serde_json::to_string(&first).expect("trace")).expect("write");
        let out = std::process::Command::new(cli()).arg("report").arg(&path).output().expect("report");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("is not known") && text.contains("CUBLASGUARD_SYNC=gemm"), "{text}");
        assert!(!text.contains("from finite inputs: overflow"), "never said to be produced: {text}");
    }
}

#[test]
fn outputs_first_under_on_fault_error_fails_the_call_whose_consumed_nan_it_found_after_the_call() {
    // The full scan refuses the call before it runs; outputs first finds the NaN only once the
    // call has run and its output is bad, and fails it then: the program is told either way.
    let program = scenarios();
    for order in ["all", "outputs-first"] {
        let env = [("CUBLASGUARD_ON_FAULT", "error"), ("CUBLASGUARD_SCAN_ORDER", order)];
        let run = run(Launch { env: &env, ..Launch::new(&program, &["nan_a"]) });
        assert!(run.stdout().contains("sgemm status=13"), "{order}: {}", run.stdout());
        assert_eq!(only_fault(&run.trace()).kind, FaultKind::NonfiniteInput, "{order}");
    }
}
