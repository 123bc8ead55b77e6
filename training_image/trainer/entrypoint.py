"""``python -m trainer [train]``: run the training job; on any failure write ``output/failure``.

``python -m trainer serve`` (SageMaker hosting) is dispatched to :mod:`trainer.serve`, and
``python -m trainer process [ARGS]`` (SageMaker Processing) to :mod:`trainer.process`; each mode
records its own failures the way its SageMaker contract expects.

SageMaker starts training images with the single argument ``train``; ``docker run`` on an EC2
node may pass none. Both mean the same. Everything else is refused, so a wrong command line
fails loudly instead of training with defaults.

A job whose hyperparameters name a script (``sagemaker_program``, what the SageMaker SDK's
``entry_point`` sets) runs that script (:mod:`trainer.user_code`); only a job without one trains a
built-in model. A script the image cannot run is refused, never replaced by a built-in model.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from trainer.contract import environment
from trainer.contract.errors import ConfigError
from trainer.contract.failure import record_failure, run_recorded
from trainer.logs import log
from trainer.train import runner as train
from trainer.user_code import contract as script_contract
from trainer.user_code import runner as script_runner

ACCEPTED_ARGUMENTS = ([], ["train"])


def main(argv: Sequence[str] | None = None) -> int:
    """Runs one training job and returns the process exit status (0 only on success)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["serve"]:  # SageMaker hosting: its own runner, its own failure handling
        from trainer.serve import main as serve

        return serve(args[1:])
    if args[:1] == ["process"]:  # SageMaker Processing: output/message instead of output/failure
        from trainer.process import main as process

        return process(args[1:])
    paths = environment.resolve_paths()
    status = run_recorded(lambda: _train(args), lambda reason: record_failure(paths, reason), "the trainer")
    if status != 0:
        return status
    # A failure file left by an interrupted earlier attempt must not outlive this success.
    paths.failure_file.unlink(missing_ok=True)
    log("success")
    return 0


def _train(args: list[str]) -> None:
    """The training job: the user's script when the hyperparameters name one, else the built-in model."""
    if args not in ACCEPTED_ARGUMENTS:
        raise ConfigError(
            f"Unexpected arguments {args}: the image takes 'train' (or no argument) for training, 'serve' "
            "for hosting and 'process [ARGS]' for processing, what SageMaker passes; configure it with hyperparameters.json and environment variables."
        )
    env = environment.load_environment()
    job = script_contract.script_job(env.hyperparameters)
    if job is not None:
        script_runner.run(env, job)
    else:
        script_contract.refuse_unclaimed_code(env)
        train.run(env)
