#!/usr/bin/env bash
# Chaos, gang restarts (runPolicy.recovery GangRestart; inplace_chaos_test.sh covers the
# default): `ringtrain run` on a short 3-replica job that checkpoints often, while this driver
# SIGKILLs or SIGSTOPs a random rank of each attempt (rank 0 at least once, and once while rank
# 0 writes a checkpoint). The job must end Succeeded with one restart per kill, and every
# restarted attempt must resume from a checkpoint at or after the last one seen before the kill,
# never from step 0. The choices come from a seeded RNG: CHAOS_SEED=N replays a run.
source "$(dirname "$0")/lib.sh"
seed=${CHAOS_SEED:-$(date +%s)}
kills=${CHAOS_KILLS:-3}
RANDOM=$seed
echo "chaos: seed $seed, $kills kills (CHAOS_SEED=$seed to replay)"
# A stopped rank is found by its peers' collective timeout; keep it short.
export RINGTRAIN_COLLECTIVE_TIMEOUT_SECONDS=10
example_with "$WORK/job.yaml" epochs "${CHAOS_EPOCHS:-3}" everySteps 20 backoffLimit $((kills + 2))
sed -i 's|^\(\s*\)replicas:.*|\1replicas: 3|' "$WORK/job.yaml"
sed -i "s|^\(\s*\)backoffLimit:.*|&\n\1recovery: GangRestart|" "$WORK/job.yaml"
grep -q "recovery: GangRestart" "$WORK/job.yaml" || fail "could not set runPolicy.recovery"
job=fashion-mnist-mlp
ckpts=$WORK/run/checkpoints/$job
"$BIN/ringtrain" run "$WORK/job.yaml" --workdir "$WORK/run" --summary-json "$WORK/summary.json" \
  >"$WORK/ringtrain.log" 2>&1 &
RUN_PID=$!
PIDS+=($RUN_PID)

# rank_pid ATTEMPT RANK: the pid of that rank of that attempt, if it runs.
rank_pid() { run_rank_pid "$WORK/run" "$1" "$2"; }
# newest_step: the step of the newest complete checkpoint, 0 if none.
newest_step() {
  local f best=0 n
  for f in "$ckpts"/ckpt-*.bin; do
    [ -e "$f" ] || continue
    n=${f##*/ckpt-}
    n=${n%.bin}
    [ "$n" -gt "$best" ] && best=$n
  done
  echo "$best"
}
newer_checkpoint() { [ "$(newest_step)" -gt "$1" ]; }
all_ranks_up() { rank_pid "$1" 0 && rank_pid "$1" 1 && rank_pid "$1" 2; }

rank0_at=$((RANDOM % kills))          # this kill hits rank 0 (besides any random pick of it)
write_at=$(((rank0_at + 1) % kills))  # this one hits rank 0 as it writes a checkpoint
declare -a floor                      # floor[a]: newest checkpoint seen before attempt a's kill
for ((i = 0; i < kills; i++)); do
  prev=$(newest_step)
  wait_until 180 "attempt $i: all ranks up" all_ranks_up "$i"
  # Progress in this attempt first: a checkpoint newer than any before it.
  wait_until 180 "attempt $i: a checkpoint after step $prev" newer_checkpoint "$prev"
  victim=$((RANDOM % 3))
  signal=$([ $((RANDOM % 2)) = 0 ] && echo KILL || echo STOP)
  [ "$i" = "$rank0_at" ] && victim=0
  if [ "$i" = "$write_at" ]; then
    victim=0
    signal=KILL
    pid=$(rank_pid "$i" 0) || fail "attempt $i: rank 0 not found"
    floor[i]=$(newest_step)
    # Poll without sleeping for rank 0's temp file (written, fsynced, renamed); if the write is
    # too quick to catch, kill right after the next checkpoint appears instead.
    when="right after a checkpoint write"
    deadline=$((SECONDS + 60))
    while [ $SECONDS -lt $deadline ]; do
      # Each write has a temporary file of its own: ckpt-N.bin.tmp.PID-RANDOM.K.
      if compgen -G "$ckpts/ckpt-*.bin.tmp*" >/dev/null; then
        when="during a checkpoint write"
        break
      fi
      newer_checkpoint "${floor[i]}" && break
    done
  else
    sleep "0.$((RANDOM % 10))"
    pid=$(rank_pid "$i" "$victim") || fail "attempt $i: rank $victim not found"
    floor[i]=$(newest_step)
    when="at checkpoint step ${floor[i]}"
  fi
  echo "chaos: attempt $i: SIG$signal rank $victim (pid $pid) $when"
  kill -"$signal" "$pid"
  # The gang restart replaces every rank; a stopped one is killed by the launcher.
  wait_until 120 "attempt $((i + 1)) to start" rank_pid $((i + 1)) 0
  kill -CONT "$pid" 2>/dev/null || true
done

wait_exit "$RUN_PID" 600
rc=$RC
cat "$WORK/summary.json" || true
[ "$rc" = 0 ] || fail "ringtrain run exited with $rc (seed $seed)"
[ "$(json_get "$WORK/summary.json" phase)" = Succeeded ] || fail "phase is not Succeeded"
restarts=$(json_get "$WORK/summary.json" restarts)
[ "$restarts" = "$kills" ] || fail "restarts is $restarts, expected $kills (one per kill)"
[ "$(json_get "$WORK/summary.json" attempts)" = $((kills + 1)) ] || fail "attempts is not $((kills + 1))"
[ "$(json_get "$WORK/summary.json" resumed)" = True ] || fail "the last attempt did not resume"
for ((a = 1; a <= kills; a++)); do
  log=$WORK/run/$job-a$a-0.log
  step=$(sed -n 's/.*resuming from checkpoint at step \([0-9]*\).*/\1/p' "$log" | head -n1)
  [ -n "$step" ] || fail "attempt $a did not resume from a checkpoint (seed $seed)"
  [ "$step" -gt 0 ] || fail "attempt $a resumed from step 0 (seed $seed)"
  [ "$step" -ge "${floor[a - 1]}" ] ||
    fail "attempt $a resumed from step $step, older than checkpoint ${floor[a - 1]} (seed $seed)"
  echo "chaos: attempt $a resumed from step $step (newest before the kill: ${floor[a - 1]})"
done
echo PASS
