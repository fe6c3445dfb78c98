//! Operand pointers and extents against the live allocations: every member of every operand
//! inside one allocation, pointer arrays read from device memory first, scalars where the
//! pointer mode says they are.

use super::operands::{describe, Members, OperandSpec, Role, MAX_OPERANDS};
use super::OperandCallCheck;
use crate::check::{Device, Finding};
use crate::cuda::{self, PointerMode};
use crate::state::{AllocationView, Freed};
use crate::trace::{hex, FaultKind};
use crate::validate::{self, Containment, Span};

/// Pointer arrays longer than this are checked on their first members only.
const MAX_ARRAY_MEMBERS: u64 = 1 << 20;

/// Where member `b` of an operand starts; `None` when it cannot be addressed.
pub(super) fn member_addr(spec: &OperandSpec, array: &[u64], b: u64) -> Option<u64> {
    match spec.members {
        Members::One => (b == 0).then_some(spec.ptr),
        Members::Strided { stride, .. } => {
            let offset = (b as i128) * (stride as i128) * (spec.dtype.size()? as i128);
            u64::try_from(spec.ptr as i128 + offset).ok()
        }
        Members::Array { .. } => array.get(b as usize).copied(),
    }
}

/// Why one member's memory is not acceptable.
enum MemberProblem {
    Host(Option<cuda::MemoryType>),
    /// Inside an allocation the program freed (and nothing live holds it).
    Freed(Freed),
    /// Device memory the guard did not see allocated: nothing to hold against the call.
    Untracked,
    Overruns {
        span: Span,
        over: u64,
    },
}

fn check_member(addr: u64, extent: u64, allocations: AllocationView<'_>, device: &dyn Device) -> Result<Span, MemberProblem> {
    let Some(span) = allocations.span_containing(addr) else {
        if let Some(freed) = allocations.freed_containing(addr) {
            return Err(MemberProblem::Freed(freed));
        }
        return match device.memory_type(addr) {
            Some(t) if t.device_accessible() => Err(MemberProblem::Untracked),
            None => Err(MemberProblem::Untracked), // the runtime cannot answer: no claim
            t => Err(MemberProblem::Host(t)),
        };
    };
    match validate::containment(addr, extent, span) {
        Containment::Inside => Ok(span),
        Containment::Overruns(over) => Err(MemberProblem::Overruns { span, over }),
    }
}

