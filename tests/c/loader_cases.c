/* The interception layer against the loader and the thread library, on the stand-in stack.
 *   loader_cases cancel-launch      a thread blocked inside a "kernel" (the stand-in runs it in
 *                                   cudaLaunchKernel) is cancelled and joined; then a GEMM
 *   loader_cases cancel-dlsym       the same, cudaLaunchKernel taken with dlsym on the runtime
 *   loader_cases exit-launch        the kernel ends its thread with pthread_exit(7)
 *   loader_cases cancel-at-fault    a cancellation request waits (cancellation disabled) until
 *                                   the thread makes an out-of-bounds GEMM, the guard's fault
 *                                   writes being the first cancellation points it meets (no
 *                                   GEMM after: the bad one leaves the stand-in's context lost)
 *   loader_cases cancel-first-call  the same with the process's first CUDA call (the guard's
 *                                   start writes its line)
 *   loader_cases python-exit LIB    LIB is a stand-in for CPython whose PyGILState_Ensure ends
 *                                   the thread, as CPython does to a daemon thread at shutdown;
 *                                   a thread's out-of-bounds GEMM makes the guard ask it
 *   loader_cases xla VENDORED       as XLA: the runtime, cuBLAS, cuBLASLt and the driver opened
 *                                   RTLD_LOCAL and used through dlsym; then a second cuBLAS
 *                                   (VENDORED) makes an out-of-bounds GEMM
 *   loader_cases reload N VENDORED  N times: load VENDORED, a GEMM through it (out of bounds
 *                                   the last time), dlclose, and its old address range
 *                                   reserved so that the next load lands elsewhere; prints how
 *                                   many distinct addresses the loads had
 * Each prints what it saw on stdout and exits 0 when the program itself went as planned. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

typedef int (*create_fn)(void **);
typedef int (*destroy_fn)(void *);
typedef int (*sgemm_fn)(void *, int, int, int, int, int, const float *, const float *, int, const float *, int,
                        const float *, float *, int);
typedef int (*launch_fn)(const void *, dim3, dim3, void **, size_t, void *);
typedef int (*malloc_fn)(void **, size_t);

static void *must(void *p, const char *what) {
    if (!p) {
        printf("missing %s: %s\n", what, dlerror());
        exit(3);
    }
    return p;
}

/* Device operands of a 2 x 2 x 2 GEMM; B short by 8 bytes when `short_b`. */
struct operands {
    float *a, *b, *c;
};

static struct operands operands(int short_b) {
    struct operands o;
    float host[4] = {1, 2, 3, 4};
    cudaMalloc((void **)&o.a, sizeof host);
    cudaMalloc((void **)&o.b, short_b ? sizeof host - 8 : sizeof host);
    cudaMalloc((void **)&o.c, sizeof host);
    cudaMemcpy(o.a, host, sizeof host, cudaMemcpyHostToDevice);
    cudaMemcpy(o.b, host, short_b ? sizeof host - 8 : sizeof host, cudaMemcpyHostToDevice);
    return o;
}

static const float one = 1, zero = 0;

static int gemm(cublasHandle_t h, struct operands o) {
    return cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, o.a, 2, o.b, 2, &zero, o.c, 2);
}

/* A clean GEMM on the calling thread: the guard still works after what came before. */
static void clean_gemm(void) {
    cublasHandle_t h;
    cublasCreate(&h);
    printf("clean gemm=%d\n", gemm(h, operands(0)));
}

static sem_t entered, requested;

/* The "kernel": it says it runs, then blocks at a cancellation point. */
static void blocking_kernel(void **args) {
    (void)args;
    sem_post(&entered);
    for (;;) pause();
}

static void exiting_kernel(void **args) {
    (void)args;
    pthread_exit((void *)7);
}

static launch_fn launch = (launch_fn)cudaLaunchKernel;
static void (*kernel)(void **) = blocking_kernel;

static void *launcher(void *unused) {
    (void)unused;
    int n = 1;
    void *args[] = {&n};
    dim3 grid = {1, 1, 1}, block = {1, 1, 1};
    launch((const void *)kernel, grid, block, args, 0, NULL);
    return NULL; /* never: the kernel does not return */
}

