"""How a followed job can end besides Completed/Failed/Stopped, and the tools' argument checks.

- SageMaker stops a training job on its StoppingCondition (SecondaryStatus MaxRuntimeExceeded or
  MaxWaitTimeExceeded): failed (exit 1, one line naming the setting to raise), not an operator's stop (4).
- A job that is deleted (Deleting, DeleteFailed) or disappears while followed ends the watch (exit 3).
- A job's log streams are read past the first page (50 streams; instance_count goes up to 64).
- A negative --interval/--timeout/--start-timeout and --max below 1 are usage errors (exit 2).
- A launch under an existing job's name is refused before its code is uploaded over that job's.
"""

from __future__ import annotations

import io
import re
import time

import boto3
import pytest

from scripts import list_jobs, stop, watch
from scripts.common import Aws, Deployment, load_platform_config, run
from scripts.launch import main as launch_main
from scripts.watch import LogFollower, _JobTracker, follow, main
from stacks.components.training_job_spec import SAGEMAKER_LOG_GROUP
from tests.scripts.conftest import PROJECT, REGION
from tests.scripts.test_script_watch_tuning import TRAIN_LOSS, ranges  # noqa: F401 (a fixture)


def _deployment() -> Deployment:
    return Deployment(config=load_platform_config(), aws=Aws(boto3.Session()))


@pytest.mark.parametrize(
    "secondary, setting",
    [("MaxRuntimeExceeded", "training_job.max_runtime_seconds"), ("MaxWaitTimeExceeded", "training_job.max_wait_seconds")],
)
def test_a_job_sagemaker_stopped_on_its_limit_failed_and_names_the_setting(aws, moto_backends, capsys, secondary, setting):
    name = f"{PROJECT}-limit-{secondary[:7].lower()}"
    assert launch_main(["--direct", "--name", name]) == 0
    moto_backends.set_job(name, "Stopped", secondary, "Training job runtime exceeded MaxRuntimeInSeconds provided")
    capsys.readouterr()
    assert run(main, [name, "--interval", "0", "--no-logs"]) == 1
    out = capsys.readouterr().out
    assert f"  {name} was stopped by SageMaker ({secondary}): " in out
    line = next(line for line in out.splitlines() if "was stopped by SageMaker" in line)
    assert f"raise {setting}" in line and "rerun" not in line
    assert re.search(rf"; its checkpoints stay in s3://\S+/checkpoints/{name}/: continue it with python -m scripts.launch --resume-from {name}$", line), line
    # The pipeline's tracker says so too.
    tracked = io.StringIO()
    _JobTracker(aws=Aws(boto3.Session()), kind="training", name=name, logs=False, out=tracked).poll()
    assert f"training job {name}: Stopped" in tracked.getvalue() and f"raise {setting}" in tracked.getvalue()


def test_an_operators_stop_is_still_exit_4(aws, moto_backends, capsys):
    name = f"{PROJECT}-limit-operator"
    assert launch_main(["--direct", "--name", name]) == 0
    moto_backends.set_job(name, "Stopped", "Stopped")
    assert run(main, [name, "--interval", "0", "--no-logs"]) == 4
    assert "was stopped by SageMaker" not in capsys.readouterr().out


def test_a_job_being_deleted_or_gone_ends_the_watch_with_exit_3(aws, moto_backends, capsys):
    deleting, gone = f"{PROJECT}-watch-deleting", f"{PROJECT}-watch-gone"
    for name in (deleting, gone):
        assert launch_main(["--direct", "--name", name]) == 0
    moto_backends.set_job(deleting, "Deleting", "Stopped")
    capsys.readouterr()
    assert run(main, [deleting, "--interval", "0", "--no-logs"]) == 3
    assert capsys.readouterr().err.strip() == f"error: training job {deleting} was deleted (Deleting); nothing left to follow"

    moto_backends.set_job(gone, "InProgress", "Training")
    sleeps = []

    def delete_it(_):
        sleeps.append(1)
        assert len(sleeps) < 5, "watch went on after the job was gone"
        moto_backends.sagemaker.training_jobs.pop(gone, None)

    with pytest.raises(Exception) as raised:
        follow(_deployment(), gone, interval=0, logs=False, out=io.StringIO(), sleep=delete_it)
    assert str(raised.value) == f"training job {gone} was deleted; nothing left to follow" and raised.value.exit_code == 3


@pytest.mark.parametrize("status", ["Deleting", "DeleteFailed"])
def test_a_tuning_job_being_deleted_ends_the_watch_with_exit_3(aws, moto_backends, capsys, ranges, status):
    name = f"{PROJECT}-tune-{status.lower()}"[:32]
    assert launch_main(["--tune", str(ranges), "--direct", "--max-jobs", "2", "--name", name, "--yes", *TRAIN_LOSS]) == 0
    moto_backends.set_tuning_job(name, "InProgress", trials=[])
    moto_backends.sagemaker.hyper_parameter_tuning_jobs[name].hyper_parameter_tuning_job_status = status
    capsys.readouterr()
    assert run(main, ["--tuning", name, "--interval", "0"]) == 3
    assert capsys.readouterr().err.strip() == f"error: tuning job {name} was deleted ({status}); nothing left to follow"


