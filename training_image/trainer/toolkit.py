"""The platform's behaviour for your own training script, in a few lines.

Script mode runs any SageMaker-style script unchanged; this module is optional and gives it what
the built-in trainer does::

    from trainer import toolkit

    strategy = toolkit.strategy()            # Mirrored / MultiWorkerMirrored / one device, bounded rendezvous
    toolkit.mixed_precision()                # bf16 / fp16 where the GPUs support it
    with strategy.scope():
        model = build_model()
        model.compile(optimizer=toolkit.optimizer(keras.optimizers.Adam()), ...)  # fp16: agreed loss scale
    model.fit(data, epochs=args.epochs, callbacks=toolkit.callbacks(batch_size=args.batch_size))

- :func:`strategy` picks the strategy from ``TF_CONFIG`` and the GPUs the image verified (the same
  selection as the built-in trainer) and bounds the multi-host rendezvous with
  ``RENDEZVOUS_TIMEOUT_SECONDS``: a missing peer fails the job with the peers named instead of hanging.
- :func:`callbacks` resumes after an interruption from ``/opt/ml/checkpoints`` (Keras
  ``BackupAndRestore``; SageMaker syncs that directory for spot restarts) and prints one
  ``[metrics]`` line per epoch in the format of the stacks' metric definitions, with the GPUs'
  mean utilization and memory on GPUs (NVML; the input-wait share is the built-in trainer's only:
  ``model.fit`` reads its batches inside its own step function).
- Works with Keras 3 and, with ``TF_USE_LEGACY_KERAS=1``, with Keras 2 (``tf.keras`` is then tf-keras).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from trainer import gpu_check, gpu_monitor
from trainer.contract import environment
from trainer.contract.script_runtime import ScriptRuntime, script_runtime
from trainer.logs import log
from trainer.train.metrics import EpochMetrics, emit

_STATE: dict[str, Any] = {}


def keras_module() -> Any:
    """The Keras the script is using: Keras 3, or tf-keras when ``TF_USE_LEGACY_KERAS=1``."""
    import tensorflow as tf

    return tf.keras


def checkpoint_dir() -> Path:
    """Where resumable state goes: ``CHECKPOINT_DIR``, else ``/opt/ml/checkpoints`` (synced by SageMaker)."""
    return environment.resolve_paths().checkpoint_dir


def model_dir() -> Path:
    """``SM_MODEL_DIR`` (``/opt/ml/model``): what is written here becomes the job's model.tar.gz."""
    return environment.resolve_paths().model_dir


def _runtime() -> ScriptRuntime:
    """The job as the runner described it to this script (TF_CONFIG, GPUs...), read once by the contract."""
    if "runtime" not in _STATE:
        _STATE["runtime"] = script_runtime()
    return _STATE["runtime"]


def _inventory() -> gpu_check.DeviceInventory:
    if "inventory" not in _STATE:
        runtime = _runtime()
        _STATE["inventory"] = gpu_check.inspect_devices(gpu_check.GpuExpectation(runtime.gpu_count, runtime.gpu_count_source))
    return _STATE["inventory"]


def strategy() -> Any:
    """The distribution strategy for this job (call once, before building the model).

    Several hosts (``TF_CONFIG``, set when the job enables multi_worker_mirrored_strategy):
    MultiWorkerMirroredStrategy, NCCL on GPUs, with a bounded rendezvous. One host with several
    GPUs: MirroredStrategy. Otherwise the single GPU or the CPU.
    """
    if "strategy" in _STATE:
        return _STATE["strategy"]
    from trainer.train import distribute

    inventory = _inventory()
    cluster = _runtime().cluster or environment.Cluster(
        hosts=("localhost",), current_host="localhost", worker_port=0, source="single host"
    )
    timeout = environment.rendezvous_timeout_seconds()
    with distribute.rendezvous_deadline(cluster, timeout):
        created = distribute.create_strategy(cluster, inventory, _runtime().instance_type)
    _STATE["strategy"] = created
    return created


def is_chief() -> bool:
    """Whether this process writes the model (worker 0, or the only one)."""
    cluster = _runtime().cluster
    return cluster is None or cluster.is_chief


def mixed_precision(mode: str = "auto") -> str:
    """Sets the Keras dtype policy the GPUs support (``auto``: bf16 on >= 8.0, fp16 on >= 7.0, else float32)."""
    policy = gpu_check.choose_precision(mode, _inventory())
    keras_module().mixed_precision.set_global_policy(policy)
    log("precision", policy=policy)
    return policy


