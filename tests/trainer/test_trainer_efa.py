"""Multi-node NCCL over EFA (issues #21, #43): the environment set per instance type, and the image's pinned plugin."""

from __future__ import annotations

import re
from pathlib import Path

from trainer import network_check
from trainer.train import distribute

DOCKERFILE = Path(__file__).resolve().parents[2] / "training_image" / "Dockerfile"
REQUIREMENTS = DOCKERFILE.parent / "requirements.txt"


def test_efa_instances_get_the_efa_provider_and_rdma_where_the_gpu_has_it():
    p5 = distribute.nccl_environment("ml.p5.48xlarge", 2)
    assert p5["FI_PROVIDER"] == "efa" and p5["FI_EFA_USE_DEVICE_RDMA"] == "1" and p5["FI_EFA_FORK_SAFE"] == "1"
    g5 = distribute.nccl_environment("g5.48xlarge", 4)  # EFA, but no GPUDirect RDMA on A10G
    assert g5["FI_PROVIDER"] == "efa" and "FI_EFA_USE_DEVICE_RDMA" not in g5


def test_no_efa_variables_for_one_host_or_an_instance_without_efa():
    assert distribute.nccl_environment("p5.48xlarge", 1) == {}
    assert distribute.nccl_environment("g5.xlarge", 4) == {}  # no EFA in the GPU table
    assert distribute.nccl_environment("p3.16xlarge", 2) == {}
    assert distribute.nccl_environment(None, 2) == {}
    assert distribute.nccl_environment("m5.large", 2) == {}


def test_efa_jobs_name_the_ofi_plugins_network_so_nccl_cannot_fall_back_to_sockets():
    # aws-ofi-nccl 1.14.2 registers its network as "Libfabric" (src/nccl_ofi_interface_nvidia.c).
    for instance_type in ("ml.p4d.24xlarge", "p5.48xlarge", "g5.12xlarge"):
        assert distribute.nccl_environment(instance_type, 2)["NCCL_NET"] == "Libfabric"
    for instance_type, hosts in (("p4d.24xlarge", 1), ("g5.xlarge", 2), ("p3.16xlarge", 2), (None, 2)):
        assert "NCCL_NET" not in distribute.nccl_environment(instance_type, hosts)
    # The escape hatch: a job's own NCCL_NET (e.g. Socket, knowingly over TCP) wins.
    environ = {"NCCL_NET": "Socket"}
    assert "NCCL_NET" not in distribute.apply_nccl_environment("p4d.24xlarge", 2, environ)
    assert environ["NCCL_NET"] == "Socket"


def test_the_jobs_own_settings_win_and_the_library_path_is_left_to_the_image():
    environ = {"NCCL_DEBUG": "WARN", "LD_LIBRARY_PATH": "/usr/local/lib"}
    applied = distribute.apply_nccl_environment("p4d.24xlarge", 2, environ)
    assert environ["NCCL_DEBUG"] == "WARN" and "NCCL_DEBUG" not in applied
    assert environ["FI_PROVIDER"] == "efa" and applied["NCCL_DEBUG_SUBSYS"] == "NET"
    # The loader read LD_LIBRARY_PATH when the process started (issue #43): the image's ENV sets it.
    assert environ["LD_LIBRARY_PATH"] == "/usr/local/lib" and "LD_LIBRARY_PATH" not in applied
    again = dict(environ)
    assert distribute.apply_nccl_environment("p4d.24xlarge", 2, again) == {} and again == environ
    untouched: dict[str, str] = {}
    assert distribute.apply_nccl_environment("g5.xlarge", 2, untouched) == {} and untouched == {}


def test_no_trainer_module_sets_the_library_path_in_a_running_process():
    trainer = DOCKERFILE.parent / "trainer"
    setters = [
        f"{path.relative_to(trainer)}:{number}"
        for path in trainer.rglob("*.py")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"""\benviron\s*\[\s*["']LD_LIBRARY_PATH["']\s*\]\s*=|(set|put)env\(\s*["']LD_LIBRARY_PATH""", line)
    ]
    assert setters == []


def test_the_image_pins_the_efa_installer_and_puts_its_plugin_where_the_check_looks():
    text = DOCKERFILE.read_text()
    assert re.search(r"ARG EFA_INSTALLER_VERSION=\d+\.\d+\.\d+\n", text)
    assert re.search(r"ARG EFA_INSTALLER_SHA256=[0-9a-f]{64}\n", text)
    assert "AWS_OFI_NCCL_VERSION" not in text, "one plugin: the installer's, no second build"
    env = re.search(r"^ENV LD_LIBRARY_PATH=(\S+)", text, re.M)
    assert env and env[1].split("$")[0].split(":") == [network_check.OFI_NCCL_LIB, network_check.EFA_LIB]
    assert network_check.FI_INFO.startswith(network_check.EFA_LIB.removesuffix("lib"))
    assert re.search(r"^nvidia-nccl-cu12==2\.27\.\d+$", REQUIREMENTS.read_text(), re.M), "the plugin loader emulated is 2.27's"
