"""A SageMaker user's own code, through the real SDKs (v2 and v3), on the emulator: it must run.

One deployment (data and training stacks, the pipeline's processing role included), the SDK's
defaults file from ``python -m scripts.sdk_config``, then what SageMaker users already have:

- SDK v2 ``ScriptProcessor`` on the platform image (it replaces the entrypoint with
  ``python3 /opt/ml/processing/input/code/preprocess.py``; outputs without a destination);
- SDK v2 ``FrameworkProcessor`` (``/bin/bash`` running the SDK's ``runproc.sh``, which unpacks the
  source directory and starts ``python3 preprocess.py``), with the image's GPU check before it;
- SDK v2 ``TensorFlow`` estimator with ``MultiWorkerMirroredStrategy`` on 2 instances (two
  emulated hosts, ``algo-1`` and ``algo-2``, in their own network namespaces);
- SDK v2 ``TensorFlow`` estimator with ``parameter_server`` on 1 instance (AWS's container runs
  the script unchanged);
- SDK v3 ``ModelTrainer`` (``/bin/bash`` + ``sm_train.sh``), from .venv-sdk3 in a subprocess;
- SDK v3 ``HyperparameterTuner`` over that ``ModelTrainer``: two random trials, the best one; and
  what v3 leaves out of its trials (network isolation, the KMS key, code the role may read).

Each test asserts on what the user's code wrote (its own files in S3 / in the model), not on a
status alone: the emulator must never report Completed for work it did not do.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Any, Iterator

import boto3
import numpy as np
import pytest

from scripts.common import Aws, Deployment
from scripts.emulator.lifecycle import Lifecycle, Options
from scripts.sdk_config import CONFIG_ENV, estimator_arguments, sdk_defaults
from stacks.components.training_job_spec import OUTPUT_PREFIX
from tests.integration.test_sagemaker_sdk import _allows, _role_statements
from tests.integration.sdk_clock import fast_sdk_polls
from tests.offline import loopback_only

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.filterwarnings("ignore:Tried to parse:UserWarning"),
]

ROOT = Path(__file__).resolve().parents[2]
USER_CODE = Path(__file__).resolve().parent / "sdk_user_code"
SDK3_PYTHON = ROOT / ".venv-sdk3" / "bin" / "python"
INSTANCE_TYPE = "ml.g5.xlarge"
# The image's TensorFlow (training_image/Dockerfile): SDK v2's multi-worker check compares it
# with 2.9 even when image_uri is given, and fails on None.
FRAMEWORK_VERSION = "2.21"
ROWS = 96


@pytest.fixture(scope="module")
def platform(tmp_path_factory: pytest.TempPathFactory, containers: bool) -> Iterator[Lifecycle]:
    """Data and training stacks deployed on a fresh emulator, local runner watching (jobs in Docker where it runs)."""
    lifecycle = Lifecycle(
        Options(
            work_dir=tmp_path_factory.mktemp("sdk-modes"),
            stacks=("gputrain-data", "gputrain-training"),
            job_timeout_seconds=600,
            containers=containers,
        )
    )
    try:
        lifecycle.start()
        lifecycle.bootstrap_and_synth()
        lifecycle.deploy()
        yield lifecycle
    finally:
        lifecycle.close()


def readme_example(first_line: str) -> str:
    """The python block of docs/sagemaker-code.md's "Coming from SageMaker" section that starts with ``first_line``."""
    text = (ROOT / "docs" / "sagemaker-code.md").read_text(encoding="utf-8")
    section = text.split("\n## Coming from SageMaker\n", 1)[1].split("\n## ", 1)[0]
    blocks = [b.split("```", 1)[0] for b in section.split("```python\n")[1:]]
    (block,) = [b for b in blocks if b.startswith(first_line)]
    return block


def _outputs(run: Lifecycle, unit: str) -> dict[str, str]:
    return run.outputs[f"{run.config().project_name}-{unit}"]


