"""A local runner that plays the GPU cluster's SSM Command document (``<project>-cluster-train``).

moto records a ``SendCommand`` and runs nothing; ``gaps._commands_wait_for_a_runner`` leaves a
command of the cluster's document InProgress for this runner, which plays it on every node of
the cluster (``node-<i>``, the stack output ``InstanceIds``' order) the way
``stacks/components/node_boot/cluster_job.sh`` runs it on a node, with the node's own settings
(its ``node.env``, read from the instance's user data):

- ``run``: one job per node at a time (a second is refused on the node, as the script refuses);
  the job laid out as SageMaker lays it out (``input/config/hyperparameters.json`` with script
  mode's ``sagemaker_*`` entries, ``resourceconfig.json`` with the fixed host list,
  ``inputdataconfig.json``, the channels synced from the datasets bucket prefixes in
  ``Channels``, the user's ``sourcedir.tar.gz`` from the artifacts bucket, the chief's
  checkpoints (``node-0``'s ``<CHECKPOINT_S3_URI><job>/``) restored on every node); the image's ``python -m trainer`` on
  each node as one emulated container (its own mount namespace, the node's tree at ``/opt/ml``),
  whose GPU check comes first (``EXPECTED_GPU_COUNT=0``: the emulator has no GPU, as for its
  SageMaker jobs); then the model and outputs to ``<OUTPUT_S3_URI><job>/<node>/`` and the
  checkpoints back to the node's prefix, whatever the exit (a rerun resumes).
- ``stop``: SIGTERM into the job's trainers (they checkpoint and exit 143); the run then uploads
  and ends by itself, Failed with 143 on every node, as on the nodes. The stop action ends once the
  run's uploads are done (its script's, or after a cancel its guard's), as on the nodes.
- ``CancelCommand`` of the run, and the step's execution timeout (``timeoutSeconds``), play the
  real agent: it SIGKILLs the run script's process group (amazon-ssm-agent sends no SIGTERM, so
  no trap runs), and the script says nothing more; what outlives it is cluster_job.sh's guard,
  which gives each trainer SIGTERM (a checkpoint) and uploads, its lines on the node's
  ``<instance>/boot`` stream. The run is recorded Cancelled (TimedOut after the execution
  timeout), each node's exit 137 (the agent's ``CommandStoppedPreemptivelyExitCode``), as SSM does.

The nodes' addresses cannot be reached here. Played as processes (the default), the several nodes
of a job train on loopback, each ``TRAINING_HOSTS`` entry ``127.0.0.1:<port of its own>`` (the
image's ``host:port`` entries). With ``--containers`` (``docker`` set), each node is a container of
the built image (:class:`~scripts.emulator.docker_hosts.DockerHosts`) on a Docker network of the
job's own, its host name and network alias the node's name, ``TRAINING_HOSTS`` those names (port
``TRAINING_WORKER_PORT``, as on the nodes): the image's ``ENTRYPOINT`` (tini) and ``CMD`` with the
node's contract variables (bootstrap.sh's ``container_options``; not its ``--gpus all``, ``--network
host``, ``--ipc host``, ulimits or EFA devices, which are the GPU node's); ``stop`` is ``docker stop
--time 120``, and every container and the network are removed when the job ends. Either way the
nodes share one ``TF_CONFIG`` as on the cluster. The node's GPU health check (``health_check.sh``)
is not played: the emulator has no GPU; the image's own check runs.

Each node's lines go where the cluster's go: the script's to the command's output stream
(``<command>/<instance>/ClusterJob/stdout``, and the invocation's output), the trainer's to
``<instance>/job/<job>`` in the cluster's log group. Each node's invocation is InProgress, then
Success only when its trainer exited 0, else Failed with its exit code; the command is Success
only when every node succeeded. A node that dies fails the job: its peers get their own
watchdogs' time, at most ``peer_grace_seconds``, then the runner ends them, and one line names
the node (and the last completed epoch where the log shows one).

``ImageTag``: empty or the deployed ``image.tag`` (the tag of the nodes' ``IMAGE_URI``), the job runs
as every job does (the local trainer, or the built image). Another tag is an image the emulator's
ECR does not hold: played as processes there is one local trainer, so the command is Failed in one
line and nothing runs; with ``--containers`` a local image of that tag (``gputrain-trainer:<tag>``,
from ``scripts/build-image.sh --tag gputrain-trainer:<tag>``) plays ``<repository>:<tag>``, and
without one the command is Failed the same way. Either way each node's ``started`` line names the
image it ran. The node's pull itself is not played (tests/unit/test_cluster_job_document.py runs it).

What the runner cannot play faithfully (processes where this machine has no mount namespace, a
Docker engine that does not answer) fails every node with one line: nothing is reported Success
that did not run.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from scripts.emulator.aws import free_port
from scripts.emulator.containers import ContainerRefused, container_command, end_process, image_environment, namespaced
from scripts.emulator.docker_hosts import DockerHosts, container_name, docker
from scripts.emulator.sagemaker import CloudWatchStream, LocalSageMaker, LogTail
from stacks.components.cluster_job_document import STOP_ACTION_WAIT_SECONDS, STOP_GRACE_SECONDS, request_refusals

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = "ClusterJob"
"""The document's one step: it names the output streams (``<command>/<instance>/ClusterJob/stdout``)."""
JOB_PREFIX = "gputrain-job-"
"""The job's container on a node (cluster_job.sh's ``JOB_PREFIX``): what its lines call it."""
KILLED = 128
"""A container killed by signal N exits 128 + N, as Docker reports it."""
CANCELLED_EXIT = 137
"""A cancelled invocation's exit code: amazon-ssm-agent's ``CommandStoppedPreemptivelyExitCode`` (128 + SIGKILL)."""
_NODE_ENV = re.compile(r"cat > \S+/node\.env <<'(\w+)'\n(.*?)\n\1\n", re.S)
_METRICS_EPOCH = re.compile(r"^\[metrics\] epoch=(\d+)\b")


