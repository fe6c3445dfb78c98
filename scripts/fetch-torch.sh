#!/usr/bin/env bash
# Creates a virtual environment with PyTorch 2.15.0's CUDA 13.2 wheel from PyPI (with its
# NVIDIA packages, about 5 GB installed) in the cache folder, for tests/suite/pytorch.rs. It
# installs without a GPU. .ci/run calls it; with a warm pip cache it takes about a minute.
# It also brings NVIDIA's cuDNN 9.26 (nvidia-cudnn-cu13 9.26.0.51, which torch 2.15.0 pins), in
# site-packages/nvidia/cudnn/{include,lib}: tests/suite/cudnn.rs runs against that copy, so no
# second cuDNN is downloaded and its version moves only with torch's pin.
set -euo pipefail
# Tells the build that the tests needing this may run (build.rs: without the marker they are
# reported as ignored, not passed).
mark_ready() {
    local dir
    dir=$(cd "$(dirname "$0")/.." && pwd)/target/test-env
    mkdir -p "$dir" && touch "$dir/torch"
}
cache=${CUBLASGUARD_CACHE:-$HOME/.cache/cublasguard}
venv=$cache/torch-venv
if [ -f "$venv/.complete" ]; then
    mark_ready
    exit 0
fi
rm -rf "$venv"
mkdir -p "$cache"
echo "fetch-torch: installing torch==2.15.0 into $venv" >&2
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check torch==2.15.0
touch "$venv/.complete"
mark_ready
