/* Device memory from the driver, as a program with a static runtime gets it (nvcc's default
 * cudart_static, CuPy): libcuda.so.1 opened with dlopen, every function through
 * cuGetProcAddress_v2 at CUDA 12.0, none by name; then a cuBLAS GEMM on that memory. With
 * `via-lookup`, the lookup function itself comes from the lookup first ("cuGetProcAddress" at
 * 12.0: its `_v2`), as a static runtime gets it.
 *   driver_entry clean|oob|nan [via-lookup] */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

typedef int (*get_proc_fn)(const char *, void **, int, unsigned long long, int *);
typedef int (*init_fn)(unsigned int);
typedef int (*alloc_fn)(unsigned long long *, size_t);
typedef int (*free_fn)(unsigned long long);
typedef int (*htod_fn)(unsigned long long, const void *, size_t);
typedef int (*dtoh_fn)(void *, unsigned long long, size_t);

static void *proc(get_proc_fn get, const char *name) {
    void *p = NULL;
    int status = -1;
    if (get(name, &p, 12000, 0, &status) || !p) {
        printf("no %s (%d)\n", name, status);
        exit(3);
    }
    return p;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    const char *c = argv[1];
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    get_proc_fn get = cuda ? (get_proc_fn)dlsym(cuda, "cuGetProcAddress_v2") : NULL;
    if (!get) return 3;
    if (argc > 2 && !strcmp(argv[2], "via-lookup")) get = (get_proc_fn)proc(get, "cuGetProcAddress");
    init_fn init = (init_fn)proc(get, "cuInit");
    alloc_fn mem_alloc = (alloc_fn)proc(get, "cuMemAlloc");
    free_fn mem_free = (free_fn)proc(get, "cuMemFree");
    htod_fn htod = (htod_fn)proc(get, "cuMemcpyHtoD");
    dtoh_fn dtoh = (dtoh_fn)proc(get, "cuMemcpyDtoH");
    if (init(0)) return 3;
    float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, out[4] = {0}, one = 1, zero = 0;
    if (!strcmp(c, "nan")) a[1] = NAN;
    size_t b_bytes = !strcmp(c, "oob") ? sizeof b - 8 : sizeof b;
    unsigned long long da, db, dc;
    if (mem_alloc(&da, sizeof a) || mem_alloc(&db, b_bytes) || mem_alloc(&dc, sizeof out)) return 4;
    htod(da, a, sizeof a);
    htod(db, b, b_bytes);
    cublasHandle_t h;
    printf("create=%d\n", cublasCreate(&h));
    printf("gemm=%d\n", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, (float *)da, 2, (float *)db, 2, &zero, (float *)dc, 2));
    int sync = cudaDeviceSynchronize();
    printf("sync=%d\n", sync);
    if (!sync && !dtoh(out, dc, sizeof out)) printf("C= %g %g %g %g\n", out[0], out[1], out[2], out[3]);
    if (sync) return 0; /* the context is broken: every driver call would return its error */
    mem_free(da);
    mem_free(db);
    mem_free(dc);
    return 0;
}
