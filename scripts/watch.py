"""Follow a training, processing or hyperparameter tuning job until it ends: status, secondary status
transitions, elapsed time, the last metric values and the job's CloudWatch log lines (a tuning job:
its trials).

Usage (from the repository root)::

    python -m scripts.watch gputrain-20260101-120000-ab12
    python -m scripts.watch gputrain-training-2026-01-01-12-00-00-123   # a processing job (e.g. a ScriptProcessor's)
    python -m scripts.watch                      # the project's newest job
    python -m scripts.watch JOB --no-logs --interval 30
    python -m scripts.watch --execution 20260101-120000-ab12   # a pipeline execution (name or ARN)
    python -m scripts.watch --pipeline                         # the newest execution of <project>-pipeline
    python -m scripts.watch JOB --plot job.png                 # and a plot of the epochs, rewritten each epoch
    python -m scripts.watch --from-log run.log --plot run.png  # a recorded log (trainer stdout, docker logs)
    python -m scripts.watch --cluster mlp-1                    # a job on the GPU cluster (scripts.cluster_job run)
    python -m scripts.watch --tuning gputrain-tune-1           # a tuning job (scripts.launch --tune): trials, best trial

Exit code: 0 completed, 1 failed (the failure reason is printed in full) or stopped by SageMaker
on its limit (SecondaryStatus MaxRuntimeExceeded or MaxWaitTimeExceeded: one line names the setting
to raise, ``training_job.max_runtime_seconds`` or ``max_wait_seconds``, and where the job's
checkpoints stay), 4 stopped by an operator, 3 when the job does not exist or is
deleted while followed (``Deleting``, or gone). A name that is no training job but a processing job is followed the same way
(its ``/aws/sagemaker/ProcessingJobs`` streams; at the end its ExitMessage and outputs). A job launched through the workflow may take a moment to appear; while its
execution is still running, ``watch`` waits for it (``--start-timeout``), and if the execution
failed before creating a job, prints the execution's error.

The first line names the deployment's CloudWatch dashboard (the ``DashboardName`` output of
``<project>-data``: GPUs of nodes and jobs, input wait, job outcomes, the endpoint, running GPU
compute) with its console address; a data stack deployed before the dashboard existed has none,
and the line is left out.

Each epoch's figures are shown as the trainer prints them (``epoch 3: 10234.1 examples/s, step
3.21 ms, input wait 12.0%, GPU 87.0% 20480 MiB, loss 0.4123``), and its end-of-run diagnosis
(input-bound, GPU idle or compute-bound). ``--plot FILE.png`` draws throughput, input wait and GPU
utilization per epoch (matplotlib), rewritten at every new epoch and with the diagnosis at the end.

A hyperparameter tuning job (``--tuning JOB``, started by ``scripts.launch --tune``) is followed by
its trials: a line when the tuning job's status or trial counters change (``tuning job NAME:
InProgress, trials: 1 completed, 1 in progress, 0 failed, 0 stopped of 4``), one line per trial when
its status changes (``trial NAME: Completed  learning_rate=0.0031  train:loss=0.412``, a failed
trial with its reason) and the best trial so far when it changes (``best so far: NAME
train:loss=0.412``). Trials' log lines are not printed (several trials run at once): follow one
with ``python -m scripts.watch TRIAL``; ``--no-logs`` changes nothing here. A tuning job launched
through the workflow is waited for as a training job is. Exit code as for a job; at the end, the best
training job (``scripts.promote --best-of`` serves it) or the failure reason.

A pipeline execution (``--execution``/``--pipeline``) is followed step by step: the states it
enters (its execution history), and while its processing or training job runs, the job's status,
secondary status and log lines as for a job (a tuning step: its trials, as ``--tuning``); a
promote step shows the endpoint's status. It ends
with the execution: exit 0 when it succeeded (its output is printed), 1 when it failed (the
failure's name and cause, e.g. ``TrainingJobFailed: AlgorithmError: ...``), 4 when it was stopped.

A cluster job (``--cluster JOB``, started by ``scripts.cluster_job run``) is followed the same way:
each node's state as SSM reports its invocation, each node's log lines (the command's output and
the container's stream), the epoch figures from the chief's (``node-0``) lines, and at the end each
node's state and exit code: exit 0 when every node succeeded, 1 when a node failed or timed out (or
its instance is no longer running while SSM still shows its invocation InProgress), 4
when the job was stopped (``scripts.cluster_job stop``: every node's container exited 143, its
checkpoint uploaded; or its command cancelled).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, TextIO

from botocore.exceptions import BotoCoreError, ClientError

from scripts.common import (
    AWS_CREDENTIALS,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_STOPPED,
    PROCESSING_JOB,
    TRAINING_JOB,
    TUNING_JOB,
    Aws,
    Deployment,
    OperatorError,
    UsageError,
    add_common_arguments,
    dashboard_console_url,
    describe_execution,
    describe_job,
    describe_sagemaker_job,
    error_code,
    execution_console_url,
    format_duration,
    help_epilog,
    seconds_argument,
    job_console_url,
    project_jobs,
    run,
    tuning_console_url,
)
from scripts.cost import billed, billed_trials
from scripts.epochs import EpochReader, plot, read_log
from stacks.components.processing_job_spec import SAGEMAKER_PROCESSING_LOG_GROUP
from stacks.components.training_job_spec import SAGEMAKER_LOG_GROUP, load_metric_definitions

END_STATES = {"Completed": EXIT_OK, "Failed": EXIT_FAILED, "Stopped": EXIT_STOPPED}

DELETED_STATES = ("Deleting", "DeleteFailed")
"""A job being deleted (training, tuning) ends the watch as a missing job does: exit 3."""

LIMIT_STOPS = {
    "MaxRuntimeExceeded": "its maximum runtime ran out: raise training_job.max_runtime_seconds",
    "MaxWaitTimeExceeded": "its maximum wait (spot capacity and runtime) ran out: raise training_job.max_wait_seconds",
}
"""A training job SageMaker stopped on its StoppingCondition (SecondaryStatus): failed, not an operator's stop."""


