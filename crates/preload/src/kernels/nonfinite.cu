// The on-device NaN/Inf scan: one source, two compilers.
//  - NVRTC compiles it to the PTX the library ships (crates/preload/src/ptx/nonfinite.ptx, made by
//    scripts/gen-ptx.sh; CI checks the checked-in file is exactly what NVRTC makes).
//  - The host compiler builds it as plain C++ (with host.h standing in for CUDA's built-ins):
//    the stand-in driver runs that build over the launch grid, and the tests compare it with
//    the guard's host scan.
//
// One matrix, column-major with leading dimension `ld`, of `rows` x `cols` elements of `kind`
// (a cudaDataType_t: 0 f32, 1 f64, 2 f16, 14 bf16, 28 E4M3, 29 E5M2). `out` (device memory,
// three u64, set by the caller to 0, 0, all ones) receives the NaN count, the Inf count and the
// lowest stored index (col * ld + row) of a NaN/Inf.
#ifndef __CUDACC__
#include "host.h"
#endif

typedef unsigned long long u64;
typedef unsigned int u32;

// 0: finite; 1: NaN; 2: Inf. By bit pattern: exponent all ones, then the mantissa decides.
// E4M3 ("fn") has no Inf: only S.1111.111 is NaN.
__device__ static int classify(const unsigned char *p, u32 kind) {
    u64 bits, exponent, mantissa;
    switch (kind) {
    case 1:
        bits = *(const u64 *)p;
        exponent = 0x7ff0000000000000ull;
        mantissa = 0x000fffffffffffffull;
        break;
    case 2:
        bits = *(const unsigned short *)p;
        exponent = 0x7c00;
        mantissa = 0x03ff;
        break;
    case 14:
        bits = *(const unsigned short *)p;
        exponent = 0x7f80;
        mantissa = 0x007f;
        break;
    case 28:
        bits = *p;
        return (bits & 0x7f) == 0x7f ? 1 : 0;
    case 29:
        bits = *p;
        exponent = 0x7c;
        mantissa = 0x03;
        break;
    default:
        bits = *(const u32 *)p;
        exponent = 0x7f800000;
        mantissa = 0x007fffff;
        break;
    }
    if ((bits & exponent) != exponent) return 0;
    return (bits & mantissa) ? 1 : 2;
}

__device__ static u64 element_size(u32 kind) {
    switch (kind) {
    case 1: return 8;
    case 2: case 14: return 2;
    case 28: case 29: return 1;
    default: return 4;
    }
}

extern "C" __global__ void cublasguard_nonfinite(u64 data, u64 rows, u64 cols, u64 ld, u32 kind, u64 out) {
    const u64 elements = rows * cols;
    const u64 size = element_size(kind);
    const u64 stride = (u64)gridDim.x * blockDim.x;
    u64 nan = 0, inf = 0, first = ~0ull;
    // Element e is (row, col) = (e % rows, e / rows); both are stepped along the grid stride
    // instead of divided out per element (a 64-bit division costs more than the load).
    u64 e = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (rows == 0 || e >= elements) return;
    u64 col = e / rows, row = e - col * rows;
    const u64 step_col = stride / rows, step_row = stride - step_col * rows;
    for (; e < elements; e += stride) {
        const u64 index = col * ld + row;
        const int c = classify((const unsigned char *)data + index * size, kind);
        if (c == 1) nan++;
        if (c == 2) inf++;
        if (c && index < first) first = index;
        row += step_row;
        col += step_col;
        if (row >= rows) {
            row -= rows;
            col++;
        }
    }
    // Only a thread that found something touches the result: the common, finite case costs
    // no atomic at all.
    u64 *result = (u64 *)out;
    if (nan) atomicAdd(&result[0], nan);
    if (inf) atomicAdd(&result[1], inf);
    if (first != ~0ull) atomicMin(&result[2], first);
}

// Every operand of one call, every member of each batch, in one launch: job j is scanned by the
// blocks with blockIdx.y == j. A member is at `data + member * stride` elements (a strided
// batch), or at the member-th pointer of the device array at `data` (`array` != 0). `out`
// (three u64 per job, zeroed by the caller) receives the NaN count, the Inf count and ~key of
// the first NaN/Inf, key = member << 40 | stored index (so 0 means none, and the largest ~key
// is the first in member order, then in stored order).
#define CUBLASGUARD_MAX_JOBS 6

struct scan_job {
    u64 data, rows, cols, ld, members;
    long long stride;
    u32 kind, array;
};

struct scan_jobs {
    struct scan_job job[CUBLASGUARD_MAX_JOBS];
    u32 count, unused;
};

extern "C" __global__ void cublasguard_nonfinite_many(struct scan_jobs jobs, u64 out) {
    if (blockIdx.y >= jobs.count) return;
    const struct scan_job job = jobs.job[blockIdx.y];
    const u64 per = job.rows * job.cols, elements = per * job.members, size = element_size(job.kind);
    const u64 stride = (u64)gridDim.x * blockDim.x;
    u64 e = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (per == 0 || e >= elements) return;
    // (member, col, row) of element e, stepped along the grid stride without dividing per element.
    u64 member = e / per, within = e - member * per;
    u64 col = within / job.rows, row = within - col * job.rows;
    const u64 step_member = stride / per, step_within = stride - step_member * per;
    const u64 step_col = step_within / job.rows, step_row = step_within - step_col * job.rows;
    u64 nan = 0, inf = 0, first = 0;
    for (; e < elements; e += stride) {
        const unsigned char *base = job.array ? (const unsigned char *)((const u64 *)job.data)[member]
                                              : (const unsigned char *)job.data + (long long)member * job.stride * (long long)size;
        const u64 index = col * job.ld + row;
        const int c = classify(base + index * size, job.kind);
        if (c == 1) nan++;
        if (c == 2) inf++;
        const u64 key = ~((member << 40) | index);
        if (c && key > first) first = key;
        row += step_row;
        col += step_col;
        if (row >= job.rows) {
            row -= job.rows;
            col++;
        }
        member += step_member;
        if (col >= job.cols) {
            col -= job.cols;
            member++;
        }
    }
    u64 *result = (u64 *)out + 3 * blockIdx.y;
    if (nan) atomicAdd(&result[0], nan);
    if (inf) atomicAdd(&result[1], inf);
    if (first) atomicMax(&result[2], first);
}
