"""Hyperparameters: SageMaker's string values parsed, every mistake refused by name."""

from __future__ import annotations

import json

import pytest

from trainer.contract.errors import ConfigError
from trainer.contract.hyperparameters import TrainingConfig, known_hyperparameters


def test_no_hyperparameters_gives_the_documented_defaults():
    config = TrainingConfig.from_hyperparameters({})
    assert config == TrainingConfig()
    assert (config.model, config.epochs, config.batch_size, config.mixed_precision, config.xla) == (
        "mlp",
        10,
        256,
        "auto",
        None,  # unset: resolved per job (on for resnet50 on GPUs, issue #21), see TrainingConfig.resolved_for
    )


def test_string_values_as_sagemaker_writes_them_are_typed():
    config = TrainingConfig.from_hyperparameters(
        {
            "model": "cnn",
            "epochs": "4",
            "batch_size": "128",
            "learning_rate": "0.01",
            "optimizer": "SGD",
            "hidden_units": "64,32",
            "conv_filters": "8",
            "dropout": "0.25",
            "image_shape": "28x28x1",
            "num_classes": "10",
            "data_format": "TFRecord",
            "mixed_precision": "OFF",
            "xla": "True",
            "expected_gpu_count": "8",
            "seed": "7",
            "checkpoint_every_epochs": "2",
        }
    )
    assert config.model == "cnn"
    assert config.epochs == 4 and config.batch_size == 128
    assert config.learning_rate == pytest.approx(0.01) and config.optimizer == "sgd"
    assert config.hidden_units == (64, 32) and config.conv_filters == (8,)
    assert config.dropout == pytest.approx(0.25)
    assert config.image_shape == (28, 28, 1)
    assert config.num_classes == 10 and config.data_format == "tfrecord"
    assert config.mixed_precision == "off" and config.xla is True
    assert config.expected_gpu_count == 8 and config.seed == 7 and config.checkpoint_every_epochs == 2


def test_json_encoded_values_from_the_sagemaker_sdk_are_accepted():
    # Framework estimators json.dumps every value, so strings arrive quoted.
    config = TrainingConfig.from_hyperparameters({"model": '"mlp"', "epochs": "3", "hidden_units": "[32, 16]"})
    assert (config.model, config.epochs, config.hidden_units) == ("mlp", 3, (32, 16))


def test_keys_that_sagemaker_injects_are_tolerated():
    config = TrainingConfig.from_hyperparameters(
        {
            "sagemaker_region": '"eu-west-1"',
            "_tuning_objective_metric": "train:loss",
            "model_dir": "s3://bucket/model",
            "epochs": "2",
        }
    )
    assert config.epochs == 2


def test_a_named_script_is_never_trained_as_a_built_in_model():
    # The SDK's entry_point once trained the built-in MLP and reported Completed.
    with pytest.raises(ConfigError, match="names a training script"):
        TrainingConfig.from_hyperparameters({"sagemaker_program": '"train.py"', "epochs": "2"})


def test_unknown_key_is_refused_by_name_with_the_closest_known_key():
    with pytest.raises(ConfigError) as caught:
        TrainingConfig.from_hyperparameters({"learning_rat": "0.1"})
    assert "unknown hyperparameter 'learning_rat'" in str(caught.value)
    assert "did you mean 'learning_rate'?" in str(caught.value)


def test_unknown_key_without_a_close_match_lists_the_known_keys():
    with pytest.raises(ConfigError) as caught:
        TrainingConfig.from_hyperparameters({"optimiser_schedule": "cosine"})
    message = str(caught.value)
    assert "'optimiser_schedule'" in message and "did you mean" not in message
    assert all(name in message for name in known_hyperparameters())


def test_every_problem_is_reported_at_once():
    with pytest.raises(ConfigError) as caught:
        TrainingConfig.from_hyperparameters({"epochs": "0", "batch_size": "abc", "model": "resnet", "lr": "1"})
    message = str(caught.value)
    for fragment in ("'epochs' must be >= 1", "'batch_size' must be an integer", "'model' must be one of", "'lr'"):
        assert fragment in message


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("epochs", "2.5"),
        ("learning_rate", "-1"),
        ("learning_rate", "nan"),
        ("optimizer", "adagrad"),
        ("dropout", "1.0"),
        ("xla", "maybe"),
        ("image_shape", "28x28"),
        ("hidden_units", "64,-1"),
        ("mixed_precision", "fp8"),
        ("data_format", "parquet"),
        ("train_channel", "a/b"),
        ("expected_gpu_count", "-2"),
        ("shuffle_buffer", "0"),
        ("steps_per_execution", "0"),
        ("validation_every_epochs", "0"),
        ("early_stopping_patience", "-1"),
        ("divergence_factor", "0.5"),
        ("on_divergence", "ignore"),
        ("cache_max_mb", "-1"),
    ],
)
def test_invalid_values_are_refused_naming_key_and_value(key, value):
    with pytest.raises(ConfigError) as caught:
        TrainingConfig.from_hyperparameters({key: value})
    assert f"hyperparameter '{key}'" in str(caught.value)
    assert value in str(caught.value)


