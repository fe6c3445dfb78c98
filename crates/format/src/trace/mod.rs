//! The trace: one JSON object per process, the contract between the guard that writes it and
//! the tools (and people) that read it. docs/trace-format.md describes every field.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

pub const FORMAT: &str = "cublasguard-trace";
/// 2: one name per argument in faults and recent calls alike (a launch's `gridDim`/`blockDim`,
/// a free's `ptr`). Version 1 traces are read with their names brought up to date.
pub const VERSION: u32 = 2;
/// The oldest format version this build reads.
pub const OLDEST_VERSION: u32 = 1;

/// What a `nonfinite_output` fault's message says after naming the inputs that outputs first
/// left unread in the default mode (CUBLASGUARD_SCAN_ORDER): the guard writes it, and the
/// command tells by it that consumed or produced is not known.
pub const INPUTS_LEFT_UNREAD: &str = "were not read (CUBLASGUARD_SCAN_ORDER=outputs-first";

mod args;
mod read;
mod write;

pub use args::*;
pub use read::*;
pub use write::*;

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Trace {
    pub format: String,
    pub version: u32,
    /// The guard that wrote this trace.
    #[serde(default)]
    pub guard: GuardBuild,
    pub process: Process,
    pub environment: Environment,
    /// In call order once read (`parse` sorts them by `seq`, keeping the order within a call):
    /// a crash trace lists them in the order they were stored, which another thread or a
    /// deferred verdict can leave out of call order.
    pub faults: Vec<Fault>,
    pub recent_calls: Vec<RecentCall>,
    pub summary: Summary,
    /// Present when the process died by a fatal signal after the guard started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crash: Option<Crash>,
}

/// The guard's own build: its package version, and the git commit it was built from when it
/// was built from a clone.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct GuardBuild {
    pub version: String,
    #[serde(default)]
    pub commit: Option<String>,
}

impl GuardBuild {
    /// This build.
    pub fn current() -> Self {
        Self { version: env!("CARGO_PKG_VERSION").into(), commit: option_env!("CUBLASGUARD_GIT_COMMIT").map(String::from) }
    }

