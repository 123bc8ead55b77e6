"""Run, follow and stop training jobs on the running GPU cluster, through SSM Run Command.

Usage (from the repository root)::

    python -m scripts.cluster_job run mlp-1 --hp epochs=5 --channel train=train/
    python -m scripts.cluster_job run mlp-1 --dry-run        # check, and print the SendCommand request only
    python -m scripts.cluster_job run s-1 --source-dir my_code/ --entry-point train.py   # your script
    python -m scripts.cluster_job run mlp-2 --image-tag tf2.21.0-gpu-2   # another tag of the repository
    python -m scripts.cluster_job status mlp-1               # each node's invocation
    python -m scripts.cluster_job logs mlp-1 --follow        # each node's output, until the job ends
    python -m scripts.cluster_job stop mlp-1                 # SIGTERM into the containers (checkpoint, exit 143, uploads)

A job is one ``SendCommand`` of the cluster stack's ``<project>-cluster-train`` document (its
``JobDocumentName`` output) to the instances tagged ``aws:cloudformation:stack-name=<project>-cluster``,
every node at once (``MaxConcurrency`` 100%: a multi-node job needs all its workers) and
``MaxErrors`` 0, its output in the cluster's log group. The document's parameter patterns and the
image's hyperparameter rules are checked here first, so a bad request is refused in one line before
any node is touched; so is a second job while one runs (one job at a time per cluster), a job
while a node is not running, and a ``--max-runtime`` that would outlast the nodes: each powers itself
off ``cluster.max_lifetime_hours`` after its first boot (15 minutes after a start past that), which
the tool estimates from EC2's record of the instances; without ``--max-runtime`` the job's maximum
runtime is shortened to what is left, saying so. Each node checks the same against its own
schedule (and syncs the run's checkpoints every 5 minutes and at shutdown). ``status`` reads
``ListCommandInvocations``; ``stop`` sends the document's ``stop`` action, which gives each node's
container SIGTERM and 120 s to write its checkpoint, and waits (at most :data:`STOP_WAIT_SECONDS`) for the run to end by itself: each
node's script uploads the checkpoints, model and outputs and exits 143. It never cancels first:
``CancelCommand`` SIGKILLs the script's whole process group on each node (amazon-ssm-agent sends no
SIGTERM), so a cancel before the upload would lose the checkpoint; it cancels only a run that
outlives the bound, saying so (each node's guard then stops the container and uploads, as
``cluster_job.sh`` describes), and then waits for the stop action, which ends on each node only once
the guard's uploads are done, so that nothing (``teardown --destroy`` included) removes the nodes
under an upload. A rerun of the same job name resumes from
its checkpoints, as a SageMaker job with the same checkpoint location does. ``--image-tag TAG``
runs ``<repository>:TAG`` for this job only (each node pulls it first; never ``latest``) instead
of the image the nodes pulled at boot (``image.tag``). ``python -m
scripts.teardown --stop-running`` stops a running job the same way before anything is destroyed.

Outputs land in ``s3://<artifacts>/cluster-outputs/<project>-cluster/<job>/<node>/{model,output}/``
and checkpoints in each node's own ``cluster-checkpoints/<project>-cluster/<node>/<job>/``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from scripts.common import (
    AWS_CREDENTIALS,
    AWS_EXIT,
    EXIT_FAILED,
    Deployment,
    OperatorError,
    UsageError,
    add_common_arguments,
    help_epilog,
    parse_hyperparameters,
    parse_operator_args,
    print_table,
    run,
    seconds_argument,
    stack_name,
)
from scripts.cost import cluster_job_price
from scripts.source_code import code_key, pack_source, upload_archive
from stacks.components.cluster_job_document import (
    DEFAULT_MAX_RUNTIME_SECONDS,
    MAX_RUNTIME_LIMIT_SECONDS,
    STOP_ACTION_WAIT_SECONDS,
    STOP_GRACE_SECONDS,
    UPLOAD_MARGIN_SECONDS,
    hyperparameter_problems,
    request_refusals,
)

PROG = "python -m scripts.cluster_job"
CLUSTER_OUTPUTS = ("JobDocumentName", "LogGroupName", "InstanceIds")
"""Outputs of ``<project>-cluster`` the tool reads."""
STACK_TAG = "aws:cloudformation:stack-name"
"""CloudFormation's own tag on every instance of the stack: the command's target."""
ACTIVE = ("Pending", "InProgress")
"""A command's statuses while its job runs: what ``stop`` (and ``scripts.teardown``) stops."""
STILL_RUNNING = (*ACTIVE, "Cancelling")
"""A command's statuses while something of it may still run on the nodes (a cancel under way included)."""
DELIVERY_TIMEOUT_SECONDS = 600
"""How long SSM tries to reach a node before that node's invocation times out."""
PLUGIN = "ClusterJob"
"""The document's step, which names the output's log streams."""
STOP_WAIT_SECONDS = STOP_GRACE_SECONDS + UPLOAD_MARGIN_SECONDS
"""How long ``stop`` waits for a stopped job's run to end by itself before it cancels the run."""
STOP_POLL_SECONDS = 10.0
GUARD_WAIT_SLACK_SECONDS = 60
"""How much longer than the stop action's own bound (:data:`STOP_ACTION_WAIT_SECONDS`) the stop waits for it to
report: its delivery to the nodes and their last poll."""
STOPPED_EXIT = 143
"""A container stopped with SIGTERM exits 143: the exit of every node of a stopped job."""
LIFETIME_GRACE = timedelta(minutes=15)
"""bootstrap.sh's ``LIFETIME_GRACE_MINUTES``: a node started after its maximum lifetime powers off this long after."""
RUN_MARGIN_SECONDS = STOP_GRACE_SECONDS + DELIVERY_TIMEOUT_SECONDS
"""What a run needs before its nodes power off besides its maximum runtime: the container's stop (each node refuses
a run without it, ``cluster_job.sh``'s ``check_lifetime``) and the delivery, GPU check, pull and downloads first."""
MIN_RUNTIME_SECONDS = 600
"""Below this much runtime left before the power-off (a node started past its lifetime has 15 minutes), a run is
refused rather than shortened to nothing useful."""


