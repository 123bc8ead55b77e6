"""Script mode's start-up cost: job start to the user script's first training step, on CPU.

Baseline: the same script started the way a user runs it by hand (``python train.py``, the
``SM_*`` variables set), measured in the same run. Script mode adds the GPU check (a process of
its own, TensorFlow imported twice), unpacking ``sourcedir.tar.gz``, and, with a
``requirements.txt``, pip resolving against the image and installing a shipped wheel. Both runs
print the toolkit's ``first-step seconds_since_job_start=`` line, timed from the process start.

A third variant is the path of jobs that replace the image's entrypoint (ScriptProcessor, SDK v3
ModelTrainer's ``sm_train.sh``): ``python train.py`` through the image's ``python`` wrapper
(``training_image/bin/python``), which runs the script under ``trainer.user_code.guard`` (GPU
check, failure file) because a job tree is present.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRAINING_IMAGE = ROOT / "training_image"
EXAMPLE = TRAINING_IMAGE / "examples" / "keras_image_classifier"
FIRST_STEP = re.compile(r"first-step seconds_since_job_start=([0-9.]+)")
TIMEOUT = 300


def _env(base: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SM_", "SAGEMAKER_", "TRAINING_", "TF_CONFIG"))}
    env.update(
        SAGEMAKER_BASE_DIR=str(base),
        EXPECTED_GPU_COUNT="0",
        CUDA_VISIBLE_DEVICES="",
        PYTHONPATH=str(TRAINING_IMAGE),
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONUNBUFFERED="1",
        **extra,
    )
    return env


def _first_step(command: list[str], env: dict[str, str], cwd: Path) -> float:
    env = {**env, "TRAINER_JOB_START_TIME": f"{time.time():.3f}"}
    result = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    match = FIRST_STEP.search(result.stdout)
    if result.returncode != 0 or not match:
        raise RuntimeError(f"{' '.join(command)} exited {result.returncode}: {(result.stdout + result.stderr)[-1500:]}")
    return float(match.group(1))


def _job(root: Path, name: str, requirements: bool) -> Path:
    from tests.trainer.script_helpers import build_wheel, pack, script_job, write_source
    from trainer.datasets.synthetic import SyntheticSpec, write_dataset

    base = root / name
    source = root / f"{name}-src"
    write_source(source, {"train.py": (EXAMPLE / "train.py").read_text()})
    if requirements:
        build_wheel(source / "wheels", "platformdemo", "1.0", "VALUE = 42\n")
        (source / "requirements.txt").write_text("numpy\nplatformdemo==1.0\n")
    pack(source, base / "input" / "data" / "code" / "sourcedir.tar.gz")
    channels = {c: {"TrainingInputMode": "File"} for c in ("training", "code")}
    script_job(base, "/opt/ml/input/data/code/sourcedir.tar.gz", hyperparameters={"epochs": 1}, channels=channels)
    spec = SyntheticSpec("image-dir", examples=200, features=16 * 16 * 3, classes=4, image_shape=(16, 16, 3), seed=1)
    write_dataset(base / "input" / "data" / "training", spec)
    return base


def run(repeats: int) -> list[dict]:
    if str(TRAINING_IMAGE) not in sys.path:
        sys.path.insert(0, str(TRAINING_IMAGE))
    plain, guarded, bare, with_requirements = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="script-bench-") as scratch:
        root = Path(scratch)
        for attempt in range(repeats):
            base = _job(root, f"plain-{attempt}", requirements=False)
            (base / "model").mkdir(parents=True, exist_ok=True)
            plain.append(
                _first_step(
                    [sys.executable, str(EXAMPLE / "train.py"), "--epochs", "1"],
                    _env(base, SM_CHANNEL_TRAINING=str(base / "input" / "data" / "training"), SM_MODEL_DIR=str(base / "model")),
                    EXAMPLE,
                )
            )
            base = _job(root, f"guarded-{attempt}", requirements=False)
            (base / "model").mkdir(parents=True, exist_ok=True)
            guarded.append(
                _first_step(
                    [str(TRAINING_IMAGE / "bin" / "python"), str(EXAMPLE / "train.py"), "--epochs", "1"],
                    _env(base, SM_CHANNEL_TRAINING=str(base / "input" / "data" / "training"), SM_MODEL_DIR=str(base / "model"),
                         TRAINER_PYTHON=sys.executable),
                    EXAMPLE,
                )
            )
            for requirements, into in ((False, bare), (True, with_requirements)):
                job = _job(root, f"script-{attempt}-{requirements}", requirements=requirements)
                into.append(_first_step([sys.executable, "-m", "trainer"], _env(job), TRAINING_IMAGE))
    baseline = statistics.median(plain)
    rows = [{"benchmark": "script", "metric": "plain `python train.py` to first step (s)", "value": f"{baseline:.1f}", "ratio": "1.00 (baseline)", "target": ""}]
    for label, values in (
        ("`python train.py` through the image's python wrapper (guard) to first step (s)", guarded),
        ("script mode to first step (s)", bare),
        ("script mode + requirements.txt to first step (s)", with_requirements),
    ):
        median = statistics.median(values)
        rows.append(
            {
                "benchmark": "script",
                "metric": label,
                "value": f"{median:.1f} (runs {json.dumps([round(v, 1) for v in values])})",
                "ratio": f"{median / baseline:.2f}x",
                "target": "",
            }
        )
    return rows
