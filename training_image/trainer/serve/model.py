"""Finding the model in the model directory, loading it once, and one compiled predict function.

SageMaker extracts the training job's ``model.tar.gz`` into ``/opt/ml/model``. What can be there:

- the built-in trainer's ``model.keras`` with ``trainer_config.json`` beside it (logits out);
- a user's model from script mode: one ``*.keras`` file, or a TensorFlow SavedModel, either at the
  root (``saved_model.pb``) or in numbered version directories (``1/saved_model.pb``, as SageMaker
  TensorFlow scripts save to ``SM_MODEL_DIR/1``); the highest version wins, as in TF Serving.

Two ways to serve a model:

- :class:`LoadedModel`, the built-in classifier (the trainer's model, or any model with
  ``SERVE_MODEL_OUTPUT=logits|probabilities``): rows of flat float32 features in, class
  probabilities out, dynamically batched. Image models take the flattened image.
- :class:`TensorModel`, every other model, as TensorFlow Serving serves it: each signature's
  named inputs in, its named outputs out, untouched (a regression answers its numbers).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from trainer.contract.errors import TrainerError
from trainer.serve.tfserving import DEFAULT_SIGNATURE, Signature, TensorSpec

TRAINER_CONFIG = "trainer_config.json"
BUILT_IN_MODEL = "model.keras"
SAVED_MODEL_FILE = "saved_model.pb"
SERVING_SIGNATURE = "serving_default"


class ModelLoadError(TrainerError):
    """The model directory holds no servable model, or the model cannot be loaded."""

    exit_code = 8


@dataclass(frozen=True)
class ModelSource:
    """Which model was found.

    Attributes:
        kind: ``trainer`` (built-in ``model.keras``), ``keras`` (a user's ``*.keras``) or
            ``saved_model``.
        path: The ``.keras`` file or the SavedModel directory.
        trainer_config: The trainer's ``trainer_config.json`` when present.
    """

    kind: str
    path: Path
    trainer_config: dict[str, Any] = field(default_factory=dict)


def find_model(model_dir: Path) -> ModelSource:
    """Picks the model to serve from ``model_dir``.

    Raises:
        ModelLoadError: saying what was looked for, when nothing or more than one candidate is there.
    """
    if not model_dir.is_dir():
        raise ModelLoadError(
            f"Model directory {model_dir} does not exist; SageMaker extracts the model artifact there "
            "(set SM_MODEL_DIR or SAGEMAKER_BASE_DIR to serve from elsewhere)."
        )
    trainer_config: dict[str, Any] = {}
    config_path = model_dir / TRAINER_CONFIG
    if config_path.is_file():
        try:
            trainer_config = json.loads(config_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as err:
            raise ModelLoadError(f"{config_path} is not valid JSON: {err}.") from err
    if (model_dir / BUILT_IN_MODEL).is_file():
        kind = "trainer" if trainer_config else "keras"
        return ModelSource(kind, model_dir / BUILT_IN_MODEL, trainer_config)
    keras_files = sorted(p for p in model_dir.rglob("*.keras") if not p.name.startswith("."))
    if len(keras_files) > 1:
        names = ", ".join(str(p.relative_to(model_dir)) for p in keras_files)
        raise ModelLoadError(f"Model directory {model_dir} holds several Keras models ({names}); keep exactly one.")
    if keras_files:
        return ModelSource("keras", keras_files[0], trainer_config)
    if (model_dir / SAVED_MODEL_FILE).is_file():
        return ModelSource("saved_model", model_dir, trainer_config)
    versions = sorted(
        (int(p.name), p) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit() and (p / SAVED_MODEL_FILE).is_file()
    )
    if versions:
        return ModelSource("saved_model", versions[-1][1], trainer_config)
    raise ModelLoadError(
        f"No model in {model_dir}: expected model.keras (the trainer's), one *.keras file, or a SavedModel "
        "(saved_model.pb at the root or in a numbered version directory such as 1/)."
    )


def softmax(values: np.ndarray) -> np.ndarray:
    """Row-wise softmax in float64 (stable for large logits)."""
    shifted = values.astype(np.float64) - values.max(axis=1, keepdims=True)
    exp = np.exp(shifted)
    return exp / exp.sum(axis=1, keepdims=True)


def _looks_like_probabilities(values: np.ndarray) -> bool:
    return bool(np.all(values >= 0) and np.all(values <= 1) and np.allclose(values.sum(axis=1), 1.0, atol=1e-3))


@dataclass
class LoadedModel:
    """A model ready to serve: one compiled function from a float32 matrix to raw outputs.

    Attributes:
        source: Where it came from.
        num_features: Values per row a request must send.
        num_classes: Width of the probability vector in responses.
        output: ``logits``, ``probabilities``, or ``auto`` (SavedModels: decided per batch).
        predict_fn: The compiled function (a ``tf.function`` with a fixed input signature, so it
            is traced once and never retraced for a new batch size).
        owner: What must stay alive for ``predict_fn`` (the loaded SavedModel owns its variables).
        device: The device this replica's variables and ops are on (``None``: TensorFlow's choice).
        buckets: Batch sizes calls are padded up to (with zero rows, cut from the answer); empty:
            no padding. A batch above the largest runs at its own size.
    """

    source: ModelSource
    num_features: int
    num_classes: int
    output: str
    predict_fn: Callable[[Any], Any]
    owner: Any = None
    device: str | None = None
    buckets: tuple[int, ...] = ()

    def predict(self, batch: np.ndarray) -> np.ndarray:
        """Class probabilities (float64, rows sum to 1) for a ``[n, num_features]`` float32 batch."""
        rows = len(batch)
        bucket = next((size for size in self.buckets if size >= rows), rows)
        if bucket > rows:
            batch = np.concatenate([batch, np.zeros((bucket - rows, batch.shape[1]), batch.dtype)])
        raw = np.asarray(self.predict_fn(batch), dtype=np.float64)[:rows]
        raw = raw.reshape(raw.shape[0], -1)
        binary = raw.shape[1] == 1
        is_probabilities = self.output == "probabilities" or (
            self.output == "auto" and (np.all((raw >= 0) & (raw <= 1)) if binary else _looks_like_probabilities(raw))
        )
        if binary:
            positive = raw[:, 0] if is_probabilities else 1.0 / (1.0 + np.exp(-raw[:, 0]))
            return np.stack([1.0 - positive, positive], axis=1)
        return raw / raw.sum(axis=1, keepdims=True) if is_probabilities else softmax(raw)

    def describe(self) -> dict[str, Any]:
        """For the start-up log line and ``/stats``."""
        return {
            "kind": self.source.kind,
            "path": str(self.source.path),
            "num_features": self.num_features,
            "num_classes": self.num_classes,
            "output": self.output,
            "device": self.device,
        }


def _flat_width(shape: Any, what: str) -> tuple[int, tuple[int, ...]]:
    dims = tuple(shape)[1:]
    if not dims or any(d is None for d in dims):
        raise ModelLoadError(
            f"{what} has input shape {tuple(shape)}; serving needs a fixed shape after the batch dimension."
        )
    return math.prod(int(d) for d in dims), tuple(int(d) for d in dims)


def _compile(
    call: Callable[[Any], Any], num_features: int, inner_shape: tuple[int, ...], dtype: Any, device: str | None
) -> Any:
    import tensorflow as tf

    # Fixed input signature: traced once, any batch size, never retraced by a new batch size.
    @tf.function(input_signature=[tf.TensorSpec([None, num_features], tf.float32, name="features")])
    def predict(features: Any) -> Any:
        with tf.device(device):
            inputs = tf.reshape(features, [-1, *inner_shape]) if len(inner_shape) > 1 else features
            outputs = call(tf.cast(inputs, dtype))
            return tf.cast(outputs, tf.float32)

    return predict


def load_model(model_dir: Path, output: str = "auto", device: str | None = None) -> LoadedModel:
    """Finds, loads and compiles the model (its variables on ``device``); raises ModelLoadError."""
    import tensorflow as tf

    source = find_model(model_dir)
    try:
        with tf.device(device):
            if source.kind == "saved_model":
                return _load_saved_model(source, output, device)
            return _load_keras(source, output, device)
    except ModelLoadError:
        raise
    except Exception as err:  # noqa: BLE001 - any loader failure becomes one line in /ping and the log
        raise ModelLoadError(f"Cannot load {source.path}: {type(err).__name__}: {err}".splitlines()[0]) from err


def _load_keras(source: ModelSource, output: str, device: str | None) -> LoadedModel:
    import keras

    model = keras.saving.load_model(str(source.path), compile=False)
    if len(model.inputs) != 1 or len(model.outputs) != 1:
        raise ModelLoadError(
            f"{source.path} has {len(model.inputs)} inputs and {len(model.outputs)} outputs; serving takes "
            "models with one input and one output."
        )
    num_features, inner_shape = _flat_width(model.inputs[0].shape, str(source.path))
    num_classes = int(math.prod(int(d) for d in model.outputs[0].shape[1:]))
    if output == "auto":
        if source.kind == "trainer":
            output = "logits"  # trainer/train/models.py ends in a float32 logits layer
        else:
            activation = getattr(getattr(model.layers[-1], "activation", None), "__name__", "")
            output = "probabilities" if activation in ("softmax", "sigmoid") else "logits"
    dtype = model.inputs[0].dtype or "float32"

    def call(inputs: Any) -> Any:
        return model(inputs, training=False)

    fn = _compile(call, num_features, inner_shape, dtype, device)
    return LoadedModel(source, num_features, max(num_classes, 2), output, fn, device=device)


def _load_saved_model(source: ModelSource, output: str, device: str | None) -> LoadedModel:
    import tensorflow as tf

    loaded = tf.saved_model.load(str(source.path))
    signatures = dict(loaded.signatures)
    if SERVING_SIGNATURE not in signatures:
        raise ModelLoadError(
            f"SavedModel {source.path} has no {SERVING_SIGNATURE!r} signature (has: {', '.join(signatures) or 'none'}); "
            "export it with model.export() or tf.saved_model.save(..., signatures=...)."
        )
    signature = signatures[SERVING_SIGNATURE]
    _, kwargs = signature.structured_input_signature
    if len(kwargs) != 1:
        raise ModelLoadError(
            f"SavedModel {source.path} signature {SERVING_SIGNATURE!r} takes {len(kwargs)} inputs "
            f"({', '.join(sorted(kwargs))}); serving takes one."
        )
    (input_name, spec), = kwargs.items()
    num_features, inner_shape = _flat_width(spec.shape, f"SavedModel {source.path} input {input_name!r}")
    outputs = signature.structured_outputs
    output_name = sorted(outputs)[0] if len(outputs) == 1 else next(
        (name for name in ("probabilities", "probs", "predictions", "logits", "output_0") if name in outputs), None
    )
    if output_name is None:
        raise ModelLoadError(
            f"SavedModel {source.path} signature {SERVING_SIGNATURE!r} has outputs {', '.join(sorted(outputs))}; "
            "serving needs one output, or one named probabilities, predictions or logits."
        )
    num_classes = int(math.prod(int(d) for d in outputs[output_name].shape[1:] if d is not None) or 1)

    def call(inputs: Any) -> Any:
        return signature(**{input_name: inputs})[output_name]

    fn = _compile(call, num_features, inner_shape, spec.dtype, device)
    return LoadedModel(source, num_features, max(num_classes, 2), output, fn, owner=loaded, device=device)


@dataclass
class TensorModel:
    """Any model served as TF Serving serves it: named inputs in, named outputs out, per signature.

    Attributes:
        source: Where it came from.
        signatures: What each signature takes and returns (a Keras file has ``serving_default``).
        functions: One callable per signature, from input arrays to output arrays.
        owner: What must stay alive for the functions (the loaded SavedModel or Keras model).
        device: The device its variables and ops are on.
    """

    source: ModelSource
    signatures: dict[str, Signature]
    functions: dict[str, Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]]
    owner: Any = None
    device: str | None = None

    def run(self, signature_name: str, tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The signature's outputs for one batch of inputs (checked by :func:`tfserving.parse`)."""
        return self.functions[signature_name](tensors)

    def warm_up(self, batch_sizes: list[int]) -> list[int]:
        """Calls ``serving_default`` on zeros of each batch size; the sizes it could warm."""
        signature = self.signatures.get(DEFAULT_SIGNATURE)
        if signature is None or any(
            spec.dtype == "object" or any(d is None for d in spec.shape[1:]) for spec in signature.inputs.values()
        ):
            return []  # strings or free dimensions: no zeros stand for a real request
        for size in batch_sizes:
            self.run(
                DEFAULT_SIGNATURE,
                {n: np.zeros((size, *[int(d) for d in s.shape[1:] if d is not None]), s.dtype) for n, s in signature.inputs.items()},
            )
        return batch_sizes

    def describe(self) -> dict[str, Any]:
        """For the start-up log line and ``/stats``."""
        return {
            "kind": self.source.kind,
            "path": str(self.source.path),
            "contract": "tensorflow-serving",
            "signatures": {
                name: {"inputs": sorted(sig.inputs), "outputs": sorted(sig.outputs)} for name, sig in self.signatures.items()
            },
            "device": self.device,
        }


