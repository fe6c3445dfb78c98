//! CUDA and cuBLAS values, decoded from the plain integers that cross the C boundary.
//! Nothing here trusts a caller's value: everything decodes into a known variant or `Unknown`.

/// `cublasStatus_t` names, as `cublasGetStatusName` spells them.
pub fn cublas_status_name(status: i32) -> &'static str {
    match status {
        0 => "CUBLAS_STATUS_SUCCESS",
        1 => "CUBLAS_STATUS_NOT_INITIALIZED",
        3 => "CUBLAS_STATUS_ALLOC_FAILED",
        7 => "CUBLAS_STATUS_INVALID_VALUE",
        8 => "CUBLAS_STATUS_ARCH_MISMATCH",
        11 => "CUBLAS_STATUS_MAPPING_ERROR",
        13 => "CUBLAS_STATUS_EXECUTION_FAILED",
        14 => "CUBLAS_STATUS_INTERNAL_ERROR",
        15 => "CUBLAS_STATUS_NOT_SUPPORTED",
        16 => "CUBLAS_STATUS_LICENSE_ERROR",
        _ => "CUBLAS_STATUS_UNKNOWN",
    }
}

/// `cudnnStatus_t` names, as cuDNN 9's `cudnn_graph.h` spells them (9.26: the deprecated
/// aliases share these values, so each value has the one current name).
pub fn cudnn_status_name(status: i32) -> &'static str {
    match status {
        0 => "CUDNN_STATUS_SUCCESS",
        1001 => "CUDNN_STATUS_NOT_INITIALIZED",
        1002 => "CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH",
        1003 => "CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH",
        1004 => "CUDNN_STATUS_DEPRECATED",
        1005 => "CUDNN_STATUS_LICENSE_ERROR",
        1006 => "CUDNN_STATUS_RUNTIME_IN_PROGRESS",
        1007 => "CUDNN_STATUS_RUNTIME_FP_OVERFLOW",
        1008 => "CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED",
        2000 => "CUDNN_STATUS_BAD_PARAM",
        2001 => "CUDNN_STATUS_INVALID_VALUE",
        2002 => "CUDNN_STATUS_BAD_PARAM_NULL_POINTER",
        2003 => "CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER",
        2004 => "CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED",
        2005 => "CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND",
        2006 => "CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT",
        2007 => "CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH",
        2008 => "CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH",
        2009 => "CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES",
        2010 => "CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE",
        2011 => "CUDNN_STATUS_BAD_PARAM_CUDA_GRAPH_MISMATCH",
        2012 => "CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE",
        3000 => "CUDNN_STATUS_NOT_SUPPORTED",
        3001 => "CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN",
        3002 => "CUDNN_STATUS_NOT_SUPPORTED_SHAPE",
        3003 => "CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE",
        3004 => "CUDNN_STATUS_NOT_SUPPORTED_LAYOUT",
        3005 => "CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER",
        3006 => "CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART",
        3007 => "CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH",
        3008 => "CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING",
        3009 => "CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE",
        3010 => "CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT",
        3011 => "CUDNN_STATUS_NOT_SUPPORTED_PADDING",
        3012 => "CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM",
        3013 => "CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API",
        3014 => "CUDNN_STATUS_NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE",
        4000 => "CUDNN_STATUS_INTERNAL_ERROR",
        4001 => "CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED",
        4002 => "CUDNN_STATUS_INTERNAL_ERROR_UNEXPECTED_VALUE",
        4003 => "CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED",
        4004 => "CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED",
        4005 => "CUDNN_STATUS_INTERNAL_ERROR_BAD_LAUNCH_PARAM",
        4006 => "CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED",
        5000 => "CUDNN_STATUS_EXECUTION_FAILED",
        5001 => "CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER",
        5002 => "CUDNN_STATUS_EXECUTION_FAILED_CUBLAS",
        5003 => "CUDNN_STATUS_EXECUTION_FAILED_CUDART",
        5004 => "CUDNN_STATUS_EXECUTION_FAILED_CURAND",
        _ => "CUDNN_STATUS_UNKNOWN",
    }
}

/// A cuDNN status's category (`CUDNN_STATUS_CATEGORY`: 1000, 2000, ...) and its specific
/// sub-code within it (`CUDNN_STATUS_SPECIFIC_ERROR`), as `cudnn_graph.h` splits them.
pub fn cudnn_status_parts(status: i32) -> (i32, i32) {
    (status / 1000 * 1000, status % 1000)
}

