/* CUDA graphs under the guard (issue 52). argv[1]:
 *   global        the program's first GEMM, captured in a Global-mode capture, then replayed
 *   thread_local  the same in ThreadLocal mode
 *   other_thread  a second thread's ordinary first GEMM while the main thread runs a Global
 *                 capture (of a device-to-device copy), then the capture replayed
 *   nan           a GEMM whose input A holds a NaN (A[1,2]), captured, replayed 4 times
 *   nan_flags     the same, instantiated with cudaGraphInstantiateWithFlags (AutoFreeOnLaunch,
 *                 as PyTorch does)
 *   update        the NaN GEMM captured and instantiated, then the executable updated
 *                 (cudaGraphExecUpdate) to a second capture of the same GEMM on a clean A (a2)
 *                 and replayed 4 times
 *   driver        the nan case through the driver, as PyTorch and JAX reach it
 *                 (cudaGetDriverEntryPoint): cuStreamBeginCapture, cuStreamEndCapture,
 *                 cuGraphInstantiateWithFlags, cuGraphLaunch
 *   batched       a strided-batched GEMM (cublasSgemmStridedBatched, 3 members, as PyTorch's bmm)
 *                 whose A holds a NaN in member 1 (its A[1,2]), captured, replayed 4 times
 *   batched_array the same batch as a pointer-array GEMM (cublasSgemmBatched: its pointers in
 *                 device memory), captured, replayed 4 times
 *   node_params   the nan case, and before the replays a kernel node's arguments changed
 *                 (cudaGraphExecKernelNodeSetParams; the stand-in has no nodes: it takes any)
 *   rules         the stand-in's capture rules: a cudaMalloc during a capture, by the capturing
 *                 thread or another one, in each capture mode and thread mode ("name malloc=X
 *                 end=Y" lines; 900: refused, 901: the capture was invalidated)
 * Prints each capture's end status and C (from a copy after the replays); C stays 0 until a
 * replay computes it (the stand-in records captured work and runs it at each launch). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime_api.h>

enum { N = 4, MEMBERS = 3 };
static const float one = 1.0f, zero = 0.0f;

/* `members` N x N matrices, one after the other, every element `value`. */
static float *device_batch(float value, int members) {
    float h[MEMBERS * N * N];
    for (int i = 0; i < members * N * N; i++) h[i] = value;
    float *d = NULL;
    size_t bytes = sizeof(float) * (size_t)(members * N * N);
    if (cudaMalloc((void **)&d, bytes) || cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice)) return NULL;
    return d;
}

static float *device_matrix(float value) { return device_batch(value, 1); }

/* The members of the batch at `d`, as an array of their addresses in device memory. */
static const float **device_pointers(const float *d) {
    const float *h[MEMBERS];
    for (int i = 0; i < MEMBERS; i++) h[i] = d + i * N * N;
    const float **p = NULL;
    if (cudaMalloc((void **)&p, sizeof h) || cudaMemcpy(p, h, sizeof h, cudaMemcpyHostToDevice)) return NULL;
    return p;
}

/* The driver's capture and graph functions, found as PyTorch finds driver functions. */
struct driver {
    CUresult (*begin)(CUstream, CUstreamCaptureMode);
    CUresult (*end)(CUstream, CUgraph *);
    CUresult (*instantiate)(CUgraphExec *, CUgraph, unsigned long long);
    CUresult (*launch)(CUgraphExec, CUstream);
};

static int driver_functions(struct driver *d) {
    int status = 0;
    return cudaGetDriverEntryPoint("cuStreamBeginCapture", (void **)&d->begin, 0, &status) ||
           cudaGetDriverEntryPoint("cuStreamEndCapture", (void **)&d->end, 0, &status) ||
           cudaGetDriverEntryPoint("cuGraphInstantiateWithFlags", (void **)&d->instantiate, 0, &status) ||
           cudaGetDriverEntryPoint("cuGraphLaunch", (void **)&d->launch, 0, &status) || !d->begin || !d->end || !d->instantiate || !d->launch;
}

