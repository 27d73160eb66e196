#!/usr/bin/env bash
# CI sanitizer jobs, CPU only (-DRINGTRAIN_CUDA=OFF), each in its own build directory.
#   asan: ASan+UBSan (-fno-sanitize-recover=undefined), RelWithDebInfo at -O1, builds every CPU
#         target (the fuzz targets with the seeded driver included) and runs the unit and
#         integration tests plus the fuzz corpora (ctest; e2e and delivery tests are left to the
#         Release job, a trained MNIST under ASan costs minutes for no new code).
#   tsan: ThreadSanitizer on the threaded parts only: comm, rendezvous, gradient reducer and
#         training loop (2 ranks as threads), informer, work queue and
#         operator tests, and the runner the operator tests start.
# Usage: scripts/ci-sanitizers.sh asan|tsan   (ASAN_BUILD_DIR / TSAN_BUILD_DIR to move them)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ci-env.sh
job=${1:?usage: ci-sanitizers.sh asan|tsan}
supp=$(pwd)/scripts/sanitizer-suppressions

configure() {
  local dir=$1 sanitize=$2
  shift 2
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1" \
    -DRINGTRAIN_CUDA=OFF -DRINGTRAIN_BUILD_BENCH=OFF -DRINGTRAIN_SANITIZE="$sanitize" "$@" \
    >/dev/null
}

case "$job" in
  asan)
    dir=${ASAN_BUILD_DIR:-build-asan}
    export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:strict_init_order=1:check_initialization_order=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
    export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
    export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp"
    timed "asan configure" configure "$dir" address,undefined -DRINGTRAIN_FUZZ=DRIVER
    timed "asan build" ninja -C "$dir" -j "$JOBS"
    # Unit, integration and fuzz-corpus tests; e2e_* and delivery_* run in the Release job.
    timed "asan tests" ctest --test-dir "$dir" --output-on-failure --timeout 900 \
      -j "${TEST_JOBS:-2}" -E '^(e2e_|delivery_)'
    ;;
  tsan)
    dir=${TSAN_BUILD_DIR:-build-tsan}
    export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$supp/tsan.supp${TSAN_OPTIONS:+:$TSAN_OPTIONS}"
    timed "tsan configure" configure "$dir" thread
    timed "tsan build" ninja -C "$dir" -j "$JOBS" comm_test rendezvous_test kube_client_test \
      operator_test ringtrain-runner train_test data_parallel_test
    # The binaries directly, not ctest: only these targets exist in this build directory.
    run() { timed "tsan $1" "$dir/bin/$1" --gtest_brief=1 "${@:2}"; }
    rc=0
    run comm_test || rc=1
    run rendezvous_test || rc=1
    run kube_client_test --gtest_filter='Informer*:LeaderElection*' || rc=1
    run operator_test || rc=1
    run train_test || rc=1  # GradReducer's comm thread, the training loop
    run data_parallel_test || rc=1
    exit $rc
    ;;
  *)
    echo "usage: ci-sanitizers.sh asan|tsan" >&2
    exit 2
    ;;
esac
