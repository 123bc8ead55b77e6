"""Hyperparameters: parsed and validated once, up front, with errors that name the key.

SageMaker writes every hyperparameter value as a string (the SageMaker Python SDK's framework
estimators additionally JSON-encode them, so ``"mlp"`` may arrive as ``'"mlp"'``); both forms are
accepted. Unknown keys are refused by name with the closest known key, because a typo such as
``learning_rat`` would otherwise train silently with the default. Keys that SageMaker or its SDK
inject (``sagemaker_*``, ``_tuning_objective_metric``, ``model_dir``) are tolerated and ignored.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from trainer.contract.errors import ConfigError

MODELS = ("mlp", "cnn", "resnet50")
DATA_FORMATS = ("auto", "csv", "tfrecord", "image-tfrecord", "image-dir")
MIXED_PRECISION_MODES = ("auto", "bf16", "fp16", "fp32", "on", "off")  # trainer.precision.MODES
OPTIMIZERS = ("adam", "sgd")

# Injected by SageMaker or the SageMaker Python SDK, never by a user: tolerated, ignored.
INJECTED_PREFIXES = ("sagemaker_", "_")
INJECTED_KEYS = frozenset({"model_dir"})


@dataclass(frozen=True)
class TrainingConfig:
    """The resolved training configuration (saved beside the model as ``trainer_config.json``).

    Attributes:
        model: Built-in model: ``mlp`` (tabular features), ``cnn`` (images as flat feature
            rows, needs ``image_shape``) or ``resnet50`` (Keras applications ResNet-50, random
            initial weights, on ``image-tfrecord`` / ``image-dir`` data at ``image_size``).
        epochs: Total epochs to train, counting epochs completed before a restart.
        batch_size: Global batch size, split evenly over all replicas of all workers; must be
            divisible by the number of replicas.
        learning_rate: Learning rate of the optimizer.
        optimizer: ``adam``, or ``sgd`` (with momentum 0.9).
        hidden_units: Dense layer widths of the MLP (``"128,64"``); empty for a linear model.
        conv_filters: Filters of the CNN's 3x3 convolution blocks (``"16,32"``).
        dropout: Dropout rate after each hidden block, in [0, 1).
        image_shape: ``HxWxC`` of the images the CNN reshapes each flat feature row into.
        num_classes: Number of classes; 0 infers it as the largest label + 1 from the data scan.
        data_format: ``csv``, ``tfrecord``, ``image-tfrecord`` (``image/encoded`` +
            ``image/class/label`` examples), ``image-dir`` (one sub-directory per class) or
            ``auto`` (from the files, else the channel's ContentType in inputdataconfig.json).
        train_channel: Name of the input channel to train on; empty (the default) takes ``train``
            or ``training``, else the only data channel declared (``code`` and ``validation`` aside).
        shuffle_buffer: Examples in the shuffle buffer (per input pipeline).
        mixed_precision: ``auto`` (bf16 on compute capability >= 8.0, fp16 on >= 7.0, else
            float32; float32 on CPU), ``bf16`` (fails on GPUs below 8.0), ``fp16`` (dynamic loss
            scale agreed across replicas), ``fp32``; the older ``on`` (auto that must not end
            in float32 on a GPU; bf16 on CPU) and ``off`` (fp32) are kept. See trainer.precision.
        xla: Compile the forward and backward pass with XLA; unset: on for ``resnet50`` on GPUs
            (fused convolutions, batch norm and elementwise ops), off otherwise.
        batch_size_per_gpu: Examples per replica; when set, the global batch is this times the
            job's replicas (so it grows with GPUs) and ``batch_size`` must not be set too.
        learning_rate_base_batch: The global batch ``learning_rate`` is meant for; when set, the
            rate is scaled linearly to the job's global batch (the linear scaling rule of Goyal
            et al., "Accurate, Large Minibatch SGD"). 0: ``learning_rate`` as given.
        warmup_epochs: Epochs over which the rate rises linearly to its (scaled) value; 0: none.
        expected_gpu_count: GPUs per host, used when ``EXPECTED_GPU_COUNT`` is not set.
        seed: Seed for weight initialisation and shuffling.
        checkpoint_every_epochs: Checkpoint every this many epochs (the last epoch always is).
        checkpoint_every_minutes: Also checkpoint in the middle of an epoch once this many minutes
            have passed since the last checkpoint (at a call's end, on every worker at once), so a
            failure without SIGTERM (a lost host, a kill) costs at most that much; 0: epochs only.
        steps_per_execution: Training steps run per call into TensorFlow (like Keras'
            ``steps_per_execution``); SIGTERM is honoured at the end of such a call.
        cache_max_mb: Keep a worker's parsed examples in memory after the first epoch when its
            files take at most this many MB on disk; 0 reads and parses the files every epoch.
        validation_channel: Input channel evaluated after training epochs, if the job has it.
        validation_every_epochs: Evaluate the validation channel every this many epochs (the
            last epoch always is).
        early_stopping_patience: Stop after this many evaluations without a lower ``val_loss``;
            0 never stops early.
        divergence_factor: The loss has diverged when it stays above this multiple of its value
            over the first steps; 0 turns the check off.
        divergence_steps: For this many consecutive steps.
        on_divergence: ``fail`` (no model is written) or ``warn`` (a warning line, training goes on).
        image_size: Side in pixels of the square images ``resnet50`` trains on (decoded images
            are cropped and resized to it; at least 32).
        image_examples: Images in an ``image-tfrecord`` channel without ``manifest.json``;
            unset: the record headers are counted (a seek per record, no image read).
        image_label_base: Label value of class 0 in ``image-tfrecord`` data; unset: the
            manifest's, else 1 (the TensorFlow/TPU ImageNet tooling numbers classes from 1).
    """

    model: str = "mlp"
    epochs: int = 10
    batch_size: int = 256
    learning_rate: float = 1e-3
    optimizer: str = "adam"
    hidden_units: tuple[int, ...] = (128, 64)
    conv_filters: tuple[int, ...] = (16, 32)
    dropout: float = 0.0
    image_shape: tuple[int, int, int] | None = None
    num_classes: int = 0
    data_format: str = "auto"
    train_channel: str = ""
    shuffle_buffer: int = 10_000
    mixed_precision: str = "auto"
    xla: bool | None = None
    expected_gpu_count: int | None = None
    seed: int = 1234
    checkpoint_every_epochs: int = 1
    checkpoint_every_minutes: float = 30.0
    steps_per_execution: int = 16
    cache_max_mb: int = 2048
    validation_channel: str = "validation"
    validation_every_epochs: int = 1
    early_stopping_patience: int = 0
    divergence_factor: float = 10.0
    divergence_steps: int = 20
    on_divergence: str = "fail"
    image_size: int = 224
    image_examples: int | None = None
    image_label_base: int | None = None
    batch_size_per_gpu: int = 0
    learning_rate_base_batch: int = 0
    warmup_epochs: float = 0.0

    def resolved_for(self, *, replicas: int, uses_gpus: bool) -> TrainingConfig:
        """This config with what depends on the job's devices settled: global batch, learning rate, XLA.

        ``batch_size_per_gpu`` sets ``batch_size`` (times ``replicas``); ``learning_rate_base_batch``
        scales ``learning_rate`` to that global batch (and is then cleared, so resolving twice
        scales once); an unset ``xla`` becomes on for ``resnet50`` on GPUs.
        """
        batch = self.batch_size_per_gpu * replicas if self.batch_size_per_gpu else self.batch_size
        rate = self.learning_rate * batch / self.learning_rate_base_batch if self.learning_rate_base_batch else self.learning_rate
        xla = self.xla if self.xla is not None else (self.model == "resnet50" and uses_gpus)
        return dataclasses.replace(self, batch_size=batch, learning_rate=rate, learning_rate_base_batch=0, xla=xla)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (tuples become lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_hyperparameters(cls, raw: Mapping[str, Any]) -> TrainingConfig:
        """Parses SageMaker-style hyperparameters; raises ConfigError listing every problem."""
        return parse_hyperparameters(raw)


def known_hyperparameters() -> tuple[str, ...]:
    """Names a user may set, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(TrainingConfig))


