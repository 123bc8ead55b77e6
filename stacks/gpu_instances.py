"""The one table of NVIDIA GPU instance types, typed.

The data lives in ``training_image/trainer/gpu_instances.json`` so that the training image
(which cannot import this package) and the stacks read the very same rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

TABLE_PATH = Path(__file__).resolve().parent.parent / "training_image" / "trainer" / "gpu_instances.json"
SAGEMAKER_PREFIX = "ml."


@dataclass(frozen=True)
class GpuInstanceType:
    """One row of the GPU table.

    Attributes:
        name: EC2 instance type name, e.g. ``g5.12xlarge`` (SageMaker adds ``ml.``).
        gpu_model: Marketing name of the GPU, e.g. ``NVIDIA A10G``.
        compute_capability: CUDA compute capability of the GPU, e.g. ``"8.6"``; decides which
            NVIDIA driver branches and CUDA toolkits still support it.
        gpu_count: GPUs per instance; what the boot check and the entrypoint expect to see.
        gpu_memory_gib: Memory per GPU in GiB.
        vcpus: vCPUs per instance (what EC2 vCPU quotas count).
        efa: Whether the type supports Elastic Fabric Adapter interfaces.
        efa_interfaces: EFA interfaces the type takes, one per network card: 4 on p4d/p4de, 32 on
            p5/p5e.48xlarge, 0 without EFA. From EC2's ``DescribeInstanceTypes``
            (``NetworkInfo.EfaInfo.MaximumEfaInterfaces``) and the EC2 User Guide's "Maximize
            network bandwidth on instances with multiple network cards" (``efa-acc-inst-types``);
            botocore's EC2 model carries no per-type data, so the table does. A node gets every one
            (:mod:`stacks.components.gpu_cluster`); the image's network check expects as many devices.
        local_nvme_gb: Instance-store NVMe in GB; 0 means EBS only. SageMaker rejects a
            ``VolumeKmsKeyId`` for types with local NVMe (the store is hardware-encrypted).
        peak_tflops_half: Dense peak tensor TFLOP/s in ``mixed_precision_dtype`` (MFU estimates).
        mixed_precision_dtype: ``bfloat16`` where the GPU supports it, else ``float16``.
        on_demand_usd_per_hour: EC2 Linux on-demand price, us-east-1 (see ``PRICE_SOURCE``).
        allreduce_busbw_floor_gbps: Lowest NCCL all-reduce bus bandwidth (GB/s) across the
            instance's GPUs that a node passes its boot check with; ``None`` for one GPU. How
            each figure is derived is in the table's ``_columns``.
    """

    name: str
    gpu_model: str
    compute_capability: str
    gpu_count: int
    gpu_memory_gib: int
    vcpus: int
    efa: bool
    efa_interfaces: int
    local_nvme_gb: int
    peak_tflops_half: float
    mixed_precision_dtype: str
    on_demand_usd_per_hour: float
    allreduce_busbw_floor_gbps: float | None

    @property
    def family(self) -> str:
        """Instance family, e.g. ``g5`` or ``p4d``."""
        return self.name.split(".", 1)[0]

    @property
    def compute_capability_version(self) -> tuple[int, int]:
        """:attr:`compute_capability` as ``(major, minor)``, for comparisons."""
        major, minor = self.compute_capability.split(".")
        return int(major), int(minor)

    @property
    def quota_family(self) -> str:
        """EC2 vCPU quota bucket: ``G`` (G and VT instances) or ``P``."""
        return "P" if self.family.startswith("p") else "G"


@lru_cache(maxsize=1)
def _load() -> tuple[Mapping[str, GpuInstanceType], str]:
    raw = json.loads(TABLE_PATH.read_text(encoding="utf-8"))
    rows = {name: GpuInstanceType(name=name, **row) for name, row in raw["instance_types"].items()}
    return MappingProxyType(rows), raw["_price_source"]


def gpu_instance_types() -> Mapping[str, GpuInstanceType]:
    """All known GPU instance types by EC2 name."""
    return _load()[0]


def price_source() -> str:
    """Where and when the table's on-demand prices were taken."""
    return _load()[1]


def lookup(instance_type: str) -> GpuInstanceType | None:
    """Row for an EC2 (``g5.xlarge``) or SageMaker (``ml.g5.xlarge``) type, or ``None``."""
    name = instance_type.removeprefix(SAGEMAKER_PREFIX)
    return gpu_instance_types().get(name)


@lru_cache(maxsize=1)
def sagemaker_hosting_instance_types() -> frozenset[str]:
    """Instance types SageMaker real-time hosting accepts (``ProductionVariantInstanceType``).

    Read from botocore's bundled SageMaker service model: offline, and the same list the API
    validates a CreateEndpointConfig request against. A GPU type can train but not host (and
    the other way round), so serving checks both this and the GPU table.
    """
    from stacks.sagemaker_limits import sagemaker_service_model

    return frozenset(sagemaker_service_model().shape("ProductionVariantInstanceType")["enum"])

