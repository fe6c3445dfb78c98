//! cuDNN (issue 33): its failing calls named with their cause, its backend execute checked, on
//! the stand-in cuDNN 9 (shims/cudnn.c: a dispatcher that loads its sublibraries as NVIDIA's
//! does) and on NVIDIA's own cuDNN 9.26 without a GPU (the wheel PyTorch 2.15 pins,
//! nvidia-cudnn-cu13 9.26.0.51, installed with it by scripts/fetch-torch.sh; these tests need
//! that environment as tests/suite/pytorch.rs does). tests/c/cudnn_program.c is the program,
//! built against the stand-in's cudnn.h.

use crate::common;

use common::*;
use cublasguard_format::trace::{Arg, Fault, FaultKind, InitCause, InitCauseKind, Trace};
use std::path::{Path, PathBuf};
use std::process::Command;

/// cudnn_program.c, linked to libcudnn.so.9 by soname (the stand-in's at build time).
fn program() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("programs");
            std::fs::create_dir_all(&dir).expect("programs dir");
            let out = dir.join(format!("cudnn_program-{}", std::process::id()));
            let s = standin();
            let status = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
                .args(["-O1", "-g", "-Wall", "-Werror", "-o"])
                .arg(&out)
                .arg(manifest_dir().join("tests/c/cudnn_program.c"))
                .arg(format!("-I{}", s.join("include").display()))
                .arg(format!("-L{}", s.join("lib").display()))
                .arg(format!("-L{}", s.join("cudnn").display()))
                .args(["-l:libcudnn.so.9", "-lcudart"])
                .status()
                .expect("run the C compiler");
            assert!(status.success(), "compiling cudnn_program.c failed");
            out
        })
        .clone()
}

/// A folder of the stand-in cuDNN's files as a test wants them: `leave_out` missing, `swap`
/// taken from cudnn-9.1/ (another version). Copies, not links: the dispatcher's $ORIGIN is
/// the folder it was loaded from.
fn cudnn_folder(label: &str, leave_out: &[&str], swap: &[&str]) -> PathBuf {
    cudnn_folder_of("cudnn", label, leave_out, swap)
}

/// `cudnn_folder` of the stand-in's `release` folder: cudnn/ (9.26.0, with ext) or cudnn-9.10/
/// (9.10.2, laid out as NVIDIA's 9.10.2 wheel: no ext).
fn cudnn_folder_of(release: &str, label: &str, leave_out: &[&str], swap: &[&str]) -> PathBuf {
    let dir = temp_dir(label).join("cudnn");
    std::fs::create_dir_all(&dir).expect("cudnn folder");
    for entry in std::fs::read_dir(standin().join(release)).expect("stand-in cudnn").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if leave_out.contains(&name.as_str()) {
            continue;
        }
        let from = if swap.contains(&name.as_str()) { standin().join("cudnn-9.1").join(&name) } else { entry.path() };
        std::fs::copy(from, dir.join(&name)).expect("copy a stand-in cuDNN library");
    }
    dir
}

/// Runs the program on the stand-in CUDA stack with `cudnn` (a folder) on the library path
/// (unless `env` sets the path itself).
fn run_with(cudnn: &Path, args: &[&str], env: &[(&str, &str)], guarded: bool) -> Run {
    let s = standin();
    let libpath = format!("{}:{}:{}", s.join("lib").display(), s.join("driver").display(), cudnn.display());
    let mut env: Vec<(&str, &str)> = env.to_vec();
    if !env.iter().any(|(k, _)| *k == "LD_LIBRARY_PATH") {
        env.push(("LD_LIBRARY_PATH", &libpath));
    }
    let program = program();
    run(Launch { env: &env, guarded, ..Launch::new(&program, args) })
}

/// Bare and guarded: the program sees the same; the guarded run's trace.
fn both(cudnn: &Path, case: &str, env: &[(&str, &str)]) -> (Run, Trace) {
    let bare = run_with(cudnn, &[case], env, false);
    let guarded = run_with(cudnn, &[case], env, true);
    assert_eq!(bare.stdout(), guarded.stdout(), "{case}: the program sees the same guarded\n{}", guarded.stderr());
    assert_eq!(bare.code(), guarded.code(), "{case}");
    let t = guarded.trace();
    (guarded, t)
}

fn standin_cudnn() -> PathBuf {
    standin().join("cudnn")
}

#[test]
fn a_backend_convolution_computes_the_same_guarded_with_no_fault() {
    let (run, t) = both(&standin_cudnn(), "conv", &[]);
    assert!(run.stdout().contains("y = 5 7 9 13 15 17 21 23 25"), "{}", run.stdout());
    assert!(t.faults.is_empty(), "{:#?}", t.faults);
    let execute = t.recent_calls.iter().find(|c| c.api == "cudnnBackendExecute").expect("the execute, recorded");
    let stream = execute.args.get("stream").and_then(Arg::as_address).expect("its stream");
    assert_ne!(stream, 0, "cudnnSetStream's stream, recorded with the handle: {:?}", execute.args);
    assert!(execute.args.get("variantPack").is_some() && execute.args.get("executionPlan").is_some(), "{:?}", execute.args);
}

#[test]
fn an_input_freed_before_the_execute_is_use_after_free_naming_the_free() {
    let (_, t) = both(&standin_cudnn(), "freed", &[]);
    let f = t.faults.iter().find(|f| f.api == "cudnnBackendExecute").expect("the execute's fault");
    assert_eq!(f.kind, FaultKind::UseAfterFree, "{}", f.message);
    assert!(f.message.contains("tensor uid 120") && f.message.contains("released by cudaFree"), "{}", f.message);
    let freed = f.freed_by.as_ref().expect("the free");
    assert_eq!(freed.api, "cudaFree");
    assert!(f.stream.as_deref().is_some_and(|s| s != "0x0"), "{:?}", f.stream);
}

