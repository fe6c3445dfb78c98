//! Kernel launches: each one in the flight recorder (only the host stub's address, the launch
//! configuration and the stream: no synchronisation, no name lookup, no allocation), so that an
//! asynchronous error found later can name the kernels that may have caused it. With
//! `CUBLASGUARD_SYNC=launches` each launch is followed by a synchronisation, like
//! `CUDA_LAUNCH_BLOCKING=1`, and an error is pinned to the launch itself.

use std::ffi::{c_char, c_int, c_uint, c_void};

use super::launch_pointers::{touched_pointers, ParamSource};
use super::Call;
use crate::check::Finding;
use crate::cuda;
use crate::recorder::{CallArgs, RecordedCall};
use crate::session::launch_memory::TOUCHED_PER_LAUNCH;
use crate::trace::{hex, FaultKind, Suspect};

/// `dim3`, passed by value as the C API passes it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Dim3 {
    pub x: u32,
    pub y: u32,
    pub z: u32,
}

impl Dim3 {
    fn array(self) -> [u32; 3] {
        [self.x, self.y, self.z]
    }
}

/// The head of `cudaLaunchConfig_t` (the attributes that follow are not read).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct LaunchConfig {
    pub grid: Dim3,
    pub block: Dim3,
    pub shared: usize,
    pub stream: *mut c_void,
}

/// cudaLaunchKernel and cudaLaunchCooperativeKernel.
pub(crate) fn launch_kernel(
    call: &Call<'_, c_int>,
    func: *const c_void,
    grid: Dim3,
    block: Dim3,
    args: *mut *mut c_void,
    shared: usize,
    stream: *mut c_void,
) -> c_int {
    launch(call, func as u64, grid, block, shared as u64, stream as u64, ParamSource::runtime(args))
}

/// cudaLaunchKernelExC: the configuration comes in a structure.
pub(crate) fn launch_kernel_ex(call: &Call<'_, c_int>, config: *const LaunchConfig, func: *const c_void, args: *mut *mut c_void) -> c_int {
    use std::mem::offset_of;
    let fields = ConfigFields {
        grid: offset_of!(LaunchConfig, grid),
        block: offset_of!(LaunchConfig, block),
        shared: offset_of!(LaunchConfig, shared),
        shared_is_u32: false,
        stream: offset_of!(LaunchConfig, stream),
    };
    match read_config(call, config as u64, fields) {
        Some((grid, block, shared, stream)) => launch(call, func as u64, grid, block, shared, stream, ParamSource::runtime(args)),
        None => call.forward(),
    }
}

/// Where a launch configuration structure keeps its fields.
struct ConfigFields {
    grid: usize,
    block: usize,
    shared: usize,
    /// The shared-memory size is an `unsigned int` (the driver's), not a `size_t` (the runtime's).
    shared_is_u32: bool,
    stream: usize,
}

/// A launch configuration structure (the runtime's `cudaLaunchConfig_t`, the driver's
/// `CUlaunchConfig`) read as the library reads it, as the program passed it: grid, block,
/// shared memory and stream; `None` where it cannot be read.
fn read_config<R: Copy>(call: &Call<'_, R>, config: u64, fields: ConfigFields) -> Option<(Dim3, Dim3, u64, u64)> {
    use super::parameters::{written_i32, written_u32x3, written_u64};
    if config == 0 {
        return None;
    }
    let dim3 = |offset: usize| written_u32x3(call, config + offset as u64).map(|[x, y, z]| Dim3 { x, y, z });
    let at = |offset: usize| config + offset as u64;
    let shared = if fields.shared_is_u32 { written_i32(call, at(fields.shared)).map(|v| u64::from(v as u32)) } else { written_u64(call, at(fields.shared)) };
    Some((dim3(fields.grid)?, dim3(fields.block)?, shared?, written_u64(call, at(fields.stream))?))
}

/// The head of the driver's `CUlaunchConfig` (the attributes that follow are not read).
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct DriverLaunchConfig {
    pub grid: Dim3,
    pub block: Dim3,
    pub shared: c_uint,
    pub stream: *mut c_void,
    pub attrs: *mut c_void,
    pub attr_count: c_uint,
}

/// A `_ptsz` entry point's NULL stream: the calling thread's default stream
/// (`CU_STREAM_PER_THREAD`).
const CU_STREAM_PER_THREAD: u64 = 0x2;

