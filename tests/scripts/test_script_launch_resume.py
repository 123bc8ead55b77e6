"""``scripts.launch --resume-from JOB``: a new job run as JOB ran, from JOB's checkpoint location (moto).

The trainer resuming from that location (mid-epoch too) is tested in tests/trainer; here: what the
launch copies from DescribeTrainingJob, what the command line overrides, the checkpoint location of a
chain of resumes, and the one-line refusals (a running job, no checkpoints, a tuning trial, no job).
"""

from __future__ import annotations

import json

import boto3
import pytest

from scripts import launch
from scripts.common import run
from scripts.launch import main
from stacks.components.training_job_spec import CHECKPOINT_PREFIX
from tests.scripts.conftest import PROJECT, REGION
from tests.scripts.test_script_launch import _user_code


def _job(name: str) -> dict:
    return boto3.client("sagemaker", region_name=REGION).describe_training_job(TrainingJobName=name)


def _checkpoint(aws, name: str) -> str:
    """A checkpoint in ``name``'s location, as its SageMaker job's upload leaves it; returns the location."""
    bucket = aws.data["ArtifactsBucketName"]
    boto3.client("s3", region_name=REGION).put_object(Bucket=bucket, Key=f"{CHECKPOINT_PREFIX}{name}/ckpt-3.index", Body=b"x")
    return f"s3://{bucket}/{CHECKPOINT_PREFIX}{name}/"


def test_a_resumed_job_runs_as_the_stopped_one_ran_from_its_checkpoints(aws, moto_backends, capsys):
    """Before: a job SageMaker stopped on its runtime could only be launched again from scratch."""
    first, second, third = f"{PROJECT}-res-first", f"{PROJECT}-res-second", f"{PROJECT}-res-third"
    assert main(["--direct", "--name", first, "--instance-count", "2", "--on-demand", "--hp", "epochs=30", "--hp", "batch_size=512"]) == 0
    moto_backends.set_job(first, "Stopped", "MaxRuntimeExceeded", "Training job runtime exceeded MaxRuntimeInSeconds provided")
    location = _checkpoint(aws, first)
    capsys.readouterr()

    assert main(["--direct", "--resume-from", first, "--name", second, "--hp", "epochs=50"]) == 0
    out = capsys.readouterr().out
    assert f"resuming {first} (Stopped): from its checkpoints in {location}, on its 2 x ml.g5.xlarge, with its hyperparameters" in out
    job = _job(second)
    assert job["CheckpointConfig"]["S3Uri"] == location
    assert job["HyperParameters"] == {"model": "mlp", "epochs": "50", "batch_size": "512"}
    assert job["ResourceConfig"]["InstanceCount"] == 2 and job["EnableManagedSpotTraining"] is False
    assert [c["ChannelName"] for c in job["InputDataConfig"]] == [c["ChannelName"] for c in _job(first)["InputDataConfig"]]

    # A resume of the resumed job continues the same checkpoints; the command line still wins.
    moto_backends.set_job(second, "Failed", "Failed", "AlgorithmError")
    assert main(["--direct", "--resume-from", second, "--name", third, "--spot"]) == 0
    job = _job(third)
    assert job["CheckpointConfig"]["S3Uri"] == location and job["EnableManagedSpotTraining"] is True
    assert job["HyperParameters"]["epochs"] == "50"


