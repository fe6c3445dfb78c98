"""Daemon threads making NaN GEMMs with the GIL released (ctypes.CDLL, as PyTorch's operators
release it) while the main thread exits: the interpreter finalises under them, and the guard
(in gemm mode, a fault's frames read at the call) must never make a thread state then.
argv: threads, seconds before the main thread exits."""
import ctypes
import sys
import threading
import time

ctypes.CDLL("libcudart.so.12", mode=ctypes.RTLD_GLOBAL)
ctypes.CDLL("libcublas.so.12", mode=ctypes.RTLD_GLOBAL)
lib = ctypes.CDLL(None)


def device(values):
    ptr = ctypes.c_void_p()
    lib.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(4 * len(values)))
    host = (ctypes.c_float * len(values))(*values)
    lib.cudaMemcpy(ptr, host, ctypes.c_size_t(4 * len(values)), 1)
    return ptr


handle = ctypes.c_void_p()
assert lib.cublasCreate_v2(ctypes.byref(handle)) == 0
a = device([float("nan"), 1.0, 1.0, 1.0])
b = device([1.0] * 4)
one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)


def worker():
    c = device([0.0] * 4)
    while True:
        lib.cublasSgemm_v2(handle, 0, 0, 2, 2, 2, ctypes.byref(one), a, 2, b, 2, ctypes.byref(zero), c, 2)


for i in range(int(sys.argv[1])):
    threading.Thread(target=worker, daemon=True, name=f"gemm-{i}").start()
time.sleep(float(sys.argv[2]))
print("exiting", flush=True)
