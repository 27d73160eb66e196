#!/usr/bin/env bash
# A rank killed mid-training: every other rank exits within the collective timeout with a
# retryable exit code and a message that names the lost peer; the root cause reaches every
# rank's termination message. With in-place recovery, a survivor waiting for the lost rank's
# replacement says so in its /status and metrics.
source "$(dirname "$0")/lib.sh"
port=$(free_port)
export RINGTRAIN_COLLECTIVE_TIMEOUT_SECONDS=30
for r in 0 1 2; do
  start_rank $r 3 "$port" secret "$WORK/rank$r.log" --epochs 50 --step-sleep-ms 5
  eval "pid$r=$LAST_PID"
done
for r in 0 1 2; do
  wait_until 120 "rank $r training" grep -q "communicator ready" "$WORK/rank$r.log"
done
sleep 1
kill -9 "$pid1"
wait_exit "$pid0" 90
rc0=$RC
wait_exit "$pid2" 90
rc2=$RC
echo "exit codes: rank 0 $rc0, rank 2 $rc2"
for r in 0 2; do
  rc=$(eval echo "\$rc$r")
  [ "$rc" -ge 128 ] || fail "rank $r exited with $rc, expected a retryable code (128-255)"
  grep -q "rank 1" "$WORK/rank$r.log" || fail "rank $r's error does not name rank 1"
  grep -q "retryable" "$WORK/rank$r.log" || fail "rank $r does not say retryable"
  [ -s "$WORK/rank$r.log.termination" ] || fail "rank $r wrote no termination message"
done

# Rank 0 is SIGKILLed, and the store it hosts dies with it: the survivors agree that rank 0 is
# the dead rank instead of blaming each other for passing the failure on.
port=$(free_port)
for r in 0 1 2; do
  start_rank $r 3 "$port" secret "$WORK/k$r.log" --epochs 50 --step-sleep-ms 5
  eval "kpid$r=$LAST_PID"
done
for r in 0 1 2; do
  wait_until 120 "rank $r training" grep -q "communicator ready" "$WORK/k$r.log"
done
sleep 1
kill -9 "$kpid0"
for r in 1 2; do
  wait_exit "$(eval echo "\$kpid$r")" 90
  [ "$RC" -ge 128 ] || fail "rank $r exited with $RC after rank 0 was killed, expected retryable"
  msg=$(cat "$WORK/k$r.log.termination")
  echo "rank $r: $msg"
  case "$msg" in
    *"lost peer rank 0"*) ;;
    *) fail "rank $r does not name rank 0 as the lost peer: $msg" ;;
  esac
  ! grep -Eq "^(UNAVAILABLE: )?[a-z -]*(: )?[a-z-]+: lost peer rank [12]" "$WORK/k$r.log.termination" ||
    fail "rank $r blames a survivor: $msg"
done

# Rank 0 fails on its own (its checkpoint dir cannot be created, found right after the
# rendezvous): it hands its permanent error to every rank before it closes its connections, so
# the others exit with its code and name rank 0 and its cause rather than a lost peer.
port=$(free_port)
touch "$WORK/not-a-dir"
for r in 0 1 2; do
  start_rank $r 3 "$port" secret "$WORK/c$r.log" --epochs 50 --step-sleep-ms 5 \
    --checkpoint-every 3 --checkpoint-dir "$WORK/not-a-dir/ckpt"
  eval "cpid$r=$LAST_PID"
done
wait_exit "$cpid0" 120
rc0=$RC
[ "$rc0" != 0 ] || fail "rank 0 succeeded with an impossible checkpoint dir"
grep -q "checkpoint dir" "$WORK/c0.log.termination" || fail "rank 0's message: $(cat "$WORK/c0.log.termination")"
for r in 1 2; do
  wait_exit "$(eval echo "\$cpid$r")" 90
  msg=$(cat "$WORK/c$r.log.termination")
  echo "rank $r: exit $RC: $msg"
  [ "$RC" = "$rc0" ] || fail "rank $r exited $RC, rank 0 (the root cause) $rc0"
  case "$msg" in
    "caused by rank 0: "*"checkpoint dir"*) ;;
    *) fail "rank $r's termination message lost the root cause: $msg" ;;
  esac
done

# With in-place recovery, rank 1 SIGKILLed: rank 0 keeps its state and waits for a replacement,
# which this test starts only after it has seen rank 0 recovering (no race: rank 0 cannot train
# without it). Meanwhile rank 0's /status says "recovering" with 0 samples/s at the last step it
# reported, its samples/s gauge reads 0, and its recovery counter grows; then the gang ends
# with one in-place recovery.
export RINGTRAIN_RECOVERY_TIMEOUT_SECONDS=120
port=$(free_port)
mport=$(free_port)
METRICS_PORT=$mport start_rank 0 2 "$port" secret "$WORK/ip0.log" --epochs 2 --step-sleep-ms 5
ipid0=$LAST_PID
start_rank 1 2 "$port" secret "$WORK/ip1.log" --epochs 2 --step-sleep-ms 5
ipid1=$LAST_PID
# metric_holds NAME TEST: the value v of rank 0's series of NAME passes the Python test TEST.
metric_holds() {
  python3 -c 'import sys; v = float(sys.argv[1]); sys.exit(0 if eval(sys.argv[2]) else 1)' \
    "$(metric "$1")" "$2"
}
wait_until 120 "rank 0 training" past_step 5
kill -9 "$ipid1"
wait_until 60 "rank 0 recovering" state_is recovering
curl -sf "http://127.0.0.1:$mport/status" >"$WORK/ip_status.json"
python3 - "$WORK/ip_status.json" <<'PY' || fail "rank 0's /status while recovering: $(cat "$WORK/ip_status.json")"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["state"] == "recovering", s
assert s["samples_per_second"] == 0, s
assert s["step"] > 5, s
PY
metric_holds ringtrain_samples_per_second "v == 0" ||
  fail "ringtrain_samples_per_second while recovering: $(metric ringtrain_samples_per_second)"
lost=$(metric ringtrain_recovery_seconds_total)
metric_holds ringtrain_recovery_seconds_total "v > 0" ||
  fail "ringtrain_recovery_seconds_total while recovering: $lost (it counts from the failure)"
wait_until 30 "ringtrain_recovery_seconds_total to grow during the outage (from $lost)" \
  metric_holds ringtrain_recovery_seconds_total "v > $lost"
kill -0 "$ipid0" || fail "rank 0 exited while waiting for its replacement"
start_rank 1 2 "$port" secret "$WORK/ip1r.log" --epochs 2 --step-sleep-ms 5
ipid1r=$LAST_PID
wait_exit "$ipid0" 300
[ "$RC" = 0 ] || fail "rank 0 exited with $RC after the in-place recovery"
wait_exit "$ipid1r" 60
[ "$RC" = 0 ] || fail "the replacement exited with $RC"
python3 - "$WORK/ip0.log.termination" <<'PY' || fail "rank 0's final status: $(cat "$WORK/ip0.log.termination")"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["state"] == "succeeded", s
assert s["recoveries"] == 1, s
PY
unset RINGTRAIN_RECOVERY_TIMEOUT_SECONDS
echo PASS
