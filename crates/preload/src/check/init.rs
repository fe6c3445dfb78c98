//! Why CUDA could not start: the checklist every troubleshooting guide walks (is there a
//! driver? is it new enough for this runtime? is there a device?), decided from what the
//! FFI layer found by asking.

use crate::cuda;
use crate::trace::{CauseMemory, CudaErrorRecord, InitCause, InitCauseKind};

/// The answers the FFI layer collected.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DriverProbe {
    /// `dlopen("libcuda.so.1")` succeeded.
    pub driver_loadable: bool,
    /// dlerror() text when it did not.
    pub load_error: Option<String>,
    /// When it did not: the process had no file descriptor left (EMFILE or ENFILE), with its
    /// `RLIMIT_NOFILE` soft limit when known.
    pub out_of_descriptors: Option<Option<u64>>,
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

/// What `classify` adds to a missing driver's cause: the program's own cudaGetDeviceCount answer.
fn device_count_clause(status_name: &str, status: i32) -> String {
    format!("; cudaGetDeviceCount returns {status_name} ({status})")
}

/// The cause as said after "returned STATUS (N)" in a fault's message: less the clause on
/// cudaGetDeviceCount's answer when that answer is the very status (cudaGetDeviceCount's own
/// fault, or a later runtime call failing the same way), which the line would say twice. The
/// cause record keeps it.
pub fn after_status(cause: &str, status_name: &str, status: i32) -> String {
    cause.replace(&device_count_clause(status_name, status), "")
}

pub fn classify(probe: &DriverProbe) -> InitCause {
    let (kind, message) = if let (false, Some(limit)) = (probe.driver_loadable, probe.out_of_descriptors) {
        let limit = limit.map(|n| format!(" (its limit, ulimit -n, is {n})")).unwrap_or_default();
        (
            InitCauseKind::OutOfFileDescriptors,
            format!(
                "the process has no file descriptor left{limit}, so libcuda.so.1 could not even be opened: the driver \
                 may be fine; raise the limit or find what holds the descriptors (a leak of files, sockets or pipes)"
            ),
        )
    } else if !probe.driver_loadable {
        let why = probe.load_error.clone().unwrap_or_else(|| "not found".into());
        let mut message = format!("no NVIDIA driver: libcuda.so.1 cannot be loaded ({why})");
        if let Some(code) = probe.device_count_status.filter(|&c| c != 0) {
            message.push_str(&device_count_clause(cuda::cuda_error_name(code), code));
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
        driver_loadable: probe.driver_loadable,
        driver_version: probe.driver_version,
        runtime_version: probe.runtime_version,
        device_count_status: probe.device_count_status,
        device_count: probe.device_count,
        ..InitCause::new(kind, message)
    }
}

/// Below this much free device memory, a failed handle creation is blamed on memory: cuBLAS
/// takes a workspace (4 to 32 MiB, by architecture) and its kernels' modules when a handle is
/// created.
pub const HANDLE_NEEDS_BYTES: u64 = 64 << 20;

/// What the process knew when CUDA (or a handle) could not start, beyond what the driver said.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InitContext {
    /// This process was forked from (pid, its first CUDA call) after that parent used CUDA.
    pub forked_from: Option<(u32, Option<String>)>,
    /// A sticky error already pending: (code, the call that revealed it).
    pub pending_sticky: Option<(i32, u64)>,
    /// The failing call creates a handle (cublasCreate, cublasLtCreate).
    pub creating_handle: bool,
    /// The library said ALLOC_FAILED itself.
    pub alloc_failed: bool,
    pub memory: Option<CauseMemory>,
}

