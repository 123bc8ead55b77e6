"""The training run: checks, strategy, data, one custom training loop, checkpoints, model.

One custom loop (``strategy.run`` over ``distribute_datasets_from_function``) serves every
strategy: Keras 3 ``model.fit`` fails under MultiWorkerMirroredStrategy in TensorFlow 2.21, and
one loop keeps single-device, multi-GPU and multi-host behaviour identical.

Order matters: device configuration must precede TensorFlow's runtime start, and the strategy
must exist before the first op, so pure-Python checks (hyperparameters, the channel's files,
the expected GPU count) run first and fail fast, and the data scan runs after the rendezvous.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer import __version__, data, distribute, gpu_check, images, models
from trainer.config import TrainingConfig
from trainer.environment import Cluster, Paths, TrainingEnvironment
from trainer.errors import (
    CheckpointError,
    ConfigError,
    DataError,
    TrainerError,
    TrainingDivergedError,
    TrainingInterrupted,
)
from trainer.logs import log
from trainer.metrics import EpochMetrics, emit

MODEL_FILENAME = "model.keras"
CONFIG_FILENAME = "trainer_config.json"
KEEP_CHECKPOINTS = 3


class StopRequest:
    """Turns SIGTERM into a flag the loop checks after every step.

    SageMaker (job stop, spot interruption) and ``docker stop`` send SIGTERM and allow about
    120 s before SIGKILL. Stopping at a step boundary keeps the last completed epoch's
    checkpoint valid; a restart resumes from it. The handler is also what makes SIGTERM work at
    all when the trainer runs as PID 1 in a container, where default dispositions are ignored.
    """

    def __init__(self) -> None:
        self.requested = False

    def install(self) -> None:
        """(Re)installs the handler; MultiWorkerMirroredStrategy installs its own on creation."""
        signal.signal(signal.SIGTERM, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        self.requested = True
        log("sigterm", action="stopping at the next step; completed epochs stay checkpointed")


@dataclass(frozen=True)
class TrainingResult:
    """How a training loop ended.

    Attributes:
        completed_epochs: Epochs completed in total (equals ``epochs`` on success).
        resumed_from_epoch: Completed epochs restored from a checkpoint at the start (0 if none).
        last_metrics: Metrics of the last epoch this process trained, if it trained any.
        weights_sha256: Digest of the final weights; identical on every worker.
    """

    completed_epochs: int
    resumed_from_epoch: int
    last_metrics: EpochMetrics | None
    weights_sha256: str


def run(env: TrainingEnvironment) -> TrainingResult:
    """Runs one training job end to end; raises TrainerError subclasses with operator-facing text."""
    config = TrainingConfig.from_hyperparameters(env.hyperparameters)
    cluster = env.cluster
    log("config", **{k: json.dumps(v) for k, v in config.to_dict().items()})
    # Image channels (trainer.images) are counted without a scan; feature rows are scanned below.
    spec: Any = images.from_config(env.paths.channel_dir(config.train_channel), config, channel=config.train_channel)
    if spec is None:
        spec = data.discover_channel(env.paths, config, env.input_data_config)
    expectation = gpu_check.resolve_expectation(env.expected_gpu_count, config.expected_gpu_count, env.instance_type)
    inventory = gpu_check.inspect_devices(expectation, env.logical_cpu_devices)
    precision = gpu_check.choose_precision(config.mixed_precision, inventory)

    stop = StopRequest()
    stop.install()
    with distribute.rendezvous_deadline(cluster, env.rendezvous_timeout_seconds) as deadline:
        if cluster.num_workers > 1:
            distribute.wait_for_dns(cluster, deadline)
        strategy = distribute.create_strategy(cluster, inventory)
        stop.install()
        gpu_report = gpu_check.smoke_test(strategy, inventory)

    import keras

    keras.mixed_precision.set_dtype_policy(precision)
    keras.utils.set_random_seed(config.seed)
    if not isinstance(spec, images.ImageDataset):
        spec = data.scan_channel(spec, config.num_classes)
    log(
        "data",
        channel=spec.channel,
        format=spec.data_format,
        files=len(spec.files),
        examples=spec.examples,
        features=spec.num_features,
        classes=spec.num_classes,
    )
    result, model = _train_loop(
        config=config, spec=spec, strategy=strategy, cluster=cluster, paths=env.paths, stop=stop, precision=precision
    )
    if cluster.is_chief:
        resolved = _resolved_config(config, spec, strategy, cluster, precision, gpu_report, result)
        _save_model(env.paths, model, resolved)
    log(
        "finished",
        worker=cluster.worker_index,
        epochs=result.completed_epochs,
        resumed_from_epoch=result.resumed_from_epoch,
        weights_sha256=result.weights_sha256,
    )
    return result


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
    }


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


def _agree_on_resume(strategy: Any, restored_epoch: int, cluster: Cluster, paths: Paths) -> None:
    """Fails if workers restored different epochs (checkpoint storage not shared or synced)."""
    if cluster.num_workers == 1:
        return
    import tensorflow as tf

    @tf.function
    def gather() -> Any:
        def replica_fn() -> Any:
            mine = tf.constant([float(restored_epoch)])
            return tf.distribute.get_replica_context().all_gather(mine, axis=0)

        return strategy.run(replica_fn)

    seen = sorted({int(v) for v in strategy.experimental_local_results(gather())[0].numpy()})
    if len(seen) > 1:
        raise CheckpointError(
            f"Workers restored different checkpoints from {paths.checkpoint_dir} (completed epochs {seen}); "
            "every node must see the chief's checkpoints (SageMaker CheckpointConfig, or shared storage via "
            "CHECKPOINT_DIR on EC2). Clear the directory to start over."
        )


def _restore(checkpoint: Any, completed: Any, paths: Paths, config: TrainingConfig, spec: data.DatasetSpec) -> int:
    import tensorflow as tf

    latest = tf.train.latest_checkpoint(str(paths.checkpoint_dir))
    if latest is None:
        return 0
    try:
        checkpoint.restore(latest).assert_existing_objects_matched()
    except (AssertionError, ValueError, tf.errors.OpError) as err:
        raise CheckpointError(
            f"The checkpoint {latest} does not fit this model (model={config.model}, {spec.num_features} features, "
            f"{spec.num_classes} classes): {' '.join(str(err).split())[:300]}. Resume with the hyperparameters and "
            "data it was written with, or point CHECKPOINT_DIR at an empty directory."
        ) from err
    restored = int(completed.numpy())
    log("resume", checkpoint=latest, completed_epochs=restored, epochs=config.epochs)
    return restored


def _step_failure(err: Exception, epoch: int, step: int, spec: data.DatasetSpec) -> TrainerError:
    message = " ".join(str(getattr(err, "message", err)).split())[:400]
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


def _train_loop(
    *,
    config: TrainingConfig,
    spec: data.DatasetSpec,
    strategy: Any,
    cluster: Cluster,
    paths: Paths,
    stop: StopRequest,
    precision: str,
) -> tuple[TrainingResult, Any]:
    """Trains from the last checkpoint to ``config.epochs``; returns the result and the model."""
    import keras
    import tensorflow as tf

    replicas = strategy.num_replicas_in_sync
    if config.batch_size % replicas:
        raise ConfigError(
            f"hyperparameter 'batch_size' {config.batch_size} is the global batch and must be divisible by the "
            f"{replicas} replicas of this job ({cluster.num_workers} worker(s)); use a multiple of {replicas}."
        )
    num_pipelines = cluster.num_workers
    per_replica_batch = config.batch_size // replicas
    replicas_per_pipeline = replicas // num_pipelines
    if isinstance(spec, images.ImageDataset):
        plans: Any = (None,) * num_pipelines
        steps = images.steps_per_epoch(spec, config.batch_size)
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
        by_file=plans[0].by_file if plans[0] is not None else len(spec.files) >= num_pipelines,
        steps_per_epoch=steps,
        per_replica_batch=per_replica_batch,
    )

    with strategy.scope():
        model = models.build_model(config, spec.num_features, spec.num_classes)
        optimizer: Any = (
            keras.optimizers.SGD(learning_rate=config.learning_rate, momentum=0.9)
            if config.optimizer == "sgd"
            else keras.optimizers.Adam(learning_rate=config.learning_rate)
        )
        if precision == "mixed_float16":
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        optimizer.build(model.trainable_variables)
    log("model", name=config.model, parameters=models.parameter_count(model), precision=precision, xla=config.xla)

    completed = tf.Variable(0, dtype=tf.int64, trainable=False, name="completed_epochs")
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, completed_epochs=completed)
    resumed_from = _restore(checkpoint, completed, paths, config, spec)
    _agree_on_resume(strategy, resumed_from, cluster, paths)
    write_dir = _checkpoint_write_dir(paths, cluster)
    manager = tf.train.CheckpointManager(checkpoint, str(write_dir), max_to_keep=KEEP_CHECKPOINTS)

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

    def replica_step(features: Any, labels: Any, stop_vote: Any) -> Any:
        grads, per_example, logits = gradients(features, labels)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), labels), tf.float32))
        count = tf.cast(tf.shape(labels)[0], tf.float32)
        return tf.stack([tf.reduce_sum(per_example), correct, count, stop_vote])

    @tf.function
    def train_step(batch: Any, stop_vote: Any) -> Any:
        features, labels = batch
        stats = strategy.run(replica_step, args=(features, labels, stop_vote))
        # One small all-reduce carries the metrics and every worker's stop vote, so all
        # workers see the same loss and stop at the same step.
        return strategy.reduce(tf.distribute.ReduceOp.SUM, stats, axis=None)

    def dataset_fn(epoch: int) -> Any:
        def build(context: Any) -> Any:
            if isinstance(spec, images.ImageDataset):
                return images.make_dataset(
                    spec,
                    training=True,
                    image_size=config.image_size,
                    per_replica_batch=context.get_per_replica_batch_size(config.batch_size),
                    batches=steps * replicas_per_pipeline,
                    pipeline_index=context.input_pipeline_id,
                    num_pipelines=context.num_input_pipelines,
                    shuffle_buffer=config.shuffle_buffer,
                    seed=config.seed,
                    epoch=epoch,
                )
            return data.make_dataset(
                spec,
                plans[context.input_pipeline_id],
                pipeline_index=context.input_pipeline_id,
                num_pipelines=context.num_input_pipelines,
                per_replica_batch=context.get_per_replica_batch_size(config.batch_size),
                batches=steps * replicas_per_pipeline,
                shuffle_buffer=config.shuffle_buffer,
                seed=config.seed,
                epoch=epoch,
            )

        return build

    writer = tf.summary.create_file_writer(str(paths.tensorboard_dir)) if cluster.is_chief else None
    last_metrics = None
    for epoch in range(resumed_from + 1, config.epochs + 1):
        dataset = strategy.distribute_datasets_from_function(dataset_fn(epoch))
        totals = [0.0, 0.0, 0.0]
        step = 0
        started = time.perf_counter()
        iterator = iter(dataset)
        while True:
            try:
                batch = next(iterator)
            except StopIteration:
                break
            except tf.errors.OpError as err:
                raise _step_failure(err, epoch, step + 1, spec) from err
            step += 1
            try:
                loss_sum, correct, count, stop_votes = train_step(
                    batch, tf.constant(1.0 if stop.requested else 0.0)
                ).numpy()
            except tf.errors.OpError as err:
                raise _step_failure(err, epoch, step, spec) from err
            if not math.isfinite(loss_sum):
                raise TrainingDivergedError(
                    f"The loss became {loss_sum} in epoch {epoch} at step {step} of {steps} "
                    f"(learning_rate={config.learning_rate}, precision {precision}); training diverged and no model "
                    "was written. Lower the learning rate or check the inputs for extreme values."
                )
            if stop_votes > 0:
                raise TrainingInterrupted(
                    f"Training stopped by SIGTERM in epoch {epoch} at step {step} of {steps}. Completed epochs: "
                    f"{epoch - 1} (checkpointed in {paths.checkpoint_dir} every {config.checkpoint_every_epochs} "
                    "epoch(s)); a restart with the same checkpoint directory resumes from the last checkpoint."
                )
            totals[0] += float(loss_sum)
            totals[1] += float(correct)
            totals[2] += float(count)
        elapsed = time.perf_counter() - started
        if step != steps:
            raise DataError(
                f"Epoch {epoch} produced {step} steps instead of {steps}: the files in {spec.directory} changed "
                "during training."
            )
        metrics = EpochMetrics(
            epoch=epoch,
            loss=totals[0] / totals[2],
            accuracy=totals[1] / totals[2],
            examples_per_sec=totals[2] / elapsed,
            step_time_ms=1000.0 * elapsed / steps,
        )
        completed.assign(epoch)
        if epoch % config.checkpoint_every_epochs == 0 or epoch == config.epochs:
            saved = manager.save(checkpoint_number=epoch)
            if not cluster.is_chief:
                shutil.rmtree(write_dir, ignore_errors=True)
            else:
                log("checkpoint", path=saved, epoch=epoch)
        # The metric line comes after the checkpoint, so a printed epoch is always resumable.
        if cluster.is_chief:
            emit(metrics)
            assert writer is not None
            _write_scalars(writer, metrics)
        last_metrics = metrics

    result = TrainingResult(
        completed_epochs=int(completed.numpy()),
        resumed_from_epoch=resumed_from,
        last_metrics=last_metrics,
        weights_sha256=_weights_digest(model),
    )
    return result, model


def _write_scalars(writer: Any, metrics: EpochMetrics) -> None:
    """Writes the epoch's metrics as TensorBoard scalars.

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
    writer.flush()


def _save_model(paths: Paths, model: Any, resolved: dict[str, Any]) -> None:
    """Writes the resolved config, then the model atomically, so a partial model is never taken as good."""
    paths.model_dir.mkdir(parents=True, exist_ok=True)
    (paths.model_dir / CONFIG_FILENAME).write_text(
        json.dumps(resolved, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    partial = paths.model_dir / f".incomplete-{MODEL_FILENAME}"
    model.save(str(partial))
    partial.replace(paths.model_dir / MODEL_FILENAME)
    log("model-saved", path=paths.model_dir / MODEL_FILENAME)