def _csv(rows: int) -> bytes:
    rng = np.random.default_rng(11)
    x = rng.normal(size=(rows, 4)).astype("float32")
    y = (x[:, 0] + x[:, 1] > 0).astype(int)
    return ("f0,f1,f2,f3,label\n" + "".join(",".join(f"{v:.5f}" for v in r) + f",{label}\n" for r, label in zip(x, y))).encode()


class Sdk:
    """The SDK's environment for this module: emulator credentials and the generated defaults file."""

    def __init__(self, platform: Lifecycle, config_file: Path) -> None:
        self.platform = platform
        self.config_file = config_file
        data = _outputs(platform, "data")
        self.image = data["ImageUri"]
        self.datasets = data["DatasetsBucketName"]
        self.artifacts = data["ArtifactsBucketName"]
        self.key_arn = data["KeyArn"]
        self.training = _outputs(platform, "training")
        self.train_uri = f"s3://{self.datasets}/train/"
        self.raw_uri = f"s3://{self.datasets}/raw/"
        self.env = {**{k: platform.env[k] for k in ("AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID",
                                                      "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_CONFIG_FILE",
                                                      "AWS_SHARED_CREDENTIALS_FILE") if k in platform.env},
                    CONFIG_ENV: str(config_file), "SAGEMAKER_SUPPRESS_V2_WARNING": "1"}

    def job(self, name: str) -> dict[str, Any]:
        return self.platform.client("sagemaker").describe_training_job(TrainingJobName=name)

    def read(self, uri: str) -> bytes:
        bucket, _, key = uri[len("s3://") :].partition("/")
        return self.platform.client("s3").get_object(Bucket=bucket, Key=key)["Body"].read()

    def model_files(self, job: dict[str, Any]) -> dict[str, bytes]:
        with tarfile.open(fileobj=io.BytesIO(self.read(job["ModelArtifacts"]["S3ModelArtifacts"]))) as tar:
            return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}  # type: ignore[union-attr]

    def example(self, first_line: str, **replacements: str) -> str:
        """A docs example with the deployment's values in place of its placeholders."""
        code = readme_example(first_line)
        for placeholder, value in {'"<ImageUri output of gputrain-data>"': repr(self.image), "<DatasetsBucketName>": self.datasets,
                                   "<ArtifactsBucketName>": self.artifacts, **replacements}.items():
            code = code.replace(placeholder, value)
        assert "<" not in code.replace("<=", ""), f"a placeholder is left in the docs' example:\n{code}"
        return code

    def estimator_arguments(self, job_name: str) -> dict[str, Any]:
        deployment = Deployment(config=self.platform.config(), aws=Aws(boto3.Session(region_name=self.platform.region)))
        return estimator_arguments(sdk_defaults(deployment), job_name)


@pytest.fixture(scope="module")
def sdk(platform: Lifecycle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sdk]:
    config_file = tmp_path_factory.mktemp("sdk-config") / "config.yaml"
    platform.run_script("sdk_config", "--out", str(config_file))
    result = Sdk(platform, config_file)
    s3 = platform.client("s3")
    s3.put_object(Bucket=result.datasets, Key="train/part-0.csv", Body=_csv(ROWS))
    s3.put_object(Bucket=result.datasets, Key="raw/part-0.csv", Body=_csv(ROWS))
    patch = pytest.MonkeyPatch()
    try:
        for key, value in result.env.items():
            patch.setenv(key, value)
        patch.delenv("AWS_PROFILE", raising=False)
        patch.setattr(boto3, "DEFAULT_SESSION", None)
        fast_sdk_polls(patch)
        yield result
    finally:
        patch.undo()


def _fit(sdk: Sdk, job_name: str, **kwargs: Any) -> tuple[dict[str, Any], list[str], Exception | None]:
    """A TensorFlow estimator's fit with the platform's printed arguments; the job, hosts tried, error."""
    from sagemaker.tensorflow import TensorFlow

    arguments = {k: v for k, v in sdk.estimator_arguments(job_name).items()}
    error = None
    patch = pytest.MonkeyPatch()
    try:
        with loopback_only(patch) as outside:
            estimator = TensorFlow(source_dir=str(USER_CODE), image_uri=sdk.image, instance_type=INSTANCE_TYPE,
                                   hyperparameters={"epochs": 3, "batch-size": 16}, **arguments, **kwargs)
            try:
                estimator.fit({"training": sdk.train_uri}, job_name=job_name, logs=False)
            except Exception as err:  # noqa: BLE001 - asserted on with the job's FailureReason
                error = err
    finally:
        patch.undo()
    return sdk.job(job_name), list(outside), error


