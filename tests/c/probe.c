/* What "use CUDA if available, else the CPU" does, on a machine without a driver.
 *   probe cpu          asks cudaGetDeviceCount, falls back to the CPU, exits 0
 *   probe die          asks, then exits 1 ("Found no NVIDIA driver")
 *   probe malloc       asks, then calls cudaMalloc anyway (which fails), exits 0
 *   probe both         asks, then cudaMalloc and cublasCreate anyway (both fail), exits 0
 *   probe chdir DIR    changes folder to DIR first (Hydra, daemons), then allocates
 *   probe kernels N    registers N kernels, as nvcc's code does at load, then one GEMM */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

static volatile int touched;
static void body(void **args) { touched = args != NULL; }

static int probe(void) {
    int count = -1;
    int status = cudaGetDeviceCount(&count);
    printf("cudaGetDeviceCount=%d count=%d\n", status, count);
    return status == cudaSuccess && count > 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "cpu";
    if (!strcmp(mode, "chdir") && argc > 2) {
        if (chdir(argv[2]) != 0) return 2;
        void *p = NULL;
        printf("cudaMalloc=%d\n", cudaMalloc(&p, 64));
        return 0;
    }
    if (!strcmp(mode, "kernels")) {
        long n = argc > 2 ? atol(argv[2]) : 1000;
        for (long i = 0; i < n; i++) {
            char name[32];
            snprintf(name, sizeof name, "_Z7kernel%ldv", i);
            /* One host stub for all: registration is what is measured, not the names. */
            __cudaRegisterFunction(NULL, (const char *)body, strdup(name), strdup(name), -1, NULL, NULL, NULL, NULL, NULL);
        }
        cublasHandle_t h;
        float *a;
        cudaMalloc((void **)&a, 64);
        const float one = 1, zero = 0;
        printf("cublasCreate=%d\n", cublasCreate(&h));
        printf("sgemm=%d\n", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a, 2, a, 2, &zero, a + 8, 2));
        return 0;
    }
    if (probe()) {
        printf("cuda\n");
        return 0;
    }
    if (!strcmp(mode, "die")) {
        fprintf(stderr, "RuntimeError: Found no NVIDIA driver on your system.\n");
        return 1;
    }
    if (!strcmp(mode, "malloc") || !strcmp(mode, "both")) {
        void *p = NULL;
        printf("cudaMalloc=%d\n", cudaMalloc(&p, 64));
    }
    if (!strcmp(mode, "both")) {
        cublasHandle_t h;
        printf("cublasCreate=%d\n", cublasCreate(&h));
    }
    printf("cpu fallback\n");
    return 0;
}
