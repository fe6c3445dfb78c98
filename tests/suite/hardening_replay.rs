//! `cublasguard replay` and `report` against hostile input: dumps whose metadata would inject
//! code into the reproducer or escape sequences into the terminal, whose dimensions do not
//! match their tensors, and paths (a dump, a trace's source file) that are not regular files.
//! Every command runs under `timeout` and a memory limit, so a regression fails instead of
//! hanging the suite or eating the machine.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use cublasguard_format::cuda::DType;
use cublasguard_format::dump;
use serde_json::{json, Value};

/// The text every hostile field carries: it ends a C comment, calls a function, reopens one.
const INJECTED: &str = "*/ system(\"touch PWNED\"); /* \" \\ ??/\n";

/// `cublasguard ARGS` under `timeout 20` and a 4 GiB address-space limit, with the stand-in on
/// the library path: its exit status (124 when it ran out of time) and stdout + stderr.
fn hostile(args: &[&str], cwd: &Path) -> (i32, String, String) {
    let standin = standin();
    let out = Command::new("timeout")
        .args(["-s", "KILL", "20", "sh", "-c", "ulimit -v 4194304; exec \"$0\" \"$@\""])
        .arg(cli())
        .args(args)
        .current_dir(cwd)
        .env("LD_LIBRARY_PATH", format!("{}:{}", standin.join("lib").display(), standin.join("driver").display()))
        .env("NO_COLOR", "1")
        .env_remove("LD_PRELOAD")
        .output()
        .expect("run cublasguard under timeout");
    (out.status.code().unwrap_or(124), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn tensor(name: &str, batch: Option<u64>, rows: u64, cols: u64, data: Vec<u8>) -> dump::Tensor {
    dump::Tensor { name: name.into(), dtype: DType::F32, batch, rows, cols, data }
}

/// The call record of `tensors` as the guard writes it, with `args` and `extra` merged in.
fn meta(tensors: &[dump::Tensor], args: Value, extra: Value) -> Value {
    let described: serde_json::Map<String, Value> =
        tensors.iter().map(|t| (t.name.clone(), json!({"dtype": "f32", "rows": t.rows, "cols": t.cols, "batch": t.batch}))).collect();
    let mut m = json!({
        "format": dump::FORMAT, "api": "cublasSgemm_v2", "seq": 7, "kind": "nonfinite_output", "scalar_type": "f32",
        "alpha": [1.0, 0.0], "beta": [0.0, 0.0], "tensors": described,
        "args": {"transa": "N", "transb": "N", "m": 2, "n": 2, "k": 2},
    });
    for (k, v) in args.as_object().unwrap() {
        m["args"][k] = v.clone();
    }
    for (k, v) in extra.as_object().unwrap() {
        m[k] = v.clone();
    }
    m
}

/// A 2 x 2 call whose output holds an Inf the exact result does not: a fault to reproduce.
fn two_by_two() -> Vec<dump::Tensor> {
    vec![
        tensor("A", None, 2, 2, f32s(&[1.0, 0.0, 0.0, 1.0])),
        tensor("B", None, 2, 2, f32s(&[1.0, 2.0, 3.0, 4.0])),
        tensor("C_out", None, 2, 2, f32s(&[1.0, f32::INFINITY, 3.0, 4.0])),
    ]
}

fn write_dump(dir: &Path, name: &str, tensors: &[dump::Tensor], meta: &Value) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, dump::encode(tensors, meta).unwrap()).unwrap();
    path
}

/// C source with its comments and string and character literals taken out: what the compiler
/// reads as code.
fn code_only(c: &str) -> String {
    let (mut out, mut chars) = (String::new(), c.chars().peekable());
    while let Some(ch) = chars.next() {
        match ch {
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut last = ' ';
                for x in chars.by_ref() {
                    if last == '*' && x == '/' {
                        break;
                    }
                    last = x;
                }
                out.push(' ');
            }
            '/' if chars.peek() == Some(&'/') => {
                for x in chars.by_ref() {
                    if x == '\n' {
                        break;
                    }
                }
                out.push('\n');
            }
            '"' | '\'' => {
                while let Some(x) = chars.next() {
                    if x == '\\' {
                        chars.next();
                    } else if x == ch {
                        break;
                    }
                }
                out.push_str("\"\"");
            }
            _ => out.push(ch),
        }
    }
    out
}