def _s3_arn(uri: str) -> str:
    return "arn:aws:s3:::" + uri[len("s3://") :]


def _assert_the_script_scaled_the_rows(sdk: Sdk, output: str, scale: float) -> None:
    """preprocess.py ran, with its --scale, on the raw rows: its summary and its scaled CSV under ``output``."""
    summary = json.loads(sdk.read(f"{output}/summary.json"))
    assert summary == {"script": "sdk_user_code/preprocess.py", "rows": ROWS, "scale": scale}
    scaled = sdk.read(f"{output}/scaled.csv").decode().splitlines()
    original = _csv(ROWS).decode().splitlines()
    assert float(scaled[1].split(",")[0]) == pytest.approx(scale * float(original[1].split(",")[0]), rel=1e-4)


# --- SDK v2: ScriptProcessor ------------------------------------------------------------------


def test_a_script_processor_runs_the_users_script_on_the_platform_image(sdk: Sdk, platform: Lifecycle) -> None:
    code = sdk.example("from sagemaker.processing import", **{'"preprocess.py"': repr(str(USER_CODE / "preprocess.py"))})
    namespace: dict[str, Any] = {}
    patch = pytest.MonkeyPatch()
    try:
        with loopback_only(patch) as outside:
            exec(compile(code, "docs/sagemaker-code.md (Coming from SageMaker, ScriptProcessor)", "exec"), namespace)  # noqa: S102
    finally:
        patch.undo()
    processor = namespace["processor"]
    assert outside == []
    job = platform.client("sagemaker").describe_processing_job(ProcessingJobName=processor.latest_job.job_name)
    assert job["ProcessingJobStatus"] == "Completed", job.get("FailureReason")
    # The defaults file gave it the platform's processing role, network and key.
    assert job["RoleArn"] == sdk.training["ProcessingRoleArn"]
    assert job["NetworkConfig"]["EnableNetworkIsolation"] is True
    assert job["ProcessingOutputConfig"]["KmsKeyId"] == sdk.key_arn
    # The SDK's own locations: code under <prefix><job>/input/code/, output under <prefix><job>/output/<name>.
    code = next(i for i in job["ProcessingInputs"] if i["InputName"] == "code")["S3Input"]
    assert code["S3Uri"] == f"s3://{sdk.artifacts}/{OUTPUT_PREFIX}{job['ProcessingJobName']}/input/code/preprocess.py"
    output = job["ProcessingOutputConfig"]["Outputs"][0]["S3Output"]["S3Uri"]
    assert output == f"s3://{sdk.artifacts}/{OUTPUT_PREFIX}{job['ProcessingJobName']}/output/scaled"
    # The user's script ran, with its arguments, on the input.
    _assert_the_script_scaled_the_rows(sdk, output, 2.0)
    # The role the stack made may read that code and write that output (AWS enforces it; moto does not).
    statements = _role_statements(platform, job["RoleArn"])
    assert _allows(statements, "s3:GetObject", _s3_arn(code["S3Uri"]))
    assert _allows(statements, "s3:PutObject", _s3_arn(f"{output}/summary.json"))
    assert not _allows(statements, "s3:PutObject", _s3_arn(f"s3://{sdk.artifacts}/{OUTPUT_PREFIX}{job['ProcessingJobName']}/output/model.tar.gz"))


# --- SDK v2: FrameworkProcessor ---------------------------------------------------------------


