"""Which model the serving mode finds and how it is called: the trainer's, a user's .keras, SavedModels."""

from __future__ import annotations

import numpy as np
import pytest

from tests.serve.helpers import save_tiny_model, softmax_rows
from trainer.serve.model import ModelLoadError, find_model, load_model

ROWS = np.array([[0.5, -1.0, 2.0, 0.25], [1.0, 1.0, 1.0, 1.0]], dtype=np.float32)


def _user_model(activation: str | None, classes: int = 3, input_shape=(4,)):
    import keras

    keras.utils.set_random_seed(11)
    inputs = keras.Input(shape=input_shape)
    hidden = keras.layers.Flatten()(inputs) if len(input_shape) > 1 else inputs
    outputs = keras.layers.Dense(classes, activation=activation)(keras.layers.Dense(6, activation="relu")(hidden))
    return keras.Model(inputs, outputs)


def test_the_trainers_model_returns_softmax_of_its_logits(tmp_path):
    model = save_tiny_model(tmp_path)
    loaded = load_model(tmp_path)
    assert (loaded.source.kind, loaded.num_features, loaded.num_classes, loaded.output) == ("trainer", 4, 3, "logits")
    np.testing.assert_allclose(loaded.predict(ROWS), softmax_rows(model.predict(ROWS, verbose=0)), atol=1e-6)


def test_a_users_keras_file_ending_in_softmax_is_served_as_probabilities(tmp_path):
    model = _user_model("softmax")
    model.save(tmp_path / "classifier.keras")
    loaded = load_model(tmp_path)
    assert (loaded.source.kind, loaded.output) == ("keras", "probabilities")
    np.testing.assert_allclose(loaded.predict(ROWS), model.predict(ROWS, verbose=0), atol=1e-6)


def test_a_binary_sigmoid_model_gets_two_class_probabilities(tmp_path):
    model = _user_model("sigmoid", classes=1)
    model.save(tmp_path / "binary.keras")
    loaded = load_model(tmp_path)
    positive = model.predict(ROWS, verbose=0)[:, 0]
    np.testing.assert_allclose(loaded.predict(ROWS), np.stack([1 - positive, positive], axis=1), atol=1e-6)
    assert loaded.num_classes == 2


def test_an_image_model_takes_flattened_rows(tmp_path):
    model = _user_model(None, input_shape=(2, 2, 1))
    model.save(tmp_path / "cnn.keras")
    loaded = load_model(tmp_path)
    assert loaded.num_features == 4 and loaded.output == "logits"
    want = softmax_rows(model.predict(ROWS.reshape(-1, 2, 2, 1), verbose=0))
    np.testing.assert_allclose(loaded.predict(ROWS), want, atol=1e-6)


@pytest.mark.parametrize("layout", ["root", "versioned"])
def test_a_saved_model_is_called_through_its_serving_signature(tmp_path, layout):
    model = _user_model("softmax")
    if layout == "versioned":
        model.export(str(tmp_path / "1"), verbose=False)  # what SageMaker TF scripts save to SM_MODEL_DIR/1
        (tmp_path / "0").mkdir()  # an older, empty version directory is ignored
        target = tmp_path / "1"
    else:
        model.export(str(tmp_path), verbose=False)
        target = tmp_path
    loaded = load_model(tmp_path)
    assert (loaded.source.kind, loaded.source.path, loaded.num_features) == ("saved_model", target, 4)
    np.testing.assert_allclose(loaded.predict(ROWS), model.predict(ROWS, verbose=0), atol=1e-5)


def test_the_highest_saved_model_version_wins(tmp_path):
    model = _user_model("softmax")
    for version in ("1", "10", "2"):
        model.export(str(tmp_path / version), verbose=False)
    assert find_model(tmp_path).path == tmp_path / "10"


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda d: None, "No model in"),
        (lambda d: [(d / n).write_bytes(b"x") for n in ("a.keras", "b.keras")], "holds several Keras models (a.keras, b.keras)"),
        (lambda d: (d / "model.keras").write_bytes(b"not a zip"), "Cannot load"),
    ],
    ids=["empty", "two-keras-files", "corrupt"],
)
def test_no_usable_model_is_one_clear_error(tmp_path, setup, message):
    setup(tmp_path)
    with pytest.raises(ModelLoadError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_model(tmp_path)
