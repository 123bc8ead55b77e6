"""The platform's one typed configuration, validated once before any construct is made.

Settings live under the ``gpu_training`` context key in ``cdk.json``. Any single setting can
be overridden from the command line with a dotted context key, e.g.::

    npx cdk synth -c gpu_training.cluster.node_count=2 -c gpu_training.training_job.use_spot=false

The ``gpu_training.`` prefix may be left out (``-c cluster.node_count=2``), as the operator scripts
allow, but not the section (``-c use_spot=false`` is refused: ``training_job.use_spot``); a misspelled
key is refused with the right one, never dropped (:func:`platform_overrides`).
An override's value is read as JSON when it parses (numbers, booleans, ``null``, objects), else as a
plain string; a value that opens as JSON must parse. An object merges into the setting's object
(one hyperparameter overridden keeps the others); ``null`` in it removes an entry.

Every problem is reported as one :class:`ConfigError` line that names the setting, the value
and the fix; ``app.py`` prints it and exits non-zero before CDK builds anything.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import ipaddress
import json
import re
import types
import typing
from collections import abc
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

from stacks.components import hyperparameter_rules
from stacks.gpu_instances import SAGEMAKER_PREFIX, GpuInstanceType, gpu_instance_types, lookup, sagemaker_hosting_instance_types
from stacks.sagemaker_limits import FieldRule, processing_job_limits, training_job_limits, transform_job_limits, tuning_job_limits

CONTEXT_KEY = "gpu_training"
MAX_KEEP_ALIVE_SECONDS = 3600
"""SageMaker's longest warm pool (``ResourceConfig.KeepAlivePeriodInSeconds``)."""


class ConfigError(ValueError):
    """A setting is wrong. ``str(err)`` is one line: setting, value, what to do."""

    def __init__(self, setting: str, value: Any, problem: str, fix: str, *, verbatim: bool = False) -> None:
        self.setting = setting
        self.value = value
        # verbatim: a string shown as typed (a -c value that is not JSON), not as a JSON string.
        shown = value if verbatim and isinstance(value, str) else json.dumps(value, default=str)
        if len(shown) > _MAX_SHOWN_VALUE:
            size = len(value) if isinstance(value, str) else len(shown)
            shown = f"{shown[:_MAX_SHOWN_VALUE]}... ({size} characters)"
        super().__init__(f"{setting} = {shown}: {problem}; {fix}")


_MAX_SHOWN_VALUE = 120
"""A value longer than this is cut short in the message, which stays one readable line."""


# --------------------------------------------------------------------------------------------
# Sections
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DataConfig:
    """Buckets for datasets and artifacts (the stateful data plane).

    Attributes:
        datasets_bucket_name: Explicit name of the datasets bucket. Default ``None``: CloudFormation
            generates a unique name (recommended; names are global).
        artifacts_bucket_name: Explicit name of the bucket for models, checkpoints and outputs.
            Default ``None`` (generated).
        checkpoint_expiration_days: Objects under ``checkpoints/`` in the artifacts bucket expire
            after this many days. Default 30.
        noncurrent_version_expiration_days: Overwritten or deleted object versions are kept this
            many days, then removed. Default 90.
        access_log_expiration_days: S3 server access logs and VPC flow logs are kept this many
            days. Default 365.
    """

    datasets_bucket_name: Optional[str] = None
    artifacts_bucket_name: Optional[str] = None
    checkpoint_expiration_days: int = 30
    noncurrent_version_expiration_days: int = 90
    access_log_expiration_days: int = 365


@dataclass(frozen=True)
class ImageConfig:
    """The training image repository and the tag that deploys run.

    Attributes:
        repository_name: ECR repository name (lowercase, explicit so that names are stable).
            Default ``gputrain-training``.
        tag: Image tag jobs and nodes run. Never ``latest``: tags are immutable. Default
            ``tf2.21.0-gpu-1``.
        keep_images: The repository keeps this many most recent images. Default 20.
    """

    repository_name: str = "gputrain-training"
    tag: str = "tf2.21.0-gpu-1"
    keep_images: int = 20


DEFAULT_INTERFACE_ENDPOINTS: tuple[str, ...] = (
    "ecr.api",
    "ecr.dkr",
    "logs",
    "monitoring",
    "sts",
    "sagemaker.api",
    "ssm",
    "ssmmessages",
    "ec2messages",
    "cloudformation",
)


@dataclass(frozen=True)
class NetworkConfig:
    """The training VPC. Flow logs are always on (to the access-log bucket).

    Attributes:
        vpc_cidr: IPv4 CIDR of the VPC, /16 to /24 and large enough for each zone's subnets (a /20
            for SageMaker, a /23 for the GPU nodes, a /24 public one with NAT gateways): a /18 at least
            for two zones. Default ``10.40.0.0/16``.
        max_azs: Availability zones to spread subnets over. Default 2.
        nat_gateways: NAT gateways. Default 0: subnets are isolated and AWS services are reached
            through VPC endpoints only. A value above 0 adds egress to the internet.
        interface_endpoints: Interface endpoint service names (``ecr.api``, ``logs``...: what follows
            ``com.amazonaws.<region>.``), each once (``ecr.api`` and ``ecr-api`` are one). Default:
            what training needs (ECR, CloudWatch Logs and metrics, STS, SageMaker API, SSM
            session access, CloudFormation for the boot-time signal).
        dns_firewall: A Route 53 Resolver DNS Firewall on the VPC that answers AWS service
            names (and the VPC's ``*.internal`` hostnames) only, so nothing in the VPC can
            tunnel data out through DNS. Default ``None``: on where something runs without
            network isolation (the GPU cluster's nodes, or ``serving.network_isolation=false``).
        dns_allowed_domains: Further names the firewall answers (``pypi.org``,
            ``*.pythonhosted.org`` for pip through a NAT gateway). Default none.
    """

    vpc_cidr: str = "10.40.0.0/16"
    max_azs: int = 2
    nat_gateways: int = 0
    interface_endpoints: tuple[str, ...] = DEFAULT_INTERFACE_ENDPOINTS
    dns_firewall: Optional[bool] = None
    dns_allowed_domains: tuple[str, ...] = ()


LATEST_DLAMI_DRIVER_BRANCH = 595
"""NVIDIA driver branch of the current Base OSS NVIDIA-driver DLAMIs (default toolkit CUDA 13.2).

The ``latest`` SSM parameter follows new releases, so the nodes get at least this branch."""

LAST_VOLTA_DRIVER_BRANCH = 580
"""The last NVIDIA driver branch that supports Volta (compute capability 7.0, the V100 of p3 types)."""

LATEST_DLAMI_MIN_COMPUTE_CAPABILITY = (7, 5)
"""Oldest GPU architecture the latest DLAMI supports: driver 595 dropped Volta, and CUDA 13 no
longer compiles for compute capability below 7.5."""

_AMI_ID_RE = re.compile(r"^ami-(?:[0-9a-f]{8}|[0-9a-f]{17})$")


@dataclass(frozen=True)
class PinnedDlamiConfig:
    """An explicit Deep Learning AMI for the nodes, instead of the flavour's ``latest`` release.

    Needed for GPUs the latest DLAMI no longer supports (p3/p3dn: V100, compute capability 7.0):
    pin a DLAMI release whose NVIDIA driver branch still supports them (580 or older). AMI ids are
    per region: pin the id of the region you deploy to.

    Attributes:
        ami_id: The AMI id, ``ami-`` and 8 or 17 hex digits, from the DLAMI release notes or
            ``aws ec2 describe-images``. No default.
        nvidia_driver_branch: The NVIDIA driver branch that AMI ships (the release notes'
            "NVIDIA Driver" line, e.g. 580 for 580.95.05), checked against the nodes' GPUs.
            No default.
    """

    ami_id: str
    nvidia_driver_branch: int


@dataclass(frozen=True)
class ClusterConfig:
    """GPU EC2 nodes on the Deep Learning AMI.

    Attributes:
        enabled: Deploy the cluster stack. Default ``True``.
        instance_type: EC2 GPU instance type from the GPU table. Default ``g5.xlarge``.
        node_count: Number of nodes, at most 64. Default 1. Above 1: placement group, EFA where
            supported.
        availability_zone: Which of the VPC's availability zones the nodes run in, as an index:
            0 is the first of the ``network.max_azs`` zones the VPC spans (the region's zones in
            alphabetical order, ``us-east-1a`` then ``us-east-1b``...), up to ``max_azs - 1``.
            Every node goes into that zone's ``Cluster`` subnet (one placement group, one
            subnet). GPU types are not offered in every zone: when the deploy fails with an
            "Unsupported ... Availability Zone" error, pick a zone the error lists. Moving the
            nodes replaces them. Default 0.
        expected_gpus_per_node: GPUs each node must show. Default ``None``: the table's count;
            when set it must equal the table's count.
        dlami_flavour: Deep Learning AMI flavour in the SSM path
            ``/aws/service/deeplearning/ami/x86_64/<flavour>/latest/ami-id``. Default the Ubuntu
            22.04 OSS NVIDIA driver GPU DLAMI (driver, CUDA, Docker, NVIDIA container toolkit),
            which runs the TensorFlow training image.
        pinned_dlami: An explicit DLAMI instead of the flavour's ``latest`` (see
            :class:`PinnedDlamiConfig`). Default ``None``: the latest release, cached in
            ``cdk.context.json``. Required for GPUs older than compute capability 7.5 (p3).
        root_volume_gb: Encrypted gp3 root volume size. Default 200.
        signal_timeout_minutes: How long CloudFormation waits for a node's health signal before
            failing the deploy. Default 30.
        start_training_on_boot: Start the training container once the node is healthy.
            Default ``False``.
        idle_stop_minutes: Stop a node whose GPUs stayed idle this long (at most 1440); 0 disables.
            Default 60.
        idle_gpu_utilization_percent: GPU utilization below which a node counts as idle.
            Default 5.
        max_lifetime_hours: Hard maximum lifetime of a node, after which it is shut down;
            0 disables. Default 24.
        code_key: Key of a user's ``sourcedir.tar.gz`` in the artifacts bucket, under ``code/``
            (``python -m scripts.launch --source-dir DIR --entry-point train.py --upload-only``
            puts one there). With ``entry_point``, the nodes run that script (SageMaker script
            mode, MultiWorkerMirroredStrategy across nodes) instead of the built-in trainer.
            Default ``None``.
        entry_point: The script inside ``code_key`` to run, e.g. ``train.py``. Default ``None``.
        legacy_keras: Run the script with Keras 2 (tf-keras, ``TF_USE_LEGACY_KERAS=1``).
            Default ``False``.
    """

    enabled: bool = True
    instance_type: str = "g5.xlarge"
    node_count: int = 1
    availability_zone: int = 0
    expected_gpus_per_node: Optional[int] = None
    dlami_flavour: str = "base-oss-nvidia-driver-gpu-ubuntu-22.04"
    pinned_dlami: Optional[PinnedDlamiConfig] = None
    root_volume_gb: int = 200
    signal_timeout_minutes: int = 30
    start_training_on_boot: bool = False
    idle_stop_minutes: int = 60
    idle_gpu_utilization_percent: int = 5
    max_lifetime_hours: int = 24
    code_key: Optional[str] = None
    entry_point: Optional[str] = None
    legacy_keras: bool = False

    @property
    def gpus_per_node(self) -> int:
        """The GPU count every node must show (validated against the table)."""
        return typing.cast(int, self.expected_gpus_per_node)


