/* A cuDNN program for tests/suite/cudnn.rs, linked to libcudnn.so.9 by soname: the stand-in's
 * (shims/cudnn.c) or NVIDIA's, whichever the library path finds. It prints what cuDNN answers,
 * so a guarded run can be compared with a bare one. It is built against the stand-in's cudnn.h
 * (cuDNN 9's prototypes and cudnn_graph.h's values).
 *
 *   versions        cudnnGetVersion, cudnnGetCudartVersion
 *   create          cudnnCreate (and its message), cudnnDestroy
 *   conv            a 4x4 input convolved with a 2x2 filter through the backend API
 *   freed           the same, with the input freed before the execute
 *   small_workspace the same, with a workspace smaller than the plan's
 *   no_workspace    the same, with no workspace bound
 *   destroyed       the same, executed on a destroyed handle
 *   exec_twice      two executes (CUDASHIM_CUDNN_EXEC_FAULT=1: the first one's kernel faults)
 *   legacy_freed    cudnnConvolutionForward with a freed output
 *   add_freed       cudnnAddTensor (a legacy entry point of 7 arguments) with a freed input */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cudnn.h"

static void message(const char *what, cudnnStatus_t status) {
    char text[256] = "";
    cudnnGetLastErrorString(text, sizeof text);
    printf("%s=%d message=\"%s\"\n", what, status, text);
}

static cudnnBackendDescriptor_t tensor(int64_t uid, int64_t h, int64_t w) {
    cudnnBackendDescriptor_t t = NULL;
    int64_t dims[4] = {1, 1, h, w};
    cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &t);
    cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
    cudnnBackendFinalize(t);
    return t;
}

static cudnnBackendDescriptor_t linked(int type, int name, cudnnBackendDescriptor_t to) {
    cudnnBackendDescriptor_t d = NULL;
    cudnnBackendCreateDescriptor(type, &d);
    cudnnBackendSetAttribute(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &to);
    return d;
}

/* The backend convolution, with the case's fault. */
static int backend(const char *mode) {
    cudnnHandle_t handle = NULL;
    cudnnStatus_t status = cudnnCreate(&handle);
    if (status) {
        message("cudnnCreate", status);
        return 1;
    }
    cudaStream_t stream = NULL;
    cudaStreamCreate(&stream);
    cudnnSetStream(handle, stream);
    float hx[16], hw[4] = {1, 0, 0, 1}, hy[9] = {0};
    for (int i = 0; i < 16; i++) hx[i] = (float)i;
    void *x = NULL, *w = NULL, *y = NULL, *ws = NULL;
    cudaMalloc(&x, sizeof hx);
    cudaMalloc(&w, sizeof hw);
    cudaMalloc(&y, sizeof hy);
    cudaMalloc(&ws, strcmp(mode, "small_workspace") == 0 ? 128 : 256);
    cudaMemcpy(x, hx, sizeof hx, cudaMemcpyHostToDevice);
    cudaMemcpy(w, hw, sizeof hw, cudaMemcpyHostToDevice);
    cudaMemcpy(y, hy, sizeof hy, cudaMemcpyHostToDevice);

    cudnnBackendDescriptor_t tx = tensor('x', 4, 4), tw = tensor('w', 2, 2), ty = tensor('y', 3, 3);
    cudnnBackendDescriptor_t op = NULL;
    cudnnBackendCreateDescriptor(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, &op);
    cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tx);
    cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &tw);
    cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ty);
    cudnnBackendFinalize(op);
    cudnnBackendDescriptor_t graph = linked(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, CUDNN_ATTR_OPERATIONGRAPH_OPS, op);
    cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    cudnnBackendFinalize(graph);
    cudnnBackendDescriptor_t engine = linked(CUDNN_BACKEND_ENGINE_DESCRIPTOR, CUDNN_ATTR_ENGINE_OPERATION_GRAPH, graph);
    cudnnBackendFinalize(engine);
    cudnnBackendDescriptor_t config = linked(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, CUDNN_ATTR_ENGINECFG_ENGINE, engine);
    cudnnBackendFinalize(config);
    cudnnBackendDescriptor_t plan = linked(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, config);
    cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    status = cudnnBackendFinalize(plan);
    printf("finalize=%d\n", status);

    cudnnBackendDescriptor_t pack = NULL;
    int64_t uids[3] = {'x', 'w', 'y'};
    void *pointers[3] = {x, w, y};
    cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
    cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
    cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, pointers);
    if (strcmp(mode, "no_workspace") != 0) cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    cudnnBackendFinalize(pack);

    if (strcmp(mode, "freed") == 0) cudaFree(x);
    if (strcmp(mode, "destroyed") == 0) cudnnDestroy(handle);
    status = cudnnBackendExecute(handle, plan, pack);
    printf("execute=%d\n", status);
    if (strcmp(mode, "exec_twice") == 0) {
        status = cudnnBackendExecute(handle, plan, pack);
        message("execute again", status);
    }
    printf("sync=%d\n", (int)cudaStreamSynchronize(stream));
    if (cudaMemcpy(hy, y, sizeof hy, cudaMemcpyDeviceToHost) == cudaSuccess) {
        printf("y =");
        for (int i = 0; i < 9; i++) printf(" %g", hy[i]);
        printf("\n");
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "versions";
    setvbuf(stdout, NULL, _IONBF, 0);
    if (strcmp(mode, "versions") == 0) {
        printf("cudnnGetVersion=%zu cudnnGetCudartVersion=%zu\n", cudnnGetVersion(), cudnnGetCudartVersion());
        return 0;
    }
    if (strcmp(mode, "create") == 0) {
        cudnnHandle_t handle = NULL;
        cudnnStatus_t status = cudnnCreate(&handle);
        message("cudnnCreate", status);
        if (status == 0) printf("cudnnDestroy=%d\n", cudnnDestroy(handle));
        return 0;
    }
    if (strcmp(mode, "legacy_freed") == 0) {
        cudnnHandle_t handle = NULL;
        if (cudnnCreate(&handle)) return 1;
        void *y = NULL;
        float one = 1, zero = 0;
        cudaMalloc(&y, 64);
        cudaFree(y);
        printf("cudnnConvolutionForward=%d\n", cudnnConvolutionForward(handle, &one, NULL, NULL, NULL, NULL, NULL, 0, NULL, 0, &zero, NULL, y));
        return 0;
    }
    if (strcmp(mode, "add_freed") == 0) {
        cudnnHandle_t handle = NULL;
        if (cudnnCreate(&handle)) return 1;
        void *a = NULL, *c = NULL;
        float one = 1;
        cudaMalloc(&a, 64);
        cudaMalloc(&c, 64);
        cudaFree(a);
        printf("cudnnAddTensor=%d\n", cudnnAddTensor(handle, &one, NULL, a, &one, NULL, c));
        return 0;
    }
    return backend(mode);
}
