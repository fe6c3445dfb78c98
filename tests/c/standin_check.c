/* Checks the stand-in CUDA stack's semantics, linked against it by soname as a real
 * application is. Prints "ok <name>" per check, "FAIL <name>: ..." otherwise; exits 1 on any
 * failure. The fault-injection checks run when their variable is set (see tests/suite/standin.rs). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

static int failures;
#define CHECK(name, cond, ...)                         \
    do {                                               \
        if (cond) printf("ok %s\n", name);             \
        else {                                         \
            printf("FAIL %s: ", name);                 \
            printf(__VA_ARGS__);                       \
            printf("\n");                              \
            failures++;                                \
        }                                              \
    } while (0)

static void memory(void) {
    void *p = NULL, *q = NULL;
    size_t free0, total, free1;
    CHECK("meminfo", cudaMemGetInfo(&free0, &total) == 0 && total == ((size_t)1 << 20) && free0 == total, "%zu %zu", free0, total);
    CHECK("malloc", cudaMalloc(&p, 1000) == 0 && p, "%s", "");
    cudaMemGetInfo(&free1, &total);
    CHECK("meminfo_in_use", free1 == total - 1000, "%zu", free1);
    struct cudaPointerAttributes at;
    CHECK("attr_device", cudaPointerGetAttributes(&at, (char *)p + 999) == 0 && at.type == cudaMemoryTypeDevice, "%d", at.type);
    int local = 0;
    CHECK("attr_host", cudaPointerGetAttributes(&at, &local) == 0 && at.type == cudaMemoryTypeUnregistered, "%d", at.type);
    CHECK("attr_past_end", cudaPointerGetAttributes(&at, (char *)p + 1000) == 0 && at.type == cudaMemoryTypeUnregistered, "%d", at.type);
    char host[1000];
    memset(host, 7, sizeof host);
    CHECK("memcpy_h2d", cudaMemcpy(p, host, 1000, cudaMemcpyHostToDevice) == 0, "%s", "");
    CHECK("memcpy_overrun", cudaMemcpy(p, host, 1001, cudaMemcpyHostToDevice) == cudaErrorInvalidValue, "%s", "");
    CHECK("last_error_get_clears", cudaGetLastError() == cudaErrorInvalidValue && cudaGetLastError() == 0, "%s", "");
    CHECK("memcpy_host_as_device", cudaMemcpy(host, host, 10, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue, "%s", "");
    CHECK("last_error_peek_keeps", cudaPeekAtLastError() == cudaErrorInvalidValue && cudaPeekAtLastError() == cudaErrorInvalidValue, "%s", "");
    cudaGetLastError();
    CHECK("memset", cudaMemset(p, 0, 1000) == 0 && cudaMemset(p, 0, 1001) == cudaErrorInvalidValue, "%s", "");
    cudaGetLastError();
    CHECK("malloc_async", cudaMallocAsync(&q, 24, NULL) == 0 && cudaFreeAsync(q, NULL) == 0, "%s", "");
    CHECK("malloc_over_limit", cudaMalloc(&q, (size_t)1 << 21) == cudaErrorMemoryAllocation, "%s", "");
    cudaGetLastError();
    CHECK("free", cudaFree(p) == 0, "%s", "");
    CHECK("free_twice", cudaFree(p) == cudaErrorInvalidValue, "%s", "");
    cudaGetLastError();
    CHECK("memcpy_after_free", cudaMemcpy(p, host, 4, cudaMemcpyHostToDevice) == cudaErrorInvalidValue, "%s", "");
    cudaGetLastError();
}

static void handles(void) {
    cublasHandle_t h;
    CHECK("create", cublasCreate(&h) == 0, "%s", "");
    cudaStream_t s, got;
    cudaStreamCreate(&s);
    CHECK("stream", cublasSetStream(h, s) == 0 && cublasGetStream(h, &got) == 0 && got == s, "%s", "");
    cublasPointerMode_t pm;
    CHECK("pointer_mode", cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE) == 0 && cublasGetPointerMode(h, &pm) == 0 && pm == CUBLAS_POINTER_MODE_DEVICE, "%s", "");
    CHECK("pointer_mode_bad", cublasSetPointerMode(h, 5) == CUBLAS_STATUS_INVALID_VALUE, "%s", "");
    cublasMath_t mm;
    CHECK("math_mode", cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION) == 0 && cublasGetMathMode(h, &mm) == 0 && mm == 19, "%d", mm);
    int v;
    CHECK("version", cublasGetVersion(h, &v) == 0 && v == 120903, "%d", v);
    CHECK("status_name", !strcmp(cublasGetStatusName(CUBLAS_STATUS_EXECUTION_FAILED), "CUBLAS_STATUS_EXECUTION_FAILED") && strlen(cublasGetStatusString(CUBLAS_STATUS_NOT_INITIALIZED)) > 0, "%s", "");
    CHECK("destroy", cublasDestroy(h) == 0, "%s", "");
    CHECK("use_after_destroy", cublasSetStream(h, NULL) == CUBLAS_STATUS_NOT_INITIALIZED && cublasDestroy(h) == CUBLAS_STATUS_NOT_INITIALIZED, "%s", "");
    CHECK("null_handle", cublasSetMathMode(NULL, 0) == CUBLAS_STATUS_NOT_INITIALIZED, "%s", "");
}

static float *upload(const float *h, size_t n) {
    void *p;
    cudaMalloc(&p, n * sizeof(float));
    cudaMemcpy(p, h, n * sizeof(float), cudaMemcpyHostToDevice);
    return p;
}

static void gemm(void) {
    cublasHandle_t h;
    cublasCreate(&h);
    /* A: 2x3 (column-major), B: 3x2, C: 2x2 */
    float a[6] = {1, 4, 2, 5, 3, 6}, b[6] = {7, 9, 11, 8, 10, 12}, c[4] = {1, 1, 1, 1}, out[4];
    float *da = upload(a, 6), *db = upload(b, 6), *dc = upload(c, 4);
    const float one = 1, zero = 0, two = 2;
    CHECK("sgemm_nn", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, da, 2, db, 3, &zero, dc, 2) == 0, "%s", "");
    cudaMemcpy(out, dc, sizeof out, cudaMemcpyDeviceToHost);
    CHECK("sgemm_nn_values", out[0] == 58 && out[1] == 139 && out[2] == 64 && out[3] == 154, "%g %g %g %g", out[0], out[1], out[2], out[3]);
    /* C = 2 * A^T^T ... use T on both: op(A) = A^T where A stored 3x2 */
    float at[6] = {1, 2, 3, 4, 5, 6}, bt[6] = {7, 8, 9, 10, 11, 12};
    float *dat = upload(at, 6), *dbt = upload(bt, 6);
    CHECK("sgemm_tt", cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_T, 2, 2, 3, &one, dat, 3, dbt, 2, &two, dc, 2) == 0, "%s", "");
    cudaMemcpy(out, dc, sizeof out, cudaMemcpyDeviceToHost);
    /* op(A) = [[1,2,3],[4,5,6]], op(B) = [[7,9,11],[8,10,12]]^T... B stored 2x3: op(B)=B^T 3x2 = [[7,8],[9,10],[11,12]] */
    CHECK("sgemm_tt_values_beta", out[0] == 58 + 116 && out[1] == 139 + 278 && out[2] == 64 + 128 && out[3] == 154 + 308, "%g %g %g %g", out[0], out[1], out[2], out[3]);
    float nanc[4] = {NAN, NAN, NAN, NAN};
    cudaMemcpy(dc, nanc, sizeof nanc, cudaMemcpyHostToDevice);
    cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, da, 2, db, 3, &zero, dc, 2);
    cudaMemcpy(out, dc, sizeof out, cudaMemcpyDeviceToHost);
    CHECK("beta0_does_not_read_c", out[0] == 58 && !isnan(out[3]), "%g", out[0]);
    /* device pointer mode */
    float *done = upload(&one, 1), *dzero = upload(&zero, 1);
    cublasSetPointerMode(h, CUBLAS_POINTER_MODE_DEVICE);
    CHECK("sgemm_device_scalars", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, done, da, 2, db, 3, dzero, dc, 2) == 0, "%s", "");
    cudaMemcpy(out, dc, sizeof out, cudaMemcpyDeviceToHost);
    CHECK("sgemm_device_scalars_values", out[0] == 58, "%g", out[0]);
    cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST);
    /* argument rules */
    CHECK("rule_handle_first", cublasSgemm(NULL, 9, CUBLAS_OP_N, -1, 2, 3, NULL, da, 0, db, 3, &zero, dc, 2) == CUBLAS_STATUS_NOT_INITIALIZED, "%s", "");
    CHECK("rule_negative", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, -1, 2, 3, &one, da, 2, db, 3, &zero, dc, 2) == 7, "%s", "");
    CHECK("rule_trans", cublasSgemm(h, 9, CUBLAS_OP_N, 2, 2, 3, &one, da, 2, db, 3, &zero, dc, 2) == 7, "%s", "");
    CHECK("rule_lda", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, da, 1, db, 3, &zero, dc, 2) == 7, "%s", "");
    CHECK("rule_lda_t", cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, 2, 2, 3, &one, da, 2, db, 3, &zero, dc, 2) == 7, "%s", "");
    CHECK("rule_ldb", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, da, 2, db, 2, &zero, dc, 2) == 7, "%s", "");
    CHECK("rule_ldc", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, da, 2, db, 3, &zero, dc, 1) == 7, "%s", "");
    CHECK("rule_alpha", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, NULL, da, 2, db, 3, &zero, dc, 2) == 7, "%s", "");
    CHECK("rule_beta", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, da, 2, db, 3, NULL, dc, 2) == 7, "%s", "");
    CHECK("rule_empty_ok", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 0, 0, 0, &one, da, 1, db, 1, &zero, dc, 1) == 0, "%s", "");
    CHECK("no_error_yet", cudaDeviceSynchronize() == 0, "%s", "");
    /* an operand outside every allocation: SUCCESS now, sticky 700 at the next sync */
    float host[6];
    CHECK("bad_operand_returns_success", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, host, 2, db, 3, &zero, dc, 2) == 0, "%s", "");
    CHECK("sticky_at_sync", cudaStreamSynchronize(NULL) == cudaErrorIllegalAddress, "%s", "");
    void *p;
    CHECK("sticky_everywhere", cudaMalloc(&p, 4) == cudaErrorIllegalAddress && cudaDeviceSynchronize() == cudaErrorIllegalAddress, "%s", "");
    CHECK("sticky_not_cleared", cudaGetLastError() == cudaErrorIllegalAddress && cudaGetLastError() == cudaErrorIllegalAddress, "%s", "");
    CHECK("sticky_gemm_fails", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, da, 2, db, 3, &zero, dc, 2) == CUBLAS_STATUS_EXECUTION_FAILED, "%s", "");
}

