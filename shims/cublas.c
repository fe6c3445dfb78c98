/* Stand-in libcublas.so.12: handles and cublasSgemm_v2 with NVIDIA's documented argument
 * rules, computed on the CPU in column-major order. Like the real library it never calls the
 * public CUDA runtime (NVIDIA links its own static copy); it reaches the stand-in runtime's
 * state through the private cudashim_* functions only, so a guard's runtime hooks never see
 * cuBLAS's internal work.
 *
 * A GEMM is checked at the call and its "kernel" queued on the handle's stream (the stand-in
 * GPU, engine.c, runs it later, in stream order; host-mode scalars are read at the call, as
 * cuBLAS reads them). A kernel that would touch memory outside every live allocation does not
 * touch it: the call returned SUCCESS, and when the kernel runs cudaErrorIllegalAddress breaks
 * the context, sticky from then on. Fault injection: CUDASHIM_FAIL, CUDASHIM_ASYNC_FAULT (see
 * cudart.c). The BLAS family (cublas_blas.c) runs on the calling thread once the stream's
 * earlier work ran. */
#include <complex.h>
#include <pthread.h>
#include <stdint.h>
#include <stddef.h>
#include <string.h>

#include "elements.h"
#include "engine.h"
#include "include/cublas_v2.h"

#define SHIM_CUBLAS_VERSION 120903 /* 12.9.3, as cublasGetVersion encodes it */
#define MAX_HANDLES 4096

int cudashim_inject(const char *function);
int cudashim_driver_error(void);
int cudashim_reserve(size_t bytes);
void cudashim_release(size_t bytes);

/* Like cuBLAS, a handle takes a workspace of device memory when it is created: without room
 * for it, cublasCreate fails with NOT_INITIALIZED (the guide's "out of memory at handle
 * creation"). */
#define HANDLE_WORKSPACE ((size_t)64 << 10)
int cudashim_sticky_error(void);
int cudashim_is_device_range(const void *ptr, size_t bytes);
int cudashim_stream_valid(cudaStream_t stream);
int cudashim_next_launch_faults(void);
void cudashim_raise_async(int code);
int cudashim_submit(cudaStream_t stream, shim_work_fn fn, const void *arg, size_t size);
__attribute__((visibility("hidden"))) int cublasshim_workspace_ok(cublasHandle_t handle);

enum handle_state { UNUSED = 0, ALIVE, DESTROYED };

struct cublasContext {
    int state;
    cudaStream_t stream;
    int pointer_mode;
    int math_mode;
    void *workspace; /* cublasSetWorkspace's buffer; NULL: the handle's own */
    size_t workspace_bytes;
};

static struct cublasContext handles[MAX_HANDLES];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* The lock is made anew in a forked child (a parent thread may have held it); the runtime
 * tells whether CUDA is usable there. */
static void after_fork_in_child(void) { pthread_mutex_init(&lock, NULL); }

__attribute__((constructor)) static void register_fork_handler(void) { pthread_atfork(NULL, NULL, after_fork_in_child); }

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
    if (!cudashim_reserve(HANDLE_WORKSPACE)) return CUBLAS_STATUS_NOT_INITIALIZED;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_HANDLES; i++) {
        if (handles[i].state == UNUSED) {
            handles[i] = (struct cublasContext){ALIVE, NULL, CUBLAS_POINTER_MODE_HOST, CUBLAS_DEFAULT_MATH, NULL, 0};
            pthread_mutex_unlock(&lock);
            *handle = &handles[i];
            return CUBLAS_STATUS_SUCCESS;
        }
    }
    pthread_mutex_unlock(&lock);
    cudashim_release(HANDLE_WORKSPACE);
    return CUBLAS_STATUS_ALLOC_FAILED;
}

/* For cublas_blas.c: the handle's stream (NULL when the handle is not alive). */
__attribute__((visibility("hidden"))) cudaStream_t cublasshim_stream(cublasHandle_t handle) {
    struct cublasContext *h = alive(handle);
    return h ? h->stream : NULL;
}

