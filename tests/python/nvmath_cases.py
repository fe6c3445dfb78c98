"""nvmath-python (NVIDIA's bindings and high-level matmul) on the stand-in, for
tests/suite/nvmath.rs. `clean`: every call computes on good operands and the results are
printed (bare and guarded must print the same). `faults`: each planted mistake once, on the
line marked `# FAULT <name>`, the call made directly there so that line is the innermost
frame the guard names; the script carries on after each, as a program that ignores statuses.

cuda-bindings links the CUDA runtime statically, and that runtime needs NVIDIA's private
driver tables (cuGetExportTable), which the stand-in does not have: nvmath asks it only for
cudaMemGetInfo (its memory limit), so the script answers that one question from the driver
(cuMemGetInfo, what the runtime reports on a GPU). Everything else runs as nvmath runs it.
"""
import sys

import numpy as np
from cuda.bindings import driver
import nvmath
import nvmath.internal.utils as nvmath_utils
from nvmath.bindings import cublas, cublasLt

R_32F, COMPUTE_32F, GEMM_DEFAULT, OP_N = 0, 68, -1, 0


def check(result):
    status = result[0] if isinstance(result, tuple) else result
    if int(status) != 0:
        raise RuntimeError(f"driver call failed: {status!r}")
    return result[1] if isinstance(result, tuple) and len(result) == 2 else result


def mem_get_info():
    status, free, total = driver.cuMemGetInfo()
    return int(status), free, total


nvmath_utils.cbr.cudaMemGetInfo = mem_get_info

check(driver.cuInit(0))
device = check(driver.cuDeviceGet(0))
context = check(driver.cuDevicePrimaryCtxRetain(device))
check(driver.cuCtxSetCurrent(context))


def to_device(array):
    array = np.asfortranarray(array, dtype=np.float32)
    ptr = int(check(driver.cuMemAlloc(array.nbytes)))
    check(driver.cuMemcpyHtoD(ptr, array.ctypes.data, array.nbytes))
    return ptr


def from_device(ptr, rows, cols):
    out = np.empty((rows, cols), dtype=np.float32, order="F")
    check(driver.cuMemcpyDtoH(out.ctypes.data, ptr, out.nbytes))
    return out


def scalar(value):
    box = np.array([value], dtype=np.float32)
    return box, box.ctypes.data


A = np.arange(1, 13, dtype=np.float32).reshape(4, 3)  # m x k
B = np.arange(1, 7, dtype=np.float32).reshape(3, 2)  # k x n
m, k, n = 4, 3, 2
# Host scalars (the handles' default pointer mode); the arrays stay referenced while in use.
one, alpha = scalar(1.0)
zero, beta = scalar(0.0)
handle = cublas.create()
lt = cublasLt.create()
desc = cublasLt.matmul_desc_create(COMPUTE_32F, R_32F)


def layouts(lda=m, ldb=k, ldc=m):
    return (cublasLt.matrix_layout_create(R_32F, m, k, lda), cublasLt.matrix_layout_create(R_32F, k, n, ldb),
            cublasLt.matrix_layout_create(R_32F, m, n, ldc))


def status_of(call, *args):
    try:
        call(*args)
        return "ok"
    except Exception as e:  # nvmath raises on a status that is not success
        return type(e).__name__


def clean():
    a, b, c = to_device(A), to_device(B), to_device(np.zeros((m, n)))
    cublas.sgemm(handle, OP_N, OP_N, m, n, k, alpha, a, m, b, k, beta, c, m)
    print("sgemm", from_device(c, m, n).tolist())
    cublas.gemm_ex(handle, OP_N, OP_N, m, n, k, alpha, a, R_32F, m, b, R_32F, k, beta, c, R_32F, m, COMPUTE_32F, GEMM_DEFAULT)
    print("gemm_ex", from_device(c, m, n).tolist())
    la, lb, lc = layouts()
    d = to_device(np.zeros((m, n)))
    cublasLt.matmul(lt, desc, alpha, a, la, b, lb, beta, c, lc, d, lc, 0, 0, 0, 0)
    print("cublasLt matmul", from_device(d, m, n).tolist())
    print("advanced matmul", nvmath.linalg.advanced.matmul(A, B).tolist())
    print("advanced matmul with c", nvmath.linalg.advanced.matmul(A, B, c=np.ones((m, n), dtype=np.float32), beta=2.0).tolist())


def faults():
    a, b, c = to_device(A), to_device(B), to_device(np.zeros((m, n)))
    poisoned = A.copy()
    poisoned[2, 1] = np.nan
    nan_a = to_device(poisoned)
    s = status_of(cublas.gemm_ex, handle, OP_N, OP_N, m, n, k, alpha, nan_a, R_32F, m, b, R_32F, k, beta, c, R_32F, m, COMPUTE_32F, GEMM_DEFAULT)  # FAULT nan_gemm_ex
    print("nan_gemm_ex", s)
    poisoned = B.copy()
    poisoned[1, 0] = np.inf
    nan_b = to_device(poisoned)
    la, lb, lc = layouts()
    s = status_of(cublasLt.matmul, lt, desc, alpha, a, la, nan_b, lb, beta, c, lc, c, lc, 0, 0, 0, 0)  # FAULT nan_lt
    print("nan_lt", s)
    s = status_of(cublas.sgemm, handle, OP_N, OP_N, m, n, k, alpha, a, m, b, 8, beta, c, m)  # FAULT bad_ldb
    print("bad_ldb", s)
    freed = to_device(B)
    check(driver.cuMemFree(freed))
    s = status_of(cublas.sgemm, handle, OP_N, OP_N, m, n, k, alpha, a, m, freed, k, beta, c, m)  # FAULT freed
    print("freed", s)
    host = np.asfortranarray(A)
    s = status_of(cublas.sgemm, handle, OP_N, OP_N, m, n, k, alpha, host.ctypes.data, m, b, k, beta, c, m)  # FAULT host
    print("host", s)
    la, lb, lc = layouts(lda=2)
    s = status_of(cublasLt.matmul, lt, desc, alpha, a, la, b, lb, beta, c, lc, c, lc, 0, 0, 0, 0)  # FAULT lt_ld
    print("lt_ld", s)


{"clean": clean, "faults": faults}[sys.argv[1]]()
sys.stdout.flush()