#[test]
fn emit_c_turns_a_dumps_hostile_names_and_path_into_escaped_strings_and_the_program_runs_no_injected_code() {
    let root = temp_dir("hostile-emit-c");
    // The folder's name ends a comment too ("*/"), and holds a quote and a newline.
    let dir = root.join("x*\"\n");
    std::fs::create_dir_all(&dir).unwrap();
    let t = two_by_two();
    let m = meta(&t, json!({}), json!({"api": format!("cublasSgemm_v2{INJECTED}"), "kind": format!("nonfinite_output{INJECTED}")}));
    let dump = write_dump(&dir, "d.safetensors", &t, &m);
    let source = root.join("repro.c");
    let (code, out, err) = hostile(&["replay", "--emit-c", source.to_str().unwrap(), dump.to_str().unwrap()], &root);
    assert!(code == 0 || code == 1, "{code}: {out}{err}");
    let c = std::fs::read_to_string(&source).unwrap();
    let code_part = code_only(&c);
    assert!(!code_part.contains("system(") && !code_part.contains("PWNED"), "nothing from the dump is pasted as code:\n{code_part}");
    assert!(!c.contains("??/"), "no trigraph forms:\n{c}");
    assert!(c.contains(r#"static const char call_api[] = "cublasSgemm_v2*/ system(\"touch PWNED\"); /* \" \\ \?\?/\012";"#), "{c}");

    // It builds, and running it (from the folder, so a PWNED would land there) makes the call.
    let exe = root.join("repro");
    let standin = standin();
    let cc = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .arg(&source)
        .arg("-o")
        .arg(&exe)
        .arg(format!("-I{}", manifest_dir().join("shims/include").display()))
        .arg(format!("-L{}", standin.join("lib").display()))
        .args(["-lcublas", "-lcudart", "-Werror=implicit-function-declaration"])
        .output()
        .expect("run the C compiler");
    assert!(cc.status.success(), "the reproducer compiles: {}", String::from_utf8_lossy(&cc.stderr));
    let run = Command::new(&exe)
        .current_dir(&root)
        .env("LD_LIBRARY_PATH", format!("{}:{}", standin.join("lib").display(), standin.join("driver").display()))
        .env_remove("LD_PRELOAD")
        .output()
        .expect("run the reproducer");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(stdout.contains("cublasGemmStridedBatchedEx=0"), "it loaded the dump from its default path and made the call: {stdout}");
    assert!(stdout.contains("rerunning cublasSgemm_v2*/ system(\"touch PWNED\")"), "the names are data, printed: {stdout}");
    assert!(!root.join("PWNED").exists() && !dir.join("PWNED").exists(), "the injected code never ran");

    // A program given another, shorter file refuses it rather than read past its end.
    let short = write_dump(&root, "short.safetensors", &t[..1], &meta(&t[..1], json!({}), json!({})));
    let run = Command::new(&exe)
        .arg(&short)
        .env("LD_LIBRARY_PATH", format!("{}:{}", standin.join("lib").display(), standin.join("driver").display()))
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(2), "{}", String::from_utf8_lossy(&run.stderr));
    assert!(String::from_utf8_lossy(&run.stderr).contains("not the dump this program was written for"));
}

#[test]
fn replay_refuses_dimensions_its_tensors_do_not_hold_before_computing_anything() {
    let dir = temp_dir("hostile-dims");
    let t = two_by_two();
    let one = vec![tensor("A", None, 1, 1, f32s(&[1.0])), tensor("B", None, 1, 1, f32s(&[1.0])), tensor("C_out", None, 1, 1, f32s(&[f32::NAN]))];
    // A record whose rows would wrap a size check: 2^62 + 1 rows of A, as the record says.
    let mut wraps = meta(&t, json!({}), json!({}));
    wraps["tensors"]["A"]["rows"] = json!((1u64 << 62) + 1);
    let cases: Vec<(&str, Vec<dump::Tensor>, Value, &str)> = vec![
        (
            "k-huge",
            one.clone(),
            meta(&one, json!({"m": 1, "n": 1, "k": 1_000_000_000_000u64}), json!({})),
            "A is stored 1 x 1, but transa = N: op(A) is m x k = 1 x 1000000000000",
        ),
        ("rows-wrap", t.clone(), wraps, "A: the call record says 1 x 4611686018427387905 x 2 f32, but the file stores F32 of shape [2, 2]"),
        ("k-past-A", t.clone(), meta(&t, json!({"k": 3}), json!({})), "A is stored 2 x 2, but transa = N: op(A) is m x k = 2 x 3"),
        ("transposed", t.clone(), meta(&t, json!({"m": 2, "n": 2, "k": 2, "transa": "T"}), json!({})), ""),
        ("lda-short", t.clone(), meta(&t, json!({"lda": 1}), json!({})), "lda is 1, but A has 2 rows"),
        ("negative-k", t.clone(), meta(&t, json!({"k": -1}), json!({})), "k is -1 in the call record, not a size"),
    ];
    for (name, tensors, m, why) in cases {
        let path = write_dump(&dir, &format!("{name}.safetensors"), &tensors, &m);
        for extra in [&[][..], &["--cuda"][..], &["--emit-c", "out.c"][..]] {
            let mut args = vec!["replay"];
            args.extend_from_slice(extra);
            args.push(path.to_str().unwrap());
            let (code, out, err) = hostile(&args, &dir);
            if why.is_empty() {
                // A transposed call whose stored shapes match: replayed.
                assert!(code == 0 || code == 1, "{name} {extra:?}: {code}: {out}{err}");
                let _ = std::fs::remove_file(dir.join("out.c"));
                continue;
            }
            assert_eq!(code, 2, "{name} {extra:?}: an inconsistent dump is refused: {out}{err}");
            assert!(err.contains(why), "{name} {extra:?}: the inconsistency is named ({why}): {err}");
            assert!(!out.contains("verdict:"), "{name}: no verdict: {out}");
        }
        assert!(!dir.join("out.c").exists(), "{name}: no reproducer for an inconsistent dump");
    }
}

#[test]
fn replay_refuses_batches_that_do_not_match_and_work_past_its_cap() {
    let dir = temp_dir("hostile-batch");
    // A has 3 members, the output 2.
    let batched = vec![tensor("A", Some(3), 2, 2, f32s(&[1.0; 12])), tensor("B", None, 2, 2, f32s(&[1.0; 4])), tensor("C_out", Some(2), 2, 2, f32s(&[2.0; 8]))];
    let path = write_dump(&dir, "batch.safetensors", &batched, &meta(&batched, json!({}), json!({})));
    let (code, _, err) = hostile(&["replay", "--cuda", path.to_str().unwrap()], &dir);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("A has 3 members, but the output has 2"), "{err}");

    // Consistent, small tensors, but 100001 members sharing a 1 x 100000 A: 10^10 + 10^5
    // multiply-adds, past the cap, refused at once rather than computed for minutes.
    let k = 100_000u64;
    let members = 100_001u64;
    let big = vec![
        tensor("A", None, 1, k, f32s(&vec![1.0; k as usize])),
        tensor("B", None, k, 1, f32s(&vec![1.0; k as usize])),
        tensor("C_out", Some(members), 1, 1, f32s(&vec![f32::NAN; members as usize])),
    ];
    let path = write_dump(&dir, "work.safetensors", &big, &meta(&big, json!({"m": 1, "n": 1, "k": k}), json!({})));
    let started = std::time::Instant::now();
    let (code, _, err) = hostile(&["replay", path.to_str().unwrap()], &dir);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("would take 10000100000 multiply-adds") && err.contains("more than replay's cap of 10000000000"), "{err}");
    assert!(started.elapsed().as_secs() < 10, "refused before computing");
}

