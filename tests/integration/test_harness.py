"""The harness's own parts on a bare emulator (no CDK): the local runner's failure path and the audit.

Faster than the lifecycle: each test starts moto in-process and creates only what it needs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from scripts.emulator import server
from scripts.emulator.sagemaker import LocalSageMaker, parse_final_metrics
from scripts.teardown_audit import ERROR, INFO, KEPT, audit

pytestmark = [pytest.mark.integration]

PROJECT = "gputrain"
TAGS = [{"Key": "Project", "Value": PROJECT}]

IMAGE = f"{server.ACCOUNT}.dkr.ecr.{server.REGION}.amazonaws.com/gputrain-training:1"
"""An image of the emulated account's ECR: the only kind the emulator's runners play."""


@pytest.fixture()
def emulator(tmp_path: Path) -> Iterator[server.Emulator]:
    emu = server.start(log_file=tmp_path / "moto.log")
    try:
        yield emu
    finally:
        emu.stop()


def _client(emu: server.Emulator, service: str) -> Any:
    return server.client(service, endpoint_url=emu.endpoint_url)


def test_final_metrics_are_the_last_value_each_definition_matches() -> None:
    log = "\n".join(
        [
            "[metrics] epoch=1 loss=1.5 accuracy=0.30",
            "noise",
            "[metrics] epoch=2 loss=0.7 accuracy=0.81",
        ]
    )
    definitions = [
        {"Name": "train:epoch", "Regex": r"\[metrics\] epoch=([0-9]+) "},
        {"Name": "train:loss", "Regex": r"\[metrics\] .* loss=([0-9.eE+-]+)"},
        {"Name": "train:missing", "Regex": r"nothing=([0-9]+)"},
    ]
    assert parse_final_metrics(log, definitions) == {"train:epoch": 2.0, "train:loss": 0.7}


@pytest.mark.slow
def test_a_failing_job_is_recorded_failed_with_the_containers_reason(emulator: server.Emulator, tmp_path: Path) -> None:
    s3, sagemaker = _client(emulator, "s3"), _client(emulator, "sagemaker")
    s3.create_bucket(Bucket="data")
    s3.put_object(Bucket="data", Key="train/part-00000.csv", Body=b"f0,f1,label\n0.1,0.2,0\n0.3,0.1,1\n")
    runner = LocalSageMaker(
        endpoint_url=emulator.endpoint_url,
        region=server.REGION,
        account=server.ACCOUNT,
        work_dir=tmp_path / "jobs",
        timeout_seconds=300,
        on_event=lambda _: None,
    )
    runner.start()
    try:
        sagemaker.create_training_job(
            TrainingJobName=f"{PROJECT}-bad-hyperparameter",
            # A typo the trainer refuses by name: the job must fail with that sentence.
            HyperParameters={"model": "mlp", "epochs": "1", "learning_rat": "0.1"},
            AlgorithmSpecification={"TrainingImage": "123456789012.dkr.ecr.us-east-1.amazonaws.com/x:1", "TrainingInputMode": "File"},
            RoleArn="arn:aws:iam::123456789012:role/job",
            InputDataConfig=[
                {
                    "ChannelName": "train",
                    "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://data/train/"}},
                }
            ],
            OutputDataConfig={"S3OutputPath": "s3://data/out"},
            ResourceConfig={"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 50},
            StoppingCondition={"MaxRuntimeInSeconds": 600},
            Tags=TAGS,
        )
        # The emulator keeps the job InProgress for the runner (moto alone would say Completed).
        first = sagemaker.describe_training_job(TrainingJobName=f"{PROJECT}-bad-hyperparameter")
        assert first["TrainingJobStatus"] == "InProgress"
        outcome = runner.wait(f"{PROJECT}-bad-hyperparameter", timeout=300)
    finally:
        runner.stop()
    job = sagemaker.describe_training_job(TrainingJobName=f"{PROJECT}-bad-hyperparameter")
    assert outcome.status == job["TrainingJobStatus"] == "Failed"
    assert "learning_rat" in job["FailureReason"]
    assert "ModelArtifacts" not in job
    assert (outcome.base_dir / "input" / "data" / "train" / "part-00000.csv").is_file()
    assert [t["Status"] for t in job["SecondaryStatusTransitions"]][-1] == "Failed"


@pytest.mark.slow
def test_audit_flags_running_compute_and_reports_kept_data(emulator: server.Emulator) -> None:
    ec2, s3 = _client(emulator, "ec2"), _client(emulator, "s3")
    s3.create_bucket(Bucket=f"{PROJECT}-data-datasets")
    s3.put_bucket_tagging(Bucket=f"{PROJECT}-data-datasets", Tagging={"TagSet": TAGS})
    image = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    instance = ec2.run_instances(
        ImageId=image,
        InstanceType="g5.xlarge",
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[{"ResourceType": "instance", "Tags": TAGS}],
    )["Instances"][0]["InstanceId"]
    boto_session = _session()

    report = audit(project=PROJECT, data_retained=True, session=boto_session, endpoint_url=emulator.endpoint_url)
    verdicts = {f.kind: f.verdict for f in report.findings}
    assert verdicts["ec2:instance"] == ERROR and not report.ok
    assert verdicts["s3:bucket"] == KEPT

    ec2.terminate_instances(InstanceIds=[instance])
    time.sleep(0.1)
    report = audit(project=PROJECT, data_retained=True, session=boto_session, endpoint_url=emulator.endpoint_url)
    assert {f.kind: f.verdict for f in report.findings}["ec2:instance"] == INFO
    assert report.ok

    sandbox = audit(project=PROJECT, data_retained=False, session=boto_session, endpoint_url=emulator.endpoint_url)
    assert {f.kind: f.verdict for f in sandbox.findings}["s3:bucket"] == ERROR


def _session() -> Any:
    import boto3

    return boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", aws_session_token="testing", region_name=server.REGION
    )


def test_audit_flags_a_live_endpoint_as_compute_left_behind(emulator: server.Emulator) -> None:
    sagemaker = _client(emulator, "sagemaker")
    role = f"arn:aws:iam::123456789012:role/{PROJECT}-serving-role"
    sagemaker.create_model(
        ModelName=f"{PROJECT}-model", ExecutionRoleArn=role, PrimaryContainer={"Image": IMAGE}, Tags=TAGS
    )
    sagemaker.create_endpoint_config(
        EndpointConfigName=f"{PROJECT}-config",
        ProductionVariants=[
            {"VariantName": "AllTraffic", "ModelName": f"{PROJECT}-model", "InstanceType": "ml.g5.xlarge", "InitialInstanceCount": 1}
        ],
        Tags=TAGS,
    )
    sagemaker.create_endpoint(EndpointName=f"{PROJECT}-endpoint", EndpointConfigName=f"{PROJECT}-config", Tags=TAGS)
    boto_session = _session()

    report = audit(project=PROJECT, data_retained=True, session=boto_session, endpoint_url=emulator.endpoint_url)
    (endpoint,) = [f for f in report.findings if f.kind == "sagemaker:endpoint"]
    assert endpoint.verdict == ERROR and "compute left behind: endpoint is" in endpoint.note
    assert not report.ok

    sagemaker.delete_endpoint(EndpointName=f"{PROJECT}-endpoint")
    report = audit(project=PROJECT, data_retained=True, session=boto_session, endpoint_url=emulator.endpoint_url)
    assert not [f for f in report.findings if f.kind == "sagemaker:endpoint" and f.verdict == ERROR]


def test_invoking_an_endpoint_no_local_process_serves_is_refused_never_a_canned_answer(emulator: server.Emulator) -> None:
    from botocore.exceptions import ClientError
    from moto.sagemaker.models import sagemaker_backends

    sagemaker, runtime = _client(emulator, "sagemaker"), _client(emulator, "sagemaker-runtime")
    sagemaker.create_model(ModelName="m", ExecutionRoleArn="arn:aws:iam::123456789012:role/r", PrimaryContainer={"Image": IMAGE})
    sagemaker.create_endpoint_config(
        EndpointConfigName="c",
        ProductionVariants=[{"VariantName": "AllTraffic", "ModelName": "m", "InstanceType": "ml.g5.xlarge", "InitialInstanceCount": 1}],
    )
    sagemaker.create_endpoint(EndpointName="unserved", EndpointConfigName="c")
    assert sagemaker.describe_endpoint(EndpointName="unserved")["EndpointStatus"] == "InService"  # moto's word, no container behind it

    def refusal() -> dict[str, Any]:
        with pytest.raises(ClientError) as refused:
            runtime.invoke_endpoint(EndpointName="unserved", ContentType="text/csv", Body=b"1,2,3,4\n")
        return refused.value.response

    error = refusal()
    assert error["ResponseMetadata"]["HTTPStatusCode"] == 400 and error["Error"]["Code"] == "ValidationError"
    assert error["Error"]["Message"].startswith("Endpoint unserved of account 123456789012 is InService in the emulator but no local serving process serves it")

    sagemaker_backends["123456789012"]["us-east-1"].endpoints["unserved"].endpoint_status = "Creating"
    error = refusal()
    assert error["Error"]["Code"] == "ValidationError"
    assert error["Error"]["Message"] == "Endpoint unserved of account 123456789012 is Creating, not InService: nothing answered the invocation."


def test_job_kinds_without_a_local_runner_fail_saying_so_never_completed(emulator: server.Emulator) -> None:
    # moto makes transform, tuning and compilation jobs Completed at creation; nothing ran them.
    sagemaker = _client(emulator, "sagemaker")
    role = "arn:aws:iam::123456789012:role/r"
    sagemaker.create_model(ModelName="m", ExecutionRoleArn=role, PrimaryContainer={"Image": IMAGE})
    sagemaker.create_transform_job(
        TransformJobName="t",
        ModelName="m",
        TransformInput={"DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://in/x/"}}},
        TransformOutput={"S3OutputPath": "s3://out/x/"},
        TransformResources={"InstanceType": "ml.g5.xlarge", "InstanceCount": 1},
    )
    transform = sagemaker.describe_transform_job(TransformJobName="t")
    assert (transform["TransformJobStatus"], transform["FailureReason"]) == (
        "Failed",
        "The emulator has no local runner for transform jobs: nothing ran (run this transform job on AWS).",
    )
    sagemaker.create_hyper_parameter_tuning_job(
        HyperParameterTuningJobName="h",
        HyperParameterTuningJobConfig={
            "Strategy": "Bayesian",
            "ResourceLimits": {"MaxNumberOfTrainingJobs": 2, "MaxParallelTrainingJobs": 1},
            "HyperParameterTuningJobObjective": {"Type": "Maximize", "MetricName": "accuracy"},
        },
        TrainingJobDefinition={
            "AlgorithmSpecification": {"TrainingImage": IMAGE, "TrainingInputMode": "File"},
            "RoleArn": role,
            "OutputDataConfig": {"S3OutputPath": "s3://out/x/"},
            "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 10},
            "StoppingCondition": {"MaxRuntimeInSeconds": 60},
        },
    )
    tuning = sagemaker.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName="h")
    assert tuning["HyperParameterTuningJobStatus"] == "Failed"
    assert tuning["FailureReason"].startswith("The emulator has no local runner for hyper-parameter tuning jobs: nothing ran")
    assert tuning["TrainingJobStatusCounters"]["Completed"] == 0 and "BestTrainingJob" not in tuning
    sagemaker.create_compilation_job(
        CompilationJobName="c",
        RoleArn=role,
        InputConfig={"S3Uri": "s3://in/model.tar.gz", "DataInputConfig": '{"x": [1, 4]}', "Framework": "TENSORFLOW"},
        OutputConfig={"S3OutputLocation": "s3://out/x/", "TargetDevice": "ml_g4dn"},
        StoppingCondition={"MaxRuntimeInSeconds": 60},
    )
    compilation = sagemaker.describe_compilation_job(CompilationJobName="c")
    assert compilation["CompilationJobStatus"] == "FAILED"
    assert compilation["FailureReason"].startswith("The emulator has no local runner for compilation jobs: nothing ran")


@pytest.mark.slow
def test_local_hosting_serves_an_endpoint_with_sagemakers_error_contract(emulator: server.Emulator, tmp_path: Path) -> None:
    import tarfile

    from botocore.exceptions import ClientError

    from scripts.emulator.hosting import ROUTES, LocalHosting
    from tests.serve.helpers import save_tiny_model

    save_tiny_model(tmp_path / "model")
    archive = tmp_path / "model.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted((tmp_path / "model").iterdir()):
            tar.add(path, arcname=path.name)
    s3, sagemaker = _client(emulator, "s3"), _client(emulator, "sagemaker")
    s3.create_bucket(Bucket="artifacts-bucket")
    s3.upload_file(str(archive), "artifacts-bucket", "training-jobs/j/output/model.tar.gz")
    sagemaker.create_model(
        ModelName="m",
        ExecutionRoleArn="arn:aws:iam::123456789012:role/r",
        PrimaryContainer={
            "Image": IMAGE,
            "ModelDataUrl": "s3://artifacts-bucket/training-jobs/j/output/model.tar.gz",
            "Environment": {"EXPECTED_GPU_COUNT": "1", "SERVE_MAX_BATCH_SIZE": "8"},
        },
    )
    sagemaker.create_endpoint_config(
        EndpointConfigName="c",
        ProductionVariants=[{"VariantName": "AllTraffic", "ModelName": "m", "InstanceType": "ml.g5.xlarge", "InitialInstanceCount": 1}],
    )
    sagemaker.create_endpoint(EndpointName=f"{PROJECT}-endpoint", EndpointConfigName="c")
    hosting = LocalHosting(endpoint_url=emulator.endpoint_url, region="us-east-1", work_dir=tmp_path / "endpoints")
    runtime = _client(emulator, "sagemaker-runtime")
    try:
        hosted = hosting.serve(f"{PROJECT}-endpoint")
        assert "warmed_batch_sizes=1,2,4,8" in hosted.log_file.read_text()  # the Model's Environment reached it (every bucket up to 8)
        answer = runtime.invoke_endpoint(EndpointName=f"{PROJECT}-endpoint", ContentType="text/csv", Body=b"1,2,3,4\n")
        assert len(json.loads(answer["Body"].read())["predictions"][0]["probabilities"]) == 3

        with pytest.raises(ClientError) as refused:
            runtime.invoke_endpoint(EndpointName=f"{PROJECT}-endpoint", ContentType="text/csv", Body=b"1,2,3\n")
        assert refused.value.response["Error"]["Code"] == "ModelError"
        assert refused.value.response["OriginalStatusCode"] == 400
        assert json.loads(refused.value.response["OriginalMessage"]) == {"error": "Row 1 has 3 values but the model takes 4 features."}

        with pytest.raises(ClientError) as missing:
            runtime.invoke_endpoint(EndpointName="no-such-endpoint", ContentType="text/csv", Body=b"1\n")
        assert missing.value.response["Error"]["Code"] == "ValidationError"
        assert "Endpoint no-such-endpoint of account 123456789012 not found." == missing.value.response["Error"]["Message"]
    finally:
        hosting.stop()
    assert f"{PROJECT}-endpoint" not in ROUTES and hosted.process.poll() is not None


def _model_archive(tmp_path: Path, name: str, num_classes: int | None) -> Path:
    """A serving model's ``model.tar.gz`` (``num_classes=None``: a broken one that cannot load)."""
    import tarfile

    from tests.serve.helpers import save_tiny_model

    model_dir = tmp_path / name
    if num_classes is None:
        model_dir.mkdir()
        (model_dir / "model.keras").write_bytes(b"not a keras archive")
        (model_dir / "trainer_config.json").write_text(json.dumps({"data": {"num_features": 4, "num_classes": 2}}))
    else:
        save_tiny_model(model_dir, num_classes=num_classes)
    archive = tmp_path / f"{name}.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(model_dir.iterdir()):
            tar.add(path, arcname=path.name)
    return archive


