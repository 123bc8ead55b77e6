"""The baseline a user would write: plain ``keras.fit`` on arrays held in memory.

    python -m benchmarks._keras_fit CHANNEL_DIR EPOCHS BATCH_SIZE

Reads the CSV channel into NumPy arrays (before timing), builds the trainer's default model
(MLP 128-64 via ``trainer.train.models``, so the layers are identical), compiles it as the Keras
guide does (Adam, sparse categorical cross-entropy from logits, accuracy; Keras' own default
``jit_compile="auto"``) and prints one ``[metrics]`` line per epoch, timed by a callback, in the
trainer's format so the same MetricDefinitions read both.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import numpy as np


def main(argv: list[str]) -> int:
    channel, epochs, batch_size = Path(argv[0]), int(argv[1]), int(argv[2])
    import keras

    from trainer.contract.hyperparameters import TrainingConfig
    from trainer.train.metrics import EpochMetrics, emit
    from trainer.train.models import build_model

    rows = np.concatenate(
        [np.loadtxt(p, delimiter=",", skiprows=1, ndmin=2, dtype=np.float32) for p in sorted(channel.glob("*.csv"))]
    )
    features, labels = rows[:, :-1], rows[:, -1].astype(np.int32)
    classes = int(labels.max()) + 1
    keras.utils.set_random_seed(1234)
    model = build_model(TrainingConfig(), features.shape[1], classes)
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )

    class Timer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.started = time.perf_counter()

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            elapsed = time.perf_counter() - self.started
            steps = -(-len(labels) // batch_size)
            emit(EpochMetrics(epoch + 1, float(logs["loss"]), float(logs["accuracy"]), len(labels) / elapsed,
                              1000.0 * elapsed / steps))  # fmt: skip

    model.fit(features, labels, batch_size=batch_size, epochs=epochs, shuffle=True, verbose=0, callbacks=[Timer()])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
