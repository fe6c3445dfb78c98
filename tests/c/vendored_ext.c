/* An extension module as a wheel ships it: linked against a vendored, renamed cuBLAS
 * (libcublas-5e3a1f0c.so.12, as auditwheel names the copies it bundles), and loaded by the
 * program with RTLD_LOCAL. Makes one clean 2 x 2 GEMM and reports what cuBLAS returned. */
#include <stdio.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

int ext_gemm(float *out) {
    cublasHandle_t h;
    int st = cublasCreate(&h);
    if (st) return 100 + st;
    float host[4] = {1, 2, 3, 4};
    float *a, *c;
    cudaMalloc((void **)&a, sizeof host);
    cudaMalloc((void **)&c, sizeof host);
    cudaMemcpy(a, host, sizeof host, cudaMemcpyHostToDevice);
    const float one = 1, zero = 0;
    st = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a, 2, a, 2, &zero, c, 2);
    cudaMemcpy(out, c, sizeof host, cudaMemcpyDeviceToHost);
    cublasDestroy(h);
    return st;
}
