/* Stand-in libcurand.so.10: loads, answers its version (10.3.4, as CUDA 12.3's), and fails every
 * generator call with CURAND_STATUS_INITIALIZATION_FAILED.
 * See stubs.h. The functions are those CuPy 12 links (its extension modules' undefined
 * symbols at this soname's version). */
#include "stubs.h"

#define CURAND_STATUS_INITIALIZATION_FAILED 203

int curandGetVersion(int *version);
int curandGetVersion(int *version) {
    if (!version) return 101; /* CURAND_STATUS_NOT_INITIALIZED */
    *version = 10304;
    return 0;
}

STUB(curandCreateGenerator, CURAND_STATUS_INITIALIZATION_FAILED)
STUB(curandDestroyGenerator, CURAND_STATUS_INITIALIZATION_FAILED)
STUB(curandGenerate, CURAND_STATUS_INITIALIZATION_FAILED)
STUB(curandGenerateLogNormal, CURAND_STATUS_INITIALIZATION_FAILED)
STUB(curandGenerateLogNormalDouble, CURAND_STATUS_INITIALIZATION_FAILED)
STUB(curandGenerateLongLong, CURAND_STATUS_INITIALIZATION_FAILED)
STUB(curandGenerateNormal, CURAND_STATUS_INITIALIZATION_FAILED)
STUB(curandGenerateNormalDouble, CURAND_STATUS_INITIALIZATION_FAILED)
STUB(curandGeneratePoisson, CURAND_STATUS_INITIALIZATION_FAILED)
STUB(curandGenerateUniform, CURAND_STATUS_INITIALIZATION_FAILED)
STUB(curandGenerateUniformDouble, CURAND_STATUS_INITIALIZATION_FAILED)
STUB(curandSetGeneratorOffset, CURAND_STATUS_INITIALIZATION_FAILED)
STUB(curandSetGeneratorOrdering, CURAND_STATUS_INITIALIZATION_FAILED)
STUB(curandSetPseudoRandomGeneratorSeed, CURAND_STATUS_INITIALIZATION_FAILED)
STUB(curandSetStream, CURAND_STATUS_INITIALIZATION_FAILED)
