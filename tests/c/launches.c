/* Kernel launches on the stand-in. Three kernels: two registered with __cudaRegisterFunction
 * under their C++ names, as nvcc's generated code registers them; the third not (named from its
 * symbol). The second faults (an illegal address, as an out-of-range gather does), which shows
 * at the next synchronisation: the GEMM that follows.
 *   launches            the three, then a GEMM
 *   launches many N     N clean launches; prints the mean ns per launch
 *   launches sync KIND  fill and gather, then the program's own synchronisation, where the
 *                       fault surfaces: KIND is device, stream or copy; or (malloc) scale,
 *                       whose launch waits for the gather to have run, then a cudaMalloc
 *   launches fast       as the first, but the gather's fault breaks the context before its
 *                       launch returns (a GPU that reports it that quickly)
 *   launches pending KIND  an error left unread (KIND config: a launch with an empty grid,
 *                       cudaErrorInvalidConfiguration; oom: a cudaMalloc too large), then the
 *                       first launch of fill that succeeds; prints what cudaPeekAtLastError and
 *                       cudaGetLastError (twice) return after it */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

/* Distinct bodies, so the compiler cannot fold them into one function. */
static volatile int touched;
static void fill(void **args) { touched = *(int *)args[1]; }
static int fault_at_once;
static void gather(void **args) {
    (void)args;
    if (!fault_at_once) {
        cudashim_raise_async(700);
        return;
    }
    /* The stand-in driver's engine: the context breaks now, not when the worker gets there. */
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    void (*poison)(int) = driver ? (void (*)(int))dlsym(driver, "cudashim_engine_poison") : NULL;
    if (!poison) abort(); /* the test would pass for the wrong reason */
    poison(700);
}
static void scale(void **args) { touched = 2 * *(int *)args[1]; }

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv) {
    __cudaRegisterFunction(NULL, (const char *)fill, (char *)"_Z4fillPfi", "_Z4fillPfi", -1, NULL, NULL, NULL, NULL, NULL);
    __cudaRegisterFunction(NULL, (const char *)gather, (char *)"_Z6gatherPKfPKlPfi", "_Z6gatherPKfPKlPfi", -1, NULL, NULL, NULL, NULL, NULL);
    float *a;
    int n = 4;
    cudaMalloc((void **)&a, 64);
    void *args[] = {&a, &n};
    /* gather(const float *, const long *, float *, int): a pointer to each of its four parameters. */
    void *gather_args[] = {&a, &a, &a, &n};
    dim3 grid = {4, 1, 1}, wide = {8, 1, 1}, block = {256, 1, 1};
    fault_at_once = argc > 1 && !strcmp(argv[1], "fast");
    if (argc > 2 && !strcmp(argv[1], "many")) {
        long count = atol(argv[2]);
        double start = now();
        for (long i = 0; i < count; i++) cudaLaunchKernel((const void *)fill, grid, block, args, 0, NULL);
        printf("%.1f\n", (now() - start) / count);
        return cudaDeviceSynchronize();
    }
    if (argc > 2 && !strcmp(argv[1], "pending")) {
        if (!strcmp(argv[2], "oom")) {
            void *huge = NULL;
            printf("malloc=%d\n", cudaMalloc(&huge, (size_t)1 << 62));
        } else {
            dim3 empty = {0, 1, 1};
            printf("empty=%d\n", cudaLaunchKernel((const void *)fill, empty, block, args, 0, NULL));
        }
        printf("fill=%d\n", cudaLaunchKernel((const void *)fill, grid, block, args, 0, NULL));
        int peek = cudaPeekAtLastError();
        int first = cudaGetLastError();
        int second = cudaGetLastError();
        printf("peek=%d get=%d again=%d\n", peek, first, second);
        return cudaDeviceSynchronize();
    }
    if (argc > 2 && !strcmp(argv[1], "sync")) {
        printf("fill=%d\n", cudaLaunchKernel((const void *)fill, grid, block, args, 0, NULL));
        printf("gather=%d\n", cudaLaunchKernel((const void *)gather, wide, block, gather_args, 0, NULL));
        float back[4];
        void *more = NULL;
        int status = !strcmp(argv[2], "device")   ? cudaDeviceSynchronize()
                     : !strcmp(argv[2], "stream") ? cudaStreamSynchronize(NULL)
                     : !strcmp(argv[2], "copy")   ? cudaMemcpy(back, a, sizeof back, cudaMemcpyDeviceToHost)
                                                  : (cudaLaunchKernel((const void *)scale, grid, block, args, 0, NULL), cudaMalloc(&more, 64));
        printf("%s sync=%d\n", argv[2], status);
        return 0;
    }
    cublasHandle_t h;
    printf("cublasCreate=%d\n", cublasCreate(&h));
    /* The GEMM's operand is ready before the launches: the GEMM is the first call after them. */
    float host[4] = {1, 2, 3, 4};
    float *b;
    cudaMalloc((void **)&b, 64);
    cudaMemcpy(b, host, sizeof host, cudaMemcpyHostToDevice);
    printf("fill=%d\n", cudaLaunchKernel((const void *)fill, grid, block, args, 0, NULL));           /* LAUNCH fill */
    printf("gather=%d\n", cudaLaunchKernel((const void *)gather, wide, block, gather_args, 0, NULL)); /* LAUNCH gather */
    printf("scale=%d\n", cudaLaunchKernel((const void *)scale, grid, block, args, 0, NULL));         /* LAUNCH scale */
    const float one = 1, zero = 0;
    printf("sgemm=%d\n", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, b, 2, b, 2, &zero, b + 8, 2));
    return 0;
}
