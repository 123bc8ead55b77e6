"""scripts.watch --tuning, the pipeline's tuning step in scripts.watch --execution, and scripts.launch --tune
--watch, against moto: the tuning job's counters, each trial as its status changes, the best trial so far,
and the outcome as the exit code.

moto's tuning jobs are Completed the moment they are created and it lists no trials: the running phases
are played by editing the tuning job in moto's backend between polls (conftest's ``set_tuning_job``).
"""

from __future__ import annotations

import io
import json
from typing import Any, Callable, Iterator

import boto3
import pytest

from scripts.common import Aws, Deployment, load_platform_config, run
from scripts.launch import main as launch_main
from scripts.watch import follow_pipeline, follow_tuning, main
from tests.scripts.conftest import PROJECT, REGION

RANGES = {"learning_rate": {"type": "continuous", "min": 0.001, "max": 0.1, "scaling": "Logarithmic"}}
TRAIN_LOSS = ["-c", "tuning.objective_metric=train:loss"]


@pytest.fixture
def ranges(tmp_path):
    path = tmp_path / "ranges.json"
    path.write_text(json.dumps(RANGES))
    return path


def _deployment() -> Deployment:
    return Deployment(config=load_platform_config(), aws=Aws(boto3.Session()))


def _create(name: str, ranges) -> None:
    assert launch_main(["--tune", str(ranges), "--direct", "--max-jobs", "3", "--name", name, "--yes", *TRAIN_LOSS]) == 0


def _trial(name: str, status: str, rate: str, objective: float | None = None, reason: str | None = None) -> dict[str, Any]:
    trial: dict[str, Any] = {"TrainingJobName": name, "TrainingJobStatus": status, "TunedHyperParameters": {"learning_rate": rate},
                             "objective": objective}  # fmt: skip
    if reason:
        trial["FailureReason"] = reason
    return trial


def _phases(*steps: Callable[[], None]) -> Callable[[float], None]:
    steps_left: Iterator[Callable[[], None]] = iter(steps)
    return lambda _: next(steps_left)()


def test_follow_tuning_prints_counters_each_trial_change_and_the_best_trial(aws, moto_backends, ranges):
    name = f"{PROJECT}-wtune-1"
    _create(name, ranges)
    t1, t2, t3 = (f"{name}-00{i}-abcd1234" for i in (1, 2, 3))
    moto_backends.set_tuning_job(name, "InProgress", trials=[_trial(t1, "InProgress", "0.01"), _trial(t2, "InProgress", "0.002")])
    reason = "AlgorithmError: ExpectedGpuCountMismatch: expected 4 GPUs, found 1"
    sleep = _phases(
        lambda: None,  # nothing changed: nothing printed again
        lambda: moto_backends.set_tuning_job(
            name, "InProgress", best=t1,
            trials=[_trial(t1, "Completed", "0.01", 0.41), _trial(t2, "Failed", "0.002", reason=reason), _trial(t3, "InProgress", "0.05")],
        ),
        lambda: moto_backends.set_tuning_job(
            name, "Completed", best=t3,
            trials=[_trial(t1, "Completed", "0.01", 0.41), _trial(t2, "Failed", "0.002", reason=reason), _trial(t3, "Completed", "0.05", 0.25)],
        ),
    )  # fmt: skip
    out = io.StringIO()
    assert follow_tuning(_deployment(), name, interval=0, out=out, sleep=sleep) == 0
    lines = out.getvalue().splitlines()
    assert lines[0] == f"following tuning job {name}  https://{REGION}.console.aws.amazon.com/sagemaker/home?region={REGION}#/hyper-tuning-jobs/{name}"
    assert lines[1:] == [
        f"  tuning job {name}: InProgress, trials: 0 completed, 2 in progress, 0 failed, 0 stopped of 3",
        f"    trial {t1}: InProgress  learning_rate=0.01",
        f"    trial {t2}: InProgress  learning_rate=0.002",
        f"  tuning job {name}: InProgress, trials: 1 completed, 1 in progress, 1 failed, 0 stopped of 3",
        f"    trial {t1}: Completed  learning_rate=0.01  train:loss=0.41",
        f"    trial {t2}: Failed  learning_rate=0.002  ({reason})",
        f"    trial {t3}: InProgress  learning_rate=0.05",  # the third trial arrives on the second page
        f"    best so far: {t1} train:loss=0.41",
        f"  tuning job {name}: Completed, trials: 2 completed, 0 in progress, 1 failed, 0 stopped of 3",
        f"    trial {t3}: Completed  learning_rate=0.05  train:loss=0.25",
        f"    best so far: {t3} train:loss=0.25",
        f"{name} Completed",
        f"  best training job: {t3} train:loss=0.25",
        f"  serve it: python -m scripts.promote --best-of {name}",
    ]


