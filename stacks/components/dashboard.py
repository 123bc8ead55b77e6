"""One CloudWatch dashboard per deployment: what the GPUs do, how jobs end, how the endpoint
answers, and what runs (and bills) right now.

Where each graph's figures come from (nothing new is emitted for the dashboard):

- Cluster nodes: the CloudWatch agent's NVIDIA metrics (:func:`~stacks.components.node_user_data.cloudwatch_agent_config`,
  aggregated per ``InstanceId``) in the project's own namespace
  (:func:`~stacks.components.node_user_data.gpu_metric_namespace`, ``<project>/ClusterNodes``), which
  only the project's nodes may publish to: another deployment's nodes, or any instance whose agent
  uses the default ``CWAgent``, are not counted.
- Training jobs: SageMaker's per-host metrics (``/aws/sagemaker/TrainingJobs``, ``Host`` =
  ``<job>/algo-<n>``, summed over the host's GPUs) and the trainer's own figures, which SageMaker
  publishes to the same namespace per ``TrainingJobName`` from the image's metric definitions
  (``training_image/trainer/metric_definitions.json``). Jobs are selected by the project name as
  a search token (``<project>-...``).
- Job outcomes: the training workflow's and the pipeline's executions (``AWS/States``), and the
  notification rules' matches (``AWS/Events``): every job that ended, whoever launched it, and
  every GPU idle alarm that fired.
- Endpoint: ``AWS/SageMaker`` by the serving stack's fixed names (the variant, or with
  ``serving.scale_to_zero`` the inference component), and its instances from
  ``/aws/sagemaker/Endpoints``.

The dashboard lives in the data-plane stack, the one stack every deployment has, and names what it
shows instead of referencing it: no cross-stack reference, so a compute stack deploys and
destroys on its own (``cdk destroy`` of one leaves no dashboard pointing at nothing but empty
graphs), and ``cdk destroy --all`` removes it with the data plane. Its body depends on the
project, the environment and the serving settings (mode, alarm thresholds) only, never on which
compute stacks are enabled or which model is served, so ``scripts.promote``'s deploy (which
deploys the data plane as a dependency) leaves it as is.

The body is rendered here as plain JSON into one ``AWS::CloudWatch::Dashboard``, rather than built
from ``aws_cloudwatch``'s widget and metric classes: one resource, no construct per widget, and a
body the tests read as data.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

from aws_cdk import Aws, Stack, Token
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk.region_info import RegionInfo
from constructs import Construct

from stacks.components.endpoint_spec import VARIANT_NAME, endpoint_name, inference_component_name
from stacks.components.gpu_idle_watch import METRIC_NAME as SAGEMAKER_GPU_METRIC
from stacks.components.gpu_idle_watch import NAMESPACE as TRAINING_JOB_NAMESPACE
from stacks.components.node_user_data import GPU_UTILIZATION_METRIC, cloudwatch_agent_config, gpu_metric_namespace
from stacks.components.pipeline_workflow import pipeline_name
from stacks.components.processing_job_spec import SAGEMAKER_PROCESSING_LOG_GROUP as PROCESSING_JOB_NAMESPACE
from stacks.components.training_job_notifications import gpu_idle_rule_name, job_state_rule_name
from stacks.components.training_job_spec import load_metric_definitions
from stacks.components.training_job_workflow import workflow_name
from stacks.config import ServingConfig

ENDPOINT_INSTANCE_NAMESPACE = "/aws/sagemaker/Endpoints"
"""Per-instance metrics of an endpoint's variant (one datapoint a minute from each instance)."""
SAGEMAKER_GPU_MEMORY_METRIC = "GPUMemoryUtilization"
"""SageMaker's per-host GPU memory figure (percent, summed over the host's GPUs)."""
TRAINER_METRICS = {"input_wait": "train:input_wait_pct", "gpu": "train:gpu_utilization", "gpu_memory": "train:gpu_memory_mib"}
"""The trainer's figures the dashboard shows, by their names in the image's metric definitions."""
PERIOD_SECONDS = 60
WIDTH = 24
"""The dashboard grid's width."""


def dashboard_name(project_name: str, region: str) -> str:
    """``<project>-<region>``: dashboards are global to the account, deployments are per region."""
    return f"{project_name}-{region}"


