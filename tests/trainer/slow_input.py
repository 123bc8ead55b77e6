"""``python tests/trainer/slow_input.py [train]``: the trainer with a deliberately slow input pipeline.

Every batch the trainer's tabular pipeline yields is held back ``SLOW_INPUT_SECONDS`` (default
0.05) in a ``tf.py_function`` after the pipeline's prefetch, as a CPU-starved JPEG decode would
hold it: the step loop then waits on data, and the input-wait figure must say so.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from trainer.datasets import tabular as data
from trainer.entrypoint import main

DELAY = float(os.environ.get("SLOW_INPUT_SECONDS", "0.05"))
_make_epochs = data.make_epochs


def _slow_make_epochs(*args: Any, **kwargs: Any) -> Any:
    import tensorflow as tf

    def hold(features: Any, labels: Any) -> Any:
        def wait(value: Any) -> Any:
            time.sleep(DELAY)
            return value

        held = tf.py_function(wait, [labels], labels.dtype)
        held.set_shape(labels.shape)
        return features, held

    return _make_epochs(*args, **kwargs).map(hold)


data.make_epochs = _slow_make_epochs

if __name__ == "__main__":
    sys.exit(main())
