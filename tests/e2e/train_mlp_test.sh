#!/usr/bin/env bash
# `ringtrain run` trains the shipped MLP example (1 epoch here) with 2 replicas and writes a
# truthful summary.
source "$(dirname "$0")/lib.sh"
example_with "$WORK/job.yaml" epochs 1
"$BIN/ringtrain" run "$WORK/job.yaml" --workdir "$WORK/run" --summary-json "$WORK/summary.json" \
  >"$WORK/ringtrain.log" 2>&1 || fail "ringtrain run exited with $?"
cat "$WORK/summary.json"
[ "$(json_get "$WORK/summary.json" phase)" = Succeeded ] || fail "phase is not Succeeded"
[ "$(json_get "$WORK/summary.json" world_size)" = 2 ] || fail "world_size is not 2"
[ "$(json_get "$WORK/summary.json" restarts)" = 0 ] || fail "restarts is not 0"
[ "$(json_get "$WORK/summary.json" epochs)" = 1 ] || fail "epochs is not 1"
# 60000 samples over 2 ranks in batches of 64: 469 steps.
[ "$(json_get "$WORK/summary.json" steps)" = 469 ] || fail "steps is not 469"
python3 - "$WORK/summary.json" <<'PY' || fail "summary values out of range"
import json, sys
s = json.load(open(sys.argv[1]))
for k in ("test_accuracy", "test_loss", "wall_seconds", "samples_per_second"):
    assert k in s, k
assert s["test_accuracy"] >= 0.80, s["test_accuracy"]
assert 0 < s["test_loss"] < 1.0, s["test_loss"]
assert s["samples_per_second"] > 0
PY
grep -q "TrainingJob fashion-mnist-mlp Succeeded" "$WORK/ringtrain.log" || fail "no summary line"
# Each replica's metrics address is printed, and is the port its rank served /metrics on.
for r in 0 1; do
  url_port=$(sed -nE "s#.*fashion-mnist-mlp-a0-$r: rank $r, metrics http://127\.0\.0\.1:([0-9]+)/metrics.*#\1#p" \
    "$WORK/ringtrain.log")
  [ -n "$url_port" ] || fail "no metrics address printed for replica $r"
  served=$(sed -nE 's#.*serving /metrics and /status on port ([0-9]+).*#\1#p' \
    "$WORK/run/fashion-mnist-mlp-a0-$r.log")
  [ "$url_port" = "$served" ] || fail "replica $r: printed port $url_port, rank served on '$served'"
done
echo PASS
