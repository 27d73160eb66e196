#!/usr/bin/env bash
# Chaos, in place (the default runPolicy.recovery): `ringtrain run` on a 3-replica job while this
# driver SIGKILLs a random rank (rank 0 at least once) several times. Each time only that rank
# is replaced: the job stays in its first attempt, the survivors hand their state to the
# replacement, every step of the run is trained exactly once, and the job ends Succeeded with
# one in-place recovery per kill. CHAOS_SEED=N replays a run.
source "$(dirname "$0")/lib.sh"
seed=${CHAOS_SEED:-$(date +%s)}
kills=${CHAOS_KILLS:-3}
RANDOM=$seed
echo "in-place chaos: seed $seed, $kills kills (CHAOS_SEED=$seed to replay)"
example_with "$WORK/job.yaml" epochs "${CHAOS_EPOCHS:-6}" backoffLimit $((kills + 2))
sed -i 's|^\(\s*\)replicas:.*|\1replicas: 3|' "$WORK/job.yaml"
job=fashion-mnist-mlp
"$BIN/ringtrain" run "$WORK/job.yaml" --workdir "$WORK/run" --summary-json "$WORK/summary.json" \
  >"$WORK/ringtrain.log" 2>&1 &
RUN_PID=$!
PIDS+=($RUN_PID)

# rank_pid RANK: the pid of that rank of attempt 0, if it runs.
rank_pid() { run_rank_pid "$WORK/run" 0 "$1"; }
# round_of_rank0: the last recovery round rank 0's communicator was formed in (none: empty).
round_of_rank0() {
  sed -n 's/.*recovery round \([0-9]*\).*/\1/p' "$WORK/run/$job-a0-0.log" | tail -n1
}
all_ranks_up() { rank_pid 0 >/dev/null && rank_pid 1 >/dev/null && rank_pid 2 >/dev/null; }
in_round() { [ "$(round_of_rank0)" = "$1" ]; }
# training: the gang formed (round 0's communicator) and is training.
training() { grep -q "communicator ready" "$WORK/run/$job-a0-0.log" 2>/dev/null; }

rank0_at=$((RANDOM % kills))
for ((i = 0; i < kills; i++)); do
  wait_until 180 "kill $i: all ranks up" all_ranks_up
  [ "$i" = 0 ] && wait_until 120 "the gang to train" training
  # Some training in this round first.
  sleep "0.$((RANDOM % 10))"
  victim=$((RANDOM % 3))
  [ "$i" = "$rank0_at" ] && victim=0
  pid=$(rank_pid "$victim") || fail "kill $i: rank $victim not found"
  echo "in-place chaos: kill $i: SIGKILL rank $victim (pid $pid)"
  kill -KILL "$pid"
  # The gang re-forms in place: every rank of attempt 0 in the next recovery round.
  wait_until 120 "kill $i: recovery round $((i + 1))" in_round $((i + 1))
done

wait_exit "$RUN_PID" 600
rc=$RC
cat "$WORK/summary.json" || true
[ "$rc" = 0 ] || fail "ringtrain run exited with $rc (seed $seed)"
[ "$(json_get "$WORK/summary.json" phase)" = Succeeded ] || fail "phase is not Succeeded"
[ "$(json_get "$WORK/summary.json" attempts)" = 1 ] || fail "the gang restarted (seed $seed)"
[ "$(json_get "$WORK/summary.json" in_place_recoveries)" = "$kills" ] ||
  fail "in_place_recoveries is not $kills (seed $seed)"
# 60000 samples / (64 × 3) a step = 313 steps an epoch.
expected=$((313 * ${CHAOS_EPOCHS:-6}))
[ "$(json_get "$WORK/summary.json" steps)" = "$expected" ] ||
  fail "steps is $(json_get "$WORK/summary.json" steps), expected $expected (seed $seed)"
# The run started fresh: a recovery's start step is no checkpoint's.
grep -q "resum" "$WORK/ringtrain.log" && fail "ringtrain run announced a resume (seed $seed)"
# Rank 0's logs (a replaced rank 0's log is kept as .log.N) say it recovered once per kill.
n=$(cat "$WORK/run/$job-a0-0.log"* | grep -c "recovered in place")
[ "$n" = "$kills" ] || fail "rank 0 logged $n in-place recoveries, expected $kills (seed $seed)"
echo PASS
