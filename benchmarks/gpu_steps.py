"""The steps of benchmarks/gpu_run.sh that no other benchmark module covers, one subcommand each.

Each appends one JSON line per figure to ``--jsonl`` as soon as it has it, so a step that its time
limit cuts off still leaves what it measured.

- ``nvml-load -- CMD...``: the trainer's NVML monitor (``trainer.gpu_monitor``) sampling every GPU
  while CMD (a GPU load, e.g. ``benchmarks.torch_resnet``) runs in its own process: an idle
  period first, then one line a second (utilization, memory). NVML reads the driver's counters,
  so the load's process needs no part in it. Exits with CMD's status, or 5 where NVML sees no GPU.
- ``tf-check --gpus N``: TensorFlow sees the GPUs; the trainer's own check (``inspect_devices``
  then ``smoke_test``: a matmul on every replica device and an all-reduce) passes with them; the
  time of the first and second call of a few kernels (the first includes the PTX JIT of kernels
  the wheel ships no machine code for: TensorFlow 2.21's wheel has sm_60..sm_89 and compute_90
  PTX, so on an H100 every TensorFlow kernel is JIT-compiled once, then cached).
- ``fp16-split``: one GPU split into 2 logical GPUs, fp16's agreed loss scale on the real device:
  an overflow on either replica skips the step on both and halves the scale (the CPU test is
  tests/trainer/test_trainer_precision.py), then a small fp16 model trains a few steps there.

    python -m benchmarks.gpu_steps nvml-load --jsonl out.jsonl -- python -m benchmarks.torch_resnet --no-compile r.json
    python -m benchmarks.gpu_steps tf-check --gpus 1 --jsonl out.jsonl
    python -m benchmarks.gpu_steps fp16-split --jsonl out.jsonl
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

# Not benchmarks._trainer: nvml-load runs beside torch, where nothing of TensorFlow's side is needed.
TRAINING_IMAGE = Path(__file__).resolve().parent.parent / "training_image"
if str(TRAINING_IMAGE) not in sys.path:
    sys.path.insert(0, str(TRAINING_IMAGE))

INITIAL_SCALE = 32768.0  # Keras' LossScaleOptimizer default


def _emit(jsonl: Path, **line: Any) -> None:
    print(json.dumps(line, default=str), flush=True)
    with jsonl.open("a") as sink:
        sink.write(json.dumps(line, default=str) + "\n")


def nvml_load(jsonl: Path, command: list[str], *, interval: float, every: float, idle: float) -> int:
    """Samples NVML while ``command`` runs; one line per ``every`` seconds; returns its exit status."""
    from trainer import gpu_monitor

    sampler = gpu_monitor.start(interval=interval)
    if sampler is None:
        _emit(jsonl, step="nvml", ok=False, reason="NVML sees no GPU (no driver or no nvidia-ml-py): no samples")
    else:
        time.sleep(idle)
        usage = sampler.take()
        _emit(jsonl, step="nvml", phase="idle", gpus=sampler.gpu_count, **asdict(usage))
    started = time.monotonic()
    process = subprocess.Popen(command)
    loaded: list[Any] = []
    while True:
        try:
            code = process.wait(timeout=every)
            break
        except subprocess.TimeoutExpired:
            if sampler is not None:
                loaded.append(usage := sampler.take())
                _emit(jsonl, step="nvml", phase="load", t=round(time.monotonic() - started, 1), **asdict(usage))
    if sampler is None:
        return code or 5
    sampler.stop()
    busy = [u for u in loaded if u.samples]
    _emit(jsonl, step="nvml", phase="summary", command_exit=code, seconds=round(time.monotonic() - started, 1),
          periods=len(busy), max_utilization_pct=max((u.utilization_pct for u in busy), default=None),
          mean_utilization_pct=round(sum(u.utilization_pct for u in busy) / len(busy), 1) if busy else None,
          max_memory_used_mib=max((u.memory_used_mib for u in busy), default=None))  # fmt: skip
    return code


def _timed(call: Any) -> float:
    started = time.perf_counter()
    call()
    return round(time.perf_counter() - started, 3)


def tf_check(jsonl: Path, gpus: int) -> int:
    """TensorFlow and the trainer's check on the GPUs, then first/second call times of a few kernels."""
    started = time.perf_counter()
    import tensorflow as tf

    from trainer import gpu_check

    build = tf.sysconfig.get_build_info()
    _emit(jsonl, step="tf-import", seconds=round(time.perf_counter() - started, 2), tensorflow=tf.__version__,
          cuda_build=build.get("cuda_version"), cudnn_build=build.get("cudnn_version"),
          cuda_compute_capabilities=build.get("cuda_compute_capabilities"))  # fmt: skip
    from trainer.contract.errors import TrainerError

    check_started = time.perf_counter()
    try:
        inventory = gpu_check.inspect_devices(gpu_check.resolve_expectation(gpus, None, None))
        strategy = tf.distribute.MirroredStrategy() if gpus > 1 else tf.distribute.OneDeviceStrategy(f"/{'gpu' if gpus else 'cpu'}:0")
        report = gpu_check.smoke_test(strategy, inventory)
    except TrainerError as err:
        _emit(jsonl, step="trainer-gpu-check", ok=False, error=str(err), seconds=round(time.perf_counter() - check_started, 2))
        return err.exit_code
    _emit(jsonl, step="trainer-gpu-check", ok=report["ok"], seconds=round(time.perf_counter() - check_started, 2),
          precision_policy=gpu_check.choose_precision("on", inventory), report=report)  # fmt: skip
    pictures = tf.random.normal([64, 56, 56, 64])
    kernels = {
        "conv3x3-bf16": lambda: tf.nn.conv2d(tf.cast(pictures, tf.bfloat16), tf.ones([3, 3, 64, 64], tf.bfloat16), 1, "SAME"),
        "batchnorm-relu-fp32": lambda: tf.nn.relu(tf.nn.batch_normalization(pictures, 0.1, 1.1, 0.0, 1.0, 1e-3)),
        "softmax-xent-fp32": lambda: tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.zeros([256], tf.int32), logits=tf.random.normal([256, 1000])),
        "sgd-momentum-apply": lambda: _sgd_step(tf),
    }  # fmt: skip
    for name, kernel in kernels.items():
        first = _timed(lambda kernel=kernel: _numpy(kernel()))
        second = _timed(lambda kernel=kernel: _numpy(kernel()))
        _emit(jsonl, step="first-call", kernel=name, first_s=first, second_s=second)
    return 0 if report["ok"] else 1


