"""The local AWS: a moto server on loopback, run inside this process.

In-process (``ThreadedMotoServer``) rather than ``moto_server`` in a subprocess because the
harness needs moto's backends directly: reserved SSM parameters can only be seeded there, the
local SageMaker runner records job outcomes there, and the workarounds in ``gaps`` patch
moto's classes, which only reach a server in the same interpreter.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

# Re-exported: callers and tests read server.ACCOUNT, server.REGION, server.client as before.
from scripts.emulator.aws import ACCOUNT, DUMMY_CREDENTIALS, REGION, client, free_port  # noqa: F401


@dataclass
class Emulator:
    """A started moto server and the environment that points clients at it.

    Attributes:
        port: TCP port on 127.0.0.1.
        log_file: Where moto's own chatter (request logs, "unsupported resource" warnings) goes.
        endpoint_url: ``http://localhost:<port>``.
    """

    port: int
    log_file: Path
    _server: object = field(default=None, repr=False)

    @property
    def endpoint_url(self) -> str:
        # localhost, not 127.0.0.1: moto decides which service a request is for from the host
        # name, and parses S3 template URLs (TemplateURL in CreateChangeSet) the same way; an
        # IP-address host is read as a bucket name.
        return f"http://localhost:{self.port}"

    def client_env(self) -> dict[str, str]:
        """Variables that point the CDK CLI, boto3 and the operator scripts at the emulator."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint_url,
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            **DUMMY_CREDENTIALS,
            # Ignore a developer's ~/.aws files: nothing may send a request to a real account.
            "AWS_CONFIG_FILE": os.devnull,
            "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        }

    def environ(self, base: Mapping[str, str]) -> dict[str, str]:
        """``base`` with :meth:`client_env` applied and any AWS profile selection removed."""
        env = {k: v for k, v in base.items() if k not in {"AWS_PROFILE", "AWS_DEFAULT_PROFILE"}}
        env.update(self.client_env())
        return env

    def stop(self) -> None:
        """Shut the server down (its state is lost) and give the process moto as shipped back."""
        from scripts.emulator.patching import PATCHES

        if self._server is not None:
            self._server.stop()  # type: ignore[attr-defined]
            self._server = None
        PATCHES.revert()
        _unroute_moto_logs()


def start(*, log_file: Path, port: int | None = None) -> Emulator:
    """Start moto on 127.0.0.1 with every emulator workaround installed.

    Args:
        log_file: File receiving moto's logging and warnings.
        port: Fixed port; ``None`` picks a free one.
    """
    from scripts.emulator import custom_resources, gaps
    from scripts.emulator.patching import PATCHES

    log_file.parent.mkdir(parents=True, exist_ok=True)
    _route_moto_logs(log_file)
    PATCHES.revert()  # one emulator per process: drop what an unstopped one left
    gaps.apply_all()
    # moto works out, once, the host a Lambda container would call back on (ResponseURL of
    # custom resources); inside a container without Docker it shells out to curl and prints
    # a warning to stdout. The answer is rewritten anyway (custom_resources), so ask it now
    # with stdout going to the log.
    from moto import settings

    with log_file.open("a", encoding="utf-8") as log, contextlib.redirect_stdout(log):
        settings.moto_server_host()

    from moto.moto_api._internal.models import moto_api_backend
    from moto.server import ThreadedMotoServer

    # moto keeps its state in module-level backends shared by every server in this process: a
    # new emulator starts empty, like a fresh account (the tests run several in one process).
    moto_api_backend.reset()
    emulator = Emulator(port=port or free_port(), log_file=log_file)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=emulator.port, verbose=False)
    server.start()
    emulator._server = server
    custom_resources.install(endpoint_url=emulator.endpoint_url)
    return emulator


_ROUTED_LOGGERS = ("werkzeug", "moto", "botocore", "py.warnings")
_saved_logging: list[tuple[logging.Logger, list[logging.Handler], bool, int]] = []


