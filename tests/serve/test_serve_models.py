"""Which model the serving mode finds and how it is called: the trainer's, a user's .keras, SavedModels.

``load_model`` is the built-in classifier (the trainer's model, or any model with
``SERVE_MODEL_OUTPUT=logits|probabilities``); ``load_tensor_model`` serves every other model as TF
Serving does.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.serve.helpers import save_tiny_model, softmax_rows
from tests.serve.models import save_regression
from trainer.serve.model import ModelLoadError, find_model, find_models, load_model, load_tensor_model
from trainer.serve.server import default_model, serves_as_classifier
from trainer.contract.serving import load_settings

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


def test_an_image_model_with_uint8_pixels_refuses_values_it_would_truncate(tmp_path):
    import keras

    from trainer.serve.codec import RequestError

    inputs = keras.Input(shape=(2, 2, 1), dtype="uint8")
    hidden = keras.layers.Flatten()(keras.layers.Rescaling(1 / 255)(inputs))
    keras.Model(inputs, keras.layers.Dense(3)(hidden)).save(tmp_path / "cnn.keras")
    loaded = load_model(tmp_path)
    assert loaded.input_dtype == "uint8"
    assert loaded.predict(np.array([[0, 255, 7, 1]], np.float32)).shape == (1, 3)
    with pytest.raises(RequestError) as caught:
        loaded.predict(np.array([[0.0, 0.5, 1.0, 0.25]], np.float32))
    assert caught.value.status == 400 and "from 0 to 1" in str(caught.value) and "not all whole numbers" in str(caught.value)


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


def test_a_users_keras_model_is_served_as_tf_serving_would_with_its_own_names(tmp_path):
    import keras

    keras.utils.set_random_seed(5)
    a, b = keras.Input(shape=(2,), name="a"), keras.Input(shape=(1,), name="b")
    joined = keras.layers.Concatenate()([a, b])
    model = keras.Model(
        {"a": a, "b": b},
        {"score": keras.layers.Dense(1, name="score")(joined), "klass": keras.layers.Dense(3, activation="softmax", name="klass")(joined)},
    )
    model.save(tmp_path / "two_heads.keras")
    served = load_tensor_model(tmp_path)
    signature = served.signatures["serving_default"]
    assert (sorted(signature.inputs), sorted(signature.outputs)) == (["a", "b"], ["klass", "score"])
    feed = {"a": np.array([[1, 2], [0, -1]], np.float32), "b": np.array([[0.5], [2]], np.float32)}
    outputs = served.run("serving_default", feed)
    want = model.predict(feed, verbose=0)
    for name in ("score", "klass"):
        np.testing.assert_allclose(outputs[name], want[name], atol=1e-6)
    assert served.warm_up([1, 8]) == [1, 8]


def test_a_users_sequential_keras_file_is_served_with_its_last_layers_name(tmp_path):
    # Keras 3's Sequential (what most scripts build) has no output_names of its own.
    import keras

    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(5, activation="relu"), keras.layers.Dense(2, name="head")])
    model.save(tmp_path / "model.keras")
    served = load_tensor_model(tmp_path)
    assert list(served.signatures["serving_default"].outputs) == ["head"]
    np.testing.assert_allclose(served.run("serving_default", {name: ROWS for name in served.signatures["serving_default"].inputs})["head"],
                               model.predict(ROWS, verbose=0), atol=1e-6)


def test_a_regression_saved_model_keeps_its_values(tmp_path):
    save_regression(tmp_path)
    served = load_tensor_model(tmp_path)
    (name, values), = served.run("serving_default", {"x": np.array([[1], [2], [3]], np.float32)}).items()
    assert values.tolist() == [[3.0], [5.0], [7.0]]  # not softmaxed into "probabilities"


def test_only_the_trainers_model_or_an_explicit_output_kind_is_served_as_a_classifier(tmp_path):
    trainer_dir, user_dir = tmp_path / "trainer", tmp_path / "user"
    save_tiny_model(trainer_dir)
    save_regression(user_dir)
    assert serves_as_classifier(load_settings({"SM_MODEL_DIR": str(trainer_dir)}))
    assert not serves_as_classifier(load_settings({"SM_MODEL_DIR": str(user_dir)}))
    assert serves_as_classifier(load_settings({"SM_MODEL_DIR": str(user_dir), "SERVE_MODEL_OUTPUT": "probabilities"}))


# --- the layouts AWS's TensorFlow serving container finds (tfs_utils.find_models), no TensorFlow needed --


def _files(root, *paths: str):
    """Empty files at ``paths``: discovery reads names only (saved_model.pb, *.keras)."""
    for path in paths:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_bytes(b"")
    return root


def _found(model_dir) -> list[tuple[str, str | None, str]]:
    return [(s.name, s.version, str(s.path.relative_to(model_dir))) for s in find_models(model_dir)]


@pytest.mark.parametrize(
    ("paths", "want"),
    [
        (["1/saved_model.pb"], [("model", "1", "1")]),
        (["half_plus_three/1/saved_model.pb"], [("half_plus_three", "1", "half_plus_three/1")]),
        (["export/Servo/1527887769/saved_model.pb"], [("Servo", "1527887769", "export/Servo/1527887769")]),
        (["000000001/saved_model.pb", "000000010/saved_model.pb"], [("model", "1", "000000001"), ("model", "10", "000000010")]),
        (["b/2/saved_model.pb", "b/10/saved_model.pb", "a/1/saved_model.pb"],
         [("a", "1", "a/1"), ("b", "2", "b/2"), ("b", "10", "b/10")]),
        (["saved_model.pb"], [("model", None, ".")]),
    ],
    ids=["root-version", "named-model", "legacy-export-servo", "leading-zeros", "several-models-every-version", "root-unversioned"],
)
def test_saved_models_are_found_named_and_versioned_as_aws_container_finds_them(tmp_path, paths, want):
    assert _found(_files(tmp_path, *paths)) == want


@pytest.mark.parametrize(
    ("paths", "served"),
    [
        (["1/saved_model.pb", "model.keras"], "1"),
        (["1/saved_model.pb", "checkpoints/e1.keras", "checkpoints/e2.keras"], "1"),
        (["1/saved_model.pb", "2/saved_model.pb", "model.keras", "trainer_config.json"], "2"),
        # The trainer's own layout: no SavedModel; model.keras (the best epoch's with validation), never last.keras
        # (the last epoch's) nor an older trainer's best.keras.
        (["model.keras", "last.keras", "best.keras", "trainer_config.json"], "model.keras"),
    ],
    ids=["savedmodel-beside-model-keras", "savedmodel-beside-checkpoints", "savedmodel-beside-trainer-files", "trainer-layout"],
)
def test_a_stray_keras_file_never_displaces_a_saved_model(tmp_path, paths, served):
    _files(tmp_path, *paths)
    if (tmp_path / "trainer_config.json").exists():
        (tmp_path / "trainer_config.json").write_text("{}")
    assert str(find_model(tmp_path).path.relative_to(tmp_path)) == served


@pytest.mark.parametrize(
    ("paths", "message"),
    [
        (["a/m/1/saved_model.pb", "b/m/1/saved_model.pb"], "Two models are named 'm' (a/m and b/m in "),
        (["m/1/saved_model.pb", "m/001/saved_model.pb"], "m/001 and m/1 are both version 1 of one model; keep one of them."),
        (["saved_model.pb", "1/saved_model.pb"], "holds saved_model.pb at its root and in version folders (1/)"),
        (["mymodel/saved_model.pb"], "Found saved_model.pb in mymodel, outside a version folder: move each into a numbered folder"),
    ],
    ids=["same-name", "same-version", "root-and-versions", "unversioned-subfolder"],
)
def test_an_ambiguous_or_unservable_layout_is_one_line_naming_the_fix(tmp_path, paths, message):
    with pytest.raises(ModelLoadError) as caught:
        find_models(_files(tmp_path, *paths))
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_the_default_model_is_the_first_found_unless_the_variable_names_another(tmp_path):
    sources = find_models(_files(tmp_path, "zeta/1/saved_model.pb", "alpha/3/saved_model.pb"))
    assert default_model(sources, load_settings({"SM_MODEL_DIR": str(tmp_path)})) == "alpha"
    assert default_model(sources, load_settings({"SM_MODEL_DIR": str(tmp_path), "SAGEMAKER_TFS_DEFAULT_MODEL_NAME": "zeta"})) == "zeta"
    with pytest.raises(ModelLoadError) as caught:
        default_model(sources, load_settings({"SM_MODEL_DIR": str(tmp_path), "TFS_DEFAULT_MODEL_NAME": "regression"}))
    assert str(caught.value).startswith(f"TFS_DEFAULT_MODEL_NAME=regression names no model in {tmp_path}; found alpha, zeta")
    assert str(caught.value).endswith("Set it to one of them, or unset it to make alpha the default.")
    # A model outside a version folder takes the variable's name, as it always has.
    keras_dir = _files(tmp_path / "k", "model.keras")
    assert [s.name for s in find_models(keras_dir, "regression")] == ["regression"]
