"""Serve a finished training job's model, record the promotion durably, and roll it back.

Usage (from the repository root)::

    python -m scripts.promote gputrain-20260101-120000-ab12
    python -m scripts.promote JOB --dry-run        # check the job and print the deploy command
    python -m scripts.promote --best-of TUNING_JOB # the best training job of a tuning job (launch --tune)
    python -m scripts.promote --rollback           # back to the previous approved model
    python -m scripts.promote --show               # the promotion record: live and previous models
    python -m scripts.promote JOB --artifact-key models/JOB/model.tar.gz  # JOB's model, copied to that key
    python -m scripts.promote JOB --no-auto-rollback  # emergency: while the live model itself trips the alarms

The job must have completed and its ``model.tar.gz`` must be where the serving stack reads it
(``training-jobs/<job>/output/model.tar.gz`` in the artifacts bucket). Then the serving stack is
deployed with ``serving.training_job_name=<job>``: CloudFormation creates a new Model and
EndpointConfig and updates the Endpoint with its blue/green ``DeploymentConfig``; SageMaker
shifts traffic to the new fleet, bakes, and rolls back if the 5xx or latency alarm fires, in
which case the deploy fails and this script exits 1. A job that failed, was stopped or is still
running is refused (exit 1), as is a missing job or artifact (exit 3).

The promotion record is the SSM parameter ``/<project>/serving/promotion`` (JSON): the live
model (job, artifact, final metrics, who promoted it and when) and the previously approved
models, newest first. It is written only after the deploy succeeded, so it always names what
the endpoint serves (the pipeline's promote step writes it the same way, after its UpdateEndpoint); SSM keeps every earlier version of it too (``aws ssm
get-parameter-history``). ``--rollback`` deploys the newest previous model (after the same
checks) and moves the live one to ``rolled_back``. After each deploy the endpoint itself is checked:
the pipeline's promote step moves it with its own UpdateEndpoint, outside CloudFormation, so a
deploy of the model the stack last deployed changes nothing ("no changes"); the endpoint is then
updated back onto the stack's EndpointConfig (same blue/green deployment and alarms), and unless
its models' ``ModelDataUrl`` is the job's afterwards this script exits 1 with the record unchanged. The record lives outside CloudFormation:
``cdk destroy`` keeps it (rollback history), and the next ``promote`` after a redeploy goes on
from it.

Its deploys pass ``-c promote:deploy=true``: ``app.py`` refuses any other deploy whose
``serving.training_job_name``/``model_artifact_key`` is not the record's live model (a model served
but not recorded would be moved back by the next plain deploy). When ``serving.instance_type`` is
not the live variant's, SageMaker refuses the update while the variant is an autoscaling target,
so the deploy goes in two steps: the live type and model without autoscaling
(``-c promote:no_autoscaling=true``), then the new type with it; if the second fails, a third
deploy puts autoscaling back on the live type. ``--no-auto-rollback`` deploys with no rollback
alarms (``-c promote:no_auto_rollback=true``): the alarms watch both fleets during a blue/green
update, so while the live model errors every promotion of a fix would be rolled back; the next
deploy names them again.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any, Optional, Sequence

from botocore.exceptions import ClientError

from scripts.common import (
    AWS_CREDENTIALS,
    EXIT_FAILED,
    Deployment,
    OperatorError,
    UsageError,
    add_common_arguments,
    cdk_command,
    describe_job,
    error_code,
    error_message,
    help_epilog,
    load_platform_config,
    run,
    run_cdk,
    stack_name,
)
from stacks.components.endpoint_spec import (
    MAX_PROMOTION_RECORD_BYTES,
    NO_AUTO_ROLLBACK_CONTEXT,
    NO_AUTOSCALING_CONTEXT,
    PROMOTE_CONTEXT,
    PROMOTION_RECORD_SHAPES,
    deployment_config,
    endpoint_name,
    inference_component_name,
    promotion_record_name,
    rollback_alarm_names,
    update_endpoint_request,
)
from stacks.config import full_key

ARTIFACT_TEMPLATE = "training-jobs/{job}/output/model.tar.gz"
_JOB_ARTIFACT = re.compile(r"training-jobs/([^/]+)/output/model\.tar\.gz")


def artifact_key(model_data_url: str) -> str:
    """``s3://<artifacts>/<key>`` -> ``<key>`` (every served model is in the artifacts bucket)."""
    return model_data_url.split("/", 3)[3] if model_data_url.startswith("s3://") and model_data_url.count("/") >= 3 else model_data_url


