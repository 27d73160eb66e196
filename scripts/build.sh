#!/usr/bin/env bash
# Configures and builds ringtrain into ${BUILD_DIR:-build} (Release, warnings are errors):
# every target, or only those in BUILD_TARGETS (e.g. "ringtrain ringtrain-runner").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
# shellcheck disable=SC2086 # a list of target names
ninja -C "$build" ${BUILD_TARGETS:-}
