"""The NVML sampler (with a fake NVML; real GPUs in the gpu-marked test) and the end-of-run verdict."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from trainer import gpu_monitor
from trainer.train import diagnosis
from trainer.train.metrics import EpochMetrics

MIB = 1024 * 1024


class FakeNvml:
    """pynvml's calls the sampler makes, over scripted per-GPU readings."""

    class NVMLError(Exception):
        pass

    def __init__(self, utilization: list[list[int]], memory_mib: list[int], *, init_error: bool = False) -> None:
        self.utilization = utilization  # per GPU, the readings in turn (the last one repeats)
        self.memory_mib = memory_mib
        self.init_error = init_error
        self.reads = [0] * len(utilization)
        self.shutdowns = 0
        self.lock = threading.Lock()

    def nvmlInit(self) -> None:
        if self.init_error:
            raise self.NVMLError("NVML Shared Library Not Found")

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.utilization)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        with self.lock:
            readings = self.utilization[handle]
            value = readings[min(self.reads[handle], len(readings) - 1)]
            self.reads[handle] += 1
        return SimpleNamespace(gpu=value, memory=0)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(used=self.memory_mib[handle] * MIB, total=80 * 1024 * MIB, free=0)


def test_no_driver_means_no_sampler_and_no_gpu_figures():
    assert gpu_monitor.start(nvml=FakeNvml([], [], init_error=True)) is None
    fake = FakeNvml([], [])
    assert gpu_monitor.start(nvml=fake) is None and fake.shutdowns == 1


def test_samples_average_over_gpus_and_time_and_each_take_starts_a_new_period():
    # Two GPUs; utilization averages over GPUs, memory sums over them.
    fake = FakeNvml([[10, 30], [50, 70]], [1000, 3000])
    sampler = gpu_monitor.GpuSampler(fake, [0, 1], interval=60)  # no thread: samples by hand
    sampler.sample()
    sampler.sample()
    usage = sampler.take()
    assert (usage.utilization_pct, usage.memory_used_mib, usage.samples) == (40.0, 4000.0, 2)  # (30 + 50) / 2
    # A period with no sample yet takes one on the spot rather than report nothing.
    usage = sampler.take()
    assert (usage.utilization_pct, usage.samples) == (50.0, 1)


def test_the_background_thread_samples_until_stopped():
    fake = FakeNvml([[90]], [5000])
    sampler = gpu_monitor.start(interval=0.01, nvml=fake)
    assert sampler is not None and sampler.gpu_count == 1
    deadline = time.monotonic() + 5
    while fake.reads[0] < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    usage = sampler.take()
    assert usage.samples >= 5 and usage.utilization_pct == 90.0 and usage.memory_used_mib == 5000.0
    sampler.stop()
    reads = fake.reads[0]
    time.sleep(0.05)
    assert fake.reads[0] == reads and fake.shutdowns == 1


def test_a_counter_that_fails_ends_sampling_not_the_job(capsys):
    class Failing(FakeNvml):
        def nvmlDeviceGetUtilizationRates(self, handle):
            raise self.NVMLError("GPU is lost")

    sampler = gpu_monitor.start(interval=0.01, nvml=Failing([[0]], [0]))
    assert sampler is not None
    sampler.take()
    sampler.stop()
    assert "[trainer] gpu-monitor stopped=NVMLError reason=GPU is lost" in capsys.readouterr().out


def _epochs(waits, gpu=None):
    return [
        EpochMetrics(i + 1, 1.0, 0.5, 100.0, 10.0, input_wait_pct=w, gpu_util_pct=gpu)
        for i, w in enumerate(waits)
    ]


def test_input_bound_names_the_share_and_advice_for_the_data_format():
    # The first epoch (tracing, compilation) is left out: 62% is the mean of the other two.
    verdict = diagnosis.diagnose(_epochs([5.0, 60.0, 64.0], gpu=35.0), "image-dir")
    assert verdict == (
        "input-bound: 62% of step time waited on data, GPU utilization 35%; try records instead of JPEG files "
        "(the processing step writes pre-sized image-tfrecord shards), more vCPUs per GPU (a larger instance "
        "type), or a smaller image_size or lighter augmentation"
    )
    assert diagnosis.diagnose(_epochs([50.0]), "csv").endswith(
        "try fewer, larger files (the processing step writes balanced tfrecord shards), more vCPUs per GPU "
        "(a larger instance type), or a channel that fits the in-memory cache (cache_max_mb)"
    )
    assert "cache" not in diagnosis.diagnose(_epochs([50.0]), "csv", cached=True)


def test_gpu_idle_and_compute_bound():
    assert diagnosis.diagnose(_epochs([0.0, 3.0], gpu=4.0), "tfrecord").startswith(
        "GPU idle: utilization 4% while steps ran, input waits only 3% of step time;"
    )
    assert diagnosis.diagnose(_epochs([9.0, 2.0], gpu=93.0), "tfrecord") == (
        "compute-bound: input waits 2% of step time, GPU utilization 93%; the step itself is the limit"
    )
    assert diagnosis.diagnose(_epochs([1.0]), "csv") == "compute-bound: input waits 1% of step time; the step itself is the limit"


@pytest.mark.parametrize("waits", [[], [None, None]])
def test_no_verdict_without_measured_epochs(waits):
    assert diagnosis.diagnose(_epochs(waits), "csv") is None


@pytest.mark.gpu
def test_real_nvml_reads_every_gpu():
    sampler = gpu_monitor.start(interval=0.05)
    if sampler is None:
        pytest.skip("NVML sees no GPU (no NVIDIA driver)")
    try:
        time.sleep(0.3)
        usage = sampler.take()
        assert sampler.gpu_count >= 1 and usage.samples >= 2
        assert 0.0 <= usage.utilization_pct <= 100.0 and usage.memory_used_mib > 0
    finally:
        sampler.stop()