def source_job(key: str) -> Optional[str]:
    """The job whose ``model.tar.gz`` ``key`` is, where the job wrote it (``training-jobs/<job>/output/``)."""
    match = _JOB_ARTIFACT.fullmatch(key)
    return match.group(1) if match else None


def source_overrides(key: str) -> list[str]:
    """The serving stack's model source for the artifact ``key``: the job's own setting where ``key`` is a
    job's ``model.tar.gz`` where the job wrote it, else the key (the other setting null: they are exclusive)."""
    job = source_job(key)
    if job:
        return [f"serving.training_job_name={job}", "serving.model_artifact_key=null"]
    return ["serving.training_job_name=null", f"serving.model_artifact_key={key}"]


@dataclass(frozen=True)
class Promotion:
    """One model that was promoted.

    Attributes:
        job: The training job whose model it is.
        model_data_url: ``s3://<artifacts>/training-jobs/<job>/output/model.tar.gz``.
        metrics: The job's final metrics (``FinalMetricDataList``), name -> value.
        promoted_by: The caller's ARN (``sts:GetCallerIdentity``).
        promoted_at: UTC, ISO 8601.
    """

    job: str
    model_data_url: str
    metrics: dict[str, float] = field(default_factory=dict)
    promoted_by: str = ""
    promoted_at: str = ""

    @classmethod
    def from_json(cls, data: Any, where: str) -> "Promotion":
        if not isinstance(data, dict) or not isinstance(data.get("job"), str) or not isinstance(data.get("model_data_url"), str):
            raise OperatorError(f"{where}: expected an object with job and model_data_url, not {json.dumps(data)[:120]}")
        return cls(
            job=data["job"],
            model_data_url=data["model_data_url"],
            metrics={str(k): float(v) for k, v in (data.get("metrics") or {}).items()},
            promoted_by=str(data.get("promoted_by", "")),
            promoted_at=str(data.get("promoted_at", "")),
        )


@dataclass(frozen=True)
class PromotionRecord:
    """What the endpoint serves and what it served before.

    Attributes:
        live: The model the endpoint serves (``None`` before the first promotion).
        previous: Approved models it served before, newest first (``--rollback`` targets).
        rolled_back: Models taken off by ``--rollback``, newest first (never rollback targets).
    """

    live: Optional[Promotion] = None
    previous: tuple[Promotion, ...] = ()
    rolled_back: tuple[Promotion, ...] = ()

    def to_json(self) -> str:
        """The record as written: the first of :data:`PROMOTION_RECORD_SHAPES` that fits SSM's limit for
        a standard parameter (compact JSON, as the pipeline's ``$string`` writes it)."""
        def entry(p: Promotion, metrics: bool) -> dict[str, Any]:
            return asdict(p) if metrics else {k: v for k, v in asdict(p).items() if k != "metrics"}

        text = ""
        for previous, rolled_back, metrics in PROMOTION_RECORD_SHAPES:
            text = json.dumps(
                {
                    "live": asdict(self.live) if self.live else None,
                    "previous": [entry(p, metrics) for p in self.previous[:previous]],
                    "rolled_back": [entry(p, metrics) for p in self.rolled_back[:rolled_back]],
                },
                sort_keys=True,
                separators=(",", ":"),
            )
            if len(text.encode()) <= MAX_PROMOTION_RECORD_BYTES:
                break
        return text

    @classmethod
    def from_json(cls, text: str, where: str) -> "PromotionRecord":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise OperatorError(f"{where} is not JSON ({err.msg}); fix or delete the parameter") from None
        if not isinstance(data, dict):
            raise OperatorError(f"{where}: expected an object with live, previous and rolled_back")
        live = Promotion.from_json(data["live"], f"{where} live") if data.get("live") is not None else None
        return cls(
            live=live,
            previous=tuple(Promotion.from_json(p, f"{where} previous[{i}]") for i, p in enumerate(data.get("previous") or [])),
            rolled_back=tuple(Promotion.from_json(p, f"{where} rolled_back[{i}]") for i, p in enumerate(data.get("rolled_back") or [])),
        )

    def promoted(self, new: Promotion) -> "PromotionRecord":
        """The record after ``new`` went live: the live model becomes the newest previous one."""
        previous = self.previous if self.live is None or self.live.job == new.job else (self.live, *self.previous)
        return PromotionRecord(live=new, previous=tuple(p for p in previous if p.job != new.job), rolled_back=self.rolled_back)

    def rolled_back_to_previous(self) -> "PromotionRecord":
        """The record after a rollback: the newest previous model is live again."""
        return self.rolled_back_to(self.previous[0])

    def rolled_back_to(self, target: Promotion) -> "PromotionRecord":
        """The record after ``target``, an approved model, went live again: the live one is rolled back."""
        rolled = (self.live, *self.rolled_back) if self.live is not None and self.live.job != target.job else self.rolled_back
        return PromotionRecord(live=target, previous=tuple(p for p in self.previous if p.job != target.job), rolled_back=rolled)


