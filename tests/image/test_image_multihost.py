"""A 2-host training job as SageMaker (and its local mode) runs one: a container per host on one
Docker network, hosts named algo-1 and algo-2, each with the resourceconfig.json SageMaker writes;
the trainer builds its MultiWorkerMirroredStrategy cluster from that file alone."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.image import containers
from tests.trainer.helpers import TrainerRun, write_job
from trainer.datasets.synthetic import SyntheticSpec

pytestmark = [pytest.mark.image, pytest.mark.slow]

HOSTS = ["algo-1", "algo-2"]


def resource_config(current_host: str) -> dict:
    """What SageMaker writes to /opt/ml/input/config/resourceconfig.json on each host."""
    return {
        "current_host": current_host,
        "current_instance_type": "ml.m5.xlarge",
        "current_group_name": "homogeneousCluster",
        "hosts": HOSTS,
        "instance_groups": [{"instance_group_name": "homogeneousCluster", "instance_type": "ml.m5.xlarge", "hosts": HOSTS}],
        "network_interface_name": "eth0",
    }


def test_two_hosts_on_a_docker_network_train_one_model_together(image, tmp_path):
    data = SyntheticSpec("csv", examples=768, features=12, classes=4, shards=4, seed=5)
    hyperparameters = {"epochs": 2, "batch_size": 32, "learning_rate": 0.01, "hidden_units": "32"}
    bases = []
    for host in HOSTS:
        base = write_job(tmp_path / host, hyperparameters, data)
        (base / "input" / "config" / "resourceconfig.json").write_text(json.dumps(resource_config(host)))
        bases.append(base)
    network = f"gputrain-test-{uuid.uuid4().hex[:8]}"
    containers.docker("network", "create", network)
    try:
        names = []
        for host, base in zip(HOSTS, bases, strict=True):
            names.append(f"{network}-{host}")
            containers.start(image.tag, ["train"], opt_ml=base, name=names[-1], network=network, hostname=host)
        try:
            statuses = [containers.wait(name) for name in names]
            runs = [TrainerRun(base, status, *containers.logs(name)) for base, status, name in zip(bases, statuses, names, strict=True)]
        finally:
            for name in names:
                containers.remove(name)
    finally:
        containers.docker("network", "rm", network, check=False)

    chief, worker = runs
    assert chief.returncode == 0, chief.explain()
    assert worker.returncode == 0, worker.explain()
    for run in runs:
        (strategy,) = run.events("strategy")
        assert (strategy["replicas"], strategy["workers"]) == ("2", "2"), run.explain()
    assert chief.events("finished")[0]["weights_sha256"] == worker.events("finished")[0]["weights_sha256"]
    assert [m["epoch"] for m in chief.metrics()] == [1, 2] and worker.metrics() == []
    assert chief.model_path.exists() and not worker.model_path.exists()
