"""Benchmark: start-up to the first ``/ping`` 200, the built image in Docker against the process.

The same model (``benchmarks.serve_bench``'s default MLP, saved as a training job saves it) is
served twice per repeat: by ``docker run IMAGE serve`` (the image scripts/build-image.sh built,
the model mounted at /opt/ml/model, port 8080 published on loopback), and by ``python -m trainer
serve`` from the virtualenv, the process every other test and benchmark runs. The clock starts
when the command is started and stops at the first ``/ping`` that answers 200; the container's
figure includes Docker creating and starting it. Which goes first alternates between repeats;
medians are reported. On CPU (the stand-in image has no GPU libraries outside TensorFlow's wheels).

    .venv/bin/python -m benchmarks.image_startup_bench [--image gputrain-trainer:local] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

from benchmarks.serve_bench import Server, save_model

START_TIMEOUT_SECONDS = 180


def _ping_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url + "/ping", timeout=5) as reply:  # nosec B310 - loopback
            return reply.status == 200
    except OSError:
        return False


def container_seconds(image: str, model_dir: Path) -> float:
    """``docker run -d ... IMAGE serve`` until ``/ping`` answers 200."""
    name = f"gputrain-bench-{uuid.uuid4().hex[:8]}"
    started = time.perf_counter()
    subprocess.run(
        ["docker", "run", "-d", "--name", name, "-e", "EXPECTED_GPU_COUNT=0", "-v", f"{model_dir}:/opt/ml/model",
         "-p", "127.0.0.1::8080", image, "serve"],
        capture_output=True, check=True, timeout=120,
    )  # fmt: skip
    try:
        port = subprocess.run(["docker", "port", name, "8080/tcp"], capture_output=True, text=True, check=True, timeout=30)
        url = "http://127.0.0.1:" + port.stdout.split()[0].rsplit(":", 1)[1]
        while time.perf_counter() - started < START_TIMEOUT_SECONDS:
            if _ping_ok(url):
                return time.perf_counter() - started
            time.sleep(0.05)
        raise RuntimeError(f"the container did not answer /ping within {START_TIMEOUT_SECONDS} s")
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False, timeout=60)


def process_seconds(model_dir: Path, work: Path) -> float:
    """``python -m trainer serve`` until ``/ping`` answers 200."""
    started = time.perf_counter()
    server = Server(model_dir, work, gpus=0)
    try:
        while time.perf_counter() - started < START_TIMEOUT_SECONDS:
            if server.process.poll() is not None:
                raise RuntimeError(f"the server exited: {server.log.read_text()[-2000:]}")
            if _ping_ok(server.url):
                return time.perf_counter() - started
            time.sleep(0.05)
        raise RuntimeError(f"the process did not answer /ping within {START_TIMEOUT_SECONDS} s")
    finally:
        server.stop()


def run(image: str, repeats: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        model_dir, work = Path(tmp) / "model", Path(tmp) / "work"
        work.mkdir()
        save_model(model_dir)
        container_seconds(image, model_dir)  # first start pages the image's layers in; not counted
        container, process = [], []
        for repeat in range(repeats):
            order = (0, 1) if repeat % 2 == 0 else (1, 0)
            for which in order:
                if which == 0:
                    container.append(container_seconds(image, model_dir))
                else:
                    process.append(process_seconds(model_dir, work))
    return {
        "image": image,
        "repeats": repeats,
        "container_ping_seconds_median": round(statistics.median(container), 2),
        "process_ping_seconds_median": round(statistics.median(process), 2),
        "container_ping_seconds": [round(s, 2) for s in container],
        "process_ping_seconds": [round(s, 2) for s in process],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="gputrain-trainer:local")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    print(json.dumps(run(args.image, args.repeats), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
