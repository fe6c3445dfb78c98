/* NaN GEMMs, then a fork right after them, as a DataLoader worker or multiprocessing starts:
 * argv[1] GEMMs (each reading its own NaN input), argv[2] how the child ends ("_exit", "exit",
 * "gemm_exit": one clean GEMM then exit), argv[3] children. The parent waits for them and
 * exits without a synchronisation of its own: every verdict is judged by the guard's thread or
 * at exit; argv[4] the matrices' order (8). Prints "children=N" when all ended. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

static int N = 8;

int main(int argc, char **argv) {
    int gemms = argc > 1 ? atoi(argv[1]) : 50;
    const char *how = argc > 2 ? argv[2] : "_exit";
    int children = argc > 3 ? atoi(argv[3]) : 1;
    if (argc > 4) N = atoi(argv[4]);
    if (N < 1 || N > 256) return 2;
    static const float one = 1.0f, zero = 0.0f;
    cublasHandle_t handle;
    if (cublasCreate(&handle)) return 3;
    static float a[256 * 256], b[256 * 256];
    for (int i = 0; i < N * N; i++) a[i] = b[i] = 1.0f;
    void *db, *dc;
    size_t bytes = (size_t)N * N * sizeof(float);
    cudaMalloc(&db, bytes);
    cudaMemcpy(db, b, bytes, cudaMemcpyHostToDevice);
    for (int g = 0; g < gemms; g++) {
        void *da;
        cudaMalloc(&da, bytes);
        a[g % (N * N)] = NAN;
        cudaMemcpy(da, a, bytes, cudaMemcpyHostToDevice);
        a[g % (N * N)] = 1.0f;
        cudaMalloc(&dc, bytes);
        cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, da, N, db, N, &zero, dc, N);
    }
    int ended = 0;
    for (int c = 0; c < children; c++) {
        /* "raw_" ways: a fork that runs no atfork handlers (a clone system call, as runtimes
         * that manage their own processes make), the child then exiting as named after it. */
        int raw = !strncmp(how, "raw_", 4);
        const char *end = raw ? how + 4 : how;
        pid_t pid = raw ? (pid_t)syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0) : fork();
        if (pid == 0) {
            if (!strcmp(end, "exit")) exit(0);
            if (!strcmp(end, "outlive")) {
                usleep(300000);
                exit(0);
            }
            if (!strcmp(end, "gemm_exit")) {
                cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, db, N, db, N, &zero, dc, N);
                exit(0);
            }
            _exit(0);
        }
        int status;
        if (pid > 0 && strcmp(end, "outlive") && waitpid(pid, &status, 0) == pid) ended++;
    }
    printf("children=%d\n", ended);
    return 0;
}
