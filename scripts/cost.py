"""Estimate what the configured platform costs: per hour, per job, and standing with no job.

    python -m scripts.cost                                   # the config in cdk.json
    python -m scripts.cost -c gpu_training.cluster.node_count=4 -c gpu_training.training_job.use_spot=false
    python -m scripts.cost --hours 12                        # a 12-hour job instead of max runtime
    python -m scripts.cost -c cluster.node_count=4           # -c takes the same overrides as cdk -c

No AWS call is made: ``--region`` only says which region the (us-east-1) list prices stand in for,
and ``--profile`` is accepted like every operator script's, for the same command lines.

Prices: on-demand EC2 rates come from the GPU table (training_image/trainer/gpu_instances.json,
whose ``_price_source`` says where and when they were taken); SageMaker training adds a per-family
surcharge over EC2; spot is an assumed discount, since real spot prices move by AZ and hour.
Everything is us-east-1 list price before taxes and discounts: a budget estimate, not a bill.

Standing cost counts the cluster's nodes as stopped only where ``cluster.idle_stop_minutes`` stops them;
with it at 0 they run on demand with no job, and the standing section prices them.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from scripts.common import CONFIG_EXIT, add_common_arguments, help_epilog, load_platform_config, run  # noqa: E402
from stacks.components.cluster_job_document import DEFAULT_MAX_RUNTIME_SECONDS  # noqa: E402
from stacks.config import PlatformConfig  # noqa: E402
from stacks.gpu_instances import GpuInstanceType, lookup, price_source  # noqa: E402

HOURS_PER_MONTH = 730

# SageMaker training list price over the EC2 on-demand price of the same instance, by family,
# read off the SageMaker and EC2 pricing pages (us-east-1) on the date of the GPU table's prices.
SAGEMAKER_SURCHARGE = {"g4dn": 0.40, "g5": 0.40, "g6": 0.40, "g6e": 0.40, "p3": 0.25, "p3dn": 0.25, "p4d": 0.15, "p4de": 0.15, "p5": 0.15, "p5e": 0.15}
SPOT_DISCOUNT_ASSUMED = 0.65
"""Assumed spot saving for estimates (EC2 spot and SageMaker managed spot typically save 60-90%)."""

# Standing (no job running) list prices, us-east-1.
INTERFACE_ENDPOINT_USD_PER_AZ_HOUR = 0.01
KMS_KEY_USD_PER_MONTH = 1.00
GP3_USD_PER_GB_MONTH = 0.08
S3_STANDARD_USD_PER_GB_MONTH = 0.023
ECR_USD_PER_GB_MONTH = 0.10
CLOUDWATCH_LOGS_INGEST_USD_PER_GB = 0.50
NAT_GATEWAY_USD_PER_HOUR = 0.045
STANDING_PRICE_DATE = "2026-11-01"
PRICE_REGION = "us-east-1"


@dataclass(frozen=True)
class Line:
    """One row of the estimate.

    Attributes:
        item: What bills.
        usd_per_hour: What it bills per hour while it bills.
        usd_per_run: Per job; ``None`` for what bills by the month (standing, serving).
        note: Where the figure comes from, or what it assumes.
        hours_per_month: The hours a month it bills, for the monthly figure: around the clock unless
            something bounds it (nodes that power off after their maximum lifetime).
    """

    item: str
    usd_per_hour: float
    usd_per_run: float | None
    note: str
    hours_per_month: float = HOURS_PER_MONTH

    @property
    def usd_per_month(self) -> float:
        """What it bills in a month: :attr:`usd_per_hour` for :attr:`hours_per_month`."""
        return self.usd_per_hour * self.hours_per_month


def ec2_cluster(cfg: PlatformConfig, hours: float) -> list[Line]:
    """The GPU EC2 cluster running a job of ``hours``: on-demand (what it bills) and, for comparison, (assumed) spot."""
    if not cfg.cluster.enabled:
        return []
    price = cluster_job_price(cfg, "", hours * 3600)
    row = _row(cfg.cluster.instance_type)
    n = cfg.cluster.node_count
    spot = price.on_demand_usd_per_hour * (1 - SPOT_DISCOUNT_ASSUMED)
    what = f"{n} x {row.name} ({n * row.gpu_count} x {row.gpu_model})"
    lines = [
        Line(f"EC2 cluster, on-demand: {what}", price.usd_per_hour, price.most_usd, "GPU table price"),
        Line(f"EC2 cluster, spot: {what}", spot, spot * hours,
             f"for comparison: the nodes are on-demand; assumes {SPOT_DISCOUNT_ASSUMED:.0%} spot saving"),
    ]
    if cfg.cluster.start_training_on_boot:
        lines.append(_training_on_boot(cfg, price.usd_per_hour))
    return lines


def _training_on_boot(cfg: PlatformConfig, usd_per_hour: float) -> Line:
    """``cluster.start_training_on_boot``: every boot trains, with no maximum runtime of its own (unlike a
    ``cluster_job run``); the node's maximum lifetime is what bounds it."""
    cl = cfg.cluster
    what = f"{cl.node_count} x {cl.instance_type}"
    boots = "cluster.start_training_on_boot: every boot (the deploy, a start, a stack update's restart) trains with no maximum runtime"
    if cl.max_lifetime_hours:
        return Line(f"Training on boot, on-demand: {what}", usd_per_hour, usd_per_hour * cl.max_lifetime_hours,
                    f"{boots}; at most until cluster.max_lifetime_hours={cl.max_lifetime_hours} h after the first boot")
    after = f"then idle stop after {cl.idle_stop_minutes} min" if cl.idle_stop_minutes else "and the nodes run on after it (idle stop off)"
    return Line(f"Training on boot, on-demand: {what}", usd_per_hour, None,
                f"{boots}; bills until the training ends, {after}; no cap (cluster.max_lifetime_hours=0): /month if it never ends")


