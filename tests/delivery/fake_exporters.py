#!/usr/bin/env python3
"""A stand-in Prometheus exporter for the series a CPU-only test machine cannot produce:

  /gpu         the GPU series a rank of the GPU runner exports (issue 4: NVML and CUDA-event
               metrics, labels job, namespace, rank, gpu), for ranks 0..WORLD-1 of JOB.

Gauges move with wall time, so queries over them give finite numbers, as with the real
exporter. Only the names, types and labels matter: they are the contract the dashboard and
the alert rules are written against (README.md (Metrics)). Scrape with honor_labels: true, as the chart's monitors do.

usage: fake_exporters.py PORT NAMESPACE JOB WORLD   (serves on 127.0.0.1 until killed)
"""
import http.server
import math
import sys
import time

PORT, NS, JOB, WORLD = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
START = time.monotonic()


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
        pages = {"/gpu": gpu}
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
