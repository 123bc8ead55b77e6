"""The training run: checks, strategy, data, one custom training loop, checkpoints, model.

One custom loop (``strategy.run`` over ``distribute_datasets_from_function``) serves every
strategy: Keras 3 ``model.fit`` fails under MultiWorkerMirroredStrategy in TensorFlow 2.21, and
one loop keeps single-device, multi-GPU and multi-host behaviour identical.

Order matters: device configuration must precede TensorFlow's runtime start, and the strategy
must exist before the first op, so pure-Python checks (hyperparameters, the channel's files,
the expected GPU count) run first and fail fast, and the data scan runs after the rendezvous.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from trainer import __version__, gpu_check, gpu_monitor, network_check
from trainer import precision as precisions
from trainer.contract.environment import Cluster, Paths, TrainingEnvironment
from trainer.contract.errors import (
    CheckpointError,
    ConfigError,
    DataError,
    TrainerError,
    TrainingDivergedError,
    TrainingInterrupted,
)
from trainer.contract.hyperparameters import TrainingConfig, batch_problem
from trainer.datasets import images
from trainer.datasets import tabular as data
from trainer.logs import log
from trainer.train import diagnosis, distribute, lr_schedule, models
from trainer.train.metrics import EpochMetrics, emit

MODEL_FILENAME = "model.keras"
# With a validation channel model.keras is the best epoch's model and this one the last epoch's.
LAST_MODEL_FILENAME = "last.keras"
# Where the best model is kept during training (the checkpoint directory, so a resumed run keeps
# it); earlier versions also wrote it beside model.keras.
BEST_MODEL_FILENAME = "best.keras"
CONFIG_FILENAME = "trainer_config.json"
KEEP_CHECKPOINTS = 3


class StopRequest:
    """Turns SIGTERM into a flag the loop checks after every step.

    SageMaker (job stop, spot interruption) and ``docker stop`` send SIGTERM and allow about
    120 s before SIGKILL. The loop stops at a step boundary and checkpoints the steps applied so
    far (an epoch of a large dataset can take an hour: a spot interruption must not cost it); a
    restart resumes at the next step. The handler is also what makes SIGTERM work at all when the
    trainer runs as PID 1 in a container, where default dispositions are ignored.
    """

    def __init__(self) -> None:
        self.requested = False

    def install(self) -> None:
        """(Re)installs the handler; MultiWorkerMirroredStrategy installs its own on creation."""
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested = True
        log("sigterm", action="stopping at the next step and checkpointing the steps applied so far")


@dataclass(frozen=True)
class TrainingResult:
    """How a training loop ended.

    Attributes:
        completed_epochs: Epochs completed in total (equals ``epochs`` on success).
        resumed_from_epoch: Completed epochs restored from a checkpoint at the start (0 if none).
        last_metrics: Metrics of the last epoch this process trained, if it trained any.
        weights_sha256: Digest of the last epoch's weights; identical on every worker.
        best_model: The best-by-``val_loss`` model (chief, with a validation channel), else None.
        best_epoch: The epoch of ``best_model`` (None when unknown: a checkpoint from before it was kept).
        best_val_loss: Its ``val_loss``.
    """

    completed_epochs: int
    resumed_from_epoch: int
    last_metrics: EpochMetrics | None
    weights_sha256: str
    best_model: Path | None = None
    best_epoch: int | None = None
    best_val_loss: float | None = None


def run(env: TrainingEnvironment) -> TrainingResult:
    """Runs one training job end to end; raises TrainerError subclasses with operator-facing text."""
    config = TrainingConfig.from_hyperparameters(env.hyperparameters)
    cluster = env.cluster
    log("config", **{k: json.dumps(v) for k, v in config.to_dict().items()})
    # Image channels (trainer.datasets.images) are counted from their listing or manifest; feature rows by
    # data.count_channel below.
    train_channel = data.resolve_train_channel(env.paths, config, env.input_data_config)
    spec: Any = images.from_config(env.paths.channel_dir(train_channel), config, channel=train_channel)
    if spec is None:
        spec = data.discover_channel(env.paths, config, env.input_data_config)
    val_spec = _discover_validation(env, config, spec)
    expectation = gpu_check.resolve_expectation(env.expected_gpu_count, config.expected_gpu_count, env.instance_type)
    inventory = gpu_check.inspect_devices(expectation, env.logical_cpu_devices)
    network_check.verify(env.instance_type, cluster.num_workers, uses_gpus=inventory.uses_gpus)
    precision = gpu_check.choose_precision(config.mixed_precision, inventory, env.instance_type)

    stop = StopRequest()
    stop.install()
    with distribute.rendezvous_deadline(
        cluster, env.rendezvous_timeout_seconds, env.rendezvous_refused_seconds
    ) as deadline:
        if cluster.num_workers > 1:
            distribute.wait_for_dns(cluster, deadline)
        strategy = distribute.create_strategy(cluster, inventory, env.instance_type)
        stop.install()
        gpu_report = _smoke_test(strategy, inventory, cluster)

    import keras

    given = config
    config = config.resolved_for(replicas=strategy.num_replicas_in_sync, uses_gpus=inventory.uses_gpus)
    if config != given:
        log("config-resolved", batch_size=config.batch_size, learning_rate=config.learning_rate, xla=config.xla,
            replicas=strategy.num_replicas_in_sync)  # fmt: skip
    keras.mixed_precision.set_dtype_policy(precision)
    keras.utils.set_random_seed(config.seed)
    if not isinstance(spec, images.ImageDataset):
        spec = data.count_channel(spec, config.num_classes)
    log(
        "data",
        channel=spec.channel,
        format=spec.data_format,
        files=len(spec.files),
        examples=spec.examples,
        features=spec.num_features,
        classes=spec.num_classes,
    )
    if val_spec is not None and not isinstance(val_spec, images.ImageDataset):
        val_spec = data.count_channel(val_spec, spec.num_classes)
        if val_spec.num_features != spec.num_features:
            raise DataError(
                f"Validation channel {val_spec.channel!r} has {val_spec.num_features} features per example, "
                f"the training channel {spec.num_features}."
            )
        log("validation-data", channel=val_spec.channel, files=len(val_spec.files), examples=val_spec.examples)
    result, model = _train_loop(
        config=config, spec=spec, val_spec=val_spec, strategy=strategy, cluster=cluster, paths=env.paths, stop=stop, precision=precision,
        input_threads=images.input_threads(env.instance_type, strategy.num_replicas_in_sync // cluster.num_workers),
    )
    if cluster.is_chief:
        resolved = _resolved_config(config, spec, strategy, cluster, precision, gpu_report, result)
        _save_model(env.paths, model, resolved, result.best_model)
    log(
        "finished",
        worker=cluster.worker_index,
        epochs=result.completed_epochs,
        resumed_from_epoch=result.resumed_from_epoch,
        weights_sha256=result.weights_sha256,
    )
    return result


def _smoke_test(strategy: Any, inventory: gpu_check.DeviceInventory, cluster: Cluster) -> dict[str, Any]:
    """The GPU check; a peer lost in its all-reduce is the named multi-host failure, not a traceback."""
    import tensorflow as tf

    try:
        return gpu_check.smoke_test(strategy, inventory)
    except tf.errors.OpError as err:
        if cluster.num_workers > 1:
            raise distribute.peer_failure(cluster, "the start-up GPU check's all-reduce", err) from err
        raise


def _resolved_config(
    config: TrainingConfig,
    spec: data.DatasetSpec,
    strategy: Any,
    cluster: Cluster,
    precision: str,
    gpu_report: dict[str, Any],
    result: TrainingResult,
) -> dict[str, Any]:
    """Everything needed to understand or reproduce the model, saved beside it."""
    return {
        "trainer_version": __version__,
        "hyperparameters": config.to_dict(),
        "data": {
            "channel": spec.channel,
            "directory": str(spec.directory),
            "format": spec.data_format,
            "files": len(spec.files),
            "examples": spec.examples,
            "num_features": spec.num_features,
            "num_classes": spec.num_classes,
        },
        "distribution": {
            "strategy": type(strategy).__name__,
            "replicas": strategy.num_replicas_in_sync,
            "workers": cluster.num_workers,
            "hosts": list(cluster.hosts),
            "host_source": cluster.source,
        },
        "precision_policy": precision,
        "xla": config.xla,
        "gpu_check": gpu_report,
        "completed_epochs": result.completed_epochs,
        "resumed_from_epoch": result.resumed_from_epoch,
        "weights_sha256": result.weights_sha256,
        "model": _model_record(result),
        **({"class_names": names} if (names := class_names(spec)) else {}),
    }


def _model_record(result: TrainingResult) -> dict[str, Any]:
    """Which epoch ``model.keras`` holds: the best by ``val_loss`` with a validation channel, else the last."""
    if result.best_model is None:
        return {"file": MODEL_FILENAME, "selected_by": "last_epoch", "epoch": result.completed_epochs}
    return {
        "file": MODEL_FILENAME,
        "selected_by": "best_val_loss",
        "epoch": result.best_epoch,
        "val_loss": result.best_val_loss,
        "last_epoch": result.completed_epochs,
        "last_epoch_file": LAST_MODEL_FILENAME,
    }


def class_names(spec: Any) -> list[str]:
    """What each output index means, when known: ``class_names[i]`` is the class of logit ``i``.

    Image channels: the class directory names in sorted order (``image-dir``), or those the shards'
    ``manifest.json`` names (the processing mode writes them); feature rows: the label values
    themselves (the label column holds the index). Empty when unknown (shards that name no classes).
    """
    if isinstance(spec, images.ImageDataset):
        return list(spec.class_names)
    return [str(label) for label in range(spec.num_classes)]


def _weights_digest(model: Any) -> str:
    import numpy as np

    digest = hashlib.sha256()
    for weights in model.get_weights():
        digest.update(np.ascontiguousarray(weights).tobytes())
    return digest.hexdigest()


def _checkpoint_write_dir(paths: Paths, cluster: Cluster) -> Path:
    # Every worker must call save (it may run collectives); only the chief's copy is kept.
    if cluster.is_chief:
        return paths.checkpoint_dir
    return paths.checkpoint_dir / f".worker-{cluster.worker_index}-tmp"


def _agree_on_resume(strategy: Any, restored: tuple[int, int], cluster: Cluster, paths: Paths) -> None:
    """Fails if workers restored different points (completed epochs, steps of the next), i.e. the
    checkpoint storage is not shared or synced."""
    if cluster.num_workers == 1:
        return
    import tensorflow as tf

    @tf.function
    def gather() -> Any:
        def replica_fn() -> Any:
            mine = tf.constant([[float(restored[0]), float(restored[1])]])
            return tf.distribute.get_replica_context().all_gather(mine, axis=0)

        return strategy.run(replica_fn)

    points = sorted({(int(epoch), int(step)) for epoch, step in strategy.experimental_local_results(gather())[0].numpy()})
    if len(points) > 1:
        seen = [epoch if not step else f"{epoch} and {step} steps" for epoch, step in points]
        raise CheckpointError(
            f"Workers restored different checkpoints from {paths.checkpoint_dir} (completed epochs {seen}); "
            "every node must see the chief's checkpoints (SageMaker CheckpointConfig, or shared storage via "
            "CHECKPOINT_DIR on EC2). Clear the directory to start over."
        )


def _checkpoint_candidates(directory: Path) -> list[str]:
    """The checkpoints the directory's ``checkpoint`` file lists, newest first.

    Without a readable ``checkpoint`` file (its own upload cut short), the ``ckpt-N.index``
    files present, highest N first.
    """
    import tensorflow as tf

    state = tf.train.get_checkpoint_state(str(directory))
    if state is None:
        numbered = [(path.name[len("ckpt-") : -len(".index")], path) for path in directory.glob("ckpt-*.index")]
        found = sorted((int(number), path) for number, path in numbered if number.isdigit())
        return [str(directory / f"ckpt-{number}") for number, _ in reversed(found)]
    listed = [*state.all_model_checkpoint_paths, state.model_checkpoint_path]
    return list(dict.fromkeys(path for path in reversed(listed) if path))


def _missing_files(prefix: str) -> str | None:
    """The file of checkpoint ``prefix`` that is absent (its index, or a data shard the shard count promises)."""
    index = Path(f"{prefix}.index")
    if not index.is_file():
        return index.name
    shards = sorted(index.parent.glob(f"{Path(prefix).name}.data-*-of-*"))
    if not shards:
        return f"{Path(prefix).name}.data-00000-of-00001"
    total = int(shards[0].name.rsplit("-of-", 1)[1])
    for number in range(total):
        name = f"{Path(prefix).name}.data-{number:05d}-of-{total:05d}"
        if not (index.parent / name).is_file():
            return name
    return None


def _restore(
    checkpoint: Any, completed: Any, paths: Paths, config: TrainingConfig, spec: data.DatasetSpec, optional: Any = None
) -> int:
    """Restores the newest intact checkpoint; returns its completed epochs (0 when there is none).

    SageMaker uploads ``/opt/ml/checkpoints`` in the background, so a spot interruption during
    the upload of ``ckpt-N``'s data leaves a ``checkpoint`` file that names ``ckpt-N`` beside an
    incomplete ``ckpt-N``. Such a checkpoint (a file missing, or one that cannot be read) is
    skipped with a ``checkpoint-skipped`` line and the one before it restored; the walk depends
    only on the files, so workers that see the same directory restore the same epoch (checked by
    :func:`_agree_on_resume`). A checkpoint that is whole but does not fit the model still fails.
    ``optional``: a checkpoint of what later trainers added (``best_epoch``, ``epoch_steps``),
    restored where the checkpoint has it: one written before them must not read as another model's.
    """
    import tensorflow as tf

    candidates = _checkpoint_candidates(paths.checkpoint_dir)
    for candidate in candidates:
        missing = _missing_files(candidate)
        if missing is not None:
            log("checkpoint-skipped", checkpoint=candidate, reason=json.dumps(f"{missing} is missing (upload cut short?)"))
            continue
        try:
            checkpoint.restore(candidate).assert_existing_objects_matched()
        except (AssertionError, ValueError, tf.errors.InvalidArgumentError) as err:
            raise CheckpointError(
                f"The checkpoint {candidate} does not fit this model (model={config.model}, {spec.num_features} "
                f"features, {spec.num_classes} classes): {' '.join(str(err).split())[:300]}. Resume with the "
                "hyperparameters and data it was written with, or point CHECKPOINT_DIR at an empty directory."
            ) from err
        except (tf.errors.OpError, IndexError) as err:
            # A file cut short or garbled: NotFound, DataLoss, "not an sstable" (an index), or the
            # reader's IndexError "Read less bytes than requested" (a data file).
            reason = f"unreadable: {' '.join(str(err).split())[:200]}"
            log("checkpoint-skipped", checkpoint=candidate, reason=json.dumps(reason))
            continue
        steps = {}
        if optional is not None:
            optional.restore(candidate).expect_partial()
            epoch_steps = getattr(optional, "epoch_steps", None)
            if epoch_steps is not None and int(epoch_steps.numpy()):
                steps = {"epoch_steps": int(epoch_steps.numpy())}  # a stop mid-epoch: the next epoch's applied steps
        restored = int(completed.numpy())
        log("resume", checkpoint=candidate, completed_epochs=restored, epochs=config.epochs, **steps)
        return restored
    if candidates:
        log("checkpoint-none-intact", directory=paths.checkpoint_dir, action="training from epoch 1")
    return 0


def _step_failure(
    err: Exception, epoch: int, step: int, spec: data.DatasetSpec, problem: str | None = None,
    cluster: Cluster | None = None,
) -> TrainerError:
    """The failure of a training call: the bad line or record if the files have one, else the error."""
    if problem:
        return DataError(f"{problem} (met in epoch {epoch} near step {step})")
    message = " ".join(str(getattr(err, "message", err)).split())[:400]
    if cluster is not None and cluster.num_workers > 1 and not problem and "Iterator" not in str(err):
        return distribute.peer_failure(cluster, f"training step {step} of epoch {epoch}", err)
    if "IteratorGetNext" in str(err) or "Iterator" in type(err).__name__:
        if isinstance(spec, images.ImageDataset):
            return images.explain_failure(spec, err, epoch=epoch, step=step)
        return DataError(
            f"Reading channel {spec.channel!r} ({spec.directory}) failed in epoch {epoch} at step {step}: {message}"
        )
    return TrainerError(
        f"Training step {step} of epoch {epoch} failed ({type(err).__name__}): {message}. "
        "In a multi-host job this usually means another worker failed first; check its log."
    )


class DivergenceWatch:
    """Flags a loss that explodes without becoming NaN (Adam at a huge learning rate does this).

    The loss has diverged when it stays above ``factor`` times a reference for ``steps``
    consecutive steps. The reference is the larger of the first step's loss (before any update
    by this process) and chance level (``ln(num_classes)``), so a resumed run whose loss is
    already low does not count ordinary batch noise as divergence.
    """

    REFERENCE_STEPS = 1

    def __init__(self, factor: float, steps: int, num_classes: int) -> None:
        self.factor = factor
        self.steps = steps
        self.chance = math.log(max(num_classes, 2))
        self.first: list[float] = []
        self.above = 0

    @property
    def reference(self) -> float:
        """The loss that ``factor`` multiplies."""
        return max(sum(self.first) / len(self.first) if self.first else 0.0, self.chance)

    def observe(self, loss: float) -> bool:
        """Takes one step's loss; True on the step that completes a diverged stretch."""
        if not self.factor:
            return False
        if len(self.first) < self.REFERENCE_STEPS:
            self.first.append(loss)
            return False
        self.above = self.above + 1 if loss > self.factor * self.reference else 0
        return self.above == self.steps


