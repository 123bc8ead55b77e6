"""The network check (issue #43): on an EFA instance type NCCL's OFI plugin must load and libfabric see EFA.

Run against stand-ins compiled here (tests/trainer/stub_plugin.py): a ``libnccl-net.so`` whose
NEEDED libraries and exported API are known, its tuner, and ``fi_info`` scripts. The real plugin
is checked the same way by the image's build (build_check.py --with-efa 1) and at every job's start.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import time
from pathlib import Path

import pytest

from tests.trainer import stub_plugin
from trainer import gpu_check, network_check
from trainer.contract import environment
from trainer.contract.errors import GpuCheckError, NetworkCheckError
from trainer.user_code import runner as script_runner

EFA_TYPE = "ml.p4d.24xlarge"


@pytest.fixture(scope="module")
def stubs(tmp_path_factory: pytest.TempPathFactory) -> stub_plugin.StubPlugins:
    return stub_plugin.build(tmp_path_factory.mktemp("stub-plugins"))


@pytest.fixture(autouse=True)
def efa_devices(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A /dev/infiniband with the 4 uverbs devices of a healthy p4d.24xlarge (the GPU table's efa_interfaces)."""
    devices = tmp_path / "infiniband"
    devices.mkdir()
    for index in range(4):
        (devices / f"uverbs{index}").touch()
    (devices / "rdma_cm").touch()  # not an EFA interface
    monkeypatch.setattr(network_check, "INFINIBAND_DIR", str(devices))
    return devices