/* Cancels `t` once it is inside its kernel and joins it. */
static void cancel_and_join(pthread_t t) {
    sem_wait(&entered);
    pthread_cancel(t);
    void *value;
    pthread_join(t, &value);
    printf("joined: %s\n", value == PTHREAD_CANCELED ? "cancelled" : "ended otherwise");
}

static void join(pthread_t t) {
    void *value;
    pthread_join(t, &value);
    if (value == PTHREAD_CANCELED)
        printf("joined: cancelled\n");
    else
        printf("joined: exited %ld\n", (long)(intptr_t)value);
}

/* A request is made while the thread holds cancellation off; the thread then turns it back on
 * (no cancellation point yet) and makes `call`, then meets pthread_testcancel. */
static void *pending_then(void *call) {
    int old;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
    sem_post(&entered);
    sem_wait(&requested);
    pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, &old);
    ((void (*)(void))call)();
    pthread_testcancel();
    return (void *)1; /* never: the request was pending */
}

static cublasHandle_t shared_handle;
static struct operands short_operands;

static void oob_gemm(void) { gemm(shared_handle, short_operands); }

static void first_malloc(void) {
    void *p;
    cudaMalloc(&p, 16);
}

static void pending_cancel(void (*call)(void)) {
    pthread_t t;
    pthread_create(&t, NULL, pending_then, (void *)call);
    sem_wait(&entered);
    pthread_cancel(t);
    sem_post(&requested);
    join(t);
}

static void *oob_thread(void *unused) {
    (void)unused;
    printf("oob gemm=%d\n", gemm(shared_handle, short_operands));
    return (void *)1;
}

static int xla(const char *vendored) {
    void *rt = must(dlopen("libcudart.so.12", RTLD_NOW | RTLD_LOCAL), "libcudart.so.12");
    void *blas = must(dlopen("libcublas.so.12", RTLD_NOW | RTLD_LOCAL), "libcublas.so.12");
    void *lt = must(dlopen("libcublasLt.so.12", RTLD_NOW | RTLD_LOCAL), "libcublasLt.so.12");
    void *driver = must(dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL), "libcuda.so.1");
    malloc_fn rt_malloc = (malloc_fn)must(dlsym(rt, "cudaMalloc"), "cudaMalloc");
    malloc_fn cu_malloc = (malloc_fn)must(dlsym(driver, "cuMemAlloc_v2"), "cuMemAlloc_v2");
    create_fn lt_create = (create_fn)must(dlsym(lt, "cublasLtCreate"), "cublasLtCreate");
    create_fn create = (create_fn)must(dlsym(blas, "cublasCreate_v2"), "cublasCreate_v2");
    sgemm_fn sgemm = (sgemm_fn)must(dlsym(blas, "cublasSgemm_v2"), "cublasSgemm_v2");
    void *p, *q, *lt_handle, *h;
    printf("runtime malloc=%d driver malloc=%d\n", rt_malloc(&p, 16), cu_malloc(&q, 16));
    printf("lt create=%d create=%d\n", lt_create(&lt_handle), create(&h));
    struct operands clean = operands(0), bad = operands(1);
    printf("first gemm=%d\n", sgemm(h, 0, 0, 2, 2, 2, &one, clean.a, 2, clean.b, 2, &zero, clean.c, 2));
    void *other = must(dlopen(vendored, RTLD_NOW | RTLD_LOCAL), vendored);
    create_fn other_create = (create_fn)must(dlsym(other, "cublasCreate_v2"), "vendored cublasCreate_v2");
    sgemm_fn other_sgemm = (sgemm_fn)must(dlsym(other, "cublasSgemm_v2"), "vendored cublasSgemm_v2");
    void *h2;
    printf("second create=%d\n", other_create(&h2));
    printf("second gemm=%d\n", other_sgemm(h2, 0, 0, 2, 2, 2, &one, bad.a, 2, bad.b, 2, &zero, bad.c, 2));
    return 0;
}

/* The extent of the object holding `addr`: its first and one past its last mapped byte. */
struct extent {
    uintptr_t addr, start, end;
};

static int find_extent(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    struct extent *e = data;
    uintptr_t low = UINTPTR_MAX, high = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD) continue;
        uintptr_t from = info->dlpi_addr + ph->p_vaddr, to = from + ph->p_memsz;
        if (from < low) low = from;
        if (to > high) high = to;
    }
    if (e->addr < low || e->addr >= high) return 0;
    long page = sysconf(_SC_PAGESIZE);
    e->start = low & ~(uintptr_t)(page - 1);
    e->end = (high + page - 1) & ~(uintptr_t)(page - 1);
    return 1;
}

