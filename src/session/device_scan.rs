//! What the on-device scan has learnt in this process: the kernel loaded per CUDA context, and
//! why it fell back to the host, once it did. A forked child starts without either (a CUDA
//! context does not survive fork).

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Default)]
pub struct DeviceScanState {
    /// Per context: (context, kernel function, 24-byte result buffer). Never unloaded.
    contexts: Mutex<Vec<(usize, usize, u64)>>,
    failed: AtomicBool,
    failure: Mutex<Option<String>>,
}

impl DeviceScanState {
    /// The kernel and result buffer for `context`, loading them with `load` the first time.
    pub fn kernel_for(&self, context: usize, load: impl FnOnce() -> Result<(usize, u64), String>) -> Result<(usize, u64), String> {
        let mut contexts = self.contexts.lock();
        if let Some(&(_, f, out)) = contexts.iter().find(|(c, _, _)| *c == context) {
            return Ok((f, out));
        }
        let (f, out) = load()?;
        contexts.push((context, f, out));
        Ok((f, out))
    }

    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    /// Records why the device scan is off; true the first time (the caller says it once).
    pub fn fail(&self, why: String) -> bool {
        if self.failed.swap(true, Ordering::SeqCst) {
            return false;
        }
        *self.failure.lock() = Some(why);
        true
    }

    pub fn failure(&self) -> Option<String> {
        self.failure.lock().clone()
    }
}
