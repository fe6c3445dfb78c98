/* Stand-in libcudart.so.12: a CPU model of the CUDA runtime, just deep enough to behave like
 * the real one at its edges. Device memory comes from the stand-in driver (libcuda.so.1), whose
 * functions the runtime finds as NVIDIA's does, through cuGetProcAddress_v2;
 * errors are per-thread (cudaGetLastError clears, cudaPeekAtLastError does not) except the
 * sticky ones, which poison the whole process like a broken CUDA context.
 *
 * Knobs (read once), shared with the stand-in libcublas through the cudashim_* functions:
 *   CUDASHIM_NO_DRIVER=1          behave as if libcuda.so.1 were missing
 *   CUDASHIM_MEM_TOTAL=BYTES      device memory size (default 16 GiB; read by the driver)
 *   CUDASHIM_FAIL=fn:N:status,... the Nth call of fn returns status (N counts from 1)
 *   CUDASHIM_ASYNC_FAULT=N        the Nth GEMM "kernel" faults asynchronously (700) when it runs
 *   CUDASHIM_GRAPH_FAULT=N        the Nth graph launch's work faults (700) when it runs
 * The driver's own knobs live in cuda.c; those of the stand-in GPU (CUDASHIM_SYNC,
 * CUDASHIM_WORKER_DELAY_US, CUDASHIM_WORKER_HOLD, CUDASHIM_COUNT_BLOCKING) in engine.c, which
 * runs the device work queued here (memsets, asynchronous copies, event records) and by the
 * stand-in cuBLAS (GEMMs) on a worker thread, in stream order.
 *
 * Runtime kernels (cudaLaunchKernel's host functions) run on the launching thread once their
 * stream's earlier work ran: the stand-in cannot copy their arguments (it has no parameter
 * sizes) and tests use them to act on the launching thread (cancellation, pthread_exit). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "include/cuda_runtime_api.h"

#define SHIM_RUNTIME_VERSION 12090
#define MAX_STREAMS 256
#define MAX_RULES 16

typedef int (*cu_fn_int)(int *);
typedef int (*cu_fn_uint)(unsigned int);

struct stream {
    int live;
};

struct fail_rule {
    char name[128];
    long nth;
    int status;
    long seen;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
/* The driver's functions, found at initialisation (NULL without a driver). */
typedef int (*get_proc_fn)(const char *, void **, int, unsigned long long, int *);
static int (*drv_mem_alloc)(unsigned long long *, size_t);
static int (*drv_mem_free)(unsigned long long);
static int (*drv_mem_get_info)(size_t *, size_t *);
static get_proc_fn drv_get_proc;
static int (*drv_is_device_range)(const void *, size_t);
static int (*drv_reserve)(size_t);
static void (*drv_release)(size_t);
static int (*drv_is_pinned)(const void *, size_t);
static int (*drv_free_pinned)(void *);
static int (*drv_copy_async)(void *, const void *, size_t, int, int, const void *, int, const char *);
/* The stand-in GPU's interface (engine.h), found in the driver; NULL without one. */
static struct {
    int (*submit)(const void *, int, shim_work_fn, shim_ready_fn, const void *, size_t);
    int (*wait_stream)(const void *, int, const char *);
    int (*wait_all)(const char *);
    int (*query_stream)(const void *, int);
    int (*error)(void);
    void (*poison)(int);
    void (*raise)(int);
    int (*is_sync)(void);
    void (*stream_created)(const void *, unsigned int);
    void (*stream_destroyed)(const void *);
    void (*count_gemm)(void);
    int (*event_create)(void **, unsigned int);
    int (*event_destroy)(void *);
    int (*event_record)(void *, const void *, int);
    int (*event_query)(void *);
    int (*event_synchronize)(void *, const char *);
    int (*event_elapsed)(float *, void *, void *);
    int (*stream_wait_event)(const void *, int, void *);
    int (*capture_begin)(const void *, int, int);
    int (*capture_end)(const void *, int, void **);
    int (*capture_status)(const void *, int);
    int (*capture_conflict)(const void *, int);
    int (*capture_unsafe)(void);
    int (*capture_exchange_mode)(int *);
    int (*graph_launch)(void *, const void *, int);
    int (*graph_update)(void *, void *);
} gpu;
static struct stream streams[MAX_STREAMS];
static struct fail_rule rules[MAX_RULES];
static int rule_count;
static long async_fault_at;
static long gemm_launches;
static int driver_error;  /* why the runtime cannot start, 0 when it can */
static int driver_version; /* 0 when there is no driver */
static int sticky_error;   /* once set, every call returns it */
static int pending_fault;  /* a "kernel" fault not yet seen by a synchronisation */
static int started;        /* the runtime initialised in this process */

/* CUDASHIM_COUNT_CALLS=FILE: every public runtime entry point counts its calls, and the counts
 * are written to FILE at exit ("name count" lines), so a test or a benchmark can say how many
 * runtime calls a program (or the guard inside it) made. */
#define COUNT_CALLS_VARIABLE "CUDASHIM_COUNT_CALLS"
#include "counting.h"

static int forked_child;   /* forked after the runtime started: CUDA is unusable here */
static void *driver_fn(const char *name);

/* As NVIDIA's runtime: a CUDA context does not survive fork(), and every runtime call in the
 * child of a process that initialised CUDA fails with cudaErrorInitializationError (3). The
 * stand-in's own lock is made anew there (a parent thread may have held it). */
static void after_fork_in_child(void) {
    pthread_mutex_init(&lock, NULL);
    if (started) forked_child = 1;
}

__attribute__((constructor)) static void register_fork_handler(void) {
    pthread_atfork(NULL, NULL, after_fork_in_child);
}
static __thread int last_error;

static int is_sticky(int code) {
    switch (code) {
    case 226: case 700: case 702: case 710: case 714: case 715: case 716: case 717:
    case 718: case 719: case 721: case 810: case 911:
        return 1;
    default:
        return 0;
    }
}