static int reload(int count, const char *vendored) {
    struct operands clean = operands(0), bad = operands(1);
    uintptr_t bases[64];
    int distinct = 0;
    for (int i = 0; i < count && i < 64; i++) {
        void *lib = must(dlopen(vendored, RTLD_NOW | RTLD_LOCAL), vendored);
        create_fn create = (create_fn)must(dlsym(lib, "cublasCreate_v2"), "cublasCreate_v2");
        destroy_fn destroy = (destroy_fn)must(dlsym(lib, "cublasDestroy_v2"), "cublasDestroy_v2");
        sgemm_fn sgemm = (sgemm_fn)must(dlsym(lib, "cublasSgemm_v2"), "cublasSgemm_v2");
        struct extent e = {(uintptr_t)must(dlsym(lib, "cublasGetVersion_v2"), "cublasGetVersion_v2"), 0, 0};
        dl_iterate_phdr(find_extent, &e);
        int seen = 0;
        for (int j = 0; j < distinct; j++) seen |= bases[j] == e.start;
        if (!seen) bases[distinct++] = e.start;
        void *h;
        int created = create(&h);
        struct operands o = i == count - 1 ? bad : clean;
        int status = sgemm(h, 0, 0, 2, 2, 2, &one, o.a, 2, o.b, 2, &zero, o.c, 2);
        destroy(h);
        printf("load %d: create=%d gemm=%d\n", i, created, status);
        /* The GEMM's work is done before its library goes: the stand-in's kernels are the
         * library's own host code, run by its worker thread, so unloading it with the GEMM still
         * queued (a GPU behind the host, or a guard that does not synchronise) would crash. */
        cudaDeviceSynchronize();
        dlclose(lib);
        /* Keep the range the copy had, so the next load cannot land there again. */
        if (e.end > e.start)
            mmap((void *)e.start, e.end - e.start, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    }
    printf("distinct bases=%d\n", distinct);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    const char *c = argv[1];
    sem_init(&entered, 0, 0);
    sem_init(&requested, 0, 0);
    setvbuf(stdout, NULL, _IONBF, 0);
    pthread_t t;
    if (!strcmp(c, "cancel-launch") || !strcmp(c, "cancel-dlsym")) {
        if (!strcmp(c, "cancel-dlsym")) {
            void *rt = must(dlopen("libcudart.so.12", RTLD_NOW | RTLD_LOCAL), "libcudart.so.12");
            launch = (launch_fn)must(dlsym(rt, "cudaLaunchKernel"), "cudaLaunchKernel");
        }
        pthread_create(&t, NULL, launcher, NULL);
        cancel_and_join(t);
        clean_gemm();
        return 0;
    }
    if (!strcmp(c, "exit-launch")) {
        kernel = exiting_kernel;
        pthread_create(&t, NULL, launcher, NULL);
        join(t);
        clean_gemm();
        return 0;
    }
    if (!strcmp(c, "cancel-at-fault")) {
        cublasCreate(&shared_handle);
        short_operands = operands(1);
        pending_cancel(oob_gemm); /* the GEMM ran: the stand-in's context is lost after it */
        return 0;
    }
    if (!strcmp(c, "cancel-first-call")) {
        pending_cancel(first_malloc);
        clean_gemm();
        return 0;
    }
    if (!strcmp(c, "python-exit") && argc > 2) {
        /* First, before any CUDA call: the guard looks for Python once. */
        void *python = must(dlopen(argv[2], RTLD_NOW | RTLD_GLOBAL), argv[2]);
        *(int *)must(dlsym(python, "fake_python_exit_in_ensure"), "fake_python_exit_in_ensure") = 1;
        cublasCreate(&shared_handle);
        short_operands = operands(1);
        pthread_create(&t, NULL, oob_thread, NULL);
        join(t);
        *(int *)dlsym(python, "fake_python_exit_in_ensure") = 0;
        clean_gemm();
        return 0;
    }
    if (!strcmp(c, "xla") && argc > 2) return xla(argv[2]);
    if (!strcmp(c, "reload") && argc > 3) return reload(atoi(argv[2]), argv[3]);
    return 2;
}
