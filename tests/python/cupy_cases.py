"""CuPy 12 (cupy-cuda12x) on the stand-in, for tests/suite/cupy.rs. CuPy links the CUDA runtime,
cuBLAS and the driver by name (and cuFFT, cuRAND, cuSPARSE, NVRTC, cuSOLVER, which the stand-in
provides as libraries that load and fail cleanly), so it runs here unmodified.

`clean`: every cuBLAS path of CuPy's on good operands (matmul in each floating and complex
type, `@`, dot, tensordot, a transposed operand, batched matmul), the results printed (bare and
guarded must print the same); then what the stand-in does not compute (an elementwise kernel
needs NVRTC, an FFT cuFFT, random numbers cuRAND, a handle cuSOLVER or cuSPARSE), each
failing with its library's error.
`old_gpu`: tensordot in float64 on a GPU of compute capability 3.5, where CuPy calls
cublasDgemm_v2 rather than cublasGemmEx.
`faults`: each planted mistake once, on the line marked `# FAULT <name>`; the script carries on
after each (the guard refuses the call, CUBLASGUARD_ON_FAULT=error, and CuPy raises).
`nan`: a NaN reaching a product under the guard's defaults.
"""
import contextlib
import sys

import cupy
import numpy as np
from cupy_backends.cuda.libs import cublas

A = np.arange(1, 13).reshape(4, 3)  # m x k, row-major as CuPy keeps it
B = np.arange(1, 7).reshape(3, 2)  # k x n


def show(name, x):
    print(name, x.dtype, cupy.asnumpy(x).tolist())


def error_of(call, *args):
    try:
        call(*args)
        return "ok"
    except Exception as e:  # CuPy raises each library's error status as its own exception
        return type(e).__name__


def clean():
    for dt in (np.float16, np.float32, np.float64, np.complex64, np.complex128):
        a, b = cupy.asarray(A.astype(dt)), cupy.asarray(B.astype(dt))
        show("matmul", cupy.matmul(a, b))
    for dt in (np.float32, np.float64):
        a, b = cupy.asarray(A.astype(dt)), cupy.asarray(B.astype(dt))
        show("@", a @ b)
        show("dot", cupy.dot(a, b))
        show("tensordot", cupy.tensordot(a, b, axes=1))
        show("transposed", a.T @ a)
        x, y = cupy.asarray(np.stack([A, A + 1]).astype(dt)), cupy.asarray(np.stack([B, B + 1]).astype(dt))
        show("batched", cupy.matmul(x, y))
    # What the stand-in does not compute fails with its library's error, guarded as bare.
    print("elementwise", error_of(cupy.ones, 3))
    print("fft", error_of(cupy.fft.fft, cupy.asarray(np.arange(8, dtype=np.complex64))))
    print("random", error_of(cupy.random.rand, 3))
    print("solver", error_of(cupy.cuda.device.get_cusolver_handle))
    print("sparse", error_of(cupy.cuda.device.get_cusparse_handle))


@contextlib.contextmanager
def refused(name):
    """Prints `name` and the exception the call in the block raised (or "ok"); the call stays
    on the script's own line, the innermost frame of the script the guard names."""
    try:
        yield
        print(name, "ok")
    except Exception as e:  # CuPy raises the refused call's cuBLAS status
        print(name, type(e).__name__)


