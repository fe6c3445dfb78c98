//! Against NVIDIA's own libraries (CUDA 12 and 13, from PyPI's wheels, installed by
//! scripts/fetch-nvidia.sh into ~/.cache/cublasguard): versioned symbols are interposed, the
//! real functions are found (also when loaded RTLD_LOCAL) and their codes pass through
//! unchanged, and the trace names the missing driver and the real libraries. Without a GPU
//! the real libraries run up to a kernel launch.
//!
//! When the wheels are not installed these tests say so and pass, unless
//! CUBLASGUARD_REQUIRE_NVIDIA=1 (set by .ci/run, which installs them first).

use crate::common;

use common::*;
use cublasguard_format::trace::{FaultKind, InitCauseKind, Trace};
use std::path::{Path, PathBuf};
use std::process::Command;

struct Cuda {
    major: u32,
    lib_dirs: Vec<PathBuf>,
}

impl Cuda {
    fn library_path(&self) -> String {
        self.lib_dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(":")
    }
}

/// The installed CUDA 12 and 13 wheels.
fn installed() -> Vec<Cuda> {
    let root = cache_dir();
    let all = vec![
        Cuda { major: 12, lib_dirs: vec![root.join("nvidia-cu12/nvidia/cuda_runtime/lib"), root.join("nvidia-cu12/nvidia/cublas/lib")] },
        Cuda { major: 13, lib_dirs: vec![root.join("nvidia-cu13/nvidia/cu13/lib")] },
    ];
    let complete = ["nvidia-cu12", "nvidia-cu13"].iter().all(|d| root.join(d).join(".complete").exists());
    // These tests run only where scripts/fetch-nvidia.sh ran (build.rs): its wheels must be there.
    assert!(complete, "NVIDIA's wheels are not installed in {}: run scripts/fetch-nvidia.sh", root.display());
    all
}

/// real_nvidia.c, linked to NVIDIA's libraries of `cuda` by soname (as a program or a library).
fn build(cuda: &Cuda, shared: bool) -> PathBuf {
    // Once per process: tests run in parallel threads and must not rewrite a running binary.
    static BUILT: std::sync::Mutex<Vec<((u32, bool), PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, path)) = built.iter().find(|(k, _)| *k == (cuda.major, shared)) {
        return path.clone();
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("programs");
    std::fs::create_dir_all(&dir).unwrap();
    let kind = if shared { "lib" } else { "bin" };
    let out = dir.join(format!("real_nvidia_{}_{kind}_{}", cuda.major, std::process::id()));
    let mut cmd = Command::new("cc");
    cmd.args(["-O1", "-Wall", "-Werror", "-o"]).arg(&out);
    if shared {
        cmd.args(["-shared", "-fPIC", "-DREAL_NVIDIA_LIBRARY"]);
    }
    cmd.arg(manifest_dir().join("tests/c/real_nvidia.c")).arg(format!("-I{}", standin().join("include").display()));
    for d in &cuda.lib_dirs {
        cmd.arg(format!("-L{}", d.display()));
    }
    let m = cuda.major;
    cmd.args([format!("-l:libcublasLt.so.{m}"), format!("-l:libcublas.so.{m}"), format!("-l:libcudart.so.{m}")]);
    assert!(cmd.status().expect("cc").success(), "building against CUDA {m}");
    built.push(((cuda.major, shared), out.clone()));
    out
}

fn run_real(program: &Path, args: &[&str], cuda: &Cuda, guarded: bool) -> Run {
    let dir = temp_dir(&format!("nvidia{}", cuda.major));
    let trace_path = dir.join("trace.json");
    let mut cmd = Command::new(program);
    cmd.args(args).current_dir(&dir).env_clear().env("LD_LIBRARY_PATH", cuda.library_path());
    if guarded {
        cmd.env("LD_PRELOAD", guard_lib()).env("CUBLASGUARD_TRACE", &trace_path);
    }
    Run { output: cmd.output().expect("run"), dir, trace_path }
}

fn check_environment(t: &Trace, cuda: &Cuda) {
    let m = cuda.major;
    assert_eq!(t.environment.runtime_version.map(|v| v / 1000), Some(m as i32), "CUDA {m}");
    assert!(t.environment.cublas_version.is_some_and(|v| v / 10000 == m as i32), "CUDA {m}: {:?}", t.environment.cublas_version);
    assert!(!t.environment.driver.loaded, "no driver on this machine");
    assert_eq!(t.environment.driver_version, None);
    assert!(t.environment.driver.error.as_deref().unwrap_or("").starts_with("no NVIDIA driver"));
    for soname in [format!("libcudart.so.{m}"), format!("libcublas.so.{m}"), format!("libcublasLt.so.{m}")] {
        let lib = t.environment.libraries.iter().find(|l| l.soname == soname).unwrap_or_else(|| panic!("{soname} in {:?}", t.environment.libraries));
        assert!(lib.path.starts_with(&cache_dir().display().to_string()), "{}", lib.path);
    }
}

