/* The cuBLAS functions beyond GEMM, one case per run:  blas_family FUNCTION CASE
 *   clean     prints the outputs and `check=<max error>` against a host reference (or a
 *             residual for the solves)
 *   nan       a NaN in the operand named in tests/suite/blas_family.rs
 *   invalid   a broken argument (a leading dimension, an increment, a NULL result)
 *   oob       an operand's allocation is too short
 *   produced  (gemv, trsm) finite inputs that overflow or divide by zero
 *   nan_unread (trsm) a NaN in the triangle of A that the solve does not read
 *   device_result / result_on_device   (dots) result in device memory, DEVICE / HOST mode
 *   freed, short  (cublasSetWorkspace) a workspace freed, or declared larger than it is */
#include <complex.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "elements.h"

enum { N = 4, BATCH = 3, ELEMS = N * N };
enum family { GEMV, GBMV, DOT, DOTC, DOTEX, GEMM, GEMM_STRIDED, SGEMMEX, TRSM, TRSM_BATCHED, GETRF, GETRS, GEQRF, GELS, WORKSPACE };

struct function { const char *name; enum family family; int type; };

static const struct function functions[] = {
    {"cublasSgemv_v2", GEMV, R_32F}, {"cublasDgemv_v2", GEMV, R_64F}, {"cublasCgemv_v2", GEMV, C_32F}, {"cublasZgemv_v2", GEMV, C_64F},
    {"cublasSgbmv_v2", GBMV, R_32F}, {"cublasDgbmv_v2", GBMV, R_64F}, {"cublasCgbmv_v2", GBMV, C_32F}, {"cublasZgbmv_v2", GBMV, C_64F},
    {"cublasSdot_v2", DOT, R_32F}, {"cublasDdot_v2", DOT, R_64F}, {"cublasCdotu_v2", DOT, C_32F}, {"cublasCdotc_v2", DOTC, C_32F},
    {"cublasZdotu_v2", DOT, C_64F}, {"cublasZdotc_v2", DOTC, C_64F}, {"cublasDotEx", DOTEX, R_32F},
    {"cublasCgemm_v2", GEMM, C_32F}, {"cublasZgemm_v2", GEMM, C_64F},
    {"cublasCgemmStridedBatched", GEMM_STRIDED, C_32F}, {"cublasZgemmStridedBatched", GEMM_STRIDED, C_64F},
    {"cublasSgemmEx", SGEMMEX, R_16F},
    {"cublasStrsm_v2", TRSM, R_32F}, {"cublasDtrsm_v2", TRSM, R_64F}, {"cublasCtrsm_v2", TRSM, C_32F}, {"cublasZtrsm_v2", TRSM, C_64F},
    {"cublasStrsmBatched", TRSM_BATCHED, R_32F}, {"cublasDtrsmBatched", TRSM_BATCHED, R_64F},
    {"cublasCtrsmBatched", TRSM_BATCHED, C_32F}, {"cublasZtrsmBatched", TRSM_BATCHED, C_64F},
    {"cublasSgetrfBatched", GETRF, R_32F}, {"cublasDgetrfBatched", GETRF, R_64F}, {"cublasCgetrfBatched", GETRF, C_32F}, {"cublasZgetrfBatched", GETRF, C_64F},
    {"cublasSgetrsBatched", GETRS, R_32F}, {"cublasDgetrsBatched", GETRS, R_64F}, {"cublasCgetrsBatched", GETRS, C_32F}, {"cublasZgetrsBatched", GETRS, C_64F},
    {"cublasSgeqrfBatched", GEQRF, R_32F}, {"cublasDgeqrfBatched", GEQRF, R_64F}, {"cublasCgeqrfBatched", GEQRF, C_32F}, {"cublasZgeqrfBatched", GEQRF, C_64F},
    {"cublasSgelsBatched", GELS, R_32F}, {"cublasDgelsBatched", GELS, R_64F}, {"cublasCgelsBatched", GELS, C_32F}, {"cublasZgelsBatched", GELS, C_64F},
    {"cublasSetWorkspace_v2", WORKSPACE, R_32F},
};

