# shellcheck shell=bash
# Shared helpers of the delivery tests: the end-to-end helpers (fail, wait_until, free_port,
# start_rank, a work dir cleaned up on exit) and the tools from install-tools.sh.
source "$(dirname "${BASH_SOURCE[0]}")/../e2e/lib.sh"
DELIVERY=$SRC/tests/delivery
CHART=$SRC/charts/ringtrain

# tools: sets HELM, KUBECTL and DOCKERFILE_UTILS (installing them into .cache/tools if needed).
tools() {
  local out
  out=$(bash "$DELIVERY/install-tools.sh" 2>"$WORK/install-tools.log") ||
    fail "install-tools.sh failed: $(cat "$WORK/install-tools.log")"
  local k v
  while IFS='=' read -r k v; do
    case $k in HELM | KUBECTL | DOCKERFILE_UTILS) printf -v "$k" '%s' "$v" ;; esac
  done <<<"$out"
  [ -x "${HELM:-}" ] && [ -x "${KUBECTL:-}" ] && [ -x "${DOCKERFILE_UTILS:-}" ] ||
    fail "install-tools.sh printed no usable tools: $out"
}

# start_fake_apiserver: starts build/bin/fake-apiserver, writes $WORK/kubeconfig for it and sets
# K to a kubectl command line that uses it.
start_fake_apiserver() {
  [ -x "$BIN/fake-apiserver" ] || fail "no $BIN/fake-apiserver (build it first)"
  "$BIN/fake-apiserver" >"$WORK/apiserver.url" 2>"$WORK/apiserver.log" &
  PIDS+=($!)
  wait_until 20 "fake-apiserver URL" grep -q '^http' "$WORK/apiserver.url"
  cat >"$WORK/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster: {server: $(head -n1 "$WORK/apiserver.url")}
users:
- name: test
  user: {token: any}
contexts:
- name: fake
  context: {cluster: fake, user: test, namespace: default}
current-context: fake
KC
  K=(timeout 30 "$KUBECTL" --kubeconfig "$WORK/kubeconfig" --cache-dir "$WORK/kube-cache")
}