def test_cnn_needs_an_image_shape():
    with pytest.raises(ConfigError, match="'image_shape' is required with model=cnn"):
        TrainingConfig.from_hyperparameters({"model": "cnn"})


def test_a_single_class_is_refused():
    with pytest.raises(ConfigError, match="'num_classes' must be >= 2"):
        TrainingConfig.from_hyperparameters({"num_classes": "1"})


def test_resolved_config_round_trips_through_json_and_sagemaker_strings():
    config = TrainingConfig.from_hyperparameters({"model": "cnn", "image_shape": "8x8x3", "hidden_units": ""})
    saved = json.loads(json.dumps(config.to_dict()))
    as_sagemaker_strings = {
        k: "" if v is None else json.dumps(v) if isinstance(v, list) else str(v) for k, v in saved.items()
    }
    assert TrainingConfig.from_hyperparameters(as_sagemaker_strings) == config


def test_divergence_check_can_be_turned_off_or_relaxed():
    assert TrainingConfig.from_hyperparameters({"divergence_factor": "0"}).divergence_factor == 0.0
    relaxed = TrainingConfig.from_hyperparameters({"divergence_factor": "100", "on_divergence": "warn"})
    assert (relaxed.divergence_factor, relaxed.on_divergence) == (100.0, "warn")


def _accepted(key: str, value: str) -> bool:
    from trainer.contract import hyperparameters

    try:
        hyperparameters._PARSERS[key](hyperparameters._unquote(value))
    except ValueError:
        return False
    return True


def _candidates() -> list[str]:
    """Values every parser is tried on: the forms users write, edge forms Python's int() and float() take, noise."""
    import random

    from trainer.contract import hyperparameters

    words = [*hyperparameters.MODELS, *hyperparameters.DATA_FORMATS, *hyperparameters.MIXED_PRECISION_MODES,
             *hyperparameters.OPTIMIZERS, "fail", "warn", "true", "False", "YES", "no", "On", "off", "1", "0"]
    forms = ["3", " 3 ", "+3", "03", "1_000", "-3", "0", "0.0", "1e-3", "1E+2", ".5", "5.", "-0.5", "2.5", "inf", "nan",
             "", " ", "28x28x1", "28X28X3", "[1,2]", "128, 64", "1,,2", "a/b", "abc", "1e400", "3.5.1", "x", "1_"]
    rng = random.Random(41)
    alphabet = "0123456789.-+_eExX, []\"/aAbcfilmnoprstuvwy"
    noise = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6))) for _ in range(3000)]
    plain = [*words, *(w.upper() for w in words), *forms, *noise]
    return plain + [f'"{v}"' for v in plain[:200]]


def test_every_value_a_parser_accepts_matches_the_pattern_the_workflow_checks() -> None:
    """The launch workflow checks values with VALUE_PATTERNS: a pattern narrower than its parser would refuse
    a good job there, so each parser is held to its pattern over thousands of values."""
    import re

    from trainer.contract import hyperparameters

    assert set(hyperparameters.VALUE_PATTERNS) == set(known_hyperparameters())
    misses, refused = [], 0
    for key in known_hyperparameters():
        pattern = re.compile(hyperparameters.value_pattern(key).replace("$", r"\Z"))
        for value in _candidates():
            matched = pattern.search(value) is not None
            if _accepted(key, value) and not matched:
                misses.append((key, value))
            refused += not matched
    assert misses == []
    assert refused > 10_000  # and the patterns do refuse: they are not '.*'


def test_the_saved_config_maps_each_output_index_to_its_class():
    from pathlib import Path
    from types import SimpleNamespace

    from trainer.contract.environment import Cluster
    from trainer.datasets import images
    from trainer.datasets import tabular as data
    from trainer.train import runner

    strategy = SimpleNamespace(num_replicas_in_sync=1)
    cluster = Cluster(hosts=("algo-1",), current_host="algo-1", worker_port=2222, source="test")
    result = runner.TrainingResult(completed_epochs=2, resumed_from_epoch=0, last_metrics=None, weights_sha256="0")

    def saved(spec) -> dict:
        return json.loads(json.dumps(runner._resolved_config(TrainingConfig(), spec, strategy, cluster, "float32", {}, result)))

    # Class directories: label i is the i-th name in sorted order, whatever order the file system lists them in.
    pictures = images.ImageDataset("train", Path("/d"), "image-dir", ("/d/dog/1.jpg", "/d/cat/1.jpg"), (1, 0), (), 2, 2,
                                   class_names=("cat", "dog"))  # fmt: skip
    assert saved(pictures)["class_names"] == ["cat", "dog"]
    # Shards whose manifest names no classes: unknown, so absent rather than guessed.
    shards = images.ImageDataset("train", Path("/d"), "image-tfrecord", ("/d/a",), (), (4,), 4, 3)
    assert "class_names" not in saved(shards)
    # Feature rows: the label column holds the index itself.
    rows = data.DatasetSpec("train", Path("/d"), "csv", (), num_features=2, num_classes=3, scanned=True)
    assert saved(rows)["class_names"] == ["0", "1", "2"]
    assert saved(rows)["model"] == {"file": "model.keras", "selected_by": "last_epoch", "epoch": 2}
