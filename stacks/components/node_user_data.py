"""User data of a GPU training node: the boot files in ``node_boot/`` plus the node's settings.

The boot logic is real shell in ``node_boot/`` (shellcheck-clean, tested with a fake
``nvidia-smi``). At synth time this module writes, for one node:

- a ``#cloud-config`` part that makes cloud-init run the user-data script on *every* boot, so
  a node restarted after an idle stop (or stopped and started by CloudFormation to apply new
  user data) checks its GPUs and re-arms its cost guards again;
- a shell part that writes ``/opt/gputrain/node.env`` (the node's settings, readable in the
  console) and ``cloudwatch-agent.json``, unpacks the boot files (gzip + base64, byte-for-byte
  the files in this repository, to stay under EC2's 16 KB user data limit) and runs
  ``bootstrap.sh``.
"""

from __future__ import annotations

import base64
import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from aws_cdk import aws_ec2 as ec2

BOOT_DIR = Path(__file__).resolve().parent / "node_boot"
"""The boot files, next to the construct that deploys them."""

BOOT_FILES: tuple[str, ...] = ("bootstrap.sh", "health_check.sh", "gpu_compute_check.cu")
NODE_DIR = "/opt/gputrain"
"""Where the boot files and ``node.env`` live on a node."""

USER_DATA_LIMIT_BYTES = 16 * 1024
"""EC2 rejects user data above 16 KB (before base64)."""

CLOUDWATCH_AGENT_VERSION = "1.300072.0b1766"
"""CloudWatch agent release nodes install when the AMI has none (never ``latest``: a deploy
installs what was reviewed). To move on, pick a release of aws/amazon-cloudwatch-agent and
check that ``ubuntu/amd64/<version>/amazon-cloudwatch-agent.deb`` exists in the
``amazoncloudwatch-agent-<region>`` bucket."""

CLOUDWATCH_AGENT_KEY_FINGERPRINT = "937616F3450B7D806CBD9725D58167303B789C72"
"""Fingerprint of AWS's CloudWatch agent signing key (CloudWatch user guide, "Verify the
signature of the CloudWatch agent package"): the package is installed only if this key signed it."""

def gpu_metric_namespace(project_name: str) -> str:
    """Where the nodes' CloudWatch agent publishes its GPU metrics: one namespace per project, so
    the dashboard's searches and each node's publishing permission (``cloudwatch:namespace``) take
    only the project's nodes, not every instance of the region whose agent uses the default
    ``CWAgent``."""
    return f"{project_name}/ClusterNodes"


GPU_UTILIZATION_METRIC = "nvidia_smi_utilization_gpu"
"""What the CloudWatch agent publishes for ``nvidia_gpu`` ``utilization_gpu``."""

_EOF = "GPUTRAIN_EOF"
# cloud-init runs user-data scripts once per instance unless scripts-user runs "always". The
# list keeps the other stock final modules of Ubuntu's cloud.cfg that matter on a node.
_CLOUD_CONFIG = """#cloud-config
cloud_final_modules:
  - scripts-vendor
  - scripts-per-once
  - scripts-per-boot
  - scripts-per-instance
  - [scripts-user, always]
  - ssh-authkey-fingerprints
  - keys-to-console
  - final-message
  - power-state-change
"""


@dataclass(frozen=True)
class NodeSettings:
    """What one node's boot needs; written to ``node.env`` (values may be CDK tokens).

    Attributes:
        node_name: ``node-<index>``; names the node in logs and failure signals.
        instance_type: EC2 instance type of the node.
        expected_gpu_count: GPUs the node must show (the instance type's count).
        training_hosts: Every node's address, in node order (identical on every node).
        current_host: This node's entry in ``training_hosts``.
        worker_port: Port the training workers listen on.
        image_uri: ``<repository uri>:<tag>`` of the training image.
        start_training: Start the training container once the node is healthy.
        max_lifetime_hours: Power off this long after the first boot; 0 disables.
        stack_name: Stack whose resource the health check signals.
        logical_resource_id: The node's instance resource in that stack.
        region: Region of the stack, log group and bucket.
        log_group_name: The cluster's log group.
        metric_namespace: Where the CloudWatch agent publishes (:func:`gpu_metric_namespace`).
        checkpoint_s3_uri: Where ``/opt/ml/checkpoints`` is synced (this node's own prefix).
        output_s3_uri: Where the cluster's nodes may write models and other outputs.
        code_s3_uri: A user's ``sourcedir.tar.gz`` to run in script mode; empty for the built-in trainer.
        entry_point: The script inside it; empty for the built-in trainer.
        legacy_keras: Run the script with Keras 2 (tf-keras).
        allreduce_busbw_floor_gbps: All-reduce bus bandwidth (GB/s) across the node's GPUs below
            which the boot check fails (the GPU table's floor); ``None``: not measured (one GPU).
    """

    node_name: str
    instance_type: str
    expected_gpu_count: int
    training_hosts: Sequence[str]
    current_host: str
    worker_port: int
    image_uri: str
    start_training: bool
    max_lifetime_hours: int
    stack_name: str
    logical_resource_id: str
    region: str
    log_group_name: str
    metric_namespace: str
    checkpoint_s3_uri: str
    output_s3_uri: str
    code_s3_uri: str = ""
    entry_point: str = ""
    legacy_keras: bool = False
    allreduce_busbw_floor_gbps: float | None = None

    def environment(self) -> dict[str, str]:
        """The settings as ``node.env`` variables (the training container contract names)."""
        return {
            "NODE_NAME": self.node_name,
            "TRAINING_INSTANCE_TYPE": self.instance_type,
            "EXPECTED_GPU_COUNT": str(self.expected_gpu_count),
            "TRAINING_HOSTS": ",".join(self.training_hosts),
            "TRAINING_CURRENT_HOST": self.current_host,
            "TRAINING_WORKER_PORT": str(self.worker_port),
            "IMAGE_URI": self.image_uri,
            "START_TRAINING": "true" if self.start_training else "false",
            "MAX_LIFETIME_HOURS": str(self.max_lifetime_hours),
            "STACK_NAME": self.stack_name,
            "LOGICAL_RESOURCE_ID": self.logical_resource_id,
            "AWS_REGION": self.region,
            "LOG_GROUP": self.log_group_name,
            "CHECKPOINT_S3_URI": self.checkpoint_s3_uri,
            "OUTPUT_S3_URI": self.output_s3_uri,
            "CW_AGENT_VERSION": CLOUDWATCH_AGENT_VERSION,
            "CW_AGENT_KEY_FINGERPRINT": CLOUDWATCH_AGENT_KEY_FINGERPRINT,
            "CODE_S3_URI": self.code_s3_uri,
            "ENTRY_POINT": self.entry_point,
            "TF_USE_LEGACY_KERAS": "1" if self.legacy_keras else "0",
            "ALLREDUCE_BUSBW_FLOOR_GBPS": f"{self.allreduce_busbw_floor_gbps:g}" if self.allreduce_busbw_floor_gbps else "",
        }


