"""The SageMaker Python SDK (v2) runs a batch transform over a CSV in S3, on the emulator.

What a SageMaker user does after ``fit``: ``estimator.transformer(...).transform(s3_uri,
content_type="text/csv", split_type="Line")``, then reads ``<output_path>/<file>.out``. The
emulator's local runner trains the user's script (``sdk_user_code/train.py``) as a platform
training job, then plays SageMaker batch transform for the job the SDK creates: the real serve
mode on the trained model, ``/invocations`` per record or per batch, the ``.out`` object written
with the job's KMS key. The tests assert on the predictions (one per row, in order, the same
whichever way the rows were batched, and kept beside each row's id by ``DataProcessing``), and
that a bad record or a model that does not start fails the job with one line, never a Completed
job with missing rows.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any, Iterator

import boto3
import numpy as np
import pytest

from scripts.emulator.lifecycle import Lifecycle, Options
from scripts.sdk_config import CONFIG_ENV
from tests.integration.sdk_clock import fast_sdk_polls
from tests.offline import loopback_only

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.filterwarnings("ignore:Tried to parse:UserWarning")]

USER_CODE = Path(__file__).resolve().parent / "sdk_user_code"
IMAGE_URI = "123456789012.dkr.ecr.us-east-1.amazonaws.com/gputrain-training:sdk-test"
INSTANCE_TYPE = "ml.g5.xlarge"
BUCKET = "gputrain-sdk-transform"
ROWS = 300


def _rows(count: int, seed: int, label: bool) -> bytes:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(count, 4)).astype("float32")
    header = "f0,f1,f2,f3,label\n" if label else ""
    return (header + "".join(",".join(f"{v:.5f}" for v in row) + (f",{int(row[0] + row[1] > 0)}" if label else "") + "\n" for row in x)).encode()


def point_the_sdk_at(lifecycle: Lifecycle, patch: pytest.MonkeyPatch) -> None:
    """The started emulator as the SDK's AWS: its endpoint, keys and region, no profile, a fresh boto3
    default session, fast polls."""
    for key in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        patch.setenv(key, lifecycle.env[key])
    patch.setenv("AWS_DEFAULT_REGION", lifecycle.region)
    patch.setenv("AWS_REGION", lifecycle.region)
    patch.setenv("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
    patch.delenv("AWS_PROFILE", raising=False)
    patch.setattr(boto3, "DEFAULT_SESSION", None)
    fast_sdk_polls(patch)


def start_for_the_sdk(lifecycle: Lifecycle, patch: pytest.MonkeyPatch, work: Path) -> Any:
    """Start the emulator, point the SDK at it (telemetry off, fast polls), upload 96 labelled
    training rows to ``s3://BUCKET/train/``; returns an S3 client."""
    lifecycle.start()
    point_the_sdk_at(lifecycle, patch)
    # As scripts.sdk_config's file does: no telemetry GET to a public AWS bucket.
    defaults = work / "sdk-defaults.yaml"
    defaults.write_text(json.dumps({"SchemaVersion": "1.0", "SageMaker": {"PythonSDK": {"Modules": {"TelemetryOptOut": True}}}}))
    patch.setenv(CONFIG_ENV, str(defaults))
    s3 = lifecycle.client("s3")
    s3.create_bucket(Bucket=BUCKET)
    s3.put_object(Bucket=BUCKET, Key="train/part-0.csv", Body=_rows(96, 7, label=True))
    return s3


def script_mode_estimator(lifecycle: Lifecycle, **kwargs: Any) -> Any:
    """``sagemaker.tensorflow.TensorFlow`` over ``sdk_user_code/train.py`` on the platform image."""
    import sagemaker
    from sagemaker.tensorflow import TensorFlow

    return TensorFlow(
        entry_point="train.py", source_dir=str(USER_CODE), image_uri=IMAGE_URI, framework_version="2.21", py_version="py3",
        role=f"arn:aws:iam::{lifecycle.account}:role/gputrain-sdk-user", instance_count=1, instance_type=INSTANCE_TYPE,
        output_path=f"s3://{BUCKET}/training-jobs", sagemaker_session=sagemaker.Session(default_bucket=BUCKET), **kwargs,
    )