static void parse_rules(const char *spec) {
    while (spec && *spec && rule_count < MAX_RULES) {
        struct fail_rule *r = &rules[rule_count];
        const char *end = strchr(spec, ',');
        size_t len = end ? (size_t)(end - spec) : strlen(spec);
        char item[128];
        if (len >= sizeof item) len = sizeof item - 1;
        memcpy(item, spec, len);
        item[len] = 0;
        char *c1 = strchr(item, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (c1 && c2) {
            *c1 = 0;
            *c2 = 0;
            snprintf(r->name, sizeof r->name, "%s", item);
            r->nth = atol(c1 + 1);
            r->status = atoi(c2 + 1);
            rule_count++;
        } else {
            fprintf(stderr, "cudashim: ignoring malformed CUDASHIM_FAIL item '%s'\n", item);
        }
        spec = end ? end + 1 : NULL;
    }
}

static void initialise(void) {
    started = 1;
    parse_rules(getenv("CUDASHIM_FAIL"));
    const char *af = getenv("CUDASHIM_ASYNC_FAULT");
    if (af && *af) async_fault_at = atol(af);

    /* Like the real runtime: the driver is libcuda.so.1, loaded at first use. */
    const char *no_driver = getenv("CUDASHIM_NO_DRIVER");
    void *cuda = (no_driver && *no_driver && *no_driver != '0') ? NULL
                                                                : dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cuda) {
        driver_error = cudaErrorInsufficientDriver;
        return;
    }
    cu_fn_int get_version = (cu_fn_int)dlsym(cuda, "cuDriverGetVersion");
    cu_fn_uint init = (cu_fn_uint)dlsym(cuda, "cuInit");
    cu_fn_int get_count = (cu_fn_int)dlsym(cuda, "cuDeviceGetCount");
    if (!get_version || !init || !get_count || get_version(&driver_version) != 0) {
        driver_error = cudaErrorInsufficientDriver;
        driver_version = 0;
        return;
    }
    if (driver_version < SHIM_RUNTIME_VERSION) {
        driver_error = cudaErrorInsufficientDriver;
        return;
    }
    /* Like NVIDIA's runtime: every driver function through the driver's entry point, at the
     * runtime's own CUDA version; and the stand-in's private memory interface. */
    drv_get_proc = (get_proc_fn)dlsym(cuda, "cuGetProcAddress_v2");
    drv_is_device_range = (int (*)(const void *, size_t))dlsym(cuda, "cudashim_driver_is_device_range");
    drv_reserve = (int (*)(size_t))dlsym(cuda, "cudashim_driver_reserve");
    drv_release = (void (*)(size_t))dlsym(cuda, "cudashim_driver_release");
    drv_is_pinned = (int (*)(const void *, size_t))dlsym(cuda, "cudashim_driver_is_pinned");
    drv_free_pinned = (int (*)(void *))dlsym(cuda, "cudashim_driver_free_pinned");
    drv_copy_async = (int (*)(void *, const void *, size_t, int, int, const void *, int, const char *))dlsym(cuda, "cudashim_driver_copy_async");
#define GPU_FN(field, name) *(void **)&gpu.field = dlsym(cuda, name)
    GPU_FN(submit, "cudashim_engine_submit");
    GPU_FN(wait_stream, "cudashim_engine_wait_stream");
    GPU_FN(wait_all, "cudashim_engine_wait_all");
    GPU_FN(query_stream, "cudashim_engine_query_stream");
    GPU_FN(error, "cudashim_engine_error");
    GPU_FN(poison, "cudashim_engine_poison");
    GPU_FN(raise, "cudashim_engine_raise");
    GPU_FN(is_sync, "cudashim_engine_is_sync");
    GPU_FN(stream_created, "cudashim_engine_stream_created");
    GPU_FN(stream_destroyed, "cudashim_engine_stream_destroyed");
    GPU_FN(count_gemm, "cudashim_engine_count_gemm");
    GPU_FN(event_create, "cudashim_engine_event_create");
    GPU_FN(event_destroy, "cudashim_engine_event_destroy");
    GPU_FN(event_record, "cudashim_engine_event_record");
    GPU_FN(event_query, "cudashim_engine_event_query");
    GPU_FN(event_synchronize, "cudashim_engine_event_synchronize");
    GPU_FN(event_elapsed, "cudashim_engine_event_elapsed");
    GPU_FN(stream_wait_event, "cudashim_engine_stream_wait_event");
    GPU_FN(capture_begin, "cudashim_engine_capture_begin");
    GPU_FN(capture_end, "cudashim_engine_capture_end");
    GPU_FN(capture_status, "cudashim_engine_capture_status");
    GPU_FN(capture_conflict, "cudashim_engine_capture_conflict");
    GPU_FN(capture_unsafe, "cudashim_engine_capture_unsafe");
    GPU_FN(capture_exchange_mode, "cudashim_engine_capture_exchange_mode");
    GPU_FN(graph_launch, "cudashim_engine_graph_launch");
    GPU_FN(graph_update, "cudashim_engine_graph_update");
#undef GPU_FN
    int status = 0;
    if (!drv_get_proc || drv_get_proc("cuMemAlloc", (void **)&drv_mem_alloc, SHIM_RUNTIME_VERSION, 0, &status) ||
        drv_get_proc("cuMemFree", (void **)&drv_mem_free, SHIM_RUNTIME_VERSION, 0, &status) ||
        drv_get_proc("cuMemGetInfo", (void **)&drv_mem_get_info, SHIM_RUNTIME_VERSION, 0, &status) ||
        !drv_is_device_range || !drv_reserve || !drv_release || !drv_is_pinned || !drv_free_pinned || !drv_copy_async ||
        !gpu.submit || !gpu.stream_wait_event || !gpu.capture_unsafe || !gpu.graph_launch) {
        driver_error = cudaErrorInsufficientDriver;
        return;
    }
    int count = 0;
    if (init(0) != 0 || get_count(&count) != 0 || count == 0) driver_error = cudaErrorNoDevice;
}

/* The context's sticky error: the stand-in GPU's (a fault that ran, an injected sticky code),
 * or the runtime's own where there is no driver. */
static int context_error(void) {
    int code = gpu.error ? gpu.error() : 0;
    return code ? code : sticky_error;
}

static int fail(int code) {
    last_error = code;
    if (is_sticky(code)) {
        pthread_mutex_lock(&lock);
        if (!sticky_error) sticky_error = code;
        pthread_mutex_unlock(&lock);
        if (gpu.poison) gpu.poison(code);
    }
    return code;
}

/* Every runtime entry point starts here: the driver must be usable, and a sticky error, once
 * raised, is what every call returns. */
#define ENTER()                                              \
    do {                                                     \
        pthread_once(&init_once, initialise);                \
        if (forked_child) return fail(cudaErrorInitializationError); \
        if (driver_error) return fail(driver_error);         \
        if (context_error()) return fail(context_error());   \
    } while (0)

#define INJECT(name)                                         \
    do {                                                     \
        int injected_ = cudashim_inject(name);               \
        if (injected_) return fail(injected_);               \
    } while (0)

/* ---- private interface for the stand-in libcublas (not part of CUDA) ---- */

int cudashim_inject(const char *function) {
    pthread_once(&init_once, initialise);
    int status = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < rule_count; i++) {
        if (strcmp(rules[i].name, function) == 0 && ++rules[i].seen == rules[i].nth) status = rules[i].status;
    }
    pthread_mutex_unlock(&lock);
    return status;
}

int cudashim_driver_error(void) {
    pthread_once(&init_once, initialise);
    return forked_child ? cudaErrorInitializationError : driver_error;
}

int cudashim_sticky_error(void) { return context_error(); }

/* For the stand-in cuBLAS: device work on `stream` (engine.h's submit). */
int cudashim_submit(cudaStream_t stream, shim_work_fn fn, const void *arg, size_t size) {
    pthread_once(&init_once, initialise);
    if (!gpu.submit) return fn((void *)arg) ? (cudashim_raise_async(cudaErrorIllegalAddress), 0) : 0;
    return gpu.submit(stream, 0, fn, NULL, arg, size);
}

/* The stream of the kernel this thread runs itself (runtime kernels, the BLAS family). */
static __thread cudaStream_t running_on;

/* Waits, without it counting as the program's, until `stream`'s earlier work ran: for work
 * the stand-in runs on the calling thread (runtime kernels, the BLAS family). */
void cudashim_drain(cudaStream_t stream) {
    pthread_once(&init_once, initialise);
    running_on = stream;
    if (gpu.wait_stream && !gpu.is_sync()) gpu.wait_stream(stream, 0, NULL);
}

