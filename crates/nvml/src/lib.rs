//! NVML (`libnvidia-ml.so.1`, which comes with the driver) as cublasguard speaks to it, in one
//! place for the guard (its NVML thread) and the command (the doctor): the functions' table by
//! the versioned names nvml.h's macros call, the devices' handles and each device's health
//! readings. The caller loads the library and looks the symbols up (the guard through its own
//! `dlsym`, past its interposer, and its loader gate; the command through libloading), and
//! decides when to call `nvmlInit`: this crate opens nothing and starts no thread.

#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};

use cublasguard_format::gpu_health::{EccCounts, GpuDevice, RemappedRows};

pub const NVML_SUCCESS: c_int = 0;
pub const NVML_ERROR_NOT_SUPPORTED: c_int = 3;
/// The kernel module and the driver's libraries are of different releases.
pub const NVML_ERROR_LIB_RM_VERSION_MISMATCH: c_int = 18;
/// `nvmlEventTypeDoubleBitEccError`.
pub const EVENT_DOUBLE_BIT_ECC: u64 = 0x2;
/// `nvmlEventTypeXidCriticalError`.
pub const EVENT_XID: u64 = 0x8;
/// The private symbol of cublasguard's stand-in NVML (shims/nvml.c): no NVIDIA library has it.
pub const STANDIN_SYMBOL: &CStr = c"cudashim_nvml_is_stand_in";
/// Devices asked about at most.
pub const MAX_DEVICES: u32 = 64;

/// `nvmlDevice_t`: a handle NVML gave (`Nvml::device_handles`).
pub type Device = *mut c_void;
/// `nvmlEventSet_t`.
pub type EventSet = *mut c_void;

/// `nvmlEventData_t`.
#[repr(C)]
pub struct EventData {
    pub device: Device,
    pub event_type: u64,
    pub event_data: u64,
    pub gpu_instance_id: c_uint,
    pub compute_instance_id: c_uint,
}

impl EventData {
    pub fn empty() -> Self {
        Self { device: std::ptr::null_mut(), event_type: 0, event_data: 0, gpu_instance_id: 0, compute_instance_id: 0 }
    }
}

macro_rules! nvml_table {
    ( $( $field:ident : $name:literal fn ( $( $ty:ty ),* ) ; )* ) => {
        /// NVML's functions, each `None` where the library lacks it. Every one returns
        /// nvmlReturn_t; their contracts are NVIDIA's (nvml.h), so they stay `unsafe`.
        pub struct Nvml {
            $( pub $field: Option<unsafe extern "C" fn( $( $ty ),* ) -> c_int>, )*
            pub error_string: Option<unsafe extern "C" fn(c_int) -> *const c_char>,
            /// The library is cublasguard's stand-in (`STANDIN_SYMBOL`).
            pub standin: bool,
        }

        impl Nvml {
            /// The table, each function looked up by `find`.
            ///
            /// # Safety
            /// `find(name)` returns the address of the symbol `name` in one loaded
            /// libnvidia-ml.so.1 (which stays loaded while the table is used), or null.
            pub unsafe fn resolve(find: impl Fn(&CStr) -> *mut c_void) -> Self {
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
                    standin: !find(STANDIN_SYMBOL).is_null(),
                }
            }
        }
    };
}

