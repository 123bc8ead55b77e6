"""What the local runners cannot play is refused in one line, never run another way.

The project's rule for the emulator: a local runner runs what the job asks or refuses it in one
line naming the field and its value, and never reports success for work it did not do. Each test
sends a request the runners cannot play to the emulator (CreateTrainingJob, CreateProcessingJob,
CreateHyperParameterTuningJob, an endpoint) and checks the job fails with that one line before any
container starts or any input is downloaded. The requests the platform and the SageMaker SDK send
(File and FastFile channels, S3Prefix, GZIP model output, EndOfJob uploads) stay played.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from scripts.emulator import server
from scripts.emulator.hosting import HostingRefused, LocalHosting
from scripts.emulator.sagemaker import LocalSageMaker, processing_refusal, training_refusal

ROLE = f"arn:aws:iam::{server.ACCOUNT}:role/training"
IMAGE = f"{server.ACCOUNT}.dkr.ecr.{server.REGION}.amazonaws.com/gputrain-training:1"


@pytest.fixture(scope="module")
def emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[server.Emulator]:
    """One emulator for the module (each test names its own jobs), with the buckets the requests read."""
    emu = server.start(log_file=tmp_path_factory.mktemp("refusals") / "moto.log")
    try:
        _buckets(emu)
        yield emu
    finally:
        emu.stop()


@pytest.fixture(scope="module")
def runner(emulator: server.Emulator, tmp_path_factory: pytest.TempPathFactory) -> LocalSageMaker:
    """One runner for the module's jobs (each test names its own), run one by one from the tests."""
    return _runner(emulator, tmp_path_factory.mktemp("jobs"))


def _name(request: pytest.FixtureRequest, kind: str) -> str:
    """A job name of this test's own: ``gputrain-refused-<kind>-<parameter id>``."""
    case = getattr(request.node, "callspec", None)
    return re.sub(r"[^a-z0-9-]", "-", f"gputrain-refused-{kind}-{case.id if case else 'x'}".lower())[:63]


def _runner(emulator: server.Emulator, work_dir: Path) -> LocalSageMaker:
    # Jobs are run one by one from the test (run_job), not by the watching thread.
    return LocalSageMaker(
        endpoint_url=emulator.endpoint_url, region=server.REGION, account=server.ACCOUNT, work_dir=work_dir,
        timeout_seconds=60, on_event=lambda _: None,
    )


def _client(emulator: server.Emulator, service: str) -> Any:
    return server.client(service, endpoint_url=emulator.endpoint_url)


def _buckets(emulator: server.Emulator) -> None:
    s3 = _client(emulator, "s3")
    s3.create_bucket(Bucket="datasets")
    s3.create_bucket(Bucket="artifacts")
    s3.put_object(Bucket="datasets", Key="train/part-0.csv", Body=b"f0,label\n0.1,0\n")


def _channel(**overrides: Any) -> dict[str, Any]:
    return {
        "ChannelName": "training",
        "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": "s3://datasets/train/", "S3DataDistributionType": "FullyReplicated"}},
        **overrides,
    }


def _training_request(name: str, **overrides: Any) -> dict[str, Any]:
    """A training request as the platform sends it (one channel, File mode), with ``overrides``."""
    request: dict[str, Any] = {
        "TrainingJobName": name,
        "RoleArn": ROLE,
        # A container that would write a model: were the job not refused, it would complete.
        "AlgorithmSpecification": {
            "TrainingImage": IMAGE, "TrainingInputMode": "File",
            "ContainerEntrypoint": ["python3", "-c", "open('/opt/ml/model/m', 'w').write('m')"],
        },
        "InputDataConfig": [_channel(InputMode="File")],
        "OutputDataConfig": {"S3OutputPath": "s3://artifacts/output/"},
        "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 50},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
    }
    request.update(overrides)
    return request


