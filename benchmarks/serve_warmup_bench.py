"""Benchmark: the first request after start and p99 latency, warm-up of every batch bucket vs none.

A real server (``python -m trainer serve``) serves the trainer's default MLP (as
``benchmarks.serve_bench`` saves it) twice per repeat: with ``SERVE_WARMUP=on`` (the default: the
model runs once per batch-size bucket, 1, 2, 4, ... 64, before ``/ping`` turns healthy) and with
``SERVE_WARMUP=off`` (the baseline a server without warm-up gives: the first call traces the
predict function, and each new batch size meets the runtime cold). As soon as ``/ping`` answers
200, one client sends one one-row request (the first request after start), then 300 requests
one after another with batch sizes drawn from 1..64 (the same seeded sequence for both), and
the latencies are kept. Which server goes first alternates between repeats; medians are reported.

On CPU the client shares the cores with the server; on a GPU (``EXPECTED_GPU_COUNT`` from what
TensorFlow sees) the cold costs (kernel selection and autotuning per shape) are larger.

    .venv/bin/python -m benchmarks.serve_warmup_bench [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from benchmarks.serve_bench import FEATURES, Server, save_model, visible_gpus

REQUESTS = 300
MAX_ROWS = 64


@dataclass(frozen=True)
class Cold:
    """One server's start: seconds to healthy, the first request, the sequence after it (ms)."""

    ready_seconds: float
    first_ms: float
    latencies_ms: tuple[float, ...]

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def _post(url: str, rows: list[list[float]]) -> float:
    body = json.dumps({"instances": rows}).encode()
    request = urllib.request.Request(url + "/invocations", data=body, method="POST", headers={"Content-Type": "application/json"})
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=60) as reply:  # nosec B310 - loopback
        reply.read()
        if reply.status != 200:
            raise RuntimeError(f"invocation answered {reply.status}")
    return (time.perf_counter() - started) * 1000.0


def one_start(model_dir: Path, work: Path, gpus: int, warmup: bool, sizes: list[int]) -> Cold:
    import numpy as np

    rows = np.random.default_rng(1).standard_normal((MAX_ROWS, FEATURES)).round(4).tolist()
    started = time.perf_counter()
    server = Server(model_dir, work, gpus, SERVE_WARMUP="on" if warmup else "off", SERVE_MAX_BATCH_SIZE=MAX_ROWS)
    try:
        server.wait_ready()
        ready = time.perf_counter() - started
        first = _post(server.url, rows[:1])
        latencies = tuple(_post(server.url, rows[:size]) for size in sizes)
    finally:
        server.stop()
    return Cold(ready, first, latencies)


def run(repeats: int = 3) -> list[dict]:
    import numpy as np

    gpus = visible_gpus()
    device = f"{gpus} GPU(s)" if gpus else "CPU (client on the same cores)"
    sizes = np.random.default_rng(0).integers(1, MAX_ROWS + 1, REQUESTS).tolist()
    results: dict[bool, list[Cold]] = {True: [], False: []}
    with tempfile.TemporaryDirectory(prefix="serve-warmup-bench-") as tmp:
        work = Path(tmp)
        save_model(work / "model")
        for repeat in range(repeats):
            for warmup in (True, False) if repeat % 2 == 0 else (False, True):
                results[warmup].append(one_start(work / "model", work, gpus, warmup, sizes))

    def median(warmup: bool, value: str) -> float:
        picks = {
            "ready": lambda c: c.ready_seconds,
            "first": lambda c: c.first_ms,
            "p50": lambda c: c.percentile(50),
            "p99": lambda c: c.percentile(99),
            "max": lambda c: max(c.latencies_ms),
        }
        return statistics.median(picks[value](c) for c in results[warmup])

    rows = []
    for warmup, name in ((False, "no warm-up (baseline)"), (True, "warm-up of every bucket (1..64)")):
        first, p99 = median(warmup, "first"), median(warmup, "p99")
        rows.append(
            {
                "benchmark": "serve-warmup",
                "metric": f"{name}: first request after /ping 200, then {REQUESTS} requests of 1..{MAX_ROWS} rows, {device}",
                "value": (
                    f"first {first:.1f} ms; p50 {median(warmup, 'p50'):.2f} ms, p99 {p99:.2f} ms, max {median(warmup, 'max'):.1f} ms; "
                    f"start to healthy {median(warmup, 'ready'):.1f} s"
                ),
                "ratio": (
                    f"first {first / median(False, 'first'):.2f}x, p99 {p99 / median(False, 'p99'):.2f}x, "
                    f"start {median(True, 'ready') / median(False, 'ready'):.2f}x"
                    if warmup
                    else "1.00"
                ),
                "target": "first request no slower than the steady p99" if warmup else "",
            }
        )
    warm_first, warm_p99 = median(True, "first"), median(True, "p99")
    rows[-1]["target"] += f": {'met' if warm_first <= warm_p99 else 'NOT met'} ({warm_first:.1f} vs {warm_p99:.1f} ms)"
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    for row in run(args.repeats):
        print(f"{row['metric']}: {row['value']}  [{row['ratio']}] {row['target']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
