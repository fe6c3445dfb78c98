/* Stand-in libcuda.so.1: the driver, as far as the runtime and `doctor` ask it.
 *   CUDASHIM_DRIVER_VERSION=N   what cuDriverGetVersion reports (default 12090)
 *   CUDASHIM_DEVICE_COUNT=N     how many devices there are (default 1; 0: cuInit says no device)
 *   CUDASHIM_COMPUTE_CAPABILITY=M.N  every device's compute capability (default 9.0) */
#include <stdio.h>
#include <stdlib.h>

#include "include/cuda.h"

static int env_int(const char *name, int fallback) {
    const char *v = getenv(name);
    return (v && *v) ? atoi(v) : fallback;
}

CUresult cuDriverGetVersion(int *driverVersion) {
    if (!driverVersion) return 1;
    *driverVersion = env_int("CUDASHIM_DRIVER_VERSION", 12090);
    return CUDA_SUCCESS;
}

CUresult cuInit(unsigned int flags) {
    if (flags != 0) return 1;
    return env_int("CUDASHIM_DEVICE_COUNT", 1) > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

CUresult cuDeviceGetCount(int *count) {
    if (!count) return 1;
    int n = env_int("CUDASHIM_DEVICE_COUNT", 1);
    if (n <= 0) return CUDA_ERROR_NOT_INITIALIZED;
    *count = n;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *device, int ordinal) {
    if (!device || ordinal < 0 || ordinal >= env_int("CUDASHIM_DEVICE_COUNT", 1)) return 101; /* invalid device */
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev) {
    if (!name || len <= 0) return 1;
    snprintf(name, (size_t)len, "cudashim stand-in device %d", dev);
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *pi, int attrib, CUdevice dev) {
    (void)dev;
    if (!pi) return 1;
    const char *cc = getenv("CUDASHIM_COMPUTE_CAPABILITY");
    int major = 9, minor = 0;
    if (cc && *cc) sscanf(cc, "%d.%d", &major, &minor);
    if (attrib == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) *pi = major;
    else if (attrib == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR) *pi = minor;
    else return 1; /* invalid value: not modelled */
    return CUDA_SUCCESS;
}
