/* Stand-in cuBLAS beyond GEMM: the functions PyTorch's CUDA library imports besides the GEMM
 * family (matrix-vector and dot products, complex GEMMs, triangular solves, and the batched
 * LU, QR and least-squares kernels), computed on the CPU with NVIDIA's documented argument
 * rules. Linked into the same libcublas.so as cublas.c.
 *
 * As there, the "kernel" part reports problems asynchronously: an operand outside every live
 * allocation is not touched, the call returns SUCCESS, and cudaErrorIllegalAddress breaks the
 * context (under CUDASHIM_SYNC=1: from the next synchronisation on). One macro per family serves the four types (S, D, C, Z); C99
 * complex arithmetic does the complex ones, through cuComplex's identical layout. */
#include <complex.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "elements.h"
#include "include/cublas_v2.h"

int cudashim_inject(const char *function);
int cudashim_sticky_error(void);
int cudashim_is_device_range(const void *ptr, size_t bytes);
int cudashim_next_launch_faults(void);
void cudashim_raise_async(int code);
__attribute__((visibility("hidden"))) int cublasshim_pointer_mode(cublasHandle_t handle);
__attribute__((visibility("hidden"))) int cublasshim_workspace_ok(cublasHandle_t handle);
__attribute__((visibility("hidden"))) cudaStream_t cublasshim_stream(cublasHandle_t handle);
void cudashim_drain(cudaStream_t stream);

typedef float _Complex c32;
typedef double _Complex c64;

/* Per-type arithmetic the generic code needs: conjugate, squared magnitude, parts. */
#define TRAITS(S, T, R, CONJ, ABS2, RE, IM)                  \
    static inline T conj_##S(T x) { return CONJ; }         \
    static inline R abs2_##S(T x) { return ABS2; }         \
    static inline R re_##S(T x) { return RE; }             \
    static inline R im_##S(T x) { return IM; }
TRAITS(s, float, float, x, x * x, x, ((void)x, 0))
TRAITS(d, double, double, x, x * x, x, ((void)x, 0))
TRAITS(c, c32, float, conjf(x), crealf(x) * crealf(x) + cimagf(x) * cimagf(x), crealf(x), cimagf(x))
TRAITS(z, c64, double, conj(x), creal(x) * creal(x) + cimag(x) * cimag(x), creal(x), cimag(x))

static int valid_op(int op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; }
static int max1(int v) { return v > 1 ? v : 1; }

static int reach(const void *p, size_t bytes) { return bytes == 0 || cudashim_is_device_range(p, bytes); }

static size_t matrix_bytes(int rows, int cols, int ld, size_t elem) {
    if (rows <= 0 || cols <= 0) return 0;
    return ((size_t)ld * (size_t)(cols - 1) + (size_t)rows) * elem;
}

static size_t vector_bytes(int n, int inc, size_t elem) {
    if (n <= 0) return 0;
    if (inc == 0) return elem;
    return ((size_t)(n - 1) * (size_t)abs(inc) + 1) * elem;
}

/* Element i of a strided vector: a negative increment walks it from its far end. */
static size_t vector_index(int n, int inc, int i) {
    return inc >= 0 ? (size_t)i * (size_t)inc : (size_t)(n - 1 - i) * (size_t)(-inc);
}

/* Member b of a device array of pointers, when the array and the member's bytes are reachable. */
static void *array_member(const void *const *array, int b, size_t bytes) {
    if (!cudashim_is_device_range(&array[b], sizeof(void *))) return NULL;
    void *m = (void *)array[b];
    return reach(m, bytes) ? m : NULL;
}

/* Scalars per the handle's pointer mode; 0 when a device-mode scalar is unreachable. */
static int scalar_ok(cublasHandle_t handle, const void *p, size_t bytes) {
    return cublasshim_pointer_mode(handle) != CUBLAS_POINTER_MODE_DEVICE || cudashim_is_device_range(p, bytes);
}

/* The common start of every "kernel": injected failures, an earlier sticky error, an injected
 * asynchronous fault. Returns -1 to go on, else the status to return. The kernel then runs
 * here, on the calling thread, once the handle's stream ran its earlier work (in stream order,
 * not asynchronously: see cublas.c); a fault it finds is queued on that stream, and breaks the
 * context when the worker reaches it. */
static int kernel_start(const char *name, cublasHandle_t handle) {
    int injected = cudashim_inject(name);
    if (injected) return injected;
    if (cudashim_sticky_error()) return CUBLAS_STATUS_EXECUTION_FAILED;
    cudashim_drain(cublasshim_stream(handle));
    if (cudashim_sticky_error()) return CUBLAS_STATUS_SUCCESS; /* an earlier kernel faulted: this one never runs */
    if (cudashim_next_launch_faults() || !cublasshim_workspace_ok(handle)) {
        cudashim_raise_async(cudaErrorIllegalAddress);
        return CUBLAS_STATUS_SUCCESS;
    }
    return -1;
}

#define ALIVE_OR_RETURN(handle) \
    if (cublasshim_pointer_mode(handle) < 0) return CUBLAS_STATUS_NOT_INITIALIZED
#define START_KERNEL(name, handle)                    \
    do {                                              \
        int started_ = kernel_start(name, handle);   \
        if (started_ >= 0) return started_;           \
    } while (0)
#define ILLEGAL_ADDRESS()                                  \
    do {                                                   \
        cudashim_raise_async(cudaErrorIllegalAddress);     \
        return CUBLAS_STATUS_SUCCESS;                      \
    } while (0)

