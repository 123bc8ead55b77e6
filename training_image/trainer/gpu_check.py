"""GPU verification before any training: the GPUs must be the ones the job pays for, and work.

Unlike the SageMaker toolkit, which logs "No GPUs detected" and carries on, a mismatch here is a
failure: a p4d job silently training on CPU costs as much as a working one. The check runs in two
halves because TensorFlow allows device configuration only before its runtime starts and
MultiWorkerMirroredStrategy must be created before any op runs:

1. :func:`inspect_devices` (before the strategy): resolve the expected count, compare it with the
   physical GPUs, configure memory growth (or hide the GPUs when 0 are expected).
2. :func:`smoke_test` (after the strategy): a matmul on every replica device and an all-reduce
   across all replicas, then one ``[gpu-check]`` line with the whole report.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from trainer import gpu_table, precision
from trainer.environment import ENV_EXPECTED_GPU_COUNT, ENV_INSTANCE_TYPE
from trainer.errors import GpuCheckError
from trainer.logs import log, log_json

MATMUL_SIZE = 256
# TF32 on Ampere and later rounds matmul inputs to 10 mantissa bits; a broken device is off by far more.
MATMUL_RTOL = 2e-2


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
        memory_total_mib: Total memory reported by nvidia-smi, when it is available.
    """

    index: int
    name: str
    compute_capability: str | None
    memory_total_mib: int | None


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


def _nvidia_smi() -> tuple[dict[int, int], str | None]:
    """Memory per GPU index (MiB) and the driver version, or empty when nvidia-smi is absent."""
    executable = shutil.which("nvidia-smi")
    if executable is None:
        return {}, None
    try:
        completed = subprocess.run(
            [executable, "--query-gpu=index,memory.total,driver_version", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
    except (OSError, subprocess.SubprocessError) as err:
        log("gpu-check-warning", nvidia_smi_failed=repr(str(err)))
        return {}, None
    memory: dict[int, int] = {}
    driver = None
    for line in completed.stdout.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3 and parts[0].isdigit() and parts[1].isdigit():
            memory[int(parts[0])] = int(parts[1])
            driver = parts[2]
    return memory, driver


def _cuda_driver_api_version() -> str | None:
    """CUDA version the installed driver supports, straight from libcuda (None without a driver)."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    version = ctypes.c_int(0)
    if libcuda.cuDriverGetVersion(ctypes.byref(version)) != 0:
        return None
    return f"{version.value // 1000}.{(version.value % 1000) // 10}"


def inspect_devices(expectation: GpuExpectation, logical_cpu_devices: int = 1) -> DeviceInventory:
    """Compares expected and visible GPUs and configures devices; must run before any TF op.

    Raises:
        GpuCheckError: naming the expected and found counts when they differ, or when GPUs are
            expected from a TensorFlow build without CUDA.
    """
    import tensorflow as tf

    physical = tf.config.list_physical_devices("GPU")
    build = dict(tf.sysconfig.get_build_info())
    built_with_cuda = bool(tf.test.is_built_with_cuda())
    memory, driver = _nvidia_smi() if physical else ({}, None)
    gpus = []
    for index, device in enumerate(physical):
        details = tf.config.experimental.get_device_details(device)
        capability = details.get("compute_capability")
        gpus.append(
            GpuInfo(
                index=index,
                name=str(details.get("device_name", device.name)),
                compute_capability=f"{capability[0]}.{capability[1]}" if capability else None,
                memory_total_mib=memory.get(index),
            )
        )
    inventory = DeviceInventory(
        expected=expectation,
        found=len(physical),
        built_with_cuda=built_with_cuda,
        gpus=tuple(gpus),
        driver_version=driver,
        cuda_driver_api=_cuda_driver_api_version() if physical else None,
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
            f"sees {len(physical)}; {why}. No training was started."
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


def smoke_test(strategy: Any, inventory: DeviceInventory) -> dict[str, Any]:
    """Runs a matmul on every local replica device and an all-reduce across all replicas.

    Logs the full ``[gpu-check]`` report and returns it.

    Raises:
        GpuCheckError: naming the device whose matmul failed or the all-reduce result.
    """
    import tensorflow as tf

    rng = np.random.default_rng(0)
    host_matrix = rng.standard_normal((MATMUL_SIZE, MATMUL_SIZE)).astype(np.float32)
    reference = host_matrix @ host_matrix
    devices = list(strategy.extended.worker_devices)
    for device in devices:
        try:
            with tf.device(device):
                matrix = tf.constant(host_matrix)
                product = tf.matmul(matrix, matrix).numpy()
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
    results = [float(v.numpy()) for v in strategy.experimental_local_results(count_replicas())]
    if any(value != expected_total for value in results):
        raise GpuCheckError(
            f"GPU check failed: an all-reduce over {expected_total} replicas returned {results} instead of "
            f"{float(expected_total)} on every replica; the interconnect or collective library is broken."
        )
    report = {
        **inventory.report(),
        "ok": True,
        "matmul_devices": devices,
        "all_reduce_replicas": expected_total,
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


def main(argv: list[str] | None = None) -> int:
    """``python -m trainer.gpu_check RESULT_FILE``: the whole check in a process of its own.

    Script mode runs it before the user's script so that the check's TensorFlow runtime (and
    its GPU memory) is gone when the script starts. Writes ``{"ok", "gpus", "report"}`` or
    ``{"ok": false, "error", "exit_code"}`` to RESULT_FILE; exits 0 or the error's exit code.
    """
    import json
    import sys
    from pathlib import Path

    from trainer import distribute, environment
    from trainer.errors import TrainerError

    result_file = Path((sys.argv[1:] if argv is None else argv)[0])
    try:
        env = environment.load_environment()
        expectation = resolve_expectation(env.expected_gpu_count, None, env.instance_type)
        inventory = inspect_devices(expectation)
        this_host = environment.Cluster(hosts=("localhost",), current_host="localhost", worker_port=1, source="this host")
        report = smoke_test(distribute.create_strategy(this_host, inventory), inventory)
    except TrainerError as err:
        result_file.write_text(json.dumps({"ok": False, "error": str(err), "exit_code": err.exit_code}), encoding="utf-8")
        return err.exit_code
    result_file.write_text(json.dumps({"ok": True, "gpus": expectation.count, "report": report}, default=str), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