def record_parameter(deployment: Deployment) -> str:
    return promotion_record_name(deployment.config.project_name)


def read_record(deployment: Deployment) -> PromotionRecord:
    """The promotion record, or an empty one before the first promotion."""
    name = record_parameter(deployment)
    try:
        value = deployment.aws.client("ssm").get_parameter(Name=name)["Parameter"]["Value"]
    except ClientError as err:
        if error_code(err) == "ParameterNotFound":
            return PromotionRecord()
        raise
    return PromotionRecord.from_json(value, f"the promotion record {name}")


def write_record(deployment: Deployment, record: PromotionRecord) -> None:
    """Put the record (a new SSM version); tagged ``Project`` when first created."""
    ssm = deployment.aws.client("ssm")
    name = record_parameter(deployment)
    ssm.put_parameter(
        Name=name,
        Value=record.to_json(),
        Type="String",
        Overwrite=True,
        Description=f"{deployment.config.project_name}: the model the endpoint serves and the previously approved ones (scripts.promote)",
    )
    ssm.add_tags_to_resource(
        ResourceType="Parameter", ResourceId=name, Tags=[{"Key": "Project", "Value": deployment.config.project_name}]
    )


def promotion_of(deployment: Deployment, job: str, model: str) -> Promotion:
    """The record entry for ``job`` (checked by :func:`check_job`): its final metrics, the caller, now."""
    description = describe_job(deployment.aws, job) or {}
    metrics = {str(m["MetricName"]): float(m["Value"]) for m in description.get("FinalMetricDataList") or []}
    try:
        caller = str(deployment.aws.client("sts").get_caller_identity()["Arn"])
    except ClientError:
        caller = "unknown"
    return Promotion(
        job=job, model_data_url=model, metrics=metrics, promoted_by=caller,
        promoted_at=datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
    )


def check_job(deployment: Deployment, job: str, key: Optional[str] = None) -> str:
    """The model URI to serve, after checking the job completed and the artifact is in place: the job's
    ``model.tar.gz`` where it wrote it, or (``key``, ``--artifact-key``) that key in the artifacts bucket."""
    description = describe_job(deployment.aws, job)
    if description is None:
        raise OperatorError(f"training job {job} not found in {deployment.aws.region} (see python -m scripts.list_jobs)")
    status = str(description["TrainingJobStatus"])
    if status != "Completed":
        reason = f": {description['FailureReason']}" if description.get("FailureReason") else ""
        raise OperatorError(f"{job} is {status}{reason}; only a Completed job's model can be promoted", EXIT_FAILED)
    bucket = deployment.outputs("data", ("ArtifactsBucketName",))["ArtifactsBucketName"]
    actual = (description.get("ModelArtifacts") or {}).get("S3ModelArtifacts")
    if key is None:
        key = ARTIFACT_TEMPLATE.format(job=job)
        expected = f"s3://{bucket}/{key}"
        if actual != expected:
            # Served through promote, so that the record names it (app.py refuses a model set by hand
            # that is not the record's live one).
            inside = actual is not None and actual.startswith(f"s3://{bucket}/")
            how = (
                f"promote it with python -m scripts.promote {job} --artifact-key {artifact_key(actual)}"
                if inside
                else f"copy it into {bucket} and promote it with python -m scripts.promote {job} --artifact-key <key>"
            )
            raise OperatorError(f"{job} wrote its model to {actual or 'nowhere'}, not {expected} where the serving stack reads it: {how}")
    expected = f"s3://{bucket}/{key}"
    if actual != expected:
        print(f"note: {job} wrote its model to {actual or 'nowhere'}; serving {expected} (--artifact-key) as its model")
    try:
        deployment.aws.client("s3").head_object(Bucket=bucket, Key=key)
    except ClientError as err:
        if error_code(err) in ("404", "NoSuchKey", "NotFound"):
            raise OperatorError(f"{expected} does not exist (deleted, or the job's upload failed)") from None
        if error_code(err) in ("403", "AccessDenied"):
            # S3 answers a HEAD without a body: 403 is a missing object to a caller without s3:ListBucket too.
            raise OperatorError(
                f"cannot read {expected} (403): promoting needs s3:GetObject on it and s3:ListBucket on {bucket}"
                " (without ListBucket S3 answers 403 for an object that does not exist)"
            ) from None
        raise
    return expected


