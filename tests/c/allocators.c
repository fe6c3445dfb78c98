/* The runtime's other allocators, each holding a GEMM operand:
 *   allocators managed|pitch|pool  clean (C printed) or, with a second argument "oob", B's
 *   allocation is one element short of what the GEMM reads.
 *   allocators pinned              B in pinned host memory (cudaMallocHost), given to the GEMM */
#include <stdio.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    const char *how = argv[1];
    int oob = argc > 2 && !strcmp(argv[2], "oob");
    float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, out[4] = {0}, one = 1, zero = 0;
    size_t b_bytes = oob ? sizeof b - 4 : sizeof b;
    void *da, *db, *dc;
    cudaMalloc(&da, sizeof a);
    cudaMalloc(&dc, sizeof out);
    int st;
    if (!strcmp(how, "managed")) {
        st = cudaMallocManaged(&db, b_bytes, 1);
    } else if (!strcmp(how, "pitch")) {
        /* a 2 x 2 float matrix with a 512-byte pitch; the GEMM reads it with ld 2 as a plain
         * 2 x 2 block, inside the pitched allocation unless the rows are too few */
        size_t pitch = 0;
        st = cudaMallocPitch(&db, &pitch, 8, oob ? 0 : 1);
    } else if (!strcmp(how, "pinned")) {
        st = cudaMallocHost(&db, b_bytes);
    } else {
        st = cudaMallocFromPoolAsync(&db, b_bytes, (void *)1, 0);
    }
    printf("alloc=%d\n", st);
    cudaMemcpy(da, a, sizeof a, cudaMemcpyHostToDevice);
    if (!strcmp(how, "pinned")) memcpy(db, b, b_bytes);
    else if (st == 0 && !(oob && !strcmp(how, "pitch"))) cudaMemcpy(db, b, b_bytes, cudaMemcpyHostToDevice);
    cublasHandle_t h;
    cublasCreate(&h);
    printf("gemm=%d\n", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, da, 2, db, 2, &zero, dc, 2));
    int sync = cudaDeviceSynchronize();
    printf("sync=%d\n", sync);
    if (!sync && !cudaMemcpy(out, dc, sizeof out, cudaMemcpyDeviceToHost)) printf("C= %g %g %g %g\n", out[0], out[1], out[2], out[3]);
    return 0;
}
