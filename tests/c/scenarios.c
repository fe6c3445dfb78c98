/* Test scenarios for the guard, one per argv[1]; built against the stand-in stack by soname.
 * Each prints what the program itself observes (statuses, results), so a guarded run's
 * stdout can be compared with an unguarded one. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#define N 4

static cublasHandle_t handle;
static const float one = 1.0f, zero = 0.0f;

static float *dev(const float *host, size_t n) {
    void *p = NULL;
    if (cudaMalloc(&p, n * sizeof(float)) != cudaSuccess) return NULL;
    if (host) cudaMemcpy(p, host, n * sizeof(float), cudaMemcpyHostToDevice);
    return p;
}

static void fill(float *m, size_t n, float base) {
    for (size_t i = 0; i < n; i++) m[i] = base + (float)i;
}

static void print_result(const char *label, const float *dc, size_t n) {
    float c[64];
    cudaError_t e = cudaMemcpy(c, dc, n * sizeof(float), cudaMemcpyDeviceToHost);
    printf("%s copy=%d", label, e);
    for (size_t i = 0; e == cudaSuccess && i < n; i++) printf(" %g", c[i]);
    printf("\n");
}

/* C = A * B for 4x4 matrices, with the given operands. */
static int gemm(const float *a, const float *b, const float *beta, float *c) {
    int st = cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, a, N, b, N, beta, c, N);
    printf("sgemm status=%d\n", st);
    return st;
}

