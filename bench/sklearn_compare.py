#!/usr/bin/env python3
"""ringtrain against PyTorch on datasets no one here wrote, same run: test accuracy (or MSE).

The CSV files Debian's python3-sklearn ships (sklearn/datasets/data/: digits, wine,
breast_cancer, and diabetes for regression) are split once here (25 % test, numpy seed 0) into
train/test CSV files, so both sides see the very same samples. For each dataset and each seed the
same model (one ModelSpec JSON: ringtrain reads it with --model-spec, this script builds the same
torch.nn.Sequential from it, with Keras' initialisation: Glorot uniform weights, zero biases), the
same hyper-parameters (Adam, constant learning rate, no warmup, the same global batch and epochs)
and the same standardisation (the training split's per-feature mean and population std, applied
to both splits; targets as they are) are trained by

  - `ringtrain run` on a TrainingJob of 2 replicas on this machine (two runner processes over
    the TCP ring, per-replica batch = global batch / 2, no LR scaling), and
  - PyTorch, one process with the global batch,

and the final test accuracy (classification) or test MSE (regression) is printed per seed, with
the mean over seeds and ringtrain − torch. The examples in manifests/examples/sklearn-*.yaml train
the same models through `ringtrain run` (there the test split is held out by testFraction).

    python3 bench/sklearn_compare.py [--build build] [--seeds 1 2 3] [--datasets digits wine ...]

Needs /usr/bin/python3 with python3-sklearn's data files, numpy and python3-torch (Debian: apt-get
install python3-torch python3-sklearn). Numbers only: nothing here is asserted.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile

import numpy as np

SKLEARN_DATA = "/usr/lib/python3/dist-packages/sklearn/datasets/data"
FASHION_MNIST = "/usr/share/datasets/fashion-mnist"
# ringtrain's IDX normalisation (runner/data/idx.h): (x / 255 - mean) / std.
FASHION_MEAN, FASHION_STD = 0.2860, 0.3530

# One entry per dataset: the model (a ModelSpec, runner/model/model_spec.h), and the
# hyper-parameters both sides use. batch is the global batch (2 replicas × batch / 2).
DATASETS = {
    "digits": {
        "task": "classification",
        "model": {
            "input": [1, 8, 8],
            "layers": [
                {"conv2d": {"filters": 16, "kernel": 3, "padding": "same"}}, "relu",
                {"max_pool2d": {"pool": 2}}, "flatten",
                {"dense": {"units": 64}}, "relu", {"dropout": {"rate": 0.2}},
                {"dense": {"units": 10}}, "softmax",
            ],
        },
        "epochs": 30, "batch": 32, "lr": 0.002,
    },
    "wine": {
        "task": "classification",
        "model": {"input": [13], "layers": [{"dense": {"units": 32}}, "tanh",
                                            {"dense": {"units": 3}}, "softmax"]},
        "epochs": 60, "batch": 16, "lr": 0.005,
    },
    "breast_cancer": {
        "task": "classification",
        "model": {"input": [30], "layers": [{"dense": {"units": 32}}, "relu",
                                            {"dense": {"units": 2}}, "softmax"]},
        "epochs": 40, "batch": 32, "lr": 0.002,
    },
    # Fashion-MNIST's own train/test split (IDX files, not split here), the original write-up's
    # MLP 784-256-10 as a layer list.
    "fashion_mnist": {
        "task": "classification",
        "format": "idx",
        "model": {"input": [1, 28, 28], "layers": ["flatten", {"dense": {"units": 256}}, "relu",
                                                   {"dense": {"units": 10}}, "softmax"]},
        "epochs": 10, "batch": 128, "lr": 0.001,
    },
    "diabetes": {
        "task": "regression",
        "model": {"input": [10], "layers": [{"dense": {"units": 64}}, "relu",
                                            {"dense": {"units": 1}}], "loss": "mse"},
        "epochs": 200, "batch": 32, "lr": 0.02,
    },
}


def load(name: str) -> tuple[np.ndarray, np.ndarray]:
    """Features and labels/targets of one sklearn data file, as sklearn's loaders read them."""
    if name == "digits":
        with gzip.open(os.path.join(SKLEARN_DATA, "digits.csv.gz"), "rt") as f:
            a = np.loadtxt(f, delimiter=",")
        return a[:, :-1], a[:, -1]
    if name in ("wine", "breast_cancer"):
        path = os.path.join(SKLEARN_DATA, "wine_data.csv" if name == "wine" else
                            "breast_cancer.csv")
        a = np.loadtxt(path, delimiter=",", skiprows=1)  # the first line is sklearn's counts
        return a[:, :-1], a[:, -1]
    if name == "diabetes":
        with gzip.open(os.path.join(SKLEARN_DATA, "diabetes_data_raw.csv.gz"), "rt") as f:
            x = np.loadtxt(f)
        with gzip.open(os.path.join(SKLEARN_DATA, "diabetes_target.csv.gz"), "rt") as f:
            y = np.loadtxt(f)
        return x, y
    raise ValueError(name)