INPUT_MODES = ("File", "FastFile")


@dataclass(frozen=True)
class GpuIdleAlarmConfig:
    """A CloudWatch alarm per training job on SageMaker's ``GPUUtilization`` (``/aws/sagemaker/TrainingJobs``).

    Created when a project job starts and deleted when it ends; in ALARM it notifies the training
    jobs' topic (``NotificationTopicArn``) and, with ``stop_job``, stops the job.

    Attributes:
        enabled: Watch the project's jobs. Default ``True``.
        minutes: Alarm after the GPUs stayed below the threshold this many consecutive minutes
            (5-1440; the first host's one-minute averages). Default 30: longer than the start of
            a typical job (data download, user code install), when the GPUs idle by design.
        threshold_percent: Mean utilization per GPU below which a minute counts as idle (1-100);
            scaled by the instance type's GPU count, as SageMaker sums its GPUs. Default 10.
        stop_job: Also stop a job whose alarm fires (its last checkpoint stays). Default ``False``.
    """

    enabled: bool = True
    minutes: int = 30
    threshold_percent: int = 10
    stop_job: bool = False


@dataclass(frozen=True)
class TrainingJobConfig:
    """The SageMaker training job declared through Step Functions.

    Attributes:
        enabled: Deploy the training-job stack. Default ``True``.
        instance_type: SageMaker GPU type (``ml.`` + a GPU table row that SageMaker offers for
            training, per botocore's API model). Default ``ml.g5.xlarge``.
        instance_count: Instances per job. Default 1. Above 1 turns on inter-container traffic
            encryption and multi-worker training.
        expected_gpus_per_instance: GPUs each instance must show. Default ``None``: the table's
            count; when set it must equal it.
        volume_size_gb: ML storage volume per instance. Default 100.
        max_runtime_seconds: Stop the job after this long. Default 86400 (1 day).
        use_spot: Managed spot training. Default ``True`` (requires ``checkpointing``).
        max_wait_seconds: Longest total time including waiting for spot capacity; must be at
            least ``max_runtime_seconds`` with ``use_spot``, and a launch's ``--spot`` is refused
            where it is not. Default 172800 (2 days).
        checkpointing: Sync ``/opt/ml/checkpoints`` to ``checkpoints/`` in the artifacts bucket.
            Default ``True``.
        input_mode: ``File`` or ``FastFile``. Default ``File``.
        channels: Channel name -> key prefix in the datasets bucket; at most 20 (SageMaker's
            limit). Default ``{"train": "train/"}``.
        hyperparameters: Passed to the entrypoint (SageMaker passes every value as a string);
            at most 100, values up to 2,500 characters (SageMaker's limits). Default an MLP for
            5 epochs.
        retry_attempts: SageMaker retries of a job that failed with an internal error. Default 2.
        notification_email: Subscribe this address to job state changes. Default ``None``.
        allowed_instance_types: The types a launch may pick (``--instance-type``); the workflow
            refuses others and the roles that create jobs are pinned to them
            (``sagemaker:InstanceTypes``), so no launch reaches a bigger GPU at a higher price.
            ``instance_type`` is always allowed. Default: ``instance_type`` alone.
        gpu_idle_alarm: Notice jobs whose GPUs idle, see :class:`GpuIdleAlarmConfig`.
        keep_alive_seconds: SageMaker managed warm pool: keep a finished job's instances this
            long (0-3600) so that a matching next job starts in seconds instead of minutes
            (``ResourceConfig.KeepAlivePeriodInSeconds``). The kept instances bill: ``scripts.cost``
            and each launch's price count the time, ``scripts.teardown_audit`` reports an
            available pool as compute left running and ``scripts.teardown --stop-running`` ends
            it. SageMaker keeps no warm pool for managed spot jobs: refused with ``use_spot``.
            Default 0 (none).
    """

    enabled: bool = True
    instance_type: str = "ml.g5.xlarge"
    instance_count: int = 1
    expected_gpus_per_instance: Optional[int] = None
    volume_size_gb: int = 100
    max_runtime_seconds: int = 86400
    use_spot: bool = True
    max_wait_seconds: int = 172800
    checkpointing: bool = True
    input_mode: str = "File"
    channels: Mapping[str, str] = field(default_factory=lambda: {"train": "train/"})
    hyperparameters: Mapping[str, str] = field(
        default_factory=lambda: {"model": "mlp", "epochs": "5", "batch_size": "256"}
    )
    retry_attempts: int = 2
    notification_email: Optional[str] = None
    allowed_instance_types: tuple[str, ...] = ()
    gpu_idle_alarm: GpuIdleAlarmConfig = field(default_factory=GpuIdleAlarmConfig)
    keep_alive_seconds: int = 0

    @property
    def gpus_per_instance(self) -> int:
        """The GPU count every instance must show (validated against the table)."""
        return typing.cast(int, self.expected_gpus_per_instance)


@dataclass(frozen=True)
class ProcessingConfig:
    """SageMaker Processing jobs on GPUs (raw data -> training-ready shards) and the pipeline.

    Part of the training stack: the pipeline state machine (process -> train -> promote) runs
    the processing job with ``createProcessingJob.sync``.

    Attributes:
        enabled: Deploy the processing role and the pipeline (in the training stack). Default
            ``True``.
        instance_type: SageMaker GPU type (``ml.`` + a GPU table row that SageMaker offers for
            *processing*, per botocore's ``ProcessingInstanceType`` enum). Default ``ml.g5.xlarge``.
        instance_count: Instances per job. Default 1, the only count the built-in transform runs on; a
            processing script of your own takes more at launch (``--process-instance-count``), where the
            raw input is sharded by S3 key across the instances and inter-container traffic is encrypted.
        volume_size_gb: ML storage volume per instance. Default 100.
        max_runtime_seconds: Stop the job after this long. Default 86400 (1 day).
        input_prefix: Key prefix of raw data in the datasets bucket; the processing role reads
            only this (and users' code). Default ``raw/``.
        output_prefix: Key prefix of processed data in the datasets bucket; each run writes
            ``<output_prefix><job name>/train/`` and ``.../validation/`` and the role writes only
            here. Must not overlap ``input_prefix``. Default ``processed/``.
        arguments: Container arguments of the built-in transform (``--shards 4``...). Default none.
        allowed_instance_types: The types a run may pick; the pipeline refuses others and the
            roles that create processing jobs are pinned to them. ``instance_type`` is always
            allowed. Default: ``instance_type`` alone.
    """

    enabled: bool = True
    instance_type: str = "ml.g5.xlarge"
    instance_count: int = 1
    volume_size_gb: int = 100
    max_runtime_seconds: int = 86400
    input_prefix: str = "raw/"
    output_prefix: str = "processed/"
    arguments: tuple[str, ...] = ()
    allowed_instance_types: tuple[str, ...] = ()


ROLLOUTS = ("all_at_once", "canary")


