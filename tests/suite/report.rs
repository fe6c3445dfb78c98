//! `cublasguard report` and `cublasguard timeline` on traces of real runs (the stand-in's
//! `mlp` example and test programs under the guard), and on traces edited by hand where a case
//! needs what no run writes (a newer guard's trace, a PyTorch program's frames).

use crate::common;

use common::*;
use pulldown_cmark::{Event, HeadingLevel, Parser, Tag, TagEnd};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn cublasguard(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cublasguard")).args(args).env("NO_COLOR", "1").output().expect("run cublasguard")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

/// The stand-in's example MLP (a C program) under the guard, `--inject KIND` when given.
fn mlp(inject: Option<&str>, env: &[(&str, &str)], driver: bool) -> Run {
    let program = standin().join("bin/mlp");
    let args: Vec<&str> = inject.map(|i| vec!["--inject", i]).unwrap_or_default();
    run(Launch { env, driver, ..Launch::new(&program, &args) })
}

/// `report ARGS...`: its stdout, and its exit status.
fn report(args: &[&str]) -> (String, Option<i32>) {
    let mut all = vec!["report"];
    all.extend_from_slice(args);
    let out = cublasguard(&all);
    (text(&out.stdout), out.status.code())
}

fn report_json(path: &Path) -> Value {
    let out = cublasguard(&["report", "--format", "json", &s(path)]);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&out.stdout)))
}

