"""One line at the end of a run that says where the step time went, and what to do about it.

The verdict reads the epochs' metric figures (:class:`trainer.train.metrics.EpochMetrics`):

- ``input-bound``: the step loop waited for its next batch for at least
  :data:`INPUT_BOUND_PCT` percent of the step time. The accelerator idles while the CPU decodes
  and augments; the advice depends on the data format.
- ``GPU idle``: input waits were short, yet NVML saw the GPUs busy less than
  :data:`GPU_IDLE_PCT` percent of the time: the steps are too small to fill the GPU, or the work
  runs elsewhere (host-side Python, the CPU).
- ``compute-bound``: neither; the step itself is the limit.

The first epoch is left out when there are several: it carries the graph tracing and XLA
compilation, which count as compute and would hide an input bottleneck in a short run.
"""

from __future__ import annotations

from collections.abc import Sequence

from trainer.train.metrics import EpochMetrics

INPUT_BOUND_PCT = 30.0
GPU_IDLE_PCT = 20.0

_ADVICE = {
    "image-dir": (
        "try records instead of JPEG files (the processing step writes pre-sized image-tfrecord shards), "
        "more vCPUs per GPU (a larger instance type), or a smaller image_size or lighter augmentation"
    ),
    "image-tfrecord": (
        "try pre-sized records (the processing step's --image-size), more vCPUs per GPU (a larger instance type), "
        "or a smaller image_size or lighter augmentation"
    ),
}
_DEFAULT_ADVICE = "try fewer, larger files (the processing step writes balanced tfrecord shards), more vCPUs per GPU (a larger instance type)"
_CACHE_ADVICE = ", or a channel that fits the in-memory cache (cache_max_mb)"


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def diagnose(epochs: Sequence[EpochMetrics], data_format: str, *, cached: bool = False) -> str | None:
    """The verdict over the epochs this process trained, or ``None`` without input-wait figures.

    Args:
        epochs: The epochs' metrics, in order.
        data_format: The training channel's format (``image-dir``, ``image-tfrecord``, ``csv``, ...),
            which decides the advice.
        cached: Whether the trainer kept the channel in memory (no cache advice then).
    """
    measured = [e for e in epochs if e.input_wait_pct is not None]
    if len(measured) > 1:
        measured = measured[1:]
    if not measured:
        return None
    wait = _mean([e.input_wait_pct for e in measured if e.input_wait_pct is not None])
    gpu = [e.gpu_util_pct for e in measured if e.gpu_util_pct is not None]
    utilization = f", GPU utilization {_mean(gpu):.0f}%" if gpu else ""
    if wait >= INPUT_BOUND_PCT:
        advice = _ADVICE.get(data_format) or _DEFAULT_ADVICE + ("" if cached else _CACHE_ADVICE)
        return f"input-bound: {wait:.0f}% of step time waited on data{utilization}; {advice}"
    if gpu and _mean(gpu) < GPU_IDLE_PCT:
        return (
            f"GPU idle: utilization {_mean(gpu):.0f}% while steps ran, input waits only {wait:.0f}% of step time; "
            "the steps are too small for the GPU (raise batch_size, or steps_per_execution to cut per-step overhead) "
            "or the work runs on the host"
        )
    return f"compute-bound: input waits {wait:.0f}% of step time{utilization}; the step itself is the limit"


def emit(verdict: str) -> None:
    """Prints ``[diagnosis] <verdict>``, flushed."""
    print(f"[diagnosis] {verdict}", flush=True)
