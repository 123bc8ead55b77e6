"""A local runner that plays SageMaker batch transform for transform jobs created on the emulator.

moto accepts CreateTransformJob and reports the job Completed at once, having run nothing (see
``gaps._jobs_without_a_runner_fail``). While a local runner watches (``LocalSageMaker``), a new
transform job stays InProgress and this module does what SageMaker batch transform does around
the image, in the same order:

1. reads the job (DescribeTransformJob) and refuses, with one ``ClientError`` line, what it cannot
   play faithfully (RecordIO/TFRecord splitting, ``DataProcessing`` filters and joins): never a
   result computed some other way;
2. starts the job's model as SageMaker starts a serving container for batch transform: the real
   serve mode (``python -m trainer serve``, or the image with ``--containers``) on the model's
   extracted ``ModelDataUrl``, with the model's and the job's Environment and SageMaker's
   ``SAGEMAKER_BATCH``, ``SAGEMAKER_MAX_PAYLOAD_IN_MB``, ``SAGEMAKER_BATCH_STRATEGY`` and
   ``SAGEMAKER_MAX_CONCURRENT_TRANSFORMS``, and waits for ``/ping`` (:mod:`scripts.emulator.hosting`);
3. for every input object (``S3Prefix``: each key under the prefix; ``ManifestFile``: each key
   the manifest lists), gunzipped when ``CompressionType`` is Gzip, splits it by ``SplitType``
   (``None``: the whole object is one record; ``Line``: one record per non-empty line) and sends
   ``POST /invocations`` with the job's ``ContentType`` and ``Accept``: one record per request
   (``SingleRecord``) or as many lines as fit in ``MaxPayloadInMB`` (``MultiRecord``), at most
   ``MaxConcurrentTransforms`` requests at a time, answers kept in input order;
4. writes each object's answers, joined as ``AssembleWith`` says (``Line``: a newline after each
   answer; ``None``: the bytes as they came), to ``<S3OutputPath>/<key relative to the input
   prefix>.out``, encrypted with the job's output ``KmsKeyId``; an object is written only when
   every one of its records was transformed, as SageMaker does;
5. records the outcome: Completed, or Failed with one line naming the input object and record
   and the container's answer (a bad record), or why the model did not start. The serving
   container's log goes to ``/aws/sagemaker/TransformJobs``, ``<job>/algo-1-<epoch>``.

Emulator only: on AWS, SageMaker runs the image on the job's instances itself. The emulator has no
GPU, so the serving process is told to expect none, as for endpoints and training jobs.
"""

from __future__ import annotations

import concurrent.futures
import gzip
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from scripts.emulator.docker_hosts import DockerHosts

TRANSFORM_LOG_GROUP = "/aws/sagemaker/TransformJobs"
DEFAULT_MAX_PAYLOAD_MB = 6
"""SageMaker's default ``MaxPayloadInMB``."""
INVOKE_TIMEOUT_SECONDS = 600
"""SageMaker's default ``ModelClientConfig.InvocationsTimeoutInSeconds``."""
BATCH_STRATEGIES = {"SingleRecord": "SINGLE_RECORD", "MultiRecord": "MULTI_RECORD"}


class TransformFailed(Exception):
    """The job fails; the message is its whole FailureReason (one line)."""