@dataclass(frozen=True)
class _Batching:
    """How the global batch splits over replicas and input pipelines (one per worker), and the steps per epoch."""

    replicas: int
    num_pipelines: int
    per_replica_batch: int
    replicas_per_pipeline: int
    plans: Any
    steps: int

    @property
    def distributed(self) -> bool:
        """Several replicas: steps go through ``strategy.run`` and a distributed dataset."""
        return self.replicas > 1


@dataclass
class _Trainable:
    """The model, its optimizer and the checkpointed counters, restored from the last checkpoint.

    ``epoch_steps``: the steps of epoch ``completed + 1`` applied before the checkpoint (a stop in
    the middle of an epoch); 0 at every epoch's end. ``epoch_plan``: what those steps were counted
    in, ``[steps per epoch, global batch, workers, training examples]`` (:func:`_epoch_plan`). ``last_number``: the number of the newest
    ``ckpt-<n>`` in the checkpoint directory; saves are numbered after it, in the order written.
    """

    model: Any
    optimizer: Any
    completed: Any
    best_val_loss: Any
    evals_since_best: Any
    best_epoch: Any
    epoch_steps: Any
    epoch_plan: Any
    checkpoint: Any
    manager: Any
    write_dir: Path
    best_path: Path
    resumed_from: int
    last_number: int
    sync_statistics: Any = None
    saved_at: float = field(default_factory=time.monotonic)
    """When the last checkpoint was written (or training started): ``checkpoint_every_minutes`` counts from it."""

    def save(self, cluster: Cluster, **where: int) -> str:
        """Writes the next checkpoint (a collective: every worker calls it); returns its path.

        Workers other than the chief write to a directory of their own, removed at once
        (``_checkpoint_write_dir``); the chief logs ``checkpoint`` with ``where`` (epoch, step).
        """
        self.last_number += 1
        saved = self.manager.save(checkpoint_number=self.last_number)
        self.saved_at = time.monotonic()
        if not cluster.is_chief:
            shutil.rmtree(self.write_dir, ignore_errors=True)
        else:
            log("checkpoint", path=saved, **where)
        return str(saved)


