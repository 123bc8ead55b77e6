"""SageMaker's limits on CreateTrainingJob, CreateProcessingJob, CreateTransformJob and CreateHyperParameterTuningJob
requests, from botocore's service model.

boto3 ships the API model SageMaker publishes (``botocore/data/sagemaker/<version>/service-2.json``):
the training instance types SageMaker accepts, and the length, count and pattern constraints of
every request field. The config (at synth) and :func:`~stacks.components.training_job_spec.resolve_launch`
(at launch) check against these numbers instead of copies written by hand, so a boto3 upgrade
that brings a new instance type or a changed limit brings it here too.

Pure Python (no CDK import) and no network: the model is a file inside the installed botocore,
read as the JSON it is. botocore's loader and shape classes would add ~0.08 s of imports (its
HTTP stack) to every ``cdk synth`` for three lookups; :class:`ServiceShapes` walks the same data.
"""

from __future__ import annotations

import gzip
import json
import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Mapping

import botocore

SERVICE = "sagemaker"


@dataclass(frozen=True)
class FieldRule:
    """Length and pattern of one string field (``min``/``max``/``pattern`` in the model).

    Attributes:
        min_length: Shortest accepted value.
        max_length: Longest accepted value.
        pattern: The model's regular expression (Java syntax), matched against the whole value;
            ``None`` when the model has none.
    """

    min_length: int
    max_length: int
    pattern: str | None

    def problem(self, value: str) -> str | None:
        """Why ``value`` breaks the rule, or ``None`` when it is accepted."""
        if not self.min_length <= len(value) <= self.max_length:
            return f"must be {self.min_length}-{self.max_length} characters long (it has {len(value)})"
        if self.pattern is not None and not _matcher(self.pattern)(value):
            return f"must match SageMaker's pattern {self.pattern}"
        return None


@dataclass(frozen=True)
class TrainingJobLimits:
    """What SageMaker accepts in a CreateTrainingJob request.

    Attributes:
        source: Which model the numbers come from (botocore version and API version).
        training_instance_types: ``ResourceConfig.InstanceType`` (the ``TrainingInstanceType`` enum).
        max_hyperparameters: Entries in ``HyperParameters``.
        hyperparameter_name: Rule for a hyperparameter's name.
        hyperparameter_value: Rule for a hyperparameter's value.
        max_channels: Entries in ``InputDataConfig``.
        channel_name: Rule for ``ChannelName``.
        max_tags: Entries in ``Tags``.
        tag_key: Rule for a tag key.
        tag_value: Rule for a tag value.
        job_name: Rule for ``TrainingJobName``.
    """

    source: str
    training_instance_types: frozenset[str]
    max_hyperparameters: int
    hyperparameter_name: FieldRule
    hyperparameter_value: FieldRule
    max_channels: int
    channel_name: FieldRule
    max_tags: int
    tag_key: FieldRule
    tag_value: FieldRule
    job_name: FieldRule


@dataclass(frozen=True)
class ProcessingJobLimits:
    """What SageMaker accepts in a CreateProcessingJob request.

    Attributes:
        source: Which model the numbers come from (botocore version and API version).
        processing_instance_types: ``ClusterConfig.InstanceType`` (the ``ProcessingInstanceType``
            enum; not the training list: some GPU types train but do not process, and back).
        max_instance_count: ``ClusterConfig.InstanceCount``.
        max_volume_size_gb: ``ClusterConfig.VolumeSizeInGB``.
        max_runtime_seconds: ``StoppingCondition.MaxRuntimeInSeconds``.
        max_container_arguments: Entries in ``AppSpecification.ContainerArguments``.
        container_argument: Rule for one container argument.
        max_environment: Entries in ``Environment``.
        environment_key: Rule for an environment variable's name.
        environment_value: Rule for an environment variable's value.
        max_inputs: Entries in ``ProcessingInputs``.
        max_outputs: Entries in ``ProcessingOutputConfig.Outputs``.
        s3_uri: Rule for an ``S3Uri`` of an input or output.
        max_tags: Entries in ``Tags``.
        job_name: Rule for ``ProcessingJobName``.
    """

    source: str
    processing_instance_types: frozenset[str]
    max_instance_count: int
    max_volume_size_gb: int
    max_runtime_seconds: int
    max_container_arguments: int
    container_argument: FieldRule
    max_environment: int
    environment_key: FieldRule
    environment_value: FieldRule
    max_inputs: int
    max_outputs: int
    s3_uri: FieldRule
    max_tags: int
    job_name: FieldRule