def test_a_framework_processor_runs_the_users_source_dir_through_runproc_sh(sdk: Sdk, platform: Lifecycle) -> None:
    """FrameworkProcessor uploads the source directory as sourcedir.tar.gz and a runproc.sh, and replaces
    the entrypoint with ``/bin/bash .../input/entrypoint/runproc.sh``, which unpacks the code and starts
    ``python3 preprocess.py``: the user's script must run, through the image's python3."""
    from sagemaker.processing import FrameworkProcessor, ProcessingInput, ProcessingOutput
    from sagemaker.tensorflow import TensorFlow

    patch = pytest.MonkeyPatch()
    try:
        with loopback_only(patch) as outside:
            # base_job_name: the SDK names a FrameworkProcessor's jobs after the framework ("tensorflow-..."),
            # and the processing role reads SDK uploads only under jobs named <project>-* (docs/sagemaker-code.md, "What differs").
            processor = FrameworkProcessor(estimator_cls=TensorFlow, framework_version=FRAMEWORK_VERSION, image_uri=sdk.image,
                                           command=["python3"], instance_type=INSTANCE_TYPE, instance_count=1,
                                           base_job_name="gputrain")
            processor.run(code="preprocess.py", source_dir=str(USER_CODE), arguments=["--scale", "3"],
                          inputs=[ProcessingInput(source=sdk.raw_uri, destination="/opt/ml/processing/input/raw")],
                          outputs=[ProcessingOutput(output_name="scaled", source="/opt/ml/processing/output/scaled")],
                          logs=False)
    finally:
        patch.undo()
    assert outside == []
    job = platform.client("sagemaker").describe_processing_job(ProcessingJobName=processor.latest_job.job_name)
    assert job["ProcessingJobStatus"] == "Completed", job.get("FailureReason")
    assert job["AppSpecification"]["ContainerEntrypoint"][0] == "/bin/bash"
    assert job["AppSpecification"]["ContainerEntrypoint"][-1].endswith("/input/entrypoint/runproc.sh")
    assert job["ProcessingJobName"].startswith("gputrain-")
    assert job["RoleArn"] == sdk.training["ProcessingRoleArn"]
    output = job["ProcessingOutputConfig"]["Outputs"][0]["S3Output"]["S3Uri"]
    _assert_the_script_scaled_the_rows(sdk, output, 3.0)
    # The role the stack made may read what the SDK uploaded (code and runproc.sh) and write the output.
    statements = _role_statements(platform, job["RoleArn"])
    uploaded = [i["S3Input"]["S3Uri"] for i in job["ProcessingInputs"] if i["InputName"] in ("code", "entrypoint")]
    assert len(uploaded) == 2, job["ProcessingInputs"]
    for uri in uploaded:
        assert _allows(statements, "s3:GetObject", _s3_arn(uri)), uri
    assert _allows(statements, "s3:PutObject", _s3_arn(f"{output}/summary.json"))
    # The image's python3 ran the GPU check before the script, though runproc.sh named no trainer.
    events = platform.client("logs").filter_log_events(logGroupName="/aws/sagemaker/ProcessingJobs",
                                                       logStreamNamePrefix=job["ProcessingJobName"])["events"]
    # The job's own streams (<job>/algo-1-...), filtered here too: the emulator's logs answer every stream.
    lines = [event["message"] for event in events if event["logStreamName"].startswith(job["ProcessingJobName"] + "/")]
    assert sum(line.startswith("[gpu-check]") for line in lines) == 1, "\n".join(lines)


# --- SDK v2: TensorFlow estimator, multi-worker on 2 hosts -----------------------------------


