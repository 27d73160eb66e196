#!/usr/bin/env python3
"""ringtrain's GPU training throughput next to PyTorch eager, same model, batch and data.

For each model (mlp, cnn) and batch size (64, 256, 1024) it runs, in one go,
  gpu_train_bench --model M --batch-size B --steps S --warmup W --data DIR --json F
and bench/torch_reference.py with the same settings, then prints a side-by-side table
(samples/s of each, their ratio, ringtrain's NVML utilization and busy ratio) and the issue's
targets, and writes everything to --out.

    python3 bench/gpu_compare.py --bench build/bin/gpu_train_bench --out compare.json

Targets (issue 22): MLP at batch 64 ringtrain/PyTorch ≥ 2; CNN ringtrain/PyTorch ≥ 1.2 (every
batch); at batch 1024 the GPU busy ≥ 0.9 while ringtrain trains, by its own measure (kernel time /
step time, CUDA events) and by NVML's utilization.

Where a target is not met (--profile unmet, the default) the configuration is profiled, at most
--profile-max of them: ringtrain's step split into kernel time and the rest (its CUDA events),
its kernels under Nsight Compute when `ncu` is there, and PyTorch's kernels under torch.profiler,
so the table says what blocks each side.

A missing bench binary, a non-zero exit or unreadable JSON is recorded as that row's error and
the run goes on. Without a GPU (no nvidia-smi device and torch sees no CUDA device) every row
reads "no GPU" and the exit code is 0; with a GPU, any error makes it 1 (targets never do, unless
--require-targets).
"""

from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_REFERENCE = os.path.join(HERE, "torch_reference.py")
DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
UTIL_TARGET = 0.9
MLP_RATIO_TARGET = 2.0
CNN_RATIO_TARGET = 1.2
BUSY_BATCH = 1024  # the batch at which the GPU must be busy
NCU_GLOBS = ("/usr/local/cuda/bin/ncu", "/usr/local/cuda-*/bin/ncu",
             "/opt/nvidia/nsight-compute/*/ncu", "/usr/local/cuda*/nsight-compute*/ncu")
NO_GPU_MARKERS = ("no cuda", "no gpu", "no device", "cudaerrornodevice", "no cuda-capable",
                  "cuda driver version is insufficient", "cudaerrorinsufficientdriver")


def split_list(values: list[str] | None, default: list[str]) -> list[str]:
    out: list[str] = []
    for value in values or []:
        out.extend(p.strip() for p in value.split(",") if p.strip())
    return out or default


def gpu_visible() -> tuple[bool, str]:
    """(True, listing) when nvidia-smi lists at least one GPU."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return False, "nvidia-smi not found"
    try:
        r = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        return False, f"nvidia-smi -L: {e}"
    text = (r.stdout + r.stderr).strip()
    return r.returncode == 0 and "GPU " in r.stdout, text


def tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def looks_like_no_gpu(text: str) -> bool:
    low = text.lower()
    return any(m in low for m in NO_GPU_MARKERS)


def as_fraction(value):
    """NVML utilization as a fraction: percentages (> 1) are divided by 100; a negative value
    (the bench's "NVML not available") is None."""
    if value is None:
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    if v < 0:
        return None
    return v / 100.0 if v > 1.0 else v


def pick_result(doc, model: str, batch: int):
    """The bench JSON may be one object, a list of them, or {"results": [...]}: the entry for
    (model, batch), or the only one."""
    if isinstance(doc, dict) and isinstance(doc.get("results"), list):
        entries = doc["results"]
    elif isinstance(doc, list):
        entries = doc
    elif isinstance(doc, dict):
        return doc
    else:
        return None
    for e in entries:
        if isinstance(e, dict) and e.get("model") == model and int(e.get("batch_size", -1)) == batch:
            return e
    return entries[0] if len(entries) == 1 and isinstance(entries[0], dict) else None


def run_logged(cmd: list[str], timeout: float, env: dict | None = None,
               echo: bool = True) -> tuple[int | None, str, float]:
    """(exit code or None on timeout/launch failure, combined output, seconds); echo: print the
    output's tail."""
    print("$ " + " ".join(cmd), flush=True)
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=timeout, env=env)
        out, rc = r.stdout, r.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        out += f"\n(timed out after {timeout:.0f} s)"
        rc = None
    except OSError as e:
        out, rc = f"cannot run: {e}", None
    seconds = time.monotonic() - t0
    if echo and out.strip():
        print(tail(out, 25), flush=True)
    return rc, out, seconds