class CommandRefused(Exception):
    """The runner cannot play this command on a node faithfully; the message is the one line."""


@dataclass(frozen=True)
class Node:
    """One node of the cluster, as the command reaches it.

    Attributes:
        name: ``node-<i>``.
        instance_id: Its instance.
        settings: Its ``node.env`` (``NODE_NAME``, ``CHECKPOINT_S3_URI``, ``OUTPUT_S3_URI``...).
    """

    name: str
    instance_id: str
    settings: Mapping[str, str]


@dataclass
class NodeRun:
    """What one node does for one command, and how it ended.

    Attributes:
        node: The node.
        output: The command's output stream of this node (the script's lines).
        lines: Those lines, for the invocation's ``StandardOutputContent``.
        base: The node's job tree (``/opt/ml`` of its container).
        process: The trainer, while it runs (with ``--containers``: the attached ``docker run``).
        container: Its container's name with ``--containers`` (``""`` played as a process).
        code: Its exit code (128 + N when killed by signal N) once it ended.
        ended_by: Why the runner ended it, if it did (``stop``, ``cancel``, ``runtime``, ``peer``).
        ended_at: When its exit was seen (``time.monotonic()``): the first to fail is the one named.
        killed: Its job script was SIGKILLed (a cancel): the guard, not the script, finishes the job.
    """

    node: Node
    output: CloudWatchStream
    lines: list[str] = field(default_factory=list)
    base: Path = Path()
    process: subprocess.Popen[bytes] | None = None
    container: str = ""
    code: int | None = None
    ended_by: str | None = None
    ended_at: float = 0.0
    killed: bool = False

    def say(self, message: str) -> None:
        """One line of the job script (``<time> job <node>: <message>``) on the node's output; nothing once
        the script was SIGKILLed."""
        if self.killed:
            return
        line = f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} job {self.node.name}: {message}"
        self.lines.append(line)
        self.output([line])

    def guard_says(self, logs: Any, message: str) -> None:
        """One line of cluster_job.sh's guard, which outlives a cancel: on the node's ``<instance>/boot`` stream."""
        line = f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} job {self.node.name}: {message}"
        CloudWatchStream(logs, self.output.group, f"{self.node.instance_id}/boot")([line])


@dataclass
class ClusterOutcome:
    """One command as the runner ended it.

    Attributes:
        command_id: The command.
        job: Its ``JobName``.
        action: ``run`` or ``stop``.
        status: The command's status (``Success``, ``Failed``, ``Cancelled``).
        nodes: ``node-<i>`` -> (its invocation's status, its exit code).
        failure: The one line naming the node that failed the job, if one did.
    """

    command_id: str
    job: str
    action: str
    status: str
    nodes: dict[str, tuple[str, int]]
    failure: str | None = None


