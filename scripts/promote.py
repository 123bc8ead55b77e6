"""Serve a finished training job's model, record the promotion durably, and roll it back.

Usage (from the repository root)::

    python -m scripts.promote gputrain-20260101-120000-ab12
    python -m scripts.promote JOB --dry-run        # check the job and print the deploy command
    python -m scripts.promote --best-of TUNING_JOB # the best training job of a tuning job (launch --tune)
    python -m scripts.promote --rollback           # back to the previous approved model
    python -m scripts.promote --show               # the promotion record: live and previous models

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
"""

from __future__ import annotations

import argparse
import json
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
    add_common_arguments,
    cdk_command,
    describe_job,
    error_code,
    help_epilog,
    run,
    run_cdk,
    stack_name,
)
from stacks.components.endpoint_spec import (
    MAX_PROMOTION_RECORD_BYTES,
    PROMOTION_RECORD_SHAPES,
    deployment_config,
    endpoint_name,
    inference_component_name,
    promotion_record_name,
    rollback_alarm_names,
    update_endpoint_request,
)

ARTIFACT_TEMPLATE = "training-jobs/{job}/output/model.tar.gz"


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


def check_job(deployment: Deployment, job: str) -> str:
    """The job's model URI, after checking the job completed and the artifact is in place."""
    description = describe_job(deployment.aws, job)
    if description is None:
        raise OperatorError(f"training job {job} not found in {deployment.aws.region} (see python -m scripts.list_jobs)")
    status = str(description["TrainingJobStatus"])
    if status != "Completed":
        reason = f": {description['FailureReason']}" if description.get("FailureReason") else ""
        raise OperatorError(f"{job} is {status}{reason}; only a Completed job's model can be promoted", EXIT_FAILED)
    bucket = deployment.outputs("data", ("ArtifactsBucketName",))["ArtifactsBucketName"]
    key = ARTIFACT_TEMPLATE.format(job=job)
    expected = f"s3://{bucket}/{key}"
    actual = (description.get("ModelArtifacts") or {}).get("S3ModelArtifacts")
    if actual != expected:
        raise OperatorError(
            f"{job} wrote its model to {actual or 'nowhere'}, not {expected} where the serving stack reads it; "
            "deploy with -c serving.model_artifact_key=<key> instead"
        )
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


def deploy_command(deployment: Deployment, job: str, overrides: Sequence[str]) -> list[str]:
    """``cdk deploy <project>-serving`` with the serving stack pointed at ``job``."""
    return cdk_command(
        "deploy", stack_name(deployment.config, "serving"), "--require-approval", "never",
        overrides=[*overrides, "serving.enabled=true", f"serving.training_job_name={job}"],
    )  # fmt: skip


def print_deploy_command(deployment: Deployment, job: str, overrides: Sequence[str]) -> list[str]:
    command = deploy_command(deployment, job, overrides)
    print("deploy: cdk " + " ".join(command[command.index("deploy") :]))
    return command


def deploy(deployment: Deployment, job: str, overrides: Sequence[str]) -> None:
    """Run the serving stack's deploy for ``job``; :class:`OperatorError` (exit 1) when it fails."""
    command = print_deploy_command(deployment, job, overrides)
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
    add_common_arguments(parser)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    deployment = Deployment.from_args(args)
    record = read_record(deployment)
    if args.show:
        show(deployment, record)
        return 0
    if args.rollback:
        if not record.previous:
            live = f"{record.live.job} is live" if record.live else "nothing was promoted yet"
            raise OperatorError(f"no previous approved model to roll back to ({live}; see python -m scripts.promote --show)")
        target = record.previous[0]
        model = check_job(deployment, target.job)
        print(f"rolling back {record.live.job if record.live else 'the endpoint'} -> {target.job} (model {model})")
        if args.dry_run:
            print_deploy_command(deployment, target.job, args.context)
            return 0
        deploy(deployment, target.job, args.context)
        ensure_served(deployment, target.job, model)
        # Read again: the deploy bakes for minutes, and the pipeline may have recorded a promotion meanwhile.
        write_record(deployment, read_record(deployment).rolled_back_to(target))
        print(f"{stack_name(deployment.config, 'serving')} serves {target.job} again; {record_parameter(deployment)} updated")
        return 0
    if args.best_of:
        args.job_name = best_of(deployment, args.best_of)
        print(f"{args.best_of}: best training job {args.job_name}")
    model = check_job(deployment, args.job_name)
    print(f"{args.job_name} completed; model {model}")
    if args.dry_run:
        print_deploy_command(deployment, args.job_name, args.context)
        return 0
    new = promotion_of(deployment, args.job_name, model)
    deploy(deployment, args.job_name, args.context)
    ensure_served(deployment, args.job_name, model)
    write_record(deployment, read_record(deployment).promoted(new))
    print(f"{stack_name(deployment.config, 'serving')} serves {args.job_name}; recorded in {record_parameter(deployment)}")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