def _route_moto_logs(log_file: Path) -> None:
    # moto logs every request and warns about each resource type it skips; the harness reports
    # what matters itself, so the raw stream goes to a file for when something needs digging.
    _unroute_moto_logs()
    handler = logging.FileHandler(log_file)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    for name in _ROUTED_LOGGERS:
        logger = logging.getLogger(name)
        _saved_logging.append((logger, list(logger.handlers), logger.propagate, logger.level))
        logger.handlers[:] = [handler]
        logger.propagate = False
        logger.setLevel(logging.INFO if name != "botocore" else logging.WARNING)
    logging.captureWarnings(True)


def _unroute_moto_logs() -> None:
    while _saved_logging:
        logger, handlers, propagate, level = _saved_logging.pop()
        for handler in logger.handlers:
            if handler not in handlers:
                handler.close()
        logger.handlers[:] = handlers
        logger.propagate, logger.level = propagate, level
    logging.captureWarnings(False)


def seed_ssm_parameters(parameters: Mapping[str, str], *, account: str = ACCOUNT, region: str = REGION) -> None:
    """Put public ``/aws/service/...`` parameters into moto's SSM backend.

    Emulator gap: PutParameter refuses names under ``/aws`` (reserved, as on AWS), and moto
    ships only a few of AWS's public parameters (Amazon Linux and ECS AMIs). Parameters such as
    the Deep Learning AMI id that a template resolves at deploy time must be written straight
    into the backend, which is why the server runs in this process.
    """
    from moto.ssm.models import Parameter, ssm_backends

    backend = ssm_backends[account][region]
    now = dt.datetime.now(dt.timezone.utc)
    for name, value in parameters.items():
        versions = backend._parameters[name]
        versions.append(
            Parameter(
                account_id=account,
                name=name,
                value=value,
                parameter_type="String",
                description="seeded by scripts.emulator (public AWS parameter)",
                allowed_pattern=None,
                keyid=None,
                last_modified_date=now,
                version=len(versions) + 1,
                data_type="aws:ec2:image" if value.startswith("ami-") else "text",
            )
        )


def register_images(ami_ids: Mapping[str, str], *, account: str = ACCOUNT, region: str = REGION) -> None:
    """Make AMI ids launchable in moto's EC2 (``{ami_id: name}``).

    The app caches the Deep Learning AMI id in ``cdk.context.json`` and the template names it
    literally; on AWS that image exists, in the emulator it has to be registered (under the
    same id, as a public Amazon image) before an instance can launch from it with AMI
    validation on.
    """
    from moto.ec2.models import ec2_backends
    from moto.ec2.models.amis import Ami

    backend = ec2_backends[account][region]
    for ami_id, name in ami_ids.items():
        if ami_id not in backend.amis:
            backend.amis[ami_id] = Ami(
                backend,
                ami_id,
                name=name,
                description=f"{name} (registered by scripts.emulator)",
                owner_alias="amazon",
                public=True,
                virtualization_type="hvm",
                architecture="x86_64",
                root_device_name="/dev/sda1",
            )


def seed_cached_lookups(context_file: Path, *, account: str = ACCOUNT, region: str = REGION) -> dict[str, str]:
    """Seed every SSM parameter the app has cached for this environment, and register AMIs.

    ``cdk.context.json`` keys look like
    ``ssm:account=<acct>:parameterName=<name>:region=<region>``. Each cached value becomes the
    parameter's value in the emulator, so deploy-time resolution and the operator scripts see
    what synthesis saw; values that are AMI ids are registered as images.

    Returns:
        ``{parameter name: value}`` of what was seeded.
    """
    import json

    context = json.loads(context_file.read_text(encoding="utf-8")) if context_file.is_file() else {}
    seeded: dict[str, str] = {}
    for key, value in context.items():
        if not key.startswith("ssm:") or not isinstance(value, str):
            continue
        fields = dict(part.split("=", 1) for part in key[len("ssm:") :].split(":") if "=" in part)
        if fields.get("account") == account and fields.get("region") == region and fields.get("parameterName"):
            seeded[fields["parameterName"]] = value
    seed_ssm_parameters(seeded, account=account, region=region)
    register_images(
        {value: name.strip("/").replace("/", "-") for name, value in seeded.items() if value.startswith("ami-")},
        account=account,
        region=region,
    )
    return seeded
