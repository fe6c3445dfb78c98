//! The doctor's GPU health readings through NVML (`libnvidia-ml.so.1`, which comes with the
//! driver): persistence and ECC mode, ECC counts, remapped rows, retired pages, temperature
//! against its thresholds, clock event reasons and PCIe replays, per device. NVML is never
//! required: a missing one is a note. It is loaded and initialised on a thread of its own under
//! a time limit (`nvmlInit` can take seconds without persistence mode and has hung on some
//! drivers): one that does not answer is left off with a warning and the doctor goes on. The
//! library is spoken to through cublasguard-nvml (crates/nvml), as the guard speaks to it.

use std::ffi::{c_int, c_void, CStr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub use cublasguard_format::gpu_health::GpuDevice as Device;
use cublasguard_format::gpu_health::TemperatureLimit;
use cublasguard_nvml::{Nvml, NVML_ERROR_LIB_RM_VERSION_MISMATCH};

use super::check::{check, Check, Status};

/// Set when NVML did not answer in time and its thread was left behind, maybe inside the
/// library: the command then ends without running the libraries' exit handlers.
static LEFT_HANGING: AtomicBool = AtomicBool::new(false);

pub fn left_hanging() -> bool {
    LEFT_HANGING.load(Ordering::Relaxed)
}

/// What NVML said.
#[derive(Clone, Debug, PartialEq)]
pub enum Reading {
    /// No libnvidia-ml.so.1 (or not one with nvmlInit_v2).
    Missing(String),
    /// nvmlInit_v2 (or loading the library) did not return within the limit.
    Hung(Duration),
    /// nvmlInit_v2 failed.
    InitFailed {
        code: i32,
        text: String,
        path: Option<PathBuf>,
    },
    Ready {
        path: Option<PathBuf>,
        standin: bool,
        devices: Vec<Device>,
    },
}

/// Loads and asks NVML on a thread of its own, for at most `limit`.
pub fn read(limit: Duration) -> Reading {
    let (tx, rx) = std::sync::mpsc::channel();
    let spawned = std::thread::Builder::new().name("nvml".into()).spawn(move || {
        let _ = tx.send(read_now());
    });
    if let Err(e) = spawned {
        return Reading::Missing(format!("no thread to ask it on: {e}"));
    }
    match rx.recv_timeout(limit) {
        Ok(reading) => reading,
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            LEFT_HANGING.store(true, Ordering::Relaxed);
            Reading::Hung(limit)
        }
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => Reading::Missing("its thread ended without an answer".into()),
    }
}

fn error_text(nvml: &Nvml, code: c_int) -> String {
    nvml.error_string_of(code).unwrap_or_else(|| format!("error {code}"))
}

fn read_now() -> Reading {
    // SAFETY: loading the driver's NVML runs its initialisers, as nvidia-smi does.
    let library = match unsafe { libloading::Library::new("libnvidia-ml.so.1") } {
        Ok(library) => library,
        Err(e) => return Reading::Missing(e.to_string()),
    };
    let find = |name: &CStr| {
        // SAFETY: only the symbol's address is taken; the table types it.
        unsafe { library.get::<*mut c_void>(name.to_bytes_with_nul()) }.map_or(std::ptr::null_mut(), |symbol| *symbol)
    };
    // SAFETY: `find` answers symbols of the one library loaded above, never unloaded (below).
    let nvml = unsafe { Nvml::resolve(find) };
    // Never unloaded: unloading a driver library is never worth the risk.
    std::mem::forget(library);
    let Some(init) = nvml.init else { return Reading::Missing("libnvidia-ml.so.1 has no nvmlInit_v2".into()) };
    let path = crate::cuda_table::object_file(init as *const c_void);
    let mut standin = nvml.standin;
    // SAFETY: nvmlInit_v2 takes no arguments. It is never shut down: the process ends soon.
    let code = unsafe { init() };
    if code != 0 {
        return Reading::InitFailed { code, text: error_text(&nvml, code), path };
    }
    let mut devices = Vec::new();
    for (index, handle) in nvml.device_handles() {
        // SAFETY: the handle NVML gave for `index`, after its nvmlInit.
        let device = unsafe { nvml.read_device(index, handle) };
        standin |= device.name.starts_with("cudashim stand-in");
        devices.push(device);
    }
    Reading::Ready { path, standin, devices }
}

fn on_off(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "on",
        Some(false) => "off",
        None => "n/a",
    }
}

