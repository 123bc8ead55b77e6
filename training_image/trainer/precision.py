"""Training precision: the ``mixed_precision`` modes and a loss scale that agrees across replicas.

Modes (the ``mixed_precision`` hyperparameter):

* ``bf16``: Keras ``mixed_bfloat16``. bfloat16 has float32's exponent range, so no loss scaling.
  Needs compute capability >= 8.0 on GPUs (A100, A10G, L4, L40S, H100); runs on CPU too.
* ``fp16``: Keras ``mixed_float16`` with a dynamic loss scale. Any GPU or CPU (tensor cores from 7.0).
* ``fp32``: float32 throughout.
* ``auto`` (default): bf16 on GPUs of compute capability >= 8.0, fp16 on >= 7.0, else fp32; fp32 on CPU.
* ``on`` / ``off``: the older names, kept: ``on`` is ``auto`` that must not end in fp32 on a GPU
  (bf16 on CPU), ``off`` is ``fp32``.

Why :class:`AgreedLossScaleOptimizer`: Keras 3's ``LossScaleOptimizer`` decides "skip this step"
from the gradients it is given, which under ``MirroredStrategy`` are each replica's own, not yet
all-reduced (the all-reduce happens later, inside the inner optimizer). Its merge-call path then
takes the first replica's verdict for all, so when replica 1 overflows and replica 0 does not,
every replica applies the all-reduced inf/NaN gradient and the scale is never lowered (reproduced
in tests/trainer/test_trainer_precision.py). Here the verdict is all-reduced first: one overflowing
replica makes every replica skip the step and halve the scale, as a correct dynamic loss scale does.
"""

from __future__ import annotations

from typing import Any

from trainer.contract.errors import ConfigError

MODES = ("auto", "bf16", "fp16", "fp32", "on", "off")
# Keras dtype policy per resolved precision.
POLICIES = {"bf16": "mixed_bfloat16", "fp16": "mixed_float16", "fp32": "float32"}
BF16_MIN_CAPABILITY = (8, 0)
TENSOR_CORE_MIN_CAPABILITY = (7, 0)


def resolve(mode: str, uses_gpus: bool, capability: tuple[int, int] | None) -> str:
    """Keras dtype policy for ``mode`` on the devices found (``capability``: the weakest GPU's).

    Raises:
        ConfigError: naming ``mixed_precision`` when the GPUs cannot run the mode asked for.
    """
    if mode in ("fp32", "off"):
        return POLICIES["fp32"]
    if not uses_gpus:
        # bf16/fp16 on CPU are correct (tests use them) but rarely faster: only when asked for.
        if mode in ("bf16", "on"):
            return POLICIES["bf16"]
        return POLICIES["fp16"] if mode == "fp16" else POLICIES["fp32"]
    if mode == "fp16":
        return POLICIES["fp16"]
    if mode == "bf16":
        if capability is None or capability < BF16_MIN_CAPABILITY:
            raise ConfigError(
                f"hyperparameter 'mixed_precision' is bf16, but the GPUs' compute capability is "
                f"{_shown(capability)}; bf16 needs 8.0 or later (A100, A10G, L4, L40S, H100). Use fp16 or auto."
            )
        return POLICIES["bf16"]
    if capability is not None and capability >= BF16_MIN_CAPABILITY:
        return POLICIES["bf16"]
    if capability is not None and capability >= TENSOR_CORE_MIN_CAPABILITY:
        return POLICIES["fp16"]
    if mode == "on":
        raise ConfigError(
            f"hyperparameter 'mixed_precision' is on, but the GPUs' compute capability is {_shown(capability)}; "
            "bf16/fp16 training needs 7.0 or later. Use mixed_precision=auto, fp16 or fp32."
        )
    return POLICIES["fp32"]


def _shown(capability: tuple[int, int] | None) -> str:
    return f"{capability[0]}.{capability[1]}" if capability else "unknown"


def wrap_optimizer(optimizer: Any, policy: str) -> Any:
    """The optimizer a step applies: with the agreed dynamic loss scale under fp16, else as is."""
    return AgreedLossScaleOptimizer(optimizer) if policy == POLICIES["fp16"] else optimizer


def _agreed_loss_scale_class() -> type:
    import keras
    import tensorflow as tf

    class _Agreed(keras.optimizers.LossScaleOptimizer):  # type: ignore[misc, name-defined]
        """``LossScaleOptimizer`` whose skip-or-apply verdict is the same on every replica."""

        def build(self, var_list: Any) -> None:
            # Counted once per step on every replica alike (the verdict is agreed), so no aggregation.
            self.skipped_steps = self.add_variable(
                shape=(), dtype="int", initializer="zeros", aggregation="none", name="skipped_steps"
            )
            super().build(var_list)

        def apply(self, grads: Any, trainable_variables: Any = None) -> None:
            grads = list(grads)
            context = tf.distribute.get_replica_context()
            local_bad = tf.cast(tf.logical_not(self.check_finite(grads)), tf.float32)
            if context is not None and context.num_replicas_in_sync > 1:
                bad = context.all_reduce(tf.distribute.ReduceOp.SUM, local_bad)
                # Every replica now sees non-finite gradients when any replica has them, whichever
                # replica's verdict Keras reads; finite gradients plus 0.0 are unchanged bit for bit.
                poison = tf.where(bad > 0, tf.constant(float("nan")), tf.constant(0.0))
                grads = [None if g is None else g + tf.cast(poison, g.dtype) for g in grads]
            else:
                bad = local_bad
            if not self.built:
                self.build(trainable_variables)
                self.built = True
            self.skipped_steps.assign_add(tf.cast(bad > 0, self.skipped_steps.dtype))
            super().apply(grads, trainable_variables)

    _Agreed.__name__ = _Agreed.__qualname__ = "AgreedLossScaleOptimizer"
    return _Agreed


_CLASS: list[type] = []


def AgreedLossScaleOptimizer(inner: Any, **kwargs: Any) -> Any:  # noqa: N802 - a class factory
    """A Keras ``LossScaleOptimizer`` over ``inner`` that skips a step on every replica or none.

    Built lazily so importing this module imports no TensorFlow. Its ``skipped_steps`` variable
    counts the steps skipped for non-finite gradients; ``dynamic_scale`` is the current scale.
    """
    if not _CLASS:
        _CLASS.append(_agreed_loss_scale_class())
    return _CLASS[0](inner, **kwargs)


def loss_scale_state(optimizer: Any) -> dict[str, float] | None:
    """``{"loss_scale", "skipped_steps"}`` of an agreed loss-scale optimizer, else ``None``."""
    if not hasattr(optimizer, "skipped_steps"):
        return None
    return {"loss_scale": float(optimizer.dynamic_scale.numpy()), "skipped_steps": int(optimizer.skipped_steps.numpy())}