#[test]
fn a_workspace_smaller_than_the_plans_is_out_of_bounds_and_a_missing_one_is_named() {
    let (_, t) = both(&standin_cudnn(), "small_workspace", &[]);
    let f = t.faults.iter().find(|f| f.api == "cudnnBackendExecute").expect("the execute's fault");
    assert_eq!(f.kind, FaultKind::OutOfBounds, "{}", f.message);
    assert!(f.message.contains("must hold 256 bytes") && f.message.contains("128 bytes short"), "{}", f.message);
    let (_, t) = both(&standin_cudnn(), "no_workspace", &[]);
    let f = t.faults.iter().find(|f| f.api == "cudnnBackendExecute").expect("the execute's fault");
    assert_eq!(f.kind, FaultKind::InvalidArgument, "{}", f.message);
    assert!(f.message.contains("workspace is NULL, but the execution plan needs 256 bytes"), "{}", f.message);
}

#[test]
fn an_execute_on_a_destroyed_handle_is_invalid_handle_before_it_runs() {
    let (_, t) = both(&standin_cudnn(), "destroyed", &[]);
    let f = only_fault(&t);
    assert_eq!((f.api.as_str(), f.kind), ("cudnnBackendExecute", FaultKind::InvalidHandle), "{}", f.message);
    assert!(f.message.contains("destroyed by cudnnDestroy at call #"), "{}", f.message);
    assert_eq!(f.status_name, "CUDNN_STATUS_BAD_PARAM");
}

#[test]
fn an_execution_failure_names_its_status_sub_code_message_and_the_cuda_error_pending_behind_it() {
    // gemm mode: the guard's synchronisation finds the error pending behind the execute (under
    // deferred the first execute's breadcrumb pins it: the next test).
    let (run, t) = both(&standin_cudnn(), "exec_twice", &[("CUDASHIM_CUDNN_EXEC_FAULT", "1"), ("CUBLASGUARD_SYNC", "gemm")]);
    // The guard read cuDNN's message for its fault; the program still gets it.
    assert!(run.stdout().contains("execute again=5003 message=\"cudaLaunchKernel failed"), "{}", run.stdout());
    let f = t.faults.iter().find(|f| f.api == "cudnnBackendExecute").expect("the second execute's fault");
    assert_eq!((f.kind, f.status, f.status_name.as_str()), (FaultKind::ApiError, 5003, "CUDNN_STATUS_EXECUTION_FAILED_CUDART"));
    assert_eq!(f.args.get("sub_code").and_then(Arg::as_i64), Some(3));
    assert_eq!(f.args.get("category").and_then(Arg::as_i64), Some(5000));
    assert!(f.args.get("cudnn_message").is_some_and(|m| matches!(m, Arg::Label(s) if s.contains("broke the context"))), "{:?}", f.args);
    let pending = f.error.as_ref().expect("the CUDA error behind it");
    assert_eq!((pending.code, pending.call.as_str()), (700, "cudaStreamSynchronize"));
    assert!(f.message.contains("cudaErrorIllegalAddress (700) was pending on stream"), "{}", f.message);
}

#[test]
fn under_deferred_sync_a_faulting_execute_is_pinned_by_its_breadcrumb_when_the_next_one_fails() {
    let env = [("CUDASHIM_CUDNN_EXEC_FAULT", "1"), ("CUBLASGUARD_SYNC", "deferred")];
    let (run, t) = both(&standin_cudnn(), "exec_twice", &env);
    assert!(run.stdout().contains("execute again=5003"), "{}", run.stdout());
    let executes: Vec<u64> = t.recent_calls.iter().filter(|c| c.api == "cudnnBackendExecute").map(|c| c.seq).collect();
    assert_eq!(executes.len(), 2, "{:?}", t.recent_calls.iter().map(|c| &c.api).collect::<Vec<_>>());
    let pinned = t.faults.iter().find(|f| f.kind == FaultKind::AsyncError).expect("the kernel's fault, pinned");
    assert_eq!((pinned.seq, pinned.api.as_str()), (executes[0], "cudnnBackendExecute"), "the first execute, whose breadcrumb never landed: {}", pinned.message);
    assert_eq!(pinned.error.as_ref().map(|e| e.code), Some(700));
    // Pinned by its breadcrumb that never landed, or (when the stand-in's GPU broke the context
    // before the breadcrumb could be queued) as the work in flight: the same call either way.
    let failed = t.faults.iter().find(|f| f.kind == FaultKind::ApiError).expect("the second execute's failure");
    assert_eq!((failed.seq, failed.status), (executes[1], 5003));
}

#[test]
fn an_engine_that_does_not_support_the_plan_is_no_fault_at_finalize_but_an_incompatible_runtime_is() {
    // The plan is the program's 8th finalize.
    let (run, t) = both(&standin_cudnn(), "conv", &[("CUDASHIM_FAIL", "cudnnBackendFinalize:8:3000")]);
    assert!(run.stdout().contains("finalize=3000"), "{}", run.stdout());
    assert!(t.faults.iter().all(|f| f.api != "cudnnBackendFinalize"), "cudnn-frontend tries the next engine: {:#?}", t.faults);
    let (run, t) = both(&standin_cudnn(), "conv", &[("CUDASHIM_FAIL", "cudnnBackendFinalize:8:3006")]);
    assert!(run.stdout().contains("finalize=3006"), "{}", run.stdout());
    let f = t.faults.iter().find(|f| f.api == "cudnnBackendFinalize").expect("the finalize's fault");
    assert_eq!((f.kind, f.status_name.as_str()), (FaultKind::ApiError, "CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART"));
}

#[test]
fn a_legacy_convolution_given_freed_memory_is_use_after_free() {
    let (_, t) = both(&standin_cudnn(), "legacy_freed", &[]);
    let f = only_fault(&t);
    assert_eq!((f.api.as_str(), f.kind), ("cudnnConvolutionForward", FaultKind::UseAfterFree), "{}", f.message);
    assert!(f.message.starts_with("argument 13 "), "{}", f.message);
}

/// cudnnAddTensor was added as one declared table line, no handler of its own: its data
/// pointers are checked by the types its line gives them, whatever its argument count.
#[test]
fn a_legacy_entry_point_added_as_one_declared_line_is_checked_as_the_others_are() {
    let (run, t) = both(&standin_cudnn(), "add_freed", &[]);
    assert!(run.stdout().contains("cudnnAddTensor=3000"), "the stand-in's answer passed on: {}", run.stdout());
    let f = only_fault(&t);
    assert_eq!((f.api.as_str(), f.kind), ("cudnnAddTensor", FaultKind::UseAfterFree), "{}", f.message);
    assert!(f.message.starts_with("argument 4 "), "A, the freed input: {}", f.message);
    assert_eq!(t.summary.calls.get("cudnnAddTensor"), Some(&1));
}

