#!/usr/bin/env python3
"""A kubelet stand-in that runs pods as real podman containers (end-to-end tests only).

It polls the pods of an API server (the project's fake, plain HTTP on loopback) and runs each
new pod's first container with podman on one user-defined network, then reports the pod's life
through PATCH pods/NAME/status (merge-patch, as a kubelet does: see
tests/fakes/apiserver/transcripts/t2-08-pod-status-patch-kubelet.txt). The fast tests keep the process-based
kubelet in tests/fakes/kubelet; this one exercises what only a container shows: the image, its
user, its filesystem, the pod's securityContext, volumes, the Secret-fed env, DNS names and the
termination message path.

What it honours (anything else in a pod spec is ignored, and listed in the README):
  image (never pulled: a missing image leaves the pod Pending with ErrImageNeverPull),
  command/args ($(VAR) expanded), env (value, valueFrom secretKeyRef/configMapKeyRef/fieldRef), volumes
  (emptyDir, hostPath, persistentVolumeClaim as a host folder that outlives the pod, secret,
  configMap, downwardAPI rewritten every poll from the pod's labels and annotations) and
  volumeMounts (readOnly, subPath), securityContext (runAsUser, runAsGroup,
  runAsNonRoot, fsGroup, supplementalGroups, readOnlyRootFilesystem, capabilities,
  allowPrivilegeEscalation, privileged, seccompProfile), resources (limits.cpu → --cpus,
  limits.memory → --memory, requests.cpu → --cpu-shares), hostNetwork, hostname + subdomain
  (DNS names <hostname>.<subdomain>.<namespace>.svc[.cluster.local] as network aliases, which
  every container of the network resolves), status.podIP (a static address chosen before the
  container starts, so fieldRef status.podIP works), terminationMessagePath and
  terminationMessagePolicy, terminationGracePeriodSeconds (pod deletion → SIGTERM, grace,
  SIGKILL). restartPolicy is treated as Never (the operator's pods use Never).

It plays the scheduler's part too: it binds each pod it finds unbound to its node
(pods/NAME/binding), so the API server deletes it as it deletes a bound pod: the pod stays,
terminating, with deletionGracePeriodSeconds (the grace asked for, else its own). This kubelet
then stops the container with that grace, reports how it ended, and deletes the pod with grace 0
and its uid as precondition, as a kubelet does (transcripts/t4-05-binding-graceful-delete.txt).

Every podman call has a timeout; SIGTERM/SIGINT stop every container it started and exit.
"""

import argparse
import base64
import ipaddress
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

LABEL = "dev.ringtrain.container-kubelet"
PODMAN_TIMEOUT = 120  # seconds for one podman call (create/start/inspect)
API_TIMEOUT = 20  # seconds for one API request
NODE = "container-kubelet"  # the node this kubelet binds pods to (--node)
MIN_GRACE = 2  # kuberuntime's minimumGracePeriodInSeconds: a shorter grace still gets 2 s
MESSAGE_LIMIT = 4096  # bytes of a termination message, as the kubelet caps it
LOG_FALLBACK_LINES = 80  # FallbackToLogsOnError: the last lines of the log, as the kubelet does
LOG_FALLBACK_BYTES = 2048  # ... and at most this many bytes of them


def now_rfc3339():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def log(msg):
    sys.stderr.write("%s container-kubelet: %s\n" % (now_rfc3339(), msg))
    sys.stderr.flush()


class PodError(Exception):
    """A pod that cannot be started: reported in its status, as the kubelet would."""

    def __init__(self, reason, message, permanent=False):
        super().__init__(message)
        self.reason = reason
        self.message = message
        self.permanent = permanent


class Api:
    def __init__(self, server, token):
        self.server = server.rstrip("/")
        self.token = token

    def request(self, method, path, body=None, content_type="application/json"):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        req.add_header("User-Agent", "ringtrain-container-kubelet/1.0")
        if self.token:
            req.add_header("Authorization", "Bearer " + self.token)
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, timeout=API_TIMEOUT) as resp:
                return resp.status, json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as e:
            try:
                return e.code, json.loads(e.read() or b"{}")
            except ValueError:
                return e.code, {}
        except (urllib.error.URLError, OSError, ValueError) as e:
            # No answer (refused, reset, timed out) or not JSON: code 0; callers retry later.
            return 0, {"message": repr(e)}

    def get(self, path):
        return self.request("GET", path)

    def bind(self, ns, name):
        """What a scheduler sends: the pod is bound to this kubelet's node."""
        code, body = self.request("POST", "/api/v1/namespaces/%s/pods/%s/binding" % (ns, name), {
            "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "namespace": ns},
            "target": {"apiVersion": "v1", "kind": "Node", "name": NODE}})
        if code not in (201, 404):
            log("bind %s/%s: HTTP %d %s" % (ns, name, code, body.get("message", "")))
        return code

    def delete_stopped(self, ns, name, uid):
        """What a kubelet sends once a deleted pod's containers have stopped: grace 0, with the
        pod's uid as precondition so that a namesake created since is left alone."""
        code, body = self.request("DELETE", "/api/v1/namespaces/%s/pods/%s" % (ns, name), {
            "kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
            "preconditions": {"uid": uid}})
        if code not in (200, 404, 409):
            log("delete %s/%s: HTTP %d %s" % (ns, name, code, body.get("message", "")))
        return code

    def patch_status(self, ns, name, status):
        path = "/api/v1/namespaces/%s/pods/%s/status" % (ns, name)
        code, body = self.request("PATCH", path, {"status": status},
                                  "application/merge-patch+json")
        if code != 200:
            log("PATCH %s/%s status: HTTP %d %s" % (ns, name, code, body.get("message", "")))
        return code


