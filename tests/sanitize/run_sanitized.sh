#!/usr/bin/env bash
# The launcher, store and common unit tests under AddressSanitizer and
# UndefinedBehaviorSanitizer: a second build tree configured with
# -DHVD_SANITIZE=ON (no Python binding, no CUDA component; -O0, which builds
# faster on CI than an optimised tree), its unit test executables run
# directly. Any sanitizer report fails the run.
#   run_sanitized.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
jobs=$(nproc 2>/dev/null || echo 2)
launcher=(test_launcher_options test_launcher_hosts test_launcher_plan test_launcher_process
          test_launcher_supervise test_launcher_spawn test_launcher_discovery test_launcher_elastic
          test_launcher_job)
others=(test_common test_store)
echo "sanitize: configuring $build with -DHVD_SANITIZE=ON"
# ccache, where installed, makes the next run cheap (a clean CI machine pays
# the whole build: about 3 minutes on two cores).
launcher_opt=()
if command -v ccache >/dev/null 2>&1; then
  launcher_opt=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
# An explicit build type with explicit flags: an empty one is replaced by the
# project's default (RelWithDebInfo), whose -O2 -g would follow these flags
# and win, making every file about six times as slow to compile.
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-O0 -g0" \
      -DCMAKE_C_FLAGS_DEBUG="-O0 -g0" -DHVD_SANITIZE=ON \
      -DHVD_WITH_PYTHON=OFF -DHVD_WITH_CUDA=OFF "${launcher_opt[@]}" >"$build.configure.log" 2>&1 || {
  cat "$build.configure.log"
  exit 1
}
targets=("${launcher[@]}" "${others[@]}")
cmake --build "$build" -j"$jobs" --target "${targets[@]}" hvdrun_agent
export ASAN_OPTIONS=abort_on_error=0:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
failed=0
for t in "${targets[@]}"; do
  exe=$(find "$build/tests" -type f -name "$t" -perm -u+x | head -1)
  if [ -z "$exe" ]; then
    echo "sanitize: $t was not built"
    failed=1
    continue
  fi
  echo "sanitize: $t"
  # Catch's own summary on success; everything on failure.
  if ! (cd "$(dirname "$exe")" && "$exe" --warn NoTests >"$build/$t.log" 2>&1); then
    cat "$build/$t.log"
    echo "sanitize: $t FAILED"
    failed=1
  else
    tail -2 "$build/$t.log"
  fi
done
exit $failed