def run_ringtrain(args, model: str, batch: int, tmpdir: str) -> dict:
    """Runs the bench with --steps; when the timed window was shorter than --min-seconds (too
    short for NVML's sampling), once more with proportionally more steps."""
    rec = run_ringtrain_once(args, model, batch, tmpdir, args.steps)
    measured = (rec.get("step_ms") or 0) * args.steps / 1e3
    if "error" not in rec and 0 < measured < args.min_seconds:
        steps = min(args.max_steps, int(args.steps * args.min_seconds * 1.2 / measured) + 1)
        if steps > args.steps:
            print(f"ringtrain {model}@{batch}: {measured:.2f} s timed is under --min-seconds "
                  f"{args.min_seconds:g}: again with {steps} steps", flush=True)
            again = run_ringtrain_once(args, model, batch, tmpdir, steps)
            if "error" not in again:
                again["short_run"] = {k: rec.get(k) for k in ("steps", "samples_per_second",
                                                              "step_ms", "nvml_utilization")}
                rec = again
    return rec


def run_ringtrain_once(args, model: str, batch: int, tmpdir: str, steps: int) -> dict:
    rec: dict = {"model": model, "batch_size": batch, "steps": steps}
    if not args.bench or not os.path.isfile(args.bench) or not os.access(args.bench, os.X_OK):
        rec["error"] = f"bench binary not found: {args.bench}"
        print(f"ringtrain {model}@{batch}: {rec['error']}", flush=True)
        return rec
    out_json = os.path.join(tmpdir, f"ringtrain-{model}-{batch}.json")
    if os.path.exists(out_json):
        os.remove(out_json)
    precision = ["--precision", "tf32"] if args.tf32 else []
    cmd = [args.bench, "--model", model, "--batch-size", str(batch), "--steps", str(steps),
           "--warmup", str(args.warmup), "--data", args.data, "--json", out_json, *precision,
           *args.bench_arg]
    env = dict(os.environ)
    if args.bench_lib_path:
        env["LD_LIBRARY_PATH"] = args.bench_lib_path + (
            ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    rc, out, seconds = run_logged(cmd, args.timeout, env)
    rec["command"] = cmd
    rec["exit_code"] = rc
    rec["wall_seconds"] = round(seconds, 3)
    doc = None
    if os.path.exists(out_json):
        try:
            with open(out_json) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            rec["json_error"] = str(e)
    rec["raw"] = doc
    picked = pick_result(doc, model, batch) if doc is not None else None
    if rc != 0 or picked is None:
        if looks_like_no_gpu(out):
            rec["error"] = "no GPU"
        elif rc is None:
            rec["error"] = "timed out" if "timed out" in out else tail(out, 1)
        elif rc != 0:
            rec["error"] = f"exit code {rc}: {tail(out, 1)}"
        else:
            rec["error"] = "no result in the bench JSON"
        rec["output_tail"] = tail(out, 15)
        return rec
    if isinstance(picked, dict) and picked.get("error"):
        rec["error"] = "no GPU" if looks_like_no_gpu(str(picked["error"])) else str(picked["error"])
    rec["samples_per_second"] = picked.get("samples_per_second")
    rec["step_ms"] = picked.get("step_ms")
    rec["nvml_utilization"] = as_fraction(picked.get("nvml_utilization"))
    rec["busy_ratio"] = picked.get("busy_ratio")
    return rec


def run_torch(args, model: str, batches: list[int], tmpdir: str) -> dict:
    """One torch_reference.py process per model, every batch size in it: {batch: record}."""
    out_json = os.path.join(tmpdir, f"torch-{model}.json")
    cmd = [args.python, TORCH_REFERENCE, "--model", model,
           "--batch-size", ",".join(str(b) for b in batches), "--steps", str(args.steps),
           "--warmup", str(args.warmup), "--data", args.data, "--json", out_json,
           *(["--tf32"] if args.tf32 else []), *args.torch_arg]
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    rc, out, seconds = run_logged(cmd, args.timeout * max(1, len(batches)), env)
    doc = None
    try:
        with open(out_json) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        pass
    recs: dict = {}
    meta = {k: v for k, v in (doc or {}).items() if k != "results"}
    for b in batches:
        rec: dict = {"model": model, "batch_size": b}
        entry = None
        for e in (doc or {}).get("results", []):
            if e.get("model") == model and e.get("batch_size") == b:
                entry = e
        if entry is not None and "error" not in entry:
            rec.update(samples_per_second=entry.get("samples_per_second"),
                       step_ms=entry.get("step_ms"), final_loss=entry.get("final_loss"))
        elif doc is not None and doc.get("no_gpu"):
            rec["error"] = "no GPU" if doc.get("error") == "no CUDA device" else doc.get("error")
        elif entry is not None:
            rec["error"] = entry["error"]
        elif doc is not None and doc.get("error"):
            rec["error"] = doc["error"]
        else:
            rec["error"] = ("timed out" if rc is None else f"exit code {rc}") + f": {tail(out, 1)}"
        recs[b] = rec
    return {"exit_code": rc, "wall_seconds": round(seconds, 3), "meta": meta, "by_batch": recs,
            "output_tail": tail(out, 15) if rc != 0 else ""}


def write_out(path: str | None, doc: dict) -> None:
    if not path:
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def find_ncu(explicit: str) -> str | None:
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    found = shutil.which("ncu")
    if found:
        return found
    for pattern in NCU_GLOBS:
        for path in sorted(glob.glob(pattern), reverse=True):
            if os.access(path, os.X_OK):
                return path
    return None


NCU_UNITS_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3,
                "msecond": 1e3, "s": 1e6, "second": 1e6}


