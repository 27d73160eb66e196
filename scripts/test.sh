#!/usr/bin/env bash
# CI: every job, one after another, each timed; exits non-zero if any failed (the later jobs
# still run, so one CI round reports every failure).
#   lint        clang-format check and clang-tidy (.clang-tidy) over the tree (scripts/ci-lint.sh)
#   main        deps, the Release build (CUDA when nvcc is found) and every test with ctest
#   asan        ASan+UBSan build, CPU only: unit, integration and fuzz-corpus tests
#   containers  the controller and CPU runner images (podman, from the main job's binaries) and
#               the system in containers end to end (scripts/ci-containers.sh)
#   fuzz        a short bounded run of every fuzz target on the ASan build
#   tsan        TSan build of the threaded parts: comm, rendezvous, informer, work queue, operator
# CI_JOBS="main asan" runs a subset. Build directories: BUILD_DIR (build), build-asan, build-tsan.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/ci-env.sh

main_job() {
  bash scripts/build.sh || return
  ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure --timeout 900 -j "${TEST_JOBS:-2}"
}

declare -A result
order=()
run_job() {
  local name=$1 start=$SECONDS rc=0
  shift
  echo "=== job $name"
  "$@" || rc=$?
  result[$name]="$([ $rc = 0 ] && echo ok || echo "FAILED (exit $rc)") in $((SECONDS - start)) s"
  order+=("$name")
  echo "=== job $name: ${result[$name]}"
}

total=$SECONDS
for job in ${CI_JOBS:-lint main containers asan fuzz tsan}; do
  case "$job" in
    lint) run_job lint bash -c 'bash scripts/deps.sh && bash scripts/ci-lint.sh' ;;
    main) run_job main main_job ;;
    containers) run_job containers bash scripts/ci-containers.sh ;;
    asan) run_job asan bash scripts/ci-sanitizers.sh asan ;;
    fuzz) run_job fuzz bash scripts/ci-fuzz.sh ;;
    tsan) run_job tsan bash scripts/ci-sanitizers.sh tsan ;;
    *) echo "unknown CI job $job" >&2; exit 2 ;;
  esac
done
echo "=== summary ($((SECONDS - total)) s in all)"
failed=0
for job in "${order[@]}"; do
  echo "  $job: ${result[$job]}"
  [[ ${result[$job]} == ok* ]] || failed=1
done
exit $failed