def best_of(deployment: Deployment, tuning_job: str) -> str:
    """The name of a tuning job's best training job (``BestTrainingJob``: the completed trial with the best objective)."""
    try:
        description = deployment.aws.client("sagemaker").describe_hyper_parameter_tuning_job(HyperParameterTuningJobName=tuning_job)
    except ClientError as err:
        if error_code(err) in ("ResourceNotFound", "ValidationException"):
            raise OperatorError(f"tuning job {tuning_job} not found in {deployment.aws.region}") from None
        raise
    best = (description.get("BestTrainingJob") or {}).get("TrainingJobName")
    if not best:
        status = description.get("HyperParameterTuningJobStatus")
        raise OperatorError(f"tuning job {tuning_job} ({status}) has no best training job yet: no trial has completed with an "
                            "objective value", EXIT_FAILED)
    return str(best)


def deploy_command(
    deployment: Deployment, key: str, overrides: Sequence[str], *, settings: Sequence[str] = (), markers: Sequence[str] = ()
) -> list[str]:
    """``cdk deploy <project>-serving`` serving the artifact ``key``, as promote's own deploy
    (:data:`PROMOTE_CONTEXT`), with ``settings`` over the operator's and the context ``markers``."""
    ours = [*source_overrides(key), *settings]
    # The CLI keeps the last -c of a key; the operator's own value of a setting promote sets is dropped
    # anyway, so the command printed is the one that runs.
    set_here = {full_key(item.partition("=")[0]) for item in ours}
    kept = [item for item in overrides if full_key(item.partition("=")[0]) not in set_here]
    return cdk_command(
        "deploy", stack_name(deployment.config, "serving"), "--require-approval", "never",
        overrides=[*kept, "serving.enabled=true", *ours, *(f"{marker}=true" for marker in (PROMOTE_CONTEXT, *markers))],
    )  # fmt: skip


def print_command(command: Sequence[str], label: str = "deploy") -> None:
    print(f"{label}: cdk " + " ".join(command[list(command).index("deploy") :]))


@dataclass(frozen=True)
class InstanceTypeChange:
    """The live variant runs another instance type than ``serving.instance_type``.

    Attributes:
        live_type: The live variant's instance type.
        stack_key: The artifact key of the model the serving stack deploys now.
    """

    live_type: str
    stack_key: str


def instance_type_change(deployment: Deployment) -> Optional[InstanceTypeChange]:
    """The change of instance type this deploy makes to the live variant, if any (none before the endpoint
    exists, and none with ``scale_to_zero``, whose scalable target is the component's copies)."""
    serving = deployment.config.serving
    if serving.scale_to_zero:
        return None
    sagemaker = deployment.aws.client("sagemaker")
    endpoint = endpoint_name(deployment.config.project_name)
    try:
        described = sagemaker.describe_endpoint(EndpointName=endpoint)
    except ClientError as err:
        if error_code(err) in ("ValidationException", "ValidationError") and "could not find" in error_message(err).lower():
            return None
        raise
    variants = sagemaker.describe_endpoint_config(EndpointConfigName=described["EndpointConfigName"])["ProductionVariants"]
    live_type = next((str(v["InstanceType"]) for v in variants if v.get("InstanceType")), None)
    if live_type is None or live_type == serving.instance_type:
        return None
    stack_models = served_models(deployment, stack_endpoint_config(deployment))
    if len(stack_models) != 1:
        raise OperatorError(
            f"{stack_name(deployment.config, 'serving')} serves {', '.join(sorted(stack_models)) or 'no model'}, not one: "
            "cannot change serving.instance_type in two steps; redeploy it on the live type first"
        )
    return InstanceTypeChange(live_type=live_type, stack_key=artifact_key(next(iter(stack_models))))