TRAINING_REFUSALS = [
    pytest.param(
        {"ResourceConfig": {"VolumeSizeInGB": 50, "InstanceGroups": [
            {"InstanceGroupName": "gpus", "InstanceType": "ml.g5.xlarge", "InstanceCount": 2},
            {"InstanceGroupName": "cpus", "InstanceType": "ml.c5.xlarge", "InstanceCount": 1},
        ]}},
        "ResourceConfig.InstanceGroups [gpus: 2 x ml.g5.xlarge, cpus: 1 x ml.c5.xlarge]",
        id="instance-groups",
    ),
    pytest.param({"InputDataConfig": [_channel(InputMode="Pipe")]}, "InputDataConfig[training].InputMode Pipe", id="channel-pipe"),
    pytest.param(
        {"AlgorithmSpecification": {"TrainingImage": IMAGE, "TrainingInputMode": "Pipe"}, "InputDataConfig": [_channel()]},
        "AlgorithmSpecification.TrainingInputMode (channel training) Pipe",
        id="algorithm-pipe",
    ),
    pytest.param({"InputDataConfig": [_channel(CompressionType="Gzip")]}, "InputDataConfig[training].CompressionType Gzip", id="gzip-channel"),
    pytest.param(
        {"InputDataConfig": [_channel(RecordWrapperType="RecordIO")]}, "InputDataConfig[training].RecordWrapperType RecordIO", id="recordio",
    ),
    *[
        pytest.param(
            {"InputDataConfig": [{"ChannelName": "training", "DataSource": {"S3DataSource": {
                "S3DataType": kind, "S3Uri": "s3://datasets/train.manifest", "S3DataDistributionType": "FullyReplicated"}}}]},
            f"InputDataConfig[training].DataSource.S3DataSource.S3DataType {kind}",
            id=kind,
        )
        for kind in ("ManifestFile", "AugmentedManifestFile")
    ],
    pytest.param(
        {"OutputDataConfig": {"S3OutputPath": "s3://artifacts/output/", "CompressionType": "NONE"}},
        "OutputDataConfig.CompressionType NONE",
        id="uncompressed-output",
    ),
    pytest.param(
        {"CheckpointConfig": {"S3Uri": "s3://artifacts/checkpoints/x/", "LocalPath": "/tmp/ckpt"}},
        "CheckpointConfig.LocalPath /tmp/ckpt",
        id="checkpoint-local-path",
    ),
    pytest.param(
        {"TensorBoardOutputConfig": {"S3OutputPath": "s3://artifacts/tensorboard/"}},
        "TensorBoardOutputConfig s3://artifacts/tensorboard/",
        id="tensorboard",
    ),
    # The runner runs the platform's image whatever the job names: another image would be trained with code it did not ask for.
    pytest.param(
        {"AlgorithmSpecification": {"TrainingImage": "763104351884.dkr.ecr.us-east-1.amazonaws.com/tensorflow-training:2.14-gpu",
                                    "TrainingInputMode": "File"}},
        "AlgorithmSpecification.TrainingImage 763104351884.dkr.ecr.us-east-1.amazonaws.com/tensorflow-training:2.14-gpu",
        id="aws-framework-image",
    ),
    pytest.param({"AlgorithmSpecification": {"TrainingImage": "tensorflow/tensorflow:2.16.1-gpu", "TrainingInputMode": "File"}},
                 "AlgorithmSpecification.TrainingImage tensorflow/tensorflow:2.16.1-gpu", id="docker-hub-image"),
    pytest.param({"AlgorithmSpecification": {"AlgorithmName": "xgboost-algorithm", "TrainingInputMode": "File"}},
                 "AlgorithmSpecification.AlgorithmName xgboost-algorithm", id="algorithm-name"),
    pytest.param(
        {"InputDataConfig": [{"ChannelName": "training", "DataSource": {"FileSystemDataSource": {
            "FileSystemId": "fs-0123456789abcdef0", "FileSystemAccessMode": "ro", "FileSystemType": "EFS", "DirectoryPath": "/data"}}}]},
        "InputDataConfig[training].DataSource.FileSystemDataSource EFS fs-0123456789abcdef0:/data (ro)",
        id="file-system",
    ),
]


