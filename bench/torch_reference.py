#!/usr/bin/env python3
"""PyTorch eager reference for ringtrain's GPU training throughput.

The same model, optimizer, batch and input pipeline as ringtrain's GPU runner, written the way a
PyTorch user would: Fashion-MNIST normalized exactly like runner/data/idx.cc Gather, resident on
the GPU as float32, reshuffled on the GPU every epoch (torch.randperm on the device), and per
step: gather the batch by index, forward, cross-entropy, backward, optimizer.step().

    python3 bench/torch_reference.py --model mlp --batch-size 64,256,1024 --steps 500 --json out.json

Models (runner/model/model.cc):
  mlp: Linear(784, 256), ReLU, Linear(256, 10)
  cnn: Conv2d(1, 32, 3, padding 1), ReLU, MaxPool2d(2), Conv2d(32, 64, 3, padding 1), ReLU,
       MaxPool2d(2), Flatten, Linear(64*7*7, 128), ReLU, Linear(128, 10)
Optimizers (runner/model/optimizer.{h,cc}): adam (betas 0.9, 0.999, eps 1e-8, no weight decay)
or sgd (momentum 0.9, dampening 0, no Nesterov); lr 0.001 unless --lr.

samples/s = steps × batch / seconds, timed between two torch.cuda.synchronize() calls after
--warmup untimed steps. float32 throughout; TF32 (matmul and cuDNN conv) only with --tf32.

torch is imported lazily: without it (or without a CUDA device) the script prints why, writes a
JSON that says so and exits 0, and the data functions below work with the standard library alone.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import struct
import sys
import time

# runner/data/idx.h: kFashionMean, kFashionStd (float constants).
FASHION_MEAN = 0.2860
FASHION_STD = 0.3530
DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
CLASSES = 10


def f32(x: float) -> float:
    """Rounds a Python float (double) to the nearest float32, as a C++ float would hold it."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def normalization_constants() -> tuple[float, float]:
    """(scale, shift) with pixel' = pixel·scale − shift, computed in float32 like idx.cc Gather:
    kScale = 1.0f / (255.0f * kFashionStd); kShift = kFashionMean / kFashionStd."""
    mean, std = f32(FASHION_MEAN), f32(FASHION_STD)
    scale = f32(1.0 / f32(255.0 * std))
    shift = f32(mean / std)
    return scale, shift


def normalize_pixels(pixels: bytes | bytearray | list[int]) -> list[float]:
    """Reference (slow, pure Python) normalization of uint8 pixels: float32(p·scale) − shift, each
    operation rounded to float32, exactly the arithmetic Gather does."""
    scale, shift = normalization_constants()
    return [f32(f32(float(p) * scale) - shift) for p in pixels]


