"""The GPUs as the NVIDIA driver shows them, without TensorFlow: CUDA driver API (ctypes) and NVML.

What a process on this host can use is what the CUDA driver enumerates: it honours
``CUDA_VISIBLE_DEVICES`` (indices, ``GPU-`` or ``MIG-`` UUIDs), so the expected count is compared
with the *visible* devices, and ordinal ``i`` here is TensorFlow's ``/GPU:i``. NVML, by contrast,
lists every physical GPU on the host whatever ``CUDA_VISIBLE_DEVICES`` says, so it is asked only
per device, by UUID (a MIG slice's memory is the slice's, not its parent GPU's).

A device "works" when a context can be created on it and a buffer survives a host -> device ->
host copy (``cuMemAlloc`` / ``cuMemcpyHtoD`` / ``cuMemcpyDtoH``): that needs the driver, the
device and its memory, and no TensorFlow, so a user's script starts on a device proven to work
without paying TensorFlow's import twice.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Any

ROUND_TRIP_BYTES = 1 << 20
_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76


class DriverError(RuntimeError):
    """A CUDA driver call returned an error; the message names the call and the CUresult."""


@dataclass(frozen=True)
class VisibleDevice:
    """One device this process can use, as the CUDA driver enumerates it.

    Attributes:
        ordinal: CUDA ordinal among the visible devices (TensorFlow's ``/GPU:<ordinal>``).
        uuid: ``GPU-...`` or, for a MIG slice named in ``CUDA_VISIBLE_DEVICES``, ``MIG-...``.
        name: Device name (``NVIDIA H100 80GB HBM3``).
        compute_capability: ``major.minor``.
        memory_total_mib: Total memory of the device (the slice, for MIG), from NVML by UUID
            where NVML answers, else ``cuDeviceTotalMem``.
    """

    ordinal: int
    uuid: str
    name: str
    compute_capability: str
    memory_total_mib: int

    @property
    def label(self) -> str:
        """How messages name the device: ``GPU 1 (GPU-8f3c...)``."""
        return f"GPU {self.ordinal} ({self.uuid})"


def format_uuid(raw: bytes) -> str:
    """``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`` from the driver's 16 bytes."""
    text = raw.hex()
    return f"GPU-{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:32]}"


def visible_uuids(cuda_visible_devices: str | None, driver_uuids: list[str]) -> list[str]:
    """The UUID of each visible ordinal: as named in ``CUDA_VISIBLE_DEVICES`` when it names UUIDs.

    A MIG slice enumerates with its parent GPU's UUID bytes in older drivers, so a ``MIG-`` name
    given in ``CUDA_VISIBLE_DEVICES`` is the only reliable one; indices keep the driver's UUIDs.
    """
    if not cuda_visible_devices:
        return driver_uuids
    named = [entry.strip() for entry in cuda_visible_devices.split(",") if entry.strip()]
    if len(named) == len(driver_uuids) and all(entry.startswith(("GPU-", "MIG-")) for entry in named):
        return named
    return driver_uuids


class CudaDriver:
    """The few CUDA driver API calls the check needs, through ``libcuda.so.1``."""

    def __init__(self, library: Any) -> None:
        self._lib = library

    @classmethod
    def load(cls) -> CudaDriver | None:
        """The installed driver, or ``None`` when ``libcuda.so.1`` is absent (no NVIDIA driver)."""
        try:
            return cls(ctypes.CDLL("libcuda.so.1"))
        except OSError:
            return None

    def _call(self, name: str, *args: Any) -> None:
        result = getattr(self._lib, name)(*args)
        if result != 0:
            error = ctypes.c_char_p()
            self._lib.cuGetErrorString(result, ctypes.byref(error))
            text = error.value.decode() if error.value else "unknown error"
            raise DriverError(f"{name} returned CUresult {result} ({text})")

    def init(self) -> str:
        """``cuInit(0)``; returns the CUDA version the driver supports (``12.4``)."""
        self._call("cuInit", 0)
        version = ctypes.c_int(0)
        self._call("cuDriverGetVersion", ctypes.byref(version))
        return f"{version.value // 1000}.{(version.value % 1000) // 10}"

    def device_count(self) -> int:
        """Devices visible to this process (after ``CUDA_VISIBLE_DEVICES``)."""
        count = ctypes.c_int(0)
        self._call("cuDeviceGetCount", ctypes.byref(count))
        return count.value

    def describe(self, ordinal: int) -> tuple[str, str, str, int]:
        """``(uuid, name, compute capability, total MiB)`` of the visible device ``ordinal``."""
        device = ctypes.c_int(0)
        self._call("cuDeviceGet", ctypes.byref(device), ordinal)
        name = ctypes.create_string_buffer(256)
        self._call("cuDeviceGetName", name, len(name), device)
        uuid = ctypes.create_string_buffer(16)
        self._call("cuDeviceGetUuid", uuid, device)
        major, minor = ctypes.c_int(0), ctypes.c_int(0)
        self._call("cuDeviceGetAttribute", ctypes.byref(major), _CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device)
        self._call("cuDeviceGetAttribute", ctypes.byref(minor), _CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device)
        total = ctypes.c_size_t(0)
        self._call("cuDeviceTotalMem_v2", ctypes.byref(total), device)
        return format_uuid(uuid.raw), name.value.decode(), f"{major.value}.{minor.value}", total.value // 2**20

    def round_trip(self, ordinal: int, size: int = ROUND_TRIP_BYTES) -> None:
        """A context on the device, then host -> device -> host of ``size`` bytes; raises on a mismatch."""
        device = ctypes.c_int(0)
        self._call("cuDeviceGet", ctypes.byref(device), ordinal)
        context = ctypes.c_void_p()
        self._call("cuCtxCreate_v2", ctypes.byref(context), 0, device)
        try:
            pattern = bytes(range(256)) * (size // 256)
            source = ctypes.create_string_buffer(pattern, len(pattern))
            back = ctypes.create_string_buffer(len(pattern))
            pointer = ctypes.c_uint64(0)
            self._call("cuMemAlloc_v2", ctypes.byref(pointer), ctypes.c_size_t(len(pattern)))
            try:
                self._call("cuMemcpyHtoD_v2", pointer, source, ctypes.c_size_t(len(pattern)))
                self._call("cuMemcpyDtoH_v2", back, pointer, ctypes.c_size_t(len(pattern)))
            finally:
                self._call("cuMemFree_v2", pointer)
            if back.raw != pattern:
                wrong = sum(a != b for a, b in zip(back.raw, pattern, strict=True))
                raise DriverError(f"{wrong} of {len(pattern)} bytes came back changed from device memory")
        finally:
            self._lib.cuCtxDestroy_v2(context)


def nvml_memory_by_uuid(uuids: list[str]) -> tuple[dict[str, int], str | None]:
    """Total MiB per UUID and the driver version from NVML; empty where NVML does not answer."""
    try:
        import pynvml
    except ImportError:
        return {}, None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return {}, None
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        memory = {}
        for uuid in uuids:
            try:
                handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
                memory[uuid] = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total) // 2**20
            except pynvml.NVMLError:
                continue
        return memory, driver if isinstance(driver, str) else driver.decode()
    finally:
        pynvml.nvmlShutdown()


def list_visible(driver: CudaDriver) -> list[VisibleDevice]:
    """Every visible device, memory read per device by UUID (NVML, else the CUDA driver)."""
    described = [driver.describe(ordinal) for ordinal in range(driver.device_count())]
    uuids = visible_uuids(os.environ.get("CUDA_VISIBLE_DEVICES"), [uuid for uuid, *_ in described])
    nvml_memory, _ = nvml_memory_by_uuid(uuids)
    return [
        VisibleDevice(ordinal, uuid, name, capability, nvml_memory.get(uuid, total))
        for ordinal, (uuid, (_, name, capability, total)) in enumerate(zip(uuids, described, strict=True))
    ]