def cluster_job_price(cfg: PlatformConfig, name: str, max_runtime_seconds: float) -> JobPrice:
    """The :class:`JobPrice` of a job on the EC2 cluster (``scripts.cluster_job``): every node at the GPU
    table's on-demand price, at most for the job's maximum runtime (the nodes are on-demand instances)."""
    row = _row(cfg.cluster.instance_type)
    hourly = row.on_demand_usd_per_hour * cfg.cluster.node_count
    return JobPrice("cluster job", name, row.name, cfg.cluster.node_count, False, hourly, hourly, max_runtime_seconds / 3600)


def sagemaker_job(cfg: PlatformConfig, hours: float) -> list[Line]:
    """The SageMaker training job: on-demand and managed spot, with SageMaker's surcharge."""
    if not cfg.training_job.enabled:
        return []
    tj = cfg.training_job
    surcharge = SAGEMAKER_SURCHARGE[_row(tj.instance_type).family]
    on_demand, spot = (
        job_price("training job", "", tj.instance_type, tj.instance_count, spot=use_spot, volume_gb=tj.volume_size_gb,
                  max_runtime_seconds=int(hours * 3600)).usd_per_hour
        for use_spot in (False, True)
    )
    what = f"{tj.instance_count} x {tj.instance_type}"
    lines = [
        Line(f"SageMaker job, on-demand: {what}", on_demand, on_demand * hours,
             f"EC2 price + {surcharge:.0%} SageMaker surcharge, + {tj.volume_size_gb} GB ML storage"),
        Line(f"SageMaker job, managed spot: {what}", spot, spot * hours,
             f"assumes {SPOT_DISCOUNT_ASSUMED:.0%} spot saving" + (" (configured)" if tj.use_spot else "")),
    ]
    if tj.keep_alive_seconds:
        kept = tj.keep_alive_seconds / 3600
        lines.append(Line(f"SageMaker warm pool after each job: {what}, {tj.keep_alive_seconds // 60} min", on_demand,
                          on_demand * kept, "training_job.keep_alive_seconds: the kept instances bill until reused or released"))
    return lines


