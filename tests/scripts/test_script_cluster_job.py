"""scripts.cluster_job against moto: the SendCommand it sends, what it refuses first, status, logs and stop;
and what scripts.teardown and scripts.teardown_audit do with a cluster job still running.

A two-node ``gputrain-cluster`` stack is deployed into moto for these tests and deleted after them
(CloudFormation tags its instances ``aws:cloudformation:stack-name``, the command's target, as AWS
does). moto records ``SendCommand`` but runs nothing, and every command is ``Success`` at once;
it has no ``ListCommandInvocations`` or ``CancelCommand``. The tests add those two in-process and
set a command's status in moto's backend where they need a running or failed job. The document's
script itself runs in tests/unit/test_cluster_job_document.py.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any, Iterator

import boto3
import pytest
from moto.backends import get_backend
from moto.core.responses import ActionResult
from moto.ssm.responses import SimpleSystemManagerResponse

from scripts import cluster_job, common, teardown
from scripts.common import Aws, Deployment, load_platform_config, run
from scripts.teardown_audit import ERROR, audit
from tests.scripts.conftest import ACCOUNT, PROJECT, REGION

STACK = f"{PROJECT}-cluster"
DOCUMENT = f"{PROJECT}-cluster-train"
LOG_GROUP = f"/{PROJECT}/gpu-cluster"
CLUSTER_TEMPLATE = {
    "Resources": {
        **{f"Node{i}": {"Type": "AWS::EC2::Instance", "Properties": {"ImageId": "ami-12c6146b", "InstanceType": "g5.xlarge"}}
           for i in range(2)},  # fmt: skip
        "Logs": {"Type": "AWS::Logs::LogGroup", "Properties": {"LogGroupName": LOG_GROUP}},
    },
    "Outputs": {
        "InstanceIds": {"Value": {"Fn::Join": [",", [{"Ref": "Node0"}, {"Ref": "Node1"}]]}},
        "LogGroupName": {"Value": LOG_GROUP},
        "JobDocumentName": {"Value": DOCUMENT},
    },
}


def _ssm_backend() -> Any:
    return get_backend("ssm")[ACCOUNT][REGION]


def _patch_moto(monkeypatch: pytest.MonkeyPatch) -> None:
    """ListCommandInvocations and CancelCommand, from moto's record of the command."""

    def list_command_invocations(self: SimpleSystemManagerResponse) -> ActionResult:
        command = self.ssm_backend.get_command_by_id(self._get_param("CommandId"))
        statuses = getattr(command, "node_statuses", {})
        invocations = []
        for instance in command.instance_ids:
            status, code = statuses.get(instance, (command.status, 0))
            invocations.append({
                "CommandId": command.command_id, "InstanceId": instance, "DocumentName": command.document_name,
                "Status": status, "StatusDetails": status,
                "CommandPlugins": [{"Name": "ClusterJob", "Status": status, "ResponseCode": code}],
            })  # fmt: skip
        return ActionResult({"CommandInvocations": invocations})

    def cancel_command(self: SimpleSystemManagerResponse) -> ActionResult:
        command = self.ssm_backend.get_command_by_id(self._get_param("CommandId"))
        command.status = "Cancelled"
        return ActionResult({})

    monkeypatch.setattr(SimpleSystemManagerResponse, "list_command_invocations", list_command_invocations, raising=False)
    monkeypatch.setattr(SimpleSystemManagerResponse, "cancel_command", cancel_command, raising=False)


@pytest.fixture
def cluster(aws, monkeypatch) -> Iterator[list[str]]:
    """The cluster stack in moto; its two instance ids, node order. Deleted after the test."""
    _patch_moto(monkeypatch)
    cfn = boto3.client("cloudformation", region_name=REGION)
    cfn.create_stack(StackName=STACK, TemplateBody=json.dumps(CLUSTER_TEMPLATE))
    outputs = {o["OutputKey"]: o["OutputValue"] for o in cfn.describe_stacks(StackName=STACK)["Stacks"][0]["Outputs"]}
    instances = outputs["InstanceIds"].split(",")
    try:
        yield instances
    finally:
        cfn.delete_stack(StackName=STACK)  # its instances and log group with it
        # moto's tag targeting would still select the terminated instances (SSM targets only online ones).
        boto3.client("ec2", region_name=REGION).delete_tags(Resources=instances, Tags=[{"Key": "aws:cloudformation:stack-name"}])
        backend = _ssm_backend()
        backend._commands[:] = [c for c in backend._commands if c.document_name != DOCUMENT]


