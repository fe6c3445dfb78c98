//! The on-device scan, from its one source (crates/preload/src/kernels/nonfinite.cu): its PTX (made by NVRTC,
//! scripts/gen-ptx.sh) assembles with NVIDIA's ptxas for Volta to Blackwell; its host build,
//! which the stand-in driver runs for cuLaunchKernel, agrees with the guard's host scan on
//! random data in every dtype; and the guard takes the device path on the stand-in, with the
//! host path's verdicts, or falls back once when the driver refuses the module.
//!
//! ptxas comes from PyPI's nvidia-cuda-nvcc-cu12 wheel (scripts/fetch-nvidia.sh); without it
//! the assembly test says so and passes, unless CUBLASGUARD_REQUIRE_NVIDIA=1 (.ci/run).

use crate::common;

use common::*;
use cublasguard_format::trace::FaultKind;
use std::path::PathBuf;
use std::process::Command;

fn ptxas() -> PathBuf {
    let cache = cache_dir();
    let ptxas = cache.join("nvidia-nvcc-cu12/nvidia/cuda_nvcc/bin/ptxas");
    if ptxas.exists() && cache.join("nvidia-nvcc-cu12/.complete").exists() {
        return ptxas;
    }
    // The tests that call this run only where scripts/fetch-nvidia.sh ran (build.rs).
    panic!("ptxas missing: run scripts/fetch-nvidia.sh");
}

#[test]
#[cfg_attr(not(cublasguard_has_nvidia), ignore = "needs NVIDIA's wheels: run scripts/fetch-nvidia.sh")]
fn the_scan_kernel_assembles_for_volta_ampere_hopper_and_blackwell() {
    let ptxas = ptxas();
    let ptx = manifest_dir().join("crates/preload/src/ptx/nonfinite.ptx");
    let dir = temp_dir("ptxas");
    for arch in ["sm_70", "sm_80", "sm_90", "sm_100"] {
        let out =
            Command::new(&ptxas).arg(format!("-arch={arch}")).arg("-o").arg(dir.join(format!("nonfinite.{arch}.cubin"))).arg(&ptx).output().expect("run ptxas");
        assert!(out.status.success(), "{arch}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(dir.join(format!("nonfinite.{arch}.cubin")).metadata().unwrap().len() > 0);
    }
}

#[test]
fn a_driver_that_refuses_the_module_makes_the_device_scan_fall_back_to_the_host_once() {
    let env = [("CUBLASGUARD_DEVICE_SCAN", "on"), ("CUDASHIM_REFUSE_MODULES", "1")];
    let run = scenario("nan_a", &env);
    let t = run.trace();
    let f = only_fault(&t);
    assert_eq!(f.kind, FaultKind::NonfiniteInput, "the host scan found it");
    let a = f.operands.iter().find(|o| o.name == "A").unwrap();
    assert_eq!((a.nan, a.scan_path.as_deref()), (Some(1), Some("host")));
    let why = t.environment.device_scan_fallback.as_deref().expect("the fallback is recorded");
    assert!(why.contains("cuModuleLoadData failed: 200"), "{why}");
    assert_eq!(run.stderr().matches("the on-device scan is off").count(), 1, "asked for with on: said once: {}", run.stderr());
    // By default (auto) a driver that cannot run the kernel is no news: recorded, not said.
    let run = scenario("nan_a", &[("CUDASHIM_REFUSE_MODULES", "1")]);
    let t = run.trace();
    assert!(t.environment.device_scan_fallback.as_deref().is_some_and(|w| w.contains("cuModuleLoadData")));
    assert_eq!(run.stderr().matches("the on-device scan is off").count(), 0, "{}", run.stderr());
    assert_eq!(only_fault(&t).operands[0].scan_path.as_deref(), Some("host"));
}

#[test]
fn a_kernel_that_answers_its_self_test_wrong_is_never_trusted_and_says_what_differed() {
    // The stand-in's deliberately wrong build swaps the NaN and Inf counts.
    let run = scenario("nan_a", &[("CUDASHIM_WRONG_KERNEL", "1")]);
    let t = run.trace();
    let why = t.environment.device_scan_fallback.as_deref().expect("recorded");
    assert!(why.starts_with("its self-test failed: f64: the kernel found 1 NaN, 2 Inf, first at Some((3, 2)); the host scan finds 2 NaN, 1 Inf"), "{why}");
    assert_eq!(run.stderr().matches("the on-device scan is off (its self-test failed").count(), 1, "said once, even in auto: {}", run.stderr());
    let a = only_fault(&t).operands.iter().find(|o| o.name == "A").unwrap();
    let host = scenario("nan_a", &[("CUBLASGUARD_DEVICE_SCAN", "off")]).trace();
    let h = only_fault(&host).operands.iter().find(|o| o.name == "A").unwrap();
    assert_eq!((a.nan, a.inf, a.scan_path.as_deref()), (h.nan, h.inf, Some("host")), "the verdict comes from the host scan");
}

#[test]
fn the_device_scan_is_the_default_where_the_kernel_runs_and_off_forces_the_host() {
    let t = scenario("nan_a", &[]).trace();
    assert!(t.environment.device_scan_fallback.is_none(), "{:?}", t.environment.device_scan_fallback);
    assert_eq!(only_fault(&t).operands[0].scan_path.as_deref(), Some("device"));
    let t = scenario("nan_a", &[("CUBLASGUARD_DEVICE_SCAN", "off")]).trace();
    assert_eq!(only_fault(&t).operands[0].scan_path.as_deref(), Some("host"));
}

#[test]
fn on_the_stand_in_the_device_scan_runs_the_kernel_and_agrees_with_the_host_scan() {
    for case in ["nan_a", "nan_c_beta1", "overflow", "tf32_overflow", "big_nan", "device_scalars", "clean"] {
        let host = scenario(case, &[("CUBLASGUARD_DEVICE_SCAN", "off")]).trace();
        let device = scenario(case, &[("CUBLASGUARD_DEVICE_SCAN", "on")]).trace();
        assert!(device.environment.device_scan_fallback.is_none(), "{case}: {:?}", device.environment.device_scan_fallback);
        assert_eq!(host.faults.len(), device.faults.len(), "{case}");
        for (h, d) in host.faults.iter().zip(&device.faults) {
            // The same words, the kernel fault a host-memory scalar causes included.
            assert_eq!((h.kind, without_addresses(&h.message)), (d.kind, without_addresses(&d.message)), "{case}: the same verdict");
            for (ho, dop) in h.operands.iter().zip(&d.operands) {
                assert_eq!((ho.nan, ho.inf, &ho.first_nonfinite), (dop.nan, dop.inf, &dop.first_nonfinite), "{case} {}", ho.name);
                if dop.scanned {
                    assert_eq!((ho.scan_path.as_deref(), dop.scan_path.as_deref()), (Some("host"), Some("device")), "{case} {}", ho.name);
                }
            }
        }
    }
}

/// The kernel's host build, as the stand-in driver runs it: NaN count, Inf count, first index.
fn kernel_on_host(data: &[u8], rows: u64, cols: u64, ld: u64, kind: u32, grid: u32, block: u32) -> [u64; 3] {
    type Run = unsafe extern "C" fn(*mut *mut std::ffi::c_void, u32, u32) -> i32;
    // SAFETY: the stand-in driver, loaded for its exported launcher.
    let lib = unsafe { libloading::Library::new(standin().join("driver/libcuda.so.1")) }.expect("the stand-in driver");
    // SAFETY: the launcher's C signature (crates/preload/src/kernels/host_launch.cpp).
    let launch = unsafe { lib.get::<Run>(b"cudashim_run_nonfinite\0") }.expect("the kernel launcher");
    let mut result = [0u64, 0, u64::MAX];
    let (mut d, mut r, mut c, mut l, mut k, mut o) = (data.as_ptr() as u64, rows, cols, ld, kind, result.as_mut_ptr() as u64);
    let mut params: [*mut std::ffi::c_void; 6] =
        [&mut d as *mut u64 as _, &mut r as *mut u64 as _, &mut c as *mut u64 as _, &mut l as *mut u64 as _, &mut k as *mut u32 as _, &mut o as *mut u64 as _];
    // SAFETY: six live parameters as the kernel declares them; `data` holds the whole matrix and
    // `result` three u64.
    assert_eq!(unsafe { launch(params.as_mut_ptr(), grid, block) }, 0);
    result
}

struct Slice<'a>(&'a [u8]);

