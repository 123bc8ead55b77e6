"""scripts.invoke (files, answers, one-line errors) and scripts.promote (refusals, the deploy command).

``invoke`` talks to SageMaker's runtime through a botocore Stubber: moto answers every
InvokeEndpoint with a canned body, so the error paths (a model's 4xx, throttling, a missing
endpoint) are played exactly as SageMaker's runtime returns them. The emulator lifecycle test
invokes a real serving process through the deployed endpoint.
"""

from __future__ import annotations

import io
import json
from typing import Optional

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import Stubber

from scripts import common, invoke, promote
from scripts.common import Aws, run
from scripts.launch import main as launch_main
from tests.scripts.conftest import PROJECT, REGION

ANSWER = {"predictions": [{"predicted_class": 1, "probabilities": [0.2, 0.8]}, {"predicted_class": 0, "probabilities": [0.9, 0.1]}]}


@pytest.fixture
def runtime(monkeypatch):
    """An Aws whose sagemaker-runtime client is stubbed; scripts.invoke uses it."""
    session = boto3.Session(aws_access_key_id="x", aws_secret_access_key="x", region_name=REGION)
    aws = Aws(session)
    client = aws.client("sagemaker-runtime")
    stubber = Stubber(client)
    monkeypatch.setattr(invoke.Aws, "from_args", classmethod(lambda cls, args: aws))
    with stubber:
        yield stubber
    stubber.assert_no_pending_responses()


@pytest.fixture
def no_sleep(monkeypatch):
    """The waits between tries of a throttled invocation, recorded instead of slept."""
    waits: list[float] = []
    monkeypatch.setattr(invoke.time, "sleep", waits.append)
    return waits


def _body(payload: dict) -> StreamingBody:
    raw = json.dumps(payload).encode()
    return StreamingBody(io.BytesIO(raw), len(raw))


