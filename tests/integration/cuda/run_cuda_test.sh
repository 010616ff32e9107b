#!/bin/sh
# run_cuda_test.sh CHECK_BIN COMMAND [ARGS...]
# Skips (exit 77, "SKIPPED: no CUDA device") when `CHECK_BIN --probe` finds
# no usable GPU; otherwise runs COMMAND (bounded, so a hang fails the test
# instead of the CTest timeout killing it without output). With
# HVD_CUDA_TEST_EXPECT set, the output must also contain that text (e.g. the
# log line saying which device path the job took).
set -u
check="$1"
shift
"$check" --probe || exit $?
if [ -z "${HVD_CUDA_TEST_EXPECT:-}" ]; then
  exec timeout -k 5 110 "$@"
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
timeout -k 5 110 "$@" >"$out" 2>&1
rc=$?
cat "$out"
[ "$rc" -eq 0 ] || exit "$rc"
if ! grep -qF -- "$HVD_CUDA_TEST_EXPECT" "$out"; then
  echo "run_cuda_test: the output does not say '$HVD_CUDA_TEST_EXPECT'"
  exit 1
fi