def parse_ncu_csv(text: str) -> list[dict]:
    """ncu --csv --metrics gpu__time_duration.sum, in its long form (one row per launch and metric:
    "ID", "Kernel Name", ..., "Metric Name", "Metric Unit", "Metric Value"; the default page) or
    its wide one (--page raw: a column per metric, then a row of units): per kernel name, its
    total time, launches and mean in microseconds, heaviest first. ==PROF== lines and the
    program's own output are skipped."""
    rows = list(csv.reader(ln for ln in text.splitlines() if ln.startswith('"')))
    head = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if head is None:
        return []
    cols = rows[head]
    name_col = cols.index("Kernel Name")
    id_col = cols.index("ID") if "ID" in cols else None
    samples: list[tuple[str, str, float, float]] = []  # (launch id, kernel, value, scale)
    if "Metric Name" in cols and "Metric Value" in cols:
        m_col, v_col = cols.index("Metric Name"), cols.index("Metric Value")
        u_col = cols.index("Metric Unit") if "Metric Unit" in cols else None
        for i, r in enumerate(rows[head + 1:]):
            if len(r) != len(cols) or not r[m_col].startswith("gpu__time_duration"):
                continue
            unit = r[u_col].strip().lower() if u_col is not None else "ns"
            try:
                value = float(r[v_col].replace(",", ""))
            except ValueError:
                continue
            samples.append((r[id_col] if id_col is not None else str(i), r[name_col], value,
                            NCU_UNITS_US.get(unit, 1e-3)))
    else:
        t_col = next((i for i, c in enumerate(cols) if c.startswith("gpu__time_duration")), None)
        if t_col is None:
            return []
        scale = 1e-3
        for i, r in enumerate(rows[head + 1:]):
            if len(r) != len(cols):
                continue
            if id_col is not None and not r[id_col]:  # the units row
                scale = NCU_UNITS_US.get(r[t_col].strip().lower(), scale)
                continue
            try:
                value = float(r[t_col].replace(",", ""))
            except ValueError:
                continue
            samples.append((r[id_col] if id_col is not None else str(i), r[name_col], value, scale))
    per: dict[str, list[float]] = {}
    seen = set()
    for launch, name, value, scale in samples:
        if (launch, name) in seen:
            continue
        seen.add((launch, name))
        rec = per.setdefault(name, [0.0, 0])
        rec[0] += value * scale
        rec[1] += 1
    total = sum(v[0] for v in per.values())
    return [{"name": n, "total_us": us, "launches": k, "mean_us": us / k,
             "share": us / total if total else None}
            for n, (us, k) in sorted(per.items(), key=lambda kv: -kv[1][0])]


