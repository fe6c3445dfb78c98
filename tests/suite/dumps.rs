//! Operand dumps (`CUBLASGUARD_DUMP`) on the stand-in: each GEMM form and dtype, read back
//! and compared bit for bit with the program's own host buffers.

use crate::common;

use std::path::{Path, PathBuf};

use common::*;
use cublasguard_format::dump;
use cublasguard_format::trace::{FaultKind, Trace};

const M: usize = 3;
const N: usize = 2;
const K: usize = 4;
const LDA: usize = 4;

/// Runs the `dumps` workload under the guard with dumps in a fresh folder.
fn dumped(form: &str, dtype: &str, extra_env: &[(&str, &str)]) -> (Run, PathBuf) {
    let program = build_c("dumps", &["dumps.c"], false);
    let host = temp_dir(&format!("dumps-{form}-{dtype}"));
    let dumps = host.join("dumps");
    let host_arg = host.display().to_string();
    let dumps_arg = dumps.display().to_string();
    let mut env = vec![("CUBLASGUARD_DUMP", dumps_arg.as_str())];
    env.extend_from_slice(extra_env);
    let run = run(Launch { env: &env, ..Launch::new(&program, &[form, dtype, &host_arg]) });
    (run, host)
}

/// The stored matrices of a host buffer of `members` column-major members (`rows` x `cols`,
/// leading dimension `ld`), as the dump stores them: row-major, padding dropped.
fn stored(host: &[u8], members: usize, rows: usize, cols: usize, ld: usize, elem: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for m in 0..members {
        let member = &host[m * ld * cols * elem..];
        for r in 0..rows {
            for c in 0..cols {
                out.extend_from_slice(&member[(c * ld + r) * elem..][..elem]);
            }
        }
    }
    out
}

fn the_dump(t: &Trace) -> (String, dump::Dump) {
    let f = only_fault(t);
    assert_eq!(f.kind, FaultKind::NonfiniteInput, "{}", f.message);
    let path = f.dump.clone().unwrap_or_else(|| panic!("no dump recorded: {:?}", f.dump_note));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let decoded = dump::decode(&bytes).unwrap_or_else(|e| panic!("{path}: {e}"));
    (path, decoded)
}

fn read(dir: &Path, name: &str) -> Vec<u8> {
    std::fs::read(dir.join(format!("{name}.bin"))).expect("the program's host buffer")
}

#[test]
fn every_gemm_form_and_dtype_dumps_its_operands_bit_for_bit() {
    let cases: &[(&str, &[&str])] = &[
        ("ex", &["f64", "f32", "f16", "bf16"]),
        ("strided", &["f64", "f32", "f16", "bf16"]),
        ("array", &["f32", "bf16"]),
        ("lt", &["f32", "f16", "bf16", "e4m3", "e5m2"]),
    ];
    for (form, dtypes) in cases {
        for dtype in *dtypes {
            let case = format!("{form} {dtype}");
            let (run, host) = dumped(form, dtype, &[]);
            let t = run.trace();
            let (path, d) = the_dump(&t);
            let mode = std::fs::metadata(&path).map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777);
            assert_eq!(mode.ok(), Some(0o600), "{case}: created like traces");
            let members = if matches!(*form, "strided" | "array") { 2 } else { 1 };
            let elem = dump::dtype_named(if dtype.starts_with('e') {
                if *dtype == "e4m3" {
                    "f8e4m3"
                } else {
                    "f8e5m2"
                }
            } else {
                dtype
            })
            .and_then(|d| d.size())
            .unwrap() as usize;
            let c_elem = if dtype.starts_with('e') { 4 } else { elem };
            let a = &d.tensors["A"];
            assert_eq!((a.batch, a.rows, a.cols), (members, M, K), "{case}");
            assert_eq!(a.raw, stored(&read(&host, "A"), members, M, K, LDA, elem), "{case}: A, padding dropped");
            assert_eq!(d.tensors["B"].raw, stored(&read(&host, "B"), members, K, N, K, elem), "{case}: B");
            assert_eq!(d.tensors["C"].raw, stored(&read(&host, "C"), members, M, N, M, c_elem), "{case}: C as it was before the call");
            let out = if *form == "lt" { "D_out" } else { "C_out" };
            assert!(d.tensors.contains_key(out), "{case}: {:?}", d.tensors.keys());
            assert!(d.tensors[out].at(0, 0, 2)[0].is_nan(), "{case}: column 2 of C met the NaN");
            assert_eq!(d.meta["kind"], "nonfinite_input", "{case}");
            assert_eq!(d.meta["seq"].as_u64(), Some(only_fault(&t).seq), "{case}");
            assert_eq!(d.meta["args"]["m"].as_i64(), Some(M as i64), "{case}: {}", d.meta);
            let _ = std::fs::remove_dir_all(&host);
        }
    }
}

