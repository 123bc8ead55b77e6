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


def batch_moments(values: Any, labels: Any, keep: Any) -> tuple[Any, ...]:
    """One batch's partial result over the rows where ``keep``: count, mean, M2 (float64), and label counts.

    Pure TensorFlow ops: runs inside a ``tf.data`` map (CPU hosts, in parallel) or on the GPU.
    Returns ``(count [], mean [W], m2 [W], label values [K], label counts [K])``.
    """
    import tensorflow as tf

    x = tf.cast(tf.boolean_mask(values, keep), tf.float64)
    n_b = tf.cast(tf.shape(x)[0], tf.float64)
    mean_b = tf.math.divide_no_nan(tf.reduce_sum(x, axis=0), n_b)
    m2_b = tf.reduce_sum(tf.square(x - mean_b), axis=0)
    label_values, _, label_counts = tf.unique_with_counts(tf.cast(tf.boolean_mask(labels, keep), tf.int64))
    return n_b, mean_b, m2_b, label_values, label_counts


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

        def rows(values: Any, labels: Any, keep: Any) -> Any:
            with tf.device(device):
                n_b, mean_b, m2_b, label_values, label_counts = batch_moments(values, labels, keep)
                merge(n_b, mean_b, m2_b)
                return label_values, None, label_counts

        def partial(n_b: Any, mean_b: Any, m2_b: Any) -> None:
            with tf.device(device):
                merge(n_b, mean_b, m2_b)

        def groups(counts: Any, means: Any, m2s: Any, labels: Any, keep: Any) -> Any:
            with tf.device(device):
                counts, means, m2s, labels = (tf.boolean_mask(t, keep) for t in (counts, means, m2s, labels))
                n = tf.cast(counts, tf.float64)[:, None]
                n_b = tf.reduce_sum(n)
                mean_b = tf.math.divide_no_nan(tf.reduce_sum(n * tf.cast(means, tf.float64), axis=0), n_b)
                spread = tf.reduce_sum(n * tf.square(tf.cast(means, tf.float64) - mean_b), axis=0)
                m2_b = tf.reduce_sum(tf.cast(m2s, tf.float64), axis=0) + spread
                merge(n_b, mean_b, m2_b)
                return tf.unique_with_counts(tf.cast(labels, tf.int64))

        # One trace each: batches differ only in their first dimension.
        self._rows = tf.function(
            rows,
            input_signature=[
                tf.TensorSpec([None, width], tf.float32),
                tf.TensorSpec([None], tf.int64),
                tf.TensorSpec([None], tf.bool),
            ],
        )
        self._partial = tf.function(
            partial,
            input_signature=[
                tf.TensorSpec([], tf.float64),
                tf.TensorSpec([width], tf.float64),
                tf.TensorSpec([width], tf.float64),
            ],
        )
        self._groups = tf.function(
            groups,
            input_signature=[
                tf.TensorSpec([None], tf.float64),
                tf.TensorSpec([None, width], tf.float64),
                tf.TensorSpec([None, width], tf.float64),
                tf.TensorSpec([None], tf.int64),
                tf.TensorSpec([None], tf.bool),
            ],
        )

    def _count_labels(self, found: Any) -> None:
        values, _, counts = found
        for label, count in zip(values.numpy().tolist(), counts.numpy().tolist(), strict=True):
            self.classes[int(label)] += int(count)

    def update_rows(self, values: Any, labels: Any, keep: Any = None) -> None:
        """Adds the examples ``values [B, W]`` (float32) with their ``labels [B]`` where ``keep [B]`` is true."""
        import tensorflow as tf

        keep = tf.ones([tf.shape(labels)[0]], tf.bool) if keep is None else keep
        self._count_labels(self._rows(tf.cast(values, tf.float32), tf.cast(labels, tf.int64), keep))

    def merge_partial(self, count: Any, mean: Any, m2: Any, label_values: Any, label_counts: Any) -> None:
        """Merges a partial result of :func:`batch_moments` computed elsewhere (inside the ``tf.data`` map)."""
        self._partial(count, mean, m2)
        self._count_labels((label_values, None, label_counts))

    def update_groups(self, counts: Any, means: Any, m2s: Any, labels: Any, keep: Any = None) -> None:
        """Adds pre-reduced groups (``counts [B]``, ``means [B, W]``, ``m2s [B, W]``), one label each, where ``keep``."""
        import tensorflow as tf

        keep = tf.ones([tf.shape(labels)[0]], tf.bool) if keep is None else keep
        cast = (tf.cast(t, tf.float64) for t in (counts, means, m2s))
        self._count_labels(self._groups(*cast, tf.cast(labels, tf.int64), keep))

    def result(self) -> dict[str, Any]:
        """``{"count", "mean", "std"}`` (population standard deviation) as plain floats."""
        import numpy as np

        count = float(self._count.numpy())
        mean = self._mean.numpy()
        std = np.sqrt(np.maximum(self._m2.numpy() / count, 0.0)) if count else np.zeros_like(mean)
        return {"count": count, "mean": mean.tolist(), "std": std.tolist()}
