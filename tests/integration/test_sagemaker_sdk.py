"""The SageMaker Python SDK as the client: defaults file -> TensorFlow estimator -> fit, on the emulator.

What a user of the SDK does, with nothing platform-specific in their code but the image URI:
``python -m scripts.sdk_config``, ``export SAGEMAKER_USER_CONFIG_OVERRIDE=...``, then a
``sagemaker.tensorflow.TensorFlow`` estimator with ``entry_point="train.py"`` and a source
directory, and ``fit({"training": s3_uri})``. The job the emulator records must carry what the
platform's own jobs carry, no request may leave the emulator, the local runner must train the
user's script (not the built-in model) to a model in the artifacts bucket, and the teardown
audit must see the job.

Its own deploy (data and training stacks only, no GPU cluster): the lifecycle in
``test_lifecycle.py`` is module-scoped and destroys at its end, so it cannot be shared.
"""

from __future__ import annotations

import fnmatch
import io
import json
import urllib.parse
import tarfile
from pathlib import Path
from typing import Any, Iterator

import boto3
import numpy as np
import pytest

from scripts.common import Aws, Deployment
from scripts.emulator.lifecycle import Lifecycle, Options
from scripts.sdk_config import CONFIG_ENV, estimator_arguments, python_literal, sdk_defaults
from scripts.teardown_audit import INFO
from stacks.components.training_job_spec import CHECKPOINT_PREFIX, CODE_PREFIX, OUTPUT_PREFIX
from tests.integration.sdk_clock import fast_sdk_polls
from tests.offline import loopback_only

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:Tried to parse:UserWarning"),
]

ROOT = Path(__file__).resolve().parents[2]
USER_CODE = Path(__file__).resolve().parent / "sdk_user_code"
INSTANCE_TYPE = "ml.g5.xlarge"
EPOCHS = 10  # as in the docs' example (96 rows: a second of training)
BATCH_SIZE = 64


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lifecycle]:
    """Data and training stacks deployed on a fresh emulator, local runner watching."""
    lifecycle = Lifecycle(
        Options(work_dir=tmp_path_factory.mktemp("sdk"), stacks=("gputrain-data", "gputrain-training"), job_timeout_seconds=600)
    )
    try:
        lifecycle.start()
        lifecycle.bootstrap_and_synth()
        lifecycle.deploy()
        yield lifecycle
    finally:
        lifecycle.close()


class SdkRun:
    """What one ``fit`` left: the generated file, the job as recorded, the hosts the SDK tried."""

    def __init__(self) -> None:
        self.config_file = Path()
        self.printed = ""
        self.job_name = ""
        self.job: dict[str, Any] = {}
        self.tags: list[dict[str, str]] = []
        self.outside: list[str] = []
        self.wait_error: Exception | None = None
        self.data_uri = ""
        self.expected_arguments: dict[str, Any] = {}


def _outputs(run: Lifecycle, unit: str) -> dict[str, str]:
    return run.outputs[f"{run.config().project_name}-{unit}"]


def _upload_tiny_dataset(run: Lifecycle, uri: str) -> str:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(96, 4)).astype("float32")
    y = (x[:, 0] + x[:, 1] > 0).astype(int)
    text = "f0,f1,f2,f3,label\n" + "".join(",".join(f"{v:.5f}" for v in row) + f",{label}\n" for row, label in zip(x, y))
    bucket, _, prefix = uri[len("s3://") :].partition("/")
    run.client("s3").put_object(Bucket=bucket, Key=f"{prefix}part-0.csv", Body=text.encode())
    return uri


def readme_section() -> str:
    """docs/sagemaker-code.md's "With the SageMaker Python SDK" section."""
    text = (ROOT / "docs" / "sagemaker-code.md").read_text(encoding="utf-8")
    return text.split("\n## With the SageMaker Python SDK\n", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]


def readme_block(language: str) -> str:
    """The first ``language`` code block of that subsection."""
    return readme_section().split(f"```{language}\n", 1)[1].split("```", 1)[0]


