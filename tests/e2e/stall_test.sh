#!/usr/bin/env bash
# A peer that hangs (SIGSTOPped, as a GPU hang or a frozen node looks to its gang) makes no rank
# exit before the collective timeout, and rank 0 does not show it as healthy meanwhile: past its
# stall threshold (the 10 s floor: its steps are fast) its /status says "stalled" with 0
# samples/s at the last step, its samples/s gauge reads 0 and
# ringtrain_last_step_timestamp_seconds holds still; once the peer resumes (SIGCONT), the gang
# trains on and rank 0 says "running" again; `ringtrain run` says the same of its rank 0 (its
# progress line, a RankStalled Warning). (No per-epoch evaluation: a peer that hangs inside
# one is, by design, no stall until the collective timeout.)
source "$(dirname "$0")/lib.sh"
export RINGTRAIN_COLLECTIVE_TIMEOUT_SECONDS=300
port=$(free_port)
mport=$(free_port)
METRICS_PORT=$mport start_rank 0 2 "$port" secret "$WORK/rank0.log" --epochs 50 \
  --step-sleep-ms 5 --eval-every-epoch false
pid0=$LAST_PID
start_rank 1 2 "$port" secret "$WORK/rank1.log" --epochs 50 --step-sleep-ms 5 \
  --eval-every-epoch false
pid1=$LAST_PID
wait_until 120 "rank 0 training" past_step 5
state_is running || fail "rank 0 trains but says $(status_field state)"
[ -n "$(metric ringtrain_last_step_timestamp_seconds)" ] ||
  fail "no ringtrain_last_step_timestamp_seconds after steps"

kill -STOP "$pid1"
wait_until 60 "rank 0 stalled" state_is stalled
kill -0 "$pid0" 2>/dev/null || fail "rank 0 exited while its peer hung"
curl -sf "http://127.0.0.1:$mport/status" >"$WORK/stalled.json"
curl -sf "http://127.0.0.1:$mport/metrics" >"$WORK/stalled.txt"
python3 - "$WORK/stalled.json" <<'PY' || fail "rank 0's /status while stalled: $(cat "$WORK/stalled.json")"
import json, sys
s = json.load(open(sys.argv[1]))
assert s["state"] == "stalled", s
assert s["samples_per_second"] == 0, s
assert s["step"] > 5, s
PY
rate=$(awk 'index($0, "ringtrain_samples_per_second{") == 1 {print $NF}' "$WORK/stalled.txt")
[ "$rate" = 0 ] || fail "ringtrain_samples_per_second while stalled: $rate"
last=$(awk 'index($0, "ringtrain_last_step_timestamp_seconds{") == 1 {print $NF}' "$WORK/stalled.txt")
stalled_step=$(json_get "$WORK/stalled.json" step)
[ "$(metric ringtrain_last_step_timestamp_seconds)" = "$last" ] ||
  fail "ringtrain_last_step_timestamp_seconds moved while no step completed"

kill -CONT "$pid1"
wait_until 60 "rank 0 training again" past_step "$stalled_step"
wait_until 30 "rank 0 running again" state_is running
python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) > float(sys.argv[2]) else 1)' \
  "$(metric ringtrain_last_step_timestamp_seconds)" "$last" ||
  fail "ringtrain_last_step_timestamp_seconds did not move with the new steps"
kill "$pid0" "$pid1" 2>/dev/null || true

# The same hang under `ringtrain run`: its progress line says "stalled" after 0 samples/s, and
# a RankStalled Warning names rank 0's last step, the collective timeout its ranks inherit
# (300 s) and when the progress deadline would restart the gang; once the peer resumes, the line shows samples/s again and nothing restarted.
# Once the `ringtrain run` job NAME (its log $WORK/NAME.log) trains, SIGSTOPs its rank 1 ($rank1).
# Stopped, it must not outlive a failure of this test: cleanup kills it.
stop_rank1_once_training() {
  local name=$1
  trains() { grep -Eq '\| [1-9][0-9]* samples/s \|' "$WORK/$name.log"; }
  wait_until 120 "the job $name training" trains
  rank1=$(run_rank_pid "$WORK/$name" 0 1 || true)
  [ -n "$rank1" ] || fail "no rank 1 process of the job $name"
  PIDS+=($rank1)
  kill -STOP "$rank1"
}

cat >"$WORK/hang.yaml" <<YAML
apiVersion: ringtrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: hang}
spec:
  replicas: 2
  train: {model: mlp, dataset: $DATA, epochs: 200, batchSizePerReplica: 64}
  runPolicy: {progressDeadlineSeconds: 900}
