#!/usr/bin/env bash
# Creates a virtual environment with JAX 0.7.2 and its CUDA 12 plugin from PyPI, pinned, in the
# cache folder, for tests/suite/jax.rs (about 1 GB installed). The plugin's NVIDIA libraries are not
# installed with it (they are several GB): the test puts the CUDA 12 runtime and cuBLAS that
# scripts/fetch-nvidia.sh caches on the library path, which takes the plugin as far as it goes
# without cuDNN and a GPU (it loads libcudart through dlopen, registers its kernels, gives up,
# and JAX falls back to the CPU). .ci/run calls it; with a warm pip cache it takes about 30 s.
set -euo pipefail
# Tells the build that the tests needing this may run (build.rs: without the marker they are
# reported as ignored, not passed).
mark_ready() {
    local dir
    dir=$(cd "$(dirname "$0")/.." && pwd)/target/test-env
    mkdir -p "$dir" && touch "$dir/jax"
}
cache=${CUBLASGUARD_CACHE:-$HOME/.cache/cublasguard}
venv=$cache/jax-venv
if [ -f "$venv/.complete" ]; then
    mark_ready
    exit 0
fi
rm -rf "$venv"
mkdir -p "$cache"
echo "fetch-jax: installing jax==0.7.2 with jax-cuda12-plugin into $venv" >&2
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check jax==0.7.2 jaxlib==0.7.2
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps jax-cuda12-plugin==0.7.2 jax-cuda12-pjrt==0.7.2
touch "$venv/.complete"
mark_ready
