"""Deferred verdicts from Python (ctypes, on the stand-in with its GPU kept behind): a GEMM that
reads a NaN is judged only at the program's later synchronisation, and its fault carries the
Python frames of the GEMM's own call, kept there. Called through ctypes.PyDLL, the thread holds
the GIL in the call, and the frames are read through CPython's API; through ctypes.CDLL it has
released the GIL (as PyTorch's operators do), and they are read from CPython's structures.
The lines marked below are the ones the test looks for."""
import ctypes

ctypes.CDLL("libcudart.so.12", mode=ctypes.RTLD_GLOBAL)
ctypes.CDLL("libcublas.so.12", mode=ctypes.RTLD_GLOBAL)
released = ctypes.CDLL(None)  # releases the GIL around each call
held = ctypes.PyDLL(None)  # keeps it


def device(values):
    ptr = ctypes.c_void_p()
    released.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(4 * len(values)))
    host = (ctypes.c_float * len(values))(*values)
    released.cudaMemcpy(ptr, host, ctypes.c_size_t(4 * len(values)), 1)
    return ptr


def gemm(lib, handle, a, b, c):
    one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
    return lib.cublasSgemm_v2(handle, 0, 0, 2, 2, 2, ctypes.byref(one), a, 2, b, 2, ctypes.byref(zero), c, 2)  # FRAME gemm


def layer_holding_the_gil(handle, a, b, c):
    return gemm(held, handle, a, b, c)  # FRAME held


def layer_releasing_the_gil(handle, a, b, c):
    return gemm(released, handle, a, b, c)  # FRAME released


handle = ctypes.c_void_p()
assert released.cublasCreate_v2(ctypes.byref(handle)) == 0
a = device([float("nan"), 1.0, 1.0, 1.0])
b, c = device([1.0] * 4), device([0.0] * 4)
print("held status", layer_holding_the_gil(handle, a, b, c))  # FRAME call held
print("released status", layer_releasing_the_gil(handle, a, b, c))  # FRAME call released
print("sync", released.cudaDeviceSynchronize())
print("done")
