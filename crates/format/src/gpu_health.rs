//! The GPU's own health, as NVML and the kernel log report it: what the guard records under
//! `gpu_health` (in the trace's environment and at a fault), the doctor's per-device readings,
//! NVIDIA's Xid catalogue, and the rule that names the hardware as a fault's cause. A fault on
//! a GPU that logged a hardware-class Xid (ECC, fallen off the bus, GSP firmware) is the GPU's,
//! not the program's; 13, 31 and 43 are the GPU reporting the program's own fault.

use serde::{Deserialize, Serialize};

use crate::trace::named_enum;

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct EccCounts {
    /// Since the driver loaded.
    pub corrected_volatile: u64,
    pub uncorrected_volatile: u64,
    /// Over the GPU's lifetime.
    pub corrected_aggregate: u64,
    pub uncorrected_aggregate: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RemappedRows {
    pub corrected: u32,
    pub uncorrected: u32,
    /// A remapping waits for the next GPU reset.
    pub pending: bool,
    /// A remapping failed: the GPU can no longer hide its bad memory.
    pub failure: bool,
}

/// One device's readings; `None` where NVML does not have it for this device.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct GpuDevice {
    /// NVML's index (every GPU of the machine, whatever CUDA_VISIBLE_DEVICES shows).
    pub index: u32,
    pub name: String,
    #[serde(default)]
    pub persistence_mode: Option<bool>,
    #[serde(default)]
    pub ecc_mode: Option<bool>,
    #[serde(default)]
    pub ecc: Option<EccCounts>,
    /// The counts when the guard started: what grew during the run is the difference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ecc_at_start: Option<EccCounts>,
    #[serde(default)]
    pub remapped_rows: Option<RemappedRows>,
    #[serde(default)]
    pub retired_pages_pending: Option<bool>,
    #[serde(default)]
    pub temperature_c: Option<u32>,
    #[serde(default)]
    pub slowdown_c: Option<u32>,
    #[serde(default)]
    pub shutdown_c: Option<u32>,
    /// nvmlClocksEventReason* bits.
    #[serde(default)]
    pub clock_event_reasons: Option<u64>,
    #[serde(default)]
    pub pcie_replays: Option<u32>,
}

impl GpuDevice {
    /// Uncorrected (double-bit) ECC errors since the guard started, when both readings exist.
    pub fn uncorrected_since_start(&self) -> Option<u64> {
        Some(self.ecc.as_ref()?.uncorrected_volatile.saturating_sub(self.ecc_at_start.as_ref()?.uncorrected_volatile))
    }

    /// Corrected (single-bit) ECC errors since the guard started.
    pub fn corrected_since_start(&self) -> Option<u64> {
        Some(self.ecc.as_ref()?.corrected_volatile.saturating_sub(self.ecc_at_start.as_ref()?.corrected_volatile))
    }

    /// The temperature, the threshold it has reached (shutdown before slowdown) and that
    /// threshold; `None` below both, or without readings.
    pub fn temperature_limit(&self) -> Option<(u32, TemperatureLimit, u32)> {
        let t = self.temperature_c?;
        match (self.shutdown_c, self.slowdown_c) {
            (Some(limit), _) if t >= limit => Some((t, TemperatureLimit::Shutdown, limit)),
            (_, Some(limit)) if t >= limit => Some((t, TemperatureLimit::Slowdown, limit)),
            _ => None,
        }
    }

    /// The clock event reasons that mean the GPU is held back by hardware, heat or power.
    pub fn slowdown_reasons(&self) -> Vec<&'static str> {
        let bits = self.clock_event_reasons.unwrap_or(0);
        SLOWDOWN_REASONS.iter().filter(|(bit, _)| bits & bit != 0).map(|(_, name)| *name).collect()
    }
}

/// A GPU's temperature thresholds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TemperatureLimit {
    /// Its clocks are cut.
    Slowdown,
    /// It turns itself off.
    Shutdown,
}