def profile_config(args, row: dict, tmpdir: str) -> dict:
    """What blocks one configuration: ringtrain's CUDA events (kernel time / step time, from the
    measurement already made), its kernels under ncu when there is one, PyTorch's under
    torch.profiler."""
    model, batch = row["model"], row["batch_size"]
    rt, th = row["ringtrain"], row["torch"]
    prof: dict = {"model": model, "batch_size": batch,
                  "unmet": [t["target"] for t in row.get("targets", []) if t["met"] is False]}
    if rt.get("step_ms") is not None and rt.get("busy_ratio") is not None:
        step = rt["step_ms"]
        prof["ringtrain_events"] = {"step_ms": step, "kernel_ms": step * rt["busy_ratio"],
                                    "other_ms": step * (1 - rt["busy_ratio"])}
    prof["torch_step_ms"] = th.get("step_ms")
    print(f"gpu_compare: profiling {model}@{batch}", flush=True)

    ncu = find_ncu(args.ncu)
    if ncu is None:
        prof["ncu"] = {"error": "ncu not found: ringtrain's CUDA events are its profile"}
    elif rt.get("command"):
        # A short run, a window of launches after the warm-up (and the graph's capture).
        steps, warmup = 60, 20
        # Clocks and caches as in a normal run, so the times compare with the CUDA events'.
        cmd = [ncu, "--csv", "--print-units", "base", "--clock-control", "none",
               "--cache-control", "none", "--metrics", "gpu__time_duration.sum",
               "--launch-skip", "300", "--launch-count", "300", args.bench, "--model", model,
               "--batch-size", str(batch), "--steps", str(steps), "--warmup", str(warmup),
               "--data", args.data, *(["--precision", "tf32"] if args.tf32 else []),
               *args.bench_arg]
        env = dict(os.environ, LC_ALL="C")  # ncu's numbers without a locale's separators
        if args.bench_lib_path:
            env["LD_LIBRARY_PATH"] = args.bench_lib_path + (
                ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
        rc, out, seconds = run_logged(cmd, args.profile_timeout, env, echo=False)
        kernels = parse_ncu_csv(out)
        prof["ncu"] = {"command": cmd, "exit_code": rc, "wall_seconds": round(seconds, 1),
                       "kernels": kernels[:15], "kernel_kinds": len(kernels)}
        if not kernels:
            prof["ncu"]["error"] = "no kernel rows in ncu's output"
            prof["ncu"]["output_tail"] = tail(out, 15)

    cmd = [args.python, TORCH_REFERENCE, "--model", model, "--batch-size", str(batch),
           "--steps", "50", "--warmup", "20", "--profile-steps", "20", "--data", args.data,
           "--json", os.path.join(tmpdir, f"torch-profile-{model}-{batch}.json"),
           *(["--tf32"] if args.tf32 else []), *args.torch_arg]
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    rc, out, _ = run_logged(cmd, args.profile_timeout, env, echo=False)
    try:
        with open(cmd[cmd.index("--json") + 1]) as f:
            result = next(r for r in json.load(f).get("results", []) if "profile" in r)
        prof["torch_profiler"] = result["profile"]
    except (OSError, ValueError, StopIteration, KeyError):
        prof["torch_profiler"] = {"error": f"exit code {rc}: {tail(out, 1)}"}
    return prof


def print_profile(prof: dict) -> None:
    print(f"\nprofile {prof['model']}@{prof['batch_size']}"
          + (f" (not met: {'; '.join(prof['unmet'])})" if prof["unmet"] else ""))
    ev = prof.get("ringtrain_events")
    if ev:
        print(f"  ringtrain step {ev['step_ms']:.3f} ms: kernels {ev['kernel_ms']:.3f} ms, "
              f"the GPU idle {ev['other_ms']:.3f} ms (CUDA events)")
    ncu = prof.get("ncu", {})
    if ncu.get("kernels"):
        print(f"  ringtrain kernels under ncu ({sum(k['launches'] for k in ncu['kernels'])} "
              f"launches profiled; {ncu['kernel_kinds']} kinds):")
        for k in ncu["kernels"][:10]:
            share = "-" if k["share"] is None else f"{k['share'] * 100:5.1f}%"
            print(f"    {share:>6}  {k['mean_us']:9.2f} us x{k['launches']:<4} {k['name'][:90]}")
    elif ncu:
        print(f"  ringtrain under ncu: {ncu.get('error')}")
        for line in ncu.get("output_tail", "").splitlines()[-5:]:
            print(f"    | {line}")
    tp = prof.get("torch_profiler", {})
    if tp.get("kernels") is not None:
        busy = "-" if tp.get("busy") is None else f"{tp['busy']:.2f}"
        print(f"  PyTorch step {tp['step_ms']:.3f} ms under the profiler: kernels "
              f"{tp['kernel_ms_per_step']:.3f} ms (busy {busy}); heaviest:")
        for k in tp["kernels"][:10]:
            share = "-" if k["share"] is None else f"{k['share'] * 100:5.1f}%"
            print(f"    {share:>6}  {k['us_per_step']:9.2f} us/step x{k['launches_per_step']:<4.1f} "
                  f"{k['name'][:90]}")
    else:
        print(f"  PyTorch under torch.profiler: {tp.get('error')}")


def fmt_num(v, spec: str = ",.0f", missing: str = "-") -> str:
    return missing if v is None else format(v, spec)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bench", default="build/bin/gpu_train_bench", help="gpu_train_bench binary")
    p.add_argument("--models", action="append", help="comma list (default mlp,cnn)")
    p.add_argument("--batch-sizes", action="append", help="comma list (default 64,256,1024)")
    p.add_argument("--steps", type=int, default=1000, help="timed steps per run (default 1000)")
    p.add_argument("--warmup", type=int, default=100, help="untimed steps first (default 100)")
    p.add_argument("--min-seconds", type=float, default=2.0,
                   help="rerun ringtrain with more steps when its timed window was shorter, so "
                        "NVML (sampled every 100 ms) sees enough of it (default 2; 0 = off)")
    p.add_argument("--max-steps", type=int, default=200000, help="cap for that rerun")
    p.add_argument("--tf32", action="store_true",
                   help="TF32 on both sides (bench --precision tf32, torch_reference --tf32)")
    p.add_argument("--data", default=DEFAULT_DATA, help=f"Fashion-MNIST folder ({DEFAULT_DATA})")
    p.add_argument("--out", help="write the whole comparison here (JSON)")
    p.add_argument("--timeout", type=float, default=240, help="seconds per bench run (default 240)")
    p.add_argument("--python", default=sys.executable, help="python for torch_reference.py")
    p.add_argument("--bench-lib-path", default="",
                   help="LD_LIBRARY_PATH prefix for the bench binary only (not for python)")
    p.add_argument("--bench-arg", action="append", default=[],
                   help="extra argument for the bench, e.g. --bench-arg=--cuda-graph --bench-arg=off")
    p.add_argument("--torch-arg", action="append", default=[],
                   help="extra argument for torch_reference.py, e.g. --torch-arg=--optimizer-impl=fused")
    p.add_argument("--require-targets", action="store_true", help="exit 2 when a target is not met")
    p.add_argument("--profile", choices=["unmet", "all", "never"], default="unmet",
                   help="profile the configurations that miss a target (default), all, or none")
    p.add_argument("--profile-max", type=int, default=2,
                   help="profile at most this many configurations (default 2)")
    p.add_argument("--profile-timeout", type=float, default=60,
                   help="seconds for each profiling run (default 60)")
    p.add_argument("--ncu", default="", help="Nsight Compute's ncu (default: PATH, then CUDA's)")
    p.add_argument("--deadline-seconds", type=float, default=0,
                   help="start no profile that could end later than this many seconds after "
                        "the start (default 0: no deadline)")
    args = p.parse_args(argv)
    started = time.monotonic()
    models = split_list(args.models, ["mlp", "cnn"])
    try:
        batches = [int(b) for b in split_list(args.batch_sizes, ["64", "256", "1024"])]
    except ValueError as e:
        p.error(str(e))
    for m in models:
        if m not in ("mlp", "cnn"):
            p.error(f"unknown model {m!r} (known: mlp, cnn)")

    visible, listing = gpu_visible()
    print(f"gpu_compare: GPU {'visible' if visible else 'not visible'}: {listing}", flush=True)
    no_gpu = not visible
    doc: dict = {"tool": "gpu_compare", "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                 "bench": args.bench, "models": models, "batch_sizes": batches,
                 "steps": args.steps, "warmup": args.warmup, "min_seconds": args.min_seconds,
                 "tf32": args.tf32, "data": args.data,
                 "bench_args": args.bench_arg, "torch_args": args.torch_arg,
                 "gpu_listing": listing, "rows": [], "targets": [], "torch": {}}

    rows = []
    with tempfile.TemporaryDirectory(prefix="gpu-compare-") as tmpdir:
        for model in models:
            rt = {b: run_ringtrain(args, model, b, tmpdir) for b in batches}
            th = run_torch(args, model, batches, tmpdir)
            doc["torch"][model] = {k: th[k] for k in ("exit_code", "wall_seconds", "meta",
                                                      "output_tail")}
            for b in batches:
                r, t = rt[b], th["by_batch"][b]
                ratio = None
                if r.get("samples_per_second") and t.get("samples_per_second"):
                    ratio = r["samples_per_second"] / t["samples_per_second"]
                rows.append({"model": model, "batch_size": b, "ringtrain": r, "torch": t,
                             "ratio": ratio, "nvml_utilization": r.get("nvml_utilization"),
                             "busy_ratio": r.get("busy_ratio")})
            # Each model's rows are kept as soon as they are measured: a run stopped later
            # (a timeout) still leaves them.
            doc["rows"] = rows
            write_out(args.out, doc)
    # Torch decides "no GPU" too: nvidia-smi may be missing where a device still works.
    torch_no_gpu = all(doc["torch"][m]["meta"].get("no_gpu") for m in models)
    no_gpu = no_gpu and torch_no_gpu
    doc["no_gpu"] = no_gpu

    # Targets.
    def target(name, row, value, threshold):
        met = None if value is None else value >= threshold
        t = {"target": name, "model": row["model"], "batch_size": row["batch_size"],
             "value": value, "threshold": threshold, "met": met}
        doc["targets"].append(t)
        row.setdefault("targets", []).append(t)

    for row in rows:
        if row["model"] == "mlp" and row["batch_size"] == 64:
            target(f"MLP@64 ringtrain/PyTorch >= {MLP_RATIO_TARGET:g}", row, row["ratio"],
                   MLP_RATIO_TARGET)
        if row["model"] == "cnn":
            target(f"CNN ringtrain/PyTorch >= {CNN_RATIO_TARGET:g}", row, row["ratio"],
                   CNN_RATIO_TARGET)
        if row["batch_size"] == BUSY_BATCH:
            target(f"busy >= {UTIL_TARGET:g}", row, row["busy_ratio"], UTIL_TARGET)
            target(f"NVML utilization >= {UTIL_TARGET:g}", row, row["nvml_utilization"],
                   UTIL_TARGET)
    doc["rows"] = rows
    doc["profiles"] = []

    errors = [f"{r['model']}@{r['batch_size']} {side}: {r[side]['error']}"
              for r in rows for side in ("ringtrain", "torch") if r[side].get("error")]
    doc["errors"] = errors
    unmet = [t for t in doc["targets"] if t["met"] is False]
    unknown = [t for t in doc["targets"] if t["met"] is None]
    doc["targets_met"] = not unmet and not unknown

    write_out(args.out, doc)  # the measurements are safe before any profiling starts

    # The table.
    meta = next((doc["torch"][m]["meta"] for m in models if doc["torch"][m]["meta"]), {})
    print()
    print(f"ringtrain vs PyTorch eager ({meta.get('torch_version', 'torch ?')}, "
          f"{meta.get('device_name', 'no device')}, tf32={'on' if meta.get('tf32') else 'off'}), "
          f"{args.warmup} warmup + {args.steps} timed steps"
          + (f" (ringtrain: at least {args.min_seconds:g} s timed, for NVML)" if args.min_seconds else ""))
    head = (f"{'model':<5} {'batch':>5} {'ringtrain/s':>12} {'pytorch/s':>12} {'ratio':>6} "
            f"{'util':>5} {'busy':>5}  targets")
    print(head)
    print("-" * len(head))

    def cell(rec, width):
        if rec.get("samples_per_second") is not None:
            return f"{rec['samples_per_second']:>{width},.0f}"
        err = rec.get("error") or "-"
        if err == "no GPU":
            short = "no GPU"
        elif "torch not installed" in err:
            short = "no torch"
        elif "not found" in err:
            short = "missing"
        elif "timed out" in err:
            short = "timeout"
        else:
            short = "error"
        return f"{short:>{width}}"

    for row in rows:
        marks = []
        for t in row.get("targets", []):
            label = t["target"].split(" ")[0] if not t["target"].startswith("NVML") else "util"
            state = "met" if t["met"] else ("not met" if t["met"] is False else "n/a")
            marks.append(f"{label}:{state}")
        ratio = "-" if row["ratio"] is None else f"{row['ratio']:.2f}"
        print(f"{row['model']:<5} {row['batch_size']:>5} {cell(row['ringtrain'], 12)} "
              f"{cell(row['torch'], 12)} {ratio:>6} {fmt_num(row['nvml_utilization'], '.2f'):>5} "
              f"{fmt_num(row['busy_ratio'], '.2f'):>5}  {' '.join(marks)}")
    print()
    for t in doc["targets"]:
        state = "met" if t["met"] else ("NOT MET" if t["met"] is False else "not measured")
        value = "-" if t["value"] is None else f"{t['value']:.2f}"
        print(f"target {t['target']:<32} {t['model']}@{t['batch_size']:<5} {value:>6}  {state}")

    # What blocks the configurations that miss a target: each model's first such configuration
    # before any second one, within --profile-max and the --deadline-seconds left.
    if not no_gpu and args.profile != "never":
        firsts, rest = [], []
        for row in rows:
            if args.profile == "all" or any(t["met"] is False for t in row.get("targets", [])):
                (rest if any(r["model"] == row["model"] for r in firsts) else firsts).append(row)
        wanted = (firsts + rest)[:args.profile_max]
        left_out = [f"{r['model']}@{r['batch_size']}" for r in (firsts + rest)[args.profile_max:]]
        with tempfile.TemporaryDirectory(prefix="gpu-profile-") as tmpdir:
            for row in wanted:
                elapsed = time.monotonic() - started
                if args.deadline_seconds and elapsed + 2 * args.profile_timeout + 5 > args.deadline_seconds:
                    left_out.append(f"{row['model']}@{row['batch_size']} (deadline: "
                                    f"{args.deadline_seconds - elapsed:.0f} s left)")
                    continue
                doc["profiles"].append(profile_config(args, row, tmpdir))
                print_profile(doc["profiles"][-1])
                write_out(args.out, doc)
        if left_out:
            doc["profiles_left_out"] = left_out
            write_out(args.out, doc)
            print("\ngpu_compare: not profiled: " + ", ".join(left_out), flush=True)
    if no_gpu:
        print("\ngpu_compare: no GPU here: nothing measured (rows read 'no GPU')")
        return 0
    if errors:
        print("\ngpu_compare: errors:\n  " + "\n  ".join(errors))
        return 1
    if args.require_targets and not doc["targets_met"]:
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
