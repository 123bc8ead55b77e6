"""Start a training job, print its name and console link.

Usage (from the repository root)::

    python -m scripts.launch                                  # the configured job
    python -m scripts.launch --instance-type ml.g5.12xlarge --instance-count 2 --hp epochs=20 --on-demand
    python -m scripts.launch --watch                          # then follow it (scripts.watch)
    python -m scripts.launch --direct                         # CreateTrainingJob without the workflow
    python -m scripts.launch --dry-run [--direct]             # print what would be sent
    python -m scripts.launch --source-dir my_code --entry-point train.py --hp epochs=5   # your own script
    python -m scripts.launch --resume-from gputrain-20261128-061500-ab12 --hp epochs=80  # continue a stopped job
    python -m scripts.launch --channel train=train/2026-11/ --channel validation=train/held-out/   # your data
    python -m scripts.launch --pipeline --promote                # raw data -> shards -> model -> endpoint
    python -m scripts.launch --pipeline --skip-process --hp epochs=5
    python -m scripts.launch --process --direct --process-arg=--shards --process-arg=4   # one processing job
    python -m scripts.launch --tune ranges.json --max-jobs 4 --dry-run   # a tuning job over ranges.json (the workflow)
    python -m scripts.launch --tune ranges.json --direct                 # CreateHyperParameterTuningJob itself

By default the job runs through the deployed workflow (``<project>-training``): the execution,
named after the job, carries only the overrides and the workflow fills in the hardened rest.
``--direct`` calls ``CreateTrainingJob`` itself with the request built by the same function the
workflow's definition is built from (:func:`stacks.components.training_job_spec.create_training_job_request`),
using the stacks' outputs and ``cdk.json``; use it where Step Functions cannot run the job (a
local emulator) or to bypass the workflow. Options: ``--instance-type``, ``--instance-count``,
``--spot``/``--on-demand``, ``--hp KEY=VALUE`` (repeatable), ``--name`` (must start with
``<project>-``), plus ``--region``, ``--profile``, ``-c KEY=VALUE``.

``--dry-run`` works offline too: when no stack can be read (no region, no credentials, no
network, not deployed) it prints the full CreateTrainingJob request the deployed workflow's
template holds, built from the config by the same function, with each deploy-time value shown as
the stack output it comes from (``<gputrain-training.JobRoleArn>``), and says why on stderr.

Your own script (SageMaker script mode): ``--source-dir DIR --entry-point train.py`` packs DIR
into ``sourcedir.tar.gz``, uploads it KMS-encrypted to ``code/<job name>/`` in the artifacts
bucket (the only code prefix the job role may read), and the job gets it as its ``code``
channel, as the SageMaker SDK does for network-isolated jobs. ``--legacy-keras`` runs the script
with Keras 2 (tf-keras). Hyperparameters reach the script as ``--key value`` arguments.

Data: ``--channel NAME=PREFIX`` (repeatable) gives the job channel ``NAME`` from ``PREFIX`` in the
datasets bucket (``NAME=s3://BUCKET/PREFIX`` names the URI itself), over the configured
``training_job.channels`` (``--channel train=train/2026-11/`` replaces the ``train`` channel;
a new name adds one, as ``estimator.fit({...})`` does). The launch rules refuse, in one line, a URI
outside the prefixes the job role reads (the configured channels' and ``processing.output_prefix``).
With ``--tune`` every trial reads them; with ``--pipeline`` the train step reads them beside the
processing run's outputs (``train``, ``validation``: names ``--channel`` may not take), or in their
place with ``--skip-process``. End a folder's prefix with ``/``: SageMaker reads every key that starts
with it (``train/2026`` is ``train/2026-11/`` and ``train/2026-12/``).

``--resume-from JOB`` continues a training job that ended (stopped, out of runtime, failed, or done
and to be trained further with a larger ``--hp epochs``): the new job runs as JOB ran (its instance
type and count, spot or not, hyperparameters, channels and code, from DescribeTrainingJob), with
this command line's options over them, and uses JOB's checkpoint location
(``checkpoints/<name>/``), so the trainer resumes at JOB's last checkpoint, in the middle of an
epoch where a SIGTERM left it. It is refused while JOB runs (two jobs would write the same
checkpoints), for a job that kept none, and for a tuning trial (each keeps its checkpoints in
a folder of its own).

The pipeline (``--pipeline``): one execution of ``<project>-pipeline`` runs process -> train ->
promote (-> transform), each step optional (``--skip-process``, ``--skip-train``; promote only with
``--promote``, and only to an endpoint deployed once with ``scripts.promote``; with
``transform.enabled`` a batch transform of the scoring prefix ends every run that trains, unless
``--skip-transform``). It names its jobs ``<project>-<execution>-process`` / ``-train`` /
``-transform`` and the model ``<project>-<execution>``
(``--name`` names the execution; default ``<UTC time>-<4 hex>``). Processing options:
``--input-uri`` (raw data under ``s3://<datasets>/<processing.input_prefix>``),
``--process-arg=ARG`` (repeatable; the built-in transform's ``--shards 4`` is
``--process-arg=--shards --process-arg=4``), ``--process-instance-type``,
``--process-instance-count``, and a processing script of your own with
``--process-source-dir DIR --process-entry-point prep.py``; the training options above apply to
the train step. It prints ``execution: <arn>`` and the names of what it will create; follow it
with ``python -m scripts.watch --execution <name>`` (or ``--watch``).

``--process --direct`` creates one processing job with the request the pipeline builds
(:func:`stacks.components.processing_job_spec.create_processing_job_request`), after checking
that its output prefix is empty, and prints ``processing job: <name>``.

``--tune RANGES.json`` runs one hyperparameter tuning job through the deployed workflow: the execution,
named after the tuning job, carries the training overrides and ``tuning`` (the ranges and the trial
caps), and the workflow's Tune branch checks them as a training launch's, checks the ranges, and calls
``createHyperParameterTuningJob.sync``. ``--tune --direct`` calls CreateHyperParameterTuningJob itself
with the same request (:func:`stacks.components.tuning_job_spec.create_tuning_job_request`): every trial
is the training job this command would launch (the training options above apply to all trials;
``--hp`` values are static), with the hyperparameters of RANGES.json tuned. Either way each range's
bounds and values are checked with the image's hyperparameter rules first, and the tuning job is priced
at ``--max-jobs`` x instances x price x maximum runtime (capped by ``tuning.max_jobs`` and
``tuning.max_parallel_jobs``). ``--name`` names the tuning job (at most 32 characters). ``--dry-run``
prints the execution input (with ``--direct``, the request), offline too. It prints
``tuning job: <name>``; promote its best job with ``python -m scripts.promote --best-of <name>``.
``--watch`` then follows the tuning job until it ends (``scripts.watch --tuning``: each trial's status,
sampled hyperparameters and objective, the best trial so far; exit code = its outcome).
``--pipeline --tune RANGES.json`` makes the pipeline's train step that tuning job (``train.tuning``): its
trials read the processing run's outputs, it is priced instead of the training job, and its best trial's
model goes on to promote and transform.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from scripts import pipeline
from scripts.common import (
    AWS_CREDENTIALS,
    AWS_EXIT,
    DATA_OUTPUTS,
    EXIT_STOPPED,
    PIPELINE_OUTPUTS,
    PROCESSING_OUTPUTS,
    RUNNING_JOB_STATES,
    TRAINING_OUTPUTS,
    Aws,
    Deployment,
    OperatorError,
    UsageError,
    add_common_arguments,
    describe_execution,
    describe_job,
    execution_console_url,
    find_sagemaker_job,
    help_epilog,
    job_console_url,
    parse_hyperparameters,
    parse_operator_args,
    project_jobs,
    run,
    stack_name,
    tuning_console_url,
)
from scripts.cost import JobPrice, job_price, tuning_price
from scripts.source_code import code_key, upload_code
from stacks.components.processing_job_spec import (
    ProcessingOptions,
    ProcessingTemplate,
    ProcessingValues,
    TRAIN_OUTPUT,
    VALIDATION_OUTPUT,
    create_processing_job_request,
    processing_output_uri,
    resolve_processing,
)
from stacks.config import PlatformConfig
from stacks.components.training_job_spec import (
    CHECKPOINT_PREFIX,
    CODE_CHANNEL,
    LEGACY_KERAS_ENV,
    PROGRAM_HYPERPARAMETER,
    JobResources,
    JobTemplate,
    LaunchError,
    LaunchOptions,
    LaunchValues,
    code_uri_prefix,
    create_training_job_request,
    default_job_name,
    load_metric_definitions,
    resolve_launch,
)
from stacks.components.tuning_job_spec import (
    CHECKPOINT_PER_JOB_ENV,
    TuningOptions,
    TuningValues,
    create_tuning_job_request,
    default_tuning_job_name,
    parse_ranges,
    resolve_tuning,
    tuning_execution_input,
)

_PLACEHOLDER_RESOURCES = JobResources(
    role_arn="", image_uri="", datasets_bucket="", artifacts_bucket="", key_arn="", subnet_ids=(), security_group_ids=()
)


@dataclass(frozen=True)
class Launched:
    """A started job.

    Attributes:
        job_name: The training job's name.
        console_url: Its SageMaker console page (empty for an offline dry run).
        execution_arn: The workflow execution running it (``None`` for a direct launch).
        request: What was sent (execution input, or the CreateTrainingJob request).
        prices: What each job costs (:func:`training_price`, :func:`processing_price`).
    """

    job_name: str
    console_url: str
    execution_arn: Optional[str]
    request: dict[str, Any]
    prices: tuple[JobPrice, ...] = ()


@dataclass
class OfflineDeployment(Deployment):
    """A dry run's deployment where no stack can be read (no region, no credentials, no network, not
    deployed): each stack output as ``<stack.Output>``, the output it is read from when deployed (the
    config's bucket names where it sets them), and no AWS call.

    Attributes:
        reason: Why no stack could be read, in one line.
    """

    reason: str = ""

    def outputs(self, unit: str, required: Sequence[str]) -> dict[str, str]:
        stack = stack_name(self.config, unit)
        known = {"data": DATA_OUTPUTS, "training": (*TRAINING_OUTPUTS, *PIPELINE_OUTPUTS, *PROCESSING_OUTPUTS)}.get(unit, ())
        values = {key: f"<{stack}.{key}>" for key in (*known, *required)}
        if unit == "data":
            # Explicitly named buckets are known before the deploy; generated names are not.
            for key, name in (("DatasetsBucketName", self.config.data.datasets_bucket_name),
                              ("ArtifactsBucketName", self.config.data.artifacts_bucket_name)):
                if key in values and name:
                    values[key] = name
        return values

    @property
    def region(self) -> str:
        return self.aws.session.region_name or "<region>"


def offline_resources(config: PlatformConfig) -> JobResources:
    """What a job runs with, as an offline dry run shows it (:class:`OfflineDeployment`)."""
    return OfflineDeployment(config, Aws(boto3.Session(region_name="us-east-1"))).job_resources()


def for_dry_run(deployment: Deployment, args: argparse.Namespace) -> Deployment:
    """``deployment`` when the stacks a dry run of ``args`` reads can be read, else an :class:`OfflineDeployment`."""
    try:
        deployment.outputs("data", DATA_OUTPUTS)
        if args.pipeline:
            deployment.pipeline_arn()
        if args.pipeline or args.process:
            deployment.processing_resources()
        else:
            deployment.training_outputs()
    except _UNREADABLE_STACK as err:
        return OfflineDeployment(deployment.config, deployment.aws, reason=_one_line(err))
    return deployment


_UNREADABLE_STACK = (OperatorError, BotoCoreError, ClientError)
"""What reading the stacks raises without region, credentials, network or deployment."""


def parse_channels(items: Sequence[str], datasets_bucket: Callable[[], str], *, offline: bool = False) -> dict[str, str]:
    """``--channel NAME=PREFIX`` (a key prefix in the datasets bucket, as ``scripts.cluster_job`` takes
    it) or ``NAME=s3://BUCKET/PREFIX`` -> ``{NAME: s3 URI}``. Whether the job role may read it is the
    launch rules' to say (:func:`check_options`), as the workflow's. ``offline``: a dry run that reads no
    stack cannot tell whether another bucket than the config's datasets bucket is the deployment's, so such
    a URI is refused, naming the ``NAME=PREFIX`` form."""
    channels: dict[str, str] = {}
    for item in items:
        name, sep, where = (part.strip() for part in item.partition("="))
        scheme, has_scheme, rest = where.partition("://")
        if not sep or not name or not where or where.startswith("/") or (has_scheme and scheme.lower() != "s3"):
            raise UsageError(f"channel {item!r} is not NAME=PREFIX (a key prefix in the datasets bucket) or NAME=s3://BUCKET/PREFIX, "
                             "e.g. --channel train=train/2026-11/")  # fmt: skip
        if name in channels:
            raise UsageError(f"channel {name} is given twice (--channel {name}=...): give each channel once")
        if not has_scheme:
            channels[name] = f"s3://{datasets_bucket()}/{where}"
            continue
        if offline and rest.split("/", 1)[0] != datasets_bucket():
            raise UsageError(f"channel {name}: offline, no stack says whether {rest.split('/', 1)[0]} is the datasets bucket; give the "
                             f"channel as a key prefix in it (--channel {name}=PREFIX), or dry-run with the deployment's credentials")  # fmt: skip
        channels[name] = f"s3://{rest}"
    return channels


def options_from_args(args: argparse.Namespace, deployment: Optional[Deployment] = None) -> LaunchOptions:
    """The launch options the command line asks for (the code is uploaded later, by :func:`launch`).

    ``deployment`` gives the datasets bucket a ``--channel NAME=PREFIX`` is read from (an offline one
    its ``<stack.Output>``); without one, only ``NAME=s3://...`` channels are taken.
    """

    def datasets_bucket() -> str:
        if deployment is None:
            raise UsageError("--channel NAME=PREFIX needs the deployed datasets bucket here: give NAME=s3://BUCKET/PREFIX")
        return deployment.outputs("data", DATA_OUTPUTS)["DatasetsBucketName"]

    if args.source_dir is None and (args.entry_point or args.legacy_keras):
        raise UsageError("--entry-point and --legacy-keras need --source-dir DIR (the directory with your script)")
    if args.source_dir is not None and not args.entry_point:
        raise UsageError("--source-dir needs --entry-point, the script to run inside it, e.g. --entry-point train.py")
    return LaunchOptions(
        job_name=args.name,
        instance_type=args.instance_type,
        instance_count=args.instance_count,
        use_spot=args.spot,
        hyperparameters=parse_hyperparameters(args.hp),
        entry_point=args.entry_point,
        legacy_keras=True if args.legacy_keras else None,
        channels=parse_channels(args.channel, datasets_bucket, offline=isinstance(deployment, OfflineDeployment)),
        keep_alive_seconds=args.keep_alive,
    )


def resumed_options(deployment: Deployment, options: LaunchOptions, job: str, *, own_code: bool) -> LaunchOptions:
    """``options`` over ``job``'s own launch, with its checkpoint location (``launch --resume-from JOB``).

    From ``DescribeTrainingJob``: the instance type and count, spot, the hyperparameters (less the
    platform's ``sagemaker_*``), the channels, and with ``own_code`` false (no ``--source-dir``) its
    script and Keras flag; what ``options`` sets wins, its hyperparameters merged over the job's. The
    checkpoint location is the job's own, which is the first job's of a chain of resumes.

    Raises:
        OperatorError: no such job; it is still running; it kept no checkpoints, or they are not where
            this deployment's jobs keep theirs, or none was written; it is a tuning trial.
    """
    if options.job_name == job:
        raise UsageError(f"--resume-from {job} starts a new job: give it another --name (or none, for a generated one)")
    if isinstance(deployment, OfflineDeployment):
        print(f"note: offline, {job} cannot be read: the request resumes from checkpoints/{job}/ with this command line's "
              "options only", file=sys.stderr)  # fmt: skip
        return replace(options, checkpoint_name=job)
    described = describe_job(deployment.aws, job)
    if described is None:
        raise OperatorError(f"no training job {job} in {deployment.region} to resume (python -m scripts.list_jobs lists them)")
    status = described["TrainingJobStatus"]
    if status in RUNNING_JOB_STATES:
        raise OperatorError(f"refused: {job} is {status}, and the new job would write the same checkpoints: wait for it to end, "
                            f"or stop it (python -m scripts.stop {job}), then resume it")  # fmt: skip
    environment = described.get("Environment") or {}
    if environment.get(CHECKPOINT_PER_JOB_ENV):
        raise OperatorError(f"refused: {job} is a tuning trial, whose checkpoints are in a folder of their own: promote it "
                            f"(python -m scripts.promote {job}), or launch its hyperparameters afresh")  # fmt: skip
    uri = (described.get("CheckpointConfig") or {}).get("S3Uri")
    if not uri:
        raise OperatorError(f"refused: {job} kept no checkpoints (it ran with training_job.checkpointing off): nothing to "
                            "resume from; launch it afresh")  # fmt: skip
    bucket = deployment.job_resources().artifacts_bucket
    location = f"s3://{bucket}/{CHECKPOINT_PREFIX}"
    name = uri.removeprefix(location).rstrip("/")
    if not uri.startswith(location) or "/" in name or not name:
        raise OperatorError(f"refused: {job}'s checkpoints are at {uri}, not in {location}<job>/, the only checkpoints this "
                            "deployment's jobs may read")  # fmt: skip
    listed = deployment.aws.client("s3").list_objects_v2(Bucket=bucket, Prefix=f"{CHECKPOINT_PREFIX}{name}/", MaxKeys=1000)
    if not listed.get("KeyCount"):
        raise OperatorError(f"refused: {uri} holds no checkpoint ({job} ended before it wrote one): launch it afresh")
    writer = _running_job_writing(deployment, f"{location}{name}/")
    if writer is not None:
        raise OperatorError(f"refused: {writer} (a resume of it too) is running and writes {location}{name}/, which the new "
                            f"job would write as well: wait for {writer} to end, or stop it (python -m scripts.stop {writer})")  # fmt: skip
    hyperparameters = {k: v for k, v in (described.get("HyperParameters") or {}).items() if not k.startswith("sagemaker_")}
    channels = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in described.get("InputDataConfig") or []
                if "S3DataSource" in c.get("DataSource", {})}  # fmt: skip
    code_uri = channels.pop(CODE_CHANNEL, None)
    program = (described.get("HyperParameters") or {}).get(PROGRAM_HYPERPARAMETER)
    if program and program.startswith('"'):
        program = json.loads(program)  # the SageMaker SDK's estimators send every value JSON-encoded
    resources = described["ResourceConfig"]
    script = {} if own_code or not code_uri else {
        "code_uri": code_uri, "entry_point": program, "legacy_keras": environment.get(LEGACY_KERAS_ENV) == "1" or None,
    }  # fmt: skip
    print(
        f"resuming {job} ({status}): from its checkpoints in {uri}, on its {resources['InstanceCount']} x "
        f"{resources['InstanceType']}, with its hyperparameters, channels{' and code' if script else ''}, and this "
        "command line's options over them"
    )
    return replace(
        options,
        instance_type=options.instance_type or resources["InstanceType"],
        instance_count=options.instance_count or resources["InstanceCount"],
        use_spot=bool(described.get("EnableManagedSpotTraining")) if options.use_spot is None else options.use_spot,
        keep_alive_seconds=resources.get("KeepAlivePeriodInSeconds", 0) if options.keep_alive_seconds is None else options.keep_alive_seconds,
        hyperparameters={**hyperparameters, **options.hyperparameters},
        channels={**channels, **options.channels},
        **{key: getattr(options, key) if getattr(options, key) is not None else value for key, value in script.items()},
        checkpoint_name=name,
    )


def _running_job_writing(deployment: Deployment, location: str) -> Optional[str]:
    """A running (or stopping) training job of the project whose checkpoint location is ``location``, if any."""
    for status in RUNNING_JOB_STATES:
        for summary in project_jobs(deployment, status=status, limit=sys.maxsize):
            described = describe_job(deployment.aws, summary["TrainingJobName"]) or {}
            if ((described.get("CheckpointConfig") or {}).get("S3Uri") or "").rstrip("/") + "/" == location:
                return summary["TrainingJobName"]
    return None


def refuse_taken_name(deployment: Deployment, name: str, *, dry_run: bool) -> None:
    """Refuse ``name`` when a job (training, tuning, processing, transform) or a training workflow execution
    has it: the code goes to ``code/<name>/`` before SageMaker would refuse the duplicate, and would replace
    the code of that job (which a spot restart of it would then run)."""
    if dry_run or isinstance(deployment, OfflineDeployment):
        return
    found = find_sagemaker_job(deployment.aws, name)
    what = found[0].label if found else None
    if what is None and deployment.has_training_stack() and describe_execution(deployment.aws, deployment.execution_arn(name)):
        what = "training workflow execution"
    if what is not None:
        raise OperatorError(f"a {what} named {name} exists in {deployment.region}; nothing was uploaded: launch under "
                            "another --name (or without one, for a generated name)")


def upload_source(deployment: Deployment, options: LaunchOptions, source_dir: Path, *, dry_run: bool) -> LaunchOptions:
    """Packs and uploads the code (KMS, like every object of the platform); returns options with its URI."""
    refuse_taken_name(deployment, str(options.job_name), dry_run=dry_run)
    return replace(options, code_uri=upload_code(deployment, source_dir, str(options.entry_point), str(options.job_name), dry_run=dry_run))


def with_job_name(deployment: Deployment, options: LaunchOptions) -> LaunchOptions:
    """``options`` with a name: the given one, else ``<project>-<UTC time>-<4 hex>``."""
    if options.job_name:
        return options
    template = JobTemplate.from_config(deployment.config, _PLACEHOLDER_RESOURCES, metric_definitions=())
    return replace(options, job_name=default_job_name(template, suffix=secrets.token_hex(2)))


def direct_request(deployment: Deployment, options: LaunchOptions) -> dict[str, Any]:
    """The CreateTrainingJob request for ``options``, from the stacks' outputs and the config."""
    template = JobTemplate.from_config(deployment.config, deployment.job_resources(), load_metric_definitions())
    try:
        return create_training_job_request(template, resolve_launch(template, options))
    except LaunchError as err:
        raise OperatorError(str(err)) from None


def check_options(deployment: Deployment, options: LaunchOptions, *, code_pending: bool = False) -> LaunchValues:
    """Refuse what the workflow would refuse, before starting an execution (one clear line); the values.

    Args:
        code_pending: The options' script (``entry_point``) is not uploaded yet: its code URI is taken
            as one under the code prefix, checked for real once it is uploaded. A script's own
            hyperparameters are then passed through, as they will be.
    """
    # A code URI and channels (a resumed job's) are checked against the deployed buckets, as the workflow does.
    resources = deployment.job_resources() if options.code_uri or options.channels else _PLACEHOLDER_RESOURCES
    template = JobTemplate.from_config(deployment.config, resources, metric_definitions=())
    if code_pending and options.entry_point:
        options = replace(options, code_uri=f"{code_uri_prefix(template)}{PENDING_CODE}")
    try:
        return resolve_launch(template, options)
    except LaunchError as err:
        raise OperatorError(str(err)) from None


PENDING_CODE = "pending-upload/sourcedir.tar.gz"
"""Where :func:`check_options` takes a script's code to be before it is uploaded."""


def training_price(config: PlatformConfig, values: LaunchValues) -> JobPrice:
    """What a training job with ``values`` costs per hour, and the most it can."""
    tj = config.training_job
    return job_price(
        "training job", str(values.job_name), str(values.instance_type), int(values.instance_count),  # type: ignore[call-overload]
        spot=bool(values.use_spot), volume_gb=tj.volume_size_gb, max_runtime_seconds=tj.max_runtime_seconds,
        max_wait_seconds=tj.max_wait_seconds, keep_alive_seconds=int(values.keep_alive_seconds),  # type: ignore[call-overload]
    )


def processing_price(config: PlatformConfig, values: ProcessingValues) -> JobPrice:
    """What a processing job with ``values`` costs per hour, and the most it can."""
    pr = config.processing
    return job_price(
        "processing job", str(values.job_name), str(values.instance_type), int(values.instance_count),  # type: ignore[call-overload]
        spot=False, volume_gb=pr.volume_size_gb, max_runtime_seconds=pr.max_runtime_seconds,
    )


def transform_price(config: PlatformConfig, job_name: str) -> JobPrice:
    """What the pipeline's batch transform job costs per hour, and the most it can (its step's timeout)."""
    tr = config.transform
    return job_price(
        "transform job", job_name, tr.instance_type, tr.instance_count, spot=False, volume_gb=0,
        max_runtime_seconds=tr.max_runtime_seconds,
    )


def confirm_spend(deployment: Deployment, prices: Sequence[JobPrice], *, yes: bool, dry_run: bool) -> None:
    """Refuse a real launch whose jobs can together cost more than ``cost.confirm_above_usd``, unless ``yes``.

    Raises:
        UsageError: the launch needs ``--yes`` (nothing has been uploaded or started).
    """
    limit = deployment.config.cost.confirm_above_usd
    most = sum(price.most_usd for price in prices)
    if dry_run or yes or most <= limit:
        return
    raise UsageError(
        f"this launch can cost up to ${most:,.2f} at its maximum runtime, over cost.confirm_above_usd = ${limit:,}: "
        "add --yes to launch it (the price lines above say what each job costs)"
    )


def launch(
    deployment: Deployment,
    options: LaunchOptions,
    *,
    direct: bool = False,
    dry_run: bool = False,
    source_dir: Optional[Path] = None,
    yes: bool = False,
    resume_from: Optional[str] = None,
) -> Launched:
    """Start the job through the workflow, or with CreateTrainingJob when ``direct``.

    Args:
        deployment: Config, session and outputs.
        options: Overrides; a missing job name is generated.
        direct: Call CreateTrainingJob instead of starting a workflow execution.
        dry_run: Build and return the request without sending (or uploading) anything.
        source_dir: Your script's directory (with ``options.entry_point``): packed and uploaded first.
        yes: Launch even when the job can cost more than ``cost.confirm_above_usd`` (:func:`confirm_spend`).
        resume_from: A training job to continue from its checkpoints, run as it ran (:func:`resumed_options`).
    """
    if resume_from is not None:
        options = resumed_options(deployment, options, resume_from, own_code=source_dir is not None)
    options = with_job_name(deployment, options)
    # A bad option is an error, online or not; the code's location is checked once it is uploaded.
    price = training_price(deployment.config, check_options(deployment, options, code_pending=source_dir is not None))
    confirm_spend(deployment, [price], yes=yes, dry_run=dry_run)
    if source_dir is not None:
        options = upload_source(deployment, options, source_dir, dry_run=dry_run)
        check_options(deployment, options)
    # Offline, the request the workflow's template holds (its execution input would say little).
    direct = direct or isinstance(deployment, OfflineDeployment)
    return replace(_launch(deployment, options, direct=direct, dry_run=dry_run), prices=(price,))


def _one_line(err: Exception) -> str:
    """The first line of an error's own message (no class name: botocore's and ours say what happened)."""
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def _launch(deployment: Deployment, options: LaunchOptions, *, direct: bool, dry_run: bool) -> Launched:
    name = str(options.job_name)
    region = deployment.region
    if direct:
        request = direct_request(deployment, options)
        if not dry_run:
            deployment.aws.client("sagemaker").create_training_job(**request)
        return Launched(name, job_console_url(region, name), None, request)

    state_machine_arn = deployment.training_outputs()["StateMachineArn"]
    execution_input = options.state_machine_input()
    execution_arn = deployment.execution_arn(name)
    if not dry_run:
        execution_arn = deployment.aws.client("stepfunctions").start_execution(
            stateMachineArn=state_machine_arn, name=name, input=json.dumps(execution_input)
        )["executionArn"]
    return Launched(name, job_console_url(region, name), execution_arn, execution_input)


# --------------------------------------------------------------------------------------------
# Processing jobs and the pipeline
# --------------------------------------------------------------------------------------------


def processing_console_url(region: str, job_name: str) -> str:
    """The SageMaker console page of a processing job."""
    return f"https://{region}.console.aws.amazon.com/sagemaker/home?region={region}#/processing-jobs/{job_name}"


def processing_options_from_args(args: argparse.Namespace, *, job_name: Optional[str] = None) -> ProcessingOptions:
    """The processing options the command line asks for (the code is uploaded later)."""
    if (args.process_source_dir is None) != (args.process_entry_point is None):
        raise UsageError(
            "a processing script needs --process-source-dir DIR and --process-entry-point SCRIPT together, "
            "e.g. --process-source-dir prep --process-entry-point prep.py"
        )
    return ProcessingOptions(
        job_name=job_name,
        instance_type=args.process_instance_type,
        instance_count=args.process_instance_count,
        input_uri=args.input_uri,
        arguments=list(args.process_arg) if args.process_arg else None,
        entry_point=args.process_entry_point,
    )


def processing_values(deployment: Deployment, options: ProcessingOptions) -> ProcessingValues:
    """``options`` resolved and checked as the pipeline checks them (one line on refusal)."""
    template = ProcessingTemplate.from_config(deployment.config, deployment.processing_resources())
    try:
        return resolve_processing(template, options)
    except LaunchError as err:
        raise OperatorError(str(err)) from None


def processing_request(deployment: Deployment, options: ProcessingOptions) -> dict[str, Any]:
    """The CreateProcessingJob request for ``options``, from the stacks' outputs and the config."""
    template = ProcessingTemplate.from_config(deployment.config, deployment.processing_resources())
    return create_processing_job_request(template, processing_values(deployment, options))


def launch_processing(
    deployment: Deployment, options: ProcessingOptions, *, dry_run: bool = False, source_dir: Optional[Path] = None, yes: bool = False
) -> Launched:
    """Create one processing job directly (CreateProcessingJob), refusing a non-empty output prefix."""
    name = options.job_name or (
        f"{deployment.job_name_prefix}{datetime.now(timezone.utc):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}-process"
    )
    options = replace(options, job_name=name)
    # A bad option is refused before anything is uploaded.
    checked = replace(options, code_uri=None, entry_point=None) if source_dir is not None else options
    price = processing_price(deployment.config, processing_values(deployment, checked))
    confirm_spend(deployment, [price], yes=yes, dry_run=dry_run)
    if source_dir is not None:
        refuse_taken_name(deployment, name, dry_run=dry_run)
        code_uri = upload_code(deployment, source_dir, str(options.entry_point), name, dry_run=dry_run)
        options = replace(options, code_uri=code_uri)
    request = processing_request(deployment, options)
    if not dry_run:
        data = deployment.outputs("data", DATA_OUTPUTS)
        prefix = f"{deployment.config.processing.output_prefix}{name}/"
        pipeline.check_output_prefix_empty(deployment.aws.client("s3"), data["DatasetsBucketName"], prefix)
        deployment.aws.client("sagemaker").create_processing_job(**request)
    return Launched(name, processing_console_url(deployment.region, name), None, request, (price,))


@dataclass(frozen=True)
class PipelineLaunch:
    """A started (or, dry, prepared) pipeline execution.

    Attributes:
        names: What it will create.
        execution_arn: The execution.
        execution_input: What it was started with.
        prices: What each of its jobs costs.
    """

    names: pipeline.PipelineNames
    execution_arn: str
    execution_input: dict[str, Any]
    prices: tuple[JobPrice, ...] = ()


def pipeline_input(
    deployment: Deployment,
    args: argparse.Namespace,
    execution_name: str,
    *,
    dry_run: bool,
) -> tuple[dict[str, Any], pipeline.PipelineNames, list[JobPrice]]:
    """The execution input for the command line's steps (code uploaded unless ``dry_run``), the names and
    the jobs' prices (a launch over ``cost.confirm_above_usd`` is refused first, unless ``--yes``)."""
    project = deployment.config.project_name
    execution_input: dict[str, Any] = {}
    if not args.skip_process:
        execution_input["process"] = {}
    if not args.skip_train:
        execution_input["train"] = {"tuning": {}} if args.tune is not None else {}
    if args.promote:
        execution_input["promote"] = True
    if not execution_input:
        raise UsageError("--skip-process and --skip-train with no --promote leave the pipeline nothing to do")
    transform = deployment.config.transform.enabled
    if args.skip_transform:
        if not transform:
            raise UsageError("--skip-transform: the deployed pipeline has no transform step (transform.enabled is false)")
        execution_input["transform"] = False
    names = pipeline.pipeline_names(project, execution_name, execution_input, transform=transform)
    pipeline.check_names(names)

    prices = pipeline_prices(deployment, args, names)
    confirm_spend(deployment, prices, yes=args.yes, dry_run=dry_run)
    if names.processing_job:
        options = processing_options_from_args(args, job_name=names.processing_job)
        if args.process_source_dir is not None:
            refuse_taken_name(deployment, names.processing_job, dry_run=dry_run)
            code_uri = upload_code(deployment, args.process_source_dir, str(args.process_entry_point), names.processing_job, dry_run=dry_run)
            options = replace(options, code_uri=code_uri)
            processing_values(deployment, options)
        execution_input["process"] = {k: v for k, v in options.state_machine_input().items() if k != "job_name"}
    elif args.input_uri or args.process_arg or args.process_source_dir or args.process_instance_type or args.process_instance_count:
        raise UsageError("processing options (--input-uri, --process-*) have no effect with --skip-process")

    if names.training_job:
        options = _with_pipeline_channels(deployment, args, names, replace(options_from_args(args, deployment), job_name=names.training_job))
        if args.source_dir is not None:
            options = upload_source(deployment, options, args.source_dir, dry_run=dry_run)
            check_options(deployment, options)
        execution_input["train"] = {k: v for k, v in options.state_machine_input().items() if k != "job_name"}
    if names.tuning_job:
        tuning = tuning_options(deployment, args, job_name=names.tuning_job)
        if args.source_dir is not None:
            refuse_taken_name(deployment, names.tuning_job, dry_run=dry_run)
            code_uri = upload_code(deployment, args.source_dir, str(args.entry_point), names.tuning_job, dry_run=dry_run)
            tuning = replace(tuning, training=replace(tuning.training, code_uri=code_uri))
        checked = _on_pipeline_channels(deployment, args, names, tuning)
        _, values = tuning_values(deployment, checked)
        # The pipeline names the tuning job and, unless --channel adds channels, feeds it the processing run's outputs itself.
        sent = checked if tuning.training.channels else tuning
        execution_input["train"] = {k: v for k, v in tuning_execution_input(sent, values).items() if k != "job_name"}
    return execution_input, names, prices


def _pipeline_train_channels(deployment: Deployment, args: argparse.Namespace, names: pipeline.PipelineNames,
                             channels: Mapping[str, str]) -> dict[str, str]:
    """The channels the pipeline's train step reads, over the config's: with a processing step, its outputs
    (``train``, and ``validation`` unless a processing script of the user's writes them) and ``channels``
    (``--channel``) beside them; without one, ``channels``."""
    if not names.processing_job:
        return dict(channels)
    template = ProcessingTemplate.from_config(deployment.config, deployment.processing_resources())
    out = str(processing_output_uri(template, names.processing_job))
    outputs = {TRAIN_OUTPUT: f"{out}{TRAIN_OUTPUT}/"}
    if args.process_source_dir is None:
        outputs[VALIDATION_OUTPUT] = f"{out}{VALIDATION_OUTPUT}/"
    taken = sorted(set(outputs) & set(channels))
    if taken:
        raise UsageError(f"--channel {', '.join(taken)}: the pipeline's train step reads the processing run's output there; "
                         "give your channel another name, or train on it without processing (--skip-process)")  # fmt: skip
    return {**outputs, **channels}


def _with_pipeline_channels(deployment: Deployment, args: argparse.Namespace, names: pipeline.PipelineNames,
                            options: LaunchOptions) -> LaunchOptions:
    """``options`` with the channels its train step reads where ``--channel`` adds some (without, the pipeline
    derives them itself from the processing run)."""
    if not options.channels:
        return options
    return replace(options, channels=_pipeline_train_channels(deployment, args, names, options.channels))


def _on_pipeline_channels(deployment: Deployment, args: argparse.Namespace, names: pipeline.PipelineNames,
                          options: TuningOptions) -> TuningOptions:
    """``options`` on the channels the pipeline's train step reads (:func:`_pipeline_train_channels`), else the config's."""
    channels = _pipeline_train_channels(deployment, args, names, options.training.channels)
    return replace(options, training=replace(options.training, channels=channels))


def pipeline_prices(deployment: Deployment, args: argparse.Namespace, names: pipeline.PipelineNames) -> list[JobPrice]:
    """The pipeline's jobs checked (before anything is uploaded) and priced."""
    prices = []
    if names.processing_job:
        options = processing_options_from_args(args, job_name=names.processing_job)
        prices.append(processing_price(deployment.config, processing_values(deployment, replace(options, entry_point=None))))
    if names.training_job:
        options = _with_pipeline_channels(deployment, args, names, replace(options_from_args(args, deployment), job_name=names.training_job))
        prices.append(training_price(deployment.config, check_options(deployment, options, code_pending=args.source_dir is not None)))
    if names.tuning_job:
        tuning = _on_pipeline_channels(deployment, args, names, tuning_options(deployment, args, job_name=names.tuning_job))
        _, checked = tuning_values(deployment, tuning, code_pending=args.source_dir is not None)
        prices.append(price_of_tuning(deployment.config, checked))
    if names.transform_job:
        prices.append(transform_price(deployment.config, names.transform_job))
    return prices


def launch_pipeline(deployment: Deployment, args: argparse.Namespace) -> PipelineLaunch:
    """Start one execution of ``<project>-pipeline`` (or, with ``--dry-run``, only build its input)."""
    execution_name = args.name or pipeline.default_execution_name()
    execution_input, names, prices = pipeline_input(deployment, args, execution_name, dry_run=args.dry_run)
    arn = deployment.pipeline_execution_arn(execution_name)
    if not args.dry_run:
        arn = deployment.aws.client("stepfunctions").start_execution(
            stateMachineArn=deployment.pipeline_arn(), name=execution_name, input=json.dumps(execution_input)
        )["executionArn"]
    return PipelineLaunch(names, arn, execution_input, tuple(prices))


# --------------------------------------------------------------------------------------------
# Hyperparameter tuning
# --------------------------------------------------------------------------------------------


def read_ranges(path: Path) -> Any:
    """RANGES.json's object (its ranges are checked by :func:`parse_ranges`)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise UsageError(f"--tune {path}: cannot read it ({err.strerror or err})") from None
    except json.JSONDecodeError as err:
        raise UsageError(f"--tune {path}: not JSON ({err.msg} at line {err.lineno} column {err.colno})") from None


def tuning_options(deployment: Deployment, args: argparse.Namespace, *, job_name: Optional[str] = None) -> TuningOptions:
    """The tuning launch the command line asks for, named ``job_name`` (the pipeline's), ``--name`` or
    a generated name (the code is uploaded later)."""
    template = JobTemplate.from_config(deployment.config, _PLACEHOLDER_RESOURCES, metric_definitions=())
    training = options_from_args(args, deployment)
    name = job_name or args.name or default_tuning_job_name(template, suffix=secrets.token_hex(2))
    try:
        ranges = parse_ranges(read_ranges(args.tune), source=str(args.tune))
    except LaunchError as err:
        raise OperatorError(str(err)) from None
    return TuningOptions(ranges, replace(training, job_name=name), args.max_jobs, args.max_parallel_jobs)


def tuning_values(deployment: Deployment, options: TuningOptions, *, code_pending: bool = False) -> tuple[JobTemplate, TuningValues]:
    """The checked tuning launch (a script's code taken as uploaded when ``code_pending``, as :func:`check_options`)."""
    template = JobTemplate.from_config(deployment.config, deployment.job_resources(), load_metric_definitions())
    if code_pending and options.training.entry_point:
        options = replace(options, training=replace(options.training, code_uri=f"{code_uri_prefix(template)}{PENDING_CODE}"))
    try:
        return template, resolve_tuning(template, deployment.config.tuning, options)
    except LaunchError as err:
        raise OperatorError(str(err)) from None


def price_of_tuning(config: PlatformConfig, values: TuningValues) -> JobPrice:
    """What the tuning job can cost: its most trials, each priced as one training job (:func:`tuning_price`)."""
    tj, training = config.training_job, values.training
    return tuning_price(
        values.job_name, str(training.instance_type), int(training.instance_count), max_jobs=values.max_jobs,  # type: ignore[call-overload]
        spot=bool(training.use_spot), volume_gb=tj.volume_size_gb, max_runtime_seconds=tj.max_runtime_seconds,
        max_wait_seconds=tj.max_wait_seconds,
    )


def launch_tuning(deployment: Deployment, args: argparse.Namespace) -> Launched:
    """Start one tuning job through the workflow (an execution with ``tuning`` in its input), or with
    ``--direct`` create it (CreateHyperParameterTuningJob); with ``--dry-run`` only build what would be sent."""
    options = tuning_options(deployment, args)
    _, checked = tuning_values(deployment, options, code_pending=args.source_dir is not None)
    price = price_of_tuning(deployment.config, checked)
    confirm_spend(deployment, [price], yes=args.yes, dry_run=args.dry_run)
    if args.source_dir is not None:
        refuse_taken_name(deployment, str(checked.job_name), dry_run=args.dry_run)
        code_uri = upload_code(deployment, args.source_dir, str(args.entry_point), str(checked.job_name), dry_run=args.dry_run)
        options = replace(options, training=replace(options.training, code_uri=code_uri))
    template, values = tuning_values(deployment, options)
    name, console = str(values.job_name), tuning_console_url(deployment.region, str(values.job_name))
    if args.direct:
        request = create_tuning_job_request(template, values)
        if not args.dry_run:
            deployment.aws.client("sagemaker").create_hyper_parameter_tuning_job(**request)
        return Launched(name, console, None, request, (price,))
    execution_input = tuning_execution_input(options, values)
    execution_arn = deployment.execution_arn(name)
    if not args.dry_run:
        execution_arn = deployment.aws.client("stepfunctions").start_execution(
            stateMachineArn=deployment.training_outputs()["StateMachineArn"], name=name, input=json.dumps(execution_input)
        )["executionArn"]
    return Launched(name, console, execution_arn, execution_input, (price,))


def _main_tuning(deployment: Deployment, args: argparse.Namespace) -> int:
    launched = launch_tuning(deployment, args)
    if not _report(deployment, launched, "tuning job", dry_run=args.dry_run):
        return 0
    print(f"best job, once it ends: python -m scripts.promote --best-of {launched.job_name}")
    if args.watch:
        from scripts.watch import follow_tuning

        return follow_tuning(deployment, launched.job_name)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.launch",
        description="Start a SageMaker training job (through the workflow by default), the pipeline, or a processing job.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=help_epilog(
            "python -m scripts.launch",
            [
                ("--dry-run", "print the request the configured job would send, and send nothing"),
                ("--instance-type ml.g5.12xlarge --instance-count 2 --hp epochs=20 --watch", "a bigger job, followed to its end"),
                ("--pipeline --promote", "raw data -> shards -> model -> the deployed endpoint"),
            ],
            credentials=AWS_CREDENTIALS + " A training job's --dry-run needs none: with no stack to read it prints "
            "the request from cdk.json.",
            done="started (the job or execution and its console link are printed); --dry-run: printed; "
            "--watch: the job completed",
            failed="--watch: the job or the execution failed",
            cannot_proceed=AWS_EXIT + ", a launch the platform's rules refuse (instance type or count, name, hyperparameters)",
            more={EXIT_STOPPED: "--watch: the job or the execution was stopped"},
        ),
    )
    parser.add_argument("--instance-type", help="SageMaker GPU type, e.g. ml.g5.12xlarge (default: config)")
    parser.add_argument("--instance-count", type=int, help="instances (default: config)")
    spot = parser.add_mutually_exclusive_group()
    spot.add_argument("--spot", dest="spot", action="store_true", default=None, help="managed spot training")
    spot.add_argument("--on-demand", dest="spot", action="store_false", help="on-demand instances")
    parser.add_argument("--hp", action="append", default=[], metavar="KEY=VALUE", help="hyperparameter override (repeatable)")
    parser.add_argument(
        "--channel", action="append", default=[], metavar="NAME=PREFIX",
        help="input channel NAME from PREFIX in the datasets bucket, or NAME=s3://BUCKET/PREFIX (repeatable); over the "
        "configured training_job.channels, under a prefix the job role reads",
    )
    parser.add_argument("--name", help="job name, <project>-... (default: <project>-<UTC time>-<random>)")
    parser.add_argument("--source-dir", type=Path, help="your training code's directory (SageMaker script mode)")
    parser.add_argument("--entry-point", help="the script in --source-dir to run, e.g. train.py")
    parser.add_argument("--legacy-keras", action="store_true", help="run the script with Keras 2 (tf-keras)")
    parser.add_argument(
        "--keep-alive", type=int, metavar="SECONDS",
        help="keep the instances as a SageMaker warm pool this long after the job, 0-3600, on demand only; they bill meanwhile "
        "(default: config training_job.keep_alive_seconds)",
    )
    parser.add_argument(
        "--resume-from", metavar="JOB",
        help="continue training job JOB from its last checkpoint, run as JOB ran (its instance type and count, spot, "
        "hyperparameters, channels and code), with this command line's options over them",
    )
    parser.add_argument(
        "--upload-only",
        action="store_true",
        help="upload --source-dir and print its code_key for the GPU cluster (cluster.code_key); start no job",
    )
    parser.add_argument("--direct", action="store_true", help="call CreateTrainingJob instead of starting the workflow")
    what = parser.add_mutually_exclusive_group()
    what.add_argument("--pipeline", action="store_true", help="start the pipeline: process -> train (-> promote)")
    what.add_argument("--process", action="store_true", help="with --direct: create one processing job")
    parser.add_argument(
        "--tune", type=Path, metavar="RANGES.json",
        help="run a hyperparameter tuning job over the ranges in RANGES.json through the workflow "
        "(with --direct: CreateHyperParameterTuningJob; with --pipeline: as the pipeline's train step)",
    )
    parser.add_argument(
        "--max-jobs", type=int, metavar="N",
        help="--tune: trials, at most tuning.max_jobs (default: that cap; a Grid runs all its combinations: no fewer)",
    )
    parser.add_argument(
        "--max-parallel-jobs", type=int, metavar="N", help="--tune: trials at once, at most tuning.max_parallel_jobs (default: that cap)"
    )
    parser.add_argument("--skip-process", action="store_true", help="pipeline: no processing step (train on the configured channels and --channel)")
    parser.add_argument("--skip-train", action="store_true", help="pipeline: no training step")
    parser.add_argument("--promote", action="store_true", help="pipeline: serve the trained model on the deployed endpoint")
    parser.add_argument(
        "--skip-transform", action="store_true", help="pipeline: no batch transform at the end (deployments with transform.enabled)"
    )
    parser.add_argument("--input-uri", help="processing: raw data, s3://<datasets>/<processing.input_prefix>... (default: all of it)")
    parser.add_argument(
        "--process-arg", action="append", default=[], metavar="ARG",
        help="processing container argument (repeatable; write --process-arg=--shards --process-arg=4)",
    )
    parser.add_argument("--process-instance-type", help="processing GPU type (default: config processing.instance_type)")
    parser.add_argument("--process-instance-count", type=int, help="processing instances (default: config)")
    parser.add_argument("--process-source-dir", type=Path, help="your processing script's directory")
    parser.add_argument("--process-entry-point", help="the script in --process-source-dir to run, e.g. prep.py")
    parser.add_argument("--dry-run", action="store_true", help="print the request and the price, send nothing (offline too)")
    parser.add_argument(
        "--yes", action="store_true",
        help="launch even when the jobs can cost more than cost.confirm_above_usd (default $100) at their maximum runtime",
    )
    parser.add_argument(
        "--watch", action="store_true",
        help="follow the job (the tuning job, the pipeline execution) until it ends (exit code = outcome)",
    )
    add_common_arguments(parser)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args, deployment = parse_operator_args(build_parser(), argv)
    if args.dry_run:
        deployment = for_dry_run(deployment, args)
        if isinstance(deployment, OfflineDeployment):
            print(
                f"note: no deployed stack could be read ({deployment.reason}); an offline dry run: what would be sent, "
                "from the config, with each deploy-time value as <stack.Output>",
                file=sys.stderr,
            )
    if args.upload_only:
        if args.source_dir is None:
            raise UsageError("--upload-only needs --source-dir DIR and --entry-point SCRIPT")
        if args.channel:
            raise UsageError("--upload-only uploads code and starts no job: --channel does not apply (the cluster's jobs take "
                             "python -m scripts.cluster_job run JOB --channel NAME=PREFIX)")
        options = with_job_name(deployment, options_from_args(args, deployment))
        uploaded = upload_source(deployment, options, args.source_dir, dry_run=args.dry_run)
        key = code_key(str(options.job_name))
        print(f"code: {uploaded.code_uri}")
        print(f"code_key: {key}")
        print(
            "cluster: npx cdk deploy gputrain-cluster "
            f"-c gpu_training.cluster.code_key={key} -c gpu_training.cluster.entry_point={args.entry_point}"
            + (" -c gpu_training.cluster.legacy_keras=true" if args.legacy_keras else "")
        )
        return 0
    _refuse_mixed_modes(args)
    if args.pipeline:
        return _main_pipeline(deployment, args)
    if args.process:
        return _main_processing(deployment, args)
    if args.tune is not None:
        return _main_tuning(deployment, args)
    launched = launch(
        deployment, options_from_args(args, deployment), direct=args.direct, dry_run=args.dry_run, source_dir=args.source_dir, yes=args.yes,
        resume_from=args.resume_from,
    )
    if not _report(deployment, launched, "job", dry_run=args.dry_run):
        return 0
    if args.watch:
        from scripts.watch import follow

        return follow(deployment, launched.job_name)
    return 0


def _refuse_mixed_modes(args: argparse.Namespace) -> None:
    if args.resume_from is not None:
        other = [flag for flag, on in (("--pipeline", args.pipeline), ("--process", args.process), ("--tune", args.tune is not None),
                                       ("--upload-only", args.upload_only)) if on]  # fmt: skip
        if other:
            raise UsageError(f"--resume-from continues one training job; {', '.join(other)} does not apply")
    pipeline_only = [
        flag for flag, on in (("--skip-process", args.skip_process), ("--skip-train", args.skip_train), ("--promote", args.promote),
                              ("--skip-transform", args.skip_transform)) if on
    ]
    if pipeline_only and not args.pipeline:
        raise UsageError(f"{', '.join(pipeline_only)} only apply to --pipeline")
    processing = args.input_uri or args.process_arg or args.process_source_dir or args.process_entry_point
    processing = processing or args.process_instance_type or args.process_instance_count is not None
    if processing and not (args.pipeline or args.process):
        raise UsageError("--input-uri and --process-* options need --pipeline or --process --direct")
    if args.process:
        if not args.direct:
            raise UsageError(
                "--process creates one processing job directly: add --direct (through the workflow: --pipeline --skip-train)"
            )
        training = [flag for flag, on in (("--hp", args.hp), ("--channel", args.channel), ("--source-dir", args.source_dir),
                                          ("--spot/--on-demand", args.spot is not None),
                                          ("--instance-type", args.instance_type), ("--instance-count", args.instance_count),
                                          ("--keep-alive", args.keep_alive is not None)) if on]
        if training:
            raise UsageError(f"{', '.join(training)} are training options; a processing job takes --process-* options")
    if args.pipeline and args.direct:
        raise UsageError("--pipeline starts the pipeline's state machine; --direct does not apply")
    if args.pipeline and args.channel and args.skip_train:
        raise UsageError("--channel: --skip-train leaves the pipeline no step that reads channels")
    _refuse_tuning_mixes(args)


def _refuse_tuning_mixes(args: argparse.Namespace) -> None:
    if args.tune is None:
        if args.max_jobs is not None or args.max_parallel_jobs is not None:
            raise UsageError("--max-jobs and --max-parallel-jobs only apply to --tune RANGES.json")
        return
    if args.process:
        raise UsageError("--tune tunes a training job; --process creates a processing job: choose one")
    if args.pipeline and args.skip_train:
        raise UsageError("--tune makes the pipeline's train step a tuning job; --skip-train drops that step: choose one")
    # --watch follows the tuning job (scripts.watch --tuning), or with --pipeline the execution.
    if args.keep_alive is not None:
        raise UsageError("--keep-alive does not apply to --tune: a tuning job's trials keep no warm pool")


def _print_prices(prices: Sequence[JobPrice], *, dry_run: bool) -> None:
    """One line per job; a dry run's go to stderr, its stdout being the request alone."""
    for price in prices:
        print(price.line(), file=sys.stderr if dry_run else sys.stdout)


def _report(deployment: Deployment, launched: Launched, kind: str, *, dry_run: bool) -> bool:
    """The prices, then a dry run's request; or the job (``<kind>: <name>``), its console page and its
    workflow execution. Whether a job was started."""
    _print_prices(launched.prices, dry_run=dry_run)
    if dry_run:
        print(json.dumps(launched.request, indent=2, sort_keys=True))
        return False
    print(f"{kind}: {launched.job_name}")
    print(f"console: {launched.console_url}")
    if launched.execution_arn:
        print(f"execution: {execution_console_url(deployment.region, launched.execution_arn)}")
    return True


def _main_processing(deployment: Deployment, args: argparse.Namespace) -> int:
    options = processing_options_from_args(args, job_name=args.name)
    launched = launch_processing(deployment, options, dry_run=args.dry_run, source_dir=args.process_source_dir, yes=args.yes)
    if not _report(deployment, launched, "processing job", dry_run=args.dry_run):
        return 0
    print(f"outputs: s3://{deployment.outputs('data', DATA_OUTPUTS)['DatasetsBucketName']}/{deployment.config.processing.output_prefix}{launched.job_name}/")
    return 0


def _main_pipeline(deployment: Deployment, args: argparse.Namespace) -> int:
    launched = launch_pipeline(deployment, args)
    _print_prices(launched.prices, dry_run=args.dry_run)
    if args.dry_run:
        print(json.dumps(launched.execution_input, indent=2, sort_keys=True))
        for line in launched.names.lines():
            print(line, file=sys.stderr)
        return 0
    print(f"execution: {launched.execution_arn}")
    print(f"console: {execution_console_url(deployment.region, launched.execution_arn)}")
    for line in launched.names.lines():
        print(line)
    if args.watch:
        from scripts.watch import follow_pipeline

        return follow_pipeline(deployment, launched.execution_arn)
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
