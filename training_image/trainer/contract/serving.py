"""What the serving mode reads from its environment, resolved and validated once (``serve`` calls :func:`load_settings`).

SageMaker hosting sets ``SAGEMAKER_BIND_TO_PORT`` (and ``SAGEMAKER_SAFE_PORT_RANGE``) when the
container must listen on another port than 8080; the stacks set ``EXPECTED_GPU_COUNT`` on the
Model. The ``SERVE_*`` variables tune batching and limits and have defaults that suit small
tabular models on one GPU. A few variables of AWS's TensorFlow serving container and inference
toolkit mean here what they mean there: ``SAGEMAKER_TFS_ENABLE_BATCHING``,
``SAGEMAKER_TFS_DEFAULT_MODEL_NAME`` and ``SAGEMAKER_MODEL_SERVER_TIMEOUT``. The container's
batching and timeout variables map onto the equivalent settings here
(``SAGEMAKER_TFS_MAX_BATCH_SIZE``, ``SAGEMAKER_TFS_BATCH_TIMEOUT_MICROS``,
``SAGEMAKER_TFS_MAX_ENQUEUED_BATCHES``, ``SAGEMAKER_NGINX_PROXY_READ_TIMEOUT_SECONDS``,
``SAGEMAKER_GUNICORN_TIMEOUT_SECONDS``); those of its processes this server has no equivalent of
(gunicorn workers, nginx's log level) are listed in :data:`WITHOUT_EFFECT` and logged once at
start-up. ``SAGEMAKER_MULTI_MODEL=true`` (a multi-model endpoint) stops ``serve``: this image
serves the models of one ``model.tar.gz``.

Batch transform starts the same ``serve`` with ``SAGEMAKER_BATCH=true`` and, for what the job set,
``SAGEMAKER_MAX_PAYLOAD_IN_MB``, ``SAGEMAKER_BATCH_STRATEGY`` and
``SAGEMAKER_MAX_CONCURRENT_TRANSFORMS`` ("Use Your Own Inference Code with Batch Transform" in
SageMaker's developer guide). What the job left unset, SageMaker asks the container for with
``GET /execution-parameters`` (the server's answer is built from these settings).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.contract.environment import ENV_INSTANCE_TYPE, expected_gpu_count, int_setting, resolve_paths, switch_setting
from trainer.contract.errors import ConfigError

DEFAULT_PORT = 8080
# SageMaker real-time endpoints accept request payloads up to 6 MB; larger bodies cannot be a
# legitimate invocation, so they are refused before they are read.
DEFAULT_MAX_REQUEST_BYTES = 6 * 1024 * 1024
DEFAULT_MAX_BATCH_SIZE = 64
DEFAULT_MAX_BATCH_DELAY_MS = 2.0
DEFAULT_MAX_QUEUED_REQUESTS = 2048
DEFAULT_MODEL_SERVER_TIMEOUT_S = 60
"""AWS's inference toolkit's default for ``SAGEMAKER_MODEL_SERVER_TIMEOUT`` (seconds)."""
OUTPUT_KINDS = ("auto", "logits", "probabilities")
MB = 1024 * 1024
"""One MB of ``MaxPayloadInMB``: the binary megabyte, the larger reading, so the server never refuses
a payload SageMaker sized to the limit."""
MAX_PAYLOAD_IN_MB = 100
"""The largest ``MaxPayloadInMB`` CreateTransformJob accepts; 0 there means no limit (HTTP chunked)."""
BATCH_STRATEGIES = ("MULTI_RECORD", "SINGLE_RECORD")
"""``SAGEMAKER_BATCH_STRATEGY``'s values (CreateTransformJob's ``MultiRecord`` and ``SingleRecord``)."""
AWS_NGINX_READ_TIMEOUT_S = 60
AWS_GUNICORN_TIMEOUT_S = 30
"""AWS's serving container's defaults for ``SAGEMAKER_NGINX_PROXY_READ_TIMEOUT_SECONDS`` and
``SAGEMAKER_GUNICORN_TIMEOUT_SECONDS`` (its ``serve.py``)."""
_ONE_PROCESS = "this server is one asyncio process with no gunicorn or nginx in front"
WITHOUT_EFFECT = {
    "SAGEMAKER_GUNICORN_WORKERS": f"{_ONE_PROCESS}; inference.py handlers run in 8 threads",
    "SAGEMAKER_GUNICORN_THREADS": f"{_ONE_PROCESS}; inference.py handlers run in 8 threads",
    "SAGEMAKER_GUNICORN_WORKER_CLASS": _ONE_PROCESS,
    "SAGEMAKER_GUNICORN_LOGLEVEL": f"{_ONE_PROCESS}; SERVE_ACCESS_LOG=off turns the request lines off",
    "SAGEMAKER_TFS_NGINX_LOGLEVEL": f"{_ONE_PROCESS}; SERVE_ACCESS_LOG=off turns the request lines off",
    "SAGEMAKER_TFS_NUM_BATCH_THREADS": "each model replica has one batching thread; SERVE_REPLICAS sets the replicas (default one per GPU)",
    "SAGEMAKER_TFS_INSTANCE_COUNT": "one process serves every GPU, one model replica per GPU (SERVE_REPLICAS)",
    "SAGEMAKER_TFS_FRACTIONAL_GPU_MEM_MARGIN": "one process serves every GPU, one model replica per GPU (SERVE_REPLICAS)",
    "SAGEMAKER_TFS_INTER_OP_PARALLELISM": "TensorFlow's own thread pools are used (TF_NUM_INTEROP_THREADS sets them)",
    "SAGEMAKER_TFS_INTRA_OP_PARALLELISM": "TensorFlow's own thread pools are used (TF_NUM_INTRAOP_THREADS sets them)",
    "SAGEMAKER_TFS_WAIT_TIME_SECONDS": "the model loads in this process; /ping answers 503 until it is ready",
}
"""AWS's serving container's variables with no equivalent here, and why: each one set is logged once
(``serve-setting-without-effect``), never silently dropped."""


@dataclass(frozen=True)
class ServeSettings:
    """Serving configuration.

    Attributes:
        host: Address to listen on (``SERVE_HOST``, default all interfaces, as SageMaker needs).
        port: TCP port: ``SAGEMAKER_BIND_TO_PORT``, else 8080.
        model_dir: Where the model is (``SM_MODEL_DIR``, else ``<SAGEMAKER_BASE_DIR>/model``, else
            ``/opt/ml/model``, where SageMaker extracts ``model.tar.gz``).
        expected_gpu_count: ``EXPECTED_GPU_COUNT`` if set; ``0`` serves on CPU on purpose.
        instance_type: ``TRAINING_INSTANCE_TYPE`` or ``SERVING_INSTANCE_TYPE``, the fallback for
            the expected GPU count (the GPU table).
        batching: ``SERVE_BATCHING`` = on|off (default on): whether the built-in classifier joins
            concurrent requests into one model call (its rows are independent, so a row's answer
            never depends on its neighbours); off runs every request as its own model call.
        tfs_batching: Whether any other model (served as TF Serving serves it) joins concurrent
            requests: ``SAGEMAKER_TFS_ENABLE_BATCHING`` = true|false (AWS's serving container's
            variable), else ``SERVE_BATCHING`` when set (the two must agree when both are), else off,
            as in AWS's container. Off by
            default because such a model's output may depend on the whole batch (softmax over
            the batch, batch norm in training mode): joined, one client's answer would depend on
            another's requests. A columnar (``"inputs"``) request is one batch already and is
            never joined with others.
        max_batch_size: ``SERVE_MAX_BATCH_SIZE``, else AWS's ``SAGEMAKER_TFS_MAX_BATCH_SIZE``
            (both set: they must agree): most rows one model call takes from queued requests (a
            single larger request still runs, alone).
        max_batch_delay_ms: ``SERVE_MAX_BATCH_DELAY_MS``, else AWS's
            ``SAGEMAKER_TFS_BATCH_TIMEOUT_MICROS`` / 1000: the longest the first request of a
            batch waits for company. Requests that arrive while the model runs wait anyway, so
            this only matters when the server is idle.
        max_queued_requests: ``SERVE_MAX_QUEUED_REQUESTS``, else AWS's
            ``SAGEMAKER_TFS_MAX_ENQUEUED_BATCHES`` x ``max_batch_size``: beyond this, requests get
            503 at once instead of waiting in an unbounded queue.
        max_request_bytes: The largest body served; larger bodies get 413, and 0 serves any size.
            ``SAGEMAKER_MAX_PAYLOAD_IN_MB`` MB when a transform job set it (0 for a job that
            streams with HTTP chunked encoding), else ``SERVE_MAX_REQUEST_BYTES``, else 6 MB,
            SageMaker's limit for one real-time invocation.
        replicas: ``SERVE_REPLICAS``: model replicas, each on its own device with its own batches.
            0 (default): one per GPU found, one on CPU. On CPU (``EXPECTED_GPU_COUNT=0``) a
            larger number splits the CPU into that many logical devices (tests).
        output: ``SERVE_MODEL_OUTPUT`` = auto|logits|probabilities: what the model returns.
            ``auto``: the trainer's models return logits; a Keras model ending in softmax or
            sigmoid returns probabilities; a SavedModel's rows are taken as probabilities when
            they are non-negative and sum to 1. Only the built-in classifier answers with classes
            and probabilities: with ``auto``, a model that is not the trainer's answers as TF
            Serving does; ``logits`` or ``probabilities`` serve any model as a classifier.
        model_name: ``SAGEMAKER_TFS_DEFAULT_MODEL_NAME``, else ``TFS_DEFAULT_MODEL_NAME`` (default
            ``model``): which model a request that names none gets. A SavedModel in a version
            folder is named after its folder (AWS's container names them so), and the variable
            must name one of them; unset, the first found is the default. A model outside a
            version folder (a Keras file, a root SavedModel) takes this name.
        model_name_variable: The variable that set ``model_name``; None when neither is set.
        default_accept: ``SAGEMAKER_DEFAULT_INVOCATIONS_ACCEPT`` (default ``application/json``):
            the ``accept`` an ``inference.py`` handler gets when the request names none or ``*/*``.
        default_content_type: the content type a handler gets when the request names none
            (``application/json``, as AWS's serving container assumes).
        warmup: ``SERVE_WARMUP`` = on|off (default on): call the model once per batch-size
            bucket before ``/ping`` turns healthy, so no request pays for a first call at a new
            size. ``off`` exists for the benchmark's baseline.
        batch_transform: ``SAGEMAKER_BATCH`` = true|false: SageMaker started this server for a
            batch transform job.
        max_payload_in_mb: ``SAGEMAKER_MAX_PAYLOAD_IN_MB`` (0..100) when set: the job's
            ``MaxPayloadInMB``, which sets ``max_request_bytes``.
        batch_strategy: ``SAGEMAKER_BATCH_STRATEGY`` = MULTI_RECORD|SINGLE_RECORD when set.
        max_concurrent_transforms: ``SAGEMAKER_MAX_CONCURRENT_TRANSFORMS`` when set (0 counts as
            unset, as in CreateTransformJob).
        request_timeout_s: ``SAGEMAKER_MODEL_SERVER_TIMEOUT`` (seconds, default 60, as in AWS's
            inference toolkit; 0: none; in a batch transform none unless set, the job's
            ``InvocationsTimeoutInSeconds`` bounds it): a request not answered by then gets 504.
            Unset, AWS's serving container's ``SAGEMAKER_NGINX_PROXY_READ_TIMEOUT_SECONDS``
            (default 60) and ``SAGEMAKER_GUNICORN_TIMEOUT_SECONDS`` (default 30) give it when
            either is set: the larger, as that container raises nginx's timeout to gunicorn's.
        without_effect: AWS's serving container's variables that are set and have no equivalent
            here (:data:`WITHOUT_EFFECT`), for the start-up log.
        access_log: ``SERVE_ACCESS_LOG`` = on|off (default on): one log line per request (a
            ``/ping`` answered 200 is not logged: SageMaker pings every few seconds).
    """

    host: str
    port: int
    model_dir: Path
    expected_gpu_count: int | None
    instance_type: str | None
    batching: bool
    max_batch_size: int
    max_batch_delay_ms: float
    max_queued_requests: int
    max_request_bytes: int
    output: str
    replicas: int = 0
    model_name: str = "model"
    default_accept: str = "application/json"
    default_content_type: str = "application/json"
    warmup: bool = True
    batch_transform: bool = False
    max_payload_in_mb: int | None = None
    batch_strategy: str | None = None
    max_concurrent_transforms: int | None = None
    tfs_batching: bool = False
    request_timeout_s: int = DEFAULT_MODEL_SERVER_TIMEOUT_S
    access_log: bool = True
    model_name_variable: str | None = None
    without_effect: tuple[str, ...] = ()

    @property
    def request_limit_setting(self) -> str:
        """The variable that sets ``max_request_bytes``, for the 413 answer and the log."""
        if self.max_payload_in_mb is not None:
            return f"SAGEMAKER_MAX_PAYLOAD_IN_MB={self.max_payload_in_mb}"
        return "SERVE_MAX_REQUEST_BYTES"

    @property
    def batch_buckets(self) -> tuple[int, ...]:
        """The batch sizes the model is called with: powers of two up to ``max_batch_size``, and it.

        On a GPU the built-in classifier pads every call up to the next bucket (a request larger
        than ``max_batch_size`` runs at its own size), so a warm-up of each bucket leaves no new
        shape for a request to meet: TF Serving's ``allowed_batch_sizes``, with its padding. On
        CPU, where a new shape costs nothing to speak of and padded rows cost compute, calls run
        at their own size.
        """
        sizes = {self.max_batch_size}
        size = 1
        while size < self.max_batch_size:
            sizes.add(size)
            size *= 2
        return tuple(sorted(sizes))


def load_settings(env: Mapping[str, str] | None = None) -> ServeSettings:
    """Reads the serving settings; raises ConfigError naming the variable."""
    env = os.environ if env is None else env
    _refuse_multi_model(env)
    delay = _batch_delay_ms(env)
    max_batch_size = _one_of(
        env, "SERVE_MAX_BATCH_SIZE", int_setting(env, "SERVE_MAX_BATCH_SIZE", DEFAULT_MAX_BATCH_SIZE, minimum=1, maximum=65536),
        "SAGEMAKER_TFS_MAX_BATCH_SIZE", lambda: int_setting(env, "SAGEMAKER_TFS_MAX_BATCH_SIZE", 0, minimum=1, maximum=65536),
    )
    max_queued = _one_of(
        env, "SERVE_MAX_QUEUED_REQUESTS", int_setting(env, "SERVE_MAX_QUEUED_REQUESTS", DEFAULT_MAX_QUEUED_REQUESTS, minimum=1),
        # TF Serving queues whole batches; this server queues requests, each up to a batch.
        "SAGEMAKER_TFS_MAX_ENQUEUED_BATCHES", lambda: int_setting(env, "SAGEMAKER_TFS_MAX_ENQUEUED_BATCHES", 0, minimum=1) * max_batch_size,
    )
    # Read only to refuse a bad value as TF Serving would; it has no equivalent (WITHOUT_EFFECT).
    int_setting(env, "SAGEMAKER_TFS_NUM_BATCH_THREADS", 1, minimum=1)
    model_name, model_name_variable = _model_name(env)
    output = env.get("SERVE_MODEL_OUTPUT", "auto").strip().lower() or "auto"
    if output not in OUTPUT_KINDS:
        raise ConfigError(f"SERVE_MODEL_OUTPUT must be one of {', '.join(OUTPUT_KINDS)}, got {output!r}.")
    payload_mb = _max_payload_in_mb(env)
    request_bytes = int_setting(env, "SERVE_MAX_REQUEST_BYTES", DEFAULT_MAX_REQUEST_BYTES, minimum=1024)
    return ServeSettings(
        host=env.get("SERVE_HOST", "").strip() or "0.0.0.0",  # nosec B104 - SageMaker connects from outside the container
        port=int_setting(env, "SAGEMAKER_BIND_TO_PORT", DEFAULT_PORT, minimum=1, maximum=65535),
        model_dir=resolve_paths(env).model_dir,
        expected_gpu_count=expected_gpu_count(env),
        instance_type=(env.get(ENV_INSTANCE_TYPE) or env.get("SERVING_INSTANCE_TYPE") or "").strip() or None,
        batching=switch_setting(env, "SERVE_BATCHING", default=True),
        tfs_batching=_tfs_batching(env),
        max_batch_size=max_batch_size,
        max_batch_delay_ms=delay,
        max_queued_requests=max_queued,
        # The job's MaxPayloadInMB wins: SageMaker sends payloads up to it, whatever the model's own limit.
        max_request_bytes=request_bytes if payload_mb is None else payload_mb * MB,
        output=output,
        replicas=int_setting(env, "SERVE_REPLICAS", 0, minimum=0, maximum=64),
        model_name=model_name,
        model_name_variable=model_name_variable,
        default_accept=env.get("SAGEMAKER_DEFAULT_INVOCATIONS_ACCEPT", "").strip() or "application/json",
        warmup=switch_setting(env, "SERVE_WARMUP", default=True),
        batch_transform=_batch_transform(env),
        max_payload_in_mb=payload_mb,
        batch_strategy=_batch_strategy(env),
        max_concurrent_transforms=int_setting(env, "SAGEMAKER_MAX_CONCURRENT_TRANSFORMS", 0, minimum=0) or None,
        request_timeout_s=_request_timeout(env),
        access_log=switch_setting(env, "SERVE_ACCESS_LOG", default=True),
        without_effect=tuple(name for name in WITHOUT_EFFECT if env.get(name, "").strip()),
    )


def _refuse_multi_model(env: Mapping[str, str]) -> None:
    """``SAGEMAKER_MULTI_MODEL``: AWS's container's switch for a multi-model endpoint, which this image does not serve."""
    raw = env.get("SAGEMAKER_MULTI_MODEL", "").strip().lower()
    if raw and raw not in ("true", "false"):
        raise ConfigError(f"SAGEMAKER_MULTI_MODEL must be true or false, got {raw!r}.")
    if raw == "true":
        raise ConfigError(
            "SAGEMAKER_MULTI_MODEL=true: multi-model endpoints (models loaded from S3 on demand through /models) are not "
            "served by this image. Deploy one model per endpoint, or pack several models into one model.tar.gz "
            "(<name>/1/saved_model.pb each) and pick one per request with tfs-model-name=<name>; "
            "unset SAGEMAKER_MULTI_MODEL (or set it to false)."
        )


def _batch_delay_ms(env: Mapping[str, str]) -> float:
    """``SERVE_MAX_BATCH_DELAY_MS``, else AWS's ``SAGEMAKER_TFS_BATCH_TIMEOUT_MICROS`` in ms; both set, they must agree."""
    raw_delay = env.get("SERVE_MAX_BATCH_DELAY_MS", "").strip()
    try:
        delay = float(raw_delay) if raw_delay else DEFAULT_MAX_BATCH_DELAY_MS
    except ValueError:
        raise ConfigError(f"SERVE_MAX_BATCH_DELAY_MS must be a number of milliseconds, got {raw_delay!r}.") from None
    if not 0 <= delay <= 1000:
        raise ConfigError(f"SERVE_MAX_BATCH_DELAY_MS must be between 0 and 1000, got {raw_delay!r}.")
    return _one_of(
        env, "SERVE_MAX_BATCH_DELAY_MS", delay,
        "SAGEMAKER_TFS_BATCH_TIMEOUT_MICROS", lambda: int_setting(env, "SAGEMAKER_TFS_BATCH_TIMEOUT_MICROS", 0, minimum=0, maximum=1_000_000) / 1000.0,
    )  # fmt: skip


def _one_of(env: Mapping[str, str], ours: str, value: Any, theirs: str, read_theirs: Callable[[], Any]) -> Any:
    """Our variable's ``value``, else AWS's equivalent variable's (read and checked by ``read_theirs``).

    Both set must agree, as ``SAGEMAKER_TFS_ENABLE_BATCHING`` and ``SERVE_BATCHING`` must: one of
    them would otherwise be dropped without a word.
    """
    if not env.get(theirs, "").strip():
        return value
    other = read_theirs()
    if env.get(ours, "").strip() and other != value:
        raise ConfigError(f"{ours}={env[ours].strip()} and {theirs}={env[theirs].strip()} disagree; set one of them.")
    return other


def _request_timeout(env: Mapping[str, str]) -> int:
    """``SAGEMAKER_MODEL_SERVER_TIMEOUT``, else AWS's serving container's nginx/gunicorn timeouts when set, else the default."""
    if env.get("SAGEMAKER_MODEL_SERVER_TIMEOUT", "").strip():
        return int_setting(env, "SAGEMAKER_MODEL_SERVER_TIMEOUT", DEFAULT_MODEL_SERVER_TIMEOUT_S, minimum=0)
    nginx = int_setting(env, "SAGEMAKER_NGINX_PROXY_READ_TIMEOUT_SECONDS", AWS_NGINX_READ_TIMEOUT_S, minimum=1)
    gunicorn = int_setting(env, "SAGEMAKER_GUNICORN_TIMEOUT_SECONDS", AWS_GUNICORN_TIMEOUT_S, minimum=1)
    if any(env.get(name, "").strip() for name in ("SAGEMAKER_NGINX_PROXY_READ_TIMEOUT_SECONDS", "SAGEMAKER_GUNICORN_TIMEOUT_SECONDS")):
        # serve.py raises nginx's proxy_read_timeout to gunicorn's timeout when that is larger.
        return max(nginx, gunicorn)
    # Batch transform's own bound is the job's InvocationsTimeoutInSeconds (600 s by default), and one
    # request may carry 100 MB: no bound of ours unless the job sets one.
    return 0 if _batch_transform(env) else DEFAULT_MODEL_SERVER_TIMEOUT_S


def _tfs_batching(env: Mapping[str, str]) -> bool:
    """Batching for models served as TF Serving serves them: opt-in, as in AWS's serving container."""
    raw = env.get("SAGEMAKER_TFS_ENABLE_BATCHING", "").strip().lower()
    if raw and raw not in ("true", "false"):
        raise ConfigError(f"SAGEMAKER_TFS_ENABLE_BATCHING must be true or false, got {raw!r}.")
    explicit = env.get("SERVE_BATCHING", "").strip()
    serve_batching = switch_setting(env, "SERVE_BATCHING", default=False)
    if raw and explicit and (raw == "true") != serve_batching:
        raise ConfigError(
            f"SAGEMAKER_TFS_ENABLE_BATCHING={raw} and SERVE_BATCHING={explicit} disagree; set one of them."
        )
    return raw == "true" if raw else serve_batching


def _max_payload_in_mb(env: Mapping[str, str]) -> int | None:
    """``SAGEMAKER_MAX_PAYLOAD_IN_MB``: None when unset, else a whole number of MB in 0..100."""
    raw = env.get("SAGEMAKER_MAX_PAYLOAD_IN_MB", "").strip()
    if not raw:
        return None
    value = int(raw) if raw.isascii() and raw.isdigit() else -1
    if not 0 <= value <= MAX_PAYLOAD_IN_MB:
        raise ConfigError(
            f"SAGEMAKER_MAX_PAYLOAD_IN_MB must be a whole number of MB from 0 to {MAX_PAYLOAD_IN_MB} "
            f"(the transform job's MaxPayloadInMB; 0: no limit), got {raw!r}."
        )
    return value


def _batch_strategy(env: Mapping[str, str]) -> str | None:
    raw = env.get("SAGEMAKER_BATCH_STRATEGY", "").strip()
    if not raw:
        return None
    if raw.upper() not in BATCH_STRATEGIES:
        raise ConfigError(f"SAGEMAKER_BATCH_STRATEGY must be {' or '.join(BATCH_STRATEGIES)}, got {raw!r}.")
    return raw.upper()


def _batch_transform(env: Mapping[str, str]) -> bool:
    # SageMaker sets "true"; the SageMaker SDK's local mode sets "True".
    raw = env.get("SAGEMAKER_BATCH", "").strip().lower() or "false"
    if raw not in ("true", "false"):
        raise ConfigError(f"SAGEMAKER_BATCH must be true or false, got {raw!r}.")
    return raw == "true"


def _model_name(env: Mapping[str, str]) -> tuple[str, str | None]:
    """The default model's name and the variable that gave it (None: unset, ``model``)."""
    # AWS's container reads SAGEMAKER_TFS_DEFAULT_MODEL_NAME and hands it to TF Serving's side as TFS_DEFAULT_MODEL_NAME.
    for variable in ("SAGEMAKER_TFS_DEFAULT_MODEL_NAME", "TFS_DEFAULT_MODEL_NAME"):
        name = env.get(variable, "").strip()
        if name:
            if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
                raise ConfigError(f"{variable} must be letters, digits, '_', '.' or '-', got {name!r}.")
            return name, variable
    return "model", None
