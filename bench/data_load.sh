#!/usr/bin/env bash
# What loading a CSV dataset costs: writes two CSVs of about SIZE_MB each to a temporary folder,
# one of Kaggle's Fashion-MNIST layout (a label and 784 pixels, small integers, mostly 0) and one
# of 40 float features and a label, then times `ringtrain validate` on a job of each (it reads and
# checks every cell, as a rank does), printing the seconds, the peak RSS and the peak over the
# file's size.
#   bash bench/data_load.sh [SIZE_MB]     (default 36)
set -euo pipefail
cd "$(dirname "$0")/.."
size_mb=${1:-36}
build=${BUILD_DIR:-build}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
python3 - "$dir" "$size_mb" <<'PY'
import random, sys
d, mb = sys.argv[1], float(sys.argv[2])
random.seed(1)
def write(name, header, row, classes, inputs):
    with open(f"{d}/{name}.csv", "w") as f:
        f.write(header + "\n")
        n = 0
        while f.tell() < mb * 1e6:
            f.write(row(n) + "\n")
            n += 1
    with open(f"{d}/{name}.yaml", "w") as f:
        f.write(f"""apiVersion: ringtrain.dev/v1alpha1
kind: TrainingJob
metadata: {{name: {name}}}
spec:
  replicas: 1
  train:
    model: {{input: [{inputs}], layers: [{{dense: {{units: {classes}}}}}, softmax]}}
    dataset: {{format: csv, train: {d}/{name}.csv, label: label, testFraction: 0.2, classes: {classes}}}
""")
write("pixels", "label," + ",".join(f"pixel{i + 1}" for i in range(784)),
      lambda n: f"{n % 10}," + ",".join(str(random.choice([0, 0, 0, 0, random.randint(0, 255)]))
                                      for _ in range(784)), 10, 784)
write("floats", ",".join(f"f{i}" for i in range(40)) + ",label",
      lambda n: ",".join("%.6f" % random.random() for _ in range(40)) + f",{n % 3}", 3, 40)
PY
for name in pixels floats; do
  python3 - "$build/bin/ringtrain" "$dir/$name.yaml" "$dir/$name.csv" "$name" <<'PY'
import os, resource, subprocess, sys, time
ringtrain, job, csv, name = sys.argv[1:]
t = time.monotonic()
r = subprocess.run([ringtrain, "validate", job], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
secs = time.monotonic() - t
if r.returncode != 0:
    sys.exit(f"{name}: ringtrain validate failed: {r.stderr.decode()[-400:]}")
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
size = os.path.getsize(csv)
print(f"{name}: {size / 1e6:.1f} MB CSV: validate {secs:.2f} s ({size / 1e6 / secs:.0f} MB/s), "
      f"peak RSS {peak / 1e6:.0f} MB = {peak / size:.1f} x the file")
PY
done
