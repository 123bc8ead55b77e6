"""The emulator's cluster runner (scripts.emulator.cluster) with a job's ``ImageTag``, without an emulator.

Only the decision is played here: which local image stands for ``<repository>:<ImageTag>``, and
the one line that fails the command, with nothing run, where none can. The nodes come from a
stub of the runner's look-up; no AWS call is made before the refusal. Docker is the runner's
``docker`` function, stubbed: whether a local image of the tag exists.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from scripts.emulator import cluster as cluster_module
from scripts.emulator.cluster import CommandRefused, LocalCluster, Node, NodeRun
from scripts.emulator.docker_hosts import DockerHosts

DEPLOYED = "tf2.21.0-gpu-1"
REPOSITORY = "123456789012.dkr.ecr.us-east-1.amazonaws.com/gputrain-training"


def _runs(lines: list[str]) -> list[NodeRun]:
    return [
        NodeRun(Node(f"node-{i}", f"i-{i}", {"NODE_NAME": f"node-{i}", "IMAGE_URI": f"{REPOSITORY}:{DEPLOYED}"}), lines.extend)  # type: ignore[arg-type]
        for i in range(2)
    ]


def _runner(tmp_path: Path, docker: DockerHosts | None = None) -> LocalCluster:
    return LocalCluster(endpoint_url="http://127.0.0.1:1", region="us-east-1", account="123456789012", work_dir=tmp_path,
                        docker=docker, on_event=lambda _: None)  # fmt: skip


def _local_images(monkeypatch: pytest.MonkeyPatch, *images: str) -> list[tuple[str, ...]]:
    calls: list[tuple[str, ...]] = []

    def docker(*args: str, **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(args)
        return subprocess.CompletedProcess(["docker", *args], 0 if args[-1] in images else 1, "", "")

    monkeypatch.setattr(cluster_module, "docker", docker)
    return calls


def test_no_tag_or_the_deployed_tag_runs_what_every_job_runs(tmp_path):
    runner, runs = _runner(tmp_path), _runs([])
    assert runner._job_image("", runs) == "" and runner._job_image(DEPLOYED, runs) == ""  # the local trainer
    in_containers = _runner(tmp_path, DockerHosts("gputrain-trainer:local", 1))
    assert in_containers._job_image(DEPLOYED, runs) == "gputrain-trainer:local"


def test_as_processes_another_tag_fails_the_command_in_one_line_and_nothing_runs(tmp_path, monkeypatch):
    runner, lines = _runner(tmp_path), []
    runs = _runs(lines)
    monkeypatch.setattr(runner, "_node_runs", lambda command: runs)
    monkeypatch.setattr(runner, "_train", lambda *a: pytest.fail("nothing may run"))
    command = SimpleNamespace(
        command_id="c-1", status="InProgress", invocations=[{"InstanceId": "i-0"}, {"InstanceId": "i-1"}],
        parameters={"Action": ["run"], "JobName": ["tagged-1"], "ImageTag": ["tf2.21.0-gpu-2"]},
    )  # fmt: skip
    outcome = runner.play(command)
    assert outcome.status == "Failed" and outcome.nodes == {"node-0": ("Failed", 1), "node-1": ("Failed", 1)}
    assert outcome.failure == (f"refused: ImageTag tf2.21.0-gpu-2 is not the deployed image.tag ({DEPLOYED}) and the runner "
                               "plays one local trainer, so nothing ran: run it with --containers and a local image of "
                               "that tag, or without --image-tag")  # fmt: skip
    assert len(lines) == 2 and all(line.endswith(f"ERROR: {outcome.failure}") for line in lines)


def test_in_containers_another_tag_runs_its_local_image_or_is_refused_naming_the_build(tmp_path, monkeypatch):
    runner, runs = _runner(tmp_path, DockerHosts("gputrain-trainer:local", 1)), _runs([])
    calls = _local_images(monkeypatch, "gputrain-trainer:tf2.21.0-gpu-2")
    assert runner._job_image("tf2.21.0-gpu-2", runs) == "gputrain-trainer:tf2.21.0-gpu-2"
    assert calls == [("image", "inspect", "gputrain-trainer:tf2.21.0-gpu-2")]
    with pytest.raises(CommandRefused, match=r"^ImageTag v9: no local image gputrain-trainer:v9 plays <repository>:v9, so "
                       r"nothing ran; build it with scripts/build-image.sh --tag gputrain-trainer:v9$"):  # fmt: skip
        runner._job_image("v9", runs)


def test_the_container_runs_the_chosen_image(tmp_path):
    hosts = DockerHosts("gputrain-trainer:local", 1)
    command = hosts.job_command("c", None, None, opt_ml=tmp_path, env={}, network=None, host="node-0", image="gputrain-trainer:v2")
    assert "gputrain-trainer:v2" in command and "gputrain-trainer:local" not in command
