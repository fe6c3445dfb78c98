//! A model of the CUDA device for the checks' and the policy's unit tests.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;

use super::init::DriverProbe;
use super::Device;
use crate::cuda::MemoryType;
use crate::state::{Allocation, Allocations};

/// Device memory as a map of byte buffers (everything else is host memory); host scalars by
/// address (any other host address reads as zero); the errors the next synchronisations report.
#[derive(Default)]
pub struct ModelDevice {
    pub memory: RefCell<BTreeMap<u64, Vec<u8>>>,
    pub host: RefCell<BTreeMap<u64, Vec<u8>>>,
    pub sync_errors: RefCell<Vec<i32>>,
    pub probe: RefCell<DriverProbe>,
    /// How often the free/total memory was asked for.
    pub memory_queries: Cell<u32>,
    /// Whether breadcrumbs can be enqueued, and the (stream, seq) of those that were.
    pub breadcrumbs_work: Cell<bool>,
    pub breadcrumbs: RefCell<Vec<(u64, u64)>>,
    /// How many synchronisations were asked for.
    pub synchronisations: Cell<u32>,
    /// Deferred verdicts: whether a region is there, its bytes by offset, and the work queued
    /// into it (done by `land`, as the GPU would later).
    pub verdicts_work: Cell<bool>,
    /// Marks refused, as a driver whose context broke refuses them.
    pub marks_refused: Cell<bool>,
    pub region: RefCell<BTreeMap<u64, Vec<u8>>>,
    pub queued: RefCell<Vec<Queued>>,
    /// What cuDNN answers: its last error message (taken when read), its libraries, the
    /// variant packs and plans by address, and what was written into the program's buffers.
    pub cudnn_message: RefCell<Option<String>>,
    pub cudnn_libraries: RefCell<Option<crate::trace::CudnnLibraries>>,
    pub cudnn_packs: RefCell<BTreeMap<u64, super::cudnn::VariantPack>>,
    pub cudnn_plans: RefCell<BTreeMap<u64, u64>>,
    pub written: RefCell<Vec<(u64, Vec<u8>)>>,
}

/// Work the model queued into its verdict region.
pub enum Queued {
    Copy { src: u64, len: usize, offset: u64 },
    Mark { offset: u64, value: u64 },
}

impl ModelDevice {
    /// Device memory at `base`, entered in `allocations` as the program's cudaMalloc would.
    pub fn put(&self, allocations: &Allocations, base: u64, bytes: Vec<u8>) {
        allocations.insert(Allocation { base, size: bytes.len() as u64, time_ns: 0, stream: None, api: "cudaMalloc", ordinal: 0 });
        self.memory.borrow_mut().insert(base, bytes);
    }
}

impl ModelDevice {
    /// Runs the work queued into the verdict region, as the GPU would once it got to it.
    pub fn land(&self) {
        for q in self.queued.borrow_mut().drain(..) {
            let (offset, bytes) = match q {
                Queued::Copy { src, len, offset } => {
                    let mut bytes = vec![0; len];
                    let _ = super::Reads::read(self, src, &mut bytes, 0);
                    (offset, bytes)
                }
                Queued::Mark { offset, value } => (offset, value.to_le_bytes().to_vec()),
            };
            self.region.borrow_mut().insert(offset, bytes);
        }
    }
}