def deploy(
    deployment: Deployment,
    job: str,
    overrides: Sequence[str],
    *,
    key: Optional[str] = None,
    auto_rollback: bool = True,
    dry_run: bool = False,
) -> None:
    """Run (or with ``dry_run`` print) the serving stack's deploy of ``job``'s model (``key``, default
    where the job wrote it); :class:`OperatorError` (exit 1) when it fails.

    A change of ``serving.instance_type`` goes in two deploys (SageMaker refuses an UpdateEndpoint that
    changes the instance type of a variant that is an autoscaling target): the live type and the
    stack's current model without autoscaling, which changes nothing the endpoint serves, then this
    model on the new type with autoscaling. If the second fails, the first's settings are deployed
    again with autoscaling, so nothing is left half-done.
    """
    key = key or ARTIFACT_TEMPLATE.format(job=job)
    markers = () if auto_rollback else (NO_AUTO_ROLLBACK_CONTEXT,)
    final = deploy_command(deployment, key, overrides, markers=markers)
    change = instance_type_change(deployment)
    if change is None:
        print_command(final)
        if not dry_run:
            _run_deploy(deployment, final)
        return
    endpoint = endpoint_name(deployment.config.project_name)
    wanted = deployment.config.serving.instance_type
    print(
        f"{endpoint} runs {change.live_type} and serving.instance_type is {wanted}: SageMaker refuses that change while "
        f"autoscaling targets the variant, so this deploys twice: {change.live_type} without autoscaling, then {wanted} with it"
    )
    live = [f"serving.instance_type={change.live_type}"]
    first = deploy_command(deployment, change.stack_key, overrides, settings=live, markers=(NO_AUTOSCALING_CONTEXT,))
    print_command(first, "deploy 1/2")
    print_command(final, "deploy 2/2")
    if dry_run:
        return
    _run_deploy(deployment, first)
    returncode = run_cdk(final)
    if returncode == 0:
        return
    restore = deploy_command(deployment, change.stack_key, overrides, settings=live)
    print(f"deploy 2/2 failed (exit {returncode}): putting autoscaling back on {change.live_type}")
    print_command(restore, "restore")
    restored = run_cdk(restore) == 0
    state = (
        f"autoscaling is back on {change.live_type}"
        if restored
        else f"restoring autoscaling on {change.live_type} failed too, so the variant does not scale until a deploy succeeds "
        "(run this command again)"
    )
    raise OperatorError(
        f"deploy of {stack_name(deployment.config, 'serving')} on {wanted} failed (exit {returncode}); the endpoint serves the "
        f"previous model on {change.live_type} and {state} (the promotion record is unchanged)",
        EXIT_FAILED,
    )


def _run_deploy(deployment: Deployment, command: Sequence[str]) -> None:
    returncode = run_cdk(command)
    if returncode != 0:
        raise OperatorError(
            f"deploy of {stack_name(deployment.config, 'serving')} failed (exit {returncode}); a deployment that "
            "tripped an alarm was rolled back and the endpoint serves the previous model (the promotion record is unchanged)",
            EXIT_FAILED,
        )


ENDPOINT_POLL_SECONDS = 30
"""How often :func:`wait_for_endpoint` reads the endpoint's status (tests lower it)."""

ENDPOINT_BUSY = ("Creating", "Updating", "SystemUpdating", "RollingBack")


def stack_endpoint_config(deployment: Deployment) -> str:
    """The name of the EndpointConfig that ``<project>-serving`` deployed (its physical id is the config's ARN
    on AWS, whose name part SageMaker lowercases: DescribeEndpointConfig gives the name as created)."""
    stack = stack_name(deployment.config, "serving")
    cloudformation = deployment.aws.client("cloudformation")
    for page in cloudformation.get_paginator("list_stack_resources").paginate(StackName=stack):
        for resource in page["StackResourceSummaries"]:
            if resource["ResourceType"] == "AWS::SageMaker::EndpointConfig" and resource.get("PhysicalResourceId"):
                name = resource["PhysicalResourceId"].rsplit("endpoint-config/", 1)[-1]
                described = deployment.aws.client("sagemaker").describe_endpoint_config(EndpointConfigName=name)
                return str(described["EndpointConfigName"])
    raise OperatorError(f"{stack} has no AWS::SageMaker::EndpointConfig; redeploy it (python -m scripts.promote JOB)")