class Sdk:
    """The emulator with a trained estimator, and what the tests need to run transforms."""

    def __init__(self, lifecycle: Lifecycle, estimator: Any, kms_key: str, patch: pytest.MonkeyPatch) -> None:
        self.lifecycle, self.estimator, self.kms_key, self.patch = lifecycle, estimator, kms_key, patch
        self.s3 = lifecycle.client("s3")

    def transform(self, data_key: str, output: str, processing: dict[str, str] | None = None, **kwargs: Any) -> tuple[Any, Exception | None]:
        """``estimator.transformer(**kwargs).transform(..., **processing)``; the transformer and what ``transform`` raised."""
        transformer = self.estimator.transformer(
            instance_count=1, instance_type=INSTANCE_TYPE, output_path=f"s3://{BUCKET}/{output}/", output_kms_key=self.kms_key, **kwargs
        )
        error = None
        with loopback_only(self.patch) as outside:
            try:
                transformer.transform(
                    f"s3://{BUCKET}/{data_key}", content_type="text/csv", split_type="Line", wait=True, logs=False, **(processing or {})
                )
            except Exception as err:  # noqa: BLE001 - asserted on by the tests
                error = err
        assert outside == [], f"the SDK left the emulator: {outside}"
        return transformer, error

    def output(self, key: str) -> dict[str, Any]:
        """The object's GetObject answer, its body read into ``Content``."""
        answer = self.s3.get_object(Bucket=BUCKET, Key=key)
        return {**answer, "Content": answer["Body"].read()}


@pytest.fixture(scope="module")
def sdk(tmp_path_factory: pytest.TempPathFactory, containers: bool) -> Iterator[Sdk]:
    """The emulator with its local runner, a CSV in S3, and the user's script trained by ``fit``."""
    work = tmp_path_factory.mktemp("sdk-transform")
    lifecycle = Lifecycle(Options(work_dir=work / "run", job_timeout_seconds=600, containers=containers))
    patch = pytest.MonkeyPatch()
    try:
        s3 = start_for_the_sdk(lifecycle, patch, work)
        s3.put_object(Bucket=BUCKET, Key="score/rows.csv", Body=_rows(ROWS, 11, label=False))
        kms_key = lifecycle.client("kms").create_key(Description="transform output")["KeyMetadata"]["Arn"]
        estimator = script_mode_estimator(lifecycle, hyperparameters={"epochs": 1, "batch-size": 32})
        with loopback_only(patch) as outside:
            estimator.fit({"training": f"s3://{BUCKET}/train/"}, logs=False)
        assert outside == [], f"the SDK left the emulator: {outside}"
        yield Sdk(lifecycle, estimator, kms_key, patch)
    finally:
        patch.undo()
        lifecycle.close()


def _predictions(body: bytes) -> list[list[float]]:
    """Every prediction of an ``AssembleWith=Line`` output, one JSON answer per line, in order."""
    return [row for line in body.decode().splitlines() for row in json.loads(line)["predictions"]]


@pytest.fixture(scope="module")
def scored(sdk: Sdk) -> tuple[Any, dict[str, Any]]:
    """300 rows, MultiRecord, assembled by line: the transformer and its ``rows.csv.out``."""
    transformer, error = sdk.transform("score/", "scored", strategy="MultiRecord", assemble_with="Line", accept="application/json")
    assert error is None, error
    return transformer, sdk.output("scored/rows.csv.out")


def test_a_multi_record_transform_writes_one_prediction_per_row_with_the_jobs_kms_key(sdk: Sdk, scored) -> None:
    transformer, out = scored
    predictions = _predictions(out["Content"])
    assert len(predictions) == ROWS
    assert all(len(p) == 2 and sum(p) == pytest.approx(1.0, abs=1e-4) for p in predictions)  # softmax over 2 classes
    assert out["ServerSideEncryption"] == "aws:kms" and out["SSEKMSKeyId"] == sdk.kms_key
    job = sdk.lifecycle.client("sagemaker").describe_transform_job(TransformJobName=transformer.latest_transform_job.name)
    assert job["TransformJobStatus"] == "Completed"
    assert (job["BatchStrategy"], job["TransformInput"]["SplitType"]) == ("MultiRecord", "Line")
    outcome = sdk.lifecycle.runner.transforms[job["TransformJobName"]]
    assert (outcome.records, outcome.outputs) == (ROWS, [f"s3://{BUCKET}/scored/rows.csv.out"])
    # The job set only BatchStrategy: the runner asked the serve mode for the rest, as SageMaker does,
    # and ran with its answer (one CPU replica: two requests at a time; its 6 MB request limit).
    assert outcome.container_answer == {"MaxConcurrentTransforms": 2, "BatchStrategy": "MULTI_RECORD", "MaxPayloadInMB": 6}
    assert outcome.parameters == {"MaxConcurrentTransforms": 2, "BatchStrategy": "MultiRecord", "MaxPayloadInMB": 6}
    # The serve mode ran as SageMaker starts it for batch transform, and its log reached CloudWatch.
    logs = sdk.lifecycle.client("logs")
    streams = logs.describe_log_streams(logGroupName="/aws/sagemaker/TransformJobs", logStreamNamePrefix=job["TransformJobName"])
    assert streams["logStreams"], "no log stream for the transform job"