_SEND_STOP = cluster_job.send_stop
"""The real send_stop, which tests wrap."""


def _commands() -> list[Any]:
    return [c for c in _ssm_backend()._commands if c.document_name == DOCUMENT]


def test_dry_run_prints_the_send_command_request_and_the_price(cluster, capsys):
    argv = ["run", "mlp-1", "--hp", "epochs=3", "--channel", "train=train/", "--max-runtime", "7200", "--dry-run"]
    assert run(cluster_job.main, argv) == 0
    out = capsys.readouterr().out
    request = json.loads(out[: out.index("\nprice:")])
    assert request == {
        "DocumentName": DOCUMENT,
        "DocumentVersion": "$DEFAULT",
        "Targets": [{"Key": "tag:aws:cloudformation:stack-name", "Values": [STACK]}],
        "Parameters": {
            "Action": ["run"], "JobName": ["mlp-1"], "Hyperparameters": ['{"epochs": "3"}'], "Channels": ["train=train/"],
            "CodeKey": [""], "EntryPoint": [""], "MaxRuntimeSeconds": ["7200"],
        },  # fmt: skip
        "MaxConcurrency": "100%",
        "MaxErrors": "0",
        "TimeoutSeconds": 600,
        "Comment": "run mlp-1",
        "CloudWatchOutputConfig": {"CloudWatchLogGroupName": LOG_GROUP, "CloudWatchOutputEnabled": True},
    }
    # g5.xlarge at the GPU table's $1.006/h, one node, 2 h: scripts.cost's cluster job price.
    assert "price: cluster job mlp-1: 1 x g5.xlarge, on-demand $1.01/h; at most $2.01 over its 2 h maximum runtime" in out
    assert _commands() == []


def test_run_sends_the_document_to_every_node_of_the_cluster(cluster, capsys):
    assert run(cluster_job.main, ["run", "mlp-2", "--hp", "epochs=2", "--channel", "train=train/"]) == 0
    (command,) = _commands()
    assert sorted(command.instance_ids) == sorted(cluster)  # the stack's tag selects both nodes
    assert command.parameters["JobName"] == ["mlp-2"] and command.max_concurrency == "100%" and command.max_errors == "0"
    out = capsys.readouterr().out
    assert f"started cluster job mlp-2: command {command.command_id} to 2 node(s) of {STACK}" in out


def test_a_script_mode_job_passes_its_code_and_entry_point(cluster):
    argv = ["run", "script-1", "--code-key", "code/run-1/sourcedir.tar.gz", "--entry-point", "train.py", "--hp", "anything=goes"]
    assert run(cluster_job.main, argv) == 0
    (command,) = _commands()
    assert command.parameters["CodeKey"] == ["code/run-1/sourcedir.tar.gz"] and command.parameters["EntryPoint"] == ["train.py"]


