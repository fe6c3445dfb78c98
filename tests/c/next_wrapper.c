/* A second interposer, preloaded beside the guard: wraps cublasSgemm_v2 the usual way, through
 * dlsym(RTLD_NEXT), counts its calls, and says how many at exit. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

typedef int (*sgemm_fn)(void *, int, int, int, int, int, const float *, const float *, int, const float *, int,
                        const float *, float *, int);

static int calls;

int cublasSgemm_v2(void *h, int ta, int tb, int m, int n, int k, const float *alpha, const float *A, int lda,
                   const float *B, int ldb, const float *beta, float *C, int ldc) {
    static sgemm_fn next;
    if (!next) next = (sgemm_fn)dlsym(RTLD_NEXT, "cublasSgemm_v2");
    if (!next) {
        fprintf(stderr, "wrapper: no next cublasSgemm_v2\n");
        return 1;
    }
    calls++;
    return next(h, ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
}

__attribute__((destructor)) static void report(void) { fprintf(stderr, "wrapper calls=%d\n", calls); }
