#!/usr/bin/env bash
# Bad input gets a clear error and a permanent exit code: truncated or corrupt IDX files, test
# images of another shape than the training images, a checkpoint dir that cannot be written, an
# invalid manifest, an unknown flag, an unknown kernel backend, a model that diverges.
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

# Test images of another shape (14x14) than the training images (28x28): refused at load with
# the file named, never an overflow in the evaluation (issue 10 item 1).
mkdir -p "$WORK/shape"
cp "$DATA"/train-*.gz "$WORK/shape/"
python3 - "$WORK/shape" <<'PY'
import gzip, struct, sys
d = sys.argv[1]
n = 100
with gzip.open(d + "/t10k-images-idx3-ubyte.gz", "wb") as f:
    f.write(struct.pack(">IIII", 0x803, n, 14, 14) + bytes(n * 14 * 14))
with gzip.open(d + "/t10k-labels-idx1-ubyte.gz", "wb") as f:
    f.write(struct.pack(">II", 0x801, n) + bytes(n))
PY
RINGTRAIN_JOB=e2e RINGTRAIN_METRICS_PORT=-1 RINGTRAIN_TERMINATION_LOG=$WORK/shape.term \
  "$BIN/ringtrain-runner" --dataset "$WORK/shape" >"$WORK/shape.log" 2>&1 && rc=0 || rc=$?
[ "$rc" -ge 1 ] && [ "$rc" -le 127 ] || fail "test set of another shape: exit code $rc"
grep -q "$WORK/shape/t10k-images-idx3-ubyte.gz: images are 14x14" "$WORK/shape.log" ||
  fail "test set of another shape: file or shape not named"
grep -q "INVALID_ARGUMENT" "$WORK/shape.term" || fail "test set of another shape: termination"

# A checkpoint dir that can never be written fails at start-up, permanently, with the path and
# strerror (issue 9 item 11). Root ignores permissions, so: a path under a regular file, and
# (where setpriv exists) a root-owned dir seen by an unprivileged user.
touch "$WORK/afile"
RINGTRAIN_JOB=e2e RINGTRAIN_METRICS_PORT=-1 RINGTRAIN_TERMINATION_LOG=$WORK/notdir.term \
  "$BIN/ringtrain-runner" --dataset "$DATA" --checkpoint-dir "$WORK/afile/ckpt" \
  >"$WORK/notdir.log" 2>&1 && rc=0 || rc=$?
[ "$rc" -ge 1 ] && [ "$rc" -le 127 ] || fail "checkpoint dir under a file: exit code $rc"
grep -qF "spec.checkpoint.path (--checkpoint-dir) cannot be used: checkpoint dir $WORK/afile/ckpt: Not a directory" \
  "$WORK/notdir.term" || fail "checkpoint dir under a file: field, path or strerror not named"
# One that cannot even be created (ENOENT under /proc) is no "no checkpoint yet" either.
RINGTRAIN_JOB=e2e RINGTRAIN_METRICS_PORT=-1 RINGTRAIN_TERMINATION_LOG=$WORK/proc.term \
  "$BIN/ringtrain-runner" --dataset "$DATA" --checkpoint-dir /proc/ringtrain-e2e-ckpt \
  >"$WORK/proc.log" 2>&1 && rc=0 || rc=$?
[ "$rc" -ge 1 ] && [ "$rc" -le 127 ] || fail "checkpoint dir under /proc: exit code $rc"
grep -qF "spec.checkpoint.path (--checkpoint-dir) cannot be used: checkpoint dir /proc/ringtrain-e2e-ckpt" \
  "$WORK/proc.term" || fail "checkpoint dir under /proc: $(cat "$WORK/proc.term")"
