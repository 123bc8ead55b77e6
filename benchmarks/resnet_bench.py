"""Benchmark 4b: ResNet-50 on one GPU, per-GPU images/s and MFU, from JPEG shards and from memory.

The reference model for GPU figures is the trainer's ``resnet50`` (``trainer.train.models.
build_image_model``: Keras applications ResNet-50 v1, random weights) at 224x224, batch 256 per
GPU, SGD with momentum, as NVIDIA's published TensorFlow ResNet-50 figures train it. Each
configuration runs in its own process (the dtype policy and XLA are per process): float32 and
mixed precision (bf16 on compute capability >= 8.0, fp16 with loss scaling on 7.x), with and
without XLA, each fed two ways:

- ``files``: ``image-tfrecord`` shards of 256x256 JPEGs through ``trainer.datasets.images.make_dataset``
  (decode-and-crop, random resized crop, flip, batch, prefetch), which shows whether the CPU
  side keeps up;
- ``memory``: one batch kept on the GPU and trained on repeatedly: the model's own ceiling.

MFU = training FLOPs per image (``benchmarks._flops``, counted per layer: ~23.2 GFLOP, 3x the
3.86 GMAC forward pass of ResNet-50 v1 at 224) x images/s / the GPU's dense half-precision
peak from gpu_instances.json. The goal is >= 40% on an H100; for scale, NVIDIA's published
ResNet-50 training throughput on an H100 (a few thousand images/s with DALI) is about 10% by
this definition, so the memory row is the one that says what the model and XLA can do.

The step is the trainer's (tape, ``compute_average_loss``, ``scale_loss``, ``apply_gradients``,
``tf.function(jit_compile=xla)``) but runs here in-process, single device; once the trainer
reads image channels, measure it through the entrypoint as ``gpu_bench`` does for the CNN.
Without a GPU it returns a row saying why it was skipped, never made-up figures.

    .venv/bin/python -m benchmarks.resnet_bench [--instance-type p5.48xlarge] [--steps 60]
    .venv/bin/python -m benchmarks.resnet_bench --allow-cpu --image-size 32 --batch 8 --steps 3   # plumbing only
    .venv/bin/python -m benchmarks.resnet_bench --vs-torch [--allow-cpu ...]   # vs torchvision, one command

``--vs-torch`` (``benchmarks.run resnet_torch``, ``benchmarks/gpu_run.sh``): see :func:`compare_with_torch`.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks import _flops
from benchmarks._trainer import PYTHON, ROOT, TRAINING_IMAGE, SyntheticSpec, child_pythonpath, write_data

TARGET_MFU = 0.40
TARGET_GPU = "H100"
RUN_TIMEOUT_SECONDS = 900


@dataclass(frozen=True)
class Setup:
    """One measured configuration.

    Attributes:
        image_size: Side of the square training images.
        batch: Images per step (one GPU).
        steps: Timed steps, after ``warmup`` untimed ones (tracing, XLA compilation, autotuning).
        warmup: Untimed steps.
        precision: ``off`` (float32) or ``on`` (bf16/fp16, as the trainer picks for the GPU).
        xla: ``tf.function(jit_compile=True)`` for the forward and backward pass.
        input_mode: ``files`` (JPEG shards), ``records`` (raw-pixel records, cropped on the GPU)
            or ``memory`` (one batch kept on the GPU: synthetic data).
        classes: Classes in the data (1000, as ImageNet).
    """

    image_size: int = 224
    batch: int = 256
    steps: int = 60
    warmup: int = 15
    precision: str = "on"
    xla: bool = True
    input_mode: str = "files"
    classes: int = 1000


def _policy(precision: str, gpus: list[Any]) -> str:
    import tensorflow as tf

    if precision == "off":
        return "float32"
    if not gpus:
        return "mixed_bfloat16"
    capability = tf.config.experimental.get_device_details(gpus[0]).get("compute_capability", (0, 0))
    return "mixed_bfloat16" if tuple(capability) >= (8, 0) else "mixed_float16"


def measure_in_process(setup: Setup, channel: Path) -> dict[str, Any]:
    """Builds ResNet-50 under the setup's policy and times its training steps; returns figures."""
    sys.path.insert(0, str(TRAINING_IMAGE))
    import keras
    import tensorflow as tf

    from trainer.contract.hyperparameters import TrainingConfig
    from trainer.datasets import images
    from trainer.train.models import build_image_model

    gpus = tf.config.list_physical_devices("GPU")
    policy = _policy(setup.precision, gpus)
    keras.mixed_precision.set_dtype_policy(policy)
    model = build_image_model(TrainingConfig(model="resnet50", image_size=setup.image_size), setup.classes)
    flops = _flops.training_flops_per_example(model)
    optimizer: Any = keras.optimizers.SGD(learning_rate=0.1, momentum=0.9)
    if policy == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    optimizer.build(model.trainable_variables)

    @tf.function(jit_compile=setup.xla)
    def gradients(pictures: Any, labels: Any) -> Any:
        with tf.GradientTape() as tape:
            logits = model(pictures, training=True)
            per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=setup.batch)
            scaled = optimizer.scale_loss(loss)
        return tape.gradient(scaled, model.trainable_variables), loss

    @tf.function
    def step(pictures: Any, labels: Any) -> Any:
        # Raw records arrive with crop boxes: cropped here, on the GPU, outside XLA (as the trainer does).
        pictures = images.apply_crops(pictures, setup.image_size)
        grads, loss = gradients(pictures, labels)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    spec = images.discover(channel, channel="train", data_format="image-tfrecord")
    dataset = images.make_dataset(
        spec, training=True, image_size=setup.image_size, per_replica_batch=setup.batch, batches=None,
        shuffle_buffer=4 * setup.batch, seed=1, crop_on_device=True,
        threads=images.input_threads(None, 1),
    )  # fmt: skip
    if setup.input_mode == "memory":
        pictures, labels = next(iter(dataset))
        pictures = images.apply_crops(pictures, setup.image_size)  # raw records: cropped once
        pictures, labels = tf.identity(pictures), tf.identity(labels)  # on the GPU, once
        batches = iter(lambda: (pictures, labels), None)
    else:
        batches = iter(dataset)
    started = time.perf_counter()
    for _ in range(setup.warmup):
        loss = step(*next(batches))
    float(loss.numpy())
    warm = time.perf_counter()
    for _ in range(setup.steps):
        loss = step(*next(batches))
    final = float(loss.numpy())  # waits for the last step
    elapsed = time.perf_counter() - warm
    return {
        "policy": policy,
        "device": "GPU" if gpus else "CPU",
        "images_per_sec": setup.steps * setup.batch / elapsed,
        "step_time_ms": 1000.0 * elapsed / setup.steps,
        "warmup_s": warm - started,
        "flops_per_image": flops,
        "loss": final,
    }


