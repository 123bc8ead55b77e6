"""The cost estimator's arithmetic follows the GPU table and the config."""

from __future__ import annotations

import json

import pytest

from scripts import cost
from stacks.config import load_config
from stacks.gpu_instances import gpu_instance_types
from tests.synth import project_context


def config(**overrides):
    context = project_context()
    context.update({f"gpu_training.{k.replace('__', '.')}": json.dumps(v) for k, v in overrides.items()})
    return load_config(context)


def test_every_table_family_has_a_sagemaker_surcharge():
    assert {row.family for row in gpu_instance_types().values()} <= set(cost.SAGEMAKER_SURCHARGE)


def test_ec2_cluster_cost_scales_with_nodes_and_hours():
    lines = cost.ec2_cluster(config(cluster__instance_type="g5.12xlarge", cluster__node_count=2), hours=10)
    on_demand, spot = lines
    assert on_demand.usd_per_hour == pytest.approx(2 * 5.672)
    assert on_demand.usd_per_run == pytest.approx(2 * 5.672 * 10)
    assert spot.usd_per_hour == pytest.approx(on_demand.usd_per_hour * (1 - cost.SPOT_DISCOUNT_ASSUMED))
    assert "8 x NVIDIA A10G" in on_demand.item


def test_sagemaker_job_adds_the_family_surcharge_and_storage():
    cfg = config(training_job__instance_type="ml.p4d.24xlarge", training_job__instance_count=2, training_job__volume_size_gb=730)
    on_demand, _ = cost.sagemaker_job(cfg, hours=1)
    compute = 2 * 21.958 * 1.15
    storage = 2 * 730 * 0.14 / 730
    assert on_demand.usd_per_hour == pytest.approx(compute + storage)


def test_disabled_units_cost_nothing():
    cfg = config(cluster__enabled=False, training_job__enabled=False)
    assert cost.ec2_cluster(cfg, 1) == [] and cost.sagemaker_job(cfg, 1) == []


def test_standing_cost_lists_endpoints_key_and_stopped_volumes_and_nat_when_configured():
    lines = {line.item.split(":")[0]: line for line in cost.standing(config(network__nat_gateways=1), dataset_gb=0, artifacts_gb=0, image_gb=0)}
    assert lines["VPC interface endpoints"].usd_per_hour == pytest.approx(10 * 2 * 0.01)
    assert "KMS key" in lines and "Stopped GPU nodes' root volumes" in lines
    assert lines["NAT gateways"].usd_per_hour == pytest.approx(0.045)


def test_cli_prints_sources_and_totals(capsys):
    assert cost.main(["--hours", "2"]) == 0
    out = capsys.readouterr().out
    assert "as recorded 2026-11-01" in out and "SageMaker job, managed spot" in out and "total standing" in out


def test_cli_refuses_bad_config_with_one_line(capsys):
    from scripts.common import run

    assert run(cost.main, ["-c", "gpu_training.cluster.instance_type=m5.large"]) == 3
    assert capsys.readouterr().err.startswith('error: invalid configuration: gpu_training.cluster.instance_type = "m5.large"')


def test_cli_takes_the_common_options_and_the_short_override_keys(capsys):
    assert cost.main(["--region", "eu-west-1", "--profile", "unused", "-c", "cluster.node_count=2", "--hours", "1"]) == 0
    out = capsys.readouterr().out
    assert "prices are us-east-1 list prices; eu-west-1 may differ" in out and "2 x g5.xlarge" in out


