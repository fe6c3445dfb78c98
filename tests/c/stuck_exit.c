/* A program that exits while a "kernel" never ends: a stream memory wait on a flag nobody
 * writes (as a collective waits for a peer that never comes), a GEMM queued behind it on the
 * same stream, then exit(3) without synchronising. Without the guard it exits 3; the guard's
 * wait at exit must be bounded (issue 46, finding 2). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

typedef int (*wait_value_fn)(void *stream, unsigned long long addr, unsigned int value, unsigned int flags);

int main(void) {
    cublasHandle_t handle;
    if (cublasCreate(&handle)) return 4;
    enum { N = 4 };
    float h[N * N];
    for (int i = 0; i < N * N; i++) h[i] = 1.0f;
    float *a = NULL, *c = NULL;
    unsigned int *flag = NULL;
    if (cudaMalloc((void **)&a, sizeof h) || cudaMalloc((void **)&c, sizeof h) || cudaMalloc((void **)&flag, 4)) return 4;
    cudaMemcpy(a, h, sizeof h, cudaMemcpyHostToDevice);
    cudaMemset(flag, 0, 4);
    const float one = 1.0f, zero = 0.0f;
    /* A first GEMM that completes, so the guard follows the stream. */
    cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, a, N, a, N, &zero, c, N);
    cudaDeviceSynchronize();
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    wait_value_fn wait_value = driver ? (wait_value_fn)dlsym(driver, "cuStreamWaitValue32_v2") : NULL;
    if (!wait_value) return 5;
    /* CU_STREAM_WAIT_VALUE_EQ (1): never met, the flag stays 0. */
    printf("wait=%d\n", wait_value(NULL, (unsigned long long)(size_t)flag, 1, 1));
    printf("sgemm=%d\n", cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, a, N, a, N, &zero, c, N));
    fflush(stdout);
    exit(3);
}