def agent_gpu_metric(measurement: str) -> str:
    """The CloudWatch agent's metric name of an ``nvidia_gpu`` measurement the nodes collect."""
    collected = cloudwatch_agent_config("-", "-")["metrics"]["metrics_collected"]["nvidia_gpu"]["measurement"]
    if measurement not in collected:
        raise ValueError(f"the nodes' CloudWatch agent does not collect nvidia_gpu {measurement!r} (it collects {collected})")
    return f"nvidia_smi_{measurement}"


def trainer_metric(key: str) -> str:
    """A trainer figure's metric name, checked against the image's metric definitions."""
    name = TRAINER_METRICS[key]
    defined = [d["Name"] for d in load_metric_definitions()]
    if name not in defined:
        raise ValueError(f"the image's metric definitions have no {name!r} (they define {defined})")
    return name


@dataclass(frozen=True)
class DashboardTarget:
    """What one deployment's dashboard shows.

    Attributes:
        project_name: Jobs, rules, state machines and the endpoint are named after it.
        region: The deployment's region (graphs query it).
        account: The deployment's account (state machine ARNs).
        partition: The account's partition (state machine ARNs).
        serving: Endpoint settings: the serving mode and the alarm thresholds drawn on its graphs.
    """

    project_name: str
    region: str
    account: str
    partition: str
    serving: ServingConfig


def _search(schema: str, terms: str, statistic: str, **options: Any) -> dict[str, Any]:
    """A ``SEARCH`` expression entry (``schema`` is ``namespace,dimension...``, names quoted)."""
    return {"expression": f"SEARCH('{{{schema}}} {terms}', '{statistic}', {PERIOD_SECONDS})", **options}


def _count(search_id: str, label: str) -> dict[str, Any]:
    """How many series of the search ``search_id`` have a datapoint each minute: each instance
    publishes its own series once a minute while it runs, so this counts the running instances."""
    return {"expression": f"SUM(FILL({search_id} * 0 + 1, 0))", "label": label}


def _graph(
    title: str,
    metrics: Sequence[Sequence[Any]],
    target: DashboardTarget,
    *,
    width: int = 12,
    height: int = 6,
    stat: str = "Average",
    view: str = "timeSeries",
    left: Optional[Mapping[str, Any]] = None,
    right: Optional[Mapping[str, Any]] = None,
    annotations: Sequence[Mapping[str, Any]] = (),
    **extra: Any,
) -> dict[str, Any]:
    """A metric widget (placed later by :func:`_place`)."""
    properties: dict[str, Any] = {
        "title": title,
        "region": target.region,
        "view": view,
        "stat": stat,
        "period": PERIOD_SECONDS,
        "metrics": [list(m) for m in metrics],
        **extra,
    }
    axes = {side: axis for side, axis in (("left", left), ("right", right)) if axis}
    if axes:
        properties["yAxis"] = axes
    if annotations:
        properties["annotations"] = {"horizontal": list(annotations)}
    return {"type": "metric", "width": width, "height": height, "properties": properties}


