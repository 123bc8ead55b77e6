"""The one CreateProcessingJob request: built here for the pipeline state machine and for a direct launch.

Pure Python (no CDK import), so the operator scripts can import it without starting jsii.

Like :mod:`stacks.components.training_job_spec`, the request is written once, in
:func:`create_processing_job_request`. What a run may override arrives as
:class:`ProcessingValues`: concrete values (a direct launch, from :func:`resolve_processing`) or
the pipeline's JSONata variables (:data:`STATE_MACHINE_PROCESSING_VALUES`, assigned by
:func:`processing_state_machine_assignments` and checked by :func:`processing_launch_rules`, the
JSONata rendering of the one rule table :func:`processing_rules`, which :func:`resolve_processing`
evaluates in Python).
Shape decisions that depend on an override (the volume key for types with local NVMe, sharding
and encryption with more than one instance, container arguments only when there are some, the
code input of a user's script) go through the shared helpers of
:mod:`stacks.components.request_expressions`, so the two paths cannot drift.

The container contract (``training_image/trainer/process/``): the image runs as
``python3 -m trainer process [ARGS...]``; the raw input is at ``/opt/ml/processing/input/raw``,
a user's ``sourcedir.tar.gz`` at ``/opt/ml/processing/input/code``; the outputs ``train`` and
``validation`` are uploaded at the end of the job to ``<output_prefix><job name>/train/`` and
``.../validation/`` in the datasets bucket.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from types import MappingProxyType
from typing import Any, Mapping, Optional, Sequence, Union

from stacks.components.launch_rules import (
    ITEM,
    InTable,
    Not,
    Rule,
    Var,
    WholeNumber,
    all_of,
    any_of,
    count as count_of,
    eq,
    every_item,
    ge,
    has_segment,
    le,
    length,
    problems,
    refusal,
    render_rules,
    starts_with,
    type_of,
)
from stacks.components.request_expressions import (
    Jsonata,
    LaunchRules,
    append,
    concat,
    greater_than,
    merge,
    render,
    to_jsonata,
    when,
)
from stacks.components.training_job_spec import (
    CODE_PREFIX,
    EXPECTED_GPU_COUNT_ENV,
    InstanceFacts,
    JobResources,
    LaunchError,
    job_name_rule,
    offered_instance_facts,
    offered_instance_facts_table,
    source_rules,
)
from stacks.config import PlatformConfig
from stacks.sagemaker_limits import processing_job_limits

CONTAINER_ENTRYPOINT = ("python3", "-m", "trainer", "process")
"""``AppSpecification.ContainerEntrypoint``: the image's processing mode."""

PROCESSING_ROOT = "/opt/ml/processing"
RAW_INPUT = "raw"
CODE_INPUT = "code"
TRAIN_OUTPUT = "train"
VALIDATION_OUTPUT = "validation"
OUTPUT_NAMES = (TRAIN_OUTPUT, VALIDATION_OUTPUT)
CODE_SOURCEDIR = f"{PROCESSING_ROOT}/input/{CODE_INPUT}/sourcedir.tar.gz"
"""Where the ``code`` input puts a user's tarball (``SAGEMAKER_SUBMIT_DIRECTORY``)."""
PROGRAM_ENV = "SAGEMAKER_PROGRAM"
SUBMIT_DIRECTORY_ENV = "SAGEMAKER_SUBMIT_DIRECTORY"

SAGEMAKER_PROCESSING_LOG_GROUP = "/aws/sagemaker/ProcessingJobs"
"""SageMaker writes processing logs here, in streams named ``<job name>/algo-<n>-<ts>``."""

MAX_JOB_NAME_LENGTH = processing_job_limits().job_name.max_length
JOB_NAME_SUFFIX = "process"
"""A pipeline's processing job is ``<project>-<execution name>-process``."""

PROCESSING_TITLE = "Invalid processing options"
"""Start of a refused run's message, from the pipeline and from :func:`resolve_processing` alike."""


# --------------------------------------------------------------------------------------------
# What a processing job is made of
# --------------------------------------------------------------------------------------------


def _processing_facts(instance_type: str) -> InstanceFacts:
    limits = processing_job_limits()
    return offered_instance_facts(instance_type, limits.processing_instance_types, use="Processing", source=limits.source)


def processing_instance_facts_table(allowed: Optional[Sequence[str]] = None) -> dict[str, dict[str, Any]]:
    """Facts of every GPU type offered for processing (only those in
    ``allowed`` when given): the state machine's copy."""
    return offered_instance_facts_table(processing_job_limits().processing_instance_types, _processing_facts, allowed)


