//! The doctor's checks of the GPU's health (the stand-in NVML, shims/nvml.c, with injected
//! readings), of a WSL2 layout (presented in a mount namespace: `unshare -m` as root, as CI
//! runs; skipped with a message where that is not permitted), of the CUDA cache folder, and of
//! a libcublasLt of another release shadowing libcublas.

use crate::common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

type Checks = Vec<(String, String, String, String)>;

fn stand_in_path(parts: &[&str]) -> String {
    let s = standin();
    parts.iter().map(|p| s.join(p).display().to_string()).collect::<Vec<_>>().join(":")
}

/// `cublasguard doctor --json` with `env` on a clean environment (HOME: an empty folder, no
/// frameworks on PYTHONPATH), killed (and the test failed) past `limit`.
fn doctor_env(library_path: &str, env: &[(&str, &str)], extra: &[&str], limit: Duration) -> (Checks, Output) {
    let mut cmd = Command::new(cli());
    cmd.args(["doctor", "--json"]).args(extra);
    clean_environment(&mut cmd, "doctor-home", library_path, env);
    let out = wait_within(cmd, limit);
    (checks_of(&out), out)
}

/// A clean environment for the doctor: PATH, HOME and PYTHONPATH an empty folder named after
/// `home` (no frameworks), `library_path`, then `env`.
fn clean_environment(cmd: &mut Command, home: &str, library_path: &str, env: &[(&str, &str)]) {
    let home = temp_dir(home);
    cmd.env_clear().env("PATH", std::env::var("PATH").unwrap_or_default()).env("HOME", &home).env("PYTHONPATH", &home).env("LD_LIBRARY_PATH", library_path);
    for (k, v) in env {
        cmd.env(k, v);
    }
}

fn wait_within(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("doctor");
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the doctor did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

fn checks_of(out: &Output) -> Checks {
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\nstderr: {}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)));
    v.as_array()
        .expect("array")
        .iter()
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (s("name"), s("status"), s("evidence"), s("fix"))
        })
        .collect()
}

fn doctor(library_path: &str, env: &[(&str, &str)]) -> (Checks, Output) {
    doctor_env(library_path, env, &[], Duration::from_secs(120))
}

fn named<'a>(checks: &'a Checks, name: &str) -> Vec<&'a (String, String, String, String)> {
    checks.iter().filter(|c| c.0 == name).collect()
}

fn with_nvml() -> String {
    stand_in_path(&["lib", "driver", "nvml"])
}

#[test]
fn the_stand_in_nvml_reports_each_devices_health_and_names_it_as_the_stand_in() {
    let (checks, out) = doctor(&with_nvml(), &[("CUDASHIM_DEVICE_COUNT", "2")]);
    let health = named(&checks, "gpu health");
    assert_eq!(health.len(), 2, "{checks:#?}");
    for (i, c) in health.iter().enumerate() {
        assert_eq!(c.1, "ok", "{c:?}");
        assert!(c.2.starts_with(&format!("stand-in device {i}: cudashim stand-in NVML device {i} (cublasguard's stand-in NVML at ")), "{}", c.2);
        assert!(c.2.contains("no GPU") && !c.2.contains("GPU 0:"), "never a GPU: {}", c.2);
        assert!(
            c.2.contains("persistence mode on, ECC on") && c.2.contains("0 corrected / 0 uncorrected") && c.2.contains("45 C (slowdown 90 C, shutdown 95 C)"),
            "{}",
            c.2
        );
    }
    assert!(!checks.iter().any(|c| c.0.starts_with("gpu ") && c.0 != "gpu health"), "a healthy stand-in has no problems: {checks:#?}");
    assert_eq!(out.status.code(), Some(0), "{checks:#?}");
}

