"""A local runner that plays SageMaker hosting for endpoints deployed on the emulator.

moto accepts AWS::SageMaker::Model, EndpointConfig and Endpoint (through CloudFormation too) and
reports the endpoint InService, but runs no container, and its InvokeEndpoint answers with canned
data. For an endpoint, this runner does what SageMaker hosting does around the image:

1. reads the endpoint, its config and its model (DescribeEndpoint/-Config/-Model), and refuses in
   one line (:class:`HostingRefused`) a config with other than one ProductionVariant;
2. downloads the model's ``ModelDataUrl`` and extracts it into a model directory (SageMaker's
   ``/opt/ml/model``);
3. starts the real serving mode (``python -m trainer serve`` from ``training_image/``) with the
   model's Environment, on a free loopback port, and waits for ``/ping`` to turn healthy;
4. routes the emulator's InvokeEndpoint for that endpoint to the process's ``/invocations``, with
   SageMaker's error contract: a container answer other than 200 becomes a 424 ``ModelError``
   carrying ``OriginalStatusCode`` and ``OriginalMessage``; an unknown endpoint is a
   ``ValidationError``.

UpdateEndpoint (which moto lacks; see ``gaps._update_endpoint``) leaves the endpoint Updating with
the new config pending; while it serves an endpoint, this runner notices, starts the new config's
model the same way and, once its ``/ping`` answers, moves the route and the endpoint to it
(InService on the new config) and stops the old process. A new model that does not start leaves
the endpoint InService on the old config with a FailureReason, as SageMaker's rollback does.

With ``docker`` set (``run-local.sh --containers``), step 3 runs the built image instead, as
SageMaker hosting does: ``docker run IMAGE serve`` with the model mounted at ``/opt/ml/model`` and
the container's port 8080 published on the loopback port (:mod:`scripts.emulator.docker_hosts`).

Emulator only: on AWS, SageMaker runs the image on the GPU instances itself. The emulator has no
GPU, so the process is told to expect none (``EXPECTED_GPU_COUNT=0``), as the training runner does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from scripts.emulator.containers import end_process, image_not_played
from scripts.emulator.docker_hosts import DockerHosts, container_name
from scripts.emulator.aws import free_port

ROOT = Path(__file__).resolve().parents[2]
TRAINING_IMAGE_DIR = ROOT / "training_image"
START_TIMEOUT_SECONDS = 180
INVOKE_TIMEOUT_SECONDS = 60

ROUTES: dict[str, str] = {}
"""Endpoint name -> base URL of the local serving process (read by the patched InvokeEndpoint)."""


class HostingRefused(RuntimeError):
    """An endpoint config the runner cannot play; the message (one line) names the field and its value."""


@dataclass
class HostedEndpoint:
    """One endpoint served locally.

    Attributes:
        name: Endpoint name.
        model_name: The Model the endpoint's variant runs.
        model_data_url: The artifact that was extracted.
        url: ``http://127.0.0.1:<port>`` of the serving process.
        model_dir: Where the artifact was extracted (``/opt/ml/model``).
        log_file: The container's stdout and stderr.
        process: The serving process (in Docker: the attached ``docker run``).
        config_name: The endpoint config it serves.
        container: The Docker container's name (``--containers``), removed when it stops.
    """

    name: str
    model_name: str
    model_data_url: str
    url: str
    model_dir: Path
    log_file: Path
    process: subprocess.Popen[bytes]
    config_name: str = ""
    container: str | None = None


def _split_s3(uri: str) -> tuple[str, str]:
    bucket, _, key = uri[len("s3://") :].partition("/")
    return bucket, key


@dataclass
class LocalHosting:
    """Starts and stops local serving processes for emulated endpoints.

    Attributes:
        endpoint_url: The emulator.
        region: Region of the endpoints.
        work_dir: Model directories and container logs.
        on_event: Called with one-line progress messages.
        hosted: Endpoints served, by name.
        start_timeout_seconds: Longest wait for a new serving process's ``/ping`` to answer 200.
        docker: Serve in a container of the built image (``--containers``); ``None`` runs
            ``python -m trainer serve`` as a process of this machine.
    """

    endpoint_url: str
    region: str
    work_dir: Path
    on_event: Callable[[str], None] = print
    hosted: dict[str, HostedEndpoint] = field(default_factory=dict)
    start_timeout_seconds: float = START_TIMEOUT_SECONDS
    docker: DockerHosts | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _watcher: threading.Thread | None = None
    _failed: set[tuple[str, str]] = field(default_factory=set)

    def _client(self, service: str) -> Any:
        from scripts.emulator.aws import client

        return client(service, endpoint_url=self.endpoint_url, region=self.region)

    def serve(self, endpoint_name: str) -> HostedEndpoint:
        """Play SageMaker hosting for ``endpoint_name`` (and its later updates) until :meth:`stop`."""
        install_invoke_route()
        endpoint = self._client("sagemaker").describe_endpoint(EndpointName=endpoint_name)
        hosted = self._start(endpoint_name, endpoint["EndpointConfigName"])
        self.hosted[endpoint_name] = hosted
        ROUTES[endpoint_name] = hosted.url
        self._watch_updates()
        return hosted

    def _start(self, endpoint_name: str, config_name: str) -> HostedEndpoint:
        """Start and health-check the serving process of ``config_name``'s model (raises if it never
        gets healthy; :class:`HostingRefused` before anything starts for a config it cannot play)."""
        config = self._client("sagemaker").describe_endpoint_config(EndpointConfigName=config_name)
        variants = config.get("ProductionVariants") or []
        if len(variants) != 1:
            # One process serves one model: several variants would all be answered by the first.
            listed = ", ".join(
                f"{v.get('VariantName')}: {v.get('ModelName')} weight {v.get('InitialVariantWeight', 1.0)}" for v in variants
            )
            raise HostingRefused(
                f"ClientError: EndpointConfig {config_name} ProductionVariants [{listed}] is not played by the emulator's "
                f"hosting runner (one ProductionVariant is); nothing was started for {endpoint_name}."
            )
        model_name = variants[0]["ModelName"]
        return self.start_model(endpoint_name, config_name, model_name)

    def start_model(
        self, name: str, config_name: str, model_name: str, extra_env: dict[str, str] | None = None, label: str = "endpoint"
    ) -> HostedEndpoint:
        """Start and health-check ``model_name``'s serving process for ``name`` (an endpoint, or a
        transform job with ``extra_env``: SageMaker's ``SAGEMAKER_BATCH`` variables); raises if it
        never gets healthy."""
        sagemaker, s3 = self._client("sagemaker"), self._client("s3")
        endpoint_name = name
        model = sagemaker.describe_model(ModelName=model_name)
        containers = model.get("Containers") or []
        container = (containers[0] if len(containers) == 1 else None) if containers else model.get("PrimaryContainer")
        if not container:
            # An inference pipeline (several Containers) would be answered by one model server alone.
            raise HostingRefused(
                f"ClientError: Model {model_name} Containers (an inference pipeline) is not played by the emulator's hosting runner"
                f" (one PrimaryContainer is); nothing was started for {endpoint_name}."
            )
        foreign = image_not_played(f"Model {model_name} PrimaryContainer.Image", container.get("Image"), model.get("ModelArn", ""), "hosting")
        if foreign:
            raise HostingRefused(f"ClientError: {foreign}; nothing was started for {endpoint_name}.")
        model_data_url = container["ModelDataUrl"]

        base = self.work_dir / endpoint_name / config_name
        model_dir = base / "model"
        model_dir.mkdir(parents=True, exist_ok=True)
        archive = base / "model.tar.gz"
        bucket, key = _split_s3(model_data_url)
        s3.download_file(bucket, key, str(archive))
        with tarfile.open(archive) as tar:
            tar.extractall(model_dir, filter="data")
        self.on_event(f"{label} {endpoint_name}: {model_data_url} extracted to {model_dir} (SageMaker's /opt/ml/model)")

        port = free_port()
        served = {
            **(extra_env or {}),
            # The emulator has no GPU (see the module docstring).
            "EXPECTED_GPU_COUNT": "0",
            "CUDA_VISIBLE_DEVICES": "",
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "PYTHONUNBUFFERED": "1",
        }
        log_file = base / "container.log"
        container_id = None
        if self.docker is not None:
            # The image's own ENV, the model's Environment, SageMaker's port: nothing of this machine's.
            container_id = container_name(endpoint_name, config_name)
            command = self.docker.run_command(
                container_id,
                entrypoint=None,
                command=["serve"],
                env={**(container.get("Environment") or {}), **served, "AWS_ENDPOINT_URL": self.docker.endpoint_url},
                mounts={model_dir: "/opt/ml/model"},
                publish=f"127.0.0.1:{port}:8080",
            )
            cwd, env, what = None, dict(os.environ), f"{self.docker.image} serve (container {container_id})"
        else:
            env = {k: v for k, v in os.environ.items() if not k.startswith(("SM_", "SAGEMAKER_", "SERVE_", "TRAINING_"))}
            env.update(container.get("Environment") or {})
            env.update({**served, "SM_MODEL_DIR": str(model_dir), "SAGEMAKER_BIND_TO_PORT": str(port), "SERVE_HOST": "127.0.0.1"})
            command, cwd, what = [sys.executable, "-m", "trainer", "serve"], TRAINING_IMAGE_DIR, "python -m trainer serve"
        with log_file.open("wb") as sink:
            process = subprocess.Popen(command, cwd=cwd, env=env, stdout=sink, stderr=sink)
        hosted = HostedEndpoint(
            endpoint_name, model_name, model_data_url, f"http://127.0.0.1:{port}", model_dir, log_file, process, config_name,
            container_id,
        )
        started = time.monotonic()
        try:
            self._wait_healthy(hosted)
        except RuntimeError:
            self._terminate(hosted)
            raise
        self.on_event(f"{label} {endpoint_name}: {what} healthy on {hosted.url} after {time.monotonic() - started:.1f}s (log: {log_file})")
        return hosted

    # --- UpdateEndpoint ------------------------------------------------------------------------

    def _watch_updates(self) -> None:
        if self._watcher is None:
            self._watcher = threading.Thread(target=self._watch, name="local-hosting-updates", daemon=True)
            self._watcher.start()

    def _watch(self) -> None:
        from moto.sagemaker.models import sagemaker_backends

        while not self._stop.is_set():
            for backend in _region_backends(sagemaker_backends, self.region):
                for name, endpoint in list(backend.endpoints.items()):
                    if name not in self.hosted:
                        continue
                    pending = getattr(endpoint, "pending_deployment_summary", None)
                    if endpoint.endpoint_status == "Updating" and pending:
                        self.update(endpoint, pending["EndpointConfigName"])
                    elif (
                        endpoint.endpoint_status == "InService"
                        and endpoint.endpoint_config_name != self.hosted[name].config_name
                        and (name, endpoint.endpoint_config_name) not in self._failed
                    ):
                        # Emulator gap: moto plays CloudFormation's update of an
                        # AWS::SageMaker::Endpoint (scripts.promote's deploy) by deleting and
                        # recreating it, InService at once on the new config: start that model
                        # and move the route, as SageMaker's blue/green deployment would.
                        self._failed.add((name, endpoint.endpoint_config_name))
                        self.update(endpoint, endpoint.endpoint_config_name)
                        if self.hosted[name].config_name == endpoint.endpoint_config_name:
                            self._failed.discard((name, endpoint.endpoint_config_name))
            self._stop.wait(0.5)

    def update(self, endpoint: Any, config_name: str) -> None:
        """Move ``endpoint`` (moto's, Updating) to ``config_name``: new process first, then the route."""
        from moto.core.utils import utcnow

        name = endpoint.endpoint_name
        self.on_event(f"endpoint {name}: UpdateEndpoint to {config_name} (blue/green played locally)")
        try:
            hosted = self._start(name, config_name)
        except Exception as err:  # noqa: BLE001 - any failure to start rolls back, as on SageMaker
            endpoint.endpoint_status = "InService"
            why = f"{err}" if isinstance(err, HostingRefused) else f"the new model did not start: {err}"
            endpoint.failure_reason = f"Update to {config_name} rolled back: {why}"[:1024]
            endpoint.pending_deployment_summary = None
            endpoint.last_modified_time = utcnow()
            self.on_event(f"endpoint {name}: update rolled back; still serving {self.hosted[name].config_name}")
            return
        old = self.hosted[name]
        ROUTES[name] = hosted.url
        self.hosted[name] = hosted
        self._terminate(old)
        backend = _backend_of(endpoint)
        variants = backend.endpoint_configs[config_name].production_variants
        endpoint.production_variants = endpoint._process_production_variants(variants)
        endpoint.endpoint_config_name = config_name
        endpoint.failure_reason = None
        endpoint.pending_deployment_summary = None
        endpoint.endpoint_status = "InService"
        endpoint.last_modified_time = utcnow()
        self.on_event(f"endpoint {name}: InService on {config_name} ({hosted.model_data_url})")

    def _wait_healthy(self, hosted: HostedEndpoint) -> None:
        deadline = time.monotonic() + self.start_timeout_seconds
        last = ""
        while time.monotonic() < deadline:
            if hosted.process.poll() is not None:
                raise RuntimeError(f"serving process for {hosted.name} exited {hosted.process.returncode}; see {hosted.log_file}")
            try:
                with urllib.request.urlopen(hosted.url + "/ping", timeout=5) as reply:  # nosec B310 - loopback
                    if reply.status == 200:
                        return
            except urllib.error.HTTPError as err:
                last = err.read().decode("utf-8", "replace")
                if err.code == 503 and _start_failed(last):
                    raise RuntimeError(f"{hosted.name}'s model did not start: {_start_failed(last)} (see {hosted.log_file})") from None
            except OSError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"{hosted.name} never answered /ping 200 within {self.start_timeout_seconds:.0f}s: {last} (see {hosted.log_file})")

    def stop(self) -> None:
        """Stop watching for updates, stop every serving process (SIGTERM, then SIGKILL), drop its route."""
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=self.start_timeout_seconds + 30)
            self._watcher = None
        for name, hosted in list(self.hosted.items()):
            ROUTES.pop(name, None)
            self._terminate(hosted)
            del self.hosted[name]

    def _terminate(self, hosted: HostedEndpoint) -> None:
        """Stop one serving process (SIGTERM, then SIGKILL); in Docker, remove its container too."""
        end_process(hosted.process, grace_seconds=15)
        if hosted.container is not None and self.docker is not None:
            self.docker.remove(hosted.container)


