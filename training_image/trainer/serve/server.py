"""The HTTP server SageMaker hosting talks to, and its start-up sequence.

Why aiohttp: the server's job is to hold many concurrent connections cheaply while requests
wait to be batched onto one model call, so it must be asynchronous; aiohttp is a mature asyncio
HTTP server (keep-alive, request size limits, graceful shutdown on SIGTERM) in one small wheel
with no framework around it, where Flask/gunicorn (sagemaker-inference-toolkit uses a Java model
server) would need worker processes that each load the model onto the GPU, and FastAPI/uvicorn
brings validation and ASGI layers this three-route contract does not need.

Batch transform: SageMaker starts this same server with ``SAGEMAKER_BATCH=true`` and asks
``GET /execution-parameters`` how to call it (concurrency, batch strategy, payload size) for what
the job left unset; :func:`execution_parameters` answers from the settings and the devices found.

Start-up: the port opens at once, so SageMaker's ``/ping`` gets an answer (503 while loading),
then a background thread verifies the GPUs (the same check as training: a host that does not
show the GPUs it promises never turns healthy, so SageMaker replaces it instead of serving from
CPU), loads the model once, compiles its predict function and warms it up on the batch sizes it
will see. Only then does ``/ping`` answer 200. A failed start keeps ``/ping`` at 503 with the
reason, and the reason is logged.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import functools
import json
import re
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Optional

import numpy as np
from aiohttp import web

from trainer.contract.errors import ConfigError, TrainerError
from trainer.gpu_check import inspect_devices, resolve_expectation, smoke_test
from trainer.logs import log, log_json
from trainer.serve import codec, handlers, tfserving
from trainer.serve.batching import DynamicBatcher, QueueFull
from trainer.serve.model import (
    LoadedModel,
    ModelLoadError,
    ModelSource,
    TensorModel,
    find_models,
    latest,
    load_model,
    load_tensor_model,
    version_number,
)
from trainer.contract.serving import MAX_PAYLOAD_IN_MB, MB, WITHOUT_EFFECT, ServeSettings, load_settings

# Threads that run the user's inference.py handlers: each request's handler runs off the event
# loop, so a slow handler (or one calling back into /v1/models) never blocks the server.
HANDLER_THREADS = 8
SAGEMAKER_DEFAULT_PAYLOAD_MB = 6
"""SageMaker's MaxPayloadInMB where neither the job nor the container sets one."""
CUSTOM_ATTRIBUTES_HEADER = "X-Amzn-SageMaker-Custom-Attributes"
_TFS_ROUTE = re.compile(r"^(?P<name>[^/:]+)(?:/versions/(?P<version>\d+))?:(?P<method>\w+)$")
# tfs_utils.parse_tfs_custom_attributes's pattern, as AWS's container reads the header.
_TFS_ATTRIBUTE = re.compile(r"(tfs-[a-z\-]+=[^,]+)")
TFS_METHODS = ("predict",)
"""TF Serving's REST methods this server answers (``classify`` and ``regress`` take tf.Example protos)."""
EXTERNAL_PATHS = ("/invocations",)
"""The prediction routes SageMaker fronts, where its request limit applies; the loopback TF Serving
route (``context.rest_uri``) is the container's own, as TF Serving is behind nginx's
``client_max_body_size 0`` in AWS's container: an ``input_handler`` may expand a small request."""
SHUTDOWN_TIMEOUT_S = 10.0
DEFAULT_DRAIN_S = 60.0
"""How long SIGTERM waits for the predictions and ``inference.py`` calls in flight when ``SAGEMAKER_MODEL_SERVER_TIMEOUT`` is 0."""


@dataclass(frozen=True)
class Servable:
    """One model version this server answers for, as TF Serving serves every version of every model.

    Attributes:
        name: The model's name (``tfs-model-name``, ``/v1/models/<name>``).
        version: Its version (``tfs-model-version``); None outside a version folder.
        tensor_replicas: The version loaded on each device, for TF Serving's contract; empty for
            the built-in classifier (``ServingState.replicas``) and a ``model_fn`` model.
    """

    name: str
    version: str | None
    tensor_replicas: tuple[TensorModel, ...] = ()

    @property
    def key(self) -> str:
        """What a parsed request carries to the batcher, which runs it on this servable."""
        return f"{self.name}:{self.version}"


