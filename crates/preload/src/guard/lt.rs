//! cublasLt handlers: handles, descriptors, and cublasLtMatmul with its layouts and epilogue
//! recovered by asking the real library about the descriptors (through `Device`). A descriptor
//! is read back only when this process created it and has not destroyed it, so wild pointers
//! passed as descriptors are never touched by the guard (cublasLt itself returns an error).

use std::ffi::{c_int, c_void};

use super::handles::{self, HandleApi};
use super::operand_call::{self, ExArgs};
use super::Call;
use crate::check::lt::{self, Dims, Layout, MatmulDesc};
use crate::check::operand_call::{operand_inside, Members, OperandCall, OperandSpec, Role, MAX_OPERANDS};
use crate::cuda::{ComputeType, PointerMode};
use crate::recorder::CallArgs;
use crate::scan::DType;
use crate::session::lt_descriptors::{LtDescriptors, LtMemo, MatmulDescribed};
use crate::session::{LeanGemm, Session};
use crate::state::{AllocationView, HandleLookup, ThreadMemo};
use crate::trace::hex;
use crate::validate::StoredShape;

type Ptr = *const c_void;
type Stream = *mut c_void;

const LT: HandleApi = HandleApi { create: "cublasLtCreate", destroy: "cublasLtDestroy" };

pub(crate) fn create(call: &Call<'_, c_int>, out: *mut *mut c_void) -> c_int {
    handles::create_handle(call, out, &call.session.lt_handles)
}

pub(crate) fn destroy(call: &Call<'_, c_int>, handle: *mut c_void) -> c_int {
    handles::destroy_handle(call, handle, &call.session.lt_handles, LT)
}

/// cublasLtMatmulDescCreate and cublasLtMatrixLayoutCreate: the new descriptor becomes
/// readable, `known` told what it was made with.
fn descriptor_created(call: &Call<'_, c_int>, out: *mut *mut c_void, known: impl FnOnce(u64)) -> c_int {
    let status = call.forward();
    let created = if status == 0 { super::parameters::written_u64(call, out as u64).unwrap_or(0) } else { 0 };
    call.record(status, noted_created(created, known));
    status
}

/// A descriptor made (`created`: the handle the library wrote, 0 for none): `known` told, and
/// what the recorder keeps. The handler's and the lean path's.
fn noted_created(created: u64, known: impl FnOnce(u64)) -> CallArgs {
    if created != 0 {
        known(created);
    }
    CallArgs::Handle { handle: created, value: 0 }
}

/// cublasLtMatrixLayoutSetAttribute and cublasLtMatmulDescSetAttribute: what the program set,
/// kept for the matmuls that read it (`set`, told the attribute's bytes), once the library took it.
fn attribute_set(call: &Call<'_, c_int>, descriptor: *mut c_void, attr: c_int, buf: Ptr, size: usize, set: impl FnOnce(u64, i32, &[u8])) -> c_int {
    let status = call.forward();
    let record = if status == 0 {
        noted_set(&call.session.lt_descriptors, descriptor, attr, buf, size, &|ptr, out| call.device.read_parameter(ptr, out), set)
    } else {
        CallArgs::Handle { handle: descriptor as u64, value: i64::from(attr) }
    };
    call.record(status, record);
    status
}

/// An attribute the library took: kept where the guard follows the descriptor (`read`: the
/// program's memory, as `Device::read_parameter`), and what the recorder keeps. The handler's
/// and the lean path's.
fn noted_set(
    table: &LtDescriptors,
    descriptor: *mut c_void,
    attr: c_int,
    buf: Ptr,
    size: usize,
    read: ReadProgram<'_>,
    set: impl FnOnce(u64, i32, &[u8]),
) -> CallArgs {
    if table.contains(descriptor as u64) {
        // The attributes the guard reads are 4 or 8 bytes; any other size leaves them unfollowed.
        let mut bytes = [0u8; 8];
        let read = size <= bytes.len() && read(buf as u64, &mut bytes[..size]);
        set(descriptor as u64, attr, if read { &bytes[..size] } else { &[] });
    }
    CallArgs::Handle { handle: descriptor as u64, value: i64::from(attr) }
}

