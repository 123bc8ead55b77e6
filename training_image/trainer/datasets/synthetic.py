"""Writes a synthetic, learnable classification dataset in the trainer's CSV or TFRecord format.

    python -m trainer.datasets.synthetic --format csv --out data/train --examples 4000 --features 16 --classes 4
    python -m trainer.datasets.synthetic --format tfrecord --out data/train --examples 2000 --classes 4 --image 12x12x1
    python -m trainer.datasets.synthetic --format image-dir --out data/train --examples 400 --classes 4 --image 16x16x3

    python -m trainer.datasets.synthetic --format image-tfrecord --out data/train --examples 400 --classes 4 --image 32x32x3

``image-dir`` is the layout Keras' ``image_dataset_from_directory`` reads: one sub-directory per
class (``class_0``... zero-padded when there are more than 10, so sorted names keep label order)
of real JPEG files (``--encoding png`` for PNG). ``image-tfrecord`` is the TensorFlow/TPU ImageNet
layout: ``tf.train.Example`` with the JPEG under ``image/encoded`` and the label under
``image/class/label`` counted from ``--label-base`` (1, as that tooling writes), plus the
``manifest.json`` the trainer counts from (see ``trainer.datasets.images``). Image pixels: each class has
its own colour (grey level for one channel) over the whole picture, with noise, so it survives
the random crops and flips of training.

Tabular data: one Gaussian cluster per class (centroid ~ N(0, separation^2), unit noise), so an
MLP reaches high accuracy in a few epochs. Images: each class lights a square patch at its own
position on a noisy background, which a small CNN learns quickly. The same seed gives the same
files, so tests and the local emulator harness are reproducible.

CSV and TFRecord datasets come with their manifest (``trainer.datasets.manifest``): per-file example
counts and sizes, features and classes, so the trainer starts without reading the data.
"""

from __future__ import annotations

import argparse
import math
import struct
import sys
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from trainer.datasets import manifest
from trainer.datasets.images import IMAGE_KEY
from trainer.datasets.images import LABEL_KEY as IMAGE_LABEL_KEY
from trainer.datasets.images import write_manifest
from trainer.datasets.tabular import FEATURES_KEY, LABEL_KEY

IMAGE_FORMATS = ("image-dir", "image-tfrecord")
ENCODINGS = ("jpeg", "png")


@dataclass(frozen=True)
class SyntheticSpec:
    """What to generate.

    Attributes:
        data_format: ``csv`` or ``tfrecord``.
        examples: Total examples over all shards.
        features: Values per example (``H*W*C`` for images).
        classes: Number of classes (labels ``0..classes-1``).
        shards: Number of files; examples are split as evenly as possible.
        image_shape: ``(H, W, C)`` to generate images for the CNN, else ``None`` (tabular).
        seed: Random seed; the same seed writes the same files.
        header: Whether CSV files start with a header line.
        separation: Scale of the class centroids (tabular) or patch brightness (images)
            relative to the unit noise; lower makes the task harder.
        encoding: ``jpeg`` or ``png``: how ``image-dir`` and ``image-tfrecord`` encode pictures.
        label_base: ``image-tfrecord``: the label written for class 0 (1 as the ImageNet tooling).
    """

    data_format: str
    examples: int
    features: int
    classes: int
    shards: int = 1
    image_shape: tuple[int, int, int] | None = None
    seed: int = 0
    header: bool = True
    separation: float = 1.0
    encoding: str = "jpeg"
    label_base: int = 1


