/* A tiny two-layer MLP trained with cublasSgemm_v2: the demo workload.
 *
 * Written against the public CUDA API only, so the same source builds here against the
 * stand-in headers and libraries, and on a GPU machine against NVIDIA's:
 *     cc -O2 -o mlp examples/mlp.c -I$CUDA_HOME/include -L$CUDA_HOME/lib64 -lcublas -lcudart -lm
 * Layers are laid out as PyTorch lays out nn.Linear (weight: out x in, row-major), and
 * y = x W^T is issued the way PyTorch issues it: transa = T, m = out, n = batch, k = in.
 * Elementwise work (bias, ReLU, loss, SGD) runs on the host to keep the example kernel-free.
 *
 *   mlp [--epochs N] [--inject nan|overflow|width|host|lda]
 *     nan       NaN in one input feature before the first Linear
 *     overflow  a learning rate so high that the weights overflow to Inf
 *     width     the first Linear told in_features = 12 while the input has 8 (reads past it)
 *     host      a host (CPU) buffer passed as the input operand
 *     lda       a leading dimension that is too small */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

enum { BATCH = 32, IN = 8, HIDDEN = 16, OUT = 1 };

static void check_cuda(cudaError_t err, const char *what) {
    if (err != cudaSuccess) {
        fprintf(stderr, "CUDA error: %s (%d) when calling %s\n", cudaGetErrorName(err), err, what);
        exit(1);
    }
}

static void check_cublas(cublasStatus_t st, const char *what) {
    if (st != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "CUDA error: %s when calling `%s`\n", cublasGetStatusName(st), what);
        exit(1);
    }
}

/* Row-major C[M x N] = op(A)[M x K] * op(B)[K x N], issued to column-major cuBLAS as
 * C^T = op(B)^T op(A)^T. */
static void gemm_rm(cublasHandle_t h, int ta, int tb, int M, int N, int K, const float *A, int lda,
                    const float *B, int ldb, float *C, int ldc) {
    const float one = 1.0f, zero = 0.0f;
    check_cublas(cublasSgemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K,
                             &one, B, ldb, A, lda, &zero, C, ldc),
                 "cublasSgemm( handle, opa, opb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc)");
}

static float *device_alloc(size_t n) {
    void *p = NULL;
    check_cuda(cudaMalloc(&p, n * sizeof(float)), "cudaMalloc");
    return p;
}

