/* nn.Linear(in_features=8, out_features=16) with bias on a batch of 32, issued through
 * cublasLt exactly as PyTorch's gemm_and_bias does: a matmul descriptor (compute 32F, scale
 * 32F) with TRANSA = T on the weight, TRANSB = N on the input, the BIAS epilogue and its
 * pointer; layouts for A (k x m), B (k x n), C = D (m x n); a preference with a workspace
 * limit; the heuristic's algorithm; D written in place of C.
 *   lt_linear CASE [f32|bf16]
 *     clean | nan_input | nan_bias | width (the input has 12 features, not 8) | bias_short
 *     (the bias holds 8 values, not 16) | workspace_short | overflow | double_destroy
 *     | c_null (C = NULL with beta = 0, as nvmath passes it) | c_null_beta (C = NULL with
 *     beta = 1) | c_null_d_short (that, and D's allocation 16 elements short)
 * With LT_LINEAR_WARM=1 a clean matmul of its own (own buffers and descriptors, destroyed
 * after) comes first and the case's matmul is made twice: the guard's lean path takes a
 * matmul only once the session's first went the whole way, and the second finds its
 * descriptors remembered. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "elements.h"

enum { IN = 8, OUT = 16, BATCH = 32 };

static void *upload(const void *host, size_t bytes) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) exit(3);
    if (host) cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice);
    return p;
}

#define CHECK(call)                                                    \
    do {                                                               \
        cublasStatus_t st_ = (call);                                   \
        if (st_ != CUBLAS_STATUS_SUCCESS) {                            \
            printf("%s failed: %d\n", #call, st_);                     \
            return 1;                                                  \
        }                                                              \
    } while (0)

/* A clean f32 matmul of D = W^T X on buffers and descriptors of its own, all freed after. */
static int warm_up(cublasLtHandle_t lt) {
    static float w[OUT * IN], x[BATCH * IN];
    for (int i = 0; i < OUT * IN; i++) w[i] = 0.25f;
    for (int i = 0; i < BATCH * IN; i++) x[i] = 0.5f;
    void *dw = upload(w, sizeof w), *dx = upload(x, sizeof x), *dd = upload(NULL, OUT * BATCH * sizeof(float));
    cublasLtMatmulDesc_t desc;
    CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    int32_t ta = CUBLAS_OP_T;
    CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    cublasLtMatrixLayout_t adesc, bdesc, cdesc;
    CHECK(cublasLtMatrixLayoutCreate(&adesc, CUDA_R_32F, IN, OUT, IN));
    CHECK(cublasLtMatrixLayoutCreate(&bdesc, CUDA_R_32F, IN, BATCH, IN));
    CHECK(cublasLtMatrixLayoutCreate(&cdesc, CUDA_R_32F, OUT, BATCH, OUT));
    float alpha = 1, beta = 0;
    cublasStatus_t st = cublasLtMatmul(lt, desc, &alpha, dw, adesc, dx, bdesc, &beta, dd, cdesc, dd, cdesc, NULL, NULL, 0, NULL);
    printf("warm matmul=%d\n", st);
    cublasLtMatrixLayoutDestroy(adesc);
    cublasLtMatrixLayoutDestroy(bdesc);
    cublasLtMatrixLayoutDestroy(cdesc);
    cublasLtMatmulDescDestroy(desc);
    cudaFree(dw);
    cudaFree(dx);
    cudaFree(dd);
    return 0;
}

