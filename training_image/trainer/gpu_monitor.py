"""GPU utilization and memory, sampled through NVML on a background thread while an epoch runs.

NVML (``nvidia-ml-py``, the ``pynvml`` module) reads the driver's counters without touching
TensorFlow or the CUDA context, so sampling costs the training loop nothing but a thread that
wakes every ``interval`` seconds. Utilization is NVML's ``gpu`` rate: the percent of the last
sample period in which a kernel ran on the GPU (what ``nvidia-smi`` and SageMaker's
``GPUUtilization`` show). Memory is ``used`` from ``nvmlDeviceGetMemoryInfo``.

All GPUs NVML shows are sampled: on SageMaker and on the cluster's nodes the job owns the host.
Without a driver (CPU runs, tests) :func:`start` returns ``None`` and the metric line carries no
GPU fields.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from trainer.logs import log

DEFAULT_INTERVAL_SECONDS = 0.5
MIB = 1024 * 1024


@dataclass(frozen=True)
class GpuUsage:
    """Means over the samples of one period.

    Attributes:
        utilization_pct: Mean over samples of the mean utilization of the GPUs.
        memory_used_mib: Mean over samples of the memory used, summed over the GPUs.
        samples: Samples taken in the period.
    """

    utilization_pct: float
    memory_used_mib: float
    samples: int


class GpuSampler:
    """Samples every GPU's utilization and memory until :meth:`stop`; :meth:`take` per epoch.

    Args:
        nvml: The ``pynvml`` module, initialised (a fake in tests).
        handles: Device handles to sample.
        interval: Seconds between samples.
    """

    def __init__(self, nvml: Any, handles: list[Any], interval: float = DEFAULT_INTERVAL_SECONDS) -> None:
        self._nvml = nvml
        self._handles = handles
        self._interval = interval
        self._lock = threading.Lock()
        self._util_sum = 0.0
        self._mem_sum = 0.0
        self._count = 0
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpu-sampler", daemon=True)

    @property
    def gpu_count(self) -> int:
        """GPUs sampled."""
        return len(self._handles)

    def sample(self) -> None:
        """Takes one sample of every GPU now."""
        utilization = [float(self._nvml.nvmlDeviceGetUtilizationRates(h).gpu) for h in self._handles]
        memory = [float(self._nvml.nvmlDeviceGetMemoryInfo(h).used) / MIB for h in self._handles]
        with self._lock:
            self._util_sum += sum(utilization) / len(utilization)
            self._mem_sum += sum(memory)
            self._count += 1

    def take(self) -> GpuUsage:
        """The means since the last call (one sample now if none was taken), and a new period."""
        with self._lock:
            empty = self._count == 0
        if empty:
            self._safe_sample()
        with self._lock:
            count = max(self._count, 1)
            usage = GpuUsage(self._util_sum / count, self._mem_sum / count, self._count)
            self._util_sum = self._mem_sum = 0.0
            self._count = 0
        return usage

    def stop(self) -> None:
        """Ends the thread and releases NVML."""
        self._stopped.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5 * self._interval + 1)
        try:
            self._nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down a monitor must never fail training
            pass

    def _start(self) -> "GpuSampler":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stopped.wait(self._interval):
            if not self._safe_sample():
                return

    def _safe_sample(self) -> bool:
        try:
            self.sample()
            return True
        except Exception as err:  # noqa: BLE001 - a lost counter ends sampling, never the job
            log("gpu-monitor", stopped=type(err).__name__, reason=" ".join(str(err).split())[:200])
            self._stopped.set()
            return False


def start(interval: float = DEFAULT_INTERVAL_SECONDS, nvml: Any = None) -> GpuSampler | None:
    """A running sampler over every GPU NVML shows, or ``None`` where there is no GPU or no NVML.

    Args:
        interval: Seconds between samples.
        nvml: The ``pynvml`` module or a stand-in (default: import ``pynvml``).
    """
    if nvml is None:
        try:
            import pynvml as nvml  # nvidia-ml-py
        except ImportError:
            return None
    try:
        nvml.nvmlInit()
    except Exception:  # noqa: BLE001 - NVMLError_LibraryNotFound/DriverNotLoaded on CPU hosts
        return None
    try:
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    except Exception as err:  # noqa: BLE001
        log("gpu-monitor", disabled=type(err).__name__)
        nvml.nvmlShutdown()
        return None
    if not handles:
        nvml.nvmlShutdown()
        return None
    return GpuSampler(nvml, handles, interval)._start()
