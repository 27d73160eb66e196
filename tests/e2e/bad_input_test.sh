#!/usr/bin/env bash
# Bad input gets a clear error and a permanent exit code: truncated or corrupt IDX files, an
# invalid manifest, an unknown flag.
source "$(dirname "$0")/lib.sh"
mkdir -p "$WORK/trunc" "$WORK/corrupt"
cp "$DATA"/*.gz "$WORK/trunc/"
cp "$DATA"/*.gz "$WORK/corrupt/"
head -c 100000 "$DATA/train-images-idx3-ubyte.gz" >"$WORK/trunc/train-images-idx3-ubyte.gz"
python3 - "$WORK/corrupt/train-labels-idx1-ubyte.gz" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
for i in range(200, 260):
    b[i] ^= 0x5A
open(p, "wb").write(bytes(b))
PY
for kind in trunc corrupt; do
  RINGTRAIN_JOB=e2e RINGTRAIN_METRICS_PORT=-1 RINGTRAIN_TERMINATION_LOG=$WORK/$kind.term \
    "$BIN/ringtrain-runner" --dataset "$WORK/$kind" >"$WORK/$kind.log" 2>&1 && rc=0 || rc=$?
  [ "$rc" -ge 1 ] && [ "$rc" -le 127 ] || fail "$kind data: exit code $rc, expected 1-127"
  grep -q "$WORK/$kind/train-" "$WORK/$kind.log" || fail "$kind data: file not named"
  grep -q "DATA_LOSS" "$WORK/$kind.term" || fail "$kind data: termination message"
done
grep -q "truncated" "$WORK/trunc.log" || fail "truncated file not called truncated"

cat >"$WORK/bad.yaml" <<'YAML'
apiVersion: ringtrain.dev/v1alpha1
kind: TrainingJob
metadata:
  name: bad
spec:
  replicas: 0
YAML
"$BIN/ringtrain" run "$WORK/bad.yaml" >"$WORK/bad.log" 2>&1 && rc=0 || rc=$?
[ "$rc" = 1 ] || fail "invalid manifest: exit code $rc"
grep -q "bad.yaml: spec.replicas: must be at least 1, got 0" "$WORK/bad.log" ||
  fail "invalid manifest: field not named"
"$BIN/ringtrain" validate "$SRC/manifests/examples/fashion-mnist-cnn.yaml" >/dev/null ||
  fail "validate rejected the CNN example"

RINGTRAIN_METRICS_PORT=-1 "$BIN/ringtrain-runner" --epoch 3 >"$WORK/flag.log" 2>&1 && rc=0 || rc=$?
[ "$rc" = 1 ] || fail "unknown flag: exit code $rc"
grep -q -- "--epoch: unknown flag" "$WORK/flag.log" || fail "unknown flag not named"
echo PASS