@dataclass(frozen=True)
class TransformJobLimits:
    """What SageMaker accepts in a CreateTransformJob request.

    Attributes:
        source: Which model the numbers come from (botocore version and API version).
        transform_instance_types: ``TransformResources.InstanceType`` (the ``TransformInstanceType``
            enum; not the training or processing list).
        max_payload_mb: ``MaxPayloadInMB``'s largest value. The model gives no maximum; 100 is
            the API reference's (:data:`MAX_TRANSFORM_PAYLOAD_MB`).
        split_types: ``TransformInput.SplitType``.
        batch_strategies: ``BatchStrategy``.
        content_type: Rule for ``TransformInput.ContentType``.
        max_tags: Entries in ``Tags``.
        job_name: Rule for ``TransformJobName``.
    """

    source: str
    transform_instance_types: frozenset[str]
    max_payload_mb: int
    split_types: tuple[str, ...]
    batch_strategies: tuple[str, ...]
    content_type: FieldRule
    max_tags: int
    job_name: FieldRule


@dataclass(frozen=True)
class TuningJobLimits:
    """What SageMaker accepts in a CreateHyperParameterTuningJob request.

    Attributes:
        source: Which model the numbers come from (botocore version and API version).
        strategies: ``HyperParameterTuningJobConfig.Strategy``.
        early_stopping_types: ``TrainingJobEarlyStoppingType``.
        objective_types: ``HyperParameterTuningJobObjective.Type``.
        scaling_types: A continuous or integer range's ``ScalingType``.
        max_ranges: Ranges of one kind (and, SageMaker's documentation adds, of all kinds together).
        max_categorical_values: ``Values`` of one categorical range.
        max_static_hyperparameters: Entries in ``StaticHyperParameters``.
        parameter_value: Rule for a range's bound or categorical value.
        job_name: Rule for ``HyperParameterTuningJobName``.
    """

    source: str
    strategies: tuple[str, ...]
    early_stopping_types: tuple[str, ...]
    objective_types: tuple[str, ...]
    scaling_types: tuple[str, ...]
    max_ranges: int
    max_categorical_values: int
    max_static_hyperparameters: int
    parameter_value: FieldRule
    job_name: FieldRule


MAX_TRANSFORM_PAYLOAD_MB = 100
"""CreateTransformJob's ``MaxPayloadInMB`` ceiling, which the API reference states and the model does not."""


@dataclass(frozen=True)
class ServiceShapes:
    """A service model's shapes, as botocore ships them (``service-2.json``).

    Attributes:
        api_version: The model's API version (``metadata.apiVersion``).
        shapes: Every shape by name: a dict with ``type`` and, by type, ``members`` (structure),
            ``member`` (list), ``key``/``value`` (map), ``enum``, ``min``, ``max``, ``pattern``.
    """

    api_version: str
    shapes: Mapping[str, Any]

    def shape(self, name: str, *path: str) -> Mapping[str, Any]:
        """The shape ``name``, or the one reached from it along ``path``.

        Each step names a member of a structure, or is ``member`` (a list's element), ``key`` or
        ``value`` (a map's): ``shape("CreateTrainingJobRequest", "Tags", "member", "Key")``.
        """
        shape = self.shapes[name]
        for step in path:
            reference = shape["members"][step] if shape["type"] == "structure" else shape[step]
            shape = self.shapes[reference["shape"]]
        return shape


