/* Stand-in libcufft.so.11: loads, answers its version (11.0.12, as CUDA 12.3's), and fails every
 * plan and transform with CUFFT_NOT_SUPPORTED.
 * See stubs.h. The functions are those CuPy 12 links (its extension modules' undefined
 * symbols at this soname's version). */
#include "stubs.h"

#define CUFFT_NOT_SUPPORTED 16

int cufftGetVersion(int *version);
int cufftGetVersion(int *version) {
    if (!version) return 4; /* CUFFT_INVALID_VALUE */
    *version = 11012;
    return 0;
}

STUB(cufftCreate, CUFFT_NOT_SUPPORTED)
STUB(cufftDestroy, CUFFT_NOT_SUPPORTED)
STUB(cufftExecC2C, CUFFT_NOT_SUPPORTED)
STUB(cufftExecC2R, CUFFT_NOT_SUPPORTED)
STUB(cufftExecD2Z, CUFFT_NOT_SUPPORTED)
STUB(cufftExecR2C, CUFFT_NOT_SUPPORTED)
STUB(cufftExecZ2D, CUFFT_NOT_SUPPORTED)
STUB(cufftExecZ2Z, CUFFT_NOT_SUPPORTED)
STUB(cufftMakePlan1d, CUFFT_NOT_SUPPORTED)
STUB(cufftMakePlanMany, CUFFT_NOT_SUPPORTED)
STUB(cufftSetAutoAllocation, CUFFT_NOT_SUPPORTED)
STUB(cufftSetStream, CUFFT_NOT_SUPPORTED)
STUB(cufftSetWorkArea, CUFFT_NOT_SUPPORTED)
STUB(cufftXtExec, CUFFT_NOT_SUPPORTED)
STUB(cufftXtExecDescriptorC2C, CUFFT_NOT_SUPPORTED)
STUB(cufftXtExecDescriptorZ2Z, CUFFT_NOT_SUPPORTED)
STUB(cufftXtMakePlanMany, CUFFT_NOT_SUPPORTED)
STUB(cufftXtMemcpy, CUFFT_NOT_SUPPORTED)
STUB(cufftXtSetGPUs, CUFFT_NOT_SUPPORTED)
STUB(cufftXtSetWorkArea, CUFFT_NOT_SUPPORTED)
