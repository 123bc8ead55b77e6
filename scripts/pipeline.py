"""The pipeline (process -> train -> promote -> transform) as the operator scripts see it: names and inputs.

``scripts.launch --pipeline`` builds an execution input of ``<project>-pipeline`` and
``scripts.watch --execution`` follows one; both need the names the pipeline gives what it creates:

- processing job ``<project>-<execution name>-process`` (unless ``process.job_name`` says otherwise),
- training job ``<project>-<execution name>-train`` (unless ``train.job_name``), or with ``train.tuning``
  (``--pipeline --tune``) tuning job ``<project>-<the execution name's letters and digits>``, cut to 32
  characters (unless ``train.job_name``), whose best trial becomes the run's training job,
- model and endpoint config ``<project>-<execution name>`` (promote),
- transform job ``<project>-<execution name>-transform`` and, unless the promoted model runs it, a
  model of the same name (``transform.enabled`` deployments).

A step whose key is absent from the input is skipped, except the transform: it runs after every
execution with a model (``train``, or ``promote.model_uri``) unless ``"transform": false``.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Mapping, Optional

from scripts.common import OperatorError

STEPS = ("process", "train", "promote")
MAX_NAME_LENGTH = 63
"""SageMaker's limit on job, model and endpoint config names."""
MAX_TUNING_NAME_LENGTH = 32
"""SageMaker's limit on tuning job names."""
OUTPUT_PREFIX_NOT_EMPTY = "OutputPrefixNotEmpty"


@dataclass(frozen=True)
class PipelineNames:
    """What one execution creates (``None`` for a skipped step).

    Attributes:
        execution: The execution's name.
        processing_job: The processing job.
        training_job: The training job.
        model: The model and the endpoint config of the promote step.
        transform_job: The batch transform job (and its model, where it makes one).
        tuning_job: The tuning job of a tuning step (then ``training_job`` is ``None``: the best trial,
            named by SageMaker, becomes the run's training job).
    """

    execution: str
    processing_job: Optional[str]
    training_job: Optional[str]
    model: Optional[str]
    transform_job: Optional[str] = None
    tuning_job: Optional[str] = None

    def lines(self) -> list[str]:
        """``processing job: ...`` lines for what the execution will create."""
        lines = []
        if self.processing_job:
            lines.append(f"processing job: {self.processing_job}")
        if self.training_job:
            lines.append(f"training job: {self.training_job}")
        if self.tuning_job:
            lines.append(f"tuning job: {self.tuning_job} (its best trial is the run's training job)")
        if self.model:
            lines.append(f"model: {self.model}")
            lines.append(f"endpoint config: {self.model}")
        if self.transform_job:
            lines.append(f"transform job: {self.transform_job}")
        return lines


def pipeline_names(
    project: str, execution_name: str, execution_input: Mapping[str, Any], *, transform: bool = False
) -> PipelineNames:
    """The names an execution of ``execution_input`` gives what it creates (see the module docstring);
    ``transform``: the deployed pipeline ends in a batch transform (``transform.enabled``)."""

    def given(step: str, default: str) -> Optional[str]:
        if step not in execution_input:
            return None
        options = execution_input[step]
        name = options.get("job_name") if isinstance(options, Mapping) else None
        return str(name) if name else default

    base = f"{project}-{execution_name}"
    promote = execution_input.get("promote")
    has_model = "train" in execution_input or (isinstance(promote, Mapping) and "model_uri" in promote)
    transforms = transform and has_model and execution_input.get("transform") is not False
    train = execution_input.get("train")
    # The definition's default (tuning_job_spec.tuning_state_machine_assignments): the execution name's
    # letters and digits, the name cut to SageMaker's 32 characters.
    tuned = given("train", f"{project}-{re.sub('[^A-Za-z0-9]', '', execution_name)}"[:MAX_TUNING_NAME_LENGTH]) if (
        isinstance(train, Mapping) and "tuning" in train) else None
    return PipelineNames(
        execution=execution_name,
        processing_job=given("process", f"{base}-process"),
        training_job=None if tuned else given("train", f"{base}-train"),
        model=base if "promote" in execution_input else None,
        transform_job=f"{base}-transform" if transforms else None,
        tuning_job=tuned,
    )


def default_execution_name(now: Optional[datetime] = None) -> str:
    """``YYYYmmdd-HHMMSS-<4 hex>`` in UTC: short enough for every name derived from it."""
    return (now or datetime.now(timezone.utc)).strftime("%Y%m%d-%H%M%S") + f"-{secrets.token_hex(2)}"


def check_names(names: PipelineNames) -> None:
    """Refuse an execution name that makes a job, model or config name longer than SageMaker allows."""
    named = (
        ("processing job", names.processing_job), ("training job", names.training_job), ("model", names.model),
        ("transform job", names.transform_job),
    )
    for what, name in named:
        if name and len(name) > MAX_NAME_LENGTH:
            raise OperatorError(
                f"execution name {names.execution!r} makes the {what} name {name} {len(name)} characters long; "
                f"SageMaker allows {MAX_NAME_LENGTH}: pick a shorter --name"
            )
    if names.tuning_job and len(names.tuning_job) > MAX_TUNING_NAME_LENGTH:
        raise OperatorError(
            f"the tuning job name {names.tuning_job} is {len(names.tuning_job)} characters long; "
            f"SageMaker allows {MAX_TUNING_NAME_LENGTH}: pick a shorter name"
        )


def check_output_prefix_empty(s3: Any, bucket: str, prefix: str) -> None:
    """Refuse to write a run's outputs where data already is (mixing two runs' shards is silent corruption).

    Raises:
        OperatorError: ``OutputPrefixNotEmpty: s3://bucket/prefix already holds data ...``.
    """
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1)
    if listed.get("KeyCount", 0) or listed.get("Contents"):
        raise OperatorError(
            f"{OUTPUT_PREFIX_NOT_EMPTY}: s3://{bucket}/{prefix} already holds data; a processing job's outputs go to "
            "an empty prefix of their own: pick another job name (--name) or delete the old outputs"
        )
