#!/bin/sh
# run_cuda_test.sh CHECK_BIN COMMAND [ARGS...]
# Skips (exit 77, "SKIPPED: no CUDA device") when `CHECK_BIN --probe` finds
# no usable GPU; otherwise runs COMMAND (bounded, so a hang fails the test
# instead of the CTest timeout killing it without output).
set -u
check="$1"
shift
"$check" --probe || exit $?
exec timeout -k 5 110 "$@"