def test_multi_worker_mirrored_strategy_trains_on_two_hosts_in_step(sdk: Sdk) -> None:
    name = f"{sdk.platform.config().project_name}-sdk-mwms-{int(time.time())}"
    code = sdk.example("from sagemaker.tensorflow import TensorFlow", **{'"my_code/"': repr(str(USER_CODE))})
    namespace: dict[str, Any] = {"platform_arguments": sdk.estimator_arguments(name), "job_name": name}
    error = None
    patch = pytest.MonkeyPatch()
    try:
        with loopback_only(patch) as outside:
            try:
                exec(compile(code, "docs/sagemaker-code.md (Coming from SageMaker, multi-worker)", "exec"), namespace)  # noqa: S102
            except Exception as err:  # noqa: BLE001 - fit raises when the job fails; asserted on below
                error = err
    finally:
        patch.undo()
    job = sdk.job(name)
    assert outside == []
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason") or error
    assert json.loads(job["HyperParameters"]["sagemaker_multi_worker_mirrored_strategy_enabled"]) is True
    assert job["ResourceConfig"]["InstanceCount"] == 2
    summary = json.loads(sdk.model_files(job)["summary.json"])
    # Both hosts joined one collective: two replicas in sync, the chief's view of the cluster.
    assert summary["script"] == "sdk_user_code/train_mwms.py"
    assert summary["replicas_in_sync"] == 2
    assert [w.split(":")[0] for w in summary["workers"]] == ["algo-1", "algo-2"]
    assert summary["task"] == {"type": "worker", "index": 0} and summary["host"] == "algo-1"
    # algo-2 ran the same script as the other worker and ended with the same weights.
    algo_2 = sdk.platform.runner.outcomes[name].base_dir.parent / "algo-2" / "opt-ml" / "output" / "data" / "summary.json"
    second = json.loads(algo_2.read_text())
    assert second["task"] == {"type": "worker", "index": 1} and second["host"] == "algo-2"
    assert second["digest"] == summary["digest"] and summary["steps"] > 0


# --- SDK v2: TensorFlow estimator, parameter_server on 1 host --------------------------------


def test_parameter_server_on_one_host_runs_the_script_unchanged(sdk: Sdk) -> None:
    name = f"{sdk.platform.config().project_name}-sdk-ps-{int(time.time())}"
    job, outside, error = _fit(sdk, name, entry_point="train.py", instance_count=1, distribution={"parameter_server": {"enabled": True}})
    assert outside == []
    assert json.loads(job["HyperParameters"]["sagemaker_parameter_server_enabled"]) is True
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason") or error
    summary = json.loads(sdk.model_files(job)["summary.json"])
    assert summary == {**summary, "script": "sdk_user_code/train.py", "epochs": 3, "batch_size": 16, "examples": ROWS}


# --- SDK v3: ModelTrainer --------------------------------------------------------------------


def _model_trainer(sdk: Sdk, **env: str) -> dict[str, Any]:
    """docs/sagemaker-code.md's ModelTrainer example, run by sdk3_client.py in .venv-sdk3 with the SDK's environment plus ``env``."""
    return _sdk3(sdk, sdk.example("from sagemaker.train import ModelTrainer", **{'"my_code/"': repr(str(USER_CODE))}), **env)


