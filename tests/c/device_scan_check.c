/* For scripts/gpu-check.sh, on a real GPU, with libcublasguard.so preloaded: the on-device
 * scan against known answers (random finite data with NaN and Inf planted at random
 * positions) per dtype and size, and its bandwidth against a device-to-device copy of the
 * same bytes. Prints "PASS ..." / "FAIL ..." lines and "bandwidth ..." lines. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

int main(void) {
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
            void *dev = NULL, *copy = NULL;
            if (cudaMalloc(&dev, bytes) || cudaMalloc(&copy, bytes)) {
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
            if (elements >= (size_t)1 << 26) {
                enum { REPS = 10 };
                cudaDeviceSynchronize();
                double s = now();
                for (int i = 0; i < REPS; i++) scan((uint64_t)(uintptr_t)dev, ld, cols, ld, types[t].type, 0, out);
                double scan_s = now() - s;
                s = now();
                for (int i = 0; i < REPS; i++) cudaMemcpy(copy, dev, bytes, cudaMemcpyDeviceToDevice);
                cudaDeviceSynchronize();
                double copy_s = now() - s;
                /* A copy reads and writes each byte; the scan only reads: compare bytes read. */
                printf("bandwidth %s: scan %.1f GB/s, device-to-device copy %.1f GB/s read, ratio %.2f\n", types[t].name,
                       REPS * bytes / scan_s / 1e9, REPS * bytes / copy_s / 1e9, copy_s / scan_s);
            }
            cudaFree(dev);
            cudaFree(copy);
            free(host);
        }
    }
    return failures ? 1 : 0;
}
