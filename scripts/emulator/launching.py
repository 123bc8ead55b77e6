"""Launch the training job with the operator's own script, as a user runs it.

``python -m scripts.launch`` runs in a child process with the target's environment (for the
emulator: ``AWS_ENDPOINT_URL`` and dummy credentials), so what the main job exercises is the
script, its config loading and its reading of the stacks' outputs, not a copy of them.
"""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scripts.emulator.lifecycle import Lifecycle

from scripts.emulator.cdk import ROOT


def launch_command(run: "Lifecycle") -> list[str]:
    """The launch command line for this run."""
    command = [sys.executable, "-m", "scripts.launch", "--hp", f"epochs={run.options.epochs}"]
    if run.emulator is not None:
        # Emulator gap: moto's Step Functions records an execution but runs no state, so the
        # workflow's createTrainingJob.sync task never calls SageMaker. --direct sends the
        # CreateTrainingJob request the workflow would send (built by the same function).
        # Spot is a SageMaker capacity choice with no meaning for a local CPU run; the request
        # keeps the configured value.
        command.append("--direct")
    for key, value in run.context.items():
        command += ["-c", f"{key}={value}"]
    return command


def launch(run: "Lifecycle") -> str:
    """Run ``scripts.launch``; return the name of the job it started."""
    command = launch_command(run)
    result = subprocess.run(command, cwd=ROOT, env=run.env, capture_output=True, text=True, check=False)
    log = run.work_dir / "launch.log"
    log.write_text(f"$ {' '.join(command)}\n{result.stdout}{result.stderr}", encoding="utf-8")
    if result.returncode != 0:
        raise RuntimeError(f"scripts.launch failed (exit {result.returncode}): {result.stderr.strip() or result.stdout.strip()}")
    for line in result.stdout.splitlines():
        if line.startswith("job: "):
            run.progress.say(f"$ python -m scripts.launch {' '.join(command[3:])}")
            return line[len("job: ") :].strip()
    raise RuntimeError(f"scripts.launch printed no job name; output in {log}")
