"""The container contract: where things are and who the other workers are.

One small module, in the spirit of the SageMaker training toolkit's ``environment.py``: every
path and environment variable the trainer reads is resolved here, with fallbacks, so the same
image runs as a SageMaker training job, with ``docker run --gpus all`` on an EC2 GPU node, and in
tests (``SAGEMAKER_BASE_DIR`` points at a temporary directory).

Nothing here imports TensorFlow: the paths must resolve even when TensorFlow is broken, because
the failure file has to be written somewhere.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import socket
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.contract.errors import ConfigError, GpuCheckError, RendezvousError, TrainerError

DEFAULT_BASE_DIR = "/opt/ml"
# SageMaker syncs this local path to the job's CheckpointConfig S3 URI (and back on restart).
DEFAULT_CHECKPOINT_DIR = "/opt/ml/checkpoints"
# The port TensorFlow examples use for gRPC workers; any free port works if every node agrees.
DEFAULT_WORKER_PORT = 2222
DEFAULT_RENDEZVOUS_TIMEOUT_SECONDS = 600.0
# A peer whose port refuses connections this long is up but has no trainer: fail before the timeout.
DEFAULT_RENDEZVOUS_REFUSED_SECONDS = 120.0

ENV_BASE_DIR = "SAGEMAKER_BASE_DIR"
ENV_CHECKPOINT_DIR = "CHECKPOINT_DIR"
# Set by the platform's tuning jobs: every trial shares the tuning job's CheckpointConfig prefix, so
# each keeps its checkpoints under its own name there, and never resumes from a sibling trial's.
ENV_CHECKPOINT_PER_JOB = "CHECKPOINT_PER_JOB"
ENV_EXPECTED_GPU_COUNT = "EXPECTED_GPU_COUNT"
ENV_HOSTS = "TRAINING_HOSTS"
ENV_CURRENT_HOST = "TRAINING_CURRENT_HOST"
ENV_WORKER_PORT = "TRAINING_WORKER_PORT"
ENV_RENDEZVOUS_TIMEOUT = "RENDEZVOUS_TIMEOUT_SECONDS"
ENV_RENDEZVOUS_REFUSED = "RENDEZVOUS_REFUSED_SECONDS"
ENV_INSTANCE_TYPE = "TRAINING_INSTANCE_TYPE"
ENV_LOGICAL_CPU_DEVICES = "TRAINER_LOGICAL_CPU_DEVICES"
ENV_GPU_CHECK_TIMEOUT = "GPU_CHECK_TIMEOUT_SECONDS"
# Generous: the first CUDA call on a p5 initialises 8 GPUs and may JIT PTX; a healthy check takes seconds.
DEFAULT_GPU_CHECK_TIMEOUT_SECONDS = 300.0
ENV_SCRIPT_STOP_GRACE = "SCRIPT_STOP_GRACE_SECONDS"
# SageMaker sends SIGKILL 120 s after SIGTERM; the rest is for uploading what the script wrote.
DEFAULT_SCRIPT_STOP_GRACE_SECONDS = 100.0
MAX_SCRIPT_STOP_GRACE_SECONDS = 115.0
ENV_PIP_INDEX_URL = "PIP_INDEX_URL"
ENV_LEGACY_KERAS = "TF_USE_LEGACY_KERAS"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")
ENV_PROGRAM = "SAGEMAKER_PROGRAM"
ENV_SUBMIT_DIRECTORY = "SAGEMAKER_SUBMIT_DIRECTORY"
ENV_TRAINING_MODULE = "SAGEMAKER_TRAINING_MODULE"
ENV_JOB_NAME = "TRAINING_JOB_NAME"
# What a user's script may be, as AWS's training toolkit runs it: a Python file (through the
# launcher), a shell script, or any other file as a command (under its #! line). A notebook is not one.
SCRIPT_SUFFIXES = (".py", ".sh")
NOTEBOOK_SUFFIX = ".ipynb"


def notebook_refusal(program: str, what: str) -> str:
    """The one line that refuses a Jupyter notebook as the entry point."""
    return (
        f"The {what} {program!r} is a Jupyter notebook, which cannot run as a script: export it "
        f"(jupyter nbconvert --to script {program}) and name the .py file as the entry point."
    )


@dataclass(frozen=True)
class Paths:
    """Filesystem layout of one training run.

    Attributes:
        base_dir: Root of the SageMaker layout (``/opt/ml`` or ``SAGEMAKER_BASE_DIR``).
        hyperparameters_file: ``input/config/hyperparameters.json`` (all values strings).
        resource_config_file: ``input/config/resourceconfig.json`` (current_host, hosts).
        input_data_config_file: ``input/config/inputdataconfig.json`` (declared channels).
        data_dir: Parent of the channel directories, ``input/data``.
        model_dir: Where the chief writes ``model.keras`` and the resolved config
            (``SM_MODEL_DIR`` overrides).
        output_dir: ``output/``; holds ``failure`` (``SM_OUTPUT_DIR`` overrides).
        tensorboard_dir: TensorBoard event files, ``output/tensorboard`` (the path SageMaker's
            TensorBoardOutputConfig uploads by default).
        checkpoint_dir: Periodic checkpoints. ``CHECKPOINT_DIR`` if set, else
            ``<SAGEMAKER_BASE_DIR>/checkpoints`` if that is set, else ``/opt/ml/checkpoints``; with
            ``CHECKPOINT_PER_JOB`` true (a tuning job's trials), its ``<TRAINING_JOB_NAME>``
            subdirectory.
    """

    base_dir: Path
    hyperparameters_file: Path
    resource_config_file: Path
    input_data_config_file: Path
    data_dir: Path
    model_dir: Path
    output_dir: Path
    tensorboard_dir: Path
    checkpoint_dir: Path

    @property
    def failure_file(self) -> Path:
        """``output/failure``: the one-paragraph reason SageMaker reports for a failed job."""
        return self.output_dir / "failure"

    def channel_dir(self, channel: str, env: Mapping[str, str] | None = None) -> Path:
        """Directory of an input channel: ``SM_CHANNEL_<NAME>`` if set, else ``input/data/<name>``."""
        env = os.environ if env is None else env
        override = env.get(f"SM_CHANNEL_{channel.upper()}")
        return Path(override) if override else self.data_dir / channel


def resolve_paths(env: Mapping[str, str] | None = None) -> Paths:
    """Resolves the layout from the environment; never raises, so a failure can always be recorded."""
    env = os.environ if env is None else env
    base_override = env.get(ENV_BASE_DIR)
    base = Path(base_override or DEFAULT_BASE_DIR)
    config_dir = base / "input" / "config"
    output_dir = Path(env.get("SM_OUTPUT_DIR") or base / "output")
    if env.get(ENV_CHECKPOINT_DIR):
        checkpoint_dir = Path(env[ENV_CHECKPOINT_DIR])
    elif base_override:
        # Keeps tests and local runs inside their own directory instead of /opt/ml.
        checkpoint_dir = base / "checkpoints"
    else:
        checkpoint_dir = Path(DEFAULT_CHECKPOINT_DIR)
    if env.get(ENV_CHECKPOINT_PER_JOB, "").strip().lower() in _TRUE and env.get(ENV_JOB_NAME):
        checkpoint_dir = checkpoint_dir / Path(env[ENV_JOB_NAME]).name
    return Paths(
        base_dir=base,
        hyperparameters_file=config_dir / "hyperparameters.json",
        resource_config_file=config_dir / "resourceconfig.json",
        input_data_config_file=config_dir / "inputdataconfig.json",
        data_dir=base / "input" / "data",
        model_dir=Path(env.get("SM_MODEL_DIR") or base / "model"),
        output_dir=output_dir,
        tensorboard_dir=output_dir / "tensorboard",
        checkpoint_dir=checkpoint_dir,
    )


@dataclass(frozen=True)
class Cluster:
    """The hosts of a training job and which one this process is.

    Attributes:
        hosts: Every host in the job, in the same order on every node. An entry may carry its
            own port (``10.0.0.5:2345``); otherwise ``worker_port`` applies.
        current_host: This node's entry in ``hosts``.
        worker_port: gRPC port for entries without one (``TRAINING_WORKER_PORT``, default 2222).
        source: Where the host list came from, for logs and error messages.
    """

    hosts: tuple[str, ...]
    current_host: str
    worker_port: int
    source: str

    @property
    def num_workers(self) -> int:
        """Number of hosts (TensorFlow workers)."""
        return len(self.hosts)

    @property
    def worker_index(self) -> int:
        """This host's position in ``hosts``; worker 0 is the chief."""
        return self.hosts.index(self.current_host)

    @property
    def is_chief(self) -> bool:
        """Whether this host writes the final model, checkpoints and TensorBoard logs."""
        return self.worker_index == 0

    @property
    def addresses(self) -> tuple[str, ...]:
        """``host:port`` of every worker, as TF_CONFIG lists them."""
        return tuple(host if _has_port(host) else f"{host}:{self.worker_port}" for host in self.hosts)

    def tf_config(self) -> dict[str, Any]:
        """The TF_CONFIG that MultiWorkerMirroredStrategy reads (worker 0 acts as chief)."""
        return {
            "cluster": {"worker": list(self.addresses)},
            "task": {"type": "worker", "index": self.worker_index},
        }


def wait_for_dns(cluster: Cluster, deadline: float, stopped: Callable[[], bool] | None = None) -> None:
    """Waits until every host name resolves; SageMaker's DNS entries can lag the container start.

    Every host is looked up again each second until all resolve (AWS's training toolkit does the
    same before it starts a script), up to ``deadline`` (``time.monotonic()``), or until
    ``stopped()`` says SIGTERM arrived.

    Raises:
        RendezvousError: a host name still did not resolve at the deadline, naming it.
    """
    pending = sorted({host.rpartition(":")[0] if _has_port(host) else host for host in cluster.hosts})
    while True:
        unresolved = []
        for host in pending:
            try:
                socket.getaddrinfo(host, None)
            except OSError:
                unresolved.append(host)
        if not unresolved or (stopped is not None and stopped()):
            return
        if time.monotonic() >= deadline:
            raise RendezvousError(
                f"Rendezvous failed: host name(s) {', '.join(unresolved)} from {cluster.source} did not "
                f"resolve within {ENV_RENDEZVOUS_TIMEOUT}; check the host list."
            )
        pending = unresolved
        time.sleep(1.0)


def _has_port(host: str) -> bool:
    head, sep, tail = host.rpartition(":")
    return bool(sep and head and tail.isdigit())


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path} is not valid JSON: {err}.") from err