static size_t esize(int t) { return t == C_32F ? 8 : t == C_64F ? 16 : element_size(t); }

static void put(int t, void *buf, size_t i, double complex v) {
    if (t == C_32F) ((float complex *)buf)[i] = (float complex)v;
    else if (t == C_64F) ((double complex *)buf)[i] = v;
    else store_element(t, buf, i, creal(v));
}

static double complex get(int t, const void *buf, size_t i) {
    if (t == C_32F) return ((const float complex *)buf)[i];
    if (t == C_64F) return ((const double complex *)buf)[i];
    return load_element(t, buf, i);
}

/* A value with an imaginary part for the complex types only. */
static double complex value(int t, double re, double im) { return (t == C_32F || t == C_64F) ? re + im * I : re; }

static void *upload(const void *host, size_t bytes) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) exit(3);
    if (host) cudaMemcpy(p, host, bytes, cudaMemcpyHostToDevice);
    return p;
}

static void *download(const void *dev, size_t bytes) {
    void *h = calloc(1, bytes + 16);
    cudaMemcpy(h, dev, bytes, cudaMemcpyDeviceToHost);
    return h;
}

static void *pointer_array(void *base, size_t member_bytes) {
    void *ptrs[BATCH];
    for (int b = 0; b < BATCH; b++) ptrs[b] = (char *)base + b * member_bytes;
    return upload(ptrs, sizeof ptrs);
}

static void print(const char *label, int t, const void *buf, size_t n) {
    printf("%s", label);
    for (size_t i = 0; i < n; i++) {
        double complex v = get(t, buf, i);
        if (t == C_32F || t == C_64F) printf(" %.6g%+.6gi", creal(v), cimag(v));
        else printf(" %.6g", creal(v));
    }
    printf("\n");
}

static const struct function *fn;
static const char *kase;
#define CASE(name) (!strcmp(kase, name))
static int finish(int status) {
    printf("status=%d\n", status);
    cudaError_t sync = cudaDeviceSynchronize();
    printf("sync=%d\n", sync);
    return status == 0 && sync == cudaSuccess;
}

/* Scalars of every type: one, zero. */
static float one_f = 1, zero_f = 0;
static double one_d = 1, zero_d = 0;
static float complex one_c = 1, zero_c = 0;
static double complex one_z = 1, zero_z = 0;
static const void *one(int t) { return t == R_64F ? (void *)&one_d : t == C_32F ? (void *)&one_c : t == C_64F ? (void *)&one_z : (void *)&one_f; }
static const void *zero(int t) { return t == R_64F ? (void *)&zero_d : t == C_32F ? (void *)&zero_c : t == C_64F ? (void *)&zero_z : (void *)&zero_f; }

static double tolerance(int t) { return (t == R_64F || t == C_64F) ? 1e-9 : 1e-3; }

static int gemv(cublasHandle_t h, int t) {
    unsigned char ha[ELEMS * 16], hx[8 * 16] = {0}, hy[N * 16] = {0};
    double big = t == R_64F || t == C_64F ? 1e308 : 3e38;
    for (int i = 0; i < ELEMS; i++) put(t, ha, i, CASE("produced") ? value(t, big, 0) : value(t, i % 7 - 2, i % 3));
    for (int j = 0; j < N; j++) put(t, hx, 2 * j, value(t, j + 1, -1));
    if (CASE("nan")) put(t, hx, 4, NAN); /* element 2 of x (increment 2) */
    int lda = CASE("invalid") ? 1 : N;
    void *da = upload(ha, ELEMS * esize(t)), *dx = upload(hx, (CASE("oob") ? 5 : 7) * esize(t)), *dy = upload(hy, N * esize(t));
    int st;
    switch (t) {
    case R_32F: st = cublasSgemv_v2(h, CUBLAS_OP_N, N, N, one(t), da, lda, dx, 2, zero(t), dy, 1); break;
    case R_64F: st = cublasDgemv_v2(h, CUBLAS_OP_N, N, N, one(t), da, lda, dx, 2, zero(t), dy, 1); break;
    case C_32F: st = cublasCgemv_v2(h, CUBLAS_OP_N, N, N, one(t), da, lda, dx, 2, zero(t), dy, 1); break;
    default: st = cublasZgemv_v2(h, CUBLAS_OP_N, N, N, one(t), da, lda, dx, 2, zero(t), dy, 1); break;
    }
    if (!finish(st)) return 0;
    void *y = download(dy, N * esize(t));
    print("y", t, y, N);
    double err = 0;
    for (int i = 0; i < N; i++) {
        double complex want = 0;
        for (int j = 0; j < N; j++) want += get(t, ha, j * N + i) * get(t, hx, 2 * j);
        err = fmax(err, cabs(want - get(t, y, i)));
    }
    printf("check=%s\n", err < tolerance(t) * 100 ? "ok" : "wrong");
    return 0;
}

