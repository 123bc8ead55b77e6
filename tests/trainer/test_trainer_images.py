"""Image datasets (trainer.datasets.images), their synthetic writer, and the ResNet-50 built-in model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.trainer.helpers import assert_a_resumed_epoch_keeps_the_rest
from trainer.contract.errors import ConfigError, DataError
from trainer.contract.hyperparameters import TrainingConfig
from trainer.datasets import images
from trainer.datasets.synthetic import SyntheticSpec, encode_image, main, write_dataset

SHAPE = (20, 24, 3)


def _spec(data_format: str, **overrides) -> SyntheticSpec:
    values = dict(examples=24, features=int(np.prod(SHAPE)), classes=3, image_shape=SHAPE, seed=3)
    values.update(overrides)
    return SyntheticSpec(data_format, **values)


def _records(path: Path) -> list:
    import tensorflow as tf

    return [tf.train.Example.FromString(r.numpy()) for r in tf.data.TFRecordDataset(str(path))]


def _write_examples(path: Path, items: list[tuple[bytes, int]]) -> None:
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(path)) as writer:
        for encoded, label in items:
            feature = {
                images.IMAGE_KEY: tf.train.Feature(bytes_list=tf.train.BytesList(value=[encoded])),
                images.LABEL_KEY: tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
            }
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())


def _picture(value: int = 128) -> np.ndarray:
    return np.full((10, 12, 3), value, np.uint8)


def _collect(dataset) -> tuple[np.ndarray, np.ndarray]:
    pictures, labels = zip(*((x.numpy(), y.numpy()) for x, y in dataset), strict=True)
    return np.concatenate(pictures), np.concatenate(labels)


# --- the synthetic writer --------------------------------------------------------------------


@pytest.mark.slow  # seconds on CI: out of the quick loop
def test_synthetic_image_tfrecords_hold_real_jpegs_under_the_imagenet_keys(tmp_path):
    import tensorflow as tf

    assert main(["--format", "image-tfrecord", "--out", str(tmp_path), "--examples", "10", "--classes", "3",
                 "--image", "20x24x3", "--shards", "2"]) == 0  # fmt: skip
    shards = sorted(tmp_path.glob("*.tfrecord"))
    assert [s.name for s in shards] == ["train-00000-of-00002.tfrecord", "train-00001-of-00002.tfrecord"]
    examples = [e for s in shards for e in _records(s)]
    assert len(examples) == 10
    encoded = examples[0].features.feature[images.IMAGE_KEY].bytes_list.value[0]
    assert encoded[:2] == b"\xff\xd8" and bool(tf.io.is_jpeg(encoded))
    assert tf.io.decode_jpeg(encoded).shape == SHAPE
    labels = sorted(e.features.feature[images.LABEL_KEY].int64_list.value[0] for e in examples)
    assert set(labels) == {1, 2, 3}  # numbered from 1, as the ImageNet tooling writes them
    manifest = json.loads((tmp_path / images.MANIFEST_NAME).read_text())
    assert manifest["num_classes"] == 3 and manifest["label_base"] == 1
    assert [manifest["files"][s.name]["records"] for s in shards] == [5, 5]
    assert [manifest["files"][s.name]["bytes"] for s in shards] == [s.stat().st_size for s in shards]


def test_synthetic_image_dir_is_jpeg_by_default_png_on_request_with_sortable_class_names(tmp_path):
    import tensorflow as tf

    write_dataset(tmp_path / "jpeg", _spec("image-dir", classes=12))
    names = sorted(p.name for p in (tmp_path / "jpeg").iterdir())
    assert names == [f"class_{i:02d}" for i in range(12)]  # sorted names are label order
    picture = next((tmp_path / "jpeg" / "class_07").iterdir())
    assert picture.suffix == ".jpg" and tf.io.decode_jpeg(picture.read_bytes()).shape == SHAPE

    write_dataset(tmp_path / "png", _spec("image-dir", classes=3, encoding="png"))
    assert sorted(p.name for p in (tmp_path / "png").iterdir()) == ["class_0", "class_1", "class_2"]
    picture = next((tmp_path / "png" / "class_1").iterdir())
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert tf.io.decode_png(picture.read_bytes()).shape == SHAPE


def test_jpeg_round_trip_keeps_the_class_colour():
    import tensorflow as tf

    red = np.zeros((16, 16, 3), np.uint8)
    red[..., 0] = 220
    decoded = tf.io.decode_jpeg(encode_image(red, "jpeg")).numpy().astype(int)
    assert np.abs(decoded - red).max() <= 8


# --- discovery and counting ------------------------------------------------------------------


def test_formats_are_told_from_the_files(tmp_path):
    write_dataset(tmp_path / "dir", _spec("image-dir"))
    write_dataset(tmp_path / "shards", _spec("image-tfrecord"))
    write_dataset(tmp_path / "rows", SyntheticSpec("tfrecord", examples=4, features=3, classes=2))
    assert images.detect_format(tmp_path / "dir") == "image-dir"
    assert images.detect_format(tmp_path / "shards") == "image-tfrecord"
    assert images.detect_format(tmp_path / "rows") is None  # feature rows belong to trainer.datasets.tabular
    # ImageNet's own shard names carry no suffix.
    (tmp_path / "bare").mkdir()
    (tmp_path / "shards" / "train-00000-of-00001.tfrecord").rename(tmp_path / "bare" / "train-00000-of-01024")
    assert images.detect_format(tmp_path / "bare") == "image-tfrecord"


def test_class_directories_give_labels_in_sorted_name_order(tmp_path):
    for name, value in (("zebra", 30), ("apple", 120), ("mango", 220)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "a.png").write_bytes(encode_image(_picture(value), "png"))
    spec = images.discover(tmp_path, channel="train", data_format="image-dir")
    assert spec.class_names == ("apple", "mango", "zebra") and spec.num_classes == 3 and spec.examples == 3
    dataset = images.make_dataset(spec, training=False, image_size=8, per_replica_batch=3, batches=None)
    pictures, labels = _collect(dataset)
    means = {int(label): int(picture.mean()) for picture, label in zip(pictures, labels, strict=True)}
    assert means == {0: 120, 1: 220, 2: 30}


def _class_dirs(directory: Path, colours: dict[str, int]) -> Path:
    for name, value in colours.items():
        (directory / name).mkdir(parents=True)
        (directory / name / "a.png").write_bytes(encode_image(_picture(value), "png"))
    return directory


def test_a_validation_channel_is_labelled_by_the_training_channels_class_names(tmp_path):
    """A validation channel lacking a class (or with one class) numbers its folders as training does."""
    train = images.discover(_class_dirs(tmp_path / "train", {"cat": 10, "dog": 120, "fish": 220}), channel="train", data_format="image-dir")
    validation = images.discover(
        _class_dirs(tmp_path / "validation", {"cat": 10, "fish": 220}), channel="validation", data_format="image-dir",
        class_names=train.class_names,
    )  # fmt: skip
    assert validation.class_names == ("cat", "dog", "fish") and validation.num_classes == 3
    pictures, labels = _collect(images.make_dataset(validation, training=False, image_size=8, per_replica_batch=2, batches=None))
    assert {int(label): int(picture.mean()) for picture, label in zip(pictures, labels, strict=True)} == {0: 10, 2: 220}
    single = images.discover(
        _class_dirs(tmp_path / "one", {"fish": 220}), channel="validation", data_format="image-dir", class_names=train.class_names
    )
    assert single.labels == (2,) and single.num_classes == 3


@pytest.mark.parametrize("names", [("cat", "emu", "fish"), ("cat", "dog", "emu")], ids=["same-count", "extra"])
def test_a_validation_folder_that_is_not_a_training_class_is_refused_by_name(tmp_path, names):
    train = images.discover(_class_dirs(tmp_path / "train", {"cat": 10, "dog": 120, "fish": 220}), channel="train", data_format="image-dir")
    _class_dirs(tmp_path / "validation", dict.fromkeys(names, 50))
    with pytest.raises(DataError) as raised:
        images.discover(tmp_path / "validation", channel="validation", data_format="image-dir", class_names=train.class_names)
    assert str(raised.value) == (
        f"Image channel 'validation': class directory {tmp_path / 'validation' / 'emu'} is not a class of the training "
        "channel (cat, dog, fish); a validation picture must be in the directory of its class as the training channel names it."
    )


def test_shards_whose_manifest_names_their_classes_must_number_them_as_training_does(tmp_path):
    """The processing mode's shards name their classes: a channel written from another class list is refused."""
    shards = tmp_path / "validation"
    write_dataset(shards, _spec("image-tfrecord", classes=2, examples=4))
    manifest_path = shards / images.MANIFEST_NAME
    body = json.loads(manifest_path.read_text())
    for names, problem in (
        (["dog", "cat"], "numbers class 'dog' 0, the training channel 1"),
        (["cat", "emu"], "names class 'emu', which is not a class of the training channel"),
    ):
        manifest_path.write_text(json.dumps({**body, "class_names": names}))
        expected = rf"^Image channel 'validation': the manifest .* {problem} \(training classes: cat, dog, fish\)"
        with pytest.raises(DataError, match=expected):
            images.discover(shards, channel="validation", data_format="image-tfrecord", class_names=("cat", "dog", "fish"))
    manifest_path.write_text(json.dumps({**body, "class_names": ["cat", "dog"]}))
    spec = images.discover(shards, channel="validation", data_format="image-tfrecord", class_names=("cat", "dog", "fish"))
    assert spec.num_classes == 3 and spec.class_names == ("cat", "dog", "fish"), "a class it lacks is still a class"


