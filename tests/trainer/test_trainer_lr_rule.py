"""The per-GPU batch, the linear learning-rate rule and the warm-up (issue #21)."""

from __future__ import annotations

import pytest

from trainer.contract.errors import ConfigError
from trainer.contract.hyperparameters import TrainingConfig
from trainer.train import lr_schedule


def test_the_global_batch_grows_with_replicas_and_the_rate_scales_linearly():
    config = TrainingConfig.from_hyperparameters(
        {"model": "resnet50", "batch_size_per_gpu": "256", "learning_rate": "0.1", "learning_rate_base_batch": "256"}
    )
    one = config.resolved_for(replicas=1, uses_gpus=True)
    eight = config.resolved_for(replicas=8, uses_gpus=True)
    sixteen = config.resolved_for(replicas=16, uses_gpus=True)
    assert (one.batch_size, one.learning_rate) == (256, pytest.approx(0.1))
    assert (eight.batch_size, eight.learning_rate) == (2048, pytest.approx(0.8))
    assert (sixteen.batch_size, sixteen.learning_rate) == (4096, pytest.approx(1.6))
    assert eight.resolved_for(replicas=8, uses_gpus=True) == eight, "resolving twice must not scale twice"


def test_without_the_new_settings_the_batch_and_rate_are_as_given():
    config = TrainingConfig.from_hyperparameters({"batch_size": "512", "learning_rate": "0.01"})
    resolved = config.resolved_for(replicas=8, uses_gpus=True)
    assert (resolved.batch_size, resolved.learning_rate) == (512, 0.01)
    # A global batch and a base batch: the rate follows the global batch, whatever the replicas.
    scaled = TrainingConfig.from_hyperparameters({"batch_size": "1024", "learning_rate": "0.1", "learning_rate_base_batch": "256"})
    assert scaled.resolved_for(replicas=3, uses_gpus=False).learning_rate == pytest.approx(0.4)


def test_xla_is_on_by_default_for_resnet50_on_gpus_only_and_can_be_turned_off():
    resnet = TrainingConfig.from_hyperparameters({"model": "resnet50"})
    assert resnet.xla is None
    assert resnet.resolved_for(replicas=1, uses_gpus=True).xla is True
    assert resnet.resolved_for(replicas=1, uses_gpus=False).xla is False
    assert TrainingConfig.from_hyperparameters({"model": "mlp"}).resolved_for(replicas=1, uses_gpus=True).xla is False
    off = TrainingConfig.from_hyperparameters({"model": "resnet50", "xla": "false"})
    assert off.resolved_for(replicas=1, uses_gpus=True).xla is False


def test_a_global_and_a_per_gpu_batch_together_are_refused_by_name():
    with pytest.raises(ConfigError, match="'batch_size' .* and 'batch_size_per_gpu' both set"):
        TrainingConfig.from_hyperparameters({"batch_size": "256", "batch_size_per_gpu": "32"})
    with pytest.raises(ConfigError, match="'warmup_epochs' must be in"):
        TrainingConfig.from_hyperparameters({"warmup_epochs": "-1"})


def test_the_warm_up_rises_linearly_to_the_peak_and_stays_there():
    schedule = lr_schedule.learning_rate(0.8, warmup_steps=4)
    rates = [float(schedule(step)) for step in range(7)]
    assert rates == pytest.approx([0.2, 0.4, 0.6, 0.8, 0.8, 0.8, 0.8])
    assert lr_schedule.learning_rate(0.8, warmup_steps=0) == 0.8


@pytest.mark.slow
def test_the_trainer_trains_with_a_per_gpu_batch_and_warm_up(tmp_path):
    from tests.trainer.helpers import run_trainer, write_job
    from trainer.datasets.synthetic import SyntheticSpec

    data = SyntheticSpec("tfrecord", examples=512, features=8, classes=3, shards=2, seed=1)
    hp = {"epochs": 2, "batch_size_per_gpu": 64, "learning_rate": 0.01, "learning_rate_base_batch": 32,
          "warmup_epochs": 1, "optimizer": "sgd"}  # fmt: skip
    run = run_trainer(write_job(tmp_path, hp, data))
    assert run.returncode == 0, run.explain()
    (event,) = run.events("config-resolved")
    assert (event["batch_size"], float(event["learning_rate"])) == ("64", pytest.approx(0.02))
    assert len(run.metrics()) == 2