@dataclass(frozen=True)
class ProcessingTemplate:
    """Everything about a processing job that is fixed at deploy time, plus the defaults.

    Build it with :meth:`from_config`.

    Attributes:
        project_name: Job names start with ``<project_name>-``.
        resources: The deployed resources (``role_arn`` is the processing role).
        input_prefix: Key prefix of raw data in the datasets bucket (the role reads only this).
        output_prefix: Key prefix of processed data (the role writes only this).
        volume_size_gb: ML storage volume per instance.
        max_runtime_seconds: ``StoppingCondition.MaxRuntimeInSeconds``.
        tags: Tags on every job.
        default_instance_type: Used when a run does not override it.
        default_instance_count: Used when a run does not override it.
        default_arguments: The built-in transform's container arguments when a run gives none.
        allowed_instance_types: The types a run may pick (``processing.allowed_instance_types``);
            empty: every GPU type offered for processing.
    """

    project_name: str
    resources: JobResources
    input_prefix: str
    output_prefix: str
    volume_size_gb: int
    max_runtime_seconds: int
    tags: Mapping[str, str]
    default_instance_type: str
    default_instance_count: int
    default_arguments: Sequence[str]
    allowed_instance_types: Sequence[str] = ()

    @classmethod
    def from_config(cls, config: PlatformConfig, resources: JobResources) -> "ProcessingTemplate":
        """The template for ``config.processing`` with ``resources`` (role: the processing role)."""
        pr = config.processing
        return cls(
            project_name=config.project_name,
            resources=resources,
            input_prefix=pr.input_prefix,
            output_prefix=pr.output_prefix,
            volume_size_gb=pr.volume_size_gb,
            max_runtime_seconds=pr.max_runtime_seconds,
            tags=MappingProxyType({"Project": config.project_name, **config.tags}),
            default_instance_type=pr.instance_type,
            default_instance_count=pr.instance_count,
            default_arguments=tuple(pr.arguments),
            allowed_instance_types=tuple(pr.allowed_instance_types),
        )

    @property
    def job_name_prefix(self) -> str:
        """Every job of the project is named ``<project>-...``."""
        return f"{self.project_name}-"

    @property
    def input_uri_prefix(self) -> str:
        """Raw inputs must lie under this URI: the processing role may read nothing else."""
        return f"s3://{self.resources.datasets_bucket}/{self.input_prefix}"

    @property
    def code_uri_prefix(self) -> str:
        """A user's ``sourcedir.tar.gz`` must lie under this URI (the role reads only ``code/``)."""
        return f"s3://{self.resources.artifacts_bucket}/{CODE_PREFIX}"


def processing_output_uri(template: ProcessingTemplate, job_name: Union[str, Jsonata]) -> Union[str, Jsonata]:
    """``s3://<datasets bucket>/<output_prefix><job>/``: the run's outputs are ``train/`` and ``validation/`` below it."""
    return concat(f"s3://{template.resources.datasets_bucket}/{template.output_prefix}", job_name, "/")


@dataclass(frozen=True)
class ProcessingOptions:
    """What one run may override; ``None`` keeps the template's default.

    Attributes:
        job_name: Full job name (``<project>-...``, at most 63 characters). Default: generated.
        instance_type: SageMaker GPU type offered for processing.
        instance_count: Instances (1-100); above 1 the raw input is sharded by S3 key.
        input_uri: ``s3://<datasets bucket>/<input_prefix>...``. Default: the whole input prefix.
        arguments: Container arguments (the built-in transform's ``--shards 4``..., or a user
            script's argv). Default: the config's ``processing.arguments`` for the built-in
            transform, none for a user's script.
        code_uri: ``s3://<artifacts bucket>/code/.../sourcedir.tar.gz``: run the user's script
            from it (script mode). ``None``: the built-in transform.
        entry_point: The script inside the tarball (``prep.py``); required with ``code_uri``.
    """

    job_name: Optional[str] = None
    instance_type: Optional[str] = None
    instance_count: Optional[int] = None
    input_uri: Optional[str] = None
    arguments: Optional[Sequence[str]] = None
    code_uri: Optional[str] = None
    entry_point: Optional[str] = None

    def state_machine_input(self) -> dict[str, Any]:
        """The pipeline's ``process`` input: only what is overridden."""
        data: dict[str, Any] = {}
        for key in ("job_name", "instance_type", "instance_count", "input_uri", "code_uri", "entry_point"):
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        if self.arguments is not None:
            data["arguments"] = list(self.arguments)
        return data


