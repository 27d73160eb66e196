#!/usr/bin/env bash
# A real 2-rank training job (two ringtrain-runner processes on loopback, metrics on) scraped
# by a real Prometheus every second, with the alert rules loaded; then every PromQL expression
# of the dashboard (variables substituted) and of the rules is evaluated through Prometheus'
# HTTP API and must return data (dashboard.py live). The controller is the real `ringtrain
# controller` reconciling a job on the fake API server. A CPU machine has no GPU series, so
# fake_exporters.py serves those in their documented shape, for the same job and ranks (as the
# GPU runner will). fake_exporters.py also plays a job whose rank 0 is replaced in place (three
# runner processes, the survivor's recovery seconds accruing live), and dashboard.py scenario
# checks the panels' values over it.
source "$(dirname "$0")/lib.sh"
command -v prometheus >/dev/null || fail "prometheus not installed (Debian package prometheus)"
command -v promtool >/dev/null || fail "promtool not installed (Debian package prometheus)"
export RINGTRAIN_NAMESPACE=ml   # the runner's namespace label (the operator sets it in pods)

# The job: 2 ranks, slowed so it outlives the test (killed at exit).
m0=$(free_port)
m1=$(free_port)
master=$(free_port)
METRICS_PORT=$m0 start_rank 0 2 "$master" tok "$WORK/rank0.log" --epochs 100 --step-sleep-ms 20
METRICS_PORT=$m1 start_rank 1 2 "$master" tok "$WORK/rank1.log" --epochs 100 --step-sleep-ms 20
# The real controller, reconciling a job (its pods stay Pending: no kubelet here).
start_fake_cluster
cm=$(free_port)
"$BIN/ringtrain" controller --kubeconfig "$KUBECONFIG_FILE" --metrics-addr "127.0.0.1:$cm" \
  --health-addr "127.0.0.1:$(free_port)" >"$WORK/controller.log" 2>&1 &
PIDS+=($!)
k apply -f "$SRC/manifests/examples/fashion-mnist-mlp.yaml" >/dev/null || fail "job apply"
# A replica with 4 GPUs (4 local ranks, each serving /metrics on its own port): the chart's
# PodMonitor must scrape every rank's port of the pod the real controller builds.
sed -e 's/name: fashion-mnist-mlp/name: gpu4/' -e 's/gpusPerReplica: 0/gpusPerReplica: 4/' \
  -e 's/backend: tcp/backend: nccl/' -e 's/replicas: 2/replicas: 1/' \
  "$SRC/manifests/examples/fashion-mnist-mlp.yaml" | k apply -f - >/dev/null || fail "4-GPU job apply"
gpu4_pod() { k get pods -l ringtrain.dev/job=gpu4 -o name | grep -q .; }
wait_until 60 "the 4-GPU job's pod" gpu4_pod
k get pods -l ringtrain.dev/job=gpu4 -o json >"$WORK/gpu4-pods.json" || fail "get the 4-GPU pod"
tools
"$HELM" template ringtrain "$CHART" --namespace ringtrain-system --include-crds \
  --set podMonitor.enabled=true >"$WORK/chart.yaml" 2>"$WORK/helm.log" || fail "helm template"
python3 "$DELIVERY/check_chart.py" "$WORK/chart.yaml" --namespace ringtrain-system --chart "$CHART" \
  --kinds CustomResourceDefinition,ServiceAccount,ClusterRole,ClusterRoleBinding,Service,Deployment,PodMonitor \
  --pods "$WORK/gpu4-pods.json" ||
  fail "the PodMonitor misses ports of a 4-GPU pod: $(python3 -c 'import json,sys; print([(c["name"], c.get("ports")) for p in json.load(open(sys.argv[1]))["items"] for c in p["spec"]["containers"]])' "$WORK/gpu4-pods.json")"