def int_setting(env: Mapping[str, str], name: str, default: int, *, minimum: int, maximum: int | None = None) -> int:
    """A whole-number variable: ``default`` when unset or blank, else between ``minimum`` and ``maximum``.

    Raises:
        ConfigError: naming the variable and the range it must be in.
    """
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"Environment variable {name} must be an integer, got {raw!r}.") from None
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise ConfigError(f"Environment variable {name} must be {bound}, got {value}.")
    return value


def seconds_setting(
    env: Mapping[str, str],
    name: str,
    default: float,
    *,
    maximum: float | None = None,
    why: str = "",
    error: type[TrainerError] = ConfigError,
) -> float:
    """A duration in seconds: ``default`` when unset or blank, else a finite number > 0 (and <= ``maximum``).

    Args:
        env: The environment to read.
        name: The variable.
        default: Its value when unset or blank.
        maximum: The largest value allowed, if any; ``why`` says why, in the message.
        why: A reason for ``maximum`` (``SageMaker kills at 120 s``).
        error: What a bad value raises; ConfigError unless the failure belongs to one check (the GPU check).

    Raises:
        ConfigError: (or ``error``) naming the variable and what it must be.
    """
    raw = env.get(name, "").strip()
    if not raw:
        return default
    value = float_or_nan(raw)
    if maximum is not None:
        if not 0 < value <= maximum:
            reason = f" ({why})" if why else ""
            raise error(f"{name} must be in (0, {maximum:g}] seconds{reason}, got {raw!r}.")
    elif not 0 < value < math.inf:
        raise error(f"{name} must be a positive number of seconds, got {raw!r}.")
    return value


