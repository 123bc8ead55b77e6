"""Image classification datasets: discovery, cheap counts, and the tf.data pipeline.

Two layouts, the ones people already have:

- ``image-tfrecord``: TFRecord shards of ``tf.train.Example`` with the encoded image (JPEG or
  PNG) under ``image/encoded`` and the class under ``image/class/label`` (int64), the keys the
  TensorFlow/TPU ImageNet tooling writes (``imagenet_to_gcs.py``). That tooling numbers classes
  from 1 (0 was "background"); its readers subtract 1. ``label_base`` says where the data's
  numbering starts (the manifest's, else the ``image_label_base`` hyperparameter, else 1).
  Shards may lack a suffix (``train-00000-of-01024``): the first record tells.
  The processing mode's ``--image-encoding raw`` writes *training-ready* shards instead: decoded,
  resized pictures as raw uint8 bytes (``image/raw``, row-major HWC) with ``image/shape``
  ``[H, W, 3]``, every picture the same shape (``manifest.json`` records ``encoding: raw`` and
  ``image_shape``). Their pipeline parses and reshapes whole batches (no JPEG decode, no Python per
  example) and crops and flips whole batches (``crop_and_resize``), so the CPU keeps up with a GPU.
- ``image-dir``: one sub-directory per class holding ``.jpg``/``.jpeg``/``.png`` files; the
  sorted sub-directory names are the classes, label ``i`` is the ``i``-th name (what Keras'
  ``image_dataset_from_directory`` does). A validation channel is labelled by name in the
  training channel's classes (``class_names``), never by its own listing: it may lack classes,
  and a directory that is not a training class is refused. Shards whose manifest names their
  classes (the processing mode's) must number them as the training channel does.

Nothing reads every image before training. Counts come from the file listing (``image-dir``),
from ``manifest.json`` beside the shards (written by ``trainer.datasets.synthetic``; per-shard records
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
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.contract.errors import DataError
from trainer.contract.hyperparameters import TrainingConfig
from trainer.datasets.manifest import STATISTICS_NAME

IMAGE_KEY = "image/encoded"
RAW_KEY = "image/raw"
SHAPE_KEY = "image/shape"
LABEL_KEY = "image/class/label"
ENCODINGS = ("encoded", "raw")
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
# Pixels a raw-record pipeline holds in its shuffle buffer at most.
RAW_SHUFFLE_BYTES = 512 * 2**20
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
        class_names: The class names in label order: ``image-dir``'s class sub-directories (a
            validation channel's are the training channel's), ``image-tfrecord``'s from its
            manifest when it names them (the processing mode's do); else empty.
        label_base: ``image-tfrecord``: the label value of class 0 (subtracted when reading).
        encoding: ``image-tfrecord``: ``encoded`` (JPEG/PNG bytes under ``image/encoded``) or
            ``raw`` (decoded uint8 pixels under ``image/raw``, all of ``image_shape``).
        image_shape: ``raw`` records: ``(height, width, channels)`` of every picture.
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
    encoding: str = "encoded"
    image_shape: tuple[int, ...] = ()

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
        if record is not None and (IMAGE_KEY.encode() in record or RAW_KEY.encode() in record):
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


def _proto_fields(buffer: bytes) -> list[tuple[int, int | bytes]]:
    """``(field number, value)`` of one protobuf message: varints as int, length-delimited as bytes."""
    fields: list[tuple[int, int | bytes]] = []
    position = 0

    def varint() -> int:
        nonlocal position
        value = shift = 0
        while True:
            if position >= len(buffer):
                raise ValueError("message ends inside a varint")
            byte = buffer[position]
            position += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while position < len(buffer):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            fields.append((number, varint()))
        elif wire == 2:
            length = varint()
            fields.append((number, buffer[position : position + length]))
            position += length
        elif wire in (1, 5):
            position += 8 if wire == 1 else 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
    return fields


def raw_record_shape(record: bytes) -> tuple[int, ...] | None:
    """``image/shape`` of one serialized ``tf.train.Example`` in pure Python; None if it has none."""
    try:
        for _, features in _proto_fields(record):
            for _, entry in _proto_fields(features):  # type: ignore[arg-type]
                parts = dict(_proto_fields(entry))  # type: ignore[arg-type]
                if parts.get(1) != SHAPE_KEY.encode():
                    continue
                for number, value_list in _proto_fields(parts[2]):  # type: ignore[arg-type]
                    if number != 3:
                        return None
                    values: list[int] = []
                    for _, item in _proto_fields(value_list):  # type: ignore[arg-type]
                        # Unpacked (one varint per value) or packed (one length-delimited run).
                        values.extend([item] if isinstance(item, int) else _packed_varints(item))
                    return tuple(values)
    except (ValueError, TypeError):
        return None
    return None


def _packed_varints(payload: bytes) -> list[int]:
    values, value, shift = [], 0, 0
    for byte in payload:
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            values.append(value)
            value = shift = 0
    return values


def _record_encoding(shard: Path) -> tuple[str, tuple[int, ...]]:
    """``("raw", shape)`` when the shard's first record holds raw pixels, else ``("encoded", ())``."""
    record = first_record(shard)
    if record is None or RAW_KEY.encode() not in record:
        return "encoded", ()
    shape = raw_record_shape(record)
    if not shape or len(shape) != 3 or min(shape) <= 0:
        raise DataError(
            f"TFRecord file {shard}: record 0 holds {RAW_KEY!r} pixels but no valid int64 {SHAPE_KEY!r} "
            f"[height, width, channels] (got {shape}); rewrite the shards with the processing mode."
        )
    return "raw", shape