def test_single_record_requests_give_the_same_predictions_in_input_order(sdk: Sdk, scored) -> None:
    _, out = scored
    batched = _predictions(out["Content"])
    transformer, error = sdk.transform(
        "score/rows.csv", "single", strategy="SingleRecord", assemble_with="Line", accept="application/json", max_concurrent_transforms=4
    )
    assert error is None, error
    outcome = sdk.lifecycle.runner.transforms[transformer.latest_transform_job.name]
    # What the job set reaches the container (SAGEMAKER_*) and is said back; the payload limit is the container's.
    assert outcome.container_answer == {"MaxConcurrentTransforms": 4, "BatchStrategy": "SINGLE_RECORD", "MaxPayloadInMB": 6}
    assert outcome.parameters == {"MaxConcurrentTransforms": 4, "BatchStrategy": "SingleRecord", "MaxPayloadInMB": 6}
    lines = sdk.output("single/rows.csv.out")["Content"].decode().splitlines()
    assert len(lines) == ROWS  # one answer per record, each on its own line
    single = [json.loads(line)["predictions"][0] for line in lines]
    np.testing.assert_allclose(single, batched, atol=1e-5)  # row i's answer is row i's, however it was batched


def test_a_join_writes_each_rows_id_and_its_prediction_in_input_order(sdk: Sdk, scored) -> None:
    # SageMaker's documented example: the id column is kept from the model, joined back, and kept with the answer.
    rows = _rows(ROWS, 11, label=False).decode().splitlines()
    sdk.s3.put_object(Bucket=BUCKET, Key="ids/rows.csv", Body="".join(f"row-{i},{row}\n" for i, row in enumerate(rows)).encode())
    processing = {"input_filter": "$[1:]", "join_source": "Input", "output_filter": "$[0,-1]"}
    transformer, error = sdk.transform("ids/", "joined", processing, strategy="MultiRecord", assemble_with="Line", accept="application/json")
    assert error is None, error
    job = sdk.lifecycle.client("sagemaker").describe_transform_job(TransformJobName=transformer.latest_transform_job.name)
    assert job["DataProcessing"] == {"InputFilter": "$[1:]", "OutputFilter": "$[0,-1]", "JoinSource": "Input"}
    lines = [line.split(",") for line in sdk.output("joined/rows.csv.out")["Content"].decode().splitlines()]
    assert [line[0] for line in lines] == [f"row-{i}" for i in range(ROWS)] and {len(line) for line in lines} == {2}
    # The last joined column is the answer's last value: the row's class-1 probability, as without the id.
    np.testing.assert_allclose([float(line[1]) for line in lines], [p[1] for p in _predictions(scored[1]["Content"])], atol=1e-5)


def test_a_bad_record_fails_the_job_in_one_line_naming_the_file_and_record(sdk: Sdk) -> None:
    rows = _rows(10, 3, label=False).decode().splitlines()
    rows[6] = "0.1,0.2,oops,0.4"
    sdk.s3.put_object(Bucket=BUCKET, Key="bad/bad.csv", Body=("\n".join(rows) + "\n").encode())
    transformer, error = sdk.transform("bad/", "bad-out", strategy="SingleRecord", assemble_with="Line")
    assert error is not None
    job = sdk.lifecycle.client("sagemaker").describe_transform_job(TransformJobName=transformer.latest_transform_job.name)
    reason = job["FailureReason"]
    assert job["TransformJobStatus"] == "Failed" and "\n" not in reason
    assert reason.startswith(f"ClientError: s3://{BUCKET}/bad/bad.csv record 7: the model container answered 400"), reason
    assert "oops" in reason
    assert "Contents" not in sdk.s3.list_objects_v2(Bucket=BUCKET, Prefix="bad-out/")  # nothing written for a failed object


