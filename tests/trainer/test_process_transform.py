"""The built-in transform's output: every row or picture arrives once, split, balanced, described, readable.

The transform runs in-process here (one TensorFlow for the whole module); the entrypoint's
order and failure reporting are covered by test_process_contract.py.
"""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tests.trainer.process_helpers import output_dir, raw_dir, read_examples, write_raw
from trainer.contract.environment import resolve_paths
from trainer.contract.hyperparameters import TrainingConfig
from trainer.datasets import images, manifest
from trainer.datasets import tabular as data
from trainer.datasets.synthetic import SyntheticSpec, encode_image, write_dataset
from trainer.process import contract, transform
from trainer.process.options import TransformOptions
from trainer.process.records import ShardWriter, serialize_examples
from trainer.process.statistics import RunningMoments


def _env(base: Path) -> contract.ProcessingEnvironment:
    return contract.load_environment({"SAGEMAKER_BASE_DIR": str(base)})


def _csv_rows(raw: Path) -> list[tuple[tuple[float, ...], int]]:
    rows = []
    for path in sorted(raw.glob("*.csv")):
        lines = path.read_text().splitlines()
        if not lines[0][:1].lstrip("-").replace(".", "").isdigit():
            lines = lines[1:]
        for line in lines:
            *features, label = line.split(",")
            rows.append((tuple(float(np.float32(v)) for v in features), int(label)))
    return rows


def _as_keys(rows):
    return sorted((tuple(float(np.float32(v)) for v in features), label) for features, label in rows)


def _shard_sizes(directory: Path) -> list[int]:
    return [len(read_examples_of(path)) for path in sorted(directory.glob("*.tfrecord"))]


def read_examples_of(path: Path) -> list[bytes]:
    import tensorflow as tf

    return [r.numpy() for r in tf.data.TFRecordDataset(str(path))]


@pytest.fixture(scope="module")
def csv_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("csv")
    write_raw(base, SyntheticSpec("csv", examples=700, features=4, classes=3, shards=3, seed=1))
    # One file without a header: the trainer's layout allows both.
    write_dataset(raw_dir(base) / "more", SyntheticSpec("csv", examples=50, features=4, classes=3, seed=2, header=False))
    (raw_dir(base) / "more" / ".trainer-manifest.json").unlink()
    statistics = transform.run(_env(base), TransformOptions(shards=4, validation_fraction=0.2, seed=11))
    return base, statistics


def test_every_csv_row_arrives_once_with_its_label(csv_run):
    base, statistics = csv_run
    train, validation = read_examples(output_dir(base, "train")), read_examples(output_dir(base, "validation"))
    source = _csv_rows(raw_dir(base)) + _csv_rows(raw_dir(base) / "more")
    assert len(source) == 750
    assert _as_keys(train + validation) == _as_keys(source)
    assert statistics["examples"] == {"train": len(train), "validation": len(validation)}
    # A hash split meets the fraction on average: 150 expected, far outside 110..190 is a broken split.
    assert 110 <= len(validation) <= 190, len(validation)


def test_shards_are_balanced_and_listed_in_the_manifests(csv_run):
    base, statistics = csv_run
    for name, count in (("train", 4), ("validation", 1)):
        directory = output_dir(base, name)
        sizes = _shard_sizes(directory)
        assert len(sizes) == count and max(sizes) - min(sizes) <= 1, sizes
        recorded = manifest.read(directory)
        assert recorded is not None and recorded.data_format == "tfrecord"
        assert (recorded.num_features, recorded.num_classes) == (4, 3)
        assert [(f.path, f.examples, f.bytes) for f in recorded.files] == [
            (p.name, n, p.stat().st_size) for p, n in zip(sorted(directory.glob("*.tfrecord")), sizes, strict=True)
        ]
        assert [s["examples"] for s in statistics["shards"][name]] == sizes


def test_the_trainer_reads_the_shards_from_the_manifest_without_a_scan(csv_run, capsys):
    base, _ = csv_run
    paths = dataclasses.replace(resolve_paths({}), data_dir=base / "processing" / "output")
    for name in ("train", "validation"):
        spec = data.discover_channel(paths, TrainingConfig(), {}, channel=name)
        assert spec.data_format == "tfrecord"
        assert all(Path(f.path).suffix == ".tfrecord" for f in spec.files), "statistics.json is not data"
        counted = data.count_channel(spec, 0)
        assert f"manifest channel={name}" in capsys.readouterr().out
        rows = []
        for features, labels in data.make_eval_dataset(counted, 64):
            rows += list(zip(features.numpy().tolist(), labels.numpy().tolist(), strict=True))
        assert _as_keys(rows) == _as_keys(read_examples(output_dir(base, name)))
        assert counted.examples == len(rows)


