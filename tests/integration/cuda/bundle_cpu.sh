#!/usr/bin/env bash
# bundle_cpu.sh ROOT BUILD_DIR -- the device bundle's CPU side (issue 31):
# scripts/device_bundle.sh builds the bundle into a temporary folder, then,
# from a clean environment (env -i plus the bundle's env.sh; no build tree
# on any path), the bundle must:
#   * resolve every shared library of every program and library it holds;
#   * run a real 2-rank hvdrun job of its hvdbench, and a 2-rank
#     horovod.torch allreduce with this machine's /usr/bin/python3 (CPU);
#   * import its extension with Python 3.12 (the GPU machine's Python);
#   * list the gpu tests with paths that exist in the bundle and the repo;
#   * run scripts/device_check.sh to its end on this GPU-less machine: a
#     results file, and a non-zero exit because no GPU test could pass.
# Skips (77) without nvcc or a Python 3.12 with headers (what the bundle needs).
set -uo pipefail
ROOT="$1"
BUILD="$2"
fail() { echo "FAIL: $*"; exit 1; }
[ -x /usr/local/cuda/bin/nvcc ] || command -v nvcc >/dev/null || { echo "SKIPPED: no nvcc"; exit 77; }
py312=""
for c in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 "$(command -v python3.12 2>/dev/null || true)"; do
  [ -n "$c" ] && [ -x "$c" ] && [ -f "$("$c" -c "import sysconfig; print(sysconfig.get_paths()['include'])")/Python.h" ] &&
    { py312="$c"; break; }
done
[ -n "$py312" ] || { echo "SKIPPED: no Python 3.12 with development headers"; exit 77; }

tmp=$(mktemp -d /tmp/hvd-bundle-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
bundle="$tmp/bundle"
HVD_BUNDLE_DIR="$bundle" HVD_BUNDLE_BUILD_DIR="$BUILD" HVD_BUNDLE_PYTHON="$py312" \
  bash "$ROOT/scripts/device_bundle.sh" >"$tmp/bundle.log" 2>&1 || { tail -30 "$tmp/bundle.log"; fail "device_bundle.sh failed"; }
tail -1 "$tmp/bundle.log"
grep -q "MiB" "$tmp/bundle.log" || fail "device_bundle.sh did not print the bundle's size"

# A clean environment: nothing of the build tree or this shell.
clean() { env -i HOME="$tmp" PATH=/usr/bin:/bin TMPDIR=/tmp bash -c ". '$bundle/env.sh' && $1"; }

missing=$(clean 'for f in $(find "$HVD_BUNDLE" -type f \( -perm -u+x -o -name "*.so*" \)); do
  file -b "$f" | grep -q ELF || continue; ldd "$f" 2>&1 | grep "not found" | sed "s|^|$f: |"; done')
[ -z "$missing" ] || fail "libraries the bundle does not resolve: $missing"

out=$(clean 'cd / && hvdrun -np 2 -H localhost:2 hvdbench --min-bytes 4K --max-bytes 64K --iters 5 2>&1') ||
  { echo "$out"; fail "hvdrun + hvdbench from the bundle failed"; }
echo "$out" | grep -q "65536 .* ok" || { echo "$out"; fail "hvdbench's 64 KiB row is missing or not ok"; }
echo "$out" | grep -q "FAIL" && { echo "$out"; fail "hvdbench reported a failed check"; }

if /usr/bin/python3 -c "import torch" 2>/dev/null; then
  out=$(clean "cd / && hvdrun -np 2 -H localhost:2 /usr/bin/python3 -c '
import torch, horovod.torch as hvd
hvd.init()
t = hvd.allreduce(torch.full((3,), float(hvd.rank() + 1)), op=hvd.Sum)
assert t.tolist() == [3.0, 3.0, 3.0], t
print(\"bundle horovod.torch ok\", hvd.rank(), hvd.__file__)
'" 2>&1) || { echo "$out"; fail "a horovod.torch job from the bundle failed"; }
  [ "$(echo "$out" | grep -c "bundle horovod.torch ok")" -eq 2 ] || { echo "$out"; fail "not both ranks said ok"; }
  echo "$out" | grep -q "$bundle/python/horovod" || { echo "$out"; fail "horovod did not come from the bundle"; }
fi

out=$(clean "'$py312' -c 'import hvdcomm._core as c; print(c.__file__, c.cuda_built())'" 2>&1) ||
  { echo "$out"; fail "Python 3.12 cannot import the bundle's extension"; }
echo "$out" | grep -q "cpython-312.*True" || { echo "$out"; fail "the 3.12 extension is not the CUDA build: $out"; }

/usr/bin/python3 - "$bundle" "$ROOT" <<'PY' || fail "gpu_tests.json is wrong"
import json, os, sys
bundle, root = sys.argv[1:3]
tests = json.load(open(os.path.join(bundle, "gpu_tests.json")))["tests"]
assert len(tests) >= 15, f"only {len(tests)} gpu tests listed"
for t in tests:
    for a in t["command"] + list(t["env"].values()):
        for part in a.split(":"):
            p = part.replace("@BUNDLE@", bundle).replace("@ROOT@", root)
            if ("@BUNDLE@" in part or "@ROOT@" in part) and not os.path.exists(p):
                sys.exit(f"{t['name']}: {part} does not exist ({p})")
    assert t["command"][0].startswith("@ROOT@/"), t
print(f"gpu_tests.json: {len(tests)} tests, every path exists")
PY

HVD_BUNDLE_DIR="$bundle" HVD_DEVICE_TEST_BUDGET=60 timeout 300 bash "$ROOT/scripts/device_check.sh" "$tmp/results" \
  >"$tmp/check.log" 2>&1
rc=$?
[ "$rc" -ne 0 ] || { cat "$tmp/check.log"; fail "device_check.sh passed on a machine without a GPU"; }
[ "$rc" -ne 124 ] || fail "device_check.sh did not finish in 300 s"
grep -q "^| cuda.kernels | FAILED (skipped)" "$tmp/results/device_results.md" ||
  { cat "$tmp/check.log"; fail "device_results.md does not report the gpu tests as not passed"; }
echo "bundle_cpu: OK"
