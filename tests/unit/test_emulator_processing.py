"""The local runner playing SageMaker Processing (scripts.emulator.sagemaker) on a bare emulator.

The container command here is a few lines of Python given as ``python3 -c`` (what the runner maps
to this interpreter), so the tests check the runner's side of the contract: what it lays out
before the command runs, what it uploads after, and what it records on the job. The image's own
processing mode (``python -m trainer process``) runs through the same path in tests/integration.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import pytest

from scripts.emulator import server
from scripts.emulator.sagemaker import LocalSageMaker

ROLE = f"arn:aws:iam::{server.ACCOUNT}:role/processing"
KEY = f"arn:aws:kms:{server.REGION}:{server.ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"

# A processing "container": records what it was given, copies the raw input to both outputs,
# or fails the way the processing mode does (one line in output/message, a non-zero exit).
CONTAINER = r"""
import json, os, shutil, sys
base = "/opt/ml"  # the job's tree, where SageMaker mounts it
seen = {
    "argv": sys.argv[1:],
    "config": json.load(open(f"{base}/config/processingjobconfig.json")),
    "resources": json.load(open(f"{base}/config/resourceconfig.json")),
    "inputs": sorted(os.listdir(f"{base}/processing/input/raw")),
    "env": {k: os.environ.get(k) for k in ("EXPECTED_GPU_COUNT", "CUDA_VISIBLE_DEVICES", "MY_SETTING", "PROCESSING_JOB_NAME")},
}
print("container started", flush=True)
if "--sleep" in sys.argv:
    import time
    time.sleep(120)
if "--fail" in sys.argv:
    open(f"{base}/output/message", "w").write("DataError: raw/bad.csv line 3: 2 values, expected 3\n")
    sys.exit(5)
for out in ("train", "validation"):
    shutil.copytree(f"{base}/processing/input/raw", f"{base}/processing/output/{out}/part", dirs_exist_ok=True)
