"""The built-in processing transform's throughput against a straightforward single-threaded conversion.

Same data, same run, same output format:

- CSV: 200,000 rows x 64 features, 8 classes (8 files) -> the trainer's ``tfrecord`` shards.
  Baseline: ``csv.reader`` row by row, one ``tf.train.Example`` per row, ``TFRecordWriter``.
- Pictures: 2,000 64x64 JPEGs in 8 class directories -> 32x32 JPEG ``image-tfrecord`` shards.
  Baseline: a Python loop over the files with TensorFlow's own ops, eagerly (read, decode,
  resize, encode, one ``tf.train.Example``), no imaging library.

The transform does more than the baselines (the train/validation split, statistics, manifests),
and is timed from its call to its return (TensorFlow already imported and warmed up by a small
untimed conversion, as the baseline is; the job's GPU check and TensorFlow start excluded).
Every measurement runs in a process of its own so the CPU rows never see a GPU; the GPU rows run
only where TensorFlow sees one. Rates: examples/s and input MB/s (MB = 10^6 bytes).

    .venv/bin/python -m benchmarks.run process
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRAINING_IMAGE = ROOT / "training_image"
CSV_ROWS = int(os.environ.get("PROCESS_BENCH_CSV_ROWS", "200000"))
CSV_FEATURES = 64
IMAGES = int(os.environ.get("PROCESS_BENCH_IMAGES", "2000"))
IMAGE_SIDE = 64
TARGET_SIDE = 32
CLASSES = 8
TIMEOUT = 1800


@dataclass(frozen=True)
class Rate:
    """One timed conversion.

    Attributes:
        examples: Examples converted.
        input_bytes: Bytes of input read.
        seconds: Wall time.
    """

    examples: int
    input_bytes: int
    seconds: float

    @property
    def per_second(self) -> float:
        """Examples per second."""
        return self.examples / self.seconds

    @property
    def mb_per_second(self) -> float:
        """Input megabytes (10^6 bytes) per second."""
        return self.input_bytes / 1e6 / self.seconds

    def describe(self) -> str:
        """``12,345 ex/s, 6.7 MB/s (1.23 s)``."""
        return f"{self.per_second:,.0f} ex/s, {self.mb_per_second:.1f} MB/s ({self.seconds:.2f} s)"


def median_rate(rates: list[Rate]) -> Rate:
    """The run with the median time (a real run, not a mix of several)."""
    ordered = sorted(rates, key=lambda r: r.seconds)
    return ordered[(len(ordered) - 1) // 2]


# --- data ------------------------------------------------------------------------------------


def write_csv_input(directory: Path, rows: int, features: int = CSV_FEATURES, files: int = 8) -> None:
    """``rows`` rows of the trainer's CSV layout (header, features, label last) over ``files`` files."""
    import numpy as np

    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    header = ",".join([f"f{i}" for i in range(features)] + ["label"])
    for index, count in enumerate(np.array_split(np.arange(rows), files)):
        values = rng.normal(size=(len(count), features)).astype(np.float32)
        labels = rng.integers(0, CLASSES, size=len(count))
        table = np.concatenate([values, labels[:, None].astype(np.float32)], axis=1)
        formats = ["%.6g"] * features + ["%d"]
        np.savetxt(directory / f"part-{index:05d}.csv", table, fmt=formats, delimiter=",", header=header, comments="")


def write_image_input(directory: Path, count: int, side: int = IMAGE_SIDE) -> None:
    """``count`` JPEG pictures ``side`` x ``side`` in class sub-directories."""
    sys.path.insert(0, str(TRAINING_IMAGE))
    from trainer.datasets.synthetic import SyntheticSpec, write_dataset

    spec = SyntheticSpec("image-dir", examples=count, features=side * side * 3, classes=CLASSES, image_shape=(side, side, 3))
    write_dataset(directory, spec)


def _input_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file() and not p.name.startswith("."))


# --- the baselines ---------------------------------------------------------------------------


