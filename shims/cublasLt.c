/* Stand-in libcublasLt.so.12: handles, layout / matmul / preference descriptors with their
 * attributes, a one-answer heuristic, and cublasLtMatmul with the bias, ReLU and GELU
 * epilogues, computed on the CPU. Like NVIDIA's, layouts are not validated when created, only
 * when a matmul uses them. The matmul is checked at the call and its kernel queued on the
 * stream argument; an unreachable operand faults when it runs, as in cublas.c. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "elements.h"
#include "engine.h"
#include "include/cublasLt.h"

int cudashim_inject(const char *function);
int cudashim_driver_error(void);
int cudashim_sticky_error(void);
int cudashim_is_device_range(const void *ptr, size_t bytes);
int cudashim_next_launch_faults(void);
void cudashim_raise_async(int code);
int cudashim_submit(cudaStream_t stream, shim_work_fn fn, const void *arg, size_t size);

#define LAYOUT_MAGIC 0x4c41594fu
#define DESC_MAGIC 0x44455343u
#define PREF_MAGIC 0x50524546u
#define MAX_HANDLES 1024

struct layout {
    uint32_t magic;
    uint32_t type;
    int32_t order;
    int32_t batch;
    uint64_t rows, cols;
    int64_t ld, stride;
};

struct desc {
    uint32_t magic;
    int32_t compute, scale, pointer_mode, transa, transb;
    uint32_t epilogue;
    const void *bias;
    int64_t bias_stride;
    int32_t bias_type;
};

/* A preference keeps what was set, for cublasLtMatmulPreferenceGetAttribute to read back; the
 * heuristic uses only the workspace limit. */
struct pref {
    uint32_t magic;
    uint64_t max_workspace;
    uint32_t search_mode;
    uint32_t reduction_mask;
    uint32_t min_alignment[4]; /* A, B, C, D */
    float max_waves;
    uint64_t impl_mask;
};

/* An attribute's field and size, as NVIDIA's cublasLt.h types them; NULL for one it lacks. */
static void *pref_field(struct pref *p, int attr, size_t *size) {
    switch (attr) {
    case 0: *size = 4; return &p->search_mode;
    case 1: *size = 8; return &p->max_workspace;
    case 3: *size = 4; return &p->reduction_mask;
    case 5: case 6: case 7: case 8: *size = 4; return &p->min_alignment[attr - 5];
    case 9: *size = 4; return &p->max_waves;
    case 12: *size = 8; return &p->impl_mask;
    default: return NULL;
    }
}

struct cublasLtContext {
    int alive;
};

static struct cublasLtContext handles[MAX_HANDLES];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* The lock is made anew in a forked child (a parent thread may have held it); the runtime
 * tells whether CUDA is usable there. */
static void after_fork_in_child(void) { pthread_mutex_init(&lock, NULL); }

__attribute__((constructor)) static void register_fork_handler(void) { pthread_atfork(NULL, NULL, after_fork_in_child); }

static struct cublasLtContext *alive(cublasLtHandle_t h) {
    uintptr_t p = (uintptr_t)h, first = (uintptr_t)&handles[0];
    if (p < first || p >= first + sizeof handles || (p - first) % sizeof handles[0]) return NULL;
    return h->alive == 1 ? h : NULL;
}

static struct layout *as_layout(cublasLtMatrixLayout_t l) {
    return l && ((struct layout *)l)->magic == LAYOUT_MAGIC ? (struct layout *)l : NULL;
}
static struct desc *as_desc(cublasLtMatmulDesc_t d) {
    return d && ((struct desc *)d)->magic == DESC_MAGIC ? (struct desc *)d : NULL;
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t *lightHandle) {
    if (!lightHandle) return CUBLAS_STATUS_INVALID_VALUE;
    int injected = cudashim_inject("cublasLtCreate");
    if (injected) return injected;
    if (cudashim_driver_error()) return CUBLAS_STATUS_NOT_INITIALIZED;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_HANDLES; i++) {
        if (handles[i].alive == 0) {
            handles[i].alive = 1;
            pthread_mutex_unlock(&lock);
            *lightHandle = &handles[i];
            return CUBLAS_STATUS_SUCCESS;
        }
    }
    pthread_mutex_unlock(&lock);
    return CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
    struct cublasLtContext *h = alive(lightHandle);
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->alive = 2; /* never reused */
    return CUBLAS_STATUS_SUCCESS;
}

