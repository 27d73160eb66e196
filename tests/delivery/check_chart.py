#!/usr/bin/env python3
"""Offline checks of `helm template` output: the schema-level rules the API server and the
Prometheus Operator would enforce on the objects we render, the references between them, and
(--compare) agreement with the plain manifests in manifests/ on what matters: RBAC rules,
security contexts, probes, ports, resources, args. The PodMonitor (and, with --readme, the
README's scrape config for a Prometheus without the operator) must scrape every local rank's
metrics port of a multi-GPU runner pod.

usage: check_chart.py RENDERED.yaml --namespace NS --release NAME --kinds K1,K2,...
                      [--compare-manifests DIR] [--chart DIR] [--readme README.md]
                      [--pods PODS.json] [--expect KEY=VALUE ...]
Exits 1 with one line per problem.
"""
import argparse
import json
import re
import sys

import yaml

API = {  # kind -> (apiVersion, namespaced)
    "CustomResourceDefinition": ("apiextensions.k8s.io/v1", False),
    "ServiceAccount": ("v1", True),
    "ClusterRole": ("rbac.authorization.k8s.io/v1", False),
    "ClusterRoleBinding": ("rbac.authorization.k8s.io/v1", False),
    "Deployment": ("apps/v1", True),
    "Service": ("v1", True),
    "ConfigMap": ("v1", True),
    "ServiceMonitor": ("monitoring.coreos.com/v1", True),
    "PodMonitor": ("monitoring.coreos.com/v1", True),
    "PrometheusRule": ("monitoring.coreos.com/v1", True),
}
# Fields of the Prometheus Operator's monitoring.coreos.com/v1 specs that the chart may use
# (a typo such as honorLabel would be pruned silently by the real API server).
SM_SPEC = {"jobLabel", "targetLabels", "podTargetLabels", "endpoints", "selector",
           "namespaceSelector", "sampleLimit", "targetLimit", "attachMetadata"}
PM_SPEC = {"jobLabel", "podTargetLabels", "podMetricsEndpoints", "selector", "namespaceSelector",
           "sampleLimit", "targetLimit", "attachMetadata"}
