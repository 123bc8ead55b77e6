"""Launch the training job with the operator's own script, as a user runs it.

``python -m scripts.launch`` runs in a child process with the target's environment (for the
emulator: ``AWS_ENDPOINT_URL`` and dummy credentials), so what the main job exercises is the
script, its config loading and its reading of the stacks' outputs, not a copy of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

EXAMPLE_SCRIPT_DIR = Path("training_image") / "examples" / "keras_image_classifier"
"""The example user script the main job trains with ``--user-script`` (relative to the repository
root, where the launch script runs)."""

if TYPE_CHECKING:
    from scripts.emulator.lifecycle import Lifecycle


def launch_arguments(run: "Lifecycle", *, user_script: bool = False) -> list[str]:
    """Arguments of ``python -m scripts.launch`` for this run."""
    arguments = ["--hp", f"epochs={run.options.epochs}"]
    if user_script:
        arguments = [
            "--source-dir", str(EXAMPLE_SCRIPT_DIR),
            "--entry-point", "train.py",
            *arguments,
            "--hp", "batch-size=32",
        ]
    if run.emulator is not None:
        # Emulator gap: moto's Step Functions records an execution but runs no state, so the
        # workflow's createTrainingJob.sync task never calls SageMaker. --direct sends the
        # CreateTrainingJob request the workflow would send (built by the same function).
        arguments.append("--direct")
    return arguments


def launch(run: "Lifecycle", *, user_script: bool = False) -> str:
    """Run ``scripts.launch``; return the name of the job it started."""
    arguments = launch_arguments(run, user_script=user_script)
    output = run.run_script("launch", *arguments)
    run.progress.say(f"$ python -m scripts.launch {' '.join(arguments)}")
    for line in output.splitlines():
        if line.startswith("job: "):
            return line[len("job: ") :].strip()
    raise RuntimeError(f"scripts.launch printed no job name; output in {run.work_dir / 'launch.log'}")
