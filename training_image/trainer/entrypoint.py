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
import traceback
from collections.abc import Sequence

from trainer import environment, train
from trainer.user_code import contract as script_contract
from trainer.user_code import runner as script_runner
from trainer.errors import ConfigError, TrainerError
from trainer.failure import record_failure
from trainer.logs import log

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
    try:
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
    except TrainerError as err:
        record_failure(paths, str(err))
        return err.exit_code
    except Exception as err:  # noqa: BLE001 - the last resort must still leave a failure file
        traceback.print_exc()
        record_failure(paths, f"Unexpected {type(err).__name__} in the trainer: {err}")
        return 1
    # A failure file left by an interrupted earlier attempt must not outlive this success.
    paths.failure_file.unlink(missing_ok=True)
    log("success")
    return 0
