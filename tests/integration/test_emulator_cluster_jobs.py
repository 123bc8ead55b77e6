"""Cluster jobs on the emulator: ``python -m scripts.cluster_job`` against a two-node ``gputrain-cluster``
whose Command document the local runner (scripts/emulator/cluster.py) plays as cluster_job.sh does on
the nodes: both nodes train one model (the built-in trainer, and a user's multi-worker script), outputs
and checkpoints land where the script puts them, a stop checkpoints, uploads and exits 143 with no
cancel, a rerun resumes, a cancel (or the execution timeout) SIGKILLs the script as the real agent
does and the guard stops and uploads, a killed node fails the job in bounded time naming it, and what
the runner cannot play is Failed in one line, never Success.

With ``--containers`` (marked ``image``: skipped in one line where no Docker engine can run) the same
deployment's runner plays each node as a container of the built image on a Docker network of the
job's own: a built-in job stopped (143, a checkpoint) and resumed to its end, a script-mode job, each
trained by both nodes with one ``TF_CONFIG``, and a node's container killed, which fails the job in the
same bounded time with the same line; no container or network outlives its job.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pytest

from scripts.emulator.cluster import NodeRun
from scripts.emulator.docker_hosts import DockerHosts, docker
from scripts.emulator.lifecycle import Lifecycle, Options
from stacks.components.gpu_cluster import TRAINING_WORKER_PORT
from tests.image.built import built_image_or_skip

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:Tried to parse:UserWarning"),
]

ROOT = Path(__file__).resolve().parents[2]
STACK = "gputrain-cluster"
TINY = ("--hp", "batch_size=32", "--hp", "hidden_units=8", "--channel", "train=train/")
"""256 rows of 4 features, 8 steps an epoch: seconds of training on two loopback nodes."""
LONG_EPOCHS = "5000"
"""Epochs of a job that runs until it is stopped or a node is killed."""
MWMS_SCRIPT = Path(__file__).resolve().parent / "sdk_user_code" / "train_mwms.py"
"""A MultiWorkerMirroredStrategy script as SageMaker users write it: its summary.json has the final weights' digest."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lifecycle]:
    """The data and two-node cluster stacks deployed on a fresh emulator, a tiny dataset uploaded."""
    run = Lifecycle(Options(work_dir=tmp_path_factory.mktemp("cluster-jobs"), stacks=("gputrain-data", STACK),
                            context={"gpu_training.cluster.node_count": "2"}, job_timeout_seconds=300))  # fmt: skip
    try:
        run.start()
        run.bootstrap_and_synth()
        run.deploy()
        run.cluster.peer_grace_seconds = 20
        rng = np.random.default_rng(7)
        x = rng.normal(size=(256, 4))
        y = (x[:, 0] + x[:, 1] > 0).astype(int)
        rows = "".join(",".join(f"{v:.5f}" for v in row) + f",{label}\n" for row, label in zip(x, y))
        bucket = run.outputs["gputrain-data"]["DatasetsBucketName"]
        run.client("s3").put_object(Bucket=bucket, Key="train/part-0.csv", Body=("f0,f1,f2,f3,label\n" + rows).encode())
        yield run
    finally:
        run.close()


@pytest.fixture(scope="module")
def docker_hosts(cluster: Lifecycle) -> Iterator[DockerHosts]:
    """What ``--containers`` gives the runners: the built image, the relay to this module's emulator."""
    image = built_image_or_skip()
    hosts = DockerHosts.open(image.tag, cluster.emulator.port)
    try:
        yield hosts
    finally:
        hosts.close()


@pytest.fixture
def in_containers(cluster: Lifecycle, docker_hosts: DockerHosts) -> Iterator[Lifecycle]:
    """The deployment, its cluster runner playing each node in Docker (as ``Options(containers=True)`` sets it up)
    for one test; afterwards no container or network of this run is left."""
    cluster.cluster.docker = docker_hosts
    try:
        yield cluster
    finally:
        cluster.cluster.docker = None
    left = [docker(kind, "ls", *(["-a"] if kind == "container" else []), "-q", "--filter", f"label={docker_hosts.label}").stdout.split()
            for kind in ("container", "network")]  # fmt: skip
    assert left == [[], []], f"left behind by the job (containers, networks): {left}"


