"""scripts.launch --pipeline / --process --direct and scripts.watch --execution against moto.

moto records pipeline executions but runs none of them (the local executor that does is tested in
tests/unit/test_emulator_states.py and, on the real definition, in tests/integration): here the
tests check what the scripts send, and play the execution's outcome in moto's backend to check
what ``watch`` makes of it.
"""

from __future__ import annotations

import io
import json
import tarfile
from datetime import datetime, timezone

import boto3
import pytest
from botocore.session import get_session
from botocore.validate import validate_parameters

from scripts.common import run
from scripts.launch import main as launch
from scripts.pipeline import pipeline_names
from scripts.watch import follow_pipeline, main as watch
from tests.scripts.conftest import PROJECT, REGION


def _execution(aws, name: str) -> dict:
    arn = aws.training["PipelineStateMachineArn"].replace(":stateMachine:", ":execution:") + f":{name}"
    return boto3.client("stepfunctions", region_name=REGION).describe_execution(executionArn=arn)


def _processing_script(tmp_path):
    source = tmp_path / "prep"
    source.mkdir()
    (source / "prep.py").write_text("print('prep')\n")
    return source


# --- launch --process --direct --------------------------------------------------------------


def test_process_direct_creates_the_job_with_the_request_the_pipeline_builds(aws, capsys):
    name = f"{PROJECT}-direct-p1-process"
    argv = ["--process", "--direct", "--name", name, "--process-arg=--shards", "--process-arg=4",
            "--input-uri", f"s3://{aws.data['DatasetsBucketName']}/raw/2026/"]
    assert launch(argv) == 0
    out = capsys.readouterr().out
    assert f"processing job: {name}" in out
    assert f"outputs: s3://{aws.data['DatasetsBucketName']}/processed/{name}/" in out
    job = boto3.client("sagemaker", region_name=REGION).describe_processing_job(ProcessingJobName=name)
    assert job["RoleArn"] == aws.training["ProcessingRoleArn"]
    assert job["AppSpecification"]["ContainerEntrypoint"] == ["python3", "-m", "trainer", "process"]
    assert job["AppSpecification"]["ContainerArguments"] == ["--shards", "4"]
    assert job["ProcessingInputs"][0]["S3Input"]["S3Uri"] == f"s3://{aws.data['DatasetsBucketName']}/raw/2026/"
    outputs = {o["OutputName"]: o["S3Output"]["S3Uri"] for o in job["ProcessingOutputConfig"]["Outputs"]}
    assert outputs == {out_name: f"s3://{aws.data['DatasetsBucketName']}/processed/{name}/{out_name}/" for out_name in ("train", "validation")}
    assert job["ProcessingOutputConfig"]["KmsKeyId"] == aws.data["KeyArn"]
    assert job["NetworkConfig"]["EnableNetworkIsolation"] is True
    # The dry run prints the request: one the SageMaker API model accepts.
    assert launch([*argv[:3], f"{name}-dry", *argv[4:], "--dry-run"]) == 0
    request = json.loads(capsys.readouterr().out)
    validate_parameters(request, get_session().get_service_model("sagemaker").operation_model("CreateProcessingJob").input_shape)
    assert request["Environment"]["EXPECTED_GPU_COUNT"] == "1"


def test_process_direct_refuses_an_output_prefix_that_already_holds_data(aws, capsys):
    name = f"{PROJECT}-direct-p2-process"
    boto3.client("s3", region_name=REGION).put_object(
        Bucket=aws.data["DatasetsBucketName"], Key=f"processed/{name}/train/part-00000.tfrecord", Body=b"old"
    )
    assert run(launch, ["--process", "--direct", "--name", name]) == 3
    err = capsys.readouterr().err
    assert err.startswith(f"error: OutputPrefixNotEmpty: s3://{aws.data['DatasetsBucketName']}/processed/{name}/ already holds data")
    with pytest.raises(Exception, match="Could not find"):
        boto3.client("sagemaker", region_name=REGION).describe_processing_job(ProcessingJobName=name)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--process"], "--process creates one processing job directly: add --direct"),
        (["--process", "--direct", "--hp", "epochs=2"], "--hp are training options"),
        (["--skip-train"], "--skip-train only apply to --pipeline"),
        (["--process-arg=--shards"], "need --pipeline or --process --direct"),
        (["--pipeline", "--skip-process", "--skip-train"], "leave the pipeline nothing to do"),
        (["--pipeline", "--direct"], "--direct does not apply"),
        (["--pipeline", "--name", "x" * 50], "SageMaker allows 63: pick a shorter --name"),
        (["--pipeline", "--input-uri", "s3://elsewhere/raw/"], "process.input_uri s3://elsewhere/raw/ must lie under"),
        (["--pipeline", "--process-instance-type", "ml.m5.xlarge"], "process.instance_type ml.m5.xlarge must be a GPU type SageMaker Processing offers"),
        (["--pipeline", "--process-entry-point", "prep.py"], "--process-source-dir DIR and --process-entry-point SCRIPT together"),
        (["--pipeline", "--skip-process", "--input-uri", "s3://x/raw/"], "have no effect with --skip-process"),
        (["--skip-transform"], "--skip-transform only apply to --pipeline"),
        (["--pipeline", "--skip-transform"], "--skip-transform: the deployed pipeline has no transform step"),
    ],
)
def test_bad_pipeline_and_processing_options_get_one_line_and_exit_2_or_3(aws, capsys, argv, message):
    # Options that do not go together, or half of a pair, are usage (2); a value the rules refuse is 3.
    usage = ("--process creates", "--hp are", "only apply to", "need --pipeline", "nothing to do", "--direct does not",
             "together", "no effect with", "no transform step")
    assert run(launch, argv) == (2 if any(u in message for u in usage) else 3)
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


