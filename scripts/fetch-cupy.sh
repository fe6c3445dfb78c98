#!/usr/bin/env bash
# Creates a virtual environment with CuPy 12.3 (cupy-cuda12x, the CUDA 12 wheel) and the NumPy 1
# it needs, from PyPI, pinned, in the cache folder, for tests/suite/cupy.rs (about 270 MB
# installed). No NVIDIA library comes with it: CuPy 12 links libcudart.so.12, libcublas.so.12,
# libcuda.so.1 (and cuFFT, cuRAND, cuSPARSE, NVRTC, cuSOLVER) by soname, and the tests put the
# stand-in's on its library path. .ci/run calls it; with a warm pip cache it takes about 25 s.
set -euo pipefail
# Tells the build that the tests needing this may run (build.rs: without the marker they are
# reported as ignored, not passed).
mark_ready() {
    local dir
    dir=$(cd "$(dirname "$0")/.." && pwd)/target/test-env
    mkdir -p "$dir" && touch "$dir/cupy"
}
cache=${CUBLASGUARD_CACHE:-$HOME/.cache/cublasguard}
venv=$cache/cupy-venv
if [ -f "$venv/.complete" ]; then
    mark_ready
    exit 0
fi
rm -rf "$venv"
mkdir -p "$cache"
echo "fetch-cupy: installing cupy-cuda12x==12.3.0 into $venv" >&2
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check cupy-cuda12x==12.3.0 \
    numpy==1.26.4 fastrlock==0.8.4
touch "$venv/.complete"
mark_ready
