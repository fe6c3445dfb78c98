"""Origin mode from Python (ctypes, on the stand-in): a GEMM reads A (finite), then a "kernel"
registered as nvcc's code registers it (the stand-in runs it as a host function, here a Python
callback) writes NaN into A, and a second GEMM consumes it. Then the same with Triton's path: a
kernel from cuModuleLoadData + cuModuleGetFunction, launched with cuLaunchKernelEx, all found by
dlsym on libcuda.so.1 opened by ctypes. Under CUBLASGUARD_NAN_ORIGIN=1 the guard records each
launch as an origin, with the lines marked below."""
import ctypes
import math

ctypes.CDLL("libcudart.so.12", mode=ctypes.RTLD_GLOBAL)
ctypes.CDLL("libcublas.so.12", mode=ctypes.RTLD_GLOBAL)
lib = ctypes.CDLL(None)  # the global scope, where the preloaded guard comes first


class Dim3(ctypes.Structure):
    _fields_ = [("x", ctypes.c_uint), ("y", ctypes.c_uint), ("z", ctypes.c_uint)]


KERNEL = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p))


@KERNEL
def fill_nan(args):
    data = ctypes.cast(ctypes.cast(args[0], ctypes.POINTER(ctypes.c_void_p))[0], ctypes.POINTER(ctypes.c_float))
    n = ctypes.cast(args[1], ctypes.POINTER(ctypes.c_int))[0]
    for i in range(n):
        data[i] = math.nan


stub = ctypes.cast(fill_nan, ctypes.c_void_p)
lib.__cudaRegisterFunction(None, stub, b"_Z8fill_nanPfi", b"_Z8fill_nanPfi", -1, None, None, None, None, None)
lib.cudaLaunchKernel.argtypes = [ctypes.c_void_p, Dim3, Dim3, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]

buffers = []
for _ in range(3):
    p = ctypes.c_void_p()
    lib.cudaMalloc(ctypes.byref(p), 16)
    ones = (ctypes.c_float * 4)(1, 1, 1, 1)
    lib.cudaMemcpy(p, ones, 16, 1)
    buffers.append(p)
a, b, c = buffers
handle = ctypes.c_void_p()
lib.cublasCreate_v2(ctypes.byref(handle))
one, zero = ctypes.c_float(1), ctypes.c_float(0)


def gemm():
    return lib.cublasSgemm_v2(handle, 0, 0, 2, 2, 2, ctypes.byref(one), a, 2, b, 2, ctypes.byref(zero), c, 2)


def normalise():
    n = ctypes.c_int(4)
    args = (ctypes.c_void_p * 2)(ctypes.cast(ctypes.byref(a), ctypes.c_void_p), ctypes.cast(ctypes.byref(n), ctypes.c_void_p))
    return lib.cudaLaunchKernel(stub, Dim3(1, 1, 1), Dim3(32, 1, 1), args, 0, None)  # FRAME origin


print("sgemm", gemm())
print("launch", normalise())
print("sgemm", gemm())

# Triton's path, into a fresh buffer D that a GEMM has read first.
cuda = ctypes.CDLL("libcuda.so.1")
d = ctypes.c_void_p()
lib.cudaMalloc(ctypes.byref(d), 16)
lib.cudaMemcpy(d, (ctypes.c_float * 4)(1, 1, 1, 1), 16, 1)
module, fill = ctypes.c_void_p(), ctypes.c_void_p()
print("load", cuda.cuModuleLoadData(ctypes.byref(module), b"// cudashim test kernels\n.entry fill(\n"))
print("get", cuda.cuModuleGetFunction(ctypes.byref(fill), module, b"fill"))


class LaunchConfig(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint) for n in ("gx", "gy", "gz", "bx", "by", "bz", "shared")] + [
        ("stream", ctypes.c_void_p),
        ("attrs", ctypes.c_void_p),
        ("attr_count", ctypes.c_uint),
    ]


def triton_kernel():
    value, n = ctypes.c_float(math.nan), ctypes.c_int(4)
    params = (ctypes.c_void_p * 3)(*(ctypes.cast(ctypes.byref(x), ctypes.c_void_p) for x in (d, value, n)))
    config = LaunchConfig(1, 1, 1, 32, 1, 1, 0, None, None, 0)
    return cuda.cuLaunchKernelEx(ctypes.byref(config), fill, params, None)  # FRAME triton


def gemm_d():
    return lib.cublasSgemm_v2(handle, 0, 0, 2, 2, 2, ctypes.byref(one), d, 2, b, 2, ctypes.byref(zero), c, 2)


print("sgemm", gemm_d())
print("launch", triton_kernel())
print("sgemm", gemm_d())
