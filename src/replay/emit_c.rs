//! `cublasguard replay --emit-c FILE`: a standalone C program that loads the dump and makes
//! the call through cuBLAS, for a bug report. It reads the tensors at their offsets in the
//! safetensors file (fixed here, so the program needs no JSON parser), lays them out
//! column-major, calls `cublasGemmStridedBatchedEx` with the recorded arguments and counts
//! NaN/Inf in the output: exit 0 when there are some (the fault reproduced), 1 when not.

use std::fmt::Write as _;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use cublasguard_format::cuda::DType;
use cublasguard_format::dump::Dump;

use super::call::{compute_code, cuda_type, scalar_bytes, Replayed};

/// The exponent mask and whether the type has infinities, for the program's NaN/Inf test.
fn special_bits(dtype: DType) -> (u64, u64, bool) {
    match dtype {
        DType::F64 | DType::C64 => (0x7ff0_0000_0000_0000, 0x000f_ffff_ffff_ffff, true),
        DType::F32 | DType::C32 => (0x7f80_0000, 0x007f_ffff, true),
        DType::F16 => (0x7c00, 0x03ff, true),
        DType::BF16 => (0x7f80, 0x007f, true),
        DType::F8E5M2 => (0x7c, 0x03, true),
        DType::F8E4M3 => (0x78, 0x07, false),
        _ => (0, 0, true),
    }
}

fn bytes_literal(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("0x{b:02x}")).collect::<Vec<_>>().join(", ")
}

/// The bytes of `s` as the inside of a C string literal: printable ASCII as itself, except the
/// quote, the backslash and the question mark (no trigraph can form); every other byte as a
/// three-digit octal escape, so nothing in it can end the literal or start a line.
fn c_string(s: &[u8]) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s {
        match b {
            b'"' | b'\\' | b'?' => {
                out.push('\\');
                out.push(b as char);
            }
            0x20..=0x7e => out.push(b as char),
            _ => out.push_str(&format!("\\{b:03o}")),
        }
    }
    out
}

