"""The deployment's CloudWatch dashboard: in the data plane, named in its outputs, every graph on
the metrics the platform really emits (checked against the other stacks' templates)."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import pytest

from scripts.common import DASHBOARD_OUTPUT
from stacks.components import dashboard
from stacks.components.dashboard import DashboardTarget, agent_gpu_metric, dashboard_body, trainer_metric
from stacks.components.training_job_spec import load_metric_definitions
from stacks.config import ServingConfig, load_config
from tests.synth import project_context

SERVING = {"serving.enabled": True, "serving.training_job_name": "gputrain-job-1"}
SCALE_TO_ZERO = {**SERVING, "serving.scale_to_zero": True}
"""The serving snapshots' configurations (one synth each per session)."""


def _dashboards(synthesized: Any, stack_id: str = "gputrain-data") -> dict[str, Any]:
    resources = synthesized.template_json(stack_id)["Resources"]
    return {k: v for k, v in resources.items() if v["Type"] == "AWS::CloudWatch::Dashboard"}


def _body(synthesized: Any) -> dict[str, Any]:
    (resource,) = _dashboards(synthesized).values()
    # A plain string: no token, no cross-stack reference (compute stacks come and go on their own).
    assert isinstance(resource["Properties"]["DashboardBody"], str)
    return json.loads(resource["Properties"]["DashboardBody"])


@pytest.fixture(scope="module")
def body(default_app) -> dict[str, Any]:
    return _body(default_app)


def _widget(body: dict[str, Any], title_start: str) -> dict[str, Any]:
    (widget,) = [w for w in body["widgets"] if w["properties"].get("title", "").startswith(title_start)]
    return widget["properties"]


def _expressions(properties: dict[str, Any]) -> list[str]:
    return [m[0]["expression"] for m in properties["metrics"] if isinstance(m[0], dict)]


def _named(properties: dict[str, Any]) -> list[list[Any]]:
    """Metrics given by namespace, name and dimensions (options dropped)."""
    return [[part for part in m if not isinstance(part, dict)] for m in properties["metrics"] if not isinstance(m[0], dict)]


def test_one_dashboard_in_the_data_plane_named_per_project_and_region(default_app):
    (resource,) = _dashboards(default_app).values()
    assert resource["Properties"]["DashboardName"] == "gputrain-us-east-1"
    for stack_id in ("gputrain-cluster", "gputrain-training"):
        assert _dashboards(default_app, stack_id) == {}


def test_its_name_is_the_output_the_scripts_read(default_app):
    outputs = default_app.template_json("gputrain-data")["Outputs"]
    assert outputs[DASHBOARD_OUTPUT]["Value"] == "gputrain-us-east-1"


def test_widgets_fill_the_grid_without_overlapping(body):
    cells: set[tuple[int, int]] = set()
    for widget in body["widgets"]:
        assert widget["x"] + widget["width"] <= 24
        mine = {(x, y) for x in range(widget["x"], widget["x"] + widget["width"]) for y in range(widget["y"], widget["y"] + widget["height"])}
        assert not cells & mine, widget
        cells |= mine
    titles = [w["properties"].get("title") for w in body["widgets"] if w["type"] == "metric"]
    assert titles == [
        "Running GPU compute (instances)",
        "Training job outcomes (in the time range)",
        "Cluster nodes: GPU utilization, busiest GPU (%)",
        "Cluster nodes: GPU memory used, fullest GPU",
        "Training jobs: GPU utilization per host (%, 100 per GPU)",
        "Training jobs: GPU memory per host (%, 100 per GPU) and trainer MiB",
        "Training jobs: input wait and GPU busy per epoch (trainer, %)",
        "Endpoint gputrain-endpoint: invocations and errors (per minute)",
        "Endpoint gputrain-endpoint: model latency (microseconds)",
    ]
    assert all(w["properties"]["region"] == "us-east-1" for w in body["widgets"] if w["type"] == "metric")


