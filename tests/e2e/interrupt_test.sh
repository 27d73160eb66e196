#!/usr/bin/env bash
# Ctrl-C (SIGINT) stops `ringtrain run` and every rank it started: exit code 130, no runner
# left behind, and the summary says Interrupted. A rank stopped while it waits for the
# rendezvous (SIGTERM: a deleted pod) or while it retries the store (SIGINT) exits at once with
# 143/130 instead of running on until the 300 s rendezvous timeout. What a spec.command started
# (sh -c "sleep ...; ...") ends with its rank, at Ctrl-C and at the end of the job.
source "$(dirname "$0")/lib.sh"

# A spec.command's own children: a number no other process sleeps for.
nap=$((777000 + $$ % 1000))
cat >"$WORK/nap.yaml" <<YAML
apiVersion: ringtrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: nap}
spec:
  replicas: 2
  command: ["sh", "-c", "sleep $nap; echo done"]
YAML
"$BIN/ringtrain" run "$WORK/nap.yaml" --workdir "$WORK/nap" >"$WORK/nap.log" 2>&1 &
RUN_PID=$!
PIDS+=($RUN_PID)
naps() { [ "$(pgrep -fx "sleep $nap" | wc -l)" = "$1" ]; }
wait_until 60 "both ranks' sleep" naps 2
kill -INT "$RUN_PID"
wait_exit "$RUN_PID" 60
[ "$RC" = 130 ] || fail "nap: ringtrain run exited with $RC after SIGINT, expected 130"
wait_until 30 "the ranks' sleep ended" naps 0
# A closed terminal (SIGHUP) and SIGTERM stop it as Ctrl-C does, with 128 + the signal: SIGHUP
# killed ringtrain at once (its ranks SIGKILLed, no checkpoint at a stop step), SIGTERM read 130.
for sig in HUP TERM; do
  "$BIN/ringtrain" run "$WORK/nap.yaml" --workdir "$WORK/nap-$sig" >"$WORK/nap-$sig.log" 2>&1 &
  RUN_PID=$!
  PIDS+=($RUN_PID)
  wait_until 60 "both ranks' sleep (SIG$sig)" naps 2
  kill -"$sig" "$RUN_PID"
  wait_exit "$RUN_PID" 60
  want=$((128 + $(kill -l "$sig")))
  [ "$RC" = "$want" ] || fail "nap: ringtrain run exited with $RC after SIG$sig, expected $want"
  grep -q "interrupted: stopping the ranks" "$WORK/nap-$sig.log" ||
    fail "SIG$sig: the ranks were not stopped as at Ctrl-C: $(tail -n 5 "$WORK/nap-$sig.log")"
  wait_until 30 "the ranks' sleep ended (SIG$sig)" naps 0
done
# Under nohup a hang-up is ignored, as nohup asks: the run goes on (then Ctrl-C stops it).
nohup "$BIN/ringtrain" run "$WORK/nap.yaml" --workdir "$WORK/nap-nohup" >"$WORK/nap-nohup.log" 2>&1 &
RUN_PID=$!
PIDS+=($RUN_PID)
wait_until 60 "both ranks' sleep (nohup)" naps 2
kill -HUP "$RUN_PID"
sleep 1
kill -0 "$RUN_PID" 2>/dev/null || fail "nohup: a hang-up stopped ringtrain run: $(tail -n 5 "$WORK/nap-nohup.log")"
naps 2 || fail "nohup: the ranks' sleep ended at a hang-up"
kill -INT "$RUN_PID"
wait_exit "$RUN_PID" 60
[ "$RC" = 130 ] || fail "nohup: ringtrain run exited with $RC after SIGINT, expected 130"
wait_until 30 "the ranks' sleep ended (nohup)" naps 0
# Its janitor (a fork with its command line) ends with it.
no_run() { ! pgrep -f -- "--workdir $1( |\$)" >/dev/null; }
wait_until 30 "no process of the nohup run left" no_run "$WORK/nap-nohup"
# A kill -9 of ringtrain run (the OOM killer, a CI job's timeout) stops nothing itself, and its
# ranks die with it (PR_SET_PDEATHSIG), but what they started ran on, orphaned, until its
# janitor (common/group_janitor.h): SIGTERM, then SIGKILL after the grace to what ignores it.
stubborn_nap=$((778000 + $$ % 1000))
# Should the janitor fail, its orphans (the one ignores SIGTERM) must not outlive the test.
trap 'pkill -9 -fx "sleep $stubborn_nap" || true; pkill -9 -fx "sleep $nap" || true; cleanup' EXIT
cat >"$WORK/nap-kill.yaml" <<YAML
apiVersion: ringtrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: nap-kill}
spec:
  replicas: 2
  command: ["sh", "-c", "(trap '' TERM; exec sleep $stubborn_nap) & sleep $nap; echo done"]
