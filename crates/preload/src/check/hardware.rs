//! Whether the GPU, not the program, explains a fault. An asynchronous error, cuBLAS's
//! EXECUTION_FAILED or a lost context on a GPU that logged a hardware-class Xid during the run
//! (ECC, fallen off the bus, GSP firmware, NVLink) is the hardware's: its cause names the Xid
//! and NVIDIA's action. Xids 13, 31 and 43 are the GPU reporting the program's own fault: the
//! call, its suspects and its origin stay the story, and the message says the GPU is fine.
//! Temperature and throttling are context for the report, never a cause.

use crate::gpu_health::{gpu_may_explain, GpuHealth, GpuHealthState};
use crate::trace::{Fault, FaultKind, InitCause, InitCauseKind};

/// Faults the guard finds on the host before the GPU is involved (arguments, handles, bounds)
/// have no use for the GPU's health, and neither has a NaN or an Inf: data, which the GPU's
/// health does not explain (`gpu_may_explain`), so a burst of them never waits for NVML.
pub fn wants_health(fault: &Fault) -> bool {
    !matches!(
        fault.kind,
        FaultKind::InvalidHandle
            | FaultKind::InvalidArgument
            | FaultKind::HostPointer
            | FaultKind::OutOfBounds
            | FaultKind::UseAfterFree
            | FaultKind::NonfiniteInput
            | FaultKind::NonfiniteOutput
            | FaultKind::NonfiniteOrigin
    )
}

/// Health worth keeping with a fault: readings or their absence explained (NVML failed or
/// hung), or the kernel log's lines; not "no NVML here" on every fault of a machine without it
/// (the trace's environment says that once).
pub fn worth_recording(health: &GpuHealth) -> bool {
    !matches!(health.state, GpuHealthState::Missing | GpuHealthState::Off) || !health.kernel_log.is_empty()
}

/// Names the hardware as the fault's cause, or notes that the GPU reported the program's own
/// fault, from the health recorded with it.
pub fn attribute(fault: &mut Fault) {
    let Some(health) = &fault.gpu_health else { return };
    if !gpu_may_explain(fault) {
        return;
    }
    if let Some(x) = health.hardware_xid() {
        fault.message = format!("{}; the GPU logged Xid {} ({}) during the run: a hardware failure, not the program's", fault.message, x.number, x.meaning);
        // CUDA had started: the driver loaded.
        let mut cause = fault.cause.take().unwrap_or_else(|| InitCause { driver_loadable: true, ..InitCause::new(InitCauseKind::GpuHardware, "") });
        cause.kind = InitCauseKind::GpuHardware;
        cause.message = format!(
            "the GPU logged Xid {} ({}) during the run: the hardware failed, not the program's call; NVIDIA's advice: {}",
            x.number, x.meaning, x.action
        );
        cause.xid = Some(x.number);
        fault.cause = Some(cause);
    } else if let Some(x) = health.program_xids().first() {
        fault.message = format!("{}; the GPU logged Xid {} ({}): the program's own fault, the GPU is fine", fault.message, x.number, x.meaning);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu_health::{GpuEvent, GpuEventKind};
    use crate::trace::CudaErrorRecord;

    fn fault(kind: FaultKind, status: i32, status_name: &str, error: Option<i32>) -> Fault {
        let mut f = crate::trace::sample_fault(5);
        (f.kind, f.status, f.status_name) = (kind, status, status_name.into());
        f.error = error.map(|code| CudaErrorRecord { code, name: "e".into(), call: "c".into() });
        f
    }

    fn with_xids(mut f: Fault, xids: &[u64]) -> Fault {
        let mut h = GpuHealth::without_readings(GpuHealthState::Ready, "");
        h.events = xids.iter().map(|&x| GpuEvent { kind: GpuEventKind::Xid, device: 0, xid: Some(x), time_ns: 1 }).collect();
        f.gpu_health = Some(h);
        f
    }

    #[test]
    fn xid_79_at_an_asynchronous_error_names_the_hardware_with_nvidias_action() {
        let mut f = with_xids(fault(FaultKind::AsyncError, 0, "CUBLAS_STATUS_SUCCESS", Some(700)), &[79]);
        attribute(&mut f);
        let cause = f.cause.expect("a cause");
        assert_eq!((cause.kind, cause.xid), (InitCauseKind::GpuHardware, Some(79)));
        assert!(cause.message.contains("fallen off the bus") && cause.message.contains("reboot"), "{}", cause.message);
        assert!(f.message.contains("Xid 79"), "{}", f.message);
    }

    #[test]
    fn execution_failed_and_a_lost_context_are_the_hardwares_too_but_a_nan_is_not() {
        let mut f = with_xids(fault(FaultKind::ApiError, 13, "CUBLAS_STATUS_EXECUTION_FAILED", None), &[48]);
        attribute(&mut f);
        assert_eq!(f.cause.map(|c| c.kind), Some(InitCauseKind::GpuHardware));
        let mut lost = with_xids(fault(FaultKind::InitFailed, 3, "CUBLAS_STATUS_NOT_INITIALIZED", None), &[119]);
        let mut cause = crate::check::init::explain(&Default::default(), &Default::default());
        cause.kind = InitCauseKind::ContextLost;
        cause.pending_since_seq = Some(2);
        lost.cause = Some(cause);
        attribute(&mut lost);
        let cause = lost.cause.expect("kept");
        assert_eq!((cause.kind, cause.pending_since_seq), (InitCauseKind::GpuHardware, Some(2)), "the lost context's facts are kept");
        let mut nan = with_xids(fault(FaultKind::NonfiniteOutput, 0, "CUBLAS_STATUS_SUCCESS", None), &[79]);
        attribute(&mut nan);
        assert_eq!(nan.cause, None);
    }

    #[test]
    fn xid_13_leaves_the_program_as_the_cause_and_says_the_gpu_is_fine() {
        let mut f = with_xids(fault(FaultKind::AsyncError, 0, "CUBLAS_STATUS_SUCCESS", Some(700)), &[13]);
        attribute(&mut f);
        assert_eq!(f.cause, None);
        assert!(f.message.contains("Xid 13") && f.message.contains("the program's own fault"), "{}", f.message);
    }

    #[test]
    fn no_health_or_argument_faults_change_nothing() {
        let mut f = fault(FaultKind::AsyncError, 0, "CUBLAS_STATUS_SUCCESS", Some(700));
        attribute(&mut f);
        assert_eq!((f.cause, f.message.as_str()), (None, "m"));
        assert!(!wants_health(&fault(FaultKind::OutOfBounds, 7, "CUBLAS_STATUS_INVALID_VALUE", None)));
        // A NaN is data: it never waits for NVML (issue 46, finding 7).
        assert!(!wants_health(&fault(FaultKind::NonfiniteInput, 0, "CUBLAS_STATUS_SUCCESS", None)));
        assert!(!wants_health(&fault(FaultKind::NonfiniteOutput, 0, "CUBLAS_STATUS_SUCCESS", None)));
        assert!(wants_health(&fault(FaultKind::AsyncError, 0, "CUBLAS_STATUS_SUCCESS", Some(700))));
        assert!(!worth_recording(&GpuHealth::without_readings(GpuHealthState::Missing, "no NVML")));
        assert!(worth_recording(&GpuHealth::without_readings(GpuHealthState::Hung, "hung")));
    }
}
