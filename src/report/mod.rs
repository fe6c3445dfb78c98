//! `cublasguard report`: traces in, a postmortem out, first fault first: a table of the faults
//! by kind, function and call site, then one entry per root cause, with the faults that follow
//! from it (NaN passed on, a context lost to its error, the same failure to start) counted
//! under it. This module holds the formats and the one way in; its parts below, one idea each.

pub mod call_sites;
mod cause_entry;
mod causes;
mod core_dumps;
pub mod coverage;
pub mod diagnosis;
mod doc;
mod environment;
mod gpu_context;
mod hang_cause;
pub mod hang_report;
mod json;
mod load;
mod markdown;
mod merge;
mod replay_offer;
mod text;

// What the other commands use of the report, by the names they have always had.
pub use load::{load, newest_run, total, total_calls, Loaded};
pub use merge::merge;

use crate::escape::escape_controls;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Markdown,
    Json,
}

/// Root causes shown in full unless `--limit` or `--all` says otherwise.
pub const DEFAULT_LIMIT: usize = 20;

/// `render_limited` with the default limit.
pub fn render(loaded: &[Loaded], format: Format) -> String {
    render_limited(loaded, format, Some(DEFAULT_LIMIT))
}

/// The report. `limit`: how many root causes text and markdown show in full (None: all, and
/// every fault that follows from them, one line each); JSON always holds every fault.
pub fn render_limited(loaded: &[Loaded], format: Format, limit: Option<usize>) -> String {
    let entries = merge(loaded);
    match format {
        Format::Json => json::json(loaded, &entries),
        Format::Text | Format::Markdown => escape_controls(&text::text(loaded, &entries, format == Format::Markdown, limit)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cublasguard_format::trace::{self, Fault, Trace};

    fn a_fault() -> Fault {
        serde_json::from_value(serde_json::json!({
            "seq": 1, "api": "cublasSgemm_v2", "kind": "api_error", "message": "m", "status": 13,
            "status_name": "CUBLAS_STATUS_EXECUTION_FAILED", "error": null, "cause": null, "thread": 1,
            "stream": null, "time_ns": 0, "handle": null, "args": {}, "operands": [], "memory": null, "backtrace": []
        }))
        .unwrap()
    }

    fn loaded(trace: Trace) -> Loaded {
        Loaded::new("t.json".into(), trace::Parsed { trace, ..Default::default() })
    }

    fn fault_of(json: serde_json::Value) -> Fault {
        let mut base = serde_json::to_value(a_fault()).unwrap();
        for (k, v) in json.as_object().unwrap() {
            base[k] = v.clone();
        }
        serde_json::from_value(base).unwrap()
    }

    fn recent(seq: u64, api: &str, args: serde_json::Value) -> trace::RecentCall {
        serde_json::from_value(serde_json::json!({"seq": seq, "api": api, "status": 0, "time_ns": seq, "thread": 1, "args": args})).unwrap()
    }

    /// A C program's GEMM that overran (the device then said 700 at the program's own
    /// cudaMemcpy), and its later cudaFree/cudaMemcpy calls that return the same 700.
    fn overrun_then_sticky() -> Trace {
        let gemm = fault_of(serde_json::json!({
            "seq": 5, "api": "cublasSgemm_v2", "kind": "out_of_bounds", "status": 0, "status_name": "CUBLAS_STATUS_SUCCESS", "time_ns": 5,
            "message": "operand B overruns its allocation; cudaErrorIllegalAddress (700) surfaced at the program's own cudaMemcpy, its synchronous copy of 64 bytes",
            "error": {"code": 700, "name": "cudaErrorIllegalAddress", "call": "cudaMemcpy"},
            "operands": [{"name": "B", "ptr": "0x7000", "dtype": "f32", "rows": 4, "cols": 4, "ld": 4, "bytes": 64,
                          "allocation": {"base": "0x7000", "size": 32}, "scanned": false}]
        }));
        let later = |seq: u64, api: &str| {
            fault_of(serde_json::json!({"seq": seq, "api": api, "kind": "api_error", "status": 700, "status_name": "cudaErrorIllegalAddress", "time_ns": seq}))
        };
        Trace { faults: vec![gemm, later(7, "cudaMemcpy"), later(8, "cudaFree"), later(9, "cudaFree")], ..Default::default() }
    }

    #[test]
    fn the_programs_own_call_is_not_called_the_guards() {
        let out = render(&[loaded(overrun_then_sticky())], Format::Text);
        assert!(out.contains("at the program's own cudaMemcpy"), "{out}");
        assert!(!out.contains("at the guard's cudaMemcpy"), "{out}");
    }

    #[test]
    fn later_calls_returning_the_same_sticky_error_fold_into_the_first_cause() {
        let out = render(&[loaded(overrun_then_sticky())], Format::Text);
        assert!(!out.contains("no guard check explains it"), "{out}");
        assert!(!out.contains("[2]"), "one root cause: {out}");
        assert!(out.contains("3 later fault(s) that failed because #5 left the CUDA context unusable"), "{out}");
    }

    #[test]
    fn an_address_freed_and_handed_out_again_smaller_is_freed_and_reused_not_an_overrun() {
        let mut t = overrun_then_sticky();
        t.faults.truncate(1);
        t.recent_calls = vec![recent(2, "cudaMalloc", serde_json::json!({"size": 256})), recent(3, "cudaFree", serde_json::json!({"ptr": "0x7000"}))];
        let l = [loaded(t.clone())];
        let entries = merge(&l);
        assert!(
            entries[0].diagnosis.cause.starts_with("freed and reused: operand B points at 0x7000, where cudaFree (call #3) freed"),
            "{}",
            entries[0].diagnosis.cause
        );
        // A free of a block no larger than the new one: a plain overrun.
        t.recent_calls = vec![recent(3, "cudaFree", serde_json::json!({"ptr": "0x7000", "size": 16}))];
        let l = [loaded(t.clone())];
        let entries = merge(&l);
        assert!(!entries[0].diagnosis.cause.contains("freed and reused"), "{}", entries[0].diagnosis.cause);
        // No free at that address: an overrun.
        t.recent_calls.clear();
        let l = [loaded(t)];
        assert!(merge(&l)[0].diagnosis.cause.starts_with("an operand extends past the end"));
    }

    #[test]
    fn a_c_program_gets_no_pytorch_words_and_a_pytorch_program_does() {
        // The advice only (a T/N GEMM's "looks like nn.Linear" shape line is kept for every program).
        let gemm = overrun_then_sticky().faults.remove(0);
        let c = Trace { faults: vec![gemm.clone()], ..Default::default() };
        let out = render(&[loaded(c.clone())], Format::Text);
        for w in ["in_features", "nn.Linear", "torch."] {
            assert!(!out.contains(w), "'{w}' in a C program's report: {out}");
        }
        let mut cupy = c.clone();
        cupy.environment.python_version = Some("3.12.3".into());
        let out = render(&[loaded(cupy)], Format::Text);
        assert!(!out.contains("in_features") && !out.contains("torch."), "a CuPy-like Python program: {out}");
        let mut torch = c;
        torch.environment.python_version = Some("3.12.3".into());
        torch.environment.framework = Some(trace::FrameworkBuild { name: "torch".into(), version: None, cuda: None });
        let out = render(&[loaded(torch)], Format::Text);
        assert!(out.contains("in_features"), "{out}");
    }

    #[test]
    fn the_users_line_is_a_short_stack_of_their_frames_innermost_first() {
        let frame = |file: &str, line: u32, function: &str| trace::PythonFrame { file: file.into(), line, function: function.into() };
        let mut f = a_fault();
        f.python_stack = vec![
            frame("/venv/lib/python3.12/site-packages/nvmath/bindings/cublas.py", 120, "sgemm"),
            frame("/work/faults.py", 37, "sgemm"),
            frame("/work/faults.py", 68, "main"),
            frame("/work/run.py", 5, "<module>"),
            frame("<frozen runpy>", 88, "_run_code"),
            frame("/work/outer.py", 1, "<module>"),
        ];
        let t = Trace { faults: vec![f.clone()], ..Default::default() };
        let out = render(&[loaded(t)], Format::Text);
        let at = out.find("at /work/faults.py:37 in sgemm").expect(&out);
        let caller = out.find("called from /work/faults.py:68 in main").expect(&out);
        let outer = out.find("called from /work/run.py:5 in <module>").expect(&out);
        assert!(at < caller && caller < outer, "innermost first: {out}");
        assert!(!out.contains("outer.py"), "the stack stops at the first frame outside the user's files: {out}");
        // A helper called straight from a library: one line, as before.
        f.python_stack.truncate(2);
        let out = render(&[loaded(Trace { faults: vec![f], ..Default::default() })], Format::Text);
        assert!(out.contains("at /work/faults.py:37 in sgemm") && !out.contains("called from /work"), "{out}");
    }

    #[test]
    fn empty_report_says_no_faults() {
        let text = render(&[loaded(Trace::default())], Format::Text);
        assert!(text.contains("0 fault(s)") && text.contains("No faults"), "{text}");
        assert!(!text.contains("not store"), "nothing dropped, nothing said: {text}");
    }

    #[test]
    fn faults_counted_but_not_stored_are_said_in_plain_words_only_when_there_are_some() {
        let mut t = Trace::default();
        t.summary.faults = 5;
        t.summary.dropped_faults = 5;
        let text = render(&[loaded(t)], Format::Text);
        assert!(text.contains("5 fault(s)") && text.contains("The guard counted 5 more fault(s) that it did not store"), "{text}");
        assert!(!text.contains("No faults") && !text.contains("counted but not stored"), "{text}");
    }
}