pub(crate) fn layout_set_attribute(call: &Call<'_, c_int>, layout: *mut c_void, attr: c_int, buf: Ptr, size: usize) -> c_int {
    attribute_set(call, layout, attr, buf, size, |d, a, b| call.session.lt_descriptors.layout_set(d, a, b))
}

pub(crate) fn matmul_desc_set_attribute(call: &Call<'_, c_int>, desc: *mut c_void, attr: c_int, buf: Ptr, size: usize) -> c_int {
    attribute_set(call, desc, attr, buf, size, |d, a, b| call.session.lt_descriptors.matmul_set(d, a, b))
}

/// cublasLtMatmulDescDestroy and cublasLtMatrixLayoutDestroy: never read again. Forgotten
/// before the real destroy, so a concurrent create that reuses the address is not lost.
fn descriptor_destroyed(call: &Call<'_, c_int>, descriptor: *mut c_void) -> c_int {
    call.session.lt_descriptors.destroyed(descriptor as u64);
    let status = call.forward();
    call.record(status, CallArgs::Handle { handle: descriptor as u64, value: 0 });
    status
}

pub(crate) fn matmul_desc_create(call: &Call<'_, c_int>, out: *mut *mut c_void, compute: c_int, scale: c_int) -> c_int {
    descriptor_created(call, out, |d| call.session.lt_descriptors.matmul_created(d, compute, scale))
}

pub(crate) fn layout_create(call: &Call<'_, c_int>, out: *mut *mut c_void, dtype: c_int, rows: u64, cols: u64, ld: i64) -> c_int {
    descriptor_created(call, out, |d| call.session.lt_descriptors.layout_created(d, dtype, rows, cols, ld))
}

