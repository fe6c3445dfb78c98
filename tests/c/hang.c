/* A job that hangs as a collective hangs (issue 50): a GEMM that completes, then a kernel
 * registered under the name NCCL gives an all-reduce, whose never-ending wait for a peer is a
 * stream memory wait on a flag nobody writes (the stand-in runs a kernel's host stub at its
 * launch, so the stub itself cannot be what never ends), a GEMM queued behind it on the same
 * stream, then the host waits for the stream in cudaStreamSynchronize, forever. It prints
 * "waiting" just before.
 *   hang          as above
 *   hang sleep    the completed GEMM, then three seconds asleep on the host with nothing
 *                 outstanding, and a clean exit
 *   hang ranks    as `hang`, but rank 2 (RANK=2) skips the collective: it copies a result back
 *                 (cudaMemcpy) and exits 0, as a rank that took another branch does
 *   hang slow     as `hang`, but a thread of the program's releases the wait after three
 *                 seconds (cuStreamWriteValue32 on a stream of its own): a slow collective, not
 *                 a hung one; the job then ends with 0
 *   hang gpu      as `hang` without the kernel (a host stub registered as a kernel is the
 *                 stand-in's alone): the stream wait and the GEMM behind it, on a real GPU
 *                 (scripts/gpu-check.sh)
 * HANG_COLLECTIVES=N (not with `gpu`): N collectives that complete first, each launched from
 * the line marked COLLECTIVES, so that the one that hangs is the (N+1)th launch of it. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

typedef int (*wait_value_fn)(void *stream, unsigned long long addr, unsigned int value, unsigned int flags);
typedef int (*write_value_fn)(void *stream, unsigned long long addr, unsigned int value, unsigned int flags);

static write_value_fn write_value;
static unsigned int *release_flag;

/* The late peer: three seconds on, the flag the all-reduce waits for is written from a stream
 * of this thread's own. */
static void *late_peer(void *unused) {
    (void)unused;
    cudaStream_t own;
    if (cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking)) return NULL;
    sleep(3);
    write_value(own, (unsigned long long)(size_t)release_flag, 1, 0);
    cudaStreamSynchronize(own);
    return NULL;
}

static volatile int reduced;
static void all_reduce(void **args) { reduced = args != NULL; }

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "hang";
    int gpu = !strcmp(mode, "gpu");
    if (!gpu)
        __cudaRegisterFunction(NULL, (const char *)all_reduce, (char *)"ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                               "ncclDevKernel_AllReduce_Sum_f32_RING_LL", -1, NULL, NULL, NULL, NULL, NULL);
    const char *rank = getenv("RANK");
    cublasHandle_t handle;
    if (cublasCreate(&handle)) return 4;
    enum { N = 4 };
    float h[N * N];
    for (int i = 0; i < N * N; i++) h[i] = 1.0f;
    float *a = NULL, *c = NULL;
    unsigned int *flag = NULL;
    if (cudaMalloc((void **)&a, sizeof h) || cudaMalloc((void **)&c, sizeof h) || cudaMalloc((void **)&flag, 4)) return 4;
    cudaMemcpy(a, h, sizeof h, cudaMemcpyHostToDevice);
    cudaMemset(flag, 0, 4);
    const float one = 1.0f, zero = 0.0f;
    /* A first GEMM that completes, so the guard follows the stream. */
    cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, a, N, a, N, &zero, c, N);
    cudaDeviceSynchronize();
    const char *collectives = getenv("HANG_COLLECTIVES");
    dim3 grid = {2, 1, 1}, block = {512, 1, 1};
    void *args[] = {&c};
    for (int i = 0, n = collectives && !gpu ? atoi(collectives) : 0; i < n; i++)
        cudaLaunchKernel((const void *)all_reduce, grid, block, args, 0, NULL); /* COLLECTIVES */
    cudaDeviceSynchronize();
    if (!strcmp(mode, "sleep")) {
        sleep(3);
        return 0;
    }
    if (!strcmp(mode, "ranks") && rank && !strcmp(rank, "2")) {
        /* This rank took another branch: it never launches the collective. */
        cudaMemcpy(h, c, sizeof h, cudaMemcpyDeviceToHost); /* RANK 2 LAST CALL */
        return 0;
    }
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    wait_value_fn wait_value = driver ? (wait_value_fn)dlsym(driver, "cuStreamWaitValue32_v2") : NULL;
    if (!wait_value) return 5;
    if (!strcmp(mode, "slow")) {
        write_value = driver ? (write_value_fn)dlsym(driver, "cuStreamWriteValue32_v2") : NULL;
        pthread_t peer;
        release_flag = flag;
        if (!write_value || pthread_create(&peer, NULL, late_peer, NULL)) return 5;
        pthread_detach(peer);
    }
    if (!gpu) cudaLaunchKernel((const void *)all_reduce, grid, block, args, 0, NULL); /* COLLECTIVE */
    /* The all-reduce's wait for its peers: CU_STREAM_WAIT_VALUE_EQ (1), never met. */
    if (wait_value(NULL, (unsigned long long)(size_t)flag, 1, 1)) return 6;
    cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, c, N, a, N, &zero, a, N); /* QUEUED GEMM */
    printf("waiting\n");
    fflush(stdout);
    return cudaStreamSynchronize(NULL); /* HOST WAITS */
}
