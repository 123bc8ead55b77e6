"""A job that carries user code but names no script never trains a built-in model in its place."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.trainer.helpers import run_trainer, write_job
from trainer.contract import environment
from trainer.contract.errors import SourceError
from trainer.datasets.synthetic import SyntheticSpec
from trainer.user_code import contract

DATA = SyntheticSpec("csv", examples=64, features=4, classes=2, seed=1)
CHANNEL = {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated", "RecordWrapperType": "None"}


def _env(base: Path) -> environment.TrainingEnvironment:
    return environment.load_environment({"SAGEMAKER_BASE_DIR": str(base)})


def test_model_trainer_jobs_started_with_the_images_entrypoint_are_refused(tmp_path: Path) -> None:
    """SDK v3 ModelTrainer: user hyperparameters, a 'code' and an 'sm_drivers' channel, no sagemaker_program."""
    base = write_job(tmp_path / "opt-ml", {"epochs": 1}, DATA, input_data_config={"train": CHANNEL, "code": CHANNEL, "sm_drivers": CHANNEL})
    (base / "input" / "data" / "sm_drivers").mkdir(parents=True)
    (base / "input" / "data" / "sm_drivers" / "sm_train.sh").write_text("python3 train.py\n")
    run = run_trainer(base, "train")
    assert run.returncode == 9, run.explain()
    assert (run.failure or "").startswith("This job carries SageMaker SDK v3 ModelTrainer code (the 'sm_drivers' channel)")
    assert not run.model_path.exists(), "no built-in model in place of the user's"
    assert "[gpu-check]" not in run.stdout, "refused before any work"


def test_a_code_channel_with_a_tarball_but_no_program_is_refused(tmp_path: Path) -> None:
    base = write_job(tmp_path / "opt-ml", {}, None, input_data_config={"code": CHANNEL})
    (base / "input" / "data" / "code").mkdir(parents=True)
    (base / "input" / "data" / "code" / "sourcedir.tar.gz").write_bytes(b"")
    with pytest.raises(SourceError, match=r"holds code \(sourcedir.tar.gz\) but the job names no script.*"
                       r"sagemaker_submit_directory to /opt/ml/input/data/code/sourcedir.tar.gz"):
        contract.refuse_unclaimed_code(_env(base), {})


def test_a_submit_directory_in_the_environment_without_a_program_is_refused(tmp_path: Path) -> None:
    base = write_job(tmp_path / "opt-ml", {}, None)
    with pytest.raises(SourceError, match="SAGEMAKER_SUBMIT_DIRECTORY='/opt/ml/code' is set but no script is named"):
        contract.refuse_unclaimed_code(_env(base), {"SAGEMAKER_SUBMIT_DIRECTORY": "/opt/ml/code"})


def test_a_data_channel_that_happens_to_be_called_code_still_trains(tmp_path: Path) -> None:
    base = write_job(tmp_path / "opt-ml", {}, None, input_data_config={"code": CHANNEL})
    (base / "input" / "data" / "code").mkdir(parents=True)
    (base / "input" / "data" / "code" / "part-0.csv").write_text("a,b\n1,0\n")
    contract.refuse_unclaimed_code(_env(base), {})  # no script-like files: not user code


def test_sagemaker_program_without_code_fails_with_one_line(tmp_path: Path) -> None:
    base = write_job(tmp_path / "opt-ml", {"sagemaker_program": json.dumps("train.py")}, DATA, input_data_config={"train": CHANNEL})
    run = run_trainer(base, "train")
    assert run.returncode == 9, run.explain()
    assert "sagemaker_submit_directory /opt/ml/code does not exist in the container" in (run.failure or "")
    assert not run.model_path.exists()
