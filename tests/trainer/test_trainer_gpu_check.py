"""GPU expectations, the shared instance table and the precision choice (no GPU needed)."""

from __future__ import annotations

import json

import pytest

from trainer import gpu_table
from trainer.contract.errors import ConfigError, GpuCheckError
from trainer.gpu_check import DeviceInventory, GpuExpectation, GpuInfo, choose_precision, resolve_expectation


def test_expected_count_prefers_the_variable_then_the_hyperparameter_then_the_table():
    assert resolve_expectation(2, 4, "g5.12xlarge") == GpuExpectation(2, "EXPECTED_GPU_COUNT")
    assert resolve_expectation(None, 4, "g5.xlarge") == GpuExpectation(4, "hyperparameter expected_gpu_count")
    assert resolve_expectation(None, None, "ml.g5.12xlarge").count == 4
    assert resolve_expectation(0, None, None) == GpuExpectation(0, "EXPECTED_GPU_COUNT")


def test_table_fallback_matches_the_shared_json_for_ec2_and_sagemaker_names():
    table = json.loads(gpu_table.TABLE_PATH.read_text())["instance_types"]
    assert set(gpu_table.known_instance_types()) == set(table)
    for name, row in table.items():
        for spelled in (name, f"ml.{name}"):
            expectation = resolve_expectation(None, None, spelled)
            assert expectation.count == row["gpu_count"]
            assert spelled in expectation.source


def test_unknown_instance_type_fails_naming_it():
    with pytest.raises(GpuCheckError, match="'ml.m5.xlarge' is not in gpu_instances.json"):
        resolve_expectation(None, None, "ml.m5.xlarge")


def test_no_source_for_the_expected_count_fails_saying_how_to_set_it():
    with pytest.raises(GpuCheckError, match="set EXPECTED_GPU_COUNT"):
        resolve_expectation(None, None, None)


def _inventory(count: int, *capabilities: str | None) -> DeviceInventory:
    gpus = tuple(GpuInfo(i, "NVIDIA X", c, 16384) for i, c in enumerate(capabilities))
    return DeviceInventory(expected=GpuExpectation(count, "test"), found=len(gpus), built_with_cuda=True, gpus=gpus)


@pytest.mark.parametrize(
    ("mode", "inventory", "policy"),
    [
        ("auto", _inventory(8, "9.0", "9.0"), "mixed_bfloat16"),  # H100
        ("auto", _inventory(4, "8.6", "8.6"), "mixed_bfloat16"),  # A10G
        ("auto", _inventory(1, "7.5"), "mixed_float16"),  # T4
        ("auto", _inventory(2, "8.0", "7.0"), "mixed_float16"),  # the weakest GPU decides
        ("auto", _inventory(1, "6.1"), "float32"),
        ("auto", _inventory(1, None), "float32"),  # unknown capability: no gamble
        ("off", _inventory(1, "9.0"), "float32"),
        ("on", _inventory(1, "7.0"), "mixed_float16"),
        ("auto", _inventory(0), "float32"),  # CPU
        ("on", _inventory(0), "mixed_bfloat16"),
        # The explicit modes.
        ("bf16", _inventory(1, "9.0"), "mixed_bfloat16"),
        ("fp16", _inventory(1, "9.0"), "mixed_float16"),
        ("fp16", _inventory(1, "6.1"), "mixed_float16"),
        ("fp32", _inventory(1, "9.0"), "float32"),
        ("bf16", _inventory(0), "mixed_bfloat16"),  # each usable on CPU, for tests
        ("fp16", _inventory(0), "mixed_float16"),
        ("fp32", _inventory(0), "float32"),
    ],
)
def test_precision_follows_the_gpus(mode, inventory, policy):
    assert choose_precision(mode, inventory) == policy


def test_unknown_capability_falls_back_to_the_gpu_table_of_the_instance_type():
    assert choose_precision("auto", _inventory(1, None), "ml.p5.48xlarge") == "mixed_bfloat16"
    assert choose_precision("auto", _inventory(1, None), "ml.g4dn.xlarge") == "mixed_float16"
    with pytest.raises(ConfigError, match="'mixed_precision' is bf16.*7.5"):
        choose_precision("bf16", _inventory(1, None), "g4dn.xlarge")


@pytest.mark.parametrize(
    ("mode", "capability", "needed"), [("on", "6.1", "needs 7.0 or later"), ("bf16", "7.5", "needs 8.0 or later")]
)
def test_a_mode_the_gpus_cannot_run_fails_naming_the_hyperparameter(mode, capability, needed):
    with pytest.raises(ConfigError, match=f"hyperparameter 'mixed_precision' is {mode}.*{capability}.*{needed}"):
        choose_precision(mode, _inventory(1, capability))


def test_report_names_expected_count_and_its_source():
    report = _inventory(2, "8.0", "8.0").report()
    assert report["expected"] == 2 and report["expected_source"] == "test"
    assert [g["compute_capability"] for g in report["gpus"]] == ["8.0", "8.0"]
    json.dumps(report)  # one JSON log line


def test_gpus_promised_to_this_machine_fail_naming_both_counts():
    import tensorflow as tf

    if tf.config.list_physical_devices("GPU"):
        pytest.skip("this machine has GPUs; the GPU-marked tests cover it")
    from trainer.gpu_check import inspect_devices

    with pytest.raises(GpuCheckError) as caught:
        inspect_devices(GpuExpectation(2, "EXPECTED_GPU_COUNT"))
    message = str(caught.value)
    assert "expected 2 GPU(s) (EXPECTED_GPU_COUNT) but TensorFlow sees 0" in message
    if not tf.test.is_built_with_cuda():
        assert "no CUDA support" in message
