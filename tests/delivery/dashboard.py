#!/usr/bin/env python3
"""The Grafana dashboard and the alert rules, checked statically and against a live Prometheus.

  dashboard.py check DASHBOARD.json METRICS.md
      Static checks: unique panel ids, every panel has a query, every query and panel uses the
      datasource variable, every $variable resolves (defined, and defined before a variable
      query that uses it), panels lie on the 24-column grid without overlapping, every metric
      documented in README.md (Metrics) is charted (or listed in NOT_CHARTED with the reason),
      no runner counter is read raw (outside rate/irate/increase: it restarts at 0 in each
      process), no min/max/avg across ranks takes a runner counter's rate() or increase() per
      series (a rank's processes are summed first).
  dashboard.py live DASHBOARD.json RULES.yaml PROMETHEUS_URL TIMEOUT_SECONDS
      Every PromQL expression of the dashboard (variables substituted: once with "All", once
      with the first value of each variable) and of the rules must return data through
      /api/v1/query (in the test accuracy and test MSE panels, the first job that exports the
      metric: a job exports one of them); each label_values() variable query must find values;
      every rule must load and evaluate healthy. Polls until all pass or TIMEOUT_SECONDS, then
      names what failed.
  dashboard.py scenario DASHBOARD.json PROMETHEUS_URL SCENARIO_URL TIMEOUT_SECONDS
      The panels' values for fake_exporters.py's job whose rank 0 is replaced in place (a new
      process: counters from 0, another instance label) while the survivor's
      ringtrain_recovery_seconds_total accrues live: waits (at most TIMEOUT_SECONDS) until the
      scenario is over, then reads the panels over its whole span through /api/v1/query_range
      and checks them against what the job did: "Steps/s per job" follows the survivor's pace
      (a dead process's partial window does not pass for the rank's), "Checkpoints written"
      counts every checkpoint of both rank-0 processes, "Goodput" stays within 0-1 and drops
      below 1 while the gang recovers, "Training loss" leaves out the replacement's 0 while
      it waits for the state, "Seconds since last step" stays near 0 while the gang trains
      and counts the seconds since the loss while it recovers.
"""
import json
import math
import re
import sys
import time
import urllib.parse
import urllib.request

import yaml

DS_VAR = {"type": "prometheus", "uid": "${datasource}"}
BUILTINS = {"__rate_interval", "__interval", "__interval_ms", "__range", "__range_s",
            "__range_ms", "__all", "__name", "__dashboard", "__from", "__to", "__org",
            "__user", "timeFilter", "__timeFilter"}
VAR_REF = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)(?::\w+)?\]\]")
# Documented metrics the dashboard does not chart, and why.
NOT_CHARTED = {
    # A rank's own throughput over its last report window (1 s); /status and `kubectl get tj`
    # show it times the world size. The dashboard derives throughput per rank and per job
    # from rate(ringtrain_samples_total) instead (the job's is the sum over its ranks).
    "ringtrain_samples_per_second",
    # The operator's per-job copies of what the runners export live (the step and the phase,
    # which "Jobs by phase" counts): the test figures are charted after the runners exit, these
    # add nothing a panel lacks.
    "ringtrain_controller_job_step",
    "ringtrain_controller_job_phase",
}
# A job exports the test metric of its kind of model, never both: a classification model
# ringtrain_test_accuracy_ratio, a regression model ringtrain_test_mse. With a single job
# selected one of their panels is empty, so the live test substitutes, in those panels'
# expressions, the first job that exports the metric (it runs a job of each kind).
PER_MODEL_KIND = ("ringtrain_test_accuracy_ratio", "ringtrain_test_mse")
# min/max/avg across series of a runner counter's rate() or increase() straight away: each
# process of a rank is its own series, so the rank's series must be summed first.
PER_PROCESS_ACROSS_RANKS = re.compile(
    r"\b(min|max|avg)\s*(?:(?:by|without)\s*\([^)]*\)\s*)?\(\s*(rate|irate|increase)\(\s*"
    r"ringtrain_(?!controller_)\w+")