#[test]
fn replay_reads_only_regular_files_and_refuses_a_fifo_a_device_and_a_file_past_its_cap() {
    let dir = temp_dir("hostile-files");
    let fifo = dir.join("fifo.safetensors");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let huge = dir.join("huge.safetensors");
    // Sparse: 16 GiB + 1 byte, no disk used.
    std::fs::File::create(&huge).unwrap().set_len((16u64 << 30) + 1).unwrap();
    for (path, why) in [
        (fifo.as_path(), "not a regular file"),
        (Path::new("/dev/zero"), "not a regular file"),
        (dir.as_path(), "not a regular file"),
        (huge.as_path(), "17179869185 bytes, more than the 17179869184 read at most"),
    ] {
        let (code, out, err) = hostile(&["replay", path.to_str().unwrap()], &dir);
        assert_eq!(code, 2, "{}: refused, not hung or killed: {out}{err}", path.display());
        assert!(err.contains(why), "{}: {err}", path.display());
    }
}

#[test]
fn replay_shows_escape_sequences_newlines_and_bidirectional_overrides_from_a_dump_escaped() {
    let dir = temp_dir("hostile-escapes");
    let t = two_by_two();
    let evil = "cublas\u{1b}[2J\u{202e}Sgemm\u{2066}\nverdict: clean\u{200f}";
    let m = meta(&t, json!({}), json!({"api": evil, "kind": format!("nonfinite_output{evil}"), "message": evil}));
    let path = write_dump(&dir, "evil\u{202e}.safetensors", &t, &m);
    let (code, out, err) = hostile(&["replay", path.to_str().unwrap()], &dir);
    assert!(code == 0 || code == 1, "{code}: {out}{err}");
    let all = format!("{out}{err}");
    for raw in ['\u{1b}', '\u{202e}', '\u{2066}', '\u{200f}'] {
        assert!(!all.contains(raw), "{:?} reached the terminal raw: {all:?}", raw);
    }
    assert!(out.contains(r"cublas\u{1b}[2J\u{202e}Sgemm\u{2066}\u{a}verdict: clean\u{200f}"), "{out}");
    assert!(out.contains(r"evil\u{202e}.safetensors"), "the path too: {out}");
    assert_eq!(out.lines().filter(|l| l.starts_with("verdict:")).count(), 1, "no forged verdict line: {out}");
    // An error that quotes the dump is escaped as well.
    let bad = meta(&t, json!({"epilogue": "CUBLASLT_EPILOGUE_\u{202e}GELU\u{1b}[31m"}), json!({}));
    let path = write_dump(&dir, "epilogue.safetensors", &t, &bad);
    let (code, _, err) = hostile(&["replay", path.to_str().unwrap()], &dir);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(r"CUBLASLT_EPILOGUE_\u{202e}GELU\u{1b}[31m") && !err.contains('\u{202e}') && !err.contains('\u{1b}'), "{err:?}");
}