def _plan_batching(config: TrainingConfig, spec: data.DatasetSpec, strategy: Any, cluster: Cluster) -> _Batching:
    """Splits the global batch; raises ConfigError for a batch the replicas cannot share, DataError for too little data."""
    replicas = strategy.num_replicas_in_sync
    # The config is resolved: batch_size is the global batch even where batch_size_per_gpu set it.
    problem = batch_problem(replace(config, batch_size_per_gpu=0), replicas=replicas, workers=cluster.num_workers)
    if problem:
        raise ConfigError(problem)
    num_pipelines = cluster.num_workers
    per_replica_batch = config.batch_size // replicas
    if isinstance(spec, images.ImageDataset):
        plans: Any = images.plan_shards(spec, num_pipelines)
        steps = images.steps_per_epoch(spec, config.batch_size, num_pipelines)
    else:
        plans = data.plan_shards(spec, num_pipelines)
        steps = data.steps_per_epoch(plans, config.batch_size // num_pipelines)
    if steps == 0:
        raise DataError(
            f"Input channel {spec.channel!r} has {spec.examples} examples, fewer than one global batch "
            f"(batch_size={config.batch_size}) per epoch across {num_pipelines} worker(s); "
            "lower batch_size or add data."
        )
    log(
        "sharding",
        by_file=plans[0].by_file,
        steps_per_epoch=steps,
        per_replica_batch=per_replica_batch,
    )
    return _Batching(replicas, num_pipelines, per_replica_batch, replicas // num_pipelines, plans, steps)


def _build_trainable(
    config: TrainingConfig, spec: data.DatasetSpec, strategy: Any, *, steps: int, precision: str, paths: Paths, cluster: Cluster
) -> _Trainable:
    """Builds the model and optimizer in the strategy's scope and restores the last checkpoint all workers agree on."""
    import keras
    import tensorflow as tf

    with strategy.scope():
        model = models.build_model(config, spec.num_features, spec.num_classes)
        rate = lr_schedule.learning_rate(config.learning_rate, warmup_steps=round(config.warmup_epochs * steps))
        optimizer: Any = (
            keras.optimizers.SGD(learning_rate=rate, momentum=0.9)
            if config.optimizer == "sgd"
            else keras.optimizers.Adam(learning_rate=rate)
        )
        # fp16: a dynamic loss scale whose skip-this-step verdict all replicas share (trainer.precision).
        optimizer = precisions.wrap_optimizer(optimizer, precision)
        optimizer.build(model.trainable_variables)
    log("model", name=config.model, parameters=models.parameter_count(model), precision=precision, xla=config.xla)

    completed = tf.Variable(0, dtype=tf.int64, trainable=False, name="completed_epochs")
    best_val_loss = tf.Variable(math.inf, dtype=tf.float64, trainable=False, name="best_val_loss")
    evals_since_best = tf.Variable(0, dtype=tf.int64, trainable=False, name="evals_since_best")
    # 0: unknown (a checkpoint written before the trainer kept it restores without it).
    best_epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="best_epoch")
    # Steps of the next epoch already applied (a stop mid-epoch); 0 in checkpoints written before it was kept.
    epoch_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch_steps")
    # What those steps were counted in: [steps per epoch, global batch, workers, examples].
    epoch_plan = tf.Variable([0, 0, 0, 0], dtype=tf.int64, trainable=False, name="epoch_plan")
    kept = {"model": model, "optimizer": optimizer, "completed_epochs": completed, "best_val_loss": best_val_loss,
            "evals_since_best": evals_since_best}  # fmt: skip
    later = {"best_epoch": best_epoch, "epoch_steps": epoch_steps, "epoch_plan": epoch_plan}
    checkpoint = tf.train.Checkpoint(**kept, **later)
    # Restored as two: what every checkpoint holds must match; what later trainers added only where it was written.
    resumed_from = _restore(tf.train.Checkpoint(**kept), completed, paths, config, spec, tf.train.Checkpoint(**later))
    resumed_steps = int(epoch_steps.numpy())
    _agree_on_resume(strategy, (resumed_from, resumed_steps), cluster, paths)
    write_dir = _checkpoint_write_dir(paths, cluster)
    manager = tf.train.CheckpointManager(checkpoint, str(write_dir), max_to_keep=KEEP_CHECKPOINTS)
    best_path = paths.checkpoint_dir / BEST_MODEL_FILENAME
    if cluster.is_chief and resumed_from == 0 and resumed_steps == 0:
        best_path.unlink(missing_ok=True)  # from another job that used this checkpoint directory
    return _Trainable(
        model, optimizer, completed, best_val_loss, evals_since_best, best_epoch, epoch_steps, epoch_plan, checkpoint, manager,
        write_dir, best_path, resumed_from, _newest_number(paths.checkpoint_dir), distribute.statistics_sync(model, strategy),
    )


def _newest_number(directory: Path) -> int:
    """The highest ``n`` of the ``ckpt-<n>`` checkpoints in ``directory`` (0 when none): the next save
    takes a number after every checkpoint there, restored, skipped or of an earlier job, so it never
    overwrites one."""
    numbers = [path.name[len("ckpt-") : -len(".index")] for path in directory.glob("ckpt-*.index")] if directory.is_dir() else []
    return max((int(n) for n in numbers if n.isdigit()), default=0)


def _step_function(model: Any, optimizer: Any, strategy: Any, config: TrainingConfig, *, distributed: bool) -> Any:
    """The graph that runs ``count`` steps, reading the iterator inside; returns per-step losses, sums, input wait."""
    import tensorflow as tf

    @tf.function(jit_compile=config.xla)
    def gradients(features: Any, labels: Any) -> Any:
        with tf.GradientTape() as tape:
            logits = model(features, training=True)
            per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
            # Divide by the global batch, not the replica's: the all-reduce sums gradients.
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=config.batch_size)
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, model.trainable_variables)
        return grads, per_example, logits

    def replica_step(features: Any, labels: Any, stop_vote: Any, save_vote: Any) -> Any:
        # Raw-record batches arrive uncropped with their boxes: crop on this replica's device,
        # outside the XLA cluster (CropAndResize has no XLA kernel).
        features = images.apply_crops(features, config.image_size)
        grads, per_example, logits = gradients(features, labels)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), labels), tf.float32))
        count = tf.cast(tf.shape(labels)[0], tf.float32)
        return tf.stack([tf.reduce_sum(per_example), correct, count, stop_vote, save_vote])

    @tf.function
    def run_steps(iterator: Any, count: Any, stop_vote: Any, save_vote: Any) -> Any:
        losses = tf.TensorArray(tf.float32, size=count)
        totals = tf.zeros([5])
        waited = tf.zeros([], tf.float64)
        for index in tf.range(count):
            features, labels, wait = _timed_next(iterator, after=totals)
            waited += wait
            if distributed:
                # One small all-reduce carries the metrics and every worker's stop and checkpoint
                # votes, so all workers see the same loss, and stop or checkpoint at the same step.
                stats = strategy.reduce(
                    tf.distribute.ReduceOp.SUM,
                    strategy.run(replica_step, args=(features, labels, stop_vote, save_vote)),
                    axis=None,
                )
            else:
                stats = replica_step(features, labels, stop_vote, save_vote)
            losses = losses.write(index, stats[0] / stats[2])
            totals += stats
        return losses.stack(), totals, waited

    return run_steps


