/* The property CUBLASGUARD_SYNC=deferred rests on, checked on a real GPU (scripts/gpu-check.sh
 * builds this there with the machine's nvcc; it has no stand-in form: the stand-in's own tests
 * are tests/suite/breadcrumbs.rs).
 *   breadcrumb_check raw      a stream write of 1 after a clean kernel, an out-of-bounds kernel,
 *                             a write of 2: after the stream's synchronisation reports the fault,
 *                             the word holds 1 (the first landed, the second never did). Prints
 *                             "sync=N landed=V"; exit 0 when N != 0 and V == 1.
 *   breadcrumb_check guarded  fill, out_of_bounds, fill, then cudaDeviceSynchronize: run under the
 *                             guard (CUBLASGUARD_SYNC=deferred, CUBLASGUARD_LAUNCH_BREADCRUMBS=1),
 *                             whose trace must name out_of_bounds's launch. Prints "sync=N".
 * Build: nvcc -arch=sm_90 -cudart shared -o breadcrumb_check breadcrumb_check.cu -lcuda */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

__global__ void fill(int *p) { p[threadIdx.x] = 1; }
/* Four TiB past the allocation: an illegal address (cudaErrorIllegalAddress, 700). */
__global__ void out_of_bounds(int *p) { p[(size_t)1 << 40] = 1; }

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "raw";
    int *d = NULL;
    if (cudaMalloc((void **)&d, 1024) != cudaSuccess) return 2;
    if (!strcmp(mode, "raw")) {
        void *host = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        CUdeviceptr word = 0;
        if (host == MAP_FAILED || cuMemHostRegister(host, 4096, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP) ||
            cuMemHostGetDevicePointer(&word, host, 0))
            return 2;
        cudaStream_t s;
        cudaStreamCreate(&s);
        fill<<<1, 32, 0, s>>>(d);
        int w1 = cuStreamWriteValue64((CUstream)s, word, 1, 0);
        out_of_bounds<<<1, 1, 0, s>>>(d);
        int w2 = cuStreamWriteValue64((CUstream)s, word, 2, 0);
        int sync = cudaStreamSynchronize(s);
        unsigned long long landed = *(volatile unsigned long long *)host;
        printf("writes=%d,%d sync=%d landed=%llu\n", w1, w2, sync, landed);
        return w1 == 0 && sync != 0 && landed == 1 ? 0 : 1;
    }
    fill<<<1, 32>>>(d);
    out_of_bounds<<<1, 1>>>(d);
    fill<<<1, 32>>>(d);
    printf("sync=%d\n", (int)cudaDeviceSynchronize());
    return 0;
}