/* For cublas_blas.c: the handle's pointer mode, or -1 when the handle is not alive. */
__attribute__((visibility("hidden"))) int cublasshim_pointer_mode(cublasHandle_t handle) {
    struct cublasContext *h = alive(handle);
    return h ? h->pointer_mode : -1;
}

/* A "kernel" writes its scratch data to the handle's workspace: one the program freed (or
 * never had) is an illegal address. */
__attribute__((visibility("hidden"))) int cublasshim_workspace_ok(cublasHandle_t handle) {
    struct cublasContext *h = alive(handle);
    return !h || !h->workspace_bytes || cudashim_is_device_range(h->workspace, h->workspace_bytes);
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace, size_t workspaceSizeInBytes) {
    struct cublasContext *h = alive(handle);
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    /* Like cuBLAS, the buffer is taken on trust here and used by later calls. */
    h->workspace = workspace;
    h->workspace_bytes = workspace ? workspaceSizeInBytes : 0;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
    struct cublasContext *h = alive(handle);
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->state = DESTROYED; /* never reused, so a stale handle stays recognisable */
    cudashim_release(HANDLE_WORKSPACE);
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

/* ---- the GEMM family: one core for every type, batch form and integer width ---- */

/* An operand: a single matrix, a strided batch, or an array (in device memory) of matrices. */
struct operand {
    const void *ptr;          /* the matrix, the first of a strided batch, or the pointer array */
    int type;
    int64_t ld;
    int64_t stride;           /* elements between strided batch members */
    int pointer_array;
};

static int64_t max1(int64_t v) { return v > 1 ? v : 1; }

/* Bytes a column-major rows x cols matrix with leading dimension ld spans. */
static size_t extent(int64_t rows, int64_t cols, int64_t ld, size_t elem) {
    if (rows <= 0 || cols <= 0) return 0;
    return ((size_t)ld * (size_t)(cols - 1) + (size_t)rows) * elem;
}

/* The matrix of batch member b, or NULL when the kernel could not reach it. */
static const void *member(const struct operand *op, int64_t b, size_t bytes) {
    const void *m;
    if (op->pointer_array) {
        const void *const *array = (const void *const *)op->ptr;
        if (!cudashim_is_device_range(&array[b], sizeof(void *))) return NULL;
        m = array[b];
    } else {
        m = (const char *)op->ptr + (ptrdiff_t)(b * op->stride) * (ptrdiff_t)element_size(op->type);
    }
    return (bytes == 0 || cudashim_is_device_range(m, bytes)) ? m : NULL;
}

static double at(const void *m, int type, int op, int64_t ld, int64_t row, int64_t col) {
    return op == CUBLAS_OP_N ? load_element(type, m, (size_t)(col * ld + row)) : load_element(type, m, (size_t)(row * ld + col));
}

/* A queued GEMM: everything the kernel needs, copied at the launch. */
struct gemm_work {
    int transa, transb;
    int64_t m, n, k;
    int scale;
    struct operand A, B, C;
    int64_t batch;
    int compute, pointer_mode;
    const void *alpha, *beta; /* device-mode scalars: read when the kernel runs */
    double a_scale, b_scale;  /* host-mode scalars: read at the launch */
    double _Complex a_cx, b_cx; /* the same, for a complex GEMM */
    int faults;               /* CUDASHIM_ASYNC_FAULT picked this launch */
    void *workspace;
    size_t workspace_bytes;
};

/* A device-mode scalar, read by the kernel; 0 when it is unreachable. */
static int scalar_at(const void *p, int type, double *out) {
    if (!cudashim_is_device_range(p, element_size(type))) return 0;
    *out = load_element(type, p, 0);
    return 1;
}

/* A complex element (C_32F, C_64F, C_8I), widened to double. */
static double _Complex load_complex(int type, const void *base, size_t i) {
    switch (type) {
    case C_32F: return CMPLX(((const float *)base)[2 * i], ((const float *)base)[2 * i + 1]);
    case C_64F: return CMPLX(((const double *)base)[2 * i], ((const double *)base)[2 * i + 1]);
    case C_8I: return CMPLX(((const int8_t *)base)[2 * i], ((const int8_t *)base)[2 * i + 1]);
    default: return 0;
    }
}

static void store_complex(int type, void *base, size_t i, double _Complex v) {
    if (type == C_32F) {
        ((float *)base)[2 * i] = (float)creal(v);
        ((float *)base)[2 * i + 1] = (float)cimag(v);
    } else if (type == C_64F) {
        ((double *)base)[2 * i] = creal(v);
        ((double *)base)[2 * i + 1] = cimag(v);
    }
}

/* op(M)[row][col] of a complex column-major matrix (CUBLAS_OP_C conjugates). */
static double _Complex at_complex(const void *m, int type, int op, int64_t ld, int64_t row, int64_t col) {
    if (op == CUBLAS_OP_N) return load_complex(type, m, (size_t)(col * ld + row));
    double _Complex v = load_complex(type, m, (size_t)(row * ld + col));
    return op == CUBLAS_OP_C ? conj(v) : v;
}

/* The complex GEMMs of cublasGemmEx and its batched forms, once every member is reachable. */
static int run_complex_gemm(const struct gemm_work *w, size_t a_bytes, size_t b_bytes, size_t c_bytes) {
    double _Complex alpha = w->a_cx, beta = w->b_cx;
    if (w->pointer_mode == CUBLAS_POINTER_MODE_DEVICE) {
        if (!cudashim_is_device_range(w->alpha, element_size(w->scale)) || !cudashim_is_device_range(w->beta, element_size(w->scale)))
            return cudaErrorIllegalAddress;
        alpha = load_complex(w->scale, w->alpha, 0);
        beta = load_complex(w->scale, w->beta, 0);
    }
    for (int64_t bi = 0; bi < w->batch; bi++) {
        const void *a = member(&w->A, bi, a_bytes), *b = member(&w->B, bi, b_bytes);
        void *c = (void *)member(&w->C, bi, c_bytes);
        for (int64_t col = 0; col < w->n; col++) {
            for (int64_t row = 0; row < w->m; row++) {
                double _Complex sum = 0;
                for (int64_t p = 0; p < w->k; p++)
                    sum += at_complex(a, w->A.type, w->transa, w->A.ld, row, p) * at_complex(b, w->B.type, w->transb, w->B.ld, p, col);
                size_t i = (size_t)(col * w->C.ld + row);
                /* beta == 0: C is not read */
                double _Complex v = beta == 0 ? alpha * sum : alpha * sum + beta * load_complex(w->C.type, c, i);
                store_complex(w->C.type, c, i, v);
            }
        }
    }
    return 0;
}

/* The kernel, on the stand-in GPU: 0, or the fault that breaks the context. */
static int run_gemm(void *arg) {
    const struct gemm_work *w = arg;
    int transa = w->transa, transb = w->transb, scale = w->scale, compute = w->compute;
    int64_t m = w->m, n = w->n, k = w->k, batch = w->batch;
    struct operand A = w->A, B = w->B, C = w->C;
    int64_t a_rows = transa == CUBLAS_OP_N ? m : k, a_cols = transa == CUBLAS_OP_N ? k : m;
    int64_t b_rows = transb == CUBLAS_OP_N ? k : n, b_cols = transb == CUBLAS_OP_N ? n : k;
    double a_scale = w->a_scale, b_scale = w->b_scale;
    if (w->faults || (w->workspace_bytes && !cudashim_is_device_range(w->workspace, w->workspace_bytes))) return cudaErrorIllegalAddress;
    if (w->pointer_mode == CUBLAS_POINTER_MODE_DEVICE && !is_complex_type(C.type) &&
        !(scalar_at(w->alpha, scale, &a_scale) && scalar_at(w->beta, scale, &b_scale)))
        return cudaErrorIllegalAddress;
    size_t a_bytes = k ? extent(a_rows, a_cols, A.ld, element_size(A.type)) : 0;
    size_t b_bytes = k ? extent(b_rows, b_cols, B.ld, element_size(B.type)) : 0;
    size_t c_bytes = extent(m, n, C.ld, element_size(C.type));
    for (int64_t bi = 0; bi < batch; bi++) { /* every member reachable, or nothing is computed */
        if ((a_bytes && !member(&A, bi, a_bytes)) || (b_bytes && !member(&B, bi, b_bytes)) || !member(&C, bi, c_bytes)) {
            return cudaErrorIllegalAddress;
        }
    }
    if (is_complex_type(C.type)) return run_complex_gemm(w, a_bytes, b_bytes, c_bytes);
    int half_accumulation = compute == CUBLAS_COMPUTE_16F || compute == CUBLAS_COMPUTE_16F_PEDANTIC ||
                            (compute < 0 && C.type == R_16F && A.type == R_16F);
    for (int64_t bi = 0; bi < batch; bi++) {
        const void *a = member(&A, bi, a_bytes), *b = member(&B, bi, b_bytes);
        void *c = (void *)member(&C, bi, c_bytes);
        for (int64_t col = 0; col < n; col++) {
            for (int64_t row = 0; row < m; row++) {
                double sum = 0;
                for (int64_t p = 0; p < k; p++) {
                    sum += at(a, A.type, transa, A.ld, row, p) * at(b, B.type, transb, B.ld, p, col);
                    /* fp16 accumulation, as the tensor cores do it: each partial sum is a half,
                     * so it overflows to Inf past 65504 even when the final sum would not */
                    if (half_accumulation) sum = half_to_float(float_to_half((float)sum));
                }
                size_t i = (size_t)(col * C.ld + row);
                /* beta == 0: C is not read */
                double v = b_scale == 0 ? a_scale * sum : a_scale * sum + b_scale * load_element(C.type, c, i);
                store_element(C.type, c, i, v);
            }
        }
    }
    return 0;
}

/* compute < 0: a typed GEMM (no type combination to check). */
static cublasStatus_t gemm_core(const char *name, cublasHandle_t handle, int transa, int transb, int64_t m, int64_t n,
                                int64_t k, const void *alpha, const void *beta, int scale, struct operand A,
                                struct operand B, struct operand C, int64_t batch, int compute) {
    struct cublasContext *h = alive(handle);
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    int ok_a = transa == CUBLAS_OP_N || transa == CUBLAS_OP_T || transa == CUBLAS_OP_C;
    int ok_b = transb == CUBLAS_OP_N || transb == CUBLAS_OP_T || transb == CUBLAS_OP_C;
    if (m < 0 || n < 0 || k < 0 || batch < 0 || !ok_a || !ok_b) return CUBLAS_STATUS_INVALID_VALUE;
    int64_t a_rows = transa == CUBLAS_OP_N ? m : k, b_rows = transb == CUBLAS_OP_N ? k : n;
    if (A.ld < max1(a_rows) || B.ld < max1(b_rows) || C.ld < max1(m) || !alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
    int complex_c = is_complex_type(C.type);
    if (compute >= 0 && (A.type != B.type || scale_type_of(compute) < 0 ||
                         !(complex_c ? supported_complex_combination(compute, A.type, C.type)
                                     : supported_combination(compute, A.type, C.type))))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if (complex_c) scale = C.type; /* the table's scale type: C_32F or C_64F */
    int injected = cudashim_inject(name);
    if (injected) return injected;
    if (cudashim_sticky_error()) return CUBLAS_STATUS_EXECUTION_FAILED;
    if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;

    /* From here on this is the "kernel", queued: it reports problems when it runs. */
    struct gemm_work w = {transa, transb, m, n, k, scale, A, B, C, batch, compute, h->pointer_mode, alpha, beta, 0, 0, 0, 0,
                          cudashim_next_launch_faults(), h->workspace, h->workspace_bytes};
    /* Host-mode scalars: read now, as cuBLAS does (the caller's variables may be gone later). */
    if (h->pointer_mode == CUBLAS_POINTER_MODE_HOST) {
        w.a_scale = load_element(scale, alpha, 0);
        w.b_scale = load_element(scale, beta, 0);
        if (complex_c) {
            w.a_cx = load_complex(scale, alpha, 0);
            w.b_cx = load_complex(scale, beta, 0);
        }
    }
    int status = cudashim_submit(h->stream, run_gemm, &w, sizeof w);
    return status ? CUBLAS_STATUS_EXECUTION_FAILED : CUBLAS_STATUS_SUCCESS;
}

#define PLAIN(p, t, l) ((struct operand){(p), (t), (l), 0, 0})
#define STRIDED(p, t, l, s) ((struct operand){(p), (t), (l), (s), 0})
#define ARRAY(p, t, l) ((struct operand){(p), (t), (l), 0, 1})

/* Typed GEMMs, in `int` and `int64_t` widths. */
#define TYPED_GEMM(NAME, T, TYPE, INT)                                                                              \
    cublasStatus_t NAME(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, INT m, INT n,     \
                        INT k, const T *alpha, const T *A, INT lda, const T *B, INT ldb, const T *beta, T *C,       \
                        INT ldc) {                                                                                  \
        return gemm_core(#NAME, handle, transa, transb, m, n, k, alpha, beta, TYPE, PLAIN(A, TYPE, lda),          \
                         PLAIN(B, TYPE, ldb), PLAIN(C, TYPE, ldc), 1, -1);                                        \
    }
TYPED_GEMM(cublasSgemm_v2, float, R_32F, int)
TYPED_GEMM(cublasSgemm_v2_64, float, R_32F, int64_t)
TYPED_GEMM(cublasDgemm_v2, double, R_64F, int)
TYPED_GEMM(cublasDgemm_v2_64, double, R_64F, int64_t)
TYPED_GEMM(cublasHgemm, __half, R_16F, int)
TYPED_GEMM(cublasHgemm_64, __half, R_16F, int64_t)

#define TYPED_STRIDED(NAME, T, TYPE, INT)                                                                           \
    cublasStatus_t NAME(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, INT m, INT n,     \
                        INT k, const T *alpha, const T *A, INT lda, long long strideA, const T *B, INT ldb,         \
                        long long strideB, const T *beta, T *C, INT ldc, long long strideC, INT batchCount) {       \
        return gemm_core(#NAME, handle, transa, transb, m, n, k, alpha, beta, TYPE, STRIDED(A, TYPE, lda, strideA), \
                         STRIDED(B, TYPE, ldb, strideB), STRIDED(C, TYPE, ldc, strideC), batchCount, -1);           \
    }
TYPED_STRIDED(cublasSgemmStridedBatched, float, R_32F, int)
TYPED_STRIDED(cublasSgemmStridedBatched_64, float, R_32F, int64_t)
TYPED_STRIDED(cublasDgemmStridedBatched, double, R_64F, int)
TYPED_STRIDED(cublasDgemmStridedBatched_64, double, R_64F, int64_t)
TYPED_STRIDED(cublasHgemmStridedBatched, __half, R_16F, int)
TYPED_STRIDED(cublasHgemmStridedBatched_64, __half, R_16F, int64_t)

#define SGEMM_BATCHED(NAME, INT)                                                                                    \
    cublasStatus_t NAME(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, INT m, INT n,     \
                        INT k, const float *alpha, const float *const Aarray[], INT lda, const float *const Barray[], \
                        INT ldb, const float *beta, float *const Carray[], INT ldc, INT batchCount) {               \
        return gemm_core(#NAME, handle, transa, transb, m, n, k, alpha, beta, R_32F, ARRAY(Aarray, R_32F, lda),    \
                         ARRAY(Barray, R_32F, ldb), ARRAY(Carray, R_32F, ldc), batchCount, -1);                     \
    }
SGEMM_BATCHED(cublasSgemmBatched, int)
SGEMM_BATCHED(cublasSgemmBatched_64, int64_t)

#define GEMM_EX(NAME, INT)                                                                                          \
    cublasStatus_t NAME(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, INT m, INT n,     \
                        INT k, const void *alpha, const void *A, cudaDataType Atype, INT lda, const void *B,        \
                        cudaDataType Btype, INT ldb, const void *beta, void *C, cudaDataType Ctype, INT ldc,        \
                        cublasComputeType_t computeType, cublasGemmAlgo_t algo) {                                   \
        (void)algo;                                                                                                 \
        return gemm_core(#NAME, handle, transa, transb, m, n, k, alpha, beta, scale_type_of(computeType),          \
                         PLAIN(A, Atype, lda), PLAIN(B, Btype, ldb), PLAIN(C, Ctype, ldc), 1, computeType);         \
    }
GEMM_EX(cublasGemmEx, int)

/* cublasSgemmEx: cublasGemmEx with float scalars and CUBLAS_COMPUTE_32F. */
cublasStatus_t cublasSgemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                             int k, const float *alpha, const void *A, cudaDataType Atype, int lda, const void *B,
                             cudaDataType Btype, int ldb, const float *beta, void *C, cudaDataType Ctype, int ldc) {
    return gemm_core("cublasSgemmEx", handle, transa, transb, m, n, k, alpha, beta, R_32F, PLAIN(A, Atype, lda),
                     PLAIN(B, Btype, ldb), PLAIN(C, Ctype, ldc), 1, CUBLAS_COMPUTE_32F);
}
GEMM_EX(cublasGemmEx_64, int64_t)

#define GEMM_STRIDED_EX(NAME, INT)                                                                                  \
    cublasStatus_t NAME(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, INT m, INT n,     \
                        INT k, const void *alpha, const void *A, cudaDataType Atype, INT lda, long long strideA,    \
                        const void *B, cudaDataType Btype, INT ldb, long long strideB, const void *beta, void *C,   \
                        cudaDataType Ctype, INT ldc, long long strideC, INT batchCount,                             \
                        cublasComputeType_t computeType, cublasGemmAlgo_t algo) {                                   \
        (void)algo;                                                                                                 \
        return gemm_core(#NAME, handle, transa, transb, m, n, k, alpha, beta, scale_type_of(computeType),          \
                         STRIDED(A, Atype, lda, strideA), STRIDED(B, Btype, ldb, strideB),                          \
                         STRIDED(C, Ctype, ldc, strideC), batchCount, computeType);                                 \
    }
GEMM_STRIDED_EX(cublasGemmStridedBatchedEx, int)
GEMM_STRIDED_EX(cublasGemmStridedBatchedEx_64, int64_t)

#define GEMM_BATCHED_EX(NAME, INT)                                                                                  \
    cublasStatus_t NAME(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, INT m, INT n,     \
                        INT k, const void *alpha, const void *const Aarray[], cudaDataType Atype, INT lda,          \
                        const void *const Barray[], cudaDataType Btype, INT ldb, const void *beta,                  \
                        void *const Carray[], cudaDataType Ctype, INT ldc, INT batchCount,                          \
                        cublasComputeType_t computeType, cublasGemmAlgo_t algo) {                                   \
        (void)algo;                                                                                                 \
        return gemm_core(#NAME, handle, transa, transb, m, n, k, alpha, beta, scale_type_of(computeType),          \
                         ARRAY(Aarray, Atype, lda), ARRAY(Barray, Btype, ldb), ARRAY(Carray, Ctype, ldc),           \
                         batchCount, computeType);                                                                  \
    }
GEMM_BATCHED_EX(cublasGemmBatchedEx, int)
GEMM_BATCHED_EX(cublasGemmBatchedEx_64, int64_t)
