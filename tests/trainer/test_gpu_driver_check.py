"""The TF-free GPU check (``python -m trainer.gpu_check``), its time bounds and the visible devices.

No GPU here: a fake CUDA driver stands in for ``libcuda.so.1`` (same methods as
trainer.gpu_driver.CudaDriver), and the time bound is shown on stubs that sleep.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.trainer.helpers import TRAINING_IMAGE, trainer_env
from trainer import gpu_check, gpu_driver
from trainer.contract import environment
from trainer.contract.errors import ConfigError, GpuCheckError, TrainerError
from trainer.gpu_check import GpuExpectation, bounded, driver_check
from trainer.user_code import runner as script_runner

UUIDS = ["GPU-00112233-4455-6677-8899-aabbccddeeff", "GPU-ffeeddcc-bbaa-9988-7766-554433221100"]


class FakeDriver:
    """What CudaDriver answers on a host with these visible devices; ``hang``/``broken``: ordinals."""

    def __init__(self, uuids=UUIDS, *, hang=(), broken=(), hang_seconds=30.0):
        self.uuids, self.hang, self.broken, self.hang_seconds = list(uuids), set(hang), set(broken), hang_seconds
        self.round_trips: list[int] = []

    def init(self) -> str:
        return "12.4"

    def device_count(self) -> int:
        return len(self.uuids)

    def describe(self, ordinal):
        return self.uuids[ordinal], "NVIDIA H100 80GB HBM3", "9.0", 81559

    def round_trip(self, ordinal, size=gpu_driver.ROUND_TRIP_BYTES):
        if ordinal in self.hang:
            time.sleep(self.hang_seconds)
        if ordinal in self.broken:
            raise gpu_driver.DriverError("cuMemcpyDtoH_v2 returned CUresult 700 (an illegal memory access)")
        self.round_trips.append(ordinal)


@pytest.fixture(autouse=True)
def _no_nvml(monkeypatch):
    monkeypatch.setattr(gpu_driver, "nvml_memory_by_uuid", lambda uuids: ({}, None))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv(gpu_check.ENV_CHECK_TIMEOUT, raising=False)


# --- time bounds ---------------------------------------------------------------------------------


def test_a_device_call_that_hangs_ends_within_its_timeout_with_one_line_naming_check_and_device():
    started = time.monotonic()
    with pytest.raises(GpuCheckError) as raised:
        bounded("matmul", "/GPU:3", lambda: time.sleep(30), timeout=0.5)
    assert time.monotonic() - started < 3
    message = str(raised.value)
    assert "\n" not in message
    assert message.startswith("GPU check 'matmul' on /GPU:3 did not finish within 0.5s (GPU_CHECK_TIMEOUT_SECONDS)")


def test_a_bounded_call_returns_its_value_and_raises_its_own_error():
    assert bounded("device-list", "all GPUs", lambda: 42, timeout=5) == 42
    with pytest.raises(ZeroDivisionError):
        bounded("matmul", "/GPU:0", lambda: 1 / 0, timeout=5)


def test_a_hung_round_trip_on_the_second_gpu_fails_the_driver_check_in_time(monkeypatch):
    monkeypatch.setenv(gpu_check.ENV_CHECK_TIMEOUT, "0.5")
    started = time.monotonic()
    with pytest.raises(GpuCheckError, match=rf"'memcpy-round-trip' on GPU 1 \({UUIDS[1]}\) did not finish within 0.5s"):
        driver_check(GpuExpectation(2, "test"), FakeDriver(hang={1}))
    assert time.monotonic() - started < 3


@pytest.mark.parametrize("raw", ["0", "-3", "soon", "inf"])
def test_a_bad_timeout_setting_is_named(monkeypatch, raw):
    monkeypatch.setenv(gpu_check.ENV_CHECK_TIMEOUT, raw)
    with pytest.raises(GpuCheckError, match=f"GPU_CHECK_TIMEOUT_SECONDS must be a positive number of seconds, got '{raw}'"):
        environment.gpu_check_timeout_seconds()


# --- the TF-free check -----------------------------------------------------------------------------


def test_every_visible_device_gets_a_round_trip_and_is_reported_by_uuid():
    driver = FakeDriver()
    report = driver_check(GpuExpectation(2, "instance type p5.48xlarge"), driver)
    assert report["ok"] is True and report["tensorflow"] is False and report["found"] == 2
    assert [g["uuid"] for g in report["gpus"]] == UUIDS
    assert driver.round_trips == [0, 1]


def test_the_expected_count_is_of_visible_devices(monkeypatch):
    # A p4d with CUDA_VISIBLE_DEVICES=0,1: 2 visible, 8 expected from the table.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    with pytest.raises(GpuCheckError) as raised:
        driver_check(GpuExpectation(8, "instance type p4d.24xlarge in gpu_instances.json"), FakeDriver())
    assert "expected 8 GPU(s) (instance type p4d.24xlarge in gpu_instances.json) but the CUDA driver shows 2 " \
        "visible device(s) (CUDA_VISIBLE_DEVICES=0,1)" in str(raised.value)  # fmt: skip


def test_a_broken_device_is_named():
    with pytest.raises(GpuCheckError, match=rf"copy on GPU 0 \({UUIDS[0]}\) failed: cuMemcpyDtoH_v2 returned CUresult 700"):
        driver_check(GpuExpectation(2, "test"), FakeDriver(broken={0}))


def test_mig_slices_named_in_cuda_visible_devices_keep_their_uuids_and_their_own_memory(monkeypatch):
    mig = ["MIG-1f2e3d4c-0000-1111-2222-333344445555", "MIG-5a6b7c8d-0000-1111-2222-333344445555"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", ",".join(mig))
    # NVML answers per UUID: a 1g.10gb slice has 9984 MiB, not its parent's 81559.
    asked = []
    monkeypatch.setattr(gpu_driver, "nvml_memory_by_uuid", lambda uuids: (asked.extend(uuids) or {mig[1]: 9984}, "550.90"))
    # Older drivers report the parent GPU's UUID bytes for every slice.
    devices = gpu_driver.list_visible(FakeDriver([UUIDS[0], UUIDS[0]]))
    assert [d.uuid for d in devices] == mig and asked == mig
    assert [d.memory_total_mib for d in devices] == [81559, 9984]  # NVML where it answered, else the driver


def test_visible_uuids_keep_the_drivers_uuids_for_index_lists():
    assert gpu_driver.visible_uuids("1,0", UUIDS) == UUIDS
    assert gpu_driver.visible_uuids(None, UUIDS) == UUIDS
    assert gpu_driver.format_uuid(bytes(range(16))) == "GPU-00010203-0405-0607-0809-0a0b0c0d0e0f"


def test_no_driver_with_gpus_expected_fails_saying_how_to_run_the_container(monkeypatch):
    monkeypatch.setattr(gpu_driver.CudaDriver, "load", classmethod(lambda cls: None))
    with pytest.raises(GpuCheckError, match=r"expected 1 GPU\(s\) \(test\) but there is no NVIDIA driver"):
        driver_check(GpuExpectation(1, "test"))


def test_the_check_process_imports_no_tensorflow_and_writes_its_result(tmp_path):
    probe = (
        "import sys; from trainer import gpu_check; code = gpu_check.main([sys.argv[1]]); "
        "print('TF', 'tensorflow' in sys.modules, 'numpy' in sys.modules); raise SystemExit(code)"
    )
    result_file = tmp_path / "result.json"
    for expected, code, imported in (("0", 0, "TF False False"), ("1", 3, "TF False False")):
        completed = subprocess.run(
            [sys.executable, "-c", probe, str(result_file)], cwd=TRAINING_IMAGE, timeout=60, capture_output=True,
            text=True, env={**trainer_env(tmp_path, EXPECTED_GPU_COUNT=expected), "LD_LIBRARY_PATH": str(tmp_path)},
            check=False,
        )  # fmt: skip
        assert completed.returncode == code, completed.stdout + completed.stderr
        assert imported in completed.stdout
        result = json.loads(result_file.read_text())
        assert result["ok"] is (code == 0)
        if code == 0:
            assert result["gpus"] == 0 and result["report"]["tensorflow"] is False
        else:
            assert result["exit_code"] == 3 and "GPU check failed: expected 1 GPU(s)" in result["error"]


# --- the check's result, as the guard and script mode read it ------------------------------------


@pytest.mark.parametrize(
    ("failure", "exit_code", "error_start"),
    [
        (ConfigError("Environment variable EXPECTED_GPU_COUNT must be an integer."), 2, "Environment variable EXPECTED_GPU_COUNT"),
        (GpuCheckError("GPU check failed: expected 1 GPU(s)."), 3, "GPU check failed: expected 1 GPU(s)."),
        (KeyError("current_host"), 1, "Unexpected KeyError in the GPU check: 'current_host'"),
    ],
    ids=["config", "gpu", "unexpected"],
)
def test_every_failure_of_the_check_process_leaves_a_result_with_its_exit_code(tmp_path, monkeypatch, failure, exit_code, error_start):
    def fail(env=None):
        raise failure

    monkeypatch.setattr(environment, "load_environment", fail)
    result_file = tmp_path / "gpu-check.json"
    assert gpu_check.main([str(result_file)]) == exit_code
    result = json.loads(result_file.read_text())
    assert result["ok"] is False and result["exit_code"] == exit_code and result["error"].startswith(error_start)


class ResultWritingSupervisor:
    """Runs no process: writes ``result`` (if any) where the check would, and returns ``status``."""

    stop_requested_at = None

    def __init__(self, result, status):
        self.result, self.status = result, status

    def run(self, command, *, env, cwd):
        if self.result is not None:
            Path(command[3]).write_text(json.dumps(self.result))
        return self.status


@pytest.mark.parametrize(
    ("exit_code", "error_class"),
    [(2, ConfigError), (3, GpuCheckError), (1, TrainerError)],
    ids=["config-2", "gpu-3", "unexpected-1"],
)
def test_the_parent_raises_the_error_of_the_childs_exit_code_with_its_message(tmp_path, exit_code, error_class):
    supervisor = ResultWritingSupervisor({"ok": False, "error": "It said so.", "exit_code": exit_code}, exit_code)
    with pytest.raises(TrainerError, match=r"^It said so\. The training script was not started\.$") as raised:
        script_runner.verify_gpus(supervisor, None, tmp_path)
    assert type(raised.value) is error_class and raised.value.exit_code == exit_code


@pytest.mark.parametrize(("status", "ended"), [(-11, "was killed by SIGSEGV"), (1, "ended with status 1")])
def test_only_a_check_without_a_result_is_called_a_crash_in_the_driver(tmp_path, status, ended):
    with pytest.raises(GpuCheckError, match=rf"^GPU check failed: the check process {ended} without a result \(a crash in the driver"):
        script_runner.verify_gpus(ResultWritingSupervisor(None, status), None, tmp_path)


# --- serving's check -----------------------------------------------------------------------------


def test_the_smoke_test_without_all_reduce_runs_no_collective():
    class NoCollectives:
        num_replicas_in_sync = 2
        extended = SimpleNamespace(worker_devices=("/cpu:0",))

        def run(self, *args, **kwargs):
            raise AssertionError("serving's check ran a collective")

    inventory = gpu_check.DeviceInventory(expected=GpuExpectation(0, "test"), found=0, built_with_cuda=False)
    report = gpu_check.smoke_test(NoCollectives(), inventory, all_reduce=False)
    assert report["ok"] is True and report["all_reduce_replicas"] is None and report["matmul_devices"] == ["/cpu:0"]


def test_serving_asks_for_no_all_reduce(monkeypatch):
    from trainer.serve import server

    calls = []
    inventory = gpu_check.DeviceInventory(expected=GpuExpectation(0, "test"), found=0, built_with_cuda=False)
    monkeypatch.setattr(server, "inspect_devices", lambda expectation, logical_cpu_devices: inventory)
    monkeypatch.setattr(server, "smoke_test", lambda strategy, inv, **kwargs: calls.append(kwargs) or {"ok": True})
    server.verify_gpus(SimpleNamespace(expected_gpu_count=0, instance_type=None, replicas=1))
    assert calls == [{"all_reduce": False}]


# --- the ctypes layer against a fake libcuda ------------------------------------------------------


class FakeLibcuda:
    """The libcuda entry points CudaDriver calls, writing results through the ctypes arguments."""

    def __init__(self, devices=2, corrupt=False, fail=None):
        self.devices, self.corrupt, self.fail = devices, corrupt, fail
        self.memory: dict[int, bytes] = {}
        self.contexts = 0

    def __getattr__(self, name):
        raise AttributeError(f"CudaDriver called {name}, which the fake does not know")

    def _result(self, name):
        return 2 if name == self.fail else 0

    def cuInit(self, flags):  # noqa: N802 - the C names
        return self._result("cuInit")

    def cuDriverGetVersion(self, version):  # noqa: N802
        version._obj.value = 12040
        return 0

    def cuGetErrorString(self, result, text):  # noqa: N802
        text._obj.value = b"out of memory"
        return 0

    def cuDeviceGetCount(self, count):  # noqa: N802
        count._obj.value = self.devices
        return 0

    def cuDeviceGet(self, device, ordinal):  # noqa: N802
        device._obj.value = ordinal
        return 0

    def cuDeviceGetName(self, buffer, length, device):  # noqa: N802
        import ctypes

        ctypes.memmove(buffer, b"NVIDIA H100 80GB HBM3\0", 22)
        return 0

    def cuDeviceGetUuid(self, buffer, device):  # noqa: N802
        import ctypes

        ctypes.memmove(buffer, bytes([device.value]) * 16, 16)
        return 0

    def cuDeviceGetAttribute(self, value, attribute, device):  # noqa: N802
        value._obj.value = {75: 9, 76: 0}[attribute]
        return 0

    def cuDeviceTotalMem_v2(self, total, device):  # noqa: N802
        total._obj.value = 81559 * 2**20
        return 0

    def cuCtxCreate_v2(self, context, flags, device):  # noqa: N802
        self.contexts += 1
        context._obj.value = 1
        return 0

    def cuCtxDestroy_v2(self, context):  # noqa: N802
        self.contexts -= 1
        return 0

    def cuMemAlloc_v2(self, pointer, size):  # noqa: N802
        pointer._obj.value = 4096
        return self._result("cuMemAlloc_v2")

    def cuMemcpyHtoD_v2(self, pointer, source, size):  # noqa: N802
        data = bytearray(source.raw[: size.value])
        if self.corrupt:
            data[7] ^= 0xFF
        self.memory[pointer.value] = bytes(data)
        return 0

    def cuMemcpyDtoH_v2(self, target, pointer, size):  # noqa: N802
        import ctypes

        ctypes.memmove(target, self.memory[pointer.value], size.value)
        return 0

    def cuMemFree_v2(self, pointer):  # noqa: N802
        self.memory.pop(pointer.value)
        return 0


def test_the_ctypes_layer_reads_devices_and_round_trips_memory():
    library = FakeLibcuda()
    driver = gpu_driver.CudaDriver(library)
    assert driver.init() == "12.4" and driver.device_count() == 2
    assert driver.describe(1) == ("GPU-01010101-0101-0101-0101-010101010101", "NVIDIA H100 80GB HBM3", "9.0", 81559)
    driver.round_trip(1)
    assert library.memory == {} and library.contexts == 0  # freed and destroyed


def test_the_ctypes_layer_names_the_failing_call_and_a_corrupted_copy():
    with pytest.raises(gpu_driver.DriverError, match=r"cuMemAlloc_v2 returned CUresult 2 \(out of memory\)"):
        gpu_driver.CudaDriver(FakeLibcuda(fail="cuMemAlloc_v2")).round_trip(0)
    library = FakeLibcuda(corrupt=True)
    with pytest.raises(gpu_driver.DriverError, match="1 of 1048576 bytes came back changed"):
        gpu_driver.CudaDriver(library).round_trip(0)
    assert library.contexts == 0
