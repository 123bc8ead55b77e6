"""scripts.watch against moto: progress, log lines, metrics, and the outcome as the exit code.

moto's jobs are Completed the moment they are created; the running and failing phases are played
by editing the job in moto's backend between polls (see conftest's module docstring).
"""

from __future__ import annotations

import dataclasses
import io
import re
import time

import boto3
import pytest

from scripts.common import Aws, Deployment, load_platform_config, run
from scripts.launch import main as launch_main
from scripts.watch import _JobTracker, follow, main
from tests.scripts.plot_checks import assert_plot
from stacks.components.processing_job_spec import SAGEMAKER_PROCESSING_LOG_GROUP
from stacks.components.training_job_spec import SAGEMAKER_LOG_GROUP, load_metric_definitions
from tests.scripts.conftest import PROJECT, REGION

METRIC_LINE = (
    "[metrics] epoch={epoch} loss={loss} accuracy=0.871 examples_per_sec=10234.1 step_time_ms=3.21 "
    "val_loss=0.5 val_accuracy=0.8"
)


def _deployment() -> Deployment:
    return Deployment(config=load_platform_config(), aws=Aws(boto3.Session()))


def _launch_direct(name: str) -> None:
    assert launch_main(["--direct", "--name", name]) == 0


def _log(name: str, *messages: str) -> None:
    logs = boto3.client("logs", region_name=REGION)
    try:
        logs.create_log_group(logGroupName=SAGEMAKER_LOG_GROUP)
    except logs.exceptions.ResourceAlreadyExistsException:
        pass
    stream = f"{name}/algo-1-1700000000"
    try:
        logs.create_log_stream(logGroupName=SAGEMAKER_LOG_GROUP, logStreamName=stream)
    except logs.exceptions.ResourceAlreadyExistsException:
        pass
    now = int(time.time() * 1000)
    logs.put_log_events(
        logGroupName=SAGEMAKER_LOG_GROUP,
        logStreamName=stream,
        logEvents=[{"timestamp": now + i, "message": m} for i, m in enumerate(messages)],
    )


def test_follow_shows_transitions_logs_and_last_metrics_until_completed(aws, moto_backends):
    name = f"{PROJECT}-watch-progress"
    _launch_direct(name)
    # As SageMaker does (moto substitutes its own metric definitions).
    moto_backends.job(name).algorithm_specification["MetricDefinitions"] = load_metric_definitions()
    moto_backends.set_job(name, "InProgress", "Downloading", "Downloading input data")
    phases = iter(
        [
            lambda: (moto_backends.set_job(name, "InProgress", "Training", "Training image download completed"),
                     _log(name, "starting", METRIC_LINE.format(epoch=1, loss=0.9))),
            lambda: _log(name, METRIC_LINE.format(epoch=2, loss=0.41)),
            lambda: moto_backends.set_job(name, "Completed", "Completed", "Training job completed", training_time_in_seconds=1500,
                                          billable_time_in_seconds=600),
        ]
    )
    out = io.StringIO()
    code = follow(_deployment(), name, interval=0, out=out, sleep=lambda _: next(phases)())
    text = out.getvalue()
    assert code == 0
    assert "-> Downloading: Downloading input data" in text
    assert "-> Training: Training image download completed" in text
    assert "[algo-1-1700000000] starting" in text
    last = {"train:epoch": "2", "train:loss": "0.41", "train:accuracy": "0.871", "train:examples_per_sec": "10234.1",
            "train:step_time_ms": "3.21", "validation:loss": "0.5", "validation:accuracy": "0.8"}  # fmt: skip
    shown = " ".join(f"{d['Name']}={last[d['Name']]}" for d in load_metric_definitions() if d["Name"] in last)
    assert f"InProgress / Training  {shown}\n" in text
    assert f"{name} Completed\n" in text and "  model: s3://" in text
    # What it billed: managed spot (the launch's default) bills 600 of its 1,500 s.
    assert re.search(r"\n  billed: 1 x ml\.g5\.xlarge for 600 s, about \$0\.\d\d \(managed spot: 600 of 1,500 s trained are billed, "
                     r"60% saved\) \(us-east-1 list prices\)\n", text), text


@pytest.mark.parametrize(
    "status, expected",
    [("Completed", 0), ("Failed", 1), ("Stopped", 4)],
)


def test_exit_code_is_the_outcome_and_the_failure_reason_is_printed_in_full(aws, moto_backends, capsys, status, expected):
    name = f"{PROJECT}-watch-{status.lower()}"
    _launch_direct(name)
    reason = "AlgorithmError: ExpectedGpuCountMismatch: expected 4 GPUs, found 1; " + "x" * 600 if status == "Failed" else None
    extra = {"failure_reason": reason} if reason else {}
    moto_backends.set_job(name, status, status, **extra)
    capsys.readouterr()
    assert run(main, [name, "--interval", "0", "--no-logs"]) == expected
    out = capsys.readouterr().out
    assert f"{name} {status}" in out
    if reason:
        assert f"FailureReason: {reason}\n" in out