grep -q "epoch [0-9]*/" "$WORK/proc.log" && fail "checkpoint dir under /proc: trained first"
# Checked right after the rendezvous (so every rank of a gang learns it from rank 0), before
# the first step: a job never trains up to its first checkpoint to find out.
grep -q "epoch [0-9]*/" "$WORK/notdir.log" && fail "checkpoint dir checked only after training began"
if command -v setpriv >/dev/null && [ "$(id -u)" = 0 ]; then
  chmod 755 "$WORK"
  mkdir -p "$WORK/rootonly" "$WORK/out"
  chmod 755 "$WORK/rootonly"
  chmod 1777 "$WORK/out"
  RINGTRAIN_JOB=e2e RINGTRAIN_METRICS_PORT=-1 RINGTRAIN_TERMINATION_LOG=$WORK/out/eacces.term \
    setpriv --reuid=65534 --regid=65534 --clear-groups \
    "$BIN/ringtrain-runner" --dataset "$DATA" --checkpoint-dir "$WORK/rootonly/ckpt" \
    >"$WORK/eacces.log" 2>&1 && rc=0 || rc=$?
  [ "$rc" -ge 1 ] && [ "$rc" -le 127 ] || fail "unwritable checkpoint dir: exit code $rc"
  grep -qF "PERMISSION_DENIED: spec.checkpoint.path (--checkpoint-dir) cannot be used: checkpoint dir $WORK/rootonly/ckpt: Permission denied" \
    "$WORK/out/eacces.term" || fail "unwritable checkpoint dir: termination message"
fi

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

# A layer list (issue 21): validate prints every layer's shape and parameters; a list that does
# not fit the data is refused naming the layer, by validate and by run before any rank starts.
"$BIN/ringtrain" validate "$SRC/manifests/examples/fashion-mnist-keras-cnn.yaml" \
  >"$WORK/keras.log" 2>&1 || fail "validate rejected the Keras-style CNN example"
grep -q "^layers\[11\] dense  *10  *1,290$" "$WORK/keras.log" || fail "validate: no layer table"
grep -q "^Total params: 421,642$" "$WORK/keras.log" || fail "validate: no parameter total"
cat >"$WORK/misfit.yaml" <<YAML
apiVersion: ringtrain.dev/v1alpha1
kind: TrainingJob
metadata:
  name: misfit
spec:
  replicas: 2
  train:
    dataset: $DATA
    model:
      layers: [flatten, {dense: {units: 64}}, relu, {dense: {units: 12}}]
YAML
"$BIN/ringtrain" validate "$WORK/misfit.yaml" >"$WORK/misfit-validate.log" 2>&1 && rc=0 || rc=$?
"$BIN/ringtrain" run "$WORK/misfit.yaml" --workdir "$WORK/misfit-run" >"$WORK/misfit-run.log" 2>&1 &&
  rc2=0 || rc2=$?
for cmd in validate run; do
  [ "$cmd" = validate ] && code=$rc || code=$rc2
  [ "$code" = 1 ] || fail "misfit list, $cmd: exit code $code"
  grep -q "misfit.yaml: spec.train.model.layers\[3\] dense: output 12 units but the dataset has 10 classes" \
    "$WORK/misfit-$cmd.log" || fail "misfit list, $cmd: layer not named"
done
[ ! -e "$WORK/misfit-run" ] || fail "misfit list: run went on to start ranks"

# A model that diverges (learningRate 1e30) fails for good at once, naming the setting, with no
# checkpoint of its NaN weights; one whose test set overflows the model (a loss JSON cannot
# write) reads "test loss nan" in the summary, not 0.
python3 - "$WORK" <<'PY'
import random, sys
d = sys.argv[1]
random.seed(1)
for name, n in (("train", 120), ("test", 30)):
    with open(f"{d}/{name}.csv", "w") as f:
        f.write("f0,f1,f2,f3,label\n")
        for i in range(n):
            c = i % 3
            f.write(",".join(f"{c + random.random():.3f}" for _ in range(4)) + f",{c}\n")
with open(f"{d}/overflow.csv", "w") as f:
    f.write("f0,f1,f2,f3,label\n3e38,-3e38,3e38,-3e38,1\n1,1,1,1,1\n")
