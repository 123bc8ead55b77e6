"""Start-up: process start to the trainer's first training step, a small channel against a large one.

The trainer reads counts and shapes from the channel's manifest (``trainer.datasets.manifest``), so
nothing before the first step should grow with the data. Two CSV channels of the same shards
(MLP 128-64, 64 features): ``SMALL_MB`` and about ``LARGE_MB`` on disk, the large one made by
copying the small one's shards under new names and extending its manifest (a few seconds instead
of minutes of generation; identical rows do not change what start-up does). Each run is
``python -m trainer train`` with ``steps_per_execution=1``, timed from just before the process
starts to its ``[trainer] first-step`` line, then stopped. Runs interleave small and large;
the median of each is reported. One extra run on the large channel without its manifest shows
the scan the manifest saves (the trainer's behaviour before manifests).

    .venv/bin/python -m benchmarks.startup_bench [repeats]
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._trainer import SyntheticSpec, job_dir, start, trainer_command, trainer_env, write_data

TARGET_RATIO = 1.2
SMALL_MB = 10
LARGE_MB = 1024
SHARDS = 4
HYPERPARAMETERS = {"epochs": 1, "batch_size": 256, "steps_per_execution": 1}


def _large_channel(small: Path, target: Path, copies: int) -> Path:
    from trainer.datasets import manifest

    target.mkdir(parents=True)
    recorded = manifest.read(small)
    assert recorded is not None, "the synthetic writer writes a manifest"
    entries = []
    for copy in range(copies):
        for entry in recorded.files:
            name = f"copy-{copy:04d}-{entry.path}"
            shutil.copyfile(small / entry.path, target / name)
            entries.append(manifest.FileEntry(name, entry.examples, entry.bytes, entry.header))
    manifest.write(target, manifest.Manifest(recorded.data_format, recorded.num_features, recorded.num_classes,
                                             tuple(entries)))  # fmt: skip
    return target


def _to_first_step(channel: Path, base: Path) -> float:
    job_dir(base, HYPERPARAMETERS)
    process, _, started = start(trainer_command(), trainer_env(base, channel), base / "stderr.txt")
    assert process.stdout is not None
    try:
        for line in process.stdout:
            if line.startswith("[trainer] first-step "):
                return time.perf_counter() - started
        raise RuntimeError(f"the trainer exited {process.wait()} before its first step; see {base / 'stderr.txt'}")
    finally:
        process.kill()
        process.wait()


def run(repeats: int = 3) -> list[dict]:
    """Measure and return result rows."""
    with tempfile.TemporaryDirectory(prefix="startup-bench-") as tmp:
        root = Path(tmp)
        examples = SMALL_MB * 2**20 // 580  # ~580 bytes per CSV row of 64 features
        small = write_data(root / "small", SyntheticSpec("csv", examples=examples, features=64, classes=8,
                                                         shards=SHARDS, seed=5))  # fmt: skip
        small_bytes = sum(p.stat().st_size for p in small.glob("*.csv"))
        large = _large_channel(small, root / "large", max(1, round(LARGE_MB * 2**20 / small_bytes)))
        large_bytes = sum(p.stat().st_size for p in large.glob("*.csv"))
        large_files = len(list(large.glob("*.csv")))
        times: dict[str, list[float]] = {"small": [], "large": []}
        for index in range(max(repeats, 1)):
            for name, channel in (("small", small), ("large", large)):
                times[name].append(_to_first_step(channel, root / f"{name}-{index}"))
        (large / ".trainer-manifest.json").unlink()
        scanned = _to_first_step(large, root / "large-scan")
    small_s, large_s = statistics.median(times["small"]), statistics.median(times["large"])
    ratio = large_s / small_s
    describe = lambda values: f"{statistics.median(values):.1f} s ({', '.join(f'{v:.1f}' for v in values)})"  # noqa: E731
    return [
        {"benchmark": "startup", "metric": f"process start to first step, {small_bytes / 2**20:.0f} MB CSV channel "
         f"({SHARDS} files, manifest)", "value": describe(times["small"]), "ratio": "1.00 (baseline)", "target": ""},
        {"benchmark": "startup", "metric": f"process start to first step, {large_bytes / 2**30:.2f} GB CSV channel "
         f"({large_files} files, manifest)", "value": describe(times["large"]),
         "ratio": f"{ratio:.2f}", "target": f"<= {TARGET_RATIO}x: {'met' if ratio <= TARGET_RATIO else 'NOT met'}"},
        {"benchmark": "startup", "metric": "the same large channel without its manifest (full scan, as before)",
         "value": f"{scanned:.1f} s", "ratio": f"{scanned / small_s:.2f}", "target": ""},
    ]  # fmt: skip


if __name__ == "__main__":
    for row in run(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
        print(row)