YAML
"$BIN/ringtrain" run "$WORK/hang.yaml" --workdir "$WORK/hang" >"$WORK/hang.log" 2>&1 &
RUN_PID=$!
PIDS+=($RUN_PID)
stop_rank1_once_training hang
wait_until 90 "a RankStalled warning" grep -q "RankStalled: rank 0 reports no completed step since step [0-9]* (.*): .*a collective that waits on a hung peer fails within the collective timeout (300s), else the gang restarts at the progress deadline" "$WORK/hang.log"
wait_until 30 "the progress line saying stalled" grep -q "| 0 samples/s, stalled | restarts 0" "$WORK/hang.log"
stalled_lines=$(wc -l <"$WORK/hang.log")
kill -CONT "$rank1"
trains_again() { tail -n +"$((stalled_lines + 1))" "$WORK/hang.log" | grep -Eq '\| [1-9][0-9]* samples/s \| restarts 0'; }
wait_until 60 "the progress line training again" trains_again
kill -INT "$RUN_PID"
wait_exit "$RUN_PID" 60
[ "$RC" = 130 ] || fail "ringtrain run exited $RC after Ctrl-C, expected 130"
! grep -Eq 'restarts [1-9]|GangRestart|Restarting' "$WORK/hang.log" || fail "the job restarted"

# A hang that outlasts the ranks' collective timeout (5 s here, inherited from this shell): rank
# 0's all-reduce fails and it recovers in place while every rank's process still runs, so the
# operator saw no loss of its own: a RankRecovering Warning names the loss in rank 0's words and
# how long it waits. The peer resumed, the gang trains again in place, and nothing restarted.
cat >"$WORK/hang2.yaml" <<YAML
apiVersion: ringtrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: hang2}
spec:
  replicas: 2
  train: {model: mlp, dataset: $DATA, epochs: 200, batchSizePerReplica: 64}
YAML
RINGTRAIN_COLLECTIVE_TIMEOUT_SECONDS=5 "$BIN/ringtrain" run "$WORK/hang2.yaml" \
  --workdir "$WORK/hang2" >"$WORK/hang2.log" 2>&1 &
RUN_PID=$!
PIDS+=($RUN_PID)
stop_rank1_once_training hang2
wait_until 90 "a RankRecovering warning" grep -Eq "RankRecovering: rank 0 recovers a lost peer in place \(.*waiting for rank 1.*\): no completed step since step [0-9]+ .*; it waits up to 120s for the gang to form again, else the gang restarts" "$WORK/hang2.log"
kill -CONT "$rank1"
wait_until 120 "the gang recovered in place" grep -q "RecoveredInPlace: the gang trains again" "$WORK/hang2.log"
kill -INT "$RUN_PID"
wait_exit "$RUN_PID" 60
[ "$RC" = 130 ] || fail "ringtrain run exited $RC after Ctrl-C, expected 130"
[ "$(grep -c 'RankRecovering:' "$WORK/hang2.log")" = 1 ] || fail "not one RankRecovering warning"
! grep -Eq 'GangRestart|InPlaceRecovery' "$WORK/hang2.log" || fail "the job restarted"

# A hang that outlasts the recovery timeout too (3 s, from the runner container's env): rank 0
# gives up recovering in place, saves the state it kept and exits 138, and the gang restarts
# from that state. No periodic checkpoint is due in this run: without the save the new attempt
# starts from step 0.
cat >"$WORK/hang3.yaml" <<YAML
apiVersion: ringtrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: hang3}
spec:
  replicas: 2
  train: {model: mlp, dataset: $DATA, epochs: 200, batchSizePerReplica: 64}
  checkpoint: {everySteps: 1000000}
  template:
    spec:
      containers:
        - name: runner
          env: [{name: RINGTRAIN_RECOVERY_TIMEOUT_SECONDS, value: "3"}]
YAML
RINGTRAIN_COLLECTIVE_TIMEOUT_SECONDS=5 "$BIN/ringtrain" run "$WORK/hang3.yaml" \
  --workdir "$WORK/hang3" --grace-period 2 >"$WORK/hang3.log" 2>&1 &
RUN_PID=$!
PIDS+=($RUN_PID)
stop_rank1_once_training hang3
wait_until 180 "the gang restarted" grep -q "GangRestarted: attempt 1 trains again" "$WORK/hang3.log"
kept=$(sed -n 's/.*in-place recovery failed: checkpoint written of the state this rank kept, at step \([0-9]*\) .*/\1/p' \
  "$WORK/hang3/hang3-a0-0.log")
[ -n "$kept" ] || fail "rank 0 gave up recovering in place without saving the state it kept"
[ "$kept" -gt 0 ] || fail "rank 0 kept step $kept"
grep -q "GangRestarted: attempt 1 trains again from its checkpoint's step $kept:" "$WORK/hang3.log" ||
  fail "attempt 1 does not train again from step $kept, the one rank 0 kept: $(grep GangRestarted "$WORK/hang3.log")"
grep -q "resuming from checkpoint at step $kept " "$WORK/hang3/hang3-a1-0.log" ||
  fail "attempt 1's rank 0 does not resume from step $kept"
kill -INT "$RUN_PID"
wait_exit "$RUN_PID" 60
[ "$RC" = 130 ] || fail "ringtrain run exited $RC after Ctrl-C, expected 130"
echo PASS