impl cublasguard_format::scan::DeviceReader for Slice<'_> {
    fn read(&self, addr: u64, out: &mut [u8]) -> Result<(), i32> {
        let at = addr as usize;
        out.copy_from_slice(self.0.get(at..at + out.len()).ok_or(1)?);
        Ok(())
    }
}

#[test]
fn the_kernels_host_build_agrees_with_the_host_scan_in_every_dtype() {
    use cublasguard_format::scan::{scan_matrix, DType};
    use cublasguard_format::validate::StoredShape;
    // A small generator: reproducible without a dependency.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    // (cudaDataType, dtype, a NaN, an Inf) as bytes.
    type Planted = (u32, DType, Vec<u8>, Option<Vec<u8>>);
    let types: [Planted; 6] = [
        (0, DType::F32, f32::NAN.to_le_bytes().to_vec(), Some(f32::INFINITY.to_le_bytes().to_vec())),
        (1, DType::F64, f64::NAN.to_le_bytes().to_vec(), Some(f64::NEG_INFINITY.to_le_bytes().to_vec())),
        (2, DType::F16, 0x7e01u16.to_le_bytes().to_vec(), Some(0xfc00u16.to_le_bytes().to_vec())),
        (14, DType::BF16, 0xffc1u16.to_le_bytes().to_vec(), Some(0x7f80u16.to_le_bytes().to_vec())),
        (28, DType::F8E4M3, vec![0xff], None),
        (29, DType::F8E5M2, vec![0x7f], Some(vec![0xfc])),
    ];
    for (kind, dtype, nan, inf) in &types {
        let elem = dtype.size().unwrap() as usize;
        for trial in 0..40 {
            let rows = 1 + next() % 37;
            let cols = 1 + next() % 23;
            let ld = rows + next() % 5 * (trial % 2);
            let mut data: Vec<u8> = (0..(ld * cols) as usize * elem).map(|_| next() as u8 & 0x3c).collect();
            for _ in 0..next() % 4 {
                let at = (next() % (ld * cols)) as usize * elem;
                let special = if next() % 2 == 0 { nan } else { inf.as_ref().unwrap_or(nan) };
                data[at..at + elem].copy_from_slice(special);
            }
            let shape = StoredShape { rows: rows as i64, cols: cols as i64, ld: ld as i64 };
            let host = scan_matrix(&Slice(&data), 0, shape, *dtype, &mut Vec::new(), u64::MAX).unwrap();
            let (grid, block) = (1 + (next() % 7) as u32, [1, 32, 256][(next() % 3) as usize]);
            let [nan_count, inf_count, first] = kernel_on_host(&data, rows, cols, ld, *kind, grid, block);
            let first = (first != u64::MAX).then(|| (first % ld, first / ld));
            assert_eq!((nan_count, inf_count, first), (host.nan, host.inf, host.first_nonfinite), "{dtype:?} {rows}x{cols} ld {ld}, grid {grid} x {block}");
        }
    }
}

