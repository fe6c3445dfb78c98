//! Every hooked GEMM variant and cublasLtMatmul, on the stand-in stack: a clean call gives
//! identical results with and without the guard, and NaN inputs (f16/bf16 for the Ex forms),
//! invalid arguments, operands out of bounds and bad batch members are each named.

use crate::common;

use common::*;
use cublasguard_format::trace::FaultKind;

const VARIANTS: &[(&str, bool)] = &[
    ("cublasSgemm_v2", false),
    ("cublasSgemm_v2_64", false),
    ("cublasDgemm_v2", false),
    ("cublasDgemm_v2_64", false),
    ("cublasHgemm", false),
    ("cublasHgemm_64", false),
    ("cublasSgemmStridedBatched", true),
    ("cublasSgemmStridedBatched_64", true),
    ("cublasDgemmStridedBatched", true),
    ("cublasDgemmStridedBatched_64", true),
    ("cublasHgemmStridedBatched", true),
    ("cublasHgemmStridedBatched_64", true),
    ("cublasSgemmBatched", true),
    ("cublasSgemmBatched_64", true),
    ("cublasGemmEx", false),
    ("cublasGemmEx_64", false),
    ("cublasGemmStridedBatchedEx", true),
    ("cublasGemmStridedBatchedEx_64", true),
    ("cublasGemmBatchedEx", true),
    ("cublasGemmBatchedEx_64", true),
];

fn family(function: &str, case: &str, guarded: bool) -> Run {
    run_c("gemm_family", &[function, case], guarded)
}

#[test]
fn clean_calls_match_the_unguarded_results() {
    for (function, batched) in VARIANTS {
        let bare = family(function, "clean", false);
        let guarded = family(function, "clean", true);
        assert!(bare.stdout().contains("status=0\nsync=0\nC "), "{function}: {}", bare.stdout());
        assert_eq!(bare.stdout(), guarded.stdout(), "{function}");
        let t = guarded.trace();
        assert!(t.faults.is_empty(), "{function}: {:#?}", t.faults);
        assert_eq!(t.summary.calls.get(*function), Some(&1), "{function} was intercepted");
        let values = guarded.stdout().lines().last().unwrap().split(' ').count() - 1;
        assert_eq!(values, if *batched { 48 } else { 16 }, "{function}");
    }
}

#[test]
fn nan_inputs_are_named_with_their_batch_member() {
    for (function, batched) in VARIANTS {
        let run = family(function, "nan", true);
        let t = run.trace();
        let f = the_fault(&t, function, "nan");
        assert_eq!(f.kind, FaultKind::NonfiniteInput, "{function}");
        let a = f.operands.iter().find(|o| o.name == "A").unwrap();
        assert_eq!(a.nan, Some(1), "{function}");
        assert_eq!(a.first_nonfinite.map(|p| (p.row, p.col)), Some((1, 2)), "{function}");
        if *batched {
            assert_eq!(a.bad_member, Some(2), "{function}");
            assert_eq!(a.batch_count, Some(3), "{function}");
            assert!(f.message.contains("batch member 2 of 3"), "{function}: {}", f.message);
            assert_eq!(f.args["batchCount"], 3, "{function}");
        }
        if function.contains("Ex") {
            let dtype = &a.dtype;
            assert!(dtype == "f16" || dtype == "bf16", "{function}: the Ex forms run in half precision: {dtype}");
            assert_eq!(f.args["computeType"], "CUBLAS_COMPUTE_32F", "{function}");
            assert_eq!(f.args["Ctype"], "f32", "{function}");
        }
        assert_eq!(f.handle.as_ref().map(|h| h.math_mode.as_str()), Some("CUBLAS_DEFAULT_MATH"), "{function}");
    }
}

