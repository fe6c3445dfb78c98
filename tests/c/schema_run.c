/* One run with two endings, for comparing the trace a crash writes with the one an exit writes
 * (issue 27): guarded calls of every kind the summary counts, then
 *   exit    return 0
 *   segv    a wild store (the crash writer writes the trace)
 * Meant to run with CUBLASGUARD_SCAN_EVERY=2 (of the three clean GEMMs, two scanned, one
 * skipped), CUBLASGUARD_IGNORE=kind=invalid_argument,m=4 (the first bad GEMM ignored, the
 * second stored) and CUBLASGUARD_SYNC=launches (the faulting launch's fault made at once). The
 * faults, in order: the bad GEMM, a free of an address nothing allocated, the launch. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

static volatile int touched;
static void fill(void **args) { touched = *(int *)args[1]; }
static void gather(void **args) { (void)args; cudashim_raise_async(700); }

int main(int argc, char **argv) {
    int crash = argc > 1 && !strcmp(argv[1], "segv");
    __cudaRegisterFunction(NULL, (const char *)fill, (char *)"_Z4fillPfi", "_Z4fillPfi", -1, NULL, NULL, NULL, NULL, NULL);
    __cudaRegisterFunction(NULL, (const char *)gather, (char *)"_Z6gatherPKfPKlPfi", "_Z6gatherPKfPKlPfi", -1, NULL, NULL, NULL, NULL, NULL);
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 3;
    float host[16];
    for (int i = 0; i < 16; i++) host[i] = (float)i;
    float *a, *b, *c;
    cudaMalloc((void **)&a, sizeof host);
    cudaMalloc((void **)&b, sizeof host);
    cudaMalloc((void **)&c, sizeof host);
    cudaMemcpy(a, host, sizeof host, cudaMemcpyHostToDevice);
    cudaMemcpy(b, host, sizeof host, cudaMemcpyHostToDevice);
    const float one = 1, zero = 0;
    for (int i = 0; i < 3; i++) cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a, 4, b, 4, &zero, c, 4);
    cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a, 1, b, 4, &zero, c, 4); /* lda < m: ignored */
    cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 3, 3, 3, &one, a, 1, b, 3, &zero, c, 3); /* lda < m: stored */
    cudaFree((void *)(uintptr_t)0x1230);
    int n = 4;
    void *args[] = {&a, &n};
    /* gather(const float *, const long *, float *, int): a pointer to each of its four parameters. */
    void *gather_args[] = {&a, &a, &a, &n};
    dim3 grid = {4, 1, 1}, wide = {8, 2, 1}, block = {256, 1, 1};
    cudaLaunchKernel((const void *)fill, grid, block, args, 0, NULL);
    cudaLaunchKernel((const void *)gather, wide, block, gather_args, 128, NULL);
    printf("calls made\n");
    fflush(stdout);
    if (crash) *(volatile int *)(uintptr_t)16 = 1;
    return 0;
}
