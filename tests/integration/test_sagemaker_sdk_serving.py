"""The SageMaker Python SDK (v2) deploys a model with ``inference.py`` and invokes it, on the emulator.

What a user coming from AWS's TensorFlow serving container does: a SavedModel in ``model.tar.gz``
in S3, ``TensorFlowModel(model_data=..., entry_point="inference.py", source_dir=..., image_uri=...)``
(the SDK repacks the archive with ``code/inference.py`` and uploads it), ``deploy``, then
``predictor.predict``. The emulator's hosting runner plays SageMaker hosting for the endpoint the
SDK created (the real ``python -m trainer serve`` on the repacked archive), and the test asserts
the user's handlers ran: the answer carries what only their code adds, and their failure comes
back through the SDK as SageMaker's ModelError with their file and line.
"""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any, Iterator

import pytest

from scripts.emulator.lifecycle import Lifecycle, Options
from tests.integration.test_sagemaker_sdk_transform import point_the_sdk_at
from tests.offline import loopback_only
from tests.serve.models import save_regression

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.filterwarnings("ignore:Tried to parse:UserWarning")]

ROOT = Path(__file__).resolve().parents[2]
ENDPOINT = "gputrain-sdk-inference-py"
IMAGE_URI = "123456789012.dkr.ecr.us-east-1.amazonaws.com/gputrain-training:sdk-test"
INFERENCE_PY = '''\
import json


def input_handler(data, context):
    if context.request_content_type != "text/csv":
        raise ValueError("send text/csv, got " + context.request_content_type)
    return json.dumps({"instances": [[float(v)] for v in data.read().decode("utf-8").split()]})


def output_handler(response, context):
    ys = [row[0] for row in response.json()["predictions"]]
    return json.dumps({"handled_by": "inference.py", "ys": ys}), "application/json"
'''


def readme_block() -> str:
    """The python block of docs/sagemaker-code.md's "Serving your model with your inference.py" section."""
    text = (ROOT / "docs" / "sagemaker-code.md").read_text(encoding="utf-8")
    section = text.split("\n## Serving your model with your `inference.py`\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory, containers: bool) -> Iterator[tuple[Lifecycle, Any, list[Any]]]:
    """The emulator, a model.tar.gz in S3, the SDK's deploy, and hosting for the endpoint it made (in Docker where it runs)."""
    work = tmp_path_factory.mktemp("sdk-serving")
    lifecycle = Lifecycle(Options(work_dir=work / "run", train=False, containers=containers))
    patch = pytest.MonkeyPatch()
    try:
        lifecycle.start()
        point_the_sdk_at(lifecycle, patch)
        bucket = "gputrain-sdk-serving-artifacts"
        s3 = lifecycle.client("s3")
        s3.create_bucket(Bucket=bucket)
        # The model a training job left: a SavedModel in 1/, nothing else.
        model_dir = work / "model"
        save_regression(model_dir)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
            tar.add(model_dir / "1", arcname="1")
        s3.put_object(Bucket=bucket, Key="training-jobs/job-1/output/model.tar.gz", Body=buffer.getvalue())
        code_dir = work / "code"
        code_dir.mkdir()
        (code_dir / "inference.py").write_text(INFERENCE_PY)
        printed: list[Any] = []

        # The docs' example, as written, with its placeholders filled in.
        code = readme_block()
        role = f"arn:aws:iam::{lifecycle.account}:role/gputrain-endpoint"
        for placeholder, value in {
            "<ArtifactsBucketName>": bucket,
            "<job>": "job-1",
            '"my_serving_code/"': repr(str(code_dir)),
            "<ImageUri output of gputrain-data>": IMAGE_URI,
            "<an execution role that reads the model and pulls the image>": role,
            'endpoint_name="gputrain-my-endpoint"': f"endpoint_name={ENDPOINT!r}",
        }.items():
            assert placeholder in code, f"the docs' example lost {placeholder}"
            code = code.replace(placeholder, value)
        predict_line = "print(predictor.predict(\"1\\n2\\n3\"))"
        assert predict_line in code, code
        namespace: dict[str, Any] = {"print": printed.append}
        where = "docs/sagemaker-code.md (Serving your model with your inference.py)"
        with loopback_only(patch) as outside:
            # Up to the deploy; SageMaker's deploy waits for the container, moto's endpoint is
            # InService at once: the hosting runner starts it before the example's predict line.
            exec(compile(code.replace(predict_line, ""), where, "exec"), namespace)  # noqa: S102
            predictor = namespace["predictor"]
            from scripts.emulator.hosting import LocalHosting

            lifecycle.hosting = LocalHosting(
                endpoint_url=lifecycle.emulator.endpoint_url, region=lifecycle.region, work_dir=work / "endpoints", docker=lifecycle.docker
            )
            lifecycle.hosting.serve(ENDPOINT)
            exec(compile(predict_line, where, "exec"), namespace)  # noqa: S102
            yield lifecycle, predictor, printed
        assert outside == [], f"the SDK left the emulator: {outside}"
    finally:
        patch.undo()
        lifecycle.close()


def test_the_sdk_repacked_inference_py_into_the_model(endpoint) -> None:
    lifecycle, _, _ = endpoint
    sagemaker_client = lifecycle.client("sagemaker")
    config = sagemaker_client.describe_endpoint_config(EndpointConfigName=sagemaker_client.describe_endpoint(EndpointName=ENDPOINT)["EndpointConfigName"])
    model = sagemaker_client.describe_model(ModelName=config["ProductionVariants"][0]["ModelName"])
    assert model["PrimaryContainer"]["Image"] == IMAGE_URI
    hosted = lifecycle.hosting.hosted[ENDPOINT]
    # In Docker wherever an engine runs: the endpoint is the built image's container.
    assert (hosted.container is not None) == (lifecycle.docker is not None) == lifecycle.options.containers
    assert (hosted.model_dir / "code" / "inference.py").read_text() == INFERENCE_PY
    assert (hosted.model_dir / "1" / "saved_model.pb").is_file()


def test_the_readmes_predict_runs_the_users_handlers(endpoint) -> None:
    _, predictor, printed = endpoint
    # What the example's print showed: the user's output_handler's JSON, not a TF Serving answer.
    assert printed == [{"handled_by": "inference.py", "ys": [3.0, 5.0, 7.0]}]
    assert predictor.predict("4\n5") == {"handled_by": "inference.py", "ys": [9.0, 11.0]}


def test_a_raising_handler_reaches_the_sdk_as_a_model_error_with_the_users_line(endpoint) -> None:
    from sagemaker.serializers import JSONSerializer

    lifecycle, predictor, _ = endpoint
    predictor.serializer = JSONSerializer()
    with pytest.raises(Exception) as caught:
        predictor.predict({"instances": [[1]]})
    error: Any = caught.value
    assert error.response["Error"]["Code"] == "ModelError"
    assert error.response["OriginalStatusCode"] == 500
    original = json.loads(error.response["OriginalMessage"])
    assert original == {
        "error": "input_handler failed: ValueError: send text/csv, got application/json (inference.py line 6, in input_handler)"
    }
    hosted = lifecycle.hosting.hosted[ENDPOINT]
    assert hosted.process.poll() is None  # the server keeps serving after the handler's failure
    assert "family=serving-container" in hosted.log_file.read_text()