def _read_idx(path: str, ndims: int) -> tuple[list[int], bytes]:
    """Reads an IDX file of unsigned bytes (optionally gzipped): (dims, payload). Checks the magic,
    that the payload is complete and that nothing follows it, like idx.cc LoadIdx."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 + 4 * ndims:
        raise ValueError(f"{path}: truncated file while reading the header")
    if data[0] != 0 or data[1] != 0 or data[2] != 0x08 or data[3] != ndims:
        raise ValueError(f"{path}: not an IDX file of {ndims}-dimensional unsigned bytes")
    dims = list(struct.unpack(f">{ndims}I", data[4:4 + 4 * ndims]))
    size = 1
    for d in dims:
        size *= d
    payload = data[4 + 4 * ndims:]
    if len(payload) < size:
        raise ValueError(f"{path}: truncated file while reading the payload")
    if len(payload) > size:
        raise ValueError(f"{path}: more data than the header announces")
    return dims, payload


def _pick(base: str) -> str:
    return base + ".gz" if os.path.exists(base + ".gz") else base


def load_fashion_mnist(data_dir: str, train: bool = True) -> dict:
    """Loads Fashion-MNIST like idx.cc LoadFashionMnist (prefers the .gz files). Returns
    {"count", "rows", "cols", "images": bytes (count·rows·cols uint8), "labels": bytes}."""
    prefix = os.path.join(data_dir, "train" if train else "t10k")
    images_path = _pick(prefix + "-images-idx3-ubyte")
    labels_path = _pick(prefix + "-labels-idx1-ubyte")
    (count, rows, cols), images = _read_idx(images_path, 3)
    (nlabels,), labels = _read_idx(labels_path, 1)
    if nlabels != count:
        raise ValueError(f"{labels_path}: {nlabels} labels for {count} images in {images_path}")
    bad = next((i for i, label in enumerate(labels) if label >= CLASSES), None)
    if bad is not None:
        raise ValueError(f"{labels_path}: label {labels[bad]} at index {bad} is not below {CLASSES}")
    return {"count": count, "rows": rows, "cols": cols, "images": images, "labels": labels}


def parse_batch_sizes(values: list[str]) -> list[int]:
    """--batch-size may repeat and each value may be a comma list: ["64,256", "1024"] → [64, 256, 1024]."""
    out: list[int] = []
    for value in values:
        for part in value.split(","):
            part = part.strip()
            if not part:
                continue
            n = int(part)
            if n < 1:
                raise ValueError(f"batch size must be positive, got {n}")
            out.append(n)
    return out


# ---------------------------------------------------------------------------------------------
# Everything below needs torch.


def build_model(torch, name: str, rows: int, cols: int):
    nn = torch.nn
    if name == "mlp":
        # The input is already flat (n, rows·cols): no Flatten layer in the hot loop.
        return nn.Sequential(nn.Linear(rows * cols, 256), nn.ReLU(), nn.Linear(256, CLASSES))
    if name == "cnn":
        # 3x3 "same" convolutions, 2x2 stride-2 pools (floor mode), like model.cc BuildCnn.
        flat = 64 * (rows // 2 // 2) * (cols // 2 // 2)
        return nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(flat, 128), nn.ReLU(), nn.Linear(128, CLASSES))
    raise ValueError(f"unknown model {name!r} (known: mlp, cnn)")


def build_optimizer(torch, name: str, params, lr: float, impl: str):
    kwargs = {}
    if impl == "fused":
        kwargs["fused"] = True
    elif impl == "foreach":
        kwargs["foreach"] = True
    elif impl == "single":
        kwargs["foreach"] = False
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                                **kwargs)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, dampening=0.0, nesterov=False,
                               weight_decay=0.0, **kwargs)
    raise ValueError(f"unknown optimizer {name!r} (known: adam, sgd)")


def set_tf32(torch, enabled: bool) -> None:
    mode = "tf32" if enabled else "ieee"
    matmul = getattr(torch.backends.cuda.matmul, "fp32_precision", None)
    conv = getattr(getattr(torch.backends.cudnn, "conv", None), "fp32_precision", None)
    if matmul is not None and conv is not None:  # PyTorch ≥ 2.9: the legacy flags are deprecated
        torch.backends.cuda.matmul.fp32_precision = mode
        torch.backends.cudnn.conv.fp32_precision = mode
    else:
        torch.backends.cuda.matmul.allow_tf32 = enabled
        torch.backends.cudnn.allow_tf32 = enabled


def device_tensors(torch, ds: dict, device, model: str):
    """The whole training set on the device: normalized float32 images and int64 labels."""
    scale, shift = normalization_constants()
    n, rows, cols = ds["count"], ds["rows"], ds["cols"]
    raw = torch.frombuffer(bytearray(ds["images"]), dtype=torch.uint8).to(device)
    x = raw.to(torch.float32).mul_(scale).sub_(shift)  # two roundings, like Gather
    x = x.view(n, 1, rows, cols) if model == "cnn" else x.view(n, rows * cols)
    y = torch.frombuffer(bytearray(ds["labels"]), dtype=torch.uint8).to(device).to(torch.int64)
    return x, y


def run_one(torch, args, ds, x_all, y_all, model_name: str, batch: int, device) -> dict:
    F = torch.nn.functional
    torch.manual_seed(args.seed)
    model = build_model(torch, model_name, ds["rows"], ds["cols"]).to(device)
    opt = build_optimizer(torch, args.optimizer, model.parameters(), args.lr, args.optimizer_impl)
    n = x_all.shape[0]
    steps_per_epoch = n // batch  # drop the last partial batch: every step has the same shape
    if steps_per_epoch < 1:
        raise ValueError(f"batch size {batch} is larger than the dataset ({n})")
    gen = torch.Generator(device=device)
    gen.manual_seed(args.seed)
    state = {"perm": None, "pos": steps_per_epoch, "epochs": 0}

    def step():
        if state["pos"] == steps_per_epoch:  # a new epoch: reshuffle on the device
            state["perm"] = torch.randperm(n, device=device, generator=gen)
            state["pos"] = 0
            state["epochs"] += 1
        idx = state["perm"][state["pos"] * batch:(state["pos"] + 1) * batch]
        state["pos"] += 1
        xb = x_all.index_select(0, idx)
        yb = y_all.index_select(0, idx)
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    loss = None
    for _ in range(args.warmup):
        loss = step()
    sync()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        loss = step()
    sync()
    seconds = time.perf_counter() - t0
    final_loss = float(loss.item()) if loss is not None else None
    profile = None
    if args.profile_steps > 0 and device.type == "cuda":
        try:
            profile = kernel_profile(torch, step, sync, args.profile_steps)
        except Exception as e:  # noqa: BLE001 (a profile is extra: never lose the measurement)
            profile = {"error": f"{type(e).__name__}: {e}"}
    result = {
        "model": model_name,
        "batch_size": batch,
        "steps": args.steps,
        "warmup": args.warmup,
        "seconds": seconds,
        "samples_per_second": args.steps * batch / seconds if seconds > 0 else None,
        "step_ms": seconds / args.steps * 1e3 if args.steps > 0 else None,
        "final_loss": final_loss,
        "epochs_started": state["epochs"],
    }
    if profile is not None:
        result["profile"] = profile
    del model, opt
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return result


def kernel_profile(torch, step, sync, steps: int) -> dict:
    """`steps` more steps under torch.profiler: each CUDA kernel's time per step, heaviest first,
    and the step's wall time, so kernel time against wall time shows what the GPU waits for."""
    from torch.profiler import ProfilerActivity, profile  # noqa: PLC0415

    sync()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        wall = time.perf_counter() - t0
    per_kernel: dict[str, list[float]] = {}
    copy_us = 0.0
    for e in prof.events():
        # Device-side events: kernels, copies and memsets, and (newer torch) the GPU side of
        # user annotations such as "Optimizer.step#Adam.step", which span kernels counted anyway.
        if "CUDA" not in str(getattr(e, "device_type", "")) or getattr(e, "is_user_annotation", False):
            continue
        us = float(e.time_range.elapsed_us())
        if e.name.startswith(("Memcpy", "Memset")):
            copy_us += us
            continue
        rec = per_kernel.setdefault(e.name, [0.0, 0])
        rec[0] += us
        rec[1] += 1
    total_us = sum(v[0] for v in per_kernel.values())
    kernels = [{"name": name, "us_per_step": us / steps, "launches_per_step": n / steps,
                "share": us / total_us if total_us else None}
               for name, (us, n) in sorted(per_kernel.items(), key=lambda kv: -kv[1][0])]
    return {"steps": steps, "step_ms": wall / steps * 1e3,
            "kernel_ms_per_step": total_us / steps / 1e3,
            "copy_ms_per_step": copy_us / steps / 1e3,
            "busy": min(1.0, (total_us / 1e6) / wall) if wall > 0 else None,
            "kernels": kernels[:15], "kernel_kinds": len(kernels)}


