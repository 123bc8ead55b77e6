"""The HTTP server SageMaker hosting talks to, and its start-up sequence.

Why aiohttp: the server's job is to hold many concurrent connections cheaply while requests
wait to be batched onto one model call, so it must be asynchronous; aiohttp is a mature asyncio
HTTP server (keep-alive, request size limits, graceful shutdown on SIGTERM) in one small wheel
with no framework around it, where Flask/gunicorn (sagemaker-inference-toolkit uses a Java model
server) would need worker processes that each load the model onto the GPU, and FastAPI/uvicorn
brings validation and ASGI layers this three-route contract does not need.

Start-up: the port opens at once, so SageMaker's ``/ping`` gets an answer (503 while loading),
then a background thread verifies the GPUs (the same check as training: a host that does not
show the GPUs it promises never turns healthy, so SageMaker replaces it instead of serving from
CPU), loads the model once, compiles its predict function and warms it up on the batch sizes it
will see. Only then does ``/ping`` answer 200. A failed start keeps ``/ping`` at 503 with the
reason, and the reason is logged.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import numpy as np
from aiohttp import web

from trainer.errors import ConfigError, TrainerError
from trainer.gpu_check import inspect_devices, resolve_expectation, smoke_test
from trainer.logs import log, log_json
from trainer.serve import codec
from trainer.serve.batching import DynamicBatcher, QueueFull
from trainer.serve.model import LoadedModel, load_model
from trainer.serve.settings import ServeSettings, load_settings


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
    """

    settings: ServeSettings
    model: LoadedModel | None = None
    replicas: list[LoadedModel] = field(default_factory=list)
    ready: threading.Event = field(default_factory=threading.Event)
    failure: str | None = None
    gpu_report: dict[str, Any] = field(default_factory=dict)
    batcher: DynamicBatcher | None = None


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
        replicas = [load_model(settings.model_dir, settings.output, device) for device in devices]
        warm_sizes = sorted({1, settings.max_batch_size if settings.batching else 1})
        for replica in replicas:
            for size in warm_sizes:
                replica.predict(np.zeros((size, replica.num_features), dtype=np.float32))
        state.replicas = replicas
        state.model = replicas[0]
        log(
            "serve-ready",
            seconds=f"{time.monotonic() - started:.2f}",
            warmed_batch_sizes=",".join(map(str, warm_sizes)),
            replicas=",".join(devices),
            **{k: v for k, v in replicas[0].describe().items() if k != "device"},
        )
        state.ready.set()
    except TrainerError as err:
        state.failure = " ".join(str(err).split())
        log("serve-failed", reason=repr(state.failure))
    except Exception as err:  # noqa: BLE001 - a failed start must stay visible in /ping, not kill the port
        state.failure = f"Unexpected {type(err).__name__} during start-up: {err}".splitlines()[0]
        log("serve-failed", reason=repr(state.failure))


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


async def ping(request: web.Request) -> web.Response:
    """200 once the model is loaded and warm; 503 with the reason before that or after a failed start."""
    state = request.app[STATE]
    if state.ready.is_set():
        return web.Response(status=200, text="")
    return _error(503, state.failure or "Starting: GPU check, model load and warm-up are not finished.")


async def invocations(request: web.Request) -> web.Response:
    """One prediction request: decode, batch, encode. Bad requests get a 4xx and one line."""
    state = request.app[STATE]
    if not state.ready.is_set() or state.model is None:
        return _error(503, state.failure or "Not ready: the model is still loading.")
    accept = request.headers.get("Accept", "").strip()
    if accept and not any(t in accept for t in (codec.JSON, "*/*", "application/*")):
        return _error(406, f"Unsupported Accept {accept!r}; predictions are returned as application/json.")
    limit = state.settings.max_request_bytes
    if request.content_length is not None and request.content_length > limit:
        return _error(413, f"Request body of {request.content_length} bytes is over the {limit}-byte limit.")
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return _error(413, f"Request body is over the {limit}-byte limit.")
    try:
        rows = codec.decode(body, request.headers.get("Content-Type", ""), state.model.num_features)
    except codec.RequestError as err:
        return _error(err.status, str(err))
    try:
        probabilities = await _batcher(state).submit(rows)
    except QueueFull:
        return _error(503, "Too many requests are waiting; retry with backoff.")
    except Exception as err:  # noqa: BLE001 - the model failed on valid input: a server error, one line
        log("serve-predict-failed", error=repr(f"{type(err).__name__}: {err}".splitlines()[0]))
        return _error(500, f"The model failed on this request ({type(err).__name__}); see the endpoint's logs.")
    return web.Response(body=codec.encode(probabilities), content_type=codec.JSON)


async def stats(request: web.Request) -> web.Response:
    """Batching counters and the model description (not part of SageMaker's contract: loopback use)."""
    state = request.app[STATE]
    payload: dict[str, Any] = {
        "ready": state.ready.is_set(),
        "failure": state.failure,
        "model": state.model.describe() if state.model else None,
        "replicas": [replica.device for replica in state.replicas],
        "batching": state.settings.batching,
        "max_batch_size": state.settings.max_batch_size,
        "max_batch_delay_ms": state.settings.max_batch_delay_ms,
        **(state.batcher.stats.as_dict() if state.batcher else {"batches": 0, "requests": 0, "rows": 0}),
    }
    return web.json_response(payload)


def _batcher(state: ServingState) -> DynamicBatcher:
    """The batcher over every replica, made on the event loop by the first request after start-up."""
    if state.batcher is None:
        settings = state.settings
        state.batcher = DynamicBatcher(
            [replica.predict for replica in state.replicas],
            max_batch_size=settings.max_batch_size,
            max_delay_seconds=settings.max_batch_delay_ms / 1000.0,
            max_queued_requests=settings.max_queued_requests,
            batching=settings.batching,
        )
        state.batcher.start()
    return state.batcher


def create_app(state: ServingState) -> web.Application:
    """The aiohttp application; its batcher stops with it."""
    settings = state.settings
    app = web.Application(client_max_size=settings.max_request_bytes, middlewares=[one_line_errors])
    app[STATE] = state

    async def stop_batcher(app: web.Application) -> None:
        if state.batcher is not None:
            await state.batcher.stop()

    app.on_cleanup.append(stop_batcher)
    app.router.add_get("/ping", ping)
    app.router.add_post("/invocations", invocations)
    app.router.add_get("/stats", stats)
    return app


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
    threading.Thread(target=start_up, args=(state,), name="serve-start-up", daemon=True).start()
    # SIGTERM (SageMaker scaling in, docker stop) ends run_app gracefully.
    web.run_app(
        create_app(state),
        host=settings.host,
        port=settings.port,
        access_log=None,
        print=None,
        handle_signals=True,
        shutdown_timeout=10.0,
    )
    log("serve-stopped")
    return 0