impl OperandCallCheck<'_> {
    /// Operands from `from` on were not checked (`why`): where they lie is noted all the same,
    /// and they are read (scanned, dumped) only when verified inside memory.
    pub(super) fn note_unchecked(&mut self, from: usize, why: &'static str, allocations: AllocationView<'_>) {
        for o in self.operands.iter_mut().skip(from).flatten() {
            if let (Members::One, Some(extent), None) = (o.spec.members, o.extent, o.allocation) {
                o.allocation = allocations.span_containing(o.spec.ptr);
                o.readable = Self::used(o) && o.allocation.is_some_and(|s| validate::containment(o.spec.ptr, extent, s) == Containment::Inside);
            }
        }
        if self.operands.iter().skip(from).any(Option::is_some) {
            self.unchecked = Some((from, why));
        }
    }

    /// Reads a pointer array's members from device memory (checking the array itself first).
    fn load_array(&mut self, i: usize, allocations: AllocationView<'_>, device: &dyn Device) -> Result<(), Finding> {
        let Some(o) = self.operands[i] else { return Ok(()) };
        let Members::Array { count } = o.spec.members else { return Ok(()) };
        let count = count.min(MAX_ARRAY_MEMBERS);
        let bytes = count * 8;
        let what = format!("{}array", o.spec.name);
        match check_member(o.spec.ptr, bytes, allocations, device) {
            Ok(span) => {
                // The operand's allocation is the array's own; its members' is kept apart.
                if let Some(r) = self.operands[i].as_mut() {
                    r.array_allocation = Some(span);
                }
            }
            Err(MemberProblem::Untracked) => return Ok(()), // cannot read it safely: members unchecked
            Err(MemberProblem::Freed(freed)) => {
                self.freed = Some(freed);
                return Err(Finding::new(
                    FaultKind::UseAfterFree,
                    format!(
                        "{what} ({}) lies in memory the program freed: the {} bytes at {} released by {} at call #{}",
                        hex(o.spec.ptr),
                        freed.size,
                        hex(freed.base),
                        freed.api,
                        freed.seq
                    ),
                ));
            }
            Err(MemberProblem::Host(_)) if o.spec.ptr == 0 => {
                return Err(Finding::new(FaultKind::InvalidArgument, format!("{what} is NULL: the batched GEMM reads its {count} matrix pointers there")));
            }
            Err(MemberProblem::Host(_)) => {
                return Err(Finding::new(
                    FaultKind::HostPointer,
                    format!(
                        "{what} ({}) is host memory, but the batched GEMM reads its array of {count} matrix pointers \
                         from device memory: copy the array to the GPU",
                        hex(o.spec.ptr)
                    ),
                ))
            }
            Err(MemberProblem::Overruns { span, over }) => {
                return Err(Finding::new(
                    FaultKind::OutOfBounds,
                    format!(
                        "{what} holds {count} pointers ({bytes} bytes) from {} but its allocation (base {}, {} bytes) \
                         is {over} bytes short",
                        hex(o.spec.ptr),
                        hex(span.base),
                        span.size
                    ),
                ))
            }
        }
        // A copy during a capture is refused and invalidates it: while the stream captures (or
        // its state is unknown), the members are left unchecked. The answer is kept for the
        // checks that ask it next.
        let stream = self.stream();
        let capturing = *self.capture_query.get_or_insert_with(|| device.is_capturing(stream));
        if capturing != Ok(false) {
            return Ok(());
        }
        let mut raw = vec![0u8; bytes as usize];
        if device.read(o.spec.ptr, &mut raw, self.stream()).is_ok() {
            self.arrays[i] = raw.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8]))).collect();
        }
        Ok(())
    }

    pub(super) fn check_pointers(&mut self, allocations: AllocationView<'_>, device: &dyn Device) -> Option<Finding> {
        for i in 0..MAX_OPERANDS {
            if let Err(f) = self.load_array(i, allocations, device) {
                self.note_unchecked(0, "the check stopped at an earlier fault", allocations);
                return Some(f);
            }
        }
        // Every operand is checked, even after one faulted: the first fault is the call's, and
        // what the others' checks find is added to its message.
        let mut first: Option<Finding> = None;
        for i in 0..MAX_OPERANDS {
            let freed = self.freed;
            let Some(finding) = self.check_operand_pointers(i, allocations, device) else { continue };
            match first.as_mut() {
                None => first = Some(finding),
                Some(first) => {
                    self.freed = freed; // the first fault's freed block, not a later one's
                    first.message.push_str(&format!("; also, {}", finding.message));
                }
            }
        }
        if first.is_some() {
            return first;
        }
        self.check_scalars(device, allocations)
    }

    /// Operand `i`'s members against the allocations.
    fn check_operand_pointers(&mut self, i: usize, allocations: AllocationView<'_>, device: &dyn Device) -> Option<Finding> {
        let o = self.operands[i]?;
        if !Self::used(&o) {
            return None;
        }
        let spec: &OperandSpec = o.spec;
        if spec.ptr == 0 && !matches!(spec.members, Members::Array { .. }) && spec.role != Role::Result {
            return self.null_operand(i, allocations, device);
        }
        if spec.role == Role::Result && self.pointer_mode() == PointerMode::Host {
            // Written by the library on the host: device memory there is the mistake.
            if allocations.containing(spec.ptr).is_some() {
                return Some(Finding::new(
                    FaultKind::InvalidArgument,
                    format!(
                        "{} ({}) points to device memory but the pointer mode is HOST: the library will write it \
                         on the host",
                        spec.name,
                        hex(spec.ptr)
                    ),
                ));
            }
            if let Some(o) = self.operands[i].as_mut() {
                o.readable = true;
            }
            return None;
        }
        let Some(extent) = o.extent else {
            return Some(Finding::new(FaultKind::OutOfBounds, format!("{}: its extent overflows a 64-bit byte count", describe(spec, None))));
        };
        if matches!(spec.members, Members::Array { .. }) && self.arrays[i].is_empty() {
            return None; // the array could not be read: its members are not checked
        }
        let count = match spec.members {
            Members::Array { count } => count.min(self.arrays[i].len() as u64),
            m => m.count(),
        };
        // A strided batch is visited first, last, then the rest: when the first and last
        // members sit in one allocation, every member between does too.
        let strided_ends_first = matches!(spec.members, Members::Strided { .. }) && count > 2;
        let mut first_span = None;
        let mut all_inside = true;
        for visit in 0..count {
            let b = match (strided_ends_first, visit) {
                (true, 0) => 0,
                (true, 1) => count - 1,
                (true, v) => v - 1,
                (false, v) => v,
            };
            let Some(addr) = member_addr(spec, &self.arrays[i], b) else {
                return Some(Finding::new(FaultKind::OutOfBounds, format!("{}: its address overflows", describe(spec, Some(b)))));
            };
            match check_member(addr, extent, allocations, device) {
                Ok(span) => {
                    if b == 0 {
                        first_span = Some(span);
                    }
                    if strided_ends_first && b == count - 1 && first_span == Some(span) {
                        break; // both ends in one allocation: every member between is too
                    }
                }
                Err(MemberProblem::Untracked) => all_inside = false,
                Err(MemberProblem::Freed(freed)) => {
                    if let Some(o) = self.operands[i].as_mut() {
                        o.bad_member = (count > 1).then_some(b);
                    }
                    self.freed = Some(freed);
                    return Some(Finding::new(
                        FaultKind::UseAfterFree,
                        format!(
                            "{} at {} lies in memory the program freed: the {} bytes at {} released by {} at call #{} (no live \
                             allocation holds it since)",
                            describe(spec, (count > 1).then_some(b)),
                            hex(addr),
                            freed.size,
                            hex(freed.base),
                            freed.api,
                            freed.seq
                        ),
                    ));
                }
                Err(MemberProblem::Host(_)) if addr == 0 => {
                    if let Some(o) = self.operands[i].as_mut() {
                        o.bad_member = (count > 1).then_some(b);
                    }
                    return Some(Finding::new(FaultKind::InvalidArgument, format!("{} is NULL", describe(spec, (count > 1).then_some(b)))));
                }
                Err(MemberProblem::Host(t)) => {
                    let seen = t.map(|t| format!("{t:?}")).unwrap_or_else(|| "unknown".into());
                    let f = Finding::new(
                        FaultKind::HostPointer,
                        format!(
                            "{} at {} is not device memory (cudaPointerGetAttributes says {seen}, and no live \
                             cudaMalloc holds it): a host (CPU) buffer was passed to a GPU call",
                            describe(spec, (count > 1).then_some(b)),
                            hex(addr)
                        ),
                    );
                    if let Some(o) = self.operands[i].as_mut() {
                        o.bad_member = (count > 1).then_some(b);
                    }
                    return Some(f);
                }
                Err(MemberProblem::Overruns { span, over }) => {
                    if let Some(o) = self.operands[i].as_mut() {
                        o.allocation = Some(span);
                        o.bad_member = (count > 1).then_some(b);
                    }
                    let name = if spec.role == Role::Workspace { "the workspace".to_string() } else { describe(spec, (count > 1).then_some(b)) };
                    let what = format!("{name} spans {extent} bytes from {}", hex(addr));
                    return Some(Finding::new(
                        FaultKind::OutOfBounds,
                        format!(
                            "{what} but its allocation (base {}, {} bytes) ends {} bytes after that pointer: \
                             the {} overruns it by {over} bytes",
                            hex(span.base),
                            span.size,
                            span.size - (addr - span.base).min(span.size),
                            if spec.role == Role::Workspace { "workspace" } else { "operand" },
                        ),
                    ));
                }
            }
        }
        if let Some(o) = self.operands[i].as_mut() {
            o.allocation = first_span;
            o.readable = all_inside && first_span.is_some();
        }
        None
    }

    /// A NULL operand (one matrix or a strided batch), by NVIDIA's rules: cublasLtMatmul's C
    /// is not read when beta == 0 ("C does not have to be a valid input"), so it may be NULL
    /// then; every other operand is read or written (a cuBLAS GEMM's C is always written).
    /// When beta cannot be read, no claim is made.
    fn null_operand(&mut self, i: usize, allocations: AllocationView<'_>, device: &dyn Device) -> Option<Finding> {
        let spec = self.operands[i]?.spec;
        if spec.role == Role::Addend {
            if self.beta_is_zero.is_none() {
                self.beta_is_zero = self.read_beta_is_zero(allocations, device);
            }
            match self.beta_is_zero {
                Some(false) => {}
                // beta == 0: C is not read; beta unreadable: nothing to hold against it.
                _ => return None,
            }
            return Some(Finding::new(
                FaultKind::InvalidArgument,
                format!("{} is NULL, but beta is not zero: the library reads C (C may be NULL only when beta == 0)", describe(spec, None)),
            ));
        }
        let why = match spec.role {
            Role::Accumulator => "the GEMM writes its result there (beta == 0 spares reading C, not writing it)",
            Role::Output | Role::InOut => "the call writes its result there",
            Role::Workspace => "the call needs that scratch memory",
            _ => "the call reads it",
        };
        Some(Finding::new(FaultKind::InvalidArgument, format!("{} is NULL: {why}", describe(spec, None))))
    }

    /// alpha and beta against the pointer mode.
    fn check_scalars(&self, device: &dyn Device, allocations: AllocationView<'_>) -> Option<Finding> {
        let mode = self.pointer_mode();
        for (name, ptr) in [("alpha", self.call.alpha), ("beta", self.call.beta)] {
            let Some(ptr) = ptr else { continue };
            // A scalar on this thread's own stack (the common `float alpha = 1;`) is host memory:
            // no allocation holds it, and asking would cost a lookup on every call.
            let tracked = !device.is_on_this_threads_stack(ptr) && allocations.containing(ptr).is_some();
            match mode {
                PointerMode::Host if tracked => {
                    return Some(Finding::new(
                        FaultKind::InvalidArgument,
                        format!(
                            "{name} ({}) points to device memory but the pointer mode is HOST: the library will read it \
                             on the host",
                            hex(ptr)
                        ),
                    ))
                }
                PointerMode::Device if !tracked && !device.memory_type(ptr).is_some_and(|t| t.device_accessible()) => {
                    return Some(Finding::new(
                        FaultKind::HostPointer,
                        format!(
                            "{name} ({}) is host memory but the pointer mode is DEVICE: the kernel will read it from the \
                             device",
                            hex(ptr)
                        ),
                    ))
                }
                _ => {}
            }
        }
        None
    }
}