#[test]
fn pending_remapped_rows_double_bit_errors_and_pending_retirements_fail_with_the_reset_advice() {
    let (checks, out) =
        doctor(&with_nvml(), &[("CUDASHIM_NVML_REMAPPED", "0,2,1,0"), ("CUDASHIM_NVML_ECC_UNCORRECTED", "3,5"), ("CUDASHIM_NVML_RETIRED_PENDING", "1")]);
    let memory = named(&checks, "gpu memory");
    assert_eq!(memory.len(), 3, "{checks:#?}");
    assert!(memory.iter().all(|c| c.1 == "fail" && c.2.starts_with("stand-in device 0: ") && c.3.contains("reset")), "{memory:#?}");
    assert!(memory[0].2.contains("3 uncorrected (double-bit) ECC error(s) since the driver loaded"), "{}", memory[0].2);
    assert!(memory[1].2.contains("row remapping is pending"), "{}", memory[1].2);
    assert!(memory[2].2.contains("page retirement is pending"), "{}", memory[2].2);
    assert_eq!(out.status.code(), Some(1), "a failure is exit status 1");
    // A failed remapping: the GPU is to be replaced.
    let (checks, _) = doctor(&with_nvml(), &[("CUDASHIM_NVML_REMAPPED", "0,0,0,1")]);
    let failed = named(&checks, "gpu memory");
    assert_eq!(failed.len(), 1, "{checks:#?}");
    assert!(failed[0].1 == "fail" && failed[0].2.contains("row remapping failed") && failed[0].3.contains("RMA"), "{failed:?}");
    // Lifetime errors alone, none since the driver loaded: a warning.
    let (checks, _) = doctor(&with_nvml(), &[("CUDASHIM_NVML_ECC_UNCORRECTED", "0,4")]);
    let past = named(&checks, "gpu memory");
    assert!(past.len() == 1 && past[0].1 == "warn" && past[0].2.contains("4 uncorrected ECC error(s) in its lifetime"), "{checks:#?}");
}

#[test]
fn throttling_and_heat_warn_and_the_shutdown_threshold_fails() {
    let (checks, out) = doctor(
        &with_nvml(),
        &[("CUDASHIM_NVML_CLOCK_REASONS", "0x84"), ("CUDASHIM_NVML_TEMP", "91"), ("CUDASHIM_NVML_PCIE_REPLAYS", "12"), ("CUDASHIM_NVML_PERSISTENCE", "0")],
    );
    let clocks = named(&checks, "gpu clocks");
    assert!(clocks.len() == 1 && clocks[0].1 == "warn", "{checks:#?}");
    assert!(clocks[0].2.contains("power brake") && !clocks[0].2.contains("SwPowerCap"), "the power cap alone is normal: {}", clocks[0].2);
    let heat = named(&checks, "gpu temperature");
    assert!(heat.len() == 1 && heat[0].1 == "warn" && heat[0].2.contains("91 C, at or above its slowdown threshold (90 C)"), "{checks:#?}");
    let pcie = named(&checks, "gpu pcie");
    assert!(pcie.len() == 1 && pcie[0].1 == "warn" && pcie[0].2.contains("12 PCIe replay(s)"), "{checks:#?}");
    assert!(named(&checks, "gpu health")[0].2.contains("persistence mode off"), "{checks:#?}");
    assert_eq!(out.status.code(), Some(0), "warnings only");
    let (checks, out) = doctor(&with_nvml(), &[("CUDASHIM_NVML_TEMP", "97")]);
    let heat = named(&checks, "gpu temperature");
    assert!(heat.len() == 1 && heat[0].1 == "fail" && heat[0].2.contains("shutdown threshold (95 C)"), "{checks:#?}");
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn a_hanging_nvml_init_is_left_off_with_a_warning_and_the_doctor_finishes() {
    // nvmlInit_v2 sleeps for an hour; the test kills the doctor (and fails) if it waits for it.
    let (checks, out) = doctor_env(&with_nvml(), &[("CUDASHIM_NVML_HANG", "1")], &["--nvml-timeout", "1"], Duration::from_secs(60));
    let health = named(&checks, "gpu health");
    assert_eq!(health.len(), 1, "{checks:#?}");
    assert_eq!(health[0].1, "warn");
    assert!(health[0].2.contains("did not start") && health[0].2.contains("left off"), "{}", health[0].2);
    // Every other check ran and the verdict is the usual one.
    for name in ["driver", "devices", "cublas pair", "cuda cache", "guard"] {
        assert!(!named(&checks, name).is_empty(), "no {name} check: {checks:#?}");
    }
    assert_eq!(out.status.code(), Some(0), "a warning, not a failure");
}

#[test]
fn without_nvml_the_doctor_notes_it_and_its_other_checks_are_unchanged() {
    let (without, out) = doctor(&stand_in_path(&["lib", "driver"]), &[]);
    let health = named(&without, "gpu health");
    assert_eq!(health.len(), 1, "{without:#?}");
    assert_eq!(health[0].1, "info", "a missing NVML is no failure: {health:?}");
    assert!(health[0].2.starts_with("no NVML (libnvidia-ml.so.1"), "{}", health[0].2);
    assert_eq!(out.status.code(), Some(0));
    let (with, _) = doctor(&with_nvml(), &[]);
    let others = |c: &Checks| -> Vec<(String, String)> { c.iter().filter(|c| !c.0.starts_with("gpu ")).map(|c| (c.0.clone(), c.1.clone())).collect() };
    assert_eq!(others(&without), others(&with));
    // The text form says it as a note, and the machine still passes as it did.
    let text = Command::new(cli())
        .arg("doctor")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("LD_LIBRARY_PATH", stand_in_path(&["lib", "driver"]))
        .output()
        .expect("doctor");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("info gpu health") && text.contains("No failures; see the warnings above."), "{text}");
}

