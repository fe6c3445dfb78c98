//! The stand-in CUDA stack behaves like NVIDIA's at the edges the guard cares about.

use crate::common;

use common::*;
use std::process::Command;

fn check(args: &[&str], env: &[(&str, &str)], driver: bool) -> Run {
    let program = build_c("standin_check", &["standin_check.c"], false);
    let run = run(Launch { env, driver, guarded: false, ..Launch::new(&program, args) });
    assert!(run.output.status.success(), "stand-in checks failed:\n{}{}", run.stdout(), run.stderr());
    run
}

#[test]
fn runtime_memory_errors_handles_and_gemm_semantics() {
    let run = check(&[], &[("CUDASHIM_MEM_TOTAL", "1048576")], true);
    let out = run.stdout();
    for name in [
        "meminfo_in_use",
        "attr_device",
        "attr_host",
        "memcpy_overrun",
        "last_error_get_clears",
        "last_error_peek_keeps",
        "malloc_over_limit",
        "free_twice",
        "use_after_destroy",
        "math_mode",
        "sgemm_nn_values",
        "sgemm_tt_values_beta",
        "beta0_does_not_read_c",
        "sgemm_device_scalars_values",
        "rule_handle_first",
        "rule_lda_t",
        "rule_beta",
        "bad_operand_returns_success",
        "sticky_at_sync",
        "sticky_everywhere",
        "sticky_not_cleared",
        "sticky_gemm_fails",
        "versioned_cudart",
        "versioned_cublas",
        "capture_sync_illegal",
        "capture_invalidated",
    ] {
        assert!(out.contains(&format!("ok {name}\n")), "missing check {name}:\n{out}");
    }
    assert!(out.contains("0 failures"));
}

#[test]
fn no_driver_when_libcuda_is_absent_or_disabled() {
    let out = check(&["no_driver"], &[], false).stdout();
    assert!(out.contains("ok no_driver_count") && out.contains("ok no_driver_cublas"), "{out}");
    let out = check(&["no_driver"], &[("CUDASHIM_NO_DRIVER", "1")], true).stdout();
    assert!(out.contains("ok no_driver_malloc"), "{out}");
}

#[test]
fn old_driver_and_no_device() {
    check(&["old_driver"], &[("CUDASHIM_DRIVER_VERSION", "11080")], true);
    check(&["no_device"], &[("CUDASHIM_DEVICE_COUNT", "0")], true);
}

#[test]
fn fault_injection_fails_the_nth_call_and_faults_asynchronously() {
    check(&["fail_nth"], &[("CUDASHIM_FAIL", "cudaMalloc:2:2")], true);
    check(&["async"], &[("CUDASHIM_ASYNC_FAULT", "2")], true);
}

#[test]
fn a_forked_child_of_a_process_that_started_cuda_cannot_use_it() {
    let run = check(&["fork"], &[], true);
    for name in ["fork_before_cuda_works", "fork_child_cannot_use_cuda", "fork_parent_unaffected"] {
        assert!(run.stdout().contains(&format!("ok {name}")), "{name}: {}", run.stdout());
    }
}