YAML
# Its stdin closed: the janitor's pipe must not take descriptor 0 (which it points at /dev/null).
"$BIN/ringtrain" run "$WORK/nap-kill.yaml" --workdir "$WORK/nap-kill" --grace-period 2 \
  >"$WORK/nap-kill.log" 2>&1 <&- &
RUN_PID=$!
PIDS+=($RUN_PID)
stubborn_naps() { [ "$(pgrep -fx "sleep $stubborn_nap" | wc -l)" = "$1" ]; }
wait_until 60 "both ranks' sleep (kill -9)" naps 2
wait_until 60 "both ranks' sleep that ignores SIGTERM" stubborn_naps 2
kill -9 "$RUN_PID"
wait_exit "$RUN_PID" 60
[ "$RC" = 137 ] || fail "kill -9: ringtrain run exited with $RC"
wait_until 30 "the ranks' sleep ended after a kill -9 of ringtrain run" naps 0
wait_until 60 "the sleep that ignores SIGTERM ended (SIGKILL after the grace)" stubborn_naps 0
grep -qF "ended with 2 rank process group(s) still running: SIGTERM, SIGKILL after 2s" \
  "$WORK/nap-kill.log" || fail "kill -9: no word of the janitor: $(tail -n 5 "$WORK/nap-kill.log")"
wait_until 30 "the janitor of the killed run ended" no_run "$WORK/nap-kill"
# A rank whose command failed ends the job: its peer's sleep ends with it.
cat >"$WORK/nap-fail.yaml" <<YAML
apiVersion: ringtrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: nap-fail}
spec:
  replicas: 2
  command: ["sh", "-c", "[ \$RANK = 1 ] && { while ! pgrep -fx 'sleep $nap' >/dev/null; do sleep 0.1; done; exit 3; }; sleep $nap; echo done"]
YAML
"$BIN/ringtrain" run "$WORK/nap-fail.yaml" --workdir "$WORK/nap-fail" >"$WORK/nap-fail.log" 2>&1 &
RUN_PID=$!
PIDS+=($RUN_PID)
wait_exit "$RUN_PID" 60
[ "$RC" = 1 ] || fail "nap-fail: ringtrain run exited with $RC, expected 1 (a failed job)"
wait_until 30 "rank 0's sleep ended with the job" naps 0

# Ranks that ignore SIGTERM: the first Ctrl-C gives them their grace (--grace-period 600 here),
# a second one kills them at once.
cat >"$WORK/stubborn.yaml" <<YAML
apiVersion: ringtrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: stubborn}
spec:
  replicas: 2
  command: ["sh", "-c", ": stubborn-$$; trap '' TERM; while :; do sleep 0.2; done"]
YAML
"$BIN/ringtrain" run "$WORK/stubborn.yaml" --workdir "$WORK/stubborn" --grace-period 600 \
  >"$WORK/stubborn.log" 2>&1 &
RUN_PID=$!
PIDS+=($RUN_PID)
stubborn() { [ "$(pgrep -f "stubborn-$$" | wc -l)" = "$1" ]; }
wait_until 60 "both stubborn ranks" stubborn 2
# One stop that arrives twice at once (GNU timeout signals its child, then its group) is one.
kill -INT "$RUN_PID"
kill -INT "$RUN_PID"
wait_until 30 "the first interrupt said so" grep -q "interrupted: stopping the ranks" "$WORK/stubborn.log"
sleep 1
kill -0 "$RUN_PID" 2>/dev/null || fail "stubborn: ringtrain run ended before its ranks' grace"
stubborn 2 || fail "stubborn: a rank that ignores SIGTERM ended before its grace"
kill -INT "$RUN_PID"
wait_exit "$RUN_PID" 60
[ "$RC" = 130 ] || fail "stubborn: ringtrain run exited with $RC after a second SIGINT, expected 130"
grep -q "interrupted again: killing the ranks" "$WORK/stubborn.log" || fail "stubborn: no kill line"
wait_until 30 "the stubborn ranks ended" stubborn 0

