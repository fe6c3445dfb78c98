/* Stand-in libcublas.so.12: handles and cublasSgemm_v2 with NVIDIA's documented argument
 * rules, computed on the CPU in column-major order. Like the real library it never calls the
 * public CUDA runtime (NVIDIA links its own static copy); it reaches the stand-in runtime's
 * state through the private cudashim_* functions only, so a guard's runtime hooks never see
 * cuBLAS's internal work.
 *
 * A GEMM "kernel" that would touch memory outside every live allocation does not touch it:
 * as on a GPU, the call returns SUCCESS and cudaErrorIllegalAddress appears at the next
 * synchronisation, sticky from then on. Fault injection: CUDASHIM_FAIL, CUDASHIM_ASYNC_FAULT
 * (see cudart.c). */
#include <pthread.h>
#include <stdint.h>
#include <stddef.h>
#include <string.h>

#include "include/cublas_v2.h"

#define SHIM_CUBLAS_VERSION 120903 /* 12.9.3, as cublasGetVersion encodes it */
#define MAX_HANDLES 4096

int cudashim_inject(const char *function);
int cudashim_driver_error(void);
int cudashim_sticky_error(void);
int cudashim_is_device_range(const void *ptr, size_t bytes);
int cudashim_stream_valid(cudaStream_t stream);
int cudashim_next_launch_faults(void);
void cudashim_raise_async(int code);

enum handle_state { UNUSED = 0, ALIVE, DESTROYED };

struct cublasContext {
    int state;
    cudaStream_t stream;
    int pointer_mode;
    int math_mode;
};

static struct cublasContext handles[MAX_HANDLES];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* A handle we issued and that is still alive; anything else (NULL, destroyed, garbage)
 * is answered like cuBLAS answers an uninitialised handle. */
static struct cublasContext *alive(cublasHandle_t handle) {
    uintptr_t h = (uintptr_t)handle, first = (uintptr_t)&handles[0];
    if (h < first || h >= first + sizeof handles || (h - first) % sizeof(struct cublasContext)) return NULL;
    return handle->state == ALIVE ? handle : NULL;
}

cublasStatus_t cublasCreate_v2(cublasHandle_t *handle) {
    if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
    int injected = cudashim_inject("cublasCreate_v2");
    if (injected) return injected;
    if (cudashim_driver_error() || cudashim_sticky_error()) return CUBLAS_STATUS_NOT_INITIALIZED;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_HANDLES; i++) {
        if (handles[i].state == UNUSED) {
            handles[i] = (struct cublasContext){ALIVE, NULL, CUBLAS_POINTER_MODE_HOST, CUBLAS_DEFAULT_MATH};
            pthread_mutex_unlock(&lock);
            *handle = &handles[i];
            return CUBLAS_STATUS_SUCCESS;
        }
    }
    pthread_mutex_unlock(&lock);
    return CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
    struct cublasContext *h = alive(handle);
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->state = DESTROYED; /* never reused, so a stale handle stays recognisable */
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetVersion_v2(cublasHandle_t handle, int *version) {
    if (!alive(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!version) return CUBLAS_STATUS_INVALID_VALUE;
    *version = SHIM_CUBLAS_VERSION;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetProperty(libraryPropertyType type, int *value) {
    if (!value) return CUBLAS_STATUS_INVALID_VALUE;
    switch (type) {
    case MAJOR_VERSION: *value = SHIM_CUBLAS_VERSION / 10000; return CUBLAS_STATUS_SUCCESS;
    case MINOR_VERSION: *value = SHIM_CUBLAS_VERSION / 100 % 100; return CUBLAS_STATUS_SUCCESS;
    case PATCH_LEVEL: *value = SHIM_CUBLAS_VERSION % 100; return CUBLAS_STATUS_SUCCESS;
    default: return CUBLAS_STATUS_INVALID_VALUE;
    }
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId) {
    struct cublasContext *h = alive(handle);
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!cudashim_stream_valid(streamId)) return CUBLAS_STATUS_INVALID_VALUE;
    h->stream = streamId;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t *streamId) {
    struct cublasContext *h = alive(handle);
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!streamId) return CUBLAS_STATUS_INVALID_VALUE;
    *streamId = h->stream;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode) {
    struct cublasContext *h = alive(handle);
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE) return CUBLAS_STATUS_INVALID_VALUE;
    h->pointer_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t *mode) {
    struct cublasContext *h = alive(handle);
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
    *mode = (cublasPointerMode_t)h->pointer_mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
    struct cublasContext *h = alive(handle);
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    int base = mode & ~CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
    if (base < CUBLAS_DEFAULT_MATH || base > CUBLAS_TF32_TENSOR_OP_MATH) return CUBLAS_STATUS_INVALID_VALUE;
    h->math_mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t *mode) {
    struct cublasContext *h = alive(handle);
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
    *mode = (cublasMath_t)h->math_mode;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusName(cublasStatus_t status) {
    switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "<unrecognized>";
    }
}

