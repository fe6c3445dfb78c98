/* Device memory as PyTorch's expandable segments get it: the virtual-memory functions through
 * cudaGetDriverEntryPointByVersion (CUDA 12.5's way), one address reservation grown by mapping
 * 2 MiB chunks side by side; then a cuBLAS GEMM whose A straddles the two chunks.
 *   expandable clean     A spans chunk 0 and chunk 1: one extent, no fault
 *   expandable oob       B runs past the last mapped chunk into reserved, unmapped addresses
 *   expandable nan       a NaN in A
 *   expandable unmapped  chunk 1 is unmapped before the GEMM (A's second half is gone) */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime_api.h>

#define CHUNK ((size_t)2 << 20)

static void *entry(const char *name) {
    void *p = NULL;
    int status = -1;
    if (cudaGetDriverEntryPointByVersion(name, &p, 12050, 0, &status) || !p) {
        printf("no %s (%d)\n", name, status);
        return NULL;
    }
    return p;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    const char *c = argv[1];
    CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long) = entry("cuMemAddressReserve");
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long) = entry("cuMemCreate");
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) = entry("cuMemMap");
    CUresult (*set_access)(CUdeviceptr, size_t, const void *, size_t) = entry("cuMemSetAccess");
    CUresult (*unmap)(CUdeviceptr, size_t) = entry("cuMemUnmap");
    if (!reserve || !create || !map || !set_access || !unmap) return 3;
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    CUdeviceptr base;
    CUmemGenericAllocationHandle chunk[2];
    int access = 3;
    if (reserve(&base, 4 * CHUNK, 0, 0, 0)) return 4;
    for (int i = 0; i < 2; i++) {
        if (create(&chunk[i], CHUNK, &prop, 0) || map(base + i * CHUNK, CHUNK, 0, chunk[i], 0) ||
            set_access(base + i * CHUNK, CHUNK, &access, 1))
            return 5;
    }
    float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, out[4] = {0}, one = 1, zero = 0;
    if (!strcmp(c, "nan")) a[3] = NAN;
    float *da = (float *)(base + CHUNK - 8); /* two floats in chunk 0, two in chunk 1 */
    float *db = (float *)(!strcmp(c, "oob") ? base + 2 * CHUNK - 8 : base + 256);
    float *dc = (float *)(base + 512);
    cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice);
    cudaMemcpy(db, b, !strcmp(c, "oob") ? 8 : sizeof b, cudaMemcpyHostToDevice);
    if (!strcmp(c, "unmapped") && unmap(base + CHUNK, CHUNK)) return 6;
    cublasHandle_t h;
    printf("create=%d\n", cublasCreate(&h));
    printf("gemm=%d\n", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, da, 2, db, 2, &zero, dc, 2));
    int sync = cudaDeviceSynchronize();
    printf("sync=%d\n", sync);
    if (!sync && !cudaMemcpy(out, dc, sizeof out, cudaMemcpyDeviceToHost)) printf("C= %g %g %g %g\n", out[0], out[1], out[2], out[3]);
    return 0;
}
