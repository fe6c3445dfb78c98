/* fork() while other threads are inside the guard: `threads` threads run GEMMs (clean ones, or
 * ones with NaN in A, so that every call stores a fault and rewrites the trace), and the main
 * thread forks `children` children, one at a time. Each child either execs /bin/true (what
 * subprocess.run and os.system do) or, in "cuda" mode, makes one NaN GEMM of its own (the guard
 * then writes the child's trace) and exits. A child still alive 2 s after its fork is counted
 * as hung and killed. Prints "hung=N children=M"; exits 0 only when none hung. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

static volatile int stop;
static int nan_input;

struct gemm {
    cublasHandle_t h;
    float *a, *b, *c;
};

static int gemm_setup(struct gemm *g, int with_nan) {
    if (cublasCreate(&g->h) != CUBLAS_STATUS_SUCCESS) return -1;
    float host[4] = {1, 2, 3, 4};
    if (with_nan) host[0] = 0.0f / 0.0f;
    cudaMalloc((void **)&g->a, sizeof host);
    cudaMalloc((void **)&g->b, sizeof host);
    cudaMalloc((void **)&g->c, sizeof host);
    cudaMemcpy(g->a, host, sizeof host, cudaMemcpyHostToDevice);
    host[0] = 1;
    cudaMemcpy(g->b, host, sizeof host, cudaMemcpyHostToDevice);
    return 0;
}

static int gemm_run(struct gemm *g) {
    const float one = 1, zero = 0;
    return cublasSgemm(g->h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, g->a, 2, g->b, 2, &zero, g->c, 2);
}

static void *worker(void *arg) {
    (void)arg;
    struct gemm g;
    if (gemm_setup(&g, nan_input) != 0) return NULL;
    while (!stop) gemm_run(&g);
    return NULL;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 16;
    int children = argc > 2 ? atoi(argv[2]) : 200;
    const char *mode = argc > 3 ? argv[3] : "exec";
    nan_input = argc > 4 && strcmp(argv[4], "nan") == 0;
    pthread_t t[64];
    if (threads > 64) threads = 64;
    /* CUDA starts in the parent before any fork: every child is a child of a CUDA process. */
    void *started;
    cudaMalloc(&started, 16);
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, NULL);
    int hung = 0;
    for (int i = 0; i < children; i++) {
        pid_t pid = fork();
        if (pid == 0) {
            if (strcmp(mode, "cuda") == 0) {
                struct gemm g;
                _exit(gemm_setup(&g, 1) == 0 && gemm_run(&g) == 0 ? 0 : 3);
            }
            execl("/bin/true", "true", (char *)NULL);
            _exit(127);
        }
        if (pid < 0) {
            perror("fork");
            break;
        }
        double deadline = now() + 2.0;
        int status, reaped = 0;
        while (now() < deadline) {
            if (waitpid(pid, &status, WNOHANG) == pid) {
                reaped = 1;
                break;
            }
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL);
        }
        if (!reaped) {
            hung++;
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
        }
    }
    stop = 1;
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    printf("hung=%d children=%d\n", hung, children);
    return hung ? 1 : 0;
}
