//! Why CUDA could not start: the checklist every troubleshooting guide walks (is there a
//! driver? is it new enough for this runtime? is there a device?), decided from what the
//! FFI layer found by asking.

use crate::cuda;
use crate::trace::{InitCause, InitCauseKind};

/// The answers the FFI layer collected.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DriverProbe {
    /// `dlopen("libcuda.so.1")` succeeded.
    pub driver_loadable: bool,
    /// dlerror() text when it did not.
    pub load_error: Option<String>,
    /// `cuDriverGetVersion`.
    pub driver_version: Option<i32>,
    /// `cudaRuntimeGetVersion`, or what the library's soname implies.
    pub runtime_version: Option<i32>,
    /// `cuInit(0)`'s result.
    pub cu_init: Option<i32>,
    /// `cudaGetDeviceCount`'s status and count.
    pub device_count_status: Option<i32>,
    pub device_count: Option<i32>,
}

fn version(v: i32) -> String {
    format!("{}.{}", v / 1000, v % 1000 / 10)
}

pub fn classify(probe: &DriverProbe) -> InitCause {
    let (kind, message) = if !probe.driver_loadable {
        let why = probe.load_error.clone().unwrap_or_else(|| "not found".into());
        let mut message = format!("no NVIDIA driver: libcuda.so.1 cannot be loaded ({why})");
        if let Some(code) = probe.device_count_status.filter(|&c| c != 0) {
            message.push_str(&format!("; cudaGetDeviceCount returns {} ({code})", cuda::cuda_error_name(code)));
        }
        (InitCauseKind::NoDriver, message)
    } else if let (Some(d), Some(r)) = (probe.driver_version, probe.runtime_version) {
        if d < r {
            (
                InitCauseKind::DriverTooOld,
                format!(
                    "the NVIDIA driver supports CUDA {} but the runtime is CUDA {}: install a driver for CUDA {} or newer, \
                     or use a build of the framework for CUDA {}",
                    version(d),
                    version(r),
                    version(r),
                    version(d)
                ),
            )
        } else {
            no_device_or_other(probe)
        }
    } else {
        no_device_or_other(probe)
    };
    InitCause {
        kind,
        message,
        driver_loadable: probe.driver_loadable,
        driver_version: probe.driver_version,
        runtime_version: probe.runtime_version,
        device_count_status: probe.device_count_status,
        device_count: probe.device_count,
    }
}

fn no_device_or_other(probe: &DriverProbe) -> (InitCauseKind, String) {
    let no_device = probe.cu_init == Some(cuda::CUDA_ERROR_NO_DEVICE)
        || probe.device_count_status == Some(cuda::CUDA_ERROR_NO_DEVICE)
        || (probe.device_count_status == Some(0) && probe.device_count == Some(0));
    if no_device {
        return (
            InitCauseKind::NoDevice,
            "the driver is loaded but sees no CUDA device: check CUDA_VISIBLE_DEVICES and that the GPU is visible \
             in this container or job"
                .into(),
        );
    }
    let status = match probe.device_count_status {
        Some(code) => format!("cudaGetDeviceCount returned {} ({code})", cuda::cuda_error_name(code)),
        None => "cudaGetDeviceCount could not be asked (no CUDA runtime loaded, or an error was already pending)".into(),
    };
    (
        InitCauseKind::Other,
        format!("the driver is loaded and new enough, but CUDA did not start: {status}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_a_missing_driver() {
        let c = classify(&DriverProbe {
            load_error: Some("libcuda.so.1: cannot open shared object file".into()),
            runtime_version: Some(12090),
            device_count_status: Some(35),
            ..Default::default()
        });
        assert_eq!(c.kind, InitCauseKind::NoDriver);
        assert!(c.message.starts_with("no NVIDIA driver"), "{}", c.message);
        assert!(c.message.ends_with("cudaGetDeviceCount returns cudaErrorInsufficientDriver (35)"), "{}", c.message);
    }

    #[test]
    fn names_a_driver_older_than_the_runtime() {
        let c = classify(&DriverProbe {
            driver_loadable: true,
            driver_version: Some(11080),
            runtime_version: Some(12090),
            ..Default::default()
        });
        assert_eq!(c.kind, InitCauseKind::DriverTooOld);
        assert!(c.message.contains("CUDA 11.8") && c.message.contains("CUDA 12.9"), "{}", c.message);
    }

    #[test]
    fn names_no_device_and_other() {
        let mut p = DriverProbe {
            driver_loadable: true,
            driver_version: Some(12090),
            runtime_version: Some(12090),
            cu_init: Some(100),
            ..Default::default()
        };
        assert_eq!(classify(&p).kind, InitCauseKind::NoDevice);
        p.cu_init = Some(0);
        p.device_count_status = Some(3);
        assert_eq!(classify(&p).kind, InitCauseKind::Other);
    }
}