#[test]
fn pointer_array_operands_record_the_arrays_allocation_and_the_members_apart() {
    for function in ["cublasSgemmBatched", "cublasSgemmBatched_64", "cublasGemmBatchedEx", "cublasGemmBatchedEx_64"] {
        let t = family(function, "nan", true).trace();
        let f = the_fault(&t, function, "nan");
        for name in ["A", "B", "C"] {
            let o = f.operands.iter().find(|o| o.name == name).unwrap();
            assert!(o.pointer_array, "{function} {name}");
            let array = o.allocation.as_ref().unwrap_or_else(|| panic!("{function} {name}: the array's allocation"));
            assert_eq!(array.base, o.ptr, "{function} {name}: the array's own allocation, not a member's");
            assert_eq!(array.size, 3 * 8, "{function} {name}: three pointers");
            assert!(o.member_allocation.is_some(), "{function} {name}: the member's allocation, apart");
        }
        let report = std::process::Command::new(cli()).arg("report").arg(family(function, "nan", true).trace_path).output().expect("report");
        let text = String::from_utf8_lossy(&report.stdout);
        assert!(text.contains("an array of pointers in allocation") && !text.contains("in no allocation the guard saw"), "{text}");
    }
}

#[test]
fn invalid_arguments_name_the_rule() {
    for (function, _) in VARIANTS {
        let run = family(function, "invalid", true);
        assert!(run.stdout().contains("status=7"), "{function}: {}", run.stdout());
        let t = run.trace();
        let f = the_fault(&t, function, "invalid");
        assert_eq!(f.kind, FaultKind::InvalidArgument);
        assert_eq!(f.message, "lda = 1 but transa = N needs lda >= max(1, m) = 4", "{function}");
    }
}

#[test]
fn operands_out_of_bounds_name_the_member_that_overruns() {
    for (function, batched) in VARIANTS {
        let bare = family(function, "oob", false);
        let guarded = family(function, "oob", true);
        assert_eq!(bare.stdout(), guarded.stdout(), "{function}");
        let t = guarded.trace();
        let f = &t.faults[0];
        assert_eq!(f.kind, FaultKind::OutOfBounds, "{function}: {:#?}", t.faults);
        let b = f.operands.iter().find(|o| o.name == "B").unwrap();
        if *batched {
            assert_eq!(b.bad_member, Some(2), "{function}");
            assert!(f.message.contains("operand B (batch member 2 of 3"), "{function}: {}", f.message);
        } else {
            assert!(f.message.starts_with("operand B ("), "{function}: {}", f.message);
        }
        assert_eq!(f.error.as_ref().map(|e| e.code), Some(700), "{function}: the illegal address the guard's sync saw");
    }
}

#[test]
fn unsupported_type_combinations_are_named() {
    for function in ["cublasGemmEx", "cublasGemmEx_64", "cublasGemmStridedBatchedEx", "cublasGemmBatchedEx_64"] {
        let run = family(function, "types", true);
        assert!(run.stdout().contains("status=15"), "{function}: the library says NOT_SUPPORTED");
        let t = run.trace();
        let f = the_fault(&t, function, "types");
        assert_eq!(f.kind, FaultKind::InvalidArgument);
        assert!(f.message.starts_with("unsupported type combination: A ") && f.message.contains("CUBLAS_COMPUTE_32F_FAST_TF32"), "{}", f.message);
        assert!(f.handle.as_ref().unwrap().reduced_precision, "{function}: a 32F_FAST compute type is flagged");
    }
}

#[test]
fn complex_gemm_ex_rows_of_nvidias_table_run_clean_under_on_fault_error() {
    // A = [[1+i, 2], [0, 1-i]], B = [[1, i], [2, 1]]: A·B = [[5+i, 1+i], [2-2i, 1-i]],
    // printed column-major as (re, im) pairs; the second batch member's A is doubled.
    let one = "C 5 1 2 -2 1 1 1 -1";
    let two = "5 1 2 -2 1 1 1 -1 10 2 4 -4 2 2 2 -2";
    let env = [("CUBLASGUARD_ON_FAULT", "error")];
    for function in ["cublasGemmEx", "cublasGemmEx_64", "cublasGemmStridedBatchedEx", "cublasGemmStridedBatchedEx_64"] {
        for case in ["c32", "c64", "ci8"] {
            let program = common::build_c("gemm_family", &["gemm_family.c"], false);
            let run = common::run(Launch { env: &env, ..Launch::new(&program, &[function, case]) });
            let out = run.stdout();
            assert!(out.contains("status=0\nsync=0\n"), "{function} {case}: {out}");
            let expected = if function.contains("Batched") { format!("C {two}") } else { one.to_string() };
            assert_eq!(out.lines().last(), Some(expected.as_str()), "{function} {case}");
            let t = run.trace();
            assert!(t.faults.is_empty(), "{function} {case}: {:#?}", t.faults);
            assert_eq!(t.summary.calls.get(function), Some(&1), "{function} was intercepted");
        }
    }
}

