"""The one CreateTrainingJob request: built here for the state machine and for ``scripts.launch``.

Pure Python (no CDK import), so the operator scripts can import it without starting jsii.

The request is written once, in :func:`create_training_job_request`. What a launch may
override (job name, instance type and count, spot, hyperparameters) arrives as
:class:`LaunchValues`, which hold either concrete values (``scripts.launch --direct``, from the
config and the stacks' outputs) or :class:`Jsonata` expressions that the state machine evaluates
at run time (the deployed workflow). Shape decisions that depend on an override (the volume key
for types with local NVMe, ``MaxWaitTimeInSeconds`` only with spot, inter-container encryption
with more than one instance) go through :func:`when` and :func:`greater_than`, which either
decide in Python or emit the matching JSONata conditional. The two paths therefore cannot drift.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping, Optional, Sequence, Union

from stacks.config import PlatformConfig
from stacks.gpu_instances import SAGEMAKER_PREFIX, gpu_instance_types, lookup

METRIC_DEFINITIONS_PATH = (
    Path(__file__).resolve().parent.parent.parent / "training_image" / "trainer" / "metric_definitions.json"
)
"""Regexes for the training container's ``[metrics] ...`` log lines; owned by the image."""

CHECKPOINT_PREFIX = "checkpoints/"
"""Same value as ``stacks.components.buckets.CHECKPOINT_PREFIX`` (the lifecycle rule's prefix).
Repeated because that module imports CDK; a unit test keeps the two equal."""

OUTPUT_PREFIX = "training-jobs/"
"""Key prefix in the artifacts bucket for job outputs (SageMaker adds ``<job>/output/``)."""

CODE_PREFIX = "code/"
"""Key prefix in the artifacts bucket for users' ``sourcedir.tar.gz`` (``code/<job>/sourcedir.tar.gz``)."""

CODE_CHANNEL = "code"
CODE_CHANNEL_SOURCEDIR = "/opt/ml/input/data/code/sourcedir.tar.gz"
"""Where the ``code`` channel puts the tarball; the SageMaker SDK uses the same path for isolated jobs."""
PROGRAM_HYPERPARAMETER = "sagemaker_program"
SUBMIT_DIRECTORY_HYPERPARAMETER = "sagemaker_submit_directory"
MULTI_WORKER_HYPERPARAMETER = "sagemaker_multi_worker_mirrored_strategy_enabled"
LEGACY_KERAS_ENV = "TF_USE_LEGACY_KERAS"
MAX_ENTRY_POINT_LENGTH = 256
ENTRY_POINT_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_./-]*[.](py|sh)$"

CHECKPOINT_LOCAL_PATH = "/opt/ml/checkpoints"
SAGEMAKER_LOG_GROUP = "/aws/sagemaker/TrainingJobs"
"""SageMaker always writes training logs here, in streams named ``<job name>/algo-<n>-<ts>``."""

MAX_INSTANCE_COUNT = 64
MAX_JOB_NAME_LENGTH = 63
EXPECTED_GPU_COUNT_ENV = "EXPECTED_GPU_COUNT"


class LaunchError(ValueError):
    """A launch option is wrong; ``str(err)`` is one line naming the option and the fix."""


# --------------------------------------------------------------------------------------------
# JSONata: values the state machine resolves at run time
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Jsonata:
    """A JSONata expression (without the ``{% %}`` delimiters) evaluated by Step Functions."""

    expression: str


Value = Union[Any, Jsonata]