PY
csv_job() {  # NAME TEST_CSV LEARNING_RATE
  cat >"$WORK/$1.yaml" <<YAML
apiVersion: ringtrain.dev/v1alpha1
kind: TrainingJob
metadata: {name: $1}
spec:
  replicas: 2
  train:
    model: {layers: [{dense: {units: 8}}, relu, {dense: {units: 3}}, softmax]}
    dataset: {format: csv, train: $WORK/train.csv, test: $2, label: label, standardize: false}
    epochs: 3
    batchSizePerReplica: 8
    learningRate: $3
  checkpoint: {everySteps: 5}
YAML
  "$BIN/ringtrain" run "$WORK/$1.yaml" --workdir "$WORK/$1-run" >"$WORK/$1.log" 2>&1
}
csv_job diverged "$WORK/test.csv" 1e30 && rc=0 || rc=$?
[ "$rc" = 1 ] || fail "diverged model: exit code $rc"
grep -q "PermanentFailure: .*FAILED_PRECONDITION: the training loss is NaN in steps 1\.\..*spec.train.learningRate" \
  "$WORK/diverged.log" || fail "diverged model: $(tail -3 "$WORK/diverged.log")"
grep -q "restarts 0" "$WORK/diverged.log" || fail "diverged model: restarted"
[ -z "$(find "$WORK/diverged-run" -name 'ckpt-*')" ] || fail "diverged model: a checkpoint written"
csv_job overflow "$WORK/overflow.csv" 0.01 || fail "overflowing test set: $(tail -3 "$WORK/overflow.log")"
grep -q "^  test accuracy [0-9.]*, test loss nan, " "$WORK/overflow.log" ||
  fail "overflowing test set: $(tail -2 "$WORK/overflow.log")"
# The same job again in its work directory with another model: refused on its checkpoint, and
# no command offered to resume from that checkpoint (it would fail the same way).
sed -i 's/units: 8/units: 16/' "$WORK/overflow.yaml"
"$BIN/ringtrain" run "$WORK/overflow.yaml" --workdir "$WORK/overflow-run" \
  --summary-json "$WORK/other.json" >"$WORK/other.log" 2>&1 && fail "another model resumed"
grep -q "written for another model" "$WORK/other.log" || fail "another model: $(tail -3 "$WORK/other.log")"
grep -q "of another model (the failure above), so this job cannot resume from it" "$WORK/other.log" ||
  fail "another model: $(tail -2 "$WORK/other.log")"
grep -q "to resume from it" "$WORK/other.log" && fail "another model: a resume command offered"
grep -q resume_command "$WORK/other.json" && fail "another model: a resume_command in the summary"

RINGTRAIN_METRICS_PORT=-1 "$BIN/ringtrain-runner" --epoch 3 >"$WORK/flag.log" 2>&1 && rc=0 || rc=$?
[ "$rc" = 1 ] || fail "unknown flag: exit code $rc"
grep -q -- "unknown flag --epoch" "$WORK/flag.log" || fail "unknown flag not named"

# An unknown kernel backend is refused before any work, naming the variable and the choices.
RINGTRAIN_JOB=e2e RINGTRAIN_METRICS_PORT=-1 RINGTRAIN_TERMINATION_LOG=$WORK/gemm.term \
  RINGTRAIN_GEMM=mkl "$BIN/ringtrain-runner" --dataset "$DATA" >"$WORK/gemm.log" 2>&1 && rc=0 || rc=$?
[ "$rc" -ge 1 ] && [ "$rc" -le 127 ] || fail "unknown RINGTRAIN_GEMM: exit code $rc"
grep -q "RINGTRAIN_GEMM: unknown backend 'mkl' (onednn, openblas)" "$WORK/gemm.term" ||
  fail "unknown RINGTRAIN_GEMM: variable or choices not named"
# The alternative backend trains (a few steps) to the same contract.
RINGTRAIN_JOB=e2e RINGTRAIN_METRICS_PORT=-1 RINGTRAIN_GEMM=openblas \
  "$BIN/ringtrain-runner" --dataset "$DATA" --max-steps 20 >"$WORK/openblas.log" 2>&1 ||
  fail "RINGTRAIN_GEMM=openblas: $(tail -3 "$WORK/openblas.log")"
echo PASS
