#!/usr/bin/env bash
# Builds hvdrun and runs the bundled example job: two ranks on this machine
# that rendezvous through hvdrun and run allreduce/allgather/broadcast.
# Does all set-up on a fresh Debian bookworm machine (scripts/setup.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${HVD_BUILD_DIR:-$ROOT/build}"
bash "$ROOT/scripts/setup.sh"
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target hvdrun hello_allreduce
exec "$BUILD/apps/hvdrun/hvdrun" -np 2 -H localhost:2 "$BUILD/apps/examples/hello_allreduce" "$@"
