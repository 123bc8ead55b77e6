"""Emulated SageMaker containers: the command a job names, its ``/opt/ml``, its hosts.

SageMaker starts the job's image once per instance with the job's tree mounted at ``/opt/ml``,
the request's ``ContainerEntrypoint``/``ContainerArguments`` in place of the image's
``ENTRYPOINT``/``CMD``, and host names ``algo-1`` .. ``algo-N`` that resolve to the instances.
The local runner plays the platform image the same way, with this machine's processes:

- the command: :func:`container_command` (Docker's rules: an entrypoint replaces the image's
  and drops its CMD; arguments alone replace the CMD), with the image's environment
  (:func:`image_environment`: its interpreter first on ``PATH``, ``trainer`` importable);
- ``/opt/ml``: every container runs in its own mount namespace (``unshare --mount``; with
  ``--map-root-user`` when not root) where :mod:`scripts.emulator.container_init` binds the
  host's tree onto ``/opt/ml``;
- hosts: a job with ``InstanceCount`` > 1 gets a private network (:class:`JobNetwork`): one
  network namespace per host (``eth0`` on one bridge, ``/etc/hosts`` naming ``algo-1`` ..
  ``algo-N``), so every host listens on the same ports, as on SageMaker. That needs root and
  ``ip``; without them the job is refused with one line.

What cannot be played is refused (:class:`ContainerRefused`), never run differently.
"""

from __future__ import annotations

import functools
import itertools
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

ROOT = Path(__file__).resolve().parents[2]
TRAINING_IMAGE_DIR = ROOT / "training_image"
# The image's ENTRYPOINT and CMD (training_image/Dockerfile), tini left out: the runner's own
# process handling forwards SIGTERM.
IMAGE_ENTRYPOINT = ("/opt/venv/bin/python", "-m", "trainer")
IMAGE_CMD = ("train",)
IMAGE_PYTHON = "/opt/venv/bin/python"
OPT_ML = "/opt/ml"
JOB_SUBNET = "10.213.0"
_network_ids = itertools.count(1)


class ContainerRefused(Exception):
    """The local runner cannot play this container faithfully; the message is the one line."""


def container_command(entrypoint: Sequence[str] | None, arguments: Sequence[str] | None, default_cmd: Sequence[str] = IMAGE_CMD) -> list[str]:
    """The process a container runs, by Docker's rules for a job's entrypoint and arguments.

    ``ContainerEntrypoint`` replaces the image's ``ENTRYPOINT`` (and drops its ``CMD``);
    ``ContainerArguments`` replace the ``CMD``. The image's interpreter path is mapped to the
    one the emulator runs (first on the container's ``PATH``, as ``/opt/venv/bin`` is in the image).
    """
    if entrypoint:
        command = [*entrypoint, *(arguments or [])]
    else:
        command = [*IMAGE_ENTRYPOINT, *(arguments if arguments else default_cmd)]
    return ["python" if part == IMAGE_PYTHON else part for part in command]


def image_environment(base: Mapping[str, str]) -> dict[str, str]:
    """``base`` plus what the image's ``ENV`` gives every process in it.

    ``PATH`` starts with the image's wrapper directory (``training_image/bin``: the image's
    ``python``/``python3``, which run a job's command under ``trainer.user_code.guard``; it is
    ``/opt/trainer/bin`` in the image) and then this interpreter's directory (the image's
    ``/opt/venv/bin``), ``TRAINER_PYTHON`` names the real interpreter, and ``trainer`` is
    importable from any directory.
    """
    env = dict(base)
    wrappers = TRAINING_IMAGE_DIR / "bin"
    interpreter_dir = str(Path(sys.executable).parent)
    first = [str(wrappers)] if wrappers.is_dir() else []
    env["PATH"] = os.pathsep.join([*first, interpreter_dir, env.get("PATH", os.defpath)])
    # The wrappers exec the image's real interpreter (/opt/venv/bin/python3 in the image).
    env["TRAINER_PYTHON"] = sys.executable
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(TRAINING_IMAGE_DIR), env.get("PYTHONPATH", "")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    return env