@pytest.mark.parametrize(("overrides", "named"), TRAINING_REFUSALS)
def test_a_training_job_the_runner_cannot_play_fails_in_one_line_before_anything_runs(
    emulator, runner: LocalSageMaker, request: pytest.FixtureRequest, overrides: dict[str, Any], named: str
) -> None:
    name = _name(request, "t")
    sagemaker = _client(emulator, "sagemaker")
    sagemaker.create_training_job(**_training_request(name, **overrides))
    outcome = runner.run_job(name)

    assert outcome.status == "Failed" and outcome.model_artifact is None
    reason = outcome.failure_reason or ""
    assert reason.startswith(f"ClientError: {named} is not played by the emulator's training runner (")
    assert reason.endswith("; nothing ran.") and "\n" not in reason
    assert not (runner.work_dir / name).exists()  # nothing downloaded, no container started
    described = sagemaker.describe_training_job(TrainingJobName=name)
    assert (described["TrainingJobStatus"], described["FailureReason"]) == ("Failed", reason)
    assert "ModelArtifacts" not in described or not described["ModelArtifacts"].get("S3ModelArtifacts")


def _described(job: dict[str, Any]) -> dict[str, Any]:
    """``job`` as DescribeTrainingJob/DescribeProcessingJob answers it: with its ARN (account and region)."""
    kind, name = ("training-job", job["TrainingJobName"]) if "TrainingJobName" in job else ("processing-job", job["ProcessingJobName"])
    key = "TrainingJobArn" if kind == "training-job" else "ProcessingJobArn"
    return {**job, key: f"arn:aws:sagemaker:{server.REGION}:{server.ACCOUNT}:{kind}/{name}"}


def test_several_refused_fields_are_named_in_the_same_line() -> None:
    job = _training_request("j", InputDataConfig=[_channel(InputMode="Pipe", CompressionType="Gzip")], TensorBoardOutputConfig={
        "S3OutputPath": "s3://artifacts/tb/", "LocalPath": "/opt/ml/output/tb"})
    reason = training_refusal(_described(job)) or ""
    assert reason.count("is not played") == 3 and "nothing nothing" not in reason
    assert "InputMode Pipe" in reason and "CompressionType Gzip" in reason and "nothing uploads /opt/ml/output/tb" in reason


@pytest.mark.parametrize(
    "job",
    [
        pytest.param(_training_request("j"), id="platform-file"),
        pytest.param(_training_request("j", InputDataConfig=[_channel(InputMode="FastFile")]), id="platform-fastfile"),
        # The SDK's TrainingInput defaults, spelled out; ModelTrainer's GZIP output.
        pytest.param(_training_request("j", InputDataConfig=[_channel(CompressionType="None", RecordWrapperType="None")],
                                       OutputDataConfig={"S3OutputPath": "s3://a/", "CompressionType": "GZIP"}), id="sdk-defaults"),
        pytest.param(_training_request("j", InputDataConfig=[_channel()], AlgorithmSpecification={"TrainingImage": IMAGE}), id="no-mode"),
    ],
)
def test_what_the_platform_and_the_sdk_send_is_played(job: dict[str, Any]) -> None:
    assert training_refusal(_described(job)) is None


# --- processing ---------------------------------------------------------------------------------


def _processing_request(name: str, inputs: list[dict[str, Any]], outputs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "ProcessingJobName": name,
        "RoleArn": ROLE,
        "AppSpecification": {"ImageUri": IMAGE, "ContainerEntrypoint": ["python3", "-c", "pass"]},
        "ProcessingResources": {"ClusterConfig": {"InstanceCount": 1, "InstanceType": "ml.g5.xlarge", "VolumeSizeInGB": 100}},
        "ProcessingInputs": inputs,
        "ProcessingOutputConfig": {"Outputs": outputs},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
    }


def _s3_input(**overrides: Any) -> dict[str, Any]:
    return {"InputName": "raw", "S3Input": {
        "S3Uri": "s3://datasets/train/", "LocalPath": "/opt/ml/processing/input/raw", "S3DataType": "S3Prefix",
        "S3InputMode": "File", "S3DataDistributionType": "FullyReplicated", "S3CompressionType": "None", **overrides}}