/// The stream a driver launch runs on: a `_ptsz` entry point's NULL stream is the calling
/// thread's default stream.
fn driver_stream<R: Copy>(call: &Call<'_, R>, stream: u64) -> u64 {
    use super::Hook;
    let per_thread =
        matches!(call.hook, Hook::cuLaunchKernel_ptsz | Hook::cuLaunchCooperativeKernel_ptsz | Hook::cuLaunchKernelEx_ptsz | Hook::cuGraphLaunch_ptsz);
    if per_thread && stream == 0 {
        CU_STREAM_PER_THREAD
    } else {
        stream
    }
}

/// cuLaunchKernel (and its `_ptsz` form): the driver API's launch (Triton's, and every runtime
/// that finds the driver through an entry point), recorded as a runtime launch is; `f` is the
/// CUfunction.
#[allow(clippy::too_many_arguments)]
pub(crate) fn driver_launch(
    call: &Call<'_, c_int>,
    f: *mut c_void,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    shared: c_uint,
    stream: *mut c_void,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> c_int {
    let stream = driver_stream(call, stream as u64);
    launch(call, f as u64, Dim3 { x: gx, y: gy, z: gz }, Dim3 { x: bx, y: by, z: bz }, shared.into(), stream, ParamSource::driver(params, extra))
}

/// cuLaunchCooperativeKernel (and its `_ptsz` form): no `extra`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn cooperative_launch(
    call: &Call<'_, c_int>,
    f: *mut c_void,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    shared: c_uint,
    stream: *mut c_void,
    params: *mut *mut c_void,
) -> c_int {
    driver_launch(call, f, gx, gy, gz, bx, by, bz, shared, stream, params, std::ptr::null_mut())
}