def test_an_image_tag_is_passed_shown_by_dry_run_status_and_list_and_left_out_when_not_given(cluster, capsys):
    assert run(cluster_job.main, ["run", "tagged-1", "--image-tag", "tf2.21.0-gpu-2", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out[out.index("{"): out.index("\nprice:")])["Parameters"]["ImageTag"] == ["tf2.21.0-gpu-2"]
    assert _commands() == []
    assert run(cluster_job.main, ["run", "tagged-1", "--image-tag", "tf2.21.0-gpu-2"]) == 0
    (command,) = _commands()
    assert command.parameters["ImageTag"] == ["tf2.21.0-gpu-2"]
    capsys.readouterr()
    assert run(cluster_job.main, ["status", "tagged-1"]) == 0
    assert "image tf2.21.0-gpu-2)" in capsys.readouterr().out.splitlines()[0]
    assert run(cluster_job.main, ["run", "own-1"]) == 0
    own = next(c for c in _commands() if c.parameters["JobName"] == ["own-1"])
    assert "ImageTag" not in own.parameters  # a cluster deployed before the parameter still takes the job
    capsys.readouterr()
    assert run(cluster_job.main, ["list"]) == 0
    rows = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert "tf2.21.0-gpu-2" in rows["tagged-1"] and "the nodes' own" in rows["own-1"]


def test_source_dir_is_packed_and_uploaded_kms_encrypted_then_named_as_the_code_key(cluster, tmp_path, capsys):
    code = tmp_path / "my_code"
    code.mkdir()
    (code / "train.py").write_text("print('training')\n")
    (code / "helper.py").write_text("X = 1\n")
    assert run(cluster_job.main, ["run", "script-2", "--source-dir", str(code), "--entry-point", "train.py"]) == 0
    (command,) = _commands()
    assert command.parameters["CodeKey"] == ["code/cluster-script-2/sourcedir.tar.gz"] and command.parameters["EntryPoint"] == ["train.py"]
    bucket = next(o["OutputValue"] for o in boto3.client("cloudformation", region_name=REGION).describe_stacks(
        StackName=f"{PROJECT}-data")["Stacks"][0]["Outputs"] if o["OutputKey"] == "ArtifactsBucketName")  # fmt: skip
    stored = boto3.client("s3", region_name=REGION).get_object(Bucket=bucket, Key="code/cluster-script-2/sourcedir.tar.gz")
    assert stored["ServerSideEncryption"] == "aws:kms"
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(stored["Body"].read())) as tar:
        assert sorted(tar.getnames()) == ["helper.py", "train.py"]
    assert f"uploaded {code} to s3://{bucket}/code/cluster-script-2/sourcedir.tar.gz" in capsys.readouterr().out


def test_a_source_dir_without_its_entry_point_is_refused_before_anything_is_uploaded(cluster, tmp_path, capsys):
    (tmp_path / "train.py").write_text("")
    assert run(cluster_job.main, ["run", "script-3", "--source-dir", str(tmp_path), "--entry-point", "missing.py"]) == 2
    assert "--entry-point missing.py is not a file in" in capsys.readouterr().err
    assert run(cluster_job.main, ["run", "script-3", "--source-dir", str(tmp_path), "--code-key", "code/x/sourcedir.tar.gz",
                                  "--entry-point", "train.py"]) == 2  # fmt: skip
    assert "not both" in capsys.readouterr().err
    assert _commands() == []


@pytest.mark.parametrize(
    "argv, message",
    [
        (["run", "bad-1", "--hp", "epochz=3"], "refused before any node is touched: "),  # the image's own rules
        (["run", "bad-2", "--hp", "sagemaker_program=evil.py"], "sagemaker_"),
        (["run", "Bad_Name"], "JobName 'Bad_Name' does not match"),
        (["run", "bad-3", "--channel", "train=s3://elsewhere/"], "Channels"),
        (["run", "bad-4", "--code-key", "training-jobs/x.tar.gz", "--entry-point", "t.py"], "CodeKey"),
        (["run", "bad-5", "--image-tag", "latest"], "ImageTag 'latest' is not a versioned image tag"),
        (["run", "bad-6", "--image-tag", "v1:x"], "ImageTag 'v1:x' is not a versioned image tag"),
    ],
)
def test_bad_requests_are_refused_in_one_line_before_send_command(cluster, capsys, argv, message):
    assert run(cluster_job.main, argv) == 3
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1
    assert _commands() == []


def test_script_mode_needs_both_code_and_entry_point(cluster, capsys):
    assert run(cluster_job.main, ["run", "half", "--entry-point", "train.py"]) == 2
    assert "script mode needs --source-dir DIR (or --code-key" in capsys.readouterr().err


def test_a_second_job_is_refused_naming_the_running_one(cluster, capsys):
    assert run(cluster_job.main, ["run", "first"]) == 0
    (first,) = _commands()
    first.status = "InProgress"
    assert run(cluster_job.main, ["run", "second"]) == 3
    assert f"refused: cluster job first is running (command {first.command_id})" in capsys.readouterr().err
    assert len(_commands()) == 1


def test_a_job_needs_every_node_running(cluster, capsys):
    boto3.client("ec2", region_name=REGION).stop_instances(InstanceIds=[cluster[1]])
    assert run(cluster_job.main, ["run", "half-cluster"]) == 3
    err = capsys.readouterr().err
    assert f"node-1 ({cluster[1]}) stopped" in err
    # Starting it is not all: its maximum lifetime still counts from its first boot.
    assert ("aws ec2 start-instances --instance-ids ...; a node started more than cluster.max_lifetime_hours=24 h after "
            "its first boot powers off again within 15 min (raise it, 0: off, and redeploy)") in err
    assert _commands() == []


