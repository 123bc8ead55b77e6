"""Read-only access to ``gpu_instances.json``, the table the stacks validate instance types with.

The image cannot import the ``stacks`` package, so the table is data shipped inside this package
and both sides read the same rows. Only what the trainer needs is exposed here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

TABLE_PATH = Path(__file__).resolve().parent / "gpu_instances.json"
SAGEMAKER_PREFIX = "ml."


@dataclass(frozen=True)
class GpuInstance:
    """The columns of one table row that the trainer uses.

    Attributes:
        name: EC2 instance type name, e.g. ``g5.12xlarge``.
        gpu_model: GPU marketing name, e.g. ``NVIDIA A10G``.
        gpu_count: GPUs per instance.
        gpu_memory_gib: Memory per GPU in GiB.
        mixed_precision_dtype: ``bfloat16`` or ``float16``.
        compute_capability: CUDA compute capability, ``major.minor``.
        vcpus: vCPUs of the instance (sizes the input pipelines' thread pools).
        efa: Whether the instance type supports EFA (NCCL over libfabric between nodes).
        efa_interfaces: EFA interfaces (one per network card) a host of the type has: 4 on p4d, 32 on
            p5.48xlarge; what the network check expects to see as ``/dev/infiniband/uverbs*``.
    """

    name: str
    gpu_model: str
    gpu_count: int
    gpu_memory_gib: int
    mixed_precision_dtype: str
    compute_capability: str
    vcpus: int = 0
    efa: bool = False
    efa_interfaces: int = 0


@lru_cache(maxsize=1)
def _rows() -> dict[str, GpuInstance]:
    raw = json.loads(TABLE_PATH.read_text(encoding="utf-8"))
    return {
        name: GpuInstance(
            name=name,
            gpu_model=row["gpu_model"],
            gpu_count=int(row["gpu_count"]),
            gpu_memory_gib=int(row["gpu_memory_gib"]),
            mixed_precision_dtype=row["mixed_precision_dtype"],
            compute_capability=row["compute_capability"],
            vcpus=int(row["vcpus"]),
            efa=bool(row["efa"]),
            efa_interfaces=int(row["efa_interfaces"]),
        )
        for name, row in raw["instance_types"].items()
    }


def lookup(instance_type: str) -> GpuInstance | None:
    """Row for an EC2 (``g5.xlarge``) or SageMaker (``ml.g5.xlarge``) type, or ``None``."""
    return _rows().get(instance_type.strip().removeprefix(SAGEMAKER_PREFIX))


def known_instance_types() -> tuple[str, ...]:
    """Every EC2 instance type name in the table."""
    return tuple(_rows())