#[test]
fn emulated_compute_type_rows_of_nvidias_table_run_clean_under_on_fault_error() {
    // CUBLAS_COMPUTE_32F_EMULATED_16BFX9 (78) with c32, and CUDA 13.0 update 2's
    // CUBLAS_COMPUTE_64F_EMULATED_FIXEDPOINT (79) with c64 and f64: valid calls, computed, and
    // never refused. The real case multiplies the complex case's real parts alone.
    let env = [("CUBLASGUARD_ON_FAULT", "error")];
    let program = common::build_c("gemm_family", &["gemm_family.c"], false);
    for function in ["cublasGemmEx", "cublasGemmStridedBatchedEx_64"] {
        let batched = function.contains("Batched");
        for (case, one, two) in [
            ("c32_bf16x9", "5 1 2 -2 1 1 1 -1", "10 2 4 -4 2 2 2 -2"),
            ("c64_fixed", "5 1 2 -2 1 1 1 -1", "10 2 4 -4 2 2 2 -2"),
            ("r64_fixed", "5 2 2 1", "10 4 4 2"),
        ] {
            let run = common::run(Launch { env: &env, ..Launch::new(&program, &[function, case]) });
            let out = run.stdout();
            assert!(out.contains("status=0\nsync=0\n"), "{function} {case}: {out}");
            let expected = if batched { format!("C {one} {two}") } else { format!("C {one}") };
            assert_eq!(out.lines().last(), Some(expected.as_str()), "{function} {case}");
            let t = run.trace();
            assert!(t.faults.is_empty(), "{function} {case}: {:#?}", t.faults);
            assert_eq!(t.summary.calls.get(function), Some(&1), "{function} was intercepted");
        }
    }
}

#[test]
fn cublaslt_c_may_be_null_when_beta_is_zero_and_a_null_c_is_named_null_otherwise() {
    // nvmath-python's matmul without C: C = NULL, beta = 0. cuBLASLt does not read C then.
    let bare = linear("c_null", "f32", false);
    let run = linear("c_null", "f32", true);
    assert!(run.stdout().contains("matmul=0\nsync=0\nD "), "{}", run.stdout());
    assert_eq!(bare.stdout(), run.stdout());
    let t = run.trace();
    assert!(t.faults.is_empty(), "{:#?}", t.faults);

    let run = linear("c_null_beta", "f32", true);
    let t = run.trace();
    let f = the_fault(&t, "cublasLtMatmul", "c_null_beta");
    assert_eq!(f.kind, FaultKind::InvalidArgument);
    assert!(f.message.starts_with("operand C (") && f.message.contains("is NULL, but beta is not zero"), "{}", f.message);
    assert!(!f.message.contains("host"), "NULL is not a host buffer: {}", f.message);
}

#[test]
fn one_operands_fault_does_not_stop_the_next_operands_bounds_check() {
    let run = linear("c_null_d_short", "f32", true);
    let t = run.trace();
    let f = the_fault(&t, "cublasLtMatmul", "c_null_d_short");
    assert!(f.message.contains("operand C (") && f.message.contains("is NULL"), "{}", f.message);
    assert!(f.message.contains("also, operand D (") && f.message.contains("overruns it by 64 bytes"), "{}", f.message);
    assert!(!f.message.contains("stopped at an earlier"), "{}", f.message);
}

