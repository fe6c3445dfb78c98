//! Operand dumps (`CUBLASGUARD_DUMP`) on the stand-in: each GEMM form and dtype, read back
//! and compared bit for bit with the program's own host buffers.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use cublasguard::dump;
use cublasguard::trace::{FaultKind, Trace};

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
            let elem = dump::dtype_named(if dtype.starts_with('e') { if *dtype == "e4m3" { "f8e4m3" } else { "f8e5m2" } } else { dtype }).and_then(|d| d.size()).unwrap() as usize;
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
