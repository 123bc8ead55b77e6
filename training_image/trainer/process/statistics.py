"""Feature statistics in one streaming pass, on the GPU when one is visible.

Per column: count, mean and the sum of squared deviations (``M2``), kept in float64 variables on
the chosen device and merged batch by batch with Chan et al.'s parallel formula, so neither a
large offset (mean far from 0) nor billions of rows cost precision the way ``sum(x^2)`` does.
A batch arrives either as rows (one example per row: CSV features) or as groups already reduced
where their pixels were (per picture: pixel count, per-channel mean and M2), merged the same way.
Class counts are counted on the device too.
"""

from __future__ import annotations

from collections import Counter
from typing import Any


def choose_device() -> str:
    """``/GPU:0`` when TensorFlow sees a GPU (after the GPU check set visibility), else ``/CPU:0``."""
    import tensorflow as tf

    return "/GPU:0" if tf.config.list_logical_devices("GPU") else "/CPU:0"


class RunningMoments:
    """Mean and standard deviation per column over every batch it is given.

    Attributes:
        device: Where the accumulators live and the reductions run.
        classes: Examples per label seen so far.
    """

    def __init__(self, width: int, device: str) -> None:
        import tensorflow as tf

        self.device = device
        self.classes: Counter[int] = Counter()
        with tf.device(device):
            self._count = tf.Variable(tf.zeros([], tf.float64), trainable=False)
            self._mean = tf.Variable(tf.zeros([width], tf.float64), trainable=False)
            self._m2 = tf.Variable(tf.zeros([width], tf.float64), trainable=False)

        def merge(n_b: Any, mean_b: Any, m2_b: Any) -> None:
            n_a = self._count.read_value()
            total = n_a + n_b
            delta = mean_b - self._mean
            # Guarded: an empty first batch must not divide by zero.
            weight = tf.math.divide_no_nan(n_b, total)
            self._mean.assign_add(delta * weight)
            self._m2.assign_add(m2_b + delta * delta * n_a * weight)
            self._count.assign(total)

        def rows(values: Any, labels: Any) -> Any:
            with tf.device(device):
                x = tf.cast(values, tf.float64)
                n_b = tf.cast(tf.shape(x)[0], tf.float64)
                mean_b = tf.math.divide_no_nan(tf.reduce_sum(x, axis=0), n_b)
                m2_b = tf.reduce_sum(tf.square(x - mean_b), axis=0)
                merge(n_b, mean_b, m2_b)
                return tf.unique_with_counts(tf.cast(labels, tf.int64))

        def groups(counts: Any, means: Any, m2s: Any, labels: Any) -> Any:
            with tf.device(device):
                n = tf.cast(counts, tf.float64)[:, None]
                n_b = tf.reduce_sum(n)
                mean_b = tf.math.divide_no_nan(tf.reduce_sum(n * tf.cast(means, tf.float64), axis=0), n_b)
                spread = tf.reduce_sum(n * tf.square(tf.cast(means, tf.float64) - mean_b), axis=0)
                m2_b = tf.reduce_sum(tf.cast(m2s, tf.float64), axis=0) + spread
                merge(n_b, mean_b, m2_b)
                return tf.unique_with_counts(tf.cast(labels, tf.int64))

        self._rows = tf.function(rows, reduce_retracing=True)
        self._groups = tf.function(groups, reduce_retracing=True)

    def _count_labels(self, found: Any) -> None:
        values, _, counts = found
        for label, count in zip(values.numpy().tolist(), counts.numpy().tolist(), strict=True):
            self.classes[int(label)] += int(count)

    def update_rows(self, values: Any, labels: Any) -> None:
        """Adds a batch of examples ``values [B, W]`` with their ``labels [B]``."""
        self._count_labels(self._rows(values, labels))

    def update_groups(self, counts: Any, means: Any, m2s: Any, labels: Any) -> None:
        """Adds pre-reduced groups (``counts [B]``, ``means [B, W]``, ``m2s [B, W]``), one label each."""
        self._count_labels(self._groups(counts, means, m2s, labels))

    def result(self) -> dict[str, Any]:
        """``{"count", "mean", "std"}`` (population standard deviation) as plain floats."""
        import numpy as np

        count = float(self._count.numpy())
        mean = self._mean.numpy()
        std = np.sqrt(np.maximum(self._m2.numpy() / count, 0.0)) if count else np.zeros_like(mean)
        return {"count": count, "mean": mean.tolist(), "std": std.tolist()}