def float_or_nan(raw: str) -> float:
    """``raw`` as a number; NaN when it is not one, so the caller's range check refuses it in its own words."""
    try:
        return float(raw)
    except ValueError:
        return math.nan


def switch_setting(env: Mapping[str, str], name: str, default: bool) -> bool:
    """An ``on``/``off`` variable (any case); ``default`` when unset or blank.

    Raises:
        ConfigError: naming the variable when it is neither.
    """
    value = env.get(name, "").strip().lower() or ("on" if default else "off")
    if value not in ("on", "off"):
        raise ConfigError(f"{name} must be on or off, got {value!r}.")
    return value == "on"


def _worker_port(env: Mapping[str, str]) -> int | None:
    """``TRAINING_WORKER_PORT`` when set, else ``None``; ConfigError naming it when it is not a TCP port."""
    port = int_setting(env, ENV_WORKER_PORT, 0, minimum=1)
    if port > 65535:
        raise ConfigError(f"Environment variable {ENV_WORKER_PORT} must be a TCP port, got {port}.")
    return port or None


def expected_gpu_count(env: Mapping[str, str] | None = None) -> int | None:
    """``EXPECTED_GPU_COUNT``: GPUs per host the job must see, parsed here for every mode.

    Returns ``None`` when the variable is unset or blank (the GPU check then falls back to the
    hyperparameter or the instance table); ``0`` means CPU on purpose.

    Raises:
        ConfigError: naming ``EXPECTED_GPU_COUNT`` when it is not a whole number >= 0.
    """
    env = os.environ if env is None else env
    if not env.get(ENV_EXPECTED_GPU_COUNT, "").strip():
        return None
    return int_setting(env, ENV_EXPECTED_GPU_COUNT, 0, minimum=0)


