"""The exact `run` calls of the GPU proof (issue #36), in order, from what ../shared/gpu/stage-tensorflow staged.

A drawn session has 900 s of device time, machine start, transfers and idle waits included, and a
machine idle for 30 s is given back with every part copied to it. So the staging calls carry the
tiers: call 1 copies part-00 and runs tier0 (no TensorFlow), each middle call copies one part and
checks that part's own sha256 there (a bad copy is re-sent at once, not found after the last one),
and the last part's call also carries install.sh, unpacks TensorFlow and runs tf-check. Then the
later tiers, in order of value.

Each call carries the working tree (`git ls-files -co --exclude-standard`: tracked and
untracked-not-ignored files) plus its carried files, against the device's 64 MiB cap; a call over
it is refused in one line that says how to re-split the parts.

    python -m benchmarks.gpu_calls              # in the project root, after ../shared/gpu/stage-tensorflow

Prints one line per call: its number, what it carries, its expected device time and the running
total, then the `run` arguments as a JSON object to copy verbatim; then the budget arithmetic.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

MIB = 1 << 20
CAP_BYTES = 64 * MIB  # the working tree that travels with one call (device README, Limits)
BUDGET_S = 900  # a drawn session's device time
START_S = 120  # a machine's start, 1-3 minutes (the device README)
STAGE = ".gpu-stage"
REMOTE = "/root/gpu-stage"
COPY_S = 15  # a copy call's cost, until the first copy call measures it (budget_left_s before and after)
TIER0_S = 120  # tier0 expected (its steps' limits add up to 300 s)
TIER0_TIMEOUT_S = 360
INSTALL_S = 90  # join, sha256 and xz -d of ~1.3 GiB on 16 cores (install.sh prints its seconds)
TF_CHECK_S = 90  # TensorFlow's import, the trainer's check, first-call PTX JIT (limit 180 s)
LAST_PART_TIMEOUT_S = 420


@dataclass(frozen=True)
class Tiers:
    """A call after the staging: gpu_run.sh tiers, with the call's timeout and its expected device time."""

    tiers: str
    timeout_s: int
    expected_s: int


# After the staging, in order of value (benchmarks/RESULTS.md, "The GPU proof in 15 minutes").
LATER = (
    Tiers("tests", 330, 150),
    Tiers("resnet records", 600, 270),
    Tiers("jit fp16-split serve", 600, 240),
    Tiers("torch-compile", 330, 180),
)


@dataclass(frozen=True)
class Call:
    """One `run` call.

    Attributes:
        number: Its place in the order, from 1.
        carry: The ignored paths it carries (relative to the project root).
        carry_bytes: The working tree plus the carried files.
        command: The command, run in the repository root on the device.
        timeout_s: The call's limit.
        expected_s: Its expected device time (a copy call's is a guess until the first one measures it).
    """

    number: int
    carry: tuple[str, ...]
    carry_bytes: int
    command: str
    timeout_s: int
    expected_s: int

    def arguments(self) -> str:
        """The `run` arguments as one JSON object."""
        return json.dumps({"carry": list(self.carry), "timeout_s": self.timeout_s, "command": self.command})


class Refused(Exception):
    """The stage cannot be sent as it is; the message is the one line that says why and what to do."""


def tree_bytes(root: Path) -> int:
    """What travels with every call besides its carried files: tracked and untracked-not-ignored files."""
    listed = subprocess.run(["git", "ls-files", "-z", "-co", "--exclude-standard"], cwd=root, capture_output=True,
                            check=True).stdout  # fmt: skip
    paths = (root / name for name in listed.decode().split("\0") if name)
    return sum(path.lstat().st_size for path in paths if path.is_symlink() or path.is_file())


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        while block := source.read(8 * MIB):
            digest.update(block)
    return digest.hexdigest()


def copy_command(part: str, digest: str) -> str:
    """Copies one carried part to the machine's stage and checks its own sum there."""
    return (f"mkdir -p {REMOTE} && cp {STAGE}/{part} {REMOTE}/ && "
            f'echo "{digest}  {REMOTE}/{part}" | sha256sum -c --quiet')  # fmt: skip