#[test]
fn an_nvml_of_another_release_than_the_kernel_module_fails_with_the_reboot_advice() {
    let (checks, out) = doctor(&with_nvml(), &[("CUDASHIM_NVML_INIT_ERROR", "18")]);
    let health = named(&checks, "gpu health");
    assert!(health.len() == 1 && health[0].1 == "fail", "{checks:#?}");
    assert!(health[0].2.contains("Driver/library version mismatch (18)") && health[0].3.contains("reboot"), "{health:?}");
    assert_eq!(out.status.code(), Some(1));
}

/// A folder holding a copy of the stand-in's libcublasLt as `libcublasLt.so.12.1.0`, reached by
/// its soname: another release's, as a system CUDA toolkit's would be.
fn other_cublaslt() -> PathBuf {
    let dir = temp_dir("other-cublaslt");
    std::fs::copy(standin().join("lib/libcublasLt.so.12"), dir.join("libcublasLt.so.12.1.0")).unwrap();
    std::os::unix::fs::symlink("libcublasLt.so.12.1.0", dir.join("libcublasLt.so.12")).unwrap();
    dir
}

#[test]
fn a_libcublaslt_of_another_release_first_on_the_library_path_fails_naming_both() {
    let other = other_cublaslt();
    let path = format!("{}:{}", other.display(), stand_in_path(&["lib", "driver"]));
    let (checks, out) = doctor(&path, &[("CUDASHIM_CUBLASLT_VERSION", "120100")]);
    let pair = named(&checks, "cublas pair");
    assert_eq!(pair.len(), 1, "{checks:#?}");
    assert_eq!(pair[0].1, "fail");
    let lib = standin().join("lib");
    assert!(pair[0].2.contains(&format!("libcublas.so.12 12.9.3 at {}", lib.join("libcublas.so.12").display())), "{}", pair[0].2);
    assert!(pair[0].2.contains(&format!("libcublasLt.so.12 12.1.0 at {}", other.join("libcublasLt.so.12").display())), "{}", pair[0].2);
    assert!(pair[0].3.contains("pytorch#174320"), "{}", pair[0].3);
    assert_eq!(out.status.code(), Some(1));
    // The same release from another folder: a warning. One folder: fine.
    let (checks, _) = doctor(&path, &[]);
    assert_eq!(named(&checks, "cublas pair")[0].1, "warn", "{checks:#?}");
    let (checks, _) = doctor(&stand_in_path(&["lib", "driver"]), &[]);
    let fine = named(&checks, "cublas pair");
    assert!(fine[0].1 == "ok" && fine[0].2.starts_with("one folder, one release: libcublas.so.12 12.9.3"), "{fine:?}");
}

/// A folder holding a libcublas that exports no cublasGetProperty, as `file` (with the soname
/// `libcublas.so.12` linked to it when the names differ).
fn silent_cublas(label: &str, file: &str) -> PathBuf {
    let dir = temp_dir(label);
    let source = dir.join("silent.c");
    std::fs::write(&source, "int cublasCreate_v2(void **h) { (void)h; return 1; }\n").unwrap();
    let status =
        std::process::Command::new("cc").args(["-shared", "-fPIC", "-Wl,-soname,libcublas.so.12", "-o"]).arg(dir.join(file)).arg(&source).status().expect("cc");
    assert!(status.success());
    if file != "libcublas.so.12" {
        std::os::unix::fs::symlink(file, dir.join("libcublas.so.12")).unwrap();
    }
    dir
}

