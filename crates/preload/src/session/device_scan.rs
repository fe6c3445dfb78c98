//! What the on-device scan has learnt in this process: the kernel loaded per CUDA context, and
//! why it fell back to the host, once it did. A forked child starts without either (a CUDA
//! context does not survive fork).

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// One context's scan kernels (as addresses): one matrix, and a batch of operands; and the
/// device buffer their results go to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadedKernels {
    pub single: usize,
    pub many: usize,
    pub out: u64,
    /// Blocks of the scan the device holds at once (SMs times blocks resident per SM): the
    /// most a launch is given, its warps then stepping over the work.
    pub resident_blocks: u32,
}

#[derive(Default)]
pub struct DeviceScanState {
    /// Per context: the kernels and their result buffer. Never unloaded.
    contexts: Mutex<Vec<(usize, LoadedKernels)>>,
    failed: AtomicBool,
    failure: Mutex<Option<String>>,
}

impl DeviceScanState {
    /// The kernels and result buffer for `context`, loading them with `load` the first time.
    pub fn kernel_for(&self, context: usize, load: impl FnOnce() -> Result<LoadedKernels, String>) -> Result<LoadedKernels, String> {
        let mut contexts = self.contexts.lock();
        if let Some(&(_, loaded)) = contexts.iter().find(|(c, _)| *c == context) {
            return Ok(loaded);
        }
        let loaded = load()?;
        contexts.push((context, loaded));
        Ok(loaded)
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
