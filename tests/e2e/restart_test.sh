#!/usr/bin/env bash
# Kill -9 one rank mid-training. By default (runPolicy.recovery InPlace) `ringtrain run` replaces
# that rank alone: the survivor keeps its state, the replacement takes it, no completed step is
# lost and the job succeeds in its first attempt. With recovery GangRestart the whole gang
# restarts from the checkpoint, and the job still succeeds with restarts = 1. Then every
# checkpoint corrupt: a fresh start that says so.
source "$(dirname "$0")/lib.sh"

# kill_rank_1 RUN_DIR: kill -9 rank 1 of the gang running under RUN_DIR, once it checkpointed.
kill_rank_1() {
  local victim
  wait_until 120 "a checkpoint of attempt 0" compgen -G "$1/checkpoints/fashion-mnist-mlp/ckpt-*.bin"
  victim=$(run_rank_pid "$1" 0 1) || fail "rank 1 not found"
  kill -9 "$victim"
}

# In place (the default).
example_with "$WORK/job.yaml" epochs 8 everySteps 100
"$BIN/ringtrain" run "$WORK/job.yaml" --workdir "$WORK/inplace" \
  --summary-json "$WORK/inplace.json" >"$WORK/inplace.log" 2>&1 &
RUN_PID=$!
PIDS+=($RUN_PID)
kill_rank_1 "$WORK/inplace"
wait_exit "$RUN_PID" 300
rc=$RC
cat "$WORK/inplace.json" || true
[ "$rc" = 0 ] || fail "in place: ringtrain run exited with $rc"
[ "$(json_get "$WORK/inplace.json" phase)" = Succeeded ] || fail "in place: not Succeeded"
[ "$(json_get "$WORK/inplace.json" attempts)" = 1 ] || fail "in place: the gang restarted"
[ "$(json_get "$WORK/inplace.json" in_place_recoveries)" = 1 ] || fail "no in-place recovery"
[ "$(json_get "$WORK/inplace.json" recoveries)" = 1 ] || fail "rank 0 did not recover in place"
[ "$(json_get "$WORK/inplace.json" steps)" = 3752 ] || fail "in place: not every step ran"
grep -q "recovered in place: every rank continues from rank 0's state" \
  "$WORK/inplace/fashion-mnist-mlp-a0-0.log" || fail "rank 0 kept no state"
grep -q "InPlaceRecovery" "$WORK/inplace.log" || fail "no InPlaceRecovery event"

# Gang restart.
sed -i "s|^\(\s*\)backoffLimit: 3|&\n\1recovery: GangRestart|" "$WORK/job.yaml"
grep -q "recovery: GangRestart" "$WORK/job.yaml" || fail "could not set runPolicy.recovery"
"$BIN/ringtrain" run "$WORK/job.yaml" --workdir "$WORK/run" --summary-json "$WORK/summary.json" \
  >"$WORK/ringtrain.log" 2>&1 &
RUN_PID=$!
PIDS+=($RUN_PID)
kill_rank_1 "$WORK/run"
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
# Rank 0 saved the state of the gang's last completed step before it exited, and attempt 1
# resumed from that step, not from the periodic checkpoint before it.
kept=$(sed -n 's/.*lost a peer while training (no in-place recovery): .*step \([0-9]*\).*/\1/p' \
  "$WORK/run/fashion-mnist-mlp-a0-0.log" | head -n 1)
[ -n "$kept" ] || fail "rank 0 of attempt 0 saved no state: $(tail -n 5 "$WORK/run/fashion-mnist-mlp-a0-0.log")"
grep -q "resuming from checkpoint at step $kept " "$WORK/run/fashion-mnist-mlp-a1-0.log" ||
  fail "attempt 1 did not resume from step $kept, the last one rank 0 completed: $(grep resuming "$WORK/run/fashion-mnist-mlp-a1-0.log")"
# Every checkpoint corrupt: training starts over from step 0 and says so — in rank 0's log, in
# its /status ("resumeWarning") and in the `ringtrain run` summary (issue 10 item 7).
mkdir -p "$WORK/bad-ckpt"
for step in 100 200; do
  head -c 4096 /dev/urandom >"$WORK/bad-ckpt/ckpt-$step.bin"
done
example_with "$WORK/corrupt.yaml" epochs 1
sed -i "s|^\(\s*\)checkpoint:\s*$|\1checkpoint:\n\1  path: $WORK/bad-ckpt|" "$WORK/corrupt.yaml"
grep -q "path: $WORK/bad-ckpt" "$WORK/corrupt.yaml" || fail "could not set the checkpoint path"
"$BIN/ringtrain" run "$WORK/corrupt.yaml" --workdir "$WORK/run2" \
  --summary-json "$WORK/corrupt-summary.json" >"$WORK/corrupt.log" 2>&1 && rc=0 || rc=$?
[ "$rc" = 0 ] || fail "corrupt checkpoints: ringtrain run exited with $rc"
[ "$(json_get "$WORK/corrupt-summary.json" resumed)" = False ] || fail "resumed from garbage"
json_get "$WORK/corrupt-summary.json" resume_warning | grep -q "starting from step 0" ||
  fail "summary has no resume_warning"
grep -q "warning: no checkpoint could be resumed" "$WORK/corrupt.log" ||
  fail "ringtrain run printed no resume warning"
grep -q "$WORK/bad-ckpt/ckpt-200.bin" "$WORK/run2/"*-a0-0.log || fail "rank 0 log names no file"
echo PASS