def _s3_output(**overrides: Any) -> dict[str, Any]:
    return {"OutputName": "train", "S3Output": {
        "S3Uri": "s3://datasets/processed/train", "LocalPath": "/opt/ml/processing/output/train", "S3UploadMode": "EndOfJob", **overrides}}


PROCESSING_REFUSALS = [
    pytest.param([_s3_input(S3InputMode="Pipe")], [_s3_output()], "ProcessingInputs[raw].S3Input.S3InputMode Pipe", id="pipe"),
    pytest.param([_s3_input(S3CompressionType="Gzip")], [_s3_output()], "ProcessingInputs[raw].S3Input.S3CompressionType Gzip", id="gzip"),
    pytest.param([_s3_input(S3DataType="ManifestFile", S3Uri="s3://datasets/train.manifest")], [_s3_output()],
                 "ProcessingInputs[raw].S3Input.S3DataType ManifestFile", id="manifest"),
    pytest.param([_s3_input()], [_s3_output(S3UploadMode="Continuous")],
                 "ProcessingOutputConfig.Outputs[train].S3Output.S3UploadMode Continuous", id="continuous"),
]


@pytest.mark.parametrize(("inputs", "outputs", "named"), PROCESSING_REFUSALS)
def test_a_processing_job_the_runner_cannot_play_fails_in_one_line_before_anything_runs(
    emulator, runner: LocalSageMaker, request: pytest.FixtureRequest, inputs: list[dict[str, Any]], outputs: list[dict[str, Any]],
    named: str,
) -> None:
    name = _name(request, "p")
    sagemaker = _client(emulator, "sagemaker")
    sagemaker.create_processing_job(**_processing_request(name, inputs, outputs))
    outcome = runner.run_processing_job(name)

    assert outcome.status == "Failed" and outcome.outputs == {}
    reason = outcome.failure_reason or ""
    assert reason.startswith(f"ClientError: {named} is not played by the emulator's processing runner (")
    assert reason.endswith("; nothing ran.") and "\n" not in reason
    assert not (runner.work_dir / name).exists()  # nothing downloaded, no container started
    assert "Contents" not in _client(emulator, "s3").list_objects_v2(Bucket="datasets", Prefix="processed/")
    described = sagemaker.describe_processing_job(ProcessingJobName=name)
    assert (described["ProcessingJobStatus"], described["FailureReason"]) == ("Failed", reason)


def test_what_the_platform_and_the_sdk_send_for_processing_is_played() -> None:
    assert processing_refusal(_described(_processing_request("p", [_s3_input()], [_s3_output()]))) is None
    # Defaults left out, as a minimal request leaves them.
    bare_in = {"InputName": "raw", "S3Input": {"S3Uri": "s3://d/", "LocalPath": "/opt/ml/processing/input/raw"}}
    bare_out = {"OutputName": "o", "S3Output": {"S3Uri": "s3://d/o", "LocalPath": "/opt/ml/processing/output/o"}}
    assert processing_refusal(_described(_processing_request("p", [bare_in], [bare_out]))) is None


def test_a_dataset_definition_input_is_refused_naming_it() -> None:
    item = {"InputName": "athena", "DatasetDefinition": {"LocalPath": "/opt/ml/processing/input/athena"}}
    assert processing_refusal(_described(_processing_request("p", [item], []))) == (
        "ProcessingInputs[athena] DatasetDefinition is not played by the emulator's processing runner (S3Input is); nothing ran."
    )


# --- tuning -------------------------------------------------------------------------------------


@pytest.fixture()
def watching(emulator: server.Emulator, tmp_path: Path) -> Iterator[LocalSageMaker]:
    """A runner that watches, so a new tuning job stays InProgress for the local tuner."""
    local = _runner(emulator, tmp_path / "jobs")
    local.start()
    try:
        yield local
    finally:
        local.stop()