def baseline_csv(raw: Path, out: Path) -> int:
    """Row by row: csv module, a tf.train.Example per row, one TFRecordWriter. Returns rows written."""
    import tensorflow as tf

    out.mkdir(parents=True, exist_ok=True)
    written = 0
    with tf.io.TFRecordWriter(str(out / "part-00000.tfrecord")) as writer:
        for path in sorted(raw.glob("*.csv")):
            with path.open(newline="") as handle:
                reader = csv.reader(handle)
                next(reader)  # header
                for row in reader:
                    example = tf.train.Example(
                        features=tf.train.Features(
                            feature={
                                "features": tf.train.Feature(float_list=tf.train.FloatList(value=[float(v) for v in row[:-1]])),
                                "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(row[-1])])),
                            }
                        )
                    )
                    writer.write(example.SerializeToString())
                    written += 1
    return written


def baseline_images(raw: Path, out: Path, side: int = TARGET_SIDE) -> int:
    """File by file, eagerly: read, decode, resize, JPEG-encode, a tf.train.Example. Returns pictures written."""
    import tensorflow as tf

    out.mkdir(parents=True, exist_ok=True)
    classes = sorted(p.name for p in raw.iterdir() if p.is_dir())
    written = 0
    with tf.io.TFRecordWriter(str(out / "part-00000.tfrecord")) as writer:
        for label, name in enumerate(classes):
            for path in sorted((raw / name).iterdir()):
                image = tf.io.decode_image(tf.io.read_file(str(path)), channels=3, expand_animations=False)
                resized = tf.image.resize(image, [side, side], method="bilinear", antialias=True)
                pixels = tf.cast(tf.clip_by_value(tf.round(resized), 0.0, 255.0), tf.uint8)
                encoded = tf.io.encode_jpeg(pixels, quality=95).numpy()
                feature = {
                    "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[encoded])),
                    "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label + 1])),
                }
                writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
                written += 1
    return written


# --- one measurement per process -------------------------------------------------------------


def measure(kind: str, how: str, raw: Path, scratch: Path, repeats: int) -> list[Rate]:
    """In this process: ``repeats`` conversions of ``raw`` by ``how`` (baseline or transform)."""
    sys.path.insert(0, str(TRAINING_IMAGE))
    from trainer.process import contract, transform
    from trainer.process.options import TransformOptions

    def convert(source: Path, base: Path, seed: int) -> int:
        if how == "baseline":
            return (baseline_csv if kind == "csv" else baseline_images)(source, base / "out")
        (base / "processing" / "input").mkdir(parents=True)
        os.symlink(source, base / "processing" / "input" / "raw")
        env = contract.load_environment({"SAGEMAKER_BASE_DIR": str(base)})
        image_size = (TARGET_SIDE, TARGET_SIDE) if kind == "images" else None
        result = transform.run(env, TransformOptions(image_size=image_size, seed=seed))
        return sum(result["examples"].values())

    # Warm: TensorFlow's one-off start (runtime, thread pools, first traces, ~1-2 s) is paid by a
    # small untimed conversion first, in both contenders; a job pays it once, whatever its size.
    convert(_sample(kind, raw, scratch / f"{kind}-{how}-sample"), scratch / f"{kind}-{how}-warm-up", 0)
    size = _input_bytes(raw)
    rates = []
    for attempt in range(repeats):
        base = scratch / f"{kind}-{how}-{attempt}"
        started = time.perf_counter()
        examples = convert(raw, base, attempt)
        rates.append(Rate(examples, size, time.perf_counter() - started))
        shutil.rmtree(base, ignore_errors=True)
    return rates


def _sample(kind: str, raw: Path, into: Path) -> Path:
    """A small input of the same layout (first 400 rows of a file, or 8 pictures of each class)."""
    if kind == "csv":
        into.mkdir(parents=True, exist_ok=True)
        first = sorted(raw.glob("*.csv"))[0]
        (into / first.name).write_text("\n".join(first.read_text().splitlines()[:401]) + "\n")
        return into
    for directory in sorted(p for p in raw.iterdir() if p.is_dir()):
        (into / directory.name).mkdir(parents=True, exist_ok=True)
        for picture in sorted(directory.iterdir())[:8]:
            shutil.copy(picture, into / directory.name / picture.name)
    return into