def _stream(command: list[str], env: dict[str, str], tail: int = 20) -> tuple[int, list[str]]:
    """Runs ``command``, passing its output (stderr too) on to this process's stderr line by line as it comes,
    so that a run cut off by its caller's time limit has already left its diagnostics in the caller's log;
    its exit status (-9 when killed at RUN_TIMEOUT_SECONDS) and its last ``tail`` lines."""
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               errors="replace")  # fmt: skip
    watchdog = threading.Timer(RUN_TIMEOUT_SECONDS, process.kill)
    watchdog.start()
    last: collections.deque[str] = collections.deque(maxlen=tail)
    try:
        assert process.stdout is not None
        for line in process.stdout:
            sys.stderr.write(f"  | {line}")
            sys.stderr.flush()
            last.append(line.rstrip("\n"))
        return process.wait(), list(last)
    finally:
        watchdog.cancel()
        if process.poll() is None:
            process.kill()


def _run_child(setup: Setup, channel: Path, out: Path) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=child_pythonpath(TRAINING_IMAGE, ROOT), TF_CPP_MIN_LOG_LEVEL="2")
    command = [PYTHON, "-m", "benchmarks.resnet_bench", "--child", json.dumps(asdict(setup)), str(channel), str(out)]
    code, tail = _stream(command, env)
    if code != 0:
        raise RuntimeError(f"resnet50 run {setup} failed (exit {code}): " + "\n".join(tail))
    return json.loads(out.read_text())


