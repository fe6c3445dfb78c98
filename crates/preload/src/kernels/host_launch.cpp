// The host build of the kernels (nonfinite.cu), and the launcher the stand-in driver calls for
// cuLaunchKernel: every thread of a 1-D grid, block after block, with the launch's packed
// parameters. Plain C++ without the C++ runtime (no exceptions, no allocation), so the C
// stand-in links it as is.
#include "nonfinite.cu"

extern "C" {
__thread struct host_dim3 threadIdx, blockIdx, blockDim, gridDim;

// `params` as cuLaunchKernel takes them: pointers to each argument's value.
int cudashim_run_nonfinite(void **params, unsigned int grid, unsigned int block) {
    if (!params || !grid || !block) return 1;
    const u64 data = *(const u64 *)params[0], rows = *(const u64 *)params[1], cols = *(const u64 *)params[2];
    const u64 ld = *(const u64 *)params[3], out = *(const u64 *)params[5];
    const u32 kind = *(const u32 *)params[4];
    gridDim = host_dim3{grid, 1, 1};
    blockDim = host_dim3{block, 1, 1};
    for (unsigned int b = 0; b < grid; b++) {
        for (unsigned int t = 0; t < block; t++) {
            blockIdx = host_dim3{b, 0, 0};
            threadIdx = host_dim3{t, 0, 0};
            cublasguard_nonfinite(data, rows, cols, ld, kind, out);
        }
    }
    return 0;
}

// cublasguard_nonfinite_many over a 2-D grid (blocks per job x jobs).
int cudashim_run_nonfinite_many(void **params, unsigned int grid_x, unsigned int grid_y, unsigned int block) {
    if (!params || !grid_x || !grid_y || !block) return 1;
    const struct scan_jobs jobs = *(const struct scan_jobs *)params[0];
    const u64 out = *(const u64 *)params[1];
    gridDim = host_dim3{grid_x, grid_y, 1};
    blockDim = host_dim3{block, 1, 1};
    for (unsigned int y = 0; y < grid_y; y++) {
        for (unsigned int b = 0; b < grid_x; b++) {
            for (unsigned int t = 0; t < block; t++) {
                blockIdx = host_dim3{b, y, 0};
                threadIdx = host_dim3{t, 0, 0};
                cublasguard_nonfinite_many(jobs, out);
            }
        }
    }
    return 0;
}
}