static float first_of(const float *d) {
    float h[N * N];
    if (cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost)) return -1.0f;
    return h[0];
}

/* The other thread's work: its own handle and stream, one GEMM, its result checked. */
struct other {
    float *a, *b, *c;
    int status;
    float result;
};

static void *other_thread(void *arg) {
    struct other *o = arg;
    cublasHandle_t h;
    cudaStream_t s;
    if (cublasCreate(&h) || cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) || cublasSetStream(h, s)) {
        o->status = -1;
        return NULL;
    }
    o->status = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, o->a, N, o->b, N, &zero, o->c, N);
    float host[N * N];
    int copied = cudaMemcpyAsync(host, o->c, sizeof host, cudaMemcpyDeviceToHost, s);
    int synced = cudaStreamSynchronize(s);
    o->result = copied || synced ? -1.0f : host[0];
    return NULL;
}

/* A cudaMalloc in thread mode `mode` (its status in `status`). */
struct allocation {
    enum cudaStreamCaptureMode mode;
    int status;
};

static void *allocate(void *arg) {
    struct allocation *a = arg;
    enum cudaStreamCaptureMode mode = a->mode;
    cudaThreadExchangeStreamCaptureMode(&mode);
    void *p = NULL;
    a->status = cudaMalloc(&p, 256);
    cudaThreadExchangeStreamCaptureMode(&mode);
    cudaGetLastError();
    return NULL;
}

/* One rule: a capture in `capture_mode` on `st`, during which a cudaMalloc is made in thread
 * mode `thread_mode`, by this thread or (`other`) another one. */
static void rule(const char *name, cudaStream_t st, enum cudaStreamCaptureMode capture_mode, enum cudaStreamCaptureMode thread_mode, int other) {
    cudaGraph_t g;
    struct allocation a = {thread_mode, -1};
    if (cudaStreamBeginCapture(st, capture_mode)) return;
    if (other) {
        pthread_t t;
        if (pthread_create(&t, NULL, allocate, &a) == 0) pthread_join(t, NULL);
    } else {
        allocate(&a);
    }
    int end = cudaStreamEndCapture(st, &g);
    cudaGetLastError();
    printf("%s malloc=%d end=%d\n", name, a.status, end);
}