#[test]
fn a_cublas_pair_whose_release_cannot_be_read_is_unknown_not_ok_and_the_file_name_gives_it() {
    // The release from the file's name, the folder from the loader: one release, two folders.
    let named_dir = silent_cublas("silent-cublas-named", "libcublas.so.12.9.3.13");
    let (checks, _) = doctor(&format!("{}:{}", named_dir.display(), stand_in_path(&["lib", "driver"])), &[]);
    let pair = named(&checks, "cublas pair");
    assert_eq!(pair.len(), 1, "{checks:#?}");
    assert!(pair[0].2.contains(&format!("libcublas.so.12 12.9.3 at {}", named_dir.join("libcublas.so.12").display())), "{pair:?}");
    assert_eq!(pair[0].1, "warn", "{pair:?}");
    assert!(pair[0].2.starts_with("one release from two folders"), "{pair:?}");
    // Neither the library nor its file's name says the release: unknown, not ok.
    let bare_dir = silent_cublas("silent-cublas-bare", "libcublas.so.12");
    let (checks, _) = doctor(&format!("{}:{}", bare_dir.display(), stand_in_path(&["lib", "driver"])), &[]);
    let pair = named(&checks, "cublas pair");
    assert_eq!(pair[0].1, "warn", "{pair:?}");
    assert!(pair[0].2.starts_with("release unknown: libcublas.so.12 release unknown at "), "{pair:?}");
    assert!(!pair[0].2.contains("unknown file") && !pair[0].2.contains("one folder, one release"), "{pair:?}");
}

#[test]
fn a_cache_folder_that_cannot_be_created_fails_naming_the_fix() {
    let dir = temp_dir("cache-under-a-file");
    std::fs::write(dir.join("file"), b"").unwrap();
    let cache = dir.join("file/ComputeCache");
    let (checks, out) = doctor(&stand_in_path(&["lib", "driver"]), &[("CUDA_CACHE_PATH", cache.to_str().unwrap())]);
    let c = named(&checks, "cuda cache");
    assert!(c.len() == 1 && c[0].1 == "fail", "{checks:#?}");
    assert!(c[0].2.contains("(CUDA_CACHE_PATH) cannot be created") && c[0].2.contains("is a file"), "{}", c[0].2);
    assert!(c[0].3.contains("torch/cutorch#677") && c[0].3.contains("chown") && c[0].3.contains("CUDA_CACHE_PATH"), "{}", c[0].3);
    assert_eq!(out.status.code(), Some(1));
    // Missing but creatable, and existing and writable: fine.
    let (checks, _) = doctor(&stand_in_path(&["lib", "driver"]), &[]);
    let c = named(&checks, "cuda cache");
    assert!(c[0].1 == "ok" && c[0].2.contains(".nv/ComputeCache (the default) does not exist yet"), "{c:?}");
    let writable = temp_dir("cache-writable");
    let (checks, _) = doctor(&stand_in_path(&["lib", "driver"]), &[("CUDA_CACHE_PATH", writable.to_str().unwrap())]);
    assert_eq!(named(&checks, "cuda cache")[0].1, "ok", "{checks:#?}");
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Whether this test may make a mount namespace (`unshare -m`, as root).
fn mount_namespaces() -> bool {
    is_root() && Command::new("unshare").args(["-m", "true"]).status().is_ok_and(|s| s.success())
}

/// The doctor run by `sh -c "SETUP; exec cublasguard doctor --json"` inside a new mount namespace,
/// so SETUP's mounts are this run's only.
fn doctor_in_namespace(setup: &str, library_path: &str, env: &[(&str, &str)]) -> (Checks, Output) {
    let script = format!("set -e\nmount --make-rprivate /\n{setup}\nexec \"$0\" doctor --json");
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "sh", "-c", &script]).arg(cli());
    clean_environment(&mut cmd, "ns-home", library_path, env);
    let out = wait_within(cmd, Duration::from_secs(120));
    (checks_of(&out), out)
}

/// Shell lines that present WSL2's layout: a kernel release naming Microsoft, /dev/dxg, and the
/// Windows driver's libcuda.so.1 (the stand-in's) in /usr/lib/wsl/lib, each on a tmpfs or an
/// overlay of this namespace, so nothing outside it changes.
fn wsl_layout(scratch: &Path) -> String {
    let s = standin();
    let t = scratch.display();
    format!(
        "mount -t tmpfs tmpfs {t}\n\
         mkdir {t}/u {t}/w {t}/du {t}/dw\n\
         mount -t overlay overlay -o lowerdir=/usr/lib,upperdir={t}/u,workdir={t}/w /usr/lib\n\
         mkdir -p /usr/lib/wsl/lib\n\
         cp {driver} {nvml} /usr/lib/wsl/lib/\n\
         mount -t overlay overlay -o lowerdir=/dev,upperdir={t}/du,workdir={t}/dw /dev\n\
         touch /dev/dxg\n\
         echo 5.15.167.4-microsoft-standard-WSL2 > {t}/osrelease\n\
         mount --bind {t}/osrelease /proc/sys/kernel/osrelease",
        driver = s.join("driver/libcuda.so.1").display(),
        nvml = s.join("nvml/libnvidia-ml.so.1").display(),
    )
}