/// The one-line summary of a device's readings.
fn summary(d: &Device) -> String {
    let mut parts = vec![format!("persistence mode {}, ECC {}", on_off(d.persistence_mode), on_off(d.ecc_mode))];
    if let Some(e) = &d.ecc {
        parts.push(format!(
            "ECC errors since the driver loaded {} corrected / {} uncorrected (lifetime {} / {})",
            e.corrected_volatile, e.uncorrected_volatile, e.corrected_aggregate, e.uncorrected_aggregate
        ));
    }
    if let Some(r) = &d.remapped_rows {
        parts.push(format!(
            "remapped rows {} corrected / {} uncorrected{}{}",
            r.corrected,
            r.uncorrected,
            if r.pending { ", a remapping pending" } else { "" },
            if r.failure { ", a remapping failed" } else { "" }
        ));
    }
    if d.retired_pages_pending == Some(true) {
        parts.push("a page retirement pending".into());
    }
    if let Some(t) = d.temperature_c {
        let limits: Vec<String> =
            [("slowdown", d.slowdown_c), ("shutdown", d.shutdown_c)].iter().filter_map(|(n, v)| Some(format!("{n} {} C", (*v)?))).collect();
        parts.push(if limits.is_empty() { format!("{t} C") } else { format!("{t} C ({})", limits.join(", ")) });
    }
    if let Some(r) = d.clock_event_reasons {
        parts.push(format!("clock event reasons {r:#x}"));
    }
    if let Some(n) = d.pcie_replays {
        parts.push(format!("PCIe replays {n}"));
    }
    parts.join("; ")
}

/// The checks from NVML's readings: one line per device, then one per problem found.
pub fn checks(reading: &Reading) -> Vec<Check> {
    let mut out = Vec::new();
    match reading {
        Reading::Missing(e) => out.push(check(
            "gpu health",
            Status::Info,
            format!("no NVML (libnvidia-ml.so.1, which comes with the driver): GPU health not read ({e})"),
            Some("in a container, NVIDIA_DRIVER_CAPABILITIES must include utility (the default) for the runtime to mount it"),
        )),
        Reading::Hung(limit) => out.push(check(
            "gpu health",
            Status::Warn,
            format!("NVML did not start within {} s (nvmlInit hangs): left off, GPU health not read", limit.as_secs()),
            Some("check nvidia-smi; enable persistence mode (nvidia-persistenced, or nvidia-smi -pm 1): without it the driver starts for every NVML client; an NVML that never returns points at the driver (see dmesg)"),
        )),
        Reading::InitFailed { code, text, path } => {
            let at = path.as_ref().map(|p| format!(" at {}", p.display())).unwrap_or_default();
            let (status, fix) = if *code == NVML_ERROR_LIB_RM_VERSION_MISMATCH {
                (Status::Fail, "the loaded nvidia kernel module is not the release of the driver's libraries (a driver upgraded without a reboot): reboot, or reload the nvidia modules")
            } else {
                (Status::Warn, "run nvidia-smi: it starts NVML the same way and says more")
            };
            out.push(check("gpu health", status, format!("NVML{at} failed to start: {text} ({code}); GPU health not read"), Some(fix)));
        }
        Reading::Ready { path, standin, devices } => {
            let at = path.as_ref().map(|p| format!(" at {}", p.display())).unwrap_or_default();
            if devices.is_empty() {
                out.push(check("gpu health", Status::Warn, format!("NVML{at} shows no device"), Some("check nvidia-smi and CUDA_VISIBLE_DEVICES is not what NVML sees: NVML lists every GPU of the machine")));
            }
            for d in devices {
                let evidence = if *standin {
                    format!("stand-in device {}: {} (cublasguard's stand-in NVML{at}, no GPU): {}", d.index, d.name, summary(d))
                } else {
                    format!("GPU {}: {}: {}", d.index, d.name, summary(d))
                };
                out.push(check("gpu health", Status::Ok, evidence, None));
                out.extend(problems(d, *standin));
            }
        }
    }
    out
}

