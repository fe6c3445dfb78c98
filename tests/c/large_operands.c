/* Operands larger than the default mode's staging region, and bursts of NaN GEMMs, for the
 * host-scan path of deferred verdicts (issue 51, issue 46 finding 1). Built against the
 * stand-in stack by soname.
 *
 *   large_operands big MIB WHERE    one sgemm whose A is MIB MiB of f32 (4096 rows), finite
 *                                   but for one NaN at its start, middle or end (WHERE)
 *   large_operands batch MIB COUNT  one strided-batched sgemm of COUNT members of A, MIB MiB
 *                                   together, the last member's last element NaN
 *   large_operands burst NAN CLEAN [N]  NAN sgemms that read a NaN, CLEAN clean ones, one more
 *                                   NaN (N x N operands, 4 unless given)
 *   large_operands ahead CALLS      CALLS sgemms of 1 MiB A and C on one stream without a
 *                                   synchronisation, the last one reading a NaN
 *   large_operands drain CALLS      CALLS 4 x 4 sgemms without a synchronisation, then one,
 *                                   then 0.5 s idle: prints the resident memory before the
 *                                   calls, at its peak and after (kB, /proc/self/status)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#define ROWS 4096

static const float one = 1.0f, zero = 0.0f;

static float *upload(const float *host, size_t n) {
    void *p = NULL;
    if (cudaMalloc(&p, n * sizeof(float)) != cudaSuccess) return NULL;
    if (host && cudaMemcpy(p, host, n * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) return NULL;
    return p;
}

/* A /proc/self/status field in kB (VmRSS, VmHWM), -1 when unreadable. */
static long status_kb(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    size_t n = strlen(field);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, field, n) && line[n] == ':') kb = atol(line + n + 1);
    if (f) fclose(f);
    return kb;
}

static float *ones(size_t n) {
    float *h = malloc(n * sizeof(float));
    for (size_t i = 0; h && i < n; i++) h[i] = 1.0f;
    return h;
}

int main(int argc, char **argv) {
    const char *s = argc > 1 ? argv[1] : "big";
    cublasHandle_t handle;
    if (cublasCreate(&handle)) return 3;
    if (!strcmp(s, "big") && argc > 3) {
        size_t mib = strtoul(argv[2], NULL, 10);
        size_t elements = (mib << 20) / sizeof(float), cols = elements / ROWS;
        float *a = ones(elements);
        if (!a) return 4;
        size_t at = !strcmp(argv[3], "start") ? 0 : !strcmp(argv[3], "middle") ? elements / 2 + 7 : elements - 3;
        a[at] = NAN;
        printf("nan at row %zu col %zu\n", at % ROWS, at / ROWS);
        float *b = ones(cols), *da = upload(a, elements), *db = upload(b, cols), *dc = upload(NULL, ROWS);
        if (!da || !db || !dc) return 4;
        int st = cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, ROWS, 1, (int)cols, &one, da, ROWS, db, (int)cols, &zero, dc, ROWS);
        printf("sgemm status=%d sync=%d\n", st, cudaDeviceSynchronize());
    } else if (!strcmp(s, "batch") && argc > 3) {
        size_t mib = strtoul(argv[2], NULL, 10), count = strtoul(argv[3], NULL, 10);
        size_t elements = (mib << 20) / sizeof(float), member = elements / count, cols = member / ROWS;
        member = cols * ROWS;
        float *a = ones(member * count);
        if (!a) return 4;
        a[member * count - 1] = NAN;
        printf("nan in member %zu at row %d col %zu\n", count - 1, ROWS - 1, cols - 1);
        float *b = ones(cols * count), *da = upload(a, member * count), *db = upload(b, cols * count), *dc = upload(NULL, ROWS * count);
        if (!da || !db || !dc) return 4;
        int st = cublasSgemmStridedBatched(handle, CUBLAS_OP_N, CUBLAS_OP_N, ROWS, 1, (int)cols, &one, da, ROWS, (long long)member, db, (int)cols,
                                           (long long)cols, &zero, dc, ROWS, ROWS, (int)count);
        printf("sgemm status=%d sync=%d\n", st, cudaDeviceSynchronize());
    } else if (!strcmp(s, "burst") && argc > 3) {
        int bad = atoi(argv[2]), clean = atoi(argv[3]), N = argc > 4 ? atoi(argv[4]) : 4;
        float *h = ones((size_t)N * N), *nan = ones((size_t)N * N);
        if (!h || !nan) return 4;
        nan[5] = NAN;
        float *dn = upload(nan, N * N), *dh = upload(h, N * N), *dc = upload(NULL, N * N);
        for (int i = 0; i < bad; i++) cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, dn, N, dh, N, &zero, dc, N);
        for (int i = 0; i < clean; i++) cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, dh, N, dh, N, &zero, dc, N);
        int st = cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, dh, N, dn, N, &zero, dc, N);
        printf("last sgemm status=%d sync=%d\n", st, cudaDeviceSynchronize());
    } else if (!strcmp(s, "ahead") && argc > 2) {
        int calls = atoi(argv[2]);
        enum { M = 1 << 18 }; /* A and C 1 MiB of f32 each: M x 1, B 1 x 1 */
        float *h = ones(M);
        float *da = upload(h, M), *db = upload(h, 1), *dc = upload(NULL, M);
        h[M - 1] = NAN;
        float *dn = upload(h, M);
        if (!da || !db || !dc || !dn) return 4;
        for (int i = 0; i < calls; i++)
            cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, M, 1, 1, &one, i == calls - 1 ? dn : da, M, db, 1, &zero, dc, M);
        printf("sync=%d\n", cudaDeviceSynchronize());
    } else if (!strcmp(s, "drain") && argc > 2) {
        int calls = atoi(argv[2]);
        float *h = ones(16);
        float *da = upload(h, 16), *dc = upload(NULL, 16);
        if (!da || !dc) return 4;
        long before = status_kb("VmRSS");
        for (int i = 0; i < calls; i++) cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, da, 4, da, 4, &zero, dc, 4);
        int sync = cudaDeviceSynchronize();
        struct timespec idle = {0, 500 * 1000 * 1000};
        nanosleep(&idle, NULL);
        printf("sync=%d rss_before=%ld rss_peak=%ld rss_after=%ld\n", sync, before, status_kb("VmHWM"), status_kb("VmRSS"));
    } else {
        fprintf(stderr, "usage: large_operands big MIB start|middle|end | batch MIB COUNT | burst NAN CLEAN | ahead CALLS | drain CALLS\n");
        return 2;
    }
    return 0;
}
