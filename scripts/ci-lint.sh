#!/usr/bin/env bash
# CI lint job: what the repository practises, enforced.
#  1. clang-format: every tracked C++/CUDA file matches .clang-format (clang-format 14).
#  2. clang-tidy: the checks in .clang-tidy, over every C++ translation unit of the build (CUDA
#     .cu files are nvcc's and are left out), warnings as errors.
# Needs only a configured build tree for compile_commands.json (BUILD_DIR_LINT, build-lint).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/ci-env.sh
if ! command -v clang-format >/dev/null || ! command -v clang-tidy >/dev/null; then
  apt-get update -qq && apt-get install -y -qq clang-format clang-tidy >/dev/null
fi

echo "--- clang-format $(clang-format --version | grep -o '[0-9][0-9.]*' | head -1)"
mapfile -t sources < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh')
if ! clang-format --dry-run -Werror "${sources[@]}"; then
  echo "clang-format: the files above differ from .clang-format (run clang-format -i on them)" >&2
  exit 1
fi
echo "clang-format: ${#sources[@]} files clean"

dir=${BUILD_DIR_LINT:-build-lint}
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
  >/dev/null
mapfile -t units < <(python3 - "$dir/compile_commands.json" <<'PY'
import json, os, sys
root = os.getcwd() + "/"
seen = set()
for e in json.load(open(sys.argv[1])):
    f = e["file"]
    if f.endswith(".cc") and f.startswith(root) and "/build" not in f[len(root):].split("/")[0]:
        seen.add(f[len(root):])
print("\n".join(sorted(seen)))
PY
)
echo "--- clang-tidy $(clang-tidy --version | grep -o '[0-9][0-9.]*' | head -1): ${#units[@]} units"
# -Wno-unknown-warning-option: the build's GCC-only flags (-Wno-restrict) are not clang's.
printf '%s\n' "${units[@]}" |
  xargs -P "$(nproc)" -n 4 clang-tidy -p "$dir" --quiet \
    --extra-arg=-Wno-unknown-warning-option 2>/dev/null | tee /tmp/ringtrain-tidy.log
if grep -qE '(warning|error):' /tmp/ringtrain-tidy.log; then
  echo "clang-tidy: findings above (.clang-tidy lists the checks)" >&2
  exit 1
fi
echo "clang-tidy: clean"
