#!/usr/bin/env bash
# The Grafana dashboard's JSON, statically: unique panel ids, every panel has a query, the
# datasource is the variable, variables resolve, every documented metric is charted
# (dashboard.py check). monitoring/ holds links to the chart's single copies, not copies.
source "$(dirname "$0")/lib.sh"
for f in ringtrain-training.json:dashboards ringtrain-rules.yaml:prometheus; do
  name=${f%%:*}
  link=$SRC/monitoring/$name
  target=$CHART/files/${f##*:}/$name
  [ -L "$link" ] || fail "monitoring/$name must be a symlink to charts/ringtrain/files/${f##*:}/$name (one source of truth)"
  [ "$(readlink -f "$link")" = "$(readlink -f "$target")" ] || fail "monitoring/$name does not point at $target"
done
python3 -m json.tool "$SRC/monitoring/ringtrain-training.json" >/dev/null || fail "dashboard is not JSON"
# The metric reference: README.md's "Metrics" section.
metrics_doc=$SRC/README.md
python3 "$DELIVERY/dashboard.py" check "$SRC/monitoring/ringtrain-training.json" "$metrics_doc" ||
  fail "dashboard checks"
echo PASS