pub const CUDNN_SUCCESS: i32 = 0;
pub const CUDNN_NOT_INITIALIZED: i32 = 1001;
pub const CUDNN_BAD_PARAM: i32 = 2000;
pub const CUDNN_SUBLIBRARY_VERSION_MISMATCH: i32 = 1002;
pub const CUDNN_SUBLIBRARY_LOADING_FAILED: i32 = 1008;
pub const CUDNN_INCOMPATIBLE_CUDA_DRIVER: i32 = 3005;
pub const CUDNN_INCOMPATIBLE_CUDART: i32 = 3006;
pub const CUDNN_SUBLIBRARY_UNAVAILABLE: i32 = 3009;
pub const CUDNN_DEVICE_ALLOCATION_FAILED: i32 = 4004;
pub const CUDNN_EXECUTION_FAILED: i32 = 5000;

/// A cuDNN version number as `cudnnGetVersion` gives it (9.x: major·10000 + minor·100 + patch;
/// 8.x: major·1000 + minor·100 + patch), as "9.26.0".
pub fn cudnn_version(v: u64) -> String {
    if v >= 90000 {
        format!("{}.{}.{}", v / 10000, v % 10000 / 100, v % 100)
    } else {
        format!("{}.{}.{}", v / 1000, v % 1000 / 100, v % 100)
    }
}

pub const CUBLAS_SUCCESS: i32 = 0;
pub const CUBLAS_NOT_INITIALIZED: i32 = 1;
pub const CUBLAS_ALLOC_FAILED: i32 = 3;
pub const CUBLAS_INVALID_VALUE: i32 = 7;
pub const CUBLAS_EXECUTION_FAILED: i32 = 13;

pub const CUDA_SUCCESS: i32 = 0;
pub const CUDA_ERROR_INITIALIZATION: i32 = 3;
pub const CUDA_ERROR_INSUFFICIENT_DRIVER: i32 = 35;
pub const CUDA_ERROR_NO_DEVICE: i32 = 100;

