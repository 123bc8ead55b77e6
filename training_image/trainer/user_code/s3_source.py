"""User code from an ``s3://`` ``sagemaker_submit_directory``, downloaded as AWS's containers do.

Without network isolation (the SageMaker SDK's default) the SDK uploads ``sourcedir.tar.gz`` and
only names it in ``sagemaker_submit_directory``; AWS's training toolkit downloads it with boto3.
So does this image, honouring ``AWS_ENDPOINT_URL`` (and ``AWS_ENDPOINT_URL_S3``) like every boto3
client, for emulators. A job that runs with network isolation cannot reach S3: the code must then
arrive as the ``code`` channel, and only then does the message talk about isolation. Whether a
job is isolated is read from the job's own description when the container has it
(``input/config/trainingjobconfig.json``: ``EnableNetworkIsolation``; processing's
``config/processingjobconfig.json``: ``NetworkConfig.EnableNetworkIsolation``); when it is not
known, the download is tried and a failure says both what failed and what isolation would need.
"""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePosixPath
from typing import Any

from trainer.contract.errors import SourceError
from trainer.logs import log

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar")
CONNECT_TIMEOUT_SECONDS = 10
READ_TIMEOUT_SECONDS = 60
ATTEMPTS = 3


def split_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/key`` -> ``(bucket, key)``."""
    bucket, _, key = uri[len("s3://") :].partition("/")
    return bucket, key


def network_isolated(base_dir: Path) -> bool | None:
    """Whether the job runs with network isolation: True/False from its description, None when unknown."""
    for path, find in (
        (base_dir / "input" / "config" / "trainingjobconfig.json", lambda c: c.get("EnableNetworkIsolation")),
        (base_dir / "config" / "processingjobconfig.json", lambda c: (c.get("NetworkConfig") or {}).get("EnableNetworkIsolation")),
    ):
        try:
            config = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(config, dict):
            value = find(config)
            if value is not None:
                return value is True or str(value).lower() == "true"
    return None


def isolated_message(uri: str, setting: str, channel_dir: str) -> str:
    """What an isolated job needs instead of a download."""
    name = PurePosixPath(split_uri(uri)[1]).name or "sourcedir.tar.gz"
    return (
        f"{setting} is {uri}, but this job runs with network isolation and cannot read S3 itself: add an input channel "
        f"named 'code' with that S3 URI and set {setting} to {channel_dir}/{name} (scripts.launch --source-dir and "
        "the SageMaker SDK with enable_network_isolation=True both do this)."
    )


def _client() -> Any:
    import boto3
    from botocore.config import Config

    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None
    config = Config(connect_timeout=CONNECT_TIMEOUT_SECONDS, read_timeout=READ_TIMEOUT_SECONDS, retries={"max_attempts": ATTEMPTS})
    return boto3.client("s3", region_name=region, config=config)


def download(uri: str, destination: Path, setting: str, channel_dir: str) -> Path:
    """Downloads ``uri`` (a tarball, or every object under a prefix) into ``destination``; returns the local path.

    Raises:
        SourceError: the download failed (the reason, and what an isolated job would need).
    """
    from botocore.exceptions import BotoCoreError, ClientError

    bucket, key = split_uri(uri)
    destination.mkdir(parents=True, exist_ok=True)
    try:
        client = _client()
        if key.endswith(ARCHIVE_SUFFIXES):
            local = destination / PurePosixPath(key).name
            client.download_file(bucket, key, str(local))
        else:
            local = destination / "source"
            prefix = key.rstrip("/") + "/" if key else ""
            count = 0
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
                for item in page.get("Contents") or []:
                    relative = PurePosixPath(item["Key"][len(prefix) :])
                    if not relative.parts or item["Key"].endswith("/") or ".." in relative.parts:
                        continue
                    target = local.joinpath(*relative.parts)
                    target.parent.mkdir(parents=True, exist_ok=True)
                    client.download_file(bucket, item["Key"], str(target))
                    count += 1
            if count == 0:
                raise SourceError(f"{setting} is {uri}, but S3 holds no objects under it; upload the code there or fix the URI.")
    except (BotoCoreError, ClientError) as err:
        detail = " ".join(str(err).split())[:300]
        raise SourceError(
            f"Could not download {setting} {uri}: {detail}. If this job runs with network isolation it cannot reach S3; "
            f"then add an input channel named 'code' with that URI and set {setting} to {channel_dir}/"
            f"{PurePosixPath(key).name or 'sourcedir.tar.gz'}."
        ) from err
    log("source-download", uri=uri, to=str(local))
    return local