/* op(M)[r][c] of a column-major matrix. */
#define OP_AT(S, M, ld, op, r, c) \
    ((op) == CUBLAS_OP_N ? (M)[(size_t)(c) * (ld) + (r)] : (op) == CUBLAS_OP_T ? (M)[(size_t)(r) * (ld) + (c)] : conj_##S((M)[(size_t)(r) * (ld) + (c)]))

/* ---- gemv: y = alpha op(A) x + beta y ---- */
#define GEMV(NAME, API, T, S)                                                                                          \
    cublasStatus_t NAME(cublasHandle_t handle, cublasOperation_t trans, int m, int n, const API *alpha_, const API *A_, \
                        int lda, const API *x_, int incx, const API *beta_, API *y_, int incy) {                      \
        ALIVE_OR_RETURN(handle);                                                                                       \
        if (m < 0 || n < 0 || !valid_op(trans) || lda < max1(m) || incx == 0 || incy == 0 || !alpha_ || !beta_)       \
            return CUBLAS_STATUS_INVALID_VALUE;                                                                        \
        START_KERNEL(#NAME, handle);                                                                                   \
        if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;                                                            \
        const T *A = (const T *)A_, *x = (const T *)x_;                                                                \
        T *y = (T *)y_;                                                                                                \
        int xn = trans == CUBLAS_OP_N ? n : m, yn = trans == CUBLAS_OP_N ? m : n;                                      \
        if (!scalar_ok(handle, alpha_, sizeof(T)) || !scalar_ok(handle, beta_, sizeof(T)) ||                           \
            !reach(A, matrix_bytes(m, n, lda, sizeof(T))) || !reach(x, vector_bytes(xn, incx, sizeof(T))) ||          \
            !reach(y, vector_bytes(yn, incy, sizeof(T))))                                                             \
            ILLEGAL_ADDRESS();                                                                                         \
        T alpha = *(const T *)alpha_, beta = *(const T *)beta_;                                                        \
        for (int i = 0; i < yn; i++) {                                                                                 \
            T sum = 0;                                                                                                 \
            for (int j = 0; j < xn; j++) sum += OP_AT(S, A, lda, trans, i, j) * x[vector_index(xn, incx, j)];          \
            T *out = &y[vector_index(yn, incy, i)];                                                                    \
            *out = beta == 0 ? alpha * sum : alpha * sum + beta * *out; /* beta == 0: y is not read */                 \
        }                                                                                                              \
        return CUBLAS_STATUS_SUCCESS;                                                                                  \
    }
GEMV(cublasSgemv_v2, float, float, s)
GEMV(cublasDgemv_v2, double, double, d)
GEMV(cublasCgemv_v2, cuComplex, c32, c)
GEMV(cublasZgemv_v2, cuDoubleComplex, c64, z)

/* ---- gbmv: y = alpha op(A) x + beta y, A an m x n band (kl below, ku above the diagonal)
 * stored by diagonals: A(i, j) at A[ku + i - j + j * lda] ---- */
#define GBMV(NAME, API, T, S)                                                                                         \
    cublasStatus_t NAME(cublasHandle_t handle, cublasOperation_t trans, int m, int n, int kl, int ku,                 \
                        const API *alpha_, const API *A_, int lda, const API *x_, int incx, const API *beta_,          \
                        API *y_, int incy) {                                                                           \
        ALIVE_OR_RETURN(handle);                                                                                       \
        if (m < 0 || n < 0 || kl < 0 || ku < 0 || !valid_op(trans) || lda < kl + ku + 1 || incx == 0 || incy == 0 ||   \
            !alpha_ || !beta_)                                                                                         \
            return CUBLAS_STATUS_INVALID_VALUE;                                                                        \
        START_KERNEL(#NAME, handle);                                                                                   \
        if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;                                                            \
        const T *A = (const T *)A_, *x = (const T *)x_;                                                                \
        T *y = (T *)y_;                                                                                                \
        int xn = trans == CUBLAS_OP_N ? n : m, yn = trans == CUBLAS_OP_N ? m : n;                                      \
        if (!scalar_ok(handle, alpha_, sizeof(T)) || !scalar_ok(handle, beta_, sizeof(T)) ||                           \
            !reach(A, matrix_bytes(kl + ku + 1, n, lda, sizeof(T))) || !reach(x, vector_bytes(xn, incx, sizeof(T))) || \
            !reach(y, vector_bytes(yn, incy, sizeof(T))))                                                             \
            ILLEGAL_ADDRESS();                                                                                         \
        T alpha = *(const T *)alpha_, beta = *(const T *)beta_;                                                        \
        for (int o = 0; o < yn; o++) {                                                                                 \
            T sum = 0;                                                                                                 \
            for (int p = 0; p < xn; p++) {                                                                             \
                int i = trans == CUBLAS_OP_N ? o : p, j = trans == CUBLAS_OP_N ? p : o;                                \
                if (i < j - ku || i > j + kl) continue; /* outside the band: zero, and not stored */                  \
                T a = A[(size_t)j * lda + (size_t)(ku + i - j)];                                                       \
                if (trans == CUBLAS_OP_C) a = conj_##S(a);                                                             \
                sum += a * x[vector_index(xn, incx, p)];                                                               \
            }                                                                                                          \
            T *out = &y[vector_index(yn, incy, o)];                                                                    \
            *out = beta == 0 ? alpha * sum : alpha * sum + beta * *out;                                                \
        }                                                                                                              \
        return CUBLAS_STATUS_SUCCESS;                                                                                  \
    }
GBMV(cublasSgbmv_v2, float, float, s)
GBMV(cublasDgbmv_v2, double, double, d)
GBMV(cublasCgbmv_v2, cuComplex, c32, c)
GBMV(cublasZgbmv_v2, cuDoubleComplex, c64, z)

/* ---- dot products: result = sum x_i y_i (x conjugated for dotc) ---- */
#define DOT(NAME, API, T, S, CONJ_X)                                                                                   \
    cublasStatus_t NAME(cublasHandle_t handle, int n, const API *x_, int incx, const API *y_, int incy, API *result_) { \
        ALIVE_OR_RETURN(handle);                                                                                       \
        if (!result_) return CUBLAS_STATUS_INVALID_VALUE;                                                              \
        START_KERNEL(#NAME, handle);                                                                                   \
        const T *x = (const T *)x_, *y = (const T *)y_;                                                                \
        if (!scalar_ok(handle, result_, sizeof(T)) || !reach(x, vector_bytes(n, incx, sizeof(T))) ||                  \
            !reach(y, vector_bytes(n, incy, sizeof(T))))                                                              \
            ILLEGAL_ADDRESS();                                                                                         \
        T sum = 0;                                                                                                     \
        for (int i = 0; i < n; i++) {                                                                                  \
            T xi = x[vector_index(n, incx, i)];                                                                        \
            sum += (CONJ_X ? conj_##S(xi) : xi) * y[vector_index(n, incy, i)];                                         \
        }                                                                                                              \
        *(T *)result_ = sum;                                                                                           \
        return CUBLAS_STATUS_SUCCESS;                                                                                  \
    }
DOT(cublasSdot_v2, float, float, s, 0)
DOT(cublasDdot_v2, double, double, d, 0)
DOT(cublasCdotu_v2, cuComplex, c32, c, 0)
DOT(cublasCdotc_v2, cuComplex, c32, c, 1)
DOT(cublasZdotu_v2, cuDoubleComplex, c64, z, 0)
DOT(cublasZdotc_v2, cuDoubleComplex, c64, z, 1)

/* cublasDotEx for the real types: x, y and result of one type, computed in double. */
cublasStatus_t cublasDotEx(cublasHandle_t handle, int n, const void *x, cudaDataType xType, int incx, const void *y,
                           cudaDataType yType, int incy, void *result, cudaDataType resultType,
                           cudaDataType executionType) {
    ALIVE_OR_RETURN(handle);
    if (!result) return CUBLAS_STATUS_INVALID_VALUE;
    size_t elem = element_size(xType);
    if (xType != yType || xType != resultType || elem == 0 || is_complex_type((int)xType) || (int)xType == R_8I || (int)xType == R_32I ||
        (executionType != CUDA_R_32F && executionType != CUDA_R_64F))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    START_KERNEL("cublasDotEx", handle);
    if (!scalar_ok(handle, result, elem) || !reach(x, vector_bytes(n, incx, elem)) || !reach(y, vector_bytes(n, incy, elem)))
        ILLEGAL_ADDRESS();
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += load_element(xType, x, vector_index(n, incx, i)) * load_element(yType, y, vector_index(n, incy, i));
    store_element(resultType, result, 0, sum);
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- complex GEMMs ---- */
static int gemm_args_ok(int transa, int transb, int m, int n, int k, int lda, int ldb, int ldc, const void *alpha,
                        const void *beta, int batch) {
    if (m < 0 || n < 0 || k < 0 || batch < 0 || !valid_op(transa) || !valid_op(transb) || !alpha || !beta) return 0;
    int a_rows = transa == CUBLAS_OP_N ? m : k, b_rows = transb == CUBLAS_OP_N ? k : n;
    return lda >= max1(a_rows) && ldb >= max1(b_rows) && ldc >= max1(m);
}

#define COMPLEX_GEMM(NAME, STRIDED_NAME, API, T, S)                                                                    \
    static cublasStatus_t S##gemm_core(const char *name, cublasHandle_t handle, int ta, int tb, int m, int n, int k,   \
                                       const API *alpha_, const API *A_, int lda, long long sa, const API *B_, int ldb, \
                                       long long sb, const API *beta_, API *C_, int ldc, long long sc, int batch) {    \
        ALIVE_OR_RETURN(handle);                                                                                       \
        if (!gemm_args_ok(ta, tb, m, n, k, lda, ldb, ldc, alpha_, beta_, batch)) return CUBLAS_STATUS_INVALID_VALUE;   \
        START_KERNEL(name, handle);                                                                                    \
        if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;                                             \
        if (!scalar_ok(handle, alpha_, sizeof(T)) || !scalar_ok(handle, beta_, sizeof(T))) ILLEGAL_ADDRESS();          \
        T alpha = *(const T *)alpha_, beta = *(const T *)beta_;                                                        \
        size_t a_bytes = k ? matrix_bytes(ta == CUBLAS_OP_N ? m : k, ta == CUBLAS_OP_N ? k : m, lda, sizeof(T)) : 0;   \
        size_t b_bytes = k ? matrix_bytes(tb == CUBLAS_OP_N ? k : n, tb == CUBLAS_OP_N ? n : k, ldb, sizeof(T)) : 0;   \
        size_t c_bytes = matrix_bytes(m, n, ldc, sizeof(T));                                                           \
        for (int b = 0; b < batch; b++)                                                                                \
            if (!reach((const T *)A_ + b * sa, a_bytes) || !reach((const T *)B_ + b * sb, b_bytes) ||                  \
                !reach((const T *)C_ + b * sc, c_bytes))                                                               \
                ILLEGAL_ADDRESS();                                                                                     \
        for (int b = 0; b < batch; b++) {                                                                              \
            const T *A = (const T *)A_ + b * sa, *B = (const T *)B_ + b * sb;                                          \
            T *C = (T *)C_ + b * sc;                                                                                   \
            for (int col = 0; col < n; col++)                                                                          \
                for (int row = 0; row < m; row++) {                                                                    \
                    T sum = 0;                                                                                         \
                    for (int p = 0; p < k; p++) sum += OP_AT(S, A, lda, ta, row, p) * OP_AT(S, B, ldb, tb, p, col);    \
                    T *out = &C[(size_t)col * ldc + row];                                                              \
                    *out = beta == 0 ? alpha * sum : alpha * sum + beta * *out;                                        \
                }                                                                                                      \
        }                                                                                                              \
        return CUBLAS_STATUS_SUCCESS;                                                                                  \
    }                                                                                                                  \
    cublasStatus_t NAME(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,       \
                        int k, const API *alpha, const API *A, int lda, const API *B, int ldb, const API *beta, API *C,\
                        int ldc) {                                                                                     \
        return S##gemm_core(#NAME, handle, transa, transb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1);  \
    }                                                                                                                  \
    cublasStatus_t STRIDED_NAME(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m,      \
                                int n, int k, const API *alpha, const API *A, int lda, long long strideA,              \
                                const API *B, int ldb, long long strideB, const API *beta, API *C, int ldc,            \
                                long long strideC, int batchCount) {                                                   \
        return S##gemm_core(#STRIDED_NAME, handle, transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB,   \
                            beta, C, ldc, strideC, batchCount);                                                        \
    }
COMPLEX_GEMM(cublasCgemm_v2, cublasCgemmStridedBatched, cuComplex, c32, c)
COMPLEX_GEMM(cublasZgemm_v2, cublasZgemmStridedBatched, cuDoubleComplex, c64, z)

/* ---- triangular solves: op(A) X = alpha B (left) or X op(A) = alpha B (right), X over B ---- */
#define TRSM(NAME, BATCHED, API, T, S)                                                                                 \
    /* One member: op(A) is made explicit (k x k), then each column (left) or row (right) of B is    \
     * solved by substitution. */                                                                                      \
    static int S##trsm_member(int side, int uplo, int trans, int diag, int m, int n, T alpha, const T *A, int lda,      \
                              T *B, int ldb) {                                                                         \
        int k = side == CUBLAS_SIDE_LEFT ? m : n;                                                                      \
        T *M = calloc((size_t)k * (size_t)k + 1, sizeof(T));                                                           \
        if (!M) return 0;                                                                                              \
        /* M = op(A) restricted to its triangle; right side: M = op(A)^T, so X^T solves M X^T = B^T. */                \
        int lower = (uplo == CUBLAS_FILL_MODE_LOWER) != (trans != CUBLAS_OP_N);                                        \
        if (side == CUBLAS_SIDE_RIGHT) lower = !lower;                                                                 \
        for (int r = 0; r < k; r++)                                                                                    \
            for (int c = 0; c < k; c++) {                                                                              \
                int stored_lower = uplo == CUBLAS_FILL_MODE_LOWER;                                                     \
                int ar = side == CUBLAS_SIDE_LEFT ? r : c, ac = side == CUBLAS_SIDE_LEFT ? c : r; /* op(A)[ar][ac] */  \
                int sr = trans == CUBLAS_OP_N ? ar : ac, sc = trans == CUBLAS_OP_N ? ac : ar;   /* A as stored */      \
                if (stored_lower ? sr < sc : sr > sc) continue;                                                        \
                T v = OP_AT(S, A, lda, trans, ar, ac);                                                                 \
                if (sr == sc && diag == CUBLAS_DIAG_UNIT) v = 1;                                                       \
                M[(size_t)c * k + r] = v;                                                                              \
            }                                                                                                          \
        int systems = side == CUBLAS_SIDE_LEFT ? n : m;                                                                \
        for (int s = 0; s < systems; s++) {                                                                            \
            for (int step = 0; step < k; step++) {                                                                     \
                int i = lower ? step : k - 1 - step;                                                                   \
                T *bi = side == CUBLAS_SIDE_LEFT ? &B[(size_t)s * ldb + i] : &B[(size_t)i * ldb + s];                  \
                T v = alpha * *bi;                                                                                     \
                for (int j = 0; j < k; j++) {                                                                          \
                    if (lower ? j >= i : j <= i) continue;                                                             \
                    T bj = side == CUBLAS_SIDE_LEFT ? B[(size_t)s * ldb + j] : B[(size_t)j * ldb + s];                 \
                    v -= M[(size_t)j * k + i] * bj; /* bj is already solved (and scaled) */                            \
                }                                                                                                      \
                *bi = v / M[(size_t)i * k + i];                                                                        \
            }                                                                                                          \
        }                                                                                                              \
        free(M);                                                                                                       \
        return 1;                                                                                                      \
    }                                                                                                                  \
    static cublasStatus_t S##trsm_core(const char *name, cublasHandle_t handle, int side, int uplo, int trans,         \
                                       int diag, int m, int n, const API *alpha_, const void *A, int lda, const void *B,\
                                       int ldb, int batch, int arrays) {                                               \
        ALIVE_OR_RETURN(handle);                                                                                       \
        int k = side == CUBLAS_SIDE_LEFT ? m : n;                                                                      \
        if (m < 0 || n < 0 || batch < 0 || (side != CUBLAS_SIDE_LEFT && side != CUBLAS_SIDE_RIGHT) ||                  \
            (uplo != CUBLAS_FILL_MODE_LOWER && uplo != CUBLAS_FILL_MODE_UPPER) || !valid_op(trans) ||                   \
            (diag != CUBLAS_DIAG_NON_UNIT && diag != CUBLAS_DIAG_UNIT) || lda < max1(k) || ldb < max1(m) || !alpha_)   \
            return CUBLAS_STATUS_INVALID_VALUE;                                                                        \
        START_KERNEL(name, handle);                                                                                    \
        if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;                                             \
        if (!scalar_ok(handle, alpha_, sizeof(T))) ILLEGAL_ADDRESS();                                                  \
        T alpha = *(const T *)alpha_;                                                                                  \
        size_t a_bytes = matrix_bytes(k, k, lda, sizeof(T)), b_bytes = matrix_bytes(m, n, ldb, sizeof(T));             \
        for (int b = 0; b < batch; b++) {                                                                              \
            const T *a = arrays ? array_member(A, b, a_bytes) : reach(A, a_bytes) ? A : NULL;                          \
            T *bm = arrays ? array_member(B, b, b_bytes) : reach(B, b_bytes) ? (T *)B : NULL;                          \
            if (!a || !bm) ILLEGAL_ADDRESS();                                                                          \
        }                                                                                                              \
        for (int b = 0; b < batch; b++) {                                                                              \
            const T *a = arrays ? array_member(A, b, a_bytes) : A;                                                     \
            T *bm = arrays ? array_member(B, b, b_bytes) : (T *)B;                                                     \
            if (!S##trsm_member(side, uplo, trans, diag, m, n, alpha, a, lda, bm, ldb)) return CUBLAS_STATUS_ALLOC_FAILED; \
        }                                                                                                              \
        return CUBLAS_STATUS_SUCCESS;                                                                                  \
    }                                                                                                                  \
    cublasStatus_t NAME(cublasHandle_t handle, cublasSideMode_t side, cublasFillMode_t uplo, cublasOperation_t trans,  \
                        cublasDiagType_t diag, int m, int n, const API *alpha, const API *A, int lda, API *B,          \
                        int ldb) {                                                                                     \
        return S##trsm_core(#NAME, handle, side, uplo, trans, diag, m, n, alpha, A, lda, B, ldb, 1, 0);                \
    }                                                                                                                  \
    cublasStatus_t BATCHED(cublasHandle_t handle, cublasSideMode_t side, cublasFillMode_t uplo,                        \
                           cublasOperation_t trans, cublasDiagType_t diag, int m, int n, const API *alpha,             \
                           const API *const A[], int lda, API *const B[], int ldb, int batchCount) {                   \
        return S##trsm_core(#BATCHED, handle, side, uplo, trans, diag, m, n, alpha, A, lda, B, ldb, batchCount, 1);    \
    }
TRSM(cublasStrsm_v2, cublasStrsmBatched, float, float, s)
TRSM(cublasDtrsm_v2, cublasDtrsmBatched, double, double, d)
TRSM(cublasCtrsm_v2, cublasCtrsmBatched, cuComplex, c32, c)
TRSM(cublasZtrsm_v2, cublasZtrsmBatched, cuDoubleComplex, c64, z)

/* ---- batched LU, QR and least squares (LAPACK's getrf, getrs, geqrf, gels per member) ---- */
#define AT(M, ld, r, c) (M)[(size_t)(c) * (ld) + (r)]

#define FACTORISATIONS(S, API, T, R)                                                                                   \
    /* LU with partial pivoting (none when pivots is NULL); returns LAPACK's info. */                                  \
    static int S##getrf_member(int n, T *A, int lda, int *pivots) {                                                    \
        int info = 0;                                                                                                  \
        for (int j = 0; j < n; j++) {                                                                                  \
            int p = j;                                                                                                 \
            if (pivots) {                                                                                              \
                for (int i = j + 1; i < n; i++)                                                                        \
                    if (abs2_##S(AT(A, lda, i, j)) > abs2_##S(AT(A, lda, p, j))) p = i;                                \
                pivots[j] = p + 1;                                                                                     \
                if (p != j)                                                                                            \
                    for (int c = 0; c < n; c++) {                                                                      \
                        T t = AT(A, lda, j, c);                                                                        \
                        AT(A, lda, j, c) = AT(A, lda, p, c);                                                           \
                        AT(A, lda, p, c) = t;                                                                          \
                    }                                                                                                  \
            }                                                                                                          \
            T pivot = AT(A, lda, j, j);                                                                                \
            if (pivot == 0) {                                                                                          \
                if (!info) info = j + 1; /* singular: U(j,j) is exactly zero */                                        \
                continue;                                                                                              \
            }                                                                                                          \
            for (int i = j + 1; i < n; i++) AT(A, lda, i, j) /= pivot;                                                 \
            for (int c = j + 1; c < n; c++)                                                                            \
                for (int i = j + 1; i < n; i++) AT(A, lda, i, c) -= AT(A, lda, i, j) * AT(A, lda, j, c);               \
        }                                                                                                              \
        return info;                                                                                                   \
    }                                                                                                                  \
    /* Solves op(A) X = B with getrf's factors, in place of B. */                                                      \
    static void S##getrs_member(int trans, int n, int nrhs, const T *A, int lda, const int *pivots, T *B, int ldb) {   \
        for (int c = 0; c < nrhs; c++) {                                                                               \
            T *x = &B[(size_t)c * ldb];                                                                                \
            if (trans == CUBLAS_OP_N) {                                                                                \
                if (pivots)                                                                                            \
                    for (int i = 0; i < n; i++) {                                                                      \
                        T t = x[i];                                                                                    \
                        x[i] = x[pivots[i] - 1];                                                                       \
                        x[pivots[i] - 1] = t;                                                                          \
                    }                                                                                                  \
                for (int i = 0; i < n; i++)                                                                            \
                    for (int j = 0; j < i; j++) x[i] -= AT(A, lda, i, j) * x[j];                                       \
                for (int i = n - 1; i >= 0; i--) {                                                                     \
                    for (int j = i + 1; j < n; j++) x[i] -= AT(A, lda, i, j) * x[j];                                   \
                    x[i] /= AT(A, lda, i, i);                                                                          \
                }                                                                                                      \
            } else { /* U^T z = b, L^T w = z, x = P w (conjugated for C) */                                            \
                int cj = trans == CUBLAS_OP_C;                                                                         \
                for (int i = 0; i < n; i++) {                                                                          \
                    for (int j = 0; j < i; j++) x[i] -= (cj ? conj_##S(AT(A, lda, j, i)) : AT(A, lda, j, i)) * x[j];   \
                    x[i] /= cj ? conj_##S(AT(A, lda, i, i)) : AT(A, lda, i, i);                                        \
                }                                                                                                      \
                for (int i = n - 1; i >= 0; i--)                                                                       \
                    for (int j = i + 1; j < n; j++) x[i] -= (cj ? conj_##S(AT(A, lda, j, i)) : AT(A, lda, j, i)) * x[j]; \
                if (pivots)                                                                                            \
                    for (int i = n - 1; i >= 0; i--) {                                                                 \
                        T t = x[i];                                                                                    \
                        x[i] = x[pivots[i] - 1];                                                                       \
                        x[pivots[i] - 1] = t;                                                                          \
                    }                                                                                                  \
            }                                                                                                          \
        }                                                                                                              \
    }                                                                                                                  \
    /* Householder QR as LAPACK stores it: R above the diagonal, the reflectors' tails below,    \
     * tau[j] their scalars; H_j = I - tau v v^H, and A is reduced by H_j^H. */                                        \
    static void S##reflect(int m, int j, const T *A, int lda, T tau, T *C, int ldc, int cols) {                        \
        for (int c = 0; c < cols; c++) {                                                                               \
            T w = AT(C, ldc, j, c);                                                                                    \
            for (int i = j + 1; i < m; i++) w += conj_##S(AT(A, lda, i, j)) * AT(C, ldc, i, c);                       \
            w *= conj_##S(tau);                                                                                        \
            AT(C, ldc, j, c) -= w;                                                                                     \
            for (int i = j + 1; i < m; i++) AT(C, ldc, i, c) -= AT(A, lda, i, j) * w;                                  \
        }                                                                                                              \
    }                                                                                                                  \
    static void S##geqrf_member(int m, int n, T *A, int lda, T *tau) {                                                 \
        int k = m < n ? m : n;                                                                                         \
        for (int j = 0; j < k; j++) {                                                                                  \
            T alpha = AT(A, lda, j, j);                                                                                \
            R xnorm2 = 0;                                                                                              \
            for (int i = j + 1; i < m; i++) xnorm2 += abs2_##S(AT(A, lda, i, j));                                      \
            if (xnorm2 == 0 && im_##S(alpha) == 0) {                                                                   \
                tau[j] = 0;                                                                                            \
                continue;                                                                                              \
            }                                                                                                          \
            R norm = (R)sqrt((double)(abs2_##S(alpha) + xnorm2));                                                     \
            R beta = re_##S(alpha) >= 0 ? -norm : norm;                                                                \
            tau[j] = (beta - alpha) / beta;                                                                            \
            T scale = 1 / (alpha - beta);                                                                              \
            for (int i = j + 1; i < m; i++) AT(A, lda, i, j) *= scale;                                                 \
            AT(A, lda, j, j) = 1; /* v_j, while the reflector is applied */                                            \
            S##reflect(m, j, A, lda, tau[j], &AT(A, lda, 0, j + 1), lda, n - j - 1);                                   \
            AT(A, lda, j, j) = beta;                                                                                   \
        }                                                                                                              \
    }                                                                                                                  \
    static cublasStatus_t S##getrf_batched(cublasHandle_t handle, int n, API *const Aarray[], int lda,            \
                                                int *PivotArray, int *infoArray, int batchSize, const char *name) {    \
        ALIVE_OR_RETURN(handle);                                                                                       \
        if (n < 0 || batchSize < 0 || lda < max1(n) || !infoArray) return CUBLAS_STATUS_INVALID_VALUE;                 \
        START_KERNEL(name, handle);                                                                                    \
        if (batchSize == 0) return CUBLAS_STATUS_SUCCESS;                                                              \
        size_t bytes = matrix_bytes(n, n, lda, sizeof(T));                                                             \
        if (!reach(infoArray, (size_t)batchSize * sizeof(int)) ||                                                      \
            (PivotArray && !reach(PivotArray, (size_t)batchSize * (size_t)n * sizeof(int))))                           \
            ILLEGAL_ADDRESS();                                                                                         \
        for (int b = 0; b < batchSize; b++)                                                                            \
            if (!array_member((const void *const *)Aarray, b, bytes)) ILLEGAL_ADDRESS();                               \
        for (int b = 0; b < batchSize; b++)                                                                            \
            infoArray[b] = S##getrf_member(n, (T *)Aarray[b], lda, PivotArray ? PivotArray + (size_t)b * n : NULL);    \
        return CUBLAS_STATUS_SUCCESS;                                                                                  \
    }                                                                                                                  \
    static cublasStatus_t S##getrs_batched(cublasHandle_t handle, int trans, int n, int nrhs,                     \
                                                const API *const Aarray[], int lda, const int *devIpiv,                \
                                                API *const Barray[], int ldb, int *info, int batchSize,                \
                                                const char *name) {                                                    \
        ALIVE_OR_RETURN(handle);                                                                                       \
        if (!info) return CUBLAS_STATUS_INVALID_VALUE;                                                                 \
        int bad = n < 0 ? -2 : nrhs < 0 ? -3 : lda < max1(n) ? -5 : ldb < max1(n) ? -8 : batchSize < 0 ? -10         \
                : !valid_op(trans) ? -1 : 0;                                                                           \
        *info = bad;                                                                                                   \
        if (bad) return CUBLAS_STATUS_INVALID_VALUE;                                                                   \
        START_KERNEL(name, handle);                                                                                    \
        if (batchSize == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;                                                   \
        size_t a_bytes = matrix_bytes(n, n, lda, sizeof(T)), b_bytes = matrix_bytes(n, nrhs, ldb, sizeof(T));          \
        if (devIpiv && !reach(devIpiv, (size_t)batchSize * (size_t)n * sizeof(int))) ILLEGAL_ADDRESS();               \
        for (int b = 0; b < batchSize; b++)                                                                            \
            if (!array_member((const void *const *)Aarray, b, a_bytes) ||                                             \
                !array_member((const void *const *)Barray, b, b_bytes))                                               \
                ILLEGAL_ADDRESS();                                                                                     \
        for (int b = 0; b < batchSize; b++)                                                                            \
            S##getrs_member(trans, n, nrhs, (const T *)Aarray[b], lda, devIpiv ? devIpiv + (size_t)b * n : NULL,       \
                            (T *)Barray[b], ldb);                                                                      \
        return CUBLAS_STATUS_SUCCESS;                                                                                  \
    }                                                                                                                  \
    static cublasStatus_t S##geqrf_batched(cublasHandle_t handle, int m, int n, API *const Aarray[], int lda,     \
                                                API *const TauArray[], int *info, int batchSize, const char *name) {   \
        ALIVE_OR_RETURN(handle);                                                                                       \
        if (!info) return CUBLAS_STATUS_INVALID_VALUE;                                                                 \
        int bad = m < 0 ? -2 : n < 0 ? -3 : lda < max1(m) ? -5 : batchSize < 0 ? -8 : 0;                             \
        *info = bad;                                                                                                   \
        if (bad) return CUBLAS_STATUS_INVALID_VALUE;                                                                   \
        START_KERNEL(name, handle);                                                                                    \
        if (batchSize == 0) return CUBLAS_STATUS_SUCCESS;                                                              \
        int k = m < n ? m : n;                                                                                         \
        size_t a_bytes = matrix_bytes(m, n, lda, sizeof(T)), t_bytes = (size_t)k * sizeof(T);                          \
        for (int b = 0; b < batchSize; b++)                                                                            \
            if (!array_member((const void *const *)Aarray, b, a_bytes) ||                                             \
                !array_member((const void *const *)TauArray, b, t_bytes))                                             \
                ILLEGAL_ADDRESS();                                                                                     \
        for (int b = 0; b < batchSize; b++) S##geqrf_member(m, n, (T *)Aarray[b], lda, (T *)TauArray[b]);              \
        return CUBLAS_STATUS_SUCCESS;                                                                                  \
    }                                                                                                                  \
    static cublasStatus_t S##gels_batched(cublasHandle_t handle, int trans, int m, int n, int nrhs,               \
                                               API *const Aarray[], int lda, API *const Carray[], int ldc, int *info,  \
                                               int *devInfoArray, int batchSize, const char *name) {                   \
        ALIVE_OR_RETURN(handle);                                                                                       \
        if (!info) return CUBLAS_STATUS_INVALID_VALUE;                                                                 \
        int bad = m < 0 ? -2 : n < 0 ? -3 : nrhs < 0 ? -4 : lda < max1(m) ? -6 : ldc < max1(m) ? -8                  \
                : batchSize < 0 ? -11 : !valid_op(trans) ? -1 : 0;                                                     \
        *info = bad;                                                                                                   \
        if (bad) return CUBLAS_STATUS_INVALID_VALUE;                                                                   \
        if (m < n || trans != CUBLAS_OP_N) return CUBLAS_STATUS_NOT_SUPPORTED;                                         \
        START_KERNEL(name, handle);                                                                                    \
        if (batchSize == 0) return CUBLAS_STATUS_SUCCESS;                                                              \
        size_t a_bytes = matrix_bytes(m, n, lda, sizeof(T)), c_bytes = matrix_bytes(m, nrhs, ldc, sizeof(T));          \
        if (devInfoArray && !reach(devInfoArray, (size_t)batchSize * sizeof(int))) ILLEGAL_ADDRESS();                 \
        for (int b = 0; b < batchSize; b++)                                                                            \
            if (!array_member((const void *const *)Aarray, b, a_bytes) ||                                             \
                !array_member((const void *const *)Carray, b, c_bytes))                                               \
                ILLEGAL_ADDRESS();                                                                                     \
        T *tau = calloc((size_t)n + 1, sizeof(T));                                                                     \
        if (!tau) return CUBLAS_STATUS_ALLOC_FAILED;                                                                   \
        for (int b = 0; b < batchSize; b++) {                                                                          \
            T *A = (T *)Aarray[b], *C = (T *)Carray[b];                                                                \
            S##geqrf_member(m, n, A, lda, tau);                                                                        \
            for (int j = 0; j < n; j++) { /* C = Q^H C */                                                              \
                T diag = AT(A, lda, j, j);                                                                             \
                AT(A, lda, j, j) = 1;                                                                                  \
                S##reflect(m, j, A, lda, tau[j], C, ldc, nrhs);                                                        \
                AT(A, lda, j, j) = diag;                                                                               \
            }                                                                                                          \
            int singular = 0;                                                                                          \
            for (int j = 0; j < n; j++)                                                                                \
                if (AT(A, lda, j, j) == 0 && !singular) singular = j + 1;                                              \
            if (!singular) /* R X = (Q^H C)[0:n] */                                                                    \
                for (int c = 0; c < nrhs; c++)                                                                         \
                    for (int i = n - 1; i >= 0; i--) {                                                                 \
                        for (int j = i + 1; j < n; j++) AT(C, ldc, i, c) -= AT(A, lda, i, j) * AT(C, ldc, j, c);       \
                        AT(C, ldc, i, c) /= AT(A, lda, i, i);                                                          \
                    }                                                                                                  \
            if (devInfoArray) devInfoArray[b] = singular;                                                              \
        }                                                                                                              \
        free(tau);                                                                                                     \
        return CUBLAS_STATUS_SUCCESS;                                                                                  \
    }
