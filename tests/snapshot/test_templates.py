"""Snapshots of every synthesized template, volatile values normalized.

After an intended change, update them with:

    .venv/bin/python -m pytest tests/snapshot --snapshot-update

and review the diff of tests/snapshot/__snapshots__/ like any other code change.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from syrupy.extensions.json import JSONSnapshotExtension

from tests.synth import cached_synth

CONFIGS = {
    "default": {},
    "multinode": {
        "cluster.instance_type": "g5.12xlarge",
        "cluster.node_count": 2,
        "training_job.instance_type": "ml.p4d.24xlarge",
        "training_job.instance_count": 2,
        "training_job.gpu_idle_alarm.stop_job": True,
    },
    "sandbox": {"delete_data_on_destroy": True},
}

_ASSET_HASH = re.compile(r"\b[0-9a-f]{64}\b")


def normalize(template: dict[str, Any]) -> dict[str, Any]:
    """Drop what changes without a change to the platform: asset hashes and CDK metadata."""
    resources = {k: v for k, v in template.get("Resources", {}).items() if v["Type"] != "AWS::CDK::Metadata"}
    text = json.dumps({**template, "Resources": resources}, sort_keys=True)
    text = _ASSET_HASH.sub("<asset-hash>", text)
    normalized = json.loads(text)
    normalized.get("Conditions", {}).pop("CDKMetadataAvailable", None)
    return normalized


@pytest.fixture(scope="session")
def snapshot_root(tmp_path_factory):
    return tmp_path_factory.mktemp("snapshots")


@pytest.fixture
def snapshot_json(snapshot):
    return snapshot.use_extension(JSONSnapshotExtension)


@pytest.mark.parametrize("config_name", list(CONFIGS))
@pytest.mark.parametrize("stack_id", ["gputrain-data", "gputrain-cluster", "gputrain-training"])
def test_template_snapshot(snapshot_root, snapshot_json, config_name, stack_id):
    synthesized = cached_synth(snapshot_root, CONFIGS[config_name])
    assert normalize(synthesized.template_json(stack_id)) == snapshot_json


SERVING = {
    "default": {"serving.enabled": True, "serving.training_job_name": "gputrain-job-1"},
    "scale-to-zero": {"serving.enabled": True, "serving.training_job_name": "gputrain-job-1", "serving.scale_to_zero": True},
}


@pytest.mark.parametrize("config_name", list(SERVING))
def test_serving_template_snapshot(snapshot_root, snapshot_json, config_name):
    synthesized = cached_synth(snapshot_root, SERVING[config_name])
    assert normalize(synthesized.template_json("gputrain-serving")) == snapshot_json


def test_normalize_removes_asset_hashes_but_keeps_real_changes():
    template = {
        "Resources": {
            "Fn": {"Type": "AWS::Lambda::Function", "Properties": {"Code": {"S3Key": "a" * 64 + ".zip"}, "Timeout": 5}},
            "CDKMetadata": {"Type": "AWS::CDK::Metadata", "Properties": {"Analytics": "v2:deflate64:xyz"}},
        }
    }
    out = normalize(template)
    assert out["Resources"] == {
        "Fn": {"Type": "AWS::Lambda::Function", "Properties": {"Code": {"S3Key": "<asset-hash>.zip"}, "Timeout": 5}}
    }