/// The dump of the only fault of `program args`, run under the guard with dumps on.
fn dump_of(program: &str, args: &[&str]) -> (PathBuf, Trace) {
    let exe = build_c(program, &[&format!("{program}.c")], false);
    let dir = temp_dir(&format!("{program}-{}", args.join("-")));
    let dumps = dir.join("dumps").display().to_string();
    let run = run(Launch { env: &[("CUBLASGUARD_DUMP", &dumps)], ..Launch::new(&exe, args) });
    let t = run.trace();
    let path = only_fault(&t).dump.clone().unwrap_or_else(|| panic!("no dump: {:#?}", t.faults));
    (PathBuf::from(path), t)
}

/// `cublasguard replay ARGS DUMP` with the stand-in on the library path (for --cuda).
fn replay(dump: &Path, args: &[&str]) -> (i32, String) {
    let standin = standin();
    let out = std::process::Command::new(cli())
        .arg("replay")
        .args(args)
        .arg(dump)
        .env("LD_LIBRARY_PATH", format!("{}:{}", standin.join("lib").display(), standin.join("driver").display()))
        .env_remove("LD_PRELOAD")
        .output()
        .expect("run cublasguard replay");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

fn verdict(text: &str) -> &str {
    text.lines().find_map(|l| l.strip_prefix("verdict: ")).unwrap_or_else(|| panic!("no verdict in:\n{text}"))
}

#[test]
fn replay_calls_an_output_that_does_not_fit_its_type_inherent() {
    let (dump, t) = dump_of("replay_cases", &["overflow"]);
    assert_eq!(only_fault(&t).kind, FaultKind::NonfiniteOutput);
    let (code, text) = replay(&dump, &[]);
    assert_eq!(code, 0, "reproduced as recorded:\n{text}");
    assert!(verdict(&text).starts_with("inherent: the exact result does not fit in f32 at 1 element(s)"), "{text}");
    // The rerun through the (stand-in) cuBLAS overflows the same way.
    let (code, text) = replay(&dump, &["--cuda"]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("the fault reproduces"), "{text}");
}

#[test]
fn replay_cuda_without_cuda_on_the_library_path_reruns_on_the_bundled_stand_in_and_says_so() {
    // As a user who ran the demo and then the replay command it printed, with --cuda: no
    // CUDA library on the loader's path.
    let (dump, _) = dump_of("replay_cases", &["overflow"]);
    let out = std::process::Command::new(cli())
        .args(["replay", "--cuda"])
        .arg(&dump)
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("LD_PRELOAD")
        .output()
        .expect("replay");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("no CUDA on the library path: rerun on the bundled CPU stand-in at "), "{text}");
    assert!(text.contains("the fault reproduces"), "{text}");
    // With CUDA on the path, nothing is said of the stand-in: the loader's libraries ran it.
    let (code, text) = replay(&dump, &["--cuda"]);
    assert_eq!(code, 0, "{text}");
    assert!(!text.contains("bundled CPU stand-in"), "{text}");
}