#[test]
fn a_missing_sublibrary_is_named_with_every_file_the_dispatcher_looked_for() {
    let folder = cudnn_folder("cudnn-missing", &["libcudnn_graph.so.9"], &[]);
    let (run, t) = both(&folder, "create", &[]);
    assert!(run.stdout().contains("cudnnCreate=1008"), "{}", run.stdout());
    let f = only_fault(&t);
    assert_eq!((f.api.as_str(), f.kind, f.status_name.as_str()), ("cudnnCreate", FaultKind::InitFailed, "CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED"));
    let cause = f.cause.as_ref().expect("cause");
    assert_eq!(cause.kind, InitCauseKind::CudnnSublibrary, "{}", cause.message);
    let cudnn = cause.cudnn.as_ref().expect("the cuDNN libraries");
    let graph = cudnn.sublibraries.iter().find(|s| s.name == "libcudnn_graph").expect("libcudnn_graph looked for");
    // Asked before the call (NVIDIA's dispatcher would abort inside it), when cuDNN's version
    // cannot be asked without libcudnn_graph: the names from the soname's major on.
    assert_eq!(graph.looked_for, ["libcudnn_graph.so.9", "libcudnn_graph.so"]);
    assert_eq!(graph.folders.first().map(PathBuf::from), Some(folder.clone()), "the dispatcher's own folder first");
    assert!(graph.loaded.is_none() && graph.on_disk.is_none());
    assert!(cause.message.contains("could not load libcudnn_graph"), "{}", cause.message);
    // cuDNN's message is not asked for: without libcudnn_graph, NVIDIA's dispatcher aborts at
    // any call, cudnnGetLastErrorString included.
    assert!(f.args.get("cudnn_message").is_none(), "{:?}", f.args);
    let report = Command::new(cli()).arg("report").arg(&run.trace_path).output().expect("report");
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(text.contains("could not load libcudnn_graph") && text.contains("it resolves cuDNN's dispatcher and every sublibrary"), "{text}");
}

#[test]
fn a_sublibrary_of_another_version_is_named_with_both_versions() {
    let folder = cudnn_folder("cudnn-mixed", &[], &["libcudnn_ops.so.9"]);
    let (run, t) = both(&folder, "create", &[]);
    assert!(run.stdout().contains("cudnnCreate=1002"), "{}", run.stdout());
    let f = only_fault(&t);
    assert_eq!(f.status_name, "CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH");
    let cause = f.cause.as_ref().expect("cause");
    assert_eq!(cause.kind, InitCauseKind::CudnnSublibrary, "{}", cause.message);
    let cudnn = cause.cudnn.as_ref().expect("the cuDNN libraries");
    assert_eq!(cudnn.version.as_deref(), Some("9.26.0"));
    let ops = cudnn.loaded.iter().find(|l| l.path.ends_with("libcudnn_ops.so.9")).expect("libcudnn_ops loaded");
    assert_eq!(ops.version.as_deref(), Some("9.1.0"));
    assert!(cause.message.contains("libcudnn_ops.so.9 is 9.1.0"), "{}", cause.message);
}

#[test]
fn cudnn_create_with_no_memory_left_is_out_of_memory_as_for_cublas() {
    let (run, t) = both(&standin_cudnn(), "create", &[("CUDASHIM_MEM_TOTAL", "16384")]);
    assert!(run.stdout().contains("cudnnCreate=1001"), "{}", run.stdout());
    let f = only_fault(&t);
    let cause = f.cause.as_ref().expect("cause");
    assert_eq!((f.kind, cause.kind), (FaultKind::InitFailed, InitCauseKind::OutOfMemory), "{}", cause.message);
    assert!(cause.cudnn.as_ref().is_some_and(|c| c.version.as_deref() == Some("9.26.0")), "{:?}", cause.cudnn);
}

#[test]
fn in_a_9_10_layout_without_ext_a_cudnn_create_out_of_memory_is_out_of_memory_not_a_missing_libcudnn_ext() {
    // NVIDIA's 9.10.2 wheel: no libcudnn_ext, and a dispatcher that names none.
    let folder = cudnn_folder_of("cudnn-9.10", "cudnn-910-oom", &[], &[]);
    let (run, t) = both(&folder, "create", &[("CUDASHIM_MEM_TOTAL", "16384")]);
    assert!(run.stdout().contains("cudnnCreate=1001"), "{}", run.stdout());
    let f = only_fault(&t);
    let cause = f.cause.as_ref().expect("cause");
    assert_eq!((f.kind, cause.kind), (FaultKind::InitFailed, InitCauseKind::OutOfMemory), "{}", cause.message);
    assert!(!f.message.contains("libcudnn_ext"), "{}", f.message);
    let cudnn = cause.cudnn.as_ref().expect("cuDNN's libraries");
    assert_eq!(cudnn.version.as_deref(), Some("9.10.2"));
    // The dispatcher's list from its file, then the engines and heuristics from libcudnn_graph's.
    let listed: Vec<(&str, Option<&str>)> = cudnn.sublibraries.iter().map(|s| (s.name.as_str(), s.loaded_by.as_deref())).collect();
    let graph = Some("libcudnn_graph");
    assert_eq!(
        listed,
        [
            ("libcudnn_graph", None),
            ("libcudnn_ops", None),
            ("libcudnn_cnn", None),
            ("libcudnn_adv", None),
            ("libcudnn_engines_precompiled", graph),
            ("libcudnn_engines_runtime_compiled", graph),
            ("libcudnn_heuristic", graph)
        ]
    );
    // An engine library missing as well: libcudnn_graph loads it only at a finalize, so the
    // handle's failure is still memory's.
    let without = cudnn_folder_of("cudnn-9.10", "cudnn-910-oom-no-engine", &["libcudnn_engines_precompiled.so.9"], &[]);
    let (_, t) = both(&without, "create", &[("CUDASHIM_MEM_TOTAL", "16384")]);
    let cause = only_fault(&t).cause.clone().expect("cause");
    assert_eq!(cause.kind, InitCauseKind::OutOfMemory, "{}", cause.message);
    // And the layout is whole: a convolution runs on it with no fault.
    let (run, t) = both(&folder, "conv", &[]);
    assert!(run.stdout().contains("y = 5 7 9 13 15 17 21 23 25"), "{}", run.stdout());
    assert!(t.faults.is_empty(), "{:#?}", t.faults);
}

