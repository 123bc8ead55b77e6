"""The operator scripts against a moto server on loopback.

One ``moto.server.ThreadedMotoServer`` per session, on a free port of 127.0.0.1. The scripts reach
it the way they reach any emulator: ``AWS_ENDPOINT_URL``, fake credentials, ``us-east-1``. The
stacks' outputs come from two small CloudFormation stacks deployed into moto
(``gputrain-data``/``gputrain-training``) whose outputs have the names the real stacks export and
point at real moto resources (buckets, KMS key, VPC, subnets, role, security group, state machine).

What moto 5.2.5 cannot do, and how the tests deal with it (everything else is the real moto):

- ``StopTrainingJob`` is not implemented (500 "not been implemented"): :func:`_patch_moto` adds
  it in-process; the job goes straight to ``Stopped`` (SageMaker passes through ``Stopping``).
- Training jobs are ``Completed`` the moment they are created, and ``CreateTrainingJob`` replaces
  the request's ``MetricDefinitions`` with its own: tests that need a running or failed job, or
  the real metric regexes, edit the job in moto's backend (:class:`MotoBackends`).
- Tuning jobs are ``Completed`` the moment they are created, with a fake ``BestTrainingJob``, and
  ``ListTrainingJobsForHyperParameterTuningJob`` is not implemented: the patch serves the trials a
  test puts on moto's tuning job (``trials``, pages of :data:`TRIALS_PAGE`), and tests edit its
  status, counters and best job (:meth:`MotoBackends.set_tuning_job`).
- ``StopHyperParameterTuningJob`` and ``StopTransformJob`` are not implemented: the patch adds them
  as SageMaker behaves: only an InProgress job can be stopped (else ValidationException); it turns
  ``Stopping`` (a tuning job's InProgress trials, ``<tuning job>-NNN-xxxxxxxx``, are stopped) and is
  ``Stopped`` after one more listing of Stopping jobs (ListHyperParameterTuningJobs /
  ListTransformJobs with ``StatusEquals=Stopping``), so a caller's wait sees it Stopping once.
  A job described while Stopping is seen so once, then Stopped, as in a listing.
  Transform jobs, like tuning jobs, are ``Completed`` when created: tests set their status in the
  backend. Every stop request (training, tuning, transform) is recorded in :data:`STOP_CALLS`.
- ``ListTags`` fails (500) on a tuning or transform job created without tags (moto keeps ``None``):
  the patch serves ``[]``, as SageMaker does.
- There are no warm pools: no ``WarmPoolStatus`` and no ``UpdateTrainingJob``. The patch keeps one
  on moto's job (``warm_pool_status``): ``StopTrainingJob`` of a job whose ``KeepAlivePeriodInSeconds``
  is above 0 leaves it ``Available`` (its instances were up), as a test may set it;
  ``DescribeTrainingJob`` and ``ListTrainingJobs`` show it (``WarmPoolStatusEquals`` filters), and
  ``UpdateTrainingJob`` sets ``KeepAlivePeriodInSeconds`` (0 ends an Available pool: ``Terminated``).
  Every update is recorded in :data:`UPDATE_CALLS`.
- Service Quotas only knows the ``vpc`` service and has no ``ListServiceQuotas`` or
  ``GetAWSDefaultServiceQuota``: the patch serves the EC2 and SageMaker quotas a test sets.
- SSM has no Deep Learning AMI parameters and refuses ``PutParameter`` under ``/aws/``: the DLAMI
  parameter is put into the backend directly.
- Step Functions executions stay ``RUNNING`` and never run the definition (no ``.sync``
  integration): a test plays the workflow by creating the job itself.
- CloudFormation requires a resource in every stack and does not validate the real templates
  here; deploying the synthesized stacks is the integration suite's job.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterator, Optional

import boto3
import pytest
from moto.backends import get_backend
from moto.server import ThreadedMotoServer

ACCOUNT = "123456789012"
REGION = "us-east-1"
PROJECT = "gputrain"


class FakeQuotas:
    """Quota values the patched Service Quotas serves; tests set them."""

    def __init__(self) -> None:
        self.applied: dict[tuple[str, str], float] = {}
        self.sagemaker_defaults: dict[str, float] = {}


QUOTAS = FakeQuotas()

STOP_CALLS: list[tuple[str, str]] = []
"""``(operation, job name)`` of every stop the patched moto served, in order (tests clear it)."""

UPDATE_CALLS: list[tuple[str, dict[str, Any]]] = []
"""``(job name, ResourceConfig)`` of every UpdateTrainingJob the patched moto served, in order (tests clear it)."""

TRIALS_PAGE = 2
"""Trials per ListTrainingJobsForHyperParameterTuningJob page (SageMaker's is up to 100): small, so that
the callers' paging is exercised."""


def _quota(service: str, code: str, name: str, value: float) -> dict[str, Any]:
    return {
        "ServiceCode": service,
        "QuotaCode": code,
        "QuotaName": name,
        "Value": value,
        "Unit": "None",
        "Adjustable": True,
        "GlobalQuota": False,
    }


def _patch_moto(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fill the moto gaps listed in the module docstring (in this process, where the server runs)."""
    from moto.core.responses import ActionResult
    from moto.sagemaker.responses import SageMakerResponse
    from moto.servicequotas.exceptions import NoSuchResource
    from moto.servicequotas.responses import ServiceQuotasResponse

    def stop_training_job(self: SageMakerResponse) -> ActionResult:
        name = self._get_param("TrainingJobName")
        self.sagemaker_backend.describe_training_job(name)  # raises ValidationException when missing
        STOP_CALLS.append(("StopTrainingJob", name))
        job = self.sagemaker_backend.training_jobs[name]
        job.training_job_status = "Stopped"
        job.secondary_status = "Stopped"
        if job.resource_config.get("KeepAlivePeriodInSeconds"):
            job.warm_pool_status = "Available"
        return ActionResult({})

    monkeypatch.setattr(SageMakerResponse, "stop_training_job", stop_training_job, raising=False)
    _patch_tuning_and_transform_stops(monkeypatch)
    _patch_tags_and_warm_pools(monkeypatch)

    def list_training_jobs_for_hyper_parameter_tuning_job(self: SageMakerResponse) -> ActionResult:
        name = self._get_param("HyperParameterTuningJobName")
        self.sagemaker_backend.describe_hyper_parameter_tuning_job(name)  # raises ResourceNotFound when missing
        trials = list(getattr(self.sagemaker_backend.hyper_parameter_tuning_jobs[name], "trials", []))
        start = int(self._get_param("NextToken") or 0)
        size = min(int(self._get_param("MaxResults") or 100), TRIALS_PAGE)
        page: dict[str, Any] = {"TrainingJobSummaries": trials[start : start + size]}
        if start + size < len(trials):
            page["NextToken"] = str(start + size)
        return ActionResult(page)

    monkeypatch.setattr(
        SageMakerResponse, "list_training_jobs_for_hyper_parameter_tuning_job", list_training_jobs_for_hyper_parameter_tuning_job,
        raising=False,
    )

    def get_service_quota(self: ServiceQuotasResponse) -> str:
        params = json.loads(self.body)
        key = (params["ServiceCode"], params["QuotaCode"])
        if key not in QUOTAS.applied:
            raise NoSuchResource
        return json.dumps({"Quota": _quota(*key, name=key[1], value=QUOTAS.applied[key])})

    def get_aws_default_service_quota(self: ServiceQuotasResponse) -> str:
        raise NoSuchResource

    def list_sagemaker(self: ServiceQuotasResponse) -> str:
        params = json.loads(self.body)
        if params["ServiceCode"] != "sagemaker":
            raise NoSuchResource
        quotas = [_quota("sagemaker", f"L-{i:08d}", n, v) for i, (n, v) in enumerate(QUOTAS.sagemaker_defaults.items())]
        return json.dumps({"Quotas": quotas})

    def list_applied(self: ServiceQuotasResponse) -> str:
        return json.dumps({"Quotas": []})

    monkeypatch.setattr(ServiceQuotasResponse, "get_service_quota", get_service_quota)
    monkeypatch.setattr(ServiceQuotasResponse, "get_aws_default_service_quota", get_aws_default_service_quota, raising=False)
    monkeypatch.setattr(ServiceQuotasResponse, "list_aws_default_service_quotas", list_sagemaker)
    monkeypatch.setattr(ServiceQuotasResponse, "list_service_quotas", list_applied, raising=False)


def _patch_tags_and_warm_pools(monkeypatch: pytest.MonkeyPatch) -> None:
    """ListTags of an untagged resource, and training jobs' warm pools (UpdateTrainingJob, WarmPoolStatus)."""
    from moto.core.responses import ActionResult
    from moto.sagemaker.responses import SageMakerResponse

    def update_training_job(self: SageMakerResponse) -> ActionResult:
        name = self._get_param("TrainingJobName")
        self.sagemaker_backend.describe_training_job(name)  # raises ValidationException when missing
        job = self.sagemaker_backend.training_jobs[name]
        update = dict(self._get_param("ResourceConfig") or {})
        UPDATE_CALLS.append((name, update))
        job.resource_config = {**job.resource_config, **update}
        if update.get("KeepAlivePeriodInSeconds") == 0 and getattr(job, "warm_pool_status", None) == "Available":
            job.warm_pool_status = "Terminated"
        return ActionResult({"TrainingJobArn": job.arn})

    def pool(job: Any) -> dict[str, Any]:
        return {"Status": job.warm_pool_status, "ResourceRetainedBillableTimeInSeconds": 0}

    describe = SageMakerResponse.describe_training_job
    listing = SageMakerResponse.list_training_jobs

    def describe_training_job(self: SageMakerResponse) -> Any:
        result = describe(self)
        job = self.sagemaker_backend.training_jobs.get(self._get_param("TrainingJobName"))
        if getattr(job, "warm_pool_status", None):
            result.result["WarmPoolStatus"] = pool(job)
        return result

    def list_training_jobs(self: SageMakerResponse) -> Any:
        result = listing(self)
        wanted = self._get_param("WarmPoolStatusEquals")
        summaries = []
        for summary in result.result["TrainingJobSummaries"]:
            job = self.sagemaker_backend.training_jobs[summary["TrainingJobName"]]
            if getattr(job, "warm_pool_status", None):
                summary["WarmPoolStatus"] = pool(job)
            if not wanted or getattr(job, "warm_pool_status", None) == wanted:
                summaries.append(summary)
        result.result["TrainingJobSummaries"] = summaries
        return result

    from scripts.emulator.gaps import untagged_list_tags

    monkeypatch.setattr(SageMakerResponse, "list_tags", untagged_list_tags(SageMakerResponse.list_tags))
    monkeypatch.setattr(SageMakerResponse, "update_training_job", update_training_job, raising=False)
    monkeypatch.setattr(SageMakerResponse, "describe_training_job", describe_training_job)
    monkeypatch.setattr(SageMakerResponse, "list_training_jobs", list_training_jobs)


def _patch_tuning_and_transform_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    """StopHyperParameterTuningJob and StopTransformJob, and the Stopping -> Stopped step of their listings."""
    import re

    from moto.core.responses import ActionResult
    from moto.sagemaker.exceptions import ValidationError
    from moto.sagemaker.responses import SageMakerResponse

    def stopping(job: Any, status_attribute: str) -> None:
        if getattr(job, status_attribute) != "InProgress":
            raise ValidationError(message=f"The request was rejected because the job is in status {getattr(job, status_attribute)}.")
        setattr(job, status_attribute, "Stopping")
        job.stopping_listings = 1
        job.last_modified_time = datetime.now(timezone.utc)

    def stop_hyper_parameter_tuning_job(self: SageMakerResponse) -> ActionResult:
        name = self._get_param("HyperParameterTuningJobName")
        self.sagemaker_backend.describe_hyper_parameter_tuning_job(name)  # raises when missing
        stopping(self.sagemaker_backend.hyper_parameter_tuning_jobs[name], "hyper_parameter_tuning_job_status")
        STOP_CALLS.append(("StopHyperParameterTuningJob", name))
        trial = re.compile(rf"{re.escape(name)}-\d{{3}}-[0-9a-f]{{8}}$")
        for trial_name, trial_job in self.sagemaker_backend.training_jobs.items():
            if trial.match(trial_name) and trial_job.training_job_status == "InProgress":
                trial_job.training_job_status = trial_job.secondary_status = "Stopped"
        return ActionResult({})

    def stop_transform_job(self: SageMakerResponse) -> ActionResult:
        name = self._get_param("TransformJobName")
        self.sagemaker_backend.describe_transform_job(name)  # raises when missing
        stopping(self.sagemaker_backend.transform_jobs[name], "transform_job_status")
        STOP_CALLS.append(("StopTransformJob", name))
        return ActionResult({})

    def settling(operation: str, jobs: str, status_attribute: str) -> None:
        original = getattr(SageMakerResponse, operation)

        def listing(self: SageMakerResponse) -> Any:
            backend_jobs = list(getattr(self.sagemaker_backend, jobs).values())
            for job in backend_jobs:
                if getattr(job, status_attribute) == "Stopping" and getattr(job, "stopping_listings", 0) <= 0:
                    setattr(job, status_attribute, "Stopped")
            result = original(self)
            if self._get_param("StatusEquals") == "Stopping":
                for job in backend_jobs:
                    if getattr(job, status_attribute) == "Stopping":
                        job.stopping_listings = getattr(job, "stopping_listings", 1) - 1
            return result

        monkeypatch.setattr(SageMakerResponse, operation, listing)

    monkeypatch.setattr(SageMakerResponse, "stop_hyper_parameter_tuning_job", stop_hyper_parameter_tuning_job, raising=False)
    monkeypatch.setattr(SageMakerResponse, "stop_transform_job", stop_transform_job, raising=False)
    settling("list_hyper_parameter_tuning_jobs", "hyper_parameter_tuning_jobs", "hyper_parameter_tuning_job_status")
    settling("list_transform_jobs", "transform_jobs", "transform_job_status")

    def settling_describe(operation: str, jobs: str, status_attribute: str, name_param: str) -> None:
        # A job described while Stopping is seen Stopping once, then Stopped (a caller's wait runs once).
        original = getattr(SageMakerResponse, operation)

        def describe(self: SageMakerResponse) -> Any:
            job = getattr(self.sagemaker_backend, jobs).get(self._get_param(name_param))
            if job is not None and getattr(job, status_attribute) == "Stopping":
                if getattr(job, "stopping_listings", 0) <= 0:
                    setattr(job, status_attribute, "Stopped")
                else:
                    job.stopping_listings -= 1
            return original(self)

        monkeypatch.setattr(SageMakerResponse, operation, describe)

    settling_describe("describe_hyper_parameter_tuning_job", "hyper_parameter_tuning_jobs", "hyper_parameter_tuning_job_status",
                      "HyperParameterTuningJobName")  # fmt: skip
    settling_describe("describe_transform_job", "transform_jobs", "transform_job_status", "TransformJobName")


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    """A patched moto server on a free loopback port."""
    from moto.moto_api._internal.models import moto_api_backend

    # moto's backends are per process: an emulator that ran earlier in this worker (tests/integration,
    # another group) left its deployment there, e.g. instances tagged as this project's cluster.
    moto_api_backend.reset()
    patcher = pytest.MonkeyPatch()
    _patch_moto(patcher)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()
    patcher.undo()


def _aws_env(monkeypatch: pytest.MonkeyPatch, endpoint: str) -> None:
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_DEFAULT_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/aws-config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/aws-credentials")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


DATA_TEMPLATE = {
    "Resources": {
        "Vpc": {"Type": "AWS::EC2::VPC", "Properties": {"CidrBlock": "10.40.0.0/16"}},
        "SubnetA": {
            "Type": "AWS::EC2::Subnet",
            "Properties": {"VpcId": {"Ref": "Vpc"}, "CidrBlock": "10.40.0.0/20", "AvailabilityZone": "us-east-1a"},
        },
        "SubnetB": {
            "Type": "AWS::EC2::Subnet",
            "Properties": {"VpcId": {"Ref": "Vpc"}, "CidrBlock": "10.40.16.0/20", "AvailabilityZone": "us-east-1b"},
        },
        "Datasets": {"Type": "AWS::S3::Bucket"},
        "Artifacts": {"Type": "AWS::S3::Bucket"},
        "Key": {
            "Type": "AWS::KMS::Key",
            "Properties": {
                "KeyPolicy": {
                    "Version": "2012-10-17",
                    "Statement": [{"Effect": "Allow", "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"}, "Action": "kms:*", "Resource": "*"}],
                }
            },
        },
    },
    "Outputs": {
        "DatasetsBucketName": {"Value": {"Ref": "Datasets"}},
        "ArtifactsBucketName": {"Value": {"Ref": "Artifacts"}},
        "KeyArn": {"Value": {"Fn::GetAtt": ["Key", "Arn"]}},
        "ImageUri": {"Value": {"Fn::Sub": "${AWS::AccountId}.dkr.ecr.${AWS::Region}.amazonaws.com/gputrain-training:tf2.21.0-gpu-1"}},
        "VpcId": {"Value": {"Ref": "Vpc"}},
        "PrivateSubnetIds": {"Value": {"Fn::Join": [",", [{"Ref": "SubnetA"}, {"Ref": "SubnetB"}]]}},
    },
}

TRAINING_TEMPLATE = {
    "Resources": {
        "JobRole": {
            "Type": "AWS::IAM::Role",
            "Properties": {
                "AssumeRolePolicyDocument": {
                    "Version": "2012-10-17",
                    "Statement": [{"Effect": "Allow", "Principal": {"Service": "sagemaker.amazonaws.com"}, "Action": "sts:AssumeRole"}],
                }
            },
        },
        "WorkflowRole": {
            "Type": "AWS::IAM::Role",
            "Properties": {
                "AssumeRolePolicyDocument": {
                    "Version": "2012-10-17",
                    "Statement": [{"Effect": "Allow", "Principal": {"Service": "states.amazonaws.com"}, "Action": "sts:AssumeRole"}],
                }
            },
        },
        "ProcessingRole": {
            "Type": "AWS::IAM::Role",
            "Properties": {
                "AssumeRolePolicyDocument": {
                    "Version": "2012-10-17",
                    "Statement": [{"Effect": "Allow", "Principal": {"Service": "sagemaker.amazonaws.com"}, "Action": "sts:AssumeRole"}],
                }
            },
        },
        "PipelineStateMachine": {
            "Type": "AWS::StepFunctions::StateMachine",
            "Properties": {
                "StateMachineName": f"{PROJECT}-pipeline",
                "RoleArn": {"Fn::GetAtt": ["WorkflowRole", "Arn"]},
                "DefinitionString": json.dumps({"StartAt": "Run", "States": {"Run": {"Type": "Pass", "End": True}}}),
            },
        },
        "JobSecurityGroup": {
            "Type": "AWS::EC2::SecurityGroup",
            "Properties": {"GroupDescription": "training jobs", "VpcId": "{vpc_id}"},
        },
        "StateMachine": {
            "Type": "AWS::StepFunctions::StateMachine",
            "Properties": {
                "StateMachineName": f"{PROJECT}-training-job",
                "RoleArn": {"Fn::GetAtt": ["WorkflowRole", "Arn"]},
                # moto records executions but never runs a definition; the real one is tested in tests/unit.
                "DefinitionString": json.dumps({"StartAt": "Train", "States": {"Train": {"Type": "Pass", "End": True}}}),
            },
        },
    },
    "Outputs": {
        "StateMachineArn": {"Value": {"Ref": "StateMachine"}},
        "JobRoleArn": {"Value": {"Fn::GetAtt": ["JobRole", "Arn"]}},
        "JobSecurityGroupId": {"Value": {"Fn::GetAtt": ["JobSecurityGroup", "GroupId"]}},
        "JobNamePrefix": {"Value": f"{PROJECT}-"},
        "ProcessingRoleArn": {"Value": {"Fn::GetAtt": ["ProcessingRole", "Arn"]}},
        "PipelineStateMachineArn": {"Value": {"Ref": "PipelineStateMachine"}},
    },
}


@dataclass
class Platform:
    """The deployed (moto) platform: outputs of both stacks."""

    data: dict[str, str]
    training: dict[str, str]


def _deploy(cfn: Any, name: str, template: dict[str, Any]) -> dict[str, str]:
    cfn.create_stack(StackName=name, TemplateBody=json.dumps(template))
    stack = cfn.describe_stacks(StackName=name)["Stacks"][0]
    assert stack["StackStatus"] == "CREATE_COMPLETE", stack
    return {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}


@pytest.fixture(scope="session")
def platform(moto_endpoint: str) -> Platform:
    """``gputrain-data`` and ``gputrain-training`` with the outputs the scripts read."""
    patcher = pytest.MonkeyPatch()
    _aws_env(patcher, moto_endpoint)
    try:
        cfn = boto3.client("cloudformation", region_name=REGION)
        data = _deploy(cfn, f"{PROJECT}-data", DATA_TEMPLATE)
        training_template = json.loads(json.dumps(TRAINING_TEMPLATE).replace('"{vpc_id}"', json.dumps(data["VpcId"])))
        training = _deploy(cfn, f"{PROJECT}-training", training_template)
        # A stack of another project that lacks most outputs (an old or partial deploy).
        partial = {"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}, "Outputs": {"StateMachineArn": {"Value": "arn:aws:states:us-east-1:123456789012:stateMachine:x"}}}
        _deploy(cfn, "partial-training", partial)
        _deploy(cfn, "partial-data", partial)
    finally:
        patcher.undo()
    return Platform(data=data, training=training)


@pytest.fixture
def aws(moto_endpoint: str, platform: Platform, monkeypatch: pytest.MonkeyPatch) -> Platform:
    """The environment a script sees: the moto endpoint, fake credentials, us-east-1."""
    _aws_env(monkeypatch, moto_endpoint)
    QUOTAS.applied.clear()
    QUOTAS.sagemaker_defaults.clear()
    return platform


class MotoBackends:
    """Direct access to moto's in-process state, for what its API cannot express."""

    def __init__(self) -> None:
        self.sagemaker = get_backend("sagemaker")[ACCOUNT][REGION]
        self.ssm = get_backend("ssm")[ACCOUNT][REGION]

    def job(self, name: str) -> Any:
        return self.sagemaker.training_jobs[name]

    def execution(self, arn: str) -> Any:
        """moto's record of a Step Functions execution (which moto never runs)."""
        return get_backend("stepfunctions")[ACCOUNT][REGION].describe_execution(arn)

    def set_job(self, name: str, status: str, secondary: str, message: str = "", **attributes: Any) -> None:
        """Put a job in ``status``/``secondary`` and record the transition, as SageMaker would."""
        job = self.job(name)
        now = datetime.now(timezone.utc)
        job.training_job_status = status
        job.secondary_status = secondary
        job.secondary_status_transitions = [*job.secondary_status_transitions, {"Status": secondary, "StartTime": now, "StatusMessage": message}]
        job.last_modified_time = now
        for key, value in attributes.items():
            setattr(job, key, value)

    def set_tuning_job(self, name: str, status: str, *, trials: list[dict[str, Any]], best: Optional[str] = None,
                       max_jobs: Optional[int] = None, failure_reason: str = "") -> None:
        """Put a tuning job in ``status`` with ``trials`` (summaries: TrainingJobName, TrainingJobStatus,
        TunedHyperParameters, optional ``objective`` value and FailureReason), their counters, and ``best`` (a
        trial's name) as its BestTrainingJob, as SageMaker shows them."""
        job = self.sagemaker.hyper_parameter_tuning_jobs[name]
        now = datetime.now(timezone.utc)
        objective = job.hyper_parameter_tuning_job_config["HyperParameterTuningJobObjective"]
        summaries = []
        for number, trial in enumerate(trials):
            summary = {k: v for k, v in trial.items() if k != "objective"}
            summary.setdefault("TrainingJobArn", f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-job/{trial['TrainingJobName']}")
            summary.setdefault("CreationTime", datetime(2026, 1, 1, 12, number, tzinfo=timezone.utc))
            if trial.get("objective") is not None:
                summary["FinalHyperParameterTuningJobObjectiveMetric"] = {
                    "Type": objective["Type"], "MetricName": objective["MetricName"], "Value": trial["objective"],
                }
            summaries.append(summary)
        statuses = [t["TrainingJobStatus"] for t in trials]
        job.hyper_parameter_tuning_job_status = status
        job.training_job_status_counters = {
            "Completed": statuses.count("Completed"), "InProgress": statuses.count("InProgress"), "RetryableError": 0,
            "NonRetryableError": statuses.count("Failed"), "Stopped": statuses.count("Stopped"),
        }
        job.trials = summaries
        job.best_training_job = next((s for s in summaries if s["TrainingJobName"] == best), None)
        job.OverallBestTrainingJob = job.best_training_job
        job.failure_reason = failure_reason
        job.last_modified_time = now
        if max_jobs is not None:
            job.hyper_parameter_tuning_job_config["ResourceLimits"]["MaxNumberOfTrainingJobs"] = max_jobs

    def put_public_parameter(self, name: str, value: str) -> None:
        """An ``/aws/service/...`` parameter (moto's PutParameter refuses that prefix, like AWS)."""
        from moto.ssm.models import Parameter

        self.ssm._parameters[name].append(
            Parameter(
                account_id=ACCOUNT,
                name=name,
                value=value,
                parameter_type="String",
                description=None,
                allowed_pattern=None,
                keyid=None,
                last_modified_date=datetime.now(timezone.utc),
                version=1,
                data_type="text",
            )
        )


@pytest.fixture
def moto_backends(aws: Platform) -> MotoBackends:
    return MotoBackends()