@dataclass(frozen=True)
class ServingConfig:
    """A SageMaker real-time endpoint serving a trained model on GPUs (its own stack).

    Attributes:
        enabled: Deploy the serving stack. Default ``False``: there is no model to serve before
            the first training job; set it with ``training_job_name`` or ``model_artifact_key``.
        training_job_name: Serve the model of this finished training job
            (``training-jobs/<name>/output/model.tar.gz`` in the artifacts bucket). Exclusive with
            ``model_artifact_key``. ``python -m scripts.promote JOB`` checks that the job completed
            and deploys with this set.
        model_artifact_key: Serve this ``model.tar.gz`` (a key in the artifacts bucket).
            Exclusive with ``training_job_name``.
        instance_type: SageMaker GPU hosting type (``ml.`` + a GPU table row that SageMaker
            hosting accepts). Default ``ml.g5.xlarge``.
        expected_gpus_per_instance: GPUs each instance must show before ``/ping`` turns healthy.
            Default ``None``: the table's count; when set it must equal it.
        initial_instance_count: Instances at creation. Default 1.
        min_instances: Autoscaling floor (SageMaker real-time variants cannot go below 1).
            Default 1.
        max_instances: Autoscaling ceiling. Default 2.
        target_invocations_per_instance: Target tracking on
            ``SageMakerVariantInvocationsPerInstance`` (invocations per instance per minute).
            Default 600.
        scale_in_cooldown_seconds: Wait after a scale-in before the next. Default 600.
        scale_out_cooldown_seconds: Wait after a scale-out before the next. Default 60.
        network_isolation: The container gets no network (it needs none: the model arrives from
            S3 through SageMaker). Default ``True``.
        data_capture: Capture requests and responses to ``data-capture/`` in the artifacts
            bucket, KMS-encrypted. Default ``False``.
        data_capture_sampling_percent: Share of requests captured. Default 10.
        max_batch_size: ``SERVE_MAX_BATCH_SIZE`` of the serving mode. Default 64.
        max_batch_delay_ms: ``SERVE_MAX_BATCH_DELAY_MS`` of the serving mode. Default 2.
        error_alarm_threshold: Alarm (and roll back a deployment) when 5xx errors per minute reach
            this in 2 consecutive minutes. Default 5.
        latency_alarm_ms: Alarm (and roll back) when the average model latency exceeds this for 3
            consecutive minutes. Default 200.
        rollout: ``all_at_once`` (blue/green: the new fleet takes all traffic, then bakes) or
            ``canary`` (a share first; needs at least 2 instances). Default ``all_at_once``.
        canary_percent: Capacity share of the canary. Default 50.
        bake_seconds: How long alarms watch the new fleet before the old one is removed (and
            between canary and the rest). Default 600.
        scale_in_schedule: Cron (Application Auto Scaling ``cron(...)``, UTC) at which the fleet
            is scaled to 1 instance (e.g. nights). Default ``None``.
        scale_out_schedule: Cron at which ``min_instances``/``max_instances`` are restored.
            Required with ``scale_in_schedule``. Default ``None``.
        scale_to_zero: Pay nothing when idle: serve the model as an inference component
            (``<project>-model``) whose copies, and the instances under them (managed instance
            scaling), scale down to zero without traffic; the first request after that fails
            fast and wakes a copy (minutes on a GPU). New models roll out as a rolling update of
            the component with the same rollback alarms; ``rollout=canary`` does not apply.
            Default ``False`` (a real-time variant, never below ``min_instances`` >= 1).
    """

    enabled: bool = False
    training_job_name: Optional[str] = None
    model_artifact_key: Optional[str] = None
    instance_type: str = "ml.g5.xlarge"
    expected_gpus_per_instance: Optional[int] = None
    initial_instance_count: int = 1
    min_instances: int = 1
    max_instances: int = 2
    target_invocations_per_instance: int = 600
    scale_in_cooldown_seconds: int = 600
    scale_out_cooldown_seconds: int = 60
    network_isolation: bool = True
    data_capture: bool = False
    data_capture_sampling_percent: int = 10
    max_batch_size: int = 64
    max_batch_delay_ms: int = 2
    error_alarm_threshold: int = 5
    latency_alarm_ms: int = 200
    rollout: str = "all_at_once"
    canary_percent: int = 50
    bake_seconds: int = 600
    scale_in_schedule: Optional[str] = None
    scale_out_schedule: Optional[str] = None
    scale_to_zero: bool = False

    @property
    def gpus_per_instance(self) -> int:
        """The GPU count every instance must show (validated against the table)."""
        return typing.cast(int, self.expected_gpus_per_instance)

    @property
    def model_key(self) -> str:
        """Key of the served ``model.tar.gz`` in the artifacts bucket (validated: one source is set)."""
        if self.training_job_name:
            return f"training-jobs/{self.training_job_name}/output/model.tar.gz"
        return typing.cast(str, self.model_artifact_key)


@dataclass(frozen=True)
class TransformConfig:
    """A batch transform at the end of the pipeline: the run's model scores a held-out or scoring prefix.

    Part of the pipeline (``processing.enabled``): after training, and after the promotion when
    the execution promotes, ``createTransformJob.sync`` runs the model (the serving mode of the
    image, as an endpoint runs it) over every object under ``input_prefix`` and writes one
    ``<key>.out`` per object under ``<output_prefix><job name>/``. An execution skips it with
    ``"transform": false``. The model's role reads only ``input_prefix`` and writes only
    ``output_prefix``.

    Attributes:
        enabled: Add the transform step to the pipeline. Default ``False``.
        input_prefix: Key prefix of the data to score in the datasets bucket (read only).
            Default ``score/``.
        output_prefix: Key prefix of the results in the artifacts bucket; each job writes
            ``<output_prefix><job name>/``. Must not overlap the bucket's other prefixes
            (``training-jobs/``, ``code/``, ``checkpoints/``...). Default ``transform-outputs/``.
        instance_type: SageMaker GPU type (``ml.`` + a GPU table row that SageMaker offers for
            batch transform, per botocore's ``TransformInstanceType`` enum). Default ``ml.g5.xlarge``.
        expected_gpus_per_instance: GPUs each instance must show before the model answers
            ``/ping``. Default ``None``: the table's count; when set it must equal it.
        instance_count: Instances of the job (the input objects are spread over them).
            Default 1.
        content_type: MIME type of the input records (``TransformInput.ContentType``, sent as
            each request's ``Content-Type``). Default ``text/csv``.
        split_type: ``Line`` (one record per line) or ``None`` (one record per object).
            Default ``Line``.
        batch_strategy: ``MultiRecord`` (as many records per request as fit in
            ``max_payload_mb``) or ``SingleRecord``. Default ``MultiRecord``.
        max_payload_mb: Largest request, in MB (1-100, SageMaker's bounds without chunked
            encoding). Default 6.
        max_runtime_seconds: Stop the job after this long (the pipeline step's timeout: Step
            Functions stops the job). Default 86400 (1 day).
    """

    enabled: bool = False
    input_prefix: str = "score/"
    output_prefix: str = "transform-outputs/"
    instance_type: str = "ml.g5.xlarge"
    expected_gpus_per_instance: Optional[int] = None
    instance_count: int = 1
    content_type: str = "text/csv"
    split_type: str = "Line"
    batch_strategy: str = "MultiRecord"
    max_payload_mb: int = 6
    max_runtime_seconds: int = 86400

    @property
    def gpus_per_instance(self) -> int:
        """The GPU count every instance must show (validated against the table)."""
        return typing.cast(int, self.expected_gpus_per_instance)


@dataclass(frozen=True)
class TuningConfig:
    """SageMaker automatic model tuning of the training job (``scripts.launch --tune RANGES.json``).

    A tuning job starts up to ``max_jobs`` training jobs, each the platform's training job (the
    same request: image, role, VPC, network isolation, KMS, spot with checkpoints, the GPU check)
    with hyperparameters drawn from the ranges; a trial that fails is a failed trial, and the
    tuning job fails only when none completes with an objective value. No resource is made from
    this section: it sets what a tuning launch sends and caps what it may ask for.

    Attributes:
        max_jobs: The most training jobs one tuning job may start (``--max-jobs`` may ask for
            fewer, never more); the price check counts all of them at their maximum runtime.
            1-500 (SageMaker's default quota per tuning job). Default 8.
        max_parallel_jobs: The most trials running at once (``--max-parallel-jobs`` may ask for
            fewer); at most ``max_jobs``. Default 2.
        strategy: ``Bayesian``, ``Random``, ``Hyperband`` or ``Grid`` (the ``Strategy`` values of
            botocore's model). ``Grid`` takes categorical ranges only and runs every combination
            (at most ``max_jobs`` of them; a ``--max-jobs`` below their number is refused). Default
            ``Bayesian``.
        early_stopping: ``Off`` or ``Auto`` (``TrainingJobEarlyStoppingType``: SageMaker stops
            trials unlikely to beat the best so far). ``Hyperband`` stops trials itself and needs
            ``Off``. Default ``Off``.
        objective_metric: The metric the tuner optimizes: one of the built-in trainer's metric
            definitions (``training_image/trainer/metric_definitions.json``), e.g.
            ``validation:loss`` (needs a ``validation`` channel) or ``train:loss``.
            Default ``validation:loss``.
        objective_type: ``Minimize`` or ``Maximize``. Default ``Minimize``.
    """

    max_jobs: int = 8
    max_parallel_jobs: int = 2
    strategy: str = "Bayesian"
    early_stopping: str = "Off"
    objective_metric: str = "validation:loss"
    objective_type: str = "Minimize"


MAX_TUNING_JOBS = 500
"""SageMaker's default quota of training jobs per tuning job: the ceiling of ``tuning.max_jobs``."""


@dataclass(frozen=True)
class CostConfig:
    """What the operator tools ask before they spend (no resource is made from it).

    Attributes:
        confirm_above_usd: ``scripts.launch`` prints each job's price and the most it can cost at its
            maximum runtime; a real launch whose jobs together can cost more than this many US
            dollars (list price) is refused until ``--yes`` is given. 0 asks for every launch.
            Default 100.
    """

    confirm_above_usd: int = 100


