/* A native library a Python program calls: it makes a GEMM with NaN in A on a thread of its own
 * (named "native-worker"), which runs no Python code, as PyTorch's autograd threads do not. */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

static void *work(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "native-worker");
    cublasHandle_t h;
    if (cublasCreate(&h)) return (void *)1;
    float host[4] = {NAN, 1, 1, 1};
    float *a;
    cudaMalloc((void **)&a, 64);
    cudaMemcpy(a, host, sizeof host, cudaMemcpyHostToDevice);
    const float one = 1, zero = 0;
    long st = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a, 2, a, 2, &zero, a + 8, 2);
    return (void *)st;
}

int nan_gemm_on_a_native_thread(void) {
    pthread_t t;
    void *status;
    pthread_create(&t, NULL, work, NULL);
    pthread_join(t, &status);
    return (int)(long)status;
}