/* CUDASHIM_CUBLASLT_VERSION=N: what cublasLtGetVersion reports (default 120903, cuBLAS's own
 * release), for a copy of this library posing as another release. */
size_t cublasLtGetVersion(void) {
    const char *v = getenv("CUDASHIM_CUBLASLT_VERSION");
    return (v && *v) ? (size_t)strtoull(v, NULL, 10) : 120903;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
    if (!matLayout) return CUBLAS_STATUS_INVALID_VALUE;
    struct layout *l = calloc(1, sizeof *l);
    if (!l) return CUBLAS_STATUS_ALLOC_FAILED;
    *l = (struct layout){LAYOUT_MAGIC, (uint32_t)type, CUBLASLT_ORDER_COL, 1, rows, cols, ld, 0};
    *matLayout = (cublasLtMatrixLayout_t)l;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
    struct layout *l = as_layout(matLayout);
    if (!l) return CUBLAS_STATUS_INVALID_VALUE;
    l->magic = 0;
    free(l);
    return CUBLAS_STATUS_SUCCESS;
}

/* Where attribute `attr` lives and how big it is; NULL for an unknown attribute. */
static void *layout_field(struct layout *l, int attr, size_t *size) {
    switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: *size = 4; return &l->type;
    case CUBLASLT_MATRIX_LAYOUT_ORDER: *size = 4; return &l->order;
    case CUBLASLT_MATRIX_LAYOUT_ROWS: *size = 8; return &l->rows;
    case CUBLASLT_MATRIX_LAYOUT_COLS: *size = 8; return &l->cols;
    case CUBLASLT_MATRIX_LAYOUT_LD: *size = 8; return &l->ld;
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: *size = 4; return &l->batch;
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: *size = 8; return &l->stride;
    default: return NULL;
    }
}

static void *desc_field(struct desc *d, int attr, size_t *size) {
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: *size = 4; return &d->compute;
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: *size = 4; return &d->scale;
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: *size = 4; return &d->pointer_mode;
    case CUBLASLT_MATMUL_DESC_TRANSA: *size = 4; return &d->transa;
    case CUBLASLT_MATMUL_DESC_TRANSB: *size = 4; return &d->transb;
    case CUBLASLT_MATMUL_DESC_EPILOGUE: *size = 4; return &d->epilogue;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: *size = sizeof(void *); return &d->bias;
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: *size = 8; return &d->bias_stride;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: *size = 4; return &d->bias_type;
    default: return NULL;
    }
}

static cublasStatus_t set_field(void *field, size_t size, const void *buf, size_t sizeInBytes) {
    if (!field || !buf || sizeInBytes != size) return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(field, buf, size);
    return CUBLAS_STATUS_SUCCESS;
}

/* NVIDIA's convention: with sizeInBytes == 0, only the size is reported. */
static cublasStatus_t get_field(const void *field, size_t size, void *buf, size_t sizeInBytes, size_t *sizeWritten) {
    if (!field) return CUBLAS_STATUS_INVALID_VALUE;
    if (sizeInBytes == 0 && sizeWritten) {
        *sizeWritten = size;
        return CUBLAS_STATUS_SUCCESS;
    }
    if (!buf || sizeInBytes < size) return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(buf, field, size);
    if (sizeWritten) *sizeWritten = size;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void *buf, size_t sizeInBytes) {
    struct layout *l = as_layout(matLayout);
    size_t size = 0;
    void *field = l ? layout_field(l, attr, &size) : NULL; /* before `size` is read */
    return set_field(field, size, buf, sizeInBytes);
}

/* CUDASHIM_LT_NO_QUERIES=1: attributes cannot be read back (for the test that the guard reads
 * them from what the program set, not from cuBLASLt). */