static int run_fault(void *arg) { return *(int *)arg; }

/* Device memory the stand-in libraries take for themselves (cuBLAS's workspace): 1 when the
 * memory limit allows it. Not an allocation the program can see. */
int cudashim_reserve(size_t bytes) {
    pthread_once(&init_once, initialise);
    return drv_reserve && drv_reserve(bytes);
}

void cudashim_release(size_t bytes) {
    if (drv_release) drv_release(bytes);
}

/* 1 when [ptr, ptr + bytes) is device memory the driver handed out (one allocation, or
 * virtual-memory mappings that touch). */
int cudashim_is_device_range(const void *ptr, size_t bytes) {
    pthread_once(&init_once, initialise);
    return drv_is_device_range && drv_is_device_range(ptr, bytes);
}

int cudashim_stream_valid(cudaStream_t stream) {
    if (stream == NULL || stream == cudaStreamLegacy || stream == cudaStreamPerThread) return 1;
    uintptr_t s = (uintptr_t)stream, first = (uintptr_t)&streams[0];
    if (s < first || s >= first + sizeof streams || (s - first) % sizeof(struct stream)) return 0;
    return ((struct stream *)stream)->live;
}

/* A GEMM "kernel" is being launched: 1 when fault injection says it faults. */
int cudashim_next_launch_faults(void) {
    pthread_mutex_lock(&lock);
    long n = ++gemm_launches;
    pthread_mutex_unlock(&lock);
    if (gpu.count_gemm) gpu.count_gemm();
    return async_fault_at > 0 && n == async_fault_at;
}

/* A kernel the calling thread runs itself faulted: the context breaks once the worker reaches
 * the fault in the kernel's stream (under CUDASHIM_SYNC=1: at the next synchronisation, as
 * before). */
void cudashim_raise_async(int code) {
    /* As on a GPU, the fault is found after the launch returned: queued on the kernel's stream,
     * it breaks the context when the worker reaches it. */
    if (gpu.submit && !gpu.is_sync()) {
        gpu.submit(running_on, 0, run_fault, NULL, &code, sizeof code);
        return;
    }
    if (gpu.raise) {
        gpu.raise(code);
        return;
    }
    pthread_mutex_lock(&lock);
    if (!pending_fault) pending_fault = code;
    pthread_mutex_unlock(&lock);
}

/* ---- kernel launches ---- */

static cudaError_t launch(const void *func, dim3 grid, dim3 block, void **args, cudaStream_t stream) {
    ENTER();
    if (!func) return fail(cudaErrorInvalidDeviceFunction);
    if (!cudashim_stream_valid(stream)) return fail(cudaErrorInvalidResourceHandle);
    if (!grid.x || !grid.y || !grid.z || !block.x || !block.y || !block.z || block.x * block.y * block.z > 1024)
        return fail(cudaErrorInvalidConfiguration);
    cudashim_drain(stream); /* in stream order, on this thread (see the header) */
    ((void (*)(void **))func)(args);
    return cudaSuccess;
}

cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
                             cudaStream_t stream) {
    count_call(__func__);
    (void)sharedMem;
    return launch(func, gridDim, blockDim, args, stream);
}

/* The head of cudaLaunchConfig_t; the attributes that follow are not modelled. */
struct launch_config {
    dim3 grid, block;
    size_t shared;
    cudaStream_t stream;
};

cudaError_t cudaLaunchKernelExC(const struct launch_config *config, const void *func, void **args) {
    count_call(__func__);
    if (!config) return fail(cudaErrorInvalidValue);
    return launch(func, config->grid, config->block, args, config->stream);
}

cudaError_t cudaLaunchCooperativeKernel(const void *func, dim3 gridDim, dim3 blockDim, void **args, size_t sharedMem,
                                        cudaStream_t stream) {
    count_call(__func__);
    (void)sharedMem;
    return launch(func, gridDim, blockDim, args, stream);
}

/* What nvcc's generated code calls at load for each kernel: the stand-in keeps the device
 * name, whose mangled parameter types give cudaFuncGetParamInfo its answers (a real runtime
 * reads them from the fatbinary). */
#define MAX_KERNELS 64
static struct {
    const void *host;
    char name[128];
} kernels[MAX_KERNELS];
static int kernel_count;

void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun, char *deviceFun, const char *deviceName,
                            int thread_limit, void *tid, void *bid, void *bDim, void *gDim, int *wSize) {
    (void)fatCubinHandle, (void)deviceFun, (void)thread_limit;
    (void)tid, (void)bid, (void)bDim, (void)gDim, (void)wSize;
    pthread_mutex_lock(&lock);
    if (hostFun && deviceName && kernel_count < MAX_KERNELS) {
        kernels[kernel_count].host = hostFun;
        snprintf(kernels[kernel_count].name, sizeof kernels[kernel_count].name, "%s", deviceName);
        kernel_count++;
    }
    pthread_mutex_unlock(&lock);
}

/* The size of the mangled type at *p (Itanium ABI: builtin types, pointers, const, the S_
 * substitutions of a repeated pointer), advancing past it; 0 for one not understood. */
static size_t mangled_size(const char **p) {
    while (**p == 'K' || **p == 'V') (*p)++;
    char c = *(*p)++;
    switch (c) {
    case 'P':
        return mangled_size(p) ? 8 : 0;
    case 'S':
        while (**p && **p != '_') (*p)++;
        if (**p == '_') (*p)++;
        return 8;
    case 'b': case 'c': case 'a': case 'h': return 1;
    case 's': case 't': return 2;
    case 'i': case 'j': case 'f': return 4;
    case 'l': case 'm': case 'x': case 'y': case 'd': return 8;
    default: return 0;
    }
}

cudaError_t cudaFuncGetParamInfo(const void *func, size_t index, size_t *offset, size_t *size) {
    count_call(__func__);
    if (!offset || !size) return fail(cudaErrorInvalidValue);
    const char *name = NULL;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < kernel_count && !name; i++)
        if (kernels[i].host == func) name = kernels[i].name;
    pthread_mutex_unlock(&lock);
    if (!name || strncmp(name, "_Z", 2)) return fail(cudaErrorInvalidDeviceFunction);
    const char *p = name + 2;
    size_t len = 0;
    while (*p >= '0' && *p <= '9') len = len * 10 + (size_t)(*p++ - '0');
    if (strlen(p) < len) return fail(cudaErrorInvalidDeviceFunction);
    p += len;
    size_t at = 0;
    for (size_t i = 0; *p; i++) {
        size_t bytes = mangled_size(&p);
        if (!bytes || (bytes == 0 && i == 0)) break;
        at = (at + bytes - 1) / bytes * bytes;
        if (i == index) {
            *offset = at;
            *size = bytes;
            return cudaSuccess;
        }
        at += bytes;
    }
    return fail(cudaErrorInvalidValue); /* past the last parameter */
}

/* ---- versions, devices ---- */

