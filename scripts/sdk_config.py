"""Write the SageMaker Python SDK's own defaults file from the deployed stacks.

Usage (from the repository root)::

    python -m scripts.sdk_config                    # writes .work/sagemaker-sdk/config.yaml
    python -m scripts.sdk_config --out PATH         # e.g. ~/.config/sagemaker/config.yaml (Linux)
    export SAGEMAKER_USER_CONFIG_OVERRIDE=$PWD/.work/sagemaker-sdk/config.yaml

The SDK's "intelligent defaults" (``sagemaker.config``, schema ``1.0``) fill in what an
estimator is not given. The file is built from the same request the platform's own jobs send
(:func:`scripts.launch.direct_request`, from the stacks' outputs and ``cdk.json``), so an SDK job
gets the platform's role, private subnets and security group, network isolation, KMS keys for
the volume and the output, the project's cost tags (the teardown audit finds jobs by them), the
artifacts bucket and output prefix as default bucket and output path, no profiler or debugger
hook (the image ships neither), and telemetry off.

Telemetry off and a default bucket are what keep the SDK on the endpoint you configured: without
a ``DefaultS3Bucket`` the SDK names its bucket ``sagemaker-<region>-<account>`` and asks STS for
the account with an explicit ``endpoint_url`` of the public regional STS endpoint
(``sagemaker.session.generate_default_sagemaker_bucket_name``), which overrides
``AWS_ENDPOINT_URL``; with telemetry on it sends a GET with the account id to a public AWS S3
bucket after every ``fit``.

The schema has no place for a retry strategy, managed spot, stopping conditions, per-job
checkpoints, metric definitions, the job name prefix or the code location. The script prints the estimator
arguments that give a job the same values (:func:`estimator_arguments`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from scripts.common import AWS_CREDENTIALS, ROOT, Deployment, add_common_arguments, help_epilog, parse_operator_args, run
from scripts.launch import direct_request
from stacks.components.training_job_spec import CHECKPOINT_LOCAL_PATH, CHECKPOINT_PREFIX, CODE_PREFIX, LaunchOptions

CONFIG_ENV = "SAGEMAKER_USER_CONFIG_OVERRIDE"
"""The SDK reads its user defaults file from here (else the user config folder,
``~/.config/sagemaker/config.yaml`` on Linux)."""

DEFAULT_OUT = ROOT / ".work" / "sagemaker-sdk" / "config.yaml"

NOT_IN_SCHEMA = (
    "RetryStrategy",
    "EnableManagedSpotTraining",
    "StoppingCondition",
    "CheckpointConfig",
    "MetricDefinitions",
    "job name prefix",
    "code location",
    "debugger hook (SDK v2's Estimator key, which SDK v3 refuses in this file)",
)
"""What the platform's jobs carry that the SDK's config schema (1.0) cannot hold."""


@dataclass(frozen=True)
class SdkDefaults:
    """The defaults file and what has to travel as estimator arguments instead.

    Attributes:
        config: The SDK config document (``SchemaVersion`` 1.0).
        request: The platform's CreateTrainingJob request it was derived from (the deployment's
            default instance type, job name ``<project>-sdk-defaults``).
        key_arn: The platform's KMS key (volume and output).
        artifacts_bucket: The default bucket.
        project_name: Job names start with ``<project_name>-``.
    """

    config: dict[str, Any]
    request: Mapping[str, Any]
    key_arn: str
    artifacts_bucket: str
    project_name: str


def sdk_defaults(deployment: Deployment) -> SdkDefaults:
    """Read the stacks' outputs and build the defaults from the platform's own job request."""
    request = direct_request(deployment, LaunchOptions(job_name=f"{deployment.config.project_name}-sdk-defaults"))
    resources = deployment.job_resources()
    # The processing role exists when the pipeline is deployed (the training stack's output).
    processing_role = deployment.training_outputs().get("ProcessingRoleArn")
    return SdkDefaults(
        config=build_config(request, key_arn=resources.key_arn, processing_role_arn=processing_role),
        request=request,
        key_arn=resources.key_arn,
        artifacts_bucket=resources.artifacts_bucket,
        project_name=deployment.config.project_name,
    )


def _split_s3(uri: str) -> tuple[str, str]:
    bucket, _, key = uri[len("s3://") :].partition("/")
    return bucket, key


def build_config(request: Mapping[str, Any], *, key_arn: str, processing_role_arn: str | None = None) -> dict[str, Any]:
    """The SDK config document for jobs like ``request`` (a platform CreateTrainingJob request).

    Args:
        request: What :func:`scripts.launch.direct_request` builds.
        key_arn: The platform key. Taken separately because the request leaves the volume key
            out on types with local NVMe; the SDK makes the same call per instance type
            (``sagemaker.utils.instance_supports_kms``), so the file always names it.
        processing_role_arn: The pipeline's processing role; with it, processors
            (``ScriptProcessor``, ``FrameworkProcessor``...) get the platform's processing role,
            network and output key as their defaults too.
    """
    bucket, prefix = _split_s3(request["OutputDataConfig"]["S3OutputPath"])
    training_job: dict[str, Any] = {
        "RoleArn": request["RoleArn"],
        "EnableNetworkIsolation": request["EnableNetworkIsolation"],
        "VpcConfig": {
            "SecurityGroupIds": list(request["VpcConfig"]["SecurityGroupIds"]),
            "Subnets": list(request["VpcConfig"]["Subnets"]),
        },
        "OutputDataConfig": {"KmsKeyId": request["OutputDataConfig"]["KmsKeyId"]},
        "ResourceConfig": {"VolumeKmsKeyId": key_arn},
        # The platform encrypts traffic between instances whenever there is more than one; the
        # file cannot depend on the count, and with one instance the setting has nothing to do.
        "EnableInterContainerTrafficEncryption": True,
        # The image has neither the profiler nor smdebug; the platform's jobs run without them.
        "ProfilerConfig": {"DisableProfiler": True},
        "Tags": [dict(tag) for tag in request["Tags"]],
    }
    processing_job: dict[str, Any] = {
        "RoleArn": processing_role_arn,
        "NetworkConfig": {
            "EnableNetworkIsolation": request["EnableNetworkIsolation"],
            "EnableInterContainerTrafficEncryption": True,
            "VpcConfig": training_job["VpcConfig"],
        },
        "ProcessingOutputConfig": {"KmsKeyId": request["OutputDataConfig"]["KmsKeyId"]},
        # No VolumeKmsKeyId: unlike estimators, the SDK's processors do not drop it on instance
        # types with local NVMe (which SageMaker refuses it for), so it would break g5/p4d jobs.
        "Tags": training_job["Tags"],
    }
    return {
        "SchemaVersion": "1.0",
        "SageMaker": {
            **({"ProcessingJob": processing_job} if processing_role_arn else {}),
            "PythonSDK": {
                "Modules": {
                    "TelemetryOptOut": True,
                    # Outputs go to s3://<bucket>/<prefix>/<job>/output/, where the platform's jobs
                    # put theirs (code too, without code_location); no STS lookup for a bucket name.
                    "Session": {"DefaultS3Bucket": bucket, "DefaultS3ObjectKeyPrefix": prefix.strip("/")},
                    # No Estimator.DebugHookConfig here: SDK v3 validates this file against a schema
                    # without v2's Estimator module and refuses the whole file; the debugger hook is
                    # turned off with an estimator argument instead (estimator_arguments).
                }
            },
            "TrainingJob": training_job,
        },
    }


def estimator_arguments(defaults: SdkDefaults, job_name: str) -> dict[str, Any]:
    """Estimator keyword arguments for what the config schema cannot hold (see :data:`NOT_IN_SCHEMA`).

    Pass them with ``fit(..., job_name=job_name)``: the checkpoint prefix is per job, as for the
    platform's jobs (a shared prefix would let one job resume from another's checkpoints).
    """
    request = defaults.request
    stopping = request["StoppingCondition"]
    arguments: dict[str, Any] = {
        "base_job_name": defaults.project_name,
        "max_retry_attempts": request["RetryStrategy"]["MaximumRetryAttempts"],
        "use_spot_instances": request["EnableManagedSpotTraining"],
        "max_run": stopping["MaxRuntimeInSeconds"],
        "volume_size": request["ResourceConfig"]["VolumeSizeInGB"],
        "metric_definitions": list(request["AlgorithmSpecification"]["MetricDefinitions"]),
        # Users' code lives under the code prefix, which the job role may read but not write;
        # the SDK adds <job>/source/sourcedir.tar.gz and encrypts it with the output key.
        "code_location": f"s3://{defaults.artifacts_bucket}/{CODE_PREFIX.rstrip('/')}",
        # The image has no smdebug: no debugger hook (the file cannot say so for both SDKs).
        "debugger_hook_config": False,
    }
    if "MaxWaitTimeInSeconds" in stopping:
        arguments["max_wait"] = stopping["MaxWaitTimeInSeconds"]
    if "CheckpointConfig" in request:
        arguments["checkpoint_s3_uri"] = f"s3://{defaults.artifacts_bucket}/{CHECKPOINT_PREFIX}{job_name}/"
        arguments["checkpoint_local_path"] = CHECKPOINT_LOCAL_PATH
    return arguments


def input_locations(request: Mapping[str, Any]) -> list[str]:
    """The S3 prefixes the platform's job role may read input from (its channels' locations)."""
    return sorted({c["DataSource"]["S3DataSource"]["S3Uri"] for c in request["InputDataConfig"]})


def to_yaml(value: Any, indent: int = 0) -> str:
    """Block-style YAML for dicts, lists, strings, booleans and numbers (no PyYAML needed).

    Strings are written as JSON strings, which are valid YAML double-quoted scalars.
    """
    pad = "  " * indent
    lines: list[str] = []
    if isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(item, (Mapping, list)) and item:
                lines.append(f"{pad}{key}:")
                lines.append(to_yaml(item, indent + 1))
            else:
                lines.append(f"{pad}{key}: {_scalar(item)}")
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, Mapping) and item:
                first, *rest = to_yaml(item, indent + 1).splitlines()
                lines.append(f"{pad}- {first.lstrip()}")
                lines.extend(rest)
            else:
                lines.append(f"{pad}- {_scalar(item)}")
    else:
        lines.append(pad + _scalar(value))
    return "\n".join(lines)


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, (Mapping, list)):
        return "{}" if isinstance(value, Mapping) else "[]"
    return json.dumps(str(value))


def render(defaults: SdkDefaults, source: str) -> str:
    """The file's text: a header saying where it came from, then the document."""
    header = (
        f"# SageMaker Python SDK defaults for the {defaults.project_name} platform, generated by\n"
        f"# python -m scripts.sdk_config from {source}. Regenerate after a deploy; do not edit.\n"
        f"# Use it with: export {CONFIG_ENV}=<this file>\n"
    )
    return header + to_yaml(defaults.config) + "\n"


