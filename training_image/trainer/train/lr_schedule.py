"""The learning rate over steps: a linear warm-up to the (batch-scaled) rate, then that rate.

With a large global batch (many GPUs, ``batch_size_per_gpu``) the linear scaling rule multiplies
the rate (``TrainingConfig.resolved_for``); starting at that rate diverges early in training, so
the rate rises linearly over the first ``warmup_epochs`` (Goyal et al., "Accurate, Large
Minibatch SGD: Training ImageNet in 1 Hour", 2017, sections 2.1-2.2).
"""

from __future__ import annotations

from typing import Any


def learning_rate(peak: float, *, warmup_steps: int) -> Any:
    """``peak`` as is without warm-up, else a Keras schedule: ``peak * min(1, (step + 1) / warmup_steps)``.

    Step 0 trains at ``peak / warmup_steps`` (not 0, which would waste the step) and step
    ``warmup_steps - 1`` at ``peak``. The optimizer's ``iterations`` is the step, so a run resumed
    from a checkpoint continues the ramp where it stopped.
    """
    if warmup_steps <= 1:
        return peak
    import keras

    @keras.saving.register_keras_serializable(package="trainer")
    class LinearWarmup(keras.optimizers.schedules.LearningRateSchedule):  # type: ignore[misc]
        def __init__(self, peak: float, warmup_steps: int) -> None:
            self.peak = peak
            self.warmup_steps = warmup_steps

        def __call__(self, step: Any) -> Any:
            from keras import ops

            fraction = ops.minimum(1.0, (ops.cast(step, "float32") + 1.0) / float(self.warmup_steps))
            return self.peak * fraction

        def get_config(self) -> dict[str, Any]:
            return {"peak": self.peak, "warmup_steps": self.warmup_steps}

    return LinearWarmup(peak, warmup_steps)