def test_watch_without_a_name_follows_the_newest_job(aws, capsys):
    name = f"{PROJECT}-zz-newest"
    _launch_direct(name)
    assert run(main, ["--interval", "0"]) == 0
    assert f"following {name}" in capsys.readouterr().out


def test_watch_waits_while_the_workflow_has_not_created_the_job(aws, capsys):
    """moto never runs the workflow, so the test plays it: the job appears during the wait."""
    assert launch_main(["--name", f"{PROJECT}-via-workflow"]) == 0
    out = io.StringIO()

    def workflow_creates_the_job(_: float) -> None:
        assert launch_main(["--direct", "--name", f"{PROJECT}-via-workflow"]) == 0

    assert follow(_deployment(), f"{PROJECT}-via-workflow", interval=0, out=out, sleep=workflow_creates_the_job) == 0
    assert "waiting for the workflow to create" in out.getvalue()


def test_watch_reports_a_workflow_that_failed_before_creating_the_job(aws, capsys):
    name = f"{PROJECT}-wf-failed"
    assert launch_main(["--name", name]) == 0
    sfn = boto3.client("stepfunctions", region_name=REGION)
    arn = aws.training["StateMachineArn"].replace(":stateMachine:", ":execution:") + f":{name}"
    sfn.stop_execution(executionArn=arn, error="InvalidLaunchOptions", cause="Invalid launch options: instance_count=0")
    capsys.readouterr()
    assert run(main, [name, "--interval", "0"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: the workflow execution {name} is ABORTED and created no job:")


def test_unknown_job_is_one_line_and_exit_3(aws, capsys):
    assert run(main, [f"{PROJECT}-no-such-job", "--interval", "0"]) == 3
    assert capsys.readouterr().err == f"error: training job {PROJECT}-no-such-job not found in {REGION} (see python -m scripts.list_jobs)\n"


GPU_LINES = (
    "[metrics] epoch=1 loss=1.2 accuracy=0.4 examples_per_sec=2100.0 step_time_ms=121.9 input_wait=64.0% "
    "gpu_util=22.5% gpu_mem_mib=30210",
    "[metrics] epoch=2 loss=0.8 accuracy=0.6 examples_per_sec=2300.0 step_time_ms=111.3 input_wait=61.0% "
    "gpu_util=24.0% gpu_mem_mib=30210",
    "[diagnosis] input-bound: 61% of step time waited on data, GPU utilization 24%; try records instead of JPEG files",
)


def test_follow_shows_each_epochs_figures_and_the_diagnosis_and_plots_them(aws, moto_backends, tmp_path):
    name = f"{PROJECT}-watch-epochs"
    _launch_direct(name)
    moto_backends.job(name).algorithm_specification["MetricDefinitions"] = load_metric_definitions()
    moto_backends.set_job(name, "InProgress", "Training", "Training image download completed")
    png = tmp_path / "epochs.png"
    phases = iter(
        [
            lambda: _log(name, GPU_LINES[0]),
            lambda: _log(name, GPU_LINES[1], GPU_LINES[2]),
            lambda: moto_backends.set_job(name, "Completed", "Completed", "Training job completed"),
        ]
    )
    out = io.StringIO()
    # --no-logs: the raw lines are not printed, the epochs still are.
    code = follow(_deployment(), name, interval=0, logs=False, plot_path=png, out=out, sleep=lambda _: next(phases)())
    text = out.getvalue()
    assert code == 0
    assert "[algo-1" not in text
    assert "  epoch 1: 2100.0 examples/s, step 121.90 ms, input wait 64.0%, GPU 22.5% 30210 MiB, loss 1.2000\n" in text
    assert "  epoch 2: 2300.0 examples/s, step 111.30 ms, input wait 61.0%, GPU 24.0% 30210 MiB, loss 0.8000\n" in text
    assert "  diagnosis: input-bound: 61% of step time waited on data" in text
    assert f"  plot: {png} (2 epochs)\n" in text
    assert_plot(png)


def test_a_job_without_epoch_lines_writes_no_plot(aws, moto_backends, tmp_path):
    name = f"{PROJECT}-watch-noepochs"
    _launch_direct(name)
    png = tmp_path / "none.png"
    out = io.StringIO()
    assert follow(_deployment(), name, interval=0, plot_path=png, out=out) == 0
    assert f"no epoch lines in the log of {name}: {png} not written" in out.getvalue()
    assert not png.exists()


def test_a_pipelines_training_job_shows_its_epoch_figures_too(aws, moto_backends):
    name = f"{PROJECT}-watch-pipeline-train"
    _launch_direct(name)
    moto_backends.set_job(name, "InProgress", "Training", "Training image download completed")
    _log(name, GPU_LINES[0])
    out = io.StringIO()
    _JobTracker(_deployment().aws, "training", name, True, out).poll()
    moto_backends.set_job(name, "Completed", "Completed", "Training job completed")  # leave no job running for later tests
    assert "    epoch 1: 2100.0 examples/s, step 121.90 ms, input wait 64.0%, GPU 22.5% 30210 MiB, loss 1.2000\n" in out.getvalue()


def _processing_job(name: str) -> None:
    boto3.client("sagemaker", region_name=REGION).create_processing_job(
        ProcessingJobName=name,
        RoleArn="arn:aws:iam::123456789012:role/processing",
        AppSpecification={"ImageUri": "123456789012.dkr.ecr.us-east-1.amazonaws.com/gputrain-training:1",
                          "ContainerEntrypoint": ["python3", "/opt/ml/processing/input/code/preprocess.py"]},
        ProcessingResources={"ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.g5.xlarge", "VolumeSizeInGB": 30}},
        ProcessingOutputConfig={"Outputs": [{"OutputName": "scaled", "S3Output": {
            "S3Uri": f"s3://artifacts/training-jobs/{name}/output/scaled", "LocalPath": "/opt/ml/processing/output/scaled",
            "S3UploadMode": "EndOfJob"}}]},
        StoppingCondition={"MaxRuntimeInSeconds": 600},
    )


def _processing_log(name: str, *messages: str) -> None:
    logs = boto3.client("logs", region_name=REGION)
    for call in (lambda: logs.create_log_group(logGroupName=SAGEMAKER_PROCESSING_LOG_GROUP),
                 lambda: logs.create_log_stream(logGroupName=SAGEMAKER_PROCESSING_LOG_GROUP, logStreamName=f"{name}/algo-1-1700000000")):
        try:
            call()
        except logs.exceptions.ResourceAlreadyExistsException:
            pass
    now = int(time.time() * 1000)
    logs.put_log_events(logGroupName=SAGEMAKER_PROCESSING_LOG_GROUP, logStreamName=f"{name}/algo-1-1700000000",
                        logEvents=[{"timestamp": now + i, "message": m} for i, m in enumerate(messages)])


@pytest.mark.parametrize("status, expected", [("Completed", 0), ("Failed", 1), ("Stopped", 4)])
def test_a_processing_job_is_followed_like_a_training_job(aws, moto_backends, capsys, status, expected):
    name = f"{PROJECT}-training-proc-{status.lower()}"
    _processing_job(name)
    job = moto_backends.sagemaker.processing_jobs[name]
    job.processing_job_status = "InProgress"  # moto completes it at once; SageMaker does not
    phases = iter([
        lambda: _processing_log(name, "scaled 96 rows"),
        lambda: (setattr(job, "processing_job_status", status),
                 status == "Failed" and setattr(job, "failure_reason", "AlgorithmError: DataError: raw/a.csv line 3: 2 values"),
                 status == "Failed" and setattr(job, "exit_message", "DataError: raw/a.csv line 3: 2 values")),
    ])
    capsys.readouterr()
    from scripts import watch

    code = watch.follow_processing(_deployment(), name, interval=0, sleep=lambda _: next(phases)())
    out = capsys.readouterr().out
    assert code == expected
    assert f"following {name}" in out and "processing-jobs/" + name in out
    assert f"[algo-1-1700000000] scaled 96 rows" in out
    assert f"processing job {name}: InProgress" in out
    assert f"{name} {status}\n" in out
    if status == "Completed":
        assert f"  output scaled: s3://artifacts/training-jobs/{name}/output/scaled\n" in out
    if status == "Failed":
        assert "  FailureReason: AlgorithmError: DataError: raw/a.csv line 3: 2 values\n" in out
        assert "  ExitMessage: DataError: raw/a.csv line 3: 2 values\n" in out


def test_watch_by_name_finds_a_processing_job(aws, capsys):
    name = f"{PROJECT}-training-proc-by-name"
    _processing_job(name)  # moto: Completed at once
    capsys.readouterr()
    assert run(main, [name, "--interval", "0", "--no-logs"]) == 0
    out = capsys.readouterr().out
    assert f"following {name}" in out and f"{name} Completed" in out


DASHBOARD_LINE = (
    "dashboard: gputrain-us-east-1  "
    "https://us-east-1.console.aws.amazon.com/cloudwatch/home?region=us-east-1#dashboards/dashboard/gputrain-us-east-1\n"
)


def test_the_first_line_names_the_deployments_dashboard(aws):
    name = f"{PROJECT}-watch-dashboard"
    _launch_direct(name)
    deployment = _deployment()
    deployment._outputs["data"] = {**aws.data, "DashboardName": "gputrain-us-east-1"}  # as the data stack outputs it
    out = io.StringIO()
    assert follow(deployment, name, interval=0, logs=False, out=out) == 0
    assert out.getvalue().startswith(DASHBOARD_LINE + f"following {name}  ")


def test_a_data_stack_without_a_dashboard_leaves_the_line_out(aws):
    """The moto data stack predates the dashboard (no ``DashboardName``), as an old deploy does."""
    name = f"{PROJECT}-watch-no-dashboard"
    _launch_direct(name)
    out = io.StringIO()
    assert follow(_deployment(), name, interval=0, logs=False, out=out) == 0
    assert out.getvalue().startswith(f"following {name}  ")
    missing = Deployment(config=dataclasses.replace(load_platform_config(), project_name="absent"), aws=Aws(boto3.Session()))
    assert missing.dashboard_name() is None  # no <project>-data at all: no line, no error