cudaError_t cudaRuntimeGetVersion(int *runtimeVersion) {
    count_call(__func__);
    if (!runtimeVersion) return fail(cudaErrorInvalidValue);
    *runtimeVersion = SHIM_RUNTIME_VERSION;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *driverVersion) {
    count_call(__func__);
    pthread_once(&init_once, initialise);
    if (!driverVersion) return fail(cudaErrorInvalidValue);
    *driverVersion = driver_version;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int *count) {
    count_call(__func__);
    ENTER();
    INJECT("cudaGetDeviceCount");
    if (!count) return fail(cudaErrorInvalidValue);
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
    count_call(__func__);
    ENTER();
    return device == 0 ? cudaSuccess : fail(101 /* cudaErrorInvalidDevice */);
}

/* The compute capability, as the driver reports it (CUDASHIM_COMPUTE_CAPABILITY); other
 * attributes are not modelled. */
cudaError_t cudaDeviceGetAttribute(int *value, int attr, int device) {
    count_call(__func__);
    ENTER();
    if (!value || device != 0 || (attr != 75 && attr != 76)) return fail(cudaErrorInvalidValue);
    typedef int (*get_attribute)(int *, int, int);
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    get_attribute get = cuda ? (get_attribute)dlsym(cuda, "cuDeviceGetAttribute") : NULL;
    int status = get ? get(value, attr, device) : 1;
    if (cuda) dlclose(cuda);
    return status ? fail(cudaErrorInvalidValue) : cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
    count_call(__func__);
    ENTER();
    if (!device) return fail(cudaErrorInvalidValue);
    *device = 0;
    return cudaSuccess;
}

/* ---- memory ---- */

/* A "potentially unsafe" call during a capture (engine.c): refused, as CUDA refuses it. */
#define CAPTURE_UNSAFE()                                     \
    do {                                                     \
        if (gpu.capture_unsafe && gpu.capture_unsafe())      \
            return fail(cudaErrorStreamCaptureUnsupported);  \
    } while (0)

static cudaError_t allocate(void **devPtr, size_t size) {
    CAPTURE_UNSAFE();
    if (!devPtr) return fail(cudaErrorInvalidValue);
    if (size == 0) {
        *devPtr = NULL;
        return cudaSuccess;
    }
    unsigned long long p = 0;
    int status = drv_mem_alloc(&p, size);
    if (status) return fail(status == 2 ? cudaErrorMemoryAllocation : cudaErrorInvalidValue);
    *devPtr = (void *)(uintptr_t)p;
    return cudaSuccess;
}

static cudaError_t release(void *devPtr) {
    if (!devPtr) return cudaSuccess;
    return drv_mem_free((unsigned long long)(uintptr_t)devPtr) ? fail(cudaErrorInvalidValue) : cudaSuccess;
}

cudaError_t cudaMalloc(void **devPtr, size_t size) {
    count_call(__func__);
    ENTER();
    INJECT("cudaMalloc");
    return allocate(devPtr, size);
}

cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t stream) {
    count_call(__func__);
    ENTER();
    INJECT("cudaMallocAsync");
    if (!cudashim_stream_valid(stream)) return fail(cudaErrorInvalidResourceHandle);
    return allocate(devPtr, size);
}

cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags) {
    count_call(__func__);
    ENTER();
    INJECT("cudaMallocManaged");
    if (flags != 1 && flags != 2) return fail(cudaErrorInvalidValue); /* cudaMemAttachGlobal, cudaMemAttachHost */
    return allocate(devPtr, size);
}

/* Rows of `width` bytes, each padded to a 512-byte pitch, as on NVIDIA GPUs. */
cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height) {
    count_call(__func__);
    ENTER();
    INJECT("cudaMallocPitch");
    if (!pitch) return fail(cudaErrorInvalidValue);
    *pitch = (width + 511) & ~(size_t)511;
    return allocate(devPtr, *pitch * height);
}

cudaError_t cudaMallocFromPoolAsync(void **devPtr, size_t size, void *pool, cudaStream_t stream) {
    count_call(__func__);
    ENTER();
    INJECT("cudaMallocFromPoolAsync");
    if (!pool || !cudashim_stream_valid(stream)) return fail(cudaErrorInvalidValue);
    return allocate(devPtr, size);
}

/* Pinned host memory: host memory, never device memory; the driver's (cuMemHostAlloc), so
 * that copies into it are asynchronous and its device pointer (the same address: unified
 * addressing) is a target for stream memory operations. */
static cudaError_t host_alloc(void **ptr, size_t size, unsigned int flags) {
    CAPTURE_UNSAFE();
    if (!ptr || flags > 0xf) return fail(cudaErrorInvalidValue);
    int (*alloc)(void **, size_t, unsigned int) = driver_fn("cuMemHostAlloc");
    return alloc && !alloc(ptr, size, flags & 0x7) ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaMallocHost(void **ptr, size_t size) {
    count_call(__func__);
    ENTER();
    return host_alloc(ptr, size, 0);
}

cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned int flags) {
    count_call(__func__);
    ENTER();
    return host_alloc(ptr, size, flags); /* cudaHostAllocPortable 1, Mapped 2, WriteCombined 4 */
}

/* Waits for the device first (it may still be writing the memory): a host-blocking call. */
cudaError_t cudaFreeHost(void *ptr) {
    count_call(__func__);
    if (!ptr) return cudaSuccess;
    if (gpu.wait_all && !forked_child) gpu.wait_all("cudaFreeHost");
    if (drv_free_pinned) drv_free_pinned(ptr);
    else free(ptr);
    return cudaSuccess;
}

cudaError_t cudaHostGetDevicePointer(void **pDevice, void *pHost, unsigned int flags) {
    count_call(__func__);
    ENTER();
    int (*get)(unsigned long long *, void *, unsigned int) = driver_fn("cuMemHostGetDevicePointer");
    return pDevice && get && !get((unsigned long long *)pDevice, pHost, flags) ? cudaSuccess : fail(cudaErrorInvalidValue);
}

cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags) {
    count_call(__func__);
    ENTER();
    CAPTURE_UNSAFE();
    int (*reg)(void *, size_t, unsigned int) = driver_fn("cuMemHostRegister");
    int status = reg ? reg(ptr, size, flags) : 1;
    return status ? fail(status == 712 ? 712 : cudaErrorInvalidValue) : cudaSuccess;
}

cudaError_t cudaHostUnregister(void *ptr) {
    count_call(__func__);
    ENTER();
    int (*unreg)(void *) = driver_fn("cuMemHostUnregister");
    int status = unreg ? unreg(ptr) : 1;
    return status ? fail(status == 713 ? 713 : cudaErrorInvalidValue) : cudaSuccess;
}

cudaError_t cudaFree(void *devPtr) {
    count_call(__func__);
    ENTER();
    INJECT("cudaFree");
    CAPTURE_UNSAFE();
    return release(devPtr);
}

/* Stream-ordered: the memory goes back once the stream's earlier work ran. */
cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t stream) {
    count_call(__func__);
    ENTER();
    INJECT("cudaFreeAsync");
    if (!cudashim_stream_valid(stream)) return fail(cudaErrorInvalidResourceHandle);
    int (*free_async)(unsigned long long, void *) = driver_fn("cuMemFreeAsync");
    if (!free_async) return release(devPtr);
    return free_async((unsigned long long)(uintptr_t)devPtr, stream) ? fail(cudaErrorInvalidValue) : cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total) {
    count_call(__func__);
    ENTER();
    if (!free_bytes || !total) return fail(cudaErrorInvalidValue);
    return drv_mem_get_info(free_bytes, total) ? fail(cudaErrorInvalidValue) : cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *attributes, const void *ptr) {
    count_call(__func__);
    ENTER();
    if (!attributes) return fail(cudaErrorInvalidValue);
    int device = ptr && cudashim_is_device_range(ptr, 1);
    attributes->type = device ? cudaMemoryTypeDevice : cudaMemoryTypeUnregistered;
    attributes->device = device ? 0 : -2;
    attributes->devicePointer = device ? (void *)ptr : NULL;
    attributes->hostPointer = device ? NULL : (void *)ptr;
    return cudaSuccess;
}

