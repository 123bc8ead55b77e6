"""``docs/architecture.png``, drawn from the app itself: never by hand.

Synthesizes the app offline (the emulator's account and region, the committed lookups, no AWS
call) with the serving stack on, so every stack a deploy can create is drawn, then draws the
assembly's construct tree with ``cdk-dia`` (npm) and renders its Graphviz source with ``dot``.
Neither is part of the bootstrap: ``npm install --no-save cdk-dia@0.12.3`` and ``apt-get install
-y graphviz`` (Debian) bring them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional, Sequence

from scripts.common import EXIT_OK, ROOT, OperatorError, help_epilog, run

PICTURE = ROOT / "docs" / "architecture.png"
REFRESH = "python -m scripts.architecture"
CDK_DIA = "cdk-dia@0.12.3"
DPI = 80
"""Enough to read every label; cdk-dia's own 200 dpi makes a 3 MB picture."""
SERVING_ON = ("-c", "gpu_training.serving.enabled=true", "-c", "gpu_training.serving.training_job_name=example-job")
OFFLINE = ("-c", "account=123456789012", "-c", "region=us-east-1")


def tool(name: str, fix: str) -> str:
    """The path of ``name`` in the project's ``node_modules/.bin`` or on ``PATH``; refused in one line with ``fix``."""
    local = ROOT / "node_modules" / ".bin" / name
    found = str(local) if local.exists() else shutil.which(name)
    if not found:
        raise OperatorError(f"{name} not found: {fix}")
    return found


def tools() -> tuple[str, str, str]:
    """The CDK CLI, cdk-dia and Graphviz's dot."""
    return (
        tool("cdk", "run scripts/bootstrap.sh"),
        tool("cdk-dia", f"npm install --no-save {CDK_DIA}"),
        tool("dot", "apt-get install -y graphviz (or your system's graphviz package)"),
    )


def _offline_env() -> dict[str, str]:
    # No credentials, no profile: the synth cannot reach an account whatever this shell holds.
    return {k: v for k, v in os.environ.items() if not k.startswith("AWS_") and not k.startswith("CDK_DEFAULT_")}


def draw(output: Path, dot_source: Optional[Path] = None) -> list[str]:
    """Write the picture to ``output`` (and its Graphviz source to ``dot_source``); return the stacks drawn."""
    cdk, cdk_dia, dot = tools()
    with tempfile.TemporaryDirectory(prefix="architecture-") as tmp:
        assembly = Path(tmp) / "cdk.out"
        synth = [cdk, "synth", "--quiet", "--no-lookups", "--no-notices", "-o", str(assembly), *OFFLINE, *SERVING_ON]
        _call(synth, "cdk synth")
        _call([cdk_dia, "--tree", str(assembly / "tree.json"), "--target", str(Path(tmp) / "diagram.png")], "cdk-dia")
        source = Path(tmp) / "diagram.dot"
        output.parent.mkdir(parents=True, exist_ok=True)
        _call([dot, f"-Gdpi={DPI}", "-Tpng", str(source), "-o", str(output)], "dot")
        if dot_source:
            shutil.copyfile(source, dot_source)
        manifest = json.loads((assembly / "manifest.json").read_text(encoding="utf-8"))
    return sorted(k for k, v in manifest["artifacts"].items() if v.get("type") == "aws:cloudformation:stack")


def _call(command: list[str], what: str) -> None:
    done = subprocess.run(command, cwd=ROOT, env=_offline_env(), capture_output=True, text=True)
    if done.returncode != 0:
        last = [line for line in (done.stderr or done.stdout).splitlines() if line.strip() and "!!" not in line]
        raise OperatorError(f"{what} failed (exit {done.returncode}): {last[-1] if last else 'no output'}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=REFRESH,
        description="Draw docs/architecture.png from the synthesized app with cdk-dia and Graphviz.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=help_epilog(
            REFRESH,
            [("", "redraw docs/architecture.png"), ("--output /tmp/a.png --dot /tmp/a.dot", "draw elsewhere, keeping the Graphviz source")],
            credentials="none: it synthesizes offline (no AWS call) and draws locally.",
            done="the picture was written",
            cannot_proceed=f"configuration: cdk-dia or Graphviz is missing (npm install --no-save {CDK_DIA}; "
            "apt-get install -y graphviz), or the synth failed",
        ),
    )
    parser.add_argument("--output", type=Path, default=PICTURE, help="where the picture goes (default: docs/architecture.png)")
    parser.add_argument("--dot", type=Path, help="also keep the picture's Graphviz source here")
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    stacks = draw(args.output, args.dot)
    print(f"wrote {args.output}: {', '.join(stacks)}")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(run(main))