# A Ctrl-C after the job ended (rank 1 failed for good) while rank 0 still has its grace: the
# job's outcome stands (Failed, exit 1), the rank is killed at once.
cat >"$WORK/ended.yaml" <<YAML
apiVersion: ringtrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: ended}
spec:
  replicas: 2
  command: ["sh", "-c", ": ended-$$; trap '' TERM; [ \$RANK = 1 ] && { while [ ! -e $WORK/ended-ready ]; do sleep 0.1; done; exit 1; }; touch $WORK/ended-ready; while :; do sleep 0.2; done"]
YAML
"$BIN/ringtrain" run "$WORK/ended.yaml" --workdir "$WORK/ended" --grace-period 600 \
  --summary-json "$WORK/ended.json" >"$WORK/ended.log" 2>&1 &
RUN_PID=$!
PIDS+=($RUN_PID)
wait_until 60 "the job failed" grep -q "PermanentFailure" "$WORK/ended.log"
kill -INT "$RUN_PID"
wait_exit "$RUN_PID" 60
[ "$RC" = 1 ] || fail "ended: ringtrain run exited with $RC after the job failed, expected 1"
[ "$(json_get "$WORK/ended.json" phase)" = Failed ] || fail "ended: summary phase"
no_ended() { [ "$(pgrep -f "ended-$$" | wc -l)" = 0 ]; }
wait_until 30 "the lingering rank ended" no_ended

# Rank 0 hosts the store and waits for a rank that never comes.
port=$(free_port)
RINGTRAIN_RENDEZVOUS_TIMEOUT_SECONDS=300 start_rank 0 2 "$port" tok "$WORK/rdzv.log" --epochs 1
rdzv=$LAST_PID
wait_until 120 "rank 0 waiting in the rendezvous" grep -q "rendezvous store listening" "$WORK/rdzv.log"
sleep 0.5
kill -TERM "$rdzv"
# Far below the 300 s rendezvous timeout; generous for a loaded machine.
wait_exit "$rdzv" 30
[ "$RC" = 143 ] || fail "SIGTERM during the rendezvous: exit $RC, expected 143"
grep -q "SIGTERM" "$WORK/rdzv.log.termination" || fail "termination message does not say SIGTERM"

# Rank 1 retries a store that is not there yet.
port=$(free_port)
RINGTRAIN_RENDEZVOUS_TIMEOUT_SECONDS=300 start_rank 1 2 "$port" tok "$WORK/dial.log" --epochs 1
dial=$LAST_PID
wait_until 120 "rank 1 loading done" grep -q "loaded" "$WORK/dial.log"
sleep 0.5
kill -INT "$dial"
wait_exit "$dial" 30
[ "$RC" = 130 ] || fail "SIGINT while connecting to the store: exit $RC, expected 130"
example_with "$WORK/job.yaml" epochs 50
"$BIN/ringtrain" run "$WORK/job.yaml" --workdir "$WORK/run" --summary-json "$WORK/summary.json" \
  >"$WORK/ringtrain.log" 2>&1 &
RUN_PID=$!
PIDS+=($RUN_PID)
ranks_training() { [ "$(grep -l "communicator ready" "$WORK"/run/*.log 2>/dev/null | wc -l)" = 2 ]; }
wait_until 120 "both ranks training" ranks_training
# A second run in the same work directory is refused at once (its flock), and leaves the
# first one's files alone.
rc=0
timeout 60 "$BIN/ringtrain" run "$WORK/job.yaml" --workdir "$WORK/run" >"$WORK/second.out" 2>&1 ||
  rc=$?
[ "$rc" = 1 ] || fail "a second run in the same work dir exited with $rc: $(cat "$WORK/second.out")"
grep -qF "work directory $WORK/run is in use by another \`ringtrain run\` (pid $RUN_PID)" \
  "$WORK/second.out" || fail "second run: no word of the lock: $(cat "$WORK/second.out")"