def is_injected(key: str) -> bool:
    """Whether SageMaker or its SDK, not the user, put this key in hyperparameters.json."""
    return key in INJECTED_KEYS or key.startswith(INJECTED_PREFIXES)


def _unquote(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        try:
            decoded = json.loads(text)
        except json.JSONDecodeError:
            return text
        return decoded if isinstance(decoded, str) else text
    return text


def _int(minimum: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"must be an integer, got {text!r}") from None
        if value < minimum:
            raise ValueError(f"must be >= {minimum}, got {value}")
        return value

    return parse


def _optional_int(text: str) -> int | None:
    return None if text == "" else _int(0)(text)


def _float(low: float, high: float, low_inclusive: bool) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"must be a number, got {text!r}") from None
        below = value < low if low_inclusive else value <= low
        if not math.isfinite(value) or below or value >= high:
            bracket = "[" if low_inclusive else "("
            raise ValueError(f"must be in {bracket}{low}, {high}), got {text!r}")
        return value

    return parse


def _bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"must be true or false, got {text!r}")


def _choice(options: tuple[str, ...]) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text.lower() not in options:
            raise ValueError(f"must be one of {', '.join(options)}, got {text!r}")
        return text.lower()

    return parse


def _int_list(text: str) -> tuple[int, ...]:
    body = text.strip().strip("[]")
    if not body.strip():
        return ()
    try:
        values = tuple(int(part) for part in body.replace("x", ",").split(","))
    except ValueError:
        raise ValueError(f"must be comma-separated positive integers, got {text!r}") from None
    if any(v <= 0 for v in values):
        raise ValueError(f"must be comma-separated positive integers, got {text!r}")
    return values