int main(int argc, char **argv) {
    const char *how = argc > 1 ? argv[1] : "global";
    if (!strcmp(how, "rules")) {
        cudaStream_t st;
        if (cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking)) return 4;
        const enum cudaStreamCaptureMode G = cudaStreamCaptureModeGlobal, L = cudaStreamCaptureModeThreadLocal, R = cudaStreamCaptureModeRelaxed;
        rule("own_global", st, G, G, 0);
        rule("own_thread_local", st, L, G, 0);
        rule("own_relaxed_capture", st, R, G, 0);
        rule("own_relaxed_thread", st, G, R, 0);
        rule("other_global", st, G, G, 1);
        rule("other_thread_local_capture", st, L, G, 1);
        rule("other_thread_local_thread", st, G, L, 1);
        rule("other_relaxed_thread", st, G, R, 1);
        return 0;
    }
    int strided = !strcmp(how, "batched"), array = !strcmp(how, "batched_array"), members = strided || array ? MEMBERS : 1;
    float *a = device_batch(1.0f, members), *b = device_batch(2.0f, members), *c = device_batch(0.0f, members);
    if (!a || !b || !c) return 4;
    int driver = !strcmp(how, "driver");
    struct driver drv;
    if (driver && driver_functions(&drv)) return 5;
    if (!strcmp(how, "nan") || !strcmp(how, "nan_flags") || !strcmp(how, "update") || driver || !strcmp(how, "node_params") || members > 1) {
        float h[MEMBERS * N * N];
        for (int i = 0; i < members * N * N; i++) h[i] = 1.0f;
        h[(members - 1) / 2 * N * N + 2 * N + 1] = NAN; /* A[1,2], column-major, of member 1 of a batch */
        if (cudaMemcpy(a, h, sizeof(float) * (size_t)(members * N * N), cudaMemcpyHostToDevice)) return 4;
    }
    const float **a_array = array ? device_pointers(a) : NULL, **b_array = array ? device_pointers(b) : NULL;
    float **c_array = array ? (float **)device_pointers(c) : NULL;
    if (array && (!a_array || !b_array || !c_array)) return 4;
    cudaStream_t st;
    if (cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking)) return 4;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    int end = -1, replays = 4;
    if (!strcmp(how, "other_thread")) {
        float *other_c = device_matrix(0.0f);
        if (!other_c) return 4;
        printf("begin=%d\n", cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
        cudaMemcpyAsync(c, b, sizeof(float) * N * N, cudaMemcpyDeviceToDevice, st);
        struct other o = {a, b, other_c, 0, 0.0f};
        pthread_t t;
        if (pthread_create(&t, NULL, other_thread, &o)) return 4;
        pthread_join(t, NULL);
        printf("other gemm=%d C=%g\n", o.status, o.result);
        end = cudaStreamEndCapture(st, &graph);
    } else {
        cublasHandle_t handle;
        if (cublasCreate(&handle) || cublasSetStream(handle, st)) return 4;
        enum cudaStreamCaptureMode mode = strcmp(how, "thread_local") ? cudaStreamCaptureModeGlobal : cudaStreamCaptureModeThreadLocal;
        printf("begin=%d\n", driver ? drv.begin((CUstream)st, CU_STREAM_CAPTURE_MODE_GLOBAL) : cudaStreamBeginCapture(st, mode));
        int gemm;
        if (strided)
            gemm = cublasSgemmStridedBatched(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, a, N, N * N, b, N, N * N, &zero, c, N, N * N, MEMBERS); /* the captured batched line */
        else if (array)
            gemm = cublasSgemmBatched(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, a_array, N, b_array, N, &zero, c_array, N, MEMBERS);
        else
            gemm = cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, a, N, b, N, &zero, c, N); /* the captured line */
        printf("gemm=%d\n", gemm);
        end = driver ? drv.end((CUstream)st, (CUgraph *)&graph) : cudaStreamEndCapture(st, &graph);
        if (!end && !strcmp(how, "update")) {
            float *a2 = device_matrix(1.0f);
            cudaGraph_t second;
            if (!a2 || cudaGraphInstantiate(&exec, graph, 0)) return 4;
            printf("begin=%d\n", cudaStreamBeginCapture(st, mode));
            cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, N, N, N, &one, a2, N, b, N, &zero, c, N);
            if (cudaStreamEndCapture(st, &second)) return 4;
            printf("update=%d\n", cudaGraphExecUpdate(exec, second, NULL));
        }
    }
    printf("end=%d\n", end);
    if (end) return 1;
    printf("captured C=%g\n", first_of(c));
    int instantiated = exec                          ? 0
                       : driver                    ? drv.instantiate((CUgraphExec *)&exec, (CUgraph)graph, 0)
                       : !strcmp(how, "nan_flags") ? cudaGraphInstantiateWithFlags(&exec, graph, 1)
                                                   : cudaGraphInstantiate(&exec, graph, 0);
    printf("instantiate=%d\n", instantiated);
    if (instantiated) return 1;
    if (!strcmp(how, "node_params")) {
        float *a2 = device_matrix(1.0f);
        void *args[] = {&a2};
        struct cudaKernelNodeParams params = {.func = NULL, .gridDim = {1, 1, 1}, .blockDim = {1, 1, 1}, .kernelParams = args};
        printf("set_params=%d\n", cudaGraphExecKernelNodeSetParams(exec, (cudaGraphNode_t)graph, &params));
    }
    for (int i = 0; i < replays; i++) {
        int launched = driver ? drv.launch((CUgraphExec)exec, (CUstream)st) : cudaGraphLaunch(exec, st);
        if (launched) printf("launch %d=%d\n", i, launched);
    }
    printf("sync=%d\n", cudaStreamSynchronize(st));
    float result = first_of(c);
    printf("C=%g\n", result);
    return 0;
}
