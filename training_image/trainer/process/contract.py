"""The SageMaker Processing contract: where inputs, outputs and the job's description are.

SageMaker Processing starts the image with ``AppSpecification.ContainerEntrypoint`` (ours:
``python3 -m trainer process``) and ``ContainerArguments``, after downloading every
``ProcessingInput`` to its ``LocalPath`` and before uploading every ``ProcessingOutput`` from
its ``LocalPath``. The job's own description (``DescribeProcessingJob``-shaped) is in
``/opt/ml/config/processingjobconfig.json``, the hosts in ``/opt/ml/config/resourceconfig.json``,
and the first 1 KB of ``/opt/ml/output/message`` becomes the job's ``ExitMessage`` /
``FailureReason`` (training reads ``output/failure`` instead).

Every path hangs off ``SAGEMAKER_BASE_DIR`` (default ``/opt/ml``), the variable training uses, so
the local runner and the tests move the whole tree; a ``LocalPath`` under ``/opt/ml`` in the
job's config is re-rooted the same way. Nothing here imports TensorFlow.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from trainer.contract import environment
from trainer.contract.environment import DEFAULT_BASE_DIR, ENV_PROGRAM, ENV_SUBMIT_DIRECTORY
from trainer.contract.errors import ConfigError, SourceError
from trainer.user_code import s3_source

RAW_INPUT = "raw"
CODE_INPUT = "code"
TRAIN_OUTPUT = "train"
VALIDATION_OUTPUT = "validation"
DEFAULT_SUBMIT_DIRECTORY = f"{DEFAULT_BASE_DIR}/processing/input/{CODE_INPUT}/sourcedir.tar.gz"
SHARDED = "ShardedByS3Key"


@dataclass(frozen=True)
class ProcessingPaths:
    """The filesystem layout of one processing job.

    Attributes:
        base_dir: ``SAGEMAKER_BASE_DIR`` or ``/opt/ml``.
        job_config_file: ``config/processingjobconfig.json`` (DescribeProcessingJob-shaped).
        resource_config_file: ``config/resourceconfig.json`` (``current_host``, ``hosts``).
        message_file: ``output/message``: the one-line reason SageMaker reports for a failed job.
    """

    base_dir: Path
    job_config_file: Path
    resource_config_file: Path
    message_file: Path

    def input_dir(self, name: str) -> Path:
        """``processing/input/<name>``: where SageMaker puts a ProcessingInput by default."""
        return self.base_dir / "processing" / "input" / name

    def output_dir(self, name: str) -> Path:
        """``processing/output/<name>``: what SageMaker uploads for a ProcessingOutput by default."""
        return self.base_dir / "processing" / "output" / name

    def local(self, path: str) -> Path:
        """A container path from the job's config, re-rooted under ``base_dir`` when that moved."""
        local = Path(path)
        if local.is_relative_to(DEFAULT_BASE_DIR) and self.base_dir != Path(DEFAULT_BASE_DIR):
            return self.base_dir / local.relative_to(DEFAULT_BASE_DIR)
        return local


def resolve_paths(env: Mapping[str, str] | None = None) -> ProcessingPaths:
    """The layout from ``SAGEMAKER_BASE_DIR`` (read by the contract, as for training); never raises,
    so a failure can always be recorded."""
    base = environment.resolve_paths(env).base_dir
    return ProcessingPaths(
        base_dir=base,
        job_config_file=base / "config" / "processingjobconfig.json",
        resource_config_file=base / "config" / "resourceconfig.json",
        message_file=base / "output" / "message",
    )


@dataclass(frozen=True)
class ProcessingInput:
    """One ProcessingInput as the container sees it.

    Attributes:
        name: ``InputName`` (``raw``, ``code``...).
        local_path: Where its files are in this container.
        distribution: ``FullyReplicated`` or ``ShardedByS3Key`` (each host gets part of the objects).
    """

    name: str
    local_path: Path
    distribution: str = "FullyReplicated"


@dataclass(frozen=True)
class ProcessingEnvironment:
    """Everything a processing job reads from outside the code, resolved once.

    Attributes:
        paths: The filesystem layout.
        job_name: ``ProcessingJobName`` from the job's config (empty when run by hand).
        inputs: Declared inputs by name; without a config, ``raw`` and ``code`` at their defaults.
        outputs: Declared outputs by name -> local path; without a config, ``train`` and ``validation``.
        hosts: Every host of the job (``resourceconfig.json``), one (``algo-1``) without it.
        current_host: This host.
        instance_type: ``ProcessingResources.ClusterConfig.InstanceType``, for the GPU-count fallback.
        expected_gpu_count: ``EXPECTED_GPU_COUNT`` when set (the stacks set it).
        program: ``SAGEMAKER_PROGRAM``: the user's processing script (script mode), or None.
        submit_directory: ``SAGEMAKER_SUBMIT_DIRECTORY``: where that script's code is.
    """

    paths: ProcessingPaths
    job_name: str
    inputs: Mapping[str, ProcessingInput]
    outputs: Mapping[str, Path]
    hosts: tuple[str, ...]
    current_host: str
    instance_type: str | None
    expected_gpu_count: int | None
    program: str | None
    submit_directory: str
    job_config: Mapping[str, Any] = field(default_factory=dict)

    def input_dir(self, name: str) -> Path:
        """The local directory of input ``name`` (declared path, else the default)."""
        declared = self.inputs.get(name)
        return declared.local_path if declared else self.paths.input_dir(name)

    def output_dir(self, name: str) -> Path:
        """The local directory of output ``name`` (declared path, else the default)."""
        return self.outputs.get(name) or self.paths.output_dir(name)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path} is not readable JSON: {err}.") from err