def test_a_model_that_does_not_start_fails_the_job(sdk: Sdk) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        info = tarfile.TarInfo("README.txt")
        tar.addfile(info, io.BytesIO(b""))
    sdk.s3.put_object(Bucket=BUCKET, Key="empty/model.tar.gz", Body=buffer.getvalue())
    sagemaker_client = sdk.lifecycle.client("sagemaker")
    sagemaker_client.create_model(
        ModelName="no-model", ExecutionRoleArn=f"arn:aws:iam::{sdk.lifecycle.account}:role/gputrain-sdk-user",
        PrimaryContainer={"Image": IMAGE_URI, "ModelDataUrl": f"s3://{BUCKET}/empty/model.tar.gz"},
    )
    from sagemaker.transformer import Transformer

    transformer = Transformer("no-model", instance_count=1, instance_type=INSTANCE_TYPE, output_path=f"s3://{BUCKET}/never/")
    with loopback_only(sdk.patch):
        with pytest.raises(Exception, match="did not start"):
            transformer.transform(f"s3://{BUCKET}/score/", content_type="text/csv", split_type="Line", wait=True, logs=False)
    job = sagemaker_client.describe_transform_job(TransformJobName=transformer.latest_transform_job.name)
    assert job["TransformJobStatus"] == "Failed"
    assert job["FailureReason"].startswith("ClientError: the model no-model did not start for batch transform"), job["FailureReason"]


INFERENCE_PY = '''
import json


def input_handler(data, context):
    if context.request_content_type != "text/csv":
        raise ValueError("send text/csv, got " + context.request_content_type)
    rows = [[float(v) for v in line.split(",")] for line in data.read().decode("utf-8").splitlines() if line.strip()]
    return json.dumps({"instances": rows})


def output_handler(response, context):
    if response.status_code != 200:
        raise ValueError(response.content.decode("utf-8"))
    predictions = response.json()["predictions"]
    return json.dumps({"classes": [max(range(len(p)), key=p.__getitem__) for p in predictions]}), "application/json"
'''


def test_the_users_inference_py_handlers_answer_the_transform_as_they_answer_the_endpoint(sdk: Sdk, scored) -> None:
    # The trained model repacked with code/inference.py (what TensorFlowModel(entry_point=...) repacks):
    # SageMaker batch transform starts the same serve mode, so the user's handlers shape every batch.
    bucket, key = sdk.estimator.model_data[len("s3://") :].split("/", 1)
    original = tarfile.open(fileobj=io.BytesIO(sdk.s3.get_object(Bucket=bucket, Key=key)["Body"].read()))
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for member in original.getmembers():
            tar.addfile(member, original.extractfile(member) if member.isfile() else None)
        code = INFERENCE_PY.encode()
        info = tarfile.TarInfo("code/inference.py")
        info.size = len(code)
        tar.addfile(info, io.BytesIO(code))
    sdk.s3.put_object(Bucket=BUCKET, Key="handlers/model.tar.gz", Body=buffer.getvalue())
    sagemaker_client = sdk.lifecycle.client("sagemaker")
    sagemaker_client.create_model(
        ModelName="with-handlers", ExecutionRoleArn=f"arn:aws:iam::{sdk.lifecycle.account}:role/gputrain-sdk-user",
        PrimaryContainer={"Image": IMAGE_URI, "ModelDataUrl": f"s3://{BUCKET}/handlers/model.tar.gz"},
    )
    from sagemaker.transformer import Transformer

    transformer = Transformer("with-handlers", instance_count=1, instance_type=INSTANCE_TYPE, output_path=f"s3://{BUCKET}/handled/",
                              strategy="MultiRecord", assemble_with="Line", accept="application/json")  # fmt: skip
    with loopback_only(sdk.patch) as outside:
        transformer.transform(f"s3://{BUCKET}/score/", content_type="text/csv", split_type="Line", wait=True, logs=False)
    assert outside == []
    body = sdk.output("handled/rows.csv.out")["Content"].decode()
    classes = [c for line in body.splitlines() for c in json.loads(line)["classes"]]  # the handler's own JSON
    expected = [max(range(len(p)), key=p.__getitem__) for p in _predictions(scored[1]["Content"])]
    assert len(classes) == ROWS and classes == expected  # one per row, in order, from the same model
