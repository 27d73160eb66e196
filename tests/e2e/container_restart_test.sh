#!/usr/bin/env bash
# A rank's container SIGKILLed mid-training, everything in containers (see container_train_test):
# the kubelet reports exit code 137 and the controller replaces that pod alone (runPolicy.recovery
# InPlace, the default): the surviving rank 0 keeps its pod and its state, the replacement takes
# that state over the new ring, training goes on from the step rank 0 had reached (no checkpoint
# needed), and the job ends Succeeded in attempt 0 with restarts 1 and one in-place recovery.
# (The gang restart from a checkpoint: e2e_restart and the operator tests.)
#
# The checkpoint volume: when the operator mounts spec.checkpoint.volumeClaim (a PVC per job),
# the job asks for one; until then the job brings its own PVC through spec.template (with
# fsGroup 65532, which makes the claim's root-owned folder writable by the image's user).
source "$(dirname "$0")/container_lib.sh"
start_fake_cluster
start_container_kubelet
start_controller_pod --runner-image "$RUNNER_IMAGE" --progress-interval-ms 500

job=fashion-mnist-mlp
example_with "$WORK/job.yaml" everySteps 500
if grep -q persistentVolumeClaim "$SRC/controller/executors/kubernetes/pod_builder.cc"; then
  mode="spec.checkpoint.volumeClaim"
  grep -Eq '^\s*volumeClaim:' "$WORK/job.yaml" ||
    sed -i 's|^\(\s*\)everySteps: 500|&\n\1volumeClaim: {size: 1Gi}|' "$WORK/job.yaml"
else
  mode="a PVC in spec.template"
  claim=$job-ckpt
  # The list first: `k api-resources | grep -q` fails under pipefail when grep exits early.
  resources=$(k api-resources 2>/dev/null || true)
  if grep -q '^persistentvolumeclaims ' <<<"$resources"; then
    k apply -f - >/dev/null <<YAML || fail "PVC apply"
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: $claim}
spec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 1Gi}}}
YAML
  fi
  # The pod securityContext of the operator's restricted-compliant pods, and a read-only root.
  cat >>"$WORK/job.yaml" <<YAML
  template:
    spec:
      automountServiceAccountToken: false
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        runAsGroup: 65532
        fsGroup: 65532
        seccompProfile: {type: RuntimeDefault}
      volumes: [{name: ckpt, persistentVolumeClaim: {claimName: $claim}}]
      containers:
        - name: runner
          volumeMounts: [{name: ckpt, mountPath: /ckpt}]
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            capabilities: {drop: [ALL]}
YAML
fi
echo "checkpoint volume: $mode"
k apply -f "$WORK/job.yaml" >/dev/null || fail "job apply"

# Past the checkpoints at steps 500 and 1000.
wait_past_step "$job-a0-0" 1100
victim=$(container_of "$job-a0-1") || exit 1
survivor_uid=$(k get pod "$job-a0-0" -o 'jsonpath={.metadata.uid}')
killed_at=$(step_of $job-a0-0 || echo 0)
echo "SIGKILL to rank 1's container at step $killed_at"
podman kill -s KILL "$victim" >/dev/null || fail "podman kill"

wait_job_done "$job" 600
k get tj "$job" | tee "$WORK/tj.txt"
[ "$(tj_field $job '{.status.phase}')" = Succeeded ] || fail "phase $(tj_field $job '{.status.phase}')"
[ "$(tj_field $job '{.status.attempt}')" = 0 ] || fail "the gang restarted: attempt $(tj_field $job '{.status.attempt}')"
[ "$(tj_field $job '{.status.restarts}')" = 1 ] ||
  fail "restarts $(tj_field $job '{.status.restarts}'), expected 1"
[ "$(tj_field $job '{.status.inPlaceRecoveries}')" = 1 ] || fail "inPlaceRecoveries"
echo "lastFailure: $(tj_field $job '{.status.lastFailure}')"
[ "$(tj_field $job '{.status.lastFailure.exitCode}')" = 137 ] || fail "lastFailure.exitCode"
[ "$(k get pod "$job-a0-0" -o 'jsonpath={.metadata.uid}')" = "$survivor_uid" ] ||
  fail "the surviving pod was replaced"
from=$(pod_log "$job-a0-0" | grep -o "recovered in place: every rank continues from rank [0-9]*'s state at step [0-9]*" |
  grep -o '[0-9]*$')
[ -n "$from" ] || fail "rank 0 did not recover in place"
[ "$from" -ge "$((killed_at - 1))" ] || fail "continued from step $from, before the kill at $killed_at"
echo "the gang continued from step $from (rank 0 was at step $killed_at when rank 1 was killed)"
acc=$(accuracy_of "$job-a0-0")
python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) >= 0.87 else 1)' "${acc:-0}" ||
  fail "test accuracy '$acc' after the recovery"
echo "test accuracy after the recovery: $acc"
echo PASS
