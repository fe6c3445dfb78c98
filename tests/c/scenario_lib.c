/* A library that uses cuBLAS, loaded by the scenario program with dlopen(RTLD_LOCAL), as
 * Python loads extension modules. Its cuBLAS and CUDA runtime are linked by soname. */
#include <math.h>
#include <stdio.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

int scenario_lib_run(void) {
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return -1;
    float a[4] = {1, 2, 3, NAN}, b[4] = {1, 0, 0, 1}, c[4] = {0};
    void *da, *db, *dc;
    cudaMalloc(&da, sizeof a);
    cudaMalloc(&db, sizeof b);
    cudaMalloc(&dc, sizeof c);
    cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice);
    cudaMemcpy(db, b, sizeof b, cudaMemcpyHostToDevice);
    const float one = 1, zero = 0;
    int st = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, da, 2, db, 2, &zero, dc, 2);
    cudaMemcpy(c, dc, sizeof c, cudaMemcpyDeviceToHost);
    printf("lib sgemm=%d c=%g %g %g %g\n", st, c[0], c[1], c[2], c[3]);
    cublasDestroy(h);
    return st;
}
