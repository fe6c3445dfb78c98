//! The cuBLAS functions beyond GEMM that PyTorch imports (matrix-vector and dot products,
//! complex GEMMs, cublasSgemmEx, triangular solves, batched LU/QR/least squares and
//! cublasSetWorkspace), on the stand-in stack, which computes them for real: a clean call gives
//! the same (correct) results with and without the guard, and a NaN input, an invalid argument
//! and an operand out of bounds are each named, with the operand as NVIDIA's headers name it.

use crate::common;

use common::*;
use cublasguard_format::trace::FaultKind;

/// A function, the operand its NaN case poisons (and where), the operand its out-of-bounds case
/// shortens, what its invalid case breaks, and whether its operands are batches of 3.
struct Case {
    function: &'static str,
    nan: (&'static str, &'static str),
    oob: &'static str,
    invalid: &'static str,
    batched: bool,
}

const fn case(function: &'static str, nan: (&'static str, &'static str), oob: &'static str, invalid: &'static str, batched: bool) -> Case {
    Case { function, nan, oob, invalid, batched }
}

const GEMV_NAN: (&str, &str) = ("x", "(first at element 2)");
const DOT_NAN: (&str, &str) = ("y", "(first at element 3)");
const MATRIX_NAN: (&str, &str) = ("A", "(first at row 1, col 2)");
const LDA: &str = "lda = 1 but";
const NULL_RESULT: &str = "result is NULL";

const CASES: &[Case] = &[
    case("cublasSgemv_v2", GEMV_NAN, "x", LDA, false),
    case("cublasDgemv_v2", GEMV_NAN, "x", LDA, false),
    case("cublasCgemv_v2", GEMV_NAN, "x", LDA, false),
    case("cublasZgemv_v2", GEMV_NAN, "x", LDA, false),
    case("cublasSgbmv_v2", GEMV_NAN, "x", LDA, false),
    case("cublasDgbmv_v2", GEMV_NAN, "x", LDA, false),
    case("cublasCgbmv_v2", GEMV_NAN, "x", LDA, false),
    case("cublasZgbmv_v2", GEMV_NAN, "x", LDA, false),
    case("cublasSdot_v2", DOT_NAN, "y", NULL_RESULT, false),
    case("cublasDdot_v2", DOT_NAN, "y", NULL_RESULT, false),
    case("cublasCdotu_v2", DOT_NAN, "y", NULL_RESULT, false),
    case("cublasCdotc_v2", DOT_NAN, "y", NULL_RESULT, false),
    case("cublasZdotu_v2", DOT_NAN, "y", NULL_RESULT, false),
    case("cublasZdotc_v2", DOT_NAN, "y", NULL_RESULT, false),
    case("cublasDotEx", DOT_NAN, "y", NULL_RESULT, false),
    case("cublasCgemm_v2", MATRIX_NAN, "B", LDA, false),
    case("cublasZgemm_v2", MATRIX_NAN, "B", LDA, false),
    case("cublasCgemmStridedBatched", MATRIX_NAN, "B", LDA, true),
    case("cublasZgemmStridedBatched", MATRIX_NAN, "B", LDA, true),
    case("cublasSgemmEx", MATRIX_NAN, "B", LDA, false),
    case("cublasStrsm_v2", ("B", "(first at row 1, col 2)"), "B", "side = left: lda must be >= max(1, m)", false),
    case("cublasDtrsm_v2", ("B", "(first at row 1, col 2)"), "B", "side = left: lda must be >= max(1, m)", false),
    case("cublasCtrsm_v2", ("B", "(first at row 1, col 2)"), "B", "side = left: lda must be >= max(1, m)", false),
    case("cublasZtrsm_v2", ("B", "(first at row 1, col 2)"), "B", "side = left: lda must be >= max(1, m)", false),
    case("cublasStrsmBatched", ("B", "(first at row 1, col 2)"), "B", LDA, true),
    case("cublasDtrsmBatched", ("B", "(first at row 1, col 2)"), "B", LDA, true),
    case("cublasCtrsmBatched", ("B", "(first at row 1, col 2)"), "B", LDA, true),
    case("cublasZtrsmBatched", ("B", "(first at row 1, col 2)"), "B", LDA, true),
    case("cublasSgetrfBatched", ("Aarray", "(first at row 1, col 2)"), "Aarray", LDA, true),
    case("cublasDgetrfBatched", ("Aarray", "(first at row 1, col 2)"), "Aarray", LDA, true),
    case("cublasCgetrfBatched", ("Aarray", "(first at row 1, col 2)"), "Aarray", LDA, true),
    case("cublasZgetrfBatched", ("Aarray", "(first at row 1, col 2)"), "Aarray", LDA, true),
    case("cublasSgetrsBatched", ("Barray", "(first at row 1, col 1)"), "Barray", "ldb = 1 but", true),
    case("cublasDgetrsBatched", ("Barray", "(first at row 1, col 1)"), "Barray", "ldb = 1 but", true),
    case("cublasCgetrsBatched", ("Barray", "(first at row 1, col 1)"), "Barray", "ldb = 1 but", true),
    case("cublasZgetrsBatched", ("Barray", "(first at row 1, col 1)"), "Barray", "ldb = 1 but", true),
    case("cublasSgeqrfBatched", ("Aarray", "(first at row 1, col 2)"), "TauArray", LDA, true),
    case("cublasDgeqrfBatched", ("Aarray", "(first at row 1, col 2)"), "TauArray", LDA, true),
    case("cublasCgeqrfBatched", ("Aarray", "(first at row 1, col 2)"), "TauArray", LDA, true),
    case("cublasZgeqrfBatched", ("Aarray", "(first at row 1, col 2)"), "TauArray", LDA, true),
    case("cublasSgelsBatched", ("Carray", "(first at row 1, col 1)"), "Carray", LDA, true),
    case("cublasDgelsBatched", ("Carray", "(first at row 1, col 1)"), "Carray", LDA, true),
    case("cublasCgelsBatched", ("Carray", "(first at row 1, col 1)"), "Carray", LDA, true),
    case("cublasZgelsBatched", ("Carray", "(first at row 1, col 1)"), "Carray", LDA, true),
];

