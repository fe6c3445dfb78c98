/* Stand-in for the driver API header: only what the stand-in libcuda.so.1 exports. */
#ifndef CUBLASGUARD_STANDIN_CUDA_H
#define CUBLASGUARD_STANDIN_CUDA_H
#ifdef __cplusplus
extern "C" {
#endif
typedef int CUresult;
#define CUDA_SUCCESS 0
#define CUDA_ERROR_NOT_INITIALIZED 3
#define CUDA_ERROR_NO_DEVICE 100
CUresult cuInit(unsigned int flags);
CUresult cuDriverGetVersion(int *driverVersion);
CUresult cuDeviceGetCount(int *count);
#ifdef __cplusplus
}
#endif
#endif