/// `cudaError_t` names: every value of the CUDA 12.x/13 runtime's `driver_types.h` (numbers as
/// NVIDIA gives them: 720 is `cudaErrorCooperativeLaunchTooLarge`, 721 `cudaErrorTensorMemoryLeak`).
pub fn cuda_error_name(code: i32) -> &'static str {
    match code {
        0 => "cudaSuccess",
        1 => "cudaErrorInvalidValue",
        2 => "cudaErrorMemoryAllocation",
        3 => "cudaErrorInitializationError",
        4 => "cudaErrorCudartUnloading",
        5 => "cudaErrorProfilerDisabled",
        6 => "cudaErrorProfilerNotInitialized",
        7 => "cudaErrorProfilerAlreadyStarted",
        8 => "cudaErrorProfilerAlreadyStopped",
        9 => "cudaErrorInvalidConfiguration",
        12 => "cudaErrorInvalidPitchValue",
        13 => "cudaErrorInvalidSymbol",
        16 => "cudaErrorInvalidHostPointer",
        17 => "cudaErrorInvalidDevicePointer",
        18 => "cudaErrorInvalidTexture",
        19 => "cudaErrorInvalidTextureBinding",
        20 => "cudaErrorInvalidChannelDescriptor",
        21 => "cudaErrorInvalidMemcpyDirection",
        22 => "cudaErrorAddressOfConstant",
        23 => "cudaErrorTextureFetchFailed",
        24 => "cudaErrorTextureNotBound",
        25 => "cudaErrorSynchronizationError",
        26 => "cudaErrorInvalidFilterSetting",
        27 => "cudaErrorInvalidNormSetting",
        28 => "cudaErrorMixedDeviceExecution",
        31 => "cudaErrorNotYetImplemented",
        32 => "cudaErrorMemoryValueTooLarge",
        34 => "cudaErrorStubLibrary",
        35 => "cudaErrorInsufficientDriver",
        36 => "cudaErrorCallRequiresNewerDriver",
        37 => "cudaErrorInvalidSurface",
        43 => "cudaErrorDuplicateVariableName",
        44 => "cudaErrorDuplicateTextureName",
        45 => "cudaErrorDuplicateSurfaceName",
        46 => "cudaErrorDevicesUnavailable",
        49 => "cudaErrorIncompatibleDriverContext",
        52 => "cudaErrorMissingConfiguration",
        53 => "cudaErrorPriorLaunchFailure",
        65 => "cudaErrorLaunchMaxDepthExceeded",
        66 => "cudaErrorLaunchFileScopedTex",
        67 => "cudaErrorLaunchFileScopedSurf",
        68 => "cudaErrorSyncDepthExceeded",
        69 => "cudaErrorLaunchPendingCountExceeded",
        98 => "cudaErrorInvalidDeviceFunction",
        100 => "cudaErrorNoDevice",
        101 => "cudaErrorInvalidDevice",
        102 => "cudaErrorDeviceNotLicensed",
        103 => "cudaErrorSoftwareValidityNotEstablished",
        127 => "cudaErrorStartupFailure",
        200 => "cudaErrorInvalidKernelImage",
        201 => "cudaErrorDeviceUninitialized",
        205 => "cudaErrorMapBufferObjectFailed",
        206 => "cudaErrorUnmapBufferObjectFailed",
        207 => "cudaErrorArrayIsMapped",
        208 => "cudaErrorAlreadyMapped",
        209 => "cudaErrorNoKernelImageForDevice",
        210 => "cudaErrorAlreadyAcquired",
        211 => "cudaErrorNotMapped",
        212 => "cudaErrorNotMappedAsArray",
        213 => "cudaErrorNotMappedAsPointer",
        214 => "cudaErrorECCUncorrectable",
        215 => "cudaErrorUnsupportedLimit",
        216 => "cudaErrorDeviceAlreadyInUse",
        217 => "cudaErrorPeerAccessUnsupported",
        218 => "cudaErrorInvalidPtx",
        219 => "cudaErrorInvalidGraphicsContext",
        220 => "cudaErrorNvlinkUncorrectable",
        221 => "cudaErrorJitCompilerNotFound",
        222 => "cudaErrorUnsupportedPtxVersion",
        223 => "cudaErrorJitCompilationDisabled",
        224 => "cudaErrorUnsupportedExecAffinity",
        225 => "cudaErrorUnsupportedDevSideSync",
        226 => "cudaErrorContained",
        300 => "cudaErrorInvalidSource",
        301 => "cudaErrorFileNotFound",
        302 => "cudaErrorSharedObjectSymbolNotFound",
        303 => "cudaErrorSharedObjectInitFailed",
        304 => "cudaErrorOperatingSystem",
        400 => "cudaErrorInvalidResourceHandle",
        401 => "cudaErrorIllegalState",
        402 => "cudaErrorLossyQuery",
        500 => "cudaErrorSymbolNotFound",
        600 => "cudaErrorNotReady",
        700 => "cudaErrorIllegalAddress",
        701 => "cudaErrorLaunchOutOfResources",
        702 => "cudaErrorLaunchTimeout",
        703 => "cudaErrorLaunchIncompatibleTexturing",
        704 => "cudaErrorPeerAccessAlreadyEnabled",
        705 => "cudaErrorPeerAccessNotEnabled",
        708 => "cudaErrorSetOnActiveProcess",
        709 => "cudaErrorContextIsDestroyed",
        710 => "cudaErrorAssert",
        711 => "cudaErrorTooManyPeers",
        712 => "cudaErrorHostMemoryAlreadyRegistered",
        713 => "cudaErrorHostMemoryNotRegistered",
        714 => "cudaErrorHardwareStackError",
        715 => "cudaErrorIllegalInstruction",
        716 => "cudaErrorMisalignedAddress",
        717 => "cudaErrorInvalidAddressSpace",
        718 => "cudaErrorInvalidPc",
        719 => "cudaErrorLaunchFailure",
        720 => "cudaErrorCooperativeLaunchTooLarge",
        721 => "cudaErrorTensorMemoryLeak",
        800 => "cudaErrorNotPermitted",
        801 => "cudaErrorNotSupported",
        802 => "cudaErrorSystemNotReady",
        803 => "cudaErrorSystemDriverMismatch",
        804 => "cudaErrorCompatNotSupportedOnDevice",
        805 => "cudaErrorMpsConnectionFailed",
        806 => "cudaErrorMpsRpcFailure",
        807 => "cudaErrorMpsServerNotReady",
        808 => "cudaErrorMpsMaxClientsReached",
        809 => "cudaErrorMpsMaxConnectionsReached",
        810 => "cudaErrorMpsClientTerminated",
        811 => "cudaErrorCdpNotSupported",
        812 => "cudaErrorCdpVersionMismatch",
        900 => "cudaErrorStreamCaptureUnsupported",
        901 => "cudaErrorStreamCaptureInvalidated",
        902 => "cudaErrorStreamCaptureMerge",
        903 => "cudaErrorStreamCaptureUnmatched",
        904 => "cudaErrorStreamCaptureUnjoined",
        905 => "cudaErrorStreamCaptureIsolation",
        906 => "cudaErrorStreamCaptureImplicit",
        907 => "cudaErrorCapturedEvent",
        908 => "cudaErrorStreamCaptureWrongThread",
        909 => "cudaErrorTimeout",
        910 => "cudaErrorGraphExecUpdateFailure",
        911 => "cudaErrorExternalDevice",
        912 => "cudaErrorInvalidClusterSize",
        913 => "cudaErrorFunctionNotLoaded",
        914 => "cudaErrorInvalidResourceType",
        915 => "cudaErrorInvalidResourceConfiguration",
        999 => "cudaErrorUnknown",
        10000 => "cudaErrorApiFailureBase",
        _ => "cudaErrorUnrecognized",
    }
}

