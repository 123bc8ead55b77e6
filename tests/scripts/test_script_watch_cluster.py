"""scripts.watch --cluster JOB against moto: a job on the GPU cluster followed until it ends, with each
node's state, each node's lines, the chief's epoch figures and the exit code of the job's outcome.

The two-node cluster stack and moto's missing SSM calls come from test_script_cluster_job's fixture;
a command's status is set in moto's backend between polls, as SSM would move it."""

from __future__ import annotations

import time
from typing import Any

import boto3
import pytest

from scripts import cluster_job, watch
from scripts.common import run
from tests.scripts.conftest import REGION
from tests.scripts.test_script_cluster_job import LOG_GROUP, _commands, cluster  # noqa: F401 - the fixture

EPOCH = (
    "[metrics] epoch={epoch} loss=0.{epoch}00000 accuracy=0.800000 examples_per_sec=1000.0 step_time_ms=2.000 "
    "input_wait=5.0%"
)


def _log(instance: str, job: str, *lines: str, ago: float = 0) -> None:
    logs = boto3.client("logs", region_name=REGION)
    stream = f"{instance}/job/{job}"
    try:
        logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=stream)
    except logs.exceptions.ResourceAlreadyExistsException:
        pass
    now = int((time.time() - ago) * 1000)
    logs.put_log_events(logGroupName=LOG_GROUP, logStreamName=stream,
                        logEvents=[{"timestamp": now + i, "message": line} for i, line in enumerate(lines)])  # fmt: skip


def _started(job: str) -> Any:
    assert run(cluster_job.main, ["run", job]) == 0
    command = next(c for c in _commands() if c.parameters["JobName"] == [job])
    command.status = "InProgress"
    return command


def test_a_cluster_job_is_followed_to_its_end_with_the_chiefs_epochs(cluster, monkeypatch, capsys):  # noqa: F811
    command = _started("w-1")
    _log(cluster[0], "w-1", "[trainer] strategy MultiWorkerMirroredStrategy workers=2", EPOCH.format(epoch=1))
    _log(cluster[1], "w-1", "[trainer] strategy MultiWorkerMirroredStrategy workers=2", EPOCH.format(epoch=1))

    def sleep(_: float) -> None:  # the job moves on between two polls, as on SSM
        _log(cluster[0], "w-1", EPOCH.format(epoch=2))
        command.status = "Success"
        command.node_statuses = {cluster[0]: ("Success", 0), cluster[1]: ("Success", 0)}

    monkeypatch.setattr(watch.time, "sleep", sleep)
    capsys.readouterr()
    assert run(watch.main, ["--cluster", "w-1", "--interval", "0"]) == 0
    out = capsys.readouterr().out
    assert f"following cluster job w-1: command {command.command_id} on 2 node(s) of gputrain-cluster" in out
    assert "w-1: InProgress (node-0 InProgress, node-1 InProgress)" in out
    assert "  [node-1] [trainer] strategy MultiWorkerMirroredStrategy workers=2" in out
    epochs = [line for line in out.splitlines() if line.startswith("  epoch ")]
    assert [line.split(":")[0] for line in epochs] == ["  epoch 1", "  epoch 2"]  # the chief's only: node-1's epoch 1 is not repeated
    assert "w-1: Success (node-0 Success, node-1 Success)" in out
    assert f"  node-1 ({cluster[1]}): Success, exit 0" in out


def test_a_failed_node_fails_the_watch_naming_it(cluster, monkeypatch, capsys):  # noqa: F811
    command = _started("w-2")
    command.status = "Failed"
    command.node_statuses = {cluster[0]: ("Success", 0), cluster[1]: ("Failed", 5)}
    capsys.readouterr()
    assert run(watch.main, ["--cluster", "w-2", "--no-logs"]) == 1
    out = capsys.readouterr().out
    assert f"  node-1 ({cluster[1]}): Failed, exit 5" in out
    assert f"failed: Failed on node-1 (command {command.command_id})" in out


def test_a_stopped_job_exits_4(cluster, capsys):  # noqa: F811
    command = _started("w-3")
    command.status = "Cancelled"
    assert run(watch.main, ["--cluster", "w-3", "--no-logs"]) == 4
    assert "stopped: command" in capsys.readouterr().out


def test_an_unknown_cluster_job_says_how_to_list_them(cluster, capsys):  # noqa: F811
    assert run(watch.main, ["--cluster", "nope"]) == 3
    assert "no cluster job nope" in capsys.readouterr().err


def test_a_job_name_and_cluster_together_are_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exited:
        watch.main(["gputrain-x", "--cluster", "w-1"])
    assert exited.value.code == 2
    assert "give a training job or --cluster JOB, not both" in capsys.readouterr().err


def test_a_rerun_of_the_job_shows_its_own_lines_only(cluster, capsys):  # noqa: F811
    _log(cluster[0], "w-4", EPOCH.format(epoch=7), "[trainer] finished worker=0 epochs=7", ago=3600)  # the first run's, an hour ago
    command = _started("w-4")
    _log(cluster[0], "w-4", EPOCH.format(epoch=8))
    command.status = "Success"
    command.node_statuses = {cluster[0]: ("Success", 0), cluster[1]: ("Success", 0)}
    assert run(watch.main, ["--cluster", "w-4"]) == 0
    out = capsys.readouterr().out
    assert [line.split(":")[0] for line in out.splitlines() if line.startswith("  epoch ")] == ["  epoch 8"]
    assert "finished worker=0 epochs=7" not in out
    assert run(cluster_job.main, ["logs", "w-4", "--node", "node-0"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"node-0: {EPOCH.format(epoch=8)}"]
