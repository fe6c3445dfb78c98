/* Foreign device memory: an allocation opened from an IPC handle, and a buffer of imported
 * (external) memory, each holding a GEMM operand B.
 *   foreign ipc|cu-ipc|external [clean|oob|nan]
 *     ipc       cudaIpcOpenMemHandle on the handle of a cudaMalloc'd B
 *     cu-ipc    the driver's cuIpcOpenMemHandle, got through cudaGetDriverEntryPointByVersion
 *     external  a memfd imported with cudaImportExternalMemory; B is a mapped buffer of it
 *   oob: B's memory is one element short of what the GEMM reads; nan: B holds a NaN. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime_api.h>

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    const char *how = argv[1];
    const char *variant = argc > 2 ? argv[2] : "clean";
    int oob = !strcmp(variant, "oob");
    float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, out[4] = {0}, one = 1, zero = 0;
    if (!strcmp(variant, "nan")) b[3] = NAN;
    size_t b_bytes = oob ? sizeof b - 4 : sizeof b;
    void *da, *dc, *db = NULL;
    cudaMalloc(&da, sizeof a);
    cudaMalloc(&dc, sizeof out);
    cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice);
    int st;
    if (!strcmp(how, "external")) {
        int fd = memfd_create("foreign", 0);
        if (fd < 0 || ftruncate(fd, 4096)) return 3;
        float *host = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        memcpy(host + 64, b, b_bytes);
        struct cudaExternalMemoryHandleDesc desc = {0};
        desc.type = cudaExternalMemoryHandleTypeOpaqueFd;
        desc.handle.fd = fd;
        desc.size = 4096;
        cudaExternalMemory_t ext;
        st = cudaImportExternalMemory(&ext, &desc);
        struct cudaExternalMemoryBufferDesc buffer = {0};
        buffer.offset = 64 * sizeof(float);
        buffer.size = b_bytes;
        if (!st) st = cudaExternalMemoryGetMappedBuffer(&db, ext, &buffer);
    } else {
        void *exported;
        cudaMalloc(&exported, b_bytes);
        cudaMemcpy(exported, b, b_bytes, cudaMemcpyHostToDevice);
        cudaIpcMemHandle_t handle;
        st = cudaIpcGetMemHandle(&handle, exported);
        if (!strcmp(how, "cu-ipc")) {
            CUresult (*open)(CUdeviceptr *, CUipcMemHandle, unsigned int) = NULL;
            int found = -1;
            cudaGetDriverEntryPointByVersion("cuIpcOpenMemHandle", (void **)&open, 12000, 0, &found);
            CUipcMemHandle cu_handle;
            memcpy(&cu_handle, &handle, sizeof handle);
            if (!st) st = open ? (int)open((CUdeviceptr *)&db, cu_handle, 1) : -1;
        } else if (!st) {
            st = cudaIpcOpenMemHandle(&db, handle, 1);
        }
    }
    printf("open=%d\n", st);
    cublasHandle_t h;
    cublasCreate(&h);
    printf("gemm=%d\n", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, da, 2, db, 2, &zero, dc, 2));
    int sync = cudaDeviceSynchronize();
    printf("sync=%d\n", sync);
    if (!sync && !cudaMemcpy(out, dc, sizeof out, cudaMemcpyDeviceToHost)) printf("C= %g %g %g %g\n", out[0], out[1], out[2], out[3]);
    if (sync) return 0; /* the context is lost: nothing more to close */
    printf("close=%d\n", strcmp(how, "external") ? cudaIpcCloseMemHandle(db) : cudaFree(db));
    return 0;
}