# A runner counter (per process) outside rate(), irate() or increase().
RAW_RUNNER_COUNTER = re.compile(
    r"(?<!\w)(?<!rate\()(?<!increase\()(ringtrain_(?!controller_)\w+_(?:total|count|sum|bucket))\b")
# Substitutes for Grafana's interval variables in the live test: Prometheus scrapes every
# second there, so 15 s windows hold enough samples for rate() and friends.
LIVE_INTERVAL = "15s"
# Substitute for the dashboard's time range ($__range, in instant stat queries): its default.
LIVE_RANGE = "1h"


def panels_of(dash):
    for p in dash.get("panels", []):
        yield p
        for q in p.get("panels", []):  # collapsed rows nest their panels
            yield q


def refs(text):
    return {a or b or c for a, b, c in VAR_REF.findall(text)}


def check(dash_path, metrics_md):
    problems = []
    dash = json.load(open(dash_path))
    for key in ("uid", "title", "schemaVersion", "templating", "panels"):
        if key not in dash:
            problems.append(f"dashboard has no {key}")
    variables = dash["templating"]["list"]
    names = [v["name"] for v in variables]
    if len(set(names)) != len(names):
        problems.append(f"duplicate variable names {names}")
    ds = [v for v in variables if v["name"] == "datasource"]
    if not ds or ds[0]["type"] != "datasource" or ds[0]["query"] != "prometheus":
        problems.append("no datasource variable of type datasource/prometheus")
    for want in ("namespace", "job", "rank"):
        if want not in names:
            problems.append(f"no {want} variable")
    for i, v in enumerate(variables):
        if v["type"] != "query":
            continue
        if v.get("datasource") != DS_VAR:
            problems.append(f"variable {v['name']}: datasource is not ${{datasource}}")
        q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        if not re.fullmatch(r"label_values\(.+,\s*\w+\)", q):
            problems.append(f"variable {v['name']}: query {q!r} is not label_values(selector, label)")
        for r in refs(q):
            if r not in names[:i] and r not in BUILTINS:
                problems.append(f"variable {v['name']}: uses ${r}, not defined before it")
    # Every datasource reference anywhere is the variable (or Grafana's built-in annotations).
    def walk(node, path):
        if isinstance(node, dict):
            for k, val in node.items():
                if k == "datasource" and val not in (DS_VAR, {"type": "grafana", "uid": "-- Grafana --"}) \
                        and not path.startswith("templating"):
                    problems.append(f"{path}.datasource is {val!r}, not the datasource variable")
                walk(val, f"{path}.{k}")
        elif isinstance(node, list):
            for i, val in enumerate(node):
                walk(val, f"{path}[{i}]")
    walk(dash, "")
    ids = []
    cells = {}
    charted = set()
    for p in panels_of(dash):
        ids.append(p.get("id"))
        g = p.get("gridPos", {})
        if not (0 <= g.get("x", -1) and g.get("x", 0) + g.get("w", 0) <= 24 and g.get("w", 0) > 0 and g.get("h", 0) > 0):
            problems.append(f"panel {p.get('id')} {p.get('title')!r}: gridPos {g} is off the 24-column grid")
        for x in range(g.get("x", 0), g.get("x", 0) + g.get("w", 0)):
            for y in range(g.get("y", 0), g.get("y", 0) + g.get("h", 0)):
                if (x, y) in cells:
                    problems.append(f"panel {p.get('id')} overlaps panel {cells[(x, y)]}")
                    break
                cells[(x, y)] = p.get("id")
            else:
                continue
            break
        if p.get("type") == "row":
            continue
        if not p.get("title"):
            problems.append(f"panel {p.get('id')} has no title")
        if p.get("datasource") != DS_VAR:
            problems.append(f"panel {p.get('id')} {p.get('title')!r}: datasource is not ${{datasource}}")
        targets = p.get("targets") or []
        if not targets:
            problems.append(f"panel {p.get('id')} {p.get('title')!r} has no query")
        ref_ids = [t.get("refId") for t in targets]
        if len(set(ref_ids)) != len(ref_ids) or None in ref_ids:
            problems.append(f"panel {p.get('id')}: refIds {ref_ids} not unique")
        for t in targets:
            expr = t.get("expr", "").strip()
            if not expr:
                problems.append(f"panel {p.get('id')} {p.get('title')!r}: target {t.get('refId')} has no expr")
            for r in refs(expr):
                if r not in names and r not in BUILTINS:
                    problems.append(f"panel {p.get('id')} {p.get('title')!r}: ${r} is not a variable")
            charted |= set(re.findall(r"\bringtrain_\w+", expr))
            for m in RAW_RUNNER_COUNTER.finditer(expr):
                problems.append(
                    f"panel {p.get('id')} {p.get('title')!r}: {m.group(1)} read raw: the counter starts "
                    f"at 0 in every process (a replaced or restarted rank); use increase() or rate()")
            for m in PER_PROCESS_ACROSS_RANKS.finditer(expr):
                problems.append(
                    f"panel {p.get('id')} {p.get('title')!r}: {m.group(0)}...: a rank replaced in place is "
                    f"a new process (another series, its counter from 0) beside the dead one's partial "
                    f"window; take sum by (namespace, job, rank) of the {m.group(2)}() before {m.group(1)}")
    if len(set(ids)) != len(ids) or None in ids:
        dup = sorted({i for i in ids if ids.count(i) > 1})
        problems.append(f"panel ids not unique: {dup}")
    documented = set(re.findall(r"`(ringtrain_\w+)`", open(metrics_md).read()))
    if not documented:
        problems.append(f"{metrics_md} documents no metric")
    charted_base = {re.sub(r"_(bucket|sum|count)$", "", m) for m in charted}
    for m in sorted(documented - charted_base - NOT_CHARTED):
        problems.append(f"{m} (README.md (Metrics)) is on no panel")
    for m in sorted(charted_base - documented):
        problems.append(f"{m} is charted but not documented in README.md (Metrics)")
    return problems