/// Clock event reasons (nvml.h's nvmlClocksEventReason*) that mean the GPU is held back by
/// hardware, heat or power. SwPowerCap (0x4) is the normal power limit, not among them.
pub const SLOWDOWN_REASONS: [(u64, &str); 4] =
    [(0x8, "hardware slowdown (HW_SLOWDOWN)"), (0x20, "software thermal slowdown"), (0x40, "hardware thermal slowdown"), (0x80, "power brake (external)")];

named_enum! {
    /// How far the guard got with NVML.
    pub enum GpuHealthState {
        /// NVML answered; the readings are its.
        Ready = "ready",
        /// NVML is still starting (nvmlInit has not returned, within its time limit).
        Starting = "starting",
        /// No libnvidia-ml.so.1 (it comes with the driver), or one without nvmlInit_v2.
        Missing = "missing",
        /// nvmlInit_v2 returned an error.
        Failed = "failed",
        /// nvmlInit_v2 did not return within its time limit: left off.
        Hung = "hung",
        /// Not asked: CUBLASGUARD_NVML=0, or a forked child (NVML stays with its parent).
        Off = "off",
    }
}

named_enum! {
    pub enum GpuEventKind {
        /// nvmlEventTypeXidCriticalError: `xid` holds the number.
        Xid = "xid",
        /// nvmlEventTypeDoubleBitEccError: an uncorrectable memory error.
        DoubleBitEcc = "double_bit_ecc",
    }
}

/// An NVML event the guard received while the process ran (NVML gives no pid: any process's
/// fault on the device is reported to every listener).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct GpuEvent {
    pub kind: GpuEventKind,
    /// NVML's device index.
    pub device: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xid: Option<u64>,
    /// When the guard received it (the trace's clock).
    pub time_ns: u64,
}

/// A kernel log line (`NVRM: Xid (PCI:...): 13, pid=..., ...`) that names this process.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct KernelXid {
    pub xid: u64,
    /// The GPU's PCI address as the line gives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci: Option<String>,
    pub line: String,
}

/// `gpu_health`: the GPU's health as the guard could read it, without ever waiting on NVML in
/// a program's call for longer than a short limit.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct GpuHealth {
    pub state: GpuHealthState,
    /// Why there are no readings, or what was left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The libnvidia-ml.so.1 that answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub library: Option<String>,
    /// cublasguard's stand-in NVML (no GPU behind it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub standin: bool,
    /// The readings (as of `read_at_ns`).
    #[serde(default)]
    pub devices: Vec<GpuDevice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_at_ns: Option<u64>,
    /// NVML's Xid and double-bit ECC events since the guard registered for them, oldest first.
    #[serde(default)]
    pub events: Vec<GpuEvent>,
    /// Events received past the ones kept.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub events_dropped: u64,
    /// The kernel log's Xid lines naming this process, when it was readable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernel_log: Vec<KernelXid>,
    /// Why the kernel log was not read (unreadable without CAP_SYSLOG where dmesg_restrict is set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_log_note: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl GpuHealth {
    /// No readings, with the reason.
    pub fn without_readings(state: GpuHealthState, note: impl Into<String>) -> Self {
        Self {
            state,
            note: Some(note.into()),
            library: None,
            standin: false,
            devices: Vec::new(),
            read_at_ns: None,
            events: Vec::new(),
            events_dropped: 0,
            kernel_log: Vec::new(),
            kernel_log_note: None,
        }
    }

    /// Every Xid this process saw, from NVML's events and the kernel log, in order of arrival
    /// (the kernel log's after NVML's). A double-bit ECC event counts as Xid 48, as NVIDIA
    /// reports it, and so does an uncorrected ECC count that grew during the run.
    pub fn xids(&self) -> Vec<u64> {
        let mut out: Vec<u64> = self
            .events
            .iter()
            .filter_map(|e| match e.kind {
                GpuEventKind::Xid => e.xid,
                GpuEventKind::DoubleBitEcc => Some(48),
            })
            .collect();
        out.extend(self.kernel_log.iter().map(|k| k.xid));
        if !out.contains(&48) && self.devices.iter().any(|d| d.uncorrected_since_start().unwrap_or(0) > 0) {
            out.push(48);
        }
        out
    }

    /// The first hardware-class Xid the process saw, with its catalogue entry.
    pub fn hardware_xid(&self) -> Option<&'static Xid> {
        self.xids().into_iter().filter_map(xid).find(|x| x.class == XidClass::Hardware)
    }

    /// The Xids that say the GPU reported the program's own fault (13, 31, 43).
    pub fn program_xids(&self) -> Vec<&'static Xid> {
        let mut out: Vec<&'static Xid> = Vec::new();
        for x in self.xids().into_iter().filter_map(xid).filter(|x| x.class == XidClass::Program) {
            if !out.iter().any(|o| o.number == x.number) {
                out.push(x);
            }
        }
        out
    }
}

