"""The ResNet-50 GPU benchmark: ready for a GPU, a skipped row without one."""

from __future__ import annotations

import pytest

from benchmarks import resnet_bench, run


def test_without_a_gpu_the_benchmark_says_skipped_and_why():
    import tensorflow as tf

    if tf.config.list_physical_devices("GPU"):
        pytest.skip("this machine has a GPU: the benchmark would measure")
    (row,) = resnet_bench.run()
    assert row["benchmark"] == "resnet50" and row["value"] == "skipped"
    assert "MFU >= 40% on H100: not measured" in row["target"] and "no GPU" in row["target"]
    assert run.BENCHMARKS["resnet50"] is run._resnet50

