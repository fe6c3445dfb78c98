//! Facts about the process and its CUDA: who it is, where its trace goes, what the driver and
//! runtime said, the sticky error it already attributed, the versions it learnt.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};

use crate::check::operand_call::KnownError;
use crate::cuda;
use crate::trace::{Fault, Process};

/// Who this process is and where its trace goes.
#[derive(Clone, Debug)]
pub struct Identity {
    pub process: Process,
    /// The expanded trace path.
    pub trace_path: String,
}

/// Where a forked child came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForkOrigin {
    pub parent_pid: u32,
    /// The first hooked call the parent made (it initialised CUDA then), if it made one.
    pub parent_first_call: Option<String>,
}

/// CUDA versions learnt while the libraries were alive, for use when they may not be.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Versions {
    pub runtime: Option<i32>,
    pub driver: Option<i32>,
    pub cublas: Option<i32>,
    /// `cublasLtGetVersion`, of the libcublasLt the process loaded.
    pub cublas_lt: Option<i32>,
}

pub(super) struct ProcessFacts {
    identity: Mutex<Identity>,
    pub forked_from: Option<ForkOrigin>,
    /// The first sticky error (code, seq); read on every guarded call, so kept in atomics.
    known_code: AtomicI32,
    known_seq: AtomicU64,
    driver_error: Mutex<Option<String>>,
    /// What the program's own first cudaGetDeviceCount returned: (status, count).
    device_count: Mutex<Option<(i32, Option<i32>)>>,
    versions: Mutex<Versions>,
    /// The first failed capability probe, kept as the fault it becomes if the program exits
    /// with a failure status.
    probe: Mutex<Option<Fault>>,
}

impl ProcessFacts {
    pub fn new(identity: Identity) -> Self {
        Self {
            identity: Mutex::new(identity),
            forked_from: None,
            known_code: AtomicI32::new(0),
            known_seq: AtomicU64::new(0),
            driver_error: Mutex::new(None),
            device_count: Mutex::new(None),
            versions: Mutex::new(Versions::default()),
            probe: Mutex::new(None),
        }
    }

    /// A copy for a forked child; the first call the parent made is kept for the child's
    /// fork origin. What the child learns about errors it learns afresh.
    pub fn copy_with_first_call(&self, first_call: Option<String>) -> Self {
        let identity = self.identity();
        let parent_pid = identity.process.pid;
        Self {
            identity: Mutex::new(identity),
            forked_from: Some(ForkOrigin { parent_pid, parent_first_call: first_call }),
            known_code: AtomicI32::new(0),
            known_seq: AtomicU64::new(0),
            driver_error: Mutex::new(None),
            device_count: Mutex::new(None),
            versions: Mutex::new(*self.versions.lock()),
            probe: Mutex::new(None),
        }
    }

    pub fn for_child(self, identity: Identity) -> Self {
        *self.identity.lock() = identity;
        self
    }

    pub fn identity(&self) -> Identity {
        self.identity.lock().clone()
    }

    pub fn move_trace(&self, path: String) {
        self.identity.lock().trace_path = path;
    }

    pub fn known_error(&self) -> Option<KnownError> {
        self.known_error_of(self.known_error_code())
    }

    /// The known error's code alone (0: none), for a caller that wants the error as it was at
    /// this moment but reads it only if its call fails (`known_error_of`).
    #[inline]
    pub fn known_error_code(&self) -> i32 {
        self.known_code.load(Ordering::Acquire)
    }

    /// The known error whose code `known_error_code` read, then or later: the same as
    /// `known_error` then, since the seq is stored before the code is published and neither
    /// changes once set.
    pub fn known_error_of(&self, code: i32) -> Option<KnownError> {
        (code != 0).then(|| KnownError { code, seq: self.known_seq.load(Ordering::Acquire) })
    }

    /// The first sticky error wins; its seq is stored before its code is published.
    pub fn note_error(&self, code: i32, seq: u64) {
        if cuda::cuda_error_is_sticky(code) && self.known_code.load(Ordering::Acquire) == 0 {
            let _ = self.known_seq.compare_exchange(0, seq, Ordering::AcqRel, Ordering::Acquire);
            let _ = self.known_code.compare_exchange(0, code, Ordering::AcqRel, Ordering::Acquire);
        }
    }

    pub fn set_driver_error(&self, text: String) {
        self.driver_error.lock().get_or_insert(text);
    }

    pub fn driver_error(&self) -> Option<String> {
        self.driver_error.lock().clone()
    }

    pub fn note_device_count(&self, status: i32, count: Option<i32>) {
        self.device_count.lock().get_or_insert((status, count));
    }

    pub fn device_count(&self) -> Option<(i32, Option<i32>)> {
        *self.device_count.lock()
    }

    /// Keeps the first failed probe.
    pub fn keep_probe(&self, fault: Fault) {
        self.probe.lock().get_or_insert(fault);
    }

    pub fn probe(&self) -> Option<Fault> {
        self.probe.lock().clone()
    }

    pub fn versions(&self) -> Versions {
        *self.versions.lock()
    }

    /// A library loaded later fills in what was unknown; nothing known is forgotten.
    pub fn learn_versions(&self, fresh: Versions) -> Versions {
        let mut cached = self.versions.lock();
        cached.runtime = fresh.runtime.or(cached.runtime);
        cached.driver = fresh.driver.or(cached.driver);
        cached.cublas = fresh.cublas.or(cached.cublas);
        cached.cublas_lt = fresh.cublas_lt.or(cached.cublas_lt);
        *cached
    }
}