def test_without_max_runtime_a_job_ends_before_the_nodes_maximum_lifetime_powers_them_off(cluster, capsys):
    """The nodes power off 24 h after their first boot (cdk.json): a default 24 h job would be killed on the way."""
    assert run(cluster_job.main, ["run", "life-1"]) == 0
    (command,) = _commands()
    runtime = int(command.parameters["MaxRuntimeSeconds"][0])
    most = 24 * 3600 - cluster_job.RUN_MARGIN_SECONDS
    assert most - 120 <= runtime <= most
    out = capsys.readouterr().out
    assert f"maximum runtime {runtime} s, not the default 86400 s: the nodes power off at " in out
    assert "for longer jobs, raise cluster.max_lifetime_hours (0: off) and redeploy gputrain-cluster" in out


def test_a_dry_run_shows_the_runtime_a_run_would_send_and_refuses_what_a_run_refuses(cluster, capsys):
    """Before: a dry run printed the default 24 h, which the run itself then shortened to the nodes' lifetime."""
    assert run(cluster_job.main, ["run", "life-dry", "--dry-run"]) == 0
    out = capsys.readouterr().out
    request = json.loads(out[out.index("{"): out.index("\nprice:")])
    runtime = int(request["Parameters"]["MaxRuntimeSeconds"][0])
    assert runtime <= 24 * 3600 - cluster_job.RUN_MARGIN_SECONDS
    assert out.startswith(f"maximum runtime {runtime} s, not the default 86400 s: the nodes power off at ")
    assert run(cluster_job.main, ["run", "life-dry", "--max-runtime", "86400", "--dry-run"]) == 3
    assert capsys.readouterr().err.startswith("error: refused: the nodes power off at ")
    boto3.client("ec2", region_name=REGION).stop_instances(InstanceIds=[cluster[1]])
    assert run(cluster_job.main, ["run", "life-dry", "--max-runtime", "3600", "--dry-run"]) == 3
    assert f"node-1 ({cluster[1]}) stopped" in capsys.readouterr().err
    assert _commands() == []


def test_a_max_runtime_the_nodes_lifetime_would_cut_short_is_refused_before_send_command(cluster, capsys):
    assert run(cluster_job.main, ["run", "life-2", "--max-runtime", "86400"]) == 3
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("error: refused: the nodes power off at ")
    assert re.search(r"\(cluster.max_lifetime_hours=24 after their first boot\), before --max-runtime 86400 s and the stop "
                     r"are over: --max-runtime 85\d{3} or less, or raise cluster.max_lifetime_hours \(0: off\) and redeploy "
                     r"gputrain-cluster$", err.strip()), err
    assert _commands() == []
    # Without a lifetime the nodes run until stopped: nothing to shorten.
    assert run(cluster_job.main, ["run", "life-3", "--max-runtime", "86400", "-c", "cluster.max_lifetime_hours=0"]) == 0
    assert [c.parameters["MaxRuntimeSeconds"] for c in _commands()] == [["86400"]]


def test_nodes_started_after_their_lifetime_have_15_minutes_left_and_take_no_job():
    """bootstrap.sh re-arms the power-off from the first boot; past it, 15 minutes after this boot."""
    from datetime import datetime, timedelta, timezone
    from types import SimpleNamespace

    now = datetime(2026, 11, 28, 12, 0, tzinfo=timezone.utc)
    node = {"InstanceId": "i-1", "LaunchTime": now - timedelta(minutes=2),
            "NetworkInterfaces": [{"Attachment": {"DeviceIndex": 1, "AttachTime": now - timedelta(minutes=1)}},
                                  {"Attachment": {"DeviceIndex": 0, "AttachTime": now - timedelta(hours=30)}}]}  # fmt: skip
    assert cluster_job.poweroff_time(node, 24) == now + timedelta(minutes=13)
    assert cluster_job.poweroff_time(node, 48) == now + timedelta(hours=18)  # first boot 30 h ago
    assert cluster_job.poweroff_time(node, 0) is None
    deployment = Deployment(config=load_platform_config(), aws=Aws(boto3.Session(region_name=REGION)))
    with pytest.raises(common.OperatorError, match=r"13 min from now .*: no time left for a job; raise cluster.max_lifetime_hours"):
        cluster_job.lifetime_runtime(deployment, SimpleNamespace(max_runtime=None), {"MaxRuntimeSeconds": "86400"}, [node], now=now)