@functools.lru_cache(maxsize=1)
def mount_namespace_prefix() -> tuple[str, ...]:
    """The ``unshare`` invocation that gives one process its own mount namespace here.

    Raises:
        ContainerRefused: when this machine allows none (no ``unshare``, or user namespaces off).
    """
    if shutil.which("unshare") is None:
        raise ContainerRefused("the local runner needs util-linux 'unshare' to give a container its own /opt/ml; install util-linux")
    prefix = ("unshare", "--mount") if os.geteuid() == 0 else ("unshare", "--mount", "--map-root-user")
    probe = subprocess.run([*prefix, "true"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        raise ContainerRefused(
            f"the local runner cannot give a container its own /opt/ml here ({' '.join(prefix)} failed: "
            f"{probe.stderr.strip() or probe.returncode}); run the emulator as root or enable unprivileged user namespaces"
        )
    return prefix


def host_names(count: int) -> list[str]:
    """SageMaker's host names for ``count`` instances."""
    return [f"algo-{index}" for index in range(1, count + 1)]


@dataclass
class JobNetwork:
    """A private network for one multi-host job: a network namespace per host on one bridge.

    Nothing is added to the machine's own network namespace: the bridge lives in a namespace of
    its own, and deleting the namespaces (:meth:`down`) removes every link.

    Attributes:
        hosts: ``algo-1`` .. ``algo-N``.
        work_dir: Where the job's ``/etc/hosts`` is written.
    """

    hosts: list[str]
    work_dir: Path
    prefix: str = field(default_factory=lambda: f"emu{os.getpid()}n{next(_network_ids)}")
    _created: list[str] = field(default_factory=list)

    def namespace(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    @property
    def etc_hosts(self) -> Path:
        return self.work_dir / "etc-hosts"

    def address(self, host: str) -> str:
        return f"{JOB_SUBNET}.{self.hosts.index(host) + 1}"

    def up(self) -> None:
        """Create the namespaces, links and ``/etc/hosts``.

        Raises:
            ContainerRefused: without root or ``ip`` (the job is refused, not run on one host).
        """
        if os.geteuid() != 0 or shutil.which("ip") is None:
            raise ContainerRefused(
                f"InstanceCount {len(self.hosts)}: the local runner plays several hosts with one network namespace "
                "per host, which needs root and iproute2 ('ip'); run the emulator as root or use InstanceCount 1"
            )
        switch = f"{self.prefix}-sw"
        try:
            self._ip("netns", "add", switch)
            self._created.append(switch)
            self._ip("-n", switch, "link", "add", "br0", "type", "bridge")
            self._ip("-n", switch, "link", "set", "br0", "up")
            for index, host in enumerate(self.hosts, start=1):
                namespace = self.namespace(host)
                self._ip("netns", "add", namespace)
                self._created.append(namespace)
                self._ip("-n", namespace, "link", "set", "lo", "up")
                self._ip("link", "add", "eth0", "netns", namespace, "type", "veth", "peer", "name", f"port{index}", "netns", switch)
                self._ip("-n", namespace, "addr", "add", f"{self.address(host)}/24", "dev", "eth0")
                self._ip("-n", namespace, "link", "set", "eth0", "up")
                self._ip("-n", switch, "link", "set", f"port{index}", "master", "br0", "up")
        except ContainerRefused:
            self.down()
            raise
        self.work_dir.mkdir(parents=True, exist_ok=True)
        lines = ["127.0.0.1 localhost", *(f"{self.address(h)} {h}" for h in self.hosts)]
        self.etc_hosts.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def down(self) -> None:
        """Delete every namespace this network created (their links go with them)."""
        while self._created:
            subprocess.run(["ip", "netns", "del", self._created.pop()], capture_output=True, check=False)

    def prefix_for(self, host: str) -> list[str]:
        return ["ip", "netns", "exec", self.namespace(host)]

    @staticmethod
    def _ip(*args: str) -> None:
        result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise ContainerRefused(f"the local runner could not build the job's host network (ip {' '.join(args)}: {result.stderr.strip()})")

    def __enter__(self) -> "JobNetwork":
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()


def namespaced(command: Sequence[str], opt_ml: Path, *, network: JobNetwork | None = None, host: str = "algo-1") -> list[str]:
    """``command`` as one emulated container: own mount namespace, ``opt_ml`` at ``/opt/ml``.

    With ``network``, the container runs in ``host``'s network namespace with the job's
    ``/etc/hosts``.
    """
    init = [sys.executable, str(Path(__file__).with_name("container_init.py")), "--opt-ml", str(opt_ml)]
    if network is not None:
        init += ["--etc-hosts", str(network.etc_hosts)]
    wrapped = [*mount_namespace_prefix(), *init, "--", *command]
    return [*network.prefix_for(host), *wrapped] if network is not None else wrapped


def end_process(process: subprocess.Popen[bytes], grace_seconds: float = 30) -> None:
    """SIGTERM, then SIGKILL after ``grace_seconds``, as SageMaker ends a container (and hosting a model's)."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=grace_seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=30)


def image_not_played(field: str, image: Any, arn: str, runner: str) -> str | None:
    """Why a job's (or model's) image that is not in its own account's ECR in its region is not played,
    or None: the runners run the platform's image (its code here, or the image built from it) whatever
    the request names, so one naming another image (AWS's framework containers, Docker Hub) would run
    code it did not ask for. ``arn``: the job's or model's ARN (its account and region)."""
    parts = arn.split(":")
    region, account = (parts[3], parts[4]) if len(parts) > 5 else ("", "")
    registry = f"{account}.dkr.ecr.{region}.amazonaws.com"
    if isinstance(image, str) and re.fullmatch(rf"{re.escape(registry)}(\.cn)?/[a-z0-9][a-z0-9._/-]*([:@].+)?", image):
        return None
    return (
        f"{field} {image} is not played by the emulator's {runner} runner (an image of this account's ECR,"
        f" {registry}/<repository>, is: it runs the platform's image)"
    )