/* A 4 x 4 band with one diagonal below the main one and two above, stored by diagonals
 * (lda = kl + ku + 1 = 4: every stored element finite, the corners no element maps to too). */
static int gbmv(cublasHandle_t h, int t) {
    enum { KL = 1, KU = 2, LDA = KL + KU + 1 };
    unsigned char ha[ELEMS * 16], hx[8 * 16] = {0}, hy[N * 16] = {0};
    for (int i = 0; i < ELEMS; i++) put(t, ha, i, value(t, i % 5 - 2, i % 3));
    for (int j = 0; j < N; j++) put(t, hx, 2 * j, value(t, j + 1, -1));
    if (CASE("nan")) put(t, hx, 4, NAN); /* element 2 of x (increment 2) */
    int lda = CASE("invalid") ? 1 : LDA;
    void *da = upload(ha, ELEMS * esize(t)), *dx = upload(hx, (CASE("oob") ? 5 : 7) * esize(t)), *dy = upload(hy, N * esize(t));
    int st;
    switch (t) {
    case R_32F: st = cublasSgbmv_v2(h, CUBLAS_OP_N, N, N, KL, KU, one(t), da, lda, dx, 2, zero(t), dy, 1); break;
    case R_64F: st = cublasDgbmv_v2(h, CUBLAS_OP_N, N, N, KL, KU, one(t), da, lda, dx, 2, zero(t), dy, 1); break;
    case C_32F: st = cublasCgbmv_v2(h, CUBLAS_OP_N, N, N, KL, KU, one(t), da, lda, dx, 2, zero(t), dy, 1); break;
    default: st = cublasZgbmv_v2(h, CUBLAS_OP_N, N, N, KL, KU, one(t), da, lda, dx, 2, zero(t), dy, 1); break;
    }
    if (!finish(st)) return 0;
    void *y = download(dy, N * esize(t));
    print("y", t, y, N);
    double err = 0;
    for (int i = 0; i < N; i++) {
        double complex want = 0;
        for (int j = 0; j < N; j++)
            if (i >= j - KU && i <= j + KL) want += get(t, ha, j * LDA + KU + i - j) * get(t, hx, 2 * j);
        err = fmax(err, cabs(want - get(t, y, i)));
    }
    printf("check=%s\n", err < tolerance(t) * 100 ? "ok" : "wrong");
    return 0;
}