def _spec(shape: Any, dtype: Any) -> TensorSpec:
    import tensorflow as tf

    dims = tuple(None if d is None else int(d) for d in (shape or ()))
    tf_dtype = tf.as_dtype(dtype)
    return TensorSpec(dims, "object" if tf_dtype == tf.string else tf_dtype.as_numpy_dtype.__name__)


def _numpy_outputs(outputs: dict[str, Any]) -> dict[str, np.ndarray]:
    return {name: np.asarray(value.numpy() if hasattr(value, "numpy") else value) for name, value in outputs.items()}


def load_tensor_model(model_dir: Path, device: str | None = None) -> TensorModel:
    """Finds and loads any model for TF Serving's contract; raises ModelLoadError."""
    import tensorflow as tf

    source = find_model(model_dir)
    try:
        with tf.device(device):
            if source.kind == "saved_model":
                return _tensor_saved_model(source, device)
            return _tensor_keras(source, device)
    except ModelLoadError:
        raise
    except Exception as err:  # noqa: BLE001 - any loader failure becomes one line in /ping and the log
        raise ModelLoadError(f"Cannot load {source.path}: {type(err).__name__}: {err}".splitlines()[0]) from err


def _tensor_saved_model(source: ModelSource, device: str | None) -> TensorModel:
    import tensorflow as tf

    loaded = tf.saved_model.load(str(source.path))
    signatures: dict[str, Signature] = {}
    functions: dict[str, Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]] = {}
    for name, function in dict(loaded.signatures).items():
        _, kwargs = function.structured_input_signature
        inputs = {key: _spec(spec.shape, spec.dtype) for key, spec in kwargs.items()}
        outputs = {key: _spec(spec.shape, spec.dtype) for key, spec in function.structured_outputs.items()}
        signatures[name] = Signature(inputs, outputs)

        def call(tensors: dict[str, np.ndarray], function: Any = function, specs: Any = kwargs) -> dict[str, np.ndarray]:
            with tf.device(device):
                feed = {key: tf.constant(value, dtype=specs[key].dtype) for key, value in tensors.items()}
                return _numpy_outputs(function(**feed))

        functions[name] = call
    if not signatures:
        raise ModelLoadError(
            f"SavedModel {source.path} has no signatures; export it with model.export() or "
            "tf.saved_model.save(..., signatures=...)."
        )
    return TensorModel(source, signatures, functions, owner=loaded, device=device)