@dataclass
class ServingState:
    """What the handlers need: readiness, the model, the batcher.

    Attributes:
        settings: The resolved settings.
        model: The loaded model (the first replica), once start-up has loaded it.
        replicas: Every replica (one per device), once loaded.
        ready: ``/ping`` answers 200 only when this is set (after the warm-up).
        failure: Why start-up failed, for ``/ping`` and the log.
        gpu_report: The ``[gpu-check]`` report.
        batcher: Created on the event loop once the replicas are known.
        tensor_replicas: The model as TF Serving serves it (a model that is not the built-in
            classifier), one per device; requests reach them through the same batcher.
        user_code: ``code/inference.py``, when the model carries one.
        workers: The devices that run model calls (one per replica: each GPU, or the CPU), once
            the GPU check has found them.
        servables: Every model version served, in the order found; empty until loaded.
        default_model: The model a request that names none gets; None: ``settings.model_name``.
        not_served: Model versions found but not loaded (``name:version``): the classifier
            (``SERVE_MODEL_OUTPUT``) serves one; a request naming another is told so.
        draining: SIGTERM came: new ``/invocations`` get 503 while the predictions in flight finish.
        requests_in_flight: ``/invocations`` and TF Serving requests accepted and not yet answered,
            counted from their headers on (a body still arriving counts), for the drain.
    """

    settings: ServeSettings
    model: LoadedModel | None = None
    replicas: list[LoadedModel] = field(default_factory=list)
    ready: threading.Event = field(default_factory=threading.Event)
    failure: str | None = None
    gpu_report: dict[str, Any] = field(default_factory=dict)
    batcher: DynamicBatcher | None = None
    tensor_replicas: list[TensorModel] = field(default_factory=list)
    user_code: handlers.UserCode | None = None
    workers: int = 0
    servables: list[Servable] = field(default_factory=list)
    default_model: str | None = None
    not_served: list[str] = field(default_factory=list)
    draining: bool = False
    requests_in_flight: int = 0
    _handler_pool: concurrent.futures.ThreadPoolExecutor | None = None
    _handler_calls: set[concurrent.futures.Future[Any]] = field(default_factory=set)

    @property
    def describe_model(self) -> dict[str, Any] | None:
        if self.model is not None:
            return self.model.describe()
        if self.tensor_replicas:
            return self.tensor_replicas[0].describe()
        return None

    @property
    def default_name(self) -> str:
        """The default model's name."""
        return self.default_model or self.settings.model_name

    def served(self) -> list[Servable]:
        """The servables; one (the default model, unversioned) when the state was built with
        replicas only, or the model is the user's ``model_fn``'s."""
        if self.servables:
            return self.servables
        return [Servable(self.default_name, None, tuple(self.tensor_replicas))]

    def servable(self, key: str) -> Servable:
        """The servable a parsed request was routed to; for a request with no key, the default
        model's highest version (TF Serving's answer to a request that names neither)."""
        served = self.served()
        found = next((s for s in served if s.key == key), None)
        if found is not None:
            return found
        defaults = [s for s in served if s.name == self.default_name] or served
        return max(defaults, key=lambda s: -1 if s.version is None else int(s.version))

    @property
    def batching(self) -> bool:
        """Whether concurrent requests share model calls: the classifier's setting, or TF Serving's opt-in."""
        return self.settings.batching if self.model is not None else self.settings.tfs_batching

    def run_handler(self, function: Callable[..., Any], *args: Any) -> asyncio.Future[Any]:
        """Runs ``function`` in a handler thread; the call counts as in flight until it returns,
        even if its request timed out, so shutdown keeps the loopback route up for it."""
        if self._handler_pool is None:
            self._handler_pool = concurrent.futures.ThreadPoolExecutor(HANDLER_THREADS, thread_name_prefix="inference-py")
        call = self._handler_pool.submit(function, *args)
        self._handler_calls.add(call)
        call.add_done_callback(self._handler_calls.discard)
        return asyncio.wrap_future(call)

    async def drain(self, timeout: float) -> tuple[int, int]:
        """Waits up to ``timeout`` seconds for the prediction requests and handler calls in flight
        (a call outlives its request when the request timed out); returns how many of each are left."""
        deadline = time.monotonic() + timeout
        while (self.requests_in_flight or self._handler_calls) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return self.requests_in_flight, len(self._handler_calls)

    def shutdown(self) -> None:
        if self._handler_pool is not None:
            self._handler_pool.shutdown(wait=False, cancel_futures=True)


STATE = web.AppKey("state", ServingState)


def verify_gpus(settings: ServeSettings) -> dict[str, Any]:
    """The GPU verification for serving: expected count, then a bounded matmul on every GPU.

    Raises:
        GpuCheckError: the host does not show the GPUs it promises, or one does not compute.
    """
    import tensorflow as tf

    expectation = resolve_expectation(settings.expected_gpu_count, None, settings.instance_type)
    inventory = inspect_devices(expectation, logical_cpu_devices=max(1, settings.replicas))
    # The model runs on the first GPU; every GPU still has to work, since SageMaker bills them all.
    strategy = tf.distribute.MirroredStrategy() if inventory.uses_gpus else tf.distribute.OneDeviceStrategy("/cpu:0")
    # An endpoint runs no collective: a matmul per GPU, no NCCL all-reduce (which could hang start-up).
    return smoke_test(strategy, inventory, all_reduce=False)


def replica_devices(report: dict[str, Any], replicas: int) -> list[str]:
    """One device per replica: the GPUs found (or the first ``replicas``), else the CPU(s)."""
    if report.get("expected", 0) > 0:
        found = int(report.get("found", 1))
        return [f"/GPU:{index}" for index in range(min(replicas, found) if replicas else found)]
    return [f"/CPU:{index}" for index in range(max(1, int(report.get("logical_cpu_devices", 1))))]


