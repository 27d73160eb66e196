# Shared helpers for the container end-to-end tests (tests/e2e/container_*.sh): the fake API
# server on loopback, `ringtrain controller` in its image (the manifests' pod template run by the
# container kubelet with the host's network, so it reaches the API server on 127.0.0.1), and the
# container kubelet running every pod with podman on its own network. Needs root, podman and the
# images of scripts/images.sh (CONTROLLER_IMAGE, RUNNER_IMAGE). Every wait is bounded.
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
CONTROLLER_IMAGE=${CONTROLLER_IMAGE:-localhost/ringtrain:dev}
RUNNER_IMAGE=${RUNNER_IMAGE:-localhost/ringtrain-runner-cpu:dev}
KUBELET_INSTANCE=e2e-$$
KUBELET_PID=
command -v podman >/dev/null || fail "podman not installed (bash scripts/images.sh setup)"
for image in "$CONTROLLER_IMAGE" "$RUNNER_IMAGE"; do
  podman image exists "$image" || fail "image $image missing (bash scripts/images.sh)"
done

container_cleanup() {
  if [ -n "$KUBELET_PID" ] && kill -0 "$KUBELET_PID" 2>/dev/null; then
    kill -TERM "$KUBELET_PID" 2>/dev/null || true
    for _ in $(seq 1 150); do kill -0 "$KUBELET_PID" 2>/dev/null || break; sleep 0.2; done
  fi
  # Whatever the kubelet could not stop (it was killed): its containers carry its label.
  local ids
  ids=$(podman ps -aq --filter "label=dev.ringtrain.container-kubelet=$KUBELET_INSTANCE" 2>/dev/null || true)
  [ -z "$ids" ] || podman --runtime runc rm -f -t 0 $ids >/dev/null 2>&1 || true
  cleanup
}
trap container_cleanup EXIT

# start_container_kubelet: the podman kubelet on the fake API server, Prometheus targets in
# $WORK/targets.json, logs of each pod in $WORK/kubelet/logs/NAMESPACE_POD.log.
start_container_kubelet() {
  python3 "$SRC/tests/fakes/container_kubelet/container_kubelet.py" \
    --server "$(head -n1 "$WORK/apiserver.url")" --state-dir "$WORK/kubelet" \
    --file-sd "$WORK/targets.json" --instance "$KUBELET_INSTANCE" >"$WORK/kubelet.log" 2>&1 &
  KUBELET_PID=$!
  PIDS+=($KUBELET_PID)
  wait_until 60 "the container kubelet" grep -q "watching pods" "$WORK/kubelet.log"
}

# start_controller_pod EXTRA_ARGS...: manifests/controller/deployment.yaml's pod template as a
# pod (its securityContext, resources and env as shipped), with the controller image, the host's
# network, and the kubeconfig of the fake API server mounted read-only. Sets CTRL_HEALTH and
# CTRL_METRICS (host ports).
start_controller_pod() {
  CTRL_METRICS=$(free_port)
  CTRL_HEALTH=$(free_port)
  mkdir -p "$WORK/controller-config"
  cp "$KUBECONFIG_FILE" "$WORK/controller-config/kubeconfig"
  chmod 0755 "$WORK/controller-config"
  chmod 0644 "$WORK/controller-config/kubeconfig"
  k get namespace ringtrain-system >/dev/null 2>&1 || k create namespace ringtrain-system >/dev/null ||
    fail "namespace ringtrain-system"
  python3 - "$SRC/manifests/controller/deployment.yaml" "$CONTROLLER_IMAGE" \
    "$WORK/controller-config" "$CTRL_METRICS" "$CTRL_HEALTH" "$@" >"$WORK/controller-pod.json" <<'PY' ||
import json, sys, yaml
path, image, config, metrics, health = sys.argv[1:6]
extra = sys.argv[6:]
deploy = next(d for d in yaml.safe_load_all(open(path)) if d and d.get("kind") == "Deployment")
tmpl = deploy["spec"]["template"]
spec = tmpl["spec"]
c = spec["containers"][0]
c["image"] = image
c["imagePullPolicy"] = "Never"
c["args"] = list(c.get("args", [])) + [
    "--kubeconfig", "/etc/ringtrain/kubeconfig", "--metrics-addr", "127.0.0.1:" + metrics,
    "--health-addr", "127.0.0.1:" + health] + extra
c.setdefault("volumeMounts", []).append(
    {"name": "kubeconfig", "mountPath": "/etc/ringtrain", "readOnly": True})
spec.setdefault("volumes", []).append(
    {"name": "kubeconfig", "hostPath": {"path": config, "type": "Directory"}})
spec["hostNetwork"] = True
meta = {"name": "ringtrain-controller-0", "namespace": deploy["metadata"]["namespace"],
        "labels": tmpl["metadata"]["labels"]}
print(json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}))
PY
    fail "controller pod manifest"
  k apply -f "$WORK/controller-pod.json" >/dev/null || fail "controller pod apply"
  wait_until 120 "the controller's /readyz" curl -sf "http://127.0.0.1:$CTRL_HEALTH/readyz"
}

# tj_field JOB JSONPATH
tj_field() { k get tj "$1" -o "jsonpath=$2"; }
tj_phase_is() { [ "$(tj_field "$1" '{.status.phase}')" = "$2" ]; }
# wait_job_done JOB SECONDS: until Succeeded (returns) or Failed (fails the test).
wait_job_done() {
  local job=$1 limit=$2 deadline=$((SECONDS + $2)) phase
  while :; do
    phase=$(tj_field "$job" '{.status.phase}' 2>/dev/null || true)
    [ "$phase" = Succeeded ] && return 0
    [ "$phase" = Failed ] && fail "job $job Failed: $(tj_field "$job" '{.status.lastFailure}')"
    [ $SECONDS -lt $deadline ] || fail "job $job not done after ${limit}s (phase '$phase')"
    sleep 1
  done
}
# pod_log POD: the log of a pod's container (the kubelet's k8s-file log).
pod_log() { cat "$WORK/kubelet/logs/default_$1.log"; }
# accuracy_of POD: the test accuracy rank 0 printed at the end.
accuracy_of() { pod_log "$1" | grep -o 'test_accuracy [0-9.]*' | tail -n1 | cut -d' ' -f2; }
# pod_ip POD, step_of POD: a runner's step from its /status, straight from its pod IP on the
# podman network.
pod_ip() { k get pod "$1" -o 'jsonpath={.status.podIP}'; }
step_of() {
  curl -sf --max-time 2 "http://$(pod_ip "$1"):9400/status" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["step"])'
}
# wait_past_step POD STEP: until that runner is past STEP (300 s at most).
runner_past() { [ "$(step_of "$1" 2>/dev/null || echo 0)" -ge "$2" ]; }
wait_past_step() { wait_until 300 "$1 past step $2 (checkpoints before it)" runner_past "$1" "$2"; }
# container_of POD: the id of this kubelet's container of POD (fails the test if none).
container_of() {
  local id
  id=$(podman ps -q --filter "label=io.kubernetes.pod.name=$1" \
    --filter "label=dev.ringtrain.container-kubelet=$KUBELET_INSTANCE")
  [ -n "$id" ] || fail "no container for $1"
  echo "$id"
}
