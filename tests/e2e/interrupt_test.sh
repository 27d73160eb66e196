#!/usr/bin/env bash
# Ctrl-C (SIGINT) stops `ringtrain run` and every rank it started: exit code 130, no runner
# left behind, and the summary says Interrupted.
source "$(dirname "$0")/lib.sh"
example_with "$WORK/job.yaml" epochs 50
"$BIN/ringtrain" run "$WORK/job.yaml" --workdir "$WORK/run" --summary-json "$WORK/summary.json" \
  >"$WORK/ringtrain.log" 2>&1 &
RUN_PID=$!
PIDS+=($RUN_PID)
ranks_training() { [ "$(grep -l "communicator ready" "$WORK"/run/*.log 2>/dev/null | wc -l)" = 2 ]; }
wait_until 120 "both ranks training" ranks_training
kill -INT "$RUN_PID"
wait_exit "$RUN_PID" 60
[ "$RC" = 130 ] || fail "ringtrain run exited with $RC after SIGINT, expected 130"
left=$(pgrep -f -- "$WORK/run/checkpoints" || true)
[ -z "$left" ] || fail "runner processes left behind: $left"
[ "$(json_get "$WORK/summary.json" phase)" = Interrupted ] || fail "summary phase"
echo PASS
