#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test (unit, integration, end to end) with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
build=${BUILD_DIR:-build}
cd "$build"
ctest --output-on-failure --timeout 900 -j "${TEST_JOBS:-2}"
