"""trainer.toolkit's Keras callback: the ``[metrics]`` line of a script-mode job, as the stacks read it.

The training job's MetricDefinitions come from ``stacks.components.training_job_spec``; a script
that fits with ``validation_data`` must print what its ``validation:*`` regexes match.
"""

from __future__ import annotations

import re

import pytest

from stacks.components.training_job_spec import load_metric_definitions
from trainer import toolkit


def _stack_metrics(line: str) -> dict[str, float]:
    """What SageMaker records from ``line`` with the stacks' own MetricDefinitions."""
    return {d["Name"]: float(m.group(1)) for d in load_metric_definitions() if (m := re.search(d["Regex"], line))}


@pytest.mark.parametrize("accuracy", ["accuracy", "sparse_categorical_accuracy", "categorical_accuracy", "acc"])
def test_validation_fields_reach_the_stacks_metric_definitions(accuracy: str) -> None:
    logs = {"loss": 0.5, accuracy: 0.8, "val_loss": 0.7, f"val_{accuracy}": 0.6}
    line = toolkit.epoch_metrics(2, logs, examples=320, elapsed=2.0, steps=10).line()
    found = _stack_metrics(line)
    assert found["validation:loss"] == 0.7 and found["validation:accuracy"] == 0.6
    assert (found["train:epoch"], found["train:loss"], found["train:accuracy"]) == (3, 0.5, 0.8)
    assert found["train:examples_per_sec"] == 160.0 and found["train:step_time_ms"] == 200.0


def test_an_epoch_without_validation_prints_no_validation_fields() -> None:
    line = toolkit.epoch_metrics(0, {"loss": 0.5, "accuracy": 0.8}, examples=32, elapsed=1.0, steps=1).line()
    assert "val_" not in line
    assert not {name for name in _stack_metrics(line) if name.startswith("validation:")}


def test_the_keras_callback_prints_the_validation_fields(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The callback a script passes to ``model.fit`` (reviewer's case: val_loss and val_accuracy in the logs)."""
    for name in ("TF_CONFIG", "SM_NUM_GPUS", "TRAINER_JOB_START_TIME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("EXPECTED_GPU_COUNT", "0")
    monkeypatch.setattr(toolkit, "_STATE", {})
    callback = toolkit.callbacks(batch_size=32, resume=False)[0]
    callback.on_epoch_begin(0)
    callback.on_train_batch_end(0)
    callback.on_epoch_end(0, {"loss": 0.5, "accuracy": 0.8, "val_loss": 0.7, "val_accuracy": 0.6})
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("[metrics]"))
    found = _stack_metrics(line)
    assert (found["validation:loss"], found["validation:accuracy"]) == (0.7, 0.6)