def _input_pipeline(
    config: TrainingConfig, spec: data.DatasetSpec, batching: _Batching, input_threads: int | None
) -> tuple[Any, bool]:
    """The per-pipeline dataset function ``(context, first_epoch, skip_steps) -> dataset`` and whether rows
    are cached. ``skip_steps``: steps of the first epoch applied before a stop mid-epoch; their batches
    are left out, so the epoch goes on with the batches it would have had next."""
    # Same decision on every worker (file sizes are the same everywhere), so all agree on the order.
    is_images = isinstance(spec, images.ImageDataset)
    plans = batching.plans
    cache = not is_images and max(data.plan_bytes(plan) for plan in plans) <= config.cache_max_mb * 2**20
    log("input", cache=cache, cache_max_mb=config.cache_max_mb, input_threads=input_threads or "shared",
        image_records=getattr(spec, "encoding", None))  # fmt: skip
    if not is_images:
        warning = data.label_order_warning(spec, shuffle_buffer=config.shuffle_buffer, cached=cache)
        if warning:
            log("WARNING", label_order=json.dumps(warning))
            print(f"WARNING: {warning}", file=sys.stderr, flush=True)

    def pipeline(context: Any | None, first_epoch: int, skip_steps: int = 0) -> Any:
        index = context.input_pipeline_id if context else 0
        # Every step takes one batch for each replica this pipeline feeds.
        skip = skip_steps * batching.replicas_per_pipeline
        if is_images:
            # Every epoch's decode/crop/flip pipeline, back to back, as make_epochs streams rows.
            epochs = [
                images.make_dataset(
                    spec,
                    training=True,
                    image_size=config.image_size,
                    per_replica_batch=batching.per_replica_batch,
                    batches=batching.steps * batching.replicas_per_pipeline,
                    pipeline_index=index,
                    num_pipelines=context.num_input_pipelines if context else 1,
                    shuffle_buffer=config.shuffle_buffer,
                    seed=config.seed,
                    epoch=epoch,
                    threads=input_threads,
                    crop_on_device=True,
                    skip_batches=skip if epoch == first_epoch else 0,
                )
                for epoch in range(first_epoch, config.epochs + 1)
            ]
            return functools.reduce(lambda first, second: first.concatenate(second), epochs)
        return data.make_epochs(
            spec,
            plans[index],
            cache=cache,
            first_epoch=first_epoch,
            first_epoch_skip=skip,
            last_epoch=config.epochs,
            pipeline_index=index,
            num_pipelines=context.num_input_pipelines if context else 1,
            per_replica_batch=batching.per_replica_batch,
            batches=batching.steps * batching.replicas_per_pipeline,
            shuffle_buffer=config.shuffle_buffer,
            seed=config.seed,
        )

    return pipeline, cache