#[test]
fn in_a_9_26_layout_a_missing_libcudnn_ext_is_named_at_cudnn_create_with_the_files_and_folders_looked_in() {
    let folder = cudnn_folder("cudnn-926-no-ext", &["libcudnn_ext.so.9"], &[]);
    let (run, t) = both(&folder, "create", &[]);
    assert!(run.stdout().contains("cudnnCreate=1008"), "{}", run.stdout());
    let f = only_fault(&t);
    assert_eq!((f.api.as_str(), f.status_name.as_str()), ("cudnnCreate", "CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED"));
    let cause = f.cause.as_ref().expect("cause");
    assert_eq!(cause.kind, InitCauseKind::CudnnSublibrary, "{}", cause.message);
    let expected = format!(
        "the dispatcher {}/libcudnn.so.9 could not load libcudnn_ext: it looked for libcudnn_ext.so.9.26.0, libcudnn_ext.so.9.26, \
         libcudnn_ext.so.9, libcudnn_ext.so in {}",
        folder.display(),
        folder.display()
    );
    assert!(cause.message.contains(&expected), "{}", cause.message);
}

/// The backend convolution on `folder`, whose plan's finalize returns `status`: the first
/// finalize's fault, with its cuDNN-sublibrary cause (none at cudnnCreate: the handle does not
/// need the engines).
fn finalize_fault(folder: &Path, status: i32) -> (Fault, InitCause) {
    let (run, t) = both(folder, "conv", &[]);
    assert!(run.stdout().contains(&format!("finalize={status}")), "{}", run.stdout());
    assert!(t.faults.iter().all(|f| f.api != "cudnnCreate"), "{:#?}", t.faults);
    let f = t.faults.iter().find(|f| f.api == "cudnnBackendFinalize").expect("the finalize's fault").clone();
    let cause = f.cause.clone().expect("cause");
    assert_eq!(cause.kind, InitCauseKind::CudnnSublibrary, "{}", cause.message);
    (f, cause)
}

#[test]
fn a_missing_engines_library_is_named_at_cudnn_backend_finalize_with_the_files_and_folders_looked_in() {
    for (release, version) in [("cudnn", "9.26.0"), ("cudnn-9.10", "9.10.2")] {
        let folder = cudnn_folder_of(release, &format!("{release}-no-engines"), &["libcudnn_engines_precompiled.so.9"], &[]);
        let (f, cause) = finalize_fault(&folder, 1008);
        assert_eq!(f.status_name, "CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED");
        let (v, mm) = (version, version.rsplit_once('.').map_or(version, |(mm, _)| mm));
        let looked_for = format!(
            "could not load libcudnn_engines_precompiled: it looked for libcudnn_engines_precompiled.so.{v}, libcudnn_engines_precompiled.so.{mm}, \
             libcudnn_engines_precompiled.so.9, libcudnn_engines_precompiled.so in "
        );
        assert!(f.message.contains(&looked_for) && f.message.contains("libcudnn_graph (which loads"), "{}", f.message);
        let engines = cause.cudnn.as_ref().and_then(|c| c.sublibraries.iter().find(|s| s.name == "libcudnn_engines_precompiled")).expect("looked for");
        assert_eq!(engines.loaded_by.as_deref(), Some("libcudnn_graph"));
        assert!(engines.folders.iter().any(|f| Path::new(f) == folder), "libcudnn_graph's own folder: {:?}", engines.folders);
        assert!(engines.loaded.is_none() && engines.on_disk.is_none());
    }
    // The report names the file and sends to the doctor, which checks the engines too.
    let folder = cudnn_folder("cudnn-no-engines-report", &["libcudnn_engines_precompiled.so.9"], &[]);
    let run = run_with(&folder, &["conv"], &[], true);
    let report = Command::new(cli()).arg("report").arg(&run.trace_path).output().expect("report");
    let text = String::from_utf8_lossy(&report.stdout);
    assert!(text.contains("could not load libcudnn_engines_precompiled") && text.contains("the engines and heuristics libcudnn_graph loads"), "{text}");
}

#[test]
fn an_engines_library_of_another_release_is_named_with_both_releases_at_cudnn_backend_finalize() {
    // A libcudnn_engines_precompiled of 9.1.0 beside a 9.10.2 dispatcher, and beside a 9.26.0 one.
    for (release, version) in [("cudnn-9.10", "9.10.2"), ("cudnn", "9.26.0")] {
        let folder = cudnn_folder_of(release, &format!("{release}-engines-9.1"), &[], &["libcudnn_engines_precompiled.so.9"]);
        let (f, cause) = finalize_fault(&folder, 1002);
        assert_eq!(f.status_name, "CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH");
        // Its release read from the file (NVIDIA's engines export no version datum).
        let both_releases = format!("is {version}, but {}/libcudnn_engines_precompiled.so.9 is 9.1.0", folder.display());
        assert!(cause.message.contains(&both_releases), "{}", cause.message);
    }
}

#[test]
fn cudnn_create_without_a_driver_is_no_driver() {
    let s = standin();
    let libpath = format!("{}:{}", s.join("lib").display(), standin_cudnn().display());
    let program = program();
    let env = [("LD_LIBRARY_PATH", libpath.as_str())];
    let run = run(Launch { env: &env, driver: false, ..Launch::new(&program, &["create"]) });
    assert!(run.stdout().contains("cudnnCreate=1001"), "{}", run.stdout());
    let t = run.trace();
    let f = only_fault(&t);
    assert_eq!(f.cause.as_ref().map(|c| c.kind), Some(InitCauseKind::NoDriver), "{:#?}", f.cause);
}