def _numpy(value: Any) -> Any:
    return value.numpy() if hasattr(value, "numpy") else value


def _sgd_step(tf: Any) -> Any:
    import keras

    weights = keras.Variable(tf.ones([1024, 1024]))
    optimizer = keras.optimizers.SGD(0.1, momentum=0.9)
    optimizer.apply_gradients([(tf.ones([1024, 1024]), weights)])
    return weights.value


def fp16_split(jsonl: Path, memory_mib: int, steps: int, *, allow_cpu: bool = False) -> int:
    """fp16's agreed loss scale on 2 logical GPUs of one card; returns 0 when every case holds.

    ``allow_cpu``: without a GPU, 2 logical CPUs instead (a plumbing check, not the GPU's figures).
    """
    import numpy as np
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus and not allow_cpu:
        _emit(jsonl, step="fp16-split", ok=False, reason="TensorFlow sees no GPU")
        return 1
    kind = "gpu" if gpus else "cpu"
    split = [tf.config.LogicalDeviceConfiguration(memory_limit=memory_mib if gpus else None)] * 2
    tf.config.set_logical_device_configuration((gpus or tf.config.list_physical_devices("CPU"))[0], split)
    import keras

    from trainer.precision import AgreedLossScaleOptimizer

    # NCCL refuses two ranks on one device; the reduction goes through one device instead.
    strategy = tf.distribute.MirroredStrategy([f"/{kind}:0", f"/{kind}:1"], cross_device_ops=tf.distribute.ReductionToOneDevice())
    all_ok = True
    for which, bad_replica in (("agreed", 0), ("agreed", 1), ("agreed", -1), ("keras", 1)):
        with strategy.scope():
            weights = keras.Variable(tf.ones([2]), name="w")
            inner = keras.optimizers.SGD(0.1)
            optimizer = AgreedLossScaleOptimizer(inner) if which == "agreed" else keras.optimizers.LossScaleOptimizer(inner)
            optimizer.build([weights])
        _one_step(tf, strategy, optimizer, weights, bad_replica)
        local = lambda v: [x.numpy().tolist() for x in strategy.experimental_local_results(v.value)]  # noqa: E731
        result = {"weights": local(weights), "scale": local(optimizer.dynamic_scale)}
        if which == "agreed":
            result["skipped"] = local(optimizer.skipped_steps)
            if bad_replica >= 0:
                ok = result["weights"] == [[1.0, 1.0]] * 2 and result["scale"] == [INITIAL_SCALE / 2] * 2 and result["skipped"] == [1, 1]
            else:
                ok = result["scale"] == [INITIAL_SCALE] * 2 and result["weights"][0] == result["weights"][1]
            all_ok &= ok
        else:  # Keras' own optimizer, for the record: replica 0's verdict decides for both
            ok = None
        _emit(jsonl, step="loss-scale-one-step", optimizer=which, bad_replica=bad_replica, ok=ok, **result)

    keras.mixed_precision.set_global_policy("mixed_float16")
    with strategy.scope():
        model = keras.Sequential([
            keras.Input((32, 32, 3)), keras.layers.Conv2D(64, 3, activation="relu"), keras.layers.Conv2D(64, 3, activation="relu"),
            keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10, dtype="float32"),
        ])  # fmt: skip
        model.compile(optimizer=AgreedLossScaleOptimizer(keras.optimizers.SGD(0.01)),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))  # fmt: skip
    rng = np.random.default_rng(0)
    data = tf.data.Dataset.from_tensor_slices(
        (rng.standard_normal((steps * 256, 32, 32, 3)).astype("float32"), rng.integers(0, 10, steps * 256))
    ).batch(256)
    started = time.perf_counter()
    history = model.fit(data, epochs=2, verbose=0)
    losses = [float(v) for v in history.history["loss"]]
    finite = all(math.isfinite(v) for v in losses)
    _emit(jsonl, step=f"fp16-fit-2-logical-{kind}s", ok=finite, losses=losses, seconds=round(time.perf_counter() - started, 2),
          loss_scale=float(model.optimizer.dynamic_scale.numpy()), skipped_steps=int(model.optimizer.skipped_steps.numpy()))  # fmt: skip
    return 0 if all_ok and finite else 1