#[test]
fn tf32_math_mode_is_flagged_on_a_fault() {
    let t = scenario("tf32_overflow", &[]).trace();
    let f = only_fault(&t);
    assert_eq!(f.kind, FaultKind::NonfiniteOutput);
    let h = f.handle.as_ref().unwrap();
    assert_eq!(h.math_mode, "CUBLAS_TF32_TENSOR_OP_MATH");
    assert!(h.reduced_precision);
    assert!(f.message.contains("TF32"), "{}", f.message);
}

#[test]
fn cublaslt_with_a_dead_handle_and_wild_descriptors_is_named_without_touching_them() {
    let bare = linear("dead_wild", "f32", false);
    let run = linear("dead_wild", "f32", true);
    assert_eq!(run.code(), Some(0), "{}", run.stderr());
    assert!(run.stdout().contains("wild matmul=1"), "{}", run.stdout());
    assert_eq!(bare.stdout(), run.stdout());
    let t = run.trace();
    let f = t.faults.iter().find(|f| f.api == "cublasLtMatmul").expect("the wild matmul's fault");
    assert_eq!(f.kind, FaultKind::InvalidHandle);
    assert!(f.message.contains("was destroyed by cublasLtDestroy"), "{}", f.message);
}

fn linear(case: &str, dtype: &str, guarded: bool) -> Run {
    let program = build_c("lt_linear", &["lt_linear.c"], false);
    let args = [case, dtype];
    run(Launch { guarded, ..Launch::new(&program, &args) })
}

#[test]
fn a_cublaslt_matmul_is_described_from_the_attributes_the_program_set_without_asking_cublaslt_for_them() {
    // The stand-in refuses every attribute query (CUDASHIM_LT_NO_QUERIES): the guard still
    // knows the layouts made by cublasLtMatrixLayoutCreate and the transpose, epilogue and bias
    // set by cublasLtMatmulDescSetAttribute, as the program gave them.
    let program = build_c("lt_linear", &["lt_linear.c"], false);
    let run = run(Launch { env: &[("CUDASHIM_LT_NO_QUERIES", "1")], ..Launch::new(&program, &["nan_input", "bf16"]) });
    let t = run.trace();
    let f = only_fault(&t);
    assert_eq!((f.api.as_str(), f.kind), ("cublasLtMatmul", FaultKind::NonfiniteInput), "{}", f.message);
    assert_eq!((f.args["m"].as_i64(), f.args["n"].as_i64(), f.args["k"].as_i64()), (Some(16), Some(32), Some(8)));
    assert_eq!((&f.args["transa"], &f.args["epilogue"]), (&"T".into(), &"CUBLASLT_EPILOGUE_BIAS".into()));
    assert!(f.operands.iter().any(|o| o.name == "bias" && o.rows == 16), "{:#?}", f.operands);
    assert_eq!(t.summary.calls.get("cublasLtMatmulDescSetAttribute"), Some(&4), "each attribute the program set passed the guard");
}

#[test]
fn cublaslt_linear_with_bias_is_transparent_when_clean() {
    for dtype in ["f32", "bf16"] {
        let bare = linear("clean", dtype, false);
        let guarded = linear("clean", dtype, true);
        assert!(bare.stdout().contains("matmul=0\nsync=0\nD "), "{}", bare.stdout());
        assert_eq!(bare.stdout(), guarded.stdout(), "{dtype}");
        let t = guarded.trace();
        assert!(t.faults.is_empty(), "{dtype}: {:#?}", t.faults);
        assert_eq!(t.summary.calls.get("cublasLtMatmul"), Some(&1));
        assert_eq!(t.summary.calls.get("cublasLtCreate"), Some(&1));
        assert!(t.environment.libraries.iter().any(|l| l.soname == "libcublasLt.so.12"));
    }
}

