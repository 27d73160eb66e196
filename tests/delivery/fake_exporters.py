#!/usr/bin/env python3
"""Stand-in Prometheus exporters for what a CPU-only test machine cannot produce:

  /gpu         the GPU series a rank of the GPU runner exports (issue 4: NVML and CUDA-event
               metrics, labels job, namespace, rank, gpu), for ranks 0..WORLD-1 of JOB.
  /runner/P    the /metrics of runner process P of the 2-rank job REPLACED_JOB, which loses
               rank 0 and recovers in place, answering as ringtrain-runner does (the series,
               types and labels of runner/, their values moving as in `ringtrain run` jobs
               whose rank was killed: a process's counters start at 0, a replacement exports
               zeros until the handover, and no loss or test MSE before it has one; a
               regression model, so the live test has a job of each kind beside the real
               runner's classifier). P is "0a" (rank 0, killed at KILL), "0b" (its
               replacement, serving from REPLACE; a new process of the same rank: scrape it as
               another target, as a new pod IP is one) or "1" (the survivor). A dead or not yet started process
               answers 503, so Prometheus marks its series stale.
  /scenario    JSON: the scenario's times (Unix seconds; it starts at the first scrape of a
               runner process) and what a truthful dashboard shows (checkpoints written).

The recovery: at KILL rank 0's process dies; the gang stops training; the survivor's
ringtrain_recovery_seconds_total accrues live (1 s per second, the runner's new behaviour)
until HANDOVER, RECOVERY seconds later, when the replacement receives the state, and with
it the gang's recovery count and steps lost (not the seconds before it joined: the survivor's
series holds those); the in-flight step is lost and the gang trains again from the step before
it. Rank 0
writes a checkpoint every CKPT_EVERY global steps. Training ends at END (the counters then
stay), so the totals are final when the test reads them.

Gauges move with wall time, so queries over them give finite numbers, as with the real
exporter. Only the names, types and labels matter: they are the contract the dashboard and
the alert rules are written against (README.md (Metrics)). Scrape with honor_labels: true, as
the chart's monitors do.

usage: fake_exporters.py PORT NAMESPACE JOB WORLD [REPLACED_JOB]
       (serves on 127.0.0.1 until killed)
"""
import http.server
import json
import math
import sys
import threading
import time

PORT, NS, JOB, WORLD = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
REPLACED_JOB = sys.argv[5] if len(sys.argv) > 5 else "replaced"
START = time.monotonic()
# The in-place recovery scenario of REPLACED_JOB, in seconds after its start: the first scrape
# of a runner process (until then they answer as at 0), so Prometheus sees every counter at 0
# before it moves, as it sees a real runner's during its rendezvous.
SCENARIO_START = None   # (monotonic, unix)
START_LOCK = threading.Lock()
TRAIN = 3.0          # rendezvous done, both ranks train
STEPS_PER_SECOND = 10
BATCH = 64           # samples per step per rank
KILL = 11.9          # rank 0's process dies (no checkpoint due in the 2.9 s before)
REPLACE = KILL + 2   # its replacement starts, exporting zeros
RECOVERY = 17.0      # seconds without training: longer than the live test's 15 s rate window
HANDOVER = KILL + RECOVERY
END = HANDOVER + 20  # training ends; the counters stay
CKPT_EVERY = 30      # global steps
STEPS_LOST = 1


def global_step(t):
    """The gang's global step at t; the step in flight at KILL is lost."""
    if t < TRAIN:
        return 0
    before = int((min(t, KILL) - TRAIN) * STEPS_PER_SECOND)
    if t < HANDOVER:
        return before
    return before - STEPS_LOST + int((min(t, END) - HANDOVER) * STEPS_PER_SECOND)


def steps_at_kill():
    return global_step(KILL)