def optimizer(inner: Any) -> Any:
    """``inner`` ready for the current dtype policy: under fp16, the replica-agreed loss scale.

    Keras' ``model.compile`` wraps an optimizer in its own ``LossScaleOptimizer`` under
    ``mixed_float16``, which under several replicas applies NaN when only some of them overflow
    (trainer.precision); pass ``toolkit.optimizer(keras.optimizers.Adam(...))`` to compile instead.
    Keras 3 only (tf-keras keeps its own loss scaling).
    """
    from trainer import precision

    if _runtime().legacy_keras:
        return inner
    policy = keras_module().mixed_precision.global_policy()
    return precision.wrap_optimizer(inner, getattr(policy, "name", str(policy)))


# The names Keras logs a classifier's accuracy under (``metrics=["accuracy"]``, an explicit
# metric, tf-keras' old ``acc``); the first present is the line's ``accuracy``.
ACCURACY_KEYS = ("accuracy", "sparse_categorical_accuracy", "categorical_accuracy", "acc")
VALIDATION_ACCURACY_KEYS = tuple(f"val_{key}" for key in ACCURACY_KEYS)


def _logged(logs: Any, keys: tuple[str, ...]) -> float | None:
    """The first of ``keys`` that Keras logged, as a float, or ``None``."""
    return next((float(logs[key]) for key in keys if logs.get(key) is not None), None)


def epoch_metrics(
    epoch: int, logs: Any, *, examples: int, elapsed: float, steps: int, usage: gpu_monitor.GpuUsage | None = None
) -> EpochMetrics:
    """The ``[metrics]`` fields of Keras' ``on_epoch_end`` (0-based ``epoch``, its ``logs``).

    ``val_loss`` and the validation accuracy are there in epochs that evaluated
    ``validation_data``, so the stacks' ``validation:loss`` and ``validation:accuracy`` match.
    """
    logs = logs or {}
    accuracy = _logged(logs, ACCURACY_KEYS)
    return EpochMetrics(
        epoch=epoch + 1,
        loss=float(logs.get("loss", float("nan"))),
        accuracy=float("nan") if accuracy is None else accuracy,
        examples_per_sec=examples / elapsed,
        step_time_ms=1000.0 * elapsed / steps,
        val_loss=_logged(logs, ("val_loss",)),
        val_accuracy=_logged(logs, VALIDATION_ACCURACY_KEYS),
        gpu_util_pct=usage.utilization_pct if usage else None,
        gpu_mem_mib=usage.memory_used_mib if usage else None,
    )


def _metrics_callback_class() -> Any:
    keras = keras_module()

    class PlatformMetrics(keras.callbacks.Callback):  # type: ignore[misc, name-defined]
        """Prints the ``[metrics]`` line per epoch, and the time from job start to the first step."""

        def __init__(self, batch_size: int | None) -> None:
            super().__init__()
            self.batch_size = batch_size
            self._epoch_start = 0.0
            self._steps = 0
            self._first_step_logged = False
            self._gpus: gpu_monitor.GpuSampler | None = None

        def on_train_begin(self, logs: Any = None) -> None:
            self._gpus = gpu_monitor.start()

        def on_train_end(self, logs: Any = None) -> None:
            if self._gpus is not None:
                self._gpus.stop()
                self._gpus = None

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            if self._gpus is not None:
                self._gpus.take()
            self._epoch_start = time.perf_counter()
            self._steps = 0

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self._steps += 1
            if not self._first_step_logged:
                self._first_step_logged = True
                started = _runtime().job_start_time
                if started is not None:
                    log("first-step", seconds_since_job_start=f"{time.time() - started:.1f}")

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            elapsed = max(time.perf_counter() - self._epoch_start, 1e-9)
            steps = max(self._steps, 1)
            usage = self._gpus.take() if self._gpus is not None else None
            if is_chief():
                examples = (self.batch_size or 0) * steps
                emit(epoch_metrics(epoch, logs, examples=examples, elapsed=elapsed, steps=steps, usage=usage))

    return PlatformMetrics


def callbacks(batch_size: int | None = None, *, resume: bool = True) -> list[Any]:
    """Keras callbacks: resume from ``checkpoint_dir()`` after an interruption, and the metric lines.

    Args:
        batch_size: The global batch size, for ``examples_per_sec`` (0 when not given).
        resume: Add ``BackupAndRestore`` (on by default; saves at every epoch end).
    """
    keras = keras_module()
    result: list[Any] = []
    if resume:
        backup = checkpoint_dir() / "backup"
        backup.mkdir(parents=True, exist_ok=True)
        result.append(keras.callbacks.BackupAndRestore(backup_dir=str(backup)))
    result.append(_metrics_callback_class()(batch_size))
    return result
