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

The launch rules are written once too, as the table :func:`training_launch_rules` (see
:mod:`stacks.components.launch_rules`): :func:`resolve_launch` evaluates it over the values the
workflow would assign (:func:`launch_variables`) and raises the workflow's refusal word for word;
:func:`launch_rules` renders it to the workflow's JSONata.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Collection, Mapping, Optional, Sequence, Union

from stacks.components import hyperparameter_rules
from stacks.components.launch_rules import (
    KEY,
    BadKeys,
    Expr,
    IfElse,
    InTable,
    Joined,
    Lit,
    Lookup,
    Matches,
    Not,
    Plus,
    Rule,
    Var,
    WholeNumber,
    all_of,
    any_of,
    contains,
    count,
    ends_with,
    eq,
    ge,
    gt,
    has_segment,
    jsonata_string,
    jsonata_type,
    key_count,
    le,
    length,
    problems,
    refusal,
    render_rules,
    starts_with,
    type_of,
)
from stacks.components.request_expressions import (  # noqa: F401 (re-exported: the helpers' old home)
    Jsonata,
    LaunchRules,
    Value,
    append,
    concat,
    greater_than,
    logical_and,
    map_items,
    merge,
    render,
    to_jsonata,
    when,
)
from stacks.config import ENTRY_POINT_PATTERN, MAX_INSTANCE_COUNT, MAX_KEEP_ALIVE_SECONDS, USER_CODE_PREFIX, PlatformConfig
from stacks.gpu_instances import SAGEMAKER_PREFIX, gpu_instance_types, lookup
from stacks.sagemaker_limits import training_job_limits

METRIC_DEFINITIONS_PATH = (
    Path(__file__).resolve().parent.parent.parent / "training_image" / "trainer" / "metric_definitions.json"
)
"""Regexes for the training container's ``[metrics] ...`` log lines; owned by the image."""

CHECKPOINT_PREFIX = "checkpoints/"
"""Same value as ``stacks.components.buckets.CHECKPOINT_PREFIX`` (the lifecycle rule's prefix).
Repeated because that module imports CDK; a unit test keeps the two equal."""

OUTPUT_PREFIX = "training-jobs/"
"""Key prefix in the artifacts bucket for job outputs (SageMaker adds ``<job>/output/``)."""

CODE_PREFIX = USER_CODE_PREFIX
"""Key prefix in the artifacts bucket for users' ``sourcedir.tar.gz`` (``code/<job>/sourcedir.tar.gz``)."""

CODE_CHANNEL = "code"
SOURCEDIR_NAME = "sourcedir.tar.gz"
"""The name of a user's code tarball, as the SageMaker SDK and ``scripts.source_code`` upload it."""
CODE_CHANNEL_SOURCEDIR = f"/opt/ml/input/data/code/{SOURCEDIR_NAME}"
"""Where the ``code`` channel puts the tarball; the SageMaker SDK uses the same path for isolated jobs."""
PROGRAM_HYPERPARAMETER = "sagemaker_program"
SUBMIT_DIRECTORY_HYPERPARAMETER = "sagemaker_submit_directory"
MULTI_WORKER_HYPERPARAMETER = "sagemaker_multi_worker_mirrored_strategy_enabled"
LEGACY_KERAS_ENV = "TF_USE_LEGACY_KERAS"
MAX_ENTRY_POINT_LENGTH = 256

CHECKPOINT_LOCAL_PATH = "/opt/ml/checkpoints"
SAGEMAKER_LOG_GROUP = "/aws/sagemaker/TrainingJobs"
"""SageMaker always writes training logs here, in streams named ``<job name>/algo-<n>-<ts>``."""

MAX_CHANNEL_URI_LENGTH = 1024
"""``S3DataSource.S3Uri`` is at most 1024 characters (SageMaker's API model)."""
MAX_JOB_NAME_LENGTH = training_job_limits().job_name.max_length
EXPECTED_GPU_COUNT_ENV = "EXPECTED_GPU_COUNT"


class LaunchError(ValueError):
    """A launch option is wrong; ``str(err)`` is one line naming the option and the fix."""


LAUNCH_TITLE = "Invalid launch options"
"""Start of a refused launch's message, from the workflow and from :func:`resolve_launch` alike."""


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
    """Facts for a ``ml.`` GPU type SageMaker trains on; :class:`LaunchError` for anything else."""
    limits = training_job_limits()
    return offered_instance_facts(instance_type, limits.training_instance_types, use="training", source=limits.source)