    /// "0.4.0 (git 1a2b3c4d5e6f)", or the version alone.
    pub fn label(&self) -> String {
        match &self.commit {
            Some(c) => format!("{} (git {c})", self.version),
            None => self.version.clone(),
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Crash {
    pub signal: i32,
    pub name: String,
    pub thread: u32,
    pub time_ns: u64,
    /// The flight recorder was free to read; when false, `recent_calls` is empty.
    pub recent_calls_saved: bool,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Process {
    pub pid: u32,
    pub exe: Option<String>,
    pub argv: Vec<String>,
    pub hostname: String,
    pub rank: Option<i64>,
    pub local_rank: Option<i64>,
    pub world_size: Option<i64>,
    /// RFC 3339, UTC.
    pub started_at: String,
    pub started_at_ns: u64,
    /// The run this process belongs to: the `cublasguard run` that started it
    /// (CUBLASGUARD_RUN_ID; its summary reads only the traces of its own processes), else the
    /// process tree's (CUBLASGUARD_TREE_ID, set by its first guarded process).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Environment {
    /// `cudaRuntimeGetVersion`, e.g. 12090.
    pub runtime_version: Option<i32>,
    /// The driver's CUDA version, e.g. 12090; null when no driver answered.
    pub driver_version: Option<i32>,
    /// cuBLAS as major * 10000 + minor * 100 + patch.
    pub cublas_version: Option<i32>,
    /// `cublasLtGetVersion` of the libcublasLt the process loaded, in the same form: a release
    /// other than cuBLAS's is a mixed pair (pytorch#174320).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cublaslt_version: Option<i32>,
    pub driver: DriverState,
    pub libraries: Vec<LoadedLibrary>,
    /// An allow-list of variables (CUDA_*, CUBLAS*, TORCH_*, ...), never the whole environment.
    pub variables: BTreeMap<String, String>,
    /// Why the on-device scan (CUBLASGUARD_DEVICE_SCAN=on) fell back to the host, if it did.
    #[serde(default)]
    pub device_scan_fallback: Option<String>,
    /// The framework's own build, when the guard can tell (PyTorch: its version.py beside the
    /// loaded libtorch_cuda.so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub framework: Option<FrameworkBuild>,
    /// The Python the process runs, if it runs one (the version its frames come from).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python_version: Option<String>,
    /// Where the running Python's own files lie, learnt at the first frame read: what is not
    /// the user's code (`PythonPaths::holds`). Absent in older traces (names decide there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python_paths: Option<PythonPaths>,
    /// The program's first capability probe that found no usable CUDA, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<ProbeNote>,
    /// The GPU's health through the run: NVML's state, readings and events since the guard
    /// started, the kernel log's Xid lines for this process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_health: Option<crate::gpu_health::GpuHealth>,
}

/// A capability probe (`cudaGetDeviceCount`) that found no driver or no device: a fact about
/// the machine, not a fault. "Use CUDA if available, else the CPU" asks exactly this and then
/// does nothing wrong. It turns into a fault only when the program exits with a failure status
/// (then it is also stored as an `init_failed` fault); a later CUDA call that fails is a fault
/// of its own, with the same cause.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct ProbeNote {
    pub seq: u64,
    pub api: String,
    pub status: i32,
    pub status_name: String,
    pub cause: Option<InitCause>,
    /// The probing thread's Python frames, innermost first (where the program asked).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub python_stack: Vec<PythonFrame>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_name: Option<String>,
    /// The native frames of the probe (the framework's code that asked).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backtrace: Vec<String>,
}

/// Where the running Python keeps its own files and installs packages, as the interpreter
/// computed them at start (`Py_GetPrefix`, `Py_GetExecPrefix`, `Py_GetPath`: no GIL needed).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct PythonPaths {
    /// `sys.prefix` and `sys.exec_prefix` (a virtual environment's folder in one).
    pub prefixes: Vec<String>,
    /// The module search path before `site` ran: the standard library's folders and archive.
    pub stdlib: Vec<String>,
    /// The user's base (`PYTHONUSERBASE`, else `~/.local`), where `pip install --user` puts
    /// packages; absent when neither is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_base: Option<String>,
}

impl PythonPaths {
    /// Whether `file` (an absolute path) is one of the interpreter's own or an installed
    /// package's: inside a standard-library folder, or inside `lib`, `lib64` or `local/lib` of a
    /// prefix (the one a standard-library folder `PREFIX/lib/pythonX.Y` lies in too) or of the
    /// user's base, where every layout puts `site-packages`/`dist-packages`. What the folders
    /// are called decides nothing: a user's folder named `torch` or `site-packages` is theirs.
    pub fn holds(&self, file: &str) -> bool {
        let inside = |folder: &str| {
            let folder = folder.trim_end_matches('/');
            !folder.is_empty() && file.strip_prefix(folder).is_some_and(|rest| rest.starts_with('/'))
        };
        let prefix_of_stdlib = |dir: &str| -> Option<String> {
            let parts: Vec<&str> = dir.split('/').collect();
            let at = parts.iter().rposition(|p| matches!(*p, "lib" | "lib64"))?;
            Some(parts[..at].join("/"))
        };
        let prefixes = self.prefixes.iter().cloned().chain(self.stdlib.iter().filter_map(|d| prefix_of_stdlib(d))).chain(self.user_base.clone());
        self.stdlib.iter().any(|d| inside(d))
            || prefixes.into_iter().any(|p| {
                let p = p.trim_end_matches('/');
                ["lib", "lib64", "local/lib"].iter().any(|lib| inside(&format!("{p}/{lib}")))
            })
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct FrameworkBuild {
    pub name: String,
    pub version: Option<String>,
    /// The CUDA version it was built for; null for a CPU-only build.
    pub cuda: Option<String>,
}

/// The device a fault ran on, recorded when its architecture may be the cause.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct DeviceRecord {
    /// "12.0"
    pub compute_capability: String,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct DriverState {
    /// libcuda.so.1 is mapped in the process.
    pub loaded: bool,
    pub version: Option<i32>,
    pub error: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct LoadedLibrary {
    pub soname: String,
    pub path: String,
}

/// An enum whose values the trace spells by name: each name written once, here, for both the
/// serde form and `name()`. The variants after `written_only` are written, never read by name
/// (deserialising their name is an error, as for a name this build does not know).
macro_rules! named_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal, )*
        }
        $( written_only { $( $(#[$wmeta:meta])* $wvariant:ident = $wtext:literal, )* } )?
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )*
            $( $( $(#[$wmeta])* $wvariant, )* )?
        }

        impl $name {
            /// Every value a trace may name (the written-only ones aside).
            pub const ALL: &'static [Self] = &[$( Self::$variant, )*];

            /// The name the trace spells.
            pub fn name(self) -> &'static str {
                match self {
                    $( Self::$variant => $text, )*
                    $( $( Self::$wvariant => $wtext, )* )?
                }
            }

            /// The value a trace names (`None`: a name this build does not read).
            pub fn from_name(name: &str) -> Option<Self> {
                match name {
                    $( $text => Some(Self::$variant), )*
                    _ => None,
                }
            }
        }

        impl Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.name())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let name = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
                Self::from_name(&name).ok_or_else(|| {
                    const NAMES: &[&str] = &[$( $text, )*];
                    serde::de::Error::unknown_variant(&name, NAMES)
                })
            }
        }
    };
}
pub(crate) use named_enum;

named_enum! {
    pub enum FaultKind {
        InvalidHandle = "invalid_handle",
        InvalidArgument = "invalid_argument",
        HostPointer = "host_pointer",
        OutOfBounds = "out_of_bounds",
        NonfiniteInput = "nonfinite_input",
        NonfiniteOutput = "nonfinite_output",
        AsyncError = "async_error",
        ApiError = "api_error",
        AllocFailed = "alloc_failed",
        InitFailed = "init_failed",
        /// An operand in memory the program freed earlier.
        UseAfterFree = "use_after_free",
        /// CUBLASGUARD_NAN_ORIGIN: the kernel launch after which memory a guarded call uses
        /// first held NaN/Inf (the origin of the run's non-finite values there).
        NonfiniteOrigin = "nonfinite_origin",
        /// The hang watchdog (CUBLASGUARD_HANG_TIMEOUT), or an exit that gave up waiting: a
        /// stream's guarded work stopped completing; the fault is on its first unfinished call.
        GpuHang = "gpu_hang",
    }
    written_only {
        /// A kind this build does not know (a newer guard wrote it): the reader keeps its name
        /// in `Parsed::unknown_kinds`. Never written by the guard, never read from a trace by
        /// name.
        Unknown = "unknown",
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Fault {
    pub seq: u64,
    pub api: String,
    pub kind: FaultKind,
    pub message: String,
    /// What the hooked function returned to its caller.
    pub status: i32,
    pub status_name: String,
    pub error: Option<CudaErrorRecord>,
    pub cause: Option<InitCause>,
    pub thread: u32,
    pub stream: Option<String>,
    pub time_ns: u64,
    pub handle: Option<HandleRecord>,
    /// The call's arguments, of the same type as a recent call's.
    pub args: Args,
    pub operands: Vec<Operand>,
    pub memory: Option<MemoryState>,
    pub backtrace: Vec<String>,
    /// The device's compute capability, for faults an architecture mismatch explains: error
    /// 209 (no kernel image), ARCH_MISMATCH, EXECUTION_FAILED at the process's first GEMM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<DeviceRecord>,
    /// use_after_free: the allocation the operand was in, and the call that freed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub freed_by: Option<FreedBy>,
    /// The faulting thread's Python frames, innermost first (a process that runs Python).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub python_stack: Vec<PythonFrame>,
    /// Why a Python process's faulting thread has no Python frames (an autograd thread, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python_stack_note: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_name: Option<String>,
    /// An asynchronous error: the kernels launched since the guard last found the device clean,
    /// oldest first (one of them faulted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suspects: Vec<Suspect>,
    /// nonfinite_input: the recorded kernel launches since the operand's memory was last seen
    /// finite whose parameters point into it, newest first (the newest: the probable origin).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub writers: Vec<Suspect>,
    /// A fault found after its call returned (CUBLASGUARD_SYNC=deferred): the call at which it
    /// was found (an asynchronous error surfaced there, or a scan's verdict was harvested).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found_at_seq: Option<u64>,
    /// An asynchronous error under CUBLASGUARD_SYNC=deferred: how far each stream the guard
    /// left breadcrumbs on had got when the error surfaced.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub breadcrumbs: Vec<StreamProgress>,
    /// The GPU's health as NVML and the kernel log reported it at the fault (not for faults the
    /// guard finds on the host before the GPU is involved: arguments, bounds, handles).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_health: Option<crate::gpu_health::GpuHealth>,
    /// The operand dump written for this fault (`CUBLASGUARD_DUMP`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dump: Option<String>,
    /// What the dump left out, or why there is none (the byte cap, an unreadable operand).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dump_note: Option<String>,
    /// gpu_hang: how the stream stopped, the kernel it is probably stuck in, and where the
    /// host waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hang: Option<Hang>,
}

/// A stream whose guarded work stopped completing (`gpu_hang`). The fault's `suspects` are the
/// kernels launched on the stream after its last completed guarded call and before the stuck
/// one, oldest first; its `breadcrumbs`, every followed stream's progress.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Hang {
    /// How the hang was found: "watchdog" (CUBLASGUARD_HANG_TIMEOUT) or "exit" (the exit's
    /// bounded wait gave up).
    pub found_by: String,
    /// Seconds since the stream's last breadcrumb landed (or since its first was issued),
    /// when recorded.
    pub stalled_s: u64,
    /// The stream's last guarded call that completed (None: none had).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_landed: Option<u64>,
    /// The kernel the stream is most probably stuck in: the last launch on it before the stuck
    /// call (a kernel that never ends holds everything queued after it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel: Option<Suspect>,
    /// Which launch of that kernel it was since the guard started (before 0.5: its launches on
    /// that stream in the flight recorder, up to and including it): ranks that ran the same
    /// steps count alike.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_ordinal: Option<u64>,
    /// The host threads waiting in a CUDA synchronisation when the hang was recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked_threads: Vec<BlockedThread>,
    /// The stuck call's work completed after the hang was recorded: a slow kernel or a late
    /// peer, not a hang that lasted (false before 0.5, where only the message said so).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub completed_later: bool,
}

/// A host thread inside a CUDA synchronisation (cudaStreamSynchronize, cuCtxSynchronize, ...).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct BlockedThread {
    pub thread: u32,
    pub seq: u64,
    pub api: String,
    /// When it entered the call (ns since the Unix epoch).
    pub since_ns: u64,
    /// Where the program made the call, innermost first (symbolised return addresses).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backtrace: Vec<String>,
    /// Its innermost Python frames (at most four, innermost first), for a Python program.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub python_stack: Vec<PythonFrame>,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Suspect {
    pub seq: u64,
    pub kernel: String,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub stream: String,
    /// Where the program launched it, innermost first (symbolised return addresses), while
    /// the guard still remembered it (its last 1,024 calls); empty before 0.5.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backtrace: Vec<String>,
}

/// One stream's breadcrumbs when an asynchronous error surfaced: the last guarded call whose
/// breadcrumb landed (it and everything before it on the stream completed), and the first that
/// did not (it, or a kernel launched on the stream after the last landed one, faulted).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct StreamProgress {
    pub stream: String,
    pub context: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_landed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_unfinished: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_unfinished_api: Option<String>,
    /// Guarded calls issued on the stream whose breadcrumbs had not landed.
    pub unfinished: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct PythonFrame {
    pub file: String,
    pub line: u32,
    pub function: String,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct FreedBy {
    pub seq: u64,
    pub api: String,
    pub base: String,
    pub size: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct CudaErrorRecord {
    pub code: i32,
    pub name: String,
    /// The call that reported it (e.g. the guard's `cudaStreamSynchronize`).
    pub call: String,
}

named_enum! {
    pub enum InitCauseKind {
        NoDriver = "no_driver",
        DriverTooOld = "driver_too_old",
        NoDevice = "no_device",
        /// No device memory left for the library's own needs (cuBLAS's workspace at handle
        /// creation).
        OutOfMemory = "out_of_memory",
        /// CUDA used in a child forked after the parent initialised it.
        ForkedChild = "forked_child",
        /// An earlier sticky error left the CUDA context unusable.
        ContextLost = "context_lost",
        /// The process had no file descriptor left to open the driver with.
        OutOfFileDescriptors = "out_of_file_descriptors",
        /// The GPU logged a hardware-class Xid (ECC, fallen off the bus, firmware) during the
        /// run: the hardware failed, not the program.
        GpuHardware = "gpu_hardware",
        /// A cuDNN sublibrary the dispatcher (`libcudnn.so.9`) could not load, or loaded in
        /// another version than its own (`cudnn` says which file it looked for and found).
        CudnnSublibrary = "cudnn_sublibrary",
        /// cuDNN built for a newer CUDA runtime or driver than the process has
        /// (`cudnnGetCudartVersion` against the loaded runtime and the driver).
        CudnnIncompatible = "cudnn_incompatible",
        Other = "other",
    }
}

/// Device and process memory when handle creation failed for want of it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct CauseMemory {
    /// `cudaMemGetInfo`, when the runtime could answer.
    pub free: Option<u64>,
    pub total: Option<u64>,
    /// The live allocations this process holds (those the guard saw).
    pub live_count: u64,
    pub live_bytes: u64,
    pub largest: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct InitCause {
    pub kind: InitCauseKind,
    pub message: String,
    pub driver_loadable: bool,
    pub driver_version: Option<i32>,
    pub runtime_version: Option<i32>,
    /// What `cudaGetDeviceCount` returned when the guard asked (or the program's own call).
    pub device_count_status: Option<i32>,
    pub device_count: Option<i32>,
    /// out_of_memory: the memory at that moment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<CauseMemory>,
    /// forked_child: the parent's pid and the first CUDA call it made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_first_call: Option<String>,
    /// context_lost: the sticky error already pending, and the call that revealed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_error: Option<CudaErrorRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_since_seq: Option<u64>,
    /// gpu_hardware: the Xid that names the hardware (docs/trace-format.md lists them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub xid: Option<u64>,
    /// A cuDNN fault: the cuDNN libraries loaded and looked for (`cudnn_sublibrary`,
    /// `cudnn_incompatible`, and any cause of a failing cuDNN call).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cudnn: Option<CudnnLibraries>,
}

/// What the process holds of cuDNN when one of its calls failed.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct CudnnLibraries {
    /// The dispatcher's path (`libcudnn.so.9`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatcher: Option<String>,
    /// `cudnnGetVersion`, as "9.26.0".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// `cudnnGetCudartVersion`: the CUDA runtime cuDNN was built for (13040: 13.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cudart_version: Option<i32>,
    /// Every loaded libcudnn* with its version (its `cudnn_*_version` or `cudnnGetVersion`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub loaded: Vec<CudnnLibrary>,
    /// The sublibraries the dispatcher loads, each with the file names it tries in order and
    /// where one was found (loaded or on disk).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sublibraries: Vec<CudnnSublibrary>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct CudnnLibrary {
    pub path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct CudnnSublibrary {
    /// e.g. "libcudnn_graph".
    pub name: String,
    /// The file names in the order the dispatcher tries them (full version, major.minor,
    /// major, bare), and the folders searched.
    pub looked_for: Vec<String>,
    pub folders: Vec<String>,
    /// The path loaded in this process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loaded: Option<String>,
    /// Its version (loaded ones only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Not loaded: the first candidate found on disk, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_disk: Option<String>,
    /// The library that loads it when not the dispatcher: "libcudnn_graph" for the engines and
    /// heuristics (its own data names them; they load at a backend finalize, not cudnnCreate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loaded_by: Option<String>,
}

impl InitCause {
    /// A cause of `kind`, with nothing known of the driver, the devices or the moment.
    pub fn new(kind: InitCauseKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            driver_loadable: false,
            driver_version: None,
            runtime_version: None,
            device_count_status: None,
            device_count: None,
            memory: None,
            parent_pid: None,
            parent_first_call: None,
            pending_error: None,
            pending_since_seq: None,
            xid: None,
            cudnn: None,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct HandleRecord {
    pub ptr: String,
    pub math_mode: String,
    pub pointer_mode: String,
    pub stream: String,
    /// TF32 or another reduced-precision mode is on.
    pub reduced_precision: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Operand {
    pub name: String,
    pub ptr: String,
    pub dtype: String,
    pub rows: i64,
    pub cols: i64,
    pub ld: i64,
    pub bytes: Option<u64>,
    pub allocation: Option<AllocationRecord>,
    /// Whether the guard read this operand's values (NaN/Inf counts are null otherwise).
    pub scanned: bool,
    /// Larger than CUBLASGUARD_SCAN_BYTES: only evenly spaced columns were read.
    #[serde(default)]
    pub sampled: bool,
    /// Where the scan ran: "device" (the scan kernel) or "host" (copied and scanned there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scan_path: Option<String>,
    pub nan: Option<u64>,
    pub inf: Option<u64>,
    pub first_nonfinite: Option<Position>,
    /// Batched operands: how many matrices, their stride in elements (strided batches), and
    /// whether `ptr` is a device array of matrix pointers.
    #[serde(default)]
    pub batch_count: Option<u64>,
    #[serde(default)]
    pub stride: Option<i64>,
    #[serde(default)]
    pub pointer_array: bool,
    /// Pointer-array batches: the allocation of the first member, or of `bad_member` when one
    /// broke a rule (`allocation` is the array of pointers' own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member_allocation: Option<AllocationRecord>,
    /// The first batch member that broke a rule or held NaN/Inf.
    #[serde(default)]
    pub bad_member: Option<u64>,
    /// Why the operand's pointer and extent were not checked against the allocations (the
    /// arguments or the handle were refused first, an earlier operand's fault stopped the
    /// check, bounds checks are off); `allocation` is still where it lies, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_checked: Option<String>,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Position {
    pub row: u64,
    pub col: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct AllocationRecord {
    pub base: String,
    pub size: u64,
    /// The function that made it (cudaMalloc, cuMemAlloc_v2, cuMemMap, ...), when it is live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api: Option<String>,
    /// Which allocation of the process it was (1 for the first), when it is live (0.5 and
    /// later): what a rerun from this trace finds it by (`cublasguard run --origin-from`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordinal: Option<u64>,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct MemoryState {
    pub free: Option<u64>,
    pub total: Option<u64>,
    pub tracked_live_bytes: u64,
    pub tracked_live_count: u64,
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct RecentCall {
    pub seq: u64,
    pub api: String,
    pub status: i32,
    /// When the call returned (ns since the Unix epoch).
    pub time_ns: u64,
    /// How long the call ran, the guard's checks included (0 in traces before 0.5).
    #[serde(default)]
    pub duration_ns: u64,
    pub thread: u32,
    pub args: Args,
    /// Whether the guard scanned this call's operands (GEMMs).
    #[serde(default)]
    pub scanned: bool,
    /// The call's stream was capturing a CUDA graph: the call was recorded into the graph, not
    /// run, so it was not scanned at its capture (left out when false; traces before 0.5 lack it).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub captured: bool,
}

/// Written through `visit_summary`, read by its fields' names (a unit test holds the two to
/// one another).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
pub struct Summary {
    pub calls: BTreeMap<String, u64>,
    /// Every fault found, stored or not.
    pub faults: u64,
    /// Faults past `CUBLASGUARD_MAX_FAULTS`: counted here, not stored in `faults`.
    #[serde(default)]
    pub dropped_faults: u64,
    /// Calls whose operands were scanned for NaN/Inf, and calls whose scan was skipped by
    /// CUBLASGUARD_SCAN_EVERY or CUBLASGUARD_BUDGET.
    #[serde(default)]
    pub scanned_calls: u64,
    #[serde(default)]
    pub skipped_scans: u64,
    /// Operands past CUBLASGUARD_SCAN_BYTES, of which an even sample of columns (or members)
    /// was scanned, not every element.
    #[serde(default)]
    pub sampled_operands: u64,
    /// Calls made on a stream capturing a CUDA graph: recorded into the graph, not run, and
    /// neither scanned nor counted in `scanned_calls` or `skipped_scans` (0 in traces before 0.5).
    #[serde(default)]
    pub captured_calls: u64,
    /// Of `captured_calls`, those with an operand no replay of the graph scans: a pointer-array
    /// batch (its pointers live in device memory) or a triangle (0 in traces before 0.5).
    #[serde(default)]
    pub unfollowed_captured_calls: u64,
    /// The rules of CUBLASGUARD_IGNORE in force, each with the faults it kept out of the trace
    /// (not counted in `faults`).
    #[serde(default)]
    pub ignored_faults: BTreeMap<String, u64>,
    /// CUBLASGUARD_SYNC=deferred: `deferred`, calls whose NaN/Inf verdict was judged after they
    /// returned; `judged_at_call`, calls the region their scans land in had no room for,
    /// scanned at the call instead; `no_room`, operands not scanned for want of room; `waiting`, calls whose verdict had not landed when the trace was written. Left
    /// out when all are 0.
    #[serde(default)]
    pub deferred_verdicts: BTreeMap<String, u64>,
}

/// Where a summary's numbers come from: a `Summary`, or a live process's counters (which the
/// crash writer reads without allocating).
pub trait SummarySource {
    /// Calls per function, each function once.
    fn calls(&self, f: &mut dyn FnMut(&str, u64));
    fn faults(&self) -> u64;
    fn dropped_faults(&self) -> u64;
    fn scanned_calls(&self) -> u64;
    fn skipped_scans(&self) -> u64;
    fn sampled_operands(&self) -> u64;
    fn captured_calls(&self) -> u64;
    fn unfollowed_captured_calls(&self) -> u64;
    /// Each CUBLASGUARD_IGNORE rule, as written, with the faults it kept out.
    fn ignored_faults(&self, f: &mut dyn FnMut(&str, u64));
    /// The deferred verdicts' counts that are not 0, by name.
    fn deferred_verdicts(&self, f: &mut dyn FnMut(&str, u64));
}

/// Counts by name, handed one by one to the function given.
pub type VisitCounts<'a> = &'a dyn Fn(&mut dyn FnMut(&str, u64));

/// One field of the summary, as `visit_summary` gives it.
pub enum SummaryValue<'a> {
    Count(u64),
    /// Counts by name (a JSON object); `omit_empty`: the field is left out when it has none.
    Counts {
        visit: VisitCounts<'a>,
        omit_empty: bool,
    },
}

/// The summary's fields, by name, in the order the trace has them: the one description of them
/// that both the trace's serde form and the crash writer (signal-safe: no allocation here) walk.
pub fn visit_summary(source: &dyn SummarySource, f: &mut dyn FnMut(&'static str, SummaryValue<'_>)) {
    f("calls", SummaryValue::Counts { visit: &|g| source.calls(g), omit_empty: false });
    f("faults", SummaryValue::Count(source.faults()));
    f("dropped_faults", SummaryValue::Count(source.dropped_faults()));
    f("scanned_calls", SummaryValue::Count(source.scanned_calls()));
    f("skipped_scans", SummaryValue::Count(source.skipped_scans()));
    f("sampled_operands", SummaryValue::Count(source.sampled_operands()));
    f("captured_calls", SummaryValue::Count(source.captured_calls()));
    f("unfollowed_captured_calls", SummaryValue::Count(source.unfollowed_captured_calls()));
    f("ignored_faults", SummaryValue::Counts { visit: &|g| source.ignored_faults(g), omit_empty: true });
    f("deferred_verdicts", SummaryValue::Counts { visit: &|g| source.deferred_verdicts(g), omit_empty: true });
}

impl SummarySource for Summary {
    fn calls(&self, f: &mut dyn FnMut(&str, u64)) {
        self.calls.iter().for_each(|(k, v)| f(k, *v));
    }
    fn faults(&self) -> u64 {
        self.faults
    }
    fn dropped_faults(&self) -> u64 {
        self.dropped_faults
    }
    fn scanned_calls(&self) -> u64 {
        self.scanned_calls
    }
    fn skipped_scans(&self) -> u64 {
        self.skipped_scans
    }
    fn sampled_operands(&self) -> u64 {
        self.sampled_operands
    }
    fn captured_calls(&self) -> u64 {
        self.captured_calls
    }
    fn unfollowed_captured_calls(&self) -> u64 {
        self.unfollowed_captured_calls
    }
    fn ignored_faults(&self, f: &mut dyn FnMut(&str, u64)) {
        self.ignored_faults.iter().for_each(|(k, v)| f(k, *v));
    }
    fn deferred_verdicts(&self, f: &mut dyn FnMut(&str, u64)) {
        self.deferred_verdicts.iter().for_each(|(k, v)| f(k, *v));
    }
}

impl Summary {
    /// The summary `source` gives (a live process's, when the trace is written normally).
    pub fn from_source(source: &dyn SummarySource) -> Self {
        let collect = |visit: VisitCounts<'_>| {
            let mut map = BTreeMap::new();
            visit(&mut |k, v| {
                map.insert(k.to_string(), v);
            });
            map
        };
        Self {
            calls: collect(&|f| source.calls(f)),
            faults: source.faults(),
            dropped_faults: source.dropped_faults(),
            scanned_calls: source.scanned_calls(),
            skipped_scans: source.skipped_scans(),
            sampled_operands: source.sampled_operands(),
            captured_calls: source.captured_calls(),
            unfollowed_captured_calls: source.unfollowed_captured_calls(),
            ignored_faults: collect(&|f| source.ignored_faults(f)),
            deferred_verdicts: collect(&|f| source.deferred_verdicts(f)),
        }
    }
}

impl Serialize for Summary {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        /// Named counts, serialised as an object.
        struct Counts<'a>(VisitCounts<'a>);
        impl Serialize for Counts<'_> {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                let mut map = serializer.serialize_map(None)?;
                let mut result = Ok(());
                (self.0)(&mut |k, v| {
                    if result.is_ok() {
                        result = map.serialize_entry(k, &v);
                    }
                });
                result?;
                map.end()
            }
        }
        let mut map = serializer.serialize_map(None)?;
        let mut result: Result<(), S::Error> = Ok(());
        visit_summary(self, &mut |name, value| {
            if result.is_err() {
                return;
            }
            result = match value {
                SummaryValue::Count(n) => map.serialize_entry(name, &n),
                SummaryValue::Counts { visit, omit_empty } => {
                    let mut any = false;
                    visit(&mut |_, _| any = true);
                    if omit_empty && !any {
                        Ok(())
                    } else {
                        map.serialize_entry(name, &Counts(visit))
                    }
                }
            };
        });
        result?;
        map.end()
    }
}

/// The trace's head, the fields before `faults`, each serialised as itself: the crash writer
/// prepares it in advance and appends the rest.
#[derive(Serialize)]
struct Head<'a> {
    format: &'a str,
    version: u32,
    guard: &'a GuardBuild,
    process: &'a Process,
    environment: &'a Environment,
}

/// `trace`'s head as compact JSON, without the brace that closes it: `{"format":...,
/// "environment":{...}`, for the crash writer to go on with `,"faults":[`.
pub fn head_json(trace: &Trace) -> serde_json::Result<Vec<u8>> {
    let head = Head { format: &trace.format, version: trace.version, guard: &trace.guard, process: &trace.process, environment: &trace.environment };
    let mut bytes = serde_json::to_vec(&head)?;
    // A struct serialises as one object: its last byte is its closing brace.
    match bytes.pop() {
        Some(b'}') => Ok(bytes),
        _ => Err(serde::ser::Error::custom("the trace's head is not a JSON object")),
    }
}

/// A pointer as the trace spells it: hex, because JSON numbers lose bits above 2^53.
pub fn hex(ptr: u64) -> String {
    format!("{ptr:#x}")
}

/// A plain fault for the unit tests of this crate and of the preload library.
#[doc(hidden)]
pub fn sample_fault(seq: u64) -> Fault {
    Fault { thread: 1, ..Fault::new(seq, "cublasSgemm_v2", FaultKind::ApiError, "m", 13, "CUBLAS_STATUS_EXECUTION_FAILED") }
}

impl Fault {
    /// A fault of `kind` on call `seq` to `api`, with its message and the status the call
    /// returned; everything else empty (no thread, time, operands or context yet), for the
    /// recorder of the fault to fill in.
    pub fn new(seq: u64, api: &str, kind: FaultKind, message: &str, status: i32, status_name: &str) -> Self {
        Fault {
            seq,
            api: api.to_string(),
            kind,
            message: message.to_string(),
            status,
            status_name: status_name.to_string(),
            error: None,
            cause: None,
            thread: 0,
            stream: None,
            time_ns: 0,
            handle: None,
            args: Args::default(),
            operands: Vec::new(),
            memory: None,
            backtrace: Vec::new(),
            device: None,
            freed_by: None,
            python_stack: Vec::new(),
            python_stack_note: None,
            thread_name: None,
            suspects: Vec::new(),
            writers: Vec::new(),
            found_at_seq: None,
            breadcrumbs: Vec::new(),
            dump: None,
            gpu_health: None,
            dump_note: None,
            hang: None,
        }
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_interpreters_own_files_are_told_by_where_they_lie_not_by_their_folders_names() {
        let venv = PythonPaths {
            prefixes: vec!["/home/me/proj/.venv".into()],
            stdlib: vec!["/usr/lib/python311.zip".into(), "/usr/lib/python3.11".into(), "/usr/lib/python3.11/lib-dynload".into()],
            user_base: Some("/home/me/.local".into()),
        };
        for installed in [
            "/home/me/proj/.venv/lib/python3.11/site-packages/torch/nn/functional.py",
            "/usr/lib/python3.11/threading.py",
            "/usr/lib/python3/dist-packages/numpy/core/numeric.py",
            "/usr/local/lib/python3.11/dist-packages/jax/api.py",
            "/home/me/.local/lib/python3.11/site-packages/transformers/bert.py",
        ] {
            assert!(venv.holds(installed), "{installed} is the interpreter's or a package's");
        }
        for users in
            ["/home/me/proj/torch/train.py", "/home/me/site-packages/torch/train.py", "/home/me/lib/python3.11/model.py", "/srv/usr/lib/x.py", "/usr/lib2/x.py"]
        {
            assert!(!venv.holds(users), "{users} is the user's");
        }
        let conda = PythonPaths { prefixes: vec!["/opt/conda".into()], stdlib: vec!["/opt/conda/lib/python3.12".into()], user_base: None };
        assert!(conda.holds("/opt/conda/lib/python3.12/site-packages/torch/_tensor.py"));
        assert!(!conda.holds("/opt/conda-projects/train.py"), "a folder beside the prefix is not inside it");
    }

    use super::*;

    fn sample() -> Trace {
        Trace { format: FORMAT.into(), version: VERSION, ..Default::default() }
    }

    #[test]
    fn round_trips_through_a_file() {
        let dir = std::env::temp_dir().join(format!("cg-trace-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.json");
        let mut t = sample();
        t.summary.faults = 2;
        write_atomic(&path, &t).unwrap();
        assert_eq!(read(&path).unwrap(), t);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let leftovers: Vec<_> = std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()).collect();
        assert_eq!(leftovers.len(), 1, "no temporary file left behind");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn wrong_types_for_format_and_version_are_named_as_such() {
        let e = parse(r#"{"format": 5, "version": 1}"#).unwrap_err().to_string();
        assert!(e.contains("\"format\" is not a string but a number"), "{e}");
        let e = parse(r#"{"format": "cublasguard-trace", "version": "1"}"#).unwrap_err().to_string();
        assert!(e.contains("\"version\" is not a whole number but a string"), "{e}");
        let e = parse(r#"{"format": "cublasguard-trace", "version": 7}"#).unwrap_err().to_string();
        assert!(e.contains("format version 7"), "{e}");
    }

    #[test]
    fn only_regular_files_of_a_sane_size_are_read() {
        for special in ["/dev/zero", "/dev/null", "/"] {
            assert!(read(Path::new(special)).is_err(), "{special}");
        }
        let dir = std::env::temp_dir().join(format!("cg-fifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("trace.json");
        let c = std::ffi::CString::new(fifo.display().to_string()).unwrap();
        // SAFETY: mkfifo with a valid path.
        unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
        let e = read(&fifo).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "a FIFO is refused at once: {e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn rejects_truncated_and_foreign_documents() {
        let text = serde_json::to_string(&sample()).unwrap();
        assert!(matches!(parse(&text[..text.len() / 2]), Err(ReadError::NotJson(_))));
        assert!(matches!(parse(r#"{"format":"chrome"}"#), Err(ReadError::Foreign(_))));
        assert!(matches!(parse(r#"{"a":1}"#), Err(ReadError::Foreign(_))));
        assert!(matches!(parse(r#"{"format":"cublasguard-trace","version":9}"#), Err(ReadError::Foreign(_))));
    }

    /// A trace with two faults, as JSON, written by the guard version given.
    fn two_faults(guard: &str) -> serde_json::Value {
        let mut t = sample();
        t.guard.version = guard.into();
        t.faults = vec![sample_fault(1), sample_fault(2)];
        serde_json::to_value(&t).unwrap()
    }

    #[test]
    fn faults_listed_in_the_order_they_were_stored_are_read_in_call_order() {
        let mut t = sample();
        let mut second_of_call_2 = sample_fault(2);
        second_of_call_2.message = "second".into();
        t.faults = vec![sample_fault(3), sample_fault(2), sample_fault(1), second_of_call_2];
        let read = parse(&serde_json::to_string(&t).unwrap()).unwrap();
        let order: Vec<(u64, &str)> = read.faults.iter().map(|f| (f.seq, f.message.as_str())).collect();
        assert_eq!(order[..3].iter().map(|o| o.0).collect::<Vec<_>>(), [1, 2, 2]);
        assert_eq!((order[1].1 == "second", order[2].1 == "second", order[3].0), (false, true, 3), "{order:?}");
        // A newer trace, read through its JSON tree, too; an unknown kind stays with its fault.
        let mut v = two_faults("9.1.0");
        v["faults"][0]["seq"] = 5.into();
        v["faults"][0]["kind"] = "tensor_core_fault".into();
        let p = parse_lenient(&v.to_string()).unwrap();
        assert_eq!(p.trace.faults.iter().map(|f| f.seq).collect::<Vec<_>>(), [2, 5]);
        assert_eq!((p.kind_name(0), p.kind_name(1)), ("api_error", "tensor_core_fault"));
    }

    #[test]
    fn a_fault_kind_this_build_does_not_know_is_read_with_its_name_and_a_note_to_upgrade() {
        let mut v = two_faults("9.1.0");
        v["faults"][1]["kind"] = "tensor_core_fault".into();
        v["faults"][1]["lane"] = 7.into();
        let p = parse_lenient(&v.to_string()).unwrap();
        assert_eq!(p.trace.faults.len(), 2);
        assert_eq!((p.trace.faults[0].kind, p.trace.faults[1].kind), (FaultKind::ApiError, FaultKind::Unknown));
        assert_eq!(p.kind_name(1), "tensor_core_fault");
        assert_eq!(p.kind_name(0), "api_error");
        assert_eq!(p.notes.len(), 1, "{:?}", p.notes);
        let note = &p.notes[0];
        for w in ["written by cublasguard 9.1.0", "'tensor_core_fault'", "faults[].lane", "Upgrade cublasguard to 9.1.0 or later"] {
            assert!(note.contains(w), "{w}: {note}");
        }
        // The name is never taken for a kind by anything that reads kinds by name.
        assert!(serde_json::from_value::<FaultKind>("unknown".into()).is_err());
    }

    #[test]
    fn a_newer_format_version_is_read_as_far_as_it_fits() {
        let mut v = two_faults("2.0.0");
        v["version"] = (VERSION + 1).into();
        v["faults"][0]["operands"] = "moved to a table".into();
        v["summary"] = "a new shape".into();
        let p = parse_lenient(&v.to_string()).unwrap();
        assert_eq!(p.trace.faults.len(), 1, "the fault that fits is read");
        assert_eq!(p.trace.faults[0].seq, 2);
        assert_eq!(p.unreadable_faults, 1);
        let note = &p.notes[0];
        let newer = format!("format version {}", VERSION + 1);
        for w in [newer.as_str(), "cublasguard 2.0.0", "1 fault(s) it could not read", "(summary)"] {
            assert!(note.contains(w), "{w}: {note}");
        }
    }

    #[test]
    fn a_trace_this_build_reads_whole_has_no_note() {
        let p = parse_lenient(&two_faults(env!("CARGO_PKG_VERSION")).to_string()).unwrap();
        assert!(p.notes.is_empty() && p.unknown_kinds.is_empty(), "{:?}", p.notes);
        // Fields left empty are how this build writes them too: not unknown.
        let mut v = two_faults(env!("CARGO_PKG_VERSION"));
        v["faults"][0]["python_stack"] = serde_json::json!([]);
        v["crash"] = serde_json::Value::Null;
        assert!(parse_lenient(&v.to_string()).unwrap().notes.is_empty());
    }

    #[test]
    fn a_trace_of_this_version_that_breaks_its_format_is_still_an_error() {
        let mut v = two_faults(env!("CARGO_PKG_VERSION"));
        v["faults"][0]["seq"] = "one".into();
        assert!(matches!(parse_lenient(&v.to_string()), Err(ReadError::NotJson(_))));
        assert!(matches!(parse("not json at all"), Err(ReadError::Foreign(_))));
    }

    #[test]
    fn fault_kinds_serialise_as_snake_case() {
        assert_eq!(serde_json::to_string(&FaultKind::NonfiniteOutput).unwrap(), "\"nonfinite_output\"");
        assert_eq!(FaultKind::OutOfBounds.name(), "out_of_bounds");
    }

    #[test]
    fn every_kind_is_written_and_read_by_the_one_name_it_has() {
        for &kind in FaultKind::ALL {
            let json = serde_json::to_value(kind).unwrap();
            assert_eq!(json, kind.name(), "{kind:?}");
            assert_eq!(serde_json::from_value::<FaultKind>(json).unwrap(), kind);
        }
        for &kind in InitCauseKind::ALL {
            let json = serde_json::to_value(kind).unwrap();
            assert_eq!(json, kind.name(), "{kind:?}");
            assert_eq!(serde_json::from_value::<InitCauseKind>(json).unwrap(), kind);
        }
        assert_eq!(FaultKind::ALL.len(), 13, "Unknown is written only");
        assert_eq!(serde_json::to_value(FaultKind::Unknown).unwrap(), "unknown");
        assert_eq!(FaultKind::from_name("unknown"), None);
        assert_eq!(InitCauseKind::OutOfFileDescriptors.name(), "out_of_file_descriptors");
    }

    #[test]
    fn the_summary_is_written_through_its_visit_with_every_field_it_reads() {
        let summary = Summary {
            calls: [("cublasSgemm_v2".to_string(), 3), ("cudaMalloc".to_string(), 2)].into(),
            faults: 4,
            dropped_faults: 1,
            scanned_calls: 2,
            skipped_scans: 1,
            sampled_operands: 3,
            captured_calls: 4,
            unfollowed_captured_calls: 1,
            ignored_faults: [("kind=nonfinite_input".to_string(), 5)].into(),
            deferred_verdicts: [("deferred".to_string(), 2)].into(),
        };
        let json = serde_json::to_value(&summary).unwrap();
        let keys: Vec<&str> = json.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "calls",
                "captured_calls",
                "deferred_verdicts",
                "dropped_faults",
                "faults",
                "ignored_faults",
                "sampled_operands",
                "scanned_calls",
                "skipped_scans",
                "unfollowed_captured_calls"
            ]
        );
        assert_eq!(serde_json::from_value::<Summary>(json).unwrap(), summary, "each field read back under the name it was written");
        assert_eq!(Summary::from_source(&summary), summary);
        // An empty map of ignore rules is left out, as before.
        let json = serde_json::to_value(Summary::default()).unwrap();
        assert!(json.get("ignored_faults").is_none() && json.get("calls").is_some(), "{json}");
    }

    #[test]
    fn arguments_keep_their_types_through_the_trace() {
        let args: Args = [
            ("transa", Arg::Label("T".into())),
            ("m", Arg::Int(-3)),
            ("alpha", Arg::Float(1.0)),
            ("beta", Arg::Complex([0.5, 0.0])),
            ("handle", Arg::Address(0x7f00_0000_1000)),
            ("gridDim", Arg::Dim3([8, 1, 1])),
            ("size", Arg::Other(serde_json::json!(u64::MAX))),
        ]
        .into_iter()
        .collect();
        let json = serde_json::to_value(&args).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"transa": "T", "m": -3, "alpha": 1.0, "beta": [0.5, 0.0], "handle": "0x7f0000001000", "gridDim": [8, 1, 1], "size": u64::MAX})
        );
        let back: Args = serde_json::from_value(json).unwrap();
        assert_eq!(back, args);
        assert_eq!((back.label("transa"), back.int("m"), back.address("handle")), (Some("T"), Some(-3), Some(0x7f00_0000_1000)));
        assert_eq!(back["missing"], serde_json::Value::Null);
        // A name that only looks like an address in part stays a label.
        assert_eq!(Arg::from(serde_json::json!("0x0010")), Arg::Label("0x0010".into()));
    }

    #[test]
    fn a_version_1_trace_is_read_with_its_arguments_under_their_new_names() {
        let old = r#"{"format": "cublasguard-trace", "version": 1, "guard": {"version": "0.4.0", "commit": null},
            "process": {"pid": 7, "exe": null, "argv": [], "hostname": "h", "rank": null, "local_rank": null, "world_size": null, "started_at": "", "started_at_ns": 0},
            "environment": {"runtime_version": null, "driver_version": null, "cublas_version": null, "driver": {"loaded": false, "version": null, "error": null}, "libraries": [], "variables": {}},
            "faults": [{"seq": 2, "api": "cudaFree", "kind": "api_error", "message": "m", "status": 1, "status_name": "cudaErrorInvalidValue",
                "error": null, "cause": null, "thread": 7, "stream": null, "time_ns": 0, "handle": null, "args": {"devPtr": "0x10"}, "operands": [], "memory": null, "backtrace": []}],
            "recent_calls": [{"seq": 1, "api": "cudaLaunchKernel", "status": 0, "time_ns": 1, "thread": 7,
                "args": {"func": "0x4011a0", "gridX": 64, "gridY": 2, "gridZ": 1, "blockX": 256, "blockY": 1, "blockZ": 1, "sharedMem": 0, "stream": "0x0"}}],
            "summary": {"calls": {"cudaFree": 1, "cudaLaunchKernel": 1}, "faults": 1}}"#;
        let p = parse_lenient(old).unwrap();
        assert!(p.notes.is_empty(), "{:?}", p.notes);
        let t = p.trace;
        assert_eq!(t.faults[0].args.address("ptr"), Some(0x10));
        assert!(!t.faults[0].args.contains_key("devPtr"));
        let launch = &t.recent_calls[0].args;
        assert_eq!((launch["gridDim"].clone(), launch["blockDim"].clone()), (Arg::Dim3([64, 2, 1]), Arg::Dim3([256, 1, 1])));
        assert!(["gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"].iter().all(|n| !launch.contains_key(n)), "{launch:?}");
        // Version 2 writes the new names, and a version 0 is no trace this build reads.
        assert_eq!(VERSION, 2);
        assert!(parse(&old.replace("\"version\": 1,", "\"version\": 0,")).is_err());
    }
}