def _wait_endpoint(sagemaker: Any, name: str, timeout: float = 240) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        endpoint = sagemaker.describe_endpoint(EndpointName=name)
        if endpoint["EndpointStatus"] != "Updating" or time.monotonic() > deadline:
            return endpoint
        time.sleep(0.5)


@pytest.mark.slow
def test_update_endpoint_moves_to_the_new_model_or_rolls_back(emulator: server.Emulator, tmp_path: Path) -> None:
    from botocore.exceptions import ClientError

    from scripts.emulator.hosting import LocalHosting

    s3, sagemaker = _client(emulator, "s3"), _client(emulator, "sagemaker")
    runtime = _client(emulator, "sagemaker-runtime")
    s3.create_bucket(Bucket="artifacts-bucket")
    for name, classes in (("first", 3), ("second", 5), ("broken", None)):
        s3.upload_file(str(_model_archive(tmp_path, name, classes)), "artifacts-bucket", f"{name}/model.tar.gz")
        sagemaker.create_model(
            ModelName=name,
            ExecutionRoleArn="arn:aws:iam::123456789012:role/r",
            PrimaryContainer={"Image": IMAGE, "ModelDataUrl": f"s3://artifacts-bucket/{name}/model.tar.gz"},
        )
        sagemaker.create_endpoint_config(
            EndpointConfigName=f"{name}-config",
            ProductionVariants=[{"VariantName": "AllTraffic", "ModelName": name, "InstanceType": "ml.g5.xlarge", "InitialInstanceCount": 1}],
        )
    endpoint = f"{PROJECT}-endpoint"
    sagemaker.create_endpoint(EndpointName=endpoint, EndpointConfigName="first-config")

    def classes() -> int:
        answer = runtime.invoke_endpoint(EndpointName=endpoint, ContentType="text/csv", Body=b"1,2,3,4\n")
        return len(json.loads(answer["Body"].read())["predictions"][0]["probabilities"])

    hosting = LocalHosting(endpoint_url=emulator.endpoint_url, region="us-east-1", work_dir=tmp_path / "endpoints", on_event=lambda _: None,
                           start_timeout_seconds=20)
    try:
        first = hosting.serve(endpoint)
        assert classes() == 3
        with pytest.raises(ClientError, match="Could not find endpoint configuration"):
            sagemaker.update_endpoint(EndpointName=endpoint, EndpointConfigName="no-such-config")

        sagemaker.update_endpoint(EndpointName=endpoint, EndpointConfigName="second-config")
        updating = sagemaker.describe_endpoint(EndpointName=endpoint)
        assert updating["EndpointStatus"] == "Updating"
        assert updating["EndpointConfigName"] == "first-config", "the serving config stays until the update is done"
        assert updating["PendingDeploymentSummary"]["EndpointConfigName"] == "second-config"
        with pytest.raises(ClientError, match="Cannot update in-progress endpoint"):
            sagemaker.update_endpoint(EndpointName=endpoint, EndpointConfigName="first-config")
        done = _wait_endpoint(sagemaker, endpoint)
        assert (done["EndpointStatus"], done["EndpointConfigName"]) == ("InService", "second-config")
        assert "FailureReason" not in done and "PendingDeploymentSummary" not in done
        assert classes() == 5, "invocations reach the new model"
        assert first.process.poll() is not None, "the old model's process was stopped"

        sagemaker.update_endpoint(EndpointName=endpoint, EndpointConfigName="broken-config")
        rolled_back = _wait_endpoint(sagemaker, endpoint)
        assert (rolled_back["EndpointStatus"], rolled_back["EndpointConfigName"]) == ("InService", "second-config")
        assert "broken-config rolled back" in rolled_back["FailureReason"]
        assert classes() == 5, "the old model still serves"
    finally:
        hosting.stop()