def instance_facts_table(allowed: Optional[Sequence[str]] = None) -> dict[str, dict[str, Any]]:
    """:func:`instance_facts` for every GPU type SageMaker trains on (only those in ``allowed``
    when given), keyed by SageMaker name (the state machine's copy)."""
    return offered_instance_facts_table(training_job_limits().training_instance_types, instance_facts, allowed)


def offered_instance_facts(instance_type: Any, offered: Collection[str], *, use: str, source: str) -> InstanceFacts:
    """Facts for a ``ml.`` GPU type of the table that SageMaker offers for ``use`` (``offered``).

    Raises:
        LaunchError: not a ``ml.`` GPU row of the table, or not offered (``source``: the model
            that says so).
    """
    row = lookup(instance_type) if isinstance(instance_type, str) and instance_type.startswith(SAGEMAKER_PREFIX) else None
    if row is None:
        raise LaunchError(
            f"instance type {instance_type!r} is not a known SageMaker GPU type; "
            "use ml. + a row of training_image/trainer/gpu_instances.json, e.g. ml.g5.xlarge"
        )
    if instance_type not in offered:
        raise LaunchError(
            f"instance type {instance_type!r} is not offered for SageMaker {use} ({source}); "
            "use another GPU type, e.g. ml.g5.xlarge"
        )
    return InstanceFacts(expected_gpu_count=str(row.gpu_count), local_nvme=row.local_nvme_gb > 0)


def offered_instance_facts_table(
    offered: Collection[str], facts: Callable[[str], InstanceFacts], allowed: Optional[Sequence[str]] = None
) -> dict[str, dict[str, Any]]:
    """``facts`` of every GPU type of the table in ``offered`` (and in ``allowed`` when given),
    keyed by SageMaker name: the state machine's copy."""
    table = {}
    for name in sorted(gpu_instance_types()):
        if SAGEMAKER_PREFIX + name not in offered or (allowed is not None and SAGEMAKER_PREFIX + name not in allowed):
            continue
        row = facts(SAGEMAKER_PREFIX + name)
        table[SAGEMAKER_PREFIX + name] = {"expected_gpu_count": row.expected_gpu_count, "local_nvme": row.local_nvme}
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
        default_keep_alive_seconds: The warm pool a launch keeps unless it overrides it (0: none).
        extra_channel_prefixes: Further key prefixes of the datasets bucket that a launch's
            ``channels`` may point into (the job role reads them too): the processing output
            prefix, where pipeline runs leave training-ready shards.
        allowed_instance_types: The types a launch may pick (``training_job.allowed_instance_types``);
            empty: every GPU type SageMaker trains on.
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
    extra_channel_prefixes: Sequence[str] = ()
    allowed_instance_types: Sequence[str] = ()
    default_keep_alive_seconds: int = 0

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
            extra_channel_prefixes=readable_processing_prefixes(config),
            allowed_instance_types=tuple(tj.allowed_instance_types),
            default_keep_alive_seconds=tj.keep_alive_seconds,
        )

    @property
    def job_name_prefix(self) -> str:
        """Every job of the project is named ``<project>-...``."""
        return f"{self.project_name}-"

    @property
    def readable_channel_prefixes(self) -> tuple[str, ...]:
        """Key prefixes of the datasets bucket the job role reads: the channels' and the extra ones."""
        return tuple(sorted({*self.channels.values(), *self.extra_channel_prefixes}))

    @property
    def default_channel_uris(self) -> dict[str, str]:
        """The configured channels as ``s3://`` URIs (a launch's ``channels`` are merged over these)."""
        return {name: f"s3://{self.resources.datasets_bucket}/{prefix}" for name, prefix in self.channels.items()}