def faults():
    a, b = cupy.asarray(A.astype(np.float32)), cupy.asarray(B.astype(np.float32))
    poisoned = A.astype(np.float32)
    poisoned[2, 1] = np.nan
    nan_a = cupy.asarray(poisoned)
    with refused("nan_a"):
        cupy.matmul(nan_a, b)  # FAULT nan_a
    poisoned = B.astype(np.float64)
    poisoned[1, 0] = np.inf
    inf_b = cupy.asarray(poisoned)
    a64 = cupy.asarray(A.astype(np.float64))
    with refused("inf_b"):
        cupy.tensordot(a64, inf_b, axes=1)  # FAULT inf_b
    x = np.stack([A, A + 1]).astype(np.float32)
    x[1, 3, 0] = np.nan
    x, y = cupy.asarray(x), cupy.asarray(np.stack([B, B]).astype(np.float32))
    with refused("nan_batched"):
        cupy.matmul(x, y)  # FAULT nan_batched
    # A 4 x 3 float32 array (48 bytes) over a 24-byte allocation (cudaMalloc, outside the pool).
    small = cupy.cuda.memory.Memory(24)
    short = cupy.ndarray((4, 3), np.float32, memptr=cupy.cuda.MemoryPointer(small, 0))
    with refused("short"):
        short @ b  # FAULT short
    # An array over memory freed (cudaFree) while CuPy still points at it.
    freed = cupy.cuda.memory.Memory(b.nbytes)
    unowned = cupy.cuda.UnownedMemory(freed.ptr, b.nbytes, None, 0)
    stale = cupy.ndarray(b.shape, b.dtype, memptr=cupy.cuda.MemoryPointer(unowned, 0))
    del freed
    with refused("freed"):
        cupy.dot(a, stale)  # FAULT freed
    # An array over host memory, as if it were the device's.
    host = A.astype(np.float32)
    unowned = cupy.cuda.UnownedMemory(host.ctypes.data, host.nbytes, host, 0)
    on_host = cupy.ndarray(host.shape, host.dtype, memptr=cupy.cuda.MemoryPointer(unowned, 0))
    with refused("host"):
        cupy.matmul(on_host, b)  # FAULT host
    # cuBLAS called directly, as CuPy's own routines call it (column-major: C = A B, A m x k,
    # B k x n), on exact cudaMalloc allocations (outside the pool) with float32 scalars on
    # the host.
    m, n, k = 4, 2, 3
    one, zero = np.ones(1, np.float32), np.zeros(1, np.float32)
    alpha, beta = one.ctypes.data, zero.ctypes.data
    da, db, dc = (cupy.cuda.memory.Memory(4 * count) for count in (m * k, k * n, m * n))
    handle = cupy.cuda.device.get_cublas_handle()
    with refused("bad_ldb"):
        cublas.sgemm(handle, 0, 0, m, n, k, alpha, da.ptr, m, db.ptr, k - 1, beta, dc.ptr, m)  # FAULT bad_ldb
    # k twice what A and B hold: A (m x 2k, ld m) overruns its allocation.
    with refused("large_k"):
        cublas.gemmEx(handle, 0, 0, m, n, 2 * k, alpha, da.ptr, 0, m, db.ptr, 0, 2 * k, beta, dc.ptr, 0, m, 68, -1)  # FAULT large_k
    # float16 products past float16's largest finite value (65504): 3 x 300 x 300 = 270000.
    big_a, big_b = cupy.asarray(np.full((4, 3), 300, np.float16)), cupy.asarray(np.full((3, 2), 300, np.float16))
    with refused("f16_overflow"):
        cupy.matmul(big_a, big_b)  # FAULT f16_overflow
    # After the refused calls, a clean product still computes.
    show("after", a @ b)


def old_gpu():
    a, b = cupy.asarray(A.astype(np.float64)), cupy.asarray(B.astype(np.float64))
    show("tensordot", cupy.tensordot(a, b, axes=1))


def nan():
    """A NaN in a product under the guard's defaults (the call runs, the verdict comes after
    it): CuPy computes the same as bare, NaN in the row it reaches."""
    poisoned = A.astype(np.float32)
    poisoned[0, 2] = np.nan
    a, b = cupy.asarray(poisoned), cupy.asarray(B.astype(np.float32))
    c = a @ b  # FAULT default_nan
    show("nan", c)


{"clean": clean, "faults": faults, "old_gpu": old_gpu, "nan": nan}[sys.argv[1]]()
sys.stdout.flush()