def write(defaults: SdkDefaults, out: Path, source: str) -> Path:
    """Write the file (and its folder); return its absolute path."""
    out = out.expanduser().resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(defaults, source), encoding="utf-8")
    return out


def usage(defaults: SdkDefaults, path: Path) -> str:
    """What to run next, and the estimator arguments for what the file cannot hold."""
    example_name = f"{defaults.project_name}-my-run-1"
    arguments = estimator_arguments(defaults, example_name)
    metric_count = len(arguments.pop("metric_definitions"))
    lines = [
        f"wrote {path}",
        f"export {CONFIG_ENV}={path}",
        "",
        "The SDK's config schema has no place for: " + ", ".join(NOT_IN_SCHEMA) + ".",
        "Give your estimator these arguments for the platform's values, and fit(..., job_name=...):",
    ]
    lines += [f"    {key}={python_literal(value)}," for key, value in arguments.items()]
    lines.append(f"    metric_definitions=<the {metric_count} regexes in training_image/trainer/metric_definitions.json>,")
    lines.append(f"(checkpoint_s3_uri is per job: s3://{defaults.artifacts_bucket}/{CHECKPOINT_PREFIX}<job name>/)")
    lines.append("")
    lines.append(
        "Input data: the job role reads only " + ", ".join(input_locations(defaults.request))
        + " (training_job.channels); put your channels' data there."
    )
    return "\n".join(lines)


def python_literal(value: Any) -> str:
    """``value`` as Python source, strings in double quotes (as the README writes them)."""
    return json.dumps(value) if isinstance(value, str) else repr(value)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.sdk_config",
        description="Write the SageMaker Python SDK's defaults file (config.yaml) from the deployed stacks.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=help_epilog(
            "python -m scripts.sdk_config",
            [
                ("", "write .work/sagemaker-sdk/config.yaml; then export SAGEMAKER_USER_CONFIG_OVERRIDE"),
                ("--out ~/.config/sagemaker/config.yaml", "where the SDK looks without the variable (Linux)"),
            ],
            credentials=AWS_CREDENTIALS,
            done="written; the estimator arguments the file cannot hold are printed",
        ),
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"file to write (default: {DEFAULT_OUT.relative_to(ROOT)})")
    add_common_arguments(parser)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args, deployment = parse_operator_args(build_parser(), argv)
    defaults = sdk_defaults(deployment)
    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    source = f"the stacks in {deployment.aws.region}" + (f" at {endpoint}" if endpoint else "")
    print(usage(defaults, write(defaults, args.out, source)))
    return 0


if __name__ == "__main__":
    sys.exit(run(main))