def test_the_trainers_validation_channel_takes_the_training_classes(tmp_path):
    from trainer.contract.environment import load_environment
    from trainer.train import runner

    base = tmp_path / "ml"
    data = base / "input" / "data"
    _class_dirs(data / "train", {"cat": 10, "dog": 120, "fish": 220})
    _class_dirs(data / "validation", {"dog": 120, "fish": 220})
    env = load_environment({"SAGEMAKER_BASE_DIR": str(base)})
    config = TrainingConfig(model="resnet50", image_size=32)
    spec = images.from_config(data / "train", config, channel="train")
    validation = runner._discover_validation(env, config, spec)
    assert validation.labels == (1, 2) and validation.num_classes == 3


def test_image_examples_counts_the_training_shards_not_the_validation_shards(tmp_path):
    from dataclasses import replace

    from trainer.contract.environment import load_environment
    from trainer.train import runner

    data = tmp_path / "input" / "data"
    shards = _spec("image-tfrecord", examples=12, classes=2, image_shape=(8, 8, 3), features=8 * 8 * 3, shards=2)
    write_dataset(data / "train", shards)
    write_dataset(data / "validation", replace(shards, examples=5, seed=9))
    for channel in ("train", "validation"):
        (data / channel / "manifest.json").unlink()  # counts from image_examples, else the record headers
    env = load_environment({"SAGEMAKER_BASE_DIR": str(tmp_path)})
    config = TrainingConfig(model="resnet50", image_size=8, num_classes=2, image_examples=12)
    spec = images.from_config(data / "train", config, channel="train")
    assert spec.examples == 12
    assert runner._discover_validation(env, config, spec).examples == 5