nvml_table! {
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

/// Whether a function was there and answered NVML_SUCCESS.
fn ok(code: Option<c_int>) -> bool {
    code == Some(NVML_SUCCESS)
}

impl Nvml {
    /// nvmlErrorString's text for `code` (`None` where the library has no such function or
    /// gives no text).
    pub fn error_string_of(&self, code: c_int) -> Option<String> {
        let f = self.error_string?;
        // SAFETY: nvmlErrorString takes any code and returns a static string, or null.
        let text = unsafe { f(code) };
        // SAFETY: a NUL-terminated static string of the library.
        (!text.is_null()).then(|| unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned())
    }

    /// Each device's index and handle (at most `MAX_DEVICES`; one NVML will not hand over is
    /// left out). Asked after a successful `nvmlInit`.
    pub fn device_handles(&self) -> Vec<(u32, Device)> {
        let mut count: c_uint = 0;
        // SAFETY: an out-parameter for the count.
        if self.device_get_count.is_none_or(|f| unsafe { f(&mut count) } != NVML_SUCCESS) {
            return Vec::new();
        }
        (0..count.min(MAX_DEVICES))
            .filter_map(|index| {
                let mut h: Device = std::ptr::null_mut();
                // SAFETY: an out-parameter for the handle of a device below the count.
                let ok = self.device_get_handle_by_index.is_some_and(|f| unsafe { f(index, &mut h) } == NVML_SUCCESS);
                ok.then_some((index, h))
            })
            .collect()
    }

    /// What NVML says of device `index`: its name, persistence and ECC mode, ECC counts,
    /// remapped rows, retired pages, temperature and its thresholds, clock event reasons and
    /// PCIe replays, each where it answers.
    ///
    /// # Safety
    /// `h` is the handle `device_handles` gave for `index`, after this table's `nvmlInit`.
    pub unsafe fn read_device(&self, index: u32, h: Device) -> GpuDevice {
        let mut d = GpuDevice { index, name: format!("device {index}"), ..Default::default() };
        let mut name = [0 as c_char; 96];
        // SAFETY: an out-buffer of 96 bytes, as passed (NVML_DEVICE_NAME_V2_BUFFER_SIZE), of a
        // handle NVML gave (the caller's contract).
        if ok(self.device_get_name.map(|f| unsafe { f(h, name.as_mut_ptr(), 96) })) {
            name[95] = 0;
            // SAFETY: NUL-terminated within the buffer (its last byte is 0).
            d.name = unsafe { CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned();
        }
        let mut mode: c_int = 0;
        // SAFETY: an out-parameter for an enable state.
        if ok(self.persistence_mode.map(|f| unsafe { f(h, &mut mode) })) {
            d.persistence_mode = Some(mode != 0);
        }
        let (mut current, mut pending): (c_int, c_int) = (0, 0);
        // SAFETY: two out-parameters for enable states.
        if ok(self.ecc_mode.map(|f| unsafe { f(h, &mut current, &mut pending) })) {
            d.ecc_mode = Some(current != 0);
        }
        if let Some(f) = self.total_ecc_errors {
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
        if ok(self.remapped_rows.map(|f| unsafe { f(h, a, b, c, e) })) {
            d.remapped_rows = Some(RemappedRows { corrected: rows[0], uncorrected: rows[1], pending: rows[2] != 0, failure: rows[3] != 0 });
        }
        let mut retired: c_int = 0;
        // SAFETY: an out-parameter for an enable state.
        if ok(self.retired_pages_pending.map(|f| unsafe { f(h, &mut retired) })) {
            d.retired_pages_pending = Some(retired != 0);
        }
        let mut t: c_uint = 0;
        // SAFETY: an out-parameter; sensor 0 is NVML_TEMPERATURE_GPU.
        if ok(self.temperature.map(|f| unsafe { f(h, 0, &mut t) })) {
            d.temperature_c = Some(t);
        }
        for (threshold, slot) in [(0, &mut d.shutdown_c), (1, &mut d.slowdown_c)] {
            let mut t: c_uint = 0;
            // SAFETY: an out-parameter; thresholds 0 shutdown, 1 slowdown (nvmlTemperatureThresholds_t).
            if ok(self.temperature_threshold.map(|f| unsafe { f(h, threshold, &mut t) })) {
                *slot = Some(t);
            }
        }
        let mut reasons: u64 = 0;
        // The older name (before r535) where the newer one is missing.
        let reasons_of = self.clocks_event_reasons.or(self.clocks_throttle_reasons);
        // SAFETY: an out-parameter for the reason bits.
        if ok(reasons_of.map(|f| unsafe { f(h, &mut reasons) })) {
            d.clock_event_reasons = Some(reasons);
        }
        let mut replays: c_uint = 0;
        // SAFETY: an out-parameter for the counter.
        if ok(self.pcie_replay_counter.map(|f| unsafe { f(h, &mut replays) })) {
            d.pcie_replays = Some(replays);
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_library_without_nvml_gives_a_table_of_nothing_and_no_devices() {
        // SAFETY: `find` returns null for every name: nothing is ever called.
        let nvml = unsafe { Nvml::resolve(|_| std::ptr::null_mut()) };
        assert!(nvml.init.is_none() && nvml.error_string.is_none() && !nvml.standin);
        assert!(nvml.device_handles().is_empty());
        assert_eq!(nvml.error_string_of(3), None);
    }

    #[test]
    fn every_function_is_looked_up_by_its_versioned_name() {
        let asked = std::cell::RefCell::new(Vec::new());
        // SAFETY: as above: null for every name.
        let _ = unsafe {
            Nvml::resolve(|name| {
                asked.borrow_mut().push(name.to_string_lossy().into_owned());
                std::ptr::null_mut()
            })
        };
        let asked = asked.into_inner();
        for name in
            ["nvmlInit_v2", "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2", "nvmlEventSetWait_v2", "nvmlErrorString", "cudashim_nvml_is_stand_in"]
        {
            assert!(asked.iter().any(|a| a == name), "{name} not asked: {asked:?}");
        }
    }
}
