"""Snapshots of the training workflow's and the pipeline's definitions (references as readable placeholders).

Field-by-field assertions are in tests/unit/test_training_job_stack.py; this guards everything
else against unintended change. After an intended change:

    .venv/bin/python -m pytest tests/snapshot/test_training_job_definition.py --snapshot-update
"""

from __future__ import annotations

import pytest
from syrupy.extensions.json import JSONSnapshotExtension

from tests.synth import cached_synth
from tests.unit.test_training_job_stack import FAST_FILE_MULTI_NODE, parse_definition

CONFIGS = {"default": {}, "fastfile-multinode-on-demand": FAST_FILE_MULTI_NODE}


@pytest.fixture(scope="module")
def synth_root(tmp_path_factory):
    return tmp_path_factory.mktemp("training-job-definition")


@pytest.mark.parametrize("config_name", list(CONFIGS))
def test_training_job_definition_snapshot(synth_root, snapshot, config_name):
    template = cached_synth(synth_root, CONFIGS[config_name]).template_json("gputrain-training")
    assert parse_definition(template) == snapshot.use_extension(JSONSnapshotExtension)


PIPELINE_CONFIGS = {"default": {}, "scale-to-zero": {"serving.scale_to_zero": True}}


@pytest.mark.parametrize("config_name", list(PIPELINE_CONFIGS))
def test_pipeline_definition_snapshot(synth_root, snapshot, config_name):
    """The pipeline's definition, readable (its behaviour is tested in tests/unit/test_pipeline_definition.py)."""
    template = cached_synth(synth_root, PIPELINE_CONFIGS[config_name]).template_json("gputrain-training")
    assert parse_definition(template, name="gputrain-pipeline") == snapshot.use_extension(JSONSnapshotExtension)