def test_a_training_epoch_reads_every_picture_once_however_the_threads_finish(tmp_path):
    # Out-of-order decoding must not let the next repetition's fastest pictures fill the epoch:
    # one would be read twice, another (perhaps a corrupt one) never. One class per picture.
    count = 24
    for index in range(count):
        (tmp_path / f"c{index:02d}").mkdir()
        picture = _picture(index * 10) if index else np.full((1500, 1500, 3), 7, np.uint8)  # one slow decode
        (tmp_path / f"c{index:02d}" / "a.png").write_bytes(encode_image(picture, "png"))
    spec = images.discover(tmp_path, channel="train", data_format="image-dir")
    for epoch in (1, 2):
        dataset = images.make_dataset(spec, training=True, image_size=8, per_replica_batch=4, batches=6, epoch=epoch)
        assert sorted(_collect(dataset)[1].tolist()) == list(range(count))


def test_image_dir_layout_problems_are_named(tmp_path):
    write_dataset(tmp_path, _spec("image-dir"))
    (tmp_path / "stray.jpg").write_bytes(b"x")
    with pytest.raises(DataError, match="stray.jpg is not directly inside a class sub-directory"):
        images.discover(tmp_path, channel="train", data_format="image-dir")


def test_shard_counts_come_from_the_manifest_the_hyperparameter_or_the_record_headers(tmp_path):
    write_dataset(tmp_path, _spec("image-tfrecord", examples=25, shards=3, label_base=0))
    spec = images.discover(tmp_path, channel="train", data_format="image-tfrecord")
    assert spec.counts == (9, 8, 8) and spec.examples == 25 and spec.num_classes == 3 and spec.label_base == 0
    assert images.steps_per_epoch(spec, 8) == 3

    (tmp_path / images.MANIFEST_NAME).unlink()
    with pytest.raises(DataError, match="set the num_classes hyperparameter"):
        images.discover(tmp_path, channel="train", data_format="image-tfrecord")
    walked = images.discover(tmp_path, channel="train", data_format="image-tfrecord", num_classes=3)
    assert walked.counts == (9, 8, 8) and walked.label_base == images.DEFAULT_LABEL_BASE
    given = images.discover(tmp_path, channel="train", data_format="image-tfrecord", num_classes=3, examples=25)
    assert given.counts == () and given.examples == 25


