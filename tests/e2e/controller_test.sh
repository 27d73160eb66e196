#!/usr/bin/env bash
# The `ringtrain controller` binary against the fake API server, driven with the real kubectl:
# health and readiness, leader election, the gang of pods + Secret + headless Service, truthful
# `kubectl get tj`, an in-place recovery after a rank's pod reports exit code 137 (kubectl plays
# the kubelet: only that pod is replaced, the survivor stays), metrics, and a graceful SIGTERM
# that releases the lease.
source "$(dirname "$0")/lib.sh"
start_fake_cluster

mport=$(free_port)
hport=$(free_port)
"$BIN/ringtrain" controller --kubeconfig "$KUBECONFIG_FILE" --leader-elect \
  --lease-namespace default --identity e2e-controller --progress-interval-ms 500 \
  --metrics-addr "127.0.0.1:$mport" --health-addr "127.0.0.1:$hport" >"$WORK/controller.log" 2>&1 &
CTRL=$!
PIDS+=($CTRL)
wait_until 60 "/readyz" curl -sf "http://127.0.0.1:$hport/readyz"
curl -sf "http://127.0.0.1:$hport/healthz" >/dev/null || fail "/healthz"
lease_holder() { k get lease ringtrain-controller-leader -o 'jsonpath={.spec.holderIdentity}'; }
holds_lease() { [ "$(lease_holder)" = e2e-controller ]; }
wait_until 60 "the controller to hold the lease" holds_lease

k apply -f "$SRC/manifests/examples/fashion-mnist-mlp.yaml" >/dev/null || fail "job apply"
pods() { k get pods -l "ringtrain.dev/job=fashion-mnist-mlp,ringtrain.dev/attempt=$1" -o name; }
two_pods() { [ "$(pods "$1" | wc -l)" = 2 ]; }
wait_until 60 "the gang of attempt 0" two_pods 0
k get secret fashion-mnist-mlp-token >/dev/null || fail "no token Secret"
[ "$(k get service fashion-mnist-mlp -o 'jsonpath={.spec.clusterIP}')" = None ] ||
  fail "the Service is not headless"
k get tj fashion-mnist-mlp >"$WORK/tj.txt"
cat "$WORK/tj.txt"
grep -q "^NAME *PHASE *REPLICAS *RESTARTS *STEP *SAMPLES/S *ACCURACY *PODS *AGE" "$WORK/tj.txt" || fail "columns"
grep -Eq "^fashion-mnist-mlp +Pending +2 +0" "$WORK/tj.txt" || fail "tj row"

# Rank 1 "runs" then is OOM-killed: that pod alone is replaced (runPolicy.recovery InPlace).
victim=$(pods 0 | grep -- '-1$' | sed 's|pod/||')
[ -n "$victim" ] || fail "rank 1 pod of attempt 0 not found"
survivor=$(pods 0 | grep -- '-0$' | sed 's|pod/||')
uid() { k get pod "$1" -o 'jsonpath={.metadata.uid}' 2>/dev/null; }
survivor_uid=$(uid "$survivor")
victim_uid=$(uid "$victim")
for p in $(pods 0 | sed 's|pod/||'); do
  k patch pod "$p" --subresource=status --type=merge \
    -p '{"status":{"phase":"Running","podIP":"127.0.0.1"}}' >/dev/null || fail "patch $p running"
done
k patch pod "$victim" --subresource=status --type=merge -p '{"status":{"phase":"Failed",
  "containerStatuses":[{"name":"runner","ready":false,"restartCount":0,"image":"x","imageID":"",
  "state":{"terminated":{"exitCode":137,"reason":"OOMKilled","message":"out of memory"}}}]}}' \
  >/dev/null || fail "patch $victim failed"
replaced() { local u; u=$(uid "$victim"); [ -n "$u" ] && [ "$u" != "$victim_uid" ]; }
wait_until 60 "rank 1's replacement" replaced
[ "$(uid "$survivor")" = "$survivor_uid" ] || fail "the surviving pod was replaced too"
two_pods 0 || fail "attempt 0 does not have two pods"
[ -z "$(pods 1)" ] || fail "a gang of attempt 1 exists"
restarts() { k get tj fashion-mnist-mlp -o 'jsonpath={.status.restarts}'; }
[ "$(restarts)" = 1 ] || fail "status.restarts is $(restarts), expected 1"
[ "$(k get tj fashion-mnist-mlp -o 'jsonpath={.status.inPlaceRecoveries}')" = 1 ] ||
  fail "status.inPlaceRecoveries"
[ "$(k get tj fashion-mnist-mlp -o 'jsonpath={.status.lastFailure.exitCode}')" = 137 ] ||
  fail "lastFailure.exitCode"

curl -sf "http://127.0.0.1:$mport/metrics" >"$WORK/metrics.txt" || fail "/metrics"
if command -v promtool >/dev/null; then promtool check metrics <"$WORK/metrics.txt" || fail "promtool"; fi
grep -q '^ringtrain_controller_is_leader 1' "$WORK/metrics.txt" || fail "is_leader metric"
grep -Eq '^ringtrain_controller_pods_created_total 3' "$WORK/metrics.txt" ||
  fail "pods_created_total should be 3"
grep -Eq '^ringtrain_controller_gang_restarts_total 0' "$WORK/metrics.txt" || fail "gang restarts"
grep -Eq '^ringtrain_controller_in_place_recoveries_total 1' "$WORK/metrics.txt" ||
  fail "in-place recoveries"

kill -TERM "$CTRL"
wait_exit "$CTRL" 60
[ "$RC" = 0 ] || fail "controller exited with $RC after SIGTERM"
[ -z "$(lease_holder)" ] || fail "lease not released: $(lease_holder)"
echo PASS