#[test]
#[cfg_attr(not(cublasguard_has_nvidia), ignore = "needs NVIDIA's wheels: run scripts/fetch-nvidia.sh")]
fn real_libraries_are_interposed_and_their_codes_pass_through() {
    for cuda in installed() {
        let m = cuda.major;
        let program = build(&cuda, false);
        let bare = run_real(&program, &[], &cuda, false);
        let guarded = run_real(&program, &[], &cuda, true);
        assert!(bare.output.status.success(), "CUDA {m}: {}", bare.stderr());
        // What NVIDIA's libraries answer without a driver, unchanged by the guard.
        let out = bare.stdout();
        for line in [
            "cudaGetDeviceCount=35 count=-7", // the count is left unwritten
            "cudaMalloc=35",
            "cublasCreate=1",
            "cublasLtMatmulDescCreate=0",
            "cublasLtCreate=1",
        ] {
            assert!(out.contains(line), "CUDA {m}: {line} in {out}");
        }
        assert_eq!(bare.stdout(), guarded.stdout(), "CUDA {m}");
        assert!(!guarded.stderr().contains("cannot find the real"), "{}", guarded.stderr());
        let t = guarded.trace();
        check_environment(&t, &cuda);
        // Every call reached a hook: the versioned symbols were interposed.
        for (api, n) in [("cudaGetDeviceCount", 1), ("cudaMalloc", 1), ("cublasCreate_v2", 1), ("cublasSgemm_v2", 6), ("cublasLtMatmul", 1)] {
            assert_eq!(t.summary.calls.get(api), Some(&n), "CUDA {m}: {api}");
        }
        let create = t.faults.iter().find(|f| f.api == "cublasCreate_v2").expect("cublasCreate fault");
        assert_eq!((create.kind, create.status), (FaultKind::InitFailed, 1));
        let cause = create.cause.as_ref().expect("cause");
        assert_eq!(cause.kind, InitCauseKind::NoDriver);
        assert_eq!(cause.device_count_status, Some(35));
        assert!(cause.message.contains("cudaErrorInsufficientDriver (35)"), "{}", cause.message);
    }
}

#[test]
#[cfg_attr(not(cublasguard_has_nvidia), ignore = "needs NVIDIA's wheels: run scripts/fetch-nvidia.sh")]
fn real_libraries_loaded_with_rtld_local_are_found() {
    for cuda in installed() {
        let lib = build(&cuda, true);
        let main = build_c("dlopen_main", &["dlopen_main.c"], false);
        let args = [lib.to_str().unwrap(), "real_nvidia_run"];
        let bare = run_real(&main, &args, &cuda, false);
        let guarded = run_real(&main, &args, &cuda, true);
        assert!(bare.stdout().contains("cublasCreate=1"), "{}{}", bare.stdout(), bare.stderr());
        assert_eq!(bare.stdout(), guarded.stdout(), "CUDA {}", cuda.major);
        assert!(!guarded.stderr().contains("cannot find the real"), "{}", guarded.stderr());
        let t = guarded.trace();
        check_environment(&t, &cuda);
        assert_eq!(t.summary.calls.get("cublasSgemm_v2"), Some(&6));
        assert!(t.faults.iter().any(|f| f.api == "cublasCreate_v2" && f.kind == FaultKind::InitFailed));
    }
}

#[test]
#[cfg_attr(not(cublasguard_has_nvidia), ignore = "needs NVIDIA's wheels: run scripts/fetch-nvidia.sh")]
fn cublaslt_descriptors_from_the_real_library_are_read_back() {
    for cuda in installed() {
        let program = build(&cuda, false);
        let t = run_real(&program, &[], &cuda, true).trace();
        let f = t.faults.iter().find(|f| f.api == "cublasLtMatmul").expect("the matmul on a NULL handle");
        assert_eq!(f.kind, FaultKind::InvalidHandle);
        // m, n, k, the transposes, the epilogue and the bias came from the real descriptors.
        assert_eq!((f.args["m"].as_i64(), f.args["n"].as_i64(), f.args["k"].as_i64()), (Some(16), Some(32), Some(8)));
        assert_eq!((f.args["transa"].as_str(), f.args["transb"].as_str()), (Some("T"), Some("N")));
        assert_eq!(f.args["epilogue"], "CUBLASLT_EPILOGUE_BIAS");
        assert_eq!(f.args["bias"], "0x4000");
        assert_eq!(f.args["computeType"], "CUBLAS_COMPUTE_32F");
        assert_eq!((f.args["lda"].as_i64(), f.args["ldb"].as_i64(), f.args["ldc"].as_i64()), (Some(8), Some(8), Some(16)));
    }
}