# --- live ----------------------------------------------------------------------------------

def get(base, path, **params):
    url = f"{base}{path}?{urllib.parse.urlencode(params, doseq=True)}"
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        return json.load(e)


def substitute(expr, values):
    expr = expr.replace("$__rate_interval", LIVE_INTERVAL).replace("$__interval", LIVE_INTERVAL)
    expr = expr.replace("${__rate_interval}", LIVE_INTERVAL).replace("${__interval}", LIVE_INTERVAL)
    expr = re.sub(r"\$(__range|\{__range\})(?!_)", LIVE_RANGE, expr)

    def one(m):
        name = m.group(1) or m.group(2) or m.group(3)
        return values.get(name, m.group(0))
    return VAR_REF.sub(one, expr)


def shorten(expr):
    """Rule windows and offsets (minutes) shrink to seconds: the live job runs for seconds."""
    expr = re.sub(r"\[(\d+[smhdwy])+\]", f"[{LIVE_INTERVAL}]", expr)
    return re.sub(r"\boffset\s+(\d+[smhdwy])+", "offset 5s", expr)


def as_bool(expr):
    """`a > 0.5` filters; `a > bool 0.5` keeps every series with 0 or 1: an alert expression
    then returns data whether or not it fires, so its inputs can be proven to exist."""
    out, i, depth, quote = [], 0, 0, None
    while i < len(expr):
        c = expr[i]
        if quote:
            out.append(c)
            if c == "\\":
                out.append(expr[i + 1])
                i += 2
                continue
            if c == quote:
                quote = None
            i += 1
            continue
        if c in "\"'`":
            quote = c
        elif c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif depth == 0 and c in "=!<>":
            op = expr[i:i + 2] if expr[i:i + 2] in ("==", "!=", ">=", "<=") else c
            if op in ("==", "!=", ">=", "<=", ">", "<"):
                out.append(op)
                i += len(op)
                if not re.match(r"\s*bool\b", expr[i:]):
                    out.append(" bool")
                continue
        out.append(c)
        i += 1
    return "".join(out)


def promql_regex_escape(value):
    """What Grafana puts in a query for a single selected value: regex metacharacters escaped
    with a backslash, itself escaped for the PromQL string literal."""
    return re.sub(r"([\\.^$*+?()\[\]{}|])", r"\\\\\1", value)