@dataclass(frozen=True)
class Cluster:
    """The deployed cluster as a job sees it.

    Attributes:
        stack: ``<project>-cluster``.
        document: The Command document's name.
        log_group: Where the nodes' and the commands' output goes.
        instance_ids: The nodes' instances, in node order (``node-<index>``).
    """

    stack: str
    document: str
    log_group: str
    instance_ids: tuple[str, ...]

    @classmethod
    def of(cls, deployment: Deployment) -> "Cluster":
        outputs = deployment.outputs("cluster", CLUSTER_OUTPUTS)
        return cls(
            stack=stack_name(deployment.config, "cluster"),
            document=outputs["JobDocumentName"],
            log_group=outputs["LogGroupName"],
            instance_ids=tuple(i for i in outputs["InstanceIds"].split(",") if i),
        )

    @classmethod
    def find(cls, deployment: Deployment) -> Optional["Cluster"]:
        """The deployed cluster, or ``None`` where ``<project>-cluster`` is not deployed (or predates cluster jobs)."""
        try:
            return cls.of(deployment)
        except OperatorError:
            return None

    def node_name(self, instance_id: str) -> str:
        """``node-<index>`` of an instance of the cluster (its id when it is none)."""
        return f"node-{self.instance_ids.index(instance_id)}" if instance_id in self.instance_ids else instance_id


@dataclass(frozen=True)
class ClusterCommand:
    """One command of the cluster's document, as ``ListCommands`` shows it.

    Attributes:
        job_name: The job it runs (or stops).
        command_id: SSM's id of the command.
        action: The document's action: ``run`` or ``stop``.
        status: SSM's status of the command (``Pending``, ``InProgress``, ``Cancelling``, ``Success``...).
    """

    job_name: str
    command_id: str
    action: str
    status: str

    @classmethod
    def of(cls, command: dict[str, Any]) -> "ClusterCommand":
        parameters = command.get("Parameters") or {}
        return cls(
            job_name=(parameters.get("JobName") or ["?"])[0],
            command_id=command["CommandId"],
            action=(parameters.get("Action") or ["run"])[0],
            status=command["Status"],
        )

    def describe(self) -> str:
        """``<job> (command <id>)``, saying so where it is the job's stop action or a cancel under way."""
        what = f"command {self.command_id}" if self.action == "run" else f"its {self.action} action, command {self.command_id}"
        return f"{self.job_name} ({what}{', ' + self.status if self.status not in ACTIVE else ''})"


# --------------------------------------------------------------------------------------------
# The request
# --------------------------------------------------------------------------------------------


