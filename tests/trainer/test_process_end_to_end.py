"""Raw data -> ``python -m trainer process`` -> ``python -m trainer`` on its outputs, as the pipeline runs them.

The built-in trainer must train on the transform's ``train/`` and ``validation/`` as channels
with the same hyperparameters as on the raw data (nothing added), counting from the manifests
the transform wrote instead of scanning.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.trainer.helpers import ROOT, run_trainer, write_job
from tests.trainer.process_helpers import job_config, output_dir, run_process, write_raw
from trainer.datasets.synthetic import SyntheticSpec


def _deployed_hyperparameters() -> dict[str, str]:
    """What cdk.json gives the training job (model, epochs, batch_size)."""
    context = json.loads((ROOT / "cdk.json").read_text())["context"]["gpu_training"]
    return dict(context["training_job"]["hyperparameters"])


def _channels_from(processing_base: Path, training_base: Path) -> None:
    for name in ("train", "validation"):
        shutil.copytree(output_dir(processing_base, name), training_base / "input" / "data" / name)


@pytest.mark.slow
def test_the_trainer_trains_on_the_transforms_csv_output_without_a_scan(tmp_path):
    raw = SyntheticSpec("csv", examples=1200, features=8, classes=3, shards=2, seed=21)
    processing = job_config(tmp_path / "process")
    write_raw(processing, raw)
    processed = run_process(processing, "--shards", "2", "--seed", "5")
    assert processed.returncode == 0, processed.explain()
    statistics = json.loads((output_dir(processing, "train") / "statistics.json").read_text())

    hyperparameters = _deployed_hyperparameters()
    assert set(hyperparameters) == {"model", "epochs", "batch_size"}
    on_shards = write_job(tmp_path / "train-on-shards", hyperparameters, None)
    _channels_from(processing, on_shards)
    run = run_trainer(on_shards)
    assert run.returncode == 0, run.explain()
    assert run.events("scan") == [], "the manifests the transform wrote must spare the scan"
    assert [e["channel"] for e in run.events("manifest")] == ["train", "validation"]
    (data,) = run.events("data")
    assert (data["format"], data["files"], data["features"], data["classes"]) == ("tfrecord", "2", "8", "3")
    assert int(data["examples"]) == statistics["examples"]["train"]
    rows = run.metrics()
    assert len(rows) == int(hyperparameters["epochs"]) and all("val_loss" in r for r in rows), rows
    assert run.model_path.exists()

    # The same hyperparameters on the raw CSV train the same model shape: nothing was added for the shards.
    on_raw = write_job(tmp_path / "train-on-raw", hyperparameters, raw)
    baseline = run_trainer(on_raw)
    assert baseline.returncode == 0, baseline.explain()
    (raw_data,) = baseline.events("data")
    assert (raw_data["features"], raw_data["classes"]) == (data["features"], data["classes"])


# Picture shards: the trainer's own format detection, discovery and input pipeline read the
# transform's output in test_process_transform.py::test_the_trainer_counts_picture_shards_from_their_manifest,
# and test_trainer_images.py trains resnet50 on image-tfrecord shards of the same layout; a
# resnet50 run on the transform's output here added 40 s of CI for no behaviour those miss.