fn json_of(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn write_json(path: &Path, v: &Value) {
    std::fs::write(path, serde_json::to_vec_pretty(v).unwrap()).unwrap();
}

/// The entry headings of a text report: "[1] cublasSgemm_v2 #12: ...".
fn entry_lines(body: &str) -> Vec<&str> {
    body.lines().filter(|l| l.starts_with('[') && l.contains("] ")).collect()
}

#[test]
fn a_propagated_nan_is_counted_under_the_call_that_first_held_it() {
    let run = mlp(Some("nan"), &[], true);
    let trace = run.trace();
    let faults = trace.faults.len();
    assert!(faults > 10, "the NaN spreads through training: {faults}");
    // The root cause: the first fault (its number depends on the calls the program made first).
    let root = trace.faults[0].seq;
    let (body, code) = report(&[&s(&run.trace_path)]);
    assert_eq!(code, Some(1));
    assert_eq!(
        entry_lines(&body),
        [format!("[1] cublasSgemm_v2 #{root}: nonfinite_input (pid {0} on {1}, thread {0})", trace.process.pid, trace.process.hostname)],
        "one entry, the root cause:\n{body}"
    );
    let counted: Vec<&str> = body.lines().filter(|l| l.contains("propagated from")).collect();
    assert_eq!(counted.len(), 1, "the propagated faults are one line: {body}");
    assert!(counted[0].contains(&format!("{} later fault(s) propagated from #{root}", faults - 1)) && counted[0].contains("--all"), "{}", counted[0]);
    assert!(!body.contains(&format!("#{}:", root + 1)) && !body.contains("holds 16 NaN"), "no propagated fault in full: {body}");
    // --all lists each, one line apiece, still under the root cause.
    let (all, _) = report(&["--all", &s(&run.trace_path)]);
    assert_eq!(entry_lines(&all).len(), 1, "{all}");
    for f in &trace.faults[1..] {
        let line = format!("cublasSgemm_v2 #{}: nonfinite_input: {}", f.seq, f.message);
        assert!(all.lines().any(|l| l.trim_start() == line), "{line} in:\n{all}");
    }
    let json = report_json(&run.trace_path);
    let causes = json["causes"].as_array().unwrap();
    assert_eq!(causes.len(), 1, "{json:#}");
    assert_eq!(causes[0]["followers"].as_array().unwrap().len(), faults - 1);
    assert!(causes[0]["followers"].as_array().unwrap().iter().all(|f| f["relation"] == "propagated"));
    assert_eq!(json["entries"].as_array().unwrap().len(), faults, "json keeps every fault");
}

#[test]
fn a_call_that_fails_on_a_context_an_earlier_kernel_fault_lost_is_counted_under_that_fault() {
    let program = build_c("create_causes", &["create_causes.c"], false);
    let run = run(Launch { env: &[("CUDASHIM_ASYNC_FAULT", "1")], ..Launch::new(&program, &["lost"]) });
    let t = run.trace();
    let gemm = t.faults.iter().find(|f| f.api == "cublasSgemm_v2").expect("the kernel's fault");
    let create = t.faults.iter().rev().find(|f| f.api == "cublasCreate_v2").expect("the second handle's fault");
    let json = report_json(&run.trace_path);
    let cause = json["causes"].as_array().unwrap().iter().find(|c| c["seq"] == gemm.seq).unwrap_or_else(|| panic!("{json:#}"));
    let followers = cause["followers"].as_array().unwrap();
    assert!(followers.iter().any(|f| f["seq"] == create.seq && f["relation"] == "context_lost"), "{json:#}");
    assert!(json["causes"].as_array().unwrap().iter().all(|c| c["seq"] != create.seq), "not a root cause of its own");
    let (body, _) = report(&[&s(&run.trace_path)]);
    assert!(body.contains(&format!("left the CUDA context unusable: 1 init_failed in cublasCreate_v2 (#{})", create.seq)), "{body}");
}

/// The rows of the text report's summary table: [faults, kind, function, call site].
fn table_rows(body: &str) -> Vec<Vec<String>> {
    let lines: Vec<&str> = body.lines().skip_while(|l| *l != "Faults by kind, function and call site:").skip(2).take_while(|l| !l.is_empty()).collect();
    lines
        .iter()
        .map(|l| {
            let cols: Vec<&str> = l.split("  ").map(str::trim).filter(|c| !c.is_empty()).collect();
            vec![cols[0].to_string(), cols[1].to_string(), cols[2].to_string(), cols[3..].join("  ")]
        })
        .collect()
}

#[test]
fn the_report_opens_with_a_table_of_faults_by_kind_function_and_call_site() {
    let dir = temp_dir("report-table");
    // The default mode: a NaN verdict judged after its call names the C program's call site
    // from the return addresses kept at the call, as gemm mode's judged at the call does.
    let nan = mlp(Some("nan"), &[], true);
    let lda = mlp(Some("lda"), &[], true);
    let nan_faults = nan.trace().faults.len();
    // The same run, as a Python program's: its faults carry the user's Python frame.
    let mut py = json_of(&nan.trace_path);
    py["process"]["pid"] = json!(4242);
    for f in py["faults"].as_array_mut().unwrap() {
        f["python_stack"] = json!([
            {"file": "/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py", "line": 125, "function": "forward"},
            {"file": "/home/me/train.py", "line": 57, "function": "forward"}
        ]);
    }
    for (name, v) in [("nan", json_of(&nan.trace_path)), ("lda", json_of(&lda.trace_path)), ("py", py)] {
        write_json(&dir.join(format!("{name}.json")), &v);
    }
    // Three runs, one after another: --all-runs reports them together.
    let (body, code) = report(&["--all-runs", &s(&dir)]);
    assert_eq!(code, Some(1));
    let table = body.find("Faults by kind, function and call site:").unwrap_or_else(|| panic!("{body}"));
    assert!(table < body.find("First fault:").unwrap(), "the table comes first: {body}");
    let rows = table_rows(&body);
    let mlp_c = manifest_dir().join("examples/mlp.c");
    let site = format!("{}:45 in gemm_rm", mlp_c.display());
    let n = nan_faults.to_string();
    let wanted: Vec<Vec<String>> = vec![
        vec!["1".into(), "invalid_argument".into(), "cublasSgemm_v2".into(), site.clone()],
        vec![n.clone(), "nonfinite_input".into(), "cublasSgemm_v2".into(), site.clone()],
        vec![n.clone(), "nonfinite_input".into(), "cublasSgemm_v2".into(), "/home/me/train.py:57 in forward".into()],
    ];
    let mut sorted = rows.clone();
    sorted.sort();
    let mut wanted_sorted = wanted.clone();
    wanted_sorted.sort();
    assert_eq!(sorted, wanted_sorted, "{body}");
    // Markdown: a table (GitHub's extension of CommonMark) with the same rows.
    let out = cublasguard(&["report", "--all-runs", "--format", "markdown", &s(&dir)]);
    let md = text(&out.stdout);
    let mut cells: Vec<Vec<String>> = Vec::new();
    let mut in_table = false;
    for event in Parser::new_ext(&md, pulldown_cmark::Options::ENABLE_TABLES) {
        match event {
            Event::Start(Tag::Table(_)) => in_table = true,
            Event::End(TagEnd::Table) => in_table = false,
            Event::Start(Tag::TableHead) | Event::Start(Tag::TableRow) if in_table => cells.push(Vec::new()),
            Event::Start(Tag::TableCell) if in_table => cells.last_mut().unwrap().push(String::new()),
            Event::Text(t) | Event::Code(t) if in_table => cells.last_mut().unwrap().last_mut().unwrap().push_str(&t),
            _ => {}
        }
    }
    assert_eq!(cells[0], ["faults", "kind", "function", "call site"], "{md}");
    let mut md_rows = cells[1..].to_vec();
    md_rows.sort();
    assert_eq!(md_rows, wanted_sorted, "{md}");
    // JSON: the same rows.
    let out = cublasguard(&["report", "--all-runs", "--format", "json", &s(&dir)]);
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut json_rows: Vec<Vec<String>> = json["summary"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| vec![r["faults"].to_string(), r["kind"].as_str().unwrap().into(), r["api"].as_str().unwrap().into(), r["site"].as_str().unwrap().into()])
        .collect();
    json_rows.sort();
    assert_eq!(json_rows, wanted_sorted, "{json:#}");
}

/// A trace of `n` root causes (each its own invalid_argument, from the lda run's fault), of
/// which the guard stored all and counted `extra` more.
fn many_root_causes(n: u64, extra: u64) -> PathBuf {
    let run = mlp(Some("lda"), &[], true);
    let mut v = json_of(&run.trace_path);
    let one = v["faults"][0].clone();
    let faults: Vec<Value> = (0..n)
        .map(|i| {
            let mut f = one.clone();
            f["seq"] = json!(100 + i);
            f["time_ns"] = json!(f["time_ns"].as_u64().unwrap() + i);
            if i % 2 == 1 {
                f["kind"] = json!("out_of_bounds");
            }
            f
        })
        .collect();
    v["faults"] = Value::Array(faults);
    v["summary"]["faults"] = json!(n + extra);
    v["summary"]["dropped_faults"] = json!(extra);
    let path = run.dir.join(format!("many-{n}-{extra}.json"));
    write_json(&path, &v);
    path
}

#[test]
fn the_limit_cuts_root_causes_and_says_how_to_see_the_rest() {
    let path = many_root_causes(25, 0);
    let (body, code) = report(&[&s(&path)]);
    assert_eq!(code, Some(1));
    assert_eq!(entry_lines(&body).len(), 20, "20 by default: {body}");
    let cut = body.lines().find(|l| l.contains("more fault(s) not shown")).unwrap_or_else(|| panic!("{body}"));
    assert!(cut.contains("5 more fault(s) not shown") && cut.contains("3 invalid_argument") && cut.contains("2 out_of_bounds"), "{cut}");
    assert!(cut.contains("--all") && cut.contains("--limit N"), "{cut}");
    assert!(!body.contains("not store") && !body.contains("counted but not stored"), "nothing dropped, nothing said: {body}");
    let (body, _) = report(&["--limit", "3", &s(&path)]);
    assert_eq!(entry_lines(&body).len(), 3, "{body}");
    assert!(body.contains("22 more fault(s) not shown"), "{body}");
    let (body, _) = report(&["--all", &s(&path)]);
    assert_eq!(entry_lines(&body).len(), 25, "{body}");
    assert!(!body.contains("not shown"), "{body}");
    let both = cublasguard(&["report", "--all", "--limit", "2", &s(&path)]);
    assert_eq!(both.status.code(), Some(2), "--all and --limit contradict each other");
    // Faults the guard counted past CUBLASGUARD_MAX_FAULTS: said once, in plain words.
    let path = many_root_causes(2, 7);
    let (body, _) = report(&[&s(&path)]);
    assert!(body.starts_with("cublasguard report: 9 fault(s)"), "{body}");
    let said: Vec<&str> = body.lines().filter(|l| l.contains("did not store")).collect();
    assert_eq!(said, ["The guard counted 7 more fault(s) that it did not store (past CUBLASGUARD_MAX_FAULTS): the trace holds only their number."], "{body}");
}

/// Words of PyTorch advice, out of place in a C program's report.
const PYTORCH_WORDS: [&str; 6] = ["torch.", "GradScaler", "clip_grad_norm", ".to('cuda')", "model.cuda", "record_stream"];

fn advice(body: &str) -> String {
    body.lines().filter(|l| l.trim_start().starts_with("next: ")).collect::<Vec<_>>().join("\n")
}

#[test]
fn a_c_programs_report_gives_cuda_c_advice_and_a_pytorch_programs_gives_pytorch_advice() {
    for (inject, wanted) in [
        ("nan", &["cudaMemcpy", "isfinite()", "the buffer you pass to cublasSgemm as B"][..]),
        ("host", &["cudaMemcpyHostToDevice"][..]),
        ("overflow", &["cudaMemcpy", "learning rate"][..]),
        ("width", &["cublasSgemm"][..]),
    ] {
        let run = mlp(Some(inject), &[], true);
        let (body, _) = report(&[&s(&run.trace_path)]);
        let next = advice(&body);
        for w in PYTORCH_WORDS {
            assert!(!next.contains(w), "{inject}: PyTorch advice '{w}' for a C program:\n{next}");
        }
        for w in wanted {
            assert!(next.contains(w), "{inject}: '{w}' missing from:\n{next}");
        }
    }
    // The same trace as a PyTorch process writes it: the framework found loaded, the Python it
    // runs, the user's frames.
    let run = mlp(Some("nan"), &[], true);
    let mut v = json_of(&run.trace_path);
    v["environment"]["python_version"] = json!("3.12.3");
    v["environment"]["framework"] = json!({"name": "torch", "version": "2.15.0+cu132", "cuda": "13.2"});
    v["process"]["argv"] = json!(["/venv/bin/python", "train.py"]);
    let path = run.dir.join("as-pytorch.json");
    write_json(&path, &v);
    let (body, _) = report(&[&s(&path)]);
    let next = advice(&body);
    assert!(next.contains("torch.isfinite(x).all()") && !next.contains("cudaMemcpy"), "{next}");
    assert_eq!(report_json(&path)["entries"][0]["program"], "pytorch");
    assert_eq!(report_json(&run.trace_path)["entries"][0]["program"], "native");
}

/// The markdown report as pulldown-cmark reads it (CommonMark, no extensions).
fn events(md: &str) -> Vec<Event<'_>> {
    Parser::new(md).collect()
}