def processing_job(cfg: PlatformConfig, hours: float) -> list[Line]:
    """A SageMaker Processing job (the pipeline's first step, or ``launch --process --direct``): on-demand only."""
    if not cfg.processing.enabled:
        return []
    pr = cfg.processing
    price = job_price("processing job", "", pr.instance_type, pr.instance_count, spot=False, volume_gb=pr.volume_size_gb,
                      max_runtime_seconds=int(hours * 3600))
    return [Line(f"SageMaker processing, on-demand: {pr.instance_count} x {pr.instance_type}", price.usd_per_hour,
                 price.usd_per_hour * hours, f"the pipeline's process step; + {pr.volume_size_gb} GB ML storage")]


ML_STORAGE_USD_PER_GB_MONTH = 0.14
"""SageMaker ML storage (gp2-class) per GB-month, us-east-1."""


@dataclass(frozen=True)
class JobPrice:
    """What one job costs per hour, and the most it can cost, before it is started.

    Attributes:
        kind: ``training job``, ``processing job`` or ``cluster job`` (on the EC2 cluster).
        name: The job's name.
        instance_type: ``ml.`` type (a cluster job: the nodes' EC2 type).
        instance_count: Instances (a cluster job: the nodes).
        spot: Managed spot (training only).
        on_demand_usd_per_hour: Every instance at SageMaker's list price, with its ML storage (a cluster job:
            every node at EC2's on-demand price).
        usd_per_hour: What it is expected to bill per hour: spot at the assumed saving, else on-demand.
        max_runtime_hours: SageMaker stops the job after this much billed time.
        max_wait_hours: Spot only: the job ends within this much time, waiting for capacity included.
        keep_alive_hours: The warm pool kept after the job (on-demand only): its instances bill meanwhile.
        trials: A tuning job: the most training jobs it starts, each priced as one training job
            (the rates above are one trial's); :attr:`most_usd` counts every one.
    """

    kind: str
    name: str
    instance_type: str
    instance_count: int
    spot: bool
    on_demand_usd_per_hour: float
    usd_per_hour: float
    max_runtime_hours: float
    max_wait_hours: float | None = None
    keep_alive_hours: float = 0.0
    trials: int = 1

    @property
    def most_usd(self) -> float:
        """The most it can bill: every instance (of every trial) for its whole maximum runtime and warm pool at
        on-demand (spot never bills more)."""
        return self.on_demand_usd_per_hour * (self.max_runtime_hours + self.keep_alive_hours) * self.trials

    def line(self) -> str:
        """One line: instance, count, price per hour, the most at its maximum runtime."""
        what = f"{self.instance_count} x {self.instance_type}"
        if self.trials > 1:
            what = f"up to {self.trials} trials of {what}, each"
        if self.spot:
            rate = f"managed spot, about ${self.usd_per_hour:,.2f}/h (on-demand ${self.on_demand_usd_per_hour:,.2f}/h)"
            runtime = f"{self.trials} trials' " if self.trials > 1 else "its "
            limit = (f"; at most ${self.most_usd:,.2f} over {runtime}{self.max_runtime_hours:g} h maximum runtime (spot never bills above"
                     f" on-demand; waiting for capacity is not billed, and the job ends within {self.max_wait_hours:g} h, wait included)")
        else:
            rate = f"on-demand ${self.usd_per_hour:,.2f}/h"
            limit = f"; at most ${self.most_usd:,.2f} over its {self.max_runtime_hours:g} h maximum runtime"
            if self.trials > 1:
                limit = f"; at most ${self.most_usd:,.2f} over {self.trials} trials' {self.max_runtime_hours:g} h maximum runtime"
            if self.keep_alive_hours:
                limit += f" and {self.keep_alive_hours * 60:g} min of warm pool after it"
        return f"price: {self.kind} {self.name}: {what}, {rate}{limit}".replace(f" {self.kind} :", f" {self.kind}:")