def _child(kind: str, how: str, raw: Path, scratch: Path, repeats: int, gpu: bool) -> list[Rate]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": os.pathsep.join([str(ROOT), str(TRAINING_IMAGE)])}
    if not gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    command = [sys.executable, "-m", "benchmarks.process_bench", kind, how, str(raw), str(scratch), str(repeats)]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    lines = [line for line in result.stdout.splitlines() if line.startswith("[process-bench] ")]
    if result.returncode != 0 or not lines:
        raise RuntimeError(f"{' '.join(command)} exited {result.returncode}: {(result.stdout + result.stderr)[-2000:]}")
    return [Rate(**r) for r in json.loads(lines[-1][len("[process-bench] ") :])]


def _gpu_visible() -> bool:
    code = "import tensorflow as tf; print(len(tf.config.list_physical_devices('GPU')))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})  # fmt: skip
    return result.returncode == 0 and result.stdout.strip().splitlines()[-1:] != ["0"]


def run(repeats: int) -> list[dict]:
    """The benchmark's rows (see benchmarks/run.py)."""
    rows: list[dict] = []
    gpu = _gpu_visible()
    with tempfile.TemporaryDirectory(prefix="process-bench-") as scratch_text:
        scratch = Path(scratch_text)
        inputs = {"csv": scratch / "csv", "images": scratch / "images"}
        write_csv_input(inputs["csv"], CSV_ROWS)
        write_image_input(inputs["images"], IMAGES)
        labels = {
            "csv": f"CSV {CSV_ROWS:,} rows x {CSV_FEATURES} features -> tfrecord",
            "images": f"{IMAGES:,} {IMAGE_SIDE}x{IMAGE_SIDE} JPEGs -> {TARGET_SIDE}x{TARGET_SIDE} image-tfrecord",
        }
        for kind in ("csv", "images"):
            raw = inputs[kind]
            # The baseline is slow and steady: fewer repeats keep the benchmark short.
            baseline = median_rate(_child(kind, "baseline", raw, scratch, max(1, min(repeats, 2)), gpu=False))
            cpu = _child(kind, "transform", raw, scratch, repeats, gpu=False)
            ours = median_rate(cpu)
            rows.append({"benchmark": "process", "metric": f"{labels[kind]}: single-threaded Python (baseline)",
                         "value": baseline.describe(), "ratio": "1.00", "target": ""})  # fmt: skip
            rows.append(
                {
                    "benchmark": "process",
                    "metric": f"{labels[kind]}: built-in transform, CPU ({os.cpu_count()} cores)",
                    "value": f"{ours.describe()} (runs {json.dumps([round(r.seconds, 2) for r in cpu])} s)",
                    "ratio": f"{ours.per_second / baseline.per_second:.2f}x",
                    "target": "> 1x the baseline",
                }
            )
            if gpu:
                on_gpu = median_rate(_child(kind, "transform", raw, scratch, repeats, gpu=True))
                rows.append({"benchmark": "process", "metric": f"{labels[kind]}: built-in transform, GPU visible",
                             "value": on_gpu.describe(), "ratio": f"{on_gpu.per_second / baseline.per_second:.2f}x",
                             "target": ""})  # fmt: skip
            else:
                rows.append({"benchmark": "process", "metric": f"{labels[kind]}: built-in transform, GPU visible",
                             "value": "skipped", "ratio": "", "target": "no GPU visible to TensorFlow here"})  # fmt: skip
    return rows


def main(argv: list[str]) -> int:
    """``python -m benchmarks.process_bench KIND HOW RAW SCRATCH REPEATS``: one measurement, as JSON."""
    kind, how, raw, scratch, repeats = argv
    rates = measure(kind, how, Path(raw), Path(scratch), int(repeats))
    print("[process-bench] " + json.dumps([r.__dict__ for r in rates]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
