//! What a process's GPU health (NVML's readings, Xid events, the kernel log) adds beside a
//! fault's cause, one line each.

use cublasguard_format::gpu_health::{xid, GpuEventKind, GpuHealth, GpuHealthState, TemperatureLimit};

/// What the GPU's health says beside a fault's cause: the Xids and ECC errors of the run (a
/// hardware Xid is the cause itself), and heat, slowdowns, pending repairs as context.
pub fn gpu_context(h: &GpuHealth) -> Vec<String> {
    let mut out = Vec::new();
    let who = |index: u32| if h.standin { format!("stand-in device {index}") } else { format!("GPU {index}") };
    match h.state {
        GpuHealthState::Hung | GpuHealthState::Failed | GpuHealthState::Starting => {
            out.push(format!("GPU health not read: {}", h.note.as_deref().unwrap_or(h.state.name())));
        }
        _ => {}
    }
    let xids: Vec<String> = h
        .events
        .iter()
        .map(|e| match (e.kind, e.xid) {
            (GpuEventKind::Xid, Some(n)) => format!("Xid {n} on {}{}", who(e.device), xid(n).map(|x| format!(" ({})", x.meaning)).unwrap_or_default()),
            _ => format!("a double-bit ECC error on {}", who(e.device)),
        })
        .collect();
    if !xids.is_empty() {
        out.push(format!("NVML reported during the run: {}", xids.join("; ")));
    }
    for k in &h.kernel_log {
        out.push(format!("kernel log: {}", k.line));
    }
    for d in &h.devices {
        if let Some(n) = d.uncorrected_since_start().filter(|n| *n > 0) {
            out.push(format!("{}: {n} uncorrected (double-bit) ECC error(s) since the guard started: its memory returned corrupt data", who(d.index)));
        }
        if let Some(n) = d.corrected_since_start().filter(|n| *n > 0) {
            out.push(format!("{}: {n} corrected ECC error(s) since the guard started", who(d.index)));
        }
        if let Some(r) = &d.remapped_rows {
            if r.failure {
                out.push(format!("{}: a row remapping failed (its bad memory can no longer be hidden)", who(d.index)));
            } else if r.pending {
                out.push(format!("{}: a row remapping is pending until the GPU is reset", who(d.index)));
            }
        }
        if d.retired_pages_pending == Some(true) {
            out.push(format!("{}: a page retirement is pending until the GPU is reset", who(d.index)));
        }
        match d.temperature_limit() {
            Some((t, TemperatureLimit::Shutdown, limit)) => out.push(format!("{}: {t} C, at its shutdown threshold ({limit} C)", who(d.index))),
            Some((t, TemperatureLimit::Slowdown, limit)) => {
                out.push(format!("{}: {t} C, at its slowdown threshold ({limit} C): its clocks are cut", who(d.index)))
            }
            None => {}
        }
        let slow = d.slowdown_reasons();
        if !slow.is_empty() {
            out.push(format!("{}: clocks held down by {} (a slow run, not a wrong one)", who(d.index), slow.join(", ")));
        }
    }
    out
}
