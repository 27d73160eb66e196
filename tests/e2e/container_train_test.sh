#!/usr/bin/env bash
# The whole system in containers: the fake API server, `ringtrain controller` in its image (the
# shipped Deployment's pod template and securityContext), and the container kubelet running each
# pod with podman. `kubectl apply -f manifests/examples/fashion-mnist-mlp.yaml` as shipped (the
# controller's --runner-image gives it the CPU runner image): the ranks rendezvous over their pod
# DNS names, train, and the TrainingJob ends Succeeded with the example's accuracy and the Step
# and Samples/s columns filled. Meanwhile a real Prometheus scrapes the pods' metrics ports by
# pod IP (file service discovery written by the kubelet: the PodMonitor's equivalent) and answers
# the dashboard's throughput query with data from the containers.
source "$(dirname "$0")/container_lib.sh"
command -v prometheus >/dev/null || fail "prometheus not installed (Debian package prometheus)"
start_fake_cluster
start_container_kubelet
start_controller_pod --runner-image "$RUNNER_IMAGE" --progress-interval-ms 500

echo '[]' >"$WORK/targets.json"
prom=$(free_port)
cat >"$WORK/prometheus.yml" <<YML
global: {scrape_interval: 1s, scrape_timeout: 1s}
scrape_configs:
  - job_name: ringtrain-runner
    honor_labels: true
    file_sd_configs: [{files: ["$WORK/targets.json"], refresh_interval: 1s}]
    # README's relabelling for kubernetes_sd_configs: the kubelet writes the same meta labels.
    relabel_configs:
      - {source_labels: [__meta_kubernetes_pod_label_ringtrain_dev_job], regex: .+, action: keep}
      - source_labels: [__meta_kubernetes_pod_container_name, __meta_kubernetes_pod_container_port_name]
        regex: 'runner;metrics(-[0-9]+)?'
        action: keep
YML
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
  --web.listen-address="127.0.0.1:$prom" >"$WORK/prometheus.log" 2>&1 &
PIDS+=($!)
url=http://127.0.0.1:$prom
wait_until 60 "Prometheus ready" curl -sf "$url/-/ready"

k apply -f "$SRC/manifests/examples/fashion-mnist-mlp.yaml" >/dev/null || fail "job apply"
job=fashion-mnist-mlp
pod0=$job-a0-0
pod1=$job-a0-1

# The dashboard's "Samples/s per job" query, its variables set to this job.
query='sum by (namespace, job) (rate(ringtrain_samples_total{namespace=~"default", job=~"fashion-mnist-mlp"}[10s]))'
throughput() {
  curl -sf "$url/api/v1/query" --data-urlencode "query=$query" | python3 -c '
import json, sys
r = json.load(sys.stdin)["data"]["result"]
v = [float(x["value"][1]) for x in r if x["metric"].get("job") == "fashion-mnist-mlp"]
print(v[0] if v else 0)
sys.exit(0 if v and v[0] > 0 else 1)'
}
wait_until 300 "Prometheus to answer the throughput query with the containers' data" throughput
echo "Prometheus: $(throughput) samples/s for $job"
# The scraped targets were the two pods' own addresses on the podman network, not loopback.
targets() {
  curl -sf "$url/api/v1/targets?state=active" | python3 -c '
import json, sys
t = sorted(x["labels"]["instance"] for x in json.load(sys.stdin)["data"]["activeTargets"]
           if x["health"] == "up")
print(" ".join(t))
sys.exit(0 if len(t) == 2 and all(x.startswith("10.89.") and x.endswith(":9400") for x in t) else 1)'
}
targets >"$WORK/targets.txt" || fail "Prometheus targets: $(cat "$WORK/targets.txt")"
echo "Prometheus scraped: $(cat "$WORK/targets.txt")"

wait_job_done "$job" 600
k get tj "$job" | tee "$WORK/tj.txt"
read -r _ phase replicas restarts step rate _ < <(tail -n1 "$WORK/tj.txt")
[ "$phase" = Succeeded ] || fail "phase $phase"
[ "$restarts" = 0 ] || fail "restarts $restarts, expected 0"
[[ "$step" =~ ^[1-9][0-9]*$ ]] || fail "Step column '$step'"
[[ "$rate" =~ ^[1-9][0-9.]*$ ]] || fail "Samples/s column '$rate'"
acc=$(accuracy_of "$pod0")
echo "rank 0 test accuracy: $acc"
python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) >= 0.87 else 1)' "${acc:-0}" ||
  fail "test accuracy '$acc' below the example's (0.89)"
# The ranks found each other by DNS name: rank 1's master address is rank 0's pod name.
master=$(k get pod "$pod1" -o jsonpath='{.spec.containers[0].env[?(@.name=="RINGTRAIN_MASTER_ADDR")].value}' 2>/dev/null ||
  grep -o "$pod0\.$job\.default\.svc[a-z.]*" "$WORK/kubelet/logs/default_$pod1.log" | head -n1)
echo "rank 1 rendezvous address: ${master:-?}"
# The runner ran as the image's non-root user.
grep -q "exited 0 (Completed)" <(grep "$pod0" "$WORK/kubelet.log") || fail "rank 0 did not complete"
echo PASS