def test_a_shard_cut_inside_a_record_header_is_named_with_its_byte_offset(tmp_path):
    write_dataset(tmp_path, _spec("image-tfrecord", examples=6))
    shard = next(tmp_path.glob("*.tfrecord"))
    whole = shard.read_bytes()
    (length,) = np.frombuffer(whole[:8], "<u8")
    second = 12 + int(length) + 4
    shard.write_bytes(whole[: second + 5])  # 5 bytes into the second record's header
    with pytest.raises(DataError, match=rf"record 1 at byte {second} is cut inside its 12-byte header"):
        images.count_records(shard)
    # With a manifest, the size no longer matches and a stat says so before any record is read.
    with pytest.raises(DataError, match="the shard was truncated or replaced"):
        images.discover(tmp_path, channel="train", data_format="image-tfrecord")


# --- the pipeline ----------------------------------------------------------------------------


@pytest.mark.slow
def test_shards_read_back_every_label_and_shape(tmp_path):
    write_dataset(tmp_path, _spec("image-tfrecord", examples=13, shards=2))
    spec = images.discover(tmp_path, channel="train", data_format="image-tfrecord")
    written = [
        e.features.feature[images.LABEL_KEY].int64_list.value[0] - 1
        for shard in sorted(tmp_path.glob("*.tfrecord"))
        for e in _records(shard)
    ]
    pictures, labels = _collect(images.make_dataset(spec, training=False, image_size=16, per_replica_batch=4, batches=None))
    assert pictures.shape == (13, 16, 16, 3) and pictures.dtype == np.uint8
    assert sorted(labels.tolist()) == sorted(written)  # evaluation: every record once, last batch kept
    batch, label = next(iter(images.make_dataset(spec, training=True, image_size=16, per_replica_batch=4, batches=2)))
    assert batch.shape == (4, 16, 16, 3) and label.dtype.name == "int32"


def test_pictures_keep_their_class_colour_through_the_pipeline(tmp_path):
    write_dataset(tmp_path, _spec("image-dir", examples=30, classes=3))
    spec = images.discover(tmp_path, channel="train", data_format="image-dir")
    pictures, labels = _collect(images.make_dataset(spec, training=True, image_size=16, per_replica_batch=10, batches=3))
    colours = pictures.reshape(len(labels), -1, 3).mean(axis=1)
    for label in range(3):
        own = colours[labels == label]
        assert np.ptp(own, axis=0).max() < 40  # one colour per class, crops and flips notwithstanding


def test_augmentation_only_in_training_and_seeded(tmp_path):
    # One asymmetric picture per class, so crops and flips show.
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        gradient = np.tile(np.linspace(0, 255, 48, dtype=np.uint8)[None, :, None], (32, 1, 3))
        (tmp_path / name / "x.png").write_bytes(encode_image(gradient, "png"))
    spec = images.discover(tmp_path, channel="train", data_format="image-dir")

    def pictures(training: bool, epoch: int) -> np.ndarray:
        return _collect(images.make_dataset(
            spec, training=training, image_size=16, per_replica_batch=2, batches=4, seed=5, epoch=epoch, ordered=True
        ))[0]  # fmt: skip

    evaluation = pictures(False, 1)
    assert evaluation.shape == (2, 16, 16, 3)
    np.testing.assert_array_equal(evaluation, pictures(False, 2))
    np.testing.assert_array_equal(evaluation[0], evaluation[1])  # same picture, same centre crop
    assert (np.diff(evaluation[0, 8, :, 0].astype(int)) >= 0).all()  # not flipped
    first = pictures(True, 1)
    # A resumed epoch replays the same crops. In order: out of order (the default), which 8 of the
    # endless repeated pictures finish first depends on thread timing, not on the seed.
    assert sorted(p.tobytes() for p in first) == sorted(p.tobytes() for p in pictures(True, 1))
    assert sorted(p.tobytes() for p in first) != sorted(p.tobytes() for p in pictures(True, 2))
    assert len({picture.tobytes() for picture in first}) > 1  # crops differ from picture to picture