@pytest.mark.parametrize("argv", [["--hours", "-3"], ["--hours", "0"], ["--hours", "nan"], ["--dataset-gb", "-1"], ["--hours", "x"]])
def test_cli_refuses_negative_or_zero_amounts(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cost.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "$" not in err and err.strip().splitlines()[-1].startswith("python -m scripts.cost: error: argument")


def test_serving_idle_cost_is_min_instances_around_the_clock():
    assert cost.serving(config()) == []
    cfg = config(serving__enabled=True, serving__training_job_name="job-1", serving__min_instances=2, serving__max_instances=4, serving__initial_instance_count=2)
    idle, busiest = cost.serving(cfg)
    per_instance = 1.006 * 1.40  # ml.g5.xlarge: EC2 price + SageMaker's premium
    assert idle.usd_per_hour == pytest.approx(2 * per_instance)
    assert busiest.usd_per_hour == pytest.approx(4 * per_instance)
    assert "serving.scale_to_zero=true or destroying gputrain-serving pays nothing" in idle.note


def test_cost_prints_the_idle_endpoint_in_the_standing_total(capsys):
    assert cost.main(["-c", "gpu_training.serving.enabled=true", "-c", "gpu_training.serving.training_job_name=job-1"]) == 0
    out = capsys.readouterr().out
    assert "Endpoint idle: 1 x ml.g5.xlarge (min_instances)" in out
    assert "total standing incl. idle endpoint" in out
    assert cost.main([]) == 0
    assert "no endpoint deployed (serving.enabled=false): $0 when idle" in capsys.readouterr().out


def test_scale_to_zero_endpoint_costs_nothing_idle():
    cfg = config(serving__enabled=True, serving__training_job_name="job-1", serving__scale_to_zero=True, serving__max_instances=3)
    idle, busiest = cost.serving(cfg)
    assert idle.usd_per_hour == 0.0 and "scale_to_zero" in idle.item
    assert busiest.usd_per_hour == pytest.approx(3 * 1.006 * 1.40)


def test_a_cluster_job_costs_every_node_on_demand_for_its_maximum_runtime():
    cfg = config(cluster__instance_type="g5.12xlarge", cluster__node_count=2)
    price = cost.cluster_job_price(cfg, "job-1", 7200)
    assert price.on_demand_usd_per_hour == pytest.approx(2 * 5.672) and price.usd_per_hour == price.on_demand_usd_per_hour
    assert price.most_usd == pytest.approx(2 * 5.672 * 2)
    assert price.line() == "price: cluster job job-1: 2 x g5.12xlarge, on-demand $11.34/h; at most $22.69 over its 2 h maximum runtime"
    # The cost table's cluster line is the same formula.
    on_demand, _ = cost.ec2_cluster(cfg, hours=2)
    assert (on_demand.usd_per_hour, on_demand.usd_per_run) == (price.on_demand_usd_per_hour, price.most_usd)


def _cluster_job_line(out: str) -> tuple[str, list[str]]:
    """The on-demand line's per-job dollars, and the cluster job's section of the printout."""
    section = out[out.index("Cluster job (python -m scripts.cluster_job run") :].split("\n\n")[0].splitlines()
    (on_demand,) = [line for line in section if "EC2 cluster, on-demand: 3 x g5.xlarge" in line]
    return on_demand.split("/h")[1].split("/job")[0].replace("$", "").strip(), section


def test_cli_prices_a_cluster_job_at_its_default_maximum_runtime(capsys):
    from stacks.components.cluster_job_document import DEFAULT_MAX_RUNTIME_SECONDS

    assert cost.main(["-c", "gpu_training.cluster.node_count=3"]) == 0
    per_job, section = _cluster_job_line(capsys.readouterr().out)
    assert per_job == f"{3 * 1.006 * DEFAULT_MAX_RUNTIME_SECONDS / 3600:,.2f}" == "72.43"  # 3 nodes x $1.006/h x 24 h
    assert section[-1] == f"  (a job is {DEFAULT_MAX_RUNTIME_SECONDS / 3600:g} h)"
    assert cost.main(["--hours", "2", "-c", "gpu_training.cluster.node_count=3"]) == 0
    assert _cluster_job_line(capsys.readouterr().out)[0] == "6.04"


# --- the cluster's nodes with no job: stopped only where idle stop stops them ---------------------------------


def _standing(**overrides):
    return {line.item.split(":")[0]: line for line in cost.standing(config(**overrides), dataset_gb=0, artifacts_gb=0, image_gb=0)}


def test_standing_counts_the_nodes_stopped_only_where_idle_stop_is_on():
    lines = _standing(cluster__node_count=2)
    assert "GPU nodes running with no job, on-demand" not in lines
    volumes = lines["Stopped GPU nodes' root volumes"]
    assert volumes.usd_per_hour == pytest.approx(2 * 200 * 0.08 / 730)
    assert "idle nodes stop after 60 min (cluster.idle_stop_minutes)" in volumes.note


def test_standing_prices_the_running_nodes_until_their_maximum_lifetime_when_idle_stop_is_off():
    lines = _standing(cluster__idle_stop_minutes=0, cluster__instance_type="g5.12xlarge", cluster__node_count=2, cluster__max_lifetime_hours=48)
    nodes = lines["GPU nodes running with no job, on-demand"]
    assert nodes.item.endswith("2 x g5.12xlarge")
    assert nodes.usd_per_hour == pytest.approx(2 * 5.672) and nodes.usd_per_run is None
    assert nodes.usd_per_month == pytest.approx(2 * 5.672 * 48)  # 48 h after the first boot, then they stop
    assert "until cluster.max_lifetime_hours=48 h after their first boot" in nodes.note and "48 h once" in nodes.note
    assert "Stopped GPU nodes' root volumes" not in lines and "stopped, not terminated" not in " ".join(line.note for line in lines.values())
    assert lines["GPU nodes' root volumes"].usd_per_hour == pytest.approx(2 * 200 * 0.08 / 730)


@pytest.mark.parametrize(("lifetime", "hours"), [(0, 730), (1000, 730), (1, 1)])
def test_running_nodes_bill_around_the_clock_without_a_maximum_lifetime(lifetime, hours):
    nodes = _standing(cluster__idle_stop_minutes=0, cluster__max_lifetime_hours=lifetime)["GPU nodes running with no job, on-demand"]
    assert nodes.usd_per_month == pytest.approx(1.006 * hours)
    assert ("until you stop or destroy them" in nodes.note) == (lifetime == 0)


def test_cli_standing_with_idle_stop_off_bills_the_nodes_and_says_they_run(capsys):
    assert cost.main(["-c", "cluster.enabled=true", "-c", "cluster.idle_stop_minutes=0", "-c", "cluster.max_lifetime_hours=0"]) == 0
    out = capsys.readouterr().out
    standing_section = out[out.index("Standing cost with no job running") :]
    assert "no compute runs" not in out and "idle nodes stop" not in out and "Stopped GPU nodes" not in out
    assert "the cluster's nodes keep running: cluster.idle_stop_minutes=0" in standing_section.splitlines()[0]
    (nodes,) = [line for line in standing_section.splitlines() if "GPU nodes running with no job, on-demand: 1 x g5.xlarge" in line]
    assert "$    1.006/h  $  734.38/month" in nodes  # $1.006/h x 730 h
    (total,) = [line for line in out.splitlines() if "total standing" in line]
    assert "incl. running nodes" in total
    assert float(total.split("/h")[1].split("/month")[0].replace("$", "").replace(",", "")) > 734.38


def test_cli_total_standing_counts_running_nodes_for_their_lifetime_only(capsys):
    assert cost.main(["-c", "cluster.idle_stop_minutes=0", "--dataset-gb", "0", "--artifacts-gb", "0", "--image-gb", "0"]) == 0
    out = capsys.readouterr().out
    (total,) = [line for line in out.splitlines() if "total standing" in line]
    month = 10 * 2 * 0.01 * 730 + 1.00 + 1.006 * 24 + 200 * 0.08  # endpoints, key, the nodes' 24 h lifetime, volumes
    assert total.endswith(f"${month:>8,.2f}/month")


def test_training_on_boot_is_bounded_by_the_maximum_lifetime_not_a_job_runtime():
    lines = cost.ec2_cluster(config(cluster__start_training_on_boot=True, cluster__node_count=2, cluster__max_lifetime_hours=10), hours=24)
    boot = lines[-1]
    assert boot.item == "Training on boot, on-demand: 2 x g5.xlarge"
    assert boot.usd_per_run == pytest.approx(2 * 1.006 * 10) and "cluster.max_lifetime_hours=10 h" in boot.note
    unbounded = cost.ec2_cluster(config(cluster__start_training_on_boot=True, cluster__max_lifetime_hours=0, cluster__idle_stop_minutes=0), hours=24)[-1]
    assert unbounded.usd_per_run is None and "no cap" in unbounded.note and "idle stop off" in unbounded.note
    assert len(cost.ec2_cluster(config(), hours=24)) == 2


def test_an_ended_jobs_bill_is_its_billable_seconds_times_instances_at_the_on_demand_rate():
    """Managed spot bills fewer seconds, not a lower rate: 600 billable of 1,500 trained is 60% saved."""
    rate = 1.006 * 1.40 + 100 * 0.14 / 730  # g5.xlarge's EC2 price, SageMaker's g5 surcharge, 100 GB of ML storage, per hour
    job = {"TrainingJobName": "j", "BillableTimeInSeconds": 600, "TrainingTimeInSeconds": 1500, "EnableManagedSpotTraining": True,
           "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 2, "VolumeSizeInGB": 100}}
    assert cost.billed(job) == (f"billed: 2 x ml.g5.xlarge for 600 s, about ${2 * 600 * rate / 3600:,.2f} (managed spot: 600 of "
                                "1,500 s trained are billed, 60% saved) (us-east-1 list prices)")
    warm = {**job, "EnableManagedSpotTraining": False, "BillableTimeInSeconds": 1500,
            "WarmPoolStatus": {"Status": "Terminated", "ResourceRetainedBillableTimeInSeconds": 900}}
    assert cost.billed(warm).endswith(f"for 1,500 s, about ${2 * 1500 * rate / 3600:,.2f}; its warm pool 900 s, about "
                                      f"${2 * 900 * rate / 3600:,.2f} (us-east-1 list prices)")
    # A pool still Available has no retained time yet: it bills on, at the instances' hourly rate.
    available = {**warm, "WarmPoolStatus": {"Status": "Available"}}
    assert cost.billed(available).endswith(f"; its warm pool is Available and bills on, about ${2 * rate:,.2f}/h, until a job "
                                           "reuses it or its keep-alive ends (us-east-1 list prices)")
    # Before SageMaker reports it, or a type the price table lacks: no line rather than a wrong one.
    assert cost.billed({**job, "BillableTimeInSeconds": None}) is None
    assert cost.billed({**job, "ResourceConfig": {"InstanceType": "ml.trn1.2xlarge", "InstanceCount": 1}}) is None


def test_a_tuning_jobs_trials_are_billed_together_as_each_would_be():
    rate = 1.006 * 1.40 + 100 * 0.14 / 730
    trial = {"ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 2, "VolumeSizeInGB": 100}, "EnableManagedSpotTraining": True}
    trials = [{**trial, "BillableTimeInSeconds": 300, "TrainingTimeInSeconds": 1000},
              {**trial, "BillableTimeInSeconds": 500, "TrainingTimeInSeconds": 1000},
              {**trial}]  # a trial that never started: nothing billed, nothing counted
    assert cost.billed_trials(trials) == (f"billed: 2 of 3 trial(s) of 2 x ml.g5.xlarge, 800 s in all, about ${2 * 800 * rate / 3600:,.2f} "
                                          "(managed spot: 800 of 2,000 s trained are billed, 60% saved) (us-east-1 list prices)")
    assert cost.billed_trials([trial]) is None and cost.billed_trials([]) is None
    # A trial without its training time leaves the saving out rather than understating it; other shapes count instance-seconds.
    other = {**trials[0], "ResourceConfig": {**trial["ResourceConfig"], "InstanceCount": 1}, "TrainingTimeInSeconds": None}
    assert cost.billed_trials([trials[1], other]) == (f"billed: 2 trial(s), 1,300 instance-seconds in all, about ${1300 * rate / 3600:,.2f} "
                                                      "(us-east-1 list prices)")