def on_demand_usd_per_hour(instance_type: str, instance_count: int, volume_gb: int) -> float:
    """SageMaker's on-demand list price of ``instance_count`` x ``instance_type`` with ``volume_gb`` of ML storage each."""
    row = _row(instance_type)
    per_instance = row.on_demand_usd_per_hour * (1 + SAGEMAKER_SURCHARGE[row.family])
    return (per_instance + volume_gb * ML_STORAGE_USD_PER_GB_MONTH / HOURS_PER_MONTH) * instance_count


def job_price(
    kind: str, name: str, instance_type: str, instance_count: int, *, spot: bool, volume_gb: int,
    max_runtime_seconds: int, max_wait_seconds: int | None = None, keep_alive_seconds: int = 0,
) -> JobPrice:
    """The :class:`JobPrice` of one SageMaker job (us-east-1 list prices, see the module's notes)."""
    row = _row(instance_type)
    per_instance = row.on_demand_usd_per_hour * (1 + SAGEMAKER_SURCHARGE[row.family])
    storage = volume_gb * ML_STORAGE_USD_PER_GB_MONTH / HOURS_PER_MONTH
    on_demand = on_demand_usd_per_hour(instance_type, instance_count, volume_gb)
    expected = (per_instance * (1 - SPOT_DISCOUNT_ASSUMED) + storage) * instance_count if spot else on_demand
    return JobPrice(
        kind, name, instance_type, instance_count, spot, on_demand, expected, max_runtime_seconds / 3600,
        (max_wait_seconds or max_runtime_seconds) / 3600 if spot else None, keep_alive_seconds / 3600,
    )


def billed(job: Mapping[str, Any]) -> str | None:
    """What an ended training job billed, in one line, from its ``DescribeTrainingJob`` (``None`` before SageMaker
    reports ``BillableTimeInSeconds``, or for a type the price table lacks).

    SageMaker bills ``BillableTimeInSeconds`` x ``InstanceCount`` at its on-demand rate: managed spot's saving
    is in fewer billable seconds than trained ones (``1 - billable / TrainingTimeInSeconds``), not in a lower
    rate. A warm pool's ``ResourceRetainedBillableTimeInSeconds`` bills at the same rate, reported once the pool
    has ended (an ``Available`` one is said to bill on, at its hourly rate). List prices (see
    the module's notes), so an estimate of the bill, not the bill.
    """
    per_hour = _billed_usd_per_hour(job)
    if per_hour is None:
        return None
    resources, billable = job["ResourceConfig"], int(job["BillableTimeInSeconds"])
    text = f"billed: {resources.get('InstanceCount') or 1} x {resources['InstanceType']} for {billable:,} s, about ${billable * per_hour / 3600:,.2f}"
    trained = int(job.get("TrainingTimeInSeconds") or 0)
    if job.get("EnableManagedSpotTraining") and trained:
        text += f" (managed spot: {billable:,} of {trained:,} s trained are billed, {1 - billable / trained:.0%} saved)"
    pool = job.get("WarmPoolStatus") or {}
    retained = int(pool.get("ResourceRetainedBillableTimeInSeconds") or 0)
    if pool.get("Status") in ("Available", "InUse"):
        # SageMaker reports the pool's retained time once it has ended; until then it bills on.
        text += f"; its warm pool is {pool['Status']} and bills on, about ${per_hour:,.2f}/h, until a job reuses it or its keep-alive ends"
    elif retained:
        text += f"; its warm pool {retained:,} s, about ${retained * per_hour / 3600:,.2f}"
    return f"{text} ({PRICE_REGION} list prices)"


