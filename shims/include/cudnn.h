/* Stand-in cudnn.h: what the stand-in cuDNN (shims/cudnn.c, cudnn_sub.c) and the programs that
 * call it need of cuDNN 9's API, with the values of NVIDIA's cudnn_graph.h (9.26). */
#ifndef CUDNN_STANDIN_H
#define CUDNN_STANDIN_H
#include <stddef.h>
#include <stdint.h>

#include "cuda_runtime_api.h"

typedef int cudnnStatus_t;
typedef void *cudnnHandle_t;
typedef void *cudnnBackendDescriptor_t;

/* cudnnBackendAttributeType_t */
enum { CUDNN_TYPE_HANDLE = 0, CUDNN_TYPE_INT64 = 3, CUDNN_TYPE_VOID_PTR = 6, CUDNN_TYPE_BACKEND_DESCRIPTOR = 15 };
/* cudnnBackendDescriptorType_t */
enum {
    CUDNN_BACKEND_ENGINE_DESCRIPTOR = 2,
    CUDNN_BACKEND_ENGINECFG_DESCRIPTOR = 3,
    CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR = 5,
    CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR = 10,
    CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR = 15,
    CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR = 16,
    CUDNN_BACKEND_TENSOR_DESCRIPTOR = 17,
};
/* cudnnBackendAttributeName_t */
enum {
    CUDNN_ATTR_ENGINECFG_ENGINE = 300,
    CUDNN_ATTR_EXECUTION_PLAN_HANDLE = 400,
    CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG = 401,
    CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE = 402,
    CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W = 703,
    CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X = 704,
    CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y = 705,
    CUDNN_ATTR_OPERATIONGRAPH_HANDLE = 800,
    CUDNN_ATTR_OPERATIONGRAPH_OPS = 801,
    CUDNN_ATTR_TENSOR_DIMENSIONS = 902,
    CUDNN_ATTR_TENSOR_UNIQUE_ID = 906,
    CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS = 1000,
    CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS = 1001,
    CUDNN_ATTR_VARIANT_PACK_WORKSPACE = 1003,
    CUDNN_ATTR_ENGINE_OPERATION_GRAPH = 1300,
};

size_t cudnnGetVersion(void);
size_t cudnnGetCudartVersion(void);
void cudnnGetLastErrorString(char *message, size_t max_size);
cudnnStatus_t cudnnCreate(cudnnHandle_t *handle);
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle);
cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream);
cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t *stream);
cudnnStatus_t cudnnBackendCreateDescriptor(int type, cudnnBackendDescriptor_t *desc);
cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t desc);
cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t desc, int name, int type, int64_t count, const void *elements);
cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t desc, int name, int type, int64_t requested, int64_t *count, void *elements);
cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t desc);
cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t pack);
cudnnStatus_t cudnnAddTensor(cudnnHandle_t handle, const void *alpha, void *a_desc, const void *A, const void *beta, void *c_desc, void *C);
cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void *alpha, void *x_desc, const void *x, void *w_desc, const void *w, void *conv,
                                      int algo, void *ws, size_t ws_bytes, const void *beta, void *y_desc, void *y);
#endif