def read_idx(path: str) -> np.ndarray:
    """An IDX file (gzip) as a numpy array of its shape."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def split(x: np.ndarray, y: np.ndarray, dirname: str) -> dict[str, str]:
    """25 % test with numpy seed 0; written as headerless CSV, the label last."""
    order = np.random.RandomState(0).permutation(len(x))
    n_test = int(round(0.25 * len(x)))
    paths = {}
    for part, idx in (("test", order[:n_test]), ("train", order[n_test:])):
        path = os.path.join(dirname, part + ".csv")
        np.savetxt(path, np.column_stack([x[idx], y[idx]]), delimiter=",", fmt="%.17g")
        paths[part] = path
    return paths


def run_ringtrain(build: str, name: str, cfg: dict, files: dict[str, str], seed: int,
                  workdir: str) -> float:
    """One TrainingJob through `ringtrain run`: 2 replicas on this machine (TCP ring)."""
    if cfg.get("format") == "idx":
        dataset = {"format": "idx", "train": FASHION_MNIST}
    else:
        dataset = {"format": "csv", "train": files["train"], "test": files["test"],
                   "header": "none", "label": -1, "task": cfg["task"], "standardize": True}
    job = {"apiVersion": "ringtrain.dev/v1alpha1", "kind": "TrainingJob",
           "metadata": {"name": f"cmp-{name.replace('_', '-')}-{seed}"},
           "spec": {"replicas": 2, "gpusPerReplica": 0, "backend": "tcp",
                    "train": {"model": cfg["model"], "dataset": dataset,
                              "epochs": cfg["epochs"], "batchSizePerReplica": cfg["batch"] // 2,
                              "optimizer": "adam", "learningRate": cfg["lr"],
                              "lrScaling": "none", "warmupEpochs": 0,
                              "lrSchedule": "constant", "seed": seed},
                    "runPolicy": {"backoffLimit": 0}}}
    manifest = os.path.join(workdir, f"{name}-{seed}.yaml")
    with open(manifest, "w") as f:
        json.dump(job, f)  # JSON is YAML
    summary = os.path.join(workdir, f"{name}-{seed}-summary.json")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    cmd = [os.path.join(build, "bin", "ringtrain"), "run", manifest,
           "--runner", os.path.join(build, "bin", "ringtrain-runner"),
           "--workdir", os.path.join(workdir, f"{name}-{seed}-work"), "--summary-json", summary]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        sys.exit(f"ringtrain run failed on {name} (seed {seed}):\n{p.stdout[-2000:]}"
                 f"{p.stderr[-3000:]}")
    with open(summary) as f:
        r = json.load(f)
    return r["test_mse"] if cfg["task"] == "regression" else r["test_accuracy"]


def torch_model(spec: dict):
    """The torch.nn.Sequential of a ModelSpec, with Keras' initialisation."""
    from torch import nn

    shape = list(spec["input"]) + [1] * (3 - len(spec["input"]))  # c, h, w
    layers = []
    for entry in spec["layers"]:
        name, o = (entry, {}) if isinstance(entry, str) else next(iter(entry.items()))
        o = o or {}
        c, h, w = shape
        if name == "dense":
            layers.append(nn.Linear(c, o["units"]))
            shape = [o["units"], 1, 1]
        elif name == "conv2d":
            k, s = o["kernel"], o.get("stride", 1)
            if o.get("padding", "valid") == "same":
                assert s == 1 and k % 2 == 1, "this translation knows stride-1 odd 'same' only"
                pad, oh, ow = k // 2, h, w
            else:
                pad, oh, ow = 0, (h - k) // s + 1, (w - k) // s + 1
            layers.append(nn.Conv2d(c, o["filters"], k, stride=s, padding=pad))
            shape = [o["filters"], oh, ow]
        elif name in ("max_pool2d", "avg_pool2d"):
            p = o.get("pool", 2)
            s = o.get("stride", p)
            layers.append((nn.MaxPool2d if name == "max_pool2d" else nn.AvgPool2d)(p, s))
            shape = [c, (h - p) // s + 1, (w - p) // s + 1]
        elif name == "flatten":
            layers.append(nn.Flatten())
            shape = [c * h * w, 1, 1]
        elif name == "dropout":
            layers.append(nn.Dropout(o["rate"]))
        elif name in ("relu", "tanh", "sigmoid", "gelu"):
            layers.append({"relu": nn.ReLU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid,
                           "gelu": nn.GELU}[name]())
        elif name == "softmax":
            pass  # folded into the cross-entropy, as ringtrain does
        else:
            raise ValueError(name)
    model = nn.Sequential(*layers)
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            nn.init.xavier_uniform_(m.weight)
            nn.init.zeros_(m.bias)
    return model


def run_torch(cfg: dict, files: dict[str, str], seed: int) -> float:
    import torch
    from torch import nn

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    if cfg.get("format") == "idx":
        def idx(part: str):
            x = read_idx(os.path.join(FASHION_MNIST, f"{part}-images-idx3-ubyte.gz"))
            y = read_idx(os.path.join(FASHION_MNIST, f"{part}-labels-idx1-ubyte.gz"))
            x = (x.astype(np.float32) / 255 - FASHION_MEAN) / FASHION_STD
            return torch.tensor(x).reshape([-1] + cfg["model"]["input"]), \
                torch.tensor(y.astype(np.int64))
        xtr, ytr = idx("train")
        xte, yte = idx("t10k")
        return train_and_test(cfg, seed, xtr, ytr, xte, yte)
    train = np.loadtxt(files["train"], delimiter=",")
    test = np.loadtxt(files["test"], delimiter=",")
    mean = train[:, :-1].mean(axis=0)
    std = train[:, :-1].std(axis=0)  # population std, as ringtrain's FitStandardization
    scale = np.where(std > 0, 1.0 / np.where(std > 0, std, 1.0), 1.0)
    input_shape = [-1] + list(cfg["model"]["input"])

    def tensors(a: np.ndarray):
        x = torch.tensor(((a[:, :-1] - mean) * scale).astype(np.float32)).reshape(input_shape)
        if cfg["task"] == "regression":
            return x, torch.tensor(a[:, -1:].astype(np.float32))
        return x, torch.tensor(a[:, -1].astype(np.int64))

    xtr, ytr = tensors(train)
    xte, yte = tensors(test)
    return train_and_test(cfg, seed, xtr, ytr, xte, yte)


def train_and_test(cfg: dict, seed: int, xtr, ytr, xte, yte) -> float:
    import torch
    from torch import nn

    model = torch_model(cfg["model"])
    opt = torch.optim.Adam(model.parameters(), lr=cfg["lr"])
    loss_fn = nn.MSELoss() if cfg["task"] == "regression" else nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(seed)
    for _ in range(cfg["epochs"]):
        model.train()
        perm = torch.randperm(len(xtr), generator=gen)
        for i in range(0, len(xtr), cfg["batch"]):
            idx = perm[i:i + cfg["batch"]]
            opt.zero_grad()
            loss_fn(model(xtr[idx]), ytr[idx]).backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        out = model(xte)
        if cfg["task"] == "regression":
            return float(nn.functional.mse_loss(out, yte))
        return float((out.argmax(dim=1) == yte).float().mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS))
    args = ap.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError:
        print("python3-torch is not installed (apt-get install python3-torch): nothing to compare")
        return
    rows = []
    with tempfile.TemporaryDirectory(prefix="sklearn-compare-") as work:
        for name in args.datasets:
            cfg = DATASETS[name]
            d = os.path.join(work, name)
            os.makedirs(d)
            files = {}
            if cfg.get("format") != "idx":
                x, y = load(name)
                files = split(x, y, d)
            rt = [run_ringtrain(args.build, name, cfg, files, s, d) for s in args.seeds]
            th = [run_torch(cfg, files, s) for s in args.seeds]
            metric = "test MSE" if cfg["task"] == "regression" else "test accuracy"
            rows.append((name, metric, rt, th))
            print(f"{name:14s} {metric:13s} ringtrain {' '.join(f'{v:.4f}' for v in rt)}   "
                  f"torch {' '.join(f'{v:.4f}' for v in th)}", flush=True)
    print()
    print(f"{'dataset':14s} {'metric':13s} {'ringtrain (mean)':>17s} {'torch (mean)':>13s} "
          f"{'ringtrain - torch':>18s}")
    for name, metric, rt, th in rows:
        a, b = statistics.mean(rt), statistics.mean(th)
        diff = f"{100 * (a - b):+.2f} points" if metric == "test accuracy" else \
            f"{a - b:+.1f} ({100 * (a - b) / b:+.1f} %)"
        print(f"{name:14s} {metric:13s} {a:17.4f} {b:13.4f} {diff:>18s}")
    print(f"\nseeds {args.seeds}; ringtrain: `ringtrain run`, 2 replicas (TCP ring), torch: 1 process; "
          "same split, model, initialisation scheme, optimizer, global batch and epochs")


if __name__ == "__main__":
    main()