json.dump(seen, open(f"{base}/processing/output/train/seen.json", "w"))
"""


@pytest.fixture()
def emulator(tmp_path: Path) -> Iterator[server.Emulator]:
    emu = server.start(log_file=tmp_path / "moto.log")
    try:
        yield emu
    finally:
        emu.stop()


@pytest.fixture()
def runner(emulator: server.Emulator, tmp_path: Path) -> Iterator[LocalSageMaker]:
    local = LocalSageMaker(
        endpoint_url=emulator.endpoint_url, region=server.REGION, account=server.ACCOUNT, work_dir=tmp_path / "jobs",
        timeout_seconds=120, on_event=lambda _: None,
    )
    local.start()
    try:
        yield local
    finally:
        local.stop()


def _client(emulator: server.Emulator, service: str) -> Any:
    return server.client(service, endpoint_url=emulator.endpoint_url)


def _create(emulator: server.Emulator, name: str, arguments: list[str]) -> None:
    s3 = _client(emulator, "s3")
    if "datasets" not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket="datasets")
        s3.put_object(Bucket="datasets", Key="raw/a.csv", Body=b"f0,f1,label\n0.1,0.2,0\n")
        s3.put_object(Bucket="datasets", Key="raw/sub/b.csv", Body=b"f0,f1,label\n0.3,0.4,1\n")
    _client(emulator, "sagemaker").create_processing_job(
        ProcessingJobName=name,
        RoleArn=ROLE,
        AppSpecification={
            "ImageUri": f"{server.ACCOUNT}.dkr.ecr.{server.REGION}.amazonaws.com/gputrain-training:1",
            "ContainerEntrypoint": ["python3", "-c", CONTAINER],
            "ContainerArguments": arguments,
        },
        ProcessingResources={"ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.g5.xlarge", "VolumeSizeInGB": 100}},
        Environment={"EXPECTED_GPU_COUNT": "1", "MY_SETTING": "on"},
        ProcessingInputs=[{"InputName": "raw", "S3Input": {"S3Uri": "s3://datasets/raw/", "LocalPath": "/opt/ml/processing/input/raw",
                                                            "S3DataType": "S3Prefix", "S3InputMode": "File"}}],
        ProcessingOutputConfig={
            "Outputs": [
                {"OutputName": out, "S3Output": {"S3Uri": f"s3://datasets/processed/{name}/{out}",
                                                  "LocalPath": f"/opt/ml/processing/output/{out}", "S3UploadMode": "EndOfJob"}}
                for out in ("train", "validation")
            ],
            "KmsKeyId": KEY,
        },
        StoppingCondition={"MaxRuntimeInSeconds": 600},
        NetworkConfig={"EnableNetworkIsolation": True},
    )


@pytest.mark.slow
def test_a_processing_job_gets_the_contract_files_and_its_outputs_are_uploaded(emulator, runner) -> None:
    _create(emulator, "gputrain-e1-process", ["--shards", "2"])
    sagemaker, s3 = _client(emulator, "sagemaker"), _client(emulator, "s3")
    created = sagemaker.describe_processing_job(ProcessingJobName="gputrain-e1-process")
    # moto alone would say Completed at once and drop the resources and environment.
    assert created["ProcessingJobStatus"] == "InProgress"
    assert created["ProcessingResources"]["ClusterConfig"]["InstanceType"] == "ml.g5.xlarge"
    outcome = runner.wait("gputrain-e1-process", timeout=120)
    assert outcome.status == "Completed", outcome.failure_reason
    job = sagemaker.describe_processing_job(ProcessingJobName="gputrain-e1-process")
    assert job["ProcessingJobStatus"] == "Completed" and "FailureReason" not in job
    assert job["ProcessingStartTime"] <= job["ProcessingEndTime"]

    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket="datasets", Prefix="processed/")["Contents"])
    assert keys == [
        "processed/gputrain-e1-process/train/part/a.csv",
        "processed/gputrain-e1-process/train/part/sub/b.csv",
        "processed/gputrain-e1-process/train/seen.json",
        "processed/gputrain-e1-process/validation/part/a.csv",
        "processed/gputrain-e1-process/validation/part/sub/b.csv",
    ]
    head = s3.head_object(Bucket="datasets", Key="processed/gputrain-e1-process/train/seen.json")
    assert head["ServerSideEncryption"] == "aws:kms" and head["SSEKMSKeyId"] == KEY
    seen = json.loads(s3.get_object(Bucket="datasets", Key="processed/gputrain-e1-process/train/seen.json")["Body"].read())
    assert seen["argv"] == ["--shards", "2"]
    assert seen["inputs"] == ["a.csv", "sub"]
    # processingjobconfig.json is the DescribeProcessingJob response (timestamps as numbers).
    assert seen["config"]["ProcessingJobName"] == "gputrain-e1-process"
    assert seen["config"]["ProcessingInputs"][0]["S3Input"]["LocalPath"] == "/opt/ml/processing/input/raw"
    assert seen["config"]["Environment"]["MY_SETTING"] == "on"
    assert seen["resources"]["current_host"] == "algo-1" and seen["resources"]["hosts"] == ["algo-1"]
    # No GPU on the emulator: told to expect none, whatever the job says.
    assert seen["env"] == {"EXPECTED_GPU_COUNT": "0", "CUDA_VISIBLE_DEVICES": "", "MY_SETTING": "on",
                           "PROCESSING_JOB_NAME": "gputrain-e1-process"}
    assert outcome.outputs == {"train": "s3://datasets/processed/gputrain-e1-process/train/",
                               "validation": "s3://datasets/processed/gputrain-e1-process/validation/"}


@pytest.mark.slow
def test_a_failed_processing_job_records_failure_reason_and_exit_message_and_uploads_nothing(emulator, runner) -> None:
    _create(emulator, "gputrain-e2-process", ["--fail"])
    outcome = runner.wait("gputrain-e2-process", timeout=120)
    job = _client(emulator, "sagemaker").describe_processing_job(ProcessingJobName="gputrain-e2-process")
    assert outcome.status == job["ProcessingJobStatus"] == "Failed"
    assert job["ExitMessage"] == "DataError: raw/bad.csv line 3: 2 values, expected 3"
    assert job["FailureReason"] == "AlgorithmError: DataError: raw/bad.csv line 3: 2 values, expected 3"
    assert "ProcessingEndTime" in job
    listed = _client(emulator, "s3").list_objects_v2(Bucket="datasets", Prefix="processed/gputrain-e2-process/")
    assert listed["KeyCount"] == 0, "a failed job's outputs are not uploaded"


def _wait_status(emulator: server.Emulator, name: str, wanted: str, timeout: float = 60) -> dict[str, Any]:
    import time

    deadline = time.monotonic() + timeout
    while True:
        job = _client(emulator, "sagemaker").describe_processing_job(ProcessingJobName=name)
        if job["ProcessingJobStatus"] == wanted or time.monotonic() > deadline:
            return job
        time.sleep(0.2)


def _wait_log_line(emulator: server.Emulator, name: str, text: str, timeout: float = 60) -> list[str]:
    import time

    logs = _client(emulator, "logs")
    deadline = time.monotonic() + timeout
    while True:
        try:
            streams = logs.describe_log_streams(logGroupName="/aws/sagemaker/ProcessingJobs", logStreamNamePrefix=f"{name}/")["logStreams"]
        except Exception:  # noqa: BLE001 - the group appears with the first line
            streams = []
        lines = [
            e["message"]
            for stream in streams
            for e in logs.get_log_events(logGroupName="/aws/sagemaker/ProcessingJobs", logStreamName=stream["logStreamName"])["events"]
        ]
        if any(text in line for line in lines) or time.monotonic() > deadline:
            return lines
        time.sleep(0.2)


@pytest.mark.slow
def test_the_containers_lines_reach_the_jobs_cloudwatch_stream_while_it_runs(emulator, runner) -> None:
    _create(emulator, "gputrain-e3-process", ["--sleep"])
    lines = _wait_log_line(emulator, "gputrain-e3-process", "container started")
    assert "container started" in lines
    assert _wait_status(emulator, "gputrain-e3-process", "InProgress")["ProcessingJobStatus"] == "InProgress"
    _client(emulator, "sagemaker").stop_processing_job(ProcessingJobName="gputrain-e3-process")


@pytest.mark.slow
def test_stop_processing_job_ends_the_container_and_records_stopped(emulator, runner) -> None:
    from botocore.exceptions import ClientError

    _create(emulator, "gputrain-e4-process", ["--sleep"])
    _wait_log_line(emulator, "gputrain-e4-process", "container started")
    sagemaker = _client(emulator, "sagemaker")
    sagemaker.stop_processing_job(ProcessingJobName="gputrain-e4-process")
    assert sagemaker.describe_processing_job(ProcessingJobName="gputrain-e4-process")["ProcessingJobStatus"] in ("Stopping", "Stopped")
    outcome = runner.wait("gputrain-e4-process", timeout=60)
    assert outcome.status == "Stopped" and outcome.seconds < 60, "SIGTERM ended the sleeping container"
    assert _wait_status(emulator, "gputrain-e4-process", "Stopped")["ProcessingJobStatus"] == "Stopped"
    with pytest.raises(ClientError, match="is in status Stopped"):
        sagemaker.stop_processing_job(ProcessingJobName="gputrain-e4-process")


@pytest.mark.slow
def test_stopping_an_execution_stops_its_sync_job(emulator, runner) -> None:
    from scripts.emulator.states import LocalStepFunctions

    states = LocalStepFunctions(endpoint_url=emulator.endpoint_url, region=server.REGION, account=server.ACCOUNT,
                                on_event=lambda _: None, poll_seconds=0.2)
    states.start()
    try:
        _create(emulator, "gputrain-seed-process", ["--shards", "1"])  # the bucket and raw data
        runner.wait("gputrain-seed-process", timeout=60)
        request = _client(emulator, "sagemaker").describe_processing_job(ProcessingJobName="gputrain-seed-process")
        arguments = {k: request[k] for k in ("RoleArn", "ProcessingResources", "ProcessingInputs", "ProcessingOutputConfig", "StoppingCondition")}
        arguments["AppSpecification"] = {**request["AppSpecification"], "ContainerArguments": ["--sleep"]}
        arguments["ProcessingJobName"] = "gputrain-e5-process"
        definition = {"QueryLanguage": "JSONata", "StartAt": "Process", "States": {"Process": {
            "Type": "Task", "Resource": "arn:aws:states:::sagemaker:createProcessingJob.sync", "Arguments": arguments, "End": True}}}
        sfn = _client(emulator, "stepfunctions")
        machine = sfn.create_state_machine(name="process-only", definition=json.dumps(definition, default=str),
                                           roleArn="arn:aws:iam::123456789012:role/w")["stateMachineArn"]
        arn = sfn.start_execution(stateMachineArn=machine, name="stop-me")["executionArn"]
        _wait_log_line(emulator, "gputrain-e5-process", "container started")
        sfn.stop_execution(executionArn=arn, error="StoppedByTeardown", cause="test")
        assert states.wait(arn, timeout=30).status == "ABORTED"
        assert runner.wait("gputrain-e5-process", timeout=60).status == "Stopped", "Step Functions stops the job of a stopped .sync task"
    finally:
        states.stop()
