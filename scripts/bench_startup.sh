#!/usr/bin/env bash
# Time from launch to job end for a trivial 2-rank job: hvdrun vs mpirun.
#   scripts/bench_startup.sh [RUNS]   (default 30)
# Prints a table of min / median / p90 wall-clock milliseconds.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
HVDRUN="${HVDRUN:-$ROOT/build/apps/hvdrun/hvdrun}"
RUNS="${1:-30}"

measure() {  # name, command...
  local name="$1"; shift
  local times=()
  for _ in $(seq "$RUNS"); do
    local t0 t1
    t0=$(date +%s%N)
    "$@" >/dev/null 2>&1
    t1=$(date +%s%N)
    times+=($(( (t1 - t0) / 1000 )))
  done
  printf '%s\n' "${times[@]}" | sort -n | awk -v name="$name" '
    { v[NR] = $1 }
    END { printf "| %-44s | %8.1f | %8.1f | %8.1f |\n", name, v[1]/1000, v[int((NR+1)/2)]/1000, v[int(NR*0.9)]/1000 }'
}

echo "runs per command: $RUNS, $(nproc) cores, load average $(cut -d' ' -f1 /proc/loadavg)"
echo "| command | min ms | median ms | p90 ms |"
echo "|---|---:|---:|---:|"
measure "hvdrun -np 2 -H localhost:2 true" "$HVDRUN" -np 2 -H localhost:2 true
if command -v mpirun >/dev/null; then
  root_flag=(); [ "$(id -u)" = 0 ] && root_flag=(--allow-run-as-root)
  measure "mpirun -np 2 true" mpirun "${root_flag[@]}" --oversubscribe -np 2 true
fi
if command -v horovodrun >/dev/null; then
  measure "horovodrun -np 2 -H localhost:2 true" horovodrun -np 2 -H localhost:2 true
fi
