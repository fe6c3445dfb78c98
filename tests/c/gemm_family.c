/* Every hooked GEMM variant, in one case per run:  gemm_family FUNCTION CASE
 *   clean     4 x 4 matrices (3 batch members for batched forms); prints C
 *   nan       a NaN in A at (row 1, col 2) of batch member 2 (f16 or bf16 for the Ex forms)
 *   invalid   lda = 1, too small
 *   oob       B's allocation is 8 elements short of its last member
 *   types     (Ex forms) an unsupported type combination: f16 inputs with 32F_FAST_TF32
 *   c32 / c64 / ci8  (Ex forms but the pointer-array one) a complex GEMM of 2 x 2 matrices
 *             from NVIDIA's table: c32 with CUBLAS_COMPUTE_32F, c64 with CUBLAS_COMPUTE_64F,
 *             ci8 A/B with a c32 C; prints C's real and imaginary parts
 *   c32_bf16x9 / c64_fixed / r64_fixed  the same with the emulated compute types:
 *             c32 with CUBLAS_COMPUTE_32F_EMULATED_16BFX9, c64 and (the real parts alone) f64
 *             with CUBLAS_COMPUTE_64F_EMULATED_FIXEDPOINT (CUDA 13.0 update 2) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "elements.h"

enum { N = 4, BATCH = 3, ELEMS = N * N };

struct variant {
    const char *name;
    int type;     /* element type of A, B (and C for typed forms) */
    int batch;    /* 0: single, 1: strided, 2: pointer array */
    int ex;       /* cublasGemm*Ex: C is f32, compute 32F */
};

static const struct variant variants[] = {
    {"cublasSgemm_v2", R_32F, 0, 0}, {"cublasSgemm_v2_64", R_32F, 0, 0},
    {"cublasDgemm_v2", R_64F, 0, 0}, {"cublasDgemm_v2_64", R_64F, 0, 0},
    {"cublasHgemm", R_16F, 0, 0}, {"cublasHgemm_64", R_16F, 0, 0},
    {"cublasSgemmStridedBatched", R_32F, 1, 0}, {"cublasSgemmStridedBatched_64", R_32F, 1, 0},
    {"cublasDgemmStridedBatched", R_64F, 1, 0}, {"cublasDgemmStridedBatched_64", R_64F, 1, 0},
    {"cublasHgemmStridedBatched", R_16F, 1, 0}, {"cublasHgemmStridedBatched_64", R_16F, 1, 0},
    {"cublasSgemmBatched", R_32F, 2, 0}, {"cublasSgemmBatched_64", R_32F, 2, 0},
    {"cublasGemmEx", R_16BF, 0, 1}, {"cublasGemmEx_64", R_16BF, 0, 1},
    {"cublasGemmStridedBatchedEx", R_16F, 1, 1}, {"cublasGemmStridedBatchedEx_64", R_16F, 1, 1},
    {"cublasGemmBatchedEx", R_16BF, 2, 1}, {"cublasGemmBatchedEx_64", R_16BF, 2, 1},
};

static void *upload(const void *host, size_t bytes) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) exit(3);
    if (host) cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice);
    return p;
}

/* A device array of pointers to the members of a contiguous batch. */
static void *pointer_array(void *base, size_t member_bytes) {
    void *ptrs[BATCH];
    for (int b = 0; b < BATCH; b++) ptrs[b] = (char *)base + b * member_bytes;
    return upload(ptrs, sizeof ptrs);
}

/* A complex GEMM through an Ex form: A = [[1+i, 2], [0, 1-i]], B = [[1, i], [2, 1]] (each
 * member of a batch scaled by its index + 1), alpha = 1, beta = 0, printed real/imaginary. */
