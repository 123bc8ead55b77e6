"""Wall time and peak memory of a whole process tree (the CDK CLI runs Node, Python and jsii's Node)."""

from __future__ import annotations

import os
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class Run:
    """One measured command.

    Attributes:
        wall_s: Wall-clock seconds.
        peak_rss_mib: Highest sum of resident memory over the process and its descendants.
    """

    wall_s: float
    peak_rss_mib: float


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def _tree_rss(root: int) -> int:
    tree = _children()
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            pass
        stack.extend(tree.get(pid, []))
    return total


def run_measured(cmd: Sequence[str], *, cwd: Path, env: Mapping[str, str], timeout: float = 900) -> Run:
    """Run ``cmd`` to completion, sampling the tree's memory every 20 ms; raise on failure."""
    start = time.perf_counter()
    proc = subprocess.Popen(list(cmd), cwd=cwd, env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, _tree_rss(proc.pid))
            done.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, _ = proc.communicate(timeout=timeout)
    wall = time.perf_counter() - start
    done.set()
    sampler.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{out.decode(errors='replace')[-3000:]}")
    return Run(wall_s=wall, peak_rss_mib=peak / 2**20)


def median_run(runs: Sequence[Run]) -> Run:
    """Median wall time and median peak memory of repeated runs."""
    return Run(
        wall_s=statistics.median(r.wall_s for r in runs),
        peak_rss_mib=statistics.median(r.peak_rss_mib for r in runs),
    )