pub(crate) fn descriptor_destroy(call: &Call<'_, c_int>, descriptor: *mut c_void) -> c_int {
    descriptor_destroyed(call, descriptor)
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul(
    call: &Call<'_, c_int>,
    handle: *mut c_void,
    desc: *mut c_void,
    alpha: Ptr,
    a: Ptr,
    a_desc: *mut c_void,
    b: Ptr,
    b_desc: *mut c_void,
    beta: Ptr,
    c: Ptr,
    c_desc: *mut c_void,
    d: *mut c_void,
    d_desc: *mut c_void,
    _algo: Ptr,
    workspace: *mut c_void,
    workspace_bytes: usize,
    stream: Stream,
) -> c_int {
    // As the program set them (`session::lt_descriptors`), else asked of cuBLASLt.
    let table = &call.session.lt_descriptors;
    let known = |d: *mut c_void| table.contains(d as u64);
    // One lookup for a descriptor whose attributes are followed (the common case).
    let read_layout = |l: *mut c_void| table.layout(l as u64).or_else(|| known(l).then(|| call.device.lt_layout(l as u64)).flatten());
    let described = table.matmul(desc as u64).or_else(|| known(desc).then(|| call.device.lt_matmul_desc(desc as u64)).flatten());
    let alive = matches!(call.session.matmul_handle_in(true, handle as u64, call.memo), HandleLookup::Alive(_));
    let layouts = [a_desc, b_desc, c_desc, d_desc].map(read_layout);
    let mut operands = [None; MAX_OPERANDS];
    let mut problem = None;
    let mut extra = ExArgs::default();
    let mut record = CallArgs::None;
    let mut scalar = DType::F32;
    let mut pointer_mode = 0;
    let mut reduced = false;
    match (described, layouts) {
        (None, _) if !alive => {} // the handle check names the fault
        (None, _) => problem = Some(format!("computeDesc ({}) is not a matmul descriptor this process created", hex(desc as u64))),
        (Some(md), [Some(la), Some(lb), Some(lc), Some(ld)]) => {
            let compute = ComputeType::decode(md.compute);
            scalar = DType::from_cuda(md.scale);
            pointer_mode = md.pointer_mode;
            reduced = compute.reduced_precision();
            extra.types = Some((DType::from_cuda(la.dtype), DType::from_cuda(lb.dtype), DType::from_cuda(ld.dtype)));
            extra.compute = Some(compute);
            extra.epilogue = Some(md.epilogue);
            extra.batch_count = (ld.batch != 1).then_some(ld.batch as i64);
            if md.has_bias() {
                extra.bias = Some(md.bias);
            }
            if workspace_bytes > 0 {
                extra.workspace = Some((workspace as u64, workspace_bytes as u64));
            }
            match lt::check(&md, [&la, &lb, &lc, &ld], alpha.is_null(), beta.is_null()) {
                Err(why) => problem = Some(why),
                Ok(dims) => {
                    record = recorded(&md, &[la, lb, lc, ld], dims);
                    operands = lt_operands(&md, &[la, lb, lc, ld], dims, [a, b, c, d as Ptr], workspace, workspace_bytes);
                }
            }
        }
        (Some(_), layouts) => {
            let names = ["Adesc", "Bdesc", "Cdesc", "Ddesc"];
            let bad = layouts.iter().position(Option::is_none).unwrap_or(0);
            if alive {
                problem = Some(format!("{} is not a matrix layout this process created", names[bad]));
            }
        }
    }
    let matmul = OperandCall {
        handle: handle as u64,
        lt: true,
        argument_problem: problem,
        scalar,
        alpha: Some(alpha as u64),
        beta: Some(beta as u64),
        pointer_mode: Some(pointer_mode),
        stream: Some(stream as u64),
        reduced_precision_compute: reduced,
        operands,
    };
    operand_call::guard(call, || matmul, record, extra)
}

/// What the flight recorder keeps of a matmul whose layouts agree: its GEMM arguments.
fn recorded(md: &MatmulDesc, [la, lb, _, ld]: &[Layout; 4], dims: Dims) -> CallArgs {
    CallArgs::Gemm { transa: md.transa, transb: md.transb, m: dims.m as i64, n: dims.n as i64, k: dims.k as i64, lda: la.ld, ldb: lb.ld, ldc: ld.ld }
}

/// A, B, C, D, the bias and the workspace as the checks see them (A and B not read with
/// k = 0; a tiled layout not modelled). The handler and the lean path both take them from
/// here, so the lean path vouches for exactly what the handler would check.
fn lt_operands(
    md: &MatmulDesc,
    layouts: &[Layout; 4],
    dims: Dims,
    [a, b, c, d]: [Ptr; 4],
    workspace: *mut c_void,
    workspace_bytes: usize,
) -> [Option<OperandSpec>; MAX_OPERANDS] {
    let [la, lb, lc, ld] = layouts;
    let members = |l: &Layout| {
        if l.batch == 1 {
            Members::One
        } else {
            Members::Strided { count: l.batch.max(0) as u64, stride: l.stride }
        }
    };
    let spec = |name, ptr: Ptr, l: &Layout, role| {
        l.stored().map(|shape| OperandSpec {
            name,
            ptr: ptr as u64,
            shape,
            dtype: DType::from_cuda(l.dtype),
            members: members(l),
            role,
            increment: None,
            triangle: None,
        })
    };
    let mut operands = [None; MAX_OPERANDS];
    if dims.k > 0 {
        operands[0] = spec("A", a, la, Role::Input);
        operands[1] = spec("B", b, lb, Role::Input);
    }
    operands[2] = spec("C", c, lc, Role::Addend);
    operands[3] = spec("D", d, ld, Role::Output);
    if md.has_bias() {
        let shape = StoredShape { rows: dims.m as i64, cols: 1, ld: dims.m.max(1) as i64 };
        let members = if ld.batch > 1 && md.bias_stride != 0 { Members::Strided { count: ld.batch as u64, stride: md.bias_stride } } else { Members::One };
        operands[4] =
            Some(OperandSpec { name: "bias", ptr: md.bias, shape, dtype: md.bias_dtype(ld), members, role: Role::Input, increment: None, triangle: None });
    }
    if workspace_bytes > 0 {
        operands[5] = Some(OperandSpec::workspace(workspace as u64, workspace_bytes as u64));
    }
    operands
}

/// `cublasLtMatmul` on the hook layer's lean path (`lean_described` in the hook table).
pub(crate) struct LtMatmul;
pub(crate) const MATMUL: LtMatmul = LtMatmul;

impl LtMatmul {
    /// What the recorder keeps of a clean call, when the lean path may take it; `None` sends
    /// the call to its handler. The descriptors are read from this process's table in one
    /// lock, and only when all five are followed (the handler asks cuBLASLt for the others).
    /// With every check of a matrix multiply off (`LeanGemm::Unchecked`) that is all; with
    /// `args` and `bounds` (`LeanGemm::Prechecked`) the call is vouched for as
    /// `DescribedGemm::clean_before` vouches for a GEMM: the handle alive, the layouts'
    /// rules kept (`lt::check`), every operand inside an allocation the guard saw, alpha and
    /// beta where the pointer mode wants them. `stack`: the calling thread's stack.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(crate) fn described(
        self,
        how: LeanGemm,
        session: &Session,
        memo: &ThreadMemo,
        lt_memo: &LtMemo,
        stack: std::ops::Range<u64>,
        handle: *mut c_void,
        desc: *mut c_void,
        alpha: Ptr,
        a: Ptr,
        a_desc: *mut c_void,
        b: Ptr,
        b_desc: *mut c_void,
        beta: Ptr,
        c: Ptr,
        c_desc: *mut c_void,
        d: *mut c_void,
        d_desc: *mut c_void,
        _algo: Ptr,
        workspace: *mut c_void,
        workspace_bytes: usize,
        _stream: Stream,
    ) -> Option<CallArgs> {
        let layouts = [a_desc, b_desc, c_desc, d_desc].map(|l| l as u64);
        let vouch = |read: &MatmulDescribed| {
            let (md, layouts) = (&read.desc, &read.layouts);
            // `lt::check`: the descriptors' rules (kept with them), then alpha's and beta's.
            let dims = read.dims.filter(|_| !alpha.is_null() && !beta.is_null());
            if how == LeanGemm::Unchecked {
                // As the handler records it: the dimensions only where every rule holds.
                return Some(dims.map_or(CallArgs::None, |dims| recorded(md, layouts, dims)));
            }
            let dims = dims?;
            let HandleLookup::Alive(_) = session.matmul_handle_in(true, handle as u64, memo) else { return None };
            let record = recorded(md, layouts, dims);
            if !session.config.checks.bounds {
                return Some(record);
            }
            let allocations = AllocationView::new(&session.allocations, memo);
            let operands = lt_operands(md, layouts, dims, [a, b, c, d as Ptr], workspace, workspace_bytes);
            if !operands.iter().flatten().all(|o| operand_inside(allocations, o)) {
                return None;
            }
            // As `check_scalars`: cublasLt's vector modes (2..4) are device pointers too.
            let mode = PointerMode::decode(if md.pointer_mode >= 2 { 1 } else { md.pointer_mode });
            let tracked = |ptr: Ptr| !stack.contains(&(ptr as u64)) && allocations.span_containing(ptr as u64).is_some();
            let scalars_placed = match mode {
                PointerMode::Host => !tracked(alpha) && !tracked(beta),
                PointerMode::Device => tracked(alpha) && tracked(beta),
                PointerMode::Unknown(_) => true,
            };
            scalars_placed.then_some(record)
        };
        session.lt_descriptors.with_matmul_in(desc as u64, layouts, lt_memo, vouch).flatten()
    }
}