def job_parameters(deployment: Deployment, args: argparse.Namespace) -> dict[str, str]:
    """The document's parameters for ``run``: refused in one line where SSM or the image would refuse them."""
    if args.source_dir is not None and args.code_key:
        raise UsageError("give --source-dir DIR (uploaded now) or --code-key (uploaded before), not both")
    if bool(args.code_key or args.source_dir is not None) != bool(args.entry_point):
        raise UsageError("script mode needs --source-dir DIR (or --code-key code/.../sourcedir.tar.gz) and --entry-point SCRIPT")
    hyperparameters = parse_hyperparameters(args.hp)
    cluster = deployment.config.cluster
    found = hyperparameter_problems(hyperparameters, user_script=bool(args.entry_point), node_count=cluster.node_count,
                                    gpus_per_node=cluster.gpus_per_node)  # fmt: skip
    if found:
        raise OperatorError(f"refused before any node is touched: {'; '.join(found)}")
    max_runtime = requested_runtime(args)
    if not 1 <= max_runtime <= MAX_RUNTIME_LIMIT_SECONDS:
        raise UsageError(f"--max-runtime must be 1-{MAX_RUNTIME_LIMIT_SECONDS} seconds, not {max_runtime}")
    parameters = {
        "Action": "run",
        "JobName": args.job_name,
        "Hyperparameters": json.dumps(hyperparameters),
        "Channels": ",".join(args.channel),
        "CodeKey": args.code_key or (code_key(f"cluster-{args.job_name}") if args.source_dir is not None else ""),
        "EntryPoint": args.entry_point or "",
        "MaxRuntimeSeconds": str(max_runtime),
        # Only when given: a cluster deployed before the parameter still takes every other job.
        **({"ImageTag": args.image_tag} if args.image_tag is not None else {}),
    }
    refusals = request_refusals(parameters)
    if refusals or any(".." in channel for channel in args.channel):
        raise OperatorError(f"refused before any node is touched: {'; '.join(refusals) or 'a channel prefix with ..'}")
    return parameters


def requested_runtime(args: argparse.Namespace) -> int:
    """``--max-runtime``, or the document's default where it was not given."""
    return DEFAULT_MAX_RUNTIME_SECONDS if args.max_runtime is None else int(args.max_runtime)


def send_command_request(deployment: Deployment, cluster: Cluster, parameters: dict[str, str]) -> dict[str, Any]:
    """The ``SendCommand`` request of one action of the document to every node of the cluster."""
    return {
        "DocumentName": cluster.document,
        "DocumentVersion": "$DEFAULT",
        "Targets": [{"Key": f"tag:{STACK_TAG}", "Values": [cluster.stack]}],
        "Parameters": {name: [value] for name, value in parameters.items()},
        "MaxConcurrency": "100%",
        "MaxErrors": "0",
        "TimeoutSeconds": DELIVERY_TIMEOUT_SECONDS,
        "Comment": f"{parameters['Action']} {parameters['JobName']}"[:100],
        "CloudWatchOutputConfig": {"CloudWatchLogGroupName": cluster.log_group, "CloudWatchOutputEnabled": True},
    }


def price_line(deployment: Deployment, job_name: str, max_runtime_seconds: int) -> str:
    """The cluster's on-demand price while the job runs, and the most over its maximum runtime."""
    price = cluster_job_price(deployment.config, job_name, max_runtime_seconds)
    return f"{price.line()} (EC2 on-demand: the nodes bill while they run, job or not)"


# --------------------------------------------------------------------------------------------
# AWS
# --------------------------------------------------------------------------------------------


def job_commands(deployment: Deployment, cluster: Cluster, job_name: Optional[str] = None, action: str = "run") -> list[dict[str, Any]]:
    """The document's commands of ``action`` (for ``job_name``, or every job), newest first."""
    return document_commands(deployment.aws.client("ssm"), cluster.document, job_name=job_name, action=action)


def document_commands(ssm: Any, document: str, *, job_name: Optional[str] = None, action: Optional[str] = "run") -> list[dict[str, Any]]:
    """``ListCommands`` of ``document``: those of ``action`` (every action when ``None``) and of ``job_name``
    (every job when ``None``), newest first."""
    commands: list[dict[str, Any]] = []
    for page in ssm.get_paginator("list_commands").paginate(Filters=[{"key": "DocumentName", "value": document}]):
        for command in page["Commands"]:
            parameters = command.get("Parameters") or {}
            if command.get("DocumentName") != document or (action is not None and parameters.get("Action", ["run"]) != [action]):
                continue
            if job_name is None or parameters.get("JobName") == [job_name]:
                commands.append(command)
    return sorted(commands, key=lambda c: c["RequestedDateTime"], reverse=True)


def running_commands(ssm: Any, document: str) -> list[ClusterCommand]:
    """The document's commands (``run`` and ``stop`` actions) that may still run something on the nodes:
    what ``scripts.teardown`` stops and waits for, and what ``scripts.teardown_audit`` reports."""
    return [ClusterCommand.of(c) for c in document_commands(ssm, document, action=None) if c["Status"] in STILL_RUNNING]