@dataclass(frozen=True)
class TransformRequest:
    """What one transform job asks, as DescribeTransformJob returns it.

    Attributes:
        name: Transform job name.
        model_name: The Model whose container serves it.
        input_uri: ``TransformInput.DataSource.S3DataSource.S3Uri``.
        manifest: True for ``S3DataType`` ManifestFile (``input_uri`` is the manifest).
        content_type: ``TransformInput.ContentType`` (sent as each request's Content-Type).
        gzip: ``CompressionType`` Gzip.
        split_type: ``None`` or ``Line``.
        batch_strategy: ``SingleRecord`` or ``MultiRecord``.
        max_payload_bytes: ``MaxPayloadInMB`` in bytes; 0: no limit (the whole object at once).
        max_concurrent: ``MaxConcurrentTransforms`` (at least 1).
        invocation_timeout: ``ModelClientConfig.InvocationsTimeoutInSeconds``.
        output_path: ``TransformOutput.S3OutputPath``.
        accept: ``TransformOutput.Accept`` (sent as each request's Accept).
        assemble_with: ``None`` or ``Line``.
        kms_key_id: ``TransformOutput.KmsKeyId``.
        environment: The job's Environment.
    """

    name: str
    model_name: str
    input_uri: str
    manifest: bool
    content_type: str
    gzip: bool
    split_type: str
    batch_strategy: str
    max_payload_bytes: int
    max_concurrent: int
    invocation_timeout: float
    output_path: str
    accept: str
    assemble_with: str
    kms_key_id: str | None
    environment: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_description(cls, job: Mapping[str, Any]) -> TransformRequest:
        """Read a DescribeTransformJob answer; :class:`TransformFailed` for what the runner cannot play."""
        source = job["TransformInput"]["DataSource"]["S3DataSource"]
        output = job["TransformOutput"]
        split_type = job["TransformInput"].get("SplitType") or "None"
        if split_type not in ("None", "Line"):
            raise TransformFailed(
                f"ClientError: SplitType {split_type} is not played by the emulator's transform runner (None and Line are); "
                "nothing ran (run this transform job on AWS)."
            )
        processing = {k: v for k, v in (job.get("DataProcessing") or {}).items() if v not in ("$", "None", "", None)}
        if processing:
            raise TransformFailed(
                f"ClientError: DataProcessing {processing} is not applied by the emulator's transform runner; "
                "nothing ran (run this transform job on AWS, or filter the input and output yourself)."
            )
        payload_mb = job.get("MaxPayloadInMB")
        client_config = job.get("ModelClientConfig") or {}
        return cls(
            name=job["TransformJobName"],
            model_name=job["ModelName"],
            input_uri=source["S3Uri"],
            manifest=source.get("S3DataType") == "ManifestFile",
            content_type=job["TransformInput"].get("ContentType") or "",
            gzip=job["TransformInput"].get("CompressionType") == "Gzip",
            split_type=split_type,
            batch_strategy=job.get("BatchStrategy") or "MultiRecord",
            max_payload_bytes=int(DEFAULT_MAX_PAYLOAD_MB if payload_mb is None else payload_mb) * 1024 * 1024,
            max_concurrent=max(1, int(job.get("MaxConcurrentTransforms") or 1)),
            invocation_timeout=float(client_config.get("InvocationsTimeoutInSeconds") or INVOKE_TIMEOUT_SECONDS),
            output_path=output["S3OutputPath"],
            accept=output.get("Accept") or "",
            assemble_with=output.get("AssembleWith") or "None",
            kms_key_id=output.get("KmsKeyId") or None,
            environment=dict(job.get("Environment") or {}),
        )

    def batch_environment(self) -> dict[str, str]:
        """What SageMaker sets in a serving container it starts for batch transform."""
        return {
            **self.environment,
            "SAGEMAKER_BATCH": "true",
            "SAGEMAKER_MAX_PAYLOAD_IN_MB": str(self.max_payload_bytes // (1024 * 1024)),
            "SAGEMAKER_BATCH_STRATEGY": BATCH_STRATEGIES.get(self.batch_strategy, self.batch_strategy),
            "SAGEMAKER_MAX_CONCURRENT_TRANSFORMS": str(self.max_concurrent),
        }


def split_s3(uri: str) -> tuple[str, str]:
    """``s3://bucket/key`` -> ``(bucket, key)``."""
    if not uri.startswith("s3://"):
        raise TransformFailed(f"ClientError: {uri} is not an S3 URI.")
    bucket, _, key = uri[len("s3://") :].partition("/")
    return bucket, key


@dataclass(frozen=True)
class InputObject:
    """One S3 object to transform and where its ``.out`` goes (relative to S3OutputPath)."""

    bucket: str
    key: str
    relative: str

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


def input_objects(s3: Any, request: TransformRequest) -> list[InputObject]:
    """Every object the job reads, in key order (manifest order for a ManifestFile)."""
    bucket, key = split_s3(request.input_uri)
    if request.manifest:
        entries = _read_manifest(s3, bucket, key)
        prefix_uri = entries[0]["prefix"] if entries and isinstance(entries[0], dict) else ""
        prefix_bucket, prefix = split_s3(prefix_uri)
        return [InputObject(prefix_bucket, prefix + str(name), str(name)) for name in entries[1:]]
    # The output mirrors each key below the prefix's folder ("in/a.csv" under "in/" -> "a.csv.out").
    folder = key.rsplit("/", 1)[0] + "/" if "/" in key else ""
    paginator = s3.get_paginator("list_objects_v2")
    objects = [
        InputObject(bucket, item["Key"], item["Key"][len(folder) :])
        for page in paginator.paginate(Bucket=bucket, Prefix=key)
        for item in page.get("Contents", [])
        if not item["Key"].endswith("/")
    ]
    if not objects:
        raise TransformFailed(f"ClientError: no S3 objects under {request.input_uri}: nothing to transform.")
    return objects


def _read_manifest(s3: Any, bucket: str, key: str) -> list[Any]:
    import json

    try:
        entries = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    except ValueError as err:
        raise TransformFailed(f"ClientError: manifest s3://{bucket}/{key} is not JSON: {err}") from None
    if not (isinstance(entries, list) and entries and isinstance(entries[0], dict) and "prefix" in entries[0]):
        raise TransformFailed(f'ClientError: manifest s3://{bucket}/{key} must be [{{"prefix": "s3://..."}}, "key", ...].')
    return entries


def split_records(body: bytes, split_type: str) -> list[bytes]:
    """``None``: the object is one record; ``Line``: each non-empty line is one."""
    if split_type == "None":
        return [body]
    return [line for line in body.splitlines() if line.strip()]


def batches(records: list[bytes], request: TransformRequest, where: str) -> Iterator[tuple[int, int, bytes]]:
    """``(first, last, payload)`` per request, records numbered from 1: one record each for
    SingleRecord (or SplitType None), else as many lines as fit in MaxPayloadInMB."""
    limit = request.max_payload_bytes
    for number, record in enumerate(records, start=1):
        if limit and len(record) > limit:
            raise TransformFailed(
                f"ClientError: {where} record {number} is {len(record)} bytes, over MaxPayloadInMB "
                f"({limit // (1024 * 1024)} MB): split it, or raise MaxPayloadInMB."
            )
    if request.batch_strategy != "MultiRecord" or request.split_type == "None":
        yield from ((number, number, record) for number, record in enumerate(records, start=1))
        return
    first, size, pending = 1, 0, []
    for number, record in enumerate(records, start=1):
        if pending and limit and size + 1 + len(record) > limit:
            yield first, number - 1, b"\n".join(pending) + b"\n"
            first, size, pending = number, 0, []
        pending.append(record)
        size += len(record) + 1
    if pending:
        yield first, len(records), b"\n".join(pending) + b"\n"


def invoke(url: str, payload: bytes, request: TransformRequest, where: str, first: int, last: int) -> bytes:
    """One ``POST /invocations``; any answer but 200 is the job's failure, in one line."""
    headers = {"Content-Type": request.content_type} if request.content_type else {}
    if request.accept:
        headers["Accept"] = request.accept
    call = urllib.request.Request(url + "/invocations", data=payload, method="POST", headers=headers)
    records = f"record {first}" if first == last else f"records {first}-{last}"
    try:
        with urllib.request.urlopen(call, timeout=request.invocation_timeout) as reply:  # nosec B310 - loopback
            return bytes(reply.read())
    except urllib.error.HTTPError as err:
        message = " ".join(err.read().decode("utf-8", "replace").split())[:400]
        raise TransformFailed(f"ClientError: {where} {records}: the model container answered {err.code}: {message}") from None
    except OSError as err:
        raise TransformFailed(f"ClientError: {where} {records}: no answer from the model container: {err}") from None


def assemble(answers: list[bytes], assemble_with: str) -> bytes:
    """``Line``: a newline at the end of every answer (not doubled); ``None``: the bytes as they came."""
    if assemble_with != "Line":
        return b"".join(answers)
    return b"".join(answer if answer.endswith(b"\n") else answer + b"\n" for answer in answers)


def transform_object(s3: Any, url: str, item: InputObject, request: TransformRequest, pool: concurrent.futures.Executor) -> tuple[bytes, int]:
    """One input object's assembled output and its record count."""
    body = s3.get_object(Bucket=item.bucket, Key=item.key)["Body"].read()
    if request.gzip:
        try:
            body = gzip.decompress(body)
        except OSError as err:
            raise TransformFailed(f"ClientError: {item.uri} is not gzip (CompressionType Gzip): {err}") from None
    records = split_records(body, request.split_type)
    calls = [pool.submit(invoke, url, payload, request, item.uri, first, last) for first, last, payload in batches(records, request, item.uri)]
    answers = [call.result() for call in calls]  # input order; the first failure (in order) fails the job
    return assemble(answers, request.assemble_with), len(records)


@dataclass
class TransformOutcome:
    """What happened to one transform job.

    Attributes:
        name: Transform job name.
        status: ``Completed`` or ``Failed``.
        failure_reason: SageMaker's FailureReason, if failed.
        outputs: The ``.out`` objects written.
        records: Records transformed.
        seconds: Wall time from the model's start to the last upload.
        log_file: The serving container's stdout and stderr, if it was started.
    """

    name: str
    status: str
    failure_reason: str | None
    outputs: list[str]
    records: int
    seconds: float
    log_file: Path | None


def run_transform_job(
    name: str,
    *,
    sagemaker: Any,
    s3: Any,
    log_sink: Callable[[list[str]], None],
    endpoint_url: str,
    region: str,
    work_dir: Path,
    docker: DockerHosts | None,
    on_event: Callable[[str], None],
) -> TransformOutcome:
    """Play one transform job from its description to its outputs (the caller records the outcome);
    the serving container's log lines go to ``log_sink`` (its CloudWatch stream) at the end."""
    from scripts.emulator.hosting import LocalHosting

    started = time.monotonic()
    request = TransformRequest.from_description(sagemaker.describe_transform_job(TransformJobName=name))
    items = input_objects(s3, request)
    hosting = LocalHosting(endpoint_url=endpoint_url, region=region, work_dir=work_dir, on_event=on_event, docker=docker)
    try:
        hosted = hosting.start_model(name, "transform", request.model_name, request.batch_environment(), label="transform job")
    except RuntimeError as err:
        raise TransformFailed(f"ClientError: the model {request.model_name} did not start for batch transform: {err}") from None
    outputs, count = [], 0
    try:
        on_event(
            f"transform job {name}: {len(items)} object(s), SplitType {request.split_type}, {request.batch_strategy}, "
            f"up to {request.max_concurrent} request(s) at a time"
        )
        out_bucket, out_prefix = split_s3(request.output_path.rstrip("/") + "/")
        extra = {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": request.kms_key_id} if request.kms_key_id else {}
        with concurrent.futures.ThreadPoolExecutor(max_workers=request.max_concurrent) as pool:
            for item in items:
                body, records = transform_object(s3, hosted.url, item, request, pool)
                key = f"{out_prefix}{item.relative}.out"
                s3.put_object(Bucket=out_bucket, Key=key, Body=body, **extra)
                outputs.append(f"s3://{out_bucket}/{key}")
                count += records
    finally:
        hosting._terminate(hosted)
        if hosted.log_file.is_file():
            log_sink(hosted.log_file.read_text(encoding="utf-8", errors="replace").splitlines())
    return TransformOutcome(name, "Completed", None, outputs, count, time.monotonic() - started, hosted.log_file)


def record(backend_job: Any, outcome: TransformOutcome) -> None:
    """Write the outcome on moto's transform job, as DescribeTransformJob will show it."""
    from moto.core.utils import utcnow

    backend_job.transform_job_status = outcome.status
    backend_job.failure_reason = (outcome.failure_reason or "")[:1024] or None
    backend_job.transform_end_time = backend_job.last_modified_time = utcnow()
