/* Times `calls` cublasSgemm_v2 calls of size m x n x k on the stand-in stack and prints the
 * mean nanoseconds per call: gemm_loop M N K CALLS. The same binary runs bare and guarded. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc < 5) return 2;
    int m = atoi(argv[1]), n = atoi(argv[2]), k = atoi(argv[3]), calls = atoi(argv[4]);
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 3;
    size_t biggest = (size_t)(m > n ? m : n) * (size_t)(k > n ? k : n);
    float *host = malloc(biggest * sizeof(float));
    for (size_t i = 0; i < biggest; i++) host[i] = (float)(i % 7) * 0.25f;
    void *a, *b, *c;
    cudaMalloc(&a, (size_t)m * k * sizeof(float));
    cudaMalloc(&b, (size_t)k * n * sizeof(float));
    cudaMalloc(&c, (size_t)m * n * sizeof(float));
    cudaMemcpy(a, host, (size_t)m * k * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(b, host, (size_t)k * n * sizeof(float), cudaMemcpyHostToDevice);
    const float one = 1, zero = 0;
    for (int i = 0; i < calls / 10 + 1; i++) /* warm up */
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a, m, b, k, &zero, c, m);
    double start = now();
    for (int i = 0; i < calls; i++)
        cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a, m, b, k, &zero, c, m);
    printf("%.1f\n", (now() - start) / calls);
    return 0;
}