def test_csv_file_is_sent_as_csv_to_the_projects_endpoint(runtime, tmp_path, capsys):
    rows = tmp_path / "rows.csv"
    rows.write_text("0.1,0.2\n0.3,0.4\n")
    runtime.add_response(
        "invoke_endpoint",
        {"Body": _body(ANSWER), "ContentType": "application/json"},
        {"EndpointName": f"{PROJECT}-endpoint", "ContentType": "text/csv", "Accept": "application/json", "Body": rows.read_bytes()},
    )
    assert run(invoke.main, [str(rows)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "row 1: class 1 (p=0.800)  [0.200, 0.800]",
        "row 2: class 0 (p=0.900)  [0.900, 0.100]",
    ]


def test_a_tf_serving_answer_is_printed_row_by_row_not_as_classes():
    regression = {"predictions": [[3.0], [5.0]]}
    assert invoke.render(regression).splitlines() == ["row 1: [3.0]", "row 2: [5.0]"]
    named = {"predictions": [{"score": 0.5, "doubled": [2.0, 4.0]}]}
    assert invoke.render(named) == 'row 1: {"score": 0.5, "doubled": [2.0, 4.0]}'
    assert invoke.render({"outputs": {"score": [0.5]}}) == '{"outputs": {"score": [0.5]}}'


def test_scale_to_zero_invocations_name_the_inference_component(runtime, tmp_path, capsys):
    rows = tmp_path / "rows.csv"
    rows.write_text("0.1,0.2\n")
    runtime.add_response(
        "invoke_endpoint",
        {"Body": _body(ANSWER)},
        {
            "EndpointName": f"{PROJECT}-endpoint",
            "InferenceComponentName": f"{PROJECT}-model",
            "ContentType": "text/csv",
            "Accept": "application/json",
            "Body": rows.read_bytes(),
        },
    )
    assert run(invoke.main, [str(rows), "-c", "serving.scale_to_zero=true"]) == 0


def test_json_from_stdin_to_a_named_endpoint(runtime, monkeypatch, capsys):
    body = b'{"instances": [[0.1, 0.2]]}'
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(body)))
    runtime.add_response(
        "invoke_endpoint",
        {"Body": _body(ANSWER)},
        {"EndpointName": "other", "ContentType": "application/json", "Accept": "application/json", "Body": body},
    )
    assert run(invoke.main, ["-", "--endpoint", "other", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == ANSWER


@pytest.mark.parametrize(
    ("raw", "shown", "as_json"),
    [
        (b"[[0.25, 0.75], [0.5, 0.5]]", "[[0.25, 0.75], [0.5, 0.5]]", "[[0.25, 0.75], [0.5, 0.5]]"),  # a handler's JSON list
        (b"0.25,0.75\n0.5,0.5\n", "0.25,0.75\n0.5,0.5", "0.25,0.75\n0.5,0.5"),  # a handler's CSV
    ],
    ids=["json-list", "csv"],
)
def test_an_answer_that_is_not_a_json_object_is_printed_as_it_came(runtime, tmp_path, capsys, raw, shown, as_json):
    """An inference.py output_handler may answer a JSON list or CSV: printed, not a traceback."""
    rows = tmp_path / "rows.csv"
    rows.write_text("0.1,0.2\n")
    for flags, expected in (([], shown), (["--json"], as_json)):
        runtime.add_response("invoke_endpoint", {"Body": StreamingBody(io.BytesIO(raw), len(raw))},
                             {"EndpointName": f"{PROJECT}-endpoint", "ContentType": "text/csv", "Accept": "application/json",
                              "Body": b"0.1,0.2\n"})
        assert run(invoke.main, [str(rows), *flags]) == 0
        assert capsys.readouterr().out.rstrip("\n") == expected


@pytest.mark.parametrize(
    ("code", "extra", "exit_code", "line"),
    [
        (
            "ModelError",
            {"OriginalStatusCode": 400, "OriginalMessage": '{"error": "Row 1 has 3 values but the model takes 4 features."}'},
            1,
            "error: gputrain-endpoint refused the request (HTTP 400): Row 1 has 3 values but the model takes 4 features.",
        ),
        # The model's own 429 whose message says "throttled": it ran, so it is its refusal, sent once.
        (
            "ModelError",
            {"OriginalStatusCode": 429, "OriginalMessage": '{"error": "upstream feature store throttled"}'},
            1,
            "error: gputrain-endpoint refused the request (HTTP 429): upstream feature store throttled",
        ),
        ("ThrottlingException", {}, 3, "error: gputrain-endpoint is throttling requests (ThrottlingException) (5 tries): retry later"),
        (
            "ModelNotReadyException",
            {},
            3,
            "error: gputrain-endpoint has no model ready to serve (5 tries): its instances are still starting",
        ),
        (
            "ValidationError",
            {},
            3,
            "error: endpoint gputrain-endpoint not found in us-east-1: deploy it",
        ),
    ],
    ids=["model-4xx", "model-429-throttled", "throttled", "model-not-ready", "missing-endpoint"],
)
def test_endpoint_failures_are_one_line(runtime, tmp_path, capsys, no_sleep, code, extra, exit_code, line):
    rows = tmp_path / "rows.csv"
    rows.write_text("1,2,3\n")
    message = {"ValidationError": "Endpoint gputrain-endpoint of account 123456789012 not found.",
               "ModelError": f"Received client error ({extra.get('OriginalStatusCode')}) from primary with message"
                             f" \"{extra.get('OriginalMessage')}\""}.get(code, "no")  # fmt: skip
    tries = invoke.INVOKE_ATTEMPTS if code in invoke.NOT_RUN else 1  # only a refusal before the model ran is sent again
    for _ in range(tries):
        runtime.add_client_error("invoke_endpoint", service_error_code=code, service_message=message, response_meta=None)
    if extra:
        # Stubber cannot set top-level error fields; patch the response the client sees.
        original = runtime.client._make_api_call

        def call(operation, params):
            try:
                return original(operation, params)
            except Exception as err:
                err.response.update(extra)
                raise

        runtime.client._make_api_call = call
    assert run(invoke.main, [str(rows)]) == exit_code
    err = capsys.readouterr().err.strip()
    assert err.startswith(line) and "\n" not in err


def test_throttling_and_a_model_not_ready_are_sent_again_with_growing_waits(runtime, tmp_path, capsys, no_sleep):
    rows = tmp_path / "rows.csv"
    rows.write_text("1,2\n")
    runtime.add_client_error("invoke_endpoint", service_error_code="ThrottlingException", service_message="Rate exceeded")
    runtime.add_client_error("invoke_endpoint", service_error_code="ModelNotReadyException", service_message="loading",
                             http_status_code=429)
    runtime.add_response("invoke_endpoint", {"Body": _body(ANSWER), "ContentType": "application/json"})
    assert run(invoke.main, [str(rows)]) == 0
    assert capsys.readouterr().out.startswith("row 1: class 1")
    assert len(no_sleep) == 2 and 0.5 <= no_sleep[0] <= 1 and 1 <= no_sleep[1] <= 2


def test_a_read_timeout_is_one_line_and_not_sent_again(runtime, tmp_path, capsys, no_sleep):
    """Before: botocore's standard mode retried a ReadTimeoutError, running the same slow inference again."""
    from botocore.exceptions import ReadTimeoutError

    rows = tmp_path / "rows.csv"
    rows.write_text("1,2\n")
    calls = []

    def call(operation, params):
        calls.append(operation)
        raise ReadTimeoutError(endpoint_url="https://runtime.sagemaker.us-east-1.amazonaws.com/endpoints/x/invocations")

    runtime.client._make_api_call = call
    assert run(invoke.main, [str(rows)]) == 1
    err = capsys.readouterr().err.strip()
    assert err == (
        "error: gputrain-endpoint did not answer within 70 s (SageMaker gives a model 60 s); not sent again, since the model "
        "may have run it: send fewer rows per request, or see the endpoint's ModelLatency"
    )
    assert calls == ["InvokeEndpoint"] and no_sleep == []


@pytest.mark.parametrize("status", [500, 503])
def test_an_invocation_the_model_may_have_run_is_sent_once(monkeypatch, tmp_path, capsys, no_sleep, status):
    """Through botocore's own retry handler, against a local server answering 500 or 503: one request.
    Before: standard mode with max_attempts 4 sent it 5 times (each a full inference on the endpoint)."""
    import http.server
    import threading

    requests: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            requests.append(self.path)
            body = json.dumps({"message": "boom"}).encode()
            self.send_response(status)
            self.send_header("x-amzn-ErrorType", "InternalFailure" if status == 500 else "ServiceUnavailable")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER_RUNTIME", f"http://127.0.0.1:{server.server_port}")
    aws = Aws(boto3.Session(aws_access_key_id="x", aws_secret_access_key="x", region_name=REGION))
    monkeypatch.setattr(invoke.Aws, "from_args", classmethod(lambda cls, args: aws))
    rows = tmp_path / "rows.csv"
    rows.write_text("1,2\n")
    try:
        assert run(invoke.main, [str(rows)]) != 0
    finally:
        server.shutdown()
    assert requests == [f"/endpoints/{PROJECT}-endpoint/invocations"]
    assert capsys.readouterr().err.strip().startswith("error: InvokeEndpoint failed: ")


def test_the_runtime_client_waits_past_sagemakers_60_s_and_retries_nothing():
    config = common.client_config("sagemaker-runtime")
    assert config.read_timeout == 70 and config.retries == {"mode": "standard", "total_max_attempts": 1}
    assert common.client_config("sagemaker").retries["mode"] == "standard"


@pytest.mark.parametrize(
    ("name", "content", "line"),
    [
        ("missing.csv", None, "error: cannot read {path}: No such file or directory"),
        ("empty.csv", "", "error: {path} is empty: give at least one row of features"),
        ("header.csv", "a,b\n1,2\n", "error: {path} line 1 value 1 is 'a', not a number (CSV rows are features only"),
        ("bad.json", "[[1, 2]", "error: {path} is not valid JSON: Expecting"),
    ],
)
def test_bad_files_are_one_line_and_nothing_is_sent(tmp_path, capsys, name, content, line):
    path = tmp_path / name
    if content is not None:
        path.write_text(content)
    assert run(invoke.main, [str(path)]) == 2  # the FILE argument is the mistake: usage
    assert capsys.readouterr().err.strip().startswith(line.format(path=path))


def test_a_payload_over_6_mb_is_refused_before_sending(tmp_path, capsys):
    path = tmp_path / "big.csv"
    path.write_text("1.0,2.0\n" * 800_000)
    assert run(invoke.main, [str(path)]) == 2
    assert "over SageMaker's 6 MB invocation limit" in capsys.readouterr().err


def _completed_job_with_model(moto_backends, name: str, *, upload: bool = True) -> None:
    assert launch_main(["--direct", "--name", name]) == 0
    bucket = boto3.client("cloudformation", region_name=REGION).describe_stacks(StackName=f"{PROJECT}-data")["Stacks"][0]
    artifacts = {o["OutputKey"]: o["OutputValue"] for o in bucket["Outputs"]}["ArtifactsBucketName"]
    key = f"training-jobs/{name}/output/model.tar.gz"
    moto_backends.set_job(name, "Completed", "Completed", model_artifacts={"S3ModelArtifacts": f"s3://{artifacts}/{key}"})
    if upload:
        boto3.client("s3", region_name=REGION).put_object(Bucket=artifacts, Key=key, Body=b"model")


def test_promote_checks_the_job_and_prints_the_blue_green_deploy(aws, moto_backends, capsys):
    _completed_job_with_model(moto_backends, f"{PROJECT}-promote-ok")
    assert run(promote.main, [f"{PROJECT}-promote-ok", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert f"{PROJECT}-promote-ok completed; model s3://" in out
    assert f"deploy {PROJECT}-serving --require-approval never -c gpu_training.serving.enabled=true " in out
    assert f"-c gpu_training.serving.training_job_name={PROJECT}-promote-ok" in out
    # Its own deploy (app.py does not hold the model against the promotion record), the other source null.
    assert "-c gpu_training.serving.model_artifact_key=null" in out and out.rstrip().endswith("-c promote:deploy=true")


@pytest.mark.parametrize("status", ["Failed", "Stopped", "InProgress"])
def test_promote_refuses_a_job_that_did_not_complete(aws, moto_backends, capsys, status):
    name = f"{PROJECT}-promote-{status.lower()}"
    assert launch_main(["--direct", "--name", name]) == 0
    moto_backends.set_job(name, status, status, failure_reason="AlgorithmError: diverged" if status == "Failed" else None)
    capsys.readouterr()
    try:
        assert run(promote.main, [name]) == 1
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"error: {name} is {status}") and err.endswith("only a Completed job's model can be promoted")
    finally:
        # The moto server is shared by the session: leave no job running for the other scripts' tests.
        moto_backends.set_job(name, "Stopped", "Stopped")


def test_promote_of_a_missing_job_or_artifact_is_one_line(aws, moto_backends, capsys):
    assert run(promote.main, [f"{PROJECT}-no-such-job"]) == 3
    assert "training job gputrain-no-such-job not found" in capsys.readouterr().err
    _completed_job_with_model(moto_backends, f"{PROJECT}-promote-gone", upload=False)
    capsys.readouterr()
    assert run(promote.main, [f"{PROJECT}-promote-gone", "--dry-run"]) == 3
    assert "model.tar.gz does not exist" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------
# The promotion record (SSM /<project>/serving/promotion) and --rollback
# ------------------------------------------------------------------------------------------


class FakeCdk:
    """Stands in for ``cdk deploy`` (the emulator suite runs the real one): records each deploy's model
    (the job of training_job_name, or the model_artifact_key) and context, returns the exit code the test
    sets and, on success, does what CloudFormation does with the serving stack in moto: a Model of the
    artifact, the stack's EndpointConfig on it (a real ``<project>-serving`` stack, so
    ``list_stack_resources`` names it) on ``serving.instance_type`` and the endpoint on that config. A
    template unchanged since the last deploy changes nothing ("no changes"), as with cdk. SageMaker's
    refusal is played too: an update that changes the live variant's instance type fails while the
    variant is an autoscaling target (every deploy but one with ``promote:no_autoscaling`` leaves one)."""

    def __init__(self) -> None:
        self.deployed: list[str] = []
        self.contexts: list[dict[str, str]] = []
        self.returncode = 0
        self.fail_on_type: Optional[str] = None
        self.template: Optional[str] = None
        self.scaling = False

    def __call__(self, command, **kwargs):
        assert command[command.index("deploy") + 1] == f"{PROJECT}-serving"
        assert kwargs["cwd"] == common.ROOT and command[-2] == "--output", command
        assert not command[-1].startswith(str(common.ROOT)), "not the checkout's cdk.out, where another CLI may be"
        context = dict(c.split("=", 1) for c in command[command.index("deploy") + 2 : -2] if "=" in c)
        job, key = context["gpu_training.serving.training_job_name"], context["gpu_training.serving.model_artifact_key"]
        assert (job == "null") != (key == "null"), context  # exactly one source: they are exclusive
        assert context.get("promote:deploy") == "true", "promote's own deploy: app.py does not hold it against the record"
        self.deployed.append(job if job != "null" else key)
        self.contexts.append(context)
        returncode = self.returncode
        if returncode == 0:
            returncode = self._deploy(key if key != "null" else f"training-jobs/{job}/output/model.tar.gz", context)
        return type("Completed", (), {"returncode": returncode})()

    def _deploy(self, key: str, context: dict[str, str]) -> int:
        instance_type = context.get("gpu_training.serving.instance_type", SERVING_TYPE)
        if instance_type == self.fail_on_type:
            return 1
        sagemaker = boto3.client("sagemaker", region_name=REGION)
        exists = ENDPOINT in [e["EndpointName"] for e in sagemaker.list_endpoints()["Endpoints"]]
        template = json.dumps({"Resources": {"EndpointConfig": {"Type": "AWS::SageMaker::EndpointConfig", "Properties": {
            "ProductionVariants": [{"VariantName": "AllTraffic", "ModelName": _model(key), "InitialInstanceCount": 1,
                                    "InstanceType": instance_type}]}}}})  # fmt: skip
        if template != self.template:
            if exists and _live_type() != instance_type and self.scaling:
                return 1  # UpdateEndpoint refused: the instance type of an autoscaling target; the stack rolls back
            cloudformation = boto3.client("cloudformation", region_name=REGION)
            if self.template is None:
                cloudformation.create_stack(StackName=SERVING, TemplateBody=template)
            else:
                cloudformation.update_stack(StackName=SERVING, TemplateBody=template)
            self.template = template
            resources = cloudformation.list_stack_resources(StackName=SERVING)["StackResourceSummaries"]
            config = resources[0]["PhysicalResourceId"].rsplit("/", 1)[-1]
            if not exists:
                sagemaker.create_endpoint(EndpointName=ENDPOINT, EndpointConfigName=config)
            else:
                sagemaker.update_endpoint(EndpointName=ENDPOINT, EndpointConfigName=config)
        # The scalable target is removed or created after the endpoint's update (it depends on the endpoint).
        self.scaling = context.get("promote:no_autoscaling") != "true"
        return 0


def _live_type() -> str:
    sagemaker = boto3.client("sagemaker", region_name=REGION)
    config = sagemaker.describe_endpoint(EndpointName=ENDPOINT)["EndpointConfigName"]
    return sagemaker.describe_endpoint_config(EndpointConfigName=config)["ProductionVariants"][0]["InstanceType"]


SERVING, ENDPOINT = f"{PROJECT}-serving", f"{PROJECT}-endpoint"
SERVING_TYPE = "ml.g4dn.xlarge"
"""serving.instance_type of these tests (moto's CloudFormation knows no g5 type): cdk.json's, as far as
the scripts and FakeCdk can tell."""
UPDATE_ENDPOINT_CALLS: list[dict] = []


def _model(job_or_key: str) -> str:
    """The Model of a job's artifact, or of an artifact key (CloudFormation's, or the pipeline's CreateModel)."""
    key = job_or_key if "/" in job_or_key else f"training-jobs/{job_or_key}/output/model.tar.gz"
    sagemaker = boto3.client("sagemaker", region_name=REGION)
    name = f"{PROJECT}-model-{key.split('/')[1]}"[:63]
    if name not in [m["ModelName"] for m in sagemaker.list_models()["Models"]]:
        outputs = boto3.client("cloudformation", region_name=REGION).describe_stacks(StackName=f"{PROJECT}-data")["Stacks"][0]["Outputs"]
        artifacts = {o["OutputKey"]: o["OutputValue"] for o in outputs}["ArtifactsBucketName"]
        sagemaker.create_model(
            ModelName=name, ExecutionRoleArn=f"arn:aws:iam::123456789012:role/{PROJECT}-endpoint",
            PrimaryContainer={"Image": "image:1", "ModelDataUrl": f"s3://{artifacts}/{key}"},
        )  # fmt: skip
    return name


def _patch_update_endpoint(monkeypatch) -> None:
    """moto has no UpdateEndpoint: the endpoint moves to the config at once and is InService (SageMaker's
    blue/green takes minutes); every request is recorded. ``ROLLED_BACK`` configs are refused as an alarm
    would: the endpoint stays where it was, with a FailureReason."""
    from moto.core.responses import ActionResult
    from moto.sagemaker.responses import SageMakerResponse

    def update_endpoint(self):
        request = {k: self._get_param(k) for k in ("EndpointName", "EndpointConfigName", "DeploymentConfig")}
        UPDATE_ENDPOINT_CALLS.append(request)
        backend = self.sagemaker_backend
        backend.describe_endpoint_config(request["EndpointConfigName"])  # ValidationError when missing
        endpoint = backend.endpoints[request["EndpointName"]]
        if request["EndpointConfigName"] in ROLLED_BACK:
            endpoint.failure_reason = "the 5xx alarm fired; rolled back"
        else:
            endpoint.endpoint_config_name = request["EndpointConfigName"]
        return ActionResult({"EndpointArn": endpoint.arn})

    monkeypatch.setattr(SageMakerResponse, "update_endpoint", update_endpoint, raising=False)


ROLLED_BACK: set[str] = set()


@pytest.fixture
def fake_cdk(monkeypatch):
    cdk = FakeCdk()
    monkeypatch.setattr(common.subprocess, "run", cdk)
    project_context = common.project_context
    monkeypatch.setattr(common, "project_context", lambda overrides=(): project_context([f"serving.instance_type={SERVING_TYPE}", *overrides]))
    _patch_update_endpoint(monkeypatch)
    UPDATE_ENDPOINT_CALLS.clear()
    ROLLED_BACK.clear()
    yield cdk
    boto3.client("ssm", region_name=REGION).delete_parameter(Name=f"/{PROJECT}/serving/promotion")
    sagemaker = boto3.client("sagemaker", region_name=REGION)
    if ENDPOINT in [e["EndpointName"] for e in sagemaker.list_endpoints()["Endpoints"]]:
        sagemaker.delete_endpoint(EndpointName=ENDPOINT)
    if cdk.template is not None:
        boto3.client("cloudformation", region_name=REGION).delete_stack(StackName=SERVING)


def _served() -> tuple[str, str]:
    """The endpoint's config and the ModelDataUrl of its model."""
    sagemaker = boto3.client("sagemaker", region_name=REGION)
    config = sagemaker.describe_endpoint(EndpointName=ENDPOINT)["EndpointConfigName"]
    [variant] = sagemaker.describe_endpoint_config(EndpointConfigName=config)["ProductionVariants"]
    return config, sagemaker.describe_model(ModelName=variant["ModelName"])["PrimaryContainer"]["ModelDataUrl"]


def _pipeline_promotes(job: str) -> str:
    """What the pipeline's promote step does: CreateModel, CreateEndpointConfig, UpdateEndpoint (outside
    CloudFormation); then it records the promotion. Returns its config's name."""
    sagemaker = boto3.client("sagemaker", region_name=REGION)
    config = f"{PROJECT}-pipeline-{job}"[:63]
    sagemaker.create_endpoint_config(EndpointConfigName=config, ProductionVariants=[
        {"VariantName": "AllTraffic", "ModelName": _model(job), "InitialInstanceCount": 1, "InstanceType": SERVING_TYPE}])  # fmt: skip
    sagemaker.update_endpoint(EndpointName=ENDPOINT, EndpointConfigName=config)
    aws = common.Aws(boto3.Session(region_name=REGION))
    deployment = common.Deployment(aws=aws, config=common.load_platform_config())
    _, url = _served()
    promote.write_record(deployment, promote.read_record(deployment).promoted(promote.Promotion(job=job, model_data_url=url)))
    return config


def _record() -> dict:
    value = boto3.client("ssm", region_name=REGION).get_parameter(Name=f"/{PROJECT}/serving/promotion")["Parameter"]["Value"]
    return json.loads(value)


def test_promote_records_the_live_model_and_rollback_returns_to_the_previous_one(aws, moto_backends, fake_cdk, capsys):
    first, second = f"{PROJECT}-rec-first", f"{PROJECT}-rec-second"
    for name in (first, second):
        _completed_job_with_model(moto_backends, name)
    moto_backends.set_job(second, "Completed", "Completed", final_metric_data_list=[{"MetricName": "val_accuracy", "Value": 0.91, "Timestamp": 0}])
    assert run(promote.main, [first]) == 0
    assert run(promote.main, [second]) == 0
    assert fake_cdk.deployed == [first, second]
    record = _record()
    assert record["live"]["job"] == second and record["live"]["metrics"] == {"val_accuracy": 0.91}
    assert record["live"]["model_data_url"].endswith(f"/training-jobs/{second}/output/model.tar.gz")
    assert record["live"]["promoted_by"].startswith("arn:aws:") and record["live"]["promoted_at"].endswith("+00:00")
    assert [p["job"] for p in record["previous"]] == [first]
    tags = boto3.client("ssm", region_name=REGION).list_tags_for_resource(ResourceType="Parameter", ResourceId=f"/{PROJECT}/serving/promotion")
    assert {"Key": "Project", "Value": PROJECT} in tags["TagList"]

    capsys.readouterr()
    assert run(promote.main, ["--rollback"]) == 0
    assert fake_cdk.deployed[-1] == first
    assert f"rolling back {second} -> {first}" in capsys.readouterr().out
    record = _record()
    assert record["live"]["job"] == first and record["previous"] == [] and [p["job"] for p in record["rolled_back"]] == [second]

    # Nothing approved before the first: one line, exit 3, no deploy.
    assert run(promote.main, ["--rollback"]) == 3
    assert capsys.readouterr().err.strip() == (
        f"error: no previous approved model to roll back to ({first} is live; see python -m scripts.promote --show)"
    )
    assert len(fake_cdk.deployed) == 3
    assert run(promote.main, ["--show"]) == 0
    out = capsys.readouterr().out
    assert f"live         {first}" in out and f"rolled back  {second}" in out


def test_a_promotion_recorded_during_the_deploy_is_kept(aws, moto_backends, fake_cdk, monkeypatch):
    """The blue/green deploy bakes for minutes; a promotion the pipeline records meanwhile stays in the
    history: the record is read again just before it is written."""
    first, second, meanwhile = f"{PROJECT}-rec-a", f"{PROJECT}-rec-b", f"{PROJECT}-rec-pipeline"
    for name in (first, second, meanwhile):
        _completed_job_with_model(moto_backends, name)
    assert run(promote.main, [first]) == 0
    deploy = promote.deploy

    def deploy_while_the_pipeline_promotes(deployment, job, context, **options):
        deploy(deployment, job, context, **options)
        record = promote.read_record(deployment)
        pipeline = promote.Promotion(job=meanwhile, model_data_url=f"s3://a/training-jobs/{meanwhile}/output/model.tar.gz")
        promote.write_record(deployment, record.promoted(pipeline))

    monkeypatch.setattr(promote, "deploy", deploy_while_the_pipeline_promotes)
    assert run(promote.main, [second]) == 0
    record = _record()
    assert record["live"]["job"] == second and [p["job"] for p in record["previous"]] == [meanwhile, first]
    # A rollback deploys the newest previous model of the record it read, and records it over the one it reads after.
    monkeypatch.setattr(promote, "deploy", deploy)
    assert run(promote.main, ["--rollback"]) == 0
    assert fake_cdk.deployed[-1] == meanwhile
    record = _record()
    assert record["live"]["job"] == meanwhile and [p["job"] for p in record["previous"]] == [first]
    assert [p["job"] for p in record["rolled_back"]] == [second]


def test_a_failed_deploy_leaves_the_record_naming_what_the_endpoint_serves(aws, moto_backends, fake_cdk, capsys):
    live, bad = f"{PROJECT}-rec-live", f"{PROJECT}-rec-bad"
    for name in (live, bad):
        _completed_job_with_model(moto_backends, name)
    assert run(promote.main, [live]) == 0
    fake_cdk.returncode = 1  # the blue/green deploy tripped an alarm and rolled back
    capsys.readouterr()
    assert run(promote.main, [bad]) == 1
    assert "the promotion record is unchanged" in capsys.readouterr().err
    assert _record()["live"]["job"] == live and _record()["previous"] == []


def test_rollback_after_a_pipeline_promotion_moves_the_endpoint_back_onto_the_stacks_config(aws, moto_backends, fake_cdk, capsys):
    """promote A (CloudFormation on A), the pipeline's UpdateEndpoint serves B, --rollback targets A: the deploy
    of A is "(no changes)" (the template already names A), so promote updates the endpoint to the stack's config
    itself, blue/green with the stack's alarms, and records A only once the endpoint serves it."""
    first, second = f"{PROJECT}-pl-first", f"{PROJECT}-pl-second"
    for name in (first, second):
        _completed_job_with_model(moto_backends, name)
    assert run(promote.main, [first]) == 0
    stack_config, first_url = _served()
    assert first_url.endswith(f"/training-jobs/{first}/output/model.tar.gz") and UPDATE_ENDPOINT_CALLS == []
    pipeline_config = _pipeline_promotes(second)
    assert _served()[0] == pipeline_config and _record()["live"]["job"] == second
    UPDATE_ENDPOINT_CALLS.clear()
    capsys.readouterr()

    assert run(promote.main, ["--rollback"]) == 0
    assert fake_cdk.deployed[-1] == first and fake_cdk.deployed.count(first) == 2  # the second deploy changed nothing
    out = capsys.readouterr().out
    assert f"{ENDPOINT} is on {pipeline_config} (moved outside CloudFormation, e.g. by the pipeline), not {stack_config}" in out
    assert _served() == (stack_config, first_url)
    [update] = UPDATE_ENDPOINT_CALLS
    assert update["EndpointConfigName"] == stack_config
    assert update["DeploymentConfig"]["AutoRollbackConfiguration"]["Alarms"] == [
        {"AlarmName": f"{ENDPOINT}-5xx"}, {"AlarmName": f"{ENDPOINT}-latency"}]
    assert "BlueGreenUpdatePolicy" in update["DeploymentConfig"]
    record = _record()
    assert record["live"]["job"] == first and [p["job"] for p in record["rolled_back"]] == [second]


def test_promote_right_after_a_pipeline_promotion_serves_the_job_or_fails_leaving_the_record(aws, moto_backends, fake_cdk, capsys):
    first, second = f"{PROJECT}-pl-a", f"{PROJECT}-pl-b"
    for name in (first, second):
        _completed_job_with_model(moto_backends, name)
    assert run(promote.main, [first]) == 0
    stack_config, first_url = _served()
    pipeline_config = _pipeline_promotes(second)
    # The blue/green update back onto the stack's config trips an alarm: SageMaker rolls it back.
    ROLLED_BACK.add(stack_config)
    capsys.readouterr()
    assert run(promote.main, [first]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {ENDPOINT} serves s3://") and f"/training-jobs/{second}/" in err and "\n" not in err
    assert f"on {pipeline_config}, not {first}'s {first_url} (the 5xx alarm fired; rolled back); the promotion record is unchanged" in err
    assert _record()["live"]["job"] == second
    # Without the alarm, the same command serves the job again and records it.
    ROLLED_BACK.clear()
    assert run(promote.main, [first]) == 0
    assert _served() == (stack_config, first_url) and _record()["live"]["job"] == first


def test_rollback_refuses_a_previous_model_whose_artifact_is_gone(aws, moto_backends, fake_cdk, capsys):
    old, new = f"{PROJECT}-rec-old", f"{PROJECT}-rec-new"
    for name in (old, new):
        _completed_job_with_model(moto_backends, name)
    assert run(promote.main, [old]) == 0 and run(promote.main, [new]) == 0
    artifacts = _record()["previous"][0]["model_data_url"].split("/")[2]
    boto3.client("s3", region_name=REGION).delete_object(Bucket=artifacts, Key=f"training-jobs/{old}/output/model.tar.gz")
    capsys.readouterr()
    assert run(promote.main, ["--rollback"]) == 3
    assert "model.tar.gz does not exist" in capsys.readouterr().err
    assert fake_cdk.deployed == [old, new] and _record()["live"]["job"] == new


def _artifacts_bucket() -> str:
    outputs = boto3.client("cloudformation", region_name=REGION).describe_stacks(StackName=f"{PROJECT}-data")["Stacks"][0]["Outputs"]
    return {o["OutputKey"]: o["OutputValue"] for o in outputs}["ArtifactsBucketName"]


def test_a_model_written_elsewhere_is_promoted_by_its_key_and_recorded(aws, moto_backends, fake_cdk, capsys):
    """Before: promote's error said to deploy with -c serving.model_artifact_key=<key>, which the record never
    learnt of: the next plain deploy moved the endpoint back. Now the line names promote --artifact-key,
    which serves the key, records it, and rolls back to it."""
    first, moved = f"{PROJECT}-key-first", f"{PROJECT}-key-moved"
    _completed_job_with_model(moto_backends, first)
    assert run(promote.main, [first]) == 0
    assert launch_main(["--direct", "--name", moved]) == 0
    bucket, key = _artifacts_bucket(), f"models/{moved}/model.tar.gz"
    moto_backends.set_job(moved, "Completed", "Completed", model_artifacts={"S3ModelArtifacts": f"s3://{bucket}/{key}"})
    boto3.client("s3", region_name=REGION).put_object(Bucket=bucket, Key=key, Body=b"model")
    capsys.readouterr()
    assert run(promote.main, [moved]) == 3
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"where the serving stack reads it: promote it with python -m scripts.promote {moved} --artifact-key {key}")
    assert run(promote.main, [moved, "--artifact-key", key]) == 0
    assert fake_cdk.deployed[-1] == key and fake_cdk.contexts[-1]["gpu_training.serving.training_job_name"] == "null"
    assert _served()[1] == f"s3://{bucket}/{key}"
    record = _record()
    assert record["live"] == {**record["live"], "job": moved, "model_data_url": f"s3://{bucket}/{key}"}
    # A rollback to it serves it from its key again.
    assert run(promote.main, [first]) == 0
    assert run(promote.main, ["--rollback"]) == 0
    assert fake_cdk.deployed[-1] == key and _served()[1] == f"s3://{bucket}/{key}" and _record()["live"]["job"] == moved


def test_artifact_key_needs_the_job_whose_model_it_is(capsys):
    assert run(promote.main, ["--rollback", "--artifact-key", "models/x/model.tar.gz"]) == 2
    assert capsys.readouterr().err.strip() == "error: --artifact-key names the model of a job: give JOB (or --best-of) with it"


def test_an_instance_type_change_deploys_twice_with_autoscaling_off_in_between(aws, moto_backends, fake_cdk, capsys):
    """SageMaker refuses an UpdateEndpoint that changes the instance type of an autoscaling target (FakeCdk
    plays it). Before: the deploy failed. Now: the live type and model without autoscaling, then the new
    type and model with it."""
    first, second = f"{PROJECT}-type-first", f"{PROJECT}-type-second"
    for name in (first, second):
        _completed_job_with_model(moto_backends, name)
    assert run(promote.main, [first]) == 0 and fake_cdk.scaling
    stack_config, first_url = _served()
    capsys.readouterr()
    assert run(promote.main, [second, "-c", "serving.instance_type=ml.p3.2xlarge"]) == 0
    out = capsys.readouterr().out
    assert f"{ENDPOINT} runs {SERVING_TYPE} and serving.instance_type is ml.p3.2xlarge: SageMaker refuses that change" in out
    step1, step2 = fake_cdk.contexts[-2:]
    assert fake_cdk.deployed[-2:] == [first, second]  # the first step changes nothing the endpoint serves
    assert step1["gpu_training.serving.instance_type"] == SERVING_TYPE and step1["promote:no_autoscaling"] == "true"
    assert step2["gpu_training.serving.instance_type"] == "ml.p3.2xlarge" and "promote:no_autoscaling" not in step2
    assert fake_cdk.scaling and _live_type() == "ml.p3.2xlarge"
    assert _served()[1].endswith(f"/training-jobs/{second}/output/model.tar.gz") and _record()["live"]["job"] == second


def test_a_failed_second_step_puts_autoscaling_back_on_the_live_type(aws, moto_backends, fake_cdk, capsys):
    first, second = f"{PROJECT}-type-a", f"{PROJECT}-type-b"
    for name in (first, second):
        _completed_job_with_model(moto_backends, name)
    assert run(promote.main, [first]) == 0
    served = _served()
    fake_cdk.fail_on_type = "ml.p3.2xlarge"  # e.g. no capacity for the new type, or its alarms rolled it back
    capsys.readouterr()
    assert run(promote.main, [second, "-c", "serving.instance_type=ml.p3.2xlarge"]) == 1
    err = capsys.readouterr().err.strip()
    assert err == (
        f"error: deploy of {SERVING} on ml.p3.2xlarge failed (exit 1); the endpoint serves the previous model on "
        f"{SERVING_TYPE} and autoscaling is back on {SERVING_TYPE} (the promotion record is unchanged)"
    )
    restore = fake_cdk.contexts[-1]
    assert fake_cdk.deployed[-3:] == [first, second, first] and "promote:no_autoscaling" not in restore
    assert restore["gpu_training.serving.instance_type"] == SERVING_TYPE
    assert fake_cdk.scaling and _served() == served and _record()["live"]["job"] == first


def test_no_auto_rollback_deploys_without_the_rollback_alarms_once(aws, moto_backends, fake_cdk, capsys):
    """The alarms watch both fleets during a blue/green update: while the live model errors, every fix
    would be rolled back. The emergency path deploys without them; the next deploy names them again."""
    first, fix = f"{PROJECT}-nar-first", f"{PROJECT}-nar-fix"
    for name in (first, fix):
        _completed_job_with_model(moto_backends, name)
    assert run(promote.main, [first]) == 0
    assert run(promote.main, [fix, "--no-auto-rollback"]) == 0
    assert fake_cdk.contexts[-1]["promote:no_auto_rollback"] == "true" and "promote:no_auto_rollback" not in fake_cdk.contexts[0]
    assert _record()["live"]["job"] == fix


def test_a_corrupt_record_is_one_line_naming_the_parameter(aws, fake_cdk, capsys):
    boto3.client("ssm", region_name=REGION).put_parameter(Name=f"/{PROJECT}/serving/promotion", Value="{not json", Type="String", Overwrite=True)
    assert run(promote.main, ["--show"]) == 3
    assert capsys.readouterr().err.startswith(f"error: the promotion record /{PROJECT}/serving/promotion is not JSON")


def test_promote_takes_exactly_one_of_job_best_of_rollback_show(capsys):
    with pytest.raises(SystemExit) as exc:
        promote.main([])
    assert exc.value.code == 2
    assert "one of the arguments JOB --rollback --show --best-of is required" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, conflict",
    [
        ([f"{PROJECT}-x", "--rollback"], "argument --rollback: not allowed with argument JOB"),
        ([f"{PROJECT}-x", "--show"], "argument --show: not allowed with argument JOB"),
        (["--rollback", "--show"], "argument --show: not allowed with argument --rollback"),
    ],
)
def test_promote_names_the_two_options_that_conflict_and_exits_2(capsys, argv, conflict):
    with pytest.raises(SystemExit) as exc:
        run(promote.main, argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.rstrip().endswith(f"error: {conflict}") and "give a JOB" not in err


def test_the_record_always_fits_a_standard_ssm_parameter():
    """Ten metrics a model make a full history about 7.8 KB, over SSM's 4 KB for a standard (free)
    parameter, where PutParameter would fail after the deploy: the older models' metrics go first,
    then the oldest models; the live model keeps its metrics."""
    metrics = {f"train:metric_{i}": 0.123456789 for i in range(10)}

    def model(i: int) -> promote.Promotion:
        job = f"{PROJECT}-20261127-1908{i:02d}-f353-train"
        return promote.Promotion(job, f"s3://gputrain-data-artifactsbucket88671897-ziehc3ef897d/training-jobs/{job}/output/model.tar.gz",
                                 metrics, f"arn:aws:iam::123456789012:user/ops-{i}", "2026-11-27T19:08:10+00:00")

    short = promote.PromotionRecord(model(0), (model(1),), ())
    assert promote.PromotionRecord.from_json(short.to_json(), "short") == short  # what fits is kept whole
    full = promote.PromotionRecord(model(0), tuple(model(i) for i in range(1, 6)), tuple(model(i) for i in range(6, 11)))
    text = full.to_json()
    assert len(text.encode()) <= 4096
    kept = promote.PromotionRecord.from_json(text, "full")
    assert kept.live == model(0)
    assert [p.job for p in kept.previous] == [p.job for p in full.previous]  # rollback targets go last
    assert all(p.metrics == {} for p in (*kept.previous, *kept.rolled_back))
    assert [p.job for p in kept.rolled_back] == [p.job for p in full.rolled_back[: len(kept.rolled_back)]]


def test_an_artifact_the_caller_may_not_read_names_the_permissions(aws, moto_backends, monkeypatch, capsys):
    """S3 answers HEAD with 403 both when s3:GetObject is missing and, without s3:ListBucket, for a missing
    object: the line names both permissions instead of a bare "HeadObject failed: 403"."""
    _completed_job_with_model(moto_backends, f"{PROJECT}-promote-403")
    plain_client = boto3.session.Session.client

    def client(self, service, *args, **kwargs):
        made = plain_client(self, service, *args, **kwargs)
        if service == "s3":
            made.meta.events.register("before-call.s3.HeadObject", lambda **_: (_Forbidden(), {"Error": {"Code": "403", "Message": "Forbidden"}}))
        return made

    monkeypatch.setattr(boto3.session.Session, "client", client)
    capsys.readouterr()
    assert run(promote.main, [f"{PROJECT}-promote-403", "--dry-run"]) == 3
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: cannot read s3://") and err.endswith(
        "(without ListBucket S3 answers 403 for an object that does not exist)"
    )
    assert "s3:GetObject on it and s3:ListBucket on " in err and "\n" not in err


class _Forbidden:
    status_code = 403
    headers: dict = {}
