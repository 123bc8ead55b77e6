"""Training input on CPU: raw-pixel records (``--image-encoding raw``) vs JPEG records, images/s (issue #21).

Both come from the same pictures through the processing mode's transform at the same size; the
trainer's training pipeline (``images.make_dataset``: shuffle, crop, flip, batch) is drained
without a model, so the figure is what the input side can feed a GPU. Three variants: JPEG
records (decode, crop, resize on the host), raw records cropped on the host, and raw records as
the trainer reads them (``crop_on_device``: the host parses, the training step crops on the GPU;
here the figure is the host's share). Runs interleave so load from other processes hits all
alike; the ratio of medians is the claim. Target: raw >= 3x JPEG.

    .venv/bin/python -m benchmarks.run records
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from benchmarks import _trainer  # noqa: F401 - puts training_image/ on sys.path

PICTURES = 2048
SOURCE = (256, 256, 3)
STORED = "160x160"
TRAIN_SIZE = 128
BATCH = 64


def _prepare(root: Path) -> dict[str, object]:
    from trainer.datasets import images
    from trainer.datasets.synthetic import SyntheticSpec, write_dataset
    from trainer.process import contract, transform
    from trainer.process.options import parse

    specs = {}
    for encoding in ("jpeg", "raw"):
        base = root / encoding
        raw = base / "processing" / "input" / "raw"
        write_dataset(raw, SyntheticSpec("image-dir", examples=PICTURES, features=SOURCE[0] * SOURCE[1] * 3,
                                         classes=8, image_shape=SOURCE, seed=3))  # fmt: skip
        for name in (".trainer-manifest.json", "manifest.json"):
            (raw / name).unlink(missing_ok=True)
        env = contract.load_environment({"SAGEMAKER_BASE_DIR": str(base)})
        transform.run(env, parse(["--image-size", STORED, "--image-encoding", encoding, "--shards", "8",
                                  "--validation-fraction", "0.05"]))  # fmt: skip
        train = base / "processing" / "output" / "train"
        specs[encoding] = images.discover(train, channel="train", data_format="image-tfrecord")
    return specs


def _images_per_second(spec: object, epoch: int, crop_on_device: bool = False) -> float:
    from trainer.datasets import images

    batches = spec.examples // BATCH  # type: ignore[attr-defined]
    dataset = images.make_dataset(
        spec, training=True, image_size=TRAIN_SIZE, per_replica_batch=BATCH, batches=batches, seed=1, epoch=epoch,  # type: ignore[arg-type]
        threads=images.input_threads(None, 0), crop_on_device=crop_on_device,
    )
    started = time.perf_counter()
    count = sum(int(labels.shape[0]) for _, labels in dataset)
    return count / (time.perf_counter() - started)


def run(repeats: int = 3) -> list[dict]:
    """Rows for benchmarks/RESULTS.md."""
    with tempfile.TemporaryDirectory() as directory:
        specs = _prepare(Path(directory))
        variants = {"jpeg": (specs["jpeg"], False), "raw": (specs["raw"], False), "raw-device": (specs["raw"], True)}
        for spec, on_device in variants.values():
            _images_per_second(spec, 0, on_device)  # warm-up: tracing, page cache
        runs: dict[str, list[float]] = {name: [] for name in variants}
        for epoch in range(1, max(repeats, 1) + 1):
            for name, (spec, on_device) in variants.items():
                runs[name].append(_images_per_second(spec, epoch, on_device))
    median = {name: statistics.median(values) for name, values in runs.items()}
    ratio = median["raw"] / median["jpeg"]
    device_ratio = median["raw-device"] / median["jpeg"]
    shape = f"{PICTURES} pictures {SOURCE[0]}x{SOURCE[1]} stored at {STORED}, crop to {TRAIN_SIZE}, batch {BATCH}, CPU"
    return [
        {"benchmark": "records", "metric": f"JPEG records (image-tfrecord), training input pipeline, {shape} (baseline)",
         "value": f"{median['jpeg']:,.0f} images/s (runs {[round(v) for v in runs['jpeg']]})", "ratio": "1.00"},
        {"benchmark": "records", "metric": f"raw-pixel records (--image-encoding raw), same pipeline, {shape}",
         "value": f"{median['raw']:,.0f} images/s (runs {[round(v) for v in runs['raw']]})", "ratio": f"{ratio:.2f}x",
         "target": f">= 3x the JPEG path: {'met' if ratio >= 3 else 'NOT met'} (crops on the same CPU)"},
        {"benchmark": "records", "metric": f"raw-pixel records, crops left to the training step's device (the trainer's "
                                           f"setting): the host's share, {shape}",
         "value": f"{median['raw-device']:,.0f} images/s (runs {[round(v) for v in runs['raw-device']]})",
         "ratio": f"{device_ratio:.2f}x",
         "target": f">= 3x the JPEG path: {'met' if device_ratio >= 3 else 'NOT met'} (host CPU work per image)"},
    ]  # fmt: skip


if __name__ == "__main__":
    for row in run():
        print(row)
