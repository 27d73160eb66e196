#!/usr/bin/env bash
# A training rank serves Prometheus metrics that promtool accepts, and a JSON /status.
source "$(dirname "$0")/lib.sh"
command -v promtool >/dev/null || fail "promtool not installed (Debian package prometheus)"
# Before its rendezvous, a rank already says which attempt and gang it is starting for.
sport=$(free_port)
RINGTRAIN_ATTEMPT=3 METRICS_PORT=$sport start_rank 0 2 "$(free_port)" tok "$WORK/waiting.log" \
  --epochs 1
waiting=$LAST_PID
status_is_up() { curl -sf "http://127.0.0.1:$sport/status" >"$WORK/starting.json"; }
wait_until 60 "/status of a rank waiting for its peer" status_is_up
python3 - "$WORK/starting.json" <<'PY' || fail "/status before the rendezvous: $(cat "$WORK/starting.json")"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["state"] == "starting", s
assert s["attempt"] == 3, s
assert s["world_size"] == 2, s
PY
kill "$waiting"
mport=$(free_port)
METRICS_PORT=$mport start_rank 0 1 "$(free_port)" tok "$WORK/rank0.log" --epochs 50 \
  --step-sleep-ms 10
status_has_steps() {
  curl -sf "http://127.0.0.1:$mport/status" |
    python3 -c 'import json,sys; s=json.load(sys.stdin); sys.exit(0 if s["step"] > 5 else 1)'
}
wait_until 120 "training steps in /status" status_has_steps
curl -sf "http://127.0.0.1:$mport/metrics" >"$WORK/metrics.txt"
promtool check metrics <"$WORK/metrics.txt" || fail "promtool rejected /metrics"
for m in ringtrain_step_duration_seconds_bucket ringtrain_samples_total \
  ringtrain_data_wait_seconds_total ringtrain_allreduce_duration_seconds_bucket \
  ringtrain_allreduce_bytes_total ringtrain_loss ringtrain_epoch ringtrain_step; do
  grep -q "^$m{" "$WORK/metrics.txt" || fail "metric $m missing"
done
grep -q 'job="e2e"' "$WORK/metrics.txt" || fail "job label missing"
curl -sf "http://127.0.0.1:$mport/status" >"$WORK/status.json"
python3 - "$WORK/status.json" <<'PY' || fail "/status fields"
import json, sys
s = json.load(open(sys.argv[1]))
for k in ("step", "epoch", "samples_per_second", "loss", "state"):
    assert k in s, k
assert s["state"] == "running"
PY
echo PASS