def _place(rows: Sequence[Sequence[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Give each widget its grid position: rows top to bottom, widgets left to right."""
    placed, y = [], 0
    for row in rows:
        x = 0
        for widget in row:
            placed.append({**widget, "x": x, "y": y})
            x += widget["width"]
        if x > WIDTH:
            raise ValueError(f"a dashboard row is {x} wide, the grid {WIDTH}")
        y += max(w["height"] for w in row)
    return placed


def _state_machine_arn(target: DashboardTarget, name: str) -> str:
    return f"arn:{target.partition}:states:{target.region}:{target.account}:stateMachine:{name}"


def _endpoint_dimensions(target: DashboardTarget) -> list[str]:
    """The endpoint's ``AWS/SageMaker`` dimensions, as its alarms watch them."""
    if target.serving.scale_to_zero:
        return ["InferenceComponentName", inference_component_name(target.project_name)]
    return ["EndpointName", endpoint_name(target.project_name), "VariantName", VARIANT_NAME]


def _header(target: DashboardTarget) -> dict[str, Any]:
    project, endpoint = target.project_name, endpoint_name(target.project_name)
    text = (
        f"## {project} GPU training ({target.region})\n"
        f"**Running GPU compute** is what bills now. Cluster graphs show every instance in this region whose CloudWatch "
        f"agent publishes GPU metrics (the cluster's nodes); training graphs, the jobs named `{project}-...`; endpoint "
        f"graphs, `{endpoint}`. A graph stays empty while its part is not deployed or idle. One job in detail: "
        f"`python -m scripts.watch JOB`."
    )
    return {"type": "text", "width": WIDTH, "height": 2, "properties": {"markdown": text}}


def _running_compute(target: DashboardTarget) -> dict[str, Any]:
    """The GPU instances running now: cluster nodes, job hosts and endpoint instances."""
    jobs = f"Host={target.project_name}"
    hidden = {"visible": False}
    gpu = f'MetricName="{SAGEMAKER_GPU_METRIC}"'
    endpoint = ["EndpointName", endpoint_name(target.project_name), "VariantName", VARIANT_NAME]
    metrics = [
        [_search(_nodes_schema(target), f'MetricName="{GPU_UTILIZATION_METRIC}"', "Maximum", id="nodes", **hidden)],
        [_count("nodes", "cluster nodes")],
        [_search(f'"{TRAINING_JOB_NAMESPACE}",Host', f"{gpu} {jobs}", "Average", id="trainhosts", **hidden)],
        [_count("trainhosts", "training job instances")],
        [_search(f'"{PROCESSING_JOB_NAMESPACE}",Host', f"{gpu} {jobs}", "Average", id="prochosts", **hidden)],
        [_count("prochosts", "processing job instances")],
        [ENDPOINT_INSTANCE_NAMESPACE, SAGEMAKER_GPU_METRIC, *endpoint, {"stat": "SampleCount", "label": "endpoint instances"}],
    ]
    return _graph("Running GPU compute (instances)", metrics, target, stacked=True, left={"min": 0, "showUnits": False})


def _job_outcomes(target: DashboardTarget) -> dict[str, Any]:
    """How runs ended over the dashboard's time range."""
    project = target.project_name
    metrics: list[list[Any]] = []
    for machine, label in ((workflow_name(project), "workflow"), (pipeline_name(project), "pipeline")):
        arn = _state_machine_arn(target, machine)
        for metric, outcome in (("ExecutionsSucceeded", "succeeded"), ("ExecutionsFailed", "failed"), ("ExecutionsTimedOut", "timed out"), ("ExecutionsAborted", "aborted")):
            metrics.append(["AWS/States", metric, "StateMachineArn", arn, {"label": f"{label} {outcome}"}])
    metrics.append(["AWS/Events", "TriggeredRules", "RuleName", job_state_rule_name(project), {"label": "jobs ended (completed, failed or stopped; any launcher)"}])
    metrics.append(["AWS/Events", "TriggeredRules", "RuleName", gpu_idle_rule_name(project), {"label": "GPU idle alarms fired"}])
    return _graph("Training job outcomes (in the time range)", metrics, target, stat="Sum", view="singleValue", setPeriodToTimeRange=True)


def _nodes_schema(target: DashboardTarget) -> str:
    """The search schema of the project's nodes: their namespace (quoted: it holds a slash), per instance."""
    return f'"{gpu_metric_namespace(target.project_name)}",InstanceId'


def _cluster(target: DashboardTarget) -> list[dict[str, Any]]:
    node = {"label": "${PROP('Dim.InstanceId')}"}
    schema = _nodes_schema(target)
    utilization = _search(schema, f'MetricName="{GPU_UTILIZATION_METRIC}"', "Maximum", **node)
    memory = _search(schema, f'MetricName="{agent_gpu_metric("memory_used")}"', "Maximum", **node)
    return [
        _graph("Cluster nodes: GPU utilization, busiest GPU (%)", [[utilization]], target, left={"min": 0, "max": 100}),
        _graph("Cluster nodes: GPU memory used, fullest GPU", [[memory]], target, left={"min": 0}),
    ]


def _training(target: DashboardTarget) -> list[dict[str, Any]]:
    jobs = f"Host={target.project_name}"
    host = {"label": "${PROP('Dim.Host')}"}
    schema = f'"{TRAINING_JOB_NAMESPACE}",Host'
    per_job = f'"{TRAINING_JOB_NAMESPACE}",TrainingJobName'
    in_project = f"TrainingJobName={target.project_name}"

    def trainer(key: str, **options: Any) -> dict[str, Any]:
        return _search(per_job, f'MetricName="{trainer_metric(key)}" {in_project}', "Average", **options)

    return [
        _graph(
            "Training jobs: GPU utilization per host (%, 100 per GPU)",
            [[_search(schema, f'MetricName="{SAGEMAKER_GPU_METRIC}" {jobs}', "Average", **host)]],
            target,
            width=8,
            left={"min": 0},
        ),
        _graph(
            "Training jobs: GPU memory per host (%, 100 per GPU) and trainer MiB",
            [
                [_search(schema, f'MetricName="{SAGEMAKER_GPU_MEMORY_METRIC}" {jobs}', "Average", **host)],
                [trainer("gpu_memory", label="${PROP('Dim.TrainingJobName')} MiB", yAxis="right")],
            ],
            target,
            width=8,
            left={"min": 0},
            right={"min": 0, "showUnits": False},
        ),
        _graph(
            "Training jobs: input wait and GPU busy per epoch (trainer, %)",
            [
                [trainer("input_wait", label="${PROP('Dim.TrainingJobName')} input wait")],
                [trainer("gpu", label="${PROP('Dim.TrainingJobName')} GPU busy")],
            ],
            target,
            width=8,
            left={"min": 0, "max": 100},
        ),
    ]


def _endpoint(target: DashboardTarget) -> list[dict[str, Any]]:
    dimensions = _endpoint_dimensions(target)
    name = endpoint_name(target.project_name)
    serving = target.serving
    requests = [
        ["AWS/SageMaker", "Invocations", *dimensions, {"label": "invocations"}],
        ["AWS/SageMaker", "Invocation4XXErrors", *dimensions, {"label": "4xx errors"}],
        ["AWS/SageMaker", "Invocation5XXErrors", *dimensions, {"label": "5xx errors"}],
    ]
    latency = [
        ["AWS/SageMaker", "ModelLatency", *dimensions, {"label": "average"}],
        ["AWS/SageMaker", "ModelLatency", *dimensions, {"stat": "p99", "label": "p99"}],
    ]
    return [
        _graph(
            f"Endpoint {name}: invocations and errors (per minute)",
            requests,
            target,
            stat="Sum",
            left={"min": 0},
            annotations=[{"value": serving.error_alarm_threshold, "label": "5xx alarm (rolls a deployment back)"}],
        ),
        _graph(
            f"Endpoint {name}: model latency (microseconds)",
            latency,
            target,
            left={"min": 0},
            annotations=[{"value": serving.latency_alarm_ms * 1000, "label": "latency alarm (average)"}],
        ),
    ]


def dashboard_body(target: DashboardTarget) -> dict[str, Any]:
    """The dashboard's body (CloudWatch's dashboard body structure), top to bottom: header, what
    runs now and how jobs ended, cluster nodes, training jobs, endpoint."""
    rows = [
        [_header(target)],
        [_running_compute(target), _job_outcomes(target)],
        _cluster(target),
        _training(target),
        _endpoint(target),
    ]
    return {"start": "-PT6H", "periodOverride": "inherit", "widgets": _place(rows)}


class PlatformDashboard(Construct):
    """The deployment's CloudWatch dashboard (one ``AWS::CloudWatch::Dashboard``).

    Attributes:
        dashboard_name: ``<project>-<region>`` (:func:`dashboard_name`).
        dashboard: The dashboard resource.
    """

    def __init__(self, scope: Construct, construct_id: str, *, project_name: str, serving: ServingConfig) -> None:
        """Render the body for the stack's account and region.

        Args:
            scope: Parent construct.
            construct_id: Construct id.
            project_name: The project whose jobs, nodes and endpoint are shown.
            serving: The endpoint's mode and alarm thresholds.
        """
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        # A concrete partition keeps the body a plain string in the template where the region is known.
        partition = None if Token.is_unresolved(stack.region) else RegionInfo.get(stack.region).partition
        target = DashboardTarget(
            project_name=project_name,
            region=stack.region,
            account=stack.account,
            partition=partition or Aws.PARTITION,
            serving=serving,
        )
        self.dashboard_name = dashboard_name(project_name, stack.region)
        self.dashboard = cloudwatch.CfnDashboard(
            self,
            "Resource",
            dashboard_name=self.dashboard_name,
            dashboard_body=json.dumps(dashboard_body(target), separators=(",", ":")),
        )
