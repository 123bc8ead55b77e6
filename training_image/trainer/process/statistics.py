"""Feature statistics in one streaming pass, on the GPU when one is visible.

Per column: count, mean and the sum of squared deviations (``M2``), kept in float64 variables on
the chosen device and merged batch by batch with Chan et al.'s parallel formula, so neither a
large offset (mean far from 0) nor billions of rows cost precision the way ``sum(x^2)`` does.
A batch arrives as rows (one example per row: CSV features) or as groups already reduced where
their pixels were (per picture: pixel count, per-channel mean and M2); either is first reduced
to one partial result (:func:`batch_moments`, :func:`group_moments`), then merged. The
reduction runs on the device (GPU hosts) or inside the parallel ``tf.data`` map (CPU hosts,
where a main-loop reduction would run serially beside the writes); class counts come with it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

_FUNCTIONS: dict[str, Any] = {}


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


def group_moments(counts: Any, means: Any, m2s: Any, labels: Any, keep: Any) -> tuple[Any, ...]:
    """As :func:`batch_moments` for groups already reduced (``counts [B]``, ``means [B, W]``, ``m2s [B, W]``).

    Each group (a picture's pixels) carries one label; the label counts count groups.
    """
    import tensorflow as tf

    counts, means, m2s, labels = (tf.boolean_mask(t, keep) for t in (counts, means, m2s, labels))
    n = tf.cast(counts, tf.float64)[:, None]
    means = tf.cast(means, tf.float64)
    n_b = tf.reduce_sum(n)
    mean_b = tf.math.divide_no_nan(tf.reduce_sum(n * means, axis=0), n_b)
    m2_b = tf.reduce_sum(tf.cast(m2s, tf.float64), axis=0) + tf.reduce_sum(n * tf.square(means - mean_b), axis=0)
    label_values, _, label_counts = tf.unique_with_counts(tf.cast(labels, tf.int64))
    return n_b, mean_b, m2_b, label_values, label_counts


def _functions() -> dict[str, Any]:
    """The traced merge and reduce functions, shared by every accumulator (traced once per shape)."""
    if _FUNCTIONS:
        return _FUNCTIONS
    import tensorflow as tf

    def merge(count: Any, mean: Any, m2: Any, n_b: Any, mean_b: Any, m2_b: Any) -> None:
        n_a = count.read_value()
        total = n_a + n_b
        delta = mean_b - mean.read_value()
        # Guarded: an empty batch (all of it in the other split) must not divide by zero.
        weight = tf.math.divide_no_nan(n_b, total)
        mean.assign_add(delta * weight)
        m2.assign_add(m2_b + delta * delta * n_a * weight)
        count.assign(total)

    def rows(count: Any, mean: Any, m2: Any, values: Any, labels: Any, keep: Any) -> Any:
        n_b, mean_b, m2_b, label_values, label_counts = batch_moments(values, labels, keep)
        merge(count, mean, m2, n_b, mean_b, m2_b)
        return label_values, label_counts

    def groups(count: Any, mean: Any, m2: Any, counts: Any, means: Any, m2s: Any, labels: Any, keep: Any) -> Any:
        n_b, mean_b, m2_b, label_values, label_counts = group_moments(counts, means, m2s, labels, keep)
        merge(count, mean, m2, n_b, mean_b, m2_b)
        return label_values, label_counts

    _FUNCTIONS.update(
        merge=tf.function(merge),
        rows=tf.function(rows, reduce_retracing=True),
        groups=tf.function(groups, reduce_retracing=True),
    )
    return _FUNCTIONS


class RunningMoments:
    """Mean and standard deviation per column over every batch it is given.

    Attributes:
        device: Where the accumulators live and the reductions run.
        classes: Examples per label seen so far.
    """

    def __init__(self, width: int, device: str) -> None:
        import tensorflow as tf

        self.device = device
        self.width = width
        self.classes: Counter[int] = Counter()
        with tf.device(device):
            self._count = tf.Variable(tf.zeros([], tf.float64), trainable=False)
            self._mean = tf.Variable(tf.zeros([width], tf.float64), trainable=False)
            self._m2 = tf.Variable(tf.zeros([width], tf.float64), trainable=False)

    def _state(self) -> tuple[Any, Any, Any]:
        return self._count, self._mean, self._m2

    def _count_labels(self, label_values: Any, label_counts: Any) -> None:
        for label, count in zip(label_values.numpy().tolist(), label_counts.numpy().tolist(), strict=True):
            self.classes[int(label)] += int(count)

    def _keep(self, labels: Any, keep: Any) -> Any:
        import tensorflow as tf

        return tf.ones([tf.shape(labels)[0]], tf.bool) if keep is None else tf.convert_to_tensor(keep, tf.bool)

    def update_rows(self, values: Any, labels: Any, keep: Any = None) -> None:
        """Adds the examples ``values [B, W]`` with their ``labels [B]`` where ``keep [B]`` is true, on the device."""
        import tensorflow as tf

        with tf.device(self.device):
            found = _functions()["rows"](
                *self._state(), tf.cast(values, tf.float32), tf.cast(labels, tf.int64), self._keep(labels, keep)
            )
        self._count_labels(*found)

    def update_groups(self, counts: Any, means: Any, m2s: Any, labels: Any, keep: Any = None) -> None:
        """Adds pre-reduced groups, one label each, where ``keep``, on the device (see :func:`group_moments`)."""
        import tensorflow as tf

        cast = (tf.cast(t, tf.float64) for t in (counts, means, m2s))
        with tf.device(self.device):
            found = _functions()["groups"](*self._state(), *cast, tf.cast(labels, tf.int64), self._keep(labels, keep))
        self._count_labels(*found)

    def merge_partial(self, count: Any, mean: Any, m2: Any, label_values: Any, label_counts: Any) -> None:
        """Merges a partial result computed elsewhere (:func:`batch_moments` / :func:`group_moments` in the map)."""
        import tensorflow as tf

        with tf.device(self.device):
            _functions()["merge"](*self._state(), tf.cast(count, tf.float64), tf.cast(mean, tf.float64), tf.cast(m2, tf.float64))
        self._count_labels(label_values, label_counts)

    def result(self) -> dict[str, Any]:
        """``{"count", "mean", "std"}`` (population standard deviation) as plain floats."""
        import numpy as np

        count = float(self._count.numpy())
        mean = self._mean.numpy()
        std = np.sqrt(np.maximum(self._m2.numpy() / count, 0.0)) if count else np.zeros_like(mean)
        return {"count": count, "mean": mean.tolist(), "std": std.tolist()}
