"""Batch transform against the endpoint path: the same CSV records scored by the built-in model,
as a transform job sends them (MultiRecord batches up to MaxPayloadInMB) and one record per
request, as a loop over InvokeEndpoint sends them (issue #38).

One real server (``python -m trainer serve``) serves the trainer's default MLP (64 features, 8
classes, saved as a training job saves it) on loopback, started with the environment SageMaker
gives a serving container for batch transform (``SAGEMAKER_BATCH=true``). Both paths run the
emulator's transform runner code on the same records against that same server:

* **transform**: ``scripts.emulator.transform.transform_object`` on one CSV object, with the
  parameters a job that sets none gets: the server's ``GET /execution-parameters`` answer, else
  SageMaker's defaults (``TransformRequest.settled``), ``MaxConcurrentTransforms`` requests at a time;
* **one per request**: the same function with ``BatchStrategy`` SingleRecord, which sends each
  record as its own ``POST /invocations``, at the same concurrency: what a client scoring the
  file through the endpoint does; and again with 32 requests in flight, a client that works
  harder for it (the server batches concurrent requests dynamically).

The two alternate within each repeat (which goes first alternates too) and the median repeat of
each is reported, records/s; the ratio compares them in the same run. On CPU the client shares
the cores with the server, so both figures are lower bounds.

    .venv/bin/python -m benchmarks.transform_bench [--records 4000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import io
import json
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.serve_bench import FEATURES, Server, save_model, visible_gpus
from scripts.emulator.transform import InputObject, TransformRequest, execution_parameters, transform_object

BUSY_CLIENT = 32
"""Requests in flight of the harder-working endpoint client."""
TARGET_RATIO = 2.0
"""records/s of the transform job over one record per request (issue #38)."""


class _OneObject:
    """The S3 client ``transform_object`` reads its input object from, holding one object in memory."""

    def __init__(self, body: bytes) -> None:
        self.body = body

    def get_object(self, Bucket: str, Key: str) -> dict[str, Any]:  # noqa: N803 - boto3's names
        return {"Body": io.BytesIO(self.body)}


def csv_records(count: int) -> bytes:
    import numpy as np

    rows = np.random.default_rng(0).standard_normal((count, FEATURES)).round(4)
    return "".join(",".join(f"{v:.4f}" for v in row) + "\n" for row in rows).encode()


def job_request(name: str) -> TransformRequest:
    """A CSV transform job as a user creates it: SplitType Line, AssembleWith Line, nothing else set."""
    return TransformRequest.from_description(
        {
            "TransformJobName": name,
            "ModelName": "bench",
            "TransformInput": {"DataSource": {"S3DataSource": {"S3Uri": "s3://bench/in/"}}, "ContentType": "text/csv", "SplitType": "Line"},
            "TransformOutput": {"S3OutputPath": "s3://bench/out/", "AssembleWith": "Line", "Accept": "application/json"},
        }
    )


def score(server_url: str, body: bytes, request: TransformRequest) -> tuple[float, int]:
    """Seconds to transform ``body`` as ``request`` says, and the answers' line count."""
    item = InputObject(bucket="bench", key="in/rows.csv", relative="rows.csv")
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=request.max_concurrent or 1) as pool:
        output, records = transform_object(_OneObject(body), server_url, item, request, pool)
    seconds = time.perf_counter() - start
    answers = sum(len(json.loads(line)["predictions"]) for line in output.splitlines() if line.strip())
    if answers != records:
        raise RuntimeError(f"{answers} predictions for {records} records")
    return seconds, records


def run(repeats: int = 3, records: int = 4000) -> list[dict]:
    gpus = visible_gpus()
    device = f"{gpus} GPU(s)" if gpus else "CPU (client on the same cores)"
    body = csv_records(records)
    with tempfile.TemporaryDirectory(prefix="transform-bench-") as tmp:
        work = Path(tmp)
        save_model(work / "model")
        unsettled = job_request("bench")
        server = Server(work / "model", work, gpus, **unsettled.batch_environment())
        try:
            server.wait_ready()
            answer = execution_parameters(server.url)
            batched = unsettled.settled(answer)
            single = replace(batched, batch_strategy="SingleRecord")
            busy = replace(single, max_concurrent=BUSY_CLIENT)
            score(server.url, body[: body.index(b"\n", 10_000) + 1], batched)  # warm both paths' first calls
            times: dict[str, list[float]] = {"transform": [], "one per request": [], "busy": []}
            for repeat in range(repeats):
                order = [("transform", batched), ("one per request", single), ("busy", busy)][:: 1 if repeat % 2 == 0 else -1]
                for name, request in order:
                    times[name].append(score(server.url, body, request)[0])
        finally:
            server.stop()
    rate = {name: records / statistics.median(seconds) for name, seconds in times.items()}
    parameters = f"MultiRecord, MaxPayloadInMB {batched.max_payload_mb}, {batched.max_concurrent} at a time"
    return [
        {
            "benchmark": "transform",
            "metric": f"transform job ({parameters}), {records} CSV records, {device}",
            "value": f"{rate['transform']:.0f} records/s",
            "ratio": f"{rate['transform'] / rate['one per request']:.2f}x",
            "target": f">= {TARGET_RATIO:.1f}x",
        },
        {
            "benchmark": "transform",
            "metric": f"one record per request ({batched.max_concurrent} at a time), same records, {device}",
            "value": f"{rate['one per request']:.0f} records/s",
            "ratio": "1.00",
            "target": "",
        },
        {
            "benchmark": "transform",
            "metric": f"one record per request ({BUSY_CLIENT} at a time), same records, {device}",
            "value": f"{rate['busy']:.0f} records/s",
            "ratio": f"transform {rate['transform'] / rate['busy']:.2f}x this",
            "target": "",
        },
    ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    for row in run(args.repeats, args.records):
        print(f"{row['metric']}: {row['value']}  [{row['ratio']}]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