#[test]
fn cublaslt_faults_name_m_n_k_and_the_bias() {
    let t = linear("nan_input", "bf16", true).trace();
    let f = only_fault(&t);
    assert_eq!((f.api.as_str(), f.kind), ("cublasLtMatmul", FaultKind::NonfiniteInput));
    assert_eq!((f.args["m"].as_i64(), f.args["n"].as_i64(), f.args["k"].as_i64()), (Some(16), Some(32), Some(8)));
    assert_eq!(f.args["transa"], "T");
    assert_eq!(f.args["epilogue"], "CUBLASLT_EPILOGUE_BIAS");
    assert!(f.args.address("bias").is_some(), "{:?}", f.args);
    let b = f.operands.iter().find(|o| o.name == "B").unwrap();
    assert_eq!((b.dtype.as_str(), b.rows, b.cols), ("bf16", 8, 32));
    assert_eq!(b.first_nonfinite.map(|p| (p.row, p.col)), Some((2, 3)), "feature 2 of sample 3");
    assert!(f.operands.iter().any(|o| o.name == "bias" && o.rows == 16));
    assert!(f.operands.iter().any(|o| o.name == "D"));

    let t = linear("nan_bias", "f32", true).trace();
    let f = only_fault(&t);
    assert!(f.message.starts_with("operand bias (16 x 1"), "{}", f.message);

    let run = linear("width", "f32", true);
    assert!(run.stdout().contains("matmul=7"));
    let t = run.trace();
    let f = only_fault(&t);
    assert_eq!(f.kind, FaultKind::InvalidArgument);
    assert_eq!(f.message, "op(A) is 16 x 8 and op(B) is 12 x 32: k differs (8 vs 12)");

    let t = linear("bias_short", "f32", true).trace();
    let f = &t.faults[0];
    assert_eq!(f.kind, FaultKind::OutOfBounds);
    assert!(f.message.starts_with("operand bias (16 x 1") && f.message.contains("overruns it by 32 bytes"), "{}", f.message);

    let t = linear("workspace_short", "f32", true).trace();
    let f = &t.faults[0];
    assert_eq!(f.kind, FaultKind::OutOfBounds);
    assert!(f.message.starts_with("the workspace spans 1048576 bytes"), "{}", f.message);
    assert_eq!(f.args["workspaceSizeInBytes"], 1048576);

    let t = linear("overflow", "f32", true).trace();
    let f = only_fault(&t);
    assert_eq!(f.kind, FaultKind::NonfiniteOutput);
    assert!(f.message.contains("operand D"), "{}", f.message);
}

#[test]
fn a_cublaslt_handle_destroyed_twice_is_named() {
    let run = linear("double_destroy", "f32", true);
    assert!(run.stdout().contains("destroy again=1"), "{}", run.stdout());
    let t = run.trace();
    let f = only_fault(&t);
    assert_eq!((f.api.as_str(), f.kind), ("cublasLtDestroy", FaultKind::InvalidHandle));
    assert!(f.message.contains("was destroyed by cublasLtDestroy at call #"), "{}", f.message);
    assert!(f.args.address("handle").is_some(), "{:?}", f.args);
}

#[test]
fn the_report_recognises_a_linear_layer_in_cublaslt() {
    let run = linear("nan_input", "f32", true);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_cublasguard")).args(["report", &run.trace_path.display().to_string()]).output().unwrap();
    let body = String::from_utf8_lossy(&out.stdout);
    assert!(body.contains("looks like nn.Linear(in_features=8, out_features=16) on a batch of 32"), "{body}");
    assert!(body.contains("epilogue=CUBLASLT_EPILOGUE_BIAS"), "{body}");
}

/// What a run told: the program's output, the calls recorded with their arguments, the faults
/// (addresses left out: they differ from run to run).
fn told_by(run: &Run) -> (String, Vec<String>, Vec<String>) {
    let t = run.trace();
    let calls = t
        .recent_calls
        .iter()
        .map(|c| format!("#{} {} {} {:?}", c.seq, c.api, c.status, c.args))
        .map(|c| c.split("Address(").map(|p| p.trim_start_matches(|ch: char| ch.is_ascii_digit())).collect::<Vec<_>>().join("Address("))
        .collect();
    let faults = t.faults.iter().map(|f| format!("#{} {} {:?} {}", f.seq, f.api, f.kind, without_addresses(&f.message))).collect();
    (run.stdout(), calls, faults)
}