def _train_epoch(
    run_steps: Any,
    iterator: Any,
    *,
    epoch: int,
    first_epoch: int,
    steps: int,
    config: TrainingConfig,
    spec: data.DatasetSpec,
    cluster: Cluster,
    stop: StopRequest,
    watch: DivergenceWatch,
    precision: str,
    sampler: Any,
    start_step: int = 0,
    periodic: Any = None,
) -> tuple[EpochMetrics, bool]:
    """Runs one epoch's steps from ``start_step``; returns its metrics and whether a stop (SIGTERM) came
    with its last call.

    A failed step becomes the error that names its cause (data, peer, NaN); a stop that arrives
    before the last call raises :class:`_StoppedMidEpoch` at once, for the caller to checkpoint
    the steps applied. One that arrives with the last call lets the epoch finish: all its steps
    are applied, and the caller checkpoints it before stopping. The metrics of an epoch resumed
    at ``start_step`` cover its remaining steps. ``periodic`` (:class:`_PeriodicCheckpoint`): each
    call carries this worker's vote that a checkpoint is due; when any worker's is, every worker
    checkpoints the steps applied after that call (not after the epoch's last: its own follows).
    """
    import tensorflow as tf

    totals = [0.0, 0.0, 0.0]
    waited = 0.0
    step = start_step
    if sampler is not None:
        sampler.take()  # the epoch's GPU figures cover its steps only
    started = time.perf_counter()
    while step < steps:
        count = min(config.steps_per_execution, steps - step)
        try:
            due = periodic is not None and periodic.due()
            losses, sums, wait = run_steps(
                iterator, tf.constant(count), tf.constant(1.0 if stop.requested else 0.0), tf.constant(1.0 if due else 0.0)
            )
            losses, sums = losses.numpy(), sums.numpy()
            waited += float(wait)
        except (tf.errors.OutOfRangeError, tf.errors.FailedPreconditionError) as err:
            if isinstance(err, tf.errors.FailedPreconditionError) and "expected to contain" not in str(err):
                raise _step_failure(err, epoch, step + 1, spec, None, cluster) from err
            raise DataError(
                f"Epoch {epoch} ended after fewer than {steps} steps: the files in {spec.directory} hold fewer "
                f"examples than counted ({spec.examples} per {manifest_or_scan(spec)}); they changed during "
                "training, or the manifest is wrong (rewrite it with python -m trainer.datasets.manifest)."
            ) from err
        except tf.errors.OpError as err:
            # Only errors a bad file raises are worth a walk over the files (after a failure only).
            data_like = (tf.errors.InvalidArgumentError, tf.errors.DataLossError, tf.errors.NotFoundError)
            if isinstance(spec, images.ImageDataset) and isinstance(err, data_like):
                raise images.explain_failure(spec, err, epoch=epoch, step=step + 1) from err
            problem = data.locate_problem(spec) if isinstance(err, data_like) else None
            raise _step_failure(err, epoch, step + 1, spec, problem, cluster) from err
        if step == start_step and epoch == first_epoch:
            # Start-up ends here: the benchmark times process start to this line.
            log("first-step", epoch=epoch, steps=count, loss=f"{float(losses[0]):.6f}")
        for offset, loss in enumerate(losses.tolist(), start=1):
            _check_loss(loss, watch, config, epoch, step + offset, steps, precision)
        step += count
        stop_voted = bool(sums[3] > 0)
        if stop_voted and step < steps:
            raise _StoppedMidEpoch(epoch, step)
        if periodic is not None and sums[4] > 0 and step < steps:
            periodic.save(epoch, step)
        totals = [t + float(v) for t, v in zip(totals, sums[:3], strict=True)]
    elapsed = time.perf_counter() - started
    usage = sampler.take() if sampler is not None else None
    metrics = EpochMetrics(
        epoch=epoch,
        loss=totals[0] / totals[2],
        accuracy=totals[1] / totals[2],
        examples_per_sec=totals[2] / elapsed,
        step_time_ms=1000.0 * elapsed / (steps - start_step),
        input_wait_pct=min(100.0, 100.0 * waited / elapsed),
        gpu_util_pct=usage.utilization_pct if usage else None,
        gpu_mem_mib=usage.memory_used_mib if usage else None,
    )
    return metrics, stop_voted


