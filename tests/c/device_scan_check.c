/* For scripts/gpu-check.sh, on a real GPU, with libcublasguard.so preloaded: the on-device
 * scan against known answers (random finite data with NaN and Inf planted at random
 * positions) per dtype and size; its read rate per dtype at 1 MiB, 64 MiB and 1 GiB against a
 * device-to-device copy of the same buffer; and the fixed cost of one guarded GEMM's scan (a
 * loop of 2x2x2 cublasSgemm calls with CUBLASGUARD_CHECKS=nan and CUBLASGUARD_DEVICE_SCAN=on
 * against the same loop with CUBLASGUARD_CHECKS=none, each run as a child of this program).
 * Prints "PASS ..." / "FAIL ..." lines (the known answers), one
 *     bandwidth DTYPE SIZE: scan X GB/s, copy Y GB/s, ratio R
 * line per dtype and size (or "bandwidth DTYPE SIZE: skipped, WHY" where the buffer and its
 * copy do not fit in free memory, or the size is above --max-mib), and one
 *     fixed cost: ...
 * line. Options: --max-mib N (the largest buffer measured: a dry run on the stand-in passes
 * 64), --reps N (repetitions per measurement; by default from the size), --gemm-calls N (the
 * fixed cost's loop, 2000 calls). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

typedef int (*scan_fn)(uint64_t, int64_t, int64_t, int64_t, int, uint64_t, uint64_t *);

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* The child's side of the fixed cost: `calls` guarded 2x2x2 cublasSgemm calls, each followed
 * by a synchronisation, after a warm-up; prints "gemm loop: N calls, X us per call". */
static int gemm_loop(int calls) {
    cublasHandle_t handle;
    float host[4] = {1, 2, 3, 4}, alpha = 1, beta = 0;
    float *a = NULL, *b = NULL, *c = NULL;
    if (cublasCreate_v2(&handle) || cudaMalloc((void **)&a, sizeof host) || cudaMalloc((void **)&b, sizeof host) ||
        cudaMalloc((void **)&c, sizeof host)) {
        printf("FAIL gemm loop: no cuBLAS handle or device memory\n");
        return 1;
    }
    cudaMemcpy(a, host, sizeof host, cudaMemcpyHostToDevice);
    cudaMemcpy(b, host, sizeof host, cudaMemcpyHostToDevice);
    double s = 0;
    for (int i = -calls / 10 - 1; i < calls; i++) {
        if (i == 0) s = now();
        if (cublasSgemm_v2(handle, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &alpha, a, 2, b, 2, &beta, c, 2) ||
            cudaStreamSynchronize(0)) {
            printf("FAIL gemm loop: cublasSgemm_v2 failed at call %d\n", i);
            return 1;
        }
    }
    double per_call = (now() - s) / calls;
    printf("gemm loop: %d calls, %.2f us per call\n", calls, per_call * 1e6);
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
    cublasDestroy_v2(handle);
    return 0;
}

/* Runs this program again as `--gemm-loop calls` with CUBLASGUARD_CHECKS set to `checks` (and
 * CUBLASGUARD_DEVICE_SCAN=on), the preloaded guard inherited; its microseconds per call, or a
 * negative number (its output is printed). */
static double child_loop(const char *self, const char *checks, int calls) {
    int fds[2];
    if (pipe(fds)) return -1;
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        char count[32];
        snprintf(count, sizeof count, "%d", calls);
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        setenv("CUBLASGUARD_CHECKS", checks, 1);
        setenv("CUBLASGUARD_DEVICE_SCAN", "on", 1);
        execl(self, self, "--gemm-loop", count, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    char text[4096] = {0};
    size_t got = 0;
    ssize_t n;
    while (got < sizeof text - 1 && (n = read(fds[0], text + got, sizeof text - 1 - got)) > 0) got += (size_t)n;
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    const char *line = strstr(text, "gemm loop: ");
    double us = -1;
    int count = 0;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !line || sscanf(line, "gemm loop: %d calls, %lf us", &count, &us) != 2) {
        printf("fixed cost: the CUBLASGUARD_CHECKS=%s loop failed (status %d): %s\n", checks, status, text);
        return -1;
    }
    return us;
}

