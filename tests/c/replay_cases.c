/* Faults for `cublasguard replay` to explain (run with CUBLASGUARD_DUMP set):
 *   replay_cases overflow   cublasSgemm whose exact result (1e60) does not fit in f32
 *   replay_cases fp16       cublasGemmEx with fp16 accumulation (CUBLAS_COMPUTE_16F): the
 *                           partial sum 300 * 300 overflows fp16, though the exact result is 0 */
#include <stdio.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "../../shims/elements.h"

static void *device_copy(const void *host, size_t bytes) {
    void *d = NULL;
    cudaMalloc(&d, bytes);
    cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice);
    return d;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    cublasHandle_t h;
    cublasCreate(&h);
    int st;
    if (!strcmp(argv[1], "overflow")) {
        float a[4] = {1e30f, 1, 1, 1}, b[4] = {1e30f, 1, 1, 1}, c[4] = {0}, one = 1, zero = 0;
        void *da = device_copy(a, sizeof a), *db = device_copy(b, sizeof b), *dc = device_copy(c, sizeof c);
        st = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, da, 2, db, 2, &zero, dc, 2);
    } else {
        /* A is 1 x 2 (300, 300), B is 2 x 1 (300, -300): the exact product is 0. */
        uint16_t a[2], b[2], c[1] = {0};
        double av[2] = {300, 300}, bv[2] = {300, -300};
        for (int i = 0; i < 2; i++) {
            store_element(R_16F, a, i, av[i]);
            store_element(R_16F, b, i, bv[i]);
        }
        uint16_t one, zero;
        store_element(R_16F, &one, 0, 1);
        store_element(R_16F, &zero, 0, 0);
        void *da = device_copy(a, sizeof a), *db = device_copy(b, sizeof b), *dc = device_copy(c, sizeof c);
        st = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 1, 1, 2, &one, da, CUDA_R_16F, 1, db, CUDA_R_16F, 2, &zero, dc, CUDA_R_16F, 1,
                          CUBLAS_COMPUTE_16F, CUBLAS_GEMM_DEFAULT);
    }
    printf("gemm=%d sync=%d\n", st, cudaDeviceSynchronize());
    return 0;
}
