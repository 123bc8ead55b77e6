"""Model FLOPs per training example and model FLOPs utilisation (MFU), counted per layer.

The count is per layer, not ``6 x parameters``: a convolution reuses each weight at every
output position, so 6N undercounts a CNN by orders of magnitude (for a dense network the two
agree, up to the biases). Conventions, as in the usual MFU definition:

- only multiply-accumulates in weight layers count, at 2 FLOPs each: ``Dense`` and
  non-transposed ``Conv1D/2D/3D`` (incl. depthwise): ``2 x kernel size x output positions``;
  activations, pooling, biases, the loss and the optimizer update are left out;
- a training step costs 3x the forward pass (forward, gradient w.r.t. the inputs, gradient
  w.r.t. the weights), including the first layer's input gradient that is not really computed;
- the peak is the GPU's dense (no sparsity) tensor peak in its mixed-precision dtype from
  ``gpu_instances.json`` (``peak_tflops_half``). Runs in float32 (TF32 matmuls on Ampere and
  later) are measured against the same peak, so they show what turning mixed precision off costs.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path
from typing import Any

TRAINING_IMAGE = Path(__file__).resolve().parent.parent / "training_image"
if str(TRAINING_IMAGE) not in sys.path:
    sys.path.insert(0, str(TRAINING_IMAGE))

from trainer import gpu_table  # noqa: E402

TRAINING_MULTIPLIER = 3
_COUNTED = ("Dense", "Conv1D", "Conv2D", "Conv3D", "DepthwiseConv1D", "DepthwiseConv2D")


def _layers(model: Any) -> list[Any]:
    """Leaf layers, looking inside nested models."""
    found = []
    for layer in model.layers:
        found.extend(_layers(layer) if hasattr(layer, "layers") else [layer])
    return found


def forward_flops_per_example(model: Any) -> int:
    """Multiply-accumulate FLOPs of one example's forward pass through a built Keras model.

    Raises:
        ValueError: a layer with a kernel this count does not know (it would be silently wrong).
    """
    total = 0
    for layer in _layers(model):
        kernel = getattr(layer, "kernel", None)
        if kernel is None:
            continue
        kind = type(layer).__name__
        if kind not in _COUNTED:
            raise ValueError(f"cannot count FLOPs of layer {layer.name!r} ({kind}); counted: {', '.join(_COUNTED)}")
        # Every output position (all dims but batch and channels) applies the whole kernel once.
        positions = math.prod(int(d) for d in layer.output.shape[1:-1])
        total += 2 * math.prod(int(d) for d in kernel.shape) * positions
    return total


def training_flops_per_example(model: Any) -> int:
    """Forward and backward FLOPs of one training example (3x the forward pass)."""
    return TRAINING_MULTIPLIER * forward_flops_per_example(model)


def mfu(flops_per_example: float, examples_per_sec_per_gpu: float, peak_tflops: float) -> float:
    """Model FLOPs utilisation: achieved model FLOP/s over one GPU's peak, as a fraction."""
    if peak_tflops <= 0:
        raise ValueError(f"peak must be positive, got {peak_tflops} TFLOP/s")
    return flops_per_example * examples_per_sec_per_gpu / (peak_tflops * 1e12)


def peak_tflops(instance_type: str) -> float:
    """Dense mixed-precision tensor peak of one GPU of ``instance_type`` (``ml.`` prefix allowed).

    Raises:
        KeyError: the instance type is not in gpu_instances.json.
    """
    row = gpu_table.lookup(instance_type)
    if row is None:
        raise KeyError(f"instance type {instance_type!r} is not in {gpu_table.TABLE_PATH.name}")
    table = json.loads(gpu_table.TABLE_PATH.read_text(encoding="utf-8"))["instance_types"]
    return float(table[row.name]["peak_tflops_half"])


def _tokens(name: str) -> set[str]:
    return {t for t in re.split(r"[\s\-_/]+", name.upper()) if t}


def instance_type_for_gpu(device_name: str) -> str | None:
    """An instance type in the table whose GPU is ``device_name`` (``NVIDIA H100 80GB HBM3``), or None.

    Matches the table's model token (``H100``, ``L40S``, ``A10G``) as a whole word of the device
    name, so ``L4`` does not match an L40S. All rows with one GPU model share its peak.
    """
    tokens = _tokens(device_name)
    for name in gpu_table.known_instance_types():
        row = gpu_table.lookup(name)
        assert row is not None
        model_token = row.gpu_model.upper().split()[-1]
        if model_token in tokens:
            return name
    return None