def _end_epoch(
    metrics: EpochMetrics,
    state: _Trainable,
    *,
    evaluate: Any,
    config: TrainingConfig,
    cluster: Cluster,
    writer: Any,
    force_checkpoint: bool = False,
) -> tuple[EpochMetrics, bool]:
    """Validates (keeping the best model), checkpoints, then prints the epoch; returns its metrics and whether to stop early.

    ``force_checkpoint``: save this epoch whatever ``checkpoint_every_epochs`` says (a stop
    arrived with its last step).
    """
    epoch = metrics.epoch
    stopped_early = False
    if state.sync_statistics is not None:
        # BatchNormalization's moving statistics are per replica (distribute.replica_local_statistics):
        # one mean for all before validation, the best model and the checkpoint read them.
        _sync_statistics(state, cluster, epoch)
    if evaluate is not None and (epoch % config.validation_every_epochs == 0 or epoch == config.epochs):
        val_loss, val_accuracy = evaluate()
        metrics = replace(metrics, val_loss=val_loss, val_accuracy=val_accuracy)
        if not math.isfinite(val_loss) and cluster.is_chief:
            # Never the best model (inf and NaN compare as no improvement); said, not left to a metric regex that skips it.
            log(
                "validation-not-finite",
                epoch=epoch,
                val_loss=val_loss,
                reason=json.dumps(
                    "the model's outputs on the validation channel overflow: a value out of range in the validation "
                    "data, or weights that diverged; this epoch is not kept as the best model"
                ),
            )
        if val_loss < float(state.best_val_loss.numpy()):
            state.best_val_loss.assign(val_loss)
            state.evals_since_best.assign(0)
            state.best_epoch.assign(epoch)
            if cluster.is_chief:
                _save_keras(state.model, state.best_path)
        else:
            state.evals_since_best.assign_add(1)
        stopped_early = bool(
            config.early_stopping_patience and int(state.evals_since_best.numpy()) >= config.early_stopping_patience
        )
    state.completed.assign(epoch)
    state.epoch_steps.assign(0)
    if force_checkpoint or epoch % config.checkpoint_every_epochs == 0 or epoch == config.epochs or stopped_early:
        state.save(cluster, epoch=epoch)
    # The metric line comes after the checkpoint, so a printed epoch is always resumable.
    loss_scale = precisions.loss_scale_state(state.optimizer)
    if loss_scale is not None:
        log("loss-scale", epoch=epoch, scale=f"{loss_scale['loss_scale']:g}", skipped_steps=loss_scale["skipped_steps"])
    if cluster.is_chief:
        emit(metrics)
        assert writer is not None
        _write_scalars(writer, metrics)
    if stopped_early:
        log(
            "early-stop",
            epoch=epoch,
            best_val_loss=f"{float(state.best_val_loss.numpy()):.6f}",
            patience=config.early_stopping_patience,
        )
    return metrics, stopped_early


def _sync_statistics(state: _Trainable, cluster: Cluster, epoch: int) -> None:
    """The all-reduce of the replicas' statistics; a peer lost in it is the named multi-host failure."""
    import tensorflow as tf

    try:
        state.sync_statistics()
    except tf.errors.OpError as err:
        if cluster.num_workers > 1:
            raise distribute.peer_failure(cluster, f"the end of epoch {epoch}'s statistics all-reduce", err) from err
        raise


def _epoch_plan(steps: int, config: TrainingConfig, cluster: Cluster, spec: Any) -> list[int]:
    """What a stop's applied steps are counted in: ``[steps per epoch, global batch, workers, training
    examples]``. A resume with any of them changed would leave out other examples than the steps took (with
    data sharded by example, 1 or 2 workers can make the same steps of another order)."""
    return [steps, config.batch_size, cluster.num_workers, int(spec.examples)]


def _checkpoint_mid_epoch(state: _Trainable, *, cluster: Cluster, epoch: int, step: int, plan: list[int]) -> str:
    """Checkpoints ``step`` applied steps of ``epoch`` (a collective: every worker calls it at the same step)."""
    if state.sync_statistics is not None:
        _sync_statistics(state, cluster, epoch)
    state.epoch_steps.assign(step)
    state.epoch_plan.assign(plan)
    return state.save(cluster, epoch=epoch - 1, epoch_steps=step)


@dataclass
class _PeriodicCheckpoint:
    """``checkpoint_every_minutes`` (made only when it is above 0): whether this worker votes for a checkpoint,
    and the checkpoint."""

    state: _Trainable
    minutes: float
    cluster: Cluster
    plan: list[int]

    def due(self) -> bool:
        return time.monotonic() - self.state.saved_at >= 60.0 * self.minutes

    def save(self, epoch: int, step: int) -> None:
        _checkpoint_mid_epoch(self.state, cluster=self.cluster, epoch=epoch, step=step, plan=self.plan)


class _StoppedMidEpoch(Exception):
    """A stop (SIGTERM) voted before the epoch's last call: ``step`` of its steps are applied."""

    def __init__(self, epoch: int, step: int) -> None:
        super().__init__(f"stopped in epoch {epoch} at step {step}")
        self.epoch = epoch
        self.step = step


def _stop_mid_epoch(
    stopped: _StoppedMidEpoch, state: _Trainable, *, cluster: Cluster, paths: Paths, plan: list[int]
) -> None:
    """Checkpoints the steps of the epoch applied before a stop, then raises TrainingInterrupted.

    A spot interruption or a stop leaves about 120 s; an epoch of a large dataset can take an
    hour, so the checkpoint keeps its steps (``epoch_steps``, with the optimizer's state): the
    restart resumes at the next step with the batches the epoch would have had next. Every
    worker gets here at the same step (the stop vote is all-reduced with the step's metrics), so
    the statistics all-reduce and the save, both collectives, meet.
    """
    epoch, step = stopped.epoch, stopped.step
    saved = _checkpoint_mid_epoch(state, cluster=cluster, epoch=epoch, step=step, plan=plan)
    raise TrainingInterrupted(
        f"Training stopped by SIGTERM in epoch {epoch} at step {step} of {plan[0]}, checkpointed ({saved}): a restart "
        f"with the checkpoint directory {paths.checkpoint_dir} resumes at step {step + 1}. Completed epochs: {epoch - 1}."
    ) from None


def _stop_after_last_step(
    metrics: EpochMetrics, state: _Trainable, *, config: TrainingConfig, cluster: Cluster, writer: Any, paths: Paths,
    steps: int,
) -> None:
    """Checkpoints an epoch whose last call carried the stop vote, then raises TrainingInterrupted.

    Every step of the epoch was applied, so redoing it after the restart would train on its
    batches twice. There is no time to validate within SIGTERM's grace period: the metric line
    has no ``val_loss``, and the log says the validation was skipped.
    """
    epoch = metrics.epoch
    if cluster.is_chief:
        log("sigterm-epoch-end", epoch=epoch, action="checkpointing the completed epoch without validation")
    _end_epoch(metrics, state, evaluate=None, config=config, cluster=cluster, writer=writer, force_checkpoint=True)
    raise TrainingInterrupted(
        f"Training stopped by SIGTERM at the end of epoch {epoch} (step {steps} of {steps}). Completed epochs: "
        f"{epoch} (checkpointed in {paths.checkpoint_dir}, not validated); a restart with the same checkpoint "
        "directory resumes from the last checkpoint."
    )