def test_status_shows_each_node_and_fails_when_a_node_failed(cluster, capsys):
    assert run(cluster_job.main, ["run", "st-1"]) == 0
    (command,) = _commands()
    command.status = "InProgress"
    capsys.readouterr()
    assert run(cluster_job.main, ["status", "st-1"]) == 0
    out = capsys.readouterr().out
    assert f"st-1: InProgress (command {command.command_id}" in out
    assert [line.split()[:3] for line in out.splitlines()[2:]] == [["node-0", cluster[0], "InProgress"], ["node-1", cluster[1], "InProgress"]]
    command.status = "Failed"
    command.node_statuses = {cluster[0]: ("Success", 0), cluster[1]: ("Failed", 1)}
    assert run(cluster_job.main, ["status", "st-1"]) == 1
    assert ["node-1", cluster[1], "Failed", "Failed", "1"] in [l.split() for l in capsys.readouterr().out.splitlines()]


def test_status_and_watch_fail_a_job_whose_node_is_gone_while_ssm_shows_it_running(cluster, capsys):
    """A dead node never reports; SSM keeps its invocation InProgress until the command's timeouts (up to 48 h)."""
    from scripts import watch

    command = _running("lost-1")
    boto3.client("ec2", region_name=REGION).stop_instances(InstanceIds=[cluster[1]])
    capsys.readouterr()
    assert run(cluster_job.main, ["status", "lost-1"]) == 1
    (line,) = [l for l in capsys.readouterr().out.splitlines() if l.startswith("failed:")]
    assert line.startswith(f"failed: node-1 ({cluster[1]}) stopped, yet its invocation is still InProgress")
    assert line.endswith("python -m scripts.cluster_job stop lost-1")
    assert run(watch.main, ["--cluster", "lost-1", "--no-logs", "--interval", "0"]) == 1
    assert f"failed: node-1 ({cluster[1]}) stopped" in capsys.readouterr().out
    boto3.client("ec2", region_name=REGION).start_instances(InstanceIds=[cluster[1]])
    assert run(cluster_job.main, ["status", "lost-1"]) == 0, "every node running: still running"


def test_status_of_an_unknown_job_says_how_to_list_them(cluster, capsys):
    assert run(cluster_job.main, ["status", "never-ran"]) == 3
    assert "no cluster job never-ran" in capsys.readouterr().err


def _ends_stopped(command: Any, instances: list[str]) -> None:
    """What the nodes do after the stop action: each container exits 143, the script uploads and exits 143."""
    command.status = "Failed"
    command.node_statuses = {instance: ("Failed", 143) for instance in instances}


def test_stop_sends_only_the_stop_action_and_waits_for_the_run_to_end_by_itself(cluster, monkeypatch, capsys):
    """No CancelCommand: Run Command's cancel SIGKILLs the node's script before it uploads the checkpoint."""
    assert run(cluster_job.main, ["run", "to-stop"]) == 0
    (command,) = _commands()
    command.status = "InProgress"
    polls = []
    monkeypatch.setattr(cluster_job.time, "sleep", lambda seconds: polls.append(seconds) or _ends_stopped(command, cluster))
    assert run(cluster_job.main, ["stop", "to-stop"]) == 0
    stop = next(c for c in _commands() if c.parameters["Action"] == ["stop"])
    assert stop.parameters["JobName"] == ["to-stop"] and sorted(stop.instance_ids) == sorted(cluster)
    assert command.status == "Failed", "never cancelled: it ended by itself"
    assert len(polls) == 1
    out = capsys.readouterr().out
    assert "SIGTERM into its containers" in out and f"waiting at most {cluster_job.STOP_WAIT_SECONDS} s" in out
    assert "  waiting for to-stop to end on every node: InProgress, 0 s of at most 420 s" in out
    assert "cancelled" not in out
    assert f"cluster job to-stop: Failed (command {command.command_id})" in out
    assert run(cluster_job.main, ["status", "to-stop"]) == 1
    assert "to-stop: Failed (stopped: every container exited 143 with its checkpoint)" in capsys.readouterr().out
    assert run(cluster_job.main, ["stop", "to-stop"]) == 0
    assert "already Failed; nothing to stop" in capsys.readouterr().out


