/* Stand-in libcuda.so.1: the driver, as far as the runtime, `doctor` and programs with a static
 * runtime ask it: versions and devices, device memory (the runtime allocates through here),
 * virtual memory, and the entry points (cuGetProcAddress) the runtime finds all of it with.
 *   CUDASHIM_DRIVER_VERSION=N   what cuDriverGetVersion reports (default 12090)
 *   CUDASHIM_DEVICE_COUNT=N     how many devices there are (default 1; 0: cuInit says no device)
 *   CUDASHIM_COMPUTE_CAPABILITY=M.N  every device's compute capability (default 9.0)
 * Device work (kernels, memsets, asynchronous copies, stream memory operations, event records)
 * goes to the stand-in GPU in engine.c, which runs it on a worker thread after the call
 * returned; its knobs (CUDASHIM_SYNC, CUDASHIM_WORKER_DELAY_US, CUDASHIM_WORKER_HOLD,
 * CUDASHIM_COUNT_BLOCKING) are listed there. Once a fault has broken the context, the driver's
 * memory, copy, stream, event and launch calls return its sticky error (not under
 * CUDASHIM_SYNC=1, where the driver never saw it). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "engine.h"
#include "include/cuda.h"

/* The context's sticky error, for the calls a broken context refuses. */
#define STICKY()                                                              \
    do {                                                                      \
        int sticky_ = cudashim_engine_error();                                \
        if (sticky_) return sticky_;                                          \
    } while (0)

/* A call that blocks its thread until the stream's work (all: the device's) ran: counted;
 * under CUDASHIM_SYNC=1 everything already ran and the driver reports nothing (as before). */
/* A "potentially unsafe" call while a capture is under way (engine.c says when): refused with
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED (900), and the captures that forbid it invalidated. */
#define CAPTURE_UNSAFE()                                   \
    do {                                                   \
        int capture_ = cudashim_engine_capture_unsafe();   \
        if (capture_) return capture_;                     \
    } while (0)

#define block_on(stream, per_thread, who) cudashim_engine_block((stream), (per_thread), 0, (who))
#define block_all(who) cudashim_engine_block(NULL, 0, 1, (who))

/* CUDASHIM_COUNT_DRIVER_CALLS=FILE: the driver functions the guard itself calls count their calls. */
#define COUNT_CALLS_VARIABLE "CUDASHIM_COUNT_DRIVER_CALLS"
#include "counting.h"

static int env_int(const char *name, int fallback) {
    const char *v = getenv(name);
    return (v && *v) ? atoi(v) : fallback;
}

CUresult cuDriverGetVersion(int *driverVersion) {
    if (!driverVersion) return 1;
    *driverVersion = env_int("CUDASHIM_DRIVER_VERSION", 12090);
    return CUDA_SUCCESS;
}

CUresult cuInit(unsigned int flags) {
    if (flags != 0) return 1;
    return env_int("CUDASHIM_DEVICE_COUNT", 1) > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

CUresult cuDeviceGetCount(int *count) {
    if (!count) return 1;
    int n = env_int("CUDASHIM_DEVICE_COUNT", 1);
    if (n <= 0) return CUDA_ERROR_NOT_INITIALIZED;
    *count = n;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    if (!device || ordinal < 0 || ordinal >= env_int("CUDASHIM_DEVICE_COUNT", 1)) return 101; /* invalid device */
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    if (!name || len <= 0) return 1;
    snprintf(name, (size_t)len, "cudashim stand-in device %d", dev);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *pi, int attrib, CUdevice dev) {
    (void)dev;
    if (!pi) return 1;
    const char *cc = getenv("CUDASHIM_COMPUTE_CAPABILITY");
    int major = 9, minor = 0;
    if (cc && *cc) sscanf(cc, "%d.%d", &major, &minor);
    if (attrib == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) *pi = major;
    else if (attrib == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR) *pi = minor;
    else if (attrib == 16) *pi = env_int("CUDASHIM_SM_COUNT", 4); /* MULTIPROCESSOR_COUNT */
    else if (attrib == 39) *pi = 2048;                          /* MAX_THREADS_PER_MULTIPROCESSOR */
    else if (attrib == 115) *pi = 1;                            /* MEMORY_POOLS_SUPPORTED: cuMemPoolCreate below */
    else return 1; /* invalid value: not modelled */
    return CUDA_SUCCESS;
}

/* ---- device memory: the stand-in driver owns it (the runtime allocates through here) ----
 *   CUDASHIM_MEM_TOTAL=BYTES   device memory size (default 16 GiB); allocations fail past it
 * "Device memory" is host memory this file hands out and tracks. Ranges mapped with the
 * virtual-memory API (cuMemMap) that touch are one stretch of memory, as on a GPU; separate
 * cuMemAlloc blocks never are, even when the host heap puts them side by side. */

struct range {
    uintptr_t base;
    size_t size;
    int kind; /* 0: allocated; 1: cuMemMap'd (virtual memory); RANGE_IPC, RANGE_EXTERNAL below */
};

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static struct range *ranges;
static size_t range_count, range_cap;
static size_t bytes_in_use;
static size_t memory_total;

static void after_fork(void) { pthread_mutex_init(&mem_lock, NULL); }

__attribute__((constructor)) static void start_memory(void) {
    const char *total = getenv("CUDASHIM_MEM_TOTAL");
    memory_total = (total && *total) ? strtoull(total, NULL, 10) : (size_t)16 << 30;
    pthread_atfork(NULL, NULL, after_fork);
}

static int track(uintptr_t base, size_t size, int kind) {
    if (range_count == range_cap) {
        size_t cap = range_cap ? range_cap * 2 : 64;
        struct range *grown = realloc(ranges, cap * sizeof *grown);
        if (!grown) return 0;
        ranges = grown;
        range_cap = cap;
    }
    ranges[range_count++] = (struct range){base, size, kind};
    bytes_in_use += size;
    return 1;
}

static int untrack(uintptr_t base, int kind) {
    for (size_t i = 0; i < range_count; i++) {
        if (ranges[i].base == base && ranges[i].kind == kind) {
            bytes_in_use -= ranges[i].size;
            ranges[i] = ranges[--range_count];
            return 1;
        }
    }
    return 0;
}

static const struct range *range_at(uintptr_t p) {
    for (size_t i = 0; i < range_count; i++)
        if (p >= ranges[i].base && p - ranges[i].base < ranges[i].size) return &ranges[i];
    return NULL;
}

/* Private interface for the stand-in runtime and cuBLAS (not part of CUDA). */
int cudashim_driver_is_device_range(const void *ptr, size_t bytes) {
    uintptr_t p = (uintptr_t)ptr, end = p + bytes;
    int inside = 0;
    pthread_mutex_lock(&mem_lock);
    const struct range *r = range_at(p);
    while (r) {
        uintptr_t r_end = r->base + r->size;
        if (end <= r_end) {
            inside = 1;
            break;
        }
        if (r->kind != 1) break;
        const struct range *next = range_at(r_end);
        r = next && next->kind == 1 ? next : NULL;
    }
    pthread_mutex_unlock(&mem_lock);
    return inside;
}

int cudashim_driver_reserve(size_t bytes) {
    pthread_mutex_lock(&mem_lock);
    int ok = bytes <= memory_total - bytes_in_use;
    if (ok) bytes_in_use += bytes;
    pthread_mutex_unlock(&mem_lock);
    return ok;
}

void cudashim_driver_release(size_t bytes) {
    pthread_mutex_lock(&mem_lock);
    bytes_in_use -= bytes < bytes_in_use ? bytes : bytes_in_use;
    pthread_mutex_unlock(&mem_lock);
}

CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total) {
    if (!free_bytes || !total) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mem_lock);
    *free_bytes = memory_total - bytes_in_use;
    *total = memory_total;
    pthread_mutex_unlock(&mem_lock);
    return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) {
    STICKY();
    CAPTURE_UNSAFE();
    if (!dptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mem_lock);
    int over = bytesize > memory_total - bytes_in_use;
    pthread_mutex_unlock(&mem_lock);
    if (over) return CUDA_ERROR_OUT_OF_MEMORY;
    void *p = aligned_alloc(256, (bytesize + 255) & ~(size_t)255);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    pthread_mutex_lock(&mem_lock);
    int ok = track((uintptr_t)p, bytesize, 0);
    pthread_mutex_unlock(&mem_lock);
    if (!ok) {
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

#define RANGE_IPC 2      /* opened from an IPC handle; closed, not freed */
#define RANGE_EXTERNAL 3 /* a buffer of imported memory; freed with cuMemFree, stays mapped */

/* Frees now: the caller made sure no queued work still uses the memory. */
static CUresult free_device(CUdeviceptr dptr) {
    pthread_mutex_lock(&mem_lock);
    int found = untrack((uintptr_t)dptr, 0);
    int external = !found && untrack((uintptr_t)dptr, RANGE_EXTERNAL);
    pthread_mutex_unlock(&mem_lock);
    if (!found && !external) return CUDA_ERROR_INVALID_VALUE;
    if (found) free((void *)(uintptr_t)dptr);
    return CUDA_SUCCESS;
}

/* As on a GPU, freeing synchronises with the device first (work queued before it may still
 * use the memory): a host-blocking call. */
CUresult cuMemFree_v2(CUdeviceptr dptr) {
    STICKY();
    CAPTURE_UNSAFE();
    if (!dptr) return CUDA_SUCCESS;
    int code = block_all("cuMemFree_v2");
    return code ? code : free_device(dptr);
}

static int live_allocation(CUdeviceptr dptr) {
    pthread_mutex_lock(&mem_lock);
    const struct range *r = range_at((uintptr_t)dptr);
    int ok = r && r->base == dptr && (r->kind == 0 || r->kind == 3);
    pthread_mutex_unlock(&mem_lock);
    return ok;
}

static int run_free(void *arg) {
    free_device(*(CUdeviceptr *)arg);
    return 0;
}

/* The driver's other allocators: the same device memory as cuMemAlloc_v2 (streams and pools
 * are not modelled in the driver: the stand-in runs everything in order). */
CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags) {
    if (flags != 1 && flags != 2) return CUDA_ERROR_INVALID_VALUE; /* CU_MEM_ATTACH_GLOBAL, _HOST */
    return cuMemAlloc_v2(dptr, bytesize);
}

/* Rows of `width` bytes, each padded to a 512-byte pitch, as cudaMallocPitch. */
CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned int elem) {
    if (!pitch || (elem != 4 && elem != 8 && elem != 16)) return CUDA_ERROR_INVALID_VALUE;
    *pitch = (width + 511) & ~(size_t)511;
    return cuMemAlloc_v2(dptr, *pitch * height);
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, void *stream) {
    (void)stream;
    return cuMemAlloc_v2(dptr, bytesize);
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, void *stream) { return cuMemAllocAsync(dptr, bytesize, stream); }

struct pool;
static struct pool *pool_of(void *handle); /* a live memory pool (below), or NULL; under mem_lock */

CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, void *pool, void *stream) {
    (void)stream;
    pthread_mutex_lock(&mem_lock);
    int live = pool_of(pool) != NULL;
    pthread_mutex_unlock(&mem_lock);
    return live ? cuMemAlloc_v2(dptr, bytesize) : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, void *pool, void *stream) {
    return cuMemAllocFromPoolAsync(dptr, bytesize, pool, stream);
}

/* Stream-ordered: the memory goes back once the stream's earlier work ran. */
static CUresult free_async(CUdeviceptr dptr, void *stream, int per_thread) {
    STICKY();
    if (!dptr) return CUDA_SUCCESS;
    if (!live_allocation(dptr)) return CUDA_ERROR_INVALID_VALUE;
    return cudashim_engine_submit(stream, per_thread, run_free, NULL, &dptr, sizeof dptr);
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, void *stream) { return free_async(dptr, stream, 0); }

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, void *stream) { return free_async(dptr, stream, 1); }

/* ---- pinned host memory: host memory, never device memory (cudashim_driver_is_device_range
 * says no), tracked apart so that copies into it can be asynchronous and stream memory
 * operations can write it. With unified addressing every pinned allocation is mapped and its
 * device pointer is its host pointer (cuMemHostGetDevicePointer_v2). ---- */
#define PINNED_REGISTERED 0x100 /* cuMemHostRegister'd: the program's memory, not freed here */

struct pinned {
    uintptr_t base;
    size_t size;
    unsigned int flags;
};
static struct pinned *pinned;
static size_t pinned_count, pinned_cap;

static int track_pinned(void *p, size_t size, unsigned int flags) {
    pthread_mutex_lock(&mem_lock);
    int ok = 1;
    if (pinned_count == pinned_cap) {
        size_t cap = pinned_cap ? pinned_cap * 2 : 64;
        struct pinned *grown = realloc(pinned, cap * sizeof *grown);
        if (grown) pinned = grown, pinned_cap = cap;
        else ok = 0;
    }
    if (ok) pinned[pinned_count++] = (struct pinned){(uintptr_t)p, size, flags};
    pthread_mutex_unlock(&mem_lock);
    return ok;
}

/* Removes the pinned range starting at p; its flags, or -1 when there is none. */
static long untrack_pinned(const void *p) {
    long flags = -1;
    pthread_mutex_lock(&mem_lock);
    for (size_t i = 0; i < pinned_count; i++) {
        if (pinned[i].base == (uintptr_t)p) {
            flags = pinned[i].flags;
            pinned[i] = pinned[--pinned_count];
            break;
        }
    }
    pthread_mutex_unlock(&mem_lock);
    return flags;
}

/* 1 when [ptr, ptr + bytes) lies inside one pinned range (private, for the runtime too). */
int cudashim_driver_is_pinned(const void *ptr, size_t bytes) {
    uintptr_t p = (uintptr_t)ptr;
    int inside = 0;
    pthread_mutex_lock(&mem_lock);
    for (size_t i = 0; i < pinned_count && !inside; i++)
        inside = p >= pinned[i].base && p - pinned[i].base <= pinned[i].size && bytes <= pinned[i].size - (p - pinned[i].base);
    pthread_mutex_unlock(&mem_lock);
    return inside;
}

CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int flags) {
    STICKY();
    CAPTURE_UNSAFE();
    if (!pp || flags & ~(unsigned)(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED))
        return CUDA_ERROR_INVALID_VALUE;
    size_t rounded = (bytesize + 255) & ~(size_t)255;
    void *p = aligned_alloc(256, rounded ? rounded : 256);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    memset(p, 0, rounded ? rounded : 256);
    if (!track_pinned(p, bytesize, flags)) {
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pp = p;
    return CUDA_SUCCESS;
}

CUresult cuMemAllocHost_v2(void **pp, size_t bytesize) { return cuMemHostAlloc(pp, bytesize, 0); }

/* Private: frees pinned memory now (the runtime synchronised first); -1 when it was not. */
int cudashim_driver_free_pinned(void *p) {
    long flags = untrack_pinned(p);
    if (flags >= 0 && (flags & PINNED_REGISTERED)) return -1;
    free(p); /* as before, also memory the stand-in did not pin */
    return flags >= 0 ? 0 : -1;
}

/* Pinned memory is freed once the device is done with it: a host-blocking call. */
CUresult cuMemFreeHost(void *p) {
    STICKY();
    if (!p) return CUDA_SUCCESS;
    int code = block_all("cuMemFreeHost");
    if (code) return code;
    cudashim_driver_free_pinned(p);
    return CUDA_SUCCESS;
}

CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int flags) {
    STICKY();
    if (!pdptr || flags != 0 || !cudashim_driver_is_pinned(p, 1)) return CUDA_ERROR_INVALID_VALUE;
    *pdptr = (CUdeviceptr)(uintptr_t)p; /* unified addressing: the same address */
    return CUDA_SUCCESS;
}

#define CU_MEMHOSTREGISTER_PORTABLE 0x1
#define CU_MEMHOSTREGISTER_DEVICEMAP 0x2
#define CU_MEMHOSTREGISTER_IOMEMORY 0x4
#define CU_MEMHOSTREGISTER_READ_ONLY 0x8
#define CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED 712
#define CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED 713

CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int flags) {
    STICKY();
    CAPTURE_UNSAFE();
    if (!p || !bytesize || flags & ~0xfu) return CUDA_ERROR_INVALID_VALUE;
    if (cudashim_driver_is_pinned(p, 1)) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    return track_pinned(p, bytesize, flags | PINNED_REGISTERED) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuMemHostUnregister(void *p) {
    STICKY();
    int registered = 0;
    pthread_mutex_lock(&mem_lock);
    for (size_t i = 0; i < pinned_count; i++)
        if (pinned[i].base == (uintptr_t)p) registered = (pinned[i].flags & PINNED_REGISTERED) != 0;
    pthread_mutex_unlock(&mem_lock);
    if (!registered) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
    int code = block_all("cuMemHostUnregister"); /* the device may still be writing it */
    if (code) return code;
    untrack_pinned(p);
    return CUDA_SUCCESS;
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr dptr) {
    pthread_mutex_lock(&mem_lock);
    const struct range *r = range_at((uintptr_t)dptr);
    if (r) {
        if (base) *base = r->base;
        if (size) *size = r->size;
    }
    pthread_mutex_unlock(&mem_lock);
    return r ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

/* ---- IPC: a handle names an allocation; opening it in this process gives a copy of its
 * bytes at a new address (the stand-in has no second process to share with), of the
 * allocation's size, until closed. ---- */
struct ipc_handle {
    unsigned long long magic, base, size;
};
#define IPC_MAGIC 0x6370696873616475ull

CUresult cuIpcGetMemHandle(CUipcMemHandle *handle, CUdeviceptr dptr) {
    CUdeviceptr base;
    size_t size;
    if (!handle || cuMemGetAddressRange_v2(&base, &size, dptr)) return CUDA_ERROR_INVALID_VALUE;
    struct ipc_handle h = {IPC_MAGIC, base, size};
    memset(handle, 0, sizeof *handle);
    memcpy(handle->reserved, &h, sizeof h);
    return CUDA_SUCCESS;
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *dptr, CUipcMemHandle handle, unsigned int flags) {
    struct ipc_handle h;
    memcpy(&h, handle.reserved, sizeof h);
    if (!dptr || h.magic != IPC_MAGIC || flags > 1) return CUDA_ERROR_INVALID_VALUE;
    void *p = aligned_alloc(256, (h.size + 255) & ~(size_t)255);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(p, (const void *)(uintptr_t)h.base, h.size);
    pthread_mutex_lock(&mem_lock);
    int ok = track((uintptr_t)p, h.size, RANGE_IPC);
    bytes_in_use -= ok ? h.size : 0; /* the exporter's memory, counted there */
    pthread_mutex_unlock(&mem_lock);
    if (!ok) {
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *dptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
    pthread_mutex_lock(&mem_lock);
    const struct range *r = range_at((uintptr_t)dptr);
    size_t size = r && r->kind == RANGE_IPC && r->base == dptr ? r->size : 0;
    int found = size && untrack((uintptr_t)dptr, RANGE_IPC);
    bytes_in_use += found ? size : 0;
    pthread_mutex_unlock(&mem_lock);
    if (!found) return CUDA_ERROR_INVALID_VALUE;
    free((void *)(uintptr_t)dptr);
    return CUDA_SUCCESS;
}

/* ---- external memory: an opaque file descriptor (a memfd here) imported and mapped, so the
 * program's host view and the "device" buffer are the same bytes, as with Vulkan interop. ---- */
struct external {
    void *base;
    size_t size;
};

CUresult cuImportExternalMemory(CUexternalMemory *out, const CUDA_EXTERNAL_MEMORY_HANDLE_DESC *desc) {
    if (!out || !desc || desc->type != CU_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD || !desc->size)
        return CUDA_ERROR_INVALID_VALUE;
    void *p = mmap(NULL, desc->size, PROT_READ | PROT_WRITE, MAP_SHARED, desc->handle.fd, 0);
    if (p == MAP_FAILED) return CUDA_ERROR_INVALID_VALUE;
    struct external *e = malloc(sizeof *e);
    if (!e) {
        munmap(p, desc->size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    close(desc->handle.fd); /* as NVIDIA's: the driver owns the descriptor once imported */
    *e = (struct external){p, desc->size};
    *out = (CUexternalMemory)e;
    return CUDA_SUCCESS;
}

CUresult cuExternalMemoryGetMappedBuffer(CUdeviceptr *dptr, CUexternalMemory mem, const CUDA_EXTERNAL_MEMORY_BUFFER_DESC *desc) {
    struct external *e = (struct external *)mem;
    if (!dptr || !e || !desc || !desc->size || desc->offset > e->size || desc->size > e->size - desc->offset)
        return CUDA_ERROR_INVALID_VALUE;
    uintptr_t p = (uintptr_t)e->base + desc->offset;
    pthread_mutex_lock(&mem_lock);
    int ok = track(p, desc->size, RANGE_EXTERNAL);
    bytes_in_use -= ok ? desc->size : 0; /* not device memory the stand-in hands out */
    pthread_mutex_unlock(&mem_lock);
    if (!ok) return CUDA_ERROR_OUT_OF_MEMORY;
    *dptr = (CUdeviceptr)p;
    return CUDA_SUCCESS;
}

CUresult cuDestroyExternalMemory(CUexternalMemory mem) {
    struct external *e = (struct external *)mem;
    if (!e) return CUDA_ERROR_INVALID_VALUE;
    munmap(e->base, e->size);
    free(e);
    return CUDA_SUCCESS;
}

/* Synchronous copies wait for the legacy stream's work (and what orders with it) first: host-
 * blocking calls. */
CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t bytes) {
    STICKY();
    CAPTURE_UNSAFE();
    if (!cudashim_driver_is_device_range((const void *)(uintptr_t)dst, bytes)) return CUDA_ERROR_INVALID_VALUE;
    int code = block_on(NULL, 0, "cuMemcpyHtoD_v2");
    if (code) return code;
    memcpy((void *)(uintptr_t)dst, src, bytes);
    return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes) {
    STICKY();
    CAPTURE_UNSAFE();
    if (!cudashim_driver_is_device_range((const void *)(uintptr_t)src, bytes)) return CUDA_ERROR_INVALID_VALUE;
    int code = block_on(NULL, 0, "cuMemcpyDtoH_v2");
    if (code) return code;
    memcpy(dst, (const void *)(uintptr_t)src, bytes);
    return CUDA_SUCCESS;
}

/* A copy the worker makes; `staged`: the source bytes follow (a pageable source, copied at
 * the call as CUDA stages it). */
struct copy_work {
    void *dst;
    const void *src;
    size_t bytes;
    int staged;
};

static int run_copy(void *arg) {
    struct copy_work *c = arg;
    memmove(c->dst, c->staged ? (const void *)(c + 1) : c->src, c->bytes);
    return 0;
}

/* Private, for the runtime too: an asynchronous copy on `stream` as CUDA documents it. Into
 * pageable host memory it returns only once done (a host-blocking call named `who`); from
 * pageable host memory the bytes are staged at the call; otherwise it is queued. */
int cudashim_driver_copy_async(void *dst, const void *src, size_t bytes, int dst_host, int src_host, const void *stream,
                               int per_thread, const char *who) {
    int dst_pageable = dst_host && !cudashim_driver_is_pinned(dst, bytes);
    int src_pageable = src_host && !cudashim_driver_is_pinned(src, bytes);
    if (dst_pageable) {
        int code = block_on(stream, per_thread, who);
        if (code) return code;
        memmove(dst, src, bytes);
        return 0;
    }
    if (src_pageable && !cudashim_engine_is_sync()) {
        struct copy_work *c = malloc(sizeof *c + bytes);
        if (!c) return CUDA_ERROR_OUT_OF_MEMORY;
        *c = (struct copy_work){dst, NULL, bytes, 1};
        memcpy(c + 1, src, bytes);
        int code = cudashim_engine_submit(stream, per_thread, run_copy, NULL, c, sizeof *c + bytes);
        free(c);
        return code;
    }
    struct copy_work c = {dst, src, bytes, 0};
    return cudashim_engine_submit(stream, per_thread, run_copy, NULL, &c, sizeof c);
}

static CUresult htod_async(CUdeviceptr dst, const void *src, size_t bytes, void *stream, int per_thread) {
    STICKY();
    if (!cudashim_driver_is_device_range((const void *)(uintptr_t)dst, bytes)) return CUDA_ERROR_INVALID_VALUE;
    return cudashim_driver_copy_async((void *)(uintptr_t)dst, src, bytes, 0, 1, stream, per_thread, "cuMemcpyHtoDAsync_v2");
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t bytes, CUstream stream) {
    return htod_async(dst, src, bytes, stream, 0);
}

CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void *src, size_t bytes, void *stream) {
    return htod_async(dst, src, bytes, stream, 1);
}

/* ---- virtual memory: reserve addresses, create physical memory, map it, unmap, release ---- */
#define GRANULARITY ((size_t)2 << 20)

struct physical {
    int fd;
    size_t size;
};

CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop, int option) {
    (void)option;
    if (!granularity || !prop) return CUDA_ERROR_INVALID_VALUE;
    *granularity = GRANULARITY;
    return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr, unsigned long long flags) {
    (void)alignment, (void)flags;
    if (!ptr || size == 0 || size % GRANULARITY) return CUDA_ERROR_INVALID_VALUE;
    void *p = mmap((void *)(uintptr_t)addr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
    *ptr = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) {
    return munmap((void *)(uintptr_t)ptr, size) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
                     unsigned long long flags) {
    (void)flags;
    if (!handle || !prop || size == 0 || size % GRANULARITY) return CUDA_ERROR_INVALID_VALUE;
    if (!cudashim_driver_reserve(size)) return CUDA_ERROR_OUT_OF_MEMORY;
    struct physical *m = malloc(sizeof *m);
    int fd = memfd_create("cudashim", 0);
    if (!m || fd < 0 || ftruncate(fd, (off_t)size) != 0) {
        free(m);
        if (fd >= 0) close(fd);
        cudashim_driver_release(size);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *m = (struct physical){fd, size};
    *handle = (CUmemGenericAllocationHandle)(uintptr_t)m;
    return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
    struct physical *m = (struct physical *)(uintptr_t)handle;
    if (!m) return CUDA_ERROR_INVALID_VALUE;
    close(m->fd);
    cudashim_driver_release(m->size);
    free(m);
    return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags) {
    struct physical *m = (struct physical *)(uintptr_t)handle;
    if (!m || flags || size == 0 || offset + size > m->size) return CUDA_ERROR_INVALID_VALUE;
    void *p = mmap((void *)(uintptr_t)ptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, m->fd, (off_t)offset);
    if (p == MAP_FAILED) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mem_lock);
    int ok = track((uintptr_t)ptr, size, 1);
    bytes_in_use -= ok ? size : 0; /* counted when created */
    pthread_mutex_unlock(&mem_lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const void *desc, size_t count) {
    (void)desc;
    if (!count || !cudashim_driver_is_device_range((const void *)(uintptr_t)ptr, size)) return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) {
    pthread_mutex_lock(&mem_lock);
    int found = untrack((uintptr_t)ptr, 1);
    if (found) bytes_in_use += size; /* still counted until released */
    pthread_mutex_unlock(&mem_lock);
    if (!found) return CUDA_ERROR_INVALID_VALUE;
    /* Back to reserved, inaccessible addresses. */
    mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    return CUDA_SUCCESS;
}

/* ---- modules and kernels: the stand-in runs the kernels it has a host build of ----
 * cuModuleLoadData recognises a kernel by its entry in the PTX text; cuLaunchKernel runs the
 * host build of the same source (crates/preload/src/kernels/nonfinite.cu) over the launch grid, in order, so
 * a launch is ordered on its stream like every other stand-in operation.
 *   CUDASHIM_REFUSE_MODULES=1  cuModuleLoadData fails, as a driver too old for the PTX does
 *   CUDASHIM_WRONG_KERNEL=1    the kernel's answer is wrong (NaN and Inf counts swapped): a
 *                              miscompiled kernel, for the guard's self-test to catch
 *   CUDASHIM_FAIL_MEMSET=1     cuMemsetD8Async fails (CUDA_ERROR_INVALID_VALUE): a driver call
 *                              of the scan that fails, for the guard to stop there
 *   CUDASHIM_SM_COUNT=N        the device's multiprocessors (default 4), which size the scan's grid
 *   CUDASHIM_LAUNCH_LOG=FILE   one line per scan launch: "KERNEL gx gy bx"
 * A module image that holds the text "cudashim test kernels" (Triton's path, for the guard's
 * tests: cuModuleLoadData + cuModuleGetFunction, launched with cuLaunchKernel[Ex] or
 * cuLaunchCooperativeKernel, parameters in `params` or in `extra`'s buffer) has these kernels,
 * run by the stand-in GPU like any work; cuFuncGetName and cuFuncGetParamInfo know them:
 *   fill(float *data, float value, int n)              data[i] = value for i < n
 *   fill_struct({float *data; long long n;}, float v)  the same, its pointer inside a struct
 * A kernel whose range is not device memory faults (cudaErrorIllegalAddress) when it runs. */
int cudashim_run_nonfinite(void **params, unsigned int grid, unsigned int block);
int cudashim_run_nonfinite_many(void **params, unsigned int grid_x, unsigned int grid_y, unsigned int block);

/* The layout of cublasguard_nonfinite_many's first parameter (crates/preload/src/kernels/nonfinite.cu). */
struct scan_job {
    unsigned long long data, rows, cols, ld, members;
    long long stride;
    unsigned int kind, array;
};
struct scan_jobs {
    struct scan_job job[6];
    unsigned int count, unused;
};

#define CUDA_ERROR_INVALID_IMAGE 200
#define NONFINITE_ENTRY ".entry cublasguard_nonfinite("

static int context_token, module_token, function_token, many_token;
static int test_module_token, fill_token, fill_struct_token, test_library_token;
/* The CUfunctions cuKernelGetFunction gives for the test kernels: launched as their kernels are,
 * but (unlike a real driver) not named by cuFuncGetName, so the guard's own record of names is
 * what the tests see. */
static int fill_function_token, fill_struct_function_token;

/* A test kernel's own token, for a CUfunction from cuKernelGetFunction. */
static const void *kernel_of(const void *f) {
    return f == &fill_function_token ? (const void *)&fill_token : f == &fill_struct_function_token ? (const void *)&fill_struct_token : f;
}
static unsigned long driver_launches;

unsigned long cudashim_driver_launches(void) { return __atomic_load_n(&driver_launches, __ATOMIC_RELAXED); }

CUresult cuCtxGetCurrent(void **ctx) {
    count_call(__func__);
    if (!ctx) return CUDA_ERROR_INVALID_VALUE;
    *ctx = &context_token; /* the primary context, current once the runtime started */
    return CUDA_SUCCESS;
}

/* CUDA 12's unique context id: never reused, unlike a context's address. */
CUresult cuCtxGetId(void *ctx, unsigned long long *id) {
    count_call(__func__);
    if (!id || (ctx && ctx != &context_token)) return CUDA_ERROR_INVALID_VALUE;
    *id = 1;
    return CUDA_SUCCESS;
}

CUresult cuModuleLoadData(void **module, const void *image) {
    count_call(__func__);
    CAPTURE_UNSAFE();
    if (!module || !image) return CUDA_ERROR_INVALID_VALUE;
    if (env_int("CUDASHIM_REFUSE_MODULES", 0)) return CUDA_ERROR_INVALID_IMAGE;
    if (strstr((const char *)image, "cudashim test kernels")) {
        *module = &test_module_token;
        return CUDA_SUCCESS;
    }
    if (!strstr((const char *)image, NONFINITE_ENTRY)) return CUDA_ERROR_INVALID_IMAGE; /* no host build */
    *module = &module_token;
    return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(void **function, void *module, const char *name) {
    count_call(__func__);
    if (!function || (module != &module_token && module != &test_module_token) || !name) return CUDA_ERROR_INVALID_VALUE;
    if (module == &test_module_token) {
        if (!strcmp(name, "fill")) *function = &fill_token;
        else if (!strcmp(name, "fill_struct")) *function = &fill_struct_token;
        else return CUDA_ERROR_NOT_FOUND;
        return CUDA_SUCCESS;
    }
    if (!strcmp(name, "cublasguard_nonfinite")) *function = &function_token;
    else if (!strcmp(name, "cublasguard_nonfinite_many")) *function = &many_token;
    else return CUDA_ERROR_NOT_FOUND;
    return CUDA_SUCCESS;
}

static size_t kind_size(unsigned int kind) { return kind == 1 ? 8 : kind == 2 || kind == 14 ? 2 : kind == 28 || kind == 29 ? 1 : 4; }

struct many_work {
    struct scan_jobs jobs;
    unsigned long long out;
    unsigned int gx, gy, bx;
};

static int run_many(void *arg) {
    struct many_work *w = arg;
    void *params[2] = {&w->jobs, &w->out};
    cudashim_run_nonfinite_many(params, w->gx, w->gy, w->bx); /* its arguments were checked at launch */
    if (env_int("CUDASHIM_WRONG_KERNEL", 0)) {
        for (unsigned int j = 0; j < w->jobs.count; j++) {
            unsigned long long *result = (unsigned long long *)(uintptr_t)w->out + 3 * j, nan = result[0];
            result[0] = result[1];
            result[1] = nan;
        }
    }
    return 0;
}

struct single_work {
    unsigned long long data, rows, cols, ld;
    unsigned int kind, grid, block;
    unsigned long long out;
};

static int run_single(void *arg) {
    struct single_work *w = arg;
    void *params[6] = {&w->data, &w->rows, &w->cols, &w->ld, &w->kind, &w->out};
    cudashim_run_nonfinite(params, w->grid, w->block);
    if (env_int("CUDASHIM_WRONG_KERNEL", 0)) {
        unsigned long long *result = (unsigned long long *)(uintptr_t)w->out, nan = result[0];
        result[0] = result[1];
        result[1] = nan;
    }
    return 0;
}

/* Every member of every job must be device memory, as the kernel would fault otherwise. */
static CUresult launch_many(unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
                            unsigned int bz, void **params, void **extra, void *stream, int per_thread) {
    if (!params || extra || gz != 1 || by != 1 || bz != 1 || !gx || !gy || !bx || bx > 1024) return CUDA_ERROR_INVALID_VALUE;
    const struct scan_jobs *jobs = (const struct scan_jobs *)params[0];
    unsigned long long out = *(unsigned long long *)params[1];
    if (jobs->count > 6 || gy < jobs->count) return CUDA_ERROR_INVALID_VALUE;
    /* The counts may go to device memory or to mapped pinned host memory (its device address is
     * its host address here), as on a GPU. */
    if (!cudashim_driver_is_device_range((const void *)(uintptr_t)out, 24 * (size_t)jobs->count) &&
        !cudashim_driver_is_pinned((const void *)(uintptr_t)out, 24 * (size_t)jobs->count))
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    for (unsigned int j = 0; j < jobs->count; j++) {
        const struct scan_job *job = &jobs->job[j];
        size_t size = kind_size(job->kind);
        size_t extent = job->rows && job->cols ? ((job->cols - 1) * job->ld + job->rows) * size : 0;
        if (job->array && !cudashim_driver_is_device_range((const void *)(uintptr_t)job->data, job->members * 8))
            return CUDA_ERROR_ILLEGAL_ADDRESS;
        for (unsigned long long m = 0; extent && m < job->members; m++) {
            uintptr_t base = job->array ? (uintptr_t)((const unsigned long long *)(uintptr_t)job->data)[m]
                                        : (uintptr_t)(job->data + (long long)m * job->stride * (long long)size);
            if (!cudashim_driver_is_device_range((const void *)base, extent)) return CUDA_ERROR_ILLEGAL_ADDRESS;
        }
    }
    __atomic_add_fetch(&driver_launches, 1, __ATOMIC_RELAXED);
    /* As CUDA: the parameters are copied at the launch, the kernel runs later. */
    struct many_work w = {*jobs, out, gx, gy, bx};
    return cudashim_engine_submit(stream, per_thread, run_many, NULL, &w, sizeof w);
}

/* CUDA 12's context-independent loading (cuLibraryLoadData): the same test kernels, as CUkernel
 * handles (which cuLaunchKernel takes as they are) or, through cuKernelGetFunction, as the
 * CUfunction of the current context (the same token here). */
CUresult cuLibraryLoadData(void **library, const void *code, void *jit_options, void **jit_values, unsigned int jit_count,
                           void *library_options, void **library_values, unsigned int library_count) {
    count_call(__func__);
    (void)jit_options, (void)jit_values, (void)jit_count, (void)library_options, (void)library_values, (void)library_count;
    if (!library || !code) return CUDA_ERROR_INVALID_VALUE;
    if (!strstr((const char *)code, "cudashim test kernels")) return CUDA_ERROR_INVALID_IMAGE;
    *library = &test_library_token;
    return CUDA_SUCCESS;
}

CUresult cuLibraryGetKernel(void **kernel, void *library, const char *name) {
    count_call(__func__);
    if (!kernel || library != &test_library_token || !name) return CUDA_ERROR_INVALID_VALUE;
    return cuModuleGetFunction(kernel, &test_module_token, name);
}

CUresult cuKernelGetFunction(void **function, void *kernel) {
    count_call(__func__);
    if (!function || (kernel != &fill_token && kernel != &fill_struct_token)) return CUDA_ERROR_INVALID_VALUE;
    *function = kernel == &fill_token ? (void *)&fill_function_token : (void *)&fill_struct_function_token;
    return CUDA_SUCCESS;
}

/* The test kernels' parameters: (offset, size) each, as cuFuncGetParamInfo gives them. */
static const size_t fill_params[][2] = {{0, 8}, {8, 4}, {12, 4}};
static const size_t fill_struct_params[][2] = {{0, 16}, {16, 4}};

static const char *test_kernel_name(const void *f) {
    return f == &fill_token ? "fill" : f == &fill_struct_token ? "fill_struct" : NULL;
}

CUresult cuFuncGetName(const char **name, void *f) {
    count_call(__func__);
    if (!name || !f) return CUDA_ERROR_INVALID_VALUE;
    *name = f == &function_token ? "cublasguard_nonfinite" : f == &many_token ? "cublasguard_nonfinite_many" : test_kernel_name(f);
    return *name ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuFuncGetParamInfo(void *f, size_t index, size_t *offset, size_t *size) {
    count_call(__func__);
    f = (void *)kernel_of(f);
    const size_t(*layout)[2] = f == &fill_token ? fill_params : f == &fill_struct_token ? fill_struct_params : NULL;
    size_t count = f == &fill_token ? 3 : f == &fill_struct_token ? 2 : 0;
    if (!layout || !offset || !size || index >= count) return CUDA_ERROR_INVALID_VALUE;
    *offset = layout[index][0];
    *size = layout[index][1];
    return CUDA_SUCCESS;
}

struct fill_work {
    float *data;
    long long n;
    float value;
};

static int run_fill(void *arg) {
    struct fill_work *w = arg;
    if (w->n > 0 && !cudashim_driver_is_device_range(w->data, (size_t)w->n * sizeof(float)))
        return CUDA_ERROR_ILLEGAL_ADDRESS; /* an out-of-range write faults on the GPU */
    for (long long i = 0; i < w->n; i++) w->data[i] = w->value;
    return 0;
}

#define CU_LAUNCH_PARAM_END ((void *)0x00)
#define CU_LAUNCH_PARAM_BUFFER_POINTER ((void *)0x01)
#define CU_LAUNCH_PARAM_BUFFER_SIZE ((void *)0x02)

/* Parameter `index` of a test kernel, from `params` (a pointer per parameter) or `extra` (one
 * buffer at the offsets cuFuncGetParamInfo gives). */
static const void *test_param(const void *f, size_t index, void **params, void **extra) {
    size_t offset, size;
    if (cuFuncGetParamInfo((void *)f, index, &offset, &size) != CUDA_SUCCESS) return NULL;
    if (params) return params[index];
    const char *buffer = NULL;
    size_t bytes = 0;
    for (size_t i = 0; extra && extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
        if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) buffer = extra[i + 1];
        else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1]) bytes = *(size_t *)extra[i + 1];
    }
    return buffer && offset + size <= bytes ? buffer + offset : NULL;
}

static CUresult launch_test_kernel(const void *f, void *stream, int per_thread, void **params, void **extra) {
    f = kernel_of(f);
    if ((params == NULL) == (extra == NULL)) return CUDA_ERROR_INVALID_VALUE;
    struct fill_work w = {0};
    if (f == &fill_token) {
        const void *data = test_param(f, 0, params, extra), *value = test_param(f, 1, params, extra), *n = test_param(f, 2, params, extra);
        if (!data || !value || !n) return CUDA_ERROR_INVALID_VALUE;
        int count;
        memcpy(&w.data, data, sizeof w.data);
        memcpy(&w.value, value, sizeof w.value);
        memcpy(&count, n, sizeof count);
        w.n = count;
    } else {
        const char *s = test_param(f, 0, params, extra);
        const void *value = test_param(f, 1, params, extra);
        if (!s || !value) return CUDA_ERROR_INVALID_VALUE;
        memcpy(&w.data, s, sizeof w.data);
        memcpy(&w.n, s + 8, sizeof w.n);
        memcpy(&w.value, value, sizeof w.value);
    }
    __atomic_add_fetch(&driver_launches, 1, __ATOMIC_RELAXED);
    return cudashim_engine_submit(stream, per_thread, run_fill, NULL, &w, sizeof w);
}

static CUresult launch(void *f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
                       unsigned int bz, void *stream, int per_thread, void **params, void **extra) {
    STICKY();
    if (test_kernel_name(kernel_of(f))) {
        if (!gx || !gy || !gz || !bx || !by || !bz || bx * by * bz > 1024) return CUDA_ERROR_INVALID_VALUE;
        return launch_test_kernel(f, stream, per_thread, params, extra);
    }
    if (f == &many_token) return launch_many(gx, gy, gz, bx, by, bz, params, extra, stream, per_thread);
    if (f != &function_token || !params || extra || gy != 1 || gz != 1 || by != 1 || bz != 1 || !gx || !bx || bx > 1024)
        return CUDA_ERROR_INVALID_VALUE;
    /* The kernel reads rows x cols elements at ld and writes 24 bytes: both must be device memory. */
    struct single_work w = {*(unsigned long long *)params[0], *(unsigned long long *)params[1],
                            *(unsigned long long *)params[2], *(unsigned long long *)params[3],
                            *(unsigned int *)params[4], gx, bx, *(unsigned long long *)params[5]};
    size_t size = kind_size(w.kind);
    size_t extent = w.rows && w.cols ? ((w.cols - 1) * w.ld + w.rows) * size : 0;
    if ((extent && !cudashim_driver_is_device_range((const void *)(uintptr_t)w.data, extent)) ||
        (!cudashim_driver_is_device_range((const void *)(uintptr_t)w.out, 24) && !cudashim_driver_is_pinned((const void *)(uintptr_t)w.out, 24)))
        return CUDA_ERROR_ILLEGAL_ADDRESS;
    __atomic_add_fetch(&driver_launches, 1, __ATOMIC_RELAXED);
    /* As CUDA: the parameters are copied at the launch, the kernel runs later. */
    return cudashim_engine_submit(stream, per_thread, run_single, NULL, &w, sizeof w);
}

/* CUDASHIM_LAUNCH_LOG=FILE: one line per scan launch, "KERNEL gx gy bx", for tests of the grid. */
static void log_launch(void *f, unsigned int gx, unsigned int gy, unsigned int bx) {
    const char *path = getenv("CUDASHIM_LAUNCH_LOG");
    if (!path || !*path || (f != &function_token && f != &many_token)) return;
    FILE *log = fopen(path, "a");
    if (!log) return;
    fprintf(log, "%s %u %u %u\n", f == &many_token ? "cublasguard_nonfinite_many" : "cublasguard_nonfinite", gx, gy, bx);
    fclose(log);
}

CUresult cuCtxGetDevice(CUdevice *device) {
    count_call(__func__);
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    *device = 0;
    return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(void *f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
                        unsigned int bz, unsigned int shared, void *stream, void **params, void **extra) {
    count_call(__func__);
    log_launch(f, gx, gy, bx);
    (void)shared;
    return launch(f, gx, gy, gz, bx, by, bz, stream, 0, params, extra);
}

CUresult cuLaunchKernel_ptsz(void *f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
                             unsigned int bz, unsigned int shared, void *stream, void **params, void **extra) {
    count_call("cuLaunchKernel");
    log_launch(f, gx, gy, bx);
    (void)shared;
    return launch(f, gx, gy, gz, bx, by, bz, stream, 1, params, extra);
}

CUresult cuLaunchCooperativeKernel(void *f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                   unsigned int by, unsigned int bz, unsigned int shared, void *stream, void **params) {
    count_call(__func__);
    (void)shared;
    return launch(f, gx, gy, gz, bx, by, bz, stream, 0, params, NULL);
}

CUresult cuLaunchCooperativeKernel_ptsz(void *f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                        unsigned int by, unsigned int bz, unsigned int shared, void *stream, void **params) {
    count_call("cuLaunchCooperativeKernel");
    (void)shared;
    return launch(f, gx, gy, gz, bx, by, bz, stream, 1, params, NULL);
}

/* CUlaunchConfig's head (the attributes are not read). */
struct launch_config {
    unsigned int gx, gy, gz, bx, by, bz, shared;
    void *stream;
    void *attrs;
    unsigned int attr_count;
};

CUresult cuLaunchKernelEx(const struct launch_config *config, void *f, void **params, void **extra) {
    count_call(__func__);
    if (!config) return CUDA_ERROR_INVALID_VALUE;
    return launch(f, config->gx, config->gy, config->gz, config->bx, config->by, config->bz, config->stream, 0, params, extra);
}

CUresult cuLaunchKernelEx_ptsz(const struct launch_config *config, void *f, void **params, void **extra) {
    count_call("cuLaunchKernelEx");
    if (!config) return CUDA_ERROR_INVALID_VALUE;
    return launch(f, config->gx, config->gy, config->gz, config->bx, config->by, config->bz, config->stream, 1, params, extra);
}

struct memset_work {
    void *dst;
    size_t count;
    unsigned char value;
};

static int run_memset(void *arg) {
    struct memset_work *m = arg;
    memset(m->dst, m->value, m->count);
    return 0;
}

static CUresult memset_async(CUdeviceptr dst, unsigned char value, size_t count, void *stream, int per_thread) {
    STICKY();
    const char *fail = getenv("CUDASHIM_FAIL_MEMSET");
    if (fail && *fail && *fail != '0') return CUDA_ERROR_INVALID_VALUE;
    if (!cudashim_driver_is_device_range((const void *)(uintptr_t)dst, count)) return CUDA_ERROR_INVALID_VALUE;
    struct memset_work m = {(void *)(uintptr_t)dst, count, value};
    return cudashim_engine_submit(stream, per_thread, run_memset, NULL, &m, sizeof m);
}

CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t count, CUstream stream) {
    count_call(__func__);
    return memset_async(dst, value, count, stream, 0);
}

CUresult cuMemsetD8Async_ptsz(CUdeviceptr dst, unsigned char value, size_t count, void *stream) {
    count_call("cuMemsetD8Async");
    return memset_async(dst, value, count, stream, 1);
}

static CUresult dtoh_async(void *dst, CUdeviceptr src, size_t bytes, void *stream, int per_thread) {
    STICKY();
    if (!cudashim_driver_is_device_range((const void *)(uintptr_t)src, bytes)) return CUDA_ERROR_INVALID_VALUE;
    return cudashim_driver_copy_async(dst, (const void *)(uintptr_t)src, bytes, 1, 0, stream, per_thread, "cuMemcpyDtoHAsync_v2");
}

CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t bytes, CUstream stream) {
    count_call(__func__);
    return dtoh_async(dst, src, bytes, stream, 0);
}

CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dst, CUdeviceptr src, size_t bytes, void *stream) {
    count_call("cuMemcpyDtoHAsync_v2");
    return dtoh_async(dst, src, bytes, stream, 1);
}

/* ---- streams, events, synchronisation ---- */

static char stream_tokens[256]; /* a driver-created stream is one of these addresses */
static int stream_live[256];

CUresult cuStreamCreate(CUstream *stream, unsigned int flags) {
    STICKY();
    if (!stream || flags > CU_STREAM_NON_BLOCKING) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mem_lock);
    for (int i = 0; i < 256; i++) {
        if (!stream_live[i]) {
            stream_live[i] = 1;
            pthread_mutex_unlock(&mem_lock);
            *stream = (CUstream)&stream_tokens[i];
            cudashim_engine_stream_created(*stream, flags);
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&mem_lock);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuStreamDestroy_v2(CUstream stream) {
    char *s = (char *)stream;
    if (s < stream_tokens || s >= stream_tokens + 256 || !stream_live[s - stream_tokens]) return CUDA_ERROR_INVALID_HANDLE;
    stream_live[s - stream_tokens] = 0; /* its queued work still runs, as CUDA's does */
    cudashim_engine_stream_destroyed(stream);
    return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream stream) {
    count_call(__func__);
    STICKY();
    if (cudashim_engine_capture_conflict(stream, 0)) return 900;
    return block_on(stream, 0, "cuStreamSynchronize");
}

CUresult cuStreamSynchronize_ptsz(void *stream) {
    count_call("cuStreamSynchronize");
    STICKY();
    if (cudashim_engine_capture_conflict(stream, 1)) return 900;
    return block_on(stream, 1, "cuStreamSynchronize");
}

CUresult cuStreamQuery(CUstream stream) {
    STICKY();
    if (cudashim_engine_capture_conflict(stream, 0)) return 900;
    return cudashim_engine_query_stream(stream, 0);
}

CUresult cuStreamQuery_ptsz(void *stream) {
    STICKY();
    if (cudashim_engine_capture_conflict(stream, 1)) return 900;
    return cudashim_engine_query_stream(stream, 1);
}

CUresult cuCtxSynchronize(void) {
    STICKY();
    CAPTURE_UNSAFE();
    return block_all("cuCtxSynchronize");
}

CUresult cuEventCreate(CUevent *event, unsigned int flags) {
    STICKY();
    return cudashim_engine_event_create((void **)event, flags) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(CUevent event) { return cudashim_engine_event_destroy(event); }

CUresult cuEventRecord(CUevent event, CUstream stream) {
    STICKY();
    return cudashim_engine_event_record(event, stream, 0);
}

CUresult cuEventRecord_ptsz(void *event, void *stream) {
    STICKY();
    return cudashim_engine_event_record(event, stream, 1);
}

CUresult cuEventQuery(CUevent event) {
    STICKY();
    return cudashim_engine_event_query(event);
}

CUresult cuEventSynchronize(CUevent event) {
    STICKY();
    int code = cudashim_engine_event_synchronize(event, "cuEventSynchronize");
    return cudashim_engine_is_sync() && code != CUDA_ERROR_INVALID_HANDLE ? CUDA_SUCCESS : code;
}

CUresult cuEventElapsedTime(float *ms, CUevent start, CUevent end) {
    STICKY();
    return cudashim_engine_event_elapsed(ms, start, end);
}

CUresult cuStreamWaitEvent(CUstream stream, CUevent event, unsigned int flags) {
    STICKY();
    if (flags > 1) return CUDA_ERROR_INVALID_VALUE;
    return cudashim_engine_stream_wait_event(stream, 0, event);
}

CUresult cuStreamWaitEvent_ptsz(void *stream, void *event, unsigned int flags) {
    STICKY();
    if (flags > 1) return CUDA_ERROR_INVALID_VALUE;
    return cudashim_engine_stream_wait_event(stream, 1, event);
}

/* ---- stream memory operations (the _v2 API, on by default since CUDA 12) ----
 * Targets are device pointers: device memory, or pinned host memory through its device
 * pointer (the same address here). A write lands once the stream's earlier work ran; by default
 * with a fence before it (a release store here: a host thread that reads the word with acquire
 * sees everything the earlier work wrote). CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER is "not
 * supported in the v2 API" (NVIDIA's header): refused. */
#define CU_STREAM_WAIT_VALUE_FLUSH (1 << 30)

static int memop_target(CUdeviceptr addr, size_t bytes) {
    const void *p = (const void *)(uintptr_t)addr;
    return addr % bytes == 0 && (cudashim_driver_is_device_range(p, bytes) || cudashim_driver_is_pinned(p, bytes));
}

struct memop_work {
    CUdeviceptr addr;
    unsigned long long value;
    unsigned int flags;
    int wide; /* 64-bit */
};

static int run_write_value(void *arg) {
    struct memop_work *w = arg;
    if (w->wide) __atomic_store_n((unsigned long long *)(uintptr_t)w->addr, w->value, __ATOMIC_RELEASE);
    else __atomic_store_n((unsigned int *)(uintptr_t)w->addr, (unsigned int)w->value, __ATOMIC_RELEASE);
    return 0;
}

static int value_met(void *arg) {
    struct memop_work *w = arg;
    unsigned long long v = w->wide ? __atomic_load_n((unsigned long long *)(uintptr_t)w->addr, __ATOMIC_ACQUIRE)
                                   : __atomic_load_n((unsigned int *)(uintptr_t)w->addr, __ATOMIC_ACQUIRE);
    unsigned long long want = w->value;
    switch (w->flags & 0x3) {
    case CU_STREAM_WAIT_VALUE_GEQ: return w->wide ? (long long)(v - want) >= 0 : (int)((unsigned int)v - (unsigned int)want) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ: return v == want;
    case CU_STREAM_WAIT_VALUE_AND: return (v & want) != 0;
    default: return w->wide ? ~(v | want) != 0 : (unsigned int)~(v | want) != 0;
    }
}

/* cuGraphLaunch: an executable graph (the runtime's cudaGraphInstantiate's) runs as one piece
 * of work on the stream; CUDASHIM_GRAPH_FAULT=N makes the Nth driver graph launch's work fault
 * (the runtime counts its own cudaGraphLaunch calls). */
static long driver_graph_launches;
static int run_graph(void *arg) { return *(int *)arg; }

static CUresult graph_launch(void *exec, void *stream, int per_thread) {
    STICKY();
    if (!exec) return CUDA_ERROR_INVALID_VALUE;
    long n = __atomic_add_fetch(&driver_graph_launches, 1, __ATOMIC_RELAXED);
    int code = env_int("CUDASHIM_GRAPH_FAULT", 0) == n ? 700 : 0;
    int launched = cudashim_engine_graph_launch(exec, stream, per_thread);
    if (launched) return launched == 400 ? CUDA_ERROR_INVALID_HANDLE : launched;
    return cudashim_engine_submit(stream, per_thread, run_graph, NULL, &code, sizeof code);
}

CUresult cuGraphLaunch(CUgraphExec exec, CUstream stream) { return graph_launch(exec, stream, 0); }
CUresult cuGraphLaunch_ptsz(void *exec, void *stream) { return graph_launch(exec, stream, 1); }

static CUresult write_value(void *stream, int per_thread, CUdeviceptr addr, unsigned long long value, unsigned int flags, int wide) {
    STICKY();
    if (flags & CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER || flags) return CUDA_ERROR_INVALID_VALUE;
    if (!memop_target(addr, wide ? 8 : 4)) return CUDA_ERROR_INVALID_VALUE;
    struct memop_work w = {addr, value, flags, wide};
    return cudashim_engine_submit(stream, per_thread, run_write_value, NULL, &w, sizeof w);
}

static CUresult wait_value(void *stream, int per_thread, CUdeviceptr addr, unsigned long long value, unsigned int flags, int wide) {
    STICKY();
    if (flags & ~(0x3u | CU_STREAM_WAIT_VALUE_FLUSH)) return CUDA_ERROR_INVALID_VALUE;
    if (!memop_target(addr, wide ? 8 : 4)) return CUDA_ERROR_INVALID_VALUE;
    struct memop_work w = {addr, value, flags, wide};
    return cudashim_engine_submit(stream, per_thread, NULL, value_met, &w, sizeof w);
}

CUresult cuStreamWriteValue32_v2(CUstream stream, CUdeviceptr addr, unsigned int value, unsigned int flags) {
    count_call(__func__);
    return write_value(stream, 0, addr, value, flags, 0);
}

CUresult cuStreamWriteValue64_v2(CUstream stream, CUdeviceptr addr, unsigned long long value, unsigned int flags) {
    count_call(__func__);
    return write_value(stream, 0, addr, value, flags, 1);
}

CUresult cuStreamWriteValue32_v2_ptsz(void *stream, CUdeviceptr addr, unsigned int value, unsigned int flags) {
    count_call("cuStreamWriteValue32_v2");
    return write_value(stream, 1, addr, value, flags, 0);
}

CUresult cuStreamWriteValue64_v2_ptsz(void *stream, CUdeviceptr addr, unsigned long long value, unsigned int flags) {
    count_call("cuStreamWriteValue64_v2");
    return write_value(stream, 1, addr, value, flags, 1);
}

CUresult cuStreamWaitValue32_v2(CUstream stream, CUdeviceptr addr, unsigned int value, unsigned int flags) {
    return wait_value(stream, 0, addr, value, flags, 0);
}

CUresult cuStreamWaitValue64_v2(CUstream stream, CUdeviceptr addr, unsigned long long value, unsigned int flags) {
    return wait_value(stream, 0, addr, value, flags, 1);
}

CUresult cuStreamWaitValue32_v2_ptsz(void *stream, CUdeviceptr addr, unsigned int value, unsigned int flags) {
    return wait_value(stream, 1, addr, value, flags, 0);
}

CUresult cuStreamWaitValue64_v2_ptsz(void *stream, CUdeviceptr addr, unsigned long long value, unsigned int flags) {
    return wait_value(stream, 1, addr, value, flags, 1);
}

/* ---- what a client of the driver API asks besides (NVIDIA's Python bindings, cuda-bindings,
 * as nvmath-python uses them): error strings, the primary context, contexts current on a thread,
 * a stream's context and capture state, device UUIDs, memory pools, and copies by unified
 * address. The stand-in has one context, shared by every device it reports, and no stream
 * capture in the driver. ---- */

#define CUDA_ERROR_INVALID_DEVICE 101
#define CUDA_ERROR_INVALID_CONTEXT 201

static const struct { int code; const char *name, *text; } error_names[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
    {200, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
    {201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
    {400, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
    {500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
    {600, "CUDA_ERROR_NOT_READY", "device not ready"},
    {700, "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
    {712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", "part or all of the requested memory range is already mapped"},
    {713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", "pointer does not correspond to a registered memory region"},
    {719, "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
    {801, "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
};

/* As NVIDIA's: an unknown code is INVALID_VALUE, with the string set to NULL. */
static CUresult error_string(CUresult error, const char **out, int name) {
    if (!out) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof error_names / sizeof *error_names; i++) {
        if (error_names[i].code == (int)error) {
            *out = name ? error_names[i].name : error_names[i].text;
            return CUDA_SUCCESS;
        }
    }
    *out = NULL;
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorName(CUresult error, const char **pStr) { return error_string(error, pStr, 1); }

CUresult cuGetErrorString(CUresult error, const char **pStr) { return error_string(error, pStr, 0); }

static int valid_device(CUdevice dev) { return dev >= 0 && dev < env_int("CUDASHIM_DEVICE_COUNT", 1); }

/* A stable UUID per device ordinal, so two runs name the same device the same. */
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) {
    if (!uuid) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    static const char stem[16] = "cudashim-device";
    memcpy(uuid->bytes, stem, sizeof uuid->bytes);
    uuid->bytes[15] = (char)dev;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev) { return cuDeviceGetUuid(uuid, dev); }

/* The primary context's retain count: its state says active while anything holds it. */
static int primary_retains;

CUresult cuDevicePrimaryCtxRetain(void **pctx, CUdevice dev) {
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    __atomic_add_fetch(&primary_retains, 1, __ATOMIC_RELAXED);
    *pctx = &context_token;
    return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    int left = __atomic_load_n(&primary_retains, __ATOMIC_RELAXED);
    while (left > 0 && !__atomic_compare_exchange_n(&primary_retains, &left, left - 1, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return left > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT; /* released more often than retained */
}

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active) {
    if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    *flags = 0;
    *active = __atomic_load_n(&primary_retains, __ATOMIC_RELAXED) > 0;
    return CUDA_SUCCESS;
}

/* The thread's context stack: how deep it is (every entry is the one context). cuCtxGetCurrent
 * names the one context whatever the depth (the runtime's, current once it started). */
static __thread int pushed_contexts;

/* As NVIDIA's: a context replaces the top of the thread's stack (pushes onto an empty one), NULL
 * unbinds the top; the one context the stand-in has, or NULL: anything else is not a context. */
CUresult cuCtxSetCurrent(void *ctx) {
    if (ctx && ctx != &context_token) return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx && pushed_contexts == 0) pushed_contexts = 1;
    else if (!ctx && pushed_contexts > 0) pushed_contexts--;
    return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent_v2(void *ctx) {
    if (ctx != &context_token) return CUDA_ERROR_INVALID_CONTEXT;
    pushed_contexts++;
    return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent_v2(void **pctx) {
    if (pushed_contexts == 0) return CUDA_ERROR_INVALID_CONTEXT;
    pushed_contexts--;
    if (pctx) *pctx = &context_token;
    return CUDA_SUCCESS;
}

/* The legacy and per-thread default streams, or one cuStreamCreate made. (A runtime stream is
 * a driver stream on NVIDIA's stack; the stand-in runtime's are its own, and not asked here.) */
static int driver_stream(CUstream stream) {
    char *s = (char *)stream;
    if (!s || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD) return 1;
    return s >= stream_tokens && s < stream_tokens + 256 && stream_live[s - stream_tokens];
}

CUresult cuStreamGetCtx(CUstream stream, void **pctx) {
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    if (!driver_stream(stream)) return CUDA_ERROR_INVALID_HANDLE;
    *pctx = &context_token;
    return CUDA_SUCCESS;
}

/* CUDA 12.5's: a stream of a green context names that too; the stand-in has none. */
CUresult cuStreamGetCtx_v2(CUstream stream, void **pctx, void **pGreenCtx) {
    if (!pctx || !pGreenCtx) return CUDA_ERROR_INVALID_VALUE;
    CUresult code = cuStreamGetCtx(stream, pctx);
    if (code == CUDA_SUCCESS) *pGreenCtx = NULL;
    return code;
}

/* The stream's capture status (the runtime's captures and the driver's are one: engine.c). */
CUresult cuStreamIsCapturing(CUstream stream, int *status) {
    if (!status) return CUDA_ERROR_INVALID_VALUE;
    if (!driver_stream(stream)) return CUDA_ERROR_INVALID_HANDLE;
    *status = cudashim_engine_capture_status(stream, 0);
    return CUDA_SUCCESS;
}

CUresult cuStreamIsCapturing_ptsz(CUstream stream, int *status) { return cuStreamIsCapturing(stream, status); }

/* Captures through the driver: the runtime's (engine.c), on the runtime's streams too (the
 * engine knows them; 900: the legacy and per-thread default streams cannot capture). */
CUresult cuStreamBeginCapture_v2(CUstream stream, CUstreamCaptureMode mode) {
    STICKY();
    if (!stream || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD) return 900; /* CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED */
    return cudashim_engine_capture_begin(stream, 0, (int)mode);
}

CUresult cuStreamBeginCapture_v2_ptsz(CUstream stream, CUstreamCaptureMode mode) { return cuStreamBeginCapture_v2(stream, mode); }

CUresult cuStreamEndCapture(CUstream stream, CUgraph *graph) {
    STICKY();
    if (!graph || !stream) return CUDA_ERROR_INVALID_VALUE;
    void *g = NULL;
    int code = cudashim_engine_capture_end(stream, 0, &g);
    if (!code) *graph = (CUgraph)g;
    return code;
}

CUresult cuStreamEndCapture_ptsz(CUstream stream, CUgraph *graph) { return cuStreamEndCapture(stream, graph); }

/* An executable graph is its graph's object, as the runtime's is (cudart.c); flags as there. */
CUresult cuGraphInstantiateWithFlags(CUgraphExec *exec, CUgraph graph, unsigned long long flags) {
    STICKY();
    if (!exec || !graph || flags & ~0xfull) return CUDA_ERROR_INVALID_VALUE;
    *exec = (CUgraphExec)graph;
    return CUDA_SUCCESS;
}

CUresult cuGraphExecUpdate_v2(CUgraphExec exec, CUgraph graph, void *resultInfo) {
    STICKY();
    (void)resultInfo;
    if (!exec || !graph) return CUDA_ERROR_INVALID_VALUE;
    return cudashim_engine_graph_update(exec, graph) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

/* The stand-in's graphs have no nodes to name: any node is taken as one of the executable's
 * kernels, and the change accepted (its recorded work runs as captured). */
CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec exec, CUgraphNode node, const void *params) {
    STICKY();
    return exec && node && params ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* CUDA 12.2's form for any kind of node: the same. */
CUresult cuGraphExecNodeSetParams(CUgraphExec exec, CUgraphNode node, void *params) {
    STICKY();
    return exec && node && params ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* The graph stays: the stand-in's executable is its graph's object. */
CUresult cuGraphExecDestroy(CUgraphExec exec) { return exec ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE; }

/* The calling thread's capture mode (CUstreamCaptureMode: Global 0, ThreadLocal 1, Relaxed 2),
 * exchanged; the runtime's cudaThreadExchangeStreamCaptureMode changes the same one. */
CUresult cuThreadExchangeStreamCaptureMode(int *mode) {
    return cudashim_engine_capture_exchange_mode(mode) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

/* ---- memory pools: a pool hands out ordinary device memory (cuMemAllocFromPoolAsync) and
 * keeps its attributes; it holds nothing back, so trimming has nothing to do. Each device's
 * default pool is a pool too, and the device's current pool until cuDeviceSetMemPool. ---- */

#define POOL_ATTRIBUTES 8 /* CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES (1) .. USED_MEM_HIGH (8) */
#define POOLS 64

struct pool {
    int live;
    int device;
    unsigned long long attr[POOL_ATTRIBUTES + 1];
};

static struct pool pools[POOLS]; /* [0]: the default pool (of every device: one context) */
static struct pool *current_pool = &pools[0];

static struct pool *pool_of(void *handle) {
    struct pool *p = handle;
    return p == &pools[0] || (p > &pools[0] && p < pools + POOLS && p->live) ? p : NULL;
}

CUresult cuDeviceGetDefaultMemPool(void **pool, CUdevice dev) {
    if (!pool) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    *pool = &pools[0];
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetMemPool(void **pool, CUdevice dev) {
    if (!pool) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&mem_lock);
    *pool = current_pool;
    pthread_mutex_unlock(&mem_lock);
    return CUDA_SUCCESS;
}

CUresult cuDeviceSetMemPool(CUdevice dev, void *pool) {
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&mem_lock);
    struct pool *p = pool_of(pool);
    if (p) current_pool = p;
    pthread_mutex_unlock(&mem_lock);
    return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* CUmemPoolProps starts with its allocation type (1: pinned device memory) and its location
 * (type 1: a device, and the ordinal): what a pool on the stand-in can be. */
struct pool_props_head {
    int alloc_type;
    int handle_types;
    int location_type;
    int location_id;
};

CUresult cuMemPoolCreate(void **pool, const struct pool_props_head *props) {
    if (!pool || !props || props->alloc_type != 1 || props->location_type != 1) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(props->location_id)) return CUDA_ERROR_INVALID_DEVICE;
    pthread_mutex_lock(&mem_lock);
    for (int i = 1; i < POOLS; i++) {
        if (!pools[i].live) {
            pools[i] = (struct pool){.live = 1, .device = props->location_id};
            *pool = &pools[i];
            pthread_mutex_unlock(&mem_lock);
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&mem_lock);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuMemPoolDestroy(void *pool) {
    pthread_mutex_lock(&mem_lock);
    struct pool *p = pool_of(pool);
    int ok = p && p != &pools[0]; /* a default pool is never destroyed */
    if (ok) {
        p->live = 0;
        if (current_pool == p) current_pool = &pools[0];
    }
    pthread_mutex_unlock(&mem_lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Attributes 1-3 are ints, 4-8 (the release threshold, then counters) 64-bit; the counters read
 * 0 (the pool keeps nothing of its own), and as NVIDIA's only the high-water marks (6, 8) may be
 * set, and only back to 0. */
static CUresult pool_attribute(void *pool, int attr, void *value, int set) {
    if (!value || attr < 1 || attr > POOL_ATTRIBUTES) return CUDA_ERROR_INVALID_VALUE;
    if (set && attr > 4 && (attr % 2 || *(unsigned long long *)value)) return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&mem_lock);
    struct pool *p = pool_of(pool);
    if (p) {
        int wide = attr >= 4;
        if (set) p->attr[attr] = wide ? *(unsigned long long *)value : (unsigned long long)*(int *)value;
        else if (wide) *(unsigned long long *)value = p->attr[attr];
        else *(int *)value = (int)p->attr[attr];
    }
    pthread_mutex_unlock(&mem_lock);
    return p ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemPoolSetAttribute(void *pool, int attr, void *value) { return pool_attribute(pool, attr, value, 1); }

CUresult cuMemPoolGetAttribute(void *pool, int attr, void *value) { return pool_attribute(pool, attr, value, 0); }

CUresult cuMemPoolTrimTo(void *pool, size_t minBytesToKeep) {
    (void)minBytesToKeep;
    pthread_mutex_lock(&mem_lock);
    int ok = pool_of(pool) != NULL;
    pthread_mutex_unlock(&mem_lock);
    return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- copies by unified address: each side is device memory where it starts in an
 * allocation (and must then end inside it), host memory elsewhere. ---- */

/* 1: device memory; 0: host memory; -1: starts in device memory and runs past its end. */
static int side_of(const void *ptr, size_t bytes) {
    pthread_mutex_lock(&mem_lock);
    int device = range_at((uintptr_t)ptr) != NULL;
    pthread_mutex_unlock(&mem_lock);
    if (!device) return 0;
    return cudashim_driver_is_device_range(ptr, bytes) ? 1 : -1;
}

static CUresult memcpy_async(CUdeviceptr dst, CUdeviceptr src, size_t bytes, void *stream, int per_thread, const char *who) {
    STICKY();
    void *d = (void *)(uintptr_t)dst;
    const void *s = (const void *)(uintptr_t)src;
    int dst_side = side_of(d, bytes), src_side = side_of(s, bytes);
    if (dst_side < 0 || src_side < 0 || !d || !s) return CUDA_ERROR_INVALID_VALUE;
    if (!bytes) return CUDA_SUCCESS;
    return cudashim_driver_copy_async(d, s, bytes, !dst_side, !src_side, stream, per_thread, who);
}

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream) {
    return memcpy_async(dst, src, bytes, stream, 0, "cuMemcpyAsync");
}

CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t bytes, void *stream) {
    return memcpy_async(dst, src, bytes, stream, 1, "cuMemcpyAsync");
}

/* Synchronous: as cuMemcpyHtoD, it waits for the legacy stream's work first and returns done. */
CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
    STICKY();
    CAPTURE_UNSAFE();
    void *d = (void *)(uintptr_t)dst;
    const void *s = (const void *)(uintptr_t)src;
    if (side_of(d, bytes) < 0 || side_of(s, bytes) < 0 || !d || !s) return CUDA_ERROR_INVALID_VALUE;
    int code = block_on(NULL, 0, "cuMemcpy");
    if (code) return code;
    memmove(d, s, bytes);
    return CUDA_SUCCESS;
}

/* ---- what CuPy 12 links and the stand-in driver does not model (stubs.h): modules from files,
 * the linker, globals, occupancy, function attributes, explicit contexts; each fails cleanly
 * with CUDA_ERROR_NOT_SUPPORTED ---- */
#include "stubs.h"
STUB(cuCtxCreate_v2, 801 /* CUDA_ERROR_NOT_SUPPORTED */)
STUB(cuCtxDestroy_v2, 801 /* CUDA_ERROR_NOT_SUPPORTED */)
STUB(cuFuncGetAttribute, 801 /* CUDA_ERROR_NOT_SUPPORTED */)
STUB(cuFuncSetAttribute, 801 /* CUDA_ERROR_NOT_SUPPORTED */)
STUB(cuLinkAddData_v2, 801 /* CUDA_ERROR_NOT_SUPPORTED */)
STUB(cuLinkAddFile_v2, 801 /* CUDA_ERROR_NOT_SUPPORTED */)
STUB(cuLinkComplete, 801 /* CUDA_ERROR_NOT_SUPPORTED */)
STUB(cuLinkCreate_v2, 801 /* CUDA_ERROR_NOT_SUPPORTED */)
STUB(cuLinkDestroy, 801 /* CUDA_ERROR_NOT_SUPPORTED */)
STUB(cuModuleGetGlobal_v2, 801 /* CUDA_ERROR_NOT_SUPPORTED */)
STUB(cuModuleLoad, 801 /* CUDA_ERROR_NOT_SUPPORTED */)
STUB(cuModuleUnload, 801 /* CUDA_ERROR_NOT_SUPPORTED */)
STUB(cuOccupancyMaxActiveBlocksPerMultiprocessor, 801 /* CUDA_ERROR_NOT_SUPPORTED */)
STUB(cuOccupancyMaxPotentialBlockSize, 801 /* CUDA_ERROR_NOT_SUPPORTED */)

/* ---- entry points: how the runtime, and programs with a static runtime, find the above ---- */

/* `ptsz`: the per-thread default stream's variant, for CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM.
 * Where a function's versions differ only in what they accept, not in their arguments
 * (cuIpcOpenMemHandle, cuDevicePrimaryCtxRelease, the stream memory operations), the first
 * version's CUDA release already gets the one function the stand-in has. */
static const struct { const char *name; void *fn; int since; void *ptsz; } procs[] = {
    {"cuInit", (void *)cuInit, 2000, NULL},
    {"cuDriverGetVersion", (void *)cuDriverGetVersion, 2020, NULL},
    {"cuDeviceGetCount", (void *)cuDeviceGetCount, 2000, NULL},
    {"cuDeviceGet", (void *)cuDeviceGet, 2000, NULL},
    {"cuDeviceGetAttribute", (void *)cuDeviceGetAttribute, 2000, NULL},
    {"cuMemAlloc", (void *)cuMemAlloc_v2, 3020, NULL},
    {"cuMemFree", (void *)cuMemFree_v2, 3020, NULL},
    {"cuMemGetInfo", (void *)cuMemGetInfo_v2, 3020, NULL},
    {"cuMemcpyHtoD", (void *)cuMemcpyHtoD_v2, 3020, NULL},
    {"cuMemcpyDtoH", (void *)cuMemcpyDtoH_v2, 3020, NULL},
    {"cuMemGetAllocationGranularity", (void *)cuMemGetAllocationGranularity, 10020, NULL},
    {"cuMemAddressReserve", (void *)cuMemAddressReserve, 10020, NULL},
    {"cuMemAddressFree", (void *)cuMemAddressFree, 10020, NULL},
    {"cuMemCreate", (void *)cuMemCreate, 10020, NULL},
    {"cuMemRelease", (void *)cuMemRelease, 10020, NULL},
    {"cuMemMap", (void *)cuMemMap, 10020, NULL},
    {"cuMemSetAccess", (void *)cuMemSetAccess, 10020, NULL},
    {"cuMemUnmap", (void *)cuMemUnmap, 10020, NULL},
    {"cuMemGetAddressRange", (void *)cuMemGetAddressRange_v2, 3020, NULL},
    {"cuMemAllocManaged", (void *)cuMemAllocManaged, 6000, NULL},
    {"cuMemAllocPitch", (void *)cuMemAllocPitch_v2, 3020, NULL},
    {"cuMemAllocFromPoolAsync", (void *)cuMemAllocFromPoolAsync, 11020, (void *)cuMemAllocFromPoolAsync_ptsz},
    {"cuMemFreeAsync", (void *)cuMemFreeAsync, 11020, (void *)cuMemFreeAsync_ptsz},
    {"cuMemAllocHost", (void *)cuMemAllocHost_v2, 3020, NULL},
    {"cuMemFreeHost", (void *)cuMemFreeHost, 2000, NULL},
    {"cuIpcGetMemHandle", (void *)cuIpcGetMemHandle, 4010, NULL},
    {"cuIpcOpenMemHandle", (void *)cuIpcOpenMemHandle_v2, 4010, NULL}, /* v1 and v2: the same ABI */
    {"cuIpcCloseMemHandle", (void *)cuIpcCloseMemHandle, 4010, NULL},
    {"cuImportExternalMemory", (void *)cuImportExternalMemory, 10000, NULL},
    {"cuExternalMemoryGetMappedBuffer", (void *)cuExternalMemoryGetMappedBuffer, 10000, NULL},
    {"cuDestroyExternalMemory", (void *)cuDestroyExternalMemory, 10000, NULL},
    {"cuCtxSynchronize", (void *)cuCtxSynchronize, 2000, NULL},
    {"cuMemcpyHtoDAsync", (void *)cuMemcpyHtoDAsync_v2, 3020, (void *)cuMemcpyHtoDAsync_v2_ptsz},
    {"cuStreamCreate", (void *)cuStreamCreate, 2000, NULL},
    {"cuStreamDestroy", (void *)cuStreamDestroy_v2, 4000, NULL},
    {"cuStreamSynchronize", (void *)cuStreamSynchronize, 2000, (void *)cuStreamSynchronize_ptsz},
    {"cuStreamQuery", (void *)cuStreamQuery, 2000, (void *)cuStreamQuery_ptsz},
    {"cuStreamWaitEvent", (void *)cuStreamWaitEvent, 3020, (void *)cuStreamWaitEvent_ptsz},
    {"cuEventCreate", (void *)cuEventCreate, 2000, NULL},
    {"cuEventDestroy", (void *)cuEventDestroy_v2, 4000, NULL},
    {"cuEventRecord", (void *)cuEventRecord, 2000, (void *)cuEventRecord_ptsz},
    {"cuEventQuery", (void *)cuEventQuery, 2000, NULL},
    {"cuEventSynchronize", (void *)cuEventSynchronize, 2000, NULL},
    {"cuEventElapsedTime", (void *)cuEventElapsedTime, 2000, NULL},
    {"cuStreamWriteValue32", (void *)cuStreamWriteValue32_v2, 8000, (void *)cuStreamWriteValue32_v2_ptsz},
    {"cuStreamWriteValue64", (void *)cuStreamWriteValue64_v2, 9000, (void *)cuStreamWriteValue64_v2_ptsz},
    {"cuStreamWaitValue32", (void *)cuStreamWaitValue32_v2, 8000, (void *)cuStreamWaitValue32_v2_ptsz},
    {"cuStreamWaitValue64", (void *)cuStreamWaitValue64_v2, 9000, (void *)cuStreamWaitValue64_v2_ptsz},
    {"cuMemHostAlloc", (void *)cuMemHostAlloc, 2020, NULL},
    {"cuMemHostGetDevicePointer", (void *)cuMemHostGetDevicePointer_v2, 3020, NULL},
    {"cuMemHostRegister", (void *)cuMemHostRegister_v2, 6050, NULL},
    {"cuMemHostUnregister", (void *)cuMemHostUnregister, 4000, NULL},
    {"cuModuleLoadData", (void *)cuModuleLoadData, 2000, NULL},
    {"cuModuleGetFunction", (void *)cuModuleGetFunction, 2000, NULL},
    {"cuFuncGetName", (void *)cuFuncGetName, 12030, NULL},
    {"cuFuncGetParamInfo", (void *)cuFuncGetParamInfo, 12040, NULL},
    {"cuLaunchKernel", (void *)cuLaunchKernel, 4000, (void *)cuLaunchKernel_ptsz},
    {"cuLaunchCooperativeKernel", (void *)cuLaunchCooperativeKernel, 9000, (void *)cuLaunchCooperativeKernel_ptsz},
    {"cuLaunchKernelEx", (void *)cuLaunchKernelEx, 11060, (void *)cuLaunchKernelEx_ptsz},
    {"cuDeviceGetName", (void *)cuDeviceGetName, 2000, NULL},
    {"cuDeviceGetUuid", (void *)cuDeviceGetUuid_v2, 11040, NULL},
    {"cuDeviceGetUuid", (void *)cuDeviceGetUuid, 9020, NULL},
    {"cuGetErrorName", (void *)cuGetErrorName, 6000, NULL},
    {"cuGetErrorString", (void *)cuGetErrorString, 6000, NULL},
    {"cuGetProcAddress", (void *)cuGetProcAddress_v2, 12000, NULL},
    {"cuGetProcAddress", (void *)cuGetProcAddress, 11030, NULL},
    {"cuDevicePrimaryCtxRetain", (void *)cuDevicePrimaryCtxRetain, 7000, NULL},
    {"cuDevicePrimaryCtxRelease", (void *)cuDevicePrimaryCtxRelease_v2, 7000, NULL}, /* v1 and v2: the same ABI */
    {"cuDevicePrimaryCtxGetState", (void *)cuDevicePrimaryCtxGetState, 7000, NULL},
    {"cuCtxGetCurrent", (void *)cuCtxGetCurrent, 4000, NULL},
    {"cuCtxSetCurrent", (void *)cuCtxSetCurrent, 4000, NULL},
    {"cuCtxPushCurrent", (void *)cuCtxPushCurrent_v2, 4000, NULL},
    {"cuCtxPopCurrent", (void *)cuCtxPopCurrent_v2, 4000, NULL},
    {"cuCtxGetDevice", (void *)cuCtxGetDevice, 2000, NULL},
    {"cuCtxGetId", (void *)cuCtxGetId, 12000, NULL},
    {"cuStreamGetCtx", (void *)cuStreamGetCtx_v2, 12050, NULL},
    {"cuStreamGetCtx", (void *)cuStreamGetCtx, 9020, NULL},
    {"cuStreamIsCapturing", (void *)cuStreamIsCapturing, 10000, (void *)cuStreamIsCapturing_ptsz},
    {"cuThreadExchangeStreamCaptureMode", (void *)cuThreadExchangeStreamCaptureMode, 10010, NULL},
    {"cuDeviceGetDefaultMemPool", (void *)cuDeviceGetDefaultMemPool, 11020, NULL},
    {"cuDeviceGetMemPool", (void *)cuDeviceGetMemPool, 11020, NULL},
    {"cuDeviceSetMemPool", (void *)cuDeviceSetMemPool, 11020, NULL},
    {"cuMemPoolCreate", (void *)cuMemPoolCreate, 11020, NULL},
    {"cuMemPoolDestroy", (void *)cuMemPoolDestroy, 11020, NULL},
    {"cuMemPoolSetAttribute", (void *)cuMemPoolSetAttribute, 11020, NULL},
    {"cuMemPoolGetAttribute", (void *)cuMemPoolGetAttribute, 11020, NULL},
    {"cuMemPoolTrimTo", (void *)cuMemPoolTrimTo, 11020, NULL},
    {"cuMemcpy", (void *)cuMemcpy, 4000, NULL},
    {"cuMemcpyAsync", (void *)cuMemcpyAsync, 4000, (void *)cuMemcpyAsync_ptsz},
    {"cuMemcpyDtoHAsync", (void *)cuMemcpyDtoHAsync_v2, 3020, (void *)cuMemcpyDtoHAsync_v2_ptsz},
    {"cuMemsetD8Async", (void *)cuMemsetD8Async, 3020, (void *)cuMemsetD8Async_ptsz},
    {"cuGraphLaunch", (void *)cuGraphLaunch, 10000, (void *)cuGraphLaunch_ptsz},
    {"cuStreamBeginCapture", (void *)cuStreamBeginCapture_v2, 10010, (void *)cuStreamBeginCapture_v2_ptsz},
    {"cuStreamEndCapture", (void *)cuStreamEndCapture, 10000, (void *)cuStreamEndCapture_ptsz},
    {"cuGraphInstantiateWithFlags", (void *)cuGraphInstantiateWithFlags, 11040, NULL},
    {"cuGraphExecUpdate", (void *)cuGraphExecUpdate_v2, 12000, NULL},
    {"cuGraphExecKernelNodeSetParams", (void *)cuGraphExecKernelNodeSetParams_v2, 12000, NULL},
    {"cuGraphExecDestroy", (void *)cuGraphExecDestroy, 10000, NULL},
    {"cuGraphExecNodeSetParams", (void *)cuGraphExecNodeSetParams, 12020, NULL},
    {"cuLibraryLoadData", (void *)cuLibraryLoadData, 12000, NULL},
    {"cuLibraryGetKernel", (void *)cuLibraryGetKernel, 12000, NULL},
    {"cuKernelGetFunction", (void *)cuKernelGetFunction, 12000, NULL},
    {"cuMemAllocAsync", (void *)cuMemAllocAsync, 11020, (void *)cuMemAllocAsync_ptsz},
    {"cuCtxCreate", (void *)cuCtxCreate_v2, 3020, NULL},
    {"cuCtxDestroy", (void *)cuCtxDestroy_v2, 4000, NULL},
    {"cuFuncGetAttribute", (void *)cuFuncGetAttribute, 2020, NULL},
    {"cuFuncSetAttribute", (void *)cuFuncSetAttribute, 9000, NULL},
    {"cuLinkCreate", (void *)cuLinkCreate_v2, 6050, NULL},
    {"cuLinkAddData", (void *)cuLinkAddData_v2, 6050, NULL},
    {"cuLinkAddFile", (void *)cuLinkAddFile_v2, 6050, NULL},
    {"cuLinkComplete", (void *)cuLinkComplete, 5050, NULL},
    {"cuLinkDestroy", (void *)cuLinkDestroy, 5050, NULL},
    {"cuModuleGetGlobal", (void *)cuModuleGetGlobal_v2, 3020, NULL},
    {"cuModuleLoad", (void *)cuModuleLoad, 2000, NULL},
    {"cuModuleUnload", (void *)cuModuleUnload, 2000, NULL},
    {"cuOccupancyMaxActiveBlocksPerMultiprocessor", (void *)cuOccupancyMaxActiveBlocksPerMultiprocessor, 6050, NULL},
    {"cuOccupancyMaxPotentialBlockSize", (void *)cuOccupancyMaxPotentialBlockSize, 6050, NULL},
};

/* As NVIDIA's: the newest variant of `symbol` that `cudaVersion` knows (a name with several
 * ABIs has a row for each, newest first: cuStreamGetCtx is cuStreamGetCtx_v2 from 12.5); a
 * version older than every row asks for an ABI the stand-in does not have, and gets "version
 * not sufficient". Every cu* function the stand-in exports has its row: the suite asks for
 * each one (tests/suite/standin.rs). */
CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus) {
    if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    int known = 0;
    for (size_t i = 0; i < sizeof procs / sizeof *procs; i++) {
        if (strcmp(procs[i].name, symbol)) continue;
        known = 1;
        if (cudaVersion < procs[i].since) continue;
        *pfn = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && procs[i].ptsz ? procs[i].ptsz : procs[i].fn;
        if (symbolStatus) *symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
        return CUDA_SUCCESS;
    }
    if (symbolStatus) *symbolStatus = known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return CUDA_ERROR_NOT_FOUND;
}

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags) {
    return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, NULL);
}

