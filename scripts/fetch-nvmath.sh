#!/usr/bin/env bash
# Creates a virtual environment with NVIDIA's nvmath-python 1.0.0 and the cuda-bindings it runs
# on, from PyPI, pinned, in the cache folder, for tests/suite/nvmath.rs (about 100 MB installed).
# No NVIDIA library comes with it: nvmath finds libcublas/libcublasLt by soname and the driver
# through cuda-bindings, and the tests point both at the stand-in. .ci/run calls it; with a
# warm pip cache it takes about 20 s.
set -euo pipefail
# Tells the build that the tests needing this may run (build.rs: without the marker they are
# reported as ignored, not passed).
mark_ready() {
    local dir
    dir=$(cd "$(dirname "$0")/.." && pwd)/target/test-env
    mkdir -p "$dir" && touch "$dir/nvmath"
}
cache=${CUBLASGUARD_CACHE:-$HOME/.cache/cublasguard}
venv=$cache/nvmath-venv
if [ -f "$venv/.complete" ]; then
    mark_ready
    exit 0
fi
rm -rf "$venv"
mkdir -p "$cache"
echo "fetch-nvmath: installing nvmath-python==1.0.0 into $venv" >&2
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check nvmath-python==1.0.0 \
    cuda-bindings==12.9.10 cuda-core==1.2.2 cuda-pathfinder==1.9.1 numpy==2.3.5
touch "$venv/.complete"
mark_ready
