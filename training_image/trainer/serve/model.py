"""Finding the model in the model directory, loading it once, and one compiled predict function.

SageMaker extracts the training job's ``model.tar.gz`` into ``/opt/ml/model``. What can be there:

- TensorFlow SavedModels, found as AWS's TensorFlow serving container finds them
  (``tfs_utils.find_models``): every ``saved_model.pb`` in a numbered version folder anywhere in
  the tree; the folder above the version folder is a model, named after it (``half_plus_three/1/``
  is ``half_plus_three``, the legacy ``export/Servo/1527/`` is ``Servo``, and ``1/`` directly in
  the model directory is ``model``, as ``/opt/ml/model`` is named there), and every version is
  served (leading zeros dropped: ``000000001/`` is version 1). The first model found (folders in
  name order) is the default. A ``saved_model.pb`` at the root itself is served too, unversioned;
- only when there is no SavedModel: the built-in trainer's ``model.keras`` with
  ``trainer_config.json`` beside it (logits out), else a user's single ``*.keras`` file. A stray
  Keras file (a checkpoint beside an export) never displaces a SavedModel, since AWS's container
  serves SavedModels only.

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
from trainer.serve.codec import RequestError
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
        name: The model's name in TF Serving's routes and ``tfs-model-name``: its folder's name
            for a SavedModel in a version folder (``model`` for one directly in the model
            directory), else the name the settings give (``SAGEMAKER_TFS_DEFAULT_MODEL_NAME``,
            default ``model``).
        version: The version folder's number without leading zeros (``"1"`` for ``0001/``);
            None for a model outside a version folder.
    """

    kind: str
    path: Path
    trainer_config: dict[str, Any] = field(default_factory=dict)
    name: str = "model"
    version: str | None = None


ROOT_MODEL_NAME = "model"
"""The name of the model directly in the model directory: what AWS's container calls ``/opt/ml/model``'s."""


def _saved_model_files(directory: Path) -> list[Path]:
    """Every ``saved_model.pb`` under ``directory``, depth first with entries in name order (AWS's
    container walks with ``os.scandir``, whose order is the file system's: name order is the
    same walk, made the same on every host)."""
    found: list[Path] = []
    try:
        entries = sorted(directory.iterdir(), key=lambda p: p.name)
    except OSError:
        return found
    for entry in entries:
        if entry.is_dir() and not entry.is_symlink():  # a linked folder could loop the walk forever
            found.extend(_saved_model_files(entry))
        elif entry.name == SAVED_MODEL_FILE:
            found.append(entry)
    return found


def version_number(text: str) -> str:
    """A version folder's name as TF Serving's version: leading zeros dropped (``0001`` -> ``1``),
    as ``tfs_utils.find_model_versions`` drops them."""
    return text[:-1].lstrip("0") + text[-1]


def _saved_models(model_dir: Path, root_name: str) -> list[ModelSource]:
    """The SavedModels as ``tfs_utils.find_models`` finds them, each version its own source:
    models in the order found, versions in ascending order; raises ModelLoadError for two models
    of one name or two folders of one version."""
    by_path: dict[Path, dict[str, Path]] = {}
    root: Path | None = None
    for pb in _saved_model_files(model_dir):
        folder = pb.parent
        if folder == model_dir:
            root = folder  # not a TF Serving layout (no version), served as it always was here
        elif folder.name.isascii() and folder.name.isdigit():  # TF Serving's versions are int64s
            versions = by_path.setdefault(folder.parent, {})
            number = version_number(folder.name)
            if number in versions:
                raise ModelLoadError(
                    f"{versions[number].relative_to(model_dir)} and {folder.relative_to(model_dir)} are both version {number} "
                    "of one model; keep one of them."
                )
            versions[number] = folder
    sources: list[ModelSource] = []
    names: dict[str, Path] = {}
    if root is not None:
        names[root_name] = root
        sources.append(ModelSource("saved_model", root, name=root_name))
    for path, versions in by_path.items():
        name = ROOT_MODEL_NAME if path == model_dir else path.name
        if path == model_dir and root is not None:
            raise ModelLoadError(
                f"{model_dir} holds saved_model.pb at its root and in version folders ({', '.join(sorted(versions, key=int))}/); "
                "keep one layout (TF Serving's is <version>/saved_model.pb)."
            )
        if name in names:
            where = [str(p.relative_to(model_dir)) for p in (names[name], path)]
            raise ModelLoadError(
                f"Two models are named {name!r} ({where[0]} and {where[1]} in {model_dir}); a model is named "
                "after its folder, so rename one folder."
            )
        names[name] = path
        for number in sorted(versions, key=int):
            sources.append(ModelSource("saved_model", versions[number], name=name, version=number))
    return sources