const char *cublasGetStatusString(cublasStatus_t status) {
    switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    default: return "unknown error";
    }
}

static int max1(int v) { return v > 1 ? v : 1; }

/* Bytes a column-major rows x cols matrix with leading dimension ld spans. */
static size_t extent(int rows, int cols, int ld, size_t elem) {
    if (rows == 0 || cols == 0) return 0;
    return ((size_t)ld * (size_t)(cols - 1) + (size_t)rows) * elem;
}

static float at(const float *M, cublasOperation_t op, int ld, int row, int col) {
    return op == CUBLAS_OP_N ? M[(size_t)col * ld + row] : M[(size_t)row * ld + col];
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                              int m, int n, int k, const float *alpha, const float *A, int lda,
                              const float *B, int ldb, const float *beta, float *C, int ldc) {
    struct cublasContext *h = alive(handle);
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    int valid_op_a = transa == CUBLAS_OP_N || transa == CUBLAS_OP_T || transa == CUBLAS_OP_C;
    int valid_op_b = transb == CUBLAS_OP_N || transb == CUBLAS_OP_T || transb == CUBLAS_OP_C;
    if (m < 0 || n < 0 || k < 0 || !valid_op_a || !valid_op_b) return CUBLAS_STATUS_INVALID_VALUE;
    int a_rows = transa == CUBLAS_OP_N ? m : k, a_cols = transa == CUBLAS_OP_N ? k : m;
    int b_rows = transb == CUBLAS_OP_N ? k : n, b_cols = transb == CUBLAS_OP_N ? n : k;
    if (lda < max1(a_rows) || ldb < max1(b_rows) || ldc < max1(m) || !alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    int injected = cudashim_inject("cublasSgemm_v2");
    if (injected) return injected;
    if (cudashim_sticky_error()) return CUBLAS_STATUS_EXECUTION_FAILED;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;

    /* From here on this is the "kernel": it reports problems asynchronously. */
    if (cudashim_next_launch_faults()) {
        cudashim_raise_async(cudaErrorIllegalAddress);
        return CUBLAS_STATUS_SUCCESS;
    }
    int device_scalars = h->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
    int scalars_ok = !device_scalars || (cudashim_is_device_range(alpha, sizeof(float)) &&
                                         cudashim_is_device_range(beta, sizeof(float)));
    int a_ok = k == 0 || cudashim_is_device_range(A, extent(a_rows, a_cols, lda, sizeof(float)));
    int b_ok = k == 0 || cudashim_is_device_range(B, extent(b_rows, b_cols, ldb, sizeof(float)));
    int c_ok = cudashim_is_device_range(C, extent(m, n, ldc, sizeof(float)));
    if (!scalars_ok || !a_ok || !b_ok || !c_ok) {
        cudashim_raise_async(cudaErrorIllegalAddress);
        return CUBLAS_STATUS_SUCCESS;
    }
    float a = *alpha, b = *beta;
    for (int col = 0; col < n; col++) {
        for (int row = 0; row < m; row++) {
            float sum = 0.0f;
            for (int p = 0; p < k; p++) sum += at(A, transa, lda, row, p) * at(B, transb, ldb, p, col);
            float *c = &C[(size_t)col * ldc + row];
            *c = b == 0.0f ? a * sum : a * sum + b * *c; /* beta == 0: C is not read */
        }
    }
    return CUBLAS_STATUS_SUCCESS;
}