/// Who an Xid blames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XidClass {
    /// The GPU reported the program's own fault (an illegal address, ...): the hardware is fine.
    Program,
    /// The GPU, its memory, its link or its firmware failed.
    Hardware,
    /// Neither on its own (a clean-up after another Xid, a link's quality).
    Other,
}

/// An entry of NVIDIA's Xid catalogue.
#[derive(Debug, PartialEq, Eq)]
pub struct Xid {
    pub number: u64,
    pub class: XidClass,
    pub meaning: &'static str,
    /// NVIDIA's recommended action.
    pub action: &'static str,
}

const RESET: &str = "drain the GPU and reset it (nvidia-smi -r, or reboot the node), then run again; if it comes back, have the GPU serviced";

/// The Xids the guard interprets (NVIDIA's Xid catalogue).
pub const XIDS: &[Xid] = &[
    Xid {
        number: 13,
        class: XidClass::Program,
        meaning: "graphics engine exception: a kernel's out-of-range access or illegal instruction",
        action: "fix the program's call: the GPU is fine",
    },
    Xid {
        number: 31,
        class: XidClass::Program,
        meaning: "GPU memory page fault: a kernel used an illegal address",
        action: "fix the program's call: the GPU is fine",
    },
    Xid {
        number: 43,
        class: XidClass::Program,
        meaning: "the GPU stopped the program's channel after a software fault",
        action: "fix the program's call: the GPU is fine and other programs on it go on",
    },
    Xid { number: 45, class: XidClass::Other, meaning: "preemptive clean-up after another Xid, or the program was killed", action: "read the Xid before it" },
    Xid {
        number: 32,
        class: XidClass::Other,
        meaning: "invalid or corrupted push buffer stream (PBDMA): often the PCIe link's quality",
        action: "check the PCIe slot, riser and cable if it repeats (PCIe replays in nvidia-smi -q)",
    },
    Xid { number: 48, class: XidClass::Hardware, meaning: "double-bit (uncorrectable) ECC error: the GPU's memory returned corrupt data", action: RESET },
    Xid { number: 62, class: XidClass::Hardware, meaning: "internal micro-controller halt", action: RESET },
    Xid {
        number: 63,
        class: XidClass::Hardware,
        meaning: "ECC page retirement or row remapping recorded: a bad memory row was found",
        action: "reset the GPU (nvidia-smi -r) or reboot when convenient, so that the remapping takes effect",
    },
    Xid {
        number: 64,
        class: XidClass::Hardware,
        meaning: "ECC page retirement or row remapping failed: the GPU cannot hide its bad memory",
        action: "take the GPU out of service and have it replaced (RMA)",
    },
    Xid {
        number: 74,
        class: XidClass::Hardware,
        meaning: "NVLink error",
        action: "reset the GPUs on the link (or reboot); check the NVLink bridge or baseboard if it repeats",
    },
    Xid {
        number: 79,
        class: XidClass::Hardware,
        meaning: "the GPU has fallen off the bus: it no longer answers the host",
        action: "reboot the node; check power, cooling and the PCIe slot; have the GPU serviced if it repeats",
    },
    Xid {
        number: 92,
        class: XidClass::Hardware,
        meaning: "high single-bit ECC error rate",
        action: "reset the GPU when convenient and watch the ECC counts (nvidia-smi -q -d ECC); have it serviced if they keep growing",
    },
    Xid {
        number: 94,
        class: XidClass::Hardware,
        meaning: "contained uncorrectable memory error: only the affected programs were stopped",
        action: "restart the program; reset the GPU when convenient",
    },
    Xid {
        number: 95,
        class: XidClass::Hardware,
        meaning: "uncontained uncorrectable memory error: every program on the GPU is affected",
        action: "reset the GPU (nvidia-smi -r) before any restart",
    },
    Xid { number: 119, class: XidClass::Hardware, meaning: "GSP firmware timeout", action: RESET },
    Xid { number: 120, class: XidClass::Hardware, meaning: "GSP firmware error", action: RESET },
    Xid {
        number: 154,
        class: XidClass::Hardware,
        meaning: "GPU recovery action required (the driver says which: reset or reboot)",
        action: "do what the driver's message asks (nvidia-smi -q shows the recovery action): reset the GPU or reboot the node",
    },
];

