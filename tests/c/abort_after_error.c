/* A program that checks its own unhooked calls' statuses and dies at the first error, as a
 * CUDA_CHECK macro does (issue 43, point 1): three GEMMs (CUDASHIM_ASYNC_FAULT=3 makes the
 * third one's kernel fault when it runs), then cudaMemcpyAsync and cudaStreamQuery (neither a
 * synchronisation, neither hooked) until one reports the error, then abort() (or exit(1), or
 * a null write: argv[1]). With "create", the program instead creates a second cuBLAS handle
 * once the context is lost, and exits 2 when that fails, as a program that sets up another
 * library after the fault does; with "cudnn", it creates a cuDNN handle (libcudnn.so.9 loaded
 * then), with "malloc" it allocates more device memory, with "cumalloc" it does so through
 * the driver (cuMemAlloc_v2), with "instantiate" it instantiates a graph and leaves with
 * _exit. With "hostb" or "freedb" the GEMM is cublasGemmEx with a host B, or
 * cublasGemmBatchedEx with a freed B[1], and the program aborts at the error. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#define CUDA_CHECK(call, how)                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "CUDA error %d at %s:%d\n", (int)e_, __FILE__, __LINE__);            \
            die(how);                                                                              \
        }                                                                                          \
    } while (0)

static void die(const char *how) {
    if (!strcmp(how, "exit")) exit(1);
    if (!strcmp(how, "segv")) *(volatile int *)(size_t)8 = 1;
    abort();
}

int main(int argc, char **argv) {
    const char *how = argc > 1 ? argv[1] : "abort";
    cublasHandle_t handle;
    if (cublasCreate(&handle)) return 4;
    enum { N = 4 };
    float h[N * N];
    for (int i = 0; i < N * N; i++) h[i] = 1.0f;
    float *a = NULL, *c = NULL;
    if (cudaMalloc((void **)&a, sizeof h) || cudaMalloc((void **)&c, sizeof h)) return 4;
    cudaMemcpy(a, h, sizeof h, cudaMemcpyHostToDevice);
    const float one = 1.0f, zero = 0.0f;
    if (!strcmp(how, "hostb") || !strcmp(how, "freedb")) {
        /* As NVIDIA's CUDALibrarySamples go wrong: GemmEx handed a host vector as B, or
         * GemmBatchedEx a B[1] that was freed; the kernel faults, the next checked copy aborts. */
        if (!strcmp(how, "hostb")) {
            cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, a, CUDA_R_32F, N, h, CUDA_R_32F, N, &zero, c, CUDA_R_32F, N,
                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        } else {
            float *b0 = NULL, *b1 = NULL, *c1 = NULL;
            void **arrays = NULL;
            if (cudaMalloc((void **)&b0, sizeof h) || cudaMalloc((void **)&b1, sizeof h) || cudaMalloc((void **)&c1, sizeof h) ||
                cudaMalloc((void **)&arrays, 6 * sizeof(void *)))
                return 4;
            cudaMemcpy(b0, h, sizeof h, cudaMemcpyHostToDevice);
            cudaFree(b1);
            void *host_arrays[6] = {a, a, b0, b1, c, c1};
            cudaMemcpy(arrays, host_arrays, sizeof host_arrays, cudaMemcpyHostToDevice);
            cublasGemmBatchedEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, (const void *const *)arrays, CUDA_R_32F, N,
                                (const void *const *)(arrays + 2), CUDA_R_32F, N, &zero, arrays + 4, CUDA_R_32F, N, 2,
                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        }
        how = "abort";
    } else {
        for (int i = 0; i < 3; i++) cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, a, N, a, N, &zero, c, N);
    }
    if (strcmp(how, "abort") && strcmp(how, "exit") && strcmp(how, "segv")) {
        cudaError_t e = cudaSuccess;
        for (int tries = 0; tries < 40000 && e == cudaSuccess; tries++) { /* up to 40 s: a loaded machine */
            usleep(1000);
            /* Work still running is no error: only a query's error, or the last error, ends it. */
            cudaError_t q = cudaStreamQuery(0);
            if (q == cudaErrorNotReady) continue;
            e = q != cudaSuccess ? q : cudaPeekAtLastError();
        }
        if (!strcmp(how, "cudnn")) {
            /* Loaded as frameworks load it, after the fault. */
            void *lib = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
            int (*create)(void **) = lib ? (int (*)(void **))dlsym(lib, "cudnnCreate") : NULL;
            void *dnn = NULL;
            int st = create ? create(&dnn) : -1;
            printf("cudnnCreate=%d\n", st);
            return st ? 2 : 0;
        }
        if (!strcmp(how, "instantiate")) {
            /* A hooked call whose failure the guard has no story of its own for, then an exit
             * that runs no exit handler: only what the guard wrote by then is left. */
            cudaGraphExec_t exec;
            cudaError_t st = cudaGraphInstantiate(&exec, (cudaGraph_t)(size_t)1, 0);
            printf("cudaGraphInstantiate=%d\n", (int)st);
            fflush(stdout);
            _exit(st ? 2 : 0);
        }
        if (!strcmp(how, "cumalloc")) {
            void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
            int (*alloc)(unsigned long long *, size_t) = driver ? (int (*)(unsigned long long *, size_t))dlsym(driver, "cuMemAlloc_v2") : NULL;
            unsigned long long more = 0;
            int st = alloc ? alloc(&more, 1 << 20) : -1;
            printf("cuMemAlloc_v2=%d\n", st);
            return st ? 2 : 0;
        }
        if (!strcmp(how, "malloc")) {
            void *more = NULL;
            cudaError_t st = cudaMalloc(&more, 1 << 20);
            printf("cudaMalloc=%d\n", (int)st);
            return st ? 2 : 0;
        }
        cublasHandle_t second;
        int st = cublasCreate(&second);
        printf("cublasCreate=%d\n", st);
        return st ? 2 : 0;
    }
    for (int tries = 0; tries < 40000; tries++) { /* up to 40 s: a loaded machine */
        CUDA_CHECK(cudaMemcpyAsync(h, c, sizeof h, cudaMemcpyDeviceToHost, 0), how);
        /* A query, as a training loop polls its stream: work still running is no error. */
        cudaError_t q = cudaStreamQuery(0);
        CUDA_CHECK(q == cudaErrorNotReady ? cudaSuccess : q, how);
        usleep(1000);
    }
    return 0;
}
