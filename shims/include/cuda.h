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
typedef int CUdevice;
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR 75
#define CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR 76
CUresult cuDeviceGet(CUdevice *device, int ordinal);
CUresult cuDeviceGetName(char *name, int len, CUdevice dev);
CUresult cuDeviceGetAttribute(int *pi, int attrib, CUdevice dev);
#ifdef __cplusplus
}
#endif
#endif
