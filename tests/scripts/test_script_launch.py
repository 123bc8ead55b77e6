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
    allow_p3 = ["-c", 'training_job.allowed_instance_types=["ml.p3.2xlarge"]']
    assert main(["--direct", "--name", f"{PROJECT}-direct-1", "--instance-type", "ml.p3.2xlarge", "--hp", "epochs=2", *allow_p3]) == 0
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
        (["--instance-type", "ml.m5.large"], "instance_type ml.m5.large must be a SageMaker training GPU type"),
        (["--instance-count", "0"], "instance_count 0 must be a whole number from 1 to 64"),
        (["--name", "someone-else-1"], "job_name someone-else-1 must be gputrain-<letters, digits, hyphens>"),
        (["--hp", "epochs"], "is not KEY=VALUE"),
        (["--spot", "-c", "training_job.use_spot=false", "-c", "training_job.checkpointing=false"], "use_spot true must be false: this deployment has checkpointing off"),
        (["--spot", "-c", "training_job.use_spot=false", "-c", "training_job.max_runtime_seconds=200000"],
         "use_spot true needs training_job.max_runtime_seconds (200000) no more than training_job.max_wait_seconds (172800)"),
    ],
)
def test_bad_launch_options_get_one_line_and_exit_3(aws, capsys, argv, message):
    # A malformed --hp is a usage mistake (2); what the platform's rules refuse is exit 3.
    assert run(main, argv) == (2 if argv[0] == "--hp" else 3)
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


