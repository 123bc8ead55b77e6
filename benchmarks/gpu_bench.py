"""Benchmark 4: on a GPU machine, verification time, time to the first step, per-GPU throughput, MFU.

The reference model is the trainer's CNN on CIFAR-shaped images (32x32x3, conv blocks
64,128,256, 10 classes, 512 examples per GPU per step), trained by the real entrypoint through
``benchmarks._probe`` on every GPU TensorFlow sees, with mixed precision off (float32, the
baseline) and on (bf16 or fp16, whichever the trainer picks for the GPU). Each runs twice: from
TFRecord files through the trainer's pipeline, and from the same batches in memory, which shows
how much of a shortfall is input rather than compute.

- GPU verification: ``inspect_devices`` + ``smoke_test`` (the TensorFlow import, which the
  trainer does first inside ``inspect_devices``, is reported apart).
- Time to the first step: from just before the process starts until the first step's result is
  back (interpreter, TensorFlow import, verification, data scan, model build, tracing, step).
- MFU: training FLOPs per example counted per layer (``benchmarks._flops``: 3x the forward
  multiply-accumulates of the Dense and Conv layers, not 6 x parameters, which undercounts a
  CNN) x examples/s per GPU / the GPU's dense mixed-precision peak from gpu_instances.json.

Without a GPU it returns rows saying why it was skipped, never made-up figures.

    .venv/bin/python -m benchmarks.gpu_bench --instance-type p5.48xlarge [--repeats 1]
    .venv/bin/python -m benchmarks.gpu_bench --allow-cpu --image 8x8x3 --filters 8 --examples 4096   # plumbing only
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from benchmarks import _flops, _probe
from benchmarks._trainer import PYTHON, SyntheticSpec, Throughput, job_dir, median_epoch, run as run_process
from benchmarks._trainer import cpu_only_tensorflow, steady_epochs, trainer_env, write_data

TARGET_MFU = 0.40
TARGET_GPU = "H100"
PRECISIONS = ("off", "on")
INPUTS = ("files", "memory")


@dataclass(frozen=True)
class Reference:
    """The measured workload.

    Attributes:
        image: ``(H, W, C)`` of the synthetic images.
        filters: The CNN's conv blocks.
        classes: Classes in the data.
        batch_per_gpu: Examples per GPU per step (the global batch is this x GPUs).
        examples: Examples per epoch.
        epochs: Epochs per run; the first (tracing, autotuning) is dropped.
        xla: The trainer's ``xla`` hyperparameter.
    """

    image: tuple[int, int, int] = (32, 32, 3)
    filters: tuple[int, ...] = (64, 128, 256)
    classes: int = 10
    batch_per_gpu: int = 512
    examples: int = 32_768
    epochs: int = 4
    xla: bool = False

    def hyperparameters(self, gpus: int, precision: str) -> dict[str, object]:
        """The trainer's hyperparameters for ``gpus`` devices."""
        return {
            "model": "cnn",
            "image_shape": "x".join(map(str, self.image)),
            "conv_filters": ",".join(map(str, self.filters)),
            "epochs": self.epochs,
            "batch_size": self.batch_per_gpu * max(gpus, 1),
            "mixed_precision": precision,
            "xla": str(self.xla).lower(),
        }

    def describe(self) -> str:
        """One line for the table."""
        return (
            f"cnn {'x'.join(map(str, self.image))} conv {','.join(map(str, self.filters))}, "
            f"{self.batch_per_gpu}/GPU/step{', XLA' if self.xla else ''}"
        )


@dataclass(frozen=True)
class GpuRun:
    """What one probe run measured.

    Attributes:
        epochs: The trainer's ``[metrics]`` lines after the first epoch (global examples/s).
        precision_policy: The Keras policy the trainer chose.
        verification_s: ``inspect_devices`` + ``smoke_test``.
        tf_import_s: The trainer's TensorFlow import.
        scan_s: The data scan before training.
        first_step_s: Process start to the first step's result.
        wait_fraction: Share of the steady epochs spent blocked in ``next()`` (NaN with one
            replica, whose iterator is read inside the graph).
    """

    epochs: tuple[dict[str, float], ...]
    precision_policy: str
    verification_s: float
    tf_import_s: float
    scan_s: float
    first_step_s: float
    wait_fraction: float


def visible_gpus() -> tuple[list[str], str]:
    """Names of the GPUs TensorFlow sees, and a sentence on why there are none."""
    tf = cpu_only_tensorflow()  # lists the physical GPUs without starting a runtime on them

    names = []
    for device in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(device)
        names.append(str(details.get("device_name", device.name)))
    if names:
        return names, ""
    if not tf.test.is_built_with_cuda():
        return [], f"TensorFlow {tf.__version__} here is built without CUDA"
    return [], f"TensorFlow {tf.__version__} (built with CUDA) lists no GPU device"


