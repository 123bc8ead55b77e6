"""GPU verification before any training: the GPUs must be the ones the job pays for, and work.

Unlike the SageMaker toolkit, which logs "No GPUs detected" and carries on, a mismatch here is a
failure: a p4d job silently training on CPU costs as much as a working one. The check runs in two
halves because TensorFlow allows device configuration only before its runtime starts and
MultiWorkerMirroredStrategy must be created before any op runs:

1. :func:`inspect_devices` (before the strategy): resolve the expected count, compare it with the
   physical GPUs, configure memory growth (or hide the GPUs when 0 are expected).
2. :func:`smoke_test` (after the strategy): a matmul on every replica device and, for training,
   an all-reduce across all replicas, then one ``[gpu-check]`` line with the whole report.

Every process that is not the built-in trainer (a user's script, a processor, a wrapper for a job
that replaces the entrypoint) runs :func:`main` instead: :func:`driver_check` proves the visible
GPUs through the CUDA driver and NVML (trainer.gpu_driver) without importing TensorFlow, and with
0 GPUs expected touches no GPU library at all.

Every step that talks to a device runs under :func:`bounded`: a hung driver call ends the check
within ``GPU_CHECK_TIMEOUT_SECONDS`` with one line naming the check and the device.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from trainer import gpu_driver, gpu_table, precision
from trainer.contract.environment import ENV_EXPECTED_GPU_COUNT, ENV_GPU_CHECK_TIMEOUT, ENV_INSTANCE_TYPE, gpu_check_timeout_seconds
from trainer.contract.errors import GpuCheckError
from trainer.logs import log, log_json

MATMUL_SIZE = 256
# TF32 on Ampere and later rounds matmul inputs to 10 mantissa bits; a broken device is off by far more.
MATMUL_RTOL = 2e-2
# The check's own bound (GPU_CHECK_TIMEOUT_SECONDS, default 300 s) is read by the contract.
ENV_CHECK_TIMEOUT = ENV_GPU_CHECK_TIMEOUT

T = TypeVar("T")


def bounded(check: str, device: str, call: Callable[[], T], timeout: float | None = None) -> T:
    """Runs ``call`` (one device operation) and returns its result, or fails after ``timeout`` s.

    The call runs on a daemon thread: a driver call stuck in the kernel cannot be interrupted, but
    the check stops waiting for it, says which check hung on which device, and the process exits.

    Raises:
        GpuCheckError: "GPU check '<check>' on <device> did not finish within <timeout> s ...".
    """
    limit = gpu_check_timeout_seconds() if timeout is None else timeout
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = call()
        except BaseException as err:  # noqa: BLE001 - re-raised on the caller's thread
            outcome["error"] = err

    started = time.monotonic()
    worker = threading.Thread(target=target, name=f"gpu-check-{check}", daemon=True)
    worker.start()
    worker.join(limit)
    if worker.is_alive():
        log_json("gpu-check", {"ok": False, "check": check, "device": device, "timeout_seconds": limit})
        raise GpuCheckError(
            f"GPU check '{check}' on {device} did not finish within {limit:g}s ({ENV_CHECK_TIMEOUT}); the device or "
            "its driver is hung (see nvidia-smi and the kernel log, dmesg | grep -i xid). Nothing was started."
        )
    if "error" in outcome:
        raise outcome["error"]
    log("gpu-check-step", check=check, device=device.replace(" ", "_"), seconds=f"{time.monotonic() - started:.2f}")
    return outcome["value"]


@dataclass(frozen=True)
class GpuExpectation:
    """How many GPUs this host must have, and who said so.

    Attributes:
        count: GPUs per host; 0 means run on CPU on purpose.
        source: Where the number came from, quoted in failure messages.
    """

    count: int
    source: str


def resolve_expectation(
    env_count: int | None, hyperparameter_count: int | None, instance_type: str | None
) -> GpuExpectation:
    """EXPECTED_GPU_COUNT, else the ``expected_gpu_count`` hyperparameter, else the instance table."""
    if env_count is not None:
        return GpuExpectation(env_count, ENV_EXPECTED_GPU_COUNT)
    if hyperparameter_count is not None:
        return GpuExpectation(hyperparameter_count, "hyperparameter expected_gpu_count")
    if instance_type:
        row = gpu_table.lookup(instance_type)
        if row is None:
            raise GpuCheckError(
                f"Cannot tell how many GPUs to expect: instance type {instance_type!r} is not in "
                f"gpu_instances.json, and neither {ENV_EXPECTED_GPU_COUNT} nor the expected_gpu_count "
                "hyperparameter is set."
            )
        return GpuExpectation(row.gpu_count, f"instance type {instance_type} in gpu_instances.json")
    raise GpuCheckError(
        f"Cannot tell how many GPUs to expect: set {ENV_EXPECTED_GPU_COUNT} (0 runs on CPU on purpose), "
        f"the expected_gpu_count hyperparameter, or {ENV_INSTANCE_TYPE} to a type in gpu_instances.json."
    )


@dataclass(frozen=True)
class GpuInfo:
    """One physical GPU as TensorFlow and the driver describe it.

    Attributes:
        index: Position among the GPUs TensorFlow sees.
        name: Device name (``NVIDIA A10G``), from TensorFlow or nvidia-smi.
        compute_capability: ``major.minor``, decides bf16 versus fp16.
        memory_total_mib: Total memory of this visible device (a MIG slice's own), read by UUID.
        uuid: ``GPU-...`` / ``MIG-...`` of the device, when the CUDA driver answers.
    """

    index: int
    name: str
    compute_capability: str | None
    memory_total_mib: int | None
    uuid: str | None = None


@dataclass(frozen=True)
class DeviceInventory:
    """What :func:`inspect_devices` found, the first half of the ``[gpu-check]`` report.

    Attributes:
        expected: The expected GPU count and its source.
        found: Physical GPUs TensorFlow sees (before any are hidden).
        built_with_cuda: ``tf.test.is_built_with_cuda()``.
        gpus: Details of every GPU found.
        driver_version: NVIDIA driver version from nvidia-smi, if available.
        cuda_driver_api: CUDA version the driver supports (``cuDriverGetVersion``).
        cuda_build_version: CUDA version TensorFlow was built against.
        cudnn_build_version: cuDNN version TensorFlow was built against.
        logical_cpu_devices: CPU devices made available when training on CPU.
    """

    expected: GpuExpectation
    found: int
    built_with_cuda: bool
    gpus: tuple[GpuInfo, ...] = field(default_factory=tuple)
    driver_version: str | None = None
    cuda_driver_api: str | None = None
    cuda_build_version: str | None = None
    cudnn_build_version: str | None = None
    logical_cpu_devices: int = 1

    @property
    def uses_gpus(self) -> bool:
        """Whether training runs on GPUs (the expected count is positive and verified)."""
        return self.expected.count > 0

    def min_compute_capability(self) -> tuple[int, int] | None:
        """Lowest compute capability among the GPUs, or ``None`` when unknown or on CPU."""
        capabilities = []
        for gpu in self.gpus:
            if gpu.compute_capability is None:
                return None
            major, minor = gpu.compute_capability.split(".")
            capabilities.append((int(major), int(minor)))
        return min(capabilities) if capabilities and self.uses_gpus else None

    def report(self) -> dict[str, Any]:
        """JSON-ready report for the ``[gpu-check]`` line."""
        report = asdict(self)
        report["expected"] = self.expected.count
        report["expected_source"] = self.expected.source
        return report


def _driver_facts() -> tuple[list[gpu_driver.VisibleDevice], str | None, str | None]:
    """Visible devices (memory by UUID), NVIDIA driver version, CUDA driver API version; empty without a driver."""
    driver = gpu_driver.CudaDriver.load()
    if driver is None:
        return [], None, None
    try:
        cuda_api = bounded("cuInit", "the CUDA driver", driver.init)
        devices = bounded("device-list", "the CUDA driver", lambda: gpu_driver.list_visible(driver))
    except gpu_driver.DriverError as err:
        log("gpu-check-warning", cuda_driver=repr(str(err)))
        return [], None, None
    _, version = gpu_driver.nvml_memory_by_uuid([])
    return devices, version, cuda_api


def inspect_devices(expectation: GpuExpectation, logical_cpu_devices: int = 1) -> DeviceInventory:
    """Compares expected and visible GPUs and configures devices; must run before any TF op.

    Raises:
        GpuCheckError: naming the expected and found counts when they differ, or when GPUs are
            expected from a TensorFlow build without CUDA.
    """
    import tensorflow as tf

    physical = bounded("device-list", "all GPUs (TensorFlow)", lambda: tf.config.list_physical_devices("GPU"))
    build = dict(tf.sysconfig.get_build_info())
    built_with_cuda = bool(tf.test.is_built_with_cuda())
    # Both enumerate the visible CUDA ordinals, so /GPU:i is the driver's device i (CUDA_VISIBLE_DEVICES, MIG).
    visible, driver, cuda_api = _driver_facts() if physical else ([], None, None)
    gpus = []
    for index, device in enumerate(physical):
        details = tf.config.experimental.get_device_details(device)
        capability = details.get("compute_capability")
        facts = visible[index] if index < len(visible) else None
        gpus.append(
            GpuInfo(
                index=index,
                name=str(details.get("device_name", device.name)),
                compute_capability=f"{capability[0]}.{capability[1]}" if capability else None,
                memory_total_mib=facts.memory_total_mib if facts else None,
                uuid=facts.uuid if facts else None,
            )
        )
    inventory = DeviceInventory(
        expected=expectation,
        found=len(physical),
        built_with_cuda=built_with_cuda,
        gpus=tuple(gpus),
        driver_version=driver,
        cuda_driver_api=cuda_api,
        cuda_build_version=build.get("cuda_version"),
        cudnn_build_version=build.get("cudnn_version"),
        logical_cpu_devices=logical_cpu_devices if expectation.count == 0 else 1,
    )

    if expectation.count > 0 and (not built_with_cuda or len(physical) != expectation.count):
        log_json("gpu-check", {**inventory.report(), "ok": False})
        if not built_with_cuda:
            why = "this TensorFlow build has no CUDA support (tf.test.is_built_with_cuda() is False)"
        elif len(physical) < expectation.count:
            why = (
                "check the NVIDIA driver (nvidia-smi), that the container runs with the NVIDIA runtime "
                "(docker run --gpus all), and CUDA_VISIBLE_DEVICES"
            )
        else:
            why = "the host has more GPUs than the job expects; fix the expected count or the instance type"
        raise GpuCheckError(
            f"GPU check failed: expected {expectation.count} GPU(s) ({expectation.source}) but TensorFlow "
            f"sees {len(physical)} visible{_visible_note()}; {why}. No training was started."
        )

    if expectation.count == 0:
        if physical:
            log("gpu-check-cpu", hidden_gpus=len(physical), reason=f"{ENV_EXPECTED_GPU_COUNT}=0")
        tf.config.set_visible_devices([], "GPU")
        if logical_cpu_devices > 1:
            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(
                cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(logical_cpu_devices)]
            )
    else:
        for device in physical:
            # Without growth TensorFlow maps all GPU memory up front, hiding real usage and
            # starving anything else (NCCL buffers, a profiler) on the same GPU.
            tf.config.experimental.set_memory_growth(device, True)
    return inventory


def _visible_note() -> str:
    shown = os.environ.get("CUDA_VISIBLE_DEVICES")
    return f" (CUDA_VISIBLE_DEVICES={shown})" if shown is not None else ""


def smoke_test(strategy: Any, inventory: DeviceInventory, *, all_reduce: bool = True) -> dict[str, Any]:
    """Runs a matmul on every local replica device and, unless ``all_reduce`` is False, an all-reduce.

    Serving passes ``all_reduce=False``: an endpoint runs no collective, so its check needs no
    NCCL. Every step is bounded in time (:func:`bounded`). Logs the ``[gpu-check]`` report and returns it.

    Raises:
        GpuCheckError: naming the device whose matmul failed or the all-reduce result.
    """
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    host_matrix = rng.standard_normal((MATMUL_SIZE, MATMUL_SIZE)).astype(np.float32)
    reference = host_matrix @ host_matrix
    devices = list(strategy.extended.worker_devices)
    def matmul_on(device: str) -> Any:
        with tf.device(device):
            matrix = tf.constant(host_matrix)
            return tf.matmul(matrix, matrix).numpy()

    for device in devices:
        try:
            product = bounded("matmul", device, lambda device=device: matmul_on(device))
        except tf.errors.OpError as err:
            raise GpuCheckError(
                f"GPU check failed: a {MATMUL_SIZE}x{MATMUL_SIZE} matmul on {device} raised: {err.message}"
            ) from err
        scale = float(np.abs(reference).max())
        error = float(np.abs(product - reference).max())
        if not np.isfinite(product).all() or error > MATMUL_RTOL * scale:
            raise GpuCheckError(
                f"GPU check failed: a {MATMUL_SIZE}x{MATMUL_SIZE} matmul on {device} is wrong "
                f"(max abs error {error:.3g} for values up to {scale:.3g}); the device is faulty."
            )

    @tf.function
    def count_replicas() -> Any:
        def replica_fn() -> Any:
            return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, tf.ones([]))

        return strategy.run(replica_fn)

    expected_total = strategy.num_replicas_in_sync
    results = (
        bounded(
            "all-reduce",
            f"{expected_total} replicas ({type(strategy).__name__})",
            lambda: [float(v.numpy()) for v in strategy.experimental_local_results(count_replicas())],
        )
        if all_reduce
        else [float(expected_total)]
    )
    if any(value != expected_total for value in results):
        raise GpuCheckError(
            f"GPU check failed: an all-reduce over {expected_total} replicas returned {results} instead of "
            f"{float(expected_total)} on every replica; the interconnect or collective library is broken."
        )
    report = {
        **inventory.report(),
        "ok": True,
        "matmul_devices": devices,
        "all_reduce_replicas": expected_total if all_reduce else None,
        "strategy": type(strategy).__name__,
    }
    log_json("gpu-check", report)
    return report


def choose_precision(mode: str, inventory: DeviceInventory, instance_type: str | None = None) -> str:
    """Keras dtype policy for the ``mixed_precision`` mode on the devices found (trainer.precision).

    The weakest GPU's compute capability decides; when TensorFlow does not report it, the GPU
    table's ``compute_capability`` for ``instance_type`` does.
    """
    capability = inventory.min_compute_capability()
    if capability is None and inventory.uses_gpus and instance_type:
        row = gpu_table.lookup(instance_type)
        if row is not None:
            major, minor = row.compute_capability.split(".")
            capability = (int(major), int(minor))
    return precision.resolve(mode, inventory.uses_gpus, capability)


def driver_check(expectation: GpuExpectation, driver: Any = None) -> dict[str, Any]:
    """The check without TensorFlow: visible count, per-device facts by UUID, a memory round trip.

    With 0 GPUs expected nothing is loaded (no TensorFlow, no CUDA). ``driver`` stands in for
    :class:`trainer.gpu_driver.CudaDriver` (tests pass a fake); default: ``libcuda.so.1``.

    Raises:
        GpuCheckError: no driver, a visible count other than the expected one, a device whose
            round trip fails, or a step that does not finish in time (one line naming it).
    """
    report: dict[str, Any] = {"expected": expectation.count, "expected_source": expectation.source, "tensorflow": False}
    if expectation.count == 0:
        report.update(ok=True, gpus=[])
        log_json("gpu-check", report)
        return report
    driver = driver if driver is not None else gpu_driver.CudaDriver.load()
    if driver is None:
        raise GpuCheckError(
            f"GPU check failed: expected {expectation.count} GPU(s) ({expectation.source}) but there is no NVIDIA "
            "driver (libcuda.so.1 not found); run the container with the NVIDIA runtime (docker run --gpus all)."
        )
    try:
        report["cuda_driver_api"] = bounded("cuInit", "the CUDA driver", driver.init)
        devices = bounded("device-list", "the CUDA driver", lambda: gpu_driver.list_visible(driver))
    except gpu_driver.DriverError as err:
        raise GpuCheckError(f"GPU check failed: the CUDA driver refused to start: {err}.") from err
    report["found"] = len(devices)
    report["gpus"] = [asdict(device) for device in devices]
    if len(devices) != expectation.count:
        log_json("gpu-check", {**report, "ok": False})
        raise GpuCheckError(
            f"GPU check failed: expected {expectation.count} GPU(s) ({expectation.source}) but the CUDA driver shows "
            f"{len(devices)} visible device(s){_visible_note()}; the expected count is of visible devices (a MIG "
            "slice counts as one): fix CUDA_VISIBLE_DEVICES, the expected count or the instance type."
        )
    for device in devices:
        try:
            bounded("memcpy-round-trip", device.label, lambda device=device: driver.round_trip(device.ordinal))
        except gpu_driver.DriverError as err:
            log_json("gpu-check", {**report, "ok": False, "failed_device": device.uuid})
            raise GpuCheckError(
                f"GPU check failed: a {gpu_driver.ROUND_TRIP_BYTES >> 20} MiB host-device-host copy on {device.label} "
                f"failed: {err}; the device is faulty."
            ) from err
    report["ok"] = True
    log_json("gpu-check", report)
    return report


def main(argv: list[str] | None = None) -> int:
    """``python -m trainer.gpu_check RESULT_FILE [--network]``: the check for every process but the built-in trainer.

    Runs :func:`driver_check` (no TensorFlow) before a user's script or a processor, or from an
    image-level wrapper when a job replaces the entrypoint; with ``--network`` (training, whose
    hosts may talk over NCCL) then :func:`trainer.network_check.verify`. Writes ``{"ok", "gpus",
    "report"}`` or ``{"ok": false, "error", "exit_code"}`` to RESULT_FILE (any exception, named or not:
    only a process killed by a signal leaves no result); exits 0 or the error's exit code.
    """
    import json
    import sys
    import traceback
    from pathlib import Path

    from trainer.contract import environment
    from trainer.contract.errors import TrainerError

    args = sys.argv[1:] if argv is None else argv
    result_file = Path(args[0])
    try:
        env = environment.load_environment()
        expectation = resolve_expectation(env.expected_gpu_count, None, env.instance_type)
        report = driver_check(expectation)
        if "--network" in args[1:]:
            from trainer import network_check

            report["network"] = network_check.verify(env.instance_type, env.cluster.num_workers, uses_gpus=expectation.count > 0)
    except TrainerError as err:
        result_file.write_text(json.dumps({"ok": False, "error": str(err), "exit_code": err.exit_code}), encoding="utf-8")
        return err.exit_code
    except Exception as err:  # noqa: BLE001 - the parent reports it; only a crash may leave no result
        traceback.print_exc()
        error = f"Unexpected {type(err).__name__} in the GPU check: {err}"
        result_file.write_text(json.dumps({"ok": False, "error": error, "exit_code": 1}), encoding="utf-8")
        return 1
    result_file.write_text(json.dumps({"ok": True, "gpus": expectation.count, "report": report}, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
