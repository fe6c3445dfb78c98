/* One cublasSgemm with a large A (ELEMENTS x 1, finite) and a NaN in B (1 x 1), so the guard
 * dumps a large operand.
 *   big_dump ELEMENTS [as=KB] [fsize=KB] [wait]
 *     as=KB     RLIMIT_AS (ulimit -v) of KB KiB, set before any buffer is allocated
 *     fsize=KB  RLIMIT_FSIZE of KB KiB (SIGXFSZ ignored, so a long write fails with EFBIG)
 *     wait      print "ready" and wait for a line on stdin before the call
 * Prints the call's status and the process's peak virtual size (peak_kb=). */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

static long peak_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmPeak:", 7)) kb = atol(line + 7);
    if (f) fclose(f);
    return kb;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    size_t m = strtoull(argv[1], NULL, 10);
    int wait = 0;
    for (int i = 2; i < argc; i++) {
        struct rlimit r;
        if (!strncmp(argv[i], "as=", 3)) {
            r.rlim_cur = r.rlim_max = strtoull(argv[i] + 3, NULL, 10) * 1024;
            if (setrlimit(RLIMIT_AS, &r)) return 3;
        } else if (!strncmp(argv[i], "fsize=", 6)) {
            signal(SIGXFSZ, SIG_IGN);
            r.rlim_cur = r.rlim_max = strtoull(argv[i] + 6, NULL, 10) * 1024;
            if (setrlimit(RLIMIT_FSIZE, &r)) return 3;
        } else if (!strcmp(argv[i], "wait")) {
            wait = 1;
        }
    }
    float *a = malloc(m * sizeof(float));
    if (!a) return 4;
    for (size_t i = 0; i < m; i++) a[i] = 1.0f;
    float b = NAN, one = 1.0f, zero = 0.0f;
    void *da = NULL, *db = NULL, *dc = NULL;
    if (cudaMalloc(&da, m * sizeof(float)) || cudaMalloc(&db, sizeof(float)) || cudaMalloc(&dc, m * sizeof(float))) return 4;
    cudaMemcpy(da, a, m * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(db, &b, sizeof b, cudaMemcpyHostToDevice);
    free(a);
    cublasHandle_t h;
    if (cublasCreate(&h)) return 4;
    if (wait) {
        char line[16];
        printf("ready\n");
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin)) return 6;
    }
    int st = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, (int)m, 1, 1, &one, da, (int)m, db, 1, &zero, dc, (int)m);
    printf("gemm=%d sync=%d\n", st, cudaDeviceSynchronize());
    printf("peak_kb=%ld\n", peak_kb());
    return 0;
}
