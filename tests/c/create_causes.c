/* The causes of CUBLAS_STATUS_NOT_INITIALIZED at cublasCreate, one per argv[1]:
 *   oom         the program's own allocations take all device memory, then it creates a handle
 *   fork        CUDA starts, the process forks, the child creates a handle
 *   fork_quiet  CUDA starts, the process forks, the child makes no CUDA call
 *   lost        a kernel faults (CUDASHIM_ASYNC_FAULT=1), then a handle is created
 * Prints what the program sees, for comparison with an unguarded run. */
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

int main(int argc, char **argv) {
    const char *c = argc > 1 ? argv[1] : "oom";
    cublasHandle_t h;
    if (!strcmp(c, "oom")) {
        size_t free_bytes = 0, total = 0;
        cudaMemGetInfo(&free_bytes, &total);
        void *big;
        printf("take all=%d\n", cudaMalloc(&big, free_bytes - 4096));
        printf("cublasCreate=%d\n", cublasCreate(&h));
    } else if (!strcmp(c, "fork") || !strcmp(c, "fork_quiet")) {
        void *p;
        printf("parent malloc=%d\n", cudaMalloc(&p, 256));
        fflush(stdout);
        pid_t child = fork();
        if (child == 0) {
            if (!strcmp(c, "fork")) {
                printf("child cublasCreate=%d\n", cublasCreate(&h));
                fflush(stdout);
            }
            _exit(0);
        }
        int status = 0;
        waitpid(child, &status, 0);
        printf("child exit=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        printf("parent cublasCreate=%d\n", cublasCreate(&h));
    } else if (!strcmp(c, "lost")) {
        printf("cublasCreate=%d\n", cublasCreate(&h));
        float *a;
        float host[4] = {1, 2, 3, 4};
        cudaMalloc((void **)&a, 64);
        cudaMemcpy(a, host, sizeof host, cudaMemcpyHostToDevice);
        const float one = 1, zero = 0;
        printf("sgemm=%d\n", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a, 2, a, 2, &zero, a + 8, 2));
        printf("sync=%d\n", cudaDeviceSynchronize());
        cublasHandle_t again;
        printf("cublasCreate again=%d\n", cublasCreate(&again));
    }
    return 0;
}