def billed_trials(jobs: Sequence[Mapping[str, Any]]) -> str | None:
    """What a tuning job's trials (their ``DescribeTrainingJob``) billed together, in one line: each trial's
    billable seconds x instances at its on-demand rate (trials keep no warm pool). ``None`` while none has
    reported ``BillableTimeInSeconds``; a trial that has not is named in the count ("2 of 3 trial(s)")."""
    counted = [(job, rate) for job in jobs if (rate := _billed_usd_per_hour(job)) is not None]
    if not counted:
        return None
    usd = sum(int(job["BillableTimeInSeconds"]) * rate / 3600 for job, rate in counted)
    billable = sum(int(job["BillableTimeInSeconds"]) for job, _ in counted)
    shapes = {(job["ResourceConfig"].get("InstanceCount") or 1, job["ResourceConfig"]["InstanceType"]) for job, _ in counted}
    trials = f"{len(counted)}{f' of {len(jobs)}' if len(counted) < len(jobs) else ''} trial(s)"
    if len(shapes) == 1:
        (count, instance_type), = shapes
        text = f"billed: {trials} of {count} x {instance_type}, {billable:,} s in all, about ${usd:,.2f}"
    else:
        seconds = sum(int(job["BillableTimeInSeconds"]) * int(job["ResourceConfig"].get("InstanceCount") or 1) for job, _ in counted)
        text = f"billed: {trials}, {seconds:,} instance-seconds in all, about ${usd:,.2f}"
    # Managed spot's saving over the trials that report both times (a trial stopped before training reports no training time).
    spot = [job for job, _ in counted if job.get("EnableManagedSpotTraining") and job.get("TrainingTimeInSeconds")]
    if spot and len(spot) == len(counted):
        paid, trained = sum(int(j["BillableTimeInSeconds"]) for j in spot), sum(int(j["TrainingTimeInSeconds"]) for j in spot)
        text += f" (managed spot: {paid:,} of {trained:,} s trained are billed, {1 - paid / trained:.0%} saved)"
    return f"{text} ({PRICE_REGION} list prices)"


def _billed_usd_per_hour(job: Mapping[str, Any]) -> float | None:
    """The on-demand rate a described training job's billable seconds bill at (its instances and ML storage);
    ``None`` before SageMaker reports ``BillableTimeInSeconds``, or for a type the price table lacks."""
    resources = job.get("ResourceConfig") or {}
    instance_type = str(resources.get("InstanceType") or "")
    if job.get("BillableTimeInSeconds") is None or lookup(instance_type) is None:
        return None
    return on_demand_usd_per_hour(instance_type, int(resources.get("InstanceCount") or 1), int(resources.get("VolumeSizeInGB") or 0))


def tuning_price(
    name: str, instance_type: str, instance_count: int, *, max_jobs: int, spot: bool, volume_gb: int,
    max_runtime_seconds: int, max_wait_seconds: int | None = None,
) -> JobPrice:
    """The :class:`JobPrice` of a tuning job: ``max_jobs`` trials, each the training job :func:`job_price`
    prices (instances x price), at most ``max_jobs`` x instances x price x maximum runtime."""
    one = job_price("tuning job", name, instance_type, instance_count, spot=spot, volume_gb=volume_gb,
                    max_runtime_seconds=max_runtime_seconds, max_wait_seconds=max_wait_seconds)
    return dataclasses.replace(one, trials=max_jobs)