#[test]
fn with_only_args_and_bounds_every_gemm_form_is_recorded_and_judged_as_its_handler_would() {
    // The hook layer's lean path (issue 44, point 3) takes a call that `args` and `bounds`
    // vouch for without its handler. Operand dumps keep every call on the handler's path, so
    // the same run with them on is the reference: the same calls recorded with the same
    // arguments, the same faults on the same calls.
    let program = build_c("gemm_family", &["gemm_family.c"], false);
    for (function, _) in VARIANTS {
        for case in ["clean", "invalid", "oob", "types"] {
            if case == "types" && !function.contains("Ex") {
                continue;
            }
            let told = |dumps: bool| {
                let mut env = vec![("CUBLASGUARD_CHECKS", "args,bounds")];
                if dumps {
                    env.push(("CUBLASGUARD_DUMP", "dumps"));
                }
                told_by(&run(Launch { env: &env, ..Launch::new(&program, &[*function, case]) }))
            };
            let (lean, handler) = (told(false), told(true));
            assert!(case == "clean" || !handler.2.is_empty(), "{function} {case}: the handler names it");
            assert_eq!(lean, handler, "{function} {case}");
        }
    }
}

#[test]
fn a_cublaslt_matmul_on_the_lean_path_is_recorded_and_judged_as_its_handler_would() {
    // cublasLtMatmul's lean path (issue 44, point 3) reads its descriptors from the guard's
    // table (a thread's memo of them, on its second call) and, with `args` and `bounds`,
    // vouches for the call without its handler; the descriptor calls' lean path keeps that
    // table in every mode. LT_LINEAR_WARM makes a clean matmul first
    // (the lean path waits for the session's first) and the case's matmul twice. Operand dumps
    // keep every call on the handler's path: the reference.
    let program = build_c("lt_linear", &["lt_linear.c"], false);
    let cases = ["clean", "width", "bias_short", "workspace_short", "c_null", "c_null_beta", "c_null_d_short", "dead_wild"];
    for checks in ["none", "args,bounds"] {
        for case in cases {
            let told = |dumps: bool| {
                // The stand-in's synchronous model: a fault the guard lets through (checks
                // off) is on the device when the next call comes, whichever path was faster.
                // CUDASHIM_LT_NO_QUERIES: the stand-in answers no attribute query, so the matmul
                // is described only from what the descriptor calls' lean path kept.
                let mut env = vec![("CUBLASGUARD_CHECKS", checks), ("LT_LINEAR_WARM", "1"), ("CUDASHIM_SYNC", "1"), ("CUDASHIM_LT_NO_QUERIES", "1")];
                if dumps {
                    env.push(("CUBLASGUARD_DUMP", "dumps"));
                }
                told_by(&run(Launch { env: &env, ..Launch::new(&program, &[case, "f32"]) }))
            };
            let (lean, handler) = (told(false), told(true));
            assert!(lean.0.contains("warm matmul=0"), "{checks} {case}: {}", lean.0);
            let matmuls = lean.1.iter().filter(|c| c.contains(" cublasLtMatmul ")).count();
            assert_eq!(matmuls, if case == "dead_wild" { 4 } else { 3 }, "{checks} {case}: {:#?}", lean.1);
            if checks == "args,bounds" && case != "clean" && case != "c_null" {
                assert!(!handler.2.is_empty(), "{checks} {case}: the handler names it");
            }
            if checks != "none" && handler.2.iter().any(|f| f.contains("AsyncError")) {
                // The device faults (an overrun, a NULL C read); the reference's dump of the
                // faulting call reads the device after it, which the stand-in answers by failing
                // the next call: the guard's findings are compared, not the program's statuses.
                assert_eq!(lean.2, handler.2, "{checks} {case}");
            } else {
                assert_eq!(lean, handler, "{checks} {case}");
            }
        }
    }
}