#[test]
fn a_failing_driver_call_of_the_scan_is_named_and_nothing_after_it_is_issued() {
    // Every cuMemsetD8Async fails: the scan must stop there, launching no kernel over a buffer
    // it never cleared, and fall back to the host scan naming the call.
    let dir = temp_dir("memset-fails");
    let counts = dir.join("driver-calls.txt");
    let counts_s = counts.display().to_string();
    let env = [("CUBLASGUARD_DEVICE_SCAN", "on"), ("CUDASHIM_FAIL_MEMSET", "1"), ("CUDASHIM_COUNT_DRIVER_CALLS", counts_s.as_str())];
    let run = scenario("nan_a", &env);
    let t = run.trace();
    let why = t.environment.device_scan_fallback.as_deref().expect("the fallback is recorded");
    assert!(why.contains("cuMemsetD8Async failed: 1"), "{why}");
    let a = only_fault(&t).operands.iter().find(|o| o.name == "A").unwrap();
    assert_eq!((a.nan, a.scan_path.as_deref()), (Some(1), Some("host")));
    let text = std::fs::read_to_string(&counts).expect("the driver's call counts");
    let launches: u64 = text.lines().filter_map(|l| l.strip_prefix("cuLaunchKernel ")).map(|n| n.trim().parse::<u64>().unwrap()).sum();
    assert_eq!(launches, 0, "no scan kernel was launched after the failed memset:\n{text}");
}

/// The scan launches a run made, from the stand-in's launch log: (kernel, grid x, grid y, block).
fn scan_launches(sm_count: &str) -> Vec<(String, u32, u32, u32)> {
    let dir = temp_dir(&format!("launch-log-{sm_count}"));
    let log = dir.join("launches.txt");
    let log_s = log.display().to_string();
    let env = [("CUBLASGUARD_DEVICE_SCAN", "on"), ("CUBLASGUARD_CHECKS", "nan"), ("CUDASHIM_SM_COUNT", sm_count), ("CUDASHIM_LAUNCH_LOG", log_s.as_str())];
    let run = scenario("tall_clean", &env);
    assert!(run.stdout().contains("sgemm status=0"), "{}", run.stderr());
    let t = run.trace();
    assert!(t.environment.device_scan_fallback.is_none(), "{:?}", t.environment.device_scan_fallback);
    assert!(t.faults.is_empty(), "{:?}", t.faults);
    let text = std::fs::read_to_string(&log).expect("the launch log");
    text.lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f[0].to_string(), f[1].parse().unwrap(), f[2].parse().unwrap(), f[3].parse().unwrap())
        })
        .collect()
}

#[test]
fn the_scan_grid_comes_from_the_devices_multiprocessors_not_from_the_element_count() {
    // The inputs' launch: two jobs (A: 4 MiB = 1024 segments of 4 KiB, B), 256 threads = 8 warps
    // a block, so A alone could use 128 blocks. A device of 2 SMs holds 2 x 2048 / 256 = 16
    // blocks at once: 8 per job. One of 64 SMs holds 512: the work (128) bounds it instead.
    let inputs = |launches: &[(String, u32, u32, u32)]| {
        launches.iter().find(|(k, _, gy, _)| k == "cublasguard_nonfinite_many" && *gy == 2).cloned().expect("the inputs' batched launch")
    };
    let small = scan_launches("2");
    assert_eq!(inputs(&small), ("cublasguard_nonfinite_many".to_string(), 8, 2, 256), "{small:?}");
    let large = scan_launches("64");
    assert_eq!(inputs(&large), ("cublasguard_nonfinite_many".to_string(), 128, 2, 256), "{large:?}");
}
