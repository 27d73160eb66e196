#!/usr/bin/env bash
# A rank killed mid-training: every other rank exits within the collective timeout with a
# retryable exit code and a message that names the lost peer.
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
echo PASS