def test_through_the_workflow_the_execution_carries_the_checkpoint_location_and_the_jobs_launch(aws, moto_backends, capsys):
    first, second = f"{PROJECT}-res-wf1", f"{PROJECT}-res-wf2"
    assert main(["--direct", "--name", first, "--on-demand", "--hp", "epochs=3"]) == 0
    moto_backends.set_job(first, "Stopped", "Stopped", "Stopped by the user")
    _checkpoint(aws, first)
    # --channel replaces a copied channel, as --hp a copied hyperparameter.
    assert main(["--resume-from", first, "--name", second, "--channel", "train=train/v2/"]) == 0
    arn = aws.training["StateMachineArn"].replace(":stateMachine:", ":execution:") + f":{second}"
    execution = json.loads(boto3.client("stepfunctions", region_name=REGION).describe_execution(executionArn=arn)["input"])
    assert execution["checkpoint_name"] == first
    assert (execution["instance_type"], execution["instance_count"], execution["use_spot"]) == ("ml.g5.xlarge", 1, False)
    assert execution["hyperparameters"] == {"model": "mlp", "epochs": "3", "batch_size": "256"}
    assert set(execution["channels"]) == {c["ChannelName"] for c in _job(first)["InputDataConfig"]}
    assert execution["channels"]["train"] == f"s3://{aws.data['DatasetsBucketName']}/train/v2/"


def test_a_script_jobs_code_and_entry_point_are_resumed_unless_new_code_is_given(aws, moto_backends, capsys, tmp_path):
    first, second, third = f"{PROJECT}-res-s1", f"{PROJECT}-res-s2", f"{PROJECT}-res-s3"
    source = _user_code(tmp_path)
    assert main(["--direct", "--name", first, "--source-dir", str(source), "--entry-point", "train.py", "--hp", "lr=0.1"]) == 0
    moto_backends.set_job(first, "Stopped", "Stopped", "Stopped by the user")
    _checkpoint(aws, first)
    assert main(["--direct", "--resume-from", first, "--name", second]) == 0
    job = _job(second)
    code = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in job["InputDataConfig"]}["code"]
    assert code == f"s3://{aws.data['ArtifactsBucketName']}/code/{first}/sourcedir.tar.gz"
    assert job["HyperParameters"]["sagemaker_program"] == "train.py" and job["HyperParameters"]["lr"] == "0.1"
    # Fixed code: uploaded under the new job's name, run from the same checkpoints.
    assert main(["--direct", "--resume-from", first, "--name", third, "--source-dir", str(source), "--entry-point", "train.py"]) == 0
    job = _job(third)
    code = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in job["InputDataConfig"]}["code"]
    assert code.endswith(f"/code/{third}/sourcedir.tar.gz") and job["CheckpointConfig"]["S3Uri"].endswith(f"/{first}/")


def test_a_job_is_not_resumed_while_a_resume_of_it_writes_its_checkpoints(aws, moto_backends, capsys):
    first, second = f"{PROJECT}-res-twice1", f"{PROJECT}-res-twice2"
    assert main(["--direct", "--name", first]) == 0
    moto_backends.set_job(first, "Stopped", "Stopped")
    location = _checkpoint(aws, first)
    assert main(["--direct", "--resume-from", first, "--name", second]) == 0
    moto_backends.set_job(second, "InProgress", "Training")
    capsys.readouterr()
    try:
        assert run(main, ["--direct", "--resume-from", first, "--name", f"{PROJECT}-res-twice3"]) == 3
    finally:
        moto_backends.set_job(second, "Stopped", "Stopped")  # ended: other modules list and tear down the project's jobs
    err = capsys.readouterr().err.strip()
    assert f"refused: {second} (a resume of it too) is running and writes {location}" in err and "\n" not in err
    assert run(main, ["--direct", "--resume-from", first, "--name", first]) == 2
    assert f"--resume-from {first} starts a new job: give it another --name" in capsys.readouterr().err