def readable_processing_prefixes(config: PlatformConfig) -> tuple[str, ...]:
    """The processing output prefix when processing is deployed: training may read what it wrote."""
    return (config.processing.output_prefix,) if config.processing.enabled else ()


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
        channels: Channel name -> ``s3://`` URI, merged over the configured channels (a new name
            adds a channel). Every URI must lie in the datasets bucket under a prefix the job role
            reads: a configured channel prefix or ``processing.output_prefix``.
        keep_alive_seconds: Keep the instances as a warm pool this long after the job (0-3600;
            on-demand jobs only).
        checkpoint_name: The job whose checkpoint location (``checkpoints/<name>/``) this job
            uses: restores at start and writes to (``scripts.launch --resume-from``). Default: its own.
    """

    job_name: Optional[str] = None
    instance_type: Optional[str] = None
    instance_count: Optional[int] = None
    use_spot: Optional[bool] = None
    hyperparameters: Mapping[str, Any] = field(default_factory=dict)
    code_uri: Optional[str] = None
    entry_point: Optional[str] = None
    legacy_keras: Optional[bool] = None
    channels: Mapping[str, str] = field(default_factory=dict)
    keep_alive_seconds: Optional[int] = None
    checkpoint_name: Optional[str] = None

    def state_machine_input(self) -> dict[str, Any]:
        """The execution input the workflow reads: only what is overridden."""
        data: dict[str, Any] = {}
        for key in ("job_name", "instance_type", "instance_count", "use_spot", "code_uri", "entry_point", "legacy_keras",
                    "keep_alive_seconds", "checkpoint_name"):
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        if self.hyperparameters:
            data["hyperparameters"] = {k: hyperparameter_string(v) for k, v in self.hyperparameters.items()}
        if self.channels:
            data["channels"] = dict(self.channels)
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
    channels: Union[Mapping[str, str], Jsonata, None] = None
    """Channel name -> S3 URI; ``None``: the template's configured channels."""
    keep_alive_seconds: Union[int, Jsonata] = 0
    """The warm pool kept after the job (``ResourceConfig.KeepAlivePeriodInSeconds``); 0: none."""
    checkpoint_name: Union[str, Jsonata, None] = None
    """The name in the checkpoint location ``checkpoints/<name>/``; ``None``: ``job_name``."""


# --------------------------------------------------------------------------------------------
# Launch options: resolved in Python, or by the state machine
# --------------------------------------------------------------------------------------------


def default_job_name(template: JobTemplate, now: Optional[datetime] = None, suffix: str = "") -> str:
    """``<project>-YYYYmmdd-HHMMSS[-suffix]`` in UTC."""
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%d-%H%M%S")
    return f"{template.job_name_prefix}{stamp}" + (f"-{suffix}" if suffix else "")


def hyperparameter_string(value: Any) -> Any:
    """A number or boolean as the string SageMaker receives (as the workflow's ``$string``); other values as given,
    for :func:`training_launch_rules` to refuse."""
    return jsonata_string(value) if jsonata_type(value) in ("number", "boolean") else value


def code_uri_prefix(template: JobTemplate) -> str:
    """Where a launch's ``sourcedir.tar.gz`` must be: the job role may read only this prefix."""
    return f"s3://{template.resources.artifacts_bucket}/{CODE_PREFIX}"


def job_name_rule(field_name: str, variable: str, prefix: str, max_length: int, hint: str) -> Rule:
    """``variable`` is ``<prefix><letters, digits, hyphens>``, at most ``max_length`` characters."""
    name = Var(variable)
    return Rule(
        field_name,
        all_of(
            eq(type_of(name), "string"),
            le(length(name), max_length),
            Matches(name, f"^{re.escape(prefix)}[a-zA-Z0-9]+(-+[a-zA-Z0-9]+)*$"),
        ),
        (f"{field_name} ", name, f" must be {prefix}<letters, digits, hyphens>, at most {max_length} characters{hint}"),
    )


def source_rules(field_prefix: str, variables: str, code_prefix: str, role: str, flags: str) -> tuple[Rule, ...]:
    """``code_uri`` and ``entry_point`` (the variables ``<variables>code_uri`` ...) are both empty, or a
    tarball under ``code_prefix`` (what ``role`` may read) and a script inside it; ``flags``: the CLI
    options that upload the code and set both."""
    code, entry = Var(f"{variables}code_uri"), Var(f"{variables}entry_point")
    code_field, entry_field = f"{field_prefix}code_uri", f"{field_prefix}entry_point"
    strings = all_of(eq(type_of(code), "string"), eq(type_of(entry), "string"))
    return (
        Rule(
            code_field,
            all_of(strings, eq(eq(code, ""), eq(entry, ""))),
            (
                f"{code_field} ", code, f" and {entry_field} ", entry, ": a script needs both its code and its entry"
                f" point, as strings ({flags})",
            ),
        ),
        Rule(
            code_field,
            # SageMaker puts an input of one object at <local path>/<its name>, and the platform's
            # submit directory is <local path>/sourcedir.tar.gz: another name is a job that fails once billed.
            any_of(Not(strings), eq(code, ""), all_of(starts_with(code, code_prefix), ends_with(code, f"/{SOURCEDIR_NAME}"))),
            (
                f"{code_field} ", code, f" must be a {SOURCEDIR_NAME} under {code_prefix} (the only code the {role} may"
                f" read, under the name the job unpacks): {flags} uploads it there",
            ),
        ),
        Rule(
            entry_field,
            any_of(
                Not(strings),
                eq(entry, ""),
                all_of(le(length(entry), MAX_ENTRY_POINT_LENGTH), Matches(entry, ENTRY_POINT_PATTERN), Not(contains(entry, ".."))),
            ),
            (
                f"{entry_field} ", entry, " must be a .py or .sh file's path inside the source directory"
                f" (letters, digits, _ . / -, no '..', at most {MAX_ENTRY_POINT_LENGTH} characters)",
            ),
        ),
    )


