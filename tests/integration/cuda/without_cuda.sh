#!/usr/bin/env bash
# The collective library without its CUDA component (-DHVD_WITH_CUDA=OFF)
# must still build and work everywhere (docs/cuda.md, "Building"). The main
# build of a machine with nvcc has the component, so this test configures a
# second build tree without it and runs the tests whose answers differ
# there: the C API, the Context's device-buffer refusals ("device:" cases)
# and the component's host-side tests (truthful cuda_built() == false).
# No build type (no optimisation, no debug info): it only has to be quick.
#   without_cuda.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
jobs=$(nproc 2>/dev/null || echo 2)
echo "without_cuda: configuring $build with -DHVD_WITH_CUDA=OFF"
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE= -DHVD_WITH_CUDA=OFF >"$build.configure.log" 2>&1 || {
  cat "$build.configure.log"
  exit 1
}
grep -q "CUDA component: OFF" "$build.configure.log" || {
  echo "without_cuda: configuration did not turn the CUDA component off:"
  grep "CUDA component" "$build.configure.log" || true
  exit 1
}
cmake --build "$build" -j"$jobs" --target test_collective_engine test_c_api test_cuda_host
if ldd "$build"/lib/collective/libhvd_collective.so 2>/dev/null | grep -q libcudart; then
  echo "without_cuda: libhvd_collective links libcudart"
  exit 1
fi
unset HOROVOD_RANK HOROVOD_SIZE HOROVOD_LOCAL_RANK HOROVOD_LOCAL_SIZE HOROVOD_CROSS_RANK HOROVOD_CROSS_SIZE
"$build/tests/unit/collective/api/test_c_api"
"$build/tests/unit/collective/engine/test_collective_engine" --warn NoTests "device:*"
"$build/tests/unit/cuda/test_cuda_host" --warn NoTests
echo "without_cuda: OK"