def tuning_job(cfg: PlatformConfig, hours: float) -> list[Line]:
    """A tuning job (``scripts.launch --tune``) at the config's caps: ``tuning.max_parallel_jobs`` trials at
    once per hour, ``tuning.max_jobs`` trials per tuning job."""
    if not cfg.training_job.enabled:
        return []
    tj, tu = cfg.training_job, cfg.tuning
    price = tuning_price("", tj.instance_type, tj.instance_count, max_jobs=tu.max_jobs, spot=tj.use_spot,
                         volume_gb=tj.volume_size_gb, max_runtime_seconds=int(hours * 3600))
    what = f"{tu.max_jobs} trials x {tj.instance_count} x {tj.instance_type}"
    spot = "managed spot" if tj.use_spot else "on-demand"
    return [
        Line(f"Tuning job, {spot}: {what}", price.usd_per_hour * tu.max_parallel_jobs, price.usd_per_hour * hours * tu.max_jobs,
             f"{tu.max_parallel_jobs} trials at once (tuning.max_parallel_jobs); each trial a training job"
             + (f"; assumes {SPOT_DISCOUNT_ASSUMED:.0%} spot saving" if tj.use_spot else "")),
        Line(f"Tuning job at most, on-demand: {what}", price.on_demand_usd_per_hour * tu.max_parallel_jobs, price.most_usd,
             "what launch --tune checks against cost.confirm_above_usd"),
    ]


def serving(cfg: PlatformConfig) -> list[Line]:
    """The GPU endpoint: what it bills at its floor (idle) and at its ceiling (busiest).

    SageMaker real-time variants cannot scale below one instance, so an idle endpoint bills
    ``min_instances`` around the clock, unless ``serving.scale_to_zero`` serves the model as an
    inference component that scales to nothing, or the stack is destroyed.
    """
    if not cfg.serving.enabled:
        return []
    sv = cfg.serving
    row = _row(sv.instance_type)
    # SageMaker real-time inference lists the same per-family premium over EC2 as training.
    per_instance = row.on_demand_usd_per_hour * (1 + SAGEMAKER_SURCHARGE[row.family])
    if sv.scale_to_zero:
        idle = Line(f"Endpoint idle: 0 x {sv.instance_type} (scale_to_zero)", 0.0, None,
                    "no copy and no instance without traffic; the first request after idling waits for a GPU instance")
    else:
        idle = Line(f"Endpoint idle: {sv.min_instances} x {sv.instance_type} (min_instances)", per_instance * sv.min_instances, None,
                    f"bills with no traffic; serving.scale_to_zero=true or destroying {cfg.project_name}-serving pays nothing")
    lines = [
        idle,
        Line(f"Endpoint at max_instances: {sv.max_instances} x {sv.instance_type}", per_instance * sv.max_instances, None,
             "under sustained load (autoscaling ceiling)"),
    ]
    if sv.scale_in_schedule:
        floor = 0 if sv.scale_to_zero else 1
        lines.append(Line(f"Endpoint during scheduled scale-in: {floor} instance(s)", per_instance * floor, None, sv.scale_in_schedule))
    return lines


def standing(cfg: PlatformConfig, *, dataset_gb: float, artifacts_gb: float, image_gb: float) -> list[Line]:
    """What still bills with the stacks deployed and no job running: storage and network, and the cluster's
    nodes (:func:`cluster_standing`), which run on with no job where idle stop is off."""
    azs = cfg.network.max_azs
    endpoints = len(cfg.network.interface_endpoints)
    lines = [
        Line(f"VPC interface endpoints: {endpoints} x {azs} AZ", endpoints * azs * INTERFACE_ENDPOINT_USD_PER_AZ_HOUR, None,
             "largest standing cost; trim network.interface_endpoints to what you use"),
        Line("KMS key", KMS_KEY_USD_PER_MONTH / HOURS_PER_MONTH, None, "plus $0.03 per 10k requests"),
        Line(f"S3: {dataset_gb:g} GB datasets + {artifacts_gb:g} GB artifacts", (dataset_gb + artifacts_gb) * S3_STANDARD_USD_PER_GB_MONTH / HOURS_PER_MONTH, None,
             "versioned: old versions bill until the lifecycle rule expires them"),
        Line(f"ECR: {image_gb:g} GB of images", image_gb * ECR_USD_PER_GB_MONTH / HOURS_PER_MONTH, None, "lifecycle rule caps the image count"),
        Line("CloudWatch Logs", 0.0, None, f"${CLOUDWATCH_LOGS_INGEST_USD_PER_GB}/GB ingested while jobs and nodes run; "
             + ("the nodes run here" if nodes_keep_running(cfg) else "nothing when idle")),
    ]
    lines += cluster_standing(cfg)
    if cfg.network.nat_gateways:
        lines.append(Line(f"NAT gateways: {cfg.network.nat_gateways}", cfg.network.nat_gateways * NAT_GATEWAY_USD_PER_HOUR, None, "plus $0.045/GB processed"))
    return lines


