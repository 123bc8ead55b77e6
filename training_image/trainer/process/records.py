"""``tf.train.Example`` records built in TensorFlow ops, and balanced TFRecord shards.

Building one ``tf.train.Example`` per row in Python is what makes a naive conversion slow (tens
of microseconds a row). :func:`serialize_examples` builds a whole batch of them inside the graph
with ``tf.io.encode_proto`` (the protobuf wire format, nested bottom-up: value list, ``Feature``,
map entry, ``Features``, ``Example``), so it runs inside a parallel ``tf.data`` map. The bytes
parse with ``tf.io.parse_example`` and ``tf.train.Example.FromString`` like any other Example.

:class:`ShardWriter` deals a split's records round-robin over its shards: whatever the number of
examples (unknown until the input is read), shard sizes differ by at most one. With a shuffle seed
it first scatters the records over staging files at random, then shuffles each staging file in
memory and deals it out: the shards hold the records in a seeded random order, not the input's.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# tensorflow.Feature's oneof member per kind of value list.
_LIST = {"float": ("tensorflow.FloatList", "float_list"), "int64": ("tensorflow.Int64List", "int64_list"),
         "bytes": ("tensorflow.BytesList", "bytes_list")}  # fmt: skip


def serialize_examples(features: dict[str, tuple[str, Any]]) -> Any:
    """Serialized ``tf.train.Example`` [B] from ``{name: (kind, values [B, k])}``; kind float|int64|bytes.

    Every example gets every feature with ``k`` values (a fixed-length feature, as the trainer's
    ``FixedLenFeature`` parse expects).
    """
    import tensorflow as tf

    entries = []
    batch = None
    for name, (kind, values) in features.items():
        values = tf.convert_to_tensor(values)
        batch = tf.shape(values)[0]
        message, member = _LIST[kind]
        width = tf.shape(values)[1]
        value_list = tf.io.encode_proto(tf.fill([batch, 1], width), [values], ["value"], message)
        one = tf.ones([batch, 1], tf.int32)
        feature = tf.io.encode_proto(one, [value_list[:, None]], [member], "tensorflow.Feature")
        key = tf.fill([batch, 1], name)
        entries.append(
            tf.io.encode_proto(
                tf.ones([batch, 2], tf.int32), [key, feature[:, None]], ["key", "value"], "tensorflow.Features.FeatureEntry"
            )
        )
    assert batch is not None, "an Example needs at least one feature"
    stacked = tf.stack(entries, axis=1)
    feature_map = tf.io.encode_proto(tf.fill([batch, 1], len(entries)), [stacked], ["feature"], "tensorflow.Features")
    return tf.io.encode_proto(tf.ones([batch, 1], tf.int32), [feature_map[:, None]], ["features"], "tensorflow.Example")


@dataclass(frozen=True)
class Shard:
    """One written shard.

    Attributes:
        path: The file.
        examples: Records in it.
    """

    path: Path
    examples: int


class ShardWriter:
    """Writes one split's records over ``count`` TFRecord shards, round-robin (sizes differ by at most one).

    With ``shuffle_seed``, the shards hold the records in a seeded random order instead of the
    order they were written in. A trainer reads a few shards at a time and mixes records only
    within its shuffle buffer, so shards in input order would train a label-sorted CSV one class
    at a time. The shuffle streams: each record goes to one of ``staging_files`` hidden files
    (``.staging-<prefix>/``) picked at random; :meth:`close` then reads each staging file into
    memory, permutes it and deals it round-robin over the shards, deleting it. Random assignment
    then a permutation of each part is a uniform permutation of the whole, and memory holds one
    staging file (the caller sizes them), disk one staging file more than the output.

    Shards that end up empty (fewer examples than shards) are deleted at :meth:`close`.
    """

    def __init__(
        self, directory: Path, count: int, prefix: str = "part", *, shuffle_seed: int | None = None, staging_files: int = 1
    ) -> None:
        import tensorflow as tf

        self.directory = directory
        self.paths = [directory / f"{prefix}-{index:05d}.tfrecord" for index in range(count)]
        self.counts = [0] * count
        self._writers = [tf.io.TFRecordWriter(str(path)) for path in self.paths]
        self._next = 0
        self._written = 0
        self._staging: list[Any] = []
        self._staging_dir = directory / f".staging-{prefix}"
        if shuffle_seed is not None:
            self._staging_dir.mkdir(parents=True, exist_ok=True)
            self._staging_paths = [self._staging_dir / f"{index:05d}.tfrecord" for index in range(max(1, staging_files))]
            self._staging = [tf.io.TFRecordWriter(str(path)) for path in self._staging_paths]
            # Its own stream of the seed: the same seed and input give the same shards.
            self._rng = np.random.default_rng([shuffle_seed & 0xFFFFFFFFFFFFFFFF, 0x5_4A2D])

    def write_all(self, records: Any) -> None:
        """Writes every serialized record of ``records`` (bytes), continuing the round-robin (or, shuffling, to a random staging file)."""
        if self._staging:
            staging = self._staging
            targets = self._rng.integers(0, len(staging), size=len(records)).tolist()
            for record, target in zip(records, targets, strict=True):
                staging[target].write(record)
            self._written += len(targets)
            return
        self._deal(records)

    def _deal(self, records: Any) -> None:
        writers, counts, count = self._writers, self.counts, len(self._writers)
        index = self._next
        for record in records:
            writers[index].write(record)
            counts[index] += 1
            index = index + 1 if index + 1 < count else 0
        self._next = index

    @property
    def examples(self) -> int:
        """Records written so far."""
        return self._written if self._staging else sum(self.counts)

    def close(self, between_files: Callable[[], None] | None = None) -> list[Shard]:
        """Closes every shard (after dealing out the staging files, shuffled); returns the non-empty ones in name order.

        ``between_files``: called before each staging file is shuffled (a stop check).
        """
        import tensorflow as tf

        if self._staging:
            for writer in self._staging:
                writer.close()
            self._staging = []
            for path in self._staging_paths:
                if between_files is not None:
                    between_files()
                records = list(tf.data.TFRecordDataset(str(path)).batch(8192).as_numpy_iterator())
                held = np.concatenate(records) if records else np.array([], dtype=object)
                self._deal(held[self._rng.permutation(len(held))])
                path.unlink()
            shutil.rmtree(self._staging_dir, ignore_errors=True)
        for writer in self._writers:
            writer.close()
        shards = []
        for path, count in zip(self.paths, self.counts, strict=True):
            if count:
                shards.append(Shard(path, count))
            else:
                path.unlink(missing_ok=True)
        return shards

    def abort(self) -> None:
        """Closes every file without dealing out the staging files (the run failed; the caller removes the output)."""
        for writer in (*self._staging, *self._writers):
            writer.close()
        self._staging = []
        shutil.rmtree(self._staging_dir, ignore_errors=True)


# --- raw-pixel image records, built in Python (one tobytes and a few joins per picture) --------


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _feature_entry(key: str, feature: bytes) -> bytes:
    return _field(1, _field(1, key.encode()) + _field(2, feature))


def raw_image_example(pixels: Any, label: int, *, raw_key: str, shape_key: str, label_key: str) -> bytes:
    """One serialized ``tf.train.Example`` holding ``pixels`` (uint8 ``[H, W, C]``) as raw bytes.

    ``raw_key``: the pixels, row-major HWC (``BytesList``); ``shape_key``: ``[H, W, C]``
    (``Int64List``); ``label_key``: the label (``Int64List``, >= 0). The protobuf wire format is
    written directly (``Features``' map entries, ``Feature``'s oneof members 1 bytes, 3 int64),
    so it parses with ``tf.io.parse_example`` and ``tf.train.Example.FromString`` like any Example.
    """
    shape = [int(n) for n in pixels.shape]
    if label < 0:
        raise ValueError(f"label must be >= 0, got {label}")
    packed = lambda values: _field(1, b"".join(_varint(v) for v in values))  # noqa: E731
    entries = (
        _feature_entry(raw_key, _field(1, _field(1, pixels.tobytes()))),
        _feature_entry(shape_key, _field(3, packed(shape))),
        _feature_entry(label_key, _field(3, packed([int(label)]))),
    )
    return _field(1, b"".join(entries))
