/* A program that closes every descriptor above stderr under the guard, as a daemon detaching
 * (or Python's subprocess child before exec) does. argv[1]:
 *   first:  a NaN GEMM, close_range(3, ~0U, 0), "closed" on stdout, then waits for a line on
 *           stdin (the test runs a second process meanwhile), then a second NaN GEMM, exit.
 *   second: one GEMM with a bad leading dimension, exit. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#define N 4

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "first";
    static const float one = 1.0f, zero = 0.0f;
    cublasHandle_t handle;
    if (cublasCreate(&handle)) return 3;
    float a[N * N], b[N * N];
    for (int i = 0; i < N * N; i++) a[i] = b[i] = 1.0f;
    void *da, *db, *dc;
    cudaMalloc(&da, sizeof a);
    cudaMalloc(&db, sizeof b);
    cudaMalloc(&dc, sizeof a);
    cudaMemcpy(db, b, sizeof b, cudaMemcpyHostToDevice);
    if (!strcmp(mode, "second")) {
        int st = cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, 8, N, N, &one, da, 3, db, N, &zero, dc, 8);
        printf("sgemm status=%d\n", st);
        return 0;
    }
    a[5] = NAN;
    cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice);
    cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, da, N, db, N, &zero, dc, N);
    cudaDeviceSynchronize();
    /* glibc 2.34 has close_range(); the system call works on older ones too. */
    long closed = syscall(SYS_close_range, 3u, ~0u, 0u);
    printf("closed %ld\n", closed);
    fflush(stdout);
    char line[16];
    if (!fgets(line, sizeof line, stdin)) return 4;
    cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, da, N, db, N, &zero, dc, N);
    cudaDeviceSynchronize();
    return 0;
}