@pytest.mark.parametrize("key", ["use_spot=false", "instance_count=4"])
def test_a_setting_without_its_section_is_refused_not_dropped(monkeypatch, capsys, key):
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    assert run(main, ["--dry-run", "--direct", "-c", key]) != 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{key.split('=')[0]} = " in err and "did you mean gpu_training.training_job." in err


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
        [sys.executable, "-m", "scripts.launch", "--dry-run", *direct, "--hp", "epochs=3", "--channel", "train=train/2026-11/", "--name", "gputrain-offline-1"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    note, price = result.stderr.splitlines()
    assert note.startswith("note: no deployed stack could be read (") and "Error" not in note  # no class names
    assert price.startswith("price: training job gputrain-offline-1: 1 x ml.g5.xlarge, managed spot, about $")
    request = json.loads(result.stdout)
    shape = get_session().get_service_model("sagemaker").operation_model("CreateTrainingJob").input_shape
    validate_parameters(request, shape)
    assert request["TrainingJobName"] == "gputrain-offline-1"
    assert request["RoleArn"] == "<gputrain-training.JobRoleArn>"
    # A channel's key prefix is read from the datasets bucket the deployment will have.
    assert request["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"] == "s3://<gputrain-data.DatasetsBucketName>/train/2026-11/"
    assert request["HyperParameters"]["epochs"] == "3" and request["EnableManagedSpotTraining"] is True


def test_offline_an_s3_channel_outside_the_configs_datasets_bucket_is_refused_naming_the_prefix_form(monkeypatch, capsys):
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    assert run(main, ["--dry-run", "--channel", "train=s3://my-datasets/train/x/"]) == 2
    err = capsys.readouterr().err
    assert "offline, no stack says whether my-datasets is the datasets bucket" in err and "--channel train=PREFIX" in err
    # A bucket the config names is known before the deploy.
    assert main(["--dry-run", "--direct", "-c", "data.datasets_bucket_name=my-datasets", "--channel", "train=s3://my-datasets/train/x/"]) == 0
    request = json.loads(capsys.readouterr().out)
    assert request["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"] == "s3://my-datasets/train/x/"


def test_dry_run_offline_still_refuses_bad_options(monkeypatch, capsys):
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    assert run(main, ["--dry-run", "--instance-type", "ml.g4dn.metal"]) == 3
    assert "instance_type ml.g4dn.metal must be a SageMaker training GPU type" in capsys.readouterr().err


def test_a_type_the_deployment_does_not_allow_is_refused_before_any_call(monkeypatch, capsys):
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    assert run(main, ["--dry-run", "--instance-type", "ml.p4d.24xlarge"]) == 3
    assert "training_job.allowed_instance_types: ml.g5.12xlarge, ml.g5.xlarge" in capsys.readouterr().err


def test_offline_resources_use_the_configs_bucket_names_where_it_sets_them():
    from scripts.launch import offline_resources

    config = load_platform_config(["data.artifacts_bucket_name=my-artifacts"])
    resources = offline_resources(config)
    assert (resources.artifacts_bucket, resources.datasets_bucket) == ("my-artifacts", "<gputrain-data.DatasetsBucketName>")


def _user_code(tmp_path):
    source = tmp_path / "my_code"
    (source / "lib").mkdir(parents=True)
    (source / "train.py").write_text("import lib\n")
    (source / "lib" / "__init__.py").write_text("")
    (source / "__pycache__").mkdir()
    (source / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"junk")
    return source


def test_source_dir_is_uploaded_encrypted_and_travels_as_the_code_channel(aws, capsys, tmp_path):
    import io
    import tarfile

    name = f"{PROJECT}-script-1"
    source = _user_code(tmp_path)
    argv = ["--direct", "--name", name, "--source-dir", str(source), "--entry-point", "train.py",
            "--hp", "epochs=3", "--legacy-keras", "--instance-count", "2"]
    assert main(argv) == 0, capsys.readouterr()
    bucket = aws.data["ArtifactsBucketName"]
    key = f"code/{name}/sourcedir.tar.gz"
    s3 = boto3.client("s3", region_name=REGION)
    head = s3.head_object(Bucket=bucket, Key=key)
    assert head["ServerSideEncryption"] == "aws:kms" and head["SSEKMSKeyId"].endswith(aws.data["KeyArn"].split("/")[-1])
    with tarfile.open(fileobj=io.BytesIO(s3.get_object(Bucket=bucket, Key=key)["Body"].read())) as tar:
        assert sorted(tar.getnames()) == ["lib", "lib/__init__.py", "train.py"], "no __pycache__ in the upload"
    job = boto3.client("sagemaker", region_name=REGION).describe_training_job(TrainingJobName=name)
    code = [c for c in job["InputDataConfig"] if c["ChannelName"] == "code"]
    assert code and code[0]["DataSource"]["S3DataSource"]["S3Uri"] == f"s3://{bucket}/{key}"
    assert job["HyperParameters"]["sagemaker_program"] == "train.py"
    assert job["HyperParameters"]["sagemaker_submit_directory"] == "/opt/ml/input/data/code/sourcedir.tar.gz"
    assert job["HyperParameters"]["sagemaker_multi_worker_mirrored_strategy_enabled"] == "true"
    assert job["HyperParameters"]["epochs"] == "3"
    # moto drops Environment from DescribeTrainingJob; the dry run shows what is sent.
    capsys.readouterr()
    assert main([*argv[:2], f"{name}-dry", *argv[3:], "--dry-run"]) == 0
    request = json.loads(capsys.readouterr().out)
    assert request["Environment"]["TF_USE_LEGACY_KERAS"] == "1"
    assert "Contents" not in s3.list_objects_v2(Bucket=bucket, Prefix=f"code/{name}-dry/"), "a dry run uploads nothing"


def test_source_dir_through_the_workflow_sends_the_code_location(aws, capsys, tmp_path):
    name = f"{PROJECT}-script-2"
    assert main(["--name", name, "--source-dir", str(_user_code(tmp_path)), "--entry-point", "train.py"]) == 0
    sfn = boto3.client("stepfunctions", region_name=REGION)
    arn = aws.training["StateMachineArn"].replace(":stateMachine:", ":execution:") + f":{name}"
    assert json.loads(sfn.describe_execution(executionArn=arn)["input"]) == {
        "job_name": name,
        "code_uri": f"s3://{aws.data['ArtifactsBucketName']}/code/{name}/sourcedir.tar.gz",
        "entry_point": "train.py",
    }


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--entry-point", "train.py"], "need --source-dir"),
        (["--source-dir", "."], "--source-dir needs --entry-point"),
        (["--source-dir", "/nonexistent-dir", "--entry-point", "train.py"], "is not a directory"),
        (["--source-dir", "SRC", "--entry-point", "missing.py"], "--entry-point missing.py is not a file in"),
        # The platform's rule on entry points, before anything is packed (3: a launch the rules refuse).
        (["--source-dir", "SRC", "--entry-point", "../train.py"], "entry_point ../train.py must be a .py or .sh file's path inside"),
    ],
)
def test_bad_source_options_get_one_line_and_exit_2(aws, capsys, tmp_path, extra, message):
    extra = [str(_user_code(tmp_path)) if item == "SRC" else item for item in extra]
    assert run(main, ["--direct", *extra]) == (3 if "../" in extra[-1] else 2)
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_upload_only_prints_the_cluster_code_key(aws, capsys, tmp_path):
    from scripts.common import load_platform_config

    name = f"{PROJECT}-cluster-code"
    assert main(["--upload-only", "--name", name, "--source-dir", str(_user_code(tmp_path)), "--entry-point", "train.py"]) == 0
    out = capsys.readouterr().out
    key = f"code/{name}/sourcedir.tar.gz"
    assert f"code_key: {key}" in out
    s3 = boto3.client("s3", region_name=REGION)
    assert s3.head_object(Bucket=aws.data["ArtifactsBucketName"], Key=key)["ServerSideEncryption"] == "aws:kms"
    command = next(line for line in out.splitlines() if line.startswith("cluster: "))
    overrides = [part for part in command.split() if part.startswith("gpu_training.")]
    config = load_platform_config([o.removeprefix("gpu_training.") for o in overrides])
    assert (config.cluster.code_key, config.cluster.entry_point) == (key, "train.py"), "the printed settings validate"
    assert boto3.client("sagemaker", region_name=REGION).list_training_jobs(NameContains=name)["TrainingJobSummaries"] == []