def _one_step(tf: Any, strategy: Any, optimizer: Any, weights: Any, bad_replica: int) -> None:
    """One step in which replica ``bad_replica`` (-1: none) has an infinite gradient."""

    @tf.function
    def step() -> None:
        def replica_fn() -> None:
            bad = tf.equal(tf.distribute.get_replica_context().replica_id_in_sync_group, bad_replica)
            grad = tf.where(bad, tf.constant([float("inf"), 1.0]), tf.constant([1.0, 1.0]))
            optimizer.apply_gradients([(grad, weights)])

        strategy.run(replica_fn)

    step()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    load = commands.add_parser("nvml-load", help="NVML samples while a command loads the GPU")
    load.add_argument("--jsonl", type=Path, required=True)
    load.add_argument("--interval", type=float, default=0.2, help="seconds between NVML samples")
    load.add_argument("--every", type=float, default=1.0, help="seconds between lines (means of the samples)")
    load.add_argument("--idle", type=float, default=1.0, help="seconds sampled before the load starts")
    load.add_argument("load", nargs=argparse.REMAINDER, help="-- the command that loads the GPU")
    check = commands.add_parser("tf-check", help="TensorFlow and the trainer's check on the GPUs, first kernel calls")
    check.add_argument("--jsonl", type=Path, required=True)
    check.add_argument("--gpus", type=int, required=True, help="EXPECTED_GPU_COUNT")
    split = commands.add_parser("fp16-split", help="fp16's agreed loss scale on 2 logical GPUs of one card")
    split.add_argument("--jsonl", type=Path, required=True)
    split.add_argument("--memory-mib", type=int, default=8192, help="memory of each logical GPU")
    split.add_argument("--steps", type=int, default=20, help="fp16 training steps per epoch (2 epochs)")
    split.add_argument("--allow-cpu", action="store_true", help="2 logical CPUs without a GPU: plumbing only")
    args = parser.parse_args(argv)
    if args.command == "nvml-load":
        command = args.load[1:] if args.load[:1] == ["--"] else args.load
        if not command:
            parser.error("nvml-load needs a command after --")
        return nvml_load(args.jsonl, command, interval=args.interval, every=args.every, idle=args.idle)
    if args.command == "tf-check":
        return tf_check(args.jsonl, args.gpus)
    return fp16_split(args.jsonl, args.memory_mib, args.steps, allow_cpu=args.allow_cpu)


if __name__ == "__main__":
    sys.exit(main())
