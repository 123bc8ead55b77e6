"""Dynamic batching: concurrent requests share one model call.

A GPU answers a batch of 64 rows in about the time it answers one, so the server queues requests
and one task drains the queue: it takes the first request, waits at most ``max_delay`` for more,
stops at ``max_batch_size`` rows, runs the model once on the concatenation in a worker thread (the
event loop keeps accepting requests meanwhile; TensorFlow releases the GIL), and hands every
request its rows back. Under load, requests that arrive while the model runs form the next batch
without any waiting at all. With batching off, every request is one model call (the baseline the
benchmark compares against), still one call at a time on the device.

With several model replicas (one per GPU), one draining task per replica takes from the same
queue, each with its own worker thread, so the GPUs work on different batches at once.

A request is a float32 matrix (the built-in classifier) or a parsed TF Serving request (any other
model): requests for the same model version and signature whose inputs agree in every dimension
but the first are joined along it, and each gets its rows of every output back. A columnar TF Serving request
(``"inputs"``) is never joined: in TF Serving's format it is one batch, which the model may treat
as a whole. Joining suits models whose rows are independent: the server batches the built-in
classifier by default and other models only when the user opts in (``ServeSettings.tfs_batching``). A batch whose
outputs do not have one row per input row, or whose joined call raises, is rerun request by
request, so a request that makes the model fail fails alone, not its neighbours.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from trainer.serve.tfserving import PredictRequest

# How many recent batch sizes /stats keeps (bounded, so a long-lived endpoint does not grow).
RECENT_BATCHES = 4096
WAIT_WHEN_MEAN_AT_LEAST = 1.5
_SMOOTHING = 0.2


class QueueFull(Exception):
    """More requests are waiting than ``max_queued_requests``; the caller answers 503."""


@dataclass
class _Pending:
    rows: Any  # np.ndarray or PredictRequest
    future: asyncio.Future[Any]
    size: int
    key: Any
    batch: dict[str, int] | None = None


def _size_and_key(payload: Any) -> tuple[int, Any]:
    """Rows in a request, and what a request must share with others to be joined with them."""
    if isinstance(payload, PredictRequest):
        if payload.rows is None or not payload.row_format:
            return payload.rows or 1, object()  # a columnar request is one batch of its own: never joined
        shapes = tuple((name, t.shape[1:], t.dtype.str) for name, t in sorted(payload.tensors.items()))
        # Requests for different model versions never share a call, even with the same signature.
        return payload.rows, (payload.target, payload.signature_name, shapes)
    return len(payload), None


def _join(payloads: list[Any]) -> Any:
    first = payloads[0]
    if len(payloads) == 1:
        return first
    if isinstance(first, PredictRequest):
        tensors = {name: np.concatenate([p.tensors[name] for p in payloads]) for name in first.tensors}
        return PredictRequest(first.signature_name, tensors, first.row_format, sum(p.rows for p in payloads), first.target)
    return np.concatenate(payloads)


def _part(outputs: Any, start: int, end: int) -> Any:
    if isinstance(outputs, dict):
        return {name: value[start:end] for name, value in outputs.items()}
    return outputs[start:end]


def _splittable(outputs: Any, rows: int) -> bool:
    if isinstance(outputs, dict):
        return all(np.ndim(v) > 0 and len(v) == rows for v in outputs.values())
    return len(outputs) == rows


@dataclass
class BatchStats:
    """What the batcher has done, for ``/stats``, tests and the benchmark.

    Attributes:
        batches: Batches taken from the queue and run (a batch whose joined call failed, or whose
            outputs could not be split, and was rerun request by request counts once).
        requests: Requests answered through those batches, failed ones included.
        failed_requests: Requests whose own model call raised (answered with the error).
        rows: Rows predicted.
        recent_batch_requests: Requests per model call, most recent last (bounded).
        recent_batch_rows: Rows per model call, most recent last (bounded).
        replica_batches: Model calls made by each replica.
    """

    batches: int = 0
    requests: int = 0
    failed_requests: int = 0
    rows: int = 0
    recent_batch_requests: collections.deque[int] = field(default_factory=lambda: collections.deque(maxlen=RECENT_BATCHES))
    recent_batch_rows: collections.deque[int] = field(default_factory=lambda: collections.deque(maxlen=RECENT_BATCHES))
    replica_batches: list[int] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        sizes = list(self.recent_batch_requests)
        return {
            "batches": self.batches,
            "requests": self.requests,
            "failed_requests": self.failed_requests,
            "rows": self.rows,
            "max_batch_requests": max(sizes, default=0),
            "mean_batch_requests": round(sum(sizes) / len(sizes), 3) if sizes else 0.0,
            "recent_batch_requests": sizes[-256:],
            "recent_batch_rows": list(self.recent_batch_rows)[-256:],
            "replica_batches": list(self.replica_batches),
        }


class DynamicBatcher:
    """Queues requests and runs the model on batches of them.

    Args:
        predict: Function from a ``[n, features]`` float32 matrix to ``[n, classes]`` outputs
            (or from a :class:`PredictRequest` to its outputs by name), or one such function per
            model replica (device). Each is called from its own worker thread only, never
            concurrently with itself.
        max_batch_size: Most rows per call made of several requests.
        max_delay_seconds: Longest the first request of a batch waits for more.
        max_queued_requests: Queue bound; beyond it :meth:`submit` raises :class:`QueueFull`.
        batching: ``False``: one request per call.
    """

    def __init__(
        self,
        predict: Callable[[np.ndarray], np.ndarray] | Sequence[Callable[[np.ndarray], np.ndarray]],
        *,
        max_batch_size: int,
        max_delay_seconds: float,
        max_queued_requests: int,
        batching: bool = True,
    ) -> None:
        self._predicts = list(predict) if isinstance(predict, (list, tuple)) else [predict]
        self._max_rows = max_batch_size if batching else 1
        self._max_delay = max_delay_seconds if batching else 0.0
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue(maxsize=max_queued_requests)
        # One thread per replica: a device runs one batch at a time, and a replica's Keras/TF
        # objects are not shared between concurrent Python callers.
        self._executors = [
            concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"predict-{index}")
            for index in range(len(self._predicts))
        ]
        self._mean_requests_per_call = 1.0
        self._tasks: list[asyncio.Task[None]] = []
        self.stats = BatchStats(replica_batches=[0] * len(self._predicts))

    def start(self) -> None:
        """Starts one draining task per replica on the running loop."""
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._drain(i), name=f"dynamic-batcher-{i}") for i in range(len(self._predicts))]

    async def stop(self) -> None:
        """Stops draining and releases the worker threads."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass
        for executor in self._executors:
            executor.shutdown(wait=False, cancel_futures=True)

    async def submit(self, rows: Any, batch: dict[str, int] | None = None) -> Any:
        """Predicts ``rows`` (a matrix, or a parsed TF Serving request) as part of some batch.

        Args:
            rows: The request.
            batch: Filled with ``requests`` and ``rows`` of the model call that answered it (the log line).

        Raises:
            QueueFull: the queue is at its bound.
        """
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        size, key = _size_and_key(rows)
        try:
            self._queue.put_nowait(_Pending(rows, future, size, key, batch))
        except asyncio.QueueFull:
            raise QueueFull from None
        return await future

    async def _next(self, timeout: float | None) -> _Pending | None:
        if timeout is None:
            return await self._queue.get()
        if timeout <= 0:
            try:
                return self._queue.get_nowait()
            except asyncio.QueueEmpty:
                return None
        try:
            return await asyncio.wait_for(self._queue.get(), timeout)
        except TimeoutError:
            return None

    async def _drain(self, replica: int) -> None:
        carry: _Pending | None = None
        while True:
            first = carry if carry is not None else await self._next(None)
            carry = None
            assert first is not None
            batch = [first]
            rows = first.size
            waits = self._mean_requests_per_call >= WAIT_WHEN_MEAN_AT_LEAST
            deadline = time.monotonic() + (self._max_delay if waits else 0.0)
            while rows < self._max_rows:
                item = await self._next(deadline - time.monotonic())
                if item is None:
                    break
                if rows + item.size > self._max_rows or item.key != first.key:
                    carry = item  # starts this replica's next batch, so no request is ever split
                    break
                batch.append(item)
                rows += item.size
            batch = [p for p in batch if not p.future.done()]  # the client went away
            if not batch:
                continue
            rows = sum(p.size for p in batch)
            failed = await self._run(replica, batch, rows)
            self._mean_requests_per_call += _SMOOTHING * (len(batch) - self._mean_requests_per_call)
            self.stats.batches += 1
            self.stats.replica_batches[replica] += 1
            self.stats.requests += len(batch)
            self.stats.failed_requests += failed
            self.stats.rows += rows
            self.stats.recent_batch_requests.append(len(batch))
            self.stats.recent_batch_rows.append(rows)

    async def _call(self, replica: int, payload: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executors[replica], self._predicts[replica], payload)

    async def _run(self, replica: int, batch: list[_Pending], rows: int) -> int:
        """One model call on the joined batch, each request answered; returns how many failed.

        When the joined call raises, or its outputs cannot be split by rows, each request runs on
        its own: one bad request (a corrupt image, an id out of the vocabulary) then fails alone,
        not the neighbours it happened to share a call with.
        """
        for pending in batch:
            if pending.batch is not None:
                pending.batch.update(requests=len(batch), rows=rows)
        try:
            outputs = await self._call(replica, _join([p.rows for p in batch]))
        except Exception as err:  # noqa: BLE001 - delivered to the request, or retried alone below
            if len(batch) == 1:
                _settle(batch[0], error=err)
                return 1
        else:
            if len(batch) == 1:
                _settle(batch[0], result=outputs)
                return 0
            if _splittable(outputs, rows):
                start = 0
                for pending in batch:
                    _settle(pending, result=_part(outputs, start, start + pending.size))
                    start += pending.size
                return 0
        failed = 0
        for pending in batch:
            if pending.future.done():
                continue  # the client went away
            try:
                alone = await self._call(replica, pending.rows)
            except Exception as err:  # noqa: BLE001 - this request's own failure
                _settle(pending, error=err)
                failed += 1
            else:
                _settle(pending, result=alone)
        return failed


def _settle(pending: _Pending, *, result: Any = None, error: BaseException | None = None) -> None:
    if pending.future.done():
        return
    if error is not None:
        pending.future.set_exception(error)
    else:
        pending.future.set_result(result)