/// cublasLt's descriptor calls on the hook layer's lean path (`lean_always` in the hook
/// table), one value per call: they have no checks, so whatever the checks are a clean one is
/// forwarded and recorded without its handler, the guard's table kept as the handler keeps it.
/// PyTorch makes eight or nine of them around every cublasLtMatmul. `before` runs before the
/// real call (a destroy forgets the descriptor first, as its handler does; `None` would send
/// the call to its handler), `after` once it succeeded (`read`: the program's memory, for the
/// handle a create wrote and the bytes a set passed); a failed call goes to its handler.
pub(crate) struct MatmulDescCreate;
pub(crate) struct LayoutCreate;
pub(crate) struct LayoutSetAttribute;
pub(crate) struct MatmulDescSetAttribute;
pub(crate) struct DescriptorDestroy;
pub(crate) const MATMUL_DESC_CREATE: MatmulDescCreate = MatmulDescCreate;
pub(crate) const LAYOUT_CREATE: LayoutCreate = LayoutCreate;
pub(crate) const LAYOUT_SET_ATTRIBUTE: LayoutSetAttribute = LayoutSetAttribute;
pub(crate) const MATMUL_DESC_SET_ATTRIBUTE: MatmulDescSetAttribute = MatmulDescSetAttribute;
pub(crate) const DESCRIPTOR_DESTROY: DescriptorDestroy = DescriptorDestroy;

