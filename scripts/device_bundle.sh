#!/usr/bin/env bash
# Builds, on this machine, everything the GPU device check needs and writes it
# to one self-contained folder (default <repo>/.device, ignored by git), so the
# GPU machine -- which has CUDA and PyTorch but none of Boost, libssh2,
# spdlog, yaml-cpp or pybind11's build -- only runs it (issue 31;
# docs/cuda.md, "The device check").
#
#   scripts/device_bundle.sh             # build + bundle; prints the size
#   HVD_BUNDLE_DIR=/tmp/b scripts/device_bundle.sh
#
# The bundle: bin/ (hvdrun, hvdrun-agent, horovodrun, hvdbench, cuda_check), lib/
# (libhvd_collective.so with its CUDA part, the MPI bootstrap plug-in, and
# every shared library they need that a base system lacks, found with ldd),
# python/ (hvdcomm with its extension for this machine's /usr/bin/python3
# and for Python 3.12, the 'horovod' compatibility package), gpu_tests.json
# (the ctest 'gpu' label's tests, paths made relative to the bundle and the
# repository) and env.sh (PATH, LD_LIBRARY_PATH, PYTHONPATH). Everything is
# stripped; the script fails if the bundle reaches HVD_BUNDLE_MAX_MIB (48).
# With HVD_HOROVOD_REPO (a Horovod clone), also horovod-tests/: Horovod's
# test_torch.py and the pure-Python packages it imports
# (scripts/device_horovod_suite.sh runs it with the GPU machine's torch).
#
# Variables: HVD_BUNDLE_DIR (output), HVD_BUNDLE_BUILD_DIR (build tree,
# default <repo>/build-device), HVD_BUNDLE_PYTHON (the 3.12 interpreter
# whose headers the second extension is built against; default: the first
# python3.12 with headers under pyenv or on PATH), HVD_BUNDLE_CUDA_ARCH
# (CMAKE_CUDA_ARCHITECTURES, default 90: H100/H200).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${HVD_BUNDLE_BUILD_DIR:-$ROOT/build-device}"
OUT="${HVD_BUNDLE_DIR:-$ROOT/.device}"
ARCH="${HVD_BUNDLE_CUDA_ARCH:-90}"
MAX_MIB="${HVD_BUNDLE_MAX_MIB:-48}"

die() { echo "device_bundle: $*" >&2; exit 1; }

find_py312() {
  local c
  for c in "${HVD_BUNDLE_PYTHON:-}" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 \
           "$(command -v python3.12 2>/dev/null || true)"; do
    [ -n "$c" ] && [ -x "$c" ] || continue
    local inc
    inc=$("$c" -c "import sysconfig; print(sysconfig.get_paths()['include'])" 2>/dev/null) || continue
    [ -f "$inc/Python.h" ] && { echo "$c"; return 0; }
  done
  return 1
}
PY312=$(find_py312) || die "no Python 3.12 with development headers found (set HVD_BUNDLE_PYTHON)"
[ -x /usr/local/cuda/bin/nvcc ] || command -v nvcc >/dev/null || die "no nvcc: the bundle needs the CUDA toolkit to build"

mkdir -p "$BUILD"
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DHVD_WITH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DHVD_EXTRA_PYTHONS="$PY312" \
  -DHVD_PYTHON_INSTALL_DIR=python -DHVD_INSTALL_HOROVOD_COMPAT=ON \
  -DCMAKE_INSTALL_PREFIX="$OUT" >"$BUILD/configure.log" 2>&1 ||
  { cat "$BUILD/configure.log"; die "configure failed"; }
py_tag=$("$PY312" -c "import sysconfig; print(sysconfig.get_config_var('py_version_nodot'))")
cmake --build "$BUILD" -j"$(nproc)" --target hvdrun hvdrun_agent hvdbench hvd_collective hvd_mpi_bootstrap cuda_check \
  hvdcomm_core "hvdcomm_core_py$py_tag" hvdcomm_py hvdrun_man

rm -rf "$OUT"
cmake --install "$BUILD" --strip >/dev/null
rm -rf "$OUT/share"  # man pages and docs: not needed on the GPU machine
# The MPICH plug-in (built where libmpich-dev is installed) serves plain
# MPICH mpiexec jobs; the device check runs none, and it would bring MPICH's
# libraries along.
rm -f "$OUT"/lib/libhvd_mpi_bootstrap_mpich.so
install -m 755 -s "$BUILD/tests/integration/cuda/cuda_check" "$OUT/bin/cuda_check"

