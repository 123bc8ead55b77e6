"""A local runner that plays SageMaker's part for training jobs created on the emulator.

The emulator accepts CreateTrainingJob but runs no containers. For each job this runner does
what SageMaker does around the training image, in the same order:

1. reads the job's description (DescribeTrainingJob), as the service would read the request;
2. lays out each instance's ``/opt/ml`` tree under a temporary base directory:
   ``input/config/hyperparameters.json``, ``resourceconfig.json`` (``algo-1`` .. ``algo-N``),
   ``inputdataconfig.json``, and every channel downloaded from its S3 prefix into
   ``input/data/<channel>/`` (File mode; ShardedByS3Key splits the keys between hosts);
3. runs what the job asks (``AlgorithmSpecification.ContainerEntrypoint``/``ContainerArguments``,
   else the image's ``python -m trainer train``) as one emulated container per instance
   (:mod:`scripts.emulator.containers`): its own mount namespace with its tree at ``/opt/ml``,
   the image's environment plus the job's Environment, and for several instances a network
   namespace per host named as SageMaker names them; with ``docker`` set (``run-local.sh
   --containers``), the built image itself in Docker, one container per instance
   (:mod:`scripts.emulator.docker_hosts`);
4. on success packs ``algo-1``'s ``model/`` into ``model.tar.gz`` and uploads it to
   ``<S3OutputPath>/<job name>/output/model.tar.gz`` (and checkpoints to the CheckpointConfig
   URI), encrypted with the job's output KMS key;
5. records the outcome on the job: status, FailureReason (from the failing host's
   ``output/failure``, else its exit status), ModelArtifacts, and FinalMetricDataList parsed
   from the log with the job's MetricDefinitions, as SageMaker parses CloudWatch logs. A
   container that exits 0 without a model fails the job: nothing is Completed that did not run.

While the containers run, their lines go to the job's CloudWatch Logs streams
(``/aws/sagemaker/TrainingJobs`` or ``/aws/sagemaker/ProcessingJobs``, ``<job>/algo-N-<epoch>``),
and a StopTrainingJob/StopProcessingJob (the job turned Stopping; see ``gaps._stop_jobs``) ends
them with SIGTERM, as SageMaker does, and records it Stopped.

Processing jobs are played the same way (:meth:`LocalSageMaker.run_processing_job`): each S3
input downloaded to its ``LocalPath`` (``/opt/ml/processing/input/<name>``, the SDK's code input
``/opt/ml/processing/input/code`` included), ``config/processingjobconfig.json`` (the
DescribeProcessingJob response) and ``config/resourceconfig.json`` written, the job's
``ContainerEntrypoint`` + ``ContainerArguments`` run in the emulated container, each host's
output directories uploaded to their ``S3Uri`` with ``ProcessingOutputConfig.KmsKeyId``, and the
status, ``FailureReason`` and ``ExitMessage`` (``output/message``, the processing mode's failure
file) recorded.

What the runner cannot play faithfully (several hosts without root, no ``unshare``; and, before
anything is downloaded, what :func:`training_refusal` and :func:`processing_refusal` name:
heterogeneous clusters, Pipe mode, compressed or RecordIO channels, manifests, file-system
channels, an uncompressed model output, TensorBoard output, Continuous uploads) fails the job with
a one-line ``ClientError`` naming the field and its value instead of running it another way.

Emulator only: against a real account SageMaker does all of this itself, in the container.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import subprocess
import tarfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from scripts.emulator.containers import (
    image_not_played,
    ContainerRefused,
    JobNetwork,
    container_command,
    end_process,
    host_names,
    image_environment,
    namespaced,
)
from scripts.emulator.docker_hosts import DockerHosts, container_name

ROOT = Path(__file__).resolve().parents[2]
TRAINING_IMAGE_DIR = ROOT / "training_image"
TRAINING_LOG_GROUP = "/aws/sagemaker/TrainingJobs"
PROCESSING_LOG_GROUP = "/aws/sagemaker/ProcessingJobs"


@dataclass
class JobOutcome:
    """What happened to one training job.

    Attributes:
        name: Training job name.
        status: ``Completed`` or ``Failed``.
        failure_reason: SageMaker's FailureReason (``output/failure`` of the container), if failed.
        model_artifact: S3 URI of ``model.tar.gz``, if completed.
        final_metrics: Last value of each metric the job's MetricDefinitions match in the log.
        seconds: Wall time of the training process.
        log_file: The container's stdout and stderr.
        base_dir: The local ``/opt/ml`` tree it ran in.
        kind: ``training`` or ``processing``.
        outputs: Processing output name -> the S3 URI its directory was uploaded to.
        exit_message: A processing job's ExitMessage (``output/message``).
    """

    name: str
    status: str
    failure_reason: str | None
    model_artifact: str | None
    final_metrics: dict[str, float]
    seconds: float
    log_file: Path
    base_dir: Path
    kind: str = "training"
    outputs: dict[str, str] = field(default_factory=dict)
    exit_message: str | None = None


def _split_s3(uri: str) -> tuple[str, str]:
    if not uri.startswith("s3://"):
        raise ValueError(f"not an S3 URI: {uri}")
    bucket, _, key = uri[len("s3://") :].partition("/")
    return bucket, key


def container_path(base: Path, path: str) -> Path:
    """Where a container path (``/opt/ml/processing/input/raw``) is in the local ``/opt/ml`` tree."""
    relative = path[len("/opt/ml/") :] if path.startswith("/opt/ml/") else path.lstrip("/")
    return base / relative


@dataclass
class ContainerRun:
    """How a container process ended.

    Attributes:
        code: Exit code; ``None`` when it ran past its time limit.
        stopped: A StopTrainingJob/StopProcessingJob ended it (SIGTERM, as SageMaker sends).
        ended: The runner ended it (stop, time limit, or another host of the job failed).
    """

    code: int | None
    stopped: bool = False
    ended: bool = False


@dataclass
class HostRun:
    """One emulated container of a job: SageMaker's instance ``host``.

    Attributes:
        host: ``algo-1`` .. ``algo-N``.
        base: This host's ``/opt/ml`` tree on this machine.
        log_file: The container's stdout and stderr.
        command: The process, already wrapped in its namespaces.
        env: Its environment.
        log_sink: Where its new lines go while it runs (the host's CloudWatch stream).
    """

    host: str
    base: Path
    log_file: Path
    command: list[str]
    env: Mapping[str, str]
    log_sink: Callable[[list[str]], None] | None = None


class LogTail:
    """New complete lines of a growing log file, for a log sink."""

    def __init__(self, path: Path, sink: Callable[[list[str]], None] | None) -> None:
        self.handle = path.open("r", encoding="utf-8", errors="replace")
        self.sink, self.pending = sink, ""

    def pump(self, final: bool = False) -> None:
        if self.sink is None:
            return
        self.pending += self.handle.read()
        *lines, self.pending = self.pending.split("\n")
        if final and self.pending:
            lines, self.pending = [*lines, self.pending], ""
        if lines:
            self.sink(lines)


def _run_hosts(
    hosts: list[HostRun],
    timeout: float,
    *,
    stop_requested: Callable[[], bool] = lambda: False,
) -> list[ContainerRun]:
    """Run every host's container until all exit, one fails, the time runs out or the job is stopped.

    As on SageMaker: a host that exits non-zero fails the job and the others are ended (SIGTERM,
    then SIGKILL); a stop request (the job turned Stopping) or the time limit ends them all.
    """
    deadline = time.monotonic() + timeout
    processes: list[subprocess.Popen[bytes]] = []
    logs, tails = [], []
    try:
        for host in hosts:
            host.log_file.parent.mkdir(parents=True, exist_ok=True)
            log = host.log_file.open("w", encoding="utf-8")
            logs.append(log)
            tails.append(LogTail(host.log_file, host.log_sink))
            processes.append(subprocess.Popen(host.command, cwd=ROOT, env=dict(host.env), stdout=log, stderr=subprocess.STDOUT))
        results: list[ContainerRun | None] = [None] * len(hosts)
        while any(r is None for r in results):
            time.sleep(0.5)
            for index, process in enumerate(processes):
                if results[index] is None and process.poll() is not None:
                    results[index] = ContainerRun(process.returncode)
            failed = any(r is not None and r.code != 0 for r in results)
            stopping = stop_requested()
            timed_out = time.monotonic() > deadline
            if failed or stopping or timed_out:
                for index, process in enumerate(processes):
                    if results[index] is None:
                        end_process(process)
                        results[index] = ContainerRun(None if timed_out and not stopping else process.returncode, stopped=stopping,
                                                      ended=True)
            for log, tail in zip(logs, tails):
                log.flush()
                tail.pump()
        for tail in tails:
            tail.pump(final=True)
        return [r for r in results if r is not None]
    finally:
        for process in processes:
            if process.poll() is None:
                end_process(process)
        for log in logs:
            log.close()
        for tail in tails:
            tail.handle.close()


@dataclass
class CloudWatchStream:
    """A job's log stream, as SageMaker writes it (``<log group>``, ``<job name>/algo-1-<epoch>``).

    Emulator gap: moto's SageMaker writes no logs; the runner sends the container's lines here so
    ``scripts.watch`` (and anyone reading CloudWatch Logs) sees them as on AWS.
    """

    client: Any
    group: str
    stream: str
    _ready: bool = False

    def __call__(self, lines: list[str]) -> None:
        from botocore.exceptions import ClientError

        if not self._ready:
            for call, kwargs in (
                (self.client.create_log_group, {"logGroupName": self.group}),
                (self.client.create_log_stream, {"logGroupName": self.group, "logStreamName": self.stream}),
            ):
                try:
                    call(**kwargs)
                except ClientError as err:
                    if err.response.get("Error", {}).get("Code") != "ResourceAlreadyExistsException":
                        raise
            self._ready = True
        now = int(time.time() * 1000)
        events = [{"timestamp": now, "message": line} for line in lines if line.strip()]
        for start in range(0, len(events), 1000):
            self.client.put_log_events(logGroupName=self.group, logStreamName=self.stream, logEvents=events[start : start + 1000])


def parse_final_metrics(log_text: str, definitions: list[Mapping[str, str]]) -> dict[str, float]:
    """Last value of each metric in ``log_text``, matched line by line with SageMaker's regexes."""
    found: dict[str, float] = {}
    compiled = [(d["Name"], re.compile(d["Regex"])) for d in definitions]
    for line in log_text.splitlines():
        for name, regex in compiled:
            match = regex.search(line)
            if match:
                try:
                    found[name] = float(match.group(1))
                except (IndexError, ValueError):
                    continue
    return found


@dataclass
class LocalSageMaker:
    """Runs training jobs that appear on the emulator, one at a time, in a background thread.

    Attributes:
        endpoint_url: The emulator.
        region: Region of the jobs.
        account: Account of the jobs (for moto's backend).
        work_dir: Where each job's ``/opt/ml`` tree and log are kept.
        timeout_seconds: Upper bound on one job's training process, below MaxRuntimeInSeconds.
        extra_env: Added to every job's environment (after the job's own Environment).
        on_event: Called with a one-line progress message (job picked up, finished...).
        docker: Run each container in Docker from the built image (``--containers``); ``None``
            plays the image with this machine's processes.
    """

    endpoint_url: str
    region: str
    account: str
    work_dir: Path
    timeout_seconds: float = 900
    extra_env: Mapping[str, str] = field(default_factory=dict)
    on_event: Callable[[str], None] = print
    docker: DockerHosts | None = None
    outcomes: dict[str, JobOutcome] = field(default_factory=dict)
    transforms: dict[str, Any] = field(default_factory=dict)
    _seen: set[str] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _client(self, service: str) -> Any:
        from scripts.emulator.server import client

        return client(service, endpoint_url=self.endpoint_url, region=self.region)

    def start(self) -> None:
        """Watch for new InProgress jobs and run each (as the SageMaker service would)."""
        from scripts.emulator.gaps import LOCAL_RUNNERS

        LOCAL_RUNNERS.update(("transform job", "hyper-parameter tuning job"))  # new ones now stay InProgress for this runner
        self._thread = threading.Thread(target=self._watch, name="local-sagemaker", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (a job already running finishes first)."""
        from scripts.emulator.gaps import LOCAL_RUNNERS

        LOCAL_RUNNERS.difference_update(("transform job", "hyper-parameter tuning job"))
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.timeout_seconds + 60)

    def _backend(self) -> Any:
        from moto.sagemaker.models import sagemaker_backends

        return sagemaker_backends[self.account][self.region]

    def _backend_jobs(self) -> dict[str, Any]:
        return self._backend().training_jobs

    def _watch(self) -> None:
        while not self._stop.is_set():
            pending = [
                ("training", name)
                for name, job in list(self._backend_jobs().items())
                if name not in self._seen and job.training_job_status == "InProgress"
            ] + [
                ("processing", name)
                for name, job in list(self._backend().processing_jobs.items())
                if name not in self._seen and job.processing_job_status == "InProgress"
            ] + [
                ("transform", name)
                for name, job in list(self._backend().transform_jobs.items())
                if name not in self._seen and job.transform_job_status == "InProgress"
            ]
            for name, tuning_job in list(self._backend().hyper_parameter_tuning_jobs.items()):
                if name not in self._seen and tuning_job.hyper_parameter_tuning_job_status == "InProgress":
                    # Its own thread: it waits for trials that this thread trains.
                    self._seen.add(name)
                    threading.Thread(target=self.run_tuning_job, args=(name,), name=f"local-tuner-{name}", daemon=True).start()
            for kind, name in pending:
                self._seen.add(name)
                try:
                    if kind == "training":
                        self.run_job(name)
                    elif kind == "transform":
                        self.run_transform_job(name)
                    else:
                        self.run_processing_job(name)
                except Exception as err:  # noqa: BLE001 - a runner bug fails the job, not the harness
                    reason = f"local runner error: {type(err).__name__}: {err}"
                    if kind == "training":
                        self._record(name, "Failed", failure_reason=reason)
                    else:
                        self._record_processing(name, "Failed", reason, None)
                    self.on_event(f"{kind} job {name}: local runner error: {err}")
            self._stop.wait(0.5)

    def wait(self, name: str, timeout: float) -> JobOutcome:
        """Block until the runner has recorded an outcome for ``name``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if name in self.outcomes:
                return self.outcomes[name]
            time.sleep(0.5)
        raise TimeoutError(f"job {name} did not finish within {timeout:.0f}s")

    # --- one job ---------------------------------------------------------------------------

    def run_job(self, name: str) -> JobOutcome:
        """Materialize, train, upload and record one job; returns its outcome."""
        sagemaker, s3 = self._client("sagemaker"), self._client("s3")
        job = sagemaker.describe_training_job(TrainingJobName=name)
        resources = job.get("ResourceConfig") or {}
        names = host_names(int(resources.get("InstanceCount") or 1))
        trees = self._host_trees(name, names)
        log_file = trees[0][1]
        refused = training_refusal(job)
        if refused:
            # What the runner cannot play fails the job in one line before anything is downloaded or run.
            return self._refuse(name, refused, log_file, trees[0][0])
        self.on_event(f"job {name}: SageMaker's part played locally; /opt/ml of {names[0]} at {trees[0][0]}")
        self._set_status(name, "InProgress", "Downloading", "Downloading input data (local runner)")
        for index, (host, (base, _)) in enumerate(zip(names, trees)):
            self._materialize(job, base, s3, names, host, index)

        self._set_status(name, "InProgress", "Training", "Training the model (local runner, CPU)")
        spec = job.get("AlgorithmSpecification") or {}
        timeout = min(self.timeout_seconds, float(job.get("StoppingCondition", {}).get("MaxRuntimeInSeconds", 1e9)))
        started = time.monotonic()
        try:
            runs = self._run_job_containers(
                job, TRAINING_LOG_GROUP, names, trees, (spec.get("ContainerEntrypoint"), spec.get("ContainerArguments")),
                self._container_env(job), timeout,
                lambda: self._backend_jobs()[name].training_job_status == "Stopping",
            )
        except ContainerRefused as err:
            return self._refuse(name, str(err), log_file, trees[0][0])
        seconds = time.monotonic() - started
        base = trees[0][0]
        log_text = log_file.read_text(encoding="utf-8", errors="replace")
        # Only the job's own MetricDefinitions, as SageMaker reads a custom image's log: a job that names
        # none (an SDK estimator without metric_definitions) ends with no FinalMetricDataList there too.
        definitions = spec.get("MetricDefinitions") or []
        metrics = parse_final_metrics(log_text, definitions)

        model_dir = base / "model"
        failed = _first_failure(names, trees, runs, "failure")
        # The job's own MaxRuntimeInSeconds (not the runner's cap) ran out: SageMaker stops the job
        # (SIGTERM, then its grace) and records it Stopped, MaxRuntimeExceeded, keeping what it saved.
        limit = float((job.get("StoppingCondition") or {}).get("MaxRuntimeInSeconds") or math.inf)
        own_limit = (
            limit <= self.timeout_seconds
            and any(run.code is None and not run.stopped for run in runs)
            and not any(run.code not in (0, None) and not run.ended for run in runs)  # a host failed first
        )
        secondary = "MaxRuntimeExceeded" if own_limit else None
        if any(run.stopped for run in runs) or own_limit:
            # As SageMaker does on a stop: the model the job saved so far is uploaded.
            saved = model_dir.is_dir() and any(model_dir.iterdir())
            artifact = self._after_end(name, lambda: self._upload_outputs(job, base, s3) if saved else self._upload_checkpoints(job, base, s3))
            outcome = JobOutcome(name, "Stopped", None, artifact, metrics, seconds, log_file, base)
        elif failed is None and model_dir.is_dir() and any(model_dir.iterdir()):
            self._set_status(name, "InProgress", "Uploading", "Uploading generated training model (local runner)")
            artifact = self._upload_outputs(job, base, s3)
            outcome = JobOutcome(name, "Completed", None, artifact, metrics, seconds, log_file, base)
        else:
            if failed is None:
                reason = "AlgorithmError: the container exited 0 but wrote nothing to /opt/ml/model"
            else:
                reason = _failure_reason(failed, timeout, len(names), prefix="")
            self._after_end(name, lambda: self._upload_checkpoints(job, base, s3))
            outcome = JobOutcome(name, "Failed", reason[:1024], None, metrics, seconds, log_file, base)
        self._record(name, outcome.status, outcome.failure_reason, outcome.model_artifact, metrics, seconds, secondary=secondary)
        self.outcomes[name] = outcome
        self.on_event(f"job {name}: {outcome.status}{f' ({secondary})' if secondary else ''} after {seconds:.1f}s of training")
        return outcome

    def _after_end(self, name: str, upload: Callable[[], Any]) -> Any:
        """``upload()`` after a job stopped or failed: an upload error is said, and the job keeps its own end."""
        try:
            return upload()
        except Exception as err:  # noqa: BLE001 - the job's outcome is already decided
            self.on_event(f"job {name}: could not upload what it saved: {type(err).__name__}: {err}")
            return None

    def _refuse(self, name: str, why: str, log_file: Path, base: Path) -> JobOutcome:
        """Fail training job ``name`` with the one-line ``ClientError: why``; nothing (more) runs."""
        outcome = JobOutcome(name, "Failed", f"ClientError: {why}"[:1024], None, {}, 0.0, log_file, base)
        self._record(name, outcome.status, outcome.failure_reason)
        self.outcomes[name] = outcome
        self.on_event(f"job {name}: refused: {why}")
        return outcome

    def _host_trees(self, name: str, hosts: list[str]) -> list[tuple[Path, Path]]:
        """Each host's ``/opt/ml`` tree and log file (``algo-1``'s where a one-host job keeps them)."""
        job_dir = self.work_dir / name
        return [
            (job_dir / "opt-ml", job_dir / "container.log") if index == 0 else (job_dir / host / "opt-ml", job_dir / host / "container.log")
            for index, host in enumerate(hosts)
        ]

    def _run_job_containers(
        self,
        job: Mapping[str, Any],
        log_group: str,
        names: list[str],
        trees: list[tuple[Path, Path]],
        request: tuple[list[str] | None, list[str] | None],
        env: Mapping[str, str],
        timeout: float,
        stop_requested: Callable[[], bool],
    ) -> list[ContainerRun]:
        """One emulated container per host, each with its tree at ``/opt/ml`` (and its own network for several).

        ``request`` is the job's ``(ContainerEntrypoint, ContainerArguments)``.
        """
        job_name = str(job.get("TrainingJobName") or job.get("ProcessingJobName"))
        stamp = int(time.time())
        with self._host_commands(job_name, names, request, env) as command_for:
            hosts = [
                HostRun(host, base, log_file, *command_for(host, base), CloudWatchStream(self._client("logs"), log_group, f"{job_name}/{host}-{stamp}"))
                for host, (base, log_file) in zip(names, trees)
            ]
            return _run_hosts(hosts, timeout, stop_requested=stop_requested)

    @contextlib.contextmanager
    def _host_commands(
        self, job_name: str, names: list[str], request: tuple[list[str] | None, list[str] | None], env: Mapping[str, str]
    ) -> Iterator[Callable[[str, Path], tuple[list[str], Mapping[str, str]]]]:
        """``(host, its /opt/ml tree) -> (command, its environment)`` while the job's network is up.

        Played (default): a namespaced process with the image's environment, a network namespace
        per host for several. In Docker: ``docker run`` of the built image with the job's
        environment inside the container, a Docker network of the job's own for several; every
        container is removed when the block ends (a killed docker CLI leaves its container).
        """
        docker = self.docker
        if docker is None:
            network = JobNetwork(names, self.work_dir / job_name / "network") if len(names) > 1 else None
            command = container_command(*request)
            with network if network is not None else contextlib.nullcontext():
                yield lambda host, base: (namespaced(command, base, network=network, host=host), env)
            return
        container_env = {**env, "AWS_ENDPOINT_URL": docker.endpoint_url}
        containers = {host: container_name(job_name, host) for host in names}
        try:
            with docker.network(job_name, len(names)) as docker_network:
                yield lambda host, base: (
                    docker.job_command(containers[host], *request, opt_ml=base, env=container_env, network=docker_network, host=host),
                    os.environ,
                )
        finally:
            docker.remove(*containers.values())

    def _materialize(self, job: Mapping[str, Any], base: Path, s3: Any, hosts: list[str], host: str, index: int) -> None:
        config_dir = base / "input" / "config"
        config_dir.mkdir(parents=True, exist_ok=True)
        for sub in ("model", "output", "checkpoints"):
            (base / sub).mkdir(parents=True, exist_ok=True)
        (config_dir / "hyperparameters.json").write_text(json.dumps(job.get("HyperParameters", {}), indent=2))
        resources = job.get("ResourceConfig") or {}
        (config_dir / "resourceconfig.json").write_text(json.dumps(_resource_config(hosts, host, resources.get("InstanceType")), indent=2))
        channels: dict[str, Any] = {}
        for channel in job.get("InputDataConfig", []):
            name = channel["ChannelName"]
            source = channel["DataSource"]["S3DataSource"]
            distribution = source.get("S3DataDistributionType", "FullyReplicated")
            channels[name] = {
                "TrainingInputMode": channel.get("InputMode", job["AlgorithmSpecification"].get("TrainingInputMode", "File")),
                "S3DistributionType": distribution,
                "RecordWrapperType": channel.get("RecordWrapperType", "None"),
                **({"ContentType": channel["ContentType"]} if channel.get("ContentType") else {}),
            }
            shard = (index, len(hosts)) if distribution == "ShardedByS3Key" else None
            self._download_prefix(s3, source["S3Uri"], base / "input" / "data" / name, shard=shard)
        (config_dir / "inputdataconfig.json").write_text(json.dumps(channels, indent=2))
        checkpoint_uri = (job.get("CheckpointConfig") or {}).get("S3Uri")
        if checkpoint_uri:
            # SageMaker restores the checkpoint prefix before training starts (spot restarts).
            self._download_prefix(s3, checkpoint_uri, base / "checkpoints")

    @staticmethod
    def _download_prefix(s3: Any, uri: str, target: Path, shard: tuple[int, int] | None = None) -> None:
        """Every object under ``uri`` into ``target``; with ``shard`` (index, count) only that host's share.

        ShardedByS3Key gives each host a disjoint share of the keys, as SageMaker does.
        """
        bucket, prefix = _split_s3(uri)
        target.mkdir(parents=True, exist_ok=True)
        keys = [
            item["Key"]
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
            for item in page.get("Contents", [])
            if not item["Key"].endswith("/")
        ]
        if shard is not None:
            keys = sorted(keys)[shard[0] :: shard[1]]
        for key in keys:
            relative = key[len(prefix) :].lstrip("/") if prefix else key
            destination = target / (relative or Path(key).name)
            destination.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(bucket, key, str(destination))

    def _container_env(self, job: Mapping[str, Any]) -> dict[str, str]:
        return self._environment(job, {"TRAINING_JOB_NAME": job["TrainingJobName"], "TRAINING_JOB_ARN": job["TrainingJobArn"]})

    def _environment(self, job: Mapping[str, Any], extra: Mapping[str, str]) -> dict[str, str]:
        """The container's environment: the image's, the job's Environment, what SageMaker adds.

        The job's tree is at ``/opt/ml`` in the container, so no path here points outside it. In
        Docker the image brings its own ``ENV``: only the job's and SageMaker's part is given.
        """
        env = {} if self.docker is not None else image_environment({
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("SM_", "TRAINING_", "TF_CONFIG", "PROCESSING_", "SAGEMAKER_", "CHECKPOINT_DIR", "PYTHONPATH"))
        })
        env.update(job.get("Environment") or {})
        env.update(
            {
                **extra,
                # The emulator has no GPU: the image, which fails hard when it sees fewer GPUs
                # than the instance type has, is told to expect none and runs on the CPU.
                "EXPECTED_GPU_COUNT": "0",
                "CUDA_VISIBLE_DEVICES": "",
                "TF_CPP_MIN_LOG_LEVEL": "2",
                "PYTHONUNBUFFERED": "1",
                # SageMaker gives a container the job role's credentials for AWS calls (a job
                # without network isolation downloads an s3:// sagemaker_submit_directory with
                # them); here AWS is the emulator, with its region and any credentials.
                "AWS_ENDPOINT_URL": self.endpoint_url,
                "AWS_REGION": self.region,
                "AWS_DEFAULT_REGION": self.region,
                "AWS_ACCESS_KEY_ID": os.environ.get("AWS_ACCESS_KEY_ID", "emulator"),
                "AWS_SECRET_ACCESS_KEY": os.environ.get("AWS_SECRET_ACCESS_KEY", "emulator"),
            }
        )
        env.update(self.extra_env)
        if _network_isolated(job):
            # "No AWS credentials are made available to the container runtime environment" of a job with
            # network isolation (its code and data arrive as channels): a script that calls AWS fails
            # here as it would there, at once (no instance metadata to wait for), not only on AWS.
            own = job.get("Environment") or {}  # what the job sets itself, SageMaker passes through
            for variable in [v for v in env if v.startswith(ISOLATED_AWS_PREFIXES) and v not in ("AWS_REGION", "AWS_DEFAULT_REGION", *own)]:
                del env[variable]
            env.update({"AWS_EC2_METADATA_DISABLED": "true", "AWS_SHARED_CREDENTIALS_FILE": os.devnull, "AWS_CONFIG_FILE": os.devnull})
        return env

    def _upload_outputs(self, job: Mapping[str, Any], base: Path, s3: Any) -> str:
        output = job["OutputDataConfig"]
        bucket, prefix = _split_s3(output["S3OutputPath"].rstrip("/") + "/")
        key = f"{prefix}{job['TrainingJobName']}/output/model.tar.gz"
        extra = _kms_upload_arguments(output.get("KmsKeyId"))
        archive = base.parent / "model.tar.gz"
        with tarfile.open(archive, "w:gz") as tar:
            for item in sorted((base / "model").iterdir()):
                tar.add(item, arcname=item.name)
        s3.upload_file(str(archive), bucket, key, ExtraArgs=extra)
        data_dir = base / "output" / "data"
        if data_dir.is_dir() and any(data_dir.iterdir()):
            data_archive = base.parent / "output.tar.gz"
            with tarfile.open(data_archive, "w:gz") as tar:
                for item in sorted(data_dir.iterdir()):
                    tar.add(item, arcname=item.name)
            s3.upload_file(str(data_archive), bucket, f"{prefix}{job['TrainingJobName']}/output/output.tar.gz", ExtraArgs=extra)
        self._upload_checkpoints(job, base, s3)
        return f"s3://{bucket}/{key}"

    def _upload_checkpoints(self, job: Mapping[str, Any], base: Path, s3: Any) -> None:
        """``/opt/ml/checkpoints`` to ``CheckpointConfig.S3Uri``. SageMaker syncs it while the job runs,
        so a failed or stopped job's checkpoints are in S3 too (what a spot restart or a rerun resumes
        from): the runner uploads them at every end."""
        checkpoint_uri = (job.get("CheckpointConfig") or {}).get("S3Uri")
        if not checkpoint_uri:
            return
        output = job["OutputDataConfig"]
        extra = _kms_upload_arguments(output.get("KmsKeyId"))
        ck_bucket, ck_prefix = _split_s3(checkpoint_uri.rstrip("/") + "/")
        for path in sorted(p for p in (base / "checkpoints").rglob("*") if p.is_file()):
            s3.upload_file(str(path), ck_bucket, ck_prefix + path.relative_to(base / "checkpoints").as_posix(), ExtraArgs=extra)

    # --- one transform job -----------------------------------------------------------------

    def run_transform_job(self, name: str) -> Any:
        """Play one transform job (:mod:`scripts.emulator.transform`) and record its outcome; any
        failure, the runner's own included, fails the job with one line."""
        from scripts.emulator import transform

        self.on_event(f"transform job {name}: SageMaker batch transform played locally")
        started = time.monotonic()
        try:
            outcome = transform.run_transform_job(
                name, sagemaker=self._client("sagemaker"), s3=self._client("s3"),
                log_sink=CloudWatchStream(self._client("logs"), transform.TRANSFORM_LOG_GROUP, f"{name}/algo-1-{int(time.time())}"),
                endpoint_url=self.endpoint_url, region=self.region, work_dir=self.work_dir / "transform-jobs",
                docker=self.docker, on_event=self.on_event,
                stop_requested=lambda: self._backend().transform_jobs[name].transform_job_status == "Stopping",
            )
        except Exception as err:  # noqa: BLE001 - every failure is the job's, in one line
            reason = str(err) if isinstance(err, transform.TransformFailed) else f"local runner error: {type(err).__name__}: {err}"
            outcome = transform.TransformOutcome(name, "Failed", reason, [], 0, time.monotonic() - started, None)
        transform.record(self._backend().transform_jobs[name], outcome)
        self.transforms[name] = outcome
        self.on_event(f"transform job {name}: {outcome.status} after {outcome.seconds:.1f}s ({outcome.records} records)"
                      + (f": {outcome.failure_reason}" if outcome.failure_reason else ""))
        return outcome

    # --- one tuning job --------------------------------------------------------------------

    def run_tuning_job(self, name: str) -> str:
        """Play one tuning job (:mod:`scripts.emulator.tuning`): its trials are training jobs this
        runner trains; any failure of the tuner itself fails the tuning job with one line."""
        from scripts.emulator import tuning

        backend_job = self._backend().hyper_parameter_tuning_jobs[name]
        self.on_event(f"tuning job {name}: SageMaker automatic model tuning played locally")
        trials: list[Any] = []
        refused = None
        stopping = lambda: backend_job.hyper_parameter_tuning_job_status == "Stopping" or self._stop.is_set()  # noqa: E731
        try:
            trials = tuning.run_tuning_job(name, sagemaker=self._client("sagemaker"), backend_job=backend_job, on_event=self.on_event,
                                           stop_requested=stopping)
        except Exception as err:  # noqa: BLE001 - every failure is the tuning job's, in one line
            refused = str(err) if isinstance(err, tuning.TuningRefused) else f"local tuner error: {type(err).__name__}: {err}"
        status = tuning.record_end(backend_job, trials, refused, stopped=stopping())
        self.on_event(f"tuning job {name}: {status}" + (f": {backend_job.failure_reason}" if backend_job.failure_reason else ""))
        return status

    # --- one processing job ----------------------------------------------------------------

    def run_processing_job(self, name: str) -> JobOutcome:
        """Materialize, run the container command, upload the outputs and record one processing job."""
        from scripts.emulator.states import json_safe

        sagemaker, s3 = self._client("sagemaker"), self._client("s3")
        job = json_safe(sagemaker.describe_processing_job(ProcessingJobName=name))
        cluster = (job.get("ProcessingResources") or {}).get("ClusterConfig") or {}
        names = host_names(int(cluster.get("InstanceCount") or 1))
        trees = self._host_trees(name, names)
        base, log_file = trees[0]
        self.on_event(f"processing job {name}: SageMaker Processing played locally; /opt/ml of {names[0]} at {base}")
        self._mark_processing_started(name)
        outputs = (job.get("ProcessingOutputConfig") or {}).get("Outputs") or []
        # What the runner cannot play fails the job in one line before anything is downloaded or run.
        refused = processing_refusal(job)
        if not refused:
            for index, (host, (tree, _)) in enumerate(zip(names, trees)):
                self._materialize_processing(job, tree, s3, names, host, index)

        app = job.get("AppSpecification") or {}
        entrypoint, arguments = app.get("ContainerEntrypoint"), app.get("ContainerArguments")
        env = self._environment(job, {"PROCESSING_JOB_NAME": name, "PROCESSING_JOB_ARN": job["ProcessingJobArn"]})
        timeout = min(self.timeout_seconds, float((job.get("StoppingCondition") or {}).get("MaxRuntimeInSeconds", 1e9)))
        started = time.monotonic()
        runs: list[ContainerRun] = []
        if not refused and not entrypoint and not arguments:
            # The platform image's CMD is "train": a processing job must say what to run.
            refused = "AppSpecification has no ContainerEntrypoint or ContainerArguments to run"
        elif not refused:
            try:
                runs = self._run_job_containers(
                    job, PROCESSING_LOG_GROUP, names, trees, (entrypoint, arguments), env, timeout,
                    lambda: self._backend().processing_jobs[name].processing_job_status == "Stopping",
                )
            except ContainerRefused as err:
                refused = str(err)
        seconds = time.monotonic() - started
        message_file = base / "output" / "message"
        message = message_file.read_text(encoding="utf-8", errors="replace").strip() if message_file.is_file() else None
        failed = _first_failure(names, trees, runs, "message")
        if failed is not None and failed.message:
            message = failed.message
        uploaded: dict[str, str] = {}
        if refused:
            outcome = JobOutcome(name, "Failed", f"ClientError: {refused}"[:1024], None, {}, seconds, log_file, base, "processing")
        elif any(run.stopped for run in runs):
            outcome = JobOutcome(name, "Stopped", None, None, {}, seconds, log_file, base, "processing", {}, message)
        elif failed is None:
            key_id = (job.get("ProcessingOutputConfig") or {}).get("KmsKeyId")
            extra = _kms_upload_arguments(key_id)
            for item in outputs:
                target = item["S3Output"]["S3Uri"].rstrip("/") + "/"
                bucket, prefix = _split_s3(target)
                # Every host uploads its own output folder to the same S3Uri, as SageMaker does.
                for tree, _ in trees:
                    local = container_path(tree, item["S3Output"]["LocalPath"])
                    for path in sorted(p for p in local.rglob("*") if p.is_file()):
                        s3.upload_file(str(path), bucket, prefix + path.relative_to(local).as_posix(), ExtraArgs=extra)
                uploaded[item["OutputName"]] = target
            outcome = JobOutcome(name, "Completed", None, None, {}, seconds, log_file, base, "processing", uploaded, message)
        else:
            reason = _failure_reason(failed, timeout, len(names), prefix="AlgorithmError: ", what="processing")
            outcome = JobOutcome(name, "Failed", reason[:1024], None, {}, seconds, log_file, base, "processing", {}, message)
        self._record_processing(name, outcome.status, outcome.failure_reason, message)
        self.outcomes[name] = outcome
        self.on_event(f"processing job {name}: {outcome.status} after {seconds:.1f}s")
        return outcome

    def _materialize_processing(self, job: Mapping[str, Any], base: Path, s3: Any, hosts: list[str], host: str, index: int) -> None:
        (base / "config").mkdir(parents=True, exist_ok=True)
        (base / "output").mkdir(parents=True, exist_ok=True)
        (base / "config" / "processingjobconfig.json").write_text(json.dumps(job, indent=2))
        cluster = (job.get("ProcessingResources") or {}).get("ClusterConfig") or {}
        (base / "config" / "resourceconfig.json").write_text(json.dumps(_resource_config(hosts, host, cluster.get("InstanceType")), indent=2))
        for item in job.get("ProcessingInputs") or []:
            source = item.get("S3Input")
            if not source:
                raise ValueError(f"input {item.get('InputName')}: only S3Input is played by the local runner")
            shard = (index, len(hosts)) if source.get("S3DataDistributionType") == "ShardedByS3Key" else None
            self._download_prefix(s3, source["S3Uri"], container_path(base, source["LocalPath"]), shard=shard)
        for item in (job.get("ProcessingOutputConfig") or {}).get("Outputs") or []:
            container_path(base, item["S3Output"]["LocalPath"]).mkdir(parents=True, exist_ok=True)

    def _mark_processing_started(self, name: str) -> None:
        from moto.core.utils import utcnow

        job = self._backend().processing_jobs[name]
        job.processing_start_time = job.last_modified_time = utcnow()

    def _record_processing(self, name: str, status: str, failure_reason: str | None, exit_message: str | None) -> None:
        from moto.core.utils import utcnow

        job = self._backend().processing_jobs[name]
        now = utcnow()
        job.processing_job_status = status
        job.processing_end_time = job.last_modified_time = now
        if failure_reason:
            job.failure_reason = failure_reason
        if exit_message:
            # SageMaker's ExitMessage: what the container wrote to /opt/ml/output/message.
            job.exit_message = exit_message[:1024]

    # --- recording on the emulator ---------------------------------------------------------

    def _set_status(self, name: str, status: str, secondary: str, message: str) -> None:
        # The runner owns the in-process moto server, so it records progress straight on the
        # job, as SageMaker's control plane would; DescribeTrainingJob then shows it.
        from moto.core.utils import utcnow

        job = self._backend_jobs()[name]
        now = utcnow()
        transitions = list(job.secondary_status_transitions or [])
        if transitions and "EndTime" not in transitions[-1]:
            transitions[-1] = {**transitions[-1], "EndTime": now}
        transitions.append({"Status": secondary, "StartTime": now, "StatusMessage": message})
        job.secondary_status_transitions = transitions
        job.training_job_status, job.secondary_status = status, secondary
        job.last_modified_time = now
        if secondary == "Training" and job.training_start_time is None:
            job.training_start_time = now

    def _record(
        self,
        name: str,
        status: str,
        failure_reason: str | None = None,
        model_artifact: str | None = None,
        metrics: Mapping[str, float] | None = None,
        seconds: float | None = None,
        *,
        secondary: str | None = None,
    ) -> None:
        from moto.core.utils import utcnow

        message = {"Completed": "Training job completed", "Stopped": "Training job stopped (StopTrainingJob)"}.get(status)
        if secondary == "MaxRuntimeExceeded":
            message = "Training job stopped: its MaxRuntimeInSeconds ran out"
        self._set_status(name, status, secondary or status, message or failure_reason or "failed")
        job = self._backend_jobs()[name]
        now = utcnow()
        transitions = list(job.secondary_status_transitions)
        transitions[-1] = {**transitions[-1], "EndTime": now}
        job.secondary_status_transitions = transitions
        job.training_end_time = now
        if failure_reason:
            job.failure_reason = failure_reason
        if model_artifact:
            job.model_artifacts = {"S3ModelArtifacts": model_artifact}
        job.final_metric_data_list = [
            {"MetricName": k, "Value": v, "Timestamp": now} for k, v in (metrics or {}).items()
        ] or None
        if seconds is not None:
            job.training_time_in_seconds = max(1, int(seconds))
            job.billable_time_in_seconds = max(1, int(seconds))
        if status == "Completed" and int((job.resource_config or {}).get("KeepAlivePeriodInSeconds") or 0) > 0:
            # SageMaker keeps a completed job's instances as a warm pool, billing, for the period
            # (scripts.emulator.gaps reports it and ends it).
            job.warm_pool_status = {"Status": "Available", "ResourceRetainedBillableTimeInSeconds": 0}


ISOLATED_AWS_PREFIXES = ("AWS_",)
"""What a network-isolated job's container does not get: every ``AWS_*`` variable but the region
(credentials, a profile or credentials file, the emulator's endpoint)."""


def _kms_upload_arguments(key_id: str | None) -> dict[str, str]:
    """``ExtraArgs`` of an upload encrypted with the job's ``KmsKeyId`` (none without one)."""
    return {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": key_id} if key_id else {}


def _network_isolated(job: Mapping[str, Any]) -> bool:
    """The job asked for network isolation (training: ``EnableNetworkIsolation``; processing:
    ``NetworkConfig.EnableNetworkIsolation``)."""
    return bool(job.get("EnableNetworkIsolation") or (job.get("NetworkConfig") or {}).get("EnableNetworkIsolation"))


# --- what the runners cannot play -------------------------------------------------------------


def _not_played(field: str, value: Any, runner: str, played: str) -> str:
    return f"{field} {value} is not played by the emulator's {runner} runner ({played})"


def _refusal(refusals: list[str]) -> str | None:
    return "; ".join(refusals) + "; nothing ran." if refusals else None


def training_refusal(job: Mapping[str, Any]) -> str | None:
    """One line naming each field (and its value) of a DescribeTrainingJob answer that the training
    runner cannot play, or None: such a job fails before anything is downloaded or run, never runs
    another way (one host, files for a pipe, an uncompressed model packed anyway)."""

    def no(field: str, value: Any, played: str) -> None:
        refusals.append(_not_played(field, value, "training", played))

    refusals: list[str] = []
    spec = job.get("AlgorithmSpecification") or {}
    if spec.get("AlgorithmName"):
        no("AlgorithmSpecification.AlgorithmName", spec["AlgorithmName"], "TrainingImage, the platform's, is")
    else:
        image = image_not_played("AlgorithmSpecification.TrainingImage", spec.get("TrainingImage"), job.get("TrainingJobArn", ""), "training")
        refusals.extend([image] if image else [])
    resources = job.get("ResourceConfig") or {}
    groups = resources.get("InstanceGroups")
    if groups:
        listed = ", ".join(f"{g.get('InstanceGroupName')}: {g.get('InstanceCount')} x {g.get('InstanceType')}" for g in groups)
        no("ResourceConfig.InstanceGroups", f"[{listed}]", "one homogeneous cluster, InstanceType and InstanceCount, is")
    for channel in job.get("InputDataConfig") or []:
        where = f"InputDataConfig[{channel.get('ChannelName')}]"
        source = channel.get("DataSource") or {}
        s3 = source.get("S3DataSource")
        if not s3:
            fs = source.get("FileSystemDataSource")
            if fs is not None:
                value = f"{fs.get('FileSystemType')} {fs.get('FileSystemId')}:{fs.get('DirectoryPath')} ({fs.get('FileSystemAccessMode')})"
                no(f"{where}.DataSource.FileSystemDataSource", value, "S3DataSource is")
            else:
                no(f"{where}.DataSource", "/".join(sorted(source)) or "{}", "S3DataSource is")
        elif (s3.get("S3DataType") or "S3Prefix") != "S3Prefix":
            no(f"{where}.DataSource.S3DataSource.S3DataType", s3["S3DataType"], "S3Prefix is")
        if channel.get("InputMode"):
            mode_field, mode = f"{where}.InputMode", channel["InputMode"]
        else:
            mode_field = f"AlgorithmSpecification.TrainingInputMode (channel {channel.get('ChannelName')})"
            mode = spec.get("TrainingInputMode") or "File"
        if mode not in ("File", "FastFile"):
            no(mode_field, mode, "File and FastFile are, as files under /opt/ml/input/data")
        if (channel.get("CompressionType") or "None") != "None":
            no(f"{where}.CompressionType", channel["CompressionType"], "None is")
        if (channel.get("RecordWrapperType") or "None") != "None":
            no(f"{where}.RecordWrapperType", channel["RecordWrapperType"], "None is")
    compression = (job.get("OutputDataConfig") or {}).get("CompressionType") or "GZIP"
    if compression != "GZIP":
        no("OutputDataConfig.CompressionType", compression, "GZIP is: the model is uploaded as model.tar.gz")
    checkpoint_path = (job.get("CheckpointConfig") or {}).get("LocalPath") or "/opt/ml/checkpoints"
    if checkpoint_path.rstrip("/") != "/opt/ml/checkpoints":
        no("CheckpointConfig.LocalPath", checkpoint_path, "/opt/ml/checkpoints is, synced both ways")
    tensorboard = job.get("TensorBoardOutputConfig")
    if tensorboard:
        local = tensorboard.get("LocalPath") or "/opt/ml/output/tensorboard"
        no("TensorBoardOutputConfig", tensorboard.get("S3OutputPath"), f"nothing uploads {local}")
    return _refusal(refusals)


def processing_refusal(job: Mapping[str, Any]) -> str | None:
    """One line naming each field (and its value) of a DescribeProcessingJob answer that the
    processing runner cannot play, or None (as :func:`training_refusal`)."""

    def no(field: str, value: Any, played: str) -> None:
        refusals.append(_not_played(field, value, "processing", played))

    refusals: list[str] = []
    app = job.get("AppSpecification") or {}
    image = image_not_played("AppSpecification.ImageUri", app.get("ImageUri"), job.get("ProcessingJobArn", ""), "processing")
    refusals.extend([image] if image else [])
    for item in job.get("ProcessingInputs") or []:
        where = f"ProcessingInputs[{item.get('InputName')}]"
        source = item.get("S3Input")
        if not source:
            no(f"{where}", "/".join(sorted(k for k in item if k not in ("InputName", "AppManaged"))) or "{}", "S3Input is")
            continue
        if (source.get("S3DataType") or "S3Prefix") != "S3Prefix":
            no(f"{where}.S3Input.S3DataType", source["S3DataType"], "S3Prefix is")
        if (source.get("S3InputMode") or "File") != "File":
            no(f"{where}.S3Input.S3InputMode", source["S3InputMode"], "File is")
        if (source.get("S3CompressionType") or "None") != "None":
            no(f"{where}.S3Input.S3CompressionType", source["S3CompressionType"], "None is")
    for item in (job.get("ProcessingOutputConfig") or {}).get("Outputs") or []:
        where = f"ProcessingOutputConfig.Outputs[{item.get('OutputName')}]"
        target = item.get("S3Output")
        if not target:
            no(f"{where}", "/".join(sorted(k for k in item if k not in ("OutputName", "AppManaged"))) or "{}", "S3Output is")
        elif (target.get("S3UploadMode") or "EndOfJob") != "EndOfJob":
            no(f"{where}.S3Output.S3UploadMode", target["S3UploadMode"], "EndOfJob is: outputs are uploaded when the job ends")
    return _refusal(refusals)


def _resource_config(hosts: list[str], host: str, instance_type: str | None) -> dict[str, Any]:
    """``resourceconfig.json`` for one host, with the fields SageMaker writes."""
    instance_type = instance_type or "ml.m5.xlarge"
    return {
        "current_host": host,
        "current_instance_type": instance_type,
        "current_group_name": "homogeneousCluster",
        "hosts": hosts,
        "instance_groups": [{"instance_group_name": "homogeneousCluster", "instance_type": instance_type, "hosts": hosts}],
        "network_interface_name": "eth0",
    }


@dataclass
class HostFailure:
    """The host whose container decided a failed job, and what it left."""

    host: str
    run: ContainerRun
    message: str | None
    log_file: Path


def _first_failure(names: list[str], trees: list[tuple[Path, Path]], runs: list[ContainerRun], failure_file: str) -> HostFailure | None:
    """The host that failed the job (it exited non-zero or ran out of time), its failure file read.

    A host the runner ended because another failed is not the cause; a stopped job has no failure.
    """
    if any(run.stopped for run in runs):
        return None
    candidates = [i for i, run in enumerate(runs) if not run.ended and run.code != 0] or [i for i, run in enumerate(runs) if run.code != 0]
    if not candidates:
        return None
    index = candidates[0]
    path = trees[index][0] / "output" / failure_file
    message = path.read_text(encoding="utf-8", errors="replace").strip() if path.is_file() else None
    return HostFailure(names[index], runs[index], message or None, trees[index][1])


def _failure_reason(failed: HostFailure, timeout: float, host_count: int, *, prefix: str, what: str = "training") -> str:
    """SageMaker's FailureReason: the failure file when the container wrote one, else its exit."""
    where = f"{failed.host}: " if host_count > 1 else ""
    if failed.run.code is None:
        return f"MaxRuntimeExceeded: {what} stopped after {timeout:.0f}s (local runner limit)"
    if failed.message:
        return f"{prefix}{where}{failed.message}"
    return f"AlgorithmError: {where}the container exited {failed.run.code}; see {failed.log_file}"

