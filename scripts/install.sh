#!/usr/bin/env bash
# Installs a finished build tree into PREFIX: what `cmake --install` installs
# (hvdrun, the horovodrun link, hvdbench, libhvd_collective.so and its MPI
# bootstrap plug-in, c_api.h, the Python package hvdcomm), the `horovod`
# compatibility package (install component horovod_compat), and the
# Kubernetes helpers:
#   PREFIX/bin/hvd-entrypoint        conf/docker/entrypoint.sh (the image's entrypoint)
#   PREFIX/bin/hvd-discover-hosts    scripts/kubernetes/discover_hosts.sh
#   PREFIX/share/hvdrun/examples/python/*.py   the example trainers
#
#   scripts/install.sh BUILD_DIR PREFIX
#
# The Python packages land in PREFIX/<dir the build chose> (printed at the
# end; for PREFIX /usr/local on Debian: lib/python3.11/dist-packages, on the
# interpreter's path). Runs ldconfig when PREFIX is /usr or /usr/local and
# we are root. Honours DESTDIR like cmake --install. The conf/docker
# Dockerfile runs exactly this; tests/integration/kubernetes/test_install.py
# runs it against the suite's own build tree into a temporary prefix.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"

if [ $# -ne 2 ]; then
  echo "usage: $0 BUILD_DIR PREFIX" >&2
  exit 2
fi
BUILD=$1
PREFIX=$2
if [ ! -f "$BUILD/CMakeCache.txt" ] || [ ! -f "$BUILD/cmake_install.cmake" ]; then
  echo "install.sh: error: $BUILD is not a configured CMake build tree (no CMakeCache.txt); build first: cmake -S . -B $BUILD && cmake --build $BUILD" >&2
  exit 2
fi
case $PREFIX in
  /*) ;;
  *) echo "install.sh: error: PREFIX '$PREFIX' must be an absolute path" >&2; exit 2 ;;
esac
# Every install target must be built; cmake --install would fail later with
# a less clear message.
if [ ! -x "$BUILD/apps/hvdrun/hvdrun" ]; then
  echo "install.sh: error: $BUILD/apps/hvdrun/hvdrun is missing: build first (cmake --build $BUILD)" >&2
  exit 2
fi

cmake --install "$BUILD" --prefix "$PREFIX"
cmake --install "$BUILD" --prefix "$PREFIX" --component horovod_compat

dest="${DESTDIR:-}$PREFIX"
install -d "$dest/bin" "$dest/share/hvdrun/examples/python"
install -m 0755 "$ROOT/conf/docker/entrypoint.sh" "$dest/bin/hvd-entrypoint"
install -m 0755 "$ROOT/scripts/kubernetes/discover_hosts.sh" "$dest/bin/hvd-discover-hosts"
install -m 0644 "$ROOT"/examples/python/*.py "$dest/share/hvdrun/examples/python/"

pydir=$(sed -n 's/^HVD_PYTHON_INSTALL_DIR_EFFECTIVE:INTERNAL=//p' "$BUILD/CMakeCache.txt")
if [ -z "${DESTDIR:-}" ] && [ "$(id -u)" = 0 ] && { [ "$PREFIX" = /usr/local ] || [ "$PREFIX" = /usr ]; }; then
  ldconfig
fi
echo "install.sh: installed into ${DESTDIR:-}$PREFIX (Python packages hvdcomm and horovod in $PREFIX/${pydir:-?})"