int main(int argc, char **argv) {
    const char *c = argc > 1 ? argv[1] : "clean";
    int type = (argc > 2 && !strcmp(argv[2], "bf16")) ? R_16BF : R_32F;
    size_t es = element_size(type);
    int in = !strcmp(c, "width") ? 12 : IN; /* the input's real feature width */
    cublasLtHandle_t lt;
    CHECK(cublasLtCreate(&lt));
    const char *warm = getenv("LT_LINEAR_WARM");
    int repeat = warm && !strcmp(warm, "1");
    if (repeat && warm_up(lt)) return 1;
    static unsigned char w[OUT * IN * 4], x[BATCH * 12 * 4], bias[OUT * 4], d[OUT * BATCH * 4];
    for (int i = 0; i < OUT * IN; i++) store_element(type, w, i, ((i * 7) % 11 - 5) * 0.1);
    for (int i = 0; i < BATCH * in; i++) store_element(type, x, i, ((i * 3) % 13 - 6) * 0.25);
    for (int i = 0; i < OUT; i++) store_element(type, bias, i, i * 0.5);
    if (!strcmp(c, "nan_input")) store_element(type, x, 3 * in + 2, NAN); /* sample 3, feature 2 */
    if (!strcmp(c, "nan_bias")) store_element(type, bias, 5, NAN);
    if (!strcmp(c, "overflow")) {
        for (int i = 0; i < BATCH * in; i++) store_element(type, x, i, 3e38);
        for (int i = 0; i < OUT * IN; i++) store_element(type, w, i, 3e38);
    }
    void *dw = upload(w, OUT * IN * es), *dx = upload(x, BATCH * in * es), *dd = upload(NULL, (OUT * BATCH - (!strcmp(c, "c_null_d_short") ? 16 : 0)) * es);
    void *dbias = upload(bias, (!strcmp(c, "bias_short") ? 8 : OUT) * es);
    size_t workspace_size = 1 << 20;
    void *workspace = upload(NULL, !strcmp(c, "workspace_short") ? 1024 : workspace_size);

    cublasLtMatmulDesc_t desc;
    CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    uint32_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
    CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias, sizeof dbias));
    /* m = out_features, n = batch, k = in_features; the input layout is what the program
     * says it is (12 features in the `width` case), the weight's is the layer's. */
    cublasLtMatrixLayout_t adesc, bdesc, cdesc;
    CHECK(cublasLtMatrixLayoutCreate(&adesc, type, IN, OUT, IN));
    CHECK(cublasLtMatrixLayoutCreate(&bdesc, type, in, BATCH, in));
    CHECK(cublasLtMatrixLayoutCreate(&cdesc, type, OUT, BATCH, OUT));
    cublasLtMatmulPreference_t pref;
    CHECK(cublasLtMatmulPreferenceCreate(&pref));
    uint64_t limit = workspace_size;
    CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &limit, sizeof limit));
    cublasLtMatmulHeuristicResult_t heuristic;
    int found = 0;
    cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(lt, desc, adesc, bdesc, cdesc, cdesc, pref, 1, &heuristic, &found);
    printf("heuristic=%d found=%d\n", hs, found);
    int c_null = !strncmp(c, "c_null", 6);
    float alpha = 1, beta = c_null && strcmp(c, "c_null") ? 1 : 0;
    void *dc = c_null ? NULL : dd;
    cublasStatus_t st = 0;
    for (int i = 0; i <= repeat; i++) {
        st = cublasLtMatmul(lt, desc, &alpha, dw, adesc, dx, bdesc, &beta, dc, cdesc, dd, cdesc,
                            found ? &heuristic.algo : NULL, workspace, workspace_size, NULL);
        printf("matmul=%d\n", st);
    }
    cudaError_t sync = cudaDeviceSynchronize();
    printf("sync=%d\n", sync);
    if (st == CUBLAS_STATUS_SUCCESS && sync == cudaSuccess) {
        cudaMemcpy(d, dd, OUT * BATCH * es, cudaMemcpyDeviceToHost);
        printf("D");
        for (int i = 0; i < OUT * BATCH; i += 37) printf(" %g", load_element(type, d, i));
        printf("\n");
    }
    cublasLtMatrixLayoutDestroy(adesc);
    cublasLtMatrixLayoutDestroy(bdesc);
    cublasLtMatrixLayoutDestroy(cdesc);
    cublasLtMatmulDescDestroy(desc);
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtDestroy(lt);
    if (!strcmp(c, "double_destroy")) printf("destroy again=%d\n", cublasLtDestroy(lt));
    if (!strcmp(c, "dead_wild")) {
        /* A dead handle with descriptors that were never created (and the destroyed ones):
         * cublasLt answers NOT_INITIALIZED without looking at them; so must the guard. */
        cublasStatus_t w = cublasLtMatmul(lt, (cublasLtMatmulDesc_t)(uintptr_t)0xdead0000, &alpha, dw,
                                          (cublasLtMatrixLayout_t)(uintptr_t)0xbad0000, dx, bdesc, &beta, dd,
                                          (cublasLtMatrixLayout_t)(uintptr_t)0x10, dd, cdesc, NULL, NULL, 0, NULL);
        printf("wild matmul=%d\n", w);
    }
    return 0;
}