def _class_templates(spec: SyntheticSpec, rng: np.random.Generator) -> np.ndarray:
    if spec.image_shape is None:
        return rng.normal(0.0, spec.separation, size=(spec.classes, spec.features)).astype(np.float32)
    height, width, channels = spec.image_shape
    grid = math.ceil(math.sqrt(spec.classes))
    patch = max(1, min(height, width) // (grid + 1))
    templates = np.zeros((spec.classes, height, width, channels), dtype=np.float32)
    for label in range(spec.classes):
        row, col = divmod(label, grid)
        top = round((row + 0.5) * height / grid - patch / 2)
        left = round((col + 0.5) * width / grid - patch / 2)
        templates[label, top : top + patch, left : left + patch, :] = 2.0 * spec.separation
    return templates.reshape(spec.classes, -1)


def generate(
    spec: SyntheticSpec, examples: int, rng: np.random.Generator, templates: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``examples`` rows of features (float32) and labels (int64) around the class templates."""
    labels = rng.integers(0, spec.classes, size=examples)
    noise_scale = 0.5 if spec.image_shape is not None else 1.0
    features = templates[labels] + rng.normal(0.0, noise_scale, size=(examples, spec.features)).astype(np.float32)
    return features.astype(np.float32), labels.astype(np.int64)


def _write_csv(path: Path, features: np.ndarray, labels: np.ndarray, header: bool) -> None:
    with path.open("w", encoding="utf-8", newline="\n") as handle:
        if header:
            handle.write(",".join([f"f{i}" for i in range(features.shape[1])] + [LABEL_KEY]) + "\n")
        for row, label in zip(features, labels, strict=True):
            handle.write(",".join(f"{v:.6g}" for v in row) + f",{int(label)}\n")


def _write_tfrecord(path: Path, features: np.ndarray, labels: np.ndarray) -> None:
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(path)) as writer:
        for row, label in zip(features, labels, strict=True):
            example = tf.train.Example(
                features=tf.train.Features(
                    feature={
                        FEATURES_KEY: tf.train.Feature(float_list=tf.train.FloatList(value=row.tolist())),
                        LABEL_KEY: tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
                    }
                )
            )
            writer.write(example.SerializeToString())


def png_bytes(image: np.ndarray) -> bytes:
    """A PNG file of an ``HxWx1`` (grey) or ``HxWx3`` (RGB) uint8 array; no imaging library needed."""
    height, width, channels = image.shape
    color_type = {1: 0, 3: 2}[channels]
    rows = b"".join(b"\x00" + image[row].tobytes() for row in range(height))

    def chunk(kind: bytes, payload: bytes) -> bytes:
        return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, color_type, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def image_pixels(spec: SyntheticSpec, count: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``count`` uint8 pictures ``[N, H, W, C]`` and their labels: a colour per class, plus noise."""
    assert spec.image_shape is not None
    height, width, channels = spec.image_shape
    # Balanced and shuffled: every class appears once there are as many pictures as classes.
    labels = rng.permutation(np.arange(count) % spec.classes)
    if channels == 1:
        colours = np.linspace(40.0, 215.0, spec.classes)[:, None]
    else:
        # Evenly spaced hues, fully saturated: neighbouring classes differ in at least one channel.
        hues = np.arange(spec.classes) / spec.classes
        phase = (hues[:, None] + np.array([0.0, 1.0 / 3.0, 2.0 / 3.0])[None, :]) * 2.0 * np.pi
        colours = 127.5 + 100.0 * np.cos(phase)
        colours = np.concatenate([colours, np.full((spec.classes, channels - 3), 127.5)], axis=1)
    noise = rng.normal(0.0, 40.0 / max(spec.separation, 1e-3), size=(count, height, width, channels))
    pixels = colours[labels][:, None, None, :] + noise
    return np.clip(pixels, 0, 255).astype(np.uint8), labels.astype(np.int64)


def encode_image(image: np.ndarray, encoding: str) -> bytes:
    """The bytes of a JPEG (quality 95) or PNG file of an ``HxWxC`` uint8 array."""
    if encoding == "png":
        return png_bytes(image)
    import tensorflow as tf

    return bytes(tf.io.encode_jpeg(image, quality=95).numpy())


def _class_dir(label: int, classes: int) -> str:
    return f"class_{label:0{len(str(classes - 1))}d}"


def _write_image_dir(out_dir: Path, spec: SyntheticSpec, rng: np.random.Generator) -> list[Path]:
    pixels, labels = image_pixels(spec, spec.examples, rng)
    suffix = ".png" if spec.encoding == "png" else ".jpg"
    written = []
    for offset, (image, label) in enumerate(zip(pixels, labels, strict=True)):
        path = out_dir / _class_dir(int(label), spec.classes) / f"img-{offset:06d}{suffix}"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(encode_image(image, spec.encoding))
        written.append(path)
    return written


def _write_image_tfrecords(out_dir: Path, spec: SyntheticSpec, rng: np.random.Generator) -> list[Path]:
    import tensorflow as tf

    written = []
    for shard, indices in enumerate(np.array_split(np.arange(spec.examples), spec.shards)):
        pixels, labels = image_pixels(spec, len(indices), rng)
        path = out_dir / f"train-{shard:05d}-of-{spec.shards:05d}.tfrecord"
        with tf.io.TFRecordWriter(str(path)) as writer:
            for image, label in zip(pixels, labels, strict=True):
                feature = {
                    IMAGE_KEY: tf.train.Feature(bytes_list=tf.train.BytesList(value=[encode_image(image, spec.encoding)])),
                    "image/format": tf.train.Feature(bytes_list=tf.train.BytesList(value=[spec.encoding.encode()])),
                    "image/height": tf.train.Feature(int64_list=tf.train.Int64List(value=[image.shape[0]])),
                    "image/width": tf.train.Feature(int64_list=tf.train.Int64List(value=[image.shape[1]])),
                    IMAGE_LABEL_KEY: tf.train.Feature(
                        int64_list=tf.train.Int64List(value=[int(label) + spec.label_base])
                    ),
                }
                writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
        written.append(path)
    write_manifest(out_dir, num_classes=spec.classes, label_base=spec.label_base)
    return written


def write_dataset(out_dir: Path, spec: SyntheticSpec) -> list[Path]:
    """Writes ``spec.shards`` files into ``out_dir`` (created) and returns their paths."""
    if spec.examples < 1 or spec.features < 1 or spec.classes < 2 or spec.shards < 1:
        raise ValueError("examples, features and shards must be >= 1 and classes >= 2")
    if spec.image_shape is not None and math.prod(spec.image_shape) != spec.features:
        raise ValueError(
            f"image shape {spec.image_shape} holds {math.prod(spec.image_shape)} values, not {spec.features}"
        )
    if spec.data_format in IMAGE_FORMATS and (spec.image_shape is None or spec.image_shape[2] not in (1, 3)):
        raise ValueError(f"{spec.data_format} needs --image HxWx1 or HxWx3")
    if spec.encoding not in ENCODINGS:
        raise ValueError(f"encoding must be one of {', '.join(ENCODINGS)}, got {spec.encoding!r}")
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(spec.seed)
    if spec.data_format == "image-dir":
        return _write_image_dir(out_dir, spec, rng)
    if spec.data_format == "image-tfrecord":
        return _write_image_tfrecords(out_dir, spec, rng)
    templates = _class_templates(spec, rng)
    suffix = ".csv" if spec.data_format == "csv" else ".tfrecord"
    written = []
    entries: list[manifest.FileEntry] = []
    for shard, count in enumerate(np.array_split(np.arange(spec.examples), spec.shards)):
        features, labels = generate(spec, len(count), rng, templates)
        path = out_dir / f"part-{shard:05d}{suffix}"
        if spec.data_format == "csv":
            _write_csv(path, features, labels, spec.header)
        else:
            _write_tfrecord(path, features, labels)
        written.append(path)
        header = spec.header and spec.data_format == "csv"
        entries.append(manifest.FileEntry(path.name, len(count), path.stat().st_size, header))
    manifest.write(out_dir, manifest.Manifest(spec.data_format, spec.features, spec.classes, tuple(entries)))
    return written


def _image_shape(text: str) -> tuple[int, int, int]:
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"expected HxWxC such as 28x28x1, got {text!r}")
    return int(parts[0]), int(parts[1]), int(parts[2])


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: parse arguments, write the files, print one summary line."""
    parser = argparse.ArgumentParser(prog="python -m trainer.datasets.synthetic", description=__doc__.split("\n\n")[0])
    parser.add_argument("--format", required=True, choices=("csv", "tfrecord", *IMAGE_FORMATS))
    parser.add_argument("--out", required=True, type=Path, help="directory to write the shards into")
    parser.add_argument("--examples", required=True, type=int)
    parser.add_argument("--features", type=int, help="values per example (implied by --image)")
    parser.add_argument("--classes", required=True, type=int)
    parser.add_argument("--shards", type=int, default=1)
    parser.add_argument("--image", type=_image_shape, help="HxWxC: generate images for model=cnn")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--separation", type=float, default=1.0, help="class separation; lower is harder")
    parser.add_argument("--no-header", action="store_true", help="CSV files without a header line")
    parser.add_argument("--encoding", choices=ENCODINGS, default="jpeg", help="image-dir / image-tfrecord pictures")
    parser.add_argument("--label-base", type=int, default=1, help="image-tfrecord: label written for class 0")
    args = parser.parse_args(argv)

    features = math.prod(args.image) if args.image else args.features
    if features is None:
        parser.error("--features is required unless --image is given")
    if args.image and args.features is not None and args.features != features:
        parser.error(
            f"--features {args.features} contradicts --image {'x'.join(map(str, args.image))} ({features} values)"
        )
    spec = SyntheticSpec(
        data_format=args.format,
        examples=args.examples,
        features=features,
        classes=args.classes,
        shards=args.shards,
        image_shape=args.image,
        seed=args.seed,
        header=not args.no_header,
        separation=args.separation,
        encoding=args.encoding,
        label_base=args.label_base,
    )
    try:
        paths = write_dataset(args.out, spec)
    except ValueError as err:
        parser.error(str(err))
    print(
        f"[synthetic] wrote format={spec.data_format} files={len(paths)} examples={spec.examples} "
        f"features={spec.features} classes={spec.classes} out={args.out}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