def test_stop_cancels_only_a_run_that_outlives_its_bound_saying_so(cluster, monkeypatch, capsys):
    command = _running("never-ends")
    monkeypatch.setattr(cluster_job, "STOP_WAIT_SECONDS", 0.2)
    monkeypatch.setattr(cluster_job, "STOP_POLL_SECONDS", 0.05)
    capsys.readouterr()
    assert run(cluster_job.main, ["stop", "never-ends"]) == 0
    assert command.status == "Cancelled"
    out = capsys.readouterr().out
    (line,) = [l for l in out.splitlines() if "cancelled" in l and "did not end" in l]
    assert line.startswith(f"never-ends did not end within 0 s of its stop: command {command.command_id} cancelled")
    assert "never-ends: the guards have ended (uploads done on every node)" in out


def _stop_action_shows(monkeypatch: pytest.MonkeyPatch, status: str) -> None:
    """The stop action, once sent, as SSM shows it: ``status`` (moto: Success at once)."""

    def send(*args: Any) -> str:
        stop_id = _SEND_STOP(*args)
        next(c for c in _commands() if c.command_id == stop_id).status = status
        return stop_id

    monkeypatch.setattr(cluster_job, "send_stop", send)


def test_after_a_cancel_stop_waits_for_the_guards_uploads_and_says_when_they_outlive_its_bound(cluster, monkeypatch, capsys):
    """The cancel hands each node's uploads to its guard; the stop action ends on a node only once they are done, so
    stop (and teardown --destroy after it) waits for the stop action: removing the nodes earlier loses the checkpoint."""
    command = _running("slow-upload")
    monkeypatch.setattr(cluster_job, "STOP_WAIT_SECONDS", 0.0)
    polls: list[str] = []

    def guards_upload(seconds: float) -> None:  # the stop action InProgress for two polls, then Success
        stop = next(c for c in _commands() if c.parameters["Action"] == ["stop"])
        polls.append(stop.status)
        stop.status = "InProgress" if len(polls) < 2 else "Success"

    _stop_action_shows(monkeypatch, "InProgress")
    monkeypatch.setattr(cluster_job.time, "sleep", guards_upload)
    capsys.readouterr()
    assert run(cluster_job.main, ["stop", "slow-upload"]) == 0
    out = capsys.readouterr().out
    assert command.status == "Cancelled" and polls == ["InProgress", "InProgress"]
    assert out.index("cancelled") < out.index("  waiting for slow-upload's guards to upload on every node: stop action")
    assert "slow-upload: the guards have ended (uploads done on every node)" in out

    late = _running("stuck-upload")  # its stop action stays InProgress past the bound: stop fails, saying so
    monkeypatch.setattr(cluster_job, "STOP_ACTION_WAIT_SECONDS", 0.0)
    monkeypatch.setattr(cluster_job, "GUARD_WAIT_SLACK_SECONDS", 0.0)
    monkeypatch.setattr(cluster_job.time, "sleep", lambda seconds: None)
    assert run(cluster_job.main, ["stop", "stuck-upload"]) == 1
    out = capsys.readouterr().out
    assert late.status == "Cancelled"
    assert re.search(r"stuck-upload: the guards' uploads are not confirmed \(stop action \S+ InProgress\): removing the "
                     r"nodes now could lose what they have not uploaded", out), out  # fmt: skip

    failed = _running("failed-upload")  # a node's stop action failed ("still uploading" after its own bound)
    _stop_action_shows(monkeypatch, "Failed")
    assert run(cluster_job.main, ["stop", "failed-upload"]) == 1
    assert failed.status == "Cancelled"
    assert "failed-upload: the guards' uploads are not confirmed (stop action " in capsys.readouterr().out


def test_watch_reports_a_job_stopped_with_143_on_every_node_as_stopped(cluster, capsys):
    from scripts import watch

    command = _running("w-stopped")
    _ends_stopped(command, cluster)
    assert run(watch.main, ["--cluster", "w-stopped", "--no-logs"]) == 4
    assert "stopped: every node's container exited 143 (SIGTERM)" in capsys.readouterr().out
    command.node_statuses = {cluster[0]: ("Failed", 143), cluster[1]: ("Failed", 1)}
    assert run(watch.main, ["--cluster", "w-stopped", "--no-logs"]) == 1  # a node that failed is a failure


