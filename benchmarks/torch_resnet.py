"""PyTorch torchvision ResNet-50 training images/s: the alternative a user would pick (issue #21).

AMP (bf16 autocast where the GPU supports it, else fp16 with a GradScaler), channels-last, SGD
with momentum, synthetic batches kept on the GPU, as PyTorch's own ResNet-50 recipes train it;
``torch.compile`` when it runs (a compile failure is reported, and the eager figure stands).
Runs in its own process, so it never shares a GPU context with TensorFlow.

    python -m benchmarks.torch_resnet --batch 256 --steps 60 --warmup 15 [--no-compile] OUT.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path
from typing import Any

# torchvision's resnet50 is v1.5 (stride 2 in the 3x3 convolution): 4.09 GMAC forward at 224x224.
FORWARD_MACS_224 = 4.089e9
TRAINING_MULTIPLIER = 3


def training_flops_per_image(image_size: int) -> float:
    """Forward + backward FLOPs of one image (2 FLOPs a MAC, 3x the forward pass), scaled by pixels."""
    return TRAINING_MULTIPLIER * 2 * FORWARD_MACS_224 * (image_size / 224) ** 2


def absent_reason() -> str | None:
    """One line when torch or torchvision cannot be imported here, else None."""
    missing = [name for name in ("torch", "torchvision") if importlib.util.find_spec(name) is None]
    return f"{' and '.join(missing)} not installed here: torchvision ResNet-50 not measured" if missing else None


def measure(batch: int, image_size: int, steps: int, warmup: int, compile_model: bool) -> dict[str, Any]:
    """Times ``steps`` training steps after ``warmup``; returns images/s and what ran."""
    import torch
    import torchvision

    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    bf16 = (not cuda) or torch.cuda.is_bf16_supported()
    dtype = torch.bfloat16 if bf16 else torch.float16
    torch.backends.cudnn.benchmark = True
    model = torchvision.models.resnet50(weights=None).to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler(enabled=not bf16 and cuda)
    criterion = torch.nn.CrossEntropyLoss()
    pictures = torch.randn(batch, 3, image_size, image_size, device=device).to(memory_format=torch.channels_last)
    labels = torch.randint(0, 1000, (batch,), device=device)
    compiled, compile_error = model, None
    if compile_model:
        try:
            compiled = torch.compile(model)
        except Exception as err:  # noqa: BLE001 - any failure leaves the eager model, reported below
            compile_error = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"

    def step() -> Any:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=dtype):
            loss = criterion(compiled(pictures), labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return loss

    started = time.perf_counter()

    def warm_up() -> tuple[Any, float]:
        begun = time.perf_counter()
        loss = step()
        float(loss)  # the first step (torch.compile's compilation, cuDNN's autotuning) ends here
        first = time.perf_counter() - begun
        for _ in range(warmup - 1):
            loss = step()
        return loss, first

    try:
        loss, first_step_s = warm_up()
    except Exception as err:  # noqa: BLE001 - torch.compile fails at the first call, not at compile()
        if compiled is model:
            raise
        compile_error = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
        compiled = model
        loss, first_step_s = warm_up()
    float(loss)
    warm = time.perf_counter()
    # In the log at once: a run cut off in its timed steps still leaves its first-step and warm-up figures.
    print(json.dumps({"phase": "warmed-up", "first_step_s": first_step_s, "warmup_s": warm - started,
                      "compiled": compiled is not model}), flush=True)  # fmt: skip
    for _ in range(steps):
        loss = step()
    final = float(loss)  # waits for the GPU
    elapsed = time.perf_counter() - warm
    return {
        "framework": f"torch {torch.__version__}, torchvision {torchvision.__version__}",
        "device": torch.cuda.get_device_name(0) if cuda else "CPU",
        "dtype": "bf16" if bf16 else "fp16",
        "compiled": compiled is not model,
        "compile_error": compile_error,
        "images_per_sec": steps * batch / elapsed,
        "step_time_ms": 1000.0 * elapsed / steps,
        "warmup_s": warm - started,
        "first_step_s": first_step_s,
        "flops_per_image": training_flops_per_image(image_size),
        "loss": final,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=15)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    reason = absent_reason()
    if reason:
        print(reason)
        return 3
    result = measure(args.batch, args.image_size, args.steps, args.warmup, not args.no_compile)
    print(json.dumps(result), flush=True)  # the caller's log keeps it even if the step is cut off before it reads out
    args.out.write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
