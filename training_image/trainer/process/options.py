"""The built-in transform's arguments (the job's ``ContainerArguments``), parsed once, refused by name."""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass

from trainer.contract.errors import ConfigError

FORMATS = ("auto", "csv", "image-dir")
IMAGE_ENCODINGS = ("jpeg", "raw")
DEFAULT_VALIDATION_FRACTION = 0.1
MAX_VALIDATION_FRACTION = 0.5
USAGE = (
    "--format auto|csv|image-dir --shards N --validation-fraction F --image-size HxW --image-encoding jpeg|raw "
    "--seed S --skip-bad-images"
)


@dataclass(frozen=True)
class TransformOptions:
    """What the built-in transform does.

    Attributes:
        data_format: ``csv``, ``image-dir``, or ``auto`` (told from the files of the ``raw`` input).
        shards: TFRecord shards per output; 0 picks a count from the data's size (about
            :data:`trainer.process.transform.TARGET_SHARD_BYTES` each).
        validation_fraction: Share of the examples written to ``validation/``, in (0, 0.5].
        image_size: ``(height, width)`` every picture is resized to (then re-encoded as JPEG);
            None keeps each picture's own bytes (decoded once to check it).
        seed: Keys the train/validation split (and the image order); the same seed splits the
            same input the same way.
        skip_bad_images: Leave out pictures that cannot be decoded, counted and named in
            ``statistics.json``; without it the first one fails the job.
        image_encoding: ``jpeg``: pictures stay JPEG (re-encoded at ``image_size``; small, decoded
            at every training step). ``raw``: training-ready records, the resized pictures' uint8
            pixels (``image/raw`` + ``image/shape``), which training reads without any decode;
            needs ``image_size`` (one shape for every picture) and about 10x the bytes of JPEG.
    """

    data_format: str = "auto"
    shards: int = 0
    validation_fraction: float = DEFAULT_VALIDATION_FRACTION
    image_size: tuple[int, int] | None = None
    seed: int = 0
    skip_bad_images: bool = False
    image_encoding: str = "jpeg"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise ConfigError(
            f"Bad processing argument: {message}. The built-in transform takes {USAGE} "
            "(the job's ContainerArguments, processing.arguments in cdk.json)."
        )


def _image_size(text: str) -> tuple[int, int]:
    parts = text.lower().split("x")
    if len(parts) != 2 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"expected HxW such as 224x224, got {text!r}")
    return int(parts[0]), int(parts[1])


def _shards(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number (0 = from the data's size), got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 (0 = from the data's size), got {value}")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in (0, {MAX_VALIDATION_FRACTION}], got {text!r}") from None
    if not (math.isfinite(value) and 0 < value <= MAX_VALIDATION_FRACTION):
        raise argparse.ArgumentTypeError(f"must be in (0, {MAX_VALIDATION_FRACTION}], got {text}")
    return value


def parse(argv: Sequence[str]) -> TransformOptions:
    """The options from the container arguments; raises ConfigError naming the bad argument."""
    parser = _Parser(prog="python -m trainer process", add_help=False, allow_abbrev=False)
    parser.add_argument("--format", dest="data_format", choices=FORMATS, default="auto")
    parser.add_argument("--shards", type=_shards, default=0)
    parser.add_argument("--validation-fraction", type=_fraction, default=DEFAULT_VALIDATION_FRACTION)
    parser.add_argument("--image-size", type=_image_size, default=None)
    parser.add_argument("--image-encoding", choices=IMAGE_ENCODINGS, default="jpeg")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-bad-images", action="store_true")
    args = parser.parse_args(list(argv))
    if args.image_encoding == "raw" and args.image_size is None:
        raise ConfigError(
            "Bad processing argument: --image-encoding raw writes every picture at one shape, so it needs "
            "--image-size HxW (e.g. --image-size 256x256); add it, or drop --image-encoding raw to keep JPEG."
        )
    return TransformOptions(
        data_format=args.data_format,
        shards=args.shards,
        validation_fraction=args.validation_fraction,
        image_size=args.image_size,
        image_encoding=args.image_encoding,
        seed=args.seed,
        skip_bad_images=args.skip_bad_images,
    )