def limit_stop(job: dict[str, Any]) -> Optional[str]:
    """The one line for a training job SageMaker stopped on a limit, else ``None``."""
    secondary = job.get("SecondaryStatus")
    if job.get("TrainingJobStatus") != "Stopped" or secondary not in LIMIT_STOPS:
        return None
    checkpoints = (job.get("CheckpointConfig") or {}).get("S3Uri")
    kept = (f"; its checkpoints stay in {checkpoints}: continue it with python -m scripts.launch --resume-from "
            f"{job['TrainingJobName']}" if checkpoints else "")  # fmt: skip
    return f"{job['TrainingJobName']} was stopped by SageMaker ({secondary}): {LIMIT_STOPS[secondary]}{kept}"


def deleted(kind: str, name: str, status: Optional[str] = None) -> OperatorError:
    """Exit 3: the job was deleted while followed (``Deleting``/``DeleteFailed``, or gone)."""
    return OperatorError(f"{kind} job {name} was deleted" + (f" ({status})" if status else "") + "; nothing left to follow")


class MetricParser:
    """Applies the image's metric definitions to log lines, keeping the last value of each."""

    def __init__(self, definitions: Sequence[dict[str, str]]) -> None:
        self._patterns = [(d["Name"], re.compile(d["Regex"])) for d in definitions]
        self.last: dict[str, str] = {}

    def feed(self, line: str) -> bool:
        """Parse one line; whether it carried a metric."""
        found = False
        for name, pattern in self._patterns:
            match = pattern.search(line)
            if match:
                self.last[name] = match.group(1)
                found = True
        return found

    def summary(self) -> str:
        """``epoch=3 loss=0.41 ...`` in definition order."""
        return " ".join(f"{name}={self.last[name]}" for name, _ in self._patterns if name in self.last)


@dataclass
class LogFollower:
    """Reads new events of a job's log streams (``/aws/sagemaker/TrainingJobs``, ``<job>/...``)."""

    aws: Aws
    job_name: str
    log_group: str = SAGEMAKER_LOG_GROUP
    _tokens: dict[str, Optional[str]] = field(default_factory=dict)

    def poll(self) -> list[tuple[str, str]]:
        """New ``(stream suffix, message)`` pairs since the last call, oldest first per stream."""
        logs = self.aws.client("logs")
        try:
            # One stream per instance (and per algo-N container): 50 a page, more than a page at 64 instances.
            pages = logs.get_paginator("describe_log_streams").paginate(
                logGroupName=self.log_group, logStreamNamePrefix=f"{self.job_name}/"
            )
            streams = [stream for page in pages for stream in page.get("logStreams", [])]
        except ClientError as err:
            if error_code(err) == "ResourceNotFoundException":
                return []
            raise
        lines: list[tuple[str, str]] = []
        for stream in sorted(s["logStreamName"] for s in streams):
            params: dict[str, Any] = {"logGroupName": self.log_group, "logStreamName": stream, "startFromHead": True}
            while True:
                token = self._tokens.get(stream)
                if token:
                    params["nextToken"] = token
                page = logs.get_log_events(**params)
                events = page.get("events", [])
                lines.extend((stream.split("/", 1)[-1], e["message"].rstrip("\n")) for e in events)
                self._tokens[stream] = page.get("nextForwardToken")
                if not events or page.get("nextForwardToken") == token:
                    break
        return lines


def _elapsed(job: dict[str, Any], now: datetime) -> float:
    start = job.get("TrainingStartTime") or job.get("CreationTime") or now
    end = job.get("TrainingEndTime") if job.get("TrainingJobStatus") in END_STATES else None
    return ((end or now) - start).total_seconds()


def print_dashboard(deployment: Deployment, out: TextIO) -> None:
    """``dashboard: <name>  <console address>``, where the data stack names one."""
    name = deployment.dashboard_name()
    if name:
        print(f"dashboard: {name}  {dashboard_console_url(deployment.aws.region, name)}", file=out)