#[test]
#[cfg_attr(not(cublasguard_has_nvidia), ignore = "needs NVIDIA's wheels: run scripts/fetch-nvidia.sh")]
fn argument_checks_agree_with_the_libraries() {
    // Without a GPU, NVIDIA's cublasCreate fails, so its argument checks can only be asked on
    // a NULL handle, where cuBLAS checks the handle first: it returns NOT_INITIALIZED (1)
    // whatever else is wrong, and the guard's verdict is invalid_handle, returned as the same 1.
    // Behind a handle, the stand-in (which follows NVIDIA's documented order) answers
    // INVALID_VALUE (7) and the guard names the argument and the rule. Passing the stand-in's
    // handle to NVIDIA's library is not done: it would dereference a structure it does not own.
    let table = [
        ("negative_m", "m = -1 but m must be >= 0"),
        ("bad_transa", "transa = 9 is not a cublasOperation_t"),
        ("small_lda", "lda = 1 but transa = N needs lda >= max(1, m) = 4"),
        ("small_ldb", "ldb = 1 but transb = N needs ldb >= max(1, k) = 4"),
        ("small_ldc", "ldc = 1 but ldc must be >= max(1, m) = 4"),
        ("null_alpha", "alpha is NULL"),
    ];
    for cuda in installed() {
        let program = build(&cuda, false);
        let run = run_real(&program, &[], &cuda, true);
        let t = run.trace();
        let sgemm: Vec<_> = t.faults.iter().filter(|f| f.api == "cublasSgemm_v2").collect();
        assert_eq!(sgemm.len(), table.len());
        for ((name, _), f) in table.iter().zip(&sgemm) {
            assert!(run.stdout().contains(&format!("sgemm {name}=1\n")), "CUDA {}: {name}", cuda.major);
            assert_eq!((f.kind, f.status), (FaultKind::InvalidHandle, 1), "CUDA {}: {name}", cuda.major);
        }
    }
    // The same table behind a live stand-in handle.
    let standin_build = build_c("real_nvidia", &["real_nvidia.c"], false);
    let env = [("REAL_NVIDIA_HANDLE", "1")];
    let run = run(Launch { env: &env, ..Launch::new(&standin_build, &[]) });
    let t = run.trace();
    let sgemm: Vec<_> = t.faults.iter().filter(|f| f.api == "cublasSgemm_v2").collect();
    assert_eq!(sgemm.len(), table.len(), "{:#?}", t.faults);
    for ((name, rule), f) in table.iter().zip(&sgemm) {
        assert!(run.stdout().contains(&format!("sgemm {name}=7\n")), "{name}: {}", run.stdout());
        assert_eq!(f.kind, FaultKind::InvalidArgument, "{name}");
        assert!(f.message.starts_with(rule), "{name}: {}", f.message);
    }
}

#[test]
#[cfg_attr(not(cublasguard_has_nvidia), ignore = "needs NVIDIA's wheels: run scripts/fetch-nvidia.sh")]
fn real_cublas_loaded_locally_and_reached_through_dlsym_is_guarded() {
    // As JAX and TensorFlow reach it: dlopen(RTLD_LOCAL), then dlsym and dlvsym on the handle.
    let program = build_c("dlsym_reach", &["dlsym_reach.c"], false);
    for cuda in installed() {
        let m = cuda.major.to_string();
        for case in ["clean", "dlvsym"] {
            let run = |guarded: bool| {
                let mut cmd = Command::new(&program);
                let dir = temp_dir(&format!("nvidia-dlsym{m}"));
                let trace_path = dir.join("trace.json");
                cmd.arg(case).current_dir(&dir).env_clear().env("LD_LIBRARY_PATH", cuda.library_path()).env("CUDA_MAJOR", &m);
                if guarded {
                    cmd.env("LD_PRELOAD", guard_lib()).env("CUBLASGUARD_TRACE", &trace_path);
                }
                Run { output: cmd.output().expect("run"), dir, trace_path }
            };
            let (bare, guarded) = (run(false), run(true));
            assert!(
                bare.stdout().contains(
                    "create=1
"
                ),
                "CUDA {m} {case}: no GPU, so NOT_INITIALIZED: {}",
                bare.stdout()
            );
            assert_eq!(bare.stdout(), guarded.stdout(), "CUDA {m} {case}: {}", guarded.stderr());
            let t = guarded.trace();
            assert_eq!(t.summary.calls.get("cublasCreate_v2"), Some(&1), "CUDA {m} {case}: {:?}", t.summary.calls);
            let create = t.faults.iter().find(|f| f.api == "cublasCreate_v2").unwrap_or_else(|| panic!("CUDA {m} {case}: {:#?}", t.faults));
            assert_eq!((create.kind, create.status), (FaultKind::InitFailed, 1), "CUDA {m} {case}");
            assert_eq!(create.cause.as_ref().map(|c| c.kind), Some(InitCauseKind::NoDriver), "CUDA {m} {case}");
        }
    }
}