static int queries_refused(void) {
    const char *v = getenv("CUDASHIM_LT_NO_QUERIES");
    return v && *v == '1';
}

cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t matLayout, cublasLtMatrixLayoutAttribute_t attr,
                                                void *buf, size_t sizeInBytes, size_t *sizeWritten) {
    if (queries_refused()) return CUBLAS_STATUS_NOT_SUPPORTED;
    struct layout *l = as_layout(matLayout);
    size_t size = 0;
    void *field = l ? layout_field(l, attr, &size) : NULL;
    return get_field(field, size, buf, sizeInBytes, sizeWritten);
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
    if (!matmulDesc) return CUBLAS_STATUS_INVALID_VALUE;
    struct desc *d = calloc(1, sizeof *d);
    if (!d) return CUBLAS_STATUS_ALLOC_FAILED;
    *d = (struct desc){DESC_MAGIC, computeType, scaleType, 0, CUBLAS_OP_N, CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT, NULL, 0, -1};
    *matmulDesc = (cublasLtMatmulDesc_t)d;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
    struct desc *d = as_desc(matmulDesc);
    if (!d) return CUBLAS_STATUS_INVALID_VALUE;
    d->magic = 0;
    free(d);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t sizeInBytes) {
    struct desc *d = as_desc(matmulDesc);
    size_t size = 0;
    void *field = d ? desc_field(d, attr, &size) : NULL;
    return set_field(field, size, buf, sizeInBytes);
}

cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              void *buf, size_t sizeInBytes, size_t *sizeWritten) {
    if (queries_refused()) return CUBLAS_STATUS_NOT_SUPPORTED;
    struct desc *d = as_desc(matmulDesc);
    size_t size = 0;
    void *field = d ? desc_field(d, attr, &size) : NULL;
    return get_field(field, size, buf, sizeInBytes, sizeWritten);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
    if (!pref) return CUBLAS_STATUS_INVALID_VALUE;
    struct pref *p = calloc(1, sizeof *p);
    if (!p) return CUBLAS_STATUS_ALLOC_FAILED;
    p->magic = PREF_MAGIC;
    *pref = (cublasLtMatmulPreference_t)p;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    struct pref *p = (struct pref *)pref;
    if (!p || p->magic != PREF_MAGIC) return CUBLAS_STATUS_INVALID_VALUE;
    p->magic = 0;
    free(p);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t sizeInBytes) {
    struct pref *p = (struct pref *)pref;
    if (!p || p->magic != PREF_MAGIC || !buf) return CUBLAS_STATUS_INVALID_VALUE;
    size_t size = 0;
    void *field = pref_field(p, (int)attr, &size);
    if (!field || sizeInBytes != size) return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(field, buf, size);
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, void *buf,
                                                    size_t sizeInBytes, size_t *sizeWritten) {
    struct pref *p = (struct pref *)pref;
    if (!p || p->magic != PREF_MAGIC) return CUBLAS_STATUS_INVALID_VALUE;
    size_t size = 0;
    void *field = pref_field(p, (int)attr, &size);
    return get_field(field, size, buf, sizeInBytes, sizeWritten);
}

/* A layout as op() sees it: rows x cols after the transpose. */
static void op_dims(const struct layout *l, int op, uint64_t *rows, uint64_t *cols) {
    *rows = op == CUBLAS_OP_N ? l->rows : l->cols;
    *cols = op == CUBLAS_OP_N ? l->cols : l->rows;
}

