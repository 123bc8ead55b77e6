"""Which failures point at TF_USE_LEGACY_KERAS (trainer.user_code.keras_hint)."""

from __future__ import annotations

import pytest

from trainer.user_code import keras_hint
from trainer.user_code.runner import script_failure


@pytest.mark.parametrize(
    "message",
    [
        "'Mean' object has no attribute 'reset_states'",
        "Invalid filepath extension for saving. Please add either a `.keras` extension for the native Keras format",
        "`keras.optimizers.legacy` is not supported in Keras 3. When using `tf.keras`, to continue using a `tf.keras.optimizers.legacy` optimizer, you can install the `tf_keras` package",
        "No module named 'keras.layers.experimental'",
        "Argument(s) not recognized: {'lr': 0.1}",
    ],
)
def test_keras_2_idioms_point_at_the_legacy_setting(message, monkeypatch):
    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    report = {"type": "ValueError", "message": message, "file": "train.py", "line": 7, "code": "model.save(path)"}
    failure = str(script_failure("train.py", 1, report))
    assert failure.startswith(f"The training script train.py raised ValueError: {message} at train.py line 7: model.save(path).")
    assert keras_hint.HINT in failure


def test_other_failures_and_legacy_runs_get_no_pointer(monkeypatch):
    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    shape = {"type": "ValueError", "message": "Input 0 of layer dense is incompatible with the layer", "file": "train.py", "line": 3}
    assert keras_hint.HINT not in str(script_failure("train.py", 1, shape))
    keras2 = {"type": "AttributeError", "message": "'Mean' object has no attribute 'reset_states'", "file": "t.py", "line": 1}
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1")
    assert keras_hint.HINT not in str(script_failure("t.py", 1, keras2)), "Keras 2 was asked for: the hint would mislead"


def test_a_failure_without_a_report_is_recognised_from_its_last_error_lines(monkeypatch):
    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    tail = ["Traceback (most recent call last):", "ValueError: Invalid filepath extension for saving. Please add either"]
    assert keras_hint.keras2_hint(None, tail, {}) == keras_hint.HINT


def test_keras_3_fit_under_multi_worker_mirrored_strategy_gets_its_own_pointer(monkeypatch):
    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    message = ("Attempt to convert a value (PerReplica:{ 0: <tf.Tensor: shape=(8, 4), dtype=float32> }) with an unsupported "
               "type (<class 'tensorflow.python.distribute.values.PerReplica'>) to a Tensor.")
    report = {"type": "ValueError", "message": message, "file": "train.py", "line": 11, "code": "model.fit(data)"}
    failure = str(script_failure("train.py", 1, report))
    assert "at train.py line 11: model.fit(data)" in failure
    assert keras_hint.MULTI_WORKER_FIT_HINT in failure and keras_hint.HINT not in failure
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1")
    assert keras_hint.MULTI_WORKER_FIT_HINT not in str(script_failure("train.py", 1, report))


@pytest.mark.parametrize(
    ("type_", "message", "says"),
    [
        ("ModuleNotFoundError", "No module named 'sagemaker_training'", "SM_MODEL_DIR (/opt/ml/model)"),
        ("ModuleNotFoundError", "No module named 'sagemaker_tensorflow'", "Pipe input mode is not supported"),
        ("UnimplementedError", "File system scheme 's3' not implemented (file: 's3://bucket/job/model/1')", "model_dir=False"),
    ],
)
def test_what_only_aws_containers_have_gets_one_pointer(type_, message, says, monkeypatch):
    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    report = {"type": type_, "message": message, "file": "train.py", "line": 3, "code": "x"}
    failure = str(script_failure("train.py", 1, report))
    assert failure.startswith(f"The training script train.py raised {type_}: {message} at train.py line 3: x. ")
    assert says in failure and keras_hint.HINT not in failure
    assert len(failure.splitlines()) == 1
    # Recognised from the last error lines too (a shell script's python, a crash without a report).
    assert says in str(script_failure("train.sh", 1, None, [f"{type_}: {message}"]))
