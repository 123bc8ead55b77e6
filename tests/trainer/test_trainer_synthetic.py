"""The synthetic dataset writer the tests and the local emulator harness use."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.trainer.helpers import TRAINING_IMAGE
from trainer.datasets.synthetic import SyntheticSpec, main, write_dataset


def test_command_line_writes_csv_shards_with_headers(tmp_path):
    completed = subprocess.run(
        [sys.executable, "-m", "trainer.datasets.synthetic", "--format", "csv", "--out", str(tmp_path / "d"),
         "--examples", "101", "--features", "5", "--classes", "3", "--shards", "3"],
        cwd=TRAINING_IMAGE, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    assert "wrote format=csv files=3 examples=101" in completed.stdout
    files = sorted(p for p in (tmp_path / "d").iterdir() if not p.name.startswith("."))
    assert [f.name for f in files] == ["part-00000.csv", "part-00001.csv", "part-00002.csv"]
    lines = [f.read_text().splitlines() for f in files]
    assert all(chunk[0] == "f0,f1,f2,f3,f4,label" for chunk in lines)
    assert sum(len(chunk) - 1 for chunk in lines) == 101
    rows = [row.split(",") for chunk in lines for row in chunk[1:]]
    assert all(len(row) == 6 for row in rows)
    assert {row[-1] for row in rows} == {"0", "1", "2"}


def test_image_tfrecords_have_one_value_per_pixel(tmp_path):
    import tensorflow as tf

    assert main(["--format", "tfrecord", "--out", str(tmp_path), "--examples", "20", "--classes", "4",
                 "--image", "6x5x2", "--no-header"]) == 0  # fmt: skip
    records = list(tf.data.TFRecordDataset(str(tmp_path / "part-00000.tfrecord")))
    assert len(records) == 20
    example = tf.train.Example.FromString(records[0].numpy())
    assert len(example.features.feature["features"].float_list.value) == 60
    assert 0 <= example.features.feature["label"].int64_list.value[0] < 4


def test_same_seed_writes_the_same_bytes(tmp_path):
    spec = SyntheticSpec("csv", examples=30, features=4, classes=2, seed=5)
    first = write_dataset(tmp_path / "a", spec)[0].read_bytes()
    assert write_dataset(tmp_path / "b", spec)[0].read_bytes() == first
    other = SyntheticSpec("csv", examples=30, features=4, classes=2, seed=6)
    assert write_dataset(tmp_path / "c", other)[0].read_bytes() != first


def test_csv_without_header(tmp_path):
    write_dataset(tmp_path, SyntheticSpec("csv", examples=3, features=2, classes=2, header=False))
    assert len((tmp_path / "part-00000.csv").read_text().splitlines()) == 3


@pytest.mark.parametrize(
    "argv",
    [
        ["--features", "10", "--image", "3x3x1"],  # 9 pixels, not 10
        ["--classes", "1", "--features", "3"],
        [],  # neither --features nor --image
    ],
)
def test_inconsistent_arguments_are_refused(tmp_path, argv):
    base = ["--format", "csv", "--out", str(tmp_path), "--examples", "5"]
    if "--classes" not in argv:
        base += ["--classes", "2"]
    with pytest.raises(SystemExit) as caught:
        main(base + argv)
    assert caught.value.code == 2


def test_the_writer_records_a_manifest_that_matches_a_scan(tmp_path):
    import os

    from trainer.contract.environment import resolve_paths
    from trainer.contract.hyperparameters import TrainingConfig
    from trainer.datasets import manifest
    from trainer.datasets import tabular as data

    for fmt in ("csv", "tfrecord"):
        directory = tmp_path / "input" / "data" / fmt
        write_dataset(directory, SyntheticSpec(fmt, examples=101, features=5, classes=3, shards=3, seed=1))
        recorded = manifest.read(directory)
        config = TrainingConfig.from_hyperparameters({"train_channel": fmt})
        discovered = data.discover_channel(resolve_paths({"SAGEMAKER_BASE_DIR": str(tmp_path)}), config, {})
        scanned = data.scan_channel(discovered, 3)
        assert recorded == data.manifest_of(scanned)
        assert [f.bytes for f in recorded.files] == [os.path.getsize(f.path) for f in scanned.files]
        assert data.count_channel(discovered, 0) == scanned


def test_image_directories_have_one_folder_per_class_and_no_manifest(tmp_path):
    written = write_dataset(tmp_path, SyntheticSpec("image-dir", examples=6, features=12, classes=2, image_shape=(2, 2, 3)))
    assert len(written) == 6 and {p.parent.name for p in written} <= {"class_0", "class_1"}
    assert not (tmp_path / ".trainer-manifest.json").exists()


@pytest.mark.slow
def test_the_manifest_command_records_what_the_writer_would(tmp_path):
    from trainer.datasets import manifest

    directory = tmp_path / "channel"
    write_dataset(directory, SyntheticSpec("tfrecord", examples=30, features=4, classes=3, shards=2, seed=2))
    written = manifest.read(directory)
    (directory / manifest.MANIFEST_NAME).unlink()
    completed = subprocess.run(
        [sys.executable, "-m", "trainer.datasets.manifest", str(directory)],
        cwd=TRAINING_IMAGE, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    assert "2 files, 30 examples" in completed.stdout
    recorded = manifest.read(directory)
    # The scan infers classes as largest label + 1; the writer knows them. Everything else agrees.
    assert recorded.files == written.files and recorded.num_features == written.num_features