def test_cluster_graphs_read_the_nodes_cloudwatch_agent_metrics(body):
    expressions = _expressions(_widget(body, "Cluster nodes: GPU utilization")) + _expressions(_widget(body, "Cluster nodes: GPU memory"))
    assert expressions == [
        "SEARCH('{\"gputrain/ClusterNodes\",InstanceId} MetricName=\"nvidia_smi_utilization_gpu\"', 'Maximum', 60)",
        "SEARCH('{\"gputrain/ClusterNodes\",InstanceId} MetricName=\"nvidia_smi_memory_used\"', 'Maximum', 60)",
    ]


def test_training_graphs_read_sagemakers_host_metrics_and_the_trainers_definitions_of_project_jobs(body):
    utilization = _expressions(_widget(body, "Training jobs: GPU utilization"))
    memory = _expressions(_widget(body, "Training jobs: GPU memory"))
    trainer = _expressions(_widget(body, "Training jobs: input wait"))
    host = "SEARCH('{\"/aws/sagemaker/TrainingJobs\",Host} MetricName=\"%s\" Host=gputrain', 'Average', 60)"
    per_job = "SEARCH('{\"/aws/sagemaker/TrainingJobs\",TrainingJobName} MetricName=\"%s\" TrainingJobName=gputrain', 'Average', 60)"
    assert utilization == [host % "GPUUtilization"]
    assert memory == [host % "GPUMemoryUtilization", per_job % "train:gpu_memory_mib"]
    assert trainer == [per_job % "train:input_wait_pct", per_job % "train:gpu_utilization"]
    defined = {d["Name"] for d in load_metric_definitions()}
    assert {"train:gpu_memory_mib", "train:input_wait_pct", "train:gpu_utilization"} <= defined


def test_running_compute_counts_nodes_job_hosts_and_endpoint_instances(body):
    properties = _widget(body, "Running GPU compute")
    entries = [m[0] for m in properties["metrics"] if isinstance(m[0], dict)]
    searches = {e["id"]: e["expression"] for e in entries if e["expression"].startswith("SEARCH(")}
    assert all(e.get("visible") is False for e in entries if e["expression"].startswith("SEARCH("))
    counts = {e["label"]: e["expression"] for e in entries if not e["expression"].startswith("SEARCH(")}
    assert counts == {
        "cluster nodes": "SUM(FILL(nodes * 0 + 1, 0))",
        "training job instances": "SUM(FILL(trainhosts * 0 + 1, 0))",
        "processing job instances": "SUM(FILL(prochosts * 0 + 1, 0))",
    }
    assert '"gputrain/ClusterNodes",InstanceId' in searches["nodes"]
    assert "/aws/sagemaker/TrainingJobs" in searches["trainhosts"] and "Host=gputrain" in searches["trainhosts"]
    assert "/aws/sagemaker/ProcessingJobs" in searches["prochosts"]
    endpoint = [m for m in properties["metrics"] if not isinstance(m[0], dict)]
    assert endpoint == [
        ["/aws/sagemaker/Endpoints", "GPUUtilization", "EndpointName", "gputrain-endpoint", "VariantName", "AllTraffic",
         {"stat": "SampleCount", "label": "endpoint instances"}]
    ]  # fmt: skip


def test_job_outcomes_name_the_training_stacks_state_machines_and_rules(default_app, body):
    training = default_app.template_json("gputrain-training")["Resources"]
    machines = {r["Properties"]["StateMachineName"] for r in training.values() if r["Type"] == "AWS::StepFunctions::StateMachine"}
    rules = {r["Properties"]["Name"] for r in training.values() if r["Type"] == "AWS::Events::Rule"}
    properties = _widget(body, "Training job outcomes")
    assert properties["view"] == "singleValue" and properties["setPeriodToTimeRange"] is True and properties["stat"] == "Sum"
    named = _named(properties)
    states = {(m[1], m[3].rsplit(":", 1)[1]) for m in named if m[0] == "AWS/States"}
    assert {name for _, name in states} == {"gputrain-training-job", "gputrain-pipeline"} <= machines
    assert {metric for metric, _ in states} == {"ExecutionsSucceeded", "ExecutionsFailed", "ExecutionsTimedOut", "ExecutionsAborted"}
    assert all(m[3].startswith("arn:aws:states:us-east-1:123456789012:stateMachine:") for m in named if m[0] == "AWS/States")
    triggered = {m[3] for m in named if m[0] == "AWS/Events"}
    assert triggered == {"gputrain-training-job-state", "gputrain-gpu-idle-alarm"} <= rules