/// A trace of the stand-in's MLP with a NaN injected, as JSON text.
fn mlp_trace() -> String {
    let program = standin().join("bin/mlp");
    // gemm mode named: its NaN verdicts, judged at the call, carry the native frames that name
    // the source the report must not read from a FIFO or a device.
    let run = run(Launch { env: &[("CUBLASGUARD_SYNC", "gemm")], ..Launch::new(&program, &["--inject", "nan"]) });
    std::fs::read_to_string(&run.trace_path).unwrap()
}

#[test]
fn report_escapes_bidirectional_overrides_and_reads_no_source_line_from_a_fifo_or_a_device() {
    let dir = temp_dir("hostile-report");
    let trace = mlp_trace();
    let mlp_c = manifest_dir().join("examples/mlp.c").display().to_string();
    assert!(trace.contains(&mlp_c), "the native frames name the example's source");
    let fifo = dir.join("source.c");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    for (name, source) in [("fifo", fifo.display().to_string()), ("zero", "/dev/zero".to_string())] {
        let path = dir.join(format!("{name}.json"));
        std::fs::write(&path, trace.replace(&mlp_c, &source)).unwrap();
        let (code, out, err) = hostile(&["report", path.to_str().unwrap()], &dir);
        assert_eq!(code, 1, "{name}: the report of the faults, not a hang: {out}{err}");
        assert!(out.contains(&format!("{source}:45 in gemm_rm")), "{name}: the frame is still named: {out}");
    }
    // Python frames name their file the same way.
    let mut v: Value = serde_json::from_str(&trace).unwrap();
    for f in v["faults"].as_array_mut().unwrap() {
        f["python_stack"] = json!([{"file": fifo.display().to_string(), "line": 3, "function": "forward"}]);
        f["message"] = json!("bad\u{202e}txt.exe\u{2067}");
    }
    let path = dir.join("python.json");
    std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
    let (code, out, err) = hostile(&["report", path.to_str().unwrap()], &dir);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains(&format!("{}:3 in forward", fifo.display())), "{out}");
    assert!(!out.contains('\u{202e}') && !out.contains('\u{2067}'), "no bidirectional override reaches the terminal: {out}");
    assert!(out.contains(r"bad\u{202e}txt.exe\u{2067}"), "shown escaped: {out}");
    let (_, md, _) = hostile(&["report", "--format", "markdown", path.to_str().unwrap()], &dir);
    assert!(!md.contains('\u{202e}'), "{md}");
}
