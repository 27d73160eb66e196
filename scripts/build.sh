#!/usr/bin/env bash
# Configures and builds ringtrain into ${BUILD_DIR:-build} (Release, warnings are errors).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
ninja -C "$build"