@pytest.mark.parametrize("overrides", [SERVING, SCALE_TO_ZERO], ids=["variant", "scale-to-zero"])
def test_endpoint_graphs_watch_what_the_endpoint_alarms_watch(synth_app, overrides):
    synthesized = synth_app(overrides)
    alarms = [
        r["Properties"] for r in synthesized.template_json("gputrain-serving")["Resources"].values() if r["Type"] == "AWS::CloudWatch::Alarm"
    ]
    # An alarm on one metric, or on metric math over several (the 5xx alarm: count and share).
    watched = [m for a in alarms for m in ([s["MetricStat"]["Metric"] for s in a["Metrics"] if "MetricStat" in s] if "Metrics" in a else [a])]
    alarm_dimensions = {tuple(x for d in m["Dimensions"] for x in (d["Name"], d["Value"])) for m in watched if m["Namespace"] == "AWS/SageMaker"}
    body = _body(synthesized)
    requests, latency = _widget(body, "Endpoint gputrain-endpoint: invocations"), _widget(body, "Endpoint gputrain-endpoint: model latency")
    named = _named(requests) + _named(latency)
    assert [m[1] for m in named] == ["Invocations", "Invocation4XXErrors", "Invocation5XXErrors", "ModelLatency", "ModelLatency"]
    assert {m[0] for m in named} == {"AWS/SageMaker"}
    assert {tuple(m[2:]) for m in named} == alarm_dimensions
    assert [m[-1].get("stat") for m in latency["metrics"]] == [None, "p99"]
    serving = load_config(project_context()).serving  # the thresholds cdk.json configures
    assert requests["annotations"]["horizontal"][0]["value"] == serving.error_alarm_threshold
    assert latency["annotations"]["horizontal"][0]["value"] == serving.latency_alarm_ms * 1000  # ModelLatency is in microseconds


@pytest.mark.parametrize(
    "overrides",
    [SERVING, {"training_job.enabled": False}, {"cluster.enabled": False}],
    ids=["promoted-model", "no-training-stack", "no-cluster"],
)
def test_the_body_does_not_depend_on_which_compute_is_deployed(synth_app, body, overrides):
    """``scripts.promote``'s deploy updates the data plane as a dependency: it must stay as is."""
    assert _body(synth_app(overrides)) == body


def _target(**changes: Any) -> DashboardTarget:
    return dataclasses.replace(
        DashboardTarget(project_name="my-proj", region="eu-west-1", account="111122223333", partition="aws", serving=ServingConfig()),
        **changes,
    )


def test_project_and_environment_come_from_the_target():
    text = json.dumps(dashboard_body(_target()))
    assert "Host=my-proj" in text and "TrainingJobName=my-proj" in text
    # The nodes' graphs search the project's own namespace (another deployment's nodes are not counted).
    assert text.count('{\\"my-proj/ClusterNodes\\",InstanceId}') == 3
    assert "arn:aws:states:eu-west-1:111122223333:stateMachine:my-proj-training-job" in text
    assert "gputrain" not in text
    assert not re.search(r'"region": "(?!eu-west-1)', text)


def test_a_measurement_the_nodes_do_not_collect_is_refused():
    assert agent_gpu_metric("utilization_gpu") == "nvidia_smi_utilization_gpu"
    with pytest.raises(ValueError, match="does not collect nvidia_gpu 'clocks_current_sm'"):
        agent_gpu_metric("clocks_current_sm")


def test_a_trainer_figure_missing_from_the_metric_definitions_is_refused(monkeypatch):
    monkeypatch.setitem(dashboard.TRAINER_METRICS, "input_wait", "train:data_wait_pct")
    with pytest.raises(ValueError, match="no 'train:data_wait_pct'"):
        trainer_metric("input_wait")