def write_manifest(directory: Path, *, num_classes: int, label_base: int, class_names: Sequence[str] = ()) -> Path:
    """Writes ``manifest.json`` for the shards in ``directory``: records and bytes per shard.

    Raw-pixel shards (``image/raw``) also get ``encoding: raw`` and ``image_shape``, read off the
    first record. ``class_names`` (label order, when the labels came from names) are recorded
    so that another channel's shards can be checked to number the same classes the same way.
    """
    shards = {p.relative_to(directory).as_posix(): p for p in _data_files(directory)}
    encoding, shape = _record_encoding(next(iter(shards.values()))) if shards else ("encoded", ())
    body = {
        "format": "image-tfrecord",
        "num_classes": num_classes,
        "label_base": label_base,
        "encoding": encoding,
        **({"image_shape": list(shape)} if shape else {}),
        **({"class_names": list(class_names)} if class_names else {}),
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
    class_names: Sequence[str] = (),
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
        class_names: A validation channel's: the training channel's classes (empty: its own).
            A class directory is labelled by its name's place in them, not by its place among
            the channel's own directories; shards must number them the same way.

    Raises:
        DataError: naming the file or directory that does not fit the layout, or a class that
            is not one of ``class_names``.
    """
    files = _data_files(directory)
    if not files:
        raise DataError(f"Input channel {channel!r} is empty: {directory} holds no files.")
    if data_format == "image-dir":
        return _discover_dir(directory, files, channel=channel, num_classes=num_classes, known_classes=tuple(class_names))
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
    named = tuple(str(name) for name in (manifest or {}).get("class_names") or ())
    if class_names and named:
        _check_numbering(directory, channel, named, tuple(class_names))
        # Numbered as the training channel numbers them: its classes, even those this one lacks.
        named, classes = tuple(class_names), num_classes or len(class_names)
    if classes < 2:
        raise DataError(
            f"Input channel {channel!r} holds image TFRecords without a manifest naming the classes: set the "
            "num_classes hyperparameter (labels are not scanned before training)."
        )
    base = label_base if label_base is not None else int((manifest or {}).get("label_base", DEFAULT_LABEL_BASE))
    if total == 0:
        raise DataError(f"Input channel {channel!r} at {directory} holds {len(files)} shard(s) but no records.")
    if manifest is not None and "encoding" in manifest:
        encoding = str(manifest["encoding"])
        shape = tuple(int(n) for n in manifest.get("image_shape") or ())
        if encoding not in ENCODINGS or (encoding == "raw" and (len(shape) != 3 or min(shape) <= 0)):
            raise DataError(
                f"The manifest {directory / MANIFEST_NAME} has encoding {encoding!r} and image_shape "
                f"{manifest.get('image_shape')!r}: expected encoding one of {ENCODINGS} and, for raw, "
                "image_shape [height, width, channels]. Rewrite or remove the manifest."
            )
    else:
        encoding, shape = _record_encoding(files[0])
    if encoding == "raw" and shape[2] != 3:
        raise DataError(
            f"Input channel {channel!r} holds raw image records of shape {list(shape)}: the image models take "
            "3 channels (RGB); rewrite the shards with the processing mode."
        )
    return ImageDataset(
        channel=channel,
        directory=directory,
        data_format=data_format,
        files=tuple(str(p) for p in files),
        labels=(),
        counts=counts,
        examples=total,
        num_classes=classes,
        class_names=named,
        label_base=base,
        encoding=encoding,
        image_shape=shape,
    )


def _known_classes(class_names: Sequence[str]) -> str:
    """The training classes for a one-line message: all of them, or the first 20 and how many."""
    shown = ", ".join(class_names[:20])
    return shown if len(class_names) <= 20 else f"{shown}, ... ({len(class_names)} in all)"


def _check_numbering(directory: Path, channel: str, named: tuple[str, ...], known: tuple[str, ...]) -> None:
    """Shards whose manifest names their classes must number them as the training channel does."""
    for label, name in enumerate(named):
        if label < len(known) and known[label] == name:
            continue
        if name in known:
            problem = f"numbers class {name!r} {label}, the training channel {known.index(name)}"
        else:
            problem = f"names class {name!r}, which is not a class of the training channel"
        raise DataError(
            f"Image channel {channel!r}: the manifest {directory / MANIFEST_NAME} {problem} (training classes: "
            f"{_known_classes(known)}); write both channels' records from the same class list (one processing "
            "run writes both)."
        )


def _discover_dir(
    directory: Path, files: list[Path], *, channel: str, num_classes: int, known_classes: tuple[str, ...] = ()
) -> ImageDataset:
    """The class sub-directories; labels by name in ``known_classes`` when given (validation), else sorted."""
    stray = [p for p in files if len(p.relative_to(directory).parts) != 2]
    if stray:
        raise DataError(
            f"Image channel {channel!r}: {stray[0]} is not directly inside a class sub-directory of {directory} "
            "(expected <channel>/<class name>/<image>)."
        )
    odd = [p for p in files if p.suffix.lower() not in IMAGE_SUFFIXES]
    if odd:
        raise DataError(f"Image channel {channel!r}: {odd[0]} is not a .jpg, .jpeg or .png file.")
    found = sorted({p.parent.name for p in files})
    if known_classes:
        unknown = [name for name in found if name not in known_classes]
        if unknown:
            raise DataError(
                f"Image channel {channel!r}: class directory {directory / unknown[0]} is not a class of the "
                f"training channel ({_known_classes(known_classes)}); a validation picture must be in the "
                "directory of its class as the training channel names it."
            )
    class_names = known_classes or tuple(found)
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


def from_config(
    directory: Path, config: TrainingConfig, *, channel: str, class_names: Sequence[str] = (), training: bool = True
) -> ImageDataset | None:
    """The channel as an image dataset if it is one, per the hyperparameters; pure Python.

    ``data_format`` ``image-tfrecord``/``image-dir`` says so; ``auto`` asks
    :func:`detect_format`. Returns None for feature-row channels (``trainer.datasets.tabular`` reads those)
    and for a missing directory (``trainer.datasets.tabular.discover_channel`` names it).
    ``class_names``: a validation channel's, the training channel's classes (see :func:`discover`).
    ``training``: False for the validation channel, which ``image_examples`` (the training
    channel's count) does not describe: its shards are counted from their manifest or headers.

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
                "TFRecord shards (image/encoded or image/raw, image/class/label) nor one sub-directory of .jpg/.png files per "
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
        examples=config.image_examples if training else None,
        label_base=config.image_label_base,
        class_names=class_names,
    )


def explain_failure(
    spec: ImageDataset, err: Exception, *, epoch: int, step: int, pipeline_index: int = 0, num_pipelines: int = 1
) -> DataError:
    """The DataError for a failed image pipeline: the broken picture named when one is found."""
    message = " ".join(str(getattr(err, "message", err)).split())[:400]
    if "Bad label in" in message or "Bad image record in" in message:
        # The assertion's own sentence, without TensorFlow's function and iterator names before it.
        full = " ".join(str(getattr(err, "message", err)).split())
        sentence = full.split("assertion failed: ", 1)[-1].split(" [[{{", 1)[0]
        message = sentence.replace("] [", " ").replace("\\'", "'").removeprefix("[").removesuffix("]")[:400]
        return DataError(f"Reading channel {spec.channel!r} failed in epoch {epoch} at step {step}: {message}")
    problem = locate_problem(spec, pipeline_index=pipeline_index, num_pipelines=num_pipelines)
    where = f"Reading channel {spec.channel!r} ({spec.directory}) failed in epoch {epoch} at step {step}"
    return DataError(f"{where}: {problem}" if problem else f"{where}: {message}")


@dataclass(frozen=True)
class ShardPlan:
    """What one input pipeline (one worker) reads of an image channel.

    Attributes:
        by_file: Whether the pipeline reads only its own shards (else it reads every shard, or
            every image file, and keeps every n-th picture).
        files: The shards or image files this pipeline opens.
        examples: The pictures this pipeline holds: one pass over them is its share of an epoch.
    """

    by_file: bool
    files: tuple[str, ...]
    examples: int


def _shard_counts(spec: ImageDataset) -> list[int]:
    """Records per shard: the counted ones, else the total spread evenly (``image_examples`` gives only that)."""
    if len(spec.counts) == len(spec.files):
        return list(spec.counts)
    share, extra = divmod(spec.examples, max(len(spec.files), 1))
    return [share + (1 if index < extra else 0) for index in range(len(spec.files))]


def plan_shards(spec: ImageDataset, num_pipelines: int) -> tuple[ShardPlan, ...]:
    """Splits the channel over the workers' input pipelines, the same way on every worker.

    Shards go to the least-loaded pipeline, largest first, as ``trainer.datasets.tabular`` splits
    files. If that leaves a pipeline with much less than its share (fewer shards than workers, or
    uneven shards: 3 equal shards on 2 workers hold 80 and 40 pictures), every pipeline reads every
    shard and keeps every n-th record instead, so no worker wraps around its data far more often
    than the others. Image files (``image-dir``) are always split by picture.
    """
    from trainer.datasets.tabular import MIN_FILE_SHARDING_EFFICIENCY

    by_record = tuple(
        ShardPlan(by_file=False, files=spec.files, examples=len(range(index, spec.examples, num_pipelines)))
        for index in range(num_pipelines)
    )
    if spec.data_format == "image-dir":
        return by_record
    if num_pipelines == 1:
        return (ShardPlan(by_file=True, files=spec.files, examples=spec.examples),)
    if len(spec.files) < num_pipelines:
        return by_record
    loads = [0] * num_pipelines
    assigned: list[list[str]] = [[] for _ in range(num_pipelines)]
    for count, path in sorted(zip(_shard_counts(spec), spec.files, strict=True), key=lambda item: (-item[0], item[1])):
        target = loads.index(min(loads))
        assigned[target].append(path)
        loads[target] += count
    if min(loads) * num_pipelines < MIN_FILE_SHARDING_EFFICIENCY * spec.examples:
        return by_record
    return tuple(
        ShardPlan(by_file=True, files=tuple(sorted(group)), examples=load)
        for group, load in zip(assigned, loads, strict=True)
    )


def steps_per_epoch(spec: ImageDataset, global_batch: int, num_pipelines: int = 1) -> int:
    """Steps per epoch, the same on every worker: the largest pipeline's pass over its batch (floor).

    With one worker that is the channel's images over the global batch. With several, a
    pipeline holding fewer pictures tops its epoch up from a fresh pass (see :func:`make_dataset`),
    so that every picture of the channel is trained on in every epoch.
    """
    per_pipeline_batch = max(global_batch // max(num_pipelines, 1), 1)
    return max(plan.examples for plan in plan_shards(spec, num_pipelines)) // per_pipeline_batch


# --- the tf.data pipeline --------------------------------------------------------------------


def _records_with_source(
    spec: ImageDataset, pipeline_index: int, num_pipelines: int, deterministic: bool, shuffle_seed: int | None = None
) -> Any:
    """``(source, index, serialized)`` of one pass over this pipeline's records; source is the shard path.

    The pipeline's shards are :func:`plan_shards`'s. With ``shuffle_seed`` they are opened in a
    seeded random order (training), so the interleave does not visit the same shards together
    every epoch; a repeated pass draws a new order (``reshuffle_each_iteration``). When every
    pipeline reads every shard and keeps every n-th record, all use the same seed and a
    deterministic interleave, so the pipelines' records stay a partition.
    """
    import tensorflow as tf

    plan = plan_shards(spec, num_pipelines)[pipeline_index]
    paths = tf.data.Dataset.from_tensor_slices(list(plan.files))
    if shuffle_seed is not None:
        paths = paths.shuffle(len(plan.files), seed=shuffle_seed, reshuffle_each_iteration=True)

    def read(path: Any) -> Any:
        return tf.data.TFRecordDataset(path).enumerate().map(lambda index, record: (path, index, record))

    records = paths.interleave(
        read,
        cycle_length=max(1, min(len(plan.files), 16)),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=deterministic or not plan.by_file,
    )
    if not plan.by_file and num_pipelines > 1:
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
    threads: int | None = None,
    crop_on_device: bool = False,
    skip_batches: int = 0,
) -> Any:
    """One input pipeline's batches ``(images uint8 [B, S, S, 3], labels int32 [B])``.

    Call it from ``distribute_datasets_from_function`` with the context's pipeline id and count:
    each pipeline reads its own shards, or every n-th record/file (:func:`plan_shards`). An epoch
    of training is one pass over the pipeline's pictures in a fresh shuffled order (shards and
    records, seeded by ``seed`` and ``epoch``, so a resumed run replays the same epoch), with
    random crops (area 8-100%, aspect 3/4-4/3) and flips, cut after ``batches`` full batches; a
    pipeline with fewer pictures than that tops up from a second pass in a new order, so every
    worker runs the same steps (:func:`steps_per_epoch`) and no picture is seen twice before all
    are seen once. Evaluation reads the shard once in order, centre crop,
    last batch kept (``batches`` None) or the first ``batches`` batches.
    Training emits pictures as they are ready (out of order); each one's crop and flip depend on
    its place in the seeded order only, so ``ordered=True`` (slower) replays an epoch exactly.
    The model rescales the uint8 pixels itself (see ``models.build_image_model``).
    Raw-pixel records (``spec.encoding == "raw"``) take the batched path of
    :func:`_make_raw_dataset`. ``threads``: the pipeline's private thread pool (None: TensorFlow's
    shared pool), see :func:`input_threads`. ``crop_on_device``: raw-record training batches carry
    crop boxes for the training step to apply (:func:`apply_crops`); other batches are unchanged.
    ``skip_batches``: the epoch's first batches left out, before any picture is decoded (a run
    resumed in the middle of the epoch); the others are exactly what they would have been.
    """
    import tensorflow as tf

    if spec.encoding == "raw":
        return _make_raw_dataset(
            spec,
            training=training,
            image_size=image_size,
            per_replica_batch=per_replica_batch,
            batches=batches,
            pipeline_index=pipeline_index,
            num_pipelines=num_pipelines,
            shuffle_buffer=shuffle_buffer,
            seed=seed,
            epoch=epoch,
            ordered=ordered,
            threads=threads,
            crop_on_device=crop_on_device,
            skip_batches=skip_batches,
        )
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
            # Shuffle one pass, then repeat: an epoch takes every record of the pass once before
            # any twice (the reverse samples with replacement when the data is near the buffer's size).
            items = items.shuffle(shuffle_buffer, seed=seed * 7919 + epoch, reshuffle_each_iteration=True).repeat()
        read = _parse_record(spec)

    if batches is not None:
        # Exactly the epoch's pictures enter the out-of-order map, and every one of them is
        # consumed: cut after it, the batches would fill with the next repetition's fastest
        # pictures and a slow one (or a corrupt one, whose error is its element) never surface.
        items = items.take(batches * per_replica_batch)

    def load(position: Any, item: Any) -> Any:
        raw, label = read(*item)
        # Seeded by the picture's place in the (seeded) order, not by when a thread gets to it.
        element_seed = tf.stack([tf.constant(seed * 1_000_003 + epoch, tf.int64), position])
        return _crop_and_resize(raw, image_size, training, element_seed), label

    # One map (read or parse, decode, crop, flip) in parallel; out of order in training, where
    # pictures of uneven size would otherwise hold the queue behind the slowest.
    # Skipped after enumerate: a picture's crop and flip depend on its place in the epoch's order.
    images = items.enumerate().skip(skip_batches * per_replica_batch).map(
        load, num_parallel_calls=tf.data.AUTOTUNE, deterministic=ordered or not training
    )
    batched = images.batch(per_replica_batch, drop_remainder=training, num_parallel_calls=tf.data.AUTOTUNE)
    return _with_options(batched.prefetch(tf.data.AUTOTUNE), threads)


def input_threads(instance_type: str | None, gpus_per_host: int, pipelines_per_host: int = 1) -> int | None:
    """Threads for each input pipeline's private pool: the host's vCPUs (GPU table, else ``os.cpu_count``).

    One vCPU per GPU is left for the training loop's own threads (kernel launches, the
    all-reduce), and the rest is split over the host's pipelines. None when that leaves fewer
    than 2 (TensorFlow's shared pool is then as good).
    """
    import os

    from trainer import gpu_table

    row = gpu_table.lookup(instance_type) if instance_type else None
    vcpus = row.vcpus if row is not None else (os.cpu_count() or 1)
    threads = (vcpus - max(gpus_per_host, 1)) // max(pipelines_per_host, 1)
    return threads if threads >= 2 else None


def _with_options(dataset: Any, threads: int | None) -> Any:
    import tensorflow as tf

    options = tf.data.Options()
    if threads:
        # A private pool: the input pipeline's threads do not queue behind the training step's.
        options.threading.private_threadpool_size = threads
        options.threading.max_intra_op_parallelism = 1
    return dataset.with_options(options)


def _make_raw_dataset(
    spec: ImageDataset,
    *,
    training: bool,
    image_size: int,
    per_replica_batch: int,
    batches: int | None,
    pipeline_index: int,
    num_pipelines: int,
    shuffle_buffer: int,
    seed: int,
    epoch: int,
    ordered: bool,
    threads: int | None,
    crop_on_device: bool = False,
    skip_batches: int = 0,
) -> Any:
    """Batches from raw-pixel records: parse, check, reshape, crop, flip, one batch at a time.

    Nothing runs per picture: ``parse_example`` and ``decode_raw`` take the whole batch, and the
    crops (random-resized in training, central in evaluation, as :func:`_crop_and_resize` picks
    them) are one ``crop_and_resize`` call. A record whose pixels or shape do not fit
    ``spec.image_shape`` fails the pipeline naming its shard and record. With ``crop_on_device``
    training batches are ``((pixels [B, H, W, 3], boxes [B, 4]), labels)``: the host only parses,
    and the training step crops (:func:`apply_crops`) on its device.
    """
    import tensorflow as tf

    height, width, channels = spec.image_shape
    pixels_per_image = height * width * channels
    items = _records_with_source(
        spec, pipeline_index, num_pipelines, deterministic=ordered or not training,
        shuffle_seed=seed + epoch if training else None,
    )  # fmt: skip
    if training:
        # Raw pictures are large (150 KB at 224x224), and each epoch's pipeline drops its buffer
        # at the end (read for nothing): at most RAW_SHUFFLE_BYTES of pixels and an eighth of this
        # pipeline's share of the epoch. The seeded shard order and the interleave mix the rest.
        share = plan_shards(spec, num_pipelines)[pipeline_index].examples
        limit = min(shuffle_buffer, RAW_SHUFFLE_BYTES // (height * width * channels), share // 8)
        # One pass shuffled, then the next (each record once before any twice), as in make_dataset.
        items = items.shuffle(
            max(limit, per_replica_batch), seed=seed * 7919 + epoch, reshuffle_each_iteration=True
        ).repeat()
    features = {
        RAW_KEY: tf.io.FixedLenFeature([], tf.string),
        SHAPE_KEY: tf.io.FixedLenFeature([3], tf.int64),
        LABEL_KEY: tf.io.FixedLenFeature([], tf.int64),
    }
    expected_shape = tf.constant(spec.image_shape, tf.int64)

    def first_of(mask: Any, values: Any) -> Any:
        return tf.boolean_mask(values, mask)[:1]

    def parse(position: Any, batch: Any) -> Any:
        source, index, records = batch
        parsed = tf.io.parse_example(records, features)
        label = parsed[LABEL_KEY] - spec.label_base
        bad_pixels = tf.logical_or(
            tf.reduce_any(tf.not_equal(parsed[SHAPE_KEY], expected_shape), axis=1),
            tf.not_equal(tf.strings.length(parsed[RAW_KEY]), pixels_per_image),
        )
        bad_label = tf.logical_or(label < 0, label >= spec.num_classes)
        checks = [
            tf.debugging.Assert(
                tf.logical_not(tf.reduce_any(bad_pixels)),
                ["Bad image record in", first_of(bad_pixels, source), "record", first_of(bad_pixels, index),
                 f": {RAW_KEY!r} must hold {pixels_per_image} bytes of shape {list(spec.image_shape)} (the manifest's "
                 "image_shape); got shape", first_of(bad_pixels, parsed[SHAPE_KEY]), "and bytes",
                 first_of(bad_pixels, tf.strings.length(parsed[RAW_KEY])), "(rewrite the shards)"],
                name="raw_check",
            ),
            tf.debugging.Assert(
                tf.logical_not(tf.reduce_any(bad_label)),
                ["Bad label in", first_of(bad_label, source), "record", first_of(bad_label, index),
                 f": image/class/label - label_base ({spec.label_base}) must be in [0, {spec.num_classes}), got",
                 first_of(bad_label, label), "(set num_classes / image_label_base)"],
                name="label_check",
            ),
        ]  # fmt: skip
        with tf.control_dependencies(checks):
            pixels = tf.reshape(tf.io.decode_raw(parsed[RAW_KEY], tf.uint8), [-1, height, width, channels])
            label = tf.cast(label, tf.int32)
        batch_seed = tf.stack([tf.constant(seed * 1_000_003 + epoch, tf.int64), position])
        if crop_on_device and training:
            boxes = _crop_boxes(tf.shape(pixels)[0], height, width, image_size, training, batch_seed)
            return (pixels, boxes), label
        return _batch_crop(pixels, image_size, training, batch_seed), label

    batched = items.batch(per_replica_batch, drop_remainder=training)
    if batches is not None:
        batched = batched.take(batches)
    # Skipped unparsed, after enumerate: a batch's crops depend on its place in the epoch.
    images = batched.enumerate().skip(skip_batches).map(
        parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=ordered or not training
    )
    return _with_options(images.prefetch(tf.data.AUTOTUNE), threads)


def _crop_boxes(batch: Any, height: Any, width: Any, image_size: int, training: bool, seed: Any) -> Any:
    """``crop_and_resize`` boxes ``[B, 4]``: random-resized crops with flips (training) or centre crops.

    Training boxes are drawn as :func:`_crop_and_resize` draws them (area 8-100% of the picture,
    aspect 3/4-4/3, log-uniform), for the whole batch at once from ``seed``; a flipped box
    (x1 > x2) makes ``crop_and_resize`` mirror the crop, so the flip costs nothing.
    """
    import tensorflow as tf

    height = tf.cast(height, tf.float32)
    width = tf.cast(width, tf.float32)
    if training:
        seeds = tf.random.experimental.stateless_split(seed, 5)
        area = tf.random.stateless_uniform([batch], seeds[0], *CROP_AREA)
        log_aspect = tf.random.stateless_uniform([batch], seeds[1], *(math.log(a) for a in CROP_ASPECT))
        aspect = tf.exp(log_aspect)
        # Box sides as fractions of the picture's: crop_w / crop_h = aspect (in pixels), crop_w * crop_h = area.
        pixel_area = area * height * width
        box_h = tf.minimum(tf.sqrt(pixel_area / aspect) / height, 1.0)
        box_w = tf.minimum(tf.sqrt(pixel_area * aspect) / width, 1.0)
        top = tf.random.stateless_uniform([batch], seeds[2]) * (1.0 - box_h)
        left = tf.random.stateless_uniform([batch], seeds[3]) * (1.0 - box_w)
        flip = tf.random.stateless_uniform([batch], seeds[4]) < 0.5
        x1 = tf.where(flip, left + box_w, left)
        x2 = tf.where(flip, left, left + box_w)
        return tf.stack([top, x1, top + box_h, x2], axis=1)
    side = tf.minimum(height, width) * CENTER_CROP_FRACTION
    box_h, box_w = side / height, side / width
    top, left = (1.0 - box_h) / 2.0, (1.0 - box_w) / 2.0
    return tf.tile(tf.stack([top, left, top + box_h, left + box_w])[None, :], [batch, 1])


def apply_crops(features: Any, image_size: int) -> Any:
    """The model's input from a batch: ``(pixels, boxes)`` cropped where this runs, anything else as is.

    Raw-record training batches carry their crop boxes instead of crops (``crop_on_device``), so
    the crop runs on the accelerator inside the training step, not on the host's CPUs. Outside
    XLA: ``CropAndResize`` has no XLA kernel.
    """
    if not isinstance(features, tuple):
        return features
    import tensorflow as tf

    pixels, boxes = features
    batch = tf.shape(pixels)[0]
    # uint8 in (the kernel converts as it samples): 1.6x faster on CPU than a float32 copy first.
    cropped = tf.image.crop_and_resize(pixels, boxes, tf.range(batch), [image_size, image_size], method="bilinear")
    out = tf.cast(tf.clip_by_value(tf.round(cropped), 0.0, 255.0), tf.uint8)
    return tf.ensure_shape(out, [None, image_size, image_size, pixels.shape[-1]])


def _batch_crop(pixels: Any, image_size: int, training: bool, seed: Any) -> Any:
    """``[B, S, S, 3]`` uint8 from ``[B, H, W, 3]``: the crops of :func:`_crop_boxes`, on the host."""
    import tensorflow as tf

    shape = tf.shape(pixels)
    boxes = _crop_boxes(shape[0], shape[1], shape[2], image_size, training, seed)
    return apply_crops((pixels, boxes), image_size)


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
        if spec.encoding == "raw":
            features = {
                RAW_KEY: tf.io.FixedLenFeature([], tf.string),
                SHAPE_KEY: tf.io.FixedLenFeature([3], tf.int64),
                LABEL_KEY: tf.io.FixedLenFeature([], tf.int64),
            }
            size = math.prod(spec.image_shape)

        def check(position: Any, item: Any) -> Any:
            parsed = tf.io.parse_single_example(item[2], features)
            if spec.encoding == "raw":
                fits = tf.logical_and(
                    tf.reduce_all(tf.equal(parsed[SHAPE_KEY], tf.constant(spec.image_shape, tf.int64))),
                    tf.equal(tf.strings.length(parsed[RAW_KEY]), size),
                )
                with tf.control_dependencies([tf.debugging.Assert(fits, ["bad raw record"])]):
                    return position, tf.identity(parsed[SHAPE_KEY][0])
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
    if spec.encoding == "raw":
        return (
            f"Cannot read record {record} of TFRecord file {name}: it is not a tf.train.Example with "
            f"{math.prod(spec.image_shape)} bytes of {RAW_KEY!r} pixels of shape {list(spec.image_shape)} (the "
            f"manifest's image_shape) and an int64 {LABEL_KEY!r} (corrupt or truncated record?)."
        )
    return (
        f"Cannot read record {record} of TFRecord file {name}: it is not a tf.train.Example with a decodable "
        f"{IMAGE_KEY!r} image and an int64 {LABEL_KEY!r} (corrupt or truncated image?)."
    )