def test_statistics_equal_numpys_over_each_split(csv_run):
    base, statistics = csv_run
    assert statistics["format"] == "tfrecord" and statistics["num_features"] == 4 and statistics["num_classes"] == 3
    assert json.loads((output_dir(base, "train") / "statistics.json").read_text()) == statistics
    for name in ("train", "validation"):
        rows = read_examples(output_dir(base, name))
        features = np.array([f for f, _ in rows], dtype=np.float64)
        stats = statistics["features"][name]
        np.testing.assert_allclose(stats["mean"], features.mean(axis=0), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(stats["std"], features.std(axis=0), rtol=1e-9, atol=1e-12)
        counts = Counter(label for _, label in rows)
        assert statistics["class_counts"][name] == {str(k): counts[k] for k in sorted(counts)}


def test_the_split_is_fixed_by_the_seed(tmp_path, csv_run):
    base, _ = csv_run
    again = tmp_path / "again"
    write_raw(again, SyntheticSpec("csv", examples=700, features=4, classes=3, shards=3, seed=1))
    write_dataset(raw_dir(again) / "more", SyntheticSpec("csv", examples=50, features=4, classes=3, seed=2, header=False))
    transform.run(_env(again), TransformOptions(shards=4, validation_fraction=0.2, seed=11))
    for name in ("train", "validation"):
        for ours, theirs in zip(sorted(output_dir(base, name).glob("*.tfrecord")), sorted(output_dir(again, name).glob("*.tfrecord")), strict=True):
            assert ours.read_bytes() == theirs.read_bytes()
    other = tmp_path / "other-seed"
    write_raw(other, SyntheticSpec("csv", examples=700, features=4, classes=3, shards=3, seed=1))
    write_dataset(raw_dir(other) / "more", SyntheticSpec("csv", examples=50, features=4, classes=3, seed=2, header=False))
    transform.run(_env(other), TransformOptions(shards=4, validation_fraction=0.2, seed=12))
    assert _as_keys(read_examples(output_dir(other, "validation"))) != _as_keys(read_examples(output_dir(base, "validation")))


def test_examples_built_in_tensorflow_ops_parse_as_tf_train_example():
    import tensorflow as tf

    features = np.array([[1.5, -2.0, 3.25], [0.0, 1e-7, -1e30]], dtype=np.float32)
    records = serialize_examples(
        {
            "features": ("float", features),
            "label": ("int64", np.array([[0], [300]], dtype=np.int64)),
            "name": ("bytes", np.array([[b"a"], [b"\xff\x00b"]], dtype=object)),
        }
    ).numpy()
    for row, record in enumerate(records):
        parsed = tf.train.Example.FromString(record).features.feature
        assert list(parsed["features"].float_list.value) == features[row].tolist()
        assert list(parsed["label"].int64_list.value) == [[0], [300]][row]
        assert list(parsed["name"].bytes_list.value) == [[b"a"], [b"\xff\x00b"]][row]


def test_round_robin_shards_differ_by_at_most_one_and_empty_ones_go(tmp_path):
    writer = ShardWriter(tmp_path, 4)
    writer.write_all([b"x"] * 5)
    writer.write_all([b"y"] * 4)
    shards = writer.close()
    assert [s.examples for s in shards] == [3, 2, 2, 2]
    (tmp_path / "few").mkdir()
    few = ShardWriter(tmp_path / "few", 5)
    few.write_all([b"z"] * 2)
    assert [s.path.name for s in few.close()] == ["part-00000.tfrecord", "part-00001.tfrecord"]
    assert sorted(p.name for p in (tmp_path / "few").iterdir()) == ["part-00000.tfrecord", "part-00001.tfrecord"]


def test_shuffled_shards_hold_every_record_once_in_a_seeded_order_not_the_input_order(tmp_path):
    records = [f"{i:05d}".encode() for i in range(3000)]

    def shards(name: str, seed: int) -> list[list[bytes]]:
        (tmp_path / name).mkdir()
        writer = ShardWriter(tmp_path / name, 2, shuffle_seed=seed, staging_files=3)
        for start in range(0, len(records), 700):  # written in batches, as the transform writes
            writer.write_all(records[start : start + 700])
        assert writer.examples == len(records)
        written = writer.close()
        assert sorted(p.name for p in (tmp_path / name).iterdir()) == ["part-00000.tfrecord", "part-00001.tfrecord"]
        return [read_examples_of(shard.path) for shard in written]

    first = shards("a", seed=5)
    assert sorted(first[0] + first[1]) == records and abs(len(first[0]) - len(first[1])) <= 1
    for shard in first:
        # Input order would be ascending; a seeded random order has about as many descents as ascents.
        descents = sum(a > b for a, b in zip(shard, shard[1:]))
        assert 0.4 < descents / len(shard) < 0.6, descents
    assert shards("b", seed=5) == first
    assert shards("c", seed=6) != first


def test_running_moments_keep_precision_far_from_zero_and_merge_groups():
    rng = np.random.default_rng(0)
    # Features arrive as float32 (as the trainer parses them); the accumulators are float64.
    values = (1e7 + rng.normal(0.0, 3.0, size=(1000, 3))).astype(np.float32).astype(np.float64)
    labels = rng.integers(0, 4, size=1000)
    rows = RunningMoments(3, "/CPU:0")
    for start in range(0, 1000, 137):
        rows.update_rows(values[start : start + 137], labels[start : start + 137])
    result = rows.result()
    np.testing.assert_allclose(result["mean"], values.mean(axis=0), rtol=1e-14)
    # sum(x^2) - n*mean^2 at 1e7 keeps few digits of a spread of 3 (x^2 ~ 1e14, float64 ULP ~ 0.02 per row).
    np.testing.assert_allclose(result["std"], values.std(axis=0), rtol=1e-7)
    assert rows.classes == Counter(labels.tolist())
    # Groups (pictures) reduced elsewhere merge to the same answer as their rows.
    groups = RunningMoments(3, "/CPU:0")
    parts = np.array_split(np.arange(1000), 10)
    counts = np.array([len(p) for p in parts], dtype=np.float64)
    means = np.stack([values[p].mean(axis=0) for p in parts])
    m2s = np.stack([((values[p] - values[p].mean(axis=0)) ** 2).sum(axis=0) for p in parts])
    groups.update_groups(counts[:4], means[:4], m2s[:4], np.zeros(4, np.int64))
    groups.update_groups(counts[4:], means[4:], m2s[4:], np.ones(6, np.int64))
    np.testing.assert_allclose(groups.result()["std"], values.std(axis=0), rtol=1e-7)
    assert groups.classes == Counter({0: 4, 1: 6})


# --- pictures --------------------------------------------------------------------------------


def _image_raw(base: Path, examples: int = 40, shape=(20, 20, 3), classes: int = 4, encoding: str = "jpeg") -> Path:
    spec = SyntheticSpec("image-dir", examples=examples, features=int(np.prod(shape)), classes=classes,
                         image_shape=shape, seed=4, encoding=encoding)  # fmt: skip
    return write_raw(base, spec)


def _records(directory: Path) -> list[dict]:
    import tensorflow as tf

    found = []
    for path in sorted(directory.glob("*.tfrecord")):
        for record in tf.data.TFRecordDataset(str(path)):
            feature = tf.train.Example.FromString(record.numpy()).features.feature
            encoded = feature[images.IMAGE_KEY].bytes_list.value[0]
            found.append(
                {
                    "encoded": encoded,
                    "pixels": tf.io.decode_image(encoded, channels=3).numpy(),
                    "label": feature[images.LABEL_KEY].int64_list.value[0],
                    "height": feature["image/height"].int64_list.value[0],
                    "width": feature["image/width"].int64_list.value[0],
                    "format": feature["image/format"].bytes_list.value[0],
                }
            )
    return found


def _class_colours(raw: Path) -> dict[str, np.ndarray]:
    import tensorflow as tf

    return {
        d.name: np.mean([tf.io.decode_image(p.read_bytes(), channels=3).numpy().reshape(-1, 3).mean(axis=0) for p in d.iterdir()], axis=0)
        for d in sorted(raw.iterdir())
    }


@pytest.fixture(scope="module")
def image_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("images")
    raw = _image_raw(base)
    statistics = transform.run(_env(base), TransformOptions(image_size=(16, 12), validation_fraction=0.25, seed=3, shards=2))
    return base, raw, statistics


def test_pictures_become_resized_jpeg_records_with_labels_from_1(image_run):
    base, raw, statistics = image_run
    colours = _class_colours(raw)
    names = sorted(colours)
    assert statistics["class_names"] == names and statistics["label_base"] == 1
    everything = []
    for name in ("train", "validation"):
        records = _records(output_dir(base, name))
        everything += records
        assert statistics["examples"][name] == len(records)
        assert statistics["class_counts"][name] == {
            str(k): v for k, v in sorted(Counter(r["label"] - 1 for r in records).items())
        }
    assert len(everything) == 40
    assert Counter(r["label"] - 1 for r in everything) == Counter(
        names.index(d.name) for d in raw.iterdir() for _ in d.iterdir()
    )
    for record in everything:
        assert record["pixels"].shape == (16, 12, 3) and (record["height"], record["width"]) == (16, 12)
        assert record["format"] == b"jpeg" and record["encoded"][:2] == b"\xff\xd8"
        # Each class has its own colour: the picture's label must be the class whose colour it wears.
        mean = record["pixels"].reshape(-1, 3).mean(axis=0)
        nearest = min(names, key=lambda n: np.abs(colours[n] - mean).sum())
        assert names.index(nearest) == record["label"] - 1


def test_picture_statistics_are_per_channel_over_the_written_pixels(image_run):
    base, _, statistics = image_run
    assert statistics["image_size"] == [16, 12] and statistics["skipped_images"] == {"count": 0, "files": []}
    pixels = np.concatenate([r["pixels"].reshape(-1, 3) for r in _records(output_dir(base, "train"))]).astype(np.float64)
    # The written JPEG is lossy: the statistics describe the resized pixels before encoding.
    np.testing.assert_allclose(statistics["features"]["train"]["mean"], pixels.mean(axis=0), atol=2.0)
    np.testing.assert_allclose(statistics["features"]["train"]["std"], pixels.std(axis=0), atol=3.0)


def test_the_trainer_counts_picture_shards_from_their_manifest(image_run):
    base, _, statistics = image_run
    for name in ("train", "validation"):
        directory = output_dir(base, name)
        assert images.detect_format(directory) == "image-tfrecord", "statistics.json must not hide the shards"
        spec = images.discover(directory, channel=name, data_format="image-tfrecord")
        assert spec.counts == tuple(s["examples"] for s in statistics["shards"][name])
        assert (spec.examples, spec.num_classes, spec.label_base) == (statistics["examples"][name], 4, 1)
        # Both channels name their classes, so training can check that they number them alike.
        assert spec.class_names == tuple(statistics["class_names"])
        assert max(spec.counts) - min(spec.counts) <= 1
        labels = []
        for batch, label in images.make_dataset(spec, training=False, image_size=12, per_replica_batch=8, batches=None):
            assert batch.shape[1:] == (12, 12, 3)
            labels += label.numpy().tolist()
        assert Counter(labels) == Counter({int(k): v for k, v in statistics["class_counts"][name].items()})


def test_the_batched_device_resize_writes_what_the_cpu_map_writes(tmp_path):
    for name in ("map", "batched"):
        _image_raw(tmp_path / name, examples=24, shape=(20, 20, 3), classes=3)
    opts = TransformOptions(image_size=(10, 10), validation_fraction=0.25, seed=1, shards=1)
    by_map = transform.run(_env(tmp_path / "map"), opts)
    outputs = transform.Outputs(output_dir(tmp_path / "batched", "train"), output_dir(tmp_path / "batched", "validation"))
    for directory in (outputs.train, outputs.validation):
        directory.mkdir(parents=True)
    batched = transform.convert_images(raw_dir(tmp_path / "batched"), outputs, opts, resize_device="/CPU:0")
    assert batched["resized_on"] == "/CPU:0" and batched["examples"] == by_map["examples"]
    assert batched["class_counts"] == by_map["class_counts"]
    for name in ("train", "validation"):
        ours, theirs = _records(output_dir(tmp_path / "map", name)), _records(output_dir(tmp_path / "batched", name))
        assert [r["label"] for r in ours] == [r["label"] for r in theirs]
        for a, b in zip(ours, theirs, strict=True):
            assert np.abs(a["pixels"].astype(int) - b["pixels"].astype(int)).max() <= 2
        np.testing.assert_allclose(batched["features"][name]["mean"], by_map["features"][name]["mean"], atol=0.5)


def test_resized_on_reports_the_device_the_resize_ran_on_not_the_one_asked_for(tmp_path):
    import tensorflow as tf

    if tf.config.list_logical_devices("GPU"):
        pytest.skip("a GPU is visible: /GPU:0 would really run the resize")
    _image_raw(tmp_path, examples=12, shape=(20, 20, 3), classes=2)
    outputs = transform.Outputs(output_dir(tmp_path, "train"), output_dir(tmp_path, "validation"))
    for directory in (outputs.train, outputs.validation):
        directory.mkdir(parents=True)
    opts = TransformOptions(image_size=(8, 8), validation_fraction=0.25, seed=1, shards=1)
    # No GPU here: soft placement runs the "/GPU:0" resize on the CPU, and the statistics must say so.
    statistics = transform.convert_images(raw_dir(tmp_path), outputs, opts, resize_device="/GPU:0")
    assert statistics["resized_on"] == "/CPU:0" and statistics["examples"]["train"] + statistics["examples"]["validation"] == 12


def test_the_batched_resize_handles_pictures_of_different_sizes(tmp_path):
    raw = raw_dir(tmp_path)
    rng = np.random.default_rng(0)
    for label, shape in enumerate([(20, 20, 3), (24, 18, 3)]):
        for index in range(6):
            path = raw / f"kind_{label}" / f"{index}.jpg"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(encode_image(rng.integers(0, 255, size=shape, dtype=np.uint8), "jpeg"))
    outputs = transform.Outputs(output_dir(tmp_path, "train"), output_dir(tmp_path, "validation"))
    for directory in (outputs.train, outputs.validation):
        directory.mkdir(parents=True)
    statistics = transform.convert_images(raw, outputs, TransformOptions(image_size=(8, 8), validation_fraction=0.5), resize_device="/CPU:0")
    records = _records(outputs.train) + _records(outputs.validation)
    assert len(records) == 12 and all(r["pixels"].shape == (8, 8, 3) for r in records)
    assert sum(statistics["examples"].values()) == 12


def test_without_an_image_size_each_pictures_own_bytes_are_kept(tmp_path):
    raw = _image_raw(tmp_path, examples=16, shape=(12, 12, 3), classes=2, encoding="png")
    transform.run(_env(tmp_path), TransformOptions(validation_fraction=0.5))
    records = _records(output_dir(tmp_path, "train")) + _records(output_dir(tmp_path, "validation"))
    assert sorted(r["encoded"] for r in records) == sorted(p.read_bytes() for p in raw.rglob("*.png"))
    assert {r["format"] for r in records} == {b"png"} and {(r["height"], r["width"]) for r in records} == {(12, 12)}


def test_statistics_json_in_a_channel_is_not_taken_for_data(tmp_path):
    rows = tmp_path / "rows"
    write_dataset(rows, SyntheticSpec("tfrecord", examples=10, features=3, classes=2))
    (rows / manifest.STATISTICS_NAME).write_text("{}")
    paths = dataclasses.replace(resolve_paths({}), data_dir=tmp_path)
    spec = data.discover_channel(paths, TrainingConfig(), {}, channel="rows")
    assert spec.data_format == "tfrecord" and [Path(f.path).name for f in spec.files] == ["part-00000.tfrecord"]
    pictures = tmp_path / "pictures"
    write_dataset(pictures, SyntheticSpec("image-tfrecord", examples=6, features=8 * 8 * 3, classes=2, image_shape=(8, 8, 3)))
    (pictures / manifest.STATISTICS_NAME).write_text("{}")
    assert images.detect_format(pictures) == "image-tfrecord"
    assert images.discover(pictures, channel="pictures", data_format="image-tfrecord").examples == 6


def test_statistics_reduced_in_the_main_loop_equal_those_reduced_in_the_map(tmp_path):
    # A GPU host reduces each batch on the GPU in the main loop; a CPU host inside the tf.data map.
    for name in ("map", "loop"):
        write_raw(tmp_path / name, SyntheticSpec("csv", examples=300, features=5, classes=4, seed=6))
    opts = TransformOptions(validation_fraction=0.3, seed=2)
    in_map = transform.run(_env(tmp_path / "map"), opts)
    outputs = transform.Outputs(output_dir(tmp_path / "loop", "train"), output_dir(tmp_path / "loop", "validation"))
    for directory in (outputs.train, outputs.validation):
        directory.mkdir(parents=True)
    in_loop = transform.convert_csv(raw_dir(tmp_path / "loop"), sorted(raw_dir(tmp_path / "loop").glob("*.csv")), outputs, opts,
                                    reduce_on="/CPU:0")  # fmt: skip
    assert (in_map["statistics_reduced_on"], in_loop["statistics_reduced_on"]) == ("tf.data map (CPU)", "/CPU:0")
    assert in_loop["class_counts"] == in_map["class_counts"] and in_loop["examples"] == in_map["examples"]
    for name in ("train", "validation"):
        np.testing.assert_allclose(in_loop["features"][name]["mean"], in_map["features"][name]["mean"], rtol=1e-12)
        np.testing.assert_allclose(in_loop["features"][name]["std"], in_map["features"][name]["std"], rtol=1e-12)