@dataclass(frozen=True)
class ProcessingValues:
    """The varying inputs of the request: all concrete, or all JSONata (see module docstring)."""

    job_name: Union[str, Jsonata]
    instance_type: Union[str, Jsonata]
    instance_count: Union[int, Jsonata]
    input_uri: Union[str, Jsonata]
    arguments: Union[Sequence[str], Jsonata]
    expected_gpu_count: Union[str, Jsonata]
    local_nvme: Union[bool, Jsonata]
    code_uri: Union[str, Jsonata] = ""
    entry_point: Union[str, Jsonata] = ""
    has_code: Union[bool, Jsonata] = False
    has_arguments: Union[bool, Jsonata] = False


# --------------------------------------------------------------------------------------------
# Options: resolved in Python, or by the state machine
# --------------------------------------------------------------------------------------------


def default_processing_job_name(template: ProcessingTemplate, now: Optional[datetime] = None) -> str:
    """``<project>-YYYYmmdd-HHMMSS-process`` in UTC."""
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%d-%H%M%S")
    return f"{template.job_name_prefix}{stamp}-{JOB_NAME_SUFFIX}"


def processing_rules(template: ProcessingTemplate) -> tuple[Rule, ...]:
    """Every processing option's rule, over the variables of :func:`processing_state_machine_assignments`:
    the one table that :func:`resolve_processing` evaluates and :func:`processing_launch_rules` renders."""
    limits = processing_job_limits()
    input_prefix = template.input_uri_prefix
    arg_max = limits.container_argument.max_length
    count, code_uri = Var("process_instance_count"), Var("process_code_uri")
    input_uri, arguments = Var("process_input_uri"), Var("process_arguments")
    allowed = template.allowed_instance_types
    return (
        job_name_rule(
            "process.job_name", "process_job_name", template.job_name_prefix, MAX_JOB_NAME_LENGTH,
            " (a long execution name makes the default too long)",
        ),
        Rule(
            "process.instance_type",
            all_of(
                eq(type_of(Var("process_instance_type")), "string"),
                InTable(Var("process_instance_facts"), Var("process_instance_type")),
            ),
            (
                "process.instance_type ", Var("process_instance_type"), " must be a GPU type SageMaker Processing offers,"
                " from the table (ml.*, scripts.launch --process-instance-type)"
                + (f" that this deployment allows (processing.allowed_instance_types: {', '.join(allowed)})" if allowed else ""),
            ),
        ),
        Rule(
            "process.instance_count",
            all_of(WholeNumber(count), ge(count, 1), le(count, limits.max_instance_count)),
            (
                "process.instance_count ", count,
                f" must be a whole number from 1 to {limits.max_instance_count} (scripts.launch --process-instance-count)",
            ),
        ),
        Rule(
            # The built-in transform's shards, manifests and statistics are one host's (the container
            # refuses several hosts too, but only once the instances are up and billed).
            "process.instance_count",
            any_of(Not(eq(type_of(count), "number")), eq(count, 1), all_of(eq(type_of(code_uri), "string"), Not(eq(code_uri, "")))),
            (
                "process.instance_count ", count, ": the built-in transform runs on one instance (processing.instance_count,"
                " --process-instance-count), several need your own processing script (code_uri and entry_point,"
                " --process-source-dir/--process-entry-point)",
            ),
        ),
        Rule(
            "process.input_uri",
            all_of(
                eq(type_of(input_uri), "string"),
                le(length(input_uri), limits.s3_uri.max_length),
                starts_with(input_uri, input_prefix),
                Not(has_segment(input_uri, "..")),
            ),
            (
                "process.input_uri ", input_uri, f" must lie under {input_prefix} (processing.input_prefix: the only raw"
                f" data the processing role may read), at most {limits.s3_uri.max_length} characters: upload the raw data there"
                " (scripts.launch --input-uri)",
            ),
        ),
        Rule(
            "process.arguments",
            all_of(
                eq(type_of(arguments), "array"),
                le(count_of(arguments), limits.max_container_arguments),
                every_item(arguments, all_of(eq(type_of(ITEM), "string"), le(length(ITEM), arg_max))),
            ),
            (
                f"process.arguments must be a list of at most {limits.max_container_arguments} strings of at most"
                f" {arg_max} characters, e.g. [\"--shards\", \"4\"] (scripts.launch --process-arg), not ", arguments,
            ),
        ),
        *source_rules(
            "process.", "process_", template.code_uri_prefix, "processing role",
            "scripts.launch --process-source-dir DIR --process-entry-point prep.py",
        ),
    )


