"""What every part of the emulator shares about the local AWS: its account, region, dummy
credentials, a client for it, and a free port.

The lowest floor of ``scripts/emulator/``: it imports no other module of the emulator, so the
moto server (``server``), its workarounds (``gaps``, ``custom_resources``) and the local services
(``states``, ``sagemaker``, ``hosting``) all reach these without importing each other.
``server`` re-exports every name here.
"""

from __future__ import annotations

import socket
from typing import Any

ACCOUNT = "123456789012"
"""moto's default account; ``app.py`` synthesizes for it when no credentials are configured."""

REGION = "us-east-1"
"""The region whose lookups ``cdk.context.json`` caches."""

DUMMY_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing"}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (emulator, local hosting processes)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def client(service: str, *, endpoint_url: str, region: str = REGION) -> Any:
    """A boto3 client for the emulator with its dummy credentials, whatever this process's env says."""
    import boto3

    return boto3.session.Session(
        aws_access_key_id=DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        aws_session_token=DUMMY_CREDENTIALS["AWS_SESSION_TOKEN"],
        region_name=region,
    ).client(service, endpoint_url=endpoint_url)
