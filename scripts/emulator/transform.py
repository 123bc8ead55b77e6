"""A local runner that plays SageMaker batch transform for transform jobs created on the emulator.

moto accepts CreateTransformJob and reports the job Completed at once, having run nothing (see
``gaps._jobs_without_a_runner_fail``). While a local runner watches (``LocalSageMaker``), a new
transform job stays InProgress and this module does what SageMaker batch transform does around
the image, in the same order:

1. reads the job (DescribeTransformJob) and refuses, with one ``ClientError`` line, what it cannot
   play faithfully (RecordIO/TFRecord splitting): never a result computed some other way; so too
   a ``DataProcessing`` SageMaker would refuse (a filter outside its JSONPath subset, a content
   type or SplitType it does not filter or join), naming the field and the value
   (:mod:`scripts.emulator.data_processing`);
2. starts the job's model as SageMaker starts a serving container for batch transform: the real
   serve mode (``python -m trainer serve``, or the image with ``--containers``) on the model's
   extracted ``ModelDataUrl``, with the model's and the job's Environment, ``SAGEMAKER_BATCH=true``
   and, for what the job set, ``SAGEMAKER_MAX_PAYLOAD_IN_MB``, ``SAGEMAKER_BATCH_STRATEGY`` and
   ``SAGEMAKER_MAX_CONCURRENT_TRANSFORMS``, and waits for ``/ping`` (:mod:`scripts.emulator.hosting`);
3. settles ``MaxConcurrentTransforms``, ``BatchStrategy`` and ``MaxPayloadInMB`` in SageMaker's order:
   the job's value, else the container's answer to ``GET /execution-parameters`` (asked only when
   the job left one unset; any answer but 200 counts as none), else SageMaker's default (1,
   MultiRecord, 6 MB). An answer that is not such an object fails the job with one line;
4. for every input object (``S3Prefix``: each key under the prefix; ``ManifestFile``: each key
   the manifest lists), gunzipped when ``CompressionType`` is Gzip, splits it by ``SplitType``
   (``None``: the whole object is one record; ``Line``: one record per non-empty line), applies
   ``InputFilter`` to each record (the container gets only what it selects) and sends
   ``POST /invocations`` with the job's ``ContentType`` and ``Accept``: one record per request
   (``SingleRecord``) or as many lines as fit in ``MaxPayloadInMB`` (``MultiRecord``; never a
   byte more, and a record that alone is larger fails the job naming the object and the record;
   0 sends the whole object with HTTP chunked encoding), at most ``MaxConcurrentTransforms``
   requests at a time, answers kept in input order;
5. with ``JoinSource`` Input or an ``OutputFilter``, splits each answer back into one answer per
   record, joins it with the record as read and filters that, record by record (a record its
   filter selects nothing from fails the job naming the object and the record);
6. writes each object's answers, joined as ``AssembleWith`` says (``Line``: a newline after each
   answer; ``None``: the bytes as they came), to ``<S3OutputPath>/<key relative to the input
   prefix>.out``, encrypted with the job's output ``KmsKeyId``; an object is written only when
   every one of its records was transformed, as SageMaker does;
7. records the outcome: Completed, or Failed with one line naming the input object and record
   and the container's answer (a bad record), or why the model did not start. The serving
   container's log goes to ``/aws/sagemaker/TransformJobs``, ``<job>/algo-1-<epoch>``.

Emulator only: on AWS, SageMaker runs the image on the job's instances itself. The emulator has no
GPU, so the serving process is told to expect none, as for endpoints and training jobs.
"""

from __future__ import annotations

import concurrent.futures
import gzip
import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from scripts.emulator.data_processing import DataProcessing, DataProcessingRefused, RecordFailed
from scripts.emulator.docker_hosts import DockerHosts

