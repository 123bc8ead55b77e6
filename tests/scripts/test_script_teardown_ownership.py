"""Teardown, its audit and list_jobs against moto: only the project's resources, training jobs in the
audit, warm pools ended while teardown waits, and no cap on the training jobs teardown stops.

Project names may contain hyphens: ``gputrain-`` also begins every name of project ``gputrain-dev``.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from typing import Any, Iterator, Sequence

import boto3
import pytest

from scripts import list_jobs, teardown
from scripts.common import Aws, Deployment, ProjectOwnership, load_platform_config, run
from scripts.launch import main as launch_main
from scripts.teardown_audit import ERROR, INFO, audit
from tests.scripts.conftest import PROJECT, REGION, STOP_CALLS, UPDATE_CALLS

OTHER = f"{PROJECT}-dev"
"""Another project, whose every name also starts with ``gputrain-``."""


def _sagemaker() -> Any:
    return boto3.client("sagemaker", region_name=REGION)


def _training_job(aws, name: str, *, project: str | None = None, keep_alive: int = 0) -> None:
    """A training job as the SageMaker SDK makes one: tagged ``Project=<project>``, or untagged."""
    resources: dict[str, Any] = {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 1}
    if keep_alive:
        resources["KeepAlivePeriodInSeconds"] = keep_alive
    _sagemaker().create_training_job(
        TrainingJobName=name, RoleArn=aws.training["JobRoleArn"],
        AlgorithmSpecification={"TrainingImage": aws.data["ImageUri"], "TrainingInputMode": "File"},
        OutputDataConfig={"S3OutputPath": "s3://x/"}, ResourceConfig=resources, StoppingCondition={"MaxRuntimeInSeconds": 60},
        Tags=[{"Key": "Project", "Value": project}] if project else [],
    )  # fmt: skip


def _endpoint(aws, name: str) -> None:
    """An endpoint, its config and model as the SDK's deploy() makes them (untagged), all named ``name``."""
    sagemaker = _sagemaker()
    sagemaker.create_model(ModelName=name, ExecutionRoleArn=aws.training["JobRoleArn"], PrimaryContainer={"Image": aws.data["ImageUri"]})
    sagemaker.create_endpoint_config(EndpointConfigName=name, ProductionVariants=[
        {"VariantName": "AllTraffic", "ModelName": name, "InstanceType": "ml.g4dn.xlarge", "InitialInstanceCount": 1}])  # fmt: skip
    sagemaker.create_endpoint(EndpointName=name, EndpointConfigName=name)


def _delete_endpoint(name: str) -> None:
    sagemaker = _sagemaker()
    for delete in (lambda: sagemaker.delete_endpoint(EndpointName=name), lambda: sagemaker.delete_endpoint_config(EndpointConfigName=name),
                   lambda: sagemaker.delete_model(ModelName=name)):  # fmt: skip
        try:
            delete()
        except Exception:  # already deleted by the test
            pass


@contextmanager
def _stacks(*names: str) -> Iterator[None]:
    """Stacks of another project (or a user's), deleted afterwards: moto's server lives for the session."""
    cloudformation = boto3.client("cloudformation", region_name=REGION)
    template = json.dumps({"Resources": {"Topic": {"Type": "AWS::SNS::Topic"}}})
    for name in names:
        cloudformation.create_stack(StackName=name, TemplateBody=template)
    try:
        yield
    finally:
        for name in names:
            cloudformation.delete_stack(StackName=name)


def _ended(moto_backends, names: Sequence[str]) -> None:
    """Out of the way of the next test (moto's server lives for the session)."""
    for name in names:
        job = moto_backends.job(name)
        if job.training_job_status in ("InProgress", "Stopping"):
            moto_backends.set_job(name, "Completed", "Completed")
        job.warm_pool_status = None


def _deployment() -> Deployment:
    return Deployment(config=load_platform_config(), aws=Aws(boto3.Session()))


def test_ownership_the_tag_wins_and_an_untagged_name_goes_to_a_deployed_project_named_like_it():
    owner = ProjectOwnership.from_stacks(PROJECT, [
        {"StackName": f"{PROJECT}-data", "StackStatus": "CREATE_COMPLETE"},
        {"StackName": f"{OTHER}-data", "StackStatus": "UPDATE_COMPLETE"},
        {"StackName": f"{PROJECT}-old-data", "StackStatus": "DELETE_COMPLETE"},
        {"StackName": f"{PROJECT}-x-training", "StackStatus": "CREATE_COMPLETE"},
        {"StackName": "other-data", "StackStatus": "CREATE_COMPLETE"},
    ])  # fmt: skip
    assert owner.others == (OTHER,)
    assert owner.owns(f"{PROJECT}-20260101-000000-ab12", None)
    assert not owner.owns(f"{OTHER}-20260101-000000-ab12", None), "untagged, and gputrain-dev is deployed"
    assert owner.owns(f"{OTHER}-mine", PROJECT), "the tag wins"
    assert not owner.owns(f"{PROJECT}-sdk-1", OTHER), "the tag wins"
    assert not owner.owns(f"{PROJECT}-sdk-1", "someone"), "the tag wins"
    assert owner.owns(f"{PROJECT}-old-job", None) and owner.owns(f"{PROJECT}-x-job", None), "no such project deployed"
    assert not owner.owns("other-gputrain-1", PROJECT), "only names starting <project>-"