# --- launch --pipeline ----------------------------------------------------------------------


def test_pipeline_starts_one_execution_with_the_steps_asked_for(aws, capsys):
    assert launch(["--pipeline", "--promote", "--name", "run-1", "--process-arg=--shards", "--process-arg=2",
                   "--hp", "epochs=3", "--on-demand"]) == 0
    out = capsys.readouterr().out
    execution = _execution(aws, "run-1")
    assert f"execution: {execution['executionArn']}" in out
    for line in (f"processing job: {PROJECT}-run-1-process", f"training job: {PROJECT}-run-1-train",
                 f"model: {PROJECT}-run-1", f"endpoint config: {PROJECT}-run-1"):
        assert line in out
    # Only the overrides travel; the pipeline names the jobs and fills in the rest.
    assert json.loads(execution["input"]) == {
        "process": {"arguments": ["--shards", "2"]},
        "train": {"use_spot": False, "hyperparameters": {"epochs": "3"}},
        "promote": True,
    }


def test_pipeline_steps_can_be_skipped(aws, capsys):
    assert launch(["--pipeline", "--skip-process", "--name", "run-2"]) == 0
    out = capsys.readouterr().out
    assert json.loads(_execution(aws, "run-2")["input"]) == {"train": {}}
    assert "processing job" not in out and f"training job: {PROJECT}-run-2-train" in out
    assert launch(["--pipeline", "--skip-train", "--name", "run-3", "--input-uri", f"s3://{aws.data['DatasetsBucketName']}/raw/a/"]) == 0
    assert json.loads(_execution(aws, "run-3")["input"]) == {"process": {"input_uri": f"s3://{aws.data['DatasetsBucketName']}/raw/a/"}}


def test_channels_of_the_users_own_are_read_beside_the_processing_runs_outputs(aws, capsys):
    datasets = aws.data["DatasetsBucketName"]
    assert launch(["--pipeline", "--name", "run-ch", "--channel", "vocab=train/vocab/"]) == 0
    out = f"s3://{datasets}/processed/{PROJECT}-run-ch-process/"
    assert json.loads(_execution(aws, "run-ch")["input"])["train"] == {"channels": {
        "train": f"{out}train/", "validation": f"{out}validation/", "vocab": f"s3://{datasets}/train/vocab/"}}
    # Without processing, they are the train step's channels (over the configured ones).
    assert launch(["--pipeline", "--skip-process", "--name", "run-ch2", "--channel", "train=train/2026-11/"]) == 0
    assert json.loads(_execution(aws, "run-ch2")["input"])["train"] == {"channels": {"train": f"s3://{datasets}/train/2026-11/"}}