def to_jsonata(value: Value) -> str:
    """JSONata source for ``value``; literals are written as JSON, which JSONata reads as is."""
    if isinstance(value, Jsonata):
        return f"({value.expression})"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{json.dumps(k)}: {to_jsonata(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(to_jsonata(v) for v in value) + "]"
    return json.dumps(value)


def when(condition: Union[bool, Jsonata], then: Value, otherwise: Value) -> Value:
    """``then`` if ``condition`` else ``otherwise``; a JSONata conditional for a run-time condition."""
    if isinstance(condition, Jsonata):
        return Jsonata(f"{to_jsonata(condition)} ? {to_jsonata(then)} : {to_jsonata(otherwise)}")
    return then if condition else otherwise


def greater_than(value: Union[int, Jsonata], limit: int) -> Union[bool, Jsonata]:
    """``value > limit``, decided now or by the state machine."""
    if isinstance(value, Jsonata):
        return Jsonata(f"{to_jsonata(value)} > {limit}")
    return value > limit


def append(first: Value, second: Value) -> Value:
    """List concatenation, now or by the state machine."""
    if isinstance(first, Jsonata) or isinstance(second, Jsonata):
        return Jsonata(f"$append({to_jsonata(first)}, {to_jsonata(second)})")
    return [*first, *second]


def merge(*parts: Value) -> Value:
    """Objects merged left to right (later keys win), now or by the state machine."""
    if any(isinstance(p, Jsonata) for p in parts):
        return Jsonata("$merge([" + ", ".join(to_jsonata(p) for p in parts) + "])")
    merged: dict[str, Any] = {}
    for part in parts:
        merged.update(part)
    return merged


def logical_and(*conditions: Union[bool, Jsonata]) -> Union[bool, Jsonata]:
    """``a and b``, decided now or by the state machine."""
    if any(isinstance(c, Jsonata) for c in conditions):
        return Jsonata(" and ".join(to_jsonata(c) for c in conditions))
    return all(conditions)


def concat(*parts: Union[str, Jsonata]) -> Union[str, Jsonata]:
    """String concatenation, now or by the state machine."""
    if any(isinstance(p, Jsonata) for p in parts):
        return Jsonata(" & ".join(to_jsonata(p) for p in parts))
    return "".join(parts)  # type: ignore[arg-type]


def render(value: Value) -> Any:
    """The request as Step Functions reads it: every :class:`Jsonata` becomes ``"{% ... %}"``."""
    if isinstance(value, Jsonata):
        return "{% " + value.expression + " %}"
    if isinstance(value, Mapping):
        return {k: render(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [render(v) for v in value]
    return value


# --------------------------------------------------------------------------------------------
# What a job is made of
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InstanceFacts:
    """What the request needs to know about a SageMaker instance type (from the GPU table).

    Attributes:
        expected_gpu_count: GPUs per instance, as the string the container's
            ``EXPECTED_GPU_COUNT`` receives.
        local_nvme: The type has instance-store NVMe. SageMaker encrypts it in hardware and
            rejects a ``VolumeKmsKeyId`` for it, so the request omits the volume key.
    """

    expected_gpu_count: str
    local_nvme: bool


def instance_facts(instance_type: str) -> InstanceFacts:
    """Facts for a ``ml.`` GPU type; :class:`LaunchError` for anything else."""
    row = lookup(instance_type) if instance_type.startswith(SAGEMAKER_PREFIX) else None
    if row is None:
        raise LaunchError(
            f"instance type {instance_type!r} is not a known SageMaker GPU type; "
            "use ml. + a row of training_image/trainer/gpu_instances.json, e.g. ml.g5.xlarge"
        )
    return InstanceFacts(expected_gpu_count=str(row.gpu_count), local_nvme=row.local_nvme_gb > 0)


def instance_facts_table() -> dict[str, dict[str, Any]]:
    """:func:`instance_facts` for every GPU type, keyed by SageMaker name (the state machine's copy)."""
    table = {}
    for name in sorted(gpu_instance_types()):
        facts = instance_facts(SAGEMAKER_PREFIX + name)
        table[SAGEMAKER_PREFIX + name] = {"expected_gpu_count": facts.expected_gpu_count, "local_nvme": facts.local_nvme}
    return table


def load_metric_definitions(path: Path = METRIC_DEFINITIONS_PATH) -> list[dict[str, str]]:
    """The image's metric definitions (``[{"Name", "Regex"}]``), checked for shape."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} is missing: the training image defines the metric log format there") from None
    if not isinstance(raw, list) or not raw:
        raise ValueError(f"{path}: expected a non-empty JSON list of {{'Name', 'Regex'}} objects")
    definitions = []
    for item in raw:
        if not isinstance(item, Mapping) or not isinstance(item.get("Name"), str) or not isinstance(item.get("Regex"), str):
            raise ValueError(f"{path}: every entry needs string 'Name' and 'Regex', got {item!r}")
        re.compile(item["Regex"])
        definitions.append({"Name": item["Name"], "Regex": item["Regex"]})
    if len(definitions) > 40:
        raise ValueError(f"{path}: SageMaker accepts at most 40 metric definitions, got {len(definitions)}")
    return definitions


@dataclass(frozen=True)
class JobResources:
    """The deployed resources a job runs with.

    At synth time these are CDK tokens; at launch time the values from the stacks' outputs.

    Attributes:
        role_arn: The job's execution role.
        image_uri: Training image (repository URI and the configured tag).
        datasets_bucket: Bucket name holding the input channels.
        artifacts_bucket: Bucket name for outputs and checkpoints.
        key_arn: KMS key for the output, checkpoints and (where allowed) the ML volume.
        subnet_ids: Private subnets the job's network interfaces go into.
        security_group_ids: The job's security groups.
    """

    role_arn: str
    image_uri: str
    datasets_bucket: str
    artifacts_bucket: str
    key_arn: str
    subnet_ids: Sequence[str]
    security_group_ids: Sequence[str]


@dataclass(frozen=True)
class JobTemplate:
    """Everything about a job that is fixed at deploy time, plus the defaults of the overrides.

    Build it with :meth:`from_config`.

    Attributes:
        project_name: Job names start with ``<project_name>-`` (IAM, notifications and teardown
            rely on the prefix).
        resources: See :class:`JobResources`.
        channels: Channel name -> key prefix in the datasets bucket.
        input_mode: ``File`` or ``FastFile``.
        volume_size_gb: ML storage volume per instance.
        max_runtime_seconds: ``StoppingCondition.MaxRuntimeInSeconds``.
        max_wait_seconds: ``StoppingCondition.MaxWaitTimeInSeconds`` (spot only).
        checkpointing: Add ``CheckpointConfig`` (required for spot).
        retry_attempts: ``RetryStrategy.MaximumRetryAttempts``.
        metric_definitions: Regexes over the container's log lines.
        tags: Tags on every job (the project's cost tags).
        default_instance_type: Used when a launch does not override it.
        default_instance_count: Used when a launch does not override it.
        default_use_spot: Used when a launch does not override it.
        default_hyperparameters: A launch's hyperparameters are merged over these.
    """

    project_name: str
    resources: JobResources
    channels: Mapping[str, str]
    input_mode: str
    volume_size_gb: int
    max_runtime_seconds: int
    max_wait_seconds: int
    checkpointing: bool
    retry_attempts: int
    metric_definitions: Sequence[Mapping[str, str]]
    tags: Mapping[str, str]
    default_instance_type: str
    default_instance_count: int
    default_use_spot: bool
    default_hyperparameters: Mapping[str, str]

    @classmethod
    def from_config(
        cls,
        config: PlatformConfig,
        resources: JobResources,
        metric_definitions: Optional[Sequence[Mapping[str, str]]] = None,
    ) -> "JobTemplate":
        """The template for ``config.training_job``; metric definitions default to the image's file."""
        tj = config.training_job
        return cls(
            project_name=config.project_name,
            resources=resources,
            channels=MappingProxyType(dict(tj.channels)),
            input_mode=tj.input_mode,
            volume_size_gb=tj.volume_size_gb,
            max_runtime_seconds=tj.max_runtime_seconds,
            max_wait_seconds=tj.max_wait_seconds,
            checkpointing=tj.checkpointing,
            retry_attempts=tj.retry_attempts,
            metric_definitions=tuple(metric_definitions if metric_definitions is not None else load_metric_definitions()),
            tags=MappingProxyType({"Project": config.project_name, **config.tags}),
            default_instance_type=tj.instance_type,
            default_instance_count=tj.instance_count,
            default_use_spot=tj.use_spot,
            default_hyperparameters=MappingProxyType(dict(tj.hyperparameters)),
        )

    @property
    def job_name_prefix(self) -> str:
        """Every job of the project is named ``<project>-...``."""
        return f"{self.project_name}-"


@dataclass(frozen=True)
class LaunchOptions:
    """What one launch may override; ``None`` keeps the template's default.

    Attributes:
        job_name: Full job name (must start with ``<project>-``). Default: generated.
        instance_type: SageMaker GPU type.
        instance_count: Instances (1-64).
        use_spot: Managed spot training (needs checkpointing in the template).
        hyperparameters: Merged over the defaults; values are passed as strings.
        code_uri: ``s3://<artifacts bucket>/code/.../sourcedir.tar.gz``: run the user's script
            from it (script mode; it travels as the ``code`` channel). ``None``: the built-in trainer.
        entry_point: The script inside the tarball (``train.py``); required with ``code_uri``.
        legacy_keras: Run the script with Keras 2 (``TF_USE_LEGACY_KERAS=1``, tf-keras).
    """

    job_name: Optional[str] = None
    instance_type: Optional[str] = None
    instance_count: Optional[int] = None
    use_spot: Optional[bool] = None
    hyperparameters: Mapping[str, Any] = field(default_factory=dict)
    code_uri: Optional[str] = None
    entry_point: Optional[str] = None
    legacy_keras: Optional[bool] = None

    def state_machine_input(self) -> dict[str, Any]:
        """The execution input the workflow reads: only what is overridden."""
        data: dict[str, Any] = {}
        for key in ("job_name", "instance_type", "instance_count", "use_spot", "code_uri", "entry_point", "legacy_keras"):
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        if self.hyperparameters:
            data["hyperparameters"] = {k: _hyperparameter_string(v) for k, v in self.hyperparameters.items()}
        return data


@dataclass(frozen=True)
class LaunchValues:
    """The varying inputs of the request: all concrete, or all JSONata (see module docstring)."""

    job_name: Union[str, Jsonata]
    instance_type: Union[str, Jsonata]
    instance_count: Union[int, Jsonata]
    use_spot: Union[bool, Jsonata]
    hyperparameters: Union[Mapping[str, str], Jsonata]
    expected_gpu_count: Union[str, Jsonata]
    local_nvme: Union[bool, Jsonata]
    code_uri: Union[str, Jsonata] = ""
    entry_point: Union[str, Jsonata] = ""
    legacy_keras: Union[bool, Jsonata] = False
    has_code: Union[bool, Jsonata] = False


# --------------------------------------------------------------------------------------------
# Launch options: resolved in Python, or by the state machine
# --------------------------------------------------------------------------------------------

_JOB_SUFFIX_RE = re.compile(r"^[a-zA-Z0-9]+(-+[a-zA-Z0-9]+)*$")


def default_job_name(template: JobTemplate, now: Optional[datetime] = None, suffix: str = "") -> str:
    """``<project>-YYYYmmdd-HHMMSS[-suffix]`` in UTC."""
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%d-%H%M%S")
    return f"{template.job_name_prefix}{stamp}" + (f"-{suffix}" if suffix else "")


def check_job_name(template: JobTemplate, name: str) -> str:
    """Return ``name`` if it is a valid SageMaker job name with the project prefix."""
    prefix = template.job_name_prefix
    if not name.startswith(prefix) or not _JOB_SUFFIX_RE.match(name[len(prefix):]) or len(name) > MAX_JOB_NAME_LENGTH:
        raise LaunchError(
            f"job name {name!r} is not allowed; use {prefix}<letters, digits, hyphens>, at most "
            f"{MAX_JOB_NAME_LENGTH} characters (the workflow's role may only create {prefix}* jobs)"
        )
    return name


def _hyperparameter_string(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)
    raise LaunchError(f"hyperparameter value {value!r} must be a string, number or boolean")


def code_uri_prefix(template: JobTemplate) -> str:
    """Where a launch's ``sourcedir.tar.gz`` must be: the job role may read only this prefix."""
    return f"s3://{template.resources.artifacts_bucket}/{CODE_PREFIX}"


def check_source(template: JobTemplate, code_uri: Optional[str], entry_point: Optional[str]) -> tuple[str, str]:
    """``(code_uri, entry_point)`` checked for a script-mode launch, or ``("", "")`` for the built-in trainer."""
    if not code_uri and not entry_point:
        return "", ""
    if not code_uri or not entry_point:
        raise LaunchError(
            "a script needs both its code and its entry point: --source-dir DIR --entry-point train.py "
            "(workflow input: code_uri and entry_point)"
        )
    prefix = code_uri_prefix(template)
    if not code_uri.startswith(prefix) or not code_uri.endswith(".tar.gz"):
        raise LaunchError(
            f"code_uri {code_uri!r} must be a .tar.gz under {prefix} (the only code the job role may read); "
            "scripts.launch --source-dir uploads it there"
        )
    if len(entry_point) > MAX_ENTRY_POINT_LENGTH or not re.match(ENTRY_POINT_PATTERN, entry_point) or ".." in entry_point:
        raise LaunchError(
            f"entry point {entry_point!r} must be a .py or .sh file's path inside the source directory "
            "(letters, digits, _ . / -; no '..'), e.g. train.py"
        )
    return code_uri, entry_point


def resolve_launch(template: JobTemplate, options: LaunchOptions, *, now: Optional[datetime] = None) -> LaunchValues:
    """Apply ``options`` over the template's defaults and check them (the direct path).

    Raises:
        LaunchError: one line naming the bad option.
    """
    instance_type = options.instance_type or template.default_instance_type
    facts = instance_facts(instance_type)
    count = template.default_instance_count if options.instance_count is None else options.instance_count
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_INSTANCE_COUNT:
        raise LaunchError(f"instance count {count!r} must be a whole number from 1 to {MAX_INSTANCE_COUNT}")
    use_spot = template.default_use_spot if options.use_spot is None else options.use_spot
    if use_spot and not template.checkpointing:
        raise LaunchError(
            "spot was requested but this deployment has checkpointing off, so an interrupted job would "
            "restart from scratch; launch on demand (--on-demand) or deploy with training_job.checkpointing=true"
        )
    # The configured hyperparameters are the built-in trainer's; a user's script gets only its own.
    hyperparameters = {} if options.code_uri else dict(template.default_hyperparameters)
    hyperparameters.update({str(k): _hyperparameter_string(v) for k, v in options.hyperparameters.items()})
    job_name = check_job_name(template, options.job_name or default_job_name(template, now))
    code_uri, entry_point = check_source(template, options.code_uri, options.entry_point)
    if options.legacy_keras is not None and not isinstance(options.legacy_keras, bool):
        raise LaunchError(f"legacy_keras {options.legacy_keras!r} must be true or false")
    return LaunchValues(
        job_name=job_name,
        instance_type=instance_type,
        instance_count=count,
        use_spot=bool(use_spot),
        hyperparameters=hyperparameters,
        expected_gpu_count=facts.expected_gpu_count,
        local_nvme=facts.local_nvme,
        code_uri=code_uri,
        entry_point=entry_point,
        legacy_keras=bool(options.legacy_keras),
        has_code=bool(code_uri),
    )


STATE_MACHINE_VALUES = LaunchValues(
    job_name=Jsonata("$job_name"),
    instance_type=Jsonata("$instance_type"),
    instance_count=Jsonata("$instance_count"),
    use_spot=Jsonata("$use_spot"),
    hyperparameters=Jsonata("$hyperparameters"),
    expected_gpu_count=Jsonata("$lookup($instance_facts, $instance_type).expected_gpu_count"),
    local_nvme=Jsonata("$lookup($instance_facts, $instance_type).local_nvme"),
    code_uri=Jsonata("$code_uri"),
    entry_point=Jsonata("$entry_point"),
    legacy_keras=Jsonata("$legacy_keras"),
    has_code=Jsonata("$code_uri != ''"),
)
"""The launch values as the workflow's variables (assigned by :func:`state_machine_assignments`)."""


def _input_or(key: str, default: str) -> str:
    return f"{{% $exists($states.input.{key}) ? $states.input.{key} : {default} %}}"


def state_machine_assignments(template: JobTemplate) -> dict[str, Any]:
    """``Assign`` of the workflow's first state: execution input over the baked-in defaults.

    The execution input may carry ``job_name``, ``instance_type``, ``instance_count``,
    ``use_spot``, ``hyperparameters`` (merged over the defaults, values made strings),
    ``code_uri``, ``entry_point`` and ``legacy_keras``, the same options as :class:`LaunchOptions`.
    Without ``job_name`` the job is named ``<project>-<execution name>``.
    """
    stringified = "$each($states.input.hyperparameters, function($v, $k) {{$k: $string($v)}})"
    return {
        "job_name": _input_or("job_name", f"{json.dumps(template.job_name_prefix)} & $states.context.Execution.Name"),
        "instance_type": _input_or("instance_type", json.dumps(template.default_instance_type)),
        "instance_count": _input_or("instance_count", json.dumps(template.default_instance_count)),
        "use_spot": _input_or("use_spot", json.dumps(template.default_use_spot)),
        # The configured hyperparameters are the built-in trainer's; a user's script gets only its own.
        "hyperparameters": "{% $merge($append([$exists($states.input.code_uri) ? {} : "
        + to_jsonata(dict(template.default_hyperparameters))
        + f"], $exists($states.input.hyperparameters) ? {stringified} : [])) %}}",
        "code_uri": _input_or("code_uri", '""'),
        "entry_point": _input_or("entry_point", '""'),
        "legacy_keras": _input_or("legacy_keras", "false"),
        "instance_facts": instance_facts_table(),
    }


def state_machine_launch_check(template: JobTemplate) -> str:
    """JSONata condition that the resolved variables are a launch :func:`resolve_launch` accepts."""
    prefix = re.escape(template.job_name_prefix)
    checks = [
        f"$type($job_name) = 'string' and $length($job_name) <= {MAX_JOB_NAME_LENGTH}",
        f"$contains($job_name, /^{prefix}[a-zA-Z0-9]+(-+[a-zA-Z0-9]+)*$/)",
        "$type($instance_type) = 'string' and $exists($lookup($instance_facts, $instance_type))",
        f"$type($instance_count) = 'number' and $instance_count = $floor($instance_count)"
        f" and $instance_count >= 1 and $instance_count <= {MAX_INSTANCE_COUNT}",
        "$type($use_spot) = 'boolean'" + ("" if template.checkpointing else " and $use_spot = false"),
        "$type($hyperparameters) = 'object'",
        "$type($legacy_keras) = 'boolean'",
        "$type($code_uri) = 'string' and $type($entry_point) = 'string'",
        "($code_uri = '' and $entry_point = '') or ("
        + f"$substring($code_uri, 0, {len(CODE_PREFIX) + 6} + $length({to_jsonata(template.resources.artifacts_bucket)}))"
        + f" = {to_jsonata(code_uri_prefix(template))}"
        + " and $substring($code_uri, -7) = '.tar.gz'"
        + f" and $length($entry_point) <= {MAX_ENTRY_POINT_LENGTH}"
        + f" and $contains($entry_point, /{ENTRY_POINT_PATTERN}/) and $not($contains($entry_point, '..')))",
    ]
    return "{% " + " and ".join(f"({c})" for c in checks) + " %}"


def state_machine_launch_problem(template: JobTemplate) -> str:
    """The ``Cause`` of the workflow's failure when :func:`state_machine_launch_check` is false."""
    spot = "use_spot a boolean" if template.checkpointing else "use_spot false (checkpointing is off)"
    return (
        "{% 'Invalid launch options: job_name=' & $string($job_name) & ', instance_type=' & $string($instance_type)"
        " & ', instance_count=' & $string($instance_count) & ', use_spot=' & $string($use_spot)"
        " & ', code_uri=' & $string($code_uri) & ', entry_point=' & $string($entry_point)"
        " & ', legacy_keras=' & $string($legacy_keras)"
        f" & '. Expected job_name {template.job_name_prefix}<letters, digits, hyphens> (<= {MAX_JOB_NAME_LENGTH} chars),"
        f" instance_type a GPU type from the table (ml.*), instance_count 1-{MAX_INSTANCE_COUNT}, {spot},"
        " hyperparameters an object, legacy_keras a boolean, and code_uri (a .tar.gz under "
        + f"s3://<artifacts bucket>/{CODE_PREFIX}) with entry_point (a .py or .sh path) both set or both absent.' %}}"
    )


# --------------------------------------------------------------------------------------------
# The request
# --------------------------------------------------------------------------------------------


def create_training_job_request(template: JobTemplate, launch: LaunchValues) -> dict[str, Any]:
    """The CreateTrainingJob request (boto3 keyword arguments / the task's ``Arguments``).

    With concrete :class:`LaunchValues` the result is plain data for
    ``sagemaker.create_training_job(**request)``; with :data:`STATE_MACHINE_VALUES` it holds
    ``{% %}`` expressions for the state machine.
    """
    r = template.resources
    resource_config = {
        "InstanceType": launch.instance_type,
        "InstanceCount": launch.instance_count,
        "VolumeSizeInGB": template.volume_size_gb,
    }
    max_runtime = {"MaxRuntimeInSeconds": template.max_runtime_seconds}
    data_channels = [
        {
            "ChannelName": name,
            "DataSource": {
                "S3DataSource": {
                    "S3DataType": "S3Prefix",
                    "S3Uri": f"s3://{r.datasets_bucket}/{prefix}",
                    "S3DataDistributionType": "FullyReplicated",
                }
            },
            "InputMode": template.input_mode,
        }
        for name, prefix in template.channels.items()
    ]
    code_channel = {
        "ChannelName": CODE_CHANNEL,
        "DataSource": {
            "S3DataSource": {
                "S3DataType": "S3Prefix",
                "S3Uri": launch.code_uri,
                "S3DataDistributionType": "FullyReplicated",
            }
        },
        "InputMode": "File",
    }
    request: dict[str, Any] = {
        "TrainingJobName": launch.job_name,
        "RoleArn": r.role_arn,
        "AlgorithmSpecification": {
            "TrainingImage": r.image_uri,
            "TrainingInputMode": template.input_mode,
            "MetricDefinitions": [dict(m) for m in template.metric_definitions],
            "EnableSageMakerMetricsTimeSeries": True,
        },
        # Script mode (the user's code) is selected by the same hyperparameters the SageMaker SDK
        # sets; the launch's own hyperparameters come last, so a user may override the switch.
        "HyperParameters": merge(
            when(
                launch.has_code,
                {PROGRAM_HYPERPARAMETER: launch.entry_point, SUBMIT_DIRECTORY_HYPERPARAMETER: CODE_CHANNEL_SOURCEDIR},
                {},
            ),
            when(logical_and(launch.has_code, greater_than(launch.instance_count, 1)), {MULTI_WORKER_HYPERPARAMETER: "true"}, {}),
            launch.hyperparameters,
        ),
        # The entrypoint fails hard unless it sees exactly this many GPUs.
        "Environment": merge(
            {EXPECTED_GPU_COUNT_ENV: launch.expected_gpu_count},
            when(launch.legacy_keras, {LEGACY_KERAS_ENV: "1"}, {}),
        ),
        # Network isolation: the container cannot read S3, so a script's code travels as a channel.
        "InputDataConfig": append(data_channels, when(launch.has_code, [code_channel], [])),
        "OutputDataConfig": {"S3OutputPath": f"s3://{r.artifacts_bucket}/{OUTPUT_PREFIX}", "KmsKeyId": r.key_arn},
        # Types with local NVMe keep data on hardware-encrypted instance storage, and SageMaker
        # rejects a VolumeKmsKeyId for them; EBS-only types get the platform key.
        "ResourceConfig": when(launch.local_nvme, resource_config, {**resource_config, "VolumeKmsKeyId": r.key_arn}),
        # MaxWaitTimeInSeconds is only accepted together with managed spot training.
        "StoppingCondition": when(
            launch.use_spot, {**max_runtime, "MaxWaitTimeInSeconds": template.max_wait_seconds}, max_runtime
        ),
        "EnableManagedSpotTraining": launch.use_spot,
        "RetryStrategy": {"MaximumRetryAttempts": template.retry_attempts},
        "EnableNetworkIsolation": True,
        "EnableInterContainerTrafficEncryption": greater_than(launch.instance_count, 1),
        "VpcConfig": {"SecurityGroupIds": list(r.security_group_ids), "Subnets": list(r.subnet_ids)},
        "Tags": [{"Key": k, "Value": v} for k, v in template.tags.items()],
    }
    if template.checkpointing:
        request["CheckpointConfig"] = {
            # One prefix per job: a spot restart or a retry of the same job resumes from it.
            "S3Uri": concat(f"s3://{r.artifacts_bucket}/{CHECKPOINT_PREFIX}", launch.job_name, "/"),
            "LocalPath": CHECKPOINT_LOCAL_PATH,
        }
    return render(request)
