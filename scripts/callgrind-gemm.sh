#!/usr/bin/env bash
# Instructions the guard adds to one 2x2x2 cublasSgemm_v2 on the stand-in (BENCHMARKS.md, issue 27):
# callgrind's total of a 20,000- and a 40,000-call run of benches/c/gemm_loop.c, their
# difference per call, less the same for the bare program.
#
#   scripts/callgrind-gemm.sh [LIBRARY...]     (default: target/release/libcublasguard.so)
#
# Run `cargo build --release` first (the stand-in stack and the library). Several libraries
# (an old build copied aside, and the new one) are measured side by side, which is how
# BENCHMARKS.md compares them. Environment:
#   MODES   the CUBLASGUARD_CHECKS values to measure ("all": the variable unset, every check);
#           default "none args,bounds all"
#   REPS    runs of each size, the lowest total kept (default 3)
#   FORM    the call made: sgemm (default), gemm_ex, strided_ex, strided, lt or lt_percall
#           (benches/c/gemm_loop.c)
#   SHAPE   "m n k" (default "2 2 2"); "512 512 1" makes C 1 MiB, for the cost per MiB scanned
#   CALLS   the smaller run's calls (default 20000; the larger makes twice as many). Each run
#           adds CALLS/10 + 1 warm-up calls, so the two differ by 1.1 x CALLS calls, the
#           divisor (before 2026-12-07 the script divided by CALLS: its figures read 10% high)
#   NVML    CUBLASGUARD_NVML for the runs (default 0; see below)
#   DRIVER_THREAD  1 (the default): the program starts an idle thread first, as NVIDIA's
#           driver does at cuInit (benches/c/gemm_loop.c); 0: none, as the stand-in under
#           CUDASHIM_SYNC=1 starts none. With none, the guard's own threads (the snapshot
#           listener) cost the stand-in's ten mutex operations a GEMM ~22 instructions: glibc's
#           single-thread path, which no real CUDA process takes.
#   CUBLASGUARD_SYNC  passed on as set: unset, the guard's default (`deferred` since issue 29;
#           BENCHMARKS.md's "all checks" rows before it are `gemm`). `none` and `args,bounds`
#           synchronise in no mode, and read the same in each.
#
# Pinned so that runs compare: CUDASHIM_SYNC=1 (the stand-in GPU's worker thread would make the
# counts noisy), the host scan (CUBLASGUARD_DEVICE_SCAN=off, as the overhead bench pins it), and
# CUBLASGUARD_NVML=0: NVML's thread, once at its start, republishes the crash writer's head,
# which renders the flight recorder; where that lands in a run (an empty or a full ring) moves
# its total by ~1.7 M instructions, ~90 per call of the difference. The lowest of REPS runs
# keeps other one-off events out.
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."

standin=$PWD/target/release/stand-in
[ -d "$standin" ] || { echo "no $standin: run cargo build --release first" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "valgrind is needed" >&2; exit 2; }
libs=("$@")
[ ${#libs[@]} -gt 0 ] || libs=(target/release/libcublasguard.so)
modes=${MODES:-none args,bounds all}
reps=${REPS:-3}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cc -O2 -pthread -o "$work/gemm_loop" benches/c/gemm_loop.c -I"$standin/include" -L"$standin/lib" -lcublasLt -lcublas -lcudart

# total LIB MODE CALLS: the lowest callgrind total of `reps` runs (LIB "-": bare).
total() {
    local lib=$1 mode=$2 calls=$3 best= i n
    for i in $(seq "$reps"); do
        local env=(LD_LIBRARY_PATH="$standin/lib:$standin/driver" CUDASHIM_SYNC=1 CUBLASGUARD_QUIET=1
            CUBLASGUARD_DEVICE_SCAN=off CUBLASGUARD_NVML="${NVML:-0}" GEMM_LOOP_DRIVER_THREAD="${DRIVER_THREAD:-1}")
        if [ "$lib" != - ]; then
            env+=(LD_PRELOAD="$(realpath "$lib")")
            [ "$mode" = all ] || env+=(CUBLASGUARD_CHECKS="$mode")
        fi
        (cd "$work" && env -u CUBLASGUARD_TRACE -u CUBLASGUARD_CHECKS -u LD_PRELOAD "${env[@]}" \
            valgrind --tool=callgrind --callgrind-out-file="$work/out" ./gemm_loop ${SHAPE:-2 2 2} "$calls" "${FORM:-sgemm}" >/dev/null 2>"$work/err") ||
            { echo "the $calls-call run failed ($lib, $mode):" >&2; tail -5 "$work/err" >&2; exit 1; }
        n=$(awk '/^(summary|totals):/ {print $2; exit}' "$work/out")
        if [ -z "$best" ] || [ "$n" -lt "$best" ]; then best=$n; fi
    done
    echo "$best"
}

# per_call LIB MODE: instructions per call, from the CALLS- and 2 x CALLS-call totals (and their
# warm-up calls: CALLS/10 + 1 each, benches/c/gemm_loop.c).
calls=${CALLS:-20000}
per_call() {
    local a b apart
    a=$(total "$1" "$2" "$calls")
    b=$(total "$1" "$2" $((2 * calls)))
    apart=$((calls + (2 * calls / 10 + 1) - (calls / 10 + 1)))
    echo "scale=1; ($b - $a) / $apart" | bc
}

bare=$(per_call - bare)
echo "bare: $bare per call"
for lib in "${libs[@]}"; do
    for mode in $modes; do
        guarded=$(per_call "$lib" "$mode")
        echo "$lib $mode: $guarded per call, $(echo "$guarded - $bare" | bc) added"
    done
done