def start_up(state: ServingState, gpu_check: Callable[[ServeSettings], dict[str, Any]] = verify_gpus) -> None:
    """GPU check, load, compile, warm up; sets ``state.ready`` or ``state.failure``. Never raises."""
    settings = state.settings
    started = time.monotonic()
    try:
        state.gpu_report = gpu_check(settings)
        devices = replica_devices(state.gpu_report, settings.replicas)
        state.workers = len(devices)
        # The user's code comes after the GPU check and before the model: its requirements and
        # import fail the start with one line, and its model_fn may replace the model loading.
        state.user_code = handlers.load(settings.model_dir)
        # Every bucket, on every replica: no request meets a batch size the model has not run.
        warm_sizes: list[int] = list(settings.batch_buckets) if settings.warmup else []
        described: dict[str, Any] = {}
        if state.user_code is not None and state.user_code.loads_own_model:
            gpu_id = 0 if state.gpu_report.get("expected", 0) > 0 else None
            state.user_code.load_model(settings.model_dir, gpu_id=gpu_id)
            warm_sizes, devices = [], ["model_fn"]
            described = {"kind": "model_fn"}
        else:
            sources = find_models(settings.model_dir, settings.model_name)
            state.default_model = default_model(sources, settings)
            chosen = latest(sources, state.default_model)
            if serves_as_classifier(settings, sources):
                replicas = [load_model(settings.model_dir, settings.output, device, source=chosen) for device in devices]
                for replica in replicas:
                    replica.buckets = padding_buckets(settings, replica.device)
                    for size in warm_sizes:
                        replica.predict(np.zeros((size, replica.num_features), dtype=np.float32))
                state.replicas = replicas
                state.model = replicas[0]
                state.servables = [Servable(chosen.name, chosen.version)]
                described = replicas[0].describe()
                # The classifier is one model; the other versions found answer 404 saying so, never another's answer.
                state.not_served = [f"{s.name}:{s.version}" for s in sources if s is not chosen]
                if state.not_served:
                    log("serve-classifier-serves-one", model=chosen.name, version=chosen.version or "none",
                        not_served=",".join(state.not_served))  # fmt: skip
            else:
                state.servables = load_servables(settings, sources, devices)
                # The default model's highest version answers a request that names neither.
                default = state.servable(chosen_key(chosen))
                warmed = warm_sizes
                for servable in state.servables:
                    sizes = [servable_replica.warm_up(warm_sizes) for servable_replica in servable.tensor_replicas]
                    if servable is default and sizes:
                        warmed = sizes[0]  # what the log line reports: the default model's warm-up
                warm_sizes = warmed
                state.tensor_replicas = list(default.tensor_replicas)
                described = state.tensor_replicas[0].describe()
                described["signatures"] = ",".join(described["signatures"])
            described["models"] = ",".join(f"{s.name}:{s.version or '-'}" for s in state.servables)
            described["default_model"] = state.default_model
        log(
            "serve-ready",
            seconds=f"{time.monotonic() - started:.2f}",
            warmed_batch_sizes=",".join(map(str, warm_sizes)) or "none",
            replicas=",".join(devices),
            user_code=state.user_code.family if state.user_code else "none",
            **{k: v for k, v in described.items() if k != "device"},
        )
        if settings.batch_transform:
            log(
                "serve-batch-transform",
                **execution_parameters(settings, state.workers, user_code=state.user_code is not None, batching=state.batching),
            )
        state.ready.set()
    except TrainerError as err:
        state.failure = " ".join(str(err).split())
        log("serve-failed", reason=repr(state.failure))
    except Exception as err:  # noqa: BLE001 - a failed start must stay visible in /ping, not kill the port
        state.failure = f"Unexpected {type(err).__name__} during start-up: {err}".splitlines()[0]
        log("serve-failed", reason=repr(state.failure))


def default_model(sources: list[ModelSource], settings: ServeSettings) -> str:
    """The model a request that names none gets: the one ``SAGEMAKER_TFS_DEFAULT_MODEL_NAME`` names,
    else the first found, as AWS's ``serve.py`` picks it (``basename(models[0])``).

    Raises:
        ModelLoadError: the variable names no model found (AWS's container never turns healthy then).
    """
    names = list(dict.fromkeys(s.name for s in sources))
    if settings.model_name_variable is None:
        return names[0]
    if settings.model_name not in names:
        raise ModelLoadError(
            f"{settings.model_name_variable}={settings.model_name} names no model in {settings.model_dir}; found "
            f"{', '.join(names)} (a model is named after the folder holding its version folders, 'model' for "
            f"1/ at the root). Set it to one of them, or unset it to make {names[0]} the default."
        )
    return settings.model_name


def chosen_key(source: ModelSource) -> str:
    """The :attr:`Servable.key` of a source."""
    return Servable(source.name, source.version).key


def load_servables(settings: ServeSettings, sources: list[ModelSource], devices: list[str]) -> list[Servable]:
    """Every model version found, loaded on every device for TF Serving's contract, as TF Serving
    loads every version of every model AWS's container configures."""
    return [
        Servable(source.name, source.version, tuple(load_tensor_model(settings.model_dir, device, source=source) for device in devices))
        for source in sources
    ]


def padding_buckets(settings: ServeSettings, device: str | None) -> tuple[int, ...]:
    """The batch sizes the classifier pads its calls to on ``device``: the buckets on a GPU, none on CPU.

    On a GPU a new batch shape costs kernel selection and autotuning, and padded rows cost nothing
    in parallel; on CPU a new shape costs next to nothing and padded rows cost compute.
    """
    return settings.batch_buckets if "GPU" in (device or "").upper() else ()


def serves_as_classifier(settings: ServeSettings, sources: list[ModelSource] | None = None) -> bool:
    """The built-in classifier answers (class and probabilities): the trainer's model, or any
    model with ``SERVE_MODEL_OUTPUT=logits|probabilities``; every other model answers as TF Serving."""
    if settings.output != "auto":
        return True
    sources = find_models(settings.model_dir, settings.model_name) if sources is None else sources
    return sources[0].kind == "trainer"