static int dot(cublasHandle_t h, int t, int conjugate, int ex) {
    unsigned char hx[N * 16], hy[8 * 16] = {0}, result[16] = {0};
    for (int i = 0; i < N; i++) put(t, hx, i, value(t, i + 1, 1));
    for (int j = 0; j < N; j++) put(t, hy, 2 * j, value(t, 0.5 * (j + 1), -2));
    if (CASE("nan")) put(t, hy, 6, NAN); /* element 3 of y (increment 2) */
    void *dx = upload(hx, N * esize(t)), *dy = upload(hy, (CASE("oob") ? 5 : 7) * esize(t));
    void *res = result;
    if (CASE("device_result") || CASE("result_on_device")) res = upload(NULL, 16);
    if (CASE("device_result")) cublasSetPointerMode_v2(h, CUBLAS_POINTER_MODE_DEVICE);
    if (CASE("invalid")) res = NULL;
    int st;
    if (ex) st = cublasDotEx(h, N, dx, CUDA_R_32F, 1, dy, CUDA_R_32F, 2, res, CUDA_R_32F, CUDA_R_32F);
    else switch (t) {
        case R_32F: st = cublasSdot_v2(h, N, dx, 1, dy, 2, res); break;
        case R_64F: st = cublasDdot_v2(h, N, dx, 1, dy, 2, res); break;
        case C_32F: st = conjugate ? cublasCdotc_v2(h, N, dx, 1, dy, 2, res) : cublasCdotu_v2(h, N, dx, 1, dy, 2, res); break;
        default: st = conjugate ? cublasZdotc_v2(h, N, dx, 1, dy, 2, res) : cublasZdotu_v2(h, N, dx, 1, dy, 2, res); break;
        }
    if (!finish(st)) return 0;
    void *r = res == result ? result : download(res, 16);
    print("result", t, r, 1);
    double complex want = 0;
    for (int i = 0; i < N; i++) want += (conjugate ? conj(get(t, hx, i)) : get(t, hx, i)) * get(t, hy, 2 * i);
    printf("check=%s\n", cabs(want - get(t, r, 0)) < tolerance(t) * 10 ? "ok" : "wrong");
    return 0;
}

/* Complex GEMMs (single or strided) and cublasSgemmEx (f16 inputs, f32 output). */
static int gemm(cublasHandle_t h, int t, int members) {
    int ct = t == R_16F ? R_32F : t;
    unsigned char ha[BATCH * ELEMS * 16], hb[BATCH * ELEMS * 16], hc[BATCH * ELEMS * 16];
    for (int i = 0; i < members * ELEMS; i++) {
        put(t, ha, i, value(t, i % 7 - 2, 1));
        put(t, hb, i, value(t, (i % 5) * 0.5, -1));
        put(ct, hc, i, 0);
    }
    if (CASE("nan")) put(t, ha, (members - 1) * ELEMS + 2 * N + 1, NAN);
    int lda = CASE("invalid") ? 1 : N;
    void *da = upload(ha, members * ELEMS * esize(t)), *db = upload(hb, (members * ELEMS - (CASE("oob") ? 8 : 0)) * esize(t));
    void *dc = upload(hc, members * ELEMS * esize(ct));
    cublasOperation_t n = CUBLAS_OP_N;
    int st;
    if (t == R_16F) st = cublasSgemmEx(h, n, n, N, N, N, &one_f, da, CUDA_R_16F, lda, db, CUDA_R_16F, N, &zero_f, dc, CUDA_R_32F, N);
    else if (members == 1 && t == C_32F) st = cublasCgemm_v2(h, n, n, N, N, N, one(t), da, lda, db, N, zero(t), dc, N);
    else if (members == 1) st = cublasZgemm_v2(h, n, n, N, N, N, one(t), da, lda, db, N, zero(t), dc, N);
    else if (t == C_32F) st = cublasCgemmStridedBatched(h, n, n, N, N, N, one(t), da, lda, ELEMS, db, N, ELEMS, zero(t), dc, N, ELEMS, BATCH);
    else st = cublasZgemmStridedBatched(h, n, n, N, N, N, one(t), da, lda, ELEMS, db, N, ELEMS, zero(t), dc, N, ELEMS, BATCH);
    if (!finish(st)) return 0;
    void *c = download(dc, members * ELEMS * esize(ct));
    print("C", ct, c, members * ELEMS);
    double err = 0;
    for (int b = 0; b < members; b++)
        for (int col = 0; col < N; col++)
            for (int row = 0; row < N; row++) {
                double complex want = 0;
                for (int p = 0; p < N; p++) want += get(t, ha, b * ELEMS + p * N + row) * get(t, hb, b * ELEMS + col * N + p);
                err = fmax(err, cabs(want - get(ct, c, b * ELEMS + col * N + row)));
            }
    printf("check=%s\n", err < tolerance(ct) * 10 ? "ok" : "wrong");
    return 0;
}

