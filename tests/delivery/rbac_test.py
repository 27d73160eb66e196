#!/usr/bin/env python3
"""The controller's ClusterRole grants exactly what the controller's code calls, no more.

Reads every API call in controller/ (client_->Get/List/Create/Update/UpdateStatus/Patch/
Delete/Watch on a kube::Resource constant, and the resources informers list and watch), adds
`update` on trainingjobs/finalizers when children carry blockOwnerDeletion (the
OwnerReferencesPermissionEnforcement admission plugin demands it), and compares that set of
(apiGroup, resource, verb) with manifests/rbac/cluster_role.yaml. The chart's copy is compared
with the manifest by helm_chart_test.sh.

usage: rbac_test.py SOURCE_DIR      exits 1 with one line per difference
"""
import glob
import re
import sys

import yaml

VERBS = {"Get": "get", "List": "list", "Create": "create", "Update": "update",
         "UpdateStatus": "update", "Patch": "patch", "Delete": "delete", "Watch": "watch"}


def function_bodies(text):
    """(name, parameter, body) of each function defined with a `const kube::Resource&` first
    parameter."""
    for m in re.finditer(r'\b(?:\w+::)?(\w+)\(const (?:kube::)?Resource& (\w+),[^;{]*\{', text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        yield m.group(1), m.group(2), text[m.end():i]


def first_arguments(text, fn):
    """The text of the first argument of every call of `fn` in `text` (definitions too)."""
    for m in re.finditer(r'\b' + re.escape(fn) + r'\(', text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            c = text[i]
            if c in "([{":
                depth += 1
            elif c in ")]}":
                depth -= 1
            elif c == "," and depth == 1:
                break
            i += 1
        first = text[m.end():i]
        if re.fullmatch(r'\s*\*?\w+\s*', first) and not re.search(r'\bk[A-Z]', first):
            # A loop's resource (`for (auto [r, obj] : {std::pair{&kube::kSecrets, ...}})
            # F(*r, ...)`): the loop's constants.
            head = text.rfind("for (", 0, m.start())
            if head >= 0:
                first = " ".join(re.findall(r'&(?:kube::)?(k\w+)', text[head:m.start()]))
        yield first


def main(src):
    sources = {}
    for path in glob.glob(f"{src}/controller/**/*.cc", recursive=True) + \
            glob.glob(f"{src}/controller/**/*.h", recursive=True):
        with open(path) as f:
            sources[path] = f.read()
    # kube::Resource constants: kPods{"", "v1", "pods"} wherever they are declared.
    resources = {}
    for text in sources.values():
        for name, group, plural in re.findall(
                r'Resource\s+(k\w+)\s*\{\s*"([^"]*)"\s*,\s*"[^"]*"\s*,\s*"([^"]*)"', text):
            resources[name] = (group, plural)
    needed = set()
    problems = []
    for path, text in sources.items():
        if "/controller/kube/kube_client" in path:
            continue  # the client implements the verbs; it is not a caller
        for method, const in re.findall(
                r'client_?->(Get|List|Create|UpdateStatus|Update|Patch|Delete|Watch)\(\s*'
                r'\*?(?:kube::)?(k\w+)', text):
            if const not in resources:
                problems.append(f"{path}: {method} on unknown resource constant {const}")
                continue
            group, plural = resources[const]
            res = plural + "/status" if method == "UpdateStatus" else plural
            needed.add((group, res, VERBS[method]))
        for const in re.findall(r'\.resource\s*=\s*(?:kube::)?(k\w+)', text):
            group, plural = resources[const]
            needed.update({(group, plural, "list"), (group, plural, "watch")})
        # Calls through a loop over resources (`for (auto [r, obj] : {std::pair{&kube::kSecrets,
        # ...}, ...}) client_->Create(*r, ...)`): the loop's constants get the call's verb.
        for m in re.finditer(r'client_->(\w+)\(\*r,', text):
            head = text.rfind("for (", 0, m.start())
            for const in re.findall(r'&(?:kube::)?(k\w+)', text[head:m.start()]):
                group, plural = resources[const]
                needed.add((group, plural, VERBS[m.group(1)]))
        # Calls on a resource parameter (`Status F(const kube::Resource& resource, ...)` whose
        # body calls client_->Get(resource, ...)): every constant a caller passes as F's first
        # argument gets the verb. CheckExistingChild reads an existing Secret, Service, claim
        # or PodGroup after its create said AlreadyExists (a restarted controller).
        for fn, param, body in function_bodies(text):
            verbs = {VERBS[v] for v in re.findall(
                r'client_->(\w+)\(\s*' + re.escape(param) + r'\b', body)}
            if not verbs:
                continue
            for caller in sources.values():
                for first in first_arguments(caller, fn):
                    for const in re.findall(r'(?:kube::)?\b(k[A-Z]\w+)', first):
                        if const not in resources:
                            continue
                        group, plural = resources[const]
                        needed.update((group, plural, v) for v in verbs)
    if any('"blockOwnerDeletion", true' in t for t in sources.values()):
        needed.add(("ringtrain.dev", "trainingjobs/finalizers", "update"))

    with open(f"{src}/manifests/rbac/cluster_role.yaml") as f:
        role = [d for d in yaml.safe_load_all(f) if d and d.get("kind") == "ClusterRole"][0]
    granted = set()
    for r in role["rules"]:
        for g in r.get("apiGroups", []):
            for res in r.get("resources", []):
                for v in r.get("verbs", []):
                    granted.add((g, res, v))
    for g, res, v in sorted(needed - granted):
        problems.append(f"cluster_role.yaml: the controller calls {v} on {res} "
                        f"(group {g!r}) but the role does not grant it")
    for g, res, v in sorted(granted - needed):
        problems.append(f"cluster_role.yaml: grants {v} on {res} (group {g!r}), "
                        f"which the controller never calls")
    for p in problems:
        print(f"rbac_test: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