def test_logs_prints_each_nodes_lines(cluster, capsys):
    assert run(cluster_job.main, ["run", "logged"]) == 0
    (command,) = _commands()
    logs = boto3.client("logs", region_name=REGION)
    for index, instance in enumerate(cluster):
        stream = f"{instance}/job/logged"
        logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=stream)
        logs.put_log_events(logGroupName=LOG_GROUP, logStreamName=stream,
                            logEvents=[{"timestamp": int(time.time() * 1000), "message": f"epoch 1: loss 0.{index}"}])  # fmt: skip
    capsys.readouterr()
    assert run(cluster_job.main, ["logs", "logged", "--node", "node-1"]) == 0
    assert capsys.readouterr().out.splitlines() == ["node-1: epoch 1: loss 0.1"]
    assert run(cluster_job.main, ["logs", "logged", "--follow", "--interval", "0"]) == 0  # moto: Success at once
    out = capsys.readouterr().out.splitlines()
    assert out == ["node-0: epoch 1: loss 0.0", "node-1: epoch 1: loss 0.1", "logged: Success"]
    assert command.command_id


def _running(job_name: str) -> Any:
    """A job of the cluster that SSM shows InProgress (moto: Success at once)."""
    assert run(cluster_job.main, ["run", job_name]) == 0
    command = next(c for c in _commands() if c.parameters["JobName"] == [job_name])
    command.status = "InProgress"
    return command


def test_teardown_names_a_running_cluster_job_then_stops_it_before_cdk_destroy(cluster, monkeypatch, capsys):
    assert run(cluster_job.main, ["run", "td-ended"]) == 0  # an earlier job, ended: left alone
    command = _running("td-cluster")
    capsys.readouterr()

    assert run(teardown.main, []) == 1  # without --stop-running: named, nothing stopped
    out = capsys.readouterr().out
    assert f"running cluster job: td-cluster (command {command.command_id})" in out
    assert "stop them with: python -m scripts.teardown --stop-running" in out
    assert command.status == "InProgress" and len(_commands()) == 2

    at_destroy = []
    monkeypatch.setattr(common.subprocess, "run", lambda cmd, **kw: at_destroy.append((cmd[1:4], command.status, len(_commands())))
                        or type("R", (), {"returncode": 0})())  # fmt: skip
    send_stop = cluster_job.send_stop

    def nodes_stop_and_upload(*args: Any) -> str:  # the nodes: 143 with the checkpoint, uploaded, the run ends by itself
        stop_id = send_stop(*args)
        _ends_stopped(command, cluster)
        return stop_id

    monkeypatch.setattr(cluster_job, "send_stop", nodes_stop_and_upload)
    assert run(teardown.main, ["--stop-running", "--destroy", "--interval", "0", "--timeout", "5"]) == 0
    out = capsys.readouterr().out
    assert f"stopping cluster job td-cluster (command {command.command_id}): SIGTERM into its containers" in out
    (stop,) = [c for c in _commands() if c.parameters["Action"] == ["stop"]]
    assert stop.parameters["JobName"] == ["td-cluster"]
    assert stop.targets == [{"Key": "tag:aws:cloudformation:stack-name", "Values": [STACK]}] and sorted(stop.instance_ids) == sorted(cluster)
    # No CancelCommand: the run ended by itself (its checkpoint uploaded) before cdk destroy; the ended job untouched.
    assert command.status == "Failed" and "cancelled" not in out
    assert {c.parameters["JobName"][0]: c.status for c in _commands() if c.parameters["Action"] == ["run"]}["td-ended"] == "Success"
    assert at_destroy == [(["destroy", "--all", "--force"], "Failed", 3)]


def test_teardown_cancels_a_cluster_job_only_after_its_stop_bound(cluster, monkeypatch, capsys):
    command = _running("td-slow")
    monkeypatch.setattr(teardown, "CLUSTER_STOP_WAIT_SECONDS", 0.2)
    assert run(teardown.main, ["--stop-running", "--interval", "0", "--timeout", "5"]) == 0
    out = capsys.readouterr().out
    assert out.index("SIGTERM into its containers") < out.index(f"td-slow did not end within 0 s of its stop: command {command.command_id} cancelled")
    assert command.status == "Cancelled"