@pytest.mark.parametrize("status, expected", [("Completed", 0), ("Failed", 1), ("Stopped", 4)])
def test_exit_code_is_the_tuning_jobs_outcome_and_the_failure_reason_is_printed_in_full(aws, moto_backends, ranges, capsys,
                                                                                         status, expected):  # fmt: skip
    name = f"{PROJECT}-wtune-{status.lower()}"
    _create(name, ranges)
    trial = f"{name}-001-abcd1234"
    reason = "No training job succeeded with an objective value (1 trial(s)): " + "x" * 600 if status == "Failed" else ""
    done = _trial(trial, "Completed", "0.01", 0.5) if status == "Completed" else _trial(trial, status, "0.01", reason=status)
    moto_backends.set_tuning_job(name, status, trials=[done], best=trial if status == "Completed" else None, failure_reason=reason)
    capsys.readouterr()
    assert run(main, ["--tuning", name, "--interval", "0"]) == expected
    out = capsys.readouterr().out
    assert f"\n{name} {status}\n" in out
    if reason:
        assert f"  FailureReason: {reason}\n" in out
    if status != "Completed":
        assert "best so far" not in out and "promote" not in out


def test_an_unknown_tuning_job_is_one_line_and_exit_3(aws, capsys):
    assert run(main, ["--tuning", f"{PROJECT}-no-such-tuning", "--interval", "0"]) == 3
    err = capsys.readouterr().err
    assert err == f"error: tuning job {PROJECT}-no-such-tuning not found in {REGION} (see the output of python -m scripts.launch --tune)\n"


@pytest.mark.parametrize(
    "argv, message",
    [
        ([f"{PROJECT}-job", "--tuning", f"{PROJECT}-tune-1"], "give a training job or --tuning JOB, not both"),
        (["--tuning", f"{PROJECT}-tune-1", "--execution", "x"], "not allowed with argument"),
        (["--tuning", f"{PROJECT}-tune-1", "--plot", "x.png"], "--plot draws a training job's epochs"),
    ],
)
def test_tuning_takes_no_job_name_execution_or_plot(capsys, argv, message):
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2 and message in capsys.readouterr().err


def test_launch_tune_watch_waits_for_the_workflow_then_follows_the_tuning_job(aws, moto_backends, ranges, monkeypatch, capsys):
    """moto never runs the workflow, so the test plays it: the tuning job appears during the wait."""
    import scripts.watch

    name = f"{PROJECT}-wtune-wf"
    trial = f"{name}-001-abcd1234"

    def workflow_creates_the_tuning_job(_: float) -> None:
        _create(name, ranges)
        moto_backends.set_tuning_job(name, "Completed", trials=[_trial(trial, "Completed", "0.01", 0.5)], best=trial)

    monkeypatch.setattr(scripts.watch.time, "sleep", workflow_creates_the_tuning_job)
    assert run(launch_main, ["--tune", str(ranges), "--max-jobs", "2", "--name", name, "--yes", "--watch", *TRAIN_LOSS]) == 0
    out = capsys.readouterr().out
    assert f"tuning job: {name}" in out and f"waiting for the workflow to create {name} ..." in out
    assert f"    trial {trial}: Completed  learning_rate=0.01  train:loss=0.5" in out
    assert out.rstrip().endswith(f"  serve it: python -m scripts.promote --best-of {name}")


