"""Benchmark 5: the serving mode under load, dynamic batching against one request per model call.

Two real servers (``python -m trainer serve``) serve the same model on loopback: the trainer's
default MLP (hidden 128,64) on 64 features and 8 classes, saved as a training job saves it. One
batches dynamically (``SERVE_MAX_BATCH_SIZE=64``, ``SERVE_MAX_BATCH_DELAY_MS=2``); the other runs
every request as its own model call (``SERVE_BATCHING=off``), which is what a server without a
batcher does. A closed-loop aiohttp client keeps ``concurrency`` one-row JSON requests in flight
for a fixed time per level (1, 8, 32), against each server in turn, interleaved and repeated, so
drift in machine load lands on both alike (which server goes first alternates between repeats);
the median repeat is reported. Ratios compare the two
servers in the same run.

Both servers run on the GPUs TensorFlow sees in the runner (``EXPECTED_GPU_COUNT``), else on CPU.
On CPU the client shares the cores with the server, so figures are lower bounds for either.

    .venv/bin/python -m benchmarks.serve_bench [--seconds 2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from benchmarks._trainer import PYTHON, TRAINING_IMAGE, cpu_only_tensorflow, free_ports, trainer_env

CONCURRENCY = (1, 8, 32)
FEATURES = 64
CLASSES = 8
START_TIMEOUT_SECONDS = 180
TARGET_RATIO = 2.0  # requests/s with batching over without, at concurrency 32


@dataclass(frozen=True)
class Level:
    """One load level against one server.

    Attributes:
        requests: Requests answered (all 200) in the measured window.
        seconds: Length of the window.
        latencies_ms: Every request's latency.
        mean_batch: Mean requests per model call over the window (from the server's /stats).
    """

    requests: int
    seconds: float
    latencies_ms: tuple[float, ...]
    mean_batch: float

    @property
    def rps(self) -> float:
        return self.requests / self.seconds

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]

    def describe(self) -> str:
        return (
            f"{self.rps:.0f} req/s, p50 {self.percentile(50):.2f} ms, p99 {self.percentile(99):.2f} ms, "
            f"{self.mean_batch:.1f} req/call"
        )


def median_level(levels: list[Level]) -> Level:
    """The repeat with the median requests/s (the lower one of an even count)."""
    ordered = sorted(levels, key=lambda level: level.rps)
    return ordered[(len(ordered) - 1) // 2]


def save_model(model_dir: Path) -> None:
    """The trainer's default MLP, saved the way a training job saves it."""
    cpu_only_tensorflow()
    from trainer.contract.hyperparameters import TrainingConfig
    from trainer.train.models import build_model

    model = build_model(TrainingConfig(), FEATURES, CLASSES)
    model_dir.mkdir(parents=True, exist_ok=True)
    model.save(model_dir / "model.keras")
    config = {"data": {"num_features": FEATURES, "num_classes": CLASSES}, "hyperparameters": TrainingConfig().to_dict()}
    (model_dir / "trainer_config.json").write_text(json.dumps(config, default=str))


def visible_gpus() -> int:
    """GPUs TensorFlow sees here (the physical list; the runtime is not started on them)."""
    return len(cpu_only_tensorflow().config.list_physical_devices("GPU"))


class Server:
    """A serving process on a free loopback port; stopped with SIGTERM on exit."""

    def __init__(self, model_dir: Path, work: Path, gpus: int, **env: object) -> None:
        (self.port,) = free_ports(1)
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = work / f"serve-{self.port}.log"
        environment = trainer_env(
            work,
            work,
            gpus=gpus,
            SM_MODEL_DIR=model_dir,
            SAGEMAKER_BIND_TO_PORT=self.port,
            SERVE_HOST="127.0.0.1",
            SM_CHANNEL_TRAIN=None,
            **env,
        )
        with self.log.open("wb") as sink:
            self.process = subprocess.Popen(
                [PYTHON, "-m", "trainer", "serve"], cwd=TRAINING_IMAGE, env=environment, stdout=sink, stderr=sink
            )

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}: {self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(self.url + "/ping", timeout=5) as reply:  # nosec B310 - loopback
                    if reply.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"server not ready in {START_TIMEOUT_SECONDS}s: {self.log.read_text()[-2000:]}")

    def stats(self) -> dict:
        with urllib.request.urlopen(self.url + "/stats", timeout=10) as reply:  # nosec B310 - loopback
            return json.loads(reply.read())

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=15)