# conmon (podman 4.3 on cgroup v1) writes an "oom" marker file into its working directory: keep
# that in the kubelet's state directory, not wherever the kubelet was started.
PODMAN_CWD = None


def podman(args, timeout=PODMAN_TIMEOUT, env=None, check=True):
    cmd = ["podman", "--runtime", "runc"] + args
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                           cwd=PODMAN_CWD)
    except subprocess.TimeoutExpired:
        raise PodError("RunContainerError", "podman %s timed out after %ds" % (args[0], timeout))
    if check and p.returncode != 0:
        raise PodError("RunContainerError",
                       "podman %s: %s" % (args[0], (p.stderr or p.stdout).strip()[-500:]))
    return p


def expand(text, env):
    """Kubernetes' expansion of env values, command and args: $(NAME) is NAME's value when the
    container declares it (else kept as written), $$ a literal $."""
    out, i = [], 0
    while i < len(text):
        if text[i] != "$" or i + 1 == len(text):
            out.append(text[i])
            i += 1
        elif text[i + 1] == "$":
            out.append("$")
            i += 2
        elif text[i + 1] == "(" and ")" in text[i + 2:]:
            close = text.index(")", i + 2)
            name = text[i + 2:close]
            out.append(env[name] if name in env else text[i:close + 1])
            i = close + 1
        else:
            out.append("$")
            i += 1
    return "".join(out)


def parse_cpu(q):
    q = str(q)
    if q.endswith("m"):
        return float(q[:-1]) / 1000.0
    return float(q)


_MEM_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "K": 10**3,
              "M": 10**6, "G": 10**9, "T": 10**12, "": 1}


def parse_memory(q):
    m = re.fullmatch(r"([0-9.]+)([KMGT]i?|k)?", str(q))
    if not m:
        raise PodError("CreateContainerConfigError", "resources: bad memory quantity %r" % q,
                       True)
    return int(float(m.group(1)) * _MEM_UNITS[m.group(2) or ""])


class Pod:
    def __init__(self, obj):
        meta = obj["metadata"]
        self.ns = meta.get("namespace", "default")
        self.name = meta["name"]
        self.uid = meta["uid"]
        self.obj = obj
        self.container = "k8s_%s_%s_%s" % (self.ns, self.name, self.uid[:8])
        self.ip = ""
        self.started_at = ""
        self.state = "pending"  # pending → running → finished, or gone
        self.waiting_reason = ""
        self.stopping = False
        self.grace = None  # the grace its stop runs with, once stopping
        self.kill_at = None  # time.monotonic() of its SIGKILL, once stopping; only moves earlier
        self.stopped = False  # its container has stopped (or was never started)
        self.termination_log = ""
        self.log_path = ""
        self.emptydirs = []
        self.downward = []  # (host dir, items) of downwardAPI volumes
        self.container_id = ""
        self.failures = 0  # failed starts in a row: the next try backs off (0.5 s .. 10 s)
        self.next_try = 0.0