def label_values(base, query, values):
    m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", substitute(query, values))
    selector, label = m.group(1), m.group(2)
    res = get(base, "/api/v1/series", **{"match[]": selector})
    return sorted({s[label] for s in res.get("data", []) if label in s})


def first_values(base, variables, failures, restrict=None):
    """The first value of each variable (escaped), resolved in order as Grafana does; restrict
    maps a variable to a selector whose values of that label it must be among."""
    first = {}
    for v in variables:
        q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        found = label_values(base, q, first)
        if restrict and v["name"] in restrict:
            also = set(label_values(base, f"label_values({restrict[v['name']]}, {v['name']})", first))
            q = f"{q} among {restrict[v['name']]}"
            found = [f for f in found if f in also]
        if not found:
            failures.append(f"variable {v['name']}: {q} found no values")
        else:
            first[v["name"]] = promql_regex_escape(found[0])
    return first


def live(dash_path, rules_path, base, timeout):
    dash = json.load(open(dash_path))
    rules = yaml.safe_load(open(rules_path))
    variables = [v for v in dash["templating"]["list"] if v["type"] == "query"]
    deadline = time.monotonic() + timeout
    while True:
        failures, evaluated = [], 0
        # Variables: "All" (.*), and the first value of each, resolved in order.
        all_values = {v["name"]: v.get("allValue", ".*") for v in variables}
        first = first_values(base, variables, failures)
        # The first values again with the job restricted to those exporting a model kind's metric.
        first_of_kind = {m: first_values(base, variables, failures,
                                         {"job": f'{m}{{namespace=~"$namespace"}}'})
                         for m in PER_MODEL_KIND}
        exprs = []
        for p in panels_of(dash):
            for t in p.get("targets", []):
                kind = [m for m in PER_MODEL_KIND if re.search(rf"\b{m}\b", t["expr"])]
                single = ((f"first job exporting {kind[0]}", first_of_kind[kind[0]]) if len(kind) == 1
                          else ("first", first))
                for label, values in (("all", all_values), single):
                    exprs.append((f"panel {p['id']} {p['title']!r} {t['refId']} [{label}]",
                                  substitute(t["expr"], values), True))
        for g in rules["groups"]:
            for r in g["rules"]:
                name = r.get("alert") or r.get("record")
                exprs.append((f"rule {name}", as_bool(shorten(r["expr"])), True))
                # The expression as written must at least be valid PromQL.
                exprs.append((f"rule {name} (as written)", r["expr"], False))
        for what, expr, need_data in exprs:
            evaluated += 1
            res = get(base, "/api/v1/query", query=expr)
            if res.get("status") != "success":
                failures.append(f"{what}: {res.get('error')} in: {expr}")
                continue
            result = res["data"]["result"]
            if not need_data:
                continue
            if not result:
                failures.append(f"{what}: no data for: {expr}")
                continue
            vals = [float(s["value"][1]) for s in result]
            if not any(math.isfinite(x) for x in vals):
                failures.append(f"{what}: only NaN/Inf ({vals[:3]}) for: {expr}")
        health = get(base, "/api/v1/rules")
        loaded = 0
        for g in health.get("data", {}).get("groups", []):
            for r in g["rules"]:
                loaded += 1
                if r.get("health") != "ok":
                    failures.append(f"rule {r['name']}: health {r.get('health')!r} {r.get('lastError', '')}")
        want = sum(len(g["rules"]) for g in rules["groups"])
        if loaded != want:
            failures.append(f"Prometheus loaded {loaded} rules, the file has {want}")
        if not failures:
            print(f"dashboard.py live: {evaluated} expressions evaluated, all returned data; "
                  f"{loaded} rules healthy; variables: {first}; for the model kinds' panels: "
                  f"{ {m: v.get('job') for m, v in first_of_kind.items()} }")
            return []
        if time.monotonic() > deadline:
            return failures
        time.sleep(1)


# --- scenario -------------------------------------------------------------------------------

def panel(dash, title):
    found = [p for p in panels_of(dash) if p.get("title") == title]
    if len(found) != 1:
        raise SystemExit(f"dashboard.py: no single panel titled {title!r}")
    return found[0]