def load_environment(env: Mapping[str, str] | None = None) -> ProcessingEnvironment:
    """Reads the processing contract; raises ConfigError naming the file or variable.

    The variables (``SAGEMAKER_BASE_DIR``, ``EXPECTED_GPU_COUNT``, ``SAGEMAKER_PROGRAM``,
    ``SAGEMAKER_SUBMIT_DIRECTORY``) are parsed by :mod:`trainer.contract.environment`, the same
    functions training and serving call; ``env`` (this process's environment by default) is passed on.
    """
    paths = resolve_paths(env)
    job_config: dict[str, Any] = {}
    if paths.job_config_file.is_file():
        job_config = _read_json(paths.job_config_file)
        if not isinstance(job_config, dict):
            raise ConfigError(f"{paths.job_config_file} must hold a JSON object (the DescribeProcessingJob response).")

    inputs: dict[str, ProcessingInput] = {}
    for item in job_config.get("ProcessingInputs") or []:
        name = str(item.get("InputName", ""))
        s3 = item.get("S3Input") or {}
        local = s3.get("LocalPath") or f"{DEFAULT_BASE_DIR}/processing/input/{name}"
        inputs[name] = ProcessingInput(name, paths.local(local), str(s3.get("S3DataDistributionType") or "FullyReplicated"))
    outputs: dict[str, Path] = {}
    for item in (job_config.get("ProcessingOutputConfig") or {}).get("Outputs") or []:
        name = str(item.get("OutputName", ""))
        local = (item.get("S3Output") or {}).get("LocalPath") or f"{DEFAULT_BASE_DIR}/processing/output/{name}"
        outputs[name] = paths.local(local)

    hosts: tuple[str, ...] = ("algo-1",)
    current = "algo-1"
    if paths.resource_config_file.is_file():
        resources = _read_json(paths.resource_config_file)
        hosts = tuple(str(h) for h in resources.get("hosts") or ()) or hosts
        current = str(resources.get("current_host") or hosts[0])
        if current not in hosts:
            raise ConfigError(f"{paths.resource_config_file}: current_host {current!r} is not in hosts {list(hosts)}.")

    cluster = (job_config.get("ProcessingResources") or {}).get("ClusterConfig") or {}
    expected = environment.expected_gpu_count(env)

    variables = environment.script_variables(env)
    program, submit = variables.program, variables.submit_directory
    if submit and not program:
        raise ConfigError(
            f"{ENV_SUBMIT_DIRECTORY}={submit!r} is set but {ENV_PROGRAM} is not: say which processing script to run "
            "(the entry point), or unset both to run the built-in transform."
        )
    return ProcessingEnvironment(
        paths=paths,
        job_name=str(job_config.get("ProcessingJobName") or ""),
        inputs=inputs,
        outputs=outputs,
        hosts=hosts,
        current_host=current,
        instance_type=cluster.get("InstanceType") or None,
        expected_gpu_count=expected,
        program=program,
        submit_directory=submit or DEFAULT_SUBMIT_DIRECTORY,
        job_config=job_config,
    )


def script_environment(env: ProcessingEnvironment, *, num_gpus: int, num_cpus: int) -> dict[str, str]:
    """The few ``SM_*`` variables a processing script gets (SageMaker Processing itself sets none).

    Kept minimal on purpose: the paths a script would otherwise hard-code, re-rooted like
    everything else, and the host facts training scripts already know by these names.

    - ``SM_PROCESSING_INPUT_<NAME>`` / ``SM_PROCESSING_OUTPUT_<NAME>``: each declared input's and
      output's local directory (``raw``, ``code``, ``train``, ``validation`` by default);
    - ``SM_CURRENT_HOST``, ``SM_HOSTS`` (JSON list), ``SM_NUM_GPUS`` (as verified), ``SM_NUM_CPUS``;
    - ``SM_PROCESSING_JOB_NAME``.
    """
    values = {
        "SM_CURRENT_HOST": env.current_host,
        "SM_HOSTS": json.dumps(list(env.hosts)),
        "SM_NUM_GPUS": str(num_gpus),
        "SM_NUM_CPUS": str(num_cpus),
        "SM_PROCESSING_JOB_NAME": env.job_name,
    }
    inputs = {name: env.input_dir(name) for name in (*env.inputs, RAW_INPUT, CODE_INPUT)}
    outputs = {name: env.output_dir(name) for name in (*env.outputs, TRAIN_OUTPUT, VALIDATION_OUTPUT)}
    for name, path in inputs.items():
        values[f"SM_PROCESSING_INPUT_{_env_name(name)}"] = str(path)
    for name, path in outputs.items():
        values[f"SM_PROCESSING_OUTPUT_{_env_name(name)}"] = str(path)
    return values


def _env_name(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name).upper()


def submit_location(env: ProcessingEnvironment) -> str:
    """``SAGEMAKER_SUBMIT_DIRECTORY`` as the shared source loader reads it.

    Raises:
        SourceError: it is an ``s3://`` URI and the job does not say it has network access: the code
            must arrive as an input.
    """
    submit = env.submit_directory
    if submit.startswith("s3://") and s3_source.network_isolated(env.paths.base_dir) is not False:
        # Known isolated, or unknown: processing jobs get their code as an input; only a job that says
        # it is not isolated (NetworkConfig.EnableNetworkIsolation false) downloads it.
        name = PurePosixPath(submit).name
        raise SourceError(
            f"{ENV_SUBMIT_DIRECTORY} is {submit}, but a processing job with network isolation cannot read S3: "
            f"add a ProcessingInput named '{CODE_INPUT}' with that URI and set {ENV_SUBMIT_DIRECTORY} to "
            f"{DEFAULT_BASE_DIR}/processing/input/{CODE_INPUT}/{name}."
        )
    return submit