/// The text of each list item at `depth` (1: top level), its code spans included.
fn items_at(events: &[Event], depth: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut level = 0;
    for e in events {
        match e {
            Event::Start(Tag::Item) => {
                level += 1;
                if level == depth {
                    out.push(String::new());
                }
            }
            Event::End(TagEnd::Item) => level -= 1,
            Event::Text(t) | Event::Code(t) if level == depth => out.last_mut().unwrap().push_str(t),
            _ => {}
        }
    }
    out
}

fn headings(events: &[Event]) -> Vec<(HeadingLevel, String)> {
    let mut out = Vec::new();
    let mut current: Option<(HeadingLevel, String)> = None;
    for e in events {
        match e {
            Event::Start(Tag::Heading { level, .. }) => current = Some((*level, String::new())),
            Event::Text(t) | Event::Code(t) => {
                if let Some((_, s)) = current.as_mut() {
                    s.push_str(t);
                }
            }
            Event::End(TagEnd::Heading(_)) => out.extend(current.take()),
            _ => {}
        }
    }
    out
}

/// Nothing in the report is meant as raw HTML, emphasis, a link or an indented code block.
fn assert_no_accidental_markup(events: &[Event], md: &str) {
    for e in events {
        let accident = matches!(
            e,
            Event::Html(_) | Event::InlineHtml(_) | Event::Start(Tag::Emphasis | Tag::Strong | Tag::Link { .. } | Tag::CodeBlock(_) | Tag::BlockQuote(_))
        );
        assert!(!accident, "{e:?} in:\n{md}");
    }
}

