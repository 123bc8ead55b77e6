"""The pre-destroy step: stop what ``cdk destroy`` cannot.

CloudFormation has no training-job resource, so ``cdk destroy`` neither stops a running job nor
waits for one; deleting the workflow's role would leave its job running (and billing) with no one
watching. Run this first::

    python -m scripts.teardown                    # list what is still running (exit 1 if anything)
    python -m scripts.teardown --stop-running     # stop it all and wait until it has ended
    python -m scripts.teardown --stop-running --destroy   # then: npx cdk destroy --all --force

``--stop-running`` stops every RUNNING execution of the training workflow and of the pipeline
(Step Functions then stops their jobs), every InProgress hyperparameter tuning job named
``<project>-*`` (``launch --tune --direct``, the SageMaker SDK's tuner: StopHyperParameterTuningJob,
first, so that the tuner starts no new trial; it stops its trials), every InProgress training,
processing or batch transform job named ``<project>-*`` (``--direct`` launches, the pipeline's
transform step, the SDK's Transformer), and every job on the GPU cluster (a Pending or InProgress
command of its ``<project>-cluster-train`` document: the document's ``stop`` action sent to the
nodes and the run waited for until it ends by itself, its checkpoint uploaded, and cancelled only
after that bound (at most ``--timeout``), as ``python -m scripts.cluster_job stop`` does), then waits
(``--timeout``, default 900 s) until no such job (tuning and transform jobs included) is
InProgress or Stopping, and no command of the cluster's document is Pending, InProgress or
Cancelling. A training job's warm pool bills until it ends: one left ``Available`` is ended
(UpdateTrainingJob, ``KeepAlivePeriodInSeconds=0``), an InProgress job with a warm pool gets 0
before it is stopped, and a pool that a job leaves while teardown waits is ended on the next
poll, not waited for. It then deletes the models and
endpoint configs the pipeline's promote step created (``<project>-<execution>``: not
CloudFormation's, so ``cdk destroy`` would leave them) that no endpoint uses any more; with
``--destroy``, once more after ``cdk destroy`` removed the endpoint. It also deletes the GPU idle
alarms (``<project>-gpu-idle-<job>``) of jobs no longer running, which the stack's watch deletes
as each job ends but could miss when the stack goes first, and the project's endpoints that no
stack owns (``<project>-*`` but not the serving stack's ``<project>-endpoint``: e.g. made with
the SageMaker SDK's ``deploy()``), which bill by the hour and which ``cdk destroy`` cannot see.

A name ``<project>-*`` is not enough to be the project's: project ``gputrain``'s prefix also
begins every name of project ``gputrain-dev``. Each job, endpoint, model and endpoint config
named so is the project's by :class:`scripts.common.ProjectOwnership`: unless its ``Project`` tag
names another project, or, untagged, it is also named ``<other>-*`` for a project ``<other>``
whose data stack ``<other>-data`` is deployed in the region. Another project's are never touched.

``--destroy`` first deletes the serving stack ``<project>-serving`` if it exists. The app has it
whenever the promotion record names a live model (app.py reads it with the CLI's credentials), but
a serving stack deployed by hand with ``-c serving.enabled=true``, or with the record unreadable,
is not in the app that ``cdk destroy --all`` synthesizes (which then refuses, in one line, to leave
it running). Exit 0 when nothing is left running, 1 when something still is.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

from botocore.exceptions import ClientError, WaiterError

from scripts.cluster_job import ACTIVE as CLUSTER_JOB_ACTIVE
from scripts.cluster_job import STOP_WAIT_SECONDS as CLUSTER_STOP_WAIT_SECONDS
from scripts.cluster_job import Cluster, ClusterCommand, running_commands, send_stop, stop_cluster_job
from scripts.common import (
    AWS_CREDENTIALS,
    EXIT_FAILED,
    EXIT_OK,
    PROCESSING_JOB,
    RUNNING_JOB_STATES,
    TRAINING_JOB,
    TRANSFORM_JOB,
    TUNING_JOB,
    Deployment,
    JobKind,
    OperatorError,
    add_common_arguments,
    cdk_command,
    error_code,
    error_message,
    help_epilog,
    parse_operator_args,
    describe_job,
    project_jobs,
    project_stack_names,
    run,
    run_cdk,
    stack_name,
    seconds_argument,
)
from stacks.components.endpoint_spec import TEARDOWN_CONTEXT, endpoint_name
from scripts.stop import ACTIVE_JOB_STATES, end_warm_pool, stop_job
from stacks.components.training_job_notifications import gpu_idle_alarm_prefix



@dataclass
class Running:
    """What is still running.

    Attributes:
        executions: ARNs of RUNNING workflow executions.
        jobs: Names of the project's training jobs that are InProgress or Stopping.
        processing_jobs: Names of the project's processing jobs that are InProgress or Stopping.
        tuning_jobs: Names of the project's hyperparameter tuning jobs that are InProgress or
            Stopping: while one runs, its tuner starts new trials (training jobs) as others end.
        transform_jobs: Names of the project's batch transform jobs that are InProgress or Stopping.
        warm_pools: Names of the project's finished training jobs whose warm pool is still
            ``Available``: their instances bill until it ends.
        cluster_jobs: Commands of the GPU cluster's job document still Pending, InProgress or
            Cancelling (a job's ``run``, or the ``stop`` action sent to end one).
    """

    executions: list[str] = field(default_factory=list)
    jobs: list[str] = field(default_factory=list)
    processing_jobs: list[str] = field(default_factory=list)
    tuning_jobs: list[str] = field(default_factory=list)
    transform_jobs: list[str] = field(default_factory=list)
    warm_pools: list[str] = field(default_factory=list)
    cluster_jobs: list[ClusterCommand] = field(default_factory=list)
    unconfirmed_uploads: list[str] = field(default_factory=list)
    """Cluster jobs cancelled after their stop bound whose guards were not seen to finish their uploads:
    nothing runs, but removing the nodes could lose what they had not uploaded."""

    def runs(self) -> bool:
        """Whether anything still runs (or bills, a warm pool): what teardown waits for."""
        return bool(self.executions or self.jobs or self.processing_jobs or self.tuning_jobs or self.transform_jobs
                    or self.warm_pools or self.cluster_jobs)

    def __bool__(self) -> bool:
        return self.runs() or bool(self.unconfirmed_uploads)

    def names(self) -> list[str]:
        """Every job and execution name, for one progress line."""
        return (self.jobs + self.processing_jobs + [f"{n} (tuning job)" for n in self.tuning_jobs]
                + [f"{n} (transform job)" for n in self.transform_jobs] + [f"{n} (warm pool)" for n in self.warm_pools]
                + [f"cluster job {c.describe()}" for c in self.cluster_jobs] + [a.rsplit(":", 1)[-1] for a in self.executions]
                + [f"cluster job {n} (uploads not confirmed)" for n in self.unconfirmed_uploads])  # fmt: skip


def find_running(deployment: Deployment) -> Running:
    """RUNNING executions of the workflow, InProgress/Stopping ``<project>-*`` jobs (training, processing,
    tuning, transform) and the cluster's running commands."""
    running = Running()
    if deployment.has_training_stack():
        paginator = deployment.aws.client("stepfunctions").get_paginator("list_executions")
        machines = [deployment.training_outputs()["StateMachineArn"]]
        if "PipelineStateMachineArn" in deployment.training_outputs():
            machines.append(deployment.training_outputs()["PipelineStateMachineArn"])
        for arn in machines:
            for page in paginator.paginate(stateMachineArn=arn, statusFilter="RUNNING"):
                running.executions.extend(e["executionArn"] for e in page["executions"])
    for status in RUNNING_JOB_STATES:
        running.jobs.extend(project_job_names(deployment, TRAINING_JOB, status))
        running.processing_jobs.extend(project_job_names(deployment, PROCESSING_JOB, status))
        running.tuning_jobs.extend(project_job_names(deployment, TUNING_JOB, status))
        running.transform_jobs.extend(project_job_names(deployment, TRANSFORM_JOB, status))
    running.warm_pools.extend(project_warm_pools(deployment))
    cluster = Cluster.find(deployment)
    if cluster is not None:
        running.cluster_jobs.extend(running_commands(deployment.aws.client("ssm"), cluster.document))
    return running


def project_warm_pools(deployment: Deployment) -> list[str]:
    """Names of the project's training jobs whose SageMaker warm pool is ``Available`` (kept, billing)."""
    sagemaker = deployment.aws.client("sagemaker")
    owner = deployment.ownership()
    names: list[str] = []
    for page in sagemaker.get_paginator("list_training_jobs").paginate(NameContains=owner.prefix, WarmPoolStatusEquals="Available"):
        # Checked again: a service (or emulator) that ignored the filter must not end other jobs' pools.
        available = [j for j in page["TrainingJobSummaries"] if (j.get("WarmPoolStatus") or {}).get("Status") == "Available"]
        names.extend(j["TrainingJobName"] for j in deployment.owned(available, name_key=TRAINING_JOB.name_key, arn_key=TRAINING_JOB.arn_key))
    return names


def project_job_names(deployment: Deployment, kind: JobKind, status: str) -> list[str]:
    """Names of the project's ``kind`` jobs (:class:`scripts.common.ProjectOwnership`) in ``status``, all of them."""
    jobs = project_jobs(deployment, status=status, limit=sys.maxsize, kind=kind)
    return [j[kind.name_key] for j in jobs]


@dataclass
class Leftovers:
    """Models and endpoint configs of the project that no CloudFormation stack owns.

    Attributes:
        models: Model names.
        endpoint_configs: Endpoint config names.
        in_use: Those an endpoint still serves (kept until it is gone).
    """

    models: list[str] = field(default_factory=list)
    endpoint_configs: list[str] = field(default_factory=list)
    in_use: list[str] = field(default_factory=list)


def _stack_owned_names(deployment: Deployment) -> set[str]:
    """Names of the models, endpoint configs and endpoints that a project stack owns."""
    stacks = project_stack_names(deployment.config.project_name)
    owned: set[str] = set()
    cloudformation = deployment.aws.client("cloudformation")
    for page in cloudformation.get_paginator("list_stacks").paginate():
        for stack in page.get("StackSummaries", []):
            if stack["StackName"] in stacks and stack["StackStatus"] != "DELETE_COMPLETE":
                for resources in cloudformation.get_paginator("list_stack_resources").paginate(StackName=stack["StackId"]):
                    owned.update(
                        r.get("PhysicalResourceId", "").rsplit("/", 1)[-1]
                        for r in resources["StackResourceSummaries"]
                        if r["ResourceType"] in ("AWS::SageMaker::Model", "AWS::SageMaker::EndpointConfig", "AWS::SageMaker::Endpoint")
                    )
    return owned


def find_unowned_endpoints(deployment: Deployment) -> list[str]:
    """The project's endpoints (:class:`scripts.common.ProjectOwnership`) that no stack owns, except the
    serving stack's fixed ``<project>-endpoint`` (the stack removes it); ones already Deleting are left out."""
    sagemaker = deployment.aws.client("sagemaker")
    owned = _stack_owned_names(deployment) | {endpoint_name(deployment.config.project_name)}
    names = []
    for page in sagemaker.get_paginator("list_endpoints").paginate(NameContains=deployment.ownership().prefix):
        candidates = [e for e in page["Endpoints"] if e["EndpointName"] not in owned and e.get("EndpointStatus") != "Deleting"]
        names.extend(e["EndpointName"] for e in deployment.owned(candidates, name_key="EndpointName", arn_key="EndpointArn"))
    return sorted(names)


def delete_unowned_endpoints(deployment: Deployment) -> list[str]:
    """Delete :func:`find_unowned_endpoints` (their models and configs go with :func:`delete_leftovers`)."""
    names = find_unowned_endpoints(deployment)
    for name in names:
        print(f"deleting endpoint {name} (no stack owns it, so cdk destroy would leave it billing)")
        deployment.aws.client("sagemaker").delete_endpoint(EndpointName=name)
    return names


def find_leftovers(deployment: Deployment) -> Leftovers:
    """The promote step's models and endpoint configs: the project's (:class:`scripts.common.ProjectOwnership`),
    owned by no project stack."""
    sagemaker = deployment.aws.client("sagemaker")
    prefix = deployment.ownership().prefix
    owned = _stack_owned_names(deployment)
    serving: set[str] = set()
    for page in sagemaker.get_paginator("list_endpoints").paginate():
        for summary in page["Endpoints"]:
            if summary.get("EndpointStatus") == "Deleting":
                continue
            endpoint = sagemaker.describe_endpoint(EndpointName=summary["EndpointName"])
            config_names = {endpoint["EndpointConfigName"], (endpoint.get("PendingDeploymentSummary") or {}).get("EndpointConfigName")}
            for config_name in filter(None, config_names):
                serving.add(config_name)
                try:
                    config = sagemaker.describe_endpoint_config(EndpointConfigName=config_name)
                except ClientError:
                    continue
                serving.update(v["ModelName"] for v in config["ProductionVariants"])
    leftovers = Leftovers()
    for page in sagemaker.get_paginator("list_models").paginate(NameContains=prefix):
        models = [m for m in page["Models"] if m["ModelName"] not in owned]
        leftovers.models.extend(m["ModelName"] for m in deployment.owned(models, name_key="ModelName", arn_key="ModelArn"))
    for page in sagemaker.get_paginator("list_endpoint_configs").paginate(NameContains=prefix):
        configs = [c for c in page["EndpointConfigs"] if c["EndpointConfigName"] not in owned]
        leftovers.endpoint_configs.extend(c["EndpointConfigName"] for c in deployment.owned(configs, name_key="EndpointConfigName", arn_key="EndpointConfigArn"))
    leftovers.in_use = sorted(n for n in leftovers.models + leftovers.endpoint_configs if n in serving)
    return leftovers


def delete_leftovers(deployment: Deployment) -> Leftovers:
    """Delete the promote step's models and endpoint configs no endpoint uses; what is kept (in use)."""
    leftovers = find_leftovers(deployment)
    sagemaker = deployment.aws.client("sagemaker")
    for name in leftovers.endpoint_configs:
        if name not in leftovers.in_use:
            print(f"deleting endpoint config {name} (created by the pipeline's promote step)")
            sagemaker.delete_endpoint_config(EndpointConfigName=name)
    for name in leftovers.models:
        if name not in leftovers.in_use:
            print(f"deleting model {name} (created by the pipeline: its promote or transform step)")
            sagemaker.delete_model(ModelName=name)
    for name in leftovers.in_use:
        print(f"keeping {name}: the endpoint still serves it (deleted after cdk destroy --destroy removes the endpoint)")
    return Leftovers(in_use=leftovers.in_use)


def delete_idle_alarms(deployment: Deployment, running_jobs: Sequence[str] = ()) -> list[str]:
    """Deletes the GPU idle alarms of the project's jobs that are not running; the names deleted."""
    cloudwatch = deployment.aws.client("cloudwatch")
    prefix = gpu_idle_alarm_prefix(deployment.config.project_name)
    names = [
        alarm["AlarmName"]
        for page in cloudwatch.get_paginator("describe_alarms").paginate(AlarmNamePrefix=prefix, AlarmTypes=["MetricAlarm"])
        for alarm in page["MetricAlarms"]
        if alarm["AlarmName"][len(prefix) :] not in running_jobs
    ]
    for start in range(0, len(names), 100):  # DeleteAlarms takes at most 100 names
        cloudwatch.delete_alarms(AlarmNames=names[start : start + 100])
    for name in names:
        print(f"deleted GPU idle alarm {name} (its job is not running)")
    return names


def stop_running(
    deployment: Deployment,
    *,
    wait: bool = True,
    timeout: float = 900.0,
    interval: float = 15.0,
    sleep: Callable[[float], None] = time.sleep,
) -> Running:
    """Stop every running execution and job; with ``wait``, poll until they ended. What is left."""
    running = find_running(deployment)
    sfn = deployment.aws.client("stepfunctions")
    for arn in running.executions:
        print(f"stopping workflow execution {arn.rsplit(':', 1)[-1]}")
        sfn.stop_execution(executionArn=arn, error="StoppedByTeardown", cause="python -m scripts.teardown --stop-running")
    # Tuning jobs before training jobs: a trial stopped on its own is replaced by a new one while
    # its tuning job runs; StopHyperParameterTuningJob stops the trials and starts no more.
    for name in running.tuning_jobs:
        if _stop_in_progress(deployment, TUNING_JOB, name):
            print(f"stopping tuning job {name} (and its running trials)")
    for name in running.jobs:
        print(f"stopping training job {name}")
        job = describe_job(deployment.aws, name)
        if job is not None:
            stop_job(deployment, name, job=job)  # a warm pool's keep-alive set to 0 first
    ended_pools = {name for name in running.warm_pools if end_warm_pool(deployment, name)}
    for kind, names in ((PROCESSING_JOB, running.processing_jobs), (TRANSFORM_JOB, running.transform_jobs)):
        for name in names:
            if _stop_in_progress(deployment, kind, name):
                print(f"stopping {kind.label} {name}")
    unconfirmed = stop_cluster_jobs(deployment, running.cluster_jobs, wait_seconds=timeout if wait else 0.0, interval=interval,
                                    sleep=sleep)  # fmt: skip
    deadline = time.monotonic() + timeout
    while True:
        left = find_running(deployment)
        left.unconfirmed_uploads = unconfirmed
        if not left.runs() or not wait or time.monotonic() > deadline:
            return left
        # A job stopped above, or one that ended meanwhile, can leave a warm pool Available: ended
        # here, not waited for (it would bill, and outlast the timeout, for its whole keep-alive).
        ended_pools.update(name for name in left.warm_pools if name not in ended_pools and end_warm_pool(deployment, name))
        print(f"waiting for {', '.join(left.names())} to end ...")
        sleep(interval)


def _stop_in_progress(deployment: Deployment, kind: JobKind, name: str) -> bool:
    """:func:`scripts.stop.stop_job` of the ``kind`` job (only an InProgress one is asked: one already
    Stopping is only waited for); whether it was asked to stop. An error is printed, not raised."""
    try:
        return stop_job(deployment, name, kind) in ACTIVE_JOB_STATES
    except ClientError as err:
        # It may have ended in the meantime.
        print(f"  {kind.label} {name}: {error_code(err)}: {error_message(err)}")
        return False


def stop_cluster_jobs(
    deployment: Deployment,
    commands: Sequence[ClusterCommand],
    *,
    wait_seconds: float = CLUSTER_STOP_WAIT_SECONDS,
    interval: float = 15.0,
    sleep: Callable[[float], None] = time.sleep,
) -> list[str]:
    """Stop the cluster's running jobs as ``scripts.cluster_job stop`` does: the stop action, then the run
    waited for (at most ``wait_seconds``, capped at ``STOP_WAIT_SECONDS``) to upload and end by itself, and
    cancelled only after that, then its guards' uploads waited for (at most ``wait_seconds`` in all);
    ``wait_seconds`` 0 sends the stop action only. A stop action or a cancel already under way is only
    waited for. The jobs whose cancelled runs' uploads were not confirmed done."""
    to_stop = [c for c in commands if c.action == "run" and c.status in CLUSTER_JOB_ACTIVE]
    stopping = {c.job_name for c in commands if c.action == "stop"}
    cluster = Cluster.find(deployment) if to_stop else None
    unconfirmed: list[str] = []
    if cluster is None:
        return unconfirmed
    for command in to_stop:
        if command.job_name in stopping and wait_seconds <= 0:
            continue
        print(f"stopping cluster job {command.describe()}: SIGTERM into its containers, then its uploads waited for")
        try:
            if wait_seconds <= 0:
                send_stop(deployment, cluster, command.job_name)
            else:
                outcome = stop_cluster_job(deployment, cluster, command.job_name, command.command_id,
                                           send=command.job_name not in stopping, limit_seconds=wait_seconds,
                                           wait_seconds=min(wait_seconds, CLUSTER_STOP_WAIT_SECONDS), interval=interval,
                                           sleep=sleep)  # fmt: skip
                if not outcome.uploads_confirmed:
                    unconfirmed.append(command.job_name)
        except ClientError as err:
            # It may have ended in the meantime.
            print(f"  {command.job_name}: {error_code(err)}: {error_message(err)}")
    return unconfirmed


def serving_stack(deployment: Deployment) -> Optional[str]:
    """``<project>-serving`` when that stack exists."""
    name = stack_name(deployment.config, "serving")
    try:
        stacks = deployment.aws.client("cloudformation").describe_stacks(StackName=name)["Stacks"]
    except ClientError as err:
        if "does not exist" in error_message(err):
            return None
        raise
    return name if stacks and stacks[0]["StackStatus"] != "DELETE_COMPLETE" else None


def delete_serving_stack(deployment: Deployment, *, timeout: float, interval: float) -> None:
    """Delete the serving stack (endpoint, config, model, scaling, alarms) and wait for it."""
    name = serving_stack(deployment)
    if name is None:
        return
    print(f"deleting stack {name} (the endpoint, first: the data stack cdk destroy --all deletes exports to it)")
    cloudformation = deployment.aws.client("cloudformation")
    cloudformation.delete_stack(StackName=name)
    delay = max(1, int(interval))
    try:
        cloudformation.get_waiter("stack_delete_complete").wait(
            StackName=name, WaiterConfig={"Delay": delay, "MaxAttempts": max(1, int(timeout / delay))}
        )
    except WaiterError as err:
        raise OperatorError(f"{name} was not deleted ({err}); see its events in the CloudFormation console", EXIT_FAILED) from None


def destroy(deployment: Deployment, overrides: Sequence[str], *, timeout: float, interval: float) -> int:
    """The serving stack first (it imports the data stack's exports), then ``cdk destroy --all``,
    then the promote step's models and configs the endpoint held."""
    delete_serving_stack(deployment, timeout=timeout, interval=interval)
    returncode = cdk_destroy(overrides)
    if returncode == 0:
        delete_leftovers(deployment)
    return returncode


def cdk_destroy(overrides: Sequence[str] = ()) -> int:
    """``cdk destroy --all --force`` with the project's pinned CLI and the same ``-c`` overrides; its exit code."""
    # A serving model set by hand that the promotion record contradicts stops a deploy, not a teardown.
    command = cdk_command("destroy", "--all", "--force", "-c", f"{TEARDOWN_CONTEXT}=true", overrides=overrides)
    print("running: cdk " + " ".join(command[command.index("destroy") :]))
    return run_cdk(command)


def report(running: Running) -> None:
    for arn in running.executions:
        print(f"running workflow execution: {arn.rsplit(':', 1)[-1]}")
    for name in running.jobs:
        print(f"running training job: {name}")
    for name in running.processing_jobs:
        print(f"running processing job: {name}")
    for name in running.tuning_jobs:
        print(f"running tuning job: {name}")
    for name in running.transform_jobs:
        print(f"running transform job: {name}")
    for name in running.warm_pools:
        print(f"warm pool kept (billing) after training job: {name}")
    for command in running.cluster_jobs:
        print(f"running cluster job: {command.describe()}")
    for name in running.unconfirmed_uploads:
        print(f"cluster job {name}: cancelled, its guards' uploads not confirmed done (see python -m scripts.cluster_job logs {name})")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.teardown",
        description="Stop what cdk destroy cannot: running executions, training, processing, tuning, batch transform and "
        "cluster jobs, endpoints no stack owns.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=help_epilog(
            "python -m scripts.teardown",
            [
                ("", "list what is still running"),
                ("--stop-running", "stop it all and wait until it has ended"),
                ("--stop-running --destroy", "then delete the serving stack and run cdk destroy --all"),
            ],
            credentials=AWS_CREDENTIALS + " --destroy runs the CDK CLI with the same credentials.",
            done="nothing is left running (with --destroy: and the stacks are deleted)",
            failed="something is still running (listed), or still running after --timeout, or the destroy failed",
        ),
    )
    parser.add_argument("--stop-running", action="store_true", help="stop them (default: only list them)")
    parser.add_argument("--no-wait", dest="wait", action="store_false",
                        help="do not wait until they have ended (with --destroy: refused while anything still runs)")
    parser.add_argument("--timeout", type=seconds_argument, default=900.0, help="seconds to wait (default 900)")
    parser.add_argument("--interval", type=seconds_argument, default=15.0, help="seconds between polls (default 15)")
    parser.add_argument("--destroy", action="store_true", help="afterwards run cdk destroy --all --force")
    add_common_arguments(parser)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args, deployment = parse_operator_args(build_parser(), argv)
    if not args.stop_running:
        running = find_running(deployment)
        endpoints = find_unowned_endpoints(deployment)
        if running or endpoints:
            report(running)
            for name in endpoints:
                print(f"live endpoint no stack owns: {name}")
            print("stop them with: python -m scripts.teardown --stop-running")
            return EXIT_FAILED
        print("nothing running")
        serving = serving_stack(deployment)
        if serving and not args.destroy:
            print(f"{serving} is deployed (its endpoint bills by the hour): --destroy removes it with the rest")
        return EXIT_OK if not args.destroy else destroy(deployment, args.context, timeout=args.timeout, interval=args.interval)
    left = stop_running(deployment, wait=args.wait, timeout=args.timeout, interval=args.interval)
    if left and (args.wait or args.destroy):
        report(left)
        if not args.wait:
            why = "--no-wait: something still runs"
        elif not left.runs():
            why = "a cancelled cluster job's uploads are not confirmed done"
        else:
            why = f"still running after {args.timeout:.0f}s"
        print(f"error: {why}; not destroying", file=sys.stderr)
        return EXIT_FAILED
    print("nothing left running" if not left else "stop requested; not waiting")
    delete_unowned_endpoints(deployment)
    delete_leftovers(deployment)
    delete_idle_alarms(deployment, left.jobs if left else ())
    if args.destroy:
        return destroy(deployment, args.context, timeout=args.timeout, interval=args.interval)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(run(main))
