"""Restoring checkpoints in-process: the right epoch comes back, a mismatched model is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.contract.environment import resolve_paths
from trainer.contract.errors import CheckpointError
from trainer.contract.hyperparameters import TrainingConfig
from trainer.datasets import tabular as data
from trainer.train import models
from trainer.train import runner as train


def _spec(features: int, classes: int) -> data.DatasetSpec:
    return data.DatasetSpec("train", Path("/d"), "csv", (), num_features=features, num_classes=classes, scanned=True)


def _checkpoint(config: TrainingConfig, spec: data.DatasetSpec):
    import keras
    import tensorflow as tf

    model = models.build_model(config, spec.num_features, spec.num_classes)
    optimizer = keras.optimizers.Adam(config.learning_rate)
    optimizer.build(model.trainable_variables)
    completed = tf.Variable(0, dtype=tf.int64)
    return model, completed, tf.train.Checkpoint(model=model, optimizer=optimizer, completed_epochs=completed)


def test_restore_brings_back_weights_and_completed_epochs(tmp_path):
    import numpy as np
    import tensorflow as tf

    config = TrainingConfig.from_hyperparameters({"hidden_units": "8"})
    paths = resolve_paths({"SAGEMAKER_BASE_DIR": str(tmp_path)})
    spec = _spec(5, 3)
    model, completed, checkpoint = _checkpoint(config, spec)
    assert train._restore(checkpoint, completed, paths, config, spec) == 0  # nothing to restore yet
    completed.assign(2)
    tf.train.CheckpointManager(checkpoint, str(paths.checkpoint_dir), max_to_keep=3).save(checkpoint_number=2)

    fresh_model, fresh_completed, fresh_checkpoint = _checkpoint(config, spec)
    assert train._restore(fresh_checkpoint, fresh_completed, paths, config, spec) == 2
    for saved, restored in zip(model.get_weights(), fresh_model.get_weights(), strict=True):
        np.testing.assert_array_equal(saved, restored)


def test_a_checkpoint_of_another_architecture_is_refused_by_path(tmp_path):
    import tensorflow as tf

    paths = resolve_paths({"SAGEMAKER_BASE_DIR": str(tmp_path)})
    small = TrainingConfig.from_hyperparameters({"hidden_units": "8"})
    _, completed, checkpoint = _checkpoint(small, _spec(5, 3))
    tf.train.CheckpointManager(checkpoint, str(paths.checkpoint_dir), max_to_keep=3).save(checkpoint_number=1)

    wide = TrainingConfig.from_hyperparameters({"hidden_units": "16"})
    _, completed, checkpoint = _checkpoint(wide, _spec(5, 3))
    with pytest.raises(CheckpointError) as caught:
        train._restore(checkpoint, completed, paths, wide, _spec(5, 3))
    message = str(caught.value)
    assert f"The checkpoint {paths.checkpoint_dir / 'ckpt-1'} does not fit this model" in message
    assert "point CHECKPOINT_DIR at an empty directory" in message
