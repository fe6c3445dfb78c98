#!/usr/bin/env bash
# Builds what scripts/gpu-check.sh needs on a lent GPU machine (no Rust, no network) into one
# ignored folder, gpu-pack/, to carry there with the repository:
#   gpu-pack/libcublasguard.so, gpu-pack/cublasguard   the library and the command (x86-64)
#   gpu-pack/stand-in/{include,lib,driver,nvml}        the CUDA headers the C workloads build
#                                                      against, and the stand-in stack that
#                                                      gpu-check.sh --dry-run runs on
# The C workloads are built there, by gpu-check.sh, against that machine's CUDA 13 libraries.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cargo build --release --locked
pack=$root/gpu-pack
rm -rf "$pack"
mkdir -p "$pack/stand-in"
cp target/release/libcublasguard.so target/release/cublasguard "$pack/"
standin=target/release/stand-in # build.rs copies the stand-in stack there
for dir in include lib driver nvml; do
    cp -a "$standin/$dir" "$pack/stand-in/"
done
git rev-parse --short=12 HEAD >"$pack/COMMIT" 2>/dev/null || echo unknown >"$pack/COMMIT"
echo "gpu-pack: $(du -sh "$pack" | cut -f1) in $pack (commit $(cat "$pack/COMMIT")); carry it with the repository"