fn family(function: &str, case: &str, guarded: bool) -> Run {
    run_c("blas_family", &[function, case], guarded)
}

#[test]
fn clean_calls_compute_the_right_answer_with_and_without_the_guard() {
    for c in CASES {
        let bare = family(c.function, "clean", false);
        let guarded = family(c.function, "clean", true);
        assert!(bare.stdout().contains("status=0\nsync=0\n") && bare.stdout().contains("check=ok"), "{}: {}", c.function, bare.stdout());
        assert_eq!(bare.stdout(), guarded.stdout(), "{}", c.function);
        let t = guarded.trace();
        assert!(t.faults.is_empty(), "{}: {:#?}", c.function, t.faults);
        assert_eq!(t.summary.calls.get(c.function), Some(&1), "{} was intercepted", c.function);
    }
}

#[test]
fn nan_inputs_are_named_by_operand_and_position() {
    for c in CASES {
        let t = family(c.function, "nan", true).trace();
        let f = the_fault(&t, c.function, "nan");
        assert_eq!(f.kind, FaultKind::NonfiniteInput, "{}: {}", c.function, f.message);
        let (operand, position) = c.nan;
        assert!(f.message.starts_with(&format!("operand {operand} (")), "{}: {}", c.function, f.message);
        assert!(f.message.contains(position), "{}: {}", c.function, f.message);
        let o = f.operands.iter().find(|o| o.name == operand).unwrap_or_else(|| panic!("{}: no operand {operand}", c.function));
        assert_eq!(o.nan, Some(1), "{}", c.function);
        if c.batched {
            assert_eq!(o.bad_member, Some(2), "{}: the last of 3 members", c.function);
        }
    }
}

#[test]
fn invalid_arguments_name_the_rule_and_the_library_refuses_them_too() {
    for c in CASES {
        let run = family(c.function, "invalid", true);
        assert!(run.stdout().contains("status=7"), "{}: {}", c.function, run.stdout());
        let t = run.trace();
        let f = the_fault(&t, c.function, "invalid");
        assert_eq!(f.kind, FaultKind::InvalidArgument, "{}", c.function);
        assert!(f.message.contains(c.invalid), "{}: {}", c.function, f.message);
    }
}

#[test]
fn operands_out_of_bounds_are_named_before_the_kernel_faults() {
    for c in CASES {
        let bare = family(c.function, "oob", false);
        let guarded = family(c.function, "oob", true);
        assert_eq!(bare.stdout(), guarded.stdout(), "{}", c.function);
        let t = guarded.trace();
        let f = the_fault(&t, c.function, "oob");
        assert_eq!(f.kind, FaultKind::OutOfBounds, "{}: {}", c.function, f.message);
        assert!(f.message.starts_with(&format!("operand {} (", c.oob)), "{}: {}", c.function, f.message);
        if c.batched {
            assert!(f.message.contains("batch member 2 of 3"), "{}: {}", c.function, f.message);
        }
        assert_eq!(f.error.as_ref().map(|e| e.code), Some(700), "{}: the illegal address the guard's sync saw", c.function);
    }
}

