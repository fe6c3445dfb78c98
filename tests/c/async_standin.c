/* The asynchronous stand-in GPU, observed from a program (run unguarded, with
 * CUDASHIM_WORKER_HOLD=1 so that the worker runs nothing until the program opens the gate):
 *   async_standin late        a GEMM has not run when its launch returns, has after a sync
 *   async_standin fault       an injected fault is seen by unrelated calls only once it ran
 *   async_standin writevalue  a stream write lands in mapped pinned memory after the GEMM
 *                             before it; after a fault on its stream it never lands
 *   async_standin events      event records, queries, synchronisation, elapsed time
 * Each prints what it saw ("name value" lines); the test asserts on them. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "include/cublas_v2.h"
#include "include/cuda.h"
#include "include/cuda_runtime_api.h"

static void *driver(const char *name) {
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    void *fn = cuda ? dlsym(cuda, name) : NULL;
    if (!fn) {
        printf("missing %s\n", name);
        exit(2);
    }
    return fn;
}

/* Opens (0) or closes (1) the worker's gate. */
static void hold(int on) { ((void (*)(int))driver("cudashim_worker_hold"))(on); }

#define N 4
static float *A, *B, *C;

/* C = A * B for 4x4 matrices of ones: every element becomes 4. */
static int gemm(cublasHandle_t h) {
    const float one = 1, zero = 0;
    return cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, A, N, B, N, &zero, C, N);
}

static void setup(cublasHandle_t *h) {
    float ones[N * N];
    for (int i = 0; i < N * N; i++) ones[i] = 1;
    cudaMalloc((void **)&A, sizeof ones);
    cudaMalloc((void **)&B, sizeof ones);
    cudaMalloc((void **)&C, sizeof ones);
    cudaMemcpy(A, ones, sizeof ones, cudaMemcpyHostToDevice);
    cudaMemcpy(B, ones, sizeof ones, cudaMemcpyHostToDevice);
    memset(C, 0, sizeof ones); /* stand-in device memory is host memory: the test looks at it */
    cublasCreate(h);
}

static int late(void) {
    cublasHandle_t h;
    setup(&h);
    printf("gemm %d\n", gemm(h));
    printf("at_return %g\n", C[0]);
    printf("query_outstanding %d\n", cudaStreamQuery(NULL));
    hold(0);
    printf("sync %d\n", cudaStreamSynchronize(NULL));
    printf("after_sync %g\n", C[0]);
    printf("query_done %d\n", cudaStreamQuery(NULL));
    return 0;
}

static int fault(int query) {
    cublasHandle_t h;
    setup(&h);
    printf("gemm %d\n", gemm(h));
    int count = 0;
    printf("unrelated_before %d\n", cudaGetDeviceCount(&count));
    void *p = NULL;
    printf("malloc_before %d\n", cudaMalloc(&p, 16));
    hold(0);
    /* "faultquery": the stream's query reports the fault, as a synchronisation does. */
    if (query) {
        cudaError_t q;
        while ((q = cudaStreamQuery(NULL)) == cudaErrorNotReady) usleep(1000);
        printf("query %d\n", q);
    } else {
        printf("sync %d\n", cudaStreamSynchronize(NULL));
    }
    printf("malloc_after %d\n", cudaMalloc(&p, 16));
    printf("unrelated_after %d\n", cudaGetDeviceCount(&count));
    return 0;
}

static int writevalue(void) {
    cublasHandle_t h;
    setup(&h);
    CUresult (*host_alloc)(void **, size_t, unsigned int) = driver("cuMemHostAlloc");
    CUresult (*device_pointer)(CUdeviceptr *, void *, unsigned int) = driver("cuMemHostGetDevicePointer_v2");
    CUresult (*write32)(CUstream, CUdeviceptr, unsigned int, unsigned int) = driver("cuStreamWriteValue32_v2");
    unsigned int *word = NULL;
    CUdeviceptr dword = 0;
    printf("host_alloc %d\n", host_alloc((void **)&word, sizeof *word, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
    printf("device_pointer %d\n", device_pointer(&dword, word, 0));
    printf("same_address %d\n", dword == (CUdeviceptr)(size_t)word);
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cublasSetStream(h, s);
    printf("gemm %d\n", gemm(h));
    printf("write %d\n", write32((CUstream)s, dword, 7, 0));
    printf("refused_no_barrier %d\n", write32((CUstream)s, dword, 7, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER));
    printf("word_at_return %u\n", __atomic_load_n(word, __ATOMIC_ACQUIRE));
    hold(0);
    /* Poll as a host thread polls a breadcrumb: no synchronisation. The GEMM before the write
     * must have landed once the word has. A fault would drop the write: then sync and stop. */
    unsigned int seen = 0;
    while (!(seen = __atomic_load_n(word, __ATOMIC_ACQUIRE)) && cudaStreamQuery(s) == cudaErrorNotReady) {
    }
    printf("word_seen %u\n", seen ? seen : __atomic_load_n(word, __ATOMIC_ACQUIRE));
    printf("c_when_word_landed %g\n", C[0]);
    printf("sync %d\n", cudaStreamSynchronize(s));
    printf("word_after_sync %u\n", __atomic_load_n(word, __ATOMIC_ACQUIRE));
    return 0;
}

static int events(void) {
    cublasHandle_t h;
    setup(&h);
    cudaEvent_t start, end, untimed;
    cudaEventCreate(&start);
    cudaEventCreateWithFlags(&end, 0);
    cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming);
    printf("query_unrecorded %d\n", cudaEventQuery(end));
    cudaEventRecord(start, NULL);
    gemm(h);
    cudaEventRecord(end, NULL);
    cudaEventRecord(untimed, NULL);
    printf("query_outstanding %d\n", cudaEventQuery(end));
    float ms = -1;
    printf("elapsed_outstanding %d\n", cudaEventElapsedTime(&ms, start, end));
    hold(0);
    printf("event_sync %d\n", cudaEventSynchronize(end));
    printf("c_after_event_sync %g\n", C[0]);
    printf("query_done %d\n", cudaEventQuery(end));
    printf("elapsed %d\n", cudaEventElapsedTime(&ms, start, end));
    printf("elapsed_nonnegative %d\n", ms >= 0);
    printf("elapsed_untimed %d\n", cudaEventElapsedTime(&ms, start, untimed));
    printf("destroy %d\n", cudaEventDestroy(end));
    printf("destroy_again %d\n", cudaEventDestroy(end));
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "late")) return late();
    if (!strcmp(mode, "fault")) return fault(0);
    if (!strcmp(mode, "faultquery")) return fault(1);
    if (!strcmp(mode, "writevalue")) return writevalue();
    if (!strcmp(mode, "events")) return events();
    fprintf(stderr, "unknown mode '%s'\n", mode);
    return 2;
}
