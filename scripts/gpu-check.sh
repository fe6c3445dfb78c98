#!/usr/bin/env bash
# The checks that need a real NVIDIA GPU. Run from the repository on a GPU machine:
#     bash scripts/gpu-check.sh
# It builds the library, runs examples/train.py with each injected fault under the guard and
# checks each trace for the expected fault and call, times the clean run with and without the
# guard, and runs the C workloads (examples/mlp.c, every GEMM variant, cublasLt as nn.Linear)
# against NVIDIA's real libraries. Budget: under 8 minutes. The last thing it prints is a
# table; record it (date, GPU, driver, figures) in GPU-CHECKS.md.
#
# PyTorch: $PYTHON if set, else a python3 with a CUDA PyTorch, else the cached environment of
# scripts/fetch-torch.sh. Without cargo it uses target/release as brought along (see
# GPU-CHECKS.md). GPU_CHECK_LIMIT: seconds any one workload may run (120).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
root=$PWD
out=$(mktemp -d "${TMPDIR:-/tmp}/cublasguard-gpu-check.XXXXXX")
rows=()
failed=0
row() { # check, PASS/FAIL/INFO, detail
    rows+=("$(printf '%-34s %-5s %s' "$1" "$2" "$3")")
    [ "$2" = FAIL ] && failed=1
    return 0
}
say() { echo "gpu-check: $*" >&2; }

gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
if [ -z "$gpu" ]; then
    say "nvidia-smi finds no GPU; this script needs one"
    exit 2
fi
say "GPU: $gpu"

lib=$root/target/release/libcublasguard.so
cli=$root/target/release/cublasguard
# A GPU machine without a Rust toolchain (or network) runs a build brought from elsewhere:
# target/release/{libcublasguard.so,cublasguard,stand-in}.
if command -v cargo >/dev/null; then
    say "building"
    if ! cargo build --release --locked >"$out/build.log" 2>&1; then
        tail -20 "$out/build.log" >&2
        exit 2
    fi
elif [ ! -f "$lib" ] || [ ! -x "$cli" ] || [ ! -d "$root/target/release/stand-in/include" ]; then
    say "no cargo here, and no build brought along in target/release"
    exit 2
fi

# PyTorch: $PYTHON, else a python3 that imports a CUDA PyTorch, else the cached environment.
python=${PYTHON:-}
if [ -z "$python" ] && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    python=python3
fi
if [ -z "$python" ]; then
    bash scripts/fetch-torch.sh >&2 || { say "cannot set up PyTorch"; exit 2; }
    python=${CUBLASGUARD_CACHE:-$HOME/.cache/cublasguard}/torch-venv/bin/python
fi
"$python" -c 'import torch; assert torch.cuda.is_available(), "torch sees no GPU"' || exit 2
say "python: $("$python" -c 'import sys, torch; print(sys.executable, torch.__version__)')"
# NVIDIA's CUDA 13 libraries of that PyTorch, wherever its nvidia packages put them.
cuda_lib=$("$python" - <<'PY'
import glob, os, nvidia
dirs = []
for name in ("libcublas.so.13", "libcublasLt.so.13", "libcudart.so.13"):
    for root in nvidia.__path__:
        hits = glob.glob(os.path.join(root, "**", name), recursive=True)
        if hits and os.path.dirname(hits[0]) not in dirs:
            dirs.append(os.path.dirname(hits[0]))
            break
print(":".join(dirs))
PY
)
say "CUDA 13 libraries: $cuda_lib"
cuda_lib_flags=()
IFS=: read -ra cuda_dirs <<<"$cuda_lib"
for d in "${cuda_dirs[@]}"; do cuda_lib_flags+=("-L$d"); done
# No workload may take the whole session: each run is cut off after this many seconds.
limit=${GPU_CHECK_LIMIT:-120}

if "$cli" doctor >"$out/doctor.txt" 2>&1; then
    row "doctor" PASS "$(grep -m1 'driver ' "$out/doctor.txt" | cut -c1-80)"
else
    row "doctor" FAIL "see $out/doctor.txt"
fi