#[test]
fn recorded_arguments_carry_each_familys_own_names() {
    let t = family("cublasStrsmBatched", "invalid", true).trace();
    let f = the_fault(&t, "cublasStrsmBatched", "invalid");
    assert_eq!((f.args["side"].as_str(), f.args["uplo"].as_str(), f.args["diag"].as_str()), (Some("left"), Some("lower"), Some("non-unit")));
    assert_eq!((f.args["lda"].as_i64(), f.args["batchCount"].as_i64()), (Some(1), Some(3)));
    let t = family("cublasZgelsBatched", "nan", true).trace();
    let f = the_fault(&t, "cublasZgelsBatched", "nan");
    assert_eq!((f.args["trans"].as_str(), f.args["nrhs"].as_i64(), f.args["batchSize"].as_i64()), (Some("N"), Some(2), Some(3)));
    let c = f.operands.iter().find(|o| o.name == "Carray").expect("Carray");
    assert_eq!(c.dtype, "c64");
    assert!(c.pointer_array);
    let t = family("cublasSgemv_v2", "nan", true).trace();
    let f = the_fault(&t, "cublasSgemv_v2", "nan");
    assert_eq!((f.args["incx"].as_i64(), f.args["trans"].as_str()), (Some(2), Some("N")));
    assert!(f.message.contains("operand x (4 elements, increment 2)"), "{}", f.message);
    // A declared line (gbmv's): every int argument by its header name, the enum labelled.
    let t = family("cublasDgbmv_v2", "nan", true).trace();
    let f = the_fault(&t, "cublasDgbmv_v2", "nan");
    let ints: Vec<_> = ["m", "n", "kl", "ku", "lda", "incx", "incy"].iter().map(|n| f.args[*n].as_i64()).collect();
    assert_eq!(ints, [4, 4, 1, 2, 4, 2, 1].map(Some), "{:?}", f.args);
    assert_eq!(f.args["trans"].as_str(), Some("N"));
    let a = f.operands.iter().find(|o| o.name == "A").expect("A");
    assert_eq!((a.rows, a.cols, a.ld, a.dtype.as_str()), (4, 4, 4, "f64"), "the band as stored: kl + ku + 1 rows");
}

#[test]
fn a_nan_a_solve_or_a_product_makes_from_finite_inputs_is_blamed_on_it() {
    for (function, operand) in [("cublasSgemv_v2", "y"), ("cublasZgemv_v2", "y"), ("cublasStrsm_v2", "B"), ("cublasCtrsmBatched", "B")] {
        let t = family(function, "produced", true).trace();
        let f = the_fault(&t, function, "produced");
        assert_eq!(f.kind, FaultKind::NonfiniteOutput, "{function}: {}", f.message);
        assert!(f.message.contains(&format!("in its output operand {operand} (")), "{function}: {}", f.message);
    }
}

#[test]
fn a_dot_product_result_is_checked_where_the_pointer_mode_puts_it() {
    for function in ["cublasSdot_v2", "cublasZdotc_v2", "cublasDotEx"] {
        // DEVICE mode with a device result: clean, the same answer.
        let bare = family(function, "device_result", false);
        let guarded = family(function, "device_result", true);
        assert!(bare.stdout().contains("check=ok"), "{function}: {}", bare.stdout());
        assert_eq!(bare.stdout(), guarded.stdout(), "{function}");
        assert!(guarded.trace().faults.is_empty(), "{function}: {:#?}", guarded.trace().faults);
        // HOST mode with a device result: the library would write through it on the host.
        let t = family(function, "result_on_device", true).trace();
        let f = t.faults.iter().find(|f| f.api == function).unwrap_or_else(|| panic!("{function}: {:#?}", t.faults));
        assert_eq!(f.kind, FaultKind::InvalidArgument, "{function}: {}", f.message);
        assert!(f.message.starts_with("result (0x") && f.message.contains("pointer mode is HOST"), "{function}: {}", f.message);
    }
}

#[test]
fn a_workspace_set_on_the_handle_is_checked_at_every_call_that_uses_it() {
    let clean = family("cublasSetWorkspace_v2", "clean", true);
    assert!(clean.stdout().contains("status=0\nsync=0\nC "), "{}", clean.stdout());
    let t = clean.trace();
    assert!(t.faults.is_empty(), "{:#?}", t.faults);
    assert_eq!(t.summary.calls.get("cublasSetWorkspace_v2"), Some(&1));

    let t = family("cublasSetWorkspace_v2", "freed", true).trace();
    let f = the_fault(&t, "cublasSgemm_v2", "freed");
    assert_eq!(f.kind, FaultKind::UseAfterFree, "{}", f.message);
    assert!(f.message.starts_with("operand workspace ("), "{}", f.message);
    assert_eq!(f.freed_by.as_ref().map(|b| b.api.as_str()), Some("cudaFree"));

    let t = family("cublasSetWorkspace_v2", "short", true).trace();
    let f = the_fault(&t, "cublasSgemm_v2", "short");
    assert_eq!(f.kind, FaultKind::OutOfBounds, "{}", f.message);
    assert!(f.message.starts_with("the workspace spans 8192 bytes") && f.message.contains("overruns it by 4096 bytes"), "{}", f.message);
}

#[test]
fn a_nan_in_the_triangle_a_solve_does_not_read_is_not_a_fault() {
    for function in ["cublasStrsm_v2", "cublasZtrsm_v2", "cublasDtrsmBatched"] {
        let bare = family(function, "nan_unread", false);
        let guarded = family(function, "nan_unread", true);
        assert!(bare.stdout().contains("check=ok"), "{function}: the library never reads it: {}", bare.stdout());
        assert_eq!(bare.stdout(), guarded.stdout(), "{function}");
        let t = guarded.trace();
        assert!(t.faults.is_empty(), "{function}: {:#?}", t.faults);
    }
}
