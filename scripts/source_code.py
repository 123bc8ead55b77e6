"""A user's code as SageMaker's SDK ships it: ``sourcedir.tar.gz`` of a directory, uploaded
KMS-encrypted under ``code/<job name>/`` in the artifacts bucket.

A library, not a command: ``scripts.launch --source-dir`` (a SageMaker job's ``code`` channel) and
``scripts.cluster_job run --source-dir`` (the cluster document's ``CodeKey``) upload the same way.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from scripts.common import DATA_OUTPUTS, Deployment, UsageError
from stacks.components.training_job_spec import CODE_PREFIX

_SKIPPED_NAMES = {"__pycache__", ".git", ".ipynb_checkpoints", ".DS_Store"}


def pack_source(source_dir: Path, entry_point: str) -> bytes:
    """``sourcedir.tar.gz`` of ``source_dir``'s contents (what the SageMaker SDK uploads).

    Raises:
        UsageError: the directory or the entry point inside it is missing.
    """
    if not source_dir.is_dir():
        raise UsageError(f"--source-dir {source_dir} is not a directory")
    if not (source_dir / entry_point).is_file():
        raise UsageError(f"--entry-point {entry_point} is not a file in {source_dir}")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in sorted(source_dir.rglob("*")):
            relative = path.relative_to(source_dir)
            if any(part in _SKIPPED_NAMES for part in relative.parts) or path.suffix == ".pyc":
                continue
            tar.add(path, arcname=relative.as_posix(), recursive=False)
    return buffer.getvalue()


def code_key(job_name: str) -> str:
    """Where a job's ``sourcedir.tar.gz`` goes in the artifacts bucket."""
    return f"{CODE_PREFIX}{job_name}/sourcedir.tar.gz"


def upload_code(deployment: Deployment, source_dir: Path, entry_point: str, job_name: str, *, dry_run: bool) -> str:
    """Pack ``source_dir`` and upload it KMS-encrypted to ``code/<job name>/``; its ``s3://`` URI."""
    return upload_archive(deployment, pack_source(source_dir, entry_point), job_name, dry_run=dry_run)


def upload_archive(deployment: Deployment, archive: bytes, job_name: str, *, dry_run: bool) -> str:
    """Upload a packed ``sourcedir.tar.gz`` KMS-encrypted to ``code/<job name>/``; its ``s3://`` URI."""
    data = deployment.outputs("data", DATA_OUTPUTS)
    key = code_key(job_name)
    if not dry_run:
        deployment.aws.client("s3").put_object(
            Bucket=data["ArtifactsBucketName"], Key=key, Body=archive, ServerSideEncryption="aws:kms", SSEKMSKeyId=data["KeyArn"]
        )
    return f"s3://{data['ArtifactsBucketName']}/{key}"