def _model_file(service: str) -> Path:
    """The newest API version's ``service-2.json`` (or ``.json.gz``) in the installed botocore's own data
    (a model a user put in ``~/.aws/models`` or ``AWS_DATA_PATH`` is not SageMaker's published one)."""
    versions = Path(botocore.__file__).resolve().parent / "data" / service
    newest = max(version for version in versions.iterdir() if version.is_dir())
    for name in ("service-2.json", "service-2.json.gz"):
        if (newest / name).is_file():
            return newest / name
    raise FileNotFoundError(f"botocore {botocore.__version__} has no service-2.json for {service} in {newest}")


@lru_cache(maxsize=1)
def sagemaker_service_model() -> ServiceShapes:
    """botocore's bundled SageMaker model, parsed once per process.

    The file is megabytes of JSON: the training limits, the processing limits and the hosting
    types (:func:`stacks.gpu_instances.sagemaker_hosting_instance_types`) all read this one copy.
    """
    path = _model_file(SERVICE)
    raw = json.loads(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes())
    return ServiceShapes(api_version=raw["metadata"]["apiVersion"], shapes=raw["shapes"])


def _rule(shape: Mapping[str, Any]) -> FieldRule:
    return FieldRule(min_length=int(shape.get("min", 0)), max_length=int(shape["max"]), pattern=shape.get("pattern"))


@lru_cache(maxsize=1)
def training_job_limits() -> TrainingJobLimits:
    """The limits, read once per process from botocore's bundled SageMaker model."""
    model = sagemaker_service_model()

    def shape(*path: str) -> Mapping[str, Any]:
        return model.shape("CreateTrainingJobRequest", *path)

    return TrainingJobLimits(
        source=f"botocore {botocore.__version__}, {SERVICE} API {model.api_version}",
        training_instance_types=frozenset(shape("ResourceConfig", "InstanceType")["enum"]),
        max_hyperparameters=int(shape("HyperParameters")["max"]),
        hyperparameter_name=_rule(shape("HyperParameters", "key")),
        hyperparameter_value=_rule(shape("HyperParameters", "value")),
        max_channels=int(shape("InputDataConfig")["max"]),
        channel_name=_rule(shape("InputDataConfig", "member", "ChannelName")),
        max_tags=int(shape("Tags")["max"]),
        tag_key=_rule(shape("Tags", "member", "Key")),
        tag_value=_rule(shape("Tags", "member", "Value")),
        job_name=_rule(shape("TrainingJobName")),
    )


@lru_cache(maxsize=1)
def processing_job_limits() -> ProcessingJobLimits:
    """The CreateProcessingJob limits, read once per process from botocore's bundled SageMaker model."""
    model = sagemaker_service_model()

    def shape(*path: str) -> Mapping[str, Any]:
        return model.shape("CreateProcessingJobRequest", *path)

    cluster = ("ProcessingResources", "ClusterConfig")
    return ProcessingJobLimits(
        source=f"botocore {botocore.__version__}, {SERVICE} API {model.api_version}",
        processing_instance_types=frozenset(shape(*cluster, "InstanceType")["enum"]),
        max_instance_count=int(shape(*cluster, "InstanceCount")["max"]),
        max_volume_size_gb=int(shape(*cluster, "VolumeSizeInGB")["max"]),
        max_runtime_seconds=int(shape("StoppingCondition", "MaxRuntimeInSeconds")["max"]),
        max_container_arguments=int(shape("AppSpecification", "ContainerArguments")["max"]),
        container_argument=_rule(shape("AppSpecification", "ContainerArguments", "member")),
        max_environment=int(shape("Environment")["max"]),
        environment_key=_rule(shape("Environment", "key")),
        environment_value=_rule(shape("Environment", "value")),
        max_inputs=int(shape("ProcessingInputs")["max"]),
        max_outputs=int(shape("ProcessingOutputConfig", "Outputs")["max"]),
        s3_uri=_rule(shape("ProcessingInputs", "member", "S3Input", "S3Uri")),
        max_tags=int(shape("Tags")["max"]),
        job_name=_rule(shape("ProcessingJobName")),
    )