def test_teardown_and_list_jobs_leave_another_projects_jobs_pools_and_endpoints_alone(aws, moto_backends, capsys):
    theirs_tagged, theirs_untagged, theirs_pool = f"{OTHER}-20260101-000000-ab12", f"{OTHER}-sdk-1", f"{OTHER}-warm-1"
    mine_by_tag, mine_untagged = f"{OTHER}-mine-1", f"{PROJECT}-own-sdk-1"
    jobs = (theirs_tagged, theirs_untagged, theirs_pool, mine_by_tag, mine_untagged)
    for name, project in ((theirs_tagged, OTHER), (theirs_untagged, None), (theirs_pool, OTHER), (mine_by_tag, PROJECT),
                          (mine_untagged, None)):  # fmt: skip
        _training_job(aws, name, project=project)
        moto_backends.set_job(name, "InProgress", "Training")
    moto_backends.set_job(theirs_pool, "Completed", "Completed", warm_pool_status="Available")
    endpoint = f"{OTHER}-sdk-endpoint"
    _endpoint(aws, endpoint)
    STOP_CALLS.clear()
    UPDATE_CALLS.clear()
    try:
        with _stacks(f"{OTHER}-data", f"{OTHER}-training"):
            capsys.readouterr()
            assert run(list_jobs.main, ["--status", "InProgress", "--max", "100"]) == 0
            listed = {row.split()[0] for row in capsys.readouterr().out.splitlines()[1:]}
            assert {mine_by_tag, mine_untagged} <= listed and not listed & {theirs_tagged, theirs_untagged}

            running = teardown.find_running(_deployment())
            assert {mine_by_tag, mine_untagged} <= set(running.jobs) and not set(running.jobs) & set(jobs[:3])
            assert theirs_pool not in running.warm_pools
            assert endpoint not in teardown.find_unowned_endpoints(_deployment())

            assert run(teardown.main, ["--stop-running", "--interval", "0"]) == 0
            assert {name for _, name in STOP_CALLS} >= {mine_by_tag, mine_untagged}
            assert not {name for _, name in STOP_CALLS} & set(jobs[:3]), STOP_CALLS
            assert [moto_backends.job(n).training_job_status for n in jobs] == ["InProgress", "InProgress", "Completed", "Stopped", "Stopped"]
            assert moto_backends.job(theirs_pool).warm_pool_status == "Available" and not UPDATE_CALLS
            sagemaker = _sagemaker()
            assert endpoint in {e["EndpointName"] for e in sagemaker.list_endpoints()["Endpoints"]}
            assert endpoint in {m["ModelName"] for m in sagemaker.list_models()["Models"]}
            assert endpoint in {c["EndpointConfigName"] for c in sagemaker.list_endpoint_configs()["EndpointConfigs"]}
    finally:
        _ended(moto_backends, jobs)
        _delete_endpoint(endpoint)


def test_audit_judges_only_the_projects_stacks_and_sagemaker_records(aws, moto_backends):
    """Not another project's stacks (gputrain-dev-data) nor a stack merely named gputrain-*; not its untagged
    endpoint, model or jobs, nor a job its tag gives to another project."""
    theirs_untagged, theirs_tagged = f"{OTHER}-sdk-2", f"{PROJECT}-sdk-theirs-2"
    _training_job(aws, theirs_untagged)
    _training_job(aws, theirs_tagged, project=OTHER)
    for name in (theirs_untagged, theirs_tagged):
        moto_backends.set_job(name, "InProgress", "Training")
    endpoint = f"{OTHER}-sdk-endpoint-2"
    _endpoint(aws, endpoint)
    try:
        with _stacks(f"{OTHER}-data", f"{OTHER}-training", f"{OTHER}-serving", f"{PROJECT}-notes"):
            report = audit(project=PROJECT, data_retained=True, region=REGION)
        theirs = (theirs_untagged, theirs_tagged, endpoint, f"stack/{OTHER}-", f"stack/{PROJECT}-notes/")
        assert not [f for f in report.findings if any(name in f.arn for name in theirs)], report.render()
        assert not [s for s in report.stacks_left if s not in (f"{PROJECT}-data", f"{PROJECT}-training")]
        assert f"{PROJECT}-data" in report.stacks_left, "the project's own stacks are still judged"
    finally:
        _ended(moto_backends, (theirs_untagged, theirs_tagged))
        _delete_endpoint(endpoint)


