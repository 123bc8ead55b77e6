"""Running ``python -m trainer serve`` as SageMaker does: a model directory, a process, a port.

Every server is a separate process bound to loopback, stopped with SIGTERM (then SIGKILL) when the
test ends, and every wait is bounded, so a hung server fails a test instead of the CI job.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.trainer.helpers import TRAINING_IMAGE, free_ports, trainer_command, trainer_env

START_TIMEOUT_SECONDS = 120
REQUEST_TIMEOUT_SECONDS = 30


@dataclass(frozen=True)
class Reply:
    """One HTTP answer: status, body bytes, content type."""

    status: int
    body: bytes
    content_type: str

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True)
class Server:
    """A running serving process.

    Attributes:
        url: ``http://127.0.0.1:<port>``.
        process: The process (stdout and stderr go to ``log``).
        log: Its combined output.
    """

    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def request(
        self, method: str, path: str, body: bytes | None = None, content_type: str | None = None, accept: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Reply:
        """One request, bounded; HTTP errors are returned, not raised."""
        headers = dict(headers or {})
        if content_type is not None:
            headers["Content-Type"] = content_type
        if accept is not None:
            headers["Accept"] = accept
        request = urllib.request.Request(self.url + path, data=body, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_SECONDS) as response:  # nosec B310 - loopback
                return Reply(response.status, response.read(), response.headers.get("Content-Type", ""))
        except urllib.error.HTTPError as err:
            return Reply(err.code, err.read(), err.headers.get("Content-Type", ""))

    def ping(self) -> Reply:
        return self.request("GET", "/ping")

    def invoke(
        self, body: bytes | str, content_type: str | None = "application/json", accept: str | None = None,
        attributes: str | None = None,
    ) -> Reply:
        """``POST /invocations``; ``attributes``: the ``X-Amzn-SageMaker-Custom-Attributes`` header."""
        data = body.encode() if isinstance(body, str) else body
        headers = {"X-Amzn-SageMaker-Custom-Attributes": attributes} if attributes is not None else None
        return self.request("POST", "/invocations", data, content_type, accept, headers)

    def stats(self) -> dict[str, Any]:
        return self.request("GET", "/stats").json()

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


@contextmanager
def serving(model_dir: Path, work: Path, *, wait_for: str = "ready", **env: Any) -> Iterator[Server]:
    """Starts a server on a free loopback port and waits until it is ready or has failed to start.

    Args:
        model_dir: Served as SM_MODEL_DIR.
        work: Directory for the process log.
        wait_for: ``ready`` (``/ping`` 200) or ``failed`` (the ``serve-failed`` log line, and the port answering).
        env: Extra environment variables (``EXPECTED_GPU_COUNT=0`` unless overridden).
    """
    work.mkdir(parents=True, exist_ok=True)
    (port,) = free_ports(1)
    log = work / f"serve-{port}.log"
    environment = trainer_env(
        work, SM_MODEL_DIR=model_dir, SAGEMAKER_BIND_TO_PORT=port, SERVE_HOST="127.0.0.1", **env
    )
    with log.open("wb") as sink:
        process = subprocess.Popen(
            trainer_command("serve"), cwd=TRAINING_IMAGE, env=environment, stdout=sink, stderr=sink
        )
    server = Server(f"http://127.0.0.1:{port}", process, log)
    try:
        _wait(server, wait_for)
        yield server
    finally:
        stop(process)


def _wait(server: Server, wait_for: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise AssertionError(f"server exited with {server.process.returncode}:\n{server.output()[-4000:]}")
        if wait_for == "failed" and "serve-failed" in server.output():
            try:  # the line can come before the port is bound: failed, and answering /ping with why
                server.ping()
                return
            except OSError:
                pass
        if wait_for == "ready":
            try:
                if server.ping().status == 200:
                    return
            except OSError:
                pass  # not listening yet
        time.sleep(0.2)
    raise AssertionError(f"server not {wait_for} within {START_TIMEOUT_SECONDS}s:\n{server.output()[-4000:]}")


def stop(process: subprocess.Popen[bytes], timeout: float = 15) -> int:
    """SIGTERM, then SIGKILL after ``timeout``; returns the exit status."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout)
    return process.returncode


def save_tiny_model(model_dir: Path, num_features: int = 4, num_classes: int = 3, seed: int = 7) -> Any:
    """The trainer's layout (``model.keras`` ending in logits + ``trainer_config.json``); returns the model."""
    import keras

    keras.utils.set_random_seed(seed)
    inputs = keras.Input(shape=(num_features,), name="features")
    hidden = keras.layers.Dense(8, activation="relu", name="dense_0")(inputs)
    logits = keras.layers.Dense(num_classes, dtype="float32", name="logits")(hidden)
    model = keras.Model(inputs, logits, name="mlp")
    model_dir.mkdir(parents=True, exist_ok=True)
    model.save(model_dir / "model.keras")
    config = {"data": {"num_features": num_features, "num_classes": num_classes}, "hyperparameters": {"model": "mlp"}}
    (model_dir / "trainer_config.json").write_text(json.dumps(config))
    return model


def softmax_rows(logits: Any) -> list[list[float]]:
    import numpy as np

    values = np.asarray(logits, dtype=np.float64)
    exp = np.exp(values - values.max(axis=1, keepdims=True))
    return (exp / exp.sum(axis=1, keepdims=True)).tolist()