#[test]
fn a_wsl2_layout_passes_with_the_windows_driver_and_fails_with_a_linux_driver_inside() {
    if !mount_namespaces() {
        eprintln!("skipped: presenting a WSL2 layout needs a mount namespace (unshare -m, as root)");
        return;
    }
    let layout = wsl_layout(&temp_dir("wsl-good"));
    let lib = stand_in_path(&["lib"]);
    let (checks, out) = doctor_in_namespace(&layout, &format!("/usr/lib/wsl/lib:{lib}"), &[]);
    let wsl = named(&checks, "wsl2");
    assert_eq!(wsl.len(), 1, "{checks:#?}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(wsl[0].1, "ok", "{wsl:?}");
    assert!(wsl[0].2.contains("microsoft-standard-WSL2") && wsl[0].2.contains("libcuda.so.1 resolves to /usr/lib/wsl/lib/libcuda.so.1"), "{}", wsl[0].2);
    // NVML comes from WSL's folder too, and its device is still the stand-in's.
    assert!(named(&checks, "gpu health")[0].2.contains("stand-in NVML at /usr/lib/wsl/lib/libnvidia-ml.so.1"), "{checks:#?}");

    // A Linux driver inside: its libcuda.so.1 first on the library path, its kernel module loaded.
    let bad = format!("{}\nmount -t tmpfs tmpfs /sys/module\nmkdir /sys/module/nvidia", wsl_layout(&temp_dir("wsl-bad")));
    let driver = standin().join("driver");
    let (checks, out) = doctor_in_namespace(&bad, &format!("{}:/usr/lib/wsl/lib:{lib}", driver.display()), &[]);
    let wsl = named(&checks, "wsl2");
    assert!(wsl.iter().all(|c| c.1 == "fail" && c.3.contains("never a Linux one inside WSL")), "{wsl:#?}");
    assert!(wsl.iter().any(|c| c.2.contains(&format!("libcuda.so.1 resolves to {}", driver.join("libcuda.so.1").display()))), "{wsl:#?}");
    assert!(wsl.iter().any(|c| c.2.contains("nvidia kernel module is loaded inside WSL (/sys/module/nvidia)")), "{wsl:#?}");
    assert_eq!(out.status.code(), Some(1));

    // Without /dev/dxg, WSL gives no GPU.
    let no_dxg = format!("{}\nrm /dev/dxg", wsl_layout(&temp_dir("wsl-no-dxg")));
    let (checks, _) = doctor_in_namespace(&no_dxg, &format!("/usr/lib/wsl/lib:{lib}"), &[]);
    assert!(named(&checks, "wsl2").iter().any(|c| c.1 == "fail" && c.2.contains("without /dev/dxg")), "{checks:#?}");
}

#[test]
fn an_existing_cache_folder_this_user_cannot_write_fails() {
    let dir = temp_dir("cache-read-only");
    let nv = dir.join(".nv");
    std::fs::create_dir_all(nv.join("ComputeCache")).unwrap();
    let cache = nv.join("ComputeCache");
    let cache_text = cache.display().to_string();
    let (checks, _) = if is_root() {
        // Root writes anywhere its file system lets it: a read-only bind mount is what stops it.
        if !mount_namespaces() {
            eprintln!("skipped: as root, an unwritable folder needs a read-only bind mount (unshare -m)");
            return;
        }
        let setup = format!("mount --bind {n} {n}\nmount -o remount,bind,ro {n}", n = nv.display());
        doctor_in_namespace(&setup, &stand_in_path(&["lib", "driver"]), &[("CUDA_CACHE_PATH", &cache_text)])
    } else {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o555)).unwrap();
        let result = doctor(&stand_in_path(&["lib", "driver"]), &[("CUDA_CACHE_PATH", &cache_text)]);
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o755)).unwrap();
        result
    };
    let c = named(&checks, "cuda cache");
    assert!(c.len() == 1 && c[0].1 == "fail", "{checks:#?}");
    assert!(c[0].2.contains(&format!("{cache_text} (CUDA_CACHE_PATH) is not writable by this user")), "{}", c[0].2);
    assert!(c[0].3.contains("torch/cutorch#677"), "{}", c[0].3);
}

