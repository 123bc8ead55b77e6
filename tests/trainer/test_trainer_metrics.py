"""The metric line and the MetricDefinitions the SageMaker stack reads: one format, no cross-matching."""

from __future__ import annotations

import re

import pytest

from trainer.train.metrics import EpochMetrics, metric_definitions

FIELDS = (
    "epoch", "loss", "accuracy", "examples_per_sec", "step_time_ms", "input_wait", "gpu_util", "gpu_mem_mib",
    "val_loss", "val_accuracy",
)  # fmt: skip
# The SageMaker metric name of each field of the line.
NAMES = {field: f"train:{field}" for field in FIELDS} | {
    "input_wait": "train:input_wait_pct",
    "gpu_util": "train:gpu_utilization",
    "gpu_mem_mib": "train:gpu_memory_mib",
    "val_loss": "validation:loss",
    "val_accuracy": "validation:accuracy",
}
# The figure each field carries in a line, as the line prints it.
_UNITS = {"input_wait": "%", "gpu_util": "%"}


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
    found = {d["Name"]: m.group(1) for d in metric_definitions() if (m := re.search(d["Regex"], with_validation))}
    assert (found["train:loss"], found["validation:loss"], found["validation:accuracy"]) == ("1.500000", "0.750000", "0.500000")


@pytest.mark.parametrize("field", FIELDS)
def test_a_regex_matches_only_its_own_field(field):
    line = f"[metrics] other=1 {field}=0.5{_UNITS.get(field, '')}" if field != "epoch" else "[metrics] epoch=4 "
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


def test_the_bottleneck_figures_follow_the_throughput_and_precede_validation():
    line = EpochMetrics(
        2, 0.5, 0.75, 900.0, 12.5, val_loss=0.6, val_accuracy=0.7, input_wait_pct=62.04, gpu_util_pct=31.26, gpu_mem_mib=20480.4
    ).line()
    assert line == (
        "[metrics] epoch=2 loss=0.500000 accuracy=0.750000 examples_per_sec=900.0 step_time_ms=12.500 "
        "input_wait=62.0% gpu_util=31.3% gpu_mem_mib=20480 val_loss=0.600000 val_accuracy=0.700000"
    )
    found = {d["Name"]: m.group(1) for d in metric_definitions() if (m := re.search(d["Regex"], line))}
    assert (found["train:input_wait_pct"], found["train:gpu_utilization"], found["train:gpu_memory_mib"]) == (
        "62.0",
        "31.3",
        "20480",
    )
    assert (found["train:step_time_ms"], found["validation:loss"]) == ("12.500", "0.600000")
    # A CPU run measures the input wait but has no GPU figures: neither regex may invent them.
    cpu = EpochMetrics(2, 0.5, 0.75, 900.0, 12.5, input_wait_pct=3.0).line()
    assert cpu.endswith(" step_time_ms=12.500 input_wait=3.0%")
    assert not [d["Name"] for d in metric_definitions() if d["Name"].startswith("train:gpu") and re.search(d["Regex"], cpu)]
