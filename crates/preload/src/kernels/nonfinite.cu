// The on-device NaN/Inf scan: one source, two compilers.
//  - NVRTC compiles it to the PTX the library ships (crates/preload/src/ptx/nonfinite.ptx, made by
//    scripts/gen-ptx.sh; CI checks the checked-in file is exactly what NVRTC makes).
//  - The host compiler builds it as plain C++ (with host.h standing in for CUDA's built-ins):
//    the stand-in driver runs that build over the launch grid, and the tests compare it with
//    the guard's host scan.
//
// Bound by memory, not by work per element (issue 30): a matrix is cut into runs of contiguous
// elements (the whole matrix when ld == rows or it has one column, else one run per column),
// each run into segments of SEGMENT bytes, and each segment is read by one warp with 16-byte
// loads, UNROLL of them in flight per lane before any is tested. A 16-byte chunk is tested
// with bit operations on its packed 32-bit words (two f16/bf16 or four FP8 per word), without
// converting an element; only a chunk that holds a NaN/Inf is classified element by element,
// and only there is the first position worked out. The unaligned head and tail of a segment
// (fewer than 16 bytes each) are read element by element, byte by byte. Warps step over the
// segments of every run with a grid stride, so the host sizes the grid from the device (its
// SMs times the blocks resident on each), not from the element count.
//
// Elements are of `kind` (a cudaDataType_t: 0 f32, 1 f64, 2 f16, 14 bf16, 28 E4M3, 29 E5M2),
// column-major with leading dimension `ld`.
#ifndef __CUDACC__
#include "host.h"
#endif

#ifdef __CUDACC__
#define UNROLLED _Pragma("unroll")
#else
#define UNROLLED
#endif

typedef unsigned long long u64;
typedef unsigned int u32;

// Lanes of a warp, and what one warp reads per segment: UNROLL chunks of 16 bytes per lane.
#define WARP 32
#define UNROLL 8
#define SEGMENT (WARP * 16 * UNROLL)