static int complex_case(const char *f, const char *which) {
    int real = !strcmp(which, "r64_fixed");
    int ab = real ? R_64F : !strncmp(which, "c64", 3) ? C_64F : !strcmp(which, "ci8") ? C_8I : C_32F;
    int ct = ab == C_64F || ab == R_64F ? ab : C_32F;
    int compute = !strcmp(which, "c32_bf16x9")  ? CUBLAS_COMPUTE_32F_EMULATED_16BFX9
                  : strstr(which, "_fixed")     ? CUBLAS_COMPUTE_64F_EMULATED_FIXEDPOINT
                  : ab == C_64F                 ? CUBLAS_COMPUTE_64F
                                                : CUBLAS_COMPUTE_32F;
    int parts = real ? 1 : 2; /* a real GEMM of the real parts alone */
    int batched = strstr(f, "Batched") != NULL, members = batched ? 2 : 1;
    /* column-major 2 x 2, as (re, im) pairs */
    const double a[8] = {1, 1, 0, 0, 2, 0, 1, -1}, b[8] = {1, 0, 2, 0, 0, 1, 1, 0};
    unsigned char ha[2 * 4 * 16], hb[2 * 4 * 16], hc[2 * 4 * 16];
    memset(hc, 0, sizeof hc);
    for (int m = 0; m < members; m++)
        for (int i = 0; i < 8; i += 3 - parts) {
            int j = (m * 8 + i) / (3 - parts);
            if (ab == C_64F || ab == R_64F) ((double *)ha)[j] = a[i] * (m + 1), ((double *)hb)[j] = b[i];
            else if (ab == C_32F) ((float *)ha)[j] = (float)(a[i] * (m + 1)), ((float *)hb)[j] = (float)b[i];
            else ((signed char *)ha)[j] = (signed char)(a[i] * (m + 1)), ((signed char *)hb)[j] = (signed char)b[i];
        }
    size_t ab_size = element_size(ab), c_size = element_size(ct);
    void *da = upload(ha, members * 4 * ab_size), *db = upload(hb, members * 4 * ab_size), *dc = upload(hc, members * 4 * c_size);
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 3;
    float one_f[2] = {1, 0}, zero_f[2] = {0, 0};
    double one_d[2] = {1, 0}, zero_d[2] = {0, 0};
    int doubles = ct == C_64F || ct == R_64F;
    const void *one = doubles ? (const void *)one_d : (const void *)one_f;
    const void *zero = doubles ? (const void *)zero_d : (const void *)zero_f;
    cublasOperation_t nn = CUBLAS_OP_N;
    int st;
    if (!strcmp(f, "cublasGemmEx")) st = cublasGemmEx(h, nn, nn, 2, 2, 2, one, da, ab, 2, db, ab, 2, zero, dc, ct, 2, compute, CUBLAS_GEMM_DEFAULT);
    else if (!strcmp(f, "cublasGemmEx_64")) st = cublasGemmEx_64(h, nn, nn, 2, 2, 2, one, da, ab, 2, db, ab, 2, zero, dc, ct, 2, compute, CUBLAS_GEMM_DEFAULT);
    else if (!strcmp(f, "cublasGemmStridedBatchedEx"))
        st = cublasGemmStridedBatchedEx(h, nn, nn, 2, 2, 2, one, da, ab, 2, 4, db, ab, 2, 4, zero, dc, ct, 2, 4, 2, compute, CUBLAS_GEMM_DEFAULT);
    else
        st = cublasGemmStridedBatchedEx_64(h, nn, nn, 2, 2, 2, one, da, ab, 2, 4, db, ab, 2, 4, zero, dc, ct, 2, 4, 2, compute, CUBLAS_GEMM_DEFAULT);
    printf("status=%d\n", st);
    cudaError_t sync = cudaDeviceSynchronize();
    printf("sync=%d\n", sync);
    if (sync == cudaSuccess && st == CUBLAS_STATUS_SUCCESS) {
        cudaMemcpy(hc, dc, members * 4 * c_size, cudaMemcpyDeviceToHost);
        printf("C");
        for (int i = 0; i < members * 4 * parts; i++) printf(" %g", doubles ? ((double *)hc)[i] : (double)((float *)hc)[i]);
        printf("\n");
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    const char *complex_cases[] = {"c32", "c64", "ci8", "c32_bf16x9", "c64_fixed", "r64_fixed"};
    for (size_t i = 0; i < sizeof complex_cases / sizeof *complex_cases; i++)
        if (!strcmp(argv[2], complex_cases[i])) return complex_case(argv[1], argv[2]);
    const struct variant *v = NULL;
    for (size_t i = 0; i < sizeof variants / sizeof *variants; i++)
        if (!strcmp(variants[i].name, argv[1])) v = &variants[i];
    if (!v) {
        fprintf(stderr, "unknown function %s\n", argv[1]);
        return 2;
    }
    const char *c = argv[2];
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 3;
    int members = v->batch ? BATCH : 1;
    int ab = v->type, ct = v->ex ? R_32F : v->type;
    size_t ab_size = element_size(ab), c_size = element_size(ct);
    unsigned char ha[BATCH * ELEMS * 8], hb[BATCH * ELEMS * 8], hc[BATCH * ELEMS * 8];
    for (int i = 0; i < members * ELEMS; i++) {
        store_element(ab, ha, i, (double)(i % 7) - 2.0);
        store_element(ab, hb, i, (double)(i % 5) * 0.5);
        store_element(ct, hc, i, 0.0);
    }
    if (!strcmp(c, "nan")) store_element(ab, ha, (members - 1) * ELEMS + 2 * N + 1, NAN);
    size_t b_elems = members * ELEMS - (!strcmp(c, "oob") ? 8 : 0);
    void *da = upload(ha, members * ELEMS * ab_size), *db = upload(hb, b_elems * ab_size), *dc = upload(hc, members * ELEMS * c_size);
    int64_t lda = !strcmp(c, "invalid") ? 1 : N;
    int compute = !strcmp(c, "types") ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    float one_f = 1, zero_f = 0;
    double one_d = 1, zero_d = 0;
    uint16_t one_h = float_to_half(1), zero_h = 0;
    const void *one = ab == R_64F ? (const void *)&one_d : ab == R_16F && !v->ex ? (const void *)&one_h : (const void *)&one_f;
    const void *zero = ab == R_64F ? (const void *)&zero_d : ab == R_16F && !v->ex ? (const void *)&zero_h : (const void *)&zero_f;
    long long sa = ELEMS, sb = ELEMS, sc = ELEMS;
    void *pa = NULL, *pb = NULL, *pc = NULL;
    if (v->batch == 2) {
        pa = pointer_array(da, ELEMS * ab_size);
        pb = pointer_array(db, ELEMS * ab_size);
        pc = pointer_array(dc, ELEMS * c_size);
    }
    const char *f = v->name;
    cublasOperation_t nn = CUBLAS_OP_N;
    int st;
#define IS(name) (!strcmp(f, name))
    if (IS("cublasSgemm_v2")) st = cublasSgemm_v2(h, nn, nn, N, N, N, one, da, lda, db, N, zero, dc, N);
    else if (IS("cublasSgemm_v2_64")) st = cublasSgemm_v2_64(h, nn, nn, N, N, N, one, da, lda, db, N, zero, dc, N);
    else if (IS("cublasDgemm_v2")) st = cublasDgemm_v2(h, nn, nn, N, N, N, one, da, lda, db, N, zero, dc, N);
    else if (IS("cublasDgemm_v2_64")) st = cublasDgemm_v2_64(h, nn, nn, N, N, N, one, da, lda, db, N, zero, dc, N);
    else if (IS("cublasHgemm")) st = cublasHgemm(h, nn, nn, N, N, N, one, da, lda, db, N, zero, dc, N);
    else if (IS("cublasHgemm_64")) st = cublasHgemm_64(h, nn, nn, N, N, N, one, da, lda, db, N, zero, dc, N);
    else if (IS("cublasSgemmStridedBatched")) st = cublasSgemmStridedBatched(h, nn, nn, N, N, N, one, da, lda, sa, db, N, sb, zero, dc, N, sc, BATCH);
    else if (IS("cublasSgemmStridedBatched_64")) st = cublasSgemmStridedBatched_64(h, nn, nn, N, N, N, one, da, lda, sa, db, N, sb, zero, dc, N, sc, BATCH);
    else if (IS("cublasDgemmStridedBatched")) st = cublasDgemmStridedBatched(h, nn, nn, N, N, N, one, da, lda, sa, db, N, sb, zero, dc, N, sc, BATCH);
    else if (IS("cublasDgemmStridedBatched_64")) st = cublasDgemmStridedBatched_64(h, nn, nn, N, N, N, one, da, lda, sa, db, N, sb, zero, dc, N, sc, BATCH);
    else if (IS("cublasHgemmStridedBatched")) st = cublasHgemmStridedBatched(h, nn, nn, N, N, N, one, da, lda, sa, db, N, sb, zero, dc, N, sc, BATCH);
    else if (IS("cublasHgemmStridedBatched_64")) st = cublasHgemmStridedBatched_64(h, nn, nn, N, N, N, one, da, lda, sa, db, N, sb, zero, dc, N, sc, BATCH);
    else if (IS("cublasSgemmBatched")) st = cublasSgemmBatched(h, nn, nn, N, N, N, one, pa, lda, pb, N, zero, pc, N, BATCH);
    else if (IS("cublasSgemmBatched_64")) st = cublasSgemmBatched_64(h, nn, nn, N, N, N, one, pa, lda, pb, N, zero, pc, N, BATCH);
    else if (IS("cublasGemmEx")) st = cublasGemmEx(h, nn, nn, N, N, N, one, da, ab, lda, db, ab, N, zero, dc, ct, N, compute, CUBLAS_GEMM_DEFAULT);
    else if (IS("cublasGemmEx_64")) st = cublasGemmEx_64(h, nn, nn, N, N, N, one, da, ab, lda, db, ab, N, zero, dc, ct, N, compute, CUBLAS_GEMM_DEFAULT);
    else if (IS("cublasGemmStridedBatchedEx")) st = cublasGemmStridedBatchedEx(h, nn, nn, N, N, N, one, da, ab, lda, sa, db, ab, N, sb, zero, dc, ct, N, sc, BATCH, compute, CUBLAS_GEMM_DEFAULT);
    else if (IS("cublasGemmStridedBatchedEx_64")) st = cublasGemmStridedBatchedEx_64(h, nn, nn, N, N, N, one, da, ab, lda, sa, db, ab, N, sb, zero, dc, ct, N, sc, BATCH, compute, CUBLAS_GEMM_DEFAULT);
    else if (IS("cublasGemmBatchedEx")) st = cublasGemmBatchedEx(h, nn, nn, N, N, N, one, pa, ab, lda, pb, ab, N, zero, pc, ct, N, BATCH, compute, CUBLAS_GEMM_DEFAULT);
    else st = cublasGemmBatchedEx_64(h, nn, nn, N, N, N, one, pa, ab, lda, pb, ab, N, zero, pc, ct, N, BATCH, compute, CUBLAS_GEMM_DEFAULT);
    printf("status=%d\n", st);
    cudaError_t sync = cudaDeviceSynchronize();
    printf("sync=%d\n", sync);
    if (sync == cudaSuccess && st == CUBLAS_STATUS_SUCCESS) {
        cudaMemcpy(hc, dc, members * ELEMS * c_size, cudaMemcpyDeviceToHost);
        printf("C");
        for (int i = 0; i < members * ELEMS; i++) printf(" %g", load_element(ct, hc, i));
        printf("\n");
    }
    return 0;
}
