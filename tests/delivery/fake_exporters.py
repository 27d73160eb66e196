#!/usr/bin/env python3
"""Stand-in Prometheus exporters for the series a CPU-only test machine cannot produce:

  /gpu         the GPU series a rank of the GPU runner exports (issue 4: NVML and CUDA-event
               metrics, labels job, namespace, rank, gpu), for ranks 0..WORLD-1 of JOB;
  /controller  the controller's series (`ringtrain controller` on :8080/metrics, as
               controller/operator/controller_metrics.cc exports them: reconcile
               histogram, errors, jobs by phase, gang restarts, pods created, watch
               restarts, pods-ready histogram, leader flag).

Counters and histograms grow with wall time and gauges move, so rate(), increase() and
histogram_quantile() over them give finite numbers, as with the real exporters. Only the names,
types and labels matter: they are the contract the dashboard and the alert rules are written
against (README.md (Metrics)). Scrape with honor_labels: true, as the chart's monitors do.

usage: fake_exporters.py PORT NAMESPACE JOB WORLD   (serves on 127.0.0.1 until killed)
"""
import http.server
import math
import sys
import time

PORT, NS, JOB, WORLD = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
START = time.monotonic()
BUCKETS = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5]


def histogram(name, labels, t, rate, mean):
    """Observations at `rate`/s, spread around `mean` seconds (cumulative buckets)."""
    count = int(t * rate)
    lines = [f"# TYPE {name} histogram"]
    for le in BUCKETS:
        share = 1 / (1 + math.exp(-(le - mean) / (mean / 3)))
        lines.append(f'{name}_bucket{{{labels}le="{le}"}} {int(count * share)}')
    lines.append(f'{name}_bucket{{{labels}le="+Inf"}} {count}')
    lines.append(f"{name}_sum{{{labels}}} {count * mean:.6f}")
    lines.append(f"{name}_count{{{labels}}} {count}")
    return lines


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


def controller(t):
    out = []
    out += histogram("ringtrain_controller_reconcile_duration_seconds", "", t, 5, 0.004)
    out += ["# TYPE ringtrain_controller_reconcile_errors_total counter",
            f"ringtrain_controller_reconcile_errors_total {int(t / 20)}"]
    out += ["# TYPE ringtrain_controller_jobs gauge"]
    for phase, n in (("Pending", 0), ("Running", 1), ("Restarting", 0), ("Succeeded", 3),
                     ("Failed", 1), ("Suspended", 0), ("Unknown", 0)):
        out.append(f'ringtrain_controller_jobs{{phase="{phase}"}} {n}')
    out += ["# TYPE ringtrain_controller_gang_restarts_total counter",
            f"ringtrain_controller_gang_restarts_total {int(t / 10)}"]
    out += ["# TYPE ringtrain_controller_pods_created_total counter",
            f"ringtrain_controller_pods_created_total {WORLD * (1 + int(t / 10))}"]
    out += ["# TYPE ringtrain_controller_watch_restarts_total counter",
            f"ringtrain_controller_watch_restarts_total {int(t / 5)}"]
    out += histogram("ringtrain_controller_job_pods_ready_seconds", "", t, 0.5, 0.3)
    out += ["# TYPE ringtrain_controller_is_leader gauge", "ringtrain_controller_is_leader 1"]
    return out


class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        t = time.monotonic() - START
        pages = {"/gpu": gpu, "/controller": controller}
        if self.path not in pages:
            self.send_error(404)
            return
        lines = []
        for line in pages[self.path](t):
            if line.startswith("# TYPE "):
                lines.append(f"# HELP {line.split()[2]} Test stand-in (tests/delivery/fake_exporters.py).")
            lines.append(line)
        body = ("\n".join(lines) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", PORT), Handler).serve_forever()
