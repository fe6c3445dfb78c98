/* Threads calling cuBLAS at once: each thread has its own handle and buffers and runs
 * `calls` GEMMs, every `every`-th with a leading dimension that is too small. Prints the
 * number of calls made and of bad ones, for the test to compare with the trace. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

static int calls = 2000, every = 100;

static void *worker(void *arg) {
    (void)arg;
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return (void *)1;
    float host[16];
    for (int i = 0; i < 16; i++) host[i] = (float)i;
    void *a, *b, *c;
    cudaMalloc(&a, sizeof host);
    cudaMalloc(&b, sizeof host);
    cudaMalloc(&c, sizeof host);
    cudaMemcpy(a, host, sizeof host, cudaMemcpyHostToDevice);
    cudaMemcpy(b, host, sizeof host, cudaMemcpyHostToDevice);
    const float one = 1, zero = 0;
    long bad = 0;
    for (int i = 1; i <= calls; i++) {
        int lda = (i % every == 0) ? 1 : 4;
        int st = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a, lda, b, 4, &zero, c, 4);
        if (st != CUBLAS_STATUS_SUCCESS) bad++;
    }
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    cublasDestroy(h);
    return (void *)bad;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 8;
    if (argc > 2) calls = atoi(argv[2]);
    if (argc > 3) every = atoi(argv[3]);
    pthread_t t[64];
    long bad = 0;
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < threads; i++) {
        void *r;
        pthread_join(t[i], &r);
        bad += (long)r;
    }
    printf("calls=%d bad=%ld\n", threads * calls, bad);
    return 0;
}