def test_an_sdk_jobs_entry_point_and_a_warm_pool_are_taken_as_sent(aws, moto_backends, capsys, monkeypatch):
    """The SageMaker SDK's estimators JSON-encode every hyperparameter; an on-demand job's warm pool is its own."""
    name, bucket = f"{PROJECT}-res-sdk", aws.data["ArtifactsBucketName"]
    _checkpoint(aws, name)
    described = {
        "TrainingJobName": name, "TrainingJobStatus": "Stopped", "EnableManagedSpotTraining": False,
        "HyperParameters": {"sagemaker_program": '"train.py"', "sagemaker_submit_directory": '"/opt/ml/input/data/code/sourcedir.tar.gz"',
                            "epochs": "3"},
        "InputDataConfig": [{"ChannelName": "code", "DataSource": {"S3DataSource": {"S3Uri": f"s3://{bucket}/code/{name}/sourcedir.tar.gz"}}}],
        "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "KeepAlivePeriodInSeconds": 600},
        "CheckpointConfig": {"S3Uri": f"s3://{bucket}/{CHECKPOINT_PREFIX}{name}"},
    }  # fmt: skip
    monkeypatch.setattr(launch, "describe_job", lambda aws_, job: described if job == name else None)
    assert main(["--direct", "--resume-from", name, "--name", f"{name}-2", "--dry-run"]) == 0
    out = capsys.readouterr().out
    request = json.loads(out[out.index("{"):])
    assert request["HyperParameters"]["sagemaker_program"] == "train.py"
    assert request["ResourceConfig"]["KeepAlivePeriodInSeconds"] == 600
    assert request["CheckpointConfig"]["S3Uri"] == f"s3://{bucket}/{CHECKPOINT_PREFIX}{name}/"


def _trial_description(name: str, bucket: str) -> dict:
    return {"TrainingJobName": name, "TrainingJobStatus": "Completed", "Environment": {"CHECKPOINT_PER_JOB": "true"},
            "CheckpointConfig": {"S3Uri": f"s3://{bucket}/{CHECKPOINT_PREFIX}{PROJECT}-tune/"}}  # fmt: skip


@pytest.mark.parametrize("case", ["running", "no checkpoint", "checkpointing off", "tuning trial", "no such job"])
def test_what_cannot_be_resumed_is_refused_in_one_line_before_anything_is_sent(aws, moto_backends, capsys, monkeypatch, case):
    name, new = f"{PROJECT}-res-{case.replace(' ', '-')}", f"{PROJECT}-res-new-{case.replace(' ', '-')}"
    assert main(["--direct", "--name", name]) == 0
    if case == "running":
        moto_backends.set_job(name, "InProgress", "Training")
        _checkpoint(aws, name)
    elif case == "checkpointing off":
        moto_backends.set_job(name, "Stopped", "Stopped", checkpoint_config=None)
    elif case == "tuning trial":
        trial = _trial_description(name, aws.data["ArtifactsBucketName"])
        monkeypatch.setattr(launch, "describe_job", lambda aws_, job: trial)
    elif case == "no checkpoint":
        moto_backends.set_job(name, "Stopped", "Stopped")
    target = f"{PROJECT}-nope" if case == "no such job" else name
    capsys.readouterr()
    try:
        assert run(main, ["--direct", "--resume-from", target, "--name", new]) == 3
    finally:
        moto_backends.set_job(name, "Stopped", "Stopped")  # ended: other modules list and tear down the project's jobs
    err = capsys.readouterr().err.strip()
    expected = {
        "running": f"refused: {name} is InProgress, and the new job would write the same checkpoints",
        "no checkpoint": f"refused: s3://{aws.data['ArtifactsBucketName']}/{CHECKPOINT_PREFIX}{name}/ holds no checkpoint",
        "checkpointing off": f"refused: {name} kept no checkpoints (it ran with training_job.checkpointing off)",
        "tuning trial": f"refused: {name} is a tuning trial, whose checkpoints are in a folder of their own",
        "no such job": f"no training job {PROJECT}-nope in {REGION} to resume",
    }[case]
    assert "\n" not in err and expected in err, err
    names = [s["TrainingJobName"] for s in boto3.client("sagemaker", region_name=REGION).list_training_jobs()["TrainingJobSummaries"]]
    assert new not in names


def test_resume_from_applies_to_one_training_job_only(aws, capsys, tmp_path):
    assert run(main, ["--resume-from", f"{PROJECT}-x", "--pipeline"]) == 2
    assert "--resume-from continues one training job; --pipeline does not apply" in capsys.readouterr().err