def plan(root: Path, *, tree: int | None = None, cap: int = CAP_BYTES) -> list[Call]:
    """The calls for the stage under ``root``, or Refused (one line) where it cannot be sent."""
    stage = root / STAGE
    parts = sorted(p.name for p in stage.glob("part-*")) if stage.is_dir() else []
    install = stage / "install.sh"
    if not parts or not install.is_file():
        raise Refused(f"gpu_calls: no {STAGE}/part-* and {STAGE}/install.sh here: run ../shared/gpu/stage-tensorflow first")
    wanted = re.search(r'"\$have" = (\d+)', install.read_text())
    if not wanted or int(wanted.group(1)) != len(parts):
        raise Refused(f"gpu_calls: {STAGE}/install.sh expects {wanted.group(1) if wanted else '?'} parts, {len(parts)} are "
                      f"here: run ../shared/gpu/stage-tensorflow again")  # fmt: skip
    tree = tree_bytes(root) if tree is None else tree
    calls: list[Call] = []
    last = len(parts) - 1
    for index, part in enumerate(parts):
        carry = [f"{STAGE}/{part}"]
        command = copy_command(part, sha256(stage / part))
        if index == 0:
            command += " && bash benchmarks/gpu_run.sh tier0"
            timeout_s, expected_s = TIER0_TIMEOUT_S, START_S + TIER0_S + COPY_S
        else:
            command += f" && echo \"{part} ok: $(ls {REMOTE} | wc -l) of {len(parts)} parts there\""
            timeout_s, expected_s = 60, COPY_S
        if index == last and last > 0:
            carry.append(f"{STAGE}/install.sh")
            command = command.rsplit(" && echo ", 1)[0] + f" && bash {STAGE}/install.sh && bash benchmarks/gpu_run.sh tf-check"
            timeout_s, expected_s = LAST_PART_TIMEOUT_S, COPY_S + INSTALL_S + TF_CHECK_S
        size = tree + sum((root / path).stat().st_size for path in carry)
        calls.append(Call(index + 1, tuple(carry), size, command, timeout_s, expected_s))
    if len(parts) == 1:  # one part: the install and tf-check follow in their own call
        calls.append(Call(2, (f"{STAGE}/install.sh",), tree + install.stat().st_size,
                          f"bash {STAGE}/install.sh && bash benchmarks/gpu_run.sh tf-check", LAST_PART_TIMEOUT_S,
                          INSTALL_S + TF_CHECK_S))  # fmt: skip
    for later in LATER:
        calls.append(Call(len(calls) + 1, (), tree, f"bash benchmarks/gpu_run.sh {later.tiers}", later.timeout_s,
                          later.expected_s))  # fmt: skip
    over = [call for call in calls if call.carry_bytes > cap]
    if over:
        worst = max(over, key=lambda call: call.carry_bytes)
        part_mib = (cap - tree - install.stat().st_size) // MIB - 1
        if part_mib < 16:  # stage-tensorflow's least
            raise Refused(f"gpu_calls: the working tree alone is {tree / MIB:.2f} MiB of the {cap // MIB} MiB a call "
                          f"carries: too little room for a part; ignore or remove what grew it")  # fmt: skip
        raise Refused(f"gpu_calls: call {worst.number} would carry {worst.carry_bytes / MIB:.2f} MiB (the tree "
                      f"{tree / MIB:.2f} MiB + {', '.join(worst.carry)}), over the {cap // MIB} MiB cap "
                      f"({len(over)} calls over): re-split with PART_MIB={part_mib} ../shared/gpu/stage-tensorflow")  # fmt: skip
    return calls


def budget_lines(calls: list[Call], parts: int) -> list[str]:
    """The budget arithmetic: where the expected device time crosses the session's 900 s."""
    staged = calls[parts - 1] if parts > 1 else calls[1]
    through_staging = sum(call.expected_s for call in calls[: staged.number])
    lines = [
        f"# budget ({BUDGET_S} s): start ~{START_S} s + tier0 ~{TIER0_S} s (step limits 300 s) + {parts} x c "
        f"(c = one copy call, ~{COPY_S} s assumed: {parts * COPY_S} s) + install ~{INSTALL_S} s + tf-check ~{TF_CHECK_S} s "
        f"(limit 180 s) = ~{through_staging} s through call {staged.number}",
        f"# break-even copy cost: with c above {(BUDGET_S - START_S - TIER0_S - INSTALL_S - TF_CHECK_S) // parts} s "
        f"TensorFlow cannot be staged and checked within {BUDGET_S} s; measure c after call 2 (budget_left_s before and after)",
    ]
    total = through_staging
    for call in calls[staged.number :]:
        total += call.expected_s
        verdict = "fits" if total <= BUDGET_S else "over the budget: only if the measured costs leave room"
        lines.append(f"# + call {call.number} ({call.command.removeprefix('bash benchmarks/gpu_run.sh ')}) ~{call.expected_s} s "
                     f"= ~{total} s: {verdict}")  # fmt: skip
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent, help="the project root")
    args = parser.parse_args(argv)
    try:
        calls = plan(args.root)
    except Refused as refusal:
        print(refusal)
        return 1
    parts = sum(1 for call in calls if any("/part-" in path for path in call.carry))
    print(f"# {len(calls)} run calls, in order, back to back (a machine idle for 30 s is given back with every part "
          f"copied); pass each JSON object's carry, timeout_s and command. If a copy's sha256 check fails, send the "
          f"same call again at once.")  # fmt: skip
    total = 0
    for call in calls:
        total += call.expected_s
        carried = f"{call.carry_bytes / MIB:5.2f} of {CAP_BYTES // MIB} MiB"
        print(f"call {call.number:2}  {carried}  ~{call.expected_s:3} s (total ~{total:4} s)  {call.arguments()}")
    for line in budget_lines(calls, parts):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