def series_values(res):
    """{labels (sorted tuple): [(t, value), ...]} of a query_range answer."""
    if res.get("status") != "success":
        raise RuntimeError(res.get("error"))
    return {tuple(sorted(r["metric"].items())): [(float(t), float(v)) for t, v in r["values"]]
            for r in res["data"]["result"]}


def scenario_check(dash_path, base, scenario_url, timeout):
    dash = json.load(open(dash_path))
    deadline = time.monotonic() + timeout
    while True:
        with urllib.request.urlopen(scenario_url, timeout=10) as r:
            sc = json.load(r)
        # Done, and Prometheus has scraped the final values (it scrapes every second).
        if sc["done"] and sc["now"] > sc["end"] + 3:
            break
        if time.monotonic() > deadline:
            return [f"scenario not over after {timeout} s: {sc}"]
        time.sleep(1)
    problems = []
    window = float(LIVE_INTERVAL.rstrip("s"))
    values = {"namespace": promql_regex_escape(sc["namespace"]), "job": promql_regex_escape(sc["job"]),
              "rank": ".*"}
    # Full rate windows from training on, to the end of training.
    start, end = sc["train"] + window + 1, sc["end"]

    def query_range(expr):
        return series_values(get(base, "/api/v1/query_range", query=expr, start=f"{start:.3f}",
                                 end=f"{end:.3f}", step="1"))

    def one_series(title, expr):
        got = query_range(expr)
        if len(got) != 1:
            problems.append(f"{title!r}: {len(got)} series for job {sc['job']} (want 1): {expr}")
            return {}
        return dict(next(iter(got.values())))

    def phase(t):
        return ("before the loss" if t < sc["kill"] else "recovering" if t < sc["handover"]
                else "trained again")

    # Steps/s per job against the survivor's own pace (rank 1: one process throughout).
    p = panel(dash, "Steps/s per job")
    expr = substitute(p["targets"][0]["expr"], values)
    shown = one_series(p["title"], expr)
    truth = one_series("truth", substitute(
        'rate(ringtrain_steps_total{namespace="$namespace", job="$job", rank="1"}[$__rate_interval])',
        {"namespace": sc["namespace"], "job": sc["job"]}))
    # In the first rate window after the loss the survivor's rate still holds steps from before
    # it, while the replacement of rank 0 (a new process, its counter from 0) reads 0 at once:
    # the panel may read anything from 0 up to the survivor's pace there (with the survivor's
    # pace near 1 step/s at the window's end, 0 failed the lower bound now and then).
    def low(t):
        return 0 if sc["kill"] <= t < sc["kill"] + window + 1 else 0.8 * truth[t] - 1
    bad_points = [(t, truth[t], shown.get(t)) for t in sorted(truth)
                  if shown.get(t) is None or not low(t) <= shown[t] <= 1.2 * truth[t] + 1]
    if not truth:
        problems.append("no steps rate of the survivor rank (is the fake job scraped?)")
    for t, want, got in bad_points[:5]:
        problems.append(f"{p['title']!r} at {t - sc['kill']:+.0f} s from the loss of rank 0 ({phase(t)}): "
                        f"{got} steps/s, the survivor took {want:.2f}/s: {expr}")
    # Checkpoints written over the dashboard's range, after the job: all of them.
    p = panel(dash, "Checkpoints written")
    expr = substitute(p["targets"][0]["expr"], values)
    res = get(base, "/api/v1/query", query=expr, time=f"{sc['end'] + 2:.3f}")
    got = [float(r["value"][1]) for r in res.get("data", {}).get("result", [])]
    if got != [sc["checkpoints"]]:
        problems.append(f"{p['title']!r}: {got}, the job wrote {sc['checkpoints']} checkpoints "
                        f"({sc['checkpoints_of_the_last_rank_0']} of them by the replacement of rank 0): {expr}")
    # Goodput: within 0-1 everywhere, below 1 while the gang recovers (the survivor's counter
    # accrues live) and back to 1 once a whole window trains again.
    p = panel(dash, "Goodput (share of time training)")
    expr = substitute(p["targets"][0]["expr"], values)
    good = one_series(p["title"], expr)
    outside = [(t, v) for t, v in sorted(good.items()) if not -1e-9 <= v <= 1 + 1e-9]
    for t, v in outside[:5]:
        problems.append(f"{p['title']!r} at {t - sc['kill']:+.0f} s from the loss of rank 0 ({phase(t)}): "
                        f"{v:.3f}, outside 0-1: {expr}")
    recovering = [v for t, v in good.items() if sc["kill"] + window / 2 + 1 < t < sc["handover"]]
    if not recovering or max(recovering) >= 0.6:
        problems.append(f"{p['title']!r} while the gang recovers: {sorted(recovering)[-3:]} "
                        f"(want below 0.6: no rank trained for over half the window): {expr}")
    settled = [v for t, v in good.items() if t > sc["handover"] + window + 1]
    if not settled or min(settled) < 0.99:
        problems.append(f"{p['title']!r} a window after the recovery: {sorted(settled)[:3]} (want 1): {expr}")
    # Training loss while rank 0's replacement waits for the state (it has no loss yet):
    # the survivor's loss, not half of it.
    p = panel(dash, "Training loss")
    expr = substitute(p["targets"][0]["expr"], values)
    loss = one_series(p["title"], expr)
    survivor = one_series("truth", substitute(
        'ringtrain_loss{namespace="$namespace", job="$job", rank="1"}',
        {"namespace": sc["namespace"], "job": sc["job"]}))
    waiting = [t for t in sorted(survivor) if sc["replace"] + 2 < t < sc["handover"]]
    if not waiting:
        problems.append("no loss of the survivor rank while the replacement waits")
    for t in [t for t in waiting if abs(loss.get(t, 0) - survivor[t]) > 0.01 * survivor[t]][:3]:
        problems.append(f"{p['title']!r} at {t - sc['kill']:+.0f} s from the loss of rank 0 ({phase(t)}): "
                        f"{loss.get(t)}, the survivor's loss is {survivor[t]:.4f}: {expr}")
    # Seconds since last step: about a scrape interval while the gang trains, the time since
    # the loss of rank 0 while it recovers (the survivor's last step holds; the replacement has
    # none before the handover).
    p = panel(dash, "Seconds since last step")
    expr = substitute(p["targets"][0]["expr"], values)
    since = one_series(p["title"], expr)
    slack = 5  # scrapes every second, late by a few on a loaded machine
    recovering = [t for t in sorted(since) if sc["kill"] + 2 < t < sc["handover"]]
    training = [t for t in sorted(since)
                if t < sc["kill"] or sc["handover"] + slack < t < sc["end"]]
    if not recovering or not training:
        problems.append(f"{p['title']!r}: {len(recovering)} points while the gang recovers, "
                        f"{len(training)} while it trains: {expr}")
    off = [(t, since[t], t - sc["kill"]) for t in recovering
           if not t - sc["kill"] - 1 <= since[t] <= t - sc["kill"] + slack]
    off += [(t, since[t], 0.0) for t in training if not -1 <= since[t] <= slack]
    for t, got, want in off[:5]:
        problems.append(f"{p['title']!r} at {t - sc['kill']:+.0f} s from the loss of rank 0 ({phase(t)}): "
                        f"{got:.1f} s, want about {want:.0f} s: {expr}")
    if not problems:
        print(f"dashboard.py scenario: job {sc['job']}: steps/s per job follows the survivor at "
              f"{len(truth)} points, {sc['checkpoints']} checkpoints counted, goodput within 0-1 "
              f"(min {min(good.values()):.2f} while recovering), seconds since last step up to "
              f"{max(since.values()):.0f} while recovering")
    return problems


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "check":
        problems = check(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 6 and sys.argv[1] == "scenario":
        problems = scenario_check(sys.argv[2], sys.argv[3].rstrip("/"), sys.argv[4], float(sys.argv[5]))
    elif len(sys.argv) == 6 and sys.argv[1] == "live":
        problems = live(sys.argv[2], sys.argv[3], sys.argv[4].rstrip("/"), float(sys.argv[5]))
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    for p in problems:
        print(f"dashboard.py: {p}")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