#[test]
fn replay_calls_an_fp16_accumulation_that_overflows_where_the_exact_sum_is_zero_reduced_precision() {
    let (dump, t) = dump_of("replay_cases", &["fp16"]);
    assert_eq!(only_fault(&t).kind, FaultKind::NonfiniteOutput, "{}", only_fault(&t).message);
    let (code, text) = replay(&dump, &[]);
    assert_eq!(code, 0, "{text}");
    let v = verdict(&text);
    assert!(v.starts_with("reduced precision: the exact result is finite") && v.contains("fp16 accumulation (CUBLAS_COMPUTE_16F)"), "{text}");
    assert!(text.contains("member 0 (0, 0): library inf, exact 0.000000e0"), "the worst element, with its position: {text}");

    // The emitted C program compiles against the headers and reproduces the fault on the stand-in.
    let dir = dump.parent().unwrap().to_path_buf();
    let source = dir.join("repro.c");
    let (code, text) = replay(&dump, &["--emit-c", source.to_str().unwrap()]);
    assert_eq!(code, 0, "{text}");
    let exe = dir.join("repro");
    let standin = standin();
    let cc = std::process::Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .arg(&source)
        .arg("-o")
        .arg(&exe)
        .arg(format!("-I{}", manifest_dir().join("shims/include").display()))
        .arg(format!("-L{}", standin.join("lib").display()))
        .args(["-lcublas", "-lcudart"])
        .status()
        .expect("run the C compiler");
    assert!(cc.success(), "the emitted program compiles");
    let out = std::process::Command::new(&exe)
        .arg(&dump)
        .env("LD_LIBRARY_PATH", format!("{}:{}", standin.join("lib").display(), standin.join("driver").display()))
        .env_remove("LD_PRELOAD")
        .output()
        .expect("run the emitted program");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert!(stdout.contains("1 NaN/Inf in the output: the fault reproduces"), "{stdout}");
}

#[test]
fn replay_calls_a_call_that_matches_the_exact_result_clean_and_not_reproduced() {
    // A dump as the guard writes it, of a call whose output is right: 2 x 2 identity times B.
    let f32s = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let tensor =
        |name: &str, data: Vec<u8>| dump::Tensor { name: name.into(), dtype: cublasguard_format::cuda::DType::F32, batch: None, rows: 2, cols: 2, data };
    let tensors = vec![tensor("A", f32s(&[1.0, 0.0, 0.0, 1.0])), tensor("B", f32s(&[1.0, 2.0, 3.0, 4.0])), tensor("C_out", f32s(&[1.0, 2.0, 3.0, 4.0]))];
    let described: serde_json::Map<String, serde_json::Value> =
        tensors.iter().map(|t| (t.name.clone(), serde_json::json!({"dtype": "f32", "rows": 2, "cols": 2, "batch": null}))).collect();
    let meta = serde_json::json!({
        "format": dump::FORMAT, "api": "cublasSgemm_v2", "seq": 7, "kind": "nonfinite_output", "scalar_type": "f32",
        "alpha": [1.0, 0.0], "beta": [0.0, 0.0], "tensors": described,
        "args": {"transa": "N", "transb": "N", "m": 2, "n": 2, "k": 2},
    });
    let dir = temp_dir("replay-clean");
    let path = dir.join("clean.safetensors");
    std::fs::write(&path, dump::encode(&tensors, &meta).unwrap()).unwrap();
    let (code, text) = replay(&path, &[]);
    assert_eq!(code, 1, "nothing to reproduce:\n{text}");
    assert!(verdict(&text).starts_with("clean: the library's output matches the exact result"), "{text}");
    // A wrong output, in full precision, is not explained by precision.
    let mut wrong = tensors.clone();
    wrong[2].data = f32s(&[1.0, 2.0, 3.5, 4.0]);
    std::fs::write(&path, dump::encode(&wrong, &meta).unwrap()).unwrap();
    let (_, text) = replay(&path, &[]);
    assert!(verdict(&text).starts_with("not explained:"), "{text}");
    assert!(text.contains("member 0 (1, 0): library 3.500000e0, exact 3.000000e0"), "{text}");
    // Not a dump at all: exit 2.
    std::fs::write(&path, b"not a dump").unwrap();
    let (code, text) = replay(&path, &[]);
    assert_eq!(code, 2, "{text}");
}