/* A synchronisation: waits for `stream`'s work (all: the device's), then reports the sticky
 * error; a host-blocking call named `who`. */
static int settle_on(cudaStream_t stream, int all, const char *who) {
    if (gpu.wait_all) return all ? gpu.wait_all(who) : gpu.wait_stream(stream, 0, who);
    pthread_mutex_lock(&lock); /* no driver: nothing ran anywhere */
    if (pending_fault && !sticky_error) sticky_error = pending_fault;
    pending_fault = 0;
    int code = sticky_error;
    pthread_mutex_unlock(&lock);
    return code;
}

/* Checks a copy; `dst_host`/`src_host` say which sides are host memory. */
static cudaError_t check_copy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind, int *dst_host,
                              int *src_host) {
    if (count == 0) return cudaSuccess;
    if (!dst || !src) return fail(cudaErrorInvalidValue);
    int dst_device, src_device;
    switch (kind) {
    case cudaMemcpyHostToHost: dst_device = 0; src_device = 0; break;
    case cudaMemcpyHostToDevice: dst_device = 1; src_device = 0; break;
    case cudaMemcpyDeviceToHost: dst_device = 0; src_device = 1; break;
    case cudaMemcpyDeviceToDevice: dst_device = 1; src_device = 1; break;
    case cudaMemcpyDefault:
        dst_device = cudashim_is_device_range(dst, 1);
        src_device = cudashim_is_device_range(src, 1);
        break;
    default: return fail(cudaErrorInvalidValue);
    }
    if ((dst_device && !cudashim_is_device_range(dst, count)) ||
        (src_device && !cudashim_is_device_range(src, count)))
        return fail(cudaErrorInvalidValue);
    *dst_host = !dst_device;
    *src_host = !src_device;
    return cudaSuccess;
}

static cudaError_t copy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) {
    int dst_host, src_host;
    if (count == 0) return cudaSuccess;
    cudaError_t checked = check_copy(dst, src, count, kind, &dst_host, &src_host);
    if (checked) return checked;
    memmove(dst, src, count);
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind) {
    count_call(__func__);
    ENTER();
    INJECT("cudaMemcpy");
    CAPTURE_UNSAFE();
    /* cudaMemcpy waits for the legacy stream's work, which waits for the blocking streams'. */
    int async = settle_on(NULL, 0, "cudaMemcpy");
    if (async) return fail(async);
    return copy(dst, src, count, kind);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
    count_call(__func__);
    ENTER();
    INJECT("cudaMemcpyAsync");
    if (!cudashim_stream_valid(stream)) return fail(cudaErrorInvalidResourceHandle);
    if (count == 0) return cudaSuccess;
    int dst_host, src_host;
    cudaError_t checked = check_copy(dst, src, count, kind, &dst_host, &src_host);
    if (checked) return checked;
    /* Into pageable memory it returns once done (a host-blocking call); else it is queued. */
    int status = drv_copy_async(dst, src, count, dst_host, src_host, stream, 0, "cudaMemcpyAsync");
    return status ? fail(status) : cudaSuccess;
}

struct memset_work {
    void *dst;
    size_t count;
    int value;
};

static int run_memset(void *arg) {
    struct memset_work *m = arg;
    memset(m->dst, m->value, m->count);
    return 0;
}

cudaError_t cudaMemset(void *devPtr, int value, size_t count) {
    count_call(__func__);
    ENTER();
    if (count == 0) return cudaSuccess;
    if (!devPtr || !cudashim_is_device_range(devPtr, count)) return fail(cudaErrorInvalidValue);
    /* Asynchronous to the host, on the legacy stream (device memory is never pinned). */
    struct memset_work m = {devPtr, count, value};
    int status = gpu.submit(NULL, 0, run_memset, NULL, &m, sizeof m);
    return status ? fail(status) : cudaSuccess;
}

/* ---- errors ---- */

cudaError_t cudaGetLastError(void) {
    count_call(__func__);
    if (context_error()) return context_error();
    int code = last_error;
    last_error = cudaSuccess;
    return code;
}

cudaError_t cudaPeekAtLastError(void) {
    count_call(__func__); return context_error() ? context_error() : last_error; }

const char *cudaGetErrorName(cudaError_t error) {
    switch (error) {
    case 0: return "cudaSuccess";
    case 1: return "cudaErrorInvalidValue";
    case 2: return "cudaErrorMemoryAllocation";
    case 3: return "cudaErrorInitializationError";
    case 35: return "cudaErrorInsufficientDriver";
    case 100: return "cudaErrorNoDevice";
    case 101: return "cudaErrorInvalidDevice";
    case 400: return "cudaErrorInvalidResourceHandle";
    case 600: return "cudaErrorNotReady";
    case 700: return "cudaErrorIllegalAddress";
    case 719: return "cudaErrorLaunchFailure";
    case 900: return "cudaErrorStreamCaptureUnsupported";
    case 901: return "cudaErrorStreamCaptureInvalidated";
    default: return "cudaErrorUnknown";
    }
}

const char *cudaGetErrorString(cudaError_t error) {
    switch (error) {
    case 0: return "no error";
    case 1: return "invalid argument";
    case 2: return "out of memory";
    case 35: return "CUDA driver version is insufficient for CUDA runtime version";
    case 100: return "no CUDA-capable device is detected";
    case 600: return "device not ready";
    case 700: return "an illegal memory access was encountered";
    case 719: return "unspecified launch failure";
    case 900: return "operation not permitted when stream is capturing";
    default: return "unknown error";
    }
}

/* ---- streams ---- */

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags) {
    count_call(__func__);
    ENTER();
    if (!stream || flags > cudaStreamNonBlocking) return fail(cudaErrorInvalidValue);
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_STREAMS; i++) {
        if (!streams[i].live) {
            streams[i] = (struct stream){1};
            pthread_mutex_unlock(&lock);
            *stream = (cudaStream_t)&streams[i];
            gpu.stream_created(*stream, flags); /* non-blocking: no ordering with the legacy stream */
            return cudaSuccess;
        }
    }
    pthread_mutex_unlock(&lock);
    return fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaStreamCreate(cudaStream_t *stream) {
    count_call(__func__); return cudaStreamCreateWithFlags(stream, 0); }

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    count_call(__func__);
    ENTER();
    if (stream == NULL || !cudashim_stream_valid(stream) || stream == cudaStreamLegacy ||
        stream == cudaStreamPerThread)
        return fail(cudaErrorInvalidResourceHandle);
    ((struct stream *)stream)->live = 0; /* its queued work still runs, as CUDA's does */
    gpu.stream_destroyed(stream);
    return cudaSuccess;
}

