#!/usr/bin/env python3
"""ringtrain's CPU model step against PyTorch's, same run, interleaved A/B pairs.

The same models (runner/model/model.cc: mlp 784-256-10; cnn 2x conv3x3-relu-pool, dense 128),
optimizer (Adam, lr 1e-3, betas 0.9/0.999, eps 1e-8), batch and thread count (1: torch's
intra-op threads and OpenBLAS's), on MNIST-shaped random data. A "step" is forward, backward and
the optimizer update: ringtrain's from bench/model_bench (ForwardBackward + Adam step), torch's
zero_grad/forward/cross_entropy/backward/step. Each pair runs back to back, `--repeats` times;
the ratio is ringtrain's samples/s over torch's, per pair, and the median is reported.

    python3 bench/cpu_compare.py [--build build] [--batch 64] [--seconds 3] [--repeats 3]

Needs python3-torch (Debian: apt-get install python3-torch; /usr/bin/python3). Without it the
script says so and exits 0. Numbers only: nothing here is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time


def ringtrain_step(build: str, batch: int, seconds: float) -> dict[str, float]:
    """samples/s of a full step per model, from one model_bench run (which runs both models)."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    out = subprocess.run([os.path.join(build, "bin", "model_bench"), str(batch), str(seconds)],
                         check=True, capture_output=True, text=True, env=env).stdout
    rates = {}
    for line in out.splitlines():
        m = re.match(r"(\w+)\s+batch (\d+).*\(([\d.]+) ms/batch\), adam step ([\d.]+) ms", line)
        if m:
            rates[m.group(1)] = batch / ((float(m.group(3)) + float(m.group(4))) / 1000.0)
    return rates


def torch_step(model_name: str, batch: int, seconds: float) -> float:
    import torch
    from torch import nn

    torch.set_num_threads(1)
    torch.manual_seed(1)
    if model_name == "mlp":
        model = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))
    else:
        model = nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.rand(batch, 1, 28, 28)
    y = torch.randint(0, 10, (batch,))

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        opt.step()

    for _ in range(3):
        step()
    steps = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        steps += 1
    return steps * batch / (time.perf_counter() - start)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    try:
        import torch  # noqa: F401
    except ImportError:
        print("cpu_compare: torch is not importable by", sys.executable,
              "(Debian: apt-get install python3-torch, run with /usr/bin/python3); nothing measured")
        return 0
    import torch

    pairs: dict[str, list[tuple[float, float]]] = {"mlp": [], "cnn": []}
    for rep in range(args.repeats):
        rt = ringtrain_step(args.build, args.batch, args.seconds)
        for model in ("mlp", "cnn"):
            pairs[model].append((rt[model], torch_step(model, args.batch, args.seconds)))
        load = os.getloadavg()[0]
        print(f"# repeat {rep + 1}: load {load:.2f}", flush=True)
    print(f"# batch {args.batch}, 1 thread each, torch {torch.__version__}, "
          f"{os.cpu_count()} cores")
    print(f"{'model':6} {'ringtrain':>12} {'torch':>12} {'ratio':>7}  (samples/s, median of "
          f"{args.repeats} interleaved pairs; ratio = median of per-pair ratios)")
    result = {}
    for model, ps in pairs.items():
        ratio = statistics.median(a / b for a, b in ps)
        rt = statistics.median(a for a, _ in ps)
        th = statistics.median(b for _, b in ps)
        print(f"{model:6} {rt:12.0f} {th:12.0f} {ratio:6.2f}x")
        result[model] = {"ringtrain": rt, "torch": th, "ratio": ratio,
                         "pairs": [list(p) for p in ps]}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
