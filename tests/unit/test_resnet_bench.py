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



def test_the_torchvision_half_skips_with_one_line_where_torch_is_absent(monkeypatch, tmp_path):
    from benchmarks import torch_resnet

    monkeypatch.setattr(torch_resnet.importlib.util, "find_spec", lambda name: None)
    reason = resnet_bench._torch_child(resnet_bench.Setup(), True, tmp_path / "out.json")
    assert reason == "torch and torchvision not installed here: torchvision ResNet-50 not measured"
    assert torch_resnet.main([str(tmp_path / "out.json")]) == 3 and not (tmp_path / "out.json").exists()
    assert run.BENCHMARKS["resnet_torch"] is run._resnet_torch


def test_torchvision_flops_are_resnet50_v1_5s():
    from benchmarks import torch_resnet

    # 4.09 GMAC forward at 224 (torchvision's published figure), x2 FLOP/MAC, x3 for training.
    assert torch_resnet.training_flops_per_image(224) == pytest.approx(24.5e9, rel=0.01)
    assert torch_resnet.training_flops_per_image(112) == pytest.approx(24.5e9 / 4, rel=0.01)


def test_the_comparison_without_a_gpu_is_one_skipped_row():
    import tensorflow as tf

    if tf.config.list_physical_devices("GPU"):
        pytest.skip("this machine has a GPU: the benchmark would measure")
    (row,) = resnet_bench.run_torch()
    assert row["value"] == "skipped" and ">= 1.0x torchvision on H100: not measured" in row["target"]


@pytest.mark.slow
def test_the_comparison_runs_end_to_end_on_cpu_at_tiny_shapes():
    rows = resnet_bench.compare_with_torch(
        resnet_bench.Setup(image_size=32, batch=4, steps=2, warmup=1, classes=10), None, allow_cpu=True
    )
    synthetic, records = rows[0], rows[1]
    assert "synthetic" in synthetic["metric"] and "images/s" in synthetic["value"]
    assert "no XLA" in synthetic["metric"]  # XLA only where a GPU is: on a CPU it would only add its compile
    assert "raw-pixel records" in records["metric"] and records["ratio"].endswith("x synthetic")
    assert len(rows) >= 3  # torchvision: measured rows, or one skipped row naming why


def test_an_earlier_steps_figures_count_for_the_ratios_and_unknown_halves_are_refused(tmp_path, capsys):
    import json

    known = tmp_path / "resnet.jsonl"
    known.write_text(json.dumps({"figure": "tf-memory", "device": "GPU X", "images_per_sec": 1000.0}) + "\n"
                     + json.dumps({"ratios": {"tf-memory/torch-best": 1.1}, "device": "GPU X"}) + "\n")  # fmt: skip
    assert resnet_bench._known_figures(known, "GPU X") == {"tf-memory": 1000.0}
    assert resnet_bench._known_figures(known, "GPU Y") == {} == resnet_bench._known_figures(tmp_path / "none", "GPU X")
    with pytest.raises(SystemExit) as refused:
        resnet_bench.main(["--vs-torch", "--inputs", "memory,disk"])
    assert refused.value.code == 2 and "disk: not one of memory, records" in capsys.readouterr().err
