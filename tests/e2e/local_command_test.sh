#!/usr/bin/env bash
# spec.command under `ringtrain run` runs as it runs in a pod (issue 23): the program found on
# the rank's PATH (["sh", "-c", ...], ["python3", ...]), a relative path against spec.template's
# workingDir, the runner container's env ($(VAR) expanded, fieldRef metadata.name), and a
# failure reported with the pod's exit code and termination message: the file, or the end of the
# log (FallbackToLogsOnError: 80 lines or 2048 bytes). A program that cannot be found or run is
# a permanent failure (127/126) named on the console and in the summary; a valueFrom that needs
# a cluster is refused before anything starts, unless ringtrain's environment has the variable.
# The expectations for sh are those of tests/e2e/container_kubelet_test.sh's fail-pod;
# tests/e2e/container_command_test.sh runs these manifests in pods and compares.
source "$(dirname "$0")/lib.sh"
cd "$WORK" || fail "cd $WORK"

# job NAME REPLICAS COMMAND-JSON [TEMPLATE-YAML]: a manifest $WORK/NAME.yaml.
job() {
  cat >"$WORK/$1.yaml" <<YAML
apiVersion: ringtrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: $1}
spec:
  replicas: $2
  command: $3
  runPolicy: {backoffLimit: 2}
YAML
  [ -z "${4:-}" ] || printf '  template:\n%s\n' "$4" >>"$WORK/$1.yaml"
}
# run NAME [ENV=VALUE...]: `ringtrain run` of $WORK/NAME.yaml; RC, $WORK/NAME.out, NAME.json.
run() {
  local name=$1
  shift
  env "$@" timeout 120 "$BIN/ringtrain" run "$WORK/$name.yaml" --workdir "$WORK/$name" \
    --summary-json "$WORK/$name.json" >"$WORK/$name.out" 2>&1 && RC=0 || RC=$?
}
# failure NAME FIELD: last_failure.FIELD of NAME's summary.
failure() {
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["last_failure"][sys.argv[2]])' \
    "$WORK/$1.json" "$2"
}
expect() {  # expect WHAT GOT WANTED
  [ "$2" = "$3" ] || fail "$1: got '$2', want '$3'"
  echo "ok: $1"
}
console_has() { grep -qF -- "$2" "$WORK/$1.out" || fail "$1: console lacks '$2': $(cat "$WORK/$1.out")"; }

# sh on PATH; the message is the log's end (the termination file is empty), as in fail-pod.
job sh-fail 1 '["sh", "-c", "echo to-the-log; exit 3"]'
run sh-fail
expect "sh-fail: ringtrain run exit code" "$RC" 1
expect "sh-fail: phase" "$(json_get "$WORK/sh-fail.json" phase)" Failed
expect "sh-fail: exit code" "$(failure sh-fail exit_code)" 3
expect "sh-fail: reason" "$(failure sh-fail reason)" Error
expect "sh-fail: message (log fallback)" "$(failure sh-fail message)" to-the-log
expect "sh-fail: restarts (exit 3 is permanent)" "$(json_get "$WORK/sh-fail.json" restarts)" 0
expect "sh-fail: reason (the Failed condition's)" "$(json_get "$WORK/sh-fail.json" reason)" \
  PermanentFailure
console_has sh-fail "last failure: rank 0 exit code 3 (Error): to-the-log"

# sh that writes its termination message: the file wins over the log; a gang of two.
job sh-term 2 '["sh", "-c", "echo noise; [ $RANK = 1 ] || exit 0; echo \"bad shard $(RINGTRAIN_RANK) of $WORLD_SIZE\" > $RINGTRAIN_TERMINATION_LOG; exit 4"]'
run sh-term
expect "sh-term: exit code" "$(failure sh-term exit_code)" 4
expect "sh-term: rank" "$(failure sh-term rank)" 1
expect "sh-term: message (file, \$(VAR) expanded)" "$(failure sh-term message)" "bad shard 1 of 2"