def reference_flops(reference: Reference) -> int:
    """Training FLOPs per example of the trainer's CNN for ``reference`` (builds it on the CPU)."""
    from trainer.contract.hyperparameters import TrainingConfig
    from trainer.train.models import build_model

    cpu_only_tensorflow()
    config = TrainingConfig(model="cnn", image_shape=reference.image, conv_filters=reference.filters)
    return _flops.training_flops_per_example(build_model(config, math.prod(reference.image), reference.classes))


def _measure(reference: Reference, gpus: int, precision: str, input_mode: str, channel: Path, base: Path) -> GpuRun:
    report_path = base / "probe.json"
    job_dir(base, reference.hyperparameters(gpus, precision))
    env = trainer_env(base, channel, gpus=gpus, BENCH_PROBE_INPUT=input_mode, BENCH_PROBE_REPORT=report_path)
    finished = run_process([PYTHON, "-m", "benchmarks._probe"], env, base / "stderr.txt")
    report = json.loads(report_path.read_text())
    first_step = _probe.first_step_done_at(report)
    if first_step is None:
        raise RuntimeError(f"the probe saw no training step: {finished.stdout[-2000:]}")
    timings = _probe.epoch_timings(report)[1:]
    return GpuRun(
        epochs=tuple(steady_epochs(finished.metrics())),
        precision_policy=finished.event("model").get("precision", "?"),
        verification_s=report["inspect_devices_s"] + report["smoke_test_s"],
        tf_import_s=report["tf_import_s"],
        scan_s=report["scan_channel_s"],
        first_step_s=first_step - finished.started_at,
        # One replica reads its iterator inside the graph: no next() to time (NaN, shown as such).
        wait_fraction=sum(t.wait_s for t in timings) / sum(t.wall_s for t in timings) if timings else math.nan,
    )


def _skipped(reason: str) -> list[dict]:
    return [{
        "benchmark": "gpu", "metric": "verification, first step, per-GPU ex/s, MFU", "value": "skipped",
        "ratio": "", "target": f"MFU >= {TARGET_MFU:.0%} on {TARGET_GPU}: not measured ({reason})",
    }]  # fmt: skip


