"""Image classification datasets: discovery, cheap counts, and the tf.data pipeline.

Two layouts, the ones people already have:

- ``image-tfrecord``: TFRecord shards of ``tf.train.Example`` with the encoded image (JPEG or
  PNG) under ``image/encoded`` and the class under ``image/class/label`` (int64), the keys the
  TensorFlow/TPU ImageNet tooling writes (``imagenet_to_gcs.py``). That tooling numbers classes
  from 1 (0 was "background"); its readers subtract 1. ``label_base`` says where the data's
  numbering starts (the manifest's, else the ``image_label_base`` hyperparameter, else 1).
  Shards may lack a suffix (``train-00000-of-01024``): the first record tells.
- ``image-dir``: one sub-directory per class holding ``.jpg``/``.jpeg``/``.png`` files; the
  sorted sub-directory names are the classes, label ``i`` is the ``i``-th name (what Keras'
  ``image_dataset_from_directory`` does).

Nothing reads every image before training. Counts come from the file listing (``image-dir``),
from ``manifest.json`` beside the shards (written by ``trainer.synthetic``; per-shard records
and bytes, so a shard cut short or replaced is caught by a ``stat``), from the ``image_examples``
hyperparameter, or, failing those, from a walk over the record headers that seeks past every
image (12 bytes read per record) and fails on a shard cut inside a record with its byte offset.

A picture that cannot be decoded fails the pipeline; the loop then calls
:func:`locate_problem`, which decodes the worker's shard again (in parallel, errors kept aside)
and names the file, or the shard and record, that is broken. A bad label in a shard is named by
file and record directly, by an assertion in the pipeline.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.config import TrainingConfig
from trainer.errors import DataError
from trainer.manifest import STATISTICS_NAME

IMAGE_KEY = "image/encoded"
LABEL_KEY = "image/class/label"
IMAGE_FORMATS = ("image-tfrecord", "image-dir")
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
TFRECORD_SUFFIXES = (".tfrecord", ".tfrecords", ".tfr")
MANIFEST_NAME = "manifest.json"
# The ImageNet tooling's labels run 1..1000; readers subtract 1.
DEFAULT_LABEL_BASE = 1
# Training crops (Inception-style random-resized crop, as the reference ResNet-50 pipelines do).
CROP_AREA = (0.08, 1.0)
CROP_ASPECT = (3.0 / 4.0, 4.0 / 3.0)
# Evaluation: the central 87.5% of the shorter side (224 of 256), resized.
CENTER_CROP_FRACTION = 0.875
_RECORD_HEADER = 12  # uint64 length + uint32 masked CRC of the length
_RECORD_FOOTER = 4  # uint32 masked CRC of the data


@dataclass(frozen=True)
class ImageDataset:
    """An image channel as discovered and counted, without reading the images.

    Attributes:
        channel: Channel name, e.g. ``train``.
        directory: The channel's directory.
        data_format: ``image-tfrecord`` or ``image-dir``.
        files: Shards (``image-tfrecord``) or image files (``image-dir``), sorted.
        labels: ``image-dir``: the label of each file (0-based); empty for shards.
        counts: ``image-tfrecord``: records per shard when known (manifest or header walk);
            empty when only the total is known (``image_examples``).
        examples: Images in the channel.
        num_classes: Classes the model predicts.
        class_names: ``image-dir``: the class sub-directories in label order.
        label_base: ``image-tfrecord``: the label value of class 0 (subtracted when reading).
    """

    channel: str
    directory: Path
    data_format: str
    files: tuple[str, ...]
    labels: tuple[int, ...]
    counts: tuple[int, ...]
    examples: int
    num_classes: int
    class_names: tuple[str, ...] = ()
    label_base: int = 0

    @property
    def num_features(self) -> int:
        """0: pictures are not feature rows (lets the trainer's shared log lines and config read it)."""
        return 0


def _data_files(directory: Path) -> list[Path]:
    return sorted(
        p
        for p in directory.rglob("*")
        if p.is_file()
        and not any(part.startswith(".") for part in p.relative_to(directory).parts)
        and p.relative_to(directory).as_posix() not in (MANIFEST_NAME, STATISTICS_NAME)
    )


def first_record(path: Path) -> bytes | None:
    """The first TFRecord record of ``path`` (pure Python, no CRC check), or None if it has none."""
    with path.open("rb") as handle:
        header = handle.read(_RECORD_HEADER)
        if len(header) < _RECORD_HEADER:
            return None
        (length,) = struct.unpack("<Q", header[:8])
        if length > 1 << 31:
            return None
        return handle.read(length)


def detect_format(directory: Path) -> str | None:
    """``image-dir``, ``image-tfrecord``, or None when the channel holds no image dataset.

    Pure Python and cheap (a listing and, for shards, one record of the first shard), so the
    channel discovery can call it before TensorFlow starts: every file an image under a class
    sub-directory is ``image-dir``; shards (``*.tfrecord`` or no suffix) whose first record
    carries ``image/encoded`` are ``image-tfrecord``.
    """
    files = _data_files(directory)
    if not files:
        return None
    if all(p.suffix.lower() in IMAGE_SUFFIXES for p in files):
        return "image-dir"
    if all(p.suffix.lower() in TFRECORD_SUFFIXES or not p.suffix or p.suffix[1:].isdigit() for p in files):
        record = first_record(files[0])
        if record is not None and IMAGE_KEY.encode() in record:
            return "image-tfrecord"
    return None


def count_records(path: Path) -> int:
    """Records in one TFRecord shard, by walking the record headers (seeks past the images).

    Raises:
        DataError: the shard ends inside a record header or record, naming the byte offset.
            (TensorFlow's reader takes a cut header for the end of the file and drops the rest.)
    """
    size = path.stat().st_size
    count = 0
    offset = 0
    with path.open("rb") as handle:
        while offset < size:
            header = handle.read(_RECORD_HEADER)
            if len(header) < _RECORD_HEADER:
                raise DataError(
                    f"Corrupt TFRecord file {path}: record {count} at byte {offset} is cut inside its 12-byte header "
                    f"(the file ends after {len(header)} bytes of it); the shard is truncated."
                )
            (length,) = struct.unpack("<Q", header[:8])
            end = offset + _RECORD_HEADER + length + _RECORD_FOOTER
            if end > size:
                raise DataError(
                    f"Corrupt TFRecord file {path}: record {count} at byte {offset} declares {length} bytes but the "
                    f"file ends at byte {size}; the shard is truncated or not a TFRecord file."
                )
            handle.seek(end)
            offset = end
            count += 1
    return count


def write_manifest(directory: Path, *, num_classes: int, label_base: int) -> Path:
    """Writes ``manifest.json`` for the shards in ``directory``: records and bytes per shard."""
    shards = {p.relative_to(directory).as_posix(): p for p in _data_files(directory)}
    body = {
        "format": "image-tfrecord",
        "num_classes": num_classes,
        "label_base": label_base,
        "files": {name: {"records": count_records(p), "bytes": p.stat().st_size} for name, p in shards.items()},
    }
    path = directory / MANIFEST_NAME
    path.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def _read_manifest(directory: Path, shards: Sequence[Path]) -> dict[str, Any] | None:
    path = directory / MANIFEST_NAME
    if not path.is_file():
        return None
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
        entries = body["files"]
    except (ValueError, KeyError, TypeError) as err:
        raise DataError(f"The manifest {path} is not valid ({err}); fix or remove it.") from err
    names = {p.relative_to(directory).as_posix(): p for p in shards}
    if set(entries) != set(names):
        missing = sorted(set(entries) - set(names))
        extra = sorted(set(names) - set(entries))
        raise DataError(
            f"The manifest {path} does not match the shards in {directory}: "
            f"listed but absent {missing[:3]}, present but not listed {extra[:3]}. Rewrite or remove the manifest."
        )
    for name, shard in names.items():
        recorded = int(entries[name]["bytes"])
        if shard.stat().st_size != recorded:
            raise DataError(
                f"TFRecord file {shard} has {shard.stat().st_size} bytes but the manifest {path} records {recorded}: "
                "the shard was truncated or replaced after the manifest was written."
            )
    return body


def discover(
    directory: Path,
    *,
    channel: str,
    data_format: str,
    num_classes: int = 0,
    examples: int | None = None,
    label_base: int | None = None,
) -> ImageDataset:
    """Lists and counts an image channel without decoding any image; pure Python.

    Args:
        directory: The channel directory.
        channel: Its name, for messages.
        data_format: ``image-dir`` or ``image-tfrecord`` (see :func:`detect_format`).
        num_classes: The ``num_classes`` hyperparameter (0: from the class directories or the
            manifest).
        examples: The ``image_examples`` hyperparameter: total images in the shards, when there
            is no manifest (skips the header walk).
        label_base: The ``image_label_base`` hyperparameter (None: the manifest's, else 1).

    Raises:
        DataError: naming the file or directory that does not fit the layout.
    """
    files = _data_files(directory)
    if not files:
        raise DataError(f"Input channel {channel!r} is empty: {directory} holds no files.")
    if data_format == "image-dir":
        return _discover_dir(directory, files, channel=channel, num_classes=num_classes)
    if data_format != "image-tfrecord":
        raise ValueError(f"not an image format: {data_format!r}")
    manifest = _read_manifest(directory, files)
    if manifest is not None:
        counts = tuple(int(manifest["files"][p.relative_to(directory).as_posix()]["records"]) for p in files)
        total = sum(counts)
    elif examples is not None:
        counts, total = (), examples
    else:
        counts = tuple(count_records(p) for p in files)
        total = sum(counts)
    classes = num_classes or int((manifest or {}).get("num_classes", 0))
    if classes < 2:
        raise DataError(
            f"Input channel {channel!r} holds image TFRecords without a manifest naming the classes: set the "
            "num_classes hyperparameter (labels are not scanned before training)."
        )
    base = label_base if label_base is not None else int((manifest or {}).get("label_base", DEFAULT_LABEL_BASE))
    if total == 0:
        raise DataError(f"Input channel {channel!r} at {directory} holds {len(files)} shard(s) but no records.")
    return ImageDataset(
        channel=channel,
        directory=directory,
        data_format=data_format,
        files=tuple(str(p) for p in files),
        labels=(),
        counts=counts,
        examples=total,
        num_classes=classes,
        label_base=base,
    )


def _discover_dir(directory: Path, files: list[Path], *, channel: str, num_classes: int) -> ImageDataset:
    stray = [p for p in files if len(p.relative_to(directory).parts) != 2]
    if stray:
        raise DataError(
            f"Image channel {channel!r}: {stray[0]} is not directly inside a class sub-directory of {directory} "
            "(expected <channel>/<class name>/<image>)."
        )
    odd = [p for p in files if p.suffix.lower() not in IMAGE_SUFFIXES]
    if odd:
        raise DataError(f"Image channel {channel!r}: {odd[0]} is not a .jpg, .jpeg or .png file.")
    class_names = tuple(sorted({p.parent.name for p in files}))
    if num_classes and num_classes < len(class_names):
        raise DataError(
            f"Image channel {channel!r} has {len(class_names)} class directories but num_classes={num_classes}."
        )
    if max(num_classes, len(class_names)) < 2:
        raise DataError(
            f"Image channel {channel!r} has one class directory ({class_names[0]}): a classifier needs at least 2."
        )
    index = {name: i for i, name in enumerate(class_names)}
    return ImageDataset(
        channel=channel,
        directory=directory,
        data_format="image-dir",
        files=tuple(str(p) for p in files),
        labels=tuple(index[p.parent.name] for p in files),
        counts=(),
        examples=len(files),
        num_classes=num_classes or len(class_names),
        class_names=class_names,
    )


def from_config(directory: Path, config: TrainingConfig, *, channel: str) -> ImageDataset | None:
    """The channel as an image dataset if it is one, per the hyperparameters; pure Python.

    ``data_format`` ``image-tfrecord``/``image-dir`` says so; ``auto`` asks
    :func:`detect_format`. Returns None for feature-row channels (``trainer.data`` reads those)
    and for a missing directory (``trainer.data.discover_channel`` names it).

    Raises:
        DataError: ``model=resnet50`` on a channel that holds no image dataset, or a layout
            problem (see :func:`discover`).
    """
    if not directory.is_dir():
        return None
    if config.data_format in IMAGE_FORMATS:
        data_format: str | None = config.data_format
    elif config.data_format == "auto":
        data_format = detect_format(directory)
    else:
        data_format = None
    if data_format is None:
        if config.model == "resnet50":
            raise DataError(
                f"model=resnet50 trains on images, but channel {channel!r} ({directory}) holds neither image "
                "TFRecord shards (image/encoded, image/class/label) nor one sub-directory of .jpg/.png files per "
                "class; set data_format=image-tfrecord or image-dir if it does."
            )
        return None
    if config.model != "resnet50":
        raise DataError(
            f"Channel {channel!r} ({directory}) holds an image dataset ({data_format}), which model={config.model} "
            "does not read (it takes feature rows); use model=resnet50."
        )
    return discover(
        directory,
        channel=channel,
        data_format=data_format,
        num_classes=config.num_classes,
        examples=config.image_examples,
        label_base=config.image_label_base,
    )


def explain_failure(
    spec: ImageDataset, err: Exception, *, epoch: int, step: int, pipeline_index: int = 0, num_pipelines: int = 1
) -> DataError:
    """The DataError for a failed image pipeline: the broken picture named when one is found."""
    message = " ".join(str(getattr(err, "message", err)).split())[:400]
    if "Bad label in" in message:
        return DataError(f"Reading channel {spec.channel!r} failed in epoch {epoch} at step {step}: {message}")
    problem = locate_problem(spec, pipeline_index=pipeline_index, num_pipelines=num_pipelines)
    where = f"Reading channel {spec.channel!r} ({spec.directory}) failed in epoch {epoch} at step {step}"
    return DataError(f"{where}: {problem}" if problem else f"{where}: {message}")


def steps_per_epoch(spec: ImageDataset, global_batch: int) -> int:
    """Steps per epoch for every worker: the channel's images over the global batch (floor)."""
    return spec.examples // global_batch


# --- the tf.data pipeline --------------------------------------------------------------------


def _records_with_source(
    spec: ImageDataset, pipeline_index: int, num_pipelines: int, deterministic: bool, shuffle_seed: int | None = None
) -> Any:
    """``(source, index, serialized)`` of this pipeline's records; source is the shard path.

    With ``shuffle_seed`` the pipeline's shards are opened in a seeded random order (training),
    so the interleave does not visit the same shards together every epoch.
    """
    import tensorflow as tf

    paths = tf.data.Dataset.from_tensor_slices(list(spec.files))
    by_file = len(spec.files) >= num_pipelines
    if by_file and num_pipelines > 1:
        paths = paths.shard(num_pipelines, pipeline_index)
    if shuffle_seed is not None and by_file:
        paths = paths.shuffle(len(spec.files), seed=shuffle_seed)

    def read(path: Any) -> Any:
        return tf.data.TFRecordDataset(path).enumerate().map(lambda index, record: (path, index, record))

    records = paths.interleave(
        read,
        cycle_length=max(1, min(len(spec.files), 16)),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=deterministic or not by_file,
    )
    if not by_file and num_pipelines > 1:
        records = records.shard(num_pipelines, pipeline_index)
    return records


def _parse_record(spec: ImageDataset) -> Any:
    import tensorflow as tf

    features = {
        IMAGE_KEY: tf.io.FixedLenFeature([], tf.string),
        LABEL_KEY: tf.io.FixedLenFeature([], tf.int64),
    }

    def parse(source: Any, index: Any, record: Any) -> Any:
        parsed = tf.io.parse_single_example(record, features)
        label = parsed[LABEL_KEY] - spec.label_base
        check = tf.debugging.Assert(
            tf.logical_and(label >= 0, label < spec.num_classes),
            [
                "Bad label in",
                source,
                "record",
                index,
                f": image/class/label - label_base ({spec.label_base}) must be in [0, {spec.num_classes}), got",
                label,
                "(set num_classes / image_label_base)",
            ],
            name="label_check",
        )
        with tf.control_dependencies([check]):
            label = tf.identity(tf.cast(label, tf.int32))
        return parsed[IMAGE_KEY], label

    return parse


def _crop_and_resize(raw: Any, image_size: int, training: bool, seed: Any) -> Any:
    """Decodes ``raw`` (JPEG via decode-and-crop, else any format) into ``[S, S, 3]`` uint8."""
    import tensorflow as tf

    def window(shape: Any) -> Any:
        if training:
            begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
                shape,
                bounding_boxes=tf.constant([0.0, 0.0, 1.0, 1.0], shape=[1, 1, 4]),
                seed=seed,
                min_object_covered=0.1,
                aspect_ratio_range=CROP_ASPECT,
                area_range=CROP_AREA,
                max_attempts=10,
                use_image_if_no_bounding_boxes=True,
            )
            return begin[0], begin[1], size[0], size[1]
        side = tf.cast(tf.cast(tf.minimum(shape[0], shape[1]), tf.float32) * CENTER_CROP_FRACTION, tf.int32)
        side = tf.maximum(side, 1)
        return (shape[0] - side) // 2, (shape[1] - side) // 2, side, side

    def jpeg() -> Any:
        # Decodes only the crop window: the bulk of a JPEG pipeline's CPU time otherwise.
        top, left, height, width = window(tf.image.extract_jpeg_shape(raw))
        return tf.image.decode_and_crop_jpeg(raw, tf.stack([top, left, height, width]), channels=3)

    def other() -> Any:
        image = tf.io.decode_image(raw, channels=3, expand_animations=False)
        top, left, height, width = window(tf.shape(image))
        return image[top : top + height, left : left + width, :]

    image = tf.cond(tf.io.is_jpeg(raw), jpeg, other)
    image = tf.image.resize(image, [image_size, image_size], method="bilinear", antialias=False)
    if training:
        image = tf.image.stateless_random_flip_left_right(image, seed=seed + 1)
    image = tf.cast(tf.clip_by_value(tf.round(image), 0.0, 255.0), tf.uint8)
    return tf.ensure_shape(image, [image_size, image_size, 3])


