"""A failure that reads like a Keras 2 idiom under Keras 3 gets one pointer at the legacy setting.

TensorFlow 2.16+ makes ``tf.keras`` Keras 3, which rejects idioms many SageMaker scripts still use
(``model.save("dir")`` as a SavedModel, ``metric.reset_states()``, ``tf.keras.optimizers.legacy``,
``keras.layers.experimental``...). The image ships tf-keras, so such a script runs unchanged with
``TF_USE_LEGACY_KERAS=1``; the failure line says so, after the user's file and line. Keras 3's
``model.fit`` under ``MultiWorkerMirroredStrategy`` fails with a raw ``PerReplica`` conversion error
that names neither cause nor fix: it gets a pointer of its own (the legacy setting, or a custom loop).

Scripts written for AWS's TensorFlow containers also reach for what only those containers have:
the ``sagemaker_training`` toolkit, ``sagemaker_tensorflow``'s ``PipeModeDataset`` (Pipe input mode),
or TensorFlow's ``s3://`` file system, where the SDK's default ``--model_dir s3://...`` points. Such a
failure gets one pointer at what this image gives instead (:func:`hint` picks the pointer, if any).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

ENV_LEGACY_KERAS = "TF_USE_LEGACY_KERAS"
# Messages Keras 3 gives for Keras 2 code (checked against keras 3.15).
KERAS3_SIGNS = re.compile(
    "|".join(
        [
            r"has no attribute 'reset_states'",
            r"Invalid filepath extension for saving",
            r"`save_format` argument is deprecated in Keras 3",
            r"optimizers\.legacy",
            r"not supported in Keras 3",
            r"KerasTensor cannot be used as input to a TensorFlow function",
            r"Argument\(s\) not recognized",
            r"Unrecognized keyword arguments? passed to",
            r"No module named '(?:tensorflow\.)?keras\.",
            r"module '(?:tensorflow\.)?keras[\w.]*' has no attribute",
        ]
    )
)
HINT = (
    "This looks like Keras 2 code, which Keras 3 (tf.keras in this image's TensorFlow) rejects: run it with "
    "Keras 2 by setting TF_USE_LEGACY_KERAS=1 (scripts.launch --legacy-keras; SageMaker SDK: "
    "environment={'TF_USE_LEGACY_KERAS': '1'}), or port it to Keras 3."
)


# Keras 3's model.fit under MultiWorkerMirroredStrategy hands the strategy's per-replica values to a
# tensor op (checked against keras 3.15 on TensorFlow 2.21): "Attempt to convert a value
# (PerReplica:{...}) with an unsupported type (...PerReplica...) to a Tensor".
MULTI_WORKER_FIT_SIGN = re.compile(r"Attempt to convert a value \(PerReplica:")
MULTI_WORKER_FIT_HINT = (
    "Keras 3's model.fit does not run under MultiWorkerMirroredStrategy (it hands the strategy's PerReplica values "
    "to a tensor op): run the script with Keras 2, whose fit does, by setting TF_USE_LEGACY_KERAS=1 (scripts.launch "
    "--legacy-keras; SageMaker SDK: environment={'TF_USE_LEGACY_KERAS': '1'}; tf-keras is in this image), or train "
    "with a custom loop (strategy.run over a tf.function step)."
)


# What only AWS's containers have (checked against TensorFlow 2.21's message for an unregistered scheme).
TOOLKIT_HINT = (
    "This image does not ship AWS's sagemaker-training toolkit; it sets the environment the toolkit gives a "
    "script instead: read SM_MODEL_DIR (/opt/ml/model), SM_CHANNEL_<NAME>, SM_HPS, SM_HOSTS and SM_TRAINING_ENV."
)
PIPE_HINT = (
    "sagemaker_tensorflow (PipeModeDataset) is not in this image and Pipe input mode is not supported: use File "
    "input mode (the default) or FastFile, and read the channel's files under SM_CHANNEL_<NAME> (e.g. with "
    "tf.data.TFRecordDataset)."
)
S3_HINT = (
    "TensorFlow in this image has no s3:// file system, and the SageMaker SDK passes --model_dir s3://... by "
    "default: save the model to SM_MODEL_DIR (/opt/ml/model), which SageMaker uploads, and create the estimator "
    "with model_dir=False; read data from SM_CHANNEL_<NAME>."
)
AWS_CONTAINER_SIGNS = (
    (re.compile(r"No module named '(?:sagemaker_training|sagemaker_containers)\b"), TOOLKIT_HINT),
    (re.compile(r"No module named 'sagemaker_tensorflow\b"), PIPE_HINT),
    (re.compile(r"scheme 's3' not implemented"), S3_HINT),
)


def _said(report: Mapping[str, Any] | None, stderr_tail: Iterable[str]) -> list[str]:
    """The report's message and the last error lines, where a failure's words are."""
    return [str((report or {}).get("message", "")), *(str(line) for line in list(stderr_tail)[-5:])]


def hint(report: Mapping[str, Any] | None, stderr_tail: Iterable[str], env: Mapping[str, str]) -> str | None:
    """The one pointer for a failed script: at what this image gives instead of AWS's containers, or at Keras 2."""
    tail = list(stderr_tail)
    said = _said(report, tail)
    for sign, pointer in AWS_CONTAINER_SIGNS:
        if any(sign.search(text) for text in said):
            return pointer
    return keras2_hint(report, tail, env)


def keras2_hint(report: Mapping[str, Any] | None, stderr_tail: Iterable[str], env: Mapping[str, str]) -> str | None:
    """The pointer at the legacy setting, when the failure reads like Keras 2 code, or like Keras 3's fit under
    MultiWorkerMirroredStrategy, and Keras 2 was not asked for."""
    if env.get(ENV_LEGACY_KERAS, "").strip().lower() in ("1", "true", "yes", "on"):
        return None
    said = _said(report, stderr_tail)
    if any(MULTI_WORKER_FIT_SIGN.search(text) for text in said):
        return MULTI_WORKER_FIT_HINT
    return HINT if any(KERAS3_SIGNS.search(text) for text in said) else None