def training_launch_rules(template: JobTemplate) -> tuple[Rule, ...]:
    """Every launch option's rule, over the variables of :func:`state_machine_assignments`: the one
    table that :func:`resolve_launch` evaluates and :func:`launch_rules` renders for the workflow."""
    limits = training_job_limits()
    prefix = template.job_name_prefix
    hyperparameters, channels = Var("hyperparameters"), Var("channels")
    is_object = eq(type_of(hyperparameters), "object")
    sent = Plus(key_count(hyperparameters), _platform_hyperparameter_count(Var("code_uri"), Var("instance_count")))
    value = Lookup(hyperparameters, KEY)
    bad_hyperparameters = BadKeys(
        hyperparameters,
        all_of(
            eq(type_of(value), "string"),
            le(length(value), limits.hyperparameter_value.max_length),
            le(length(KEY), limits.hyperparameter_name.max_length),
        ),
    )
    allowed = template.allowed_instance_types
    spot = Var("use_spot")
    return (
        job_name_rule("job_name", "job_name", prefix, MAX_JOB_NAME_LENGTH, f", as the workflow's role may only create {prefix}* jobs (scripts.launch --name)"),
        _checkpoint_name_rule(prefix),
        Rule(
            "instance_type",
            all_of(eq(type_of(Var("instance_type")), "string"), InTable(Var("instance_facts"), Var("instance_type"))),
            (
                "instance_type ", Var("instance_type"), " must be a SageMaker training GPU type from the table"
                " (ml. + a row of training_image/trainer/gpu_instances.json, e.g. ml.g5.xlarge, scripts.launch --instance-type)"
                + (f" that this deployment allows (training_job.allowed_instance_types: {', '.join(allowed)})" if allowed else ""),
            ),
        ),
        Rule(
            "instance_count",
            all_of(WholeNumber(Var("instance_count")), ge(Var("instance_count"), 1), le(Var("instance_count"), MAX_INSTANCE_COUNT)),
            (
                "instance_count ", Var("instance_count"),
                f" must be a whole number from 1 to {MAX_INSTANCE_COUNT} (scripts.launch --instance-count)",
            ),
        ),
        Rule(
            "use_spot",
            all_of(eq(type_of(spot), "boolean"), *(() if template.checkpointing else (eq(spot, False),))),
            ("use_spot ", spot, " must be true or false")
            if template.checkpointing
            else (
                "use_spot ", spot, " must be false: this deployment has checkpointing off, so an interrupted job would"
                " restart from scratch: launch on demand (scripts.launch --on-demand) or deploy with training_job.checkpointing=true",
            ),
        ),
        *_spot_wait_rules(template, spot),
        Rule(
            "hyperparameters",
            is_object,
            ("hyperparameters must be an object of names to values, not ", type_of(hyperparameters)),
        ),
        Rule(
            "hyperparameters",
            any_of(Not(is_object), le(sent, limits.max_hyperparameters)),
            (
                "hyperparameters has ", sent, " entries as sent (the config's and --hp together, and with a script the"
                f" platform's {hyperparameter_rules.PLATFORM_PREFIX}* ones), SageMaker accepts at most"
                f" {limits.max_hyperparameters}: drop some, or pass them in one value the training script parses",
            ),
        ),
        Rule(
            "hyperparameters",
            any_of(Not(is_object), eq(count(bad_hyperparameters), 0)),
            (
                "hyperparameters ", Joined(bad_hyperparameters), " must be strings, numbers or booleans of at most"
                f" {limits.hyperparameter_value.max_length} characters, with names of at most"
                f" {limits.hyperparameter_name.max_length} (SageMaker's limits)",
            ),
        ),
        *hyperparameter_rules.workflow_rules(hyperparameters, eq(Var("code_uri"), "")),
        *_keep_alive_rules(Var("keep_alive_seconds"), spot),
        Rule(
            "legacy_keras",
            eq(type_of(Var("legacy_keras")), "boolean"),
            ("legacy_keras ", Var("legacy_keras"), " must be true or false"),
        ),
        *source_rules("", "", code_uri_prefix(template), "job role", "scripts.launch --source-dir DIR --entry-point train.py"),
        *_channel_rules(template, channels),
        # Last, where a direct launch gives the image's check after the table's reasons.
        hyperparameter_rules.batch_split_rule(
            hyperparameters, eq(Var("code_uri"), ""), hyperparameter_rules.workflow_replicas(MAX_INSTANCE_COUNT),
            Var(hyperparameter_rules.BATCH_TUNED),
        ),
    )