# python3 on PATH, train.py relative to spec.template's workingDir, env from the runner
# container ($(VAR) expanded, fieldRef metadata.name), the args expanded too.
mkdir -p "$WORK/app"
cat >"$WORK/app/train.py" <<'PY'
import os, sys
rank = int(os.environ["RANK"])
print("rank", rank, "starting in", os.getcwd(), flush=True)
if rank != 1:
    sys.exit(0)
with open(os.environ["RINGTRAIN_TERMINATION_LOG"], "w") as f:
    f.write("loss is nan (%s, tag %s, cwd %s)\n" % (os.environ["POD_NAME"], sys.argv[2], os.getcwd()))
sys.exit(3)
PY
job py 2 '["python3", "train.py", "--tag", "$(TAG)"]' "    spec:
      containers:
        - name: runner
          workingDir: $WORK/app
          env:
            - {name: TAG, value: \"t-\$(RINGTRAIN_RANK)\"}
            - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}"
run py
expect "py: exit code" "$(failure py exit_code)" 3
expect "py: message" "$(failure py message)" "loss is nan (py-a0-1, tag t-1, cwd $WORK/app)"
console_has py "last failure: rank 1 exit code 3 (Error): loss is nan (py-a0-1"

# torchrun's own settings (PET_*), which it reads where no flag gives them: `torchrun train.py`
# joins the gang with no flag (review: every replica trained a world of its own).
job pet 2 '["sh", "-c", "[ $RANK = 1 ] || exit 0; s=other; [ $PET_MASTER_ADDR:$PET_MASTER_PORT = $MASTER_ADDR:$MASTER_PORT ] && s=same; echo \"$PET_NNODES $PET_NODE_RANK $PET_NPROC_PER_NODE $LOCAL_WORLD_SIZE $s\" > $RINGTRAIN_TERMINATION_LOG; exit 4"]'
run pet
expect "pet: torchrun's nodes, node rank, processes per node, local world, master" \
  "$(failure pet message)" "2 1 1 1 same"

# runPolicy.restartPolicy OnFailure: exit 1 (torchrun's for a lost worker) restarts the gang,
# counted, where ExitCode (the default, above) fails the job; the second attempt succeeds.
job once 2 '["sh", "-c", "[ $RANK = 1 ] || exit 0; [ -e \"$ONCE\" ] && exit 0; touch \"$ONCE\"; exit 1"]'
sed -i 's/  runPolicy: {backoffLimit: 2}/  runPolicy: {backoffLimit: 2, restartPolicy: OnFailure}/' "$WORK/once.yaml"
run once ONCE="$WORK/once.marker"
expect "once: ringtrain run exit code ($(tail -n 3 "$WORK/once.out"))" "$RC" 0
expect "once: phase" "$(json_get "$WORK/once.json" phase)" Succeeded
expect "once: restarts (exit 1 restarted under OnFailure)" "$(json_get "$WORK/once.json" restarts)" 1