@dataclass
class LocalCluster:
    """Plays the cluster document's commands on the emulator, each in a thread of its own.

    Attributes:
        endpoint_url: The emulator.
        region: Region of the commands.
        account: Account of the commands (for moto's backend).
        work_dir: Each node's job trees (``<job>/<node>/ml``) and trainer logs.
        timeout_seconds: Upper bound on one job's trainers, below its ``MaxRuntimeSeconds``.
        peer_grace_seconds: How long the other nodes of a job have, after one node failed, to
            fail by their own watchdog before the runner ends them.
        docker: ``--containers``: each node a container of the built image on a Docker network of
            the job's own; ``None`` plays each node's container with this machine's processes.
        on_event: Called with a one-line progress message.
        extra_env: Added to every trainer's environment.
    """

    endpoint_url: str
    region: str
    account: str
    work_dir: Path
    timeout_seconds: float = 900
    peer_grace_seconds: float = 60
    docker: DockerHosts | None = None
    on_event: Callable[[str], None] = print
    extra_env: Mapping[str, str] = field(default_factory=dict)
    outcomes: dict[str, ClusterOutcome] = field(default_factory=dict)
    running: dict[str, list[NodeRun]] = field(default_factory=dict)
    _stopping: set[str] = field(default_factory=set)
    _seen: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    # --- watching --------------------------------------------------------------------------

    def start(self) -> None:
        """Watch for new commands of a cluster document and play each."""
        from scripts.emulator.gaps import LOCAL_RUNNERS, RUN_COMMAND_RUNNER

        LOCAL_RUNNERS.add(RUN_COMMAND_RUNNER)
        thread = threading.Thread(target=self._watch, name="local-cluster", daemon=True)
        self._threads.append(thread)
        thread.start()

    def stop(self) -> None:
        """Stop watching; running jobs get SIGTERM (their checkpoints are kept) and are recorded."""
        from scripts.emulator.gaps import LOCAL_RUNNERS, RUN_COMMAND_RUNNER

        LOCAL_RUNNERS.discard(RUN_COMMAND_RUNNER)
        self._stop.set()
        with self._lock:
            self._stopping.update(self.running)
        for thread in list(self._threads):
            thread.join(timeout=STOP_GRACE_SECONDS + 60)

    def wait(self, command_id: str, timeout: float) -> ClusterOutcome:
        """Block until the runner has recorded the command's outcome."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if command_id in self.outcomes:
                return self.outcomes[command_id]
            time.sleep(0.5)
        raise TimeoutError(f"command {command_id} did not end within {timeout:.0f}s")

    def _backend(self) -> Any:
        from moto.ssm.models import ssm_backends

        return ssm_backends[self.account][self.region]

    def _client(self, service: str) -> Any:
        from scripts.emulator.aws import client

        return client(service, endpoint_url=self.endpoint_url, region=self.region)

    def _watch(self) -> None:
        while not self._stop.is_set():
            for command in list(self._backend()._commands):
                if command.command_id in self._seen or not getattr(command, "local_runner", False):
                    continue
                self._seen.add(command.command_id)
                thread = threading.Thread(target=self.play, args=(command,), name=f"cluster-{command.command_id[:8]}", daemon=True)
                self._threads.append(thread)
                thread.start()
            self._stop.wait(0.5)

    def play(self, command: Any) -> ClusterOutcome:
        """Play one command on every node it targets and record its outcome; a runner error fails it in one line."""
        parameters = {name: values[0] for name, values in (command.parameters or {}).items() if values}
        job, action = parameters.get("JobName", ""), parameters.get("Action", "run")
        runs: list[NodeRun] = []
        failure = None
        try:
            runs = self._node_runs(command)
            if action == "stop":
                self._stop_job(job, runs)
            else:
                failure = self._run_job(command, job, parameters, runs)
        except Exception as err:  # noqa: BLE001 - every failure is the command's, in one line
            line = str(err) if isinstance(err, (CommandRefused, ContainerRefused)) else f"local runner error: {type(err).__name__}: {err}"
            failure = f"refused: {line}" if isinstance(err, (CommandRefused, ContainerRefused)) else line
            for run in runs:
                run.say(f"ERROR: {failure}")
                run.code = 1 if run.code is None else run.code
        outcome = self._record(command, job, action, runs, failure)
        self.on_event(f"cluster job {job}: {action} {outcome.status}" + (f": {outcome.failure}" if outcome.failure else ""))
        return outcome

    # --- the cluster -----------------------------------------------------------------------

    def _node_runs(self, command: Any) -> list[NodeRun]:
        """The command's nodes, in node order, each with its ``node.env`` and output stream."""
        outputs = self._cluster_outputs(command.document_name)
        order = [i for i in outputs["InstanceIds"].split(",") if i]
        ec2, logs = self._client("ec2"), self._client("logs")
        runs = []
        for instance in sorted(command.instance_ids, key=lambda i: order.index(i) if i in order else len(order)):
            if instance not in order:
                raise CommandRefused(f"instance {instance} is no node of the cluster (InstanceIds {','.join(order)})")
            data = ec2.describe_instance_attribute(InstanceId=instance, Attribute="userData")["UserData"].get("Value", "")
            found = _NODE_ENV.search(base64.b64decode(data).decode("utf-8", "replace")) if data else None
            if found is None:
                raise CommandRefused(f"instance {instance} has no node.env in its user data")
            settings = dict(re.findall(r"^(\w+)='([^']*)'$", found.group(2), re.M))
            stream = CloudWatchStream(logs, outputs["LogGroupName"], f"{command.command_id}/{instance}/{PLUGIN}/stdout")
            runs.append(NodeRun(Node(settings.get("NODE_NAME") or f"node-{order.index(instance)}", instance, settings), stream))
        return runs

    def _cluster_outputs(self, document: str) -> dict[str, str]:
        cloudformation = self._client("cloudformation")
        for page in cloudformation.get_paginator("describe_stacks").paginate():
            for stack in page["Stacks"]:
                outputs = {o["OutputKey"]: o["OutputValue"] for o in stack.get("Outputs") or []}
                if outputs.get("JobDocumentName") == document and stack["StackStatus"] != "DELETE_COMPLETE":
                    return outputs
        raise CommandRefused(f"no deployed stack has the document {document} (output JobDocumentName)")

    def _bucket_uris(self, document: str) -> dict[str, str]:
        """``JOB_DATASETS_S3_URI`` and ``JOB_ARTIFACTS_S3_URI``, as the document's step exports them."""
        content = self._client("ssm").get_document(Name=document)["Content"]
        found = dict(re.findall(r"(JOB_(?:DATASETS|ARTIFACTS)_S3_URI)='([^']*)'", content))
        if len(found) != 2:
            raise CommandRefused(f"the document {document} exports no JOB_DATASETS_S3_URI and JOB_ARTIFACTS_S3_URI")
        return found

    # --- stop ------------------------------------------------------------------------------

    def _stop_job(self, job: str, runs: list[NodeRun]) -> None:
        """The document's ``stop``: SIGTERM into the job's trainer on each node; waits for the run to end, its
        uploads done (cluster_job.sh's stop waits for the run's guard, at most ``STOP_ACTION_WAIT``)."""
        with self._lock:
            playing_runs = self.running.get(job)
            playing = {r.node.instance_id: r for r in playing_runs or []}
            if playing:
                self._stopping.add(job)
        for run in runs:
            target = playing.get(run.node.instance_id)
            if target is None or target.process is None:
                run.say(f"job {job} is not running on this node")
            else:
                run.say(f"stopping {JOB_PREFIX}{job} (SIGTERM, {STOP_GRACE_SECONDS} s to write a checkpoint)")
        deadline = time.monotonic() + STOP_ACTION_WAIT_SECONDS
        while playing and self.running.get(job) is playing_runs and time.monotonic() < deadline:
            time.sleep(0.5)
        ended = self.running.get(job) is not playing_runs
        for run in runs:
            run.code = 0
            if run.node.instance_id not in playing:
                continue
            if ended:
                run.say(f"job {job} has ended on this node, its uploads done")
            else:  # as cluster_job.sh's stop action fails
                run.say(f"ERROR: job {job} is still uploading {STOP_ACTION_WAIT_SECONDS} s after the stop: see this node's boot log")
                run.code = 1

    # --- run -------------------------------------------------------------------------------

    def _run_job(self, command: Any, job: str, parameters: dict[str, str], runs: list[NodeRun]) -> str | None:
        """The document's ``run`` on every node; the one line naming the node that failed it, if one did."""
        refusals = request_refusals(parameters)
        if refusals:
            raise CommandRefused(f"invalid parameters: {'; '.join(refusals)}")
        image = self._job_image(parameters.get("ImageTag", ""), runs)
        with self._lock:
            busy = sorted(self.running)
            if not busy:
                self.running[job] = runs
        if busy:
            for run in runs:
                run.say(f"ERROR: refused: {JOB_PREFIX}{busy[0]} is running on this node (one job at a time; stop it first)")
                run.code = 1
            return None
        try:
            return self._train(command, job, parameters, runs, image)
        finally:
            with self._lock:
                self.running.pop(job, None)
                self._stopping.discard(job)

    def _job_image(self, tag: str, runs: list[NodeRun]) -> str:
        """What plays the image the job's nodes would run: with ``--containers`` a local image, else ``""`` (the
        local trainer). ``ImageTag`` empty or the deployed ``image.tag`` (the nodes' ``IMAGE_URI``) is the runner's
        own; another tag is played only by a local image of that tag (``gputrain-trainer:<tag>``) in containers.

        Raises:
            CommandRefused: another tag as processes (one local trainer), or without its local image: nothing ran.
        """
        deployed = sorted({r.node.settings.get("IMAGE_URI", "").rpartition(":")[2] for r in runs})
        if not tag or deployed == [tag]:
            return self.docker.image if self.docker is not None else ""
        if self.docker is None:
            raise CommandRefused(f"ImageTag {tag} is not the deployed image.tag ({', '.join(deployed)}) and the runner plays "
                                 "one local trainer, so nothing ran: run it with --containers and a local image of that "
                                 "tag, or without --image-tag")  # fmt: skip
        local = f"{self.docker.image.rpartition(':')[0]}:{tag}"
        if docker("image", "inspect", local).returncode != 0:
            raise CommandRefused(f"ImageTag {tag}: no local image {local} plays <repository>:{tag}, so nothing ran; "
                                 f"build it with scripts/build-image.sh --tag {local}")  # fmt: skip
        return local

    def _train(self, command: Any, job: str, parameters: dict[str, str], runs: list[NodeRun], image: str) -> str | None:
        uris = self._bucket_uris(command.document_name)
        hosts = [run.node.name for run in runs] if self.docker is not None else [f"127.0.0.1:{free_port()}" for _ in runs]
        where = f"a container of {image}" if self.docker is not None else "on loopback"
        s3 = self._client("s3")
        for run, host in zip(runs, hosts):
            settings = run.node.settings
            run.say(f"job {job} on {run.node.instance_id} ({host} of {','.join(hosts)}; the node's {settings.get('TRAINING_CURRENT_HOST')} "
                    f"played {where} by the emulator's local runner)")  # fmt: skip
            run.say("GPU check: the node's health check is not played (the emulator has no GPU); the image's runs first, "
                    "EXPECTED_GPU_COUNT=0")  # fmt: skip
            run.base = self.work_dir / job / run.node.name / "ml"
            self._lay_out(run, job, parameters, uris, hosts, host, s3)
        started = time.monotonic()  # the step's execution timeout counts from here, as the agent counts it
        max_runtime = min(float(parameters.get("MaxRuntimeSeconds") or 86400), self.timeout_seconds)
        with self._job_network(job, runs) as network:
            self._start(job, runs, hosts, network, image, parameters.get("ImageTag", ""))
            self._wait(job, runs, max_runtime, started + self._execution_timeout(command.document_name))
        logs = self._client("logs")
        for run in runs:
            self._upload_results(run, job, s3)  # by the script, or after a cancel by its guard
            if run.killed:
                run.guard_says(logs, f"job {job}: the container exited {run.code} after the cancel")
            run.say(f"job {job}: the container exited {run.code}")
        return _failure_line(job, runs)

    def _lay_out(self, run: NodeRun, job: str, parameters: dict[str, str], uris: dict[str, str], hosts: list[str], host: str,
                 s3: Any) -> None:  # fmt: skip
        """cluster_job.sh's ``run_job`` up to the container: the tree, the user's code, the config, the channels, the checkpoints."""
        base = run.base
        for sub in ("input", "model", "output"):
            _remove_tree(base / sub)
        for sub in ("input/data", "input/config", "model", "output", "checkpoints"):
            (base / sub).mkdir(parents=True, exist_ok=True)
        hyperparameters = json.loads(parameters.get("Hyperparameters") or "{}")
        code_key, entry_point = parameters.get("CodeKey", ""), parameters.get("EntryPoint", "")
        if code_key or entry_point:
            if not (code_key and entry_point):
                raise CommandRefused(f"script mode needs both CodeKey and EntryPoint (got '{code_key}', '{entry_point}')")
            bucket, _, key = (uris["JOB_ARTIFACTS_S3_URI"] + code_key)[len("s3://") :].partition("/")
            (base / "input/data/code").mkdir(parents=True, exist_ok=True)
            s3.download_file(bucket, key, str(base / "input/data/code/sourcedir.tar.gz"))
            hyperparameters.update({
                "sagemaker_program": entry_point, "sagemaker_submit_directory": "/opt/ml/input/data/code/sourcedir.tar.gz",
                "sagemaker_multi_worker_mirrored_strategy_enabled": "true" if len(hosts) > 1 else "false",
            })  # fmt: skip
            run.say(f"script mode: {entry_point} from {uris['JOB_ARTIFACTS_S3_URI']}{code_key} (multi-worker: {len(hosts) > 1})")
        channels = [c.split("=", 1) for c in (parameters.get("Channels") or "").split(",") if c]
        config = base / "input" / "config"
        (config / "hyperparameters.json").write_text(json.dumps(hyperparameters) + "\n")
        resource = {"current_host": host, "hosts": hosts, "network_interface_name": "lo" if self.docker is None else "eth0",
                    "current_instance_type": run.node.settings.get("TRAINING_INSTANCE_TYPE", "")}  # fmt: skip
        (config / "resourceconfig.json").write_text(json.dumps(resource) + "\n")
        declared = {name: {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated", "RecordWrapperType": "None"}
                    for name, _ in channels}  # fmt: skip
        (config / "inputdataconfig.json").write_text(json.dumps(declared) + "\n")
        for name, prefix in channels:
            LocalSageMaker._download_prefix(s3, uris["JOB_DATASETS_S3_URI"] + prefix, base / "input" / "data" / name)
            run.say(f"channel {name}: {uris['JOB_DATASETS_S3_URI']}{prefix}")
        # cluster_job.sh's CHIEF_CHECKPOINTS: every node restores node-0's (only the chief keeps a copy).
        chief = re.sub(r"/node-[^/]*/$", "/node-0/", run.node.settings["CHECKPOINT_S3_URI"]) + job + "/"
        LocalSageMaker._download_prefix(s3, chief, base / "checkpoints")

    def _environment(self, run: NodeRun, hosts: list[str], host: str) -> dict[str, str]:
        """The container's: the node's contract variables (container_options), the emulator's AWS; played as a
        process, the image's environment under them (in Docker the image brings its own ``ENV``)."""
        settings = run.node.settings
        env = {} if self.docker is not None else image_environment({
            k: v for k, v in os.environ.items() if not k.startswith(("SM_", "TRAINING_", "TF_CONFIG", "SAGEMAKER_", "CHECKPOINT_DIR", "PYTHONPATH"))
        })  # fmt: skip
        env.update({
            "EXPECTED_GPU_COUNT": "0", "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1",
            "TRAINING_HOSTS": ",".join(hosts), "TRAINING_CURRENT_HOST": host,
            "TRAINING_WORKER_PORT": settings.get("TRAINING_WORKER_PORT", "2222"),
            "TRAINING_INSTANCE_TYPE": settings.get("TRAINING_INSTANCE_TYPE", ""), "SAGEMAKER_BASE_DIR": "/opt/ml",
            "TF_USE_LEGACY_KERAS": settings.get("TF_USE_LEGACY_KERAS", "0"),
            "AWS_ENDPOINT_URL": self.docker.endpoint_url if self.docker is not None else self.endpoint_url,
            "AWS_REGION": self.region, "AWS_DEFAULT_REGION": self.region,
            "AWS_ACCESS_KEY_ID": os.environ.get("AWS_ACCESS_KEY_ID", "emulator"),
            "AWS_SECRET_ACCESS_KEY": os.environ.get("AWS_SECRET_ACCESS_KEY", "emulator"),
        })  # fmt: skip
        env.update(self.extra_env)
        return env

    @contextlib.contextmanager
    def _job_network(self, job: str, runs: list[NodeRun]) -> Iterator[str | None]:
        """With ``--containers``: the job's Docker network, and each node's container name; every container
        is removed when the block ends, whatever ended it (none outlives its job). Else nothing."""
        if self.docker is None:
            yield None
            return
        for run in runs:
            run.container = container_name(job, run.node.name)
        with self.docker.network(job, len(runs)) as network:
            try:
                yield network
            finally:
                self.docker.remove(*(run.container for run in runs))

    def _start(self, job: str, runs: list[NodeRun], hosts: list[str], network: str | None, image: str, tag: str) -> None:
        """Each node's container: played as a namespaced process, or ``docker run`` of ``image``, attached
        (its output is the container's, its exit status the container's)."""
        docker = self.docker
        for run, host in zip(runs, hosts):
            env = self._environment(run, hosts, host)
            uri = run.node.settings.get("IMAGE_URI", "")
            uri = f"{uri.rpartition(':')[0]}:{tag}" if tag else uri
            if docker is None:
                command = namespaced(container_command(None, None), run.base)  # ContainerRefused: no mount namespace here
                played = f"{uri} (played by the local trainer)"
            else:
                command = docker.job_command(run.container, None, None, opt_ml=run.base, env=env, network=network, host=host,
                                             image=image)  # fmt: skip
                env = dict(os.environ)  # the docker CLI's; the container's is in its -e options
                played = f"{uri} (played by {image})"
            log_file = run.base.parent / "container.log"
            with log_file.open("w", encoding="utf-8") as handle:
                run.process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT)
            run.say(f"started {JOB_PREFIX}{job} from {played}: 0 EFA device option(s), at most {self.timeout_seconds:.0f} s here"
                    + (f" (container {run.container}, network {network or 'bridge'})" if docker is not None else ""))  # fmt: skip
        where = f"in containers of {image} on {network or 'the default bridge'}" if docker is not None else "on loopback"
        self.on_event(f"cluster job {job}: {len(runs)} node(s) training {where} ({', '.join(hosts)})")

    def _wait(self, job: str, runs: list[NodeRun], max_runtime: float, execution_deadline: float) -> None:
        """Until every trainer ended: a stop or cancel, the runtime, or a failed node's grace end the others."""
        logs = self._client("logs")
        group = runs[0].output.group if runs else ""
        tails = [LogTail(r.base.parent / "container.log", CloudWatchStream(logs, group, f"{r.node.instance_id}/job/{job}")) for r in runs]
        deadline = time.monotonic() + max_runtime
        failed_at: float | None = None
        try:
            while any(r.code is None for r in runs):
                time.sleep(0.5)
                for run in runs:
                    if run.code is None and run.process is not None and run.process.poll() is not None:
                        code = run.process.returncode
                        run.code, run.ended_at = (KILLED - code if code < 0 else code), time.monotonic()
                if failed_at is None and any(r.code not in (None, 0) and r.ended_by is None for r in runs):
                    failed_at = time.monotonic()
                reason = self._end_reason(job, deadline, failed_at, execution_deadline)
                if reason is not None:
                    self._end(job, runs, reason)
                for tail in tails:
                    tail.pump()
        finally:
            for tail in tails:
                tail.pump(final=True)
                tail.handle.close()

    def _end_reason(self, job: str, deadline: float, failed_at: float | None, execution_deadline: float) -> str | None:
        with self._lock:
            stopping = job in self._stopping
        if self._cancelled(job):
            return "cancel"
        if time.monotonic() > execution_deadline:  # the agent SIGKILLs the script as for a cancel
            return "timeout"
        if stopping or self._stop.is_set():
            return "stop"
        if time.monotonic() > deadline:
            return "runtime"
        if failed_at is not None and time.monotonic() - failed_at > self.peer_grace_seconds:
            return "peer"
        return None

    def _execution_timeout(self, document: str) -> float:
        """The document's step ``timeoutSeconds``: after it the agent SIGKILLs the script, as for a cancel."""
        content = self._client("ssm").get_document(Name=document)["Content"]  # as moto renders it: read, not parsed
        found = re.search(r"""["']?timeoutSeconds["']?\s*:\s*["']?(\d+)""", content)
        if found is None:
            raise CommandRefused(f"the document {document} has no step timeoutSeconds")
        return float(found.group(1))

    def _cancelled(self, job: str) -> bool:
        return any(c.status == "Cancelling" and (c.parameters.get("JobName") or [""])[0] == job for c in list(self._backend()._commands))

    def _end(self, job: str, runs: list[NodeRun], reason: str) -> None:
        """SIGTERM into every trainer still running (SIGKILL after the stop grace), as ``docker stop`` does (in Docker: it).

        ``cancel``: Run Command SIGKILLs each node's job script, whose lines stop there; the guard gives the
        trainer SIGTERM (cluster_job.sh's ``guard_job``)."""
        if reason in ("cancel", "timeout"):
            logs = self._client("logs")
            for run in runs:
                if not run.killed:
                    run.killed = True
                    if run.code is None and run.process is not None and run.ended_by is None:
                        run.guard_says(logs, "the job's script was killed (Run Command's cancel or execution timeout): stopping "
                                             f"{JOB_PREFIX}{job} (SIGTERM, {STOP_GRACE_SECONDS} s to write a checkpoint), then its uploads")  # fmt: skip
        for run in runs:
            if run.code is None and run.process is not None and run.ended_by is None:
                run.ended_by = reason
                # stop: the stop action's own output says so; cancel: the script is gone and its guard said so.
                if reason == "runtime":
                    run.say(f"maximum runtime reached: stopping {JOB_PREFIX}{job}")
                elif reason == "peer":
                    run.say(f"another node failed {self.peer_grace_seconds:.0f} s ago and this node's trainer has not exited: "
                            "the local runner stops it (SIGTERM)")  # fmt: skip
                if run.container:  # docker stop --time 120: SIGTERM through the image's tini, SIGKILL after the grace
                    threading.Thread(target=DockerHosts.stop, args=(run.container, STOP_GRACE_SECONDS), daemon=True).start()
                else:
                    threading.Thread(target=end_process, args=(run.process, STOP_GRACE_SECONDS), daemon=True).start()

    def _upload_results(self, run: NodeRun, job: str, s3: Any) -> None:
        """cluster_job.sh's ``upload_results``: checkpoints to the node's prefix, model and outputs to the cluster's."""
        settings = run.node.settings
        for local, uri in (
            (run.base / "checkpoints", settings["CHECKPOINT_S3_URI"] + job + "/"),
            (run.base / "model", f"{settings['OUTPUT_S3_URI']}{job}/{run.node.name}/model/"),
            (run.base / "output", f"{settings['OUTPUT_S3_URI']}{job}/{run.node.name}/output/"),
        ):
            bucket, _, prefix = uri[len("s3://") :].partition("/")
            for path in sorted(p for p in local.rglob("*") if p.is_file()):
                s3.upload_file(str(path), bucket, prefix + path.relative_to(local).as_posix())

    # --- recording on the emulator ---------------------------------------------------------

    def _record(self, command: Any, job: str, action: str, runs: list[NodeRun], failure: str | None) -> ClusterOutcome:
        """Each node's invocation and the command, as SSM reports them once the nodes are done."""
        from moto.core.utils import utcnow

        cancelled = command.status == "Cancelling"
        timed_out = not cancelled and any(r.ended_by == "timeout" for r in runs)
        nodes: dict[str, tuple[str, int]] = {}
        by_instance = {r.node.instance_id: r for r in runs}
        now = utcnow()
        for invocation in command.invocations:
            run = by_instance.get(invocation["InstanceId"])
            code = 1 if run is None or run.code is None else CANCELLED_EXIT if run.killed else run.code
            status = "Cancelled" if cancelled else "TimedOut" if timed_out else "Success" if code == 0 else "Failed"
            invocation.update(Status=status, StatusDetails=status, ResponseCode=code, ExecutionEndDateTime=now.isoformat(),
                              StandardOutputContent="\n".join(run.lines if run else [failure or ""])[-24000:])  # fmt: skip
            nodes[run.node.name if run else invocation["InstanceId"]] = (status, code)
        statuses = {status for status, _ in nodes.values()}
        command.status = "Cancelled" if cancelled else "TimedOut" if timed_out else "Success" if statuses == {"Success"} else "Failed"
        command.status_details = command.status
        command.completed_count = len(nodes)
        command.error_count = sum(1 for status, _ in nodes.values() if status == "Failed")
        outcome = ClusterOutcome(command.command_id, job, action, command.status, nodes, failure)
        self.outcomes[command.command_id] = outcome
        return outcome


