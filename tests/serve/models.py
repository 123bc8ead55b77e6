"""Tiny SavedModels for TF Serving's contract: a regression and a two-input, two-output model."""

from __future__ import annotations

from pathlib import Path

import numpy as np

# The multi-output model's fixed weights: score = a . SCORE_A + b * SCORE_B + 0.5; label = round(b) as int.
SCORE_A = np.array([[1.0], [-2.0]], dtype=np.float32)
SCORE_B = 3.0


def save_regression(model_dir: Path, version: str = "1", slope: float = 2.0, intercept: float = 1.0) -> Path:
    """``y = slope * x + intercept`` (default ``2x + 1``; input shape ``[None, 1]``) exported as
    SageMaker scripts save it, in ``model_dir/<version>``."""
    import keras

    inputs = keras.Input(shape=(1,), name="x")
    layer = keras.layers.Dense(1, name="y")
    model = keras.Model(inputs, layer(inputs))
    layer.set_weights([np.array([[slope]], np.float32), np.array([intercept], np.float32)])
    target = model_dir / version
    model.export(str(target), verbose=False)
    return target


def save_multi_output(model_dir: Path) -> Path:
    """A SavedModel whose ``serving_default`` takes ``a`` [None, 2] float and ``b`` [None] float and
    returns ``score`` [None] float and ``doubled`` [None, 2]; a second signature ``sum_a`` takes
    ``a`` and returns ``total``."""
    import tensorflow as tf

    class Multi(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="a"), tf.TensorSpec([None], tf.float32, name="b")])
        def serve(self, a, b):
            score = tf.squeeze(tf.matmul(a, tf.constant(SCORE_A)), axis=1) + SCORE_B * b + 0.5
            return {"score": score, "doubled": a * 2.0}

        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="a")])
        def sum_a(self, a):
            return {"total": tf.reduce_sum(a, axis=1)}

    module = Multi()
    target = model_dir / "1"
    tf.saved_model.save(module, str(target), signatures={"serving_default": module.serve, "sum_a": module.sum_a})
    return target


def multi_expected(a: list[list[float]], b: list[float]) -> tuple[list[float], list[list[float]]]:
    """(score, doubled) the multi-output model answers."""
    a_array = np.asarray(a, np.float32)
    score = (a_array @ SCORE_A)[:, 0] + SCORE_B * np.asarray(b, np.float32) + 0.5
    return score.tolist(), (a_array * 2).tolist()
