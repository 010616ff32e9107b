#!/usr/bin/env bash
# Builds hvdrun and runs the whole test suite. Does all set-up on a fresh
# Debian bookworm machine (installs packages through scripts/setup.sh).
#   scripts/test.sh                 # everything
#   scripts/test.sh -L unit         # extra arguments go to ctest
# Tests run two at a time (HVD_TEST_JOBS overrides): most integration tests
# wait on processes and sockets rather than compute; the CPU-bound
# sanitize.unit (a second build) runs alone (RUN_SERIAL).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${HVD_BUILD_DIR:-$ROOT/build}"
bash "$ROOT/scripts/setup.sh"
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
cd "$BUILD"
ctest --output-on-failure --timeout 600 -j"${HVD_TEST_JOBS:-2}" "$@"
