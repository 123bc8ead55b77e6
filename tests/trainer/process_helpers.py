"""Laying out processing jobs the way SageMaker Processing does, and running ``python -m trainer process``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.trainer.helpers import RUN_TIMEOUT_SECONDS, TrainerRun, run_trainer
from trainer.datasets.synthetic import SyntheticSpec, write_dataset


def raw_dir(base: Path) -> Path:
    """``processing/input/raw`` under ``base``."""
    return base / "processing" / "input" / "raw"


def output_dir(base: Path, name: str) -> Path:
    """``processing/output/<name>`` under ``base``."""
    return base / "processing" / "output" / name


def write_raw(base: Path, spec: SyntheticSpec) -> Path:
    """The raw input as a user uploads it: the synthetic files without the trainer's manifests."""
    directory = raw_dir(base)
    write_dataset(directory, spec)
    for name in (".trainer-manifest.json", "manifest.json"):
        (directory / name).unlink(missing_ok=True)
    return directory


def job_config(
    base: Path,
    *,
    arguments: list[str] | None = None,
    instance_type: str = "ml.g5.xlarge",
    instance_count: int = 1,
    inputs: dict[str, dict[str, Any]] | None = None,
    hosts: list[str] | None = None,
) -> Path:
    """``config/processingjobconfig.json`` (DescribeProcessingJob-shaped) and ``config/resourceconfig.json``."""
    config = base / "config"
    config.mkdir(parents=True, exist_ok=True)
    inputs = inputs if inputs is not None else {
        "raw": {"LocalPath": "/opt/ml/processing/input/raw", "S3Uri": "s3://datasets/raw/", "S3DataDistributionType": "FullyReplicated"}
    }  # fmt: skip
    body = {
        "ProcessingJobName": "gputrain-test-process",
        "ProcessingInputs": [
            {"InputName": name, "S3Input": {"S3DataType": "S3Prefix", "S3InputMode": "File", **s3}} for name, s3 in inputs.items()
        ],
        "ProcessingOutputConfig": {
            "Outputs": [
                {"OutputName": name, "S3Output": {"LocalPath": f"/opt/ml/processing/output/{name}", "S3Uri": f"s3://datasets/processed/job/{name}/", "S3UploadMode": "EndOfJob"}}
                for name in ("train", "validation")
            ]
        },
        "ProcessingResources": {"ClusterConfig": {"InstanceCount": instance_count, "InstanceType": instance_type, "VolumeSizeInGB": 100}},
        "AppSpecification": {"ImageUri": "image:tag", "ContainerEntrypoint": ["python3", "-m", "trainer", "process"], "ContainerArguments": arguments or []},
        "Environment": {"EXPECTED_GPU_COUNT": "1"},
    }  # fmt: skip
    (config / "processingjobconfig.json").write_text(json.dumps(body))
    hosts = hosts or [f"algo-{i + 1}" for i in range(instance_count)]
    (config / "resourceconfig.json").write_text(json.dumps({"current_host": hosts[0], "hosts": hosts}))
    return base


class ProcessRun(TrainerRun):
    """A finished ``python -m trainer process`` (the trainer's run, with the processing mode's failure file)."""

    @property
    def message(self) -> str | None:
        """``output/message`` (SageMaker Processing's ExitMessage), or None."""
        path = self.base / "output" / "message"
        return path.read_text(encoding="utf-8") if path.exists() else None


def run_process(base: Path, *args: str, timeout: float = RUN_TIMEOUT_SECONDS, **env: Any) -> ProcessRun:
    """Runs ``python -m trainer process [args]`` from training_image/, CPU on purpose unless ``env`` says otherwise."""
    base.mkdir(parents=True, exist_ok=True)
    run = run_trainer(base, "process", *args, timeout=timeout, **env)
    return ProcessRun(run.base, run.returncode, run.stdout, run.stderr)


def read_examples(directory: Path) -> list[tuple[list[float], int]]:
    """Every ``(features, label)`` of the trainer-format shards in ``directory``, shard by shard."""
    import tensorflow as tf

    rows = []
    for path in sorted(directory.glob("*.tfrecord")):
        for record in tf.data.TFRecordDataset(str(path)):
            example = tf.train.Example.FromString(record.numpy())
            features = list(example.features.feature["features"].float_list.value)
            rows.append((features, int(example.features.feature["label"].int64_list.value[0])))
    return rows
