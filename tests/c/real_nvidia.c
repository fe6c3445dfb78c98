/* Runs against NVIDIA's real libcudart, libcublas and libcublasLt (CUDA 12 or 13) on a
 * machine without a GPU: everything up to a kernel launch. Prints each status the program
 * sees, so a guarded run can be compared with an unguarded one. Compiled with the stand-in
 * headers, which declare the same C API (NVIDIA's runtime wheel lacks crt/host_defines.h, which
 * ships with nvcc), and linked to NVIDIA's libraries by soname. Also builds as a shared library
 * (REAL_NVIDIA_LIBRARY) that a program loads with dlopen(RTLD_LOCAL). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

int real_nvidia_run(void) {
    int runtime = -1, driver = -1, count = -7;
    printf("cudaRuntimeGetVersion=%d", (int)cudaRuntimeGetVersion(&runtime));
    printf(" runtime=%d\n", runtime);
    printf("cudaDriverGetVersion=%d", (int)cudaDriverGetVersion(&driver));
    printf(" driver=%d\n", driver);
    printf("cudaGetDeviceCount=%d", (int)cudaGetDeviceCount(&count));
    printf(" count=%d\n", count);
    void *p = NULL;
    printf("cudaMalloc=%d\n", (int)cudaMalloc(&p, 256));
    cublasHandle_t handle = NULL;
    printf("cublasCreate=%d\n", (int)cublasCreate(&handle));

    /* The argument table, on a NULL handle (cuBLAS checks the handle first), or with
     * REAL_NVIDIA_HANDLE set, on the handle cublasCreate gave (the stand-in can create one
     * without a GPU; NVIDIA's library cannot). */
    cublasHandle_t table_handle = getenv("REAL_NVIDIA_HANDLE") ? handle : NULL;
    float one = 1, zero = 0;
    const float *a = (const float *)0x1000, *b = (const float *)0x2000;
    float *c = (float *)0x3000;
    struct { const char *name; int transa, m, n, k, lda, ldb, ldc; const float *alpha; } table[] = {
        {"negative_m", CUBLAS_OP_N, -1, 4, 4, 4, 4, 4, &one},
        {"bad_transa", 9, 4, 4, 4, 4, 4, 4, &one},
        {"small_lda", CUBLAS_OP_N, 4, 4, 4, 1, 4, 4, &one},
        {"small_ldb", CUBLAS_OP_N, 4, 4, 4, 4, 1, 4, &one},
        {"small_ldc", CUBLAS_OP_N, 4, 4, 4, 4, 4, 1, &one},
        {"null_alpha", CUBLAS_OP_N, 4, 4, 4, 4, 4, 4, NULL},
    };
    for (unsigned i = 0; i < sizeof table / sizeof *table; i++) {
        int st = cublasSgemm(table_handle, (cublasOperation_t)table[i].transa, CUBLAS_OP_N, table[i].m, table[i].n, table[i].k,
                             table[i].alpha, a, table[i].lda, b, table[i].ldb, &zero, c, table[i].ldc);
        printf("sgemm %s=%d\n", table[i].name, st);
    }

    /* cublasLt descriptors work without a GPU: nn.Linear(8, 16) with a bias on a batch of 32,
     * as PyTorch's gemm_and_bias builds it. */
    cublasLtMatmulDesc_t desc;
    printf("cublasLtMatmulDescCreate=%d\n", (int)cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    uint32_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    const void *bias = (const void *)0x4000;
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    cublasLtMatrixLayout_t adesc, bdesc, cdesc;
    cublasLtMatrixLayoutCreate(&adesc, CUDA_R_32F, 8, 16, 8);
    cublasLtMatrixLayoutCreate(&bdesc, CUDA_R_32F, 8, 32, 8);
    cublasLtMatrixLayoutCreate(&cdesc, CUDA_R_32F, 16, 32, 16);
    int64_t batch_offset = 0;
    int32_t batch = 1;
    cublasLtMatrixLayoutSetAttribute(cdesc, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch);
    cublasLtMatrixLayoutSetAttribute(cdesc, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &batch_offset, sizeof batch_offset);
    cublasLtHandle_t lt = NULL;
    printf("cublasLtCreate=%d\n", (int)cublasLtCreate(&lt));
    printf("cublasLtMatmul=%d\n", (int)cublasLtMatmul(NULL, desc, &one, a, adesc, b, bdesc, &zero, c, cdesc, c, cdesc,
                                                      NULL, NULL, 0, NULL));
    cublasLtMatrixLayoutDestroy(adesc);
    cublasLtMatrixLayoutDestroy(bdesc);
    cublasLtMatrixLayoutDestroy(cdesc);
    cublasLtMatmulDescDestroy(desc);
    return 0;
}

#ifndef REAL_NVIDIA_LIBRARY
int main(void) { return real_nvidia_run(); }
#endif
