#!/usr/bin/env bash
# The alert rules: `promtool check rules` and `promtool test rules` (monitoring/rules_test.yaml:
# a firing and a quiet case for every alert), and every alert has a test.
source "$(dirname "$0")/lib.sh"
command -v promtool >/dev/null || fail "promtool not installed (Debian package prometheus)"
rules=$SRC/monitoring/ringtrain-rules.yaml
promtool check rules "$rules" || fail "promtool check rules"
(cd "$SRC/monitoring" && promtool test rules rules_test.yaml) || fail "promtool test rules"
python3 - "$rules" "$SRC/monitoring/rules_test.yaml" <<'PY' || fail "alerts without unit tests"
import sys, yaml
rules = yaml.safe_load(open(sys.argv[1]))
tests = yaml.safe_load(open(sys.argv[2]))
alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
firing, quiet = set(), set()
for t in tests["tests"]:
    for case in t.get("alert_rule_test", []):
        (firing if case.get("exp_alerts") else quiet).add(case["alertname"])
missing = sorted((alerts - firing) | (alerts - quiet))
for a in missing:
    print(f"{a}: needs a firing and a quiet case in rules_test.yaml "
          f"(firing: {a in firing}, quiet: {a in quiet})")
for r in (r for g in rules["groups"] for r in g["rules"] if "alert" in r):
    for key in ("severity",):
        if key not in r.get("labels", {}):
            print(f"{r['alert']}: no {key} label"); missing.append(r["alert"])
    for key in ("summary", "description"):
        if key not in r.get("annotations", {}):
            print(f"{r['alert']}: no {key} annotation"); missing.append(r["alert"])
sys.exit(1 if missing else 0)
PY
echo PASS
