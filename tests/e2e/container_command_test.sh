#!/usr/bin/env bash
# The same spec.command manifests in pods and under `ringtrain run` (issue 23): TrainingJobs
# with ["sh", "-c", ...] and ["python3", ...] (a script relative to spec.template's workingDir,
# env from the runner container with $(VAR) expanded and a fieldRef) go to the operator in its
# container and run in pods of the CPU runner image (with python3 added, as a user's own image
# would have it); then `ringtrain run` runs each manifest on this machine. Both must end Failed
# with the same lastFailure: rank, exit code, reason and termination message (the file, or the
# log's end with FallbackToLogsOnError). tests/e2e/local_command_test.sh covers the local side
# alone (and what a pod cannot show here: a program not found).
source "$(dirname "$0")/container_lib.sh"
start_fake_cluster
start_container_kubelet
start_controller_pod --runner-image "$RUNNER_IMAGE"

# The runner image has no python3: a user's image would. Built once, on top of it.
PY_IMAGE=${PY_IMAGE:-localhost/ringtrain-runner-python:dev}
if ! podman image exists "$PY_IMAGE"; then
  printf '%s\n' "FROM $RUNNER_IMAGE" "USER 0" \
    "RUN apt-get -o Acquire::Retries=3 update -q && apt-get install -y -q --no-install-recommends python3-minimal && rm -rf /var/lib/apt/lists/*" \
    "USER 65532:65532" >"$WORK/python.Dockerfile"
  podman --runtime runc build --pull=never --runtime runc --network host \
    -f "$WORK/python.Dockerfile" -t "$PY_IMAGE" "$WORK" >"$WORK/python-image.log" 2>&1 ||
    fail "python image: $(tail -n 5 "$WORK/python-image.log")"
fi

# The script lives at the same path on this machine and in the pods (a hostPath volume mounted
# where it is), so one manifest serves both; the pods run as 65532, which must read it.
app=$WORK/app
mkdir -p "$app"
chmod 0755 "$WORK" "$app"
cat >"$app/train.py" <<'PY'
import os, sys
rank = int(os.environ["RANK"])
print("rank", rank, "starting", flush=True)
if rank != 1:
    sys.exit(0)
with open(os.environ["RINGTRAIN_TERMINATION_LOG"], "w") as f:
    f.write("loss is nan (%s, tag %s, cwd %s)\n" % (os.environ["POD_NAME"], sys.argv[2], os.getcwd()))
sys.exit(3)
PY
chmod 0644 "$app/train.py"

# job NAME REPLICAS IMAGE COMMAND-JSON [TEMPLATE-YAML]: $WORK/NAME.yaml
job() {
  cat >"$WORK/$1.yaml" <<YAML
apiVersion: ringtrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: $1}
spec:
  replicas: $2
  image: $3
  command: $4
  runPolicy: {backoffLimit: 0}
YAML
  [ -z "${5:-}" ] || printf '  template:\n%s\n' "$5" >>"$WORK/$1.yaml"
}
job sh-fail 1 "$RUNNER_IMAGE" '["sh", "-c", "echo to-the-log; echo rank $RANK of $WORLD_SIZE; exit 3"]'
job sh-term 2 "$RUNNER_IMAGE" '["sh", "-c", "[ $RANK = 1 ] || exit 0; echo \"bad shard $(RINGTRAIN_RANK) of $WORLD_SIZE\" > $RINGTRAIN_TERMINATION_LOG; exit 4"]'
job py 2 "$PY_IMAGE" '["python3", "train.py", "--tag", "$(TAG)"]' "    spec:
      volumes: [{name: app, hostPath: {path: $app}}]
      containers:
        - name: runner
          workingDir: $app
          volumeMounts: [{name: app, mountPath: $app, readOnly: true}]
          env:
            - {name: TAG, value: \"t-\$(RINGTRAIN_RANK)\"}
            - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}"

# failure_of JOB: the job's lastFailure as one JSON line (rank, exitCode, reason, message).
pod_failure() {
  k get tj "$1" -o json | python3 -c 'import json,sys
f = json.load(sys.stdin)["status"]["lastFailure"]
print(json.dumps([f.get("rank"), f.get("exitCode"), f.get("reason"), f.get("message")]))'
}
local_failure() {
  python3 -c 'import json,sys
f = json.load(open(sys.argv[1]))["last_failure"]
print(json.dumps([f["rank"], f["exit_code"], f["reason"], f["message"]]))' "$1"
}
for name in sh-fail sh-term py; do
  k apply -f "$WORK/$name.yaml" >/dev/null || fail "$name: apply"
done
for name in sh-fail sh-term py; do
  wait_until 300 "job $name Failed" tj_phase_is "$name" Failed
  in_pod=$(pod_failure "$name")
  timeout 120 "$BIN/ringtrain" run "$WORK/$name.yaml" --workdir "$WORK/local-$name" \
    --summary-json "$WORK/$name.json" >"$WORK/local-$name.out" 2>&1 && rc=0 || rc=$?
  [ "$rc" = 1 ] || fail "$name: ringtrain run exit code $rc: $(tail -n 5 "$WORK/local-$name.out")"
  local_run=$(local_failure "$WORK/$name.json")
  [ "$in_pod" = "$local_run" ] || fail "$name: in a pod $in_pod, under ringtrain run $local_run"
  echo "ok: $name: $in_pod in a pod and under ringtrain run"
done
echo "PASS"
