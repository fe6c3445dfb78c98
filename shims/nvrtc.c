/* Stand-in libnvrtc.so.12: loads, answers its version (12.3) and its error strings, and compiles
 * nothing: every other call fails with NVRTC_ERROR_INTERNAL_ERROR.
 * See stubs.h. The functions are those CuPy 12 links (its extension modules' undefined
 * symbols at this soname's version). */
#include "stubs.h"

#define NVRTC_ERROR_INTERNAL_ERROR 11

int nvrtcVersion(int *major, int *minor);
int nvrtcVersion(int *major, int *minor) {
    if (!major || !minor) return 3; /* NVRTC_ERROR_INVALID_INPUT */
    *major = 12;
    *minor = 3;
    return 0;
}

const char *nvrtcGetErrorString(int result);
const char *nvrtcGetErrorString(int result) {
    switch (result) {
    case 0: return "NVRTC_SUCCESS";
    case 3: return "NVRTC_ERROR_INVALID_INPUT";
    case 11: return "NVRTC_ERROR_INTERNAL_ERROR";
    default: return "NVRTC_ERROR unknown";
    }
}

STUB(nvrtcAddNameExpression, NVRTC_ERROR_INTERNAL_ERROR)
STUB(nvrtcCompileProgram, NVRTC_ERROR_INTERNAL_ERROR)
STUB(nvrtcCreateProgram, NVRTC_ERROR_INTERNAL_ERROR)
STUB(nvrtcDestroyProgram, NVRTC_ERROR_INTERNAL_ERROR)
STUB(nvrtcGetCUBIN, NVRTC_ERROR_INTERNAL_ERROR)
STUB(nvrtcGetCUBINSize, NVRTC_ERROR_INTERNAL_ERROR)
STUB(nvrtcGetLoweredName, NVRTC_ERROR_INTERNAL_ERROR)
STUB(nvrtcGetPTX, NVRTC_ERROR_INTERNAL_ERROR)
STUB(nvrtcGetPTXSize, NVRTC_ERROR_INTERNAL_ERROR)
STUB(nvrtcGetProgramLog, NVRTC_ERROR_INTERNAL_ERROR)
STUB(nvrtcGetProgramLogSize, NVRTC_ERROR_INTERNAL_ERROR)