# A job a second, as on a busy cluster, so the reconcile histograms keep moving under rate().
for i in $(seq 1 120); do
  sed "s/name: fashion-mnist-mlp/name: live-$i/" "$SRC/manifests/examples/fashion-mnist-mlp.yaml" |
    k apply -f - >/dev/null 2>&1
  sleep 1
done &
PIDS+=($!)
fake=$(free_port)
python3 "$DELIVERY/fake_exporters.py" "$fake" ml e2e 2 replaced >"$WORK/fake_exporters.log" 2>&1 &
PIDS+=($!)
wait_until 20 "fake_exporters.py" curl -sf "http://127.0.0.1:$fake/scenario"

prom=$(free_port)
cat >"$WORK/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - $SRC/monitoring/ringtrain-rules.yaml
scrape_configs:
  # honor_labels keeps the runner's job/namespace/rank, as the chart's PodMonitor does.
  - job_name: ringtrain-runner
    honor_labels: true
    static_configs:
      - targets: ["127.0.0.1:$m0", "127.0.0.1:$m1"]
  - job_name: ringtrain-gpu-stand-in
    honor_labels: true
    metrics_path: /gpu
    static_configs:
      - targets: ["127.0.0.1:$fake"]
  # The job "replaced" of fake_exporters.py, whose rank 0 is replaced in place: three runner
  # processes, each its own target (a replacement pod has a new IP, so a new instance label).
  - job_name: ringtrain-runner-replaced
    honor_labels: true
    static_configs:
      - targets: ["127.0.0.1:$fake"]
        labels: {__metrics_path__: /runner/0a, instance: "10.0.0.10:9400", pod: replaced-0}
      - targets: ["127.0.0.1:$fake"]
        labels: {__metrics_path__: /runner/0b, instance: "10.0.0.12:9400", pod: replaced-0}
      - targets: ["127.0.0.1:$fake"]
        labels: {__metrics_path__: /runner/1, instance: "10.0.0.11:9400", pod: replaced-1}
  # The name the chart's ServiceMonitor gives the controller's target (jobLabel).
  - job_name: ringtrain-controller
    honor_labels: true
    static_configs:
      - targets: ["127.0.0.1:$cm"]
YML
promtool check config "$WORK/prometheus.yml" >"$WORK/promtool.log" 2>&1 ||
  { cat "$WORK/promtool.log"; fail "promtool check config"; }
prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
  --web.listen-address="127.0.0.1:$prom" >"$WORK/prometheus.log" 2>&1 &
PIDS+=($!)
url=http://127.0.0.1:$prom
wait_until 60 "Prometheus ready" curl -sf "$url/-/ready"

steps_over() {  # steps_over PORT N: the rank's /status reports more than N steps
  curl -sf "http://127.0.0.1:$1/status" |
    python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["step"] > int(sys.argv[1]) else 1)' "$2"
}
wait_until 120 "both ranks training" bash -c "$(declare -f steps_over); steps_over $m0 5 && steps_over $m1 5"
all_up() {
  curl -sf "$url/api/v1/query" --data-urlencode 'query=count(up{job!="ringtrain-runner-replaced"} == 1) == 4' |
    python3 -c 'import json,sys; sys.exit(0 if json.load(sys.stdin)["data"]["result"] else 1)'
}
wait_until 60 "Prometheus scraping all 4 targets" all_up
python3 "$DELIVERY/dashboard.py" live "$SRC/monitoring/ringtrain-training.json" \
  "$SRC/monitoring/ringtrain-rules.yaml" "$url" 60 || fail "PromQL expressions without data"
# The panels over a rank replaced in place (fake_exporters.py's job "replaced"): steps/s per
# job, checkpoints written, goodput.
python3 "$DELIVERY/dashboard.py" scenario "$SRC/monitoring/ringtrain-training.json" "$url" \
  "http://127.0.0.1:$fake/scenario" 120 || fail "dashboard panels over an in-place recovery"
# The training did not stop under the scrapes.
kill -0 "${PIDS[0]}" && kill -0 "${PIDS[1]}" || fail "a rank exited during the test"
echo PASS