/* The checks cublasLtMatmul makes (it makes them here, not at layout creation). */
static cublasStatus_t validate(const struct desc *d, const struct layout *a, const struct layout *b,
                               const struct layout *c, const struct layout *dd) {
    if (!d || !a || !b || !c || !dd) return CUBLAS_STATUS_INVALID_VALUE;
    uint64_t ar, ac, br, bc;
    op_dims(a, d->transa, &ar, &ac);
    op_dims(b, d->transb, &br, &bc);
    if (ar != dd->rows || bc != dd->cols || ac != br || c->rows != dd->rows || c->cols != dd->cols)
        return CUBLAS_STATUS_INVALID_VALUE;
    const struct layout *all[] = {a, b, c, dd};
    for (int i = 0; i < 4; i++) {
        const struct layout *l = all[i];
        uint64_t need = l->order == CUBLASLT_ORDER_ROW ? l->cols : l->rows;
        if (l->ld < 1 || (uint64_t)l->ld < need || (l->order != CUBLASLT_ORDER_COL && l->order != CUBLASLT_ORDER_ROW))
            return CUBLAS_STATUS_INVALID_VALUE;
        if (l->batch != dd->batch) return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (a->type != b->type || c->type != dd->type || !supported_combination(d->compute, a->type, dd->type))
        return CUBLAS_STATUS_NOT_SUPPORTED;
    if ((d->epilogue & CUBLASLT_EPILOGUE_BIAS) && !d->bias) return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int *returnAlgoCount) {
    (void)preference;
    if (!alive(lightHandle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (requestedAlgoCount < 1 || !heuristicResultsArray || !returnAlgoCount) return CUBLAS_STATUS_INVALID_VALUE;
    cublasStatus_t st = validate(as_desc(operationDesc), as_layout(Adesc), as_layout(Bdesc), as_layout(Cdesc), as_layout(Ddesc));
    if (st) return st;
    memset(&heuristicResultsArray[0], 0, sizeof heuristicResultsArray[0]);
    heuristicResultsArray[0].state = CUBLAS_STATUS_SUCCESS;
    heuristicResultsArray[0].wavesCount = 1.0f;
    *returnAlgoCount = 1;
    return CUBLAS_STATUS_SUCCESS;
}

static size_t layout_bytes(const struct layout *l) {
    uint64_t major = l->order == CUBLASLT_ORDER_ROW ? l->rows : l->cols;
    uint64_t minor = l->order == CUBLASLT_ORDER_ROW ? l->cols : l->rows;
    if (major == 0 || minor == 0) return 0;
    return ((size_t)l->ld * (major - 1) + minor) * element_size((int)l->type);
}

static size_t index_of(const struct layout *l, uint64_t row, uint64_t col) {
    return l->order == CUBLASLT_ORDER_ROW ? (size_t)(row * (uint64_t)l->ld + col) : (size_t)(col * (uint64_t)l->ld + row);
}

static double element(const struct layout *l, const void *base, int op, uint64_t row, uint64_t col) {
    return op == CUBLAS_OP_N ? load_element((int)l->type, base, index_of(l, row, col))
                             : load_element((int)l->type, base, index_of(l, col, row));
}

static const void *batch_member(const void *p, const struct layout *l, int32_t b) {
    return (const char *)p + (ptrdiff_t)(b * l->stride) * (ptrdiff_t)element_size((int)l->type);
}

/* A queued matmul: the descriptor and layouts as they were at the launch, host scalars read. */
struct matmul_work {
    struct desc d;
    struct layout a, b, c, dd;
    const void *A, *B, *C, *alpha, *beta;
    void *D, *workspace;
    size_t workspace_bytes;
    uint64_t m, n, k;
    double al, be;
    int faults;
};

static int run_matmul(void *arg) {
    struct matmul_work *w = arg;
    const struct desc *d = &w->d;
    const struct layout *a = &w->a, *b = &w->b, *c = &w->c, *dd = &w->dd;
    const void *A = w->A, *B = w->B, *C = w->C;
    void *D = w->D;
    uint64_t m = w->m, n = w->n, k = w->k;
    if (w->faults) return cudaErrorIllegalAddress;
    int scale = d->scale, device_scalars = d->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
    if (device_scalars && !(cudashim_is_device_range(w->alpha, element_size(scale)) && cudashim_is_device_range(w->beta, element_size(scale))))
        return cudaErrorIllegalAddress;
    double al = device_scalars ? load_element(scale, w->alpha, 0) : w->al, be = device_scalars ? load_element(scale, w->beta, 0) : w->be;
    int bias_type = d->bias_type >= 0 ? d->bias_type : (int)dd->type;
    int has_bias = (d->epilogue & CUBLASLT_EPILOGUE_BIAS) != 0;
    if (w->workspace_bytes > 0 && !cudashim_is_device_range(w->workspace, w->workspace_bytes)) return cudaErrorIllegalAddress;
    for (int32_t bi = 0; bi < dd->batch; bi++) {
        int ok = (k == 0 || (cudashim_is_device_range(batch_member(A, a, bi), layout_bytes(a)) &&
                             cudashim_is_device_range(batch_member(B, b, bi), layout_bytes(b)))) &&
                 (be == 0 || cudashim_is_device_range(batch_member(C, c, bi), layout_bytes(c))) &&
                 cudashim_is_device_range(batch_member(D, dd, bi), layout_bytes(dd)) &&
                 (!has_bias || cudashim_is_device_range((const char *)d->bias + (size_t)(bi * d->bias_stride) * element_size(bias_type),
                                                        m * element_size(bias_type)));
        if (!ok) return cudaErrorIllegalAddress;
    }
    for (int32_t bi = 0; bi < dd->batch; bi++) {
        const void *pa = batch_member(A, a, bi), *pb = batch_member(B, b, bi), *pc = batch_member(C, c, bi);
        void *pd = (void *)batch_member(D, dd, bi);
        const void *bias = has_bias ? (const char *)d->bias + (size_t)(bi * d->bias_stride) * element_size(bias_type) : NULL;
        for (uint64_t col = 0; col < n; col++) {
            for (uint64_t row = 0; row < m; row++) {
                double sum = 0;
                for (uint64_t p = 0; p < k; p++) sum += element(a, pa, d->transa, row, p) * element(b, pb, d->transb, p, col);
                double v = al * sum;
                if (be != 0) v += be * load_element((int)c->type, pc, index_of(c, row, col));
                if (bias) v += load_element(bias_type, bias, row);
                if (d->epilogue & CUBLASLT_EPILOGUE_RELU) v = v < 0 ? 0 : v;
                if (d->epilogue & CUBLASLT_EPILOGUE_GELU) v = 0.5 * v * (1 + tanh(0.7978845608 * (v + 0.044715 * v * v * v)));
                store_element((int)dd->type, pd, index_of(dd, row, col), v);
            }
        }
    }
    return 0;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void *alpha,
                              const void *A, cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc,
                              const void *beta, const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream) {
    (void)algo;
    if (!alive(lightHandle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    const struct desc *d = as_desc(computeDesc);
    const struct layout *a = as_layout(Adesc), *b = as_layout(Bdesc), *c = as_layout(Cdesc), *dd = as_layout(Ddesc);
    cublasStatus_t st = validate(d, a, b, c, dd);
    if (st) return st;
    if (!alpha || !beta) return CUBLAS_STATUS_INVALID_VALUE;
    int injected = cudashim_inject("cublasLtMatmul");
    if (injected) return injected;
    if (cudashim_sticky_error()) return CUBLAS_STATUS_EXECUTION_FAILED;
    uint64_t m = dd->rows, n = dd->cols, k = d->transa == CUBLAS_OP_N ? a->cols : a->rows;
    if (m == 0 || n == 0 || dd->batch == 0) return CUBLAS_STATUS_SUCCESS;

    /* The "kernel", queued on `stream`. */
    struct matmul_work w = {*d, *a, *b, *c, *dd, A, B, C, alpha, beta, D, workspace, workspaceSizeInBytes, m, n, k,
                            0, 0, cudashim_next_launch_faults()};
    if (d->pointer_mode != CUBLAS_POINTER_MODE_DEVICE) {
        w.al = load_element(d->scale, alpha, 0);
        w.be = load_element(d->scale, beta, 0);
    }
    return cudashim_submit(stream, run_matmul, &w, sizeof w) ? CUBLAS_STATUS_EXECUTION_FAILED : CUBLAS_STATUS_SUCCESS;
}