def gpu_check_timeout_seconds(env: Mapping[str, str] | None = None) -> float:
    """``GPU_CHECK_TIMEOUT_SECONDS`` (default 300): the bound on each step of the GPU check.

    Read at each bounded step rather than once, so a test (or a wrapper) may change it between checks.

    Raises:
        GpuCheckError: naming the variable when it is not a positive, finite number: the check
            cannot run unbounded, and a bad bound fails the check as a hung device would.
    """
    env = os.environ if env is None else env
    return seconds_setting(env, ENV_GPU_CHECK_TIMEOUT, DEFAULT_GPU_CHECK_TIMEOUT_SECONDS, error=GpuCheckError)


def loader_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default ``os.environ``) with ``LD_LIBRARY_PATH`` as this process started with it.

    The dynamic loader reads ``LD_LIBRARY_PATH`` once, at process start: it is the path this
    process's ``dlopen`` (NCCL's, for its plugins) searches, whatever ``os.environ`` says now. Read
    from ``/proc/self/environ``, the block the process was started with; without procfs,
    ``environ`` as given.
    """
    env = dict(os.environ if environ is None else environ)
    try:
        started = Path("/proc/self/environ").read_bytes().split(b"\0")
    except OSError:
        return env
    env.pop("LD_LIBRARY_PATH", None)
    for entry in started:
        if entry.startswith(b"LD_LIBRARY_PATH="):
            env["LD_LIBRARY_PATH"] = entry.split(b"=", 1)[1].decode("utf-8", "replace")
    return env


def script_stop_grace_seconds(env: Mapping[str, str] | None = None) -> float:
    """``SCRIPT_STOP_GRACE_SECONDS`` (default 100): how long a user's script (or processor) may run on
    after SIGTERM before SIGKILL, in every mode that runs one.

    Raises:
        ConfigError: naming the variable when it is not in (0, 115] seconds (SageMaker kills at 120 s).
    """
    env = os.environ if env is None else env
    return seconds_setting(
        env,
        ENV_SCRIPT_STOP_GRACE,
        DEFAULT_SCRIPT_STOP_GRACE_SECONDS,
        maximum=MAX_SCRIPT_STOP_GRACE_SECONDS,
        why="SageMaker kills at 120 s",
    )


def pip_index_url(env: Mapping[str, str] | None = None) -> str | None:
    """``PIP_INDEX_URL``: the package index pip may use for a user's requirements, or ``None``.

    Unset or blank (the default, and what a job with network isolation has) means offline: pip
    installs only from the wheels shipped with the code. pip itself reads the variable from the
    environment it inherits; this says whether to let it.

    Raises:
        ConfigError: naming the variable when it is set but not an http(s):// or file:// URL.
    """
    env = os.environ if env is None else env
    url = env.get(ENV_PIP_INDEX_URL, "").strip()
    if not url:
        return None
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https", "file") or not (parts.netloc or parts.path):
        raise ConfigError(
            f"{ENV_PIP_INDEX_URL} must be a package index URL (https://host/simple), got {url!r}; "
            "unset it to install requirements offline from the wheels shipped with the code."
        )
    return url


@dataclass(frozen=True)
class ScriptVariables:
    """The platform's variables about a user's script, as SageMaker's framework images read them.

    Hyperparameters (``sagemaker_program``, ``sagemaker_submit_directory``) win over these where
    both exist; the variables serve images with the code baked in and processing jobs.

    Attributes:
        program: ``SAGEMAKER_PROGRAM``: the script to run (a ``.py`` or ``.sh`` file in the
            code, or another file with a ``#!`` line), or ``None`` when unset or blank.
        submit_directory: ``SAGEMAKER_SUBMIT_DIRECTORY``: where the code is, or ``None``.
        training_module: ``SAGEMAKER_TRAINING_MODULE``, passed on to the script as
            ``SM_FRAMEWORK_MODULE`` as it is; ``None`` when unset.
        job_name: ``TRAINING_JOB_NAME``, passed on in ``SM_TRAINING_ENV`` as it is; ``None`` when unset.
        worker_port: ``TRAINING_WORKER_PORT`` when the job sets it (EC2 nodes), else ``None``:
            a script's TF_CONFIG then uses the toolkit's own ports.
    """

    program: str | None
    submit_directory: str | None
    training_module: str | None
    job_name: str | None
    worker_port: int | None


def script_variables(env: Mapping[str, str] | None = None) -> ScriptVariables:
    """Reads :class:`ScriptVariables`.

    Raises:
        ConfigError: naming ``SAGEMAKER_PROGRAM`` when it is a notebook (whether another file can
            run is known once the code is there), or ``TRAINING_WORKER_PORT`` when it is not a TCP port.
    """
    env = os.environ if env is None else env
    program = env.get(ENV_PROGRAM, "").strip() or None
    if program is not None and program.endswith(NOTEBOOK_SUFFIX):
        raise ConfigError(f"{ENV_PROGRAM}: " + notebook_refusal(program, "script"))
    port = _worker_port(env)
    return ScriptVariables(
        program=program,
        submit_directory=env.get(ENV_SUBMIT_DIRECTORY, "").strip() or None,
        training_module=env.get(ENV_TRAINING_MODULE),
        job_name=env.get(ENV_JOB_NAME),
        worker_port=port,
    )


def legacy_keras(env: Mapping[str, str] | None = None) -> bool:
    """``TF_USE_LEGACY_KERAS``: whether the job asked for Keras 2 (``tf-keras``) for a user's script.

    Unset, blank, ``0``/``false``/``no``/``off``: Keras 3; ``1``/``true``/``yes``/``on``: Keras 2.

    Raises:
        ConfigError: naming the variable when it is neither, or when it asks for Keras 2 and the
            image lacks tf-keras.
    """
    env = os.environ if env is None else env
    raw = env.get(ENV_LEGACY_KERAS, "").strip().lower()
    if raw not in _TRUE + _FALSE:
        raise ConfigError(f"Environment variable {ENV_LEGACY_KERAS} must be 1 or 0, got {env[ENV_LEGACY_KERAS]!r}.")
    if raw in _TRUE and importlib.util.find_spec("tf_keras") is None:
        raise ConfigError(
            f"{ENV_LEGACY_KERAS}=1 asks for Keras 2, but the tf-keras package is not installed in this image; "
            "rebuild the image from training_image/ (its requirements include tf-keras)."
        )
    return raw in _TRUE


def channel_variables(env: Mapping[str, str] | None = None) -> set[str]:
    """Channel names from the ``SM_CHANNEL_<NAME>`` variables (lower case), as AWS's toolkit exports them."""
    env = os.environ if env is None else env
    return {name[len("SM_CHANNEL_") :].lower() for name in env if name.startswith("SM_CHANNEL_")}


def rendezvous_timeout_seconds(env: Mapping[str, str] | None = None) -> float:
    """``RENDEZVOUS_TIMEOUT_SECONDS`` (default 600): how long workers wait for each other.

    Raises:
        ConfigError: naming the variable when it is not a positive number.
    """
    return seconds_setting(os.environ if env is None else env, ENV_RENDEZVOUS_TIMEOUT, DEFAULT_RENDEZVOUS_TIMEOUT_SECONDS)


def resolve_cluster(paths: Paths, env: Mapping[str, str] | None = None) -> Cluster:
    """Finds the host list: TRAINING_HOSTS, else resourceconfig.json, else SM_HOSTS, else one host.

    TRAINING_HOSTS/TRAINING_CURRENT_HOST come first because the EC2 cluster has no
    resourceconfig.json and the stacks set them explicitly; SM_HOSTS is what the SageMaker
    toolkit exports when it wraps a script.
    """
    env = os.environ if env is None else env
    port = _worker_port(env) or DEFAULT_WORKER_PORT

    if env.get(ENV_HOSTS, "").strip():
        hosts = tuple(h.strip() for h in env[ENV_HOSTS].split(",") if h.strip())
        current = env.get(ENV_CURRENT_HOST, "").strip()
        if not current:
            raise ConfigError(
                f"{ENV_HOSTS} is set ({','.join(hosts)}) but {ENV_CURRENT_HOST} is not: "
                "every node must say which entry it is."
            )
        source = ENV_HOSTS
    elif paths.resource_config_file.is_file():
        resource_config = _read_json(paths.resource_config_file)
        hosts = tuple(resource_config.get("hosts") or ())
        current = resource_config.get("current_host", "")
        source = str(paths.resource_config_file)
    elif env.get("SM_HOSTS", "").strip():
        try:
            hosts = tuple(json.loads(env["SM_HOSTS"]))
        except json.JSONDecodeError as err:
            raise ConfigError(f"SM_HOSTS is not a JSON list: {err}.") from err
        current = env.get("SM_CURRENT_HOST", "")
        source = "SM_HOSTS"
    else:
        return Cluster(hosts=("localhost",), current_host="localhost", worker_port=port, source="single host")

    if not hosts:
        raise ConfigError(f"The host list from {source} is empty.")
    if len(set(hosts)) != len(hosts):
        raise ConfigError(f"The host list from {source} repeats an entry: {', '.join(hosts)}.")
    if current not in hosts:
        raise ConfigError(
            f"The current host {current!r} is not in the host list from {source} ({', '.join(hosts)}); "
            f"{ENV_CURRENT_HOST} must be exactly one of the {ENV_HOSTS} entries."
        )
    return Cluster(hosts=hosts, current_host=current, worker_port=port, source=source)


@dataclass(frozen=True)
class TrainingEnvironment:
    """Everything the trainer reads from outside its own code, resolved once.

    Attributes:
        paths: The filesystem layout.
        cluster: The hosts and this node's place among them.
        hyperparameters: Raw hyperparameters as SageMaker writes them (string values).
        input_data_config: Declared channels from ``inputdataconfig.json`` (empty if absent).
        expected_gpu_count: ``EXPECTED_GPU_COUNT`` if set (the stacks set it), else ``None``.
        instance_type: The instance type, for the GPU-count fallback:
            ``TRAINING_INSTANCE_TYPE``, else resourceconfig's ``current_instance_type``, else
            ``SM_CURRENT_INSTANCE_TYPE``.
        rendezvous_timeout_seconds: How long workers wait for each other before failing.
        rendezvous_refused_seconds: How long a peer's port may refuse connections in a row
            before the rendezvous fails (``RENDEZVOUS_REFUSED_SECONDS``, default 120 s, at most
            the timeout): a refusal means the host is up but runs no trainer, unlike silence.
        logical_cpu_devices: ``TRAINER_LOGICAL_CPU_DEVICES``: split the CPU into this many
            devices when running on CPU, to exercise MirroredStrategy without GPUs (tests).
    """

    paths: Paths
    cluster: Cluster
    hyperparameters: Mapping[str, str]
    input_data_config: Mapping[str, Any]
    expected_gpu_count: int | None
    instance_type: str | None
    rendezvous_timeout_seconds: float
    logical_cpu_devices: int
    rendezvous_refused_seconds: float = DEFAULT_RENDEZVOUS_REFUSED_SECONDS


def _read_hyperparameters(paths: Paths, env: Mapping[str, str]) -> dict[str, Any]:
    """The job's hyperparameters: ``hyperparameters.json``, else ``SM_HPS``, else none.

    Raises:
        ConfigError: naming the source actually read when it is not JSON or not a JSON object.
    """
    if paths.hyperparameters_file.is_file():
        source = str(paths.hyperparameters_file)
        hyperparameters = _read_json(paths.hyperparameters_file)
    elif env.get("SM_HPS", "").strip():
        source = "SM_HPS"
        try:
            hyperparameters = json.loads(env["SM_HPS"])
        except json.JSONDecodeError as err:
            raise ConfigError(f"Environment variable SM_HPS is not valid JSON: {err}.") from err
    else:
        return {}
    if not isinstance(hyperparameters, dict):
        raise ConfigError(
            f"{source} must hold a JSON object of hyperparameters, got {type(hyperparameters).__name__}."
        )
    return hyperparameters


def load_environment(env: Mapping[str, str] | None = None) -> TrainingEnvironment:
    """Reads the contract from files and environment variables; raises ConfigError naming the field."""
    env = os.environ if env is None else env
    paths = resolve_paths(env)

    hyperparameters = _read_hyperparameters(paths, env)

    input_data_config = _read_json(paths.input_data_config_file) if paths.input_data_config_file.is_file() else {}

    instance_type = env.get(ENV_INSTANCE_TYPE) or None
    if instance_type is None and paths.resource_config_file.is_file():
        instance_type = _read_json(paths.resource_config_file).get("current_instance_type") or None
    instance_type = instance_type or env.get("SM_CURRENT_INSTANCE_TYPE") or None

    timeout = rendezvous_timeout_seconds(env)
    refused = seconds_setting(env, ENV_RENDEZVOUS_REFUSED, DEFAULT_RENDEZVOUS_REFUSED_SECONDS)

    return TrainingEnvironment(
        paths=paths,
        cluster=resolve_cluster(paths, env),
        hyperparameters={str(k): v for k, v in hyperparameters.items()},
        input_data_config=input_data_config,
        expected_gpu_count=expected_gpu_count(env),
        instance_type=instance_type,
        rendezvous_timeout_seconds=timeout,
        rendezvous_refused_seconds=min(refused, timeout),
        logical_cpu_devices=int_setting(env, ENV_LOGICAL_CPU_DEVICES, 1, minimum=1),
    )