@pytest.fixture(scope="module")
def sdk_run(platform: Lifecycle) -> Iterator[SdkRun]:
    """The two commands and docs/sagemaker-code.md's estimator code, run as written, against the emulator."""
    result = SdkRun()
    datasets = _outputs(platform, "data")["DatasetsBucketName"]
    result.data_uri = _upload_tiny_dataset(platform, f"s3://{datasets}/train/")
    commands = [line for line in readme_block("bash").splitlines() if line.strip()]
    assert commands[0] == "python -m scripts.sdk_config", commands
    # The first command, in a child process with the emulator's environment (cwd: the repository).
    result.printed = platform.run_script("sdk_config")
    export, _, value = commands[1].partition("=")
    assert export == f"export {CONFIG_ENV}", commands
    result.config_file = Path(value.replace("$PWD", str(ROOT)))
    assert f"export {CONFIG_ENV}={result.config_file}" in result.printed.splitlines()

    patch = pytest.MonkeyPatch()
    try:
        for key in ("AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                    "AWS_SESSION_TOKEN", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
            patch.setenv(key, platform.env[key])
        patch.delenv("AWS_PROFILE", raising=False)
        # The second command.
        patch.setenv(CONFIG_ENV, str(result.config_file))
        patch.setenv("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
        patch.setattr(boto3, "DEFAULT_SESSION", None)
        fast_sdk_polls(patch)

        # The user's code, as docs/sagemaker-code.md shows it, with its placeholders filled in.
        code = readme_block("python")
        for placeholder, value in {
            '"<ImageUri output of gputrain-data>"': repr(_outputs(platform, "data")["ImageUri"]),
            "<ArtifactsBucketName>": _outputs(platform, "data")["ArtifactsBucketName"],
            "<DatasetsBucketName>": datasets,
            '"my_code/"': repr(str(USER_CODE)),
        }.items():
            assert placeholder in code, f"the docs' example lost {placeholder}"
            code = code.replace(placeholder, value)
        namespace: dict[str, Any] = {}
        with loopback_only(patch) as outside:
            try:
                exec(compile(code, "docs/sagemaker-code.md (With the SageMaker Python SDK)", "exec"), namespace)  # noqa: S102
            except Exception as err:  # noqa: BLE001 - fit raises when the job fails; asserted on below
                result.wait_error = err
        result.outside = list(outside)
        result.job_name = namespace["job_name"]
        deployment = Deployment(config=platform.config(), aws=Aws(boto3.Session(region_name=platform.region)))
        result.expected_arguments = estimator_arguments(sdk_defaults(deployment), result.job_name)
        sagemaker = platform.client("sagemaker")
        result.job = sagemaker.describe_training_job(TrainingJobName=result.job_name)
        result.tags = sagemaker.list_tags(ResourceArn=result.job["TrainingJobArn"])["Tags"]
        yield result
    finally:
        patch.undo()


def test_the_readme_example_passes_the_arguments_sdk_config_prints(sdk_run: SdkRun, platform: Lifecycle) -> None:
    code = readme_block("python")
    artifacts = _outputs(platform, "data")["ArtifactsBucketName"]
    for key, value in sdk_run.expected_arguments.items():
        if key not in ("metric_definitions", "checkpoint_local_path", "checkpoint_s3_uri"):
            literal = python_literal(value)
            assert f"    {key}={literal}," in sdk_run.printed.splitlines(), f"scripts.sdk_config output: {key}"
            literal = literal.replace(artifacts, "<ArtifactsBucketName>")
            assert f"{key}={literal}" in code, f"docs example: {key} should be {literal}"


def test_the_sdk_never_left_the_emulator(sdk_run: SdkRun) -> None:
    # No STS lookup for a bucket name, no telemetry GET to a public S3 bucket.
    assert sdk_run.outside == []


def test_the_job_carries_the_platforms_tags(sdk_run: SdkRun, platform: Lifecycle) -> None:
    config = platform.config()
    assert sdk_run.tags == [{"Key": "Project", "Value": config.project_name}, *({"Key": k, "Value": v} for k, v in config.tags.items())]


def test_the_job_runs_in_the_platforms_network_role_and_keys(sdk_run: SdkRun, platform: Lifecycle) -> None:
    data, training = _outputs(platform, "data"), _outputs(platform, "training")
    job = sdk_run.job
    assert job["RoleArn"] == training["JobRoleArn"]
    assert job["VpcConfig"] == {"SecurityGroupIds": [training["JobSecurityGroupId"]], "Subnets": data["PrivateSubnetIds"].split(",")}
    assert job["EnableNetworkIsolation"] is True
    assert job["OutputDataConfig"] == {"KmsKeyId": data["KeyArn"], "S3OutputPath": f"s3://{data['ArtifactsBucketName']}/{OUTPUT_PREFIX}"}
    # g5 has local NVMe: SageMaker rejects a volume key, and the SDK leaves it out, as the platform does.
    assert "VolumeKmsKeyId" not in job["ResourceConfig"]
    assert job["AlgorithmSpecification"]["TrainingImage"] == data["ImageUri"]


def test_the_volume_key_is_set_where_the_instance_type_takes_one(sdk_run: SdkRun, platform: Lifecycle, monkeypatch) -> None:
    monkeypatch.setenv(CONFIG_ENV, str(sdk_run.config_file))
    for key in ("AWS_ENDPOINT_URL", "AWS_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(key, platform.env[key])
    from sagemaker.tensorflow import TensorFlow

    estimator = TensorFlow(
        entry_point="train.py", source_dir=str(USER_CODE), image_uri=_outputs(platform, "data")["ImageUri"],
        instance_type="ml.p3.2xlarge", instance_count=1,
    )
    assert estimator.volume_kms_key == _outputs(platform, "data")["KeyArn"]


def test_what_the_schema_cannot_hold_arrives_through_the_printed_arguments(sdk_run: SdkRun, platform: Lifecycle) -> None:
    job, artifacts = sdk_run.job, _outputs(platform, "data")["ArtifactsBucketName"]
    tj = platform.config().training_job
    assert job["RetryStrategy"] == {"MaximumRetryAttempts": tj.retry_attempts}
    assert job["EnableManagedSpotTraining"] is tj.use_spot
    assert job["StoppingCondition"]["MaxRuntimeInSeconds"] == tj.max_runtime_seconds
    assert job["CheckpointConfig"]["S3Uri"] == f"s3://{artifacts}/{CHECKPOINT_PREFIX}{sdk_run.job_name}/"
    assert "max_retry_attempts=" in sdk_run.printed


def test_the_code_travels_as_a_channel_into_the_isolated_job(sdk_run: SdkRun, platform: Lifecycle) -> None:
    artifacts, key_arn = _outputs(platform, "data")["ArtifactsBucketName"], _outputs(platform, "data")["KeyArn"]
    channels = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in sdk_run.job["InputDataConfig"]}
    code_uri = f"s3://{artifacts}/{CODE_PREFIX}{sdk_run.job_name}/source/sourcedir.tar.gz"
    assert channels == {"training": sdk_run.data_uri, "code": code_uri}
    hyperparameters = sdk_run.job["HyperParameters"]
    assert json.loads(hyperparameters["sagemaker_program"]) == "train.py"
    assert json.loads(hyperparameters["sagemaker_submit_directory"]) == "/opt/ml/input/data/code/sourcedir.tar.gz"
    assert json.loads(hyperparameters["epochs"]) == EPOCHS
    head = platform.client("s3").head_object(Bucket=artifacts, Key=code_uri.split("/", 3)[3])
    assert head["ServerSideEncryption"] == "aws:kms" and head["SSEKMSKeyId"] == key_arn


def test_the_local_runner_trained_the_users_script_to_a_model(sdk_run: SdkRun, platform: Lifecycle) -> None:
    job = sdk_run.job
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason") or sdk_run.wait_error
    artifact = job["ModelArtifacts"]["S3ModelArtifacts"]
    artifacts = _outputs(platform, "data")["ArtifactsBucketName"]
    assert artifact == f"s3://{artifacts}/{OUTPUT_PREFIX}{sdk_run.job_name}/output/model.tar.gz"
    body = platform.client("s3").get_object(Bucket=artifacts, Key=artifact.split("/", 3)[3])["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        names = set(tar.getnames())
        summary = json.loads(tar.extractfile("summary.json").read())  # type: ignore[union-attr]
    # The user's script ran (it writes summary.json), with the hyperparameters as its arguments.
    assert {"model.keras", "summary.json"} <= names
    assert summary == {**summary, "script": "sdk_user_code/train.py", "epochs": EPOCHS, "batch_size": BATCH_SIZE, "examples": 96}


def _role_statements(platform: Lifecycle, role_arn: str) -> list[dict[str, Any]]:
    iam = platform.client("iam")
    name = role_arn.rsplit("/", 1)[1]
    documents = [
        iam.get_role_policy(RoleName=name, PolicyName=policy)["PolicyDocument"]
        for policy in iam.list_role_policies(RoleName=name)["PolicyNames"]
    ]
    for attached in iam.list_attached_role_policies(RoleName=name)["AttachedPolicies"]:
        version = iam.get_policy(PolicyArn=attached["PolicyArn"])["Policy"]["DefaultVersionId"]
        documents.append(iam.get_policy_version(PolicyArn=attached["PolicyArn"], VersionId=version)["PolicyVersion"]["Document"])
    statements = []
    for document in documents:
        if isinstance(document, str):
            document = json.loads(urllib.parse.unquote(document))
        found = document["Statement"]
        statements += found if isinstance(found, list) else [found]
    return statements


def _allows(statements: list[dict[str, Any]], action: str, resource: str) -> bool:
    def listed(value: Any) -> list[str]:
        return value if isinstance(value, list) else [value]

    return any(
        s["Effect"] == "Allow"
        and any(fnmatch.fnmatchcase(action, a) for a in listed(s["Action"]))
        and any(fnmatch.fnmatchcase(resource, r) for r in listed(s["Resource"]))
        for s in statements
    )


def test_the_job_role_may_use_every_location_the_sdk_job_names(sdk_run: SdkRun, platform: Lifecycle) -> None:
    # The emulator does not enforce IAM, AWS does: the deployed role's policy must cover the
    # data, the code the SDK uploaded, the output and the checkpoints of the SDK's job.
    job = sdk_run.job
    statements = _role_statements(platform, job["RoleArn"])
    assert statements, "the job role has no policy"
    channels = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in job["InputDataConfig"]}
    reads = [channels["training"] + "part-0.csv", channels["code"]]
    writes = [
        f"{job['OutputDataConfig']['S3OutputPath']}{sdk_run.job_name}/output/model.tar.gz",
        f"{job['CheckpointConfig']['S3Uri']}ckpt.index",
    ]
    arn = lambda uri: "arn:aws:s3:::" + uri[len("s3://") :]  # noqa: E731
    assert [u for u in reads if not _allows(statements, "s3:GetObject", arn(u))] == []
    assert [u for u in writes if not _allows(statements, "s3:PutObject", arn(u))] == []
    # The user's code is read-only to the job (code_location puts it under the code prefix).
    assert not _allows(statements, "s3:PutObject", arn(channels["code"]))
    assert _allows(statements, "kms:GenerateDataKey", job["OutputDataConfig"]["KmsKeyId"])


# --- last: destroys the platform -------------------------------------------------------------


def test_the_teardown_audit_sees_the_sdk_job(sdk_run: SdkRun, platform: Lifecycle) -> None:
    platform.destroy()
    report = platform.audit()
    assert [f.verdict for f in report.findings if f.arn == sdk_run.job["TrainingJobArn"]] == [INFO]
