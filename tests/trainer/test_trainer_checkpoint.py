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


def _three_checkpoints(tmp_path):
    """ckpt-1..3 of one small model in the job's checkpoint directory; returns the paths and config."""
    import tensorflow as tf

    config = TrainingConfig.from_hyperparameters({"hidden_units": "8"})
    paths = resolve_paths({"SAGEMAKER_BASE_DIR": str(tmp_path)})
    _, completed, checkpoint = _checkpoint(config, _spec(5, 3))
    manager = tf.train.CheckpointManager(checkpoint, str(paths.checkpoint_dir), max_to_keep=3)
    for epoch in (1, 2, 3):
        completed.assign(epoch)
        manager.save(checkpoint_number=epoch)
    return paths, config


@pytest.mark.parametrize("damage", ["data removed", "data cut short", "index removed"])
def test_a_checkpoint_whose_upload_was_cut_short_is_skipped_for_the_one_before(tmp_path, capsys, damage):
    """Spot interruption mid-upload: the ``checkpoint`` file names ckpt-3, whose files are not whole."""
    import os

    paths, config = _three_checkpoints(tmp_path)
    (data_file,) = paths.checkpoint_dir.glob("ckpt-3.data-*")
    if damage == "data removed":
        data_file.unlink()
    elif damage == "data cut short":
        os.truncate(data_file, data_file.stat().st_size // 2)
    else:
        (paths.checkpoint_dir / "ckpt-3.index").unlink()

    _, completed, checkpoint = _checkpoint(config, _spec(5, 3))
    assert train._restore(checkpoint, completed, paths, config, _spec(5, 3)) == 2
    printed = capsys.readouterr().out
    (skipped,) = [line for line in printed.splitlines() if "checkpoint-skipped" in line]
    assert f"checkpoint={paths.checkpoint_dir / 'ckpt-3'} " in skipped
    assert f"resume checkpoint={paths.checkpoint_dir / 'ckpt-2'} completed_epochs=2" in printed


def test_no_intact_checkpoint_starts_from_the_first_epoch(tmp_path, capsys):
    paths, config = _three_checkpoints(tmp_path)
    for data_file in paths.checkpoint_dir.glob("ckpt-*.data-*"):
        data_file.unlink()
    _, completed, checkpoint = _checkpoint(config, _spec(5, 3))
    assert train._restore(checkpoint, completed, paths, config, _spec(5, 3)) == 0
    printed = capsys.readouterr().out
    assert printed.count("checkpoint-skipped") == 3 and "checkpoint-none-intact" in printed


def test_a_whole_checkpoint_of_another_model_still_fails_after_a_skipped_one(tmp_path):
    paths, _ = _three_checkpoints(tmp_path)
    for data_file in paths.checkpoint_dir.glob("ckpt-3.data-*"):
        data_file.unlink()
    wide = TrainingConfig.from_hyperparameters({"hidden_units": "16"})
    _, completed, checkpoint = _checkpoint(wide, _spec(5, 3))
    with pytest.raises(CheckpointError, match=r"The checkpoint .*ckpt-2 does not fit this model"):
        train._restore(checkpoint, completed, paths, wide, _spec(5, 3))


# --- a stop (SIGTERM) vote and the epoch's checkpoint ------------------------------------------


class _StopFromTheStart(train.StopRequest):
    """A SIGTERM that arrived before the first step: every call carries the stop vote."""

    def __init__(self) -> None:
        self.requested = True


def _train(tmp_path, steps_per_execution: int, stop: train.StopRequest, **hyperparameters: str):
    """Trains a small MLP in-process (8 steps an epoch, seeded as ``run`` seeds it) in ``tmp_path``; returns the
    loop's result and paths."""
    import keras
    import tensorflow as tf

    from trainer.contract.environment import Cluster
    from trainer.datasets.synthetic import SyntheticSpec, write_dataset

    paths = resolve_paths({"SAGEMAKER_BASE_DIR": str(tmp_path)})
    if not paths.channel_dir("train").is_dir():
        write_dataset(paths.channel_dir("train"), SyntheticSpec("csv", examples=64, features=4, classes=3, seed=1))
    config = TrainingConfig.from_hyperparameters(
        {"hidden_units": "8", "batch_size": "8", "epochs": "3", "checkpoint_every_epochs": "2",
         "steps_per_execution": str(steps_per_execution), **hyperparameters}
    )  # fmt: skip
    keras.utils.set_random_seed(config.seed)
    spec = data.count_channel(data.discover_channel(paths, config, {}), config.num_classes)
    cluster = Cluster(hosts=("algo-1",), current_host="algo-1", worker_port=2222, source="test")
    result, _ = train._train_loop(
        config=config, spec=spec, val_spec=None, strategy=tf.distribute.get_strategy(), cluster=cluster,
        paths=paths, stop=stop, precision="float32",
    )  # fmt: skip
    return result, paths


def _train_until_stopped(tmp_path, steps_per_execution: int, **hyperparameters: str):
    """Trains with a stop requested from the start; returns the error and paths."""
    from trainer.contract.errors import TrainingInterrupted

    with pytest.raises(TrainingInterrupted) as caught:
        _train(tmp_path, steps_per_execution, _StopFromTheStart(), **hyperparameters)
    return caught.value, resolve_paths({"SAGEMAKER_BASE_DIR": str(tmp_path)})


def test_a_stop_with_the_epochs_last_call_checkpoints_that_epoch(tmp_path, capsys):
    """steps_per_execution covers the whole epoch: its steps are all applied, so it is saved before stopping."""
    error, paths = _train_until_stopped(tmp_path, steps_per_execution=8)
    printed = capsys.readouterr().out
    assert "Training stopped by SIGTERM at the end of epoch 1 (step 8 of 8). Completed epochs: 1" in str(error)
    # checkpoint_every_epochs=2 would skip epoch 1; the stop saves it, and its metric line has no validation.
    assert "sigterm-epoch-end epoch=1" in printed
    assert f"checkpoint path={paths.checkpoint_dir / 'ckpt-1'} epoch=1" in printed
    (metric_line,) = [line for line in printed.splitlines() if line.startswith("[metrics] epoch=1 ")]
    assert "val_loss" not in metric_line

    config = TrainingConfig.from_hyperparameters({"hidden_units": "8", "epochs": "3"})
    spec = data.DatasetSpec("train", Path("/d"), "csv", (), num_features=4, num_classes=3, scanned=True)
    _, completed, checkpoint = _checkpoint(config, spec)
    assert train._restore(checkpoint, completed, paths, config, spec) == 1


@pytest.mark.parametrize("cache", ["cached", "streamed"])
def test_a_stop_in_the_middle_of_an_epoch_keeps_its_steps_and_the_restart_goes_on_from_the_next(tmp_path, capsys, cache):
    """A spot interruption mid-epoch: the steps applied are checkpointed (an epoch of a large dataset can take
    an hour); the restart trains the rest of that epoch on the batches it would have had, to the weights of
    an uninterrupted run. Before: the stop saved nothing, and the restart redid the epoch from its start."""
    hyperparameters = {"cache_max_mb": "0"} if cache == "streamed" else {}
    error, paths = _train_until_stopped(tmp_path / "job", steps_per_execution=4, **hyperparameters)
    first = paths.checkpoint_dir / "ckpt-1"
    assert str(error) == (
        f"Training stopped by SIGTERM in epoch 1 at step 4 of 8, checkpointed ({first}): a restart with the "
        f"checkpoint directory {paths.checkpoint_dir} resumes at step 5. Completed epochs: 0."
    )
    printed = capsys.readouterr().out
    assert f"input cache={cache == 'cached'} " in printed
    assert "[metrics] epoch=1 " not in printed  # the epoch is not done
    assert f"checkpoint path={first} epoch=0 epoch_steps=4" in printed

    resumed, _ = _train(tmp_path / "job", 4, train.StopRequest(), **hyperparameters)
    printed = capsys.readouterr().out
    assert f"resume checkpoint={first} completed_epochs=0 epochs=3 epoch_steps=4" in printed
    assert "first-step epoch=1 steps=4 " in printed and [line.split()[1] for line in printed.splitlines() if
                                                          line.startswith("[metrics] ")] == ["epoch=1", "epoch=2", "epoch=3"]
    # Numbered after the stop's: the end of epoch 2 (checkpoint_every_epochs) and the last.
    assert f"checkpoint path={paths.checkpoint_dir / 'ckpt-2'} epoch=2" in printed
    assert f"checkpoint path={paths.checkpoint_dir / 'ckpt-3'} epoch=3" in printed
    uninterrupted, _ = _train(tmp_path / "uninterrupted", 4, train.StopRequest(), **hyperparameters)
    assert resumed.weights_sha256 == uninterrupted.weights_sha256
    assert resumed.completed_epochs == 3 and resumed.resumed_from_epoch == 0


def test_checkpoint_every_minutes_keeps_steps_of_a_long_epoch_for_a_failure_that_gives_no_sigterm(tmp_path, capsys):
    """A lost host or a kill gives no SIGTERM: with the minutes passed, the steps applied are checkpointed at a
    call's end, and a restart after a crash goes on from there to the weights of an uninterrupted run."""
    finished, paths = _train(tmp_path / "job", 4, train.StopRequest(), epochs="1", checkpoint_every_minutes="1e-9")
    printed = capsys.readouterr().out
    # 8 steps in 2 calls: after the first, the minutes have passed; the epoch's end has its own checkpoint.
    assert f"checkpoint path={paths.checkpoint_dir / 'ckpt-1'} epoch=0 epoch_steps=4" in printed
    assert f"checkpoint path={paths.checkpoint_dir / 'ckpt-2'} epoch=1" in printed and "ckpt-3" not in printed
    # The host is lost before the epoch's end was saved: only the first checkpoint reached S3.
    for path in paths.checkpoint_dir.glob("ckpt-2.*"):
        path.unlink()
    (paths.checkpoint_dir / "checkpoint").unlink()
    resumed, _ = _train(tmp_path / "job", 4, train.StopRequest(), epochs="1", checkpoint_every_minutes="0")
    printed = capsys.readouterr().out
    assert f"resume checkpoint={paths.checkpoint_dir / 'ckpt-1'} completed_epochs=0 epochs=1 epoch_steps=4" in printed
    assert resumed.weights_sha256 == finished.weights_sha256
    # Off (0), and by default (30 minutes) in a run this short: epochs only.
    _train(tmp_path / "default", 4, train.StopRequest(), epochs="1")
    assert "epoch_steps=" not in capsys.readouterr().out


class _StopAfterCalls(train.StopRequest):
    """A SIGTERM that arrives after ``calls`` calls into TensorFlow: the next call carries the stop vote."""

    def __init__(self, calls: int) -> None:
        self.calls = calls

    @property
    def requested(self) -> bool:  # read once per call
        self.calls -= 1
        return self.calls < 0


def test_a_resume_with_another_batch_size_trains_the_stopped_epoch_from_its_start(tmp_path, capsys):
    """The steps a stop applied are counted in its batches: with another batch size the same count would leave
    out other examples, so the epoch starts over, saying why."""
    _train_until_stopped(tmp_path, steps_per_execution=4)
    capsys.readouterr()
    resumed, _ = _train(tmp_path, 4, train.StopRequest(), batch_size="4")
    printed = capsys.readouterr().out
    assert ("resume-epoch-restarted epoch=1 epoch_steps=4 counted_in=8-steps-of-8-on-1-workers-over-64-examples "
            "now=16-steps-of-4-on-1-workers-over-64-examples ") in printed
    assert "first-step epoch=1 steps=4 " in printed and resumed.completed_epochs == 3


def test_a_resume_with_fewer_epochs_than_the_stopped_one_says_its_steps_stay_in_the_model(tmp_path, capsys):
    from trainer.contract.errors import TrainingInterrupted

    with pytest.raises(TrainingInterrupted, match="in epoch 2 at step 4 of 8"):
        _train(tmp_path, 4, _StopAfterCalls(2))
    capsys.readouterr()
    resumed, _ = _train(tmp_path, 4, train.StopRequest(), epochs="1")
    captured = capsys.readouterr()
    warning = ("the checkpoint holds 4 steps of epoch 2, beyond epochs=1: the model written has them (set epochs=2 or more "
               "to finish that epoch)")
    assert f"WARNING: {warning}" in captured.err and "[metrics]" not in captured.out
    assert resumed.completed_epochs == 1


def test_without_the_checkpoint_file_the_newest_whole_checkpoint_is_found_by_number(tmp_path):
    paths, config = _three_checkpoints(tmp_path)
    (paths.checkpoint_dir / "checkpoint").unlink()
    for data_file in paths.checkpoint_dir.glob("ckpt-3.data-*"):
        data_file.unlink()
    _, completed, checkpoint = _checkpoint(config, _spec(5, 3))
    assert train._restore(checkpoint, completed, paths, config, _spec(5, 3)) == 2


def test_a_checkpoint_written_before_best_epoch_was_kept_still_resumes(tmp_path):
    """A rerun after an image update resumes an older trainer's checkpoint (no ``best_epoch``): the
    later variable stays 0 (unknown) rather than the checkpoint being refused as another model's."""
    import tensorflow as tf

    config = TrainingConfig.from_hyperparameters({"hidden_units": "8"})
    paths = resolve_paths({"SAGEMAKER_BASE_DIR": str(tmp_path)})
    spec = _spec(5, 3)
    _, completed, old = _checkpoint(config, spec)
    completed.assign(2)
    tf.train.CheckpointManager(old, str(paths.checkpoint_dir), max_to_keep=3).save(checkpoint_number=2)

    model, completed, fresh = _checkpoint(config, spec)
    best_epoch = tf.Variable(7, dtype=tf.int64)
    required = tf.train.Checkpoint(model=model, optimizer=fresh.optimizer, completed_epochs=completed)
    assert train._restore(required, completed, paths, config, spec, tf.train.Checkpoint(best_epoch=best_epoch)) == 2
    assert int(best_epoch.numpy()) == 7  # not in the checkpoint: left as it was

    # Written with it, it comes back.
    best_epoch.assign(1)
    tf.train.Checkpoint(model=model, optimizer=required.optimizer, completed_epochs=completed, best_epoch=best_epoch).write(
        str(tmp_path / "with-best" / "ckpt"))  # fmt: skip
    best_epoch.assign(0)
    tf.train.Checkpoint(best_epoch=best_epoch).restore(str(tmp_path / "with-best" / "ckpt")).expect_partial()
    assert int(best_epoch.numpy()) == 1