def test_a_resumed_epoch_skips_the_batches_its_steps_took_and_keeps_the_rest(tmp_path):
    """A run resumed after a stop mid-epoch leaves out the batches the applied steps took; the rest are
    exactly the epoch's own (same pictures, same crops: a crop is seeded by the picture's place)."""
    write_dataset(tmp_path, _spec("image-dir", examples=24, classes=3))
    spec = images.discover(tmp_path, channel="train", data_format="image-dir")
    assert_a_resumed_epoch_keeps_the_rest(spec, 2, 5, image_size=16, per_replica_batch=4, seed=5, epoch=2)


def test_workers_read_disjoint_shares(tmp_path):
    write_dataset(tmp_path / "dir", _spec("image-dir", examples=9))
    write_dataset(tmp_path / "shards", _spec("image-tfrecord", examples=9, shards=1))
    for data_format, directory in (("image-dir", tmp_path / "dir"), ("image-tfrecord", tmp_path / "shards")):
        spec = images.discover(directory, channel="train", data_format=data_format)
        shares = [
            _collect(images.make_dataset(
                spec, training=False, image_size=8, per_replica_batch=2, batches=None, pipeline_index=i, num_pipelines=2
            ))[0]  # fmt: skip
            for i in range(2)
        ]
        assert [len(s) for s in shares] == [5, 4], data_format


def test_a_corrupt_jpeg_in_a_class_directory_fails_and_is_named(tmp_path):
    import tensorflow as tf

    write_dataset(tmp_path, _spec("image-dir", examples=12))
    victim = sorted((tmp_path / "class_1").iterdir())[1]
    victim.write_bytes(victim.read_bytes()[:40])
    spec = images.discover(tmp_path, channel="train", data_format="image-dir")
    with pytest.raises(tf.errors.OpError):
        _collect(images.make_dataset(spec, training=True, image_size=8, per_replica_batch=4, batches=6))
    assert images.locate_problem(spec) == (
        f"Cannot decode image {victim}: not a readable JPEG or PNG file (corrupt or truncated)."
    )


@pytest.mark.slow
def test_a_corrupt_image_in_a_shard_is_named_by_file_and_record(tmp_path):
    import tensorflow as tf

    good = encode_image(_picture(), "jpeg")
    shard = tmp_path / "train-00000-of-00001"
    _write_examples(shard, [(good, 1), (good, 2), (good[:30], 1), (good, 2)])
    spec = images.discover(tmp_path, channel="train", data_format="image-tfrecord", num_classes=2)
    assert spec.counts == (4,)
    with pytest.raises(tf.errors.OpError):
        _collect(images.make_dataset(spec, training=False, image_size=8, per_replica_batch=2, batches=None))
    problem = images.locate_problem(spec)
    assert problem is not None and problem.startswith(f"Cannot read record 2 of TFRecord file {shard}:")


def test_a_label_outside_the_classes_is_named_by_file_and_record(tmp_path):
    import tensorflow as tf

    good = encode_image(_picture(), "jpeg")
    shard = tmp_path / "part.tfrecord"
    _write_examples(shard, [(good, 1), (good, 0), (good, 2)])  # 0 is below the ImageNet base of 1
    spec = images.discover(tmp_path, channel="train", data_format="image-tfrecord", num_classes=2)
    with pytest.raises(tf.errors.InvalidArgumentError) as caught:
        _collect(images.make_dataset(spec, training=False, image_size=8, per_replica_batch=3, batches=None))
    assert str(shard) in caught.value.message and "record] [1]" in caught.value.message.replace("\n", " ")
    assert "image_label_base" in caught.value.message
    based = images.discover(tmp_path, channel="train", data_format="image-tfrecord", num_classes=3, label_base=0)
    assert _collect(images.make_dataset(based, training=False, image_size=8, per_replica_batch=3, batches=None))[
        1
    ].tolist() == [1, 0, 2]


# --- configuration, model, FLOPs -------------------------------------------------------------


def test_resnet50_and_image_hyperparameters():
    config = TrainingConfig.from_hyperparameters(
        {"model": "resnet50", "image_size": "32", "data_format": "image-dir", "image_examples": "1000",
         "image_label_base": "0"}
    )  # fmt: skip
    assert (config.model, config.image_size, config.image_examples, config.image_label_base) == (
        "resnet50", 32, 1000, 0
    )  # fmt: skip
    assert TrainingConfig.from_hyperparameters({}).image_size == 224
    with pytest.raises(ConfigError, match="'image_size' must be >= 32"):
        TrainingConfig.from_hyperparameters({"model": "resnet50", "image_size": "16"})


