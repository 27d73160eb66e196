#!/usr/bin/env bash
# CI job "containers" (root, Debian 12): builds the controller and CPU runner images with podman
# from the binaries the main job built (scripts/images.sh; no second compile of the project),
# then the container kubelet's own test (tests/e2e/container_kubelet_test.sh) and the system in
# containers end to end: training to Succeeded with Prometheus scraping
# the pods (tests/e2e/container_train_test.sh) and a SIGKILLed rank resumed from the checkpoint
# (tests/e2e/container_restart_test.sh), a hung rank of a GangRestart job SIGKILLed after the 1 s
# grace the controller asks for (tests/e2e/container_hung_rank_test.sh), and spec.command jobs
# failing alike in pods and under `ringtrain run` (tests/e2e/container_command_test.sh). Prints the time of each step; exit code
# 1 if any failed.
# Env: BUILD_DIR (build; built by scripts/build.sh first if its binaries are missing).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=${BUILD_DIR:-build}
case $build in /*) abs_build=$build ;; *) abs_build=$root/$build ;; esac
start=$SECONDS
for b in ringtrain ringtrain-runner fake-apiserver; do
  [ -x "$build/bin/$b" ] || { BUILD_DIR=$build bash scripts/build.sh; break; }
done
t=$SECONDS
BUILD_DIR=$build bash scripts/images.sh all
echo "ci-containers: images took $((SECONDS - t)) s"
failed=()
for test in container_kubelet container_train container_restart container_hung_rank container_command; do
  t=$SECONDS
  if RINGTRAIN_BUILD_DIR=$abs_build RINGTRAIN_SOURCE_DIR=$root \
    timeout 900 bash "tests/e2e/${test}_test.sh"; then
    echo "ci-containers: $test passed in $((SECONDS - t)) s"
  else
    echo "ci-containers: $test FAILED after $((SECONDS - t)) s"
    failed+=("$test")
  fi
done
podman images --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep ringtrain || true
echo "ci-containers: $((SECONDS - start)) s in all"
[ ${#failed[@]} -eq 0 ] || { echo "ci-containers: failed: ${failed[*]}"; exit 1; }
