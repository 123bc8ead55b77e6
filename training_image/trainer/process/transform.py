"""The built-in transform: raw CSV or an image directory in, the trainer's TFRecord shards out.

Input ``raw`` (``/opt/ml/processing/input/raw``) holds either

- CSV files in the trainer's layout (numeric features, the integer label last, an optional
  header line per file, as :mod:`trainer.datasets.tabular` reads them), written as the trainer's ``tfrecord``
  format (``features`` float list, ``label`` int64) with ``.trainer-manifest.json``; or
- an image directory (one sub-directory per class of ``.jpg``/``.jpeg``/``.png``, as
  :mod:`trainer.datasets.images` reads it), written as ``image-tfrecord`` (``image/encoded``,
  ``image/class/label`` counted from 1) with the ``manifest.json`` the trainer counts from.
  ``--image-size HxW`` resizes every picture (bilinear, antialiased) and re-encodes it as JPEG
  (quality 95); without it each picture's own bytes are kept (decoded once, to check them).
  ``--image-encoding raw`` (with ``--image-size``) writes training-ready records instead: the
  resized pictures' uint8 pixels (``image/raw``, ``image/shape``), so training decodes nothing.

Outputs ``train`` and ``validation`` (``/opt/ml/processing/output/<name>``) each get
``part-NNNNN.tfrecord`` shards whose sizes differ by at most one example and the manifest with
per-shard counts, so the trainer starts without scanning; ``train/statistics.json`` holds
per-feature (per-channel for pictures) mean and std, class counts and example counts.

Where the work runs: reading, CSV parsing, image decoding and JPEG encoding run on the CPU, in
parallel ``tf.data`` maps (TensorFlow has no GPU kernels for them); ``tf.train.Example`` records
are built by TensorFlow ops in the same maps, not one Python object per row. Statistics are
reduced with TensorFlow ops on the GPU when one is visible. With a GPU and ``--image-size``,
decoded pictures are batched and resized on the GPU (``tf.image.resize``), then JPEG-encoded on
the CPU; without a GPU the resize stays in the parallel CPU map.

The split is a keyed hash (SipHash, keyed by ``--seed``) of each example's identity (the row's
position in the input, read in sorted file order; a picture's path below ``raw``): the same seed
splits the same input the same way, and adding pictures does not move the others. Like TFX's
hash split, the fraction is met on average, not to the example.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from trainer.contract.errors import ConfigError, DataError
from trainer.datasets import images, manifest
from trainer.datasets import tabular as data
from trainer.logs import log
from trainer.process import contract, stopping
from trainer.process.options import TransformOptions
from trainer.process.records import Shard, ShardWriter, raw_image_example, serialize_examples
from trainer.process.statistics import RunningMoments, batch_moments, choose_device, group_moments

TARGET_SHARD_BYTES = 128 * 2**20  # TFRecord guidance: 100-200 MB per shard
CSV_BATCH = 8192
IMAGE_BATCH = 64
JPEG_QUALITY = 95
# Serialized training records per staging file of the CSV shuffle (held in memory one at a time,
# with Python's per-record overhead): 4x an underestimated row count still fits a few hundred MB.
SHUFFLE_STAGING_BYTES = 64 * 2**20
_HASH_BUCKETS = 1 << 30
# Keys the split hash apart from any other use of the seed.
_SPLIT_SALT = 0x5EED_5B17


@dataclass(frozen=True)
class Outputs:
    """Where one run writes.

    Attributes:
        train: The ``train`` output directory.
        validation: The ``validation`` output directory.
    """

    train: Path
    validation: Path


def run(env: contract.ProcessingEnvironment, options: TransformOptions) -> dict[str, Any]:
    """Converts ``raw`` into train/validation shards; returns what ``statistics.json`` records.

    Raises:
        DataError: the input is missing, empty, of an unknown layout, or holds a bad row or
            picture (named by file and line); or an output directory already holds files.
        ConfigError: ``--format`` does not match the files.
    """
    raw = env.input_dir(contract.RAW_INPUT)
    outputs = Outputs(env.output_dir(contract.TRAIN_OUTPUT), env.output_dir(contract.VALIDATION_OUTPUT))
    files = _input_files(raw)
    data_format = detect_format(raw, files, options.data_format)
    if data_format == "csv":
        for given, name in ((options.image_size is not None, "--image-size"), (options.skip_bad_images, "--skip-bad-images"),
                            (options.image_encoding != "jpeg", "--image-encoding")):
            if given:
                raise ConfigError(
                    f"Bad processing argument: {name} applies to pictures, but the input {raw} holds CSV files; drop it."
                )
    for directory in (outputs.train, outputs.validation):
        _refuse_non_empty(directory)
    for directory in (outputs.train, outputs.validation):
        directory.mkdir(parents=True, exist_ok=True)
    _configure_gpus()
    try:
        if data_format == "csv":
            statistics = convert_csv(raw, [f for f in files if f.suffix.lower() == ".csv"], outputs, options)
        else:
            statistics = convert_images(raw, outputs, options)
        stopping.check()  # a stop during the last batch or the manifests: still no dataset
    except BaseException:
        # The directories were empty when the run began: whatever is there now is this run's, and partial.
        for directory in (outputs.train, outputs.validation):
            for child in directory.iterdir():
                shutil.rmtree(child) if child.is_dir() else child.unlink(missing_ok=True)
        raise
    path = outputs.train / manifest.STATISTICS_NAME
    path.write_text(json.dumps(statistics, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    log(
        "transform-done",
        format=statistics["format"],
        train=statistics["examples"]["train"],
        validation=statistics["examples"]["validation"],
        shards=f"{len(statistics['shards']['train'])}+{len(statistics['shards']['validation'])}",
        device=statistics["device"],
    )
    return statistics


def _configure_gpus() -> None:
    import tensorflow as tf

    for device in tf.config.list_physical_devices("GPU"):
        try:
            # As training does: no up-front mapping of all GPU memory.
            tf.config.experimental.set_memory_growth(device, True)
        except RuntimeError:
            pass  # the runtime already started (a second transform in one process): its setting stands


# --- input and output checks -----------------------------------------------------------------


def _input_files(raw: Path) -> list[Path]:
    if not raw.is_dir():
        raise DataError(
            f"The processing input '{contract.RAW_INPUT}' is missing: {raw} does not exist. Give the job a "
            f"ProcessingInput named '{contract.RAW_INPUT}' (processing.input_prefix, or --input-uri) holding CSV "
            "files or one sub-directory of pictures per class."
        )
    files = sorted(
        p for p in raw.rglob("*") if p.is_file() and not any(part.startswith(".") for part in p.relative_to(raw).parts)
    )
    if not files:
        raise DataError(
            f"The processing input '{contract.RAW_INPUT}' is empty: {raw} holds no files (is the input S3 prefix right?)."
        )
    return files


def detect_format(raw: Path, files: list[Path], requested: str) -> str:
    """``csv`` or ``image-dir``: as requested, else told from the file names (``--format auto``)."""
    suffixes = {p.suffix.lower() for p in files}
    if requested == "csv" or (requested == "auto" and suffixes == {".csv"}):
        if ".csv" not in suffixes:
            raise ConfigError(f"--format csv, but the input {raw} holds no .csv file (e.g. {files[0]}).")
        return "csv"
    if requested == "image-dir" or (requested == "auto" and suffixes <= set(images.IMAGE_SUFFIXES)):
        return "image-dir"
    odd = next(p for p in files if p.suffix.lower() not in (".csv", *images.IMAGE_SUFFIXES)) if not (
        suffixes <= {".csv", *images.IMAGE_SUFFIXES}
    ) else files[0]
    raise DataError(
        f"Cannot tell the input format of {raw}: it holds {', '.join(sorted(suffixes))} files (e.g. {odd}); "
        "give it only .csv files or only class sub-directories of .jpg/.jpeg/.png pictures, or pass --format."
    )


def _refuse_non_empty(directory: Path) -> None:
    if directory.is_dir() and any(directory.iterdir()):
        present = sorted(p.name for p in directory.iterdir())
        raise DataError(
            f"The output directory {directory} already holds {len(present)} entr{'y' if len(present) == 1 else 'ies'} "
            f"({', '.join(present[:3])}{' ...' if len(present) > 3 else ''}): refusing to mix runs. Each processing "
            "job writes to its own empty output prefix (<output_prefix><job name>/)."
        )


# --- the split and the shard counts ----------------------------------------------------------


def validation_mask(keys: Any, fraction: float, seed: int) -> Any:
    """Boolean [B]: which examples (by their string identity ``keys``) go to validation."""
    import tensorflow as tf

    buckets = tf.strings.to_hash_bucket_strong(keys, _HASH_BUCKETS, key=[seed & 0xFFFFFFFFFFFFFFFF, _SPLIT_SALT])
    return buckets < int(round(fraction * _HASH_BUCKETS))


def shard_counts(requested: int, estimated_bytes: float, fraction: float) -> tuple[int, int]:
    """Shards for (train, validation): ``--shards`` for train and the same size per shard for validation,
    or, with 0, about :data:`TARGET_SHARD_BYTES` per shard from the estimated output size."""
    if requested:
        return requested, max(1, math.ceil(requested * fraction / (1.0 - fraction) - 1e-9))
    return (
        max(1, math.ceil(estimated_bytes * (1.0 - fraction) / TARGET_SHARD_BYTES)),
        max(1, math.ceil(estimated_bytes * fraction / TARGET_SHARD_BYTES)),
    )


def _shard_entries(shards: list[Shard], directory: Path) -> list[dict[str, Any]]:
    return [{"path": s.path.relative_to(directory).as_posix(), "examples": s.examples} for s in shards]


def _check_split(train: int, validation: int, total: int, fraction: float) -> None:
    if train == 0 or validation == 0:
        raise DataError(
            f"The input holds {total} usable example(s): too few to split {1 - fraction:.0%}/{fraction:.0%} into "
            f"non-empty train and validation sets (train {train}, validation {validation}); add data or raise "
            "--validation-fraction."
        )


# --- CSV -> tfrecord -------------------------------------------------------------------------


def _estimated_rows(files: list[Path]) -> float:
    """Rows in the CSV files, estimated from the first 64 KB of the first file (for the shard count only)."""
    with files[0].open("rb") as handle:
        sample = handle.read(1 << 16)
    lines = max(1, sample.count(b"\n"))
    return sum(p.stat().st_size for p in files) / max(1.0, len(sample) / lines)


def convert_csv(
    raw: Path, files: list[Path], outputs: Outputs, options: TransformOptions, *, reduce_on: str | None = None
) -> dict[str, Any]:
    """CSV rows -> the trainer's ``tfrecord`` shards, split, counted and described in one pass.

    Args:
        raw: The input directory.
        files: Its CSV files, in reading order.
        outputs: Where the shards go.
        options: The transform's arguments.
        reduce_on: Reduce each batch's statistics on this device in the main loop (``/GPU:0``);
            None: on the GPU when one is visible, else inside the parallel ``tf.data`` map (on
            a CPU-only host a main-loop reduction would run serially beside the writes).
    """
    import tensorflow as tf

    inspect = data.FORMATS["csv"].inspect
    checked, num_features = inspect(raw, tuple(data.DataFile(path=str(p)) for p in files))
    if num_features < 1:
        raise DataError(f"CSV files in {raw} need at least one feature column before the label column.")
    record_bytes = 4 * num_features + 40  # packed floats plus the Example's framing and label
    train_shards, validation_shards = shard_counts(options.shards, _estimated_rows(files) * record_bytes, options.validation_fraction)
    device = choose_device()
    if reduce_on is None and device.startswith("/GPU"):
        reduce_on = device
    parse = data.FORMATS["csv"].parse(num_features)
    fraction, seed = options.validation_fraction, options.seed

    def convert(batch_index: Any, lines: Any) -> Any:
        features, labels = parse(lines)
        bad = tf.logical_not(
            tf.reduce_all(
                [
                    tf.reduce_all(tf.math.is_finite(features)),
                    tf.reduce_all(labels >= 0),
                    tf.reduce_all(labels <= data.MAX_LABEL),  # inf, 1e300: not a class number
                    tf.reduce_all(tf.equal(labels, tf.floor(labels))),
                ]
            )
        )
        labels = tf.cast(labels, tf.int64)
        index = batch_index * CSV_BATCH + tf.range(tf.size(labels, out_type=tf.int64), dtype=tf.int64)
        to_validation = validation_mask(tf.strings.as_string(index), fraction, seed)
        records = serialize_examples({data.FEATURES_KEY: ("float", features), data.LABEL_KEY: ("int64", labels[:, None])})
        if reduce_on is not None:
            return (features, labels), to_validation, records, bad
        partials = tuple(batch_moments(features, labels, keep) for keep in (tf.logical_not(to_validation), to_validation))
        return partials, to_validation, records, bad

    lines = tf.data.Dataset.from_tensor_slices(
        (tf.constant([f.path for f in checked]), tf.constant([int(f.header) for f in checked], tf.int64))
    ).interleave(
        lambda path, header: tf.data.TextLineDataset(path).skip(header),
        cycle_length=max(1, min(len(checked), 8)),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,  # the split keys on each row's position
    )
    batches = lines.batch(CSV_BATCH).enumerate().map(convert, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    log("transform-start", format="csv", files=len(checked), features=num_features, shards=f"{train_shards}+{validation_shards}",
        statistics_on=reduce_on or "tf.data-map")  # fmt: skip
    # Training shards in a seeded random order: CSV rows arrive in the input's order (a file sorted
    # by label is common), and the trainer mixes rows only within its shuffle buffer. Validation is
    # read in order anyway.
    estimated_train_bytes = _estimated_rows(files) * record_bytes * (1.0 - fraction)
    writers = (
        ShardWriter(outputs.train, train_shards, shuffle_seed=seed,
                    staging_files=max(1, math.ceil(estimated_train_bytes / SHUFFLE_STAGING_BYTES))),
        ShardWriter(outputs.validation, validation_shards),
    )  # fmt: skip
    moments = (RunningMoments(num_features, reduce_on or device), RunningMoments(num_features, reduce_on or device))
    try:
        for reduced, to_validation, records, bad in batches.prefetch(tf.data.AUTOTUNE):
            stopping.check()
            if bool(bad):
                raise _csv_problem(checked, num_features, None)
            mask = to_validation.numpy()
            serialized = records.numpy()
            writers[0].write_all(serialized[~mask])
            writers[1].write_all(serialized[mask])
            if reduce_on is None:
                for moment, partial in zip(moments, reduced, strict=True):
                    moment.merge_partial(*partial)
            else:
                features, labels = reduced
                moments[0].update_rows(features, labels, tf.logical_not(to_validation))
                moments[1].update_rows(features, labels, to_validation)
    except tf.errors.OpError as err:
        for writer in writers:
            writer.abort()
        raise _csv_problem(checked, num_features, err) from err
    except BaseException:
        for writer in writers:
            writer.abort()  # no shuffle pass for a run that failed or was stopped
        raise
    written = tuple(w.close(between_files=stopping.check) for w in writers)
    counts = (writers[0].examples, writers[1].examples)
    _check_split(*counts, sum(counts), fraction)
    classes = max(max(m.classes) for m in moments if m.classes) + 1
    if classes < 2:
        raise DataError(f"Every label in {raw} is 0: a classifier needs at least 2 classes.")
    for directory, shards in zip((outputs.train, outputs.validation), written, strict=True):
        entries = tuple(manifest.FileEntry(s.path.name, s.examples, s.path.stat().st_size) for s in shards)
        manifest.write(directory, manifest.Manifest("tfrecord", num_features, classes, entries))
    statistics = _statistics(
        "tfrecord", "csv", options, device, outputs, written, moments, num_classes=classes, num_features=num_features
    )
    statistics["statistics_reduced_on"] = reduce_on or "tf.data map (CPU)"
    return statistics


def _csv_problem(files: tuple[data.DataFile, ...], num_features: int, err: Exception | None) -> DataError:
    locate = data.FORMATS["csv"].locate_problem
    for file in files:
        problem = locate(file, num_features, 0)
        if problem:
            return DataError(problem)
    detail = " ".join(str(getattr(err, "message", err)).split())[:300] if err else "an invalid value"
    return DataError(f"Could not convert the CSV files: {detail}")


# --- image directory -> image-tfrecord -------------------------------------------------------


def convert_images(
    raw: Path, outputs: Outputs, options: TransformOptions, *, resize_device: str | None = None
) -> dict[str, Any]:
    """Pictures -> ``image-tfrecord`` shards (label base 1), split, counted and described in one pass.

    Args:
        raw: The class sub-directories.
        outputs: Where the shards go.
        options: The transform's arguments.
        resize_device: Resize batches of decoded pictures on this device (``/GPU:0``); None: on
            the GPU when one is visible and ``--image-size`` is given, else inside the parallel
            CPU map.
    """
    import tensorflow as tf

    spec = images.discover(raw, channel=contract.RAW_INPUT, data_format="image-dir")
    files = [Path(p) for p in spec.files]
    device = choose_device()
    if resize_device is None and options.image_size is not None and device.startswith("/GPU"):
        resize_device = device
    relative = [p.relative_to(raw).as_posix() for p in files]
    to_validation = validation_mask(tf.constant(relative), options.validation_fraction, options.seed).numpy()
    # A seeded order, so shards mix the classes (the listing is class by class).
    order = np.random.default_rng(options.seed).permutation(len(files))
    estimated = _estimated_output_bytes(files, options.image_size)
    if options.image_encoding == "raw" and options.image_size is not None:
        estimated = float(len(files) * options.image_size[0] * options.image_size[1] * 3)
    train_shards, validation_shards = shard_counts(options.shards, estimated, options.validation_fraction)

    items = tf.data.Dataset.from_tensor_slices(
        (
            tf.constant(order, tf.int64),
            tf.constant([str(files[i]) for i in order]),
            tf.constant([spec.labels[i] for i in order], tf.int64),
            tf.constant(to_validation[order]),
        )
    )
    batched_resize = options.image_size is not None and resize_device is not None
    size = options.image_size
    raw_pixels = options.image_encoding == "raw"

    def decode(raw_bytes: Any) -> Any:
        return tf.io.decode_image(raw_bytes, channels=3, expand_animations=False)

    def moments_of(pixels: Any) -> Any:
        values = tf.reshape(tf.cast(pixels, tf.float64), [-1, 3])
        count = tf.cast(tf.shape(values)[0], tf.float64)
        mean = tf.reduce_mean(values, axis=0)
        return count, mean, tf.reduce_sum(tf.square(values - mean), axis=0)

    def load(index: Any, path: Any, label: Any, validation: Any) -> Any:
        raw_bytes = tf.io.read_file(path)
        image = decode(raw_bytes)
        if batched_resize:
            return index, label, validation, image
        if size is not None:
            image = _to_uint8(tf.image.resize(image, size, method="bilinear", antialias=True))
            encoded = image if raw_pixels else tf.io.encode_jpeg(image, quality=JPEG_QUALITY)
        else:
            encoded = raw_bytes
        count, mean, m2 = moments_of(image)
        return index, label, validation, encoded, tf.shape(image)[0], tf.shape(image)[1], count, mean, m2

    # A picture that fails to read or decode drops out here; the gap in the indices names it.
    loaded = items.map(load, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True).ignore_errors()
    if batched_resize:
        stream = loaded.ragged_batch(IMAGE_BATCH).prefetch(tf.data.AUTOTUNE)
    else:
        stream = loaded.batch(IMAGE_BATCH).map(_serialize_pictures(raw_pixels), num_parallel_calls=tf.data.AUTOTUNE).prefetch(
            tf.data.AUTOTUNE
        )
    log("transform-start", format="image-dir", files=len(files), classes=spec.num_classes,
        shards=f"{train_shards}+{validation_shards}", resize_on=(resize_device if batched_resize else "tf.data-map") if size else "none")  # fmt: skip
    writers = (ShardWriter(outputs.train, train_shards), ShardWriter(outputs.validation, validation_shards))
    moments = (RunningMoments(3, resize_device or device), RunningMoments(3, resize_device or device))
    position = 0
    bad: list[str] = []
    # Where the resize ran, read off its output tensors: soft placement would quietly run a
    # "/GPU:0" resize on the CPU (no GPU, no kernel), and the statistics say what really happened.
    resized_on: set[str] = set()
    try:
        for batch in stream:
            stopping.check()
            if batched_resize:
                index, label, validation, records, count, mean, m2, ran_on = _resize_on_device(
                    batch, size, resize_device, raw_pixels
                )
                resized_on.add(ran_on)
                with tf.device(resize_device):
                    partials = tuple(group_moments(count, mean, m2, label, keep) for keep in (tf.logical_not(validation), validation))
            else:
                index, label, validation, records, partials = batch
            for arrived in index.numpy().tolist():
                while order[position] != arrived:
                    _bad_picture(files[order[position]], options.skip_bad_images, bad)
                    position += 1
                position += 1
            mask = validation.numpy()
            serialized = np.array(_raw_records(records.numpy(), label.numpy()), dtype=object) if raw_pixels else records.numpy()
            writers[0].write_all(serialized[~mask])
            writers[1].write_all(serialized[mask])
            for moment, partial in zip(moments, partials, strict=True):
                moment.merge_partial(*partial)
        while position < len(order):
            _bad_picture(files[order[position]], options.skip_bad_images, bad)
            position += 1
    finally:
        written = tuple(w.close() for w in writers)
    counts = (writers[0].examples, writers[1].examples)
    _check_split(*counts, sum(counts), options.validation_fraction)
    for directory in (outputs.train, outputs.validation):
        images.write_manifest(
            directory, num_classes=spec.num_classes, label_base=images.DEFAULT_LABEL_BASE, class_names=spec.class_names
        )
    statistics = _statistics(
        "image-tfrecord", "image-dir", options, device, outputs, written, moments, num_classes=spec.num_classes
    )
    statistics.update(
        class_names=list(spec.class_names),
        label_base=images.DEFAULT_LABEL_BASE,
        image_size=list(size) if size else None,
        image_encoding=options.image_encoding,
        resized_on=(",".join(sorted(resized_on)) or resize_device if batched_resize else "/CPU:0") if size else None,
        skipped_images={"count": len(bad), "files": bad},
    )
    return statistics


def _picture_pixels(path: Path) -> int | None:
    """Height x width from a JPEG's or PNG's header, or None if the header cannot tell (a bad file fails later)."""
    import tensorflow as tf

    head = path.read_bytes()[:1 << 16] if path.suffix.lower() == ".png" else None
    if head is not None:
        if head[:8] != b"\x89PNG\r\n\x1a\n" or len(head) < 24:
            return None
        return int.from_bytes(head[16:20], "big") * int.from_bytes(head[20:24], "big")
    try:
        height, width = tf.image.extract_jpeg_shape(tf.io.read_file(str(path))).numpy()[:2]
    except tf.errors.OpError:
        return None
    return int(height) * int(width)


def _estimated_output_bytes(files: list[Path], size: tuple[int, int] | None) -> float:
    """The shards' size for the automatic shard count: the input's bytes, scaled by the pixels a resize keeps."""
    total = float(sum(p.stat().st_size for p in files))
    if size is None:
        return total
    # Re-encoded at the new size: scale by the share of pixels kept, sampled from a few pictures.
    sampled = [n for n in (_picture_pixels(p) for p in files[:: max(1, len(files) // 8)][:8]) if n]
    if not sampled:
        return total
    return total * min(1.0, size[0] * size[1] / (sum(sampled) / len(sampled)))


def _to_uint8(pixels: Any) -> Any:
    import tensorflow as tf

    return tf.cast(tf.clip_by_value(tf.round(pixels), 0.0, 255.0), tf.uint8)


def _example_features(encoded: Any, label: Any, height: Any, width: Any, image_format: Any) -> dict[str, Any]:
    import tensorflow as tf

    return {
        images.IMAGE_KEY: ("bytes", encoded[:, None]),
        "image/format": ("bytes", image_format[:, None]),
        "image/height": ("int64", tf.cast(height, tf.int64)[:, None]),
        "image/width": ("int64", tf.cast(width, tf.int64)[:, None]),
        images.LABEL_KEY: ("int64", (label + images.DEFAULT_LABEL_BASE)[:, None]),
    }


def _image_format(encoded: Any) -> Any:
    import tensorflow as tf

    # What tf.io.is_jpeg checks (the SOI marker and the next marker's first byte), for a whole batch at once.
    return tf.where(tf.equal(tf.strings.substr(encoded, 0, 3), b"\xff\xd8\xff"), b"jpeg", b"png")


def _serialize_pictures(raw_pixels: bool) -> Any:
    """``fn(batch of loaded pictures) -> (index, label, validation, records, partials)`` for the CPU path.

    With ``raw_pixels`` the "records" are the pictures' pixels ``[B, H, W, 3]``, serialized by
    :func:`_raw_records` in the main loop.
    """

    import tensorflow as tf

    def serialize(index: Any, label: Any, validation: Any, encoded: Any, height: Any, width: Any, count: Any, mean: Any, m2: Any) -> Any:
        if raw_pixels:
            records = encoded
        else:
            records = serialize_examples(_example_features(encoded, label, height, width, _image_format(encoded)))
        # Reduced here, in parallel, on a CPU host: the main loop only merges two small partials.
        partials = tuple(group_moments(count, mean, m2, label, keep) for keep in (tf.logical_not(validation), validation))
        return index, label, validation, records, partials

    return serialize


def _raw_records(pixels: np.ndarray, labels: np.ndarray) -> list[bytes]:
    """Serialized raw-pixel Examples (label base 1) for a batch of uint8 pictures ``[B, H, W, 3]``."""
    return [
        raw_image_example(
            picture, int(label) + images.DEFAULT_LABEL_BASE,
            raw_key=images.RAW_KEY, shape_key=images.SHAPE_KEY, label_key=images.LABEL_KEY,
        )
        for picture, label in zip(pixels, labels, strict=True)
    ]  # fmt: skip


def _resize_on_device(batch: Any, size: tuple[int, int], device: str, raw_pixels: bool = False) -> tuple[Any, ...]:
    """Decoded pictures (ragged batch) resized on ``device`` in one call per batch, then JPEG-encoded on the CPU.

    The last item is the device the resize actually ran on (from its output tensor).
    """
    import tensorflow as tf

    index, label, validation, pictures = batch
    with tf.device(device):
        if pictures.shape.rank == 4 and isinstance(pictures, tf.RaggedTensor):
            heights = pictures.row_lengths(axis=1)
            uniform = bool(tf.reduce_all(heights == heights[0])) and _uniform_widths(pictures)
            if uniform:
                resized = tf.image.resize(pictures.to_tensor(), size, method="bilinear", antialias=True)
            else:
                resized = tf.stack(
                    [tf.image.resize(pictures[i].to_tensor(), size, method="bilinear", antialias=True) for i in range(int(pictures.nrows()))]
                )
        else:
            resized = tf.image.resize(pictures, size, method="bilinear", antialias=True)
        pixels = _to_uint8(resized)
        values = tf.reshape(tf.cast(pixels, tf.float64), [tf.shape(pixels)[0], -1, 3])
        count = tf.cast(tf.fill([tf.shape(pixels)[0]], tf.shape(values)[1]), tf.float64)
        mean = tf.reduce_mean(values, axis=1)
        m2 = tf.reduce_sum(tf.square(values - mean[:, None, :]), axis=1)
    records = pixels if raw_pixels else _encode_batch(pixels, label)
    return index, label, validation, records, count, mean, m2, _short_device(resized.device)


def _short_device(name: str) -> str:
    """``/GPU:0`` from ``/job:localhost/replica:0/task:0/device:GPU:0`` (the device a tensor is on)."""
    return "/" + name.rsplit("device:", 1)[-1] if "device:" in name else name


def _uniform_widths(pictures: Any) -> bool:
    import tensorflow as tf

    widths = pictures.values.row_lengths()
    return bool(tf.reduce_all(widths == widths[0]))


def _encode_batch_fn() -> Any:
    import tensorflow as tf

    @tf.function(reduce_retracing=True)
    def encode(pixels: Any, label: Any) -> Any:
        with tf.device("/CPU:0"):
            encoded = tf.map_fn(
                lambda image: tf.io.encode_jpeg(image, quality=JPEG_QUALITY),
                pixels,
                fn_output_signature=tf.string,
                parallel_iterations=max(2, os.cpu_count() or 2),
            )
            batch = tf.shape(pixels)[0]
            height = tf.fill([batch], tf.shape(pixels)[1])
            width = tf.fill([batch], tf.shape(pixels)[2])
            return serialize_examples(_example_features(encoded, label, height, width, tf.fill([batch], "jpeg")))

    return encode


_ENCODE: Any = None


def _encode_batch(pixels: Any, label: Any) -> Any:
    global _ENCODE
    if _ENCODE is None:
        _ENCODE = _encode_batch_fn()
    return _ENCODE(pixels, label)


def _bad_picture(path: Path, skip: bool, bad: list[str]) -> None:
    if not os.access(path, os.R_OK):
        why = "cannot be read (permission denied)"
    else:
        why = "is not a readable JPEG or PNG file (corrupt or truncated)"
    if not skip:
        raise DataError(
            f"Cannot decode image {path}: it {why}. Fix or remove it, or pass --skip-bad-images to leave such "
            f"pictures out (they are then counted and named in {manifest.STATISTICS_NAME})."
        )
    log("skipped-image", file=str(path), reason=json.dumps(why))
    bad.append(str(path))


# --- statistics.json -------------------------------------------------------------------------


def _statistics(
    output_format: str,
    input_format: str,
    options: TransformOptions,
    device: str,
    outputs: Outputs,
    written: tuple[list[Shard], ...],
    moments: tuple[RunningMoments, ...],
    *,
    num_classes: int,
    num_features: int | None = None,
) -> dict[str, Any]:
    splits = ("train", "validation")
    directories = (outputs.train, outputs.validation)
    body: dict[str, Any] = {
        "format": output_format,
        "input_format": input_format,
        "device": device,
        "seed": options.seed,
        "validation_fraction": options.validation_fraction,
        "num_classes": num_classes,
        "examples": {s: sum(x.examples for x in w) for s, w in zip(splits, written, strict=True)},
        "shards": {s: _shard_entries(w, d) for s, w, d in zip(splits, written, directories, strict=True)},
        "class_counts": {
            s: {str(k): m.classes[k] for k in sorted(m.classes)} for s, m in zip(splits, moments, strict=True)
        },
        "features": {s: m.result() for s, m in zip(splits, moments, strict=True)},
    }
    if num_features is not None:
        body["num_features"] = num_features
    else:
        body["features_are"] = "pixel channels (R, G, B) of the written pictures, 0-255"
    return body
