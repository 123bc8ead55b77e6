"""scripts.launch against moto: through the workflow, directly, and its dry run."""

from __future__ import annotations

import json

import boto3
import pytest
from botocore.validate import validate_parameters
from botocore.session import get_session

from scripts.common import Aws, Deployment, load_platform_config, run
from scripts.launch import main
from stacks.components.training_job_spec import CHECKPOINT_PREFIX, load_metric_definitions
from tests.scripts.conftest import PROJECT, REGION


def test_launch_starts_a_workflow_execution_named_after_the_job(aws, capsys):
    assert main(["--instance-count", "2", "--hp", "epochs=7", "--on-demand"]) == 0
    out = capsys.readouterr().out
    name = out.split("job: ", 1)[1].split()[0]
    assert name.startswith(f"{PROJECT}-")
    assert f"https://{REGION}.console.aws.amazon.com/sagemaker/home?region={REGION}#/jobs/{name}" in out
    sfn = boto3.client("stepfunctions", region_name=REGION)
    arn = aws.training["StateMachineArn"].replace(":stateMachine:", ":execution:") + f":{name}"
    execution = sfn.describe_execution(executionArn=arn)
    assert execution["status"] == "RUNNING"
    # Only the overrides travel; the workflow fills in the hardened rest.
    assert json.loads(execution["input"]) == {
        "job_name": name,
        "instance_count": 2,
        "use_spot": False,
        "hyperparameters": {"epochs": "7"},
    }


def test_direct_launch_creates_the_job_with_the_full_request(aws, capsys):
    assert main(["--direct", "--name", f"{PROJECT}-direct-1", "--instance-type", "ml.p3.2xlarge", "--hp", "epochs=2"]) == 0
    assert f"job: {PROJECT}-direct-1" in capsys.readouterr().out
    job = boto3.client("sagemaker", region_name=REGION).describe_training_job(TrainingJobName=f"{PROJECT}-direct-1")
    assert job["RoleArn"] == aws.training["JobRoleArn"]
    assert job["AlgorithmSpecification"]["TrainingImage"] == aws.data["ImageUri"]
    assert job["HyperParameters"] == {"model": "mlp", "epochs": "2", "batch_size": "256"}
    assert job["ResourceConfig"] == {
        "InstanceType": "ml.p3.2xlarge",
        "InstanceCount": 1,
        "VolumeSizeInGB": 100,
        "VolumeKmsKeyId": aws.data["KeyArn"],  # p3 has no local NVMe
    }
    assert job["EnableManagedSpotTraining"] is True
    assert job["StoppingCondition"] == {"MaxRuntimeInSeconds": 86400, "MaxWaitTimeInSeconds": 172800}
    assert job["CheckpointConfig"]["S3Uri"] == f"s3://{aws.data['ArtifactsBucketName']}/{CHECKPOINT_PREFIX}{PROJECT}-direct-1/"
    assert job["VpcConfig"] == {
        "SecurityGroupIds": [aws.training["JobSecurityGroupId"]],
        "Subnets": aws.data["PrivateSubnetIds"].split(","),
    }
    assert job["EnableNetworkIsolation"] is True
    assert job["OutputDataConfig"]["KmsKeyId"] == aws.data["KeyArn"]


def test_dry_run_prints_a_request_the_sagemaker_api_model_accepts(aws, capsys):
    assert main(["--direct", "--dry-run", "--instance-type", "ml.g5.12xlarge", "--instance-count", "2"]) == 0
    request = json.loads(capsys.readouterr().out)
    shape = get_session().get_service_model("sagemaker").operation_model("CreateTrainingJob").input_shape
    validate_parameters(request, shape)  # raises on an unknown key or a wrong type
    assert request["EnableInterContainerTrafficEncryption"] is True
    assert "VolumeKmsKeyId" not in request["ResourceConfig"]  # g5 has local NVMe
    assert request["Environment"] == {"EXPECTED_GPU_COUNT": "4"}
    assert request["AlgorithmSpecification"]["MetricDefinitions"] == load_metric_definitions()
    sagemaker = boto3.client("sagemaker", region_name=REGION)
    assert not [j for j in sagemaker.list_training_jobs()["TrainingJobSummaries"] if j["TrainingJobName"] == request["TrainingJobName"]]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--instance-type", "ml.m5.large"], "not a known SageMaker GPU type"),
        (["--instance-count", "0"], "from 1 to 64"),
        (["--name", "someone-else-1"], "is not allowed; use gputrain-"),
        (["--hp", "epochs"], "is not KEY=VALUE"),
        (["--spot", "-c", "training_job.use_spot=false", "-c", "training_job.checkpointing=false"], "checkpointing off"),
    ],
)
def test_bad_launch_options_get_one_line_and_exit_3(aws, capsys, argv, message):
    assert run(main, argv) == 3
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_direct_launch_reads_the_deployed_resources_from_the_outputs(aws):
    deployment = Deployment(config=load_platform_config(), aws=Aws(boto3.Session()))
    resources = deployment.job_resources()
    assert resources.subnet_ids == aws.data["PrivateSubnetIds"].split(",")
    assert resources.security_group_ids == [aws.training["JobSecurityGroupId"]]


@pytest.mark.parametrize("extra_env", [{}, {"AWS_REGION": "eu-west-1"}], ids=["no-region", "no-credentials"])
@pytest.mark.parametrize("direct", [[], ["--direct"]], ids=["workflow", "direct"])
def test_dry_run_offline_prints_the_full_request_from_the_config(tmp_path, extra_env, direct):
    """No region, no credentials, no stack: the request with deploy-time values as <stack.Output>."""
    import os
    import subprocess
    import sys

    from tests.synth import ROOT

    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_CONFIG_FILE=str(tmp_path / "config"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "credentials"),
        AWS_EC2_METADATA_DISABLED="true",
        **extra_env,
    )
    result = subprocess.run(
        [sys.executable, "-m", "scripts.launch", "--dry-run", *direct, "--hp", "epochs=3", "--name", "gputrain-offline-1"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith("note: no deployed stack could be read (") and result.stderr.count("\n") == 1
    request = json.loads(result.stdout)
    shape = get_session().get_service_model("sagemaker").operation_model("CreateTrainingJob").input_shape
    validate_parameters(request, shape)
    assert request["TrainingJobName"] == "gputrain-offline-1"
    assert request["RoleArn"] == "<gputrain-training.JobRoleArn>"
    assert request["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"] == "s3://<gputrain-data.DatasetsBucketName>/train/"
    assert request["HyperParameters"]["epochs"] == "3" and request["EnableManagedSpotTraining"] is True


def test_dry_run_offline_still_refuses_bad_options(monkeypatch, capsys):
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    assert run(main, ["--dry-run", "--instance-type", "ml.g4dn.metal"]) == 3
    assert "is not offered for SageMaker training" in capsys.readouterr().err


def test_offline_resources_use_the_configs_bucket_names_where_it_sets_them():
    from scripts.launch import offline_resources

    config = load_platform_config(["data.artifacts_bucket_name=my-artifacts"])
    resources = offline_resources(config)
    assert (resources.artifacts_bucket, resources.datasets_bucket) == ("my-artifacts", "<gputrain-data.DatasetsBucketName>")
