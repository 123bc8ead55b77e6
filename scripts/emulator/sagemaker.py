"""A local runner that plays SageMaker's part for training jobs created on the emulator.

The emulator accepts CreateTrainingJob but runs no containers. For each job this runner does
what SageMaker does around the training image, in the same order:

1. reads the job's description (DescribeTrainingJob), as the service would read the request;
2. lays out the container's ``/opt/ml`` tree under a temporary base directory:
   ``input/config/hyperparameters.json``, ``resourceconfig.json``, ``inputdataconfig.json``,
   and every channel downloaded from its S3 prefix into ``input/data/<channel>/`` (File mode);
3. runs the real entrypoint (``python -m trainer`` from ``training_image/``) with
   ``SAGEMAKER_BASE_DIR`` pointing at that tree and the job's Environment;
4. on success packs ``model/`` into ``model.tar.gz`` and uploads it to
   ``<S3OutputPath>/<job name>/output/model.tar.gz`` (and checkpoints to the CheckpointConfig
   URI), encrypted with the job's output KMS key;
5. records the outcome on the job: status, FailureReason (from ``output/failure``),
   ModelArtifacts, and FinalMetricDataList parsed from the log with the job's
   MetricDefinitions, as SageMaker parses CloudWatch logs.

While the container runs, its lines go to the job's CloudWatch Logs stream
(``/aws/sagemaker/TrainingJobs`` or ``/aws/sagemaker/ProcessingJobs``, ``<job>/algo-1-<epoch>``),
and a StopTrainingJob/StopProcessingJob (the job turned Stopping; see ``gaps._stop_jobs``) ends it
with SIGTERM, as SageMaker does, and records it Stopped.

Processing jobs are played the same way (:meth:`LocalSageMaker.run_processing_job`): each S3
input downloaded to its ``LocalPath`` (``/opt/ml/processing/input/<name>``),
``config/processingjobconfig.json`` (the DescribeProcessingJob response) and
``config/resourceconfig.json`` written, the job's ``ContainerEntrypoint`` + ``ContainerArguments``
run from ``training_image/`` (``python3`` is this interpreter), each output directory uploaded
to its ``S3Uri`` with ``ProcessingOutputConfig.KmsKeyId``, and the status, ``FailureReason`` and
``ExitMessage`` (``<base>/output/message``, the processing mode's failure file) recorded.

Emulator only: against a real account SageMaker does all of this itself, in the container.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

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
    """

    code: int | None
    stopped: bool = False


def _run_container(
    command: list[str],
    env: Mapping[str, str],
    log_file: Path,
    timeout: float,
    *,
    stop_requested: Callable[[], bool] = lambda: False,
    log_sink: Callable[[list[str]], None] | None = None,
) -> ContainerRun:
    """Run the image's command from ``training_image/`` until it exits, times out or is stopped.

    While it runs, new log lines go to ``log_sink`` (the job's CloudWatch stream) and a stop
    request (the job's status turned Stopping) ends it as SageMaker does: SIGTERM, then SIGKILL.
    """
    log_file.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout
    with log_file.open("w", encoding="utf-8") as log, log_file.open("r", encoding="utf-8", errors="replace") as tail:
        process = subprocess.Popen(command, cwd=TRAINING_IMAGE_DIR, env=dict(env), stdout=log, stderr=subprocess.STDOUT)
        result: ContainerRun | None = None
        pending = ""
        while result is None:
            try:
                code = process.wait(timeout=0.5)
                result = ContainerRun(code)
            except subprocess.TimeoutExpired:
                if stop_requested():
                    _end(process)
                    result = ContainerRun(process.returncode, stopped=True)
                elif time.monotonic() > deadline:
                    _end(process)
                    result = ContainerRun(None)
            if log_sink is not None:
                log.flush()
                pending += tail.read()
                *lines, pending = pending.split("\n")
                if result is not None and pending:
                    lines, pending = [*lines, pending], ""
                if lines:
                    log_sink(lines)
    return result