def wait_for_endpoint(deployment: Deployment, endpoint: str) -> dict[str, Any]:
    """DescribeEndpoint once the endpoint is no longer creating, updating or rolling back."""
    sagemaker = deployment.aws.client("sagemaker")
    deadline = time.monotonic() + deployment_config(deployment.config.serving, ())["BlueGreenUpdatePolicy"][
        "MaximumExecutionTimeoutInSeconds"
    ] + 600
    while True:
        described = sagemaker.describe_endpoint(EndpointName=endpoint)
        if described["EndpointStatus"] not in ENDPOINT_BUSY:
            return dict(described)
        if time.monotonic() > deadline:
            raise OperatorError(f"{endpoint} is still {described['EndpointStatus']}; the promotion record is unchanged "
                                "(run python -m scripts.promote again once it is InService)", EXIT_FAILED)
        time.sleep(ENDPOINT_POLL_SECONDS)


def served_models(deployment: Deployment, config_name: str) -> set[str]:
    """The ModelDataUrl of every model the endpoint config serves (its variants', or its inference component's)."""
    sagemaker = deployment.aws.client("sagemaker")
    variants = sagemaker.describe_endpoint_config(EndpointConfigName=config_name)["ProductionVariants"]
    models = [str(v["ModelName"]) for v in variants if v.get("ModelName")]
    if not models:  # serving.scale_to_zero: the model is the inference component's
        component = inference_component_name(deployment.config.project_name)
        specification = sagemaker.describe_inference_component(InferenceComponentName=component)["Specification"]
        models = [str(specification["ModelName"])]
    urls = set()
    for model in models:
        described = sagemaker.describe_model(ModelName=model)
        for container in [described.get("PrimaryContainer") or {}, *(described.get("Containers") or [])]:
            source = (container.get("ModelDataSource") or {}).get("S3DataSource") or {}
            url = container.get("ModelDataUrl") or source.get("S3Uri")
            if url:
                urls.add(str(url))
    return urls


def ensure_served(deployment: Deployment, job: str, model: str) -> None:
    """Check the endpoint serves ``model`` after the deploy, moving it back onto the serving stack's config first.

    The pipeline's promote step moves the endpoint with its own UpdateEndpoint, outside CloudFormation: the
    stack's template still names the model it deployed last, so a deploy of that model changes nothing
    ("no changes") while the endpoint serves the pipeline's. Then the endpoint is updated to the stack's
    EndpointConfig with the stack's blue/green deployment and rollback alarms, as the pipeline updates it.
    :class:`OperatorError` (exit 1) when it still serves something else (the alarms rolled it back).
    """
    endpoint = endpoint_name(deployment.config.project_name)
    described = wait_for_endpoint(deployment, endpoint)
    stack_config = stack_endpoint_config(deployment)
    if str(described["EndpointConfigName"]).lower() != stack_config.lower():
        print(f"{endpoint} is on {described['EndpointConfigName']} (moved outside CloudFormation, e.g. by the pipeline), "
              f"not {stack_config} of {stack_name(deployment.config, 'serving')}: updating it (blue/green)")
        request = update_endpoint_request(
            deployment.config.serving, endpoint=endpoint, config_name=stack_config,
            alarm_names=rollback_alarm_names(deployment.config.project_name),
        )  # fmt: skip
        if deployment.config.serving.scale_to_zero:  # the stack's endpoint has no DeploymentConfig then
            request.pop("DeploymentConfig")
        deployment.aws.client("sagemaker").update_endpoint(**request)
        described = wait_for_endpoint(deployment, endpoint)
    served = served_models(deployment, str(described["EndpointConfigName"]))
    if served != {model}:
        reason = f" ({described['FailureReason']})" if described.get("FailureReason") else ""
        raise OperatorError(
            f"{endpoint} serves {', '.join(sorted(served)) or 'no model'} on {described['EndpointConfigName']}, not {job}'s "
            f"{model}{reason}; the promotion record is unchanged (see python -m scripts.promote --show, then promote again)",
            EXIT_FAILED,
        )


