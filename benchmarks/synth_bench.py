"""Benchmark 1: ``cdk synth`` of the whole app with all gates against a one-bucket app.

The three apps run interleaved (baseline, full, full without policy packs) so that drift in
machine load affects each the same; the median of the repeats is reported.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from benchmarks.measure import Run, median_run, run_measured

ROOT = Path(__file__).resolve().parent.parent
TARGET_RATIO = 1.5


def _cdk_synth(app_command: str, outdir: Path) -> list[str]:
    return [str(ROOT / "node_modules" / ".bin" / "cdk"), "synth", "--quiet", "--app", app_command, "--output", str(outdir)]


def run(repeats: int = 3) -> list[dict]:
    """Measure and return result rows."""
    python = str(ROOT / ".venv" / "bin" / "python")
    env = {**os.environ, "PATH": f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    for var in ("CDK_DEFAULT_ACCOUNT", "CDK_DEFAULT_REGION"):
        env.pop(var, None)
    apps = {
        "baseline": f"{python} benchmarks/synth_apps.py minimal",
        "full": f"{python} app.py",
        "no_packs": f"{python} benchmarks/synth_apps.py no-packs",
    }
    samples: dict[str, list[Run]] = {name: [] for name in apps}
    with tempfile.TemporaryDirectory() as tmp:
        # One warm-up of each so that first-run disk caching does not land on one side.
        for name, command in apps.items():
            run_measured(_cdk_synth(command, Path(tmp) / f"warm-{name}"), cwd=ROOT, env=env)
        for i in range(repeats):
            for name, command in apps.items():
                samples[name].append(run_measured(_cdk_synth(command, Path(tmp) / f"{name}-{i}"), cwd=ROOT, env=env))
    med = {name: median_run(runs) for name, runs in samples.items()}
    base, full, bare = med["baseline"], med["full"], med["no_packs"]
    wall_ratio = full.wall_s / base.wall_s
    mem_ratio = full.peak_rss_mib / base.peak_rss_mib
    return [
        {"benchmark": "synth", "metric": "one-bucket app (baseline)", "value": f"{base.wall_s:.2f} s, {base.peak_rss_mib:.0f} MiB", "ratio": "1.00", "target": ""},
        {"benchmark": "synth", "metric": "platform, all gates", "value": f"{full.wall_s:.2f} s, {full.peak_rss_mib:.0f} MiB",
         "ratio": f"{wall_ratio:.2f} time / {mem_ratio:.2f} mem", "target": f"<= {TARGET_RATIO}x: {'met' if max(wall_ratio, mem_ratio) <= TARGET_RATIO else 'NOT met'}"},
        {"benchmark": "synth", "metric": "platform, no policy packs", "value": f"{bare.wall_s:.2f} s, {bare.peak_rss_mib:.0f} MiB",
         "ratio": f"{bare.wall_s / base.wall_s:.2f} time", "target": f"packs cost {full.wall_s - bare.wall_s:+.2f} s"},
    ]


if __name__ == "__main__":
    for row in run(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
        print(row)