TRANSFORM_LOG_GROUP = "/aws/sagemaker/TransformJobs"
MB = 1024 * 1024
DEFAULT_PARAMETERS: dict[str, Any] = {"MaxConcurrentTransforms": 1, "BatchStrategy": "MultiRecord", "MaxPayloadInMB": 6}
"""SageMaker's defaults for what neither the job nor the container's ``/execution-parameters`` set."""
MAX_PAYLOAD_IN_MB = 100
"""CreateTransformJob's largest ``MaxPayloadInMB``."""
INVOKE_TIMEOUT_SECONDS = 600
"""SageMaker's default ``ModelClientConfig.InvocationsTimeoutInSeconds``."""
EXECUTION_PARAMETERS_TIMEOUT_SECONDS = 60
BATCH_STRATEGIES = {"SingleRecord": "SINGLE_RECORD", "MultiRecord": "MULTI_RECORD"}
"""CreateTransformJob's ``BatchStrategy`` -> ``SAGEMAKER_BATCH_STRATEGY`` and ``/execution-parameters``."""


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
        batch_strategy: ``SingleRecord`` or ``MultiRecord``; None until the job or the container sets it.
        max_payload_mb: ``MaxPayloadInMB``; 0: no limit (the whole object at once, chunked); None
            until the job or the container sets it.
        max_concurrent: ``MaxConcurrentTransforms`` (at least 1); None until the job or the
            container sets it (the job's 0 is unset, as in CreateTransformJob).
        invocation_timeout: ``ModelClientConfig.InvocationsTimeoutInSeconds``.
        output_path: ``TransformOutput.S3OutputPath``.
        accept: ``TransformOutput.Accept`` (sent as each request's Accept).
        assemble_with: ``None`` or ``Line``.
        kms_key_id: ``TransformOutput.KmsKeyId``.
        environment: The job's Environment.
        data_processing: The job's ``DataProcessing``; None when it asks nothing.
    """

    name: str
    model_name: str
    input_uri: str
    manifest: bool
    content_type: str
    gzip: bool
    split_type: str
    batch_strategy: str | None
    max_payload_mb: int | None
    max_concurrent: int | None
    invocation_timeout: float
    output_path: str
    accept: str
    assemble_with: str
    kms_key_id: str | None
    environment: dict[str, str] = field(default_factory=dict)
    data_processing: DataProcessing | None = None

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
        try:
            processing = DataProcessing.from_job(
                job.get("DataProcessing"),
                content_type=job["TransformInput"].get("ContentType") or "",
                accept=output.get("Accept") or "",
                split_type=split_type,
                assemble_with=output.get("AssembleWith") or "None",
            )
        except DataProcessingRefused as err:
            raise TransformFailed(f"ClientError: {err}; nothing ran.") from None
        client_config = job.get("ModelClientConfig") or {}
        return cls(
            name=job["TransformJobName"],
            model_name=job["ModelName"],
            input_uri=source["S3Uri"],
            manifest=source.get("S3DataType") == "ManifestFile",
            content_type=job["TransformInput"].get("ContentType") or "",
            gzip=job["TransformInput"].get("CompressionType") == "Gzip",
            split_type=split_type,
            batch_strategy=job.get("BatchStrategy") or None,
            max_payload_mb=None if job.get("MaxPayloadInMB") is None else int(job["MaxPayloadInMB"]),
            max_concurrent=int(job.get("MaxConcurrentTransforms") or 0) or None,
            invocation_timeout=float(client_config.get("InvocationsTimeoutInSeconds") or INVOKE_TIMEOUT_SECONDS),
            output_path=output["S3OutputPath"],
            accept=output.get("Accept") or "",
            assemble_with=output.get("AssembleWith") or "None",
            kms_key_id=output.get("KmsKeyId") or None,
            environment=dict(job.get("Environment") or {}),
            data_processing=processing,
        )

    def batch_environment(self) -> dict[str, str]:
        """What SageMaker sets in a serving container it starts for batch transform: the job's
        Environment, ``SAGEMAKER_BATCH``, and a ``SAGEMAKER_*`` variable for each of the three
        parameters the job set (as the SageMaker SDK's local mode does); the others the container
        chooses in its ``/execution-parameters`` answer."""
        environment = {**self.environment, "SAGEMAKER_BATCH": "true"}
        if self.max_payload_mb is not None:
            environment["SAGEMAKER_MAX_PAYLOAD_IN_MB"] = str(self.max_payload_mb)
        if self.batch_strategy is not None:
            environment["SAGEMAKER_BATCH_STRATEGY"] = BATCH_STRATEGIES.get(self.batch_strategy, self.batch_strategy)
        if self.max_concurrent is not None:
            environment["SAGEMAKER_MAX_CONCURRENT_TRANSFORMS"] = str(self.max_concurrent)
        return environment

    @property
    def parameters(self) -> dict[str, Any]:
        """``MaxConcurrentTransforms``, ``BatchStrategy`` and ``MaxPayloadInMB``; None where unset."""
        return {"MaxConcurrentTransforms": self.max_concurrent, "BatchStrategy": self.batch_strategy, "MaxPayloadInMB": self.max_payload_mb}

    @property
    def unsettled(self) -> list[str]:
        """The parameters the job left to the container (and SageMaker's defaults)."""
        return [name for name, value in self.parameters.items() if value is None]

    def settled(self, answer: Mapping[str, Any] | None) -> TransformRequest:
        """The request with every parameter set: the job's, else the container's ``answer`` to
        ``GET /execution-parameters`` (None: it gave none), else SageMaker's default.

        Raises:
            TransformFailed: the answer has a parameter the job left unset, and its value is not one
                a job could set.
        """
        chosen = {name: DEFAULT_PARAMETERS[name] for name in self.unsettled}
        chosen.update({name: _answered(answer, name) for name in self.unsettled if answer and name in answer})
        return replace(
            self,
            max_concurrent=self.max_concurrent or chosen.get("MaxConcurrentTransforms"),
            batch_strategy=self.batch_strategy or chosen.get("BatchStrategy"),
            max_payload_mb=self.max_payload_mb if self.max_payload_mb is not None else chosen.get("MaxPayloadInMB"),
        )

    @property
    def max_payload_bytes(self) -> int:
        """``MaxPayloadInMB`` in bytes (0: no limit); the request must be :meth:`settled`."""
        if self.max_payload_mb is None:
            raise ValueError("MaxPayloadInMB is read before the request is settled")
        return self.max_payload_mb * MB


def _answered(answer: Mapping[str, Any], name: str) -> Any:
    """One parameter of the container's ``/execution-parameters`` answer, in CreateTransformJob's
    terms; :class:`TransformFailed` when a job could not have set that value."""
    value = answer[name]
    whole = isinstance(value, int) and not isinstance(value, bool)
    if name == "MaxConcurrentTransforms" and whole and value >= 1:
        return value
    if name == "MaxPayloadInMB" and whole and 0 <= value <= MAX_PAYLOAD_IN_MB:
        return value
    if name == "BatchStrategy" and isinstance(value, str):
        for api, env in BATCH_STRATEGIES.items():
            if value in (api, env):
                return api
    allowed = {
        "MaxConcurrentTransforms": "a whole number >= 1",
        "MaxPayloadInMB": f"a whole number of MB from 0 to {MAX_PAYLOAD_IN_MB}",
        "BatchStrategy": " or ".join(BATCH_STRATEGIES.values()),
    }[name]
    raise TransformFailed(
        f"ClientError: the model container's GET /execution-parameters answered {name} {value!r}; it must be {allowed} "
        f"(answer: {json.dumps(answer)[:300]})."
    )


def execution_parameters(url: str, timeout: float = EXECUTION_PARAMETERS_TIMEOUT_SECONDS) -> dict[str, Any] | None:
    """The container's answer to ``GET /execution-parameters``, as SageMaker asks it before the first
    ``/invocations``: None when it answers anything but 200 (a container without the route); a 200
    that is not a JSON object fails the job with one line."""
    try:
        with urllib.request.urlopen(url + "/execution-parameters", timeout=timeout) as reply:  # nosec B310 - loopback
            body = reply.read()
    except OSError:  # HTTPError included: SageMaker falls back to its defaults
        return None
    try:
        answer = json.loads(body)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        shown = " ".join(body.decode("utf-8", "replace").split())[:200]
        raise TransformFailed(
            f"ClientError: the model container's GET /execution-parameters answered 200 with {shown!r}, not a JSON object."
        )
    return answer


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
    """``(first, last, payload)`` per request of a :meth:`~TransformRequest.settled` request, records
    numbered from 1: one record each for SingleRecord (or SplitType None), else as many lines as fit
    in MaxPayloadInMB, each ended by a newline unless only the last one's newline would not fit.
    No payload is ever larger than MaxPayloadInMB: a record that is larger alone fails the job."""
    limit = request.max_payload_bytes
    for number, record in enumerate(records, start=1):
        if limit and len(record) > limit:
            raise TransformFailed(
                f"ClientError: {where} record {number} is {len(record)} bytes, over MaxPayloadInMB "
                f"({request.max_payload_mb} MB): split it, or raise MaxPayloadInMB."
            )
    if request.batch_strategy != "MultiRecord" or request.split_type == "None":
        yield from ((number, number, record) for number, record in enumerate(records, start=1))
        return

    def payload(lines: list[bytes]) -> bytes:
        joined = b"\n".join(lines)
        return joined + b"\n" if not limit or len(joined) < limit else joined

    first, size = 1, 0  # size: the pending records joined by newlines
    pending: list[bytes] = []
    for number, record in enumerate(records, start=1):
        if pending and limit and size + 1 + len(record) > limit:
            yield first, number - 1, payload(pending)
            first, size, pending = number, 0, []
        size += len(record) + (1 if pending else 0)
        pending.append(record)
    if pending:
        yield first, len(records), payload(pending)


def invoke(url: str, payload: bytes, request: TransformRequest, where: str, first: int, last: int) -> bytes:
    """One ``POST /invocations``; any answer but 200 is the job's failure, in one line."""
    headers = {"Content-Type": request.content_type} if request.content_type else {}
    if request.accept:
        headers["Accept"] = request.accept
    # MaxPayloadInMB 0: SageMaker streams the payload with HTTP chunked encoding (urllib chunks an iterable).
    data: bytes | Iterator[bytes] = payload if request.max_payload_mb else _chunks(payload)
    call = urllib.request.Request(url + "/invocations", data=data, method="POST", headers=headers)
    records = f"record {first}" if first == last else f"records {first}-{last}"
    try:
        with urllib.request.urlopen(call, timeout=request.invocation_timeout) as reply:  # nosec B310 - loopback
            return bytes(reply.read())
    except urllib.error.HTTPError as err:
        message = " ".join(err.read().decode("utf-8", "replace").split())[:400]
        raise TransformFailed(f"ClientError: {where} {records}: the model container answered {err.code}: {message}") from None
    except OSError as err:
        raise TransformFailed(f"ClientError: {where} {records}: no answer from the model container: {err}") from None


def _chunks(payload: bytes, size: int = MB) -> Iterator[bytes]:
    for start in range(0, len(payload), size):
        yield payload[start : start + size]


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
    processing = request.data_processing
    sent = records
    if processing is not None:
        sent = [_per_record(item, number, number, processing.filter_input, record) for number, record in enumerate(records, start=1)]
    planned = list(batches(sent, request, item.uri))
    calls = [pool.submit(invoke, url, payload, request, item.uri, first, last) for first, last, payload in planned]
    answers = [call.result() for call in calls]  # input order; the first failure (in order) fails the job
    if processing is not None and processing.per_record:
        answers = per_record_outputs(processing, item, records, planned, answers)
    return assemble(answers, request.assemble_with), len(records)


def per_record_outputs(
    processing: DataProcessing, item: InputObject, records: list[bytes], planned: list[tuple[int, int, bytes]], answers: list[bytes]
) -> list[bytes]:
    """Each record's output line, in input order: its share of its request's answer, joined with the
    record as read (JoinSource Input) and filtered (OutputFilter)."""
    outputs = []
    for (first, last, _), answer in zip(planned, answers):
        shares = _per_record(item, first, last, processing.record_answers, answer, last - first + 1)
        for number, share in enumerate(shares, start=first):
            outputs.append(_per_record(item, number, number, processing.finish, records[number - 1], share))
    return outputs


def _per_record(item: InputObject, first: int, last: int, step: Callable[..., Any], *args: Any) -> Any:
    """``step(*args)``; a record it fails on fails the job, naming the object and the record(s)."""
    try:
        return step(*args)
    except RecordFailed as err:
        records = f"record {first}" if first == last else f"records {first}-{last}"
        raise TransformFailed(f"ClientError: {item.uri} {records}: {err}") from None


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
        parameters: ``MaxConcurrentTransforms``, ``BatchStrategy`` and ``MaxPayloadInMB`` as the job
            ran (the job's, the container's answer, or SageMaker's defaults).
        container_answer: The container's answer to ``GET /execution-parameters``; None when the
            job set all three (not asked) or it gave none.
    """

    name: str
    status: str
    failure_reason: str | None
    outputs: list[str]
    records: int
    seconds: float
    log_file: Path | None
    parameters: dict[str, Any] = field(default_factory=dict)
    container_answer: dict[str, Any] | None = None


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
    stop_requested: Callable[[], bool] = lambda: False,
) -> TransformOutcome:
    """Play one transform job from its description to its outputs (the caller records the outcome);
    the serving container's log lines go to ``log_sink`` (its CloudWatch stream) at the end. A stop
    (StopTransformJob turned the job Stopping) sends no further object: the job ends Stopped."""
    from scripts.emulator.hosting import HostingRefused, LocalHosting

    started = time.monotonic()
    request = TransformRequest.from_description(sagemaker.describe_transform_job(TransformJobName=name))
    items = input_objects(s3, request)
    hosting = LocalHosting(endpoint_url=endpoint_url, region=region, work_dir=work_dir, on_event=on_event, docker=docker)
    try:
        hosted = hosting.start_model(name, "transform", request.model_name, request.batch_environment(), label="transform job")
    except HostingRefused as err:  # already one ClientError line naming what is not played
        raise TransformFailed(str(err)) from None
    except RuntimeError as err:
        raise TransformFailed(f"ClientError: the model {request.model_name} did not start for batch transform: {err}") from None
    outputs, count = [], 0
    try:
        answer = None
        if request.unsettled:  # SageMaker asks only for what the job left unset
            answer = execution_parameters(hosted.url)
            on_event(f"transform job {name}: GET /execution-parameters answered {json.dumps(answer) if answer else 'nothing (defaults)'}")
        request = request.settled(answer)
        on_event(
            f"transform job {name}: {len(items)} object(s), SplitType {request.split_type}, {request.batch_strategy}, "
            f"MaxPayloadInMB {request.max_payload_mb}, up to {request.max_concurrent} request(s) at a time"
        )
        out_bucket, out_prefix = split_s3(request.output_path.rstrip("/") + "/")
        extra = {"ServerSideEncryption": "aws:kms", "SSEKMSKeyId": request.kms_key_id} if request.kms_key_id else {}
        with concurrent.futures.ThreadPoolExecutor(max_workers=request.max_concurrent or 1) as pool:
            for item in items:
                if stop_requested():
                    on_event(f"transform job {name}: stop requested; no further object sent")
                    break
                body, records = transform_object(s3, hosted.url, item, request, pool)
                key = f"{out_prefix}{item.relative}.out"
                s3.put_object(Bucket=out_bucket, Key=key, Body=body, **extra)
                outputs.append(f"s3://{out_bucket}/{key}")
                count += records
    finally:
        hosting._terminate(hosted)
        if hosted.log_file.is_file():
            log_sink(hosted.log_file.read_text(encoding="utf-8", errors="replace").splitlines())
    seconds = time.monotonic() - started
    status = "Stopped" if stop_requested() else "Completed"
    return TransformOutcome(name, status, None, outputs, count, seconds, hosted.log_file, request.parameters, answer)


def record(backend_job: Any, outcome: TransformOutcome) -> None:
    """Write the outcome on moto's transform job, as DescribeTransformJob will show it."""
    from moto.core.utils import utcnow

    backend_job.transform_job_status = outcome.status
    backend_job.failure_reason = (outcome.failure_reason or "")[:1024] or None
    backend_job.transform_end_time = backend_job.last_modified_time = utcnow()
