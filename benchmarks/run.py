"""Benchmark runner: prints a table and records it in benchmarks/RESULTS.md.

    .venv/bin/python -m benchmarks.run                 # every benchmark that can run here
    .venv/bin/python -m benchmarks.run synth cost      # a selection
    .venv/bin/python -m benchmarks.run --no-record     # print only

Every figure is a ratio against a baseline measured in the same run, so it holds on a noisy
machine. These are benchmarks, not tests: nothing here fails a build.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Callable

from benchmarks._table import table

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def _synth(repeats: int) -> list[dict]:
    from benchmarks import synth_bench

    return synth_bench.run(repeats)


def _pipeline(repeats: int) -> list[dict]:
    from benchmarks import pipeline_bench

    return pipeline_bench.run(repeats)


def _startup(repeats: int) -> list[dict]:
    from benchmarks import startup_bench

    return startup_bench.run(repeats)


def _throughput(repeats: int) -> list[dict]:
    from benchmarks import throughput_bench

    return throughput_bench.run(repeats)


def _gpu(repeats: int) -> list[dict]:
    from benchmarks import gpu_bench

    return gpu_bench.run(repeats)


def _resnet50(repeats: int) -> list[dict]:
    from benchmarks import resnet_bench

    return resnet_bench.run(repeats)


def _script(repeats: int) -> list[dict]:
    from benchmarks import script_bench

    return script_bench.run(repeats)


def _cost(repeats: int) -> list[dict]:
    from benchmarks import cost_bench

    return cost_bench.run()


def _serve(repeats: int) -> list[dict]:
    from benchmarks import serve_bench

    return serve_bench.run(repeats)


def _serve_warmup(repeats: int) -> list[dict]:
    from benchmarks import serve_warmup_bench

    return serve_warmup_bench.run(repeats)


def _transform(repeats: int) -> list[dict]:
    from benchmarks import transform_bench

    return transform_bench.run(repeats)


def _process(repeats: int) -> list[dict]:
    from benchmarks import process_bench

    return process_bench.run(repeats)


def _bottleneck(repeats: int) -> list[dict]:
    from benchmarks import bottleneck_bench

    return bottleneck_bench.run(repeats)


def _resnet_torch(repeats: int) -> list[dict]:
    from benchmarks import resnet_bench

    return resnet_bench.run_torch(repeats)


def _records(repeats: int) -> list[dict]:
    from benchmarks import records_bench

    return records_bench.run(max(repeats, 3))


BENCHMARKS: dict[str, Callable[[int], list[dict]]] = {
    "synth": _synth,
    "pipeline": _pipeline,
    "startup": _startup,
    "throughput": _throughput,
    "gpu": _gpu,
    "resnet50": _resnet50,
    "cost": _cost,
    "script": _script,
    "serve": _serve,
    "serve_warmup": _serve_warmup,
    "transform": _transform,
    "process": _process,
    "bottleneck": _bottleneck,
    "records": _records,
    "resnet_torch": _resnet_torch,
}


def machine() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{platform.node() or 'host'}: {os.cpu_count()} cores ({cpu}), {mem_gib:.0f} GiB, Python {platform.python_version()}"


def commit() -> str:
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        return sha + ("+uncommitted" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def record(rows: list[dict], selected: list[str]) -> None:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    section = f"## {stamp} — commit {commit()}\n\nMachine: {machine()}. Benchmarks: {', '.join(selected)}.\n\n{table(rows)}\n"
    header = "# Benchmark results\n\nNewest first. Produced by `.venv/bin/python -m benchmarks.run`; see benchmarks/run.py.\n\n"
    previous = RESULTS.read_text().split("\n## ", 1)[1] if RESULTS.exists() and "\n## " in RESULTS.read_text() else ""
    RESULTS.write_text(header + section + ("\n## " + previous if previous else ""))


def main() -> int:
    parser = argparse.ArgumentParser(description="Run the benchmarks")
    parser.add_argument("names", nargs="*", choices=[*BENCHMARKS, []], help="default: all")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-record", action="store_true", help="do not write benchmarks/RESULTS.md")
    args = parser.parse_args()
    selected = args.names or list(BENCHMARKS)
    rows: list[dict] = []
    for name in selected:
        print(f"running {name}...", file=sys.stderr, flush=True)
        rows += BENCHMARKS[name](args.repeats)
    print(table(rows))
    if not args.no_record:
        record(rows, selected)
        print(f"\nrecorded in {RESULTS.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