# Progress seen (rank 0's /status): the summary of the interrupted run says how far it got.
wait_until 120 "progress on the console" grep -q "| step [1-9]" "$WORK/ringtrain.log"
kill -INT "$RUN_PID"
wait_exit "$RUN_PID" 60
[ "$RC" = 130 ] || fail "ringtrain run exited with $RC after SIGINT, expected 130"
left=$(pgrep -f -- "$WORK/run/checkpoints" || true)
[ -z "$left" ] || fail "runner processes left behind: $left"
[ "$(json_get "$WORK/summary.json" phase)" = Interrupted ] || fail "summary phase"
[ "$(json_get "$WORK/summary.json" reason)" = Interrupted ] &&
  [ "$(json_get "$WORK/summary.json" message)" = "ringtrain run got SIGINT and stopped the ranks" ] ||
  fail "summary reason/message: $(cat "$WORK/summary.json")"
[ "$(json_get "$WORK/summary.json" from_last_progress)" = True ] &&
  [ "$(json_get "$WORK/summary.json" steps)" -gt 0 ] ||
  fail "summary: no steps from the last progress: $(cat "$WORK/summary.json")"
# Never behind the checkpoint rank 0 wrote as it stopped (the last /status read may be a second
# older: "steps": 0 beside "checkpoint_step": 256 was seen), and the console says the same, and
# no test loss it never read.
steps=$(json_get "$WORK/summary.json" steps)
[ "$steps" -ge "$(json_get "$WORK/summary.json" checkpoint_step)" ] ||
  fail "summary: steps $steps behind the newest checkpoint: $(cat "$WORK/summary.json")"
if [ "$(json_get "$WORK/summary.json" from_checkpoint)" = True ]; then
  grep -q "^  trained to step $steps (its newest checkpoint)" "$WORK/ringtrain.log" ||
    fail "console: no 'trained to' line: $(tail -n 6 "$WORK/ringtrain.log")"
else
  grep -q "^  last progress seen: step $steps" "$WORK/ringtrain.log" ||
    fail "console: no last progress line: $(tail -n 6 "$WORK/ringtrain.log")"
fi
grep -q "test loss" "$WORK/ringtrain.log" && fail "console: a test loss of an interrupted run"
# Rank 0 checkpointed as it stopped: the summary names that checkpoint and how to resume.
step=$(json_get "$WORK/summary.json" checkpoint_step)
ckpt=$(json_get "$WORK/summary.json" checkpoint_path)
[ "$ckpt" = "$WORK/run/checkpoints/fashion-mnist-mlp/ckpt-$step.bin" ] && [ -f "$ckpt" ] ||
  fail "summary checkpoint: step $step, path $ckpt"
resume="ringtrain run $WORK/job.yaml --workdir $WORK/run"
[ "$(json_get "$WORK/summary.json" resume_command)" = "$resume" ] || fail "summary resume_command"
grep -qF "newest checkpoint: step $step, $ckpt" "$WORK/ringtrain.log" &&
  grep -qF "to resume from it: $resume" "$WORK/ringtrain.log" ||
  fail "the console does not say how to resume: $(tail -n 5 "$WORK/ringtrain.log")"

# That command, interrupted again once it trains: without rank 0's result, the summary still says
# it resumed, and from where (the console's "resuming from step"); it left both out (review).
"$BIN/ringtrain" run "$WORK/job.yaml" --workdir "$WORK/run" --summary-json "$WORK/resumed.json" \
  >"$WORK/resumed.log" 2>&1 &
RUN_PID=$!
PIDS+=($RUN_PID)
wait_until 120 "the run says it resumes" grep -q "resuming from step $step of" "$WORK/resumed.log"
wait_until 120 "progress of the resumed run" grep -q "| step [1-9]" "$WORK/resumed.log"
kill -INT "$RUN_PID"
wait_exit "$RUN_PID" 60
[ "$RC" = 130 ] || fail "the resumed run exited with $RC after SIGINT, expected 130"
[ "$(json_get "$WORK/resumed.json" resumed)" = True ] ||
  fail "resumed summary: no resumed: $(cat "$WORK/resumed.json")"
total=$(json_get "$WORK/resumed.json" steps)
this_run=$(json_get "$WORK/resumed.json" steps_this_run)
[ "$((total - this_run))" = "$step" ] ||
  fail "resumed summary: steps $total - steps_this_run $this_run is not step $step"
echo PASS
