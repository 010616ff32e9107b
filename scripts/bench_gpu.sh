#!/usr/bin/env bash
# Issue 7's GPU numbers (docs/performance.md, "GPU allreduce"); needs a CUDA
# device (exits 77 without one, like the gpu tests).
#   scripts/bench_gpu.sh            # configure with CUDA, build, gpu tests, tables
# Prints: the gpu-label test results, then hvdbench --device cuda for 2
# ranks sharing GPU 0 (the 256 MiB %d2d target, the 4 KiB latency, the
# 64 MiB speedup over the naive path) and, where there are two GPUs, for 2
# ranks on two GPUs.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${HVD_BUILD_DIR:-$ROOT/build}"
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHVD_WITH_CUDA=ON >/dev/null || exit 1
cmake --build "$BUILD" -j"$(nproc)" >/dev/null || exit 1
CHECK="$BUILD/tests/integration/cuda/cuda_check"
"$CHECK" --probe || exit $?
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true

echo "## gpu tests"
ctest --test-dir "$BUILD" -L gpu --output-on-failure
tests_rc=$?

HVDRUN="$BUILD/apps/hvdrun/hvdrun"
BENCH="$BUILD/apps/hvdbench/hvdbench"
echo "## 2 ranks sharing GPU 0, float32 sum"
CUDA_VISIBLE_DEVICES=0 "$HVDRUN" -np 2 -H localhost:2 "$BENCH" --device cuda --min-bytes 4K --max-bytes 256M \
  --step-factor 4 --iters 50 --warmup 5
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$ngpu" -ge 2 ]; then
  echo "## 2 ranks on GPUs 0 and 1, float32 sum"
  CUDA_VISIBLE_DEVICES=0,1 "$HVDRUN" -np 2 -H localhost:2 "$BENCH" --device cuda --min-bytes 4K --max-bytes 256M \
    --step-factor 4 --iters 50 --warmup 5
fi
exit "$tests_rc"
