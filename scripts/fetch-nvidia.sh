#!/usr/bin/env bash
# Installs NVIDIA's CUDA runtime and cuBLAS (with cublasLt) from PyPI, pinned, for CUDA 12 and
# CUDA 13 (and CUDA 12's ptxas), into a cache folder outside the repository (they are large: about 1.3 GB each
# unpacked). tests/suite/nvidia.rs runs against them; .ci/run calls this script first.
# The CUDA 13 versions are the ones PyTorch 2.15's wheel pins (cuda-toolkit 13.2.2).
set -euo pipefail
# Tells the build that the tests needing this may run (build.rs: without the marker they are
# reported as ignored, not passed).
mark_ready() {
    local dir
    dir=$(cd "$(dirname "$0")/.." && pwd)/target/test-env
    mkdir -p "$dir" && touch "$dir/nvidia"
}
cache=${CUBLASGUARD_CACHE:-$HOME/.cache/cublasguard}
mkdir -p "$cache"

install() {
    local dir=$cache/$1
    shift
    if [ -f "$dir/.complete" ]; then
        return
    fi
    rm -rf "$dir"
    echo "fetch-nvidia: installing $* into $dir" >&2
    python3 -m pip install --quiet --disable-pip-version-check --no-deps --target "$dir" "$@"
    touch "$dir/.complete"
}

install nvidia-cu12 nvidia-cuda-runtime-cu12==12.9.79 nvidia-cublas-cu12==12.9.3.13
install nvidia-cu13 nvidia-cuda-runtime==13.2.86 nvidia-cublas==13.4.1.3
# ptxas, to check that the on-device scan's PTX assembles (tests/suite/ptx.rs).
install nvidia-nvcc-cu12 nvidia-cuda-nvcc-cu12==12.9.86
# NVRTC, which compiles the scan kernel's one source (crates/preload/src/kernels/nonfinite.cu) to the PTX the
# library ships (scripts/gen-ptx.sh; CI checks the checked-in PTX is what it makes).
install nvidia-nvrtc-cu12 nvidia-cuda-nvrtc-cu12==12.9.86
mark_ready
