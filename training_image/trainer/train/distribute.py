"""Choosing the distribution strategy from what is there, and a rendezvous that cannot hang.

- one host, one device (a GPU, or the CPU when ``EXPECTED_GPU_COUNT=0``): OneDeviceStrategy;
- one host, several GPUs (or several logical CPUs in tests): MirroredStrategy;
- several hosts: MultiWorkerMirroredStrategy with TF_CONFIG built from the host list, the same
  code for SageMaker's resourceconfig.json and the EC2 cluster's TRAINING_HOSTS.

MultiWorkerMirroredStrategy blocks inside TensorFlow (holding the GIL) until every worker has
connected, so :func:`rendezvous_deadline` bounds it with a watchdog process that records a
failure naming the peers and ends the trainer.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from typing import Any

from trainer.contract.environment import ENV_HOSTS, ENV_RENDEZVOUS_TIMEOUT, ENV_WORKER_PORT, Cluster
from trainer.contract.environment import wait_for_dns  # noqa: F401 - shared with script mode; trainer.train.runner calls it here
from trainer.contract.errors import PeerFailedError, TrainerError
from trainer.gpu_check import DeviceInventory
from trainer.logs import log
from trainer.network_check import nccl_environment
from trainer.train.watchdog import Watchdog


def platform_hint(cluster: Cluster) -> str:
    """What to check, in the terms of the platform the host list came from."""
    port = cluster.worker_port
    if cluster.source == ENV_HOSTS:
        return (
            f"Check that the trainer started on every node with the same {ENV_HOSTS} order, that the workers' "
            f"port ({ENV_WORKER_PORT}, now {port}) is open between the nodes, and that no node failed earlier."
        )
    return (
        f"On SageMaker (hosts from {cluster.source}): check that every instance of the job started and did not "
        "fail earlier (each host has its own log stream, algo-1, algo-2, ...), and that the job's security group "
        f"allows traffic between its instances on port {port}."
    )


def rendezvous_failure_message(cluster: Cluster, timeout_seconds: float) -> str:
    """What to tell the operator when the workers did not all meet in time."""
    return (
        f"Rendezvous timed out after {timeout_seconds:g} s ({ENV_RENDEZVOUS_TIMEOUT}): worker "
        f"{cluster.worker_index} of {cluster.num_workers} ({cluster.addresses[cluster.worker_index]}) could not "
        f"complete the handshake with all of {', '.join(cluster.addresses)} (host list from {cluster.source}). "
        f"{platform_hint(cluster)}"
    )


def peer_failure(cluster: Cluster, phase: str, err: Exception) -> TrainerError:
    """The named failure of a multi-host collective whose peer went away (died, or was stopped)."""
    message = " ".join(str(getattr(err, "message", err)).split())[:300]
    return PeerFailedError(
        f"A peer of this {cluster.num_workers}-host job failed during {phase} ({type(err).__name__}): worker "
        f"{cluster.worker_index} ({cluster.addresses[cluster.worker_index]}) lost the collective with "
        f"{', '.join(a for i, a in enumerate(cluster.addresses) if i != cluster.worker_index)}. The first failure "
        f"is the other worker's: check its log. {platform_hint(cluster)} ({message})"
    )


@contextlib.contextmanager
def rendezvous_deadline(cluster: Cluster, timeout_seconds: float, refused_seconds: float | None = None) -> Iterator[float]:
    """Ends the process with a failure file if the body has not finished in ``timeout_seconds``.

    Yields the absolute ``time.monotonic()`` deadline. On a single host there is nobody to wait
    for, so no watchdog is started. A peer whose port refuses connections for
    ``refused_seconds`` ends the wait sooner (see :class:`trainer.train.watchdog.Watchdog`).
    """
    deadline = time.monotonic() + timeout_seconds
    if cluster.num_workers == 1:
        yield deadline
        return
    peers = [a for i, a in enumerate(cluster.addresses) if i != cluster.worker_index]
    watchdog = Watchdog(timeout_seconds, rendezvous_failure_message(cluster, timeout_seconds), peers, refused_seconds)
    try:
        yield deadline
    finally:
        watchdog.cancel()


def apply_nccl_environment(instance_type: str | None, num_workers: int, environ: Any = None) -> dict[str, str]:
    """Sets :func:`nccl_environment` in ``environ`` (default ``os.environ``) where the job did not; returns what it set.

    A variable the job sets itself (the stack's environment, a user's ``NCCL_DEBUG=INFO``) wins.
    """
    environ = os.environ if environ is None else environ
    applied = {}
    for name, value in nccl_environment(instance_type, num_workers).items():
        if name not in environ:
            environ[name] = value
            applied[name] = value
    if applied:
        # LD_LIBRARY_PATH is not among them: the loader reads it only at process start, so the image
        # sets it (Dockerfile ENV) and trainer.network_check proves NCCL's plugin loads with it.
        log("nccl-network", instance_type=instance_type, **{k.lower(): v for k, v in applied.items()})
    return applied


def create_strategy(cluster: Cluster, inventory: DeviceInventory, instance_type: str | None = None) -> Any:
    """Builds the strategy for this host; call inside :func:`rendezvous_deadline`.

    Several hosts of an EFA instance type get the NCCL/EFA environment first (:func:`apply_nccl_environment`).
    """
    import tensorflow as tf

    if cluster.num_workers > 1:
        if inventory.uses_gpus:
            apply_nccl_environment(instance_type, cluster.num_workers)
        os.environ["TF_CONFIG"] = json.dumps(cluster.tf_config())
        implementation = (
            tf.distribute.experimental.CommunicationImplementation.NCCL
            if inventory.uses_gpus
            else tf.distribute.experimental.CommunicationImplementation.AUTO
        )
        log(
            "rendezvous",
            worker=cluster.worker_index,
            workers=cluster.num_workers,
            addresses=",".join(cluster.addresses),
            source=repr(cluster.source),
        )
        strategy = tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=tf.distribute.experimental.CommunicationOptions(implementation=implementation)
        )
    elif inventory.uses_gpus and inventory.expected.count > 1:
        strategy = tf.distribute.MirroredStrategy([f"/gpu:{i}" for i in range(inventory.expected.count)])
    elif inventory.uses_gpus:
        strategy = tf.distribute.OneDeviceStrategy("/gpu:0")
    elif inventory.logical_cpu_devices > 1:
        strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(inventory.logical_cpu_devices)])
    else:
        strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
    log(
        "strategy",
        name=type(strategy).__name__,
        replicas=strategy.num_replicas_in_sync,
        worker=cluster.worker_index,
        workers=cluster.num_workers,
    )
    return strategy


def replica_local_statistics(model: Any) -> list[Any]:
    """The model's variables each replica updates on its own: non-trainable floats with no aggregation.

    Keras creates BatchNormalization's ``moving_mean`` and ``moving_variance`` with
    ``aggregation="none"`` (keras/src/layers/normalization/batch_normalization.py), and a
    MirroredVariable with ``VariableAggregation.NONE`` assigned in a replica context updates only
    that replica's copy (tensorflow/python/distribute/values.py, ``_on_write_update_replica``):
    each replica keeps the statistics of its own batches, and saving writes replica 0's.
    """
    return [
        v for v in model.non_trainable_variables
        if str(getattr(v, "aggregation", "none")).lower() in ("none", "variableaggregation.none")
        and "float" in str(v.dtype)
    ]  # fmt: skip


def statistics_sync(model: Any, strategy: Any) -> Any:
    """``sync()`` that sets every replica's copy of those variables to their mean over all replicas
    (all workers: it is a collective every worker must call); None when there is nothing to sync.

    Called before each validation and checkpoint, so validation, the saved models and every
    worker's weights use one set of statistics, the average of what the replicas saw.
    """
    import tensorflow as tf

    variables = replica_local_statistics(model)
    if strategy.num_replicas_in_sync == 1 or not variables:
        return None

    @tf.function
    def sync() -> None:
        def replica_fn() -> None:
            context = tf.distribute.get_replica_context()
            means = context.all_reduce(tf.distribute.ReduceOp.MEAN, [tf.identity(v.value) for v in variables])
            for variable, mean in zip(variables, means, strict=True):
                variable.assign(mean)  # aggregation none: each replica writes its own copy

        strategy.run(replica_fn)

    return sync
