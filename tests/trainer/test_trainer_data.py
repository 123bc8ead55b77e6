"""The input pipeline: discovery, the scan that names bad rows, sharding and the tf.data stream."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from trainer.contract.environment import resolve_paths
from trainer.contract.errors import ConfigError, DataError
from trainer.contract.hyperparameters import TrainingConfig
from trainer.datasets import tabular as data
from trainer.datasets.synthetic import SyntheticSpec, write_dataset


def _channel(tmp_path: Path, spec: SyntheticSpec | None = None) -> Path:
    directory = tmp_path / "input" / "data" / "train"
    if spec is not None:
        write_dataset(directory, spec)
    else:
        directory.mkdir(parents=True)
    return directory


def _discover(tmp_path: Path, input_data_config=None, **hyperparameters) -> data.DatasetSpec:
    config = TrainingConfig.from_hyperparameters(hyperparameters)
    return data.discover_channel(resolve_paths({"SAGEMAKER_BASE_DIR": str(tmp_path)}), config, input_data_config or {})


def _scan(tmp_path: Path, num_classes: int = 0, **hyperparameters) -> data.DatasetSpec:
    return data.scan_channel(_discover(tmp_path, **hyperparameters), num_classes)


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# --- discovery and scan ----------------------------------------------------------------------


@pytest.mark.parametrize("header", [True, False])
def test_csv_scan_counts_examples_and_infers_width_and_classes(tmp_path, header):
    _channel(tmp_path, SyntheticSpec("csv", examples=250, features=6, classes=3, shards=3, header=header))
    spec = _scan(tmp_path)
    assert spec.data_format == "csv" and spec.scanned
    assert [f.examples for f in spec.files] == [84, 83, 83]
    assert all(f.header is header for f in spec.files)
    assert (spec.examples, spec.num_features, spec.num_classes) == (250, 6, 3)


def test_tfrecord_scan_counts_examples(tmp_path):
    _channel(tmp_path, SyntheticSpec("tfrecord", examples=90, features=16, classes=4, shards=2, image_shape=(4, 4, 1)))
    spec = _scan(tmp_path)
    assert (spec.data_format, spec.examples, spec.num_features, spec.num_classes) == ("tfrecord", 90, 16, 4)


def test_explicit_num_classes_is_kept(tmp_path):
    _channel(tmp_path, SyntheticSpec("csv", examples=40, features=3, classes=2))
    assert _scan(tmp_path, num_classes=5).num_classes == 5


def test_missing_channel_names_the_directory_and_the_channels_present(tmp_path):
    (tmp_path / "input" / "data" / "validation").mkdir(parents=True)
    with pytest.raises(DataError) as caught:
        _discover(tmp_path)
    message = str(caught.value)
    assert "Input channel 'train' is missing" in message
    assert str(tmp_path / "input" / "data" / "train") in message and "validation" in message


def test_channel_not_declared_in_inputdataconfig(tmp_path):
    _channel(tmp_path, SyntheticSpec("csv", examples=10, features=2, classes=2))
    with pytest.raises(DataError, match="declares only validation"):
        _discover(tmp_path, input_data_config={"validation": {"TrainingInputMode": "File"}})


def test_pipe_mode_is_refused(tmp_path):
    _channel(tmp_path, SyntheticSpec("csv", examples=10, features=2, classes=2))
    with pytest.raises(ConfigError, match="Pipe mode"):
        _discover(tmp_path, input_data_config={"train": {"TrainingInputMode": "Pipe"}})


def test_empty_channel_directory(tmp_path):
    _channel(tmp_path)
    with pytest.raises(DataError, match="is empty: .* holds no files"):
        _discover(tmp_path)


def test_format_comes_from_content_type_when_extensions_do_not_tell(tmp_path):
    _write(_channel(tmp_path) / "part-0", "1,2,0\n3,4,1\n")
    with pytest.raises(DataError, match="Cannot tell the format of .*part-0"):
        _discover(tmp_path)
    spec = _discover(tmp_path, input_data_config={"train": {"ContentType": "text/csv"}})
    assert spec.data_format == "csv"
    assert _discover(tmp_path, data_format="csv").data_format == "csv"


def test_mixed_formats_are_refused(tmp_path):
    directory = _channel(tmp_path, SyntheticSpec("csv", examples=10, features=2, classes=2))
    write_dataset(directory / "more", SyntheticSpec("tfrecord", examples=10, features=2, classes=2))
    with pytest.raises(DataError, match="mixes CSV and TFRecord"):
        _discover(tmp_path)


def test_hidden_files_are_ignored(tmp_path):
    directory = _channel(tmp_path, SyntheticSpec("csv", examples=10, features=2, classes=2))
    _write(directory / ".manifest", "not data")
    assert [Path(f.path).name for f in _discover(tmp_path).files] == ["part-00000.csv"]


def test_header_only_csv_is_an_empty_dataset(tmp_path):
    _write(_channel(tmp_path) / "a.csv", "f0,f1,label\n")
    with pytest.raises(DataError, match="holds 1 file\\(s\\) but no examples .*the dataset is empty"):
        _scan(tmp_path)


def test_single_class_data_needs_num_classes(tmp_path):
    _write(_channel(tmp_path) / "a.csv", "1,2,0\n3,4,0\n")
    with pytest.raises(DataError, match="Every label .* is 0"):
        _scan(tmp_path)


@pytest.mark.parametrize(
    ("bad_row", "fragment"),
    [
        ("0.5,abc,1", "column 2: 'abc' is not a number"),
        ("0.5,1", "2 fields, expected 3"),
        ("0.5,0.1,0.2,1", "4 fields, expected 3"),
        ("", "the line is empty"),
        ("0.5,,1", "column 2: '' is not a number"),
        ("0.5,nan,1", "column 2: 'nan' is not a finite number"),
        ("0.5,0.1,-1", "label '-1' is not a non-negative integer"),
        ("0.5,0.1,1.5", "label '1.5' is not a non-negative integer"),
    ],
)
def test_malformed_csv_row_is_named_by_file_and_line(tmp_path, bad_row, fragment):
    rows = ["f0,f1,label", "0.1,0.2,0", "0.3,0.4,1", bad_row, "0.5,0.6,1"]
    path = _write(_channel(tmp_path) / "part-1.csv", "\n".join(rows) + "\n")
    with pytest.raises(DataError) as caught:
        _scan(tmp_path)
    message = str(caught.value)
    assert f"Malformed CSV row in {path} line 4" in message
    assert fragment in message


def test_label_beyond_num_classes_is_named(tmp_path):
    path = _write(_channel(tmp_path) / "a.csv", "0.1,0\n0.2,1\n0.3,7\n")
    with pytest.raises(DataError, match=f"{path} line 3: label '7' is out of range for num_classes=3"):
        _scan(tmp_path, num_classes=3)


def test_corrupt_tfrecord_names_the_file_and_record(tmp_path):
    directory = _channel(tmp_path, SyntheticSpec("tfrecord", examples=40, features=8, classes=2, shards=2))
    target = directory / "part-00001.tfrecord"
    raw = bytearray(target.read_bytes())
    record_size = len(raw) // 20
    raw[5 * record_size + record_size // 2] ^= 0xFF  # flip a byte inside the sixth record
    target.write_bytes(bytes(raw))
    with pytest.raises(DataError) as caught:
        _scan(tmp_path)
    assert f"Corrupt TFRecord file {target}: record 5 is damaged or truncated" in str(caught.value)


def test_truncated_tfrecord_is_named(tmp_path):
    directory = _channel(tmp_path, SyntheticSpec("tfrecord", examples=10, features=8, classes=2))
    target = directory / "part-00000.tfrecord"
    target.write_bytes(target.read_bytes()[:-7])
    with pytest.raises(DataError, match=f"Corrupt TFRecord file {target}: record 9"):
        _scan(tmp_path)


def test_tfrecord_example_of_the_wrong_width_is_named(tmp_path):
    directory = _channel(tmp_path, SyntheticSpec("tfrecord", examples=10, features=8, classes=2))
    write_dataset(directory / "zz", SyntheticSpec("tfrecord", examples=3, features=5, classes=2))
    with pytest.raises(DataError) as caught:
        _scan(tmp_path)
    assert f"Malformed record in {directory / 'zz' / 'part-00000.tfrecord'}: record 0 has 5 values" in str(caught.value)


# --- sharding --------------------------------------------------------------------------------


def _spec_with(*counts: int) -> data.DatasetSpec:
    files = tuple(data.DataFile(path=f"/d/part-{i}.csv", examples=n) for i, n in enumerate(counts))
    return data.DatasetSpec("train", Path("/d"), "csv", files, num_features=2, num_classes=2, scanned=True)


def test_balanced_files_are_sharded_by_file():
    plans = data.plan_shards(_spec_with(100, 100, 100, 100), 2)
    assert all(p.by_file for p in plans)
    assert [p.examples for p in plans] == [200, 200]
    assert {f.path for p in plans for f in p.files} == {f"/d/part-{i}.csv" for i in range(4)}
    assert not {f.path for f in plans[0].files} & {f.path for f in plans[1].files}


def test_too_few_or_uneven_files_fall_back_to_sharding_examples():
    for counts in [(300,), (100, 100, 100), (1000, 10, 10)]:
        plans = data.plan_shards(_spec_with(*counts), 2)
        assert not any(p.by_file for p in plans)
        total = sum(counts)
        assert [p.examples for p in plans] == [(total + 1) // 2, total // 2]


def test_steps_per_epoch_is_equal_for_every_worker():
    plans = data.plan_shards(_spec_with(300, 301, 299, 300), 2)
    assert data.steps_per_epoch(plans, 64) == min(p.examples for p in plans) // 64
    # A batch larger than a worker's share leaves no step at all; the loop refuses to start.
    assert data.steps_per_epoch(plans, 601) == 0


def _rows(dataset) -> list[tuple]:
    rows = []
    for features, labels in dataset:
        for row, label in zip(features.numpy(), labels.numpy(), strict=True):
            rows.append((*np.round(row, 4).tolist(), int(label)))
    return rows


@pytest.mark.parametrize("shards", [1, 4])
def test_two_workers_partition_the_examples(tmp_path, shards):
    _channel(tmp_path, SyntheticSpec("csv", examples=120, features=3, classes=2, shards=shards))
    spec = _scan(tmp_path)
    plans = data.plan_shards(spec, 2)
    assert plans[0].by_file is (shards == 4)
    seen = []
    for index, plan in enumerate(plans):
        dataset = data.make_dataset(
            spec,
            plan,
            pipeline_index=index,
            num_pipelines=2,
            per_replica_batch=10,
            batches=6,
            shuffle_buffer=1000,
            seed=1,
            epoch=1,
        )
        rows = _rows(dataset)
        assert len(rows) == 60
        seen.append(set(rows))
    assert not seen[0] & seen[1]
    everything = _rows(
        data.make_dataset(
            spec,
            data.plan_shards(spec, 1)[0],
            pipeline_index=0,
            num_pipelines=1,
            per_replica_batch=10,
            batches=12,
            shuffle_buffer=1000,
            seed=1,
            epoch=1,
        )
    )
    assert seen[0] | seen[1] == set(everything)


def test_pipeline_order_depends_only_on_seed_and_epoch(tmp_path):
    _channel(tmp_path, SyntheticSpec("tfrecord", examples=64, features=4, classes=2, shards=2))
    spec = _scan(tmp_path)
    plan = data.plan_shards(spec, 1)[0]

    def epoch(number: int) -> list[tuple]:
        return _rows(
            data.make_dataset(
                spec,
                plan,
                pipeline_index=0,
                num_pipelines=1,
                per_replica_batch=16,
                batches=4,
                shuffle_buffer=64,
                seed=3,
                epoch=number,
            )
        )

    first = epoch(1)
    assert first == epoch(1)
    assert first != epoch(2) and sorted(first) == sorted(epoch(2))


def test_batches_have_the_training_shapes_and_types(tmp_path):
    _channel(tmp_path, SyntheticSpec("csv", examples=50, features=5, classes=3))
    spec = _scan(tmp_path)
    dataset = data.make_dataset(
        spec,
        data.plan_shards(spec, 1)[0],
        pipeline_index=0,
        num_pipelines=1,
        per_replica_batch=8,
        batches=100,
        shuffle_buffer=10,
        seed=0,
        epoch=1,
    )
    batches = list(dataset)
    assert len(batches) == 50 // 8  # drop_remainder: every step has a full batch
    features, labels = batches[0]
    assert features.shape == (8, 5) and features.dtype.name == "float32"
    assert labels.shape == (8,) and labels.dtype.name == "int32"


# --- which channel is the training channel -----------------------------------------------------


@pytest.mark.parametrize("name", ["train", "training", "mydata"])
def test_training_channel_is_found_without_a_hyperparameter(tmp_path, name):
    write_dataset(tmp_path / "input" / "data" / name, SyntheticSpec("csv", examples=10, features=2, classes=2))
    (tmp_path / "input" / "data" / "code").mkdir()  # script mode's channel never counts
    config = {name: {"TrainingInputMode": "File"}, "code": {"TrainingInputMode": "File"}}
    assert _discover(tmp_path).channel == name
    assert _discover(tmp_path, input_data_config=config).channel == name


def test_train_and_training_together_are_ambiguous(tmp_path):
    for name in ("train", "training"):
        write_dataset(tmp_path / "input" / "data" / name, SyntheticSpec("csv", examples=10, features=2, classes=2))
    with pytest.raises(DataError, match="'train' and 'training' are both declared"):
        _discover(tmp_path)
    assert _discover(tmp_path, train_channel="training").channel == "training"


def test_several_other_channels_need_the_hyperparameter(tmp_path):
    for name in ("a", "b"):
        write_dataset(tmp_path / "input" / "data" / name, SyntheticSpec("csv", examples=10, features=2, classes=2))
    with pytest.raises(DataError, match="Input channel 'train' is missing"):
        _discover(tmp_path)
    assert _discover(tmp_path, train_channel="b").channel == "b"


# --- bad input that TensorFlow alone would accept ----------------------------------------------


def test_tfrecord_cut_inside_a_record_header_is_named_with_its_byte_offset(tmp_path):
    directory = _channel(tmp_path, SyntheticSpec("tfrecord", examples=10, features=8, classes=2))
    target = directory / "part-00000.tfrecord"
    raw = target.read_bytes()
    assert len(raw) % 10 == 0  # equal-sized records
    boundary = 9 * (len(raw) // 10)
    target.write_bytes(raw[: boundary + 5])  # TensorFlow's reader takes this as a clean end of file
    with pytest.raises(DataError) as caught:
        _scan(tmp_path)
    message = str(caught.value)
    assert f"Corrupt TFRecord file {target}: 5 byte(s) at byte offset {boundary}" in message
    assert "record 9 is cut inside its header" in message


def test_csv_with_the_numbered_header_pandas_writes_is_not_read_as_a_row(tmp_path, capsys):
    path = _write(_channel(tmp_path) / "a.csv", "0,1,2\n0.1,0.2,1\n0.3,0.4,0\n0.5,0.6,1\n")
    spec = _scan(tmp_path)
    assert spec.files[0].header is True
    assert (spec.examples, spec.num_features, spec.num_classes) == (3, 2, 2)
    assert f"line 1 of {path} is 0,1,...,2, the column names pandas writes" in capsys.readouterr().out


# --- the per-format hook -----------------------------------------------------------------------


def test_a_new_format_plugs_in_through_its_reader_and_parser(tmp_path, monkeypatch):
    import tensorflow as tf

    def parse_tsv(num_features):
        defaults = [tf.constant([], tf.float32)] * num_features + [tf.constant([], tf.float64)]

        def parse(lines):
            columns = tf.io.decode_csv(lines, record_defaults=defaults, field_delim="\t")
            return tf.stack(columns[:-1], axis=1), columns[-1]

        return parse

    tsv = data.RecordFormat(
        name="tsv", label="TSV", suffixes=(".tsv",), content_types=("text/tab-separated-values",),
        read=lambda path, header: tf.data.TextLineDataset(path),
        parse=parse_tsv,
        inspect=lambda directory, files: (files, 2),
        locate_problem=lambda file, num_features, num_classes: f"bad row in {file.path}",
    )  # fmt: skip
    monkeypatch.setitem(data.FORMATS, "tsv", tsv)
    _write(_channel(tmp_path) / "a.tsv", "0.1\t0.2\t0\n0.3\t0.4\t1\n0.5\t0.6\t1\n0.7\t0.8\t0\n")
    spec = _scan(tmp_path)
    assert (spec.data_format, spec.examples, spec.num_features, spec.num_classes) == ("tsv", 4, 2, 2)
    (plan,) = data.plan_shards(spec, 1)
    batches = list(data.make_epochs(spec, plan, first_epoch=1, last_epoch=2, cache=True, pipeline_index=0,
                                    num_pipelines=1, per_replica_batch=2, batches=2, shuffle_buffer=4, seed=0))  # fmt: skip
    assert len(batches) == 4 and batches[0][0].shape == (2, 2)


# --- label-sorted rows: training batches must mix the classes -----------------------------------

SORTED_ROWS = 20_000  # per class: twice the default shuffle buffer


def _label_sorted_csv(directory: Path) -> Path:
    """One CSV of 2 x SORTED_ROWS rows, every label 0 before every label 1 (as a sorted export is)."""
    directory.mkdir(parents=True, exist_ok=True)
    labels = np.repeat([0, 1], SORTED_ROWS)
    rows = np.char.add(np.char.add((labels + np.arange(labels.size) % 7 / 10).astype(str), ","), labels.astype(str))
    (directory / "sorted.csv").write_text("x,label\n" + "\n".join(rows.tolist()) + "\n")
    return directory


def _batch_label_means(spec: data.DatasetSpec, *, cache: bool, batch: int = 500) -> list[float]:
    (plan,) = data.plan_shards(spec, 1)
    epochs = data.make_epochs(spec, plan, first_epoch=1, last_epoch=2, cache=cache, pipeline_index=0, num_pipelines=1,
                              per_replica_batch=batch, batches=spec.examples // batch, shuffle_buffer=10_000, seed=1)  # fmt: skip
    return [float(np.mean(labels.numpy())) for _, labels in epochs]


def test_label_sorted_rows_held_in_memory_are_shuffled_over_the_whole_epoch(tmp_path):
    _label_sorted_csv(_channel(tmp_path))
    spec = data.count_channel(_discover(tmp_path), 0)
    means = _batch_label_means(spec, cache=True)
    assert len(means) == 2 * (2 * SORTED_ROWS // 500)
    assert all(0.3 <= m <= 0.7 for m in means), f"single-class batches: {sorted(means)[:3]} .. {sorted(means)[-3:]}"


def test_rows_held_in_memory_are_read_from_the_files_once(tmp_path):
    _channel(tmp_path, SyntheticSpec("csv", examples=64, features=3, classes=2, shards=2))
    spec = data.count_channel(_discover(tmp_path), 0)
    (plan,) = data.plan_shards(spec, 1)
    epochs = iter(data.make_epochs(spec, plan, first_epoch=1, last_epoch=3, cache=True, pipeline_index=0, num_pipelines=1,
                                   per_replica_batch=8, batches=8, shuffle_buffer=10, seed=0))  # fmt: skip
    first = [labels.numpy().tolist() for _, labels in (next(epochs) for _ in range(8))]
    for file in spec.files:
        Path(file.path).unlink()  # later epochs must come from memory
    later = [labels.numpy().tolist() for _, labels in epochs]
    assert len(later) == 16 and later[:8] != first and sorted(sum(later[:8], [])) == sorted(sum(first, []))


def test_label_sorted_rows_streamed_from_processed_shards_are_mixed(tmp_path):
    from trainer.process import contract, transform
    from trainer.process.options import TransformOptions

    _label_sorted_csv(tmp_path / "processing" / "input" / "raw")
    env = contract.load_environment({"SAGEMAKER_BASE_DIR": str(tmp_path)})
    transform.run(env, TransformOptions(shards=4, validation_fraction=0.1, seed=3))
    paths = resolve_paths({"SAGEMAKER_BASE_DIR": str(tmp_path)})
    channel = tmp_path / "processing" / "output" / "train"
    spec = data.count_channel(data.discover_channel(replace(paths, data_dir=channel.parent), TrainingConfig(), {}, channel="train"), 0)
    assert len(spec.files) == 4 and spec.examples > 30_000
    # Streamed (no cache): the shuffle buffer alone could not mix a sorted input; the shards must already be mixed.
    means = _batch_label_means(spec, cache=False)
    assert all(0.3 <= m <= 0.7 for m in means), f"single-class batches: {sorted(means)[:3]} .. {sorted(means)[-3:]}"


def test_a_long_run_of_one_label_is_warned_about_when_rows_are_streamed(tmp_path, capsys):
    _label_sorted_csv(_channel(tmp_path))
    spec = data.count_channel(_discover(tmp_path), 0)
    assert data.label_order_warning(spec, shuffle_buffer=10_000, cached=True) is None  # the whole epoch is shuffled
    warning = data.label_order_warning(spec, shuffle_buffer=10_000, cached=False)
    assert warning is not None and "\n" not in warning
    assert f"{SORTED_ROWS} rows in a row with label 0" in warning and "sorted.csv" in warning and "10000" in warning
    assert data.label_order_warning(spec, shuffle_buffer=2 * SORTED_ROWS, cached=False) is None