def _error(status: int, message: str) -> web.Response:
    return web.Response(status=status, body=codec.error_body(message), content_type=codec.JSON)


@web.middleware
async def one_line_errors(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    """aiohttp's own 404/405/413 answers become the same one-line JSON errors as ours."""
    try:
        return await handler(request)
    except web.HTTPException as err:
        if err.status < 400:
            raise
        reason = err.text if err.text and not err.text.startswith(str(err.status)) else err.reason
        return _error(err.status, f"{request.method} {request.path}: {reason}")


BATCH_KEY = web.RequestKey("batch", dict)
"""The model call that answered a request (``requests``, ``rows``), for its log line."""
_PREDICTION_PATHS = ("/invocations", "/v1/models/")


@web.middleware
async def count_in_flight(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    """Counts a prediction request from its headers to its answer, so SIGTERM's drain waits for one
    that passed the draining check but is still reading its body or waiting for a handler thread."""
    if not request.path.startswith(_PREDICTION_PATHS):
        return await handler(request)
    state = request.app[STATE]
    state.requests_in_flight += 1
    try:
        return await handler(request)
    finally:
        state.requests_in_flight -= 1


@web.middleware
async def access_log_and_timeout(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """One log line per request (an answered ``/ping`` excepted), with a 4xx/5xx's reason, and
    504 for a prediction not answered within ``SAGEMAKER_MODEL_SERVER_TIMEOUT`` seconds."""
    settings = request.app[STATE].settings
    started = time.monotonic()
    timeout = settings.request_timeout_s if request.path.startswith(_PREDICTION_PATHS) else 0
    try:
        response = await (asyncio.wait_for(handler(request), timeout) if timeout else handler(request))
    except TimeoutError:
        response = _error(504, f"{request.method} {request.path}: no answer within {timeout}s (SAGEMAKER_MODEL_SERVER_TIMEOUT).")
    if settings.access_log and not (request.path == "/ping" and response.status == 200):
        _log_request(request, response, time.monotonic() - started)
    return response


def _log_request(request: web.Request, response: web.StreamResponse, seconds: float) -> None:
    body = response.body if isinstance(response, web.Response) else None
    sent = len(body) if isinstance(body, (bytes, bytearray)) else response.content_length
    fields: dict[str, Any] = {
        "method": request.method,
        "path": request.path,
        "status": response.status,
        "bytes_in": request.content_length if request.content_length is not None else "-",
        "bytes_out": sent if sent is not None else "-",
        "ms": f"{seconds * 1000:.1f}",
    }
    batch = request.get(BATCH_KEY)
    if batch:
        fields["batch_requests"] = batch.get("requests", 1)
        fields["batch_rows"] = batch.get("rows", 0)
    if response.status >= 400 and isinstance(body, (bytes, bytearray)):
        try:
            fields["error"] = repr(str(json.loads(body).get("error", "")))
        except (ValueError, AttributeError):
            fields["error"] = repr(body[:200].decode("utf-8", "replace"))
    log("serve-request", **fields)


def _batch_info(request: web.Request) -> dict[str, int]:
    info: dict[str, int] = {}
    request[BATCH_KEY] = info
    return info


async def ping(request: web.Request) -> web.Response:
    """200 once the model is loaded and warm; 503 with the reason before that or after a failed start."""
    state = request.app[STATE]
    if state.ready.is_set():
        return web.Response(status=200, text="")
    return _error(503, state.failure or "Starting: GPU check, model load and warm-up are not finished.")


async def invocations(request: web.Request) -> web.Response:
    """One prediction request: the user's handlers, TF Serving's contract, or the built-in classifier."""
    state = request.app[STATE]
    if state.draining:
        return _error(503, "Shutting down: this server takes no new requests.")
    if not state.ready.is_set():
        return _error(503, state.failure or "Not ready: the model is still loading.")
    attributes = tfs_attributes(request.headers.get(CUSTOM_ATTRIBUTES_HEADER))
    target = resolve(
        state,
        attributes.get("tfs-model-name"),
        attributes.get("tfs-model-version"),
        attributes.get("tfs-method"),
        where=f"{CUSTOM_ATTRIBUTES_HEADER} names",
    )
    if isinstance(target, web.Response):
        return target
    if state.user_code is not None:
        return await _user_code(request, state, attributes, target)
    if state.model is None:
        return await _tensors(request, state, target, rest=False)
    return await _classify(request, state)


def tfs_attributes(header: str | None) -> dict[str, str]:
    """The ``tfs-*`` entries of ``X-Amzn-SageMaker-Custom-Attributes``, as tfs_utils.parse_tfs_custom_attributes reads them."""
    if not header:
        return {}
    pairs = (match.split("=", 1) for match in _TFS_ATTRIBUTE.findall(header))
    return {key.strip(): value.strip() for key, value in pairs}


def resolve(
    state: ServingState, name: str | None, version: str | None, method: str | None, *, where: str
) -> Servable | web.Response:
    """The servable a request names (model, else the default; version, else the model's highest),
    or 404 (one line) when it names a model, version or method this server does not serve, as TF
    Serving answers."""
    served = state.served()
    target = name if name is not None else state.default_name
    # TF Serving's versions are numbers: 0001 is version 1, as the folder 0001/ is.
    wanted = version_number(version) if version is not None and version.isdigit() else version
    skipped = any(key.startswith(f"{target}:") and (wanted is None or key == f"{target}:{wanted}") for key in state.not_served)
    why = " (found, but SERVE_MODEL_OUTPUT serves one model version as the classifier)" if skipped else ""
    versions = [s for s in served if s.name == target]
    if not versions:
        held = ", ".join(repr(n) for n in dict.fromkeys(s.name for s in served))
        return _error(404, f"Servable not found: {where} model {name!r}; this server holds {held}{why}.")
    if wanted is not None:
        found = [s for s in versions if s.version == wanted]
        if not found:
            numbered = [s.version for s in versions if s.version is not None]
            holds = f"version {', '.join(numbered)}" if numbered else "no numbered version"
            return _error(404, f"Servable not found: {where} {target!r} version {version}; this server holds {holds}{why}.")
        versions = found
    if method is not None and method not in TFS_METHODS:
        return _error(
            404,
            f"{where} TF Serving method {method!r}, which is not served: this server answers {', '.join(TFS_METHODS)} only "
            "(classify and regress take tf.Example protos); send tfs-method=predict or leave it out.",
        )
    return max(versions, key=lambda s: -1 if s.version is None else int(s.version))


def rest_uri(settings: ServeSettings, attributes: dict[str, str], default_model: str | None = None) -> str:
    """TF Serving's REST URI for a request, as tfs_utils.make_tfs_uri makes it (on this server's loopback)."""
    uri = f"http://127.0.0.1:{settings.port}/v1/models/{attributes.get('tfs-model-name', default_model or settings.model_name)}"
    if attributes.get("tfs-model-version"):
        uri += "/versions/" + attributes["tfs-model-version"]
    return uri + ":" + attributes.get("tfs-method", "predict")


async def tfs_predict(request: web.Request) -> web.Response:
    """TF Serving's own REST predict route, ``POST /v1/models/<name>[/versions/<n>]:predict``.

    ``context.rest_uri`` of the user's handlers points here, as it points at TF Serving in AWS's
    container; it answers TF Serving requests (JSON) for the model this server holds. The body is
    read as JSON whatever its ``Content-Type``, as TF Serving reads it: AWS's container posts
    ``input_handler``'s result with ``requests.post(rest_uri, data=...)``, which sends none.
    """
    state = request.app[STATE]
    match = _TFS_ROUTE.match(request.match_info["tail"])
    if match is None:
        return _error(404, f"POST {request.path}: only /v1/models/<name>[/versions/<n>]:predict is served.")
    if not state.ready.is_set():
        # Before resolving: while loading, the models found are not known yet, and a name would read as "not found".
        return _error(503, state.failure or "Not ready: the model is still loading.")
    target = resolve(state, match["name"], match["version"], match["method"], where=f"POST {request.path}:")
    if isinstance(target, web.Response):
        return target
    if state.model is not None:
        return await _classify(request, state, rest=True)
    if not target.tensor_replicas:
        return _error(404, f"{handlers.SCRIPT}'s model_fn loaded the model: it has no TF Serving route.")
    return await _tensors(request, state, target, rest=True)


async def _body(request: web.Request, state: ServingState) -> bytes | web.Response:
    """The request body, or 413 naming the limit and the variable that sets it (0: no limit).

    The limit is SageMaker's, so it applies where SageMaker sends requests (:data:`EXTERNAL_PATHS`);
    the loopback TF Serving route reads any size, as TF Serving does behind AWS's nginx.
    """
    limit = state.settings.max_request_bytes if request.path in EXTERNAL_PATHS else 0
    if not limit:
        return await request.read()
    where = f"the {limit}-byte limit ({state.settings.request_limit_setting})"
    if request.content_length is not None and request.content_length > limit:
        return _error(413, f"Request body of {request.content_length} bytes is over {where}.")
    try:
        # The application reads any size (the loopback route); this route reads up to the limit.
        return await request.clone(client_max_size=limit).read()
    except web.HTTPRequestEntityTooLarge:
        return _error(413, f"Request body is over {where}.")


def _answer_type(accept: str, *, npy: bool = True, otherwise: str | None = None) -> str | None:
    """The response content type for ``Accept``: JSON, JSON lines (the same one-line body, as AWS's
    TensorFlow serving container answers it) or ``.npy`` (where ``npy``), the client's first choice
    we can answer in; else ``otherwise`` (None: refuse)."""
    types = [part.split(";", 1)[0].strip().lower() for part in accept.split(",") if part.strip()]
    if not types:
        return codec.JSON
    for mime in types:
        if mime in codec.JSON_LINES or (npy and mime == codec.NPY):
            return mime
        if mime in (codec.JSON, "*/*", "application/*"):
            return codec.JSON
    return otherwise


async def run_tensors(
    state: ServingState, parsed: tfserving.PredictRequest, batch: dict[str, int] | None = None
) -> dict[str, np.ndarray]:
    """A parsed request's outputs, batched with other requests for the same signature (when
    batching is on); 503 when the queue is full, 500 (one line) when the model fails."""
    try:
        return await _batcher(state).submit(parsed, batch)
    except QueueFull:
        raise codec.RequestError(503, "Too many requests are waiting; retry with backoff.") from None
    except Exception as err:  # noqa: BLE001 - the model failed on a request that fits its signature
        log("serve-predict-failed", error=repr(f"{type(err).__name__}: {err}".splitlines()[0]))
        raise codec.RequestError(500, f"The model failed on this request ({type(err).__name__}); see the endpoint's logs.") from err


async def predict_tensors(state: ServingState, payload: Any, servable: Servable | None = None) -> dict[str, Any]:
    """A TF Serving request object -> TF Serving's answer, from ``servable`` (default: the default model's).

    Raises:
        codec.RequestError: the request does not fit the signature (400), or the model failed (500).
    """
    servable = servable or state.servable("")
    parsed = _routed(tfserving.parse(payload, servable.tensor_replicas[0].signatures), servable)
    return tfserving.respond(parsed, await run_tensors(state, parsed))


def _routed(parsed: tfserving.PredictRequest, servable: Servable) -> tfserving.PredictRequest:
    """The request, marked for the servable that runs it (the batcher joins only requests for one)."""
    return dataclasses.replace(parsed, target=servable.key)


async def _tensors(request: web.Request, state: ServingState, servable: Servable, *, rest: bool) -> web.Response:
    accept = request.headers.get("Accept", "").strip()
    # AWS's container never refuses an Accept: one it does not know gets TF Serving's JSON, unchanged.
    answer_type = _answer_type(accept, otherwise=codec.JSON)
    body = await _body(request, state)
    if isinstance(body, web.Response):
        return body
    content_type = request.headers.get("Content-Type", "")
    signatures = servable.tensor_replicas[0].signatures
    try:
        if content_type.split(";", 1)[0].strip().lower() == codec.NPY and not rest:
            parsed = tfserving.from_npy(body, signatures)
        else:
            if rest:
                payload = tfserving.to_tfs_request(body, codec.JSON) if body.strip() else None
                if not isinstance(payload, dict):
                    raise codec.RequestError(400, 'TF Serving\'s predict API takes a JSON object with "instances" or "inputs".')
            else:
                payload = tfserving.to_tfs_request(body, content_type)
            parsed = tfserving.parse(payload, signatures)
        parsed = _routed(parsed, servable)
        outputs = await run_tensors(state, parsed, _batch_info(request))
        if answer_type == codec.NPY:
            return web.Response(body=tfserving.npy_answer(outputs), content_type=codec.NPY)
        answer = tfserving.respond(parsed, outputs)
    except codec.RequestError as err:
        return _error(err.status, str(err))
    return web.Response(body=json.dumps(answer, separators=(",", ":")).encode("utf-8"), content_type=answer_type)


def handler_context(request: web.Request, state: ServingState, attributes: dict[str, str], body: bytes) -> Any:
    """The context the user's family expects: the serving container's ``Context`` tuple
    (tfs_utils.parse_request), or the inference toolkit's request context."""
    settings = state.settings
    assert state.user_code is not None
    content_type = request.headers.get("Content-Type") or settings.default_content_type
    accept = _accept_for_handlers(request.headers.get("Accept", ""), settings.default_accept)
    if state.user_code.family == handlers.INFERENCE_TOOLKIT:
        return handlers.ToolkitContext(
            model_name=state.default_name,
            model_dir=str(settings.model_dir),
            gpu_id=0 if state.gpu_report.get("expected", 0) > 0 else None,
            headers=dict(request.headers),
            content_type=content_type,
            accept=accept,
        )
    return handlers.Context(
        model_name=attributes.get("tfs-model-name"),
        model_version=attributes.get("tfs-model-version"),
        method=attributes.get("tfs-method"),
        rest_uri=rest_uri(settings, attributes, state.default_name),
        grpc_port=None,  # no gRPC here: handlers use rest_uri
        channel=None,
        custom_attributes=request.headers.get(CUSTOM_ATTRIBUTES_HEADER),
        request_content_type=content_type,
        accept_header=accept,
        content_length=len(body),
    )


async def _user_code(request: web.Request, state: ServingState, attributes: dict[str, str], servable: Servable) -> web.Response:
    """One request through ``inference.py``, in a handler thread; its failure is a 4xx/5xx with the user's line.

    The default predict (the toolkit family without ``predict_fn``) runs on ``servable``, the model
    version the custom attributes name.
    """
    assert state.user_code is not None
    body = await _body(request, state)
    if isinstance(body, web.Response):
        return body
    context = handler_context(request, state, attributes, body)
    loop = asyncio.get_running_loop()

    def default_predict(data: Any) -> Any:
        if not isinstance(data, dict):
            data = {"instances": data.tolist() if isinstance(data, np.ndarray) else data}
        try:
            if state.model is not None:
                rows = codec.decode(json.dumps(data).encode(), codec.JSON, state.model.num_features)
                return json.loads(codec.encode(state.model.predict(rows)))
            return asyncio.run_coroutine_threadsafe(predict_tensors(state, data, servable), loop).result()
        except codec.RequestError as err:
            raise handlers.HandlerError(err.status, f"predict failed: {err}") from None

    try:
        reply = await state.run_handler(state.user_code.invoke, body, context, default_predict, _post)
    except handlers.HandlerError as err:
        log("serve-handler-failed", status=err.status, error=repr(str(err)))
        return _error(err.status, str(err))
    except codec.RequestError as err:
        return _error(err.status, str(err))
    except Exception as err:  # noqa: BLE001 - never aiohttp's plain-text 500 with a traceback
        message = f"{handlers.SCRIPT} request failed: {type(err).__name__}: {err}".splitlines()[0]
        log("serve-handler-failed", status=500, error=repr(message))
        return _error(500, message)
    return web.Response(status=reply.status, body=reply.body, headers={**reply.headers, "Content-Type": reply.content_type})


def _accept_for_handlers(accept: str, default: str) -> str:
    accept = accept.strip()
    return default if not accept or accept == "*/*" else accept


def _post(uri: str, data: Any) -> Any:
    """What AWS's container does with ``input_handler``'s result: ``requests.post(rest_uri, data=...)``."""
    import requests

    return requests.post(uri, data=data, timeout=60)


async def _classify(request: web.Request, state: ServingState, *, rest: bool = False) -> web.Response:
    """The built-in classifier: decode, batch, encode. Bad requests get a 4xx and one line.

    ``rest``: TF Serving's route, whose body is JSON whatever its ``Content-Type`` says.
    """
    assert state.model is not None
    accept = request.headers.get("Accept", "").strip()
    answer_type = _answer_type(accept, npy=False)
    if answer_type is None:
        return _error(406, f"Unsupported Accept {accept!r}; predictions are returned as application/json or application/jsonlines.")
    body = await _body(request, state)
    if isinstance(body, web.Response):
        return body
    try:
        content_type = codec.JSON if rest else request.headers.get("Content-Type", "")
        rows = codec.decode(body, content_type, state.model.num_features)
        state.model.check_rows(rows)  # an integer (uint8 pixel) input takes whole numbers in range: a 400, not a cast
    except codec.RequestError as err:
        return _error(err.status, str(err))
    try:
        probabilities = await _batcher(state).submit(rows, _batch_info(request))
    except QueueFull:
        return _error(503, "Too many requests are waiting; retry with backoff.")
    except Exception as err:  # noqa: BLE001 - the model failed on valid input: a server error, one line
        log("serve-predict-failed", error=repr(f"{type(err).__name__}: {err}".splitlines()[0]))
        return _error(500, f"The model failed on this request ({type(err).__name__}); see the endpoint's logs.")
    return web.Response(body=codec.encode(probabilities), content_type=answer_type)


async def stats(request: web.Request) -> web.Response:
    """Batching counters and the model description (not part of SageMaker's contract: loopback use)."""
    state = request.app[STATE]
    payload: dict[str, Any] = {
        "ready": state.ready.is_set(),
        "failure": state.failure,
        "model": state.describe_model,
        "models": [{"name": s.name, "version": s.version} for s in state.servables],
        "default_model": state.default_name,
        "replicas": [replica.device for replica in state.replicas or state.tensor_replicas],
        "user_code": state.user_code.family if state.user_code else None,
        "batching": state.batching,
        "max_batch_size": state.settings.max_batch_size,
        "max_batch_delay_ms": state.settings.max_batch_delay_ms,
        **(state.batcher.stats.as_dict() if state.batcher else {"batches": 0, "requests": 0, "failed_requests": 0, "rows": 0}),
    }
    return web.json_response(payload)


def execution_parameters(settings: ServeSettings, workers: int, *, user_code: bool, batching: bool | None = None) -> dict[str, Any]:
    """The answer to SageMaker's ``GET /execution-parameters``: how batch transform should call this server.

    SageMaker asks before the first ``/invocations`` of a transform job and uses the answer for what
    the job did not set; what it did set (the ``SAGEMAKER_*`` variables) is said back as it is.
    The rest:

    - ``BatchStrategy``: MULTI_RECORD. Every body this server reads (CSV, JSON lines, JSON, TF
      Serving's lists) carries many rows, and one request of many rows is one model call; the
      answer has one prediction per row, in order, so SageMaker can join each to its record.
    - ``MaxPayloadInMB``: the request limit in whole MB, at most 100 (SageMaker's largest); left out
      when the limit is under 1 MB, which no MaxPayloadInMB can express (the job then gets 413s that
      name ``SERVE_MAX_REQUEST_BYTES``).
    - ``MaxConcurrentTransforms``: for MULTI_RECORD, two requests per device, so one is on the
      device while the next is read and decoded; more only queue behind the model. For
      SINGLE_RECORD with dynamic batching, enough one-record requests to fill a batch on every
      device (the batcher joins them), at most the queue. ``inference.py`` handlers run in
      ``HANDLER_THREADS`` threads, which bound them too. Never so many that MaxConcurrentTransforms x
      MaxPayloadInMB passes 100, SageMaker's bound on the two (60 MB payloads: one at a time).

    Args:
        settings: The resolved settings.
        workers: Devices that run model calls (:attr:`ServingState.workers`).
        user_code: The model carries ``code/inference.py``.
        batching: Whether the served model batches (:attr:`ServingState.batching`); default ``settings.batching``.
    """
    strategy = settings.batch_strategy or "MULTI_RECORD"
    workers = max(1, workers)
    batching = settings.batching if batching is None else batching
    if strategy == "SINGLE_RECORD" and batching and not user_code:
        concurrency = min(workers * settings.max_batch_size, settings.max_queued_requests)
    else:
        concurrency = 2 * workers
    if user_code:
        concurrency = min(concurrency, HANDLER_THREADS)
    payload_mb: Optional[int] = None
    if settings.max_payload_in_mb is not None:
        payload_mb = settings.max_payload_in_mb
    elif settings.max_request_bytes >= MB:
        payload_mb = min(MAX_PAYLOAD_IN_MB, settings.max_request_bytes // MB)
        if settings.max_concurrent_transforms:
            # The job chose the concurrency: the payload the image chooses fits beside it.
            payload_mb = max(1, min(payload_mb, MAX_PAYLOAD_IN_MB // settings.max_concurrent_transforms))
    # SageMaker's rule: MaxConcurrentTransforms x MaxPayloadInMB at most 100 (MB in flight at once); left
    # out, the payload is SageMaker's default 6 MB.
    in_flight = payload_mb if payload_mb is not None else SAGEMAKER_DEFAULT_PAYLOAD_MB
    if in_flight:
        concurrency = max(1, min(concurrency, MAX_PAYLOAD_IN_MB // in_flight))
    answer: dict[str, Any] = {"MaxConcurrentTransforms": settings.max_concurrent_transforms or concurrency, "BatchStrategy": strategy}
    if payload_mb is not None:
        answer["MaxPayloadInMB"] = payload_mb
    return answer


async def get_execution_parameters(request: web.Request) -> web.Response:
    """``GET /execution-parameters``, once start-up has found the devices (SageMaker asks after ``/ping``)."""
    state = request.app[STATE]
    if not state.ready.is_set():
        return _error(503, state.failure or "Not ready: the model is still loading.")
    answer = execution_parameters(state.settings, state.workers, user_code=state.user_code is not None, batching=state.batching)
    return web.json_response(answer)


def _batcher(state: ServingState) -> DynamicBatcher:
    """The batcher over every replica, made on the event loop by the first request after start-up."""
    if state.batcher is None:
        settings = state.settings
        # One task and thread per device; a TF Serving request names its servable, so every model
        # version on a device shares that device's thread, as TF Serving shares the device.
        predicts: list[Callable[[Any], Any]] = [replica.predict for replica in state.replicas] or [
            functools.partial(_run_request, state, index) for index in range(len(state.tensor_replicas))
        ]
        state.batcher = DynamicBatcher(
            predicts,
            max_batch_size=settings.max_batch_size,
            max_delay_seconds=settings.max_batch_delay_ms / 1000.0,
            max_queued_requests=settings.max_queued_requests,
            batching=state.batching,
        )
        state.batcher.start()
    return state.batcher


def _run_request(state: ServingState, index: int, request: tfserving.PredictRequest) -> dict[str, np.ndarray]:
    """A batch of requests for one servable, on that servable's replica on device ``index``."""
    return state.servable(request.target).tensor_replicas[index].run(request.signature_name, request.tensors)


def create_app(state: ServingState) -> web.Application:
    """The aiohttp application; its batcher stops with it."""
    # No application-wide body limit: SageMaker's applies to /invocations only (_body), not to the
    # loopback route an input_handler posts its (possibly larger) TF Serving request to.
    app = web.Application(client_max_size=0, middlewares=[count_in_flight, access_log_and_timeout, one_line_errors])
    app[STATE] = state

    async def stop_batcher(app: web.Application) -> None:
        if state.batcher is not None:
            await state.batcher.stop()
        state.shutdown()

    app.on_cleanup.append(stop_batcher)
    app.router.add_get("/ping", ping)
    app.router.add_get("/execution-parameters", get_execution_parameters)
    app.router.add_post("/invocations", invocations)
    app.router.add_post("/v1/models/{tail:.+}", tfs_predict)
    app.router.add_get("/stats", stats)
    return app


def log_without_effect(settings: ServeSettings) -> None:
    """One line per AWS serving-container variable that is set and has no equivalent here, with why:
    said once at start-up, never dropped silently."""
    for variable in settings.without_effect:
        log("serve-setting-without-effect", variable=variable, reason=repr(WITHOUT_EFFECT[variable]))


def main(argv: Sequence[str] = ()) -> int:
    """``python -m trainer serve``: serve until SIGTERM; 2 for bad settings or arguments."""
    if list(argv):
        print(f"[trainer] serve-failed reason='serve takes no arguments, got {list(argv)}'", flush=True)
        return 2
    try:
        settings = load_settings()
    except ConfigError as err:
        log("serve-failed", reason=repr(str(err)))
        return err.exit_code
    state = ServingState(settings)
    log_json(
        "serve-config",
        {k: str(v) for k, v in settings.__dict__.items()},
    )
    log_without_effect(settings)
    threading.Thread(target=start_up, args=(state,), name="serve-start-up", daemon=True).start()
    asyncio.run(serve_until_stopped(state))
    log("serve-stopped")
    return 0


async def serve_until_stopped(state: ServingState) -> None:
    """Serves until SIGTERM or SIGINT (SageMaker scaling in, ``docker stop``), then shuts down gracefully.

    The listener stays open until the prediction requests in flight are answered and the
    ``inference.py`` calls in flight have returned (new ``/invocations`` get 503 meanwhile), up to
    ``SAGEMAKER_MODEL_SERVER_TIMEOUT`` (``DEFAULT_DRAIN_S`` when 0): their handlers may post to
    ``context.rest_uri``, this server's own loopback TF Serving route, as they post to TF Serving
    in AWS's container. A request counts from its headers on, so one still sending its body when
    SIGTERM comes is answered, and its handler's loopback call with it. Then
    the listener closes and the other requests in flight get ``SHUTDOWN_TIMEOUT_S`` to finish.
    """
    settings = state.settings
    runner = web.AppRunner(create_app(state), access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT_S)
    await runner.setup()
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    try:
        await web.TCPSite(runner, settings.host, settings.port).start()
        await stopping.wait()
        state.draining = True
        requests_left, calls_left = await state.drain(settings.request_timeout_s or DEFAULT_DRAIN_S)
        log("serve-stopping", requests_left=requests_left, handler_calls_left=calls_left)
    finally:
        await runner.cleanup()
