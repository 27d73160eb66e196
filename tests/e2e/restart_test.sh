#!/usr/bin/env bash
# Kill -9 one rank mid-training: `ringtrain run` restarts the whole gang from the checkpoint,
# and the job still succeeds with restarts = 1.
source "$(dirname "$0")/lib.sh"
example_with "$WORK/job.yaml" epochs 8 everySteps 100
"$BIN/ringtrain" run "$WORK/job.yaml" --workdir "$WORK/run" --summary-json "$WORK/summary.json" \
  >"$WORK/ringtrain.log" 2>&1 &
RUN_PID=$!
PIDS+=($RUN_PID)
wait_until 120 "a checkpoint of attempt 0" compgen -G "$WORK/run/checkpoints/ckpt-*.bin"
victim=""
for pid in $(pgrep -f -- "$WORK/run/checkpoints"); do
  if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx RINGTRAIN_RANK=1; then victim=$pid; fi
done
[ -n "$victim" ] || fail "rank 1 not found"
kill -9 "$victim"
wait_exit "$RUN_PID" 300
rc=$RC
cat "$WORK/summary.json" || true
[ "$rc" = 0 ] || fail "ringtrain run exited with $rc"
[ "$(json_get "$WORK/summary.json" phase)" = Succeeded ] || fail "phase is not Succeeded"
[ "$(json_get "$WORK/summary.json" restarts)" = 1 ] || fail "restarts is not 1"
[ "$(json_get "$WORK/summary.json" resumed)" = True ] || fail "attempt 1 did not resume"
grep -q "resuming from checkpoint" "$WORK/run/fashion-mnist-mlp-a1-0.log" ||
  fail "rank 0 of attempt 1 did not resume from the checkpoint"
grep -q "GangRestart" "$WORK/ringtrain.log" || fail "no GangRestart event"
echo PASS