def test_resnet50_training_flops_are_the_published_figure():
    import keras

    from benchmarks import _flops
    from trainer.train.models import build_model

    model = build_model(TrainingConfig(model="resnet50", image_size=224), 0, 1000)
    assert 25.5e6 < sum(int(np.prod(v.shape)) for v in model.trainable_variables) < 25.6e6
    # ResNet-50 v1 (Keras: stride 2 in the first 1x1 of a stage) is ~3.9 GMACs per 224x224 image.
    forward = _flops.forward_flops_per_example(model)
    assert 7.6e9 < forward < 7.9e9
    assert _flops.training_flops_per_example(model) == 3 * forward
    keras.backend.clear_session()


@pytest.mark.slow
def test_resnet50_trains_a_step_on_tiny_images_on_cpu_in_mixed_precision_with_float32_logits(tmp_path):
    # float32 ResNet-50 steps: the trainer runs below (through the entrypoint). Here the model under
    # the mixed policy: uint8 in, float32 logits out, a finite loss and moving weights.
    import keras
    import tensorflow as tf

    from trainer.train.models import build_model

    write_dataset(tmp_path, _spec("image-tfrecord", examples=8, image_shape=(40, 40, 3), features=40 * 40 * 3))
    spec = images.discover(tmp_path, channel="train", data_format="image-tfrecord")
    batch, labels = next(iter(images.make_dataset(spec, training=True, image_size=32, per_replica_batch=4, batches=1)))
    for policy in ("mixed_bfloat16",):
        keras.mixed_precision.set_dtype_policy(policy)
        try:
            model = build_model(TrainingConfig(model="resnet50", image_size=32), 0, spec.num_classes)
            assert model.input.dtype == "uint8" and model.output.dtype == "float32"
            optimizer = keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)
            before = [v.numpy().copy() for v in model.trainable_variables[:3]]

            @tf.function(jit_compile=False)
            def step():
                with tf.GradientTape() as tape:
                    logits = model(batch, training=True)
                    loss = tf.reduce_mean(
                        tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
                    )
                grads = tape.gradient(loss, model.trainable_variables)
                optimizer.apply_gradients(zip(grads, model.trainable_variables))
                return loss, logits

            loss, logits = step()
            assert logits.dtype == tf.float32 and logits.shape == (4, 3) and np.isfinite(loss.numpy())
            assert any(not np.array_equal(b, v.numpy()) for b, v in zip(before, model.trainable_variables[:3]))
        finally:
            keras.mixed_precision.set_dtype_policy("float32")
            keras.backend.clear_session()


def test_the_hyperparameters_pick_the_image_reader_and_failures_name_the_picture(tmp_path):
    import tensorflow as tf

    write_dataset(tmp_path / "pictures", _spec("image-dir", examples=6))
    write_dataset(tmp_path / "rows", SyntheticSpec("csv", examples=4, features=3, classes=2))
    auto = TrainingConfig(model="resnet50", image_size=32)
    spec = images.from_config(tmp_path / "pictures", auto, channel="train")
    assert spec is not None and spec.data_format == "image-dir" and spec.examples == 6
    assert images.from_config(tmp_path / "rows", TrainingConfig(), channel="train") is None
    assert images.from_config(tmp_path / "absent", auto, channel="train") is None
    with pytest.raises(DataError, match="which model=mlp does not read"):
        images.from_config(tmp_path / "pictures", TrainingConfig(), channel="train")
    with pytest.raises(DataError, match="model=resnet50 trains on images, but channel 'train'"):
        images.from_config(tmp_path / "rows", auto, channel="train")

    victim = sorted((tmp_path / "pictures" / "class_2").iterdir())[0]
    victim.write_bytes(b"\xff\xd8 not really a jpeg")
    with pytest.raises(tf.errors.OpError) as caught:
        _collect(images.make_dataset(spec, training=True, image_size=8, per_replica_batch=2, batches=3))
    error = images.explain_failure(spec, caught.value, epoch=2, step=1)
    assert str(error) == (
        f"Reading channel 'train' ({tmp_path / 'pictures'}) failed in epoch 2 at step 1: Cannot decode image {victim}: "
        "not a readable JPEG or PNG file (corrupt or truncated)."
    )


