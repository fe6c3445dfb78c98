//! The GPU's health through NVML (`libnvidia-ml.so.1`, which comes with the driver), read on a
//! thread of the guard's own and never on the program's path: loaded with `dlopen` if present,
//! initialised and registered for Xid and double-bit ECC events once, when the guard starts
//! (events before the registration are lost), then waiting for events in a loop and re-reading
//! the devices when a fault asks. `nvmlInit` can take seconds without persistence mode and has
//! hung on some drivers: a fault waits for it at most once and briefly, and one that has not
//! returned within `START_LIMIT` leaves NVML off. A forked child has NVML off (its parent's
//! thread is not there). The kernel log's Xid lines naming this process are read at faults
//! (`kernel_log`), NVML or not.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::ffi::host::kernel_log;
use crate::ffi::intercept::{dl, loader_gate};
use crate::gpu_health::{EccCounts, GpuDevice, GpuEvent, GpuEventKind, GpuHealth, GpuHealthState, RemappedRows};

/// How long `nvmlInit_v2` may take before NVML is left off.
const START_LIMIT: Duration = Duration::from_secs(10);
/// How long a fault waits for fresh readings.
const REFRESH_LIMIT: Duration = Duration::from_millis(250);
/// How long the first fault waits for NVML still starting (once per process: a start that
/// takes longer is not waited for again).
const START_WAIT: Duration = Duration::from_secs(1);
/// How long the thread waits for an event before it looks for a fault's request (NVML's wait
/// cannot be woken): a fault that wants fresh readings has them within about this long.
const EVENT_WAIT_MS: c_uint = 5;
/// Events kept (later ones are counted).
const MAX_EVENTS: usize = 64;

const NVML_SUCCESS: c_int = 0;
const NVML_ERROR_NOT_SUPPORTED: c_int = 3;
const EVENT_DOUBLE_BIT_ECC: u64 = 0x2;
const EVENT_XID: u64 = 0x8;

/// nvmlEventData_t.
#[repr(C)]
struct EventData {
    device: *mut c_void,
    event_type: u64,
    event_data: u64,
    gpu_instance_id: c_uint,
    compute_instance_id: c_uint,
}

type Device = *mut c_void;
type EventSet = *mut c_void;

macro_rules! nvml_api {
    ( $( $field:ident : $name:literal fn ( $( $ty:ty ),* ) ; )* ) => {
        /// NVML's functions by the versioned names nvml.h's macros call, each `None` where the
        /// library lacks it. Every one returns nvmlReturn_t.
        struct Api {
            $( $field: Option<unsafe extern "C" fn( $( $ty ),* ) -> c_int>, )*
            error_string: Option<unsafe extern "C" fn(c_int) -> *const c_char>,
            standin: bool,
        }

        impl Api {
            /// # Safety
            /// `handle` is a live `dlopen` handle of libnvidia-ml.so.1.
            unsafe fn resolve(handle: *mut c_void) -> Self {
                let find = |name: &CStr| loader_gate::through(|| {
                    // SAFETY: a live handle (the caller's contract) and a NUL-terminated name.
                    unsafe { dl::real_dlsym(handle, name.as_ptr()) }
                });
                Self {
                    $( $field: {
                        let p = find(&CStr::from_bytes_with_nul(concat!($name, "\0").as_bytes()).unwrap_or_default());
                        // SAFETY: the symbol's C signature as nvml.h declares it.
                        (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn( $( $ty ),* ) -> c_int>(p) })
                    }, )*
                    error_string: {
                        let p = find(c"nvmlErrorString");
                        // SAFETY: `const char *nvmlErrorString(nvmlReturn_t)`.
                        (!p.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn(c_int) -> *const c_char>(p) })
                    },
                    // cublasguard's stand-in NVML (shims/nvml.c) exports this; no NVIDIA library does.
                    standin: !find(c"cudashim_nvml_is_stand_in").is_null(),
                }
            }
        }
    };
}