# Checks one trace (or the traces matching a glob) against an expectation, in Python.
expect() { # name, glob, python expression over `faults` (a list of dicts) and `code`
    local name=$1 pattern=$2 condition=$3 code=$4
    "$python" - "$pattern" "$code" "$condition" <<'EOF'
import glob, json, sys
pattern, code, condition = sys.argv[1], int(sys.argv[2]), sys.argv[3]
faults = [f for p in sorted(glob.glob(pattern)) for f in json.load(open(p))["faults"]]
kinds = [(f["api"], f["kind"]) for f in faults]
ok = eval(condition, {"faults": faults, "code": code, "kinds": kinds})
print(("PASS" if ok else "FAIL") + " " + (str(kinds[:3]) if kinds else "no faults") + f" exit={code}")
sys.exit(0 if ok else 1)
EOF
}

gemm_apis='("cublasLtMatmul", "cublasSgemm_v2", "cublasGemmEx")'
while IFS='|' read -r name args condition; do
    say "train.py $args"
    # shellcheck disable=SC2086
    CUBLASGUARD_TRACE="$out/train-$name-%p.json" CUBLASGUARD_QUIET=1 LD_PRELOAD=$lib \
        timeout "$limit" "$python" examples/train.py $args >"$out/train-$name.log" 2>&1
    code=$?
    result=$(expect "$name" "$out/train-$name-*.json" "$condition" "$code")
    row "train.py $args" "${result%% *}" "${result#* }"
done <<EOF
clean|--steps 5|code == 0 and not faults
nan|--inject nan|code == 0 and faults and faults[0]["kind"] == "nonfinite_input" and faults[0]["api"] in $gemm_apis
nan-bf16|--inject nan --dtype bf16|code == 0 and faults and faults[0]["kind"] == "nonfinite_input" and any(o["dtype"] == "bf16" for o in faults[0]["operands"])
overflow|--inject overflow|code == 0 and any(f["kind"] == "nonfinite_output" for f in faults)
width|--inject width|code != 0 and not any(f["api"].startswith("cublas") for f in faults)
cpu|--inject cpu|code != 0 and not any(f["api"].startswith("cublas") for f in faults)
EOF

# Overhead on the clean run: bare and guarded interleaved, medians of wall time.
say "timing the clean run"
bare=() guarded=()
for _ in 1 2 3; do
    s=$(date +%s.%N); timeout "$limit" "$python" examples/train.py --steps 200 --batch 512 --hidden 1024 >/dev/null 2>&1; e=$(date +%s.%N)
    bare+=("$(awk "BEGIN { print $e - $s }")")
    s=$(date +%s.%N); CUBLASGUARD_QUIET=1 LD_PRELOAD=$lib timeout "$limit" "$python" examples/train.py --steps 200 --batch 512 --hidden 1024 >/dev/null 2>&1; e=$(date +%s.%N)
    guarded+=("$(awk "BEGIN { print $e - $s }")")
done
median() { printf '%s\n' "$@" | sort -n | sed -n 2p; }
mb=$(median "${bare[@]}") mg=$(median "${guarded[@]}")
row "overhead, train.py 200 steps" INFO "bare ${mb}s guarded ${mg}s ratio $(awk "BEGIN { printf \"%.2f\", $mg / $mb }")"