def latest_run(deployment: Deployment, cluster: Cluster, job_name: str) -> dict[str, Any]:
    """The newest ``run`` command of the job, or an :class:`OperatorError` naming the way to list them."""
    commands = job_commands(deployment, cluster, job_name)
    if not commands:
        raise OperatorError(f"no cluster job {job_name} in {deployment.region} (see {PROG} list)")
    return commands[0]


def running_nodes(deployment: Deployment, cluster: Cluster) -> list[dict[str, Any]]:
    """The nodes' instances (``DescribeInstances``), in node order; an :class:`OperatorError` unless every node runs."""
    ec2 = deployment.aws.client("ec2")
    reservations = ec2.describe_instances(Filters=[{"Name": f"tag:{STACK_TAG}", "Values": [cluster.stack]}])["Reservations"]
    instances = {i["InstanceId"]: i for r in reservations for i in r["Instances"]}
    states = {i: instance["State"]["Name"] for i, instance in instances.items()}
    down = [f"{cluster.node_name(i)} ({i}) {states.get(i, 'missing')}" for i in cluster.instance_ids if states.get(i) != "running"]
    if down:
        hours = deployment.config.cluster.max_lifetime_hours
        # A started node re-arms its lifetime from its first boot: one past it powers off again within 15 minutes.
        lifetime = (f"; a node started more than cluster.max_lifetime_hours={hours} h after its first boot powers off "
                    "again within 15 min (raise it, 0: off, and redeploy)") if hours else ""  # fmt: skip
        raise OperatorError(
            f"refused: every node must run for a cluster job, and {', '.join(down)}: start it "
            f"(aws ec2 start-instances --instance-ids ...{lifetime}) or redeploy {cluster.stack}"
        )
    return [instances[i] for i in cluster.instance_ids]


def poweroff_time(instance: dict[str, Any], max_lifetime_hours: int) -> Optional[datetime]:
    """When a node's maximum lifetime powers it off (bootstrap.sh's ``arm_max_lifetime``: ``max_lifetime_hours``
    after its first boot, or :data:`LIFETIME_GRACE` after a boot past that), estimated from EC2's own record and
    never later than the node's: its primary network interface is attached at launch, before the first boot, and
    ``LaunchTime`` is its last start, before this boot. ``None``: no lifetime (0), or no record."""
    if not max_lifetime_hours:
        return None
    attached = [
        (eni.get("Attachment") or {}).get("AttachTime")
        for eni in instance.get("NetworkInterfaces") or []
        if (eni.get("Attachment") or {}).get("DeviceIndex") == 0
    ]
    if not attached or attached[0] is None or instance.get("LaunchTime") is None:
        return None
    return max(attached[0] + timedelta(hours=max_lifetime_hours), instance["LaunchTime"] + LIFETIME_GRACE)


def lifetime_runtime(deployment: Deployment, args: argparse.Namespace, parameters: dict[str, str],
                     nodes: Sequence[dict[str, Any]], now: Optional[datetime] = None) -> dict[str, str]:  # fmt: skip
    """``parameters`` with a maximum runtime that ends (and stops) before the first node's maximum lifetime powers it
    off: each node refuses a run that would not (``cluster_job.sh``), so it is checked here first. The default runtime
    is shortened to what is left, saying so; a ``--max-runtime`` given, or too little time left, is refused in one line."""
    hours = deployment.config.cluster.max_lifetime_hours
    times = [t for t in (poweroff_time(n, hours) for n in nodes) if t is not None]
    if not times:
        return parameters
    poweroff = min(times)
    left = (poweroff - (now or datetime.now(timezone.utc))).total_seconds()
    most = int(left) - RUN_MARGIN_SECONDS
    runtime = int(parameters["MaxRuntimeSeconds"])
    if runtime <= most:
        return parameters
    when = f"the nodes power off at {poweroff.astimezone(timezone.utc):%Y-%m-%d %H:%M} UTC, {max(left, 0) / 60:.0f} min from now"
    why = f"cluster.max_lifetime_hours={hours} after their first boot"
    fix = f"raise cluster.max_lifetime_hours (0: off) and redeploy {stack_name(deployment.config, 'cluster')}"
    if most < MIN_RUNTIME_SECONDS:
        raise OperatorError(f"refused: {when} ({why}): no time left for a job; {fix}")
    if args.max_runtime is not None:
        raise OperatorError(f"refused: {when} ({why}), before --max-runtime {runtime} s and the stop are over: "
                            f"--max-runtime {most} or less, or {fix}")  # fmt: skip
    print(f"maximum runtime {most} s, not the default {runtime} s: {when} ({why}); for longer jobs, {fix}")
    return {**parameters, "MaxRuntimeSeconds": str(most)}