nvml_api! {
    init: "nvmlInit_v2" fn();
    shutdown: "nvmlShutdown" fn();
    device_get_count: "nvmlDeviceGetCount_v2" fn(*mut c_uint);
    device_get_handle_by_index: "nvmlDeviceGetHandleByIndex_v2" fn(c_uint, *mut Device);
    device_get_name: "nvmlDeviceGetName" fn(Device, *mut c_char, c_uint);
    persistence_mode: "nvmlDeviceGetPersistenceMode" fn(Device, *mut c_int);
    ecc_mode: "nvmlDeviceGetEccMode" fn(Device, *mut c_int, *mut c_int);
    total_ecc_errors: "nvmlDeviceGetTotalEccErrors" fn(Device, c_int, c_int, *mut u64);
    remapped_rows: "nvmlDeviceGetRemappedRows" fn(Device, *mut c_uint, *mut c_uint, *mut c_uint, *mut c_uint);
    retired_pages_pending: "nvmlDeviceGetRetiredPagesPendingStatus" fn(Device, *mut c_int);
    temperature: "nvmlDeviceGetTemperature" fn(Device, c_int, *mut c_uint);
    temperature_threshold: "nvmlDeviceGetTemperatureThreshold" fn(Device, c_int, *mut c_uint);
    clocks_event_reasons: "nvmlDeviceGetCurrentClocksEventReasons" fn(Device, *mut u64);
    clocks_throttle_reasons: "nvmlDeviceGetCurrentClocksThrottleReasons" fn(Device, *mut u64);
    pcie_replay_counter: "nvmlDeviceGetPcieReplayCounter" fn(Device, *mut c_uint);
    event_set_create: "nvmlEventSetCreate" fn(*mut EventSet);
    register_events: "nvmlDeviceRegisterEvents" fn(Device, u64, EventSet);
    event_set_wait: "nvmlEventSetWait_v2" fn(EventSet, *mut EventData, c_uint);
    event_set_free: "nvmlEventSetFree" fn(EventSet);
}

impl Api {
    fn error_text(&self, code: c_int) -> String {
        let Some(f) = self.error_string else { return format!("error {code}") };
        // SAFETY: nvmlErrorString takes any code and returns a static string, or null.
        let text = unsafe { f(code) };
        if text.is_null() {
            return format!("error {code}");
        }
        // SAFETY: a NUL-terminated static string of the library.
        format!("{} ({code})", unsafe { CStr::from_ptr(text) }.to_string_lossy())
    }
}

/// What the thread and the faults share.
struct Shared {
    /// As of the last readings (a snapshot adds what time alone tells: a start that hangs).
    health: GpuHealth,
    /// Fresh readings asked for by faults, and given by the thread.
    asked: u64,
    answered: u64,
    /// The thread is to let go of NVML (the process exits), and has.
    stop: bool,
    stopped: bool,
}

struct Monitor {
    /// The process that started it: a forked child finds another pid and leaves it alone (its
    /// lock may have been held by a parent thread at the fork).
    pid: u32,
    started: Instant,
    /// The monotonic clock at the start, in microseconds: kernel log records before it are
    /// another run's.
    started_us: u64,
    kernel_log_path: String,
    shared: Mutex<Shared>,
    changed: Condvar,
    /// A fault has waited for NVML to start once already: later ones never do.
    waited_for_start: std::sync::atomic::AtomicBool,
}

static MONITOR: OnceLock<Monitor> = OnceLock::new();

fn monotonic_us() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid clock id and a local out-parameter.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec.max(0) as u64).saturating_mul(1_000_000).saturating_add(ts.tv_nsec.max(0) as u64 / 1000)
}

/// Sets the monitor up once per process, when the guard starts (NVML "starting" unless `nvml`
/// is false, CUBLASGUARD_NVML=0); `start` then starts its thread. Two steps, so that the crash
/// writer's head, made between them, says NVML is starting, and every change the thread
/// publishes comes after it.
pub(crate) fn prepare(nvml: bool, kernel_log_path: &str) {
    MONITOR.get_or_init(|| {
        let mut health = GpuHealth::without_readings(GpuHealthState::Off, "CUBLASGUARD_NVML=0: NVML not asked");
        if nvml {
            (health.state, health.note) = (GpuHealthState::Starting, None);
        }
        Monitor {
            pid: std::process::id(),
            started: Instant::now(),
            started_us: monotonic_us(),
            kernel_log_path: kernel_log_path.to_string(),
            shared: Mutex::new(Shared { health, asked: 0, answered: 0, stop: false, stopped: !nvml }),
            changed: Condvar::new(),
            waited_for_start: std::sync::atomic::AtomicBool::new(false),
        }
    });
}

