#!/usr/bin/env bash
# Builds the Python wheel (pip + maturin), checks it with auditwheel, installs it into fresh
# environments in every layout pip has (virtual environment, --user, --prefix, --target) with no
# Rust on the PATH, and runs what a Python user runs: `cublasguard demo`, `cublasguard doctor`,
# `python -m cublasguard run -- PROGRAM`, `python -m cublasguard SCRIPT`; then the PyTorch tests
# once with the library the wheel installed. .ci/run calls it; a few minutes with warm caches.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/cublasguard-wheel.XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "wheel-check: FAIL: $*" >&2; exit 1; }
say() { echo "wheel-check: $*" >&2; }

# Build tools in their own environment: auditwheel (pinned) to check the wheel.
python3 -m venv "$work/tools"
"$work/tools/bin/pip" install --quiet --disable-pip-version-check auditwheel==6.8.2

# From a fresh clone of the commit, as a new user builds it: a tree that has run cargo already
# hides what only the build makes (a fresh clone has no target/ at all). Uncommitted changes are
# not in it: commit first.
say "cloning $(git rev-parse --short HEAD) into a fresh folder"
git clone --quiet --no-local "$root" "$work/src"
git -C "$work/src" checkout --quiet --detach "$(git rev-parse HEAD)"
[ ! -e "$work/src/target" ] || fail "the fresh clone has a target/ folder"
if ! git diff --quiet HEAD 2>/dev/null; then
    say "note: uncommitted changes are not in the wheel (it is built from HEAD)"
fi
say "building the wheel (pip wheel . in the fresh clone, maturin from PyPI)"
(cd "$work/src" && MATURIN_PEP517_ARGS="--compatibility manylinux_2_34" \
    "$work/tools/bin/pip" wheel --quiet --disable-pip-version-check --no-deps -w "$work/dist" .)
wheel=$(ls "$work"/dist/cublasguard-*.whl)
case "$wheel" in *manylinux_2_34_x86_64.whl) ;; *) fail "not tagged manylinux_2_34_x86_64: $wheel" ;; esac
"$work/tools/bin/auditwheel" show "$wheel" > "$work/audit.txt" 2>&1 || { cat "$work/audit.txt"; fail "auditwheel show"; }
grep -q 'consistent with the following platform tag: "manylinux_2_34_x86_64"' <(tr '\n' ' ' < "$work/audit.txt" | tr -s ' ') \
    || { cat "$work/audit.txt"; fail "auditwheel does not find it manylinux_2_34"; }
say "$(basename "$wheel"): auditwheel agrees it is manylinux_2_34_x86_64"

# No Rust, no build tree: only the system's tools and the environment's own bin.
norust() { env -i HOME="$work/home" PATH="$1:/usr/bin:/bin" TMPDIR="$work" LANG=C.UTF-8 "${@:2}"; }
mkdir -p "$work/home"

say "virtual environment"
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install --quiet --disable-pip-version-check "$wheel"
v=$work/venv/bin
norust "$v" cublasguard --version | grep -q "^cublasguard 0\." || fail "cublasguard --version"
norust "$v" cublasguard demo > "$work/demo.txt" 2>&1 || true
grep -q "nonfinite_input" "$work/demo.txt" || { cat "$work/demo.txt"; fail "the demo did not report its NaN"; }
norust "$v" cublasguard doctor > "$work/doctor.txt" 2>&1 || true
grep -q "libcublasguard.so at $work/venv/share/cublasguard/lib/libcublasguard.so" "$work/doctor.txt" \
    || { cat "$work/doctor.txt"; fail "doctor does not show the installed library"; }

# A stand-in test program, run through `python -m cublasguard run --`.
standin=$(cd "$work/venv/share/cublasguard/stand-in" && pwd)
norust "$v" env LD_LIBRARY_PATH="$standin/lib:$standin/driver" CUBLASGUARD_QUIET=1 \
    python -m cublasguard run --trace "$work/run-%p.json" -- "$standin/bin/mlp" --inject nan --epochs 1 > "$work/run.txt" 2>&1 || true