def write_json(path: str | None, doc: dict) -> None:
    if not path:
        return
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=["mlp", "cnn"], action="append",
                   help="model (repeatable; default mlp)")
    p.add_argument("--batch-size", action="append", default=None,
                   help="batch size, repeatable or a comma list (default 64)")
    p.add_argument("--steps", type=int, default=500, help="timed steps (default 500)")
    p.add_argument("--warmup", type=int, default=50, help="untimed steps first (default 50)")
    p.add_argument("--data", default=DEFAULT_DATA, help=f"Fashion-MNIST folder ({DEFAULT_DATA})")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    p.add_argument("--optimizer-impl", choices=["default", "foreach", "single", "fused"],
                   default="default", help="torch.optim implementation (default: torch's choice)")
    p.add_argument("--lr", type=float, default=0.001)
    p.add_argument("--tf32", action="store_true", help="allow TF32 in matmuls and convolutions")
    p.add_argument("--no-cudnn-benchmark", dest="cudnn_benchmark", action="store_false",
                   help="leave torch.backends.cudnn.benchmark off (default: on)")
    p.add_argument("--device", default="cuda", help="cuda (default), cuda:N, or cpu to debug")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--profile-steps", type=int, default=0,
                   help="after the timed steps, this many more under torch.profiler: CUDA "
                        "kernel time per step (default 0: none)")
    args = p.parse_args(argv)
    models = args.model or ["mlp"]
    try:
        batches = parse_batch_sizes(args.batch_size or ["64"])
    except ValueError as e:
        p.error(str(e))
    if args.steps < 1 or args.warmup < 0:
        p.error("--steps must be at least 1 and --warmup at least 0")

    doc: dict = {"tool": "torch_reference", "models": models, "batch_sizes": batches,
                 "steps": args.steps, "warmup": args.warmup, "tf32": args.tf32,
                 "optimizer": args.optimizer, "optimizer_impl": args.optimizer_impl,
                 "lr": args.lr, "data": args.data, "results": []}
    try:
        import torch  # noqa: PLC0415 (lazy: the data functions work without it)
    except ImportError as e:
        print(f"torch_reference: PyTorch is not installed ({e}); nothing measured")
        doc.update(error="torch not installed", no_gpu=True)
        write_json(args.json, doc)
        return 0
    doc["torch_version"] = torch.__version__
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("torch_reference: no CUDA device (torch.cuda.is_available() is False); nothing measured")
        doc.update(error="no CUDA device", no_gpu=True)
        write_json(args.json, doc)
        return 0
    device = torch.device(args.device)
    if device.type == "cuda":
        if device.index is not None:
            torch.cuda.set_device(device)
        set_tf32(torch, args.tf32)
        torch.backends.cudnn.benchmark = args.cudnn_benchmark
        doc["device_name"] = torch.cuda.get_device_name(device)
        doc["cuda_version"] = torch.version.cuda
        doc["cudnn_version"] = torch.backends.cudnn.version()
        doc["cudnn_benchmark"] = args.cudnn_benchmark
    else:
        doc["device_name"] = "cpu"

    try:
        ds = load_fashion_mnist(args.data, train=True)
    except (OSError, ValueError) as e:
        print(f"torch_reference: cannot load Fashion-MNIST from {args.data}: {e}", file=sys.stderr)
        doc["error"] = f"data: {e}"
        write_json(args.json, doc)
        return 1
    print(f"torch_reference: torch {torch.__version__} on {doc['device_name']}, "
          f"{ds['count']} samples, tf32={'on' if args.tf32 else 'off'}, "
          f"{args.optimizer} ({args.optimizer_impl}), {args.warmup} warmup + {args.steps} timed steps")
    print(f"{'model':<6} {'batch':>6} {'samples/s':>12} {'step ms':>9} {'loss':>8}")
    failed = False
    for model_name in models:
        x_all, y_all = device_tensors(torch, ds, device, model_name)
        for batch in batches:
            try:
                r = run_one(torch, args, ds, x_all, y_all, model_name, batch, device)
            except Exception as e:  # noqa: BLE001 (record it, go on with the next configuration)
                failed = True
                r = {"model": model_name, "batch_size": batch, "error": f"{type(e).__name__}: {e}"}
                print(f"{model_name:<6} {batch:>6} error: {r['error']}", flush=True)
            else:
                print(f"{model_name:<6} {batch:>6} {r['samples_per_second']:>12,.0f} "
                      f"{r['step_ms']:>9.3f} {r['final_loss']:>8.4f}", flush=True)
            doc["results"].append(r)
            write_json(args.json, doc)  # partial results survive a timeout
        del x_all, y_all
    write_json(args.json, doc)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