static struct stream *user_stream(cudaStream_t stream) {
    if (stream == NULL || stream == cudaStreamLegacy || stream == cudaStreamPerThread) return NULL;
    return (struct stream *)stream;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    count_call(__func__);
    ENTER();
    INJECT("cudaStreamSynchronize");
    if (!cudashim_stream_valid(stream)) return fail(cudaErrorInvalidResourceHandle);
    /* As CUDA does: refused, and the capture is lost. */
    if (gpu.capture_conflict(stream, 0)) return fail(cudaErrorStreamCaptureUnsupported);
    int async = settle_on(stream, 0, "cudaStreamSynchronize");
    return async ? fail(async) : cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
    count_call(__func__);
    ENTER();
    INJECT("cudaDeviceSynchronize");
    CAPTURE_UNSAFE();
    int async = settle_on(NULL, 1, "cudaDeviceSynchronize");
    return async ? fail(async) : cudaSuccess;
}

/* Never blocks: cudaErrorNotReady (600, not an error the thread keeps) while work is queued. */
cudaError_t cudaStreamQuery(cudaStream_t stream) {
    count_call(__func__);
    ENTER();
    if (!cudashim_stream_valid(stream)) return fail(cudaErrorInvalidResourceHandle);
    if (gpu.capture_conflict(stream, 0)) return fail(cudaErrorStreamCaptureUnsupported);
    int code = gpu.query_stream(stream, 0);
    return code == 600 ? code : code ? fail(code) : cudaSuccess;
}

/* ---- events (the stand-in GPU's, shared with the driver's CUevent) ---- */

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
    count_call(__func__);
    ENTER();
    return gpu.event_create((void **)event, flags) ? fail(cudaErrorInvalidValue) : cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event) { return cudaEventCreateWithFlags(event, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
    count_call(__func__);
    ENTER();
    return gpu.event_destroy(event) ? fail(cudaErrorInvalidResourceHandle) : cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    count_call(__func__);
    ENTER();
    if (!cudashim_stream_valid(stream)) return fail(cudaErrorInvalidResourceHandle);
    int code = gpu.event_record(event, stream, 0);
    return code ? fail(code) : cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
    count_call(__func__);
    ENTER();
    int code = gpu.event_query(event);
    return code == 600 ? code : code ? fail(code) : cudaSuccess;
}

/* A host-blocking call: until the event's latest record ran. */
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    count_call(__func__);
    ENTER();
    int code = gpu.event_synchronize(event, "cudaEventSynchronize");
    return code ? fail(code) : cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
    count_call(__func__);
    ENTER();
    int code = gpu.event_elapsed(ms, start, end);
    return code == 600 ? code : code ? fail(code) : cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
    count_call(__func__);
    ENTER();
    if (!cudashim_stream_valid(stream) || flags > 1) return fail(cudaErrorInvalidValue);
    int code = gpu.stream_wait_event(stream, 0, event);
    return code ? fail(code) : cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *status) {
    count_call(__func__);
    ENTER();
    if (!status || !cudashim_stream_valid(stream)) return fail(cudaErrorInvalidValue);
    *status = (enum cudaStreamCaptureStatus)gpu.capture_status(stream, 0);
    return cudaSuccess;
}

/* Captures, their modes and their graphs are the stand-in GPU's (engine.c), shared with the
 * driver: work queued on a capturing stream is recorded, and runs at each graph launch. */
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
    count_call(__func__);
    ENTER();
    if (!user_stream(stream) || !cudashim_stream_valid(stream)) return fail(cudaErrorStreamCaptureUnsupported);
    int code = gpu.capture_begin(stream, 0, (int)mode);
    return code ? fail(code) : cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph) {
    count_call(__func__);
    ENTER();
    if (!user_stream(stream) || !cudashim_stream_valid(stream) || !graph) return fail(cudaErrorInvalidValue);
    void *g = NULL;
    int code = gpu.capture_end(stream, 0, &g);
    if (code) return fail(code);
    *graph = (cudaGraph_t)g;
    return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *mode) {
    count_call(__func__);
    ENTER();
    return gpu.capture_exchange_mode((int *)mode) ? fail(cudaErrorInvalidValue) : cudaSuccess;
}

/* Graphs: a captured graph is what its capture recorded; an executable graph is the same
 * object, and each launch queues the recorded work on the launch's stream, then one piece of
 * work that faults for the launch CUDASHIM_GRAPH_FAULT names. */
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags) {
    count_call(__func__);
    ENTER();
    if (!exec || !graph || flags) return fail(cudaErrorInvalidValue);
    *exec = (cudaGraphExec_t)graph;
    return cudaSuccess;
}

/* Every update succeeds when both are the stand-in's (the topology is not compared);
 * `resultInfo` (cudaGraphExecUpdateResultInfo) is left as it is. */
cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t graph, void *resultInfo) {
    count_call(__func__);
    ENTER();
    (void)resultInfo;
    if (!exec || !graph || !gpu.graph_update) return fail(cudaErrorInvalidValue);
    return gpu.graph_update(exec, graph) ? fail(cudaErrorInvalidValue) : cudaSuccess;
}

/* The same, with its flags (cudaGraphInstantiateFlagAutoFreeOnLaunch 1, PyTorch's; Upload 2,
 * DeviceLaunch 4, UseNodePriority 8): accepted, and nothing more. */
cudaError_t cudaGraphInstantiateWithFlags(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long flags) {
    count_call(__func__);
    ENTER();
    if (!exec || !graph || flags & ~0xfull) return fail(cudaErrorInvalidValue);
    *exec = (cudaGraphExec_t)graph;
    return cudaSuccess;
}

/* The stand-in's graphs have no nodes to name: any node is taken as one of the executable's
 * kernels, and the change accepted (its recorded work runs as captured). */
cudaError_t cudaGraphExecKernelNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node, const struct cudaKernelNodeParams *params) {
    count_call(__func__);
    ENTER();
    return exec && node && params ? cudaSuccess : fail(cudaErrorInvalidValue);
}

/* CUDA 12.2's form for any kind of node (cudaGraphNodeParams): the same. */
cudaError_t cudaGraphExecNodeSetParams(cudaGraphExec_t exec, cudaGraphNode_t node, void *params) {
    count_call(__func__);
    ENTER();
    return exec && node && params ? cudaSuccess : fail(cudaErrorInvalidValue);
}

/* The graph stays: the stand-in's executable is its graph's object. */
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    count_call(__func__);
    ENTER();
    return exec ? cudaSuccess : fail(cudaErrorInvalidValue);
}

static long graph_launches;
static int run_graph(void *arg) { return *(int *)arg; }

/* Private: one graph launch's work on `stream` (the driver's cuGraphLaunch comes here too). */
int cudashim_graph_launch(void *exec, cudaStream_t stream, int per_thread) {
    pthread_once(&init_once, initialise);
    long n = __atomic_add_fetch(&graph_launches, 1, __ATOMIC_RELAXED);
    const char *at = getenv("CUDASHIM_GRAPH_FAULT");
    int code = at && *at && atol(at) == n ? cudaErrorIllegalAddress : 0;
    if (!gpu.submit) return code ? (cudashim_raise_async(code), 0) : 0;
    int launched = gpu.graph_launch(exec, stream, per_thread);
    if (launched) return launched == 400 ? cudaErrorInvalidValue : launched;
    return gpu.submit(stream, per_thread, run_graph, NULL, &code, sizeof code);
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
    count_call(__func__);
    ENTER();
    if (!exec || !cudashim_stream_valid(stream)) return fail(cudaErrorInvalidValue);
    int code = cudashim_graph_launch(exec, stream, 0);
    return code ? fail(code) : cudaSuccess;
}