/* A well-conditioned lower triangle (diagonal 4), zero above it. */
static void lower_triangle(int t, void *a, int b) {
    for (int col = 0; col < N; col++)
        for (int row = 0; row < N; row++)
            put(t, a, b * ELEMS + col * N + row, row == col ? value(t, 4, 0) : row > col ? value(t, (row + col) % 3 - 1, 0.5) : 0);
    if (CASE("produced")) put(t, a, b * ELEMS + 2 * N + 2, 0); /* a zero on the diagonal: division by zero */
    if (CASE("nan_unread")) put(t, a, b * ELEMS + 3 * N + 1, NAN); /* above the diagonal: never read */
}

static int trsm(cublasHandle_t h, int t, int members) {
    unsigned char ha[BATCH * ELEMS * 16], hb[BATCH * ELEMS * 16];
    for (int b = 0; b < members; b++) lower_triangle(t, ha, b);
    for (int i = 0; i < members * ELEMS; i++) put(t, hb, i, value(t, i % 5 + 1, -1));
    if (CASE("nan")) put(t, hb, (members - 1) * ELEMS + 2 * N + 1, NAN);
    int lda = CASE("invalid") ? 1 : N;
    void *da = upload(ha, members * ELEMS * esize(t)), *db = upload(hb, (members * ELEMS - (CASE("oob") ? 8 : 0)) * esize(t));
    cublasSideMode_t l = CUBLAS_SIDE_LEFT;
    cublasFillMode_t lo = CUBLAS_FILL_MODE_LOWER;
    cublasOperation_t n = CUBLAS_OP_N;
    cublasDiagType_t nu = CUBLAS_DIAG_NON_UNIT;
    int st;
    if (members == 1) {
        switch (t) {
        case R_32F: st = cublasStrsm_v2(h, l, lo, n, nu, N, N, one(t), da, lda, db, N); break;
        case R_64F: st = cublasDtrsm_v2(h, l, lo, n, nu, N, N, one(t), da, lda, db, N); break;
        case C_32F: st = cublasCtrsm_v2(h, l, lo, n, nu, N, N, one(t), da, lda, db, N); break;
        default: st = cublasZtrsm_v2(h, l, lo, n, nu, N, N, one(t), da, lda, db, N); break;
        }
    } else {
        void *pa = pointer_array(da, ELEMS * esize(t)), *pb = pointer_array(db, ELEMS * esize(t));
        switch (t) {
        case R_32F: st = cublasStrsmBatched(h, l, lo, n, nu, N, N, one(t), pa, lda, pb, N, BATCH); break;
        case R_64F: st = cublasDtrsmBatched(h, l, lo, n, nu, N, N, one(t), pa, lda, pb, N, BATCH); break;
        case C_32F: st = cublasCtrsmBatched(h, l, lo, n, nu, N, N, one(t), pa, lda, pb, N, BATCH); break;
        default: st = cublasZtrsmBatched(h, l, lo, n, nu, N, N, one(t), pa, lda, pb, N, BATCH); break;
        }
    }
    if (!finish(st)) return 0;
    void *x = download(db, members * ELEMS * esize(t));
    print("X", t, x, members * ELEMS);
    double err = 0; /* residual of A X = B */
    for (int b = 0; b < members; b++)
        for (int col = 0; col < N; col++)
            for (int row = 0; row < N; row++) {
                double complex ax = 0;
                for (int p = 0; p < N; p++) ax += get(t, ha, b * ELEMS + p * N + row) * get(t, x, b * ELEMS + col * N + p);
                err = fmax(err, cabs(ax - get(t, hb, b * ELEMS + col * N + row)));
            }
    printf("check=%s\n", err < tolerance(t) * 10 ? "ok" : "wrong");
    return 0;
}

/* A diagonally dominant matrix per member, with complex parts where the type has them. */
static void general(int t, void *a, int members) {
    for (int b = 0; b < members; b++)
        for (int col = 0; col < N; col++)
            for (int row = 0; row < N; row++)
                /* member 1 has a small diagonal, so LU must pivot */
                put(t, a, b * ELEMS + col * N + row, row == col ? value(t, b == 1 ? 0.25 : 6 + b, 1) : value(t, (row + 2 * col + b) % 3, -0.5));
}