/// The catalogue's entry for Xid `number`.
pub fn xid(number: u64) -> Option<&'static Xid> {
    XIDS.iter().find(|x| x.number == number)
}

/// A kernel log line's Xid, if it is one and names process `pid`: `NVRM: Xid (PCI:0000:3b:00):
/// 13, pid=2345, name=python3, ...`. A `/dev/kmsg` record's `prio,seq,usec,flags;` head, or
/// dmesg's `[  12.345678] `, may come before it.
pub fn kernel_log_xid(line: &str, pid: u32) -> Option<KernelXid> {
    let message = line
        .split_once(';')
        .filter(|(head, _)| head.bytes().all(|b| b.is_ascii_digit() || b == b',' || b == b'-' || b == b'c' || b == b'+'))
        .map_or(line, |(_, m)| m);
    let at = message.find("Xid (")?;
    let rest = &message[at + "Xid (".len()..];
    let (pci, rest) = rest.split_once("): ")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let number: u64 = digits.parse().ok()?;
    let pid_text = rest.split_once("pid=")?.1;
    let line_pid: u32 = pid_text.chars().take_while(char::is_ascii_digit).collect::<String>().parse().ok()?;
    if line_pid != pid {
        return None;
    }
    let pci = pci.strip_prefix("PCI:").unwrap_or(pci).trim();
    Some(KernelXid { xid: number, pci: (!pci.is_empty()).then(|| pci.to_string()), line: message[at..].trim_end().to_string() })
}

/// A `/dev/kmsg` record's time stamp, in microseconds since boot (the monotonic clock).
pub fn kmsg_time_us(line: &str) -> Option<u64> {
    let (head, _) = line.split_once(';')?;
    head.split(',').nth(2)?.parse().ok()
}