/// Errors that mean the runtime could not start at all (no driver, too old, no device).
pub fn cuda_error_is_init_failure(code: i32) -> bool {
    matches!(code, CUDA_ERROR_INITIALIZATION | CUDA_ERROR_INSUFFICIENT_DRIVER | CUDA_ERROR_NO_DEVICE)
}

/// Sticky errors leave the CUDA context unusable until the process restarts.
pub fn cuda_error_is_sticky(code: i32) -> bool {
    matches!(code, 226 | 700 | 702 | 710 | 714..=719 | 721 | 810 | 911)
}

/// `cublasOperation_t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    N,
    T,
    C,
    Unknown(i32),
}

impl Operation {
    pub fn decode(raw: i32) -> Self {
        match raw {
            0 => Self::N,
            1 => Self::T,
            2 => Self::C,
            other => Self::Unknown(other),
        }
    }

    pub fn transposes(self) -> bool {
        matches!(self, Self::T | Self::C)
    }

    pub fn label(self) -> String {
        match self {
            Self::N => "N".into(),
            Self::T => "T".into(),
            Self::C => "C".into(),
            Self::Unknown(v) => format!("unknown({v})"),
        }
    }
}

/// The two-valued cuBLAS enums of the triangular solves, decoded the same way: `cublasSideMode_t`
/// (left 0, right 1), `cublasFillMode_t` (lower 0, upper 1; full 2 is not a triangle) and
/// `cublasDiagType_t` (non-unit 0, unit 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Left,
    Right,
    Unknown(i32),
}