/// The stand-in's MLP example with a NaN injected (ten faults), with dumps on.
fn mlp_with_dumps(env: &[(&str, &str)]) -> (Trace, Vec<PathBuf>) {
    let program = standin().join("bin/mlp");
    let dir = temp_dir("dumps-mlp");
    let dumps = dir.join("dumps");
    let dumps_arg = dumps.display().to_string();
    let mut all = vec![("CUBLASGUARD_DUMP", dumps_arg.as_str())];
    all.extend_from_slice(env);
    let run = run(Launch { env: &all, ..Launch::new(&program, &["--inject", "nan", "--epochs", "2"]) });
    let files = std::fs::read_dir(&dumps).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    (run.trace(), files)
}

#[test]
fn dumps_stop_at_their_count_and_leave_out_what_passes_the_byte_cap() {
    let (t, files) = mlp_with_dumps(&[("CUBLASGUARD_DUMP_MAX", "2")]);
    assert!(t.faults.len() > 2, "{}", t.faults.len());
    let dumped: Vec<&str> = t.faults.iter().filter_map(|f| f.dump.as_deref()).collect();
    assert_eq!(dumped.len(), 2, "CUBLASGUARD_DUMP_MAX=2");
    assert_eq!(files.len(), 2, "{files:?}");
    assert!(dumped.iter().all(|d| files.iter().any(|f| f.to_str() == Some(*d))));

    // A cap smaller than B (8 x 32 f32, 1 KiB): B is left out, and the fault says so.
    let (t, _) = mlp_with_dumps(&[("CUBLASGUARD_DUMP_MAX", "1"), ("CUBLASGUARD_DUMP_BYTES", "600")]);
    let f = &t.faults[0];
    let note = f.dump_note.as_deref().unwrap_or_default();
    assert!(note.contains("B not dumped: its 1024 bytes would pass CUBLASGUARD_DUMP_BYTES (600)"), "{note}");
    let d = dump::decode(&std::fs::read(f.dump.as_ref().expect("a dump of what fits")).unwrap()).unwrap();
    assert!(d.tensors.contains_key("A") && !d.tensors.contains_key("B"), "{:?}", d.tensors.keys());
    let recorded: Vec<&str> = d.meta["not_dumped"].as_array().unwrap().iter().filter_map(|n| n.as_str()).collect();
    assert_eq!(recorded.join("; "), note, "the dump's record says it too");
}

#[test]
fn an_ignored_fault_is_not_dumped_and_a_fault_no_rule_covers_still_is() {
    let (t, files) = mlp_with_dumps(&[("CUBLASGUARD_IGNORE", "kind=nonfinite_input")]);
    assert!(t.faults.is_empty(), "{:#?}", t.faults);
    assert!(files.is_empty(), "ignored faults are not dumped: {files:?}");
    let (t, files) = mlp_with_dumps(&[("CUBLASGUARD_IGNORE", "kind=nonfinite_input,operand=A"), ("CUBLASGUARD_DUMP_MAX", "100")]);
    let kept = t.faults.iter().filter(|f| f.dump.is_some()).count();
    assert!(kept > 0 && kept == t.faults.len() && files.len() == kept, "{kept} of {} faults, {} files", t.faults.len(), files.len());
}

#[test]
fn a_fault_found_before_the_call_dumps_what_can_be_read_and_names_what_cannot() {
    // B's allocation is one element short of what the GEMM reads.
    let (path, t) = dump_of("allocators", &["managed", "oob"]);
    let f = only_fault(&t);
    assert_eq!(f.kind, FaultKind::OutOfBounds, "{}", f.message);
    let note = f.dump_note.as_deref().unwrap_or_default();
    assert!(note.contains("B not dumped: it is not inside live device memory"), "{note}");
    let d = dump::decode(&std::fs::read(&path).unwrap()).unwrap();
    assert!(d.tensors.contains_key("A") && !d.tensors.contains_key("B"), "{:?} {note}", d.tensors.keys());
    assert_eq!(d.meta["kind"], "out_of_bounds");
    // Without B, replay cannot recompute the call: it says so, as an unreadable dump.
    let (code, text) = replay(&path, &[]);
    assert_eq!(code, 2, "{text}");
    assert!(text.contains("the dump has no B"), "{text}");
}