def test_launch_tune_watch_reports_a_workflow_that_failed_before_creating_the_tuning_job(aws, ranges, capsys):
    name = f"{PROJECT}-wtune-wf-failed"
    arn = aws.training["StateMachineArn"].replace(":stateMachine:", ":execution:") + f":{name}"

    def refused(*_: Any) -> None:
        boto3.client("stepfunctions", region_name=REGION).stop_execution(
            executionArn=arn, error="InvalidLaunchOptions", cause="Invalid tuning launch: max_jobs=0"
        )

    from scripts import launch

    original = launch.launch_tuning

    def launch_then_refuse(deployment: Deployment, args: Any) -> Any:
        launched = original(deployment, args)
        refused()
        return launched

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(launch, "launch_tuning", launch_then_refuse)
        assert run(launch_main, ["--tune", str(ranges), "--name", name, "--yes", "--watch", *TRAIN_LOSS]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: the workflow execution {name} is ABORTED and created no job:")  # moto keeps no cause


def test_a_pipelines_tuning_step_shows_the_tuning_progress(aws, moto_backends, ranges, capsys):
    """moto never runs the pipeline: the test creates its tuning job (the name the pipeline gives it), then
    stops the execution."""
    assert launch_main(["--pipeline", "--skip-process", "--tune", str(ranges), "--max-jobs", "2", "--name", "wt-1", "--yes",
                        *TRAIN_LOSS]) == 0  # fmt: skip
    arn = aws.training["PipelineStateMachineArn"].replace(":stateMachine:", ":execution:") + ":wt-1"
    name = f"{PROJECT}-wt1"
    trial = f"{name}-001-abcd1234"
    sleep = _phases(
        lambda: (_create(name, ranges), moto_backends.set_tuning_job(name, "InProgress", trials=[_trial(trial, "InProgress", "0.01")])),
        lambda: (moto_backends.set_tuning_job(name, "Stopped", trials=[_trial(trial, "Stopped", "0.01")]),
                 boto3.client("stepfunctions", region_name=REGION).stop_execution(executionArn=arn, error="Stopped", cause="by a test")),
    )  # fmt: skip
    out = io.StringIO()
    assert follow_pipeline(_deployment(), arn, interval=0, out=out, sleep=sleep) == 4
    text = out.getvalue()
    assert f"  tuning job {name}: InProgress, trials: 0 completed, 1 in progress, 0 failed, 0 stopped of 3\n" in text
    assert f"    trial {trial}: InProgress  learning_rate=0.01\n" in text
    assert f"  tuning job {name}: Stopped, trials: 0 completed, 0 in progress, 0 failed, 1 stopped of 3\n" in text
    assert f"    trial {trial}: Stopped  learning_rate=0.01  (Stopped)\n" not in text and f"    trial {trial}: Stopped  learning_rate=0.01\n" in text
    assert text.index("tuning job") < text.index("pipeline execution wt-1 ABORTED")


def test_the_end_says_what_the_started_trials_billed_and_a_trial_that_cannot_be_read_changes_nothing_else(
        aws, moto_backends, ranges, monkeypatch, capsys):  # fmt: skip
    from botocore.exceptions import ClientError

    import scripts.watch

    name = f"{PROJECT}-wtune-bill"
    _create(name, ranges)
    started, never = f"{name}-001-abcd1234", f"{name}-002-abcd1234"
    moto_backends.set_tuning_job(name, "Completed", best=started, trials=[
        {**_trial(started, "Completed", "0.01", 0.5), "TrainingStartTime": "2026-01-01T12:00:00Z"},
        _trial(never, "Stopped", "0.02")])  # fmt: skip
    described = {"TrainingJobName": started, "BillableTimeInSeconds": 900, "TrainingTimeInSeconds": 900,
                 "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 100}}  # fmt: skip
    asked = []
    monkeypatch.setattr(scripts.watch, "describe_job", lambda aws_, job: asked.append(job) or described)
    capsys.readouterr()
    assert run(main, ["--tuning", name, "--interval", "0"]) == 0
    out = capsys.readouterr().out
    assert asked == [started]  # a trial that never started billed nothing: not described
    assert out.endswith(f"  serve it: python -m scripts.promote --best-of {name}\n"
                        "  billed: 1 trial(s) of 1 x ml.g5.xlarge, 900 s in all, about $0.36 (us-east-1 list prices)\n")

    def throttled(aws_: Any, job: str) -> None:
        raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "DescribeTrainingJob")

    monkeypatch.setattr(scripts.watch, "describe_job", throttled)
    assert run(main, ["--tuning", name, "--interval", "0"]) == 0  # the tuning job's outcome, as before
    out = capsys.readouterr().out
    assert f"  best training job: {started} train:loss=0.5\n  serve it: python -m scripts.promote --best-of {name}\n" in out
    assert out.endswith("  billed: not read (ThrottlingException); python -m scripts.watch TRIAL shows one trial's\n")