/// What `read` for the program's memory is: `Device::read_parameter`'s copy.
type ReadProgram<'a> = &'a dyn Fn(u64, &mut [u8]) -> bool;

/// The created handle `out` points to, as `parameters::written_u64` reads it (0: unread).
fn written_handle(read: ReadProgram<'_>, out: *mut *mut c_void) -> u64 {
    let mut bytes = [0u8; 8];
    if read(out as u64, &mut bytes) {
        u64::from_ne_bytes(bytes)
    } else {
        0
    }
}

impl MatmulDescCreate {
    pub(crate) fn before(&self, _: &Session, _out: *mut *mut c_void, _compute: c_int, _scale: c_int) -> Option<()> {
        Some(())
    }

    pub(crate) fn after(&self, s: &Session, read: ReadProgram<'_>, out: *mut *mut c_void, compute: c_int, scale: c_int) -> CallArgs {
        noted_created(written_handle(read, out), |d| s.lt_descriptors.matmul_created(d, compute, scale))
    }
}

impl LayoutCreate {
    pub(crate) fn before(&self, _: &Session, _out: *mut *mut c_void, _dtype: c_int, _rows: u64, _cols: u64, _ld: i64) -> Option<()> {
        Some(())
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn after(&self, s: &Session, read: ReadProgram<'_>, out: *mut *mut c_void, dtype: c_int, rows: u64, cols: u64, ld: i64) -> CallArgs {
        noted_created(written_handle(read, out), |d| s.lt_descriptors.layout_created(d, dtype, rows, cols, ld))
    }
}

impl LayoutSetAttribute {
    pub(crate) fn before(&self, _: &Session, _layout: *mut c_void, _attr: c_int, _buf: Ptr, _size: usize) -> Option<()> {
        Some(())
    }

    pub(crate) fn after(&self, s: &Session, read: ReadProgram<'_>, layout: *mut c_void, attr: c_int, buf: Ptr, size: usize) -> CallArgs {
        noted_set(&s.lt_descriptors, layout, attr, buf, size, read, |d, a, b| s.lt_descriptors.layout_set(d, a, b))
    }
}

impl MatmulDescSetAttribute {
    pub(crate) fn before(&self, _: &Session, _desc: *mut c_void, _attr: c_int, _buf: Ptr, _size: usize) -> Option<()> {
        Some(())
    }

    pub(crate) fn after(&self, s: &Session, read: ReadProgram<'_>, desc: *mut c_void, attr: c_int, buf: Ptr, size: usize) -> CallArgs {
        noted_set(&s.lt_descriptors, desc, attr, buf, size, read, |d, a, b| s.lt_descriptors.matmul_set(d, a, b))
    }
}

impl DescriptorDestroy {
    /// Forgotten before the real destroy, as `descriptor_destroyed` does.
    pub(crate) fn before(&self, s: &Session, descriptor: *mut c_void) -> Option<()> {
        s.lt_descriptors.destroyed(descriptor as u64);
        Some(())
    }

    pub(crate) fn after(&self, _: &Session, _read: ReadProgram<'_>, descriptor: *mut c_void) -> CallArgs {
        CallArgs::Handle { handle: descriptor as u64, value: 0 }
    }
}
