"""Launches a "kernel" through the stand-in runtime from Python (ctypes; the stand-in runs a
kernel as a host function, here a Python callback that raises an illegal address). Under
CUBLASGUARD_SYNC=launches the guard pins the error to this launch, and to the line below."""
import ctypes

ctypes.CDLL("libcudart.so.12", mode=ctypes.RTLD_GLOBAL)
cudart = ctypes.CDLL(None)  # the global scope, where the preloaded guard comes first


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


KERNEL = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


@KERNEL
def out_of_range(args):
    cudart.cudashim_raise_async(700)


cudart.cudaLaunchKernel.argtypes = [ctypes.c_void_p, Dim3, Dim3, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]


def embedding_lookup():
    return cudart.cudaLaunchKernel(ctypes.cast(out_of_range, ctypes.c_void_p), Dim3(64, 1, 1), Dim3(128, 1, 1), None, 0, None)  # FRAME launch


print("launch status", embedding_lookup())
print("sync", cudart.cudaDeviceSynchronize())