def _sdk3(sdk: Sdk, code: str, **env: str) -> dict[str, Any]:
    """SDK v3 user ``code``, run by sdk3_client.py in .venv-sdk3 with the SDK's environment plus ``env``; what it printed."""
    child_env = {**{k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SAGEMAKER_", "VIRTUAL_ENV"))}, **sdk.env, **env}
    child_env["PATH"] = f"{SDK3_PYTHON.parent}:{child_env.get('PATH', '')}"
    client = subprocess.run([str(SDK3_PYTHON), str(Path(__file__).with_name("sdk3_client.py")), code],
                            env=child_env, capture_output=True, text=True, timeout=900, cwd=str(USER_CODE.parent), check=False)
    assert client.returncode == 0, client.stderr[-4000:]
    return dict(json.loads(client.stdout.strip().splitlines()[-1]))


needs_sdk3 = pytest.mark.skipif(not SDK3_PYTHON.exists(), reason="SDK v3 lives in .venv-sdk3: run bash scripts/bootstrap.sh")


@needs_sdk3
def test_sdk_v3_refuses_the_least_privilege_role_unless_told_not_to_validate_it(sdk: Sdk) -> None:
    # v3 simulates its "smoke test" actions on "*" (iam:SimulatePrincipalPolicy, no resources);
    # the platform's role allows network interfaces only in its VPC and metrics only in
    # SageMaker's namespace, so IAM answers implicitDeny and v3 refuses it (on AWS as here).
    result = _model_trainer(sdk)
    assert result["job_name"] is None
    assert result["error"].startswith(f"RoleValidationError: IAM role '{sdk.training['JobRoleArn']}' cannot be used for 'training'")


@needs_sdk3
def test_a_model_trainer_job_runs_the_users_script_through_sm_train_sh(sdk: Sdk) -> None:
    assert "export SAGEMAKER_VALIDATE_ROLE=false" in (ROOT / "docs" / "sagemaker-code.md").read_text(encoding="utf-8")
    result = _model_trainer(sdk, SAGEMAKER_VALIDATE_ROLE="false")
    assert result["job_name"], f"ModelTrainer created no job: {result['error']}"
    job = sdk.job(result["job_name"])
    spec = job["AlgorithmSpecification"]
    # v3 replaces the image's entrypoint: the emulator must run exactly that.
    assert spec["ContainerEntrypoint"] == ["/bin/bash"]
    assert spec["ContainerArguments"] == ["-c", "chmod +x /opt/ml/input/data/sm_drivers/sm_train.sh "
                                                "&& /opt/ml/input/data/sm_drivers/sm_train.sh"]
    assert {c["ChannelName"] for c in job["InputDataConfig"]} >= {"training", "code", "sm_drivers"}
    assert job["TrainingJobStatus"] == "Completed", job.get("FailureReason") or result["error"]
    assert job["RoleArn"] == sdk.training["JobRoleArn"]
    summary = json.loads(sdk.model_files(job)["summary.json"])
    assert summary == {**summary, "script": "sdk_user_code/train.py", "epochs": 3, "batch_size": 16, "examples": ROWS}
    # The role the stack made may read every channel v3 uploaded (code, sm_drivers) and write the model.
    statements = _role_statements(sdk.platform, job["RoleArn"])
    channels = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in job["InputDataConfig"]}
    assert [n for n, uri in channels.items() if not _allows(statements, "s3:GetObject", _s3_arn(uri.rstrip("/") + "/x.py"))] == []
    assert _allows(statements, "s3:PutObject", _s3_arn(job["ModelArtifacts"]["S3ModelArtifacts"]))


# --- SDK v3: HyperparameterTuner -------------------------------------------------------------

SDK3_TUNER = """\
from sagemaker.core.parameter import ContinuousParameter
from sagemaker.train import ModelTrainer
from sagemaker.train.configs import Compute, InputData, SourceCode
from sagemaker.train.tuner import HyperparameterTuner

trainer = ModelTrainer(
    training_image="<ImageUri output of gputrain-data>",
    source_code=SourceCode(source_dir="my_code/", entry_script="train.py"),
    compute=Compute(instance_type="ml.g5.xlarge", instance_count=1),
    hyperparameters={"epochs": 2, "batch-size": 16},
    base_job_name="gputrain-sdk3",
)
tuner = HyperparameterTuner(
    trainer, "loss", {"learning-rate": ContinuousParameter(0.001, 0.5)},
    metric_definitions=[{"Name": "loss", "Regex": r"loss: ([0-9\\.]+)"}], objective_type="Minimize",
    strategy="Random", max_jobs=2, max_parallel_jobs=1,
)
tuner.tune(inputs=[InputData(channel_name="training", data_source="s3://<DatasetsBucketName>/train/")])
best = tuner.best_training_job()
frame = tuner.analytics().dataframe()
"""
"""The smallest v3 tuning a SageMaker user writes: the ModelTrainer of the docs' example, one range, two trials."""


@needs_sdk3
def test_a_v3_tuner_names_the_better_of_two_trials_but_its_trials_are_not_platform_jobs(sdk: Sdk) -> None:
    code = SDK3_TUNER.replace('"<ImageUri output of gputrain-data>"', repr(sdk.image)).replace('"my_code/"', repr(str(USER_CODE)))
    result = _sdk3(sdk, code.replace("<DatasetsBucketName>", sdk.datasets), SAGEMAKER_VALIDATE_ROLE="false")
    assert result["tuning_job_name"], f"HyperparameterTuner created no tuning job: {result['error']}"
    sagemaker_client = sdk.platform.client("sagemaker")
    name = result["tuning_job_name"]
    described = sagemaker_client.describe_hyper_parameter_tuning_job(HyperParameterTuningJobName=name)
    assert described["HyperParameterTuningJobStatus"] == "Completed", described.get("FailureReason") or result["error"]
    assert result["error"] is None, result["error"]
    assert described["ObjectiveStatusCounters"] == {"Succeeded": 2, "Pending": 0, "Failed": 0}
    definition = described["TrainingJobDefinition"]
    trials = sagemaker_client.list_training_jobs_for_hyper_parameter_tuning_job(HyperParameterTuningJobName=name)["TrainingJobSummaries"]
    assert len(trials) == 2
    # The platform's role may read the channels v3 sends (the data, sm_drivers), but not the code:
    # v3 uploads sourcedir.tar.gz to its session's default bucket without the defaults file's key
    # prefix (tuner.py: s3_key = f"{key_prefix}/sourcedir/sourcedir.tar.gz", key_prefix =
    # f"{base_name}/tuning-{int(time.time())}/input"), so on AWS each trial's download of its
    # sagemaker_submit_directory would be refused. The emulator does not check IAM: this says so.
    statements = _role_statements(sdk.platform, definition["RoleArn"])
    channels = {c["ChannelName"]: c["DataSource"]["S3DataSource"]["S3Uri"] for c in definition["InputDataConfig"]}
    assert set(channels) == {"training", "sm_drivers"}
    assert [n for n, uri in channels.items() if not _allows(statements, "s3:GetObject", _s3_arn(uri.rstrip("/") + "/x.py"))] == []
    code_uri = definition["StaticHyperParameters"]["sagemaker_submit_directory"]
    assert definition["StaticHyperParameters"]["sagemaker_program"] == "train.py"
    assert not _allows(statements, "s3:GetObject", _s3_arn(code_uri)), f"the role may read {code_uri} now: assert that it may"
    losses = {}
    for trial in trials:
        job = sdk.job(trial["TrainingJobName"])
        # Each trial is a training job of the user's script with its own sampled rate (v3 sends the
        # code as sagemaker_submit_directory: the tuning API has no ContainerEntrypoint).
        summary = json.loads(sdk.model_files(job)["summary.json"])
        assert summary == {**summary, "script": "sdk_user_code/train.py", "epochs": 2, "batch_size": 16, "examples": ROWS}
        assert summary["learning_rate"] == pytest.approx(float(trial["TunedHyperParameters"]["learning-rate"]))
        assert 0.001 <= summary["learning_rate"] <= 0.5
        value = trial["FinalHyperParameterTuningJobObjectiveMetric"]["Value"]
        assert value == pytest.approx(summary["loss"], abs=1e-3)
        losses[trial["TrainingJobName"]] = value
        # The emulator's tuner starts each trial with what v3's definition carries, the defaults file's role among it.
        assert job["RoleArn"] == definition["RoleArn"] == sdk.training["JobRoleArn"]
        assert job["OutputDataConfig"] == definition["OutputDataConfig"]
        assert job["InputDataConfig"] == definition["InputDataConfig"]
        # SDK v3's gap, not the emulator's: its tuner's definition has no EnableNetworkIsolation
        # (sagemaker/train/tuner.py, _build_training_job_definition: "The HPT API doesn't support
        # container_entrypoint, so the framework container uses sagemaker_submit_directory to
        # download ... code", which network isolation would forbid), and ModelTrainer fills its
        # OutputDataConfig (kms_key_id=None) before it reads the defaults file, which it then skips.
        # When v3 sends them, these fail: assert the platform's values instead.
        assert "EnableNetworkIsolation" not in definition and job["EnableNetworkIsolation"] is False
        assert "KmsKeyId" not in definition["OutputDataConfig"]
    assert len(set(losses.values())) == 2, losses
    assert result["best"] == min(losses, key=losses.get) == described["BestTrainingJob"]["TrainingJobName"]
    assert {row["TrainingJobName"]: row["FinalObjectiveValue"] for row in result["frame"]} == pytest.approx(losses)