def _end(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=30)


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
    """

    endpoint_url: str
    region: str
    account: str
    work_dir: Path
    timeout_seconds: float = 900
    extra_env: Mapping[str, str] = field(default_factory=dict)
    on_event: Callable[[str], None] = print
    outcomes: dict[str, JobOutcome] = field(default_factory=dict)
    _seen: set[str] = field(default_factory=set)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _client(self, service: str) -> Any:
        from scripts.emulator.server import client

        return client(service, endpoint_url=self.endpoint_url, region=self.region)

    def start(self) -> None:
        """Watch for new InProgress jobs and run each (as the SageMaker service would)."""
        self._thread = threading.Thread(target=self._watch, name="local-sagemaker", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (a job already running finishes first)."""
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
            ]
            for kind, name in pending:
                self._seen.add(name)
                try:
                    if kind == "training":
                        self.run_job(name)
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
        base = self.work_dir / name / "opt-ml"
        log_file = self.work_dir / name / "container.log"
        self.on_event(f"job {name}: SageMaker's part played locally; /opt/ml at {base}")
        self._set_status(name, "InProgress", "Downloading", "Downloading input data (local runner)")
        self._materialize(job, base, s3)

        self._set_status(name, "InProgress", "Training", "Training the model (local runner, CPU)")
        env = self._container_env(job, base)
        timeout = min(self.timeout_seconds, float(job.get("StoppingCondition", {}).get("MaxRuntimeInSeconds", 1e9)))
        started = time.monotonic()
        run = _run_container(
            [sys.executable, "-m", "trainer"],
            env,
            log_file,
            timeout,
            stop_requested=lambda: self._backend_jobs()[name].training_job_status == "Stopping",
            log_sink=self._log_stream(TRAINING_LOG_GROUP, name),
        )
        code = run.code
        seconds = time.monotonic() - started
        log_text = log_file.read_text(encoding="utf-8", errors="replace")
        definitions = job.get("AlgorithmSpecification", {}).get("MetricDefinitions") or _default_metric_definitions()
        metrics = parse_final_metrics(log_text, definitions)

        failure_file = base / "output" / "failure"
        model_dir = base / "model"
        if run.stopped:
            outcome = JobOutcome(name, "Stopped", None, None, metrics, seconds, log_file, base)
        elif code == 0 and model_dir.is_dir() and any(model_dir.iterdir()):
            self._set_status(name, "InProgress", "Uploading", "Uploading generated training model (local runner)")
            artifact = self._upload_outputs(job, base, s3)
            outcome = JobOutcome(name, "Completed", None, artifact, metrics, seconds, log_file, base)
        else:
            if code is None:
                reason = f"MaxRuntimeExceeded: training stopped after {timeout:.0f}s (local runner limit)"
            elif failure_file.is_file():
                reason = failure_file.read_text(encoding="utf-8", errors="replace").strip()
            elif code == 0:
                reason = "AlgorithmError: the container exited 0 but wrote nothing to /opt/ml/model"
            else:
                reason = f"AlgorithmError: the container exited {code}; see {log_file}"
            outcome = JobOutcome(name, "Failed", reason[:1024], None, metrics, seconds, log_file, base)
        self._record(name, outcome.status, outcome.failure_reason, outcome.model_artifact, metrics, seconds)
        self.outcomes[name] = outcome
        self.on_event(f"job {name}: {outcome.status} after {seconds:.1f}s of training")
        return outcome

    def _materialize(self, job: Mapping[str, Any], base: Path, s3: Any) -> None:
        config_dir = base / "input" / "config"
        config_dir.mkdir(parents=True, exist_ok=True)
        for sub in ("model", "output", "checkpoints"):
            (base / sub).mkdir(parents=True, exist_ok=True)
        (config_dir / "hyperparameters.json").write_text(json.dumps(job.get("HyperParameters", {}), indent=2))
        # One host: the local runner trains in a single process (InstanceCount > 1 would need
        # one process per host with a shared TF_CONFIG; the emulated jobs use one).
        (config_dir / "resourceconfig.json").write_text(
            json.dumps({"current_host": "algo-1", "hosts": ["algo-1"], "network_interface_name": "eth0"}, indent=2)
        )
        channels: dict[str, Any] = {}
        for channel in job.get("InputDataConfig", []):
            name = channel["ChannelName"]
            source = channel["DataSource"]["S3DataSource"]
            channels[name] = {
                "TrainingInputMode": channel.get("InputMode", job["AlgorithmSpecification"].get("TrainingInputMode", "File")),
                "S3DistributionType": source.get("S3DataDistributionType", "FullyReplicated"),
                "RecordWrapperType": channel.get("RecordWrapperType", "None"),
                **({"ContentType": channel["ContentType"]} if channel.get("ContentType") else {}),
            }
            self._download_prefix(s3, source["S3Uri"], base / "input" / "data" / name)
        (config_dir / "inputdataconfig.json").write_text(json.dumps(channels, indent=2))
        checkpoint_uri = (job.get("CheckpointConfig") or {}).get("S3Uri")
        if checkpoint_uri:
            # SageMaker restores the checkpoint prefix before training starts (spot restarts).
            self._download_prefix(s3, checkpoint_uri, base / "checkpoints")

    @staticmethod
    def _download_prefix(s3: Any, uri: str, target: Path) -> None:
        bucket, prefix = _split_s3(uri)
        target.mkdir(parents=True, exist_ok=True)
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                key = item["Key"]
                if key.endswith("/"):
                    continue
                relative = key[len(prefix) :].lstrip("/") if prefix else key
                destination = target / (relative or Path(key).name)
                destination.parent.mkdir(parents=True, exist_ok=True)
                s3.download_file(bucket, key, str(destination))

    def _container_env(self, job: Mapping[str, Any], base: Path) -> dict[str, str]:
        return self._environment(
            job,
            base,
            {
                "CHECKPOINT_DIR": str(base / "checkpoints"),
                "TRAINING_JOB_NAME": job["TrainingJobName"],
                "TRAINING_JOB_ARN": job["TrainingJobArn"],
            },
        )

    def _environment(self, job: Mapping[str, Any], base: Path, extra: Mapping[str, str]) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("SM_", "TRAINING_", "TF_CONFIG", "PROCESSING_", "SAGEMAKER_"))
        }
        env.update(job.get("Environment") or {})
        env.update(
            {
                "SAGEMAKER_BASE_DIR": str(base),
                **extra,
                # The emulator has no GPU: the image, which fails hard when it sees fewer GPUs
                # than the instance type has, is told to expect none and runs on the CPU.
                "EXPECTED_GPU_COUNT": "0",
                "CUDA_VISIBLE_DEVICES": "",
                "TF_CPP_MIN_LOG_LEVEL": "2",
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(self.extra_env)
        return env

    def _upload_outputs(self, job: Mapping[str, Any], base: Path, s3: Any) -> str:
        output = job["OutputDataConfig"]
        bucket, prefix = _split_s3(output["S3OutputPath"].rstrip("/") + "/")
        key = f"{prefix}{job['TrainingJobName']}/output/model.tar.gz"
        extra = {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": output["KmsKeyId"]} if output.get("KmsKeyId") else {}
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
        checkpoint_uri = (job.get("CheckpointConfig") or {}).get("S3Uri")
        if checkpoint_uri:
            ck_bucket, ck_prefix = _split_s3(checkpoint_uri.rstrip("/") + "/")
            for path in sorted(p for p in (base / "checkpoints").rglob("*") if p.is_file()):
                s3.upload_file(str(path), ck_bucket, ck_prefix + path.relative_to(base / "checkpoints").as_posix(), ExtraArgs=extra)
        return f"s3://{bucket}/{key}"

    # --- one processing job ----------------------------------------------------------------

    def run_processing_job(self, name: str) -> JobOutcome:
        """Materialize, run the container command, upload the outputs and record one processing job."""
        from scripts.emulator.states import json_safe

        sagemaker, s3 = self._client("sagemaker"), self._client("s3")
        job = json_safe(sagemaker.describe_processing_job(ProcessingJobName=name))
        base = self.work_dir / name / "opt-ml"
        log_file = self.work_dir / name / "container.log"
        self.on_event(f"processing job {name}: SageMaker Processing played locally; /opt/ml at {base}")
        self._mark_processing_started(name)
        (base / "config").mkdir(parents=True, exist_ok=True)
        (base / "output").mkdir(parents=True, exist_ok=True)
        (base / "config" / "processingjobconfig.json").write_text(json.dumps(job, indent=2))
        # One host, as for training jobs (InstanceCount > 1 would need one process per host).
        (base / "config" / "resourceconfig.json").write_text(
            json.dumps({"current_host": "algo-1", "hosts": ["algo-1"], "network_interface_name": "eth0"}, indent=2)
        )
        for item in job.get("ProcessingInputs") or []:
            source = item.get("S3Input")
            if not source:
                raise ValueError(f"input {item.get('InputName')}: only S3Input is played by the local runner")
            self._download_prefix(s3, source["S3Uri"], container_path(base, source["LocalPath"]))
        outputs = (job.get("ProcessingOutputConfig") or {}).get("Outputs") or []
        for item in outputs:
            container_path(base, item["S3Output"]["LocalPath"]).mkdir(parents=True, exist_ok=True)

        app = job.get("AppSpecification") or {}
        command = [*(app.get("ContainerEntrypoint") or []), *(app.get("ContainerArguments") or [])]
        if command and command[0] in ("python3", "python"):
            command[0] = sys.executable  # the image's interpreter; here, this one
        env = self._environment(job, base, {"PROCESSING_JOB_NAME": name, "PROCESSING_JOB_ARN": job["ProcessingJobArn"]})
        timeout = min(self.timeout_seconds, float((job.get("StoppingCondition") or {}).get("MaxRuntimeInSeconds", 1e9)))
        started = time.monotonic()
        run = (
            _run_container(
                command,
                env,
                log_file,
                timeout,
                stop_requested=lambda: self._backend().processing_jobs[name].processing_job_status == "Stopping",
                log_sink=self._log_stream(PROCESSING_LOG_GROUP, name),
            )
            if command
            else ContainerRun(1)
        )
        code = run.code
        seconds = time.monotonic() - started
        message_file = base / "output" / "message"
        message = message_file.read_text(encoding="utf-8", errors="replace").strip() if message_file.is_file() else None
        uploaded: dict[str, str] = {}
        if run.stopped:
            outcome = JobOutcome(name, "Stopped", None, None, {}, seconds, log_file, base, "processing", {}, message)
        elif code == 0:
            key_id = (job.get("ProcessingOutputConfig") or {}).get("KmsKeyId")
            extra = {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": key_id} if key_id else {}
            for item in outputs:
                target = item["S3Output"]["S3Uri"].rstrip("/") + "/"
                bucket, prefix = _split_s3(target)
                local = container_path(base, item["S3Output"]["LocalPath"])
                for path in sorted(p for p in local.rglob("*") if p.is_file()):
                    s3.upload_file(str(path), bucket, prefix + path.relative_to(local).as_posix(), ExtraArgs=extra)
                uploaded[item["OutputName"]] = target
            outcome = JobOutcome(name, "Completed", None, None, {}, seconds, log_file, base, "processing", uploaded, message)
        else:
            if not command:
                reason = "ClientError: AppSpecification has no ContainerEntrypoint or ContainerArguments to run"
            elif code is None:
                reason = f"MaxRuntimeExceeded: processing stopped after {timeout:.0f}s (local runner limit)"
            elif message:
                reason = f"AlgorithmError: {message}"
            else:
                reason = f"AlgorithmError: the container exited {code}; see {log_file}"
            outcome = JobOutcome(name, "Failed", reason[:1024], None, {}, seconds, log_file, base, "processing", {}, message)
        self._record_processing(name, outcome.status, outcome.failure_reason, message)
        self.outcomes[name] = outcome
        self.on_event(f"processing job {name}: {outcome.status} after {seconds:.1f}s")
        return outcome

    def _log_stream(self, group: str, name: str) -> CloudWatchStream:
        return CloudWatchStream(self._client("logs"), group, f"{name}/algo-1-{int(time.time())}")

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
    ) -> None:
        from moto.core.utils import utcnow

        message = {"Completed": "Training job completed", "Stopped": "Training job stopped (StopTrainingJob)"}.get(status)
        self._set_status(name, status, status, message or failure_reason or "failed")
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


def _default_metric_definitions() -> list[dict[str, str]]:
    path = TRAINING_IMAGE_DIR / "trainer" / "metric_definitions.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []
