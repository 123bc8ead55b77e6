"""The built-in models, selected by the ``model`` hyperparameter.

``mlp`` and ``cnn`` take a flat float vector per example (what the CSV and TFRecord readers
produce); ``resnet50`` takes ``[S, S, 3]`` uint8 images (what ``trainer.datasets.images`` produces) and
rescales them itself, so a saved model takes raw pixels. Every model ends in a float32 logits
layer, so mixed precision never computes the loss in bf16/fp16.
"""

from __future__ import annotations

import math
from typing import Any

from trainer.contract.errors import ConfigError
from trainer.contract.hyperparameters import TrainingConfig


def build_model(config: TrainingConfig, num_features: int, num_classes: int) -> Any:
    """Builds the configured Keras model; call inside ``strategy.scope()``.

    Raises:
        ConfigError: ``image_shape`` does not account for every feature (cnn).
    """
    import keras

    if config.model == "resnet50":
        return build_image_model(config, num_classes)
    inputs = keras.Input(shape=(num_features,), name="features")
    if config.model == "mlp":
        hidden = inputs
        for index, units in enumerate(config.hidden_units):
            hidden = keras.layers.Dense(units, activation="relu", name=f"dense_{index}")(hidden)
            if config.dropout:
                hidden = keras.layers.Dropout(config.dropout, name=f"dropout_{index}")(hidden)
    elif config.model == "cnn":
        assert config.image_shape is not None  # enforced by config validation
        height, width, channels = config.image_shape
        if height * width * channels != num_features:
            raise ConfigError(
                f"hyperparameter 'image_shape' {height}x{width}x{channels} holds {height * width * channels} "
                f"values but the data has {num_features} features per example."
            )
        hidden = keras.layers.Reshape(config.image_shape, name="image")(inputs)
        for index, filters in enumerate(config.conv_filters):
            hidden = keras.layers.Conv2D(filters, 3, padding="same", activation="relu", name=f"conv_{index}")(hidden)
            if min(hidden.shape[1], hidden.shape[2]) >= 2:
                hidden = keras.layers.MaxPooling2D(2, name=f"pool_{index}")(hidden)
        # Flatten, not global pooling: where a pattern is can be what tells classes apart.
        hidden = keras.layers.Flatten(name="flatten")(hidden)
        if config.dropout:
            hidden = keras.layers.Dropout(config.dropout, name="dropout")(hidden)
    else:  # pragma: no cover - config validation allows only the models above
        raise ConfigError(f"unknown model {config.model!r}")
    logits = keras.layers.Dense(num_classes, dtype="float32", name="logits")(hidden)
    return keras.Model(inputs, logits, name=config.model)


def build_image_model(config: TrainingConfig, num_classes: int) -> Any:
    """ResNet-50 (Keras applications, ``weights=None``: nothing is downloaded) on uint8 images.

    The input is ``[image_size, image_size, 3]`` uint8, rescaled to [-1, 1] inside the model; the
    backbone follows the global dtype policy (set before building, as ``train.run`` does), the
    global-average-pooled features feed a float32 logits layer. Call inside ``strategy.scope()``.
    """
    import keras

    size = config.image_size
    inputs = keras.Input(shape=(size, size, 3), dtype="uint8", name="image")
    scaled = keras.layers.Rescaling(1.0 / 127.5, offset=-1.0, name="rescale")(inputs)
    backbone = keras.applications.ResNet50(
        include_top=False, weights=None, input_shape=(size, size, 3), pooling="avg", name="resnet50_backbone"
    )
    features = backbone(scaled)
    if config.dropout:
        features = keras.layers.Dropout(config.dropout, name="dropout")(features)
    logits = keras.layers.Dense(num_classes, dtype="float32", name="logits")(features)
    return keras.Model(inputs, logits, name=config.model)


def parameter_count(model: Any) -> int:
    """Trainable parameters, for the start-of-training log line."""
    return int(sum(math.prod(v.shape) for v in model.trainable_variables))
