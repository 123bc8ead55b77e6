"""Emulated containers in Docker: the built training image, run as SageMaker runs it (``--containers``).

The default local runner plays the image with this machine's processes (:mod:`scripts.emulator.containers`).
With ``scripts/run-local.sh --containers`` it runs the image itself, built by ``scripts/build-image.sh``,
as SageMaker (and the SageMaker SDK's local mode) does:

- a training or processing job: one ``docker run`` per instance, the host's ``/opt/ml`` tree mounted
  at ``/opt/ml``, the job's ``ContainerEntrypoint`` as ``--entrypoint`` (its first word; the rest and
  ``ContainerArguments`` as the command) or else the image's ``ENTRYPOINT`` (``tini -- python -m
  trainer``) with ``train`` (training) or the arguments (processing);
- ``InstanceCount`` > 1: the containers share a Docker network of their own, each named ``algo-1`` ..
  ``algo-N`` (host name and network alias), with SageMaker's ``resourceconfig.json``;
- a cluster job (:mod:`scripts.emulator.cluster`): one container per node, with the image's own
  entrypoint and command, host names ``node-0`` .. ``node-N`` on a Docker network of the job's own,
  stopped with ``docker stop --time 120`` (:meth:`DockerHosts.stop`);
- an endpoint: ``IMAGE serve`` with the model at ``/opt/ml/model``, its port 8080 published on a
  loopback port;
- AWS from inside a container is the emulator, reached as ``host.docker.internal`` (Docker's
  ``host-gateway``) through a relay on the Docker bridge's gateway address: the emulator itself
  listens on loopback only.

The container's environment is the job's own plus what SageMaker adds; nothing of this machine's
environment leaks in. Every container is named ``gputrain-emu-...`` and removed when its job ends.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import re
import socket
import struct
import subprocess
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from scripts.emulator.containers import IMAGE_CMD, ContainerRefused

IMAGE_TAG = "gputrain-trainer:local"
"""What ``scripts/build-image.sh`` tags by default."""
EMULATOR_HOST = "host.docker.internal"
"""The emulator's name inside a container (moto reads it as a host, not as a bucket)."""
CONTAINER_PREFIX = "gputrain-emu"
DOCKER_TIMEOUT_SECONDS = 120


def docker(*args: str, timeout: float = DOCKER_TIMEOUT_SECONDS) -> subprocess.CompletedProcess[str]:
    """One bounded docker CLI command (never raises on its exit status)."""
    try:
        return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=False)
    except FileNotFoundError as err:
        raise ContainerRefused("--containers needs the docker CLI; run scripts/docker-engine.sh (or install docker.io)") from err


def container_name(*parts: str) -> str:
    """A unique, Docker-valid container or network name for ``parts``."""
    slug = re.sub(r"[^a-zA-Z0-9_.-]+", "-", "-".join(parts)).strip("-.")[:60]
    return f"{CONTAINER_PREFIX}-{slug}-{uuid.uuid4().hex[:6]}"


def image_command(entrypoint: Sequence[str] | None, arguments: Sequence[str] | None, default_cmd: Sequence[str]) -> tuple[str | None, list[str]]:
    """``(--entrypoint, command)`` for ``docker run`` from a job's ``ContainerEntrypoint``/``ContainerArguments``.

    Docker's ``--entrypoint`` takes one executable: the entrypoint's other words go first in the
    command. Without an entrypoint the image's own (``tini -- python -m trainer``) runs the
    arguments, or ``default_cmd``.
    """
    if entrypoint:
        return entrypoint[0], [*entrypoint[1:], *(arguments or [])]
    return None, list(arguments) if arguments else list(default_cmd)