/* The exported names, each reporting itself to fault injection. */
#define FACTORISATION_EXPORTS(U, S, API)                                                                               \
    cublasStatus_t cublas##U##getrfBatched(cublasHandle_t handle, int n, API *const Aarray[], int lda, int *PivotArray, \
                                           int *infoArray, int batchSize) {                                            \
        return S##getrf_batched(handle, n, Aarray, lda, PivotArray, infoArray, batchSize, "cublas" #U "getrfBatched");  \
    }                                                                                                                  \
    cublasStatus_t cublas##U##getrsBatched(cublasHandle_t handle, cublasOperation_t trans, int n, int nrhs,            \
                                           const API *const Aarray[], int lda, const int *devIpiv,                     \
                                           API *const Barray[], int ldb, int *info, int batchSize) {                   \
        return S##getrs_batched(handle, trans, n, nrhs, Aarray, lda, devIpiv, Barray, ldb, info, batchSize,            \
                                "cublas" #U "getrsBatched");                                                           \
    }                                                                                                                  \
    cublasStatus_t cublas##U##geqrfBatched(cublasHandle_t handle, int m, int n, API *const Aarray[], int lda,          \
                                           API *const TauArray[], int *info, int batchSize) {                          \
        return S##geqrf_batched(handle, m, n, Aarray, lda, TauArray, info, batchSize, "cublas" #U "geqrfBatched");     \
    }                                                                                                                  \
    cublasStatus_t cublas##U##gelsBatched(cublasHandle_t handle, cublasOperation_t trans, int m, int n, int nrhs,      \
                                          API *const Aarray[], int lda, API *const Carray[], int ldc, int *info,       \
                                          int *devInfoArray, int batchSize) {                                          \
        return S##gels_batched(handle, trans, m, n, nrhs, Aarray, lda, Carray, ldc, info, devInfoArray, batchSize,     \
                               "cublas" #U "gelsBatched");                                                             \
    }

