/* A matrix multiply with a NaN planted in A, so the guard dumps its operands.
 *   dumps FORM DTYPE HOSTDIR
 *     FORM   ex (cublasGemmEx), strided (cublasGemmStridedBatchedEx, 2 members),
 *            array (cublasGemmBatchedEx, 2 members), lt (cublasLtMatmul, D in place of C)
 *     DTYPE  f64 f32 f16 bf16; e4m3 e5m2 (lt only, with C and D in f32)
 * A is 3 x 4 with lda 4 (a padding row of 99s), B 4 x 2, C 3 x 2; beta = 1, so C is read.
 * The host buffers as the program copies them to the device (every member, padding included)
 * are written to HOSTDIR/A.bin, B.bin and C.bin. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "../../shims/elements.h"

enum { M = 3, N = 2, K = 4, LDA = 4, MEMBERS = 2 };

static void save(const char *dir, const char *name, const void *p, size_t bytes) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.bin", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, bytes, f) != bytes) exit(4);
    fclose(f);
}

/* Small integers, exact in every type down to FP8. */
static double value(int i, int j, int b) { return (double)((i + 2 * j + 3 * b) % 5) - 2; }

/* A member of `rows` x `cols` with leading dimension `ld` (padding rows hold 99). */
static void fill(void *base, int type, int rows, int cols, int ld, int b) {
    for (int j = 0; j < cols; j++)
        for (int i = 0; i < ld; i++) store_element(type, base, (size_t)(j * ld + i), i < rows ? value(i, j, b) : 99);
}

static void *device_copy(const void *host, size_t bytes) {
    void *d = NULL;
    cudaMalloc(&d, bytes);
    cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice);
    return d;
}

int main(int argc, char **argv) {
    if (argc < 4) return 2;
    const char *form = argv[1], *dtype = argv[2], *dir = argv[3];
    int type = !strcmp(dtype, "f64") ? R_64F : !strcmp(dtype, "f32") ? R_32F : !strcmp(dtype, "f16") ? R_16F
             : !strcmp(dtype, "bf16") ? R_16BF : !strcmp(dtype, "e4m3") ? R_8F_E4M3 : R_8F_E5M2;
    int fp8 = type == R_8F_E4M3 || type == R_8F_E5M2;
    int c_type = fp8 ? R_32F : type;
    int compute = type == R_64F ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
    int members = !strcmp(form, "strided") || !strcmp(form, "array") ? MEMBERS : 1;
    size_t es = element_size(type), cs = element_size(c_type);
    size_t a_bytes = LDA * K * es, b_bytes = K * N * es, c_bytes = M * N * cs;
    char *a = calloc(members, a_bytes), *b = calloc(members, b_bytes), *c = calloc(members, c_bytes);
    for (int m = 0; m < members; m++) {
        fill(a + m * a_bytes, type, M, K, LDA, m);
        fill(b + m * b_bytes, type, K, N, K, m);
        fill(c + m * c_bytes, c_type, M, N, M, m);
    }
    store_element(type, a, 1 + 2 * LDA, NAN); /* A(1, 2) of member 0 */
    save(dir, "A", a, members * a_bytes);
    save(dir, "B", b, members * b_bytes);
    save(dir, "C", c, members * c_bytes);
    void *da = device_copy(a, members * a_bytes), *db = device_copy(b, members * b_bytes), *dc = device_copy(c, members * c_bytes);
    double one64 = 1;
    float one32 = 1;
    const void *one = type == R_64F ? (const void *)&one64 : (const void *)&one32;
    int st;
    if (!strcmp(form, "lt")) {
        cublasLtHandle_t lt;
        cublasLtMatmulDesc_t desc;
        cublasLtMatrixLayout_t la, lb, lc;
        cublasLtCreate(&lt);
        cublasLtMatmulDescCreate(&desc, compute, type == R_64F ? R_64F : R_32F);
        cublasLtMatrixLayoutCreate(&la, type, M, K, LDA);
        cublasLtMatrixLayoutCreate(&lb, type, K, N, K);
        cublasLtMatrixLayoutCreate(&lc, c_type, M, N, M);
        st = cublasLtMatmul(lt, desc, one, da, la, db, lb, one, dc, lc, dc, lc, NULL, NULL, 0, 0);
    } else {
        cublasHandle_t h;
        cublasCreate(&h);
        if (!strcmp(form, "ex")) {
            st = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, one, da, type, LDA, db, type, K, one, dc, c_type, M, compute, CUBLAS_GEMM_DEFAULT);
        } else if (!strcmp(form, "strided")) {
            st = cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, one, da, type, LDA, LDA * K, db, type, K, K * N, one, dc,
                                            c_type, M, M * N, MEMBERS, compute, CUBLAS_GEMM_DEFAULT);
        } else {
            const void *pa[MEMBERS], *pb[MEMBERS];
            void *pc[MEMBERS];
            for (int m = 0; m < MEMBERS; m++) {
                pa[m] = (char *)da + m * a_bytes;
                pb[m] = (char *)db + m * b_bytes;
                pc[m] = (char *)dc + m * c_bytes;
            }
            void *dpa = device_copy(pa, sizeof pa), *dpb = device_copy(pb, sizeof pb), *dpc = device_copy(pc, sizeof pc);
            st = cublasGemmBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, M, N, K, one, (const void *const *)dpa, type, LDA,
                                     (const void *const *)dpb, type, K, one, (void *const *)dpc, c_type, M, MEMBERS, compute,
                                     CUBLAS_GEMM_DEFAULT);
        }
    }
    printf("gemm=%d sync=%d\n", st, cudaDeviceSynchronize());
    return 0;
}
