"""scripts.sdk_config against moto: the SDK defaults file, checked with the SageMaker Python SDK itself."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from scripts.common import Aws, Deployment, load_platform_config, run
from scripts.sdk_config import CONFIG_ENV, estimator_arguments, main, sdk_defaults
from stacks.components.training_job_spec import CHECKPOINT_PREFIX, OUTPUT_PREFIX, load_metric_definitions
from stacks.gpu_instances import gpu_instance_types, lookup
from tests.offline import loopback_only
from tests.scripts.conftest import PROJECT, REGION

os.environ.setdefault("SAGEMAKER_SUPPRESS_V2_WARNING", "1")
sagemaker = pytest.importorskip("sagemaker")


def _generate(tmp_path: Path, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[Path, dict[str, Any], str]:
    out = tmp_path / "sdk" / "config.yaml"
    assert main(["--out", str(out), *argv]) == 0
    printed = capsys.readouterr().out
    return out, yaml.safe_load(out.read_text(encoding="utf-8")), printed


def test_prints_where_it_wrote_and_the_export_line(aws, tmp_path, capsys):
    out, _, printed = _generate(tmp_path, capsys)
    lines = printed.splitlines()
    assert lines[0] == f"wrote {out}"
    assert lines[1] == f"export {CONFIG_ENV}={out}"
    # The schema gaps are named, with the estimator arguments that close them.
    assert "RetryStrategy" in printed and "max_retry_attempts=2," in printed
    assert f"s3://{aws.data['ArtifactsBucketName']}/{CHECKPOINT_PREFIX}<job name>/" in printed
    assert f"the job role reads only s3://{aws.data['DatasetsBucketName']}/train/ " in printed


def test_the_file_validates_against_the_sdks_own_schema(aws, tmp_path, capsys, monkeypatch):
    from sagemaker.config import load_sagemaker_config, validate_sagemaker_config

    out, document, _ = _generate(tmp_path, capsys)
    validate_sagemaker_config(document)  # raises jsonschema.ValidationError
    # And the SDK's loader picks it up from the variable the script prints.
    monkeypatch.setenv(CONFIG_ENV, str(out))
    assert load_sagemaker_config() == document


def test_every_value_comes_from_the_stack_outputs_and_the_config(aws, tmp_path, capsys):
    _, document, _ = _generate(tmp_path, capsys, "-c", 'tags={"CostCenter": "ml-research"}')
    job = document["SageMaker"]["TrainingJob"]
    assert job["RoleArn"] == aws.training["JobRoleArn"]
    assert job["VpcConfig"] == {
        "SecurityGroupIds": [aws.training["JobSecurityGroupId"]],
        "Subnets": aws.data["PrivateSubnetIds"].split(","),
    }
    assert job["EnableNetworkIsolation"] is True
    assert job["OutputDataConfig"] == {"KmsKeyId": aws.data["KeyArn"]}
    assert job["ResourceConfig"] == {"VolumeKmsKeyId": aws.data["KeyArn"]}
    assert job["Tags"] == [{"Key": "Project", "Value": PROJECT}, {"Key": "CostCenter", "Value": "ml-research"}]
    modules = document["SageMaker"]["PythonSDK"]["Modules"]
    assert modules["Session"] == {"DefaultS3Bucket": aws.data["ArtifactsBucketName"], "DefaultS3ObjectKeyPrefix": OUTPUT_PREFIX.strip("/")}
    assert modules["TelemetryOptOut"] is True


def test_values_match_the_platforms_own_job_request(aws):
    deployment = Deployment(config=load_platform_config(), aws=Aws(boto3.Session()))
    defaults = sdk_defaults(deployment)
    job, request = defaults.config["SageMaker"]["TrainingJob"], defaults.request
    for key in ("RoleArn", "VpcConfig", "EnableNetworkIsolation", "Tags"):
        assert job[key] == request[key], key
    assert job["OutputDataConfig"]["KmsKeyId"] == request["OutputDataConfig"]["KmsKeyId"]
    arguments = estimator_arguments(defaults, f"{PROJECT}-run-7")
    assert arguments["max_retry_attempts"] == request["RetryStrategy"]["MaximumRetryAttempts"]
    assert arguments["use_spot_instances"] is request["EnableManagedSpotTraining"] is True
    assert arguments["max_run"] == request["StoppingCondition"]["MaxRuntimeInSeconds"]
    assert arguments["max_wait"] == request["StoppingCondition"]["MaxWaitTimeInSeconds"]
    assert arguments["volume_size"] == request["ResourceConfig"]["VolumeSizeInGB"]
    assert arguments["metric_definitions"] == load_metric_definitions()
    assert arguments["checkpoint_s3_uri"] == f"s3://{aws.data['ArtifactsBucketName']}/{CHECKPOINT_PREFIX}{PROJECT}-run-7/"
    assert arguments["base_job_name"] == PROJECT
    assert arguments["code_location"] == f"s3://{aws.data['ArtifactsBucketName']}/code"


def test_missing_stack_is_one_line_and_exit_3(aws, tmp_path, capsys):
    assert run(main, ["--out", str(tmp_path / "c.yaml"), "-c", "project_name=nosuch"]) == 3
    err = capsys.readouterr().err
    assert err.startswith("error: stack nosuch-") and err.count("\n") == 1
    assert not (tmp_path / "c.yaml").exists()


def _session() -> Any:
    from sagemaker.session import Session

    return Session(boto_session=boto3.Session(region_name=REGION))


def test_with_the_file_the_sdk_finds_its_bucket_without_leaving_the_endpoint(aws, tmp_path, capsys, monkeypatch):
    out, _, _ = _generate(tmp_path, capsys)
    monkeypatch.setenv(CONFIG_ENV, str(out))
    with loopback_only(monkeypatch) as outside:
        session = _session()
        assert session.default_bucket() == aws.data["ArtifactsBucketName"]
        assert session.default_bucket_prefix == OUTPUT_PREFIX.strip("/")
    assert outside == []


def test_without_the_file_the_sdk_asks_the_public_sts_endpoint(aws, monkeypatch, tmp_path):
    # What the issue saw: the SDK names its default bucket sagemaker-<region>-<account> and asks
    # STS for the account with an explicit endpoint_url, which AWS_ENDPOINT_URL does not override.
    monkeypatch.setenv(CONFIG_ENV, str(tmp_path / "absent-dir"))
    (tmp_path / "absent-dir").mkdir()
    (tmp_path / "absent-dir" / "config.yaml").write_text("SchemaVersion: '1.0'\n")
    with loopback_only(monkeypatch) as outside:
        with pytest.raises(Exception):
            _session().default_bucket()
    assert outside and outside[0] == f"sts.{REGION}.amazonaws.com"


@pytest.mark.parametrize("instance_type", sorted(gpu_instance_types()))
def test_sdk_and_platform_agree_where_a_volume_key_is_allowed(instance_type):
    # The file always names the volume key; the SDK drops it for types with local NVMe, which
    # SageMaker rejects it for. The platform's request makes the same call from the GPU table.
    from sagemaker.utils import instance_supports_kms

    assert instance_supports_kms(f"ml.{instance_type}") is (lookup(f"ml.{instance_type}").local_nvme_gb == 0)


def test_telemetry_stays_home_only_with_the_file(aws, tmp_path, capsys, monkeypatch):
    # Every Estimator.fit is wrapped in the SDK's telemetry emitter: unless opted out, it sends a
    # GET with the account id to a public AWS S3 bucket, whatever AWS_ENDPOINT_URL says.
    from sagemaker.telemetry.constants import Feature
    from sagemaker.telemetry.telemetry_logging import _telemetry_emitter

    class Fitting:
        def __init__(self, session: Any) -> None:
            self.sagemaker_session = session

        @_telemetry_emitter(feature=Feature.ESTIMATOR_V2, func_name="estimator.fit")
        def fit(self) -> str:
            return "fitted"

    out, _, _ = _generate(tmp_path, capsys)
    bare = tmp_path / "bare.yaml"
    bare.write_text("SchemaVersion: '1.0'\n")
    tried = {}
    for name, path in (("generated", out), ("bare", bare)):
        monkeypatch.setenv(CONFIG_ENV, str(path))
        with loopback_only(monkeypatch) as outside:
            assert Fitting(_session()).fit() == "fitted"
        tried[name] = outside
    assert tried["generated"] == []
    assert tried["bare"] == [f"sm-pysdk-t-{REGION}.s3.{REGION}.amazonaws.com"]


@pytest.mark.slow
def test_processors_get_the_platforms_processing_role_network_and_output_key(aws, tmp_path, capsys, monkeypatch):
    out, document, _ = _generate(tmp_path, capsys)
    job = document["SageMaker"]["ProcessingJob"]
    training = document["SageMaker"]["TrainingJob"]
    assert job["RoleArn"] == aws.training["ProcessingRoleArn"] != training["RoleArn"]
    assert job["NetworkConfig"] == {"EnableNetworkIsolation": True, "EnableInterContainerTrafficEncryption": True,
                                    "VpcConfig": training["VpcConfig"]}
    assert job["ProcessingOutputConfig"] == {"KmsKeyId": aws.data["KeyArn"]}
    assert job["Tags"] == training["Tags"]
    assert "ProcessingResources" not in job  # a volume key would be refused on g5 (local NVMe)
    # What a ScriptProcessor built with no role, network or key resolves from the file.
    monkeypatch.setenv(CONFIG_ENV, str(out))
    from sagemaker.processing import ScriptProcessor
    from sagemaker.session import Session

    processor = ScriptProcessor(image_uri=aws.data["ImageUri"], command=["python3"], instance_type="ml.g5.xlarge", instance_count=1,
                                sagemaker_session=Session(boto3.Session(region_name=REGION)))
    assert processor.role == aws.training["ProcessingRoleArn"]
    assert processor.network_config.enable_network_isolation is True
    assert processor.network_config.subnets == training["VpcConfig"]["Subnets"]
    assert processor.output_kms_key == aws.data["KeyArn"]