def processing_variables(
    template: ProcessingTemplate, options: ProcessingOptions, *, now: Optional[datetime] = None
) -> dict[str, Any]:
    """The pipeline's ``process_*`` variables for ``options``, as :func:`processing_state_machine_assignments` assigns them."""
    code_uri = options.code_uri
    # A user's script gets only its own arguments.
    default_arguments = [] if code_uri is not None and code_uri != "" else list(template.default_arguments)
    return {
        "process_job_name": default_processing_job_name(template, now) if options.job_name is None else options.job_name,
        "process_instance_type": template.default_instance_type if options.instance_type is None else options.instance_type,
        "process_instance_count": template.default_instance_count if options.instance_count is None else options.instance_count,
        "process_input_uri": template.input_uri_prefix if options.input_uri is None else options.input_uri,
        "process_arguments": default_arguments if options.arguments is None else options.arguments,
        "process_code_uri": "" if code_uri is None else code_uri,
        "process_entry_point": "" if options.entry_point is None else options.entry_point,
        "process_instance_facts": processing_instance_facts_table(template.allowed_instance_types or None),
    }


def resolve_processing(
    template: ProcessingTemplate, options: ProcessingOptions, *, now: Optional[datetime] = None
) -> ProcessingValues:
    """Apply ``options`` over the template's defaults and check them (the direct path).

    Raises:
        LaunchError: the pipeline's refusal of these options, word for word: every broken rule's reason.
    """
    limits = processing_job_limits()
    if len(template.tags) > limits.max_tags:
        raise LaunchError(f"{len(template.tags)} tags; SageMaker accepts at most {limits.max_tags} per job: change tags")
    values = processing_variables(template, options, now=now)
    reasons = problems(processing_rules(template), values)
    if reasons:
        raise LaunchError(refusal(PROCESSING_TITLE, reasons))
    facts = values["process_instance_facts"][values["process_instance_type"]]
    return ProcessingValues(
        job_name=values["process_job_name"],
        instance_type=values["process_instance_type"],
        instance_count=values["process_instance_count"],
        input_uri=values["process_input_uri"],
        arguments=list(values["process_arguments"]),
        expected_gpu_count=facts["expected_gpu_count"],
        local_nvme=facts["local_nvme"],
        code_uri=values["process_code_uri"],
        entry_point=values["process_entry_point"],
        has_code=values["process_code_uri"] != "",
        has_arguments=bool(values["process_arguments"]),
    )


STATE_MACHINE_PROCESSING_VALUES = ProcessingValues(
    job_name=Jsonata("$process_job_name"),
    instance_type=Jsonata("$process_instance_type"),
    instance_count=Jsonata("$process_instance_count"),
    input_uri=Jsonata("$process_input_uri"),
    arguments=Jsonata("$process_arguments"),
    expected_gpu_count=Jsonata("$lookup($process_instance_facts, $process_instance_type).expected_gpu_count"),
    local_nvme=Jsonata("$lookup($process_instance_facts, $process_instance_type).local_nvme"),
    code_uri=Jsonata("$process_code_uri"),
    entry_point=Jsonata("$process_entry_point"),
    has_code=Jsonata("$process_code_uri != ''"),
    has_arguments=Jsonata("$count($process_arguments) > 0"),
)
"""The processing values as the pipeline's variables (assigned by :func:`processing_state_machine_assignments`)."""


def processing_state_machine_assignments(template: ProcessingTemplate, source: str = "$states.input.process") -> dict[str, Any]:
    """``Assign`` of the pipeline state that reads the ``process`` input over the deployed defaults.

    Args:
        template: The processing template.
        source: JSONata path of the options object (the execution input's ``process``).

    Without ``job_name`` the job is ``<project>-<execution name>-process``. Values are kept as
    given (whatever their type) so that :func:`processing_launch_rules` refuses them with a reason.
    """

    def given_or(key: str, default: str) -> str:
        return f"{{% $exists({source}.{key}) ? {source}.{key} : {default} %}}"

    defaults = to_jsonata(list(template.default_arguments))
    return {
        "process_job_name": given_or(
            "job_name", f"{json.dumps(template.job_name_prefix)} & $states.context.Execution.Name & '-{JOB_NAME_SUFFIX}'"
        ),
        "process_instance_type": given_or("instance_type", json.dumps(template.default_instance_type)),
        "process_instance_count": given_or("instance_count", json.dumps(template.default_instance_count)),
        "process_input_uri": given_or("input_uri", json.dumps(template.input_uri_prefix)),
        # A user's script gets only its own arguments; [] keeps an empty list a list in JSONata.
        "process_arguments": given_or("arguments", f"(($exists({source}.code_uri) and {source}.code_uri != '') ? [] : {defaults})"),
        "process_code_uri": given_or("code_uri", '""'),
        "process_entry_point": given_or("entry_point", '""'),
        "process_instance_facts": processing_instance_facts_table(template.allowed_instance_types or None),
    }