# Shared libraries a base system lacks: everything ldd resolves outside the
# C library, the C++ runtime and the CUDA driver (which must come from the
# GPU machine). libcudart is carried too (it matches the toolkit we built with).
base_re='/(ld-linux[^/]*|libc|libm|libdl|librt|libpthread|libgcc_s|libstdc\+\+|libcuda|libnvidia-[^/]*)\.so'
mapfile -t objs < <(find "$OUT/bin" "$OUT/lib" "$OUT/python" -type f \( -perm -u+x -o -name '*.so*' \))
declare -A seen=()
for o in "${objs[@]}"; do
  file -b "$o" | grep -q ELF || continue
  while read -r path; do
    [ -n "$path" ] && [ -z "${seen[$path]:-}" ] || continue
    seen[$path]=1
    echo "$path" | grep -Eq "$base_re" && continue
    case "$path" in "$OUT"/*) continue ;; esac
    cp -L "$path" "$OUT/lib/"
  done < <(LD_LIBRARY_PATH="$OUT/lib" ldd "$o" 2>/dev/null | awk '/=> \// {print $3}')
done
chmod u+w "$OUT"/lib/*.so* && strip --strip-unneeded "$OUT"/lib/*.so* 2>/dev/null || true

# The gpu-labelled tests, from ctest itself, with the build tree's paths
# made relative to the bundle (@BUNDLE@) and the repository (@ROOT@).
( cd "$BUILD" && ctest -L gpu --show-only=json-v1 ) >"$BUILD/gpu_tests.raw.json"
/usr/bin/python3 - "$BUILD" "$ROOT" "$OUT" "$(readlink -f /usr/bin/python3)" <<'PY'
import json, os, sys
build, root, out, host_python = sys.argv[1:5]
doc = json.load(open(os.path.join(build, "gpu_tests.raw.json")))
bins = {"hvdrun", "hvdrun-agent", "hvdbench", "cuda_check", "horovodrun"}
def rel(a):
    if os.path.isabs(a) and os.path.basename(a) in bins and a.startswith(build):
        return "@BUNDLE@/bin/" + os.path.basename(a)
    if a in ("/usr/bin/python3", host_python) or a.startswith(("/usr/bin/python3", "/root/.pyenv")):
        return "python3"
    if a in (build + "/python", build + "/python/compat"):  # hvdcomm and horovod: both in python/
        return "@BUNDLE@/python"
    if a.startswith(build + "/python/"):
        return "@BUNDLE@/python/" + a[len(build + "/python/"):]
    if a.startswith(root + "/"):
        return "@ROOT@/" + a[len(root) + 1:]
    if a.startswith(build):
        sys.exit(f"device_bundle: test argument {a} points into the build tree and is not bundled")
    return a
tests = []
for t in doc["tests"]:
    props = {p["name"]: p["value"] for p in t.get("properties", [])}
    env = {}
    for kv in props.get("ENVIRONMENT", []):
        k, _, v = kv.partition("=")
        if k == "PYTHONPATH":
            v = ":".join(dict.fromkeys(rel(x) for x in v.split(":")))
        env[k] = v
    tests.append({"name": t["name"], "command": [rel(a) for a in t["command"]], "env": env,
                  "timeout": props.get("TIMEOUT", 120), "skip_code": props.get("SKIP_RETURN_CODE", 77)})
json.dump({"tests": tests}, open(os.path.join(out, "gpu_tests.json"), "w"), indent=1)
print(f"device_bundle: {len(tests)} gpu tests listed in gpu_tests.json")
PY

cat >"$OUT/env.sh" <<'SH'
# Source this: the bundle's programs, libraries and Python packages first.
HVD_BUNDLE="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)"
export HVD_BUNDLE
export PATH="$HVD_BUNDLE/bin${PATH:+:$PATH}"
export LD_LIBRARY_PATH="$HVD_BUNDLE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$HVD_BUNDLE/python${PYTHONPATH:+:$PYTHONPATH}"
SH
git -C "$ROOT" describe --always --dirty >"$OUT/COMMIT" 2>/dev/null || echo unknown >"$OUT/COMMIT"

# Horovod's own PyTorch tests, for scripts/device_horovod_suite.sh to run with
# the GPU machine's torch (2.x there, 1.13 here): exported from a Horovod
# clone when HVD_HOROVOD_REPO names one (a work tree or a bare mirror), never
# part of this repository. With them, the pure-Python packages they import
# (pytest and its own, mock, cloudpickle, packaging), copied from this
# machine's /usr/lib/python3/dist-packages: the suite puts them after the
# GPU machine's own packages, so they only fill what it lacks.
if [ -n "${HVD_HOROVOD_REPO:-}" ]; then
  HT="$OUT/horovod-tests"
  mkdir -p "$HT/parallel" "$HT/utils" "$HT/pylib"
  git -C "$HVD_HOROVOD_REPO" show HEAD:test/parallel/test_torch.py >"$HT/parallel/test_torch.py" ||
    die "HVD_HOROVOD_REPO=$HVD_HOROVOD_REPO: no test/parallel/test_torch.py at HEAD"
  git -C "$HVD_HOROVOD_REPO" show HEAD:test/utils/common.py >"$HT/utils/common.py"
  git -C "$HVD_HOROVOD_REPO" describe --always --tags HEAD >"$HT/COMMIT" 2>/dev/null ||
    git -C "$HVD_HOROVOD_REPO" rev-parse --short HEAD >"$HT/COMMIT"
  for m in pytest _pytest pluggy iniconfig py py.py attr attrs packaging mock cloudpickle; do
    src="/usr/lib/python3/dist-packages/$m"
    [ -e "$src" ] || continue
    cp -r "$src" "$HT/pylib/"
  done
  find "$HT/pylib" -name __pycache__ -type d -prune -exec rm -rf {} +
  echo "device_bundle: Horovod's test_torch.py ($(cat "$HT/COMMIT")) and $(ls "$HT/pylib" | wc -l) pure-Python test packages"
fi

kib=$(du -sk "$OUT" | cut -f1)
echo "device_bundle: $OUT: $((kib / 1024)) MiB ($kib KiB), $(find "$OUT" -type f | wc -l) files; libraries: $(cd "$OUT/lib" && ls | tr '\n' ' ')"
[ "$kib" -lt $((MAX_MIB * 1024)) ] || die "the bundle is $((kib / 1024)) MiB, over the ${MAX_MIB} MiB limit"