/// The fault kinds, statuses and errors a failing GPU explains: an asynchronous error,
/// cuBLAS's EXECUTION_FAILED, a sticky CUDA error (a lost context), or a failed start after
/// the context was lost.
pub fn gpu_may_explain(fault: &crate::trace::Fault) -> bool {
    use crate::trace::{FaultKind, InitCauseKind};
    fault.kind == FaultKind::AsyncError
        || fault.status_name == "CUBLAS_STATUS_EXECUTION_FAILED"
        || fault.error.as_ref().is_some_and(|e| crate::cuda::cuda_error_is_sticky(e.code))
        || crate::cuda::cuda_error_is_sticky(fault.status) && fault.status_name.starts_with("cuda")
        || fault.cause.as_ref().is_some_and(|c| c.kind == InitCauseKind::ContextLost)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kernel_log_xid_naming_this_pid_is_read_from_kmsg_and_dmesg_forms() {
        let kmsg = "4,1234,56789012,-;NVRM: Xid (PCI:0000:3b:00): 13, pid=2345, name=python3, Graphics Exception: ESR 0x404600=0x80000002";
        let x = kernel_log_xid(kmsg, 2345).expect("an Xid line of pid 2345");
        assert_eq!((x.xid, x.pci.as_deref()), (13, Some("0000:3b:00")));
        assert!(x.line.starts_with("Xid (PCI:0000:3b:00): 13, pid=2345"), "{}", x.line);
        assert_eq!(kmsg_time_us(kmsg), Some(56789012));
        assert_eq!(kernel_log_xid(kmsg, 2346), None, "another process's Xid");
        let dmesg = "[  812.123456] NVRM: Xid (PCI:0000:01:00): 79, pid=77, GPU has fallen off the bus.";
        assert_eq!(kernel_log_xid(dmesg, 77).map(|x| x.xid), Some(79));
        assert_eq!(kernel_log_xid("[ 1.0] NVRM: Xid (PCI:0000:b3:00): 31, pid='<unknown>', name=<unknown>", 1), None);
        assert_eq!(kernel_log_xid("usb 1-1: new device", 1), None);
    }

    fn health(events: &[(GpuEventKind, Option<u64>)]) -> GpuHealth {
        let mut h = GpuHealth::without_readings(GpuHealthState::Ready, "");
        h.note = None;
        h.events = events.iter().map(|&(kind, xid)| GpuEvent { kind, device: 0, xid, time_ns: 1 }).collect();
        h
    }

    #[test]
    fn the_first_hardware_xid_is_the_cause_and_program_xids_are_told_apart() {
        let h = health(&[(GpuEventKind::Xid, Some(13)), (GpuEventKind::Xid, Some(45)), (GpuEventKind::Xid, Some(79)), (GpuEventKind::Xid, Some(48))]);
        assert_eq!(h.hardware_xid().map(|x| x.number), Some(79));
        assert_eq!(h.program_xids().iter().map(|x| x.number).collect::<Vec<_>>(), [13]);
        let program_only = health(&[(GpuEventKind::Xid, Some(31)), (GpuEventKind::Xid, Some(31))]);
        assert_eq!(program_only.hardware_xid(), None);
        assert_eq!(program_only.program_xids().len(), 1);
        assert_eq!(health(&[(GpuEventKind::DoubleBitEcc, None)]).hardware_xid().map(|x| x.number), Some(48));
    }

    #[test]
    fn uncorrected_ecc_errors_that_grew_during_the_run_count_as_xid_48() {
        let mut h = health(&[]);
        let counts = |u| EccCounts { uncorrected_volatile: u, ..Default::default() };
        h.devices.push(GpuDevice { ecc: Some(counts(3)), ecc_at_start: Some(counts(3)), ..Default::default() });
        assert_eq!(h.hardware_xid(), None, "old errors are not this run's");
        h.devices[0].ecc = Some(counts(4));
        assert_eq!(h.devices[0].uncorrected_since_start(), Some(1));
        assert_eq!(h.hardware_xid().map(|x| x.number), Some(48));
    }

    #[test]
    fn every_xid_the_issue_calls_hardware_is_hardware_in_the_catalogue() {
        for n in [48, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 154] {
            assert_eq!(xid(n).map(|x| x.class), Some(XidClass::Hardware), "Xid {n}");
        }
        for n in [13, 31, 43] {
            assert_eq!(xid(n).map(|x| x.class), Some(XidClass::Program), "Xid {n}");
        }
    }

    #[test]
    fn gpu_health_reads_back_as_written() {
        let mut h = health(&[(GpuEventKind::Xid, Some(79)), (GpuEventKind::DoubleBitEcc, None)]);
        h.kernel_log.push(KernelXid { xid: 13, pci: None, line: "Xid (x): 13, pid=1".into() });
        let json = serde_json::to_string(&h).unwrap();
        assert!(json.contains("\"state\":\"ready\"") && json.contains("\"kind\":\"double_bit_ecc\""), "{json}");
        assert_eq!(serde_json::from_str::<GpuHealth>(&json).unwrap(), h);
    }
}