@lru_cache(maxsize=1)
def transform_job_limits() -> TransformJobLimits:
    """The CreateTransformJob limits, read once per process from botocore's bundled SageMaker model."""
    model = sagemaker_service_model()

    def shape(*path: str) -> Mapping[str, Any]:
        return model.shape("CreateTransformJobRequest", *path)

    return TransformJobLimits(
        source=f"botocore {botocore.__version__}, {SERVICE} API {model.api_version}",
        transform_instance_types=frozenset(shape("TransformResources", "InstanceType")["enum"]),
        max_payload_mb=int(shape("MaxPayloadInMB").get("max", MAX_TRANSFORM_PAYLOAD_MB)),
        split_types=tuple(shape("TransformInput", "SplitType")["enum"]),
        batch_strategies=tuple(shape("BatchStrategy")["enum"]),
        content_type=_rule(shape("TransformInput", "ContentType")),
        max_tags=int(shape("Tags")["max"]),
        job_name=_rule(shape("TransformJobName")),
    )


@lru_cache(maxsize=1)
def tuning_job_limits() -> TuningJobLimits:
    """The CreateHyperParameterTuningJob limits, read once per process from botocore's bundled SageMaker model."""
    model = sagemaker_service_model()

    def shape(*path: str) -> Mapping[str, Any]:
        return model.shape("CreateHyperParameterTuningJobRequest", *path)

    config, ranges = ("HyperParameterTuningJobConfig",), ("HyperParameterTuningJobConfig", "ParameterRanges")
    return TuningJobLimits(
        source=f"botocore {botocore.__version__}, {SERVICE} API {model.api_version}",
        strategies=tuple(shape(*config, "Strategy")["enum"]),
        early_stopping_types=tuple(shape(*config, "TrainingJobEarlyStoppingType")["enum"]),
        objective_types=tuple(shape(*config, "HyperParameterTuningJobObjective", "Type")["enum"]),
        scaling_types=tuple(shape(*ranges, "ContinuousParameterRanges", "member", "ScalingType")["enum"]),
        max_ranges=int(shape(*ranges, "ContinuousParameterRanges")["max"]),
        max_categorical_values=int(shape(*ranges, "CategoricalParameterRanges", "member", "Values")["max"]),
        max_static_hyperparameters=int(shape("TrainingJobDefinition", "StaticHyperParameters")["max"]),
        parameter_value=_rule(shape(*ranges, "ContinuousParameterRanges", "member", "MinValue")),
        job_name=_rule(shape("HyperParameterTuningJobName")),
    )


# --------------------------------------------------------------------------------------------
# The model's patterns are Java regular expressions. The ones in these fields use only syntax
# Python's ``re`` shares, except the Unicode classes \p{L} (letters), \p{Z} (separators) and
# \p{N} (numbers) of the tag patterns, which ``re`` lacks: each character of one of those
# categories is replaced by a stand-in that the translated pattern admits in their place.
# --------------------------------------------------------------------------------------------

_UNICODE_CLASS = re.compile(r"\\p\{([A-Z])\}")
_STAND_IN = "\ue000"  # a private-use character, itself in none of the categories


@lru_cache(maxsize=32)
def _matcher(pattern: str) -> Callable[[str], bool]:
    categories = set(_UNICODE_CLASS.findall(pattern))
    if not categories:
        compiled = re.compile(pattern)
        return lambda value: compiled.fullmatch(value) is not None
    translated = re.compile(_UNICODE_CLASS.sub(lambda _: _STAND_IN, pattern))

    def matches(value: str) -> bool:
        if _STAND_IN in value:
            return False
        folded = "".join(_STAND_IN if unicodedata.category(c)[0] in categories else c for c in value)
        return translated.fullmatch(folded) is not None

    return matches
