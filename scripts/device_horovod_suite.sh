#!/usr/bin/env bash
# Horovod's own PyTorch tests (test/parallel/test_torch.py, unmodified) with
# the torch of the machine it runs on: on the GPU machine that is PyTorch 2.x
# on Python 3.12, which no development machine has (they have torch 1.13 on
# Python 3.11). scripts/device_check.sh runs it last when the bundle has
# horovod-tests/ (scripts/device_bundle.sh with HVD_HOROVOD_REPO set).
#
#   scripts/device_horovod_suite.sh RESULTS_FILE LOG_DIR
#
# Two runs, each bounded (HVD_SUITE_SECONDS, default 100 s):
#   cpu   -np 2 with the GPU hidden (CUDA_VISIBLE_DEVICES=): every CPU test,
#         as Horovod's Gloo CI runs the file;
#   cuda  -np 1 on GPU 0, when torch sees a GPU: the file's CUDA variants
#         (its tests place tensors on cuda:local_rank, so one GPU takes one
#         rank).
# Appends a section to RESULTS_FILE (each run's pytest summary and its
# failed tests) and writes each run's whole output to LOG_DIR. Exits 0 when
# both runs passed or were not run; the caller decides what that means.
# Needs the bundle's env.sh sourced (hvdrun, hvdcomm and the horovod
# package on PATH/PYTHONPATH); HVD_DEVICE_PYTHON names the interpreter.
set -uo pipefail
RES="$1"
LOG_DIR="$2"
HT="${HVD_BUNDLE:?source env.sh of the bundle first}/horovod-tests"
PY="${HVD_DEVICE_PYTHON:-python3}"
LIMIT="${HVD_SUITE_SECONDS:-100}"
say() { echo "$*" | tee -a "$RES"; }

[ -f "$HT/parallel/test_torch.py" ] || { say "Horovod's test_torch.py: not in the bundle (HVD_HOROVOD_REPO unset when it was built)"; exit 0; }
say "## Horovod's test_torch.py ($(cat "$HT/COMMIT" 2>/dev/null)), unmodified, with this machine's torch"
say ""
# This machine's packages first; the bundle's pure-Python ones fill gaps.
SUITE_PATH="$PYTHONPATH:$HT/pylib"
# shellcheck disable=SC2016
check='import importlib
missing = []
for m in ("numpy", "pytest", "mock", "cloudpickle", "packaging", "torch", "horovod.torch"):
    try:
        importlib.import_module(m)
    except Exception as e:
        missing.append(f"{m} ({type(e).__name__}: {e})")
print("; ".join(missing))'
missing=$(PYTHONPATH="$SUITE_PATH" "$PY" -c "$check" 2>&1)
if [ -n "$missing" ]; then
  say "not run: cannot import $missing"
  exit 0
fi
say '```'
PYTHONPATH="$SUITE_PATH" "$PY" -c "import sys, torch, pytest, numpy; print(f'python {sys.version.split()[0]}, torch {torch.__version__}, pytest {pytest.__version__}, numpy {numpy.__version__}')" 2>&1 | tee -a "$RES"
say '```'
say ""

rc=0
run() {  # run NAME NP [ENV=VALUE...]
  local name="$1" np="$2"
  shift 2
  local log="$LOG_DIR/horovod_test_torch_$name.log"
  local t0=$SECONDS
  (cd "$HT/parallel" && env PYTHONPATH="$SUITE_PATH" "$@" timeout -k 10 "$LIMIT" \
    hvdrun -np "$np" -H "localhost:$np" "$PY" -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning \
    test_torch.py) >"$log" 2>&1
  local code=$?
  # Rank 0's summary line, and the failed tests of every rank.
  local summary
  summary=$(grep -E "^\[0\]<stdout>:.*([0-9]+ (passed|failed|error))" "$log" | tail -1 | sed 's/^\[0\]<stdout>://')
  say "- $name (-np $np${*:+, $*}): exit $code in $((SECONDS - t0)) s: ${summary:-no pytest summary (see $(basename "$log"))}"
  grep -E "<stdout>:(FAILED|ERROR) " "$log" | sed 's/<stdout>:/ /' | sort -u | head -40 | sed 's/^/    /' | tee -a "$RES"
  [ "$code" -eq 0 ] || rc=1
}
run cpu 2 CUDA_VISIBLE_DEVICES=
if PYTHONPATH="$SUITE_PATH" "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  run cuda 1 CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}"
else
  say "- cuda: not run (torch sees no GPU)"
fi
say ""
exit $rc