def _tuning_job(emulator: server.Emulator, name: str, **config: Any) -> dict[str, Any]:
    sagemaker = _client(emulator, "sagemaker")
    sagemaker.create_hyper_parameter_tuning_job(
        HyperParameterTuningJobName=name,
        HyperParameterTuningJobConfig={
            "Strategy": "Random", "ResourceLimits": {"MaxNumberOfTrainingJobs": 2, "MaxParallelTrainingJobs": 1},
            "HyperParameterTuningJobObjective": {"Type": "Minimize", "MetricName": "train:loss"},
            "ParameterRanges": {"CategoricalParameterRanges": [{"Name": "opt", "Values": ["sgd", "adam"]}]},
            **config,
        },
        TrainingJobDefinition={
            "AlgorithmSpecification": {"TrainingImage": IMAGE, "TrainingInputMode": "File"}, "RoleArn": ROLE,
            "OutputDataConfig": {"S3OutputPath": "s3://artifacts/x/"}, "StoppingCondition": {"MaxRuntimeInSeconds": 60},
            "ResourceConfig": {"InstanceType": "ml.g5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 10},
        },
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        described: dict[str, Any] = sagemaker.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName=name)
        if described["HyperParameterTuningJobStatus"] not in ("InProgress", "Stopping"):
            return described
        time.sleep(0.2)
    raise AssertionError(f"tuning job {name} still {described['HyperParameterTuningJobStatus']}")


@pytest.mark.parametrize(
    ("config", "said"),
    [
        pytest.param(
            {"Strategy": "Hyperband", "StrategyConfig": {"HyperbandStrategyConfig": {"MinResource": 1, "MaxResource": 3}}},
            "ClientError: HyperParameterTuningJobConfig.Strategy Hyperband is not played by the emulator's tuner "
            "(Random, Grid and Bayesian, sampled as Random, are); nothing ran.",
            id="hyperband",
        ),
        pytest.param(
            {"TuningJobCompletionCriteria": {"TargetObjectiveMetricValue": 0.1}},
            'ClientError: HyperParameterTuningJobConfig.TuningJobCompletionCriteria {"TargetObjectiveMetricValue": 0.1} '
            "is not played by the emulator's tuner (every trial up to ResourceLimits runs); nothing ran.",
            id="completion-criteria",
        ),
    ],
)
def test_a_tuning_job_the_tuner_cannot_play_fails_in_one_line_before_any_trial(
    emulator, watching, request: pytest.FixtureRequest, config: dict[str, Any], said: str
) -> None:
    name = _name(request, "tune")[:32]
    described = _tuning_job(emulator, name, **config)
    assert (described["HyperParameterTuningJobStatus"], described["FailureReason"]) == ("Failed", said)
    assert not _client(emulator, "sagemaker").list_training_jobs(NameContains=name)["TrainingJobSummaries"]  # no trial started


# --- hosting ------------------------------------------------------------------------------------


def test_an_endpoint_config_with_several_variants_is_refused_in_one_line_before_any_model_starts(emulator, tmp_path: Path) -> None:
    sagemaker = _client(emulator, "sagemaker")
    for model in ("model-a", "model-b"):
        sagemaker.create_model(ModelName=model, ExecutionRoleArn=ROLE,
                               PrimaryContainer={"Image": IMAGE, "ModelDataUrl": f"s3://artifacts/{model}/model.tar.gz"})
    sagemaker.create_endpoint_config(EndpointConfigName="ab", ProductionVariants=[
        {"VariantName": "a", "ModelName": "model-a", "InstanceType": "ml.g5.xlarge", "InitialInstanceCount": 1, "InitialVariantWeight": 0.9},
        {"VariantName": "b", "ModelName": "model-b", "InstanceType": "ml.g5.xlarge", "InitialInstanceCount": 1, "InitialVariantWeight": 0.1},
    ])
    sagemaker.create_endpoint(EndpointName="gputrain-ab", EndpointConfigName="ab")
    hosting = LocalHosting(endpoint_url=emulator.endpoint_url, region=server.REGION, work_dir=tmp_path / "endpoints", on_event=lambda _: None)
    try:
        with pytest.raises(HostingRefused) as refused:
            hosting.serve("gputrain-ab")
    finally:
        hosting.stop()
    assert str(refused.value) == (
        "ClientError: EndpointConfig ab ProductionVariants [a: model-a weight 0.9, b: model-b weight 0.1] is not played by the "
        "emulator's hosting runner (one ProductionVariant is); nothing was started for gputrain-ab."
    )
    assert not hosting.hosted and not (tmp_path / "endpoints").exists()


def test_a_processing_job_on_another_image_is_refused_naming_it(emulator, runner: LocalSageMaker) -> None:
    """A processor on AWS's or Docker Hub's image would run the platform's image here: refused, not run."""
    name = "gputrain-refused-p-foreign-image"
    request = _processing_request(name, [_s3_input()], [_s3_output()])
    request["AppSpecification"] = {**request["AppSpecification"], "ImageUri": "python:3.12-slim"}
    sagemaker = _client(emulator, "sagemaker")
    sagemaker.create_processing_job(**request)
    outcome = runner.run_processing_job(name)
    assert outcome.status == "Failed"
    assert outcome.failure_reason == (
        "ClientError: AppSpecification.ImageUri python:3.12-slim is not played by the emulator's processing runner (an image"
        f" of this account's ECR, {server.ACCOUNT}.dkr.ecr.{server.REGION}.amazonaws.com/<repository>, is: it runs the"
        " platform's image); nothing ran."
    )
    assert not (runner.work_dir / name).exists()


@pytest.mark.parametrize(
    ("container", "named"),
    [
        pytest.param({"Image": "763104351884.dkr.ecr.us-east-1.amazonaws.com/tensorflow-inference:2.14-gpu"},
                     "Model {model} PrimaryContainer.Image 763104351884.dkr.ecr.us-east-1.amazonaws.com/tensorflow-inference:2.14-gpu"
                     " is not played by the emulator's hosting runner (an image of this account's ECR,", id="aws-serving-image"),
        pytest.param(None, "Model {model} Containers (an inference pipeline) is not played by the emulator's hosting runner", id="pipeline"),
    ],
)
def test_an_endpoint_on_another_image_or_an_inference_pipeline_is_refused_before_anything_starts(
    emulator, tmp_path: Path, container: dict[str, Any] | None, named: str
) -> None:
    """One model server of the platform's image answers an endpoint here: a model naming another image, or
    several containers, would be answered by it instead."""
    sagemaker = _client(emulator, "sagemaker")
    model, endpoint = f"foreign-{'pipeline' if container is None else 'image'}", f"gputrain-foreign-{'p' if container is None else 'i'}"
    data = {"ModelDataUrl": "s3://artifacts/model/model.tar.gz"}
    if container is None:
        sagemaker.create_model(ModelName=model, ExecutionRoleArn=ROLE, Containers=[{"Image": IMAGE, **data}, {"Image": IMAGE, **data}])
    else:
        sagemaker.create_model(ModelName=model, ExecutionRoleArn=ROLE, PrimaryContainer={**container, **data})
    sagemaker.create_endpoint_config(EndpointConfigName=model, ProductionVariants=[
        {"VariantName": "a", "ModelName": model, "InstanceType": "ml.g5.xlarge", "InitialInstanceCount": 1}])
    sagemaker.create_endpoint(EndpointName=endpoint, EndpointConfigName=model)
    hosting = LocalHosting(endpoint_url=emulator.endpoint_url, region=server.REGION, work_dir=tmp_path / "endpoints", on_event=lambda _: None)
    try:
        with pytest.raises(HostingRefused) as refused:
            hosting.serve(endpoint)
    finally:
        hosting.stop()
    message = str(refused.value)
    assert message.startswith(f"ClientError: {named.format(model=model)}"), message
    assert message.endswith(f"; nothing was started for {endpoint}.") and "\n" not in message
    assert not hosting.hosted and not (tmp_path / "endpoints").exists()