def _cluster_job(run: Lifecycle, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m scripts.cluster_job ARGS`` as the operator runs it against the emulator."""
    command = [sys.executable, "-m", "scripts.cluster_job", *args]
    for key, value in run.context.items():
        command += ["-c", f"{key}={value}"]
    return subprocess.run(command, cwd=ROOT, env=run.env, capture_output=True, text=True, check=False)


def _start(run: Lifecycle, job: str, *args: str) -> str:
    started = _cluster_job(run, "run", job, *args)
    assert started.returncode == 0, started.stdout + started.stderr
    return re.search(r"command (\S+) to 2 node\(s\)", started.stdout).group(1)


def _instances(run: Lifecycle) -> list[str]:
    return run.outputs[STACK]["InstanceIds"].split(",")


def _wait_for_epoch(run: Lifecycle, job: str, timeout: float = 180) -> None:
    """Until the chief's container stream shows a completed epoch (a checkpoint is written)."""
    logs, group = run.client("logs"), run.outputs[STACK]["LogGroupName"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            events = logs.get_log_events(logGroupName=group, logStreamName=f"{_instances(run)[0]}/job/{job}", startFromHead=True)
            if any(e["message"].startswith("[metrics] epoch=") for e in events["events"]):
                return
        except logs.exceptions.ResourceNotFoundException:
            pass
        time.sleep(1)
    raise AssertionError(f"no epoch of {job} completed within {timeout:.0f}s")


def _script_job(run: Lifecycle, job: str, tmp_path: Path) -> dict[str, dict]:
    """A 2-node script-mode job of the multi-worker script (``--source-dir``), run to its end: each node's summary.json."""
    source = tmp_path / "source"
    source.mkdir()
    shutil.copy(MWMS_SCRIPT, source / "train.py")
    command = _start(run, job, "--source-dir", str(source), "--entry-point", "train.py", "--hp", "epochs=1", "--channel", "training=train/")
    outcome = run.cluster.wait(command, 300)
    assert outcome.status == "Success", (outcome, _cluster_job(run, "logs", job).stdout[-4000:])
    s3, bucket = run.client("s3"), run.outputs["gputrain-data"]["ArtifactsBucketName"]
    return {node: json.loads(s3.get_object(Bucket=bucket, Key=f"cluster-outputs/{STACK}/{job}/{node}/output/data/summary.json")["Body"].read())
            for node in ("node-0", "node-1")}  # fmt: skip


def _assert_one_tf_config(summaries: dict[str, dict]) -> list[str]:
    """Both nodes trained together: one cluster in TF_CONFIG, a task each, the same final weights; the workers."""
    chief, worker = summaries["node-0"], summaries["node-1"]
    assert len(chief["workers"]) == 2 and chief["workers"] == worker["workers"], summaries
    assert (chief["task"], worker["task"]) == ({"type": "worker", "index": 0}, {"type": "worker", "index": 1}), summaries
    assert chief["replicas_in_sync"] == worker["replicas_in_sync"] == 2, summaries
    assert chief["digest"] == worker["digest"], summaries
    return chief["workers"]


def _weights_digests(run: Lifecycle, job: str) -> dict[str, list[str]]:
    """Each node's ``weights_sha256`` from the built-in trainer's last line."""
    logs = _cluster_job(run, "logs", job).stdout
    return {node: re.findall(rf"^{node}: \[trainer\] finished .*weights_sha256=(\w+)", logs, re.M) for node in ("node-0", "node-1")}


def _keys(run: Lifecycle, prefix: str) -> list[str]:
    bucket = run.outputs["gputrain-data"]["ArtifactsBucketName"]
    pages = run.client("s3").get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [item["Key"] for page in pages for item in page.get("Contents", [])]


def test_a_second_job_is_refused_a_stop_exits_143_with_a_checkpoint_and_a_rerun_resumes(cluster: Lifecycle) -> None:
    """A stop, then a rerun to the end: both nodes train one model (one final weights digest), and the outputs and
    checkpoints land where the script puts them (the model once, by the chief)."""
    command = _start(cluster, "long-1", "--hp", f"epochs={LONG_EPOCHS}", *TINY)
    _wait_for_epoch(cluster, "long-1")

    second = _cluster_job(cluster, "run", "other-1", "--hp", "epochs=1", *TINY)
    assert second.returncode == 3 and "refused: cluster job long-1 is running" in second.stderr, second.stdout + second.stderr

    stopped = _cluster_job(cluster, "stop", "long-1")  # waits for the run to end by itself: no CancelCommand
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "cancelled" not in stopped.stdout and "cluster job long-1: Failed" in stopped.stdout, stopped.stdout
    outcome = cluster.cluster.wait(command, 200)
    assert outcome.status == "Failed" and {code for _, code in outcome.nodes.values()} == {143}, outcome
    status = _cluster_job(cluster, "status", "long-1")
    assert status.returncode == 1 and "long-1: Failed (stopped: every container exited 143" in status.stdout, status.stdout
    checkpoints = _keys(cluster, f"cluster-checkpoints/{STACK}/node-0/long-1/")
    assert any(k.endswith("/checkpoint") for k in checkpoints), checkpoints
    completed = max(int(m) for m in re.findall(r"\[metrics\] epoch=(\d+)", _cluster_job(cluster, "logs", "long-1", "--node", "node-0").stdout))

    rerun = _start(cluster, "long-1", "--hp", f"epochs={completed + 1}", *TINY)
    outcome = cluster.cluster.wait(rerun, 300)
    logs = _cluster_job(cluster, "logs", "long-1").stdout
    assert outcome.status == "Success", (outcome, logs[-4000:])
    assert re.search(rf"^node-0: \[trainer\] resume .*completed_epochs={completed}\b", logs, re.M), logs[-4000:]
    assert re.search(rf"^node-0: \[trainer\] finished worker=0 epochs={completed + 1} resumed_from_epoch={completed}\b", logs, re.M)
    assert outcome.nodes == {"node-0": ("Success", 0), "node-1": ("Success", 0)}, outcome
    status = _cluster_job(cluster, "status", "long-1")
    assert status.returncode == 0 and "long-1: Success" in status.stdout, status.stdout + status.stderr
    digests = _weights_digests(cluster, "long-1")
    assert len(digests["node-0"]) == 1 and digests["node-0"] == digests["node-1"], logs[-3000:]
    assert "job node-1: job long-1: the container exited 0" in logs  # the command's own stream too
    outputs = f"cluster-outputs/{STACK}/long-1/"
    keys = _keys(cluster, outputs)
    assert f"{outputs}node-0/model/model.keras" in keys, keys
    assert not [k for k in keys if k.startswith(f"{outputs}node-1/model/model.keras")]  # only the chief writes the model


def _boot_lines(run: Lifecycle, instance: str) -> list[str]:
    logs, group = run.client("logs"), run.outputs[STACK]["LogGroupName"]
    try:
        return [e["message"] for e in logs.get_log_events(logGroupName=group, logStreamName=f"{instance}/boot", startFromHead=True)["events"]]
    except logs.exceptions.ResourceNotFoundException:
        return []


def test_a_cancel_sigkills_the_script_and_the_guard_stops_the_trainers_and_uploads(cluster: Lifecycle) -> None:
    """CancelCommand as the real agent does it: the script is SIGKILLed (no trap, no more lines); the guard gives
    each trainer SIGTERM and uploads its checkpoints; the run is Cancelled with the agent's 137 on every node."""
    command = _start(cluster, "cancel-1", "--hp", f"epochs={LONG_EPOCHS}", *TINY)
    _wait_for_epoch(cluster, "cancel-1")
    nodes = list(cluster.cluster.running["cancel-1"])
    cluster.client("ssm").cancel_command(CommandId=command)
    outcome = cluster.cluster.wait(command, 200)
    assert outcome.status == "Cancelled" and {code for _, code in outcome.nodes.values()} == {137}, outcome
    assert [node.code for node in nodes] == [143, 143], "each trainer got SIGTERM and wrote its checkpoint"
    assert any(k.endswith("/checkpoint") for k in _keys(cluster, f"cluster-checkpoints/{STACK}/node-0/cancel-1/"))
    logs = _cluster_job(cluster, "logs", "cancel-1", "--node", "node-0").stdout
    assert "the container exited" not in logs and "signal: stopping" not in logs, logs[-2000:]
    boot = _boot_lines(cluster, _instances(cluster)[0])
    assert any("the job's script was killed (Run Command's cancel or execution timeout)" in line for line in boot), boot
    assert any("job cancel-1: the container exited 143 after the cancel" in line for line in boot), boot


def test_the_execution_timeout_sigkills_the_script_as_a_cancel_does(cluster: Lifecycle, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster.cluster, "_execution_timeout", lambda document: 20.0)
    command = _start(cluster, "timeout-1", "--hp", f"epochs={LONG_EPOCHS}", *TINY)
    outcome = cluster.cluster.wait(command, 200)
    assert outcome.status == "TimedOut" and {code for _, code in outcome.nodes.values()} == {137}, outcome
    assert any("job timeout-1: the container exited 143 after the cancel" in line for line in _boot_lines(cluster, _instances(cluster)[1]))


def _kill_node_1_and_assert_the_job_fails_in_bounded_time_naming_it(run: Lifecycle, job: str, kill: Callable[[NodeRun], None]) -> None:
    """Start a long job, ``kill`` node-1 after an epoch; the job fails within the peers' grace (plus a minute),
    the survivor too, in one line naming node-1, its exit 137 and the last completed epoch."""
    command = _start(run, job, "--hp", f"epochs={LONG_EPOCHS}", *TINY)
    _wait_for_epoch(run, job)
    node_1 = run.cluster.running[job][1]
    assert node_1.node.name == "node-1"
    killed = time.monotonic()
    kill(node_1)
    outcome = run.cluster.wait(command, 200)
    seconds = time.monotonic() - killed
    assert outcome.status == "Failed" and outcome.nodes["node-1"] == ("Failed", 137), outcome
    assert outcome.nodes["node-0"][0] == "Failed", outcome  # the survivor did not hang, nor succeed
    assert seconds < run.cluster.peer_grace_seconds + 60, seconds
    assert re.fullmatch(rf"cluster job {job} failed on node-1 \({_instances(run)[1]}\): the container exited 137 "
                        r"\(killed by signal 9\); last completed epoch \d+", outcome.failure or ""), outcome.failure  # fmt: skip
    logs = _cluster_job(run, "logs", job, "--node", "node-1").stdout
    assert outcome.failure in logs


def test_a_killed_node_fails_the_job_in_bounded_time_naming_it(cluster: Lifecycle) -> None:
    _kill_node_1_and_assert_the_job_fails_in_bounded_time_naming_it(cluster, "kill-1", lambda node: node.process.send_signal(signal.SIGKILL))


def test_what_the_runner_cannot_play_is_failed_in_one_line_never_success(cluster: Lifecycle) -> None:
    ssm = cluster.client("ssm")
    document = cluster.outputs[STACK]["JobDocumentName"]
    target = [{"Key": "tag:aws:cloudformation:stack-name", "Values": [STACK]}]
    # Parameters the document refuses (moto does not check allowedPattern; the node's script does).
    bad = ssm.send_command(DocumentName=document, Targets=target, Parameters={"JobName": ["Bad_Name"], "Action": ["run"]})["Command"]
    outcome = cluster.cluster.wait(bad["CommandId"], 60)
    assert outcome.status == "Failed" and set(outcome.nodes.values()) == {("Failed", 1)}, outcome
    assert outcome.failure.startswith("refused: invalid parameters: JobName 'Bad_Name' does not match"), outcome.failure
    # A document no local runner plays: Failed on every node at once, saying nothing ran.
    other = ssm.send_command(DocumentName="AWS-RunShellScript", Targets=target, Parameters={"commands": ["true"]})["Command"]
    (described,) = ssm.list_commands(CommandId=other["CommandId"])["Commands"]
    assert described["Status"] == "Failed"
    invocations = ssm.list_command_invocations(CommandId=other["CommandId"], Details=True)["CommandInvocations"]
    assert len(invocations) == 2 and {i["Status"] for i in invocations} == {"Failed"}
    assert "The emulator has no local runner for document AWS-RunShellScript: nothing ran" in invocations[0]["CommandPlugins"][0]["Output"]


def test_two_nodes_run_a_users_multi_worker_script_with_one_tf_config(cluster: Lifecycle, tmp_path: Path) -> None:
    workers = _assert_one_tf_config(_script_job(cluster, "mwms-1", tmp_path))
    assert all(w.startswith("127.0.0.1:") for w in workers), workers  # played on loopback
    keys = _keys(cluster, f"cluster-outputs/{STACK}/mwms-1/")
    assert f"cluster-outputs/{STACK}/mwms-1/node-0/model/model.keras" in keys, keys  # the chief saves the model


@pytest.mark.image
def test_in_containers_two_nodes_train_one_model_a_stop_exits_143_and_a_rerun_resumes(in_containers: Lifecycle) -> None:
    run = in_containers
    command = _start(run, "box-1", "--hp", f"epochs={LONG_EPOCHS}", *TINY)
    _wait_for_epoch(run, "box-1")
    assert _cluster_job(run, "stop", "box-1").returncode == 0
    outcome = run.cluster.wait(command, 200)
    assert outcome.status == "Failed" and {code for _, code in outcome.nodes.values()} == {143}, outcome  # SIGTERM through tini
    assert any(k.endswith("/checkpoint") for k in _keys(run, f"cluster-checkpoints/{STACK}/node-0/box-1/"))
    completed = max(int(m) for m in re.findall(r"\[metrics\] epoch=(\d+)", _cluster_job(run, "logs", "box-1", "--node", "node-0").stdout))

    rerun = _start(run, "box-1", "--hp", f"epochs={completed + 1}", *TINY)
    outcome = run.cluster.wait(rerun, 300)
    logs = _cluster_job(run, "logs", "box-1").stdout
    assert outcome.status == "Success" and outcome.nodes == {"node-0": ("Success", 0), "node-1": ("Success", 0)}, (outcome, logs[-4000:])
    assert "job node-0: job box-1 on " in logs and "(node-0 of node-0,node-1; " in logs, logs[-4000:]  # container host names
    assert re.search(rf"^node-0: \[trainer\] resume .*completed_epochs={completed}\b", logs, re.M), logs[-4000:]
    digests = _weights_digests(run, "box-1")
    assert len(digests["node-0"]) == 1 and digests["node-0"] == digests["node-1"], logs[-4000:]
    assert f"cluster-outputs/{STACK}/box-1/node-0/model/model.keras" in _keys(run, f"cluster-outputs/{STACK}/box-1/")


@pytest.mark.image
def test_in_containers_two_nodes_run_a_users_multi_worker_script_with_one_tf_config(in_containers: Lifecycle, tmp_path: Path) -> None:
    workers = _assert_one_tf_config(_script_job(in_containers, "mwms-box-1", tmp_path))
    assert workers == [f"node-0:{TRAINING_WORKER_PORT}", f"node-1:{TRAINING_WORKER_PORT}"], workers  # host names on the job's network


@pytest.mark.image
def test_in_containers_a_killed_node_fails_the_job_in_bounded_time_naming_it(in_containers: Lifecycle) -> None:
    def kill_container(node: NodeRun) -> None:  # the node's container dies (docker kill: SIGKILL), not the attached CLI
        killed = docker("kill", node.container)
        assert killed.returncode == 0, killed.stderr

    _kill_node_1_and_assert_the_job_fails_in_bounded_time_naming_it(in_containers, "kill-box-1", kill_container)