def test_teardown_does_not_destroy_when_a_cancelled_jobs_uploads_are_not_confirmed(cluster, monkeypatch, capsys):
    """The run outlived its stop bound and was cancelled, and its stop action failed on a node (a guard still
    uploading past its bound): nothing runs any more, yet destroying the nodes could lose the checkpoint."""
    command = _running("td-unsure")
    monkeypatch.setattr(teardown, "CLUSTER_STOP_WAIT_SECONDS", 0.2)
    _stop_action_shows(monkeypatch, "Failed")
    calls = []
    monkeypatch.setattr(common.subprocess, "run", lambda cmd, **kw: calls.append(cmd) or type("R", (), {"returncode": 0})())
    assert run(teardown.main, ["--stop-running", "--destroy", "--interval", "0", "--timeout", "5"]) == 1
    assert command.status == "Cancelled" and not calls, "cdk destroy never ran"
    captured = capsys.readouterr()
    assert "cluster job td-unsure: cancelled, its guards' uploads not confirmed done" in captured.out
    assert "error: a cancelled cluster job's uploads are not confirmed done; not destroying" in captured.err


def test_teardown_with_no_wait_never_destroys_what_still_runs(cluster, monkeypatch, capsys):
    command = _running("td-nowait")
    calls = []
    monkeypatch.setattr(common.subprocess, "run", lambda cmd, **kw: calls.append(cmd) or type("R", (), {"returncode": 0})())
    assert run(teardown.main, ["--stop-running", "--no-wait", "--destroy"]) == 1
    assert not calls and command.status == "InProgress"
    assert "error: --no-wait: something still runs; not destroying" in capsys.readouterr().err


def test_teardown_does_not_destroy_while_a_cluster_job_still_runs(cluster, monkeypatch, capsys):
    command = _running("td-stuck")
    calls = []
    monkeypatch.setattr(common.subprocess, "run", lambda cmd, **kw: calls.append(cmd) or type("R", (), {"returncode": 0})())
    monkeypatch.setattr(teardown, "send_stop", lambda *args: "")  # a job that will not stop
    assert run(teardown.main, ["--stop-running", "--destroy", "--interval", "0", "--timeout", "0"]) == 1
    assert not calls
    captured = capsys.readouterr()
    assert f"running cluster job: td-stuck (command {command.command_id})" in captured.out
    assert "not destroying" in captured.err
    # A stop action still under way is waited for, not sent again.
    assert cluster_job.send_stop(Deployment(config=load_platform_config(), aws=Aws(boto3.Session())),
                                 cluster_job.Cluster.of(Deployment(config=load_platform_config(), aws=Aws(boto3.Session()))),
                                 "td-stuck")  # fmt: skip
    (stop,) = [c for c in _commands() if c.parameters["Action"] == ["stop"]]
    stop.status = "InProgress"
    deployment = Deployment(config=load_platform_config(), aws=Aws(boto3.Session()))
    left = teardown.stop_running(deployment, wait=False)
    assert sorted(c.describe() for c in left.cluster_jobs) == [
        f"td-stuck (command {command.command_id})", f"td-stuck (its stop action, command {stop.command_id})"
    ]
    assert len(_commands()) == 2


def test_audit_reports_a_running_cluster_job_as_an_error(cluster):
    command = _running("au-1")
    report = audit(project=PROJECT, data_retained=True, region=REGION)
    (finding,) = [f for f in report.findings if f.kind == "ssm:command"]
    assert finding.verdict == ERROR and finding.arn == f"command/{command.command_id}"
    assert finding.note.startswith(f"compute left behind: cluster job au-1 is InProgress (SSM command {command.command_id} of {DOCUMENT})")
    assert f"aws ssm cancel-command --command-id {command.command_id}" in finding.note
    line = next(line for line in report.render().splitlines() if command.command_id in line)
    assert line.split()[:3] == ["ERROR", "ssm:command", f"command/{command.command_id}"]
    assert "=> FAIL" in report.render()
    command.status = "Success"  # ended: nothing to report
    assert not [f for f in audit(project=PROJECT, data_retained=True, region=REGION).findings if f.kind == "ssm:command"]