def make_dataset(
    spec: ImageDataset,
    *,
    training: bool,
    image_size: int,
    per_replica_batch: int,
    batches: int | None,
    pipeline_index: int = 0,
    num_pipelines: int = 1,
    shuffle_buffer: int = 10_000,
    seed: int = 0,
    epoch: int = 1,
    ordered: bool = False,
) -> Any:
    """One input pipeline's batches ``(images uint8 [B, S, S, 3], labels int32 [B])``.

    Call it from ``distribute_datasets_from_function`` with the context's pipeline id and count:
    each pipeline reads its own shards (or every n-th record/file when there are fewer shards
    than pipelines). Training shuffles (seeded by ``seed`` and ``epoch``, so a resumed run
    replays the same epoch), crops at random (area 8-100%, aspect 3/4-4/3), flips at random,
    repeats the shard and stops after ``batches`` full batches (every worker runs the same
    steps even when shards are uneven). Evaluation reads the shard once in order, centre crop,
    last batch kept (``batches`` None) or the first ``batches`` batches.
    Training emits pictures as they are ready (out of order); each one's crop and flip depend on
    its place in the seeded order only, so ``ordered=True`` (slower) replays an epoch exactly.
    The model rescales the uint8 pixels itself (see ``models.build_image_model``).
    """
    import tensorflow as tf

    if spec.data_format == "image-dir":
        items = tf.data.Dataset.from_tensor_slices((list(spec.files), list(spec.labels)))
        if num_pipelines > 1:
            items = items.shard(num_pipelines, pipeline_index)
        if training:
            # The list of names is small: shuffle it whole, then read in that order.
            items = items.shuffle(len(spec.files), seed=seed * 7919 + epoch, reshuffle_each_iteration=True).repeat()

        def read(path: Any, label: Any) -> Any:
            return tf.io.read_file(path), tf.cast(label, tf.int32)

    else:
        items = _records_with_source(
            spec, pipeline_index, num_pipelines, deterministic=not training, shuffle_seed=seed + epoch if training else None
        )
        if training:
            items = items.repeat().shuffle(shuffle_buffer, seed=seed * 7919 + epoch)
        read = _parse_record(spec)

    def load(position: Any, item: Any) -> Any:
        raw, label = read(*item)
        # Seeded by the picture's place in the (seeded) order, not by when a thread gets to it.
        element_seed = tf.stack([tf.constant(seed * 1_000_003 + epoch, tf.int64), position])
        return _crop_and_resize(raw, image_size, training, element_seed), label

    # One map (read or parse, decode, crop, flip) in parallel; out of order in training, where
    # pictures of uneven size would otherwise hold the queue behind the slowest.
    images = items.enumerate().map(load, num_parallel_calls=tf.data.AUTOTUNE, deterministic=ordered or not training)
    batched = images.batch(per_replica_batch, drop_remainder=training, num_parallel_calls=tf.data.AUTOTUNE)
    if batches is not None:
        batched = batched.take(batches)
    return batched.prefetch(tf.data.AUTOTUNE)