def _image_shape(text: str) -> tuple[int, int, int] | None:
    if not text.strip():
        return None
    values = _int_list(text.lower())
    if len(values) != 3:
        raise ValueError(f"must be HxWxC, e.g. 28x28x1, got {text!r}")
    return values  # type: ignore[return-value]


def _channel(text: str) -> str:
    if "/" in text:
        raise ValueError(f"must be a channel name, got {text!r}")
    return text


def _factor_or_zero(text: str) -> float:
    return 0.0 if text.strip() in ("0", "0.0") else _float(1.0, math.inf, low_inclusive=False)(text)


_PARSERS: dict[str, Callable[[str], Any]] = {
    "model": _choice(MODELS),
    "epochs": _int(1),
    "batch_size": _int(1),
    "learning_rate": _float(0.0, math.inf, low_inclusive=False),
    "optimizer": _choice(OPTIMIZERS),
    "hidden_units": _int_list,
    "conv_filters": _int_list,
    "dropout": _float(0.0, 1.0, low_inclusive=True),
    "image_shape": _image_shape,
    "num_classes": _int(0),
    "data_format": _choice(DATA_FORMATS),
    "train_channel": _channel,
    "shuffle_buffer": _int(1),
    "mixed_precision": _choice(MIXED_PRECISION_MODES),
    "xla": lambda text: None if text == "" else _bool(text),
    "expected_gpu_count": _optional_int,
    "seed": _int(0),
    "checkpoint_every_epochs": _int(1),
    "checkpoint_every_minutes": _float(0.0, 10_000.0, low_inclusive=True),
    "steps_per_execution": _int(1),
    "cache_max_mb": _int(0),
    "validation_channel": _channel,
    "validation_every_epochs": _int(1),
    "early_stopping_patience": _int(0),
    "divergence_factor": _factor_or_zero,
    "divergence_steps": _int(1),
    "on_divergence": _choice(("fail", "warn")),
    "image_size": _int(32),
    "image_examples": _optional_int,
    "image_label_base": _optional_int,
    "batch_size_per_gpu": _int(0),
    "learning_rate_base_batch": _int(0),
    "warmup_epochs": _float(0.0, 1000.0, low_inclusive=True),
}


# A regular expression that every value each parser accepts matches (after the optional quotes of
# the SDK's JSON encoding): what a launch workflow, which cannot run these parsers, can check of a
# value before a GPU instance starts (stacks.components.hyperparameter_rules renders it to JSONata).
# Necessary, not sufficient: ranges and the checks across keys run in parse_hyperparameters alone.
# tests/trainer/test_trainer_config.py holds each parser to its pattern.
_WHOLE = r"[+]?[0-9][0-9_]*"
_NUMBER = r"[+-]?([0-9][0-9_]*[.]?[0-9_]*|[.][0-9][0-9_]*)([eE][+-]?[0-9]+)?"
_INT_LIST = r"[\[\] ]*[0-9xX,+_ ]*[\[\] ]*"


def _any_case(words: tuple[str, ...]) -> str:
    """``(mlp|cnn)`` matching any letter case (JSONata's regexes in a rule carry no flags)."""
    return "(" + "|".join("".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c) for c in w) for w in words) + ")"


