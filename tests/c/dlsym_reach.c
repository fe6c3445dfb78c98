/* Reaches cuBLAS and the runtime as JAX/XLA and TensorFlow do: dlopen(RTLD_NOW | RTLD_LOCAL)
 * and every function through dlsym on the library's handle (the program links neither).
 *   dlsym_reach clean|oob|nan       a 2 x 2 GEMM: clean, B's allocation short, a NaN in A
 *   dlsym_reach dlvsym              as clean, with the functions taken by dlvsym
 *   dlsym_reach every NAME...       looks each NAME up on its library's handle (cuDNN's: libcudnn.so.9) and prints
 *                                   "NAME guarded", "NAME real" or "NAME missing"
 *   dlsym_reach two VENDORED_PATH   a second, renamed copy of cuBLAS loaded beside the first:
 *                                   each copy's handle works with its own functions only
 * CUDA_MAJOR (default 12) picks the sonames, so NVIDIA's CUDA 13 libraries load too. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*malloc_fn)(void **, size_t);
typedef int (*free_fn)(void *);
typedef int (*memcpy_fn)(void *, const void *, size_t, int);
typedef int (*sync_fn)(void);
typedef int (*create_fn)(void **);
typedef int (*sgemm_fn)(void *, int, int, int, int, int, const float *, const float *, int, const float *, int,
                        const float *, float *, int);

struct cublas {
    create_fn create;
    sgemm_fn sgemm;
};

static void *must(void *p, const char *what) {
    if (!p) {
        printf("missing %s: %s\n", what, dlerror());
        exit(3);
    }
    return p;
}

static char cublas_soname[32], cudart_soname[32];

static struct cublas load_cublas(const char *path, int versioned) {
    void *lib = must(dlopen(path, RTLD_NOW | RTLD_LOCAL), path);
    struct cublas c;
    if (versioned) { /* NVIDIA's symbol version is the soname */
        c.create = (create_fn)must(dlvsym(lib, "cublasCreate_v2", cublas_soname), "versioned cublasCreate_v2");
        c.sgemm = (sgemm_fn)must(dlvsym(lib, "cublasSgemm_v2", cublas_soname), "versioned cublasSgemm_v2");
    } else {
        c.create = (create_fn)must(dlsym(lib, "cublasCreate_v2"), "cublasCreate_v2");
        c.sgemm = (sgemm_fn)must(dlsym(lib, "cublasSgemm_v2"), "cublasSgemm_v2");
    }
    return c;
}

/* Which library a hooked name lives in, by its prefix, as XLA's stubs pick their handle. */
static void *cudnn;

static void *handle_for(const char *name, void *rt, void *blas, void *lt, void *driver) {
    /* cuDNN's dispatcher, opened at its first name (the stand-in's cudnn/ on the library path). */
    if (!strncmp(name, "cudnn", 5)) return cudnn ? cudnn : (cudnn = must(dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL), "libcudnn.so.9"));
    if (!strncmp(name, "cublasLt", 8)) return lt;
    if (!strncmp(name, "cublas", 6)) return blas;
    if (!strncmp(name, "cuda", 4) || !strncmp(name, "__cuda", 6)) return rt;
    return driver;
}

static int every(int count, char **names, const char *major) {
    char lt_soname[32];
    snprintf(lt_soname, sizeof lt_soname, "libcublasLt.so.%s", major);
    void *rt = must(dlopen(cudart_soname, RTLD_NOW | RTLD_LOCAL), cudart_soname);
    void *blas = must(dlopen(cublas_soname, RTLD_NOW | RTLD_LOCAL), cublas_soname);
    void *lt = must(dlopen(lt_soname, RTLD_NOW | RTLD_LOCAL), lt_soname);
    void *driver = must(dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL), "libcuda.so.1");
    for (int i = 0; i < count; i++) {
        void *f = dlsym(handle_for(names[i], rt, blas, lt, driver), names[i]);
        Dl_info info;
        const char *what = !f ? "missing"
                           : dladdr(f, &info) && info.dli_fname && strstr(info.dli_fname, "libcublasguard") ? "guarded"
                                                                                                         : "real";
        printf("%s %s\n", names[i], what);
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    const char *c = argv[1];
    const char *major = getenv("CUDA_MAJOR") ? getenv("CUDA_MAJOR") : "12";
    snprintf(cublas_soname, sizeof cublas_soname, "libcublas.so.%s", major);
    snprintf(cudart_soname, sizeof cudart_soname, "libcudart.so.%s", major);
    if (!strcmp(c, "every")) return every(argc - 2, argv + 2, major);
    void *rt = must(dlopen(cudart_soname, RTLD_NOW | RTLD_LOCAL), cudart_soname);
    malloc_fn cuda_malloc = (malloc_fn)must(dlsym(rt, "cudaMalloc"), "cudaMalloc");
    free_fn cuda_free = (free_fn)must(dlsym(rt, "cudaFree"), "cudaFree");
    memcpy_fn cuda_memcpy = (memcpy_fn)must(dlsym(rt, "cudaMemcpy"), "cudaMemcpy");
    sync_fn cuda_sync = (sync_fn)must(dlsym(rt, "cudaDeviceSynchronize"), "cudaDeviceSynchronize");
    struct cublas blas = load_cublas(cublas_soname, !strcmp(c, "dlvsym"));

    float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, out[4] = {0}, one = 1, zero = 0;
    if (!strcmp(c, "nan")) a[1] = NAN;
    void *da = NULL, *db = NULL, *dc = NULL, *h = NULL;
    cuda_malloc(&da, sizeof a);
    cuda_malloc(&db, !strcmp(c, "oob") ? sizeof b - 8 : sizeof b);
    cuda_malloc(&dc, sizeof out);
    cuda_memcpy(da, a, sizeof a, 1);
    cuda_memcpy(db, b, !strcmp(c, "oob") ? sizeof b - 8 : sizeof b, 1);
    printf("create=%d\n", blas.create(&h));
    printf("gemm=%d\n", blas.sgemm(h, 0, 0, 2, 2, 2, &one, da, 2, db, 2, &zero, dc, 2));
    int sync = cuda_sync();
    printf("sync=%d\n", sync);
    if (!sync && !cuda_memcpy(out, dc, sizeof out, 2)) printf("C= %g %g %g %g\n", out[0], out[1], out[2], out[3]);
    if (!strcmp(c, "two") && argc > 2) {
        struct cublas other = load_cublas(argv[2], 0);
        void *h2;
        printf("other create=%d\n", other.create(&h2));
        printf("other gemm, own handle=%d\n", other.sgemm(h2, 0, 0, 2, 2, 2, &one, da, 2, db, 2, &zero, dc, 2));
        /* A handle belongs to the copy that made it: the other copy does not know it. */
        printf("other gemm, first copy's handle=%d\n", other.sgemm(h, 0, 0, 2, 2, 2, &one, da, 2, db, 2, &zero, dc, 2));
        printf("first gemm, own handle=%d\n", blas.sgemm(h, 0, 0, 2, 2, 2, &one, da, 2, db, 2, &zero, dc, 2));
    }
    cuda_free(da);
    cuda_free(db);
    cuda_free(dc);
    return 0;
}