fn readelf(args: &[&str], lib: &std::path::Path) -> String {
    let out = Command::new("readelf").args(args).arg(lib).output().expect("readelf (binutils) is installed with the C compiler");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn libraries_carry_nvidia_sonames_and_symbol_versions() {
    let s = standin();
    for (path, soname) in [
        (s.join("lib/libcudart.so.12"), "libcudart.so.12"),
        (s.join("lib/libcublas.so.12"), "libcublas.so.12"),
        (s.join("lib/libcublasLt.so.12"), "libcublasLt.so.12"),
        (s.join("driver/libcuda.so.1"), "libcuda.so.1"),
        // What CuPy 12 links besides (shims/stubs.h).
        (s.join("lib/libcufft.so.11"), "libcufft.so.11"),
        (s.join("lib/libcurand.so.10"), "libcurand.so.10"),
        (s.join("lib/libcusparse.so.12"), "libcusparse.so.12"),
        (s.join("lib/libnvrtc.so.12"), "libnvrtc.so.12"),
        (s.join("lib/libcusolver.so.11"), "libcusolver.so.11"),
    ] {
        let dynamic = readelf(&["-d", "-W"], &path);
        assert!(dynamic.contains(&format!("Library soname: [{soname}]")), "{}: {dynamic}", path.display());
        let symbols = readelf(&["--dyn-syms", "-W"], &path);
        let defined: Vec<&str> = symbols.lines().filter(|l| l.contains(" FUNC ") && l.contains(" GLOBAL ") && !l.contains(" UND ")).collect();
        assert!(defined.len() >= 3, "{symbols}");
        for line in defined {
            assert!(line.contains(&format!("@@{soname}")), "unversioned export in {}: {line}", path.display());
        }
    }
}

#[test]
fn cublas_does_not_import_the_public_runtime() {
    // NVIDIA's libcublas carries its own static runtime; ours reaches the stand-in runtime
    // only through private cudashim_* functions, so runtime hooks never see cuBLAS's work.
    for lib in ["lib/libcublas.so.12", "lib/libcublasLt.so.12"] {
        let symbols = readelf(&["--dyn-syms", "-W"], &standin().join(lib));
        let imported_cuda: Vec<&str> = symbols.lines().filter(|l| l.contains(" UND ") && l.contains(" cuda") && !l.contains(" cudashim_")).collect();
        assert!(imported_cuda.is_empty(), "{lib}: {imported_cuda:?}");
    }
}

#[test]
fn example_workload_trains() {
    let mlp = standin().join("bin/mlp");
    let run = run(Launch { guarded: false, ..Launch::new(&mlp, &[]) });
    assert!(run.output.status.success(), "{}", run.stderr());
    let out = run.stdout();
    assert!(out.starts_with("epoch 1 loss ") && out.ends_with("done\n"), "{out}");
    let losses: Vec<f64> = out.lines().filter_map(|l| l.rsplit(' ').next()?.parse().ok()).collect();
    assert!(losses.len() == 5 && losses[4] < losses[0], "loss should fall: {losses:?}");
}

/// The stand-in's exported driver functions (`cu` and a capital: not its private `cudashim_*`).
fn exported_driver_functions() -> Vec<String> {
    let lib = standin().join("driver/libcuda.so.1");
    dynamic_symbols(&lib, false).into_iter().filter(|s| s.starts_with("cu") && s[2..].starts_with(|c: char| c.is_ascii_uppercase())).collect()
}

#[test]
fn cu_get_proc_address_hands_out_every_driver_function_the_stand_in_exports() {
    // A client that finds the driver through cuGetProcAddress (cuda-bindings, a static runtime)
    // must reach all of it: the table and the exports cannot drift apart.
    let exports = exported_driver_functions();
    assert!(exports.len() > 100 && exports.iter().any(|s| s == "cuMemAlloc_v2"), "{exports:?}");
    let program = build_c("proc_table", &["proc_table.c"], false);
    let args: Vec<&str> = exports.iter().map(String::as_str).collect();
    let run = run(Launch { guarded: false, ..Launch::new(&program, &args) });
    assert!(run.output.status.success(), "{}{}", run.stdout(), run.stderr());
    assert_eq!(run.stdout(), format!("checked {}\n", exports.len()), "exported but not handed out");
}

#[test]
fn the_driver_calls_nvmath_makes_answer_as_nvidias_driver_does() {
    let program = build_c("proc_table", &["proc_table.c"], false);
    let run = run(Launch { guarded: false, ..Launch::new(&program, &["--nvmath-calls"]) });
    assert!(run.output.status.success(), "{}{}", run.stdout(), run.stderr());
    let expected = "error_name 0\nerror_name_text CUDA_ERROR_ILLEGAL_ADDRESS\nerror_name_unknown 1\nerror_string_unknown_null 1\n\
        pools_supported_status 0\npools_supported 1\nretain 0\nactive_after_retain 1\nset_current 0\nset_current_bogus 201\n\
        get_current 0\ncurrent_is_primary 1\npop_after_set 0\npop_empty 201\npush 0\npop 0\nstream_ctx_v2 0\nstream_ctx_green_null 1\n\
        is_capturing 0\ncapture_status 0\nrelease 0\nactive_after_release 0\nrelease_unretained 201\ndefault_pool 0\n\
        pool_set 0\npool_get 0\npool_threshold 1048576\npool_alloc 0\nmemcpy_htod 0\nmemcpy_dtoh 0\nmemcpy_round_trip 1\n\
        memcpy_overrun 1\n";
    assert_eq!(run.stdout(), expected);
}
