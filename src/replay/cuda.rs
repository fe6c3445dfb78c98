//! `cublasguard replay --cuda`: the dumped call rerun through the cuBLAS and CUDA runtime the
//! loader finds (a GPU, or the stand-in), as `cublasGemmStridedBatchedEx` with the recorded
//! types and compute type.

use std::ffi::{c_int, c_void};
use std::path::{Path, PathBuf};

use cublasguard_format::dump::{self, Dump};

use crate::cuda_table::{Cublas, Cudart};

use super::call::{column_major, compute_code, cuda_type, scalar_bytes, Replayed};

const HOST_TO_DEVICE: c_int = 1;
const DEVICE_TO_HOST: c_int = 2;

fn op_code(op: char) -> c_int {
    match op {
        'N' => 0,
        'T' => 1,
        _ => 2,
    }
}

/// The CUDA runtime and cuBLAS the loader finds, else the bundled stand-in's in `bundled` (the
/// folder `cublasguard demo` runs on): a user following the demo's `replay --cuda` has no CUDA
/// on the library path. The folder where they came from, when it was the stand-in.
fn libraries(bundled: Option<&Path>) -> Result<(Cudart, Cublas, Option<PathBuf>), String> {
    let on_path = Cudart::load().and_then(|r| Cublas::load().map(|c| (r, c)));
    let why = match on_path {
        Ok((r, c)) => return Ok((r, c, None)),
        Err(why) => why,
    };
    let Some(dir) = bundled else { return Err(why) };
    let neither = |e: String| format!("{why}; nor the bundled stand-in at {}: {e}", dir.display());
    // The driver and cuBLASLt first, by path: the runtime and cuBLAS then find them loaded by
    // their sonames. They stay loaded for the rest of this short process.
    for dependency in [dir.join("driver/libcuda.so.1"), dir.join("lib/libcublasLt.so.12")] {
        // SAFETY: loading the stand-in's libraries runs their initialisers, as its programs do.
        let library = unsafe { libloading::Library::new(&dependency) }.map_err(|e| neither(e.to_string()))?;
        std::mem::forget(library);
    }
    let open = |name: &str| dir.join("lib").join(name).display().to_string();
    let runtime = Cudart::open(&open("libcudart.so.12")).map_err(neither)?;
    let cublas = Cublas::open(&open("libcublas.so.12")).map_err(neither)?;
    Ok((runtime, cublas, Some(dir.to_path_buf())))
}

/// The rerun's output, element by element in the dump's order (member, row, column), and the
/// stand-in's folder when it ran there for want of CUDA on the library path.
pub fn rerun(d: &Dump, call: &Replayed, bundled: Option<&Path>) -> Result<(Vec<[f64; 2]>, Option<PathBuf>), String> {
    call.rerunnable(d)?;
    let (cudart, cublas, standin) = libraries(bundled)?;
    let missing = |name: &str| format!("{name} is not in the loaded CUDA libraries");
    let malloc = cudart.cudaMalloc.ok_or_else(|| missing("cudaMalloc"))?;
    let memcpy = cudart.cudaMemcpy.ok_or_else(|| missing("cudaMemcpy"))?;
    let sync = cudart.cudaDeviceSynchronize.ok_or_else(|| missing("cudaDeviceSynchronize"))?;
    let create = cublas.cublasCreate_v2.ok_or_else(|| missing("cublasCreate_v2"))?;
    let gemm = cublas.cublasGemmStridedBatchedEx.ok_or_else(|| missing("cublasGemmStridedBatchedEx"))?;
    let a = &d.tensors["A"];
    let b = d.tensors.get("B").ok_or("the dump has no B")?;
    let out = &d.tensors[&call.output_name];
    let to_device = |bytes: &[u8]| -> Result<*mut c_void, String> {
        let mut p = std::ptr::null_mut();
        // SAFETY: `p` receives a device allocation of bytes.len() bytes (at least 1), which
        // the copy then fills from `bytes`.
        let status = unsafe { malloc(&mut p, bytes.len().max(1)) };
        if status != 0 {
            return Err(format!("cudaMalloc returned {status}"));
        }
        // SAFETY: as above.
        let status = unsafe { memcpy(p, bytes.as_ptr() as *const c_void, bytes.len(), HOST_TO_DEVICE) };
        if status != 0 {
            return Err(format!("cudaMemcpy returned {status}"));
        }
        Ok(p)
    };
    let c_bytes = match d.tensors.get("C") {
        Some(c) if c.dtype == out.dtype && c.rows == out.rows && c.cols == out.cols => {
            let mut bytes = column_major(c);
            // A single C for every member is repeated, as the output needs one per member.
            bytes = bytes.repeat(out.batch / c.batch.max(1));
            bytes
        }
        _ => vec![0u8; out.raw.len()],
    };
    let (da, db, dc) = (to_device(&column_major(a))?, to_device(&column_major(b))?, to_device(&c_bytes)?);
    let mut handle = std::ptr::null_mut();
    // SAFETY: an out-parameter for the new handle.
    let status = unsafe { create(&mut handle) };
    if status != 0 {
        return Err(format!("cublasCreate returned {status}"));
    }
    let stride = |m: &dump::Matrix| if m.batch > 1 { (m.rows * m.cols) as i64 } else { 0 };
    let ld = |rows: usize| rows.max(1) as c_int;
    let (alpha, beta) = (scalar_bytes(d, call.alpha), scalar_bytes(d, call.beta));
    // SAFETY: device buffers of the dumped sizes, column-major with ld = rows, scalars in host
    // memory of the call's scalar type (the handle's default pointer mode).
    let status = unsafe {
        gemm(
            handle,
            op_code(call.transa),
            op_code(call.transb),
            call.m as c_int,
            call.n as c_int,
            call.k as c_int,
            alpha.as_ptr() as *const c_void,
            da,
            cuda_type(a.dtype),
            ld(a.rows),
            stride(a),
            db,
            cuda_type(b.dtype),
            ld(b.rows),
            stride(b),
            beta.as_ptr() as *const c_void,
            dc,
            cuda_type(out.dtype),
            ld(out.rows),
            (out.rows * out.cols) as i64,
            out.batch as c_int,
            compute_code(d, a.dtype),
            -1, // CUBLAS_GEMM_DEFAULT
        )
    };
    if status != 0 {
        return Err(format!("cublasGemmStridedBatchedEx returned {status} (this form or type combination is not supported here)"));
    }
    // SAFETY: no arguments.
    let status = unsafe { sync() };
    if status != 0 {
        return Err(format!("the rerun failed asynchronously: cudaDeviceSynchronize returned {status}"));
    }
    let mut result = vec![0u8; c_bytes.len()];
    // SAFETY: `dc` holds c_bytes.len() bytes.
    let status = unsafe { memcpy(result.as_mut_ptr() as *mut c_void, dc, result.len(), DEVICE_TO_HOST) };
    if status != 0 {
        return Err(format!("cudaMemcpy back returned {status}"));
    }
    let elem = out.dtype.size().unwrap_or(1) as usize;
    let (rows, cols) = (out.rows, out.cols);
    let mut values = vec![[0.0; 2]; out.batch * rows * cols];
    for (i, e) in result.chunks_exact(elem).enumerate() {
        let (member, col, row) = (i / (rows * cols).max(1), i / rows.max(1) % cols.max(1), i % rows.max(1));
        values[(member * rows + row) * cols + col] = dump::element(out.dtype, e);
    }
    Ok((values, standin))
}