def test_audit_finds_untagged_training_jobs_running_or_keeping_a_warm_pool(aws, moto_backends):
    """The SDK does not tag its jobs: found by name, a running one or an Available warm pool is compute left behind."""
    running, pooled, done = f"{PROJECT}-sdk-untagged-run", f"{PROJECT}-sdk-untagged-pool", f"{PROJECT}-sdk-untagged-done"
    for name in (running, pooled, done):
        _training_job(aws, name)
    moto_backends.set_job(running, "InProgress", "Training")
    moto_backends.set_job(pooled, "Completed", "Completed", warm_pool_status="Available")
    try:
        report = audit(project=PROJECT, data_retained=True, region=REGION)
        verdicts = {f.arn.rsplit("/", 1)[-1]: f for f in report.findings if f.kind == "sagemaker:training-job"}
        assert (verdicts[running].verdict, verdicts[running].note) == (ERROR, "compute left behind: training job is InProgress")
        assert verdicts[pooled].verdict == ERROR and "warm pool is Available" in verdicts[pooled].note
        assert verdicts[done].verdict == INFO
        assert not report.ok
    finally:
        _ended(moto_backends, (running, pooled, done))


def test_teardown_leaves_no_warm_pool_after_a_job_it_stops(aws, moto_backends, capsys):
    """KeepAlivePeriodInSeconds is set to 0 before the stop: a job stopped with its cluster up keeps no pool."""
    name = f"{PROJECT}-td-warm-stop"
    assert launch_main(["--direct", "--on-demand", "--keep-alive", "900", "--name", name, "--yes"]) == 0
    moto_backends.set_job(name, "InProgress", "Training")
    UPDATE_CALLS.clear()
    STOP_CALLS.clear()
    try:
        assert run(teardown.main, ["--stop-running", "--interval", "0", "--timeout", "0"]) == 0, capsys.readouterr()
        assert UPDATE_CALLS == [(name, {"KeepAlivePeriodInSeconds": 0})] and STOP_CALLS == [("StopTrainingJob", name)]
        assert moto_backends.job(name).training_job_status == "Stopped"
        assert getattr(moto_backends.job(name), "warm_pool_status", None) is None
    finally:
        _ended(moto_backends, (name,))


def test_teardown_ends_a_warm_pool_a_job_leaves_while_it_waits(aws, moto_backends, capsys):
    """A job already Stopping (not stopped by teardown) ends while teardown waits and keeps its pool: ended on
    the next pass, not waited for until the timeout."""
    name = f"{PROJECT}-td-warm-wait"
    _training_job(aws, name, keep_alive=900)
    moto_backends.set_job(name, "Stopping", "Stopping")
    UPDATE_CALLS.clear()
    passes: list[float] = []

    def sleep(seconds: float) -> None:
        passes.append(seconds)
        if len(passes) == 1:
            moto_backends.set_job(name, "Stopped", "Stopped", warm_pool_status="Available")
        if len(passes) > 10:
            raise AssertionError("still waiting for the warm pool")

    try:
        left = teardown.stop_running(_deployment(), timeout=60, interval=0, sleep=sleep)
        assert not left and len(passes) == 2
        assert UPDATE_CALLS == [(name, {"KeepAlivePeriodInSeconds": 0})]
        assert moto_backends.job(name).warm_pool_status == "Terminated"
        assert f"ending the warm pool of training job {name}" in capsys.readouterr().out
    finally:
        _ended(moto_backends, (name,))


def test_teardown_stops_every_running_training_job_not_the_newest_100(aws, moto_backends):
    names = [f"{PROJECT}-td-many-{i:03d}" for i in range(102)]
    for name in names:
        _training_job(aws, name, project=PROJECT)
        moto_backends.set_job(name, "InProgress", "Training")
    try:
        running = teardown.find_running(_deployment())
        assert set(names) <= set(running.jobs)
    finally:
        for name in names:
            moto_backends.sagemaker.training_jobs.pop(name)


@pytest.fixture(autouse=True)
def _no_other_pools(moto_backends):
    """Warm pools a test left would be ended by the next teardown: none is left."""
    yield
    for job in moto_backends.sagemaker.training_jobs.values():
        job.warm_pool_status = None
