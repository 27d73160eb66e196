#!/usr/bin/env bash
# A hung rank, everything in containers (see container_train_test): rank 1's runner is
# SIGSTOPped mid-training in a job with runPolicy.recovery GangRestart. Rank 0 gives up on it
# after the collective timeout, keeps the gang's last step in a checkpoint and exits retryable;
# the controller restarts the gang and deletes the hung rank with a 1 s grace (it has nothing to
# save), so the kubelet SIGKILLs it after 2 s (a kubelet's least) instead of its pod's 30 s.
# This is the chain controller → API server (the pod stays, terminating, with deletionGracePeriodSeconds 1) →
# kubelet (SIGTERM, 2 s, SIGKILL, then the final delete with grace 0), as on a real cluster.
# Attempt 1 resumes from the step rank 0 kept, and the job Succeeds.
source "$(dirname "$0")/container_lib.sh"
start_fake_cluster
start_container_kubelet
start_controller_pod --runner-image "$RUNNER_IMAGE" --progress-interval-ms 500

job=fashion-mnist-mlp
example_with "$WORK/job.yaml" everySteps 500
sed -i 's|^\(\s*\)everySteps: 500|&\n\1volumeClaim: {size: 1Gi}|' "$WORK/job.yaml"
sed -i 's|^\(\s*\)backoffLimit: 3|&\n\1recovery: GangRestart|' "$WORK/job.yaml"
cat >>"$WORK/job.yaml" <<'YAML'
  template:
    spec:
      containers:
        - name: runner
          env: [{name: RINGTRAIN_COLLECTIVE_TIMEOUT_SECONDS, value: "10"}]
YAML
k apply -f "$WORK/job.yaml" >/dev/null || fail "job apply"

# Past the checkpoints at steps 500 and 1000.
wait_past_step "$job-a0-0" 1100
victim=$(container_of "$job-a0-1") || exit 1
stopped_at=$(step_of $job-a0-0) || fail "rank 0's /status"
echo "SIGSTOP to rank 1's runner at step $stopped_at"
podman kill -s STOP "$victim" >/dev/null || fail "podman kill -s STOP"

wait_job_done "$job" 600
k get tj "$job" | tee "$WORK/tj.txt"
[ "$(tj_field $job '{.status.attempt}')" = 1 ] ||
  fail "attempt $(tj_field $job '{.status.attempt}'), expected one gang restart"
echo "lastFailure: $(tj_field $job '{.status.lastFailure.message}')"
# The hung rank got the 1 s grace, not its pod's 30 s; rank 0 (exited already) had nothing left.
grep -q "default/$job-a0-1: deleted with grace 1s" "$WORK/kubelet.log" ||
  fail "rank 1 was not deleted with a 1 s grace: $(grep "$job-a0-1" "$WORK/kubelet.log")"
grep -q "default/$job-a0-1: stopped after .* exit code 137" "$WORK/kubelet.log" ||
  fail "rank 1 was not SIGKILLed"
echo "ok: $(grep -o "$job-a0-1: stopped after [0-9.]*s, exit code 137" "$WORK/kubelet.log")"
from=$(pod_log "$job-a1-0" | grep -o 'resuming from checkpoint at step [0-9]*' | grep -o '[0-9]*$')
[ -n "$from" ] || fail "attempt 1 did not resume from a checkpoint"
[ "$from" -ge "$stopped_at" ] || fail "resumed from step $from, before the SIGSTOP at $stopped_at"
echo "attempt 1 resumed from step $from (rank 1 was stopped at about step $stopped_at)"
acc=$(accuracy_of "$job-a1-0")
python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) >= 0.87 else 1)' "${acc:-0}" ||
  fail "test accuracy '$acc' after the restart"
echo "test accuracy after the restart: $acc"
echo PASS