def wait_for_job(
    deployment: Deployment,
    job_name: str,
    *,
    start_timeout: float,
    interval: float,
    out: TextIO,
    sleep: Callable[[float], None] = time.sleep,
    describe: Callable[[Aws, str], Optional[dict[str, Any]]] = describe_job,
    not_found: str = "training job {name} not found in {region} (see python -m scripts.list_jobs)",
) -> dict[str, Any]:
    """Describe the job (``describe``: a training job's by default); while the workflow execution of
    that name runs and has no job yet, wait. ``not_found`` is the error when neither exists."""
    deadline = time.monotonic() + start_timeout
    said = False
    while True:
        job = describe(deployment.aws, job_name)
        if job is not None:
            return job
        execution = describe_execution(deployment.aws, deployment.execution_arn(job_name)) if deployment.has_training_stack() else None
        if execution is None:
            raise OperatorError(not_found.format(name=job_name, region=deployment.aws.region))
        if execution["status"] != "RUNNING":
            cause = execution.get("cause") or execution.get("error") or "no cause recorded"
            raise OperatorError(
                f"the workflow execution {job_name} is {execution['status']} and created no job: {cause}", EXIT_FAILED
            )
        if time.monotonic() > deadline:
            raise OperatorError(f"the workflow execution {job_name} has not created its job after {start_timeout:.0f}s")
        if not said:
            print(f"waiting for the workflow to create {job_name} ...", file=out)
            said = True
        sleep(interval)