def find_models(model_dir: Path, name: str = ROOT_MODEL_NAME) -> list[ModelSource]:
    """Every servable in ``model_dir`` (each version of each model its own source), in the order
    AWS's container finds them; the first one's model is the default.

    SavedModels come first and alone: a ``*.keras`` file counts only when there is no SavedModel
    (the trainer's ``model.keras``, or one user's file).

    Args:
        model_dir: Where SageMaker extracted ``model.tar.gz``.
        name: The name of a model outside a version folder (a root SavedModel, a Keras file).

    Raises:
        ModelLoadError: saying what was looked for, when nothing or an ambiguous set is there.
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
    saved = _saved_models(model_dir, name)
    if saved:
        return [ModelSource(s.kind, s.path, trainer_config, s.name, s.version) for s in saved]
    if (model_dir / BUILT_IN_MODEL).is_file():
        kind = "trainer" if trainer_config else "keras"
        return [ModelSource(kind, model_dir / BUILT_IN_MODEL, trainer_config, name)]
    keras_files = sorted(p for p in model_dir.rglob("*.keras") if not p.name.startswith("."))
    if len(keras_files) > 1:
        names = ", ".join(str(p.relative_to(model_dir)) for p in keras_files)
        raise ModelLoadError(f"Model directory {model_dir} holds several Keras models ({names}); keep exactly one.")
    if keras_files:
        return [ModelSource("keras", keras_files[0], trainer_config, name)]
    unversioned = [str(p.parent.relative_to(model_dir)) for p in _saved_model_files(model_dir)]
    hint = (
        f" Found saved_model.pb in {', '.join(unversioned)}, outside a version folder: move each into a "
        "numbered folder (<model>/1/saved_model.pb), as TF Serving loads it."
        if unversioned else ""
    )
    raise ModelLoadError(
        f"No model in {model_dir}: expected a SavedModel (saved_model.pb in a numbered version folder such as "
        f"1/ or <model name>/1/, or at the root), the trainer's model.keras, or one *.keras file.{hint}"
    )


def latest(sources: list[ModelSource], name: str) -> ModelSource:
    """Model ``name``'s highest version (TF Serving's answer when a request names no version)."""
    versions = [s for s in sources if s.name == name]
    return max(versions, key=lambda s: -1 if s.version is None else int(s.version))


def find_model(model_dir: Path, name: str = ROOT_MODEL_NAME) -> ModelSource:
    """The default servable: the first model found, at its highest version (see :func:`find_models`).

    Raises:
        ModelLoadError: saying what was looked for, when nothing or an ambiguous set is there.
    """
    sources = find_models(model_dir, name)
    return latest(sources, sources[0].name)


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
        input_dtype: The model input's dtype (``uint8`` for the trainer's image models); rows
            arrive as float32 and are cast to it, so an integer dtype takes whole numbers in its
            range only (:meth:`check_rows`).
    """

    source: ModelSource
    num_features: int
    num_classes: int
    output: str
    predict_fn: Callable[[Any], Any]
    owner: Any = None
    device: str | None = None
    buckets: tuple[int, ...] = ()
    input_dtype: str = "float32"

    def check_rows(self, batch: np.ndarray) -> None:
        """Raises RequestError (400) when the model's integer input would not hold ``batch`` as sent.

        The cast to an integer dtype truncates and wraps: pixels scaled to [0, 1] become nearly
        all zeros, and the model answers one class for every picture. Float inputs take anything.
        """
        if not np.issubdtype(np.dtype(self.input_dtype), np.integer) or not batch.size:
            return
        limits = np.iinfo(np.dtype(self.input_dtype))
        low, high = float(batch.min()), float(batch.max())
        whole = bool(np.all(batch == np.floor(batch)))
        if whole and low >= limits.min and high <= limits.max:
            return
        what = " (pixel values)" if self.input_dtype == "uint8" else ""
        raise RequestError(
            400,
            f"The model takes {limits.min}-{limits.max} integers{what} ({self.input_dtype} input); the request's values "
            f"range from {low:g} to {high:g}{'' if whole else ', not all whole numbers'}. Send the unscaled values "
            "(for pictures, the 0-255 pixels, not pixels divided by 255).",
        )

    def predict(self, batch: np.ndarray) -> np.ndarray:
        """Class probabilities (float64, rows sum to 1) for a ``[n, num_features]`` float32 batch.

        Raises:
            RequestError: 400, values the model's integer input cannot hold (:meth:`check_rows`).
        """
        self.check_rows(batch)
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


def load_model(model_dir: Path, output: str = "auto", device: str | None = None, source: ModelSource | None = None) -> LoadedModel:
    """Finds (or takes ``source``), loads and compiles the model (its variables on ``device``); raises ModelLoadError."""
    import tensorflow as tf

    source = source or find_model(model_dir)
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
    return LoadedModel(source, num_features, max(num_classes, 2), output, fn, device=device, input_dtype=_dtype_name(dtype))


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
    return LoadedModel(
        source, num_features, max(num_classes, 2), output, fn, owner=loaded, device=device, input_dtype=_dtype_name(spec.dtype)
    )


def _dtype_name(dtype: Any) -> str:
    """``uint8``, ``float32``, ... for a Keras dtype string or a ``tf.DType``."""
    import tensorflow as tf

    return tf.as_dtype(dtype).name


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


def load_tensor_model(model_dir: Path, device: str | None = None, source: ModelSource | None = None) -> TensorModel:
    """Finds (or takes ``source``) and loads any model for TF Serving's contract; raises ModelLoadError."""
    import tensorflow as tf

    source = source or find_model(model_dir)
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