def lost_nodes(deployment: Deployment, cluster: Cluster, nodes: Sequence[dict[str, Any]]) -> list[str]:
    """``node-<i> (<instance>) <state>`` of each invocation still Pending or InProgress whose instance is not
    running: its agent will never report, and SSM keeps the invocation until the command's timeouts run out
    (the delivery timeout plus the document's execution timeout, up to 48 h)."""
    active = [n["InstanceId"] for n in nodes if n["Status"] in ACTIVE]
    if not active:
        return []
    ec2 = deployment.aws.client("ec2")
    reservations = ec2.describe_instances(Filters=[{"Name": "instance-id", "Values": active}])["Reservations"]
    states = {i["InstanceId"]: i["State"]["Name"] for r in reservations for i in r["Instances"]}
    return [f"{cluster.node_name(i)} ({i}) {states.get(i, 'missing')}" for i in active if states.get(i) != "running"]


def lost_line(job_name: str, lost: Sequence[str]) -> str:
    """The one line that says a job has failed because a node's instance is gone."""
    return (f"failed: {', '.join(lost)}, yet its invocation is still InProgress: that node will never report, and SSM "
            f"shows the job running until its timeout; end it with {PROG} stop {job_name}")  # fmt: skip


def invocations(deployment: Deployment, command_id: str) -> list[dict[str, Any]]:
    """``ListCommandInvocations`` of one command."""
    paginator = deployment.aws.client("ssm").get_paginator("list_command_invocations")
    return [i for page in paginator.paginate(CommandId=command_id) for i in page["CommandInvocations"]]


# --------------------------------------------------------------------------------------------
# Commands
# --------------------------------------------------------------------------------------------


def image_of(command: dict[str, Any]) -> str:
    """The tag a ``run`` command's job runs: its ``ImageTag``, else the image its nodes pulled at boot."""
    return ((command.get("Parameters") or {}).get("ImageTag") or [""])[0] or "the nodes' own"


def cmd_run(deployment: Deployment, args: argparse.Namespace) -> int:
    parameters = job_parameters(deployment, args)
    # Packed (and checked) now; uploaded only when the job is sent, after every other check.
    archive = pack_source(args.source_dir, args.entry_point) if args.source_dir is not None else None
    cluster = Cluster.of(deployment)
    # A dry run makes every check a run makes (reads only) and prints what it would send: the runtime the
    # nodes' lifetime leaves, not the default it would not send.
    running = [c for c in job_commands(deployment, cluster) if c["Status"] in ACTIVE]
    if running:
        name = running[0]["Parameters"]["JobName"][0]
        raise OperatorError(f"refused: cluster job {name} is running (command {running[0]['CommandId']}); one job at a "
                            f"time: wait for it, or {PROG} stop {name}")  # fmt: skip
    nodes = running_nodes(deployment, cluster)
    parameters = lifetime_runtime(deployment, args, parameters, nodes)
    request = send_command_request(deployment, cluster, parameters)
    price = price_line(deployment, args.job_name, int(parameters["MaxRuntimeSeconds"]))
    if args.dry_run:
        print(json.dumps(request, indent=2))
        print(price)
        return 0
    if archive is not None:
        uri = upload_archive(deployment, archive, f"cluster-{args.job_name}", dry_run=False)
        print(f"uploaded {args.source_dir} to {uri}")
    command = deployment.aws.client("ssm").send_command(**request)["Command"]
    print(f"started cluster job {args.job_name}: command {command['CommandId']} to {len(nodes)} node(s) of {cluster.stack}")
    print(price)
    print(f"follow: {PROG} status {args.job_name}  |  {PROG} logs {args.job_name} --follow")
    return 0


def cmd_status(deployment: Deployment, args: argparse.Namespace) -> int:
    cluster = Cluster.of(deployment)
    command = latest_run(deployment, cluster, args.job_name)
    nodes = invocations(deployment, command["CommandId"])
    rows = [
        (cluster.node_name(i["InstanceId"]), i["InstanceId"], i["Status"], str(i.get("StatusDetails", "")),
         str(i.get("CommandPlugins", [{}])[0].get("ResponseCode", "")) if i.get("CommandPlugins") else "")
        for i in nodes
    ]  # fmt: skip
    stopped = command["Status"] == "Failed" and stopped_by_sigterm(nodes)
    how = " (stopped: every container exited 143 with its checkpoint)" if stopped else ""
    print(f"{args.job_name}: {command['Status']}{how} (command {command['CommandId']}, {command.get('TargetCount', '?')} "
          f"node(s), image {image_of(command)})")  # fmt: skip
    print_table(sorted(rows), ("node", "instance", "status", "details", "exit"))
    lost = lost_nodes(deployment, cluster, nodes)
    if lost:
        print(lost_line(args.job_name, lost))
    return 1 if lost or command["Status"] in ("Failed", "Cancelled", "TimedOut") else 0


