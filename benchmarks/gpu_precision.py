"""The trainer at fp32, bf16 and fp16 on the GPUs: first-step time, steps/s, and a finite loss.

For ``benchmarks/gpu_run.sh`` on a GPU machine. Each precision trains the trainer's CNN on
CIFAR-shaped synthetic images through the real entrypoint (``python -m trainer train``) and
reports, per run:

- ``first_step_s``: process start to the trainer's ``first-step`` line (interpreter, TensorFlow
  import, GPU check, data scan, tracing, and the PTX JIT of any kernel the wheel ships no SASS
  for). gpu_run.sh's ``jit`` tier runs it twice (bf16), the first time with an empty ``CUDA_CACHE_PATH``:
  the difference between the two is the JIT that ``CUDA_CACHE_MAXSIZE`` lets the cache keep.
- ``steps_per_s``: 1000 / the median steady epoch's ``step_time_ms`` (the first epoch is dropped).
- ``loss_finite``: every epoch's loss is finite and the run exited 0 (the trainer fails on NaN).

    python -m benchmarks.gpu_precision --gpus 1 --out gpu-precision.json
    python -m benchmarks.gpu_precision --gpus 0 --image 8x8x3 --filters 8 --examples 1024   # CPU plumbing
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

from benchmarks._trainer import PYTHON, TRAINING_IMAGE, SyntheticSpec, job_dir, read_metric_lines, trainer_env, write_data

PRECISIONS = ("fp32", "bf16", "fp16")


def _pass_on(stream: IO[str], prefix: str) -> None:
    """The trainer's stderr into this process's stderr, line by line as it comes."""
    for line in stream:
        sys.stderr.write(prefix + line)
        sys.stderr.flush()


def measure(precision: str, *, gpus: int, channel: Path, base: Path, hyperparameters: dict[str, Any]) -> dict[str, Any]:
    """One trainer run at ``precision``; never raises for a failed run (it is reported).

    The trainer's output (stdout and stderr) is passed on as it comes, prefixed with its precision,
    so a run cut off by its caller's time limit has already left its diagnostics in the caller's log.
    """
    job_dir(base, {**hyperparameters, "mixed_precision": precision})
    started = time.perf_counter()
    process = subprocess.Popen([PYTHON, "-m", "trainer", "train"], cwd=TRAINING_IMAGE, env=trainer_env(base, channel, gpus=gpus),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace")  # fmt: skip
    assert process.stdout is not None and process.stderr is not None
    stderr = threading.Thread(target=_pass_on, args=(process.stderr, f"  [{precision} stderr] "), daemon=True)
    stderr.start()
    first_step_s = math.nan
    lines = []
    for line in process.stdout:
        lines.append(line)
        print(f"  [{precision}] {line}", end="", flush=True)
        if line.startswith("[trainer] first-step") and math.isnan(first_step_s):
            first_step_s = time.perf_counter() - started
    code = process.wait(timeout=600)
    stderr.join(timeout=10)
    stdout = "".join(lines)
    metrics = read_metric_lines(stdout)
    steady = [m for m in metrics if m["epoch"] > 1] or metrics
    step_ms = statistics.median(m["step_time_ms"] for m in steady) if steady else math.nan
    policy = next((line.split("precision=")[1].split()[0] for line in lines if line.startswith("[trainer] model ")), "")
    scale = [line.strip() for line in lines if line.startswith("[trainer] loss-scale")]
    failure = (base / "output" / "failure").read_text(encoding="utf-8") if (base / "output" / "failure").exists() else ""
    return {
        "precision": precision,
        "policy": policy,
        "exit_code": code,
        "first_step_s": round(first_step_s, 2),
        "steps_per_s": round(1000.0 / step_ms, 1) if step_ms == step_ms and step_ms > 0 else None,
        "examples_per_s": round(statistics.median(m["examples_per_sec"] for m in steady)) if steady else None,
        "losses": [m["loss"] for m in metrics],
        "loss_finite": code == 0 and bool(metrics) and all(math.isfinite(m["loss"]) for m in metrics),
        "loss_scale": scale[-1].removeprefix("[trainer] loss-scale ") if scale else None,
        "failure": failure.strip()[:300],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--gpus", type=int, default=1, help="EXPECTED_GPU_COUNT (0: CPU, plumbing only)")
    parser.add_argument("--precisions", default=",".join(PRECISIONS))
    parser.add_argument("--image", default="32x32x3")
    parser.add_argument("--filters", default="64,128,256")
    parser.add_argument("--examples", type=int, default=32_768)
    parser.add_argument("--batch-per-gpu", type=int, default=512)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--label", default="", help="a name for this pass (cold / warm JIT cache)")
    parser.add_argument("--out", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args(argv)
    shape = tuple(int(v) for v in args.image.split("x"))
    hyperparameters = {
        "model": "cnn",
        "image_shape": args.image,
        "conv_filters": args.filters,
        "epochs": args.epochs,
        "batch_size": args.batch_per_gpu * max(args.gpus, 1),
        "learning_rate": 0.001,
    }
    rows = []
    with tempfile.TemporaryDirectory(prefix="gpu-precision-") as scratch:
        root = Path(scratch)
        spec = SyntheticSpec("tfrecord", examples=args.examples, features=math.prod(shape), classes=10, shards=8,
                             image_shape=shape, seed=7)  # fmt: skip
        channel = write_data(root / "data", spec)
        for precision in args.precisions.split(","):
            row = measure(precision, gpus=args.gpus, channel=channel, base=root / precision, hyperparameters=hyperparameters)
            row["pass"] = args.label
            rows.append(row)
            print(json.dumps(row), flush=True)
            if args.out:  # each row as it comes: a pass cut off keeps the precisions it measured
                args.out.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    print(f"\n{'pass':<6} {'precision':<9} {'policy':<15} {'first step s':>12} {'steps/s':>8} {'ex/s':>9}  loss finite")
    for row in rows:
        print(
            f"{row['pass']:<6} {row['precision']:<9} {row['policy']:<15} {row['first_step_s']:>12} "
            f"{row['steps_per_s']!s:>8} {row['examples_per_s']!s:>9}  {row['loss_finite']}"
        )
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return 0 if all(row["loss_finite"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
