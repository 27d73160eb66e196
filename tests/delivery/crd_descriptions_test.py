#!/usr/bin/env python3
"""`kubectl explain trainingjob.spec` describes every field: each property of the CRD's
openAPIV3Schema (metadata aside, which the API server describes itself) has a description.

usage: crd_descriptions_test.py SOURCE_DIR      exits 1 with one line per undescribed field
"""
import sys

import yaml


def walk(schema, path, problems):
    for name, prop in (schema.get("properties") or {}).items():
        where = f"{path}.{name}" if path else name
        if where == "metadata":
            continue
        if not str(prop.get("description", "")).strip():
            problems.append(f"{where}: no description (kubectl explain shows <no description>)")
        walk(prop, where, problems)
    if isinstance(schema.get("items"), dict):
        walk(schema["items"], path + "[]", problems)


def main(src):
    path = f"{src}/manifests/crd/trainingjobs.ringtrain.dev.yaml"
    with open(path) as f:
        crd = yaml.safe_load(f)
    problems = []
    for v in crd["spec"]["versions"]:
        schema = v["schema"]["openAPIV3Schema"]
        if not schema.get("description"):
            problems.append(f"{v['name']}: the root has no description")
        walk(schema, "", problems)
    for p in problems:
        print(f"crd_descriptions_test: {path}: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