/// Starts the thread of the monitor `prepare` set up (once; not where NVML is off).
pub(crate) fn start() {
    static STARTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let Some(monitor) = MONITOR.get() else { return };
    if monitor.pid != std::process::id() || monitor.shared.lock().stopped || STARTED.swap(true, std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    // A small stack: the thread only calls NVML and copies numbers.
    let spawned = super::thread::spawn_with_signals_blocked(|| {
        std::thread::Builder::new().name("cublasguard-nvml".into()).stack_size(256 * 1024).spawn(move || run(monitor))
    });
    if let Err(e) = spawned {
        let mut shared = monitor.shared.lock();
        (shared.health.state, shared.health.note, shared.stopped) = (GpuHealthState::Missing, Some(format!("no thread to ask NVML on: {e}")), true);
    }
}

/// The thread: NVML's start, its events, and fresh readings when a fault asks.
fn run(monitor: &'static Monitor) {
    // Whatever NVML calls on this thread passes through the guard's hooks untouched.
    let _inside = crate::ffi::intercept::reentry::Reentry::enter();
    let finish = |state: GpuHealthState, note: String| {
        let mut shared = monitor.shared.lock();
        (shared.health.state, shared.health.note, shared.stopped) = (state, Some(note), true);
        monitor.changed.notify_all();
        drop(shared);
        crate::ffi::host::lifecycle::republish_crash_prefix();
    };
    // SAFETY: dlopen with a NUL-terminated name. The handle is never closed: unloading a
    // driver library is never worth the risk.
    let handle = loader_gate::through(|| unsafe { libc::dlopen(c"libnvidia-ml.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) });
    if handle.is_null() {
        return finish(
            GpuHealthState::Missing,
            "no libnvidia-ml.so.1 (it comes with the driver; in a container NVIDIA_DRIVER_CAPABILITIES must include utility)".into(),
        );
    }
    // SAFETY: a live handle of libnvidia-ml.so.1.
    let api = unsafe { Api::resolve(handle) };
    let Some(init) = api.init else { return finish(GpuHealthState::Missing, "libnvidia-ml.so.1 has no nvmlInit_v2".into()) };
    let library = crate::ffi::intercept::real::object_path(init as *const c_void).map(|(_, path)| crate::ffi::host::process::absolute_object_path(path));
    // SAFETY: nvmlInit_v2 takes no arguments.
    let code = unsafe { init() };
    if monitor.started.elapsed() > START_LIMIT {
        // Too late: the faults already said it was left off.
        return finish(
            GpuHealthState::Hung,
            format!("nvmlInit_v2 took {} s (over {} s): left off", monitor.started.elapsed().as_secs(), START_LIMIT.as_secs()),
        );
    }
    if code != NVML_SUCCESS {
        return finish(GpuHealthState::Failed, format!("nvmlInit_v2 failed: {}", api.error_text(code)));
    }
    let handles = device_handles(&api);
    let mut devices: Vec<GpuDevice> = handles.iter().map(|&(index, h)| read_device(&api, index, h)).collect();
    for d in &mut devices {
        d.ecc_at_start = d.ecc.clone();
    }
    let (set, registration_note) = register_events(&api, &handles);
    {
        let mut shared = monitor.shared.lock();
        let health = &mut shared.health;
        (health.state, health.note, health.library, health.standin) = (GpuHealthState::Ready, registration_note, library, api.standin);
        health.devices = devices;
        health.read_at_ns = Some(crate::ffi::host::process::now_ns());
        monitor.changed.notify_all();
    }
    crate::ffi::host::lifecycle::republish_crash_prefix();
    loop {
        let arrived = wait_for_events(&api, set, &handles, monitor);
        if arrived > 0 {
            // The crash writer's copy of the environment holds the events from now on (before
            // a fault waiting for fresh readings is answered: it may crash next).
            crate::ffi::host::lifecycle::republish_crash_prefix();
        }
        let (asked, answered, stop) = {
            let shared = monitor.shared.lock();
            (shared.asked, shared.answered, shared.stop)
        };
        if stop {
            break;
        }
        if asked > answered {
            let mut fresh: Vec<GpuDevice> = handles.iter().map(|&(index, h)| read_device(&api, index, h)).collect();
            // Events that came meanwhile are in before the answer.
            if drain_events(&api, set, &handles, monitor) > 0 {
                crate::ffi::host::lifecycle::republish_crash_prefix();
            }
            let mut shared = monitor.shared.lock();
            for (d, old) in fresh.iter_mut().zip(shared.health.devices.iter()) {
                d.ecc_at_start = old.ecc_at_start.clone();
            }
            shared.health.devices = fresh;
            shared.health.read_at_ns = Some(crate::ffi::host::process::now_ns());
            shared.answered = asked;
            monitor.changed.notify_all();
        }
    }
    if !set.is_null() {
        // SAFETY: the set NVML made, freed once.
        api.event_set_free.map(|f| unsafe { f(set) });
    }
    // SAFETY: no arguments; the one nvmlInit of this thread is balanced.
    api.shutdown.map(|f| unsafe { f() });
    let mut shared = monitor.shared.lock();
    shared.stopped = true;
    monitor.changed.notify_all();
}

fn device_handles(api: &Api) -> Vec<(u32, Device)> {
    let mut count: c_uint = 0;
    // SAFETY: an out-parameter for the count.
    if api.device_get_count.is_none_or(|f| unsafe { f(&mut count) } != NVML_SUCCESS) {
        return Vec::new();
    }
    (0..count.min(64))
        .filter_map(|index| {
            let mut h: Device = std::ptr::null_mut();
            // SAFETY: an out-parameter for the handle of a device below the count.
            let ok = api.device_get_handle_by_index.is_some_and(|f| unsafe { f(index, &mut h) } == NVML_SUCCESS);
            ok.then_some((index, h))
        })
        .collect()
}

/// Registers every device for Xid and double-bit ECC events (each alone where a device refuses
/// both); the set, or null with the reason.
fn register_events(api: &Api, handles: &[(u32, Device)]) -> (EventSet, Option<String>) {
    let (Some(create), Some(register)) = (api.event_set_create, api.register_events) else {
        return (std::ptr::null_mut(), Some("this NVML has no events: Xids are not seen".into()));
    };
    let mut set: EventSet = std::ptr::null_mut();
    // SAFETY: an out-parameter for the set.
    let code = unsafe { create(&mut set) };
    if code != NVML_SUCCESS || set.is_null() {
        return (std::ptr::null_mut(), Some(format!("nvmlEventSetCreate failed ({}): Xids are not seen", api.error_text(code))));
    }
    let mut refused = Vec::new();
    for &(index, h) in handles {
        // SAFETY: a device handle and the set NVML gave.
        let mut code = unsafe { register(h, EVENT_XID | EVENT_DOUBLE_BIT_ECC, set) };
        if code == NVML_ERROR_NOT_SUPPORTED {
            // SAFETY: as above, one kind at a time.
            let xid = unsafe { register(h, EVENT_XID, set) };
            // SAFETY: as above.
            let dbe = unsafe { register(h, EVENT_DOUBLE_BIT_ECC, set) };
            code = if xid == NVML_SUCCESS || dbe == NVML_SUCCESS { NVML_SUCCESS } else { xid };
        }
        if code != NVML_SUCCESS {
            refused.push(format!("device {index}: {}", api.error_text(code)));
        }
    }
    let note = (!refused.is_empty()).then(|| format!("Xid events not registered for {}", refused.join(", ")));
    (set, note)
}

/// Waits up to EVENT_WAIT_MS for an event (without a set, for a fault's request), then takes
/// those already there; how many arrived.
fn wait_for_events(api: &Api, set: EventSet, handles: &[(u32, Device)], monitor: &Monitor) -> usize {
    if set.is_null() || api.event_set_wait.is_none() {
        let mut shared = monitor.shared.lock();
        if shared.asked == shared.answered && !shared.stop {
            monitor.changed.wait_for(&mut shared, Duration::from_millis(EVENT_WAIT_MS.into()));
        }
        return 0;
    }
    match next_event(api, set, handles, EVENT_WAIT_MS) {
        Some(event) => {
            keep_event(monitor, event);
            1 + drain_events(api, set, handles, monitor)
        }
        None => 0,
    }
}

/// Takes the events already waiting, without waiting; how many.
fn drain_events(api: &Api, set: EventSet, handles: &[(u32, Device)], monitor: &Monitor) -> usize {
    let mut n = 0;
    while n < 256 {
        let Some(event) = next_event(api, set, handles, 0) else { break };
        keep_event(monitor, event);
        n += 1;
    }
    n
}

fn next_event(api: &Api, set: EventSet, handles: &[(u32, Device)], timeout_ms: c_uint) -> Option<GpuEvent> {
    let wait = api.event_set_wait?;
    if set.is_null() {
        return None;
    }
    let mut data = EventData { device: std::ptr::null_mut(), event_type: 0, event_data: 0, gpu_instance_id: 0, compute_instance_id: 0 };
    // SAFETY: the set NVML made and an out-parameter of nvmlEventData_t's layout.
    if unsafe { wait(set, &mut data, timeout_ms) } != NVML_SUCCESS {
        return None;
    }
    // NVML's handles are stable: the event's is one of those the thread registered.
    let index = handles.iter().find(|(_, h)| *h == data.device).map_or(u32::MAX, |(i, _)| *i);
    let kind = if data.event_type & EVENT_XID != 0 { GpuEventKind::Xid } else { GpuEventKind::DoubleBitEcc };
    Some(GpuEvent { kind, device: index, xid: (kind == GpuEventKind::Xid).then_some(data.event_data), time_ns: crate::ffi::host::process::now_ns() })
}

fn keep_event(monitor: &Monitor, event: GpuEvent) {
    let mut shared = monitor.shared.lock();
    if shared.health.events.len() < MAX_EVENTS {
        shared.health.events.push(event);
    } else {
        shared.health.events_dropped += 1;
    }
}

/// Whether a function was there and answered NVML_SUCCESS.
fn ok(code: Option<c_int>) -> bool {
    code == Some(NVML_SUCCESS)
}

fn read_device(api: &Api, index: u32, h: Device) -> GpuDevice {
    let mut d = GpuDevice { index, name: format!("device {index}"), ..Default::default() };
    let mut name = [0 as c_char; 96];
    // SAFETY: an out-buffer of 96 bytes, as passed (NVML_DEVICE_NAME_V2_BUFFER_SIZE).
    if ok(api.device_get_name.map(|f| unsafe { f(h, name.as_mut_ptr(), 96) })) {
        name[95] = 0;
        // SAFETY: NUL-terminated within the buffer (its last byte is 0).
        d.name = unsafe { CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned();
    }
    let mut mode: c_int = 0;
    // SAFETY: an out-parameter for an enable state, of a handle NVML gave.
    if ok(api.persistence_mode.map(|f| unsafe { f(h, &mut mode) })) {
        d.persistence_mode = Some(mode != 0);
    }
    let (mut current, mut pending): (c_int, c_int) = (0, 0);
    // SAFETY: two out-parameters for enable states.
    if ok(api.ecc_mode.map(|f| unsafe { f(h, &mut current, &mut pending) })) {
        d.ecc_mode = Some(current != 0);
    }
    if let Some(f) = api.total_ecc_errors {
        // (error type: 0 corrected, 1 uncorrected; counter: 0 volatile, 1 aggregate)
        let mut counts = [0u64; 4];
        let mut all = true;
        for (slot, (error_type, counter)) in [(0, 0), (1, 0), (0, 1), (1, 1)].into_iter().enumerate() {
            // SAFETY: an out-parameter for one count.
            all &= unsafe { f(h, error_type, counter, &mut counts[slot]) } == NVML_SUCCESS;
        }
        if all {
            let [corrected_volatile, uncorrected_volatile, corrected_aggregate, uncorrected_aggregate] = counts;
            d.ecc = Some(EccCounts { corrected_volatile, uncorrected_volatile, corrected_aggregate, uncorrected_aggregate });
        }
    }
    let mut rows: [c_uint; 4] = [0; 4];
    let [a, b, c, e] = &mut rows;
    // SAFETY: four out-parameters (corrected, uncorrected, pending, failure).
    if ok(api.remapped_rows.map(|f| unsafe { f(h, a, b, c, e) })) {
        d.remapped_rows = Some(RemappedRows { corrected: rows[0], uncorrected: rows[1], pending: rows[2] != 0, failure: rows[3] != 0 });
    }
    let mut retired: c_int = 0;
    // SAFETY: an out-parameter for an enable state.
    if ok(api.retired_pages_pending.map(|f| unsafe { f(h, &mut retired) })) {
        d.retired_pages_pending = Some(retired != 0);
    }
    let mut t: c_uint = 0;
    // SAFETY: an out-parameter; sensor 0 is NVML_TEMPERATURE_GPU.
    if ok(api.temperature.map(|f| unsafe { f(h, 0, &mut t) })) {
        d.temperature_c = Some(t);
    }
    for (threshold, slot) in [(0, &mut d.shutdown_c), (1, &mut d.slowdown_c)] {
        let mut t: c_uint = 0;
        // SAFETY: an out-parameter; thresholds 0 shutdown, 1 slowdown (nvmlTemperatureThresholds_t).
        if ok(api.temperature_threshold.map(|f| unsafe { f(h, threshold, &mut t) })) {
            *slot = Some(t);
        }
    }
    let mut reasons: u64 = 0;
    // The older name (before r535) where the newer one is missing.
    let reasons_of = api.clocks_event_reasons.or(api.clocks_throttle_reasons);
    // SAFETY: an out-parameter for the reason bits.
    if ok(reasons_of.map(|f| unsafe { f(h, &mut reasons) })) {
        d.clock_event_reasons = Some(reasons);
    }
    let mut replays: c_uint = 0;
    // SAFETY: an out-parameter for the counter.
    if ok(api.pcie_replay_counter.map(|f| unsafe { f(h, &mut replays) })) {
        d.pcie_replays = Some(replays);
    }
    d
}

/// The GPU's health as of now. `fresh`: at a fault, or at exit: the thread re-reads the
/// devices and takes the events waiting (for at most REFRESH_LIMIT; NVML still starting is
/// waited for once per process), and the kernel log is read.
pub(crate) fn snapshot(fresh: bool) -> GpuHealth {
    let Some(monitor) = MONITOR.get() else { return GpuHealth::without_readings(GpuHealthState::Off, "the guard did not start NVML") };
    if monitor.pid != std::process::id() {
        let mut health = GpuHealth::without_readings(GpuHealthState::Off, "a forked child: NVML stays with the parent process");
        if fresh {
            let (lines, note) = kernel_log::xids(&monitor.kernel_log_path, std::process::id(), monitor.started_us);
            (health.kernel_log, health.kernel_log_note) = (lines, note);
        }
        return health;
    }
    let mut stale = None;
    if fresh {
        let mut shared = monitor.shared.lock();
        let starting = shared.health.state == GpuHealthState::Starting && monitor.started.elapsed() <= START_LIMIT;
        if starting && !monitor.waited_for_start.swap(true, std::sync::atomic::Ordering::Relaxed) {
            let started_by = Instant::now() + START_WAIT;
            while shared.health.state == GpuHealthState::Starting && !monitor.changed.wait_until(&mut shared, started_by).timed_out() {}
        }
        let deadline = Instant::now() + REFRESH_LIMIT;
        if shared.health.state == GpuHealthState::Ready && !shared.stopped {
            shared.asked += 1;
            let target = shared.asked;
            monitor.changed.notify_all();
            while shared.answered < target && !shared.stopped {
                if monitor.changed.wait_until(&mut shared, deadline).timed_out() {
                    stale = Some(format!("NVML did not answer within {} ms: the readings are older", REFRESH_LIMIT.as_millis()));
                    break;
                }
            }
        }
        drop(shared);
        let (lines, note) = kernel_log::xids(&monitor.kernel_log_path, monitor.pid, monitor.started_us);
        let mut shared = monitor.shared.lock();
        (shared.health.kernel_log, shared.health.kernel_log_note) = (lines, note);
    }
    let mut health = monitor.shared.lock().health.clone();
    if health.state == GpuHealthState::Starting && monitor.started.elapsed() > START_LIMIT {
        health.state = GpuHealthState::Hung;
        health.note = Some(format!("nvmlInit_v2 did not return within {} s: NVML left off (enable persistence mode; see dmesg)", START_LIMIT.as_secs()));
    } else if health.state == GpuHealthState::Starting {
        health.note = Some(format!("nvmlInit_v2 had not returned {} ms after the guard started", monitor.started.elapsed().as_millis()));
    }
    if stale.is_some() {
        health.note = stale;
    }
    health
}

/// At exit: fresh readings for the trace, then the thread lets go of NVML.
pub(crate) fn finish() {
    if MONITOR.get().is_some_and(|m| m.pid == std::process::id()) {
        let _ = snapshot(true);
    }
    stop();
}

/// At exit: the thread lets go of NVML (waited for at most REFRESH_LIMIT: a thread inside a
/// hung NVML is left there).
pub(crate) fn stop() {
    let Some(monitor) = MONITOR.get() else { return };
    if monitor.pid != std::process::id() {
        return;
    }
    let deadline = Instant::now() + REFRESH_LIMIT;
    let mut shared = monitor.shared.lock();
    shared.stop = true;
    monitor.changed.notify_all();
    while !shared.stopped && shared.health.state == GpuHealthState::Ready {
        if monitor.changed.wait_until(&mut shared, deadline).timed_out() {
            break;
        }
    }
}