#[test]
fn markdown_is_commonmark_whose_lists_code_spans_and_headings_parse_as_meant() {
    let run = mlp(Some("nan"), &[("CUBLASGUARD_DUMP", "dumps")], true);
    let t = run.trace();
    let faults = t.faults.len();
    let out = cublasguard(&["report", "--format", "markdown", "--all", &s(&run.trace_path)]);
    let md = text(&out.stdout);
    let ev = events(&md);
    assert_no_accidental_markup(&ev, &md);
    let heads = headings(&ev);
    assert_eq!(
        heads[0],
        (HeadingLevel::H1, format!("cublasguard report: {faults} fault(s) in {} intercepted call(s), 1 process(es)", t.summary.calls.values().sum::<u64>()))
    );
    let h2: Vec<&str> = heads.iter().filter(|(l, _)| *l == HeadingLevel::H2).map(|(_, s)| s.as_str()).collect();
    let root = t.faults[0].seq;
    assert_eq!(h2, ["Faults by kind, function and call site", &format!("1. cublasSgemm_v2 #{root}: nonfinite_input"), "Environment"], "{md}");
    let items = items_at(&ev, 1);
    let f = &t.faults[0];
    let call = items.iter().find(|i| i.starts_with("call: ")).unwrap_or_else(|| panic!("{items:#?}"));
    assert!(call.starts_with("call: cublasSgemm_v2(") && call.ends_with("-> CUBLAS_STATUS_SUCCESS (0)"), "{call}");
    assert!(items.iter().any(|i| i == &f.message), "the message is one item as written: {items:#?}");
    assert!(items.iter().any(|i| i == "B as row-major: [32, 8] f32, first non-finite at [3, 2]"), "{items:#?}");
    let dump = f.dump.as_deref().expect("dumped");
    assert!(
        items.iter().any(|i| i.contains(&format!("cublasguard replay {}", run.dir.join(dump).display())) || i.contains(&format!("cublasguard replay {dump}"))),
        "{items:#?}"
    );
    let counted = items.iter().find(|i| i.contains(&format!("propagated from #{root}"))).unwrap_or_else(|| panic!("{items:#?}"));
    assert!(counted.starts_with(&format!("{} later fault(s)", faults - 1)), "{counted}");
    // The propagated faults: a nested list, one item each.
    let nested = items_at(&ev, 2);
    assert_eq!(nested.len(), faults - 1, "{md}");
    assert_eq!(nested[0], format!("cublasSgemm_v2 #{}: nonfinite_input: {}", t.faults[1].seq, t.faults[1].message));
    // Text from a trace that looks like markup stays text.
    let mut v = json_of(&run.trace_path);
    v["faults"][0]["message"] = json!("__init__ <b>bold</b> *star* [link](x) `tick");
    v["faults"][0]["python_stack"] = json!([{"file": "/home/me/model.py", "line": 3, "function": "__call__"}]);
    let hostile = run.dir.join("hostile.json");
    write_json(&hostile, &v);
    let md = text(&cublasguard(&["report", "--format", "markdown", &s(&hostile)]).stdout);
    let ev = events(&md);
    assert_no_accidental_markup(&ev, &md);
    let items = items_at(&ev, 1);
    assert!(items.iter().any(|i| i == "__init__ <b>bold</b> *star* [link](x) `tick"), "{items:#?}\n{md}");
    assert!(items.iter().any(|i| i == "at /home/me/model.py:3 in __call__"), "{items:#?}");
}

#[test]
fn a_folder_skips_json_files_that_are_not_traces_with_a_note_for_each() {
    let dir = temp_dir("report-folder");
    let run = mlp(Some("nan"), &[], true);
    let trace = dir.join("trace.json");
    std::fs::copy(&run.trace_path, &trace).unwrap();
    let own = cublasguard(&["report", "--format", "json", &s(&trace)]);
    std::fs::write(dir.join("report.json"), &own.stdout).unwrap();
    let timeline = cublasguard(&["timeline", &s(&trace), "-o", &s(&dir.join("run.timeline.json"))]);
    assert_eq!(timeline.status.code(), Some(0), "{}", text(&timeline.stderr));
    std::fs::write(dir.join("config.json"), br#"{"lr": 0.1, "epochs": 3}"#).unwrap();
    std::fs::write(dir.join("notes.json"), b"not json at all").unwrap();
    let out = cublasguard(&["report", &s(&dir)]);
    assert_eq!(out.status.code(), Some(1), "the trace's faults: {}", text(&out.stderr));
    let stderr = text(&out.stderr);
    let notes: Vec<&str> = stderr.lines().collect();
    assert_eq!(notes.len(), 4, "one line per file skipped: {stderr}");
    for name in ["config.json", "notes.json", "report.json", "run.timeline.json"] {
        assert!(notes.iter().any(|l| l.starts_with("cublasguard: skipped ") && l.contains(name) && l.contains("not a cublasguard trace")), "{name}: {stderr}");
    }
    let body = text(&out.stdout);
    assert!(body.starts_with("cublasguard report:") && body.contains("1 process(es)"), "{body}");
    // Named on the command line, a file that is not a trace is an error.
    let out = cublasguard(&["report", &s(&dir.join("config.json"))]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("not a cublasguard trace"), "{}", text(&out.stderr));
    // A folder with no trace at all still fails.
    std::fs::remove_file(&trace).unwrap();
    let out = cublasguard(&["report", &s(&dir)]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stdout));
    assert!(text(&out.stderr).contains("no cublasguard trace in this folder"), "{}", text(&out.stderr));
}