def test_channels_from_the_command_line_replace_and_add_to_the_configured_ones(aws, capsys):
    """Before: a launch trained on the configured channels only (cdk.json's ``train/``), as no
    ``estimator.fit({...})`` could name other data."""
    datasets = aws.data["DatasetsBucketName"]
    name = f"{PROJECT}-channels-1"
    # A key prefix is read from the datasets bucket; an s3:// URI is taken as given.
    argv = ["--channel", "train=train/2026-11/", "--channel", f"holdout=s3://{datasets}/train/holdout/", "--name", name]
    assert main(["--direct", *argv]) == 0
    job = boto3.client("sagemaker", region_name=REGION).describe_training_job(TrainingJobName=name)
    assert {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in job["InputDataConfig"]} == {
        "train": f"s3://{datasets}/train/2026-11/",
        "holdout": f"s3://{datasets}/train/holdout/",
    }
    capsys.readouterr()
    # Through the workflow, the execution carries them and the workflow checks them as the launch did.
    assert main([*argv[:-1], f"{PROJECT}-channels-2"]) == 0
    arn = aws.training["StateMachineArn"].replace(":stateMachine:", ":execution:") + f":{PROJECT}-channels-2"
    execution = boto3.client("stepfunctions", region_name=REGION).describe_execution(executionArn=arn)
    assert json.loads(execution["input"])["channels"] == {
        "train": f"s3://{datasets}/train/2026-11/",
        "holdout": f"s3://{datasets}/train/holdout/",
    }


@pytest.mark.parametrize(
    "argv, code, message",
    [
        (["--channel", "train=raw/secret/"], 3, "must be named with letters, digits, . - _ (not code with a script) and lie under one of s3://"),
        (["--channel", "train=s3://someone-elses-bucket/train/"], 3, "lie under one of s3://"),
        (["--channel", "train"], 2, "channel 'train' is not NAME=PREFIX"),
        (["--channel", "train=/abs/"], 2, "is not NAME=PREFIX"),
        (["--channel", "train=train/a/", "--channel", "train=train/b/"], 2, "channel train is given twice"),
        (["--pipeline", "--channel", "train=train/a/"], 2, "--channel train: the pipeline's train step reads the processing run's output there"),
        (["--channel", "train=https://example.com/train/"], 2, "is not NAME=PREFIX"),
        (["--upload-only", "--source-dir", ".", "--entry-point", "app.py", "--channel", "train=train/a/"], 2, "--channel does not apply"),
        (["--pipeline", "--skip-process", "--skip-train", "--promote", "--channel", "train=train/a/"], 2, "--skip-train leaves"),
        (["--process", "--direct", "--channel", "train=train/a/"], 2, "--channel are training options"),
    ],
)
def test_bad_channels_get_one_line_before_anything_starts(aws, capsys, argv, message, code):
    sfn = boto3.client("stepfunctions", region_name=REGION)
    before = sfn.list_executions(stateMachineArn=aws.training["StateMachineArn"])["executions"]
    assert run(main, ["--dry-run", *argv] if code == 2 else argv) == code
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1
    assert sfn.list_executions(stateMachineArn=aws.training["StateMachineArn"])["executions"] == before
