/* Kernels launched through the driver API, as Triton launches them: libcuda.so.1 opened with
 * dlopen, cuModuleLoadData + cuModuleGetFunction for the kernels (the stand-in's test module),
 * cuLaunchKernelEx (newer Triton) or cuLaunchKernel (older), found with dlsym; memory from the
 * runtime, as PyTorch's allocator gives it. Then a GEMM reads what the kernel wrote.
 *   driver_launches ex       fill(A, NaN) by cuLaunchKernelEx, then a GEMM consumes A
 *   driver_launches plain    the same by cuLaunchKernel, its parameters in `extra`'s buffer
 *   driver_launches struct   fill_struct (the pointer inside a struct parameter), cuLaunchKernel
 *   driver_launches coop     a clean fill by cuLaunchCooperativeKernel, then the GEMM
 *   driver_launches proc     cuLaunchKernel found through cuGetProcAddress, a clean fill
 *   driver_launches oob      fill past A's allocation (an illegal address when it runs), a
 *                            clean fill after it, then the GEMM, where the fault surfaces
 *   driver_launches ptsz     fill(A, NaN) by cuLaunchKernel_ptsz on the NULL stream
 *   driver_launches library  fill(A, NaN) from cuLibraryLoadData + cuLibraryGetKernel, launched as
 *                            the CUkernel, then fill_struct through cuKernelGetFunction
 *   driver_launches runtime  a runtime kernel (registered as nvcc's code does) writes NaN into A
 *   driver_launches runtime_ex  the same, launched with cudaLaunchKernelExC and its configuration
 *   driver_launches interior  the runtime kernel writes NaN into A's last two floats only,
 *                            through an interior pointer (a + 2), before the GEMM consumes A
 *   driver_launches refill   fill(A, 2), a GEMM reads A (finite), fill(A, NaN), fill(B, 3), a
 *                            GEMM reads A: only the second fill of A wrote the NaN
 *   driver_launches mask     as refill, the second fill of A writing -inf (an attention mask)
 *   driver_launches lower    a GEMM reads A (finite), fill(A, NaN), a GEMM, fill(A, 2) over
 *                            half of A (fewer NaN), a GEMM
 *   driver_launches loop N   N times: fill(A, 1) by cuLaunchKernel, a GEMM reads A (for the
 *                            cost of recording launches and of origin mode, BENCHMARKS.md)
 *   driver_launches runtime_origin  a GEMM reads A (finite), then the runtime kernel fill_nan
 *                            writes NaN into A, and a GEMM reads it */
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

typedef int (*load_fn)(void **, const void *);
typedef int (*get_fn)(void **, void *, const char *);
typedef int (*launch_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **, void **);
typedef int (*coop_fn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *, void **);
typedef struct {
    unsigned gx, gy, gz, bx, by, bz, shared;
    void *stream;
    void *attrs;
    unsigned attr_count;
} launch_config;
typedef int (*launch_ex_fn)(const launch_config *, void *, void **, void **);
typedef int (*proc_fn)(const char *, void **, int, unsigned long long, int *);

static void *sym(void *lib, const char *name) {
    void *p = dlsym(lib, name);
    if (!p) {
        fprintf(stderr, "no %s\n", name);
        exit(3);
    }
    return p;
}