pub fn program(file: &[u8], d: &Dump, call: &Replayed, path: &Path) -> Result<String, String> {
    call.rerunnable(d)?;
    let (_, header) = safetensors::SafeTensors::read_metadata(file).map_err(|e| e.to_string())?;
    let infos = header.tensors();
    let offset = |name: &str| infos.get(name).map(|i| i.data_offsets).ok_or_else(|| format!("the dump has no {name}"));
    let a = &d.tensors["A"];
    let b = d.tensors.get("B").ok_or("the dump has no B")?;
    let out = &d.tensors[&call.output_name];
    let c = d.tensors.get("C").filter(|c| c.dtype == out.dtype && c.rows == out.rows && c.cols == out.cols);
    let element = |m: &cublasguard_format::dump::Matrix| m.raw.len() / (m.batch * m.rows * m.cols).max(1);
    let tensor = |name: &str, m: &cublasguard_format::dump::Matrix| -> Result<String, String> {
        let (start, end) = offset(name)?;
        Ok(format!("{{\"{name}\", {start}, {end}, {}, {}, {}, {}}}", m.batch, m.rows, m.cols, element(m)))
    };
    let (mask, mantissa, has_inf) = special_bits(out.dtype);
    let out_elem = element(out);
    let mut s = String::new();
    // Nothing from the dump goes into a comment: its path, function and fault kind are string
    // literals (dump_path, call_api, call_kind below), escaped.
    let _ = writeln!(s, "/* Reproducer written by cublasguard replay --emit-c from the dump named in dump_path below.");
    let _ = writeln!(s, " * The faulting call (call_api, call #{}) is rerun as cublasGemmStridedBatchedEx.", call.seq);
    let _ = writeln!(s, " * Build: cc repro.c -lcublas -lcudart    Run: ./a.out [DUMP]");
    let _ = writeln!(s, " * Exit status: 0 when the output holds NaN/Inf (the fault reproduced), 1 when not, 2 on error. */");
    s.push_str(
        r#"#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

struct tensor {
    const char *name;
    long long start, end; /* in the data section, after the 8-byte length and the JSON header */
    int batch, rows, cols, elem;
};

static unsigned char *load(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc(n > 0 ? (size_t)n : 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) p = NULL;
    fclose(f);
    *size = (size_t)n;
    return p;
}

/* The stored matrix (row-major in the file) column-major on the device, ld = rows. */
static void *to_device(const unsigned char *data, const struct tensor *t, int copies) {
    size_t member = (size_t)t->rows * t->cols * t->elem, bytes = member * t->batch;
    unsigned char *host = malloc(bytes * copies + 1), *dev = NULL;
    for (int b = 0; b < t->batch; b++)
        for (int c = 0; c < t->cols; c++)
            for (int r = 0; r < t->rows; r++)
                memcpy(host + b * member + ((size_t)c * t->rows + r) * t->elem,
                       data + t->start + b * member + ((size_t)r * t->cols + c) * t->elem, t->elem);
    for (int i = 1; i < copies; i++) memcpy(host + i * bytes, host, bytes);
    if (cudaMalloc((void **)&dev, bytes * copies + 1) || cudaMemcpy(dev, host, bytes * copies, cudaMemcpyHostToDevice)) {
        fprintf(stderr, "copying %s to the device failed\n", t->name);
        exit(2);
    }
    free(host);
    return dev;
}

"#,
    );
    let _ = writeln!(s, "static const struct tensor A = {};", tensor("A", a)?);
    let _ = writeln!(s, "static const struct tensor B = {};", tensor("B", b)?);
    match c {
        Some(c) => {
            let _ = writeln!(s, "static const struct tensor C = {};", tensor("C", c)?);
        }
        None => {
            let _ = writeln!(s, "static const struct tensor C = {{NULL, 0, 0, 0, 0, 0, 0}}; /* beta = 0: C is not read */");
        }
    }
    let _ = writeln!(s, "static const unsigned char alpha[] = {{{}}};", bytes_literal(&scalar_bytes(d, call.alpha)));
    let _ = writeln!(s, "static const unsigned char beta[] = {{{}}};", bytes_literal(&scalar_bytes(d, call.beta)));
    let op = |o: char| match o {
        'N' => "CUBLAS_OP_N",
        'T' => "CUBLAS_OP_T",
        _ => "CUBLAS_OP_C",
    };
    let stride = |m: &cublasguard_format::dump::Matrix| if m.batch > 1 { m.rows * m.cols } else { 0 };
    let part = out.dtype.complex_part().and_then(|p| p.size()).unwrap_or(out_elem as u64);
    let default_path = c_string(path.as_os_str().as_bytes());
    let _ = writeln!(s, "static const char dump_path[] = \"{default_path}\";");
    let _ = writeln!(s, "static const char call_api[] = \"{}\";", c_string(call.api.as_bytes()));
    let _ = writeln!(s, "static const char call_kind[] = \"{}\";", c_string(call.kind.as_bytes()));
    let _ = write!(
        s,
        r#"
static int nonfinite(const unsigned char *p) {{
    uint64_t v = 0;
    memcpy(&v, p, {part});
    return (v & {mask:#x}ull) == {mask:#x}ull && ({has_inf} ? 1 : (v & {mantissa:#x}ull) == {mantissa:#x}ull);
}}

int main(int argc, char **argv) {{
    const char *path = argc > 1 ? argv[1] : dump_path;
    printf("rerunning %s (call #{seq}, %s) from %s\n", call_api, call_kind, path);
    size_t size = 0;
    unsigned char *file = load(path, &size);
    if (!file || size < 8) {{
        fprintf(stderr, "%s: cannot read the dump\n", path);
        return 2;
    }}
    uint64_t header = 0;
    memcpy(&header, file, 8);
    /* The tensors' offsets are this dump's: a shorter or different file is refused. */
    const struct tensor *all[] = {{&A, &B, &C}};
    for (int i = 0; i < 3; i++)
        if (all[i]->name && (header > size - 8 || (uint64_t)all[i]->end > size - 8 - header)) {{
            fprintf(stderr, "%s: not the dump this program was written for (%s lies past its end)\n", path, all[i]->name);
            return 2;
        }}
    const unsigned char *data = file + 8 + header;
    int members = {members};
    void *a = to_device(data, &A, 1), *b = to_device(data, &B, 1);
    void *c;
    if (C.name) {{
        c = to_device(data, &C, members / C.batch);
    }} else {{
        cudaMalloc(&c, (size_t){out_bytes});
        cudaMemset(c, 0, (size_t){out_bytes});
    }}
    cublasHandle_t h;
    if (cublasCreate(&h)) {{
        fprintf(stderr, "cublasCreate failed\n");
        return 2;
    }}
    int status = cublasGemmStridedBatchedEx(h, {opa}, {opb}, {m}, {n}, {k}, alpha, a, {atype}, {lda}, {sa}, b, {btype}, {ldb}, {sb},
                                            beta, c, {ctype}, {ldc}, {sc}, members, {compute}, CUBLAS_GEMM_DEFAULT);
    int sync = cudaDeviceSynchronize();
    printf("cublasGemmStridedBatchedEx=%d sync=%d\n", status, sync);
    if (status || sync) return 2;
    unsigned char *result = malloc((size_t){out_bytes});
    cudaMemcpy(result, c, (size_t){out_bytes}, cudaMemcpyDeviceToHost);
    long bad = 0;
    for (size_t i = 0; i < (size_t){out_bytes}; i += {part}) bad += nonfinite(result + i);
    printf("%ld NaN/Inf in the output: %s\n", bad, bad ? "the fault reproduces" : "the fault does not reproduce");
    return bad ? 0 : 1;
}}
"#,
        seq = call.seq,
        members = out.batch,
        out_bytes = out.raw.len(),
        opa = op(call.transa),
        opb = op(call.transb),
        m = call.m,
        n = call.n,
        k = call.k,
        atype = cuda_type(a.dtype),
        lda = a.rows.max(1),
        sa = stride(a),
        btype = cuda_type(b.dtype),
        ldb = b.rows.max(1),
        sb = stride(b),
        ctype = cuda_type(out.dtype),
        ldc = out.rows.max(1),
        sc = out.rows * out.cols,
        compute = compute_code(d, a.dtype),
        has_inf = i32::from(has_inf),
    );
    Ok(s)
}