ls "$work"/run-*.json > /dev/null 2>&1 || { cat "$work/run.txt"; fail "python -m cublasguard run wrote no trace"; }
grep -q '"kind": *"nonfinite_input"' "$work"/run-*.json || fail "python -m cublasguard run: no nonfinite_input in the trace"
grep -q '"guard": *{ *"version": *"0\.' <(tr -d '\n' < "$(ls "$work"/run-*.json | head -1)") || fail "the trace does not record the guard's version"

# A script, `python -m cublasguard SCRIPT ARGS`, with the same interpreter.
cat > "$work/script.py" <<'PY'
import os, sys
print("preloaded" if "libcublasguard.so" in os.environ.get("LD_PRELOAD", "") else "not preloaded", sys.argv[1:])
PY
norust "$v" python -m cublasguard "$work/script.py" a b > "$work/script.txt" 2>&1 || { cat "$work/script.txt"; fail "python -m cublasguard SCRIPT"; }
grep -q "^preloaded \['a', 'b'\]" "$work/script.txt" || { cat "$work/script.txt"; fail "the script did not run under the guard"; }

# The other layouts: the command and its library are found from the Python package.
check_layout() { # name python extra-env...
    local name=$1 py=$2; shift 2
    env -i HOME="$work/home" PATH=/usr/bin:/bin "$@" "$py" -c \
        'import cublasguard, os; l = cublasguard.find_library(); c = cublasguard.find_command(); assert os.path.isfile(l) and os.access(c, os.X_OK); print(c, l)' \
        > "$work/layout-$name.txt" 2>&1 || { cat "$work/layout-$name.txt"; fail "$name: the package does not find the command and library"; }
    env -i HOME="$work/home" PATH=/usr/bin:/bin "$@" "$py" -m cublasguard --version | grep -q "^cublasguard 0\." || fail "$name: python -m cublasguard --version"
    say "$name: $(cat "$work/layout-$name.txt")"
}
python3 -m venv --without-pip "$work/bare"
py=$work/bare/bin/python3
"$work/tools/bin/pip" install --quiet --disable-pip-version-check --no-deps --target "$work/target" "$wheel"
check_layout target "$py" PYTHONPATH="$work/target"
"$work/tools/bin/pip" install --quiet --disable-pip-version-check --no-deps --prefix "$work/prefix" "$wheel"
site=$(cd "$work/prefix" && ls -d lib/python3*/site-packages)
check_layout prefix "$py" PYTHONPATH="$work/prefix/$site"
# --user: the user scheme of the system's python3 (a virtual environment has none), in a
# scratch user base.
PYTHONUSERBASE="$work/userbase" python3 -m pip install --quiet --disable-pip-version-check --no-deps --user \
    --break-system-packages "$wheel"
check_layout user "$(command -v python3)" PYTHONUSERBASE="$work/userbase"

# PyTorch, with the guard the wheel installed: its tests, and a real script through python -m.
cache=${CUBLASGUARD_CACHE:-$HOME/.cache/cublasguard}
if [ -x "$cache/torch-venv/bin/python" ]; then
    say "PyTorch tests with $work/venv/share/cublasguard/lib/libcublasguard.so"
    CUBLASGUARD_TEST_LIB="$work/venv/share/cublasguard/lib/libcublasguard.so" cargo test --release --locked --test suite --quiet -- pytorch::
    env -i HOME="$work/home" PATH=/usr/bin:/bin PYTHONPATH="$work/target" CUBLASGUARD_QUIET=1 \
        "$cache/torch-venv/bin/python" -m cublasguard examples/train.py --steps 2 > "$work/train.txt" 2>&1 \
        || { cat "$work/train.txt"; fail "python -m cublasguard examples/train.py"; }
    grep -q "^done" "$work/train.txt" || { cat "$work/train.txt"; fail "train.py did not finish under the guard"; }
fi
say "PASS"
