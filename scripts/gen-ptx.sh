#!/usr/bin/env bash
# Compiles the on-device scan's one source (crates/preload/src/kernels/nonfinite.cu) to the PTX the library
# ships (crates/preload/src/ptx/nonfinite.ptx) with NVRTC from PyPI (nvidia-cuda-nvrtc-cu12, pinned, installed
# by scripts/fetch-nvidia.sh into the cache folder). NVRTC needs no GPU.
#   scripts/gen-ptx.sh          regenerate crates/preload/src/ptx/nonfinite.ptx
#   scripts/gen-ptx.sh --check  fail if the checked-in PTX is not exactly what NVRTC makes (CI)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${CUBLASGUARD_CACHE:-$HOME/.cache/cublasguard}
lib=$cache/nvidia-nvrtc-cu12/nvidia/cuda_nvrtc/lib/libnvrtc.so.12
if [ ! -f "$lib" ]; then
    echo "gen-ptx: $lib is missing: run scripts/fetch-nvidia.sh" >&2
    exit 2
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# compute_70: the oldest architecture the guard supports (Volta); the driver JIT-compiles the
# PTX for newer ones. -lineinfo is left out: the PTX must not depend on the checkout's path.
python3 - "$lib" "$root/crates/preload/src/kernels/nonfinite.cu" "$out" <<'PY'
import ctypes, sys
lib, source, out = sys.argv[1:]
nvrtc = ctypes.CDLL(lib)
prog = ctypes.c_void_p()
text = open(source, "rb").read()
def check(status, what):
    if status != 0:
        nvrtc.nvrtcGetErrorString.restype = ctypes.c_char_p
        sys.exit(f"gen-ptx: {what}: {nvrtc.nvrtcGetErrorString(status).decode()}")
check(nvrtc.nvrtcCreateProgram(ctypes.byref(prog), text, b"nonfinite.cu", 0, None, None), "nvrtcCreateProgram")
options = [b"--gpu-architecture=compute_70", b"--std=c++14", b"--disable-warnings"]
status = nvrtc.nvrtcCompileProgram(prog, len(options), (ctypes.c_char_p * len(options))(*options))
size = ctypes.c_size_t()
nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
log = ctypes.create_string_buffer(size.value)
nvrtc.nvrtcGetProgramLog(prog, log)
if status != 0:
    sys.stderr.write(log.value.decode())
check(status, "nvrtcCompileProgram")
check(nvrtc.nvrtcGetPTXSize(prog, ctypes.byref(size)), "nvrtcGetPTXSize")
ptx = ctypes.create_string_buffer(size.value)
check(nvrtc.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
open(out, "wb").write(ptx.value)
PY
target=$root/crates/preload/src/ptx/nonfinite.ptx
if [ "${1:-}" = "--check" ]; then
    if ! cmp -s "$out" "$target"; then
        echo "gen-ptx: crates/preload/src/ptx/nonfinite.ptx is not what NVRTC makes from crates/preload/src/kernels/nonfinite.cu:" >&2
        diff "$target" "$out" | head -20 >&2 || true
        echo "gen-ptx: run scripts/gen-ptx.sh and commit the result" >&2
        exit 1
    fi
    echo "gen-ptx: crates/preload/src/ptx/nonfinite.ptx matches its source"
else
    cp "$out" "$target"
    echo "gen-ptx: wrote $target"
fi