#[test]
fn a_cudnn_built_for_a_newer_runtime_compares_its_cudart_version_with_the_runtime() {
    let (run, t) = both(&standin_cudnn(), "create", &[("CUDASHIM_CUDNN_CUDART", "13040")]);
    assert!(run.stdout().contains("cudnnCreate=3006"), "{}", run.stdout());
    let f = only_fault(&t);
    assert_eq!(f.status_name, "CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART");
    let cause = f.cause.as_ref().expect("cause");
    assert_eq!((cause.kind, cause.runtime_version), (InitCauseKind::CudnnIncompatible, Some(12090)), "{}", cause.message);
    assert!(cause.message.contains("built for CUDA 13.4") && cause.message.contains("runtime is CUDA 12.9"), "{}", cause.message);
}

/// `cublasguard doctor --json`'s cuDNN rows (name, status, evidence), with `libpath` as the
/// library path and no Python to ask.
fn doctor_cudnn(libpath: &str) -> Vec<(String, String, String)> {
    let out = Command::new(cli())
        .args(["doctor", "--json", "--python", "/nonexistent/python3"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("LD_LIBRARY_PATH", libpath)
        .output()
        .expect("doctor");
    let checks: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    checks
        .as_array()
        .expect("array")
        .iter()
        .map(|c| {
            (c["name"].as_str().unwrap_or("").to_string(), c["status"].as_str().unwrap_or("").to_string(), c["evidence"].as_str().unwrap_or("").to_string())
        })
        .filter(|c| c.0.starts_with("cudnn"))
        .collect()
}

#[test]
fn the_doctor_finds_every_sublibrary_of_one_version_and_names_a_missing_or_mixed_one() {
    let driver = standin().join("driver").display().to_string();
    let whole = doctor_cudnn(&format!("{driver}:{}", standin_cudnn().display()));
    assert_eq!(whole.len(), 1, "{whole:#?}");
    assert_eq!((whole[0].0.as_str(), whole[0].1.as_str()), ("cudnn libraries", "ok"), "{}", whole[0].2);
    assert!(whole[0].2.contains("libcudnn_graph.so.9 9.26.0") && whole[0].2.contains("one version"), "{}", whole[0].2);
    let missing = doctor_cudnn(&format!("{driver}:{}", cudnn_folder("doctor-missing", &["libcudnn_cnn.so.9"], &[]).display()));
    assert_eq!(missing[0].1, "fail", "{missing:#?}");
    assert!(
        missing[0].2.contains("cannot load libcudnn_cnn (none of libcudnn_cnn.so.9.26.0, libcudnn_cnn.so.9.26, libcudnn_cnn.so.9, libcudnn_cnn.so"),
        "{}",
        missing[0].2
    );
    let mixed = doctor_cudnn(&format!("{driver}:{}", cudnn_folder("doctor-mixed", &[], &["libcudnn_ops.so.9"]).display()));
    assert_eq!(mixed[0].1, "fail", "{mixed:#?}");
    assert!(mixed[0].2.contains("mixed cuDNN versions") && mixed[0].2.contains("libcudnn_ops.so.9 is 9.1.0"), "{}", mixed[0].2);
}

/// A cuDNN folder in NVIDIA's layout of `version` (e.g. 91002): a dispatcher whose read-only
/// data names `names` (as `libcudnn_graph.so`, ...) and answers cudnnGetVersion, and one
/// sublibrary per file in `files` with its `cudnn_<name>_version` datum.
fn nvidia_style_cudnn(label: &str, version: u32, names: &[&str], files: &[&str]) -> PathBuf {
    let dir = temp_dir(label).join("cudnn");
    std::fs::create_dir_all(&dir).unwrap();
    let cc = |source: &str, soname: &str, out: &Path| {
        let src = dir.join(format!("{soname}.c"));
        std::fs::write(&src, source).unwrap();
        let status = Command::new("cc").args(["-shared", "-fPIC", &format!("-Wl,-soname,{soname}"), "-o"]).arg(out).arg(&src).status().expect("cc");
        assert!(status.success(), "{soname}");
    };
    let strings: String = names.iter().map(|n| format!("\"{n}.so\", ")).collect();
    let dispatcher = format!("const char *const cudnn_sublibrary_names[] = {{ {strings} 0 }};\nunsigned long cudnnGetVersion(void) {{ return {version}; }}\n");
    cc(&dispatcher, "libcudnn.so.9", &dir.join("libcudnn.so.9"));
    let (major, minor, patch) = (version / 10000, version / 100 % 100, version % 100);
    for file in files {
        let short = file.strip_prefix("libcudnn_").unwrap();
        let mut source = format!("const unsigned cudnn_{short}_version = {};\n", major << 16 | minor << 8 | patch);
        if *file == "libcudnn_graph" {
            // NVIDIA's libcudnn_graph names the engines and heuristics it loads itself.
            let engines: String = NVIDIA_ENGINES.iter().map(|n| format!("\"{n}.so\", ")).collect();
            source.push_str(&format!("const char *const cudnn_engine_names[] = {{ {engines} 0 }};\n"));
        }
        cc(&source, &format!("{file}.so.9"), &dir.join(format!("{file}.so.9")));
    }
    // The engines, as NVIDIA's: no version datum, only the release their check compiles in.
    for file in NVIDIA_ENGINES {
        let source = format!("const char cudnn_engine_check[] = \"cudnn_version != ({major} * 10000 + {minor} * 100 + {patch})\";\n");
        cc(&source, &format!("{file}.so.9"), &dir.join(format!("{file}.so.9")));
    }
    dir
}

/// The libraries NVIDIA's libcudnn_graph loads itself (9.26's also loads `_engines_tensor_ir`).
const NVIDIA_ENGINES: [&str; 3] = ["libcudnn_engines_precompiled", "libcudnn_engines_runtime_compiled", "libcudnn_heuristic"];

#[test]
fn the_doctor_checks_the_sublibraries_the_loaded_dispatcher_names_not_a_rule_by_release() {
    let driver = standin().join("driver").display().to_string();
    let four = ["libcudnn_graph", "libcudnn_ops", "libcudnn_cnn", "libcudnn_adv"];
    // NVIDIA's 9.10.2 wheel: no libcudnn_ext, and its dispatcher does not name one.
    let v910 = nvidia_style_cudnn("cudnn-9.10", 91002, &four, &four);
    let checks = doctor_cudnn(&format!("{driver}:{}", v910.display()));
    assert_eq!((checks[0].0.as_str(), checks[0].1.as_str()), ("cudnn libraries", "ok"), "{}", checks[0].2);
    assert!(!checks[0].2.contains("libcudnn_ext"), "{}", checks[0].2);
    // The engines libcudnn_graph names, their release read from their files.
    assert!(checks[0].2.contains("libcudnn_engines_precompiled.so.9 9.10.2"), "{}", checks[0].2);
    // 9.26's dispatcher names ext: without the file, the doctor says so.
    let five = ["libcudnn_graph", "libcudnn_ops", "libcudnn_cnn", "libcudnn_adv", "libcudnn_ext"];
    let v926 = nvidia_style_cudnn("cudnn-9.26", 92600, &five, &four);
    let checks = doctor_cudnn(&format!("{driver}:{}", v926.display()));
    assert_eq!(checks[0].1, "fail", "{checks:#?}");
    assert!(checks[0].2.contains("cannot load libcudnn_ext (none of libcudnn_ext.so.9.26.0"), "{}", checks[0].2);
    let whole = nvidia_style_cudnn("cudnn-9.26-whole", 92600, &five, &five);
    let checks = doctor_cudnn(&format!("{driver}:{}", whole.display()));
    assert_eq!(checks[0].1, "ok", "{checks:#?}");
    assert!(checks[0].2.contains("libcudnn_ext.so.9 9.26.0"), "{}", checks[0].2);
}

#[test]
fn the_doctor_checks_the_engines_and_heuristics_libcudnn_graph_loads_in_both_layouts() {
    let driver = standin().join("driver").display().to_string();
    let row = |folder: &Path| {
        let rows = doctor_cudnn(&format!("{driver}:{}", folder.display()));
        rows.into_iter().find(|c| c.0 == "cudnn libraries").expect("the cuDNN row")
    };
    for (release, version) in [("cudnn", "9.26.0"), ("cudnn-9.10", "9.10.2")] {
        let whole = row(&cudnn_folder_of(release, &format!("doctor-{release}-whole"), &[], &[]));
        assert_eq!(whole.1, "ok", "{}", whole.2);
        for engine in ["libcudnn_engines_precompiled", "libcudnn_engines_runtime_compiled", "libcudnn_heuristic"] {
            assert!(whole.2.contains(&format!("{engine}.so.9 {version}")), "{engine}: {}", whole.2);
        }
        assert_eq!(whole.2.contains("libcudnn_ext"), release == "cudnn", "{}", whole.2);
        let missing = row(&cudnn_folder_of(release, &format!("doctor-{release}-no-heuristic"), &["libcudnn_heuristic.so.9"], &[]));
        assert_eq!(missing.1, "fail", "{}", missing.2);
        assert!(missing.2.contains(&format!("libcudnn_graph.so.9 cannot load libcudnn_heuristic (none of libcudnn_heuristic.so.{version}")), "{}", missing.2);
    }
    let mixed = row(&cudnn_folder("doctor-engines-9.1", &[], &["libcudnn_engines_precompiled.so.9"]));
    assert_eq!(mixed.1, "fail", "{}", mixed.2);
    assert!(mixed.2.contains("mixed cuDNN versions") && mixed.2.contains("libcudnn_engines_precompiled.so.9 is 9.1.0"), "{}", mixed.2);
}

#[test]
fn a_stray_sublibrary_earlier_on_the_library_path_does_not_shadow_the_dispatchers_own() {
    // The dispatcher's RPATH ($ORIGIN) comes before LD_LIBRARY_PATH: its own folder wins.
    let stray = temp_dir("cudnn-stray");
    std::fs::copy(standin().join("cudnn-9.1/libcudnn_ops.so.9"), stray.join("libcudnn_ops.so.9")).expect("a stray libcudnn_ops");
    let whole = cudnn_folder("cudnn-whole", &[], &[]);
    let rows = doctor_cudnn(&format!("{}:{}:{}", stray.display(), standin().join("driver").display(), whole.display()));
    assert_eq!(rows.iter().find(|c| c.0 == "cudnn libraries").map(|c| c.1.as_str()), Some("ok"), "{rows:#?}");
    let s = standin();
    let libpath = format!("{}:{}:{}:{}", stray.display(), s.join("lib").display(), s.join("driver").display(), whole.display());
    let (run, t) = both(&whole, "create", &[("LD_LIBRARY_PATH", &libpath)]);
    assert!(run.stdout().contains("cudnnCreate=0"), "{}", run.stdout());
    assert!(t.faults.is_empty(), "{:#?}", t.faults);
}

#[test]
fn the_doctor_says_cudnn_8_needs_the_unversioned_libcuda_so() {
    let dir = temp_dir("cudnn8");
    std::fs::write(dir.join("libcudnn.so.8"), b"").expect("a cuDNN 8 dispatcher's file");
    let without = doctor_cudnn(&dir.display().to_string());
    let row = without.iter().find(|c| c.0 == "cudnn 8").expect("the cuDNN 8 row");
    assert_eq!(row.1, "fail", "{row:?}");
    assert!(row.2.contains("unversioned libcuda.so") && row.2.contains("libcudnn_cnn_infer.so.8"), "{}", row.2);
    // The stand-in's driver folder holds the development link libcuda.so.
    let with = doctor_cudnn(&format!("{}:{}", dir.display(), standin().join("driver").display()));
    assert_eq!(with.iter().find(|c| c.0 == "cudnn 8").map(|c| c.1.as_str()), Some("ok"), "{with:#?}");
}

// ---- NVIDIA's cuDNN 9.26, as PyTorch 2.15 installs it ----

/// NVIDIA's cuDNN: the nvidia/cudnn/lib folder of scripts/fetch-torch.sh's environment.
fn nvidia_cudnn() -> PathBuf {
    let python = crate::pytorch::python();
    let lib = python.parent().and_then(Path::parent).expect("venv").join("lib/python3.11/site-packages/nvidia/cudnn/lib");
    assert!(lib.join("libcudnn.so.9").exists(), "no cuDNN in {}: run scripts/fetch-torch.sh", lib.display());
    lib
}

/// The program on NVIDIA's cuDNN, with the stand-in runtime and no driver at all.
fn run_nvidia(args: &[&str], guarded: bool) -> Run {
    let libpath = format!("{}:{}", nvidia_cudnn().display(), standin().join("lib").display());
    let env = [("LD_LIBRARY_PATH", libpath.as_str())];
    let program = program();
    run(Launch { env: &env, guarded, driver: false, ..Launch::new(&program, args) })
}

#[test]
#[cfg_attr(not(cublasguard_has_torch), ignore = "needs PyTorch's cuDNN: run scripts/fetch-torch.sh")]
fn nvidias_cudnn_create_fails_without_a_gpu_attributed_with_its_versions_and_the_same_output() {
    for case in ["versions", "create"] {
        let bare = run_nvidia(&[case], false);
        let guarded = run_nvidia(&[case], true);
        assert_eq!(bare.stdout(), guarded.stdout(), "{case}: identical guarded and bare\n{}", guarded.stderr());
        assert_eq!(bare.code(), guarded.code());
    }
    let bare = run_nvidia(&["versions"], false);
    assert!(bare.stdout().contains("cudnnGetVersion=92600"), "{}", bare.stdout());
    let run = run_nvidia(&["create"], true);
    // cuDNN's own message reaches the program although the guard read it first.
    assert!(run.stdout().contains("cudnnCreate=1001 message=\"cudaGetDeviceCount"), "{}", run.stdout());
    let t = run.trace();
    let f = only_fault(&t);
    assert_eq!((f.api.as_str(), f.kind, f.status_name.as_str()), ("cudnnCreate", FaultKind::InitFailed, "CUDNN_STATUS_NOT_INITIALIZED"));
    let cause = f.cause.as_ref().expect("cause");
    assert_eq!(cause.kind, InitCauseKind::NoDriver, "{}", cause.message);
    let cudnn = cause.cudnn.as_ref().expect("cuDNN's libraries");
    assert_eq!(cudnn.version.as_deref(), Some("9.26.0"));
    assert!(cudnn.cudart_version.is_some_and(|v| v / 1000 == 13), "{:?}", cudnn.cudart_version);
    let graph = cudnn.loaded.iter().find(|l| l.path.ends_with("libcudnn_graph.so.9")).expect("the dispatcher loaded libcudnn_graph");
    assert_eq!(graph.version.as_deref(), Some("9.26.0"), "read from its cudnn_graph_version");
    assert!(cudnn.sublibraries.iter().all(|s| s.loaded.is_some() || s.on_disk.is_some()), "the wheel is whole: {:#?}", cudnn.sublibraries);
    // libcudnn_graph's own list, read from its file: 9.26's names libcudnn_engines_tensor_ir.
    let tensor_ir = cudnn.sublibraries.iter().find(|s| s.name == "libcudnn_engines_tensor_ir").expect("named by libcudnn_graph");
    assert_eq!(tensor_ir.loaded_by.as_deref(), Some("libcudnn_graph"));
    assert!(f.args.get("cudnn_message").is_some(), "{:?}", f.args);
}

#[test]
#[cfg_attr(not(cublasguard_has_torch), ignore = "needs PyTorch's cuDNN: run scripts/fetch-torch.sh")]
fn the_doctor_finds_nvidias_cudnn_whole_and_of_one_version() {
    let rows = doctor_cudnn(&nvidia_cudnn().display().to_string());
    let row = rows.iter().find(|c| c.0 == "cudnn libraries").expect("the cuDNN row");
    assert_eq!(row.1, "ok", "{}", row.2);
    assert!(row.2.contains("libcudnn.so.9 9.26.0") && row.2.contains("libcudnn_graph.so.9 9.26.0"), "{}", row.2);
    // The engines libcudnn_graph's own file names (tensor_ir is in no list of the guard's), each
    // release read from the file.
    for engine in ["libcudnn_engines_precompiled", "libcudnn_engines_runtime_compiled", "libcudnn_engines_tensor_ir"] {
        assert!(row.2.contains(&format!("{engine}.so.9 9.26.0")), "{engine}: {}", row.2);
    }
    assert!(row.2.contains("libcudnn_heuristic.so.9"), "{}", row.2);
}

#[test]
#[cfg_attr(not(cublasguard_has_torch), ignore = "needs PyTorch's cuDNN: run scripts/fetch-torch.sh")]
fn nvidias_dispatcher_without_its_sublibraries_aborts_and_the_trace_already_names_the_missing_one() {
    // NVIDIA's libcudnn.so.9 alone in a folder: its first call aborts the process.
    let alone = temp_dir("cudnn-alone").join("cudnn");
    std::fs::create_dir_all(&alone).expect("folder");
    std::fs::copy(nvidia_cudnn().join("libcudnn.so.9"), alone.join("libcudnn.so.9")).expect("copy the dispatcher");
    let libpath = format!("{}:{}", alone.display(), standin().join("lib").display());
    let env = [("LD_LIBRARY_PATH", libpath.as_str())];
    let program = program();
    let bare = run(Launch { env: &env, guarded: false, driver: false, ..Launch::new(&program, &["create"]) });
    let guarded = run(Launch { env: &env, driver: false, ..Launch::new(&program, &["create"]) });
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(bare.output.status.signal(), Some(libc::SIGABRT), "{}", bare.stderr());
    assert_eq!(guarded.output.status.signal(), Some(libc::SIGABRT), "{}", guarded.stderr());
    assert!(bare.stderr().contains("Cannot load symbol cudnnCreate"), "{}", bare.stderr());
    let t = guarded.trace();
    assert_eq!(t.crash.as_ref().map(|c| c.name.as_str()), Some("SIGABRT"));
    let f = only_fault(&t);
    assert_eq!((f.api.as_str(), f.kind, f.status), ("cudnnCreate", FaultKind::InitFailed, -1));
    let cause = f.cause.as_ref().expect("cause");
    assert_eq!(cause.kind, InitCauseKind::CudnnSublibrary, "{}", cause.message);
    assert!(cause.message.contains("could not load libcudnn_graph,"), "{}", cause.message);
    // Its version cannot be asked without libcudnn_graph: the names from its soname's major on.
    assert!(cause.message.contains("it looked for libcudnn_graph.so.9, libcudnn_graph.so in"), "{}", cause.message);
}

/// cuDNN functions PyTorch 2.15 imports that need no check, each with its reason; every other
/// one it imports must be hooked.
const NEEDS_NO_CHECK: &[(&str, &str)] = &[
    ("cudnnGetVersion", "a version number"),
    ("cudnnGetCudartVersion", "a version number (read by the guard at a fault)"),
    ("cudnnGetErrorString", "an error string"),
    ("cudnnGetStream", "a getter: reads the handle's stream"),
    ("cudnnBackendSetAttribute", "descriptor bookkeeping on the host: the guard reads the variant pack back at cudnnBackendExecute"),
    ("cudnnBackendGetAttribute", "a getter"),
    ("cudnnBackendDestroyDescriptor", "frees host memory of cuDNN's"),
    ("cudnnCreateActivationDescriptor", "a host descriptor: no device memory"),
    ("cudnnCreateCTCLossDescriptor", "a host descriptor: no device memory"),
    ("cudnnCreateConvolutionDescriptor", "a host descriptor: no device memory"),
    ("cudnnCreateDropoutDescriptor", "a host descriptor: no device memory"),
    ("cudnnCreateFilterDescriptor", "a host descriptor: no device memory"),
    ("cudnnCreatePoolingDescriptor", "a host descriptor: no device memory"),
    ("cudnnCreateRNNDataDescriptor", "a host descriptor: no device memory"),
    ("cudnnCreateRNNDescriptor", "a host descriptor: no device memory"),
    ("cudnnCreateSpatialTransformerDescriptor", "a host descriptor: no device memory"),
    ("cudnnCreateTensorDescriptor", "a host descriptor: no device memory"),
    ("cudnnDestroyActivationDescriptor", "a host descriptor: no device memory"),
    ("cudnnDestroyCTCLossDescriptor", "a host descriptor: no device memory"),
    ("cudnnDestroyConvolutionDescriptor", "a host descriptor: no device memory"),
    ("cudnnDestroyDropoutDescriptor", "a host descriptor: no device memory"),
    ("cudnnDestroyFilterDescriptor", "a host descriptor: no device memory"),
    ("cudnnDestroyRNNDataDescriptor", "a host descriptor: no device memory"),
    ("cudnnDestroyRNNDescriptor", "a host descriptor: no device memory"),
    ("cudnnDestroySpatialTransformerDescriptor", "a host descriptor: no device memory"),
    ("cudnnDestroyTensorDescriptor", "a host descriptor: no device memory"),
    ("cudnnSetActivationDescriptor", "a host descriptor's setter"),
    ("cudnnSetCTCLossDescriptorEx", "a host descriptor's setter"),
    ("cudnnSetCTCLossDescriptor_v9", "a host descriptor's setter"),
    ("cudnnSetConvolutionGroupCount", "a host descriptor's setter"),
    ("cudnnSetConvolutionMathType", "a host descriptor's setter"),
    ("cudnnSetConvolutionNdDescriptor", "a host descriptor's setter"),
    ("cudnnSetFilterNdDescriptor", "a host descriptor's setter"),
    ("cudnnSetPooling2dDescriptor", "a host descriptor's setter"),
    ("cudnnSetRNNDataDescriptor", "a host descriptor's setter (its sequence lengths are host memory)"),
    ("cudnnSetRNNDescriptor_v8", "a host descriptor's setter"),
    ("cudnnSetSpatialTransformerNdDescriptor", "a host descriptor's setter"),
    ("cudnnSetTensorNdDescriptor", "a host descriptor's setter"),
    ("cudnnGetFilterNdDescriptor", "a host descriptor's getter"),
    ("cudnnGetTensorNdDescriptor", "a host descriptor's getter"),
    ("cudnnDropoutGetStatesSize", "a size query"),
    ("cudnnGetBatchNormalizationBackwardExWorkspaceSize", "a size query"),
    ("cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize", "a size query"),
    ("cudnnGetBatchNormalizationTrainingExReserveSpaceSize", "a size query"),
    ("cudnnGetCTCLossWorkspaceSize", "a size query"),
    ("cudnnGetCTCLossWorkspaceSize_v8", "a size query"),
    ("cudnnGetConvolutionBackwardDataWorkspaceSize", "a size query"),
    ("cudnnGetConvolutionBackwardFilterWorkspaceSize", "a size query"),
    ("cudnnGetConvolutionForwardWorkspaceSize", "a size query"),
    ("cudnnGetRNNTempSpaceSizes", "a size query"),
    ("cudnnGetRNNWeightSpaceSize", "a size query"),
    ("cudnnGetRNNWeightParams", "describes where a weight lies in the weight space: reads no device memory"),
    ("cudnnGetConvolutionBackwardDataAlgorithm_v7", "heuristics: describes, runs nothing"),
    ("cudnnGetConvolutionBackwardFilterAlgorithm_v7", "heuristics: describes, runs nothing"),
    ("cudnnGetConvolutionForwardAlgorithm_v7", "heuristics: describes, runs nothing"),
];

#[test]
#[cfg_attr(not(cublasguard_has_torch), ignore = "needs PyTorch: run scripts/fetch-torch.sh")]
fn the_guard_hooks_every_cudnn_function_pytorch_imports_that_needs_a_check() {
    let lib = nvidia_cudnn().join("../../../torch/lib/libtorch_cuda.so");
    let imports = dynamic_symbols(&lib, true);
    assert!(imports.iter().any(|s| s == "cudnnBackendExecute"), "{} imports no cuDNN: wrong file?", lib.display());
    let hooked = dynamic_symbols(&guard_lib(), false);
    let mut missing: Vec<&String> =
        imports.iter().filter(|s| s.starts_with("cudnn")).filter(|s| !hooked.contains(s) && !NEEDS_NO_CHECK.iter().any(|(n, _)| n == s)).collect();
    missing.sort();
    missing.dedup();
    assert!(missing.is_empty(), "libtorch_cuda.so imports cuDNN functions the guard neither hooks nor lists in NEEDS_NO_CHECK: {missing:?}");
    // The list holds nothing PyTorch does not import, and nothing the guard hooks.
    for (name, _) in NEEDS_NO_CHECK {
        assert!(imports.iter().any(|s| s == name), "{name}: PyTorch 2.15 does not import it");
        assert!(!hooked.iter().any(|s| s == name), "{name}: hooked, yet listed as needing no check");
    }
}