def nodes_keep_running(cfg: PlatformConfig) -> bool:
    """The cluster's nodes run on with no job: deployed with idle stop off (``cluster.idle_stop_minutes=0``)."""
    return cfg.cluster.enabled and not cfg.cluster.idle_stop_minutes


def cluster_standing(cfg: PlatformConfig) -> list[Line]:
    """The cluster with no job: its nodes' root volumes, and the nodes themselves unless idle stop stops them.

    With ``cluster.idle_stop_minutes`` (the default) an idle node stops and only its volume bills. At 0 the nodes
    run on demand with no job until ``cluster.max_lifetime_hours`` after their first boot powers them off (see
    :mod:`stacks.components.gpu_cluster`), or, with that at 0 too, until someone stops or destroys them.
    """
    cl = cfg.cluster
    if not cl.enabled:
        return []
    gb = cl.root_volume_gb * cl.node_count
    volumes_usd_per_hour = gb * GP3_USD_PER_GB_MONTH / HOURS_PER_MONTH
    if not nodes_keep_running(cfg):
        return [Line(f"Stopped GPU nodes' root volumes: {gb} GB gp3", volumes_usd_per_hour, None,
                     f"idle nodes stop after {cl.idle_stop_minutes} min (cluster.idle_stop_minutes), not terminated: their volumes still bill")]
    running = f"GPU nodes running with no job, on-demand: {cl.node_count} x {cl.instance_type}"
    usd_per_hour = cluster_job_price(cfg, "", 0).on_demand_usd_per_hour
    if cl.max_lifetime_hours:
        hours = min(cl.max_lifetime_hours, HOURS_PER_MONTH)
        nodes = Line(running, usd_per_hour, None,
                     f"cluster.idle_stop_minutes=0: they run until cluster.max_lifetime_hours={cl.max_lifetime_hours} h after their first boot, "
                     f"then stop; /month counts those {hours:g} h once (one deploy of the nodes a month)", hours_per_month=hours)
    else:
        nodes = Line(running, usd_per_hour, None,
                     "cluster.idle_stop_minutes=0 and cluster.max_lifetime_hours=0: they run around the clock until you stop or destroy them")
    return [nodes, Line(f"GPU nodes' root volumes: {gb} GB gp3", volumes_usd_per_hour, None, "bill whether the nodes run or are stopped")]


def _row(instance_type: str) -> GpuInstanceType:
    row = lookup(instance_type)
    assert row is not None, "validated by load_config"
    return row