# --- naming what is broken -------------------------------------------------------------------


def locate_problem(spec: ImageDataset, *, pipeline_index: int = 0, num_pipelines: int = 1) -> str | None:
    """After the pipeline failed: the first image of this pipeline's shard that cannot be read.

    Decodes every image of the shard again, in parallel, keeping failures aside instead of
    stopping, so it costs one pass over the shard and is run only after a failure. Returns a
    sentence naming the file (``image-dir``) or the shard and record number
    (``image-tfrecord``), or None if every image decodes (the failure was elsewhere).
    """
    import tensorflow as tf

    if spec.data_format == "image-tfrecord":
        for path in spec.files:
            count_records(Path(path))  # a cut shard is named with its byte offset
        records = _records_with_source(spec, pipeline_index, num_pipelines, deterministic=True)
        sources = records.map(lambda path, index, record: (path, index))
        features = {IMAGE_KEY: tf.io.FixedLenFeature([], tf.string), LABEL_KEY: tf.io.FixedLenFeature([], tf.int64)}

        def check(position: Any, item: Any) -> Any:
            parsed = tf.io.parse_single_example(item[2], features)
            return position, tf.shape(tf.io.decode_image(parsed[IMAGE_KEY], channels=3, expand_animations=False))[0]

        checked = records.enumerate().map(check, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    else:
        items = tf.data.Dataset.from_tensor_slices(list(spec.files))
        if num_pipelines > 1:
            items = items.shard(num_pipelines, pipeline_index)
        sources = items.map(lambda path: (path, tf.constant(-1, tf.int64)))
        checked = items.enumerate().map(
            lambda position, path: (
                position,
                tf.shape(tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False))[0],
            ),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
    # Failed elements vanish from the checked stream; the first position missing from it is the culprit.
    survivors = checked.ignore_errors().map(lambda position, _: position)
    expected = 0
    for index in survivors.as_numpy_iterator():
        if index != expected:
            break
        expected += 1
    source, record = next(iter(sources.skip(expected).take(1).as_numpy_iterator()), (None, None))
    if source is None:
        return None
    name = source.decode()
    if record < 0:
        return f"Cannot decode image {name}: not a readable JPEG or PNG file (corrupt or truncated)."
    return (
        f"Cannot read record {record} of TFRecord file {name}: it is not a tf.train.Example with a decodable "
        f"{IMAGE_KEY!r} image and an int64 {LABEL_KEY!r} (corrupt or truncated image?)."
    )
