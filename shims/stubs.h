/* Stand-ins for the CUDA libraries a client links but the guard never checks (CuPy 12 links
 * cuFFT, cuRAND, cuSPARSE, NVRTC and cuSOLVER into nearly every extension module, and Python
 * loads those with RTLD_NOW, so every function they reference must exist). Each library loads,
 * answers its version, and fails every other call cleanly with its own "not supported" status:
 * nothing is computed, nothing is written through the caller's pointers.
 *
 * STUB(name, status): a function that takes whatever it is given (the caller cleans up its
 * arguments in the x86-64 and AArch64 C conventions) and returns status. */
#ifndef CUDASHIM_STUBS_H
#define CUDASHIM_STUBS_H

#define STUB(name, status)                                                                    \
    int name(void);                                                                           \
    int name(void) { return (status); }

#endif
