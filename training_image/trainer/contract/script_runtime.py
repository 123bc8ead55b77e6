"""What a user's script reads, through :mod:`trainer.toolkit`, from the environment its runner gave it.

The script runner (``trainer.user_code.runner``) starts a user's script with the toolkit's
``SM_*`` variables, ``TF_CONFIG`` for a multi-host job, and a few of the image's own markers; a
script that calls ``trainer.toolkit`` reads them back here, once, into :class:`ScriptRuntime`.

Imports only the standard library and :mod:`trainer.contract.environment` (which the toolkit
imports anyway), so nothing more is loaded into the user's process.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from trainer.contract.environment import (
    ENV_EXPECTED_GPU_COUNT,
    ENV_INSTANCE_TYPE,
    Cluster,
    expected_gpu_count,
    float_or_nan,
    int_setting,
)
from trainer.contract.errors import ConfigError

ENV_TF_CONFIG = "TF_CONFIG"
ENV_NUM_GPUS = "SM_NUM_GPUS"
ENV_CURRENT_INSTANCE_TYPE = "SM_CURRENT_INSTANCE_TYPE"
ENV_LEGACY_KERAS = "TF_USE_LEGACY_KERAS"
# Set by the script runner: when the job started, so a script can log the time to its first step.
ENV_JOB_START = "TRAINER_JOB_START_TIME"


@dataclass(frozen=True)
class ScriptRuntime:
    """The job as a user's script sees it.

    Attributes:
        cluster: The workers of a multi-host job from ``TF_CONFIG`` (``cluster.worker`` and
            ``task.index``), or ``None`` for one host (no ``TF_CONFIG``, or one worker).
        gpu_count: GPUs this host must use: ``EXPECTED_GPU_COUNT`` if set, else ``SM_NUM_GPUS``
            (what the runner's GPU check verified), else 0.
        gpu_count_source: The variable ``gpu_count`` came from, for the GPU check's messages.
        instance_type: ``TRAINING_INSTANCE_TYPE``, else ``SM_CURRENT_INSTANCE_TYPE``, else ``None``.
        legacy_keras: ``TF_USE_LEGACY_KERAS=1``: the script uses Keras 2 (tf-keras).
        job_start_time: ``TRAINER_JOB_START_TIME`` (seconds since the epoch), or ``None``.
    """

    cluster: Cluster | None
    gpu_count: int
    gpu_count_source: str
    instance_type: str | None
    legacy_keras: bool
    job_start_time: float | None


def _cluster(env: Mapping[str, str]) -> Cluster | None:
    raw = env.get(ENV_TF_CONFIG, "").strip()
    if not raw:
        return None
    try:
        config = json.loads(raw)
        workers = tuple(str(worker) for worker in config.get("cluster", {}).get("worker") or ())
        index = int(config.get("task", {}).get("index", 0))
    except (ValueError, TypeError, AttributeError) as err:
        raise ConfigError(
            f"{ENV_TF_CONFIG} must be TensorFlow's cluster JSON ({{\"cluster\": {{\"worker\": [...]}}, "
            f"\"task\": {{\"index\": N}}}}), got {raw[:200]!r}: {err}."
        ) from None
    if len(workers) < 2:
        return None
    if not 0 <= index < len(workers):
        raise ConfigError(f"{ENV_TF_CONFIG}'s task.index {index} is not one of its {len(workers)} workers.")
    return Cluster(hosts=workers, current_host=workers[index], worker_port=0, source=ENV_TF_CONFIG)


def _job_start_time(env: Mapping[str, str]) -> float | None:
    raw = env.get(ENV_JOB_START, "").strip()
    if not raw:
        return None
    value = float_or_nan(raw)
    if not math.isfinite(value):
        raise ConfigError(f"{ENV_JOB_START} must be a time in seconds since the epoch (the script runner sets it), got {raw!r}.")
    return value


def script_runtime(env: Mapping[str, str] | None = None) -> ScriptRuntime:
    """Reads :class:`ScriptRuntime` from ``env`` (this process's environment by default).

    Raises:
        ConfigError: naming ``TF_CONFIG``, ``EXPECTED_GPU_COUNT``, ``SM_NUM_GPUS`` or
            ``TRAINER_JOB_START_TIME`` when it cannot be read.
    """
    env = os.environ if env is None else env
    expected = expected_gpu_count(env)
    if expected is None:
        count, source = int_setting(env, ENV_NUM_GPUS, 0, minimum=0), ENV_NUM_GPUS
    else:
        count, source = expected, ENV_EXPECTED_GPU_COUNT
    return ScriptRuntime(
        cluster=_cluster(env),
        gpu_count=count,
        gpu_count_source=source,
        instance_type=env.get(ENV_INSTANCE_TYPE) or env.get(ENV_CURRENT_INSTANCE_TYPE) or None,
        legacy_keras=env.get(ENV_LEGACY_KERAS) == "1",
        job_start_time=_job_start_time(env),
    )