def _checkpoint_name_rule(prefix: str) -> Rule:
    """``checkpoint_name`` is the job's own name (said once, by ``job_name``'s rule), or another of the project's
    job names: the job whose checkpoint location the launch continues from."""
    rule = job_name_rule(
        "checkpoint_name", "checkpoint_name", prefix, MAX_JOB_NAME_LENGTH,
        f": the name of a {prefix}* job whose checkpoint location checkpoints/<name>/ this job continues from"
        " (scripts.launch --resume-from JOB)",
    )
    return replace(rule, condition=any_of(eq(Var("checkpoint_name"), Var("job_name")), rule.condition))


def _platform_hyperparameter_count(code_uri: Var, instance_count: Var) -> Expr:
    """How many hyperparameters :func:`training_job_request_values` adds to the launch's: with a script
    (``code_uri`` set) its program and submit directory, and on several instances the multi-worker flag."""
    has_code = all_of(eq(type_of(code_uri), "string"), Not(eq(code_uri, "")))
    several = all_of(has_code, WholeNumber(instance_count), gt(instance_count, 1))
    return Plus(IfElse(has_code, Lit(2), Lit(0)), IfElse(several, Lit(1), Lit(0)))


def _spot_wait_rules(template: JobTemplate, spot: Var) -> tuple[Rule, ...]:
    """A managed spot job waits at most ``max_wait_seconds``, which SageMaker wants at least ``max_runtime_seconds``:
    where the deployment's runtime is longer, a launch may not ask for spot (with checkpointing off the
    ``use_spot`` rule refuses spot already)."""
    if not template.checkpointing or template.max_runtime_seconds <= template.max_wait_seconds:
        return ()
    runtime, wait = template.max_runtime_seconds, template.max_wait_seconds
    return (
        Rule(
            "use_spot",
            Not(eq(spot, True)),
            (
                "use_spot ", spot, f" needs training_job.max_runtime_seconds ({runtime}) no more than"
                f" training_job.max_wait_seconds ({wait}), which SageMaker requires of managed spot: launch on demand"
                f" (scripts.launch --on-demand), or deploy with training_job.max_wait_seconds={runtime} or a lower"
                " max_runtime_seconds",
            ),
        ),
    )


def _keep_alive_rules(keep: Var, spot: Var) -> tuple[Rule, ...]:
    """``keep_alive_seconds`` is 0-3600, and 0 for a managed spot job (SageMaker keeps no warm pool for one)."""
    whole = WholeNumber(keep)
    return (
        Rule(
            "keep_alive_seconds",
            all_of(whole, ge(keep, 0), le(keep, MAX_KEEP_ALIVE_SECONDS)),
            ("keep_alive_seconds ", keep, f" must be a whole number of seconds from 0 to {MAX_KEEP_ALIVE_SECONDS} (scripts.launch --keep-alive)"),
        ),
        Rule(
            "keep_alive_seconds",
            any_of(Not(whole), Not(eq(spot, True)), le(keep, 0)),
            (
                "keep_alive_seconds ", keep, " needs an on-demand job: SageMaker keeps no warm pool for managed spot"
                " (scripts.launch --on-demand, or --keep-alive 0)",
            ),
        ),
    )


def _channel_rules(template: JobTemplate, channels: Var) -> tuple[Rule, ...]:
    """The ``channels`` rules of :func:`training_launch_rules`."""
    limits = training_job_limits()
    allowed = [f"s3://{template.resources.datasets_bucket}/{p}" for p in template.readable_channel_prefixes]
    is_object = eq(type_of(channels), "object")
    has_code = Not(eq(Var("code_uri"), ""))
    uri = Lookup(channels, KEY)
    bad = BadKeys(
        channels,
        all_of(
            le(length(KEY), limits.channel_name.max_length),
            Matches(KEY, "^[A-Za-z0-9.\\-_]+$"),
            Not(all_of(has_code, eq(KEY, CODE_CHANNEL))),
            eq(type_of(uri), "string"),
            le(length(uri), MAX_CHANNEL_URI_LENGTH),
            any_of(*(starts_with(uri, a) for a in allowed)),
            Not(has_segment(uri, "..")),
        ),
    )
    total = Plus(key_count(channels), IfElse(has_code, Lit(1), Lit(0)))
    return (
        Rule("channels", is_object, ("channels must be an object of channel names to s3:// URIs, not ", type_of(channels))),
        Rule(
            "channels",
            any_of(Not(is_object), eq(count(bad), 0)),
            (
                "channels ", Joined(bad), f" must be named with letters, digits, . - _ (not {CODE_CHANNEL} with a script)"
                f" and lie under one of {', '.join(allowed)} (what the job role may read),"
                f" at most {MAX_CHANNEL_URI_LENGTH} characters",
            ),
        ),
        Rule(
            "channels",
            any_of(Not(is_object), le(total, limits.max_channels)),
            ("channels: ", total, f" input channels, SageMaker accepts at most {limits.max_channels}: pass fewer channels"),
        ),
    )


