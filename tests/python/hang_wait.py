"""A Python job that hangs (issue 50), through ctypes on the stand-in: a GEMM that completes, a
stream wait on a flag nobody writes (as a collective waits for a peer that never comes), a GEMM
queued behind it, then the host waits for the stream in cudaStreamSynchronize, forever, with
the GIL released (ctypes.CDLL releases it, as torch.cuda.synchronize does). The lines marked
below are the ones the test looks for. It prints "waiting" just before the wait."""
import ctypes

ctypes.CDLL("libcudart.so.12", mode=ctypes.RTLD_GLOBAL)
ctypes.CDLL("libcublas.so.12", mode=ctypes.RTLD_GLOBAL)
driver = ctypes.CDLL("libcuda.so.1")
lib = ctypes.CDLL(None)  # releases the GIL around each call

N = 4


def device(nbytes):
    ptr = ctypes.c_void_p()
    assert lib.cudaMalloc(ctypes.byref(ptr), ctypes.c_size_t(nbytes)) == 0
    return ptr


handle = ctypes.c_void_p()
assert lib.cublasCreate_v2(ctypes.byref(handle)) == 0
a, c, flag = device(4 * N * N), device(4 * N * N), device(4)
host = (ctypes.c_float * (N * N))(*([1.0] * (N * N)))
lib.cudaMemcpy(a, host, ctypes.c_size_t(4 * N * N), 1)
lib.cudaMemset(flag, 0, ctypes.c_size_t(4))
one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)


def gemm():
    return lib.cublasSgemm_v2(handle, 0, 0, N, N, N, ctypes.byref(one), a, N, a, N, ctypes.byref(zero), c, N)  # GEMM


assert gemm() == 0
lib.cudaDeviceSynchronize()
wait_value = driver.cuStreamWaitValue32_v2
wait_value.argtypes = [ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_uint, ctypes.c_uint]
assert wait_value(None, flag.value, 1, 1) == 0  # CU_STREAM_WAIT_VALUE_EQ, never met
assert gemm() == 0  # QUEUED GEMM


def wait_for_the_stream():
    print("waiting", flush=True)
    return lib.cudaStreamSynchronize(None)  # HOST WAITS


wait_for_the_stream()  # CALL WAIT