def measure(
    base: Setup, instance_type: str | None, *, allow_cpu: bool = False, configs: tuple[tuple[str, bool], ...] | None = None
) -> list[dict]:
    """Every (precision, XLA) x (files, memory) configuration on the visible GPU; result rows."""
    from benchmarks.gpu_bench import visible_gpus

    names, why = visible_gpus()
    if not names and not allow_cpu:
        return [{
            "benchmark": "resnet50", "metric": "per-GPU images/s, MFU", "value": "skipped", "ratio": "",
            "target": f"MFU >= {TARGET_MFU:.0%} on {TARGET_GPU}: not measured ({why}; no GPU on this machine)",
        }]  # fmt: skip
    device = names[0] if names else "CPU (plumbing check, not GPU figures)"
    instance_type = instance_type or (_flops.instance_type_for_gpu(names[0]) if names else None)
    peak = _flops.peak_tflops(instance_type) if instance_type else None
    configs = configs or (("off", False), ("on", False), ("on", True))
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="resnet-bench-") as tmp:
        source = max(base.image_size * 8 // 7, base.image_size)  # 256 for 224, as ImageNet's resized pictures
        spec = SyntheticSpec(
            data_format="image-tfrecord", examples=max(8 * base.batch, 64), features=source * source * 3,
            classes=base.classes, shards=8, image_shape=(source, source, 3), seed=11,
        )  # fmt: skip
        channel = write_data(Path(tmp) / "data", spec)
        reference = None
        for precision, xla in configs:
            for input_mode in ("memory", "files"):
                setup = Setup(**{**asdict(base), "precision": precision, "xla": xla, "input_mode": input_mode})
                result = _run_child(setup, channel, Path(tmp) / "result.json")
                reference = reference or result["images_per_sec"]
                utilisation = _flops.mfu(result["flops_per_image"], result["images_per_sec"], peak) if peak else None
                verdict = "not computed (no peak)" if utilisation is None else (
                    "met" if utilisation >= TARGET_MFU else "NOT met"
                )  # fmt: skip
                if utilisation is not None and not (names and TARGET_GPU in names[0].upper()):
                    verdict = f"n/a, not an {TARGET_GPU} ({verdict} here)"
                rows.append({
                    "benchmark": "resnet50",
                    "metric": (f"{device}: {result['policy']}{', XLA' if xla else ''}, "
                               f"{'JPEG shards' if input_mode == 'files' else 'batch in GPU memory'}, "
                               f"{base.image_size}px, batch {base.batch}"),
                    "value": (f"{result['images_per_sec']:,.0f} images/s, {result['step_time_ms']:.1f} ms/step, "
                              f"MFU {f'{100 * utilisation:.3g}%' if utilisation is not None else 'n/a'} "
                              f"({result['flops_per_image'] / 1e9:.2f} GFLOP/image"
                              f"{f', peak {peak:g} TFLOP/s' if peak else ''}); warm-up {result['warmup_s']:.0f} s"),
                    "ratio": f"{result['images_per_sec'] / reference:.2f} vs the first row",
                    "target": f"MFU >= {TARGET_MFU:.0%} on {TARGET_GPU}: {verdict}",
                })  # fmt: skip
    return rows


def run(repeats: int = 1) -> list[dict]:
    """The runner's entry point: the default setup on the visible GPU, or a skipped row."""
    return measure(Setup(), instance_type=None)


def write_raw_records(directory: Path, *, examples: int, side: int, classes: int, shards: int = 8) -> Path:
    """Raw-pixel records (as ``--image-encoding raw`` writes them) of random pictures, with their manifest."""
    import numpy as np

    sys.path.insert(0, str(TRAINING_IMAGE))
    from trainer.datasets import images
    from trainer.process.records import ShardWriter, raw_image_example

    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(11)
    writer = ShardWriter(directory, shards)
    for start in range(0, examples, 64):
        count = min(64, examples - start)
        pictures = rng.integers(0, 256, (count, side, side, 3), dtype=np.uint8)
        writer.write_all(
            raw_image_example(picture, int(label) + 1, raw_key=images.RAW_KEY, shape_key=images.SHAPE_KEY,
                              label_key=images.LABEL_KEY)
            for picture, label in zip(pictures, rng.integers(0, classes, count), strict=True)
        )  # fmt: skip
    writer.close()
    images.write_manifest(directory, num_classes=classes, label_base=1)
    return directory


def _torch_child(base: Setup, compile_model: bool, out: Path) -> dict[str, Any] | str:
    """torchvision's figures from its own process, or the one line saying why there are none."""
    from benchmarks import torch_resnet

    reason = torch_resnet.absent_reason()
    if reason:
        return reason
    command = [PYTHON, "-m", "benchmarks.torch_resnet", "--batch", str(base.batch), "--image-size", str(base.image_size),
               "--steps", str(base.steps), "--warmup", str(base.warmup), *([] if compile_model else ["--no-compile"]),
               str(out)]  # fmt: skip
    # Only the repository on its path: not TensorFlow's staged install (its CUDA 12 libraries and
    # its own ``nvidia`` package would shadow torch's) where the caller's PYTHONPATH holds one.
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    code, tail = _stream(command, env)
    if code != 0:
        last = [line for line in tail if line.strip()][-1:] or ["no output"]
        return f"torchvision run failed (exit {code}): {last[0][:300]}"
    return json.loads(out.read_text())


INPUTS = ("memory", "records")
TORCH_MODES = ("eager", "compile")


def _known_figures(jsonl: Path | None, device: str) -> dict[str, float]:
    """Figures an earlier step of the same run appended to ``jsonl`` on this device (for the ratios)."""
    if jsonl is None or not jsonl.exists():
        return {}
    lines = (json.loads(line) for line in jsonl.read_text().splitlines() if line.startswith("{"))
    return {line["figure"]: line["images_per_sec"] for line in lines if "figure" in line and line.get("device") == device}


def compare_with_torch(
    base: Setup,
    instance_type: str | None,
    *,
    allow_cpu: bool = False,
    inputs: tuple[str, ...] = INPUTS,
    torch_modes: tuple[str, ...] = TORCH_MODES,
    jsonl: Path | None = None,
    known: Path | None = None,
) -> list[dict]:
    """The trainer's ResNet-50 (mixed precision, XLA) synthetic and from raw records, against torchvision's.

    One command, one GPU, interleaved processes: TF synthetic (a batch kept on the GPU), TF from
    raw-pixel records on local disk (the trainer's pipeline, crops on the GPU), torchvision eager
    and ``torch.compile`` (AMP, channels-last). Targets: TF synthetic >= 1.0x the best torchvision
    figure; TF from records >= 0.9x TF synthetic. MFU against the table's dense half peak.

    ``inputs`` and ``torch_modes`` pick the halves to measure (benchmarks/gpu_run.sh runs them as
    separate steps, each under its own time limit). With ``jsonl``, each figure is appended there
    as soon as it is measured (a step cut off keeps what it measured); figures already there or
    in ``known`` (an earlier step's file) from the same device count for the ratios.
    """
    from benchmarks.gpu_bench import visible_gpus

    names, why = visible_gpus()
    if not names and not allow_cpu:
        return [{
            "benchmark": "resnet-torch", "metric": "trainer ResNet-50 vs torchvision ResNet-50, images/s, MFU",
            "value": "skipped", "ratio": "", "target": f">= 1.0x torchvision on {TARGET_GPU}: not measured ({why})",
        }]  # fmt: skip
    device = names[0] if names else "CPU (plumbing check, not GPU figures)"
    instance_type = instance_type or (_flops.instance_type_for_gpu(names[0]) if names else None)
    peak = _flops.peak_tflops(instance_type) if instance_type else None

    def mfu_text(flops: float, rate: float) -> str:
        return f"MFU {100 * _flops.mfu(flops, rate, peak):.3g}%" if peak else "MFU n/a (no peak for this device)"

    def record(figure: str, result: dict[str, Any], row: dict[str, Any]) -> None:
        figures[figure] = result["images_per_sec"]
        measured[figure] = row
        rows.append(row)
        if jsonl is not None:
            with jsonl.open("a") as sink:
                sink.write(json.dumps({**result, **row, "figure": figure, "device": device}) + "\n")

    rows: list[dict] = []
    figures: dict[str, float] = {**_known_figures(known, device), **_known_figures(jsonl, device)}
    measured: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="resnet-torch-") as tmp:
        side = max(base.image_size * 8 // 7, base.image_size)
        labels = {"memory": "synthetic (batch kept on the GPU)",
                  "records": f"raw-pixel records on local disk ({side}px, crops on the GPU)"}
        if inputs:
            records = write_raw_records(Path(tmp) / "records", examples=max(8 * base.batch, 64), side=side, classes=base.classes)
        for mode in inputs:
            # XLA on the GPU, as the trainer compiles ResNet-50 there. On a CPU (the plumbing check) it
            # would only add XLA's CPU compile of the model (measured: a run took 29.6 s with it, 16.3 s without).
            setup = Setup(**{**asdict(base), "precision": "on", "xla": bool(names), "input_mode": mode})
            result = _run_child(setup, records, Path(tmp) / "result.json")
            record(f"tf-{mode}", result, {
                "benchmark": "resnet-torch",
                "metric": f"{device}: trainer ResNet-50 (TF/Keras), {result['policy']}, {'XLA' if setup.xla else 'no XLA'}, {labels[mode]}, {base.image_size}px, batch {base.batch}",
                "value": (f"{result['images_per_sec']:,.0f} images/s, {result['step_time_ms']:.1f} ms/step, "
                          f"{mfu_text(result['flops_per_image'], result['images_per_sec'])}; warm-up {result['warmup_s']:.0f} s"),
            })  # fmt: skip
        for name in torch_modes:
            compile_model = name == "compile"
            result = _torch_child(base, compile_model, Path(tmp) / "torch.json")
            if isinstance(result, str):
                rows.append({"benchmark": "resnet-torch", "metric": f"torchvision ResNet-50, AMP, channels-last, {name}",
                             "value": "skipped", "target": result})  # fmt: skip
                if "not installed" in result:
                    break
                continue
            label = "torch.compile" if compile_model else "eager"
            if compile_model and not result["compiled"]:
                label = f"torch.compile failed ({result['compile_error']}), eager"
            record(f"torch-{'compiled' if compile_model else 'eager'}", result, {
                "benchmark": "resnet-torch",
                "metric": (f"{result['device']}: torchvision ResNet-50 ({result['framework']}), AMP {result['dtype']}, "
                           f"channels-last, {label}, synthetic, {base.image_size}px, batch {base.batch}"),
                "value": (f"{result['images_per_sec']:,.0f} images/s, {result['step_time_ms']:.1f} ms/step, "
                          f"{mfu_text(result['flops_per_image'], result['images_per_sec'])} (v1.5, "
                          f"{result['flops_per_image'] / 1e9:.1f} GFLOP/image); warm-up {result['warmup_s']:.0f} s"),
            })  # fmt: skip
    torch_best = max((v for k, v in figures.items() if k.startswith("torch-")), default=None)
    ratios: dict[str, float] = {}
    if torch_best and "tf-memory" in figures:
        ratios["tf-memory/torch-best"] = ratio = figures["tf-memory"] / torch_best
        if "tf-memory" in measured:
            measured["tf-memory"].update(ratio=f"{ratio:.2f}x the best torchvision row",
                                         target=f">= 1.0x torchvision on {TARGET_GPU}: {'met' if ratio >= 1.0 else 'NOT met'}")  # fmt: skip
    if "tf-records" in figures and "tf-memory" in figures:
        ratios["tf-records/tf-memory"] = records_ratio = figures["tf-records"] / figures["tf-memory"]
        if "tf-records" in measured:
            measured["tf-records"].update(ratio=f"{records_ratio:.2f}x synthetic",
                                          target=f">= 0.9x synthetic: {'met' if records_ratio >= 0.9 else 'NOT met'}")  # fmt: skip
    if jsonl is not None and ratios:
        with jsonl.open("a") as sink:
            sink.write(json.dumps({"ratios": {k: round(v, 3) for k, v in ratios.items()}, "device": device}) + "\n")
    return rows


def run_torch(repeats: int = 1) -> list[dict]:
    """The runner's entry point for the comparison (``benchmarks.run resnet_torch``)."""
    return compare_with_torch(Setup(), instance_type=None)


def _names(allowed: tuple[str, ...]) -> Any:
    """An argparse type: a comma-separated subset of ``allowed`` (empty: none), as a tuple."""

    def parse(text: str) -> tuple[str, ...]:
        names = tuple(name for name in text.split(",") if name)
        unknown = [name for name in names if name not in allowed]
        if unknown:
            raise argparse.ArgumentTypeError(f"{', '.join(unknown)}: not one of {', '.join(allowed)}")
        return names

    return parse


def main(argv: list[str] | None = None) -> int:
    """Standalone: prints the table (not recorded in RESULTS.md); ``--child`` is one measurement."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        setup, channel, out = Setup(**json.loads(argv[1])), Path(argv[2]), Path(argv[3])
        out.write_text(json.dumps(measure_in_process(setup, channel)))
        return 0
    defaults = Setup()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instance-type", help="row of gpu_instances.json for the peak (default: from the GPU's name)")
    parser.add_argument("--image-size", type=int, default=defaults.image_size)
    parser.add_argument("--batch", type=int, default=defaults.batch)
    parser.add_argument("--steps", type=int, default=defaults.steps)
    parser.add_argument("--warmup", type=int, default=defaults.warmup)
    parser.add_argument("--allow-cpu", action="store_true", help="run on the CPU to check the plumbing; not GPU figures")
    parser.add_argument("--vs-torch", action="store_true",
                        help="trainer synthetic and from raw records vs torchvision (AMP, channels-last, torch.compile)")
    parser.add_argument("--inputs", type=_names(INPUTS), default=INPUTS,
                        help=f"with --vs-torch: the trainer's inputs to measure, comma-separated ({', '.join(INPUTS)}; '' for none)")
    parser.add_argument("--torch", type=_names(TORCH_MODES), default=TORCH_MODES,
                        help=f"with --vs-torch: torchvision's modes to measure ({', '.join(TORCH_MODES)}; '' for none)")
    parser.add_argument("--jsonl", type=Path, help="with --vs-torch: append each figure here as it is measured")
    parser.add_argument("--known", type=Path, help="with --vs-torch: an earlier step's --jsonl, whose figures count for the ratios")
    args = parser.parse_args(argv)
    if args.instance_type:
        _flops.peak_tflops(args.instance_type)  # fail early on a type not in the table
    base = Setup(image_size=args.image_size, batch=args.batch, steps=args.steps, warmup=args.warmup)
    from benchmarks._table import table

    if args.vs_torch:
        rows = compare_with_torch(base, args.instance_type, allow_cpu=args.allow_cpu, inputs=args.inputs, torch_modes=args.torch,
                                  jsonl=args.jsonl, known=args.known)  # fmt: skip
        print(table(rows))
        return 0
    print(table(measure(base, args.instance_type, allow_cpu=args.allow_cpu)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