impl Side {
    pub const LABELS: &'static [&'static str] = &["left", "right"];

    pub fn decode(raw: i32) -> Self {
        match raw {
            0 => Self::Left,
            1 => Self::Right,
            other => Self::Unknown(other),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fill {
    Lower,
    Upper,
    Unknown(i32),
}

impl Fill {
    pub const LABELS: &'static [&'static str] = &["lower", "upper"];

    pub fn decode(raw: i32) -> Self {
        match raw {
            0 => Self::Lower,
            1 => Self::Upper,
            other => Self::Unknown(other),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Diag {
    NonUnit,
    Unit,
    Unknown(i32),
}

impl Diag {
    pub const LABELS: &'static [&'static str] = &["non-unit", "unit"];

    pub fn decode(raw: i32) -> Self {
        match raw {
            0 => Self::NonUnit,
            1 => Self::Unit,
            other => Self::Unknown(other),
        }
    }
}

/// `cublasPointerMode_t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PointerMode {
    Host,
    Device,
    Unknown(i32),
}

impl PointerMode {
    pub fn decode(raw: i32) -> Self {
        match raw {
            0 => Self::Host,
            1 => Self::Device,
            other => Self::Unknown(other),
        }
    }

    pub fn label(self) -> String {
        match self {
            Self::Host => "HOST".into(),
            Self::Device => "DEVICE".into(),
            Self::Unknown(v) => format!("unknown({v})"),
        }
    }
}

/// `cublasMath_t`: a base mode plus the DISALLOW_REDUCED_PRECISION_REDUCTION bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MathMode(pub i32);

impl MathMode {
    const DISALLOW_REDUCED_PRECISION_REDUCTION: i32 = 16;

    /// TF32 tensor-op math: float32 GEMMs round their inputs to 10 mantissa bits.
    pub fn uses_tf32(self) -> bool {
        self.0 & !Self::DISALLOW_REDUCED_PRECISION_REDUCTION == 3
    }

    pub fn label(self) -> String {
        let base = match self.0 & !Self::DISALLOW_REDUCED_PRECISION_REDUCTION {
            0 => "CUBLAS_DEFAULT_MATH".to_string(),
            1 => "CUBLAS_TENSOR_OP_MATH".to_string(),
            2 => "CUBLAS_PEDANTIC_MATH".to_string(),
            3 => "CUBLAS_TF32_TENSOR_OP_MATH".to_string(),
            other => format!("unknown({other})"),
        };
        if self.0 & Self::DISALLOW_REDUCED_PRECISION_REDUCTION != 0 {
            format!("{base}|CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION")
        } else {
            base
        }
    }
}

/// `cublasComputeType_t`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ComputeType {
    F16,
    F16Pedantic,
    F32,
    F32Pedantic,
    F32Fast16F,
    F32Fast16BF,
    F32FastTF32,
    F32Emulated16BFx9,
    F64,
    F64Pedantic,
    /// CUDA 13.0 update 2: FP64 emulated by fixed-point arithmetic on integer tensor cores.
    F64EmulatedFixedPoint,
    I32,
    I32Pedantic,
    Unknown(i32),
}

impl ComputeType {
    pub fn decode(raw: i32) -> Self {
        match raw {
            64 => Self::F16,
            65 => Self::F16Pedantic,
            68 => Self::F32,
            69 => Self::F32Pedantic,
            74 => Self::F32Fast16F,
            75 => Self::F32Fast16BF,
            77 => Self::F32FastTF32,
            78 => Self::F32Emulated16BFx9,
            70 => Self::F64,
            71 => Self::F64Pedantic,
            79 => Self::F64EmulatedFixedPoint,
            72 => Self::I32,
            73 => Self::I32Pedantic,
            other => Self::Unknown(other),
        }
    }

    pub fn name(self) -> String {
        match self {
            Self::F16 => "CUBLAS_COMPUTE_16F".into(),
            Self::F16Pedantic => "CUBLAS_COMPUTE_16F_PEDANTIC".into(),
            Self::F32 => "CUBLAS_COMPUTE_32F".into(),
            Self::F32Pedantic => "CUBLAS_COMPUTE_32F_PEDANTIC".into(),
            Self::F32Fast16F => "CUBLAS_COMPUTE_32F_FAST_16F".into(),
            Self::F32Fast16BF => "CUBLAS_COMPUTE_32F_FAST_16BF".into(),
            Self::F32FastTF32 => "CUBLAS_COMPUTE_32F_FAST_TF32".into(),
            Self::F32Emulated16BFx9 => "CUBLAS_COMPUTE_32F_EMULATED_16BFX9".into(),
            Self::F64 => "CUBLAS_COMPUTE_64F".into(),
            Self::F64Pedantic => "CUBLAS_COMPUTE_64F_PEDANTIC".into(),
            Self::F64EmulatedFixedPoint => "CUBLAS_COMPUTE_64F_EMULATED_FIXEDPOINT".into(),
            Self::I32 => "CUBLAS_COMPUTE_32I".into(),
            Self::I32Pedantic => "CUBLAS_COMPUTE_32I_PEDANTIC".into(),
            Self::Unknown(v) => format!("unknown({v})"),
        }
    }

    /// Float32 compute that may round inputs to TF32/f16/bf16: results differ from strict f32.
    pub fn reduced_precision(self) -> bool {
        matches!(self, Self::F32Fast16F | Self::F32Fast16BF | Self::F32FastTF32)
    }
}

/// `cudaMemoryType`, as `cudaPointerGetAttributes` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryType {
    Unregistered,
    Host,
    Device,
    Managed,
    Unknown(i32),
}

impl MemoryType {
    pub fn decode(raw: i32) -> Self {
        match raw {
            0 => Self::Unregistered,
            1 => Self::Host,
            2 => Self::Device,
            3 => Self::Managed,
            other => Self::Unknown(other),
        }
    }

    /// Memory a GPU kernel can read.
    pub fn device_accessible(self) -> bool {
        matches!(self, Self::Device | Self::Managed)
    }
}