/// Every cause of a failed start, most specific first: CUDA used after fork, a context already
/// lost to a sticky error, then the driver's causes, then memory at handle creation.
pub fn explain(probe: &DriverProbe, context: &InitContext) -> InitCause {
    let mut cause = classify(probe);
    if let Some((pid, first)) = &context.forked_from {
        cause.kind = InitCauseKind::ForkedChild;
        let what = first.as_ref().map(|c| format!(" (its first CUDA call: {c})")).unwrap_or_default();
        cause.message = format!(
            "this process was forked from pid {pid} after that process initialised CUDA{what}: a CUDA context does not \
             survive fork(), and every CUDA call in the child fails. Start workers with the spawn method instead \
             (multiprocessing's or torch.multiprocessing.set_start_method(\"spawn\"), or a DataLoader's \
             multiprocessing_context=\"spawn\"); a worker_init_fn does not help"
        );
        cause.parent_pid = Some(*pid);
        cause.parent_first_call = first.clone();
        return cause;
    }
    if let Some((code, seq)) = context.pending_sticky {
        cause.kind = InitCauseKind::ContextLost;
        cause.message = format!(
            "the CUDA context was already lost: {} ({code}) has been pending since call #{seq}, and every later call \
             fails with it until the process restarts; the real fault is that earlier one",
            cuda::cuda_error_name(code)
        );
        cause.pending_error = Some(CudaErrorRecord { code, name: cuda::cuda_error_name(code).to_string(), call: "an earlier call".into() });
        cause.pending_since_seq = Some(seq);
        return cause;
    }
    let short_of_memory = context.memory.as_ref().and_then(|m| m.free).is_some_and(|free| free < HANDLE_NEEDS_BYTES);
    if context.creating_handle && (context.alloc_failed || (cause.kind == InitCauseKind::Other && short_of_memory)) {
        cause.kind = InitCauseKind::OutOfMemory;
        let m = context.memory.clone().unwrap_or_default();
        let free = match (m.free, m.total) {
            (Some(free), Some(total)) => format!("{} MiB of {} MiB free on the device", free >> 20, total >> 20),
            _ => "the device's free memory unknown".into(),
        };
        cause.message = format!(
            "no device memory left for the handle's workspace: {free}; this process holds {} live allocation(s), \
             {} MiB in all, the largest {} MiB. A framework's caching allocator can hold nearly all memory \
             (free it first: torch.cuda.empty_cache(), a smaller batch; TensorFlow: TF_FORCE_GPU_ALLOW_GROWTH=true), \
             or create the handle before the large allocations",
            m.live_count,
            m.live_bytes >> 20,
            m.largest >> 20
        );
        cause.memory = Some(m);
    }
    cause
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
    (InitCauseKind::Other, format!("the driver is loaded and new enough, but CUDA did not start: {status}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn healthy_driver() -> DriverProbe {
        DriverProbe {
            driver_loadable: true,
            driver_version: Some(12090),
            runtime_version: Some(12090),
            cu_init: Some(0),
            device_count_status: Some(0),
            device_count: Some(1),
            ..Default::default()
        }
    }

    #[test]
    fn a_forked_child_is_named_with_its_parent_before_anything_else() {
        let context = InitContext { forked_from: Some((41, Some("cudaMalloc".into()))), pending_sticky: Some((700, 3)), ..Default::default() };
        let c = explain(&healthy_driver(), &context);
        assert_eq!((c.kind, c.parent_pid, c.parent_first_call.as_deref()), (InitCauseKind::ForkedChild, Some(41), Some("cudaMalloc")));
        assert!(c.message.contains("spawn"), "{}", c.message);
    }

    #[test]
    fn a_context_lost_to_a_sticky_error_names_it() {
        let c = explain(&healthy_driver(), &InitContext { pending_sticky: Some((700, 9)), creating_handle: true, ..Default::default() });
        assert_eq!(c.kind, InitCauseKind::ContextLost);
        assert_eq!((c.pending_error.map(|e| e.code), c.pending_since_seq), (Some(700), Some(9)));
        assert!(c.message.contains("cudaErrorIllegalAddress (700)") && c.message.contains("#9"), "{}", c.message);
    }

    #[test]
    fn handle_creation_short_of_memory_is_out_of_memory_with_the_figures() {
        let memory = CauseMemory { free: Some(1 << 20), total: Some(16 << 20), live_count: 15, live_bytes: 15 << 20, largest: 1 << 20 };
        let context = InitContext { creating_handle: true, memory: Some(memory.clone()), ..Default::default() };
        let c = explain(&healthy_driver(), &context);
        assert_eq!((c.kind, c.memory.as_ref()), (InitCauseKind::OutOfMemory, Some(&memory)));
        assert!(c.message.contains("1 MiB of 16 MiB free") && c.message.contains("15 live allocation(s)"), "{}", c.message);
        // Plenty of memory: not memory. No driver: the driver, whatever the memory says.
        let roomy = CauseMemory { free: Some(8 << 30), total: Some(16 << 30), ..Default::default() };
        assert_eq!(explain(&healthy_driver(), &InitContext { creating_handle: true, memory: Some(roomy), ..Default::default() }).kind, InitCauseKind::Other);
        let no_driver = DriverProbe { load_error: Some("not found".into()), ..Default::default() };
        let no_descriptors = DriverProbe {
            out_of_descriptors: Some(Some(64)),
            load_error: Some("libcuda.so.1: cannot open shared object file: Too many open files".into()),
            ..Default::default()
        };
        let c = explain(&no_descriptors, &context);
        assert_eq!(c.kind, InitCauseKind::OutOfFileDescriptors);
        assert!(c.message.contains("no file descriptor left (its limit, ulimit -n, is 64)") && !c.message.contains("no NVIDIA driver"), "{}", c.message);
        assert_eq!(explain(&no_driver, &context).kind, InitCauseKind::NoDriver);
    }

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
        // After the same status, once is enough; after another, it is news.
        let said = after_status(&c.message, "cudaErrorInsufficientDriver", 35);
        assert_eq!(said, "no NVIDIA driver: libcuda.so.1 cannot be loaded (libcuda.so.1: cannot open shared object file)");
        assert_eq!(after_status(&c.message, "CUBLAS_STATUS_NOT_INITIALIZED", 1), c.message);
    }

    #[test]
    fn names_a_driver_older_than_the_runtime() {
        let c = classify(&DriverProbe { driver_loadable: true, driver_version: Some(11080), runtime_version: Some(12090), ..Default::default() });
        assert_eq!(c.kind, InitCauseKind::DriverTooOld);
        assert!(c.message.contains("CUDA 11.8") && c.message.contains("CUDA 12.9"), "{}", c.message);
    }

    #[test]
    fn names_no_device_and_other() {
        let mut p = DriverProbe { driver_loadable: true, driver_version: Some(12090), runtime_version: Some(12090), cu_init: Some(100), ..Default::default() };
        assert_eq!(classify(&p).kind, InitCauseKind::NoDevice);
        p.cu_init = Some(0);
        p.device_count_status = Some(3);
        assert_eq!(classify(&p).kind, InitCauseKind::Other);
    }
}