# --- through the entrypoint ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("data_format", ["image-tfrecord", "image-dir"])
def test_the_trainer_trains_resnet50_on_an_image_channel_and_evaluates_its_validation_channel(tmp_path, data_format):
    from dataclasses import replace

    from tests.trainer.helpers import run_trainer, write_job
    from trainer.datasets.synthetic import write_dataset

    data = _spec(data_format, examples=16, classes=2, image_shape=(36, 36, 3), features=36 * 36 * 3, shards=2)
    hp = {"model": "resnet50", "image_size": 32, "epochs": 2, "batch_size": 8, "optimizer": "sgd",
          "learning_rate": 0.01}  # fmt: skip
    base = write_job(tmp_path, hp, data)
    write_dataset(base / "input" / "data" / "validation", replace(data, examples=12, seed=99))
    run = run_trainer(base)
    assert run.returncode == 0, run.explain()
    assert run.model_path.exists()
    (event,) = run.events("data")
    assert (event["format"], event["examples"], event["classes"]) == (data_format, "16", "2")
    rows = run.metrics()
    assert len(rows) == 2 and all("val_loss" in r and "val_accuracy" in r for r in rows), rows
    assert (base / "model" / "last.keras").exists(), "the last epoch's model is kept beside the best (model.keras)"
    resolved = json.loads((base / "model" / "trainer_config.json").read_text())
    assert resolved["model"]["selected_by"] == "best_val_loss"
    if data_format == "image-dir":
        assert resolved["class_names"] == sorted(p.name for p in (base / "input" / "data" / "train").iterdir() if p.is_dir())
    (event,) = run.events("validation-data")
    assert (event["channel"], event["examples"]) == ("validation", "12")


@pytest.mark.slow
def test_the_trainer_fails_naming_a_corrupt_jpeg(tmp_path):
    from tests.trainer.helpers import run_trainer, write_job

    data = _spec("image-dir", examples=16, classes=2, image_shape=(36, 36, 3), features=36 * 36 * 3)
    base = write_job(tmp_path, {"model": "resnet50", "image_size": 32, "epochs": 1, "batch_size": 8}, data)
    victim = sorted((base / "input" / "data" / "train" / "class_1").iterdir())[2]
    victim.write_bytes(victim.read_bytes()[:100])
    run = run_trainer(base)
    assert run.returncode == 5, run.explain()
    assert f"Cannot decode image {victim}" in (run.failure or ""), run.failure
    assert not run.model_path.exists()


def test_a_validation_folder_that_is_not_a_training_class_fails_the_job_in_one_line(tmp_path):
    from dataclasses import replace

    from tests.trainer.helpers import run_trainer, write_job

    data = _spec("image-dir", examples=16, classes=2, image_shape=(36, 36, 3), features=36 * 36 * 3)
    base = write_job(tmp_path, {"model": "resnet50", "image_size": 32, "epochs": 1, "batch_size": 8}, data)
    write_dataset(base / "input" / "data" / "validation", replace(data, examples=8))
    validation = base / "input" / "data" / "validation"
    (validation / "class_1").rename(validation / "class_9")
    run = run_trainer(base)
    assert run.returncode == 5, run.explain()
    assert run.failure == (
        f"Image channel 'validation': class directory {validation / 'class_9'} is not a class of the training channel "
        "(class_0, class_1); a validation picture must be in the directory of its class as the training channel names it.\n"
    )
    assert not run.model_path.exists()


def test_a_validation_channel_of_another_kind_is_refused(tmp_path):
    from tests.trainer.helpers import run_trainer, write_job
    from trainer.datasets.synthetic import SyntheticSpec, write_dataset

    data = _spec("image-dir", examples=16, classes=2, image_shape=(36, 36, 3), features=36 * 36 * 3)
    base = write_job(tmp_path, {"model": "resnet50", "image_size": 32, "epochs": 1, "batch_size": 8}, data)
    write_dataset(base / "input" / "data" / "validation", SyntheticSpec("csv", examples=20, features=4, classes=2))
    run = run_trainer(base)
    assert run.returncode == 5, run.explain()
    assert "model=resnet50 trains on images, but channel 'validation'" in (run.failure or ""), run.failure


# --- epochs: one pass over each worker's pictures, shards split only when balanced -------------