#[test]
fn a_trace_from_a_newer_cublasguard_is_read_as_far_as_it_goes_with_a_note_to_upgrade() {
    let run = mlp(Some("lda"), &[], true);
    let mut v = json_of(&run.trace_path);
    v["version"] = json!(cublasguard_format::trace::VERSION + 1);
    v["guard"]["version"] = json!("9.3.0");
    v["faults"][0]["kind"] = json!("tensor_core_fault");
    v["faults"][0]["lane"] = json!(5);
    v["process"]["container"] = json!({"id": "abc"});
    let path = run.dir.join("newer.json");
    write_json(&path, &v);
    let (body, code) = report(&[&s(&path)]);
    assert_eq!(code, Some(1), "its fault is still a fault: {body}");
    let note = body.lines().find(|l| l.starts_with("note: ")).unwrap_or_else(|| panic!("{body}"));
    for w in [
        "written by cublasguard 9.3.0",
        &format!("format version {}", cublasguard_format::trace::VERSION + 1),
        "'tensor_core_fault'",
        "faults[].lane",
        "process.container",
        "Upgrade cublasguard to 9.3.0 or later",
    ] {
        assert!(note.contains(w), "{w}: {note}");
    }
    let seq = v["faults"][0]["seq"].as_u64().expect("its number");
    assert!(body.contains(&format!("[1] cublasSgemm_v2 #{seq}: tensor_core_fault")), "shown by the name it has: {body}");
    assert!(body.contains("ldb = 4 but transb = N needs ldb >= max(1, k) = 8"), "the guard's message: {body}");
    let json = report_json(&path);
    assert_eq!(json["entries"][0]["kind"], "tensor_core_fault");
    assert!(json["notes"][0]["note"].as_str().unwrap().contains("9.3.0"));
    // A fault of a new shape is left out, and counted; the rest is read.
    v["faults"][0]["operands"] = json!("moved");
    write_json(&path, &v);
    let (body, code) = report(&[&s(&path)]);
    assert_eq!(code, Some(1), "{body}");
    assert!(body.contains("1 fault(s) it could not read") && body.contains("1 stored fault(s) could not be read"), "{body}");
    // The same format version from a guard of the same version, broken: still refused.
    let mut v = json_of(&run.trace_path);
    v["faults"][0]["seq"] = json!("twelve");
    write_json(&path, &v);
    let out = cublasguard(&["report", &s(&path)]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn replay_is_offered_only_for_a_dump_it_can_replay() {
    let lda = mlp(Some("lda"), &[("CUBLASGUARD_DUMP", "dumps")], true);
    let f = &lda.trace().faults[0];
    let dump = lda.dir.join(f.dump.as_deref().expect("the lda fault is dumped"));
    assert_eq!(f.dump_note, None, "every operand is dumped");
    let replay = cublasguard(&["replay", &s(&dump)]);
    assert_eq!(replay.status.code(), Some(2), "replay refuses it: {}", text(&replay.stdout));
    let (body, _) = report(&[&s(&lda.trace_path)]);
    assert!(!body.contains("cublasguard replay /") && !body.contains("cublasguard replay dumps"), "no command that would fail: {body}");
    let line = body.lines().find(|l| l.contains("operands dumped to")).unwrap_or_else(|| panic!("{body}"));
    assert!(line.contains("cannot be replayed") && line.contains("the library refused this call (invalid_argument)"), "{line}");
    let json = report_json(&lda.trace_path);
    assert!(json["causes"][0]["replay"]["command"].is_null() && json["causes"][0]["replay"]["why_not"].as_str().is_some(), "{json:#}");
    // A dump it can replay: offered, and the command works.
    let nan = mlp(Some("nan"), &[("CUBLASGUARD_DUMP", "dumps"), ("CUBLASGUARD_DUMP_MAX", "1")], true);
    let (body, _) = report(&[&s(&nan.trace_path)]);
    let line = body.lines().find(|l| l.contains("operands dumped to")).unwrap_or_else(|| panic!("{body}"));
    let command =
        line.split("; cublasguard replay ").nth(1).and_then(|r| r.strip_suffix(" checks them against an exact result")).unwrap_or_else(|| panic!("{line}"));
    let out = cublasguard(&["replay", command]);
    assert_eq!(out.status.code(), Some(0), "{}{}", text(&out.stdout), text(&out.stderr));
}

#[test]
fn a_failed_start_names_its_cause_once() {
    let run = mlp(None, &[], false);
    let f = &run.trace().faults[0];
    assert_eq!((f.api.as_str(), f.status_name.as_str()), ("cudaGetDeviceCount", "cudaErrorInsufficientDriver"));
    let (body, _) = report(&[&s(&run.trace_path)]);
    let entry: String = body.lines().skip_while(|l| !l.starts_with("[1]")).take_while(|l| !l.is_empty()).collect::<Vec<_>>().join("\n");
    assert_eq!(entry.matches("no NVIDIA driver").count(), 1, "{entry}");
    assert_eq!(entry.matches("cudaErrorInsufficientDriver").count(), 1, "the call line says what it returned: {entry}");
    assert!(entry.contains("probable cause: no NVIDIA driver: libcuda.so.1 cannot be loaded"), "{entry}");
    assert!(!entry.contains("device memory unknown"), "no memory line when nothing is known: {entry}");
}

#[test]
fn every_function_that_fails_to_start_cuda_for_the_same_reason_is_one_root_cause() {
    // cudaGetDeviceCount only probes (a note); cudaMalloc and cublasCreate then fail too.
    let program = build_c("probe", &["probe.c"], false);
    let run = run(Launch { driver: false, ..Launch::new(&program, &["both"]) });
    let t = run.trace();
    assert!(
        t.faults.len() > 1 && t.faults.iter().all(|f| f.kind == cublasguard_format::trace::FaultKind::InitFailed),
        "each function reports it: {:#?}",
        t.faults
    );
    let json = report_json(&run.trace_path);
    let causes = json["causes"].as_array().unwrap();
    assert_eq!(causes.len(), 1, "{json:#}");
    assert_eq!(causes[0]["followers"].as_array().unwrap().len(), t.faults.len() - 1);
    assert!(causes[0]["followers"].as_array().unwrap().iter().all(|f| f["relation"] == "same_cause"), "{json:#}");
}

/// Checks one Trace Event Format event: the fields each phase needs, of the right types.
fn check_event(e: &Value) {
    let ph = e["ph"].as_str().unwrap_or_else(|| panic!("no ph: {e}"));
    assert!(e["name"].is_string(), "name: {e}");
    assert!(e["ts"].is_number() && e["ts"].as_f64().unwrap() >= 0.0, "ts: {e}");
    assert!(e["pid"].is_u64() && e["tid"].is_u64(), "pid and tid: {e}");
    assert!(e["tid"].as_u64().unwrap() < 1 << 31, "tid fits 31 bits: {e}");
    match ph {
        "X" => assert!(e["dur"].as_f64().is_some_and(|d| d >= 0.0), "dur: {e}"),
        "i" | "I" => assert!(matches!(e["s"].as_str(), Some("g" | "p" | "t")), "scope: {e}"),
        "M" => {
            assert!(matches!(e["name"].as_str(), Some("process_name" | "thread_name" | "process_sort_index" | "thread_sort_index")), "{e}");
            assert!(e["args"]["name"].is_string(), "args.name: {e}");
        }
        other => panic!("unexpected phase {other}: {e}"),
    }
}

fn check_timeline(v: &Value, traces: &[cublasguard_format::trace::Trace]) {
    let events = v["traceEvents"].as_array().expect("traceEvents");
    events.iter().for_each(check_event);
    let base: u64 = v["otherData"]["base_time_ns"].as_str().and_then(|b| b.parse().ok()).expect("otherData.base_time_ns");
    // Every track an event is on is named.
    let named: Vec<(u64, u64)> =
        events.iter().filter(|e| e["name"] == "thread_name").map(|e| (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap())).collect();
    for e in events.iter().filter(|e| e["ph"] != "M") {
        assert!(named.contains(&(e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap())), "unnamed track: {e}");
    }
    for t in traces {
        let pid = t.process.pid as u64;
        assert!(events.iter().any(|e| e["name"] == "process_name" && e["pid"] == pid), "the process is named");
        for c in &t.recent_calls {
            let x = events
                .iter()
                .find(|e| e["ph"] == "X" && e["pid"] == pid && e["tid"] == c.thread as u64 && e["args"]["seq"] == c.seq)
                .unwrap_or_else(|| panic!("call #{} as a complete event on its thread", c.seq));
            let ts = (c.time_ns - c.duration_ns - base) as f64 / 1000.0;
            assert!((x["ts"].as_f64().unwrap() - ts).abs() < 1e-6, "#{}: ts {} != {ts}", c.seq, x["ts"]);
            assert!((x["dur"].as_f64().unwrap() - c.duration_ns as f64 / 1000.0).abs() < 1e-6, "#{}: dur", c.seq);
            assert!(c.duration_ns > 0, "#{} has its duration", c.seq);
        }
        for f in &t.faults {
            assert!(
                events.iter().any(|e| e["ph"] == "i" && e["cat"] == "fault" && e["pid"] == pid && e["tid"] == f.thread as u64 && e["args"]["seq"] == f.seq),
                "fault #{}",
                f.seq
            );
        }
    }
    // Complete events on one track nest or follow one another: none starts inside another and
    // ends after it.
    let mut tracks: std::collections::BTreeMap<(u64, u64), Vec<(f64, f64)>> = Default::default();
    for e in events.iter().filter(|e| e["ph"] == "X") {
        let ts = e["ts"].as_f64().unwrap();
        tracks.entry((e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap())).or_default().push((ts, ts + e["dur"].as_f64().unwrap()));
    }
    for (track, mut slices) in tracks {
        slices.sort_by(|a, b| a.0.total_cmp(&b.0));
        for w in slices.windows(2) {
            assert!(w[1].0 >= w[0].1 || w[1].1 <= w[0].1, "{track:?}: {:?} and {:?} overlap", w[0], w[1]);
        }
    }
}

#[test]
fn the_timeline_follows_the_trace_event_format_and_goes_beside_the_trace_or_to_stdout() {
    let run = mlp(Some("nan"), &[], true);
    let t = run.trace();
    let out = cublasguard(&["timeline", &s(&run.trace_path)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let beside = run.dir.join("trace.timeline.json");
    assert!(text(&out.stderr).contains(&format!("wrote {}", beside.display())), "says where: {}", text(&out.stderr));
    let v = json_of(&beside);
    check_timeline(&v, std::slice::from_ref(&t));
    let faults = v["traceEvents"].as_array().unwrap().iter().filter(|e| e["cat"] == "fault").count();
    assert_eq!(faults, 2 * t.faults.len(), "each fault on its thread and its stream");
    // -o -: the JSON on stdout, no file named "-".
    let dir = temp_dir("timeline-stdout");
    let out = Command::new(env!("CARGO_BIN_EXE_cublasguard")).args(["timeline", &s(&run.trace_path), "-o", "-"]).current_dir(&dir).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&out.stdout).expect("the timeline on stdout");
    check_timeline(&v, std::slice::from_ref(&t));
    assert!(!dir.join("-").exists(), "no file named -");
    // Kernel launches name their stream: on the stream's track too, named.
    let program = build_c("launches", &["launches.c"], false);
    let launches = common::run(Launch::new(&program, &[]));
    let lt = launches.trace();
    let out = cublasguard(&["timeline", &s(&launches.trace_path), "-o", &s(&launches.dir.join("tl.json"))]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let v = json_of(&launches.dir.join("tl.json"));
    check_timeline(&v, std::slice::from_ref(&lt));
    let launch = lt.recent_calls.iter().find(|c| c.api == "cudaLaunchKernel").expect("a launch");
    let stream = launch.args.address("stream").map(cublasguard_format::trace::hex).expect("the launch's stream");
    let events = v["traceEvents"].as_array().unwrap();
    let track = events
        .iter()
        .find(|e| e["name"] == "thread_name" && e["args"]["name"].as_str().is_some_and(|n| n.starts_with(&format!("stream {stream}"))))
        .expect("the stream's track");
    assert!(events.iter().any(|e| e["ph"] == "X" && e["tid"] == track["tid"] && e["args"]["seq"] == launch.seq), "the launch on its stream's track");
    // Never over a trace it reads.
    let out = cublasguard(&["timeline", &s(&run.trace_path), "-o", &s(&run.trace_path)]);
    assert_eq!(out.status.code(), Some(2));
    assert!(run.trace().faults.len() == t.faults.len(), "the trace is intact");
}

#[test]
fn report_and_timeline_describe_their_arguments_in_help() {
    let help = text(&cublasguard(&["report", "--help"]).stdout);
    for w in ["Trace files, or folders of them", "Output format", "--limit <N>", "first N root causes", "--all", "Show every root cause"] {
        assert!(help.contains(w), "report --help lacks '{w}':\n{help}");
    }
    let help = text(&cublasguard(&["timeline", "--help"]).stdout);
    for w in ["Trace files, or folders of them", "-o, --output <OUT.json>", "`-` for standard output", "beside the first trace"] {
        assert!(help.contains(w), "timeline --help lacks '{w}':\n{help}");
    }
}

#[test]
fn two_nodes_whose_processes_share_a_pid_each_keep_their_own_root_cause() {
    // Containers: every node's training process is pid 1. The second node's NaN is its own
    // root cause, never "propagated from" the first node's call.
    let run = scenario("nan_a", &[]);
    let dir = temp_dir("same-pid");
    let mut first = json_of(&run.trace_path);
    let faults = first["faults"].as_array().expect("faults").len();
    assert_eq!(faults, 1, "{first:#}");
    first["process"]["pid"] = 1.into();
    first["process"]["hostname"] = "node-a".into();
    let mut second = first.clone();
    second["process"]["hostname"] = "node-b".into();
    let later = second["faults"][0]["time_ns"].as_u64().expect("time_ns") + 1_000_000;
    second["faults"][0]["time_ns"] = later.into();
    write_json(&dir.join("node-a.json"), &first);
    write_json(&dir.join("node-b.json"), &second);
    let json = report_json(&dir);
    let causes = json["causes"].as_array().expect("causes");
    assert_eq!(causes.len(), 2, "one root cause per node: {json:#}");
    assert!(causes.iter().all(|c| c["followers"].as_array().is_none_or(|f| f.is_empty())), "{json:#}");
    let (body, _) = report(&[&s(&dir)]);
    assert!(!body.contains("propagated"), "{body}");
    assert!(body.contains("pid 1 on node-a") && body.contains("pid 1 on node-b"), "{body}");
}

/// A trace of `n` NaN faults: the faults of a real run, repeated (each with its own seq and
/// time), as a run with CUBLASGUARD_MAX_FAULTS=n writes it.
fn large_trace(n: usize) -> PathBuf {
    let run = mlp(Some("nan"), &[], true);
    let mut v = json_of(&run.trace_path);
    let real = v["faults"].as_array().unwrap().clone();
    assert!(!real.is_empty());
    let faults: Vec<Value> = (0..n)
        .map(|i| {
            let mut f = real[i % real.len()].clone();
            f["seq"] = json!(i as u64 + 1);
            f["time_ns"] = json!(f["time_ns"].as_u64().unwrap_or(0) + i as u64);
            f
        })
        .collect();
    v["faults"] = Value::Array(faults);
    v["summary"]["faults"] = json!(n as u64);
    let path = run.dir.join("large.json");
    write_json(&path, &v);
    path
}

#[test]
fn a_large_trace_is_reported_in_bounded_memory_not_aborted() {
    use std::os::unix::process::CommandExt;
    let path = large_trace(20_000);
    let size = std::fs::metadata(&path).unwrap().len();
    assert!(size > 40 << 20, "a trace of tens of MB: {size}");
    let limited = |format: &str, bytes: u64| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_cublasguard"));
        cmd.args(["report", "--format", format, &s(&path)]).env("NO_COLOR", "1");
        // SAFETY: setrlimit is async-signal-safe; the closure allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                let limit = libc::rlimit { rlim_cur: bytes, rlim_max: bytes };
                if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd.output().unwrap()
    };
    // Under a limit too small for it: refused, with the reason, never aborted.
    let refused = limited("text", 200 << 20);
    assert_eq!(refused.status.code(), Some(2), "{:?}: {}", refused.status, text(&refused.stderr));
    assert!(text(&refused.stderr).contains("address-space limit"), "{}", text(&refused.stderr));
    for format in ["text", "json"] {
        // 1 GiB of address space: the reader of 0.4.0 needed 1.2 GB for this trace and aborted.
        let out = limited(format, 1 << 30);
        assert_eq!(out.status.code(), Some(1), "{format}: faults found, not {:?}: {}", out.status, text(&out.stderr));
        let body = text(&out.stdout);
        assert!(body.contains("20000 fault(s)") || body.contains("\"faults\": 20000") || body.contains("20000"), "{format}: {}", &body[..body.len().min(2000)]);
    }
}

#[test]
fn a_glob_that_also_matches_a_timeline_reports_the_trace_and_notes_the_timeline() {
    let run = mlp(Some("nan"), &[], true);
    let timeline = cublasguard(&["timeline", &s(&run.trace_path)]);
    assert_eq!(timeline.status.code(), Some(0), "{}", text(&timeline.stderr));
    let beside = run.trace_path.with_file_name(format!("{}.timeline.json", run.trace_path.file_stem().unwrap().to_string_lossy()));
    assert!(beside.is_file());
    // What `cublasguard report cublasguard-*.json` expands to.
    let out = cublasguard(&["report", &s(&run.trace_path), &s(&beside)]);
    assert_eq!(out.status.code(), Some(1), "faults found: {}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("cublasguard report:"), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(stderr.contains(&format!("skipped {}: not a cublasguard trace", s(&beside))), "{stderr}");
    // Named alone, it is still an error.
    let alone = cublasguard(&["report", &s(&beside)]);
    assert_eq!(alone.status.code(), Some(2), "{}", text(&alone.stderr));
}

#[test]
fn a_folder_without_traces_among_others_is_skipped_with_a_note() {
    let run = mlp(Some("nan"), &[], true);
    let empty = temp_dir("report-empty-folder");
    let others = temp_dir("report-other-json");
    std::fs::write(others.join("config.json"), "{}").unwrap();
    for order in [[&empty, &run.dir, &others], [&run.dir, &others, &empty]] {
        let args: Vec<String> = order.iter().map(|p| s(p)).collect();
        let out = cublasguard(&["report", &args[0], &args[1], &args[2]]);
        assert_eq!(out.status.code(), Some(1), "{:?}: {}", order, text(&out.stderr));
        assert!(text(&out.stdout).contains("First fault: cublasSgemm_v2"), "{}", text(&out.stdout));
        let stderr = text(&out.stderr);
        assert!(stderr.contains(&format!("skipped {}: no .json trace files", s(&empty))), "{stderr}");
        assert!(stderr.contains("config.json"), "{stderr}");
    }
    let none = cublasguard(&["report", &s(&empty), &s(&others)]);
    assert_eq!(none.status.code(), Some(2), "no trace at all: {}", text(&none.stderr));
}

#[test]
fn traces_of_an_earlier_run_in_the_same_folder_are_left_out_unless_all_runs() {
    let earlier = mlp(Some("width"), &[], true);
    std::thread::sleep(std::time::Duration::from_millis(20));
    let later = mlp(Some("nan"), &[], true);
    let folder = temp_dir("report-two-runs");
    std::fs::copy(&earlier.trace_path, folder.join("cublasguard-a.json")).unwrap();
    std::fs::copy(&later.trace_path, folder.join("cublasguard-b.json")).unwrap();
    let out = cublasguard(&["report", &s(&folder)]);
    let body = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(body.starts_with("cublasguard report:") && body.lines().next().unwrap().ends_with(", 1 process(es)"), "{body}");
    assert!(!body.contains("out_of_bounds"), "the earlier run's fault is not mixed in: {body}");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("left out 1 trace(s) of 1 earlier run(s)") && stderr.contains("cublasguard-a.json") && stderr.contains("--all-runs"), "{stderr}");
    let all = cublasguard(&["report", "--all-runs", &s(&folder)]);
    let body = text(&all.stdout);
    assert!(body.lines().next().unwrap().ends_with(", 2 process(es)") && body.contains("out_of_bounds"), "{body}");
    assert!(!text(&all.stderr).contains("left out"), "{}", text(&all.stderr));
}

#[test]
fn a_users_script_in_folders_named_site_packages_and_torch_keeps_its_line_in_the_report() {
    // The user's own checkout, in folders that only names would take for installed packages:
    // the trace says where this Python keeps its own files, and these are not among them.
    let dir = temp_dir("user-torch");
    let folder = dir.join("site-packages").join("torch");
    std::fs::create_dir_all(&folder).expect("folders");
    let script = folder.join("train.py");
    std::fs::write(
        &script,
        "import ctypes\n\
         ctypes.CDLL('libcudart.so.12', mode=ctypes.RTLD_GLOBAL)\n\
         ctypes.CDLL('libcublas.so.12', mode=ctypes.RTLD_GLOBAL)\n\
         lib = ctypes.CDLL(None)\n\
         def device(values):\n    \
             ptr = ctypes.c_void_p()\n    \
             lib.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(4 * len(values)))\n    \
             host = (ctypes.c_float * len(values))(*values)\n    \
             lib.cudaMemcpy(ptr, host, ctypes.c_size_t(4 * len(values)), 1)\n    \
             return ptr\n\
         handle = ctypes.c_void_p()\n\
         assert lib.cublasCreate_v2(ctypes.byref(handle)) == 0\n\
         a, b, c = device([float('nan'), 1.0, 1.0, 1.0]), device([1.0] * 4), device([0.0] * 4)\n\
         one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)\n\
         lib.cublasSgemm_v2(handle, 0, 0, 2, 2, 2, ctypes.byref(one), a, 2, b, 2, ctypes.byref(zero), c, 2)  # THE LINE\n\
         lib.cudaDeviceSynchronize()\n",
    )
    .expect("script");
    let path = std::env::var("PATH").unwrap_or_default();
    let python = std::path::PathBuf::from("python3");
    let script_s = s(&script);
    let run = run(Launch { env: &[("PATH", path.as_str())], ..Launch::new(&python, &[script_s.as_str()]) });
    assert!(run.output.status.success(), "{}", run.stderr());
    let t = run.trace();
    let paths = t.environment.python_paths.as_ref().expect("the trace says where this Python keeps its own files");
    assert!(!paths.stdlib.is_empty() && !paths.prefixes.is_empty(), "{paths:#?}");
    let f = t.faults.iter().find(|f| f.kind == cublasguard_format::trace::FaultKind::NonfiniteInput).expect("the NaN fault");
    assert!(f.python_stack.iter().any(|p| p.file == script_s), "the frames hold the script: {:#?}", f.python_stack);
    let out = cublasguard(&["report", &s(&run.trace_path)]);
    let report = text(&out.stdout);
    let line = line_of(&script, "# THE LINE");
    assert!(report.contains(&format!("at {script_s}:{line} in <module>")), "the user's line is in the report:\n{report}");
}
