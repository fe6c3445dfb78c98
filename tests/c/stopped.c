/* A job ended from outside, as a scheduler's time limit or torchrun ends one. argv[1]:
 *   wait    a GEMM reading a NaN, "ready" on stdout, then waits for signals forever
 *   ignore  ignores SIGTERM and handles SIGINT itself (both set before its first CUDA call),
 *           a GEMM reading a NaN, "ready", then waits for the SIGINT: "interrupted", exit 0 */
#define _GNU_SOURCE
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#define N 4

static volatile sig_atomic_t interrupted;
static void on_interrupt(int sig) {
    (void)sig;
    interrupted = 1;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "wait";
    int ignore = !strcmp(mode, "ignore");
    if (ignore) {
        signal(SIGTERM, SIG_IGN);
        signal(SIGINT, on_interrupt);
    }
    static const float one = 1.0f, zero = 0.0f;
    cublasHandle_t handle;
    if (cublasCreate(&handle)) return 3;
    float a[N * N];
    for (int i = 0; i < N * N; i++) a[i] = 1.0f;
    a[5] = NAN;
    void *da, *dc;
    if (cudaMalloc(&da, sizeof a) || cudaMalloc(&dc, sizeof a) || cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice)) return 4;
    cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, da, N, da, N, &zero, dc, N);
    cudaDeviceSynchronize();
    printf("ready\n");
    fflush(stdout);
    while (!interrupted) usleep(10000);
    printf("interrupted\n");
    return 0;
}
