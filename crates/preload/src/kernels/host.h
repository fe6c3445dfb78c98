// CUDA's built-ins for the host build of the kernels in this folder (see nonfinite.cu): the
// stand-in driver runs a launch by calling the kernel once per thread of its grid, in order,
// so the atomics need no synchronisation.
#ifndef CUBLASGUARD_KERNEL_HOST_H
#define CUBLASGUARD_KERNEL_HOST_H

#define __global__
#define __device__
#define __noinline__ __attribute__((noinline))

struct host_dim3 {
    unsigned int x, y, z;
};

// CUDA's 16-byte vector: one load instruction on the GPU.
struct alignas(16) uint4 {
    unsigned int x, y, z, w;
};

static inline uint4 make_uint4(unsigned int x, unsigned int y, unsigned int z, unsigned int w) { return uint4{x, y, z, w}; }

// The launch's coordinates, set by the launcher before each call of the kernel.
extern "C" {
extern __thread struct host_dim3 threadIdx, blockIdx, blockDim, gridDim;
}

static inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
    unsigned long long old = *p;
    *p = old + v;
    return old;
}

static inline unsigned long long atomicMax(unsigned long long *p, unsigned long long v) {
    unsigned long long old = *p;
    if (v > old) *p = v;
    return old;
}

static inline unsigned long long atomicMin(unsigned long long *p, unsigned long long v) {
    unsigned long long old = *p;
    if (v < old) *p = v;
    return old;
}

#endif