#define BY_TYPE(t, call) \
    (t == R_32F ? (void (*)(void))cublasS##call : t == R_64F ? (void (*)(void))cublasD##call \
     : t == C_32F ? (void (*)(void))cublasC##call : (void (*)(void))cublasZ##call)

static int factorisation(cublasHandle_t h, int t, enum family family) {
    size_t es = esize(t), member = ELEMS * es;
    unsigned char ha[BATCH * ELEMS * 16], hb[BATCH * ELEMS * 16];
    general(t, ha, BATCH);
    for (int i = 0; i < BATCH * ELEMS; i++) put(t, hb, i, value(t, i % 4 - 1.5, 2));
    int nan_in_rhs = family == GETRS || family == GELS;
    /* the right-hand sides are 4 x 2: their NaN goes in column 1 */
    if (CASE("nan")) put(t, nan_in_rhs ? hb : ha, 2 * ELEMS + (nan_in_rhs ? N : 2 * N) + 1, NAN);
    int oob_rhs = family == GETRS || family == GELS, oob_tau = family == GEQRF;
    size_t short_by = CASE("oob") ? (oob_rhs ? 12 : 8) * es : 0; /* 4 x 2 right-hand sides use half a member */
    void *da = upload(ha, BATCH * member - (oob_rhs || oob_tau ? 0 : short_by));
    void *db = upload(hb, BATCH * member - (oob_rhs ? short_by : 0));
    void *dtau = upload(NULL, BATCH * N * es - (oob_tau && CASE("oob") ? 2 * es : 0));
    void *pa = pointer_array(da, member), *pb = pointer_array(db, member), *ptau = pointer_array(dtau, N * es);
    int *pivots = upload(NULL, BATCH * N * sizeof(int)), *info_array = upload(NULL, BATCH * sizeof(int)), info = -99;
    int lda = CASE("invalid") && family != GETRS ? 1 : N, ldb = CASE("invalid") && family == GETRS ? 1 : N;
    int st;
    typedef cublasStatus_t (*getrf_t)(cublasHandle_t, int, void *const *, int, int *, int *, int);
    typedef cublasStatus_t (*getrs_t)(cublasHandle_t, cublasOperation_t, int, int, const void *const *, int, const int *, void *const *, int, int *, int);
    typedef cublasStatus_t (*geqrf_t)(cublasHandle_t, int, int, void *const *, int, void *const *, int *, int);
    typedef cublasStatus_t (*gels_t)(cublasHandle_t, cublasOperation_t, int, int, int, void *const *, int, void *const *, int, int *, int *, int);
    getrf_t getrf = (getrf_t)BY_TYPE(t, getrfBatched);
    getrs_t getrs = (getrs_t)BY_TYPE(t, getrsBatched);
    geqrf_t geqrf = (geqrf_t)BY_TYPE(t, geqrfBatched);
    gels_t gels = (gels_t)BY_TYPE(t, gelsBatched);
    switch (family) {
    case GETRF: st = getrf(h, N, pa, lda, pivots, info_array, BATCH); break;
    case GETRS:
        if (getrf(h, N, pa, N, pivots, info_array, BATCH) || cudaDeviceSynchronize()) return 4;
        st = getrs(h, CUBLAS_OP_N, N, 2, pa, N, pivots, pb, ldb, &info, BATCH);
        break;
    case GEQRF: st = geqrf(h, N, N, pa, lda, ptau, &info, BATCH); break;
    default: st = gels(h, CUBLAS_OP_N, N, N, 2, pa, lda, pb, N, &info, info_array, BATCH); break;
    }
    if (!finish(st)) return 0;
    void *a = download(da, BATCH * member), *b = download(db, BATCH * member);
    int *piv = download(pivots, BATCH * N * sizeof(int)), *inf = download(info_array, BATCH * sizeof(int));
    double err = 0;
    if (family == GETRF) { /* P L U = A, column by column */
        print("LU", t, a, BATCH * ELEMS);
        for (int m = 0; m < BATCH; m++) {
            printf("pivots");
            for (int i = 0; i < N; i++) printf(" %d", piv[m * N + i]);
            printf(" info %d\n", inf[m]);
            unsigned char lu[ELEMS * 16];
            for (int col = 0; col < N; col++)
                for (int row = 0; row < N; row++) {
                    double complex s = 0;
                    for (int p = 0; p <= (row < col ? row : col); p++) {
                        double complex l = p == row ? 1 : get(t, a, m * ELEMS + p * N + row);
                        s += l * get(t, a, m * ELEMS + col * N + p);
                    }
                    put(C_64F, lu, col * N + row, s);
                }
            for (int i = N - 1; i >= 0; i--) /* undo the row swaps, last first */
                for (int col = 0; col < N; col++) {
                    int p = piv[m * N + i] - 1;
                    double complex tmp = get(C_64F, lu, col * N + i);
                    put(C_64F, lu, col * N + i, get(C_64F, lu, col * N + p));
                    put(C_64F, lu, col * N + p, tmp);
                }
            for (int i = 0; i < ELEMS; i++) err = fmax(err, cabs(get(C_64F, lu, i) - get(t, ha, m * ELEMS + i)));
        }
    } else if (family == GEQRF) { /* |R(j,j)| = the norms Q preserves: column 0 of A */
        print("QR", t, a, BATCH * ELEMS);
        for (int m = 0; m < BATCH; m++) {
            double norm = 0;
            for (int i = 0; i < N; i++) norm += pow(cabs(get(t, ha, m * ELEMS + i)), 2);
            err = fmax(err, fabs(sqrt(norm) - cabs(get(t, a, m * ELEMS))));
        }
        printf("info %d\n", info);
    } else { /* A X = B for the 2 right-hand sides */
        print("X", t, b, BATCH * ELEMS);
        printf("info %d\n", info);
        for (int m = 0; m < BATCH; m++)
            for (int col = 0; col < 2; col++)
                for (int row = 0; row < N; row++) {
                    double complex ax = 0;
                    for (int p = 0; p < N; p++) ax += get(t, ha, m * ELEMS + p * N + row) * get(t, b, m * ELEMS + col * N + p);
                    err = fmax(err, cabs(ax - get(t, hb, m * ELEMS + col * N + row)));
                }
    }
    printf("check=%s\n", err < tolerance(t) * 100 ? "ok" : "wrong");
    return 0;
}

/* A float GEMM on a handle whose workspace the program set (and maybe freed, or overstated). */
static int workspace(cublasHandle_t h) {
    float a[ELEMS], c[ELEMS];
    for (int i = 0; i < ELEMS; i++) a[i] = i % 3;
    void *da = upload(a, sizeof a), *dc = upload(NULL, sizeof c);
    void *ws = upload(NULL, 4096);
    if (cublasSetWorkspace_v2(h, ws, CASE("short") ? 8192 : 4096)) return 4;
    if (CASE("freed")) cudaFree(ws);
    if (!finish(cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one_f, da, N, da, N, &zero_f, dc, N))) return 0;
    cudaMemcpy(c, dc, sizeof c, cudaMemcpyDeviceToHost);
    print("C", R_32F, c, ELEMS);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    for (size_t i = 0; i < sizeof functions / sizeof *functions; i++)
        if (!strcmp(functions[i].name, argv[1])) fn = &functions[i];
    if (!fn) {
        fprintf(stderr, "unknown function %s\n", argv[1]);
        return 2;
    }
    kase = argv[2];
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 3;
    int t = fn->type;
    switch (fn->family) {
    case GEMV: return gemv(h, t);
    case GBMV: return gbmv(h, t);
    case DOT: return dot(h, t, 0, 0);
    case DOTC: return dot(h, t, 1, 0);
    case DOTEX: return dot(h, t, 0, 1);
    case GEMM: return gemm(h, t, 1);
    case GEMM_STRIDED: return gemm(h, t, BATCH);
    case SGEMMEX: return gemm(h, t, 1);
    case TRSM: return trsm(h, t, 1);
    case TRSM_BATCHED: return trsm(h, t, BATCH);
    case WORKSPACE: return workspace(h);
    default: return factorisation(h, t, fn->family);
    }
}