class _Relay:
    """Forwards TCP connections from ``listen`` (the Docker bridge's gateway) to the emulator on loopback."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]) -> None:
        self.target = target
        self.server = socket.create_server(listen, reuse_port=False)
        self.server.settimeout(0.5)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="docker-relay", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.server.accept()
            except (TimeoutError, socket.timeout):
                continue
            except OSError:
                return
            threading.Thread(target=self._pair, args=(client,), daemon=True).start()

    def _pair(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=30)
        except OSError:
            client.close()
            return
        client.settimeout(None)
        upstream.settimeout(None)
        for source, sink in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pump, args=(source, sink), daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        self.server.close()
        self._thread.join(timeout=5)


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        for sock, how in ((sink, socket.SHUT_WR), (source, socket.SHUT_RD)):
            with contextlib.suppress(OSError):
                sock.shutdown(how)


def bridge_gateway() -> str:
    """The IPv4 address of Docker's default bridge on this machine: where ``host-gateway`` points.

    A daemon records it in the bridge's IPAM config, except where it does not: Debian's docker.io
    20.10, freshly started, records ``{"Subnet": "172.17.0.0/16"}`` alone while its ``docker0`` has
    ``172.17.0.1/16``. The address is then read off the bridge's own interface (its name from the
    network's ``com.docker.network.bridge.name`` option, ``docker0`` by default), which is what
    ``host-gateway`` resolves to either way.

    Raises:
        ContainerRefused: neither the IPAM config nor the interface has an IPv4 address (one line
            that names both).
    """
    inspected = docker("network", "inspect", "bridge", "--format", "{{json .}}")
    if inspected.returncode != 0:
        raise ContainerRefused(f"--containers: docker network inspect bridge failed: {inspected.stderr.strip() or 'no output'}")
    try:
        network = json.loads(inspected.stdout)
    except json.JSONDecodeError as err:
        raise ContainerRefused(f"--containers: docker network inspect bridge printed no JSON ({err})") from err
    for config in (network.get("IPAM") or {}).get("Config") or []:
        gateway = (config or {}).get("Gateway") or ""
        if _is_ipv4(gateway):
            return gateway
    interface = (network.get("Options") or {}).get("com.docker.network.bridge.name") or "docker0"
    address = interface_ipv4(interface)
    if address:
        return address
    raise ContainerRefused(
        f"--containers: Docker's bridge network records no gateway and its interface {interface} has no IPv4 address; "
        "restart the daemon (scripts/docker-engine.sh) and check `ip addr show docker0`"
    )


def interface_ipv4(interface: str) -> str:
    """The IPv4 address of a network interface on this machine, or ``""`` (none, or no such interface)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            request = struct.pack("256s", interface.encode()[:15])
            answer = fcntl.ioctl(sock.fileno(), _SIOCGIFADDR, request)
    except OSError:
        return ""
    return socket.inet_ntoa(answer[20:24])


_SIOCGIFADDR = 0x8915
"""Linux's ioctl for an interface's address (``<linux/sockios.h>``)."""


def _is_ipv4(text: str) -> bool:
    try:
        return isinstance(ipaddress.ip_address(text), ipaddress.IPv4Address)
    except ValueError:
        return False