@pytest.mark.slow
def test_audit_judges_processing_jobs_and_the_pipelines_models(emulator: server.Emulator) -> None:
    sagemaker = _client(emulator, "sagemaker")
    sagemaker.create_processing_job(
        ProcessingJobName=f"{PROJECT}-e1-process", RoleArn="arn:aws:iam::123456789012:role/p",
        AppSpecification={"ImageUri": "123456789012.dkr.ecr.us-east-1.amazonaws.com/x:1", "ContainerEntrypoint": ["true"]},
        ProcessingResources={"ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.g5.xlarge", "VolumeSizeInGB": 10}},
        Tags=TAGS,
    )
    sagemaker.create_model(ModelName=f"{PROJECT}-e1", ExecutionRoleArn="arn:aws:iam::123456789012:role/m",
                           PrimaryContainer={"Image": IMAGE})
    # No local runner here: the emulator keeps the job InProgress, which is compute left running.
    report = audit(project=PROJECT, data_retained=True, session=_session(), endpoint_url=emulator.endpoint_url)
    verdicts = {f.kind: f.verdict for f in report.findings}
    assert verdicts["sagemaker:processing-job"] == ERROR and not report.ok
    assert verdicts["sagemaker:model"] == "warning"
    from moto.sagemaker.models import sagemaker_backends

    sagemaker_backends[server.ACCOUNT][server.REGION].processing_jobs[f"{PROJECT}-e1-process"].processing_job_status = "Completed"
    report = audit(project=PROJECT, data_retained=True, session=_session(), endpoint_url=emulator.endpoint_url)
    assert {f.kind: f.verdict for f in report.findings}["sagemaker:processing-job"] == INFO and report.ok