static void versioned_symbols(void) {
    void *rt = dlopen("libcudart.so.12", RTLD_NOW | RTLD_NOLOAD);
    void *bl = dlopen("libcublas.so.12", RTLD_NOW | RTLD_NOLOAD);
    CHECK("versioned_cudart", rt && dlvsym(rt, "cudaMalloc", "libcudart.so.12") && !dlvsym(rt, "cudaMalloc", "libcudart.so.11.0"), "%s", "");
    CHECK("versioned_cublas", bl && dlvsym(bl, "cublasSgemm_v2", "libcublas.so.12") && !dlvsym(bl, "cublasSgemm_v2", "libcublas.so.13"), "%s", "");
}

static void injection(const char *which) {
    if (!strcmp(which, "no_driver")) {
        int n = -7, v = -7;
        CHECK("no_driver_count", cudaGetDeviceCount(&n) == cudaErrorInsufficientDriver && n == -7, "%d", n);
        CHECK("no_driver_version", cudaDriverGetVersion(&v) == 0 && v == 0, "%d", v);
        CHECK("no_driver_runtime_version", cudaRuntimeGetVersion(&v) == 0 && v == 12090, "%d", v);
        void *p;
        CHECK("no_driver_malloc", cudaMalloc(&p, 4) == cudaErrorInsufficientDriver, "%s", "");
        cublasHandle_t h;
        CHECK("no_driver_cublas", cublasCreate(&h) == CUBLAS_STATUS_NOT_INITIALIZED, "%s", "");
    } else if (!strcmp(which, "old_driver")) {
        int n;
        CHECK("old_driver_count", cudaGetDeviceCount(&n) == cudaErrorInsufficientDriver, "%s", "");
    } else if (!strcmp(which, "no_device")) {
        int n;
        CHECK("no_device_count", cudaGetDeviceCount(&n) == cudaErrorNoDevice, "%s", "");
    } else if (!strcmp(which, "fail_nth")) {
        void *p;
        CHECK("fail_first_ok", cudaMalloc(&p, 4) == 0, "%s", "");
        CHECK("fail_second", cudaMalloc(&p, 4) == 2, "%s", "");
        CHECK("fail_third_ok", cudaMalloc(&p, 4) == 0, "%s", "");
    } else if (!strcmp(which, "async")) {
        cublasHandle_t h;
        cublasCreate(&h);
        float a[4] = {1, 2, 3, 4};
        float *da = upload(a, 4), *dc = upload(a, 4);
        const float one = 1, zero = 0;
        CHECK("async_first_ok", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, da, 2, da, 2, &zero, dc, 2) == 0 && cudaDeviceSynchronize() == 0, "%s", "");
        CHECK("async_second_returns_success", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, da, 2, da, 2, &zero, dc, 2) == 0, "%s", "");
        CHECK("async_surfaces_at_sync", cudaStreamSynchronize(NULL) == cudaErrorIllegalAddress, "%s", "");
    } else if (!strcmp(which, "fork")) {
        /* A child of a process that started CUDA cannot use it (NVIDIA's runtime behaves so);
         * a child forked before any CUDA call can. */
        void *p;
        pid_t early = fork();
        if (early == 0) _exit(cudaMalloc(&p, 4) == 0 ? 0 : 1);
        int status = 0;
        waitpid(early, &status, 0);
        CHECK("fork_before_cuda_works", WIFEXITED(status) && WEXITSTATUS(status) == 0, "%d", status);
        CHECK("fork_parent_malloc", cudaMalloc(&p, 4) == 0, "%s", "");
        pid_t late = fork();
        if (late == 0) {
            cublasHandle_t h;
            int bad = 0;
            bad |= cudaMalloc(&p, 4) != cudaErrorInitializationError;
            bad |= cudaGetLastError() != cudaErrorInitializationError;
            bad |= cublasCreate(&h) != CUBLAS_STATUS_NOT_INITIALIZED;
            _exit(bad);
        }
        waitpid(late, &status, 0);
        CHECK("fork_child_cannot_use_cuda", WIFEXITED(status) && WEXITSTATUS(status) == 0, "%d", status);
        CHECK("fork_parent_unaffected", cudaMalloc(&p, 4) == 0, "%s", "");
    } else if (!strcmp(which, "capture")) {
        cudaStream_t s;
        cudaGraph_t g;
        enum cudaStreamCaptureStatus st;
        cudaStreamCreate(&s);
        CHECK("capture_begin", cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == 0 && cudaStreamIsCapturing(s, &st) == 0 && st == cudaStreamCaptureStatusActive, "%s", "");
        CHECK("capture_sync_illegal", cudaStreamSynchronize(s) == cudaErrorStreamCaptureUnsupported, "%s", "");
        CHECK("capture_invalidated", cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated, "%s", "");
        CHECK("capture_ok", cudaStreamBeginCapture(s, 0) == 0 && cudaStreamEndCapture(s, &g) == 0, "%s", "");
    }
}

int main(int argc, char **argv) {
    if (argc > 1) {
        injection(argv[1]);
    } else {
        memory();
        handles();
        versioned_symbols();
        injection("capture");
        gemm(); /* last: it leaves the context with a sticky error */
    }
    printf("%d failures\n", failures);
    return failures ? 1 : 0;
}