def follow(
    deployment: Deployment,
    job_name: str,
    *,
    interval: float = 15.0,
    logs: bool = True,
    start_timeout: float = 120.0,
    heartbeat: float = 60.0,
    plot_path: Optional[Path] = None,
    out: Optional[TextIO] = None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Follow ``job_name`` until it ends; return the exit code of its outcome.

    Args:
        deployment: Config, session and outputs.
        job_name: The training job.
        interval: Seconds between polls.
        logs: Print the job's log lines.
        start_timeout: How long to wait for a workflow execution to create the job.
        heartbeat: Print an unchanged status line again after this many seconds.
        plot_path: Write the epochs' plot here (each new epoch, and at the end); the log is read
            for it even with ``logs`` off.
        out: Where the progress goes (default stdout).
        sleep: Injected for tests.
    """
    out = out or sys.stdout
    aws = deployment.aws
    print_dashboard(deployment, out)
    job = wait_for_job(deployment, job_name, start_timeout=start_timeout, interval=interval, out=out, sleep=sleep)
    print(f"following {job_name}  {job_console_url(aws.region, job_name)}", file=out)
    metrics = MetricParser(job.get("AlgorithmSpecification", {}).get("MetricDefinitions") or load_metric_definitions())
    follower = LogFollower(aws, job_name) if logs or plot_path else None
    epochs = EpochReader()
    seen_transitions = 0
    last_line = ""
    last_print = 0.0
    while True:
        now = datetime.now(timezone.utc)
        status = job["TrainingJobStatus"]
        transitions = job.get("SecondaryStatusTransitions") or []
        for transition in transitions[seen_transitions:]:
            print(f"  -> {transition['Status']}: {transition.get('StatusMessage', '')}".rstrip(), file=out)
        seen_transitions = len(transitions)
        if follower:
            for stream, message in follower.poll():
                metrics.feed(message)
                if logs:
                    print(f"  [{stream}] {message}", file=out)
                _show_epoch(epochs, message, job_name, plot_path, out)
        for item in job.get("FinalMetricDataList") or []:
            metrics.last.setdefault(item["MetricName"], f"{item['Value']:g}")
        line = f"[{format_duration(_elapsed(job, now))}] {status} / {job.get('SecondaryStatus', '-')}"
        if metrics.summary():
            line += f"  {metrics.summary()}"
        if line.split("]", 1)[1] != last_line.split("]", 1)[-1] or time.monotonic() - last_print >= heartbeat:
            print(line, file=out)
            last_line, last_print = line, time.monotonic()
        if status in DELETED_STATES:
            raise deleted("training", job_name, status)
        if status in END_STATES:
            if plot_path:
                _final_plot(epochs, job_name, plot_path, out)
            return _report_end(job, out)
        sleep(interval)
        described = describe_job(aws, job_name)
        if described is None:
            raise deleted("training", job_name)
        job = described


def _show_epoch(epochs: EpochReader, message: str, title: str, plot_path: Optional[Path], out: TextIO) -> None:
    """Prints an epoch's figures or the diagnosis when ``message`` is one; redraws the plot per epoch."""
    figures = epochs.feed(message)
    if figures is not None:
        print(f"  {figures.row()}", file=out)
        if plot_path:
            plot(epochs.epochs, plot_path, title=title)
    elif epochs.diagnosis and message.startswith("[diagnosis]"):
        print(f"  diagnosis: {epochs.diagnosis}", file=out)


def _final_plot(epochs: EpochReader, title: str, plot_path: Path, out: TextIO) -> None:
    if not epochs.epochs:
        print(f"  no epoch lines in the log of {title}: {plot_path} not written", file=out)
        return
    plot(epochs.epochs, plot_path, title=title, diagnosis=epochs.diagnosis)
    print(f"  plot: {plot_path} ({len(epochs.epochs)} epochs)", file=out)


def from_log(log_path: Path, plot_path: Optional[Path], out: Optional[TextIO] = None) -> int:
    """Prints a recorded log's epochs and diagnosis, and writes the plot; exit 0, 2 (usage) when
    ``log_path`` is no file or has no epoch."""
    out = out or sys.stdout
    if not log_path.is_file():
        raise UsageError(f"--from-log {log_path}: no such file")
    recorded = read_log(log_path)
    if not recorded.epochs:
        raise UsageError(f"--from-log {log_path}: no [metrics] epoch lines in it (is it a training job's log?)")
    for figures in recorded.epochs:
        print(figures.row(), file=out)
    if recorded.diagnosis:
        print(f"diagnosis: {recorded.diagnosis}", file=out)
    if plot_path:
        plot(recorded.epochs, plot_path, title=log_path.name, diagnosis=recorded.diagnosis)
        print(f"plot: {plot_path} ({len(recorded.epochs)} epochs)", file=out)
    return EXIT_OK


def follow_processing(
    deployment: Deployment,
    job_name: str,
    *,
    interval: float = 15.0,
    logs: bool = True,
    out: Optional[TextIO] = None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Follow the processing job ``job_name`` until it ends, as :func:`follow` does a training job."""
    out = out or sys.stdout
    aws = deployment.aws
    print_dashboard(deployment, out)
    tracker = _JobTracker(aws, "processing", job_name, logs, out)
    job = tracker.poll()
    if job is None:
        raise OperatorError(f"processing job {job_name} not found in {aws.region}")
    print(f"following {job_name}  {processing_console_url(aws.region, job_name)}", file=out)
    while job["ProcessingJobStatus"] not in END_STATES:
        sleep(interval)
        described = tracker.poll()
        if described is None:
            raise deleted("processing", job_name)
        job = described
    status = job["ProcessingJobStatus"]
    print(f"{job_name} {status}", file=out)
    if status == "Completed":
        for item in (job.get("ProcessingOutputConfig") or {}).get("Outputs") or []:
            if "S3Output" in item:
                print(f"  output {item['OutputName']}: {item['S3Output']['S3Uri']}", file=out)
    if job.get("FailureReason"):
        print(f"  FailureReason: {job['FailureReason']}", file=out)
    if job.get("ExitMessage") and job.get("ExitMessage") != job.get("FailureReason"):
        print(f"  ExitMessage: {job['ExitMessage']}", file=out)
    return END_STATES[status]


def processing_console_url(region: str, job_name: str) -> str:
    """The SageMaker console page of a processing job."""
    return f"https://{region}.console.aws.amazon.com/sagemaker/home?region={region}#/processing-jobs/{job_name}"


def follow_cluster(
    deployment: Deployment,
    job_name: str,
    *,
    interval: float = 15.0,
    logs: bool = True,
    plot_path: Optional[Path] = None,
    out: Optional[TextIO] = None,
    sleep: Optional[Callable[[float], None]] = None,
) -> int:
    """Follow the cluster job ``job_name`` (its newest ``run`` command) until it ends, as :func:`follow`
    does a training job; the epoch figures come from the chief's (``node-0``) lines."""
    from scripts import cluster_job

    out = out or sys.stdout
    sleep = sleep or time.sleep  # looked up at the call: tests replace it
    print_dashboard(deployment, out)
    cluster = cluster_job.Cluster.of(deployment)
    command = cluster_job.latest_run(deployment, cluster, job_name)
    print(f"following cluster job {job_name}: command {command['CommandId']} on {len(cluster.instance_ids)} node(s) of {cluster.stack}", file=out)
    client = deployment.aws.client("logs")
    streams = cluster_job.job_streams(cluster, command["CommandId"], job_name, cluster.instance_ids)
    tokens: dict[str, Optional[str]] = {}
    since = cluster_job.run_started_ms(command)  # this run's lines only: a rerun writes to the same streams
    epochs = EpochReader()
    chief = cluster.instance_ids[0] if cluster.instance_ids else None
    shown = ""
    while True:
        for instance, stream in streams:
            lines, tokens[stream] = cluster_job.stream_events(client, cluster.log_group, stream, tokens.get(stream), since)
            for line in lines:
                if logs:
                    print(f"  [{cluster.node_name(instance)}] {line}", file=out)
                if instance == chief:
                    _show_epoch(epochs, line, job_name, plot_path, out)
        nodes = cluster_job.invocations(deployment, command["CommandId"])
        states = ", ".join(f"{cluster.node_name(i['InstanceId'])} {i['Status']}" for i in sorted(nodes, key=lambda i: cluster.node_name(i["InstanceId"])))
        line = f"{job_name}: {command['Status']}" + (f" ({states})" if states else "")
        if line != shown:
            print(line, file=out)
            shown = line
        if command["Status"] not in cluster_job.ACTIVE:
            if plot_path:
                _final_plot(epochs, job_name, plot_path, out)
            return _report_cluster_end(cluster, command, nodes, out)
        lost = cluster_job.lost_nodes(deployment, cluster, nodes)
        if lost:  # a dead node never reports: SSM would show the job running until its timeout
            print(cluster_job.lost_line(job_name, lost), file=out)
            return EXIT_FAILED
        sleep(interval)
        command = cluster_job.latest_run(deployment, cluster, job_name)


def _report_cluster_end(cluster: Any, command: dict[str, Any], nodes: list[dict[str, Any]], out: TextIO) -> int:
    """Each node's end and exit code; the exit code of the job's outcome."""
    from scripts import cluster_job

    for node in sorted(nodes, key=lambda i: cluster.node_name(i["InstanceId"])):
        plugins = node.get("CommandPlugins") or [{}]
        code = plugins[0].get("ResponseCode", "")
        print(f"  {cluster.node_name(node['InstanceId'])} ({node['InstanceId']}): {node['Status']}, exit {code}", file=out)
    status = command["Status"]
    if status == "Success":
        return EXIT_OK
    if status in ("Cancelled", "Cancelling"):
        print(f"stopped: command {command['CommandId']} was cancelled (a rerun of the same job resumes from its checkpoints)", file=out)
        return EXIT_STOPPED
    if cluster_job.stopped_by_sigterm(nodes):
        print(f"stopped: every node's container exited {cluster_job.STOPPED_EXIT} (SIGTERM) and uploaded its checkpoints "
              f"(command {command['CommandId']}); a rerun of the same job resumes from them", file=out)  # fmt: skip
        return EXIT_STOPPED
    failed = [cluster.node_name(n["InstanceId"]) for n in nodes if n["Status"] not in ("Success", "InProgress", "Pending")]
    print(f"failed: {status}" + (f" on {', '.join(failed)}" if failed else "") + f" (command {command['CommandId']})", file=out)
    return EXIT_FAILED


def _is_processing_job(aws: Aws, job_name: str) -> bool:
    """True when ``job_name`` is no training job but a processing job."""
    if describe_job(aws, job_name) is not None:
        return False
    return _JobTracker(aws, "processing", job_name, False, sys.stdout)._describe() is not None


def _report_end(job: dict[str, Any], out: TextIO) -> int:
    status = job["TrainingJobStatus"]
    print(f"{job['TrainingJobName']} {status}", file=out)
    for key in ("TrainingTimeInSeconds", "BillableTimeInSeconds"):
        if key in job:
            print(f"  {key}: {job[key]}", file=out)
    cost = billed(job)
    if cost:
        print(f"  {cost}", file=out)
    artifacts = job.get("ModelArtifacts", {}).get("S3ModelArtifacts")
    if artifacts and status == "Completed":
        print(f"  model: {artifacts}", file=out)
    if job.get("FailureReason"):
        print(f"  FailureReason: {job['FailureReason']}", file=out)
    limit = limit_stop(job)
    if limit:
        print(f"  {limit}", file=out)
        return EXIT_FAILED
    return END_STATES[status]


def newest_job(deployment: Deployment) -> str:
    """Name of the project's most recently created job."""
    jobs = project_jobs(deployment, limit=1)
    if not jobs:
        raise OperatorError(f"no training jobs named {deployment.job_name_prefix}* in {deployment.aws.region}")
    return str(jobs[0]["TrainingJobName"])


# --------------------------------------------------------------------------------------------
# A hyperparameter tuning job
# --------------------------------------------------------------------------------------------


def describe_tuning_job(aws: Aws, name: str) -> Optional[dict[str, Any]]:
    """``DescribeHyperParameterTuningJob``, or ``None`` when there is no such tuning job."""
    return describe_sagemaker_job(aws, TUNING_JOB, name)


def tuning_trials(aws: Aws, name: str) -> list[dict[str, Any]]:
    """Every trial of the tuning job (ListTrainingJobsForHyperParameterTuningJob, all pages), oldest first."""
    client = aws.client("sagemaker")
    trials: list[dict[str, Any]] = []
    params: dict[str, Any] = {"HyperParameterTuningJobName": name, "MaxResults": 100}
    while True:
        page = client.list_training_jobs_for_hyper_parameter_tuning_job(**params)
        trials.extend(page.get("TrainingJobSummaries") or [])
        if not page.get("NextToken"):
            break
        params["NextToken"] = page["NextToken"]
    return sorted(trials, key=lambda t: (str(t.get("CreationTime") or ""), t["TrainingJobName"]))


def _objective(summary: dict[str, Any]) -> str:
    """``train:loss=0.412`` from a trial summary's final objective metric, or ``""``."""
    metric = summary.get("FinalHyperParameterTuningJobObjectiveMetric") or {}
    return f"{metric['MetricName']}={metric['Value']:g}" if "Value" in metric and "MetricName" in metric else ""


def trial_line(summary: dict[str, Any]) -> str:
    """``trial <name>: <status>  <tuned k=v ...>  <objective>`` (and a failed trial's reason)."""
    line = f"trial {summary['TrainingJobName']}: {summary['TrainingJobStatus']}"
    tuned = " ".join(f"{k}={v}" for k, v in sorted((summary.get("TunedHyperParameters") or {}).items()))
    for part in (tuned, _objective(summary)):
        if part:
            line += f"  {part}"
    if summary.get("FailureReason") and summary["TrainingJobStatus"] != "Completed":
        line += f"  ({summary['FailureReason']})"
    return line


def tuning_status_line(job: dict[str, Any]) -> str:
    """``tuning job <name>: <status>, trials: 1 completed, 1 in progress, 0 failed, 0 stopped of 4``."""
    counters = job.get("TrainingJobStatusCounters") or {}
    failed = int(counters.get("RetryableError") or 0) + int(counters.get("NonRetryableError") or 0)
    limits = (job.get("HyperParameterTuningJobConfig") or {}).get("ResourceLimits") or {}
    line = (
        f"tuning job {job['HyperParameterTuningJobName']}: {job['HyperParameterTuningJobStatus']}, trials: "
        f"{counters.get('Completed', 0)} completed, {counters.get('InProgress', 0)} in progress, {failed} failed, "
        f"{counters.get('Stopped', 0)} stopped"
    )
    if limits.get("MaxNumberOfTrainingJobs"):
        line += f" of {limits['MaxNumberOfTrainingJobs']}"
    return line


def best_line(job: dict[str, Any]) -> str:
    """``best so far: <trial> train:loss=0.41``, or ``""`` while no trial has an objective value."""
    best = job.get("BestTrainingJob") or {}
    if not best.get("TrainingJobName"):
        return ""
    return f"best so far: {best['TrainingJobName']}" + (f" {_objective(best)}" if _objective(best) else "")


@dataclass
class _TuningTracker:
    """Prints a tuning job's changes: its status and trial counters, each trial whose status changed
    (its sampled hyperparameters, its objective value, a failed trial's reason) and the best trial so
    far. Trials' log lines are not printed (``python -m scripts.watch <trial>`` follows one)."""

    aws: Aws
    name: str
    out: TextIO
    _status: str = ""
    _trials: dict[str, str] = field(default_factory=dict)
    _best: str = ""

    def poll(self) -> Optional[dict[str, Any]]:
        job = describe_tuning_job(self.aws, self.name)
        if job is None:
            return None
        return self.show(job)

    def show(self, job: dict[str, Any]) -> dict[str, Any]:
        """Print what changed in ``job`` (described) and its trials since the last call; return ``job``."""
        line = f"  {tuning_status_line(job)}"
        if line != self._status:
            print(line, file=self.out)
            self._status = line
        for summary in tuning_trials(self.aws, self.name):
            shown = trial_line(summary)
            if self._trials.get(summary["TrainingJobName"]) != shown:
                print(f"    {shown}", file=self.out)
                self._trials[summary["TrainingJobName"]] = shown
        best = best_line(job)
        if best and best != self._best:
            print(f"    {best}", file=self.out)
            self._best = best
        return job


def follow_tuning(
    deployment: Deployment,
    name: str,
    *,
    interval: float = 15.0,
    start_timeout: float = 120.0,
    out: Optional[TextIO] = None,
    sleep: Optional[Callable[[float], None]] = None,
) -> int:
    """Follow the hyperparameter tuning job ``name`` until it ends, as :func:`follow` does a training
    job (a tuning job launched through the workflow is waited for, ``start_timeout``); the exit code of
    its outcome. Trials are shown by status, not by log line."""
    out = out or sys.stdout
    sleep = sleep or time.sleep  # looked up at the call: tests replace it
    aws = deployment.aws
    print_dashboard(deployment, out)
    job = wait_for_job(
        deployment, name, start_timeout=start_timeout, interval=interval, out=out, sleep=sleep, describe=describe_tuning_job,
        not_found="tuning job {name} not found in {region} (see the output of python -m scripts.launch --tune)",
    )
    print(f"following tuning job {name}  {tuning_console_url(aws.region, name)}", file=out)
    tracker = _TuningTracker(aws, name, out)
    tracker.show(job)
    while job["HyperParameterTuningJobStatus"] not in END_STATES:
        if job["HyperParameterTuningJobStatus"] in DELETED_STATES:
            raise deleted("tuning", name, job["HyperParameterTuningJobStatus"])
        sleep(interval)
        described = tracker.poll()
        if described is None:
            raise deleted("tuning", name)
        job = described
    code = _report_tuning_end(job, out)
    _report_trials_bill(aws, name, out)
    return code


def _report_trials_bill(aws: Aws, name: str, out: TextIO) -> None:
    """What the tuning job's started trials billed together (:func:`scripts.cost.billed_trials`), after its end
    is reported: a trial that cannot be described leaves the line out, said in one line, and the exit code as it is."""
    try:
        trials = [describe_job(aws, t["TrainingJobName"]) for t in tuning_trials(aws, name) if t.get("TrainingStartTime")]
    except (ClientError, BotoCoreError) as err:
        cause = error_code(err) if isinstance(err, ClientError) else type(err).__name__
        print(f"  billed: not read ({cause}); python -m scripts.watch TRIAL shows one trial's", file=out)
        return
    cost = billed_trials([t for t in trials if t is not None])
    if cost:
        print(f"  {cost}", file=out)


def _report_tuning_end(job: dict[str, Any], out: TextIO) -> int:
    """The tuning job's end: its status, best trial and failure reason; the exit code of its outcome."""
    name, status = job["HyperParameterTuningJobName"], job["HyperParameterTuningJobStatus"]
    print(f"{name} {status}", file=out)
    best = job.get("BestTrainingJob") or {}
    if best.get("TrainingJobName"):
        print(f"  best training job: {best['TrainingJobName']}" + (f" {_objective(best)}" if _objective(best) else ""), file=out)
        if status == "Completed":
            print(f"  serve it: python -m scripts.promote --best-of {name}", file=out)
    if job.get("FailureReason"):
        print(f"  FailureReason: {job['FailureReason']}", file=out)
    return END_STATES[status]


# --------------------------------------------------------------------------------------------
# A pipeline execution
# --------------------------------------------------------------------------------------------

EXECUTION_END = {"SUCCEEDED": EXIT_OK, "FAILED": EXIT_FAILED, "TIMED_OUT": EXIT_FAILED, "ABORTED": EXIT_STOPPED}


def newest_pipeline_execution(deployment: Deployment) -> str:
    """ARN of the newest execution of ``<project>-pipeline``."""
    page = deployment.aws.client("stepfunctions").list_executions(stateMachineArn=deployment.pipeline_arn(), maxResults=100)
    executions = sorted(page.get("executions", []), key=lambda e: e["startDate"], reverse=True)
    if not executions:
        raise OperatorError(f"{deployment.config.project_name}-pipeline has no executions yet (python -m scripts.launch --pipeline)")
    return str(executions[0]["executionArn"])


@dataclass
class _JobTracker:
    """Prints a processing or training job's changes: status, secondary transitions, log lines."""

    aws: Aws
    kind: str
    name: str
    logs: bool
    out: TextIO
    _last: str = ""
    _transitions: int = 0
    _follower: Optional[LogFollower] = None
    _metrics: Optional[MetricParser] = None
    _epochs: EpochReader = field(default_factory=EpochReader)

    def poll(self) -> Optional[dict[str, Any]]:
        job = self._describe()
        if job is None:
            return None
        if self.logs and self._follower is None:
            group = SAGEMAKER_PROCESSING_LOG_GROUP if self.kind == "processing" else SAGEMAKER_LOG_GROUP
            self._follower = LogFollower(self.aws, self.name, group)
        if self.kind == "training" and self._metrics is None:
            self._metrics = MetricParser(job.get("AlgorithmSpecification", {}).get("MetricDefinitions") or load_metric_definitions())
        transitions = job.get("SecondaryStatusTransitions") or []
        for transition in transitions[self._transitions :]:
            print(f"    -> {transition['Status']}: {transition.get('StatusMessage', '')}".rstrip(), file=self.out)
        self._transitions = len(transitions)
        if self._follower is not None:
            for stream, message in self._follower.poll():
                if self._metrics is not None:
                    self._metrics.feed(message)
                print(f"    [{stream}] {message}", file=self.out)
                figures = self._epochs.feed(message) if self.kind == "training" else None
                if figures is not None:
                    print(f"    {figures.row()}", file=self.out)
        status = job.get("TrainingJobStatus") or job.get("ProcessingJobStatus")
        line = f"  {self.kind} job {self.name}: {status}"
        if self._metrics is not None:
            for item in job.get("FinalMetricDataList") or []:
                self._metrics.last.setdefault(item["MetricName"], f"{item['Value']:g}")
            if self._metrics.summary():
                line += f"  {self._metrics.summary()}"
        reason = job.get("FailureReason")
        if reason and status in ("Failed", "Stopped"):
            line += f"  ({reason})"
        limit = limit_stop(job) if self.kind == "training" else None
        if limit:
            line += f"\n    {limit}"
        if line != self._last:
            print(line, file=self.out)
            self._last = line
        return job

    def _describe(self) -> Optional[dict[str, Any]]:
        return describe_sagemaker_job(self.aws, TRAINING_JOB if self.kind == "training" else PROCESSING_JOB, self.name)


def follow_pipeline(
    deployment: Deployment,
    execution: str,
    *,
    interval: float = 15.0,
    logs: bool = True,
    out: Optional[TextIO] = None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Follow a pipeline execution (name or ARN) step by step until it ends; the exit code of its outcome."""
    from scripts.pipeline import pipeline_names

    out = out or sys.stdout
    aws = deployment.aws
    print_dashboard(deployment, out)
    arn = deployment.pipeline_execution_arn(execution)
    described = describe_execution(aws, arn)
    if described is None:
        raise OperatorError(f"pipeline execution {execution} not found in {aws.region} (see the output of scripts.launch --pipeline)")
    try:
        execution_input = json.loads(described.get("input") or "{}")
    except json.JSONDecodeError:
        execution_input = {}
    names = pipeline_names(
        deployment.config.project_name, described["name"], execution_input if isinstance(execution_input, dict) else {},
        transform=deployment.config.transform.enabled,
    )
    print(f"following pipeline execution {described['name']}  {execution_console_url(aws.region, arn)}", file=out)
    for line in names.lines():
        print(f"  {line}", file=out)
    trackers: list[_JobTracker | _TuningTracker] = [
        _JobTracker(aws, kind, name, logs, out)
        for kind, name in (("processing", names.processing_job), ("training", names.training_job))
        if name
    ]
    if names.tuning_job:
        trackers.append(_TuningTracker(aws, names.tuning_job, out))
    sfn = aws.client("stepfunctions")
    seen_events = 0
    endpoint_line = ""
    while True:
        described = describe_execution(aws, arn) or described
        try:
            events = sfn.get_execution_history(executionArn=arn, maxResults=1000)["events"]
        except ClientError:
            events = []
        for event in events[seen_events:]:
            if event["type"].endswith("StateEntered"):
                print(f"  step {event['stateEnteredEventDetails']['name']}", file=out)
        seen_events = max(seen_events, len(events))
        for tracker in trackers:
            tracker.poll()
        if names.model:
            endpoint_line = _endpoint_status(deployment, endpoint_line, out)
        status = described["status"]
        if status in EXECUTION_END:
            return _report_execution(described, out)
        sleep(interval)


def _endpoint_status(deployment: Deployment, last: str, out: TextIO) -> str:
    name = f"{deployment.config.project_name}-endpoint"
    try:
        endpoint = deployment.aws.client("sagemaker").describe_endpoint(EndpointName=name)
    except ClientError:
        return last
    pending = (endpoint.get("PendingDeploymentSummary") or {}).get("EndpointConfigName")
    line = f"  endpoint {name}: {endpoint['EndpointStatus']} on {endpoint['EndpointConfigName']}"
    if pending:
        line += f" (updating to {pending})"
    if endpoint.get("FailureReason"):
        line += f"  ({endpoint['FailureReason']})"
    if line != last:
        print(line, file=out)
    return line


def _report_execution(described: dict[str, Any], out: TextIO) -> int:
    status = described["status"]
    print(f"pipeline execution {described['name']} {status}", file=out)
    if status == "SUCCEEDED":
        try:
            output = json.loads(described.get("output") or "null")
        except json.JSONDecodeError:
            output = described.get("output")
        if isinstance(output, dict):
            for key, value in output.items():
                if value is not None:
                    print(f"  {key}: {value}", file=out)
        elif output is not None:
            print(f"  output: {output}", file=out)
    else:
        error = described.get("error") or status
        cause = described.get("cause") or "no cause recorded"
        print(f"  {error}: {cause}", file=out)
    return EXECUTION_END[status]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.watch",
        description="Follow a training, processing or tuning job, or a pipeline execution, until it ends.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=help_epilog(
            "python -m scripts.watch",
            [
                ("gputrain-20260101-120000-ab12 --no-logs --plot job.png", "one job, no log lines, a plot of its epochs"),
                ("--pipeline", "the newest pipeline execution, step by step"),
                ("--tuning gputrain-tune-1", "a tuning job: each trial's status, sampled values and objective, the best trial"),
            ],
            credentials=AWS_CREDENTIALS + " --from-log reads a file and needs none.",
            done="the job (or the tuning job) completed (the execution succeeded; --from-log: epochs printed)",
            failed="the job or the execution failed (its failure reason is printed in full), or SageMaker stopped "
            "the job on its limit (MaxRuntimeExceeded: raise training_job.max_runtime_seconds; MaxWaitTimeExceeded: "
            "raise training_job.max_wait_seconds)",
            more={EXIT_STOPPED: "the job or the execution was stopped (by an operator)"},
        ),
    )
    parser.add_argument("job_name", nargs="?", help="training or processing job (default: the project's newest training job)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--execution", metavar="ARN|NAME", help="follow this execution of <project>-pipeline")
    which.add_argument("--pipeline", action="store_true", help="follow the newest execution of <project>-pipeline")
    which.add_argument("--from-log", metavar="FILE", type=Path, help="read a recorded training log instead of a job")
    which.add_argument("--cluster", metavar="JOB", help="follow this job on the GPU cluster (python -m scripts.cluster_job run JOB)")
    which.add_argument(
        "--tuning", metavar="JOB", help="follow this hyperparameter tuning job (python -m scripts.launch --tune): its trials and best trial"
    )
    parser.add_argument(
        "--plot", metavar="FILE.png", type=Path, help="write throughput, input wait and GPU utilization per epoch here"
    )
    parser.add_argument("--interval", type=seconds_argument, default=15.0, help="seconds between polls (default 15)")
    parser.add_argument("--no-logs", dest="logs", action="store_false", help="do not print the job's log lines")
    parser.add_argument("--start-timeout", type=seconds_argument, default=120.0, help="wait this long for the workflow to create the job")
    add_common_arguments(parser)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.job_name and (args.execution or args.pipeline):
        parser.error("give a training job, or --execution/--pipeline, not both")
    if args.job_name and args.from_log:
        parser.error("give a training job or --from-log, not both")
    if args.job_name and args.cluster:
        parser.error("give a training job or --cluster JOB, not both")
    if args.job_name and args.tuning:
        parser.error("give a training job or --tuning JOB, not both")
    if args.plot is not None:
        _check_plot_path(parser, args.plot)
        if args.execution or args.pipeline or args.tuning:
            parser.error("--plot draws a training job's epochs: give the job (python -m scripts.watch JOB --plot FILE.png)")
    if args.from_log:
        return from_log(args.from_log, args.plot)
    deployment = Deployment.from_args(args)
    if args.tuning:
        return follow_tuning(deployment, args.tuning, interval=args.interval, start_timeout=args.start_timeout)
    if args.cluster:
        return follow_cluster(deployment, args.cluster, interval=args.interval, logs=args.logs, plot_path=args.plot)
    if args.execution or args.pipeline:
        execution = args.execution or newest_pipeline_execution(deployment)
        return follow_pipeline(deployment, execution, interval=args.interval, logs=args.logs)
    name = args.job_name or newest_job(deployment)
    if args.job_name and _is_processing_job(deployment.aws, name):
        return follow_processing(deployment, name, interval=args.interval, logs=args.logs)
    return follow(
        deployment, name, interval=args.interval, logs=args.logs, start_timeout=args.start_timeout, plot_path=args.plot
    )


def _check_plot_path(parser: argparse.ArgumentParser, path: Path) -> None:
    if path.suffix.lower() != ".png":
        parser.error(f"--plot {path}: give a .png file name")
    if not path.parent.is_dir():
        parser.error(f"--plot {path}: the directory {path.parent} does not exist")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        parser.error("--plot needs matplotlib: pip install -r requirements.txt")


if __name__ == "__main__":
    sys.exit(run(main))