@dataclass(frozen=True)
class PlatformConfig:
    """Everything a deploy needs; built by :func:`load_config`.

    Attributes:
        project_name: Prefix of resource names and the ``Project`` tag; 3-20 characters,
            lowercase letters, digits and hyphens, starting with a letter and ending with a letter
            or digit. Default ``gputrain``.
        delete_data_on_destroy: Sandbox setting. ``False`` (default): ``cdk destroy`` keeps the
            datasets and artifacts buckets, the log bucket, the KMS key and the image repository.
            ``True``: destroy empties and deletes them. Never set it where data matters.
        tags: Extra tags on every resource and job; keys and values in AWS's tag pattern
            (letters, digits, spaces, ``_ . : / = + - @``), at most 49 besides ``Project``.
            ``Project`` and ``ManagedBy`` are the platform's own (the teardown audit finds the
            project's resources by ``Project``) and ``aws:*`` is AWS's: refused. Default none.
        data: Buckets, see :class:`DataConfig`.
        image: Training image repository, see :class:`ImageConfig`.
        network: VPC, see :class:`NetworkConfig`.
        cluster: GPU EC2 nodes, see :class:`ClusterConfig`.
        training_job: SageMaker job, see :class:`TrainingJobConfig`.
        processing: SageMaker Processing and the pipeline, see :class:`ProcessingConfig`.
        serving: SageMaker endpoint, see :class:`ServingConfig`.
        transform: Batch transform at the end of the pipeline, see :class:`TransformConfig`.
        tuning: Hyperparameter tuning of the training job, see :class:`TuningConfig`.
        cost: The price check before a launch, see :class:`CostConfig`.
    """

    project_name: str = "gputrain"
    delete_data_on_destroy: bool = False
    tags: Mapping[str, str] = field(default_factory=dict)
    data: DataConfig = field(default_factory=DataConfig)
    image: ImageConfig = field(default_factory=ImageConfig)
    network: NetworkConfig = field(default_factory=NetworkConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    training_job: TrainingJobConfig = field(default_factory=TrainingJobConfig)
    processing: ProcessingConfig = field(default_factory=ProcessingConfig)
    serving: ServingConfig = field(default_factory=ServingConfig)
    transform: TransformConfig = field(default_factory=TransformConfig)
    tuning: TuningConfig = field(default_factory=TuningConfig)
    cost: CostConfig = field(default_factory=CostConfig)


# --------------------------------------------------------------------------------------------
# Loading: shape and types
# --------------------------------------------------------------------------------------------


def json_type(tp: Any) -> str:
    """The JSON type a setting of annotation ``tp`` takes, as ``cdk.json`` and ``-c`` write it (the
    configuration reference's column, ``scripts.config_reference``)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return f"{json_type(next(a for a in typing.get_args(tp) if a is not type(None)))} or null"
    if origin in (abc.Mapping, dict):
        return "object of strings"
    if origin is tuple:
        return "list of strings"
    if dataclasses.is_dataclass(tp):
        return "object"
    return {bool: "boolean", int: "integer", str: "string", float: "number"}[tp]


def _coerce(path: str, value: Any, tp: Any) -> Any:
    """Check ``value`` against the annotated type ``tp``; return the frozen value."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            return None
        inner = [a for a in typing.get_args(tp) if a is not type(None)][0]
        return _coerce(path, value, inner)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise ConfigError(path, value, "expected an object", f"write {path} as a JSON object of settings")
        return _build(tp, value, path)
    if origin in (abc.Mapping, dict):
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            raise ConfigError(path, value, "expected an object", f"write {path} as a JSON object")
        out = {}
        for key, item in value.items():
            if item is None:
                continue  # an override's null removes the entry (_merge_overrides)
            # SageMaker passes every hyperparameter as a string; accept JSON scalars and say so.
            if isinstance(item, bool):
                item = "true" if item else "false"
            elif isinstance(item, (int, float)):
                item = str(item)
            if not isinstance(item, str):
                raise ConfigError(f"{path}.{key}", item, "expected a string", "use a string value")
            out[key] = item
        return types.MappingProxyType(out)
    if origin is tuple:
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise ConfigError(path, value, "expected a list of strings", f'write {path} as ["a", "b"]')
        return tuple(value)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(path, value, "expected true or false", f"set {path} to true or false")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(path, value, "expected a whole number", f"set {path} to a whole number")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(path, value, "expected a string", f"set {path} to a string")
        return value
    raise TypeError(f"unsupported config annotation {tp!r} at {path}")  # programming error


def _build(cls: type, raw: Mapping[str, Any], path: str) -> Any:
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    for key in raw:
        if key not in names:
            close = difflib.get_close_matches(key, names, n=1, cutoff=0.6)
            fix = f"did you mean {path}.{close[0]}?" if close else f"known settings: {', '.join(names)}"
            raise ConfigError(f"{path}.{key}", raw[key], "unknown setting", fix)
    missing = [
        f.name for f in dataclasses.fields(cls)
        if f.name not in raw and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ConfigError(path, dict(raw), f"{', '.join(missing)} missing", f"set {', '.join(f'{path}.{m}' for m in missing)}")
    return cls(**{k: _coerce(f"{path}.{k}", v, hints[k]) for k, v in raw.items()})


# --------------------------------------------------------------------------------------------
# Validation: meaning
# --------------------------------------------------------------------------------------------

_PROJECT_RE = re.compile(r"^[a-z][a-z0-9-]{1,18}[a-z0-9]$")
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_ECR_RE = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*$")
_TAG_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_EMAIL_RE = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")


def _check_bucket_name(path: str, name: Optional[str]) -> None:
    if name is None:
        return
    fix = "use 3-63 lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit, or leave it null for a generated name"
    problem = None
    if not _BUCKET_RE.match(name):
        problem = "not a valid S3 bucket name"
    elif ".." in name or ".-" in name or "-." in name:
        problem = "S3 bucket names cannot have adjacent dots or a dot next to a hyphen"
    elif re.match(r"^\d+\.\d+\.\d+\.\d+$", name):
        problem = "S3 bucket names cannot look like an IP address"
    elif name.startswith(("xn--", "sthree-", "amzn-s3-demo-")) or name.endswith(("-s3alias", "--ol-s3", "--x-s3")):
        problem = "S3 reserves this prefix or suffix"
    if problem:
        raise ConfigError(path, name, problem, fix)


def _known_types_hint(prefix: str = "") -> str:
    sample = ", ".join(f"{prefix}{n}" for n in ("g5.xlarge", "g5.12xlarge", "g6e.xlarge", "p4d.24xlarge", "p5.48xlarge"))
    return f"use an NVIDIA GPU type from training_image/trainer/gpu_instances.json (e.g. {sample})"


def _check_gpu_type(path: str, instance_type: str, *, sagemaker: bool, processing: bool = False, transform: bool = False) -> int:
    """Validate an instance type against the GPU table; return its GPU count.

    SageMaker types must be offered for training, or with ``processing`` for processing jobs, or
    with ``transform`` for batch transform jobs.
    """
    if sagemaker and not instance_type.startswith(SAGEMAKER_PREFIX):
        raise ConfigError(path, instance_type, "SageMaker instance types start with 'ml.'", f"use ml.{instance_type}")
    if not sagemaker and instance_type.startswith(SAGEMAKER_PREFIX):
        raise ConfigError(
            path, instance_type, "that is a SageMaker type, EC2 types have no 'ml.' prefix",
            f"use {instance_type.removeprefix(SAGEMAKER_PREFIX)}",
        )
    row = lookup(instance_type)
    if row is None:
        raise ConfigError(
            path, instance_type, "not a known NVIDIA GPU instance type", _known_types_hint("ml." if sagemaker else "")
        )
    if processing or transform:
        limits_source, offered, use = (
            (processing_job_limits().source, processing_job_limits().processing_instance_types, "Processing")
            if processing
            else (transform_job_limits().source, transform_job_limits().transform_instance_types, "batch transform")
        )
        if instance_type not in offered:
            same_gpu = sorted(
                SAGEMAKER_PREFIX + r.name for r in gpu_instance_types().values()
                if r.gpu_model == row.gpu_model and SAGEMAKER_PREFIX + r.name in offered
            )
            raise ConfigError(
                path, instance_type, f"SageMaker {use} does not offer this type ({limits_source})",
                f"use a {use.lower()} GPU type such as {same_gpu[0] if same_gpu else 'ml.g5.xlarge'}",
            )
        return row.gpu_count
    limits = training_job_limits()
    if sagemaker and instance_type not in limits.training_instance_types:
        raise ConfigError(
            path, instance_type, f"SageMaker training does not offer this type ({limits.source})",
            f"use a training type such as {_nearest_training_type(row)}",
        )
    return row.gpu_count


def _nearest_training_type(row: GpuInstanceType) -> str:
    """A SageMaker training type of the same GPU model, the closest GPU count first."""
    offered = training_job_limits().training_instance_types
    same_gpu = [r for r in gpu_instance_types().values() if r.gpu_model == row.gpu_model and SAGEMAKER_PREFIX + r.name in offered]
    if not same_gpu:
        return "ml.g5.xlarge"
    best = min(same_gpu, key=lambda r: (abs(r.gpu_count - row.gpu_count), -r.gpu_count, r.vcpus))
    return SAGEMAKER_PREFIX + best.name


def _check_field(path: str, value: str, rule: FieldRule, what: str, fix: str = "shorten it") -> None:
    """``value`` against a length/pattern rule of SageMaker's API model."""
    problem = rule.problem(value)
    if problem:
        raise ConfigError(path, value, f"{what} {problem} ({training_job_limits().source})", fix)


_TAG_FIX = "use letters, digits, spaces and _ . : / = + - @ only (keys 1-128 characters, values up to 256)"


def _check_dlami(path: str, cluster: ClusterConfig) -> None:
    """The nodes' GPUs must be supported by the DLAMI they boot (the latest one, or the pinned one)."""
    row = lookup(cluster.instance_type)
    assert row is not None, "checked before"
    pinned = cluster.pinned_dlami
    if pinned is not None:
        if not _AMI_ID_RE.match(pinned.ami_id):
            raise ConfigError(
                f"{path}.pinned_dlami.ami_id", pinned.ami_id, "not an AMI id",
                "use ami- and 8 or 17 hex digits, from the DLAMI release notes of your region",
            )
        _check_positive(f"{path}.pinned_dlami.nvidia_driver_branch", pinned.nvidia_driver_branch, minimum=400, maximum=999)
    volta = row.compute_capability_version < LATEST_DLAMI_MIN_COMPUTE_CAPABILITY
    if not volta:
        return
    gpu = f"{cluster.instance_type} has {row.gpu_model} GPUs (compute capability {row.compute_capability})"
    if pinned is None:
        raise ConfigError(
            f"{path}.instance_type", cluster.instance_type,
            f"{gpu}, which the latest DLAMI (NVIDIA driver {LATEST_DLAMI_DRIVER_BRANCH}, CUDA 13) no longer supports",
            f"use a type with compute capability {'.'.join(map(str, LATEST_DLAMI_MIN_COMPUTE_CAPABILITY))} or newer "
            "(g4dn, g5, g6, g6e, p4d, p5), or pin a DLAMI release with driver branch "
            f"{LAST_VOLTA_DRIVER_BRANCH} or older: {path}.pinned_dlami = "
            f'{{"ami_id": "ami-...", "nvidia_driver_branch": {LAST_VOLTA_DRIVER_BRANCH}}}',
        )
    if pinned.nvidia_driver_branch > LAST_VOLTA_DRIVER_BRANCH:
        raise ConfigError(
            f"{path}.pinned_dlami.nvidia_driver_branch", pinned.nvidia_driver_branch,
            f"{gpu}; NVIDIA driver branch {LAST_VOLTA_DRIVER_BRANCH} was the last to support them",
            f"pin a DLAMI release with driver branch {LAST_VOLTA_DRIVER_BRANCH} or older, or use a newer GPU type",
        )


def _check_expected_gpus(path: str, declared: Optional[int], table_count: int, instance_type: str) -> int:
    if declared is None:
        return table_count
    if declared != table_count:
        raise ConfigError(
            path, declared, f"{instance_type} has {table_count} GPU(s)",
            f"set it to {table_count} or leave it null to take the count from the GPU table",
        )
    return declared


def _check_positive(path: str, value: int, *, minimum: int = 1, maximum: Optional[int] = None) -> None:
    if value < minimum or (maximum is not None and value > maximum):
        span = f"between {minimum} and {maximum}" if maximum is not None else f"{minimum} or more"
        raise ConfigError(path, value, f"must be {span}", f"set it to a value {span}")


MAX_CLUSTER_NODES = 64
"""Nodes of the GPU cluster (``cluster.node_count``); their Cluster subnet is sized for this many."""
MAX_INSTANCE_COUNT = 64
"""Instances of one training job: the configured default and every launch (Python and the workflow) stay within it."""
USER_CODE_PREFIX = "code/"
"""Where users' ``sourcedir.tar.gz`` live in the artifacts bucket (the only code the roles read)."""
ENTRY_POINT_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_./-]*[.](py|sh)$"
"""A script path inside the source directory: no leading ``/`` or ``-``, no quotes or spaces."""
_CODE_KEY_PATTERN = r"^code/[A-Za-z0-9_.=-]+(/[A-Za-z0-9_.=-]+)*[.]tar[.]gz$"


def _check_user_code(path: str, code_key: Optional[str], entry_point: Optional[str]) -> None:
    if code_key is None and entry_point is None:
        return
    if code_key is None or entry_point is None:
        missing = "code_key" if code_key is None else "entry_point"
        raise ConfigError(
            f"{path}.{missing}", None, "a user script needs both code_key and entry_point",
            "set both (scripts.launch --upload-only prints them), or neither for the built-in trainer",
        )
    if not re.match(_CODE_KEY_PATTERN, code_key) or ".." in code_key:
        raise ConfigError(
            f"{path}.code_key", code_key, f"not a .tar.gz key under {USER_CODE_PREFIX} in the artifacts bucket",
            "use the key scripts.launch --upload-only printed, e.g. code/my-run/sourcedir.tar.gz",
        )
    if not re.match(ENTRY_POINT_PATTERN, entry_point) or ".." in entry_point:
        raise ConfigError(
            f"{path}.entry_point", entry_point, "not a .py or .sh path inside the source directory",
            "use the script's path relative to the source directory, e.g. train.py",
        )


def _validate(cfg: PlatformConfig) -> PlatformConfig:
    """``cfg`` checked section by section, with the values the checks resolve filled in."""
    _validate_project_name(cfg.project_name)
    _validate_data(cfg.data)
    _validate_image(cfg.image)
    _validate_network(cfg.network)
    cl = _validate_cluster(cfg.cluster, cfg.network)
    tj = _validate_training_job(cfg.training_job)
    _validate_tags(cfg.tags)
    pr = _validate_processing(cfg.processing, tj)
    sv = _validate_serving(cfg.serving)
    tr = _validate_transform(cfg.transform, pr)
    _validate_tuning(cfg.tuning)
    _check_positive(f"{CONTEXT_KEY}.cost.confirm_above_usd", cfg.cost.confirm_above_usd, minimum=0, maximum=10_000_000)
    net = cfg.network
    if net.dns_firewall is None:
        # On wherever something in the VPC has a network: the nodes always do; models may.
        net = dataclasses.replace(net, dns_firewall=cl.enabled or (sv.enabled and not sv.network_isolation))
    return dataclasses.replace(cfg, network=net, cluster=cl, training_job=tj, processing=pr, serving=sv, transform=tr)


def _validate_project_name(project_name: str) -> None:
    p = CONTEXT_KEY
    if not _PROJECT_RE.match(project_name):
        raise ConfigError(
            f"{p}.project_name", project_name, "not a valid project name",
            "use 3-20 lowercase letters, digits and hyphens, starting with a letter",
        )


def _validate_data(d: DataConfig) -> None:
    p = CONTEXT_KEY
    _check_bucket_name(f"{p}.data.datasets_bucket_name", d.datasets_bucket_name)
    _check_bucket_name(f"{p}.data.artifacts_bucket_name", d.artifacts_bucket_name)
    if d.datasets_bucket_name and d.datasets_bucket_name == d.artifacts_bucket_name:
        raise ConfigError(
            f"{p}.data.artifacts_bucket_name", d.artifacts_bucket_name, "same name as the datasets bucket",
            "give the two buckets different names",
        )
    for name in ("checkpoint_expiration_days", "noncurrent_version_expiration_days", "access_log_expiration_days"):
        _check_positive(f"{p}.data.{name}", getattr(d, name))


def _validate_image(img: ImageConfig) -> None:
    p = CONTEXT_KEY
    if not img.repository_name or not _ECR_RE.match(img.repository_name) or len(img.repository_name) > 256:
        raise ConfigError(
            f"{p}.image.repository_name", img.repository_name, "not a valid ECR repository name",
            "use lowercase letters, digits and . _ - / separators",
        )
    if not img.tag.strip():
        raise ConfigError(f"{p}.image.tag", img.tag, "empty image tag", "set an explicit, versioned tag such as tf2.21.0-gpu-1")
    if img.tag.strip().lower() == "latest":
        raise ConfigError(
            f"{p}.image.tag", img.tag, "'latest' is mutable and the repository's tags are immutable",
            "set an explicit, versioned tag such as tf2.21.0-gpu-1",
        )
    if not _TAG_RE.match(img.tag):
        raise ConfigError(f"{p}.image.tag", img.tag, "not a valid image tag", "use letters, digits, _ . - (at most 128)")
    _check_positive(f"{p}.image.keep_images", img.keep_images)


_ENDPOINT_SERVICE_RE = re.compile(r"^[a-z0-9-]+(\.[a-z0-9-]+)*$")
"""An interface endpoint's service name after ``com.amazonaws.<region>.`` (``ecr.api``, ``sagemaker.runtime``)."""


def interface_endpoint_id(name: str) -> str:
    """The construct id of the interface endpoint for service ``name`` (``ecr.api`` -> ``EcrApiEndpoint``): two
    names with the same id (``ecr.api``, ``ecr-api``) would be the same construct twice, which CDK refuses."""
    return "".join(part.capitalize() for part in name.replace("-", ".").split(".")) + "Endpoint"


TRAINING_SUBNET_GROUP = "Training"
"""Subnets of SageMaker jobs, endpoints and the interface endpoints: the only subnets a SageMaker
execution role may put network interfaces in."""
CLUSTER_SUBNET_GROUP = "Cluster"
"""Subnets of the GPU nodes only."""
PUBLIC_SUBNET_PREFIX = 24
"""A zone's public subnet (only with NAT gateways): the NAT gateway's."""
TRAINING_SUBNET_PREFIX = 20
"""A zone's Training subnet: SageMaker jobs, endpoints and the interface endpoints."""
CLUSTER_SUBNET_PREFIX = 23
"""A zone's Cluster subnet, the GPU nodes' only: 64 nodes with 4 addressed EFA interfaces each (p4d,
g6e.48xlarge) are 256 addresses, past a /24's 251 usable ones. Fixed once: a new size would replace the
stateful stack's subnets (:func:`stacks.components.gpu_cluster.node_addresses` checks the fit)."""


def vpc_subnet_blocks(cidr: ipaddress.IPv4Network, max_azs: int, nat_gateways: int) -> Optional[list[ipaddress.IPv4Network]]:
    """The subnets CDK carves from ``cidr``, in its order (each group's zones in turn, each block aligned to its
    size: public, then Training, then Cluster); ``None`` when they do not fit."""
    prefixes = ([PUBLIC_SUBNET_PREFIX] if nat_gateways else []) + [TRAINING_SUBNET_PREFIX, CLUSTER_SUBNET_PREFIX]
    blocks, next_address = [], int(cidr.network_address)
    for prefix in prefixes:
        size = 2 ** (32 - prefix)
        for _ in range(max_azs):
            start = -(-next_address // size) * size
            if prefix < cidr.prefixlen or start + size > int(cidr.broadcast_address) + 1:
                return None
            blocks.append(ipaddress.IPv4Network((start, prefix)))
            next_address = start + size
    return blocks


def _validate_network(net: NetworkConfig) -> None:
    p = CONTEXT_KEY
    try:
        cidr = ipaddress.IPv4Network(net.vpc_cidr, strict=False)
    except ValueError:
        raise ConfigError(f"{p}.network.vpc_cidr", net.vpc_cidr, "not an IPv4 CIDR", "use a block such as 10.40.0.0/16") from None
    if str(cidr) != net.vpc_cidr:
        raise ConfigError(f"{p}.network.vpc_cidr", net.vpc_cidr, "host bits are set", f"use {cidr}")
    if not 16 <= cidr.prefixlen <= 24:
        raise ConfigError(f"{p}.network.vpc_cidr", net.vpc_cidr, "VPC blocks must be /16 to /24", "use a block such as 10.40.0.0/16")
    _check_positive(f"{p}.network.max_azs", net.max_azs, maximum=6)
    _check_positive(f"{p}.network.nat_gateways", net.nat_gateways, minimum=0, maximum=net.max_azs)
    if vpc_subnet_blocks(cidr, net.max_azs, net.nat_gateways) is None:
        fits = next((n for n in range(cidr.prefixlen - 1, 15, -1)
                     if vpc_subnet_blocks(ipaddress.IPv4Network((int(cidr.network_address) & ~(2 ** (32 - n) - 1), n)),
                                          net.max_azs, net.nat_gateways)), None)  # fmt: skip
        per_zone = (f"a /{PUBLIC_SUBNET_PREFIX} public, " if net.nat_gateways else "") + (
            f"a /{TRAINING_SUBNET_PREFIX} for SageMaker and a /{CLUSTER_SUBNET_PREFIX} for the GPU nodes")
        raise ConfigError(
            f"{p}.network.vpc_cidr", net.vpc_cidr,
            f"too small for the subnets of {net.max_azs} zone(s) ({per_zone} per zone)",
            f"use a /{fits} or larger" if fits else "use fewer zones (network.max_azs)",
        )
    seen: dict[str, str] = {}
    for i, name in enumerate(net.interface_endpoints):
        if not _ENDPOINT_SERVICE_RE.match(name):
            raise ConfigError(
                f"{p}.network.interface_endpoints[{i}]", name, "not an AWS interface endpoint service name",
                "write the part after com.amazonaws.<region>. in lowercase, e.g. ecr.api, logs or sagemaker.runtime",
            )
        construct_id = interface_endpoint_id(name)
        if construct_id in seen:
            raise ConfigError(
                f"{p}.network.interface_endpoints[{i}]", name,
                f"the same endpoint as {seen[construct_id]!r} (both make the construct {construct_id})",
                "list each service once",
            )
        seen[construct_id] = name
    for i, domain in enumerate(net.dns_allowed_domains):
        if not _DNS_DOMAIN_RE.match(domain):
            raise ConfigError(
                f"{p}.network.dns_allowed_domains[{i}]", domain, "not a domain name the DNS firewall can match",
                "write a lowercase name such as pypi.org, or *.pythonhosted.org for every subdomain",
            )


def _validate_cluster(cl: ClusterConfig, net: NetworkConfig) -> ClusterConfig:
    """The cluster section checked (its zone against the network's), with its expected GPUs per node resolved."""
    p = CONTEXT_KEY
    count = _check_gpu_type(f"{p}.cluster.instance_type", cl.instance_type, sagemaker=False)
    cl = dataclasses.replace(
        cl,
        expected_gpus_per_node=_check_expected_gpus(
            f"{p}.cluster.expected_gpus_per_node", cl.expected_gpus_per_node, count, cl.instance_type
        ),
    )
    _check_positive(f"{p}.cluster.node_count", cl.node_count, maximum=MAX_CLUSTER_NODES)
    if not 0 <= cl.availability_zone < net.max_azs:
        raise ConfigError(
            f"{p}.cluster.availability_zone", cl.availability_zone,
            f"not one of the VPC's {net.max_azs} availability zones (network.max_azs)",
            f"use an index from 0 to {net.max_azs - 1}",
        )
    if not re.match(r"^[a-z0-9][a-z0-9.\-]*$", cl.dlami_flavour):
        raise ConfigError(
            f"{p}.cluster.dlami_flavour", cl.dlami_flavour, "not a DLAMI flavour",
            "use the path segment of a DLAMI SSM parameter, e.g. base-oss-nvidia-driver-gpu-ubuntu-22.04",
        )
    if cl.enabled:
        _check_dlami(f"{p}.cluster", cl)
    _check_positive(f"{p}.cluster.root_volume_gb", cl.root_volume_gb, minimum=75, maximum=16384)
    _check_positive(f"{p}.cluster.signal_timeout_minutes", cl.signal_timeout_minutes, minimum=5, maximum=720)
    # CloudWatch evaluates an alarm with periods under an hour over at most one day.
    _check_positive(f"{p}.cluster.idle_stop_minutes", cl.idle_stop_minutes, minimum=0, maximum=1440)
    _check_positive(f"{p}.cluster.idle_gpu_utilization_percent", cl.idle_gpu_utilization_percent, minimum=0, maximum=100)
    _check_positive(f"{p}.cluster.max_lifetime_hours", cl.max_lifetime_hours, minimum=0)
    _check_user_code(f"{p}.cluster", cl.code_key, cl.entry_point)
    return cl


def _validate_training_job(tj: TrainingJobConfig) -> TrainingJobConfig:
    """The training job section checked, with its expected GPUs and allowed types resolved."""
    p = CONTEXT_KEY
    count = _check_gpu_type(f"{p}.training_job.instance_type", tj.instance_type, sagemaker=True)
    tj = dataclasses.replace(
        tj,
        expected_gpus_per_instance=_check_expected_gpus(
            f"{p}.training_job.expected_gpus_per_instance", tj.expected_gpus_per_instance, count, tj.instance_type
        ),
    )
    tj = dataclasses.replace(
        tj,
        allowed_instance_types=_allowed_types(
            f"{p}.training_job.allowed_instance_types", tj.instance_type, tj.allowed_instance_types, processing=False
        ),
    )
    _check_positive(f"{p}.training_job.instance_count", tj.instance_count, maximum=MAX_INSTANCE_COUNT)
    _check_positive(f"{p}.training_job.volume_size_gb", tj.volume_size_gb, maximum=16384)
    _check_positive(f"{p}.training_job.max_runtime_seconds", tj.max_runtime_seconds, maximum=28 * 86400)
    _check_positive(f"{p}.training_job.retry_attempts", tj.retry_attempts, minimum=1, maximum=30)
    # One-minute periods: CloudWatch evaluates at most a day of them.
    _check_positive(f"{p}.training_job.gpu_idle_alarm.minutes", tj.gpu_idle_alarm.minutes, minimum=5, maximum=1440)
    _check_positive(f"{p}.training_job.gpu_idle_alarm.threshold_percent", tj.gpu_idle_alarm.threshold_percent, maximum=100)
    if tj.use_spot and not tj.checkpointing:
        raise ConfigError(
            f"{p}.training_job.use_spot", True, "managed spot without checkpointing restarts interrupted jobs from scratch",
            f"set {p}.training_job.checkpointing to true, or use_spot to false",
        )
    if tj.use_spot and tj.max_wait_seconds < tj.max_runtime_seconds:
        raise ConfigError(
            f"{p}.training_job.max_wait_seconds", tj.max_wait_seconds,
            f"must be at least max_runtime_seconds ({tj.max_runtime_seconds})",
            f"raise it to {tj.max_runtime_seconds} or more, or lower max_runtime_seconds",
        )
    _check_positive(f"{p}.training_job.keep_alive_seconds", tj.keep_alive_seconds, minimum=0, maximum=MAX_KEEP_ALIVE_SECONDS)
    if tj.keep_alive_seconds and tj.use_spot:
        raise ConfigError(
            f"{p}.training_job.keep_alive_seconds", tj.keep_alive_seconds, "SageMaker keeps no warm pool for managed spot jobs",
            f"set {p}.training_job.use_spot to false, or keep_alive_seconds to 0",
        )
    if tj.input_mode not in INPUT_MODES:
        raise ConfigError(f"{p}.training_job.input_mode", tj.input_mode, "unsupported input mode", "use File or FastFile")
    limits = training_job_limits()
    if not tj.channels:
        raise ConfigError(f"{p}.training_job.channels", {}, "a job needs at least one channel", 'add e.g. {"train": "train/"}')
    if len(tj.channels) > limits.max_channels:
        raise ConfigError(
            f"{p}.training_job.channels", f"{len(tj.channels)} channels",
            f"SageMaker accepts at most {limits.max_channels} input channels per job",
            f"merge channels under shared prefixes until there are {limits.max_channels} or fewer",
        )
    for name, prefix in tj.channels.items():
        if limits.channel_name.problem(name):
            raise ConfigError(
                f"{p}.training_job.channels.{name}", prefix, "not a valid channel name",
                f"use 1-{limits.channel_name.max_length} letters, digits, . - _",
            )
        if prefix.startswith("/") or "://" in prefix:
            raise ConfigError(
                f"{p}.training_job.channels.{name}", prefix, "expected a key prefix inside the datasets bucket",
                "write a relative prefix such as train/",
            )
        _refuse_iam_wildcards(f"{p}.training_job.channels.{name}", prefix, "train/")
    if len(tj.hyperparameters) > limits.max_hyperparameters:
        raise ConfigError(
            f"{p}.training_job.hyperparameters", f"{len(tj.hyperparameters)} entries",
            f"SageMaker accepts at most {limits.max_hyperparameters} hyperparameters",
            "drop some, or pass them in one value (e.g. a JSON string) that the training script parses",
        )
    for name, value in tj.hyperparameters.items():
        _check_field(f"{p}.training_job.hyperparameters.{name}", name, limits.hyperparameter_name, "the name")
        _check_field(f"{p}.training_job.hyperparameters.{name}", value, limits.hyperparameter_value, "the value")
    # The built-in trainer's own rules, here rather than after a GPU instance has started.
    refused = hyperparameter_rules.problems(
        tj.hyperparameters, user_script=False, instance_count=tj.instance_count, gpus_per_instance=tj.expected_gpus_per_instance or 1
    )
    if refused:
        raise ConfigError(
            f"{p}.training_job.hyperparameters", dict(tj.hyperparameters), "; ".join(refused),
            f"fix them in cdk.json, or override one with -c {p}.training_job.hyperparameters.NAME=VALUE",
        )
    if tj.notification_email is not None and not _EMAIL_RE.match(tj.notification_email):
        raise ConfigError(f"{p}.training_job.notification_email", tj.notification_email, "not an e-mail address", "use name@example.com or null")
    return tj


PLATFORM_TAGS = {"Project": "project_name", "ManagedBy": "cdk"}
"""The tags the platform puts on every resource (``stacks.platform``; ``Project`` on every job too), and
their values: the teardown audit finds the project's resources by ``Project``, so ``tags`` may not set them."""


def _validate_tags(tags: Mapping[str, str]) -> None:
    """Every job carries Project plus ``tags``; the same rules hold for the other resources' tags."""
    p = CONTEXT_KEY
    limits = training_job_limits()
    for key, value in PLATFORM_TAGS.items():
        if key in tags:
            raise ConfigError(
                f"{p}.tags.{key}", tags[key],
                f"the platform sets this tag itself ({key}={value} on every resource it deploys"
                f"{' and every job' if key == 'Project' else ''}; the teardown audit finds the project's resources by Project)",
                "remove it from tags, or tag with another key",
            )
    job_tags = {"Project", *tags}
    if len(job_tags) > limits.max_tags:
        raise ConfigError(
            f"{p}.tags", f"{len(tags)} tags", f"a training job takes at most {limits.max_tags} tags, Project included",
            f"keep at most {limits.max_tags - 1} extra tags",
        )
    for key, value in tags.items():
        if key.lower().startswith("aws:"):
            raise ConfigError(f"{p}.tags.{key}", value, "tag keys starting with aws: are reserved by AWS", "rename the key")
        _check_field(f"{p}.tags.{key}", key, limits.tag_key, "the tag key", _TAG_FIX)
        _check_field(f"{p}.tags.{key}", value, limits.tag_value, "the tag value", _TAG_FIX)


_DNS_DOMAIN_RE = re.compile(r"^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.?$")


def _allowed_types(path: str, instance_type: str, allowed: Sequence[str], *, processing: bool) -> tuple[str, ...]:
    """``allowed`` checked one by one, with ``instance_type`` added; sorted, without repeats."""
    for i, candidate in enumerate(allowed):
        _check_gpu_type(f"{path}[{i}]", candidate, sagemaker=True, processing=processing)
    return tuple(sorted({instance_type, *allowed}))


_KEY_PREFIX_RE = re.compile(r"^[A-Za-z0-9!_.'()=-]+(/[A-Za-z0-9!_.'()=-]+)*/$")


def _refuse_iam_wildcards(path: str, key: str, example: str) -> None:
    """Keys and prefixes from config become IAM resources as given: ``*`` or ``?`` there is a
    wildcard (``*/`` grants every key of the bucket) and ``..`` reaches outside the prefix."""
    if "*" in key or "?" in key:
        raise ConfigError(
            path, key, "a wildcard (* or ?) here would become a wildcard in the IAM policies that grant it",
            f"write a literal prefix such as {example}",
        )
    if ".." in key.split("/"):
        raise ConfigError(path, key, "a '..' segment points outside the prefix", f"write a literal prefix such as {example}")


def _check_key_prefix(path: str, prefix: str, example: str, bucket: str = "datasets") -> None:
    _refuse_iam_wildcards(path, prefix, example)
    if not _KEY_PREFIX_RE.match(prefix):
        raise ConfigError(
            path, prefix, f"expected a key prefix inside the {bucket} bucket ending in /",
            f"write a relative prefix such as {example} (letters, digits, ! _ . ' ( ) = -, /-separated)",
        )


def _validate_processing(pr: ProcessingConfig, tj: TrainingJobConfig) -> ProcessingConfig:
    p = f"{CONTEXT_KEY}.processing"
    limits = processing_job_limits()
    _check_gpu_type(f"{p}.instance_type", pr.instance_type, sagemaker=True, processing=True)
    pr = dataclasses.replace(
        pr, allowed_instance_types=_allowed_types(f"{p}.allowed_instance_types", pr.instance_type, pr.allowed_instance_types, processing=True)
    )
    _check_positive(f"{p}.instance_count", pr.instance_count, maximum=limits.max_instance_count)
    if pr.instance_count > 1:
        # The config names no processing script, so its default launch runs the built-in transform,
        # which writes one host's shards and manifests: every default run would be refused.
        raise ConfigError(
            f"{p}.instance_count", pr.instance_count,
            "the built-in transform runs on one instance, and every run without a script of its own uses it",
            "set it to 1; a processing script of your own takes more at launch (scripts.launch --process-source-dir DIR"
            " --process-entry-point prep.py --process-instance-count N)",
        )
    _check_positive(f"{p}.volume_size_gb", pr.volume_size_gb, maximum=limits.max_volume_size_gb)
    _check_positive(f"{p}.max_runtime_seconds", pr.max_runtime_seconds, maximum=limits.max_runtime_seconds)
    _check_key_prefix(f"{p}.input_prefix", pr.input_prefix, "raw/")
    _check_key_prefix(f"{p}.output_prefix", pr.output_prefix, "processed/")
    # A run must never read its own or an earlier run's output as raw input, nor write into the raw data.
    if pr.output_prefix.startswith(pr.input_prefix) or pr.input_prefix.startswith(pr.output_prefix):
        raise ConfigError(
            f"{p}.output_prefix", pr.output_prefix, f"overlaps input_prefix {pr.input_prefix!r} (outputs would mix with raw data)",
            "use separate prefixes, e.g. raw/ and processed/",
        )
    # Training channels are read-only for the jobs; processing writes under output_prefix only.
    for name, prefix in tj.channels.items():
        if pr.output_prefix.startswith(prefix):
            raise ConfigError(
                f"{p}.output_prefix", pr.output_prefix,
                f"lies inside training channel {name}'s prefix {prefix!r}, so every run's shards would feed that channel at once",
                f"use a prefix outside {prefix!r}, e.g. processed/ (a pipeline run passes its own output to training)",
            )
    if len(pr.arguments) > limits.max_container_arguments:
        raise ConfigError(
            f"{p}.arguments", f"{len(pr.arguments)} arguments",
            f"SageMaker accepts at most {limits.max_container_arguments} container arguments ({limits.source})",
            "pass fewer arguments",
        )
    for i, argument in enumerate(pr.arguments):
        problem = limits.container_argument.problem(argument)
        if problem:
            raise ConfigError(f"{p}.arguments[{i}]", argument, f"a container argument {problem} ({limits.source})", "shorten it")
    return pr


ARTIFACT_PREFIXES = ("training-jobs/", "checkpoints/", "cluster-checkpoints/", "cluster-outputs/", "code/", "data-capture/")
"""What the artifacts bucket holds besides transform outputs (models, checkpoints, nodes' outputs, users'
code, captured requests: the constants of ``training_job_spec``, ``buckets`` and ``endpoint_spec``, which
``tests/unit/test_config.py`` keeps equal): a transform's output prefix must not overlap them."""
SPLIT_TYPES = ("Line", "None")
"""The ``SplitType`` values the serving mode answers (botocore's RecordIO and TFRecord are not offered)."""
_CONTENT_TYPE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*(;.*)?$")


def _validate_transform(tr: TransformConfig, pr: ProcessingConfig) -> TransformConfig:
    """The transform section checked, with its expected GPUs resolved."""
    p = f"{CONTEXT_KEY}.transform"
    limits = transform_job_limits()
    count = _check_gpu_type(f"{p}.instance_type", tr.instance_type, sagemaker=True, transform=True)
    tr = dataclasses.replace(
        tr,
        expected_gpus_per_instance=_check_expected_gpus(
            f"{p}.expected_gpus_per_instance", tr.expected_gpus_per_instance, count, tr.instance_type
        ),
    )
    if tr.enabled and not pr.enabled:
        raise ConfigError(
            f"{p}.enabled", True, "the transform is a step of the pipeline, which processing.enabled=false leaves out",
            f"set {CONTEXT_KEY}.processing.enabled to true, or {p}.enabled to false",
        )
    _check_key_prefix(f"{p}.input_prefix", tr.input_prefix, "score/")
    _check_key_prefix(f"{p}.output_prefix", tr.output_prefix, "transform-outputs/", bucket="artifacts")
    for used in ARTIFACT_PREFIXES:
        if tr.output_prefix.startswith(used) or used.startswith(tr.output_prefix):
            raise ConfigError(
                f"{p}.output_prefix", tr.output_prefix,
                f"overlaps {used!r} in the artifacts bucket (the model role would write where the platform keeps other data)",
                "use a prefix of its own, e.g. transform-outputs/",
            )
    # Instances of one job: SageMaker's model gives no ceiling (an account quota does); as processing.
    _check_positive(f"{p}.instance_count", tr.instance_count, maximum=100)
    problem = limits.content_type.problem(tr.content_type)
    if problem or not _CONTENT_TYPE_RE.match(tr.content_type):
        raise ConfigError(
            f"{p}.content_type", tr.content_type, problem or "not a MIME type",
            "use a MIME type the model's input handler reads, e.g. text/csv or application/jsonlines",
        )
    if tr.split_type not in SPLIT_TYPES:
        raise ConfigError(
            f"{p}.split_type", tr.split_type, "unsupported split type",
            "use Line (one record per line) or None (one record per object)",
        )
    if tr.batch_strategy not in limits.batch_strategies:
        raise ConfigError(f"{p}.batch_strategy", tr.batch_strategy, "unknown batch strategy", "use MultiRecord or SingleRecord")
    _check_positive(f"{p}.max_payload_mb", tr.max_payload_mb, maximum=limits.max_payload_mb)
    _check_positive(f"{p}.max_runtime_seconds", tr.max_runtime_seconds, maximum=28 * 86400)
    return tr


def metric_names() -> tuple[str, ...]:
    """The names of the built-in trainer's metric definitions (the image's file), in its order."""
    path = hyperparameter_rules.TRAINING_IMAGE / "trainer" / "metric_definitions.json"
    return tuple(item["Name"] for item in json.loads(path.read_text(encoding="utf-8")))


def _validate_tuning(tu: TuningConfig) -> None:
    p = f"{CONTEXT_KEY}.tuning"
    limits = tuning_job_limits()
    _check_positive(f"{p}.max_jobs", tu.max_jobs, maximum=MAX_TUNING_JOBS)
    _check_positive(f"{p}.max_parallel_jobs", tu.max_parallel_jobs, maximum=tu.max_jobs)
    for name, value, allowed in (
        ("strategy", tu.strategy, limits.strategies),
        ("early_stopping", tu.early_stopping, limits.early_stopping_types),
        ("objective_type", tu.objective_type, limits.objective_types),
    ):
        if value not in allowed:
            raise ConfigError(f"{p}.{name}", value, f"not one of SageMaker's values ({limits.source})", f"use one of {', '.join(allowed)}")
    if tu.strategy == "Hyperband" and tu.early_stopping != "Off":
        raise ConfigError(
            f"{p}.early_stopping", tu.early_stopping, "Hyperband stops trials itself and SageMaker refuses early stopping with it",
            f"set {p}.early_stopping to Off, or choose another strategy",
        )
    names = metric_names()
    if tu.objective_metric not in names:
        close = difflib.get_close_matches(tu.objective_metric, names, n=1)
        raise ConfigError(
            f"{p}.objective_metric", tu.objective_metric, "not a metric the built-in trainer's metric definitions extract",
            f"use {close[0] if close else names[0]} (one of {', '.join(names)})",
        )


_JOB_NAME_RE = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
_CRON_RE = re.compile(r"^(cron|rate|at)\(.+\)$")


def _validate_serving(sv: ServingConfig) -> ServingConfig:
    p = f"{CONTEXT_KEY}.serving"
    count = _check_gpu_type(f"{p}.instance_type", sv.instance_type, sagemaker=True)
    if sv.instance_type not in sagemaker_hosting_instance_types():
        raise ConfigError(
            f"{p}.instance_type", sv.instance_type, "SageMaker hosting does not offer this type (it can only train)",
            "use a GPU type SageMaker endpoints accept, e.g. ml.g5.xlarge, ml.g6.xlarge, ml.g6e.xlarge, ml.p4d.24xlarge",
        )
    sv = dataclasses.replace(
        sv,
        expected_gpus_per_instance=_check_expected_gpus(
            f"{p}.expected_gpus_per_instance", sv.expected_gpus_per_instance, count, sv.instance_type
        ),
    )
    if sv.training_job_name is not None and sv.model_artifact_key is not None:
        raise ConfigError(
            f"{p}.model_artifact_key", sv.model_artifact_key, "training_job_name and model_artifact_key are exclusive",
            "set one of them to null",
        )
    if sv.enabled and sv.training_job_name is None and sv.model_artifact_key is None:
        raise ConfigError(
            f"{p}.training_job_name", None, "an endpoint needs a model",
            f"set {p}.training_job_name to a completed job (python -m scripts.promote JOB) or {p}.model_artifact_key",
        )
    if sv.training_job_name is not None and not _JOB_NAME_RE.match(sv.training_job_name):
        raise ConfigError(f"{p}.training_job_name", sv.training_job_name, "not a training job name", "use the job's exact name")
    if sv.model_artifact_key is not None:
        key = sv.model_artifact_key
        _refuse_iam_wildcards(f"{p}.model_artifact_key", key, "training-jobs/<job>/output/model.tar.gz")
        if key.startswith(("s3://", "/")) or not key.endswith(".tar.gz") or ".." in key.split("/"):
            raise ConfigError(
                f"{p}.model_artifact_key", key, "expected the key of a model.tar.gz inside the artifacts bucket",
                "write a relative key such as training-jobs/<job>/output/model.tar.gz",
            )
    _check_positive(f"{p}.min_instances", sv.min_instances, maximum=100)
    _check_positive(f"{p}.max_instances", sv.max_instances, minimum=sv.min_instances, maximum=100)
    _check_positive(f"{p}.initial_instance_count", sv.initial_instance_count, minimum=sv.min_instances, maximum=sv.max_instances)
    _check_positive(f"{p}.target_invocations_per_instance", sv.target_invocations_per_instance, maximum=1_000_000)
    _check_positive(f"{p}.scale_in_cooldown_seconds", sv.scale_in_cooldown_seconds, minimum=0, maximum=86400)
    _check_positive(f"{p}.scale_out_cooldown_seconds", sv.scale_out_cooldown_seconds, minimum=0, maximum=86400)
    _check_positive(f"{p}.data_capture_sampling_percent", sv.data_capture_sampling_percent, maximum=100)
    _check_positive(f"{p}.max_batch_size", sv.max_batch_size, maximum=65536)
    _check_positive(f"{p}.max_batch_delay_ms", sv.max_batch_delay_ms, minimum=0, maximum=1000)
    _check_positive(f"{p}.error_alarm_threshold", sv.error_alarm_threshold)
    _check_positive(f"{p}.latency_alarm_ms", sv.latency_alarm_ms)
    # SageMaker bounds the baking period (WaitIntervalInSeconds) to 0-3600 seconds.
    _check_positive(f"{p}.bake_seconds", sv.bake_seconds, minimum=0, maximum=3600)
    if sv.rollout not in ROLLOUTS:
        raise ConfigError(f"{p}.rollout", sv.rollout, "unknown rollout", "use all_at_once or canary")
    if sv.scale_to_zero and sv.rollout == "canary":
        raise ConfigError(
            f"{p}.rollout", sv.rollout, "with scale_to_zero a new model rolls out as a rolling update of the inference component",
            f"set {p}.rollout to all_at_once, or scale_to_zero to false",
        )
    if sv.rollout == "canary":
        _check_positive(f"{p}.canary_percent", sv.canary_percent, maximum=50)
        if sv.min_instances < 2:
            raise ConfigError(
                f"{p}.rollout", sv.rollout, "a canary needs a fleet of at least 2 instances",
                f"set {p}.min_instances to 2 or more, or rollout to all_at_once",
            )
    for name in ("scale_in_schedule", "scale_out_schedule"):
        value = getattr(sv, name)
        if value is not None and not _CRON_RE.match(value):
            raise ConfigError(f"{p}.{name}", value, "not a schedule expression", "use e.g. cron(0 20 ? * MON-FRI *)")
    if (sv.scale_in_schedule is None) != (sv.scale_out_schedule is None):
        raise ConfigError(
            f"{p}.scale_out_schedule", sv.scale_out_schedule, "scale_in_schedule and scale_out_schedule go together",
            "set both, or neither",
        )
    return sv


# --------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------


_JSON_OPENERS = ("{", "[", '"')
"""An override value starting with one of these is meant as JSON: it must parse."""


def _parse_override(value: Any, setting: str = CONTEXT_KEY) -> Any:
    """A ``-c`` value: JSON where it parses (numbers, booleans, ``null``), else a plain string; a value
    that opens as JSON (an object, a list, a quoted string) must parse, and is refused with the position."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as err:
        if value.lstrip().startswith(_JSON_OPENERS):
            near = value[max(0, err.pos - 12) : err.pos + 1]
            raise ConfigError(
                setting, value,
                f"does not parse as JSON: {err.msg} at line {err.lineno} column {err.colno} (character {err.pos}, after {near!r})",
                "fix the JSON there (in a shell, put the whole -c KEY=VALUE in single quotes)", verbatim=True,
            ) from None
        return value


def platform_overrides(context: Mapping[str, Any]) -> dict[str, Any]:
    """The command line's overrides of settings, each under its full key (``gpu_training.a.b``).

    ``cdk synth``, ``deploy`` and ``destroy`` take the same keys as the operator scripts:
    ``-c gpu_training.training_job.instance_count=2`` or, without the prefix,
    ``-c training_job.instance_count=2``. A key whose first part is a near miss of ``gpu_training`` or
    of a section (``gpu_trainng.cluster.node_count``, ``trainng_job.use_spot``), or a setting's name
    without its section (``use_spot``, ``instance_count``), is refused with the right name(s) rather
    than dropped; one setting given both ways with two values is refused too. Context the platform
    does not own (CDK's feature flags and lookups: keys starting with ``@`` or ``aws:``, or holding
    ``:`` or ``/``; ``account``, ``region``) is left alone.

    Raises:
        ConfigError: one line naming the key and the right one.
    """
    sections = [f.name for f in dataclasses.fields(PlatformConfig)]
    full: dict[str, Any] = {}
    given_as: dict[str, str] = {}
    for key, value in context.items():
        name = full_key(key)
        if not name.startswith(CONTEXT_KEY + "."):
            head = key.partition(".")[0]
            if head != CONTEXT_KEY and not head.startswith(("@", "aws:", "aws-cdk:")) and ":" not in head and "/" not in head:
                _refuse_near_miss(key, value, sections)
            continue
        if name in full and full[name] != value:
            raise ConfigError(
                name, value, f"given twice, as {given_as[name]} and as {key}, with different values", "pass it once"
            )
        full[name], given_as[name] = value, key
    return full


def full_key(key: str) -> str:
    """``gpu_training.<key>`` for a setting given without its prefix (``training_job.use_spot``); any other
    context key as given."""
    head = key.partition(".")[0]
    return f"{CONTEXT_KEY}.{key}" if head in {f.name for f in dataclasses.fields(PlatformConfig)} else key


def _refuse_near_miss(key: str, value: Any, sections: Sequence[str]) -> None:
    """Refuse ``key`` when its first part looks like a misspelling of the root or of a section, or is a
    setting given without its section (``use_spot``: ``training_job.use_spot``)."""
    head, _, rest = key.partition(".")
    lowered = head.lower().replace("-", "_")
    tail = f".{rest}" if rest else ""
    if lowered != head and lowered in (CONTEXT_KEY, *sections):
        close = [lowered]
    else:
        close = difflib.get_close_matches(lowered, [CONTEXT_KEY, *sections], n=1, cutoff=0.8)
    if close:
        right = close[0] + tail
        if close[0] != CONTEXT_KEY:
            right = f"{CONTEXT_KEY}.{right}"
        raise ConfigError(key, value, "not a setting (a misspelled key would be dropped without a word)", f"did you mean {right}?")
    homes = _setting_paths().get(lowered)
    if homes:
        choices = [f"{CONTEXT_KEY}.{home}{tail}" for home in homes]
        either = choices[0] if len(choices) == 1 else f"{', '.join(choices[:-1])} or {choices[-1]}"
        raise ConfigError(
            key, value, "not a setting: a setting's key starts with its section (it would be dropped without a word)",
            f"did you mean {either}?",
        )


@functools.cache
def _setting_paths() -> dict[str, list[str]]:
    """Each setting's name -> its dotted paths below the root (``use_spot``: ``["training_job.use_spot"]``),
    in the sections' order; the top-level settings left out (they need no section)."""
    paths: dict[str, list[str]] = {}

    def walk(cls: type, prefix: str) -> None:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            path = f"{prefix}.{f.name}"
            paths.setdefault(f.name, []).append(path)
            nested = [t for t in (hints[f.name], *typing.get_args(hints[f.name])) if dataclasses.is_dataclass(t)]
            for t in nested:
                walk(typing.cast(type, t), path)

    hints = typing.get_type_hints(PlatformConfig)
    for section in dataclasses.fields(PlatformConfig):
        if dataclasses.is_dataclass(hints[section.name]):
            walk(hints[section.name], section.name)
    return paths


def _merge_overrides(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with each override applied at its dotted key. An object given for an object merges into
    it (``-c training_job.hyperparameters='{"epochs": "3"}'`` keeps the other hyperparameters); a
    ``null`` entry in an object of strings removes that entry (:func:`_coerce`)."""
    merged: dict[str, Any] = json.loads(json.dumps(base))  # deep copy of plain JSON
    prefix = CONTEXT_KEY + "."
    for key in sorted(overrides):
        parts = key[len(prefix):].split(".")
        node = merged
        for i, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(prefix + ".".join(parts[: i + 1]), child, "not an object", f"cannot override {key} inside it")
            node = child
        value = _parse_override(overrides[key], key)
        current = node.get(parts[-1])
        node[parts[-1]] = _deep_merge(current, value) if isinstance(current, dict) and isinstance(value, dict) else value
    return merged


def _deep_merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        out[key] = _deep_merge(out[key], value) if isinstance(out.get(key), dict) and isinstance(value, dict) else value
    return out


def load_config(context: Mapping[str, Any]) -> PlatformConfig:
    """Build and validate the configuration from CDK context.

    Args:
        context: All CDK context (``app.node.get_all_context()``): the ``gpu_training`` object
            from ``cdk.json`` plus any ``gpu_training.<dotted.path>`` overrides.

    Raises:
        ConfigError: the first problem found, as one line.
    """
    raw = _parse_override(context.get(CONTEXT_KEY, {}))
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise ConfigError(CONTEXT_KEY, raw, "expected an object", f'put the settings under "context": {{"{CONTEXT_KEY}": {{...}}}} in cdk.json')
    merged = _merge_overrides(raw, platform_overrides(context))
    cfg = _build(PlatformConfig, merged, CONTEXT_KEY)
    return _validate(cfg)


def known_gpu_types() -> list[str]:
    """Names of the GPU table's rows (for messages and docs)."""
    return sorted(gpu_instance_types())