static void fixed_cost(int calls) {
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        printf("fixed cost: cannot find this program (/proc/self/exe)\n");
        return;
    }
    self[n] = 0;
    double on = child_loop(self, "nan", calls), off = child_loop(self, "none", calls);
    if (on < 0 || off < 0) return;
    printf("fixed cost: %.2f us per 2x2x2 cublasSgemm (its scan phases: inputs before, output after; "
           "CUBLASGUARD_CHECKS=nan with the device scan %.2f us per call, none %.2f us, %d synchronised calls)\n",
           on - off, on, off, calls);
}

static const char *size_name(size_t bytes, char *buf, size_t len) {
    if (bytes >= (size_t)1 << 30) snprintf(buf, len, "%zuGiB", bytes >> 30);
    else snprintf(buf, len, "%zuMiB", bytes >> 20);
    return buf;
}

int main(int argc, char **argv) {
    size_t max_bytes = (size_t)1 << 30;
    int fixed_reps = 0, gemm_calls = 2000;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--gemm-loop") && i + 1 < argc) return gemm_loop(atoi(argv[i + 1]));
        if (!strcmp(argv[i], "--max-mib") && i + 1 < argc) max_bytes = (size_t)atol(argv[++i]) << 20;
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) fixed_reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--gemm-calls") && i + 1 < argc) gemm_calls = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--max-mib N] [--reps N] [--gemm-calls N]\n", argv[0]);
            return 2;
        }
    }
    scan_fn scan = (scan_fn)dlsym(RTLD_DEFAULT, "cublasguard_scan_on_device");
    if (!scan) {
        printf("FAIL libcublasguard.so is not preloaded\n");
        return 1;
    }
    struct { const char *name; int type; size_t size; uint64_t finite, nan, inf; } types[] = {
        {"f32", 0, 4, 0x3f800000, 0x7fc00000, 0x7f800000},
        {"f64", 1, 8, 0x3ff0000000000000ull, 0x7ff8000000000000ull, 0x7ff0000000000000ull},
        {"f16", 2, 2, 0x3c00, 0x7e00, 0x7c00},
        {"bf16", 14, 2, 0x3f80, 0x7fc0, 0x7f80},
    };
    int failures = 0;
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        for (size_t elements = 1 << 20; elements <= (size_t)1 << 26; elements <<= 6) {
            size_t es = types[t].size, bytes = elements * es;
            unsigned char *host = malloc(bytes);
            for (size_t i = 0; i < elements; i++) {
                uint64_t v = types[t].finite | (next() & ((es == 8 ? 1ull << 50 : es == 4 ? 1u << 20 : 1u << 5) - 1));
                memcpy(host + i * es, &v, es);
            }
            /* A matrix of `elements` with rows = 1000 and ld = 1000 + 24: padding rows hold NaN
             * that must not count. */
            int64_t rows = 1000, ld = 1024, cols = (int64_t)(elements / ld);
            uint64_t planted_nan = 0, planted_inf = 0, first = UINT64_MAX;
            for (int64_t c = 0; c < cols; c++)
                for (int64_t r = rows; r < ld; r++) memcpy(host + (c * ld + r) * es, &types[t].nan, es);
            for (int k = 0; k < 37; k++) {
                int64_t r = next() % rows, c = next() % cols;
                uint64_t idx = c * ld + r, old = 0;
                memcpy(&old, host + idx * es, es);
                if (old == types[t].nan || old == types[t].inf) continue;
                int is_nan = k % 3 != 0;
                memcpy(host + idx * es, is_nan ? &types[t].nan : &types[t].inf, es);
                planted_nan += is_nan;
                planted_inf += !is_nan;
                if (idx < first) first = idx;
            }
            void *dev = NULL;
            if (cudaMalloc(&dev, bytes)) {
                printf("FAIL cudaMalloc of %zu bytes\n", bytes);
                return 1;
            }
            cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice);
            uint64_t out[3] = {0};
            int rc = scan((uint64_t)(uintptr_t)dev, rows, cols, ld, types[t].type, 0, out);
            int ok = rc == 0 && out[0] == planted_nan && out[1] == planted_inf && out[2] == first;
            failures += !ok;
            printf("%s %s %zu elements: nan %llu/%llu inf %llu/%llu first %llu/%llu\n", ok ? "PASS" : "FAIL", types[t].name,
                   elements, (unsigned long long)out[0], (unsigned long long)planted_nan, (unsigned long long)out[1],
                   (unsigned long long)planted_inf, (unsigned long long)out[2], (unsigned long long)first);
            cudaFree(dev);
            free(host);
        }
    }

    /* The read rate: the scan of a contiguous buffer of finite data (every byte 0x3c: finite in
     * each dtype) against a device-to-device copy of it, per dtype and size. A copy reads and
     * writes each byte; the scan only reads: the rates compare bytes read. */
    const size_t sizes[] = {(size_t)1 << 20, (size_t)64 << 20, (size_t)1 << 30};
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++) {
            size_t bytes = sizes[z], es = types[t].size, elements = bytes / es;
            char name[16];
            size_name(bytes, name, sizeof name);
            size_t free_bytes = 0, total = 0;
            if (bytes > max_bytes) {
                printf("bandwidth %s %s: skipped, above --max-mib %zu\n", types[t].name, name, max_bytes >> 20);
                continue;
            }
            if (cudaMemGetInfo(&free_bytes, &total) || free_bytes < 2 * bytes + ((size_t)64 << 20)) {
                printf("bandwidth %s %s: skipped, needs %zu MiB (the buffer and its copy, and 64 MiB), %zu MiB free\n",
                       types[t].name, name, (2 * bytes >> 20) + 64, free_bytes >> 20);
                continue;
            }
            void *dev = NULL, *copy = NULL;
            if (cudaMalloc(&dev, bytes) || cudaMalloc(&copy, bytes)) {
                printf("bandwidth %s %s: skipped, cudaMalloc of twice %zu bytes failed\n", types[t].name, name, bytes);
                cudaFree(dev);
                continue;
            }
            cudaMemset(dev, 0x3c, bytes);
            int64_t ld = 1024, cols = (int64_t)(elements / ld);
            uint64_t out[3] = {0};
            /* A warm-up of each, and the scan's verdict on finite data. */
            int rc = scan((uint64_t)(uintptr_t)dev, ld, cols, ld, types[t].type, 0, out);
            cudaMemcpy(copy, dev, bytes, cudaMemcpyDeviceToDevice);
            cudaDeviceSynchronize();
            if (rc != 0 || out[0] || out[1]) {
                printf("FAIL bandwidth %s %s: the scan of finite data returned %d, nan %llu inf %llu\n", types[t].name, name, rc,
                       (unsigned long long)out[0], (unsigned long long)out[1]);
                failures++;
            } else {
                size_t reps = fixed_reps > 0 ? (size_t)fixed_reps : ((size_t)4 << 30) / bytes;
                if (!fixed_reps && reps < 10) reps = 10;
                if (!fixed_reps && reps > 1000) reps = 1000;
                double s = now();
                for (size_t i = 0; i < reps; i++) scan((uint64_t)(uintptr_t)dev, ld, cols, ld, types[t].type, 0, out);
                double scan_s = now() - s;
                s = now();
                for (size_t i = 0; i < reps; i++) cudaMemcpy(copy, dev, bytes, cudaMemcpyDeviceToDevice);
                cudaDeviceSynchronize();
                double copy_s = now() - s;
                printf("bandwidth %s %s: scan %.1f GB/s, copy %.1f GB/s, ratio %.2f\n", types[t].name, name,
                       reps * bytes / scan_s / 1e9, reps * bytes / copy_s / 1e9, copy_s / scan_s);
            }
            cudaFree(dev);
            cudaFree(copy);
        }
    }
    fflush(stdout);
    fixed_cost(gemm_calls);
    return failures ? 1 : 0;
}
