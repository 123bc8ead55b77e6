"""Launch the training job with the operator's own script, as a user runs it.

``python -m scripts.launch`` runs in a child process with the target's environment (for the
emulator: ``AWS_ENDPOINT_URL`` and dummy credentials), so what the main job exercises is the
script, its config loading and its reading of the stacks' outputs, not a copy of them.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Mapping, Protocol

EXAMPLE_SCRIPT_DIR = Path("training_image") / "examples" / "keras_image_classifier"
"""The example user script the main job trains with ``--user-script`` (relative to the repository
root, where the launch script runs)."""

ROOT = Path(__file__).resolve().parents[2]


class _RunOptions(Protocol):
    @property
    def epochs(self) -> int: ...

    @property
    def real_account(self) -> bool: ...


class _Progress(Protocol):
    def say(self, message: str) -> None: ...


class LaunchingRun(Protocol):
    """What launching needs of the run (:class:`scripts.emulator.lifecycle.Lifecycle` is one), so that
    this part does not import the entry that wires it."""

    options: _RunOptions
    progress: _Progress
    work_dir: Path

    @property
    def context(self) -> Mapping[str, str]: ...

    def run_script(self, module: str, *args: str, timeout: float = ...) -> str: ...


def launch_arguments(run: LaunchingRun, *, user_script: bool = False) -> list[str]:
    """Arguments of ``python -m scripts.launch`` for this run."""
    arguments = ["--hp", f"epochs={run.options.epochs}"]
    if user_script:
        arguments = [
            "--source-dir", str(EXAMPLE_SCRIPT_DIR),
            "--entry-point", "train.py",
            *arguments,
            "--hp", "batch-size=32",
        ]
    # Through the deployed workflow, as a user launches: on the emulator the local Step Functions
    # executor (scripts.emulator.states) runs its real definition, JSONata and all, and its
    # createTrainingJob.sync task creates the job the local runner trains. (--direct, which sends
    # the same request without the workflow, is tested in tests/scripts.)
    return [*arguments, *spend_consent(run)]


def spend_consent(run: LaunchingRun) -> list[str]:
    """``--yes`` on the emulator, where no job bills; on a real account nothing: :func:`check` refuses a
    run whose jobs cost more than ``cost.confirm_above_usd`` before anything is deployed."""
    return [] if run.options.real_account else ["--yes"]


def check(run: LaunchingRun, *, user_script: bool = False) -> dict[str, str]:
    """Refuse the run's launch before anything is deployed; return the job's hyperparameters.

    The same checks, on the same options, as after the deploy: ``scripts.launch``'s own parser
    and :func:`~stacks.components.training_job_spec.resolve_launch` (SageMaker's limits, the
    instance type, the job name, and the training image's own rules for every hyperparameter:
    unknown names, values out of range, the batch split over the GPUs), which would otherwise fail
    only once the job runs.

    Raises:
        RuntimeError: one line naming what is wrong.
    """
    from scripts.common import OperatorError, load_platform_config
    from scripts.launch import build_parser, options_from_args
    from stacks.components.training_job_spec import JobResources, JobTemplate, LaunchError, code_uri_prefix, resolve_launch

    args = build_parser().parse_args(launch_arguments(run, user_script=user_script))
    try:
        config = load_platform_config([f"{k}={v}" for k, v in run.context.items()])
        template = JobTemplate.from_config(config, JobResources("", "", "", "", "", (), ()), metric_definitions=())
        options = options_from_args(args)
        if user_script:
            # The code is packed now (the directory and entry point must exist) and uploaded after the deploy.
            from scripts.launch import PENDING_CODE
            from scripts.source_code import pack_source

            pack_source(ROOT / args.source_dir, args.entry_point)
            options = replace(options, code_uri=f"{code_uri_prefix(template)}{PENDING_CODE}")
        values = resolve_launch(template, options)
    except (OperatorError, LaunchError) as err:
        raise RuntimeError(f"launch refused before deploy: {err}") from None
    if run.options.real_account:
        from scripts.launch import training_price

        price = training_price(config, values)
        if price.most_usd > config.cost.confirm_above_usd:
            raise RuntimeError(
                f"launch refused before deploy: {price.line()}: over cost.confirm_above_usd = ${config.cost.confirm_above_usd:,}; "
                "pass -c gpu_training.cost.confirm_above_usd=N to accept it"
            )
    return dict(values.hyperparameters)  # type: ignore[arg-type]


def launch(run: LaunchingRun, *, user_script: bool = False) -> str:
    """Run ``scripts.launch``; return the name of the job it started."""
    arguments = launch_arguments(run, user_script=user_script)
    output = run.run_script("launch", *arguments)
    run.progress.say(f"$ python -m scripts.launch {' '.join(arguments)}")
    for line in output.splitlines():
        if line.startswith("job: "):
            return line[len("job: ") :].strip()
    raise RuntimeError(f"scripts.launch printed no job name; output in {run.work_dir / 'launch.log'}")