# The C workloads against NVIDIA's libraries (those of the PyTorch environment, CUDA 13).
build_c() { # output, sources...
    local output=$1
    shift
    cc -O2 -o "$output" "$@" -I"$root/target/release/stand-in/include" -I"$root/shims" "${cuda_lib_flags[@]}" \
        -l:libcublasLt.so.13 -l:libcublas.so.13 -l:libcudart.so.13 -lm
}
build_c "$out/mlp" examples/mlp.c && build_c "$out/gemm_family" tests/c/gemm_family.c && build_c "$out/lt_linear" tests/c/lt_linear.c || {
    row "C workloads" FAIL "could not build against $cuda_lib"
}
run_c() { # name, expectation, program args...
    local name=$1 condition=$2
    local file=${name// /-}
    shift 2
    LD_LIBRARY_PATH=$cuda_lib timeout "$limit" "$@" >"$out/$file.bare" 2>&1
    LD_LIBRARY_PATH=$cuda_lib CUBLASGUARD_TRACE="$out/$file-%p.json" CUBLASGUARD_QUIET=1 LD_PRELOAD=$lib timeout "$limit" "$@" >"$out/$file.guarded" 2>&1
    code=$?
    result=$(expect "$name" "$out/$file-*.json" "$condition" "$code")
    if [ "${result%% *}" = PASS ] && [ "$condition" = "not faults" ] && ! cmp -s "$out/$file.bare" "$out/$file.guarded"; then
        result="FAIL output differs from the unguarded run"
    fi
    row "$name" "${result%% *}" "${result#* }"
}
if [ -x "$out/mlp" ]; then
    run_c "mlp clean" "not faults" "$out/mlp"
    run_c "mlp nan" 'faults[0]["kind"] == "nonfinite_input" and faults[0]["args"]["transa"] == "T"' "$out/mlp" --inject nan
    run_c "mlp width" 'faults[0]["kind"] == "out_of_bounds"' "$out/mlp" --inject width
    for f in cublasSgemm_v2 cublasHgemm cublasSgemmStridedBatched cublasSgemmBatched cublasGemmEx cublasGemmStridedBatchedEx cublasGemmBatchedEx; do
        run_c "$f clean" "not faults" "$out/gemm_family" "$f" clean
        run_c "$f nan" 'faults[0]["kind"] == "nonfinite_input"' "$out/gemm_family" "$f" nan
    done
    run_c "cublasLt linear clean" "not faults" "$out/lt_linear" clean
    run_c "cublasLt linear nan" 'faults[0]["kind"] == "nonfinite_input" and faults[0]["args"]["epilogue"] == "CUBLASLT_EPILOGUE_BIAS"' "$out/lt_linear" nan_input bf16
    run_c "cublasLt linear width" 'faults[0]["kind"] == "invalid_argument"' "$out/lt_linear" width
fi

# The on-device scan: known answers and bandwidth, then the same fault found either way.
say "on-device scan"
if cc -O2 -o "$out/device_scan_check" tests/c/device_scan_check.c -I"$root/target/release/stand-in/include" \
    "${cuda_lib_flags[@]}" -l:libcudart.so.13 -ldl; then
    LD_LIBRARY_PATH=$cuda_lib CUBLASGUARD_DEVICE_SCAN=on CUBLASGUARD_QUIET=1 LD_PRELOAD=$lib \
        timeout "$limit" "$out/device_scan_check" >"$out/device_scan.log" 2>&1
    code=$?
    passes=$(grep -c '^PASS' "$out/device_scan.log")
    fails=$(grep -c '^FAIL' "$out/device_scan.log")
    if [ "$code" -eq 0 ] && [ "$fails" -eq 0 ]; then
        row "device scan vs planted NaN/Inf" PASS "$passes cases"
    else
        row "device scan vs planted NaN/Inf" FAIL "$fails of $((passes + fails)) wrong, exit $code (see $out/device_scan.log)"
    fi
    while read -r line; do
        row "device scan bandwidth" INFO "${line#bandwidth } (target: ratio >= 0.70)"
    done < <(grep '^bandwidth' "$out/device_scan.log")
    CUBLASGUARD_TRACE="$out/train-device-%p.json" CUBLASGUARD_DEVICE_SCAN=on CUBLASGUARD_QUIET=1 LD_PRELOAD=$lib \
        timeout "$limit" "$python" examples/train.py --inject nan >"$out/train-device.log" 2>&1
    code=$?
    result=$(expect device "$out/train-device-*.json" 'faults and faults[0]["kind"] == "nonfinite_input"' "$code")
    row "train.py nan, device scan" "${result%% *}" "${result#* }"
else
    row "device scan" FAIL "could not build tests/c/device_scan_check.c"
fi

echo
echo "cublasguard GPU check, $(date -u +%Y-%m-%dT%H:%MZ), $gpu, $(git rev-parse --short HEAD 2>/dev/null)"
printf '%-34s %-5s %s\n' "check" "" "result"
printf '%s\n' "${rows[@]}"
echo "(logs and traces in $out)"
exit $failed
