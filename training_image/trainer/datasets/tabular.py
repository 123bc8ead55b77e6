"""Input data: a channel directory of CSV or TFRecord shards, counted from metadata, then streamed.

Formats (the synthetic writer, ``trainer.datasets.synthetic``, produces both); each is a
:class:`RecordFormat` (reader, vectorised parser, inspection, error locator) registered in
:data:`FORMATS`, which is the hook another format implements:

- CSV: numeric features, then an integer class label in the last column; a header line is
  optional (detected per file: a first line without any numeric field is a header, and so is a
  first line that is exactly ``0,1,...,n-1``, the column names ``pandas.DataFrame.to_csv``
  writes, with a warning). Every other line is a row; an empty line is a malformed row.
- TFRecord: serialized ``tf.train.Example`` with ``features`` (float list, one value per
  feature; images flattened row-major HxWxC) and ``label`` (one int64).

Counts and shapes come from the channel's manifest (:mod:`trainer.datasets.manifest`) when it matches
the files, so nothing is read before the first step; the pipeline then checks every value as it
parses it, and a failure is traced back to the file and line or record by
:func:`locate_problem`. Without a manifest, :func:`scan_channel` reads every file once first (on
every worker, so all workers agree without talking). Training streams each worker's shard
through a parallel interleave, shuffle, batch-then-parse pipeline with prefetch, its epochs back
to back; a shard small enough is parsed once and kept in memory (``cache_max_mb``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from trainer.contract.environment import Paths, channel_variables
from trainer.contract.errors import ConfigError, DataError
from trainer.contract.hyperparameters import TrainingConfig
from trainer.datasets import manifest
from trainer.logs import log

FEATURES_KEY = "features"
LABEL_KEY = "label"
SCAN_BATCH = 4096
# The largest class label: training casts labels to int32 and num_classes (largest label + 1)
# must fit one too. A label beyond it (1e300, inf) is a broken row, not a class number.
MAX_LABEL = 2**31 - 2
# File sharding must keep at least this share of the examples, else every worker reads all files.
MIN_FILE_SHARDING_EFFICIENCY = 0.9


@dataclass(frozen=True)
class DataFile:
    """One input file.

    Attributes:
        path: Absolute path.
        examples: Number of examples (known after the scan).
        header: Whether the first line of a CSV file is a header.
    """

    path: str
    examples: int = 0
    header: bool = False


@dataclass(frozen=True)
class DatasetSpec:
    """A channel's data as found by discovery and, once scanned, counted and checked.

    Attributes:
        channel: Channel name, e.g. ``train``.
        directory: Directory the files were found in.
        data_format: ``csv`` or ``tfrecord``.
        files: The input files in sorted order.
        num_features: Values per example (0 until scanned).
        num_classes: Classes the model predicts (0 until scanned).
        scanned: Whether :func:`scan_channel` has filled in counts and shapes.
        label_run: The longest run of one label within a file, as the scan found it:
            ``(path, rows, label)``; None without a scan (counts from a manifest).
    """

    channel: str
    directory: Path
    data_format: str
    files: tuple[DataFile, ...]
    num_features: int = 0
    num_classes: int = 0
    scanned: bool = False
    # What the scan saw, not what the channel is: a spec counted from its manifest equals a scanned one.
    label_run: tuple[str, int, int] | None = dataclasses.field(default=None, compare=False)

    @property
    def examples(self) -> int:
        """Total examples over all files."""
        return sum(f.examples for f in self.files)


def _format_of(path: Path) -> str | None:
    suffix = path.suffix.lower()
    return next((f.name for f in FORMATS.values() if suffix in f.suffixes), None)


TRAINING_CHANNEL_NAMES = ("train", "training")
# Channels that never hold the training data: script mode's code, and the held-out set.
NON_TRAINING_CHANNELS = ("code", "validation")


def _declared_channels(paths: Paths, input_data_config: Mapping[str, Any]) -> list[str]:
    """Channel names the job declares: inputdataconfig.json, else SM_CHANNEL_* and input/data/*."""
    if input_data_config:
        return sorted(input_data_config)
    found = channel_variables()
    if paths.data_dir.is_dir():
        found |= {p.name for p in paths.data_dir.iterdir() if p.is_dir() and not p.name.startswith(".")}
    return sorted(found)


def resolve_train_channel(paths: Paths, config: TrainingConfig, input_data_config: Mapping[str, Any]) -> str:
    """The channel to train on: the ``train_channel`` hyperparameter if set, else ``train`` or
    ``training`` (what the SageMaker SDK calls it), else the only data channel declared.

    Raises:
        DataError: both ``train`` and ``training`` are declared.
    """
    if config.train_channel:
        return config.train_channel
    declared = _declared_channels(paths, input_data_config)
    named = [c for c in TRAINING_CHANNEL_NAMES if c in declared]
    if len(named) > 1:
        raise DataError(
            f"Input channels {' and '.join(repr(c) for c in named)} are both declared; set the train_channel "
            "hyperparameter to say which one to train on."
        )
    if named:
        return named[0]
    data_channels = [c for c in declared if c not in NON_TRAINING_CHANNELS]
    if len(data_channels) == 1:
        return data_channels[0]
    return TRAINING_CHANNEL_NAMES[0]  # missing: discover_channel names what is there


def discover_channel(
    paths: Paths, config: TrainingConfig, input_data_config: Mapping[str, Any], channel: str | None = None
) -> DatasetSpec:
    """Finds the channel's files and their format; pure Python, safe before TensorFlow starts.

    ``channel`` defaults to the training channel (:func:`resolve_train_channel`).

    Raises:
        DataError: the channel is missing, not declared, in Pipe mode, empty, or of unknown format.
    """
    channel = channel or resolve_train_channel(paths, config, input_data_config)
    declared = input_data_config.get(channel)
    if input_data_config and declared is None:
        raise DataError(
            f"Input channel {channel!r} is missing: inputdataconfig.json declares only "
            f"{', '.join(sorted(input_data_config)) or 'no channels'}. Pass the data as channel 'train' or "
            "'training' (or as the only data channel), or set the train_channel hyperparameter."
        )
    declared = declared or {}
    if str(declared.get("TrainingInputMode", "File")).lower() == "pipe":
        raise ConfigError(
            f"Input channel {channel!r} uses Pipe mode, which this trainer does not read; use File or FastFile."
        )
    directory = paths.channel_dir(channel)
    if not directory.is_dir():
        present = sorted(p.name for p in paths.data_dir.iterdir() if p.is_dir()) if paths.data_dir.is_dir() else []
        raise DataError(
            f"Input channel {channel!r} is missing: {directory} does not exist "
            f"(channels present under {paths.data_dir}: {', '.join(present) or 'none'})."
        )
    files = sorted(
        p
        for p in directory.rglob("*")
        if p.is_file()
        and not any(part.startswith(".") for part in p.relative_to(directory).parts)
        and p.relative_to(directory).as_posix() != manifest.STATISTICS_NAME
    )
    if not files:
        raise DataError(f"Input channel {channel!r} is empty: {directory} holds no files.")

    if config.data_format != "auto":
        data_format = config.data_format
    else:
        formats = {p: _format_of(p) for p in files}
        known = {f for f in formats.values() if f}
        content_type = str(declared.get("ContentType", "")).split(";")[0].strip().lower()
        if len(known) > 1:
            labels = " and ".join(sorted(FORMATS[f].label for f in known))
            raise DataError(
                f"Input channel {channel!r} at {directory} mixes {labels} files; "
                "keep one format per channel or set the data_format hyperparameter."
            )
        unknown = [p for p, f in formats.items() if f is None]
        by_content_type = {t: f.name for f in FORMATS.values() for t in f.content_types}
        if unknown and content_type in by_content_type:
            data_format = by_content_type[content_type]
        elif unknown:
            raise DataError(
                f"Cannot tell the format of {unknown[0]} in channel {channel!r}: name files *.csv or *.tfrecord, "
                "declare the channel's ContentType (text/csv or application/x-tfrecord), or set data_format."
            )
        else:
            data_format = known.pop()
    return DatasetSpec(
        channel=channel,
        directory=directory,
        data_format=data_format,
        files=tuple(DataFile(path=str(p)) for p in files),
    )


def discover_validation(
    paths: Paths, config: TrainingConfig, input_data_config: Mapping[str, Any], *, train_channel: str
) -> DatasetSpec | None:
    """The validation channel's files, if the job has that channel (declared, or its directory exists)."""
    channel = config.validation_channel
    if not channel or channel == train_channel:
        return None
    if input_data_config:
        if channel not in input_data_config:
            return None
    elif not paths.channel_dir(channel).is_dir():
        return None
    return discover_channel(paths, config, input_data_config, channel=channel)


# --- CSV -------------------------------------------------------------------------------------


def _unquoted(text: str) -> str:
    """A CSV field's value: ``"1.5"`` -> ``1.5`` (quoted fields, as csv.QUOTE_ALL writes them, parse as their value)."""
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1].replace('""', '"')
    return text


def _is_number(text: str) -> bool:
    try:
        float(_unquoted(text))
    except ValueError:
        return False
    return True


def _fits_float32(value: float) -> bool:
    """Whether a finite value stays finite as a float32 feature (TensorFlow parses features as float32)."""
    try:
        # Packing rounds as TensorFlow's parse does; older Pythons raise where newer ones give inf.
        return math.isfinite(struct.unpack("f", struct.pack("f", value))[0])
    except OverflowError:
        return False


def _numbered_header(fields: list[str]) -> bool:
    """Whether a line is exactly ``0,1,...,n-1``: the column names ``pandas.DataFrame.to_csv`` writes."""
    return len(fields) >= 2 and all(_unquoted(field) == str(index) for index, field in enumerate(fields))


def _csv_header_and_width(path: str) -> tuple[bool, int | None]:
    """Whether the file starts with a header, and the field count of its first data line."""
    with open(path, encoding="utf-8", errors="replace") as handle:
        lines = (line.rstrip("\r\n") for line in handle)
        first = next(lines, None)
        if first is None:
            return False, None
        fields = first.split(",")
        numbered = _numbered_header(fields)
        # A header has no numeric field; a first row with some numbers is data (maybe malformed),
        # except 0,1,...,n-1, which is what pandas writes for unnamed columns.
        if not first.strip() or (not numbered and any(_is_number(field) for field in fields)):
            return False, len(fields)
        if numbered:
            log(
                "WARNING",
                file=path,
                header=json.dumps(
                    f"line 1 of {path} is 0,1,...,{len(fields) - 1}, the column names pandas writes; it is taken "
                    "as a header, not as a row with label "
                    f"{len(fields) - 1}. Write the file with header=False or named columns to silence this."
                ),
            )
        second = next(lines, None)
        return True, len(second.split(",")) if second is not None else None


def _locate_csv_problem(file: DataFile, num_features: int, num_classes: int) -> str | None:
    """Walks a CSV file in Python to name the first bad line; only used after a failure."""
    with open(file.path, encoding="utf-8", errors="replace") as handle:
        for number, raw in enumerate(handle, start=1):
            if number == 1 and file.header:
                continue
            line = raw.rstrip("\r\n")
            where = f"{file.path} line {number}"
            if not line.strip():
                return f"Malformed CSV row in {where}: the line is empty"
            fields = line.split(",")
            if len(fields) != num_features + 1:
                return (
                    f"Malformed CSV row in {where}: {len(fields)} fields, expected {num_features + 1} "
                    f"({num_features} features and a label): {line[:120]!r}"
                )
            for column, text in enumerate(fields, start=1):
                if not _is_number(text) or not _unquoted(text):
                    return f"Malformed CSV row in {where}, column {column}: {text!r} is not a number"
                value = float(_unquoted(text))
                if not math.isfinite(value):
                    return f"Malformed CSV row in {where}, column {column}: {text!r} is not a finite number"
                if column <= num_features and not _fits_float32(value):
                    return (
                        f"Malformed CSV row in {where}, column {column}: {text!r} is beyond float32's range "
                        "(features are read as float32, |x| < 3.4e38): rescale the column"
                    )
            problem = _label_problem(float(_unquoted(fields[-1])), num_classes)
            if problem:
                return f"Malformed CSV row in {where}: label {fields[-1]!r} {problem}"
    return None


def _label_problem(label: float, num_classes: int) -> str | None:
    if not math.isfinite(label) or label != math.floor(label) or label < 0:
        return "is not a non-negative integer"
    if label > MAX_LABEL:
        return f"is too large for a class number (labels are 0..num_classes-1, at most {MAX_LABEL})"
    if num_classes and label >= num_classes:
        return f"is out of range for num_classes={num_classes}"
    return None


# --- TFRecord --------------------------------------------------------------------------------


def _example_problem(record: bytes, num_features: int, num_classes: int) -> str | None:
    import tensorflow as tf
    from google.protobuf.message import DecodeError

    try:
        example = tf.train.Example.FromString(record)
    except DecodeError:
        return "is not a serialized tf.train.Example"
    feature = example.features.feature
    if FEATURES_KEY not in feature or LABEL_KEY not in feature:
        return f"lacks the {FEATURES_KEY!r} (float list) or {LABEL_KEY!r} (int64) feature"
    values = feature[FEATURES_KEY].float_list.value
    labels = feature[LABEL_KEY].int64_list.value
    if len(values) != num_features:
        return f"has {len(values)} values in {FEATURES_KEY!r}, expected {num_features}"
    if len(labels) != 1:
        return f"has {len(labels)} values in {LABEL_KEY!r}, expected one int64"
    if not all(math.isfinite(v) for v in values):
        return f"has a non-finite value in {FEATURES_KEY!r}"
    problem = _label_problem(float(labels[0]), num_classes)
    return f"has label {labels[0]} that {problem}" if problem else None


def _locate_tfrecord_problem(file: DataFile, num_features: int, num_classes: int) -> str | None:
    """Walks a TFRecord file record by record to name the first bad one; only used after a failure."""
    import tensorflow as tf

    iterator = iter(tf.data.TFRecordDataset(file.path))
    index = 0
    while True:
        try:
            record = next(iterator)
        except StopIteration:
            return None
        except tf.errors.OpError as err:
            return f"Corrupt TFRecord file {file.path}: record {index} is damaged or truncated ({_first_line_of(err)})"
        problem = _example_problem(record.numpy(), num_features, num_classes)
        if problem:
            return f"Malformed record in {file.path}: record {index} {problem}"
        index += 1


def check_tfrecord_size(path: str, consumed: int, records: int) -> None:
    """Fails if a TFRecord file has bytes after its last whole record.

    TensorFlow's reader takes a file that ends inside a record header (its first 12 bytes) as a
    clean end of file, so a shard cut there would silently lose the rest of its records.

    Raises:
        DataError: naming the file, the byte offset where the stray bytes start, and the record.
    """
    size = os.path.getsize(path)
    if size != consumed:
        raise DataError(
            f"Corrupt TFRecord file {path}: {size - consumed} byte(s) at byte offset {consumed} do not make a "
            f"record (record {records} is cut inside its header): the file is truncated or damaged."
        )


def _first_tfrecord_width(files: tuple[DataFile, ...]) -> int | None:
    import tensorflow as tf

    for file in files:
        try:
            for record in tf.data.TFRecordDataset(file.path).take(1):
                example = tf.train.Example.FromString(record.numpy())
                if FEATURES_KEY not in example.features.feature:
                    return None  # the scan names the record
                return len(example.features.feature[FEATURES_KEY].float_list.value)
        except Exception:  # noqa: BLE001 - the scan below reports this file precisely
            return None
    return None


def _first_line_of(err: Exception) -> str:
    message = getattr(err, "message", None) or str(err)
    return message.strip().splitlines()[0] if message.strip() else type(err).__name__


# --- parsing (shared by the scan and the training pipeline) ----------------------------------


def _parse_csv(num_features: int) -> Any:
    import tensorflow as tf

    # Empty defaults make every field required: an empty field is malformed, not zero.
    defaults = [tf.constant([], tf.float32)] * num_features + [tf.constant([], tf.float64)]

    def parse_csv(lines: Any) -> Any:
        columns = tf.io.decode_csv(lines, record_defaults=defaults)
        return tf.stack(columns[:-1], axis=1), columns[-1]

    return parse_csv


def _parse_tfrecord(num_features: int) -> Any:
    import tensorflow as tf

    spec = {
        FEATURES_KEY: tf.io.FixedLenFeature([num_features], tf.float32),
        LABEL_KEY: tf.io.FixedLenFeature([], tf.int64),
    }

    def parse_examples(records: Any) -> Any:
        parsed = tf.io.parse_example(records, spec)
        return parsed[FEATURES_KEY], tf.cast(parsed[LABEL_KEY], tf.float64)

    return parse_examples


def _read_csv(path: Any, header: Any) -> Any:
    import tensorflow as tf

    # No per-line filter (blank lines are malformed rows): it would cost more than the parse.
    return tf.data.TextLineDataset(path).skip(header)


def _read_tfrecord(path: Any, header: Any) -> Any:
    import tensorflow as tf

    return tf.data.TFRecordDataset(path)


def _inspect_csv(directory: Path, files: tuple[DataFile, ...]) -> tuple[tuple[DataFile, ...], int]:
    shapes = [_csv_header_and_width(f.path) for f in files]
    files = tuple(replace(f, header=header) for f, (header, _) in zip(files, shapes, strict=True))
    widths = [w for _, w in shapes if w is not None]
    num_features = widths[0] - 1 if widths else 0
    if widths and num_features < 1:
        raise DataError(f"CSV files in {directory} need at least one feature column before the label column.")
    return files, num_features


def _inspect_tfrecord(directory: Path, files: tuple[DataFile, ...]) -> tuple[tuple[DataFile, ...], int]:
    return files, _first_tfrecord_width(files) or 0


@dataclass(frozen=True)
class RecordFormat:
    """A file format of feature rows: the hook another format implements, then registers.

    Every function works on one format's records (a CSV line, a serialized ``tf.train.Example``);
    the scan, the training pipeline (shuffle, batch, then ``parse`` a whole batch at once) and
    the error reports are shared.

    Attributes:
        name: The ``data_format`` hyperparameter's value.
        label: How messages name the format.
        suffixes: File name endings that imply the format.
        content_types: Channel ContentTypes (inputdataconfig.json) that imply it.
        read: ``read(path, header) -> tf.data.Dataset`` of one file's records, one per example
            (``header``: lines to skip).
        parse: ``parse(num_features)`` -> ``fn(records [B]) -> (features float32 [B, F],
            labels float64 [B])``, vectorised over a batch.
        inspect: ``inspect(directory, files) -> (files, num_features)``: header flags and the
            feature width, from the first records of the files only.
        locate_problem: ``locate(file, num_features, num_classes) -> str | None``: walks one file
            in Python to name its first bad line or record (after a failure only).
        check_end: ``check_end(path, framed_bytes, records)`` after a scan has read a whole file,
            or None: raises DataError if the file holds bytes its reader skipped.
    """

    name: str
    label: str
    suffixes: tuple[str, ...]
    content_types: tuple[str, ...]
    read: Any
    parse: Any
    inspect: Any
    locate_problem: Any
    check_end: Any = None


FORMATS: dict[str, RecordFormat] = {}


def register_format(record_format: RecordFormat) -> None:
    """Makes a format known to discovery, the scan and the pipeline."""
    FORMATS[record_format.name] = record_format


def _parse_batch(data_format: str, num_features: int) -> Any:
    """Returns ``fn(serialized_batch) -> (features float32 [B, F], labels float64 [B])``."""
    return FORMATS[data_format].parse(num_features)


def _read_file(data_format: str) -> Any:
    return FORMATS[data_format].read


def scan_channel(spec: DatasetSpec, num_classes: int) -> DatasetSpec:
    """Reads every file once: counts, feature width, classes, and the first bad row if any.

    Raises:
        DataError: naming the file and line/record of a malformed row or corrupt record, or
            saying the channel holds no examples.
    """
    import tensorflow as tf

    record_format = FORMATS[spec.data_format]
    files, num_features = record_format.inspect(spec.directory, spec.files)
    locate = record_format.locate_problem
    parse = _parse_batch(spec.data_format, max(num_features, 1))
    read = _read_file(spec.data_format)

    def accumulate(state: Any, batch: Any) -> Any:
        (features, labels), size = batch
        count, high, bad, consumed, runs = state
        # NaN fails the floor test, inf the bound: neither may reach the class count.
        bad_labels = tf.logical_or(
            tf.logical_or(labels < 0, labels > MAX_LABEL), tf.not_equal(labels, tf.floor(labels))
        )
        bad_rows = tf.logical_or(bad_labels, tf.reduce_any(tf.logical_not(tf.math.is_finite(features)), axis=1))
        return (
            count + tf.cast(tf.size(labels), tf.int64),
            tf.maximum(high, tf.reduce_max(labels)),
            bad + tf.reduce_sum(tf.cast(bad_rows, tf.int64)),
            consumed + size,
            _label_runs(runs, labels),
        )

    def file_stats(path: Any, header: Any) -> Any:
        # Bytes as TFRecord framing counts them (length, CRCs: 16 bytes around each record).
        batches = read(path, header).batch(SCAN_BATCH).map(
            lambda lines: (parse(lines), tf.reduce_sum(tf.cast(tf.strings.length(lines), tf.int64) + 16))
        )
        zero = tf.constant(0, tf.int64)
        no_label = tf.constant(math.nan, tf.float64)
        runs = (no_label, zero, zero, no_label)
        return batches.reduce((zero, tf.constant(-math.inf, tf.float64), zero, zero, runs), accumulate)

    # One pipeline over all files (per-file statistics, files scanned in parallel) rather than
    # one per file: building and tracing a pipeline per file costs more than reading a shard.
    stats = tf.data.Dataset.from_tensor_slices(
        (tf.constant([f.path for f in files]), tf.constant([int(f.header) for f in files], tf.int64))
    ).map(file_stats, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    try:
        per_file = [
            (int(n), float(high), int(bad), int(size), (int(runs[2]), float(runs[3])))
            for n, high, bad, size, runs in stats.as_numpy_iterator()
        ]
    except tf.errors.OpError as err:
        # The error does not say which file; walking them in Python does, with the line or record.
        for file in files:
            problem = locate(file, num_features, num_classes)
            if problem:
                raise DataError(problem) from err
        raise DataError(
            f"Could not read the {spec.data_format} files in {spec.directory}: {_first_line_of(err)}"
        ) from err

    scanned = []
    highest = -math.inf
    label_run = None
    for file, (count, high, bad, consumed, (run, run_label)) in zip(files, per_file, strict=True):
        if run and (label_run is None or run > label_run[1]):
            label_run = (file.path, run, int(run_label))
        if record_format.check_end is not None:
            record_format.check_end(file.path, consumed, count)
        if bad or (num_classes and count and high >= num_classes):
            raise DataError(
                locate(file, num_features, num_classes) or f"File {file.path} holds an invalid label or feature value."
            )
        highest = max(highest, high) if count else highest
        scanned.append(replace(file, examples=count))

    result = replace(spec, files=tuple(scanned), num_features=num_features, scanned=True, label_run=label_run)
    if result.examples == 0:
        raise DataError(
            f"Input channel {spec.channel!r} at {spec.directory} holds {len(files)} file(s) but no examples "
            f"({spec.data_format}{', header lines only' if spec.data_format == 'csv' else ''}); the dataset is empty."
        )
    inferred = int(highest) + 1
    if num_classes == 0 and inferred < 2:
        raise DataError(
            f"Every label in channel {spec.channel!r} is {int(highest)}: a classifier needs at least 2 classes "
            "(or set the num_classes hyperparameter)."
        )
    return replace(result, num_classes=num_classes or inferred)


def _label_runs(state: Any, labels: Any) -> Any:
    """Carries ``(last label, current run, longest run, its label)`` over one more batch of a file's labels.

    Vectorised: a run starts where a label differs from the one before it; each row's run length
    is its distance from its run's start, plus the carried run for rows that continue it.
    """
    import tensorflow as tf

    last, current, longest, longest_label = state
    size = tf.size(labels, out_type=tf.int64)
    previous = tf.concat([tf.reshape(last, [1]), labels[:-1]], axis=0)
    starts = tf.not_equal(labels, previous)  # NaN (no row yet) differs from every label
    run_of = tf.cumsum(tf.cast(starts, tf.int64))  # 0: the rows that continue the carried run
    positions = tf.range(size, dtype=tf.int64)
    first = tf.math.unsorted_segment_min(positions, run_of, size + 1)
    lengths = positions - tf.gather(first, run_of) + 1 + tf.where(run_of == 0, current, tf.zeros_like(current))
    at = tf.argmax(lengths, output_type=tf.int64)
    better = lengths[at] > longest
    return (
        labels[-1],
        lengths[-1],
        tf.where(better, lengths[at], longest),
        tf.where(better, labels[at], longest_label),
    )


def label_order_warning(spec: DatasetSpec, *, shuffle_buffer: int, cached: bool) -> str | None:
    """One line when streamed rows would reach training in long runs of one label, else None.

    Streamed (not ``cached``), rows are mixed only within the shuffle buffer, so a file with more
    rows of one label in a row than the buffer holds (a CSV sorted by label) trains one class per
    batch for a while; cached rows are permuted over the whole epoch. Known only after a scan.
    """
    if cached or spec.label_run is None or spec.label_run[1] <= shuffle_buffer:
        return None
    path, rows, label = spec.label_run
    return (
        f"{path} holds {rows} rows in a row with label {label}, more than shuffle_buffer={shuffle_buffer}: the channel "
        "is streamed (larger than cache_max_mb), so rows mix only within the shuffle buffer and batches may hold "
        "one class at a time. Shuffle the rows before training (the processing job writes its shards in a random "
        "order), or raise cache_max_mb or shuffle_buffer."
    )


# --- counts without a scan: the channel manifest ---------------------------------------------


def manifest_of(spec: DatasetSpec) -> manifest.Manifest:
    """The manifest of a scanned channel."""
    assert spec.scanned, "only a scanned channel has counts to record"
    return manifest.Manifest(
        data_format=spec.data_format,
        num_features=spec.num_features,
        num_classes=spec.num_classes,
        files=tuple(
            manifest.FileEntry(
                path=str(Path(f.path).relative_to(spec.directory)),
                examples=f.examples,
                bytes=os.path.getsize(f.path),
                header=f.header,
            )
            for f in spec.files
        ),
    )


def _from_manifest(spec: DatasetSpec, num_classes: int) -> tuple[DatasetSpec | None, str]:
    """The channel counted from its manifest, or None and why the manifest cannot be used."""
    try:
        recorded = manifest.read(spec.directory)
    except ValueError as err:
        return None, str(err)
    if recorded is None:
        return None, f"no {manifest.MANIFEST_NAME} in {spec.directory}"
    if recorded.data_format != spec.data_format:
        return None, f"the manifest is for {recorded.data_format} files, the channel holds {spec.data_format}"
    entries = {entry.path: entry for entry in recorded.files}
    files = []
    for file in spec.files:
        entry = entries.pop(str(Path(file.path).relative_to(spec.directory)), None)
        if entry is None:
            return None, f"the manifest does not list {file.path}"
        size = os.path.getsize(file.path)
        if size != entry.bytes:
            return None, f"{file.path} is {size} bytes, the manifest recorded {entry.bytes}"
        files.append(replace(file, examples=entry.examples, header=entry.header))
    if entries:
        return None, f"the manifest lists {len(entries)} file(s) the channel lacks, e.g. {next(iter(entries))}"
    counted = replace(
        spec,
        files=tuple(files),
        num_features=recorded.num_features,
        num_classes=num_classes or recorded.num_classes,
        scanned=True,
    )
    return counted, ""


def count_channel(spec: DatasetSpec, num_classes: int) -> DatasetSpec:
    """Counts and shapes from the channel's manifest when it matches the files, else from a scan.

    With a manifest nothing is read before training (start-up does not grow with the data);
    bad rows are then found by the training pipeline itself (:func:`checked_batch`) and named
    by :func:`locate_problem`.

    Raises:
        DataError: as :func:`scan_channel`, or the manifest records no examples.
    """
    counted, reason = _from_manifest(spec, num_classes)
    if counted is None:
        log("scan", channel=spec.channel, reason=json.dumps(reason),
            hint=json.dumps(f"python -m trainer.datasets.manifest DIR writes {manifest.MANIFEST_NAME}; then no scan"))  # fmt: skip
        return scan_channel(spec, num_classes)
    if counted.examples == 0:
        raise DataError(
            f"Input channel {spec.channel!r} at {spec.directory} holds {len(spec.files)} file(s) but no examples "
            f"(per {manifest.MANIFEST_NAME}); the dataset is empty."
        )
    log("manifest", channel=spec.channel, files=len(counted.files), examples=counted.examples)
    return counted


def locate_problem(spec: DatasetSpec) -> str | None:
    """Walks the channel's files in Python to name the first bad line or record; after a failure only."""
    locate = FORMATS[spec.data_format].locate_problem
    for file in spec.files:
        problem = locate(file, spec.num_features, spec.num_classes)
        if problem:
            return problem
    return None


# --- sharding and the training pipeline ------------------------------------------------------


@dataclass(frozen=True)
class ShardPlan:
    """What one input pipeline (one worker) reads.

    Attributes:
        by_file: Whether the worker reads only its own files (else it reads every file and keeps
            every n-th example).
        files: The files this pipeline opens.
        examples: The examples this pipeline yields per epoch before batching.
    """

    by_file: bool
    files: tuple[DataFile, ...]
    examples: int


def plan_shards(spec: DatasetSpec, num_pipelines: int) -> tuple[ShardPlan, ...]:
    """Splits the files over the workers' input pipelines, deterministically on every worker.

    Files go to the least-loaded worker, largest first. If that would leave a worker with much
    less data than the others (fewer files than workers, or very uneven files), every worker
    reads all files and keeps every n-th example instead, so no data is wasted.
    """
    files = [f for f in spec.files if f.examples > 0]
    if num_pipelines == 1:
        return (ShardPlan(by_file=False, files=tuple(files), examples=spec.examples),)
    if len(files) >= num_pipelines:
        loads = [0] * num_pipelines
        assigned: list[list[DataFile]] = [[] for _ in range(num_pipelines)]
        for file in sorted(files, key=lambda f: (-f.examples, f.path)):
            target = loads.index(min(loads))
            assigned[target].append(file)
            loads[target] += file.examples
        if min(loads) * num_pipelines >= MIN_FILE_SHARDING_EFFICIENCY * spec.examples:
            return tuple(
                ShardPlan(by_file=True, files=tuple(sorted(group, key=lambda f: f.path)), examples=load)
                for group, load in zip(assigned, loads, strict=True)
            )
    return tuple(
        ShardPlan(by_file=False, files=tuple(files), examples=len(range(index, spec.examples, num_pipelines)))
        for index in range(num_pipelines)
    )


def steps_per_epoch(plans: tuple[ShardPlan, ...], per_pipeline_batch: int) -> int:
    """Global steps per epoch: equal on every worker, so no worker waits in an all-reduce alone."""
    return min(plan.examples // per_pipeline_batch for plan in plans)


def make_dataset(
    spec: DatasetSpec,
    plan: ShardPlan,
    *,
    pipeline_index: int,
    num_pipelines: int,
    per_replica_batch: int,
    batches: int,
    shuffle_buffer: int,
    seed: int,
    epoch: int,
    skip_batches: Any = 0,
) -> Any:
    """One epoch of per-replica batches ``(features float32 [B, F], labels int32 [B])``.

    The order depends only on ``seed`` and ``epoch``, so a resumed run replays the same epochs.
    ``skip_batches``: the epoch's first batches left out unparsed (a run resumed in the middle of it).
    """
    import tensorflow as tf

    paths = tf.constant([f.path for f in plan.files])
    headers = tf.constant([int(f.header) for f in plan.files], tf.int64)
    files = tf.data.Dataset.from_tensor_slices((paths, headers))
    # Every worker shuffles the file list with the same seed, so data sharding stays a partition.
    files = files.shuffle(len(plan.files), seed=seed + epoch)
    records = files.interleave(
        _read_file(spec.data_format),
        cycle_length=min(len(plan.files), 16),
        num_parallel_calls=tf.data.AUTOTUNE,
        # Data sharding keeps every n-th record, which needs the same order on every worker.
        deterministic=not plan.by_file,
    )
    if not plan.by_file and num_pipelines > 1:
        records = records.shard(num_pipelines, pipeline_index)
    records = records.shuffle(shuffle_buffer, seed=seed * 7919 + epoch)
    to_training = checked_batch(spec)

    lines = records.batch(per_replica_batch, drop_remainder=True).take(batches).skip(skip_batches)
    return lines.map(to_training, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


def plan_bytes(plan: ShardPlan) -> int:
    """Bytes on disk of the files a pipeline opens (a stat per file, no read)."""
    return sum(os.path.getsize(f.path) for f in plan.files)


def make_epochs(
    spec: DatasetSpec,
    plan: ShardPlan,
    *,
    first_epoch: int,
    last_epoch: int,
    cache: bool = False,
    first_epoch_skip: int = 0,
    **kwargs: Any,
) -> Any:
    """Epochs ``first_epoch..last_epoch`` of training batches back to back, as one dataset.

    One stream rather than one per epoch: the prefetch fills the next epoch's shuffle buffer
    while the current epoch trains, so an epoch boundary costs no stall. Each epoch's order is a
    function of ``seed`` and its number only, so a resumed run replays it exactly.

    With ``cache``, the pipeline's examples are parsed once (in file order, in batches) and kept
    in memory as two tensors (features ``[N, F]``, labels ``[N]``); every epoch is a fresh
    permutation of all ``N`` (``tf.random.experimental.index_shuffle`` keyed by ``seed`` and the
    epoch), gathered batch by batch, with no file read or parse. A bounded shuffle buffer would
    only mix neighbouring rows: a file sorted by label would train in label order. The first
    batch waits for the whole pipeline to be parsed (the permutation draws from all of it).
    Without ``cache``, every epoch is :func:`make_dataset`. ``first_epoch_skip``: the first epoch's
    first batches left out (a run resumed in the middle of it); the rest are the epoch's own.
    """
    import tensorflow as tf

    epochs = tf.data.Dataset.range(first_epoch, last_epoch + 1)
    # An epoch short of batches (counts that promise more than the files hold) must fail, not
    # let the next epoch's batches slide into it.
    exactly = tf.data.experimental.assert_cardinality(kwargs["batches"])

    def skipped(epoch: Any) -> Any:
        return tf.where(tf.equal(epoch, first_epoch), tf.constant(first_epoch_skip, tf.int64), tf.constant(0, tf.int64))

    if not cache:
        return epochs.flat_map(
            lambda epoch: make_dataset(spec, plan, epoch=epoch, skip_batches=skipped(epoch), **kwargs).apply(
                tf.data.experimental.assert_cardinality(kwargs["batches"] - skipped(epoch))
            )
        ).prefetch(tf.data.AUTOTUNE)
    table = _parsed_table(spec, plan, kwargs["pipeline_index"], kwargs["num_pipelines"]).cache()
    seed = kwargs["seed"]
    per_replica_batch, batches = kwargs["per_replica_batch"], kwargs["batches"]

    def epoch_batches(epoch: Any) -> Any:
        key = tf.stack([tf.constant(seed, tf.int64), tf.cast(epoch, tf.int64)])

        def permuted(features: Any, labels: Any) -> Any:
            count = tf.shape(labels, out_type=tf.int64)[0]

            def gather(step: Any) -> Any:
                # Positions step*B .. step*B+B-1 of the epoch's permutation of all the rows.
                positions = tf.range(step * per_replica_batch, (step + 1) * per_replica_batch, dtype=tf.int64)
                rows = tf.random.experimental.index_shuffle(positions, key, count - 1)
                return tf.gather(features, rows), tf.gather(labels, rows)

            # At most the epoch's batches, here rather than by a take() after the flat_map: a take
            # would stop before the cached table's iterator reached its end, and tf.data drops a
            # cache whose first reader did not finish (every epoch would read the files again).
            steps = tf.minimum(count // per_replica_batch, batches)
            return tf.data.Dataset.range(steps).map(gather, num_parallel_calls=tf.data.AUTOTUNE)

        return table.flat_map(permuted).apply(exactly).skip(skipped(epoch))

    return epochs.flat_map(epoch_batches).prefetch(tf.data.AUTOTUNE)


def _parsed_table(spec: DatasetSpec, plan: ShardPlan, pipeline_index: int, num_pipelines: int) -> Any:
    """One element: the pipeline's examples as ``(features [N, F], labels int32 [N])``, in file order."""
    import tensorflow as tf

    paths = tf.constant([f.path for f in plan.files])
    headers = tf.constant([int(f.header) for f in plan.files], tf.int64)
    records = tf.data.Dataset.from_tensor_slices((paths, headers)).interleave(
        _read_file(spec.data_format),
        cycle_length=min(len(plan.files), 16),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
    if not plan.by_file and num_pipelines > 1:
        records = records.shard(num_pipelines, pipeline_index)
    parsed = records.batch(SCAN_BATCH).map(checked_batch(spec), num_parallel_calls=tf.data.AUTOTUNE)
    # Every parsed batch into one element, a single copy (batching row by row costs ~1 us a row). The
    # batch count bounds ragged_batch's size: a huge one would be reserved up front. Files that
    # hold more rows than counted leave a second element, which take(1) drops.
    whole = parsed.ragged_batch(max(plan.examples, 1) // SCAN_BATCH + 2)
    return whole.take(1).map(lambda features, labels: (features.values, labels.values))


def checked_batch(spec: DatasetSpec) -> Any:
    """``fn(serialized_batch) -> (features, labels int32)`` that fails on a bad value.

    A non-finite feature, or a label that is negative, fractional or not below
    ``spec.num_classes``, raises InvalidArgumentError in the pipeline; without a scan this is
    where bad rows are met, and :func:`locate_problem` then names the file and line or record.
    """
    import tensorflow as tf

    parse = _parse_batch(spec.data_format, spec.num_features)

    def to_training(lines: Any) -> Any:
        features, labels = parse(lines)
        valid = tf.reduce_all(
            [
                tf.reduce_all(tf.math.is_finite(features)),
                tf.reduce_all(labels >= 0),
                tf.reduce_all(tf.equal(labels, tf.floor(labels))),
                tf.reduce_all(labels < spec.num_classes),
            ]
        )
        check = tf.debugging.Assert(valid, ["invalid feature value or label in channel", spec.channel])
        with tf.control_dependencies([check]):
            return tf.identity(features), tf.cast(labels, tf.int32)

    return to_training


def make_eval_dataset(spec: DatasetSpec, batch_size: int) -> Any:
    """Every example of ``spec`` once, in file order, in batches of ``batch_size`` (the last may be short)."""
    import tensorflow as tf

    paths = tf.constant([f.path for f in spec.files])
    headers = tf.constant([int(f.header) for f in spec.files], tf.int64)
    records = tf.data.Dataset.from_tensor_slices((paths, headers)).interleave(
        _read_file(spec.data_format), cycle_length=1, deterministic=True
    )
    return records.batch(batch_size).map(checked_batch(spec), num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


register_format(
    RecordFormat(
        name="csv",
        label="CSV",
        suffixes=(".csv",),
        content_types=("text/csv",),
        read=_read_csv,
        parse=_parse_csv,
        inspect=_inspect_csv,
        locate_problem=_locate_csv_problem,
    )
)
register_format(
    RecordFormat(
        name="tfrecord",
        label="TFRecord",
        suffixes=(".tfrecord", ".tfrecords", ".tfr"),
        content_types=("application/x-tfrecord", "application/x-tfexample"),
        read=_read_tfrecord,
        parse=_parse_tfrecord,
        inspect=_inspect_tfrecord,
        locate_problem=_locate_tfrecord_problem,
        check_end=check_tfrecord_size,
    )
)