/* ---- IPC and imported memory: the driver's, through its entry points ---- */

static void *driver_fn(const char *name) {
    void *fn = NULL;
    int status = 0;
    return drv_get_proc && !drv_get_proc(name, &fn, SHIM_RUNTIME_VERSION, 0, &status) ? fn : NULL;
}

cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *handle, void *devPtr) {
    count_call(__func__);
    ENTER();
    int (*get)(cudaIpcMemHandle_t *, unsigned long long) = driver_fn("cuIpcGetMemHandle");
    return get && !get(handle, (unsigned long long)(uintptr_t)devPtr) ? cudaSuccess : fail(cudaErrorInvalidValue);
}

cudaError_t cudaIpcOpenMemHandle(void **devPtr, cudaIpcMemHandle_t handle, unsigned int flags) {
    count_call(__func__);
    ENTER();
    INJECT("cudaIpcOpenMemHandle");
    int (*open)(unsigned long long *, cudaIpcMemHandle_t, unsigned int) = driver_fn("cuIpcOpenMemHandle");
    return open && !open((unsigned long long *)devPtr, handle, flags) ? cudaSuccess : fail(cudaErrorInvalidValue);
}

cudaError_t cudaIpcCloseMemHandle(void *devPtr) {
    count_call(__func__);
    ENTER();
    int (*close_handle)(unsigned long long) = driver_fn("cuIpcCloseMemHandle");
    return close_handle && !close_handle((unsigned long long)(uintptr_t)devPtr) ? cudaSuccess : fail(cudaErrorInvalidValue);
}

cudaError_t cudaImportExternalMemory(cudaExternalMemory_t *extMem, const struct cudaExternalMemoryHandleDesc *desc) {
    count_call(__func__);
    ENTER();
    int (*import)(cudaExternalMemory_t *, const struct cudaExternalMemoryHandleDesc *) = driver_fn("cuImportExternalMemory");
    return import && !import(extMem, desc) ? cudaSuccess : fail(cudaErrorInvalidValue);
}

cudaError_t cudaExternalMemoryGetMappedBuffer(void **devPtr, cudaExternalMemory_t extMem, const struct cudaExternalMemoryBufferDesc *desc) {
    count_call(__func__);
    ENTER();
    int (*map)(unsigned long long *, cudaExternalMemory_t, const struct cudaExternalMemoryBufferDesc *) =
        driver_fn("cuExternalMemoryGetMappedBuffer");
    return map && !map((unsigned long long *)devPtr, extMem, desc) ? cudaSuccess : fail(cudaErrorInvalidValue);
}

cudaError_t cudaDestroyExternalMemory(cudaExternalMemory_t extMem) {
    count_call(__func__);
    ENTER();
    int (*destroy)(cudaExternalMemory_t) = driver_fn("cuDestroyExternalMemory");
    return destroy && !destroy(extMem) ? cudaSuccess : fail(cudaErrorInvalidValue);
}

/* ---- driver entry points, as the runtime hands them out ---- */

cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **funcPtr, unsigned int cudaVersion,
                                             unsigned long long flags, int *driverStatus) {
    count_call(__func__);
    ENTER();
    if (!symbol || !funcPtr) return fail(cudaErrorInvalidValue);
    int status = 1;
    int result = drv_get_proc(symbol, funcPtr, (int)cudaVersion, flags, &status);
    if (driverStatus) *driverStatus = status;
    return result ? fail(500 /* cudaErrorSymbolNotFound */) : cudaSuccess;
}

cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **funcPtr, unsigned long long flags, int *driverStatus) {
    return cudaGetDriverEntryPointByVersion(symbol, funcPtr, SHIM_RUNTIME_VERSION, flags, driverStatus);
}

/* ---- what CuPy 12 calls at import and around a GEMM ---- */

cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count, cudaStream_t stream) {
    count_call(__func__);
    ENTER();
    if (!cudashim_stream_valid(stream)) return fail(cudaErrorInvalidResourceHandle);
    if (count == 0) return cudaSuccess;
    if (!devPtr || !cudashim_is_device_range(devPtr, count)) return fail(cudaErrorInvalidValue);
    struct memset_work m = {devPtr, count, value};
    int status = gpu.submit(stream, 0, run_memset, NULL, &m, sizeof m);
    return status ? fail(status) : cudaSuccess;
}

/* A 2D copy: `height` rows of `width` bytes, each a row copy of cudaMemcpy[Async]'s checks. */
static cudaError_t copy_2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                           enum cudaMemcpyKind kind, cudaStream_t stream, int async) {
    if (width > dpitch || width > spitch) return fail(12 /* cudaErrorInvalidPitchValue */);
    if (width == 0 || height == 0) return cudaSuccess;
    if (!async) {
        int pending = settle_on(NULL, 0, "cudaMemcpy2D");
        if (pending) return fail(pending);
    } else if (!cudashim_stream_valid(stream)) {
        return fail(cudaErrorInvalidResourceHandle);
    }
    for (size_t row = 0; row < height; row++) {
        char *d = (char *)dst + row * dpitch;
        const char *s = (const char *)src + row * spitch;
        if (!async) {
            cudaError_t status = copy(d, s, width, kind);
            if (status) return status;
            continue;
        }
        int dst_host, src_host;
        cudaError_t checked = check_copy(d, s, width, kind, &dst_host, &src_host);
        if (checked) return checked;
        int status = drv_copy_async(d, s, width, dst_host, src_host, stream, 0, "cudaMemcpy2DAsync");
        if (status) return fail(status);
    }
    return cudaSuccess;
}

cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
                         enum cudaMemcpyKind kind) {
    count_call(__func__);
    ENTER();
    return copy_2d(dst, dpitch, src, spitch, width, height, kind, NULL, 0);
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                              size_t height, enum cudaMemcpyKind kind, cudaStream_t stream) {
    count_call(__func__);
    ENTER();
    return copy_2d(dst, dpitch, src, spitch, width, height, kind, stream, 1);
}

/* cudaDeviceProp as CUDA 12.0-12.9 lay it out (1032 bytes; CUDA 13 changed it): the fields
 * CuPy reads that the stand-in GPU can answer, written at their offsets, the rest zero. */
#define DEVICE_PROP_SIZE 1032
static void put_int(unsigned char *prop, size_t offset, int value) { memcpy(prop + offset, &value, sizeof value); }
static void put_size(unsigned char *prop, size_t offset, size_t value) { memcpy(prop + offset, &value, sizeof value); }