def job_streams(cluster: Cluster, command_id: str, job_name: str, instances: Sequence[str]) -> list[tuple[str, str]]:
    """``(instance, stream)`` of every log stream a job's nodes write in the cluster's log group: the
    command's own output (stdout, stderr) and the container's lines, per node."""
    return [
        (instance, stream)
        for instance in instances
        for stream in (f"{command_id}/{instance}/{PLUGIN}/stdout", f"{command_id}/{instance}/{PLUGIN}/stderr", f"{instance}/job/{job_name}")
    ]


CLOCK_SLACK_SECONDS = 5
"""How much earlier than the command's request time a node's line may be stamped (clock skew)."""


def run_started_ms(command: dict[str, Any]) -> Optional[int]:
    """When ``command`` was requested, in epoch milliseconds, less :data:`CLOCK_SLACK_SECONDS`: a rerun
    of a job writes to the same container stream, and only its own lines are read from there."""
    requested = command.get("RequestedDateTime")
    return int((requested.timestamp() - CLOCK_SLACK_SECONDS) * 1000) if requested else None


def stream_events(logs: Any, group: str, stream: str, token: Optional[str], since_ms: Optional[int] = None) -> tuple[list[str], Optional[str]]:
    """The lines of ``stream`` after ``token`` (at first: from ``since_ms`` on) and the token to read
    on from (a stream not yet written: none)."""
    params: dict[str, Any] = {"logGroupName": group, "logStreamName": stream, "startFromHead": True}
    if token:
        params["nextToken"] = token
    elif since_ms is not None:
        params["startTime"] = since_ms
    try:
        page = logs.get_log_events(**params)
    except logs.exceptions.ResourceNotFoundException:
        return [], token
    return [e["message"].rstrip("\n") for e in page["events"]], page.get("nextForwardToken")


def cmd_logs(deployment: Deployment, args: argparse.Namespace, sleep: Callable[[float], None] = time.sleep) -> int:
    cluster = Cluster.of(deployment)
    command = latest_run(deployment, cluster, args.job_name)
    instances = [i for i in cluster.instance_ids if args.node in (None, cluster.node_name(i))]
    if not instances:
        raise UsageError(f"--node {args.node} is no node of {cluster.stack} (node-0 ... node-{len(cluster.instance_ids) - 1})")
    logs = deployment.aws.client("logs")
    streams = job_streams(cluster, command["CommandId"], args.job_name, instances)
    tokens: dict[str, Optional[str]] = {}
    while True:
        for instance, stream in streams:
            lines, tokens[stream] = stream_events(logs, cluster.log_group, stream, tokens.get(stream), run_started_ms(command))
            for line in lines:
                print(f"{cluster.node_name(instance)}: {line}")
        if not args.follow:
            return 0
        command = latest_run(deployment, cluster, args.job_name)
        if command["Status"] not in ACTIVE:
            print(f"{args.job_name}: {command['Status']}")
            return 1 if command["Status"] in ("Failed", "Cancelled", "TimedOut") else 0
        sleep(args.interval)


def send_stop(deployment: Deployment, cluster: Cluster, job_name: str) -> str:
    """The document's ``stop`` action to every node (SIGTERM into the job's containers, 120 s to checkpoint);
    its command's id. The run's command is left to end by itself: each node's script then uploads."""
    request = send_command_request(deployment, cluster, {"Action": "stop", "JobName": job_name})
    return str(deployment.aws.client("ssm").send_command(**request)["Command"]["CommandId"])


def command_status(deployment: Deployment, command_id: str) -> str:
    """SSM's status of one command."""
    commands = deployment.aws.client("ssm").list_commands(CommandId=command_id)["Commands"]
    return str(commands[0]["Status"]) if commands else "missing"


@dataclass(frozen=True)
class StopOutcome:
    """How a stop ended.

    Attributes:
        status: The run's command status.
        uploads_confirmed: False when the run was cancelled and its stop action did not report every node's
            guard done (still going, failed or timed out): removing the nodes then may lose what they had not
            uploaded.
    """

    status: str
    uploads_confirmed: bool = True


