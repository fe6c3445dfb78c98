//! The GPU's health through NVML (`libnvidia-ml.so.1`, which comes with the driver), read on a
//! thread of the guard's own and never on the program's path: loaded with `dlopen` if present,
//! initialised and registered for Xid and double-bit ECC events once, when the guard starts
//! (events before the registration are lost), then waiting for events in a loop and re-reading
//! the devices when a fault asks. `nvmlInit` can take seconds without persistence mode and has
//! hung on some drivers: a fault waits for it at most once and briefly, and one that has not
//! returned within `START_LIMIT` leaves NVML off. A forked child has NVML off (its parent's
//! thread is not there). The kernel log's Xid lines naming this process are read at faults
//! (`kernel_log`), NVML or not.

use std::ffi::{c_int, c_uint, c_void, CStr};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use cublasguard_nvml::{Device, EventData, EventSet, Nvml, EVENT_DOUBLE_BIT_ECC, EVENT_XID, NVML_ERROR_NOT_SUPPORTED, NVML_SUCCESS};
use parking_lot::{Condvar, Mutex};

use crate::ffi::host::kernel_log;
use crate::ffi::intercept::{dl, loader_gate};
use crate::gpu_health::{GpuDevice, GpuEvent, GpuEventKind, GpuHealth, GpuHealthState};

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

/// A device's readings, of a handle the thread's `device_handles` gave after its `nvmlInit`.
fn read_device(api: &Nvml, index: u32, h: Device) -> GpuDevice {
    // SAFETY: `h` is the handle NVML gave for `index` (every caller passes `device_handles`'s).
    unsafe { api.read_device(index, h) }
}

/// NVML's functions, found in the library the thread loaded (past the guard's own `dlsym`).
///
/// # Safety
/// `handle` is a live `dlopen` handle of libnvidia-ml.so.1, never closed.
unsafe fn resolve(handle: *mut c_void) -> Nvml {
    let find = |name: &CStr| {
        loader_gate::through(|| {
            // SAFETY: a live handle (the caller's contract) and a NUL-terminated name.
            unsafe { dl::real_dlsym(handle, name.as_ptr()) }
        })
    };
    // SAFETY: `find` answers symbols of the one library `handle` holds, which stays loaded.
    unsafe { Nvml::resolve(find) }
}

/// NVML's text for `code`, with the code (the trace's and the crash record's form).
fn error_text(api: &Nvml, code: c_int) -> String {
    match api.error_string_of(code) {
        Some(text) => format!("{text} ({code})"),
        None => format!("error {code}"),
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
    let api = unsafe { resolve(handle) };
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
        return finish(GpuHealthState::Failed, format!("nvmlInit_v2 failed: {}", error_text(&api, code)));
    }
    let handles = api.device_handles();
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

/// Registers every device for Xid and double-bit ECC events (each alone where a device refuses
/// both); the set, or null with the reason.
fn register_events(api: &Nvml, handles: &[(u32, Device)]) -> (EventSet, Option<String>) {
    let (Some(create), Some(register)) = (api.event_set_create, api.register_events) else {
        return (std::ptr::null_mut(), Some("this NVML has no events: Xids are not seen".into()));
    };
    let mut set: EventSet = std::ptr::null_mut();
    // SAFETY: an out-parameter for the set.
    let code = unsafe { create(&mut set) };
    if code != NVML_SUCCESS || set.is_null() {
        return (std::ptr::null_mut(), Some(format!("nvmlEventSetCreate failed ({}): Xids are not seen", error_text(api, code))));
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
            refused.push(format!("device {index}: {}", error_text(api, code)));
        }
    }
    let note = (!refused.is_empty()).then(|| format!("Xid events not registered for {}", refused.join(", ")));
    (set, note)
}

/// Waits up to EVENT_WAIT_MS for an event (without a set, for a fault's request), then takes
/// those already there; how many arrived.
fn wait_for_events(api: &Nvml, set: EventSet, handles: &[(u32, Device)], monitor: &Monitor) -> usize {
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
fn drain_events(api: &Nvml, set: EventSet, handles: &[(u32, Device)], monitor: &Monitor) -> usize {
    let mut n = 0;
    while n < 256 {
        let Some(event) = next_event(api, set, handles, 0) else { break };
        keep_event(monitor, event);
        n += 1;
    }
    n
}

fn next_event(api: &Nvml, set: EventSet, handles: &[(u32, Device)], timeout_ms: c_uint) -> Option<GpuEvent> {
    let wait = api.event_set_wait?;
    if set.is_null() {
        return None;
    }
    let mut data = EventData::empty();
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