def checkpoints(lo, hi):
    """Checkpoints rank 0 writes at global steps in (lo, hi]."""
    return max(0, hi // CKPT_EVERY - lo // CKPT_EVERY)


def runner_values(proc, t):
    """A runner process's series at t, or None while it does not serve."""
    alive = {"0a": (0, KILL), "0b": (REPLACE, float("inf")), "1": (0, float("inf"))}[proc]
    if not alive[0] <= t < alive[1]:
        return None
    rank = 0 if proc.startswith("0") else 1
    trained = t >= HANDOVER if proc == "0b" else t >= TRAIN
    g = global_step(t)
    resumed = steps_at_kill() - STEPS_LOST
    if proc == "0b":
        steps = max(0, g - resumed) if trained else 0
    elif proc == "0a":
        steps = g
    else:  # the survivor also took the lost step
        steps = g if t < HANDOVER else g + STEPS_LOST
    recovered = t >= HANDOVER
    if proc == "1":
        rec_seconds = RECOVERY if recovered else max(0.0, t - KILL)  # live accrual
    else:
        rec_seconds = 0.0  # the replacement counts the recovery, not the seconds before it
    ckpts = 0
    if proc == "0a":
        ckpts = checkpoints(0, g)
    elif proc == "0b" and trained:
        ckpts = checkpoints(resumed, g)
    training_now = trained and (t < KILL or t >= HANDOVER) and t < END
    # The process's last completed step, in scenario seconds: none before its first (the
    # replacement's comes after the handover); the survivor's holds through the recovery.
    if not trained:
        last_step = None
    elif proc == "0a" or t < KILL:
        last_step = min(t, KILL)
    elif t < HANDOVER:
        last_step = KILL
    else:
        last_step = min(t, END)
    v = {
        "ringtrain_samples_total": ("counter", steps * BATCH),
        "ringtrain_steps_total": ("counter", steps),
        "ringtrain_data_wait_seconds_total": ("counter", steps * 0.002),
        "ringtrain_allreduce_bytes_total": ("counter", steps * 818520),
        "ringtrain_allreduce_wait_seconds_total": ("counter", steps * 0.0005),
        "ringtrain_checkpoints_total": ("counter", ckpts),
        "ringtrain_recovery_seconds_total": ("counter", rec_seconds),
        "ringtrain_recovery_steps_lost_total": ("counter", STEPS_LOST if recovered and proc != "0a" else 0),
        # No series before the process's first report / evaluation; a regression model has
        # no accuracy.
        "ringtrain_loss": ("gauge", 0.5 / (1 + g / 100) if trained else None),
        "ringtrain_epoch": ("gauge", 1 + g // 100 if trained else 0),
        "ringtrain_step": ("gauge", g if trained else 0),
        "ringtrain_last_step_timestamp_seconds": (
            "gauge", None if last_step is None else SCENARIO_START[1] + last_step),
        "ringtrain_samples_per_second": ("gauge", STEPS_PER_SECOND * BATCH if training_now else 0),
        "ringtrain_test_mse": ("gauge", 0.2 / (1 + g / 100) if trained else None),
        "ringtrain_world_size": ("gauge", 2 if trained else 0),
    }
    labels = f'job="{REPLACED_JOB}",namespace="{NS}",rank="{rank}"'
    out = []
    for name, (kind, value) in v.items():
        if value is None:
            continue
        out.append(f"# TYPE {name} {kind}")
        out.append(f"{name}{{{labels}}} {value:.6f}" if name.endswith("_timestamp_seconds")
                   else f"{name}{{{labels}}} {value:.6g}")
    recoveries = 1 if recovered and proc != "0a" else 0
    out.append("# TYPE ringtrain_recoveries_total counter")
    out.append(f'ringtrain_recoveries_total{{{labels},kind="in_place"}} {recoveries}')
    for name, per_step, n_per_step in (("ringtrain_step_duration_seconds", 0.1, 1),
                                       ("ringtrain_allreduce_duration_seconds", 0.004, 4)):
        n = steps * n_per_step
        out.append(f"# TYPE {name} histogram")
        for le in ("0.001", "0.005", "0.01", "0.1", "0.25", "1", "+Inf"):
            inside = n if float(le) >= per_step else 0
            out.append(f'{name}_bucket{{{labels},le="{le}"}} {inside}')
        out.append(f"{name}_sum{{{labels}}} {n * per_step:.6g}")
        out.append(f"{name}_count{{{labels}}} {n}")
    return out


def scenario_time():
    global SCENARIO_START
    with START_LOCK:
        if SCENARIO_START is None:
            SCENARIO_START = (time.monotonic(), time.time())
    return time.monotonic() - SCENARIO_START[0]


def scenario():
    if SCENARIO_START is None:
        return {"job": REPLACED_JOB, "namespace": NS, "now": time.time(), "done": False}
    final = global_step(END)
    resumed = steps_at_kill() - STEPS_LOST
    unix = SCENARIO_START[1]
    return {
        "job": REPLACED_JOB, "namespace": NS, "now": time.time(),
        "train": unix + TRAIN, "kill": unix + KILL, "replace": unix + REPLACE,
        "handover": unix + HANDOVER, "end": unix + END,
        "done": time.monotonic() - SCENARIO_START[0] >= END,
        "steps_per_second": STEPS_PER_SECOND,
        "checkpoints": checkpoints(0, steps_at_kill()) + checkpoints(resumed, final),
        "checkpoints_of_the_last_rank_0": checkpoints(resumed, final),
    }


def gpu(t):
    out = []
    series = {
        "ringtrain_gpu_utilization_ratio": ("gauge", lambda r: 0.9 - 0.05 * r + 0.02 * math.sin(t)),
        "ringtrain_gpu_busy_ratio": ("gauge", lambda r: 0.85 - 0.05 * r),
        "ringtrain_gpu_memory_used_bytes": ("gauge", lambda r: 21.5e9 + 1e8 * r),
        "ringtrain_gpu_memory_total_bytes": ("gauge", lambda r: 85899345920),
        "ringtrain_gpu_power_watts": ("gauge", lambda r: 550 + 10 * math.sin(t + r)),
        "ringtrain_gpu_sm_clock_hertz": ("gauge", lambda r: 1.98e9),
    }
    for name, (kind, value) in series.items():
        out.append(f"# TYPE {name} {kind}")
        for r in range(WORLD):
            out.append(f'{name}{{job="{JOB}",namespace="{NS}",rank="{r}",gpu="0"}} {value(r):.6g}')
    return out


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        t = time.monotonic() - START
        if self.path == "/scenario":
            self.reply(json.dumps(scenario()).encode(), "application/json")
            return
        if self.path.startswith("/runner/") and self.path[len("/runner/"):] in ("0a", "0b", "1"):
            page = runner_values(self.path[len("/runner/"):], scenario_time())
            if page is None:
                self.send_error(503, "process not running")
                return
        elif self.path == "/gpu":
            page = gpu(t)
        else:
            self.send_error(404)
            return
        lines = []
        for line in page:
            if line.startswith("# TYPE "):
                lines.append(f"# HELP {line.split()[2]} Test stand-in (tests/delivery/fake_exporters.py).")
            lines.append(line)
        self.reply(("\n".join(lines) + "\n").encode(), "text/plain; version=0.0.4; charset=utf-8")

    def reply(self, body, content_type):
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