ENDPOINT = {"port", "targetPort", "path", "scheme", "params", "interval", "scrapeTimeout",
            "tlsConfig", "bearerTokenSecret", "authorization", "honorLabels", "honorTimestamps",
            "basicAuth", "oauth2", "metricRelabelings", "relabelings", "proxyUrl",
            "followRedirects", "enableHttp2", "filterRunning"}
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
DURATION = re.compile(r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$")

problems = []


def bad(msg):
    problems.append(msg)


def check_labels(where, labels):
    for k, v in (labels or {}).items():
        prefix, _, name = k.rpartition("/")
        if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
            bad(f"{where}: label key {k!r}: bad prefix")
        if not name or len(name) > 63 or not LABEL_NAME.match(name):
            bad(f"{where}: label key {k!r}: bad name")
        if not isinstance(v, str):
            bad(f"{where}: label {k}: value {v!r} is not a string")
        elif len(v) > 63 or not LABEL_VALUE.match(v):
            bad(f"{where}: label {k}: bad value {v!r}")


def subset(small, big):
    return all(big.get(k) == v for k, v in (small or {}).items())


def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def check_objects(objs, ns):
    seen = set()
    for o in objs:
        kind = o.get("kind")
        meta = o.get("metadata") or {}
        name = meta.get("name", "")
        where = f"{kind}/{name}"
        if kind not in API:
            bad(f"{where}: unexpected kind")
            continue
        api, namespaced = API[kind]
        if o.get("apiVersion") != api:
            bad(f"{where}: apiVersion {o.get('apiVersion')!r}, want {api!r}")
        if not name or len(name) > 253 or not DNS1123_SUBDOMAIN.match(name):
            bad(f"{where}: metadata.name is not a DNS-1123 subdomain")
        if kind in ("Service", "Deployment") and (len(name) > 63 or not DNS1123_LABEL.match(name)):
            bad(f"{where}: metadata.name must be a DNS-1123 label (63 chars)")
        if namespaced and not meta.get("namespace"):
            bad(f"{where}: namespaced object without metadata.namespace")
        if not namespaced and "namespace" in meta:
            bad(f"{where}: cluster-scoped object with metadata.namespace")
        check_labels(where, meta.get("labels"))
        key = (kind, meta.get("namespace"), name)
        if key in seen:
            bad(f"{where}: rendered twice")
        seen.add(key)


def one(objs, kind):
    found = [o for o in objs if o["kind"] == kind]
    return found[0] if len(found) == 1 else None


def check_refs(objs, ns, chart):
    dep = one(objs, "Deployment")
    svc = one(objs, "Service")
    if dep is None or svc is None:
        bad("want exactly one Deployment and one Service")
        return
    spec = dep["spec"]
    pod = spec["template"]
    pod_labels = pod["metadata"].get("labels", {})
    check_labels("Deployment pod template", pod_labels)
    if not spec["selector"].get("matchLabels") or not subset(spec["selector"]["matchLabels"], pod_labels):
        bad("Deployment: selector.matchLabels do not select the pod template's labels")
    if not isinstance(spec.get("replicas"), int) or spec["replicas"] < 1:
        bad("Deployment: replicas must be a positive integer")
    podspec = pod["spec"]
    containers = podspec.get("containers") or []
    if len(containers) != 1:
        bad("Deployment: want one container")
        return
    c = containers[0]
    for field in ("name", "image"):
        if not c.get(field):
            bad(f"Deployment: container without {field}")
    ports = {}
    for p in c.get("ports", []):
        n = p.get("name", "")
        if len(n) > 15 or not DNS1123_LABEL.match(n):
            bad(f"Deployment: port name {n!r} is not an IANA_SVC_NAME")
        if not isinstance(p.get("containerPort"), int) or not 0 < p["containerPort"] < 65536:
            bad(f"Deployment: containerPort {p.get('containerPort')!r}")
        if n in ports:
            bad(f"Deployment: duplicate port name {n}")
        ports[n] = p
    for probe in ("livenessProbe", "readinessProbe"):
        pr = c.get(probe)
        if not pr:
            bad(f"Deployment: no {probe}")
        elif pr.get("httpGet", {}).get("port") not in ports:
            bad(f"Deployment: {probe} port {pr.get('httpGet', {}).get('port')!r} is not a container port")
    if c.get("args", [None])[0] != "controller":
        bad("Deployment: args must start with the `controller` subcommand")
    sc = c.get("securityContext", {})
    psc = podspec.get("securityContext", {})
    if not (sc.get("runAsNonRoot") or psc.get("runAsNonRoot")):
        bad("Deployment: not runAsNonRoot")
    if sc.get("allowPrivilegeEscalation") is not False or sc.get("readOnlyRootFilesystem") is not True:
        bad("Deployment: container must disallow privilege escalation and use a read-only root")
    if "ALL" not in sc.get("capabilities", {}).get("drop", []):
        bad("Deployment: capabilities must drop ALL")
    if not c.get("resources", {}).get("requests") or not c.get("resources", {}).get("limits"):
        bad("Deployment: requests and limits")
    # Service -> pods and ports.
    if not svc["spec"].get("selector") or not subset(svc["spec"]["selector"], pod_labels):
        bad("Service: selector does not select the controller's pods")
    for p in svc["spec"].get("ports", []):
        if p.get("targetPort") not in ports and p.get("targetPort") not in [q["containerPort"] for q in ports.values()]:
            bad(f"Service: targetPort {p.get('targetPort')!r} is not a container port")
    # ServiceAccount and RBAC.
    sa_name = podspec.get("serviceAccountName")
    sa = one(objs, "ServiceAccount")
    if sa is not None and (sa["metadata"]["name"] != sa_name or sa["metadata"]["namespace"] != ns):
        bad(f"ServiceAccount {sa['metadata']['name']} is not the Deployment's {sa_name}")
    crb, cr = one(objs, "ClusterRoleBinding"), one(objs, "ClusterRole")
    if (crb is None) != (cr is None):
        bad("ClusterRole and ClusterRoleBinding come together")
    if crb is not None:
        if crb["roleRef"] != {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                              "name": cr["metadata"]["name"]}:
            bad("ClusterRoleBinding: roleRef is not the ClusterRole")
        if crb["subjects"] != [{"kind": "ServiceAccount", "name": sa_name, "namespace": ns}]:
            bad(f"ClusterRoleBinding: subjects {crb['subjects']} are not the Deployment's account")
    # Prometheus Operator objects.
    sm = one(objs, "ServiceMonitor")
    if sm is not None:
        s = sm["spec"]
        if set(s) - SM_SPEC:
            bad(f"ServiceMonitor: unknown spec fields {sorted(set(s) - SM_SPEC)}")
        if not subset(s["selector"].get("matchLabels"), svc["metadata"].get("labels", {})) or not s["selector"].get("matchLabels"):
            bad("ServiceMonitor: selector does not select the metrics Service")
        if svc["metadata"]["namespace"] not in s.get("namespaceSelector", {}).get("matchNames", []):
            bad("ServiceMonitor: namespaceSelector misses the Service's namespace")
        if svc["metadata"].get("labels", {}).get(s.get("jobLabel")) != "ringtrain-controller":
            bad("ServiceMonitor: jobLabel must name a Service label whose value is ringtrain-controller (the alerts' job)")
        svc_ports = {p.get("name") for p in svc["spec"]["ports"]}
        for e in s.get("endpoints", []):
            if set(e) - ENDPOINT:
                bad(f"ServiceMonitor: unknown endpoint fields {sorted(set(e) - ENDPOINT)}")
            if e.get("port") not in svc_ports:
                bad(f"ServiceMonitor: endpoint port {e.get('port')!r} is not a Service port name")
            for d in ("interval", "scrapeTimeout"):
                if d in e and not DURATION.match(str(e[d])):
                    bad(f"ServiceMonitor: {d} {e[d]!r} is not a duration")
    pm = one(objs, "PodMonitor")
    if pm is not None:
        s = pm["spec"]
        if set(s) - PM_SPEC:
            bad(f"PodMonitor: unknown spec fields {sorted(set(s) - PM_SPEC)}")
        if {"key": "ringtrain.dev/job", "operator": "Exists"} not in s["selector"].get("matchExpressions", []):
            bad("PodMonitor: must select pods with the ringtrain.dev/job label")
        for e in s.get("podMetricsEndpoints", []):
            if set(e) - ENDPOINT:
                bad(f"PodMonitor: unknown endpoint fields {sorted(set(e) - ENDPOINT)}")
            if e.get("honorLabels") is not True:
                bad("PodMonitor: endpoint must scrape with honorLabels (runner labels)")
            for d in ("interval", "scrapeTimeout"):
                if d in e and not DURATION.match(str(e[d])):
                    bad(f"PodMonitor: {d} {e[d]!r} is not a duration")
        ns_sel = s.get("namespaceSelector", {})
        if not (ns_sel.get("any") is True or ns_sel.get("matchNames")):
            bad("PodMonitor: namespaceSelector must be any: true or matchNames")
        check_pod_targets(s.get("podMetricsEndpoints", []))
    pr = one(objs, "PrometheusRule")
    if pr is not None:
        with open(f"{chart}/files/prometheus/ringtrain-rules.yaml") as f:
            rules = yaml.safe_load(f)
        if pr["spec"] != rules:
            bad("PrometheusRule: spec differs from files/prometheus/ringtrain-rules.yaml")
    cm = one(objs, "ConfigMap")
    if cm is not None:
        with open(f"{chart}/files/dashboards/ringtrain-training.json") as f:
            text = f.read()
        data = cm.get("data", {}).get("ringtrain-training.json")
        if data is None or data.rstrip("\n") != text.rstrip("\n") or json.loads(data) != json.loads(text):
            bad("dashboard ConfigMap: data differs from files/dashboards/ringtrain-training.json")


# The container ports of a runner pod of an 8-GPU TrainingJob, as the controller declares them
# (controller/executors/kubernetes/pod_builder.cc): local rank i serves /metrics on 9400+i,
# port "metrics" for i = 0 and "metrics-<i>" for the others; plus the rendezvous port, and a
# sidecar a user's template may add (its own "metrics" port is not a rank's).
GPUS = 8
POD_PORTS = ([("runner", "rendezvous", 29500), ("runner", "metrics", 9400)]
             + [("runner", f"metrics-{i}", 9400 + i) for i in range(1, GPUS)]
             + [("sidecar", "metrics", 15090), ("sidecar", "admin", 15000)])
RANK_PORTS = {(c, n) for c, n, _ in POD_PORTS if c == "runner" and n.startswith("metrics")}
METRICS_PORT = 9400  # common/runner_env.h kMetricsPort: local rank i serves on METRICS_PORT + i
SIDECAR = [("sidecar", "metrics", 15090), ("sidecar", "admin", 15000)]


def use_pods(path):
    """Replaces the modelled runner pod by the pods of a `kubectl get pods -o json` (built by
    the real controller): the rank ports are the runner container's ports METRICS_PORT + i for
    each of its GPUs (local ranks), whatever their names; a sidecar is added."""
    global POD_PORTS, RANK_PORTS, GPUS
    pods = json.load(open(path))["items"]
    if not pods:
        bad(f"{path}: no pods")
    POD_PORTS, RANK_PORTS = list(SIDECAR), set()
    for pod in pods:
        for c in pod["spec"]["containers"]:
            limits = (c.get("resources") or {}).get("limits") or {}
            gpus = max(1, int(limits.get("nvidia.com/gpu", 0)))
            if c["name"] == "runner":
                GPUS = gpus
            for port in c.get("ports") or []:
                POD_PORTS.append((c["name"], port.get("name", ""), port["containerPort"]))
                if c["name"] == "runner" and METRICS_PORT <= port["containerPort"] < METRICS_PORT + gpus:
                    RANK_PORTS.add((c["name"], port.get("name", "")))
    if len(RANK_PORTS) < 2:
        bad(f"{path}: want a pod with several local ranks, found rank ports {sorted(RANK_PORTS)}")


def relabel(labels, rules):
    """Prometheus relabel_config semantics (anchored RE2 regexes, ';' separator, $N
    references) for the actions the chart may use; None when the target is dropped."""
    labels = dict(labels)
    for r in rules:
        action = r.get("action", "replace").lower()
        value = r.get("separator", ";").join(labels.get(l, "") for l in r.get("sourceLabels", []))
        m = re.fullmatch(r.get("regex", "(.*)"), value)
        if action == "keep" and not m:
            return None
        if action == "drop" and m:
            return None
        if action == "replace" and m:
            out = re.sub(r"\$\{?(\w+)\}?", lambda g: m.group(int(g.group(1))) or "" if g.group(1).isdigit()
                         else m.group(g.group(1)) or "", r.get("replacement", "$1"))
            if out:
                labels[r["targetLabel"]] = out
            else:
                labels.pop(r["targetLabel"], None)
        elif action not in ("keep", "drop", "replace"):
            bad(f"PodMonitor: relabeling action {action!r} is not simulated by check_chart.py")
    return labels


def scraped_ports(rules):
    out = []
    for c, name, number in POD_PORTS:
        t = relabel({"__meta_kubernetes_pod_container_name": c,
                     "__meta_kubernetes_pod_container_port_name": name,
                     "__meta_kubernetes_pod_container_port_number": str(number),
                     "__meta_kubernetes_pod_label_ringtrain_dev_job": "j"}, rules)
        if t is not None:
            out.append((c, name))
    return out


def check_scraped(where, scraped):
    for c, name in sorted(RANK_PORTS - set(scraped)):
        bad(f"{where}: port {name!r} of a {GPUS}-GPU runner pod (a local rank's /metrics) is not scraped")
    for c, name in sorted(set(scraped) - RANK_PORTS):
        bad(f"{where}: port {name!r} of container {c!r} is scraped, but it is no rank's /metrics")
    for t in sorted({t for t in scraped if scraped.count(t) > 1}):
        bad(f"{where}: port {t[1]!r} is scraped more than once")


def check_readme_scrape_config(readme):
    """README's scrape config for a Prometheus without the operator (job ringtrain-runner,
    kubernetes_sd pod role: one target per container port) scrapes every rank's port."""
    blocks = re.findall(r"```yaml\n(.*?)```", open(readme).read(), re.S)
    jobs = [j for b in blocks if "scrape_configs:" in b
            for j in (yaml.safe_load(b).get("scrape_configs") or []) if j.get("job_name") == "ringtrain-runner"]
    if len(jobs) != 1:
        bad(f"{readme}: no single scrape config with job_name ringtrain-runner")
        return
    job = jobs[0]
    if job.get("honor_labels") is not True:
        bad(f"{readme}: job ringtrain-runner must set honor_labels: true")
    rules = [{"action": r.get("action", "replace"), "sourceLabels": r.get("source_labels", []),
              "separator": r.get("separator", ";"), "regex": r.get("regex", "(.*)"),
              "replacement": r.get("replacement", "$1"), "targetLabel": r.get("target_label")}
             for r in job.get("relabel_configs", [])]
    check_scraped(f"{readme} job ringtrain-runner", scraped_ports(rules))


def check_pod_targets(endpoints):
    """What Prometheus scrapes of a runner pod: the operator turns each podMetricsEndpoint into
    a pod-role scrape job with one target per container port, keeps those whose port name
    matches `port` when it is set (the name is used as the regex), then applies the
    endpoint's relabelings. Every rank's port must be scraped exactly once, nothing else."""
    scraped = []
    for e in endpoints:
        rules = []
        if e.get("port"):
            rules.append({"action": "keep", "sourceLabels": ["__meta_kubernetes_pod_container_port_name"],
                          "regex": e["port"]})
        elif e.get("targetPort") is not None or e.get("portNumber") is not None:
            bad("PodMonitor: targetPort/portNumber select one port; the ranks serve on several")
        rules += e.get("relabelings") or []
        scraped += scraped_ports(rules)
    check_scraped("PodMonitor", scraped)


def norm_rules(rules):
    out = set()
    for r in rules:
        for g in r.get("apiGroups", []):
            for res in r.get("resources", []):
                for v in r.get("verbs", []):
                    out.add((g, res, v))
    return out


def compare(objs, mdir):
    m = {}
    for path in ("rbac/cluster_role.yaml", "rbac/cluster_role_binding.yaml",
                 "rbac/service_account.yaml", "controller/deployment.yaml", "controller/service.yaml"):
        for o in load(f"{mdir}/{path}"):
            m[o["kind"]] = o
    for kind in ("ClusterRole", "ClusterRoleBinding", "ServiceAccount", "Deployment", "Service"):
        c = one(objs, kind)
        if c is None:
            bad(f"compare: chart renders no {kind}")
            continue
        if c["metadata"]["name"] != m[kind]["metadata"]["name"]:
            bad(f"compare: {kind} is {c['metadata']['name']!r} in the chart, {m[kind]['metadata']['name']!r} in manifests/")
        if m[kind]["metadata"].get("namespace") != c["metadata"].get("namespace"):
            bad(f"compare: {kind} namespace differs")
    cr = one(objs, "ClusterRole")
    if cr is not None and norm_rules(cr["rules"]) != norm_rules(m["ClusterRole"]["rules"]):
        a, b = norm_rules(cr["rules"]), norm_rules(m["ClusterRole"]["rules"])
        bad(f"compare: ClusterRole rules differ: only in chart {sorted(a - b)}, only in manifests {sorted(b - a)}")
    crb = one(objs, "ClusterRoleBinding")
    if crb is not None:
        for f in ("roleRef", "subjects"):
            if crb[f] != m["ClusterRoleBinding"][f]:
                bad(f"compare: ClusterRoleBinding {f} differs")
    dep = one(objs, "Deployment")
    if dep is not None:
        cp, mp = dep["spec"]["template"]["spec"], m["Deployment"]["spec"]["template"]["spec"]
        for f in ("serviceAccountName", "securityContext", "terminationGracePeriodSeconds"):
            if cp.get(f) != mp.get(f):
                bad(f"compare: Deployment pod {f}: chart {cp.get(f)!r} manifests {mp.get(f)!r}")
        cc, mc = cp["containers"][0], mp["containers"][0]
        for f in ("name", "image", "imagePullPolicy", "args", "env", "ports", "livenessProbe",
                  "readinessProbe", "resources", "securityContext"):
            if cc.get(f) != mc.get(f):
                bad(f"compare: Deployment container {f}: chart {cc.get(f)!r} manifests {mc.get(f)!r}")
        if dep["spec"]["replicas"] != m["Deployment"]["spec"]["replicas"]:
            bad("compare: Deployment replicas differ")
        if not subset(m["Deployment"]["spec"]["selector"]["matchLabels"], dep["spec"]["template"]["metadata"]["labels"]):
            bad("compare: the chart's pods lack the manifests' selector labels")
    svc = one(objs, "Service")
    if svc is not None:
        for f in ("type", "ports"):
            if svc["spec"].get(f) != m["Service"]["spec"].get(f):
                bad(f"compare: Service {f}: chart {svc['spec'].get(f)!r} manifests {m['Service']['spec'].get(f)!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rendered")
    ap.add_argument("--namespace", required=True)
    ap.add_argument("--kinds", required=True)
    ap.add_argument("--chart", required=True)
    ap.add_argument("--compare-manifests")
    ap.add_argument("--readme", help="also check README.md's plain-Prometheus scrape config")
    ap.add_argument("--pods", help="kubectl get pods -o json of runner pods: check the PodMonitor "
                    "against their container ports instead of the modelled 8-GPU pod")
    ap.add_argument("--expect", action="append", default=[],
                    help="JSON-path-ish KIND.field.sub=JSON value the render must have")
    a = ap.parse_args()
    if a.pods:
        use_pods(a.pods)
    objs = load(a.rendered)
    kinds = sorted(o.get("kind", "?") for o in objs)
    want = sorted(a.kinds.split(","))
    if kinds != want:
        bad(f"kinds rendered {kinds}, want {want}")
    check_objects(objs, a.namespace)
    if not problems:
        check_refs(objs, a.namespace, a.chart)
    if a.compare_manifests:
        compare(objs, a.compare_manifests)
    if a.readme:
        check_readme_scrape_config(a.readme)
    for e in a.expect:
        path, _, value = e.partition("=")
        kind, *fields = path.split(".")
        v = one(objs, kind)
        for f in fields:
            v = v[int(f)] if isinstance(v, list) else (v or {}).get(f)
        if v != json.loads(value):
            bad(f"expected {path} = {value}, got {json.dumps(v)}")
    for p in problems:
        print(f"check_chart: {a.rendered}: {p}")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