def test_log_streams_are_read_past_the_first_page(aws):
    name = f"{PROJECT}-many-streams"
    logs = boto3.client("logs", region_name=REGION)
    try:
        logs.create_log_group(logGroupName=SAGEMAKER_LOG_GROUP)
    except logs.exceptions.ResourceAlreadyExistsException:
        pass
    for i in range(1, 65):  # 64 instances, one stream each
        stream = f"{name}/algo-{i}-1700000000"
        logs.create_log_stream(logGroupName=SAGEMAKER_LOG_GROUP, logStreamName=stream)
        logs.put_log_events(logGroupName=SAGEMAKER_LOG_GROUP, logStreamName=stream,
                            logEvents=[{"timestamp": int(time.time() * 1000), "message": f"hello from {i}"}])  # fmt: skip
    lines = LogFollower(Aws(boto3.Session()), name).poll()
    assert sorted(int(m.split()[-1]) for _, m in lines) == list(range(1, 65))


@pytest.mark.parametrize(
    "tool, argv, option",
    [
        (watch.main, ["x", "--interval", "-1"], "--interval"),
        (watch.main, ["x", "--start-timeout", "-5"], "--start-timeout"),
        (watch.main, ["x", "--interval", "nan"], "--interval"),
        (stop.main, ["x", "--wait", "--interval", "-1"], "--interval"),
        (stop.main, ["x", "--wait", "--timeout", "-1"], "--timeout"),
    ],
)
def test_a_negative_interval_or_timeout_is_a_usage_error(capsys, tool, argv, option):
    with pytest.raises(SystemExit) as exited:
        tool(argv)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {option}: " in err and "must be a number of seconds, 0 or more" in err and "Traceback" not in err


@pytest.mark.parametrize("value", ["0", "-1"])
def test_list_jobs_max_below_one_is_a_usage_error(capsys, value):
    with pytest.raises(SystemExit) as exited:
        list_jobs.main(["--max", value])
    assert exited.value.code == 2
    assert f"argument --max: {value} must be 1 or more" in capsys.readouterr().err


def test_list_jobs_takes_each_kinds_own_statuses(aws, capsys, monkeypatch):
    # moto 5.2.5's ListTrainingJobs refuses StatusEquals=Deleting (SageMaker's API has it): the parser for that one.
    assert list_jobs.build_parser().parse_args(["--status", "Deleting"]).status == "Deleting"
    assert list_jobs.build_parser().parse_args(["--status", "DeleteFailed", "--kind", "tuning"]).status == "DeleteFailed"
    # A kind without the status: one line naming its statuses (SageMaker would refuse the StatusEquals).
    assert run(list_jobs.main, ["--kind", "processing", "--status", "Deleting"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --status Deleting: processing jobs have no such status (theirs: InProgress, Completed, Failed, Stopping, Stopped)"
    )
    # --kind all asks only the kinds that have it (here none can be listed on moto: tuning's DeleteFailed).
    asked = []
    monkeypatch.setattr(list_jobs, "project_jobs", lambda deployment, *, status, limit, kind: asked.append(kind.label) or [])
    assert run(list_jobs.main, ["--kind", "all", "--status", "DeleteFailed"]) == 0
    assert asked == ["tuning job"]


def _code(tmp_path, text: str):
    source = tmp_path / text
    source.mkdir()
    (source / "train.py").write_text(f"print({text!r})\n")
    return source


@pytest.mark.parametrize("path", ["direct", "workflow", "tuning", "upload-only"])
def test_a_launch_under_an_existing_jobs_name_uploads_nothing(aws, capsys, tmp_path, ranges, path):
    name = f"{PROJECT}-taken-{path}"[:32]
    first = ["--direct"] if path != "workflow" else []
    assert launch_main([*first, "--name", name, "--source-dir", str(_code(tmp_path, "old")), "--entry-point", "train.py"]) == 0
    s3 = boto3.client("s3", region_name=REGION)
    bucket, key = aws.data["ArtifactsBucketName"], f"code/{name}/sourcedir.tar.gz"
    before = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    capsys.readouterr()
    again = {"direct": ["--direct"], "workflow": [], "tuning": ["--tune", str(ranges), "--direct", "--max-jobs", "2", "--yes", *TRAIN_LOSS], "upload-only": ["--upload-only"]}[path]
    assert run(launch_main, [*again, "--name", name, "--source-dir", str(_code(tmp_path, "new")), "--entry-point", "train.py"]) == 3
    what = "training workflow execution" if path == "workflow" else "training job"
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: a {what} named {name} exists in {REGION}; nothing was uploaded") or (
        path == "workflow" and err.startswith(f"error: a training job named {name} exists")
    ), err
    assert "\n" not in err
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == before


def test_a_name_longer_than_a_tuning_jobs_is_not_looked_up_as_one(aws, capsys, tmp_path, monkeypatch):
    """SageMaker answers a DescribeHyperParameterTuningJob of a name over 32 characters with a ValidationException
    (moto: not found): the name check asks only the kinds whose names can be that long."""
    from botocore.exceptions import ClientError

    from scripts import common

    asked: list[str] = []
    real = common.describe_sagemaker_job

    def like_aws(aws_, kind, name):
        asked.append(kind.label)
        if not common.name_fits(aws_, kind, name):
            raise ClientError({"Error": {"Code": "ValidationException", "Message": "Member must have length less than or "
                                         "equal to 32"}}, kind.describe)  # fmt: skip
        return real(aws_, kind, name)

    monkeypatch.setattr(common, "describe_sagemaker_job", like_aws)
    name = f"{PROJECT}-a-name-of-forty-characters-x"[:40]
    assert len(name) > 32
    assert launch_main(["--direct", "--name", name, "--source-dir", str(_code(tmp_path, "long")), "--entry-point", "train.py"]) == 0
    assert "tuning job" not in asked and "training job" in asked
