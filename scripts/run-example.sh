#!/usr/bin/env bash
# Installs dependencies, builds the two binaries it runs (`ringtrain`, `ringtrain-runner`; not
# the tests and benchmarks), and runs the Fashion-MNIST MLP example on this machine:
# 2 replicas (local processes, TCP ring all-reduce), 10 epochs. Extra arguments go to
# `ringtrain run`, e.g. --summary-json summary.json.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_TARGETS="ringtrain ringtrain-runner" bash scripts/build.sh
build=${BUILD_DIR:-build}
exec "$build/bin/ringtrain" run manifests/examples/fashion-mnist-mlp.yaml "$@"
