#!/usr/bin/env bash
# A reused --workdir: each job keeps its checkpoints in checkpoints/<job name> of it, so another
# job there starts from step 0 instead of resuming from the first one's; the same job resumes,
# and `ringtrain run` says so on the console: "resuming from step N of DIR" once rank 0 trains,
# or "resumed ..." from the result when the run ended before a look at rank 0 saw it train.
# Short runs: the runner is wrapped to stop after a few steps ($EXTRA: more flags).
source "$(dirname "$0")/lib.sh"
cat >"$WORK/runner.sh" <<SH
#!/bin/sh
exec "$BIN/ringtrain-runner" "\$@" --max-steps 20 \${EXTRA:-}
SH
chmod +x "$WORK/runner.sh"

# job NAME: the shipped MLP example as NAME, one replica, a checkpoint every 10 steps.
job() {
  example_with "$WORK/$1.yaml" epochs 1 everySteps 10
  sed -i "s|^\(\s*\)replicas:.*|\1replicas: 1|; s|^\(\s*\)name: fashion-mnist-mlp|\1name: $1|" \
    "$WORK/$1.yaml"
}
# run NAME OUT: `ringtrain run` of $WORK/NAME.yaml in the shared work dir; OUT.out, OUT.json.
run() {
  EXTRA=${EXTRA:-} timeout 300 "$BIN/ringtrain" run "$WORK/$1.yaml" --workdir "$WORK/shared" \
    --runner "$WORK/runner.sh" --summary-json "$WORK/$2.json" >"$WORK/$2.out" 2>&1 ||
    fail "$2: ringtrain run exited with $?: $(tail -n 5 "$WORK/$2.out")"
}

job first
# What an earlier version kept for every job in checkpoints/ itself: said, never used.
mkdir -p "$WORK/shared/checkpoints"
echo "not a checkpoint" >"$WORK/shared/checkpoints/ckpt-7.bin"
run first first
grep -qF "$WORK/shared/checkpoints holds checkpoints of an earlier ringtrain" "$WORK/first.out" ||
  fail "first: no word of the checkpoints of an earlier version: $(cat "$WORK/first.out")"
[ "$(json_get "$WORK/first.json" resumed)" = False ] || fail "first: resumed in a new work dir"
compgen -G "$WORK/shared/checkpoints/first/ckpt-*.bin" >/dev/null ||
  fail "first: no checkpoint in checkpoints/first: $(ls -R "$WORK/shared")"
grep -q "resuming from step" "$WORK/first.out" && fail "first: says it resumes"

job second
run second second
[ "$(json_get "$WORK/second.json" resumed)" = False ] ||
  fail "second: resumed from the first job's checkpoints"
[ "$(json_get "$WORK/second.json" steps)" = 20 ] || fail "second: did not train from step 0"
compgen -G "$WORK/shared/checkpoints/second/ckpt-*.bin" >/dev/null ||
  fail "second: no checkpoint in checkpoints/second"
grep -q "resuming from step" "$WORK/second.out" && fail "second: says it resumes"

# The first job again, slowed so that ringtrain sees rank 0 train: it resumes from its own
# newest checkpoint, and says so once, while it trains.
EXTRA="--step-sleep-ms 150" run first again
# resumed_from OUT: where the run of OUT.json started.
resumed_from() {
  python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(s["steps"] - s["steps_this_run"])' \
    "$WORK/$1.json"
}
[ "$(json_get "$WORK/again.json" resumed)" = True ] || fail "again: did not resume"
from=$(resumed_from again)
[ "$from" -gt 0 ] || fail "again: resumed from step $from"
grep -qF "resuming from step $from of $WORK/shared/checkpoints/first" "$WORK/again.out" ||
  fail "again: the console does not say where it resumes from: $(cat "$WORK/again.out")"
[ "$(grep -c "resum" "$WORK/again.out")" = 1 ] || fail "again: said it more than once"

# And fast: the result says where it started.
run first fast
from=$(resumed_from fast)
[ "$from" -gt 0 ] || fail "fast: resumed from step $from"
grep -qE "resum(ing|ed) from step $from of $WORK/shared/checkpoints/first" "$WORK/fast.out" ||
  fail "fast: the console does not say where it resumed from: $(cat "$WORK/fast.out")"
[ "$(grep -c "resum" "$WORK/fast.out")" = 1 ] || fail "fast: said it more than once"
echo PASS