def _tensor_keras(source: ModelSource, device: str | None) -> TensorModel:
    import keras
    import tensorflow as tf

    model = keras.saving.load_model(str(source.path), compile=False)
    if not hasattr(model, "output_names"):
        # Keras 3's Sequential (what most scripts build) has no output names or input structure
        # until called; its functional view has both (the output named after the last layer).
        model = keras.Model(model.inputs, model.outputs)
    input_names = [t.name for t in model.inputs]
    inputs = {name: _spec(t.shape, t.dtype or "float32") for name, t in zip(input_names, model.inputs)}
    output_names = list(model.output_names)
    outputs = {name: _spec(t.shape, t.dtype or "float32") for name, t in zip(output_names, model.outputs)}
    structure = model.input

    @tf.function(
        input_signature=[{n: tf.TensorSpec(s.shape, tf.string if s.dtype == "object" else s.dtype, name=n) for n, s in inputs.items()}]
    )
    def predict(feed: dict[str, Any]) -> dict[str, Any]:
        if isinstance(structure, dict):
            args: Any = {name: feed[name] for name in structure}
        elif isinstance(structure, (list, tuple)):
            args = [feed[name] for name in input_names]
        else:
            args = feed[input_names[0]]
        result = model(args, training=False)
        if isinstance(result, dict):
            return {name: result[name] for name in output_names}
        if isinstance(result, (list, tuple)):
            return dict(zip(output_names, result))
        return {output_names[0]: result}

    def call(tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        with tf.device(device):
            return _numpy_outputs(predict(tensors))

    signature = Signature(inputs, outputs)
    return TensorModel(source, {DEFAULT_SIGNATURE: signature}, {DEFAULT_SIGNATURE: call}, owner=model, device=device)