def check_template_limits(template: JobTemplate) -> None:
    """SageMaker's limits on the template's own channels and tags (from botocore's model).

    Raises:
        LaunchError: one line naming what is over which limit.
    """
    limits = training_job_limits()
    if len(template.channels) > limits.max_channels:
        raise LaunchError(
            f"{len(template.channels)} input channels; SageMaker accepts at most {limits.max_channels}: "
            "change training_job.channels"
        )
    for name in template.channels:
        problem = limits.channel_name.problem(name)
        if problem:
            raise LaunchError(f"channel name {name!r} {problem}: change training_job.channels")
    if len(template.tags) > limits.max_tags:
        raise LaunchError(f"{len(template.tags)} tags; SageMaker accepts at most {limits.max_tags} per job: change tags")
    for key, value in template.tags.items():
        for what, text, rule in (("key", key, limits.tag_key), ("value", value, limits.tag_value)):
            problem = rule.problem(text)
            if problem:
                raise LaunchError(f"tag {key!r}: the {what} {problem}: change tags")


def launch_variables(
    template: JobTemplate, options: LaunchOptions, *, now: Optional[datetime] = None, tuned: Collection[str] = ()
) -> dict[str, Any]:
    """The workflow's variables for ``options``, computed as :func:`state_machine_assignments` assigns them
    (a tuning launch's as its Tune task's assignments do: without the ``tuned`` hyperparameters, which
    every trial gets from its ranges instead of the configured defaults)."""
    given = options.hyperparameters
    # The configured hyperparameters are the built-in trainer's; a user's script gets only its own.
    hyperparameters: Any = {} if options.code_uri is not None else dict(template.default_hyperparameters)
    if isinstance(given, Mapping):
        hyperparameters = {**hyperparameters, **{k: hyperparameter_string(v) for k, v in given.items()}}
        hyperparameters = {k: v for k, v in hyperparameters.items() if k not in tuned}
    else:
        hyperparameters = given
    channels = options.channels
    job_name = default_job_name(template, now) if options.job_name is None else options.job_name
    return {
        "job_name": job_name,
        "instance_type": template.default_instance_type if options.instance_type is None else options.instance_type,
        "instance_count": template.default_instance_count if options.instance_count is None else options.instance_count,
        "use_spot": template.default_use_spot if options.use_spot is None else options.use_spot,
        "hyperparameters": hyperparameters,
        "code_uri": "" if options.code_uri is None else options.code_uri,
        "entry_point": "" if options.entry_point is None else options.entry_point,
        "legacy_keras": False if options.legacy_keras is None else options.legacy_keras,
        "keep_alive_seconds": template.default_keep_alive_seconds if options.keep_alive_seconds is None else options.keep_alive_seconds,
        "channels": {**template.default_channel_uris, **channels} if isinstance(channels, Mapping) else channels,
        "checkpoint_name": job_name if options.checkpoint_name is None else options.checkpoint_name,
        "instance_facts": instance_facts_table(template.allowed_instance_types or None),
        hyperparameter_rules.BATCH_TUNED: bool(set(tuned) & hyperparameter_rules.BATCH_SETTERS),
    }


def resolve_launch(
    template: JobTemplate, options: LaunchOptions, *, now: Optional[datetime] = None, tuned: Collection[str] = ()
) -> LaunchValues:
    """Apply ``options`` over the template's defaults and check them (the direct path). ``tuned``: a
    tuning launch's ranges, left out of the hyperparameters before they are checked (the configured
    ``batch_size`` is not what a trial runs when it is tuned).

    Raises:
        LaunchError: the workflow's refusal, word for word: every broken rule's reason.
    """
    check_template_limits(template)
    values = launch_variables(template, options, now=now, tuned=tuned)
    reasons = problems([rule for rule in training_launch_rules(template) if not rule.full_check_covers], values)
    reasons += _hyperparameter_problems(values, batch_tuned=values[hyperparameter_rules.BATCH_TUNED])
    if reasons:
        raise LaunchError(refusal(LAUNCH_TITLE, reasons))
    facts = values["instance_facts"][values["instance_type"]]
    return LaunchValues(
        job_name=values["job_name"],
        instance_type=values["instance_type"],
        instance_count=values["instance_count"],
        use_spot=values["use_spot"],
        hyperparameters=values["hyperparameters"],
        expected_gpu_count=facts["expected_gpu_count"],
        local_nvme=facts["local_nvme"],
        code_uri=values["code_uri"],
        entry_point=values["entry_point"],
        legacy_keras=values["legacy_keras"],
        has_code=values["code_uri"] != "",
        channels=values["channels"],
        keep_alive_seconds=values["keep_alive_seconds"],
        checkpoint_name=values["checkpoint_name"],
    )