def _train_loop(
    *,
    config: TrainingConfig,
    spec: data.DatasetSpec,
    val_spec: data.DatasetSpec | None,
    strategy: Any,
    cluster: Cluster,
    paths: Paths,
    stop: StopRequest,
    precision: str,
    input_threads: int | None = None,
) -> tuple[TrainingResult, Any]:
    """Trains from the last checkpoint to ``config.epochs``; returns the result and the model.

    With one replica the step is a plain ``tf.function`` over a plain ``tf.data`` iterator,
    what ``keras.fit`` runs; only with several replicas does it go through ``strategy.run`` and a
    distributed dataset. Either way ``steps_per_execution`` steps run per call, with the
    iterator read inside the graph, and the per-step losses come back for the NaN and
    divergence checks.
    """
    import tensorflow as tf

    batching = _plan_batching(config, spec, strategy, cluster)
    steps = batching.steps
    state = _build_trainable(config, spec, strategy, steps=steps, precision=precision, paths=paths, cluster=cluster)
    run_steps = _step_function(state.model, state.optimizer, strategy, config, distributed=batching.distributed)
    pipeline, cache = _input_pipeline(config, spec, batching, input_threads)

    evaluate = _evaluator(state.model, val_spec, config, strategy) if val_spec is not None else None
    watch = DivergenceWatch(config.divergence_factor, config.divergence_steps, spec.num_classes)
    writer = tf.summary.create_file_writer(str(paths.tensorboard_dir)) if cluster.is_chief else None
    last_metrics = None
    stopped_early = (
        config.early_stopping_patience and int(state.evals_since_best.numpy()) >= config.early_stopping_patience
    )
    first_epoch = state.resumed_from + 1
    plan = _epoch_plan(steps, config, cluster, spec)
    skip_steps = _resumed_steps(state, config, cluster, first_epoch=first_epoch, plan=plan)
    if first_epoch <= config.epochs and not stopped_early:
        dataset = (
            strategy.distribute_datasets_from_function(lambda context: pipeline(context, first_epoch, skip_steps))
            if batching.distributed
            else pipeline(None, first_epoch, skip_steps)
        )
        iterator = iter(dataset)
    sampler = gpu_monitor.start()
    periodic = _PeriodicCheckpoint(state, config.checkpoint_every_minutes, cluster, plan) if config.checkpoint_every_minutes > 0 else None
    state.saved_at = time.monotonic()  # the minutes count from the first step's call, not from the build
    trained: list[EpochMetrics] = []
    for epoch in range(first_epoch, config.epochs + 1):
        if stopped_early:
            break
        try:
            metrics, stop_voted = _train_epoch(
                run_steps, iterator, epoch=epoch, first_epoch=first_epoch, steps=steps, config=config, spec=spec,
                cluster=cluster, stop=stop, watch=watch, precision=precision, sampler=sampler,
                start_step=skip_steps if epoch == first_epoch else 0, periodic=periodic,
            )  # fmt: skip
        except _StoppedMidEpoch as stopped:
            _stop_mid_epoch(stopped, state, cluster=cluster, paths=paths, plan=plan)
        if stop_voted:
            _stop_after_last_step(metrics, state, config=config, cluster=cluster, writer=writer, paths=paths, steps=steps)
        metrics, stopped_early = _end_epoch(metrics, state, evaluate=evaluate, config=config, cluster=cluster, writer=writer)
        last_metrics = metrics
        trained.append(metrics)

    if sampler is not None:
        sampler.stop()
    verdict = diagnosis.diagnose(trained, spec.data_format, cached=cache)
    if verdict and cluster.is_chief:
        diagnosis.emit(verdict)
    best_model = state.best_path if evaluate is not None and state.best_path.exists() else None
    result = TrainingResult(
        completed_epochs=int(state.completed.numpy()),
        resumed_from_epoch=state.resumed_from,
        last_metrics=last_metrics,
        weights_sha256=_weights_digest(state.model),
        best_model=best_model,
        best_epoch=(int(state.best_epoch.numpy()) or None) if best_model is not None else None,
        best_val_loss=float(state.best_val_loss.numpy()) if best_model is not None else None,
    )
    return result, state.model


def _resumed_steps(state: _Trainable, config: TrainingConfig, cluster: Cluster, *, first_epoch: int, plan: list[int]) -> int:
    """The steps of ``first_epoch`` a stop mid-epoch applied, to leave out; 0 where the epoch restarts.

    Counted in the stopped run's :func:`_epoch_plan`: with another batch size, worker count or
    amount of data the same number would leave out other examples, so the epoch is trained from
    its start again, saying so.
    """
    applied = int(state.epoch_steps.numpy())
    if not applied:
        return 0
    if first_epoch > config.epochs:
        warning = (
            f"the checkpoint holds {applied} steps of epoch {first_epoch}, beyond epochs={config.epochs}: the model "
            f"written has them (set epochs={first_epoch} or more to finish that epoch)"
        )
        if cluster.is_chief:
            log("WARNING", resume=json.dumps(warning))
            print(f"WARNING: {warning}", file=sys.stderr, flush=True)
        return 0
    counted_in = [int(v) for v in state.epoch_plan.numpy()]
    if counted_in != plan:
        if cluster.is_chief:
            def said(values: list[int]) -> str:
                return f"{values[0]}-steps-of-{values[1]}-on-{values[2]}-workers-over-{values[3]}-examples"

            log("resume-epoch-restarted", epoch=first_epoch, epoch_steps=applied, counted_in=said(counted_in), now=said(plan),
                reason=json.dumps("the batch size, the instance count or the data changed since the stop: the epoch "
                                  "is trained from its start"))  # fmt: skip
        return 0
    return applied


def _timed_next(iterator: Any, after: Any) -> tuple[Any, Any, Any]:
    """``next(iterator)`` in the step graph, and the seconds it waited (``input_wait``, trainer.train.metrics).

    The control dependencies pin the clock readings: the first after ``after`` (the previous
    step's results) and before the batch is requested, the second once the batch has arrived.
    """
    import tensorflow as tf

    with tf.control_dependencies([after]):
        start = tf.timestamp()
    with tf.control_dependencies([start]):
        features, labels = next(iterator)
    with tf.control_dependencies(tf.nest.flatten((features, labels), expand_composites=True)):
        end = tf.timestamp()
    return features, labels, end - start


def manifest_or_scan(spec: data.DatasetSpec) -> str:
    """Where the channel's counts came from, for messages."""
    from trainer.datasets.manifest import MANIFEST_NAME

    return MANIFEST_NAME if (spec.directory / MANIFEST_NAME).is_file() else "the scan"


def _check_loss(
    loss: float, watch: DivergenceWatch, config: TrainingConfig, epoch: int, step: int, steps: int, precision: str
) -> None:
    """Fails on a NaN/infinite loss; fails or warns on a loss that explodes (``on_divergence``)."""
    if not math.isfinite(loss):
        raise TrainingDivergedError(
            f"The loss became {loss} in epoch {epoch} at step {step} of {steps} "
            f"(learning_rate={config.learning_rate}, precision {precision}); training diverged and no model "
            "was written. Lower the learning rate or check the inputs for extreme values."
        )
    if watch.observe(loss):
        message = (
            f"The loss diverged: {loss:.4g} in epoch {epoch} at step {step} of {steps}, above "
            f"{config.divergence_factor:g}x its starting level {watch.reference:.4g} for {config.divergence_steps} "
            f"steps in a row (learning_rate={config.learning_rate}, optimizer {config.optimizer})."
        )
        if config.on_divergence == "fail":
            raise TrainingDivergedError(
                f"{message} No model was written. Lower the learning rate, or set on_divergence=warn or "
                "divergence_factor=0 to train on."
            )
        log("WARNING", divergence=json.dumps(message))
        print(f"WARNING: {message}", file=sys.stderr, flush=True)