def _amount(minimum_exclusive: bool) -> Any:
    """An argparse type: a finite number above 0 (hours) or at least 0 (sizes)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value) or value < 0 or (minimum_exclusive and value == 0):
            raise argparse.ArgumentTypeError(f"{text} must be {'above 0' if minimum_exclusive else '0 or more'}")
        return value

    return parse


def render(title: str, lines: Sequence[Line], hours: float | None) -> str:
    out = [title]
    for line in lines:
        run = f"  ${line.usd_per_run:>10,.2f}/job" if line.usd_per_run is not None else f"  ${line.usd_per_month:>8,.2f}/month"
        out.append(f"  {line.item:<62} ${line.usd_per_hour:>9,.3f}/h{run}   {line.note}")
    if hours is not None:
        out.append(f"  (a job is {hours:g} h)")
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.cost",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=help_epilog(
            "python -m scripts.cost",
            [
                ("", "the configuration in cdk.json: per hour, per job at its maximum runtime, standing"),
                ("--hours 12", "a 12-hour job instead"),
                ("-c gpu_training.cluster.node_count=4 -c gpu_training.training_job.use_spot=false", "what a change would cost"),
            ],
            credentials="none: prices come from the GPU table in the repository and no AWS API is called "
            "(--region only labels the list prices).",
            done="the estimate is printed",
            cannot_proceed=CONFIG_EXIT,
        ),
    )
    parser.add_argument("--hours", type=_amount(True), help="job length in hours, above 0 (default: each kind of job's max "
                        f"runtime: the config's for SageMaker jobs, {DEFAULT_MAX_RUNTIME_SECONDS // 3600} h for a cluster job)")
    parser.add_argument("--dataset-gb", type=_amount(False), default=100.0)
    parser.add_argument("--artifacts-gb", type=_amount(False), default=50.0)
    parser.add_argument("--image-gb", type=_amount(False), default=8.0)
    add_common_arguments(parser)
    args = parser.parse_args(argv)
    cfg = load_platform_config(args.context)
    if args.region and args.region != PRICE_REGION:
        print(f"note: prices are {PRICE_REGION} list prices; {args.region} may differ by a few percent\n")
    hours = args.hours if args.hours is not None else cfg.training_job.max_runtime_seconds / 3600
    print(f"Prices: {price_source()} SageMaker surcharge per family and standing prices as of {STANDING_PRICE_DATE}; "
          f"spot is an assumed {SPOT_DISCOUNT_ASSUMED:.0%} saving.\n")
    # A cluster job (scripts.cluster_job run) stops at its own --max-runtime, by default the document's.
    cluster_hours = args.hours if args.hours is not None else DEFAULT_MAX_RUNTIME_SECONDS / 3600
    sections = [
        ("Cluster job (python -m scripts.cluster_job run: every node on-demand, at most its maximum runtime)",
         ec2_cluster(cfg, cluster_hours), cluster_hours),
        ("SageMaker training job", sagemaker_job(cfg, hours), hours),
        ("SageMaker tuning job (python -m scripts.launch --tune: up to tuning.max_jobs training jobs)", tuning_job(cfg, hours), hours),
    ]  # fmt: skip
    rendered = [render(title, lines, section_hours) for title, lines, section_hours in sections if lines]
    print("\n\n".join(rendered) or "Training compute: none enabled (cluster.enabled and training_job.enabled are false)")
    process_hours = args.hours if args.hours is not None else cfg.processing.max_runtime_seconds / 3600
    processing = processing_job(cfg, process_hours)
    if processing:
        print()
        print(render("Processing (the pipeline's first step: a pipeline run bills it, then the training job)", processing, process_hours))
    idle = standing(cfg, dataset_gb=args.dataset_gb, artifacts_gb=args.artifacts_gb, image_gb=args.image_gb)
    nodes_run = nodes_keep_running(cfg)
    print()
    print(render("Standing cost with no job running ("
                 + ("the cluster's nodes keep running: cluster.idle_stop_minutes=0)" if nodes_run else "no compute runs)"), idle, None))
    endpoint = serving(cfg)
    counted = [*idle, *endpoint[:1]]
    total, total_month = sum(line.usd_per_hour for line in counted), sum(line.usd_per_month for line in counted)
    if endpoint:
        print()
        print(render("Serving (GPU endpoint)", endpoint, None))
    else:
        print("\nServing: no endpoint deployed (serving.enabled=false): $0 when idle.")
    label = "total standing" + (" incl. running nodes" if nodes_run else "") + (" incl. idle endpoint" if endpoint else "")
    print(f"  {label:<62} ${total:>9,.3f}/h  ${total_month:>8,.2f}/month")
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
