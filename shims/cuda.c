/* Stand-in libcuda.so.1: the driver, as far as the runtime and `doctor` ask it.
 *   CUDASHIM_DRIVER_VERSION=N   what cuDriverGetVersion reports (default 12090)
 *   CUDASHIM_DEVICE_COUNT=N     how many devices there are (default 1; 0: cuInit says no device) */
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
