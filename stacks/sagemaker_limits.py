"""SageMaker's limits on CreateTrainingJob and CreateProcessingJob requests, from botocore's service model.

boto3 ships the API model SageMaker publishes (``botocore/data/sagemaker/<version>/service-2.json``):
the training instance types SageMaker accepts, and the length, count and pattern constraints of
every request field. The config (at synth) and :func:`~stacks.components.training_job_spec.resolve_launch`
(at launch) check against these numbers instead of copies written by hand, so a boto3 upgrade
that brings a new instance type or a changed limit brings it here too.

Pure Python (no CDK import) and no network: the model is a file inside the installed botocore.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

import botocore
import botocore.loaders
import botocore.model

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


@lru_cache(maxsize=1)
def sagemaker_service_model() -> botocore.model.ServiceModel:
    """botocore's bundled SageMaker model, parsed once per process.

    The file is megabytes of JSON: the training limits, the processing limits and the hosting
    types (:func:`stacks.gpu_instances.sagemaker_hosting_instance_types`) all read this one copy.
    """
    raw = botocore.loaders.create_loader().load_service_model(SERVICE, "service-2")
    return botocore.model.ServiceModel(raw, SERVICE)


def _rule(shape: Any) -> FieldRule:
    meta = shape.metadata
    return FieldRule(min_length=int(meta.get("min", 0)), max_length=int(meta["max"]), pattern=meta.get("pattern"))


@lru_cache(maxsize=1)
def training_job_limits() -> TrainingJobLimits:
    """The limits, read once per process from botocore's bundled SageMaker model."""
    model = sagemaker_service_model()
    request: Any = model.shape_for("CreateTrainingJobRequest")
    members = request.members
    hyperparameters = members["HyperParameters"]
    tag = members["Tags"].member
    return TrainingJobLimits(
        source=f"botocore {botocore.__version__}, {SERVICE} API {model.api_version}",
        training_instance_types=frozenset(members["ResourceConfig"].members["InstanceType"].enum),
        max_hyperparameters=int(hyperparameters.metadata["max"]),
        hyperparameter_name=_rule(hyperparameters.key),
        hyperparameter_value=_rule(hyperparameters.value),
        max_channels=int(members["InputDataConfig"].metadata["max"]),
        channel_name=_rule(members["InputDataConfig"].member.members["ChannelName"]),
        max_tags=int(members["Tags"].metadata["max"]),
        tag_key=_rule(tag.members["Key"]),
        tag_value=_rule(tag.members["Value"]),
        job_name=_rule(members["TrainingJobName"]),
    )


@lru_cache(maxsize=1)
def processing_job_limits() -> ProcessingJobLimits:
    """The CreateProcessingJob limits, read once per process from botocore's bundled SageMaker model."""
    model = sagemaker_service_model()
    request: Any = model.shape_for("CreateProcessingJobRequest")
    members = request.members
    cluster = members["ProcessingResources"].members["ClusterConfig"].members
    arguments = members["AppSpecification"].members["ContainerArguments"]
    environment = members["Environment"]
    inputs = members["ProcessingInputs"]
    return ProcessingJobLimits(
        source=f"botocore {botocore.__version__}, {SERVICE} API {model.api_version}",
        processing_instance_types=frozenset(cluster["InstanceType"].enum),
        max_instance_count=int(cluster["InstanceCount"].metadata["max"]),
        max_volume_size_gb=int(cluster["VolumeSizeInGB"].metadata["max"]),
        max_runtime_seconds=int(members["StoppingCondition"].members["MaxRuntimeInSeconds"].metadata["max"]),
        max_container_arguments=int(arguments.metadata["max"]),
        container_argument=_rule(arguments.member),
        max_environment=int(environment.metadata["max"]),
        environment_key=_rule(environment.key),
        environment_value=_rule(environment.value),
        max_inputs=int(inputs.metadata["max"]),
        max_outputs=int(members["ProcessingOutputConfig"].members["Outputs"].metadata["max"]),
        s3_uri=_rule(inputs.member.members["S3Input"].members["S3Uri"]),
        max_tags=int(members["Tags"].metadata["max"]),
        job_name=_rule(members["ProcessingJobName"]),
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