/* A runtime kernel's host stub, as the stand-in runs it: fill_nan(float *data, int n). */
static void fill_nan(void **args) {
    float *data = *(float **)args[0];
    int n = *(int *)args[1];
    for (int i = 0; i < n; i++) data[i] = NAN;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "ex";
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!cuda) return 2;
    float *a, *b, *c;
    cudaMalloc((void **)&a, 16); /* 4 floats */
    cudaMalloc((void **)&b, 16);
    cudaMalloc((void **)&c, 16);
    float ones[4] = {1, 1, 1, 1};
    cudaMemcpy(a, ones, sizeof ones, cudaMemcpyHostToDevice);
    cudaMemcpy(b, ones, sizeof ones, cudaMemcpyHostToDevice);
    void *module = NULL, *fill = NULL, *fill_struct = NULL;
    printf("load=%d\n", ((load_fn)sym(cuda, "cuModuleLoadData"))(&module, "// cudashim test kernels\n.entry fill(\n.entry fill_struct(\n"));
    get_fn get = (get_fn)sym(cuda, "cuModuleGetFunction");
    printf("get=%d %d\n", get(&fill, module, "fill"), get(&fill_struct, module, "fill_struct"));
    cublasHandle_t h;
    printf("cublasCreate=%d\n", cublasCreate(&h)); /* before the launches: the GEMM is the next call after them */
    float value = NAN, one = 1, zero = 0;
    int n = 4;
    void *params[] = {&a, &value, &n};
    launch_fn launch = (launch_fn)sym(cuda, "cuLaunchKernel");
    if (!strcmp(mode, "ex")) {
        launch_config config = {1, 1, 1, 32, 1, 1, 0, NULL, NULL, 0};
        printf("launch=%d\n", ((launch_ex_fn)sym(cuda, "cuLaunchKernelEx"))(&config, fill, params, NULL));
    } else if (!strcmp(mode, "plain")) {
        char buffer[16];
        memcpy(buffer, &a, 8);
        memcpy(buffer + 8, &value, 4);
        memcpy(buffer + 12, &n, 4);
        size_t size = sizeof buffer;
        void *extra[] = {(void *)1, buffer, (void *)2, &size, (void *)0};
        printf("launch=%d\n", launch(fill, 2, 1, 1, 64, 1, 1, 0, NULL, NULL, extra));
    } else if (!strcmp(mode, "struct")) {
        struct {
            float *data;
            long long n;
        } s = {a, 4};
        void *struct_params[] = {&s, &value};
        printf("launch=%d\n", launch(fill_struct, 1, 1, 1, 32, 1, 1, 0, NULL, struct_params, NULL));
    } else if (!strcmp(mode, "coop")) {
        value = 2;
        printf("launch=%d\n", ((coop_fn)sym(cuda, "cuLaunchCooperativeKernel"))(fill, 1, 1, 1, 32, 1, 1, 0, NULL, params));
    } else if (!strcmp(mode, "proc")) {
        value = 2;
        void *found = NULL;
        int status = 0;
        printf("proc=%d\n", ((proc_fn)sym(cuda, "cuGetProcAddress_v2"))("cuLaunchKernel", &found, 12000, 0, &status));
        printf("launch=%d\n", ((launch_fn)found)(fill, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL));
    } else if (!strcmp(mode, "oob")) {
        int past = 64; /* A holds 4 */
        void *bad[] = {&a, &value, &past};
        value = 2;
        printf("launch=%d\n", launch(fill, 1, 1, 1, 32, 1, 1, 0, NULL, bad, NULL));
        void *good[] = {&b, &value, &n};
        printf("launch=%d\n", launch(fill, 1, 1, 1, 32, 1, 1, 0, NULL, good, NULL));
    } else if (!strcmp(mode, "runtime")) {
        __cudaRegisterFunction(NULL, (const char *)fill_nan, (char *)"_Z8fill_nanPfi", "_Z8fill_nanPfi", -1, NULL, NULL, NULL, NULL, NULL);
        void *args[] = {&a, &n};
        dim3 grid = {1, 1, 1}, block = {32, 1, 1};
        printf("launch=%d\n", cudaLaunchKernel((const void *)fill_nan, grid, block, args, 0, NULL));
    } else if (!strcmp(mode, "interior")) {
        __cudaRegisterFunction(NULL, (const char *)fill_nan, (char *)"_Z8fill_nanPfi", "_Z8fill_nanPfi", -1, NULL, NULL, NULL, NULL, NULL);
        float *tail = a + 2;
        int two = 2;
        void *args[] = {&tail, &two};
        dim3 grid = {1, 1, 1}, block = {32, 1, 1};
        printf("launch=%d\n", cudaLaunchKernel((const void *)fill_nan, grid, block, args, 0, NULL));
    } else if (!strcmp(mode, "runtime_ex")) {
        /* cudaLaunchConfig_t's head, and the runtime's function (not in the stand-in's header). */
        struct {
            dim3 grid, block;
            size_t shared;
            void *stream;
            void *attrs;
            unsigned attr_count;
        } config = {{1, 1, 1}, {32, 1, 1}, 0, NULL, NULL, 0};
        int (*launch_ex)(const void *, const void *, void **) = (int (*)(const void *, const void *, void **))dlsym(RTLD_DEFAULT, "cudaLaunchKernelExC");
        __cudaRegisterFunction(NULL, (const char *)fill_nan, (char *)"_Z8fill_nanPfi", "_Z8fill_nanPfi", -1, NULL, NULL, NULL, NULL, NULL);
        void *args[] = {&a, &n};
        printf("launch=%d\n", launch_ex ? launch_ex(&config, (const void *)fill_nan, args) : -1);
    } else if (!strcmp(mode, "refill") || !strcmp(mode, "mask")) {
        float two = 2, three = 3;
        if (!strcmp(mode, "mask")) value = -INFINITY;
        void *first[] = {&a, &two, &n}, *other[] = {&b, &three, &n};
        printf("launch=%d\n", launch(fill, 1, 1, 1, 32, 1, 1, 0, NULL, first, NULL));
        printf("sgemm=%d\n", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a, 2, b, 2, &zero, c, 2));
        printf("launch=%d\n", launch(fill, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL));
        printf("launch=%d\n", launch(fill, 1, 1, 1, 32, 1, 1, 0, NULL, other, NULL));
    } else if (!strcmp(mode, "loop")) {
        long count = argc > 2 ? atol(argv[2]) : 1000;
        value = 1;
        for (long i = 0; i < count; i++) {
            launch(fill, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL);
            cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a, 2, b, 2, &zero, c, 2);
        }
        printf("loop=%ld\n", count);
    } else if (!strcmp(mode, "lower")) {
        float two = 2;
        int half = 2;
        void *lower[] = {&a, &two, &half};
        printf("sgemm=%d\n", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a, 2, b, 2, &zero, c, 2));
        printf("launch=%d\n", launch(fill, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL));
        printf("sgemm=%d\n", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a, 2, b, 2, &zero, c, 2));
        printf("launch=%d\n", launch(fill, 1, 1, 1, 32, 1, 1, 0, NULL, lower, NULL));
    } else if (!strcmp(mode, "runtime_origin")) {
        __cudaRegisterFunction(NULL, (const char *)fill_nan, (char *)"_Z8fill_nanPfi", "_Z8fill_nanPfi", -1, NULL, NULL, NULL, NULL, NULL);
        printf("sgemm=%d\n", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a, 2, b, 2, &zero, c, 2));
        void *args[] = {&a, &n};
        dim3 grid = {1, 1, 1}, block = {32, 1, 1};
        printf("launch=%d\n", cudaLaunchKernel((const void *)fill_nan, grid, block, args, 0, NULL));
    } else if (!strcmp(mode, "library")) {
        typedef int (*library_load_fn)(void **, const void *, void *, void **, unsigned, void *, void **, unsigned);
        typedef int (*kernel_fn)(void **, void *);
        void *library = NULL, *kernel = NULL, *other = NULL, *function = NULL;
        printf("library=%d\n", ((library_load_fn)sym(cuda, "cuLibraryLoadData"))(&library, "// cudashim test kernels\n", NULL, NULL, 0, NULL, NULL, 0));
        printf("kernels=%d %d\n", ((get_fn)sym(cuda, "cuLibraryGetKernel"))(&kernel, library, "fill"), ((get_fn)sym(cuda, "cuLibraryGetKernel"))(&other, library, "fill_struct"));
        printf("function=%d\n", ((kernel_fn)sym(cuda, "cuKernelGetFunction"))(&function, other));
        printf("launch=%d\n", launch(kernel, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL));
        struct {
            float *data;
            long long n;
        } s = {b, 4};
        float two = 2;
        void *struct_params[] = {&s, &two};
        printf("launch=%d\n", launch(function, 1, 1, 1, 32, 1, 1, 0, NULL, struct_params, NULL));
    } else if (!strcmp(mode, "ptsz")) {
        printf("launch=%d\n", ((launch_fn)sym(cuda, "cuLaunchKernel_ptsz"))(fill, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL));
    } else {
        return 2;
    }
    printf("sgemm=%d\n", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a, 2, b, 2, &zero, c, 2));
    float out[4];
    printf("copy=%d\n", cudaMemcpy(out, c, sizeof out, cudaMemcpyDeviceToHost));
    printf("c=%g %g %g %g\n", out[0], out[1], out[2], out[3]);
    return 0;
}
