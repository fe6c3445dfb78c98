/* Times `calls` cublasSgemm_v2 calls of size m x n x k on the stand-in stack and prints the
 * mean nanoseconds per call: gemm_loop M N K CALLS [FORM]. The same binary runs bare and
 * guarded. FORM: sgemm (the default), gemm_ex (cublasGemmEx, f32 with CUBLAS_COMPUTE_32F),
 * strided_ex (cublasGemmStridedBatchedEx, one member), strided (cublasSgemmStridedBatched) or
 * lt (cublasLtMatmul, f32, its descriptors made once, D in place of C) or lt_percall (the same,
 * its descriptor and three layouts made, two attributes set and all destroyed around every
 * matmul, as PyTorch's gemm_and_bias does).
 * GEMM_LOOP_DRIVER_THREAD=1 starts an idle thread first, as NVIDIA's driver does at cuInit:
 * the stand-in starts none under CUDASHIM_SYNC=1, and glibc's mutexes take a shorter path in a
 * process of one thread, which a guard's own thread would otherwise be charged for. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* The cublasLt form's handle and descriptors, made once (as PyTorch caches them). */
static cublasLtHandle_t lt;
static cublasLtMatmulDesc_t lt_desc;
static cublasLtMatrixLayout_t lt_a, lt_b, lt_c;

static int lt_setup(int m, int n, int k) {
    return cublasLtCreate(&lt) || cublasLtMatmulDescCreate(&lt_desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) ||
           cublasLtMatrixLayoutCreate(&lt_a, CUDA_R_32F, m, k, m) || cublasLtMatrixLayoutCreate(&lt_b, CUDA_R_32F, k, n, k) ||
           cublasLtMatrixLayoutCreate(&lt_c, CUDA_R_32F, m, n, m);
}

static int gemm(cublasHandle_t h, int which, int m, int n, int k, const void *a, const void *b, void *c) {
    static const float one = 1, zero = 0;
    long long sa = (long long)m * k, sb = (long long)k * n, sc = (long long)m * n;
    switch (which) {
    case 1:
        return cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a, CUDA_R_32F, m, b, CUDA_R_32F, k, &zero, c, CUDA_R_32F, m,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    case 2:
        return cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a, CUDA_R_32F, m, sa, b, CUDA_R_32F, k, sb, &zero, c,
                                          CUDA_R_32F, m, sc, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    case 3:
        return cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a, m, sa, b, k, sb, &zero, c, m, sc, 1);
    case 4:
        return cublasLtMatmul(lt, lt_desc, &one, a, lt_a, b, lt_b, &zero, c, lt_c, c, lt_c, NULL, NULL, 0, 0);
    case 5: {
        cublasLtMatmulDesc_t desc;
        cublasLtMatrixLayout_t la, lb, lc;
        int32_t op = CUBLAS_OP_N;
        if (cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) ||
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op, sizeof op) ||
            cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op, sizeof op) ||
            cublasLtMatrixLayoutCreate(&la, CUDA_R_32F, m, k, m) || cublasLtMatrixLayoutCreate(&lb, CUDA_R_32F, k, n, k) ||
            cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, m, n, m))
            return 7;
        int st = cublasLtMatmul(lt, desc, &one, a, la, b, lb, &zero, c, lc, c, lc, NULL, NULL, 0, 0);
        cublasLtMatrixLayoutDestroy(la);
        cublasLtMatrixLayoutDestroy(lb);
        cublasLtMatrixLayoutDestroy(lc);
        cublasLtMatmulDescDestroy(desc);
        return st;
    }
    default:
        return cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, a, m, b, k, &zero, c, m);
    }
}

static void *idle(void *unused) {
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static pthread_cond_t never = PTHREAD_COND_INITIALIZER;
    pthread_mutex_lock(&lock);
    for (;;) pthread_cond_wait(&never, &lock);
    return unused;
}

int main(int argc, char **argv) {
    if (argc < 5) return 2;
    const char *driver_thread = getenv("GEMM_LOOP_DRIVER_THREAD");
    pthread_t t;
    if (driver_thread && !strcmp(driver_thread, "1") && pthread_create(&t, NULL, idle, NULL) != 0) return 5;
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
    const char *form = argc > 5 ? argv[5] : "sgemm";
    int which = !strcmp(form, "gemm_ex") ? 1 : !strcmp(form, "strided_ex") ? 2 : !strcmp(form, "strided") ? 3 : !strcmp(form, "lt") ? 4 : !strcmp(form, "lt_percall") ? 5 : 0;
    if (which >= 4 && lt_setup(m, n, k)) return 6;
    for (int i = 0; i < calls / 10 + 1; i++) /* warm up */
        if (gemm(h, which, m, n, k, a, b, c) != CUBLAS_STATUS_SUCCESS) return 4;
    double start = now();
    for (int i = 0; i < calls; i++) gemm(h, which, m, n, k, a, b, c);
    printf("%.1f\n", (now() - start) / calls);
    return 0;
}