@dataclass
class DockerHosts:
    """The built image, ready to run jobs and endpoints in containers.

    Attributes:
        image: The image every container runs (``gputrain-trainer:local``).
        emulator_port: The emulator's loopback port, relayed to containers.
        label: ``gputrain-emu.run=<id>``, on every container and network of this run: what to
            filter on (``docker ps -a --filter label=...``) to find this run's containers among
            another run's.
    """

    image: str
    emulator_port: int
    gateway: str = ""
    label: str = field(default_factory=lambda: f"{CONTAINER_PREFIX}.run={uuid.uuid4().hex[:12]}")
    _relay: _Relay | None = field(default=None, repr=False)

    @classmethod
    def open(cls, image: str, emulator_port: int) -> "DockerHosts":
        """Check the engine and the image, and start the relay to the emulator.

        Raises:
            ContainerRefused: no engine answers, or the image is not built (one line, with the fix).
        """
        if docker("info", "--format", "{{.ServerVersion}}").returncode != 0:
            raise ContainerRefused("--containers needs a Docker engine and none answers; run scripts/docker-engine.sh")
        if docker("image", "inspect", image).returncode != 0:
            raise ContainerRefused(f"--containers runs the image {image}, which is not built here; run scripts/build-image.sh --tag {image}")
        gateway = bridge_gateway()
        hosts = cls(image, emulator_port, gateway)
        try:
            hosts._relay = _Relay((gateway, emulator_port), ("127.0.0.1", emulator_port))
        except OSError as err:
            raise ContainerRefused(f"--containers: cannot listen on the Docker gateway {gateway}:{emulator_port} for the emulator ({err})") from err
        return hosts

    def close(self) -> None:
        if self._relay is not None:
            self._relay.close()
            self._relay = None

    @property
    def endpoint_url(self) -> str:
        """The emulator as a container reaches it."""
        return f"http://{EMULATOR_HOST}:{self.emulator_port}"

    def run_command(
        self,
        name: str,
        *,
        entrypoint: str | None,
        command: Sequence[str],
        env: Mapping[str, str],
        mounts: Mapping[Path, str],
        network: str | None = None,
        hostname: str | None = None,
        publish: str | None = None,
        image: str | None = None,
    ) -> list[str]:
        """The ``docker run`` (attached: its output is the container's, SIGTERM is passed on) for one container
        of ``image`` (default: the built image)."""
        args = ["docker", "run", "--name", name, "--label", self.label, "--add-host", f"{EMULATOR_HOST}:host-gateway"]
        for source, target in mounts.items():
            args += ["-v", f"{Path(source).resolve()}:{target}"]
        for key, value in env.items():
            args += ["-e", f"{key}={value}"]
        if network is not None:
            args += ["--network", network]
        if hostname is not None:
            args += ["--hostname", hostname]
            # A network alias (what the other hosts resolve) exists on a user-defined network only.
            args += ["--network-alias", hostname] if network is not None else []
        if publish is not None:
            args += ["-p", publish]
        if entrypoint is not None:
            args += ["--entrypoint", entrypoint]
        return [*args, image or self.image, *command]

    def job_command(
        self, name: str, entrypoint: Sequence[str] | None, arguments: Sequence[str] | None, *, opt_ml: Path, env: Mapping[str, str],
        network: str | None, host: str, default_cmd: Sequence[str] = IMAGE_CMD, image: str | None = None,
    ) -> list[str]:
        """One instance of a training or processing job: its tree at ``/opt/ml``, named ``host`` (``image``: another
        local image than the built one)."""
        executable, command = image_command(entrypoint, arguments, default_cmd)
        return self.run_command(
            name, entrypoint=executable, command=command, env=env, mounts={opt_ml: "/opt/ml"}, network=network, hostname=host,
            image=image,
        )

    @contextlib.contextmanager
    def network(self, job_name: str, host_count: int) -> Iterator[str | None]:
        """A Docker network of the job's own for several hosts (``None`` for one: the default bridge)."""
        if host_count < 2:
            yield None
            return
        name = container_name(job_name, "net")
        created = docker("network", "create", "--label", self.label, name)
        if created.returncode != 0:
            raise ContainerRefused(f"--containers: docker network create failed: {created.stderr.strip()}")
        try:
            yield name
        finally:
            docker("network", "rm", name)

    @staticmethod
    def stop(name: str, grace_seconds: float) -> None:
        """``docker stop --time``: SIGTERM (through the image's tini), SIGKILL after ``grace_seconds`` (a stopped or
        missing container is fine)."""
        docker("stop", "--time", str(int(grace_seconds)), name, timeout=grace_seconds + DOCKER_TIMEOUT_SECONDS)

    @staticmethod
    def remove(*names: str) -> None:
        """Remove containers, running or not (a missing one is fine)."""
        if names:
            docker("rm", "-f", *names)
