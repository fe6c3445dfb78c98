//! cublasLt hooks: handles, and cublasLtMatmul with its layouts and epilogue recovered by
//! asking the real library about the descriptors.

use std::ffi::{c_int, c_void};

use super::cublas;
use super::gemm::{self, ExArgs};
use super::Stream;
use crate::check::lt::{self, Layout, MatmulDesc};
use crate::check::matmul::{MatmulCall, Members, OperandSpec, Role, MAX_OPERANDS};
use crate::cuda::ComputeType;
use crate::ffi::real::{Library, RealSymbol};
use crate::recorder::CallArgs;
use crate::scan::DType;
use crate::session::Session;
use crate::trace::hex;
use crate::validate::StoredShape;

type Ptr = *const c_void;
type GetAttribute = unsafe extern "C" fn(*mut c_void, c_int, *mut c_void, usize, *mut usize) -> c_int;

static LAYOUT_GET: RealSymbol = RealSymbol::new("cublasLtMatrixLayoutGetAttribute\0", Library::CublasLt);
static DESC_GET: RealSymbol = RealSymbol::new("cublasLtMatmulDescGetAttribute\0", Library::CublasLt);

/// Reads one attribute of `size` bytes; `None` when the library refuses.
fn attribute(get: GetAttribute, object: *mut c_void, attr: c_int, size: usize) -> Option<[u8; 8]> {
    let mut buf = [0u8; 8];
    let mut written = 0usize;
    // SAFETY: the real GetAttribute writes at most `size` (<= 8) bytes into buf.
    let status = unsafe { get(object, attr, buf.as_mut_ptr() as *mut c_void, size, &mut written) };
    (status == 0 && written == size).then_some(buf)
}

fn i32_of(b: [u8; 8]) -> i32 {
    i32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

fn read_layout(layout: *mut c_void) -> Option<Layout> {
    // SAFETY: the true signature of cublasLtMatrixLayoutGetAttribute.
    let get = unsafe { LAYOUT_GET.get::<GetAttribute>() }?;
    if layout.is_null() {
        return None;
    }
    Some(Layout {
        dtype: i32_of(attribute(get, layout, 0, 4)?),
        order: i32_of(attribute(get, layout, 1, 4)?),
        rows: u64::from_le_bytes(attribute(get, layout, 2, 8)?),
        cols: u64::from_le_bytes(attribute(get, layout, 3, 8)?),
        ld: i64::from_le_bytes(attribute(get, layout, 4, 8)?),
        batch: i32_of(attribute(get, layout, 5, 4)?),
        stride: i64::from_le_bytes(attribute(get, layout, 6, 8)?),
    })
}

fn read_desc(desc: *mut c_void) -> Option<MatmulDesc> {
    // SAFETY: the true signature of cublasLtMatmulDescGetAttribute.
    let get = unsafe { DESC_GET.get::<GetAttribute>() }?;
    if desc.is_null() {
        return None;
    }
    let ptr_size = std::mem::size_of::<*const c_void>();
    Some(MatmulDesc {
        compute: i32_of(attribute(get, desc, 0, 4)?),
        scale: i32_of(attribute(get, desc, 1, 4)?),
        pointer_mode: attribute(get, desc, 2, 4).map(i32_of).unwrap_or(0),
        transa: attribute(get, desc, 3, 4).map(i32_of).unwrap_or(0),
        transb: attribute(get, desc, 4, 4).map(i32_of).unwrap_or(0),
        epilogue: attribute(get, desc, 7, 4).map(|b| i32_of(b) as u32).unwrap_or(1),
        bias: attribute(get, desc, 8, ptr_size).map(u64::from_le_bytes).unwrap_or(0),
        bias_stride: attribute(get, desc, 10, 8).map(i64::from_le_bytes).unwrap_or(0),
        bias_type: attribute(get, desc, 26, 4).map(i32_of).unwrap_or(-1),
    })
}

pub fn create(s: &Session, hook: usize, forward: &dyn Fn() -> c_int, out: *mut *mut c_void) -> c_int {
    cublas::create_handle(s, hook, forward, out, &s.lt_handles)
}

pub fn destroy(s: &Session, hook: usize, forward: &dyn Fn() -> c_int, handle: *mut c_void) -> c_int {
    let names = cublas::HandleApi { create: "cublasLtCreate", destroy: "cublasLtDestroy" };
    cublas::destroy_handle(s, hook, forward, handle, &s.lt_handles, names)
}

#[allow(clippy::too_many_arguments)]
pub fn matmul(
    s: &Session,
    hook: usize,
    forward: &dyn Fn() -> c_int,
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
    let described = read_desc(desc);
    let layouts = [a_desc, b_desc, c_desc, d_desc].map(read_layout);
    let mut operands = [None; MAX_OPERANDS];
    let mut problem = None;
    let mut extra = ExArgs::default();
    let mut record = CallArgs::None;
    let mut scalar = DType::F32;
    let mut pointer_mode = 0;
    let mut reduced = false;
    match (described, layouts) {
        (None, _) => problem = Some(format!("computeDesc ({}) is not a matmul descriptor cublasLt accepts", hex(desc as u64))),
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
                    record = CallArgs::Gemm {
                        transa: md.transa,
                        transb: md.transb,
                        m: dims.m as i64,
                        n: dims.n as i64,
                        k: dims.k as i64,
                        lda: la.ld,
                        ldb: lb.ld,
                        ldc: ld.ld,
                    };
                    let members = |l: &Layout| {
                        if l.batch == 1 {
                            Members::One
                        } else {
                            Members::Strided { count: l.batch.max(0) as u64, stride: l.stride }
                        }
                    };
                    let spec = |name, ptr: u64, l: &Layout, role| {
                        l.stored().map(|shape| OperandSpec { name, ptr, shape, dtype: DType::from_cuda(l.dtype), members: members(l), role })
                    };
                    // With k = 0, A and B are not read.
                    if dims.k > 0 {
                        operands[0] = spec("A", a as u64, &la, Role::Input);
                        operands[1] = spec("B", b as u64, &lb, Role::Input);
                    }
                    operands[2] = spec("C", c as u64, &lc, Role::Addend);
                    operands[3] = spec("D", d as u64, &ld, Role::Output);
                    if md.has_bias() {
                        let shape = StoredShape { rows: dims.m as i64, cols: 1, ld: dims.m.max(1) as i64 };
                        let members = if ld.batch > 1 && md.bias_stride != 0 {
                            Members::Strided { count: ld.batch as u64, stride: md.bias_stride }
                        } else {
                            Members::One
                        };
                        operands[4] = Some(OperandSpec { name: "bias", ptr: md.bias, shape, dtype: md.bias_dtype(&ld), members, role: Role::Input });
                    }
                    if workspace_bytes > 0 {
                        operands[5] = Some(OperandSpec::workspace(workspace as u64, workspace_bytes as u64));
                    }
                }
            }
        }
        (Some(_), layouts) => {
            let names = ["Adesc", "Bdesc", "Cdesc", "Ddesc"];
            let bad = layouts.iter().position(Option::is_none).unwrap_or(0);
            problem = Some(format!("{} is not a matrix layout cublasLt accepts", names[bad]));
        }
    }
    let call = MatmulCall {
        handle: handle as u64,
        lt: true,
        argument_problem: problem,
        scalar,
        alpha: alpha as u64,
        beta: beta as u64,
        pointer_mode: Some(pointer_mode),
        stream: Some(stream as u64),
        reduced_precision_compute: reduced,
        operands,
    };
    gemm::run(s, hook, forward, &call, record, extra)
}
