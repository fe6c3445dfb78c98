/* Fatal signals in the shapes that lost the crash record (issue 28, findings 3, 19, 23). One
 * case per argv[1]; each makes a guarded fault first (a GEMM whose lda is too small), so the
 * trace exists, then dies the way its name says:
 *   segv | fpe | bus [ignore]    a hardware fault (a wild store, an integer division by zero,
 *                                a store past the end of a mapped file); with "ignore" the
 *                                program sets SIG_IGN for that signal first (or it may have
 *                                inherited SIG_IGN from `trap '' SEGV`)
 *   kill_segv [ignore]           kill() and raise() of SIGSEGV at itself: with SIGSEGV ignored,
 *                                both are ignored and the program ends normally
 *   overflow_main [ALTSTACK]     unbounded recursion in the main thread; with ALTSTACK, the
 *                                program first installs an alternate stack of that many bytes,
 *                                and says whether it is still in place after its guarded call
 *   overflow_thread              the same in a thread, after that thread's own guarded call
 *   storm THREADS MS             THREADS threads make faulting GEMMs without pause; after MS
 *                                milliseconds the main thread makes a wild store */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

static const float one = 1.0f, zero = 0.0f;

/* One handle and three 4x4 device matrices per caller. */
struct gemm_ctx {
    cublasHandle_t h;
    float *a, *b, *c;
};

static int setup(struct gemm_ctx *g) {
    if (cublasCreate(&g->h) != CUBLAS_STATUS_SUCCESS) return -1;
    float host[16];
    for (int i = 0; i < 16; i++) host[i] = (float)i;
    cudaMalloc((void **)&g->a, sizeof host);
    cudaMalloc((void **)&g->b, sizeof host);
    cudaMalloc((void **)&g->c, sizeof host);
    cudaMemcpy(g->a, host, sizeof host, cudaMemcpyHostToDevice);
    cudaMemcpy(g->b, host, sizeof host, cudaMemcpyHostToDevice);
    return 0;
}

/* A guarded fault: lda = 1 < m = 4. */
static int bad_gemm(struct gemm_ctx *g) {
    return cublasSgemm(g->h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, g->a, 1, g->b, 4, &zero, g->c, 4);
}

static void wild_store(void) {
    *(volatile int *)(uintptr_t)16 = 1;
}

static volatile int divisor; /* 0, read at run time so the division is not folded */

static void divide_by_zero(void) {
    volatile int q = 7 / divisor;
    (void)q;
}

static void store_past_end_of_file(void) {
    char name[] = "bus-XXXXXX";
    int fd = mkstemp(name);
    unlink(name);
    long page = sysconf(_SC_PAGESIZE);
    /* The file is empty: its first page is mapped but has no backing, so a store is SIGBUS. */
    volatile char *p = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        printf("mmap failed\n");
        exit(4);
    }
    p[0] = 1;
}

/* Recursion that only a stack overflow ends (the bound is never reached). */
static volatile long depth_limit = 1L << 40;

static long recurse(long n) {
    volatile char frame[512];
    frame[0] = (char)n;
    if (n >= depth_limit) return frame[0];
    return recurse(n + 1) + frame[0];
}

static void *overflow_worker(void *arg) {
    (void)arg;
    struct gemm_ctx g;
    if (setup(&g)) return NULL;
    printf("thread sgemm status=%d\n", bad_gemm(&g));
    fflush(stdout);
    recurse(0);
    return NULL;
}

static void *storm_worker(void *arg) {
    struct gemm_ctx *g = arg;
    for (;;) bad_gemm(g);
    return NULL;
}

static int signal_of(const char *name) {
    if (!strcmp(name, "fpe")) return SIGFPE;
    if (!strcmp(name, "bus")) return SIGBUS;
    return SIGSEGV;
}

int main(int argc, char **argv) {
    const char *c = argc > 1 ? argv[1] : "segv";
    int ignore = argc > 2 && !strcmp(argv[2], "ignore");
    if (ignore) signal(signal_of(c), SIG_IGN);
    if (!strcmp(c, "overflow_main") && argc > 2) {
        /* The program's own alternate stack, before its first CUDA call. */
        stack_t ss = {.ss_sp = malloc((size_t)atol(argv[2])), .ss_size = (size_t)atol(argv[2])};
        printf("own altstack=%d\n", sigaltstack(&ss, NULL));
    }
    struct gemm_ctx g;
    if (setup(&g)) return 3;
    printf("sgemm status=%d\n", bad_gemm(&g));
    if (!strcmp(c, "overflow_main") && argc > 2) {
        stack_t now;
        sigaltstack(NULL, &now);
        printf("own altstack kept=%d\n", now.ss_size == (size_t)atol(argv[2]));
    }
    fflush(stdout);

    if (!strcmp(c, "segv")) {
        wild_store();
    } else if (!strcmp(c, "fpe")) {
        divide_by_zero();
    } else if (!strcmp(c, "bus")) {
        store_past_end_of_file();
    } else if (!strcmp(c, "kill_segv")) {
        printf("kill=%d\n", kill(getpid(), SIGSEGV));
        printf("raise=%d\n", raise(SIGSEGV));
    } else if (!strcmp(c, "overflow_main")) {
        recurse(0);
    } else if (!strcmp(c, "overflow_thread")) {
        pthread_t t;
        pthread_create(&t, NULL, overflow_worker, NULL);
        pthread_join(t, NULL);
    } else if (!strcmp(c, "storm")) {
        int threads = argc > 2 ? atoi(argv[2]) : 8;
        long ms = argc > 3 ? atol(argv[3]) : 200;
        static struct gemm_ctx ctx[64];
        pthread_t t;
        for (int i = 0; i < threads && i < 64; i++) {
            if (setup(&ctx[i])) return 3;
            pthread_create(&t, NULL, storm_worker, &ctx[i]);
        }
        struct timespec pause = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&pause, NULL);
        wild_store();
    } else {
        fprintf(stderr, "unknown case %s\n", c);
        return 2;
    }
    printf("survived\n");
    cublasDestroy(g.h);
    return 0;
}
