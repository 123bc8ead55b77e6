"""``python -m trainer [train]``: run the training job; on any failure write ``output/failure``.

``python -m trainer serve`` (SageMaker hosting) is dispatched to :mod:`trainer.serve`.

SageMaker starts training images with the single argument ``train``; ``docker run`` on an EC2
node may pass none. Both mean the same. Everything else is refused, so a wrong command line
fails loudly instead of training with defaults.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Sequence

from trainer import environment, train
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
    paths = environment.resolve_paths()
    try:
        if args not in ACCEPTED_ARGUMENTS:
            raise ConfigError(
                f"Unexpected arguments {args}: the trainer takes no argument or 'train' (what SageMaker passes); "
                "configure it with hyperparameters.json and environment variables."
            )
        train.run(environment.load_environment())
    except TrainerError as err:
        record_failure(paths, str(err))
        return err.exit_code
    except Exception as err:  # noqa: BLE001 - the last resort must still leave a failure file
        traceback.print_exc()
        record_failure(paths, f"Unexpected {type(err).__name__} in the trainer: {err}")
        return 1
    log("success")
    return 0