impl super::VerdictMemory for ModelDevice {
    fn arena(&self) -> Option<super::VerdictArena> {
        self.verdicts_work.get().then_some(super::VerdictArena { context: 1 })
    }
    fn queue_copy(&self, _arena: super::VerdictArena, offset: u64, src: u64, len: usize, _stream: u64) -> bool {
        self.queued.borrow_mut().push(Queued::Copy { src, len, offset });
        true
    }
    fn queue_scans(&self, _arena: super::VerdictArena, _offset: u64, _jobs: &[super::BatchScan], _stream: u64) -> bool {
        false
    }
    fn queue_mark(&self, _arena: super::VerdictArena, offset: u64, value: u64, _stream: u64) -> bool {
        if self.marks_refused.get() {
            return false;
        }
        self.queued.borrow_mut().push(Queued::Mark { offset, value });
        true
    }
    fn mark(&self, _arena: super::VerdictArena, offset: u64) -> u64 {
        let region = self.region.borrow();
        region.get(&offset).and_then(|b| b.get(..8)).map_or(0, |b| u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
    }
    fn read(&self, _arena: super::VerdictArena, offset: u64, out: &mut [u8]) -> bool {
        match self.region.borrow().get(&offset) {
            Some(bytes) if bytes.len() >= out.len() => {
                out.copy_from_slice(&bytes[..out.len()]);
                true
            }
            _ => false,
        }
    }
    fn clear(&self, _arena: super::VerdictArena, offset: u64, len: usize) -> bool {
        self.region.borrow_mut().insert(offset, vec![0; len]);
        true
    }
    fn judge_soon(&self) {}
}

impl super::Reads for ModelDevice {
    fn read(&self, addr: u64, out: &mut [u8], _stream: u64) -> Result<(), i32> {
        let mem = self.memory.borrow();
        let (base, v) = mem.range(..=addr).next_back().ok_or(1)?;
        let start = (addr - base) as usize;
        out.copy_from_slice(v.get(start..start + out.len()).ok_or(1)?);
        Ok(())
    }
    fn read_host(&self, addr: u64, out: &mut [u8]) -> bool {
        match self.host.borrow().get(&addr) {
            Some(v) if v.len() >= out.len() => out.copy_from_slice(&v[..out.len()]),
            _ => out.fill(0),
        }
        true
    }
}

impl super::Memory for ModelDevice {
    fn memory_type(&self, ptr: u64) -> Option<MemoryType> {
        let mem = self.memory.borrow();
        let inside = mem.range(..=ptr).next_back().is_some_and(|(b, v)| ptr < b + v.len() as u64);
        Some(if inside { MemoryType::Device } else { MemoryType::Unregistered })
    }
    fn write_parameter(&self, ptr: u64, bytes: &[u8]) -> bool {
        self.written.borrow_mut().push((ptr, bytes.to_vec()));
        ptr != 0
    }
    fn memory_info(&self) -> Option<(u64, u64)> {
        self.memory_queries.set(self.memory_queries.get() + 1);
        Some((1 << 30, 2 << 30))
    }
}

impl super::Streams for ModelDevice {
    fn synchronize(&self, _stream: u64) -> i32 {
        self.synchronisations.set(self.synchronisations.get() + 1);
        let mut errors = self.sync_errors.borrow_mut();
        if errors.is_empty() {
            0
        } else {
            errors.remove(0)
        }
    }
    fn is_capturing(&self, _stream: u64) -> Result<bool, i32> {
        Ok(false)
    }
    fn breadcrumb(&self, stream: u64, issued: crate::session::breadcrumbs::Issued) -> bool {
        if self.breadcrumbs_work.get() {
            self.breadcrumbs.borrow_mut().push((stream, issued.seq));
        }
        self.breadcrumbs_work.get()
    }
}

impl super::Libraries for ModelDevice {
    fn param_layout(&self, _func: u64, _driver: bool) -> Option<Vec<(u32, u32)>> {
        None
    }
    fn cudnn_last_error(&self) -> Option<String> {
        self.cudnn_message.borrow_mut().take()
    }
    fn cudnn_libraries(&self, _scope: crate::check::cudnn::Scope) -> Option<crate::trace::CudnnLibraries> {
        self.cudnn_libraries.borrow().clone()
    }
    fn cudnn_variant_pack(&self, pack: u64) -> Option<super::cudnn::VariantPack> {
        self.cudnn_packs.borrow().get(&pack).cloned()
    }
    fn cudnn_plan_workspace(&self, plan: u64) -> Option<u64> {
        self.cudnn_plans.borrow().get(&plan).copied()
    }
    fn probe_driver(&self, device_count: Option<(i32, Option<i32>)>) -> DriverProbe {
        let mut probe = self.probe.borrow().clone();
        if let Some((status, n)) = device_count {
            probe.device_count_status = Some(status);
            probe.device_count = n;
        }
        probe
    }
}

impl Device for ModelDevice {
    fn verdict_memory(&self) -> Option<&dyn super::VerdictMemory> {
        Some(self)
    }
}