/// The sublibraries a cuDNN dispatcher loads, as its own read-only data names them
/// (`libcudnn_graph.so`, ...: `strings libcudnn.so.9 | grep '^libcudnn_'`), each once;
/// `libcudnn_graph` first (the dispatcher loads it first, and the others through it: it is
/// what a missing-library message names first), the others in their order; empty when it names
/// none.
pub fn cudnn_dispatched_names(file: &[u8]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for word in file.split(|&b| b == 0) {
        let Some(at) = word.windows(9).position(|w| w == b"libcudnn_") else { continue };
        let rest = &word[at..];
        let end = rest.iter().position(|&b| !(b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')).unwrap_or(rest.len());
        let (name, tail) = rest.split_at(end);
        if name.len() > 9 && tail.starts_with(b".so") && tail.len() == 3 {
            let name = String::from_utf8_lossy(name).into_owned();
            if !out.contains(&name) {
                out.push(name);
            }
        }
    }
    if let Some(at) = out.iter().position(|n| n == "libcudnn_graph") {
        let graph = out.remove(at);
        out.insert(0, graph);
    }
    out
}

/// The engine and heuristic libraries every cuDNN 9's `libcudnn_graph` loads itself, for one
/// whose file names none (NVIDIA's 9.26 names these and `libcudnn_engines_tensor_ir`).
pub const CUDNN_GRAPH_LOADS: &[&str] = &["libcudnn_engines_precompiled", "libcudnn_engines_runtime_compiled", "libcudnn_heuristic"];

/// What a cuDNN library's file says of itself without being loaded: the sublibraries it names
/// (as `cudnn_dispatched_names` reads them: the dispatcher's, or `libcudnn_graph`'s engines and
/// heuristics, which it loads itself) and the release it was built as, from the check its
/// engines compile in (`cudnn_version != (9 * 10000 + 26 * 100 + 0)`: NVIDIA's engine and
/// heuristic libraries export no version datum to read).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CudnnFileStrings {
    pub names: Vec<String>,
    pub built_as: Option<(u32, u32, u32)>,
}

/// Longest NUL-free run kept across chunks: longer runs are no name nor version check.
const MAX_WORD: usize = 512;

/// `CudnnFileStrings` of the file at `path`, read in chunks (NVIDIA's libcudnn_graph is 134 MB,
/// its engines 264 MB: never whole in memory); the file is only read, never loaded.
pub fn cudnn_file_strings(path: &std::path::Path) -> std::io::Result<CudnnFileStrings> {
    use std::io::Read;
    let mut file = std::fs::File::open(path)?;
    let mut words: Vec<u8> = Vec::new();
    let mut built_as = None;
    let mut buf = vec![0u8; 1 << 20];
    let mut carry: Vec<u8> = Vec::new();
    let mut keep = |word: &[u8], words: &mut Vec<u8>| {
        if word.len() > 9 && word.windows(9).any(|w| w == b"libcudnn_") {
            words.extend_from_slice(word);
            words.push(0);
        }
        if built_as.is_none() {
            built_as = cudnn_built_as(word);
        }
    };
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        let mut rest = &buf[..n];
        while let Some(at) = rest.iter().position(|&b| b == 0) {
            if carry.is_empty() {
                keep(&rest[..at], &mut words);
            } else {
                carry.extend_from_slice(&rest[..at]);
                keep(&carry, &mut words);
                carry.clear();
            }
            rest = &rest[at + 1..];
        }
        carry.extend_from_slice(rest);
        if carry.len() > MAX_WORD {
            // The tail of a long run: only its last bytes can begin a word.
            carry.drain(..carry.len() - MAX_WORD);
        }
    }
    keep(&carry, &mut words);
    Ok(CudnnFileStrings { names: cudnn_dispatched_names(&words), built_as })
}