def test_pipeline_uploads_a_processing_script_and_sends_its_location(aws, capsys, tmp_path):
    assert launch(["--pipeline", "--skip-train", "--name", "run-4", "--process-source-dir", str(_processing_script(tmp_path)),
                   "--process-entry-point", "prep.py"]) == 0
    key = f"code/{PROJECT}-run-4-process/sourcedir.tar.gz"
    assert json.loads(_execution(aws, "run-4")["input"]) == {
        "process": {"code_uri": f"s3://{aws.data['ArtifactsBucketName']}/{key}", "entry_point": "prep.py"}
    }
    body = boto3.client("s3", region_name=REGION).get_object(Bucket=aws.data["ArtifactsBucketName"], Key=key)["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        assert tar.getnames() == ["prep.py"]


def test_pipeline_dry_run_prints_the_input_and_starts_nothing(aws, capsys):
    assert launch(["--pipeline", "--name", "run-dry", "--dry-run"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"process": {}, "train": {}}
    assert f"training job: {PROJECT}-run-dry-train" in captured.err
    with pytest.raises(Exception, match="ExecutionDoesNotExist|does not exist"):
        _execution(aws, "run-dry")


def test_pipeline_names_follow_the_input() -> None:
    names = pipeline_names("gputrain", "e1", {"process": {"job_name": "gputrain-mine"}, "train": {}})
    assert (names.processing_job, names.training_job, names.model) == ("gputrain-mine", "gputrain-e1-train", None)
    assert names.transform_job is None, "no transform unless the deployment has one"


def test_pipeline_names_of_the_transform_follow_the_deployment_and_the_input() -> None:
    uri = "s3://a/training-jobs/j/output/model.tar.gz"
    for execution_input, expected in (
        ({"train": {}}, "gputrain-e1-transform"),
        ({"promote": {"model_uri": uri}}, "gputrain-e1-transform"),
        ({"train": {}, "transform": False}, None),
        ({"process": {}}, None),  # no model: nothing to transform
    ):
        names = pipeline_names("gputrain", "e1", execution_input, transform=True)
        assert names.transform_job == expected, execution_input
    assert "transform job: gputrain-e1-transform" in pipeline_names("gputrain", "e1", {"train": {}}, transform=True).lines()


def test_pipeline_dry_run_prices_and_names_the_transform_and_skips_it_on_request(aws, capsys):
    transform = ["-c", "transform.enabled=true", "-c", "transform.instance_type=ml.g6.xlarge"]
    assert launch(["--pipeline", "--skip-process", "--name", "run-t1", "--dry-run", *transform]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"train": {}}
    price_lines = [line for line in captured.err.splitlines() if "ml.g6.xlarge" in line]
    assert len(price_lines) == 1 and f"{PROJECT}-run-t1-transform" in price_lines[0], captured.err
    assert f"transform job: {PROJECT}-run-t1-transform" in captured.err
    assert launch(["--pipeline", "--skip-process", "--skip-transform", "--name", "run-t2", "--dry-run", *transform]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == {"train": {}, "transform": False}
    assert "transform" not in captured.err


# --- watch --execution / --pipeline -----------------------------------------------------------


def _play(moto_backends, aws, name: str, status: str, **fields) -> None:
    arn = aws.training["PipelineStateMachineArn"].replace(":stateMachine:", ":execution:") + f":{name}"
    execution = moto_backends.execution(arn)
    execution.status = status
    execution.stop_date = datetime.now(timezone.utc)
    for key, value in fields.items():
        setattr(execution, key, value)


def test_watch_follows_a_failed_execution_to_its_named_failure(aws, moto_backends, capsys):
    assert launch(["--pipeline", "--skip-process", "--name", "watch-1"]) == 0
    capsys.readouterr()
    _play(moto_backends, aws, "watch-1", "FAILED", error="TrainingJobFailed",
          cause="AlgorithmError: unknown hyperparameter 'learning_rat'")
    assert run(watch, ["--execution", "watch-1", "--interval", "0"]) == 1
    out = capsys.readouterr().out
    assert "following pipeline execution watch-1" in out
    assert f"training job: {PROJECT}-watch-1-train" in out
    assert out.rstrip().endswith("TrainingJobFailed: AlgorithmError: unknown hyperparameter 'learning_rat'")


def test_watch_shows_the_jobs_and_the_output_of_a_succeeded_execution(aws, moto_backends, capsys):
    assert launch(["--pipeline", "--name", "watch-2"]) == 0
    capsys.readouterr()
    # The pipeline's jobs, as its tasks would create them (moto reports them Completed at once).
    sagemaker = boto3.client("sagemaker", region_name=REGION)
    sagemaker.create_processing_job(
        ProcessingJobName=f"{PROJECT}-watch-2-process", RoleArn=aws.training["ProcessingRoleArn"],
        AppSpecification={"ImageUri": aws.data["ImageUri"]},
        ProcessingResources={"ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.g5.xlarge", "VolumeSizeInGB": 10}},
    )
    output = {"processing_job": f"{PROJECT}-watch-2-process", "training_job": f"{PROJECT}-watch-2-train",
              "model_uri": "s3://artifacts/training-jobs/x/output/model.tar.gz", "endpoint_config": None}
    _play(moto_backends, aws, "watch-2", "SUCCEEDED", output=json.dumps(output))
    assert run(watch, ["--pipeline", "--interval", "0", "--no-logs"]) == 0, "--pipeline follows the newest execution"
    out = capsys.readouterr().out
    assert "following pipeline execution watch-2" in out
    assert f"processing job {PROJECT}-watch-2-process: Completed" in out
    assert f"training_job: {PROJECT}-watch-2-train" in out and "endpoint_config" not in out
    assert "pipeline execution watch-2 SUCCEEDED" in out


def test_watch_an_unknown_execution_is_one_line_and_exit_3(aws, capsys):
    assert run(watch, ["--execution", "no-such-run"]) == 3
    assert "pipeline execution no-such-run not found" in capsys.readouterr().err


def test_watch_refuses_a_job_and_an_execution_together(aws, capsys):
    with pytest.raises(SystemExit) as exc:
        watch(["some-job", "--pipeline"])
    assert exc.value.code == 2


def test_follow_pipeline_reports_a_stopped_execution_with_exit_4(aws, moto_backends):
    assert launch(["--pipeline", "--skip-process", "--name", "watch-3"]) == 0
    _play(moto_backends, aws, "watch-3", "ABORTED", error="StoppedByTeardown", cause="python -m scripts.teardown --stop-running")
    from scripts.common import Deployment
    import argparse

    out = io.StringIO()
    deployment = Deployment.from_args(argparse.Namespace(context=[], region=None, profile=None))
    assert follow_pipeline(deployment, "watch-3", interval=0, out=out) == 4
    assert "StoppedByTeardown" in out.getvalue()