# The same, succeeding: the job Succeeds and ringtrain run exits 0.
job py-ok 2 '["python3", "-c", "import os; assert os.getcwd() == os.environ[\"WANT\"]"]' "    spec:
      containers:
        - name: runner
          workingDir: app
          env: [{name: WANT, value: \"$WORK/app\"}]"
run py-ok
expect "py-ok: ringtrain run exit code ($(tail -n 3 "$WORK/py-ok.out"))" "$RC" 0
expect "py-ok: phase" "$(json_get "$WORK/py-ok.json" phase)" Succeeded

# Every replica runs on this machine and shares its GPUs: each learns how many ranks share them
# and its first place among them (what a device plugin's per-pod GPUs make unnecessary in a pod).
job host 3 '["sh", "-c", "[ \"$RINGTRAIN_HOST_RANKS $RINGTRAIN_HOST_RANK_BASE\" = \"3 $RANK\" ] || { echo \"host $RINGTRAIN_HOST_RANKS base $RINGTRAIN_HOST_RANK_BASE rank $RANK\" > $RINGTRAIN_TERMINATION_LOG; exit 4; }"]'
run host
expect "host: phase ($(tail -n 2 "$WORK/host.out"))" "$(json_get "$WORK/host.json" phase)" Succeeded

# A program not on PATH: a permanent failure at once, named on the console and in the summary.
job missing 2 '["no-such-trainer", "--epochs", "1"]'
run missing
expect "missing: ringtrain run exit code" "$RC" 1
expect "missing: exit code" "$(failure missing exit_code)" 127
expect "missing: reason" "$(failure missing reason)" StartError
msg=$(failure missing message)
[[ "$msg" == 'exec "no-such-trainer": not found on PATH ('*')' ]] || fail "missing: message '$msg'"
echo "ok: missing: message '$msg'"
expect "missing: restarts" "$(json_get "$WORK/missing.json" restarts)" 0
console_has missing 'exit code 127 (StartError): exec "no-such-trainer": not found on PATH'
grep -qF "$msg" "$WORK/missing/missing-a0-0.log" || fail "missing: the rank's log lacks why"

# A relative path against the working directory: found, missing, and not executable.
printf '#!/bin/sh\necho "ran in $(pwd)" > "$RINGTRAIN_TERMINATION_LOG"\nexit 5\n' >"$WORK/app/run.sh"
chmod +x "$WORK/app/run.sh"
cp "$WORK/app/run.sh" "$WORK/app/noexec.sh"
chmod -x "$WORK/app/noexec.sh"
wd="    spec: {containers: [{name: runner, workingDir: $WORK/app}]}"
job rel 1 '["./run.sh"]' "$wd"
run rel
expect "rel: exit code" "$(failure rel exit_code)" 5
expect "rel: message" "$(failure rel message)" "ran in $WORK/app"
job rel-missing 1 '["./nope.sh"]' "$wd"
run rel-missing
expect "rel-missing: exit code" "$(failure rel-missing exit_code)" 127
expect "rel-missing: message" "$(failure rel-missing message)" \
  "exec \"./nope.sh\": No such file or directory (relative to $WORK/app)"
job rel-noexec 1 '["./noexec.sh"]' "$wd"
run rel-noexec
expect "rel-noexec: exit code" "$(failure rel-noexec exit_code)" 126
expect "rel-noexec: message" "$(failure rel-noexec message)" \
  "exec \"./noexec.sh\": Permission denied (relative to $WORK/app)"
job no-wd 1 '["sh", "-c", "true"]' "    spec: {containers: [{name: runner, workingDir: $WORK/gone}]}"
run no-wd
expect "no-wd: exit code" "$(failure no-wd exit_code)" 126
expect "no-wd: message" "$(failure no-wd message)" \
  "workingDir \"$WORK/gone\": No such file or directory"

# FallbackToLogsOnError's limits: the last 80 lines, or the last 2048 bytes when fewer.
job lines 1 '["sh", "-c", "for i in $(seq 1 100); do echo line-$i; done; exit 2"]'
run lines
want=$(seq 21 100 | sed 's/^/line-/')
expect "lines: message is the last 80 lines" "$(failure lines message)" "$want"
console_has lines "    line-100"
job bytes 1 '["sh", "-c", "for i in $(seq 1 60); do printf \"%099d\\n\" $i; done; exit 2"]'
run bytes
want=$(for i in $(seq 1 60); do printf "%099d\n" "$i"; done | tail -c 2048)
expect "bytes: message is the last 2048 bytes" "$(failure bytes message)" "$want"

# A Secret-fed variable: refused before any rank starts, naming it; taken from ringtrain's
# environment when exported there.
job secret 1 '["sh", "-c", "[ \"$API_KEY\" = s3cret ] || exit 9"]' "    spec:
      containers:
        - name: runner
          env: [{name: API_KEY, valueFrom: {secretKeyRef: {name: creds, key: api}}}]"
run secret
expect "secret: refused (exit code)" "$RC" 1
console_has secret "env[0] (API_KEY): valueFrom.secretKeyRef (secret \"creds\", key \"api\") is not available under \`ringtrain run\`"
[ ! -e "$WORK/secret/secret-a0-0.log" ] || fail "secret: a rank started"
# validate: valid for a cluster, with a note that ringtrain run will refuse it (unless exported).
"$BIN/ringtrain" validate "$WORK/secret.yaml" >"$WORK/secret-validate.out" 2>&1 && RC=0 || RC=$?
expect "secret: validate exit code" "$RC" 0
grep -qF "note: \`ringtrain run\` will refuse this job:" "$WORK/secret-validate.out" ||
  fail "secret: validate has no note: $(cat "$WORK/secret-validate.out")"
run secret API_KEY=s3cret
expect "secret: exported (exit code: $(tail -n 3 "$WORK/secret.out"))" "$RC" 0
console_has secret "using API_KEY from ringtrain's environment"
# A reused --workdir: an earlier run's result is not this job's. A job that never trained
# (here one whose command fails) reports no accuracy, on the console or in the summary.
mkdir -p "$WORK/stale"
echo '{"test_accuracy": 0.895, "test_loss": 0.3, "steps": 940}' >"$WORK/stale/result-stale-attempt-0.json"
# What an earlier version wrote, whatever the job.
cp "$WORK/stale/result-stale-attempt-0.json" "$WORK/stale/result-attempt-0.json"
job stale 1 '["sh", "-c", "exit 3"]'
run stale
expect "stale: ringtrain run exit code" "$RC" 1
python3 -c 'import json,sys; sys.exit("test_accuracy" in json.load(open(sys.argv[1])))' \
  "$WORK/stale.json" || fail "stale: the summary has an earlier run's accuracy"
grep -q "test accuracy" "$WORK/stale.out" && fail "stale: the console shows an earlier run's accuracy"
[ ! -e "$WORK/stale/result-stale-attempt-0.json" ] || fail "stale: the earlier result is still there"
[ ! -e "$WORK/stale/result-attempt-0.json" ] || fail "stale: an earlier version's result is still there"
echo "ok: stale: an earlier run's result is not reported"

# --summary-json a FIFO another process reads: checked without opening it (an open and close
# would end the reader's input, and the summary's own open then waits for a reader forever).
job fifo 1 '["sh", "-c", "true"]'
mkfifo "$WORK/fifo.json"
cat "$WORK/fifo.json" >"$WORK/fifo-read.json" &
reader=$!
run fifo
expect "fifo: ringtrain run exit code" "$RC" 0
wait "$reader" || fail "fifo: the reader failed"
[ "$(json_get "$WORK/fifo-read.json" phase)" = Succeeded ] || fail "fifo: the reader got no summary"
echo "ok: fifo: the summary reaches a FIFO's reader"

# A job ended by runPolicy.activeDeadlineSeconds: no replica failed, so the summary says why
# with the Failed condition's reason and message.
job deadline 1 '["sh", "-c", "sleep 60"]'
sed -i 's/runPolicy: {backoffLimit: 2}/runPolicy: {backoffLimit: 2, activeDeadlineSeconds: 2}/' "$WORK/deadline.yaml"
run deadline
expect "deadline: ringtrain run exit code" "$RC" 1
expect "deadline: reason" "$(json_get "$WORK/deadline.json" reason)" DeadlineExceeded
json_get "$WORK/deadline.json" message | grep -q "activeDeadlineSeconds" ||
  fail "deadline: the summary's message: $(cat "$WORK/deadline.json")"

# runPolicy.suspend: valid for a cluster (validate says so, with a note), refused by
# `ringtrain run` before any rank starts (it could never resume the job).
job suspended 1 '["sh", "-c", "true"]'
sed -i 's/runPolicy: {backoffLimit: 2}/runPolicy: {backoffLimit: 2, suspend: true}/' "$WORK/suspended.yaml"
"$BIN/ringtrain" validate "$WORK/suspended.yaml" >"$WORK/suspended-validate.out" 2>&1 && RC=0 || RC=$?
expect "suspended: validate exit code" "$RC" 0
grep -q "TrainingJob suspended is valid" "$WORK/suspended-validate.out" || fail "suspended: not valid"
grep -qF "note: \`ringtrain run\` will refuse this job: spec.runPolicy.suspend:" \
  "$WORK/suspended-validate.out" || fail "suspended: validate has no note: $(cat "$WORK/suspended-validate.out")"
run suspended
expect "suspended: ringtrain run exit code" "$RC" 1
console_has suspended "suspended.yaml: spec.runPolicy.suspend: true holds the job until it is resumed"
[ ! -e "$WORK/suspended" ] || fail "suspended: run went on to start ranks"

# A --summary-json that cannot be written: refused before any rank starts, naming the path.
job nosummary 1 '["sh", "-c", "true"]'
timeout 120 "$BIN/ringtrain" run "$WORK/nosummary.yaml" --workdir "$WORK/nosummary" \
  --summary-json "$WORK/no-such-dir/summary.json" >"$WORK/nosummary.out" 2>&1 && RC=0 || RC=$?
expect "nosummary: ringtrain run exit code" "$RC" 1
console_has nosummary "error: --summary-json $WORK/no-such-dir/summary.json: No such file or directory"
grep -q "Succeeded" "$WORK/nosummary.out" && fail "nosummary: the job ran"
[ ! -e "$WORK/nosummary" ] || fail "nosummary: run went on to start ranks"
# A directory is no summary file either; and a write that fails at the end (a full disk) is an
# error, exit code 1, not a silent loss.
mkdir -p "$WORK/summary-dir"
timeout 120 "$BIN/ringtrain" run "$WORK/nosummary.yaml" --workdir "$WORK/nosummary" \
  --summary-json "$WORK/summary-dir" >"$WORK/nosummary.out" 2>&1 && RC=0 || RC=$?
expect "summary dir: ringtrain run exit code" "$RC" 1
console_has nosummary "error: --summary-json $WORK/summary-dir: is a directory"
[ ! -e "$WORK/nosummary" ] || fail "summary dir: run went on to start ranks"
job fullsummary 1 '["sh", "-c", "true"]'
timeout 120 "$BIN/ringtrain" run "$WORK/fullsummary.yaml" --workdir "$WORK/fullsummary" \
  --summary-json /dev/full >"$WORK/fullsummary.out" 2>&1 && RC=0 || RC=$?
expect "full summary: ringtrain run exit code" "$RC" 1
console_has fullsummary "error: cannot write /dev/full: No space left on device"
echo "ok: a directory or a full disk for the summary is an error"

# The runner binary is found as the ranks start it: a bare name on PATH (not in the current
# directory), a path as it is; what is wrong with it is named.
cat >"$WORK/runnerpath.yaml" <<'YAML'
apiVersion: ringtrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: runnerpath}
spec:
  replicas: 1
  train: {model: mlp, dataset: /usr/share/datasets/fashion-mnist, epochs: 1}
YAML
runner_dir=$(dirname "$(readlink -f "$BIN/ringtrain-runner")")
(cd "$runner_dir" && PATH=/usr/bin:/bin timeout 60 "$BIN/ringtrain" run "$WORK/runnerpath.yaml" \
  --runner ringtrain-runner --workdir "$WORK/runnerpath" >"$WORK/runnerpath.out" 2>&1) && RC=0 || RC=$?
expect "runner not on PATH: exit code" "$RC" 1
console_has runnerpath "error: runner binary ringtrain-runner: not found on PATH"
[ ! -e "$WORK/runnerpath" ] || fail "runner not on PATH: run went on to start ranks"
for bad in "/etc/passwd:not executable" "$WORK/no-such-runner:not found" "/tmp:not a regular file"; do
  timeout 60 "$BIN/ringtrain" run "$WORK/runnerpath.yaml" --runner "${bad%:*}" \
    --workdir "$WORK/runnerpath" >"$WORK/runnerpath.out" 2>&1 && RC=0 || RC=$?
  expect "runner ${bad%:*}: exit code" "$RC" 1
  console_has runnerpath "error: runner binary ${bad%:*}: ${bad##*:}"
done
echo "ok: the runner binary is looked up as the ranks start it"
echo "PASS"
