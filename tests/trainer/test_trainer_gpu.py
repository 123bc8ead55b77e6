"""On a GPU machine: the real verification path. Skipped where TensorFlow sees no GPU."""

from __future__ import annotations

import json

import pytest

from tests.trainer.helpers import run_trainer, write_job
from trainer.datasets.synthetic import SyntheticSpec

pytestmark = pytest.mark.gpu

DATA = SyntheticSpec("csv", examples=4096, features=16, classes=4, shards=2, seed=1)
HP = {"epochs": 3, "batch_size": 256, "learning_rate": 0.005}


@pytest.fixture(scope="module")
def gpu_count() -> int:
    import tensorflow as tf

    count = len(tf.config.list_physical_devices("GPU"))
    if count == 0:
        pytest.skip("TensorFlow sees no GPU")
    return count


def test_gpu_job_verifies_reports_and_trains_on_every_gpu(tmp_path, gpu_count):
    run = run_trainer(write_job(tmp_path, HP, DATA), "train", EXPECTED_GPU_COUNT=gpu_count)
    assert run.returncode == 0, run.explain()
    (report,) = run.report("gpu-check")
    assert (report["expected"], report["found"], report["ok"]) == (gpu_count, gpu_count, True)
    assert report["built_with_cuda"] and report["cuda_build_version"] and report["cudnn_build_version"]
    assert report["driver_version"] and report["cuda_driver_api"]
    assert len(report["gpus"]) == gpu_count
    assert all(g["name"] and g["compute_capability"] and g["memory_total_mib"] for g in report["gpus"])
    assert len(report["matmul_devices"]) == gpu_count and all("GPU" in d for d in report["matmul_devices"])
    assert report["all_reduce_replicas"] == gpu_count
    (strategy,) = run.events("strategy")
    assert strategy["name"] == ("MirroredStrategy" if gpu_count > 1 else "OneDeviceStrategy")
    capability = min(tuple(map(int, g["compute_capability"].split("."))) for g in report["gpus"])
    expected_policy = (
        "mixed_bfloat16" if capability >= (8, 0) else "mixed_float16" if capability >= (7, 0) else "float32"
    )
    resolved = json.loads((tmp_path / "model" / "trainer_config.json").read_text())
    assert resolved["precision_policy"] == expected_policy
    assert run.metrics()[-1]["accuracy"] > 0.8


def test_more_gpus_promised_than_present_fails_naming_both_counts(tmp_path, gpu_count):
    run = run_trainer(write_job(tmp_path, HP, DATA), "train", EXPECTED_GPU_COUNT=gpu_count + 1)
    assert run.returncode != 0
    assert f"expected {gpu_count + 1} GPU(s) (EXPECTED_GPU_COUNT) but TensorFlow sees {gpu_count}" in run.failure
    assert not run.model_path.exists()


def test_mixed_precision_with_xla_learns_on_gpu(tmp_path, gpu_count):
    hp = {**HP, "mixed_precision": "on", "xla": "true"}
    run = run_trainer(write_job(tmp_path, hp, DATA), "train", EXPECTED_GPU_COUNT=gpu_count)
    assert run.returncode == 0, run.explain()
    assert run.metrics()[-1]["accuracy"] > 0.8