def stop_cluster_job(
    deployment: Deployment,
    cluster: Cluster,
    job_name: str,
    command_id: str,
    *,
    wait_seconds: Optional[float] = None,
    limit_seconds: Optional[float] = None,
    interval: Optional[float] = None,
    sleep: Optional[Callable[[float], None]] = None,
    send: bool = True,
) -> StopOutcome:
    """Stop a running job on every node and wait for its run to end by itself; how it ended.

    The document's ``stop`` action gives each container SIGTERM; each node's script then uploads the
    checkpoints, model and outputs and exits 143. Only a run still going after ``wait_seconds``
    (default :data:`STOP_WAIT_SECONDS`) is cancelled (``CancelCommand``: Run Command SIGKILLs the
    script, and each node's guard stops what still runs and uploads), in one line. ``send`` False: a stop
    action is already under way, and only the wait (and the fallback) is left. After a cancel the stop action is
    waited for (:func:`wait_for_guards`), at most until :data:`STOP_ACTION_WAIT_SECONDS` after the stop and at most
    ``limit_seconds`` from now.
    """
    sleep = sleep or time.sleep  # looked up at the call: tests replace it
    bound = STOP_WAIT_SECONDS if wait_seconds is None else wait_seconds
    interval = STOP_POLL_SECONDS if interval is None else interval
    stopped_at = time.monotonic()
    limit_at = stopped_at + limit_seconds if limit_seconds is not None else float("inf")
    stop_id = send_stop(deployment, cluster, job_name) if send else None
    what = f"SIGTERM into its containers (command {stop_id})" if send else "its stop action under way"
    print(f"stopping cluster job {job_name}: {what}; waiting at most {bound:.0f} s for command {command_id} to end by itself "
          "(checkpoint, exit 143, uploads)")  # fmt: skip
    started = time.monotonic()
    while (status := command_status(deployment, command_id)) in ACTIVE:
        waited = time.monotonic() - started
        if waited >= bound:
            deployment.aws.client("ssm").cancel_command(CommandId=command_id)
            print(f"{job_name} did not end within {bound:.0f} s of its stop: command {command_id} cancelled (Run Command "
                  "SIGKILLs each node's job script; its guard stops the container and uploads what it wrote)")  # fmt: skip
            deadline = min(stopped_at + STOP_ACTION_WAIT_SECONDS + GUARD_WAIT_SLACK_SECONDS, limit_at)
            guards = wait_for_guards(deployment, cluster, job_name, stop_id, deadline=deadline, interval=interval, sleep=sleep)
            return StopOutcome(command_status(deployment, command_id), uploads_confirmed=guards == "Success")
        print(f"  waiting for {job_name} to end on every node: {status}, {waited:.0f} s of at most {bound:.0f} s")
        sleep(min(interval, max(bound - waited, 0.0)))
    return StopOutcome(status)


def wait_for_guards(
    deployment: Deployment,
    cluster: Cluster,
    job_name: str,
    stop_id: Optional[str],
    *,
    deadline: float,
    interval: float,
    sleep: Callable[[float], None],
) -> str:
    """After a cancel: wait (until ``deadline``, a ``time.monotonic()`` value) for the job's stop action, which ends
    on each node once the guard's uploads are done; its status (``Success``: every node's uploads are done).
    ``stop_id`` ``None``: the job's newest stop action."""
    if stop_id is None:
        stops = job_commands(deployment, cluster, job_name, action="stop")
        if not stops:
            return "missing"
        stop_id = str(stops[0]["CommandId"])
    while (status := command_status(deployment, stop_id)) in ACTIVE:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        print(f"  waiting for {job_name}'s guards to upload on every node: stop action {stop_id} {status}, "
              f"at most {left:.0f} s more")  # fmt: skip
        sleep(min(interval, left))
    if status == "Success":
        print(f"{job_name}: the guards have ended (uploads done on every node)")
    else:
        print(f"{job_name}: the guards' uploads are not confirmed (stop action {stop_id} {status}): removing the nodes "
              f"now could lose what they have not uploaded; see {PROG} logs {job_name} and each node's boot log")  # fmt: skip
    return status


def stopped_by_sigterm(nodes: Sequence[dict[str, Any]]) -> bool:
    """Every node's container exited :data:`STOPPED_EXIT`: the job was stopped (a checkpoint, uploaded), not failed."""
    codes = [((n.get("CommandPlugins") or [{}])[0]).get("ResponseCode") for n in nodes]
    return bool(codes) and all(code == STOPPED_EXIT for code in codes)


def cmd_stop(deployment: Deployment, args: argparse.Namespace) -> int:
    cluster = Cluster.of(deployment)
    command = latest_run(deployment, cluster, args.job_name)
    if command["Status"] not in ACTIVE:
        print(f"{args.job_name} already {command['Status']}; nothing to stop")
        return 0
    outcome = stop_cluster_job(deployment, cluster, args.job_name, command["CommandId"])
    print(f"cluster job {args.job_name}: {outcome.status} (command {command['CommandId']}); each node's exit: {PROG} "
          f"status {args.job_name} (143: stopped, its checkpoints uploaded); a rerun resumes from them")  # fmt: skip
    return 0 if outcome.uploads_confirmed else EXIT_FAILED