async def _load(url: str, concurrency: int, seconds: float, warmup: float) -> tuple[int, float, list[float]]:
    import aiohttp
    import numpy as np

    rows = np.random.default_rng(0).standard_normal((256, FEATURES)).round(4).tolist()
    bodies = [json.dumps({"instances": [row]}).encode() for row in rows]
    headers = {"Content-Type": "application/json"}
    latencies: list[float] = []
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as session:
        start = time.perf_counter()
        measure_from = start + warmup
        stop_at = measure_from + seconds

        async def worker(index: int) -> None:
            i = index
            while (now := time.perf_counter()) < stop_at:
                async with session.post(url + "/invocations", data=bodies[i % len(bodies)], headers=headers) as reply:
                    await reply.read()
                    if reply.status != 200:
                        raise RuntimeError(f"invocation answered {reply.status}")
                if now >= measure_from:
                    latencies.append((time.perf_counter() - now) * 1000.0)
                i += concurrency

        await asyncio.gather(*(worker(i) for i in range(concurrency)))
        window = time.perf_counter() - measure_from
    return len(latencies), window, latencies


def measure(server: Server, concurrency: int, seconds: float) -> Level:
    before = server.stats()
    count, window, latencies = asyncio.run(_load(server.url, concurrency, seconds, warmup=min(0.3, seconds / 4)))
    after = server.stats()
    calls = max(after["batches"] - before["batches"], 1)
    return Level(count, window, tuple(latencies), (after["requests"] - before["requests"]) / calls)


def _append(jsonl: Path | None, line: dict) -> None:
    if jsonl is not None:
        with jsonl.open("a") as sink:
            sink.write(json.dumps(line) + "\n")


def run(repeats: int = 3, seconds: float = 2.0, jsonl: Path | None = None) -> list[dict]:
    """The rows; with ``jsonl``, each level's figures are appended there as soon as measured, and the
    servers' log tails go to stderr when the run fails or is cut off (SIGTERM, see main)."""
    gpus = visible_gpus()
    device = f"{gpus} GPU(s)" if gpus else "CPU (client on the same cores)"
    with tempfile.TemporaryDirectory(prefix="serve-bench-") as tmp:
        work = Path(tmp)
        save_model(work / "model")
        servers = {
            "batched": Server(work / "model", work, gpus, SERVE_MAX_BATCH_SIZE=64, SERVE_MAX_BATCH_DELAY_MS=2),
            "one per call": Server(work / "model", work, gpus, SERVE_BATCHING="off"),
        }
        try:
            for server in servers.values():
                server.wait_ready()
            results: dict[tuple[str, int], list[Level]] = {}
            for repeat in range(repeats):
                for concurrency in CONCURRENCY:
                    # Alternate which server goes first, so neither always follows the other's load.
                    order = list(servers.items())[:: 1 if repeat % 2 == 0 else -1]
                    for name, server in order:
                        level = measure(server, concurrency, seconds)
                        results.setdefault((name, concurrency), []).append(level)
                        _append(jsonl, {"benchmark": "serve", "server": name, "concurrency": concurrency, "repeat": repeat,
                                        "device": device, "rps": round(level.rps, 1),
                                        "p50_ms": round(level.percentile(50), 3), "p99_ms": round(level.percentile(99), 3),
                                        "mean_batch": round(level.mean_batch, 2)})  # fmt: skip
        except BaseException:
            for name, server in servers.items():  # the diagnostics, before the temporary folder goes
                tail = server.log.read_text(errors="replace").splitlines()[-30:] if server.log.exists() else []
                print(f"--- {name} server ({server.log.name}), last {len(tail)} lines:", *tail, sep="\n", file=sys.stderr)
            raise
        finally:
            for server in servers.values():
                server.stop()
    rows = []
    for concurrency in CONCURRENCY:
        median = {name: median_level(results[(name, concurrency)]) for name in servers}
        batched, single = median["batched"], median["one per call"]
        for name, level in median.items():
            rows.append(
                {
                    "benchmark": "serve",
                    "metric": f"{name}, concurrency {concurrency}, {device}",
                    "value": level.describe(),
                    "ratio": (
                        f"{batched.rps / single.rps:.2f}x req/s, p99 {batched.percentile(99) / single.percentile(99):.2f}x"
                        if name == "batched"
                        else "1.00"
                    ),
                    "target": f">= {TARGET_RATIO:.1f}x req/s at 32" if name == "batched" and concurrency == 32 else "",
                }
            )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="measured window per level and server")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--jsonl", type=Path, help="also append the rows here, one JSON line each")
    args = parser.parse_args()
    # A time limit's SIGTERM unwinds run(): the servers stop and their logs' tails are printed.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    for row in run(args.repeats, args.seconds, args.jsonl):
        print(f"{row['metric']}: {row['value']}  [{row['ratio']}]")
        _append(args.jsonl, row)
    return 0


if __name__ == "__main__":
    sys.exit(main())