/// The failures and warnings of one device's readings.
fn problems(d: &Device, standin: bool) -> Vec<Check> {
    let mut out = Vec::new();
    let who = if standin { format!("stand-in device {}", d.index) } else { format!("GPU {} ({})", d.index, d.name) };
    if let Some(e) = &d.ecc {
        if e.uncorrected_volatile > 0 {
            out.push(check(
                "gpu memory",
                Status::Fail,
                format!("{who}: {} uncorrected (double-bit) ECC error(s) since the driver loaded: its memory returned corrupt data", e.uncorrected_volatile),
                Some("drain the GPU and reset it (nvidia-smi -r, or reboot) before trusting its results (NVIDIA's Xid 48); if it comes back, have the GPU serviced"),
            ));
        } else if e.uncorrected_aggregate > 0 {
            out.push(check(
                "gpu memory",
                Status::Warn,
                format!("{who}: {} uncorrected ECC error(s) in its lifetime, none since the driver loaded", e.uncorrected_aggregate),
                Some("check that the bad memory was retired or remapped: nvidia-smi -q -d ROW_REMAPPER,PAGE_RETIREMENT"),
            ));
        }
    }
    if let Some(r) = &d.remapped_rows {
        if r.failure {
            out.push(check(
                "gpu memory",
                Status::Fail,
                format!("{who}: a row remapping failed: the GPU can no longer hide its bad memory (NVIDIA's Xid 64)"),
                Some("take the GPU out of service and have it replaced (RMA)"),
            ));
        }
        if r.pending {
            out.push(check(
                "gpu memory",
                Status::Fail,
                format!("{who}: a row remapping is pending: the bad rows stay in use until the GPU is reset (NVIDIA's Xid 63)"),
                Some("reset the GPU (nvidia-smi -r) or reboot, then run again"),
            ));
        }
    }
    if d.retired_pages_pending == Some(true) {
        out.push(check(
            "gpu memory",
            Status::Fail,
            format!("{who}: a page retirement is pending: the bad page stays in use until the GPU is reset"),
            Some("reset the GPU (nvidia-smi -r) or reboot, then run again"),
        ));
    }
    match d.temperature_limit() {
        Some((t, TemperatureLimit::Shutdown, shutdown)) => out.push(check(
            "gpu temperature",
            Status::Fail,
            format!("{who}: {t} C, at or above its shutdown threshold ({shutdown} C)"),
            Some("stop the work and check the cooling (fans, airflow, the room): the GPU turns itself off here"),
        )),
        Some((t, TemperatureLimit::Slowdown, slowdown)) => out.push(check(
            "gpu temperature",
            Status::Warn,
            format!("{who}: {t} C, at or above its slowdown threshold ({slowdown} C): its clocks are cut"),
            Some("check the cooling (fans, airflow, the room); nvidia-smi -q -d TEMPERATURE,PERFORMANCE"),
        )),
        None => {}
    }
    let named = d.slowdown_reasons();
    if !named.is_empty() {
        out.push(check(
            "gpu clocks",
            Status::Warn,
            format!("{who}: clocks held down by {}", named.join(", ")),
            Some("a slow run, not a wrong one: check the cooling and the power supply (nvidia-smi -q -d PERFORMANCE)"),
        ));
    }
    if let Some(n) = d.pcie_replays.filter(|n| *n > 0) {
        out.push(check(
            "gpu pcie",
            Status::Warn,
            format!("{who}: {n} PCIe replay(s): the link retried transfers"),
            Some("a count that keeps growing points at the slot, riser or cable (NVIDIA's Xid 32 is the same trouble)"),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use cublasguard_format::gpu_health::{EccCounts, RemappedRows};

    fn healthy() -> Device {
        Device {
            index: 0,
            name: "NVIDIA H100 80GB HBM3".into(),
            persistence_mode: Some(true),
            ecc_mode: Some(true),
            ecc: Some(EccCounts::default()),
            ecc_at_start: None,
            remapped_rows: Some(RemappedRows::default()),
            retired_pages_pending: Some(false),
            temperature_c: Some(40),
            slowdown_c: Some(90),
            shutdown_c: Some(95),
            clock_event_reasons: Some(0x4),
            pcie_replays: Some(0),
        }
    }

    fn ready(d: Device) -> Reading {
        Reading::Ready { path: None, standin: false, devices: vec![d] }
    }

    #[test]
    fn a_healthy_gpu_is_one_line_and_the_power_cap_is_no_slowdown() {
        let c = checks(&ready(healthy()));
        assert_eq!(c.len(), 1, "{c:#?}");
        assert_eq!(c[0].status, Status::Ok);
        assert!(c[0].evidence.starts_with("GPU 0: NVIDIA H100") && c[0].evidence.contains("persistence mode on"), "{}", c[0].evidence);
    }

    #[test]
    fn double_bit_errors_failed_or_pending_remaps_and_pending_retirements_fail() {
        let mut d = healthy();
        d.ecc = Some(EccCounts { uncorrected_volatile: 2, uncorrected_aggregate: 2, ..Default::default() });
        d.remapped_rows = Some(RemappedRows { pending: true, failure: true, ..Default::default() });
        d.retired_pages_pending = Some(true);
        let c = checks(&ready(d));
        let failures: Vec<_> = c.iter().filter(|c| c.status == Status::Fail).collect();
        assert_eq!(failures.len(), 4, "{c:#?}");
        assert!(failures.iter().all(|c| c.name == "gpu memory" && c.fix.is_some()));
    }

    #[test]
    fn heat_and_slowdown_reasons_warn_and_the_shutdown_threshold_fails() {
        let mut d = healthy();
        d.temperature_c = Some(91);
        d.clock_event_reasons = Some(0x8 | 0x40);
        let c = checks(&ready(d.clone()));
        assert_eq!(c.iter().filter(|c| c.status == Status::Warn).count(), 2, "{c:#?}");
        let clocks = c.iter().find(|c| c.name == "gpu clocks").unwrap();
        assert!(clocks.evidence.contains("hardware slowdown") && clocks.evidence.contains("hardware thermal"), "{}", clocks.evidence);
        d.temperature_c = Some(96);
        assert!(checks(&ready(d)).iter().any(|c| c.name == "gpu temperature" && c.status == Status::Fail));
    }

    #[test]
    fn a_missing_nvml_is_a_note_and_a_hanging_one_a_warning() {
        assert_eq!(checks(&Reading::Missing("not found".into()))[0].status, Status::Info);
        let hung = &checks(&Reading::Hung(Duration::from_secs(3)))[0];
        assert_eq!(hung.status, Status::Warn);
        assert!(hung.evidence.contains("left off"), "{}", hung.evidence);
    }
}