/// cuLaunchKernelEx (and its `_ptsz` form): the configuration (grid, block, shared memory,
/// stream) comes in a `CUlaunchConfig`, read as the driver reads it; its attributes (clusters,
/// programmatic dependent launch, cooperative) are not.
pub(crate) fn driver_launch_ex(
    call: &Call<'_, c_int>,
    config: *const DriverLaunchConfig,
    f: *mut c_void,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> c_int {
    use std::mem::offset_of;
    let fields = ConfigFields {
        grid: offset_of!(DriverLaunchConfig, grid),
        block: offset_of!(DriverLaunchConfig, block),
        shared: offset_of!(DriverLaunchConfig, shared),
        shared_is_u32: true,
        stream: offset_of!(DriverLaunchConfig, stream),
    };
    match read_config(call, config as u64, fields) {
        Some((grid, block, shared, stream)) => launch(call, f as u64, grid, block, shared, driver_stream(call, stream), ParamSource::driver(params, extra)),
        None => call.forward(),
    }
}

/// cuKernelGetFunction: the CUfunction of a CUkernel (from cuLibraryGetKernel) is named as the
/// kernel is.
pub(crate) fn kernel_get_function(call: &Call<'_, c_int>, function: *mut *mut c_void, kernel: *mut c_void) -> c_int {
    let status = call.forward();
    if status == cuda::CUDA_SUCCESS {
        if let (Some(f), Some(name)) = (super::parameters::written_u64(call, function as u64), call.session.kernels.known(kernel as u64)) {
            call.session.kernels.register(f, name);
        }
    }
    status
}

/// cuModuleGetFunction and cuLibraryGetKernel: the function's (or kernel's) name, kept for its
/// handle (the driver API's counterpart of `__cudaRegisterFunction`), so its launches are named
/// without asking again.
pub(crate) fn module_get_function(call: &Call<'_, c_int>, function: *mut *mut c_void, _module: *mut c_void, name: *const c_char) -> c_int {
    let status = call.forward();
    if status == cuda::CUDA_SUCCESS {
        if let (Some(f), Some(name)) = (super::parameters::written_u64(call, function as u64), call.device.parameter_string(name as u64)) {
            call.session.kernels.register(f, crate::session::kernels::demangle(&name));
        }
    }
    status
}

/// `__cudaRegisterFunction`: the kernel's device name for its host stub, as nvcc's generated
/// code registers it at load.
#[allow(clippy::too_many_arguments)]
pub(crate) fn register_function(
    call: &Call<'_, ()>,
    _handle: *mut *mut c_void,
    host: *const c_void,
    _device_fun: *mut c_char,
    device_name: *const c_char,
    _limit: c_int,
    _tid: *const c_void,
    _bid: *const c_void,
    _block_dim: *const c_void,
    _grid_dim: *const c_void,
    _warp_size: *mut c_int,
) {
    call.forward();
    if let Some(name) = call.device.parameter_string(device_name as u64) {
        call.session.kernels.register(host as u64, crate::session::kernels::demangle(&name));
    }
}

fn launch(call: &Call<'_, c_int>, func: u64, grid: Dim3, block: Dim3, shared: u64, stream: u64, source: ParamSource) -> c_int {
    let s = call.session;
    let status = call.forward();
    if !s.config.checks.launches {
        call.record(status, CallArgs::None);
        return status;
    }
    // Counted and placed for a hang to name (`session::launches`): the launching line is read
    // while this frame is live.
    let ordinal = s.launch_counts.next(func);
    s.launch_sites.record(call.seq, &call.call_site());
    let recorded = CallArgs::Launch { func, grid: grid.array(), block: block.array(), shared, stream, ordinal };
    call.record(status, recorded);
    // Only a NaN/Inf check (or origin mode) asks what a launch pointed into.
    let wanted = status == cuda::CUDA_SUCCESS && (s.config.checks.nan || s.config.nan_origin);
    let (pointers, n) = if wanted { touched_pointers(call, func, source) } else { ([0; TOUCHED_PER_LAUNCH], 0) };
    if wanted {
        s.launch_touches.record(call.seq, &pointers[..n]);
    }
    let kernel = || s.kernels.name(func, |f| call.outlet.kernel_name(f));
    if status != cuda::CUDA_SUCCESS {
        if cuda::cuda_error_is_init_failure(status) {
            call.report_init_failure(status, cuda::cuda_error_name(status), None);
            return status;
        }
        // An earlier kernel's fault nobody was blamed for, found by this launch.
        if super::attribution::surfaced(call, status, &format!("{} itself", call.api()), recorded, Some(stream)) {
            return status;
        }
        let mut message = format!("launching {} returned {} ({status})", kernel(), cuda::cuda_error_name(status));
        // Not this launch's fault when the context was lost before it.
        message.extend(super::attribution::lost_since(s, status));
        let finding = Finding::new(FaultKind::ApiError, message);
        let mut fault = call.fault(finding, status, cuda::cuda_error_name(status));
        launch_args(&mut fault, kernel(), recorded, stream);
        call.report(fault);
        return status;
    }
    // Origin mode synchronises after every launch, as launches mode does, then scans.
    let origin = s.config.nan_origin;
    if s.config.launch_breadcrumbs && !s.config.sync.synchronises_calls() && !origin {
        leave_breadcrumb(call, stream, recorded);
        return status;
    }
    if !s.config.sync.synchronises_launches() && !origin {
        return status;
    }
    // The capture query comes first (a synchronisation would break a capture); it fails with
    // the sticky error itself when the kernel's fault already broke the context, and that is
    // this launch's fault as surely as a synchronisation's answer would be.
    // From a first run's trace, a launch pointing into none of its memory is let run.
    if origin && !s.config.sync.synchronises_launches() && !super::origin::launch_is_watched(call, &pointers[..n]) {
        return status;
    }
    let (pending, surfaced_at, how) = match call.device.is_capturing(stream) {
        Ok(false) => (call.device.synchronize(stream), "cudaStreamSynchronize", "synchronised"),
        Err(code) if cuda::cuda_error_is_sticky(code) => (code, "cudaStreamIsCapturing", "asked whether its stream was capturing"),
        Ok(true) | Err(_) => return status,
    };
    match pending {
        0 => {
            s.note_clean_sync(call.seq);
            if origin {
                let launched = super::origin::Launched { kernel: &kernel, args: recorded, stream };
                super::origin::after_launch(call, &launched, &pointers[..n]);
            }
        }
        code if s.known_error().map(|k| k.code) == Some(code) => {}
        code => {
            s.note_error(code, call.seq);
            let name = kernel();
            let mut finding = Finding::new(
                FaultKind::AsyncError,
                format!(
                    "{} ({code}) surfaced when the guard {how} right after this launch of {name} (grid {}x{}x{}, block \
                     {}x{}x{}): this kernel faulted (CUBLASGUARD_SYNC=launches)",
                    cuda::cuda_error_name(code),
                    grid.x,
                    grid.y,
                    grid.z,
                    block.x,
                    block.y,
                    block.z
                ),
            );
            finding.error = Some((code, surfaced_at));
            let mut fault = call.fault(finding, status, cuda::cuda_error_name(status));
            launch_args(&mut fault, name, recorded, stream);
            call.report(fault);
        }
    }
    status
}

/// cudaGraphLaunch and cuGraphLaunch: recorded (a graph's kernels are not seen one by one,
/// its launch is), and under CUBLASGUARD_SYNC=deferred followed by a breadcrumb, so a fault
/// inside the graph is pinned to its launch.
/// (cuGraphLaunch_ptsz: its NULL stream is the calling thread's default stream.)
pub(crate) fn graph_launch(call: &Call<'_, c_int>, exec: *mut c_void, stream: *mut c_void) -> c_int {
    launched_graph(call, exec as u64, driver_stream(call, stream as u64))
}

fn launched_graph(call: &Call<'_, c_int>, exec: u64, stream: u64) -> c_int {
    let s = call.session;
    let status = call.forward();
    let recorded = CallArgs::Graph { exec, stream };
    call.record(status, recorded);
    if status != cuda::CUDA_SUCCESS {
        if !super::attribution::surfaced(call, status, &format!("{} itself", call.api()), recorded, Some(stream)) {
            let mut message = format!("launching graph {} returned {} ({status})", hex(exec), cuda::cuda_error_name(status));
            message.extend(super::attribution::lost_since(s, status));
            let finding = Finding::new(FaultKind::ApiError, message);
            let mut fault = call.fault(finding, status, cuda::cuda_error_name(status));
            fault.args = recorded.to_args();
            fault.stream = Some(hex(stream));
            call.report(fault);
        }
        return status;
    }
    if !s.config.sync.synchronises_calls() {
        leave_breadcrumb(call, stream, recorded);
    }
    super::graphs::scan_after_launch(call, exec, stream);
    status
}

/// CUBLASGUARD_LAUNCH_BREADCRUMBS: the launch's breadcrumb, unless its stream is capturing
/// a graph (the write would become part of the graph). A capture query that fails with a
/// sticky error means the context broke before the breadcrumb could be left: attributed now,
/// this launch being the work in flight on its stream (`args`: the launch's, as recorded).
pub(crate) fn leave_breadcrumb(call: &Call<'_, c_int>, stream: u64, args: CallArgs) {
    let mut capturing = call.device.is_capturing(stream);
    if capturing == Ok(false) && !call.device.breadcrumb(stream, call.issued()) {
        // Refused: perhaps because this launch's fault broke the context in between.
        capturing = call.device.is_capturing(stream);
        if capturing == Ok(false) {
            return;
        }
    }
    match capturing {
        Ok(false) => {}
        Err(code) if cuda::cuda_error_is_sticky(code) => {
            super::attribution::surfaced_in_flight(call, code, "the guard's capture query right after this launch", args, stream);
        }
        Ok(true) | Err(_) => {}
    }
}

/// The launch's arguments as its recent call has them, and the kernel's name.
fn launch_args(fault: &mut crate::trace::Fault, kernel: String, recorded: CallArgs, stream: u64) {
    fault.args = recorded.to_args();
    fault.args.insert("kernel", kernel);
    fault.stream = Some(hex(stream));
}

/// The kernels launched since the guard last found the device clean and before call `before`,
/// oldest first: one of them caused an error found pending now.
pub(crate) fn suspects<R: Copy>(call: &Call<'_, R>, before: u64) -> Vec<Suspect> {
    launches_between(call, call.session.last_clean_sync(), before, usize::MAX, |_| true).into_iter().map(|(suspect, _)| suspect).collect()
}

/// The newest `newest` of the recorded kernel launches after call `after` and before call
/// `before` that `keep` accepts, oldest first, each as the launch it was (seq, kernel's name, grid, block, stream,
/// the line that launched it while it is remembered) with its ordinal among its kernel's
/// launches (0: not counted).
pub(crate) fn launches_between<R: Copy>(
    call: &Call<'_, R>,
    after: u64,
    before: u64,
    newest: usize,
    keep: impl Fn(&RecordedCall) -> bool,
) -> Vec<(Suspect, u64)> {
    let s = call.session;
    let mut launches: Vec<RecordedCall> =
        s.recorder.snapshot().into_iter().filter(|c| c.seq > after && c.seq < before && matches!(c.args, CallArgs::Launch { .. }) && keep(c)).collect();
    launches.sort_by_key(|c| c.seq);
    launches.drain(..launches.len().saturating_sub(newest));
    // A loop launches from a few lines: each site is symbolised once.
    let mut described: Vec<(crate::session::call_site::CallSite, Vec<String>)> = Vec::new();
    let mut launching_line = |seq: u64| {
        let site = s.launch_sites.site(seq)?;
        if let Some((_, lines)) = described.iter().find(|(known, _)| *known == site) {
            return Some(lines.clone());
        }
        let lines = call.outlet.describe_call_site(&site);
        described.push((site, lines.clone()));
        Some(lines)
    };
    launches
        .into_iter()
        .filter_map(|c| match c.args {
            CallArgs::Launch { func, grid, block, stream, ordinal, .. } => Some((
                Suspect {
                    seq: c.seq,
                    kernel: s.kernels.name(func, |f| call.outlet.kernel_name(f)),
                    grid,
                    block,
                    stream: hex(stream),
                    backtrace: launching_line(c.seq).unwrap_or_default(),
                },
                ordinal,
            )),
            _ => None,
        })
        .collect()
}