def cloudwatch_agent_config(log_group_name: str, namespace: str) -> dict[str, Any]:
    """CloudWatch agent settings: per-GPU metrics aggregated per instance, boot logs.

    ``aggregation_dimensions`` makes the agent also publish each metric with the ``InstanceId``
    dimension alone, which is what the idle alarm watches (``Maximum`` = the busiest GPU).
    """
    streams = {"/var/log/gputrain/boot.log": "boot", "/var/log/cloud-init-output.log": "cloud-init"}
    return {
        "agent": {"metrics_collection_interval": 60},
        "metrics": {
            "namespace": namespace,
            "append_dimensions": {"InstanceId": "${aws:InstanceId}"},
            "aggregation_dimensions": [["InstanceId"]],
            "metrics_collected": {
                "nvidia_gpu": {
                    "measurement": [
                        "utilization_gpu",
                        "utilization_memory",
                        "memory_used",
                        "memory_total",
                        "temperature_gpu",
                        "power_draw",
                    ],
                    "metrics_collection_interval": 60,
                }
            },
        },
        "logs": {
            "logs_collected": {
                "files": {
                    "collect_list": [
                        {"file_path": path, "log_group_name": log_group_name, "log_stream_name": f"{{instance_id}}/{name}"}
                        for path, name in streams.items()
                    ]
                }
            }
        },
    }


def _env_file(environment: Mapping[str, str]) -> str:
    lines = []
    for name, value in environment.items():
        if "'" in value or "\n" in value:
            raise ValueError(f"node setting {name} cannot hold quotes or newlines: {value!r}")
        lines.append(f"{name}='{value}'")
    return "\n".join(lines)


def boot_file_bytes(name: str) -> bytes:
    """A boot file as it goes onto the node: shell scripts without their comment lines.

    EC2 caps user data at 16 KB; the scripts' comments (kept in the repository, where people
    read them) are a third of their size. Only whole comment lines go (the shebang stays), so
    what runs is the tested script line for line.
    """
    data = (BOOT_DIR / name).read_bytes()
    if not name.endswith(".sh"):
        return data
    lines = data.decode("utf-8").splitlines(keepends=True)
    kept = lines[:1] + [line for line in lines[1:] if not line.lstrip().startswith("#") and line.strip()]
    return "".join(kept).encode("utf-8")


def packed_boot_file(name: str) -> str:
    """A boot file gzipped (fixed timestamp, so synth is deterministic) and base64-encoded."""
    return base64.encodebytes(gzip.compress(boot_file_bytes(name), compresslevel=9, mtime=0)).decode("ascii").strip()


def boot_script(settings: NodeSettings) -> str:
    """The shell part of the user data for one node."""
    parts = [
        "#!/bin/bash",
        "# gputrain GPU node: writes its settings and boot files, then runs the boot sequence.",
        "# Source: stacks/components/node_boot/ in the platform repository.",
        "set -euo pipefail",
        "umask 022",
        f"mkdir -p {NODE_DIR}",
        f"cat > {NODE_DIR}/node.env <<'{_EOF}'",
        _env_file(settings.environment()),
        _EOF,
        f"cat > {NODE_DIR}/cloudwatch-agent.json <<'{_EOF}'",
        json.dumps(cloudwatch_agent_config(settings.log_group_name, settings.metric_namespace), indent=1),
        _EOF,
    ]
    for name in BOOT_FILES:
        parts += [f"base64 -d <<'{_EOF}' | gunzip > {NODE_DIR}/{name}", packed_boot_file(name), _EOF]
    parts += [f"chmod 0755 {NODE_DIR}/*.sh", f"exec {NODE_DIR}/bootstrap.sh"]
    return "\n".join(parts) + "\n"


def add_node_boot(user_data: ec2.MultipartUserData, settings: NodeSettings) -> None:
    """Fill ``user_data`` with the cloud-config part (run every boot) and the node's boot script.

    The instance is created with the empty user data first: the boot script names the
    instance's own logical id, which exists only once the instance does.
    """
    user_data.add_part(ec2.MultipartBody.from_raw_body(content_type='text/cloud-config; charset="utf-8"', body=_CLOUD_CONFIG))
    user_data.add_part(
        ec2.MultipartBody.from_raw_body(content_type='text/x-shellscript; charset="utf-8"', body=boot_script(settings))
    )