// 0: finite; 1: NaN; 2: Inf. By bit pattern: exponent all ones, then the mantissa decides.
// E4M3 ("fn") has no Inf: only S.1111.111 is NaN. Reads byte by byte: any alignment.
__device__ static int classify(const unsigned char *p, u32 kind) {
    u64 bits = 0, exponent, mantissa;
    switch (kind) {
    case 1:
        for (int i = 7; i >= 0; i--) bits = bits << 8 | p[i];
        exponent = 0x7ff0000000000000ull;
        mantissa = 0x000fffffffffffffull;
        break;
    case 2:
        bits = (u64)p[1] << 8 | p[0];
        exponent = 0x7c00;
        mantissa = 0x03ff;
        break;
    case 14:
        bits = (u64)p[1] << 8 | p[0];
        exponent = 0x7f80;
        mantissa = 0x007f;
        break;
    case 28:
        return (p[0] & 0x7f) == 0x7f ? 1 : 0;
    case 29:
        bits = p[0];
        exponent = 0x7c;
        mantissa = 0x03;
        break;
    default:
        bits = (u64)p[3] << 24 | (u64)p[2] << 16 | (u64)p[1] << 8 | p[0];
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

// The packed test of one kind: a lane's exponent bits (`mask`) are all ones exactly when adding
// `carry` sets the lane's top bit (`top`); no lane carries into the next. f64's exponent is in
// the odd (high) words only.
struct packed_test {
    u32 mask_even, carry_even, mask_odd, carry_odd, top;
};

__device__ static packed_test packed_test_of(u32 kind) {
    packed_test t;
    switch (kind) {
    case 1: t = {0, 0, 0x7ff00000u, 0x00100000u, 0x80000000u}; break;
    case 2: t = {0x7c007c00u, 0x04000400u, 0x7c007c00u, 0x04000400u, 0x80008000u}; break;
    case 14: t = {0x7f807f80u, 0x00800080u, 0x7f807f80u, 0x00800080u, 0x80008000u}; break;
    case 28: t = {0x7f7f7f7fu, 0x01010101u, 0x7f7f7f7fu, 0x01010101u, 0x80808080u}; break;
    case 29: t = {0x7c7c7c7cu, 0x04040404u, 0x7c7c7c7cu, 0x04040404u, 0x80808080u}; break;
    default: t = {0x7f800000u, 0x00800000u, 0x7f800000u, 0x00800000u, 0x80000000u}; break;
    }
    return t;
}

// Non-zero when one of the chunk's elements is NaN or Inf.
__device__ static u32 flagged(uint4 v, packed_test t) {
    return (((v.x & t.mask_even) + t.carry_even) | ((v.y & t.mask_odd) + t.carry_odd) | ((v.z & t.mask_even) + t.carry_even) |
            ((v.w & t.mask_odd) + t.carry_odd)) &
           t.top;
}

// What one thread found: counts, and the lowest key (member << 40 | stored index) of a NaN/Inf.
struct found {
    u64 nan, inf, first;
};

__device__ static void note(found &f, int c, u64 key) {
    if (c == 1) f.nan++;
    if (c == 2) f.inf++;
    if (c && key < f.first) f.first = key;
}

// The elements of one 16-byte chunk (already loaded) whose first element has key `key`.
__device__ __noinline__ static void classify_chunk(uint4 v, u32 kind, u64 size, u64 key, found &f) {
    const unsigned char *bytes = (const unsigned char *)&v;
    for (u64 k = 0; k < 16 / size; k++) note(f, classify(bytes + k * size, kind), key + k);
}

// One matrix of a job: where each member is (at `data` plus member * stride elements, or at the
// member-th pointer of the device array at `data`) and how it is cut into runs.
struct layout {
    u64 data, rows, cols, ld, members, size;
    long long stride;
    u32 kind, array;
    u64 runs, run_elements, run_bytes, segments; // per member; segments per run
};

__device__ static layout layout_of(u64 data, u64 rows, u64 cols, u64 ld, u64 members, long long stride, u32 kind, u32 array) {
    layout l;
    l.data = data, l.rows = rows, l.cols = cols, l.ld = ld, l.members = members, l.stride = stride, l.kind = kind, l.array = array;
    l.size = element_size(kind);
    const int contiguous = ld == rows || cols == 1;
    l.runs = contiguous ? 1 : cols;
    l.run_elements = contiguous ? rows * cols : rows;
    l.run_bytes = l.run_elements * l.size;
    l.segments = (l.run_bytes + SEGMENT - 1) / SEGMENT;
    return l;
}

// Segment `item` (of members * runs * segments) read by the `lanes` lanes of one warp.
__device__ static void scan_segment(const layout &l, u64 item, u32 lane, u32 lanes, found &f) {
    const u64 run_item = item / l.segments, segment = item - run_item * l.segments;
    const u64 member = run_item / l.runs, run = run_item - member * l.runs;
    const unsigned char *member_base = l.array ? (const unsigned char *)((const u64 *)l.data)[member]
                                               : (const unsigned char *)l.data + (long long)member * l.stride * (long long)l.size;
    // The run's stored index of its first element: a contiguous matrix is one run from 0.
    const u64 run_index = run * l.ld;
    const u64 from = segment * SEGMENT, to = from + SEGMENT < l.run_bytes ? from + SEGMENT : l.run_bytes;
    const unsigned char *p = member_base + run_index * l.size + from;
    const u64 key_base = member << 40 | (run_index + from / l.size);
    const u64 bytes = to - from;
    // Bytes before the first 16-byte boundary, and the whole chunks after it. An element that
    // would straddle the boundary (a pointer not aligned to its element) makes all of it head.
    u64 head = (16 - ((u64)p & 15)) & 15;
    if (head > bytes || ((u64)p % l.size) != 0) head = bytes;
    const u64 chunks = (bytes - head) / 16, tail = head + chunks * 16;
    for (u64 e = lane; e * l.size < head; e += lanes) note(f, classify(p + e * l.size, l.kind), key_base + e);
    for (u64 e = tail / l.size + lane; e * l.size < bytes; e += lanes) note(f, classify(p + e * l.size, l.kind), key_base + e);
    const uint4 *body = (const uint4 *)(p + head);
    const packed_test t = packed_test_of(l.kind);
    for (u64 c0 = lane; c0 < chunks; c0 += (u64)lanes * UNROLL) {
        uint4 v[UNROLL];
        UNROLLED
        for (int u = 0; u < UNROLL; u++) {
            const u64 c = c0 + (u64)u * lanes;
            v[u] = c < chunks ? body[c] : make_uint4(0, 0, 0, 0);
        }
        u32 hits = 0;
        UNROLLED
        for (int u = 0; u < UNROLL; u++) hits |= (flagged(v[u], t) != 0) << u;
        // Rare: a chunk holds a NaN/Inf. Its elements, from the loaded bytes, out of line so
        // the unrolled loads above stay small.
        for (int u = 0; hits; u++, hits >>= 1) {
            if (hits & 1) classify_chunk(v[u], l.kind, l.size, key_base + (head + (c0 + (u64)u * lanes) * 16) / l.size, f);
        }
    }
}

// This thread's warp scans its share of the job's segments, warps stepping by the grid.
__device__ static found scan_job(const layout &l, u64 warp, u64 warps, u32 lane, u32 lanes) {
    found f = {0, 0, ~0ull};
    if (l.rows == 0 || l.cols == 0 || l.members == 0) return f;
    const u64 items = l.members * l.runs * l.segments;
    for (u64 item = warp; item < items; item += warps) scan_segment(l, item, lane, lanes, f);
    return f;
}

// Lanes per warp: 32, or one when a block is not made of whole warps (every thread its own).
__device__ static u32 lanes_of_block() { return blockDim.x % WARP == 0 ? WARP : 1; }

// One matrix. `out` (device memory, three u64, set by the caller to 0, 0, all ones) receives
// the NaN count, the Inf count and the lowest stored index (col * ld + row) of a NaN/Inf.
extern "C" __global__ void cublasguard_nonfinite(u64 data, u64 rows, u64 cols, u64 ld, u32 kind, u64 out) {
    const u32 lanes = lanes_of_block();
    const u64 thread = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const layout l = layout_of(data, rows, cols, ld, 1, 0, kind, 0);
    const found f = scan_job(l, thread / lanes, (u64)gridDim.x * blockDim.x / lanes, (u32)(thread % lanes), lanes);
    // Only a thread that found something touches the result: the common, finite case costs
    // no atomic at all, and with NaN everywhere there are as many atomics as threads, which
    // the grid bounds (not one per element).
    u64 *result = (u64 *)out;
    if (f.nan) atomicAdd(&result[0], f.nan);
    if (f.inf) atomicAdd(&result[1], f.inf);
    if (f.first != ~0ull) atomicMin(&result[2], f.first);
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
    const u32 lanes = lanes_of_block();
    const u64 thread = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const layout l = layout_of(job.data, job.rows, job.cols, job.ld, job.members, job.stride, job.kind, job.array);
    const found f = scan_job(l, thread / lanes, (u64)gridDim.x * blockDim.x / lanes, (u32)(thread % lanes), lanes);
    u64 *result = (u64 *)out + 3 * blockIdx.y;
    if (f.nan) atomicAdd(&result[0], f.nan);
    if (f.inf) atomicAdd(&result[1], f.inf);
    if (f.first != ~0ull) atomicMax(&result[2], ~f.first);
}
