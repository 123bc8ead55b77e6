"""On a GPU machine: the TF-free check and each precision on the real device. Skipped without a GPU.

benchmarks/gpu_run.sh runs these (``pytest -m gpu``) on the lent GPU machine.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from tests.trainer.helpers import TRAINING_IMAGE, run_trainer, trainer_env, write_job
from trainer.datasets.synthetic import SyntheticSpec

pytestmark = pytest.mark.gpu

DATA = SyntheticSpec("csv", examples=4096, features=16, classes=4, shards=2, seed=1)
HP = {"epochs": 3, "batch_size": 256, "learning_rate": 0.005}


@pytest.fixture(scope="module")
def gpus() -> list[dict]:
    """nvidia-smi's view of the GPUs (index, uuid, memory), or a skip."""
    import shutil

    if shutil.which("nvidia-smi") is None:
        pytest.skip("no NVIDIA driver here")
    out = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid,memory.total,compute_cap", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=60, check=True).stdout  # fmt: skip
    rows = [dict(zip(("index", "uuid", "memory", "cc"), (p.strip() for p in line.split(",")))) for line in out.splitlines()]
    if not rows:
        pytest.skip("nvidia-smi lists no GPU")
    return rows


def test_the_tf_free_check_proves_every_gpu_by_uuid_without_tensorflow(tmp_path, gpus):
    probe = ("import sys; from trainer import gpu_check; code = gpu_check.main([sys.argv[1]]); "
             "assert 'tensorflow' not in sys.modules; raise SystemExit(code)")  # fmt: skip
    result_file = tmp_path / "check.json"
    env = {**trainer_env(tmp_path, EXPECTED_GPU_COUNT=len(gpus)), "GPU_CHECK_TIMEOUT_SECONDS": "120"}
    completed = subprocess.run([sys.executable, "-c", probe, str(result_file)], cwd=TRAINING_IMAGE, env=env,
                               capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert completed.returncode == 0, completed.stdout + completed.stderr
    report = json.loads(result_file.read_text())["report"]
    assert report["found"] == len(gpus) and report["cuda_driver_api"]
    assert [g["uuid"] for g in report["gpus"]] == [g["uuid"] for g in gpus]
    # NVML by UUID and nvidia-smi agree on each device's memory (MiB).
    assert [g["memory_total_mib"] for g in report["gpus"]] == [int(g["memory"]) for g in gpus]


def test_one_visible_gpu_is_what_is_expected_under_cuda_visible_devices(tmp_path, gpus):
    last = gpus[-1]
    env = {**trainer_env(tmp_path, EXPECTED_GPU_COUNT=1), "CUDA_VISIBLE_DEVICES": last["uuid"]}
    completed = subprocess.run([sys.executable, "-m", "trainer.gpu_check", str(tmp_path / "c.json")], cwd=TRAINING_IMAGE,
                               env=env, capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert completed.returncode == 0, completed.stdout + completed.stderr
    (only,) = json.loads((tmp_path / "c.json").read_text())["report"]["gpus"]
    assert only["uuid"] == last["uuid"] and only["ordinal"] == 0


@pytest.mark.parametrize("mode", ["fp32", "bf16", "fp16"])
def test_each_precision_trains_on_the_gpu_with_a_finite_loss(tmp_path, gpus, mode):
    if mode == "bf16" and min(tuple(map(int, g["cc"].split("."))) for g in gpus) < (8, 0):
        pytest.skip("bf16 needs compute capability 8.0")
    run = run_trainer(write_job(tmp_path, {**HP, "mixed_precision": mode}, DATA), "train", EXPECTED_GPU_COUNT=len(gpus))
    assert run.returncode == 0, run.explain()
    (model,) = run.events("model")
    assert model["precision"] == {"fp32": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}[mode]
    assert all(math.isfinite(m["loss"]) for m in run.metrics()) and run.metrics()[-1]["accuracy"] > 0.8
    (report,) = run.report("gpu-check")
    assert all(g["uuid"] for g in report["gpus"])
