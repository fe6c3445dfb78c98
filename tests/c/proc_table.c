/* For each exported driver function named on the command line: cuGetProcAddress_v2 hands out
 * that very function for its name (without its `_vN`/`_ptsz` suffix) at some CUDA version, with
 * the per-thread-default-stream flag for a `_ptsz` variant. Prints "missing NAME" for each
 * one it never hands out, then "checked N". Also the driver calls nvmath-python (cuda-bindings)
 * makes beyond the table, with the answers NVIDIA's driver gives. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"

typedef CUresult (*get_proc_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

/* `name` without a trailing `suffix`, into `out`; 1 if it had one. */
static int strip(char *out, const char *suffix) {
    size_t n = strlen(out), s = strlen(suffix);
    if (n <= s || strcmp(out + n - s, suffix)) return 0;
    out[n - s] = 0;
    return 1;
}

/* A trailing `_vN`, removed. */
static void strip_version(char *out) {
    char *v = strrchr(out, '_');
    if (!v || v[1] != 'v' || !v[2]) return;
    for (char *d = v + 2; *d; d++)
        if (*d < '0' || *d > '9') return;
    *v = 0;
}

static get_proc_fn get;

/* The function the table hands out for `name` at CUDA 12.9 (exits if none). */
static void *proc(const char *name) {
    void *pfn = NULL;
    if (get(name, &pfn, 12090, 0, NULL) != CUDA_SUCCESS || !pfn) {
        printf("no %s\n", name);
        exit(1);
    }
    return pfn;
}

#define SHOW(label, call) printf("%s %d\n", label, (int)(call))

/* What cuda-bindings asks the driver, through the table as it does, and the answers. */
static void nvmath_calls(void) {
    const char *text = NULL;
    SHOW("error_name", ((CUresult(*)(CUresult, const char **))proc("cuGetErrorName"))(700, &text));
    printf("error_name_text %s\n", text);
    SHOW("error_name_unknown", ((CUresult(*)(CUresult, const char **))proc("cuGetErrorString"))(12345, &text));
    printf("error_string_unknown_null %d\n", text == NULL);
    int pools = -1;
    SHOW("pools_supported_status", ((CUresult(*)(int *, int, CUdevice))proc("cuDeviceGetAttribute"))(&pools, 115, 0));
    printf("pools_supported %d\n", pools);
    void *ctx = NULL, *current = NULL;
    unsigned int flags = 1;
    int active = -1;
    CUresult (*state)(CUdevice, unsigned int *, int *) = proc("cuDevicePrimaryCtxGetState");
    SHOW("retain", ((CUresult(*)(void **, CUdevice))proc("cuDevicePrimaryCtxRetain"))(&ctx, 0));
    state(0, &flags, &active);
    printf("active_after_retain %d\n", active);
    SHOW("set_current", ((CUresult(*)(void *))proc("cuCtxSetCurrent"))(ctx));
    SHOW("set_current_bogus", ((CUresult(*)(void *))proc("cuCtxSetCurrent"))(&flags));
    SHOW("get_current", ((CUresult(*)(void **))proc("cuCtxGetCurrent"))(&current));
    printf("current_is_primary %d\n", current == ctx);
    CUresult (*pop)(void **) = proc("cuCtxPopCurrent");
    SHOW("pop_after_set", pop(&current));
    SHOW("pop_empty", pop(&current));
    SHOW("push", ((CUresult(*)(void *))proc("cuCtxPushCurrent"))(ctx));
    SHOW("pop", pop(&current));
    void *green = &flags;
    SHOW("stream_ctx_v2", ((CUresult(*)(CUstream, void **, void **))proc("cuStreamGetCtx"))(NULL, &current, &green));
    printf("stream_ctx_green_null %d\n", green == NULL);
    int capturing = -1;
    SHOW("is_capturing", ((CUresult(*)(CUstream, int *))proc("cuStreamIsCapturing"))(NULL, &capturing));
    printf("capture_status %d\n", capturing);
    SHOW("release", ((CUresult(*)(CUdevice))proc("cuDevicePrimaryCtxRelease"))(0));
    state(0, &flags, &active);
    printf("active_after_release %d\n", active);
    SHOW("release_unretained", ((CUresult(*)(CUdevice))proc("cuDevicePrimaryCtxRelease"))(0));
    void *pool = NULL;
    SHOW("default_pool", ((CUresult(*)(void **, CUdevice))proc("cuDeviceGetDefaultMemPool"))(&pool, 0));
    unsigned long long threshold = 1 << 20, read_back = 0;
    SHOW("pool_set", ((CUresult(*)(void *, int, void *))proc("cuMemPoolSetAttribute"))(pool, 4, &threshold));
    SHOW("pool_get", ((CUresult(*)(void *, int, void *))proc("cuMemPoolGetAttribute"))(pool, 4, &read_back));
    printf("pool_threshold %llu\n", read_back);
    CUdeviceptr d = 0;
    SHOW("pool_alloc", ((CUresult(*)(CUdeviceptr *, size_t, void *, CUstream))proc("cuMemAllocFromPoolAsync"))(&d, 16, pool, NULL));
    char in[16] = "fifteen letters", out[16] = {0};
    CUresult (*copy)(CUdeviceptr, CUdeviceptr, size_t) = proc("cuMemcpy");
    SHOW("memcpy_htod", copy(d, (CUdeviceptr)(uintptr_t)in, 16));
    SHOW("memcpy_dtoh", copy((CUdeviceptr)(uintptr_t)out, d, 16));
    printf("memcpy_round_trip %d\n", !memcmp(in, out, 16));
    SHOW("memcpy_overrun", copy((CUdeviceptr)(uintptr_t)out, d + 8, 16));
}

int main(int argc, char **argv) {
    void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    get = driver ? (get_proc_fn)dlsym(driver, "cuGetProcAddress_v2") : NULL;
    if (!get) {
        printf("no cuGetProcAddress_v2\n");
        return 1;
    }
    if (argc == 2 && !strcmp(argv[1], "--nvmath-calls")) {
        nvmath_calls();
        return 0;
    }
    int checked = 0;
    for (int i = 1; i < argc; i++) {
        void *target = dlsym(driver, argv[i]);
        char base[256];
        snprintf(base, sizeof base, "%s", argv[i]);
        int per_thread = strip(base, "_ptsz") || strip(base, "_ptds");
        strip_version(base);
        int found = 0;
        for (int version = 2000; version <= 13020 && !found; version += 10) {
            void *pfn = NULL;
            CUdriverProcAddressQueryResult status;
            if (get(base, &pfn, version, per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM : 0, &status) == CUDA_SUCCESS)
                found = target && pfn == target;
        }
        if (!found) printf("missing %s\n", argv[i]);
        checked++;
    }
    printf("checked %d\n", checked);
    return 0;
}
