#!/usr/bin/env bash
# What one rank of a TrainingJob really uses, to choose the pods' default resources:
# runs `ringtrain run MANIFEST` and samples every ringtrain-runner process twice a second,
# printing each rank's peak RSS (VmHWM), its CPU seconds and its wall time (CPU/wall = cores).
#   bash bench/rank_footprint.sh manifests/examples/fashion-mnist-mlp.yaml
set -euo pipefail
cd "$(dirname "$0")/.."
manifest=${1:?usage: rank_footprint.sh MANIFEST}
build=${BUILD_DIR:-build}
summary=$(mktemp)
trap 'rm -f "$summary"' EXIT
"$build/bin/ringtrain" run "$manifest" --summary-json "$summary" >/dev/null 2>&1 &
run=$!
declare -A peak cpu start
while kill -0 "$run" 2>/dev/null; do
  for p in $(pgrep -f ringtrain-runner || true); do
    hwm=$(awk '/VmHWM/{print $2}' "/proc/$p/status" 2>/dev/null || true)
    [ -n "$hwm" ] || continue
    [ "${peak[$p]:-0}" -lt "$hwm" ] && peak[$p]=$hwm
    t=$(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || true)
    [ -n "$t" ] && cpu[$p]=$t
    [ -n "${start[$p]:-}" ] || start[$p]=$(date +%s.%N)
  done
  sleep 0.5
done
wait "$run" || true
end=$(date +%s.%N)
tck=$(getconf CLK_TCK)
for p in "${!peak[@]}"; do
  python3 -c "import sys; rss, cpu, wall = int(sys.argv[1]) / 1024, int(sys.argv[2]) / int(sys.argv[3]), float(sys.argv[5]) - float(sys.argv[4]); print(f'rank pid {sys.argv[6]}: peak RSS {rss:.0f} MiB, CPU {cpu:.1f} s over {wall:.1f} s = {cpu / wall:.2f} cores')" \
    "${peak[$p]}" "${cpu[$p]:-0}" "$tck" "${start[$p]}" "$end" "$p"
done
python3 -c "import json, sys; d = json.load(open(sys.argv[1])); print('job:', d['phase'], 'test_accuracy', round(d['test_accuracy'], 4), 'wall', round(d['wall_seconds'], 1), 's')" "$summary"