def _start_failed(ping_body: str) -> str | None:
    """The serve mode's reason when its ``/ping`` 503 says the start failed (not "Starting: ...")."""
    try:
        error = json.loads(ping_body).get("error", "")
    except (ValueError, AttributeError):
        return None
    return error if error and not error.startswith("Starting") else None


def _region_backends(backends: Any, region: str) -> list[Any]:
    return [account_backends[region] for account_backends in backends.values() if region in account_backends]


def _backend_of(endpoint: Any) -> Any:
    from moto.sagemaker.models import sagemaker_backends

    account, region = endpoint.arn.split(":")[4], endpoint.arn.split(":")[3]
    return sagemaker_backends[account][region]


def install_invoke_route() -> None:
    """Route the emulator's InvokeEndpoint to local serving processes (undone with moto's patches).

    Gap: moto's InvokeEndpoint returns canned data for any name, existing or not. Here an endpoint
    that does not exist is SageMaker's ValidationError, one with a local process gets the
    process's answer, and any other (not InService, or no local process started for it) is a
    ValidationError naming the endpoint and why: never moto's canned body.
    """
    from moto.sagemaker.models import sagemaker_backends
    from moto.sagemakerruntime.responses import SageMakerRuntimeResponse

    from scripts.emulator.patching import PATCHES

    if getattr(SageMakerRuntimeResponse.invoke_endpoint, "_routes_locally", False):
        return
    def invoke_endpoint(self: Any) -> Any:
        name = self._get_param("EndpointName") or self.path.split("/")[2]
        endpoints = sagemaker_backends[self.current_account][self.region].endpoints
        if name not in endpoints:
            body = {"message": f"Endpoint {name} of account {self.current_account} not found."}
            # moto takes the status from a "status" header, not from the tuple.
            return 400, {"status": "400", "x-amzn-ErrorType": "ValidationError", "Content-Type": "application/json"}, json.dumps(body)
        if name not in ROUTES:
            # SageMaker answers only from a running model; the emulator has none for this
            # endpoint, so it refuses rather than return moto's canned body as a prediction.
            status = endpoints[name].endpoint_status
            why = (
                f"is {status}, not InService"
                if status != "InService"
                else "is InService in the emulator but no local serving process serves it (run it through "
                "scripts.emulator's lifecycle, whose local hosting runner starts the model)"
            )
            body = {"message": f"Endpoint {name} of account {self.current_account} {why}: nothing answered the invocation."}
            return 400, {"status": "400", "x-amzn-ErrorType": "ValidationError", "Content-Type": "application/json"}, json.dumps(body)
        request = urllib.request.Request(
            ROUTES[name] + "/invocations",
            data=self.body if isinstance(self.body, bytes) else str(self.body).encode("utf-8"),
            method="POST",
            headers={"Content-Type": self.headers.get("Content-Type", ""), "Accept": self.headers.get("Accept", "*/*")},
        )
        try:
            with urllib.request.urlopen(request, timeout=INVOKE_TIMEOUT_SECONDS) as reply:  # nosec B310 - loopback
                headers = {"Content-Type": reply.headers.get("Content-Type", "application/json"), "x-Amzn-Invoked-Production-Variant": "AllTraffic"}
                return 200, headers, reply.read()
        except urllib.error.HTTPError as err:
            original_message = err.read().decode("utf-8", "replace")
            body = {
                "message": f"Received client error ({err.code}) from primary with message \"{original_message}\".",
                "OriginalStatusCode": err.code,
                "OriginalMessage": original_message,
                "LogStreamArn": f"arn:aws:logs:{self.region}:{self.current_account}:log-group:/aws/sagemaker/Endpoints/{name}",
            }
            return 424, {"status": "424", "x-amzn-ErrorType": "ModelError", "Content-Type": "application/json"}, json.dumps(body)

    invoke_endpoint._routes_locally = True  # type: ignore[attr-defined]
    PATCHES.set(SageMakerRuntimeResponse, "invoke_endpoint", invoke_endpoint)