def _failure_line(job: str, runs: Sequence[NodeRun]) -> str | None:
    """One line naming the node that failed the job (not one the runner ended), and the last completed epoch."""
    failed = sorted((r for r in runs if r.code not in (None, 0) and r.ended_by is None), key=lambda r: r.ended_at)
    if not failed:
        return None
    run = failed[0]
    how = f" (killed by signal {run.code - KILLED})" if run.code is not None and run.code > KILLED and run.code != 143 else ""
    epochs = [int(m.group(1)) for r in runs for line in _log_lines(r) if (m := _METRICS_EPOCH.match(line))]
    reason = _failure_file(run)
    line = f"cluster job {job} failed on {run.node.name} ({run.node.instance_id}): the container exited {run.code}{how}"
    line += f"; last completed epoch {max(epochs)}" if epochs else "; no epoch completed"
    line += f": {reason}" if reason else ""
    run.say(f"ERROR: {line}")
    return line


def _log_lines(run: NodeRun) -> list[str]:
    log = run.base.parent / "container.log"
    return log.read_text(encoding="utf-8", errors="replace").splitlines() if log.is_file() else []


def _failure_file(run: NodeRun) -> str:
    path = run.base / "output" / "failure"
    return " ".join(path.read_text(encoding="utf-8", errors="replace").split())[:300] if path.is_file() else ""


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)