def processing_launch_rules(template: ProcessingTemplate) -> LaunchRules:
    """:func:`processing_rules` in JSONata: the pipeline checks the assigned variables with them (combining
    the rules with its own and the training's)."""
    return render_rules(processing_rules(template), PROCESSING_TITLE)


# --------------------------------------------------------------------------------------------
# The request
# --------------------------------------------------------------------------------------------


def create_processing_job_request(template: ProcessingTemplate, values: ProcessingValues) -> dict[str, Any]:
    """The CreateProcessingJob request (boto3 keyword arguments / the pipeline task's ``Arguments``).

    With concrete :class:`ProcessingValues` the result is plain data for
    ``sagemaker.create_processing_job(**request)``; with :data:`STATE_MACHINE_PROCESSING_VALUES`
    it holds ``{% %}`` expressions for the state machine.
    """
    r = template.resources
    cluster = {
        "InstanceCount": values.instance_count,
        "InstanceType": values.instance_type,
        "VolumeSizeInGB": template.volume_size_gb,
    }
    app = {"ImageUri": r.image_uri, "ContainerEntrypoint": list(CONTAINER_ENTRYPOINT)}
    raw_input = {
        "InputName": RAW_INPUT,
        "S3Input": {
            "S3Uri": values.input_uri,
            "LocalPath": f"{PROCESSING_ROOT}/input/{RAW_INPUT}",
            "S3DataType": "S3Prefix",
            "S3InputMode": "File",
            # One instance sees all raw data; several split the objects between them.
            "S3DataDistributionType": when(greater_than(values.instance_count, 1), "ShardedByS3Key", "FullyReplicated"),
        },
    }
    code_input = {
        "InputName": CODE_INPUT,
        "S3Input": {
            "S3Uri": values.code_uri,
            "LocalPath": f"{PROCESSING_ROOT}/input/{CODE_INPUT}",
            "S3DataType": "S3Prefix",
            "S3InputMode": "File",
            "S3DataDistributionType": "FullyReplicated",
        },
    }
    output_uri = processing_output_uri(template, values.job_name)
    outputs = [
        {
            "OutputName": name,
            "S3Output": {
                "S3Uri": concat(output_uri, f"{name}/"),
                "LocalPath": f"{PROCESSING_ROOT}/output/{name}",
                "S3UploadMode": "EndOfJob",
            },
        }
        for name in OUTPUT_NAMES
    ]
    request: dict[str, Any] = {
        "ProcessingJobName": values.job_name,
        # Types with local NVMe keep data on hardware-encrypted instance storage, and SageMaker
        # rejects a VolumeKmsKeyId for them; EBS-only types get the platform key.
        "ProcessingResources": {
            "ClusterConfig": when(values.local_nvme, cluster, {**cluster, "VolumeKmsKeyId": r.key_arn}),
        },
        # ContainerArguments must hold at least one entry when present.
        "AppSpecification": when(values.has_arguments, {**app, "ContainerArguments": values.arguments}, app),
        # The processing mode fails hard unless it sees exactly this many GPUs; script mode is
        # selected by the same variables the training launcher reads.
        "Environment": merge(
            {EXPECTED_GPU_COUNT_ENV: values.expected_gpu_count},
            when(values.has_code, {PROGRAM_ENV: values.entry_point, SUBMIT_DIRECTORY_ENV: CODE_SOURCEDIR}, {}),
        ),
        # Network isolation: the container cannot read S3, so a script's code travels as an input.
        "ProcessingInputs": append([raw_input], when(values.has_code, [code_input], [])),
        "ProcessingOutputConfig": {"Outputs": outputs, "KmsKeyId": r.key_arn},
        "StoppingCondition": {"MaxRuntimeInSeconds": template.max_runtime_seconds},
        "NetworkConfig": {
            "EnableNetworkIsolation": True,
            "EnableInterContainerTrafficEncryption": greater_than(values.instance_count, 1),
            "VpcConfig": {"SecurityGroupIds": list(r.security_group_ids), "Subnets": list(r.subnet_ids)},
        },
        "RoleArn": r.role_arn,
        "Tags": [{"Key": k, "Value": v} for k, v in template.tags.items()],
    }
    return render(request)