def show(deployment: Deployment, record: PromotionRecord) -> None:
    """The record, one line per model."""
    def line(label: str, p: Promotion) -> str:
        metrics = " ".join(f"{k}={v:g}" for k, v in sorted(p.metrics.items())) or "no metrics"
        return f"{label:<12} {p.job}  {p.promoted_at or '-'}  by {p.promoted_by or '-'}  ({metrics})"

    print(f"promotion record {record_parameter(deployment)}:")
    if record.live is None:
        print("live         none (nothing promoted yet)")
    else:
        print(line("live", record.live))
    for p in record.previous:
        print(line("previous", p))
    for p in record.rolled_back:
        print(line("rolled back", p))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.promote",
        description="Serve a finished job's model, record it, roll it back.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=help_epilog(
            "python -m scripts.promote",
            [
                ("gputrain-20260101-120000-ab12 --dry-run", "check the job and print the deploy command"),
                ("gputrain-20260101-120000-ab12", "serve its model (blue/green deploy of <project>-serving), then record it"),
                ("--rollback", "serve the previous approved model again"),
            ],
            credentials=AWS_CREDENTIALS + " The deploy runs the CDK CLI with the same credentials.",
            done="served and recorded (or, with --dry-run or --show, printed)",
            failed="the job did not complete, the deploy failed or was rolled back by an alarm, or the endpoint "
            "does not serve the model afterwards",
        ),
    )
    # One of the three, and no more: argparse names the two that conflict.
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("job_name", nargs="?", metavar="JOB", help="a Completed training job of the project")
    which.add_argument("--rollback", action="store_true", help="serve the previous approved model again")
    which.add_argument("--show", action="store_true", help="print the promotion record only")
    which.add_argument("--best-of", metavar="TUNING_JOB", help="promote the best training job of this tuning job (launch --tune)")
    parser.add_argument("--dry-run", action="store_true", help="check the job and print the deploy command only")
    parser.add_argument(
        "--artifact-key", metavar="KEY",
        help="with JOB or --best-of: serve this model.tar.gz key of the artifacts bucket as the job's model "
        "(a job that wrote its model elsewhere); recorded, so later deploys and --rollback keep it",
    )  # fmt: skip
    parser.add_argument(
        "--no-auto-rollback", action="store_true",
        help="emergency: deploy without rollback alarms (they watch both fleets, so a live model that errors rolls "
        "every fix back); the next deploy names them again",
    )  # fmt: skip
    add_common_arguments(parser)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.artifact_key and not (args.job_name or args.best_of):
        raise UsageError("--artifact-key names the model of a job: give JOB (or --best-of) with it")
    deployment = Deployment.from_args(args)
    if args.artifact_key:
        # The key as the serving stack will take it (a relative model.tar.gz key): refused here in one
        # line rather than by the deploy's synth.
        load_platform_config([*args.context, *source_overrides(args.artifact_key)])
    record = read_record(deployment)
    if args.show:
        show(deployment, record)
        return 0
    options = {"auto_rollback": not args.no_auto_rollback, "dry_run": args.dry_run}
    if args.rollback:
        if not record.previous:
            live = f"{record.live.job} is live" if record.live else "nothing was promoted yet"
            raise OperatorError(f"no previous approved model to roll back to ({live}; see python -m scripts.promote --show)")
        target = record.previous[0]
        key = artifact_key(target.model_data_url)
        key = None if key == ARTIFACT_TEMPLATE.format(job=target.job) else key
        model = check_job(deployment, target.job, key)
        print(f"rolling back {record.live.job if record.live else 'the endpoint'} -> {target.job} (model {model})")
        deploy(deployment, target.job, args.context, key=key, **options)
        if args.dry_run:
            return 0
        ensure_served(deployment, target.job, model)
        # Read again: the deploy bakes for minutes, and the pipeline may have recorded a promotion meanwhile.
        write_record(deployment, read_record(deployment).rolled_back_to(target))
        print(f"{stack_name(deployment.config, 'serving')} serves {target.job} again; {record_parameter(deployment)} updated")
        return 0
    if args.best_of:
        args.job_name = best_of(deployment, args.best_of)
        print(f"{args.best_of}: best training job {args.job_name}")
    model = check_job(deployment, args.job_name, args.artifact_key)
    print(f"{args.job_name} completed; model {model}")
    if args.dry_run:
        deploy(deployment, args.job_name, args.context, key=args.artifact_key, **options)
        return 0
    new = promotion_of(deployment, args.job_name, model)
    deploy(deployment, args.job_name, args.context, key=args.artifact_key, **options)
    ensure_served(deployment, args.job_name, model)
    write_record(deployment, read_record(deployment).promoted(new))
    print(f"{stack_name(deployment.config, 'serving')} serves {args.job_name}; recorded in {record_parameter(deployment)}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
