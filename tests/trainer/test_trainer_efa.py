"""Multi-node NCCL over EFA (issue #21): the environment set per instance type, and the image's pinned plugin."""

from __future__ import annotations

import re
from pathlib import Path

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


def test_the_jobs_own_settings_win_and_the_plugin_is_put_on_the_library_path():
    environ = {"NCCL_DEBUG": "INFO", "LD_LIBRARY_PATH": "/usr/local/lib"}
    applied = distribute.apply_nccl_environment("p4d.24xlarge", 2, environ)
    assert environ["NCCL_DEBUG"] == "INFO" and "NCCL_DEBUG" not in applied
    assert environ["FI_PROVIDER"] == "efa"
    assert environ["LD_LIBRARY_PATH"].split(":") == [distribute.OFI_NCCL_LIB, distribute.EFA_LIB, "/usr/local/lib"]
    again = dict(environ)
    distribute.apply_nccl_environment("p4d.24xlarge", 2, again)
    assert again["LD_LIBRARY_PATH"] == environ["LD_LIBRARY_PATH"], "applying twice must not grow the path"
    untouched: dict[str, str] = {}
    assert distribute.apply_nccl_environment("g5.xlarge", 2, untouched) == {} and untouched == {}


def test_the_image_pins_libfabric_and_the_ofi_plugin_where_the_trainer_looks_for_them():
    text = DOCKERFILE.read_text()
    assert re.search(r"ARG EFA_INSTALLER_VERSION=\d+\.\d+\.\d+\n", text)
    assert re.search(r"ARG AWS_OFI_NCCL_VERSION=\d+\.\d+\.\d+\n", text)
    assert "--prefix=/opt/amazon/ofi-nccl" in text and f"COPY --from=efa {Path(distribute.OFI_NCCL_LIB).parent}" in text
    assert "--with-libfabric=/opt/amazon/efa" in text and distribute.EFA_LIB.startswith("/opt/amazon/efa/")
    # The plugin is built for the CUDA release TensorFlow's wheels are pinned to.
    cuda = re.search(r"nvidia/cuda:(\d+)\.(\d+)\.\d+-base", text)
    assert cuda and f"--with-cuda=/usr/local/cuda-{cuda[1]}.{cuda[2]}" in text
    assert re.search(r"^nvidia-nccl-cu12==2\.\d+\.\d+$", REQUIREMENTS.read_text(), re.M)
