# Shared helpers for the end-to-end tests. Every wait is bounded; a test that cannot reach its
# point fails with a message instead of hanging.
set -euo pipefail
BIN=${RINGTRAIN_BUILD_DIR:?}/bin
SRC=${RINGTRAIN_SOURCE_DIR:?}
DATA=${RINGTRAIN_DATA:-/usr/share/datasets/fashion-mnist}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ringtrain-e2e.XXXXXX")
PIDS=()
cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill -9 "$p" 2>/dev/null || true; done
  if [ "${KEEP_WORK:-0}" = 1 ]; then echo "work dir kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  for f in "$WORK"/*.log "$WORK"/*/*.log; do
    [ -f "$f" ] && { echo "--- $f (tail)"; tail -n 20 "$f"; } >&2
  done
  exit 1
}

# wait_until SECONDS DESCRIPTION COMMAND...: polls COMMAND every 0.2 s.
wait_until() {
  local limit=$1 what=$2
  shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || fail "timed out after ${limit}s waiting for: $what"
    sleep 0.2
  done
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# json_get FILE KEY: a top-level value of a JSON file.
json_get() {
  python3 -c 'import json,sys; v=json.load(open(sys.argv[1]))[sys.argv[2]]; print(v)' "$1" "$2"
}

# A manifest derived from the shipped MLP example with some spec.train fields replaced.
example_with() {
  local out=$1
  shift
  cp "$SRC/manifests/examples/fashion-mnist-mlp.yaml" "$out"
  while [ $# -gt 0 ]; do
    sed -i "s|^\(\s*\)$1:.*|\1$1: $2|" "$out"
    shift 2
  done
}

# run_rank_pid RUN_DIR ATTEMPT RANK: the pid of that rank of that attempt of the `ringtrain run`
# working in RUN_DIR (its runners' command lines name RUN_DIR/checkpoints), if it runs.
run_rank_pid() {
  local pid env
  for pid in $(pgrep -f -- "$1/checkpoints"); do
    env=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null) || continue
    if grep -qx "RINGTRAIN_ATTEMPT=$2" <<<"$env" && grep -qx "RINGTRAIN_RANK=$3" <<<"$env"; then
      echo "$pid"
      return 0
    fi
  done
  return 1
}

# start_rank RANK WORLD PORT TOKEN LOG [runner flags...]: a runner in the background.
start_rank() {
  local rank=$1 world=$2 port=$3 token=$4 log=$5
  shift 5
  RINGTRAIN_JOB=e2e RINGTRAIN_RANK=$rank RINGTRAIN_WORLD_SIZE=$world \
    RINGTRAIN_MASTER_ADDR=127.0.0.1 RINGTRAIN_MASTER_PORT=$port RINGTRAIN_TOKEN=$token \
    RINGTRAIN_METRICS_PORT=${METRICS_PORT:--1} RINGTRAIN_TERMINATION_LOG=$log.termination \
    "$BIN/ringtrain-runner" --dataset "$DATA" "$@" >"$log" 2>&1 &
  PIDS+=($!)
  LAST_PID=$!
}

# wait_exit PID SECONDS: sets RC to the exit code of a background process of this shell,
# failing if it outlives SECONDS. (Not for $(...): a subshell cannot wait for our children.)
wait_exit() {
  local pid=$1 limit=$2 deadline=$((SECONDS + $2))
  while kill -0 "$pid" 2>/dev/null; do
    [ $SECONDS -lt $deadline ] || fail "process $pid still running after ${limit}s"
    sleep 0.2
  done
  RC=0
  wait "$pid" || RC=$?
}

# start_fake_cluster: the fake API server binary with the TrainingJob CRD established, and a
# kubeconfig for it in $KUBECONFIG_FILE; `k ARGS` runs the real kubectl against it.
start_fake_cluster() {
  command -v kubectl >/dev/null || fail "kubectl not installed"
  "$BIN/fake-apiserver" >"$WORK/apiserver.url" 2>"$WORK/apiserver.log" &
  PIDS+=($!)
  wait_until 30 "the fake API server" test -s "$WORK/apiserver.url"
  KUBECONFIG_FILE=$WORK/kubeconfig
  cat >"$KUBECONFIG_FILE" <<YAML
apiVersion: v1
kind: Config
clusters: [{name: fake, cluster: {server: "$(head -n1 "$WORK/apiserver.url")"}}]
users: [{name: me, user: {token: e2e}}]
contexts: [{name: fake, context: {cluster: fake, user: me, namespace: default}}]
current-context: fake
YAML
  k apply -f "$SRC/manifests/crd/" >/dev/null || fail "CRD apply"
  k wait --for=condition=Established crd/trainingjobs.ringtrain.dev --timeout=30s >/dev/null ||
    fail "CRD not established"
}
k() { kubectl --kubeconfig "$KUBECONFIG_FILE" --request-timeout=20s "$@"; }

# Rank 0's HTTP endpoints on the port in $mport (set by the test before it starts rank 0):
# status_field FIELD: a field of its /status; metric NAME: the value of its series of NAME;
# past_step N and state_is STATE: tests on its /status for wait_until.
status_field() {
  curl -sf "http://127.0.0.1:$mport/status" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)[sys.argv[1]])' "$1"
}
metric() {
  curl -sf "http://127.0.0.1:$mport/metrics" | awk -v n="$1" 'index($0, n "{") == 1 {print $NF}'
}
past_step() { [ "$(status_field step)" -gt "$1" ]; }
state_is() { [ "$(status_field state)" = "$1" ]; }

# start_leading_controller KUBECONFIG IDENTITY: `ringtrain controller --leader-elect` in the
# background (pid in $CTRL, log in $WORK/controller.log) until it holds the lease; then the
# shipped MLP example applied and its gang of two pods created.
start_leading_controller() {
  "$BIN/ringtrain" controller --kubeconfig "$1" --leader-elect \
    --lease-namespace default --identity "$2" --metrics-addr "" --health-addr "" \
    >"$WORK/controller.log" 2>&1 &
  CTRL=$!
  PIDS+=("$CTRL")
  LEADER=$2
  holds_lease() {
    [ "$(k get lease ringtrain-controller-leader -o 'jsonpath={.spec.holderIdentity}')" = "$LEADER" ]
  }
  wait_until 60 "the controller to hold the lease" holds_lease
  k apply -f "$SRC/manifests/examples/fashion-mnist-mlp.yaml" >/dev/null || fail "job apply"
  pods() { [ "$(k get pods -l ringtrain.dev/job=fashion-mnist-mlp -o name | wc -l)" = 2 ]; }
  wait_until 60 "the gang of pods" pods
}