static void to_device(float *d, const float *h, size_t n) {
    check_cuda(cudaMemcpy(d, h, n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy(HostToDevice)");
}

static void to_host(float *h, const float *d, size_t n) {
    check_cuda(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy(DeviceToHost)");
}

static unsigned rng_state = 12345u;
static float uniform(void) { /* deterministic, so runs compare byte for byte */
    rng_state = rng_state * 1664525u + 1013904223u;
    return (float)(rng_state >> 8) / 16777216.0f - 0.5f;
}

int main(int argc, char **argv) {
    int epochs = 5;
    const char *inject = "none";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--epochs") && i + 1 < argc) epochs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--inject") && i + 1 < argc) inject = argv[++i];
        else {
            fprintf(stderr, "usage: %s [--epochs N] [--inject nan|overflow|width|host|lda]\n", argv[0]);
            return 2;
        }
    }
    int count = 0;
    check_cuda(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    cublasHandle_t handle;
    check_cublas(cublasCreate(&handle), "cublasCreate(handle)");

    static float x[BATCH * IN], y[BATCH], w1[HIDDEN * IN], b1[HIDDEN], w2[OUT * HIDDEN], b2[OUT];
    static float h[BATCH * HIDDEN], pred[BATCH * OUT], dy[BATCH * OUT], dh[BATCH * HIDDEN];
    static float gw1[HIDDEN * IN], gw2[OUT * HIDDEN];
    for (int i = 0; i < BATCH * IN; i++) x[i] = uniform() * 2.0f;
    for (int r = 0; r < BATCH; r++) {
        float s = 0;
        for (int c = 0; c < IN; c++) s += x[r * IN + c];
        y[r] = 0.5f * s;
    }
    for (int i = 0; i < HIDDEN * IN; i++) w1[i] = uniform() * 0.7f;
    for (int i = 0; i < OUT * HIDDEN; i++) w2[i] = uniform() * 0.5f;
    memset(b1, 0, sizeof b1);
    memset(b2, 0, sizeof b2);
    float lr = 0.05f;
    int in_features = IN, ld_x = IN;
    if (!strcmp(inject, "nan")) x[3 * IN + 2] = NAN;
    else if (!strcmp(inject, "overflow")) lr = 1e30f;
    else if (!strcmp(inject, "width")) in_features = ld_x = 12;
    else if (!strcmp(inject, "lda")) ld_x = 4;
    else if (strcmp(inject, "none") && strcmp(inject, "host")) {
        fprintf(stderr, "unknown injection '%s'\n", inject);
        return 2;
    }

    float *dx = device_alloc(BATCH * IN), *dw1 = device_alloc(HIDDEN * IN), *dh_ = device_alloc(BATCH * HIDDEN);
    float *dw2 = device_alloc(OUT * HIDDEN), *dout = device_alloc(BATCH * OUT), *ddy = device_alloc(BATCH * OUT);
    float *ddh = device_alloc(BATCH * HIDDEN), *dgw1 = device_alloc(HIDDEN * IN), *dgw2 = device_alloc(OUT * HIDDEN);
    to_device(dx, x, BATCH * IN);
    const float *input = !strcmp(inject, "host") ? x : dx;

    for (int epoch = 1; epoch <= epochs; epoch++) {
        to_device(dw1, w1, HIDDEN * IN);
        to_device(dw2, w2, OUT * HIDDEN);
        /* forward: h = relu(x W1^T + b1); pred = h W2^T + b2 */
        gemm_rm(handle, 0, 1, BATCH, HIDDEN, in_features, input, ld_x, dw1, in_features, dh_, HIDDEN);
        to_host(h, dh_, BATCH * HIDDEN);
        for (int r = 0; r < BATCH; r++)
            for (int c = 0; c < HIDDEN; c++) {
                float v = h[r * HIDDEN + c] + b1[c];
                h[r * HIDDEN + c] = v < 0 ? 0 : v; /* like torch.relu, NaN passes through */
            }
        to_device(dh_, h, BATCH * HIDDEN);
        gemm_rm(handle, 0, 1, BATCH, OUT, HIDDEN, dh_, HIDDEN, dw2, HIDDEN, dout, OUT);
        to_host(pred, dout, BATCH * OUT);
        float loss = 0;
        for (int r = 0; r < BATCH; r++) {
            float d = pred[r] + b2[0] - y[r];
            loss += d * d / BATCH;
            dy[r] = 2 * d / BATCH;
        }
        printf("epoch %d loss %.6f\n", epoch, loss);
        /* backward: gW2 = dy^T h; dh = dy W2; gW1 = dh^T x */
        to_device(ddy, dy, BATCH * OUT);
        gemm_rm(handle, 1, 0, OUT, HIDDEN, BATCH, ddy, OUT, dh_, HIDDEN, dgw2, HIDDEN);
        gemm_rm(handle, 0, 0, BATCH, HIDDEN, OUT, ddy, OUT, dw2, HIDDEN, ddh, HIDDEN);
        to_host(dh, ddh, BATCH * HIDDEN);
        for (int i = 0; i < BATCH * HIDDEN; i++)
            if (h[i] <= 0) dh[i] = 0;
        to_device(ddh, dh, BATCH * HIDDEN);
        gemm_rm(handle, 1, 0, HIDDEN, IN, BATCH, ddh, HIDDEN, dx, IN, dgw1, IN);
        check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        to_host(gw1, dgw1, HIDDEN * IN);
        to_host(gw2, dgw2, OUT * HIDDEN);
        for (int i = 0; i < HIDDEN * IN; i++) w1[i] -= lr * gw1[i];
        for (int i = 0; i < OUT * HIDDEN; i++) w2[i] -= lr * gw2[i];
        for (int r = 0; r < BATCH; r++) b2[0] -= lr * dy[r];
    }
    float *all[] = {dx, dw1, dh_, dw2, dout, ddy, ddh, dgw1, dgw2};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) check_cuda(cudaFree(all[i]), "cudaFree");
    check_cublas(cublasDestroy(handle), "cublasDestroy(handle)");
    printf("done\n");
    return 0;
}