def measure(
    reference: Reference, repeats: int, instance_type: str | None, *, allow_cpu: bool = False
) -> list[dict]:
    """Runs the benchmark on the GPUs TensorFlow sees (or the CPU with ``allow_cpu``) and returns rows."""
    names, why = visible_gpus()
    if not names and not allow_cpu:
        return _skipped(f"{why}; no GPU on this machine")
    gpus = len(names)
    device = f"{gpus}x {names[0]}" if names else "CPU (plumbing check, not GPU figures)"
    instance_type = instance_type or (_flops.instance_type_for_gpu(names[0]) if names else None)
    peak = _flops.peak_tflops(instance_type) if instance_type else None
    flops = reference_flops(reference)

    runs: dict[tuple[str, str], list[GpuRun]] = {(p, i): [] for p in PRECISIONS for i in INPUTS}
    with tempfile.TemporaryDirectory(prefix="gpu-bench-") as tmp:
        spec = SyntheticSpec(
            data_format="tfrecord", examples=reference.examples, features=math.prod(reference.image),
            classes=reference.classes, shards=8, image_shape=reference.image, seed=17,
        )  # fmt: skip
        channel = write_data(Path(tmp) / "data", spec)
        for index in range(max(repeats, 1)):
            for key in runs:
                base = Path(tmp) / f"{key[0]}-{key[1]}-{index}"
                runs[key].append(_measure(reference, gpus, *key, channel, base))

    def pooled(key: tuple[str, str]) -> tuple[Throughput, GpuRun]:
        samples = runs[key]
        # Epochs pooled over repeats; the once-per-run timings are medians over runs.
        median = replace(
            samples[0],
            verification_s=statistics.median(r.verification_s for r in samples),
            tf_import_s=statistics.median(r.tf_import_s for r in samples),
            scan_s=statistics.median(r.scan_s for r in samples),
            first_step_s=statistics.median(r.first_step_s for r in samples),
            wait_fraction=statistics.median(r.wait_fraction for r in samples),
        )
        return median_epoch([e for r in samples for e in r.epochs]), median

    peak_text = (
        f"peak {peak:g} TFLOP/s per GPU ({instance_type} in gpu_instances.json)"
        if peak
        else "no peak known: pass --instance-type"
    )
    rows = [{
        "benchmark": "gpu", "metric": f"setup: {device}; {reference.describe()}",
        "value": f"{flops / 1e6:,.1f} MFLOP per training example (per-layer count, 3x forward)",
        "ratio": "", "target": peak_text,
    }]  # fmt: skip
    base_throughput, base_run = pooled(("off", "files"))
    rows.append({
        "benchmark": "gpu", "metric": "GPU verification (inspect_devices + smoke_test)",
        "value": f"{base_run.verification_s:.2f} s (TensorFlow import {base_run.tf_import_s:.2f} s apart)",
        "ratio": f"{base_run.verification_s / base_run.first_step_s:.2f} of the time to the first step", "target": "",
    })  # fmt: skip
    rows.append({
        "benchmark": "gpu", "metric": "process start to first training step (float32, files)",
        "value": (f"{base_run.first_step_s:.2f} s: TensorFlow import {base_run.tf_import_s:.2f} s, verification "
                  f"{base_run.verification_s:.2f} s, data scan {base_run.scan_s:.2f} s, the rest is start-up, "
                  "model build, tracing and the step"),
        "ratio": f"{base_run.scan_s / base_run.first_step_s:.2f} of it in the data scan", "target": "",
    })  # fmt: skip
    for precision in PRECISIONS:
        for input_mode in INPUTS:
            throughput, sample = pooled((precision, input_mode))
            per_gpu = throughput.examples_per_sec / max(gpus, 1)
            utilisation = _flops.mfu(flops, per_gpu, peak) if peak else None
            meets = utilisation is not None and utilisation >= TARGET_MFU
            target = ""
            if input_mode == "files":
                verdict = "met" if meets else "NOT met"
                if utilisation is None:
                    verdict = "not computed (no peak)"
                elif not (names and TARGET_GPU in names[0].upper()):
                    verdict = f"n/a, not an {TARGET_GPU} ({verdict} here)"
                target = f"MFU >= {TARGET_MFU:.0%} on {TARGET_GPU}: {verdict}"
            rows.append({
                "benchmark": "gpu",
                "metric": f"{sample.precision_policy}, {'TFRecord files' if input_mode == 'files' else 'in memory'}",
                "value": (f"{per_gpu:,.0f} ex/s per GPU, {throughput.step_time_ms:.2f} ms/step, "
                          f"MFU {f'{100 * utilisation:.3g}%' if utilisation is not None else 'n/a'}, "
                          f"{sample.wait_fraction:.0%} in next(); first step {sample.first_step_s:.1f} s"),
                "ratio": f"{throughput.examples_per_sec / base_throughput.examples_per_sec:.2f} vs float32 files",
                "target": target,
            })  # fmt: skip
    return rows


def run(repeats: int = 3) -> list[dict]:
    """Measure and return result rows (the runner's entry point); skipped rows without a GPU."""
    return measure(Reference(), repeats, instance_type=None)


def _shape(text: str) -> tuple[int, int, int]:
    parts = [int(p) for p in text.lower().split("x")]
    if len(parts) != 3 or min(parts) < 1:
        raise argparse.ArgumentTypeError(f"expected HxWxC, got {text!r}")
    return parts[0], parts[1], parts[2]


def main(argv: list[str] | None = None) -> int:
    """Standalone: prints the table (not recorded in RESULTS.md)."""
    defaults = Reference()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instance-type", help="row of gpu_instances.json for the peak (default: from the GPU's name)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--image", type=_shape, default=defaults.image)
    parser.add_argument("--filters", default=",".join(map(str, defaults.filters)))
    parser.add_argument("--batch-per-gpu", type=int, default=defaults.batch_per_gpu)
    parser.add_argument("--examples", type=int, default=defaults.examples)
    parser.add_argument("--epochs", type=int, default=defaults.epochs)
    parser.add_argument("--xla", action="store_true")
    parser.add_argument("--allow-cpu", action="store_true", help="run on the CPU to check the plumbing; not GPU figures")
    args = parser.parse_args(argv)
    if args.instance_type:
        _flops.peak_tflops(args.instance_type)  # fail early on a type not in the table
    reference = Reference(
        image=args.image, filters=tuple(int(f) for f in args.filters.split(",")), batch_per_gpu=args.batch_per_gpu,
        examples=args.examples, epochs=max(args.epochs, 2), xla=args.xla,
    )  # fmt: skip
    from benchmarks._table import table

    print(table(measure(reference, args.repeats, args.instance_type, allow_cpu=args.allow_cpu)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