int main(int argc, char **argv) {
    const char *s = argc > 1 ? argv[1] : "clean";
    int count = -1;
    cudaError_t ce = cudaGetDeviceCount(&count);
    printf("cudaGetDeviceCount=%d count=%d\n", ce, count);
    int cs = cublasCreate(&handle);
    printf("cublasCreate=%d\n", cs);
    if (!strcmp(s, "init")) return cs == 0 ? 0 : 3;
    if (cs) return 3;

    float a[N * N], b[N * N], c[N * N];
    fill(a, N * N, 1.0f);
    fill(b, N * N, 0.5f);
    fill(c, N * N, 0.0f);
    float *da = dev(a, N * N), *db = dev(b, N * N), *dc = dev(c, N * N);

    if (!strcmp(s, "clean")) {
        gemm(da, db, &zero, dc);
        print_result("C", dc, N * N);
        cublasSetMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH);
        gemm(da, db, &one, dc);
        print_result("C", dc, N * N);
    } else if (!strcmp(s, "nan_a")) {
        a[1 * N + 2] = NAN; /* row 2, col 1 */
        a[3 * N + 0] = INFINITY;
        cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice);
        gemm(da, db, &zero, dc);
    } else if (!strcmp(s, "inf_b")) {
        b[2 * N + 3] = -INFINITY; /* row 3, col 2 */
        cudaMemcpy(db, b, sizeof b, cudaMemcpyHostToDevice);
        gemm(da, db, &zero, dc);
    } else if (!strcmp(s, "nan_c_beta0")) {
        c[5] = NAN;
        cudaMemcpy(dc, c, sizeof c, cudaMemcpyHostToDevice);
        gemm(da, db, &zero, dc);
        print_result("C", dc, N * N);
    } else if (!strcmp(s, "nan_c_beta1")) {
        c[5] = NAN;
        cudaMemcpy(dc, c, sizeof c, cudaMemcpyHostToDevice);
        gemm(da, db, &one, dc);
    } else if (!strcmp(s, "overflow")) {
        for (int i = 0; i < N * N; i++) a[i] = 3e38f;
        cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice);
        gemm(da, db, &zero, dc);     /* produces Inf */
        float *dd = dev(c, N * N);
        gemm(db, db, &zero, dd);     /* unrelated, finite */
    } else if (!strcmp(s, "tf32_overflow")) {
        cublasSetMathMode(handle, CUBLAS_TF32_TENSOR_OP_MATH);
        for (int i = 0; i < N * N; i++) a[i] = 3e38f;
        cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice);
        gemm(da, db, &zero, dc);
    } else if (!strcmp(s, "bad_lda")) {
        int st = cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, 8, N, N, &one, da, 3, db, N, &zero, dc, 8);
        printf("sgemm status=%d\n", st);
    } else if (!strcmp(s, "bad_handle")) {
        cublasHandle_t h2;
        cublasCreate(&h2);
        cublasDestroy(h2);
        int st = cublasSgemm(h2, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, da, N, db, N, &zero, dc, N);
        printf("sgemm status=%d\n", st);
        st = cublasSgemm((cublasHandle_t)(void *)c, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, da, N, db, N, &zero, dc, N);
        printf("sgemm status=%d\n", st);
    } else if (!strcmp(s, "host_pointer")) {
        gemm(a, db, &zero, dc); /* a is host memory */
        printf("sync=%d\n", cudaDeviceSynchronize());
    } else if (!strcmp(s, "out_of_bounds")) {
        float *small = dev(b, N * 2); /* B needs N * N floats */
        gemm(da, small, &zero, dc);
        printf("sync=%d\n", cudaDeviceSynchronize());
    } else if (!strcmp(s, "async")) {
        gemm(da, db, &zero, dc); /* fine */
        gemm(da, db, &zero, dc); /* CUDASHIM_ASYNC_FAULT=2 makes this kernel fault */
        gemm(db, da, &zero, dc); /* the error would surface here, or at the copy */
        print_result("C", dc, N * N);
    } else if (!strcmp(s, "async_exit")) {
        gemm(da, db, &zero, dc); /* fine */
        gemm(da, db, &zero, dc); /* CUDASHIM_ASYNC_FAULT=2: faults, and nothing waits for it */
        printf("exiting\n");
        fflush(stdout);
        exit(0);
    } else if (!strcmp(s, "graph")) {
        /* A GEMM captured into a graph, launched three times (CUDASHIM_GRAPH_FAULT=2: the
         * second launch's work faults), then the program's own copy. */
        cudaStream_t st;
        cudaGraph_t g;
        cudaGraphExec_t exec;
        cudaStreamCreate(&st);
        cublasSetStream(handle, st);
        cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal);
        gemm(da, db, &zero, dc);
        cudaStreamEndCapture(st, &g);
        printf("instantiate=%d\n", cudaGraphInstantiate(&exec, g, 0));
        for (int i = 0; i < 3; i++) printf("launch=%d\n", cudaGraphLaunch(exec, st));
        cublasSetStream(handle, NULL);
        print_result("C", dc, N * N);
    } else if (!strcmp(s, "api_error")) {
        gemm(da, db, &zero, dc); /* CUDASHIM_FAIL=cublasSgemm_v2:1:14 */
    } else if (!strcmp(s, "alloc")) {
        void *p = NULL;
        printf("cudaMalloc=%d\n", cudaMalloc(&p, (size_t)1 << 40));
    } else if (!strcmp(s, "free_twice")) {
        printf("cudaFree=%d\n", cudaFree(dc));
        printf("cudaFree=%d\n", cudaFree(dc));
        dc = dev(c, N * N);
    } else if (!strcmp(s, "streams")) {
        cudaStream_t st;
        cudaStreamCreate(&st);
        cublasSetStream(handle, st);
        a[0] = NAN;
        cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice);
        gemm(da, db, &zero, dc);
        printf("stream=%p\n", (void *)st);
    } else if (!strcmp(s, "capture")) {
        cudaStream_t st;
        cudaGraph_t g;
        cudaStreamCreate(&st);
        cublasSetStream(handle, st);
        printf("begin=%d\n", cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
        gemm(da, db, &zero, dc);
        printf("end=%d\n", cudaStreamEndCapture(st, &g));
    } else if (!strcmp(s, "device_scalars")) {
        float *dalpha = dev(&one, 1), *dbeta = dev(&zero, 1);
        cublasSetPointerMode(handle, CUBLAS_POINTER_MODE_DEVICE);
        printf("sgemm status=%d\n", cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, dalpha, da, N, db, N, dbeta, dc, N));
        print_result("C", dc, N * N);
        printf("sgemm status=%d\n", cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, da, N, db, N, dbeta, dc, N));
    } else if (!strcmp(s, "last_error")) {
        void *p = NULL;
        printf("cudaMalloc=%d\n", cudaMalloc(&p, (size_t)1 << 40)); /* sets the last error to 2 */
        gemm(da, db, &zero, dc);                                  /* guard scans and syncs */
        printf("last=%d\n", cudaGetLastError());                  /* still 2 */
        gemm(da, db, &zero, dc);
        printf("last=%d\n", cudaGetLastError());                  /* 0 */
    } else if (!strcmp(s, "big_nan")) {
        enum { B = 64 };
        static float big[B * B];
        for (int i = 0; i < B * B; i++) big[i] = 1.0f / (float)(i + 1);
        big[8 * B + 5] = NAN; /* row 5, col 8 */
        big[9 * B + 6] = NAN; /* row 6, col 9 */
        float *dbig = dev(big, B * B), *dout = dev(NULL, B * B);
        int st = cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, B, B, B, &one, dbig, B, dbig, B, &zero, dout, B);
        printf("sgemm status=%d\n", st);
    } else if (!strcmp(s, "tall_clean")) {
        /* A 4 MiB A (2^18 x 4, contiguous): 1024 segments of the device scan, more than a small
         * device's resident blocks hold warps for. B is 4 x 1, C 2^18 x 1. */
        enum { M = 1 << 18, K = 4 };
        float *ha = malloc(sizeof(float) * M * K), hb[K] = {1, 2, 3, 4};
        for (int i = 0; i < M * K; i++) ha[i] = (float)(i % 7);
        float *dta = dev(ha, M * K), *dtb = dev(hb, K), *dtc = dev(NULL, M);
        free(ha);
        printf("sgemm status=%d\n", cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, M, 1, K, &one, dta, M, dtb, K, &zero, dtc, M));
    } else if (!strcmp(s, "fault_then_wait")) {
        a[0] = NAN;
        cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice);
        gemm(da, db, &zero, dc);
        printf("ready\n");
        fflush(stdout);
        sleep(30); /* the test kills us */
        return 5;
    } else if (!strcmp(s, "fault_then_crash")) {
        a[0] = NAN;
        cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice);
        gemm(da, db, &zero, dc);
        fflush(stdout);
        *(volatile int *)(uintptr_t)argc = 1; /* a real segfault, at a small address */
    } else if (!strcmp(s, "clean_then_crash")) {
        /* No fault, so the trace was never written before the crash: the crash writer's head is
         * all the guard has (two seconds give the guard's NVML thread its events first). */
        gemm(da, db, &zero, dc);
        fflush(stdout);
        sleep(2);
        *(volatile int *)(uintptr_t)argc = 1;
    } else if (!strcmp(s, "storm_then_crash")) {
        /* More faults than the cap stores, then a crash: the crash record must still fit. */
        a[0] = NAN;
        cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice);
        int storm = argc > 2 ? atoi(argv[2]) : 150;
        for (int i = 0; i < storm; i++) gemm(da, db, &zero, dc);
        fflush(stdout);
        *(volatile int *)(uintptr_t)argc = 1;
    } else if (!strcmp(s, "fork_crash")) {
        /* The parent stores a fault; a forked child crashes without a CUDA call of its own. */
        a[0] = NAN;
        cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice);
        gemm(da, db, &zero, dc);
        fflush(stdout);
        pid_t child = fork();
        if (child == 0) *(volatile int *)(uintptr_t)argc = 1;
        int status = 0;
        waitpid(child, &status, 0);
        printf("child signal=%d\n", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    } else if (!strcmp(s, "chdir")) {
        /* A fault, a chdir(), another fault: one trace, where the process started. */
        a[0] = NAN;
        cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice);
        gemm(da, db, &zero, dc);
        mkdir("elsewhere", 0700);
        printf("chdir=%d\n", chdir("elsewhere"));
        gemm(da, db, &zero, dc);
    } else if (!strcmp(s, "use_after_free")) {
        /* A device buffer freed, then passed to a GEMM. */
        printf("free=%d\n", cudaFree(da));
        printf("sgemm status=%d\n", gemm(da, db, &zero, dc));
    } else if (!strcmp(s, "daemon")) {
        /* A daemon: closes stderr, and the next open() gets fd 2 for its data file. */
        close(2);
        FILE *data = fopen("data.txt", "w");
        printf("data fd=%d\n", data ? fileno(data) : -1);
        a[0] = NAN;
        cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice);
        gemm(da, db, &zero, dc); /* a fault: the guard says so on stderr */
        if (data) fprintf(data, "payload\n");
        if (data) fclose(data);
    } else if (!strcmp(s, "daemon_all")) {
        /* A stricter daemon: closes every descriptor from 2 up (the guard's copy of stderr
         * included), then opens its data files, which get those numbers. */
        for (int fd = 2; fd < 64; fd++) close(fd);
        FILE *files[4];
        char name[32];
        for (int i = 0; i < 4; i++) {
            snprintf(name, sizeof name, "data%d.txt", i);
            files[i] = fopen(name, "w");
        }
        a[0] = NAN;
        cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice);
        gemm(da, db, &zero, dc); /* a fault: the guard must not write into a data file */
        for (int i = 0; i < 4; i++) {
            if (files[i]) fprintf(files[i], "payload\n");
            if (files[i]) fclose(files[i]);
        }
        printf("daemon_all done\n");
    } else if (!strcmp(s, "fork")) {
        a[0] = NAN;
        cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice);
        gemm(da, db, &zero, dc); /* the parent's fault */
        fflush(stdout);
        pid_t child = fork();
        if (child == 0) {
            int st = cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, 8, N, N, &one, db, 3, db, N, &zero, dc, 8);
            printf("child sgemm status=%d\n", st); /* the child's own fault */
            if (argc > 2) { /* and exec after fork */
                fflush(stdout);
                execl(argv[0], argv[0], "bad_lda", (char *)NULL);
                _exit(9);
            }
            exit(0);
        }
        int status = 0;
        waitpid(child, &status, 0);
        printf("child exit=%d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        gemm(da, db, &one, dc);
    } else if (!strcmp(s, "garbage") || !strcmp(s, "huge")) {
        /* Bad input to the guard itself: wild enums, NULL outputs, garbage pointers, huge
         * sizes. The one call whose kernel faults comes last, so the guard's synchronisation
         * cannot make the sticky error visible to a later call sooner than without it. */
        const float *wild = (const float *)(uintptr_t)0x10;
        printf("sgemm status=%d\n", cublasSgemm(handle, 77, CUBLAS_OP_N, N, N, N, &one, da, N, db, N, &zero, dc, N));
        printf("sgemm status=%d\n", cublasSgemm(handle, CUBLAS_OP_N, -5, N, N, N, &one, da, N, db, N, &zero, dc, N));
        printf("cudaFree=%d\n", cudaFree((void *)wild));
        printf("cudaMalloc=%d\n", cudaMalloc(NULL, 16));
        printf("setmath=%d\n", cublasSetMathMode(handle, 12345));
        printf("create=%d\n", cublasCreate(NULL));
        if (!strcmp(s, "garbage"))
            printf("sgemm status=%d\n", cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, (const float *)wild, wild, N, db, N, &zero, dc, N));
        else
            printf("sgemm status=%d\n", cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, 0x7fffffff, 0x7fffffff, 0x7fffffff, &one, da, 0x7fffffff, db, 0x7fffffff, &zero, dc, 0x7fffffff));
        printf("sync=%d\n", cudaDeviceSynchronize());
    } else if (!strcmp(s, "dlopen_local")) {
        const char *lib = getenv("SCENARIO_LIB");
        void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        if (!h) {
            printf("dlopen failed: %s\n", dlerror());
            return 4;
        }
        int (*run)(void) = (int (*)(void))dlsym(h, "scenario_lib_run");
        printf("lib=%d\n", run());
    } else {
        fprintf(stderr, "unknown scenario %s\n", s);
        return 2;
    }
    cublasDestroy(handle);
    printf("end\n");
    return 0;
}