cudaError_t cudaGetDeviceProperties_v2(void *prop, int device) {
    count_call(__func__);
    ENTER();
    if (!prop || device != 0) return fail(prop ? 101 /* cudaErrorInvalidDevice */ : cudaErrorInvalidValue);
    int major = 0, minor = 0;
    size_t free_bytes = 0, total = 0;
    if (cudaDeviceGetAttribute(&major, 75, 0) || cudaDeviceGetAttribute(&minor, 76, 0) ||
        drv_mem_get_info(&free_bytes, &total))
        return fail(cudaErrorInvalidValue);
    unsigned char *p = prop;
    memset(p, 0, DEVICE_PROP_SIZE);
    snprintf((char *)p, 256, "cudashim stand-in GPU");
    put_size(p, 288, total);          /* totalGlobalMem */
    put_size(p, 296, 48 * 1024);      /* sharedMemPerBlock */
    put_int(p, 304, 65536);           /* regsPerBlock */
    put_int(p, 308, 32);              /* warpSize */
    put_size(p, 312, (size_t)1 << 31); /* memPitch */
    put_int(p, 320, 1024);            /* maxThreadsPerBlock */
    put_int(p, 324, 1024), put_int(p, 328, 1024), put_int(p, 332, 64);              /* maxThreadsDim */
    put_int(p, 336, 0x7fffffff), put_int(p, 340, 65535), put_int(p, 344, 65535);    /* maxGridSize */
    put_int(p, 348, 1980000);         /* clockRate (kHz) */
    put_size(p, 352, 64 * 1024);      /* totalConstMem */
    put_int(p, 360, major);
    put_int(p, 364, minor);
    put_size(p, 368, 512);            /* textureAlignment */
    put_int(p, 388, 132);             /* multiProcessorCount */
    put_int(p, 576, 1);               /* concurrentKernels */
    put_int(p, 600, 2);               /* asyncEngineCount */
    put_int(p, 604, 1);               /* unifiedAddressing */
    put_int(p, 608, 2619000);         /* memoryClockRate (kHz) */
    put_int(p, 612, 5120);            /* memoryBusWidth */
    put_int(p, 616, 50 * 1024 * 1024); /* l2CacheSize */
    put_int(p, 624, 2048);            /* maxThreadsPerMultiProcessor */
    put_size(p, 640, 228 * 1024);     /* sharedMemPerMultiprocessor */
    put_int(p, 648, 65536);           /* regsPerMultiprocessor */
    put_int(p, 652, 1);               /* managedMemory */
    put_size(p, 696, 227 * 1024);     /* sharedMemPerBlockOptin */
    return cudaSuccess;
}

/* Fat binaries (nvcc-compiled kernels in a client's own library, registered when it loads):
 * accepted and never run (a launch of one is cudaLaunchKernel's, which runs host functions). */
static void *fat_binary_handle;

void **__cudaRegisterFatBinary(void *fatCubin);
void **__cudaRegisterFatBinary(void *fatCubin) {
    (void)fatCubin;
    return &fat_binary_handle;
}

void __cudaRegisterFatBinaryEnd(void **fatCubinHandle);
void __cudaRegisterFatBinaryEnd(void **fatCubinHandle) { (void)fatCubinHandle; }

void __cudaUnregisterFatBinary(void **fatCubinHandle);
void __cudaUnregisterFatBinary(void **fatCubinHandle) { (void)fatCubinHandle; }

void __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress, const char *deviceName, int ext,
                       size_t size, int constant, int global);
void __cudaRegisterVar(void **fatCubinHandle, char *hostVar, char *deviceAddress, const char *deviceName, int ext,
                       size_t size, int constant, int global) {
    (void)fatCubinHandle, (void)hostVar, (void)deviceAddress, (void)deviceName, (void)ext, (void)size, (void)constant,
        (void)global;
}

/* The <<<...>>> configuration a kernel's host stub pops before its cudaLaunchKernel. */
struct call_configuration {
    struct { unsigned int x, y, z; } grid, block;
    size_t shared;
    void *stream;
};
static __thread struct call_configuration pushed;

unsigned int __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem, void *stream);
unsigned int __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem, void *stream) {
    pushed.grid.x = gridDim.x, pushed.grid.y = gridDim.y, pushed.grid.z = gridDim.z;
    pushed.block.x = blockDim.x, pushed.block.y = blockDim.y, pushed.block.z = blockDim.z;
    pushed.shared = sharedMem;
    pushed.stream = stream;
    return 0;
}

cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem, void *stream);
cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem, void *stream) {
    if (gridDim) gridDim->x = pushed.grid.x, gridDim->y = pushed.grid.y, gridDim->z = pushed.grid.z;
    if (blockDim) blockDim->x = pushed.block.x, blockDim->y = pushed.block.y, blockDim->z = pushed.block.z;
    if (sharedMem) *sharedMem = pushed.shared;
    if (stream) *(void **)stream = pushed.stream;
    return cudaSuccess;
}

/* ---- what CuPy 12 links and the stand-in does not model (stubs.h): each fails cleanly with
 * cudaErrorNotSupported (801) and sets the thread's last error as any failing call does ---- */

#define STUB_RT(name) \
    cudaError_t name(void); \
    cudaError_t name(void) { count_call(__func__); return fail(801 /* cudaErrorNotSupported */); }
STUB_RT(cudaCreateSurfaceObject)
STUB_RT(cudaCreateTextureObject)
STUB_RT(cudaDestroySurfaceObject)
STUB_RT(cudaDestroyTextureObject)
STUB_RT(cudaDeviceCanAccessPeer)
STUB_RT(cudaDeviceDisablePeerAccess)
STUB_RT(cudaDeviceEnablePeerAccess)
STUB_RT(cudaDeviceGetByPCIBusId)
STUB_RT(cudaDeviceGetDefaultMemPool)
STUB_RT(cudaDeviceGetLimit)
STUB_RT(cudaDeviceGetMemPool)
STUB_RT(cudaDeviceGetPCIBusId)
STUB_RT(cudaDeviceSetLimit)
STUB_RT(cudaDeviceSetMemPool)
STUB_RT(cudaFreeArray)
STUB_RT(cudaFuncGetAttributes)
STUB_RT(cudaGetChannelDesc)
STUB_RT(cudaGetTextureObjectResourceDesc)
STUB_RT(cudaGetTextureObjectTextureDesc)
STUB_RT(cudaGraphDestroy)
STUB_RT(cudaGraphUpload)
STUB_RT(cudaIpcGetEventHandle)
STUB_RT(cudaIpcOpenEventHandle)
STUB_RT(cudaLaunchHostFunc)
STUB_RT(cudaMalloc3DArray)
STUB_RT(cudaMallocArray)
STUB_RT(cudaMemAdvise)
STUB_RT(cudaMemPoolCreate)
STUB_RT(cudaMemPoolDestroy)
STUB_RT(cudaMemPoolGetAttribute)
STUB_RT(cudaMemPoolSetAttribute)
STUB_RT(cudaMemPoolTrimTo)
STUB_RT(cudaMemPrefetchAsync)
STUB_RT(cudaMemcpy2DFromArray)
STUB_RT(cudaMemcpy2DFromArrayAsync)
STUB_RT(cudaMemcpy2DToArray)
STUB_RT(cudaMemcpy2DToArrayAsync)
STUB_RT(cudaMemcpy3D)
STUB_RT(cudaMemcpy3DAsync)
STUB_RT(cudaMemcpyPeer)
STUB_RT(cudaMemcpyPeerAsync)
STUB_RT(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags)
STUB_RT(cudaProfilerStart)
STUB_RT(cudaProfilerStop)
STUB_RT(cudaStreamAddCallback)
