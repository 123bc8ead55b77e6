"""scripts.preflight against moto.

moto has the EC2 instance-type offerings by region and AZ, STS and SSM. Its Service Quotas only
knows the vpc service, so conftest serves the EC2 and SageMaker quotas a test sets; the DLAMI
parameter (an AWS public parameter moto lacks) is put into moto's backend.
"""

from __future__ import annotations

import json

import boto3
import pytest

from scripts.common import run
from scripts.preflight import DLAMI_PARAMETER, main
from tests.scripts.conftest import QUOTAS, REGION

DLAMI = DLAMI_PARAMETER.format(flavour="base-oss-nvidia-driver-gpu-ubuntu-22.04")


@pytest.fixture
def healthy_account(aws, moto_backends):
    """Everything the default config needs is in place."""
    QUOTAS.applied.update(
        {("ec2", "L-DB2E81BA"): 8, ("ec2", "L-417A185B"): 0, ("ec2", "L-3819A6DF"): 8, ("ec2", "L-7212CCBC"): 0}
    )
    QUOTAS.sagemaker_defaults.update(
        {"ml.g5.xlarge for training job usage": 2, "ml.g5.xlarge for spot training job usage": 2}
    )
    moto_backends.put_public_parameter(DLAMI, "ami-0123456789abcdef0")
    ssm = boto3.client("ssm", region_name=REGION)
    ssm.put_parameter(Name="/cdk-bootstrap/hnb659fds/version", Value="27", Type="String", Overwrite=True)
    yield
    ssm.delete_parameter(Name="/cdk-bootstrap/hnb659fds/version")


def _rows(out: str) -> dict[str, str]:
    """CHECK -> RESULT from the table."""
    rows = {}
    for line in out.splitlines()[1:]:
        if not line.strip() or line.startswith("to fix"):
            break
        result, rest = line.split(None, 1)
        rows[rest.split("  ")[0].strip()] = result
    return rows


def test_a_ready_account_passes_every_check(healthy_account, capsys):
    assert run(main, []) == 0
    rows = _rows(capsys.readouterr().out)
    assert set(rows.values()) == {"OK"}
    assert {
        "account and region",
        f"g5.xlarge in {REGION} (cluster + training job)",
        "g5.xlarge in us-east-1a (cluster + training job)",
        "g5.xlarge in us-east-1b (cluster + training job)",
        "EC2 vCPUs: Running On-Demand G and VT instances",
        "EC2 vCPUs: All P Spot Instance Requests",
        "SageMaker: ml.g5.xlarge for training job usage",
        "SageMaker: ml.g5.xlarge for spot training job usage",
        "DLAMI parameter",
        "CDK bootstrap",
    } <= set(rows)


def test_short_quotas_missing_bootstrap_and_an_unoffered_az_fail_with_fixes(healthy_account, capsys):
    QUOTAS.applied[("ec2", "L-DB2E81BA")] = 0  # the g5.xlarge node needs 4 vCPUs
    QUOTAS.sagemaker_defaults["ml.g5.xlarge for spot training job usage"] = 0
    # In moto's offering data (as in AWS) g6e.48xlarge is not in every us-east-1 AZ; max_azs=6 uses them all.
    # A bootstrap qualifier that was never bootstrapped.
    assert run(main, ["-c", "network.max_azs=6", "-c", "cluster.instance_type=g6e.48xlarge", "--qualifier", "other"]) == 1
    out = capsys.readouterr().out
    rows = _rows(out)
    assert rows["EC2 vCPUs: Running On-Demand G and VT instances"] == "FAIL"
    assert rows["SageMaker: ml.g5.xlarge for spot training job usage"] == "FAIL"
    assert rows["CDK bootstrap"] == "FAIL"
    assert "run: npx cdk bootstrap aws://123456789012/us-east-1" in out
    assert "request ec2 quota L-DB2E81BA >= 192 vCPUs" in out
    unoffered = [name for name, result in rows.items() if name.startswith("g6e.48xlarge in us-east-1") and result == "FAIL"]
    assert unoffered, out


def test_missing_dlami_parameter_fails(healthy_account, capsys):
    assert run(main, ["-c", "cluster.dlami_flavour=no-such-flavour"]) == 1
    out = capsys.readouterr().out
    assert _rows(out)["DLAMI parameter"] == "FAIL"
    assert "check cluster.dlami_flavour" in out


@pytest.mark.slow
def test_a_pinned_dlami_is_looked_up_in_the_region(healthy_account, capsys):
    pinned = '{"ami_id": "ami-0fedcba9876543210", "nvidia_driver_branch": 580}'
    assert run(main, ["-c", "cluster.instance_type=p3.2xlarge", "-c", f"cluster.pinned_dlami={pinned}"]) == 1
    out = capsys.readouterr().out
    assert _rows(out)["pinned DLAMI"] == "FAIL" and "ami-0fedcba9876543210 not found in us-east-1" in out
    image = boto3.client("ec2", region_name=REGION).describe_images()["Images"][0]
    pinned = json.dumps({"ami_id": image["ImageId"], "nvidia_driver_branch": 580})
    run(main, ["-c", f"cluster.pinned_dlami={pinned}"])
    assert _rows(capsys.readouterr().out)["pinned DLAMI"] == "OK"


class _Answered:
    status_code = 200
    headers: dict = {}


class _Refused:
    status_code = 400
    headers: dict = {}


def test_an_interface_endpoint_a_zone_does_not_offer_fails_naming_the_zone(healthy_account, monkeypatch, capsys):
    """Zone names map to different zones per account: where sagemaker.api is not offered in the second
    zone, the data stack's endpoint would fail its deploy; a service the region lacks fails too."""
    plain_client = boto3.session.Session.client

    def answer(params, **_):
        service = params["body"]["ServiceName.1"]  # the serialized EC2 query request
        if service.endswith(".sagemaker.api"):
            return _Answered(), {"ServiceDetails": [{"ServiceName": service, "AvailabilityZones": [f"{REGION}a", f"{REGION}c"]}]}
        if service.endswith(".logs"):
            return _Refused(), {"Error": {"Code": "InvalidServiceName", "Message": f"The Vpc Endpoint Service '{service}' does not exist"}}
        return None  # moto answers the others

    def client(self, service, *args, **kwargs):
        made = plain_client(self, service, *args, **kwargs)
        if service == "ec2":
            made.meta.events.register("before-call.ec2.DescribeVpcEndpointServices", answer)
        return made

    monkeypatch.setattr(boto3.session.Session, "client", client)
    assert run(main, []) == 1
    out = capsys.readouterr().out
    rows = _rows(out)
    assert rows["endpoint sagemaker.api"] == "FAIL" and rows["endpoint ecr.dkr"] == "OK", out
    assert f"the data stack's sagemaker.api endpoint cannot go into {REGION}b: pick zones that offer it" in out
    assert rows["endpoint logs"] == "FAIL" and f"com.amazonaws.{REGION}.logs not offered in {REGION}" in out