def _hyperparameter_problems(values: Mapping[str, Any], *, batch_tuned: bool = False) -> list[str]:
    """:func:`hyperparameter_rules.problems` over the launch's variables, once the rules have found them
    well formed (an object of strings; the batch split over a known instance type and count). With
    ``batch_tuned`` (a tuning launch's ranges set the global batch in every trial) the split is not
    checked here, at a batch no trial runs: the ranges' own check (``range_problems``) does it."""
    hyperparameters = values["hyperparameters"]
    if not isinstance(hyperparameters, Mapping) or not all(isinstance(v, str) for v in hyperparameters.values()):
        return []
    facts = values["instance_facts"].get(values["instance_type"]) if isinstance(values["instance_type"], str) else None
    count = values["instance_count"]
    well_formed = facts is not None and isinstance(count, int) and not isinstance(count, bool) and 1 <= count <= MAX_INSTANCE_COUNT
    split = well_formed and not batch_tuned  # checked over the job's replicas, or (1, 1): no split to check
    return hyperparameter_rules.problems(
        hyperparameters,
        user_script=values["code_uri"] != "",
        instance_count=count if split else 1,
        gpus_per_instance=int(facts["expected_gpu_count"]) if split else 1,
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
    channels=Jsonata("$channels"),
    keep_alive_seconds=Jsonata("$keep_alive_seconds"),
    checkpoint_name=Jsonata("$checkpoint_name"),
)
"""The launch values as the workflow's variables (assigned by :func:`state_machine_assignments`)."""


def _input_or(key: str, default: str, source: str = "$states.input") -> str:
    return f"{{% $exists({source}.{key}) ? {source}.{key} : {default} %}}"


def state_machine_assignments(template: JobTemplate, source: str = "$states.input", job_name_suffix: str = "") -> dict[str, Any]:
    """``Assign`` of the workflow's first state: execution input over the baked-in defaults.

    The execution input may carry ``job_name``, ``instance_type``, ``instance_count``,
    ``use_spot``, ``hyperparameters`` (merged over the defaults, numbers and booleans made
    strings), ``code_uri``, ``entry_point`` and ``legacy_keras``, the same options as
    :class:`LaunchOptions`. Without ``job_name`` the job is named ``<project>-<execution name>``.
    ``hyperparameters`` that is not an object (an array, a string...) is kept as given, so that
    :func:`launch_rules` refuses it with a reason rather than the assignment failing
    with a JSONata error. The configured hyperparameters are the built-in trainer's: a launch
    with ``code_uri`` (a user's script) gets only its own. ``channels`` (name -> S3 URI) is merged
    over the configured channels.

    Args:
        template: The job template.
        source: JSONata path of the options object: the execution input (the training
            workflow), or a variable holding the pipeline's ``train`` options.
        job_name_suffix: Appended to the default job name (``train`` in the pipeline:
            ``<project>-<execution name>-train``).
    """
    given = f"{source}.hyperparameters"
    given_channels = f"{source}.channels"
    default_channels = to_jsonata(template.default_channel_uris)
    stringified = f"$each({given}, function($v, $k) {{{{$k: $type($v) in ['number', 'boolean'] ? $string($v) : $v}}}})"
    defaults = f"($exists({source}.code_uri) ? {{}} : {to_jsonata(dict(template.default_hyperparameters))})"
    merged = f"$merge($append([{defaults}], {stringified}))"
    suffix = f" & {json.dumps('-' + job_name_suffix)}" if job_name_suffix else ""
    job_name = _input_or("job_name", f"{json.dumps(template.job_name_prefix)} & $states.context.Execution.Name{suffix}", source)
    return {
        "job_name": job_name,
        # An Assign's values are computed before any is assigned: the job name's own expression.
        "checkpoint_name": _input_or("checkpoint_name", f"({job_name.removeprefix('{% ').removesuffix(' %}')})", source),
        "instance_type": _input_or("instance_type", json.dumps(template.default_instance_type), source),
        "instance_count": _input_or("instance_count", json.dumps(template.default_instance_count), source),
        "use_spot": _input_or("use_spot", json.dumps(template.default_use_spot), source),
        "hyperparameters": "{% "
        + f"$not($exists({given})) ? {defaults}"
        + f" : $type({given}) = 'object' ? {merged} : {given}"
        + " %}",
        "code_uri": _input_or("code_uri", '""', source),
        "entry_point": _input_or("entry_point", '""', source),
        "legacy_keras": _input_or("legacy_keras", "false", source),
        "keep_alive_seconds": _input_or("keep_alive_seconds", json.dumps(template.default_keep_alive_seconds), source),
        "channels": "{% "
        + f"$not($exists({given_channels})) ? {default_channels}"
        + f" : $type({given_channels}) = 'object' ? $merge([{default_channels}, {given_channels}]) : {given_channels}"
        + " %}",
        "instance_facts": instance_facts_table(template.allowed_instance_types or None),
        # A tuning launch's assignments (tuning_state_machine_assignments) set it where the ranges set the batch.
        hyperparameter_rules.BATCH_TUNED: "{% false %}",
    }