def _discover_validation(env: TrainingEnvironment, config: TrainingConfig, spec: Any) -> Any:
    """The validation channel in the training channel's kind: pictures for an image channel, else rows."""
    if not isinstance(spec, images.ImageDataset):
        return data.discover_validation(env.paths, config, env.input_data_config, train_channel=spec.channel)
    channel = config.validation_channel
    if not channel or channel == spec.channel:
        return None
    if env.input_data_config and channel not in env.input_data_config:
        return None
    # Labels by class name: the training channel's classes, not the validation channel's own listing.
    val_spec = images.from_config(
        env.paths.channel_dir(channel), config, channel=channel, class_names=spec.class_names, training=False
    )
    if val_spec is None and env.paths.channel_dir(channel).is_dir():
        raise DataError(
            f"Validation channel {channel!r} ({env.paths.channel_dir(channel)}) holds no images, but the training "
            f"channel {spec.channel!r} does: give both the same kind of data."
        )
    if val_spec is not None and val_spec.num_classes != spec.num_classes:
        raise DataError(
            f"Validation channel {channel!r} has {val_spec.num_classes} classes, the training channel "
            f"{spec.channel!r} {spec.num_classes}: both must list the same classes."
        )
    if val_spec is not None:
        log("validation-data", channel=val_spec.channel, files=len(val_spec.files), examples=val_spec.examples)
    return val_spec


def _evaluator(model: Any, val_spec: Any, config: TrainingConfig, strategy: Any = None) -> Any:
    """``evaluate() -> (val_loss, val_accuracy)`` over the whole validation channel.

    Image channels with several replicas are evaluated on all of them: each worker's pipeline
    reads its own shards (as training does), each replica takes its part of every batch, and the
    sums are all-reduced, so a validation pass costs 1/replicas of one GPU's time. Feature rows
    are evaluated on one device per worker.
    """
    import tensorflow as tf

    replicas = strategy.num_replicas_in_sync if strategy is not None else 1
    sharded = isinstance(val_spec, images.ImageDataset) and replicas > 1

    def sums_of(features: Any, labels: Any) -> Any:
        logits = model(features, training=False)
        per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
        predicted = tf.argmax(logits, axis=-1, output_type=tf.int32)
        correct = tf.reduce_sum(tf.cast(tf.equal(predicted, labels), tf.float64))
        return tf.stack([tf.reduce_sum(tf.cast(per_example, tf.float64)), correct, tf.cast(tf.shape(labels)[0], tf.float64)])

    if sharded:
        per_replica = max(1, config.batch_size // replicas)

        def pipeline(context: Any) -> Any:
            # Every picture once over all pipelines, centre-cropped; batched per replica (the
            # distributed iterator deals them out; a short last round leaves some replicas empty).
            return images.make_dataset(
                val_spec, training=False, image_size=config.image_size,
                per_replica_batch=per_replica, batches=None, pipeline_index=context.input_pipeline_id, num_pipelines=context.num_input_pipelines,
            )  # fmt: skip

        dataset = strategy.distribute_datasets_from_function(pipeline)
    elif isinstance(val_spec, images.ImageDataset):
        # Every picture once, in order, centre-cropped; the last batch may be short.
        dataset = images.make_dataset(
            val_spec, training=False, image_size=config.image_size, per_replica_batch=config.batch_size, batches=None
        )
    else:
        dataset = data.make_eval_dataset(val_spec, config.batch_size)

    @tf.function
    def totals() -> Any:
        sums = tf.zeros([3], tf.float64)
        for features, labels in dataset:
            if sharded:
                sums += strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(sums_of, args=(features, labels)), axis=None)
            else:
                sums += sums_of(features, labels)
        return sums

    def evaluate() -> tuple[float, float]:
        try:
            loss_sum, correct, count = totals().numpy().tolist()
        except tf.errors.OpError as err:
            if isinstance(val_spec, images.ImageDataset):
                raise images.explain_failure(val_spec, err, epoch=0, step=0) from err
            problem = data.locate_problem(val_spec)
            if problem:
                raise DataError(f"{problem} (validation channel)") from err
            raise DataError(
                f"Reading validation channel {val_spec.channel!r} ({val_spec.directory}) failed: "
                f"{' '.join(str(getattr(err, 'message', err)).split())[:400]}"
            ) from err
        evaluate.examples = int(count)  # type: ignore[attr-defined]  # read by tests: every picture once
        return loss_sum / count, correct / count

    return evaluate


def _save_keras(model: Any, path: Path) -> None:
    """Saves atomically: a reader never finds a half-written file under ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".incomplete-{path.name}")
    model.save(str(partial))
    partial.replace(path)


def _write_scalars(writer: Any, metrics: EpochMetrics) -> None:
    """Writes the epoch's metrics as TensorBoard scalars (``train/*``, and ``validation/*`` when it evaluated).

    ``tf.summary.scalar`` lives in the tensorboard package, which TensorFlow 2.21 no longer
    depends on; the core ``tf.summary.write`` op with the scalars plugin's metadata produces the
    same events without it.
    """
    import tensorflow as tf
    from tensorflow.core.framework import summary_pb2

    metadata = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"),
        data_class=summary_pb2.DATA_CLASS_SCALAR,
    )
    with writer.as_default(step=metrics.epoch):
        for name in ("loss", "accuracy", "examples_per_sec", "step_time_ms"):
            tf.summary.write(f"train/{name}", tf.constant(getattr(metrics, name), tf.float32), metadata=metadata)
        # Only in epochs that evaluated the validation channel (as the metric line's val_ fields).
        for name in ("loss", "accuracy"):
            value = getattr(metrics, f"val_{name}")
            if value is not None:
                tf.summary.write(f"validation/{name}", tf.constant(value, tf.float32), metadata=metadata)
    writer.flush()


def _save_model(paths: Paths, model: Any, resolved: dict[str, Any], best_model: Path | None) -> None:
    """Writes the resolved config, then the models, each atomically, so a partial model is never taken as good.

    ``model.keras``, what serving loads, is the best-by-``val_loss`` model when there is one (a
    validation channel): the last epoch's can be ``early_stopping_patience`` evaluations past it.
    The last epoch's model is then ``last.keras``. Without validation ``model.keras`` is the last
    epoch's. Written last, so its presence means done.
    """
    paths.model_dir.mkdir(parents=True, exist_ok=True)
    (paths.model_dir / CONFIG_FILENAME).write_text(
        json.dumps(resolved, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    # No stale Keras file of an earlier run in this directory beside this run's (serving loads model.keras).
    for stale in (BEST_MODEL_FILENAME, LAST_MODEL_FILENAME):
        (paths.model_dir / stale).unlink(missing_ok=True)
    if best_model is None:
        _save_keras(model, paths.model_dir / MODEL_FILENAME)
        log("model-saved", path=paths.model_dir / MODEL_FILENAME, kind="last_epoch")
        return
    _save_keras(model, paths.model_dir / LAST_MODEL_FILENAME)
    log("model-saved", path=paths.model_dir / LAST_MODEL_FILENAME, kind="last_epoch")
    partial = paths.model_dir / f".incomplete-{MODEL_FILENAME}"
    shutil.copyfile(best_model, partial)
    partial.replace(paths.model_dir / MODEL_FILENAME)
    log("model-saved", path=paths.model_dir / MODEL_FILENAME, kind="best_val_loss", epoch=resolved["model"]["epoch"])