def _numbered_shards(directory: Path, sizes: tuple[int, ...], *, raw: bool = False) -> images.ImageDataset:
    """Shards of ``sizes`` records where every picture is its own class (label = picture number)."""
    import tensorflow as tf

    from trainer.process.records import raw_image_example

    directory.mkdir(parents=True, exist_ok=True)
    encoded = encode_image(_picture(), "png")
    first = 0
    for index, size in enumerate(sizes):
        path = directory / f"train-{index:05d}-of-{len(sizes):05d}.tfrecord"
        if raw:
            with tf.io.TFRecordWriter(str(path)) as writer:
                for label in range(first, first + size):
                    writer.write(raw_image_example(np.zeros((8, 8, 3), np.uint8), label, raw_key=images.RAW_KEY,
                                                   shape_key=images.SHAPE_KEY, label_key=images.LABEL_KEY))  # fmt: skip
        else:
            _write_examples(path, [(encoded, label) for label in range(first, first + size)])
        first += size
    images.write_manifest(directory, num_classes=first, label_base=0)
    return images.discover(directory, channel="train", data_format="image-tfrecord")


def _epoch_labels(spec, *, epoch: int, pipelines: int = 1, global_batch: int = 8, shuffle_buffer: int = 10_000):
    """The labels each pipeline trains on in ``epoch``, as the trainer cuts it (:func:`images.steps_per_epoch`)."""
    steps = images.steps_per_epoch(spec, global_batch, pipelines)
    return [
        _collect(images.make_dataset(
            spec, training=True, image_size=8, per_replica_batch=global_batch // pipelines, batches=steps,
            pipeline_index=index, num_pipelines=pipelines, shuffle_buffer=shuffle_buffer, seed=1, epoch=epoch,
        ))[1].tolist()
        for index in range(pipelines)
    ]  # fmt: skip


@pytest.mark.parametrize("raw", [False, True], ids=["encoded", "raw"])
def test_one_workers_epoch_is_every_picture_once_in_a_new_order(tmp_path, raw):
    # 3 x 40 pictures and a 10,000-picture buffer: repeat-then-shuffle drew 120 with replacement (75 distinct).
    spec = _numbered_shards(tmp_path, (40, 40, 40), raw=raw)
    (first,) = _epoch_labels(spec, epoch=1)
    (second,) = _epoch_labels(spec, epoch=2)
    assert sorted(first) == sorted(second) == list(range(120))
    assert first != second


def test_two_workers_epoch_covers_every_picture_and_repeats_only_the_top_up(tmp_path):
    # Shards of 34, 30, 30 and 22 split by file into 56 and 60 pictures (93% balanced): both
    # workers run 15 steps of 4, so the first tops up 4 pictures from a second pass of its own.
    spec = _numbered_shards(tmp_path, (34, 30, 30, 22))
    plans = images.plan_shards(spec, 2)
    assert [plan.by_file for plan in plans] == [True, True]
    assert sorted(plan.examples for plan in plans) == [56, 60]
    small, large = sorted(_epoch_labels(spec, epoch=1, pipelines=2), key=lambda labels: len(set(labels)))
    assert len(small) == len(large) == 60
    assert set(small) | set(large) == set(range(116)) and not set(small) & set(large)
    assert sorted(large) == sorted(set(large))
    repeated = [label for label in set(small) if small.count(label) > 1]
    assert len(set(small)) == 56 and len(repeated) == 4 and all(small.count(label) == 2 for label in repeated)


def test_uneven_shards_are_split_by_record_and_the_sharding_line_says_so(tmp_path, capsys):
    from types import SimpleNamespace

    from trainer.contract.environment import Cluster
    from trainer.train import runner

    # 3 equal shards on 2 workers: by file one worker would hold 80 pictures and the other 40.
    spec = _numbered_shards(tmp_path, (40, 40, 40))
    plans = images.plan_shards(spec, 2)
    assert [(plan.by_file, plan.examples) for plan in plans] == [(False, 60), (False, 60)]
    first, second = _epoch_labels(spec, epoch=1, pipelines=2)
    assert sorted(first + second) == list(range(120))

    config = TrainingConfig(model="resnet50", image_size=8, batch_size=8)
    cluster = Cluster(hosts=("algo-1", "algo-2"), current_host="algo-1", worker_port=2222, source="test")
    batching = runner._plan_batching(config, spec, SimpleNamespace(num_replicas_in_sync=2), cluster)
    assert batching.steps == 15
    assert "[trainer] sharding by_file=False steps_per_epoch=15" in capsys.readouterr().out

    # Four shards balance (60 and 60): each worker reads its own two.
    even = images.plan_shards(_numbered_shards(tmp_path / "even", (30, 30, 30, 30)), 2)
    assert [(plan.by_file, len(plan.files), plan.examples) for plan in even] == [(True, 2, 60), (True, 2, 60)]