def _env(stubs: stub_plugin.StubPlugins, **overrides: str | None) -> dict[str, str]:
    """What a process of the image would have: the plugin's names and a library path that finds them."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LD_LIBRARY_PATH": stubs.library_path(),
        "NCCL_NET_PLUGIN": "libnccl-net.so",
        "NCCL_TUNER_PLUGIN": "libnccl-ofi-tuner.so",
    }
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def _verify(stubs: stub_plugin.StubPlugins, monkeypatch: pytest.MonkeyPatch, fi_info: Path, **env: str | None) -> dict:
    monkeypatch.setattr(network_check, "FI_INFO", str(fi_info))
    return network_check.verify(EFA_TYPE, 2, uses_gpus=True, environ=_env(stubs, **env), timeout=20)


def test_nccl_opens_plugin_names_as_nccl_2_27_does():
    assert network_check.plugin_names("libnccl-net", None) == ["libnccl-net.so"]
    assert network_check.plugin_names("libnccl-net", "libnccl-net.so") == ["libnccl-net.so"]
    # A short name: as given, then libnccl-net-<name>.so (what NCCL_NET_PLUGIN=ofi finds: not 1.14's file).
    assert network_check.plugin_names("libnccl-net", "ofi") == ["ofi", "libnccl-net-ofi.so"]
    assert network_check.plugin_names("libnccl-tuner", "libnccl-ofi-tuner.so") == ["libnccl-ofi-tuner.so"]
    path = "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-net.so"
    assert network_check.plugin_names("libnccl-net", path) == [path]


def test_the_stub_plugin_needs_exactly_the_libraries_it_was_linked_with(stubs):
    assert stub_plugin.needed_libraries(stubs.plugin_dir / "libnccl-net.so") == [*stub_plugin.NET_NEEDED, "libc.so.6"]


def test_plugin_present_and_efa_provider_seen_pass_with_one_line(stubs, monkeypatch, capsys):
    report = _verify(stubs, monkeypatch, stubs.fi_info_efa)
    assert report["ok"] and report["expected"] == "efa"
    net, tuner = report["plugins"]
    assert net["loaded"] == "libnccl-net.so" and net["symbol"] == "ncclNetPlugin_v9"
    assert net["path"] == str((stubs.plugin_dir / "libnccl-net.so").resolve())
    assert tuner["kind"] == "tuner" and tuner["symbol"] == "ncclTunerPlugin_v3"
    assert report["efa_provider"] == {"ok": True, "detail": "domains rdmap16s27-rdm"}
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[network-check]")]
    assert len(lines) == 1 and json.loads(lines[0].split(" ", 1)[1])["ok"] is True


def test_every_efa_interface_of_the_type_must_reach_the_container(stubs, monkeypatch, efa_devices):
    assert network_check.efa_device_count() == 4
    assert _verify(stubs, monkeypatch, stubs.fi_info_efa)["efa_devices"] == {"expected": 4, "seen": 4}
    for index in range(1, 4):
        (efa_devices / f"uverbs{index}").unlink()
    with pytest.raises(NetworkCheckError) as raised:
        _verify(stubs, monkeypatch, stubs.fi_info_efa)
    message = str(raised.value)
    assert "\n" not in message and "but p4d.24xlarge has 4 EFA interfaces, the container sees 1." in message


def test_a_missing_needed_library_fails_naming_it(stubs, monkeypatch):
    with pytest.raises(NetworkCheckError) as raised:
        _verify(stubs, monkeypatch, stubs.fi_info_efa, LD_LIBRARY_PATH=stubs.library_path(with_deps=False))
    message = str(raised.value)
    assert "\n" not in message and message.startswith("Network check failed: p4d.24xlarge has EFA")
    assert "NCCL's net plugin does not load (NCCL_NET_PLUGIN=libnccl-net.so: libstubfabric.so.1: cannot open shared object file" in message
    assert "TCP sockets" in message and raised.value.exit_code == 3 and isinstance(raised.value, GpuCheckError)


def test_a_missing_plugin_fails_naming_the_names_nccl_tried(stubs, monkeypatch):
    with pytest.raises(NetworkCheckError, match=r"NCCL_NET_PLUGIN=ofi: libnccl-net-ofi\.so: cannot open shared object file"):
        _verify(stubs, monkeypatch, stubs.fi_info_efa, NCCL_NET_PLUGIN="ofi")
    with pytest.raises(NetworkCheckError, match=r"NCCL_NET_PLUGIN unset: libnccl-net\.so: cannot open"):
        _verify(stubs, monkeypatch, stubs.fi_info_efa, NCCL_NET_PLUGIN=None, LD_LIBRARY_PATH=str(stubs.deps_dir))


def test_a_library_without_the_plugin_api_is_not_a_plugin(stubs, monkeypatch, tmp_path):
    stub_plugin.compile_library("int nothing_here(void) { return 0; }\n", tmp_path / "libnccl-net.so")
    with pytest.raises(NetworkCheckError, match=r"exports none of ncclNetPlugin_v10, ncclNetPlugin_v9"):
        _verify(stubs, monkeypatch, stubs.fi_info_efa, LD_LIBRARY_PATH=f"{tmp_path}:{stubs.deps_dir}")


def test_a_tuner_that_does_not_load_fails_too(stubs, monkeypatch):
    with pytest.raises(NetworkCheckError, match=r"NCCL's tuner plugin does not load \(NCCL_TUNER_PLUGIN=libnccl-tuner-missing\.so: "):
        _verify(stubs, monkeypatch, stubs.fi_info_efa, NCCL_TUNER_PLUGIN="libnccl-tuner-missing.so")


def test_no_efa_provider_fails_naming_what_fi_info_said(stubs, monkeypatch):
    with pytest.raises(NetworkCheckError) as raised:
        _verify(stubs, monkeypatch, stubs.fi_info_none)
    message = str(raised.value)
    assert "libfabric does not see the EFA provider (fi_info -p efa exited 61: fi_getinfo: -61 (No data available);" in message
    assert "/dev/infiniband/uverbs*" in message and "plugin does not load" not in message


def test_plugin_and_provider_both_missing_are_named_in_one_line(stubs, monkeypatch):
    with pytest.raises(NetworkCheckError) as raised:
        _verify(stubs, monkeypatch, stubs.fi_info_none, LD_LIBRARY_PATH=stubs.library_path(with_deps=False))
    message = str(raised.value)
    assert "\n" not in message and "net plugin does not load" in message and "; and libfabric does not see" in message


def test_no_fi_info_in_the_image_is_named(stubs, monkeypatch, tmp_path):
    with pytest.raises(NetworkCheckError, match=r"libfabric's fi_info is not in the image .*WITH_EFA=0"):
        _verify(stubs, monkeypatch, tmp_path / "absent", PATH=str(tmp_path))


def test_each_probe_is_bounded_in_time(stubs, monkeypatch, tmp_path):
    monkeypatch.setattr(network_check, "FI_INFO", str(stubs.fi_info_hangs))
    started = time.monotonic()
    with pytest.raises(NetworkCheckError, match=r"fi_info -p efa did not finish within 0\.5s \(GPU_CHECK_TIMEOUT_SECONDS\)"):
        network_check.verify(EFA_TYPE, 2, uses_gpus=True, environ=_env(stubs), timeout=0.5)
    # A plugin whose loading hangs (a constructor that never returns) is bounded the same way.
    stub_plugin.compile_library(
        "#include <unistd.h>\n__attribute__((constructor)) static void hang(void) { sleep(30); }\n", tmp_path / "libnccl-net.so"
    )
    with pytest.raises(NetworkCheckError, match=r"loading NCCL's plugins in a fresh process did not finish within 0\.5s"):
        network_check.verify(EFA_TYPE, 2, uses_gpus=True, environ=_env(stubs, LD_LIBRARY_PATH=str(tmp_path)), timeout=0.5)
    assert time.monotonic() - started < 15


@pytest.mark.parametrize(
    ("instance_type", "hosts", "gpus", "expected", "reason"),
    [
        ("ml.g5.xlarge", 2, True, "sockets", "g5.xlarge has no EFA (gpu_instances.json): NCCL uses TCP sockets between hosts"),
        ("p3.16xlarge", 4, True, "sockets", "p3.16xlarge has no EFA"),
        ("ml.m5.xlarge", 2, True, "sockets", "not in gpu_instances.json: TCP sockets expected"),
        (EFA_TYPE, 1, True, "none", "one host"),
        (EFA_TYPE, 2, False, "none", "no GPUs: collectives between hosts run over gRPC"),
    ],
)
def test_without_efa_it_says_what_nccl_will_use_and_probes_nothing(monkeypatch, capsys, instance_type, hosts, gpus, expected, reason):
    monkeypatch.setattr(network_check, "probe_plugins", lambda *a: pytest.fail("no probe without EFA"))
    monkeypatch.setattr(network_check, "probe_efa_provider", lambda *a: pytest.fail("no probe without EFA"))
    report = network_check.verify(instance_type, hosts, uses_gpus=gpus, environ={})
    assert report["ok"] and report["expected"] == expected and reason in report["reason"]
    assert f'"expected": "{expected}"' in capsys.readouterr().out


def test_setting_the_library_path_inside_a_running_process_loads_nothing(stubs, monkeypatch):
    """Defect 3 of issue #43: the loader read LD_LIBRARY_PATH when this process started; os.environ is too late.

    The check therefore probes in a fresh process with the path as this process started, never
    with what os.environ says now (which would pass while NCCL, in this process, fails).
    """
    started_with = environment.loader_environment({}).get("LD_LIBRARY_PATH")
    monkeypatch.setenv("LD_LIBRARY_PATH", stubs.library_path())
    with pytest.raises(OSError, match="libnccl-net.so"):
        ctypes.CDLL("libnccl-net.so")
    assert environment.loader_environment().get("LD_LIBRARY_PATH") == started_with != stubs.library_path()
    # A fresh process started with the path loads it.
    loaded = network_check.probe_plugins(_env(stubs), timeout=20)
    assert loaded[0].ok


def test_the_job_settings_for_efa_reach_the_probe_and_the_jobs_own_win(stubs, monkeypatch):
    seen = {}

    def probe(environ, timeout):
        seen.update(environ)
        loaded = network_check.PluginLoad("net", "NCCL_NET_PLUGIN=libnccl-net.so", ("libnccl-net.so",), "libnccl-net.so")
        return [network_check.PluginLoad(**{**loaded.__dict__, "path": "/x", "symbol": "ncclNetPlugin_v9"})]

    monkeypatch.setattr(network_check, "probe_plugins", probe)
    monkeypatch.setattr(network_check, "FI_INFO", str(stubs.fi_info_efa))
    network_check.verify(EFA_TYPE, 2, uses_gpus=True, environ=_env(stubs, FI_PROVIDER="efa;ofi_rxm"), timeout=20)
    assert seen["FI_EFA_USE_DEVICE_RDMA"] == "1" and seen["FI_PROVIDER"] == "efa;ofi_rxm"


def test_the_script_mode_gpu_check_fails_the_job_with_the_network_line(stubs, monkeypatch, tmp_path):
    """``python -m trainer.gpu_check RESULT --network``: the network failure is the check's result, exit status 3."""
    base = tmp_path / "ml"
    (base / "input" / "config").mkdir(parents=True)
    (base / "input" / "config" / "resourceconfig.json").write_text(
        json.dumps({"current_host": "algo-1", "hosts": ["algo-1", "algo-2"], "current_instance_type": EFA_TYPE})
    )
    monkeypatch.setenv("SAGEMAKER_BASE_DIR", str(base))
    monkeypatch.setattr(gpu_check, "driver_check", lambda expectation: {"ok": True, "expected": expectation.count})
    monkeypatch.setattr(network_check, "loader_environment", lambda: _env(stubs, LD_LIBRARY_PATH=stubs.library_path(with_deps=False)))
    monkeypatch.setattr(network_check, "FI_INFO", str(stubs.fi_info_efa))
    result = tmp_path / "gpu-check.json"
    assert gpu_check.main([str(result)]) == 0, "without --network (processing) the network is not checked"
    assert gpu_check.main([str(result), "--network"]) == 3
    written = json.loads(result.read_text())
    assert written["exit_code"] == 3 and written["error"].startswith("Network check failed: p4d.24xlarge has EFA")


def test_the_training_scripts_check_asks_for_the_network(tmp_path, monkeypatch):
    commands = []

    class Supervisor:
        stop_requested_at = None

        def run(self, command, *, env, cwd):
            commands.append(command)
            Path(command[3]).write_text(json.dumps({"ok": False, "error": "Network check failed: x.", "exit_code": 3}))
            return 3

    with pytest.raises(GpuCheckError, match=r"^Network check failed: x\. The training script was not started\.$"):
        script_runner.verify_gpus(Supervisor(), None, tmp_path, network=True)
    with pytest.raises(GpuCheckError):
        script_runner.verify_gpus(Supervisor(), None, tmp_path, what="processing job")
    assert commands[0][1:] == ["-m", "trainer.gpu_check", str(tmp_path / "gpu-check.json"), "--network"]
    assert commands[1][0] == sys.executable and "--network" not in commands[1]