/// The release in a cuDNN engine library's compiled-in check, `cudnn_version != (9 * 10000 + 26
/// * 100 + 0)`.
fn cudnn_built_as(word: &[u8]) -> Option<(u32, u32, u32)> {
    const HEAD: &[u8] = b"cudnn_version != (";
    let at = word.windows(HEAD.len()).position(|w| w == HEAD)?;
    let text = std::str::from_utf8(&word[at + HEAD.len()..]).ok()?;
    let inner = text.split(')').next()?;
    let mut parts = inner.split('+').map(str::trim);
    let major = parts.next()?.strip_suffix("* 10000")?.trim().parse().ok()?;
    let minor = parts.next()?.strip_suffix("* 100")?.trim().parse().ok()?;
    let patch = parts.next()?.parse().ok()?;
    parts.next().is_none().then_some((major, minor, patch))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cudnn_files_names_and_built_release_are_read_across_chunk_boundaries_without_loading_it() {
        // libcudnn_graph's engines and heuristics, and the release its engines check, placed so
        // that a name straddles the first 1 MiB chunk's end.
        let dir = std::env::temp_dir().join(format!("cudnn-strings-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("libcudnn_graph.so.9");
        let mut bytes = vec![7u8; (1 << 20) - 10];
        bytes.push(0);
        bytes.extend_from_slice(b"libcudnn_engines_precompiled.so\0libcudnn_graph.so.9\0");
        bytes.extend(std::iter::repeat_n(b'x', 3 << 20));
        bytes.extend_from_slice(b"\0cudnn_version != (9 * 10000 + 10 * 100 + 2)\0libcudnn_heuristic.so\0libcudnn_engines_precompiled.so");
        std::fs::write(&path, &bytes).unwrap();
        let read = cudnn_file_strings(&path).unwrap();
        assert_eq!(read.names, ["libcudnn_engines_precompiled", "libcudnn_heuristic"]);
        assert_eq!(read.built_as, Some((9, 10, 2)));
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!(cudnn_built_as(b"cudnn_version != (9 * 10000 + 26 * 100 + 0)"), Some((9, 26, 0)));
        assert_eq!(cudnn_built_as(b"cudnn_version != (CUDNN_MAJOR * 10000)"), None);
    }

    #[test]
    fn the_sublibraries_are_the_names_the_dispatchers_own_data_holds() {
        // 9.10.2's dispatcher: graph, ops, cnn, adv; 9.26's adds ext.
        let v910 = b"\0GCC: x\0libcudnn_graph.so\0%s.%d\0libcudnn_ops.so\0libcudnn_cnn.so\0libcudnn_adv.so\0libcudnn_graph.so\0";
        assert_eq!(cudnn_dispatched_names(v910), ["libcudnn_graph", "libcudnn_ops", "libcudnn_cnn", "libcudnn_adv"]);
        let v926 = b"libcudnn_graph.so\0libcudnn_ops.so\0libcudnn_cnn.so\0libcudnn_adv.so\0libcudnn_ext.so\0";
        assert_eq!(cudnn_dispatched_names(v926).last().map(String::as_str), Some("libcudnn_ext"));
        // NVIDIA's own file names ops before graph: graph still comes first.
        let real = b"libcudnn_ops.so\0libcudnn_graph.so\0libcudnn_cnn.so\0libcudnn_adv.so\0libcudnn_ext.so\0";
        assert_eq!(cudnn_dispatched_names(real), ["libcudnn_graph", "libcudnn_ops", "libcudnn_cnn", "libcudnn_adv", "libcudnn_ext"]);
        // Not a library name: a prefix, a versioned name, a message.
        assert!(cudnn_dispatched_names(b"libcudnn_\0libcudnn_graph.so.9\0could not load libcudnn_x.so: x\0").is_empty());
    }

    #[test]
    fn decodes_out_of_range_values_without_trusting_them() {
        assert_eq!(Operation::decode(7), Operation::Unknown(7));
        assert_eq!(Operation::decode(-1).label(), "unknown(-1)");
        assert_eq!(PointerMode::decode(1), PointerMode::Device);
        assert_eq!(MemoryType::decode(42), MemoryType::Unknown(42));
        assert_eq!(cublas_status_name(13), "CUBLAS_STATUS_EXECUTION_FAILED");
        assert_eq!(cublas_status_name(99), "CUBLAS_STATUS_UNKNOWN");
    }

    #[test]
    fn every_launch_error_of_the_runtime_has_its_driver_types_h_name() {
        for (code, name) in [
            (9, "cudaErrorInvalidConfiguration"),
            (98, "cudaErrorInvalidDeviceFunction"),
            (701, "cudaErrorLaunchOutOfResources"),
            (720, "cudaErrorCooperativeLaunchTooLarge"),
            (721, "cudaErrorTensorMemoryLeak"),
            (53, "cudaErrorPriorLaunchFailure"),
            (52, "cudaErrorMissingConfiguration"),
            (600, "cudaErrorNotReady"),
            (500, "cudaErrorSymbolNotFound"),
            (214, "cudaErrorECCUncorrectable"),
            (909, "cudaErrorTimeout"),
            (915, "cudaErrorInvalidResourceConfiguration"),
        ] {
            assert_eq!(cuda_error_name(code), name);
        }
        assert_eq!(cuda_error_name(10), "cudaErrorUnrecognized");
        assert_eq!(cuda_error_name(-1), "cudaErrorUnrecognized");
    }

    #[test]
    fn cudnn_statuses_are_named_as_cudnn_graph_h_names_them() {
        // cuDNN 9.26's cudnn_graph.h (nvidia-cudnn-cu13 9.26.0.51).
        for (code, name) in [
            (1001, "CUDNN_STATUS_NOT_INITIALIZED"),
            (1002, "CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH"),
            (1008, "CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED"),
            (3005, "CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER"),
            (3006, "CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART"),
            (5000, "CUDNN_STATUS_EXECUTION_FAILED"),
            (5001, "CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER"),
            (5002, "CUDNN_STATUS_EXECUTION_FAILED_CUBLAS"),
            (5003, "CUDNN_STATUS_EXECUTION_FAILED_CUDART"),
            (5004, "CUDNN_STATUS_EXECUTION_FAILED_CURAND"),
        ] {
            assert_eq!(cudnn_status_name(code), name);
        }
        assert_eq!(cudnn_status_name(1), "CUDNN_STATUS_UNKNOWN");
        assert_eq!(cudnn_status_parts(5003), (5000, 3));
        assert_eq!(cudnn_version(92600), "9.26.0");
        assert_eq!(cudnn_version(8907), "8.9.7");
    }

    #[test]
    fn compute_types_decode_and_flag_fast_modes() {
        assert_eq!(ComputeType::decode(77), ComputeType::F32FastTF32);
        assert!(ComputeType::decode(77).reduced_precision());
        assert!(!ComputeType::decode(68).reduced_precision());
        assert_eq!(ComputeType::decode(0).name(), "unknown(0)");
    }

    #[test]
    fn math_mode_flags_tf32_with_or_without_the_reduction_bit() {
        assert!(MathMode(3).uses_tf32());
        assert!(MathMode(3 | 16).uses_tf32());
        assert!(!MathMode(1).uses_tf32());
        assert_eq!(MathMode(19).label(), "CUBLAS_TF32_TENSOR_OP_MATH|CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION");
    }

    #[test]
    fn sticky_errors_match_nvidia_list() {
        for code in [226, 700, 702, 710, 714, 715, 716, 717, 718, 719, 721, 810, 911] {
            assert!(cuda_error_is_sticky(code), "{code}");
        }
        for code in [0, 1, 2, 35, 100, 720, 900] {
            assert!(!cuda_error_is_sticky(code), "{code}");
        }
    }
}

/// `cudaDataType_t`, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F64,
    F32,
    F16,
    BF16,
    F8E4M3,
    F8E5M2,
    I8,
    I32,
    /// Complex pairs of f32 and f64 (`cuComplex`, `cuDoubleComplex`).
    C32,
    C64,
    /// `CUDA_C_8I`: complex pairs of i8 (cublasGemmEx's A/B with a c32 C).
    CI8,
    Unknown(i32),
}

impl DType {
    pub fn from_cuda(raw: i32) -> Self {
        match raw {
            0 => Self::F32,
            1 => Self::F64,
            2 => Self::F16,
            3 => Self::I8,
            4 => Self::C32,
            5 => Self::C64,
            7 => Self::CI8,
            10 => Self::I32,
            14 => Self::BF16,
            28 => Self::F8E4M3,
            29 => Self::F8E5M2,
            other => Self::Unknown(other),
        }
    }

    pub fn name(self) -> String {
        match self {
            Self::F64 => "f64".into(),
            Self::F32 => "f32".into(),
            Self::F16 => "f16".into(),
            Self::BF16 => "bf16".into(),
            Self::F8E4M3 => "f8e4m3".into(),
            Self::F8E5M2 => "f8e5m2".into(),
            Self::I8 => "i8".into(),
            Self::I32 => "i32".into(),
            Self::C32 => "c32".into(),
            Self::C64 => "c64".into(),
            Self::CI8 => "ci8".into(),
            Self::Unknown(v) => format!("unknown({v})"),
        }
    }

    pub fn size(self) -> Option<u64> {
        match self {
            Self::C64 => Some(16),
            Self::F64 | Self::C32 => Some(8),
            Self::F32 | Self::I32 => Some(4),
            Self::F16 | Self::BF16 | Self::CI8 => Some(2),
            Self::F8E4M3 | Self::F8E5M2 | Self::I8 => Some(1),
            Self::Unknown(_) => None,
        }
    }

    /// Whether NaN/Inf can exist in this type at all.
    pub fn is_float(self) -> bool {
        matches!(self, Self::F64 | Self::F32 | Self::F16 | Self::BF16 | Self::F8E5M2 | Self::F8E4M3 | Self::C32 | Self::C64)
    }

    /// A complex type's real and imaginary part.
    pub fn complex_part(self) -> Option<DType> {
        match self {
            Self::C32 => Some(Self::F32),
            Self::C64 => Some(Self::F64),
            _ => None,
        }
    }
}
