#!/usr/bin/env bash
# The Helm chart: helm lint --strict and helm template are clean (nothing on stderr, no
# warnings) with the default values, with everything enabled and with other names; the
# rendered objects pass the offline schema and reference checks of check_chart.py and agree
# with manifests/; crds/ is byte-identical to manifests/crd/; the rendered core objects and
# the shipped example are applied with the real kubectl to the fake API server, and
# `kubectl get tj` shows the printer columns of the chart's CRD.
source "$(dirname "$0")/lib.sh"
tools

# --- crds/ is manifests/crd/ --------------------------------------------------------------
for f in "$SRC"/manifests/crd/*.yaml; do
  cmp -s "$f" "$CHART/crds/$(basename "$f")" ||
    fail "charts/ringtrain/crds/$(basename "$f") differs from manifests/crd/$(basename "$f"): cp manifests/crd/*.yaml charts/ringtrain/crds/"
done
for f in "$CHART"/crds/*; do
  [ -f "$SRC/manifests/crd/$(basename "$f")" ] || fail "charts/ringtrain/crds/$(basename "$f") has no manifests/crd/ original"
done

# --- lint -------------------------------------------------------------------------------
lint() {
  "$HELM" lint --strict "$CHART" "$@" >"$WORK/lint.out" 2>&1 || { cat "$WORK/lint.out"; fail "helm lint $*"; }
  if grep -E '\[(WARNING|ERROR)\]' "$WORK/lint.out"; then fail "helm lint $* reported problems"; fi
  grep -q '1 chart(s) linted, 0 chart(s) failed' "$WORK/lint.out" || { cat "$WORK/lint.out"; fail "helm lint $*"; }
}
lint
lint -f "$DELIVERY/values-all.yaml"
lint --set rbac.create=false --set serviceAccount.create=false

# --- template + checks ------------------------------------------------------------------
# render NAME RELEASE NAMESPACE [helm args]: helm template into $WORK/NAME.yaml; stderr empty.
render() {
  local name=$1 release=$2 ns=$3
  shift 3
  "$HELM" template "$release" "$CHART" --namespace "$ns" --include-crds "$@" \
    >"$WORK/$name.yaml" 2>"$WORK/$name.err" || { cat "$WORK/$name.err"; fail "helm template ($name)"; }
  [ ! -s "$WORK/$name.err" ] || { cat "$WORK/$name.err"; fail "helm template ($name) printed warnings"; }
}
check() {
  python3 "$DELIVERY/check_chart.py" --chart "$CHART" "$@" || fail "rendered objects ($1)"
}
core=CustomResourceDefinition,ServiceAccount,ClusterRole,ClusterRoleBinding,Service,Deployment

render default ringtrain ringtrain-system
check "$WORK/default.yaml" --namespace ringtrain-system --kinds "$core" \
  --compare-manifests "$SRC/manifests"

render all ringtrain ringtrain-system -f "$DELIVERY/values-all.yaml"
check "$WORK/all.yaml" --namespace ringtrain-system \
  --kinds "$core,ServiceMonitor,PodMonitor,PrometheusRule,ConfigMap" --readme "$SRC/README.md" \
  --expect 'Deployment.spec.replicas=2' \
  --expect 'Deployment.spec.template.spec.nodeSelector={"kubernetes.io/os": "linux"}' \
  --expect 'Deployment.spec.template.spec.tolerations.0.key="node-role.kubernetes.io/control-plane"' \
  --expect 'Deployment.spec.template.spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution.0.weight=100' \
  --expect 'Deployment.spec.template.spec.containers.0.image="ghcr.io/ringtrain/ringtrain:0.1.0-test"' \
  --expect 'Deployment.spec.template.spec.containers.0.args=["controller", "--leader-elect", "--metrics-addr=:9090", "--runner-image=registry.example.com/ml/ringtrain-runner:0.1.0", "--example-flag=1"]' \
  --expect 'Deployment.spec.template.spec.containers.0.ports.0={"name": "metrics", "containerPort": 9090, "protocol": "TCP"}' \
  --expect 'Deployment.spec.template.spec.containers.0.env.2={"name": "RINGTRAIN_LOG_LEVEL", "value": "debug"}' \
  --expect 'Deployment.spec.template.metadata.labels.team="ml-platform"' \
  --expect 'ConfigMap.metadata.labels.grafana_dashboard="1"' \
  --expect 'ConfigMap.metadata.namespace="monitoring"' \
  --expect 'ConfigMap.metadata.annotations.grafana_folder="Training"' \
  --expect 'ServiceMonitor.metadata.labels.release="kube-prometheus-stack"' \
  --expect 'PodMonitor.spec.namespaceSelector={"matchNames": ["ml", "research"]}' \
  --expect 'PrometheusRule.metadata.labels.release="kube-prometheus-stack"'

# Another release name and namespace, no RBAC, an existing service account, one replica
# without leader election: names follow the release, nothing refers to what is not rendered.
render other ml ops --set rbac.create=false --set serviceAccount.create=false \
  --set serviceAccount.name=existing --set controller.leaderElection.enabled=false \
  --set podMonitor.enabled=true --set serviceMonitor.enabled=true
check "$WORK/other.yaml" --namespace ops \
  --kinds CustomResourceDefinition,Service,Deployment,ServiceMonitor,PodMonitor \
  --expect 'Deployment.metadata.name="ml-ringtrain-controller"' \
  --expect 'Deployment.metadata.namespace="ops"' \
  --expect 'Deployment.spec.template.spec.serviceAccountName="existing"' \
  --expect 'Deployment.spec.template.spec.containers.0.args=["controller"]' \
  --expect 'PodMonitor.spec.namespaceSelector={"any": true}'

# --- the rendered objects and the example through kubectl and the fake API server ---------
start_fake_apiserver
# Core objects only: the fake API server (like a cluster without the Prometheus Operator)
# serves no monitoring.coreos.com kinds.
python3 - "$WORK/all.yaml" "$WORK/apply.yaml" <<'PY'
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
keep = [d for d in docs if not d["apiVersion"].startswith("monitoring.coreos.com/")]
yaml.safe_dump_all(keep, open(sys.argv[2], "w"), sort_keys=False)
PY
printf 'apiVersion: v1\nkind: Namespace\nmetadata: {name: monitoring}\n' >"$WORK/ns.yaml"
"${K[@]}" apply -f "$WORK/ns.yaml" >"$WORK/kubectl.log" 2>&1 || { cat "$WORK/kubectl.log"; fail "kubectl apply namespace"; }
"${K[@]}" get namespace ringtrain-system >/dev/null 2>&1 ||
  "${K[@]}" create namespace ringtrain-system >>"$WORK/kubectl.log" 2>&1 || true
"${K[@]}" apply -f "$WORK/apply.yaml" >"$WORK/kubectl.log" 2>&1 || { cat "$WORK/kubectl.log"; fail "kubectl apply of the rendered chart"; }
cat "$WORK/kubectl.log"
for obj in customresourcedefinition/trainingjobs.ringtrain.dev clusterrole/ringtrain-controller \
  clusterrolebinding/ringtrain-controller; do
  "${K[@]}" get "$obj" -o name >/dev/null || fail "kubectl get $obj"
done
for obj in serviceaccount/ringtrain-controller deployment/ringtrain-controller \
  service/ringtrain-controller-metrics; do
  "${K[@]}" -n ringtrain-system get "$obj" -o name >/dev/null || fail "kubectl get $obj"
done
"${K[@]}" -n monitoring get configmap/ringtrain-dashboard -o jsonpath='{.data.ringtrain-training\.json}' \
  >"$WORK/dashboard-from-api.json" || fail "kubectl get the dashboard ConfigMap"
python3 -c 'import json,sys; assert json.load(open(sys.argv[1])) == json.load(open(sys.argv[2]))' \
  "$WORK/dashboard-from-api.json" "$CHART/files/dashboards/ringtrain-training.json" ||
  fail "the dashboard read back from the API differs"
# README's "Deploy on Kubernetes" steps: the example applies against the chart's CRD; get tj shows its columns.
"${K[@]}" apply -f "$SRC/manifests/examples/fashion-mnist-mlp.yaml" >"$WORK/kubectl.log" 2>&1 ||
  { cat "$WORK/kubectl.log"; fail "kubectl apply the example"; }
"${K[@]}" get tj >"$WORK/get-tj.txt" 2>&1 || { cat "$WORK/get-tj.txt"; fail "kubectl get tj"; }
cat "$WORK/get-tj.txt"
grep -qE '^NAME +PHASE +REPLICAS +RESTARTS +STEP +SAMPLES/S +ACCURACY +PODS +AGE' "$WORK/get-tj.txt" ||
  fail "kubectl get tj: printer columns"
grep -qE '^fashion-mnist-mlp ' "$WORK/get-tj.txt" || fail "kubectl get tj: the example job"
# A second apply of the same render changes nothing (helm upgrade with the same values).
"${K[@]}" apply -f "$WORK/apply.yaml" >"$WORK/kubectl.log" 2>&1 || fail "kubectl re-apply"
if grep -vE ' (unchanged|configured)$' "$WORK/kubectl.log"; then fail "re-apply created objects"; fi
echo PASS
