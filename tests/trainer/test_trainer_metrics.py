"""The metric line and the MetricDefinitions the SageMaker stack reads: one format, no cross-matching."""

from __future__ import annotations

import re

import pytest

from trainer.metrics import EpochMetrics, metric_definitions

FIELDS = ("epoch", "loss", "accuracy", "examples_per_sec", "step_time_ms", "val_loss", "val_accuracy")
# The SageMaker metric name of each field of the line.
NAMES = {field: f"train:{field}" for field in FIELDS} | {"val_loss": "validation:loss", "val_accuracy": "validation:accuracy"}


def test_line_has_the_contract_shape():
    line = EpochMetrics(epoch=3, loss=0.4123, accuracy=0.871, examples_per_sec=10234.12, step_time_ms=3.21).line()
    assert line == "[metrics] epoch=3 loss=0.412300 accuracy=0.871000 examples_per_sec=10234.1 step_time_ms=3.210"


def test_definitions_cover_every_field_once_within_sagemaker_limits():
    definitions = metric_definitions()
    assert [d["Name"] for d in definitions] == [NAMES[field] for field in FIELDS]
    for definition in definitions:
        assert set(definition) == {"Name", "Regex"}
        assert 1 <= len(definition["Name"]) <= 255 and 1 <= len(definition["Regex"]) <= 500
        assert re.compile(definition["Regex"]).groups == 1
        # SageMaker's matcher is not Python's: keep to syntax both share.
        assert "(?" not in definition["Regex"] and "\\d" not in definition["Regex"]


def test_each_regex_extracts_its_own_value():
    line = EpochMetrics(epoch=12, loss=1.5, accuracy=0.25, examples_per_sec=777.7, step_time_ms=9.125).line()
    found = {d["Name"]: m.group(1) for d in metric_definitions() if (m := re.search(d["Regex"], line))}
    assert found == {
        "train:epoch": "12",
        "train:loss": "1.500000",
        "train:accuracy": "0.250000",
        "train:examples_per_sec": "777.7",
        "train:step_time_ms": "9.125",
    }
    with_validation = EpochMetrics(12, 1.5, 0.25, 777.7, 9.125, val_loss=0.75, val_accuracy=0.5).line()
    assert with_validation == line + " val_loss=0.750000 val_accuracy=0.500000"
    found = {d["Name"]: re.search(d["Regex"], with_validation).group(1) for d in metric_definitions()}
    assert (found["train:loss"], found["validation:loss"], found["validation:accuracy"]) == ("1.500000", "0.750000", "0.500000")


@pytest.mark.parametrize("field", FIELDS)
def test_a_regex_matches_only_its_own_field(field):
    line = f"[metrics] other=1 {field}=0.5" if field != "epoch" else "[metrics] epoch=4 "
    for definition in metric_definitions():
        match = re.search(definition["Regex"], line)
        assert bool(match) == (definition["Name"] == NAMES[field]), (definition, line)


@pytest.mark.parametrize(
    "line",
    [
        '[trainer] config model="mlp" epochs=3 learning_rate=0.001',
        '[gpu-check] {"all_reduce_replicas": 2, "expected": 0, "ok": true}',
        "[trainer] failed reason=The loss became nan in epoch 2 at step 3 of 10",
        "epoch=1 loss=0.5 accuracy=0.9 examples_per_sec=1.0 step_time_ms=1.0",
        "[metrics] epoch=1 xval_loss=0.3 val_accuracy_top5=0.8 total_examples_per_sec=5 mean_step_time_ms=2",
    ],
)
def test_regexes_ignore_lines_that_are_not_metric_lines(line):
    matched = [d["Name"] for d in metric_definitions() if d["Name"] != "train:epoch" and re.search(d["Regex"], line)]
    assert matched == []


def test_training_regexes_do_not_read_the_validation_fields():
    line = "[metrics] epoch=1 val_loss=0.3 val_accuracy=0.8"
    matched = {d["Name"] for d in metric_definitions() if re.search(d["Regex"], line)}
    assert matched == {"train:epoch", "validation:loss", "validation:accuracy"}
