"""The training entrypoint with timing probes: ``python -m benchmarks._probe`` instead of ``python -m trainer``.

It runs the unmodified ``trainer.entrypoint.main(["train"])`` in this process after wrapping
four of the trainer's module functions (the training loop looks them up at call time):

- ``gpu_check.inspect_devices`` and ``gpu_check.smoke_test``: how long GPU verification takes
  (the TensorFlow import, which the trainer does inside ``inspect_devices``, is timed apart);
- ``data.count_channel``: how long counting the channel takes before training (reading its
  manifest, or the scan of every file without one); reported as ``scan_channel_s``;
- the trainer's ``first-step`` log line: when the first call of training steps (its
  ``steps_per_execution`` steps) returned. With one replica the trainer reads its iterator
  inside the graph, so no ``next()`` is visible to time; the input waits below exist only for
  runs through ``distribute_datasets_from_function`` (several replicas);
- ``distribute.create_strategy``: the strategy's ``distribute_datasets_from_function`` returns
  the same distributed dataset behind an iterator that times every ``next()``, which is how long
  the loop waited for input before each step, and when the first step finished (the second
  ``next()`` starts right after the first step's result is read back);
- with ``BENCH_PROBE_INPUT=memory``, ``data.make_dataset``: the real pipeline runs once and its
  batches are kept as tensors, so the same loop, model and step train from memory.

The report (JSON, ``time.time()`` stamps) goes to ``BENCH_PROBE_REPORT`` when the trainer ends.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV_REPORT = "BENCH_PROBE_REPORT"
ENV_INPUT = "BENCH_PROBE_INPUT"
INPUT_MODES = ("files", "memory")


class _TimedIterator:
    def __init__(self, inner: Any, record: dict[str, Any]) -> None:
        self._inner = inner
        self._record = record

    def __iter__(self) -> _TimedIterator:
        return self

    def __next__(self) -> Any:
        at, started = time.time(), time.perf_counter()
        try:
            return next(self._inner)
        finally:
            self._record["waits_s"].append(time.perf_counter() - started)
            self._record["next_at"].append(at)
            self._record["ended_at"] = time.time()


class _TimedDataset:
    """A distributed dataset whose iterators record their ``next()`` calls, one record per epoch."""

    def __init__(self, inner: Any, epochs: list[dict[str, Any]]) -> None:
        self._inner = inner
        self._epochs = epochs

    def __iter__(self) -> _TimedIterator:
        record: dict[str, Any] = {"opened_at": time.time(), "waits_s": [], "next_at": [], "ended_at": None}
        self._epochs.append(record)
        return _TimedIterator(iter(self._inner), record)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _timed(report: dict[str, Any], key: str, function: Any) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            report[key] = time.perf_counter() - started
            report[key.removesuffix("_s") + "_ended_at"] = time.time()

    return wrapper


def _in_memory(make_dataset: Any, report: dict[str, Any]) -> Any:
    """``make_dataset`` that reads the files once, then serves the same batches from tensors."""
    cache: dict[tuple[Any, ...], Any] = {}

    def in_memory_dataset(spec: Any, plan: Any, **kwargs: Any) -> Any:
        import tensorflow as tf

        report["make_dataset_calls"] = report.get("make_dataset_calls", 0) + 1
        key = tuple(sorted((k, v) for k, v in kwargs.items() if k != "epoch"))
        if key not in cache:
            started = time.perf_counter()
            batches = list(make_dataset(spec, plan, **kwargs))
            features = tf.stack([f for f, _ in batches])
            labels = tf.stack([label for _, label in batches])
            cache[key] = (features, labels)
            report["materialise_s"] = report.get("materialise_s", 0.0) + time.perf_counter() - started
        features, labels = cache[key]
        return tf.data.Dataset.from_tensor_slices((features, labels)).prefetch(tf.data.AUTOTUNE)

    return in_memory_dataset


def install(report: dict[str, Any], input_mode: str) -> None:
    """Wraps the trainer's functions; call before ``entrypoint.main``."""
    from trainer import gpu_check
    from trainer.datasets import tabular as data
    from trainer.train import distribute

    inspect_devices = gpu_check.inspect_devices

    def inspect_after_import(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        import tensorflow  # noqa: F401 - the trainer's first TensorFlow import happens here

        report["tf_import_s"] = time.perf_counter() - started
        return _timed(report, "inspect_devices_s", inspect_devices)(*args, **kwargs)

    gpu_check.inspect_devices = inspect_after_import
    gpu_check.smoke_test = _timed(report, "smoke_test_s", gpu_check.smoke_test)
    data.count_channel = _timed(report, "scan_channel_s", data.count_channel)

    from trainer.train import runner as train

    trainer_log = train.log

    def probing_log(event: str, **fields: Any) -> None:
        if event == "first-step":
            report["first_step_at"] = time.time()
        trainer_log(event, **fields)

    train.log = probing_log

    create_strategy = distribute.create_strategy
    epochs: list[dict[str, Any]] = report.setdefault("epochs", [])

    def create_timed_strategy(*args: Any, **kwargs: Any) -> Any:
        strategy = create_strategy(*args, **kwargs)
        distribute_datasets = strategy.distribute_datasets_from_function
        strategy.distribute_datasets_from_function = lambda *a, **k: _TimedDataset(distribute_datasets(*a, **k), epochs)
        report["strategy"] = type(strategy).__name__
        report["replicas"] = int(strategy.num_replicas_in_sync)
        return strategy

    distribute.create_strategy = create_timed_strategy
    if input_mode == "memory":
        data.make_dataset = _in_memory(data.make_dataset, report)
        data.make_epochs = _in_memory_epochs(data.make_epochs, report)


def _in_memory_epochs(make_epochs: Any, report: dict[str, Any]) -> Any:
    """``make_epochs`` that reads the first epoch once, then serves its batches from tensors every epoch."""

    def in_memory_epochs(spec: Any, plan: Any, *, first_epoch: int, last_epoch: int, **kwargs: Any) -> Any:
        import tensorflow as tf

        report["make_dataset_calls"] = report.get("make_dataset_calls", 0) + 1
        started = time.perf_counter()
        batches = list(make_epochs(spec, plan, first_epoch=first_epoch, last_epoch=first_epoch, **kwargs))
        features = tf.stack([f for f, _ in batches])
        labels = tf.stack([label for _, label in batches])
        report["materialise_s"] = report.get("materialise_s", 0.0) + time.perf_counter() - started
        one_epoch = tf.data.Dataset.from_tensor_slices((features, labels))
        epochs = tf.data.Dataset.range(first_epoch, last_epoch + 1)
        return epochs.flat_map(lambda _: one_epoch).prefetch(tf.data.AUTOTUNE)

    return in_memory_epochs


@dataclass(frozen=True)
class EpochTiming:
    """How one epoch's loop spent its time, from a probe report.

    Attributes:
        steps: Training steps (``next()`` calls that returned a batch).
        wall_s: From opening the epoch's iterator to the end of its last ``next()``.
        wait_s: Time spent blocked in ``next()``, the first call included.
        first_wait_s: The first ``next()``: the pipeline starting (file opening, shuffle buffer
            fill) before the epoch's first step can run.
    """

    steps: int
    wall_s: float
    wait_s: float
    first_wait_s: float

    @property
    def wait_fraction(self) -> float:
        """Share of the epoch the loop spent waiting for input."""
        return self.wait_s / self.wall_s


def epoch_timings(report: dict[str, Any]) -> list[EpochTiming]:
    """Per-epoch timings; the last ``next()`` of each epoch (end of data) counts as waiting, not a step."""
    timings = []
    for record in report.get("epochs", []):
        waits = record["waits_s"]
        if not waits or record["ended_at"] is None:
            continue
        timings.append(
            EpochTiming(
                steps=len(waits) - 1,
                wall_s=record["ended_at"] - record["opened_at"],
                wait_s=sum(waits),
                first_wait_s=waits[0],
            )
        )
    return timings


def first_step_done_at(report: dict[str, Any]) -> float | None:
    """When the first training step's result was back: the trainer's ``first-step`` line, else the
    start of the first epoch's second ``next()``."""
    if report.get("first_step_at"):
        return float(report["first_step_at"])
    epochs = report.get("epochs", [])
    return epochs[0]["next_at"][1] if epochs and len(epochs[0]["next_at"]) > 1 else None


def main() -> int:
    """Runs the trainer with the probes installed and writes the report."""
    input_mode = os.environ.get(ENV_INPUT, "files")
    if input_mode not in INPUT_MODES:
        raise SystemExit(f"{ENV_INPUT} must be one of {', '.join(INPUT_MODES)}, got {input_mode!r}")
    report: dict[str, Any] = {"input": input_mode, "main_at": time.time()}
    from trainer import entrypoint

    install(report, input_mode)
    try:
        code = entrypoint.main(["train"])
    finally:
        report["exited_at"] = time.time()
        Path(os.environ[ENV_REPORT]).write_text(json.dumps(report), encoding="utf-8")
    # A probe that measured nothing must fail loudly, e.g. after the training loop changed shape.
    if code == 0 and not report["epochs"] and not report.get("first_step_at"):
        print("[probe] saw neither a timed epoch nor the first-step line: the probe no longer fits train.py",
              file=sys.stderr)  # fmt: skip
        return 2
    if code == 0 and input_mode == "memory" and not report.get("make_dataset_calls"):
        print("[probe] data.make_dataset was never called: the in-memory run read files", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
