"""Calls the stand-in cuBLAS through ctypes (which releases the GIL around each foreign call,
as PyTorch's bindings do) with NaN in an input: once from the main thread, once from a
threading.Thread, while a third thread keeps the interpreter busy. The guard records each
fault's Python frames; the lines marked below are the ones it must name."""
import ctypes
import threading

# Loaded into the global scope and looked up there, as a program linked against cuBLAS resolves
# them (a dlsym on the library's own handle, ctypes' default, bypasses a preloaded library).
ctypes.CDLL("libcudart.so.12", mode=ctypes.RTLD_GLOBAL)
ctypes.CDLL("libcublas.so.12", mode=ctypes.RTLD_GLOBAL)
cudart = cublas = ctypes.CDLL(None)


def device(values):
    ptr = ctypes.c_void_p()
    cudart.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(4 * len(values)))
    host = (ctypes.c_float * len(values))(*values)
    cudart.cudaMemcpy(ptr, host, ctypes.c_size_t(4 * len(values)), 1)
    return ptr


def gemm(handle, a):
    b, c = device([1.0] * 4), device([0.0] * 4)
    one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
    return cublas.cublasSgemm_v2(handle, 0, 0, 2, 2, 2, ctypes.byref(one), a, 2, b, 2, ctypes.byref(zero), c, 2)  # FRAME gemm


def forward_main(handle):
    return gemm(handle, device([float("nan"), 1.0, 1.0, 1.0]))  # FRAME forward_main


def forward_worker(handle, out):
    out.append(gemm(handle, device([1.0, float("inf"), 1.0, 1.0])))  # FRAME forward_worker


def busy(stop):
    n = 0
    while not stop.is_set():
        n += 1


handle = ctypes.c_void_p()
assert cublas.cublasCreate_v2(ctypes.byref(handle)) == 0
stop = threading.Event()
spinner = threading.Thread(target=busy, args=(stop,))
spinner.start()
print("main status", forward_main(handle))
out = []
worker = threading.Thread(target=forward_worker, args=(handle, out), name="worker-1")
worker.start()
worker.join()
print("worker status", out[0])
stop.set()
spinner.join()
print("done")
