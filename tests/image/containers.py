"""Running the built training image as SageMaker runs it: ``docker run`` with the job's tree at /opt/ml.

Every container gets a unique name and is removed when its test ends; every wait is bounded, so a
hung container fails a test instead of the CI job.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scripts.emulator.docker_hosts import IMAGE_TAG
from tests.trainer.helpers import ROOT

BUILD_SCRIPT = ROOT / "scripts" / "build-image.sh"
ENGINE_SCRIPT = ROOT / "scripts" / "docker-engine.sh"
TAG = IMAGE_TAG
# A cold build downloads ~3 GB of wheels and installs them on 2 cores (~5-8 min); from the layer
# cache it takes seconds.
BUILD_TIMEOUT_SECONDS = 1500
RUN_TIMEOUT_SECONDS = 300
# What the tests' CPU-only jobs tell the GPU check (as tests/trainer's processes do).
CPU_ONLY = {"EXPECTED_GPU_COUNT": "0"}


def docker(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    """One docker CLI command, bounded; ``check`` raises with its output on a non-zero exit."""
    completed = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=False)
    if check and completed.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} -> exit {completed.returncode}\n{completed.stdout[-3000:]}\n{completed.stderr[-3000:]}")
    return completed


@dataclass(frozen=True)
class Finished:
    """A container that ran to its end.

    Attributes:
        returncode: The container's exit status (tini passes the trainer's on).
        stdout: What it printed on stdout.
        stderr: What it printed on stderr.
    """

    returncode: int
    stdout: str
    stderr: str

    def explain(self) -> str:
        return f"exit {self.returncode}\n--- stdout ---\n{self.stdout[-4000:]}\n--- stderr ---\n{self.stderr[-4000:]}"


def run_args(
    image: str,
    command: Sequence[str] = (),
    *,
    opt_ml: Path | None = None,
    mounts: dict[Path, str] | None = None,
    env: dict[str, str] | None = None,
    entrypoint: str | None = None,
    name: str | None = None,
    network: str | None = None,
    hostname: str | None = None,
    publish: str | None = None,
) -> list[str]:
    """``docker run`` options for one container: the job's tree at /opt/ml, CPU-only unless ``env`` says otherwise."""
    args = ["run", "--name", name or f"gputrain-test-{uuid.uuid4().hex[:10]}"]
    if opt_ml is not None:
        args += ["-v", f"{opt_ml}:/opt/ml"]
    for source, target in (mounts or {}).items():
        args += ["-v", f"{source}:{target}"]
    for key, value in {**CPU_ONLY, **(env or {})}.items():
        args += ["-e", f"{key}={value}"]
    if entrypoint is not None:
        args += ["--entrypoint", entrypoint]
    if network is not None:
        args += ["--network", network]
    if hostname is not None:
        args += ["--hostname", hostname, "--network-alias", hostname]
    if publish is not None:
        args += ["-p", publish]
    return [*args, image, *command]


def run(image: str, command: Sequence[str] = (), *, timeout: float = RUN_TIMEOUT_SECONDS, **options: Any) -> Finished:
    """Runs one container to its end and removes it."""
    args = run_args(image, command, **options)
    name = args[2]
    try:
        completed = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=False)
    finally:
        remove(name)
    return Finished(completed.returncode, completed.stdout, completed.stderr)


def remove(name: str) -> None:
    subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60, check=False)


def start(image: str, command: Sequence[str] = (), **options: Any) -> str:
    """Starts a detached container; returns its name (the caller removes it)."""
    args = run_args(image, command, **options)
    docker(args[0], "-d", *args[1:])
    return args[2]


@contextmanager
def started(image: str, command: Sequence[str] = (), **options: Any) -> Iterator[str]:
    """A detached container (its name), removed at the end of the block whatever happened."""
    options.setdefault("name", f"gputrain-test-{uuid.uuid4().hex[:10]}")
    try:
        yield start(image, command, **options)
    finally:
        remove(options["name"])


def logs(name: str) -> tuple[str, str]:
    completed = docker("logs", name, check=False)
    return completed.stdout, completed.stderr


def wait_for_log(name: str, text: str, timeout: float = RUN_TIMEOUT_SECONDS) -> str:
    """Polls the container's stdout until it contains ``text``; returns stdout so far."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stdout, stderr = logs(name)
        if text in stdout:
            return stdout
        if not running(name):
            raise AssertionError(f"{name} ended without printing {text!r}:\n{stdout[-4000:]}\n{stderr[-4000:]}")
        time.sleep(0.5)
    raise AssertionError(f"{name} did not print {text!r} within {timeout:.0f} s")


def running(name: str) -> bool:
    state = docker("inspect", "--format", "{{.State.Running}}", name, check=False)
    return state.stdout.strip() == "true"


def wait(name: str, timeout: float = RUN_TIMEOUT_SECONDS) -> int:
    """The container's exit status once it has ended."""
    return int(docker("wait", name, timeout=timeout).stdout.strip())


def inspect_image(image: str) -> dict[str, Any]:
    return json.loads(docker("image", "inspect", image).stdout)[0]


def published_port(name: str, port: int = 8080) -> int:
    """The loopback port Docker gave the container's ``port`` (``-p 127.0.0.1::8080``)."""
    mapping = docker("port", name, f"{port}/tcp").stdout.split()[0]
    return int(mapping.rsplit(":", 1)[1])