_BOOL_WORDS = ("true", "1", "yes", "on", "false", "0", "no", "off")
VALUE_PATTERNS: dict[str, str] = {
    "model": _any_case(MODELS),
    "epochs": _WHOLE,
    "batch_size": _WHOLE,
    "learning_rate": _NUMBER,
    "optimizer": _any_case(OPTIMIZERS),
    "hidden_units": _INT_LIST,
    "conv_filters": _INT_LIST,
    "dropout": _NUMBER,
    "image_shape": _INT_LIST,
    "num_classes": _WHOLE,
    "data_format": _any_case(DATA_FORMATS),
    "train_channel": r"[^\/]*",
    "shuffle_buffer": _WHOLE,
    "mixed_precision": _any_case(MIXED_PRECISION_MODES),
    "xla": f"({_any_case(_BOOL_WORDS)})?",
    "expected_gpu_count": f"({_WHOLE})?",
    "seed": _WHOLE,
    "checkpoint_every_epochs": _WHOLE,
    "checkpoint_every_minutes": _NUMBER,
    "steps_per_execution": _WHOLE,
    "cache_max_mb": _WHOLE,
    "validation_channel": r"[^\/]*",
    "validation_every_epochs": _WHOLE,
    "early_stopping_patience": _WHOLE,
    "divergence_factor": _NUMBER,
    "divergence_steps": _WHOLE,
    "on_divergence": _any_case(("fail", "warn")),
    "image_size": _WHOLE,
    "image_examples": f"({_WHOLE})?",
    "image_label_base": f"({_WHOLE})?",
    "batch_size_per_gpu": _WHOLE,
    "learning_rate_base_batch": _WHOLE,
    "warmup_epochs": _NUMBER,
}
"""Per hyperparameter, the shape of every value its parser accepts (see the comment above)."""


def value_pattern(key: str) -> str:
    """The whole-value regex for ``key``: :data:`VALUE_PATTERNS`, with the surrounding blanks and quotes
    that :func:`_unquote` removes."""
    return f'^\\s*"?\\s*{VALUE_PATTERNS[key]}\\s*"?\\s*$'


def batch_problem(config: TrainingConfig, *, replicas: int, workers: int) -> str | None:
    """Why the global batch cannot be split over ``replicas`` (GPUs of all ``workers``), or ``None``."""
    if config.batch_size_per_gpu or config.batch_size % replicas == 0:
        return None
    return (
        f"hyperparameter 'batch_size' {config.batch_size} is the global batch and must be divisible by the "
        f"{replicas} replicas of this job ({workers} worker(s)); use a multiple of {replicas}."
    )


def parse_hyperparameters(raw: Mapping[str, Any]) -> TrainingConfig:
    """Parses and validates hyperparameters; every problem is reported, each naming its key."""
    known = known_hyperparameters()
    assert set(known) == set(_PARSERS), "every TrainingConfig field needs a parser"
    problems: list[str] = []
    values: dict[str, Any] = {}
    if "sagemaker_program" in raw:
        # A job that names a script must run that script (trainer.user_code), never a built-in model.
        raise ConfigError(
            f"hyperparameter sagemaker_program={raw['sagemaker_program']} names a training script, which the "
            "built-in trainer cannot run; start the job through the image's entrypoint (python -m trainer)."
        )
    for key in sorted(raw):
        if is_injected(key):
            continue
        if key not in _PARSERS:
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}? " if close else ""
            problems.append(f"unknown hyperparameter {key!r} ({hint}known: {', '.join(known)})")
            continue
        try:
            values[key] = _PARSERS[key](_unquote(raw[key]))
        except ValueError as err:
            problems.append(f"hyperparameter {key!r} {err}")

    if not problems:
        config = TrainingConfig(**values)
        if config.model == "cnn" and config.image_shape is None:
            problems.append("hyperparameter 'image_shape' is required with model=cnn (e.g. 28x28x1)")
        if config.model == "cnn" and not config.conv_filters:
            problems.append("hyperparameter 'conv_filters' must name at least one block with model=cnn")
        if "batch_size" in raw and config.batch_size_per_gpu:
            problems.append(
                "hyperparameters 'batch_size' (global) and 'batch_size_per_gpu' both set: keep one (with "
                "batch_size_per_gpu the global batch is it times the job's replicas)"
            )
        if config.num_classes == 1:
            problems.append("hyperparameter 'num_classes' must be >= 2 (or 0 to infer it)")
    if problems:
        raise ConfigError("Invalid hyperparameters: " + "; ".join(problems) + ".")
    return config