def cmd_list(deployment: Deployment, args: argparse.Namespace) -> int:
    cluster = Cluster.of(deployment)
    rows = [
        (c["Parameters"]["JobName"][0], c["Status"], str(c["RequestedDateTime"])[:19], image_of(c), c["CommandId"])
        for c in job_commands(deployment, cluster)
    ]
    print_table(rows, ("job", "status", "requested", "image", "command"))
    return 0


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Run, follow and stop training jobs on the running GPU cluster (SSM Run Command).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=help_epilog(
            PROG,
            [
                ("run mlp-1 --hp epochs=5 --channel train=train/ --dry-run", "print the SendCommand request and the price"),
                ("run script-1 --source-dir my_code/ --entry-point train.py", "your script on every node (uploaded first)"),
                ("stop mlp-1", "SIGTERM into the job's containers: a checkpoint, exit 143"),
            ],
            credentials=AWS_CREDENTIALS,
            done="the job was sent or stopped; status: it succeeded or still runs",
            failed="status and logs --follow: the job failed, was cancelled or timed out on a node; stop: a cancelled "
            "run's uploads were not confirmed done",
            cannot_proceed=AWS_EXIT + ", a job the document or the image's rules refuse, a second job while one runs, "
            "a node not running",
        ),
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="{run,status,logs,stop,list}")
    run_parser = commands.add_parser("run", help="start a job on every node")
    run_parser.add_argument("job_name", help="the job (lowercase letters, digits, single hyphens; a rerun resumes)")
    run_parser.add_argument("--hp", action="append", default=[], metavar="KEY=VALUE", help="hyperparameter (repeatable)")
    run_parser.add_argument("--channel", action="append", default=[], metavar="NAME=PREFIX",
                            help="channel NAME from PREFIX in the datasets bucket (repeatable)")  # fmt: skip
    run_parser.add_argument("--source-dir", type=Path, metavar="DIR",
                            help="script mode: your code, packed and uploaded to code/cluster-<job>/sourcedir.tar.gz "
                            "(KMS) when the job is sent")  # fmt: skip
    run_parser.add_argument("--code-key", help="script mode: a sourcedir.tar.gz under code/ in the artifacts bucket "
                            "(scripts.launch --source-dir DIR --entry-point train.py --upload-only puts one there)")  # fmt: skip
    run_parser.add_argument("--entry-point", help="script mode: the script inside --source-dir or --code-key")
    run_parser.add_argument("--max-runtime", type=int, metavar="SECONDS",
                            help=f"SIGTERM after this long (default {DEFAULT_MAX_RUNTIME_SECONDS}, or what is left before the "
                            "nodes' maximum lifetime powers them off)")  # fmt: skip
    run_parser.add_argument("--image-tag", metavar="TAG",
                            help="this job's image: <repository>:TAG, pulled by each node first (never latest; "
                            "default: the image the nodes pulled at boot, image.tag)")  # fmt: skip
    run_parser.add_argument("--dry-run", action="store_true",
                            help="make a run's checks and print the SendCommand request; upload and send nothing")
    for name, what in (("status", "each node's invocation of the job"), ("stop", "stop the job on every node")):
        commands.add_parser(name, help=what).add_argument("job_name")
    logs_parser = commands.add_parser("logs", help="each node's output")
    logs_parser.add_argument("job_name")
    logs_parser.add_argument("--node", help="one node, e.g. node-0 (default: every node)")
    logs_parser.add_argument("--follow", action="store_true", help="until the job ends")
    logs_parser.add_argument("--interval", type=seconds_argument, default=10.0, help="seconds between polls (default 10)")
    commands.add_parser("list", help="the cluster's jobs, newest first")
    for sub in commands.choices.values():
        add_common_arguments(sub)
    return parser


COMMANDS: dict[str, Callable[[Deployment, argparse.Namespace], int]] = {
    "run": cmd_run, "status": cmd_status, "logs": cmd_logs, "stop": cmd_stop, "list": cmd_list,
}  # fmt: skip


def main(argv: Optional[Sequence[str]] = None) -> int:
    args, deployment = parse_operator_args(build_parser(), argv)
    if not deployment.config.cluster.enabled:
        raise OperatorError("cluster.enabled is false in this config: there is no cluster to run jobs on")
    return COMMANDS[args.command](deployment, args)


if __name__ == "__main__":
    sys.exit(run(main))