#[test]
fn a_trace_whose_libcublaslt_came_from_another_folder_says_so_in_the_report() {
    // A program linked with both (a GemmEx with a NaN in A, so the trace is written).
    let other = other_cublaslt();
    let program = build_c("dumps", &["dumps.c"], false);
    let host = temp_dir("pair-host");
    let host = host.display().to_string();
    let args = ["ex", "f32", host.as_str()];
    let path = format!("{}:{}", other.display(), stand_in_path(&["lib", "driver"]));
    let run = common::run(Launch { env: &[("LD_LIBRARY_PATH", &path)], ..Launch::new(&program, &args) });
    let trace = run.trace();
    let lt = trace.environment.libraries.iter().find(|l| l.soname.starts_with("libcublasLt")).expect("libcublasLt is recorded");
    assert!(lt.path.starts_with(&other.display().to_string()), "{lt:?}");
    let out = Command::new(cli()).arg("report").arg(&run.trace_path).output().expect("report");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("and libcublasLt (") && report.contains("are from different folders") && report.contains("pytorch#174320"), "{report}");
    // One folder: no note.
    let fine = common::run(Launch::new(&program, &args));
    let out = Command::new(cli()).arg("report").arg(&fine.trace_path).output().expect("report");
    assert!(!String::from_utf8_lossy(&out.stdout).contains("pytorch#174320"));
}

#[test]
#[cfg_attr(not(cublasguard_has_nvidia), ignore = "needs NVIDIA's wheels: run scripts/fetch-nvidia.sh")]
fn nvidias_own_cublas_pair_is_read_by_release_and_a_libcublaslt_shadowing_it_fails() {
    let root = cache_dir();
    let cu12 = [root.join("nvidia-cu12/nvidia/cuda_runtime/lib"), root.join("nvidia-cu12/nvidia/cublas/lib")];
    let wheel = cu12.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(":");
    let (checks, _) = doctor(&wheel, &[]);
    let pair = named(&checks, "cublas pair");
    assert_eq!(pair.len(), 1, "{checks:#?}");
    assert_eq!(pair[0].1, "ok", "{pair:?}");
    let lib = cu12[1].display();
    assert!(
        pair[0].2.contains(&format!("libcublas.so.12 12.9.3 at {lib}/libcublas.so.12, libcublasLt.so.12 12.9.3 at {lib}/libcublasLt.so.12")),
        "{}",
        pair[0].2
    );
    // A second copy of its libcublasLt first on the path, as a system CUDA's would be: loaded
    // before libcublas (as by a program linking both), it is the one libcublas gets.
    let other = temp_dir("other-nvidia-cublaslt");
    std::fs::copy(cu12[1].join("libcublasLt.so.12"), other.join("libcublasLt.so.12")).unwrap();
    let (checks, _) = doctor(&format!("{}:{wheel}", other.display()), &[]);
    let pair = named(&checks, "cublas pair");
    assert!(pair.len() == 1 && pair[0].1 == "warn", "{checks:#?}");
    assert!(pair[0].2.contains(&format!("libcublasLt.so.12 12.9.3 at {}/libcublasLt.so.12", other.display())), "{}", pair[0].2);
}

#[test]
fn a_trace_records_the_libcublaslt_release_and_the_report_names_a_pair_of_two_releases() {
    // One folder, but the libcublasLt says it is of another release (pytorch#174320's shadowing
    // copy, as the process itself saw it).
    let program = build_c("dumps", &["dumps.c"], false);
    let host = temp_dir("pair-release");
    let host = host.display().to_string();
    let args = ["ex", "f32", host.as_str()];
    let run = common::run(Launch { env: &[("CUDASHIM_CUBLASLT_VERSION", "130100")], ..Launch::new(&program, &args) });
    let env = run.trace().environment;
    assert_eq!(env.cublaslt_version, Some(130100));
    let cublas = env.cublas_version.expect("cuBLAS's own version");
    let out = Command::new(cli()).arg("report").arg(&run.trace_path).output().expect("report");
    let report = String::from_utf8_lossy(&out.stdout);
    let expected = format!("of different releases (cuBLAS {}.{}.{}, cuBLASLt 13.1.0)", cublas / 10000, cublas / 100 % 100, cublas % 100);
    assert!(report.contains(&expected) && report.contains("pytorch#174320"), "{report}");
    // The stand-in's own pair: the same release, no note.
    let fine = common::run(Launch::new(&program, &args));
    assert_eq!(fine.trace().environment.cublaslt_version.map(|v| v / 100), Some(cublas / 100));
}