class Kubelet:
    def __init__(self, args):
        self.args = args
        self.api = Api(args.server, args.token)
        self.state_dir = os.path.abspath(args.state_dir)
        self.pods = {}  # by uid
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.net = ipaddress.ip_network(args.subnet)
        self.used_ips = set()
        self.image_users = {}
        self.pvc_served = None  # unknown until the first list

    # ---- network ----------------------------------------------------------------------------
    def ensure_network(self):
        p = podman(["network", "exists", self.args.network], check=False)
        if p.returncode != 0:
            podman(["network", "create", "--subnet", str(self.net), self.args.network])
            log("created network %s (%s)" % (self.args.network, self.net))

    def allocate_ip(self):
        hosts = list(self.net.hosts())
        # The first address is the gateway (the host side of the bridge).
        for ip in hosts[9:]:
            s = str(ip)
            if s not in self.used_ips:
                self.used_ips.add(s)
                return s
        raise PodError("CreateContainerError", "no free address in %s" % self.net)

    # ---- the loop ---------------------------------------------------------------------------
    def run(self):
        global PODMAN_CWD
        os.makedirs(self.state_dir, exist_ok=True)
        PODMAN_CWD = self.state_dir
        self.ensure_network()
        self.remove_stale_containers()
        log("watching pods on %s (network %s)" % (self.args.server, self.args.network))
        while not self.stop.is_set():
            try:
                self.tick()
            except Exception as e:  # one bad tick must not end the kubelet
                log("tick failed: %r" % (e,))
            self.stop.wait(self.args.poll)
        self.shutdown()

    def list_pods(self):
        path = "/api/v1/pods"
        if self.args.namespace:
            path = "/api/v1/namespaces/%s/pods" % self.args.namespace
        code, body = self.api.get(path)
        if code != 200:
            raise RuntimeError("list pods: HTTP %d" % code)
        return body.get("items", [])

    def tick(self):
        items = self.list_pods()
        seen = set()
        for obj in items:
            uid = obj["metadata"].get("uid", "")
            seen.add(uid)
            terminating = bool(obj["metadata"].get("deletionTimestamp"))
            with self.lock:
                pod = self.pods.get(uid)
            if pod is None and not terminating:
                phase = obj.get("status", {}).get("phase", "Pending")
                if phase in ("Succeeded", "Failed"):
                    continue  # finished before this kubelet started: not ours to run
                pod = Pod(obj)
                with self.lock:
                    self.pods[uid] = pod
            if pod is None:
                if terminating and obj["spec"].get("nodeName") == NODE:
                    # Bound here, and nothing of it runs (this kubelet restarted, or its stop has
                    # ended but the final delete did not get through): let it go.
                    meta = obj["metadata"]
                    self.api.delete_stopped(meta.get("namespace", "default"), meta["name"], uid)
                continue
            pod.obj = obj
            if not terminating and not obj["spec"].get("nodeName"):
                self.api.bind(pod.ns, pod.name)  # as a scheduler would (again if it failed)
            if pod.downward and not terminating:
                self.refresh_downward_api(pod)
            if terminating:
                self.begin_stop(pod)
            elif pod.state == "pending":
                self.try_start(pod)
        with self.lock:
            gone = [p for uid, p in self.pods.items() if uid not in seen]
        for pod in gone:
            self.begin_stop(pod, deleted=True)
        self.check_exits()
        self.write_file_sd()
        self.provision_claims()

    # ---- start ------------------------------------------------------------------------------
    def try_start(self, pod):
        if time.monotonic() < pod.next_try:
            return
        try:
            self.start(pod)
        except PodError as e:
            pod.failures += 1
            pod.next_try = time.monotonic() + min(10.0, 0.5 * 2 ** (pod.failures - 1))
            if pod.ip and pod.state == "pending":
                self.used_ips.discard(pod.ip)
                pod.ip = ""
            if e.reason != pod.waiting_reason:
                log("%s/%s: %s: %s" % (pod.ns, pod.name, e.reason, e.message))
                pod.waiting_reason = e.reason
                self.report_waiting(pod, e.reason, e.message)
            if e.permanent:
                pod.state = "finished"
                self.api.patch_status(pod.ns, pod.name, {
                    "phase": "Failed", "reason": e.reason, "message": e.message})

    def report_waiting(self, pod, reason, message):
        c = pod.obj["spec"]["containers"][0]
        self.api.patch_status(pod.ns, pod.name, {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "True",
                            "lastTransitionTime": now_rfc3339()}],
            "containerStatuses": [{
                "name": c["name"], "ready": False, "started": False, "restartCount": 0,
                "image": c.get("image", ""), "imageID": "",
                "state": {"waiting": {"reason": reason, "message": message}}}]})

    def lookup(self, kind, ns, name):
        code, body = self.api.get("/api/v1/namespaces/%s/%s/%s" % (ns, kind, name))
        if code == 404:
            return None
        if code != 200:
            raise PodError("CreateContainerConfigError", "get %s %s: HTTP %d" % (kind, name, code))
        return body

    def key_from(self, kind, ns, ref):
        obj = self.lookup(kind, ns, ref["name"])
        label = "secret" if kind == "secrets" else "configmap"
        if obj is None:
            if ref.get("optional"):
                return None
            raise PodError("CreateContainerConfigError", '%s "%s" not found' % (label, ref["name"]))
        key = ref["key"]
        if kind == "secrets":
            data = obj.get("data") or {}
            if key not in data:
                raise PodError("CreateContainerConfigError",
                               "couldn't find key %s in Secret %s/%s" % (key, ns, ref["name"]))
            return base64.b64decode(data[key]).decode()
        data = obj.get("data") or {}
        if key not in data:
            raise PodError("CreateContainerConfigError",
                           "couldn't find key %s in ConfigMap %s/%s" % (key, ns, ref["name"]))
        return data[key]

    def field(self, pod, path):
        meta = pod.obj["metadata"]
        values = {
            "metadata.name": pod.name, "metadata.namespace": pod.ns, "metadata.uid": pod.uid,
            "status.podIP": pod.ip, "status.hostIP": "127.0.0.1",
            "spec.nodeName": NODE,
            "spec.serviceAccountName": pod.obj["spec"].get("serviceAccountName", "default"),
        }
        m = re.fullmatch(r"metadata\.(labels|annotations)\['(.+)'\]", path)
        if m:
            return (meta.get(m.group(1)) or {}).get(m.group(2), "")
        if path not in values:
            raise PodError("CreateContainerConfigError", "unsupported fieldRef %s" % path, True)
        return values[path]

    def env(self, pod, c):
        out = {}
        for e in c.get("env") or []:
            name = e["name"]
            if "valueFrom" not in e:
                out[name] = expand(e.get("value", ""), out)
                continue
            vf = e["valueFrom"]
            if "secretKeyRef" in vf:
                v = self.key_from("secrets", pod.ns, vf["secretKeyRef"])
            elif "configMapKeyRef" in vf:
                v = self.key_from("configmaps", pod.ns, vf["configMapKeyRef"])
            elif "fieldRef" in vf:
                v = self.field(pod, vf["fieldRef"]["fieldPath"])
            else:
                raise PodError("CreateContainerConfigError",
                               "env %s: unsupported valueFrom %s" % (name, list(vf)), True)
            if v is not None:
                out[name] = v
        return out

    def image_user(self, image):
        if image not in self.image_users:
            p = podman(["image", "inspect", "--format", "{{.Config.User}}", image], check=False)
            if p.returncode != 0:
                raise PodError("ErrImageNeverPull",
                               'Container image "%s" is not present with pull policy of Never'
                               % image)
            self.image_users[image] = p.stdout.strip()
        return self.image_users[image]

    def security_args(self, pod, c):
        psc = pod.obj["spec"].get("securityContext") or {}
        csc = c.get("securityContext") or {}
        merged = dict(psc)
        merged.update({k: v for k, v in csc.items()})
        args = []
        uid = merged.get("runAsUser")
        gid = merged.get("runAsGroup")
        image_user = self.image_user(c["image"])
        if uid is None:
            image_uid = image_user.split(":")[0]
            if merged.get("runAsNonRoot") and image_uid in ("", "0", "root"):
                raise PodError("CreateContainerConfigError",
                               "container has runAsNonRoot and image will run as root")
            if merged.get("runAsNonRoot") and not image_uid.isdigit():
                raise PodError("CreateContainerConfigError",
                               "container has runAsNonRoot and image has non-numeric user (%s), "
                               "cannot verify user is non-root" % image_uid)
        elif merged.get("runAsNonRoot") and int(uid) == 0:
            raise PodError("CreateContainerConfigError",
                           "container's runAsUser breaks non-root policy")
        if uid is not None or gid is not None:
            u = str(uid) if uid is not None else (image_user.split(":")[0] or "0")
            args += ["--user", u + (":%d" % gid if gid is not None else "")]
        for g in (psc.get("supplementalGroups") or []):
            args += ["--group-add", str(g)]
        if psc.get("fsGroup") is not None:
            args += ["--group-add", str(psc["fsGroup"])]
        if merged.get("readOnlyRootFilesystem"):
            # A pod's read-only root has no writable /tmp unless a volume provides one.
            args += ["--read-only", "--read-only-tmpfs=false"]
        if merged.get("privileged"):
            args += ["--privileged"]
        caps = merged.get("capabilities") or {}
        for cap in caps.get("drop") or []:
            args += ["--cap-drop", cap.lower() if cap.upper() == "ALL" else cap]
        for cap in caps.get("add") or []:
            args += ["--cap-add", cap]
        if merged.get("allowPrivilegeEscalation") is False:
            args += ["--security-opt", "no-new-privileges"]
        seccomp = (merged.get("seccompProfile") or {}).get("type", "RuntimeDefault")
        if seccomp == "Unconfined":
            args += ["--security-opt", "seccomp=unconfined"]
        return args

    def prepare_dir(self, path, fs_group, mode):
        os.makedirs(path, exist_ok=True)
        if fs_group is not None:
            # As the kubelet does for fsGroup volumes: group-owned, group-writable, setgid.
            for root, dirs, files in os.walk(path):
                for n in [root] + [os.path.join(root, d) for d in dirs]:
                    os.chown(n, -1, int(fs_group))
                    os.chmod(n, os.stat(n).st_mode | 0o2070)
                for f in files:
                    os.chown(os.path.join(root, f), -1, int(fs_group))
                    os.chmod(os.path.join(root, f), os.stat(os.path.join(root, f)).st_mode | 0o060)
        else:
            os.chmod(path, mode)

    def volume_sources(self, pod):
        fs_group = (pod.obj["spec"].get("securityContext") or {}).get("fsGroup")
        pod_dir = os.path.join(self.state_dir, "pods", pod.uid)
        out = {}
        for v in pod.obj["spec"].get("volumes") or []:
            name = v["name"]
            if "emptyDir" in v:
                path = os.path.join(pod_dir, "volumes", name)
                # An emptyDir is world-writable (0777) unless fsGroup owns it.
                self.prepare_dir(path, fs_group, 0o777)
                pod.emptydirs.append(path)
                out[name] = path
            elif "hostPath" in v:
                hp = v["hostPath"]
                if hp.get("type") in ("DirectoryOrCreate",):
                    os.makedirs(hp["path"], exist_ok=True)
                if not os.path.exists(hp["path"]):
                    raise PodError("CreateContainerConfigError",
                                   "hostPath %s does not exist" % hp["path"])
                out[name] = hp["path"]
            elif "persistentVolumeClaim" in v:
                claim = v["persistentVolumeClaim"]["claimName"]
                code, body = self.api.get("/api/v1/namespaces/%s/persistentvolumeclaims/%s"
                                          % (pod.ns, claim))
                if code == 404 and (body.get("details") or {}).get("name") == claim:
                    raise PodError("Unschedulable",
                                   'persistentvolumeclaim "%s" not found' % claim)
                # The claim's volume: a host folder per (namespace, claim) that outlives the pod.
                # Created root-owned 0755 like a fresh filesystem; fsGroup makes it writable.
                path = os.path.join(self.state_dir, "pvc", pod.ns, claim)
                self.prepare_dir(path, fs_group, 0o755)
                out[name] = path
            elif "downwardAPI" in v:
                # Files of fieldRefs, kept up to date from the pod by refresh_downward_api (the
                # kubelet rewrites them when labels or annotations change).
                path = os.path.join(pod_dir, "volumes", name)
                os.makedirs(path, exist_ok=True)
                os.chmod(path, 0o755)
                pod.downward.append((path, v["downwardAPI"].get("items") or []))
                self.refresh_downward_api(pod)
                out[name] = path
            elif "secret" in v or "configMap" in v:
                kind = "secrets" if "secret" in v else "configmaps"
                src = v.get("secret") or v.get("configMap")
                ref = src.get("secretName") or src.get("name")
                obj = self.lookup(kind, pod.ns, ref)
                if obj is None:
                    raise PodError("CreateContainerConfigError",
                                   '%s "%s" not found' % (kind[:-1], ref))
                path = os.path.join(pod_dir, "volumes", name)
                os.makedirs(path, exist_ok=True)
                for k, val in (obj.get("data") or {}).items():
                    data = base64.b64decode(val) if kind == "secrets" else val.encode()
                    with open(os.path.join(path, k), "wb") as f:
                        f.write(data)
                    os.chmod(os.path.join(path, k), 0o644)
                out[name] = path
            else:
                raise PodError("CreateContainerConfigError",
                               "volume %s: unsupported source %s" % (name, list(v)), True)
        return out

    def refresh_downward_api(self, pod):
        for path, items in pod.downward:
            for item in items:
                value = self.field(pod, (item.get("fieldRef") or {}).get("fieldPath", ""))
                target = os.path.join(path, item["path"])
                try:
                    with open(target) as f:
                        if f.read() == value:
                            continue
                except FileNotFoundError:
                    pass
                # Written beside and renamed: a reader never sees half a value.
                with open(target + ".tmp", "w") as f:
                    f.write(value)
                os.chmod(target + ".tmp", 0o644)
                os.replace(target + ".tmp", target)

    def start(self, pod):
        spec = pod.obj["spec"]
        if len(spec.get("containers") or []) != 1 or spec.get("initContainers"):
            raise PodError("CreateContainerConfigError",
                           "container-kubelet runs pods of exactly one container", True)
        c = spec["containers"][0]
        image = c["image"]
        sec = self.security_args(pod, c)  # checks the image is present first
        host_network = bool(spec.get("hostNetwork"))
        if not host_network and not pod.ip:
            pod.ip = self.allocate_ip()
        elif host_network:
            pod.ip = "127.0.0.1"
        env = self.env(pod, c)
        volumes = self.volume_sources(pod)

        pod_dir = os.path.join(self.state_dir, "pods", pod.uid)
        os.makedirs(pod_dir, exist_ok=True)
        pod.log_path = os.path.join(self.state_dir, "logs", "%s_%s.log" % (pod.ns, pod.name))
        os.makedirs(os.path.dirname(pod.log_path), exist_ok=True)
        args = ["create", "--name", pod.container, "--pull=never",
                "--label", "%s=%s" % (LABEL, self.args.instance),
                "--label", "io.kubernetes.pod.uid=" + pod.uid,
                "--label", "io.kubernetes.pod.name=" + pod.name,
                "--label", "io.kubernetes.pod.namespace=" + pod.ns,
                "--log-driver", "k8s-file", "--log-opt", "path=" + pod.log_path,
                "--stop-timeout", str(spec.get("terminationGracePeriodSeconds", 30))]
        hostname = spec.get("hostname") or pod.name
        if host_network:
            args += ["--network", "host"]
        else:
            args += ["--network", self.args.network, "--ip", pod.ip, "--hostname", hostname]
            sub = spec.get("subdomain")
            aliases = [hostname]
            if sub:
                base = "%s.%s.%s.svc" % (hostname, sub, pod.ns)
                aliases += ["%s.%s" % (hostname, sub), "%s.%s.%s" % (hostname, sub, pod.ns),
                            base, base + ".cluster.local"]
            for a in aliases:
                args += ["--network-alias", a]
        args += sec
        limits = (c.get("resources") or {}).get("limits") or {}
        requests = (c.get("resources") or {}).get("requests") or {}
        if "cpu" in limits:
            args += ["--cpus", "%g" % parse_cpu(limits["cpu"])]
        if "cpu" in requests:
            args += ["--cpu-shares", str(max(2, int(parse_cpu(requests["cpu"]) * 1024)))]
        if "memory" in limits:
            args += ["--memory", str(parse_memory(limits["memory"])), "--memory-swap",
                     str(parse_memory(limits["memory"]))]
        if c.get("workingDir"):
            args += ["--workdir", c["workingDir"]]
        # The termination message file: a host file bind-mounted at terminationMessagePath,
        # writable by any user (the kubelet creates it 0666 too).
        tpath = c.get("terminationMessagePath", "/dev/termination-log")
        pod.termination_log = os.path.join(pod_dir, "termination-log")
        open(pod.termination_log, "w").close()
        os.chmod(pod.termination_log, 0o666)
        args += ["--volume", "%s:%s:rw" % (pod.termination_log, tpath)]
        for m in c.get("volumeMounts") or []:
            src = volumes.get(m["name"])
            if src is None:
                raise PodError("CreateContainerConfigError",
                               "volumeMount %s: no volume of that name" % m["name"], True)
            if m.get("subPath"):
                src = os.path.join(src, m["subPath"])
                os.makedirs(src, exist_ok=True)
            args += ["--volume", "%s:%s:%s" % (src, m["mountPath"],
                                               "ro" if m.get("readOnly") else "rw")]
        # Env values travel in podman's environment, never on its command line (the token).
        penv = dict(os.environ)
        for k, v in env.items():
            args += ["--env", k]
            penv[k] = v
        if "command" in c:
            args += ["--entrypoint", json.dumps([expand(a, env) for a in c["command"]])]
        args.append(image)
        if "args" in c:
            args += [expand(a, env) for a in c["args"]]
        elif "command" in c:
            pass  # a command without args drops the image's CMD, as Kubernetes does
        podman(["rm", "-f", "--ignore", pod.container], check=False)
        pod.container_id = podman(args, env=penv).stdout.strip()
        podman(["start", pod.container])
        pod.started_at = now_rfc3339()
        pod.state = "running"
        pod.waiting_reason = ""
        log("%s/%s: started %s ip %s" % (pod.ns, pod.name, image, pod.ip))
        t = pod.started_at
        self.api.patch_status(pod.ns, pod.name, {
            "phase": "Running", "hostIP": "127.0.0.1", "podIP": pod.ip,
            "podIPs": [{"ip": pod.ip}], "startTime": t,
            "conditions": [{"type": k, "status": "True", "lastTransitionTime": t}
                           for k in ("Initialized", "Ready", "ContainersReady", "PodScheduled")],
            "containerStatuses": [{
                "name": c["name"], "ready": True, "started": True, "restartCount": 0,
                "image": image, "imageID": image, "containerID": "podman://" + pod.container,
                "state": {"running": {"startedAt": t}}}]})

    # ---- exits ------------------------------------------------------------------------------
    def check_exits(self):
        with self.lock:
            running = [p for p in self.pods.values() if p.state == "running" and not p.stopping]
        if not running:
            return
        p = podman(["ps", "-a", "--filter", "label=%s=%s" % (LABEL, self.args.instance),
                    "--format", "json"], check=False)
        if p.returncode != 0:
            log("podman ps: %s" % p.stderr.strip())
            return
        states = {}
        for c in json.loads(p.stdout or "[]"):
            for n in c.get("Names") or []:
                states[n] = str(c.get("State", "")).lower()
        for pod in running:
            # A container that is gone altogether is reported as exited too (137, below).
            if states.get(pod.container, "exited") in ("exited", "stopped", "dead"):
                self.report_exit(pod)

    @staticmethod
    def kernel_oom_killed(container_id):
        """podman misses OOM kills on a hybrid cgroup v1 machine (State.OOMKilled stays false):
        the kernel's log names the container's memory cgroup in its oom-kill line."""
        if not container_id:
            return False
        try:
            p = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return False
        needle = "task_memcg=/libpod_parent/libpod-" + container_id
        return any("oom-kill:" in ln and needle in ln for ln in p.stdout.splitlines())

    def read_message(self, pod, c, exit_code):
        msg = ""
        try:
            with open(pod.termination_log, "rb") as f:
                msg = f.read(MESSAGE_LIMIT).decode(errors="replace")
        except OSError:
            pass
        if not msg.strip() and exit_code != 0 and \
                c.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            msg = self.log_tail(pod)
        return msg

    def log_tail(self, pod):
        try:
            with open(pod.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 64 * 1024))
                lines = f.read().decode(errors="replace").splitlines()
        except OSError:
            return ""
        # k8s-file lines: "<time> <stream> <F|P> <text>".
        text = [ln.split(" ", 3)[3] if ln.count(" ") >= 3 else ln for ln in lines]
        out = "\n".join(text[-LOG_FALLBACK_LINES:])
        return out[-LOG_FALLBACK_BYTES:]

    def report_exit(self, pod):
        fmt = "{{.State.ExitCode}} {{.State.OOMKilled}} {{.State.StartedAt}} {{.State.FinishedAt}}"
        p = podman(["inspect", "--format", fmt, pod.container], check=False)
        pod.state = "finished"
        if p.returncode != 0:
            code, oom = 137, False
            log("%s/%s: container vanished: %s" % (pod.ns, pod.name, p.stderr.strip()))
        else:
            fields = p.stdout.split()
            code, oom = int(fields[0]), fields[1] == "true"
            if code == 137 and not oom:
                oom = self.kernel_oom_killed(pod.container_id)
        c = pod.obj["spec"]["containers"][0]
        reason = "OOMKilled" if oom else ("Completed" if code == 0 else "Error")
        message = self.read_message(pod, c, code)
        log("%s/%s: exited %d (%s)" % (pod.ns, pod.name, code, reason))
        terminated = {"exitCode": code, "reason": reason, "startedAt": pod.started_at,
                      "finishedAt": now_rfc3339(), "containerID": "podman://" + pod.container}
        if message:
            terminated["message"] = message
        t = now_rfc3339()
        self.api.patch_status(pod.ns, pod.name, {
            "phase": "Succeeded" if code == 0 else "Failed",
            "conditions": [{"type": k, "status": "False", "reason": "PodCompleted",
                            "lastTransitionTime": t} for k in ("Ready", "ContainersReady")],
            "containerStatuses": [{
                "name": c["name"], "ready": False, "started": False, "restartCount": 0,
                "image": c["image"], "imageID": c["image"],
                "containerID": "podman://" + pod.container,
                "state": {"terminated": terminated}}]})

    # ---- stop -------------------------------------------------------------------------------
    def begin_stop(self, pod, deleted=False):
        """deleted: gone from the API already (deleted with grace 0 by someone else, a force
        delete); else it is terminating, and is deleted once stopped. Called again while it
        stops (every tick): a shorter grace asked for since (a second delete) brings the SIGKILL
        forward to that grace from now, at least MIN_GRACE, as a kubelet's new StopContainer
        does; a longer one changes nothing."""
        grace = 0 if deleted else pod.obj["metadata"].get("deletionGracePeriodSeconds")
        if grace is None:
            grace = pod.obj["spec"].get("terminationGracePeriodSeconds", 30)
        grace = int(grace)
        with self.lock:
            if pod.stopping:
                if grace < pod.grace and not pod.stopped:
                    pod.grace = grace
                    kill_at = time.monotonic() + max(grace, MIN_GRACE)
                    if kill_at < pod.kill_at:
                        pod.kill_at = kill_at
                        log("%s/%s: grace shortened to %ds: SIGKILL after %ds" % (
                            pod.ns, pod.name, grace, max(grace, MIN_GRACE)))
                return
            pod.stopping = True
            pod.grace = grace
            pod.kill_at = time.monotonic() + max(grace, MIN_GRACE)
        threading.Thread(target=self.stop_pod, args=(pod, grace, not deleted),
                         daemon=True).start()

    def stop_pod(self, pod, grace, finalize):
        try:
            if pod.state == "running":
                wait = max(grace, MIN_GRACE)
                log("%s/%s: deleted with grace %ds: SIGTERM, SIGKILL after %ds" % (
                    pod.ns, pod.name, grace, wait))
                start = time.monotonic()
                # podman stop sends SIGTERM, then SIGKILL after its own wait; a shorter grace
                # that arrives meanwhile (begin_stop) sends the SIGKILL sooner.
                stop = subprocess.Popen(
                    ["podman", "--runtime", "runc", "stop", "-t", str(wait), pod.container],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=PODMAN_CWD)
                killed = False
                give_up = start + wait + 60
                while stop.poll() is None and time.monotonic() < give_up:
                    with self.lock:
                        kill_at = pod.kill_at
                    if not killed and time.monotonic() >= kill_at:
                        killed = True
                        podman(["kill", "--signal", "KILL", pod.container], check=False)
                    time.sleep(0.1)
                if stop.poll() is None:
                    stop.kill()
                    stop.wait()
                with self.lock:
                    pod.stopped = True
                p = podman(["inspect", "--format", "{{.State.ExitCode}}", pod.container],
                           check=False)
                log("%s/%s: stopped after %.1fs, exit code %s" % (
                    pod.ns, pod.name, time.monotonic() - start, p.stdout.strip() or "?"))
                if finalize:
                    try:
                        self.report_exit(pod)  # a terminal phase before the final delete (v1.28)
                    except Exception as e:  # noqa: BLE001 - the container goes regardless
                        log("%s/%s: reporting the end failed: %r" % (pod.ns, pod.name, e))
            podman(["rm", "-f", "--ignore", pod.container], check=False)
        finally:
            try:
                for d in pod.emptydirs:
                    shutil.rmtree(d, ignore_errors=True)
                if finalize:
                    # Not answered: the pod stays terminating, and the next tick, which no longer
                    # knows it, sends this again.
                    self.api.delete_stopped(pod.ns, pod.name, pod.uid)
            finally:
                self.forget(pod)

    def forget(self, pod):
        with self.lock:
            self.used_ips.discard(pod.ip)
            self.pods.pop(pod.uid, None)

    def remove_stale_containers(self):
        p = podman(["ps", "-aq", "--filter", "label=%s=%s" % (LABEL, self.args.instance)],
                   check=False)
        ids = p.stdout.split()
        if ids:
            podman(["rm", "-f", "-t", "0"] + ids, check=False)

    def shutdown(self):
        log("stopping every container")
        with self.lock:
            names = [p.container for p in self.pods.values()]
        if names:
            podman(["rm", "-f", "-t", "2", "--ignore"] + names, timeout=120, check=False)

    # ---- PersistentVolumeClaims -------------------------------------------------------------
    def provision_claims(self):
        """The provisioner's part, where the API server serves PVCs: a Pending claim becomes
        Bound (its host folder is made when a pod mounts it), and the folder of a claim that
        is gone is deleted (reclaim policy Delete)."""
        if self.pvc_served is False:
            return
        path = "/api/v1/persistentvolumeclaims"
        if self.args.namespace:
            path = "/api/v1/namespaces/%s/persistentvolumeclaims" % self.args.namespace
        code, body = self.api.get(path)
        if code == 404:
            self.pvc_served = False  # this API server has no PVCs: claims are folders by name
            return
        if code != 200:
            return
        self.pvc_served = True
        present = set()
        for claim in body.get("items", []):
            meta = claim["metadata"]
            present.add((meta.get("namespace", "default"), meta["name"]))
            if (claim.get("status") or {}).get("phase") == "Bound":
                continue
            spec = claim.get("spec") or {}
            storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
            p = "/api/v1/namespaces/%s/persistentvolumeclaims/%s/status" % (
                meta.get("namespace", "default"), meta["name"])
            self.api.request("PATCH", p, {"status": {
                "phase": "Bound", "accessModes": spec.get("accessModes") or ["ReadWriteOnce"],
                "capacity": {"storage": storage}}}, "application/merge-patch+json")
        root = os.path.join(self.state_dir, "pvc")
        for ns in os.listdir(root) if os.path.isdir(root) else []:
            for name in os.listdir(os.path.join(root, ns)):
                if (ns, name) not in present:
                    shutil.rmtree(os.path.join(root, ns, name), ignore_errors=True)

    # ---- Prometheus file service discovery --------------------------------------------------
    def write_file_sd(self):
        """One target per container port of each running pod, with the meta labels Prometheus'
        kubernetes_sd_configs (role: pod) gives, so the same relabel_configs (the PodMonitor's,
        the README's) select the ranks' metrics ports."""
        if not self.args.file_sd:
            return
        groups = []
        with self.lock:
            pods = [p for p in self.pods.values() if p.state == "running" and not p.stopping]
        for pod in pods:
            meta = pod.obj["metadata"]
            base = {"__meta_kubernetes_namespace": pod.ns,
                    "__meta_kubernetes_pod_name": pod.name,
                    "__meta_kubernetes_pod_ip": pod.ip,
                    "__meta_kubernetes_pod_uid": pod.uid}
            for k, v in (meta.get("labels") or {}).items():
                base["__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", k)] = v
            c = pod.obj["spec"]["containers"][0]
            for port in c.get("ports") or []:
                labels = dict(base)
                labels["__meta_kubernetes_pod_container_name"] = c["name"]
                labels["__meta_kubernetes_pod_container_port_name"] = port.get("name", "")
                labels["__meta_kubernetes_pod_container_port_number"] = str(port["containerPort"])
                groups.append({"targets": ["%s:%d" % (pod.ip, port["containerPort"])],
                               "labels": labels})
        tmp = self.args.file_sd + ".tmp"
        with open(tmp, "w") as f:
            json.dump(groups, f)
        os.replace(tmp, self.args.file_sd)


def main():
    global NODE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", required=True, help="API server URL (http://127.0.0.1:PORT)")
    ap.add_argument("--token", default="", help="bearer token")
    ap.add_argument("--namespace", default="", help="only this namespace (default: all)")
    ap.add_argument("--network", default="ringtrain-e2e", help="podman network of the pods")
    ap.add_argument("--subnet", default="10.89.77.0/24", help="the network's subnet")
    ap.add_argument("--state-dir", required=True, help="volumes, logs, termination messages")
    ap.add_argument("--file-sd", default="", help="Prometheus file_sd JSON of metrics ports")
    ap.add_argument("--instance", default="e2e", help="label value of this kubelet's containers")
    ap.add_argument("--poll", type=float, default=0.5, help="seconds between pod lists")
    ap.add_argument("--node", default=NODE, help="the node name it binds pods to")
    args = ap.parse_args()
    NODE = args.node
    kubelet = Kubelet(args)
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: kubelet.stop.set())
    kubelet.run()


if __name__ == "__main__":
    main()