def launch_rules(template: JobTemplate) -> LaunchRules:
    """:func:`training_launch_rules` in JSONata: the workflow checks the resolved variables with them and
    refuses with each broken rule's reason (the pipeline combines the rules with its own)."""
    return render_rules(training_launch_rules(template), LAUNCH_TITLE)


# --------------------------------------------------------------------------------------------
# The request
# --------------------------------------------------------------------------------------------


def create_training_job_request(template: JobTemplate, launch: LaunchValues) -> dict[str, Any]:
    """The CreateTrainingJob request (boto3 keyword arguments / the task's ``Arguments``).

    With concrete :class:`LaunchValues` the result is plain data for
    ``sagemaker.create_training_job(**request)``; with :data:`STATE_MACHINE_VALUES` it holds
    ``{% %}`` expressions for the state machine.
    """
    return render(training_job_request_values(template, launch))


def training_job_request_values(template: JobTemplate, launch: LaunchValues) -> dict[str, Any]:
    """:func:`create_training_job_request` before :func:`render`: each run-time value still a
    :class:`Jsonata`, for a request that wraps this one (a tuning job's ``TrainingJobDefinition``)."""
    r = template.resources
    resource_config = {
        "InstanceType": launch.instance_type,
        "InstanceCount": launch.instance_count,
        "VolumeSizeInGB": template.volume_size_gb,
    }
    # A managed warm pool: the instances stay (and bill) this long after the job, for the next one.
    warm_pool = when(greater_than(launch.keep_alive_seconds, 0), {"KeepAlivePeriodInSeconds": launch.keep_alive_seconds}, {})
    max_runtime = {"MaxRuntimeInSeconds": template.max_runtime_seconds}
    data_channels = map_items(
        template.default_channel_uris if launch.channels is None else launch.channels,
        lambda name, uri: {
            "ChannelName": name,
            "DataSource": {
                "S3DataSource": {
                    "S3DataType": "S3Prefix",
                    "S3Uri": uri,
                    "S3DataDistributionType": "FullyReplicated",
                }
            },
            "InputMode": template.input_mode,
        },
    )
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
        # sets, from the checked code_uri and entry_point. The launch rules refuse a launch's own
        # sagemaker_* keys; the platform's come last all the same, so none could override them.
        "HyperParameters": merge(
            launch.hyperparameters,
            when(
                launch.has_code,
                {PROGRAM_HYPERPARAMETER: launch.entry_point, SUBMIT_DIRECTORY_HYPERPARAMETER: CODE_CHANNEL_SOURCEDIR},
                {},
            ),
            when(logical_and(launch.has_code, greater_than(launch.instance_count, 1)), {MULTI_WORKER_HYPERPARAMETER: "true"}, {}),
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
        "ResourceConfig": merge(when(launch.local_nvme, resource_config, {**resource_config, "VolumeKmsKeyId": r.key_arn}), warm_pool),
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
            # One prefix per job: a spot restart or a retry of the same job resumes from it; a launch
            # --resume-from JOB takes JOB's, to continue from its checkpoints.
            "S3Uri": concat(
                f"s3://{r.artifacts_bucket}/{CHECKPOINT_PREFIX}",
                launch.job_name if launch.checkpoint_name is None else launch.checkpoint_name,
                "/",
            ),
            "LocalPath": CHECKPOINT_LOCAL_PATH,
        }
    return request