FACTORISATIONS(s, float, float, float)
FACTORISATIONS(d, double, double, double)
FACTORISATIONS(c, cuComplex, c32, float)
FACTORISATIONS(z, cuDoubleComplex, c64, double)
FACTORISATION_EXPORTS(S, s, float)
FACTORISATION_EXPORTS(D, d, double)
FACTORISATION_EXPORTS(C, c, cuComplex)
FACTORISATION_EXPORTS(Z, z, cuDoubleComplex)

/* ---- level-1/2 and BLAS-like functions CuPy 12 links but the stand-in does not compute (stubs.h):
 * each fails cleanly with CUBLAS_STATUS_NOT_SUPPORTED, writing nothing ---- */
#include "stubs.h"
STUB(cublasCaxpy_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasCdgmm, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasCgeam, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasCgemmBatched, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasCgerc_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasCgeru_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasCgetriBatched, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasCscal_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasCsscal_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasCsyrk_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasDasum_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasDaxpy_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasDdgmm, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasDgeam, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasDgemmBatched, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasDger_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasDgetriBatched, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasDnrm2_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasDsbmv_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasDscal_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasDsyrk_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasDtpttr, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasDtrttp, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasDzasum_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasDznrm2_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasIcamax_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasIcamin_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasIdamax_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasIdamin_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasIsamax_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasIsamin_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasIzamax_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasIzamin_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasSasum_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasSaxpy_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasScasum_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasScnrm2_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasSdgmm, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasSgeam, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasSger_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasSgetriBatched, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasSnrm2_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasSsbmv_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasSscal_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasSsyrk_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasStpttr, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasStrttp, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasZaxpy_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasZdgmm, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasZdscal_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasZgeam, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasZgemmBatched, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasZgerc_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasZgeru_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasZgetriBatched, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasZscal_v2, CUBLAS_STATUS_NOT_SUPPORTED)
STUB(cublasZsyrk_v2, CUBLAS_STATUS_NOT_SUPPORTED)
